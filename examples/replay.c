/*
 * replay.c - learning action values from a replay buffer on the device.
 *
 * A contextual bandit: a state s is a point of the plane, one of three actions is taken,
 * and the reward is r = s0 (action 0), s1 (action 1) or 0.6 - |s0| - |s1| (action 2),
 * plus noise. A behaviour policy that acts at random fills a ring buffer of transitions
 * (s0, s1, the action one-hot, r); each step pushes the step's new transitions, draws a
 * batch from the ring on the device (rg_ring_sample), and fits a 2-32-3 tanh network's
 * value of the action taken to its reward. Sampling costs no transfer: a step is one
 * small upload (the new transitions) and one 4-byte download (the loss), which the
 * program checks from rg_stats and prints. At the end the greedy policy of the learned
 * values is scored on fresh states against a random policy and the best one.
 *
 *   ./build/replay            (exit 0: learned; 1: a resgrad error; 2: did not learn)
 */
#include <resgrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { A = 3, ROW = 2 + A + 1, CAP = 4096, NEW = 8, BATCH = 128, STEPS = 1500, TEST = 1000 };

static float uniform(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (float)(*s >> 8) / 16777216.0f;
}

static float reward(const float *s, int a) {
  return a == 0 ? s[0] : a == 1 ? s[1] : 0.6f - fabsf(s[0]) - fabsf(s[1]);
}

static int fail(rg_ctx *ctx) {
  fprintf(stderr, "replay: %s\n", rg_errmsg(ctx));
  rg_close(ctx);
  return 1;
}

int main(void) {
  rg_ctx *ctx;
  if (rg_open(&ctx, NULL) != RG_OK) return 1;
  rg_init normal = {RG_INIT_NORMAL, 0.5f, 0}, zeros = {RG_INIT_ZEROS, 0, 0};
  rg_tensor w1 = rg_param(ctx, "fc1.weight", RG_F32, 2, (int64_t[]){32, 2}, normal);
  rg_tensor b1 = rg_param(ctx, "fc1.bias", RG_F32, 1, (int64_t[]){32}, zeros);
  rg_tensor w2 = rg_param(ctx, "fc2.weight", RG_F32, 2, (int64_t[]){A, 32}, normal);
  rg_tensor b2 = rg_param(ctx, "fc2.bias", RG_F32, 1, (int64_t[]){A}, zeros);
  rg_optim *opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 3e-3f});
  rg_tensor ring = rg_ring_new(ctx, RG_F32, CAP, ROW); /* (s0, s1, one-hot action, r) */
  if (rg_error(ctx) != RG_OK) return fail(ctx);
  printf("resgrad %s on %s: a 2-32-%d network learns action values from a replay buffer "
         "of %d transitions\n", rg_version(), rg_device_name(ctx), A, CAP);
  unsigned seed = 7;
  float loss = 0;
  rg_stats s0, s1;
  for (int step = 0; step < STEPS; step++) {
    if (step == 10) rg_stats_get(ctx, &s0); /* past the first steps' one-off transfers */
    float t[NEW * ROW] = {0};
    for (int j = 0; j < NEW; j++) { /* the behaviour policy acts at random */
      float *row = t + j * ROW;
      row[0] = 2 * uniform(&seed) - 1, row[1] = 2 * uniform(&seed) - 1;
      int a = (int)(uniform(&seed) * A);
      row[2 + a] = 1;
      row[2 + A] = reward(row, a) + 0.1f * (uniform(&seed) - 0.5f);
    }
    rg_step_begin(ctx);
    rg_ring_push(ctx, ring, rg_input(ctx, RG_F32, 2, (int64_t[]){NEW, ROW}, t));
    rg_tensor b = rg_ring_gather(ctx, ring, rg_ring_sample(ctx, ring, BATCH));
    rg_tensor q = rg_linear(ctx, rg_tanh(ctx, rg_linear(ctx, rg_slice(ctx, b, 1, 0, 2), w1, b1)),
                            w2, b2);
    rg_tensor taken = rg_sum(ctx, rg_mul(ctx, q, rg_slice(ctx, b, 1, 2, A)), 1, 1);
    rg_tensor l = rg_mse(ctx, taken, rg_slice(ctx, b, 1, 2 + A, 1));
    rg_backward(ctx, l);
    rg_optim_step(opt);
    rg_zero_grad(ctx);
    if (rg_item(ctx, l, &loss) != RG_OK || rg_error(ctx) != RG_OK) return fail(ctx);
    if (step % 300 == 0 || step == STEPS - 1) printf("step %4d  loss %.4f\n", step, loss);
  }
  rg_stats_get(ctx, &s1);
  double steps = STEPS - 10;
  printf("per step: %.2f upload(s) of %.0f bytes, %.2f download(s) of %.0f bytes\n",
         (double)(s1.up.count - s0.up.count) / steps,
         (double)(s1.up.bytes - s0.up.bytes) / steps,
         (double)(s1.down.count - s0.down.count) / steps,
         (double)(s1.down.bytes - s0.down.bytes) / steps);
  int transfers = s1.up.count - s0.up.count == (uint64_t)steps &&
                  s1.down.count - s0.down.count == (uint64_t)steps &&
                  s1.down.bytes - s0.down.bytes == 4 * (uint64_t)steps;

  /* The greedy policy of the learned values on fresh states: one upload, one read. */
  static float x[TEST][2], qv[TEST][A];
  for (int i = 0; i < TEST; i++) x[i][0] = 2 * uniform(&seed) - 1, x[i][1] = 2 * uniform(&seed) - 1;
  rg_step_begin(ctx);
  rg_tensor xs = rg_input(ctx, RG_F32, 2, (int64_t[]){TEST, 2}, x);
  rg_tensor q = rg_linear(ctx, rg_tanh(ctx, rg_linear(ctx, xs, w1, b1)), w2, b2);
  if (rg_read(ctx, q, qv, sizeof qv) != RG_OK) return fail(ctx);
  double greedy = 0, random = 0, best = 0;
  for (int i = 0; i < TEST; i++) {
    int g = 0;
    float top = -INFINITY;
    for (int a = 0; a < A; a++) {
      float r = reward(x[i], a);
      random += r / A;
      if (r > top) top = r;
      if (qv[i][a] > qv[i][g]) g = a;
    }
    greedy += reward(x[i], g), best += top;
  }
  printf("mean reward on %d fresh states: greedy %.3f, random %.3f, best %.3f\n", TEST,
         greedy / TEST, random / TEST, best / TEST);
  rg_optim_free(opt);
  if (rg_close(ctx) != RG_OK) return 1;
  return transfers && greedy > 0.95 * best ? 0 : 2;
}
