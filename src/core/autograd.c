/*
 * autograd.c - rg_backward: walks the tape (the current pass's nodes marked RG_N_GRAD)
 * backwards and records gradient nodes through the same op table, so the backward pass
 * is deferred, captured and replayed like the forward.
 *
 * Invariants: gradient nodes are recorded with ctx->no_grad set (no higher-order tape);
 * the gradient of a broadcast operand is summed back to its shape (SUM_TO); parameter
 * gradients accumulate in place into their persistent buffers (ACCUM), pass tensors keep
 * theirs in rg_tinfo.grad while the walk needs them. With more than one rank
 * (rg_dist_init), the walk also records the averaging of the parameter gradients in
 * buckets as they complete (dist.c: three calls, plan, reached and flush).
 *
 * Memory: a gradient is dead once the rule of the node that produced its tensor has run
 * (every consumer of a tensor was recorded after it, so the reverse walk has seen them
 * all), and a temporary a rule makes is dead once the rule's results are accumulated.
 * Tensors this rg_backward made are given back to the pass pool (rg__release) as soon
 * as they are dead - gref counts the tensors holding one as their gradient, since a rule
 * may pass its incoming gradient through unchanged to several inputs - so the later
 * gradients reuse their bytes, and the backward pass needs memory for a few layers'
 * gradients, not for all of them. rg_retain_grad keeps a tensor's gradient for rg_grad.
 *
 * Checkpoint regions (recompute.c): before the first rule that reads a tensor a region
 * gave back, the walk records the region's recomputation (rg__region_reached); the rules
 * still name the original tensors, so every decision above reads the tape as it is
 * without regions, and the nodes recorded meanwhile read the recomputed tensors.
 */
#include "internal.h"

#include <string.h>

/* ---- small recording helpers on refs ------------------------------------------------ */

static uint32_t op1(rg_ctx *ctx, rg_op op, uint32_t a, uint32_t b, uint32_t c, rg_shape s,
                    const int64_t *iv, const float *fv) {
  uint32_t in[RG_MAX_IN] = {a, b, c, 0}, out[RG_MAX_OUT] = {0};
  rg_shape outs[RG_MAX_OUT] = {s, {0, -1, {0}}, {0, -1, {0}}};
  return rg__emit(ctx, op, in, outs, iv, fv, NULL, out) == RG_OK ? out[0] : 0;
}

static uint32_t ref_of(rg_tensor t) {
  if (!t.id) return 0;
  uint64_t slot = t.id & 0xffffffffu;
  return (uint32_t)(t.id >> 63) << 31 | (uint32_t)slot;
}
/* Public ops on refs: the operands are live by construction. */
#define H(r) rg__handle(ctx, r)
#define R(t) ref_of(t)

static bool same_shape(rg_shape a, rg_shape b) {
  return a.ndim == b.ndim && !memcmp(a.dims, b.dims, sizeof(int64_t) * (size_t)a.ndim);
}

/* The helpers below pass a failed (0) operand through as 0, so a rule that fails part-way
   records nothing on an absent input (its error is already set).
   g summed down to shape s (the gradient of an operand that was broadcast). */
static uint32_t sum_to(rg_ctx *ctx, uint32_t g, rg_shape s) {
  if (!g || same_shape(rg__shape(ctx, g), s)) return g;
  s.dtype = RG_F32;
  return op1(ctx, RG_OP_SUM_TO, g, 0, 0, s, NULL, NULL);
}

static uint32_t expand(rg_ctx *ctx, uint32_t g, rg_shape s) {
  if (!g || same_shape(rg__shape(ctx, g), s)) return g;
  s.dtype = RG_F32;
  return op1(ctx, RG_OP_EXPAND, g, 0, 0, s, NULL, NULL);
}

static uint32_t reshape(rg_ctx *ctx, uint32_t g, rg_shape s) {
  if (!g || same_shape(rg__shape(ctx, g), s)) return g;
  s.dtype = rg__shape(ctx, g).dtype;
  return rg__reshape(ctx, g, s);
}

/* [..., K] viewed as [rows, K]. */
static uint32_t rows2(rg_ctx *ctx, uint32_t x) {
  rg_shape s = rg__shape(ctx, x), o = {s.dtype, 2, {1, s.dims[s.ndim - 1]}};
  for (int i = 0; i < s.ndim - 1; i++) o.dims[0] *= s.dims[i];
  return reshape(ctx, x, o);
}

static uint32_t matmul_t(rg_ctx *ctx, uint32_t a, uint32_t b, int ta, int tb, rg_shape o) {
  if (!a || !b) return 0;
  int64_t iv[4] = {ta, tb, 0, 0};
  o.dtype = RG_F32;
  return op1(ctx, RG_OP_MATMUL, a, b, 0, o, iv, NULL);
}

/* The incoming gradient of a product as its factors' dtype: BF16 factors (then both are)
   take it rounded to BF16, as PyTorch's autocast does; the gradient products sum in F32
   and give the factors F32 gradients, which their casts from F32 pass on unchanged. */
static uint32_t as_factors(rg_ctx *ctx, uint32_t g, int dtype) {
  if (!g || dtype != RG_BF16 || rg__t(ctx, g)->dtype == RG_BF16) return g;
  return R(rg_cast(ctx, H(g), RG_BF16));
}

