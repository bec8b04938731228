/*
 * inspect.c - handles a user can look at: rg_describe, rg_is_pending, rg_pool_of and
 * rg_dump_handles.
 *
 * Invariants:
 *  - Nothing here drains, allocates or sets the sticky error: a stale or forged handle is
 *    described, not reported, so these calls may run in error paths and debuggers and
 *    leave the queue, the stats and rg_error exactly as they were.
 *  - They only read: the tensor tables, the node that made a pass tensor (its op and
 *    label; nodes live for the whole pass generation) and the messages of failed drains.
 */
#include "internal.h"

#include <limits.h>
#include <stdio.h>

/* Text appended to a caller's buffer under snprintf's contract: n counts every byte
   asked for, buf keeps what fits and stays NUL-terminated (when cap > 0). */
typedef struct out { char *buf; size_t cap, n; } out;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void put(out *o, const char *fmt, ...) {
  bool room = o->n < o->cap;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(room ? o->buf + o->n : NULL, room ? o->cap - o->n : 0, fmt, ap);
  va_end(ap);
  if (k > 0) o->n += (size_t)k;
}

/* The ref of a live handle of ctx, else 0. */
static uint32_t live_ref(rg_ctx *ctx, rg_tensor t) {
  return rg_is_live(ctx, t) ? (uint32_t)(t.id >> 63) << 31 | (uint32_t)(t.id & 0x7fffffffu)
                            : 0;
}

static void describe_live(rg_ctx *ctx, uint32_t ref, out *o) {
  const rg_tinfo *t = rg__t(ctx, ref);
  int pool = (int)(ref >> 31);
  char shape[96];
  rg__fmt_shape(shape, sizeof shape, t->ndim, t->dims);
  /* The slot as the handle and rg__check's messages count it, from 1. */
  put(o, "%s %s %s gen %llu slot %u", rg__dtype_name(t->dtype), shape,
      pool ? "persistent" : "pass", (unsigned long long)ctx->pool[pool].gen,
      (unsigned)(ref & 0x7fffffffu));
  if (t->param >= 0 && t->param < ctx->nparams)
    put(o, ", %s\"%s\"", t->flags & RG_T_SHADOW ? "bf16 shadow of " : "param ",
        ctx->pnames[t->param]);
  for (int i = 0; pool && i < ctx->nparams; i++) /* no back link: a linear search */
    if (rg__t(ctx, ctx->prefs[i])->grad == ref) put(o, ", grad of \"%s\"", ctx->pnames[i]);
  if (t->state != RG_FAILED) {
    put(o, ", %s", t->state == RG_PENDING ? "pending" : "ready");
    /* A leaf (node 0) has no maker: inputs, parameters, and pass tensors whose tape
       rg_reset(RG_POOL_PERSISTENT) dropped. */
    if (t->node && t->node <= ctx->n_nodes) {
      const rg_node *n = &ctx->nodes[t->node - 1];
      const char *lab = rg__label_str(ctx, n->label);
      put(o, ": %s%s%s%s", rg_optab[n->op].name, *lab ? " [" : "", lab, *lab ? "]" : "");
    }
  }
  if (t->flags & RG_T_GRAD) put(o, ", requires grad");
  if (t->grad) put(o, ", has grad");
  if (t->ring) put(o, ", ring buffer (rg_ring_new)");
  if (t->flags & RG_T_FREED) put(o, ", bytes released");
  if (t->ckpt) put(o, ", given back by its checkpoint region");
  if (t->import) put(o, ", imported (the caller's memory)");
  if (t->exports) put(o, ", lent %u time%s (rg_export)", (unsigned)t->exports,
                      t->exports == 1 ? "" : "s");
  /* Last, since the message runs on ("op [label]: reason"). fail is 0 when keeping the
     message ran out of memory (queue.c). */
  if (t->state == RG_FAILED)
    put(o, ", failed: %s", t->fail && t->fail <= ctx->nfails ? ctx->fails[t->fail - 1]
                                                               : "(no message was kept)");
}

int rg_describe(rg_ctx *ctx, rg_tensor t, char *buf, size_t cap) {
  out o = {buf, buf ? cap : 0, 0};
  uint32_t ref = live_ref(ctx, t);
  if (!ctx) {
    put(&o, "no context");
  } else if (!t.id) {
    put(&o, "RG_NONE");
  } else if (ref) {
    describe_live(ctx, ref, &o);
  } else {
    /* The same verdicts as rg__check's: older generation stale, anything else forged. */
    int pool = (int)(t.id >> 63);
    uint64_t gen = (t.id >> 32) & 0x7fffffffu, now = ctx->pool[pool].gen & 0x7fffffffu;
    uint64_t slot = t.id & 0xffffffffu;
    if (pool && gen == now && slot && slot <= ctx->pool[pool].n)
      put(&o, "stale (persistent slot %llu: a ring buffer rg_ring_free freed)",
          (unsigned long long)slot);
    else if (gen < now)
      put(&o, "stale (%s pool generation %llu, now %llu)", pool ? "persistent" : "pass",
          (unsigned long long)gen, (unsigned long long)ctx->pool[pool].gen);
    else
      put(&o, "not a handle of this context (id 0x%016llx)", (unsigned long long)t.id);
  }
  return o.n > INT_MAX ? INT_MAX : (int)o.n;
}

int rg_is_pending(rg_ctx *ctx, rg_tensor t) {
  uint32_t ref = live_ref(ctx, t);
  return ref && rg__t(ctx, ref)->state == RG_PENDING;
}

int rg_pool_of(rg_ctx *ctx, rg_tensor t) {
  uint32_t ref = live_ref(ctx, t);
  return ref ? (int)(ref >> 31) : -1;
}

int rg_dump_handles(rg_ctx *ctx, int pool, void (*line)(void *user, const char *text),
                    void *user) {
  if (!ctx || !line || pool < -1 || pool > RG_POOL_PERSISTENT) return -1;
  int count = 0;
  char text[2048]; /* a longer line (a very long label or message) is cut */
  for (int p = 0; p <= RG_POOL_PERSISTENT; p++) {
    if (pool != -1 && p != pool) continue;
    /* Bounded by the table as it was and by its generation, so a line that records work
       or resets the pool cannot make the walk run on or read a slot twice. */
    uint64_t gen = ctx->pool[p].gen;
    for (uint32_t i = 0, n = ctx->pool[p].n; i < n && i < ctx->pool[p].n &&
                                             ctx->pool[p].gen == gen; i++) {
      rg_describe(ctx, rg__handle(ctx, (uint32_t)p << 31 | (i + 1)), text, sizeof text);
      line(user, text);
      if (count < INT_MAX) count++;
    }
  }
  return count;
}
