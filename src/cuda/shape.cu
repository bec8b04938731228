/*
 * shape.cu - CUDA kernels that move elements without arithmetic (copy, permute, slice and
 * its backward, concat), plus dropout and dtype casts. Mirrors src/cpu/shape.c.
 *
 * Invariants:
 *  - Copy, permute, slice and concat move raw 2- or 4-byte elements, so bits are kept
 *    exactly (NaN payloads included) whatever the dtype.
 *  - Every kernel writes each output element from one thread, reading only inputs: no
 *    reductions, so results are deterministic and match the CPU bit for bit.
 *  - Index arithmetic uses 32-bit unsigned integers when every index fits (division is
 *    the cost of these gathers) and 64-bit otherwise; loop counters are always 64-bit so
 *    a grid-stride step can never wrap.
 *  - Dropout's mask comes from the CPU's own Philox-4x32-10 (src/core/philox.h, compiled
 *    for the device too), so the CPU and GPU keep exactly the same elements.
 *  - Casts round exactly like internal.h: F32 -> BF16 round-to-nearest-even (NaN stays a
 *    quiet NaN), F32 -> I32 truncates, saturates and sends NaN to 0.
 */
#include "cuda.h"

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define THREADS 256

/* True when every index of an n-element tensor fits 32-bit arithmetic. */
static inline bool fits32(int64_t n) { return n < ((int64_t)1 << 32) - THREADS; }

#define GRID_STRIDE(e, n) \
  for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < (uint64_t)(n); \
       e += (uint64_t)gridDim.x * blockDim.x)

/* x viewed as [outer, dims[axis], inner] */
static void around_axis(const rg_tv *x, int64_t axis, int64_t *outer, int64_t *inner) {
  *outer = *inner = 1;
  for (int64_t a = 0; a < axis; a++) *outer *= x->dims[a];
  for (int64_t a = axis + 1; a < x->ndim; a++) *inner *= x->dims[a];
}

/* ---- permute ------------------------------------------------------------------------------ */

/* out element e (row-major over dims) reads x at sum_j idx_j * st[j]. */
template <typename I> struct gather_map {
  int nd;
  I dims[RG_MAX_DIMS];
  I st[RG_MAX_DIMS];
};

template <typename I> __device__ __forceinline__ I gather_off(const gather_map<I> &m, I e) {
  I off = 0;
#pragma unroll
  for (int j = RG_MAX_DIMS - 1; j >= 1; j--) {
    if (j < m.nd) {
      off += (e % m.dims[j]) * m.st[j];
      e /= m.dims[j];
    }
  }
  return off + e * m.st[0]; /* e < dims[0] here: the last division is not needed */
}

template <typename T, typename I>
__global__ void gather_k(const T *__restrict__ x, T *__restrict__ o, int64_t n,
                         gather_map<I> m) {
  GRID_STRIDE(e, n) o[e] = x[gather_off(m, (I)e)];
}

template <typename T, typename I>
static void launch_gather(rg_cuda_launch *L, const void *x, void *o, int64_t n,
                          const int64_t *dims, const int64_t *st, int nd) {
  gather_map<I> m;
  m.nd = nd;
  for (int j = 0; j < RG_MAX_DIMS; j++) {
    m.dims[j] = (I)(j < nd ? dims[j] : 1);
    m.st[j] = (I)(j < nd ? st[j] : 0);
  }
  gather_k<T, I><<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>((const T *)x, (T *)o,
                                                                       n, m);
}

template <typename T>
static void gather_any(rg_cuda_launch *L, const void *x, void *o, int64_t n,
                       const int64_t *dims, const int64_t *st, int nd) {
  if (fits32(n))
    launch_gather<T, uint32_t>(L, x, o, n, dims, st, nd);
  else
    launch_gather<T, uint64_t>(L, x, o, n, dims, st, nd);
}

/* ---- slice, its backward, concat -------------------------------------------------------- */

/* out [outer, len*inner] <- x [outer, X*inner] at column start*inner. */
template <typename T, typename I>
__global__ void slice_k(const T *__restrict__ x, T *__restrict__ o, int64_t n, I run, I xrow,
                        I skip) {
  GRID_STRIDE(e, n) {
    I ie = (I)e, r = ie / run;
    o[e] = x[r * xrow + skip + (ie - r * run)];
  }
}