/* Backward of a reduction: g (reduced shape) back to x's shape. */
static uint32_t unreduce(rg_ctx *ctx, const rg_node *n, uint32_t g, rg_shape sx) {
  rg_shape k = sx;
  for (int i = 0; i < sx.ndim; i++)
    if (n->i[0] < 0 || n->i[0] == i) k.dims[i] = 1;
  return expand(ctx, reshape(ctx, g, k), sx);
}

static bool needs_grad(rg_ctx *ctx, uint32_t ref) {
  return ref && (rg__t(ctx, ref)->flags & RG_T_GRAD);
}

/* Reads node n tensor ref (as an input)? */
static bool reads(const rg_node *n, uint32_t ref) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i] == ref) return true;
  return false;
}

/* Is tensor t (made by a node of the forward) read by exactly one node of the tape? Then
   that node's rule gives t its whole gradient. */
static bool one_reader(rg_ctx *ctx, uint32_t t) {
  int readers = 0;
  for (size_t k = rg__t(ctx, t)->node; k < ctx->tape_end && readers < 2; k++)
    readers += reads(&ctx->nodes[k], t);
  return readers == 1;
}

/* The persistent gradient a linear layer's weight w may add its gradient into at once:
   w's own when w is a parameter, or its parameter's when w is autocast's BF16 cast of one
   and this layer its one reader (the cast's rule would pass the gradient on unchanged);
   else 0. */
static uint32_t weight_sink(rg_ctx *ctx, uint32_t w) {
  rg_tinfo *t = rg__t(ctx, w);
  if (t->flags & RG_T_PARAM) return t->grad;
  if (!t->node || (t->flags & RG_T_RETAIN) || t->grad) return 0;
  const rg_node *c = &ctx->nodes[t->node - 1];
  rg_tinfo *p = c->op == RG_OP_CAST ? rg__t(ctx, c->in[0]) : NULL;
  if (!p || !(p->flags & RG_T_PARAM) || p->dtype != RG_F32) return 0;
  return one_reader(ctx, w) ? p->grad : 0;
}

/* The GELU LINEAR_ACT node that made x, when x's gradient can leave the GEMM that makes
   it (a linear layer's dx, factors of dtype dt) already multiplied by GELU's derivative,
   as MATMUL_DGELU: then no [rows, in] F32 gradient is written and read again, and no
   GELU_BWD node runs (12 of GPT-2's a step). x must have one reader in the tape
   (that linear layer: its dx is x's whole gradient), no retained gradient, and the
   dtype of the factors and of GELU's input. NULL otherwise. */
static const rg_node *gelu_maker(rg_ctx *ctx, uint32_t x, int dt) {
  rg_tinfo *t = rg__t(ctx, x);
  if (!t->node || (t->flags & RG_T_RETAIN) || t->grad || t->dtype != dt) return NULL;
  const rg_node *p = &ctx->nodes[t->node - 1];
  if (p->op != RG_OP_LINEAR_ACT || p->i[0] != RG_ACT_GELU || p->out[0] != x ||
      rg__t(ctx, p->out[1])->dtype != dt)
    return NULL;
  return one_reader(ctx, x) ? p : NULL;
}

/* Was g (maybe through a reshape's view) made by the MATMUL_DGELU that read GELU input
   u? Then it is already the gradient of u (gelu_maker). */
static bool through_gelu(rg_ctx *ctx, uint32_t g, uint32_t u) {
  for (int hop = 0; hop < 2 && g; hop++) {
    rg_tinfo *t = rg__t(ctx, g);
    if (!t->node) return false;
    const rg_node *p = &ctx->nodes[t->node - 1];
    if (p->op == RG_OP_MATMUL_DGELU) /* u as the node reads it: recomputed (recompute.c) */
      return p->in[2] == (rg__t(ctx, u)->redo ? rg__t(ctx, u)->redo : u) && p->out[0] == g;
    g = p->op == RG_OP_COPY && p->out[0] == g ? p->in[0] : 0;
  }
  return false;
}

/* y = x w^T + b: dx = g w, dw = g^T x (over all rows), db = sum g; only the ones wanted
   (the first layer's dx, for one, is a whole GEMM nobody reads). When dw and db both go
   straight into their parameters' gradients and db sums the product's own factor, db
   rides in dw's node (MATMUL_ACC's in[3]: the same sum, one node). */
static void linear_rule(rg_ctx *ctx, const rg_node *n, uint32_t g, uint32_t *gin) {
  uint32_t x = n->in[0], w = n->in[1], b = n->in[2];
  if (!g) return; /* act' failed: its error is set */
  rg_shape sx = rg__shape(ctx, x), gx = sx;
  bool dx = needs_grad(ctx, x), dw = needs_grad(ctx, w);
  uint32_t g2 = rows2(ctx, g), gf = dx || dw ? as_factors(ctx, g2, sx.dtype) : 0;
  if (dx) {
    gx.ndim = 2;
    gx.dims[0] = rg__shape(ctx, g2).dims[0];
    gx.dims[1] = sx.dims[sx.ndim - 1];
    const rg_node *p = gf && rg__t(ctx, gf)->dtype == rg__t(ctx, w)->dtype
                           ? gelu_maker(ctx, x, rg__t(ctx, w)->dtype) : NULL;
    if (p) {
      gx.dtype = sx.dtype;
      int64_t iv[4] = {0, 0, 0, 0};
      gin[0] = reshape(ctx, op1(ctx, RG_OP_MATMUL_DGELU, gf, w, p->out[1], gx, iv, NULL), sx);
    } else {
      gin[0] = reshape(ctx, matmul_t(ctx, gf, w, 0, 0, gx), sx);
    }
  }
  bool db = needs_grad(ctx, b);
  if (dw) {
    uint32_t xr = rows2(ctx, x), pg = weight_sink(ctx, w);
    uint32_t pb = pg && db && gf == g2 ? weight_sink(ctx, b) : 0;
    if (pg) { /* straight into the gradient: the fold of accumulate() would leave an
                 [out, in] temporary in the peak */
      uint32_t in[RG_MAX_IN] = {pg, gf, xr, pb};
      int64_t iv[4] = {1, 0, 0, 0};
      if (gf && xr) rg__emit(ctx, RG_OP_MATMUL_ACC, in, NULL, iv, NULL, NULL, NULL);
      db &= !pb;
    } else {
      gin[1] = matmul_t(ctx, gf, xr, 1, 0, rg__shape(ctx, w));
    }
  }
  if (db) gin[2] = sum_to(ctx, g2, rg__shape(ctx, b));
}

