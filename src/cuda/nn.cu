/*
 * nn.cu - CUDA kernels for the neural-network ops that work row by row over the last axis:
 * softmax and log-softmax, layernorm and rmsnorm, embedding, cross-entropy and mse, with
 * their backward kernels. Mirrors src/cpu/nn.c (attention is in attention.cu).
 *
 * Invariants:
 *  - A tensor [..., C] is R = n / C contiguous rows of C. A row is handled by one group of
 *    threads (a warp when C <= 1024, else a whole block; the norms' rows of C % 4 == 0 up
 *    to 1024 by a warp holding the row in registers); per-row sums accumulate in double
 *    like the CPU (but float per thread in those norm kernels and the cross-entropy
 *    forward: see there), in an order fixed by the group size, so results repeat exactly.
 *  - Sums across rows (dgamma, dbeta, the cross-entropy and mse means) never use float
 *    atomics: fixed per-block or per-segment partials go to scratch and a second kernel
 *    adds them in order. Embedding's backward sorts positions by id (a counting sort made
 *    stable by ranking) and sums each table row in position order, as the CPU does.
 *  - Softmax-like rows subtract the row maximum (cross-entropy: the running one) before
 *    exp; normalisation takes the mean first and the variance of the centred values.
 *  - Bad ids (embedding) and targets (cross-entropy) are found by a check kernel that
 *    keeps the lowest failing position (integer atomicMin, deterministic); the next kernel
 *    raises it through the error word and skips those rows, so nothing is written out of
 *    bounds and the position named is the one the CPU names.
 *  - Where the CPU computes a float product then a float sum, the kernels use __fmul_rn /
 *    __fadd_rn so nvcc does not fuse them into an FMA with different rounding.
 *  - Element types: tensors are F32 except the layernorm and rmsnorm outputs, the
 *    cross-entropy logits and its dlogits, each F32 or BF16. Those kernels are
 *    instantiated per type (cuda.h: rg_cuda_typed), compute in float as for F32 and round
 *    a BF16 result once.
 */
#include "cuda.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define FULL 0xffffffffu
#define THREADS 256
/* "no failing position yet" in the check word (positions are compared with atomicMin). */
#define NO_BAD 0xffffffffffffffffull
/* Threads sharing one column in the column kernels (blockDim.y). */
#define COL_Y 8
/* Reduced rows per thread before a column sum is split into segments. */
#define PER_THREAD 64
#define TARGET_BLOCKS 4096
/* Blocks of the first pass of the mse mean (their partials are added by one block). */
#define LOSS_BLOCKS 1024
#define FLAT_CHUNK 8192

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
int64_t last_dim(const rg_tv *x) { return x->ndim ? x->dims[x->ndim - 1] : 1; }

rg_status no_scratch(rg_kargs *k, size_t need) {
  snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu", need,
           rg_cuda_ctx(k)->scratch_bytes);
  return RG_ERR_UNSUPPORTED;
}

/* ---- group reductions --------------------------------------------------------------------- */

/* Butterfly reductions: every lane ends with the same bits. */
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
  return v;
}

/* A row group is one warp (WARP) or the whole block. Every thread of the group gets the
   result; in block mode the leading barrier makes back-to-back calls safe. */
template <bool WARP> __device__ __forceinline__ double grp_sum(double v, double *sh) {
  v = warp_sum(v);
  if (WARP) return v;
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  return warp_sum(lane < nw ? sh[lane] : 0.0);
}
template <bool WARP> __device__ __forceinline__ float grp_max(float v, float *sh) {
  v = warp_max(v);
  if (WARP) return v;
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  return warp_max(lane < nw ? sh[lane] : -INFINITY);
}

/* Row loop shared by the row kernels: G threads per row, rank t in the group, rows_per
   rows per block; the loop condition is uniform over the block, so block-mode barriers
   inside are safe, and a warp whose row is past the end skips it. */
#define ROW_LOOP(WARP, R, r, G, t)                                                        \
  const int G = (WARP) ? 32 : (int)blockDim.x;                                            \
  const int t = (WARP) ? (int)(threadIdx.x & 31) : (int)threadIdx.x;                      \
  const int64_t rows_per_ = (WARP) ? (int64_t)(blockDim.x >> 5) : 1;                      \
  for (int64_t base_ = (int64_t)blockIdx.x * rows_per_; base_ < (R);                      \
       base_ += (int64_t)gridDim.x * rows_per_)                                           \
    for (int64_t r = base_ + ((WARP) ? (int64_t)(threadIdx.x >> 5) : 0); r < (R); r = (R))

/* Launch shape of a row kernel: a warp per row (8 per block) for short rows, else a block
   per row. */
typedef struct rowcfg { bool warp; unsigned grid, threads; } rowcfg;

rowcfg row_config(int64_t R, int64_t C) {
  rowcfg c;
  c.warp = C <= 1024;
  c.threads = c.warp ? 256 : (C > 8192 ? 1024 : 256);
  int64_t blocks = c.warp ? cdiv(R, 8) : R;
  c.grid = (unsigned)max64(1, min64(blocks, 1 << 20));
  return c;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Rows of C floats at p, q (NULL: none) can be read and written as float4: every row
   starts 16-byte aligned. Tensors start 256-aligned, so this is C % 4 == 0 in practice. */
bool rows4(int64_t C, const void *p, const void *q) {
  return C % 4 == 0 && aligned16(p) && aligned16(q);
}

/* ---- softmax and log-softmax ----------------------------------------------------------- */

template <bool WARP, bool LOG>
__global__ void softmax_k(const float *__restrict__ x, float *__restrict__ y, int64_t R,
                          int64_t C) {
  __shared__ double shd[32];
  __shared__ float shf[32];
  ROW_LOOP(WARP, R, r, G, t) {
    const float *xr = x + r * C;
    float *yr = y + r * C;
    float m = -INFINITY;
    for (int64_t c = t; c < C; c += G) m = fmaxf(m, xr[c]);
    m = grp_max<WARP>(m, shf);
    double s = 0;
    for (int64_t c = t; c < C; c += G) s += expf(xr[c] - m);
    s = grp_sum<WARP>(s, shd);
    if (LOG) {
      float lse = (float)log(s);
      for (int64_t c = t; c < C; c += G) yr[c] = (xr[c] - m) - lse;
    } else {
      float inv = (float)(1.0 / s);
      for (int64_t c = t; c < C; c += G) yr[c] = expf(xr[c] - m) * inv;
    }
  }
}

/* Rows of 1024 < C <= 8192 floats (C % 4 == 0, rows 16-byte aligned) held in a block's
   registers, NV float4 a thread: x is read once and y written once, where softmax_k reads
   x three times with scalar loads (on an H200, bench/bandwidth's rows of 8192: 96 -> 36
   us for 64 MiB, 0.36 -> 0.96 of the copy's rate). Each exp is computed once; a thread's
   partial sum is float (at most 32 terms), the block's double. */
#define SOFTMAX_REG_THREADS 256
template <int NV, bool LOG>
__global__ void __launch_bounds__(SOFTMAX_REG_THREADS)
    softmax_reg_k(const float *__restrict__ x, float *__restrict__ y, int64_t R, int64_t C) {
  __shared__ double shd[32];
  __shared__ float shf[32];
  const int64_t C4 = C / 4;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) { /* uniform over the block */
    const float4 *xr = (const float4 *)(x + r * C);
    float4 *yr = (float4 *)(y + r * C);
    float4 v[NV];
    float m = -INFINITY;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      int64_t q = (int64_t)j * SOFTMAX_REG_THREADS + threadIdx.x;
      v[j] = q < C4 ? xr[q] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    }
    m = grp_max<false>(m, shf);
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      if ((int64_t)j * SOFTMAX_REG_THREADS + threadIdx.x >= C4) continue;
      float4 e = make_float4(expf(v[j].x - m), expf(v[j].y - m), expf(v[j].z - m),
                             expf(v[j].w - m));
      s += (e.x + e.y) + (e.z + e.w);
      if (!LOG) v[j] = e;
    }
    double sum = grp_sum<false>((double)s, shd);
    float lse = LOG ? (float)log(sum) : 0.f, inv = LOG ? 0.f : (float)(1.0 / sum);
#pragma unroll
    for (int j = 0; j < NV; j++) {
      int64_t q = (int64_t)j * SOFTMAX_REG_THREADS + threadIdx.x;
      if (q >= C4) continue;
      float4 t = v[j];
      yr[q] = LOG ? make_float4((t.x - m) - lse, (t.y - m) - lse, (t.z - m) - lse,
                                (t.w - m) - lse)
                  : make_float4(t.x * inv, t.y * inv, t.z * inv, t.w * inv);
    }
  }
}

/* softmax: dx = y (g - sum(g y)); log-softmax: dx = g - exp(y) sum(g). */
template <bool WARP, bool LOG>
__global__ void softmax_bwd_k(const float *__restrict__ y, const float *__restrict__ g,
                              float *__restrict__ dx, int64_t R, int64_t C) {
  __shared__ double shd[32];
  ROW_LOOP(WARP, R, r, G, t) {
    const float *yr = y + r * C, *gr = g + r * C;
    float *dr = dx + r * C;
    double s = 0;
    for (int64_t c = t; c < C; c += G) s += LOG ? (double)gr[c] : (double)gr[c] * yr[c];
    float sf = (float)grp_sum<WARP>(s, shd);
    for (int64_t c = t; c < C; c += G)
      dr[c] = LOG ? __fsub_rn(gr[c], __fmul_rn(expf(yr[c]), sf)) : yr[c] * (gr[c] - sf);
  }
}

template <bool LOG> void launch_softmax(rg_cuda_launch *L, const rg_kargs *k, int64_t R,
                                        int64_t C) {
  rowcfg c = row_config(R, C);
  const float *x = (const float *)k->in[0].p;
  float *y = (float *)k->out[0].p;
  int64_t nv = cdiv(C / 4, SOFTMAX_REG_THREADS); /* float4 a thread */
  if (!c.warp && C <= 8192 && rows4(C, x, y)) {
    auto kern = nv <= 2 ? softmax_reg_k<2, LOG> : nv <= 4 ? softmax_reg_k<4, LOG>
                                                          : softmax_reg_k<8, LOG>;
    kern<<<c.grid, SOFTMAX_REG_THREADS, 0, L->stream>>>(x, y, R, C);
  } else if (c.warp)
    softmax_k<true, LOG><<<c.grid, c.threads, 0, L->stream>>>(x, y, R, C);
  else
    softmax_k<false, LOG><<<c.grid, c.threads, 0, L->stream>>>(x, y, R, C);
}

