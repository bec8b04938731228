/*
 * test_checkpoint_act.c - activation checkpoint regions (rg_checkpoint_begin/end) on the
 * CPU: an MLP and a small GPT, with dropout, trained a few steps with and without regions
 * give the same loss and every gradient bit for bit (also in check mode, bf16 mixed
 * precision and two backward passes in one step), and so does a GPT whose loss runs its
 * head in row chunks (rg_gpt_config.head_chunk), each chunk a region, with and without an
 * ignore index; the chunked loss and gradients are the unchunked ones but for rounding;
 * regions lower the pass pool's peak where a model's activations dominate it, and where
 * its logits do; misuse is refused with a message.
 */
#include "common.h"
#include "resgrad_nn.h"

#include <math.h>
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

/* The models: an MLP, or the GPT below with its loss's head whole, in chunks, or in
   chunks with an ignore index. */
enum { MLP, GPT, GPT_CHUNKED, GPT_IGNORE };

/* The GPT: vocabulary 32 and batches of 3 x 7 = 21 rows, whose head in chunks of at most
   HEAD_CHUNK logits is 4 chunks of 6, 6, 6 and 3 rows. Its ignore index is -1. */
enum { GV = 32, GB = 3, GT = 7, HEAD_CHUNK = 6 * GV };

/* The GPT's tokens and targets of micro-batch k; with ignore 1, every fourth target and
   the whole second chunk (rows 6 to 11) are the ignore index; with ignore 2 all are. */
static void gpt_batch(int k, int ignore, int32_t *idx, int32_t *tgt) {
  for (int i = 0; i < GB * GT; i++) {
    idx[i] = (i * 5 + k) % GV, tgt[i] = (i * 3 + 1 + k) % GV;
    if (ignore == 2 || (ignore && (i % 4 == 0 || (i >= 6 && i < 12)))) tgt[i] = -1;
  }
}

/* One step of run: the losses of its micro-batches (two backward passes in one step when
   micro == 2), then its gradients into g (their count in *ng), then AdamW. */
typedef struct run {
  rg_ctx *ctx;
  mlp m;
  rg_gpt *gpt;
  rg_optim *opt;
  int regions, ignore;
} run;

