/*
 * nn.c - layers (linear, embedding, layernorm, MLP, causal self-attention, GPT-2 block)
 * built only on the public API of resgrad.h.
 *
 * Invariants: this file includes no internal header and touches no library state except
 * through public calls, so a layer behaves exactly as the ops it records; parameters are
 * made in the documented order (checkpoints and seeded init depend on it); every forward
 * function passes RG_NONE through (the op it feeds keeps the first error).
 */
#include "nn_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Misuse found here is reported in one of two ways. Where the misuse makes a real
   operation fail (a slice past wpe's rows, an embedding of F32 ids), the explanation is
   pushed as a label and that operation is recorded under it, so the core's reason is the
   true one and the message reads "<call> [<labels>/<explanation>]: <reason>". Otherwise
   rg__nn_misuse raises RG_ERR_MISUSE with the explanation itself (rg_raise). */
static void push_why(rg_ctx *ctx, const char *fmt, va_list ap) {
  char msg[400];
  vsnprintf(msg, sizeof msg, fmt, ap);
  rg_label_push(ctx, msg);
}

void rg__nn_push_why(rg_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  push_why(ctx, fmt, ap);
  va_end(ap);
}

void rg__nn_misuse(rg_ctx *ctx, const char *fmt, ...) {
  if (!ctx || rg_error(ctx) != RG_OK) return; /* sticky: the first error stands */
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rg_raise(ctx, RG_ERR_MISUSE, "%s", msg);
}

rg_status rg__nn_status(rg_ctx *ctx) {
  rg_status st = rg_error(ctx);
  return st != RG_OK ? st : RG_ERR_MISUSE;
}

/* "<name>.<leaf>", or "<leaf>" for an empty name. malloc'd: names have no length limit. */
char *rg__nn_join(const char *name, const char *leaf) {
  size_t n = name ? strlen(name) : 0, m = strlen(leaf);
  char *s = malloc(n + m + 2);
  if (!s) return NULL;
  if (n) {
    memcpy(s, name, n);
    s[n++] = '.';
  }
  memcpy(s + n, leaf, m + 1);
  return s;
}

/* rg_param named "<name>.<leaf>"; RG_NONE with the sticky error set on failure. */
static rg_tensor param(rg_ctx *ctx, const char *name, const char *leaf, int ndim,
                       const int64_t *dims, rg_init init) {
  char *full = rg__nn_join(name, leaf);
  if (!full) {
    rg__nn_misuse(ctx, "%s: out of host memory for the parameter's name", leaf);
    return RG_NONE;
  }
  rg_tensor t = rg_param(ctx, full, RG_F32, ndim, dims, init);
  free(full);
  return t;
}

static rg_init normal_or_zeros(float std) {
  return std > 0 ? (rg_init){RG_INIT_NORMAL, std, 0} : (rg_init){RG_INIT_ZEROS, 0, 0};
}

static int bad_dropout(float p) { return !(p >= 0 && p < 1); } /* NaN is bad too */

static rg_tensor maybe_dropout(rg_ctx *ctx, rg_tensor x, float p) {
  return p > 0 ? rg_dropout(ctx, x, p) : x;
}

/* ---- linear -------------------------------------------------------------------------- */

rg_status rg_nn_linear_init(rg_ctx *ctx, rg_nn_linear *l, const char *name, int64_t in,
                            int64_t out, int bias, float std) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!l || in <= 0 || out <= 0) {
    rg__nn_misuse(ctx, "rg_nn_linear_init(%s): %s", name ? name : "",
                  !l ? "l is NULL; pass the address of an rg_nn_linear"
                     : "in and out must be positive");
    return rg__nn_status(ctx);
  }
  *l = (rg_nn_linear){RG_NONE, RG_NONE};
  rg_init wi = normal_or_zeros(std), bi = {RG_INIT_ZEROS, 0, 0};
  if (std < 0) { /* torch.nn.Linear's kaiming_uniform(a = sqrt 5) is U(+-1/sqrt(in)) */
    float k = 1.0f / sqrtf((float)in);
    wi = bi = (rg_init){RG_INIT_UNIFORM, -k, k};
  }
  l->w = param(ctx, name, "weight", 2, (const int64_t[]){out, in}, wi);
  if (!l->w.id) return rg__nn_status(ctx);
  if (bias) {
    l->b = param(ctx, name, "bias", 1, (const int64_t[]){out}, bi);
    if (!l->b.id) return rg__nn_status(ctx);
  }
  return RG_OK;
}

rg_tensor rg_nn_linear_forward(rg_ctx *ctx, const rg_nn_linear *l, rg_tensor x) {
  if (!l) {
    rg__nn_misuse(ctx, "rg_nn_linear_forward: l is NULL");
    return RG_NONE;
  }
  return rg_linear(ctx, x, l->w, l->b);
}

