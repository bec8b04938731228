/*
 * nn.c - CPU kernels for the neural-network ops that work row by row over the last axis:
 * softmax and log-softmax, layernorm and rmsnorm, embedding, attention, cross-entropy and
 * mse, with their backward kernels.
 *
 * Invariants:
 *  - A tensor [..., C] is R = n / C contiguous rows of C; each row is handled by one
 *    thread, and every reduction across rows runs in an order fixed by the shapes, so
 *    results are identical for any thread count.
 *  - Softmax-like rows subtract the row maximum before exp. Row sums accumulate in double;
 *    normalisation takes the mean first and the variance of the centred values, so rows
 *    offset by 1e4 keep their precision.
 *  - Index and target checks finish before any output is written: a bad id fails the
 *    kernel with nothing written.
 *  - Zero-size tensors are legal: an empty last axis (C == 0) means there is nothing to
 *    compute, and a cross-entropy over no counted rows is 0.
 *  - Attention recomputes its probabilities in the backward pass instead of storing the
 *    T x S matrix: the forward keeps the log-sum-exp of each query row (its second
 *    output), the backward g.o per row (8 bytes per query in all). The CPU computes the
 *    products in f32 whatever the node's precision flag (the CUDA tensor-core paths).
 */
#include "cpu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many input elements a kernel runs on one thread. */
#define PAR_MIN 32768
/* Column block for reductions across rows (dgamma, dtable): one double per column. */
#define CB 256
/* Cross-row sums split into at most this many fixed chunks (partials on the stack). */
#define MAX_CHUNKS 64

