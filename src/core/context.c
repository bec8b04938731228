/*
 * context.c - opening and closing a context, the sticky error, labels, the allocator.
 *
 * Invariants: the first error since rg_clear_error is the one reported (later ones only
 * return their status); every host allocation of the library goes through rg__malloc so a
 * test can fail the N-th one; nothing here exits or aborts.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rg_version(void) { return RG_VERSION_STRING; }

/* ---- allocator ---------------------------------------------------------------------- */

bool rg__alloc_tick(rg_ctx *ctx) {
  if (!ctx) return true;
  ctx->alloc_count++;
  return !(ctx->alloc_fail_at && ctx->alloc_count == ctx->alloc_fail_at);
}
static bool alloc_fails(rg_ctx *ctx) { return !rg__alloc_tick(ctx); }
void *rg__malloc(rg_ctx *ctx, size_t n) { return alloc_fails(ctx) ? NULL : malloc(n ? n : 1); }
void *rg__calloc(rg_ctx *ctx, size_t n, size_t size) {
  return alloc_fails(ctx) ? NULL : calloc(n ? n : 1, size ? size : 1);
}
void *rg__realloc(rg_ctx *ctx, void *p, size_t n) {
  return alloc_fails(ctx) ? NULL : realloc(p, n ? n : 1);
}
void rg__free(rg_ctx *ctx, void *p) { (void)ctx; free(p); }
char *rg__strdup(rg_ctx *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = rg__malloc(ctx, n);
  if (d) memcpy(d, s, n);
  return d;
}
bool rg__grow(rg_ctx *ctx, void **arr, size_t esz, size_t need, size_t *cap) {
  if (need <= *cap) return true;
  size_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  void *p = rg__realloc(ctx, *arr, nc * esz);
  if (!p) return false;
  *arr = p;
  *cap = nc;
  return true;
}

/* ---- errors ------------------------------------------------------------------------- */

const char *rg_status_str(rg_status s) {
  switch (s) {
  case RG_OK: return "RG_OK";
  case RG_ERR_MISUSE: return "RG_ERR_MISUSE";
  case RG_ERR_STALE: return "RG_ERR_STALE";
  case RG_ERR_OOM: return "RG_ERR_OOM";
  case RG_ERR_DEVICE: return "RG_ERR_DEVICE";
  case RG_ERR_NONFINITE: return "RG_ERR_NONFINITE";
  case RG_ERR_IO: return "RG_ERR_IO";
  case RG_ERR_UNSUPPORTED: return "RG_ERR_UNSUPPORTED";
  case RG_ERR_FAILED: return "RG_ERR_FAILED";
  }
  return "RG_ERR_UNKNOWN";
}

const char *rg__label_str(rg_ctx *ctx, uint32_t label) {
  return label < ctx->nlabels ? ctx->labels[label] : "";
}

rg_status rg__fail(rg_ctx *ctx, rg_status st, const char *call, const char *fmt, ...) {
  if (ctx && st != RG_OK) ctx->last = st;
  if (!ctx || st == RG_OK || ctx->err != RG_OK) return st;
  ctx->err = st;
  const char *lab = ctx->lsp > 0 ? rg__label_str(ctx, ctx->lstack[ctx->lsp - 1]) : "";
  int n = *lab ? snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s [%s]: ", call, lab)
               : snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s: ", call);
  if (n < 0 || (size_t)n >= sizeof ctx->errmsg) return st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->errmsg + n, sizeof ctx->errmsg - (size_t)n, fmt, ap);
  va_end(ap);
  return st;
}

rg_status rg_raise(rg_ctx *ctx, rg_status st, const char *fmt, ...) {
  if (ctx && st != RG_OK) ctx->last = st;
  if (!ctx || st == RG_OK || ctx->err != RG_OK) return st;
  const char *lab = ctx->lsp > 0 ? rg__label_str(ctx, ctx->lstack[ctx->lsp - 1]) : "";
  int n = *lab ? snprintf(ctx->errmsg, sizeof ctx->errmsg, "[%s] ", lab) : 0;
  if (!fmt) fmt = "(no message)";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->errmsg + n, sizeof ctx->errmsg - (size_t)n, fmt, ap);
  va_end(ap);
  if (!ctx->errmsg[0]) snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s (no message given)",
                                rg_status_str(st));
  ctx->err = st;
  return st;
}

