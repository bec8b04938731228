/*
 * generate.c - rg_gpt_generate: a GPT's tokens one position at a time, with a KV cache
 * on the device (docs/generate.md).
 *
 * Invariants:
 *  - Every decode step records the same nodes on the same addresses (the pass pool is
 *    reset before each, the cache is persistent, the position is an uploaded tensor and
 *    the sampler's counter), so on CUDA it replays one captured graph.
 *  - All rows share one position per step: a row whose prompt is longer than the
 *    shortest is fed its own prompt tokens until it ends, so no row attends to padding.
 *  - The cache's states are freed on every return, after the steps that use them were
 *    drained (each step ends with a read).
 *  - The step is rg_gpt_forward's computation at the fed positions: the same layers and
 *    ops (attention from the cache instead of over the whole sequence), no dropout.
 */
#include "nn_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen {
  rg_ctx *ctx;
  rg_gpt_parts m;
  const rg_gpt_config *cfg;
  const rg_sample_config *sc;
  int64_t B, S;
  rg_tensor *kv; /* 2 per layer: K, V */
} gen;

static rg_status fail(rg_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static rg_status fail(rg_ctx *ctx, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rg__nn_misuse(ctx, "rg_gpt_generate: %s", msg);
  return rg__nn_status(ctx);
}

/* Records one step: tokens tok [B, T] at positions posidx [B, T] (pos [B] their first),
   the next token of each row drawn from the logits of its last position with counter
   ctr; reads the B ids into ids. */
static rg_status step(gen *g, rg_tensor tok, rg_tensor posidx, rg_tensor pos, rg_tensor ctr,
                      int64_t T, int32_t *ids) {
  rg_ctx *ctx = g->ctx;
  const rg_gpt_parts *m = &g->m;
  if (*m->label) rg_label_push(ctx, m->label);
  rg_label_push(ctx, "wte");
  rg_tensor x = rg_add(ctx, rg_embedding(ctx, m->wte->w, tok), rg_embedding(ctx, m->wpe->w,
                                                                            posidx));
  rg_label_pop(ctx);
  for (int64_t i = 0; i < g->cfg->layers; i++) {
    const rg_nn_block *b = &m->h[i];
    char lab[32];
    snprintf(lab, sizeof lab, "h.%lld", (long long)i);
    rg_label_push(ctx, lab);
    rg_label_push(ctx, "attn");
    rg_tensor h = rg_nn_layernorm_forward(ctx, &b->ln_1, x);
    rg_tensor qkv = rg_nn_linear_forward(ctx, &b->attn.c_attn, h);
    rg_kv_write(ctx, g->kv[2 * i], g->kv[2 * i + 1], qkv, pos);
    rg_tensor a = rg_attention_cached(ctx, qkv, g->kv[2 * i], g->kv[2 * i + 1], pos);
    x = rg_add(ctx, x, rg_nn_linear_forward(ctx, &b->attn.c_proj, a));
    rg_label_pop(ctx);
    rg_label_push(ctx, "mlp");
    h = rg_nn_layernorm_forward(ctx, &b->ln_2, x);
    h = rg_linear_act(ctx, h, b->mlp.c_fc.w, b->mlp.c_fc.b, RG_ACT_GELU);
    x = rg_add(ctx, x, rg_nn_linear_forward(ctx, &b->mlp.c_proj, h));
    rg_label_pop(ctx);
    rg_label_pop(ctx);
  }
  rg_label_push(ctx, "head");
  if (T > 1) x = rg_slice(ctx, x, 1, T - 1, 1); /* only the last position is sampled */
  x = rg_nn_layernorm_forward(ctx, m->ln_f, x);
  rg_tensor logits = rg_linear(ctx, x, m->wte->w, RG_NONE);
  logits = rg_reshape(ctx, logits, 2, (int64_t[]){g->B, g->cfg->vocab});
  rg_tensor next = rg_sample(ctx, logits, ctr, g->sc->temperature, g->sc->top_k,
                             g->sc->top_p, g->sc->seed);
  rg_label_pop(ctx);
  if (*m->label) rg_label_pop(ctx);
  return rg_read(ctx, next, ids, sizeof(int32_t) * (size_t)g->B);
}

/* The arguments, checked; the message names the first that is wrong and what fits. */
static rg_status check(rg_ctx *ctx, const rg_gpt_config *c, const int32_t *prompts,
                       const int64_t *lens, int64_t B, int64_t P, int64_t max_new,
                       const rg_sample_config *sc, int32_t *out) {
  if (!prompts || !out) return fail(ctx, "prompts and out must not be NULL");
  if (B < 1 || P < 1 || max_new < 1)
    return fail(ctx, "batch %lld, prompt_len %lld and max_new %lld must each be >= 1",
                (long long)B, (long long)P, (long long)max_new);
  int64_t longest = 0;
  for (int64_t b = 0; b < B; b++) {
    int64_t n = lens ? lens[b] : P;
    if (n < 1 || n > P)
      return fail(ctx, "lens[%lld] = %lld is outside [1, prompt_len = %lld]", (long long)b,
                  (long long)n, (long long)P);
    if (n > longest) longest = n;
    for (int64_t t = 0; t < n; t++)
      if (prompts[b * P + t] < 0 || prompts[b * P + t] >= c->vocab)
        return fail(ctx, "prompt %lld's token %lld is %d, outside the vocabulary [0, %lld)",
                    (long long)b, (long long)t, (int)prompts[b * P + t], (long long)c->vocab);
  }
  if (longest > c->block)
    return fail(ctx, "a prompt of %lld tokens is longer than the model's block size %lld; "
                "pass at most %lld (its last tokens)", (long long)longest, (long long)c->block,
                (long long)c->block);
  if (longest + max_new - 1 > c->block)
    return fail(ctx, "the longest prompt (%lld tokens) + max_new %lld - 1 is %lld positions, "
                "more than the model's block size %lld: ask for at most %lld new tokens",
                (long long)longest, (long long)max_new, (long long)(longest + max_new - 1),
                (long long)c->block, (long long)(c->block - longest + 1));
  if (!(sc->temperature >= 0) || isinf(sc->temperature))
    return fail(ctx, "cfg->temperature %g must be finite and >= 0 (0: greedy)",
                (double)sc->temperature);
  if (sc->top_k < 0) return fail(ctx, "cfg->top_k %lld must be >= 0 (0: off)",
                                 (long long)sc->top_k);
  if (!(sc->top_p > 0 && sc->top_p <= 1))
    return fail(ctx, "cfg->top_p %g must be in (0, 1] (1: off)", (double)sc->top_p);
  if (sc->stop < -1 || sc->stop >= c->vocab)
    return fail(ctx, "cfg->stop %d must be -1 (none) or a token id in [0, %lld)",
                (int)sc->stop, (long long)c->vocab);
  return RG_OK;
}

/* Takes the ids drawn for position q: writes those of rows whose prompt ended before q
   and are not done, and marks rows done. Returns how many rows are still going. */
static int64_t take(int64_t q, const int32_t *ids, const int64_t *len, int64_t B,
                    int64_t max_new, int32_t stop, unsigned char *done, int32_t *out) {
  int64_t going = 0;
  for (int64_t b = 0; b < B; b++) {
    if (!done[b] && q >= len[b]) {
      int64_t j = q - len[b];
      out[b * max_new + j] = ids[b];
      if (ids[b] == stop || j + 1 == max_new) done[b] = 1;
    }
    going += !done[b];
  }
  return going;
}

rg_status rg_gpt_generate(rg_gpt *gpt, const int32_t *prompts, const int64_t *lens,
                          int64_t batch, int64_t prompt_len, int64_t max_new,
                          const rg_sample_config *cfg, int32_t *out) {
  if (!gpt) return RG_ERR_MISUSE;
  rg_ctx *ctx = rg__gpt_ctx(gpt);
  const rg_sample_config greedy = {0, 0, 1, 0, -1};
  const rg_sample_config *sc = cfg ? cfg : &greedy;
  const rg_gpt_config *c = rg_gpt_config_of(gpt);
  if (rg_error(ctx) != RG_OK) return rg_error(ctx);
  rg_status st = check(ctx, c, prompts, lens, batch, prompt_len, max_new, sc, out);
  if (st != RG_OK) return st;
  int64_t B = batch, H = c->heads, D = c->width / c->heads, L = c->layers;
  int64_t *len = malloc(sizeof(int64_t) * (size_t)B);
  int32_t *buf = malloc(sizeof(int32_t) * (size_t)(B * 2 + B * prompt_len));
  unsigned char *done = calloc((size_t)B, 1);
  gen g = {ctx, rg__gpt_parts(gpt), c, sc, B, 0, calloc((size_t)(2 * L + 1), sizeof(rg_tensor))};
  if (!len || !buf || !done || !g.kv) {
    free(len), free(buf), free(done), free(g.kv);
    return fail(ctx, "out of host memory for %lld rows", (long long)B);
  }
  int64_t shortest = prompt_len, longest = 0;
  for (int64_t b = 0; b < B; b++) {
    len[b] = lens ? lens[b] : prompt_len;
    if (len[b] < shortest) shortest = len[b];
    if (len[b] > longest) longest = len[b];
  }
  for (int64_t e = 0; e < B * max_new; e++) out[e] = -1;
  g.S = longest + max_new - 1;
  st = rg_step_begin(ctx);
  for (int64_t i = 0; st == RG_OK && i < 2 * L; i++) {
    g.kv[i] = rg_state_new(ctx, RG_F32, 4, (int64_t[]){B, H, g.S, D});
    if (!g.kv[i].id) st = rg__nn_status(ctx);
  }
  int32_t *ids = buf, *pos = buf + B, *tok = buf + 2 * B;
  /* prefill: positions [0, shortest) of every row */
  if (st == RG_OK) {
    rg_step_begin(ctx);
    int64_t T = shortest;
    int32_t *pidx = malloc(sizeof(int32_t) * (size_t)(B * T));
    if (!pidx) st = fail(ctx, "out of host memory for %lld positions", (long long)(B * T));
    for (int64_t b = 0; st == RG_OK && b < B; b++) {
      pos[b] = 0;
      ids[b] = (int32_t)(T - 1);
      for (int64_t t = 0; t < T; t++) {
        tok[b * T + t] = prompts[b * prompt_len + t];
        pidx[b * T + t] = (int32_t)t;
      }
    }
    if (st == RG_OK) {
      int64_t bt[2] = {B, T};
      rg_tensor tk = rg_input(ctx, RG_I32, 2, bt, tok), pi = rg_input(ctx, RG_I32, 2, bt, pidx);
      rg_tensor p0 = rg_input(ctx, RG_I32, 1, &B, pos), ctr = rg_input(ctx, RG_I32, 1, &B, ids);
      st = step(&g, tk, pi, p0, ctr, T, ids);
    }
    free(pidx);
  }
  /* decode: feed position q - 1, draw position q */
  int64_t q = shortest;
  while (st == RG_OK && take(q, ids, len, B, max_new, sc->stop, done, out) > 0) {
    for (int64_t b = 0; b < B; b++) {
      tok[b] = q < len[b] ? prompts[b * prompt_len + q] : ids[b];
      pos[b] = (int32_t)q;
    }
    st = rg_step_begin(ctx);
    if (st != RG_OK) break;
    int64_t b1[2] = {B, 1};
    rg_tensor tk = rg_input(ctx, RG_I32, 2, b1, tok), p = rg_input(ctx, RG_I32, 1, &B, pos);
    st = step(&g, tk, rg_reshape(ctx, p, 2, b1), p, p, 1, ids);
    q++;
  }
  if (st != RG_OK)
    for (int64_t e = 0; e < B * max_new; e++) out[e] = -1;
  for (int64_t i = 0; i < 2 * L; i++)
    if (g.kv[i].id) rg_state_free(ctx, g.kv[i]);
  free(len), free(buf), free(done), free(g.kv);
  return st;
}
