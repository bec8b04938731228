/*
 * bandwidth.c - achieved memory bandwidth of the bandwidth-bound kernels a training step
 * runs, against the device's own copy (rg_reshape of a contiguous tensor is a
 * device-to-device cudaMemcpyAsync), on operands of 64 MiB.
 *
 * Each measurement is a step of REPS identical ops on the same operands (one drain, so a
 * CUDA graph replay once warm), timed on the host around the step's one barrier; the op
 * time is the step time / REPS, and GB/s counts the bytes the op must move at minimum:
 * each operand read once, the output written once, per element of the large operand
 * (per-row statistics and [C] vectors are left out). Per element:
 *   copy, scale, relu, gelu, mul (row broadcast)   read 4, write 4          8
 *   add                                            read 2 x 4, write 4     12
 *   gelu backward (x, g -> dx)                     read 2 x 4, write 4     12
 *   cast f32->bf16                                 read 4, write 2          6
 *   bias grad (column sum [R,3072] -> [3072])      read 4                   4
 *   softmax (rows of 8192)                         read 4, write 4          8
 *   layernorm (rows of 768, gamma, beta)           read 4, write 4          8
 *   layernorm backward (x, g -> dx, dgamma, dbeta) read 2 x 4, write 4     12
 *   cross_entropy ([R,8192] logits, I32 targets)   read 4                   4
 *   cross_entropy backward (-> dlogits)            read 4, write 4          8
 *   adamw (reads w, g, m, v; writes w, m, v)       7 x 4                   28
 * The bias gradient is rg_sum over axis 0: the column-sum kernel that a backward's
 * bias gradient (SUM_TO_ACC) runs too, there adding into the gradient.
 *
 * A backward kernel runs only inside rg_backward, behind the loss's own nodes, so it is
 * timed as the difference of two steps that differ by exactly one forward and one
 * backward of the op, less the op's forward time (the line before it):
 *   gelu:      gelu(gelu(a)) against gelu(a), each followed by rg_backward(sum);
 *   layernorm: ln(ln(x)) against ln(x), each followed by rg_backward(sum) (the
 *              difference also holds the two [768] adds into the gamma and beta grads);
 *   cross_entropy: rg_backward(cross_entropy(logits + bias)) against
 *              rg_sum(logits + bias, 0) (the bias add and its gradient's column sum
 *              cancel; the difference also holds the one-element seed of the loss
 *              gradient).
 *
 * usage:  bandwidth [--device cuda|cpu] [--mib N]      (default cuda, 64 MiB operands)
 * output: one JSON line per op: us per op, GB/s, and the fraction of the copy's GB/s.
 *         Without a GPU (and no --device cpu) it prints a skip line and exits 0.
 */
#include <resgrad.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 20
#define STEPS 10

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum {
  OP_COPY, OP_ADD, OP_MUL_ROW, OP_SCALE, OP_RELU, OP_GELU, OP_GELU_BWD, OP_CAST,
  OP_BIAS_GRAD, OP_SOFTMAX, OP_LN, OP_LN_BWD, OP_CE, OP_CE_BWD, OP_ADAMW, OP_COUNT
};
static const struct {
  const char *name;
  double bytes;  /* per element of the large operand (the header's table) */
  int backward;  /* timed as a difference of two steps, less the op before it */
} OPS[OP_COUNT] = {
    {"copy", 8, 0},           {"add", 12, 0},
    {"mul (row broadcast)", 8, 0},
    {"scale", 8, 0},          {"relu", 8, 0},
    {"gelu", 8, 0},           {"gelu backward", 12, 1},
    {"cast f32->bf16", 6, 0}, {"bias grad (column sum)", 4, 0},
    {"softmax", 8, 0},        {"layernorm", 8, 0},
    {"layernorm backward", 12, 1},
    {"cross_entropy", 4, 0},  {"cross_entropy backward", 8, 1},
    {"adamw", 28, 0},
};

typedef struct operands {
  rg_tensor a, b, row;          /* [R, 4096] parameters and a [4096] one */
  rg_tensor h;                  /* [R, 3072]: an MLP activation's gradient, GPT-2's widest */
  rg_tensor x, gamma, beta;     /* [R, 768] (no gradient) and its layernorm's [768] */
  rg_tensor logits, targets, vbias; /* [R, 8192] (no gradient), I32 [R], [8192] */
  rg_optim *opt;                /* AdamW over a, b and row only */
} operands;

