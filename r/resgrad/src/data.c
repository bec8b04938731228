/*
 * data.c - token datasets (rg_data: llm.c's token files or raw bytes, and the batches of
 * a language model cut from them) from R.
 *
 * A dataset is an external pointer (class "ag_data") to an rgr_dep holding the rg_data;
 * its protected value is the context's external pointer. rg_close frees every rg_data of
 * its context, so the finalizer and ag_data_close free it only while the context is
 * open; the dep's claim on the context's holder keeps the context's own finalizer from
 * closing it first when R finalizes both in one collection (rgr.h).
 */
#include "rgr.h"

#include <stdlib.h>

static void data_finalize(SEXP p) {
  rgr_dep *d = R_ExternalPtrAddr(p);
  if (!d) return;
  R_ClearExternalPtr(p);
  if (d->h->ctx && d->obj) rg_data_free(d->obj); /* stops its prefetch worker */
  rgr_user_drop(d->h);
  free(d);
}

static rgr_dep *dep_of(SEXP p) {
  return rgr_addr_of(p, "ag_data", "dataset", "open one with ag_data_open()");
}

/* The open dataset of p, else a condition (closed dataset or context). */
static rg_data *data_of(SEXP p) {
  rgr_dep *d = dep_of(p);
  rgr_ctx_ptr(R_ExternalPtrProtected(p)); /* signals when the context was closed */
  if (!d->obj)
    rgr_signal(RG_ERR_MISUSE, "this dataset was closed (ag_data_close): open it again "
               "with ag_data_open()");
  return d->obj;
}

/* opts: format, vocab, seed, world, rank, prefetch (numbers). */
SEXP rgr_data_open(SEXP cx, SEXP path, SEXP opts) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  if (!Rf_isString(path) || XLENGTH(path) != 1 || STRING_ELT(path, 0) == NA_STRING)
    rgr_signal(RG_ERR_MISUSE, "ag_data_open: path must be one file name");
  const double *v = REAL(opts);
  for (int i = 1; i < 5; i++)
    if (!(v[i] >= 0 && v[i] <= (i < 3 ? 9007199254740992.0 : 2147483647.0)))
      rgr_signal(RG_ERR_MISUSE, "ag_data_open: vocab, seed, world and rank must be "
                 ">= 0 (world and rank below 2^31)");
  rg_data_options o = {(rg_data_format)v[0], (int64_t)v[1], (uint64_t)v[2], (int)v[3],
                       (int)v[4], v[5] == 0};
  rgr_dep *d = malloc(sizeof *d);
  if (!d) rgr_signal(RG_ERR_OOM, "ag_data_open: out of host memory");
  d->obj = rg_data_open(ctx, Rf_translateChar(STRING_ELT(path, 0)), &o);
  if (!d->obj) {
    free(d);
    rgr_fail(ctx);
  }
  d->h = rgr_holder(cx);
  rgr_user_add(d->h);
  return rgr_make_ptr(d, cx, data_finalize, "ag_data");
}

SEXP rgr_data_batch(SEXP p, SEXP batch, SEXP block, SEXP random) {
  rg_data *d = data_of(p);
  SEXP cx = R_ExternalPtrProtected(p);
  long long B = rgr_int_arg(batch, "batch"), T = rgr_int_arg(block, "block");
  rg_tensor idx, tgt;
  rgr_check(rgr_ctx_ptr(cx), rg_data_batch(d, B, T, Rf_asLogical(random) == TRUE, &idx, &tgt));
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SET_VECTOR_ELT(out, 0, rgr_wrap(cx, idx));
  SET_VECTOR_ELT(out, 1, rgr_wrap(cx, tgt));
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_STRING_ELT(nm, 0, Rf_mkChar("idx"));
  SET_STRING_ELT(nm, 1, Rf_mkChar("targets"));
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}

SEXP rgr_data_seek(SEXP p, SEXP batch) {
  rg_data *d = data_of(p);
  long long n = rgr_int_arg(batch, "batch");
  rgr_check(rgr_ctx_ptr(R_ExternalPtrProtected(p)), rg_data_seek(d, n));
  return R_NilValue;
}

static const char *const info_names[] = {"tokens", "next", "epoch"};

SEXP rgr_data_info(SEXP p) {
  rg_data *d = data_of(p);
  const double v[] = {(double)rg_data_tokens(d), (double)rg_data_next(d),
                      (double)rg_data_epoch(d)};
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 4));
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, 4));
  for (int i = 0; i < 3; i++) {
    SET_VECTOR_ELT(out, i, Rf_ScalarReal(v[i]));
    SET_STRING_ELT(nm, i, Rf_mkChar(info_names[i]));
  }
  SET_VECTOR_ELT(out, 3, Rf_mkString(rg_data_format_of(d) == RG_DATA_LLMC ? "llmc" : "raw"));
  SET_STRING_ELT(nm, 3, Rf_mkChar("format"));
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}

SEXP rgr_data_close(SEXP p) {
  rgr_dep *d = dep_of(p);
  if (d->obj && d->h->ctx) rg_data_free(d->obj); /* else rg_close freed it */
  d->obj = NULL;
  return R_NilValue;
}
