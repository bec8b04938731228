/*
 * norms.c - CPU kernels: layernorm (also fused with the residual add) and rmsnorm, and their backward. The row kernels' invariants are in rows.h.
 */
#include "rows.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