/* ---- the rules ----------------------------------------------------------------------------- */

/* Every gradient is F32, also a BF16 tensor's (bf16 activations): the shapes below that
   size gradients say F32 whatever their tensor's dtype. */
static rg_shape grad_shape(rg_ctx *ctx, uint32_t ref) {
  rg_shape s = rg__shape(ctx, ref);
  if (ref) s.dtype = RG_F32;
  return s;
}

/* The one exception to F32 gradients, which saves a pass over memory and half the
   bytes: the gradient of a BF16 product's result (an RG_F_PRODUCT op's out[0]), which
   that product's rule rounds to BF16 for its gradient products anyway (as_factors), is
   written BF16 by the node that makes it (CROSS_ENTROPY_BWD, the attention backward
   ops, LINEAR_ACT's act'), unless rg_retain_grad asked for it. The bias gradient then
   sums the rounded values, as autocast's does; another contribution to the same
   gradient is added in F32 (rg_add widens). */
static bool bf16_grad(rg_ctx *ctx, uint32_t x) {
  rg_tinfo *t = rg__t(ctx, x);
  if (t->dtype != RG_BF16 || (t->flags & RG_T_RETAIN) || !t->node) return false;
  const rg_node *p = &ctx->nodes[t->node - 1];
  return (rg_optab[p->op].flags & RG_F_PRODUCT) && p->out[0] == x;
}
static rg_shape grad_of(rg_ctx *ctx, uint32_t x) {
  rg_shape s = grad_shape(ctx, x);
  if (x && bf16_grad(ctx, x)) s.dtype = RG_BF16;
  return s;
}

/* The bytes a tensor's data lies in (a view's: its base's). */
static void span(rg_ctx *ctx, uint32_t ref, const char **lo, const char **hi) {
  rg_tinfo *t = rg__t(ctx, ref);
  if (t->alias) t = rg__t(ctx, t->alias);
  *lo = (const char *)t->data, *hi = *lo + t->nbytes;
}

/* The first rule of a backward from a cross-entropy loss: when its forward node is the
   last one recorded and has not run, and g is the seed 1, that node computes dlogits
   too (its optional in[2] and out[2], ops.h): no CROSS_ENTROPY_BWD node, and where the
   backend can (CUDA's short rows), one pass over the logits fewer. The new tensor is
   written earlier than a node of its own would write it, but no node runs in between,
   and its bytes are not the forward's inputs' (a range the pass pool reused could be:
   then no fusion). Returns dlogits, or 0 to record the backward node. */
static uint32_t xent_fused(rg_ctx *ctx, const rg_node *n, uint32_t g) {
  if (!g || g != ctx->one || ctx->n_nodes <= ctx->q_head) return 0;
  size_t k = ctx->n_nodes - 1;
  rg_node *f = &ctx->nodes[k];
  if (f->op != RG_OP_CROSS_ENTROPY || f->out[0] != n->out[0] || f->out[2]) return 0;
  rg_shape s = grad_of(ctx, n->in[0]);
  uint32_t d = rg__new(ctx, RG_POOL_PASS, (rg_dtype)s.dtype, s.ndim, s.dims,
                       "rg_cross_entropy'");
  if (!d) return 0;
  const char *lo, *hi;
  span(ctx, d, &lo, &hi);
  for (int j = 0; j < 2; j++) {
    const char *a, *b;
    span(ctx, f->in[j], &a, &b);
    if (lo < b && a < hi) return rg__release(ctx, d), 0;
  }
  f->in[2] = g, f->out[2] = d;
  rg__t(ctx, d)->node = (uint32_t)k + 1;
  rg__t(ctx, d)->state = RG_PENDING;
  return d;
}