template <bool LOG> void launch_softmax_bwd(rg_cuda_launch *L, const rg_kargs *k, int64_t R,
                                            int64_t C) {
  rowcfg c = row_config(R, C);
  const float *y = (const float *)k->in[0].p, *g = (const float *)k->in[1].p;
  float *dx = (float *)k->out[0].p;
  if (c.warp)
    softmax_bwd_k<true, LOG><<<c.grid, c.threads, 0, L->stream>>>(y, g, dx, R, C);
  else
    softmax_bwd_k<false, LOG><<<c.grid, c.threads, 0, L->stream>>>(y, g, dx, R, C);
}

/* ---- layernorm and rmsnorm ------------------------------------------------------------- */
/* xhat = (x - mu) * rstd with rstd = 1/sqrt(mean((x-mu)^2) + eps); rmsnorm is mu = 0 with
   no beta. Row statistics are doubles, as on the CPU. */

template <bool WARP, bool CENTRE>
__device__ __forceinline__ double2 row_stats(const float *xr, int64_t C, double eps, int G,
                                             int t, double *shd) {
  double mu = 0;
  if (CENTRE) {
    double s = 0;
    for (int64_t c = t; c < C; c += G) s += xr[c];
    mu = grp_sum<WARP>(s, shd) / (double)C;
  }
  double v = 0;
  for (int64_t c = t; c < C; c += G) {
    double d = xr[c] - mu;
    v += d * d;
  }
  v = grp_sum<WARP>(v, shd);
  return make_double2(mu, 1.0 / sqrt(v / (double)C + eps));
}

template <bool WARP, bool CENTRE, class TO>
__global__ void norm_fwd_k(const float *__restrict__ x, const float *__restrict__ gamma,
                           const float *__restrict__ beta, TO *__restrict__ y, int64_t R,
                           int64_t C, double eps) {
  __shared__ double shd[32];
  ROW_LOOP(WARP, R, r, G, t) {
    const float *xr = x + r * C;
    TO *yr = y + r * C;
    double2 st = row_stats<WARP, CENTRE>(xr, C, eps, G, t, shd);
    for (int64_t c = t; c < C; c += G) {
      float v = (float)((xr[c] - st.x) * st.y);
      if (gamma) v = __fmul_rn(v, gamma[c]);
      if (beta) v = __fadd_rn(v, beta[c]);
      rg_st(yr, c, v);
    }
  }
}

/* dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)), dxh = g gamma (rmsnorm drops the
   mean(dxh) term); the row statistics go to stats when the parameter gradients need them. */
template <bool WARP, bool CENTRE>
__global__ void norm_bwd_k(const float *__restrict__ x, const float *__restrict__ gamma,
                           const float *__restrict__ g, float *__restrict__ dx,
                           double2 *__restrict__ stats, int64_t R, int64_t C, double eps,
                           const float *__restrict__ dxin) {
  __shared__ double shd[32];
  ROW_LOOP(WARP, R, r, G, t) {
    const float *xr = x + r * C, *gr = g + r * C;
    double2 st = row_stats<WARP, CENTRE>(xr, C, eps, G, t, shd);
    if (stats && t == 0) stats[r] = st;
    if (!dx) continue; /* uniform over the block */
    double s1 = 0, s2 = 0;
    for (int64_t c = t; c < C; c += G) {
      double xh = (xr[c] - st.x) * st.y;
      double dxh = gamma ? (double)gr[c] * gamma[c] : (double)gr[c];
      s1 += dxh;
      s2 += dxh * xh;
    }
    s1 = grp_sum<WARP>(s1, shd);
    s2 = grp_sum<WARP>(s2, shd);
    double a = CENTRE ? s1 / (double)C : 0.0, b = s2 / (double)C;
    float *dr = dx + r * C;
    for (int64_t c = t; c < C; c += G) {
      double xh = (xr[c] - st.x) * st.y;
      double dxh = gamma ? (double)gr[c] * gamma[c] : (double)gr[c];
      float d = (float)(st.y * (dxh - a - xh * b));
      dr[c] = dxin ? d + dxin[r * C + c] : d; /* dx_in: as the ADD it replaces */
    }
  }
}

/* dgamma[c] = sum_r g xhat, dbeta[c] = sum_r g: threadIdx.x over 32 columns, threadIdx.y
   and blockIdx.y (segments of rseg rows) over rows. With pg == NULL the block writes the
   results (added in with gacc, bacc: rg_cuda_put), else its partials at [segment * C + c]. */
__global__ void norm_dparam_k(const float *__restrict__ x, const float *__restrict__ g,
                              const double2 *__restrict__ stats, int64_t R, int64_t C,
                              int64_t rseg, float *__restrict__ dgamma,
                              float *__restrict__ dbeta, double *__restrict__ pg,
                              double *__restrict__ pb, const rg_cuda_err *gacc,
                              const rg_cuda_err *bacc) {
  __shared__ double sg[COL_Y][33], sb[COL_Y][33];
  int tx = threadIdx.x, ty = threadIdx.y;
  int64_t c = (int64_t)blockIdx.x * 32 + tx;
  int64_t r0 = (int64_t)blockIdx.y * rseg, r1 = min(R, r0 + rseg);
  double ag = 0, ab = 0;
  if (c < C) {
    for (int64_t r = r0 + ty; r < r1; r += COL_Y) {
      double2 st = stats[r];
      float gv = g[r * C + c];
      ag += (double)gv * ((x[r * C + c] - st.x) * st.y);
      ab += gv;
    }
  }
  sg[ty][tx] = ag;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty != 0 || c >= C) return;
  double Ag = 0, Ab = 0;
#pragma unroll
  for (int j = 0; j < COL_Y; j++) Ag += sg[j][tx], Ab += sb[j][tx];
  if (pg) {
    pg[(int64_t)blockIdx.y * C + c] = Ag;
    pb[(int64_t)blockIdx.y * C + c] = Ab;
  } else {
    if (dgamma) rg_cuda_put(dgamma, c, Ag, 1.0, gacc);
    if (dbeta) rg_cuda_put(dbeta, c, Ab, 1.0, bacc);
  }
}

/* out[c] = sum of the segments' partials in segment order (out may be NULL; added in with
   gacc, bacc as above). */
__global__ void seg_final_k(const double *__restrict__ pg, const double *__restrict__ pb,
                            int64_t nseg, int64_t C, float *__restrict__ dgamma,
                            float *__restrict__ dbeta, const rg_cuda_err *gacc,
                            const rg_cuda_err *bacc) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C;
       c += (int64_t)gridDim.x * blockDim.x) {
    double a = 0, b = 0;
    for (int64_t s = 0; s < nseg; s++) a += pg[s * C + c], b += pb[s * C + c];
    if (dgamma) rg_cuda_put(dgamma, c, a, 1.0, gacc);
    if (dbeta) rg_cuda_put(dbeta, c, b, 1.0, bacc);
  }
}

/* ---- layernorm and rmsnorm from registers: a warp per row ----------------------------------
   For C % 4 == 0 a warp holds its row in registers, NV float4 per lane (float4 j of the
   row is column group j*32 + lane), so each row is read once with 512-byte coalesced loads.

   The forward does this for C <= 1024 (NV = 2, 4, 6 or 8), with the backward's float
   statistics (warp_stats) and float4 loads of gamma and beta. With row_stats' doubles it
   was no faster than norm_fwd_k at [8192, 768] (an H200), bound by the float-double
   conversions; now F32 rows of 768 run at ~0.9 of the copy's rate (bench/RESULTS.md).

   The backward does it for C <= 1024 (NV = 2, 4, 6 or 8). The strided kernels above took
   64.7 us on GPT-2's [8192, 768] (an H200; the traffic allows ~25): they read x four times
   and g twice a row, then both again for dgamma and dbeta, with a dozen or more float to
   double conversions an element (an H100/H200 does 16 an SM per clock, an eighth of the
   float rate). An earlier version of this kernel was slower still at 768 (99 us): it kept
   the sums of g xhat and g for the lane's 24 columns in 48 registers beside the row, in
   double per element, so one block of 8 warps fitted an SM. So now:
    - x, g and gamma (once per warp) are read into registers once each; dx is written once;
    - per element the arithmetic is float, and a lane's partial sums (at most 32 elements)
      are float; the sums across lanes are double (warp_sum): first the mean and sum dxh,
      then the variance of the centred values and sum dxh (x - mu) (mean(dxh xhat) is
      that times rstd / C): two rounds of shuffles a row, and no barrier;
    - g xhat and g are added into the warp's own slice of shared memory ([warps][2C]
      floats, rmsnorm [warps][C]; a lane touches only its columns: no races, and no
      registers held across rows); after its rows the block adds its warps' slices in
      warp order (double) into part[b] = [dgamma | dbeta] (rmsnorm: [dgamma]), and
      rg_cuda_col_final (reduce.cu) adds the blocks in order. Deterministic, no atomics.
   Blocks of 8 warps (6 at NV = 8, so the slices stay within the 48 KB a block gets
   without opting in), in chunks of rows so that there are about NORM_BWD_BLOCKS of them:
   two fit an SM (<= 128 registers a thread at 8 warps), one wave on an H200's 132 SMs,
   16 warps an SM with a row each (6 KB of x and g at C = 768) in flight. Expected at
   [8192, 768]: 50 MB read, 25 MB written and 3 MB of partials each way, ~27 us at ~3 TB/s
   (from 64.7; measured 40). */

#define NORM_WARPS 8         /* warps (rows at a time) per block */
#define NORM_BWD_ROWS 8      /* rows per block of the backward at least */
#define NORM_BWD_BLOCKS 256  /* about (a constant: the partials depend only on R and C) */

typedef struct norm_args {
  const float *x, *gamma, *beta, *g;
  void *out;             /* y (F32 or BF16), or dx (F32; may be NULL) */
  int64_t R, C, rchunk;  /* rchunk: the backward's rows per block */
  double eps;
  double *part;          /* the backward's [gridDim.x][ncol] partials; NULL: no dgamma,
                            dbeta wanted */
  const float *dxin;     /* the backward's dx_in (added into dx, ops.h), or NULL */
  rg_bf16 *out16;        /* the backward's dx rounded to BF16 as well (out[3]), or NULL */
} norm_args;

