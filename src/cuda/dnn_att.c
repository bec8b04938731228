/*
 * dnn_att.c - cuDNN's fused flash attention through cuDNN's backend C API (see dnn_att.h).
 *
 * cuDNN 9 has no "attention" call in its C API that takes a causal mask (9.13+ has
 * SDPA_FWD/SDPA_BWD operations, but without a mask until later versions). What it has is
 * a fused attention engine that recognises an operation graph of generic operations
 * (MATMUL, POINTWISE, REDUCTION, RESHAPE) in the shape the C++ cudnn-frontend emits for
 * its SDPA nodes, and runs the whole graph as one flash-attention kernel. So this file
 * builds that graph, op for op and dtype for dtype as the frontend's composite SDPA
 * forward and backward nodes do (include/cudnn_frontend/node/
 * scaled_dot_product_flash_attention.h, softmax.h, utils/attn_score_modifiers.h), asks
 * cuDNN's heuristics for an engine, and keeps the execution plan.
 *
 * Conventions the engine expects (from the frontend):
 *  - K enters the graph as K^T: a [B,H,D,T] tensor with K's row and column strides
 *    swapped; the backward takes V as V^T the same way. Transposes of intermediates are
 *    RESHAPE operations whose output has swapped strides.
 *  - Intermediates are virtual tensors, f32 (the frontend's "intermediate" type), except
 *    the operands that feed a GEMM's A side after the softmax (P for O = P V, P^T and
 *    dS^T in the backward), which are bf16. Compute type is f32 everywhere, INT32 for
 *    index generation, BOOLEAN for the comparison of the causal mask.
 *  - Scalars (the scale, -inf, 1) are 1x1x1x1 f32 tensors "by value": the variant pack
 *    carries host pointers to them, and the kernel gets the value as a parameter.
 *  - Every tensor is declared 16-byte aligned.
 *
 * Determinism. The frontend's sdpa_backward set_deterministic_algorithm(true) does not
 * pick an engine knob on Hopper: it changes the graph. By default the frontend makes the
 * dQ GEMM write an f32 dQ accumulator (a non-virtual tensor in its workspace, into which
 * the key blocks add as they finish) that an IDENTITY op then copies to dQ. Deterministic
 * (or with dBias) it drops the accumulator and writes dQ = dS K straight into dQ, which
 * the engine runs as its "dP workspace" form: dS goes through the workspace and dQ is
 * an ordered GEMM. This file always builds that form, and on top of it skips any engine
 * configuration cuDNN flags CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC. The accumulator form
 * gives different dQ bits from run to run wherever there are several key blocks, this
 * form the same bits every time, at the cost of a larger workspace and a slower backward
 * (both forms run the same engine). At T <= 128 there is one key block and both are
 * reproducible. The workspace is B*H*T'^2 * 2 bytes, T' =
 * T rounded up to 128. (On Blackwell the frontend also pins engine 5 or 17 with fixed
 * knobs, and from cuDNN 9.25 it can opt in to an ordered-dQ knob on Hopper with a
 * workspace linear in T: neither is done here.)
 *
 * The backward also needs delta = rowsum(dO * O) (= sum_j P_tj dP_tj). The frontend
 * makes it a non-virtual f32 [B,H,T,1] tensor in its own part of the workspace; here it
 * sits at the start of the caller's workspace, cuDNN's workspace after it.
 *
 * Build failures are cached too, so a shape cuDNN refuses costs one build attempt.
 */
#include "dnn_att.h"

#include <cudnn.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXDESC 160 /* descriptors one plan keeps (the causal backward: about 70) */
#define MAXOPS 40
#define MAXCFG 64 /* heuristic results looked at */

typedef cudnnBackendDescriptor_t desc;

/* Unique ids of the non-virtual tensors (the variant pack's keys); virtual ones follow. */
enum {
  UID_Q = 1, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DQ, UID_DK, UID_DV,
  UID_DELTA, UID_SCALE, UID_ONE, UID_NEGINF, UID_VIRTUAL = 100
};

typedef struct plan {
  struct plan *next;
  rg_dnn_att a; /* the key, with bwd */
  int bwd;
  int status;       /* RG_DNN_OK, or why the build failed (cached) */
  char why[768];    /* the build failure's message */
  desc d[MAXDESC];  /* every descriptor made for this plan, destroyed together */
  int nd;
  desc ops[MAXOPS]; /* the graph's operations, in order */
  int nops;
  desc exec;        /* the execution plan */
  int64_t ws;       /* cuDNN's workspace bytes */
  size_t head;      /* bytes of ours at the workspace's start (backward: delta) */
  float scale, one, neginf; /* by-value scalars: the variant pack points at these */
  int64_t uid;              /* next virtual tensor's id */
} plan;

