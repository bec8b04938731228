/*
 * tensor.c - tensors: handles and their checks, new tensors in the pools, views, and the
 * queries (rg_ndim, rg_dim, ...).
 *
 * Invariants:
 *  - A handle is (pool << 63) | (generation mod 2^31 << 32) | (slot + 1). rg__check
 *    validates it in O(1) against its own pool's generation before any memory is touched,
 *    and a persistent one against its slot's RG_T_FREED (a ring rg_ring_free freed).
 *  - Budgets are checked before anything is allocated; a refused allocation changes
 *    nothing.
 *  - Persistent tensors are always READY: in-place updates (optimizers, rg_write) are
 *    ordered by the queue, and every read drains first.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

size_t rg__dtype_size(int dt) { return dt == RG_BF16 ? 2 : 4; }
const char *rg__dtype_name(int dt) {
  return dt == RG_F32 ? "F32" : dt == RG_BF16 ? "BF16" : dt == RG_I32 ? "I32" : "?";
}
static const char *pool_name(int p) { return p ? "persistent" : "pass"; }

int64_t rg__nonfinite(const void *p, int dtype, int64_t n, float *v) {
  for (int64_t e = 0; dtype != RG_I32 && e < n; e++) {
    *v = dtype == RG_F32 ? ((const float *)p)[e] : rg_bf16_to_f32(((const uint16_t *)p)[e]);
    if (*v - *v != 0) return e; /* NaN or Inf */
  }
  return -1;
}

/* ---- tensors --------------------------------------------------------------------------- */

rg_tensor rg__handle(rg_ctx *ctx, uint32_t ref) {
  if (!ref) return RG_NONE;
  uint64_t pool = ref >> 31, gen = ctx->pool[pool].gen & 0x7fffffffu;
  return (rg_tensor){pool << 63 | gen << 32 | (ref & 0x7fffffffu)};
}

void rg__fmt_shape(char *buf, size_t cap, int ndim, const int64_t *dims) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* rg__check without its refusal of checkpointed tensors: the shape queries, which touch
   no memory, answer for them too. */
static rg_status check_handle(rg_ctx *ctx, rg_tensor t, const char *call, int operand,
                              uint32_t *ref) {
  *ref = 0;
  if (!t.id) {
    if (ctx->err != RG_OK) return ctx->err; /* an earlier call failed: keep its error */
    return rg__fail(ctx, RG_ERR_MISUSE, call,
                    "operand %d is RG_NONE; pass a tensor returned by rg_input, rg_param "
                    "or an op", operand);
  }
  int pool = (int)(t.id >> 63);
  uint64_t gen = (t.id >> 32) & 0x7fffffffu, slot = t.id & 0xffffffffu;
  rg_pool_s *p = &ctx->pool[pool];
  uint64_t now = p->gen & 0x7fffffffu;
  if (gen < now)
    return rg__fail(ctx, RG_ERR_STALE, call,
                    "operand %d comes from the %s pool of generation %llu, which was reset "
                    "(now %llu); %s",
                    operand, pool_name(pool), (unsigned long long)gen,
                    (unsigned long long)p->gen,
                    pool ? "parameters made before rg_reset(RG_POOL_PERSISTENT) are gone — "
                           "create them again"
                         : "tensors made before rg_step_begin do not survive it — make "
                           "per-step inputs after rg_step_begin, or use rg_param for values "
                           "that must persist");
  if (gen > now || slot == 0 || slot > p->n)
    return rg__fail(ctx, RG_ERR_MISUSE, call,
                    "operand %d (id 0x%016llx) is not a handle of this context (%s pool, "
                    "generation %llu, slot %llu of %u); use handles returned by this context",
                    operand, (unsigned long long)t.id, pool_name(pool),
                    (unsigned long long)gen, (unsigned long long)slot, p->n);
  if (pool && (p->t[slot - 1].flags & RG_T_FREED))
    return rg__fail(ctx, RG_ERR_STALE, call,
                    "operand %d is a ring buffer that rg_ring_free freed (persistent slot "
                    "%llu); make a new one with rg_ring_new", operand,
                    (unsigned long long)slot);
  *ref = (uint32_t)pool << 31 | (uint32_t)slot;
  return RG_OK;
}