static inline int nthreads(const rg_kargs *k) { return k->threads > 0 ? k->threads : 1; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t last_dim(const rg_tv *x) { return x->ndim ? x->dims[x->ndim - 1] : 1; }

static int thread_id(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

static float row_max(const float *x, int64_t C) {
  float m = x[0];
  for (int64_t c = 1; c < C; c++) m = x[c] > m ? x[c] : m;
  return m;
}

/* ---- softmax and log-softmax ----------------------------------------------------------- */

static void softmax_row(const float *x, float *y, int64_t C) {
  float m = row_max(x, C);
  double s = 0;
  for (int64_t c = 0; c < C; c++) {
    y[c] = expf(x[c] - m);
    s += y[c];
  }
  float inv = (float)(1.0 / s);
  for (int64_t c = 0; c < C; c++) y[c] *= inv;
}

static void log_softmax_row(const float *x, float *y, int64_t C) {
  float m = row_max(x, C);
  double s = 0;
  for (int64_t c = 0; c < C; c++) s += expf(x[c] - m);
  float lse = (float)log(s);
  for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) - lse;
}

static rg_status softmax_common(rg_kargs *k, bool log_form) {
  const float *x = k->in[0].p;
  float *y = k->out[0].p;
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
#pragma omp parallel for num_threads(nthreads(k)) if(k->in[0].n > PAR_MIN) schedule(static)
  for (int64_t r = 0; r < R; r++) {
    if (log_form)
      log_softmax_row(x + r * C, y + r * C, C);
    else
      softmax_row(x + r * C, y + r * C, C);
  }
  return RG_OK;
}

rg_status rg_cpu_softmax(rg_kargs *k) { return softmax_common(k, false); }
rg_status rg_cpu_log_softmax(rg_kargs *k) { return softmax_common(k, true); }

/* dx = y (g - sum(g y)) */
static void softmax_bwd_row(const float *y, const float *g, float *dx, int64_t C) {
  double dot = 0;
  for (int64_t c = 0; c < C; c++) dot += (double)g[c] * y[c];
  float d = (float)dot;
  for (int64_t c = 0; c < C; c++) dx[c] = y[c] * (g[c] - d);
}

/* dx = g - exp(y) sum(g) */
static void log_softmax_bwd_row(const float *y, const float *g, float *dx, int64_t C) {
  double s = 0;
  for (int64_t c = 0; c < C; c++) s += g[c];
  float sf = (float)s;
  for (int64_t c = 0; c < C; c++) dx[c] = g[c] - expf(y[c]) * sf;
}

static rg_status softmax_bwd_common(rg_kargs *k, bool log_form) {
  const float *y = k->in[0].p, *g = k->in[1].p;
  float *dx = k->out[0].p;
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
#pragma omp parallel for num_threads(nthreads(k)) if(k->in[0].n > PAR_MIN) schedule(static)
  for (int64_t r = 0; r < R; r++) {
    if (log_form)
      log_softmax_bwd_row(y + r * C, g + r * C, dx + r * C, C);
    else
      softmax_bwd_row(y + r * C, g + r * C, dx + r * C, C);
  }
  return RG_OK;
}

rg_status rg_cpu_softmax_bwd(rg_kargs *k) { return softmax_bwd_common(k, false); }
rg_status rg_cpu_log_softmax_bwd(rg_kargs *k) { return softmax_bwd_common(k, true); }

/* ---- layernorm and rmsnorm ------------------------------------------------------------- */
/* Both normalise xhat = (x - mu) * rstd with rstd = 1/sqrt(mean((x-mu)^2) + eps); rmsnorm
   is the case mu = 0 with no beta, so one set of row functions serves both. */

typedef struct norm_stats { double mu, rstd; } norm_stats;

static norm_stats row_stats(const float *x, int64_t C, double eps, bool centre) {
  norm_stats st = {0, 0};
  if (centre) {
    double s = 0;
    for (int64_t c = 0; c < C; c++) s += x[c];
    st.mu = s / (double)C;
  }
  double v = 0;
  for (int64_t c = 0; c < C; c++) {
    double d = x[c] - st.mu;
    v += d * d;
  }
  st.rstd = 1.0 / sqrt(v / (double)C + eps);
  return st;
}

static void norm_fwd_row(const float *x, const float *gamma, const float *beta, float *y,
                         int64_t C, double eps, bool centre) {
  norm_stats st = row_stats(x, C, eps, centre);
  for (int64_t c = 0; c < C; c++) {
    float v = (float)((x[c] - st.mu) * st.rstd);
    if (gamma) v *= gamma[c];
    if (beta) v += beta[c];
    y[c] = v;
  }
}

static rg_status norm_fwd(rg_kargs *k, bool centre) {
  const float *x = k->in[0].p, *gamma = k->in[1].p;
  const float *beta = centre ? k->in[2].p : NULL;
  float *y = k->out[0].p;
  double eps = k->node->f[0];
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
#pragma omp parallel for num_threads(nthreads(k)) if(k->in[0].n > PAR_MIN) schedule(static)
  for (int64_t r = 0; r < R; r++) norm_fwd_row(x + r * C, gamma, beta, y + r * C, C, eps, centre);
  return RG_OK;
}

rg_status rg_cpu_layernorm(rg_kargs *k) { return norm_fwd(k, true); }

/* s = a + b, then y = layernorm(s) (ops.h): the two kernels in turn. */
rg_status rg_cpu_add_layernorm(rg_kargs *k) {
  rg_kargs add, ln;
  rg__add_layernorm_split(k, &add, &ln);
  rg_status st = rg_cpu_add(&add);
  return st == RG_OK ? rg_cpu_layernorm(&ln) : st;
}
rg_status rg_cpu_rmsnorm(rg_kargs *k) { return norm_fwd(k, false); }

/* dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)), dxh = g gamma; rmsnorm drops the
   mean(dxh) term because its mu is not a function of x. */
static void norm_dx_row(const float *x, const float *gamma, const float *g, float *dx,
                        int64_t C, norm_stats st, bool centre) {
  double s1 = 0, s2 = 0;
  for (int64_t c = 0; c < C; c++) {
    double xh = (x[c] - st.mu) * st.rstd;
    double dxh = gamma ? (double)g[c] * gamma[c] : (double)g[c];
    s1 += dxh;
    s2 += dxh * xh;
  }
  double a = centre ? s1 / (double)C : 0.0, b = s2 / (double)C;
  for (int64_t c = 0; c < C; c++) {
    double xh = (x[c] - st.mu) * st.rstd;
    double dxh = gamma ? (double)g[c] * gamma[c] : (double)g[c];
    dx[c] = (float)(st.rstd * (dxh - a - xh * b));
  }
}

/* o[c] = v, or o[c] += v (a folded gradient, ops.h): the float add of the ACCUM it
   replaces, so folding changes no bit. */
static inline void put_param(float *o, int64_t c, double v, bool add) {
  o[c] = add ? o[c] + (float)v : (float)v;
}

/* dgamma[c] = sum_r g xhat, dbeta[c] = sum_r g, for columns [c0, c0+nb); added into them
   where addg (addb). */
static void norm_dparam_block(const float *x, const float *g, const norm_stats *st, int64_t R,
                              int64_t C, int64_t c0, int64_t nb, float *dgamma, float *dbeta,
                              bool addg, bool addb) {
  double ag[CB] = {0}, ab[CB] = {0};
  for (int64_t r = 0; r < R; r++) {
    const float *xr = x + r * C + c0, *gr = g + r * C + c0;
    for (int64_t j = 0; j < nb; j++) {
      ag[j] += (double)gr[j] * ((xr[j] - st[r].mu) * st[r].rstd);
      ab[j] += gr[j];
    }
  }
  for (int64_t j = 0; j < nb; j++) {
    if (dgamma) put_param(dgamma, c0 + j, ag[j], addg);
    if (dbeta) put_param(dbeta, c0 + j, ab[j], addb);
  }
}

/* dgamma (dbeta) goes to in[3] (in[4]) when rg_backward folded it there, else out[1]
   (out[2]): see ops.h. */
static rg_status norm_bwd(rg_kargs *k, bool centre) {
  const float *x = k->in[0].p, *gamma = k->in[1].p, *g = k->in[2].p;
  bool addg = k->in[3].p != NULL, addb = centre && k->in[4].p != NULL;
  float *dx = k->out[0].p, *dgamma = addg ? k->in[3].p : k->out[1].p;
  float *dbeta = !centre ? NULL : addb ? k->in[4].p : k->out[2].p;
  double eps = k->node->f[0];
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
  if (C == 0) return RG_OK; /* dx, dgamma and dbeta are all empty */
  int nt = nthreads(k);
  bool par = k->in[0].n > PAR_MIN, params = dgamma || dbeta;
  (void)nt, (void)par; /* read only by OpenMP pragmas */
  norm_stats *st = NULL;
  if (params) {
    st = rg__malloc(k->ctx, (size_t)(R ? R : 1) * sizeof(*st));
    if (!st) {
      snprintf(k->msg, k->msgcap, "out of host memory for %lld row statistics",
               (long long)R);
      return RG_ERR_OOM;
    }
  }
  const float *dx_in = k->in[5].p; /* added into dx (a folded gradient sum, ops.h) */
  float *dx16 = k->out[3].p;        /* run_widened's F32 view of the BF16 copy of dx */
#pragma omp parallel for num_threads(nt) if(par) schedule(static)
  for (int64_t r = 0; r < R; r++) {
    norm_stats s = row_stats(x + r * C, C, eps, centre);
    if (st) st[r] = s;
    if (!dx) continue;
    norm_dx_row(x + r * C, gamma, g + r * C, dx + r * C, C, s, centre);
    for (int64_t c = 0; dx_in && c < C; c++) dx[r * C + c] += dx_in[r * C + c];
    if (dx16) memcpy(dx16 + r * C, dx + r * C, (size_t)C * sizeof *dx16); /* rounded later */
  }
  if (params) {
    int64_t nblk = (C + CB - 1) / CB;
#pragma omp parallel for num_threads(nt) if(par && nblk > 1) schedule(static)
    for (int64_t b = 0; b < nblk; b++)
      norm_dparam_block(x, g, st, R, C, b * CB, min64(CB, C - b * CB), dgamma, dbeta, addg,
                        addb);
    rg__free(k->ctx, st);
  }
  return RG_OK;
}

rg_status rg_cpu_layernorm_bwd(rg_kargs *k) { return norm_bwd(k, true); }
rg_status rg_cpu_rmsnorm_bwd(rg_kargs *k) { return norm_bwd(k, false); }

/* ---- embedding --------------------------------------------------------------------------- */

static rg_status check_ids(rg_kargs *k, const int32_t *idx, int64_t n, int64_t V) {
  for (int64_t p = 0; p < n; p++) {
    if (idx[p] < 0 || idx[p] >= V) {
      snprintf(k->msg, k->msgcap,
               "index %d at position %lld is outside [0, %lld): token ids must be < the "
               "table's rows (%lld); check the tokenizer's vocabulary size against the table",
               (int)idx[p], (long long)p, (long long)V, (long long)V);
      return RG_ERR_MISUSE;
    }
  }
  return RG_OK;
}

rg_status rg_cpu_embedding(rg_kargs *k) {
  const float *table = k->in[0].p;
  const int32_t *idx = k->in[1].p;
  float *out = k->out[0].p;
  int64_t V = k->in[0].dims[0], C = k->in[0].dims[1], n = k->in[1].n;
  rg_status st = check_ids(k, idx, n, V);
  if (st != RG_OK) return st;
#pragma omp parallel for num_threads(nthreads(k)) if(n * C > PAR_MIN) schedule(static)
  for (int64_t p = 0; p < n; p++)
    memcpy(out + p * C, table + (int64_t)idx[p] * C, (size_t)C * sizeof(float));
  return RG_OK;
}

/* Repeated ids accumulate. Threads split the columns, not the ids, so each table element
   is summed by one thread in id order: deterministic without atomics. */
rg_status rg_cpu_embedding_bwd(rg_kargs *k) {
  const int32_t *idx = k->in[0].p;
  const float *g = k->in[1].p;
  float *dt = k->out[0].p;
  int64_t V = k->out[0].dims[0], C = k->out[0].dims[1], n = k->in[0].n;
  rg_status st = check_ids(k, idx, n, V);
  if (st != RG_OK) return st;
  memset(dt, 0, (size_t)(V * C) * sizeof(float));
  int64_t nblk = (C + CB - 1) / CB;
#pragma omp parallel for num_threads(nthreads(k)) if(n * C > PAR_MIN && nblk > 1) schedule(static)
  for (int64_t b = 0; b < nblk; b++) {
    int64_t c0 = b * CB, nb = min64(CB, C - c0);
    for (int64_t p = 0; p < n; p++) {
      float *row = dt + (int64_t)idx[p] * C + c0;
      const float *gr = g + p * C + c0;
      for (int64_t j = 0; j < nb; j++) row[j] += gr[j];
    }
  }
  return RG_OK;
}

/* ---- attention ------------------------------------------------------------------------- */

/* Where the rows of one head live: row t of head bh = (b, h) starts at element
   b sb + h sh + t sr of its tensor. rg_attention's [B,H,T,D] operands are dense
   (sr = D); rg_attention_qkv's heads are D-column strips of [B,T,3C] (sr = 3C) and of
   its [B,T,C] output (sr = C), so neither op copies a head out before computing. */
typedef struct attn_lay { int64_t sb, sh, sr; } attn_lay;

/* q and dq use lay q; k, v, dk and dv lay k; o and g lay o. */
typedef struct attn_dims {
  int64_t BH, H, T, S, D;
  float scale;
  bool causal;
  attn_lay q, k, o;
} attn_dims;

/* The operands and results of either op, as base pointers of head 0 of batch 0; lse
   [BH,T] is the forward's second output and the backward's input. */
typedef struct attn_io {
  const float *q, *k, *v, *g;
  float *o, *lse, *dq, *dk, *dv;
} attn_io;

static attn_dims attn_shape(const rg_kargs *k, attn_io *io) {
  attn_dims a;
  const rg_tv *x = &k->in[0];
  int op = k->node->op;
  memset(io, 0, sizeof *io);
  if (op == RG_OP_ATTENTION || op == RG_OP_ATTENTION_BWD) {
    a.H = x->dims[1];
    a.BH = x->dims[0] * a.H;
    a.T = x->dims[2];
    a.D = x->dims[3];
    a.S = k->in[1].dims[2];
    a.q = (attn_lay){a.H * a.T * a.D, a.T * a.D, a.D};
    a.k = (attn_lay){a.H * a.S * a.D, a.S * a.D, a.D};
    a.o = a.q;
    io->q = x->p, io->k = k->in[1].p, io->v = k->in[2].p;
    if (op == RG_OP_ATTENTION) {
      io->o = k->out[0].p, io->lse = k->out[1].p;
    } else { /* q, k, v, o, g, lse */
      io->g = k->in[4].p, io->lse = k->in[5].p;
      io->dq = k->out[0].p, io->dk = k->out[1].p, io->dv = k->out[2].p;
    }
  } else { /* qkv [B,T,3C]: q, k, v are the thirds of a row */
    int64_t C = x->dims[2] / 3;
    a.H = k->node->i[1];
    a.BH = x->dims[0] * a.H;
    a.T = a.S = x->dims[1];
    a.D = C / a.H;
    a.q = a.k = (attn_lay){a.T * 3 * C, a.D, 3 * C};
    a.o = (attn_lay){a.T * C, a.D, C};
    io->q = x->p, io->k = io->q + C, io->v = io->q + 2 * C;
    if (op == RG_OP_ATTENTION_QKV) {
      io->o = k->out[0].p, io->lse = k->out[1].p;
    } else { /* qkv, o, g, lse */
      io->g = k->in[2].p, io->lse = k->in[3].p;
      io->dq = k->out[0].p, io->dk = io->dq + C, io->dv = io->dq + 2 * C;
    }
  }
  a.scale = a.D ? (float)(1.0 / sqrt((double)a.D)) : 0.f; /* D = 0: every score is 0 */
  a.causal = k->node->i[0] != 0;
  return a;
}

/* Offset of head bh's first row in layout l. */
static inline int64_t attn_head(const attn_dims *a, const attn_lay *l, int64_t bh) {
  return bh / a->H * l->sb + bh % a->H * l->sh;
}

/* Keys a query at t may see: s <= t when causal. */
static int64_t attn_keys(const attn_dims *a, int64_t t) {
  return a->causal ? min64(a->S, t + 1) : a->S;
}

static inline float dotf(const float *a, const float *b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

/* p[j] = softmax_j(scale q.k_j) over the visible keys (K: key 0 of the head); returns the
   log-sum-exp, which the backward pass uses to rebuild the same probabilities one key at
   a time. */
static float attn_probs(const attn_dims *a, const float *q, const float *K, float *p,
                        int64_t ns) {
  float m = -INFINITY;
  for (int64_t j = 0; j < ns; j++) {
    p[j] = dotf(q, K + j * a->k.sr, a->D) * a->scale;
    m = p[j] > m ? p[j] : m;
  }
  double s = 0;
  for (int64_t j = 0; j < ns; j++) s += expf(p[j] - m);
  float lse = m + (float)log(s);
  for (int64_t j = 0; j < ns; j++) p[j] = expf(p[j] - lse);
  return lse;
}

static void attn_fwd_row(const attn_dims *a, const float *q, const float *K, const float *V,
                         float *o, float *lse, float *p, int64_t t) {
  int64_t ns = attn_keys(a, t);
  *lse = ns ? attn_probs(a, q, K, p, ns) : 0.f; /* never read; finite for check_finite */
  memset(o, 0, (size_t)a->D * sizeof(float));
  for (int64_t j = 0; j < ns; j++) {
    const float *v = V + j * a->k.sr;
    for (int64_t d = 0; d < a->D; d++) o[d] += p[j] * v[d];
  }
}

/* Per-thread scratch of `per` floats; NULL (and k->msg set) when memory ran out. */
static float *thread_scratch(rg_kargs *k, int nt, int64_t per) {
  float *s = rg__malloc(k->ctx, (size_t)nt * (size_t)(per ? per : 1) * sizeof(float));
  if (!s) snprintf(k->msg, k->msgcap, "out of host memory for attention scratch");
  return s;
}

/* Both forward ops: one query row per iteration. */
static rg_status attn_forward(rg_kargs *k) {
  attn_io io;
  attn_dims a = attn_shape(k, &io);
  int nt = nthreads(k);
  int64_t rows = a.BH * a.T;
  /* Empty tensors bound no size: with no rows, or D = 0, S may be anything (a scratch row
     of S floats, or a loop over S keys, could be astronomically large). With D = 0 every
     score is 0, o is empty and lse is log(visible keys), as the loop would compute it. */
  if (rows == 0) return RG_OK;
  if (a.D == 0) {
    for (int64_t r = 0; r < rows; r++) {
      int64_t ns = attn_keys(&a, r % a.T);
      io.lse[r] = ns ? (float)log((double)ns) : 0.f;
    }
    return RG_OK;
  }
  float *scratch = thread_scratch(k, nt, a.S);
  if (!scratch) return RG_ERR_OOM;
  bool par = rows * a.S * a.D > PAR_MIN;
  (void)par; /* read only by OpenMP pragmas */
#pragma omp parallel num_threads(nt) if(par)
  {
    float *p = scratch + (int64_t)thread_id() * a.S;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      int64_t bh = r / a.T, t = r % a.T, kv = attn_head(&a, &a.k, bh);
      attn_fwd_row(&a, io.q + attn_head(&a, &a.q, bh) + t * a.q.sr, io.k + kv, io.v + kv,
                   io.o + attn_head(&a, &a.o, bh) + t * a.o.sr, io.lse + r, p, t);
    }
  }
  rg__free(k->ctx, scratch);
  return RG_OK;
}

rg_status rg_cpu_attention(rg_kargs *k) { return attn_forward(k); }
rg_status rg_cpu_attention_qkv(rg_kargs *k) { return attn_forward(k); }

/* Pass 1, one query row: dq = scale sum_j ds_j k_j with ds_j = p_j (g.v_j - delta), where
   delta = sum_j p_j g.v_j (= g.o), p_j = exp(scale q.k_j - lse) from the forward's lse.
   delta is saved so pass 2 can rebuild p and ds one key at a time. p and dp are S-float
   scratch rows. */
static void attn_bwd_query(const attn_dims *a, const float *q, const float *K, const float *V,
                           const float *g, float *dq, float *p, float *dp, int64_t t,
                           float lse, float *delta) {
  int64_t ns = attn_keys(a, t);
  double dl = 0;
  for (int64_t j = 0; j < ns; j++) {
    p[j] = expf(dotf(q, K + j * a->k.sr, a->D) * a->scale - lse);
    dp[j] = dotf(g, V + j * a->k.sr, a->D);
    dl += (double)p[j] * dp[j];
  }
  *delta = (float)dl;
  if (!dq) return;
  memset(dq, 0, (size_t)a->D * sizeof(float));
  for (int64_t j = 0; j < ns; j++) {
    float ds = p[j] * (dp[j] - *delta) * a->scale;
    const float *kr = K + j * a->k.sr;
    for (int64_t d = 0; d < a->D; d++) dq[d] += ds * kr[d];
  }
}

/* Pass 2, one key row: dk = scale sum_t ds_t q_t and dv = sum_t p_t g_t over the queries
   that see this key (t >= s when causal); Q and G are query 0 of the head. Either output
   may be unwanted (NULL). */
static void attn_bwd_key(const attn_dims *a, const float *Q, const float *k, const float *v,
                         const float *G, const float *lse, const float *delta, float *dk,
                         float *dv, int64_t s) {
  if (dk) memset(dk, 0, (size_t)a->D * sizeof(float));
  if (dv) memset(dv, 0, (size_t)a->D * sizeof(float));
  for (int64_t t = a->causal ? s : 0; t < a->T; t++) {
    const float *q = Q + t * a->q.sr, *g = G + t * a->o.sr;
    float p = expf(dotf(q, k, a->D) * a->scale - lse[t]);
    if (dk) {
      float ds = p * (dotf(g, v, a->D) - delta[t]) * a->scale;
      for (int64_t d = 0; d < a->D; d++) dk[d] += ds * q[d];
    }
    if (dv)
      for (int64_t d = 0; d < a->D; d++) dv[d] += p * g[d];
  }
}

/* Both backward ops. */
static rg_status attn_backward(rg_kargs *k) {
  attn_io io;
  attn_dims a = attn_shape(k, &io);
  int nt = nthreads(k);
  int64_t qrows = a.BH * a.T, krows = a.BH * a.S;
  if (a.BH == 0 || a.D == 0) return RG_OK; /* every gradient is empty (see attn_forward) */
  /* per thread a p and a dp row, then delta per query row */
  float *scratch = thread_scratch(k, 1, (int64_t)nt * 2 * a.S + qrows);
  if (!scratch) return RG_ERR_OOM;
  const float *lse = io.lse;
  float *delta = scratch + (int64_t)nt * 2 * a.S;
  bool par = qrows * a.S * a.D > PAR_MIN;
  (void)par; /* read only by OpenMP pragmas */
#pragma omp parallel num_threads(nt) if(par)
  {
    float *p = scratch + (int64_t)thread_id() * 2 * a.S, *dp = p + a.S;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < qrows; r++) {
      int64_t bh = r / a.T, t = r % a.T, kv = attn_head(&a, &a.k, bh);
      int64_t qo = attn_head(&a, &a.q, bh) + t * a.q.sr;
      attn_bwd_query(&a, io.q + qo, io.k + kv, io.v + kv,
                     io.g + attn_head(&a, &a.o, bh) + t * a.o.sr, io.dq ? io.dq + qo : NULL,
                     p, dp, t, lse[r], delta + r);
    }
  }
  if (io.dk || io.dv) {
#pragma omp parallel for num_threads(nt) if(par) schedule(static)
    for (int64_t r = 0; r < krows; r++) {
      int64_t bh = r / a.S, s = r % a.S, ko = attn_head(&a, &a.k, bh) + s * a.k.sr;
      attn_bwd_key(&a, io.q + attn_head(&a, &a.q, bh), io.k + ko, io.v + ko,
                   io.g + attn_head(&a, &a.o, bh), lse + bh * a.T, delta + bh * a.T,
                   io.dk ? io.dk + ko : NULL, io.dv ? io.dv + ko : NULL, s);
    }
  }
  rg__free(k->ctx, scratch);
  return RG_OK;
}

