/*
 * test_ops.c - every public op of resgrad.h on the CPU backend, one small test function
 * per op, run from a table.
 *
 * Each test checks (1) the forward result against a double-precision reference computed
 * here with plain loops, (2) the gradient with the public rg_gradcheck (central
 * differences) on a loss sum(op(params) * W), W a fixed table of weights with |w| in
 * [0.25, 1] so that every output element matters, through every op of its RG_COVERS list
 * in the table (covers.h: the test fails if its gradient checks' tapes miss one of them,
 * test_optable if an op that carries a gradient is in no list), and (3) edge shapes:
 * size-1 axes, T=1, a single row, zero-size tensors where they mean something. Bad shapes
 * and dtypes must give RG_ERR_MISUSE with a message naming the op, and the context must
 * keep working after rg_clear_error.
 *
 * Error measures, printed one line per op:
 *  - fwd:  worst |got - want| / max(1, |want|) over every compared element;
 *  - grad: worst |analytic - numeric| that rg_gradcheck reported.
 * Every tolerance is written next to its check with the reason for its size. Inputs of
 * ops with kinks (relu, clamp, max) are kept further than the finite-difference step
 * from the kink. Shapes are small so the whole run stays within seconds (also under ASan);
 * one extra test runs the ops on shapes past the kernels' parallel threshold and requires
 * bit-identical results (forward and gradients) for 1 and 2 threads.
 *
 * On POSIX each op's test runs in a child process, so a crash or a sanitizer report in
 * one op's kernel is that op's FAIL line and the others still run. `test_ops rg_add` runs
 * one test by its printed name. Exits non-zero if any check failed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "covers.h"

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>
#define RG_TEST_FORK 1
#endif

/* ---- bookkeeping ---------------------------------------------------------------------- */

static double g_fwd;  /* worst forward error of the running test */
static double g_grad; /* worst gradient error of the running test; < 0: none checked */
static unsigned char g_seen[RG_OP_COUNT]; /* ops the running test's gradient checks reach */

static void note_fwd(double e) {
  if (!(e <= g_fwd)) g_fwd = e; /* NaN sticks */
}
static void note_grad(double e) {
  if (!(e <= g_grad)) g_grad = e;
}

/* xorshift64*: the test's own deterministic data, reseeded per test. */
static uint64_t g_rng = 1;
static double urand(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
}
static float frand(double lo, double hi) { return (float)(lo + (hi - lo) * urand()); }
static void fill(float *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) x[i] = frand(lo, hi);
}
/* Magnitudes in [lo, hi], random signs: keeps values away from zero. */
static void fill_away(float *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) x[i] = frand(lo, hi) * (urand() < 0.5 ? -1.0f : 1.0f);
}

static int64_t prod(int nd, const int64_t *d) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= d[i];
  return n;
}

static const char *shp(char *buf, int nd, const int64_t *d) {
  int k = snprintf(buf, 64, "[");
  for (int i = 0; i < nd && k < 60; i++)
    k += snprintf(buf + k, 64 - (size_t)k, i ? ",%lld" : "%lld", (long long)d[i]);
  snprintf(buf + k, 64 - (size_t)k, "]");
  return buf;
}

/* ---- contexts and tensors ------------------------------------------------------------- */

static rg_ctx *open_ctx(void) {
  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1, .seed = 1};
  return open_cpu_opts(o);
}

static void close_ctx(rg_ctx *ctx) {
  if (!ctx) return;
  CHECK(rg_error(ctx) == RG_OK, "unexpected sticky error at the end of the test: %s",
        rg_errmsg(ctx));
  rg_status st = rg_close(ctx);
  CHECK(st == RG_OK, "rg_close -> %s", rg_status_str(st));
}

static rg_tensor input(rg_ctx *ctx, int nd, const int64_t *d, const float *x) {
  static const float dummy[1] = {0};
  rg_tensor t = rg_input(ctx, RG_F32, nd, d, x ? x : dummy);
  CHECK(t.id != 0, "rg_input failed: %s", rg_errmsg(ctx));
  return t;
}

static rg_tensor input_i32(rg_ctx *ctx, int nd, const int64_t *d, const int32_t *x) {
  static const int32_t dummy[1] = {0};
  rg_tensor t = rg_input(ctx, RG_I32, nd, d, x ? x : dummy);
  CHECK(t.id != 0, "rg_input(I32) failed: %s", rg_errmsg(ctx));
  return t;
}

/* A parameter holding x (zeros when x is NULL). Names only need to be unique. */
static rg_tensor param(rg_ctx *ctx, int nd, const int64_t *d, const float *x) {
  static int counter;
  char name[32];
  snprintf(name, sizeof name, "p%d", counter++);
  rg_tensor p = rg_param(ctx, name, RG_F32, nd, d, (rg_init){RG_INIT_ZEROS, 0, 0});
  CHECK(p.id != 0, "rg_param %s failed: %s", name, rg_errmsg(ctx));
  if (p.id && x) {
    rg_status st = rg_write(ctx, p, x, (size_t)prod(nd, d) * sizeof(float));
    CHECK(st == RG_OK, "rg_write -> %s: %s", rg_status_str(st), rg_errmsg(ctx));
  }
  return p;
}

static int has_shape(rg_ctx *ctx, rg_tensor t, int nd, const int64_t *d, const char *what) {
  char a[64], b[64];
  if (!t.id) {
    CHECK(0, "%s: the op returned RG_NONE: %s", what, rg_errmsg(ctx));
    return 0;
  }
  int n = rg_ndim(ctx, t);
  int64_t got[RG_MAX_DIMS] = {0};
  for (int i = 0; i < n && i < RG_MAX_DIMS; i++) got[i] = rg_dim(ctx, t, i);
  int ok = n == nd;
  for (int i = 0; ok && i < nd; i++) ok = got[i] == d[i];
  CHECK(ok, "%s: shape %s, want %s", what, shp(a, n, got), shp(b, nd, d));
  return ok;
}

/* Reads n F32 values (a barrier); 0 on failure. */
static int readf(rg_ctx *ctx, rg_tensor t, float *dst, int64_t n, const char *what) {
  float one;
  rg_status st = rg_read(ctx, t, n ? (void *)dst : (void *)&one, (size_t)n * sizeof(float));
  CHECK(st == RG_OK, "%s: rg_read -> %s: %s", what, rg_status_str(st), rg_errmsg(ctx));
  return st == RG_OK;
}

/* Worst |got - want| / max(1, |want|); a non-finite want must be matched exactly
   (NaN by NaN). Fails the check when above tol. */
static double cmp(const char *what, const float *got, const double *want, int64_t n,
                  double tol) {
  double worst = 0;
  int64_t at = -1;
  for (int64_t i = 0; i < n; i++) {
    double g = got[i], w = want[i], e;
    if (isnan(w)) e = isnan(g) ? 0 : INFINITY;
    else if (isinf(w)) e = g == w ? 0 : INFINITY;
    else e = fabs(g - w) / fmax(1.0, fabs(w));
    if (!(e <= worst)) {
      worst = e;
      at = i;
    }
  }
  note_fwd(worst);
  CHECK(worst <= tol, "%s: element %lld is %.9g, want %.9g (error %.3g > tol %.3g)", what,
        (long long)at, at >= 0 ? got[at] : 0.0, at >= 0 ? want[at] : 0.0, worst, tol);
  return worst;
}

/* Shape, read and compare in one. */
static void check_out(rg_ctx *ctx, rg_tensor y, int nd, const int64_t *d, const double *want,
                      double tol, const char *what) {
  if (!has_shape(ctx, y, nd, d, what)) return;
  int64_t n = prod(nd, d);
  float *got = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (readf(ctx, y, got, n, what)) cmp(what, got, want, n, tol);
  free(got);
}

/* Exact comparison of n floats (a gradient read back, a copy). */
static void check_exact(const char *what, const float *got, const float *want, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (got[i] != want[i] && !(isnan(got[i]) && isnan(want[i]))) {
      note_fwd(fabs((double)got[i] - want[i]));
      CHECK(0, "%s: element %lld is %.9g, want exactly %.9g", what, (long long)i, got[i],
            want[i]);
      return;
    }
  }
}

/* ---- the ops under test, callable from one place ------------------------------------- */

enum {
  O_ADD, O_SUB, O_MUL, O_DIV, O_SCALE, O_POW, O_NEG, O_EXP, O_LOG, O_SQRT, O_RELU, O_GELU,
  O_SILU, O_SIGMOID, O_TANH, O_CLAMP, O_SUM, O_MEAN, O_MAX, O_SOFTMAX, O_LOG_SOFTMAX,
  O_MATMUL, O_LINEAR, O_LINEAR_ACT, O_LAYERNORM, O_RMSNORM, O_EMBEDDING, O_ATTENTION, O_CE,
  O_CE_IGNORE, O_MSE, O_RESHAPE, O_TRANSPOSE, O_PERMUTE, O_SLICE, O_CONCAT, O_DROPOUT,
  O_ATTENTION_QKV, O_ATTENTION_SPLIT, O_CAST, O_ADD_SCALED, O_ADD_LAYERNORM, O_GELU_MLP,
  O_ATTENTION_MASK
};

/* One recorded call: operands p[] (parameters, or RG_NONE), baked scalars, and an I32 and
   an F32 operand (a constant: no gradient) uploaded afresh on every call (rg_gradcheck
   resets the pass pool per eval).
   retain: the loss is kept with rg_retain_grad, so its gradient's seed is a FILL node. */
typedef struct opcall {
  int op, retain;
  rg_tensor p[4];
  float f[2];
  int i[4];
  int nd;
  int64_t dims[RG_MAX_DIMS];
  const int32_t *ix;
  int ix_nd;
  int64_t ix_dims[RG_MAX_DIMS];
  const float *fx;
  int fx_nd;
  int64_t fx_dims[RG_MAX_DIMS];
} opcall;

/* What rg_attention_qkv(qkv, heads, causal) replaces: the heads split out of qkv
   [B,T,3C] by reshape, transpose and slices, rg_attention, and the result put back. */
static rg_tensor attention_split(rg_ctx *ctx, rg_tensor qkv, int64_t H, int causal) {
  int64_t B = rg_dim(ctx, qkv, 0), T = rg_dim(ctx, qkv, 1), C = rg_dim(ctx, qkv, 2) / 3;
  rg_tensor x = rg_reshape(ctx, qkv, 4, (int64_t[]){B, T, 3 * H, C / H});
  x = rg_transpose(ctx, x, 1, 2);
  rg_tensor y = rg_attention(ctx, rg_slice(ctx, x, 1, 0, H), rg_slice(ctx, x, 1, H, H),
                             rg_slice(ctx, x, 1, 2 * H, H), causal);
  return rg_reshape(ctx, rg_transpose(ctx, y, 1, 2), 3, (int64_t[]){B, T, C});
}

static rg_tensor apply(rg_ctx *ctx, const opcall *c) {
  rg_tensor a = c->p[0], b = c->p[1], d = c->p[2], ix = RG_NONE, fx = RG_NONE;
  if (c->ix) ix = input_i32(ctx, c->ix_nd, c->ix_dims, c->ix);
  if (c->fx) fx = input(ctx, c->fx_nd, c->fx_dims, c->fx);
  switch (c->op) {
  case O_ADD: return rg_add(ctx, a, b);
  case O_SUB: return rg_sub(ctx, a, b);
  case O_MUL: return rg_mul(ctx, a, b);
  case O_DIV: return rg_div(ctx, a, b);
  case O_SCALE: return rg_scale(ctx, a, c->f[0]);
  case O_POW: return rg_pow(ctx, a, c->f[0]);
  case O_NEG: return rg_neg(ctx, a);
  case O_EXP: return rg_exp(ctx, a);
  case O_LOG: return rg_log(ctx, a);
  case O_SQRT: return rg_sqrt(ctx, a);
  case O_RELU: return rg_relu(ctx, a);
  case O_GELU: return rg_gelu(ctx, a);
  case O_SILU: return rg_silu(ctx, a);
  case O_SIGMOID: return rg_sigmoid(ctx, a);
  case O_TANH: return rg_tanh(ctx, a);
  case O_CLAMP: return rg_clamp(ctx, a, c->f[0], c->f[1]);
  case O_SUM: return rg_sum(ctx, a, c->i[0], c->i[1]);
  case O_MEAN: return rg_mean(ctx, a, c->i[0], c->i[1]);
  case O_MAX: return rg_max(ctx, a, c->i[0], c->i[1]);
  case O_SOFTMAX: return rg_softmax(ctx, a);
  case O_LOG_SOFTMAX: return rg_log_softmax(ctx, a);
  case O_MATMUL: return rg_matmul(ctx, a, b);
  case O_LINEAR: return rg_linear(ctx, a, b, d);
  case O_LINEAR_ACT: return rg_linear_act(ctx, a, b, d, (rg_act)c->i[0]);
  case O_LAYERNORM: return rg_layernorm(ctx, a, b, d, c->f[0]);
  case O_RMSNORM: return rg_rmsnorm(ctx, a, b, c->f[0]);
  case O_EMBEDDING: return rg_embedding(ctx, a, ix);
  case O_ATTENTION: return rg_attention(ctx, a, b, d, c->i[0]);
  case O_ATTENTION_MASK: return rg_attention_mask(ctx, a, b, d, c->i[0], ix, fx);
  case O_ATTENTION_QKV: return rg_attention_qkv(ctx, a, c->i[1], c->i[0]);
  case O_ATTENTION_SPLIT: return attention_split(ctx, a, c->i[1], c->i[0]);
  case O_CE: return rg_cross_entropy(ctx, a, ix);
  case O_CE_IGNORE: return rg_cross_entropy_ignore(ctx, a, ix, c->i[0]);
  case O_MSE: return rg_mse(ctx, a, b);
  case O_RESHAPE: return rg_reshape(ctx, a, c->nd, c->dims);
  case O_TRANSPOSE: return rg_transpose(ctx, a, c->i[0], c->i[1]);
  case O_PERMUTE: return rg_permute(ctx, a, c->i);
  case O_SLICE: return rg_slice(ctx, a, c->i[0], c->i[1], c->i[2]);
  case O_CONCAT: return rg_concat(ctx, a, b, c->i[0]);
  case O_DROPOUT: return rg_dropout(ctx, a, c->f[0]);
  case O_CAST: return rg_cast(ctx, rg_cast(ctx, a, (rg_dtype)c->i[0]), RG_F32);
  case O_ADD_SCALED: return rg_add(ctx, a, rg_scale(ctx, b, c->f[0]));
  case O_ADD_LAYERNORM: return rg_layernorm(ctx, rg_add(ctx, a, b), d, c->p[3], c->f[0]);
  case O_GELU_MLP:
    return rg_linear(ctx, rg_linear_act(ctx, a, b, d, RG_ACT_GELU), c->p[3], RG_NONE);
  default: return RG_NONE;
  }
}

/* The fixed loss weights: |w| in [0.25, 1], a pure function of the element index. */
static float weight(uint64_t i) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  double u = (double)(z >> 11) * 0x1.0p-53;
  return (float)((0.25 + 0.75 * u) * ((z & 1) ? -1 : 1));
}

static rg_tensor loss_of(rg_ctx *ctx, void *user) {
  rg_tensor y = apply(ctx, user);
  if (!y.id) return RG_NONE;
  int nd = rg_ndim(ctx, y);
  int64_t d[RG_MAX_DIMS] = {0};
  for (int i = 0; i < nd; i++) d[i] = rg_dim(ctx, y, i);
  int64_t n = prod(nd, d);
  float *w = malloc((size_t)(n ? n : 1) * sizeof(float));
  for (int64_t i = 0; i < n; i++) w[i] = weight((uint64_t)i);
  rg_tensor W = rg_input(ctx, RG_F32, nd, d, w);
  free(w);
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, y, W), RG_ALL_AXES, 0);
  if (loss.id && ((const opcall *)user)->retain) rg_retain_grad(ctx, loss);
  return loss;
}

/* rg_gradcheck of every parameter in ctx through c; worst |analytic - numeric| <= tol.
   g_seen notes the ops of one forward and backward of c, recorded first: rg_gradcheck's
   first barrier runs them and its zero_grad, recorded after them, clears what they add
   to the gradients, so the check itself is as without them. */
static void gradcheck(rg_ctx *ctx, const opcall *c, double eps, double tol, const char *what) {
  size_t first = ctx->n_nodes;
  rg_tensor loss = loss_of(ctx, (void *)c);
  if (loss.id && rg_backward(ctx, loss) == RG_OK) covers_note(ctx, first, g_seen);
  rg_gradcheck_result r;
  rg_status st = rg_gradcheck(ctx, loss_of, (void *)c, eps, 0, &r);
  CHECK(st == RG_OK, "%s: rg_gradcheck -> %s: %s", what, rg_status_str(st), rg_errmsg(ctx));
  if (st != RG_OK) {
    note_grad(INFINITY);
    rg_clear_error(ctx);
    return;
  }
  note_grad(r.max_abs_err);
  CHECK(r.max_abs_err <= tol, "%s: gradient error %.3g > tol %.3g at parameter %d element "
        "%lld (analytic %.7g, numeric %.7g)", what, r.max_abs_err, tol, r.param,
        (long long)r.index, r.analytic, r.numeric);
}

/* The gradient of parameter p after one rg_backward of loss_of(c), read into g. */
static int grad_of(rg_ctx *ctx, const opcall *c, rg_tensor p, float *g, int64_t n,
                   const char *what) {
  rg_step_begin(ctx);
  rg_zero_grad(ctx);
  rg_tensor loss = loss_of(ctx, (void *)c);
  rg_status st = loss.id ? rg_backward(ctx, loss) : rg_error(ctx);
  CHECK(st == RG_OK, "%s: rg_backward -> %s: %s", what, rg_status_str(st), rg_errmsg(ctx));
  if (st != RG_OK) return 0;
  rg_tensor gp = rg_grad(ctx, p);
  CHECK(gp.id != 0, "%s: rg_grad: %s", what, rg_errmsg(ctx));
  return gp.id && readf(ctx, gp, g, n, what);
}

/* A small valid computation gives the right answer (the context still works). */
static void alive(rg_ctx *ctx, const char *what) {
  float a[2] = {1.5f, -2}, b[2] = {0.25f, 4}, s[2] = {0};
  rg_tensor t = rg_add(ctx, input(ctx, 1, (int64_t[]){2}, a), input(ctx, 1, (int64_t[]){2}, b));
  CHECK(t.id && readf(ctx, t, s, 2, what) && s[0] == 1.75f && s[1] == 2.0f,
        "%s: the context does not work after the error (%g %g): %s", what, s[0], s[1],
        rg_errmsg(ctx));
}

/* A record-time misuse: RG_NONE, sticky RG_ERR_MISUSE, a message naming the op; then
   cleared, and the context still works. */
static void expect_misuse(rg_ctx *ctx, rg_tensor r, const char *opname, const char *what) {
  CHECK(r.id == 0, "%s: returned a tensor, want RG_NONE", what);
  CHECK(rg_error(ctx) == RG_ERR_MISUSE, "%s: rg_error is %s, want RG_ERR_MISUSE", what,
        rg_status_str(rg_error(ctx)));
  CHECK(msg_has(ctx, opname), "%s: message does not name %s: \"%s\"", what, opname,
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK(rg_error(ctx) == RG_OK, "%s: rg_clear_error did not clear", what);
  alive(ctx, what);
}

/* ---- reference helpers ---------------------------------------------------------------- */

/* Flat index into a tensor of shape (nd, d) of the element that broadcasts (numpy rules)
   to flat index o of shape (ond, od). Also used for matmul batch axes. */
static int64_t bidx(int64_t o, int ond, const int64_t *od, int nd, const int64_t *d) {
  int64_t idx = 0, stride = 1;
  for (int i = ond - 1, j = nd - 1; i >= 0; i--, j--) {
    int64_t c = o % od[i];
    o /= od[i];
    if (j >= 0) {
      if (d[j] != 1) idx += c * stride;
      stride *= d[j];
    }
  }
  return idx;
}

/* ======================================================================================
   Elementwise binary ops with broadcasting
   ====================================================================================== */

static double ref_bin(int op, double a, double b) {
  switch (op) {
  case O_ADD: return a + b;
  case O_SUB: return a - b;
  case O_MUL: return a * b;
  default: return a / b;
  }
}

static void binary_case(int op, const char *name, int and, const int64_t *ad, int bnd,
                        const int64_t *bd, int ond, const int64_t *od) {
  char what[160], s1[64], s2[64];
  snprintf(what, sizeof what, "%s %s with %s", name, shp(s1, and, ad), shp(s2, bnd, bd));
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  int64_t na = prod(and, ad), nb = prod(bnd, bd), no = prod(ond, od);
  float *a = malloc(sizeof(float) * (size_t)(na + 1)),
        *b = malloc(sizeof(float) * (size_t)(nb + 1));
  double *want = calloc((size_t)(no + 1), sizeof(double));
  fill(a, na, -2, 2);
  /* divisors in +-[0.8, 2]: the third derivative of a/b stays small for eps = 1e-2 */
  if (op == O_DIV) fill_away(b, nb, 0.8, 2);
  else fill(b, nb, -2, 2);
  for (int64_t o = 0; o < no; o++)
    want[o] = ref_bin(op, a[bidx(o, ond, od, and, ad)], b[bidx(o, ond, od, bnd, bd)]);
  opcall c = {.op = op};
  c.p[0] = param(ctx, and, ad, a);
  c.p[1] = param(ctx, bnd, bd, b);
  /* one F32 rounding of an exactly representable operation: <= 6e-8 relative */
  check_out(ctx, apply(ctx, &c), ond, od, want, 2e-7, what);
  /* mul/div: products of O(1) values, loss O(10), eps 1e-2: rounding noise ~1e-4 and
     truncation (eps^2 f'''/6) <= 5e-4 */
  gradcheck(ctx, &c, 1e-2, op == O_DIV ? 3e-3 : 1e-3, what);
  free(a);
  free(b);
  free(want);
  close_ctx(ctx);
}

static void binary_all(int op, const char *name) {
  binary_case(op, name, 2, (int64_t[]){2, 3}, 1, (int64_t[]){3}, 2, (int64_t[]){2, 3});
  binary_case(op, name, 1, (int64_t[]){3}, 2, (int64_t[]){2, 3}, 2, (int64_t[]){2, 3});
  binary_case(op, name, 3, (int64_t[]){2, 1, 4}, 2, (int64_t[]){3, 1}, 3, (int64_t[]){2, 3, 4});
  binary_case(op, name, 0, (int64_t[]){0}, 2, (int64_t[]){2, 2}, 2, (int64_t[]){2, 2});
  binary_case(op, name, 2, (int64_t[]){2, 2}, 0, (int64_t[]){0}, 2, (int64_t[]){2, 2});
  binary_case(op, name, 2, (int64_t[]){2, 3}, 2, (int64_t[]){2, 3}, 2, (int64_t[]){2, 3});
  binary_case(op, name, 2, (int64_t[]){3, 1}, 2, (int64_t[]){1, 4}, 2, (int64_t[]){3, 4});
  /* edges: all size-1 axes, and zero-size (broadcast against a real operand) */
  binary_case(op, name, 2, (int64_t[]){1, 1}, 1, (int64_t[]){1}, 2, (int64_t[]){1, 1});
  binary_case(op, name, 2, (int64_t[]){0, 3}, 1, (int64_t[]){3}, 2, (int64_t[]){0, 3});
  binary_case(op, name, 2, (int64_t[]){2, 0}, 1, (int64_t[]){1}, 2, (int64_t[]){2, 0});
  /* shapes that do not broadcast */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = op};
  c.p[0] = param(ctx, 2, (int64_t[]){2, 3}, NULL);
  c.p[1] = param(ctx, 1, (int64_t[]){4}, NULL);
  expect_misuse(ctx, apply(ctx, &c), name, "[2,3] with [4]");
  c.p[1] = param(ctx, 3, (int64_t[]){3, 2, 3}, NULL);
  c.p[0] = param(ctx, 3, (int64_t[]){2, 1, 3}, NULL);
  expect_misuse(ctx, apply(ctx, &c), name, "[2,1,3] with [3,2,3]");
  close_ctx(ctx);
}

