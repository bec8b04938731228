/*
 * op_overhead.c - the host cost of recording one op (the design's budget: < 1 us per op).
 *
 * On a CPU context it records `ops` cheap ops: rg_add of two one-element tensors, chained
 * (acc = acc + 1) so the drain computes something checkable. Recording goes in batches
 * of BATCH ops, each batch in its own step (rg_step_begin), so the pass pool and queue
 * stay small and every batch starts from the same state. Only the recording loops are
 * timed for ns_per_op; the drain that runs each batch (rg_sync) is timed separately as
 * drain_ns_per_op. After each batch the result is read back and must equal BATCH
 * ("counted is not computed"). One untimed batch warms up the pools first. Kernels run
 * on one thread so the drain figure is executor overhead, not thread hand-offs.
 *
 * usage:  op_overhead [ops]   (default 200000, rounded up to a multiple of BATCH)
 * output: one JSON line, e.g.
 *   {"bench":"op_overhead","device":"cpu","ns_per_op":85.2,"ops":200000,
 *    "batch":10000,"drain_ns_per_op":40.1}
 * exit:   0, or 1 with a message on stderr if any call fails or a result is wrong.
 */
#include <resgrad.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BATCH 10000

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

static int fail(rg_ctx *ctx, const char *what) {
  fprintf(stderr, "op_overhead: %s: %s: %s\n", what, rg_status_str(rg_error(ctx)),
          rg_errmsg(ctx));
  rg_close(ctx);
  return 1;
}

/* One batch: records BATCH adds (timed into *record_ns), drains them (timed into
   *drain_ns) and checks the sum. Returns 0 or 1. */
static int batch(rg_ctx *ctx, double *record_ns, double *drain_ns) {
  const float zero = 0.0f, one = 1.0f;
  if (rg_step_begin(ctx) != RG_OK) return fail(ctx, "rg_step_begin");
  rg_tensor acc = rg_input(ctx, RG_F32, 1, (int64_t[]){1}, &zero);
  rg_tensor inc = rg_input(ctx, RG_F32, 1, (int64_t[]){1}, &one);

  double t0 = now_ns();
  for (int i = 0; i < BATCH; i++) acc = rg_add(ctx, acc, inc);
  double t1 = now_ns();
  rg_status st = rg_sync(ctx);
  double t2 = now_ns();
  if (st != RG_OK || rg_error(ctx) != RG_OK) return fail(ctx, "recording or drain");
  *record_ns += t1 - t0;
  *drain_ns += t2 - t1;

  float sum;
  if (rg_item(ctx, acc, &sum) != RG_OK) return fail(ctx, "rg_item");
  if (sum != (float)BATCH) {
    fprintf(stderr, "op_overhead: wrong result %g after %d adds of 1\n", sum, BATCH);
    rg_close(ctx);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  long ops = argc > 1 ? atol(argv[1]) : 200000;
  if (ops <= 0) {
    fprintf(stderr, "usage: %s [ops > 0]\n", argv[0]);
    return 1;
  }
  long batches = (ops + BATCH - 1) / BATCH;
  ops = batches * BATCH;

  rg_ctx *ctx;
  rg_options opt = {.device = RG_DEVICE_CPU, .threads = 1, .quiet = 1};
  rg_status st = rg_open(&ctx, &opt);
  if (st != RG_OK) {
    fprintf(stderr, "op_overhead: rg_open failed: %s\n", rg_status_str(st));
    return 1;
  }

  double record_ns = 0, drain_ns = 0, warm_r = 0, warm_d = 0;
  if (batch(ctx, &warm_r, &warm_d)) return 1;
  for (long b = 0; b < batches; b++)
    if (batch(ctx, &record_ns, &drain_ns)) return 1;

  printf("{\"bench\":\"op_overhead\",\"device\":\"%s\",\"ns_per_op\":%.1f,\"ops\":%ld,"
         "\"batch\":%d,\"drain_ns_per_op\":%.1f}\n",
         rg_device_name(ctx), record_ns / (double)ops, ops, BATCH,
         drain_ns / (double)ops);
  st = rg_close(ctx);
  if (st != RG_OK) {
    fprintf(stderr, "op_overhead: rg_close failed: %s\n", rg_status_str(st));
    return 1;
  }
  return 0;
}