void rg__backward_rule(rg_ctx *ctx, const rg_node *n, const uint32_t *gout, uint32_t *gin) {
  uint32_t g = gout[0], x = n->in[0], y = n->in[1], out = n->out[0];
  rg_shape sx = grad_shape(ctx, x), sy = grad_shape(ctx, y), so = grad_shape(ctx, out);
  const float *f = n->f;
  switch ((rg_op)n->op) {
  case RG_OP_ADD: gin[0] = sum_to(ctx, g, sx); gin[1] = sum_to(ctx, g, sy); break;
  case RG_OP_SUB:
    gin[0] = sum_to(ctx, g, sx);
    gin[1] = sum_to(ctx, R(rg_neg(ctx, H(g))), sy);
    break;
  case RG_OP_MUL:
    gin[0] = sum_to(ctx, R(rg_mul(ctx, H(g), H(y))), sx);
    gin[1] = sum_to(ctx, R(rg_mul(ctx, H(g), H(x))), sy);
    break;
  case RG_OP_DIV: /* d/da = g/b, d/db = -g*out/b */
    gin[0] = sum_to(ctx, R(rg_div(ctx, H(g), H(y))), sx);
    gin[1] = sum_to(ctx, R(rg_neg(ctx, rg_div(ctx, rg_mul(ctx, H(g), H(out)), H(y)))), sy);
    break;
  case RG_OP_SCALE: gin[0] = R(rg_scale(ctx, H(g), f[0])); break;
  case RG_OP_POW:
    gin[0] = R(rg_mul(ctx, H(g), rg_scale(ctx, rg_pow(ctx, H(x), f[0] - 1), f[0])));
    break;
  case RG_OP_NEG: gin[0] = R(rg_neg(ctx, H(g))); break;
  case RG_OP_EXP: gin[0] = R(rg_mul(ctx, H(g), H(out))); break;
  case RG_OP_LOG: gin[0] = R(rg_div(ctx, H(g), H(x))); break;
  case RG_OP_SQRT: gin[0] = R(rg_div(ctx, H(g), rg_scale(ctx, H(out), 2))); break;
  case RG_OP_CLAMP: gin[0] = op1(ctx, RG_OP_CLAMP_BWD, x, g, 0, sx, NULL, f); break;
  case RG_OP_RELU: gin[0] = op1(ctx, RG_OP_RELU_BWD, x, g, 0, sx, NULL, NULL); break;
  case RG_OP_GELU: gin[0] = op1(ctx, RG_OP_GELU_BWD, x, g, 0, sx, NULL, NULL); break;
  case RG_OP_SILU: gin[0] = op1(ctx, RG_OP_SILU_BWD, x, g, 0, sx, NULL, NULL); break;
  case RG_OP_SIGMOID: gin[0] = op1(ctx, RG_OP_SIGMOID_BWD, out, g, 0, sx, NULL, NULL); break;
  case RG_OP_TANH: gin[0] = op1(ctx, RG_OP_TANH_BWD, out, g, 0, sx, NULL, NULL); break;
  case RG_OP_SUM: gin[0] = unreduce(ctx, n, g, sx); break;
  case RG_OP_MEAN: {
    int64_t cnt = 1;
    for (int i = 0; i < sx.ndim; i++)
      if (n->i[0] < 0 || n->i[0] == i) cnt *= sx.dims[i];
    gin[0] = unreduce(ctx, n, R(rg_scale(ctx, H(g), cnt ? 1.0f / (float)cnt : 0.0f)), sx);
    break;
  }
  case RG_OP_MAX: gin[0] = op1(ctx, RG_OP_MAX_BWD, x, g, 0, sx, n->i, NULL); break;
  case RG_OP_SUM_TO: gin[0] = expand(ctx, g, sx); break;
  case RG_OP_EXPAND: gin[0] = sum_to(ctx, g, sx); break;
  case RG_OP_SOFTMAX: gin[0] = op1(ctx, RG_OP_SOFTMAX_BWD, out, g, 0, sx, NULL, NULL); break;
  case RG_OP_LOG_SOFTMAX:
    gin[0] = op1(ctx, RG_OP_LOG_SOFTMAX_BWD, out, g, 0, sx, NULL, NULL);
    break;
  case RG_OP_MATMUL: { /* out = a b: da = g b^T, db = a^T g, over the broadcast batch */
    rg_shape ga = so, gb = so;
    ga.dims[so.ndim - 1] = sx.dims[sx.ndim - 1];
    gb.dims[so.ndim - 2] = sy.dims[sy.ndim - 2];
    uint32_t gf = as_factors(ctx, g, rg__t(ctx, x)->dtype);
    gin[0] = sum_to(ctx, matmul_t(ctx, gf, y, 0, 1, ga), sx);
    gin[1] = sum_to(ctx, matmul_t(ctx, x, gf, 1, 0, gb), sy);
    break;
  }
  case RG_OP_LINEAR: linear_rule(ctx, n, g, gin); break;
  case RG_OP_LINEAR_ACT: { /* out[0] = act(p), p = x w^T + b: dp = act'(p) g, then LINEAR's */
    bool gelu = n->i[0] == RG_ACT_GELU;
    so.dtype = rg__t(ctx, x)->dtype; /* dp: rounded for the products anyway (bf16_grad) */
    if (gelu && through_gelu(ctx, g, n->out[1])) /* dp made by the next layer's dx GEMM */
      linear_rule(ctx, n, g, gin);
    else
      linear_rule(ctx, n, op1(ctx, gelu ? RG_OP_GELU_BWD : RG_OP_RELU_BWD,
                              gelu ? n->out[1] : out, g, 0, so, NULL, NULL), gin);
    break;
  }
  case RG_OP_LAYERNORM:
  case RG_OP_RMSNORM: {
    bool ln = n->op == RG_OP_LAYERNORM;
    uint32_t gamma = n->in[1], beta = ln ? n->in[2] : 0;
    rg_shape c = {RG_F32, 1, {sx.dims[sx.ndim - 1]}}, none = {0, -1, {0}};
    rg_shape outs[RG_MAX_OUT] = {sx, gamma ? c : none, beta ? c : none, none};
    uint32_t in[RG_MAX_IN] = {x, gamma, g, 0}, o[RG_MAX_OUT] = {0};
    if (rg__emit(ctx, ln ? RG_OP_LAYERNORM_BWD : RG_OP_RMSNORM_BWD, in, outs, NULL, f, NULL,
                 o) == RG_OK)
      memcpy(gin, o, sizeof o);
    break;
  }
  case RG_OP_ADD_LAYERNORM: { /* s = a + b, y = layernorm(s): s's whole gradient is
                                 layernorm' of y's plus s's own (dx_in), a and b get it */
    uint32_t gs = gout[0], gy = gout[1], tot = gs, tot16 = 0;
    /* An addend that is a bf16 product's result (the projection into a residual stream)
       takes its gradient rounded (bf16_grad), written by the norm's backward beside dx:
       its product's rule then records no CAST of it. */
    bool r0 = bf16_grad(ctx, x) && same_shape(sx, so);
    bool r1 = bf16_grad(ctx, y) && same_shape(sy, so);
    if (gy) {
      rg_shape c = {RG_F32, 1, {so.dims[so.ndim - 1]}}, none = {0, -1, {0}}, s16 = so;
      s16.dtype = RG_BF16;
      rg_shape outs[RG_MAX_OUT] = {so, n->in[2] ? c : none, n->in[3] ? c : none,
                                   r0 || r1 ? s16 : none};
      uint32_t in[RG_MAX_IN] = {out, n->in[2], gy, 0, 0, gs}, o[RG_MAX_OUT] = {0};
      if (rg__emit(ctx, RG_OP_LAYERNORM_BWD, in, outs, NULL, f, NULL, o) != RG_OK) break;
      tot = o[0], tot16 = o[3], gin[2] = o[1], gin[3] = o[2];
    }
    gin[0] = r0 && tot16 ? tot16 : sum_to(ctx, tot, sx);
    gin[1] = r1 && tot16 ? tot16 : sum_to(ctx, tot, sy);
    break;
  }
  case RG_OP_EMBEDDING: gin[0] = op1(ctx, RG_OP_EMBEDDING_BWD, y, g, 0, sx, NULL, NULL); break;
  case RG_OP_ATTENTION: {
    uint32_t in[RG_MAX_IN] = {x, y, n->in[2], n->out[0], g, n->out[1], n->in[3], n->in[4]};
    uint32_t o[RG_MAX_OUT] = {0};
    rg_shape outs[RG_MAX_OUT] = {grad_of(ctx, x), grad_of(ctx, y), grad_of(ctx, n->in[2])};
    if (rg__emit(ctx, RG_OP_ATTENTION_BWD, in, outs, n->i, NULL, NULL, o) == RG_OK)
      memcpy(gin, o, sizeof o);
    break;
  }
  case RG_OP_ATTENTION_QKV: {
    uint32_t in[RG_MAX_IN] = {x, n->out[0], g, n->out[1]}, o[RG_MAX_OUT] = {0};
    rg_shape outs[RG_MAX_OUT] = {grad_of(ctx, x), {0, -1, {0}}, {0, -1, {0}}};
    if (rg__emit(ctx, RG_OP_ATTENTION_QKV_BWD, in, outs, n->i, NULL, NULL, o) == RG_OK)
      gin[0] = o[0];
    break;
  }
  case RG_OP_CROSS_ENTROPY: { /* reads the forward's row statistics (ops.h) */
    if ((gin[0] = xent_fused(ctx, n, g))) break;
    uint32_t in[RG_MAX_IN] = {x, y, g, n->out[1]}, o[RG_MAX_OUT] = {0};
    rg_shape outs[RG_MAX_OUT] = {grad_of(ctx, x), {0, -1, {0}}, {0, -1, {0}}};
    if (rg__emit(ctx, RG_OP_CROSS_ENTROPY_BWD, in, outs, n->i, NULL, NULL, o) == RG_OK)
      gin[0] = o[0];
    break;
  }
  case RG_OP_MSE: { /* d pred = 2 (p - t) / N * g */
    int64_t cnt = rg__t(ctx, x)->numel;
    float k = cnt ? 2.0f / (float)cnt : 0.0f;
    uint32_t d = R(rg_mul(ctx, rg_scale(ctx, rg_sub(ctx, H(x), H(y)), k), H(g)));
    gin[0] = d;
    gin[1] = d ? R(rg_neg(ctx, H(d))) : 0;
    break;
  }
  case RG_OP_COPY: gin[0] = reshape(ctx, g, sx); break;
  case RG_OP_PERMUTE: {
    int inv[RG_MAX_DIMS];
    for (int i = 0; i < sx.ndim; i++) inv[n->i[i]] = i;
    gin[0] = R(rg_permute(ctx, H(g), inv));
    break;
  }
  case RG_OP_SLICE: gin[0] = op1(ctx, RG_OP_SLICE_BWD, g, 0, 0, sx, n->i, NULL); break;
  case RG_OP_CONCAT: {
    int ax = (int)n->i[0];
    gin[0] = R(rg_slice(ctx, H(g), ax, 0, sx.dims[ax]));
    gin[1] = R(rg_slice(ctx, H(g), ax, sx.dims[ax], sy.dims[ax]));
    break;
  }
  case RG_OP_DROPOUT: gin[0] = op1(ctx, RG_OP_DROPOUT, g, n->in[1], 0, sx, n->i, f); break;
  case RG_OP_CAST: /* passed on: F32 on both sides of a float cast */
    gin[0] = rg__t(ctx, g)->dtype == RG_F32 ? g : R(rg_cast(ctx, H(g), RG_F32));
    break;
  default: /* not RG_F_DIFF (ops.h): stopping here would leave gradients missing */
    rg__fail(ctx, RG_ERR_MISUSE, "rg_backward", "the loss depends on the result of %s, "
             "which has no gradient; rg_detach that result where no gradient should pass",
             rg_optab[n->op].name);
    break;
  }
}

