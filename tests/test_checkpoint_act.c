/*
 * test_checkpoint_act.c - activation checkpoint regions (rg_checkpoint_begin/end) on the
 * CPU: an MLP and a small GPT, with dropout, trained a few steps with and without regions
 * give the same loss and every gradient bit for bit (also in check mode, bf16 mixed
 * precision and two backward passes in one step); regions lower the pass pool's peak
 * where a model's activations dominate it; misuse is refused with a message.
 */
#include "common.h"
#include "resgrad_nn.h"

#include <stdint.h>

enum { N = 64, W = 48, C = 5, L = 4, STEPS = 3 };

/* ---- an MLP of residual blocks, each block a region when asked ---------------------- */

typedef struct mlp {
  rg_tensor w[L + 1], b[L + 1], g[L], be[L];
} mlp;

static void mlp_make(rg_ctx *ctx, mlp *m) {
  rg_init normal = {RG_INIT_NORMAL, 0.2f, 0}, zeros = {RG_INIT_ZEROS, 0, 0};
  rg_init ones = {RG_INIT_CONST, 1, 0};
  char nm[32];
  for (int l = 0; l <= L; l++) {
    int64_t out = l == L ? C : W;
    snprintf(nm, sizeof nm, "w%d", l);
    m->w[l] = rg_param(ctx, nm, RG_F32, 2, (int64_t[]){out, W}, normal);
    snprintf(nm, sizeof nm, "b%d", l);
    m->b[l] = rg_param(ctx, nm, RG_F32, 1, (int64_t[]){out}, zeros);
    if (l == L) break;
    snprintf(nm, sizeof nm, "g%d", l);
    m->g[l] = rg_param(ctx, nm, RG_F32, 1, (int64_t[]){W}, ones);
    snprintf(nm, sizeof nm, "be%d", l);
    m->be[l] = rg_param(ctx, nm, RG_F32, 1, (int64_t[]){W}, zeros);
  }
}

/* x += 0.5 * act(layernorm(x) w + b), through two views and a dropout. */
static rg_tensor mlp_block(rg_ctx *ctx, const mlp *m, int l, rg_tensor x) {
  rg_tensor h = rg_layernorm(ctx, x, m->g[l], m->be[l], 1e-5f);
  h = rg_linear_act(ctx, h, m->w[l], m->b[l], l % 2 ? RG_ACT_GELU : RG_ACT_RELU);
  h = rg_reshape(ctx, rg_reshape(ctx, h, 1, (int64_t[]){N * W}), 2, (int64_t[]){N, W});
  h = rg_dropout(ctx, h, 0.2f);
  return rg_add(ctx, x, rg_scale(ctx, rg_tanh(ctx, h), 0.5f));
}

static rg_tensor mlp_loss(rg_ctx *ctx, const mlp *m, const float *xs, const int32_t *ys,
                          int regions) {
  rg_tensor x = rg_input(ctx, RG_F32, 2, (int64_t[]){N, W}, xs);
  rg_tensor y = rg_input(ctx, RG_I32, 1, (int64_t[]){N}, ys);
  for (int l = 0; l < L; l++) {
    if (regions) CHECK_ST(ctx, rg_checkpoint_begin(ctx), RG_OK);
    x = mlp_block(ctx, m, l, x);
    if (regions) CHECK_ST(ctx, rg_checkpoint_end(ctx, x), RG_OK);
  }
  return rg_cross_entropy(ctx, rg_linear(ctx, x, m->w[L], m->b[L]), y);
}

static float xs[2][N * W];
static int32_t ys[2][N];

static void make_data(void) {
  uint32_t s = 12345;
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < N * W; i++) {
      s = s * 1664525u + 1013904223u;
      xs[k][i] = (float)(s >> 8) / (float)(1u << 24) * 2 - 1;
    }
    for (int i = 0; i < N; i++) ys[k][i] = (int32_t)((i * 7 + k) % C);
  }
}

/* Every parameter gradient's bytes, concatenated into buf (cap floats); the count. */
static size_t grads_of(rg_ctx *ctx, float *buf, size_t cap) {
  size_t n = 0;
  for (int i = 0; i < rg_param_count(ctx); i++) {
    rg_tensor g = rg_grad(ctx, rg_param_at(ctx, i));
    size_t k = (size_t)rg_numel(ctx, g);
    if (n + k > cap) return 0;
    CHECK_ST(ctx, rg_read(ctx, g, buf + n, k * sizeof(float)), RG_OK);
    n += k;
  }
  return n;
}

enum { GCAP = 1 << 17 };
static float ga[GCAP], gb[GCAP];

/* One step of run: the losses of its micro-batches (two backward passes in one step when
   micro == 2), then its gradients into g (their count in *ng), then AdamW. */
typedef struct run {
  rg_ctx *ctx;
  mlp m;
  rg_gpt *gpt;
  rg_optim *opt;
  int regions;
} run;