/* The lane's share of a row: float4 j is column group j*32 + lane, zeros past the row. */
template <int NV>
__device__ __forceinline__ void load_row(const float *p, int64_t C4, int lane, float4 (&v)[NV]) {
#pragma unroll
  for (int j = 0; j < NV; j++) {
    int64_t q = (int64_t)j * 32 + lane;
    v[j] = q < C4 ? ((const float4 *)p)[q] : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

/* Component e of v (e a constant once the loops are unrolled: stays in registers). */
__device__ __forceinline__ float at(const float4 &v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

__device__ __forceinline__ float sum4f(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ __forceinline__ float dot4f(float4 a, float4 b) {
  return (a.x * b.x + a.y * b.y) + (a.z * b.z + a.w * b.w);
}

/* (mu, rstd) of the row held by the warp, as the backward (norm_bwd_warp_k) computes them:
   per element in float, a lane's sums (at most 32 elements) in float, the sums across
   lanes in double; mu and rstd rounded to float, the values x - mu and its product use.
   So the forward's (x - mu) * rstd is the backward's xhat, bit for bit, and an element
   costs no float-double conversion: with row_stats' doubles (four conversions an element,
   at 16 an SM per clock on an H100/H200) the forward of [5461, 768] took ~13 us on an
   H200, where the copy of its bytes takes ~8.3. */
template <int NV, bool CENTRE>
__device__ __forceinline__ float2 warp_stats(const float4 (&xv)[NV], int64_t C, int lane,
                                             double eps) {
  int64_t C4 = C / 4;
  float mu = 0.f;
  if (CENTRE) {
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++) s += sum4f(xv[j]); /* zeros past the row */
    mu = (float)(warp_sum((double)s) / (double)C);
  }
  float v = 0.f;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    if ((int64_t)j * 32 + lane >= C4) continue;
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float d = at(xv[j], e) - mu;
      v += d * d;
    }
  }
  return make_float2(mu, (float)(1.0 / sqrt(warp_sum((double)v) / (double)C + eps)));
}

/* Row r of y from the warp's registers: (x - mu) * rstd, times gamma and plus beta where
   given (read as float4, the lane's columns of x), rounded once to TO. */
template <int NV, class TO>
__device__ __forceinline__ void norm_store(const norm_args &a, const float4 (&xv)[NV], float2 st,
                                           int64_t r, int lane) {
  int64_t C4 = a.C / 4;
  TO *y = (TO *)a.out + r * a.C;
#pragma unroll
  for (int j = 0; j < NV; j++) {
    int64_t q = (int64_t)j * 32 + lane;
    if (q >= C4) continue;
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; e++) v[e] = (at(xv[j], e) - st.x) * st.y;
    if (a.gamma) {
      float4 g = rg_ld4(a.gamma, q);
#pragma unroll
      for (int e = 0; e < 4; e++) v[e] = __fmul_rn(v[e], at(g, e));
    }
    if (a.beta) {
      float4 b = rg_ld4(a.beta, q);
#pragma unroll
      for (int e = 0; e < 4; e++) v[e] = __fadd_rn(v[e], at(b, e));
    }
    rg_st4(y, q, make_float4(v[0], v[1], v[2], v[3]));
  }
}

template <int NV, bool CENTRE, class TO>
__global__ void norm_fwd_warp_k(norm_args a) {
  int lane = threadIdx.x & 31;
  int64_t C4 = a.C / 4;
  for (int64_t r = (int64_t)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5); r < a.R;
       r += (int64_t)gridDim.x * NORM_WARPS) {
    float4 xv[NV];
    load_row<NV>(a.x + r * a.C, C4, lane, xv);
    float2 st = warp_stats<NV, CENTRE>(xv, a.C, lane, a.eps);
    norm_store<NV, TO>(a, xv, st, r, lane);
  }
}

/* Warps per block of the backward (see above). */
__host__ __device__ constexpr int bwd_warps(int nv) { return nv == 8 ? 6 : NORM_WARPS; }

/* dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)), dxh = g gamma (norm_bwd_k's), and
   the block's partial dgamma = sum g xhat, dbeta = sum g (see above). Rows r0 + wid,
   r0 + wid + warps, ... of the block's chunk; shared: [warps][ncol] floats when a.part. */
template <int NV, bool CENTRE>
__global__ void __launch_bounds__(32 * bwd_warps(NV), 2) norm_bwd_warp_k(norm_args a) {
  extern __shared__ float4 acc[];
  constexpr int nw = bwd_warps(NV);
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const int64_t C = a.C, C4 = C / 4, ncol4 = CENTRE ? 2 * C4 : C4;
  const int64_t r0 = (int64_t)blockIdx.x * a.rchunk, r1 = min(a.R, r0 + a.rchunk);
  float4 *ag = acc + wid * ncol4, *ab = ag + C4; /* the warp's dgamma | dbeta */
  float4 gm[NV];
  if (a.gamma) {
    load_row<NV>(a.gamma, C4, lane, gm);
  } else {
#pragma unroll
    for (int j = 0; j < NV; j++) gm[j] = make_float4(1.f, 1.f, 1.f, 1.f);
  }
  if (a.part) {
#pragma unroll
    for (int j = 0; j < NV; j++) {
      int64_t q = (int64_t)j * 32 + lane;
      if (q >= C4) continue;
      ag[q] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (CENTRE) ab[q] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  for (int64_t r = r0 + wid; r < r1; r += nw) {
    float4 xv[NV], gv[NV];
    load_row<NV>(a.x + r * C, C4, lane, xv);
    load_row<NV>(a.g + r * C, C4, lane, gv);
    double mu = 0, s1 = 0;
    if (CENTRE) { /* zeros past the row add nothing */
      float sx = 0.f, sd = 0.f;
#pragma unroll
      for (int j = 0; j < NV; j++) sx += sum4f(xv[j]), sd += dot4f(gv[j], gm[j]);
      mu = warp_sum((double)sx) / (double)C;
      s1 = warp_sum((double)sd);
    }
    const float muf = (float)mu;
    float sv = 0.f, sd = 0.f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      if ((int64_t)j * 32 + lane >= C4) continue;
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float d = at(xv[j], e) - muf;
        sv += d * d;
        sd += at(gv[j], e) * at(gm[j], e) * d;
      }
    }
    double rstd = 1.0 / sqrt(warp_sum((double)sv) / (double)C + a.eps);
    const float rs = (float)rstd, m1 = (float)(s1 / (double)C);
    const float m2 = (float)(warp_sum((double)sd) * rstd / (double)C);
    float4 *dr = a.out ? (float4 *)((float *)a.out + r * C) : NULL;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      int64_t q = (int64_t)j * 32 + lane;
      if (q >= C4) continue;
      float xh[4], g[4], dx[4];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        xh[e] = (at(xv[j], e) - muf) * rs;
        g[e] = at(gv[j], e);
        dx[e] = rs * (g[e] * at(gm[j], e) - m1 - xh[e] * m2);
      }
      if (a.dxin) { /* computed + dx_in, as the ADD it replaces rounds them */
        float4 d = ((const float4 *)(a.dxin + r * C))[q];
        dx[0] += d.x, dx[1] += d.y, dx[2] += d.z, dx[3] += d.w;
      }
      if (dr) dr[q] = make_float4(dx[0], dx[1], dx[2], dx[3]);
      if (a.out16) {
        __nv_bfloat162 *o2 = (__nv_bfloat162 *)(a.out16 + r * C) + 2 * q;
        o2[0] = __floats2bfloat162_rn(dx[0], dx[1]);
        o2[1] = __floats2bfloat162_rn(dx[2], dx[3]);
      }
      if (!a.part) continue;
      float4 t = ag[q];
      ag[q] = make_float4(t.x + g[0] * xh[0], t.y + g[1] * xh[1], t.z + g[2] * xh[2],
                          t.w + g[3] * xh[3]);
      if (CENTRE) {
        t = ab[q];
        ab[q] = make_float4(t.x + g[0], t.y + g[1], t.z + g[2], t.w + g[3]);
      }
    }
  }
  if (!a.part) return; /* uniform over the block */
  __syncthreads();
  const float *accf = (const float *)acc;
  const int64_t ncol = 4 * ncol4;
  for (int64_t c = threadIdx.x; c < ncol; c += blockDim.x) {
    double sum = 0;
    for (int w = 0; w < nw; w++) sum += accf[w * ncol + c];
    a.part[(int64_t)blockIdx.x * ncol + c] = sum;
  }
}

/* NV (2, 4, 6 or 8) float4 a lane for a row of C (a multiple of 4) held in a warp's
   registers, or 0 for C == 0 or C > 1024. */
int row_nv(int64_t C) {
  int64_t nv = cdiv(C / 4, 32);
  return C == 0 || nv > 8 ? 0 : (int)(nv + (nv & 1));
}

/* The forward's NV, where x, out, gamma and beta (where given) are read and written as
   float4 (every row starts 16-byte aligned; a bf16 output's groups of four are 8-byte
   aligned then), or 0. */
int norm_fwd_nv(int64_t C, const float *x, const void *out, const float *gamma,
                const float *beta) {
  return rows4(C, x, gamma) && rows4(C, out, beta) ? row_nv(C) : 0;
}

/* The backward's NV (x, g, dx and gamma as float4), or 0. */
int norm_bwd_nv(int64_t C, const float *x, const float *g, const float *dx,
                const float *gamma) {
  return rows4(C, x, g) && rows4(C, dx, gamma) ? row_nv(C) : 0;
}

/* The forward for an output of type TO: the warp kernels when nv, else the row kernels. */
template <bool CENTRE, class TO>
void launch_norm_fwd(cudaStream_t s, const norm_args &a, int nv) {
  if (nv) {
    unsigned grid = (unsigned)max64(1, min64(cdiv(a.R, NORM_WARPS), 1 << 20));
    auto kern = nv == 2   ? norm_fwd_warp_k<2, CENTRE, TO>
                : nv == 4 ? norm_fwd_warp_k<4, CENTRE, TO>
                : nv == 6 ? norm_fwd_warp_k<6, CENTRE, TO>
                          : norm_fwd_warp_k<8, CENTRE, TO>;
    kern<<<grid, 32 * NORM_WARPS, 0, s>>>(a);
    return;
  }
  rowcfg c = row_config(a.R, a.C);
  if (c.warp)
    norm_fwd_k<true, CENTRE><<<c.grid, c.threads, 0, s>>>(a.x, a.gamma, a.beta, (TO *)a.out,
                                                          a.R, a.C, a.eps);
  else
    norm_fwd_k<false, CENTRE><<<c.grid, c.threads, 0, s>>>(a.x, a.gamma, a.beta, (TO *)a.out,
                                                           a.R, a.C, a.eps);
}

/* Columns of the backward's partials: [dgamma | dbeta], rmsnorm [dgamma]. */
int64_t norm_ncol(int64_t C, bool centre) { return centre ? 2 * C : C; }

