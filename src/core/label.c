/*
 * label.c - rg_label_push / rg_label_pop: the label stack that names the nodes recorded
 * under it and the errors raised under it.
 *
 * Labels are interned once (they are few and long-lived) so a node stores 4 bytes. The
 * stack holds the interned id of the joined path "outer/inner", so a node records the
 * whole path at no extra cost. ctx->labels[0] is "" (no label), made by rg_open.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static uint32_t intern(rg_ctx *ctx, const char *s) {
  for (uint32_t i = 0; i < ctx->nlabels; i++)
    if (!strcmp(ctx->labels[i], s)) return i;
  size_t cap = ctx->caplabels;
  if (!rg__grow(ctx, (void **)&ctx->labels, sizeof *ctx->labels, ctx->nlabels + 1, &cap))
    return 0;
  ctx->caplabels = (uint32_t)cap;
  char *d = rg__strdup(ctx, s);
  if (!d) return 0;
  ctx->labels[ctx->nlabels] = d;
  return ctx->nlabels++;
}

/* A push the stack has no memory for is counted in lskip instead, and so is every push
   nested in it; pops undo those first, so each pop still matches its own push. */
void rg_label_push(rg_ctx *ctx, const char *label) {
  if (!ctx) return;
  size_t cap = (size_t)ctx->lcap;
  if (ctx->lskip ||
      !rg__grow(ctx, (void **)&ctx->lstack, sizeof *ctx->lstack, (size_t)ctx->lsp + 1, &cap)) {
    if (!ctx->lskip++)
      rg__fail(ctx, RG_ERR_OOM, "rg_label_push", "out of host memory for the label stack");
    return;
  }
  ctx->lcap = (int)cap;
  const char *outer = ctx->lsp ? ctx->labels[ctx->lstack[ctx->lsp - 1]] : "";
  char path[512];
  snprintf(path, sizeof path, "%s%s%s", outer, *outer ? "/" : "", label ? label : "?");
  ctx->lstack[ctx->lsp++] = intern(ctx, path);
}

void rg_label_pop(rg_ctx *ctx) {
  if (!ctx) return;
  if (ctx->lskip) ctx->lskip--;
  else if (ctx->lsp > 0) ctx->lsp--;
}
