/*
 * optim.c - AdamW and SGD over every parameter, learning-rate schedules, gradient
 * clipping.
 *
 * Invariants: an optimizer's state (moments, hyperparameters, step count) lives in the
 * persistent pool, so a step records one fused node whose scalars are read from device
 * memory: changing the learning rate or counting steps never changes the recorded graph.
 * A schedule is host state of the optimizer baked into an LR_SCHEDULE node before each
 * update, which computes the rate from the device step count: the same node every step.
 * A non-finite gradient norm found by rg_clip_grad_norm makes the next update skip, with
 * weights, moments and the step count bit-identical. A step also rounds each updated
 * parameter into its BF16 shadow, if it has one (rg_options.bf16, shadow.c), so the next
 * forward pass reads it without a cast.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

static rg_status new_state(rg_ctx *ctx, rg_list *l, int n, bool make) {
  l->ref = rg__calloc(ctx, (size_t)(n ? n : 1), sizeof *l->ref);
  if (!l->ref) return rg__fail(ctx, RG_ERR_OOM, "rg_optim", "out of host memory");
  l->n = n;
  for (int i = 0; make && i < n; i++) {
    rg_shape s = rg__shape(ctx, ctx->prefs[i]); /* a copy: rg__new may move the table */
    uint32_t r = rg__new(ctx, RG_POOL_PERSISTENT, RG_F32, s.ndim, s.dims, "rg_optim");
    if (!r) return ctx->last;
    rg_status st = ctx->be->zero(ctx, rg__t(ctx, r)->data, rg__t(ctx, r)->nbytes);
    if (st != RG_OK) return rg__fail(ctx, st, "rg_optim", "could not zero optimizer state");
    l->ref[i] = r;
  }
  return RG_OK;
}

static rg_optim *make(rg_ctx *ctx, int kind, const float *hyper, bool moments2, bool moments1) {
  rg_optim *o = rg__calloc(ctx, 1, sizeof *o);
  if (!o) return rg__fail(ctx, RG_ERR_OOM, "rg_optim", "out of host memory"), NULL;
  o->ctx = ctx;
  o->kind = kind;
  o->pgen = ctx->pool[RG_POOL_PERSISTENT].gen;
  int n = ctx->nparams;
  rg_status st = new_state(ctx, &o->params, n, false);
  if (st == RG_OK) st = new_state(ctx, &o->grads, n, false);
  if (st == RG_OK) st = new_state(ctx, &o->m, moments1 ? n : 0, moments1);
  if (st == RG_OK) st = new_state(ctx, &o->v, moments2 ? n : 0, moments2);
  if (st == RG_OK) st = new_state(ctx, &o->shadow, n, false);
  for (int i = 0; st == RG_OK && i < n; i++) {
    o->params.ref[i] = ctx->prefs[i];
    o->grads.ref[i] = rg__t(ctx, ctx->prefs[i])->grad;
    o->shadow.ref[i] = rg__t(ctx, ctx->prefs[i])->shadow;
  }
  int64_t hd = RG_H_COUNT, one = 1;
  if (st == RG_OK && !(o->hyper = rg__new(ctx, RG_POOL_PERSISTENT, RG_F32, 1, &hd, "rg_optim")))
    st = ctx->last;
  if (st == RG_OK && !(o->step = rg__new(ctx, RG_POOL_PERSISTENT, RG_I32, 1, &one, "rg_optim")))
    st = ctx->last;
  if (st == RG_OK) st = ctx->be->upload(ctx, rg__t(ctx, o->hyper)->data, hyper, RG_H_COUNT * 4);
  if (st == RG_OK) st = ctx->be->zero(ctx, rg__t(ctx, o->step)->data, 4);
  if (st != RG_OK) {
    rg__fail(ctx, st, "rg_optim", "could not create the optimizer state");
    rg__free(ctx, o->params.ref);
    rg__free(ctx, o->grads.ref);
    rg__free(ctx, o->m.ref);
    rg__free(ctx, o->v.ref);
    rg__free(ctx, o->shadow.ref);
    rg__free(ctx, o);
    return NULL;
  }
  rg__count_xfer(ctx, false, RG_SITE_OPTIM, RG_H_COUNT * 4);
  o->next = ctx->optims;
  ctx->optims = o;
  return o;
}

rg_optim *rg_optim_adamw(rg_ctx *ctx, const rg_adamw_options *opt) {
  if (!ctx) return NULL;
  rg_adamw_options d = opt ? *opt : (rg_adamw_options){0};
  float h[RG_H_COUNT] = {d.lr ? d.lr : 1e-3f, d.beta1 ? d.beta1 : 0.9f,
                         d.beta2 ? d.beta2 : 0.999f, d.eps ? d.eps : 1e-8f, d.weight_decay};
  if (!(h[0] > 0) || !(h[1] >= 0 && h[1] < 1) || !(h[2] >= 0 && h[2] < 1) || !(h[3] > 0) ||
      !(h[4] >= 0))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_optim_adamw", "hyperparameters out of range: lr "
                    "%g > 0, betas %g, %g in [0,1), eps %g > 0, weight_decay %g >= 0", h[0],
                    h[1], h[2], h[3], h[4]), NULL;
  return make(ctx, RG_OPT_ADAMW, h, true, true);
}

