/*
 * shape.c - CPU kernels that move elements without arithmetic (copy, permute, slice and
 * its backward, concat), plus dropout and dtype casts.
 *
 * Invariants:
 *  - Copy, permute, slice and concat work on raw elements of any dtype (2 or 4 bytes), so
 *    bits are preserved exactly, NaN payloads included.
 *  - Dropout's mask is a pure function of (seed, step, counter base + element index), so
 *    it is the same for any thread count and the same kernel replays it as its own
 *    backward.
 *  - Casts never invoke undefined behaviour: F32 -> I32 truncates toward zero, saturates
 *    out-of-range values and sends NaN to 0.
 */
#include "cpu.h"

#include <math.h>
#include <string.h>

/* Below this many elements a kernel runs on one thread. */
#define PAR_MIN 32768


/* x viewed as [outer, dims[axis], inner] */
static void around_axis(const rg_tv *x, int64_t axis, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int64_t a = 0; a < axis; a++) *outer *= x->dims[a];
  for (int64_t a = axis + 1; a < x->ndim; a++) *inner *= x->dims[a];
}

rg_status rg_cpu_copy(rg_kargs *k) {
  if (k->out[0].p == k->in[0].p) return RG_OK; /* a view (rg_reshape of a pass tensor) */
  memcpy(k->out[0].p, k->in[0].p, (size_t)k->out[0].n * rg__dtype_size(k->out[0].dtype));
  return RG_OK;
}

/* ---- permute ----------------------------------------------------------------------------- */

/* One row of out (its last axis) gathered from x with stride xs. */
static void gather_row(const void *x, int64_t off, int64_t xs, void *o, int64_t C,
                       size_t esz) {
  if (esz == 2) {
    const uint16_t *s = (const uint16_t *)x + off;
    uint16_t *d = o;
    for (int64_t c = 0; c < C; c++) d[c] = s[c * xs];
  } else {
    const uint32_t *s = (const uint32_t *)x + off;
    uint32_t *d = o;
    for (int64_t c = 0; c < C; c++) d[c] = s[c * xs];
  }
}

typedef struct {
  const rg_tv *x, *o;
  const int64_t *st;
  int64_t C;
  size_t esz;
} permute_job;
static void permute_range(void *a, int64_t lo, int64_t hi, int slot) {
  const permute_job *j = a;
  const rg_tv *o = j->o;
  (void)slot;
  for (int64_t r = lo; r < hi; r++) {
    int64_t off = rg_cpu_bcast_offset(o, 1, j->st, r);
    gather_row(j->x->p, off, j->st[o->ndim - 1], (char *)o->p + (size_t)(r * j->C) * j->esz,
               j->C, j->esz);
  }
}

rg_status rg_cpu_permute(rg_kargs *k) {
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  size_t esz = rg__dtype_size(o->dtype);
  if (o->ndim == 0) {
    memcpy(o->p, x->p, esz);
    return RG_OK;
  }
  int64_t xst[RG_MAX_DIMS], st[RG_MAX_DIMS], s = 1;
  for (int a = x->ndim - 1; a >= 0; a--) {
    xst[a] = s;
    s *= x->dims[a];
  }
  for (int j = 0; j < o->ndim; j++) st[j] = xst[k->node->i[j]]; /* x stride of out axis j */
  int64_t C = o->dims[o->ndim - 1], rows = C ? o->n / C : 0;
  rg_cpu_for(rows, par_threads(k, o->n > PAR_MIN), permute_range,
             &(permute_job){x, o, st, C, esz});
  return RG_OK;
}

/* ---- slice, its backward, concat ------------------------------------------------------- */

/* What slice, slice_bwd and concat hand their bodies: one outer index at a time, byte
   runs before, in and after the slice (or of the two operands). */
typedef struct {
  const char *src, *src2;
  char *dst;
  size_t pre, mid, post, esz;
  int64_t X, start, inner;
} runs_job;

static void slice_range(void *a, int64_t lo, int64_t hi, int slot) {
  const runs_job *j = a;
  (void)slot;
  for (int64_t o = lo; o < hi; o++)
    memcpy(j->dst + (size_t)o * j->mid,
           j->src + (size_t)((o * j->X + j->start) * j->inner) * j->esz, j->mid);
}
static void slice_bwd_range(void *a, int64_t lo, int64_t hi, int slot) {
  const runs_job *j = a;
  (void)slot;
  for (int64_t o = lo; o < hi; o++) {
    char *d = j->dst + (size_t)o * (j->pre + j->mid + j->post);
    memset(d, 0, j->pre);
    memcpy(d + j->pre, j->src + (size_t)o * j->mid, j->mid);
    memset(d + j->pre + j->mid, 0, j->post);
  }
}
static void concat_range(void *a, int64_t lo, int64_t hi, int slot) {
  const runs_job *j = a;
  size_t ra = j->pre, rb = j->mid;
  (void)slot;
  for (int64_t o = lo; o < hi; o++) {
    memcpy(j->dst + (size_t)o * (ra + rb), j->src + (size_t)o * ra, ra);
    memcpy(j->dst + (size_t)o * (ra + rb) + ra, j->src2 + (size_t)o * rb, rb);
  }
}

