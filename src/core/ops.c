/*
 * ops.c - the public ops: validate operands, infer the output shape, record one node.
 *
 * Every op here is a shape/dtype rule plus a call to rg__emit; the arithmetic lives in
 * the backends and the gradient in autograd.c. Errors name the op, the operand and both
 * shapes, and say what to do. An op never runs anything (unless check mode is on or the
 * growth guard trips, both inside rg__commit).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const rg_opinfo rg_optab[RG_OP_COUNT] = {
#define RG_OP_ROW(E, n, s, ni, no, fl) [RG_OP_##E] = {s, ni, no, #n, fl},
    RG_OPS(RG_OP_ROW)
#undef RG_OP_ROW
};
_Static_assert(sizeof rg_optab / sizeof rg_optab[0] == RG_OP_COUNT, "op table is closed");

rg_shape rg__shape(rg_ctx *ctx, uint32_t ref) {
  rg_shape s = {0, -1, {0}};
  if (!ref) return s;
  rg_tinfo *t = rg__t(ctx, ref);
  s.dtype = t->dtype;
  s.ndim = t->ndim;
  memcpy(s.dims, t->dims, sizeof s.dims);
  return s;
}

static int64_t numel_of(const rg_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
  return n;
}

rg_status rg__emit(rg_ctx *ctx, rg_op op, const uint32_t *in, const rg_shape *outs,
                   const int64_t *iv, const float *fv, const void *aux, uint32_t *out) {
  if (!rg__record(ctx, op)) return RG_ERR_OOM;
  uint32_t o[RG_MAX_OUT] = {0};
  for (int j = 0; j < rg_optab[op].nout; j++) {
    if (outs[j].ndim < 0) continue;
    o[j] = rg__new(ctx, RG_POOL_PASS, (rg_dtype)outs[j].dtype, outs[j].ndim, outs[j].dims,
                   rg_optab[op].name);
    if (!o[j]) {
      ctx->n_nodes--; /* outputs already made stay unreferenced until the pass resets */
      return ctx->last; /* rg__new's own failure, not an earlier sticky error */
    }
  }
  rg_node *n = &ctx->nodes[ctx->n_nodes - 1];
  for (int j = 0; j < rg_optab[op].nin; j++) n->in[j] = in ? in[j] : 0;
  for (int j = 0; j < rg_optab[op].nout; j++) n->out[j] = o[j];
  if (iv) memcpy(n->i, iv, sizeof n->i);
  if (fv) memcpy(n->f, fv, sizeof n->f);
  n->aux = aux;
  if (out) memcpy(out, o, sizeof(uint32_t) * (size_t)rg_optab[op].nout);
  return rg__commit(ctx, n);
}

/* ---- operand checks ------------------------------------------------------------------- */

enum { F32_ONLY = 1 << RG_F32, ANY_FLOAT = 1 << RG_F32 | 1 << RG_BF16, I32_ONLY = 1 << RG_I32,
       ANY = 7 };

/* *ref becomes a recorded rg_cast of it to dtype (autocast's casts). */
static bool recast(rg_ctx *ctx, uint32_t *ref, rg_dtype dtype) {
  rg_shape s = rg__shape(ctx, *ref);
  uint32_t out[RG_MAX_OUT] = {0};
  s.dtype = dtype;
  if (rg__emit(ctx, RG_OP_CAST, ref, &s, NULL, NULL, NULL, out) != RG_OK) return false;
  *ref = out[0];
  return true;
}

/* A live, computed (or pending) operand of an allowed dtype. With rg_options.bf16 a BF16
   operand of an op that computes in F32 only passes too: widen() then widens it. */
static bool operand(rg_ctx *ctx, rg_tensor t, const char *call, int k, unsigned dtypes,
                    uint32_t *ref) {
  if (rg__check(ctx, t, call, k, ref) != RG_OK) return false;
  rg_tinfo *ti = rg__t(ctx, *ref);
  if (ti->state == RG_FAILED) {
    rg__fail(ctx, RG_ERR_FAILED, call, "operand %d was not computed because its drain "
             "failed: %s", k, ti->fail ? ctx->fails[ti->fail - 1] : "?");
    return false;
  }
  if (!(dtypes >> ti->dtype & 1)) {
    if (ctx->opt.bf16 && ti->dtype == RG_BF16 && (dtypes & F32_ONLY)) return true;
    rg__fail(ctx, RG_ERR_MISUSE, call, "operand %d has dtype %s; this op takes %s%s", k,
             rg__dtype_name(ti->dtype),
             dtypes == I32_ONLY ? "I32" : dtypes == F32_ONLY ? "F32" : "F32 or BF16",
             dtypes == I32_ONLY ? "" : " — rg_cast it first");
    return false;
  }
  return true;
}

bool rg__operand(rg_ctx *ctx, rg_tensor t, const char *call, int k, unsigned dtypes,
                 uint32_t *ref) {
  return operand(ctx, t, call, k, dtypes, ref);
}

/* The BF16 operands among in[0, n) (0: absent) of an op that computes in F32 only, which
   operand() let through under rg_options.bf16, widened (exactly) by a recorded rg_cast, as
   autocast runs such ops in F32. Called once every operand of the call is checked, so a
   bad operand is reported as one, not as a failure of an earlier operand's cast (an
   out-of-memory pass pool). The casts stay recorded if a later check refuses the call
   (ordinary nodes, computed at the next barrier). */
static bool widen(rg_ctx *ctx, uint32_t *in, int n) {
  for (int i = 0; i < n; i++)
    if (in[i] && rg__t(ctx, in[i])->dtype == RG_BF16 && !recast(ctx, &in[i], RG_F32))
      return false;
  return true;
}

