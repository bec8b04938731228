/*
 * reduce.c - CPU reductions and their companions: sum, mean, max, argmax over one axis or
 * all axes, max's backward, sum_to (the gradient of a broadcast operand) and expand (the
 * broadcast itself).
 *
 * Invariants:
 *  - A one-axis reduction sees x as [outer, len, inner] and writes out as [outer, inner];
 *    keepdim only changes out's shape, never this layout. i[0] < 0 means all axes.
 *  - Sums accumulate in double, each output in a fixed order that depends only on the
 *    shapes (never on the thread count), so results are identical for any thread count.
 *  - Max and argmax take the first maximum; a NaN counts as larger than any number (the
 *    first NaN wins), as in PyTorch.
 *  - Zero-size tensors are legal: a sum over nothing is 0, a mean over nothing is NaN
 *    (0/0, as in PyTorch), and the maximum of nothing fails instead of reading past x.
 */
#include <stdio.h>
#include "cpu.h"

#include <string.h>

/* Inner-axis block: one double accumulator per column on the stack (2 KB), so a
   reduction over a leading axis streams whole rows instead of striding down columns. */
#define RB 256
/* Below this many input elements a reduction runs on one thread. */
#define PAR_MIN 32768
/* An all-axes sum splits into at most this many fixed chunks (partials on the stack). */
#define MAX_CHUNKS 64


typedef struct span3 { int64_t outer, len, inner; } span3;

static span3 split_axis(const rg_tv *x, int64_t axis) {
  span3 s = {1, x->n, 1};
  if (axis < 0 || x->ndim == 0) return s;
  s.len = x->dims[axis];
  for (int64_t a = 0; a < axis; a++) s.outer *= x->dims[a];
  for (int64_t a = axis + 1; a < x->ndim; a++) s.inner *= x->dims[a];
  return s;
}

typedef struct {
  const float *x;
  int64_t n, csize;
  double *part;
} det_sum_job;
static void det_sum_range(void *a, int64_t lo, int64_t hi, int slot) {
  const det_sum_job *j = a;
  (void)slot;
  for (int64_t c = lo; c < hi; c++) {
    double s = 0;
    int64_t end = min64(j->n, (c + 1) * j->csize);
    for (int64_t i = c * j->csize; i < end; i++) s += j->x[i];
    j->part[c] = s;
  }
}

/* Sum of n floats in double. The chunking depends only on n, so the rounding does too. */
static double det_sum(const float *x, int64_t n, int threads) {
  double part[MAX_CHUNKS];
  int64_t nchunk = min64(MAX_CHUNKS, (n + PAR_MIN - 1) / PAR_MIN);
  if (nchunk < 1) nchunk = 1;
  int64_t csize = (n + nchunk - 1) / nchunk;
  rg_cpu_for(nchunk, threads, det_sum_range, &(det_sum_job){x, n, csize, part});
  double s = 0;
  for (int64_t c = 0; c < nchunk; c++) s += part[c];
  return s;
}

/* ---- sum and mean --------------------------------------------------------------------- */

/* One block of columns [i0, i0+nb) of outer slice o, summed over len. */
static void sum_block(const float *x, span3 s, int64_t o, int64_t i0, int64_t nb, double div,
                      float *out) {
  double acc[RB] = {0};
  for (int64_t l = 0; l < s.len; l++) {
    const float *row = x + (o * s.len + l) * s.inner + i0;
    for (int64_t j = 0; j < nb; j++) acc[j] += row[j];
  }
  for (int64_t j = 0; j < nb; j++) out[o * s.inner + i0 + j] = (float)(acc[j] / div);
}

typedef struct {
  const float *x;
  float *out;
  span3 s;
  int64_t nblk;
  double div;
} sum_job;
static void sum_range(void *a, int64_t lo, int64_t hi, int slot) {
  const sum_job *j = a;
  (void)slot;
  for (int64_t w = lo; w < hi; w++) {
    int64_t i0 = (w % j->nblk) * RB;
    sum_block(j->x, j->s, w / j->nblk, i0, min64(RB, j->s.inner - i0), j->div, j->out);
  }
}