/* ---- rg_backward, rg_grad, rg_zero_grad ------------------------------------------------- */

/* Gradient g is held by one more tensor / one fewer; a tensor made by this backward
   (slot >= first) that no tensor holds any longer is released. */
static void hold(rg_ctx *ctx, uint32_t g) { rg__t(ctx, g)->gref++; }
static void drop(rg_ctx *ctx, uint32_t g, uint32_t first) {
  if (--rg__t(ctx, g)->gref == 0 && !(g >> 31) && g > first) rg__release(ctx, g);
}

/* If gi was made by a queued node that can add its result to the parameter gradient pg
   itself, that node does so instead of writing gi for an ACCUM to add: a 2-D MATMUL
   becomes a MATMUL_ACC (a weight gradient costs one GEMM with beta = 1 instead of a GEMM,
   a temporary and an ACCUM), a SUM_TO a SUM_TO_ACC (a bias gradient is one column sum;
   49 of GPT-2's 149 ACCUM nodes a step were these). The node need not be the last one:
   linear's rule records the weight's GEMM, then the bias's sum. It must be the last to
   touch gi and pg (nothing after it reads gi, or adds into pg, so the adds into pg keep
   their order and the result is bit for bit the unfolded one). gi is then written by
   nothing, and released with the rule's other temporaries. holders: how many tensors
   hold gi as their gradient only until this rule is done (the node's own outputs, when
   its rule passes their gradient through: a CAST to BF16 hands its F32 gradient on to
   the weight it was cast from); no other may hold it.
   A norm's dgamma (dbeta) is its backward node's output 1 (2): the node (RG_F_FOLDS)
   takes pg as its input 3 (4) and adds into it (ops.h), so a layernorm's parameters cost
   no ACCUM (18 of gpt-char's ~280 nodes a step were these). Folding here rather than in
   the rule keeps one set of conditions for every fold. No producer may read pg itself: it would add into
   what it reads (gamma and beta one tensor: two adds at once, racing on CUDA). */