rg_optim *rg_optim_sgd(rg_ctx *ctx, const rg_sgd_options *opt) {
  if (!ctx) return NULL;
  rg_sgd_options d = opt ? *opt : (rg_sgd_options){0};
  float h[RG_H_COUNT] = {d.lr ? d.lr : 1e-2f, d.momentum, 0, 0, d.weight_decay};
  if (!(h[0] > 0) || !(h[1] >= 0 && h[1] < 1) || !(h[4] >= 0))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_optim_sgd", "hyperparameters out of range: lr %g "
                    "> 0, momentum %g in [0,1), weight_decay %g >= 0", h[0], h[1], h[4]), NULL;
  return make(ctx, RG_OPT_SGD, h, false, d.momentum != 0);
}

/* RG_OK, or why o cannot be used (this call's status, not an earlier sticky error). */
static rg_status usable(rg_optim *o, const char *call) {
  if (!o) return RG_ERR_MISUSE;
  if (o->pgen != o->ctx->pool[RG_POOL_PERSISTENT].gen)
    return rg__fail(o->ctx, RG_ERR_STALE, call, "the optimizer's parameters were freed by "
                    "rg_reset(RG_POOL_PERSISTENT); free it and create a new one");
  return RG_OK;
}

rg_status rg_optim_step(rg_optim *o) {
  rg_status st = usable(o, "rg_optim_step");
  if (st != RG_OK) return st;
  rg_ctx *ctx = o->ctx;
  uint32_t clip = ctx->clip_pending ? ctx->clip : 0;
  if (o->scheduled) { /* the rate of this update, from the step count, before it */
    uint32_t sin[RG_MAX_IN] = {o->hyper, o->step, clip, 0};
    st = rg__emit(ctx, RG_OP_LR_SCHEDULE, sin, NULL, o->sched_i, o->sched_f, NULL, NULL);
    if (st != RG_OK) return st;
  }
  uint32_t in[RG_MAX_IN] = {clip, 0, 0, 0};
  ctx->clip_pending = 0;
  st = rg__emit(ctx, o->kind == RG_OPT_ADAMW ? RG_OP_ADAMW : RG_OP_SGD, in, NULL, NULL, NULL,
                o, NULL);
  for (int i = 0; st == RG_OK && i < o->shadow.n; i++) /* the step rounds into them */
    if (o->shadow.ref[i]) rg__t(ctx, o->shadow.ref[i])->flags |= RG_T_FRESH;
  return st;
}

rg_status rg_optim_set_lr(rg_optim *o, float lr) {
  rg_status st = usable(o, "rg_optim_set_lr");
  if (st != RG_OK) return st;
  rg_ctx *ctx = o->ctx;
  if (!(lr > 0))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_optim_set_lr", "lr %g must be > 0", lr);
  if (o->scheduled)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_optim_set_lr", "a schedule sets the rate of "
                    "every step; clear it with rg_optim_set_schedule(opt, NULL) first");
  float *stage = rg__stage_copy(ctx, &lr, sizeof lr);
  if (!stage) return rg__fail(ctx, RG_ERR_OOM, "rg_optim_set_lr", "out of staging memory");
  if (!rg__record(ctx, RG_OP_UPLOAD)) return ctx->last;
  rg_node *n = &ctx->nodes[ctx->n_nodes - 1];
  n->out[0] = o->hyper;
  n->i[0] = RG_H_LR * 4;
  n->i[1] = 4;
  n->aux = stage;
  rg__count_xfer(ctx, false, RG_SITE_OPTIM, 4);
  return rg__commit(ctx, n);
}

int64_t rg_optim_steps(rg_optim *o) {
  if (usable(o, "rg_optim_steps") != RG_OK) return -1;
  rg_ctx *ctx = o->ctx;
  rg__drain(ctx, RG_DRAIN_READ);
  int32_t s = 0;
  if (ctx->be->download(ctx, &s, rg__t(ctx, o->step)->data, 4) != RG_OK) return -1;
  rg__count_xfer(ctx, true, RG_SITE_OPTIM, 4);
  return s;
}