static void t_add(void) {
  binary_all(O_ADD, "rg_add");
  /* a broadcast operand that is no parameter: a SUM_TO node sums its gradient (a
     parameter's is added by SUM_TO_ACC) */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float a[6], b[3];
  fill(a, 6, -2, 2);
  fill(b, 3, -2, 2);
  opcall c = {.op = O_ADD_SCALED, .f = {1.5f}};
  c.p[0] = param(ctx, 2, (int64_t[]){2, 3}, a);
  c.p[1] = param(ctx, 1, (int64_t[]){3}, b);
  gradcheck(ctx, &c, 1e-2, 1e-3, "rg_add [2,3] with a scaled [3]"); /* linear: noise only */
  close_ctx(ctx);
}
static void t_sub(void) { binary_all(O_SUB, "rg_sub"); }
static void t_mul(void) { binary_all(O_MUL, "rg_mul"); }
static void t_div(void) { binary_all(O_DIV, "rg_div"); }

/* ======================================================================================
   Elementwise unary ops
   ====================================================================================== */

static double ref_un(int op, double x, double f0, double f1) {
  switch (op) {
  case O_SCALE: return x * f0;
  case O_POW: return pow(x, f0);
  case O_NEG: return -x;
  case O_EXP: return exp(x);
  case O_LOG: return log(x);
  case O_SQRT: return sqrt(x);
  case O_RELU: return x > 0 ? x : 0;
  case O_GELU: return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  case O_SILU: return x / (1 + exp(-x));
  case O_SIGMOID: return 1 / (1 + exp(-x));
  case O_TANH: return tanh(x);
  case O_CLAMP: return x < f0 ? f0 : x > f1 ? f1 : x;
  default: return NAN;
  }
}

/* Forward on hand-picked values (extremes included) and on random values in [lo, hi]
   (magnitudes if away), gradcheck on the random ones, and edge shapes. */
static void unary_case(int op, const char *name, float f0, float f1, const float *special,
                       int nspecial, double lo, double hi, int away, double ftol,
                       double gtol) {
  char what[128];
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = op, .f = {f0, f1}};
  double want[64];
  if (nspecial) {
    snprintf(what, sizeof what, "%s(%g) special values", name, f0);
    for (int i = 0; i < nspecial; i++) want[i] = ref_un(op, special[i], f0, f1);
    c.p[0] = param(ctx, 1, (int64_t[]){nspecial}, special);
    check_out(ctx, apply(ctx, &c), 1, (int64_t[]){nspecial}, want, ftol, what);
  }
  /* [3,5] random */
  float x[15];
  if (away) fill_away(x, 15, lo, hi);
  else fill(x, 15, lo, hi);
  for (int i = 0; i < 15; i++) want[i] = ref_un(op, x[i], f0, f1);
  snprintf(what, sizeof what, "%s(%g) [3,5]", name, f0);
  c.p[0] = param(ctx, 2, (int64_t[]){3, 5}, x);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){3, 5}, want, ftol, what);
  /* edges: a 0-axis scalar, size-1 axes, zero-size */
  snprintf(what, sizeof what, "%s(%g) []", name, f0);
  c.p[0] = param(ctx, 0, NULL, x);
  check_out(ctx, apply(ctx, &c), 0, NULL, want, ftol, what);
  snprintf(what, sizeof what, "%s(%g) [1,1,1]", name, f0);
  c.p[0] = param(ctx, 3, (int64_t[]){1, 1, 1}, x + 1);
  check_out(ctx, apply(ctx, &c), 3, (int64_t[]){1, 1, 1}, want + 1, ftol, what);
  snprintf(what, sizeof what, "%s(%g) [0,4]", name, f0);
  c.p[0] = param(ctx, 2, (int64_t[]){0, 4}, NULL);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){0, 4}, want, ftol, what);
  close_ctx(ctx);
  /* gradient: only the [3,5] parameter in the context */
  ctx = open_ctx();
  if (!ctx) return;
  snprintf(what, sizeof what, "%s(%g) [3,5] gradient", name, f0);
  c.p[0] = param(ctx, 2, (int64_t[]){3, 5}, x);
  gradcheck(ctx, &c, 1e-2, gtol, what);
  close_ctx(ctx);
}

/* The tolerances: fwd 2e-6 allows a few ulps of a float libm function (the exact ops are
   within 6e-8); grad 1e-3 is ~10x the finite-difference noise at eps 1e-2 for these
   smooth functions of O(1) inputs. */
static void t_scale(void) {
  const float sp[] = {0, -0.0f, 1, -3.5f, 1e30f, 1e-30f};
  unary_case(O_SCALE, "rg_scale", -2.5f, 0, sp, 6, -2, 2, 0, 2e-7, 1e-3);
  unary_case(O_SCALE, "rg_scale", 0.0f, 0, NULL, 0, -2, 2, 0, 0, 1e-3);
  unary_case(O_SCALE, "rg_scale", 1.0f, 0, NULL, 0, -2, 2, 0, 0, 1e-3);
}

static void t_pow(void) {
  const float sp[] = {0, 1, -1, 2, -2, 0.5f};
  unary_case(O_POW, "rg_pow", 3.0f, 0, sp, 6, -1.5, 1.5, 0, 2e-6, 2e-3);
  unary_case(O_POW, "rg_pow", 2.0f, 0, sp, 6, -2, 2, 0, 2e-6, 1e-3);
  const float pos[] = {0, 1, 4, 0.25f, 1e6f};
  unary_case(O_POW, "rg_pow", 0.5f, 0, pos, 5, 0.5, 3, 0, 2e-6, 1e-3);
  unary_case(O_POW, "rg_pow", -1.5f, 0, pos + 1, 4, 0.7, 2, 0, 2e-6, 2e-3);
  unary_case(O_POW, "rg_pow", 0.0f, 0, sp, 6, 0.5, 2, 1, 2e-6, 1e-3);
  /* a negative base with a non-integer exponent is NaN, as documented */
  const float neg[] = {-2, -0.5f};
  unary_case(O_POW, "rg_pow", 0.5f, 0, neg, 2, 0.5, 2, 0, 2e-6, 1e-3);
}

static void t_neg(void) {
  const float sp[] = {0, 1, -1, 3e38f, -1e-40f};
  unary_case(O_NEG, "rg_neg", 0, 0, sp, 5, -3, 3, 0, 0, 1e-3);
}

static void t_exp(void) {
  const float sp[] = {0, 1, -1, -100, 88, -87, 10, 1e-7f};
  unary_case(O_EXP, "rg_exp", 0, 0, sp, 8, -2, 2, 0, 2e-6, 2e-3);
}

static void t_log(void) {
  const float sp[] = {1, 2.718281828f, 1e-30f, 1e30f, 0.5f, 0, -1};
  unary_case(O_LOG, "rg_log", 0, 0, sp, 7, 0.5, 4, 0, 2e-6, 2e-3);
}

static void t_sqrt(void) {
  const float sp[] = {0, 1, 4, 2, 1e-30f, 1e30f, -1};
  unary_case(O_SQRT, "rg_sqrt", 0, 0, sp, 7, 0.5, 4, 0, 2e-7, 1e-3);
}

static void t_relu(void) {
  const float sp[] = {0, -0.0f, 1, -1, 1e30f, -1e30f, 1e-40f};
  /* inputs at least 0.1 from the kink, step 1e-2 */
  unary_case(O_RELU, "rg_relu", 0, 0, sp, 7, 0.1, 2, 1, 0, 1e-3);
  /* relu's gradient at 0 is 0 (documented); check it exactly */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float x[4] = {0, 1, -1, 0.5f}, g[4] = {0}, w[4];
  opcall c = {.op = O_RELU};
  c.p[0] = param(ctx, 1, (int64_t[]){4}, x);
  for (int i = 0; i < 4; i++) w[i] = x[i] > 0 ? weight((uint64_t)i) : 0;
  if (grad_of(ctx, &c, c.p[0], g, 4, "rg_relu gradient at 0"))
    check_exact("rg_relu gradient at 0", g, w, 4);
  close_ctx(ctx);
}

static void t_gelu(void) {
  const float sp[] = {0, 1, -1, 3, -3, 10, -10, 20, -20, 1e-3f};
  unary_case(O_GELU, "rg_gelu", 0, 0, sp, 10, -4, 4, 0, 2e-6, 2e-3);
}

static void t_silu(void) {
  const float sp[] = {0, 1, -1, 20, -20, 100, -100, -1000};
  unary_case(O_SILU, "rg_silu", 0, 0, sp, 8, -5, 5, 0, 2e-6, 2e-3);
}

static void t_sigmoid(void) {
  const float sp[] = {0, 1, -1, 20, -20, 100, -100, 1000, -1000};
  unary_case(O_SIGMOID, "rg_sigmoid", 0, 0, sp, 9, -6, 6, 0, 2e-6, 1e-3);
}

static void t_tanh(void) {
  const float sp[] = {0, 1, -1, 20, -20, 100, -100, 1e-4f};
  unary_case(O_TANH, "rg_tanh", 0, 0, sp, 8, -3, 3, 0, 2e-6, 1e-3);
}

static void t_clamp(void) {
  const float lo = -0.5f, hi = 0.7f;
  const float sp[] = {-2, -0.5f, -0.3f, 0, 0.69f, 0.7f, 1.5f, 0.2f, -0.49f, 1e30f, -1e30f};
  /* forward exact; random values in [-0.4, 0.6], 0.1 inside the bounds */
  unary_case(O_CLAMP, "rg_clamp", lo, hi, sp, 11, -0.4, 0.6, 0, 0, 1e-3);
  /* gradient: values at least 0.05 from both bounds (step 1e-2) */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float x[12] = {-2, -1, -0.55f, -0.45f, -0.2f, 0, 0.3f, 0.65f, 0.75f, 1, 3, 0.1f};
  opcall c = {.op = O_CLAMP, .f = {lo, hi}};
  c.p[0] = param(ctx, 2, (int64_t[]){3, 4}, x);
  gradcheck(ctx, &c, 1e-2, 1e-3, "rg_clamp gradient");
  close_ctx(ctx);
  /* exactly: 1 strictly inside (lo, hi), 0 outside and on the bounds */
  ctx = open_ctx();
  if (!ctx) return;
  float g[11], w[11];
  c.p[0] = param(ctx, 1, (int64_t[]){11}, sp);
  for (int i = 0; i < 11; i++) w[i] = sp[i] > lo && sp[i] < hi ? weight((uint64_t)i) : 0;
  if (grad_of(ctx, &c, c.p[0], g, 11, "rg_clamp gradient on the bounds"))
    check_exact("rg_clamp gradient (1 strictly inside, 0 outside and on the bounds)", g, w, 11);
  /* lo == hi is allowed: a constant with zero gradient */
  opcall c2 = {.op = O_CLAMP, .f = {0.25f, 0.25f}};
  c2.p[0] = c.p[0];
  double want[11];
  for (int i = 0; i < 11; i++) want[i] = 0.25;
  rg_step_begin(ctx);
  check_out(ctx, apply(ctx, &c2), 1, (int64_t[]){11}, want, 0, "rg_clamp lo == hi");
  float zero[11] = {0};
  if (grad_of(ctx, &c2, c2.p[0], g, 11, "rg_clamp lo == hi gradient"))
    check_exact("rg_clamp lo == hi gradient", g, zero, 11);
  /* lo > hi, and NaN bounds, are misuse */
  rg_step_begin(ctx);
  expect_misuse(ctx, rg_clamp(ctx, c.p[0], 1, -1), "rg_clamp", "rg_clamp lo > hi");
  expect_misuse(ctx, rg_clamp(ctx, c.p[0], NAN, 1), "rg_clamp", "rg_clamp lo = NaN");
  close_ctx(ctx);
}

/* ======================================================================================
   Reductions
   ====================================================================================== */

enum { R_SUM, R_MEAN, R_MAX, R_ARGMAX };

/* Reference of a reduction over axis (or all axes with axis < 0); out is laid out in the
   keepdim shape (same element order either way). arg: first arg-max along the axis (flat
   index for all axes). */
static void ref_reduce(int kind, const float *x, int nd, const int64_t *d, int axis,
                       double *out, int64_t *arg, int64_t *nout) {
  int64_t kd[RG_MAX_DIMS], n = prod(nd, d), cnt = 1;
  for (int i = 0; i < nd; i++) {
    int red = axis < 0 || i == axis;
    kd[i] = red ? 1 : d[i];
    if (red) cnt *= d[i];
  }
  int64_t no = prod(nd, kd);
  *nout = no;
  for (int64_t o = 0; o < no; o++) {
    out[o] = kind == R_SUM || kind == R_MEAN ? 0 : -INFINITY;
    arg[o] = -1;
  }
  for (int64_t e = 0; e < n; e++) {
    int64_t rem = e, o = 0, stride = 1, pos = 0;
    for (int i = nd - 1; i >= 0; i--) {
      int64_t ci = rem % d[i];
      rem /= d[i];
      if (axis < 0 || i == axis) {
        if (i == axis) pos = ci;
      } else {
        o += ci * stride;
      }
      stride *= kd[i];
    }
    if (axis < 0) pos = e;
    if (kind == R_SUM || kind == R_MEAN) out[o] += x[e];
    else if (arg[o] < 0 || x[e] > out[o]) {
      out[o] = x[e];
      arg[o] = pos;
    }
  }
  if (kind == R_MEAN)
    for (int64_t o = 0; o < no; o++) out[o] /= (double)cnt;
  if (kind == R_ARGMAX)
    for (int64_t o = 0; o < no; o++) out[o] = (double)arg[o];
}

/* The shape a reduction gives. */
static int reduced_shape(int nd, const int64_t *d, int axis, int keepdim, int64_t *od) {
  int ond = 0;
  for (int i = 0; i < nd; i++) {
    int red = axis < 0 || i == axis;
    if (red && !keepdim) continue;
    od[ond++] = red ? 1 : d[i];
  }
  return ond;
}

/* Every axis (positive and negative spelling) and all axes, keepdim on and off. */
static void reduce_cases(int kind, int op, const char *name, double ftol, double gtol) {
  static const int64_t d[3] = {2, 3, 4};
  const int axes[] = {0, 1, 2, -1, -3, RG_ALL_AXES};
  float x[24];
  /* distinct values (a maximum is then unique and 0.05 away from the runner-up) */
  for (int i = 0; i < 24; i++) x[i] = (float)(((i * 7) % 24) - 11) * 0.1f + frand(-0.02, 0.02);
  double want[24];
  int64_t arg[24], no;
  char what[128];
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = op};
  c.p[0] = param(ctx, 3, d, x);
  for (size_t ai = 0; ai < sizeof axes / sizeof axes[0]; ai++) {
    int ax = axes[ai], a = ax == RG_ALL_AXES ? -1 : (ax < 0 ? ax + 3 : ax);
    ref_reduce(kind, x, 3, d, a, want, arg, &no);
    for (int keep = 0; keep <= 1; keep++) {
      int64_t od[RG_MAX_DIMS];
      int ond = reduced_shape(3, d, a, keep, od);
      snprintf(what, sizeof what, "%s [2,3,4] axis %d keepdim %d", name, ax, keep);
      c.i[0] = ax;
      c.i[1] = keep;
      check_out(ctx, apply(ctx, &c), ond, od, want, ftol, what);
    }
  }
  close_ctx(ctx);
  /* gradients: one context per case so that only its parameter is checked */
  for (size_t ai = 0; ai < sizeof axes / sizeof axes[0]; ai += 2) {
    ctx = open_ctx();
    if (!ctx) return;
    c.p[0] = param(ctx, 3, d, x);
    c.i[0] = axes[ai];
    c.i[1] = (int)(ai / 2) % 2;
    snprintf(what, sizeof what, "%s [2,3,4] axis %d keepdim %d gradient", name, c.i[0], c.i[1]);
    gradcheck(ctx, &c, 1e-2, gtol, what);
    close_ctx(ctx);
  }
  /* edges: a size-1 axis, a 0-axis input, a single row */
  ctx = open_ctx();
  if (!ctx) return;
  float y[4] = {0.5f, -1, 2, 0.25f};
  c.p[0] = param(ctx, 2, (int64_t[]){4, 1}, y);
  c.i[0] = 1;
  c.i[1] = 0;
  ref_reduce(kind, y, 2, (int64_t[]){4, 1}, 1, want, arg, &no);
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){4}, want, ftol, "size-1 axis");
  c.p[0] = param(ctx, 0, NULL, y + 2);
  c.i[0] = RG_ALL_AXES;
  want[0] = kind == R_ARGMAX ? 0 : 2;
  check_out(ctx, apply(ctx, &c), 0, NULL, want, ftol, "0-axis input, all axes");
  c.i[1] = 1;
  check_out(ctx, apply(ctx, &c), 0, NULL, want, ftol, "0-axis input, all axes, keepdim");
  c.p[0] = param(ctx, 2, (int64_t[]){1, 4}, y);
  c.i[0] = -1;
  c.i[1] = 1;
  ref_reduce(kind, y, 2, (int64_t[]){1, 4}, 1, want, arg, &no);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){1, 1}, want, ftol, "single row keepdim");
  /* bad axes */
  c.i[0] = 2;
  expect_misuse(ctx, apply(ctx, &c), name, "axis 2 of a 2-axis tensor");
  c.i[0] = -3;
  expect_misuse(ctx, apply(ctx, &c), name, "axis -3 of a 2-axis tensor");
  close_ctx(ctx);
}

static void t_sum(void) {
  /* sums of <= 24 O(1) terms: rounding of the result only (double accumulation would give
     6e-8; float accumulation ~1e-6) */
  reduce_cases(R_SUM, O_SUM, "rg_sum", 2e-6, 1e-3);
  /* zero-size: the sum over an empty axis is 0 */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = O_SUM, .i = {0, 0}};
  c.p[0] = param(ctx, 2, (int64_t[]){0, 3}, NULL);
  double z[3] = {0, 0, 0};
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){3}, z, 0, "rg_sum [0,3] axis 0");
  c.i[0] = RG_ALL_AXES;
  check_out(ctx, apply(ctx, &c), 0, NULL, z, 0, "rg_sum [0,3] all axes");
  c.i[0] = 1;
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){0}, z, 0, "rg_sum [0,3] axis 1");
  c.p[0] = param(ctx, 2, (int64_t[]){2, 0}, NULL);
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){2}, z, 0, "rg_sum [2,0] axis 1");
  c.i[0] = 0;
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){0}, z, 0, "rg_sum [2,0] axis 0");
  close_ctx(ctx);
}

static void t_mean(void) { reduce_cases(R_MEAN, O_MEAN, "rg_mean", 2e-6, 1e-3); }

static void t_max(void) {
  reduce_cases(R_MAX, O_MAX, "rg_max", 0, 1e-3); /* a maximum is an exact copy */
  /* ties: the gradient goes to the first arg-max only */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float x[8] = {1, 3, 3, 2, /* */ -1, -1, -1, -1};
  opcall c = {.op = O_MAX, .i = {1, 0}};
  c.p[0] = param(ctx, 2, (int64_t[]){2, 4}, x);
  double want[2] = {3, -1};
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){2}, want, 0, "rg_max with ties");
  float g[8], w[8] = {0};
  w[1] = weight(0);
  w[4] = weight(1);
  if (grad_of(ctx, &c, c.p[0], g, 8, "rg_max tie gradient"))
    check_exact("rg_max gradient goes to the first arg-max", g, w, 8);
  c.i[0] = RG_ALL_AXES;
  float w2[8] = {0};
  w2[1] = weight(0);
  if (grad_of(ctx, &c, c.p[0], g, 8, "rg_max all-axes tie gradient"))
    check_exact("rg_max all axes: gradient to the first arg-max", g, w2, 8);
  /* the maximum of nothing is misuse */
  c.p[0] = param(ctx, 2, (int64_t[]){0, 3}, NULL);
  c.i[0] = 0;
  rg_step_begin(ctx);
  expect_misuse(ctx, apply(ctx, &c), "rg_max", "rg_max of [0,3]");
  expect_misuse(ctx, rg_argmax(ctx, c.p[0], 1, 0), "rg_argmax", "rg_argmax of [0,3]");
  close_ctx(ctx);
}

static void t_argmax(void) {
  static const int64_t d[3] = {2, 3, 4};
  float x[24];
  fill(x, 24, -1, 1);
  x[5] = x[6] = 5; /* a tie within one row of the last axis: the first wins */
  x[13] = x[17] = 7; /* and along axis 1 */
  const int axes[] = {0, 1, 2, -1, RG_ALL_AXES};
  double want[24];
  int64_t arg[24], no;
  char what[96];
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  rg_tensor p = param(ctx, 3, d, x);
  for (size_t ai = 0; ai < sizeof axes / sizeof axes[0]; ai++) {
    int ax = axes[ai], a = ax == RG_ALL_AXES ? -1 : (ax < 0 ? ax + 3 : ax);
    ref_reduce(R_ARGMAX, x, 3, d, a, want, arg, &no);
    for (int keep = 0; keep <= 1; keep++) {
      int64_t od[RG_MAX_DIMS];
      int ond = reduced_shape(3, d, a, keep, od);
      snprintf(what, sizeof what, "rg_argmax [2,3,4] axis %d keepdim %d", ax, keep);
      rg_tensor y = rg_argmax(ctx, p, ax, keep);
      if (!has_shape(ctx, y, ond, od, what)) continue;
      CHECK(rg_dtype_of(ctx, y) == RG_I32, "%s: dtype %d, want RG_I32", what,
            (int)rg_dtype_of(ctx, y));
      int32_t got[24];
      rg_status st = rg_read(ctx, y, got, (size_t)no * sizeof(int32_t));
      CHECK(st == RG_OK, "%s: rg_read -> %s: %s", what, rg_status_str(st), rg_errmsg(ctx));
      for (int64_t o = 0; st == RG_OK && o < no; o++) {
        if (got[o] != arg[o]) {
          note_fwd(fabs((double)got[o] - (double)arg[o]));
          CHECK(0, "%s: element %lld is %d, want %lld", what, (long long)o, got[o],
                (long long)arg[o]);
          break;
        }
      }
    }
  }
  /* no gradient: in sum(p * cast(argmax(p))), the indices are constants, so the gradient
     of p is exactly the broadcast indices */
  rg_step_begin(ctx);
  rg_zero_grad(ctx);
  rg_tensor idx = rg_cast(ctx, rg_argmax(ctx, p, -1, 1), RG_F32);
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, p, idx), RG_ALL_AXES, 0);
  rg_status st = rg_backward(ctx, loss);
  CHECK(st == RG_OK, "rg_argmax: backward through a product with indices -> %s: %s",
        rg_status_str(st), rg_errmsg(ctx));
  float g[24], w[24];
  ref_reduce(R_ARGMAX, x, 3, d, 2, want, arg, &no);
  for (int i = 0; i < 24; i++) w[i] = (float)arg[i / 4];
  if (st == RG_OK && readf(ctx, rg_grad(ctx, p), g, 24, "rg_argmax no gradient"))
    check_exact("rg_argmax has no gradient (indices are constants)", g, w, 24);
  /* a loss built only from argmax does not reach the parameter */
  rg_step_begin(ctx);
  rg_zero_grad(ctx);
  loss = rg_sum(ctx, rg_cast(ctx, rg_argmax(ctx, p, RG_ALL_AXES, 0), RG_F32), RG_ALL_AXES, 0);
  st = rg_backward(ctx, loss);
  if (st == RG_OK) {
    /* accepted: then it must not have produced a gradient for p */
    rg_tensor gp = rg_grad(ctx, p);
    float zero[24] = {0};
    if (readf(ctx, gp, g, 24, "rg_argmax-only loss"))
      check_exact("rg_argmax-only loss: gradient", g, zero, 24);
  } else {
    CHECK(st == RG_ERR_MISUSE, "rg_argmax-only loss: rg_backward -> %s", rg_status_str(st));
    rg_clear_error(ctx);
  }
  /* edges: a single element; a size-1 axis */
  rg_step_begin(ctx);
  rg_tensor one = rg_argmax(ctx, param(ctx, 2, (int64_t[]){3, 1}, x), 1, 0);
  int32_t got[3] = {9, 9, 9};
  if (has_shape(ctx, one, 1, (int64_t[]){3}, "rg_argmax size-1 axis")) {
    CHECK(rg_read(ctx, one, got, sizeof got) == RG_OK && !got[0] && !got[1] && !got[2],
          "rg_argmax over a size-1 axis: %d %d %d, want 0 0 0", got[0], got[1], got[2]);
  }
  close_ctx(ctx);
  g_grad = -1;
}

