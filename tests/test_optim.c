/*
 * test_optim.c - AdamW, SGD and gradient clipping against hand-computed values, on the CPU.
 *
 * What is checked: several steps of AdamW (with and without weight decay, default and
 * custom betas) and SGD (plain, momentum, weight decay, both) on small parameters whose
 * gradient is known exactly (loss = sum(w * c) gives grad = c) or follows from w (mse),
 * against PyTorch's formulas evaluated in double here; the optimizer moments too (read
 * through core/internal.h); rg_optim_set_lr takes effect from the next recorded step
 * without a drain; rg_optim_steps counts; rg_clip_grad_norm scales the global norm to
 * max_norm and leaves smaller gradients bit-identical; a non-finite gradient (log of a
 * negative number, division by zero) skips the update with weights, moments and the step
 * count bit-identical and reports RG_ERR_NONFINITE at the barrier, and training goes on
 * (the gradients are zeroed by the rg_zero_grad after it all the same); rg_zero_grad right
 * after a step folds into it (no node), elsewhere records its own, and both zero. Each
 * learning-rate schedule's rate per step (rg_optim_lr) against its formula in double, with
 * no upload for it; rg_optim_set_lr refused under a schedule; invalid schedules; a skipped
 * update keeps the rate; rg_clip_grad_value clamps and keeps a NaN.
 * Exits non-zero on any failure.
 */
#include "common.h"
#include "core/internal.h"

#include <math.h>

#define N 5

/* float result vs double reference: relative 2e-6 with an absolute floor */
static int close_to(double got, double want, double rel) {
  return fabs(got - want) <= rel * fabs(want) + 1e-7;
}

static const float *dev_f32(rg_ctx *ctx, uint32_t ref) {
  return (const float *)rg__t(ctx, ref)->data;
}

/* gradient of step t (0-based): varies in size and sign so moments are exercised */
static void grad_of(int t, float *c) {
  static const float base[N] = {0.5f, -1.25f, 2.0f, 0.125f, -0.75f};
  for (int i = 0; i < N; i++) c[i] = base[i] * (1.0f + 0.5f * (float)t) * (t % 2 ? -1.0f : 1.0f);
}

/* Records one step of loss = sum(w * c): grad w = c exactly. Returns the loss. */
static float linear_step(rg_ctx *ctx, rg_tensor w, rg_optim *opt, const float *c) {
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  int64_t n = N;
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, w, rg_input(ctx, RG_F32, 1, &n, c)), RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  float l = 0;
  CHECK_ST(ctx, rg_item(ctx, loss, &l), RG_OK);
  return l;
}

static rg_tensor make_w(rg_ctx *ctx, double *wd) {
  int64_t n = N;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, &n, (rg_init){RG_INIT_UNIFORM, -1, 1});
  float w0[N];
  CHECK_ST(ctx, rg_read(ctx, w, w0, sizeof w0), RG_OK);
  for (int i = 0; i < N; i++) wd[i] = w0[i];
  return w;
}

/* ---- AdamW ---------------------------------------------------------------------------- */

