/*
 * attention.c - the attention op alone at GPT-2 124M's shape: q, k, v [8,12,1024,64],
 * causal, on the CUDA backend, timed on the CUDA graph path.
 *
 * A step is rg_step_begin, y = rg_attention(q, k, v, 1), loss = rg_sum(y), then (in the
 * forward + backward runs) rg_backward(loss) and rg_zero_grad, and rg_item(loss): one
 * drain, replayed as one captured graph from the third step on. q, k and v are
 * parameters, so the backward pass computes dq, dk and dv and adds them to their
 * gradients; the step therefore also holds the sum, its backward (an expand) and three
 * gradient accumulations, small next to attention (a few % of the step at this shape).
 * With --qkv the step is y = rg_attention_qkv(qkv, 12, 1) on one parameter qkv
 * [8,1024,2304], GPT-2's fused projection, whose heads the kernels read in place.
 *
 * --bf16 times the bf16 tensor-core path, which the inputs' dtype selects. Parameters are
 * F32, and casting them to BF16 in the step moves 113 MB (over 20 us at the H200's
 * 4.8 TB/s) that attention itself does not, so the two halves are timed apart:
 *  - fwd_ms: the inputs are BF16 constants holding the parameters' values rounded to
 *    bf16 (rg_constant, made once), so the step casts nothing on the way in;
 *  - bwd_ms: steps that cast the parameters to BF16 (so gradients reach them) with the
 *    backward, less the same steps without it; the cast's gradient passes through
 *    without a node, so the difference is the backward alone. cast_ms reports the cast
 *    these steps paid (their median less fwd_ms); fwd_bwd_ms = fwd_ms + bwd_ms.
 * The BF16 result y is cast to F32 before the sum (reductions take F32), one more pass
 * over y in both halves that the f32 mode does not make.
 *
 * bench/torch_sdpa.py times PyTorch's fused attention (each SDPA backend) at the same
 * shape, in bf16, for comparison.
 *
 * TFLOP/s counts the useful work the way FlashAttention reports it: a forward pass is
 * 4 B H T S D flops (q k^T and p v), halved when causal; a backward pass is 2.5 times that
 * (five products), so forward + backward is 3.5 times the forward.
 *
 * usage:  attention [--qkv] [--bf16] [steps]
 *         (default 20 timed steps of each kind, after 5 warm-up steps)
 * output: one JSON line, e.g.
 *   {"bench":"attention","device":"...","layout":"heads","mode":"f32","B":8,"H":12,
 *    "T":1024,"D":64,"causal":1,
 *    "fwd_ms":0.40,"fwd_bwd_ms":2.10,"fwd_tflops":32.1,"fwd_bwd_tflops":21.4,...}
 *   with median milliseconds per step (cast_ms is 0 in f32 mode), or
 *   {"bench":"attention","skipped":"..."} (exit 0) where there is no CUDA device.
 * exit:   0, or 1 with a message on stderr if a call fails or the loss is not finite.
 */
#include <resgrad.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B = 8, H = 12, T = 1024, D = 64, WARM = 5 };

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One step on the op's inputs x (q, k, v; or qkv and two RG_NONE), each first cast to
   BF16 when cast is set; returns its wall time in ms, or -1 on a failure (message
   printed). */
static double step(rg_ctx *ctx, const rg_tensor *x, int cast, int backward) {
  double t0 = now_ms();
  rg_step_begin(ctx);
  rg_tensor in[3];
  for (int i = 0; i < 3; i++) in[i] = cast && x[i].id ? rg_cast(ctx, x[i], RG_BF16) : x[i];
  rg_tensor y = x[1].id ? rg_attention(ctx, in[0], in[1], in[2], 1)
                        : rg_attention_qkv(ctx, in[0], H, 1);
  if (y.id && rg_dtype_of(ctx, y) != RG_F32) y = rg_cast(ctx, y, RG_F32);
  rg_tensor loss = rg_sum(ctx, y, RG_ALL_AXES, 0);
  if (backward) {
    rg_backward(ctx, loss);
    rg_zero_grad(ctx);
  }
  float l = NAN;
  if (rg_item(ctx, loss, &l) != RG_OK || !isfinite(l)) {
    fprintf(stderr, "attention: step failed: %s (loss %g)\n", rg_errmsg(ctx), (double)l);
    return -1;
  }
  return now_ms() - t0;
}

/* Median ms per step over n timed steps after WARM untimed ones; -1 on a failure. */
static double timed(rg_ctx *ctx, const rg_tensor *x, int cast, int backward, int n) {
  double *ms = malloc(sizeof(double) * (size_t)n), med = -1;
  if (!ms) return -1;
  int i = 0;
  for (int w = 0; w < WARM; w++)
    if (step(ctx, x, cast, backward) < 0) goto done;
  for (; i < n; i++)
    if ((ms[i] = step(ctx, x, cast, backward)) < 0) goto done;
  qsort(ms, (size_t)n, sizeof *ms, cmp_d);
  med = ms[n / 2];
done:
  free(ms);
  return med;
}