float rg_optim_lr(rg_optim *o) {
  if (usable(o, "rg_optim_lr") != RG_OK) return -1;
  rg_ctx *ctx = o->ctx;
  rg__drain(ctx, RG_DRAIN_READ);
  float lr = 0;
  if (ctx->be->download(ctx, &lr, (char *)rg__t(ctx, o->hyper)->data + RG_H_LR * 4, 4) != RG_OK)
    return -1;
  rg__count_xfer(ctx, true, RG_SITE_OPTIM, 4);
  return lr;
}

/* The device step count is I32, so the schedule's lengths stay below 2^31. */
#define SCHED_MAX 2147483647

rg_status rg_optim_set_schedule(rg_optim *o, const rg_schedule *s) {
  rg_status st = usable(o, "rg_optim_set_schedule");
  if (st != RG_OK) return st;
  rg_ctx *ctx = o->ctx;
  if (!s) {
    o->scheduled = false;
    return RG_OK;
  }
  const char *bad = NULL;
  bool decays = s->kind == RG_SCHED_COSINE || s->kind == RG_SCHED_ONECYCLE;
  if ((unsigned)s->kind > RG_SCHED_ONECYCLE)
    bad = "kind must be RG_SCHED_CONSTANT, _COSINE, _STEP or _ONECYCLE";
  else if (!(s->lr > 0) || !isfinite(s->lr))
    bad = "lr must be finite and > 0";
  else if (s->warmup < 0 || s->warmup > SCHED_MAX)
    bad = "warmup must be in [0, 2^31)";
  else if (decays && !(s->min_lr >= 0 && s->min_lr <= s->lr))
    bad = "min_lr must be in [0, lr]";
  else if (decays && (s->total <= s->warmup || s->total > SCHED_MAX))
    bad = "total must be in (warmup, 2^31)";
  else if (s->kind == RG_SCHED_ONECYCLE && !(s->start_lr >= 0 && s->start_lr <= s->lr))
    bad = "start_lr must be in [0, lr]";
  else if (s->kind == RG_SCHED_STEP && !(s->gamma > 0 && s->gamma <= 1))
    bad = "gamma must be in (0, 1]";
  else if (s->kind == RG_SCHED_STEP && (s->step_size < 1 || s->step_size > SCHED_MAX))
    bad = "step_size must be in [1, 2^31)";
  if (bad)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_optim_set_schedule", "%s (the schedule is "
                    "unchanged)", bad);
  int64_t i[4] = {s->kind, s->warmup, decays ? s->total : 0,
                  s->kind == RG_SCHED_STEP ? s->step_size : 0};
  float f[4] = {s->lr, decays ? s->min_lr : 0, s->kind == RG_SCHED_ONECYCLE ? s->start_lr : 0,
                s->kind == RG_SCHED_STEP ? s->gamma : 0};
  memcpy(o->sched_i, i, sizeof i);
  memcpy(o->sched_f, f, sizeof f);
  o->scheduled = true;
  return RG_OK;
}

rg_status rg_clip_grad_value(rg_ctx *ctx, float max_abs) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!(max_abs > 0))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_clip_grad_value", "max_abs %g must be > 0",
                    max_abs);
  float fv[4] = {max_abs, 0, 0, 0};
  return rg__emit(ctx, RG_OP_CLIP_VALUE, NULL, NULL, NULL, fv, &ctx->zero_list, NULL);
}

rg_status rg_clip_grad_norm(rg_ctx *ctx, float max_norm) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!(max_norm > 0))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_clip_grad_norm", "max_norm %g must be > 0",
                    max_norm);
  if (!ctx->clip) {
    int64_t two = 2;
    uint32_t c = rg__new(ctx, RG_POOL_PERSISTENT, RG_F32, 1, &two, "rg_clip_grad_norm");
    if (!c) return ctx->last;
    rg_status st = ctx->be->zero(ctx, rg__t(ctx, c)->data, 8);
    if (st != RG_OK) return rg__fail(ctx, st, "rg_clip_grad_norm", "could not zero its state");
    ctx->clip = c;
  }
  uint32_t in[RG_MAX_IN] = {ctx->clip, 0, 0, 0};
  float fv[4] = {max_norm, 0, 0, 0};
  rg_status st = rg__emit(ctx, RG_OP_CLIP, in, NULL, NULL, fv, &ctx->zero_list, NULL);
  if (st == RG_OK) ctx->clip_pending = 1;
  return st;
}

void rg_optim_free(rg_optim *o) {
  if (!o) return;
  rg_ctx *ctx = o->ctx;
  rg__drain(ctx, RG_DRAIN_SYNC); /* queued steps point at o */
  for (rg_optim **p = &ctx->optims; *p; p = &(*p)->next)
    if (*p == o) {
      *p = o->next;
      break;
    }
  rg__free(ctx, o->params.ref);
  rg__free(ctx, o->grads.ref);
  rg__free(ctx, o->m.ref);
  rg__free(ctx, o->v.ref);
  rg__free(ctx, o->shadow.ref);
  rg__free(ctx, o);
}