static float step(run *r, int micro, float *g, size_t *ng) {
  rg_ctx *ctx = r->ctx;
  float total = 0;
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  for (int k = 0; k < micro; k++) {
    rg_tensor loss;
    if (r->gpt) {
      int32_t idx[GB * GT], tgt[GB * GT];
      gpt_batch(k, r->ignore, idx, tgt);
      rg_tensor ti = rg_input(ctx, RG_I32, 2, (int64_t[]){GB, GT}, idx);
      rg_tensor tt = rg_input(ctx, RG_I32, 2, (int64_t[]){GB, GT}, tgt);
      loss = r->ignore ? rg_gpt_loss_ignore(r->gpt, ti, tt, -1) : rg_gpt_loss(r->gpt, ti, tt);
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

/* head_chunk: the GPT's (0: its default, which keeps this GPT's head whole). */
static void open_run(run *r, rg_options o, int model, int regions, int64_t head_chunk) {
  memset(r, 0, sizeof *r);
  o.seed = 7;
  r->ctx = open_cpu_opts(o);
  r->regions = regions;
  r->ignore = model == GPT_IGNORE;
  if (!r->ctx) return;
  if (model != MLP) {
    rg_gpt_config cfg = {.vocab = GV, .block = 8, .layers = 3, .width = 32, .heads = 4,
                         .dropout = 0.1f, .checkpoint = regions, .head_chunk = head_chunk};
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
static void same_training(const char *what, rg_options oa, rg_options ob, int model, int micro) {
  run a, b;
  int64_t hc = model >= GPT_CHUNKED ? HEAD_CHUNK : 0;
  open_run(&a, oa, model, 0, hc);
  open_run(&b, ob, model, 1, hc);
  if (!a.ctx || !b.ctx || (model != MLP && (!a.gpt || !b.gpt))) {
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

/* ---- the head in chunks against the whole head ---------------------------------------- */

/* The largest |a - b| over n numbers, and the largest |a| in *amax. */
static double max_diff(const float *a, const float *b, size_t n, double *amax) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]), v = fabs((double)a[i]);
    d = e > d ? e : d, m = v > m ? v : m;
  }
  *amax = m;
  return d;
}

/* One step of the GPT with its head whole and in chunks (no regions): the same loss and
   gradients but for float rounding. ignore as gpt_batch's: with every target ignored,
   both losses and every gradient are 0. */
static void chunks_against_whole(const char *what, int ignore) {
  run a, b;
  rg_options o = {0};
  open_run(&a, o, ignore ? GPT_IGNORE : GPT, 0, -1);
  open_run(&b, o, ignore ? GPT_IGNORE : GPT, 0, HEAD_CHUNK);
  a.ignore = b.ignore = ignore;
  if (a.gpt && b.gpt) {
    size_t na = 0, nb = 0;
    float la = step(&a, 1, ga, &na), lb = step(&b, 1, gb, &nb);
    rg_stats sa, sb;
    rg_stats_get(a.ctx, &sa);
    rg_stats_get(b.ctx, &sb);
    double gmax = 0, gd = na == nb ? max_diff(ga, gb, na, &gmax) : INFINITY;
    printf("%s: loss %.9g whole, %.9g in chunks; gradients differ by %.3g (largest %.3g); "
           "%llu and %llu nodes\n", what, la, lb, gd, gmax,
           (unsigned long long)sa.nodes_recorded, (unsigned long long)sb.nodes_recorded);
    CHECK(sb.nodes_recorded > sa.nodes_recorded + 8, "%s: the head was not chunked (%llu "
          "nodes, %llu whole)", what, (unsigned long long)sb.nodes_recorded,
          (unsigned long long)sa.nodes_recorded);
    if (ignore == 2) {
      CHECK(la == 0 && lb == 0 && gmax == 0 && gd == 0, "%s: losses %g and %g, gradients "
            "up to %g and %g apart; all should be 0", what, la, lb, gmax, gd);
    } else {
      /* Float rounding of sums taken in another order: ~1e-7 relative. A chunk weighted
         wrongly (n_c / N, or its count) is off by 1e-2 and more. */
      CHECK(fabsf(la - lb) <= 1e-5f * fabsf(la) && la > 1, "%s: loss %.9g whole, %.9g in "
            "chunks", what, la, lb);
      CHECK(gmax > 0 && gd <= 1e-4 * gmax, "%s: gradients differ by %g (largest %g)", what,
            gd, gmax);
    }
  }
  close_run(&a);
  close_run(&b);
}

/* Targets of another shape than idx's: the head is not chunked and the cross-entropy
   refuses them with its message, as with the head whole; the context keeps working. */
static void chunks_refuse_bad_targets(void) {
  run r;
  open_run(&r, (rg_options){0}, GPT_CHUNKED, 1, HEAD_CHUNK);
  if (r.gpt) {
    rg_ctx *ctx = r.ctx;
    int32_t idx[GB * GT], tgt[GB * GT];
    gpt_batch(0, 0, idx, tgt);
    rg_tensor ti = rg_input(ctx, RG_I32, 2, (int64_t[]){GB, GT}, idx);
    rg_tensor flat = rg_input(ctx, RG_I32, 1, (int64_t[]){GB * GT}, tgt);
    CHECK(!rg_gpt_loss(r.gpt, ti, flat).id, "targets [21] for idx [3, 7] were taken");
    CHECK(rg_error(ctx) == RG_ERR_MISUSE && msg_has(ctx, "rg_cross_entropy"),
          "targets of the wrong shape: %s", rg_errmsg(ctx));
    rg_clear_error(ctx);
    size_t n = 0;
    float l = step(&r, 1, ga, &n);
    CHECK(l > 1 && n > 0, "a step after the refusal: loss %g", l);
  }
  close_run(&r);
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

/* One step of a GPT whose logits dominate the pass pool (a vocabulary of 512 at width 16;
   32 rows, 8 chunks of 4): its pass peak with the head in chunks (head_chunk 2048, or
   whole for -1), with or without regions. */
enum { PV = 512, PB = 2, PT = 16 };

static size_t gpt_peak(int regions, int64_t head_chunk) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 3});
  if (!ctx) return 0;
  rg_gpt_config cfg = {.vocab = PV, .block = PT, .layers = 2, .width = 16, .heads = 2,
                       .checkpoint = regions, .head_chunk = head_chunk};
  rg_gpt *g = rg_gpt_new(ctx, &cfg, NULL);
  int32_t idx[PB * PT], tgt[PB * PT];
  for (int i = 0; i < PB * PT; i++) idx[i] = (i * 7) % PV, tgt[i] = (i * 13 + 5) % PV;
  rg_stats_reset(ctx);
  rg_tensor loss = rg_gpt_loss(g, rg_input(ctx, RG_I32, 2, (int64_t[]){PB, PT}, idx),
                               rg_input(ctx, RG_I32, 2, (int64_t[]){PB, PT}, tgt));
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  rg_stats s;
  rg_stats_get(ctx, &s);
  rg_gpt_free(g);
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
  same_training("mlp", plain, plain, MLP, 1);
  same_training("mlp, two backward passes a step", plain, plain, MLP, 2);
  same_training("mlp, check mode", plain, check, MLP, 1);
  same_training("gpt", plain, plain, GPT, 1);
  same_training("gpt, bf16", bf16, bf16, GPT, 1);
  same_training("gpt, check mode", plain, check, GPT, 1);
  same_training("gpt, head in chunks", plain, plain, GPT_CHUNKED, 1);
  same_training("gpt, head in chunks, two backward passes a step", plain, plain, GPT_CHUNKED, 2);
  same_training("gpt, head in chunks, bf16", bf16, bf16, GPT_CHUNKED, 1);
  same_training("gpt, head in chunks, check mode", plain, check, GPT_CHUNKED, 1);
  same_training("gpt, head in chunks, ignore index", plain, plain, GPT_IGNORE, 1);
  same_training("gpt, head in chunks, ignore index, bf16", bf16, bf16, GPT_IGNORE, 1);
  chunks_against_whole("gpt loss", 0);
  chunks_against_whole("gpt loss, ignore index", 1);
  chunks_against_whole("gpt loss, every target ignored", 2);
  chunks_refuse_bad_targets();
  size_t without = peak_of(0), with = peak_of(1);
  printf("pass peak of one MLP step: %zu bytes without regions, %zu with\n", without, with);
  CHECK(with > 0 && with < without, "regions did not lower the pass peak (%zu, %zu)", with,
        without);
  size_t whole = gpt_peak(0, -1), whole_r = gpt_peak(1, -1), chunks = gpt_peak(0, 2048),
         chunks_r = gpt_peak(1, 2048);
  printf("pass peak of one GPT step (logits %d bytes): head whole %zu, with regions %zu; "
         "head in chunks %zu, with regions %zu\n", PB * PT * PV * 4, whole, whole_r, chunks,
         chunks_r);
  /* Each chunk a region: one chunk's logits held at a time, not all of them. */
  CHECK(chunks_r > 0 && chunks_r < whole_r && chunks_r < chunks && chunks <= whole,
        "the head's chunks and regions did not lower the GPT's pass peak (whole %zu, with "
        "regions %zu; in chunks %zu, with regions %zu)", whole, whole_r, chunks, chunks_r);
  misuse();
  return finish();
}