static bool fold_into_producer(rg_ctx *ctx, uint32_t pg, uint32_t gi, uint32_t first,
                               uint32_t holders) {
  rg_tinfo *t = rg__t(ctx, gi);
  if (gi <= first || t->gref != holders || !t->node || t->node - 1 < ctx->q_head)
    return false;
  rg_node *n = &ctx->nodes[t->node - 1];
  int j = 0;
  while (j < n->nout && n->out[j] != gi) j++;
  if (j == n->nout || reads(n, pg)) return false;
  for (size_t k = t->node; k < ctx->n_nodes; k++)
    if (reads(&ctx->nodes[k], gi) || reads(&ctx->nodes[k], pg)) return false;
  if ((rg_optab[n->op].flags & RG_F_FOLDS) && j > 0) {
    n->in[2 + j] = pg, n->out[j] = 0;
    t->node = 0;
    return true;
  }
  if (j != 0) return false;
  if (n->op == RG_OP_MATMUL && t->ndim == 2 && rg__t(ctx, n->in[0])->ndim == 2 &&
      rg__t(ctx, n->in[1])->ndim == 2) {
    n->op = RG_OP_MATMUL_ACC;
    n->in[2] = n->in[1], n->in[1] = n->in[0], n->in[0] = pg;
  } else if (n->op == RG_OP_SUM_TO) {
    n->op = RG_OP_SUM_TO_ACC;
    n->in[1] = n->in[0], n->in[0] = pg;
  } else {
    return false;
  }
  n->nin = (uint8_t)rg_optab[n->op].nin, n->nout = 0, n->out[0] = 0;
  t->node = 0;
  return true;
}

/* The sum of x's gradients old and gi made by the norm backward node that writes gi as
   its dx, when that node can add old in itself (its dx_in, ops.h): gi is then the sum
   and no ADD is recorded (a residual stream's gradient meets each block's norm; 24 of
   GPT-2's 49 adds a step were these). As fold_into_producer: gi made by this backward,
   held by no tensor yet, its node queued and the last to touch it. */
static bool fold_sum(rg_ctx *ctx, uint32_t old, uint32_t gi, uint32_t first) {
  rg_tinfo *t = rg__t(ctx, gi), *o = rg__t(ctx, old);
  if (gi <= first || t->gref || !t->node || t->node - 1 < ctx->q_head || o->dtype != RG_F32 ||
      t->dtype != RG_F32 || !same_shape(rg__shape(ctx, old), rg__shape(ctx, gi)))
    return false;
  rg_node *n = &ctx->nodes[t->node - 1];
  if (!(rg_optab[n->op].flags & RG_F_FOLDS) || n->out[0] != gi || n->in[5]) return false;
  for (size_t k = t->node; k < ctx->n_nodes; k++)
    if (reads(&ctx->nodes[k], gi)) return false;
  n->in[5] = old;
  return true;
}