static void adamw_case(rg_adamw_options o, int steps) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 11});
  if (!ctx) return;
  double w[N], m[N] = {0}, v[N] = {0};
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_adamw(ctx, &o);
  CHECK(opt != NULL, "rg_optim_adamw: %s", rg_errmsg(ctx));
  if (!opt) {
    rg_close(ctx);
    return;
  }
  double lr = o.lr ? o.lr : 1e-3, b1 = o.beta1 ? o.beta1 : 0.9, b2 = o.beta2 ? o.beta2 : 0.999;
  double eps = o.eps ? o.eps : 1e-8, wdec = o.weight_decay;
  /* the hyperparameters as the library stores them are floats */
  lr = (float)lr, b1 = (float)b1, b2 = (float)b2, eps = (float)eps, wdec = (float)wdec;
  for (int t = 1; t <= steps; t++) {
    float c[N];
    grad_of(t - 1, c);
    double lref = 0;
    for (int i = 0; i < N; i++) lref += w[i] * c[i];
    float l = linear_step(ctx, tw, opt, c);
    CHECK(close_to(l, lref, 1e-5), "adamw step %d: loss %.9g want %.9g", t, l, lref);
    double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
    for (int i = 0; i < N; i++) {
      double g = c[i];
      w[i] *= 1 - lr * wdec;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      w[i] -= (lr / bc1) * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
    float got[N];
    CHECK_ST(ctx, rg_read(ctx, tw, got, sizeof got), RG_OK);
    const float *gm = dev_f32(ctx, opt->m.ref[0]), *gv = dev_f32(ctx, opt->v.ref[0]);
    for (int i = 0; i < N; i++) {
      CHECK(close_to(got[i], w[i], 2e-6), "adamw(lr %g wd %g) step %d w[%d] = %.9g want %.9g",
            lr, wdec, t, i, got[i], w[i]);
      CHECK(close_to(gm[i], m[i], 2e-6), "adamw step %d m[%d] = %.9g want %.9g", t, i, gm[i], m[i]);
      CHECK(close_to(gv[i], v[i], 2e-6), "adamw step %d v[%d] = %.9g want %.9g", t, i, gv[i], v[i]);
    }
  }
  CHECK(rg_optim_steps(opt) == steps, "rg_optim_steps = %lld, want %d",
        (long long)rg_optim_steps(opt), steps);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- SGD -------------------------------------------------------------------------------- */

static void sgd_case(rg_sgd_options o, int steps) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 5});
  if (!ctx) return;
  double w[N], buf[N] = {0};
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_sgd(ctx, &o);
  CHECK(opt != NULL, "rg_optim_sgd: %s", rg_errmsg(ctx));
  if (!opt) {
    rg_close(ctx);
    return;
  }
  double lr = (float)(o.lr ? o.lr : 1e-2f), mu = (float)o.momentum, wdec = (float)o.weight_decay;
  for (int t = 1; t <= steps; t++) {
    float c[N];
    grad_of(t - 1, c);
    linear_step(ctx, tw, opt, c);
    for (int i = 0; i < N; i++) {
      double g = c[i] + wdec * w[i];
      if (mu != 0) {
        buf[i] = t == 1 ? g : mu * buf[i] + g; /* PyTorch, dampening 0 */
        g = buf[i];
      }
      w[i] -= lr * g;
    }
    float got[N];
    CHECK_ST(ctx, rg_read(ctx, tw, got, sizeof got), RG_OK);
    for (int i = 0; i < N; i++)
      CHECK(close_to(got[i], w[i], 2e-6), "sgd(lr %g mom %g wd %g) step %d w[%d] = %.9g want %.9g",
            lr, mu, wdec, t, i, got[i], w[i]);
    if (mu != 0) {
      const float *gb = dev_f32(ctx, opt->m.ref[0]);
      for (int i = 0; i < N; i++)
        CHECK(close_to(gb[i], buf[i], 2e-6), "sgd step %d buf[%d] = %.9g want %.9g", t, i, gb[i],
              buf[i]);
    }
  }
  CHECK(rg_optim_steps(opt) == steps, "sgd steps %lld", (long long)rg_optim_steps(opt));
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* SGD with momentum on mse(w, target): the gradient 2 (w - target) / N depends on w. */
static void sgd_mse_case(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 3});
  if (!ctx) return;
  double w[N], buf[N] = {0};
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.3f, .momentum = 0.5f});
  const float target[N] = {1, 2, -1, 0.5f, 0};
  double lr = 0.3f, mu = 0.5f;
  int64_t n = N;
  for (int t = 1; t <= 6; t++) {
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    rg_tensor loss = rg_mse(ctx, tw, rg_input(ctx, RG_F32, 1, &n, target));
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
    CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
    float l;
    CHECK_ST(ctx, rg_item(ctx, loss, &l), RG_OK);
    double lref = 0;
    for (int i = 0; i < N; i++) lref += (w[i] - target[i]) * (w[i] - target[i]) / N;
    CHECK(close_to(l, lref, 1e-5), "mse step %d loss %.9g want %.9g", t, l, lref);
    for (int i = 0; i < N; i++) {
      double g = 2 * (w[i] - target[i]) / N;
      buf[i] = mu * buf[i] + g;
      w[i] -= lr * buf[i];
    }
    float got[N];
    CHECK_ST(ctx, rg_read(ctx, tw, got, sizeof got), RG_OK);
    for (int i = 0; i < N; i++)
      CHECK(close_to(got[i], w[i], 1e-5), "mse step %d w[%d] = %.9g want %.9g", t, i, got[i], w[i]);
  }
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- learning rate and step count ----------------------------------------------------------- */

