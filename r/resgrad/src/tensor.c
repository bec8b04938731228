/*
 * tensor.c - tensors as R external pointers, the conversion of the ops' arguments, and
 * the calls on single tensors (shape queries, reads, writes, autograd).
 */
#include "rgr.h"

#include <string.h>

SEXP rgr_tensor_class; /* "ag_tensor", preserved by init.c */

int rgr_is_tensor(SEXP s) {
  return TYPEOF(s) == EXTPTRSXP && Rf_inherits(s, "ag_tensor");
}

SEXP rgr_wrap(SEXP cx, rg_tensor t) {
  SEXP tag = PROTECT(Rf_allocVector(RAWSXP, sizeof t.id));
  memcpy(RAW(tag), &t.id, sizeof t.id);
  SEXP p = PROTECT(R_MakeExternalPtr(NULL, tag, cx));
  Rf_setAttrib(p, R_ClassSymbol, rgr_tensor_class);
  UNPROTECT(2);
  return p;
}

SEXP rgr_result(SEXP cx, rg_tensor t) {
  if (t.id == 0) rgr_fail(rgr_ctx_ptr(cx));
  return rgr_wrap(cx, t);
}

rg_tensor rgr_handle(SEXP s) {
  rg_tensor t = {0};
  if (!rgr_is_tensor(s)) rgr_signal(RG_ERR_MISUSE, "not an ag_tensor");
  SEXP tag = R_ExternalPtrTag(s);
  if (TYPEOF(tag) != RAWSXP || XLENGTH(tag) != (R_xlen_t)sizeof t.id)
    rgr_signal(RG_ERR_MISUSE, "a damaged ag_tensor (its handle is missing)");
  memcpy(&t.id, RAW(tag), sizeof t.id);
  return t;
}

SEXP rgr_ctx_of(SEXP s) {
  if (!rgr_is_tensor(s)) rgr_signal(RG_ERR_MISUSE, "not an ag_tensor");
  return R_ExternalPtrProtected(s);
}

SEXP rgr_ctx_of_tensor(SEXP s) { return rgr_ctx_of(s); }

rg_tensor rgr_tensor_arg(SEXP cx, SEXP s, const char *name) {
  if (s == R_NilValue) return (rg_tensor){0};
  if (rgr_is_tensor(s)) {
    if (rgr_ctx_of(s) != cx)
      rgr_signal(RG_ERR_MISUSE, "argument '%s' is a tensor of another context", name);
    return rgr_handle(s);
  }
  if (Rf_isNumeric(s) || Rf_isLogical(s) || Rf_isFactor(s)) return rgr_upload(cx, s, R_NilValue, -1, 0);
  rgr_signal(RG_ERR_MISUSE, "argument '%s' must be an ag_tensor or a numeric R value, not "
             "%s", name, Rf_type2char(TYPEOF(s)));
}

double rgr_float_arg(SEXP s, const char *name) {
  if (!(Rf_isNumeric(s) || Rf_isLogical(s)) || Rf_xlength(s) != 1)
    rgr_signal(RG_ERR_MISUSE, "argument '%s' must be one number", name);
  return Rf_asReal(s);
}

long long rgr_int_arg(SEXP s, const char *name) {
  double v = rgr_float_arg(s, name);
  if (ISNAN(v) || v != (double)(long long)v)
    rgr_signal(RG_ERR_MISUSE, "argument '%s' must be a whole number, not %g", name, v);
  return (long long)v;
}

int rgr_axis_arg(SEXP s, const char *name) {
  if (s == R_NilValue) return RG_ALL_AXES;
  long long a = rgr_int_arg(s, name);
  if (a == 0)
    rgr_signal(RG_ERR_MISUSE, "argument '%s' is 0: axes are counted from 1 (the first) "
               "or from -1 (the last)", name);
  return (int)(a > 0 ? a - 1 : a);
}

int rgr_enum_arg(SEXP s, const char *name, const rgr_enum *e) {
  if (Rf_isString(s) && XLENGTH(s) == 1) {
    const char *v = CHAR(STRING_ELT(s, 0));
    for (; e->name; e++)
      if (!strcmp(e->name, v)) return e->value;
    rgr_signal(RG_ERR_MISUSE, "argument '%s': \"%s\" is not one of its names", name, v);
  }
  return (int)rgr_int_arg(s, name);
}

