/*
 * optim.c - optimizers, gradient clipping and learning-rate schedules.
 *
 * An optimizer is an external pointer (class "ag_optim_ptr") to a holder of the library's
 * rg_optim and its context's holder; its protected value is the context's external
 * pointer. Its finalizer frees the optimizer only while the context is open (rg_close
 * frees the optimizers itself) and then drops its claim on the context (rgr.h).
 */
#include "rgr.h"

#include <stdlib.h>
#include <string.h>

static void optim_finalize(SEXP p) {
  rgr_dep *d = R_ExternalPtrAddr(p);
  if (!d) return;
  R_ClearExternalPtr(p);
  if (d->h->ctx && d->obj) rg_optim_free(d->obj);
  rgr_user_drop(d->h);
  free(d);
}

static SEXP wrap_optim(SEXP cx, rg_optim *o) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  if (!o) rgr_fail(ctx);
  rgr_dep *d = malloc(sizeof *d);
  if (!d) {
    rg_optim_free(o);
    rgr_signal(RG_ERR_OOM, "optimizer: out of host memory");
  }
  d->h = rgr_holder(cx);
  d->obj = o;
  rgr_user_add(d->h);
  return rgr_make_ptr(d, cx, optim_finalize, "ag_optim_ptr");
}

static rg_optim *optim_of(SEXP p) {
  rgr_dep *d = rgr_addr_of(p, "ag_optim_ptr", "optimizer",
                           "make one with optimizer_adamw() or optimizer_sgd()");
  if (!d->obj)
    rgr_signal(RG_ERR_MISUSE, "this optimizer was freed ($free()): make another one");
  rgr_ctx_ptr(R_ExternalPtrProtected(p)); /* signals when the context was closed */
  return d->obj;
}

SEXP rgr_optim_adamw(SEXP cx, SEXP lr, SEXP b1, SEXP b2, SEXP eps, SEXP wd) {
  rg_adamw_options o = {(float)Rf_asReal(lr), (float)Rf_asReal(b1), (float)Rf_asReal(b2),
                        (float)Rf_asReal(eps), (float)Rf_asReal(wd)};
  return wrap_optim(cx, rg_optim_adamw(rgr_ctx_ptr(cx), &o));
}

SEXP rgr_optim_sgd(SEXP cx, SEXP lr, SEXP momentum, SEXP wd) {
  rg_sgd_options o = {(float)Rf_asReal(lr), (float)Rf_asReal(momentum), (float)Rf_asReal(wd)};
  return wrap_optim(cx, rg_optim_sgd(rgr_ctx_ptr(cx), &o));
}

SEXP rgr_optim_step(SEXP p) {
  rg_optim *o = optim_of(p);
  rgr_check(rgr_ctx_ptr(R_ExternalPtrProtected(p)), rg_optim_step(o));
  return R_NilValue;
}

SEXP rgr_optim_set_lr(SEXP p, SEXP lr) {
  rg_optim *o = optim_of(p);
  rgr_check(rgr_ctx_ptr(R_ExternalPtrProtected(p)), rg_optim_set_lr(o, (float)Rf_asReal(lr)));
  return R_NilValue;
}

SEXP rgr_optim_lr(SEXP p) {
  rg_optim *o = optim_of(p);
  float lr = rg_optim_lr(o);
  rg_ctx *ctx = rgr_ctx_ptr(R_ExternalPtrProtected(p));
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  return Rf_ScalarReal(lr);
}

SEXP rgr_optim_steps(SEXP p) {
  rg_optim *o = optim_of(p);
  int64_t n = rg_optim_steps(o);
  rg_ctx *ctx = rgr_ctx_ptr(R_ExternalPtrProtected(p));
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  return Rf_ScalarReal((double)n);
}

SEXP rgr_optim_schedule(SEXP p, SEXP kind, SEXP vals) {
  rg_optim *o = optim_of(p);
  rg_ctx *ctx = rgr_ctx_ptr(R_ExternalPtrProtected(p));
  if (kind == R_NilValue) {
    rgr_check(ctx, rg_optim_set_schedule(o, NULL));
    return R_NilValue;
  }
  const double *v = REAL(vals); /* lr, min_lr, start_lr, gamma, warmup, total, step_size */
  rg_schedule s = {(rg_sched_kind)Rf_asInteger(kind), (float)v[0], (float)v[1],
                   (float)v[2], (float)v[3], (int64_t)v[4], (int64_t)v[5], (int64_t)v[6]};
  rgr_check(ctx, rg_optim_set_schedule(o, &s));
  return R_NilValue;
}

SEXP rgr_optim_free(SEXP p) {
  rgr_dep *d = TYPEOF(p) == EXTPTRSXP ? R_ExternalPtrAddr(p) : NULL;
  if (d && d->obj && d->h->ctx) {
    rg_optim_free(d->obj);
    d->obj = NULL;
  }
  return R_NilValue;
}

/* The optimizer of p for a checkpoint, or NULL for R's NULL. */
rg_optim *rgr_optim_or_null(SEXP p) { return p == R_NilValue ? NULL : optim_of(p); }

SEXP rgr_clip_grad_norm(SEXP cx, SEXP v) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_clip_grad_norm(ctx, (float)Rf_asReal(v)));
  return R_NilValue;
}

SEXP rgr_clip_grad_value(SEXP cx, SEXP v) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_clip_grad_value(ctx, (float)Rf_asReal(v)));
  return R_NilValue;
}

SEXP rgr_save(SEXP cx, SEXP path, SEXP opt) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_save(ctx, CHAR(STRING_ELT(path, 0)), rgr_optim_or_null(opt)));
  return R_NilValue;
}

SEXP rgr_load(SEXP cx, SEXP path, SEXP opt) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_load(ctx, CHAR(STRING_ELT(path, 0)), rgr_optim_or_null(opt)));
  return R_NilValue;
}

SEXP rgr_meta_set(SEXP cx, SEXP key, SEXP value) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_meta_set(ctx, CHAR(STRING_ELT(key, 0)), CHAR(STRING_ELT(value, 0))));
  return R_NilValue;
}

SEXP rgr_meta_get(SEXP cx, SEXP key) {
  const char *v = rg_meta_get(rgr_ctx_ptr(cx), CHAR(STRING_ELT(key, 0)));
  return v ? Rf_mkString(v) : R_NilValue;
}

SEXP rgr_ctx_of_optim(SEXP p) {
  optim_of(p);
  return R_ExternalPtrProtected(p);
}