static void set_lr_case(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 9});
  if (!ctx) return;
  double w[N];
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.1f});
  CHECK(rg_optim_steps(opt) == 0, "no steps yet");
  const double lrs[5] = {0.1f, 0.1f, 0.02f, 0.02f, 0.5f};
  int64_t n = N;
  for (int t = 0; t < 5; t++) {
    float c[N];
    grad_of(t, c);
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    rg_tensor loss = rg_sum(ctx, rg_mul(ctx, tw, rg_input(ctx, RG_F32, 1, &n, c)), RG_ALL_AXES, 0);
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    rg_stats s0, s1;
    if (t == 2) { /* before this step's update: it applies to this step */
      rg_stats_get(ctx, &s0);
      CHECK_ST(ctx, rg_optim_set_lr(opt, 0.02f), RG_OK);
      rg_stats_get(ctx, &s1);
      CHECK(s1.drains == s0.drains && s1.up.count == s0.up.count + 1 &&
                s1.up_site[RG_SITE_OPTIM].bytes == s0.up_site[RG_SITE_OPTIM].bytes + 4,
            "set_lr: no drain, one 4-byte upload");
    }
    CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
    if (t == 3) { /* after this step's update: only the next step sees it */
      rg_stats_get(ctx, &s0);
      CHECK_ST(ctx, rg_optim_set_lr(opt, 0.5f), RG_OK);
      rg_stats_get(ctx, &s1);
      CHECK(s1.drains == s0.drains, "set_lr is not a barrier");
    }
    CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
    float l;
    CHECK_ST(ctx, rg_item(ctx, loss, &l), RG_OK);
    for (int i = 0; i < N; i++) w[i] -= lrs[t] * c[i];
    float got[N];
    CHECK_ST(ctx, rg_read(ctx, tw, got, sizeof got), RG_OK);
    for (int i = 0; i < N; i++)
      CHECK(close_to(got[i], w[i], 2e-6), "set_lr step %d w[%d] = %.9g want %.9g (lr %g)", t, i,
            got[i], w[i], lrs[t]);
    CHECK(rg_optim_steps(opt) == t + 1, "steps %lld after %d", (long long)rg_optim_steps(opt), t + 1);
  }
  CHECK(rg_optim_set_lr(opt, 0) == RG_ERR_MISUSE, "lr 0 is misuse");
  rg_clear_error(ctx);
  CHECK(rg_optim_set_lr(opt, NAN) == RG_ERR_MISUSE, "lr NaN is misuse");
  rg_clear_error(ctx);
  CHECK(rg_optim_adamw(ctx, &(rg_adamw_options){.lr = -1}) == NULL &&
            rg_error(ctx) == RG_ERR_MISUSE,
        "negative lr is misuse");
  rg_clear_error(ctx);
  CHECK(rg_optim_sgd(ctx, &(rg_sgd_options){.momentum = 1.5f}) == NULL &&
            rg_error(ctx) == RG_ERR_MISUSE,
        "momentum 1.5 is misuse");
  rg_clear_error(ctx);
  CHECK(rg_optim_adamw(ctx, &(rg_adamw_options){.beta1 = 1.0f}) == NULL, "beta1 1 is misuse");
  rg_clear_error(ctx);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- clipping -------------------------------------------------------------------------------- */

