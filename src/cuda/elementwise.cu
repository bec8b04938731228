/*
 * elementwise.cu - CUDA kernels that map elements one to one: upload, fill, broadcasting
 * binary ops, scale/pow/clamp, the activations and their elementwise backward ops, and
 * the finite check.
 *
 * Invariants: the formulas are those of src/cpu/elementwise.c, operation for operation,
 * so CPU and CUDA agree to float rounding; each output element is written by one thread;
 * grid-stride loops, so any size runs with a bounded grid. Same-shape maps (map2) move
 * groups of four elements - a float4, or 8 bytes of bf16; every tensor starts on a
 * 256-byte boundary - and the last n % 4 elements one by one: the bandwidth-bound kernels
 * then run near the copy's bandwidth (bench/bandwidth.c measures it).
 *
 * Element types: the binary ops take a and b each F32 or BF16 (a residual add of a BF16
 * branch into an F32 stream is the common mixed case), the unary and elementwise backward
 * ops their input(s) and output each F32 or BF16; every kernel is instantiated per type
 * (cuda.h: rg_cuda_typed) and computes in float, rounding a BF16 output once.
 */
#include "cuda.h"

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define THREADS 256

/* ---- check_finite ------------------------------------------------------------------------ */

template <typename T>
__global__ void finite_kernel(const T *p, int64_t n, int out, rg_cuda_err *err, int node) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float v = sizeof(T) == 2 ? __uint_as_float((uint32_t)p[i] << 16) : (float)p[i];
    if (!isfinite(v))
      rg_cuda_raise(err, RG_CUDA_E_NONFINITE, node, out, i, v != v ? 0 : v > 0 ? 1 : -1);
  }
}

rg_status rg_cuda_check_finite(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  for (int j = 0; j < k->node->nout; j++) {
    const rg_tv *o = &k->out[j];
    if (!o->p || o->dtype == RG_I32 || o->n == 0) continue;
    unsigned b = rg_cuda_blocks(o->n, THREADS);
    if (o->dtype == RG_F32)
      finite_kernel<float><<<b, THREADS, 0, L->stream>>>((const float *)o->p, o->n, j, L->err,
                                                         L->node);
    else
      finite_kernel<uint16_t><<<b, THREADS, 0, L->stream>>>((const uint16_t *)o->p, o->n, j,
                                                            L->err, L->node);
  }
  return rg_cuda_check_launch(k, "the finite check");
}

/* ---- upload and fill ------------------------------------------------------------------ */

rg_status rg_cuda_upload(rg_kargs *k) {
  const rg_node *n = k->node;
  if (n->i[1] <= 0) return RG_OK;
  cudaMemcpyAsync((char *)k->out[0].p + n->i[0], n->aux, (size_t)n->i[1],
                  cudaMemcpyHostToDevice, rg_cuda_ctx(k)->stream);
  return rg_cuda_check_launch(k, "the upload from pinned staging");
}

template <typename T> __global__ void fill_kernel(T *p, int64_t n, T v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    p[i] = v;
}

rg_status rg_cuda_fill(rg_kargs *k) {
  const rg_tv *o = &k->out[0];
  float v = k->node->f[0];
  cudaStream_t s = rg_cuda_ctx(k)->stream;
  unsigned b = rg_cuda_blocks(o->n, THREADS);
  if (o->dtype == RG_BF16) {
    uint16_t h = rg_f32_to_bf16(v);
    fill_kernel<uint16_t><<<b, THREADS, 0, s>>>((uint16_t *)o->p, o->n, h);
  } else if (o->dtype == RG_I32) {
    int32_t iv = (v != v) ? 0 : (int32_t)fmax(fmin((double)v, 2147483647.0), -2147483648.0);
    fill_kernel<int32_t><<<b, THREADS, 0, s>>>((int32_t *)o->p, o->n, iv);
  } else {
    fill_kernel<float><<<b, THREADS, 0, s>>>((float *)o->p, o->n, v);
  }
  return rg_cuda_check_launch(k, "fill");
}

/* ---- same-shape maps ---------------------------------------------------------------------- */