static float step(run *r, int micro, float *g, size_t *ng) {
  rg_ctx *ctx = r->ctx;
  float total = 0;
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  for (int k = 0; k < micro; k++) {
    rg_tensor loss;
    if (r->gpt) {
      int32_t idx[2 * 8], tgt[2 * 8];
      for (int i = 0; i < 16; i++) idx[i] = (i * 5 + k) % 32, tgt[i] = (i * 3 + 1 + k) % 32;
      rg_tensor ti = rg_input(ctx, RG_I32, 2, (int64_t[]){2, 8}, idx);
      rg_tensor tt = rg_input(ctx, RG_I32, 2, (int64_t[]){2, 8}, tgt);
      loss = rg_gpt_loss(r->gpt, ti, tt);
    } else {
      loss = mlp_loss(ctx, &r->m, xs[k], ys[k], r->regions);
    }
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    float l = 0;
    CHECK_ST(ctx, rg_item(ctx, loss, &l), RG_OK);
    total += l;
  }
  *ng = grads_of(ctx, g, GCAP);
  CHECK(*ng > 0, "no gradients read");
  CHECK_ST(ctx, rg_optim_step(r->opt), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  return total;
}

static void open_run(run *r, rg_options o, int gpt, int regions) {
  memset(r, 0, sizeof *r);
  o.seed = 7;
  r->ctx = open_cpu_opts(o);
  r->regions = regions;
  if (!r->ctx) return;
  if (gpt) {
    rg_gpt_config cfg = {.vocab = 32, .block = 8, .layers = 3, .width = 32, .heads = 4,
                         .dropout = 0.1f, .checkpoint = regions};
    r->gpt = rg_gpt_new(r->ctx, &cfg, NULL);
    CHECK(r->gpt, "rg_gpt_new: %s", rg_errmsg(r->ctx));
  } else {
    mlp_make(r->ctx, &r->m);
  }
  r->opt = rg_optim_adamw(r->ctx, &(rg_adamw_options){.lr = 1e-2f});
  CHECK(r->opt, "rg_optim_adamw: %s", rg_errmsg(r->ctx));
}

static void close_run(run *r) {
  if (!r->ctx) return;
  rg_optim_free(r->opt);
  rg_gpt_free(r->gpt);
  CHECK_ST(r->ctx, rg_error(r->ctx), RG_OK);
  rg_close(r->ctx);
}

/* Trains a (plain) and b (with regions) side by side: the same losses and gradients, bit
   for bit, at every step. */
static void same_training(const char *what, rg_options oa, rg_options ob, int gpt, int micro) {
  run a, b;
  open_run(&a, oa, gpt, 0);
  open_run(&b, ob, gpt, 1);
  if (!a.ctx || !b.ctx || (gpt && (!a.gpt || !b.gpt))) {
    close_run(&a), close_run(&b);
    return;
  }
  for (int s = 0; s < STEPS; s++) {
    size_t na = 0, nb = 0;
    float la = step(&a, micro, ga, &na), lb = step(&b, micro, gb, &nb);
    int same = !memcmp(&la, &lb, sizeof la) && na == nb && !memcmp(ga, gb, na * sizeof(float));
    CHECK(same, "%s step %d: loss %.9g without regions, %.9g with; gradients %s (%zu and "
          "%zu numbers)", what, s, la, lb, memcmp(ga, gb, na * sizeof(float)) ? "differ"
          : "equal", na, nb);
    if (!same) break;
  }
  rg_stats sa, sb;
  rg_stats_get(a.ctx, &sa);
  rg_stats_get(b.ctx, &sb);
  CHECK(sb.nodes_recorded > sa.nodes_recorded, "%s: regions recomputed nothing (%llu nodes "
        "recorded, %llu without)", what, (unsigned long long)sb.nodes_recorded,
        (unsigned long long)sa.nodes_recorded);
  close_run(&a);
  close_run(&b);
}

/* ---- the pass pool's peak ------------------------------------------------------------- */

/* One step of a deep MLP whose activations dominate the pass pool: its peak. */
static size_t peak_of(int regions) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return 0;
  mlp m;
  mlp_make(ctx, &m);
  rg_stats_reset(ctx);
  rg_tensor loss = mlp_loss(ctx, &m, xs[0], ys[0], regions);
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  rg_stats s;
  rg_stats_get(ctx, &s);
  rg_close(ctx);
  return s.pass_peak;
}

/* ---- misuse --------------------------------------------------------------------------- */