static void clip_case(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  int64_t two = 2;
  rg_tensor a = rg_param(ctx, "a", RG_F32, 1, &two, (rg_init){RG_INIT_CONST, 1, 0});
  rg_tensor b = rg_param(ctx, "b", RG_F32, 1, &two, (rg_init){RG_INIT_CONST, -1, 0});
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.5f});
  const float ca[2] = {3, 0}, cb[2] = {0, -4}; /* global norm 5 */
  for (int round = 0; round < 3; round++) {
    float max_norm = round == 0 ? 1.0f : round == 1 ? 10.0f : 5.001f;
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    rg_tensor loss = rg_add(ctx, rg_sum(ctx, rg_mul(ctx, a, rg_input(ctx, RG_F32, 1, &two, ca)), RG_ALL_AXES, 0),
                            rg_sum(ctx, rg_mul(ctx, b, rg_input(ctx, RG_F32, 1, &two, cb)), RG_ALL_AXES, 0));
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    rg_stats s0, s1;
    rg_stats_get(ctx, &s0);
    CHECK_ST(ctx, rg_clip_grad_norm(ctx, max_norm), RG_OK);
    rg_stats_get(ctx, &s1);
    CHECK(s1.drains == s0.drains && s1.down.count == s0.down.count,
          "clip records; it neither drains nor reads");
    CHECK_ST(ctx, rg_sync(ctx), RG_OK);
    float ga[2], gb[2], w0a[2], w0b[2];
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, a), ga, sizeof ga), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, b), gb, sizeof gb), RG_OK);
    double norm = sqrt((double)ga[0] * ga[0] + (double)ga[1] * ga[1] + (double)gb[0] * gb[0] +
                       (double)gb[1] * gb[1]);
    float coef = 1.0f;
    if (round == 0) {
      coef = (float)(1.0 / (5.0 + 1e-6));
      CHECK(fabs(norm - 1.0) < 1e-5, "clipped norm %.9g want 1", norm);
      CHECK(ga[1] == 0 && gb[0] == 0 && close_to(ga[0] / -gb[1], 0.75, 1e-6),
            "clipping keeps the direction: %g %g %g %g", ga[0], ga[1], gb[0], gb[1]);
    } else {
      /* norm <= max_norm: the gradients are untouched, bit for bit */
      CHECK(ga[0] == 3 && ga[1] == 0 && gb[0] == 0 && gb[1] == -4,
            "max_norm %g >= norm: grads %g %g %g %g", max_norm, ga[0], ga[1], gb[0], gb[1]);
    }
    CHECK(dev_f32(ctx, ctx->clip)[0] == 5.0f, "clip state holds the norm before clipping: %g",
          dev_f32(ctx, ctx->clip)[0]);
    /* the update uses the clipped gradient */
    CHECK_ST(ctx, rg_read(ctx, a, w0a, sizeof w0a), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, b, w0b, sizeof w0b), RG_OK);
    CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
    CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
    float wa[2], wb[2];
    CHECK_ST(ctx, rg_read(ctx, a, wa, sizeof wa), RG_OK);
    CHECK_ST(ctx, rg_read(ctx, b, wb, sizeof wb), RG_OK);
    CHECK(close_to(wa[0], w0a[0] - 0.5 * 3 * coef, 1e-6) && wa[1] == w0a[1] &&
              close_to(wb[1], w0b[1] + 0.5 * 4 * coef, 1e-6) && wb[0] == w0b[0],
          "round %d: update with clipped grads: %g %g", round, wa[0], wb[1]);
  }
  CHECK(rg_clip_grad_norm(ctx, 0) == RG_ERR_MISUSE, "max_norm 0 is misuse");
  rg_clear_error(ctx);
  CHECK(rg_clip_grad_norm(ctx, NAN) == RG_ERR_MISUSE, "max_norm NaN is misuse");
  rg_clear_error(ctx);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* A non-finite gradient: the clipped step is skipped, everything stays bit-identical. */