struct rg_dnn {
  cudnnHandle_t h;
  size_t version; /* cudnnGetVersion(), e.g. 91900 */
  plan *plans;
};

/* ---- messages ------------------------------------------------------------------------ */

static void say(char *msg, size_t cap, const char *fmt, ...) {
  if (!msg || !cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
}

/* cuDNN's NOT_SUPPORTED family (3000..3999) means "no engine does this": the caller's own
   kernels should run. Anything else is an error. */
static int status_of(cudnnStatus_t s) {
  return (s / 1000) * 1000 == CUDNN_STATUS_NOT_SUPPORTED ? RG_DNN_UNSUPPORTED : RG_DNN_ERROR;
}

/* "call failed: CUDNN_STATUS_X (cuDNN's last error text)" */
static void say_cudnn(char *msg, size_t cap, cudnnStatus_t s, const char *call) {
  char last[512];
  last[0] = 0;
  cudnnGetLastErrorString(last, sizeof last);
  say(msg, cap, "%s failed: %s%s%s", call, cudnnGetErrorString(s), last[0] ? ": " : "", last);
}

/* ---- building descriptors ---------------------------------------------------------------
   Each helper does nothing once the plan has failed, so the graph code below reads as a
   straight list and the first failure is the one reported. */

static int failed(plan *p, cudnnStatus_t s, const char *call) {
  if (p->status) return 0;
  char c[256];
  snprintf(c, sizeof c, "%s (%s of a [%lld,%lld,%lld,%lld]%s attention)", call,
           p->bwd ? "backward" : "forward", (long long)p->a.B, (long long)p->a.H,
           (long long)p->a.T, (long long)p->a.D, p->a.causal ? " causal" : "");
  say_cudnn(p->why, sizeof p->why, s, c);
  p->status = status_of(s);
  return 0;
}

static desc make(plan *p, cudnnBackendDescriptorType_t t) {
  desc x = NULL;
  if (p->status) return NULL;
  if (p->nd == MAXDESC) {
    snprintf(p->why, sizeof p->why, "dnn_att: more than %d cuDNN descriptors", MAXDESC);
    p->status = RG_DNN_ERROR;
    return NULL;
  }
  cudnnStatus_t s = cudnnBackendCreateDescriptor(t, &x);
  if (s != CUDNN_STATUS_SUCCESS) return failed(p, s, "cudnnBackendCreateDescriptor"), NULL;
  return p->d[p->nd++] = x;
}

#define SET(p, x, attr, type, n, val) set(p, x, attr, type, n, val, #attr)
static void set(plan *p, desc x, cudnnBackendAttributeName_t attr,
                cudnnBackendAttributeType_t type, int64_t n, const void *val, const char *name) {
  if (p->status) return;
  cudnnStatus_t s = cudnnBackendSetAttribute(x, attr, type, n, val);
  if (s != CUDNN_STATUS_SUCCESS) {
    char c[160];
    snprintf(c, sizeof c, "cudnnBackendSetAttribute(%s)", name);
    failed(p, s, c);
  }
}

static void finalize(plan *p, desc x, const char *what) {
  if (p->status) return;
  cudnnStatus_t s = cudnnBackendFinalize(x);
  if (s != CUDNN_STATUS_SUCCESS) {
    char c[160];
    snprintf(c, sizeof c, "cudnnBackendFinalize(%s)", what);
    failed(p, s, c);
  }
}

static void add_op(plan *p, desc op, const char *what) {
  finalize(p, op, what);
  if (p->status) return;
  if (p->nops == MAXOPS) {
    snprintf(p->why, sizeof p->why, "dnn_att: more than %d operations", MAXOPS);
    p->status = RG_DNN_ERROR;
    return;
  }
  p->ops[p->nops++] = op;
}

/* ---- tensors ------------------------------------------------------------------------- */

typedef struct {
  int64_t d[4], s[4];
} shape;

static shape dense(int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
  shape x = {{n0, n1, n2, n3}, {n1 * n2 * n3, n2 * n3, n3, 1}};
  return x;
}

/* [B,H,T,D] through a layout */
static shape rows(const rg_dnn_att *a, rg_dnn_lay l) {
  shape x = {{a->B, a->H, a->T, a->D}, {l.b, l.h, l.r, 1}};
  return x;
}

/* The same tensor seen transposed, [B,H,D,T]: rows become columns by strides alone. */
static shape cols(const rg_dnn_att *a, rg_dnn_lay l) {
  shape x = {{a->B, a->H, a->D, a->T}, {l.b, l.h, 1, l.r}};
  return x;
}

/* [B,H,T,T] scores stored transposed: element (t, j) read as (j, t). */
static shape transposed(int64_t B, int64_t H, int64_t T) {
  shape x = {{B, H, T, T}, {H * T * T, T * T, 1, T}};
  return x;
}

static desc tensor(plan *p, int64_t uid, cudnnDataType_t type, shape sh, bool virt,
                   bool by_value) {
  desc x = make(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t align = 16;
  bool yes = true;
  SET(p, x, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  SET(p, x, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, sh.d);
  SET(p, x, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, sh.s);
  SET(p, x, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  SET(p, x, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (virt) SET(p, x, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  if (by_value) SET(p, x, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  char name[40];
  snprintf(name, sizeof name, "tensor uid %lld", (long long)uid);
  finalize(p, x, name);
  return x;
}

/* An intermediate: lives only inside the fused kernel. */
static desc virt(plan *p, cudnnDataType_t type, shape sh) {
  return tensor(p, p->uid++, type, sh, true, false);
}

/* A host scalar broadcast over everything (the variant pack points at a float of p). */
static desc scalar(plan *p, int64_t uid) {
  return tensor(p, uid, CUDNN_DATA_FLOAT, dense(1, 1, 1, 1), false, true);
}

/* ---- operations ---------------------------------------------------------------------- */

/* y = mode(x, b, t) elementwise with broadcasting; b and t may be NULL (unary modes),
   axis only matters to GEN_INDEX. prec: the compute type. */
static desc pointwise(plan *p, const char *what, cudnnPointwiseMode_t mode,
                      cudnnDataType_t prec, int64_t axis, desc x, desc b, desc t, desc y) {
  desc pw = make(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  SET(p, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  SET(p, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  if (mode == CUDNN_POINTWISE_GEN_INDEX)
    SET(p, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  finalize(p, pw, what);
  desc op = make(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  SET(p, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
      &pw);
  SET(p, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b) SET(p, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  if (t) SET(p, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
  SET(p, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  add_op(p, op, what);
  return y;
}

/* The common cases: f32 math on one or two inputs. */
static desc pw1(plan *p, const char *what, cudnnPointwiseMode_t mode, desc x, desc y) {
  return pointwise(p, what, mode, CUDNN_DATA_FLOAT, 0, x, NULL, NULL, y);
}
static desc pw2(plan *p, const char *what, cudnnPointwiseMode_t mode, desc x, desc b, desc y) {
  return pointwise(p, what, mode, CUDNN_DATA_FLOAT, 0, x, b, NULL, y);
}

/* A descriptor of type t with one attribute set (a compute type), finalized. */
static desc with1(plan *p, cudnnBackendDescriptorType_t t, cudnnBackendAttributeName_t attr,
                  cudnnBackendAttributeType_t type, const void *val, const char *what) {
  desc x = make(p, t);
  set(p, x, attr, type, 1, val, what);
  finalize(p, x, what);
  return x;
}

/* An operation of type t whose n descriptor attributes names[i] are ds[i], added. */
static void link(plan *p, const char *what, cudnnBackendDescriptorType_t t, int n,
                 const cudnnBackendAttributeName_t *names, const desc *ds) {
  desc op = make(p, t);
  for (int i = 0; i < n; i++) set(p, op, names[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ds[i], what);
  add_op(p, op, what);
}

static const cudnnDataType_t f32_type = CUDNN_DATA_FLOAT;

/* c = a b over the last two dimensions, batched over the first two; f32 accumulation. */
static desc matmul(plan *p, const char *what, desc a, desc b, desc c) {
  static const cudnnBackendAttributeName_t names[4] = {
      CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_ATTR_OPERATION_MATMUL_BDESC,
      CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_ATTR_OPERATION_MATMUL_DESC};
  desc mm = with1(p, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE,
                  CUDNN_TYPE_DATA_TYPE, &f32_type, what);
  link(p, what, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 4, names, (desc[]){a, b, c, mm});
  return c;
}

/* y = reduction of x over the dimensions where y has size 1 (here: the last). */
static desc reduce(plan *p, const char *what, cudnnReduceTensorOp_t how, desc x, desc y) {
  static const cudnnBackendAttributeName_t names[3] = {
      CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_ATTR_OPERATION_REDUCTION_YDESC,
      CUDNN_ATTR_OPERATION_REDUCTION_DESC};
  desc r = make(p, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  SET(p, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
  SET(p, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32_type);
  finalize(p, r, what);
  link(p, what, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 3, names, (desc[]){x, y, r});
  return y;
}

/* y = x re-described (here: transposed through y's strides). */
static desc reshape(plan *p, const char *what, desc x, desc y) {
  static const cudnnBackendAttributeName_t names[2] = {CUDNN_ATTR_OPERATION_RESHAPE_XDESC,
                                                       CUDNN_ATTR_OPERATION_RESHAPE_YDESC};
  link(p, what, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2, names, (desc[]){x, y});
  return y;
}

/* Top-left causal mask on scores s [B,H,T,T]: s where row >= col, else -inf. The
   frontend's form: two index generators (INT32), a CMP_GE to a BOOLEAN mask, and a
   BINARY_SELECT(s, -inf, mask), which picks s where the mask is true. */
static desc causal_mask(plan *p, desc s, desc neginf, shape sh) {
  desc row = pointwise(p, "causal: row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2,
                       s, NULL, NULL, virt(p, CUDNN_DATA_INT32, sh));
  desc col = pointwise(p, "causal: column index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32,
                       3, s, NULL, NULL, virt(p, CUDNN_DATA_INT32, sh));
  desc keep = pointwise(p, "causal: row >= column", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN,
                        0, row, col, NULL, virt(p, CUDNN_DATA_BOOLEAN, sh));
  return pointwise(p, "causal: select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, 0, s,
                   neginf, keep, virt(p, CUDNN_DATA_FLOAT, sh));
}

/* ---- the graphs ---------------------------------------------------------------------- */

#define F32 CUDNN_DATA_FLOAT
#define BF16 CUDNN_DATA_BFLOAT16

/* Forward: S = scale Q K^T (masked); softmax with its statistics, as the frontend's
   composite softmax writes it (max, subtract, exp, sum, then stats = max + log sum and
   P = exp / sum); O = P V with P in bf16. */
static void build_fwd(plan *p) {
  const rg_dnn_att *a = &p->a;
  shape btt = dense(a->B, a->H, a->T, a->T), bt1 = dense(a->B, a->H, a->T, 1);
  desc Q = tensor(p, UID_Q, BF16, rows(a, a->q), false, false);
  desc KT = tensor(p, UID_K, BF16, cols(a, a->k), false, false);
  desc V = tensor(p, UID_V, BF16, rows(a, a->v), false, false);
  desc O = tensor(p, UID_O, BF16, rows(a, a->o), false, false);
  desc stats = tensor(p, UID_STATS, F32, bt1, false, false);
  desc scale = scalar(p, UID_SCALE);

  desc s = matmul(p, "S = Q K^T", Q, KT, virt(p, F32, btt));
  s = pw2(p, "S * scale", CUDNN_POINTWISE_MUL, s, scale, virt(p, F32, btt));
  if (a->causal) s = causal_mask(p, s, scalar(p, UID_NEGINF), btt);

  desc m = reduce(p, "softmax: m = max S", CUDNN_REDUCE_TENSOR_MAX, s, virt(p, F32, bt1));
  desc e = pw2(p, "softmax: S - m", CUDNN_POINTWISE_SUB, s, m, virt(p, F32, btt));
  e = pw1(p, "softmax: e = exp(S - m)", CUDNN_POINTWISE_EXP, e, virt(p, F32, btt));
  desc l = reduce(p, "softmax: l = sum e", CUDNN_REDUCE_TENSOR_ADD, e, virt(p, F32, bt1));
  desc logl = pw1(p, "softmax: log l", CUDNN_POINTWISE_LOG, l, virt(p, F32, bt1));
  pw2(p, "softmax: stats = m + log l", CUDNN_POINTWISE_ADD, m, logl, stats);
  desc P = pw2(p, "softmax: P = e / l", CUDNN_POINTWISE_DIV, e, l, virt(p, BF16, btt));

  matmul(p, "O = P V", P, V, O);
}

/* Backward, with P recomputed from the statistics (P = exp(scale Q K^T - stats), masked):
     delta = rowsum(dO * O)        (kept in our part of the workspace)
     dV    = P^T dO
     dS    = P * (dO V^T - delta) * scale
     dK    = dS^T Q
     dQ    = dS K                  (straight into dQ: the deterministic form)
   delta goes through a multiply by 1, as in the frontend (where it is the dropout
   scale's slot). */
static void build_bwd(plan *p) {
  const rg_dnn_att *a = &p->a;
  shape btt = dense(a->B, a->H, a->T, a->T), bt1 = dense(a->B, a->H, a->T, 1);
  shape btd = dense(a->B, a->H, a->T, a->D), tt = transposed(a->B, a->H, a->T);
  desc Q = tensor(p, UID_Q, BF16, rows(a, a->q), false, false);
  desc KT = tensor(p, UID_K, BF16, cols(a, a->k), false, false);
  desc VT = tensor(p, UID_V, BF16, cols(a, a->v), false, false);
  desc O = tensor(p, UID_O, BF16, rows(a, a->o), false, false);
  desc dO = tensor(p, UID_DO, BF16, rows(a, a->o), false, false);
  desc stats = tensor(p, UID_STATS, F32, bt1, false, false);
  desc dQ = tensor(p, UID_DQ, BF16, rows(a, a->q), false, false);
  desc dK = tensor(p, UID_DK, BF16, rows(a, a->k), false, false);
  desc dV = tensor(p, UID_DV, BF16, rows(a, a->v), false, false);
  desc delta = tensor(p, UID_DELTA, F32, bt1, false, false);
  desc scale = scalar(p, UID_SCALE), one = scalar(p, UID_ONE);

  desc x = pw2(p, "dO * O", CUDNN_POINTWISE_MUL, dO, O, virt(p, F32, btd));
  x = reduce(p, "rowsum(dO * O)", CUDNN_REDUCE_TENSOR_ADD, x, virt(p, F32, bt1));
  pw2(p, "delta = rowsum * 1", CUDNN_POINTWISE_MUL, x, one, delta);

  desc s = matmul(p, "S = Q K^T", Q, KT, virt(p, F32, btt));
  s = pw2(p, "S * scale", CUDNN_POINTWISE_MUL, s, scale, virt(p, F32, btt));
  s = pw2(p, "S - stats", CUDNN_POINTWISE_SUB, s, stats, virt(p, F32, btt));
  if (a->causal) s = causal_mask(p, s, scalar(p, UID_NEGINF), btt);
  desc P = pw1(p, "P = exp(S - stats)", CUDNN_POINTWISE_EXP, s, virt(p, F32, btt));

  desc PT = reshape(p, "P^T", P, virt(p, BF16, tt));
  matmul(p, "dV = P^T dO", PT, dO, dV);

  desc dP = matmul(p, "dP = dO V^T", dO, VT, virt(p, F32, btt));
  dP = pw2(p, "dP - delta", CUDNN_POINTWISE_SUB, dP, delta, virt(p, F32, btt));
  dP = pw2(p, "P * (dP - delta)", CUDNN_POINTWISE_MUL, dP, P, virt(p, F32, btt));
  desc dS = pw2(p, "dS = P * (dP - delta) * scale", CUDNN_POINTWISE_MUL, dP, scale,
                virt(p, F32, btt));

  desc dST = reshape(p, "dS^T", dS, virt(p, BF16, tt));
  matmul(p, "dK = dS^T Q", dST, Q, dK);

  desc K = reshape(p, "K = (K^T)^T", KT, virt(p, F32, rows(a, a->k)));
  matmul(p, "dQ = dS K", dS, K, dQ);
}

/* ---- engine choice ------------------------------------------------------------------- */

static bool nondeterministic(desc engine) {
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 8];
  int64_t n = 0;
  if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT + 8,
                               &n, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < n; i++)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return true;
  return false;
}

/* Heuristics (mode A, then FALLBACK) ranks engine configurations for the graph; the first
   one that is deterministic (when asked) and finalizes into an execution plan wins.
   Finalizing is where cuDNN compiles the kernel, and where it says what it cannot do. */
static void choose_engine(plan *p, cudnnHandle_t h, bool deterministic) {
  desc graph = make(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  SET(p, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  SET(p, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, p->nops, p->ops);
  finalize(p, graph, "operation graph");

  /* the first failure is kept: it is the most specific (later modes only add "none") */
  char last[768] = "cuDNN's heuristics offered no engine configuration";
  int last_status = RG_DNN_UNSUPPORTED, skipped = 0, have_last = 0;
  cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  for (int m = 0; m < 2 && !p->status && !p->exec; m++) {
    desc heur = make(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    SET(p, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    SET(p, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
    if (p->status) return;
    cudnnStatus_t s = cudnnBackendFinalize(heur);
    if (s != CUDNN_STATUS_SUCCESS) { /* this mode has nothing for the graph */
      if (!have_last++) {
        say_cudnn(last, sizeof last, s, "cudnnBackendFinalize(engine heuristics)");
        last_status = status_of(s);
      }
      continue;
    }
    int64_t n = 0;
    s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (s != CUDNN_STATUS_SUCCESS) {
      failed(p, s, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS, count)");
      return;
    }
    if (n > MAXCFG) n = MAXCFG;
    desc cfg[MAXCFG];
    int ncfg = 0;
    for (; ncfg < n; ncfg++) {
      s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[ncfg]);
      if (s != CUDNN_STATUS_SUCCESS) break;
    }
    int64_t got = 0;
    if (ncfg)
      s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, ncfg, &got, cfg);
    if (s != CUDNN_STATUS_SUCCESS) {
      failed(p, s, "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)");
      got = 0;
    }
    for (int64_t i = 0; i < got && i < ncfg && !p->exec && !p->status; i++) {
      desc engine = NULL, exec = NULL;
      int64_t c = 0;
      if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine)) break;
      if (cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, &engine) ==
              CUDNN_STATUS_SUCCESS &&
          deterministic && nondeterministic(engine)) {
        skipped++;
        cudnnBackendDestroyDescriptor(engine);
        continue;
      }
      s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &exec);
      if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                     &h);
      if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendSetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
      if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(exec);
      if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &c, &p->ws);
      if (s == CUDNN_STATUS_SUCCESS && p->nd + 2 <= MAXDESC) {
        p->d[p->nd++] = exec; /* the plan keeps its configuration */
        p->d[p->nd++] = cfg[i];
        cfg[i] = NULL;
        p->exec = exec;
      } else {
        if (!have_last++) {
          char c2[96];
          snprintf(c2, sizeof c2, "execution plan for heuristic result %lld", (long long)i);
          say_cudnn(last, sizeof last, s, c2);
          last_status = status_of(s);
        }
        if (exec) cudnnBackendDestroyDescriptor(exec);
      }
      cudnnBackendDestroyDescriptor(engine);
    }
    for (int i = 0; i < ncfg; i++)
      if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
  }
  if (p->status || p->exec) return;
  if (skipped)
    snprintf(p->why, sizeof p->why,
             "no deterministic cuDNN engine for this attention (%d nondeterministic skipped; "
             "last failure: %s)", skipped, last);
  else
    snprintf(p->why, sizeof p->why, "no cuDNN engine for this attention: %s", last);
  p->status = skipped ? RG_DNN_UNSUPPORTED : last_status;
}

/* ---- the cache ----------------------------------------------------------------------- */

static bool same_lay(rg_dnn_lay x, rg_dnn_lay y) {
  return x.b == y.b && x.h == y.h && x.r == y.r;
}

static bool same(const rg_dnn_att *x, const rg_dnn_att *y) {
  return x->B == y->B && x->H == y->H && x->T == y->T && x->D == y->D &&
         !x->causal == !y->causal && memcmp(&x->scale, &y->scale, sizeof x->scale) == 0 &&
         same_lay(x->q, y->q) && same_lay(x->k, y->k) && same_lay(x->v, y->v) &&
         same_lay(x->o, y->o);
}

/* What this module (or the cuDNN it runs on) does not do, before asking cuDNN. */
static int refuse(const rg_dnn *d, const rg_dnn_att *a, int bwd, char *msg, size_t cap) {
  const rg_dnn_lay *l[4] = {&a->q, &a->k, &a->v, &a->o};
  if (a->B < 1 || a->H < 1 || a->T < 1 || a->D < 1 || !isfinite(a->scale))
    return say(msg, cap, "dnn_att: bad attention shape B=%lld H=%lld T=%lld D=%lld",
               (long long)a->B, (long long)a->H, (long long)a->T, (long long)a->D),
           RG_DNN_ERROR;
  if (a->D % 8 || a->D > 128)
    return say(msg, cap, "dnn_att: head size %lld not supported (a multiple of 8, at most 128)",
               (long long)a->D),
           RG_DNN_UNSUPPORTED;
  for (int i = 0; i < 4; i++)
    if (l[i]->b % 8 || l[i]->h % 8 || l[i]->r % 8 || l[i]->b < 0 || l[i]->h < 0 || l[i]->r < 0)
      return say(msg, cap, "dnn_att: strides {%lld, %lld, %lld} not supported (non-negative "
                 "multiples of 8 elements)", (long long)l[i]->b, (long long)l[i]->h,
                 (long long)l[i]->r),
             RG_DNN_UNSUPPORTED;
  if (bwd && a->T == 1)
    return say(msg, cap, "dnn_att: cuDNN's attention backward does not do T = 1"),
           RG_DNN_UNSUPPORTED;
  /* Up to 9.15.0 the frontend hides a backward bug for key counts that are not a multiple
     of 128 behind a padding mask with per-batch lengths; that graph is not built here. */
  if (bwd && a->T % 128 && d->version <= 91500)
    return say(msg, cap, "dnn_att: cuDNN %zu's attention backward needs T %% 128 == 0 "
               "(T = %lld); 9.15.1 or later does any T", d->version, (long long)a->T),
           RG_DNN_UNSUPPORTED;
  return RG_DNN_OK;
}

static void free_plan(plan *p) {
  for (int i = p->nd - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->d[i]);
  p->nd = 0;
  p->exec = NULL;
}

/* The cached plan for (a, bwd), built on first use. NULL only when out of memory. */
static plan *get(rg_dnn *d, const rg_dnn_att *a, int bwd) {
  for (plan *p = d->plans; p; p = p->next)
    if (p->bwd == bwd && same(&p->a, a)) return p;
  plan *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->a = *a;
  p->bwd = bwd;
  p->uid = UID_VIRTUAL;
  p->scale = a->scale;
  p->one = 1.0f;
  /* The frontend masks with -inf from cuDNN 9.10 on, with the lowest float before. */
  p->neginf = d->version >= 91000 ? -INFINITY : -FLT_MAX;
  p->status = refuse(d, a, bwd, p->why, sizeof p->why);
  if (!p->status) {
    if (bwd) {
      build_bwd(p);
      p->head = ((size_t)(a->B * a->H * a->T) * sizeof(float) + 255) & ~(size_t)255;
    } else {
      build_fwd(p);
    }
    if (!p->status) choose_engine(p, d->h, bwd != 0);
  }
  if (p->status) free_plan(p); /* keep only the verdict */
  p->next = d->plans;
  d->plans = p;
  return p;
}

/* ---- the API ------------------------------------------------------------------------- */

int rg_dnn_open(rg_dnn **out, char *msg, size_t cap) {
  *out = NULL;
  size_t v = cudnnGetVersion();
  if (v < 90000)
    return say(msg, cap, "dnn_att: cuDNN %zu found, 9.0 or later needed", v),
           RG_DNN_UNSUPPORTED;
  if (v == 91000 || v == 91001) /* the frontend refuses both for known SDPA bugs */
    return say(msg, cap, "dnn_att: cuDNN %zu has known attention bugs; use 9.10.2 or later", v),
           RG_DNN_UNSUPPORTED;
  rg_dnn *d = calloc(1, sizeof *d);
  if (!d) return say(msg, cap, "dnn_att: out of memory"), RG_DNN_ERROR;
  cudnnStatus_t s = cudnnCreate(&d->h);
  if (s != CUDNN_STATUS_SUCCESS) {
    say_cudnn(msg, cap, s, "cudnnCreate");
    free(d);
    return status_of(s);
  }
  d->version = v;
  *out = d;
  return RG_DNN_OK;
}

void rg_dnn_close(rg_dnn *d) {
  if (!d) return;
  while (d->plans) {
    plan *p = d->plans;
    d->plans = p->next;
    free_plan(p);
    free(p);
  }
  cudnnDestroy(d->h);
  free(d);
}

static int ready(rg_dnn *d, const rg_dnn_att *a, int bwd, plan **out, char *msg, size_t cap) {
  *out = NULL;
  if (!d || !a) return say(msg, cap, "dnn_att: NULL handle or shape"), RG_DNN_ERROR;
  plan *p = get(d, a, bwd);
  if (!p) return say(msg, cap, "dnn_att: out of memory"), RG_DNN_ERROR;
  if (p->status) return say(msg, cap, "%s", p->why), p->status;
  *out = p;
  return RG_DNN_OK;
}

static int ws_bytes(rg_dnn *d, const rg_dnn_att *a, int bwd, size_t *bytes, char *msg,
                    size_t cap) {
  plan *p;
  int st = ready(d, a, bwd, &p, msg, cap);
  *bytes = st ? 0 : p->head + (size_t)p->ws;
  return st;
}

int rg_dnn_att_fwd_ws(rg_dnn *d, const rg_dnn_att *a, size_t *bytes, char *msg, size_t cap) {
  return ws_bytes(d, a, 0, bytes, msg, cap);
}

int rg_dnn_att_bwd_ws(rg_dnn *d, const rg_dnn_att *a, size_t *bytes, char *msg, size_t cap) {
  return ws_bytes(d, a, 1, bytes, msg, cap);
}

/* Binds the pointers to the plan's tensors (a variant pack) and enqueues it on s. */
static int run(rg_dnn *d, plan *p, cudaStream_t s, int n, const int64_t *uids, void **ptrs,
               void *ws, char *msg, size_t cap) {
  if ((p->ws || p->head) && (!ws || (uintptr_t)ws % 16))
    return say(msg, cap, "dnn_att: a 16-byte aligned workspace of %zu bytes is needed",
               p->head + (size_t)p->ws),
           RG_DNN_ERROR;
  for (int i = 0; i < n && uids[i] < UID_SCALE; i++) { /* the scalars are host floats */
    if (!ptrs[i]) return say(msg, cap, "dnn_att: tensor %lld is NULL", (long long)uids[i]),
                  RG_DNN_ERROR;
    if ((uintptr_t)ptrs[i] % 16)
      return say(msg, cap, "dnn_att: tensor %lld at %p is not 16-byte aligned",
                 (long long)uids[i], ptrs[i]),
             RG_DNN_UNSUPPORTED;
  }
  void *cudnn_ws = p->ws ? (char *)ws + p->head : NULL;
  cudnnStatus_t st = cudnnSetStream(d->h, s);
  if (st != CUDNN_STATUS_SUCCESS) return say_cudnn(msg, cap, st, "cudnnSetStream"), status_of(st);
  desc vp = NULL;
  const char *call = "cudnnBackendCreateDescriptor(variant pack)";
  st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (st == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendSetAttribute(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)";
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                                  uids);
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendSetAttribute(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)";
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                  n, ptrs);
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendSetAttribute(CUDNN_ATTR_VARIANT_PACK_WORKSPACE)";
    st = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                  &cudnn_ws);
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendFinalize(variant pack)";
    st = cudnnBackendFinalize(vp);
  }
  if (st == CUDNN_STATUS_SUCCESS) {
    call = p->bwd ? "cudnnBackendExecute(attention backward)"
                  : "cudnnBackendExecute(attention forward)";
    st = cudnnBackendExecute(d->h, p->exec, vp);
  }
  if (vp) cudnnBackendDestroyDescriptor(vp);
  if (st != CUDNN_STATUS_SUCCESS) return say_cudnn(msg, cap, st, call), RG_DNN_ERROR;
  return RG_DNN_OK;
}

int rg_dnn_att_fwd(rg_dnn *d, const rg_dnn_att *a, cudaStream_t s, const void *q,
                   const void *k, const void *v, void *o, float *stats, void *ws, char *msg,
                   size_t cap) {
  plan *p;
  int st = ready(d, a, 0, &p, msg, cap);
  if (st) return st;
  int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEGINF};
  void *ptrs[7] = {(void *)q, (void *)k, (void *)v, o, stats, &p->scale, &p->neginf};
  return run(d, p, s, a->causal ? 7 : 6, uids, ptrs, ws, msg, cap);
}

int rg_dnn_att_bwd(rg_dnn *d, const rg_dnn_att *a, cudaStream_t s, const void *q,
                   const void *k, const void *v, const void *o, const void *dO,
                   const float *stats, void *dq, void *dk, void *dv, void *ws, char *msg,
                   size_t cap) {
  plan *p;
  int st = ready(d, a, 1, &p, msg, cap);
  if (st) return st;
  int64_t uids[13] = {UID_Q,  UID_K,  UID_V,     UID_O,     UID_DO,  UID_STATS, UID_DQ,
                      UID_DK, UID_DV, UID_DELTA, UID_SCALE, UID_ONE, UID_NEGINF};
  void *ptrs[13] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dO, (void *)stats, dq,
                    dk,        dv,        ws,        &p->scale, &p->one,    &p->neginf};
  return run(d, p, s, a->causal ? 13 : 12, uids, ptrs, ws, msg, cap);
}