int rgr_dims_arg(SEXP s, const char *name, int64_t *dims) {
  if (!Rf_isNumeric(s) || XLENGTH(s) > RG_MAX_DIMS)
    rgr_signal(RG_ERR_MISUSE, "argument '%s' must be an integer vector of at most %d "
               "dimensions", name, RG_MAX_DIMS);
  int n = (int)XLENGTH(s);
  for (int i = 0; i < n; i++) {
    double v = Rf_isReal(s) ? REAL(s)[i] : (double)INTEGER(s)[i];
    if (ISNAN(v)) rgr_signal(RG_ERR_MISUSE, "argument '%s' has an NA", name);
    dims[i] = (int64_t)v;
  }
  return n;
}

void rgr_perm_arg(SEXP cx, rg_tensor x, SEXP s, const char *name, int *perm) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  int nd = rg_ndim(ctx, x);
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  if (!Rf_isNumeric(s) || XLENGTH(s) != nd)
    rgr_signal(RG_ERR_MISUSE, "argument '%s' must be a permutation of 1..%d (one entry "
               "per axis of the tensor)", name, nd);
  for (int i = 0; i < nd; i++) {
    double v = Rf_isReal(s) ? REAL(s)[i] : (double)INTEGER(s)[i];
    perm[i] = (int)v - 1;
  }
}

/* ---- calls on tensors ---------------------------------------------------------------- */

SEXP rgr_tensor_new(SEXP cx, SEXP x, SEXP dims, SEXP dtype, SEXP persistent) {
  rg_tensor t = rgr_upload(cx, x, dims, Rf_asInteger(dtype), Rf_asLogical(persistent) == TRUE);
  return rgr_wrap(cx, t);
}

SEXP rgr_param(SEXP cx, SEXP name, SEXP dims, SEXP dtype, SEXP init, SEXP data) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  int64_t d[RG_MAX_DIMS];
  int n = rgr_dims_arg(dims, "dim", d);
  rg_init in = {Rf_asInteger(VECTOR_ELT(init, 0)), (float)Rf_asReal(VECTOR_ELT(init, 1)),
                (float)Rf_asReal(VECTOR_ELT(init, 2))};
  rg_tensor t = rg_param(ctx, CHAR(STRING_ELT(name, 0)), (rg_dtype)Rf_asInteger(dtype), n,
                         d, in);
  if (t.id == 0) rgr_fail(ctx);
  SEXP p = PROTECT(rgr_wrap(cx, t));
  if (data != R_NilValue) {
    int dt = Rf_asInteger(dtype), hn = 0;
    int64_t hd[RG_MAX_DIMS];
    void *buf = rgr_host_buffer(data, dims, &dt, &hn, hd);
    size_t bytes = (size_t)rg_numel(ctx, t) * (dt == RG_BF16 ? 2 : 4);
    rgr_check(ctx, rg_write(ctx, t, buf, bytes));
  }
  UNPROTECT(1);
  return p;
}

SEXP rgr_read(SEXP s) { return rgr_download(rgr_ctx_of(s), rgr_handle(s)); }

SEXP rgr_write(SEXP s, SEXP x) {
  SEXP cx = rgr_ctx_of(s);
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_tensor t = rgr_handle(s);
  int nd = rg_ndim(ctx, t);
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  SEXP dims = PROTECT(Rf_allocVector(REALSXP, nd));
  for (int i = 0; i < nd; i++) REAL(dims)[i] = (double)rg_dim(ctx, t, i);
  int dt = (int)rg_dtype_of(ctx, t), hn = 0;
  int64_t hd[RG_MAX_DIMS];
  void *buf = rgr_host_buffer(x, dims, &dt, &hn, hd);
  rgr_check(ctx, rg_write(ctx, t, buf, (size_t)rg_numel(ctx, t) * (dt == RG_BF16 ? 2 : 4)));
  UNPROTECT(1);
  return R_NilValue;
}

SEXP rgr_shape(SEXP s) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(s));
  rg_tensor t = rgr_handle(s);
  int nd = rg_ndim(ctx, t);
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  SEXP out = PROTECT(Rf_allocVector(INTSXP, nd));
  for (int i = 0; i < nd; i++) INTEGER(out)[i] = (int)rg_dim(ctx, t, i);
  UNPROTECT(1);
  return out;
}