static void nonfinite_case(int use_div, int barrier_is_item) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 21});
  if (!ctx) return;
  double w[N], m[N] = {0}, v[N] = {0};
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 0.01f, .weight_decay = 0.01f});
  const double lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wdec = 0.01f;
  int64_t n = N;
  int t_done = 0;
  for (int k = 0; k < 4; k++) {
    float c[N];
    grad_of(k, c);
    if (k != 2) { /* a good step, with clipping that does not bind */
      CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
      rg_tensor loss = rg_sum(ctx, rg_mul(ctx, tw, rg_input(ctx, RG_F32, 1, &n, c)), RG_ALL_AXES, 0);
      CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
      CHECK_ST(ctx, rg_clip_grad_norm(ctx, 1e6f), RG_OK);
      CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
      CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
      float l;
      CHECK_ST(ctx, rg_item(ctx, loss, &l), RG_OK);
      CHECK(rg_error(ctx) == RG_OK, "good step %d: %s", k, rg_errmsg(ctx));
      t_done++;
      double bc1 = 1 - pow(b1, t_done), bc2 = 1 - pow(b2, t_done);
      for (int i = 0; i < N; i++) {
        w[i] *= 1 - lr * wdec;
        m[i] = b1 * m[i] + (1 - b1) * c[i];
        v[i] = b2 * v[i] + (1 - b2) * (double)c[i] * c[i];
        w[i] -= (lr / bc1) * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
      }
      float got[N];
      CHECK_ST(ctx, rg_read(ctx, tw, got, sizeof got), RG_OK);
      for (int i = 0; i < N; i++)
        CHECK(close_to(got[i], w[i], 2e-6), "step %d (after a skipped one: %d) w[%d] = %.9g want %.9g",
              k, k > 2, i, got[i], w[i]);
      continue;
    }
    /* the bad step */
    float wb[N], mb[N], vb[N], wa[N], ma[N], va[N];
    CHECK_ST(ctx, rg_read(ctx, tw, wb, sizeof wb), RG_OK);
    memcpy(mb, dev_f32(ctx, opt->m.ref[0]), sizeof mb);
    memcpy(vb, dev_f32(ctx, opt->v.ref[0]), sizeof vb);
    int64_t steps_before = rg_optim_steps(opt);
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    float x[N] = {1, 2, -3, 4, 5}; /* log(-3) = NaN; or a zero divisor: Inf */
    if (use_div) x[2] = 0;
    rg_tensor tx = rg_input(ctx, RG_F32, 1, &n, x);
    rg_tensor term = use_div ? rg_div(ctx, tw, tx) : rg_mul(ctx, tw, rg_log(ctx, tx));
    rg_tensor loss = rg_sum(ctx, term, RG_ALL_AXES, 0);
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    CHECK_ST(ctx, rg_clip_grad_norm(ctx, 1.0f), RG_OK);
    CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
    CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
    if (barrier_is_item) {
      float l;
      rg_status st = rg_item(ctx, loss, &l);
      CHECK(st == RG_ERR_NONFINITE || (st == RG_OK && rg_error(ctx) == RG_ERR_NONFINITE),
            "rg_item as the barrier: %s, sticky %s", rg_status_str(st),
            rg_status_str(rg_error(ctx)));
    } else {
      CHECK_ST(ctx, rg_sync(ctx), RG_ERR_NONFINITE);
    }
    CHECK(rg_error(ctx) == RG_ERR_NONFINITE, "sticky NONFINITE: %s", rg_status_str(rg_error(ctx)));
    CHECK(msg_has(ctx, use_div ? "Inf" : "NaN") && msg_has(ctx, "rg_clip_grad_norm"),
          "message names the clip and the value: %s", rg_errmsg(ctx));
    rg_clear_error(ctx);
    CHECK_ST(ctx, rg_read(ctx, tw, wa, sizeof wa), RG_OK);
    memcpy(ma, dev_f32(ctx, opt->m.ref[0]), sizeof ma);
    memcpy(va, dev_f32(ctx, opt->v.ref[0]), sizeof va);
    CHECK(!memcmp(wa, wb, sizeof wa), "weights bit-identical after the skipped step");
    CHECK(!memcmp(ma, mb, sizeof ma) && !memcmp(va, vb, sizeof va),
          "moments bit-identical after the skipped step");
    CHECK(rg_optim_steps(opt) == steps_before, "step count unchanged: %lld vs %lld",
          (long long)rg_optim_steps(opt), (long long)steps_before);
    CHECK(dev_f32(ctx, ctx->clip)[1] != 0, "clip state flags the non-finite norm");
  }
  CHECK(rg_optim_steps(opt) == 3, "three updates counted: %lld", (long long)rg_optim_steps(opt));
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_zero_grad right after a step over every parameter records nothing: the step zeroes
   the gradients as it reads them. Anywhere else it records its own node. Either way the
   gradients read zero afterwards. */
static void zero_fold_case(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 5});
  if (!ctx) return;
  double w[N];
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.1f});
  int64_t n = N;
  float c[N], g[N];
  grad_of(1, c);
  for (int late = 0; late < 2; late++) {
    CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
    rg_tensor loss = rg_sum(ctx, rg_mul(ctx, tw, rg_input(ctx, RG_F32, 1, &n, c)), RG_ALL_AXES, 0);
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
    if (late) rg_scale(ctx, loss, 2.0f); /* a node between the step and rg_zero_grad */
    rg_stats s0, s1;
    rg_stats_get(ctx, &s0);
    CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
    rg_stats_get(ctx, &s1);
    CHECK(s1.nodes_recorded - s0.nodes_recorded == (uint64_t)late, "rg_zero_grad %s the step "
          "recorded %llu nodes", late ? "apart from" : "right after",
          (unsigned long long)(s1.nodes_recorded - s0.nodes_recorded));
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, tw), g, sizeof g), RG_OK);
    for (int i = 0; i < N; i++) CHECK(g[i] == 0, "gradient %d is %g after rg_zero_grad", i, g[i]);
  }
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Many parameters of different shapes: the optimizer state is made per parameter with
   its shape (the persistent tensor table grows while it is made), and the first AdamW
   step moves every element by lr * g / (|g| + eps) = lr * sign(g). */
