/*
 * test_nccl.c - data-parallel training through NCCL on one GPU. rg_dist_init makes a
 * CUDA context rank 0 of a world of one (from the environment, as resgrad-run -n 1
 * does, and from rg_dist_options); that runs the whole NCCL path - a one-rank
 * communicator, ALLREDUCE nodes, their capture in the step's CUDA graph, the fault flag
 * - and must change no bit. The ranks run in child processes (dist_common.h), so this
 * process never touches CUDA.
 *
 * What is checked, on the MLP of dist_common.h on GPU 0:
 *  (a) STEPS steps give losses and weights bit-identical to the same context without
 *      rg_dist_init, with the default bucket size (one ALLREDUCE node) and with
 *      bucket_bytes 1 (one per gradient, six), and the steps replay as a CUDA graph as
 *      often as without rg_dist_init;
 *  (b) a step whose cross-entropy target is out of range fails with that op's message
 *      (the flag all-reduce runs, the fault stays this rank's own), the weights stay
 *      those of the last complete step, and the next step works; after rg_dist_close and
 *      a second rg_dist_init (a new communicator) the first step is not a replay of a
 *      graph that names the old one, and training goes on.
 *
 * Exits 77 (skipped) where no CUDA GPU is usable or the build has no NCCL.
 */
#define _POSIX_C_SOURCE 200809L

#include "dist_common.h"

static uint64_t replays(rg_ctx *ctx) {
  rg_stats st;
  rg_stats_get(ctx, &st);
  return st.graph_replays;
}

/* (a): aux[0], aux[1]: bit-identical (environment, bucket_bytes 1); aux[2], aux[3]:
   ALLREDUCE nodes of a step; aux[4]: replays without rg_dist_init; aux[5], aux[6]: with. */
static void same_bits(int rank, int world, int port, result *r) {
  (void)rank, (void)world, (void)port;
  result *d = calloc(1, sizeof *d);
  mlp m;
  rg_ctx *ctx = open_seeded();
  if (!d || !ctx || !build(ctx, &m, 0)) {
    free(d);
    rg_close(ctx);
    return;
  }
  train(ctx, &m, 0, 2 * B, r);
  r->aux[4] = (int)replays(ctx);
  rg_close(ctx);
  setenv("RG_WORLD_SIZE", "1", 1);
  setenv("RG_RANK", "0", 1);
  unsetenv("RG_RENDEZVOUS");
  for (int how = 0; how < 2 && r->status == RG_OK; how++) {
    rg_dist_options o = {.world_size = 1, .bucket_bytes = 1};
    ctx = open_seeded();
    if (!ctx || !build(ctx, &m, 0)) break;
    CHECK_ST(ctx, rg_dist_init(ctx, how ? &o : NULL), RG_OK);
    train(ctx, &m, 0, 2 * B, d);
    CHECK(d->status == RG_OK, "world 1 on CUDA: %s", d->msg);
    r->aux[how] = d->status == RG_OK && !memcmp(d->loss, r->loss, sizeof d->loss) &&
                  !memcmp(d->w, r->w, sizeof d->w);
    r->aux[2 + how] = count_allreduce(ctx);
    r->aux[5 + how] = (int)replays(ctx);
    CHECK_ST(ctx, rg_dist_close(ctx), RG_OK);
    rg_close(ctx);
  }
  free(d);
}

/* A step like dist_common.h's whose first target is 7, outside the 3 classes. */
static rg_status bad_step(rg_ctx *ctx, const mlp *m, int s) {
  float x[B * 4], l;
  int32_t y[B];
  batch(s, 0, B, x, y);
  y[0] = 7;
  rg_status st = rg_step_begin(ctx);
  rg_tensor h = rg_input(ctx, RG_F32, 2, (int64_t[]){B, 4}, x);
  h = rg_tanh(ctx, rg_linear(ctx, h, m->p[0], m->p[1]));
  h = rg_tanh(ctx, rg_linear(ctx, h, m->p[2], m->p[3]));
  h = rg_linear(ctx, h, m->p[4], m->p[5]);
  rg_tensor loss = rg_cross_entropy(ctx, h, rg_input(ctx, RG_I32, 1, (int64_t[]){B}, y));
  if (st == RG_OK) st = rg_backward(ctx, loss);
  if (st == RG_OK) st = rg_optim_step(m->opt);
  if (st == RG_OK) st = rg_item(ctx, loss, &l);
  return st == RG_OK ? rg_error(ctx) : st;
}