rg_status rg_cpu_attention_bwd(rg_kargs *k) { return attn_backward(k); }
rg_status rg_cpu_attention_qkv_bwd(rg_kargs *k) { return attn_backward(k); }

/* ---- cross-entropy and mse ------------------------------------------------------------- */

typedef struct ce_view {
  const float *x;
  const int32_t *tg;
  int64_t N, C;
  bool has_ignore;
  int64_t ignore;
} ce_view;

static ce_view ce_shape(const rg_kargs *k) {
  ce_view v;
  v.x = k->in[0].p;
  v.tg = k->in[1].p;
  v.C = last_dim(&k->in[0]);
  v.N = k->in[1].n; /* one target per row, also when C == 0 */
  v.has_ignore = k->node->i[0] != 0;
  v.ignore = k->node->i[1];
  return v;
}

static bool ce_ignored(const ce_view *v, int64_t r) {
  return v->has_ignore && v->tg[r] == v->ignore;
}

/* Counts the rows that take part; fails on the first target outside [0, C). */
static rg_status ce_check(rg_kargs *k, const ce_view *v, int64_t *count) {
  *count = 0;
  for (int64_t r = 0; r < v->N; r++) {
    if (ce_ignored(v, r)) continue;
    if (v->tg[r] < 0 || v->tg[r] >= v->C) {
      snprintf(k->msg, k->msgcap,
               "target %d at position %lld is outside [0, %lld): class ids must be < the "
               "logits' last dimension (%lld)%s",
               (int)v->tg[r], (long long)r, (long long)v->C, (long long)v->C,
               v->has_ignore ? "" : "; use rg_cross_entropy_ignore to skip padding targets");
      return RG_ERR_MISUSE;
    }
    (*count)++;
  }
  return RG_OK;
}