static rg_status sum_mean(rg_kargs *k, bool mean) {
  const rg_tv *x = &k->in[0];
  const float *px = x->p;
  float *po = k->out[0].p;
  span3 s = split_axis(x, k->node->i[0]);
  if (s.outer * s.inner == 1) { /* one output: spread the single sum over threads */
    double t = det_sum(px, x->n, nthreads(k));
    po[0] = (float)(mean ? t / (double)x->n : t);
    return RG_OK;
  }
  double div = mean ? (double)s.len : 1.0;
  int64_t nblk = (s.inner + RB - 1) / RB, work = s.outer * nblk;
  rg_cpu_for(work, par_threads(k, x->n > PAR_MIN), sum_range,
             &(sum_job){px, po, s, nblk, div});
  return RG_OK;
}

rg_status rg_cpu_sum(rg_kargs *k) { return sum_mean(k, false); }
rg_status rg_cpu_mean(rg_kargs *k) { return sum_mean(k, true); }

/* ---- max, argmax and max's backward ---------------------------------------------------- */

static inline bool beats(float v, float best) {
  return v > best || (v != v && best == best);
}

/* First arg-max along len for columns [i0, i0+nb) of slice o. */
static void argmax_block(const float *x, span3 s, int64_t o, int64_t i0, int64_t nb,
                         int64_t *arg) {
  float best[RB];
  const float *row0 = x + o * s.len * s.inner + i0;
  for (int64_t j = 0; j < nb; j++) {
    best[j] = row0[j];
    arg[j] = 0;
  }
  for (int64_t l = 1; l < s.len; l++) {
    const float *row = row0 + l * s.inner;
    for (int64_t j = 0; j < nb; j++) {
      if (beats(row[j], best[j])) {
        best[j] = row[j];
        arg[j] = l;
      }
    }
  }
}

enum { M_MAX, M_ARGMAX, M_BWD };

static void max_item(rg_kargs *k, int mode, span3 s, int64_t o, int64_t i0, int64_t nb) {
  const float *x = k->in[0].p;
  int64_t arg[RB];
  argmax_block(x, s, o, i0, nb, arg);
  for (int64_t j = 0; j < nb; j++) {
    int64_t oi = o * s.inner + i0 + j;                  /* output (and g) index */
    int64_t xi = (o * s.len + arg[j]) * s.inner + i0 + j; /* x index of the maximum */
    if (mode == M_MAX)
      ((float *)k->out[0].p)[oi] = x[xi];
    else if (mode == M_ARGMAX)
      ((int32_t *)k->out[0].p)[oi] = (int32_t)arg[j];
    else
      ((float *)k->out[0].p)[xi] = ((const float *)k->in[1].p)[oi];
  }
}

typedef struct {
  rg_kargs *k;
  int mode;
  span3 s;
  int64_t nblk;
} max_job;
static void max_range(void *a, int64_t lo, int64_t hi, int slot) {
  const max_job *j = a;
  (void)slot;
  for (int64_t w = lo; w < hi; w++) {
    int64_t i0 = (w % j->nblk) * RB;
    max_item(j->k, j->mode, j->s, w / j->nblk, i0, min64(RB, j->s.inner - i0));
  }
}

static rg_status max_common(rg_kargs *k, int mode) {
  span3 s = split_axis(&k->in[0], k->node->i[0]);
  if (mode == M_BWD) memset(k->out[0].p, 0, (size_t)k->out[0].n * sizeof(float));
  if (s.outer * s.inner == 0) return RG_OK; /* nothing to write */
  if (s.len == 0) {
    snprintf(k->msg, k->msgcap,
             "the maximum over an empty axis is undefined: reduce over an axis of size > 0");
    return RG_ERR_MISUSE;
  }
  int64_t nblk = (s.inner + RB - 1) / RB, work = s.outer * nblk;
  rg_cpu_for(work, par_threads(k, k->in[0].n > PAR_MIN), max_range,
             &(max_job){k, mode, s, nblk});
  return RG_OK;
}

