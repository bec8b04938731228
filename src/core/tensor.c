/*
 * tensor.c - pools, arenas, handles, and the calls that move bytes (input, param, read,
 * write).
 *
 * Invariants:
 *  - A handle is (pool << 63) | (generation mod 2^31 << 32) | (slot + 1). rg__check
 *    validates it in O(1) against its own pool's generation before any memory is touched.
 *  - Arena allocation is a bump in allocation order, except that the pass pool first
 *    reuses ranges rg_backward released (best fit, lowest offset among equals). Both
 *    depend only on the sequence of allocations and releases, so an identical step after
 *    a reset yields identical offsets and addresses (a CUDA graph captured for one step
 *    replays for the next).
 *  - Budgets are checked before anything is allocated; a refused allocation changes
 *    nothing.
 *  - Persistent tensors are always READY: in-place updates (optimizers, rg_write) are
 *    ordered by the queue, and every read drains first.
 */
#include "internal.h"

#include <math.h>
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

/* ---- arenas --------------------------------------------------------------------------- */

static size_t align_up(size_t n) { return (n + RG_ALIGN - 1) & ~(size_t)(RG_ALIGN - 1); }

void *rg__arena_alloc(rg_ctx *ctx, rg_arena *a, size_t bytes, size_t *off, bool host) {
  bytes = align_up(bytes ? bytes : 1);
  rg_chunk *last = a->nchunks ? &a->chunks[a->nchunks - 1] : NULL;
  if (!last || a->used + bytes > last->size) {
    size_t cap = (size_t)a->capchunks;
    if (!rg__grow(ctx, (void **)&a->chunks, sizeof *a->chunks, (size_t)a->nchunks + 1, &cap))
      return NULL;
    a->capchunks = (int)cap;
    /* Chunks double so a growing step settles in a few allocations; after a reset the
       next chunk is sized for the whole previous step (hint). */
    size_t size = ctx->be->chunk_min;
    if (last && last->size * 2 > size) size = last->size * 2;
    if (a->hint > size) size = a->hint;
    if (bytes > size) size = bytes;
    void *p = host ? ctx->be->host_alloc(ctx, size) : ctx->be->alloc(ctx, size);
    if (!p) return NULL;
    if (last) a->base += last->size;
    a->chunks[a->nchunks++] = (rg_chunk){p, size};
    a->reserved += size;
    if (a->reserved > a->reserved_peak) a->reserved_peak = a->reserved;
    a->used = 0;
    a->hint = 0;
    last = &a->chunks[a->nchunks - 1];
  }
  void *p = (char *)last->p + a->used;
  if (off) *off = a->base + a->used;
  a->used += bytes;
  return p;
}

void rg__arena_reset(rg_ctx *ctx, rg_arena *a, bool host, bool release) {
  if (release || a->nchunks > 1) {
    size_t total = 0;
    for (int i = 0; i < a->nchunks; i++) {
      total += a->chunks[i].size;
      if (host) ctx->be->host_free(ctx, a->chunks[i].p);
      else ctx->be->free(ctx, a->chunks[i].p);
    }
    a->nchunks = 0;
    a->hint = release ? 0 : total;
    a->reserved = 0;
  }
  if (release) {
    rg__free(ctx, a->free);
    a->free = NULL;
    a->capfree = 0;
  }
  a->nfree = 0;
  a->used = 0;
  a->base = 0;
}

/* The best-fitting released range for `need` bytes (the smallest that holds them; the
   lowest offset among equals), cut from its front; NULL if none fits. Deterministic: the
   same sequence of allocations and releases gives the same offsets. */
