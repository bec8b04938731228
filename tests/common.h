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

#endif /* RG_TESTS_COMMON_H */
