/*
 * elementwise.c - CPU kernels that map elements one to one: upload, fill, the broadcasting
 * binary ops, scale/pow/clamp, the unary activations and their elementwise backward ops.
 *
 * Invariants:
 *  - Shapes were validated at record time: a binary op's operands broadcast (numpy,
 *    right-aligned) to out, and every other op's inputs have out's element count.
 *  - Each output element is written by exactly one thread and depends only on its own
 *    inputs, so results never depend on the thread count.
 *  - NaN propagates through relu and clamp as it does in PyTorch (comparisons are
 *    written so that a NaN input falls through to the NaN-producing branch).
 */
#include "cpu.h"
#include "vec.h"

#include <math.h>
#include <string.h>

/* Elements per parallel work item: large enough that starting a thread on one is cheap
   against the work, small enough that a few cores share a 1 MB tensor. */
#define EW_CHUNK 16384
/* Up to this many elements an op of a few instructions per element (EW_CHEAP) runs on
   the calling thread: its whole work is about what handing chunks to sleeping workers
   costs. Ops that call exp, log, tanh or pow split from two chunks on. */
#define EW_PAR_MIN (4 * EW_CHUNK)


/* ---- upload and fill ------------------------------------------------------------------ */

rg_status rg_cpu_upload(rg_kargs *k) {
  const rg_node *n = k->node;
  if (n->i[1] > 0) /* an empty upload may carry no staging pointer */
    memcpy((char *)k->out[0].p + n->i[0], n->aux, (size_t)n->i[1]);
  return RG_OK;
}

typedef struct {
  float *p;
  float v;
} fill_job;
static void fill_range(void *a, int64_t lo, int64_t hi, int slot) {
  const fill_job *j = a;
  (void)slot;
  for (int64_t i = lo; i < hi; i++) j->p[i] = j->v;
}

rg_status rg_cpu_fill(rg_kargs *k) {
  const rg_tv *o = &k->out[0];
  float v = k->node->f[0];
  if (o->dtype == RG_BF16) {
    uint16_t h = rg_f32_to_bf16(v);
    uint16_t *p = o->p;
    for (int64_t i = 0; i < o->n; i++) p[i] = h;
  } else if (o->dtype == RG_I32) {
    /* Fill values for index tensors are small integers; truncate as CAST does. */
    int32_t iv = (v != v) ? 0 : (int32_t)fmax(fmin((double)v, 2147483647.0), -2147483648.0);
    int32_t *p = o->p;
    for (int64_t i = 0; i < o->n; i++) p[i] = iv;
  } else {
    rg_cpu_for(o->n, par_threads(k, o->n > EW_PAR_MIN), fill_range, &(fill_job){o->p, v});
  }
  return RG_OK;
}

/* ---- binary ops with broadcasting ----------------------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV };

/* o[i] = a[i*sa] op b[i*sb]; the switch sits outside the loops so each loop vectorises. */
static void bin_span(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *o,
                     int64_t n) {
  switch (op) {
  case B_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] + b[i * sb]; break;
  case B_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] - b[i * sb]; break;
  case B_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] * b[i * sb]; break;
  default: for (int64_t i = 0; i < n; i++) o[i] = a[i * sa] / b[i * sb]; break;
  }
}


/* True when v holds out's last axis and nothing else ([C], [1,C], ...). */
static bool is_trailing_vector(const rg_tv *v, const rg_tv *out) {
  return out->ndim >= 1 && v->ndim >= 1 && v->dims[v->ndim - 1] == out->dims[out->ndim - 1] &&
         v->n == out->dims[out->ndim - 1];
}

/* What the binary forms below hand their bodies. */
typedef struct {
  int op;
  const float *a, *b; /* bin_rowvec: a the full operand, b the vector */
  int64_t sa, sb;     /* element strides (bin_flat) */
  float *o;
  int64_t n, C;
  bool v_first;
  const rg_tv *ta, *tb, *to; /* bin_general */
  const int64_t *bsa, *bsb;
} bin_job;

static void bin_flat_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const bin_job *j = arg;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    int64_t e = c * EW_CHUNK;
    bin_span(j->op, j->a + e * j->sa, j->sa, j->b + e * j->sb, j->sb, j->o + e,
             min64(EW_CHUNK, j->n - e));
  }
}
static void bin_flat(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *o,
                     int64_t n, int threads) {
  int64_t nchunk = (n + EW_CHUNK - 1) / EW_CHUNK;
  rg_cpu_for(nchunk, n > EW_PAR_MIN ? threads : 1, bin_flat_range,
             &(bin_job){.op = op, .a = a, .sa = sa, .b = b, .sb = sb, .o = o, .n = n});
}

static void bin_rowvec_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const bin_job *j = arg;
  int64_t C = j->C;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    if (j->v_first)
      bin_span(j->op, j->b, 1, j->a + r * C, 1, j->o + r * C, C);
    else
      bin_span(j->op, j->a + r * C, 1, j->b, 1, j->o + r * C, C);
  }
}
/* a full, v a trailing-axis vector; v_first says which side of op v is on. */
static void bin_rowvec(int op, const float *full, const float *v, bool v_first, float *o,
                       int64_t rows, int64_t C, int threads) {
  rg_cpu_for(rows, rows * C > EW_PAR_MIN ? threads : 1, bin_rowvec_range,
             &(bin_job){.op = op, .a = full, .b = v, .v_first = v_first, .o = o, .C = C});
}