static void many_params_case(void) {
  enum { NP = 12 };
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor p[NP];
  for (int i = 0; i < NP; i++) {
    char name[16];
    snprintf(name, sizeof name, "p%d", i);
    int64_t dims[2] = {i + 1, 3};
    p[i] = rg_param(ctx, name, RG_F32, 1 + i % 2, dims, (rg_init){RG_INIT_CONST, 1, 0});
  }
  rg_optim *opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 0.125f});
  CHECK(opt != NULL, "adamw over %d params: %s", NP, rg_errmsg(ctx));
  if (!opt) {
    rg_close(ctx);
    return;
  }
  for (int i = 0; i < NP; i++) {
    rg_tinfo *w = rg__t(ctx, opt->params.ref[i]), *m = rg__t(ctx, opt->m.ref[i]),
             *v = rg__t(ctx, opt->v.ref[i]);
    CHECK(m->ndim == w->ndim && v->ndim == w->ndim && m->numel == w->numel &&
              v->numel == w->numel && !memcmp(m->dims, w->dims, sizeof(int64_t) * w->ndim),
          "param %d: moments have its shape (ndim %d/%d, numel %lld/%lld)", i, m->ndim, w->ndim,
          (long long)m->numel, (long long)w->numel);
  }
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  rg_tensor loss = RG_NONE;
  for (int i = 0; i < NP; i++) { /* loss = sum_i sum(p_i) * (-1)^i: grad +-1 */
    rg_tensor t = rg_scale(ctx, rg_sum(ctx, p[i], RG_ALL_AXES, 0), i % 2 ? -1.0f : 1.0f);
    loss = i ? rg_add(ctx, loss, t) : t;
  }
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  for (int i = 0; i < NP; i++) {
    float got[36];
    size_t nb = (size_t)rg_numel(ctx, p[i]) * 4;
    CHECK_ST(ctx, rg_read(ctx, p[i], got, nb), RG_OK);
    double want = 1 - 0.125 * (i % 2 ? -1 : 1);
    for (size_t k = 0; k < nb / 4; k++)
      CHECK(close_to(got[k], want, 1e-6), "param %d[%zu] = %.9g want %.9g", i, k, got[k], want);
  }
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* ---- learning-rate schedules ------------------------------------------------------------ */

/* The rate of update s by resgrad.h's formulas, in double. */
static double sched_ref(const rg_schedule *q, int64_t s) {
  double lr = q->lr, mn = q->min_lr, st = q->start_lr, pi = 3.14159265358979323846;
  int64_t w = q->warmup;
  if (s < w)
    return q->kind == RG_SCHED_ONECYCLE ? st + (lr - st) * (double)s / (double)w
                                        : lr * (double)(s + 1) / (double)w;
  if (q->kind == RG_SCHED_STEP) return lr * pow(q->gamma, (double)((s - w) / q->step_size));
  if (q->kind == RG_SCHED_CONSTANT) return lr;
  if (s >= q->total) return mn;
  return mn + (lr - mn) * (1 + cos(pi * (double)(s - w) / (double)(q->total - w))) / 2;
}

/* Plain SGD under schedule q for n steps: after each, rg_optim_lr is the rate of that
   update, equal to the host formula within
   1e-6, and the weights moved by that rate. A step after the first (which uploads
   rg_backward's seed once) uploads its batch and nothing else: the rate is computed on
   the device. */
