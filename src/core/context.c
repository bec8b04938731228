/*
 * context.c - opening and closing a context (rg_open, rg_close), its device and its
 * statistics.
 *
 * The top of the core's layers (docs/ARCHITECTURE.md): rg_open and rg_close may call
 * any other file of the core, and no file of the core calls this one. The backends are
 * reached only through their rg_backend tables.
 *
 * Invariants: rg_open either returns an open context or frees everything it made;
 * rg_close drains what is queued, then frees every resource the context holds, whatever
 * state an earlier failure left it in; nothing here exits or aborts.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rg_version(void) { return RG_VERSION_STRING; }

/* ---- open / close ------------------------------------------------------------------ */

static const rg_backend *choose_backend(rg_ctx *ctx) {
  rg_device d = ctx->opt.device;
  if (d == RG_DEVICE_CPU) return &rg_cpu_backend;
  if (d == RG_DEVICE_CUDA) return &rg_cuda_backend;
  if (rg_cuda_backend.available && rg_cuda_backend.available()) return &rg_cuda_backend;
  if (!ctx->opt.quiet)
    rg__notice("resgrad: no usable CUDA GPU found; running on the CPU");
  return &rg_cpu_backend;
}

/* RG_TRACE's value names a file (the trace file) rather than a mode: it holds a '/' or
   a '.', as "run.json" and "./run" do and "1" does not. */
static bool is_path(const char *v) { return strchr(v, '/') || strchr(v, '.'); }

static void free_strings(rg_ctx *ctx, char **s, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) rg__free(ctx, s[i]);
}

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
  if (env && is_path(env)) ctx->opt.trace_path = env;
  else if (env && *env == '1') ctx->opt.trace = 1;
  else if (env && *env && *env != '0' && !ctx->opt.quiet)
    rg__notice("resgrad: RG_TRACE=%.80s is neither 1 (print each drained node) nor a "
               "path (a value with a '/' or a '.', e.g. run.json); ignored", env);
  env = getenv("RG_CHECK_FINITE");
  if (env && *env == '1') ctx->opt.check_finite = 1;
  env = getenv("RG_BF16");
  if (env && *env == '1') ctx->opt.bf16 = 1;
  env = getenv("RG_CUDNN");
  if (env && *env == '0') ctx->opt.no_cudnn = 1;
  env = getenv("RG_GEMM_TUNE");
  if (env && *env == '1') ctx->opt.gemm_tune = 1;
  if (!ctx->opt.max_queued) ctx->opt.max_queued = (size_t)1 << 20;
  if (!ctx->opt.max_pass_nodes) ctx->opt.max_pass_nodes = (size_t)1 << 24;
  if (ctx->opt.max_pass_nodes > UINT32_MAX) /* a tensor names its node in 32 bits */
    ctx->opt.max_pass_nodes = UINT32_MAX;
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
  const char *path = ctx->opt.trace_path;
  ctx->opt.trace_path = NULL; /* the trace keeps its own copy */
  if (st == RG_OK && path && *path) {
    st = rg__trace_open(ctx, path);
    if (st != RG_OK && !ctx->opt.quiet) /* rg_open's failure keeps no message */
      rg__notice("resgrad: %s", ctx->errmsg);
  }
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
  while (ctx->datas) rg_data_free(ctx->datas);
  rg__dist_free(ctx);
  if (ctx->be && ctx->be_state) {
    for (int p = 0; p < 2; p++) rg__arena_reset(ctx, &ctx->pool[p].arena, false, true);
    rg__arena_reset(ctx, &ctx->stage, true, true);
    ctx->be->close(ctx);
  }
  if (ctx->trace && rg__trace_close(ctx) != RG_OK && st == RG_OK) st = RG_ERR_IO;
  rg__imports_release(ctx); /* the backend closed: nothing reads them any more */
  rg__free(ctx, ctx->imports);
  for (int p = 0; p < 2; p++) {
    rg__free(ctx, ctx->pool[p].t);
    rg__free(ctx, ctx->pool[p].arena.chunks);
  }
  rg__free(ctx, ctx->stage.chunks);
  rg__free(ctx, ctx->nodes);
  rg__free(ctx, ctx->regions);
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
  return ctx ? rg__device(ctx) : RG_DEVICE_CPU;
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