/* A persistent F32 [rows, cols] in [-1, 1) that needs no gradient. */
static rg_tensor uniform_constant(rg_ctx *c, int64_t rows, int64_t cols) {
  size_t n = (size_t)(rows * cols);
  float *h = malloc(n * sizeof *h);
  if (!h) return rg_raise(c, RG_ERR_OOM, "bandwidth: no host memory"), RG_NONE;
  uint32_t s = 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    h[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
  }
  rg_tensor t = rg_constant(c, RG_F32, 2, (int64_t[]){rows, cols}, h);
  free(h);
  return t;
}

/* Random I32 class indices in [0, classes). */
static rg_tensor target_constant(rg_ctx *c, int64_t rows, int64_t classes) {
  int32_t *h = malloc((size_t)rows * sizeof *h);
  if (!h) return rg_raise(c, RG_ERR_OOM, "bandwidth: no host memory"), RG_NONE;
  uint32_t s = 7;
  for (int64_t i = 0; i < rows; i++) {
    s = s * 1664525u + 1013904223u;
    h[i] = (int32_t)((s >> 8) % (uint32_t)classes);
  }
  rg_tensor t = rg_constant(c, RG_I32, 1, (int64_t[]){rows}, h);
  free(h);
  return t;
}

/* Rows of a [rows, cols] F32 operand of mib MiB (at least one). */
static int64_t rows_for(int64_t mib, int64_t cols) {
  int64_t r = mib * 1048576 / 4 / cols;
  return r > 0 ? r : 1;
}

static rg_tensor sum_all(rg_ctx *c, rg_tensor y) { return rg_sum(c, y, RG_ALL_AXES, 0); }

/* Records one op; base: the step a backward's time is the difference from (the header).
   Returns the value to read, or RG_NONE where the step ends with a sync. */
static rg_tensor record(rg_ctx *c, int op, int base, const operands *o) {
  rg_tensor y;
  switch (op) {
  case OP_COPY: return rg_reshape(c, o->a, 1, (int64_t[]){rg_numel(c, o->a)});
  case OP_ADD: return rg_add(c, o->a, o->b);
  case OP_MUL_ROW: return rg_mul(c, o->a, o->row);
  case OP_SCALE: return rg_scale(c, o->a, 1.5f);
  case OP_RELU: return rg_relu(c, o->a);
  case OP_GELU: return rg_gelu(c, o->a);
  case OP_GELU_BWD:
    y = rg_gelu(c, o->a);
    rg_backward(c, sum_all(c, base ? y : rg_gelu(c, y)));
    return RG_NONE;
  case OP_CAST: return rg_cast(c, o->a, RG_BF16);
  case OP_BIAS_GRAD: return rg_sum(c, o->h, 0, 0);
  case OP_SOFTMAX: return rg_softmax(c, o->logits);
  case OP_LN: return rg_layernorm(c, o->x, o->gamma, o->beta, 1e-5f);
  case OP_LN_BWD:
    y = rg_layernorm(c, o->x, o->gamma, o->beta, 1e-5f);
    if (!base) y = rg_layernorm(c, y, o->gamma, o->beta, 1e-5f);
    rg_backward(c, sum_all(c, y));
    return RG_NONE;
  case OP_CE: return rg_cross_entropy(c, o->logits, o->targets);
  case OP_CE_BWD:
    y = rg_add(c, o->logits, o->vbias);
    if (base)
      rg_sum(c, y, 0, 0);
    else
      rg_backward(c, rg_cross_entropy(c, y, o->targets));
    return RG_NONE;
  default: rg_optim_step(o->opt); return RG_NONE;
  }
}

/* One step of REPS ops, ended by a read of a value that depends on the last op (so
   nothing is dead), or by a sync where the ops update state in place. */
static rg_status step(rg_ctx *c, int op, int base, const operands *o) {
  rg_step_begin(c);
  rg_tensor y = RG_NONE;
  for (int r = 0; r < REPS; r++) y = record(c, op, base, o);
  if (rg_error(c) != RG_OK) return rg_error(c);
  if (!y.id) return rg_sync(c);
  rg_tensor first = rg_slice(c, rg_reshape(c, y, 1, (int64_t[]){rg_numel(c, y)}), 0, 0, 1);
  if (rg_dtype_of(c, first) != RG_F32) first = rg_cast(c, first, RG_F32);
  float v;
  return rg_item(c, first, &v);
}

/* Best step time in seconds of STEPS after 3 warm-up steps (eager, capture, first
   replay); < 0 on failure. */