/* The backward from registers on grid blocks of a.rchunk rows. */
template <bool CENTRE>
void launch_norm_bwd_warp(cudaStream_t s, unsigned grid, const norm_args &a, int nv) {
  size_t slice = a.part ? (size_t)norm_ncol(a.C, CENTRE) * sizeof(float) : 0; /* a warp's */
  if (nv == 2)
    norm_bwd_warp_k<2, CENTRE><<<grid, 32 * bwd_warps(2), bwd_warps(2) * slice, s>>>(a);
  else if (nv == 4)
    norm_bwd_warp_k<4, CENTRE><<<grid, 32 * bwd_warps(4), bwd_warps(4) * slice, s>>>(a);
  else if (nv == 6)
    norm_bwd_warp_k<6, CENTRE><<<grid, 32 * bwd_warps(6), bwd_warps(6) * slice, s>>>(a);
  else
    norm_bwd_warp_k<8, CENTRE><<<grid, 32 * bwd_warps(8), bwd_warps(8) * slice, s>>>(a);
}

/* ---- id checks (embedding, cross-entropy) ------------------------------------------------- */

/* Scratch header of the kernels that check ids: the lowest failing position and a count.
   It sits at the start of scratch; data that follows starts 256 bytes in. */
typedef struct check_hdr {
  unsigned long long bad;
  unsigned long long count;
} check_hdr;
#define HDR_BYTES 256

__global__ void hdr_init_k(check_hdr *h) {
  h->bad = NO_BAD;
  h->count = 0;
}

/* Lowest position p with idx[p] outside [0, V). */
__global__ void ids_check_k(const int32_t *__restrict__ idx, int64_t n, int64_t V,
                            check_hdr *h) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
       p += (int64_t)gridDim.x * blockDim.x) {
    int32_t v = idx[p];
    if (v < 0 || v >= V) atomicMin(&h->bad, (unsigned long long)p);
  }
}

/* Called by one thread of a kernel after the check: reports its position, if any (a
   volatile load of the word other blocks' atomics set). */
__device__ __forceinline__ void report_bad(const check_hdr *h, const int32_t *idx, int64_t V,
                                           int code, rg_cuda_err *err, int node) {
  unsigned long long p = *(const volatile unsigned long long *)&h->bad;
  if (p != NO_BAD) rg_cuda_raise(err, code, node, idx[p], (long long)p, V);
}

/* ---- embedding --------------------------------------------------------------------------- */

/* A warp per position copies the table row (a bad id gives a row of zeros: the drain
   fails at this node, but what follows in it reads defined memory). */
__global__ void emb_fwd_k(const float *__restrict__ table, const int32_t *__restrict__ idx,
                          float *__restrict__ out, int64_t n, int64_t C, int64_t V,
                          const check_hdr *h, rg_cuda_err *err, int node) {
  if (blockIdx.x == 0 && threadIdx.x == 0) report_bad(h, idx, V, RG_CUDA_E_INDEX, err, node);
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t p = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); p < n;
       p += warps) {
    int32_t v = idx[p];
    bool ok = v >= 0 && v < V;
    const float *src = table + (ok ? (int64_t)v * C : 0);
    float *dst = out + p * C;
    for (int64_t c = lane; c < C; c += 32) dst[c] = ok ? src[c] : 0.f;
  }
}

/* Embedding backward, deterministic: positions are bucketed by id (counts, an exclusive
   scan, an unordered fill, then each position ranked within its bucket, which sorts it),
   and each table row sums its positions' gradient rows in position order. */

__global__ void zero_i32_k(int32_t *__restrict__ a, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    a[i] = 0;
}

__global__ void emb_hist_k(const int32_t *__restrict__ idx, int64_t n, int64_t V,
                           int32_t *__restrict__ counts, check_hdr *h) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
       p += (int64_t)gridDim.x * blockDim.x) {
    int32_t v = idx[p];
    if (v < 0 || v >= V)
      atomicMin(&h->bad, (unsigned long long)p);
    else
      atomicAdd(&counts[v], 1);
  }
}

/* offs[v] = exclusive prefix sum of counts (offs[V] = total), over blocks of SCAN_CHUNK
   counts: emb_part_k sums each block's counts into part[b]; emb_scan_k then scans its
   block from the sum of the parts before it, and zeroes the counts for reuse as fill
   cursors. Integer sums: the same offsets in any order. A thread takes SCAN_EPT
   consecutive counts. (One block of 1024 scanning all V took 93.5 us at GPT-2's 50304,
   ncu, warm L2, H200: one SM did the work of the whole GPU.) */
#define SCAN_EPT 8
#define SCAN_THREADS 256
#define SCAN_CHUNK (SCAN_EPT * SCAN_THREADS)

/* Exclusive prefix over the block of v (every thread's value); *total gets the block's sum. */
__device__ int32_t block_excl_scan(int32_t v, int32_t *total) {
  __shared__ int32_t wsum[33];
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int32_t incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int32_t y = __shfl_up_sync(FULL, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) wsum[wid] = incl;
  __syncthreads();
  if (wid == 0) {
    int32_t w = lane < nw ? wsum[lane] : 0, wi = w;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      int32_t y = __shfl_up_sync(FULL, wi, o);
      if (lane >= o) wi += y;
    }
    if (lane < nw) wsum[lane] = wi - w;
    if (lane == 31) wsum[32] = wi;
  }
  __syncthreads();
  *total = wsum[32];
  return wsum[wid] + incl - v;
}

__global__ void __launch_bounds__(SCAN_THREADS)
    emb_part_k(const int32_t *__restrict__ counts, int64_t V, int32_t *__restrict__ part) {
  int64_t i0 = (int64_t)blockIdx.x * SCAN_CHUNK + SCAN_EPT * threadIdx.x;
  int32_t local = 0, total;
#pragma unroll
  for (int q = 0; q < SCAN_EPT; q++) local += i0 + q < V ? counts[i0 + q] : 0;
  block_excl_scan(local, &total);
  if (threadIdx.x == 0) part[blockIdx.x] = total;
}

__global__ void __launch_bounds__(SCAN_THREADS)
    emb_scan_k(int32_t *__restrict__ counts, int32_t *__restrict__ offs, int64_t V,
               const int32_t *__restrict__ part) {
  __shared__ int32_t base;
  if (threadIdx.x < 32) { /* the parts before this block, summed by warp 0 */
    int32_t b = 0;
    for (unsigned j = threadIdx.x; j < blockIdx.x; j += 32) b += part[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) b += __shfl_xor_sync(FULL, b, o);
    if (threadIdx.x == 0) base = b;
  }
  int64_t i0 = (int64_t)blockIdx.x * SCAN_CHUNK + SCAN_EPT * threadIdx.x;
  int32_t c[SCAN_EPT], local = 0, total;
#pragma unroll
  for (int q = 0; q < SCAN_EPT; q++) {
    c[q] = i0 + q < V ? counts[i0 + q] : 0;
    local += c[q];
  }
  int32_t run = block_excl_scan(local, &total) + base; /* its barriers publish base */
#pragma unroll
  for (int q = 0; q < SCAN_EPT; q++)
    if (i0 + q < V) {
      offs[i0 + q] = run;
      run += c[q];
      counts[i0 + q] = 0;
    }
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) offs[V] = base + total;
}

__global__ void emb_fill_k(const int32_t *__restrict__ idx, int64_t n, int64_t V,
                           const int32_t *__restrict__ offs, int32_t *__restrict__ cursor,
                           int32_t *__restrict__ list) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
       p += (int64_t)gridDim.x * blockDim.x) {
    int32_t v = idx[p];
    if (v < 0 || v >= V) continue;
    list[offs[v] + atomicAdd(&cursor[v], 1)] = (int32_t)p;
  }
}

/* A position's rank in its (unordered) bucket is the number of smaller positions there:
   writing it at that rank sorts every bucket. */
__global__ void emb_rank_k(const int32_t *__restrict__ idx, int64_t n, int64_t V,
                           const int32_t *__restrict__ offs, const int32_t *__restrict__ list,
                           int32_t *__restrict__ sorted) {
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
       p += (int64_t)gridDim.x * blockDim.x) {
    int32_t v = idx[p];
    if (v < 0 || v >= V) continue;
    int32_t lo = offs[v], hi = offs[v + 1], rank = 0;
    for (int32_t j = lo; j < hi; j++) rank += list[j] < (int32_t)p;
    sorted[lo + rank] = (int32_t)p;
  }
}

#define EMB_COLS 4 /* columns per thread per pass in emb_acc_k */

/* A block per table row: dtable[v, c] = sum over its sorted positions p of g[p, c], in
   position order from 0.0f (the CPU's sequence of float adds). */
__global__ void emb_acc_k(const float *__restrict__ g, const int32_t *__restrict__ offs,
                          const int32_t *__restrict__ sorted, float *__restrict__ dt,
                          int64_t V, int64_t C, const int32_t *__restrict__ idx,
                          const check_hdr *h, rg_cuda_err *err, int node) {
  if (blockIdx.x == 0 && threadIdx.x == 0) report_bad(h, idx, V, RG_CUDA_E_INDEX, err, node);
  for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
    int32_t lo = offs[v], hi = offs[v + 1];
    for (int64_t c0 = 0; c0 < C; c0 += (int64_t)EMB_COLS * blockDim.x) {
      float acc[EMB_COLS];
#pragma unroll
      for (int q = 0; q < EMB_COLS; q++) acc[q] = 0.f;
      for (int32_t j = lo; j < hi; j++) {
        const float *row = g + (int64_t)sorted[j] * C;
#pragma unroll
        for (int q = 0; q < EMB_COLS; q++) {
          int64_t c = c0 + threadIdx.x + (int64_t)q * blockDim.x;
          if (c < C) acc[q] += row[c];
        }
      }
#pragma unroll
      for (int q = 0; q < EMB_COLS; q++) {
        int64_t c = c0 + threadIdx.x + (int64_t)q * blockDim.x;
        if (c < C) dt[v * C + c] = acc[q];
      }
    }
  }
}

/* A small table (V * n <= EMB_SCAN_MAX: a character vocabulary) skips the sort: block v
   finds its row's positions itself. Its EMB_WARPS warps take the positions in EMB_WARPS
   contiguous runs, 32 ids a ballot; a warp adds its matches' gradient rows in position
   order from 0.0f (lane l owns columns l, l + 32, ... of a pass of 32 * EMB_COLS), and the
   warps' sums are added in warp order: an order fixed by n, so the bits repeat (they
   differ from the CPU's single run by float rounding). Rows without a match get zeros.
   One kernel instead of seven. Block 0 raises for the lowest bad id. */
