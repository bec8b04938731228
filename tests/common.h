/*
 * common.h - the tiny shared helper of resgrad's tests.
 *
 * CHECK(cond, fmt, ...) prints file:line and the message when cond is false and marks the
 * test failed; it never stops the test, so one run reports every broken check. finish()
 * returns the exit code (0 pass, 1 fail). open_cpu() opens a quiet CPU context.
 * SKIP_EXIT (77) is ctest's "skipped". Keep this file small and stable: other test files
 * include it.
 */
#ifndef RG_TESTS_COMMON_H
#define RG_TESTS_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resgrad.h"

#define SKIP_EXIT 77

static int test_failures_;

#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__,     \
              #cond);                                                      \
      fprintf(stderr, __VA_ARGS__);                                        \
      fputc('\n', stderr);                                                 \
      test_failures_++;                                                    \
    }                                                                      \
  } while (0)

/* CHECK that a call returned want; on failure prints both status names and rg_errmsg. */
#define CHECK_ST(ctx, call, want)                                               \
  do {                                                                          \
    rg_status st_ = (call);                                                     \
    CHECK(st_ == (want), "%s -> %s, want %s (errmsg: %s)", #call,               \
          rg_status_str(st_), rg_status_str(want), rg_errmsg(ctx));             \
  } while (0)

static inline int failed(void) { return test_failures_ != 0; }

static inline int finish(void) {
  if (test_failures_) {
    fprintf(stderr, "%d check(s) failed\n", test_failures_);
    return 1;
  }
  return 0;
}

/* A quiet CPU context with default options and the given seed; NULL (and a failed
   check) if it cannot be opened. */
static inline rg_ctx *open_cpu_opts(rg_options o) {
  rg_ctx *ctx = NULL;
  o.device = RG_DEVICE_CPU;
  o.quiet = 1;
  rg_status st = rg_open(&ctx, &o);
  CHECK(st == RG_OK && ctx != NULL, "rg_open(CPU) -> %s", rg_status_str(st));
  return st == RG_OK ? ctx : NULL;
}

static inline rg_ctx *open_cpu(void) {
  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1};
  return open_cpu_opts(o);
}

/* Does errmsg contain needle? */
static inline int msg_has(const rg_ctx *ctx, const char *needle) {
  const char *m = rg_errmsg(ctx);
  return m && strstr(m, needle) != NULL;
}

/* rg_backward from a cross-entropy loss on ctx writes dlogits in the forward's node (no
   seed node, no rg_cross_entropy' node: autograd.c); a retained loss gradient keeps the
   two nodes (its seed is a node then). Checks both on [N, C] logits from a parameter
   (through a linear layer when lin, so they are BF16 under rg_options.bf16): the same
   loss and gradient bits, and two nodes fewer fused (not under RG_CHECK, which runs each node as
   it is recorded). Returns 1 when both held. */
static inline int xent_fused_check(rg_ctx *ctx, int64_t N, int64_t C, int ignore, int lin,
                                   const char *what) {
  int64_t K = 16, n = N * (lin ? K : C);
  float *x = (float *)malloc(sizeof(float) * (size_t)(n ? n : 1));
  float *w = (float *)malloc(sizeof(float) * (size_t)(C * K));
  float *g[2] = {(float *)malloc(sizeof(float) * (size_t)(n ? n : 1)),
                 (float *)malloc(sizeof(float) * (size_t)(n ? n : 1))};
  int32_t *t = (int32_t *)malloc(sizeof(int32_t) * (size_t)(N ? N : 1));
  for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 2654435761u) % 1000) / 250.f - 2.f;
  for (int64_t i = 0; i < C * K; i++) w[i] = (float)((i * 40503u) % 100) / 200.f - .25f;
  for (int64_t r = 0; r < N; r++) t[r] = ignore && r % 3 == 0 ? -1 : (int32_t)((r * 7) % C);
  rg_tensor p = rg_param(ctx, what, RG_F32, 2, (int64_t[]){N, lin ? K : C},
                         (rg_init){RG_INIT_ZEROS, 0, 0});
  rg_tensor pw = lin ? rg_param(ctx, "xent_fused_w", RG_F32, 2, (int64_t[]){C, K},
                                (rg_init){RG_INIT_ZEROS, 0, 0})
                     : RG_NONE;
  rg_write(ctx, p, x, sizeof(float) * (size_t)n);
  if (lin) rg_write(ctx, pw, w, sizeof(float) * (size_t)(C * K));
  uint64_t nodes[2] = {0, 0};
  float loss[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    rg_step_begin(ctx);
    rg_zero_grad(ctx);
    rg_tensor lg = lin ? rg_linear(ctx, p, pw, RG_NONE) : p;
    rg_tensor y = rg_input(ctx, RG_I32, 1, &N, t);
    rg_tensor l = ignore ? rg_cross_entropy_ignore(ctx, lg, y, -1) : rg_cross_entropy(ctx, lg, y);
    if (k) rg_retain_grad(ctx, l);
    rg_stats s0, s1;
    rg_stats_get(ctx, &s0);
    rg_backward(ctx, l);
    rg_stats_get(ctx, &s1);
    nodes[k] = s1.nodes_recorded - s0.nodes_recorded;
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, p), g[k], sizeof(float) * (size_t)n), RG_OK);
    CHECK_ST(ctx, rg_item(ctx, l, &loss[k]), RG_OK);
  }
  const char *chk = getenv("RG_CHECK");
  int same = !memcmp(g[0], g[1], sizeof(float) * (size_t)n) && !memcmp(loss, loss + 1, 4);
  int fewer = (chk && *chk && *chk != '0') || nodes[0] + 2 == nodes[1];
  CHECK(rg_error(ctx) == RG_OK, "%s: %s", what, rg_errmsg(ctx));
  CHECK(same, "%s: the fused cross-entropy loss (%.9g) or gradient differs from the "
        "unfused one (%.9g)", what, loss[0], loss[1]);
  CHECK(fewer, "%s: the backward recorded %llu nodes fused, %llu unfused: want 2 fewer",
        what, (unsigned long long)nodes[0], (unsigned long long)nodes[1]);
  free(x), free(w), free(g[0]), free(g[1]), free(t);
  return same && fewer && rg_error(ctx) == RG_OK;
}

#endif /* RG_TESTS_COMMON_H */
