/*
 * ring.c - ring buffers: rg_ring_new, rg_ring_push, rg_ring_gather, rg_ring_sample,
 * rg_ring_count and rg_ring_free.
 *
 * Invariants:
 *  - A ring is a persistent tensor [capacity, rows] whose rg_tinfo.ring names its state, a
 *    persistent I32 [4] (head, count, draws: ops.h). Only recorded nodes write either (the
 *    FILLs of rg_ring_new, RING_PUSH, RING_SAMPLE), so the queue orders every write after
 *    every reader recorded before it, and a replayed graph works on the state the device
 *    holds: no node bakes in a head, a count or a draw number.
 *  - A freed ring's bytes are reused only by a later ring (rg__new_reusing), whose zeroing
 *    is a recorded node too: every node queued before the free, which may still read the
 *    old ring, runs before those bytes change.
 */
#include "internal.h"

#include <string.h>

#define RING_MAX 2147483647 /* head and count are I32 on the device */

/* The ring and state refs of operand k of call; false with the error set when t is not a
   live ring. */
static bool ring_of(rg_ctx *ctx, rg_tensor t, const char *call, int k, uint32_t *ring,
                    uint32_t *state) {
  if (!ctx || rg__check(ctx, t, call, k, ring) != RG_OK) return false;
  *state = rg__t(ctx, *ring)->ring;
  if (!*state)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "operand %d is not a ring buffer; make one "
                    "with rg_ring_new", k), false;
  return true;
}

rg_tensor rg_ring_new(rg_ctx *ctx, rg_dtype dtype, int64_t capacity, int64_t rows) {
  const char *call = "rg_ring_new";
  if (!ctx) return RG_NONE;
  if (dtype != RG_F32 && dtype != RG_BF16 && dtype != RG_I32)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "dtype %d is not RG_F32, RG_BF16 or RG_I32",
                    (int)dtype), RG_NONE;
  if (capacity < 1 || capacity > RING_MAX || rows < 1)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "capacity %lld and rows %lld: capacity must "
                    "be in [1, 2^31 - 1] and rows >= 1", (long long)capacity,
                    (long long)rows), RG_NONE;
  int64_t dims[2] = {capacity, rows}, four = 4;
  uint32_t ring = rg__new_reusing(ctx, RG_POOL_PERSISTENT, dtype, 2, dims, call);
  uint32_t state = ring ? rg__new_reusing(ctx, RG_POOL_PERSISTENT, RG_I32, 1, &four, call) : 0;
  if (!state || !rg__zero_node(ctx, ring) || !rg__zero_node(ctx, state)) {
    /* What was made goes back; a FILL already queued writes bytes no one else holds
       until a later ring's own FILL, recorded after it. */
    if (ring) rg__release_persistent(ctx, ring);
    if (state) rg__release_persistent(ctx, state);
    return RG_NONE;
  }
  rg__t(ctx, ring)->ring = state;
  return rg__handle(ctx, ring);
}

rg_status rg_ring_push(rg_ctx *ctx, rg_tensor ring, rg_tensor entries) {
  const char *call = "rg_ring_push";
  uint32_t in[3];
  if (!ctx) return RG_ERR_MISUSE;
  if (!ring_of(ctx, ring, call, 1, &in[0], &in[1]) ||
      !rg__operand(ctx, entries, call, 2, 7, &in[2]))
    return ctx->last;
  if (in[2] == in[0])
    return rg__fail(ctx, RG_ERR_MISUSE, call, "operand 2 is the ring itself; push a copy "
                    "(rg_ring_gather of it, or rg_detach)");
  rg_shape sr = rg__shape(ctx, in[0]), se = rg__shape(ctx, in[2]);
  int64_t k = se.ndim == 1 ? 1 : se.ndim == 2 ? se.dims[0] : 0;
  if (se.dtype != sr.dtype)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "operand 2 has dtype %s and the ring %s; "
                    "rg_cast the entries first", rg__dtype_name(se.dtype),
                    rg__dtype_name(sr.dtype));
  if ((se.ndim != 1 && se.ndim != 2) || se.dims[se.ndim - 1] != sr.dims[1] || k < 1 ||
      k > sr.dims[0]) {
    char s[96];
    rg__fmt_shape(s, sizeof s, se.ndim, se.dims);
    return rg__fail(ctx, RG_ERR_MISUSE, call, "entries %s do not fit a ring of capacity "
                    "%lld and rows %lld: pass [k, %lld] with 1 <= k <= %lld, or [%lld] for "
                    "one entry", s, (long long)sr.dims[0], (long long)sr.dims[1],
                    (long long)sr.dims[1], (long long)sr.dims[0], (long long)sr.dims[1]);
  }
  return rg__emit(ctx, RG_OP_RING_PUSH, in, NULL, NULL, NULL, NULL, NULL);
}

