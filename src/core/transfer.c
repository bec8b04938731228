/*
 * transfer.c - the calls that move bytes between the host and tensors: rg_input (a
 * recorded upload), rg_constant, rg_read, rg_item and rg_write.
 *
 * Invariants: a read or a write drains the queue first, so it sees (or replaces) the
 * value every recorded node left; a read whose drain computes the tensor gets its bytes
 * within that drain's synchronisation (rg_readback); every byte moved is counted in
 * rg_stats by call site.
 */
#include "internal.h"

static bool valid_dtype(rg_dtype dt) { return dt == RG_F32 || dt == RG_BF16 || dt == RG_I32; }

rg_tensor rg_input(rg_ctx *ctx, rg_dtype dt, int ndim, const int64_t *dims, const void *host) {
  if (!ctx) return RG_NONE;
  if (!valid_dtype(dt)) {
    rg__fail(ctx, RG_ERR_MISUSE, "rg_input", "dtype %d is not RG_F32, RG_BF16 or RG_I32", dt);
    return RG_NONE;
  }
  if (!host) {
    rg__fail(ctx, RG_ERR_MISUSE, "rg_input", "host is NULL; pass the bytes to upload");
    return RG_NONE;
  }
  rg_node *n = rg__record(ctx, RG_OP_UPLOAD);
  if (!n) return RG_NONE;
  uint32_t out = rg__new(ctx, RG_POOL_PASS, dt, ndim, dims, "rg_input");
  size_t bytes = out ? rg__t(ctx, out)->nbytes : 0;
  void *stage = out ? rg__stage_copy(ctx, host, bytes) : NULL;
  if (!stage) {
    if (out) rg__fail(ctx, RG_ERR_OOM, "rg_input", "out of host staging memory");
    ctx->n_nodes--;
    return RG_NONE;
  }
  n = &ctx->nodes[ctx->n_nodes - 1];
  n->out[0] = out;
  n->i[1] = (int64_t)bytes;
  n->aux = stage;
  rg__count_xfer(ctx, false, RG_SITE_INPUT, bytes);
  return rg__commit(ctx, n) == RG_OK ? rg__handle(ctx, out) : RG_NONE;
}

rg_tensor rg_constant(rg_ctx *ctx, rg_dtype dt, int ndim, const int64_t *dims,
                      const void *host) {
  if (!ctx) return RG_NONE;
  if (!valid_dtype(dt))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_constant", "dtype %d is not RG_F32, RG_BF16 or "
                    "RG_I32", dt), RG_NONE;
  if (!host)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_constant", "host is NULL; pass the bytes to "
                    "upload"), RG_NONE;
  rg_pool_s *p = &ctx->pool[RG_POOL_PERSISTENT];
  size_t bytes0 = p->bytes;
  uint32_t n0 = p->n;
  uint32_t c = rg__new(ctx, RG_POOL_PERSISTENT, dt, ndim, dims, "rg_constant");
  if (!c) return RG_NONE;
  rg_tinfo *t = rg__t(ctx, c);
  rg_status st = ctx->be->upload(ctx, t->data, host, t->nbytes);
  if (st != RG_OK) { /* as rg_param: the arena bump stays, the table entry goes */
    p->bytes = bytes0;
    p->n = n0;
    return rg__fail(ctx, st, "rg_constant", "the upload failed"), RG_NONE;
  }
  rg__count_xfer(ctx, false, RG_SITE_INPUT, t->nbytes);
  return rg__handle(ctx, c);
}

/* ---- reads and writes --------------------------------------------------------------- */

rg_tinfo *rg__settle(rg_ctx *ctx, uint32_t ref, const char *call, rg_drain_reason why,
                     bool overwrite, rg_status *st, rg_status *drained, rg_readback *rb) {
  bool pending = rg__t(ctx, ref)->state == RG_PENDING;
  rg_status ds = rg__drain_read(ctx, why, rb);
  if (drained) *drained = ds;
  rg_tinfo *ti = rg__t(ctx, ref);
  if (ti->state == RG_FAILED && !overwrite) {
    /* The drain this read ran failed on the way to the value: report that failure itself
       (its message is the sticky one); a value failed earlier reads RG_ERR_FAILED. */
    *st = pending && ds != RG_OK ? ds
                                 : rg__fail(ctx, RG_ERR_FAILED, call, "this value was not "
                                            "computed because its drain failed: %s",
                                            ti->fail ? ctx->fails[ti->fail - 1] : "?");
    return NULL;
  }
  /* A failure elsewhere in the drain does not spoil a value that was computed. */
  return ti;
}