/* ======================================================================================
   softmax, log_softmax
   ====================================================================================== */

static void ref_softmax(const float *x, int64_t rows, int64_t C, int logsm, double *out) {
  for (int64_t r = 0; r < rows; r++) {
    const float *row = x + r * C;
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; j++) m = fmax(m, row[j]);
    for (int64_t j = 0; j < C; j++) s += exp((double)row[j] - m);
    for (int64_t j = 0; j < C; j++)
      out[r * C + j] = logsm ? (double)row[j] - m - log(s) : exp((double)row[j] - m) / s;
  }
}

static void softmax_cases(int op, const char *name) {
  int logsm = op == O_LOG_SOFTMAX;
  float x[20];
  double want[20];
  char what[96];
  fill(x, 20, -3, 3);
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = op};
  /* rows 2 and 3 offset by +1e4 and -1e4: a naive exp overflows / underflows */
  float xo[20];
  memcpy(xo, x, sizeof xo);
  for (int j = 0; j < 5; j++) {
    xo[10 + j] += 1e4f;
    xo[15 + j] -= 1e4f;
  }
  ref_softmax(xo, 4, 5, logsm, want);
  snprintf(what, sizeof what, "%s [4,5] rows offset by +-1e4", name);
  c.p[0] = param(ctx, 2, (int64_t[]){4, 5}, xo);
  /* 2e-6: exp/log in float on max-subtracted values; the offset rows' inputs are exact
     floats, and x - max is exact there, so they are no worse */
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){4, 5}, want, 2e-6, what);
  /* 3-D input: the last axis only */
  ref_softmax(x, 6, 3, logsm, want);
  snprintf(what, sizeof what, "%s [2,3,3]", name);
  c.p[0] = param(ctx, 3, (int64_t[]){2, 3, 3}, x);
  check_out(ctx, apply(ctx, &c), 3, (int64_t[]){2, 3, 3}, want, 2e-6, what);
  /* edges: one column (softmax 1, log_softmax 0), a single row, a 1-D input, no rows */
  ref_softmax(x, 3, 1, logsm, want);
  snprintf(what, sizeof what, "%s [3,1]", name);
  c.p[0] = param(ctx, 2, (int64_t[]){3, 1}, x);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){3, 1}, want, 0, what);
  ref_softmax(x, 1, 7, logsm, want);
  snprintf(what, sizeof what, "%s [1,7]", name);
  c.p[0] = param(ctx, 2, (int64_t[]){1, 7}, x);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){1, 7}, want, 2e-6, what);
  snprintf(what, sizeof what, "%s [7]", name);
  c.p[0] = param(ctx, 1, (int64_t[]){7}, x);
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){7}, want, 2e-6, what);
  snprintf(what, sizeof what, "%s [0,4]", name);
  c.p[0] = param(ctx, 2, (int64_t[]){0, 4}, NULL);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){0, 4}, want, 0, what);
  snprintf(what, sizeof what, "%s [2,0] (an empty last axis)", name);
  c.p[0] = param(ctx, 2, (int64_t[]){2, 0}, NULL);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){2, 0}, want, 0, what);
  /* equal large entries: exactly uniform */
  float big[4] = {1e30f, 1e30f, 1e30f, 1e30f};
  double uni[4];
  for (int j = 0; j < 4; j++) uni[j] = logsm ? -log(4.0) : 0.25;
  snprintf(what, sizeof what, "%s of four equal 1e30", name);
  c.p[0] = param(ctx, 1, (int64_t[]){4}, big);
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){4}, uni, 2e-7, what);
  /* a BF16 input is misuse */
  rg_tensor bf = rg_cast(ctx, c.p[0], RG_BF16);
  expect_misuse(ctx, op == O_SOFTMAX ? rg_softmax(ctx, bf) : rg_log_softmax(ctx, bf), name,
                "BF16 input");
  close_ctx(ctx);
  /* gradient */
  ctx = open_ctx();
  if (!ctx) return;
  c.p[0] = param(ctx, 2, (int64_t[]){3, 5}, x);
  snprintf(what, sizeof what, "%s [3,5] gradient", name);
  gradcheck(ctx, &c, 1e-2, 1e-3, what);
  close_ctx(ctx);
}

static void t_softmax(void) { softmax_cases(O_SOFTMAX, "rg_softmax"); }
static void t_log_softmax(void) { softmax_cases(O_LOG_SOFTMAX, "rg_log_softmax"); }

/* ======================================================================================
   matmul, linear
   ====================================================================================== */

static void ref_matmul(const float *a, int and, const int64_t *ad, const float *b, int bnd,
                       const int64_t *bd, int ond, const int64_t *od, double *out) {
  int64_t M = ad[and - 2], K = ad[and - 1], N = bd[bnd - 1];
  int64_t nbatch = prod(ond - 2, od);
  for (int64_t bi = 0; bi < nbatch; bi++) {
    const float *A = a + bidx(bi, ond - 2, od, and - 2, ad) * M * K;
    const float *B = b + bidx(bi, ond - 2, od, bnd - 2, bd) * K * N;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += (double)A[i * K + k] * B[k * N + j];
        out[(bi * M + i) * N + j] = s;
      }
  }
}

static void matmul_case(int and, const int64_t *ad, int bnd, const int64_t *bd, int ond,
                        const int64_t *od, int grad, double ftol) {
  char what[160], s1[64], s2[64];
  snprintf(what, sizeof what, "rg_matmul %s x %s", shp(s1, and, ad), shp(s2, bnd, bd));
  int64_t na = prod(and, ad), nb = prod(bnd, bd), no = prod(ond, od);
  float *a = malloc(sizeof(float) * (size_t)(na + 1)),
        *b = malloc(sizeof(float) * (size_t)(nb + 1));
  double *want = calloc((size_t)(no + 1), sizeof(double));
  fill(a, na, -1, 1);
  fill(b, nb, -1, 1);
  ref_matmul(a, and, ad, b, bnd, bd, ond, od, want);
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    opcall c = {.op = O_MATMUL};
    c.p[0] = param(ctx, and, ad, a);
    c.p[1] = param(ctx, bnd, bd, b);
    check_out(ctx, apply(ctx, &c), ond, od, want, ftol, what);
    /* linear in each operand: only rounding noise (~1e-4 at eps 1e-2) */
    if (grad) gradcheck(ctx, &c, 1e-2, 1e-3, what);
    close_ctx(ctx);
  }
  free(a);
  free(b);
  free(want);
}

/* Tolerances: K <= 4 products of values in [-1,1] are within a few ulps of O(1): 1e-6.
   K = 65 (the blocked path): bound 65 * 6e-8 * sum|ab| (~16) = 6e-5, typical ~1e-6: 3e-5. */
static void t_matmul(void) {
  matmul_case(2, (int64_t[]){3, 4}, 2, (int64_t[]){4, 5}, 2, (int64_t[]){3, 5}, 1, 1e-6);
  matmul_case(3, (int64_t[]){2, 3, 4}, 3, (int64_t[]){2, 4, 5}, 3, (int64_t[]){2, 3, 5}, 1, 1e-6);
  matmul_case(3, (int64_t[]){2, 3, 4}, 2, (int64_t[]){4, 5}, 3, (int64_t[]){2, 3, 5}, 1, 1e-6);
  matmul_case(2, (int64_t[]){3, 4}, 3, (int64_t[]){2, 4, 5}, 3, (int64_t[]){2, 3, 5}, 1, 1e-6);
  matmul_case(3, (int64_t[]){1, 3, 4}, 3, (int64_t[]){2, 4, 5}, 3, (int64_t[]){2, 3, 5}, 1, 1e-6);
  matmul_case(3, (int64_t[]){2, 3, 4}, 3, (int64_t[]){1, 4, 5}, 3, (int64_t[]){2, 3, 5}, 1, 1e-6);
  matmul_case(4, (int64_t[]){2, 1, 3, 2}, 3, (int64_t[]){3, 2, 2}, 4, (int64_t[]){2, 3, 3, 2}, 1,
              1e-6);
  /* edges: 1x1x1, a single row / column, K = 1, K = 0 (zeros), M = 0 */
  matmul_case(2, (int64_t[]){1, 1}, 2, (int64_t[]){1, 1}, 2, (int64_t[]){1, 1}, 1, 1e-6);
  matmul_case(2, (int64_t[]){1, 4}, 2, (int64_t[]){4, 1}, 2, (int64_t[]){1, 1}, 1, 1e-6);
  matmul_case(2, (int64_t[]){3, 1}, 2, (int64_t[]){1, 4}, 2, (int64_t[]){3, 4}, 1, 1e-6);
  matmul_case(2, (int64_t[]){2, 0}, 2, (int64_t[]){0, 3}, 2, (int64_t[]){2, 3}, 1, 1e-6);
  matmul_case(2, (int64_t[]){0, 3}, 2, (int64_t[]){3, 2}, 2, (int64_t[]){0, 2}, 1, 1e-6);
  matmul_case(3, (int64_t[]){0, 2, 3}, 2, (int64_t[]){3, 2}, 3, (int64_t[]){0, 2, 2}, 0, 1e-6);
  matmul_case(2, (int64_t[]){2, 3}, 2, (int64_t[]){3, 0}, 2, (int64_t[]){2, 0}, 1, 1e-6);
  /* a larger product, forward only: exercises the blocked path */
  matmul_case(2, (int64_t[]){33, 65}, 2, (int64_t[]){65, 17}, 2, (int64_t[]){33, 17}, 0, 3e-5);
  /* misuse */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  rg_tensor a = param(ctx, 2, (int64_t[]){2, 3}, NULL), b = param(ctx, 2, (int64_t[]){4, 5}, NULL);
  expect_misuse(ctx, rg_matmul(ctx, a, b), "rg_matmul", "[2,3] x [4,5]");
  expect_misuse(ctx, rg_matmul(ctx, a, param(ctx, 1, (int64_t[]){3}, NULL)), "rg_matmul",
                "[2,3] x [3] (1-D not promoted)");
  expect_misuse(ctx, rg_matmul(ctx, param(ctx, 3, (int64_t[]){2, 3, 4}, NULL),
                               param(ctx, 3, (int64_t[]){3, 4, 5}, NULL)),
                "rg_matmul", "batch 2 with batch 3");
  expect_misuse(ctx, rg_matmul(ctx, a, input_i32(ctx, 2, (int64_t[]){3, 1}, (int32_t[]){1, 2, 3})),
                "rg_matmul", "I32 operand");
  close_ctx(ctx);
}

/* rg_linear, or rg_linear_act with act != RG_ACT_NONE (GELU as rg_gelu's tanh form). */
static void linear_case(int xnd, const int64_t *xd, int64_t O, int bias, int grad,
                        double ftol, int act) {
  char what[160], s1[64];
  int64_t I = xd[xnd - 1], R = prod(xnd - 1, xd);
  snprintf(what, sizeof what, "rg_linear%s x %s w [%lld,%lld] %s",
           act == RG_ACT_RELU ? "_act relu" : act == RG_ACT_GELU ? "_act gelu" : "",
           shp(s1, xnd, xd), (long long)O, (long long)I, bias ? "with bias" : "without bias");
  float *x = malloc(sizeof(float) * (size_t)(R * I + 1)),
        *w = malloc(sizeof(float) * (size_t)(O * I + 1));
  float bb[16];
  double *want = calloc((size_t)(R * O + 1), sizeof(double));
  fill(x, R * I, -1, 1);
  fill(w, O * I, -1, 1);
  fill(bb, O, -1, 1);
  for (int64_t r = 0; r < R; r++)
    for (int64_t o = 0; o < O; o++) {
      double s = bias ? bb[o] : 0;
      for (int64_t i = 0; i < I; i++) s += (double)x[r * I + i] * w[o * I + i];
      if (act == RG_ACT_RELU) s = s < 0 ? 0 : s;
      if (act == RG_ACT_GELU)
        s = 0.5 * s * (1 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
      want[r * O + o] = s;
    }
  int64_t od[RG_MAX_DIMS];
  memcpy(od, xd, sizeof(int64_t) * (size_t)xnd);
  od[xnd - 1] = O;
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    opcall c = {.op = act ? O_LINEAR_ACT : O_LINEAR, .i = {act}};
    c.p[0] = param(ctx, xnd, xd, x);
    c.p[1] = param(ctx, 2, (int64_t[]){O, I}, w);
    c.p[2] = bias ? param(ctx, 1, (int64_t[]){O}, bb) : RG_NONE;
    check_out(ctx, apply(ctx, &c), xnd, od, want, ftol, what); /* as matmul */
    if (grad) gradcheck(ctx, &c, 1e-2, 1e-3, what);             /* linear: noise only */
    close_ctx(ctx);
  }
  free(x);
  free(w);
  free(want);
}

/* GELU's derivative fused into the next layer's dx GEMM (MATMUL_DGELU): a GELU layer
   read only by a linear layer gives the gradients of the unfused pair (GELU_BWD after a
   MATMUL, as when rg_retain_grad keeps the GELU output's gradient) bit for bit, in F32
   and with bf16 activations (both round the F32 product times gelu' once), with one node
   fewer. The [2,3,8] input makes both gradients reshaped views. */
static void dgelu_case(int bf16) {
  float got[2][5][48];
  uint64_t nodes[2];
  int64_t xd[3] = {2, 3, 4}, w1d[2] = {8, 4}, w2d[2] = {5, 8}, b1d = 8, b2d = 5;
  for (int apart = 0; apart < 2; apart++) {
    rg_ctx *ctx = open_cpu_opts((rg_options){.device = RG_DEVICE_CPU, .quiet = 1, .seed = 7,
                                             .bf16 = bf16});
    if (!ctx) return;
    rg_init u = {RG_INIT_UNIFORM, -1.5f, 1.5f};
    rg_tensor x = rg_param(ctx, "x", RG_F32, 3, xd, u), w1 = rg_param(ctx, "w1", RG_F32, 2, w1d, u);
    rg_tensor b1 = rg_param(ctx, "b1", RG_F32, 1, &b1d, u);
    rg_tensor w2 = rg_param(ctx, "w2", RG_F32, 2, w2d, u), b2 = rg_param(ctx, "b2", RG_F32, 1, &b2d, u);
    rg_stats s0, s1;
    rg_stats_get(ctx, &s0);
    rg_tensor h = rg_linear_act(ctx, x, w1, b1, RG_ACT_GELU);
    if (apart) CHECK_ST(ctx, rg_retain_grad(ctx, h), RG_OK);
    rg_tensor y = rg_linear(ctx, h, w2, b2);
    rg_tensor l = rg_sum(ctx, rg_mul(ctx, y, y), RG_ALL_AXES, 0);
    CHECK_ST(ctx, rg_backward(ctx, l), RG_OK);
    rg_stats_get(ctx, &s1);
    nodes[apart] = s1.nodes_recorded - s0.nodes_recorded;
    rg_tensor t[5] = {rg_grad(ctx, x), rg_grad(ctx, w1), rg_grad(ctx, b1), rg_grad(ctx, w2),
                      rg_grad(ctx, b2)};
    for (int i = 0; i < 5; i++)
      CHECK_ST(ctx, rg_read(ctx, t[i], got[apart][i], (size_t)rg_numel(ctx, t[i]) * 4), RG_OK);
    close_ctx(ctx);
  }
  static const char *const what[5] = {"dx", "dw1", "db1", "dw2", "db2"};
  static const size_t n[5] = {24, 32, 8, 40, 5};
  for (int i = 0; i < 5; i++)
    CHECK(!memcmp(got[0][i], got[1][i], n[i] * 4), "gelu' in the GEMM (bf16 %d): %s differs "
          "from the unfused pair", bf16, what[i]);
  CHECK(nodes[1] == nodes[0] + 1, "gelu' in the GEMM (bf16 %d): %llu nodes fused, %llu "
        "apart; want 1 more", bf16, (unsigned long long)nodes[0], (unsigned long long)nodes[1]);
}

/* ReLU's kink defeats the numeric gradient, so only GELU is gradient-checked here; both
   equal the two-op form bit for bit (test_contract). */
static void t_linear_act(void) {
  for (int bias = 0; bias <= 1; bias++)
    for (int act = RG_ACT_RELU; act <= RG_ACT_GELU; act++) {
      linear_case(2, (int64_t[]){3, 4}, 5, bias, act == RG_ACT_GELU, 1e-6, act);
      linear_case(3, (int64_t[]){2, 3, 4}, 8, bias, act == RG_ACT_GELU, 1e-6, act);
      linear_case(2, (int64_t[]){3, 0}, 2, bias, act == RG_ACT_GELU, 1e-6, act);
      linear_case(2, (int64_t[]){37, 70}, 13, bias, 0, 3e-5, act);
    }
  dgelu_case(0);
  dgelu_case(1);
  /* the fused pair by finite differences: GELU's derivative made by the next layer's dx
     GEMM (MATMUL_DGELU) */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float x[12], w1[20], b1[5], w2[10];
  fill(x, 12, -1, 1);
  fill(w1, 20, -1, 1);
  fill(b1, 5, -1, 1);
  fill(w2, 10, -1, 1);
  opcall c = {.op = O_GELU_MLP};
  c.p[0] = param(ctx, 2, (int64_t[]){3, 4}, x);
  c.p[1] = param(ctx, 2, (int64_t[]){5, 4}, w1);
  c.p[2] = param(ctx, 1, (int64_t[]){5}, b1);
  c.p[3] = param(ctx, 2, (int64_t[]){2, 5}, w2);
  gradcheck(ctx, &c, 1e-2, 1e-3, "rg_linear of rg_linear_act gelu, gradient");
  close_ctx(ctx);
}

static void t_linear(void) {
  const int no = RG_ACT_NONE;
  for (int bias = 0; bias <= 1; bias++) {
    /* in <= 4: a float sum of <= 5 O(1) terms is within a few ulps: 1e-6 */
    linear_case(2, (int64_t[]){3, 4}, 5, bias, 1, 1e-6, no);
    linear_case(3, (int64_t[]){2, 3, 4}, 5, bias, 1, 1e-6, no);
    linear_case(1, (int64_t[]){4}, 3, bias, 1, 1e-6, no);          /* a single vector */
    linear_case(2, (int64_t[]){1, 1}, 1, bias, 1, 1e-6, no);       /* all size 1 */
    linear_case(4, (int64_t[]){2, 1, 2, 3}, 2, bias, 1, 1e-6, no); /* 4-D input */
    linear_case(2, (int64_t[]){0, 4}, 3, bias, 1, 1e-6, no);       /* no rows */
    linear_case(2, (int64_t[]){3, 0}, 2, bias, 1, 1e-6, no);       /* in = 0: y = b (or 0) */
    linear_case(2, (int64_t[]){3, 4}, 0, bias, 1, 1e-6, no);       /* out = 0 */
    /* blocked GEMM path, in = 70: the float sum's error bound is 70 * 6e-8 * sum|x w|
       (~20) = 8e-5; typical errors are ~1e-6, so 3e-5 */
    linear_case(2, (int64_t[]){37, 70}, 13, bias, 0, 3e-5, no);
  }
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  rg_tensor x = param(ctx, 2, (int64_t[]){3, 4}, NULL), w = param(ctx, 2, (int64_t[]){5, 3}, NULL);
  expect_misuse(ctx, rg_linear(ctx, x, w, RG_NONE), "rg_linear", "x [3,4] with w [5,3]");
  w = param(ctx, 2, (int64_t[]){5, 4}, NULL);
  expect_misuse(ctx, rg_linear(ctx, x, w, param(ctx, 1, (int64_t[]){4}, NULL)), "rg_linear",
                "bias [4] for w [5,4]");
  expect_misuse(ctx, rg_linear(ctx, x, param(ctx, 1, (int64_t[]){4}, NULL), RG_NONE),
                "rg_linear", "1-D w");
  close_ctx(ctx);
}

/* ======================================================================================
   layernorm, rmsnorm
   ====================================================================================== */

static void ref_norm(int ln, const float *x, int64_t R, int64_t C, const float *g,
                     const float *b, double eps, double *out) {
  for (int64_t r = 0; r < R; r++) {
    const float *row = x + r * C;
    double m = 0, v = 0;
    if (ln) {
      for (int64_t j = 0; j < C; j++) m += row[j];
      m /= (double)C;
    }
    for (int64_t j = 0; j < C; j++) v += ((double)row[j] - m) * ((double)row[j] - m);
    v /= (double)C;
    double inv = 1 / sqrt(v + eps);
    for (int64_t j = 0; j < C; j++)
      out[r * C + j] = ((double)row[j] - m) * inv * (g ? g[j] : 1) + (b ? b[j] : 0);
  }
}

