/*
 * mlp.c - the smallest complete resgrad program: a 2-16-16-2 tanh MLP learns to tell two
 * interleaved spirals apart.
 *
 * It uses only the public API (CMake links it against the shared library, which exports
 * nothing else) and follows docs/ARCHITECTURE.md's "A step, as data flows through it": per step
 * one rg_step_begin, one upload of the batch, recorded ops, rg_backward, one optimizer
 * step, and one rg_item, the only barrier of the step. It prints the loss as it falls,
 * then the accuracy on the training points and on fresh points from the same spirals.
 *
 * usage: mlp [steps]          (default 1500 full-batch AdamW steps)
 * exit:  0 learned (test accuracy >= 90%); 1 a resgrad call failed (its message is
 *        printed); 2 trained without error but did not learn.
 */
#include <resgrad.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N_TRAIN 512
#define N_TEST 512
#define HIDDEN 16
#define PRINT_EVERY 100

/* ---- data: two spirals, generated deterministically ------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }
static double rng_normal(uint64_t *s) {
  double u1 = rng_uniform(s), u2 = rng_uniform(s);
  return sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2);
}

/* Point i of n: class i % 2, a random position along that class's arm (2 turns),
   the two arms half a turn apart, plus a little noise. Coordinates lie in about [-1, 1]. */
static void make_spirals(int n, uint64_t seed, float *x, int32_t *y) {
  uint64_t s = seed;
  for (int i = 0; i < n; i++) {
    int c = i % 2;
    double t = 0.1 + 0.9 * rng_uniform(&s);      /* 0..1 along the arm */
    double angle = t * 4.0 * 3.141592653589793 + c * 3.141592653589793;
    x[2 * i + 0] = (float)(t * cos(angle) + 0.03 * rng_normal(&s));
    x[2 * i + 1] = (float)(t * sin(angle) + 0.03 * rng_normal(&s));
    y[i] = c;
  }
}

/* ---- the model -------------------------------------------------------------------- */

typedef struct mlp {
  rg_tensor w1, b1, w2, b2, w3, b3;
} mlp;

/* PyTorch's default nn.Linear initialisation: U(-1/sqrt(in), 1/sqrt(in)) for both. */
static void linear_params(rg_ctx *ctx, const char *name, int in, int out, rg_tensor *w,
                          rg_tensor *b) {
  char wname[32], bname[32];
  float k = 1.0f / sqrtf((float)in);
  rg_init init = {RG_INIT_UNIFORM, -k, k};
  snprintf(wname, sizeof wname, "%s.weight", name);
  snprintf(bname, sizeof bname, "%s.bias", name);
  *w = rg_param(ctx, wname, RG_F32, 2, (int64_t[]){out, in}, init);
  *b = rg_param(ctx, bname, RG_F32, 1, (int64_t[]){out}, init);
}

static rg_tensor forward(rg_ctx *ctx, const mlp *m, rg_tensor x) {
  rg_tensor h = rg_tanh(ctx, rg_linear(ctx, x, m->w1, m->b1));
  h = rg_tanh(ctx, rg_linear(ctx, h, m->w2, m->b2));
  return rg_linear(ctx, h, m->w3, m->b3); /* logits [n, 2] */
}

/* Fraction of points whose larger logit is their class. Records a forward pass in a
   fresh step and reads the logits back (one barrier). Returns -1 on error. */
static double accuracy(rg_ctx *ctx, const mlp *m, int n, const float *x, const int32_t *y) {
  float *logits = malloc(sizeof(float) * 2 * (size_t)n);
  if (!logits) return -1;
  rg_step_begin(ctx);
  rg_tensor xin = rg_input(ctx, RG_F32, 2, (int64_t[]){n, 2}, x);
  rg_tensor out = forward(ctx, m, xin);
  double acc = -1;
  if (rg_read(ctx, out, logits, sizeof(float) * 2 * (size_t)n) == RG_OK) {
    int right = 0;
    for (int i = 0; i < n; i++) right += (logits[2 * i + 1] > logits[2 * i]) == (y[i] == 1);
    acc = (double)right / n;
  }
  free(logits);
  return acc;
}

