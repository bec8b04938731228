/*
 * norms.c - CPU kernels: layernorm (also fused with the residual add) and rmsnorm, and
 * their backward. The row kernels' invariants are in rows.h; the rows' arithmetic is
 * vec.h's (sums of a row in double lanes, elements in float).
 */
#include "rows.h"
#include "vec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- layernorm and rmsnorm ------------------------------------------------------------- */
/* Both normalise xhat = (x - mu) * rstd with rstd = 1/sqrt(mean((x-mu)^2) + eps); rmsnorm
   is the case mu = 0 with no beta, so one set of row functions serves both. */

typedef struct norm_stats { float mu, rstd; } norm_stats;

/* The mean in double, rounded to the float mu the row is centred on; the variance of the
   values centred on that mu, less the shift's share (mu - mu_double)^2 (the cross term of
   the square is zero), so the rounding of mu costs the variance nothing. */
static norm_stats row_stats(const rg_vec_ops *v, const float *x, int64_t C, double eps,
                            bool centre) {
  double mu = centre ? v->sum(x, C) / (double)C : 0.0;
  float muf = (float)mu;
  double shift = (double)muf - mu;
  double var = v->sqdev(x, muf, C) / (double)C - shift * shift;
  return (norm_stats){muf, (float)(1.0 / sqrt((var > 0 ? var : 0) + eps))};
}

/* What the kernels below hand their bodies. */
typedef struct {
  const rg_vec_ops *v;
  const float *x, *gamma, *beta, *g, *dx_in, *a, *b;
  float *y, *s, *dx, *dx16, *dgamma, *dbeta;
  double *part; /* per row chunk: Cp sums of dgamma, then Cp of dbeta */
  int64_t R, C, Cp, rows; /* rows: a chunk's rows (the last one may have fewer) */
  double eps;
  bool centre;
} norm_job;

static void norm_fwd_range(void *a, int64_t lo, int64_t hi, int slot) {
  const norm_job *j = a;
  int64_t C = j->C;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    const float *x;
    if (j->s) { /* add+layernorm: s = a + b first, the float add of ADD */
      float *s = j->s + r * C;
      const float *pa = j->a + r * C, *pb = j->b + r * C;
      for (int64_t c = 0; c < C; c++) s[c] = pa[c] + pb[c];
      x = s;
    } else {
      x = j->x + r * C;
    }
    norm_stats st = row_stats(j->v, x, C, j->eps, j->centre);
    j->v->norm(x, st.mu, st.rstd, j->gamma, j->beta, j->y + r * C, C);
  }
}

static rg_status norm_fwd(rg_kargs *k, bool centre) {
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
  norm_job j = {.v = rg_cpu_vec(), .x = k->in[0].p, .gamma = k->in[1].p,
                .beta = centre ? k->in[2].p : NULL, .y = k->out[0].p, .C = C,
                .eps = k->node->f[0], .centre = centre};
  rg_cpu_for(R, par_threads(k, k->in[0].n > PAR_MIN), norm_fwd_range, &j);
  return RG_OK;
}

rg_status rg_cpu_layernorm(rg_kargs *k) { return norm_fwd(k, true); }
rg_status rg_cpu_rmsnorm(rg_kargs *k) { return norm_fwd(k, false); }

/* s = a + b, then y = layernorm(s) (ops.h), a row at a time: the row's sum is normalised
   while in cache, with the bits of the ADD and LAYERNORM kernels in turn. a and b have
   out[0]'s shape (the backend widened any BF16 one). */
rg_status rg_cpu_add_layernorm(rg_kargs *k) {
  int64_t C = last_dim(&k->out[0]), R = C ? k->out[0].n / C : 0;
  norm_job j = {.v = rg_cpu_vec(), .a = k->in[0].p, .b = k->in[1].p, .gamma = k->in[2].p,
                .beta = k->in[3].p, .s = k->out[0].p, .y = k->out[1].p, .C = C,
                .eps = k->node->f[0], .centre = true};
  rg_cpu_for(R, par_threads(k, k->out[0].n > PAR_MIN), norm_fwd_range, &j);
  return RG_OK;
}

/* o[c] = v, or o[c] += v (a folded gradient, ops.h): the float add of the ACCUM it
   replaces, so folding changes no bit. */
static inline void put_param(float *o, int64_t c, double v, bool add) {
  o[c] = add ? o[c] + (float)v : (float)v;
}

/* Rows per chunk of the backward: at least NORM_ROWS, at most MAX_CHUNKS chunks; fixed by
   R alone, so the parameters' sums (chunk partials added in chunk order) do not depend on
   the thread count. */
#define NORM_ROWS 16
/* Rows whose terms of dgamma and dbeta are summed in float before they are added in
   double (vec.h's norm_dparam): few enough to cost the sums only a few roundings, and
   still in cache from their dx. */