static void *arena_reuse(rg_arena *a, size_t need, size_t *off) {
  int best = -1;
  for (int i = 0; i < a->nfree; i++)
    if (a->free[i].size >= need && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
  if (best < 0) return NULL;
  rg_range *r = &a->free[best];
  void *p = r->p;
  *off = r->off;
  r->off += need, r->p += need, r->size -= need;
  if (!r->size) {
    memmove(r, r + 1, sizeof *r * (size_t)(a->nfree - best - 1));
    a->nfree--;
  }
  return p;
}

void rg__release(rg_ctx *ctx, uint32_t ref) {
  rg_tinfo *t = rg__t(ctx, ref);
  if (ref >> 31 || (t->flags & RG_T_FREED)) return;
  if (t->alias) { /* a view owns no bytes: it unpins its base, which may be dead already */
    t->flags |= RG_T_FREED;
    rg_tinfo *b = rg__t(ctx, t->alias);
    if (--b->pins == 0 && (b->flags & RG_T_DEAD)) rg__release(ctx, t->alias);
    return;
  }
  if (t->pins) { /* views still read these bytes: released with the last of them */
    t->flags |= RG_T_DEAD;
    return;
  }
  rg_pool_s *pool = &ctx->pool[RG_POOL_PASS];
  rg_arena *a = &pool->arena;
  size_t size = align_up(t->nbytes ? t->nbytes : 1), base = 0;
  int c = 0;
  while (c + 1 < a->nchunks && t->off >= base + a->chunks[c].size) base += a->chunks[c++].size;
  size_t cap = (size_t)a->capfree;
  if (!rg__grow(ctx, (void **)&a->free, sizeof *a->free, (size_t)a->nfree + 1, &cap))
    return; /* out of host memory: the bytes are just not reused */
  a->capfree = (int)cap;
  t->flags |= RG_T_FREED;
  pool->bytes -= size;
  int i = 0;
  while (i < a->nfree && a->free[i].off < t->off) i++;
  rg_range *f = a->free;
  bool prev = i > 0 && f[i - 1].chunk == c && f[i - 1].off + f[i - 1].size == t->off;
  bool next = i < a->nfree && f[i].chunk == c && t->off + size == f[i].off;
  if (prev && next) { /* fills the gap between two ranges */
    f[i - 1].size += size + f[i].size;
    memmove(&f[i], &f[i + 1], sizeof *f * (size_t)(a->nfree - i - 1));
    a->nfree--;
  } else if (prev) {
    f[i - 1].size += size;
  } else if (next) {
    f[i].off = t->off, f[i].p = (char *)t->data, f[i].size += size;
  } else {
    memmove(&f[i + 1], &f[i], sizeof *f * (size_t)(a->nfree - i));
    f[i] = (rg_range){t->off, size, (char *)t->data, c};
    a->nfree++;
  }
}

/* ---- tensors --------------------------------------------------------------------------- */

uint32_t rg__view(rg_ctx *ctx, uint32_t base, rg_shape s, const char *call) {
  rg_pool_s *p = &ctx->pool[RG_POOL_PASS];
  size_t cap = p->cap;
  if (!rg__grow(ctx, (void **)&p->t, sizeof *p->t, (size_t)p->n + 1, &cap)) {
    rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for the tensor table");
    return 0;
  }
  p->cap = (uint32_t)cap;
  uint32_t root = rg__t(ctx, base)->alias ? rg__t(ctx, base)->alias : base;
  rg_tinfo *r = rg__t(ctx, root), *t = &p->t[p->n++];
  memset(t, 0, sizeof *t);
  t->dtype = (uint8_t)s.dtype;
  t->ndim = (uint8_t)s.ndim;
  for (int i = 0; i < s.ndim; i++) t->dims[i] = s.dims[i];
  t->numel = r->numel;
  t->nbytes = r->nbytes;
  t->off = r->off;
  t->data = r->data;
  t->param = -1;
  t->alias = root;
  r->pins++;
  return p->n; /* pool 0: (0 << 31) | slot + 1 */
}

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

rg_status rg__check(rg_ctx *ctx, rg_tensor t, const char *call, int operand, uint32_t *ref) {
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
  *ref = (uint32_t)pool << 31 | (uint32_t)slot;
  return RG_OK;
}

uint32_t rg__new(rg_ctx *ctx, rg_pool pool, rg_dtype dt, int ndim, const int64_t *dims,
                 const char *call) {
  if (ndim < 0 || ndim > RG_MAX_DIMS) {
    rg__fail(ctx, RG_ERR_MISUSE, call, "ndim %d is outside [0, %d]", ndim, RG_MAX_DIMS);
    return 0;
  }
  if (ndim && !dims) {
    rg__fail(ctx, RG_ERR_MISUSE, call, "dims is NULL for ndim %d", ndim);
    return 0;
  }
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    if (dims[i] < 0 || (dims[i] && numel > ((int64_t)1 << 40) / dims[i])) {
      rg__fail(ctx, RG_ERR_MISUSE, call, "dimension %d is %lld; sizes must be in [0, 2^40]",
               i, (long long)dims[i]);
      return 0;
    }
    numel *= dims[i];
  }
  rg_pool_s *p = &ctx->pool[pool];
  size_t nbytes = (size_t)numel * rg__dtype_size(dt);
  size_t need = align_up(nbytes ? nbytes : 1);
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
  size_t cap = p->cap;
  if (!rg__grow(ctx, (void **)&p->t, sizeof *p->t, (size_t)p->n + 1, &cap)) {
    rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for the tensor table");
    return 0;
  }
  p->cap = (uint32_t)cap;
  if (p->n >= 0x7ffffffeu) {
    rg__fail(ctx, RG_ERR_OOM, call, "the %s pool holds 2^31 tensors; reset it",
             pool_name(pool));
    return 0;
  }
  size_t off = 0;
  void *data = pool == RG_POOL_PASS ? arena_reuse(&p->arena, need, &off) : NULL;
  if (!data) data = rg__arena_alloc(ctx, &p->arena, nbytes, &off, false);
  if (!data) {
    rg__fail(ctx, RG_ERR_OOM, call, "the device is out of memory for %zu more bytes of the "
             "%s pool (%zu in use); lower the batch or model size", need, pool_name(pool),
             p->bytes);
    return 0;
  }
  rg_tinfo *t = &p->t[p->n++];
  memset(t, 0, sizeof *t);
  t->dtype = (uint8_t)dt;
  t->ndim = (uint8_t)ndim;
  for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
  t->numel = numel;
  t->nbytes = nbytes;
  t->off = off;
  t->data = data;
  t->state = pool == RG_POOL_PERSISTENT ? RG_READY : RG_PENDING;
  t->param = -1;
  p->bytes += need;
  if (p->bytes > p->peak) p->peak = p->bytes;
  return (uint32_t)pool << 31 | p->n;
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

/* ---- inputs and parameters -------------------------------------------------------------- */

static bool valid_dtype(rg_dtype dt) { return dt == RG_F32 || dt == RG_BF16 || dt == RG_I32; }

static void count(rg_xfer *total, rg_xfer *site, size_t bytes) {
  total->count++;
  total->bytes += bytes;
  site->count++;
  site->bytes += bytes;
}

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
  count(&ctx->st.up, &ctx->st.up_site[RG_SITE_INPUT], bytes);
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
  count(&ctx->st.up, &ctx->st.up_site[RG_SITE_INPUT], t->nbytes);
  return rg__handle(ctx, c);
}