#define EMB_SCAN_MAX ((int64_t)1 << 22)
#define EMB_WARPS 8
__global__ void __launch_bounds__(32 * EMB_WARPS)
    emb_scan_acc_k(const float *__restrict__ g, const int32_t *__restrict__ idx,
                   float *__restrict__ dt, int64_t n, int64_t V, int64_t C, rg_cuda_err *err,
                   int node) {
  __shared__ float part[EMB_WARPS][32 * EMB_COLS];
  __shared__ int64_t bad_at[EMB_WARPS];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int32_t v = (int32_t)blockIdx.x;
  int64_t run = (n + EMB_WARPS - 1) / EMB_WARPS, p_lo = min(n, w * run);
  int64_t p_hi = min(n, p_lo + run);
  if (blockIdx.x == 0) { /* the lowest bad position: each warp its run's first, then min */
    int64_t first = -1;
    for (int64_t p0 = p_lo; p0 < p_hi && first < 0; p0 += 32) {
      bool in = p0 + lane < p_hi;
      int32_t id = in ? idx[p0 + lane] : 0;
      unsigned bad = __ballot_sync(FULL, in && (id < 0 || id >= V));
      if (bad) first = p0 + __ffs(bad) - 1;
    }
    if (lane == 0) bad_at[w] = first;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int k = 0; k < EMB_WARPS; k++)
        if (bad_at[k] >= 0) {
          rg_cuda_raise(err, RG_CUDA_E_INDEX, node, idx[bad_at[k]], bad_at[k], V);
          break;
        }
  }
  for (int64_t c0 = 0; c0 < C; c0 += 32 * EMB_COLS) {
    float acc[EMB_COLS];
#pragma unroll
    for (int q = 0; q < EMB_COLS; q++) acc[q] = 0.f;
    for (int64_t p0 = p_lo; p0 < p_hi; p0 += 32) {
      bool in = p0 + lane < p_hi;
      unsigned hit = __ballot_sync(FULL, in && idx[p0 + lane] == v);
      while (hit) {
        const float *row = g + (p0 + __ffs(hit) - 1) * C;
        hit &= hit - 1;
#pragma unroll
        for (int q = 0; q < EMB_COLS; q++) {
          int64_t c = c0 + lane + 32 * q;
          if (c < C) acc[q] += row[c];
        }
      }
    }
#pragma unroll
    for (int q = 0; q < EMB_COLS; q++) part[w][lane + 32 * q] = acc[q];
    __syncthreads();
    for (int j = threadIdx.x; j < 32 * EMB_COLS; j += blockDim.x) {
      int64_t c = c0 + j;
      float sum = 0.f;
      for (int k = 0; k < EMB_WARPS; k++) sum += part[k][j];
      if (c < C) dt[(int64_t)v * C + c] = sum;
    }
    __syncthreads();
  }
}

/* Fallback when the sort does not fit in scratch: zero, then scatter-add with float
   atomics (correct, but the order of the adds - and so the rounding - can vary). */
__global__ void zero_f32_k(float *__restrict__ a, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    a[i] = 0.f;
}

__global__ void emb_scatter_k(const float *__restrict__ g, const int32_t *__restrict__ idx,
                              float *__restrict__ dt, int64_t n, int64_t C, int64_t V,
                              const check_hdr *h, rg_cuda_err *err, int node) {
  if (blockIdx.x == 0 && threadIdx.x == 0) report_bad(h, idx, V, RG_CUDA_E_INDEX, err, node);
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t p = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); p < n;
       p += warps) {
    int32_t v = idx[p];
    if (v < 0 || v >= V) continue;
    for (int64_t c = lane; c < C; c += 32) atomicAdd(&dt[(int64_t)v * C + c], g[p * C + c]);
  }
}

/* ---- cross-entropy -----------------------------------------------------------------------
   The forward reads each logit once and saves each row's max and log sum exp(x - max)
   (ops.h: stats), so the backward reads the logits once too and writes dlogits =
   (exp(x - max - lse) - onehot) g / count, with the count the forward saved as well (no
   counting kernel). The logits may be BF16 (autocast's lm_head), and dlogits too: the
   same arithmetic in float, a BF16 dlogit rounded once. Both kernels move logits 8 at a
   time (16 bytes of bf16, 32 of float): a row of C = 50257 (GPT-2's vocabulary, odd)
   starts at any element, so each row is a scalar head up to its first element whose index
   is a multiple of 8 (16-byte aligned when the tensors start 16-byte aligned, which the
   launch checks), 8-element groups, and a scalar tail: at most 14 elements of a row go
   one by one.

   The forward on GPT-2's [8192, 50257] BF16 (823 MB) took 885 us on an H200, where one
   read is ~270 us at 3 TB/s: it read once, but folded each logit in alone (compare with
   the running max, branch, a full-precision expf, and on a new max a second one to
   rescale the sum, then a float-to-double conversion and a double add that waited on the
   previous one): ~25 instructions an element, two to four of them at a quarter rate or
   less (MUFU, F2F.F64), so it was bound by issue and latency, not memory. Now each
   thread keeps a running max m and a float sum s of exp(x - m); it loads CE_UNROLL
   groups of 8 (all in flight before any is used), takes their max, rescales s at most
   once (when the max grows) and adds 2^((x - m) log2 e) for each, one MUFU.EX2 an element,
   the 32 terms summed pairwise: ~6 instructions an element. m starts at -FLT_MAX, not
   -inf, so a logit of -inf (a masked class) adds 2^-inf = 0, not the NaN of -inf - -inf;
   a NaN or +inf logit makes the row's sum NaN, as on the CPU. A thread's s adds ~25
   group sums (relative error ~1e-6 at worst, ~1e-7 typical, against the CPU's double
   sum); the threads' pairs merge in float and the row's log is taken in double.
   Expected at [8192, 50257] BF16: issue ~80 us and MUFU ~100 us under the ~210-270 us of
   memory, so memory-bound: a block of 256 threads a row (up to CE_BLOCKS blocks, so the
   hardware balances rows over SMs), <= 64 registers so four blocks an SM, 64 bytes a
   thread in flight (F32: 128).

   The backward (419 us there: 823 MB read and 823 MB written, about the bandwidth)
   computes each dlogit alone, as the CPU does. */

typedef struct ce_args {
  const void *x; /* F32 or BF16, the kernels' TX */
  const int32_t *tg;
  int64_t N, C;
  int has_ignore;
  int64_t ignore;
} ce_args;

__device__ __forceinline__ bool ce_ignored(const ce_args &a, int32_t tv) {
  return a.has_ignore && (int64_t)tv == a.ignore;
}

#define CE_UNROLL 4    /* groups of 8 logits a thread loads before it uses any */
#define CE_BLOCKS 8192 /* blocks of the forward at most (ce_final_k adds their partials) */
#define LOG2E 1.4426950408889634f

/* exp(x - m); a result below 2^-126 is 0, which a sum holding a 1 does not see */
__device__ __forceinline__ float exp_from(float x, float m) { return rg_ex2((x - m) * LOG2E); }

/* v[0] + ... + v[N-1] added pairwise (N a power of two). */
template <int N> __device__ __forceinline__ float tree_sum(const float *v) {
  if constexpr (N == 1)
    return v[0];
  else
    return tree_sum<N / 2>(v) + tree_sum<N / 2>(v + N / 2);
}

/* Folds N logits (v is overwritten) into the running (max m, sum s of exp(x - m)): their
   max first, so s is rescaled at most once, then one exp each, added pairwise. */
template <int N> __device__ __forceinline__ void ms_add(float &m, float &s, float (&v)[N]) {
  float g = v[0];
#pragma unroll
  for (int e = 1; e < N; e++) g = fmaxf(g, v[e]);
  if (g > m) {
    s *= exp_from(m, g);
    m = g;
  }
#pragma unroll
  for (int e = 0; e < N; e++) v[e] = exp_from(v[e], m);
  s += tree_sum<N>(v);
}
__device__ __forceinline__ void ms_add1(float &m, float &s, float x) {
  float v[1] = {x};
  ms_add(m, s, v);
}

/* Merges another thread's pair. The sum of the two rescaled parts is commutative, so a
   butterfly leaves every lane with the same bits. */
__device__ __forceinline__ void ms_merge(float &m, float &s, float mo, float so) {
  float M = fmaxf(m, mo);
  s = (m == M ? s : s * exp_from(m, M)) + (mo == M ? so : so * exp_from(mo, M));
  m = M;
}

/* Elements of a row that starts at element e0 before its first element whose index is a
   multiple of 8 (at most C). */
__device__ __forceinline__ int64_t head8(int64_t e0, int64_t C) {
  return min64((8 - (e0 & 7)) & 7, C);
}

/* The row's (max, exp sum) over its group (a warp or the block); every thread gets it.
   The row starts at element e0; V: head, 8-element groups and tail (see above), else one
   element at a time. In block mode the warps' pairs are merged in warp order, after a
   leading barrier that makes back-to-back rows safe. */
template <bool WARP, bool V, class TX>
__device__ __forceinline__ void row_ms(const TX *xr, int64_t C, int64_t e0, int G, int t,
                                       float &m, float &s, float *shm, float *shs) {
  constexpr int U = WARP ? 2 : CE_UNROLL; /* a warp's row is <= 4 groups a lane */
  m = -FLT_MAX, s = 0.f;
  int64_t h = V ? head8(e0, C) : C, n8 = (C - h) / 8;
  for (int64_t c = t; c < h; c += G) ms_add1(m, s, rg_ld(xr, c));
  for (int64_t i = t; i < n8; i += U * G) {
    float v[U * 8];
#pragma unroll
    for (int k = 0; k < U; k++) { /* past the row: a group read again, counted as -inf */
      int64_t j = i + (int64_t)k * G;
      float u[8];
      rg_ld8(xr + h, min64(j, n8 - 1), u);
#pragma unroll
      for (int e = 0; e < 8; e++) v[8 * k + e] = j < n8 ? u[e] : -INFINITY;
    }
    ms_add(m, s, v);
  }
  for (int64_t c = h + 8 * n8 + t; c < C; c += G) ms_add1(m, s, rg_ld(xr, c));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    ms_merge(m, s, __shfl_xor_sync(FULL, m, o), __shfl_xor_sync(FULL, s, o));
  if (WARP) return;
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) shm[wid] = m, shs[wid] = s;
  __syncthreads();
  m = shm[0], s = shs[0];
  for (int w = 1; w < nw; w++) ms_merge(m, s, shm[w], shs[w]);
}

/* One dlogit: exp(x - max - lse) * coef, less coef at the target, as the CPU computes it. */
__device__ __forceinline__ float ce_grad(float x, float2 st, float coef, bool target) {
  float v = __fmul_rn(expf(__fsub_rn(__fsub_rn(x, st.x), st.y)), coef);
  return target ? __fsub_rn(v, coef) : v;
}