static bool optional(rg_ctx *ctx, rg_tensor t, const char *call, int k, uint32_t *ref) {
  *ref = 0;
  return !t.id || operand(ctx, t, call, k, F32_ONLY, ref);
}

static int norm_axis(rg_ctx *ctx, const char *call, int axis, int ndim) {
  int a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim) {
    rg__fail(ctx, RG_ERR_MISUSE, call, "axis %d is outside a %d-axis tensor (valid: %d..%d)",
             axis, ndim, -ndim, ndim - 1);
    return -1;
  }
  return a;
}

static rg_tensor emit1(rg_ctx *ctx, rg_op op, const uint32_t *in, rg_shape s,
                       const int64_t *iv, const float *fv) {
  uint32_t out[RG_MAX_OUT] = {0};
  return rg__emit(ctx, op, in, &s, iv, fv, NULL, out) == RG_OK ? rg__handle(ctx, out[0])
                                                                 : RG_NONE;
}

/* An op whose out[0] is its result and whose other outputs are internal (attention's
   lse, cross-entropy's row statistics, GELU's pre-activation): those require no grad, so
   no gradient can reach them (a forged handle could otherwise give one to a rule that
   differentiates out[0] only). */
static rg_tensor emit_main(rg_ctx *ctx, rg_op op, const uint32_t *in, const rg_shape *outs,
                           const int64_t *iv) {
  uint32_t out[RG_MAX_OUT] = {0};
  if (rg__emit(ctx, op, in, outs, iv, NULL, NULL, out) != RG_OK) return RG_NONE;
  for (int j = 1; j < RG_MAX_OUT; j++)
    if (out[j]) rg__t(ctx, out[j])->flags &= (uint8_t)~RG_T_GRAD;
  return rg__handle(ctx, out[0]);
}

static bool shape_error(rg_ctx *ctx, const char *call, const char *what, const rg_shape *a,
                        const rg_shape *b) {
  char sa[96], sb[96];
  rg__fmt_shape(sa, sizeof sa, a->ndim, a->dims);
  rg__fmt_shape(sb, sizeof sb, b->ndim, b->dims);
  rg__fail(ctx, RG_ERR_MISUSE, call, "shapes %s and %s %s", sa, sb, what);
  return false;
}

static bool same_dims(rg_shape a, rg_shape b) {
  return a.ndim == b.ndim && !memcmp(a.dims, b.dims, sizeof(int64_t) * (size_t)a.ndim);
}

/* numpy broadcasting: axes aligned from the right; sizes equal or one of them 1. */
static bool broadcast(rg_ctx *ctx, const char *call, const rg_shape *a, const rg_shape *b,
                      rg_shape *out) {
  out->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int i = 0; i < out->ndim; i++) {
    int ia = a->ndim - out->ndim + i, ib = b->ndim - out->ndim + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1)
      return shape_error(ctx, call, "do not broadcast: sizes must match or be 1 on each "
                         "axis (aligned from the right)", a, b);
    out->dims[i] = da == 1 ? db : da;
  }
  return true;
}

/* ---- elementwise ------------------------------------------------------------------------ */

static rg_tensor binary(rg_ctx *ctx, rg_op op, rg_tensor a, rg_tensor b) {
  const char *call = rg_optab[op].name;
  uint32_t in[2];
  if (!ctx || !operand(ctx, a, call, 1, ANY_FLOAT, &in[0]) ||
      !operand(ctx, b, call, 2, ANY_FLOAT, &in[1]))
    return RG_NONE;
  rg_shape sa = rg__shape(ctx, in[0]), sb = rg__shape(ctx, in[1]), so = sa;
  if (!broadcast(ctx, call, &sa, &sb, &so)) return RG_NONE;
  so.dtype = RG_F32; /* a BF16 operand is read widened: bf16 activations meet F32 ones */
  return emit1(ctx, op, in, so, NULL, NULL);
}
rg_tensor rg_add(rg_ctx *c, rg_tensor a, rg_tensor b) { return binary(c, RG_OP_ADD, a, b); }
rg_tensor rg_sub(rg_ctx *c, rg_tensor a, rg_tensor b) { return binary(c, RG_OP_SUB, a, b); }
rg_tensor rg_mul(rg_ctx *c, rg_tensor a, rg_tensor b) { return binary(c, RG_OP_MUL, a, b); }
rg_tensor rg_div(rg_ctx *c, rg_tensor a, rg_tensor b) { return binary(c, RG_OP_DIV, a, b); }

static rg_tensor unary(rg_ctx *ctx, rg_op op, rg_tensor x, float f0, float f1) {
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, rg_optab[op].name, 1, F32_ONLY, &in[0]) || !widen(ctx, in, 1))
    return RG_NONE;
  float fv[4] = {f0, f1, 0, 0};
  return emit1(ctx, op, in, rg__shape(ctx, in[0]), NULL, fv);
}
rg_tensor rg_scale(rg_ctx *c, rg_tensor x, float s) { return unary(c, RG_OP_SCALE, x, s, 0); }
rg_tensor rg_pow(rg_ctx *c, rg_tensor x, float p) { return unary(c, RG_OP_POW, x, p, 0); }
rg_tensor rg_neg(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_NEG, x, 0, 0); }
rg_tensor rg_exp(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_EXP, x, 0, 0); }
rg_tensor rg_log(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_LOG, x, 0, 0); }
rg_tensor rg_sqrt(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_SQRT, x, 0, 0); }
rg_tensor rg_relu(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_RELU, x, 0, 0); }
rg_tensor rg_gelu(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_GELU, x, 0, 0); }
rg_tensor rg_silu(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_SILU, x, 0, 0); }
rg_tensor rg_sigmoid(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_SIGMOID, x, 0, 0); }
rg_tensor rg_tanh(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_TANH, x, 0, 0); }
rg_tensor rg_softmax(rg_ctx *c, rg_tensor x) { return unary(c, RG_OP_SOFTMAX, x, 0, 0); }
rg_tensor rg_log_softmax(rg_ctx *c, rg_tensor x) {
  return unary(c, RG_OP_LOG_SOFTMAX, x, 0, 0);
}
rg_tensor rg_clamp(rg_ctx *ctx, rg_tensor x, float lo, float hi) {
  if (ctx && !(lo <= hi))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_clamp", "lo %g is not <= hi %g", lo, hi), RG_NONE;
  return unary(ctx, RG_OP_CLAMP, x, lo, hi);
}