rg_status rg_error(const rg_ctx *ctx) { return ctx ? ctx->err : RG_ERR_MISUSE; }
const char *rg_errmsg(const rg_ctx *ctx) {
  return ctx ? ctx->errmsg : "rg_errmsg: ctx is NULL: rg_open failed or was not called";
}
void rg_clear_error(rg_ctx *ctx) {
  if (!ctx) return;
  ctx->err = RG_OK;
  ctx->errmsg[0] = 0;
}

/* ---- labels -------------------------------------------------------------------------- */

/* Labels are interned once (they are few and long-lived) so a node stores 4 bytes. The
   stack holds the interned id of the joined path "outer/inner", so a node records the
   whole path at no extra cost. */
static uint32_t intern(rg_ctx *ctx, const char *s) {
  for (uint32_t i = 0; i < ctx->nlabels; i++)
    if (!strcmp(ctx->labels[i], s)) return i;
  size_t cap = ctx->caplabels;
  if (!rg__grow(ctx, (void **)&ctx->labels, sizeof *ctx->labels, ctx->nlabels + 1, &cap))
    return 0;
  ctx->caplabels = (uint32_t)cap;
  char *d = rg__strdup(ctx, s);
  if (!d) return 0;
  ctx->labels[ctx->nlabels] = d;
  return ctx->nlabels++;
}

/* A push the stack has no memory for is counted in lskip instead, and so is every push
   nested in it; pops undo those first, so each pop still matches its own push. */
void rg_label_push(rg_ctx *ctx, const char *label) {
  if (!ctx) return;
  size_t cap = (size_t)ctx->lcap;
  if (ctx->lskip ||
      !rg__grow(ctx, (void **)&ctx->lstack, sizeof *ctx->lstack, (size_t)ctx->lsp + 1, &cap)) {
    if (!ctx->lskip++)
      rg__fail(ctx, RG_ERR_OOM, "rg_label_push", "out of host memory for the label stack");
    return;
  }
  ctx->lcap = (int)cap;
  const char *outer = ctx->lsp ? ctx->labels[ctx->lstack[ctx->lsp - 1]] : "";
  char path[512];
  snprintf(path, sizeof path, "%s%s%s", outer, *outer ? "/" : "", label ? label : "?");
  ctx->lstack[ctx->lsp++] = intern(ctx, path);
}

void rg_label_pop(rg_ctx *ctx) {
  if (!ctx) return;
  if (ctx->lskip) ctx->lskip--;
  else if (ctx->lsp > 0) ctx->lsp--;
}

/* ---- open / close ------------------------------------------------------------------ */

static const rg_backend *choose_backend(rg_ctx *ctx) {
  rg_device d = ctx->opt.device;
  if (d == RG_DEVICE_CPU) return &rg_cpu_backend;
  if (d == RG_DEVICE_CUDA) return &rg_cuda_backend;
  if (rg_cuda_available()) return &rg_cuda_backend;
  if (!ctx->opt.quiet)
    fprintf(stderr, "resgrad: no usable CUDA GPU found; running on the CPU\n");
  return &rg_cpu_backend;
}

static void free_strings(rg_ctx *ctx, char **s, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) rg__free(ctx, s[i]);
}

void rg__free_params(rg_ctx *ctx);

rg_status rg_open(rg_ctx **out, const rg_options *opt) {
  if (!out) return RG_ERR_MISUSE;
  *out = NULL;
  rg_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return RG_ERR_OOM;
  if (opt) ctx->opt = *opt;
  if (opt && (opt->device < RG_DEVICE_AUTO || opt->device > RG_DEVICE_CUDA)) {
    free(ctx);
    return RG_ERR_MISUSE;
  }
  const char *env = getenv("RG_CHECK");
  if (env && *env == '1') ctx->opt.check = 1;
  env = getenv("RG_TRACE");
  if (env && *env == '1') ctx->opt.trace = 1;
  env = getenv("RG_CHECK_FINITE");
  if (env && *env == '1') ctx->opt.check_finite = 1;
  env = getenv("RG_BF16");
  if (env && *env == '1') ctx->opt.bf16 = 1;
  env = getenv("RG_CUDNN");
  if (env && *env == '0') ctx->opt.no_cudnn = 1;
  env = getenv("RG_GEMM_TUNE");
  if (env && *env == '1') ctx->opt.gemm_tune = 1;
  if (!ctx->opt.max_queued) ctx->opt.max_queued = (size_t)1 << 20;
  ctx->pool[0].gen = ctx->pool[1].gen = 1;
  ctx->pool[0].budget = ctx->opt.pass_budget;
  ctx->pool[1].budget = ctx->opt.persistent_budget;
  ctx->training = 1;
  ctx->labels = malloc(sizeof *ctx->labels * 16);
  ctx->caplabels = 16;
  if (!ctx->labels || !(ctx->labels[0] = rg__strdup(ctx, ""))) {
    free(ctx->labels);
    free(ctx);
    return RG_ERR_OOM;
  }
  ctx->nlabels = 1;
  ctx->be = ctx->dev = choose_backend(ctx);
  if (ctx->opt.dry_run) {
    ctx->dry = rg_dry_backend;
    ctx->dry.chunk_min = ctx->dev->chunk_min;
    ctx->be = &ctx->dry;
  }
  rg_status st = ctx->be->open(ctx);
  if (st != RG_OK) {
    rg_close(ctx);
    return st;
  }
  *out = ctx;
  return RG_OK;
}