SEXP rgr_dtype(SEXP s) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(s));
  rg_dtype d = rg_dtype_of(ctx, rgr_handle(s));
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  return Rf_mkString(d == RG_BF16 ? "bf16" : d == RG_I32 ? "i32" : "f32");
}

/* The state of a handle without a barrier and without an error: for print(). */
SEXP rgr_describe(SEXP s) {
  rgr_ctx *h = rgr_holder(rgr_ctx_of(s));
  if (!h->ctx) return Rf_mkString("(its context is closed)");
  rg_tensor t = rgr_handle(s);
  char buf[1024];
  rg_describe(h->ctx, t, buf, sizeof buf);
  return Rf_mkString(buf);
}

SEXP rgr_state(SEXP s) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(s));
  rg_tensor t = rgr_handle(s);
  SEXP out = PROTECT(Rf_allocVector(INTSXP, 3));
  INTEGER(out)[0] = rg_is_live(ctx, t);
  INTEGER(out)[1] = rg_is_pending(ctx, t);
  INTEGER(out)[2] = rg_pool_of(ctx, t);
  UNPROTECT(1);
  return out;
}

SEXP rgr_name(SEXP s) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(s));
  const char *n = rg_name(ctx, rgr_handle(s));
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  return n ? Rf_mkString(n) : R_NilValue;
}

SEXP rgr_backward(SEXP s) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(s));
  rgr_check(ctx, rg_backward(ctx, rgr_handle(s)));
  return R_NilValue;
}

SEXP rgr_grad(SEXP s) {
  SEXP cx = rgr_ctx_of(s);
  return rgr_result(cx, rg_grad(rgr_ctx_ptr(cx), rgr_handle(s)));
}

SEXP rgr_retain_grad(SEXP s) {
  rg_ctx *ctx = rgr_ctx_ptr(rgr_ctx_of(s));
  rgr_check(ctx, rg_retain_grad(ctx, rgr_handle(s)));
  return R_NilValue;
}

SEXP rgr_zero_grad(SEXP cx) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_zero_grad(ctx));
  return R_NilValue;
}

SEXP rgr_params(SEXP cx) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  int n = rg_param_count(ctx);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n));
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) {
    rg_tensor t = rg_param_at(ctx, i);
    SET_VECTOR_ELT(out, i, rgr_wrap(cx, t));
    const char *name = rg_name(ctx, t);
    SET_STRING_ELT(nm, i, Rf_mkChar(name ? name : ""));
  }
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}

/* rg_gradcheck's loss: the R function in user, evaluated with R_tryEval so that an R
   error inside it returns RG_NONE to the library instead of unwinding through it. */
static rg_tensor gradcheck_loss(rg_ctx *ctx, void *user) {
  SEXP call = PROTECT(Rf_lang1((SEXP)user));
  int err = 0;
  SEXP v = R_tryEval(call, R_GlobalEnv, &err);
  UNPROTECT(1);
  if (err || !rgr_is_tensor(v)) {
    rg_raise(ctx, RG_ERR_MISUSE, "ag_gradcheck: the loss function %s",
             err ? "signalled an error" : "did not return an ag_tensor");
    return (rg_tensor){0};
  }
  rg_tensor t;
  memcpy(&t.id, RAW(R_ExternalPtrTag(v)), sizeof t.id);
  return t;
}

SEXP rgr_gradcheck(SEXP cx, SEXP fn, SEXP eps, SEXP max_elems) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_gradcheck_result r;
  memset(&r, 0, sizeof r);
  rgr_check(ctx, rg_gradcheck(ctx, gradcheck_loss, fn, Rf_asReal(eps),
                              (int64_t)Rf_asReal(max_elems), &r));
  const char *const names[] = {"max_abs_err", "max_rel_err", "param", "index", "analytic",
                         "numeric"};
  const double v[] = {r.max_abs_err, r.max_rel_err, r.param + 1.0, (double)r.index + 1,
                      r.analytic, r.numeric};
  return rgr_named_reals(names, v, 6);
}

SEXP rgr_checkpoint_begin(SEXP cx) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rgr_check(ctx, rg_checkpoint_begin(ctx));
  return R_NilValue;
}

/* out: the region's output, or NULL to close the region giving nothing back. */
SEXP rgr_checkpoint_end(SEXP cx, SEXP out) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  rg_tensor t = out == R_NilValue ? (rg_tensor){0} : rgr_handle(out);
  rgr_check(ctx, rg_checkpoint_end(ctx, t));
  return R_NilValue;
}