static double seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(rg_ctx *ctx, const char *what) {
  fprintf(stderr, "mlp: %s failed: %s: %s\n", what, rg_status_str(rg_error(ctx)),
          rg_errmsg(ctx));
  rg_close(ctx);
  return 1;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 1500;
  if (steps <= 0) {
    fprintf(stderr, "usage: %s [steps > 0]\n", argv[0]);
    return 1;
  }

  static float xtr[N_TRAIN * 2], xte[N_TEST * 2];
  static int32_t ytr[N_TRAIN], yte[N_TEST];
  make_spirals(N_TRAIN, 1, xtr, ytr);
  make_spirals(N_TEST, 2, xte, yte);

  rg_ctx *ctx;
  rg_options opt = {.seed = 42};
  rg_status st = rg_open(&ctx, &opt); /* GPU if there is one, else the CPU */
  if (st != RG_OK) {
    fprintf(stderr, "mlp: rg_open failed: %s\n", rg_status_str(st));
    return 1;
  }
  printf("resgrad %s on %s: 2-%d-%d-2 tanh MLP, two spirals, %d points, %d steps\n",
         rg_version(), rg_device_name(ctx), HIDDEN, HIDDEN, N_TRAIN, steps);

  mlp m;
  linear_params(ctx, "fc1", 2, HIDDEN, &m.w1, &m.b1);
  linear_params(ctx, "fc2", HIDDEN, HIDDEN, &m.w2, &m.b2);
  linear_params(ctx, "fc3", HIDDEN, 2, &m.w3, &m.b3);
  rg_optim *adam = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 0.02f});
  if (!adam || rg_error(ctx) != RG_OK) return fail(ctx, "model setup");

  double t0 = seconds();
  float loss_value = 0;
  for (int step = 0; step < steps; step++) {
    rg_step_begin(ctx); /* last step's pass pool (inputs, activations) is gone */
    rg_tensor x = rg_input(ctx, RG_F32, 2, (int64_t[]){N_TRAIN, 2}, xtr);
    rg_tensor y = rg_input(ctx, RG_I32, 1, (int64_t[]){N_TRAIN}, ytr);
    rg_tensor loss = rg_cross_entropy(ctx, forward(ctx, &m, x), y);
    rg_backward(ctx, loss);
    rg_optim_step(adam);
    rg_zero_grad(ctx);
    /* The one barrier of the step: everything above runs here. An error in any call
       above is sticky, so one check covers the whole step. */
    if (rg_item(ctx, loss, &loss_value) != RG_OK || rg_error(ctx) != RG_OK)
      return fail(ctx, "training step");
    if (step % PRINT_EVERY == 0 || step == steps - 1)
      printf("step %5d  loss %.4f\n", step, loss_value);
  }
  double dt = seconds() - t0;
  printf("%d steps in %.2f s (%.3f ms/step)\n", steps, dt, 1e3 * dt / steps);

  double acc_train = accuracy(ctx, &m, N_TRAIN, xtr, ytr);
  double acc_test = accuracy(ctx, &m, N_TEST, xte, yte);
  if (acc_train < 0 || acc_test < 0) return fail(ctx, "evaluation");
  printf("accuracy: train %.1f%%, test %.1f%% (fresh points)\n", 100 * acc_train,
         100 * acc_test);

  rg_optim_free(adam);
  st = rg_close(ctx);
  if (st != RG_OK) {
    fprintf(stderr, "mlp: rg_close failed: %s\n", rg_status_str(st));
    return 1;
  }
  if (acc_test < 0.9) {
    fprintf(stderr, "mlp: the model did not learn (test accuracy %.1f%% < 90%%)\n",
            100 * acc_test);
    return 2;
  }
  return 0;
}