static void norm_cases(int ln) {
  const char *name = ln ? "rg_layernorm" : "rg_rmsnorm";
  const float eps = 1e-5f;
  float x[24], g[6], b[6];
  double want[24];
  char what[128];
  fill(x, 24, -2, 2);
  fill_away(g, 6, 0.5, 1.5);
  fill(b, 6, -1, 1);
  for (int affine = 0; affine <= 1; affine++) {
    rg_ctx *ctx = open_ctx();
    if (!ctx) return;
    opcall c = {.op = ln ? O_LAYERNORM : O_RMSNORM, .f = {eps}};
    c.p[0] = param(ctx, 2, (int64_t[]){4, 6}, x);
    c.p[1] = affine ? param(ctx, 1, (int64_t[]){6}, g) : RG_NONE;
    c.p[2] = affine && ln ? param(ctx, 1, (int64_t[]){6}, b) : RG_NONE;
    ref_norm(ln, x, 4, 6, affine ? g : NULL, affine && ln ? b : NULL, eps, want);
    snprintf(what, sizeof what, "%s [4,6] %s", name, affine ? "gamma/beta" : "RG_NONE");
    /* one pass of float sums over 6 values and a float rsqrt: a few ulps of O(1) */
    check_out(ctx, apply(ctx, &c), 2, (int64_t[]){4, 6}, want, 2e-6, what);
    /* normalisation has curvature ~1/sigma^2 (sigma ~1 here): truncation at eps 1e-2 is
       ~1e-4, rounding noise ~1e-4 */
    snprintf(what, sizeof what, "%s [4,6] %s gradient", name, affine ? "gamma/beta" : "RG_NONE");
    gradcheck(ctx, &c, 1e-2, 2e-3, what);
    close_ctx(ctx);
  }
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = ln ? O_LAYERNORM : O_RMSNORM, .f = {eps}};
  c.p[1] = param(ctx, 1, (int64_t[]){6}, g);
  c.p[2] = ln ? param(ctx, 1, (int64_t[]){6}, b) : RG_NONE;
  /* rows offset by 1e4 (and -1e4): the spread stays O(1) and must not be lost. The
     inputs are exact floats (ulp 1e-3 at 1e4); the reference uses them as they are. A
     float mean of 6 values near 1e4 is within ~1e-3 of the true one, so the centred values
     (std ~1) may be off by ~1e-3: tolerance 3e-3 for layernorm. RMSNorm divides by the
     rms (~1e4) and loses nothing: 2e-6. */
  float xo[24];
  memcpy(xo, x, sizeof xo);
  for (int j = 0; j < 6; j++) {
    xo[6 + j] += 1e4f;
    xo[12 + j] -= 1e4f;
  }
  c.p[0] = param(ctx, 3, (int64_t[]){2, 2, 6}, xo);
  ref_norm(ln, xo, 4, 6, g, ln ? b : NULL, eps, want);
  snprintf(what, sizeof what, "%s rows offset by +-1e4", name);
  check_out(ctx, apply(ctx, &c), 3, (int64_t[]){2, 2, 6}, want, ln ? 3e-3 : 2e-6, what);
  /* edges: one row; one column (layernorm gives beta: x - mean = 0); a 1-D input; a
     constant row (variance 0: eps keeps it finite); no rows */
  c.p[0] = param(ctx, 2, (int64_t[]){1, 6}, x);
  ref_norm(ln, x, 1, 6, g, ln ? b : NULL, eps, want);
  snprintf(what, sizeof what, "%s [1,6]", name);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){1, 6}, want, 2e-6, what);
  c.p[0] = param(ctx, 1, (int64_t[]){6}, x);
  snprintf(what, sizeof what, "%s [6]", name);
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){6}, want, 2e-6, what);
  float cst[6] = {3, 3, 3, 3, 3, 3};
  c.p[0] = param(ctx, 2, (int64_t[]){1, 6}, cst);
  ref_norm(ln, cst, 1, 6, g, ln ? b : NULL, eps, want);
  snprintf(what, sizeof what, "%s constant row", name);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){1, 6}, want, 2e-6, what);
  opcall c1 = c;
  c1.p[1] = param(ctx, 1, (int64_t[]){1}, g);
  c1.p[2] = ln ? param(ctx, 1, (int64_t[]){1}, b) : RG_NONE;
  c1.p[0] = param(ctx, 2, (int64_t[]){3, 1}, x);
  ref_norm(ln, x, 3, 1, g, ln ? b : NULL, eps, want);
  snprintf(what, sizeof what, "%s [3,1]", name);
  check_out(ctx, apply(ctx, &c1), 2, (int64_t[]){3, 1}, want, 2e-6, what);
  c.p[0] = param(ctx, 2, (int64_t[]){0, 6}, NULL);
  snprintf(what, sizeof what, "%s [0,6]", name);
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){0, 6}, want, 0, what);
  opcall c0 = {.op = c.op, .f = {eps}};
  c0.p[0] = param(ctx, 2, (int64_t[]){2, 0}, NULL);
  snprintf(what, sizeof what, "%s [2,0] (an empty last axis)", name);
  check_out(ctx, apply(ctx, &c0), 2, (int64_t[]){2, 0}, want, 0, what);
  /* misuse: gamma of the wrong size, a 0-axis x, a negative eps */
  c.p[0] = param(ctx, 2, (int64_t[]){2, 5}, NULL);
  expect_misuse(ctx, apply(ctx, &c), name, "gamma [6] for x [2,5]");
  c.p[0] = param(ctx, 0, NULL, NULL);
  expect_misuse(ctx, apply(ctx, &c), name, "a 0-axis x");
  c.p[0] = param(ctx, 2, (int64_t[]){2, 6}, NULL);
  c.f[0] = -1;
  expect_misuse(ctx, apply(ctx, &c), name, "eps -1");
  close_ctx(ctx);
  /* gradient of a single row */
  ctx = open_ctx();
  if (!ctx) return;
  c.f[0] = eps;
  c.p[0] = param(ctx, 2, (int64_t[]){1, 6}, x);
  c.p[1] = param(ctx, 1, (int64_t[]){6}, g);
  c.p[2] = ln ? param(ctx, 1, (int64_t[]){6}, b) : RG_NONE;
  snprintf(what, sizeof what, "%s [1,6] gradient", name);
  gradcheck(ctx, &c, 1e-2, 2e-3, what);
  close_ctx(ctx);
}

/* x feeds a norm and a product (a residual stream): rg_backward folds the sum of x's two
   gradients into the norm's backward node (its dx_in, ops.h). The gradient must equal,
   bit for bit, the unfolded one, here forced by a scale by 1 between x and the norm
   (which costs the graph 3 nodes: the scale, its backward and the ADD of the sum). */
static void fold_case(int centre) {
  static const float xv[12] = {0.3f, -1.2f, 2.5f, 0.7f, -0.4f, 1.1f,
                               3.0f, -2.2f, 0.05f, 0.9f, -0.6f, 1.7f};
  static const float wv[12] = {1, -2, 0.5f, 3, -1, 0.25f, 2, -0.5f, 1.5f, -3, 0.75f, 1};
  static const float vv[12] = {-0.4f, 0.8f, 1.2f, -1.6f, 2.0f, 0.1f,
                               0.3f, -0.7f, 0.9f, 1.1f, -1.3f, 0.6f};
  float grad[2][12];
  uint64_t nodes[2];
  for (int unfolded = 0; unfolded < 2; unfolded++) {
    rg_ctx *ctx = open_ctx();
    if (!ctx) return;
    int64_t d[2] = {3, 4};
    rg_tensor p = rg_param(ctx, "p", RG_F32, 2, d, (rg_init){RG_INIT_ZEROS, 0, 0});
    CHECK_ST(ctx, rg_write(ctx, p, xv, sizeof xv), RG_OK);
    rg_stats s0, s1;
    rg_tensor x = rg_scale(ctx, p, 2.0f); /* a pass tensor (a parameter's adds go in place) */
    CHECK_ST(ctx, rg_retain_grad(ctx, x), RG_OK);
    rg_stats_get(ctx, &s0);
    rg_tensor xn = unfolded ? rg_scale(ctx, x, 1.0f) : x;
    rg_tensor n = centre ? rg_layernorm(ctx, xn, RG_NONE, RG_NONE, 1e-5f)
                         : rg_rmsnorm(ctx, xn, RG_NONE, 1e-5f);
    rg_tensor l = rg_add(ctx, rg_sum(ctx, rg_mul(ctx, n, input(ctx, 2, d, wv)), RG_ALL_AXES, 0),
                         rg_sum(ctx, rg_mul(ctx, x, input(ctx, 2, d, vv)), RG_ALL_AXES, 0));
    CHECK_ST(ctx, rg_backward(ctx, l), RG_OK);
    rg_stats_get(ctx, &s1);
    nodes[unfolded] = s1.nodes_recorded - s0.nodes_recorded;
    CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, x), grad[unfolded], sizeof grad[0]), RG_OK);
    close_ctx(ctx);
  }
  CHECK(!memcmp(grad[0], grad[1], sizeof grad[0]), "%s: the folded gradient sum differs "
        "from the unfolded one", centre ? "layernorm" : "rmsnorm");
  CHECK(nodes[1] == nodes[0] + 3, "%s: %llu nodes folded, %llu unfolded; want 3 more",
        centre ? "layernorm" : "rmsnorm", (unsigned long long)nodes[0],
        (unsigned long long)nodes[1]);
}

/* rg_layernorm of the sum just recorded by rg_add becomes one ADD_LAYERNORM node (ops.h).
   Everything must equal, bit for bit, the two nodes it replaces (kept apart here by a node
   recorded between them, which with the separate layernorm makes 2 nodes more). The sum
   has a consumer of its own, so its gradient meets the norm's. */
static void add_norm_case(void) {
  static const float av[12] = {0.3f, -1.2f, 2.5f, 0.7f, -0.4f, 1.1f,
                               3.0f, -2.2f, 0.05f, 0.9f, -0.6f, 1.7f};
  static const float wv[12] = {1, -2, 0.5f, 3, -1, 0.25f, 2, -0.5f, 1.5f, -3, 0.75f, 1};
  float got[2][5][12];
  uint64_t nodes[2];
  for (int apart = 0; apart < 2; apart++) {
    rg_ctx *ctx = open_ctx();
    if (!ctx) return;
    int64_t d[2] = {3, 4}, c = 4;
    rg_init u = {RG_INIT_UNIFORM, -1, 1};
    rg_tensor pa = rg_param(ctx, "a", RG_F32, 2, d, u), pb = rg_param(ctx, "b", RG_F32, 2, d, u);
    rg_tensor ga = rg_param(ctx, "g", RG_F32, 1, &c, u), be = rg_param(ctx, "be", RG_F32, 1, &c, u);
    CHECK_ST(ctx, rg_write(ctx, pa, av, sizeof av), RG_OK);
    rg_tensor a = rg_scale(ctx, pa, 1.5f), b = rg_scale(ctx, pb, -0.5f);
    rg_stats s0, s1;
    rg_stats_get(ctx, &s0);
    rg_tensor sum = rg_add(ctx, a, b);
    if (apart) rg_neg(ctx, a);
    rg_tensor y = rg_layernorm(ctx, sum, ga, be, 1e-5f);
    rg_tensor w = input(ctx, 2, d, wv);
    rg_tensor l = rg_add(ctx, rg_sum(ctx, rg_mul(ctx, y, w), RG_ALL_AXES, 0),
                         rg_sum(ctx, rg_mul(ctx, sum, sum), RG_ALL_AXES, 0));
    CHECK_ST(ctx, rg_backward(ctx, l), RG_OK);
    rg_stats_get(ctx, &s1);
    nodes[apart] = s1.nodes_recorded - s0.nodes_recorded;
    rg_tensor t[5] = {y, rg_grad(ctx, pa), rg_grad(ctx, pb), rg_grad(ctx, ga), rg_grad(ctx, be)};
    for (int i = 0; i < 5; i++)
      CHECK_ST(ctx, rg_read(ctx, t[i], got[apart][i], (size_t)rg_numel(ctx, t[i]) * 4), RG_OK);
    close_ctx(ctx);
  }
  static const char *const what[5] = {"y", "da", "db", "dgamma", "dbeta"};
  for (int i = 0; i < 5; i++)
    CHECK(!memcmp(got[0][i], got[1][i], i < 3 ? 48 : 16), "add+layernorm: %s differs from "
          "the separate add and layernorm", what[i]);
  CHECK(nodes[1] == nodes[0] + 2, "add+layernorm: %llu nodes fused, %llu apart; want 2 more",
        (unsigned long long)nodes[0], (unsigned long long)nodes[1]);
  /* and the fused node's gradient by finite differences, through a, b, gamma and beta */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float a[12], b[12], g[4], be[4];
  fill(a, 12, -2, 2);
  fill(b, 12, -2, 2);
  fill(g, 4, 0.5, 1.5);
  fill(be, 4, -1, 1);
  opcall c = {.op = O_ADD_LAYERNORM, .f = {1e-5f}};
  c.p[0] = param(ctx, 2, (int64_t[]){3, 4}, a);
  c.p[1] = param(ctx, 2, (int64_t[]){3, 4}, b);
  c.p[2] = param(ctx, 1, (int64_t[]){4}, g);
  c.p[3] = param(ctx, 1, (int64_t[]){4}, be);
  gradcheck(ctx, &c, 1e-2, 2e-3, "rg_layernorm of an rg_add (one node) gradient");
  close_ctx(ctx);
}

static void t_layernorm(void) {
  norm_cases(1);
  fold_case(1);
  add_norm_case();
}
static void t_rmsnorm(void) {
  norm_cases(0);
  fold_case(0);
}

/* ======================================================================================
   embedding
   ====================================================================================== */

static void t_embedding(void) {
  const int64_t V = 5, C = 3;
  float tab[15];
  fill(tab, 15, -1, 1);
  static const int32_t idx[6] = {4, 0, 4, 2, 4, 0}; /* repeats: 4 three times, 0 twice */
  double want[18];
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = O_EMBEDDING, .ix = idx, .ix_nd = 2, .ix_dims = {2, 3}};
  c.p[0] = param(ctx, 2, (int64_t[]){V, C}, tab);
  for (int p = 0; p < 6; p++)
    for (int j = 0; j < C; j++) want[p * C + j] = tab[idx[p] * C + j];
  check_out(ctx, apply(ctx, &c), 3, (int64_t[]){2, 3, C}, want, 0, "rg_embedding [2,3] ids");
  /* the gradient scatter-adds: row v gets the sum of the weights of every position with
     id v (unused rows 1 and 3 get 0) */
  float g[15], w[15] = {0};
  for (int p = 0; p < 6; p++)
    for (int j = 0; j < C; j++) w[idx[p] * C + j] += weight((uint64_t)(p * C + j));
  if (grad_of(ctx, &c, c.p[0], g, 15, "rg_embedding gradient")) {
    double wd[15];
    for (int i = 0; i < 15; i++) wd[i] = w[i];
    cmp("rg_embedding gradient accumulates repeated ids", g, wd, 15, 2e-7);
  }
  /* edges: a 0-axis index gives [C]; an empty index gives [0,C]; 1-D ids */
  rg_step_begin(ctx);
  opcall c0 = {.op = O_EMBEDDING, .ix = idx + 3, .ix_nd = 0};
  c0.p[0] = c.p[0];
  for (int j = 0; j < C; j++) want[j] = tab[2 * C + j];
  check_out(ctx, apply(ctx, &c0), 1, (int64_t[]){C}, want, 0, "rg_embedding 0-axis id");
  opcall ce = {.op = O_EMBEDDING, .ix = idx, .ix_nd = 1, .ix_dims = {0}};
  ce.p[0] = c.p[0];
  check_out(ctx, apply(ctx, &ce), 2, (int64_t[]){0, C}, want, 0, "rg_embedding no ids");
  opcall c1 = {.op = O_EMBEDDING, .ix = idx, .ix_nd = 1, .ix_dims = {6}};
  c1.p[0] = c.p[0];
  for (int p = 0; p < 6; p++)
    for (int j = 0; j < C; j++) want[p * C + j] = tab[idx[p] * C + j];
  check_out(ctx, apply(ctx, &c1), 2, (int64_t[]){6, C}, want, 0, "rg_embedding 1-D ids");
  /* an out-of-range id fails at the barrier, naming the value; nothing else breaks */
  static const int32_t bad[3] = {1, 5, 0}, neg[2] = {-1, 2};
  const int32_t *bads[2] = {bad, neg};
  const char *vals[2] = {"5", "-1"};
  for (int k = 0; k < 2; k++) {
    rg_step_begin(ctx);
    rg_tensor y = rg_embedding(ctx, c.p[0], input_i32(ctx, 1, (int64_t[]){k ? 2 : 3}, bads[k]));
    CHECK(y.id != 0, "rg_embedding with a bad id must record (it fails at the barrier): %s",
          rg_errmsg(ctx));
    float out[9];
    rg_status st = rg_read(ctx, y, out, (size_t)(k ? 2 : 3) * C * sizeof(float));
    CHECK(st == RG_ERR_MISUSE, "rg_embedding id %s: rg_read -> %s, want RG_ERR_MISUSE",
          vals[k], rg_status_str(st));
    CHECK(rg_error(ctx) == RG_ERR_MISUSE, "rg_embedding id %s: rg_error %s", vals[k],
          rg_status_str(rg_error(ctx)));
    CHECK(msg_has(ctx, "rg_embedding") && msg_has(ctx, vals[k]),
          "rg_embedding id %s: the message must name the op and the value: \"%s\"", vals[k],
          rg_errmsg(ctx));
    rg_clear_error(ctx);
    /* the failed value stays failed; a new one works */
    st = rg_read(ctx, y, out, (size_t)(k ? 2 : 3) * C * sizeof(float));
    CHECK(st == RG_ERR_FAILED, "reading the failed embedding again -> %s, want RG_ERR_FAILED",
          rg_status_str(st));
    rg_clear_error(ctx);
    alive(ctx, "after a bad id");
  }
  /* the table is intact after the failures */
  rg_step_begin(ctx);
  check_out(ctx, apply(ctx, &c1), 2, (int64_t[]){6, C}, want, 0, "rg_embedding after errors");
  /* a table with no columns */
  opcall cc = {.op = O_EMBEDDING, .ix = idx, .ix_nd = 1, .ix_dims = {6}};
  cc.p[0] = param(ctx, 2, (int64_t[]){V, 0}, NULL);
  check_out(ctx, apply(ctx, &cc), 2, (int64_t[]){6, 0}, want, 0, "rg_embedding [5,0] table");
  /* misuse at record time: an F32 index, a 1-D table */
  rg_tensor fidx = input(ctx, 1, (int64_t[]){2}, (float[]){1, 2});
  expect_misuse(ctx, rg_embedding(ctx, c.p[0], fidx), "rg_embedding", "F32 index");
  expect_misuse(ctx, rg_embedding(ctx, param(ctx, 1, (int64_t[]){5}, NULL),
                                  input_i32(ctx, 1, (int64_t[]){1}, idx)),
                "rg_embedding", "1-D table");
  close_ctx(ctx);
  /* gradcheck, with repeated ids */
  ctx = open_ctx();
  if (!ctx) return;
  c.p[0] = param(ctx, 2, (int64_t[]){V, C}, tab);
  gradcheck(ctx, &c, 1e-2, 1e-3, "rg_embedding gradcheck"); /* linear: noise only */
  close_ctx(ctx);
}

/* ======================================================================================
   attention
   ====================================================================================== */

/* The masks of rg_attention_mask, for the reference: key padding [B,S] (or NULL) and a
   bias of nd axes dims (or NULL), broadcast to [B,H,T,S] as bidx does. */
typedef struct ref_masks {
  const int32_t *kp;
  const float *bias;
  int nd;
  const int64_t *dims;
} ref_masks;

static void ref_attention_mask(const float *q, const float *k, const float *v, int64_t BH,
                               int64_t H, int64_t T, int64_t S, int64_t D, int causal,
                               ref_masks mk, double *out) {
  double sc[256]; /* S <= 256 */
  for (int64_t bh = 0; bh < BH; bh++)
    for (int64_t t = 0; t < T; t++) {
      const float *qr = q + (bh * T + t) * D;
      double m = -INFINITY, den = 0;
      for (int64_t s = 0; s < S; s++) {
        if ((causal && s > t) || (mk.kp && mk.kp[bh / H * S + s])) {
          sc[s] = -INFINITY;
          continue;
        }
        double d = 0;
        for (int64_t j = 0; j < D; j++) d += (double)qr[j] * k[(bh * S + s) * D + j];
        sc[s] = d / sqrt((double)D);
        if (mk.bias)
          sc[s] += mk.bias[bidx(((bh * T) + t) * S + s, 4, (int64_t[]){BH / H, H, T, S},
                                mk.nd, mk.dims)];
        m = fmax(m, sc[s]);
      }
      for (int64_t s = 0; s < S; s++) den += sc[s] == -INFINITY ? 0 : exp(sc[s] - m);
      for (int64_t j = 0; j < D; j++) {
        double o = 0;
        for (int64_t s = 0; s < S; s++)
          if (sc[s] != -INFINITY) o += exp(sc[s] - m) / den * v[(bh * S + s) * D + j];
        out[(bh * T + t) * D + j] = o; /* 0 for a row that sees no key */
      }
    }
}

static void ref_attention(const float *q, const float *k, const float *v, int64_t BH,
                          int64_t T, int64_t S, int64_t D, int causal, double *out) {
  ref_attention_mask(q, k, v, BH, 1, T, S, D, causal, (ref_masks){0}, out);
}

/* rg_attention_mask (rg_attention without masks): against the reference with its masks,
   then by finite differences (the masks are constants; q, k and v get gradients). kp [B,S]
   or NULL; bias of bnd axes bd (bnd = 0: none). */
static void attention_mask_case(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D,
                                int causal, const int32_t *kp, const float *bias, int bnd,
                                const int64_t *bd, int grad) {
  char what[160], sb[64];
  int masked = kp || bnd;
  snprintf(what, sizeof what, "rg_attention%s B%lld H%lld T%lld S%lld D%lld %s%s%s%s",
           masked ? "_mask" : "", (long long)B, (long long)H, (long long)T, (long long)S,
           (long long)D, causal ? "causal" : "full", kp ? ", padded" : "",
           masked ? ", bias " : "", masked ? (bnd ? shp(sb, bnd, bd) : "none") : "");
  int64_t nq = B * H * T * D, nk = B * H * S * D;
  float *q = malloc(sizeof(float) * (size_t)(nq + 1)),
        *k = malloc(sizeof(float) * (size_t)(nk + 1)),
        *v = malloc(sizeof(float) * (size_t)(nk + 1));
  double *want = calloc((size_t)(nq + 1), sizeof(double));
  fill(q, nq, -1.5, 1.5);
  fill(k, nk, -1.5, 1.5);
  fill(v, nk, -1, 1);
  ref_attention_mask(q, k, v, B * H, H, T, S, D, causal, (ref_masks){kp, bias, bnd, bd}, want);
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    opcall c = {.op = masked ? O_ATTENTION_MASK : O_ATTENTION, .i = {causal}, .ix = kp,
                .ix_nd = 2, .ix_dims = {B, S}, .fx = bnd ? bias : NULL, .fx_nd = bnd};
    if (bnd) memcpy(c.fx_dims, bd, sizeof(int64_t) * (size_t)bnd);
    c.p[0] = param(ctx, 4, (int64_t[]){B, H, T, D}, q);
    c.p[1] = param(ctx, 4, (int64_t[]){B, H, S, D}, k);
    c.p[2] = param(ctx, 4, (int64_t[]){B, H, S, D}, v);
    /* float dot products of <= 8 terms, a float softmax and a weighted sum: a few ulps */
    check_out(ctx, apply(ctx, &c), 4, (int64_t[]){B, H, T, D}, want, 3e-6, what);
    /* smooth, scores O(1): truncation and noise ~2e-4 at eps 1e-2 */
    if (grad) gradcheck(ctx, &c, 1e-2, 2e-3, what);
    close_ctx(ctx);
  }
  free(q);
  free(k);
  free(v);
  free(want);
}

static void attention_case(int64_t B, int64_t H, int64_t T, int64_t S, int64_t D, int causal,
                           int grad) {
  attention_mask_case(B, H, T, S, D, causal, NULL, NULL, 0, NULL, grad);
}