/* ---- reductions ------------------------------------------------------------------------- */

static rg_tensor reduce(rg_ctx *ctx, rg_op op, rg_tensor x, int axis, int keepdim) {
  const char *call = rg_optab[op].name;
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, call, 1, F32_ONLY, &in[0]) || !widen(ctx, in, 1))
    return RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]), o = s;
  int a = -1;
  if (axis != RG_ALL_AXES && (a = norm_axis(ctx, call, axis, s.ndim)) < 0) return RG_NONE;
  o.ndim = 0;
  for (int i = 0; i < s.ndim; i++) {
    bool reduced = a < 0 || i == a;
    if (reduced && !keepdim) continue;
    o.dims[o.ndim++] = reduced ? 1 : s.dims[i];
  }
  if ((op == RG_OP_MAX || op == RG_OP_ARGMAX) && numel_of(&s) == 0)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "the input is empty; a maximum needs at least "
                    "one element"), RG_NONE;
  if (op == RG_OP_ARGMAX) o.dtype = RG_I32;
  int64_t iv[4] = {a, keepdim != 0, 0, 0};
  return emit1(ctx, op, in, o, iv, NULL);
}
rg_tensor rg_sum(rg_ctx *c, rg_tensor x, int axis, int keepdim) {
  return reduce(c, RG_OP_SUM, x, axis, keepdim);
}
rg_tensor rg_mean(rg_ctx *c, rg_tensor x, int axis, int keepdim) {
  return reduce(c, RG_OP_MEAN, x, axis, keepdim);
}
rg_tensor rg_max(rg_ctx *c, rg_tensor x, int axis, int keepdim) {
  return reduce(c, RG_OP_MAX, x, axis, keepdim);
}
rg_tensor rg_argmax(rg_ctx *c, rg_tensor x, int axis, int keepdim) {
  return reduce(c, RG_OP_ARGMAX, x, axis, keepdim);
}

/* ---- matrix products ------------------------------------------------------------------- */

/* The two factors of a product are both F32 or both BF16; with rg_options.bf16 a mix is
   fine too, as autocast makes both BF16. */
static bool same_float(rg_ctx *ctx, const char *call, const uint32_t *in) {
  int da = rg__t(ctx, in[0])->dtype, db = rg__t(ctx, in[1])->dtype;
  if (da == db || ctx->opt.bf16) return true;
  rg__fail(ctx, RG_ERR_MISUSE, call, "operand 1 is %s and operand 2 is %s; a product takes "
           "both F32 or both BF16 — rg_cast one of them, or open the context with "
           "rg_options.bf16 = 1 to have F32 operands cast to BF16", rg__dtype_name(da),
           rg__dtype_name(db));
  return false;
}

/* rg_options.bf16: each F32 ref in in[0..n) becomes a recorded rg_cast of it to BF16 (the
   factors and the bias of a product, attention's q, k and v; 0 refs stay 0). The cast is
   an ordinary node on the tape, so the operand's gradient comes back through it (in F32:
   see CAST in autograd.c). A parameter becomes its BF16 shadow instead (shadow.c): cast
   once, then rounded into by every optimizer step, so a training step casts no weights;
   its gradient goes to the parameter's. Called after every check, so a refused product
   records nothing. */
static bool autocast(rg_ctx *ctx, uint32_t *in, int n) {
  for (int j = 0; j < n && ctx->opt.bf16; j++) {
    if (!in[j] || rg__t(ctx, in[j])->dtype != RG_F32) continue;
    if (rg__t(ctx, in[j])->flags & RG_T_PARAM) { /* its shadow, cast once, kept by steps */
      if (!(in[j] = rg__shadow(ctx, in[j]))) return false;
    } else if (!recast(ctx, &in[j], RG_BF16)) {
      return false;
    }
  }
  return true;
}

/* What a product (or a norm) returns: BF16 with rg_options.bf16 (bf16 activations: the
   sums are F32 and rounded once), F32 otherwise. */
static rg_dtype act_dtype(rg_ctx *ctx) { return ctx->opt.bf16 ? RG_BF16 : RG_F32; }