template <class F> __device__ __forceinline__ float4 map4(float4 a, float4 b, const F &f) {
  return make_float4(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z), f(a.w, b.w));
}

/* o[i] = f(a[i], b[i]) for i < n; f is a functor. One-input maps pass a as b and ignore
   it. */
template <class TA, class TB, class TO, class F>
__global__ void map2_k(const TA *__restrict__ a, const TB *__restrict__ b,
                       TO *__restrict__ o, int64_t n, F f) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  int64_t n4 = n >> 2;
  for (int64_t j = i; j < n4; j += step) rg_st4(o, j, map4(rg_ld4(a, j), rg_ld4(b, j), f));
  for (int64_t j = 4 * n4 + i; j < n; j += step) rg_st(o, j, f(rg_ld(a, j), rg_ld(b, j)));
}

template <class TA, class TB, class TO, class F>
static void map2(const TA *a, const TB *b, TO *o, int64_t n, cudaStream_t s, F f) {
  map2_k<<<rg_cuda_blocks((n + 3) / 4, THREADS), THREADS, 0, s>>>(a, b, o, n, f);
}

/* ---- binary ops with broadcasting ----------------------------------------------------- */

enum { B_ADD, B_SUB, B_MUL, B_DIV };

template <int OP> __device__ __forceinline__ float bin(float a, float b) {
  return OP == B_ADD ? a + b : OP == B_SUB ? a - b : OP == B_MUL ? a * b : a / b;
}

/* General broadcast: decompose the output index over 4 axes, map through each operand's
   strides (0 on stretched axes). */
template <int OP> struct bin_f {
  __device__ float operator()(float a, float b) const { return bin<OP>(a, b); }
};

template <int OP, class TA, class TB, class TO>
__global__ void bin_bcast(const TA *a, const TB *b, TO *o, int64_t n, rg_cuda_shape out,
                          rg_cuda_shape sa, rg_cuda_shape sb) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, ia = 0, ib = 0;
    for (int d = RG_MAX_DIMS - 1; d >= 0; d--) {
      int64_t c = r % out.dims[d];
      r /= out.dims[d];
      ia += c * sa.strides[d];
      ib += c * sb.strides[d];
    }
    rg_st(o, i, bin<OP>(rg_ld(a, ia), rg_ld(b, ib)));
  }
}

/* The common broadcast, a row vector (bias, scale) against a matrix: o[i] = f(a[i],
   b[i % m]), or f(b[i % m], a[i]) with SWAP; m is a multiple of 4 (groups of four move
   together). */
template <int OP, bool SWAP, class TA, class TB, class TO>
__global__ void bin_rows(const TA *__restrict__ a, const TB *__restrict__ b,
                         TO *__restrict__ o, int64_t n, int64_t m) {
  int64_t n4 = n >> 2, m4 = m >> 2, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n4; j += step) {
    float4 x = rg_ld4(a, j), y = rg_ld4(b, j % m4);
    rg_st4(o, j, SWAP ? map4(y, x, bin_f<OP>()) : map4(x, y, bin_f<OP>()));
  }
}

/* m if t is out's trailing axes (t's own leading axes of size 1 ignored), else 0. */
static int64_t trailing(const rg_tv *t, const rg_tv *out) {
  int lead = 0;
  while (lead < t->ndim && t->dims[lead] == 1) lead++;
  int k = t->ndim - lead;
  if (k > out->ndim) return 0;
  for (int i = 0; i < k; i++)
    if (t->dims[lead + i] != out->dims[out->ndim - k + i]) return 0;
  return t->n;
}

/* in's strides against out, both right-aligned into RG_MAX_DIMS axes (leading axes of
   size 1), so one index decomposition serves every rank. */
static rg_cuda_shape right4(const rg_tv *in, const rg_tv *out) {
  rg_cuda_shape s = rg_cuda_broadcast(in, out), r;
  int shift = RG_MAX_DIMS - out->ndim;
  r.ndim = RG_MAX_DIMS;
  for (int d = 0; d < RG_MAX_DIMS; d++) {
    r.dims[d] = d >= shift ? s.dims[d - shift] : 1;
    r.strides[d] = d >= shift ? s.strides[d - shift] : 0;
  }
  return r;
}