rg_tensor rg_ring_gather(rg_ctx *ctx, rg_tensor ring, rg_tensor idx) {
  const char *call = "rg_ring_gather";
  uint32_t in[3], out[RG_MAX_OUT] = {0};
  if (!ctx || !ring_of(ctx, ring, call, 1, &in[0], &in[1]) ||
      !rg__operand(ctx, idx, call, 2, 1u << RG_I32, &in[2]))
    return RG_NONE;
  rg_shape sr = rg__shape(ctx, in[0]), si = rg__shape(ctx, in[2]), o = si;
  if (si.ndim >= RG_MAX_DIMS) {
    char s[96];
    rg__fmt_shape(s, sizeof s, si.ndim, si.dims);
    return rg__fail(ctx, RG_ERR_MISUSE, call, "the indices %s have %d axes; at most %d",
                    s, si.ndim, RG_MAX_DIMS - 1), RG_NONE;
  }
  o.dtype = sr.dtype;
  o.dims[o.ndim++] = sr.dims[1];
  if (rg__emit(ctx, RG_OP_RING_GATHER, in, &o, NULL, NULL, NULL, out) != RG_OK) return RG_NONE;
  return rg__handle(ctx, out[0]);
}

rg_tensor rg_ring_sample(rg_ctx *ctx, rg_tensor ring, int64_t n) {
  const char *call = "rg_ring_sample";
  uint32_t r, in[1], out[RG_MAX_OUT] = {0};
  if (!ctx || !ring_of(ctx, ring, call, 1, &r, &in[0])) return RG_NONE;
  if (n < 1 || n > RING_MAX)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "n %lld is outside [1, 2^31 - 1]",
                    (long long)n), RG_NONE;
  rg_shape o = {RG_I32, 1, {n}};
  int64_t iv[4] = {(int64_t)(ctx->opt.seed ^ RG_RING_SALT), 0, 0, 0};
  if (rg__emit(ctx, RG_OP_RING_SAMPLE, in, &o, iv, NULL, NULL, out) != RG_OK) return RG_NONE;
  return rg__handle(ctx, out[0]);
}

rg_status rg_ring_count(rg_ctx *ctx, rg_tensor ring, int64_t *count) {
  const char *call = "rg_ring_count";
  uint32_t r, state;
  if (!ctx) return RG_ERR_MISUSE;
  if (count) *count = 0;
  if (!ring_of(ctx, ring, call, 1, &r, &state)) return ctx->last;
  if (!count) return rg__fail(ctx, RG_ERR_MISUSE, call, "count is NULL");
  rg_status st = rg__drain(ctx, RG_DRAIN_READ);
  int32_t c = 0;
  rg_status dst = ctx->be->download(ctx, &c, (const int32_t *)rg__t(ctx, state)->data + 1,
                                    sizeof c);
  if (dst != RG_OK) return rg__fail(ctx, dst, call, "the download of the count failed");
  rg__count_xfer(ctx, true, RG_SITE_READ, sizeof c);
  *count = c;
  return st;
}

rg_status rg_ring_free(rg_ctx *ctx, rg_tensor ring) {
  const char *call = "rg_ring_free";
  uint32_t r, state;
  if (!ctx) return RG_ERR_MISUSE;
  if (!ring_of(ctx, ring, call, 1, &r, &state)) return ctx->last;
  uint32_t lent = rg__t(ctx, r)->exports;
  if (lent)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "the ring is lent %u time%s (rg_export); "
                    "end each loan with rg_unexport first", (unsigned)lent,
                    lent == 1 ? "" : "s");
  if (!rg__release_persistent(ctx, r) || !rg__release_persistent(ctx, state))
    return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for the free list");
  return RG_OK;
}