/* -log softmax(x)[t] for one row: max + log sum exp(x - max) - x[t], the exp sum taken in
   double; st gets the max and the log of the sum. */
static double ce_row(const float *x, int64_t C, int32_t t, float *st) {
  float m = row_max(x, C);
  double s = 0;
  for (int64_t c = 0; c < C; c++) s += expf(x[c] - m);
  st[0] = m;
  st[1] = (float)log(s);
  return (double)m + log(s) - x[t];
}

/* Writes the row statistics (ops.h) and the mean of -log softmax(x)[t] = max + log sum
   exp(x - max) - x[t] over the rows that take part. */
rg_status rg_cpu_cross_entropy(rg_kargs *k) {
  ce_view v = ce_shape(k);
  int64_t count;
  rg_status st = ce_check(k, &v, &count);
  if (st != RG_OK) return st;
  float *stats = k->out[1].p;
  double part[MAX_CHUNKS];
  int64_t nchunk = min64(MAX_CHUNKS, v.N), csize = nchunk ? (v.N + nchunk - 1) / nchunk : 0;
#pragma omp parallel for num_threads(nthreads(k)) if(v.N * v.C > PAR_MIN) schedule(static)
  for (int64_t c = 0; c < nchunk; c++) {
    double s = 0;
    for (int64_t r = c * csize; r < min64(v.N, (c + 1) * csize); r++) {
      float *sr = stats + 2 * r;
      sr[0] = sr[1] = 0.f;
      if (!ce_ignored(&v, r)) s += ce_row(v.x + r * v.C, v.C, v.tg[r], sr);
    }
    part[c] = s;
  }
  double total = 0;
  for (int64_t c = 0; c < nchunk; c++) total += part[c];
  stats[2 * v.N] = (float)count;
  stats[2 * v.N + 1] = 0.f;
  ((float *)k->out[0].p)[0] = count ? (float)(total / (double)count) : 0.f;
  if (!k->out[2].p) return RG_OK;
  rg_kargs b; /* the fused backward (ops.h): the rows again, warm in the cache */
  rg__xent_bwd_args(k, &b);
  return rg_cpu_cross_entropy_bwd(&b);
}