static void schedule_case(const char *what, rg_schedule q, int n) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 5});
  if (!ctx) return;
  double w[N];
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 1.0f});
  CHECK_ST(ctx, rg_optim_set_schedule(opt, &q), RG_OK);
  int bad_rate = -1, bad_w = -1, bad_up = -1;
  double worst = 0;
  for (int s = 0; s < n; s++) {
    float c[N], wf[N];
    grad_of(s, c);
    rg_stats a, b;
    rg_stats_get(ctx, &a);
    linear_step(ctx, tw, opt, c);
    rg_stats_get(ctx, &b);
    if (s > 0 && b.up.count - a.up.count != 1 && bad_up < 0) bad_up = s; /* 0: + seed */
    float lr = rg_optim_lr(opt);
    double want = sched_ref(&q, s), e = fabs(lr - want) / fmax(fabs(want), 1e-30);
    worst = fmax(worst, e);
    if (e > 1e-6 && bad_rate < 0) bad_rate = s;
    CHECK_ST(ctx, rg_read(ctx, tw, wf, sizeof wf), RG_OK);
    for (int i = 0; i < N; i++) {
      if (!close_to(wf[i], w[i] - (double)lr * c[i], 2e-6) && bad_w < 0) bad_w = s;
      w[i] = wf[i]; /* the next update starts from the library's weights */
    }
  }
  CHECK(bad_rate < 0, "%s: the rate of update %d differs from the formula (worst relative "
        "error %.3g)", what, bad_rate, worst);
  CHECK(bad_w < 0, "%s: update %d did not move the weights by its rate", what, bad_w);
  CHECK(bad_up < 0, "%s: step %d uploaded more than its batch", what, bad_up);
  CHECK(rg_optim_steps(opt) == n, "%s: %lld steps, want %d", what,
        (long long)rg_optim_steps(opt), n);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_optim_set_lr is refused while a schedule is set and works again once it is cleared
   (the last scheduled rate stays until then); invalid schedules are MISUSE naming the
   field and change nothing; a step skipped for a non-finite norm keeps the rate. */