template <int OP, class TA, class TB, class TO>
static void binary_launch(rg_kargs *k, const TA *pa, const TB *pb, TO *po) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *o = &k->out[0];
  cudaStream_t s = rg_cuda_ctx(k)->stream;
  unsigned g = rg_cuda_blocks(o->n, THREADS);
  int64_t mb = a->n == o->n ? trailing(b, o) : 0, ma = b->n == o->n ? trailing(a, o) : 0;
  if (a->n == o->n && b->n == o->n) {
    map2(pa, pb, po, o->n, s, bin_f<OP>());
  } else if (mb > 0 && mb % 4 == 0) {
    bin_rows<OP, false><<<rg_cuda_blocks(o->n / 4, THREADS), THREADS, 0, s>>>(
        pa, pb, po, o->n, mb);
  } else if (ma > 0 && ma % 4 == 0) {
    bin_rows<OP, true><<<rg_cuda_blocks(o->n / 4, THREADS), THREADS, 0, s>>>(
        pb, pa, po, o->n, ma);
  } else {
    rg_cuda_shape out4 = right4(o, o), a4 = right4(a, o), b4 = right4(b, o);
    bin_bcast<OP><<<g, THREADS, 0, s>>>(pa, pb, po, o->n, out4, a4, b4);
  }
}

template <int OP> static rg_status binary(rg_kargs *k) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *o = &k->out[0];
  if (o->n == 0) return RG_OK;
  rg_cuda_typed(a->dtype, [&](auto ta) {
    rg_cuda_typed(b->dtype, [&](auto tb) {
      rg_cuda_typed(o->dtype, [&](auto to) {
        binary_launch<OP>(k, rg_cuda_ptr(a, ta), rg_cuda_ptr(b, tb), rg_cuda_ptr(o, to));
      });
    });
  });
  return rg_cuda_check_launch(k, "a binary elementwise kernel");
}

rg_status rg_cuda_add(rg_kargs *k) { return binary<B_ADD>(k); }
rg_status rg_cuda_sub(rg_kargs *k) { return binary<B_SUB>(k); }
rg_status rg_cuda_mul(rg_kargs *k) { return binary<B_MUL>(k); }
rg_status rg_cuda_div(rg_kargs *k) { return binary<B_DIV>(k); }

/* ---- unary ------------------------------------------------------------------------------ */

enum { U_SCALE, U_POW, U_CLAMP, U_NEG, U_EXP, U_LOG, U_SQRT, U_RELU, U_GELU, U_SILU,
       U_SIGMOID, U_TANH };

__device__ __forceinline__ float sigmoid_d(float x) {
  if (x >= 0.f) return 1.f / (1.f + expf(-x));
  float e = expf(x);
  return e / (1.f + e);
}

template <int OP> __device__ __forceinline__ float un(float x, float p0, float p1) {
  switch (OP) {
  case U_SCALE: return x * p0;
  case U_POW: return p0 == 2.f ? x * x : p0 == 1.f ? x : powf(x, p0);
  case U_CLAMP: return x < p0 ? p0 : (x > p1 ? p1 : x);
  case U_NEG: return -x;
  case U_EXP: return expf(x);
  case U_LOG: return logf(x);
  case U_SQRT: return sqrtf(x);
  case U_RELU: return x < 0.f ? 0.f : x;
  case U_GELU: return 0.5f * x * (1.f + tanhf(GELU_C * (x + GELU_A * x * x * x)));
  case U_SILU: return x * sigmoid_d(x);
  case U_SIGMOID: return sigmoid_d(x);
  default: return tanhf(x);
  }
}

template <int OP> struct un_f {
  float p0, p1;
  __device__ float operator()(float v, float) const { return un<OP>(v, p0, p1); }
};

/* In place (the split LINEAR_ACT's ReLU: in[0] is out[0]) is fine: each element is read
   and written by the same thread. */