static void t_attention(void) {
  for (int causal = 0; causal <= 1; causal++) {
    attention_case(1, 2, 3, 3, 4, causal, 1);
    attention_case(2, 1, 4, 4, 2, causal, 1);
    attention_case(1, 1, 1, 1, 3, causal, 1); /* T = 1 */
    attention_case(2, 2, 5, 5, 8, causal, 0);
  }
  attention_case(1, 2, 2, 5, 3, 0, 1); /* S != T, not causal */
  attention_case(1, 1, 4, 2, 3, 0, 1); /* S < T */
  attention_case(1, 1, 1, 6, 2, 0, 1); /* one query, many keys */
  attention_case(1, 2, 3, 5, 2, 1, 0); /* causal, S > T: key s masked when s > t */
  /* The CPU kernel's blocks (32 queries, causal groups of 4, key columns rounded up to
     16, vectors of up to 16 floats): T and S past one block and not a multiple of it, D
     not a multiple of a vector, fewer and more keys than queries under the causal mask. */
  for (int causal = 0; causal <= 1; causal++) {
    attention_case(1, 2, 37, 37, 20, causal, 1);
    attention_case(2, 1, 70, 70, 5, causal, 0);
  }
  attention_case(1, 1, 40, 53, 17, 1, 1); /* causal, S > T */
  attention_case(1, 1, 50, 33, 3, 1, 1);  /* causal, S < T */
  attention_case(1, 1, 66, 90, 1, 0, 0);  /* D = 1 */
  attention_case(1, 2, 0, 3, 2, 0, 1); /* no queries */
  attention_case(1, 2, 0, 3, 2, 1, 0);
  attention_case(0, 2, 3, 3, 2, 1, 0); /* no batch */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  rg_tensor q = param(ctx, 4, (int64_t[]){1, 2, 3, 4}, NULL);
  rg_tensor k = param(ctx, 4, (int64_t[]){1, 2, 3, 5}, NULL);
  expect_misuse(ctx, rg_attention(ctx, q, k, k, 0), "rg_attention", "D 4 with D 5");
  rg_tensor k2 = param(ctx, 4, (int64_t[]){1, 2, 3, 4}, NULL),
            v2 = param(ctx, 4, (int64_t[]){1, 2, 4, 4}, NULL);
  expect_misuse(ctx, rg_attention(ctx, q, k2, v2, 0), "rg_attention", "k and v differ");
  expect_misuse(ctx, rg_attention(ctx, param(ctx, 3, (int64_t[]){2, 3, 4}, NULL), k2, k2, 1),
                "rg_attention", "3-D q");
  close_ctx(ctx);
}

/* n bias values in [-1, 1], every step-th (from 0) -inf when step > 0; the caller frees. */
static float *rand_bias(int64_t n, int step) {
  float *b = malloc(sizeof(float) * (size_t)(n + 1));
  fill(b, n, -1, 1);
  for (int64_t i = 0; step > 0 && i < n; i += step) b[i] = -INFINITY;
  return b;
}

/* Keys keep[0..2] of batch b of x [B,H,S,D], as a [1,H,3,D] tensor. */
static rg_tensor keep3(rg_ctx *ctx, rg_tensor x, int64_t b, const int *keep) {
  rg_tensor xb = rg_slice(ctx, x, 0, b, 1), y = rg_slice(ctx, xb, 2, keep[0], 1);
  for (int i = 1; i < 3; i++) y = rg_concat(ctx, y, rg_slice(ctx, xb, 2, keep[i], 1), 2);
  return y;
}

/* Key padding is removal: rg_attention_mask with keys padded gives the bits rg_attention
   gives on the keys that are left (per batch: slices and concats of the same values), and
   so do the gradients of q, k and v (zero at the padded keys). Then a batch whose every
   key is padded: its output and its q's gradient are exactly 0. */
static void attention_pad_removed(void) {
  enum { B = 2, H = 2, T = 3, S = 5, D = 4 };
  static const int32_t kp[B * S] = {0, 1, 0, 1, 0, 1, 0, 0, 0, 1};
  static const int keep[B][3] = {{0, 2, 4}, {1, 2, 3}};
  float q[B * H * T * D], k[B * H * S * D], v[B * H * S * D];
  fill(q, B * H * T * D, -1.5, 1.5);
  fill(k, B * H * S * D, -1.5, 1.5);
  fill(v, B * H * S * D, -1, 1);
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  rg_tensor p[3] = {param(ctx, 4, (int64_t[]){B, H, T, D}, q),
                    param(ctx, 4, (int64_t[]){B, H, S, D}, k),
                    param(ctx, 4, (int64_t[]){B, H, S, D}, v)};
  int64_t n[3] = {B * H * T * D, B * H * S * D, B * H * S * D};
  static float y[2][B * H * T * D], g[2][3][B * H * S * D];
  for (int way = 0; way < 2; way++) {
    rg_step_begin(ctx);
    rg_zero_grad(ctx);
    rg_tensor o;
    if (way == 0) {
      o = rg_attention_mask(ctx, p[0], p[1], p[2], 0,
                            input_i32(ctx, 2, (int64_t[]){B, S}, kp), RG_NONE);
    } else {
      o = RG_NONE;
      for (int64_t b = 0; b < B; b++) {
        rg_tensor ob = rg_attention(ctx, rg_slice(ctx, p[0], 0, b, 1), keep3(ctx, p[1], b, keep[b]),
                                    keep3(ctx, p[2], b, keep[b]), 0);
        o = b ? rg_concat(ctx, o, ob, 0) : ob;
      }
    }
    float w[B * H * T * D];
    for (int i = 0; i < B * H * T * D; i++) w[i] = weight((uint64_t)i);
    rg_tensor loss = rg_sum(ctx, rg_mul(ctx, o, input(ctx, 4, (int64_t[]){B, H, T, D}, w)),
                            RG_ALL_AXES, 0);
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    readf(ctx, o, y[way], B * H * T * D, "padding as removal: output");
    for (int j = 0; j < 3; j++) readf(ctx, rg_grad(ctx, p[j]), g[way][j], n[j], "gradient");
  }
  check_exact("padding as removal: output", y[0], y[1], B * H * T * D);
  check_exact("padding as removal: dq", g[0][0], g[1][0], n[0]);
  check_exact("padding as removal: dk", g[0][1], g[1][1], n[1]);
  check_exact("padding as removal: dv", g[0][2], g[1][2], n[2]);
  /* batch 1 fully padded, batch 0 not at all */
  static const int32_t all[B * S] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  rg_step_begin(ctx);
  rg_zero_grad(ctx);
  rg_tensor o = rg_attention_mask(ctx, p[0], p[1], p[2], 1,
                                  input_i32(ctx, 2, (int64_t[]){B, S}, all), RG_NONE);
  CHECK_ST(ctx, rg_backward(ctx, rg_sum(ctx, o, RG_ALL_AXES, 0)), RG_OK);
  readf(ctx, o, y[0], B * H * T * D, "fully padded: output");
  readf(ctx, rg_grad(ctx, p[0]), g[0][0], n[0], "fully padded: dq");
  readf(ctx, rg_grad(ctx, p[1]), g[0][1], n[1], "fully padded: dk");
  int64_t half = H * T * D, zeros = 0, finite = 1;
  for (int64_t i = 0; i < half; i++) zeros += y[0][half + i] == 0 && g[0][0][half + i] == 0;
  for (int64_t i = 0; i < n[0]; i++) finite &= isfinite(y[0][i]) && isfinite(g[0][0][i]);
  for (int64_t i = 0; i < H * S * D; i++) zeros += g[0][1][H * S * D + i] == 0;
  CHECK(zeros == half + H * S * D && finite, "fully padded batch: %lld of %lld outputs, dq and "
        "dk entries are 0 (finite: %lld)", (long long)zeros, (long long)(half + H * S * D),
        (long long)finite);
  close_ctx(ctx);
}

static void t_attention_mask(void) {
  static const int32_t kp25[10] = {0, 1, 0, 0, 1, 1, 0, 0, 0, 0}; /* [2,5] */
  static const int32_t kp24[8] = {0, 0, 1, 0, 0, 1, 0, 0};        /* [2,4] */
  for (int causal = 0; causal <= 1; causal++) {
    attention_mask_case(2, 2, 3, 5, 4, causal, kp25, NULL, 0, NULL, 1);  /* padding */
    attention_mask_case(2, 1, 4, 4, 3, causal, kp24, NULL, 0, NULL, 1);
  }
  int64_t ts[2] = {3, 5}, b1ts[4] = {2, 1, 3, 5}, bhts[4] = {2, 2, 3, 5}, s1[1] = {5},
          b11s[4] = {2, 1, 1, 5}, h1s[3] = {2, 1, 5};
  float *b = rand_bias(15, 0);
  attention_mask_case(2, 2, 3, 5, 4, 0, NULL, b, 2, ts, 1);            /* [T,S] */
  free(b);
  b = rand_bias(30, 0);
  attention_mask_case(2, 2, 3, 5, 4, 1, NULL, b, 4, b1ts, 1);          /* [B,1,T,S] */
  free(b);
  b = rand_bias(60, 7);
  attention_mask_case(2, 2, 3, 5, 4, 0, NULL, b, 4, bhts, 1);          /* [B,H,T,S], -inf */
  free(b);
  b = rand_bias(5, 0);
  attention_mask_case(2, 2, 3, 5, 4, 0, NULL, b, 1, s1, 0);            /* [S] */
  free(b);
  b = rand_bias(10, 3);
  attention_mask_case(2, 2, 3, 5, 4, 1, NULL, b, 4, b11s, 0);          /* [B,1,1,S] */
  attention_mask_case(2, 2, 3, 5, 4, 0, kp25, b, 4, b11s, 1);          /* both masks */
  free(b);
  b = rand_bias(10, 4);
  attention_mask_case(2, 2, 3, 5, 4, 1, kp25, b, 3, h1s, 1);           /* [H,1,S] */
  free(b);
  /* every key of a row masked: row (b 0, h 1, t 1) by a bias of -inf, batch 1's rows 0
     and 1 by padding with causal (its keys 0 and 1 padded), so they see no key */
  static const int32_t kp01[10] = {0, 0, 0, 0, 0, 1, 1, 0, 0, 0};
  b = rand_bias(60, 0);
  for (int s = 0; s < 5; s++) b[((0 * 2 + 1) * 3 + 1) * 5 + s] = -INFINITY;
  attention_mask_case(2, 2, 3, 5, 4, 1, kp01, b, 4, bhts, 1);
  free(b);
  b = rand_bias(5, 0);
  attention_mask_case(1, 2, 0, 5, 2, 0, kp25, b, 1, s1, 1);            /* no queries */
  free(b);
  /* past one block of the CPU kernel (see t_attention): padding and a bias with -inf */
  int32_t kp45[90];
  for (int i = 0; i < 90; i++) kp45[i] = i % 7 == 3 || (i >= 45 && i < 50);
  int64_t b1ts2[4] = {2, 1, 37, 45};
  b = rand_bias(2 * 37 * 45, 11);
  for (int causal = 0; causal <= 1; causal++)
    attention_mask_case(2, 2, 37, 45, 6, causal, kp45, b, 4, b1ts2, causal);
  free(b);
  attention_pad_removed();
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  rg_tensor q = param(ctx, 4, (int64_t[]){2, 2, 3, 4}, NULL),
            k = param(ctx, 4, (int64_t[]){2, 2, 5, 4}, NULL);
  int32_t z[12] = {0};
  float f[32] = {0};
  expect_misuse(ctx, rg_attention_mask(ctx, q, k, k, 0, input(ctx, 2, (int64_t[]){2, 5}, f),
                                       RG_NONE), "rg_attention_mask", "F32 key padding");
  expect_misuse(ctx, rg_attention_mask(ctx, q, k, k, 0,
                                       input_i32(ctx, 2, (int64_t[]){2, 6}, z), RG_NONE),
                "rg_attention_mask", "key padding [2,6] for S 5");
  expect_misuse(ctx, rg_attention_mask(ctx, q, k, k, 0, RG_NONE,
                                       input(ctx, 2, (int64_t[]){3, 4}, f)),
                "rg_attention_mask", "bias [3,4] for [2,2,3,5]");
  expect_misuse(ctx, rg_attention_mask(ctx, q, k, k, 0, RG_NONE,
                                       input_i32(ctx, 2, (int64_t[]){3, 4}, z)),
                "rg_attention_mask", "I32 bias");
  expect_misuse(ctx, rg_attention_mask(ctx, q, k, k, 0, RG_NONE,
                                       param(ctx, 2, (int64_t[]){3, 5}, NULL)),
                "rg_attention_mask", "bias that requires a gradient");
  close_ctx(ctx);
}

/* rg_attention_qkv on qkv [B,T,3C] with H heads: (1) against ref_attention of the heads
   copied out here, (2) the same bits as the composition it replaces (attention_split),
   forward and gradient, (3) by finite differences. */
static void attention_qkv_case(int64_t B, int64_t T, int64_t H, int64_t D, int causal,
                               int grad) {
  char what[128];
  snprintf(what, sizeof what, "rg_attention_qkv B%lld T%lld H%lld D%lld %s", (long long)B,
           (long long)T, (long long)H, (long long)D, causal ? "causal" : "full");
  int64_t C = H * D, n = B * T * 3 * C, no = B * T * C;
  float *x = malloc(sizeof(float) * (size_t)(n + 1)), *qkv[3];
  float *got = malloc(sizeof(float) * (size_t)(n + 1));
  float *ref = malloc(sizeof(float) * (size_t)(n + 1));
  double *heads = calloc((size_t)(no + 1), sizeof(double));
  double *want = calloc((size_t)(no + 1), sizeof(double));
  fill(x, n, -1.5, 1.5);
  for (int w = 0; w < 3; w++) { /* q, k, v as [B,H,T,D] */
    qkv[w] = malloc(sizeof(float) * (size_t)(no + 1));
    for (int64_t i = 0; i < no; i++) {
      int64_t d = i % D, t = i / D % T, h = i / (D * T) % H, b = i / (D * T * H);
      qkv[w][i] = x[(b * T + t) * 3 * C + w * C + h * D + d];
    }
  }
  ref_attention(qkv[0], qkv[1], qkv[2], B * H, T, T, D, causal, heads);
  for (int64_t i = 0; i < no; i++) { /* [B,H,T,D] -> [B,T,C] */
    int64_t d = i % D, t = i / D % T, h = i / (D * T) % H, b = i / (D * T * H);
    want[(b * T + t) * C + h * D + d] = heads[i];
  }
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    opcall c = {.op = O_ATTENTION_QKV, .i = {causal, (int)H}};
    c.p[0] = param(ctx, 3, (int64_t[]){B, T, 3 * C}, x);
    check_out(ctx, apply(ctx, &c), 3, (int64_t[]){B, T, C}, want, 3e-6, what); /* as above */
    /* The same kernel on the same values in the same order: equal bits. Forward through
       the loss, then the gradient (the split's slices only add zeros to it). */
    opcall split = c;
    split.op = O_ATTENTION_SPLIT;
    float lq = 0, ls = 0;
    rg_step_begin(ctx);
    rg_status st = rg_item(ctx, loss_of(ctx, &c), &lq);
    if (st == RG_OK) st = rg_item(ctx, loss_of(ctx, &split), &ls);
    CHECK(st == RG_OK && lq == ls, "%s: loss %.9g, the split composition's %.9g: %s", what,
          lq, ls, rg_errmsg(ctx));
    if (grad_of(ctx, &c, c.p[0], got, n, what) && grad_of(ctx, &split, c.p[0], ref, n, what))
      check_exact(what, got, ref, n);
    if (grad) gradcheck(ctx, &c, 1e-2, 2e-3, what); /* as rg_attention's */
    close_ctx(ctx);
  }
  for (int w = 0; w < 3; w++) free(qkv[w]);
  free(x);
  free(got);
  free(ref);
  free(heads);
  free(want);
}

static void t_attention_qkv(void) {
  for (int causal = 0; causal <= 1; causal++) {
    attention_qkv_case(1, 3, 2, 4, causal, 1);
    attention_qkv_case(2, 4, 1, 2, causal, 1);
    attention_qkv_case(1, 1, 3, 3, causal, 1); /* T = 1 */
    attention_qkv_case(2, 5, 2, 8, causal, 0);
    attention_qkv_case(1, 7, 3, 5, causal, 0); /* odd T and D */
    attention_qkv_case(1, 35, 2, 6, causal, 1); /* past one block (see t_attention) */
    attention_qkv_case(2, 70, 3, 20, causal, 0);
  }
  attention_qkv_case(1, 0, 2, 2, 1, 0); /* no positions */
  attention_qkv_case(0, 3, 2, 2, 1, 0); /* no batch */
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  /* Empty tensors with huge extents size nothing (a fuzzer found a 2^42-byte scratch for
     qkv [0, 2^40, 6]): no batch, and D = 0 with 2^40 keys; forward and backward. */
  int64_t big = (int64_t)1 << 40;
  rg_tensor e = param(ctx, 3, (int64_t[]){0, big, 6}, NULL);
  rg_tensor q0 = param(ctx, 4, (int64_t[]){1, 1, 3, 0}, NULL);
  rg_tensor k0 = param(ctx, 4, (int64_t[]){1, 1, big, 0}, NULL);
  rg_tensor ye = rg_attention_qkv(ctx, e, 2, 1), y0 = rg_attention(ctx, q0, k0, k0, 0);
  rg_tensor l0 = rg_add(ctx, rg_sum(ctx, ye, RG_ALL_AXES, 0), rg_sum(ctx, y0, RG_ALL_AXES, 0));
  float lv = -1;
  CHECK(rg_backward(ctx, l0) == RG_OK && rg_item(ctx, l0, &lv) == RG_OK && lv == 0 &&
        rg_error(ctx) == RG_OK, "empty attention with huge extents: %s", rg_errmsg(ctx));
  rg_tensor x = param(ctx, 3, (int64_t[]){2, 3, 24}, NULL);
  expect_misuse(ctx, rg_attention_qkv(ctx, x, 5, 1), "rg_attention_qkv",
                "24 columns, 5 heads");
  expect_misuse(ctx, rg_attention_qkv(ctx, x, 0, 1), "rg_attention_qkv", "0 heads");
  expect_misuse(ctx, rg_attention_qkv(ctx, param(ctx, 3, (int64_t[]){2, 3, 25}, NULL), 1, 0),
                "rg_attention_qkv", "25 columns");
  expect_misuse(ctx, rg_attention_qkv(ctx, param(ctx, 2, (int64_t[]){3, 24}, NULL), 2, 1),
                "rg_attention_qkv", "2-D qkv");
  close_ctx(ctx);
}

/* ======================================================================================
   cross entropy, mse
   ====================================================================================== */

static double ref_ce(const float *l, const int32_t *t, int64_t N, int64_t C, int has_ign,
                     int ign) {
  double s = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < N; r++) {
    if (has_ign && t[r] == ign) continue;
    double m = -INFINITY, z = 0;
    for (int64_t j = 0; j < C; j++) m = fmax(m, l[r * C + j]);
    for (int64_t j = 0; j < C; j++) z += exp(l[r * C + j] - m);
    s += m + log(z) - l[r * C + t[r]];
    n++;
  }
  return n ? s / (double)n : 0;
}

static void ce_case(int nd, const int64_t *ld, const int32_t *tg, int has_ign, int ign,
                    int grad, const char *what) {
  int64_t C = ld[nd - 1], N = prod(nd, ld) / C, n = prod(nd, ld);
  float *l = malloc(sizeof(float) * (size_t)(n + 1));
  fill(l, n, -3, 3);
  double want = ref_ce(l, tg, N, C, has_ign, ign);
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    opcall c = {.op = has_ign ? O_CE_IGNORE : O_CE, .i = {ign}, .ix = tg, .ix_nd = nd - 1};
    memcpy(c.ix_dims, ld, sizeof(int64_t) * (size_t)(nd - 1));
    c.p[0] = param(ctx, nd, ld, l);
    /* a float log-sum-exp per row, averaged: a few ulps of O(1) */
    check_out(ctx, apply(ctx, &c), 0, NULL, &want, 2e-6, what);
    if (grad) gradcheck(ctx, &c, 1e-2, 1e-3, what); /* smooth, loss O(1) */
    close_ctx(ctx);
  }
  free(l);
}

static void ce_bad_target(int has_ign, const char *name) {
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float l[8];
  fill(l, 8, -1, 1);
  rg_tensor p = param(ctx, 2, (int64_t[]){2, 4}, l);
  static const int32_t bad[2][2] = {{1, 4}, {-3, 0}};
  const char *vals[2] = {"4", "-3"};
  for (int k = 0; k < 2; k++) {
    rg_step_begin(ctx);
    rg_tensor t = input_i32(ctx, 1, (int64_t[]){2}, bad[k]);
    rg_tensor y = has_ign ? rg_cross_entropy_ignore(ctx, p, t, -100) : rg_cross_entropy(ctx, p, t);
    CHECK(y.id != 0, "%s target %s must record (it fails at the barrier): %s", name, vals[k],
          rg_errmsg(ctx));
    float v;
    rg_status st = rg_item(ctx, y, &v);
    CHECK(st == RG_ERR_MISUSE, "%s target %s: rg_item -> %s, want RG_ERR_MISUSE", name,
          vals[k], rg_status_str(st));
    /* at the barrier the node's op (rg_cross_entropy) names the failure */
    CHECK(msg_has(ctx, "rg_cross_entropy") && msg_has(ctx, vals[k]),
          "%s target %s: the message must name the op and the value: \"%s\"", name, vals[k],
          rg_errmsg(ctx));
    rg_clear_error(ctx);
  }
  /* shape and dtype misuse at record time */
  rg_step_begin(ctx);
  rg_tensor t3 = input_i32(ctx, 1, (int64_t[]){3}, (int32_t[]){0, 1, 2});
  expect_misuse(ctx,
                has_ign ? rg_cross_entropy_ignore(ctx, p, t3, -1) : rg_cross_entropy(ctx, p, t3),
                name, "targets [3] for logits [2,4]");
  rg_tensor tf = input(ctx, 1, (int64_t[]){2}, (float[]){0, 1});
  expect_misuse(ctx,
                has_ign ? rg_cross_entropy_ignore(ctx, p, tf, -1) : rg_cross_entropy(ctx, p, tf),
                name, "F32 targets");
  /* the context works and the loss is right afterwards */
  rg_tensor ok = input_i32(ctx, 1, (int64_t[]){2}, (int32_t[]){3, 0});
  double want = ref_ce(l, (int32_t[]){3, 0}, 2, 4, 0, 0);
  check_out(ctx, has_ign ? rg_cross_entropy_ignore(ctx, p, ok, -1) : rg_cross_entropy(ctx, p, ok),
            0, NULL, &want, 2e-6, "cross entropy after errors");
  close_ctx(ctx);
}

/* The backward fused into the forward node: the unfused bits (common.h). */
static void ce_fused(int ignore, const char *what) {
  for (int lin = 0; lin < 2; lin++) {
    rg_ctx *ctx = open_ctx();
    if (!ctx) return;
    xent_fused_check(ctx, 37, 11, ignore, lin, what);
    close_ctx(ctx);
  }
}

/* The fused backward's edges (autograd.c), each against the unfused bits (a retained
   loss): the logits' retained gradient is the forward's own dlogits; a loss read before
   rg_backward has run, so nothing is fused; a second rg_backward from the same loss is
   not fused and adds the same into the parameter's gradient. */