rg_tensor rg_matmul(rg_ctx *ctx, rg_tensor a, rg_tensor b) {
  const char *call = "rg_matmul";
  uint32_t in[2];
  if (!ctx || !operand(ctx, a, call, 1, ANY_FLOAT, &in[0]) ||
      !operand(ctx, b, call, 2, ANY_FLOAT, &in[1]) || !same_float(ctx, call, in))
    return RG_NONE;
  rg_shape sa = rg__shape(ctx, in[0]), sb = rg__shape(ctx, in[1]), o;
  if (sa.ndim < 2 || sb.ndim < 2)
    return shape_error(ctx, call, "cannot be multiplied: both need at least 2 axes (reshape "
                       "a vector to [1,K] or [K,1])", &sa, &sb), RG_NONE;
  if (sa.dims[sa.ndim - 1] != sb.dims[sb.ndim - 2])
    return shape_error(ctx, call, "cannot be multiplied: the last axis of the first must "
                       "equal the second-to-last of the second", &sa, &sb), RG_NONE;
  rg_shape ba = sa, bb = sb;
  ba.ndim -= 2;
  bb.ndim -= 2;
  o.dtype = act_dtype(ctx);
  if (!broadcast(ctx, call, &ba, &bb, &o)) return RG_NONE;
  o.dims[o.ndim++] = sa.dims[sa.ndim - 2];
  o.dims[o.ndim++] = sb.dims[sb.ndim - 1];
  if (!autocast(ctx, in, 2)) return RG_NONE;
  return emit1(ctx, RG_OP_MATMUL, in, o, NULL, NULL);
}

static rg_tensor linear(rg_ctx *ctx, const char *call, rg_tensor x, rg_tensor w, rg_tensor b,
                        rg_act act) {
  uint32_t in[3];
  if (!ctx || !operand(ctx, x, call, 1, ANY_FLOAT, &in[0]) ||
      !operand(ctx, w, call, 2, ANY_FLOAT, &in[1]) || !optional(ctx, b, call, 3, &in[2]) ||
      !same_float(ctx, call, in))
    return RG_NONE;
  if (act != RG_ACT_NONE && act != RG_ACT_RELU && act != RG_ACT_GELU)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "act %d is not an rg_act (RG_ACT_NONE, "
                    "RG_ACT_RELU or RG_ACT_GELU)", (int)act), RG_NONE;
  rg_shape sx = rg__shape(ctx, in[0]), sw = rg__shape(ctx, in[1]), o = sx;
  if (sw.ndim != 2 || sx.ndim < 1 || sx.dims[sx.ndim - 1] != sw.dims[1])
    return shape_error(ctx, call, "do not fit: x is [..., in] and w is [out, in] (PyTorch "
                       "layout)", &sx, &sw), RG_NONE;
  if (in[2]) {
    rg_shape sb = rg__shape(ctx, in[2]);
    if (sb.ndim != 1 || sb.dims[0] != sw.dims[0])
      return shape_error(ctx, call, "do not fit: the bias must be [out] for w [out, in]",
                         &sb, &sw), RG_NONE;
  }
  o.dims[o.ndim - 1] = sw.dims[0];
  o.dtype = act_dtype(ctx);
  if (!autocast(ctx, in, 3)) return RG_NONE; /* the bias too, as autocast's F.linear */
  if (act == RG_ACT_NONE) return emit1(ctx, RG_OP_LINEAR, in, o, NULL, NULL);
  rg_shape outs[RG_MAX_OUT] = {o, o, {0, -1, {0}}};
  if (act == RG_ACT_RELU) outs[1].ndim = -1; /* its backward needs only out[0] */
  int64_t iv[4] = {act, 0, 0, 0};
  return emit_main(ctx, RG_OP_LINEAR_ACT, in, outs, iv);
}

rg_tensor rg_linear(rg_ctx *ctx, rg_tensor x, rg_tensor w, rg_tensor b) {
  return linear(ctx, "rg_linear", x, w, b, RG_ACT_NONE);
}

rg_tensor rg_linear_act(rg_ctx *ctx, rg_tensor x, rg_tensor w, rg_tensor b, rg_act act) {
  return linear(ctx, "rg_linear_act", x, w, b, act);
}

/* ---- normalisation, embedding, attention, losses ---------------------------------------- */

static bool vector_of(rg_ctx *ctx, const char *call, uint32_t ref, int64_t c, const char *what) {
  if (!ref) return true;
  rg_shape s = rg__shape(ctx, ref);
  if (s.ndim == 1 && s.dims[0] == c) return true;
  char b[96];
  rg__fmt_shape(b, sizeof b, s.ndim, s.dims);
  rg__fail(ctx, RG_ERR_MISUSE, call, "%s is %s but must be [%lld] (the last axis of x)", what,
           b, (long long)c);
  return false;
}

/* When x is the sum of the last node recorded, a queued ADD of two tensors of x's shape
   (a residual stream's x + f(x)), that node becomes an ADD_LAYERNORM writing x and the
   norm's output ys: one node, and the sum is not read back (ops.h). *y: ys's ref, or 0
   when nothing changed. False on a failure (its error is set). */
static bool add_norm(rg_ctx *ctx, const uint32_t *in, rg_shape ys, float eps, uint32_t *y) {
  *y = 0;
  uint32_t idx = rg__t(ctx, in[0])->node;
  if ((in[0] >> 31) || !idx || idx != ctx->n_nodes || idx - 1 < ctx->q_head) return true;
  rg_node *n = &ctx->nodes[idx - 1];
  if (n->op != RG_OP_ADD || n->out[0] != in[0] ||
      !same_dims(rg__shape(ctx, n->in[0]), ys) || !same_dims(rg__shape(ctx, n->in[1]), ys))
    return true;
  if (!(*y = rg__new(ctx, RG_POOL_PASS, (rg_dtype)ys.dtype, ys.ndim, ys.dims, "rg_layernorm")))
    return false;
  /* what rg__commit does for a node: its flag from the inputs, its outputs' state */
  n->op = RG_OP_ADD_LAYERNORM;
  n->nin = 4, n->nout = 2;
  n->in[2] = in[1], n->in[3] = in[2], n->out[1] = *y;
  n->f[0] = eps;
  bool grad = false;
  for (int i = 0; i < n->nin && !ctx->no_grad; i++)
    grad |= n->in[i] && (rg__t(ctx, n->in[i])->flags & RG_T_GRAD);
  rg_tinfo *ty = rg__t(ctx, *y);
  ty->node = idx;
  ty->state = RG_PENDING;
  if (grad) {
    n->flags |= RG_N_GRAD;
    ty->flags |= RG_T_GRAD;
    rg__t(ctx, n->out[0])->flags |= RG_T_GRAD;
  }
  return true;
}

