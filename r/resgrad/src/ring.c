/*
 * ring.c - the library's device ring buffers (rg_ring_*) from R: a ring is an ag_tensor
 * (its persistent [capacity, rows] table), so its lifetime and staleness are a tensor's.
 */
#include "rgr.h"

SEXP rgr_ring_new(SEXP cx, SEXP dtype, SEXP capacity, SEXP rows) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  long long cap = rgr_int_arg(capacity, "capacity"), nr = rgr_int_arg(rows, "rows");
  return rgr_result(cx, rg_ring_new(ctx, (rg_dtype)Rf_asInteger(dtype), cap, nr));
}

SEXP rgr_ring_push(SEXP ring, SEXP entries) {
  SEXP cx = rgr_ctx_of(ring);
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_tensor r = rgr_handle(ring);
  rgr_check(ctx, rg_ring_push(ctx, r, rgr_tensor_arg(cx, entries, "entries")));
  return R_NilValue;
}

SEXP rgr_ring_gather(SEXP ring, SEXP idx) {
  SEXP cx = rgr_ctx_of(ring);
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_tensor r = rgr_handle(ring);
  return rgr_result(cx, rg_ring_gather(ctx, r, rgr_tensor_arg(cx, idx, "idx")));
}

SEXP rgr_ring_sample(SEXP ring, SEXP n) {
  SEXP cx = rgr_ctx_of(ring);
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  return rgr_result(cx, rg_ring_sample(ctx, rgr_handle(ring), rgr_int_arg(n, "n")));
}

SEXP rgr_ring_count(SEXP ring) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(ring));
  int64_t count = 0;
  rgr_check(ctx, rg_ring_count(ctx, rgr_handle(ring), &count));
  return Rf_ScalarReal((double)count);
}

SEXP rgr_ring_free(SEXP ring) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(ring));
  rgr_check(ctx, rg_ring_free(ctx, rgr_handle(ring)));
  return R_NilValue;
}