/* out [outer, X*inner]: g [outer, len*inner] inside [lo, hi) of each row, zero outside. */
template <typename T, typename I>
__global__ void slice_bwd_k(const T *__restrict__ g, T *__restrict__ o, int64_t n, I row,
                            I lo, I hi) {
  GRID_STRIDE(e, n) {
    I ie = (I)e, r = ie / row, c = ie - r * row;
    o[e] = (c >= lo && c < hi) ? g[r * (hi - lo) + (c - lo)] : (T)0;
  }
}

/* out [outer, (A+B)*inner] <- a [outer, A*inner], b [outer, B*inner]. */
template <typename T, typename I>
__global__ void concat_k(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ o,
                         int64_t n, I ra, I rb) {
  GRID_STRIDE(e, n) {
    I ie = (I)e, r = ie / (ra + rb), c = ie - r * (ra + rb);
    o[e] = c < ra ? a[r * ra + c] : b[r * rb + (c - ra)];
  }
}

/* Instantiates launch for the element type of dtype dt and the index type n needs. */
#define DISPATCH_TI(dt, n, CALL)                     \
  do {                                               \
    if (rg__dtype_size(dt) == 2) {                   \
      typedef uint16_t T;                            \
      if (fits32(n)) { typedef uint32_t I; CALL; }   \
      else { typedef uint64_t I; CALL; }             \
    } else {                                         \
      typedef uint32_t T;                            \
      if (fits32(n)) { typedef uint32_t I; CALL; }   \
      else { typedef uint64_t I; CALL; }             \
    }                                                \
  } while (0)

/* ---- dropout ----------------------------------------------------------------------------- */

/* The mask is rg_philox_uniform (src/core/philox.h), the CPU's own definition. */
__global__ void dropout_k(const float *__restrict__ x, float *__restrict__ y, int64_t n, float p,
                          float scale, uint64_t seed, const unsigned long long *stepp,
                          uint64_t step, uint64_t base) {
  if (stepp) step = *stepp; /* read on the device: a replayed graph sees each new step */
  GRID_STRIDE(e, n) {
    y[e] = rg_philox_uniform(seed, step, base + e) >= p ? __fmul_rn(x[e], scale) : 0.f;
  }
}

/* ---- cast -------------------------------------------------------------------------------- */

__device__ __forceinline__ float bf16_to_f32(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}

/* rg_f32_to_bf16: NaN keeps its top bits and is made quiet; others round to nearest even. */
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Truncation toward zero, defined for every float: NaN -> 0, out of range saturates. */
__device__ __forceinline__ int32_t f32_to_i32(float f) {
  if (f != f) return 0;
  if (f >= 2147483648.f) return INT32_MAX;
  if (f < -2147483648.f) return INT32_MIN;
  return (int32_t)f;
}

__device__ __forceinline__ float load_f(const void *p, int dt, uint64_t i) {
  if (dt == RG_BF16) return bf16_to_f32(((const uint16_t *)p)[i]);
  if (dt == RG_I32) return (float)((const int32_t *)p)[i]; /* round to nearest, as C */
  return ((const float *)p)[i];
}

__device__ __forceinline__ void store_f(void *p, int dt, uint64_t i, float v) {
  if (dt == RG_BF16)
    ((uint16_t *)p)[i] = f32_to_bf16(v);
  else if (dt == RG_I32)
    ((int32_t *)p)[i] = f32_to_i32(v);
  else
    ((float *)p)[i] = v;
}

/* The dtypes are kernel arguments: the branches are uniform across the grid. */
__global__ void cast_k(const void *__restrict__ x, int xdt, void *__restrict__ o, int odt,
                       int64_t n) {
  GRID_STRIDE(e, n) store_f(o, odt, e, load_f(x, xdt, e));
}

/* F32 -> BF16 (autocast's cast of every matrix-product operand), four elements a thread:
   one 16-byte load, one 8-byte store. n4 = n / 4 (tensors start 256-byte aligned). */
__global__ void cast_bf16_k(const float4 *__restrict__ x, uint2 *__restrict__ o, int64_t n4) {
  GRID_STRIDE(e, n4) {
    float4 v = x[e];
    o[e] = make_uint2((uint32_t)f32_to_bf16(v.x) | (uint32_t)f32_to_bf16(v.y) << 16,
                      (uint32_t)f32_to_bf16(v.z) | (uint32_t)f32_to_bf16(v.w) << 16);
  }
}

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

rg_status rg_cuda_copy(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  size_t bytes = (size_t)k->out[0].n * rg__dtype_size(k->out[0].dtype);
  if (bytes == 0 || k->out[0].p == k->in[0].p) return RG_OK; /* empty, or a view */
  /* A stream-ordered device-to-device copy: no synchronisation, capturable in a graph.
     Its status is also recorded as the runtime's last error, which check_launch reads. */
  cudaMemcpyAsync(k->out[0].p, k->in[0].p, bytes, cudaMemcpyDeviceToDevice, L->stream);
  return rg_cuda_check_launch(k, "copy");
}

