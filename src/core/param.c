/*
 * param.c - parameters: rg_param (a named persistent F32 tensor with a gradient and
 * initial values), lookups by index and name, and the freshness of their BF16 shadows.
 *
 * Invariants: names are unique, at most 255 bytes, and never "__metadata__" or
 * "optim.*" (checkpoints use those); a parameter's index is its creation order, and its
 * initial values depend only on (seed, index), never on what the context did before.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

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
  rg__count_xfer(ctx, false, RG_SITE_PARAM_INIT, t->nbytes);
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

/* A parameter's value changed outside the queue (rg_write, rg_load): its shadow is not
   its rounding any more. */
void rg__shadow_stale(rg_ctx *ctx, uint32_t param) {
  uint32_t s = rg__t(ctx, param)->shadow;
  if (s) rg__t(ctx, s)->flags &= (uint8_t)~RG_T_FRESH;
}

/* After a failed drain (its later nodes never run), no shadow is known to be fresh. */
void rg__shadows_stale(rg_ctx *ctx) {
  for (int i = 0; i < ctx->nparams; i++) rg__shadow_stale(ctx, ctx->prefs[i]);
}