/* Checks t for a read or write of exactly `bytes`, draining first. A read passes rb so the
   drain that computes t also downloads it (one synchronisation). */
static rg_tinfo *transfer_target(rg_ctx *ctx, rg_tensor t, const void *buf, size_t bytes,
                                 const char *call, rg_drain_reason why, rg_status *st,
                                 bool overwrite, rg_status *drained, rg_readback *rb) {
  uint32_t ref;
  if ((*st = rg__check(ctx, t, call, 1, &ref)) != RG_OK) return NULL;
  rg_tinfo *ti = rg__t(ctx, ref);
  if (!buf) {
    *st = rg__fail(ctx, RG_ERR_MISUSE, call, "the host buffer is NULL");
    return NULL;
  }
  if (bytes != ti->nbytes) {
    char d[96];
    rg__fmt_shape(d, sizeof d, ti->ndim, ti->dims);
    *st = rg__fail(ctx, RG_ERR_MISUSE, call, "bytes is %zu but the %s %s tensor holds %zu; "
                   "pass its exact size (rg_numel * element size)", bytes, d,
                   rg__dtype_name(ti->dtype), ti->nbytes);
    return NULL;
  }
  if (rb) *rb = (rg_readback){(void *)buf, ti->data, bytes, false};
  return rg__settle(ctx, ref, call, why, overwrite, st, drained, rb);
}

/* rg_read and rg_item: the bytes come with the drain when there is one, else a download. */
static rg_status read_into(rg_ctx *ctx, rg_tensor t, void *dst, size_t bytes, const char *call) {
  rg_status st, ds = RG_OK;
  rg_readback rb;
  rg_tinfo *ti = transfer_target(ctx, t, dst, bytes, call, RG_DRAIN_READ, &st, false, &ds, &rb);
  if (!ti) return st;
  if (!rb.done && (st = ctx->be->download(ctx, dst, ti->data, bytes)) != RG_OK) return st;
  rg__count_xfer(ctx, true, RG_SITE_READ, bytes);
  return ds == RG_ERR_NONFINITE ? ds : RG_OK; /* everything ran; the barrier still reports */
}

rg_status rg_read(rg_ctx *ctx, rg_tensor t, void *dst, size_t bytes) {
  return ctx ? read_into(ctx, t, dst, bytes, "rg_read") : RG_ERR_MISUSE;
}

rg_status rg_item(rg_ctx *ctx, rg_tensor t, float *out) {
  if (!ctx) return RG_ERR_MISUSE;
  uint32_t ref;
  rg_status st = rg__check(ctx, t, "rg_item", 1, &ref);
  if (st != RG_OK) return st;
  rg_tinfo *ti = rg__t(ctx, ref);
  if (ti->numel != 1 || ti->dtype != RG_F32)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_item", "the tensor has %lld elements of %s; "
                    "rg_item reads one F32 element (use rg_read for others)",
                    (long long)ti->numel, rg__dtype_name(ti->dtype));
  if (!out) return rg__fail(ctx, RG_ERR_MISUSE, "rg_item", "out is NULL");
  return read_into(ctx, t, out, 4, "rg_item");
}

rg_status rg_write(rg_ctx *ctx, rg_tensor t, const void *src, size_t bytes) {
  if (!ctx) return RG_ERR_MISUSE;
  uint32_t ref;
  rg_status st = rg__check(ctx, t, "rg_write", 1, &ref);
  if (st != RG_OK) return st;
  /* A failed value may be overwritten: a successful write gives it contents. */
  rg_tinfo *ti = transfer_target(ctx, t, src, bytes, "rg_write", RG_DRAIN_WRITE, &st, true, NULL,
                                  NULL);
  if (!ti) return st;
  if ((st = ctx->be->upload(ctx, ti->data, src, bytes)) != RG_OK) return st;
  ti->state = RG_READY;
  ti->fail = 0;
  rg__shadow_stale(ctx, ref);
  rg__count_xfer(ctx, false, RG_SITE_WRITE, bytes);
  return RG_OK;
}