template <int OP> static rg_status unary(rg_kargs *k) {
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  if (o->n == 0) return RG_OK;
  un_f<OP> f = {k->node->f[0], k->node->f[1]};
  rg_cuda_typed(x->dtype, [&](auto tx) {
    rg_cuda_typed(o->dtype, [&](auto to) {
      const auto *px = rg_cuda_ptr(x, tx);
      map2(px, px, rg_cuda_ptr(o, to), o->n, rg_cuda_ctx(k)->stream, f);
    });
  });
  return rg_cuda_check_launch(k, "a unary elementwise kernel");
}

rg_status rg_cuda_scale(rg_kargs *k) { return unary<U_SCALE>(k); }
rg_status rg_cuda_pow(rg_kargs *k) { return unary<U_POW>(k); }
rg_status rg_cuda_clamp(rg_kargs *k) { return unary<U_CLAMP>(k); }
rg_status rg_cuda_neg(rg_kargs *k) { return unary<U_NEG>(k); }
rg_status rg_cuda_exp(rg_kargs *k) { return unary<U_EXP>(k); }
rg_status rg_cuda_log(rg_kargs *k) { return unary<U_LOG>(k); }
rg_status rg_cuda_sqrt(rg_kargs *k) { return unary<U_SQRT>(k); }
rg_status rg_cuda_relu(rg_kargs *k) { return unary<U_RELU>(k); }
rg_status rg_cuda_gelu(rg_kargs *k) { return unary<U_GELU>(k); }
rg_status rg_cuda_silu(rg_kargs *k) { return unary<U_SILU>(k); }
rg_status rg_cuda_sigmoid(rg_kargs *k) { return unary<U_SIGMOID>(k); }
rg_status rg_cuda_tanh(rg_kargs *k) { return unary<U_TANH>(k); }

/* ---- elementwise backward: (x or y, g) -> dx ------------------------------------------- */

enum { D_RELU, D_GELU, D_SILU, D_SIGMOID, D_TANH, D_CLAMP };

template <int OP> __device__ __forceinline__ float dg(float u, float g, float lo, float hi) {
  switch (OP) {
  case D_RELU: return u > 0.f ? g : 0.f;
  case D_GELU: {
    float x2 = u * u, t = tanhf(GELU_C * (u + GELU_A * x2 * u));
    return g * (0.5f * (1.f + t) + 0.5f * u * (1.f - t * t) * GELU_C * (1.f + 3.f * GELU_A * x2));
  }
  case D_SILU: {
    float s = sigmoid_d(u);
    return g * (s * (1.f + u * (1.f - s)));
  }
  case D_SIGMOID: return g * u * (1.f - u);
  case D_TANH: return g * (1.f - u * u);
  default: return (u > lo && u < hi) ? g : 0.f;
  }
}

template <int OP> struct dg_f {
  float lo, hi;
  __device__ float operator()(float u, float g) const { return dg<OP>(u, g, lo, hi); }
};

template <int OP> static rg_status dgrad(rg_kargs *k) {
  const rg_tv *u = &k->in[0], *g = &k->in[1], *o = &k->out[0];
  if (o->n == 0) return RG_OK;
  dg_f<OP> f = {k->node->f[0], k->node->f[1]};
  rg_cuda_typed(u->dtype, [&](auto tu) {
    rg_cuda_typed(g->dtype, [&](auto tg) {
      rg_cuda_typed(o->dtype, [&](auto to) {
        map2(rg_cuda_ptr(u, tu), rg_cuda_ptr(g, tg), rg_cuda_ptr(o, to), o->n,
             rg_cuda_ctx(k)->stream, f);
      });
    });
  });
  return rg_cuda_check_launch(k, "an elementwise backward kernel");
}

rg_status rg_cuda_relu_bwd(rg_kargs *k) { return dgrad<D_RELU>(k); }
rg_status rg_cuda_gelu_bwd(rg_kargs *k) { return dgrad<D_GELU>(k); }
rg_status rg_cuda_silu_bwd(rg_kargs *k) { return dgrad<D_SILU>(k); }
rg_status rg_cuda_sigmoid_bwd(rg_kargs *k) { return dgrad<D_SIGMOID>(k); }
rg_status rg_cuda_tanh_bwd(rg_kargs *k) { return dgrad<D_TANH>(k); }
rg_status rg_cuda_clamp_bwd(rg_kargs *k) { return dgrad<D_CLAMP>(k); }