/* ---- embedding ----------------------------------------------------------------------- */

rg_status rg_nn_embedding_init(rg_ctx *ctx, rg_nn_embedding *e, const char *name, int64_t num,
                               int64_t dim, float std) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!e || num <= 0 || dim <= 0) {
    rg__nn_misuse(ctx, "rg_nn_embedding_init(%s): %s", name ? name : "",
                  !e ? "e is NULL; pass the address of an rg_nn_embedding"
                     : "num and dim must be positive");
    return rg__nn_status(ctx);
  }
  e->w = param(ctx, name, "weight", 2, (const int64_t[]){num, dim}, normal_or_zeros(std));
  return e->w.id ? RG_OK : rg__nn_status(ctx);
}

rg_tensor rg_nn_embedding_forward(rg_ctx *ctx, const rg_nn_embedding *e, rg_tensor idx) {
  if (!e) {
    rg__nn_misuse(ctx, "rg_nn_embedding_forward: e is NULL");
    return RG_NONE;
  }
  return rg_embedding(ctx, e->w, idx);
}

/* ---- layernorm ----------------------------------------------------------------------- */

rg_status rg_nn_layernorm_init(rg_ctx *ctx, rg_nn_layernorm *n, const char *name, int64_t dim,
                               float eps) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!n || dim <= 0) {
    rg__nn_misuse(ctx, "rg_nn_layernorm_init(%s): %s", name ? name : "",
                  !n ? "n is NULL; pass the address of an rg_nn_layernorm"
                     : "dim must be positive");
    return rg__nn_status(ctx);
  }
  *n = (rg_nn_layernorm){RG_NONE, RG_NONE, eps > 0 ? eps : 1e-5f};
  n->w = param(ctx, name, "weight", 1, (const int64_t[]){dim}, (rg_init){RG_INIT_ONES, 0, 0});
  if (!n->w.id) return rg__nn_status(ctx);
  n->b = param(ctx, name, "bias", 1, (const int64_t[]){dim}, (rg_init){RG_INIT_ZEROS, 0, 0});
  return n->b.id ? RG_OK : rg__nn_status(ctx);
}

rg_tensor rg_nn_layernorm_forward(rg_ctx *ctx, const rg_nn_layernorm *n, rg_tensor x) {
  if (!n) {
    rg__nn_misuse(ctx, "rg_nn_layernorm_forward: n is NULL");
    return RG_NONE;
  }
  return rg_layernorm(ctx, x, n->w, n->b, n->eps);
}

/* ---- MLP ----------------------------------------------------------------------------- */

rg_status rg_nn_mlp_init(rg_ctx *ctx, rg_nn_mlp *m, const char *name, int64_t width,
                         int64_t hidden, float std, float proj_std, float dropout) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!m || bad_dropout(dropout)) {
    rg__nn_misuse(ctx, "rg_nn_mlp_init(%s): %s", name ? name : "",
                  !m ? "m is NULL; pass the address of an rg_nn_mlp"
                     : "dropout must be in [0, 1)");
    return rg__nn_status(ctx);
  }
  m->dropout = dropout;
  char *fc = rg__nn_join(name, "c_fc"), *proj = rg__nn_join(name, "c_proj");
  rg_status st = fc && proj ? RG_OK : RG_ERR_OOM;
  if (st == RG_OK) st = rg_nn_linear_init(ctx, &m->c_fc, fc, width, hidden, 1, std);
  if (st == RG_OK) st = rg_nn_linear_init(ctx, &m->c_proj, proj, hidden, width, 1, proj_std);
  free(fc);
  free(proj);
  return st;
}

rg_tensor rg_nn_mlp_forward(rg_ctx *ctx, const rg_nn_mlp *m, rg_tensor x) {
  if (!m) {
    rg__nn_misuse(ctx, "rg_nn_mlp_forward: m is NULL");
    return RG_NONE;
  }
  rg_tensor h = rg_linear_act(ctx, x, m->c_fc.w, m->c_fc.b, RG_ACT_GELU);
  return maybe_dropout(ctx, rg_nn_linear_forward(ctx, &m->c_proj, h), m->dropout);
}

/* ---- causal self-attention ----------------------------------------------------------- */