/* (b): status/msg: the bad step's; w_before, w: weights around it; aux[0]: a good step
   after it, aux[1]: graph misses of the first step on a second communicator, aux[2]:
   the steps after that. */
static void fault(int rank, int world, int port, result *r) {
  (void)rank, (void)world, (void)port;
  mlp m;
  float l;
  rg_ctx *ctx = open_seeded();
  rg_dist_options o = {.world_size = 1};
  if (!ctx || !build(ctx, &m, 0)) return;
  CHECK_ST(ctx, rg_dist_init(ctx, &o), RG_OK);
  for (int s = 0; s < 5; s++) CHECK_ST(ctx, step(ctx, &m, s, 0, B, &l), RG_OK);
  CHECK_ST(ctx, read_weights(ctx, &m, r->w_before), RG_OK);
  keep_error(ctx, r, bad_step(ctx, &m, 5));
  rg_clear_error(ctx);
  CHECK_ST(ctx, read_weights(ctx, &m, r->w), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK); /* the failed step's zero_grad was skipped too */
  r->aux[0] = step(ctx, &m, 6, 0, B, &l);
  for (int s = 7; s < 10; s++) CHECK_ST(ctx, step(ctx, &m, s, 0, B, &l), RG_OK);
  CHECK_ST(ctx, rg_dist_close(ctx), RG_OK);
  CHECK_ST(ctx, rg_dist_init(ctx, &o), RG_OK);
  rg_stats a, b;
  rg_stats_get(ctx, &a);
  CHECK_ST(ctx, step(ctx, &m, 10, 0, B, &l), RG_OK);
  rg_stats_get(ctx, &b);
  r->aux[1] = (int)(b.graph_misses - a.graph_misses);
  r->aux[2] = RG_OK;
  for (int s = 11; s < 15 && r->aux[2] == RG_OK; s++) r->aux[2] = step(ctx, &m, s, 0, B, &l);
  rg_close(ctx);
}

int main(void) {
  result r;
  alarm(240);
  g_device = RG_DEVICE_CUDA;
  if (!run_ranks("probe", 1, gpu_probe, -1, 60, &r) || r.aux[0] == 0 || !r.aux[1]) {
    printf("test_nccl: skipped (%s)\n", r.aux[0] == 0 ? "no CUDA GPU is usable here, or no "
           "CUDA backend in this build" : "this build has no NCCL");
    return failed() ? finish() : SKIP_EXIT;
  }

  if (run_ranks("same", 1, same_bits, -1, 120, &r)) {
    CHECK(r.status == RG_OK, "the plain CUDA run: %s", r.msg);
    CHECK(r.aux[0], "world 1 from the environment: losses or weights differ from a plain run");
    CHECK(r.aux[1], "world 1 with bucket_bytes 1: losses or weights differ from a plain run");
    CHECK(r.aux[2] == 1 && r.aux[3] == 6, "ALLREDUCE nodes per step: %d with the default "
          "bucket size (want 1), %d with bucket_bytes 1 (want 6)", r.aux[2], r.aux[3]);
    CHECK(r.aux[4] >= STEPS / 2 && r.aux[5] == r.aux[4] && r.aux[6] == r.aux[4], "graph "
          "replays in %d steps: %d plain, %d and %d with rg_dist_init (all equal, at least "
          "%d)", STEPS, r.aux[4], r.aux[5], r.aux[6], STEPS / 2);
  }

  if (run_ranks("fault", 1, fault, -1, 120, &r)) {
    CHECK(r.status == RG_ERR_MISUSE && strstr(r.msg, "target 7"), "the step with a bad "
          "target: %s: %s (want RG_ERR_MISUSE naming target 7)", rg_status_str(r.status),
          r.msg);
    CHECK(!memcmp(r.w, r.w_before, sizeof r.w), "the failed step changed the weights");
    CHECK(r.aux[0] == RG_OK, "the step after the failed one: %s", rg_status_str(r.aux[0]));
    CHECK(r.aux[1] >= 1, "the first step on a new communicator replayed a graph of the old "
          "one (graph misses: %d)", r.aux[1]);
    CHECK(r.aux[2] == RG_OK, "steps on the second communicator: %s", rg_status_str(r.aux[2]));
  }
  if (!failed()) printf("test_nccl: all checks passed\n");
  return finish();
}
