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
#pragma omp parallel for num_threads(nthreads(k)) if(o->n > PAR_MIN) schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off = 0, rr = r;
    for (int j = o->ndim - 2; j >= 0; j--) {
      off += (rr % o->dims[j]) * st[j];
      rr /= o->dims[j];
    }
    gather_row(x->p, off, st[o->ndim - 1], (char *)o->p + (size_t)(r * C) * esz, C, esz);
  }
  return RG_OK;
}

/* ---- slice, its backward, concat ------------------------------------------------------- */

rg_status rg_cpu_slice(rg_kargs *k) {
  const rg_tv *x = &k->in[0];
  int64_t axis = k->node->i[0], start = k->node->i[1], len = k->node->i[2];
  int64_t outer, inner, X = x->dims[axis];
  around_axis(x, axis, &outer, &inner);
  size_t esz = rg__dtype_size(x->dtype), run = (size_t)(len * inner) * esz;
  const char *src = x->p;
  char *dst = k->out[0].p;
#pragma omp parallel for num_threads(nthreads(k)) if(k->out[0].n > PAR_MIN) schedule(static)
  for (int64_t o = 0; o < outer; o++)
    memcpy(dst + (size_t)o * run, src + (size_t)((o * X + start) * inner) * esz, run);
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
  size_t post = (size_t)((X - start - len) * inner) * esz, row = pre + mid + post;
  const char *g = k->in[0].p;
  char *dst = out->p;
#pragma omp parallel for num_threads(nthreads(k)) if(out->n > PAR_MIN) schedule(static)
  for (int64_t o = 0; o < outer; o++) {
    char *d = dst + (size_t)o * row;
    memset(d, 0, pre);
    memcpy(d + pre, g + (size_t)o * mid, mid);
    memset(d + pre + mid, 0, post);
  }
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
#pragma omp parallel for num_threads(nthreads(k)) if(out->n > PAR_MIN) schedule(static)
  for (int64_t o = 0; o < outer; o++) {
    memcpy(po + (size_t)o * (ra + rb), pa + (size_t)o * ra, ra);
    memcpy(po + (size_t)o * (ra + rb) + ra, pb + (size_t)o * rb, rb);
  }
  return RG_OK;
}

/* ---- dropout ----------------------------------------------------------------------------- */

rg_status rg_cpu_dropout(rg_kargs *k) {
  const float *x = k->in[0].p;
  float *y = k->out[0].p;
  float p = k->node->f[0], scale = 1.f / (1.f - p);
  uint64_t seed = (uint64_t)k->node->i[0], step = (uint64_t)k->node->i[1];
  if (k->in[1].p) memcpy(&step, k->in[1].p, sizeof step);
  uint64_t base = (uint64_t)k->node->i[2];
  int64_t n = k->out[0].n;
#pragma omp parallel for num_threads(nthreads(k)) if(n > PAR_MIN / 8) schedule(static)
  for (int64_t e = 0; e < n; e++)
    y[e] = rg_philox_uniform(seed, step, base + (uint64_t)e) >= p ? x[e] * scale : 0.f;
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

rg_status rg_cpu_cast(rg_kargs *k) {
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  if (x->dtype == o->dtype) return rg_cpu_copy(k);
  int64_t n = o->n;
#pragma omp parallel for num_threads(nthreads(k)) if(n > PAR_MIN) schedule(static)
  for (int64_t i = 0; i < n; i++) store_f(o->p, o->dtype, i, load_f(x->p, x->dtype, i));
  return RG_OK;
}