rg_status rg__check(rg_ctx *ctx, rg_tensor t, const char *call, int operand, uint32_t *ref) {
  rg_status st = check_handle(ctx, t, call, operand, ref);
  /* The rules rg_backward records for a region read its tensors (ctx->replay): their
     nodes are pointed at the recomputed ones (rg__commit). */
  if (st != RG_OK || !rg__t(ctx, *ref)->ckpt || ctx->replay) return st;
  *ref = 0;
  return rg__fail(ctx, RG_ERR_MISUSE, call,
                  "operand %d was made inside an activation checkpoint region, which gave "
                  "its bytes back at rg_checkpoint_end for rg_backward to recompute; after "
                  "the region only its output (the tensor passed to rg_checkpoint_end) and "
                  "tensors given to rg_retain_grad before the end survive: make the value "
                  "you need the region's output, or compute it outside the region",
                  operand);
}

/* The element count of a shape, or -1 after failing (MISUSE) for a bad ndim or dims. */
static int64_t shape_numel(rg_ctx *ctx, int ndim, const int64_t *dims, const char *call) {
  if (ndim < 0 || ndim > RG_MAX_DIMS)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "ndim %d is outside [0, %d]", ndim,
                    RG_MAX_DIMS), -1;
  if (ndim && !dims)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "dims is NULL for ndim %d", ndim), -1;
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] < 0 || (dims[i] && numel > ((int64_t)1 << 40) / dims[i]))
      return rg__fail(ctx, RG_ERR_MISUSE, call, "dimension %d is %lld; sizes must be in "
                      "[0, 2^40]", i, (long long)dims[i]), -1;
    numel *= dims[i];
  }
  return numel;
}

/* A new entry at the end of pool's table, zeroed but for its shape; NULL after failing
   (OOM) when the table cannot grow. */
static rg_tinfo *new_entry(rg_ctx *ctx, rg_pool pool, rg_dtype dt, int ndim,
                           const int64_t *dims, int64_t numel, const char *call) {
  rg_pool_s *p = &ctx->pool[pool];
  size_t cap = p->cap;
  if (!rg__grow(ctx, (void **)&p->t, sizeof *p->t, (size_t)p->n + 1, &cap)) {
    rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for the tensor table");
    return NULL;
  }
  p->cap = (uint32_t)cap;
  if (p->n >= 0x7ffffffeu) {
    rg__fail(ctx, RG_ERR_OOM, call, "the %s pool holds 2^31 tensors; reset it",
             pool_name(pool));
    return NULL;
  }
  rg_tinfo *t = &p->t[p->n];
  memset(t, 0, sizeof *t);
  t->dtype = (uint8_t)dt;
  t->ndim = (uint8_t)ndim;
  for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
  t->numel = numel;
  t->nbytes = (size_t)numel * rg__dtype_size(dt);
  t->param = -1;
  return t;
}

uint32_t rg__view(rg_ctx *ctx, uint32_t base, rg_shape s, const char *call) {
  if (rg__t(ctx, base)->redo) base = rg__t(ctx, base)->redo; /* recomputed (rg__commit) */
  uint32_t root = rg__t(ctx, base)->alias ? rg__t(ctx, base)->alias : base;
  rg_tinfo *r = rg__t(ctx, root);
  rg_tinfo *t = new_entry(ctx, RG_POOL_PASS, (rg_dtype)s.dtype, s.ndim, s.dims, r->numel, call);
  if (!t) return 0;
  r = rg__t(ctx, root); /* the table may have moved */
  t->off = r->off;
  t->data = r->data;
  t->alias = root;
  r->pins++;
  return ++ctx->pool[RG_POOL_PASS].n; /* pool 0: (0 << 31) | slot + 1 */
}

uint32_t rg__adopt(rg_ctx *ctx, rg_dtype dt, int ndim, const int64_t *dims, void *data,
                   const char *call) {
  int64_t numel = shape_numel(ctx, ndim, dims, call);
  rg_tinfo *t = numel < 0 ? NULL : new_entry(ctx, RG_POOL_PASS, dt, ndim, dims, numel, call);
  if (!t) return 0;
  t->data = data;
  t->state = RG_READY;
  return ++ctx->pool[RG_POOL_PASS].n; /* pool 0: (0 << 31) | slot + 1 */
}