rg_tensor rg_layernorm(rg_ctx *ctx, rg_tensor x, rg_tensor gamma, rg_tensor beta, float eps) {
  const char *call = "rg_layernorm";
  uint32_t in[3];
  if (!ctx || !operand(ctx, x, call, 1, F32_ONLY, &in[0]) ||
      !optional(ctx, gamma, call, 2, &in[1]) || !optional(ctx, beta, call, 3, &in[2]) ||
      !widen(ctx, in, 3))
    return RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]);
  if (s.ndim < 1)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "x has no axes; it normalises the last"), RG_NONE;
  if (!vector_of(ctx, call, in[1], s.dims[s.ndim - 1], "gamma") ||
      !vector_of(ctx, call, in[2], s.dims[s.ndim - 1], "beta"))
    return RG_NONE;
  if (!(eps >= 0))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "eps %g must be >= 0", eps), RG_NONE;
  float fv[4] = {eps, 0, 0, 0};
  s.dtype = act_dtype(ctx);
  uint32_t y;
  if (!add_norm(ctx, in, s, eps, &y)) return RG_NONE;
  return y ? rg__handle(ctx, y) : emit1(ctx, RG_OP_LAYERNORM, in, s, NULL, fv);
}

rg_tensor rg_rmsnorm(rg_ctx *ctx, rg_tensor x, rg_tensor gamma, float eps) {
  const char *call = "rg_rmsnorm";
  uint32_t in[2];
  if (!ctx || !operand(ctx, x, call, 1, F32_ONLY, &in[0]) ||
      !optional(ctx, gamma, call, 2, &in[1]) || !widen(ctx, in, 2))
    return RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]);
  if (s.ndim < 1)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "x has no axes; it normalises the last"), RG_NONE;
  if (!vector_of(ctx, call, in[1], s.dims[s.ndim - 1], "gamma")) return RG_NONE;
  if (!(eps >= 0))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "eps %g must be >= 0", eps), RG_NONE;
  float fv[4] = {eps, 0, 0, 0};
  s.dtype = act_dtype(ctx);
  return emit1(ctx, RG_OP_RMSNORM, in, s, NULL, fv);
}

rg_tensor rg_embedding(rg_ctx *ctx, rg_tensor table, rg_tensor idx) {
  const char *call = "rg_embedding";
  uint32_t in[2];
  if (!ctx || !operand(ctx, table, call, 1, F32_ONLY, &in[0]) ||
      !operand(ctx, idx, call, 2, I32_ONLY, &in[1]) || !widen(ctx, in, 1))
    return RG_NONE;
  rg_shape st = rg__shape(ctx, in[0]), si = rg__shape(ctx, in[1]), o = si;
  if (st.ndim != 2)
    return shape_error(ctx, call, "do not fit: the table must be [V, C]", &st, &si), RG_NONE;
  if (si.ndim >= RG_MAX_DIMS)
    return shape_error(ctx, call, "do not fit: the indices may have at most 3 axes", &st, &si),
           RG_NONE;
  o.dtype = RG_F32;
  o.dims[o.ndim++] = st.dims[1];
  return emit1(ctx, RG_OP_EMBEDDING, in, o, NULL, NULL);
}

/* Either attention op on its n inputs: out o of shape so and the log-sum-exp of each
   query row, [B,H,T], which the backward reads instead of running the forward again. The
   inputs are all F32 or all BF16 (rg_options.bf16 casts F32 ones to BF16), o their
   dtype: BF16 runs the products on bf16 tensor cores (ops.h). */
static rg_tensor attention_emit(rg_ctx *ctx, const char *call, rg_op op, uint32_t *in, int n,
                                rg_shape so, int64_t heads, int causal) {
  for (int j = 1; j < n; j++)
    if (rg__t(ctx, in[j])->dtype != rg__t(ctx, in[0])->dtype && !ctx->opt.bf16)
      return rg__fail(ctx, RG_ERR_MISUSE, call, "operand 1 is %s and operand %d is %s; q, "
                      "k and v are all F32 or all BF16 — rg_cast them, or open the context "
                      "with rg_options.bf16 = 1", rg__dtype_name(rg__t(ctx, in[0])->dtype),
                      j + 1, rg__dtype_name(rg__t(ctx, in[j])->dtype)), RG_NONE;
  if (!autocast(ctx, in, n)) return RG_NONE;
  int64_t T = op == RG_OP_ATTENTION ? so.dims[2] : so.dims[1];
  so.dtype = rg__t(ctx, in[0])->dtype;
  rg_shape outs[2] = {so, {RG_F32, 3, {so.dims[0], heads, T}}};
  int64_t iv[4] = {causal != 0, op == RG_OP_ATTENTION ? 0 : heads, 0, 0};
  return emit_main(ctx, op, in, outs, iv);
}

/* rg_attention_mask's masks (ops.h's ATTENTION: in[3], in[4]) against q [B,H,T,D] and k
   [B,H,S,D]: key padding I32 [B,S]; a bias F32 of 1 to 4 axes that broadcasts to
   [B,H,T,S] and has no gradient to receive (the op computes none). */