static void bin_general_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const bin_job *j = arg;
  const rg_tv *o = j->to;
  const float *pa = j->ta->p, *pb = j->tb->p;
  (void)slot;
  for (int64_t r = lo; r < hi; r++)
    bin_span(j->op, pa + rg_cpu_bcast_offset(o, 1, j->bsa, r), j->bsa[o->ndim - 1],
             pb + rg_cpu_bcast_offset(o, 1, j->bsb, r), j->bsb[o->ndim - 1], j->o + r * j->C,
             j->C);
}
static void bin_general(int op, const rg_tv *a, const rg_tv *b, const rg_tv *o, int threads) {
  int64_t sa[RG_MAX_DIMS], sb[RG_MAX_DIMS];
  rg_cpu_bcast_strides(a, o, 0, sa);
  rg_cpu_bcast_strides(b, o, 0, sb);
  int64_t C = o->dims[o->ndim - 1];
  rg_cpu_for(o->n / C, o->n > EW_PAR_MIN ? threads : 1, bin_general_range,
             &(bin_job){.op = op, .ta = a, .tb = b, .to = o, .bsa = sa, .bsb = sb,
                        .o = o->p, .C = C});
}

static rg_status binary(rg_kargs *k, int op) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *o = &k->out[0];
  int t = nthreads(k);
  if (o->n == 0) return RG_OK;
  /* Equal counts mean equal shapes up to leading 1s, since both broadcast to out. */
  if (a->n == o->n && b->n == o->n) {
    bin_flat(op, a->p, 1, b->p, 1, o->p, o->n, t);
  } else if (a->n == o->n && b->n == 1) {
    bin_flat(op, a->p, 1, b->p, 0, o->p, o->n, t);
  } else if (b->n == o->n && a->n == 1) {
    bin_flat(op, a->p, 0, b->p, 1, o->p, o->n, t);
  } else if (a->n == o->n && is_trailing_vector(b, o)) {
    int64_t C = o->dims[o->ndim - 1];
    bin_rowvec(op, a->p, b->p, false, o->p, o->n / C, C, t);
  } else if (b->n == o->n && is_trailing_vector(a, o)) {
    int64_t C = o->dims[o->ndim - 1];
    bin_rowvec(op, b->p, a->p, true, o->p, o->n / C, C, t);
  } else {
    bin_general(op, a, b, o, t);
  }
  return RG_OK;
}

rg_status rg_cpu_add(rg_kargs *k) { return binary(k, B_ADD); }
rg_status rg_cpu_sub(rg_kargs *k) { return binary(k, B_SUB); }
rg_status rg_cpu_mul(rg_kargs *k) { return binary(k, B_MUL); }
rg_status rg_cpu_div(rg_kargs *k) { return binary(k, B_DIV); }

/* ---- unary ops ------------------------------------------------------------------------ */

enum { U_SCALE, U_POW, U_CLAMP, U_NEG, U_EXP, U_LOG, U_SQRT, U_RELU, U_GELU, U_SILU,
       U_SIGMOID, U_TANH };

/* Never evaluates exp of a large positive argument, so no spurious overflow to inf/inf. */
static inline float sigmoidf(float x) {
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  float e = expf(x);
  return e / (1.f + e);
}

static void pow_span(const float *x, float *y, int64_t n, float p) {
  if (p == 2.f) { /* exact either way; the multiply is just cheaper */
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i];
  } else if (p == 1.f) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
  } else {
    for (int64_t i = 0; i < n; i++) y[i] = powf(x[i], p);
  }
}

static void unary_span(int op, const float *x, float *y, int64_t n, float p0, float p1) {
  switch (op) {
  case U_SCALE: for (int64_t i = 0; i < n; i++) y[i] = x[i] * p0; break;
  case U_POW: pow_span(x, y, n, p0); break;
  case U_CLAMP:
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < p0 ? p0 : (x[i] > p1 ? p1 : x[i]);
    break;
  case U_NEG: for (int64_t i = 0; i < n; i++) y[i] = -x[i]; break;
  case U_EXP: for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]); break;
  case U_LOG: for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]); break;
  case U_SQRT: for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); break;
  case U_RELU: rg_cpu_vec()->relu(x, y, n); break;
  case U_GELU: rg_cpu_vec()->gelu(x, y, n); break;
  case U_SILU: for (int64_t i = 0; i < n; i++) y[i] = x[i] * sigmoidf(x[i]); break;
  case U_SIGMOID: for (int64_t i = 0; i < n; i++) y[i] = sigmoidf(x[i]); break;
  default: for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
  }
}

/* What unary and dgrad hand their bodies: chunks of EW_CHUNK elements. */
typedef struct {
  int op;
  const float *x, *g;
  float *y;
  int64_t n;
  float p0, p1;
} map_job;