rg_status rg_close(rg_ctx *ctx) {
  if (!ctx) return RG_OK;
  rg_status st = ctx->be && ctx->be_state ? rg__drain(ctx, RG_DRAIN_CLOSE) : RG_OK;
  while (ctx->optims) rg_optim_free(ctx->optims);
  rg__dist_free(ctx);
  if (ctx->be && ctx->be_state) {
    for (int p = 0; p < 2; p++) rg__arena_reset(ctx, &ctx->pool[p].arena, false, true);
    rg__arena_reset(ctx, &ctx->stage, true, true);
    ctx->be->close(ctx);
  }
  for (int p = 0; p < 2; p++) {
    rg__free(ctx, ctx->pool[p].t);
    rg__free(ctx, ctx->pool[p].arena.chunks);
  }
  rg__free(ctx, ctx->stage.chunks);
  rg__free(ctx, ctx->nodes);
  rg__free_params(ctx);
  rg__free(ctx, ctx->zero_list.ref);
  free_strings(ctx, ctx->fails, ctx->nfails);
  rg__free(ctx, ctx->fails);
  free_strings(ctx, ctx->meta, (uint32_t)ctx->nmeta * 2);
  rg__free(ctx, ctx->meta);
  free_strings(ctx, ctx->labels, ctx->nlabels);
  rg__free(ctx, ctx->labels);
  rg__free(ctx, ctx->lstack);
  free(ctx);
  return st;
}

const char *rg_device_name(const rg_ctx *ctx) { return ctx ? ctx->devname : ""; }
rg_device rg_device_kind(const rg_ctx *ctx) {
  return ctx && ctx->dev == &rg_cuda_backend ? RG_DEVICE_CUDA : RG_DEVICE_CPU;
}
rg_status rg_device_memory(rg_ctx *ctx, size_t *available, size_t *total) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!available || !total)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_device_memory", "available and total must "
                    "point at size_t variables to receive the byte counts");
  return ctx->dev->meminfo(ctx, available, total);
}
void rg_set_training(rg_ctx *ctx, int training) {
  if (ctx) ctx->training = training != 0;
}
void rg_set_check_finite(rg_ctx *ctx, int on) {
  if (ctx) ctx->opt.check_finite = on != 0;
}

/* ---- stats ----------------------------------------------------------------------------- */

void rg_stats_get(const rg_ctx *ctx, rg_stats *out) {
  if (!ctx || !out) return;
  *out = ctx->st;
  out->pass_bytes = ctx->pool[0].bytes;
  out->pass_peak = ctx->pool[0].peak;
  out->persistent_bytes = ctx->pool[1].bytes;
  out->persistent_peak = ctx->pool[1].peak;
  out->device_bytes = ctx->pool[0].arena.reserved + ctx->pool[1].arena.reserved;
  out->device_peak = ctx->pool[0].arena.reserved_peak + ctx->pool[1].arena.reserved_peak;
}

void rg_stats_reset(rg_ctx *ctx) {
  if (!ctx) return;
  memset(&ctx->st, 0, sizeof ctx->st);
  for (int p = 0; p < 2; p++) {
    ctx->pool[p].peak = ctx->pool[p].bytes;
    ctx->pool[p].arena.reserved_peak = ctx->pool[p].arena.reserved;
  }
}