#define NORM_GROUP 8

/* Row chunks [lo, hi): each row's statistics and dx, and, when the parameters' gradients
   are wanted, the chunk's sums of g xhat and g per column (its slice of part), a group of
   rows at a time after their dx, while x and g are in cache. */
static void norm_bwd_range(void *a, int64_t lo, int64_t hi, int slot) {
  const norm_job *j = a;
  int64_t C = j->C;
  (void)slot;
  for (int64_t ch = lo; ch < hi; ch++) {
    double *ag = NULL, *ab = NULL;
    if (j->part) {
      ag = j->part + 2 * ch * j->Cp, ab = ag + j->Cp;
      memset(ag, 0, 2 * (size_t)j->Cp * sizeof *ag);
      if (!j->dgamma) ag = NULL;
      if (!j->dbeta) ab = NULL;
    }
    int64_t end = min64(j->R, (ch + 1) * j->rows);
    for (int64_t r0 = ch * j->rows; r0 < end; r0 += NORM_GROUP) {
      int64_t nr = min64(NORM_GROUP, end - r0);
      float mu[NORM_GROUP], rstd[NORM_GROUP];
      for (int64_t r = r0; r < r0 + nr; r++) {
        const float *x = j->x + r * C, *g = j->g + r * C;
        norm_stats s = row_stats(j->v, x, C, j->eps, j->centre);
        mu[r - r0] = s.mu, rstd[r - r0] = s.rstd;
        if (!j->dx) continue;
        j->v->norm_dx(x, j->gamma, g, j->dx_in ? j->dx_in + r * C : NULL, s.mu, s.rstd,
                      j->centre, j->dx + r * C, C);
        if (j->dx16) /* rounded later */
          memcpy(j->dx16 + r * C, j->dx + r * C, (size_t)C * sizeof *j->dx);
      }
      if (ag || ab)
        j->v->norm_dparam(j->x + r0 * C, j->g + r0 * C, C, mu, rstd, nr, ag, ab, C);
    }
  }
}

/* dgamma (dbeta) goes to in[3] (in[4]) when rg_backward folded it there, else out[1]
   (out[2]): see ops.h. */
static rg_status norm_bwd(rg_kargs *k, bool centre) {
  bool addg = k->in[3].p != NULL, addb = centre && k->in[4].p != NULL;
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
  if (C == 0) return RG_OK; /* dx, dgamma and dbeta are all empty */
  int64_t rows = (R + MAX_CHUNKS - 1) / MAX_CHUNKS;
  if (rows < NORM_ROWS) rows = NORM_ROWS;
  int64_t nch = (R + rows - 1) / rows;
  norm_job j = {.v = rg_cpu_vec(), .x = k->in[0].p, .gamma = k->in[1].p, .g = k->in[2].p,
                .dx_in = k->in[5].p,   /* added into dx (a folded gradient sum, ops.h) */
                .dx = k->out[0].p,
                .dx16 = k->out[3].p,   /* run_widened's F32 view of the BF16 copy of dx */
                .dgamma = addg ? k->in[3].p : k->out[1].p,
                .dbeta = !centre ? NULL : addb ? k->in[4].p : k->out[2].p,
                .R = R, .C = C, .Cp = (C + 15) / 16 * 16, .rows = rows,
                .eps = k->node->f[0], .centre = centre};
  if (j.dgamma || j.dbeta) { /* R == 0 too: the sums are then zeroes */
    j.part = rg__malloc(k->ctx, (size_t)nch * 2 * (size_t)j.Cp * sizeof *j.part);
    if (!j.part) {
      snprintf(k->msg, k->msgcap, "out of host memory for the partial sums of dgamma and "
               "dbeta (%lld chunks of %lld columns); free memory or use smaller batches",
               (long long)nch, (long long)C);
      return RG_ERR_OOM;
    }
  }
  rg_cpu_for(nch, par_threads(k, k->in[0].n > PAR_MIN), norm_bwd_range, &j);
  if (j.part) {
    for (int64_t c = 0; c < C; c++) {
      double sg = 0, sb = 0;
      for (int64_t ch = 0; ch < nch; ch++) {
        sg += j.part[2 * ch * j.Cp + c];
        sb += j.part[(2 * ch + 1) * j.Cp + c];
      }
      if (j.dgamma) put_param(j.dgamma, c, sg, addg);
      if (j.dbeta) put_param(j.dbeta, c, sb, addb);
    }
    rg__free(k->ctx, j.part);
  }
  return RG_OK;
}

rg_status rg_cpu_layernorm_bwd(rg_kargs *k) { return norm_bwd(k, true); }
rg_status rg_cpu_rmsnorm_bwd(rg_kargs *k) { return norm_bwd(k, false); }