/* Parameter init values come from Philox keyed by (seed, parameter index), so a model
   is the same whatever else the context did before building it. */
static void init_values(float *v, int64_t n, rg_init init, uint64_t seed, uint64_t idx) {
  for (int64_t i = 0; i < n; i += 2) {
    uint32_t r[4];
    rg_philox(seed, 0x1000000000ull | idx, (uint64_t)i, r);
    double u1 = (r[0] + 1.0) / 4294967296.0, u2 = r[1] / 4294967296.0;
    double rad = sqrt(-2.0 * log(u1)), z[2] = {rad * cos(6.283185307179586 * u2), rad * sin(6.283185307179586 * u2)};
    double u[2] = {r[2] / 4294967296.0, r[3] / 4294967296.0};
    for (int k = 0; k < 2 && i + k < n; k++) {
      switch (init.kind) {
      case RG_INIT_ONES: v[i + k] = 1.0f; break;
      case RG_INIT_CONST: v[i + k] = init.a; break;
      case RG_INIT_NORMAL: v[i + k] = (float)(init.b + init.a * z[k]); break;
      case RG_INIT_UNIFORM: v[i + k] = (float)(init.a + (init.b - init.a) * u[k]); break;
      default: v[i + k] = 0.0f;
      }
    }
  }
}

