/*
 * errors.c - the library's errors as R conditions.
 *
 * A failure is signalled by calling the package's R function .rg_signal(status, message)
 * (R/conditions.R), which builds the condition with its classes (resgrad_stale_handle,
 * resgrad_oom, ..., resgrad_error) and stops. That unwinds this C stack, so callers free
 * what they malloc'd before calling here.
 */
#include "rgr.h"

#include <stdarg.h>
#include <stdio.h>

void rgr_signal(rg_status st, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  SEXP ns = PROTECT(R_FindNamespace(PROTECT(Rf_mkString("resgrad"))));
  SEXP call = PROTECT(Rf_lang3(Rf_install(".rg_signal"), Rf_mkString(rg_status_str(st)),
                               Rf_mkString(msg)));
  Rf_eval(call, ns);
  UNPROTECT(3);
  Rf_error("%s", msg); /* not reached: .rg_signal stops */
}

void rgr_fail(rg_ctx *ctx) {
  rg_status st = rg_error(ctx);
  if (st == RG_OK) st = RG_ERR_MISUSE;
  const char *m = rg_errmsg(ctx);
  size_t n = strlen(m) + 1;
  char *msg = R_alloc(n, 1); /* freed by R when the .Call returns or unwinds */
  memcpy(msg, m, n);
  rg_clear_error(ctx);
  rgr_signal(st, "%s", msg[0] ? msg : "the library reported an error without a message");
}

void rgr_check(rg_ctx *ctx, rg_status st) {
  if (st != RG_OK) rgr_fail(ctx);
}