/* A BF16 constant holding the values of the F32 tensor p rounded to nearest even (they
   are finite); RG_NONE, with the context's error set, on a failure. */
static rg_tensor bf16_copy(rg_ctx *ctx, rg_tensor p, int ndim, const int64_t *dims) {
  size_t n = (size_t)rg_numel(ctx, p);
  float *f = malloc(sizeof(float) * n);
  uint16_t *h = malloc(sizeof(uint16_t) * n);
  rg_tensor c = RG_NONE;
  if (!f || !h) {
    rg_raise(ctx, RG_ERR_OOM, "bench: out of host memory for a %zu-element copy", n);
  } else if (rg_read(ctx, p, f, sizeof(float) * n) == RG_OK) {
    for (size_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, &f[i], 4);
      h[i] = (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
    }
    c = rg_constant(ctx, RG_BF16, ndim, dims, h);
  }
  free(f);
  free(h);
  return c;
}

int main(int argc, char **argv) {
  int steps = 20, qkv = 0, bf16 = 0;
  rg_options opt = {.device = RG_DEVICE_CUDA, .quiet = 1, .seed = 1};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--qkv")) qkv = 1;
    else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
    else steps = atoi(argv[i]);
  }
  if (steps <= 0) {
    fprintf(stderr, "usage: %s [--qkv] [--bf16] [steps > 0]\n", argv[0]);
    return 1;
  }
  rg_ctx *ctx = NULL;
  rg_status st = rg_open(&ctx, &opt);
  if (st != RG_OK) {
    printf("{\"bench\":\"attention\",\"skipped\":\"no CUDA device (%s)\"}\n", rg_status_str(st));
    return 0;
  }
  rg_init init = {RG_INIT_NORMAL, 1.0f, 0};
  int64_t dims[4] = {B, H, T, D}, fused[3] = {B, T, 3 * H * D};
  int nd = qkv ? 3 : 4;
  const int64_t *xd = qkv ? fused : dims;
  rg_tensor p[3] = {rg_param(ctx, qkv ? "qkv" : "q", RG_F32, nd, xd, init), RG_NONE, RG_NONE};
  if (!qkv) {
    p[1] = rg_param(ctx, "k", RG_F32, 4, dims, init);
    p[2] = rg_param(ctx, "v", RG_F32, 4, dims, init);
  }
  rg_tensor c[3] = {RG_NONE, RG_NONE, RG_NONE};
  int ok = 1;
  for (int i = 0; i < 3 && bf16; i++)
    if (p[i].id) ok = (c[i] = bf16_copy(ctx, p[i], nd, xd)).id != 0 && ok;
  if (rg_error(ctx) != RG_OK || !ok) {
    fprintf(stderr, "attention: %s\n", rg_errmsg(ctx));
    rg_close(ctx);
    return 1;
  }
  rg_stats s0, s1;
  double fwd, both, bwd, cast = 0;
  if (!bf16) {
    fwd = timed(ctx, p, 0, 0, steps);
    rg_stats_get(ctx, &s0);
    both = fwd < 0 ? -1 : timed(ctx, p, 0, 1, steps);
    rg_stats_get(ctx, &s1);
    bwd = both - fwd;
  } else {
    fwd = timed(ctx, c, 0, 0, steps);
    double cf = fwd < 0 ? -1 : timed(ctx, p, 1, 0, steps);
    rg_stats_get(ctx, &s0);
    double cb = cf < 0 ? -1 : timed(ctx, p, 1, 1, steps);
    rg_stats_get(ctx, &s1);
    bwd = cb - cf;
    both = cb < 0 ? -1 : fwd + bwd;
    cast = cf - fwd;
  }
  if (fwd < 0 || both < 0) {
    rg_close(ctx);
    return 1;
  }
  double flop = 4.0 * B * H * (double)T * T * D / 2; /* causal forward */
  printf("{\"bench\":\"attention\",\"device\":\"%s\",\"layout\":\"%s\",\"mode\":\"%s\","
         "\"B\":%d,\"H\":%d,\"T\":%d,\"D\":%d,"
         "\"causal\":1,\"steps\":%d,\"fwd_ms\":%.3f,\"fwd_bwd_ms\":%.3f,\"bwd_ms\":%.3f,"
         "\"cast_ms\":%.3f,\"fwd_tflops\":%.2f,\"fwd_bwd_tflops\":%.2f,\"graph_replays\":%llu}\n",
         rg_device_name(ctx), qkv ? "qkv" : "heads", bf16 ? "bf16" : "f32", B, H, T, D, steps,
         fwd, both, bwd, cast, flop / (fwd * 1e9), 3.5 * flop / (both * 1e9),
         (unsigned long long)(s1.graph_replays - s0.graph_replays));
  st = rg_close(ctx);
  if (st != RG_OK) {
    fprintf(stderr, "attention: rg_close failed: %s\n", rg_status_str(st));
    return 1;
  }
  return 0;
}