static void ce_fused_edges(void) {
  static const int32_t tg[4] = {1, 0, 4, 2};
  static const char *what[3] = {"fused backward: retained logits' gradient",
                                "fused backward: loss read first",
                                "fused backward: two backward passes"};
  float l[20], got[2][20];
  fill(l, 20, -2, 2);
  for (int mode = 0; mode < 3; mode++) {
    for (int fused = 0; fused < 2; fused++) {
      rg_ctx *ctx = open_ctx();
      if (!ctx) return;
      rg_tensor p = param(ctx, 2, (int64_t[]){4, 5}, l);
      rg_step_begin(ctx);
      rg_tensor lg = rg_scale(ctx, p, 1.5f);
      CHECK_ST(ctx, rg_retain_grad(ctx, lg), RG_OK);
      rg_tensor loss = rg_cross_entropy(ctx, lg, input_i32(ctx, 1, (int64_t[]){4}, tg));
      if (!fused) CHECK_ST(ctx, rg_retain_grad(ctx, loss), RG_OK);
      float v;
      if (mode == 1) CHECK_ST(ctx, rg_item(ctx, loss, &v), RG_OK);
      CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
      if (mode == 2) CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
      readf(ctx, rg_grad(ctx, mode == 0 ? lg : p), got[fused], 20, what[mode]);
      close_ctx(ctx);
    }
    check_exact(what[mode], got[1], got[0], 20);
  }
}

static void t_cross_entropy(void) {
  static const int32_t t4[4] = {0, 4, 2, 2}, t6[6] = {3, 0, 1, 3, 2, 0}, t1[1] = {1};
  ce_case(2, (int64_t[]){4, 5}, t4, 0, 0, 1, "rg_cross_entropy [4,5]");
  ce_case(3, (int64_t[]){2, 3, 4}, t6, 0, 0, 1, "rg_cross_entropy [2,3,4]");
  ce_case(2, (int64_t[]){1, 3}, t1, 0, 0, 1, "rg_cross_entropy single row");
  ce_case(1, (int64_t[]){3}, t1, 0, 0, 1, "rg_cross_entropy [3] with a 0-axis target");
  ce_case(2, (int64_t[]){2, 1}, (int32_t[]){0, 0}, 0, 0, 1, "rg_cross_entropy one class");
  /* far-off logits: a naive softmax would overflow */
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    float l[6] = {1e4f, -1e4f, 0, -5e3f, 5e3f, 1e4f};
    int32_t t[2] = {1, 0};
    double want = ref_ce(l, t, 2, 3, 0, 0);
    opcall c = {.op = O_CE, .ix = t, .ix_nd = 1, .ix_dims = {2}};
    c.p[0] = param(ctx, 2, (int64_t[]){2, 3}, l);
    check_out(ctx, apply(ctx, &c), 0, NULL, &want, 2e-6, "rg_cross_entropy logits +-1e4");
    close_ctx(ctx);
  }
  /* no classes: every target is out of range, reported at the barrier */
  ctx = open_ctx();
  if (ctx) {
    rg_tensor y = rg_cross_entropy(ctx, param(ctx, 2, (int64_t[]){2, 0}, NULL),
                                   input_i32(ctx, 1, (int64_t[]){2}, (int32_t[]){0, 0}));
    float v = 0;
    rg_status st = rg_item(ctx, y, &v);
    CHECK(st == RG_ERR_MISUSE && msg_has(ctx, "rg_cross_entropy"),
          "rg_cross_entropy with 0 classes -> %s, want RG_ERR_MISUSE: \"%s\"",
          rg_status_str(st), rg_errmsg(ctx));
    rg_clear_error(ctx);
    close_ctx(ctx);
  }
  ce_bad_target(0, "rg_cross_entropy");
  ce_fused(0, "rg_cross_entropy fused backward");
  ce_fused_edges();
}

static void t_cross_entropy_ignore(void) {
  static const int32_t t4[4] = {0, -100, 2, -100}, t6[6] = {3, 2, 1, 2, 2, 0};
  ce_case(2, (int64_t[]){4, 5}, t4, 1, -100, 1, "rg_cross_entropy_ignore -100");
  ce_case(3, (int64_t[]){2, 3, 4}, t6, 1, 2, 1, "rg_cross_entropy_ignore a valid class (2)");
  ce_case(2, (int64_t[]){4, 5}, (int32_t[]){0, 4, 2, 2}, 1, -1, 1,
          "rg_cross_entropy_ignore none ignored");
  /* every target ignored: 0, with a zero (finite) gradient */
  static const int32_t all[3] = {-100, -100, -100};
  ce_case(2, (int64_t[]){3, 4}, all, 1, -100, 1, "rg_cross_entropy_ignore all ignored");
  ce_case(2, (int64_t[]){0, 4}, all, 1, -100, 1, "rg_cross_entropy_ignore no rows");
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    float l[12], g[12], zero[12] = {0};
    fill(l, 12, -2, 2);
    opcall c = {.op = O_CE_IGNORE, .i = {-100}, .ix = all, .ix_nd = 1, .ix_dims = {3}};
    c.p[0] = param(ctx, 2, (int64_t[]){3, 4}, l);
    if (grad_of(ctx, &c, c.p[0], g, 12, "all ignored gradient"))
      check_exact("rg_cross_entropy_ignore all ignored: the gradient is 0", g, zero, 12);
    /* an ignored target may be out of range; a non-ignored one may not */
    rg_step_begin(ctx);
    static const int32_t t[3] = {-100, 1, 7};
    rg_tensor y = rg_cross_entropy_ignore(ctx, c.p[0], input_i32(ctx, 1, (int64_t[]){3}, t), 7);
    float v = 0;
    rg_status st = rg_item(ctx, y, &v);
    CHECK(st == RG_ERR_MISUSE && msg_has(ctx, "-100"),
          "rg_cross_entropy_ignore: target -100 when ignoring 7 -> %s, want RG_ERR_MISUSE "
          "naming -100: \"%s\"", rg_status_str(st), rg_errmsg(ctx));
    rg_clear_error(ctx);
    rg_step_begin(ctx);
    static const int32_t t2[3] = {7, 1, 7};
    double want = ref_ce(l, t2, 3, 4, 1, 7);
    y = rg_cross_entropy_ignore(ctx, c.p[0], input_i32(ctx, 1, (int64_t[]){3}, t2), 7);
    check_out(ctx, y, 0, NULL, &want, 2e-6, "rg_cross_entropy_ignore out-of-range ignore_index");
    close_ctx(ctx);
  }
  ce_bad_target(1, "rg_cross_entropy_ignore");
  ce_fused(1, "rg_cross_entropy_ignore fused backward");
}

static void t_mse(void) {
  const int64_t shapes[3][3] = {{2, 3, 4}, {1, 1, 1}, {5, 1, 1}};
  const int nds[3] = {3, 1, 2};
  for (int s = 0; s < 3; s++) {
    int64_t n = prod(nds[s], shapes[s]);
    float a[24], b[24];
    fill(a, n, -2, 2);
    fill(b, n, -2, 2);
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    want /= (double)n;
    rg_ctx *ctx = open_ctx();
    if (!ctx) return;
    opcall c = {.op = O_MSE};
    c.p[0] = param(ctx, nds[s], shapes[s], a);
    c.p[1] = param(ctx, nds[s], shapes[s], b);
    char what[64], sb[64];
    snprintf(what, sizeof what, "rg_mse %s", shp(sb, nds[s], shapes[s]));
    check_out(ctx, apply(ctx, &c), 0, NULL, &want, 2e-6, what); /* float sum of 24 squares */
    gradcheck(ctx, &c, 1e-2, 1e-3, what); /* quadratic: central differences are exact */
    c.retain = 1; /* a retained loss: rg_backward's seed is then a FILL node */
    snprintf(what, sizeof what, "rg_mse %s, the loss retained", shp(sb, nds[s], shapes[s]));
    gradcheck(ctx, &c, 1e-2, 1e-3, what);
    close_ctx(ctx);
  }
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  expect_misuse(
      ctx, rg_mse(ctx, param(ctx, 2, (int64_t[]){2, 3}, NULL), param(ctx, 1, (int64_t[]){3}, NULL)),
      "rg_mse", "[2,3] with [3] (no broadcasting)");
  close_ctx(ctx);
}

/* ======================================================================================
   Shape ops
   ====================================================================================== */

static void t_reshape(void) {
  float x[24];
  double want[24];
  fill(x, 24, -1, 1);
  for (int i = 0; i < 24; i++) want[i] = x[i];
  struct { int nd; int64_t d[4]; int ond; int64_t od[4]; } cs[] = {
      {2, {4, -1}, 2, {4, 6}},   {3, {-1, 2, 3}, 3, {4, 2, 3}}, {1, {-1}, 1, {24}},
      {4, {2, 3, 4, 1}, 4, {2, 3, 4, 1}}, {2, {24, 1}, 2, {24, 1}}, {3, {1, -1, 1}, 3, {1, 24, 1}}};
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = O_RESHAPE};
  c.p[0] = param(ctx, 3, (int64_t[]){2, 3, 4}, x);
  char what[96], s1[64];
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    c.nd = cs[k].nd;
    memcpy(c.dims, cs[k].d, sizeof c.dims);
    snprintf(what, sizeof what, "rg_reshape [2,3,4] to %s", shp(s1, cs[k].nd, cs[k].d));
    check_out(ctx, apply(ctx, &c), cs[k].ond, cs[k].od, want, 0, what);
  }
  /* edges: [1] <-> [], zero-size with -1 inferable, I32 */
  opcall c0 = {.op = O_RESHAPE, .nd = 0};
  c0.p[0] = param(ctx, 2, (int64_t[]){1, 1}, x);
  check_out(ctx, apply(ctx, &c0), 0, NULL, want, 0, "rg_reshape [1,1] to []");
  opcall c1 = {.op = O_RESHAPE, .nd = 2, .dims = {1, -1}};
  c1.p[0] = param(ctx, 0, NULL, x);
  check_out(ctx, apply(ctx, &c1), 2, (int64_t[]){1, 1}, want, 0, "rg_reshape [] to [1,-1]");
  opcall cz = {.op = O_RESHAPE, .nd = 3, .dims = {3, 0, 2}};
  cz.p[0] = param(ctx, 2, (int64_t[]){0, 6}, NULL);
  check_out(ctx, apply(ctx, &cz), 3, (int64_t[]){3, 0, 2}, want, 0, "rg_reshape [0,6] to [3,0,2]");
  rg_tensor ii = rg_reshape(ctx, input_i32(ctx, 1, (int64_t[]){4}, (int32_t[]){1, 2, 3, 4}), 2,
                            (int64_t[]){2, -1});
  int32_t got[4] = {0};
  CHECK(has_shape(ctx, ii, 2, (int64_t[]){2, 2}, "rg_reshape I32") &&
        rg_read(ctx, ii, got, sizeof got) == RG_OK && got[0] == 1 && got[3] == 4,
        "rg_reshape of I32 values: %d %d %d %d", got[0], got[1], got[2], got[3]);
  /* misuse: wrong count, two -1, -1 with a zero (ambiguous), negative size */
  expect_misuse(ctx, rg_reshape(ctx, c.p[0], 2, (int64_t[]){5, 5}), "rg_reshape", "24 to 25");
  expect_misuse(ctx, rg_reshape(ctx, c.p[0], 2, (int64_t[]){5, -1}), "rg_reshape", "24 to [5,-1]");
  expect_misuse(ctx, rg_reshape(ctx, c.p[0], 3, (int64_t[]){-1, -1, 4}), "rg_reshape", "two -1");
  expect_misuse(ctx, rg_reshape(ctx, c.p[0], 2, (int64_t[]){-2, -12}), "rg_reshape", "negative");
  expect_misuse(ctx, rg_reshape(ctx, cz.p[0], 2, (int64_t[]){0, -1}), "rg_reshape",
                "[0,6] to [0,-1] (ambiguous)");
  close_ctx(ctx);
  ctx = open_ctx();
  if (!ctx) return;
  c.p[0] = param(ctx, 3, (int64_t[]){2, 3, 4}, x);
  c.nd = 2;
  c.dims[0] = 6;
  c.dims[1] = -1;
  gradcheck(ctx, &c, 1e-2, 1e-3, "rg_reshape gradient"); /* a copy: noise only */
  close_ctx(ctx);
}

/* out axis i = in axis perm[i] */
static void ref_permute(const float *x, int nd, const int64_t *d, const int *perm, double *out,
                        int64_t *od) {
  int64_t st[RG_MAX_DIMS], n = prod(nd, d);
  for (int i = nd - 1, s = 1; i >= 0; i--) {
    st[i] = s;
    s *= (int)d[i];
  }
  for (int i = 0; i < nd; i++) od[i] = d[perm[i]];
  for (int64_t o = 0; o < n; o++) {
    int64_t rem = o, src = 0;
    for (int i = nd - 1; i >= 0; i--) {
      src += (rem % od[i]) * st[perm[i]];
      rem /= od[i];
    }
    out[o] = x[src];
  }
}

static void t_transpose(void) {
  static const int64_t d[4] = {2, 3, 4, 5};
  float x[120];
  double want[120];
  int64_t od[4];
  char what[96];
  fill(x, 120, -1, 1);
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = O_TRANSPOSE};
  c.p[0] = param(ctx, 4, d, x);
  for (int a = -4; a < 4; a++)
    for (int b = -4; b < 4; b++) {
      int perm[4] = {0, 1, 2, 3}, aa = a < 0 ? a + 4 : a, bb = b < 0 ? b + 4 : b;
      perm[aa] = bb;
      perm[bb] = aa;
      ref_permute(x, 4, d, perm, want, od);
      c.i[0] = a;
      c.i[1] = b;
      snprintf(what, sizeof what, "rg_transpose [2,3,4,5] axes %d,%d", a, b);
      check_out(ctx, apply(ctx, &c), 4, od, want, 0, what);
    }
  /* 2-D, and size-1 / zero-size axes */
  c.p[0] = param(ctx, 2, (int64_t[]){3, 5}, x);
  c.i[0] = 0;
  c.i[1] = 1;
  ref_permute(x, 2, (int64_t[]){3, 5}, (int[]){1, 0}, want, od);
  check_out(ctx, apply(ctx, &c), 2, od, want, 0, "rg_transpose [3,5]");
  c.p[0] = param(ctx, 3, (int64_t[]){1, 4, 1}, x);
  c.i[1] = 2;
  ref_permute(x, 3, (int64_t[]){1, 4, 1}, (int[]){2, 1, 0}, want, od);
  check_out(ctx, apply(ctx, &c), 3, od, want, 0, "rg_transpose [1,4,1] 0,2");
  c.p[0] = param(ctx, 2, (int64_t[]){0, 3}, NULL);
  c.i[1] = 1;
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){3, 0}, want, 0, "rg_transpose [0,3]");
  c.i[1] = 2;
  expect_misuse(ctx, apply(ctx, &c), "rg_transpose", "axis 2 of a 2-axis tensor");
  c.i[1] = -3;
  expect_misuse(ctx, apply(ctx, &c), "rg_transpose", "axis -3 of a 2-axis tensor");
  close_ctx(ctx);
  ctx = open_ctx();
  if (!ctx) return;
  c.p[0] = param(ctx, 3, (int64_t[]){2, 3, 4}, x);
  c.i[0] = 0;
  c.i[1] = 2;
  gradcheck(ctx, &c, 1e-2, 1e-3, "rg_transpose gradient"); /* a copy: noise only */
  close_ctx(ctx);
}

static void t_permute(void) {
  static const int64_t d[4] = {2, 3, 1, 4};
  float x[24];
  double want[24];
  int64_t od[4];
  char what[96];
  fill(x, 24, -1, 1);
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = O_PERMUTE};
  c.p[0] = param(ctx, 4, d, x);
  int count = 0;
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      for (int e = 0; e < 4; e++) {
        int f = 6 - a - b - e;
        if (a == b || a == e || b == e || f < 0 || f > 3 || f == a || f == b || f == e) continue;
        int perm[4] = {a, b, e, f};
        memcpy(c.i, perm, sizeof perm);
        ref_permute(x, 4, d, perm, want, od);
        snprintf(what, sizeof what, "rg_permute [2,3,1,4] by %d%d%d%d", a, b, e, f);
        check_out(ctx, apply(ctx, &c), 4, od, want, 0, what);
        count++;
      }
  CHECK(count == 24, "enumerated %d permutations of 4 axes, want 24", count);
  /* 3-D, 1-D, 0-axis */
  c.p[0] = param(ctx, 3, (int64_t[]){2, 3, 4}, x);
  int p3[3] = {2, 0, 1};
  memcpy(c.i, p3, sizeof p3);
  ref_permute(x, 3, (int64_t[]){2, 3, 4}, p3, want, od);
  check_out(ctx, apply(ctx, &c), 3, od, want, 0, "rg_permute [2,3,4] by 201");
  c.p[0] = param(ctx, 1, (int64_t[]){5}, x);
  c.i[0] = 0;
  ref_permute(x, 1, (int64_t[]){5}, (int[]){0}, want, od);
  check_out(ctx, apply(ctx, &c), 1, od, want, 0, "rg_permute [5]");
  c.p[0] = param(ctx, 0, NULL, x);
  check_out(ctx, apply(ctx, &c), 0, NULL, want, 0, "rg_permute []");
  /* misuse: a repeated axis, an axis out of range, NULL */
  c.p[0] = param(ctx, 3, (int64_t[]){2, 3, 4}, x);
  int rep[3] = {0, 0, 1}, big[3] = {0, 1, 3};
  memcpy(c.i, rep, sizeof rep);
  expect_misuse(ctx, apply(ctx, &c), "rg_permute", "perm 0,0,1");
  memcpy(c.i, big, sizeof big);
  expect_misuse(ctx, apply(ctx, &c), "rg_permute", "perm 0,1,3");
  expect_misuse(ctx, rg_permute(ctx, c.p[0], NULL), "rg_permute", "perm NULL");
  close_ctx(ctx);
  ctx = open_ctx();
  if (!ctx) return;
  c.p[0] = param(ctx, 3, (int64_t[]){2, 3, 4}, x);
  memcpy(c.i, p3, sizeof p3);
  gradcheck(ctx, &c, 1e-2, 1e-3, "rg_permute gradient"); /* a copy: noise only */
  close_ctx(ctx);
}

static void ref_slice(const float *x, int nd, const int64_t *d, int ax, int64_t start,
                      int64_t len, double *out) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < ax; i++) outer *= d[i];
  for (int i = ax + 1; i < nd; i++) inner *= d[i];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t l = 0; l < len; l++)
      for (int64_t i = 0; i < inner; i++)
        out[(o * len + l) * inner + i] = x[(o * d[ax] + start + l) * inner + i];
}

static void t_slice(void) {
  static const int64_t d[3] = {3, 4, 5};
  float x[60];
  double want[60];
  char what[96];
  fill(x, 60, -1, 1);
  struct { int ax; int64_t start, len; } cs[] = {{0, 1, 2}, {1, 0, 4}, {1, 3, 1}, {2, 2, 3},
                                                 {-1, 4, 1}, {0, 0, 3}, {1, 2, 0}, {2, 5, 0}};
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  opcall c = {.op = O_SLICE};
  c.p[0] = param(ctx, 3, d, x);
  for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
    int ax = cs[k].ax < 0 ? cs[k].ax + 3 : cs[k].ax;
    int64_t od[3] = {d[0], d[1], d[2]};
    od[ax] = cs[k].len;
    ref_slice(x, 3, d, ax, cs[k].start, cs[k].len, want);
    c.i[0] = cs[k].ax;
    c.i[1] = (int)cs[k].start;
    c.i[2] = (int)cs[k].len;
    snprintf(what, sizeof what, "rg_slice [3,4,5] axis %d [%lld,+%lld)", cs[k].ax,
             (long long)cs[k].start, (long long)cs[k].len);
    check_out(ctx, apply(ctx, &c), 3, od, want, 0, what);
  }
  /* out of range */
  c.i[0] = 1;
  c.i[1] = 3;
  c.i[2] = 2;
  expect_misuse(ctx, apply(ctx, &c), "rg_slice", "[3,5) of 4");
  c.i[1] = -1;
  c.i[2] = 1;
  expect_misuse(ctx, apply(ctx, &c), "rg_slice", "start -1");
  c.i[1] = 0;
  c.i[2] = -1;
  expect_misuse(ctx, apply(ctx, &c), "rg_slice", "len -1");
  c.i[0] = 3;
  c.i[2] = 1;
  expect_misuse(ctx, apply(ctx, &c), "rg_slice", "axis 3");
  close_ctx(ctx);
  /* gradient: zero outside the slice */
  for (int k = 0; k < 3; k++) {
    ctx = open_ctx();
    if (!ctx) return;
    c.p[0] = param(ctx, 3, d, x);
    c.i[0] = (int)cs[k * 3 % 8].ax;
    c.i[1] = (int)cs[k * 3 % 8].start;
    c.i[2] = (int)cs[k * 3 % 8].len;
    gradcheck(ctx, &c, 1e-2, 1e-3, "rg_slice gradient"); /* a copy: noise only */
    close_ctx(ctx);
  }
}

static void t_concat(void) {
  float a[60], b[60];
  double want[120];
  char what[96];
  fill(a, 60, -1, 1);
  fill(b, 60, -1, 1);
  for (int ax = -3; ax < 3; ax++) {
    int axn = ax < 0 ? ax + 3 : ax;
    int64_t da[3] = {2, 3, 4}, db[3] = {2, 3, 4}, od[3] = {2, 3, 4};
    db[axn] = axn == 0 ? 1 : axn == 1 ? 2 : 5; /* a different size on the joining axis */
    od[axn] = da[axn] + db[axn];
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axn; i++) outer *= da[i];
    for (int i = axn + 1; i < 3; i++) inner *= da[i];
    int64_t n = 0;
    for (int64_t o = 0; o < outer; o++) {
      for (int64_t l = 0; l < da[axn] * inner; l++) want[n++] = a[o * da[axn] * inner + l];
      for (int64_t l = 0; l < db[axn] * inner; l++) want[n++] = b[o * db[axn] * inner + l];
    }
    rg_ctx *ctx = open_ctx();
    if (!ctx) return;
    opcall c = {.op = O_CONCAT, .i = {ax}};
    c.p[0] = param(ctx, 3, da, a);
    c.p[1] = param(ctx, 3, db, b);
    snprintf(what, sizeof what, "rg_concat axis %d", ax);
    check_out(ctx, apply(ctx, &c), 3, od, want, 0, what);
    if (ax >= 0) gradcheck(ctx, &c, 1e-2, 1e-3, what); /* a copy: noise only */
    close_ctx(ctx);
  }
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  /* edges: a zero-size operand, 1-D */
  opcall c = {.op = O_CONCAT, .i = {0}};
  c.p[0] = param(ctx, 2, (int64_t[]){0, 3}, NULL);
  c.p[1] = param(ctx, 2, (int64_t[]){2, 3}, a);
  for (int i = 0; i < 6; i++) want[i] = a[i];
  check_out(ctx, apply(ctx, &c), 2, (int64_t[]){2, 3}, want, 0, "rg_concat [0,3] with [2,3]");
  c.p[0] = param(ctx, 1, (int64_t[]){2}, a);
  c.p[1] = param(ctx, 1, (int64_t[]){1}, b);
  want[0] = a[0];
  want[1] = a[1];
  want[2] = b[0];
  check_out(ctx, apply(ctx, &c), 1, (int64_t[]){3}, want, 0, "rg_concat [2] with [1]");
  /* I32 operands join too */
  rg_tensor ic = rg_concat(ctx, input_i32(ctx, 1, (int64_t[]){2}, (int32_t[]){1, 2}),
                           input_i32(ctx, 1, (int64_t[]){1}, (int32_t[]){3}), 0);
  int32_t got[3] = {0};
  CHECK(has_shape(ctx, ic, 1, (int64_t[]){3}, "rg_concat I32") &&
            rg_read(ctx, ic, got, sizeof got) == RG_OK && got[0] == 1 && got[1] == 2 && got[2] == 3,
        "rg_concat of I32: %d %d %d", got[0], got[1], got[2]);
  /* misuse */
  rg_tensor x = param(ctx, 2, (int64_t[]){2, 3}, NULL);
  expect_misuse(ctx, rg_concat(ctx, x, param(ctx, 2, (int64_t[]){2, 4}, NULL), 0), "rg_concat",
                "[2,3] with [2,4] on axis 0");
  expect_misuse(ctx, rg_concat(ctx, x, param(ctx, 1, (int64_t[]){3}, NULL), 0), "rg_concat",
                "[2,3] with [3]");
  expect_misuse(ctx, rg_concat(ctx, x, x, 2), "rg_concat", "axis 2 of 2-D");
  expect_misuse(ctx, rg_concat(ctx, x, rg_cast(ctx, x, RG_BF16), 0), "rg_concat",
                "F32 with BF16");
  close_ctx(ctx);
}