/* A row's dlogits, over its group (G threads, this one t): (exp(x - max - lse) -
   onehot(tv)) * coef, or zeros when the row takes no part. The logits are loaded either
   way (the row is in bounds), so the loads need not wait for the target that decides
   live. The row starts at element e0; V: head, 8-element groups and tail (see above), U
   groups a thread loaded before it stores any, else one element at a time. */
template <bool V, int U = 1, class TX, class TD>
__device__ __forceinline__ void ce_row_grad(const TX *xr, TD *d, int64_t C, int64_t e0, int G,
                                            int t, bool live, float2 st, float coef,
                                            int32_t tv) {
  auto one = [&](int64_t c) {
    float x = rg_ld(xr, c);
    rg_st(d, c, live ? ce_grad(x, st, coef, c == tv) : 0.f);
  };
  if (!V) {
    for (int64_t c = t; c < C; c += G) one(c);
    return;
  }
  int64_t h = head8(e0, C), n8 = (C - h) / 8;
  for (int64_t c = t; c < h; c += G) one(c);
#pragma unroll(U == 1 ? 4 : 1) /* one group at a time: unrolled instead */
  for (int64_t i = t; i < n8; i += U * G) { /* U groups loaded, then used */
    float v[U][8];
#pragma unroll
    for (int k = 0; k < U; k++)
      if (i + k * G < n8) rg_ld8(xr + h, i + k * G, v[k]);
#pragma unroll
    for (int k = 0; k < U; k++) {
      int64_t j = i + k * G, c = h + 8 * j;
      if (j >= n8) break;
#pragma unroll
      for (int e = 0; e < 8; e++) v[k][e] = live ? ce_grad(v[k][e], st, coef, c + e == tv) : 0.f;
      rg_st8(d + h, j, v[k]);
    }
  }
  for (int64_t c = h + 8 * n8 + t; c < C; c += G) one(c);
}

/* The count of rows that take part (not ignored), as a float, for the fused backward's
   coefficient when there is an ignore index (without one it is N: a bad target fails
   the drain anyway). One block. */
__global__ void ce_count_k(ce_args a, float *count) {
  __shared__ double sh[32];
  double c = 0;
  for (int64_t r = threadIdx.x; r < a.N; r += blockDim.x) c += !ce_ignored(a, a.tg[r]);
  c = grp_sum<false>(c, sh);
  if (threadIdx.x == 0) *count = (float)c;
}

/* Per block: the sum (double, rows in a fixed order) of max + log(sum) - x[t] over its
   rows and their count, to part[block] and cnt[block]; each row's statistics to stats;
   bad targets to the check word (ce_final_k adds the partials and reports them).
   FUSE (CROSS_ENTROPY's optional g and dlogits, ops.h; a warp's row of a few KB): each
   row's warp then writes the row's dlogits as CROSS_ENTROPY_BWD would, from the row read
   again (in L1 or L2), its statistics in every lane with the bits stats gets (row_ms
   gives every lane the same pair), the coefficient g / count with count N, or pre[0]
   with an ignore index (ce_count_k; a bad target fails the drain anyway). */
struct ce_fuse {
  const float *g, *pre;
  void *dx; /* the kernel's TD */
};
template <bool WARP, bool V, class TX, bool FUSE = false, class TD = float>
__global__ void __launch_bounds__(THREADS, 4)
    ce_fwd_k(ce_args a, check_hdr *h, float2 *__restrict__ stats, double *__restrict__ part,
             double *__restrict__ cnt, ce_fuse fu = {}) {
  __shared__ double wl[32], wc[32];
  __shared__ float shm[32], shs[32];
  double mine = 0, count = 0;
  float coef = 0.f;
  if (FUSE) {
    float n = a.has_ignore ? fu.pre[0] : (float)a.N;
    coef = n != 0.f ? fu.g[0] / n : 0.f;
  }
  ROW_LOOP(WARP, a.N, r, G, t) {
    int32_t tv = a.tg[r];
    const TX *xr = (const TX *)a.x + r * a.C;
    TD *d = FUSE ? (TD *)fu.dx + r * a.C : NULL;
    float m, s; /* the row is read whatever its target: its loads need not wait for tv */
    row_ms<WARP, V>(xr, a.C, r * a.C, G, t, m, s, shm, shs);
    bool ignored = ce_ignored(a, tv), bad = !ignored && (tv < 0 || tv >= a.C);
    if (ignored || bad) { /* uniform over the row's group */
      if (t == 0) stats[r] = make_float2(0.f, 0.f);
      if (bad && t == 0) atomicMin(&h->bad, (unsigned long long)r);
      if (FUSE) ce_row_grad<V>(xr, d, a.C, r * a.C, G, t, false, make_float2(0.f, 0.f), 0.f, 0);
      continue;
    }
    float xt = t == 0 ? rg_ld(xr, tv) : 0.f; /* in L1 or L2: the group has just read it */
    double ls = t == 0 || FUSE ? log((double)s) : 0.0;
    if (t == 0) {
      stats[r] = make_float2(m, (float)ls);
      mine += (double)m + ls - (double)xt;
      count += 1;
    }
    if (FUSE) ce_row_grad<V>(xr, d, a.C, r * a.C, G, t, true, make_float2(m, (float)ls), coef, tv);
  }
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (!WARP) nw = 1; /* only thread 0 holds a sum */
  if (lane == 0) wl[wid] = mine, wc[wid] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0, c = 0;
    for (int w = 0; w < nw; w++) s += wl[w], c += wc[w];
    part[blockIdx.x] = s;
    cnt[blockIdx.x] = c;
  }
}

/* One block of CE_FINAL threads after ce_fwd_k's nb: out = sum / count of its partials
   (0 with no row counted), stats[N] = (count, 0); reports the lowest bad target and puts
   the check word back for the next launch (rg_cuda_launch.ce_check). Thread i adds
   partials i, i + CE_FINAL, ... in order, then grp_sum adds the threads' sums: an order
   fixed by nb. */
#define CE_FINAL 1024
__global__ void __launch_bounds__(CE_FINAL)
    ce_final_k(ce_args a, check_hdr *h, float2 *__restrict__ stats,
               const double *__restrict__ part, const double *__restrict__ cnt, int nb,
               float *__restrict__ out, rg_cuda_err *err, int node) {
  __shared__ double sh[32];
  double s = 0, c = 0;
#pragma unroll 2
  for (int i = threadIdx.x; i < nb; i += CE_FINAL) s += part[i], c += cnt[i];
  s = grp_sum<false>(s, sh);
  c = grp_sum<false>(c, sh);
  if (threadIdx.x != 0) return;
  report_bad(h, a.tg, a.C, RG_CUDA_E_TARGET, err, node);
  h->bad = NO_BAD;
  out[0] = c != 0 ? (float)(s / c) : 0.f;
  stats[a.N] = make_float2((float)c, 0.f);
}

/* dlogits = (exp(x - max - lse) - onehot(t)) * g / count; ignored rows are zero, and so
   are rows with a bad target (the forward reported it; one that changed since is
   reported here), so what follows in a failing drain reads finite values. V: head,
   8-element groups (U at a time: CE_BWD_U_*) and tail (see above), else one element at a
   time. U > 2 runs only in blocks of THREADS, where its registers (84 at U = 4) fit. */
template <bool WARP, bool V, int U, class TX, class TD>
__global__ void __launch_bounds__(U > 2 ? THREADS : 1024)
    ce_bwd_k(ce_args a, const float *__restrict__ gl, const float2 *__restrict__ stats,
             TD *__restrict__ dx, rg_cuda_err *err, int node) {
  float count = stats[a.N].x;
  float coef = count != 0.f ? gl[0] / count : 0.f;
  ROW_LOOP(WARP, a.N, r, G, t) {
    int32_t tv = a.tg[r];
    float2 st = stats[r]; /* (0, 0) for a row the forward left out */
    bool ignored = ce_ignored(a, tv), bad = !ignored && (tv < 0 || tv >= a.C);
    ce_row_grad<V, U>((const TX *)a.x + r * a.C, dx + r * a.C, a.C, r * a.C, G, t,
                      !ignored && !bad, st, coef, tv); /* zeros when not live */
    if (bad && t == 0) rg_cuda_raise(err, RG_CUDA_E_TARGET, node, tv, r, a.C);
  }
}

/* ---- mse ----------------------------------------------------------------------------------- */

__global__ void mse_part_k(const float *__restrict__ p, const float *__restrict__ t, int64_t n,
                           int64_t cs, double *__restrict__ part) {
  __shared__ double sh[32];
  int64_t lo = (int64_t)blockIdx.x * cs, hi = min(n, lo + cs);
  double acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    double d = (double)p[i] - t[i];
    acc += d * d;
  }
  acc = grp_sum<false>(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

__global__ void mse_final_k(const double *__restrict__ part, int nb, int64_t n,
                            float *__restrict__ out) {
  __shared__ double sh[32];
  double acc = 0;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) acc += part[i];
  acc = grp_sum<false>(acc, sh);
  if (threadIdx.x == 0) out[0] = (float)(acc / (double)n); /* n == 0: NaN, as the CPU */
}

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

static rg_status softmax_common(rg_kargs *k, bool log_form) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int64_t C = last_dim(&k->in[0]);
  if (k->in[0].n == 0 || C == 0) return RG_OK;
  int64_t R = k->in[0].n / C;
  if (log_form)
    launch_softmax<true>(L, k, R, C);
  else
    launch_softmax<false>(L, k, R, C);
  return rg_cuda_check_launch(k, log_form ? "log_softmax" : "softmax");
}

rg_status rg_cuda_softmax(rg_kargs *k) { return softmax_common(k, false); }
rg_status rg_cuda_log_softmax(rg_kargs *k) { return softmax_common(k, true); }

static rg_status softmax_bwd_common(rg_kargs *k, bool log_form) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int64_t C = last_dim(&k->in[0]);
  if (k->in[0].n == 0 || C == 0) return RG_OK;
  int64_t R = k->in[0].n / C;
  if (log_form)
    launch_softmax_bwd<true>(L, k, R, C);
  else
    launch_softmax_bwd<false>(L, k, R, C);
  return rg_cuda_check_launch(k, log_form ? "log_softmax_bwd" : "softmax_bwd");
}

rg_status rg_cuda_softmax_bwd(rg_kargs *k) { return softmax_bwd_common(k, false); }
rg_status rg_cuda_log_softmax_bwd(rg_kargs *k) { return softmax_bwd_common(k, true); }

