/*
 * bandwidth.c - achieved memory bandwidth of the bandwidth-bound kernels, against the
 * device's own copy (rg_reshape of a contiguous tensor is a device-to-device
 * cudaMemcpyAsync), on tensors of 64 MB.
 *
 * Each measurement is a step of REPS identical ops on the same operands (one drain, so a
 * CUDA graph replay once warm), timed on the host around the step's one barrier; the op
 * time is the step time / REPS, and GB/s counts the bytes the op must move (each operand
 * read once, the output written once). The AdamW update moves 7 x 4 bytes per element
 * (reads w, g, m, v; writes w, m, v).
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

enum { OP_COPY, OP_ADD, OP_MUL_ROW, OP_SCALE, OP_RELU, OP_GELU, OP_ADAMW, OP_COUNT };
static const char *NAMES[OP_COUNT] = {"copy",  "add",  "mul (row broadcast)", "scale",
                                      "relu",  "gelu", "adamw"};
static const double BYTES_PER_ELT[OP_COUNT] = {8, 12, 8, 8, 8, 8, 28};

/* Records one step of REPS ops; returns the value read at the barrier (a scalar that
   depends on the last op, so nothing is dead). */
static rg_status step(rg_ctx *c, int op, rg_tensor a, rg_tensor b, rg_tensor row,
                      rg_optim *opt, int64_t n) {
  rg_step_begin(c);
  rg_tensor y = RG_NONE;
  for (int r = 0; r < REPS; r++) {
    switch (op) {
    case OP_COPY: y = rg_reshape(c, a, 1, (int64_t[]){n}); break;
    case OP_ADD: y = rg_add(c, a, b); break;
    case OP_MUL_ROW: y = rg_mul(c, a, row); break;
    case OP_SCALE: y = rg_scale(c, a, 1.5f); break;
    case OP_RELU: y = rg_relu(c, a); break;
    case OP_GELU: y = rg_gelu(c, a); break;
    default: rg_optim_step(opt); break;
    }
  }
  if (op == OP_ADAMW) return rg_sync(c);
  float v;
  return rg_item(c, rg_slice(c, rg_reshape(c, y, 1, (int64_t[]){n}), 0, 0, 1), &v);
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
  int64_t cols = 4096, rows = mib * 1048576 / 4 / cols, n = rows * cols;
  rg_init u = {RG_INIT_UNIFORM, -1, 1};
  rg_tensor a = rg_param(c, "a", RG_F32, 2, (int64_t[]){rows, cols}, u);
  rg_tensor b = rg_param(c, "b", RG_F32, 2, (int64_t[]){rows, cols}, u);
  rg_tensor row = rg_param(c, "row", RG_F32, 1, (int64_t[]){cols}, u);
  rg_optim *opt = rg_optim_adamw(c, NULL);
  double copy_gbs = 0;
  int rc = 0;
  for (int op = 0; op < OP_COUNT && !rc; op++) {
    double best = 1e30;
    for (int s = 0; s < STEPS + 3; s++) { /* 3 warm-up steps: eager, capture, first replay */
      double t0 = now_s();
      if (step(c, op, a, b, row, opt, n) != RG_OK) {
        fprintf(stderr, "bandwidth: %s: %s\n", NAMES[op], rg_errmsg(c));
        rc = 1;
        break;
      }
      double t = now_s() - t0;
      if (s >= 3 && t < best) best = t;
    }
    if (rc) break;
    double elts = op == OP_ADAMW ? (double)(2 * n + cols) : (double)n; /* a, b and row */
    double us = best / REPS * 1e6, gbs = BYTES_PER_ELT[op] * elts / (us * 1e3);
    if (op == OP_COPY) copy_gbs = gbs;
    printf("{\"bench\":\"bandwidth\",\"dev\":\"%s\",\"op\":\"%s\",\"mib\":%lld,\"us\":%.2f,"
           "\"GBps\":%.0f,\"of_copy\":%.2f}\n",
           rg_device_name(c), NAMES[op], (long long)mib, us, gbs, gbs / copy_gbs);
  }
  rg_optim_free(opt);
  return rg_close(c) != RG_OK || rc;
}
