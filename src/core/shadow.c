/*
 * shadow.c - a parameter's BF16 shadow (rg_options.bf16; RG_T_SHADOW in internal.h): the
 * persistent BF16 copy that products read instead of casting the parameter every step.
 *
 * Invariants: a parameter has at most one shadow, made on the first use that needs one.
 * RG_T_FRESH on it means that the queue, as recorded, leaves it equal to its parameter
 * rounded: set by the cast recorded here and by every optimizer step (optim.c), cleared
 * by rg__shadow_stale (param.c) when rg_write, rg_load or a failed drain breaks that.
 */
#include "internal.h"

/* The parameter's shadow (created now if it has none: a persistent BF16 tensor that
   stands for the parameter in gradients, see internal.h), and a recorded cast into it
   unless it is fresh. Every optimizer over the parameter writes it from now on. */
uint32_t rg__shadow(rg_ctx *ctx, uint32_t param) {
  uint32_t s = rg__t(ctx, param)->shadow;
  if (!s) {
    rg_shape sh = rg__shape(ctx, param);
    if (!(s = rg__new(ctx, RG_POOL_PERSISTENT, RG_BF16, sh.ndim, sh.dims, "autocast")))
      return 0;
    rg_tinfo *p = rg__t(ctx, param), *t = rg__t(ctx, s);
    t->flags = RG_T_GRAD | RG_T_PARAM | RG_T_SHADOW;
    t->grad = p->grad;
    t->param = p->param;
    p->shadow = s;
    for (rg_optim *o = ctx->optims; o; o = o->next)
      for (int i = 0; i < o->params.n; i++)
        if (o->params.ref[i] == param && o->pgen == ctx->pool[RG_POOL_PERSISTENT].gen)
          o->shadow.ref[i] = s;
  }
  if (rg__t(ctx, s)->flags & RG_T_FRESH) return s;
  rg_node *n = rg__record(ctx, RG_OP_CAST);
  if (!n) return 0;
  n->in[0] = param;
  n->out[0] = s;
  if (rg__commit(ctx, n) != RG_OK) return 0;
  rg__t(ctx, s)->flags |= RG_T_FRESH;
  return s;
}