static void misuse(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  mlp m;
  mlp_make(ctx, &m);
  CHECK_ST(ctx, rg_checkpoint_end(ctx, RG_NONE), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "no region is open"), "end without begin: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);

  rg_tensor x = rg_input(ctx, RG_F32, 2, (int64_t[]){N, W}, xs[0]);
  CHECK_ST(ctx, rg_checkpoint_begin(ctx), RG_OK);
  CHECK_ST(ctx, rg_checkpoint_begin(ctx), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "do not nest"), "nested: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_tensor h = rg_layernorm(ctx, x, m.g[0], m.be[0], 1e-5f);
  rg_tensor y = rg_linear_act(ctx, h, m.w[0], m.b[0], RG_ACT_RELU);
  rg_tensor loss0 = rg_mean(ctx, y, RG_ALL_AXES, 0);
  CHECK_ST(ctx, rg_backward(ctx, loss0), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "region is open"), "backward inside: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_ERR_MISUSE);
  CHECK(rg_is_live(ctx, x), "rg_step_begin inside a region reset the pass pool");
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PASS), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  /* an output made before the region: refused, and the region is closed */
  CHECK_ST(ctx, rg_checkpoint_end(ctx, x), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "made before the region"), "out from outside: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  static float hv[N * W];
  CHECK_ST(ctx, rg_read(ctx, h, hv, sizeof hv), RG_OK); /* kept: nothing was given back */

  /* a real region: its inner tensors are refused afterwards, the shape queries answer */
  CHECK_ST(ctx, rg_checkpoint_begin(ctx), RG_OK);
  h = rg_layernorm(ctx, x, m.g[0], m.be[0], 1e-5f);
  rg_tensor keep = rg_tanh(ctx, h);
  CHECK_ST(ctx, rg_retain_grad(ctx, keep), RG_OK);
  y = rg_linear_act(ctx, keep, m.w[0], m.b[0], RG_ACT_RELU);
  CHECK_ST(ctx, rg_checkpoint_end(ctx, y), RG_OK);
  CHECK(rg_dim(ctx, h, 1) == W, "rg_dim of a given-back tensor: %lld", (long long)rg_dim(ctx, h, 1));
  CHECK_ST(ctx, rg_error(ctx), RG_OK);
  CHECK(!rg_add(ctx, h, h).id, "an op read a given-back tensor");
  CHECK(msg_has(ctx, "checkpoint region"), "read after the region: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  float v;
  CHECK_ST(ctx, rg_read(ctx, h, &v, sizeof v), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  char line[512];
  rg_describe(ctx, h, line, sizeof line);
  CHECK(strstr(line, "checkpoint region"), "rg_describe: %s", line);
  /* the output and the retained tensor survive, and the retained gradient is the one of
     the same pass without the region */
  rg_tensor loss =
      rg_add(ctx, rg_mean(ctx, y, RG_ALL_AXES, 0), rg_mean(ctx, keep, RG_ALL_AXES, 0));
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  static float kv[N * W], kg[N * W], pg[N * W];
  CHECK_ST(ctx, rg_read(ctx, keep, kv, sizeof kv), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, keep), kg, sizeof kg), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  rg_tensor keep2 = rg_tanh(ctx, rg_layernorm(ctx, x, m.g[0], m.be[0], 1e-5f));
  CHECK_ST(ctx, rg_retain_grad(ctx, keep2), RG_OK);
  rg_tensor y2 = rg_linear_act(ctx, keep2, m.w[0], m.b[0], RG_ACT_RELU);
  rg_tensor loss2 =
      rg_add(ctx, rg_mean(ctx, y2, RG_ALL_AXES, 0), rg_mean(ctx, keep2, RG_ALL_AXES, 0));
  CHECK_ST(ctx, rg_backward(ctx, loss2), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, keep2), pg, sizeof pg), RG_OK);
  CHECK(!memcmp(kg, pg, sizeof kg), "a retained gradient in a region differs");
  /* RG_NONE closes a region and gives nothing back */
  CHECK_ST(ctx, rg_checkpoint_begin(ctx), RG_OK);
  h = rg_tanh(ctx, x);
  CHECK_ST(ctx, rg_checkpoint_end(ctx, RG_NONE), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, h, kv, sizeof kv), RG_OK);
  CHECK_ST(ctx, rg_error(ctx), RG_OK);
  rg_close(ctx);
}

int main(void) {
  make_data();
  rg_options plain = {0}, check = {.check = 1}, bf16 = {.bf16 = 1};
  same_training("mlp", plain, plain, 0, 1);
  same_training("mlp, two backward passes a step", plain, plain, 0, 2);
  same_training("mlp, check mode", plain, check, 0, 1);
  same_training("gpt", plain, plain, 1, 1);
  same_training("gpt, bf16", bf16, bf16, 1, 1);
  same_training("gpt, check mode", plain, check, 1, 1);
  size_t without = peak_of(0), with = peak_of(1);
  printf("pass peak of one MLP step: %zu bytes without regions, %zu with\n", without, with);
  CHECK(with > 0 && with < without, "regions did not lower the pass peak (%zu, %zu)", with,
        without);
  misuse();
  return finish();
}