/* ======================================================================================
   dropout
   ====================================================================================== */

/* y = dropout(x, p) on a fresh context after `steps` rg_step_begin calls; returns the
   values read (malloc'd). */
static float *dropout_run(uint64_t seed, int steps, const float *x, int64_t n, float p, int calls) {
  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1, .seed = seed};
  rg_ctx *ctx = open_cpu_opts(o);
  if (!ctx) return NULL;
  for (int s = 0; s < steps; s++) rg_step_begin(ctx);
  rg_tensor xi = input(ctx, 1, (int64_t[]){n}, x), y = RG_NONE;
  for (int k = 0; k < calls; k++) y = rg_dropout(ctx, xi, p);
  float *out = malloc(sizeof(float) * (size_t)n);
  if (!has_shape(ctx, y, 1, (int64_t[]){n}, "rg_dropout") || !readf(ctx, y, out, n, "rg_dropout")) {
    free(out);
    out = NULL;
  }
  close_ctx(ctx);
  return out;
}

static int64_t count_diff(const float *a, const float *b, int64_t n) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++) k += (a[i] == 0) != (b[i] == 0);
  return k;
}

static void t_dropout(void) {
  const int64_t n = 1 << 16;
  const float p = 0.25f;
  float *x = malloc(sizeof(float) * (size_t)n);
  fill_away(x, n, 0.5, 2);
  float *y = dropout_run(1, 1, x, n, p, 1);
  if (y) {
    /* kept values are x/(1-p) (one rounding: 2e-7), dropped ones 0 */
    int64_t kept = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
      if (y[i] == 0) continue;
      kept++;
      worst = fmax(worst, fabs(y[i] - x[i] / (1.0 - p)) / fmax(1, fabs(x[i] / (1.0 - p))));
    }
    note_fwd(worst);
    CHECK(worst <= 2e-7, "rg_dropout: kept values differ from x/(1-p) by %.3g", worst);
    double frac = (double)kept / (double)n;
    /* binomial: sd = sqrt(p(1-p)/n) = 0.0017; 0.01 is ~6 sd */
    CHECK(fabs(frac - (1 - p)) < 0.01, "rg_dropout: kept fraction %.4f, want %.2f +- 0.01",
          frac, 1 - p);
    /* the same seed and step give the same mask; another step, seed or call another */
    float *y2 = dropout_run(1, 1, x, n, p, 1), *y3 = dropout_run(1, 2, x, n, p, 1),
          *y4 = dropout_run(2, 1, x, n, p, 1), *y5 = dropout_run(1, 1, x, n, p, 2);
    if (y2) CHECK(count_diff(y, y2, n) == 0, "rg_dropout: same seed and step, %lld mask "
                  "elements differ", (long long)count_diff(y, y2, n));
    /* two independent masks differ in 2p(1-p) = 37.5% of the elements */
    if (y3) CHECK(count_diff(y, y3, n) > n / 4, "rg_dropout: the next step gives nearly the "
                  "same mask (%lld of %lld differ)", (long long)count_diff(y, y3, n), (long long)n);
    if (y4) CHECK(count_diff(y, y4, n) > n / 4, "rg_dropout: another seed gives nearly the "
                  "same mask (%lld differ)", (long long)count_diff(y, y4, n));
    if (y5) CHECK(count_diff(y, y5, n) > n / 4, "rg_dropout: a second call in one step "
                  "repeats the first mask (%lld differ)", (long long)count_diff(y, y5, n));
    free(y2);
    free(y3);
    free(y4);
    free(y5);
  }
  free(y);
  /* identity in evaluation, and with p == 0 */
  rg_ctx *ctx = open_ctx();
  if (ctx) {
    double want[64];
    for (int i = 0; i < 64; i++) want[i] = x[i];
    rg_tensor xi = input(ctx, 2, (int64_t[]){8, 8}, x);
    check_out(ctx, rg_dropout(ctx, xi, 0.0f), 2, (int64_t[]){8, 8}, want, 0, "rg_dropout p = 0");
    rg_set_training(ctx, 0);
    check_out(ctx, rg_dropout(ctx, xi, 0.5f), 2, (int64_t[]){8, 8}, want, 0,
              "rg_dropout not training");
    rg_set_training(ctx, 1);
    expect_misuse(ctx, rg_dropout(ctx, xi, 1.0f), "rg_dropout", "p = 1");
    expect_misuse(ctx, rg_dropout(ctx, xi, -0.1f), "rg_dropout", "p = -0.1");
    expect_misuse(ctx, rg_dropout(ctx, xi, NAN), "rg_dropout", "p = NaN");
    /* zero-size */
    check_out(ctx, rg_dropout(ctx, input(ctx, 1, (int64_t[]){0}, NULL), 0.5f), 1,
              (int64_t[]){0}, want, 0, "rg_dropout [0]");
    close_ctx(ctx);
  }
  /* the gradient is mask/(1-p), the same mask as the forward */
  ctx = open_ctx();
  if (ctx) {
    const int64_t m = 1000;
    const float q = 0.4f;
    rg_tensor xp = param(ctx, 1, (int64_t[]){m}, x);
    rg_step_begin(ctx);
    rg_tensor yy = rg_dropout(ctx, xp, q);
    rg_status st = rg_backward(ctx, rg_sum(ctx, yy, RG_ALL_AXES, 0));
    CHECK(st == RG_OK, "rg_dropout backward -> %s: %s", rg_status_str(st), rg_errmsg(ctx));
    float *yv = malloc(sizeof(float) * (size_t)m), *g = malloc(sizeof(float) * (size_t)m);
    if (st == RG_OK && readf(ctx, yy, yv, m, "rg_dropout y") &&
        readf(ctx, rg_grad(ctx, xp), g, m, "rg_dropout gradient")) {
      double want_scale = 1.0 / (1.0 - q), worst = 0;
      for (int64_t i = 0; i < m; i++) {
        double wv = yv[i] != 0 ? want_scale : 0;
        worst = fmax(worst, fabs(g[i] - wv));
      }
      note_grad(worst);
      CHECK(worst <= 2e-7 * want_scale, "rg_dropout: gradient differs from mask/(1-p) by %.3g",
            worst);
    }
    free(yv);
    free(g);
    close_ctx(ctx);
  }
  /* and rg_gradcheck agrees (it pins the step, so every evaluation sees one mask) */
  ctx = open_ctx();
  if (ctx) {
    opcall c = {.op = O_DROPOUT, .f = {0.3f}};
    c.p[0] = param(ctx, 2, (int64_t[]){4, 6}, x);
    gradcheck(ctx, &c, 1e-2, 1e-3, "rg_dropout gradcheck"); /* linear: noise only */
    close_ctx(ctx);
  }
  free(x);
}

/* ======================================================================================
   cast, detach
   ====================================================================================== */

static float f_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t u_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Round-to-nearest-even to BF16 of a finite float, by the bits. */
static float bf16_round(float f) {
  uint32_t u = u_of(f), lo = u & 0xFFFFu, hi = u >> 16;
  if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u))) hi++;
  return f_of(hi << 16);
}

static void t_cast(void) {
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  /* F32 -> BF16, round to nearest even, expected bits worked out by hand */
  const struct { uint32_t f; uint16_t bf; const char *what; } v[] = {
      {0x3F800000u, 0x3F80, "1"},
      {0x3F808000u, 0x3F80, "1+2^-8 (tie, even is down)"},
      {0x3F818000u, 0x3F82, "1+3*2^-8 (tie, even is up)"},
      {0x3F808008u, 0x3F81, "1+2^-8+2^-20 (above the tie)"},
      {0x3F807FFFu, 0x3F80, "just below the tie"},
      {0xBF818000u, 0xBF82, "-(1+3*2^-8)"},
      {0x40400000u, 0x4040, "3"},
      {0x00000000u, 0x0000, "+0"},
      {0x80000000u, 0x8000, "-0"},
      {0x7F800000u, 0x7F80, "+inf"},
      {0xFF800000u, 0xFF80, "-inf"},
      {0x7F7FFFFFu, 0x7F80, "FLT_MAX rounds to inf"},
      {0x00800000u, 0x0080, "smallest normal"},
      {0x00018000u, 0x0002, "denormal tie, odd -> up"},
      {0x00008000u, 0x0000, "denormal tie, even -> down"},
      {0x7FC00000u, 0x7FC0, "NaN (any NaN accepted)"},
  };
  enum { NV = sizeof v / sizeof v[0] };
  float xf[NV];
  for (int i = 0; i < NV; i++) xf[i] = f_of(v[i].f);
  rg_tensor bf = rg_cast(ctx, input(ctx, 1, (int64_t[]){NV}, xf), RG_BF16);
  uint16_t got[NV];
  if (has_shape(ctx, bf, 1, (int64_t[]){NV}, "rg_cast F32->BF16")) {
    CHECK(rg_dtype_of(ctx, bf) == RG_BF16, "rg_cast F32->BF16: dtype %d",
          (int)rg_dtype_of(ctx, bf));
    rg_status st = rg_read(ctx, bf, got, sizeof got);
    CHECK(st == RG_OK, "rg_cast F32->BF16 read -> %s: %s", rg_status_str(st), rg_errmsg(ctx));
    for (int i = 0; st == RG_OK && i < NV; i++) {
      int nan = (v[i].bf & 0x7F80) == 0x7F80 && (v[i].bf & 0x7F);
      int ok = nan ? ((got[i] & 0x7F80) == 0x7F80 && (got[i] & 0x7F)) : got[i] == v[i].bf;
      if (!ok) note_fwd(INFINITY);
      CHECK(ok, "rg_cast F32->BF16 of %s (0x%08X): got 0x%04X, want 0x%04X", v[i].what,
            (unsigned)v[i].f, got[i], v[i].bf);
    }
  }
  /* BF16 -> F32 is exact: bits << 16 */
  static const uint16_t bsrc[7] = {0x3F80, 0x3F82, 0xBF82, 0x7F80, 0x0001, 0x8000, 0x4049};
  rg_tensor bin = rg_input(ctx, RG_BF16, 1, (int64_t[]){7}, bsrc);
  rg_tensor back = rg_cast(ctx, bin, RG_F32);
  float bf32[7];
  if (has_shape(ctx, back, 1, (int64_t[]){7}, "rg_cast BF16->F32") &&
      readf(ctx, back, bf32, 7, "rg_cast BF16->F32"))
    for (int i = 0; i < 7; i++) {
      CHECK(u_of(bf32[i]) == (uint32_t)bsrc[i] << 16, "rg_cast BF16->F32 of 0x%04X: got 0x%08X",
            bsrc[i], (unsigned)u_of(bf32[i]));
    }
  /* F32 -> I32 truncates toward zero */
  const float fi[] = {2.7f, -2.7f, -0.5f, 0.0f, 0.999f, 1e9f, -1e9f, 2147483520.0f, 7, -7};
  const int32_t wi[] = {2, -2, 0, 0, 0, 1000000000, -1000000000, 2147483520, 7, -7};
  rg_tensor ti = rg_cast(ctx, input(ctx, 1, (int64_t[]){10}, fi), RG_I32);
  int32_t gi[10];
  if (has_shape(ctx, ti, 1, (int64_t[]){10}, "rg_cast F32->I32")) {
    CHECK(rg_dtype_of(ctx, ti) == RG_I32, "rg_cast F32->I32: dtype %d", (int)rg_dtype_of(ctx, ti));
    rg_status st = rg_read(ctx, ti, gi, sizeof gi);
    CHECK(st == RG_OK, "rg_cast F32->I32 read -> %s", rg_status_str(st));
    for (int i = 0; st == RG_OK && i < 10; i++)
      CHECK(gi[i] == wi[i], "rg_cast F32->I32 of %.9g: got %d, want %d", fi[i], gi[i], wi[i]);
  }
  /* I32 -> F32 rounds to nearest even */
  static const int32_t is[5] = {16777217, -5, 0, 2147483647, -16777219};
  const float wf[5] = {16777216.0f, -5.0f, 0.0f, 2147483648.0f, -16777220.0f};
  rg_tensor tf = rg_cast(ctx, input_i32(ctx, 1, (int64_t[]){5}, is), RG_F32);
  float gf[5];
  if (has_shape(ctx, tf, 1, (int64_t[]){5}, "rg_cast I32->F32") &&
      readf(ctx, tf, gf, 5, "rg_cast I32->F32"))
    for (int i = 0; i < 5; i++)
      CHECK(gf[i] == wf[i], "rg_cast I32->F32 of %d: got %.9g, want %.9g", is[i], gf[i], wf[i]);
  /* F32 -> F32 and edges: a 0-axis value, zero-size */
  double w1[1] = {1.5};
  check_out(ctx, rg_cast(ctx, input(ctx, 0, NULL, (float[]){1.5f}), RG_F32), 0, NULL, w1, 0,
            "rg_cast F32->F32 []");
  rg_tensor z = rg_cast(ctx, input(ctx, 2, (int64_t[]){0, 3}, NULL), RG_BF16);
  CHECK(
      has_shape(ctx, z, 2, (int64_t[]){0, 3}, "rg_cast [0,3]") && rg_read(ctx, z, got, 0) == RG_OK,
      "rg_cast of a zero-size tensor: %s", rg_errmsg(ctx));
  /* misuse: an unknown dtype */
  expect_misuse(ctx, rg_cast(ctx, bf, (rg_dtype)7), "rg_cast", "dtype 7");
  /* the gradient flows through float casts: d/dx sum(cast(cast(x,BF16),F32) * W) is W
     cast to BF16 and back; W here is exact in BF16, so the gradient is exactly W */
  float x[6], g[6], w[6];
  fill(x, 6, -1, 1);
  for (int i = 0; i < 6; i++) w[i] = (float)(((i * 5) % 7) - 3) * 0.125f;
  rg_tensor xp = param(ctx, 2, (int64_t[]){2, 3}, x);
  rg_step_begin(ctx);
  rg_tensor y = rg_cast(ctx, rg_cast(ctx, xp, RG_BF16), RG_F32);
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, y, input(ctx, 2, (int64_t[]){2, 3}, w)), RG_ALL_AXES, 0);
  rg_status st = rg_backward(ctx, loss);
  CHECK(st == RG_OK, "rg_cast backward -> %s: %s", rg_status_str(st), rg_errmsg(ctx));
  if (st == RG_OK && readf(ctx, rg_grad(ctx, xp), g, 6, "rg_cast gradient")) {
    check_exact("rg_cast: the gradient flows through F32->BF16->F32", g, w, 6);
    double yw[6];
    for (int i = 0; i < 6; i++) yw[i] = bf16_round(x[i]);
    check_out(ctx, y, 2, (int64_t[]){2, 3}, yw, 0, "rg_cast F32->BF16->F32 values");
  }
  close_ctx(ctx);
  /* and by finite differences, with steps of 1/8 from multiples of 1/8 below 2: every
     value the check casts is exact in BF16, so only the rounding of the two losses' float
     sums (~1e-7 each) is left, over a step of 1/4 */
  ctx = open_ctx();
  if (!ctx) return;
  float xe[12];
  for (int i = 0; i < 12; i++) xe[i] = (float)((i * 7) % 25 - 12) * 0.125f;
  opcall c = {.op = O_CAST, .i = {RG_BF16}};
  c.p[0] = param(ctx, 2, (int64_t[]){3, 4}, xe);
  gradcheck(ctx, &c, 0.125, 1e-5, "rg_cast F32->BF16->F32 gradient");
  close_ctx(ctx);
}

static void t_detach(void) {
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  float x[6], g[6], w[6];
  double want[6];
  fill(x, 6, -1, 1);
  rg_tensor p = param(ctx, 2, (int64_t[]){2, 3}, x);
  for (int i = 0; i < 6; i++) want[i] = x[i];
  check_out(ctx, rg_detach(ctx, p), 2, (int64_t[]){2, 3}, want, 0, "rg_detach value");
  /* d/dx sum(x * detach(x)) = detach(x) = x, not 2x */
  rg_step_begin(ctx);
  rg_tensor loss = rg_sum(ctx, rg_mul(ctx, p, rg_detach(ctx, p)), RG_ALL_AXES, 0);
  rg_status st = rg_backward(ctx, loss);
  CHECK(st == RG_OK, "rg_detach backward -> %s: %s", rg_status_str(st), rg_errmsg(ctx));
  for (int i = 0; i < 6; i++) w[i] = x[i];
  if (st == RG_OK && readf(ctx, rg_grad(ctx, p), g, 6, "rg_detach gradient"))
    check_exact("rg_detach: no gradient flows through the detached operand", g, w, 6);
  /* a loss built only from detached values has nothing to differentiate */
  rg_step_begin(ctx);
  loss = rg_sum(ctx, rg_detach(ctx, rg_mul(ctx, p, p)), RG_ALL_AXES, 0);
  st = rg_backward(ctx, loss);
  CHECK(st == RG_ERR_MISUSE, "rg_backward of a detached loss -> %s, want RG_ERR_MISUSE",
        rg_status_str(st));
  rg_clear_error(ctx);
  /* I32 and zero-size operands copy too */
  rg_step_begin(ctx);
  rg_tensor di = rg_detach(ctx, input_i32(ctx, 1, (int64_t[]){2}, (int32_t[]){5, -6}));
  int32_t gi[2] = {0};
  CHECK(di.id && rg_read(ctx, di, gi, sizeof gi) == RG_OK && gi[0] == 5 && gi[1] == -6,
        "rg_detach of I32: %d %d", gi[0], gi[1]);
  check_out(ctx, rg_detach(ctx, input(ctx, 2, (int64_t[]){3, 0}, NULL)), 2, (int64_t[]){3, 0},
            want, 0, "rg_detach [3,0]");
  close_ctx(ctx);
  g_grad = -1;
}

/* ======================================================================================
   Large shapes: the kernels' parallel paths (> 32768 elements), against the reference,
   and bit-identical for 1 and 2 threads (cpu.h: results do not depend on the thread
   count), forward and gradients.
   ====================================================================================== */

typedef struct big_in { int nd; int64_t d[RG_MAX_DIMS]; const float *x; } big_in;

/* 0 while a case's products go to a CBLAS, whose results may round differently for
   another thread count (OpenBLAS's Haswell kernels do): then 1 and 2 threads are only
   compared within the case's tolerance. */
static int g_same_bits = 1;

static int close_enough(const float *a, const float *b, int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs((double)a[i] - b[i]) <= tol * (1 + fabs((double)b[i])))) return 0;
  return 1;
}

/* Output and parameter gradients of c on a fresh context with the given thread count. */
static int big_run(opcall c, const big_in *in, int np, int threads, float **y, int64_t *ny,
                   float **g, const char *what) {
  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1, .seed = 1, .threads = threads};
  rg_ctx *ctx = open_cpu_opts(o);
  if (!ctx) return 0;
  for (int p = 0; p < np; p++) c.p[p] = param(ctx, in[p].nd, in[p].d, in[p].x);
  rg_tensor t = apply(ctx, &c);
  *ny = t.id ? rg_numel(ctx, t) : 0;
  *y = malloc(sizeof(float) * (size_t)(*ny + 1));
  int ok = t.id && readf(ctx, t, *y, *ny, what);
  for (int p = 0; p < np; p++) {
    int64_t n = prod(in[p].nd, in[p].d);
    g[p] = calloc((size_t)n + 1, sizeof(float));
    if (ok && !grad_of(ctx, &c, c.p[p], g[p], n, what)) ok = 0;
  }
  close_ctx(ctx);
  return ok;
}

static void big_case(const char *what, opcall c, const big_in *in, int np, const double *want,
                     int64_t nwant, double tol) {
  float *y[2] = {0}, *g[2][3] = {{0}};
  int64_t ny[2] = {0};
  int ok = big_run(c, in, np, 1, &y[0], &ny[0], g[0], what) &&
           big_run(c, in, np, 2, &y[1], &ny[1], g[1], what);
  if (ok) {
    CHECK(ny[1] == nwant, "%s: %lld elements, want %lld", what, (long long)ny[1], (long long)nwant);
    if (ny[1] == nwant) cmp(what, y[1], want, nwant, tol);
    CHECK(ny[0] == ny[1] && (g_same_bits ? !memcmp(y[0], y[1], sizeof(float) * (size_t)ny[0])
                                         : close_enough(y[0], y[1], ny[0], tol)),
          "%s: the forward result differs between 1 and 2 threads", what);
    for (int p = 0; p < np; p++) {
      int64_t n = prod(in[p].nd, in[p].d);
      CHECK(g_same_bits ? !memcmp(g[0][p], g[1][p], sizeof(float) * (size_t)n)
                        : close_enough(g[0][p], g[1][p], n, tol),
            "%s: the gradient of operand %d differs between 1 and 2 threads", what, p);
    }
  }
  for (int t = 0; t < 2; t++) {
    free(y[t]);
    for (int p = 0; p < np; p++) free(g[t][p]);
  }
}

/* The gradients of a norm of [R,C] under loss_of (dy = weight(i)) by the double formulas:
   dx (x's shape), dgamma and dbeta ([C]); rms: rmsnorm (no centring, no dbeta). */
static void ref_norm_grads(int ln, const float *x, int64_t R, int64_t C, const float *gam,
                           double eps, double *dx, double *dg, double *db) {
  for (int64_t c = 0; c < C; c++) dg[c] = db[c] = 0;
  for (int64_t r = 0; r < R; r++) {
    const float *row = x + r * C;
    double m = 0, v = 0, s1 = 0, s2 = 0;
    for (int64_t j = 0; ln && j < C; j++) m += row[j] / (double)C;
    for (int64_t j = 0; j < C; j++) v += (row[j] - m) * (row[j] - m) / (double)C;
    double rs = 1 / sqrt(v + eps);
    for (int64_t j = 0; j < C; j++) {
      double dy = weight((uint64_t)(r * C + j)), xh = (row[j] - m) * rs, dxh = dy * gam[j];
      s1 += dxh / (double)C, s2 += dxh * xh / (double)C;
      dg[j] += dy * xh, db[j] += dy;
    }
    for (int64_t j = 0; j < C; j++) {
      double xh = (row[j] - m) * rs, dxh = weight((uint64_t)(r * C + j)) * gam[j];
      dx[r * C + j] = rs * (dxh - (ln ? s1 : 0) - xh * s2);
    }
  }
}

