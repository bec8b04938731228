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

/* What norm_fwd and norm_bwd hand their bodies. */
typedef struct {
  const float *x, *gamma, *beta, *g, *dx_in;
  float *y, *dx, *dx16, *dgamma, *dbeta;
  norm_stats *st;
  int64_t R, C;
  double eps;
  bool centre, addg, addb;
} norm_job;

static void norm_fwd_range(void *a, int64_t lo, int64_t hi, int slot) {
  const norm_job *j = a;
  (void)slot;
  for (int64_t r = lo; r < hi; r++)
    norm_fwd_row(j->x + r * j->C, j->gamma, j->beta, j->y + r * j->C, j->C, j->eps, j->centre);
}

static rg_status norm_fwd(rg_kargs *k, bool centre) {
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
  norm_job j = {.x = k->in[0].p, .gamma = k->in[1].p, .beta = centre ? k->in[2].p : NULL,
                .y = k->out[0].p, .C = C, .eps = k->node->f[0], .centre = centre};
  rg_cpu_for(R, par_threads(k, k->in[0].n > PAR_MIN), norm_fwd_range, &j);
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

/* Rows [lo, hi): their statistics (kept for the parameters' gradients) and dx. */
static void norm_dx_range(void *a, int64_t lo, int64_t hi, int slot) {
  const norm_job *j = a;
  int64_t C = j->C;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    norm_stats s = row_stats(j->x + r * C, C, j->eps, j->centre);
    if (j->st) j->st[r] = s;
    if (!j->dx) continue;
    float *dx = j->dx;
    norm_dx_row(j->x + r * C, j->gamma, j->g + r * C, dx + r * C, C, s, j->centre);
    for (int64_t c = 0; j->dx_in && c < C; c++) dx[r * C + c] += j->dx_in[r * C + c];
    if (j->dx16) memcpy(j->dx16 + r * C, dx + r * C, (size_t)C * sizeof *dx); /* rounded later */
  }
}

/* Column blocks [lo, hi) of CB columns of dgamma and dbeta. */
static void norm_dparam_range(void *a, int64_t lo, int64_t hi, int slot) {
  const norm_job *j = a;
  (void)slot;
  for (int64_t b = lo; b < hi; b++)
    norm_dparam_block(j->x, j->g, j->st, j->R, j->C, b * CB, min64(CB, j->C - b * CB), j->dgamma,
                      j->dbeta, j->addg, j->addb);
}

/* dgamma (dbeta) goes to in[3] (in[4]) when rg_backward folded it there, else out[1]
   (out[2]): see ops.h. */
static rg_status norm_bwd(rg_kargs *k, bool centre) {
  bool addg = k->in[3].p != NULL, addb = centre && k->in[4].p != NULL;
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
  if (C == 0) return RG_OK; /* dx, dgamma and dbeta are all empty */
  norm_job j = {.x = k->in[0].p, .gamma = k->in[1].p, .g = k->in[2].p,
                .dx_in = k->in[5].p,   /* added into dx (a folded gradient sum, ops.h) */
                .dx = k->out[0].p,
                .dx16 = k->out[3].p,   /* run_widened's F32 view of the BF16 copy of dx */
                .dgamma = addg ? k->in[3].p : k->out[1].p,
                .dbeta = !centre ? NULL : addb ? k->in[4].p : k->out[2].p,
                .R = R, .C = C, .eps = k->node->f[0], .centre = centre, .addg = addg,
                .addb = addb};
  int par = par_threads(k, k->in[0].n > PAR_MIN);
  bool params = j.dgamma || j.dbeta;
  if (params) {
    j.st = rg__malloc(k->ctx, (size_t)(R ? R : 1) * sizeof(*j.st));
    if (!j.st) {
      snprintf(k->msg, k->msgcap, "out of host memory for %lld row statistics",
               (long long)R);
      return RG_ERR_OOM;
    }
  }
  rg_cpu_for(R, par, norm_dx_range, &j);
  if (params) {
    rg_cpu_for((C + CB - 1) / CB, par, norm_dparam_range, &j);
    rg__free(k->ctx, j.st);
  }
  return RG_OK;
}

rg_status rg_cpu_layernorm_bwd(rg_kargs *k) { return norm_bwd(k, true); }
rg_status rg_cpu_rmsnorm_bwd(rg_kargs *k) { return norm_bwd(k, false); }