/* Adds gradient gi to tensor ref: in place into a parameter's buffer, by a recorded add
   otherwise. fold: gi is this input's alone (a rule may hand one tensor to several
   inputs; a folded node no longer writes it); holders as fold_into_producer's. */
static rg_status accumulate(rg_ctx *ctx, uint32_t ref, uint32_t gi, uint32_t first, bool fold,
                            uint32_t holders) {
  rg_tinfo *t = rg__t(ctx, ref);
  if (t->flags & RG_T_PARAM) {
    if (fold && fold_into_producer(ctx, t->grad, gi, first, holders)) return RG_OK;
    uint32_t in[RG_MAX_IN] = {t->grad, gi, 0, 0};
    return rg__emit(ctx, RG_OP_ACCUM, in, NULL, NULL, NULL, NULL, NULL);
  }
  if (!t->grad) {
    t->grad = gi;
    hold(ctx, gi);
    return RG_OK;
  }
  uint32_t old = t->grad;
  uint32_t sum = fold_sum(ctx, old, gi, first) ? gi : R(rg_add(ctx, H(old), H(gi)));
  if (!sum) return ctx->err != RG_OK ? ctx->err : RG_ERR_OOM;
  rg__t(ctx, ref)->grad = sum;
  hold(ctx, sum);
  drop(ctx, old, first);
  return RG_OK;
}

/* The loss's own gradient, 1: a persistent scalar uploaded once (no node a step) when
   the loss has no axes and is not retained (rg_grad would hand out the shared tensor);
   a recorded FILL otherwise. Rules only read their incoming gradient, never write it. */
static uint32_t seed_of(rg_ctx *ctx, uint32_t loss) {
  rg_shape s = rg__shape(ctx, loss);
  float one = 1;
  if (s.ndim == 0 && !(rg__t(ctx, loss)->flags & RG_T_RETAIN)) {
    if (!ctx->one) {
      uint32_t c = rg__new(ctx, RG_POOL_PERSISTENT, RG_F32, 0, NULL, "rg_backward");
      if (!c) return 0;
      rg_status st = ctx->be->upload(ctx, rg__t(ctx, c)->data, &one, sizeof one);
      if (st != RG_OK) return rg__fail(ctx, st, "rg_backward", "the upload of its seed failed"), 0;
      ctx->one = c;
      rg__count_xfer(ctx, false, RG_SITE_PARAM_INIT, sizeof one);
    }
    return ctx->one;
  }
  float fv[4] = {one, 0, 0, 0};
  return op1(ctx, RG_OP_FILL, 0, 0, 0, s, NULL, fv);
}