static void unary_range(void *a, int64_t lo, int64_t hi, int slot) {
  const map_job *j = a;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    int64_t e = c * EW_CHUNK;
    unary_span(j->op, j->x + e, j->y + e, min64(EW_CHUNK, j->n - e), j->p0, j->p1);
  }
}

/* The unary ops of a few instructions an element (EW_PAR_MIN). */
static bool unary_cheap(int op) {
  return op == U_SCALE || op == U_CLAMP || op == U_NEG || op == U_SQRT || op == U_RELU;
}

static rg_status unary(rg_kargs *k, int op) {
  int64_t n = k->out[0].n, nchunk = (n + EW_CHUNK - 1) / EW_CHUNK;
  rg_cpu_for(nchunk, par_threads(k, !unary_cheap(op) || n > EW_PAR_MIN), unary_range,
             &(map_job){op, k->in[0].p, NULL, k->out[0].p, n, k->node->f[0], k->node->f[1]});
  return RG_OK;
}

rg_status rg_cpu_scale(rg_kargs *k) { return unary(k, U_SCALE); }
rg_status rg_cpu_pow(rg_kargs *k) { return unary(k, U_POW); }
rg_status rg_cpu_clamp(rg_kargs *k) { return unary(k, U_CLAMP); }
rg_status rg_cpu_neg(rg_kargs *k) { return unary(k, U_NEG); }
rg_status rg_cpu_exp(rg_kargs *k) { return unary(k, U_EXP); }
rg_status rg_cpu_log(rg_kargs *k) { return unary(k, U_LOG); }
rg_status rg_cpu_sqrt(rg_kargs *k) { return unary(k, U_SQRT); }
rg_status rg_cpu_relu(rg_kargs *k) { return unary(k, U_RELU); }
rg_status rg_cpu_gelu(rg_kargs *k) { return unary(k, U_GELU); }
rg_status rg_cpu_silu(rg_kargs *k) { return unary(k, U_SILU); }
rg_status rg_cpu_sigmoid(rg_kargs *k) { return unary(k, U_SIGMOID); }
rg_status rg_cpu_tanh(rg_kargs *k) { return unary(k, U_TANH); }

/* ---- elementwise backward: (x or y, g) -> dx ------------------------------------------- */

enum { D_RELU, D_GELU, D_SILU, D_SIGMOID, D_TANH, D_CLAMP };

static inline float silu_grad(float x) {
  float s = sigmoidf(x);
  return s * (1.f + x * (1.f - s));
}

/* u is the forward input x, except for sigmoid and tanh where it is the forward output. */
static void dgrad_span(int op, const float *u, const float *g, float *d, int64_t n, float lo,
                       float hi) {
  switch (op) {
  case D_RELU: rg_cpu_vec()->relu_bwd(u, g, d, n); break;
  case D_GELU: rg_cpu_vec()->gelu_bwd(u, g, d, n); break;
  case D_SILU: for (int64_t i = 0; i < n; i++) d[i] = g[i] * silu_grad(u[i]); break;
  case D_SIGMOID: for (int64_t i = 0; i < n; i++) d[i] = g[i] * u[i] * (1.f - u[i]); break;
  case D_TANH: for (int64_t i = 0; i < n; i++) d[i] = g[i] * (1.f - u[i] * u[i]); break;
  default: /* the public contract: gradient only strictly inside (lo, hi) */
    for (int64_t i = 0; i < n; i++) d[i] = (u[i] > lo && u[i] < hi) ? g[i] : 0.f;
    break;
  }
}

static void dgrad_range(void *a, int64_t lo, int64_t hi, int slot) {
  const map_job *j = a;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    int64_t e = c * EW_CHUNK;
    dgrad_span(j->op, j->x + e, j->g + e, j->y + e, min64(EW_CHUNK, j->n - e), j->p0, j->p1);
  }
}

static rg_status dgrad(rg_kargs *k, int op) {
  int64_t n = k->out[0].n, nchunk = (n + EW_CHUNK - 1) / EW_CHUNK;
  bool cheap = op != D_GELU && op != D_SILU; /* EW_PAR_MIN */
  rg_cpu_for(nchunk, par_threads(k, !cheap || n > EW_PAR_MIN), dgrad_range,
             &(map_job){op, k->in[0].p, k->in[1].p, k->out[0].p, n, k->node->f[0],
                        k->node->f[1]});
  return RG_OK;
}

rg_status rg_cpu_relu_bwd(rg_kargs *k) { return dgrad(k, D_RELU); }
rg_status rg_cpu_gelu_bwd(rg_kargs *k) { return dgrad(k, D_GELU); }
rg_status rg_cpu_silu_bwd(rg_kargs *k) { return dgrad(k, D_SILU); }
rg_status rg_cpu_sigmoid_bwd(rg_kargs *k) { return dgrad(k, D_SIGMOID); }
rg_status rg_cpu_tanh_bwd(rg_kargs *k) { return dgrad(k, D_TANH); }
rg_status rg_cpu_clamp_bwd(rg_kargs *k) { return dgrad(k, D_CLAMP); }
