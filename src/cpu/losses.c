/*
 * losses.c - CPU kernels: cross-entropy (with its fused backward), its backward, and mse. The row kernels' invariants are in rows.h.
 */
#include "rows.h"
#include "vec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
  const rg_vec_ops *vo = rg_cpu_vec();
  float m = vo->max(x, C);
  double s = vo->exp_sum(x, m, NULL, C);
  st[0] = m;
  st[1] = (float)log(s);
  return (double)m + log(s) - x[t];
}

/* What the losses hand their bodies. */
typedef struct {
  const ce_view *v;
  float *stats, *dx;
  const float *cstats, *p, *t;
  double *part;
  int64_t n, csize;
  float coef;
} loss_job;

static void ce_range(void *a, int64_t lo, int64_t hi, int slot) {
  const loss_job *j = a;
  const ce_view *v = j->v;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    double s = 0;
    for (int64_t r = c * j->csize; r < min64(v->N, (c + 1) * j->csize); r++) {
      float *sr = j->stats + 2 * r;
      sr[0] = sr[1] = 0.f;
      if (!ce_ignored(v, r)) s += ce_row(v->x + r * v->C, v->C, v->tg[r], sr);
    }
    j->part[c] = s;
  }
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
  rg_cpu_for(nchunk, par_threads(k, v.N * v.C > PAR_MIN), ce_range,
             &(loss_job){.v = &v, .stats = stats, .part = part, .csize = csize});
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

static void ce_bwd_range(void *a, int64_t lo, int64_t hi, int slot) {
  const loss_job *j = a;
  const ce_view *v = j->v;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    float *d = j->dx + r * v->C;
    if (ce_ignored(v, r)) {
      memset(d, 0, (size_t)v->C * sizeof(float));
      continue;
    }
    const float *x = v->x + r * v->C, m = j->cstats[2 * r], ls = j->cstats[2 * r + 1];
    /* exp(x - m - ls) as exp(x - m) exp(-ls): x - m stays exact for large logits */
    rg_cpu_vec()->exp_scale(x, m, j->coef * expf(-ls), d, v->C);
    d[v->tg[r]] -= j->coef;
  }
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
  rg_cpu_for(v.N, par_threads(k, v.N * v.C > PAR_MIN), ce_bwd_range,
             &(loss_job){.v = &v, .dx = dx, .cstats = stats, .coef = coef});
  return RG_OK;
}

static void mse_range(void *a, int64_t lo, int64_t hi, int slot) {
  const loss_job *j = a;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    double s = 0;
    for (int64_t i = c * j->csize; i < min64(j->n, (c + 1) * j->csize); i++) {
      double d = (double)j->p[i] - j->t[i];
      s += d * d;
    }
    j->part[c] = s;
  }
}

rg_status rg_cpu_mse(rg_kargs *k) {
  const float *p = k->in[0].p, *t = k->in[1].p;
  int64_t n = k->in[0].n;
  double part[MAX_CHUNKS];
  int64_t nchunk = min64(MAX_CHUNKS, (n + PAR_MIN - 1) / PAR_MIN);
  if (nchunk < 1) nchunk = 1;
  int64_t csize = (n + nchunk - 1) / nchunk;
  rg_cpu_for(nchunk, nthreads(k), mse_range,
             &(loss_job){.p = p, .t = t, .part = part, .n = n, .csize = csize});
  double total = 0;
  for (int64_t c = 0; c < nchunk; c++) total += part[c];
  ((float *)k->out[0].p)[0] = (float)(total / (double)n); /* n == 0: NaN, as mean */
  return RG_OK;
}