static void schedule_rules_case(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 5});
  if (!ctx) return;
  double w[N];
  rg_tensor tw = make_w(ctx, w);
  rg_optim *opt = rg_optim_sgd(ctx, &(rg_sgd_options){.lr = 0.5f});
  rg_schedule q = {.kind = RG_SCHED_STEP, .lr = 0.2f, .gamma = 0.5f, .step_size = 1};
  CHECK_ST(ctx, rg_optim_set_schedule(opt, &q), RG_OK);
  struct { rg_schedule s; const char *field; } bad[] = {
      {{.kind = (rg_sched_kind)7, .lr = 1}, "kind"},
      {{.kind = RG_SCHED_CONSTANT, .lr = 0}, "lr"},
      {{.kind = RG_SCHED_CONSTANT, .lr = 1, .warmup = -1}, "warmup"},
      {{.kind = RG_SCHED_COSINE, .lr = 1, .min_lr = 2, .total = 5}, "min_lr"},
      {{.kind = RG_SCHED_COSINE, .lr = 1, .warmup = 5, .total = 5}, "total"},
      {{.kind = RG_SCHED_ONECYCLE, .lr = 1, .start_lr = -1, .total = 5}, "start_lr"},
      {{.kind = RG_SCHED_STEP, .lr = 1, .gamma = 0, .step_size = 1}, "gamma"},
      {{.kind = RG_SCHED_STEP, .lr = 1, .gamma = 1, .step_size = 0}, "step_size"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_ST(ctx, rg_optim_set_schedule(opt, &bad[i].s), RG_ERR_MISUSE);
    CHECK(msg_has(ctx, bad[i].field), "bad schedule %zu: the message must name %s: %s", i,
          bad[i].field, rg_errmsg(ctx));
    rg_clear_error(ctx);
  }
  float c[N];
  grad_of(0, c);
  linear_step(ctx, tw, opt, c);
  linear_step(ctx, tw, opt, c); /* still the valid schedule: 0.2, then 0.1 */
  CHECK(rg_optim_lr(opt) == 0.1f, "rate after two steps %g, want 0.1", rg_optim_lr(opt));
  /* a non-finite norm skips the update: the step count and the rate stay */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  int64_t n = N;
  float inf[N] = {INFINITY, 0, 0, 0, 0};
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, tw, rg_input(ctx, RG_F32, 1, &n, inf)), RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_clip_grad_norm(ctx, 1.0f), RG_OK);
  CHECK_ST(ctx, rg_optim_step(opt), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_ERR_NONFINITE);
  rg_clear_error(ctx);
  CHECK(rg_optim_steps(opt) == 2 && rg_optim_lr(opt) == 0.1f, "a skipped update: %lld "
        "steps, rate %g; want 2, 0.1", (long long)rg_optim_steps(opt), rg_optim_lr(opt));
  CHECK_ST(ctx, rg_optim_set_lr(opt, 0.3f), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_optim_set_schedule(opt, NULL)"), "set_lr's refusal must say how to "
        "clear the schedule: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_optim_set_schedule(opt, NULL), RG_OK);
  CHECK(rg_optim_lr(opt) == 0.1f, "clearing the schedule changed the rate to %g",
        rg_optim_lr(opt));
  CHECK_ST(ctx, rg_optim_set_lr(opt, 0.3f), RG_OK);
  CHECK(rg_optim_lr(opt) == 0.3f, "rg_optim_set_lr after clearing: %g", rg_optim_lr(opt));
  CHECK(rg_optim_lr(NULL) == -1, "rg_optim_lr(NULL) must be -1");
  CHECK(rg_optim_set_schedule(NULL, &q) == RG_ERR_MISUSE, "set_schedule(NULL opt)");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* rg_clip_grad_value clamps every gradient element to [-max_abs, max_abs], keeps a NaN,
   and refuses max_abs <= 0 or NaN. */
static void clip_value_case(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 5});
  if (!ctx) return;
  int64_t n = N, two = 2;
  rg_tensor w = rg_param(ctx, "w", RG_F32, 1, &n, (rg_init){RG_INIT_UNIFORM, -1, 1});
  rg_tensor u = rg_param(ctx, "u", RG_F32, 1, &two, (rg_init){RG_INIT_UNIFORM, -1, 1});
  float c[N] = {3.0f, -0.25f, -7.0f, 0.75f, NAN}, cu[2] = {-0.5f, 2.0f};
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  rg_tensor l = rg_sum(ctx, rg_mul(ctx, w, rg_input(ctx, RG_F32, 1, &n, c)), RG_ALL_AXES, 0);
  l = rg_add(ctx, l, rg_sum(ctx, rg_mul(ctx, u, rg_input(ctx, RG_F32, 1, &two, cu)),
                             RG_ALL_AXES, 0));
  CHECK_ST(ctx, rg_backward(ctx, l), RG_OK);
  CHECK_ST(ctx, rg_clip_grad_value(ctx, 1.0f), RG_OK);
  float g[N], gu[2];
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, w), g, sizeof g), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, u), gu, sizeof gu), RG_OK);
  CHECK(g[0] == 1 && g[1] == -0.25f && g[2] == -1 && g[3] == 0.75f && isnan(g[4]) &&
            gu[0] == -0.5f && gu[1] == 1,
        "clipped by value: %g %g %g %g %g | %g %g", g[0], g[1], g[2], g[3], g[4], gu[0], gu[1]);
  CHECK_ST(ctx, rg_clip_grad_value(ctx, 0), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_clip_grad_value(ctx, NAN), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK(rg_clip_grad_value(NULL, 1) == RG_ERR_MISUSE, "rg_clip_grad_value(NULL)");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  adamw_case((rg_adamw_options){.lr = 0.05f, .weight_decay = 0.1f}, 6);
  adamw_case((rg_adamw_options){.lr = 0.01f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f}, 6);
  adamw_case((rg_adamw_options){0}, 3); /* defaults: lr 1e-3, 0.9, 0.999, 1e-8, no decay */
  sgd_case((rg_sgd_options){.lr = 0.1f}, 5);
  sgd_case((rg_sgd_options){.lr = 0.1f, .momentum = 0.9f}, 5);
  sgd_case((rg_sgd_options){.lr = 0.05f, .weight_decay = 0.2f}, 5);
  sgd_case((rg_sgd_options){.lr = 0.05f, .momentum = 0.8f, .weight_decay = 0.1f}, 5);
  sgd_case((rg_sgd_options){0}, 2); /* default lr 1e-2 */
  sgd_mse_case();
  set_lr_case();
  clip_case();
  nonfinite_case(0, 0);
  nonfinite_case(1, 0);
  nonfinite_case(0, 1);
  zero_fold_case();
  many_params_case();
  schedule_case("constant", (rg_schedule){.kind = RG_SCHED_CONSTANT, .lr = 0.05f, .warmup = 3}, 8);
  schedule_case("cosine", (rg_schedule){.kind = RG_SCHED_COSINE, .lr = 0.1f, .warmup = 5,
                                        .total = 40}, 45);
  schedule_case("cosine-min", (rg_schedule){.kind = RG_SCHED_COSINE, .lr = 0.03f,
                                            .min_lr = 0.001f, .total = 20}, 23);
  schedule_case("step", (rg_schedule){.kind = RG_SCHED_STEP, .lr = 0.1f, .gamma = 0.5f,
                                      .warmup = 2, .step_size = 3}, 14);
  schedule_case("onecycle", (rg_schedule){.kind = RG_SCHED_ONECYCLE, .lr = 0.1f,
                                          .start_lr = 0.004f, .min_lr = 1e-5f, .warmup = 6,
                                          .total = 30}, 34);
  schedule_rules_case();
  clip_value_case();
  return finish();
}