static bool attention_masks(rg_ctx *ctx, const char *call, rg_shape sq, rg_shape sk,
                            const uint32_t *in) {
  rg_shape full = {RG_F32, 4, {sq.dims[0], sq.dims[1], sq.dims[2], sk.dims[2]}};
  if (in[3]) {
    rg_shape sp = rg__shape(ctx, in[3]);
    if (sp.ndim != 2 || sp.dims[0] != sq.dims[0] || sp.dims[1] != sk.dims[2])
      return shape_error(ctx, call, "do not fit: the key padding must be [B,S] for q "
                         "[B,H,T,D] and k [B,H,S,D] (the first shape is the padding's, the "
                         "second [B,H,T,S])", &sp, &full);
  }
  if (!in[4]) return true;
  rg_shape sb = rg__shape(ctx, in[4]);
  bool fits = sb.ndim >= 1;
  for (int i = 1; fits && i <= sb.ndim; i++)
    fits = sb.dims[sb.ndim - i] == 1 || sb.dims[sb.ndim - i] == full.dims[4 - i];
  if (!fits)
    return shape_error(ctx, call, "do not fit: the bias must broadcast to [B,H,T,S] (1 to 4 "
                       "axes, each the size of that axis or 1, aligned from the right; the "
                       "second shape is [B,H,T,S])", &sb, &full);
  if (rg__t(ctx, in[4])->flags & RG_T_GRAD) {
    rg__fail(ctx, RG_ERR_MISUSE, call, "the bias (operand 5) requires a gradient, which "
             "this op does not compute — pass rg_detach of it (or a constant, an input)");
    return false;
  }
  return true;
}

rg_tensor rg_attention(rg_ctx *ctx, rg_tensor q, rg_tensor k, rg_tensor v, int causal) {
  return rg_attention_mask(ctx, q, k, v, causal, RG_NONE, RG_NONE);
}

rg_tensor rg_attention_mask(rg_ctx *ctx, rg_tensor q, rg_tensor k, rg_tensor v, int causal,
                            rg_tensor key_padding, rg_tensor bias) {
  const char *call = key_padding.id || bias.id ? "rg_attention_mask" : "rg_attention";
  uint32_t in[5] = {0};
  if (!ctx || !operand(ctx, q, call, 1, ANY_FLOAT, &in[0]) ||
      !operand(ctx, k, call, 2, ANY_FLOAT, &in[1]) ||
      !operand(ctx, v, call, 3, ANY_FLOAT, &in[2]) ||
      (key_padding.id && !operand(ctx, key_padding, call, 4, I32_ONLY, &in[3])) ||
      !optional(ctx, bias, call, 5, &in[4]))
    return RG_NONE;
  rg_shape sq = rg__shape(ctx, in[0]), sk = rg__shape(ctx, in[1]), sv = rg__shape(ctx, in[2]);
  if (sq.ndim != 4 || sk.ndim != 4 || sv.ndim != 4)
    return shape_error(ctx, call, "do not fit: q, k and v must be [B,H,T,D]", &sq, &sk),
           RG_NONE;
  if (sq.dims[0] != sk.dims[0] || sq.dims[1] != sk.dims[1] || sq.dims[3] != sk.dims[3])
    return shape_error(ctx, call, "do not fit: q and k must agree on B, H and D", &sq, &sk),
           RG_NONE;
  if (memcmp(sk.dims, sv.dims, sizeof sk.dims))
    return shape_error(ctx, call, "do not fit: k and v must have the same shape", &sk, &sv),
           RG_NONE;
  if (!attention_masks(ctx, call, sq, sk, in) || !widen(ctx, &in[4], 1)) return RG_NONE;
  return attention_emit(ctx, call, RG_OP_ATTENTION, in, 3, sq, sq.dims[1], causal);
}

rg_tensor rg_attention_qkv(rg_ctx *ctx, rg_tensor qkv, int64_t heads, int causal) {
  const char *call = "rg_attention_qkv";
  uint32_t in[1];
  if (!ctx || !operand(ctx, qkv, call, 1, ANY_FLOAT, &in[0])) return RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]);
  if (s.ndim != 3 || heads <= 0 || s.dims[2] % (3 * heads)) { /* formatted only on misuse */
    char b[96];
    rg__fmt_shape(b, sizeof b, s.ndim, s.dims);
    if (s.ndim != 3)
      return rg__fail(ctx, RG_ERR_MISUSE, call, "qkv is %s but must be [B,T,3C] (q, k and "
                      "v side by side on the last axis, as a fused projection makes them)",
                      b), RG_NONE;
    if (heads <= 0)
      return rg__fail(ctx, RG_ERR_MISUSE, call, "heads %lld must be positive",
                      (long long)heads), RG_NONE;
    return rg__fail(ctx, RG_ERR_MISUSE, call, "qkv is %s: its last axis %lld must be 3C with "
                    "C a multiple of heads %lld (q, k and v of C = heads x D columns each)",
                    b, (long long)s.dims[2], (long long)heads), RG_NONE;
  }
  s.dims[2] /= 3;
  return attention_emit(ctx, call, RG_OP_ATTENTION_QKV, in, 1, s, heads, causal);
}