/* Largest |got - want| over n, relative to the largest |want| (at least 1). */
static double worst_rel(const float *got, const double *want, int64_t n) {
  double w = 0, m = 1;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(want[i]));
  for (int64_t i = 0; i < n; i++) w = fmax(w, fabs(got[i] - want[i]));
  return w / m;
}

/* Layernorm, rmsnorm and the fused add+layernorm of [R,C] (C not a multiple of any vector
   width; R many backward row chunks, run in parallel): the gradients of x, gamma and beta
   against the double formulas on 1 and 2 threads (bit-identical between them), and the
   fused node's sum and norm against a + b normalised. dgamma sums R terms: 1e-5 of the
   largest; dx a few float roundings of O(1) terms: 1e-5. */
static void big_norm_grads(const float *x, const float *x2, const float *gam, const float *bet,
                           int64_t R, int64_t C) {
  int64_t N = R * C;
  double *dx = malloc(sizeof(double) * (size_t)N), *dg = malloc(sizeof(double) * (size_t)C),
         *db = malloc(sizeof(double) * (size_t)C), *want = malloc(sizeof(double) * (size_t)N);
  float *sum = malloc(sizeof(float) * (size_t)N);
  big_in X = {2, {R, C}, x}, X2 = {2, {R, C}, x2}, G = {1, {C}, gam}, B = {1, {C}, bet};
  for (int ln = 0; ln <= 1; ln++) {
    const char *what = ln ? "rg_layernorm [300,150] gradients" : "rg_rmsnorm [300,150] gradients";
    opcall c = {.op = ln ? O_LAYERNORM : O_RMSNORM, .f = {1e-5f}};
    float *y[2] = {0}, *g[2][3] = {{0}};
    int64_t ny[2];
    int np = ln ? 3 : 2;
    int ok = big_run(c, (big_in[]){X, G, B}, np, 1, &y[0], &ny[0], g[0], what) &&
             big_run(c, (big_in[]){X, G, B}, np, 2, &y[1], &ny[1], g[1], what);
    if (ok) {
      ref_norm_grads(ln, x, R, C, gam, 1e-5, dx, dg, db);
      for (int t = 0; t < 2; t++) {
        double e0 = worst_rel(g[t][0], dx, N), e1 = worst_rel(g[t][1], dg, C);
        double e2 = ln ? worst_rel(g[t][2], db, C) : 0;
        CHECK(e0 <= 1e-5 && e1 <= 1e-5 && e2 <= 1e-5,
              "%s on %d thread(s): dx, dgamma, dbeta off by %g %g %g", what, t + 1, e0, e1, e2);
      }
      for (int p = 0; p < np; p++)
        CHECK(!memcmp(g[0][p], g[1][p], sizeof(float) * (size_t)(p ? C : N)),
              "%s: operand %d's gradient differs between 1 and 2 threads", what, p);
    }
    for (int t = 0; t < 2; t++) {
      free(y[t]);
      for (int p = 0; p < np; p++) free(g[t][p]);
    }
  }
  /* add+layernorm of x and x2 with gamma (big_case takes three operands) */
  for (int64_t i = 0; i < N; i++) sum[i] = x[i] + x2[i];
  ref_norm(1, sum, R, C, gam, NULL, 1e-5, want);
  big_case("rg_layernorm of an rg_add [300,150]", (opcall){.op = O_ADD_LAYERNORM, .f = {1e-5f}},
           (big_in[]){X, X2, G}, 3, want, N, 1e-5);
  free(dx), free(dg), free(db), free(want), free(sum);
}

static void t_large(void) {
  enum { R = 300, C = 150, N = R * C };
  float *x = malloc(sizeof(float) * N), *x2 = malloc(sizeof(float) * N);
  double *want = malloc(sizeof(double) * N * 2);
  float v[C], col[R], gam[C], bet[C];
  int64_t no;
  fill(x, N, -2, 2);
  fill(x2, N, -2, 2);
  fill(v, C, -2, 2);
  fill(col, R, 0.8, 2);
  fill_away(gam, C, 0.5, 1.5);
  fill(bet, C, -1, 1);
  big_in X = {2, {R, C}, x}, X2 = {2, {R, C}, x2}, Vr = {1, {C}, v}, Cl = {2, {R, 1}, col},
         G = {1, {C}, gam}, B = {1, {C}, bet};
  /* elementwise: a row vector (add), a column (div), unary */
  for (int64_t i = 0; i < N; i++) want[i] = (double)x[i] + v[i % C];
  big_case("rg_add [300,150] + [150]", (opcall){.op = O_ADD}, (big_in[]){X, Vr}, 2, want, N, 2e-7);
  for (int64_t i = 0; i < N; i++) want[i] = (double)x[i] / col[i / C];
  big_case("rg_div [300,150] / [300,1]", (opcall){.op = O_DIV}, (big_in[]){X, Cl}, 2, want, N,
           2e-7);
  for (int64_t i = 0; i < N; i++) want[i] = (double)x[i] * x2[i];
  big_case("rg_mul [300,150] * [300,150]", (opcall){.op = O_MUL}, (big_in[]){X, X2}, 2, want, N,
           2e-7);
  for (int64_t i = 0; i < N; i++) want[i] = ref_un(O_GELU, x[i], 0, 0);
  big_case("rg_gelu [300,150]", (opcall){.op = O_GELU}, &X, 1, want, N, 2e-6);
  for (int64_t i = 0; i < N; i++) want[i] = ref_un(O_EXP, x[i], 0, 0);
  big_case("rg_exp [300,150]", (opcall){.op = O_EXP}, &X, 1, want, N, 2e-6);
  /* reductions: 300 or 150 terms (or all 45000) of O(1): float rounding of an exact sum
     is 6e-8; a float accumulation could be 1e-5 off: 1e-5 */
  int64_t *argbuf = malloc(sizeof(int64_t) * N);
  ref_reduce(R_SUM, x, 2, X.d, 0, want, argbuf, &no);
  big_case("rg_sum [300,150] axis 0", (opcall){.op = O_SUM, .i = {0, 0}}, &X, 1, want, no, 1e-5);
  ref_reduce(R_SUM, x, 2, X.d, 1, want, argbuf, &no);
  big_case("rg_sum [300,150] axis 1", (opcall){.op = O_SUM, .i = {1, 1}}, &X, 1, want, no, 1e-5);
  ref_reduce(R_SUM, x, 2, X.d, -1, want, argbuf, &no);
  big_case("rg_sum [300,150] all axes", (opcall){.op = O_SUM, .i = {RG_ALL_AXES, 0}}, &X, 1,
           want, no, 1e-5);
  ref_reduce(R_MEAN, x, 2, X.d, 1, want, argbuf, &no);
  big_case("rg_mean [300,150] axis 1", (opcall){.op = O_MEAN, .i = {1, 0}}, &X, 1, want, no, 1e-5);
  ref_reduce(R_MAX, x, 2, X.d, 0, want, argbuf, &no);
  big_case("rg_max [300,150] axis 0", (opcall){.op = O_MAX, .i = {0, 0}}, &X, 1, want, no, 0);
  /* rows */
  ref_softmax(x, R, C, 0, want);
  big_case("rg_softmax [300,150]", (opcall){.op = O_SOFTMAX}, &X, 1, want, N, 2e-6);
  ref_softmax(x, R, C, 1, want);
  big_case("rg_log_softmax [300,150]", (opcall){.op = O_LOG_SOFTMAX}, &X, 1, want, N, 2e-6);
  /* 150 terms per row in float: a few ulps of O(1) after normalising: 1e-5 */
  ref_norm(1, x, R, C, gam, bet, 1e-5, want);
  big_case("rg_layernorm [300,150]", (opcall){.op = O_LAYERNORM, .f = {1e-5f}},
           (big_in[]){X, G, B}, 3, want, N, 1e-5);
  ref_norm(0, x, R, C, gam, NULL, 1e-5, want);
  big_case("rg_rmsnorm [300,150]", (opcall){.op = O_RMSNORM, .f = {1e-5f}},
           (big_in[]){X, G}, 2, want, N, 1e-5);
  big_norm_grads(x, x2, gam, bet, R, C);
  /* shape */
  int64_t od[2];
  ref_permute(x, 2, X.d, (int[]){1, 0}, want, od);
  big_case("rg_transpose [300,150]", (opcall){.op = O_TRANSPOSE, .i = {0, 1}}, &X, 1, want, N, 0);
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < 2 * C; j++)
      want[r * 2 * C + j] = j < C ? x[r * C + j] : x2[r * C + j - C];
  big_case("rg_concat [300,150] [300,150] axis 1", (opcall){.op = O_CONCAT, .i = {1}},
           (big_in[]){X, X2}, 2, want, 2 * N, 0);
  /* cross entropy over 300 rows of 150 classes */
  int32_t *tg = malloc(sizeof(int32_t) * R);
  for (int r = 0; r < R; r++) tg[r] = (r * 37) % C;
  want[0] = ref_ce(x, tg, R, C, 0, 0);
  big_case("rg_cross_entropy [300,150]", (opcall){.op = O_CE, .ix = tg, .ix_nd = 1, .ix_dims = {R}},
           &X, 1, want, 1, 1e-5);
  /* embedding: 150 ids into a [40,300] table (columns split in blocks of 256) */
  big_in T = {2, {40, 300}, x};
  int32_t *ids = malloc(sizeof(int32_t) * C);
  for (int p = 0; p < C; p++) ids[p] = (p * 7) % 40;
  for (int p = 0; p < C; p++)
    for (int j = 0; j < 300; j++) want[p * 300 + j] = x[ids[p] * 300 + j];
  big_case("rg_embedding [40,300] x 150 ids",
           (opcall){.op = O_EMBEDDING, .ix = ids, .ix_nd = 1, .ix_dims = {C}}, &T, 1, want,
           C * 300, 0);
  /* attention [2,4,64,32] causal */
  big_in Q = {4, {2, 4, 64, 32}, x}, K = {4, {2, 4, 64, 32}, x + 16384},
         Vv = {4, {2, 4, 64, 32}, x2};
  ref_attention(x, x + 16384, x2, 8, 64, 64, 32, 1, want);
  big_case("rg_attention [2,4,64,32] causal", (opcall){.op = O_ATTENTION, .i = {1}},
           (big_in[]){Q, K, Vv}, 3, want, 16384, 1e-5);
  /* the same with masks, T = 70 (blocks of 32 and a part), D = 20 (a part of a vector) */
  int32_t kpb[2 * 70];
  for (int i = 0; i < 2 * 70; i++) kpb[i] = i % 9 == 4;
  int64_t bd[2] = {70, 70};
  big_in Qm = {4, {2, 2, 70, 20}, x}, Km = {4, {2, 2, 70, 20}, x + 5600},
         Vm = {4, {2, 2, 70, 20}, x2};
  ref_attention_mask(x, x + 5600, x2, 4, 2, 70, 70, 20, 1,
                     (ref_masks){kpb, x2 + 5600, 2, bd}, want);
  big_case("rg_attention_mask [2,2,70,20] causal, padded, bias [70,70]",
           (opcall){.op = O_ATTENTION_MASK, .i = {1}, .ix = kpb, .ix_nd = 2, .ix_dims = {2, 70},
                    .fx = x2 + 5600, .fx_nd = 2, .fx_dims = {70, 70}},
           (big_in[]){Qm, Km, Vm}, 3, want, 5600, 1e-5);
  /* matmul [2,96,64] x [64,96]: the GEMM in parallel; 64 terms: 3e-5 (see t_matmul) */
  big_in A = {3, {2, 96, 64}, x}, Bm = {2, {64, 96}, x2};
  ref_matmul(x, 3, A.d, x2, 2, Bm.d, 3, (int64_t[]){2, 96, 96}, want);
#ifdef RG_HAVE_CBLAS
  g_same_bits = 0;
#endif
  big_case("rg_matmul [2,96,64] x [64,96]", (opcall){.op = O_MATMUL}, (big_in[]){A, Bm}, 2,
           want, 2 * 96 * 96, 3e-5);
  g_same_bits = 1;
  free(x);
  free(x2);
  free(want);
  free(argbuf);
  free(tg);
  free(ids);
  g_grad = -1;
}

/* ======================================================================================
   Misuse across ops, and recovery
   ====================================================================================== */

static void t_misuse(void) {
  rg_ctx *ctx = open_ctx();
  if (!ctx) return;
  rg_tensor a23 = param(ctx, 2, (int64_t[]){2, 3}, NULL),
            a45 = param(ctx, 2, (int64_t[]){4, 5}, NULL);
  rg_tensor v4 = param(ctx, 1, (int64_t[]){4}, NULL), tab = param(ctx, 2, (int64_t[]){5, 3}, NULL);
  rg_tensor i2 = input_i32(ctx, 1, (int64_t[]){2}, (int32_t[]){0, 1});
  rg_tensor f2 = input(ctx, 1, (int64_t[]){2}, (float[]){0, 1});
  expect_misuse(ctx, rg_matmul(ctx, a23, a45), "rg_matmul", "rg_matmul [2,3] x [4,5]");
  expect_misuse(ctx, rg_add(ctx, a23, v4), "rg_add", "rg_add [2,3] + [4]");
  expect_misuse(ctx, rg_embedding(ctx, tab, f2), "rg_embedding", "rg_embedding F32 index");
  expect_misuse(ctx, rg_mul(ctx, i2, f2), "rg_mul", "rg_mul I32 operand");
  expect_misuse(ctx, rg_exp(ctx, i2), "rg_exp", "rg_exp I32");
  expect_misuse(ctx, rg_sum(ctx, i2, 0, 0), "rg_sum", "rg_sum I32");
  expect_misuse(ctx, rg_softmax(ctx, i2), "rg_softmax", "rg_softmax I32");
  expect_misuse(ctx, rg_layernorm(ctx, a23, v4, RG_NONE, 1e-5f), "rg_layernorm",
                "rg_layernorm gamma [4] for C 3");
  expect_misuse(ctx, rg_rmsnorm(ctx, a23, v4, 1e-5f), "rg_rmsnorm", "rg_rmsnorm gamma [4]");
  expect_misuse(ctx, rg_mse(ctx, a23, a45), "rg_mse", "rg_mse [2,3] [4,5]");
  expect_misuse(ctx, rg_cross_entropy(ctx, a23, f2), "rg_cross_entropy",
                "rg_cross_entropy F32 targets");
  expect_misuse(ctx, rg_attention(ctx, a23, a23, a23, 0), "rg_attention",
                "rg_attention 2-D operands");
  close_ctx(ctx);
  /* an op given RG_NONE returns RG_NONE and keeps the first error */
  ctx = open_ctx();
  if (!ctx) return;
  a23 = param(ctx, 2, (int64_t[]){2, 3}, NULL);
  a45 = param(ctx, 2, (int64_t[]){4, 5}, NULL);
  rg_tensor bad = rg_matmul(ctx, a23, a45);
  rg_tensor chain = rg_relu(ctx, rg_add(ctx, bad, a23));
  CHECK(chain.id == 0, "an op given RG_NONE returned a tensor");
  CHECK(rg_error(ctx) == RG_ERR_MISUSE && msg_has(ctx, "rg_matmul"),
        "the chain must keep the first error (rg_matmul): %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  /* a failed barrier (a bad embedding id) does not break later work */
  rg_tensor y = rg_embedding(ctx, param(ctx, 2, (int64_t[]){2, 2}, NULL),
                             input_i32(ctx, 1, (int64_t[]){1}, (int32_t[]){2}));
  CHECK(rg_sync(ctx) == RG_ERR_MISUSE, "rg_sync after a bad id: %s", rg_errmsg(ctx));
  (void)y;
  rg_clear_error(ctx);
  CHECK(rg_step_begin(ctx) == RG_OK, "rg_step_begin after a failed drain: %s", rg_errmsg(ctx));
  alive(ctx, "after a failed drain");
  close_ctx(ctx);
  g_grad = -1;
}

/* ---- the table ------------------------------------------------------------------------ */

/* covers: the ops whose gradients the test checks by finite differences (covers.h). */
typedef struct test_case { const char *name; void (*fn)(void); const rg_op *covers; } test_case;

static const test_case tests[] = {
    {"rg_add", t_add, RG_COVERS(RG_OP_ADD, RG_OP_SUM_TO, RG_OP_SUM_TO_ACC)},
    {"rg_sub", t_sub, RG_COVERS(RG_OP_SUB)},
    {"rg_mul", t_mul, RG_COVERS(RG_OP_MUL, RG_OP_ACCUM)},
    {"rg_div", t_div, RG_COVERS(RG_OP_DIV)},
    {"rg_scale", t_scale, RG_COVERS(RG_OP_SCALE)},
    {"rg_pow", t_pow, RG_COVERS(RG_OP_POW)},
    {"rg_neg", t_neg, RG_COVERS(RG_OP_NEG)},
    {"rg_exp", t_exp, RG_COVERS(RG_OP_EXP)},
    {"rg_log", t_log, RG_COVERS(RG_OP_LOG)},
    {"rg_sqrt", t_sqrt, RG_COVERS(RG_OP_SQRT)},
    {"rg_relu", t_relu, RG_COVERS(RG_OP_RELU, RG_OP_RELU_BWD)},
    {"rg_gelu", t_gelu, RG_COVERS(RG_OP_GELU, RG_OP_GELU_BWD)},
    {"rg_silu", t_silu, RG_COVERS(RG_OP_SILU, RG_OP_SILU_BWD)},
    {"rg_sigmoid", t_sigmoid, RG_COVERS(RG_OP_SIGMOID, RG_OP_SIGMOID_BWD)},
    {"rg_tanh", t_tanh, RG_COVERS(RG_OP_TANH, RG_OP_TANH_BWD)},
    {"rg_clamp", t_clamp, RG_COVERS(RG_OP_CLAMP, RG_OP_CLAMP_BWD)},
    {"rg_sum", t_sum, RG_COVERS(RG_OP_SUM, RG_OP_EXPAND)},
    {"rg_mean", t_mean, RG_COVERS(RG_OP_MEAN)},
    {"rg_max", t_max, RG_COVERS(RG_OP_MAX, RG_OP_MAX_BWD)},
    {"rg_argmax", t_argmax, NULL},
    {"rg_softmax", t_softmax, RG_COVERS(RG_OP_SOFTMAX, RG_OP_SOFTMAX_BWD)},
    {"rg_log_softmax", t_log_softmax, RG_COVERS(RG_OP_LOG_SOFTMAX, RG_OP_LOG_SOFTMAX_BWD)},
    {"rg_matmul", t_matmul, RG_COVERS(RG_OP_MATMUL)},
    {"rg_linear", t_linear, RG_COVERS(RG_OP_LINEAR, RG_OP_MATMUL_ACC)},
    {"rg_linear_act", t_linear_act, RG_COVERS(RG_OP_LINEAR_ACT, RG_OP_MATMUL_DGELU)},
    {"rg_layernorm", t_layernorm,
     RG_COVERS(RG_OP_LAYERNORM, RG_OP_ADD_LAYERNORM, RG_OP_LAYERNORM_BWD)},
    {"rg_rmsnorm", t_rmsnorm, RG_COVERS(RG_OP_RMSNORM, RG_OP_RMSNORM_BWD)},
    {"rg_embedding", t_embedding, RG_COVERS(RG_OP_EMBEDDING, RG_OP_EMBEDDING_BWD)},
    {"rg_attention", t_attention, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
    {"rg_attention_mask", t_attention_mask, RG_COVERS(RG_OP_ATTENTION, RG_OP_ATTENTION_BWD)},
    {"rg_attention_qkv", t_attention_qkv,
     RG_COVERS(RG_OP_ATTENTION_QKV, RG_OP_ATTENTION_QKV_BWD)},
    {"rg_cross_entropy", t_cross_entropy,
     RG_COVERS(RG_OP_CROSS_ENTROPY, RG_OP_CROSS_ENTROPY_BWD)},
    {"rg_cross_entropy_ignore", t_cross_entropy_ignore,
     RG_COVERS(RG_OP_CROSS_ENTROPY, RG_OP_CROSS_ENTROPY_BWD)},
    {"rg_mse", t_mse, RG_COVERS(RG_OP_MSE, RG_OP_FILL)},
    {"rg_reshape", t_reshape, RG_COVERS(RG_OP_COPY)},
    {"rg_transpose", t_transpose, RG_COVERS(RG_OP_PERMUTE)},
    {"rg_permute", t_permute, RG_COVERS(RG_OP_PERMUTE)},
    {"rg_slice", t_slice, RG_COVERS(RG_OP_SLICE, RG_OP_SLICE_BWD)},
    {"rg_concat", t_concat, RG_COVERS(RG_OP_CONCAT)},
    {"rg_dropout", t_dropout, RG_COVERS(RG_OP_DROPOUT)},
    {"rg_cast", t_cast, RG_COVERS(RG_OP_CAST)},
    {"rg_detach", t_detach, NULL},
    {"large shapes, 1 vs 2 threads", t_large, NULL},
    {"misuse+recovery", t_misuse, NULL},
};

/* Runs test i, prints its line; returns 1 if it failed. */
static int run_one(int i) {
  int before = test_failures_;
  g_fwd = 0;
  g_grad = 0;
  g_rng = 0x9E3779B97F4A7C15ull ^ (uint64_t)(i + 1) * 0x100000001B3ull;
  memset(g_seen, 0, sizeof g_seen);
  tests[i].fn();
  rg_op miss = covers_missing(tests[i].covers, g_seen);
  CHECK(miss == RG_OP_COUNT, "%s: its RG_COVERS list has op %s, which none of its gradient "
        "checks reached", tests[i].name, miss < RG_OP_COUNT ? rg_optab[miss].kernel : "");
  int bad = test_failures_ != before;
  char gbuf[32];
  if (g_grad < 0) snprintf(gbuf, sizeof gbuf, "-");
  else snprintf(gbuf, sizeof gbuf, "%.2e", g_grad);
  printf("%s %-24s fwd %.2e  grad %s\n", bad ? "FAIL" : "PASS", tests[i].name, g_fwd, gbuf);
  fflush(stdout);
  return bad;
}

int main(int argc, char **argv) {
  int nfailed = 0, ntests = (int)(sizeof tests / sizeof tests[0]);
  for (int i = 0; i < ntests; i++) {
    if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue; /* run one by name */
#ifdef RG_TEST_FORK
    /* Each op in its own process, so a crash in one op's kernel is reported as that op's
       failure and the others still run. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    /* exit, not _exit: LeakSanitizer runs at exit. 10 = "checks failed, line printed";
       any other non-zero status is a sanitizer report or an exit() in the library. */
    if (pid == 0) exit(run_one(i) ? 10 : 0);
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) {
      nfailed += run_one(i); /* no fork: run it here */
    } else if (WIFSIGNALED(ws)) {
      printf("FAIL %-24s crashed with signal %d\n", tests[i].name, WTERMSIG(ws));
      fflush(stdout);
      nfailed++;
    } else if (WEXITSTATUS(ws) != 0 && WEXITSTATUS(ws) != 10) {
      printf("FAIL %-24s the process exited with status %d (a sanitizer report or exit() "
             "in the library; see stderr)\n", tests[i].name, WEXITSTATUS(ws));
      fflush(stdout);
      nfailed++;
    } else {
      nfailed += WEXITSTATUS(ws) == 10;
    }
#else
    nfailed += run_one(i);
#endif
  }
  if (nfailed) {
    fprintf(stderr, "%d of %d op tests failed\n", nfailed, ntests);
    return 1;
  }
  return finish();
}