/* dlogits = (exp(x - max - lse) - onehot(t)) * g / count from the forward's row
   statistics: one read of the logits, no separate softmax. */
rg_status rg_cpu_cross_entropy_bwd(rg_kargs *k) {
  ce_view v = ce_shape(k);
  int64_t count;
  rg_status st = ce_check(k, &v, &count);
  if (st != RG_OK) return st;
  float *dx = k->out[0].p;
  const float *stats = k->in[3].p;
  float coef = count ? ((const float *)k->in[2].p)[0] / (float)count : 0.f;
#pragma omp parallel for num_threads(nthreads(k)) if(v.N * v.C > PAR_MIN) schedule(static)
  for (int64_t r = 0; r < v.N; r++) {
    float *d = dx + r * v.C;
    if (ce_ignored(&v, r)) {
      memset(d, 0, (size_t)v.C * sizeof(float));
      continue;
    }
    const float *x = v.x + r * v.C, m = stats[2 * r], ls = stats[2 * r + 1];
    for (int64_t c = 0; c < v.C; c++) d[c] = expf((x[c] - m) - ls) * coef;
    d[v.tg[r]] -= coef;
  }
  return RG_OK;
}

rg_status rg_cpu_mse(rg_kargs *k) {
  const float *p = k->in[0].p, *t = k->in[1].p;
  int64_t n = k->in[0].n;
  double part[MAX_CHUNKS];
  int64_t nchunk = min64(MAX_CHUNKS, (n + PAR_MIN - 1) / PAR_MIN);
  if (nchunk < 1) nchunk = 1;
  int64_t csize = (n + nchunk - 1) / nchunk;
#pragma omp parallel for num_threads(nthreads(k)) if(nchunk > 1) schedule(static)
  for (int64_t c = 0; c < nchunk; c++) {
    double s = 0;
    for (int64_t i = c * csize; i < min64(n, (c + 1) * csize); i++) {
      double d = (double)p[i] - t[i];
      s += d * d;
    }
    part[c] = s;
  }
  double total = 0;
  for (int64_t c = 0; c < nchunk; c++) total += part[c];
  ((float *)k->out[0].p)[0] = (float)(total / (double)n); /* n == 0: NaN, as mean */
  return RG_OK;
}