static rg_tensor xent(rg_ctx *ctx, rg_tensor logits, rg_tensor targets, int has_ignore,
                      int ignore) {
  const char *call = has_ignore ? "rg_cross_entropy_ignore" : "rg_cross_entropy";
  uint32_t in[3] = {0}; /* in[2]: the fused backward's g (ops.h) */
  if (!ctx || !operand(ctx, logits, call, 1, ANY_FLOAT, &in[0]) ||
      !operand(ctx, targets, call, 2, I32_ONLY, &in[1]))
    return RG_NONE;
  rg_shape sl = rg__shape(ctx, in[0]), st = rg__shape(ctx, in[1]);
  bool ok = sl.ndim >= 1 && st.ndim == sl.ndim - 1 &&
            !memcmp(sl.dims, st.dims, sizeof(int64_t) * (size_t)st.ndim);
  if (!ok)
    return shape_error(ctx, call, "do not fit: logits are [..., C] and targets [...] (the "
                       "logits' shape without its last axis)", &sl, &st), RG_NONE;
  int64_t iv[4] = {has_ignore, ignore, 0, 0}, rows = 1;
  for (int i = 0; i < st.ndim; i++) rows *= st.dims[i];
  /* the loss, and the row statistics its backward reads; dlogits only fused (ops.h) */
  rg_shape o[3] = {{RG_F32, 0, {0}}, {RG_F32, 2, {rows + 1, 2}}, {0, -1, {0}}};
  return emit_main(ctx, RG_OP_CROSS_ENTROPY, in, o, iv);
}
rg_tensor rg_cross_entropy(rg_ctx *c, rg_tensor l, rg_tensor t) { return xent(c, l, t, 0, 0); }
rg_tensor rg_cross_entropy_ignore(rg_ctx *c, rg_tensor l, rg_tensor t, int ignore_index) {
  return xent(c, l, t, 1, ignore_index);
}

rg_tensor rg_mse(rg_ctx *ctx, rg_tensor pred, rg_tensor target) {
  uint32_t in[2];
  if (!ctx || !operand(ctx, pred, "rg_mse", 1, F32_ONLY, &in[0]) ||
      !operand(ctx, target, "rg_mse", 2, F32_ONLY, &in[1]) || !widen(ctx, in, 2))
    return RG_NONE;
  rg_shape a = rg__shape(ctx, in[0]), b = rg__shape(ctx, in[1]);
  if (a.ndim != b.ndim || memcmp(a.dims, b.dims, sizeof(int64_t) * (size_t)a.ndim))
    return shape_error(ctx, "rg_mse", "differ; pred and target must have the same shape", &a,
                       &b), RG_NONE;
  rg_shape o = {RG_F32, 0, {0}};
  return emit1(ctx, RG_OP_MSE, in, o, NULL, NULL);
}

/* ---- shape ops --------------------------------------------------------------------------- */

rg_tensor rg_reshape(rg_ctx *ctx, rg_tensor x, int ndim, const int64_t *dims) {
  const char *call = "rg_reshape";
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, call, 1, ANY, &in[0])) return RG_NONE;
  if (ndim < 0 || ndim > RG_MAX_DIMS || (ndim && !dims))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "ndim %d is outside [0, %d] or dims is NULL", ndim,
                    RG_MAX_DIMS), RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]), o = {s.dtype, ndim, {0}};
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < ndim; i++) {
    o.dims[i] = dims[i];
    if (dims[i] == -1 && infer < 0) infer = i;
    else if (dims[i] < 0)
      return rg__fail(ctx, RG_ERR_MISUSE, call, "dims[%d] is %lld; sizes are >= 0 and one may "
                      "be -1 (inferred)", i, (long long)dims[i]), RG_NONE;
    else known *= dims[i];
  }
  int64_t n = numel_of(&s);
  if (infer >= 0 && known > 0 && n % known == 0) o.dims[infer] = n / known;
  if (numel_of(&o) != n || (infer >= 0 && known == 0))
    return shape_error(ctx, call, "hold different numbers of elements", &s, &o), RG_NONE;
  uint32_t r = rg__reshape(ctx, in[0], o);
  return r ? rg__handle(ctx, r) : RG_NONE;
}

uint32_t rg__reshape(rg_ctx *ctx, uint32_t x, rg_shape s) {
  if (x >> 31) { /* persistent: a copy, so later in-place updates do not show through */
    uint32_t in[RG_MAX_IN] = {x, 0, 0, 0}, out[RG_MAX_OUT] = {0};
    return rg__emit(ctx, RG_OP_COPY, in, &s, NULL, NULL, NULL, out) == RG_OK ? out[0] : 0;
  }
  if (!rg__record(ctx, RG_OP_COPY)) return 0;
  uint32_t v = rg__view(ctx, x, s, "rg_reshape");
  if (!v) {
    ctx->n_nodes--;
    return 0;
  }
  rg_node *n = &ctx->nodes[ctx->n_nodes - 1];
  n->in[0] = x;
  n->out[0] = v;
  return rg__commit(ctx, n) == RG_OK ? v : 0;
}

rg_tensor rg_permute(rg_ctx *ctx, rg_tensor x, const int *perm) {
  const char *call = "rg_permute";
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, call, 1, ANY, &in[0])) return RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]), o = s;
  int64_t iv[4] = {0, 1, 2, 3};
  unsigned seen = 0;
  for (int i = 0; i < s.ndim; i++) {
    int p = perm ? perm[i] : -1;
    if (p < 0 || p >= s.ndim || (seen >> p & 1))
      return rg__fail(ctx, RG_ERR_MISUSE, call, "perm is not a permutation of 0..%d (entry "
                      "%d is %d)", s.ndim - 1, i, p), RG_NONE;
    seen |= 1u << p;
    iv[i] = p;
    o.dims[i] = s.dims[p];
  }
  return emit1(ctx, RG_OP_PERMUTE, in, o, iv, NULL);
}

rg_tensor rg_transpose(rg_ctx *ctx, rg_tensor x, int axis0, int axis1) {
  uint32_t ref;
  if (!ctx || !operand(ctx, x, "rg_transpose", 1, ANY, &ref)) return RG_NONE;
  int nd = rg__t(ctx, ref)->ndim;
  int a = norm_axis(ctx, "rg_transpose", axis0, nd), b = a < 0 ? -1 :
          norm_axis(ctx, "rg_transpose", axis1, nd);
  if (a < 0 || b < 0) return RG_NONE;
  int perm[RG_MAX_DIMS] = {0, 1, 2, 3};
  perm[a] = b;
  perm[b] = a;
  return rg_permute(ctx, x, perm);
}