static uint32_t new_tensor(rg_ctx *ctx, rg_pool pool, rg_dtype dt, int ndim,
                           const int64_t *dims, const char *call, bool reuse) {
  int64_t numel = shape_numel(ctx, ndim, dims, call);
  if (numel < 0) return 0;
  rg_pool_s *p = &ctx->pool[pool];
  size_t nbytes = (size_t)numel * rg__dtype_size(dt);
  size_t need = rg__align_up(nbytes ? nbytes : 1);
  if (p->budget && p->bytes + need > p->budget) {
    char d[96];
    rg__fmt_shape(d, sizeof d, ndim, dims);
    rg__fail(ctx, RG_ERR_OOM, call,
             "the %s pool budget is %zu bytes, %zu are in use and this %s %s tensor needs "
             "%zu more; raise rg_options.%s_budget%s",
             pool_name(pool), p->budget, p->bytes, d, rg__dtype_name(dt), need,
             pool_name(pool),
             pool ? " or make the model smaller" : ", use a smaller batch or call "
                                                   "rg_step_begin more often");
    return 0;
  }
  rg_tinfo *t = new_entry(ctx, pool, dt, ndim, dims, numel, call);
  if (!t) return 0;
  size_t off = 0;
  void *data = reuse ? rg__arena_reuse(&p->arena, need, &off) : NULL;
  if (!data) data = rg__arena_alloc(ctx, &p->arena, nbytes, &off, false);
  if (!data) {
    rg__fail(ctx, RG_ERR_OOM, call, "the device is out of memory for %zu more bytes of the "
             "%s pool (%zu in use); lower the batch or model size", need, pool_name(pool),
             p->bytes);
    return 0;
  }
  p->n++;
  t->off = off;
  t->data = data;
  t->state = pool == RG_POOL_PERSISTENT ? RG_READY : RG_PENDING;
  p->bytes += need;
  if (p->bytes > p->peak) p->peak = p->bytes;
  return (uint32_t)pool << 31 | p->n;
}

uint32_t rg__new(rg_ctx *ctx, rg_pool pool, rg_dtype dt, int ndim, const int64_t *dims,
                 const char *call) {
  return new_tensor(ctx, pool, dt, ndim, dims, call, pool == RG_POOL_PASS);
}

uint32_t rg__new_reusing(rg_ctx *ctx, rg_pool pool, rg_dtype dt, int ndim,
                         const int64_t *dims, const char *call) {
  return new_tensor(ctx, pool, dt, ndim, dims, call, true);
}

void rg__tv(rg_ctx *ctx, uint32_t ref, rg_tv *v) {
  memset(v, 0, sizeof *v);
  if (!ref) return;
  rg_tinfo *t = rg__t(ctx, ref);
  v->p = t->data;
  v->dtype = t->dtype;
  v->ndim = t->ndim;
  for (int i = 0; i < t->ndim; i++) v->dims[i] = t->dims[i];
  v->n = t->numel;
}

/* ---- queries ------------------------------------------------------------------------- */

static rg_tinfo *query(rg_ctx *ctx, rg_tensor t, const char *call) {
  uint32_t ref;
  if (!ctx || check_handle(ctx, t, call, 1, &ref) != RG_OK) return NULL;
  return rg__t(ctx, ref);
}
int rg_ndim(rg_ctx *ctx, rg_tensor t) {
  rg_tinfo *ti = query(ctx, t, "rg_ndim");
  return ti ? ti->ndim : 0;
}
int64_t rg_dim(rg_ctx *ctx, rg_tensor t, int axis) {
  rg_tinfo *ti = query(ctx, t, "rg_dim");
  if (!ti) return -1;
  int a = axis < 0 ? axis + ti->ndim : axis;
  if (a < 0 || a >= ti->ndim) {
    rg__fail(ctx, RG_ERR_MISUSE, "rg_dim", "axis %d is outside a %d-axis tensor", axis,
             ti->ndim);
    return -1;
  }
  return ti->dims[a];
}
int64_t rg_numel(rg_ctx *ctx, rg_tensor t) {
  rg_tinfo *ti = query(ctx, t, "rg_numel");
  return ti ? ti->numel : 0;
}
rg_dtype rg_dtype_of(rg_ctx *ctx, rg_tensor t) {
  rg_tinfo *ti = query(ctx, t, "rg_dtype_of");
  return ti ? (rg_dtype)ti->dtype : RG_F32;
}
int rg_is_live(rg_ctx *ctx, rg_tensor t) {
  if (!ctx || !t.id) return 0;
  int pool = (int)(t.id >> 63);
  uint64_t gen = (t.id >> 32) & 0x7fffffffu, slot = t.id & 0xffffffffu;
  return gen == (ctx->pool[pool].gen & 0x7fffffffu) && slot && slot <= ctx->pool[pool].n &&
         !(pool && (ctx->pool[pool].t[slot - 1].flags & RG_T_FREED));
}
uint64_t rg_generation(const rg_ctx *ctx, rg_pool pool) {
  return ctx && (pool == RG_POOL_PASS || pool == RG_POOL_PERSISTENT) ? ctx->pool[pool].gen : 0;
}