static double best_step(rg_ctx *c, int op, int base, const operands *o) {
  double best = 1e30;
  for (int s = 0; s < STEPS + 3; s++) {
    double t0 = now_s();
    if (step(c, op, base, o) != RG_OK) return -1;
    double t = now_s() - t0;
    if (s >= 3 && t < best) best = t;
  }
  return best;
}

/* Elements of the op's large operand(s) that its bytes per element apply to. */
static double elements(rg_ctx *c, int op, const operands *o) {
  double n = (double)rg_numel(c, o->a);
  switch (op) {
  case OP_BIAS_GRAD: return (double)rg_numel(c, o->h);
  case OP_LN: case OP_LN_BWD: return (double)rg_numel(c, o->x);
  case OP_SOFTMAX: case OP_CE: case OP_CE_BWD: return (double)rg_numel(c, o->logits);
  case OP_ADAMW: return 2 * n + (double)rg_numel(c, o->row); /* a, b and row */
  default: return n;
  }
}

int main(int argc, char **argv) {
  rg_device dev = RG_DEVICE_CUDA;
  int64_t mib = 64;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc)
      dev = !strcmp(argv[++i], "cpu") ? RG_DEVICE_CPU : RG_DEVICE_CUDA;
    else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
      mib = atoll(argv[++i]);
    else {
      fprintf(stderr, "usage: bandwidth [--device cuda|cpu] [--mib N]\n");
      return 2;
    }
  }
  rg_ctx *c = NULL;
  if (rg_open(&c, &(rg_options){.device = dev, .quiet = 1}) != RG_OK) {
    printf("{\"bench\":\"bandwidth\",\"skipped\":\"no CUDA GPU (use --device cpu)\"}\n");
    return 0;
  }
  int64_t cols = 4096, rows = rows_for(mib, cols);
  rg_init u = {RG_INIT_UNIFORM, -1, 1};
  operands o;
  o.a = rg_param(c, "a", RG_F32, 2, (int64_t[]){rows, cols}, u);
  o.b = rg_param(c, "b", RG_F32, 2, (int64_t[]){rows, cols}, u);
  o.row = rg_param(c, "row", RG_F32, 1, (int64_t[]){cols}, u);
  o.opt = rg_optim_adamw(c, NULL); /* before the parameters below: adamw's bytes */
  o.h = uniform_constant(c, rows_for(mib, 3072), 3072);
  o.x = uniform_constant(c, rows_for(mib, 768), 768);
  o.gamma = rg_param(c, "gamma", RG_F32, 1, (int64_t[]){768}, (rg_init){RG_INIT_ONES, 0, 0});
  o.beta = rg_param(c, "beta", RG_F32, 1, (int64_t[]){768}, (rg_init){RG_INIT_ZEROS, 0, 0});
  o.logits = uniform_constant(c, rows_for(mib, 8192), 8192);
  o.targets = target_constant(c, rows_for(mib, 8192), 8192);
  o.vbias = rg_param(c, "vbias", RG_F32, 1, (int64_t[]){8192}, (rg_init){RG_INIT_ZEROS, 0, 0});
  int rc = rg_error(c) != RG_OK;
  if (rc) fprintf(stderr, "bandwidth: setup: %s\n", rg_errmsg(c));
  double copy_gbs = 0, us_of[OP_COUNT] = {0};
  for (int op = 0; op < OP_COUNT && !rc; op++) {
    double t = best_step(c, op, 0, &o), t0 = OPS[op].backward ? best_step(c, op, 1, &o) : 0;
    if (t < 0 || t0 < 0) {
      fprintf(stderr, "bandwidth: %s: %s\n", OPS[op].name, rg_errmsg(c));
      rc = 1;
      break;
    }
    double us = (t - t0) / REPS * 1e6 - (OPS[op].backward ? us_of[op - 1] : 0);
    double gbs = OPS[op].bytes * elements(c, op, &o) / (us * 1e3);
    us_of[op] = us;
    if (op == OP_COPY) copy_gbs = gbs;
    printf("{\"bench\":\"bandwidth\",\"dev\":\"%s\",\"op\":\"%s\",\"mib\":%lld,\"us\":%.2f,"
           "\"GBps\":%.0f,\"of_copy\":%.2f}\n",
           rg_device_name(c), OPS[op].name, (long long)mib, us, gbs, gbs / copy_gbs);
  }
  rg_optim_free(o.opt);
  return rg_close(c) != RG_OK || rc;
}
