/*
 * softmax.c - CPU kernels: softmax and log-softmax over the last axis, and their backward. The row kernels' invariants are in rows.h.
 */
#include "rows.h"
#include "vec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- softmax and log-softmax ----------------------------------------------------------- */

static void softmax_row(const float *x, float *y, int64_t C) {
  const rg_vec_ops *vo = rg_cpu_vec();
  double s = vo->exp_sum(x, vo->max(x, C), y, C);
  float inv = (float)(1.0 / s);
  for (int64_t c = 0; c < C; c++) y[c] *= inv;
}

static void log_softmax_row(const float *x, float *y, int64_t C) {
  const rg_vec_ops *vo = rg_cpu_vec();
  float m = vo->max(x, C);
  double s = vo->exp_sum(x, m, NULL, C);
  float lse = (float)log(s);
  for (int64_t c = 0; c < C; c++) y[c] = (x[c] - m) - lse;
}

/* What the four kernels hand their bodies: rows of C. */
typedef struct {
  const rg_kargs *k;
  int64_t C;
  bool log_form;
} softmax_job;

static void softmax_range(void *a, int64_t lo, int64_t hi, int slot) {
  const softmax_job *j = a;
  const float *x = j->k->in[0].p;
  float *y = j->k->out[0].p;
  int64_t C = j->C;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    if (j->log_form)
      log_softmax_row(x + r * C, y + r * C, C);
    else
      softmax_row(x + r * C, y + r * C, C);
  }
}

static rg_status softmax_common(rg_kargs *k, bool log_form) {
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
  rg_cpu_for(R, par_threads(k, k->in[0].n > PAR_MIN), softmax_range,
             &(softmax_job){k, C, log_form});
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
  rg_cpu_vec()->exp_scale(y, 0.f, (float)s, dx, C); /* y <= 0: a log-probability */
  for (int64_t c = 0; c < C; c++) dx[c] = g[c] - dx[c];
}

static void softmax_bwd_range(void *a, int64_t lo, int64_t hi, int slot) {
  const softmax_job *j = a;
  const float *y = j->k->in[0].p, *g = j->k->in[1].p;
  float *dx = j->k->out[0].p;
  int64_t C = j->C;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    if (j->log_form)
      log_softmax_bwd_row(y + r * C, g + r * C, dx + r * C, C);
    else
      softmax_bwd_row(y + r * C, g + r * C, dx + r * C, C);
  }
}

static rg_status softmax_bwd_common(rg_kargs *k, bool log_form) {
  int64_t C = last_dim(&k->in[0]), R = C ? k->in[0].n / C : 0;
  rg_cpu_for(R, par_threads(k, k->in[0].n > PAR_MIN), softmax_bwd_range,
             &(softmax_job){k, C, log_form});
  return RG_OK;
}

rg_status rg_cpu_softmax_bwd(rg_kargs *k) { return softmax_bwd_common(k, false); }
rg_status rg_cpu_log_softmax_bwd(rg_kargs *k) { return softmax_bwd_common(k, true); }
