/*
 * gradcheck.c - rg_gradcheck: rg_backward against central differences.
 *
 * The loss is evaluated in the backend's F32 arithmetic; differences and comparisons are
 * in double. Each evaluation is its own step with the dropout step counter pinned, so a
 * loss with dropout sees the same mask every time.
 */
#include "internal.h"

#include <math.h>
#include <string.h>

static rg_status no_loss(rg_ctx *ctx) {
  if (ctx->err != RG_OK) return ctx->err;
  return rg__fail(ctx, RG_ERR_MISUSE, "rg_gradcheck", "the loss function returned RG_NONE "
                  "without an error; it must return a one-element F32 loss built from the "
                  "parameters");
}

static rg_status eval(rg_ctx *ctx, rg_loss_fn fn, void *user, uint64_t step, double *loss) {
  rg_status st = rg_step_begin(ctx);
  ctx->step = step;
  if (st != RG_OK) return st;
  float l = 0;
  rg_tensor t = fn(ctx, user);
  if (!t.id) return no_loss(ctx);
  st = rg_item(ctx, t, &l);
  *loss = l;
  return st;
}

rg_status rg_gradcheck(rg_ctx *ctx, rg_loss_fn fn, void *user, double eps, int64_t max_elems,
                       rg_gradcheck_result *out) {
  if (!ctx) return RG_ERR_MISUSE;
  if (ctx->opt.dry_run) return rg__dry_refuse(ctx, "rg_gradcheck");
  if (!fn || !out || !(eps > 0))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_gradcheck", "fn and out must be non-NULL and "
                    "eps > 0");
  memset(out, 0, sizeof *out);
  out->param = -1;
  uint64_t step = ctx->step + 1;
  /* Analytic gradients: one backward from zeroed buffers. */
  rg_status st = rg_zero_grad(ctx);
  if (st == RG_OK) st = rg_step_begin(ctx);
  ctx->step = step;
  rg_tensor loss = st == RG_OK ? fn(ctx, user) : RG_NONE;
  if (st == RG_OK) st = loss.id ? rg_backward(ctx, loss) : no_loss(ctx);
  if (st == RG_OK) st = rg_sync(ctx);
  for (int p = 0; st == RG_OK && p < ctx->nparams; p++) {
    rg_tinfo *t = rg__t(ctx, ctx->prefs[p]);
    size_t nb = t->nbytes;
    int64_t n = t->numel;
    float *w = rg__malloc(ctx, nb ? nb : 1), *g = rg__malloc(ctx, nb ? nb : 1);
    rg_tensor wh = rg__handle(ctx, ctx->prefs[p]), gh = rg__handle(ctx, t->grad);
    if (!w || !g) st = rg__fail(ctx, RG_ERR_OOM, "rg_gradcheck", "out of host memory");
    if (st == RG_OK) st = rg_read(ctx, wh, w, nb);
    if (st == RG_OK) st = rg_read(ctx, gh, g, nb);
    int64_t stride = max_elems > 0 && n > max_elems ? (n + max_elems - 1) / max_elems : 1;
    for (int64_t e = 0; st == RG_OK && e < n; e += stride) {
      float w0 = w[e];
      double lp = 0, lm = 0;
      w[e] = (float)(w0 + eps);
      double hp = (double)w[e] - w0; /* the step actually taken, after rounding */
      st = rg_write(ctx, wh, w, nb);
      if (st == RG_OK) st = eval(ctx, fn, user, step, &lp);
      w[e] = (float)(w0 - eps);
      double hm = w0 - (double)w[e];
      if (st == RG_OK) st = rg_write(ctx, wh, w, nb);
      if (st == RG_OK) st = eval(ctx, fn, user, step, &lm);
      w[e] = w0; /* restored even when an evaluation failed */
      rg_status r = rg_write(ctx, wh, w, nb);
      if (st == RG_OK) st = r;
      double num = (lp - lm) / (hp + hm), ana = g[e], err = fabs(ana - num);
      double rel = err / fmax(fmax(fabs(ana), fabs(num)), 1e-3);
      if (st == RG_OK && (out->param < 0 || err > out->max_abs_err)) {
        out->max_abs_err = err;
        out->param = p;
        out->index = e;
        out->analytic = ana;
        out->numeric = num;
      }
      if (rel > out->max_rel_err) out->max_rel_err = rel;
    }
    rg__free(ctx, w);
    rg__free(ctx, g);
  }
  rg_status z = rg_zero_grad(ctx);
  if (z == RG_OK) z = rg_step_begin(ctx);
  st = st != RG_OK ? st : z;
  if (st != RG_OK && ctx->err == RG_OK) /* every failure leaves a message */
    rg__fail(ctx, st, "rg_gradcheck", "gradient check failed (%s)", rg_status_str(st));
  return st;
}
