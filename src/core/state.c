/*
 * state.c - rg_state_new and rg_state_free: persistent tensors that recorded ops change
 * in place (a KV cache), made and given back as often as a program needs them.
 *
 * Invariants:
 *  - A state's first write is a recorded FILL of zeros, so it may take bytes that
 *    rg_state_free or rg_ring_free gave back (rg__new_reusing): the queue runs every node
 *    that reads the old tensor before the FILL changes them.
 *  - A freed state's handle is stale (RG_T_FREED); nodes queued before the free still run
 *    on its bytes, which no later tensor writes until its own recorded FILL.
 */
#include "internal.h"

bool rg__zero_node(rg_ctx *ctx, uint32_t ref) {
  rg_node *n = rg__record(ctx, RG_OP_FILL);
  if (!n) return false;
  n->out[0] = ref;
  return rg__commit(ctx, n) == RG_OK;
}

rg_tensor rg_state_new(rg_ctx *ctx, rg_dtype dtype, int ndim, const int64_t *dims) {
  const char *call = "rg_state_new";
  if (!ctx) return RG_NONE;
  if (dtype != RG_F32 && dtype != RG_BF16 && dtype != RG_I32)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "dtype %d is not RG_F32, RG_BF16 or RG_I32",
                    (int)dtype), RG_NONE;
  uint32_t ref = rg__new_reusing(ctx, RG_POOL_PERSISTENT, dtype, ndim, dims, call);
  if (!ref) return RG_NONE;
  if (!rg__zero_node(ctx, ref)) {
    rg__release_persistent(ctx, ref);
    return RG_NONE;
  }
  rg__t(ctx, ref)->freeable = 1;
  return rg__handle(ctx, ref);
}

rg_status rg_state_free(rg_ctx *ctx, rg_tensor state) {
  const char *call = "rg_state_free";
  uint32_t ref;
  if (!ctx) return RG_ERR_MISUSE;
  if (rg__check(ctx, state, call, 1, &ref) != RG_OK) return ctx->last;
  rg_tinfo *t = rg__t(ctx, ref);
  if (!t->freeable)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "operand 1 is not a state tensor; free only "
                    "what rg_state_new made (a ring with rg_ring_free)");
  if (t->exports)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "the state is lent %u time%s (rg_export); "
                    "end each loan with rg_unexport first", (unsigned)t->exports,
                    t->exports == 1 ? "" : "s");
  if (!rg__release_persistent(ctx, ref))
    return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for the free list");
  return RG_OK;
}