rg_tensor rg_slice(rg_ctx *ctx, rg_tensor x, int axis, int64_t start, int64_t len) {
  const char *call = "rg_slice";
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, call, 1, ANY, &in[0])) return RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]), o = s;
  int a = norm_axis(ctx, call, axis, s.ndim);
  if (a < 0) return RG_NONE;
  if (start < 0 || len < 0 || start > s.dims[a] - len)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "start %lld and length %lld do not fit axis %d "
                    "of size %lld", (long long)start, (long long)len, axis, (long long)s.dims[a]),
           RG_NONE;
  o.dims[a] = len;
  int64_t iv[4] = {a, start, len, 0};
  return emit1(ctx, RG_OP_SLICE, in, o, iv, NULL);
}

rg_tensor rg_concat(rg_ctx *ctx, rg_tensor a, rg_tensor b, int axis) {
  const char *call = "rg_concat";
  uint32_t in[2];
  if (!ctx || !operand(ctx, a, call, 1, ANY, &in[0]) || !operand(ctx, b, call, 2, ANY, &in[1]))
    return RG_NONE;
  rg_shape sa = rg__shape(ctx, in[0]), sb = rg__shape(ctx, in[1]), o = sa;
  int ax = norm_axis(ctx, call, axis, sa.ndim);
  if (ax < 0) return RG_NONE;
  bool ok = sa.ndim == sb.ndim && sa.dtype == sb.dtype;
  for (int i = 0; ok && i < sa.ndim; i++) ok = i == ax || sa.dims[i] == sb.dims[i];
  if (!ok)
    return shape_error(ctx, call, "cannot be joined: same dtype, same number of axes and "
                       "equal sizes except on the joining axis", &sa, &sb), RG_NONE;
  o.dims[ax] += sb.dims[ax];
  int64_t iv[4] = {ax, 0, 0, 0};
  return emit1(ctx, RG_OP_CONCAT, in, o, iv, NULL);
}

/* The step counter dropout reads, kept on the device and written once per step by an
   upload from staging: a captured graph then replays with each new step's masks. */
static uint32_t step_tensor(rg_ctx *ctx) {
  if (!ctx->rngstep) {
    int64_t two = 2;
    uint32_t r = rg__new(ctx, RG_POOL_PERSISTENT, RG_I32, 1, &two, "rg_dropout");
    if (!r) return 0;
    ctx->rngstep = r;
    ctx->rngstep_gen = 0;
  }
  if (ctx->rngstep_gen == ctx->pool[RG_POOL_PASS].gen) return ctx->rngstep;
  uint64_t *stage = rg__stage_copy(ctx, &ctx->step, sizeof ctx->step);
  if (!stage) return rg__fail(ctx, RG_ERR_OOM, "rg_dropout", "out of staging memory"), 0;
  if (!rg__record(ctx, RG_OP_UPLOAD)) return 0;
  rg_node *n = &ctx->nodes[ctx->n_nodes - 1];
  n->out[0] = ctx->rngstep;
  n->i[1] = sizeof(uint64_t);
  n->aux = stage;
  rg__count_xfer(ctx, false, RG_SITE_RNG, sizeof(uint64_t));
  if (rg__commit(ctx, n) != RG_OK) return 0;
  ctx->rngstep_gen = ctx->pool[RG_POOL_PASS].gen;
  return ctx->rngstep;
}

rg_tensor rg_dropout(rg_ctx *ctx, rg_tensor x, float p) {
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, "rg_dropout", 1, F32_ONLY, &in[0])) return RG_NONE;
  if (!(p >= 0 && p < 1))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_dropout", "p %g is outside [0, 1)", p), RG_NONE;
  if (!ctx->training || p == 0) return x; /* as it is: no cast recorded */
  if (!widen(ctx, in, 1)) return RG_NONE;
  uint32_t ins[2] = {in[0], step_tensor(ctx)};
  if (!ins[1]) return RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]);
  int64_t iv[4] = {(int64_t)ctx->opt.seed, 0, (int64_t)ctx->rng_calls, 0}; /* step: ins[1] */
  float fv[4] = {p, 0, 0, 0};
  ctx->rng_calls += (uint64_t)numel_of(&s);
  return emit1(ctx, RG_OP_DROPOUT, ins, s, iv, fv);
}

rg_tensor rg_cast(rg_ctx *ctx, rg_tensor x, rg_dtype dtype) {
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, "rg_cast", 1, ANY, &in[0])) return RG_NONE;
  if (dtype != RG_F32 && dtype != RG_BF16 && dtype != RG_I32)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_cast", "dtype %d is not RG_F32, RG_BF16 or RG_I32",
                    (int)dtype), RG_NONE;
  rg_shape s = rg__shape(ctx, in[0]);
  s.dtype = dtype;
  return emit1(ctx, RG_OP_CAST, in, s, NULL, NULL);
}

rg_tensor rg_detach(rg_ctx *ctx, rg_tensor x) {
  uint32_t in[1];
  if (!ctx || !operand(ctx, x, "rg_detach", 1, ANY, &in[0])) return RG_NONE;
  int saved = ctx->no_grad;
  ctx->no_grad = 1;
  rg_tensor r = emit1(ctx, RG_OP_COPY, in, rg__shape(ctx, in[0]), NULL, NULL);
  ctx->no_grad = saved;
  return r;
}