rg_status rg_cpu_slice(rg_kargs *k) {
  const rg_tv *x = &k->in[0];
  int64_t axis = k->node->i[0], start = k->node->i[1], len = k->node->i[2];
  int64_t outer, inner, X = x->dims[axis];
  around_axis(x, axis, &outer, &inner);
  size_t esz = rg__dtype_size(x->dtype), run = (size_t)(len * inner) * esz;
  const char *src = x->p;
  char *dst = k->out[0].p;
  rg_cpu_for(outer, par_threads(k, k->out[0].n > PAR_MIN), slice_range,
             &(runs_job){.src = src, .dst = dst, .mid = run, .esz = esz, .X = X, .start = start,
                         .inner = inner});
  return RG_OK;
}

/* out has x's full shape: the gradient g lands in the slice, zeros everywhere else. */
rg_status rg_cpu_slice_bwd(rg_kargs *k) {
  const rg_tv *out = &k->out[0];
  int64_t axis = k->node->i[0], start = k->node->i[1], len = k->node->i[2];
  int64_t outer, inner, X = out->dims[axis];
  around_axis(out, axis, &outer, &inner);
  size_t esz = rg__dtype_size(out->dtype);
  size_t pre = (size_t)(start * inner) * esz, mid = (size_t)(len * inner) * esz;
  size_t post = (size_t)((X - start - len) * inner) * esz;
  const char *g = k->in[0].p;
  char *dst = out->p;
  rg_cpu_for(outer, par_threads(k, out->n > PAR_MIN), slice_bwd_range,
             &(runs_job){.src = g, .dst = dst, .pre = pre, .mid = mid, .post = post});
  return RG_OK;
}

rg_status rg_cpu_concat(rg_kargs *k) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *out = &k->out[0];
  int64_t axis = k->node->i[0], outer, inner;
  around_axis(out, axis, &outer, &inner);
  size_t esz = rg__dtype_size(out->dtype);
  size_t ra = (size_t)(a->dims[axis] * inner) * esz, rb = (size_t)(b->dims[axis] * inner) * esz;
  const char *pa = a->p, *pb = b->p;
  char *po = out->p;
  rg_cpu_for(outer, par_threads(k, out->n > PAR_MIN), concat_range,
             &(runs_job){.src = pa, .src2 = pb, .dst = po, .pre = ra, .mid = rb});
  return RG_OK;
}

/* ---- dropout ----------------------------------------------------------------------------- */

typedef struct {
  const float *x;
  float *y;
  float p, scale;
  uint64_t seed, step, base;
} dropout_job;
static void dropout_range(void *a, int64_t lo, int64_t hi, int slot) {
  const dropout_job *j = a;
  (void)slot;
  for (int64_t e = lo; e < hi; e++)
    j->y[e] = rg_philox_uniform(j->seed, j->step, j->base + (uint64_t)e) >= j->p
                  ? j->x[e] * j->scale
                  : 0.f;
}

rg_status rg_cpu_dropout(rg_kargs *k) {
  const float *x = k->in[0].p;
  float *y = k->out[0].p;
  float p = k->node->f[0], scale = 1.f / (1.f - p);
  uint64_t seed = (uint64_t)k->node->i[0], step = (uint64_t)k->node->i[1];
  if (k->in[1].p) memcpy(&step, k->in[1].p, sizeof step);
  uint64_t base = (uint64_t)k->node->i[2];
  int64_t n = k->out[0].n;
  rg_cpu_for(n, par_threads(k, n > PAR_MIN / 8), dropout_range,
             &(dropout_job){x, y, p, scale, seed, step, base});
  return RG_OK;
}

/* ---- cast -------------------------------------------------------------------------------- */

static float load_f(const void *p, int dt, int64_t i) {
  if (dt == RG_BF16) return rg_bf16_to_f32(((const uint16_t *)p)[i]);
  if (dt == RG_I32) return (float)((const int32_t *)p)[i];
  return ((const float *)p)[i];
}

/* Truncation toward zero, defined for every float: NaN -> 0, out of range saturates. */
static int32_t f32_to_i32(float f) {
  if (f != f) return 0;
  if (f >= 2147483648.f) return INT32_MAX;
  if (f < -2147483648.f) return INT32_MIN;
  return (int32_t)f;
}

static void store_f(void *p, int dt, int64_t i, float v) {
  if (dt == RG_BF16)
    ((uint16_t *)p)[i] = rg_f32_to_bf16(v);
  else if (dt == RG_I32)
    ((int32_t *)p)[i] = f32_to_i32(v);
  else
    ((float *)p)[i] = v;
}

static void cast_range(void *a, int64_t lo, int64_t hi, int slot) {
  const rg_kargs *k = a;
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  (void)slot;
  for (int64_t i = lo; i < hi; i++) store_f(o->p, o->dtype, i, load_f(x->p, x->dtype, i));
}

rg_status rg_cpu_cast(rg_kargs *k) {
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  if (x->dtype == o->dtype) return rg_cpu_copy(k);
  int64_t n = o->n;
  rg_cpu_for(n, par_threads(k, n > PAR_MIN), cast_range, k);
  return RG_OK;
}
