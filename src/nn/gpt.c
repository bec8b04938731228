/*
 * gpt.c - a GPT-2 model (token + position embeddings, pre-norm blocks, tied head) on the
 * public API, mirroring in structure and initialisation the GPT of the PyTorch reference
 * workloads (torch_ref.py, which bench/compare.py takes with --torch-ref).
 *
 * Invariants: parameters are made in GPT-2's state-dict order (wte, wpe, h.0..h.L-1,
 * ln_f) so one seed gives one model; the struct holds handles only (the context owns the
 * parameters), so freeing it never touches the device; the struct, its blocks, its
 * prefix and its label are one malloc block.
 */
#include "nn_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rg_gpt {
  rg_ctx *ctx;
  rg_gpt_config cfg;
  const char *prefix; /* as given ("" for NULL); inside this block */
  const char *label;  /* prefix without its trailing '.', "" for none; inside this block */
  rg_nn_embedding wte, wpe;
  rg_nn_layernorm ln_f;
  rg_nn_block h[];   /* cfg.layers */
};

/* malloc'd prefix + formatted name (prefix verbatim, as the header promises). */
static char *pname(const char *prefix, const char *fmt, ...) {
  char leaf[64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(leaf, sizeof leaf, fmt, ap);
  va_end(ap);
  size_t n = strlen(prefix), m = strlen(leaf);
  char *s = malloc(n + m + 1);
  if (s) {
    memcpy(s, prefix, n);
    memcpy(s + n, leaf, m + 1);
  }
  return s;
}

static const char *bad_config(const rg_gpt_config *c) {
  if (!c) return "cfg is NULL";
  if (c->vocab <= 0 || c->vocab > INT32_MAX)
    return "vocab must be in [1, 2^31) (token ids are I32)";
  if (c->block <= 0) return "block (the longest sequence) must be positive";
  if (c->layers < 0) return "layers must be >= 0";
  if (c->width <= 0 || c->heads <= 0) return "width and heads must be positive";
  if (c->width % c->heads)
    return "width must be a multiple of heads (head size = width/heads)";
  if (!(c->dropout >= 0 && c->dropout < 1)) return "dropout must be in [0, 1)";
  return NULL;
}

static rg_status make_params(rg_gpt *g, const char *prefix) {
  rg_ctx *ctx = g->ctx;
  const rg_gpt_config *c = &g->cfg;
  /* GPT-2: each residual projection adds to a stream that sums 2L of them, so its std is
     scaled by 1/sqrt(2L) to keep the stream's variance independent of depth. */
  const float std = 0.02f, proj_std = c->layers ? 0.02f / sqrtf(2.0f * (float)c->layers) : 0;
  rg_status st = RG_OK;
  char *nm = pname(prefix, "wte");
  st = nm ? rg_nn_embedding_init(ctx, &g->wte, nm, c->vocab, c->width, std) : RG_ERR_OOM;
  free(nm);
  if (st == RG_OK) {
    nm = pname(prefix, "wpe");
    st = nm ? rg_nn_embedding_init(ctx, &g->wpe, nm, c->block, c->width, std) : RG_ERR_OOM;
    free(nm);
  }
  for (int64_t i = 0; st == RG_OK && i < c->layers; i++) {
    nm = pname(prefix, "h.%lld", (long long)i);
    st = nm ? rg_nn_block_init(ctx, &g->h[i], nm, c->width, c->heads, std, proj_std,
                               c->dropout)
            : RG_ERR_OOM;
    free(nm);
  }
  if (st == RG_OK) {
    nm = pname(prefix, "ln_f");
    st = nm ? rg_nn_layernorm_init(ctx, &g->ln_f, nm, c->width, 0) : RG_ERR_OOM;
    free(nm);
  }
  if (st == RG_ERR_OOM && rg_error(ctx) == RG_OK)
    rg__nn_misuse(ctx, "rg_gpt_new: out of host memory for parameter names");
  return st;
}

rg_gpt *rg_gpt_new(rg_ctx *ctx, const rg_gpt_config *cfg, const char *prefix) {
  if (!ctx) return NULL;
  const char *why = bad_config(cfg);
  if (why) {
    if (cfg)
      rg__nn_misuse(ctx,
                    "rg_gpt_new: %s (vocab %lld, block %lld, layers %lld, width %lld, "
                    "heads %lld, dropout %g)",
                    why, (long long)cfg->vocab, (long long)cfg->block, (long long)cfg->layers,
                    (long long)cfg->width, (long long)cfg->heads, (double)cfg->dropout);
    else
      rg__nn_misuse(ctx, "rg_gpt_new: %s; pass the address of an rg_gpt_config", why);
    return NULL;
  }
  if (!prefix) prefix = "";
  size_t plen = strlen(prefix);
  size_t head = sizeof(rg_gpt) + (size_t)cfg->layers * sizeof(rg_nn_block);
  rg_gpt *g = calloc(1, head + 2 * (plen + 1));
  if (!g) {
    rg__nn_misuse(ctx, "rg_gpt_new: out of host memory for the model struct (%zu bytes)",
                  head + 2 * (plen + 1));
    return NULL;
  }
  g->ctx = ctx;
  g->cfg = *cfg;
  char *label = (char *)g + head;
  memcpy(label + plen + 1, prefix, plen + 1);
  g->prefix = label + plen + 1;
  memcpy(label, prefix, plen + 1);
  if (plen && label[plen - 1] == '.') label[plen - 1] = 0;
  g->label = label;
  if (make_params(g, prefix) != RG_OK) {
    free(g);
    return NULL;
  }
  return g;
}

static void push(rg_gpt *g) {
  if (*g->label) rg_label_push(g->ctx, g->label);
}
static void pop(rg_gpt *g) {
  if (*g->label) rg_label_pop(g->ctx);
}

/* Checks idx is I32 [B, T] with T <= block; sets the error and returns 0 if not. */
static int check_idx(rg_gpt *g, rg_tensor idx) {
  rg_ctx *ctx = g->ctx;
  int nd = rg_ndim(ctx, idx);
  if (!rg_is_live(ctx, idx)) return 0; /* rg_ndim has set the error (or kept the first) */
  if (nd != 2) {
    rg__nn_misuse(ctx, "rg_gpt_forward: idx has %d axes; pass token ids as I32 [B, T] "
                       "(reshape one sequence [T] to [1, T])", nd);
    return 0;
  }
  if (rg_dtype_of(ctx, idx) != RG_I32) { /* rg_embedding fails on it: say what to do */
    rg__nn_push_why(ctx, "rg_gpt_forward: idx must hold I32 token ids; make it with "
                         "rg_input(ctx, RG_I32, ...) or rg_cast(ctx, x, RG_I32)");
    (void)rg_embedding(ctx, g->wte.w, idx);
    rg_label_pop(ctx);
    if (rg_error(ctx) == RG_OK) rg__nn_misuse(ctx, "rg_gpt_forward: idx must be I32");
    return 0;
  }
  int64_t B = rg_dim(ctx, idx, 0), T = rg_dim(ctx, idx, 1), blk = g->cfg.block;
  if (T < 1 || B < 1) {
    rg__nn_misuse(ctx, "rg_gpt_forward: idx is [%lld, %lld]; pass at least one sequence "
                       "of at least one token", (long long)B, (long long)T);
    return 0;
  }
  if (T > blk) { /* the slice of wpe's first T rows fails: say what to do */
    rg__nn_push_why(ctx,
                    "rg_gpt_forward: idx is [%lld, %lld] but the model's block size is "
                    "%lld; pass at most %lld positions (crop each sequence to its last "
                    "%lld tokens) or make the model with block >= %lld",
                    (long long)B, (long long)T, (long long)blk, (long long)blk,
                    (long long)blk, (long long)T);
    (void)rg_slice(ctx, g->wpe.w, 0, 0, T);
    rg_label_pop(ctx);
    if (rg_error(ctx) == RG_OK) rg__nn_misuse(ctx, "rg_gpt_forward: T > block");
    return 0;
  }
  return 1;
}

/* Embeddings and blocks: the residual stream [B, T, C] that ln_f reads. Each block is a
   checkpoint region when cfg.checkpoint. */
static rg_tensor trunk(rg_gpt *g, rg_tensor idx) {
  rg_ctx *ctx = g->ctx;
  int64_t T = rg_dim(ctx, idx, 1);
  rg_label_push(ctx, "wte");
  rg_tensor x = rg_add(ctx, rg_nn_embedding_forward(ctx, &g->wte, idx),
                       rg_slice(ctx, g->wpe.w, 0, 0, T)); /* [B,T,C] + [T,C] */
  if (g->cfg.dropout > 0) x = rg_dropout(ctx, x, g->cfg.dropout);
  rg_label_pop(ctx);
  for (int64_t i = 0; i < g->cfg.layers; i++) {
    char lab[32];
    snprintf(lab, sizeof lab, "h.%lld", (long long)i);
    rg_label_push(ctx, lab);
    int region = g->cfg.checkpoint && rg_checkpoint_begin(ctx) == RG_OK;
    x = rg_nn_block_forward(ctx, &g->h[i], x);
    if (region) rg_checkpoint_end(ctx, x); /* RG_NONE after an error: closed all the same */
    rg_label_pop(ctx);
  }
  return x;
}

/* ln_f of idx's residual stream, under the model's label (pushed by the caller);
   RG_NONE with the error set for a bad idx. */
static rg_tensor normed(rg_gpt *g, rg_tensor idx) {
  if (!check_idx(g, idx)) return RG_NONE;
  rg_tensor x = trunk(g, idx);
  rg_label_push(g->ctx, "head");
  x = rg_nn_layernorm_forward(g->ctx, &g->ln_f, x);
  rg_label_pop(g->ctx);
  return x;
}

/* The logits of h (ln_f's output, any leading axes). */
static rg_tensor logits_of(rg_gpt *g, rg_tensor h) {
  rg_label_push(g->ctx, "head");
  h = rg_linear(g->ctx, h, g->wte.w, RG_NONE); /* the head is tied to wte */
  rg_label_pop(g->ctx);
  return h;
}

rg_tensor rg_gpt_forward(rg_gpt *g, rg_tensor idx) {
  if (!g) return RG_NONE;
  push(g);
  rg_tensor x = normed(g, idx);
  if (x.id) x = logits_of(g, x);
  pop(g);
  return x;
}

/* ---- the loss: the head in row chunks --------------------------------------------------
   The logits are the largest tensors of a step at a GPT-2 vocabulary (B T V of them), so
   the loss computes the head (the tied linear, then the cross-entropy) on chunks of rows
   when they would exceed a limit (rg_gpt_config.head_chunk): K chunks, K the least power
   of two that brings a chunk's logits under it, ceil(N/K) rows each but the last. The
   chunking depends on the shapes and the config only, never on cfg.checkpoint, so a model
   computes the same graph with and without regions and its gradients are the same bit for
   bit. With cfg.checkpoint each chunk (its slice of ln_f's output, its logits, its loss)
   is a region: its logits go back to the pass pool at once and rg_backward recomputes
   them chunk by chunk, so no more than one chunk's logits and their gradient are held.
   Without regions the logits of every chunk live until the backward, as unchunked ones
   would, but each chunk's gradient is made and used up in turn.
   The loss is the mean over the rows that take part, as one cross-entropy's but for
   float rounding: chunk c's mean (over n_c rows) is weighted n_c / N. With an ignore
   index the counts are on the device: chunk c's count of targets other than the index,
   taken from the targets as floats (exact, so the index and the vocabulary are below 2^24
   for the head to be chunked), weights its mean, and the sum is divided by the total
   count (at least 1: no row taking part gives 0, as rg_cross_entropy_ignore does). A
   chunk that fails makes the sum RG_NONE: no chunk is left out of a loss returned. */
#define HEAD_CHUNK_DEFAULT ((int64_t)1 << 26)
#define EXACT_F32 ((int64_t)1 << 24)

/* Rows of a chunk of the loss's head: N for one chunk (see above). */
static int64_t chunk_rows(const rg_gpt_config *c, int64_t N, int ignore, int index) {
  int64_t limit = c->head_chunk ? c->head_chunk : HEAD_CHUNK_DEFAULT;
  if (limit < 0 || (ignore && (c->vocab > EXACT_F32 || index <= -EXACT_F32 ||
                               index >= EXACT_F32)))
    return N;
  int64_t k = 1, per = N;
  while (per > 1 && per > limit / c->vocab) k *= 2, per = (N + k - 1) / k;
  return per;
}

/* Count of targets t (F32 [n], whole numbers below 2^24) other than index: clamp(t, i,
   i+1) - clamp(t, i-1, i) is 1 for t < i and t > i, 0 for t == i. */
static rg_tensor counted(rg_ctx *ctx, rg_tensor t, int index) {
  float i = (float)index;
  rg_tensor one = rg_sub(ctx, rg_clamp(ctx, t, i, i + 1), rg_clamp(ctx, t, i - 1, i));
  return rg_sum(ctx, one, RG_ALL_AXES, 0);
}

/* The mean cross-entropy of h's logits (h: ln_f's output [B, T, C]) in chunks of per rows
   (see above). */
static rg_tensor chunked_loss(rg_gpt *g, rg_tensor h, rg_tensor targets, int ignore,
                              int index, int64_t per) {
  rg_ctx *ctx = g->ctx;
  int64_t N = rg_numel(ctx, targets), C = g->cfg.width;
  rg_label_push(ctx, "head");
  rg_tensor x = rg_reshape(ctx, h, 2, (int64_t[]){N, C});
  rg_tensor t = rg_reshape(ctx, targets, 1, &N);
  rg_label_pop(ctx);
  rg_tensor sum = RG_NONE, count = RG_NONE;
  for (int64_t r = 0; r < N; r += per) {
    int64_t n = N - r < per ? N - r : per;
    rg_label_push(ctx, "head");
    rg_tensor tc = rg_slice(ctx, t, 0, r, n); /* outside the region: the counts read it */
    int region = g->cfg.checkpoint && rg_checkpoint_begin(ctx) == RG_OK;
    rg_tensor xc = rg_slice(ctx, x, 0, r, n);
    rg_label_pop(ctx);
    rg_tensor logits = logits_of(g, xc);
    rg_label_push(ctx, "loss");
    rg_tensor l = ignore ? rg_cross_entropy_ignore(ctx, logits, tc, index)
                         : rg_cross_entropy(ctx, logits, tc);
    if (region) rg_checkpoint_end(ctx, l);
    if (ignore) {
      rg_tensor nc = counted(ctx, rg_cast(ctx, tc, RG_F32), index);
      l = rg_mul(ctx, l, nc);
      count = r ? rg_add(ctx, count, nc) : nc;
    } else {
      l = rg_scale(ctx, l, (float)((double)n / (double)N));
    }
    sum = r ? rg_add(ctx, sum, l) : l;
    rg_label_pop(ctx);
  }
  if (!ignore) return sum;
  rg_label_push(ctx, "loss");
  sum = rg_div(ctx, sum, rg_clamp(ctx, count, 1, (float)N));
  rg_label_pop(ctx);
  return sum;
}

/* Are a and b live with the same shape? (Never sets the error.) */
static int same_dims(rg_ctx *ctx, rg_tensor a, rg_tensor b) {
  if (!rg_is_live(ctx, a) || !rg_is_live(ctx, b) || rg_ndim(ctx, a) != rg_ndim(ctx, b))
    return 0;
  for (int i = 0; i < rg_ndim(ctx, a); i++)
    if (rg_dim(ctx, a, i) != rg_dim(ctx, b, i)) return 0;
  return 1;
}

static rg_tensor loss(rg_gpt *g, rg_tensor idx, rg_tensor targets, int ignore, int index) {
  if (!g) return RG_NONE;
  rg_ctx *ctx = g->ctx;
  push(g);
  rg_tensor x = normed(g, idx), l = RG_NONE;
  int64_t N = x.id ? rg_numel(ctx, idx) : 0, per = chunk_rows(&g->cfg, N, ignore, index);
  if (x.id && per < N && same_dims(ctx, targets, idx)) {
    l = chunked_loss(g, x, targets, ignore, index, per);
  } else if (x.id) { /* one chunk (or targets of the wrong shape: the cross-entropy says so) */
    x = logits_of(g, x);
    rg_label_push(ctx, "loss");
    l = ignore ? rg_cross_entropy_ignore(ctx, x, targets, index)
               : rg_cross_entropy(ctx, x, targets);
    rg_label_pop(ctx);
  }
  pop(g);
  return l;
}

rg_tensor rg_gpt_loss(rg_gpt *g, rg_tensor idx, rg_tensor targets) {
  return loss(g, idx, targets, 0, 0);
}

rg_tensor rg_gpt_loss_ignore(rg_gpt *g, rg_tensor idx, rg_tensor targets, int ignore_index) {
  return loss(g, idx, targets, 1, ignore_index);
}

static int64_t numel2(rg_ctx *ctx, rg_tensor a, rg_tensor b) {
  return rg_numel(ctx, a) + (b.id ? rg_numel(ctx, b) : 0);
}

int64_t rg_gpt_param_count(const rg_gpt *g) {
  if (!g) return -1;
  rg_ctx *ctx = g->ctx;
  int64_t n = rg_numel(ctx, g->wte.w) + rg_numel(ctx, g->wpe.w);
  for (int64_t i = 0; i < g->cfg.layers; i++) {
    const rg_nn_block *b = &g->h[i];
    n += numel2(ctx, b->ln_1.w, b->ln_1.b) + numel2(ctx, b->ln_2.w, b->ln_2.b);
    n += numel2(ctx, b->attn.c_attn.w, b->attn.c_attn.b);
    n += numel2(ctx, b->attn.c_proj.w, b->attn.c_proj.b);
    n += numel2(ctx, b->mlp.c_fc.w, b->mlp.c_fc.b);
    n += numel2(ctx, b->mlp.c_proj.w, b->mlp.c_proj.b);
  }
  return n + numel2(ctx, g->ln_f.w, g->ln_f.b);
}

const rg_gpt_config *rg_gpt_config_of(const rg_gpt *g) { return g ? &g->cfg : NULL; }

rg_ctx *rg__gpt_ctx(const rg_gpt *g) { return g->ctx; }

const char *rg__gpt_prefix(const rg_gpt *g) { return g->prefix; }

rg_gpt_parts rg__gpt_parts(const rg_gpt *g) {
  rg_gpt_parts p = {&g->wte, &g->wpe, &g->ln_f, g->h, g->label};
  return p;
}

void rg_gpt_free(rg_gpt *g) { free(g); }