rg_status rg_backward(rg_ctx *ctx, rg_tensor loss) {
  if (!ctx) return RG_ERR_MISUSE;
  uint32_t lref;
  rg_status st = rg__check(ctx, loss, "rg_backward", 1, &lref);
  if (st != RG_OK) return st;
  rg_tinfo *lt = rg__t(ctx, lref);
  if (ctx->region_open)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_backward", "an activation checkpoint region is "
                    "open (rg_checkpoint_begin without rg_checkpoint_end); end it before "
                    "rg_backward");
  if (lt->numel != 1 || lt->dtype != RG_F32)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_backward", "the loss has %lld elements of %s; "
                    "rg_backward needs a one-element F32 loss (reduce it with rg_mean or "
                    "rg_sum)", (long long)lt->numel, rg__dtype_name(lt->dtype));
  if (lt->state == RG_FAILED)
    return rg__fail(ctx, RG_ERR_FAILED, "rg_backward", "the loss was not computed because its "
                    "drain failed: %s", lt->fail ? ctx->fails[lt->fail - 1] : "?");
  if (!(lt->flags & RG_T_GRAD) || !lt->node)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_backward", "the loss does not depend on any "
                    "parameter (or was computed with rg_detach / before rg_step_begin); "
                    "nothing to differentiate");
  rg_pool_s *pass = &ctx->pool[RG_POOL_PASS];
  for (uint32_t i = 0; i < pass->n; i++) pass->t[i].grad = pass->t[i].gref = 0;
  uint32_t first = pass->n; /* tensors past this one are this backward's own */
  size_t n0 = ctx->n_nodes;
  ctx->tape_end = n0;
  /* Set aside an earlier sticky error so a failure here is seen; the first one is put
     back afterwards (it stays the one reported). */
  rg_status err0 = ctx->err;
  char msg0[sizeof ctx->errmsg];
  memcpy(msg0, ctx->errmsg, sizeof msg0);
  rg_clear_error(ctx);
  ctx->no_grad++;
  int lsp0 = ctx->lsp;
  rg_label_push(ctx, "backward");
  bool labelled = ctx->lsp > lsp0; /* not when the label stack is out of memory */
  uint32_t seed = ctx->err == RG_OK ? seed_of(ctx, lref) : 0;
  st = seed ? RG_OK : ctx->err;
  if (seed) rg__t(ctx, lref)->grad = seed, hold(ctx, seed);
  /* Distributed: the gradients are averaged across the ranks in buckets (dist.c). */
  bool dist = st == RG_OK && rg__dist_on(ctx);
  if (dist) st = rg__dist_plan(ctx, rg__t(ctx, lref)->node);
  for (size_t k = rg__t(ctx, lref)->node; st == RG_OK && k-- > 0;) {
    if (dist && (st = rg__dist_reached(ctx, k)) != RG_OK) break;
    rg__region_passed(ctx, k);
    rg_node n = ctx->nodes[k]; /* a copy: recording may move the node array */
    if (!(n.flags & RG_N_GRAD)) continue;
    uint32_t gout[RG_MAX_OUT] = {0}, gin[RG_MAX_IN] = {0};
    bool any = false;
    for (int j = 0; j < n.nout; j++)
      if (n.out[j] && !(n.out[j] >> 31) && (gout[j] = rg__t(ctx, n.out[j])->grad)) any = true;
    if (!any) continue;
    if (labelled) ctx->lstack[ctx->lsp - 1] = n.label; /* their forward's label */
    if ((st = rg__region_reached(ctx, k)) != RG_OK) break; /* a checkpoint's recomputation */
    uint32_t made = pass->n;
    rg__backward_rule(ctx, &n, gout, gin);
    st = ctx->err;
    for (int j = 0; st == RG_OK && j < n.nin; j++) {
      uint32_t in = n.in[j];
      if (!in || !gin[j] || !(rg__t(ctx, in)->flags & RG_T_GRAD)) continue;
      bool alone = true;
      uint32_t holders = 0; /* outputs whose gradient passes through and dies below */
      for (int q = 0; q < n.nin; q++) alone &= q == j || gin[q] != gin[j];
      for (int q = 0; q < n.nout; q++)
        holders += gout[q] == gin[j] && !(rg__t(ctx, n.out[q])->flags & RG_T_RETAIN);
      st = accumulate(ctx, in, gin[j], first, alone, holders);
    }
    if (st != RG_OK) break;
    /* The outputs' gradients and the rule's temporaries are dead now (see the top). */
    for (int j = 0; j < n.nout; j++) {
      rg_tinfo *o = n.out[j] && !(n.out[j] >> 31) ? rg__t(ctx, n.out[j]) : NULL;
      if (!o || !o->grad || (o->flags & RG_T_RETAIN)) continue;
      uint32_t g = o->grad;
      o->grad = 0;
      drop(ctx, g, first);
    }
    for (uint32_t s = made; s < pass->n; s++)
      if (!pass->t[s].gref) rg__release(ctx, s + 1);
  }
  rg__region_passed(ctx, SIZE_MAX);
  if (dist && st == RG_OK) st = rg__dist_flush(ctx);
  rg_label_pop(ctx);
  ctx->no_grad--;
  if (st != RG_OK) {
    /* A failed backward must not half-run: drop what it queued (parameter gradients
       would otherwise accumulate part of it at the next barrier) and the gradients it
       named. Only a check-mode or guard drain can have run some of it already. */
    ctx->n_nodes = n0 > ctx->q_head ? n0 : ctx->q_head;
    for (uint32_t i = 0; i < pass->n; i++) pass->t[i].grad = 0;
  }
  if (err0 != RG_OK) {
    ctx->err = err0;
    memcpy(ctx->errmsg, msg0, sizeof msg0);
  }
  return st;
}

rg_tensor rg_grad(rg_ctx *ctx, rg_tensor t) {
  uint32_t ref;
  if (!ctx || rg__check(ctx, t, "rg_grad", 1, &ref) != RG_OK) return RG_NONE;
  rg_tinfo *ti = rg__t(ctx, ref);
  if (!ti->grad && (ti->flags & RG_T_GRAD) && !(ti->flags & (RG_T_PARAM | RG_T_RETAIN)))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_grad", "the gradient of a tensor that is not a "
                    "parameter is kept only when rg_retain_grad(ctx, t) was called before "
                    "rg_backward (the backward pass frees the others as it goes)"), RG_NONE;
  if (!ti->grad)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_grad", "this tensor has no gradient: it does "
                    "not require grad, or the last rg_backward did not reach it"), RG_NONE;
  return rg__handle(ctx, ti->grad);
}

rg_status rg_retain_grad(rg_ctx *ctx, rg_tensor t) {
  uint32_t ref;
  if (!ctx) return RG_ERR_MISUSE;
  rg_status st = rg__check(ctx, t, "rg_retain_grad", 1, &ref);
  if (st != RG_OK) return st;
  rg_tinfo *ti = rg__t(ctx, ref);
  if (!(ti->flags & RG_T_GRAD))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_retain_grad", "this tensor does not require "
                    "grad (it depends on no parameter, or was made under rg_detach), so it "
                    "will have no gradient");
  ti->flags |= RG_T_RETAIN; /* parameters keep theirs anyway; harmless there */
  return RG_OK;
}

/* Right after an optimizer step over every parameter (still queued), the step zeroes the
   gradients as it reads them (its i[0], ops.h): one node and one pass fewer. */
rg_status rg_zero_grad(rg_ctx *ctx) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!ctx->nparams) return RG_OK;
  rg_node *n = ctx->n_nodes > ctx->q_head ? &ctx->nodes[ctx->n_nodes - 1] : NULL;
  const rg_optim *o = n && (rg_optab[n->op].flags & RG_F_OPTIM) ? n->aux : NULL;
  if (o && o->grads.n == ctx->zero_list.n &&
      !memcmp(o->grads.ref, ctx->zero_list.ref, sizeof(uint32_t) * (size_t)o->grads.n)) {
    n->i[0] = 1;
    return RG_OK;
  }
  return rg__emit(ctx, RG_OP_ZERO_LIST, NULL, NULL, NULL, NULL, &ctx->zero_list, NULL);
}