/* y F32 or BF16 (x, gamma, beta F32): the statistics and the affine map are computed as
   for F32, and a BF16 y is the F32 result rounded once. */
static rg_status norm_fwd(rg_kargs *k, bool centre) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const float *x = (const float *)k->in[0].p, *gamma = (const float *)k->in[1].p;
  const float *beta = centre ? (const float *)k->in[2].p : NULL;
  void *y = k->out[0].p;
  double eps = k->node->f[0];
  int64_t C = last_dim(&k->in[0]);
  if (k->in[0].n == 0 || C == 0) return RG_OK;
  int64_t R = k->in[0].n / C;
  int nv = norm_fwd_nv(C, x, y, gamma, beta);
  norm_args a = {x, gamma, beta, NULL, y, R, C, 0, eps, NULL, NULL, NULL};
  rg_cuda_typed(k->out[0].dtype, [&](auto to) {
    typedef typename decltype(to)::type TO;
    if (centre)
      launch_norm_fwd<true, TO>(L->stream, a, nv);
    else
      launch_norm_fwd<false, TO>(L->stream, a, nv);
  });
  return rg_cuda_check_launch(k, centre ? "layernorm" : "rmsnorm");
}

rg_status rg_cuda_layernorm(rg_kargs *k) { return norm_fwd(k, true); }

/* s = a + b (a F32, b of type TB) and y = layernorm(s), a warp a row held in registers
   (NV float4 a lane, as the backward's): a and b are read once, s and y written once.
   The sum is the float add of ADD, the statistics warp_stats', so s and y equal the two
   kernels' results. */
template <int NV, class TB, class TO>
__global__ void add_norm_warp_k(norm_args a, const TB *__restrict__ b, float *__restrict__ s) {
  int lane = threadIdx.x & 31;
  int64_t C4 = a.C / 4;
  for (int64_t r = (int64_t)blockIdx.x * NORM_WARPS + (threadIdx.x >> 5); r < a.R;
       r += (int64_t)gridDim.x * NORM_WARPS) {
    float4 xv[NV];
    load_row<NV>(a.x + r * a.C, C4, lane, xv);
#pragma unroll
    for (int j = 0; j < NV; j++) {
      int64_t q = (int64_t)j * 32 + lane;
      if (q >= C4) continue;
      float4 v = rg_ld4(b + r * a.C, q);
      xv[j] = make_float4(xv[j].x + v.x, xv[j].y + v.y, xv[j].z + v.z, xv[j].w + v.w);
      ((float4 *)(s + r * a.C))[q] = xv[j];
    }
    float2 st = warp_stats<NV, true>(xv, a.C, lane, a.eps);
    norm_store<NV, TO>(a, xv, st, r, lane);
  }
}

/* s = a + b, then y = layernorm(s) (ops.h): one pass (add_norm_warp_k) when a row fits a
   warp's registers (C <= 1024, rows of float4) and one of a, b is F32; else the two
   kernels in turn. */
rg_status rg_cuda_add_layernorm(rg_kargs *k) {
  const rg_tv *pa = &k->in[0], *pb = &k->in[1];
  if (pa->dtype != RG_F32) pa = &k->in[1], pb = &k->in[0]; /* the add commutes */
  int64_t C = last_dim(&k->in[0]);
  const float *gamma = (const float *)k->in[2].p, *beta = (const float *)k->in[3].p;
  int nv = pa->dtype == RG_F32 && rows4(C, pb->p, k->out[0].p)
               ? norm_fwd_nv(C, (const float *)pa->p, k->out[1].p, gamma, beta) : 0;
  if (nv && k->out[0].n) {
    rg_cuda_launch *L = rg_cuda_ctx(k);
    norm_args a = {(const float *)pa->p, gamma, beta, NULL, k->out[1].p, k->out[0].n / C, C, 0,
                   k->node->f[0], NULL, NULL, NULL};
    unsigned grid = (unsigned)max64(1, min64(cdiv(a.R, NORM_WARPS), 1 << 20));
    float *s = (float *)k->out[0].p;
    rg_cuda_typed(pb->dtype, [&](auto tb) {
      typedef typename decltype(tb)::type TB;
      const TB *b = (const TB *)pb->p;
      rg_cuda_typed(k->out[1].dtype, [&](auto to) {
        typedef typename decltype(to)::type TO;
        auto kern = nv == 2   ? add_norm_warp_k<2, TB, TO>
                    : nv == 4 ? add_norm_warp_k<4, TB, TO>
                    : nv == 6 ? add_norm_warp_k<6, TB, TO>
                              : add_norm_warp_k<8, TB, TO>;
        kern<<<grid, 32 * NORM_WARPS, 0, L->stream>>>(a, b, s);
      });
    });
    return rg_cuda_check_launch(k, "add_layernorm");
  }
  rg_kargs add, ln;
  rg__add_layernorm_split(k, &add, &ln);
  rg_status st = rg_cuda_add(&add);
  return st == RG_OK ? norm_fwd(&ln, true) : st;
}
rg_status rg_cuda_rmsnorm(rg_kargs *k) { return norm_fwd(k, false); }

/* Scratch, when dgamma or dbeta is wanted: for the kernels from registers the blocks'
   partials [nb][ncol]; for the strided ones row statistics (16 bytes a row), then the
   column partials [nseg][C] of dgamma and of dbeta when the rows are split.
   dgamma (dbeta) is added into in[3] (in[4]) when rg_backward folded it there (ops.h),
   with the error word as the add's guard (rg_cuda_put), else written to out[1] (out[2]). */
static rg_status norm_bwd(rg_kargs *k, bool centre) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const float *x = (const float *)k->in[0].p, *gamma = (const float *)k->in[1].p;
  const float *g = (const float *)k->in[2].p;
  bool addg = k->in[3].p != NULL, addb = centre && k->in[4].p != NULL;
  const rg_cuda_err *gacc = addg ? L->err : NULL, *bacc = addb ? L->err : NULL;
  float *dx = (float *)k->out[0].p;
  float *dgamma = (float *)(addg ? k->in[3].p : k->out[1].p);
  float *dbeta = !centre ? NULL : (float *)(addb ? k->in[4].p : k->out[2].p);
  double eps = k->node->f[0];
  int64_t C = last_dim(&k->in[0]);
  if (C == 0) return RG_OK;
  int64_t R = k->in[0].n / C;
  bool params = dgamma || dbeta;
  const float *dxin = (const float *)k->in[5].p; /* dx_in (ops.h) */
  rg_bf16 *dx16 = (rg_bf16 *)k->out[3].p; /* LAYERNORM_BWD's rounded copy of dx (ops.h) */
  int nv = !dxin || rows4(C, dxin, NULL) ? norm_bwd_nv(C, x, g, dx, gamma) : 0;
  if (dx16 && ((uintptr_t)dx16 & 7)) nv = 0; /* 4 BF16 a store */
  int64_t rchunk = max64(NORM_BWD_ROWS, cdiv(R, NORM_BWD_BLOCKS));
  int64_t nb = max64(1, cdiv(R, rchunk)), ncol = norm_ncol(C, centre);
  if (nv && (size_t)nb * (size_t)ncol * sizeof(double) <= L->scratch_bytes) {
    double *part = params ? (double *)L->scratch : NULL;
    norm_args a = {x, gamma, NULL, g, dx, R, C, rchunk, eps, part, dxin, dx16};
    if (centre)
      launch_norm_bwd_warp<true>(L->stream, (unsigned)nb, a, nv);
    else
      launch_norm_bwd_warp<false>(L->stream, (unsigned)nb, a, nv);
    if (params) rg_cuda_col_final(L, a.part, nb, ncol, C, 1.0, dgamma, dbeta, gacc, bacc);
    return rg_cuda_check_launch(k, centre ? "layernorm_bwd" : "rmsnorm_bwd");
  }
  size_t stat_bytes = ((size_t)R * sizeof(double2) + 255) / 256 * 256;
  if (params && stat_bytes > L->scratch_bytes) return no_scratch(k, stat_bytes);
  double2 *stats = params ? (double2 *)L->scratch : NULL;
  if (R > 0 && (dx || params)) {
    rowcfg c = row_config(R, C);
    auto kern = c.warp ? (centre ? norm_bwd_k<true, true> : norm_bwd_k<true, false>)
                       : (centre ? norm_bwd_k<false, true> : norm_bwd_k<false, false>);
    kern<<<c.grid, c.threads, 0, L->stream>>>(x, gamma, g, dx, stats, R, C, eps, dxin);
  }
  if (params) {
    /* Segments of rows: ~PER_THREAD rows per thread, enough blocks to fill the GPU, and
       partials within the scratch left after the statistics. */
    int64_t gx = cdiv(C, 32);
    int64_t cap = (int64_t)((L->scratch_bytes - stat_bytes) / (2 * sizeof(double)));
    int64_t nseg = cdiv(R, COL_Y * PER_THREAD);
    nseg = min64(nseg, max64(1, TARGET_BLOCKS / gx));
    nseg = min64(min64(nseg, 65535), cap / C);
    if (nseg < 1) nseg = 1;
    int64_t rseg = nseg > 1 ? cdiv(R, nseg) : R;
    if (nseg > 1) nseg = cdiv(R, rseg);
    double *pg = nseg > 1 ? (double *)((char *)L->scratch + stat_bytes) : NULL;
    double *pb = pg ? pg + nseg * C : NULL;
    norm_dparam_k<<<dim3((unsigned)gx, (unsigned)nseg), dim3(32, COL_Y), 0, L->stream>>>(
        x, g, stats, R, C, rseg, dgamma, dbeta, pg, pb, gacc, bacc);
    if (pg)
      seg_final_k<<<rg_cuda_blocks(C, THREADS), THREADS, 0, L->stream>>>(
          pg, pb, nseg, C, dgamma, dbeta, gacc, bacc);
  }
  if (dx16 && dx) { /* the strided kernels write F32 only: the copy as a cast */
    rg_kargs c = *k;
    c.in[0] = k->out[0], c.out[0] = k->out[3];
    rg_status st = rg_cuda_cast(&c);
    if (st != RG_OK) return st;
  }
  return rg_cuda_check_launch(k, centre ? "layernorm_bwd" : "rmsnorm_bwd");
}

rg_status rg_cuda_layernorm_bwd(rg_kargs *k) { return norm_bwd(k, true); }
rg_status rg_cuda_rmsnorm_bwd(rg_kargs *k) { return norm_bwd(k, false); }