rg_status rg_cpu_max(rg_kargs *k) { return max_common(k, M_MAX); }
rg_status rg_cpu_argmax(rg_kargs *k) { return max_common(k, M_ARGMAX); }
rg_status rg_cpu_max_bwd(rg_kargs *k) { return max_common(k, M_BWD); }

/* ---- sum_to ---------------------------------------------------------------------------- */

/* x's axes of size > 1, split into those out keeps and those it sums away. */
typedef struct axset {
  int n;
  int64_t size[RG_MAX_DIMS], stride[RG_MAX_DIMS];
} axset;

static void axset_push(axset *s, int64_t size, int64_t stride) {
  s->size[s->n] = size;
  s->stride[s->n] = stride;
  s->n++;
}

/* x offset of the idx-th element of the row-major walk over s's axes. */
static int64_t axset_offset(const axset *s, int64_t idx) {
  int64_t off = 0;
  for (int a = s->n - 1; a >= 0; a--) {
    off += (idx % s->size[a]) * s->stride[a];
    idx /= s->size[a];
  }
  return off;
}

static int64_t axset_count(const axset *s) {
  int64_t c = 1;
  for (int a = 0; a < s->n; a++) c *= s->size[a];
  return c;
}

static void split_kept(const rg_tv *x, const rg_tv *out, axset *kept, axset *red) {
  int lead = x->ndim - out->ndim;
  int64_t stride = 1;
  int64_t st[RG_MAX_DIMS];
  for (int a = x->ndim - 1; a >= 0; a--) {
    st[a] = stride;
    stride *= x->dims[a];
  }
  kept->n = red->n = 0;
  for (int a = 0; a < x->ndim; a++) {
    if (x->dims[a] == 1) continue;
    bool keep = a - lead >= 0 && out->dims[a - lead] == x->dims[a];
    axset_push(keep ? kept : red, x->dims[a], st[a]);
  }
}

/* o[i] = v, or o[i] += v for sum_to_acc: the float add an ACCUM after a SUM_TO would do,
   so folding the two changes no bit. */
static inline void put(float *o, int64_t i, double v, bool add) {
  o[i] = add ? o[i] + (float)v : (float)v;
}

/* What sum_to_rows and sum_to_runs hand their bodies. */
typedef struct {
  const float *x;
  float *o;
  const axset *kept, *red;
  int64_t I, nblk, L, rcount;
  bool add;
} sum_to_job;

static void sum_to_rows_range(void *a, int64_t lo, int64_t hi, int slot) {
  const sum_to_job *j = a;
  (void)slot;
  for (int64_t w = lo; w < hi; w++) {
    int64_t kk = w / j->nblk, i0 = (w % j->nblk) * RB, nb = min64(RB, j->I - i0);
    const float *base = j->x + axset_offset(j->kept, kk) + i0;
    double acc[RB] = {0};
    for (int64_t r = 0; r < j->rcount; r++) {
      const float *row = base + axset_offset(j->red, r);
      for (int64_t c = 0; c < nb; c++) acc[c] += row[c];
    }
    for (int64_t c = 0; c < nb; c++) put(j->o, kk * j->I + i0 + c, acc[c], j->add);
  }
}

/* The innermost x axis is kept: out's innermost axis is contiguous in both, so sum whole
   rows of it into a block of double accumulators. */
static void sum_to_rows(const float *x, float *o, axset kept, const axset *red, int threads,
                        bool add) {
  int64_t I = kept.size[kept.n - 1];
  kept.n--; /* the rest index the outer kept positions */
  int64_t ko = axset_count(&kept), nblk = (I + RB - 1) / RB;
  sum_to_job j = {x, o, &kept, red, I, nblk, 0, axset_count(red), add};
  rg_cpu_for(ko * nblk, threads, sum_to_rows_range, &j);
}