rg_status rg_cuda_permute(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  if (o->n == 0) return RG_OK;
  int64_t xst[RG_MAX_DIMS], st[RG_MAX_DIMS], s = 1;
  for (int a = x->ndim - 1; a >= 0; a--) {
    xst[a] = s;
    s *= x->dims[a];
  }
  for (int j = 0; j < o->ndim; j++) st[j] = xst[k->node->i[j]]; /* x stride of out axis j */
  int64_t one = 1, zero = 0;
  const int64_t *dims = o->ndim ? o->dims : &one, *strides = o->ndim ? st : &zero;
  int nd = o->ndim ? o->ndim : 1;
  if (rg__dtype_size(o->dtype) == 2)
    gather_any<uint16_t>(L, x->p, o->p, o->n, dims, strides, nd);
  else
    gather_any<uint32_t>(L, x->p, o->p, o->n, dims, strides, nd);
  return rg_cuda_check_launch(k, "permute");
}

rg_status rg_cuda_slice(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  int64_t axis = k->node->i[0], start = k->node->i[1], len = k->node->i[2];
  int64_t outer, inner, X = x->dims[axis];
  around_axis(x, axis, &outer, &inner);
  int64_t n = o->n;
  if (n == 0) return RG_OK;
  unsigned grid = rg_cuda_blocks(n, THREADS);
  DISPATCH_TI(o->dtype, x->n,
              (slice_k<T, I><<<grid, THREADS, 0, L->stream>>>(
                  (const T *)x->p, (T *)o->p, n, (I)(len * inner), (I)(X * inner),
                  (I)(start * inner))));
  return rg_cuda_check_launch(k, "slice");
}

rg_status rg_cuda_slice_bwd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *o = &k->out[0];
  int64_t axis = k->node->i[0], start = k->node->i[1], len = k->node->i[2];
  int64_t outer, inner, X = o->dims[axis];
  around_axis(o, axis, &outer, &inner);
  int64_t n = o->n;
  if (n == 0) return RG_OK;
  unsigned grid = rg_cuda_blocks(n, THREADS);
  DISPATCH_TI(o->dtype, n,
              (slice_bwd_k<T, I><<<grid, THREADS, 0, L->stream>>>(
                  (const T *)k->in[0].p, (T *)o->p, n, (I)(X * inner), (I)(start * inner),
                  (I)((start + len) * inner))));
  return rg_cuda_check_launch(k, "slice_bwd");
}

rg_status rg_cuda_concat(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *a = &k->in[0], *b = &k->in[1], *o = &k->out[0];
  int64_t axis = k->node->i[0], outer, inner;
  around_axis(o, axis, &outer, &inner);
  int64_t n = o->n;
  if (n == 0) return RG_OK;
  unsigned grid = rg_cuda_blocks(n, THREADS);
  DISPATCH_TI(o->dtype, n,
              (concat_k<T, I><<<grid, THREADS, 0, L->stream>>>(
                  (const T *)a->p, (const T *)b->p, (T *)o->p, n, (I)(a->dims[axis] * inner),
                  (I)(b->dims[axis] * inner))));
  return rg_cuda_check_launch(k, "concat");
}

rg_status rg_cuda_dropout(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int64_t n = k->out[0].n;
  if (n == 0) return RG_OK;
  float p = k->node->f[0], scale = 1.f / (1.f - p); /* the CPU's float expression */
  dropout_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(
      (const float *)k->in[0].p, (float *)k->out[0].p, n, p, scale, (uint64_t)k->node->i[0],
      (const unsigned long long *)k->in[1].p, (uint64_t)k->node->i[1],
      (uint64_t)k->node->i[2]);
  return rg_cuda_check_launch(k, "dropout");
}

rg_status rg_cuda_cast(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  if (x->dtype == o->dtype) return rg_cuda_copy(k);
  int64_t n = o->n;
  if (n == 0) return RG_OK;
  if (x->dtype == RG_F32 && o->dtype == RG_BF16 && n % 4 == 0)
    cast_bf16_k<<<rg_cuda_blocks(n / 4, THREADS), THREADS, 0, L->stream>>>(
        (const float4 *)x->p, (uint2 *)o->p, n / 4);
  else
    cast_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(x->p, x->dtype, o->p,
                                                                  o->dtype, n);
  return rg_cuda_check_launch(k, "cast");
}