rg_status rg_nn_attention_init(rg_ctx *ctx, rg_nn_attention *a, const char *name,
                               int64_t width, int64_t heads, float std, float proj_std,
                               float dropout) {
  if (!ctx) return RG_ERR_MISUSE;
  const char *why = !a                                ? "a is NULL; pass an rg_nn_attention"
                    : heads <= 0 || width <= 0        ? "width and heads must be positive"
                    : width % heads                   ? "width must be a multiple of heads"
                    : bad_dropout(dropout)            ? "dropout must be in [0, 1)"
                                                      : NULL;
  if (why) {
    rg__nn_misuse(ctx, "rg_nn_attention_init(%s): %s (width %lld, heads %lld)",
                  name ? name : "", why, (long long)width, (long long)heads);
    return rg__nn_status(ctx);
  }
  a->heads = heads;
  a->dropout = dropout;
  char *qkv = rg__nn_join(name, "c_attn"), *proj = rg__nn_join(name, "c_proj");
  rg_status st = qkv && proj ? RG_OK : RG_ERR_OOM;
  if (st == RG_OK) st = rg_nn_linear_init(ctx, &a->c_attn, qkv, width, 3 * width, 1, std);
  if (st == RG_OK) st = rg_nn_linear_init(ctx, &a->c_proj, proj, width, width, 1, proj_std);
  free(qkv);
  free(proj);
  return st;
}

/* The fused projection [B,T,3C] goes to rg_attention_qkv as it is: the op reads each
   head's q, k, v as D-column strips of it and writes head h of the result at columns
   h*D of [B,T,C], the layout c_proj takes. Splitting the heads out with reshape,
   transpose and slices instead costs a permute and three slices forward and their
   gradients backward, copies of the whole activation that the fused op never makes. */
rg_tensor rg_nn_attention_forward(rg_ctx *ctx, const rg_nn_attention *a, rg_tensor x) {
  if (!a) {
    rg__nn_misuse(ctx, "rg_nn_attention_forward: a is NULL");
    return RG_NONE;
  }
  if (rg_ndim(ctx, x) != 3) { /* a bad handle: rg_ndim has set the error */
    if (rg_is_live(ctx, x))
      rg__nn_misuse(ctx,
                    "rg_nn_attention_forward: x has %d axes; pass [B, T, width] (reshape "
                    "a single sequence [T, width] to [1, T, width])",
                    rg_ndim(ctx, x));
    return RG_NONE;
  }
  int64_t C = rg_dim(ctx, x, 2), H = a->heads;
  if (H <= 0 || C % H) {
    rg__nn_misuse(ctx,
                  "rg_nn_attention_forward: width %lld of x is not a multiple of heads "
                  "%lld; x's last axis must equal the layer's width",
                  (long long)C, (long long)H);
    return RG_NONE;
  }
  rg_tensor y = rg_attention_qkv(ctx, rg_nn_linear_forward(ctx, &a->c_attn, x), H, 1);
  return maybe_dropout(ctx, rg_nn_linear_forward(ctx, &a->c_proj, y), a->dropout);
}

/* ---- transformer block --------------------------------------------------------------- */

rg_status rg_nn_block_init(rg_ctx *ctx, rg_nn_block *b, const char *name, int64_t width,
                           int64_t heads, float std, float proj_std, float dropout) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!b) {
    rg__nn_misuse(ctx, "rg_nn_block_init(%s): b is NULL; pass an rg_nn_block",
                  name ? name : "");
    return rg__nn_status(ctx);
  }
  static const char *const part[4] = {"ln_1", "attn", "ln_2", "mlp"};
  char *nm[4];
  rg_status st = RG_OK;
  for (int i = 0; i < 4; i++)
    if (!(nm[i] = rg__nn_join(name, part[i]))) st = RG_ERR_OOM;
  if (st == RG_OK) st = rg_nn_layernorm_init(ctx, &b->ln_1, nm[0], width, 0);
  if (st == RG_OK)
    st = rg_nn_attention_init(ctx, &b->attn, nm[1], width, heads, std, proj_std, dropout);
  if (st == RG_OK) st = rg_nn_layernorm_init(ctx, &b->ln_2, nm[2], width, 0);
  if (st == RG_OK)
    st = rg_nn_mlp_init(ctx, &b->mlp, nm[3], width, 4 * width, std, proj_std, dropout);
  for (int i = 0; i < 4; i++) free(nm[i]);
  return st;
}

rg_tensor rg_nn_block_forward(rg_ctx *ctx, const rg_nn_block *b, rg_tensor x) {
  if (!b) {
    rg__nn_misuse(ctx, "rg_nn_block_forward: b is NULL");
    return RG_NONE;
  }
  rg_label_push(ctx, "attn");
  rg_tensor h = rg_nn_layernorm_forward(ctx, &b->ln_1, x);
  x = rg_add(ctx, x, rg_nn_attention_forward(ctx, &b->attn, h));
  rg_label_pop(ctx);
  rg_label_push(ctx, "mlp");
  h = rg_nn_layernorm_forward(ctx, &b->ln_2, x);
  x = rg_add(ctx, x, rg_nn_mlp_forward(ctx, &b->mlp, h));
  rg_label_pop(ctx);
  return x;
}