rg_status rg_cuda_embedding(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const int32_t *idx = (const int32_t *)k->in[1].p;
  int64_t V = k->in[0].dims[0], C = k->in[0].dims[1], n = k->in[1].n;
  if (n == 0) return RG_OK;
  if (L->scratch_bytes < sizeof(check_hdr)) return no_scratch(k, sizeof(check_hdr));
  check_hdr *h = (check_hdr *)L->scratch;
  hdr_init_k<<<1, 1, 0, L->stream>>>(h);
  ids_check_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(idx, n, V, h);
  emb_fwd_k<<<(unsigned)max64(1, min64(cdiv(n, 8), 1 << 20)), THREADS, 0, L->stream>>>(
      (const float *)k->in[0].p, idx, (float *)k->out[0].p, n, C, V, h, L->err, L->node);
  return rg_cuda_check_launch(k, "embedding");
}

/* A small table: emb_scan_acc_k alone. Else scratch: header, counts [V+1], offsets [V+1],
   bucket list [n], sorted list [n], the scan's block sums (int32). Without room for them
   (or with more than 2^31 positions) the float-atomic fallback runs. */
rg_status rg_cuda_embedding_bwd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const int32_t *idx = (const int32_t *)k->in[0].p;
  const float *g = (const float *)k->in[1].p;
  float *dt = (float *)k->out[0].p;
  int64_t V = k->out[0].dims[0], C = k->out[0].dims[1], n = k->in[0].n;
  if (V > 0 && V <= 65535 && C > 0 && V * n <= EMB_SCAN_MAX) {
    emb_scan_acc_k<<<(unsigned)V, 32 * EMB_WARPS, 0, L->stream>>>(g, idx, dt, n, V, C,
                                                                  L->err, L->node);
    return rg_cuda_check_launch(k, "embedding_bwd");
  }
  if (L->scratch_bytes < HDR_BYTES) return no_scratch(k, HDR_BYTES);
  check_hdr *h = (check_hdr *)L->scratch;
  hdr_init_k<<<1, 1, 0, L->stream>>>(h);
  int64_t nb = max64(1, cdiv(V, SCAN_CHUNK)); /* the scan's blocks */
  size_t need = HDR_BYTES + sizeof(int32_t) * (2 * (size_t)(V + 1) + 2 * (size_t)n + nb);
  if (need > L->scratch_bytes || n >= INT32_MAX || V >= INT32_MAX || V * C == 0) {
    if (n > 0) ids_check_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(idx, n, V, h);
    zero_f32_k<<<rg_cuda_blocks(V * C, THREADS), THREADS, 0, L->stream>>>(dt, V * C);
    emb_scatter_k<<<(unsigned)max64(1, min64(cdiv(n, 8), 1 << 20)), THREADS, 0, L->stream>>>(
        g, idx, dt, n, C, V, h, L->err, L->node);
    return rg_cuda_check_launch(k, "embedding_bwd");
  }
  int32_t *counts = (int32_t *)((char *)L->scratch + HDR_BYTES), *offs = counts + (V + 1);
  int32_t *list = offs + (V + 1), *sorted = list + n, *part = sorted + n;
  unsigned pg = rg_cuda_blocks(max64(n, 1), THREADS);
  zero_i32_k<<<rg_cuda_blocks(V + 1, THREADS), THREADS, 0, L->stream>>>(counts, V + 1);
  emb_hist_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, counts, h);
  emb_part_k<<<(unsigned)nb, SCAN_THREADS, 0, L->stream>>>(counts, V, part);
  emb_scan_k<<<(unsigned)nb, SCAN_THREADS, 0, L->stream>>>(counts, offs, V, part);
  emb_fill_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, offs, counts, list);
  emb_rank_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, offs, list, sorted);
  unsigned threads = (unsigned)min64(256, cdiv(C, 32) * 32);
  emb_acc_k<<<(unsigned)min64(V, 1 << 20), threads, 0, L->stream>>>(g, offs, sorted, dt, V, C,
                                                                   idx, h, L->err, L->node);
  return rg_cuda_check_launch(k, "embedding_bwd");
}

static ce_args ce_shape(const rg_kargs *k) {
  ce_args a;
  a.x = k->in[0].p;
  a.tg = (const int32_t *)k->in[1].p;
  a.C = last_dim(&k->in[0]);
  a.N = k->in[1].n; /* one target per row, also when C == 0 (then every target is bad) */
  a.has_ignore = k->node->i[0] != 0;
  a.ignore = k->node->i[1];
  return a;
}

/* Scratch: per-block loss and count partials (doubles), and the fused backward's count;
   the check word is the context's own (rg_cuda_launch.ce_check), left clean by the last
   block. The fused backward (out[2], ops.h) of warp rows runs in ce_fwd_k; block rows
   run the backward's kernel after it: at GPT-2's rows (bf16 [8192, 50304] on the H200)
   the two kernels take 230 + 420 us, and every fused form measured slower (the row read
   again from L2, 679 us; a copy of it in shared memory, 649 us at two blocks an SM; the
   next row copied there by cp.async while the block works on the current one, 723 us at
   256 threads, 690 at 512). A warp per row (8 rows a block) up to C = 1024, else a
   block of 256 per row. A second kernel (ce_final_k) adds the partials: once every block
   of the first counted itself on an atomic after a fence, the last adding them, and that
   cost each block ~1 us at its end, where it loaded nothing (on an H200, F32 rows of 8192
   at 64 MiB: 24.9 us with it, 21.6 with the second kernel). */
rg_status rg_cuda_cross_entropy(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  ce_args a = ce_shape(k);
  bool warp = row_config(a.N, a.C).warp, fuse = k->out[2].p != NULL && warp;
  int64_t nb = max64(1, min64(cdiv(a.N, warp ? 8 : 1), CE_BLOCKS)); /* fixed by the shapes */
  size_t need = 2 * (size_t)nb * sizeof(double) + sizeof(float);
  if (need > L->scratch_bytes) return no_scratch(k, need);
  check_hdr *h = (check_hdr *)L->ce_check;
  double *part = (double *)L->scratch, *cnt = part + nb;
  float2 *stats = (float2 *)k->out[1].p;
  bool v = aligned16(a.x) && (!fuse || aligned16(k->out[2].p)); /* head, 8-groups, tail */
  float *out = (float *)k->out[0].p;
  rg_cuda_err *err = L->err;
  ce_fuse fu = {(const float *)k->in[2].p, (const float *)(cnt + nb), k->out[2].p};
  if (fuse && a.has_ignore) ce_count_k<<<1, 1024, 0, L->stream>>>(a, (float *)fu.pre);
  rg_cuda_typed(k->in[0].dtype, [&](auto tx) {
    rg_cuda_typed(fuse ? k->out[2].dtype : RG_F32, [&](auto td) {
      typedef typename decltype(tx)::type TX;
      typedef typename decltype(td)::type TD;
      unsigned g = (unsigned)nb;
      cudaStream_t s = L->stream;
      auto go = [&](auto kern) { kern<<<g, THREADS, 0, s>>>(a, h, stats, part, cnt, fu); };
      if (fuse && v) go(ce_fwd_k<true, true, TX, true, TD>);
      else if (fuse) go(ce_fwd_k<true, false, TX, true, TD>);
      else if (warp && v) go(ce_fwd_k<true, true, TX>);
      else if (warp) go(ce_fwd_k<true, false, TX>);
      else if (v) go(ce_fwd_k<false, true, TX>);
      else go(ce_fwd_k<false, false, TX>);
    });
  });
  ce_final_k<<<1, CE_FINAL, 0, L->stream>>>(a, h, stats, part, cnt, (int)nb, out, err, L->node);
  rg_status st = rg_cuda_check_launch(k, "cross_entropy");
  if (st != RG_OK || fuse || !k->out[2].p) return st;
  rg_kargs b; /* block rows: the backward's own kernel, in this node */
  rg__xent_bwd_args(k, &b);
  return rg_cuda_cross_entropy_bwd(&b);
}

/* Groups of 8 a thread loads before it stores any: two in warp rows; four in block rows
   of 256 threads (C <= 8192), all of a row of 8192's loads at once (on an H200,
   bench/bandwidth's F32 rows of 8192: at 64 MiB 47.5 us with one group at a time, 41.4
   with two or four; at 16 MiB 11.9 with two, 10.0 with four, three blocks an SM). Rows of
   1024 threads (C > 8192) load one group at a time: GPT-2's bf16 rows of 50304 were
   slower with two (a step 17.05 -> 17.21 ms). */
#define CE_BWD_U_WARP 2
#define CE_BWD_U_BLOCK 4

rg_status rg_cuda_cross_entropy_bwd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  ce_args a = ce_shape(k);
  if (a.N == 0) return RG_OK;
  rowcfg c = row_config(a.N, a.C);
  const float *gl = (const float *)k->in[2].p;
  const float2 *stats = (const float2 *)k->in[3].p;
  bool v = aligned16(a.x) && aligned16(k->out[0].p);
  rg_cuda_typed(k->in[0].dtype, [&](auto tx) {
    rg_cuda_typed(k->out[0].dtype, [&](auto td) {
      typedef typename decltype(tx)::type TX;
      typedef typename decltype(td)::type TD;
      auto go = [&](auto kern) {
        kern<<<c.grid, c.threads, 0, L->stream>>>(a, gl, stats, rg_cuda_ptr(&k->out[0], td),
                                                  L->err, L->node);
      };
      if (c.warp && v) go(ce_bwd_k<true, true, CE_BWD_U_WARP, TX, TD>);
      else if (c.warp) go(ce_bwd_k<true, false, 1, TX, TD>);
      else if (v && c.threads <= 256) go(ce_bwd_k<false, true, CE_BWD_U_BLOCK, TX, TD>);
      else if (v) go(ce_bwd_k<false, true, 1, TX, TD>);
      else go(ce_bwd_k<false, false, 1, TX, TD>);
    });
  });
  return rg_cuda_check_launch(k, "cross_entropy_bwd");
}

rg_status rg_cuda_mse(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int64_t n = k->in[0].n;
  int64_t nb = min64(LOSS_BLOCKS, max64(1, cdiv(n, FLAT_CHUNK)));
  nb = min64(nb, (int64_t)(L->scratch_bytes / sizeof(double)));
  if (nb < 1) return no_scratch(k, sizeof(double));
  double *part = (double *)L->scratch;
  mse_part_k<<<(unsigned)nb, THREADS, 0, L->stream>>>((const float *)k->in[0].p,
                                                      (const float *)k->in[1].p, n,
                                                      cdiv(max64(n, 1), nb), part);
  mse_final_k<<<1, THREADS, 0, L->stream>>>(part, (int)nb, n, (float *)k->out[0].p);
  return rg_cuda_check_launch(k, "mse");
}