static void sum_to_runs_range(void *a, int64_t lo, int64_t hi, int slot) {
  const sum_to_job *j = a;
  (void)slot;
  for (int64_t e = lo; e < hi; e++) {
    const float *base = j->x + axset_offset(j->kept, e);
    double acc = 0;
    for (int64_t r = 0; r < j->rcount; r++) {
      const float *run = base + axset_offset(j->red, r);
      for (int64_t c = 0; c < j->L; c++) acc += run[c];
    }
    put(j->o, e, acc, j->add);
  }
}

/* The innermost x axis is summed away: each output sums contiguous runs of it. */
static void sum_to_runs(const float *x, float *o, const axset *kept, axset red, int threads,
                        bool add) {
  int64_t L = red.size[red.n - 1];
  red.n--;
  sum_to_job j = {x, o, kept, &red, 0, 0, L, axset_count(&red), add};
  rg_cpu_for(axset_count(kept), threads, sum_to_runs_range, &j);
}

/* out = x summed to out's shape, or out += that sum (add). */
static rg_status sum_to(rg_kargs *k, const rg_tv *x, const rg_tv *out, bool add) {
  axset kept, red;
  float *o = out->p;
  if (out->n == 0) return RG_OK;
  if (x->n == 0) { /* every output sums nothing */
    if (!add) memset(o, 0, (size_t)out->n * sizeof(float));
    return RG_OK;
  }
  split_kept(x, out, &kept, &red);
  int par = par_threads(k, x->n > PAR_MIN);
  if (red.n == 0) { /* nothing to sum: the shapes differ only by size-1 axes */
    for (int64_t i = 0; i < x->n; i++) put(o, i, ((const float *)x->p)[i], add);
  } else if (kept.n == 0) {
    put(o, 0, det_sum(x->p, x->n, nthreads(k)), add);
  } else if (kept.stride[kept.n - 1] == 1) {
    sum_to_rows(x->p, o, kept, &red, par, add);
  } else {
    sum_to_runs(x->p, o, &kept, red, par, add);
  }
  return RG_OK;
}

rg_status rg_cpu_sum_to(rg_kargs *k) { return sum_to(k, &k->in[0], &k->out[0], false); }
rg_status rg_cpu_sum_to_acc(rg_kargs *k) { return sum_to(k, &k->in[1], &k->in[0], true); }

/* ---- expand ---------------------------------------------------------------------------- */

typedef struct {
  const rg_tv *o;
  const float *x;
  float *out;
  const int64_t *st;
  int64_t C, sc;
} expand_job;
static void expand_range(void *a, int64_t lo, int64_t hi, int slot) {
  const expand_job *j = a;
  const rg_tv *o = j->o;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    int64_t off = rg_cpu_bcast_offset(o, 1, j->st, r);
    for (int64_t c = 0; c < j->C; c++) j->out[r * j->C + c] = j->x[off + c * j->sc];
  }
}

rg_status rg_cpu_expand(rg_kargs *k) {
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  const float *px = x->p;
  float *po = o->p;
  if (o->n == 0) return RG_OK;
  if (o->ndim == 0 || x->n == o->n) {
    memcpy(po, px, (size_t)o->n * sizeof(float));
    return RG_OK;
  }
  int64_t st[RG_MAX_DIMS], s = 1;
  int lead = o->ndim - x->ndim;
  for (int j = o->ndim - 1; j >= 0; j--) {
    bool bc = j < lead || x->dims[j - lead] == 1;
    st[j] = bc ? 0 : s;
    if (!bc) s *= x->dims[j - lead];
  }
  int64_t C = o->dims[o->ndim - 1], rows = o->n / C, sc = st[o->ndim - 1];
  rg_cpu_for(rows, par_threads(k, o->n > PAR_MIN), expand_range,
             &(expand_job){o, px, po, st, C, sc});
  return RG_OK;
}