/* Uploads a new parameter's initial values and zeroes its gradient; a dry run has no
   values to make. RG_ERR_OOM: no host memory for them. */
static rg_status fill_param(rg_ctx *ctx, uint32_t w, uint32_t g, rg_init init) {
  if (ctx->opt.dry_run) return RG_OK;
  rg_tinfo *t = rg__t(ctx, w);
  float *host = rg__malloc(ctx, t->nbytes ? t->nbytes : 1);
  if (!host) return RG_ERR_OOM;
  init_values(host, t->numel, init, ctx->opt.seed, (uint64_t)ctx->nparams);
  rg_status st = ctx->be->upload(ctx, t->data, host, t->nbytes);
  if (st == RG_OK) st = ctx->be->zero(ctx, rg__t(ctx, g)->data, t->nbytes);
  rg__free(ctx, host);
  return st;
}

rg_tensor rg_param(rg_ctx *ctx, const char *name, rg_dtype dt, int ndim, const int64_t *dims,
                   rg_init init) {
  if (!ctx) return RG_NONE;
  if (!name || !*name)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_param", "name is empty; parameters need a unique "
                    "name for checkpoints"), RG_NONE;
  if (strlen(name) > 255 || !strcmp(name, "__metadata__") || !strncmp(name, "optim.", 6))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_param", "the name \"%.40s%s\" is reserved or too "
                    "long: names are at most 255 bytes, and \"__metadata__\" and names starting "
                    "with \"optim.\" belong to checkpoints", name, strlen(name) > 40 ? "..." : ""),
           RG_NONE;
  if (dt != RG_F32)
    return rg__fail(ctx, dt == RG_BF16 ? RG_ERR_UNSUPPORTED : RG_ERR_MISUSE, "rg_param",
                    "parameter \"%s\" has dtype %s; parameters are F32 master weights — "
                    "rg_cast them to BF16 in the forward pass", name, rg__dtype_name(dt)),
           RG_NONE;
  if (init.kind < RG_INIT_ZEROS || init.kind > RG_INIT_CONST)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_param", "parameter \"%s\": init kind %d is "
                    "unknown; use RG_INIT_ZEROS/ONES/NORMAL/UNIFORM/CONST", name, init.kind),
           RG_NONE;
  if (rg_param_find(ctx, name).id)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_param", "a parameter named \"%s\" exists; names "
                    "must be unique (use a prefix per layer)", name), RG_NONE;
  if (ctx->nparams == ctx->capparams) {
    size_t nc = ctx->capparams ? (size_t)ctx->capparams * 2 : 16;
    char **a = rg__realloc(ctx, ctx->pnames, nc * sizeof *a);
    if (a) ctx->pnames = a;
    uint32_t *b = a ? rg__realloc(ctx, ctx->prefs, nc * sizeof *b) : NULL;
    if (b) ctx->prefs = b;
    uint32_t *c = b ? rg__realloc(ctx, ctx->zero_list.ref, nc * sizeof *c) : NULL;
    if (!c) return rg__fail(ctx, RG_ERR_OOM, "rg_param", "out of host memory"), RG_NONE;
    ctx->zero_list.ref = c;
    ctx->capparams = (int)nc;
  }
  rg_pool_s *p = &ctx->pool[RG_POOL_PERSISTENT];
  size_t bytes0 = p->bytes;
  uint32_t n0 = p->n;
  char *nm = rg__strdup(ctx, name);
  uint32_t w = nm ? rg__new(ctx, RG_POOL_PERSISTENT, dt, ndim, dims, "rg_param") : 0;
  uint32_t g = w ? rg__new(ctx, RG_POOL_PERSISTENT, dt, ndim, dims, "rg_param") : 0;
  rg_status st = g ? fill_param(ctx, w, g, init) : RG_OK;
  if (!g || st != RG_OK) {
    if (!nm || st == RG_ERR_OOM) rg__fail(ctx, RG_ERR_OOM, "rg_param", "out of host memory");
    else if (st != RG_OK) rg__fail(ctx, st, "rg_param", "could not initialise \"%s\"", name);
    rg__free(ctx, nm);
    /* The arena bump is not undone (offsets stay deterministic); the bytes are released
       from the budget and the table entries dropped. */
    p->bytes = bytes0;
    p->n = n0;
    return RG_NONE;
  }
  rg_tinfo *t = rg__t(ctx, w);
  count(&ctx->st.up, &ctx->st.up_site[RG_SITE_PARAM_INIT], t->nbytes);
  t->flags = RG_T_GRAD | RG_T_PARAM;
  t->grad = g;
  t->param = ctx->nparams;
  ctx->pnames[ctx->nparams] = nm;
  ctx->prefs[ctx->nparams] = w;
  ctx->zero_list.ref[ctx->nparams] = g;
  ctx->zero_list.n = ++ctx->nparams;
  return rg__handle(ctx, w);
}

