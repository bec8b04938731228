/*
 * share.c - sharing memory with other libraries without a copy: rg_export lends a
 * tensor's bytes, rg_unexport takes the loan back, rg_import wraps the caller's bytes as
 * a pass tensor; rg_stream and rg_import_align tell a binding what to order on and what
 * alignment to ask for. What DLPack's producers and consumers need of a library.
 *
 * Invariants:
 *  - An open export pins: ctx->exports[pool] counts the open exports of each pool, and
 *    rg_step_begin and rg_reset of a pool refuse while it is not 0 (queue.c), so exported
 *    bytes stay where they are and hold the same tensor. A pass tensor's export also pins
 *    its root's bytes (rg_tinfo.pins), as a view does, so rg_backward never hands them
 *    to another tensor. t->exports counts the open exports of each handle, so
 *    rg_unexport undoes only what rg_export did.
 *  - An import is a pass tensor whose data is the caller's address: no arena bytes, no
 *    budget, never released to the arena (rg__release), never an op's output (outputs
 *    are always new arena tensors). Its release is called exactly once: after the drain
 *    of the pass pool's next reset, or at rg_close (rg__imports_release), and never for a
 *    call that failed (then nothing was kept).
 *  - A drain whose nodes read an import is signed with the import's address like any
 *    other operand's (CUDA's graph cache, backend.cu), so a graph captured on one address
 *    never replays for another.
 */
#include "internal.h"

#include <stdio.h>

rg_status rg_export(rg_ctx *ctx, rg_tensor t, void *stream, rg_memref *out) {
  if (!ctx) return RG_ERR_MISUSE;
  if (ctx->opt.dry_run) return rg__dry_refuse(ctx, "rg_export");
  uint32_t ref;
  rg_status st = rg__check(ctx, t, "rg_export", 1, &ref);
  if (st != RG_OK) return st;
  if (!out) return rg__fail(ctx, RG_ERR_MISUSE, "rg_export", "out is NULL; pass the "
                            "rg_memref to fill");
  rg_status drained;
  rg_tinfo *ti = rg__settle(ctx, ref, "rg_export", RG_DRAIN_READ, false, &st, &drained, NULL);
  if (!ti) return st;
  /* As rg_read reports it, with the value lent only on RG_OK (a binding then needs one
     test); a failure elsewhere in the drain does not spoil a computed value. */
  if (drained == RG_ERR_NONFINITE) return drained;
  if (ctx->be->handoff && (st = ctx->be->handoff(ctx, stream)) != RG_OK) return st;
  *out = (rg_memref){ti->data, rg__device(ctx),
                     rg__device(ctx) == RG_DEVICE_CUDA ? ctx->device_index : 0,
                     (rg_dtype)ti->dtype, ti->ndim, {0}};
  for (int i = 0; i < ti->ndim; i++) out->dims[i] = ti->dims[i];
  int pool = (int)(ref >> 31);
  if (pool == RG_POOL_PASS) rg__t(ctx, ti->alias ? ti->alias : ref)->pins++;
  rg__t(ctx, ref)->exports++;
  ctx->exports[pool]++;
  return RG_OK;
}

rg_status rg_unexport(rg_ctx *ctx, rg_tensor t) {
  if (!ctx) return RG_ERR_MISUSE;
  uint32_t ref;
  rg_status st = rg__check(ctx, t, "rg_unexport", 1, &ref);
  if (st != RG_OK) return st;
  rg_tinfo *ti = rg__t(ctx, ref);
  if (!ti->exports)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_unexport", "this tensor has no open export "
                    "(each rg_unexport undoes one rg_export of the same handle)");
  int pool = (int)(ref >> 31);
  ti->exports--;
  ctx->exports[pool]--;
  if (pool == RG_POOL_PASS) rg__unpin(ctx, ti->alias ? ti->alias : ref);
  return RG_OK;
}

/* The device a memref names, for messages. */
static void where(char *buf, size_t cap, const rg_memref *m) {
  if (m->device == RG_DEVICE_CPU) snprintf(buf, cap, "the CPU");
  else if (m->device == RG_DEVICE_CUDA) snprintf(buf, cap, "cuda:%d", m->device_index);
  else snprintf(buf, cap, "device %d", (int)m->device);
}

rg_tensor rg_import(rg_ctx *ctx, const rg_memref *m, void (*release)(void *user), void *user) {
  if (!ctx) return RG_NONE;
  if (ctx->opt.dry_run) return rg__dry_refuse(ctx, "rg_import"), RG_NONE;
  if (!m) return rg__fail(ctx, RG_ERR_MISUSE, "rg_import", "m is NULL; describe the "
                          "memory in an rg_memref"), RG_NONE;
  rg_device dev = rg__device(ctx);
  int index = dev == RG_DEVICE_CUDA ? ctx->device_index : 0;
  if (m->device != dev || (dev == RG_DEVICE_CUDA && m->device_index != index)) {
    char w[32];
    where(w, sizeof w, m);
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_import", "the memory is on %s but this context "
                    "runs on %s; copy it to the context's device first", w, ctx->devname),
           RG_NONE;
  }
  if (m->dtype != RG_F32 && m->dtype != RG_BF16 && m->dtype != RG_I32)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_import", "dtype %d is not RG_F32, RG_BF16 or "
                    "RG_I32", (int)m->dtype), RG_NONE;
  if (!m->data)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_import", "data is NULL; pass the address of "
                    "the memory's first element"), RG_NONE;
  size_t align = rg_import_align(ctx);
  if (align > 1 && (uintptr_t)m->data % align)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_import", "data %p is not aligned to %zu bytes, "
                    "which the kernels of %s need (rg_import_align); copy it first into "
                    "memory so aligned", m->data, align, ctx->devname), RG_NONE;
  char why[256] = "";
  if (ctx->be->owns && ctx->be->owns(ctx, m->data, why, sizeof why) != RG_OK)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_import", "%s; copy it to %s first", why,
                    ctx->devname), RG_NONE;
  size_t cap = ctx->capimports;
  if (!rg__grow(ctx, (void **)&ctx->imports, sizeof *ctx->imports, (size_t)ctx->nimports + 1,
                &cap))
    return rg__fail(ctx, RG_ERR_OOM, "rg_import", "out of host memory for the imports"),
           RG_NONE;
  ctx->capimports = (uint32_t)cap;
  uint32_t ref = rg__adopt(ctx, m->dtype, m->ndim, m->dims, m->data, "rg_import");
  if (!ref) return RG_NONE;
  ctx->imports[ctx->nimports++] = (rg_imported){release, user};
  rg__t(ctx, ref)->import = ctx->nimports;
  return rg__handle(ctx, ref);
}

void *rg_stream(rg_ctx *ctx) {
  return ctx && !ctx->opt.dry_run && ctx->be->stream ? ctx->be->stream(ctx) : NULL;
}

size_t rg_import_align(rg_ctx *ctx) { return ctx ? ctx->dev->import_align : 0; }
