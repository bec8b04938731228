/*
 * error.c - the sticky error: rg__fail and rg_raise set it, rg_error and rg_errmsg read
 * it, rg_clear_error clears it; and the names of the status codes.
 *
 * Invariants: the first error since rg_clear_error is the one reported (later ones only
 * return their status, and update ctx->last); a message names the innermost label in
 * force; nothing here allocates, exits or aborts, or calls the rest of the core.
 */
#include "internal.h"

#include <stdio.h>

const char *rg_status_str(rg_status s) {
  switch (s) {
  case RG_OK: return "RG_OK";
  case RG_ERR_MISUSE: return "RG_ERR_MISUSE";
  case RG_ERR_STALE: return "RG_ERR_STALE";
  case RG_ERR_OOM: return "RG_ERR_OOM";
  case RG_ERR_DEVICE: return "RG_ERR_DEVICE";
  case RG_ERR_NONFINITE: return "RG_ERR_NONFINITE";
  case RG_ERR_IO: return "RG_ERR_IO";
  case RG_ERR_UNSUPPORTED: return "RG_ERR_UNSUPPORTED";
  case RG_ERR_FAILED: return "RG_ERR_FAILED";
  }
  return "RG_ERR_UNKNOWN";
}

rg_status rg__fail(rg_ctx *ctx, rg_status st, const char *call, const char *fmt, ...) {
  if (ctx && st != RG_OK) ctx->last = st;
  if (!ctx || st == RG_OK || ctx->err != RG_OK) return st;
  ctx->err = st;
  const char *lab = ctx->lsp > 0 ? rg__label_str(ctx, ctx->lstack[ctx->lsp - 1]) : "";
  int n = *lab ? snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s [%s]: ", call, lab)
               : snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s: ", call);
  if (n < 0 || (size_t)n >= sizeof ctx->errmsg) return st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->errmsg + n, sizeof ctx->errmsg - (size_t)n, fmt, ap);
  va_end(ap);
  return st;
}

rg_status rg_raise(rg_ctx *ctx, rg_status st, const char *fmt, ...) {
  if (ctx && st != RG_OK) ctx->last = st;
  if (!ctx || st == RG_OK || ctx->err != RG_OK) return st;
  const char *lab = ctx->lsp > 0 ? rg__label_str(ctx, ctx->lstack[ctx->lsp - 1]) : "";
  int n = *lab ? snprintf(ctx->errmsg, sizeof ctx->errmsg, "[%s] ", lab) : 0;
  if (!fmt) fmt = "(no message)";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx->errmsg + n, sizeof ctx->errmsg - (size_t)n, fmt, ap);
  va_end(ap);
  if (!ctx->errmsg[0]) snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s (no message given)",
                                rg_status_str(st));
  ctx->err = st;
  return st;
}

rg_status rg_error(const rg_ctx *ctx) { return ctx ? ctx->err : RG_ERR_MISUSE; }
const char *rg_errmsg(const rg_ctx *ctx) {
  return ctx ? ctx->errmsg : "rg_errmsg: ctx is NULL: rg_open failed or was not called";
}
void rg_clear_error(rg_ctx *ctx) {
  if (!ctx) return;
  ctx->err = RG_OK;
  ctx->errmsg[0] = 0;
}