void rg__free_params(rg_ctx *ctx) {
  for (int i = 0; i < ctx->nparams; i++) rg__free(ctx, ctx->pnames[i]);
  rg__free(ctx, ctx->pnames);
  rg__free(ctx, ctx->prefs);
  ctx->pnames = NULL;
  ctx->prefs = NULL;
  ctx->nparams = ctx->capparams = 0;
}

int rg_param_count(rg_ctx *ctx) { return ctx ? ctx->nparams : 0; }
rg_tensor rg_param_at(rg_ctx *ctx, int i) {
  return ctx && i >= 0 && i < ctx->nparams ? rg__handle(ctx, ctx->prefs[i]) : RG_NONE;
}
rg_tensor rg_param_find(rg_ctx *ctx, const char *name) {
  if (!ctx || !name) return RG_NONE;
  for (int i = 0; i < ctx->nparams; i++)
    if (!strcmp(ctx->pnames[i], name)) return rg__handle(ctx, ctx->prefs[i]);
  return RG_NONE;
}
const char *rg_name(rg_ctx *ctx, rg_tensor t) {
  uint32_t ref;
  if (!ctx || rg__check(ctx, t, "rg_name", 1, &ref) != RG_OK) return NULL;
  int i = rg__t(ctx, ref)->param;
  return i >= 0 ? ctx->pnames[i] : NULL;
}

/* ---- reads and writes --------------------------------------------------------------- */

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
  bool pending = ti->state == RG_PENDING;
  if (rb) *rb = (rg_readback){(void *)buf, ti->data, bytes, false};
  rg_status ds = rg__drain_read(ctx, why, rb);
  if (drained) *drained = ds;
  ti = rg__t(ctx, ref);
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

/* rg_read and rg_item: the bytes come with the drain when there is one, else a download. */
static rg_status read_into(rg_ctx *ctx, rg_tensor t, void *dst, size_t bytes, const char *call) {
  rg_status st, ds = RG_OK;
  rg_readback rb;
  rg_tinfo *ti = transfer_target(ctx, t, dst, bytes, call, RG_DRAIN_READ, &st, false, &ds, &rb);
  if (!ti) return st;
  if (!rb.done && (st = ctx->be->download(ctx, dst, ti->data, bytes)) != RG_OK) return st;
  count(&ctx->st.down, &ctx->st.down_site[RG_SITE_READ], bytes);
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
  count(&ctx->st.up, &ctx->st.up_site[RG_SITE_WRITE], bytes);
  return RG_OK;
}

/* ---- queries ------------------------------------------------------------------------- */

static rg_tinfo *query(rg_ctx *ctx, rg_tensor t, const char *call) {
  uint32_t ref;
  if (!ctx || rg__check(ctx, t, call, 1, &ref) != RG_OK) return NULL;
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
  return gen == (ctx->pool[pool].gen & 0x7fffffffu) && slot && slot <= ctx->pool[pool].n;
}
uint64_t rg_generation(const rg_ctx *ctx, rg_pool pool) {
  return ctx && (pool == RG_POOL_PASS || pool == RG_POOL_PERSISTENT) ? ctx->pool[pool].gen : 0;
}
