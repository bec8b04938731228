/*
 * nn.cu - CUDA kernels for the neural-network ops that work row by row over the last axis:
 * softmax and log-softmax, layernorm and rmsnorm, embedding, attention, cross-entropy and
 * mse, with their backward kernels. Mirrors src/cpu/nn.c.
 *
 * Invariants:
 *  - A tensor [..., C] is R = n / C contiguous rows of C. A row is handled by one group of
 *    threads (a warp when C <= 1024, else a whole block); per-row sums accumulate in
 *    double like the CPU, in an order fixed by the group size, so results repeat exactly.
 *  - Sums across rows (dgamma, dbeta, the cross-entropy and mse means) never use float
 *    atomics: fixed per-block or per-segment partials go to scratch and a second kernel
 *    adds them in order. Embedding's backward sorts positions by id (a counting sort made
 *    stable by ranking) and sums each table row in position order, as the CPU does.
 *  - Softmax-like rows subtract the row maximum before exp; normalisation takes the mean
 *    first and the variance of the centred values.
 *  - Bad ids (embedding) and targets (cross-entropy) are found by a check kernel that
 *    keeps the lowest failing position (integer atomicMin, deterministic); the next kernel
 *    raises it through the error word and skips those rows, so nothing is written out of
 *    bounds and the position named is the one the CPU names.
 *  - Attention never stores the T x S matrix in global memory: a block keeps the scores
 *    of a tile of queries in shared memory; the backward pass saves per query row only the
 *    log-sum-exp and g.o in scratch and rebuilds probabilities per key tile, so dk and dv
 *    are summed over t in order without atomics.
 *  - Where the CPU computes a float product then a float sum, the kernels use __fmul_rn /
 *    __fadd_rn so nvcc does not fuse them into an FMA with different rounding.
 */
#include "cuda.h"

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
/* Blocks of the first pass of the loss means (their partials are added by one block). */
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
  if (c.warp)
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

template <bool WARP, bool CENTRE>
__global__ void norm_fwd_k(const float *__restrict__ x, const float *__restrict__ gamma,
                           const float *__restrict__ beta, float *__restrict__ y, int64_t R,
                           int64_t C, double eps) {
  __shared__ double shd[32];
  ROW_LOOP(WARP, R, r, G, t) {
    const float *xr = x + r * C;
    float *yr = y + r * C;
    double2 st = row_stats<WARP, CENTRE>(xr, C, eps, G, t, shd);
    for (int64_t c = t; c < C; c += G) {
      float v = (float)((xr[c] - st.x) * st.y);
      if (gamma) v = __fmul_rn(v, gamma[c]);
      if (beta) v = __fadd_rn(v, beta[c]);
      yr[c] = v;
    }
  }
}

/* dx = rstd (dxh - mean(dxh) - xhat mean(dxh xhat)), dxh = g gamma (rmsnorm drops the
   mean(dxh) term); the row statistics go to stats when the parameter gradients need them. */
template <bool WARP, bool CENTRE>
__global__ void norm_bwd_k(const float *__restrict__ x, const float *__restrict__ gamma,
                           const float *__restrict__ g, float *__restrict__ dx,
                           double2 *__restrict__ stats, int64_t R, int64_t C, double eps) {
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
      dr[c] = (float)(st.y * (dxh - a - xh * b));
    }
  }
}

/* dgamma[c] = sum_r g xhat, dbeta[c] = sum_r g: threadIdx.x over 32 columns, threadIdx.y
   and blockIdx.y (segments of rseg rows) over rows. With pg == NULL the block writes the
   results, else its partials at [segment * C + c]. */
__global__ void norm_dparam_k(const float *__restrict__ x, const float *__restrict__ g,
                              const double2 *__restrict__ stats, int64_t R, int64_t C,
                              int64_t rseg, float *__restrict__ dgamma,
                              float *__restrict__ dbeta, double *__restrict__ pg,
                              double *__restrict__ pb) {
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
    if (dgamma) dgamma[c] = (float)Ag;
    if (dbeta) dbeta[c] = (float)Ab;
  }
}

/* out[c] = sum of the segments' partials in segment order (out may be NULL). */
__global__ void seg_final_k(const double *__restrict__ pg, const double *__restrict__ pb,
                            int64_t nseg, int64_t C, float *__restrict__ dgamma,
                            float *__restrict__ dbeta) {
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C;
       c += (int64_t)gridDim.x * blockDim.x) {
    double a = 0, b = 0;
    for (int64_t s = 0; s < nseg; s++) a += pg[s * C + c], b += pb[s * C + c];
    if (dgamma) dgamma[c] = (float)a;
    if (dbeta) dbeta[c] = (float)b;
  }
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

/* Called by one thread after the check kernel: reports its position, if any. */
__device__ __forceinline__ void report_bad(const check_hdr *h, const int32_t *idx, int64_t V,
                                           int code, rg_cuda_err *err, int node) {
  unsigned long long p = h->bad;
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

/* One block of 1024: offs[v] = exclusive prefix sum of counts (offs[V] = total); counts
   are zeroed for reuse as fill cursors. Each thread scans a contiguous chunk. */
__global__ void emb_scan_k(int32_t *__restrict__ counts, int32_t *__restrict__ offs,
                           int64_t V) {
  __shared__ int32_t wsum[32];
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int64_t cs = cdiv(V, blockDim.x), lo = min(V, (int64_t)threadIdx.x * cs),
          hi = min(V, lo + cs);
  int32_t local = 0;
  for (int64_t i = lo; i < hi; i++) local += counts[i];
  int32_t incl = local;
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
    if (lane < nw) wsum[lane] = wi - w; /* exclusive prefix of the warp totals */
  }
  __syncthreads();
  int32_t run = wsum[wid] + incl - local;
  for (int64_t i = lo; i < hi; i++) {
    int32_t c = counts[i];
    offs[i] = run;
    run += c;
    counts[i] = 0;
  }
  if (threadIdx.x == blockDim.x - 1) offs[V] = run; /* the last thread's run is the total */
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

/* ---- cross-entropy ----------------------------------------------------------------------- */

typedef struct ce_args {
  const float *x;
  const int32_t *tg;
  int64_t N, C;
  int has_ignore;
  int64_t ignore;
} ce_args;

__device__ __forceinline__ bool ce_ignored(const ce_args &a, int32_t tv) {
  return a.has_ignore && (int64_t)tv == a.ignore;
}

/* Per block: the sum (double, rows in a fixed order) of -log softmax(x)[t] over its rows
   and their count, to part[block] and cnt[block]; bad targets go to the check word. */
template <bool WARP>
__global__ void ce_fwd_k(ce_args a, check_hdr *h, double *__restrict__ part,
                         double *__restrict__ cnt) {
  __shared__ double shd[32], wl[32], wc[32];
  __shared__ float shf[32];
  double mine = 0, count = 0;
  ROW_LOOP(WARP, a.N, r, G, t) {
    int32_t tv = a.tg[r];
    if (ce_ignored(a, tv)) continue; /* uniform over the row's group */
    if (tv < 0 || tv >= a.C) {
      if (t == 0) atomicMin(&h->bad, (unsigned long long)r);
      continue;
    }
    const float *xr = a.x + r * a.C;
    float m = -INFINITY;
    for (int64_t c = t; c < a.C; c += G) m = fmaxf(m, xr[c]);
    m = grp_max<WARP>(m, shf);
    double s = 0;
    for (int64_t c = t; c < a.C; c += G) s += expf(xr[c] - m);
    s = grp_sum<WARP>(s, shd);
    if (t == 0) {
      mine += (double)m + log(s) - (double)xr[tv];
      count += 1;
    }
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

/* Adds the nb partials in order: out = count ? sum / count : 0; reports a bad target. */
__global__ void ce_final_k(const double *__restrict__ part, const double *__restrict__ cnt,
                           int nb, const check_hdr *h, const int32_t *__restrict__ tg,
                           int64_t C, float *__restrict__ out, rg_cuda_err *err, int node) {
  __shared__ double sh[32];
  double s = 0, c = 0;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) s += part[i], c += cnt[i];
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  s = warp_sum(s);
  c = warp_sum(c);
  __syncthreads();
  if (lane == 0) sh[wid] = s;
  __syncthreads();
  s = warp_sum(lane < nw ? sh[lane] : 0.0);
  __syncthreads();
  if (lane == 0) sh[wid] = c;
  __syncthreads();
  c = warp_sum(lane < nw ? sh[lane] : 0.0);
  if (threadIdx.x == 0) {
    report_bad(h, tg, C, RG_CUDA_E_TARGET, err, node);
    out[0] = c != 0 ? (float)(s / c) : 0.f;
  }
}

/* Counts the rows that take part (integer atomics: exact) and finds the lowest bad one. */
__global__ void ce_count_k(ce_args a, check_hdr *h) {
  unsigned long long mine = 0;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < a.N;
       r += (int64_t)gridDim.x * blockDim.x) {
    int32_t tv = a.tg[r];
    if (ce_ignored(a, tv)) continue;
    if (tv < 0 || tv >= a.C)
      atomicMin(&h->bad, (unsigned long long)r);
    else
      mine++;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mine += __shfl_xor_sync(FULL, mine, o);
  if ((threadIdx.x & 31) == 0 && mine) atomicAdd(&h->count, mine);
}

/* dlogits = (softmax(x) - onehot(t)) * g / count; ignored rows are zero. */
template <bool WARP>
__global__ void ce_bwd_k(ce_args a, const float *__restrict__ gl, const check_hdr *h,
                         float *__restrict__ dx, rg_cuda_err *err, int node) {
  __shared__ double shd[32];
  __shared__ float shf[32];
  if (blockIdx.x == 0 && threadIdx.x == 0) report_bad(h, a.tg, a.C, RG_CUDA_E_TARGET, err, node);
  long long count = (long long)h->count;
  float coef = count ? gl[0] / (float)count : 0.f;
  ROW_LOOP(WARP, a.N, r, G, t) {
    int32_t tv = a.tg[r];
    float *d = dx + r * a.C;
    if (ce_ignored(a, tv)) {
      for (int64_t c = t; c < a.C; c += G) d[c] = 0.f;
      continue;
    }
    if (tv < 0 || tv >= a.C) continue; /* reported; nothing written */
    const float *xr = a.x + r * a.C;
    float m = -INFINITY;
    for (int64_t c = t; c < a.C; c += G) m = fmaxf(m, xr[c]);
    m = grp_max<WARP>(m, shf);
    double s = 0;
    for (int64_t c = t; c < a.C; c += G) s += expf(xr[c] - m);
    s = grp_sum<WARP>(s, shd);
    float inv = (float)(1.0 / s);
    for (int64_t c = t; c < a.C; c += G) {
      float v = __fmul_rn(__fmul_rn(expf(xr[c] - m), inv), coef);
      d[c] = c == tv ? __fsub_rn(v, coef) : v;
    }
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

/* ---- attention ------------------------------------------------------------------------- */
/* Tiles: a block of 256 threads owns a tile of rows (QT queries, or KB keys in the key
   pass) and walks the other side in tiles of KT keys (QB queries). Shared rows have an odd
   stride LD so a warp reading 32 different rows hits 32 banks. Each thread accumulates at
   most ACC outputs, so a tile has at most ACC * 256 = 2048 (row, d) outputs. */

#define ATT_THREADS 256
#define ACC 8
#define KT 32
#define QB 32

typedef struct att_dims {
  int64_t BH;
  int T, S, D, LD, SP; /* SP: score row stride, S rounded up to KT */
  float scale;
  int causal;
} att_dims;

/* Keys query t sees. */
__device__ __forceinline__ int att_keys(const att_dims &a, int t) {
  return a.causal ? min(a.S, t + 1) : a.S;
}

/* Loads rows [0, n) of a [*, D] matrix into shared rows of stride LD. */
__device__ __forceinline__ void load_rows(float *dst, const float *src, int n, int D, int LD) {
  for (int i = threadIdx.x; i < n * D; i += blockDim.x) {
    int r = i / D;
    dst[r * LD + (i - r * D)] = src[i];
  }
}

__device__ __forceinline__ float dot_sh(const float *a, const float *b, int D) {
  float s = 0.f;
  for (int d = 0; d < D; d++) s = fmaf(a[d], b[d], s);
  return s;
}

/* Scores of the block's queries against its keys, masked with -inf: sc[qi][j]. With
   gs/dps also dps[qi][j] = g_qi . v_j (the backward pass). */
template <int QT>
__device__ void att_scores(const att_dims &a, const float *Kb, const float *Vb, int t0, int nq,
                           int nk, const float *qs, const float *gs, float *ks, float *vs,
                           float *sc, float *dps) {
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  for (int j0 = 0; j0 < nk; j0 += KT) {
    int kn = min(KT, nk - j0);
    __syncthreads(); /* the previous tile is consumed; qs/gs are loaded */
    load_rows(ks, Kb + (int64_t)j0 * a.D, kn, a.D, a.LD);
    if (dps) load_rows(vs, Vb + (int64_t)j0 * a.D, kn, a.D, a.LD);
    __syncthreads();
    for (int qi = wid; qi < QT; qi += ATT_THREADS / 32) {
      int j = j0 + lane;
      bool on = qi < nq && lane < kn && (!a.causal || j <= t0 + qi);
      float s = -INFINITY, dp = 0.f;
      if (on) {
        s = dot_sh(qs + qi * a.LD, ks + lane * a.LD, a.D) * a.scale;
        if (dps) dp = dot_sh(gs + qi * a.LD, vs + lane * a.LD, a.D);
      }
      sc[qi * a.SP + j] = s;
      if (dps) dps[qi * a.SP + j] = dp;
    }
  }
  __syncthreads();
}

/* Row qi of sc becomes its probabilities (0 past its visible keys, up to nk rounded up to
   KT); returns the log-sum-exp, as the CPU's attn_probs. One warp per row. */
__device__ __forceinline__ float att_softmax_row(const att_dims &a, float *row, int ns,
                                                 int nkp) {
  int lane = threadIdx.x & 31;
  float m = -INFINITY;
  for (int j = lane; j < ns; j += 32) m = fmaxf(m, row[j]);
  m = warp_max(m);
  double s = 0;
  for (int j = lane; j < ns; j += 32) s += expf(row[j] - m);
  s = warp_sum(s);
  float lse = m + (float)log(s);
  for (int j = lane; j < nkp; j += 32) row[j] = j < ns ? expf(row[j] - lse) : 0.f;
  return lse;
}

/* The thread's outputs o = tid + i*256 of a tile of n rows: row ri[i] (-1 when past the
   tile) and column di[i]. */
__device__ __forceinline__ void att_outputs(int n, int D, int ri[ACC], int di[ACC]) {
#pragma unroll
  for (int i = 0; i < ACC; i++) {
    int o = threadIdx.x + i * ATT_THREADS;
    ri[i] = o < n * D ? o / D : -1;
    di[i] = o < n * D ? o - ri[i] * D : 0;
  }
}

/* acc[i] += sum_j w[qi][j0 + j] m[j][d] over the keys of tile j0 (kn rows of m in ms) that
   query qi sees (the CPU loops over visible keys only). j is the outer loop so the ACC
   sums advance as independent chains, each still in order of j. */
__device__ __forceinline__ void att_accumulate(const att_dims &a, const float *w,
                                               const float *ms, int j0, int kn, int t0,
                                               const int qi[ACC], const int di[ACC],
                                               float acc[ACC]) {
  int jn[ACC];
#pragma unroll
  for (int i = 0; i < ACC; i++) jn[i] = qi[i] < 0 ? 0 : min(kn, att_keys(a, t0 + qi[i]) - j0);
  for (int j = 0; j < kn; j++) {
#pragma unroll
    for (int i = 0; i < ACC; i++)
      if (j < jn[i]) acc[i] = fmaf(w[qi[i] * a.SP + j0 + j], ms[j * a.LD + di[i]], acc[i]);
  }
}

/* Forward: one block per (bh, tile of QT queries). Shared: qs [QT][LD], ts [KT][LD] (K then
   V tiles), sc [QT][SP]. */
template <int QT>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_fwd_k(const float *__restrict__ Q, const float *__restrict__ K,
               const float *__restrict__ V, float *__restrict__ O, att_dims a) {
  extern __shared__ float sm[];
  float *qs = sm, *ts = qs + QT * a.LD, *sc = ts + KT * a.LD;
  int64_t tiles = cdiv(a.T, QT), bh = blockIdx.x / tiles;
  int t0 = (int)(blockIdx.x % tiles) * QT, nq = min(QT, a.T - t0);
  int nk = a.causal ? min(a.S, t0 + nq) : a.S, nkp = (int)cdiv(nk, KT) * KT;
  const float *Kb = K + bh * a.S * a.D, *Vb = V + bh * a.S * a.D;
  int64_t qoff = (bh * a.T + t0) * a.D;
  load_rows(qs, Q + qoff, nq, a.D, a.LD);
  att_scores<QT>(a, Kb, NULL, t0, nq, nk, qs, NULL, ts, NULL, sc, NULL);
  for (int qi = threadIdx.x >> 5; qi < nq; qi += ATT_THREADS / 32)
    att_softmax_row(a, sc + qi * a.SP, att_keys(a, t0 + qi), nkp);
  float acc[ACC];
  int qi[ACC], di[ACC];
  att_outputs(nq, a.D, qi, di);
#pragma unroll
  for (int i = 0; i < ACC; i++) acc[i] = 0.f;
  for (int j0 = 0; j0 < nk; j0 += KT) {
    int kn = min(KT, nk - j0);
    __syncthreads(); /* probabilities written; the previous V tile consumed */
    load_rows(ts, Vb + (int64_t)j0 * a.D, kn, a.D, a.LD);
    __syncthreads();
    att_accumulate(a, sc, ts, j0, kn, t0, qi, di, acc);
  }
#pragma unroll
  for (int i = 0; i < ACC; i++)
    if (qi[i] >= 0) O[qoff + threadIdx.x + i * ATT_THREADS] = acc[i];
}

/* Backward pass 1, one block per (bh, tile of QT queries): probabilities p, dp = g.v,
   delta = sum p dp (saved with the log-sum-exp per query row), ds = p (dp - delta) scale,
   dq = sum_j ds_j k_j. Shared: qs, gs [QT][LD], ks, vs [KT][LD], sc, dps [QT][SP]. */
template <int QT>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_bwd_q_k(const float *__restrict__ Q, const float *__restrict__ K,
                 const float *__restrict__ V, const float *__restrict__ Gr,
                 float *__restrict__ dQ, float *__restrict__ lse, float *__restrict__ delta,
                 att_dims a) {
  extern __shared__ float sm[];
  float *qs = sm, *gs = qs + QT * a.LD, *ks = gs + QT * a.LD, *vs = ks + KT * a.LD;
  float *sc = vs + KT * a.LD, *dps = sc + QT * a.SP;
  int64_t tiles = cdiv(a.T, QT), bh = blockIdx.x / tiles;
  int t0 = (int)(blockIdx.x % tiles) * QT, nq = min(QT, a.T - t0);
  int nk = a.causal ? min(a.S, t0 + nq) : a.S, nkp = (int)cdiv(nk, KT) * KT;
  const float *Kb = K + bh * a.S * a.D, *Vb = V + bh * a.S * a.D;
  int64_t qoff = (bh * a.T + t0) * a.D;
  load_rows(qs, Q + qoff, nq, a.D, a.LD);
  load_rows(gs, Gr + qoff, nq, a.D, a.LD);
  att_scores<QT>(a, Kb, Vb, t0, nq, nk, qs, gs, ks, vs, sc, dps);
  int lane = threadIdx.x & 31;
  for (int qi = threadIdx.x >> 5; qi < nq; qi += ATT_THREADS / 32) {
    int ns = att_keys(a, t0 + qi);
    float *p = sc + qi * a.SP, *dp = dps + qi * a.SP;
    float l = att_softmax_row(a, p, ns, nkp);
    double dl = 0; /* each lane reads back only the entries it wrote */
    for (int j = lane; j < ns; j += 32) dl += (double)p[j] * dp[j];
    float dlt = (float)warp_sum(dl);
    for (int j = lane; j < nkp; j += 32) dp[j] = j < ns ? p[j] * (dp[j] - dlt) * a.scale : 0.f;
    if (lane == 0) {
      lse[bh * a.T + t0 + qi] = l;
      delta[bh * a.T + t0 + qi] = dlt;
    }
  }
  if (!dQ) return; /* uniform over the block */
  float acc[ACC];
  int qi[ACC], di[ACC];
  att_outputs(nq, a.D, qi, di);
#pragma unroll
  for (int i = 0; i < ACC; i++) acc[i] = 0.f;
  for (int j0 = 0; j0 < nk; j0 += KT) {
    int kn = min(KT, nk - j0);
    __syncthreads(); /* ds written; the previous K tile consumed */
    load_rows(ks, Kb + (int64_t)j0 * a.D, kn, a.D, a.LD);
    __syncthreads();
    att_accumulate(a, dps, ks, j0, kn, t0, qi, di, acc);
  }
#pragma unroll
  for (int i = 0; i < ACC; i++)
    if (qi[i] >= 0) dQ[qoff + threadIdx.x + i * ATT_THREADS] = acc[i];
}

/* Backward pass 2, one block per (bh, tile of KB keys): over the queries that see them, in
   order of t, dk = scale sum_t ds_t q_t and dv = sum_t p_t g_t, with p and ds rebuilt from
   the saved log-sum-exp and delta. Shared: ks, vs [KB][LD], qs, gs [QB][LD], P, DS
   [KB][QB+1]. */
template <int KB>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_bwd_kv_k(const float *__restrict__ Q, const float *__restrict__ K,
                  const float *__restrict__ V, const float *__restrict__ Gr,
                  const float *__restrict__ lse, const float *__restrict__ delta,
                  float *__restrict__ dK, float *__restrict__ dV, att_dims a) {
  extern __shared__ float sm[];
  float *ks = sm, *vs = ks + KB * a.LD, *qs = vs + KB * a.LD, *gs = qs + QB * a.LD;
  float *P = gs + QB * a.LD, *DS = P + KB * (QB + 1);
  int64_t tiles = cdiv(a.S, KB), bh = blockIdx.x / tiles;
  int s0 = (int)(blockIdx.x % tiles) * KB, nkb = min(KB, a.S - s0);
  int64_t koff = (bh * a.S + s0) * a.D, qbase = bh * a.T * a.D;
  const float *lb = lse + bh * a.T, *db = delta + bh * a.T;
  load_rows(ks, K + koff, nkb, a.D, a.LD);
  load_rows(vs, V + koff, nkb, a.D, a.LD);
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  float acck[ACC], accv[ACC];
  int si_[ACC], di[ACC];
  att_outputs(nkb, a.D, si_, di);
#pragma unroll
  for (int i = 0; i < ACC; i++) acck[i] = accv[i] = 0.f;
  for (int t0 = a.causal ? s0 : 0; t0 < a.T; t0 += QB) {
    int tn = min(QB, a.T - t0);
    __syncthreads(); /* ks/vs loaded; the previous query tile consumed */
    load_rows(qs, Q + qbase + (int64_t)t0 * a.D, tn, a.D, a.LD);
    load_rows(gs, Gr + qbase + (int64_t)t0 * a.D, tn, a.D, a.LD);
    __syncthreads();
    for (int si = wid; si < KB; si += ATT_THREADS / 32) {
      int t = t0 + lane, s = s0 + si;
      float p = 0.f, ds = 0.f;
      if (si < nkb && lane < tn && (!a.causal || t >= s)) {
        p = expf(dot_sh(qs + lane * a.LD, ks + si * a.LD, a.D) * a.scale - lb[t]);
        ds = p * (dot_sh(gs + lane * a.LD, vs + si * a.LD, a.D) - db[t]) * a.scale;
      }
      P[si * (QB + 1) + lane] = p;
      DS[si * (QB + 1) + lane] = ds;
    }
    __syncthreads();
    /* Queries [tb, tn) of the tile, in order; a causal key starts at t = s as on the CPU
       (the masked queries are skipped, not added as zeros). */
    int tb[ACC];
#pragma unroll
    for (int i = 0; i < ACC; i++)
      tb[i] = si_[i] < 0 ? tn : a.causal ? max(0, min(tn, s0 + si_[i] - t0)) : 0;
    for (int tt = 0; tt < tn; tt++) {
#pragma unroll
      for (int i = 0; i < ACC; i++) {
        if (tt >= tb[i]) {
          acck[i] = fmaf(DS[si_[i] * (QB + 1) + tt], qs[tt * a.LD + di[i]], acck[i]);
          accv[i] = fmaf(P[si_[i] * (QB + 1) + tt], gs[tt * a.LD + di[i]], accv[i]);
        }
      }
    }
  }
  int64_t o0 = koff + threadIdx.x;
#pragma unroll
  for (int i = 0; i < ACC; i++) {
    if (si_[i] < 0) continue;
    if (dK) dK[o0 + i * ATT_THREADS] = acck[i];
    if (dV) dV[o0 + i * ATT_THREADS] = accv[i];
  }
}

att_dims att_shape(const rg_kargs *k) {
  att_dims a;
  a.BH = k->in[0].dims[0] * k->in[0].dims[1];
  a.T = (int)k->in[0].dims[2];
  a.D = (int)k->in[0].dims[3];
  a.S = (int)k->in[1].dims[2];
  a.LD = a.D | 1;
  a.SP = (int)cdiv(a.S, KT) * KT;
  a.scale = (float)(1.0 / sqrt((double)a.D));
  a.causal = k->node->i[0] != 0;
  return a;
}

size_t fwd_smem(const att_dims &a, int qt) {
  return sizeof(float) * ((size_t)qt * a.LD + (size_t)KT * a.LD + (size_t)qt * a.SP);
}
size_t bwd_q_smem(const att_dims &a, int qt) {
  return sizeof(float) * (2 * (size_t)qt * a.LD + 2 * (size_t)KT * a.LD + 2 * (size_t)qt * a.SP);
}
size_t bwd_kv_smem(const att_dims &a, int kb) {
  return sizeof(float) * (2 * (size_t)kb * a.LD + 2 * (size_t)QB * a.LD +
                          2 * (size_t)kb * (QB + 1));
}

size_t smem_optin(void) {
  int dev = 0, v = 48 * 1024;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    v = 48 * 1024;
  return (size_t)v;
}

/* The largest tile in {16, 8, 4, 2, 1} rows whose outputs fit ACC per thread and whose
   shared memory fits the device; 0 if none. */
int pick_tile(const att_dims &a, size_t (*smem)(const att_dims &, int), size_t limit) {
  for (int r = 16; r >= 1; r >>= 1)
    if ((int64_t)r * a.D <= ACC * ATT_THREADS && smem(a, r) <= limit) return r;
  return 0;
}

/* Launches kernel kern with `bytes` of dynamic shared memory (opting in above 48 KB). */
template <typename Kern, typename... Args>
void launch_att(Kern kern, int64_t blocks, size_t bytes, cudaStream_t st, Args... args) {
  if (bytes > 48 * 1024)
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  kern<<<(unsigned)blocks, ATT_THREADS, bytes, st>>>(args...);
}

rg_status att_unsupported(rg_kargs *k, const att_dims &a, size_t need, size_t limit) {
  snprintf(k->msg, k->msgcap,
           "attention with S = %d keys and D = %d needs %zu bytes of shared memory per block "
           "(this device allows %zu) or D > %d: not supported by the CUDA backend yet",
           a.S, a.D, need, limit, ACC * ATT_THREADS);
  return RG_ERR_UNSUPPORTED;
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

static rg_status norm_fwd(rg_kargs *k, bool centre) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const float *x = (const float *)k->in[0].p, *gamma = (const float *)k->in[1].p;
  const float *beta = centre ? (const float *)k->in[2].p : NULL;
  float *y = (float *)k->out[0].p;
  double eps = k->node->f[0];
  int64_t C = last_dim(&k->in[0]);
  if (k->in[0].n == 0 || C == 0) return RG_OK;
  int64_t R = k->in[0].n / C;
  rowcfg c = row_config(R, C);
  if (c.warp && centre)
    norm_fwd_k<true, true><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, beta, y, R, C, eps);
  else if (c.warp)
    norm_fwd_k<true, false><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, beta, y, R, C, eps);
  else if (centre)
    norm_fwd_k<false, true><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, beta, y, R, C, eps);
  else
    norm_fwd_k<false, false><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, beta, y, R, C, eps);
  return rg_cuda_check_launch(k, centre ? "layernorm" : "rmsnorm");
}

rg_status rg_cuda_layernorm(rg_kargs *k) { return norm_fwd(k, true); }
rg_status rg_cuda_rmsnorm(rg_kargs *k) { return norm_fwd(k, false); }

/* Scratch: row statistics (16 bytes a row) when dgamma or dbeta is wanted, then the
   column partials [nseg][C] of dgamma and of dbeta when the rows are split. */
static rg_status norm_bwd(rg_kargs *k, bool centre) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const float *x = (const float *)k->in[0].p, *gamma = (const float *)k->in[1].p;
  const float *g = (const float *)k->in[2].p;
  float *dx = (float *)k->out[0].p, *dgamma = (float *)k->out[1].p;
  float *dbeta = centre ? (float *)k->out[2].p : NULL;
  double eps = k->node->f[0];
  int64_t C = last_dim(&k->in[0]);
  if (C == 0) return RG_OK;
  int64_t R = k->in[0].n / C;
  bool params = dgamma || dbeta;
  size_t stat_bytes = ((size_t)R * sizeof(double2) + 255) / 256 * 256;
  if (params && stat_bytes > L->scratch_bytes) return no_scratch(k, stat_bytes);
  double2 *stats = params ? (double2 *)L->scratch : NULL;
  if (R > 0 && (dx || params)) {
    rowcfg c = row_config(R, C);
    if (c.warp && centre)
      norm_bwd_k<true, true><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, g, dx, stats, R, C, eps);
    else if (c.warp)
      norm_bwd_k<true, false><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, g, dx, stats, R, C, eps);
    else if (centre)
      norm_bwd_k<false, true><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, g, dx, stats, R, C, eps);
    else
      norm_bwd_k<false, false><<<c.grid, c.threads, 0, L->stream>>>(x, gamma, g, dx, stats, R, C, eps);
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
        x, g, stats, R, C, rseg, dgamma, dbeta, pg, pb);
    if (pg)
      seg_final_k<<<rg_cuda_blocks(C, THREADS), THREADS, 0, L->stream>>>(pg, pb, nseg, C,
                                                                          dgamma, dbeta);
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

/* Scratch: header, counts [V+1], offsets [V+1], bucket list [n], sorted list [n] (int32).
   Without room for them (or with more than 2^31 positions) the float-atomic fallback runs. */
rg_status rg_cuda_embedding_bwd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const int32_t *idx = (const int32_t *)k->in[0].p;
  const float *g = (const float *)k->in[1].p;
  float *dt = (float *)k->out[0].p;
  int64_t V = k->out[0].dims[0], C = k->out[0].dims[1], n = k->in[0].n;
  if (L->scratch_bytes < HDR_BYTES) return no_scratch(k, HDR_BYTES);
  check_hdr *h = (check_hdr *)L->scratch;
  hdr_init_k<<<1, 1, 0, L->stream>>>(h);
  size_t need = HDR_BYTES + sizeof(int32_t) * (2 * (size_t)(V + 1) + 2 * (size_t)n);
  if (need > L->scratch_bytes || n >= INT32_MAX || V >= INT32_MAX || V * C == 0) {
    if (n > 0) ids_check_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(idx, n, V, h);
    zero_f32_k<<<rg_cuda_blocks(V * C, THREADS), THREADS, 0, L->stream>>>(dt, V * C);
    emb_scatter_k<<<(unsigned)max64(1, min64(cdiv(n, 8), 1 << 20)), THREADS, 0, L->stream>>>(
        g, idx, dt, n, C, V, h, L->err, L->node);
    return rg_cuda_check_launch(k, "embedding_bwd");
  }
  int32_t *counts = (int32_t *)((char *)L->scratch + HDR_BYTES), *offs = counts + (V + 1);
  int32_t *list = offs + (V + 1), *sorted = list + n;
  unsigned pg = rg_cuda_blocks(max64(n, 1), THREADS);
  zero_i32_k<<<rg_cuda_blocks(V + 1, THREADS), THREADS, 0, L->stream>>>(counts, V + 1);
  emb_hist_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, counts, h);
  emb_scan_k<<<1, 1024, 0, L->stream>>>(counts, offs, V);
  emb_fill_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, offs, counts, list);
  emb_rank_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, offs, list, sorted);
  unsigned threads = (unsigned)min64(256, cdiv(C, 32) * 32);
  emb_acc_k<<<(unsigned)min64(V, 1 << 20), threads, 0, L->stream>>>(g, offs, sorted, dt, V, C,
                                                                   idx, h, L->err, L->node);
  return rg_cuda_check_launch(k, "embedding_bwd");
}

/* Blocks are numbered in one grid dimension: at most one per query or key row. */
static rg_status attention_limits(rg_kargs *k, const att_dims &a) {
  if (a.BH * max64(a.T, a.S) > 0x7fffffff) {
    snprintf(k->msg, k->msgcap, "attention with %lld x %d rows is more than one launch covers",
             (long long)a.BH, a.T > a.S ? a.T : a.S);
    return RG_ERR_UNSUPPORTED;
  }
  return RG_OK;
}

rg_status rg_cuda_attention(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  att_dims a = att_shape(k);
  if (k->out[0].n == 0) return RG_OK;
  rg_status st = attention_limits(k, a);
  if (st != RG_OK) return st;
  size_t limit = smem_optin();
  int qt = pick_tile(a, fwd_smem, limit);
  if (!qt) return att_unsupported(k, a, fwd_smem(a, 1), limit);
  const float *Q = (const float *)k->in[0].p, *K = (const float *)k->in[1].p;
  const float *V = (const float *)k->in[2].p;
  float *O = (float *)k->out[0].p;
  int64_t blocks = a.BH * cdiv(a.T, qt);
  size_t bytes = fwd_smem(a, qt);
  switch (qt) {
  case 16: launch_att(attn_fwd_k<16>, blocks, bytes, L->stream, Q, K, V, O, a); break;
  case 8: launch_att(attn_fwd_k<8>, blocks, bytes, L->stream, Q, K, V, O, a); break;
  case 4: launch_att(attn_fwd_k<4>, blocks, bytes, L->stream, Q, K, V, O, a); break;
  case 2: launch_att(attn_fwd_k<2>, blocks, bytes, L->stream, Q, K, V, O, a); break;
  default: launch_att(attn_fwd_k<1>, blocks, bytes, L->stream, Q, K, V, O, a); break;
  }
  return rg_cuda_check_launch(k, "attention");
}

/* Scratch: the log-sum-exp and delta of every query row (8 bytes a row). */
rg_status rg_cuda_attention_bwd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  att_dims a = att_shape(k);
  const float *Q = (const float *)k->in[0].p, *K = (const float *)k->in[1].p;
  const float *V = (const float *)k->in[2].p, *G = (const float *)k->in[3].p;
  float *dQ = (float *)k->out[0].p, *dK = (float *)k->out[1].p, *dV = (float *)k->out[2].p;
  if (a.BH == 0 || a.D == 0 || (a.T == 0 && a.S == 0)) return RG_OK;
  rg_status st = attention_limits(k, a);
  if (st != RG_OK) return st;
  if (a.T == 0) { /* no queries: dk and dv are zero */
    int64_t n = a.BH * a.S * a.D;
    if (dK) zero_f32_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(dK, n);
    if (dV) zero_f32_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(dV, n);
    return rg_cuda_check_launch(k, "attention_bwd");
  }
  size_t rows = (size_t)(a.BH * a.T), need = 2 * rows * sizeof(float);
  if (need > L->scratch_bytes) return no_scratch(k, need);
  float *lse = (float *)L->scratch, *delta = lse + rows;
  size_t limit = smem_optin();
  int qt = pick_tile(a, bwd_q_smem, limit), kb = pick_tile(a, bwd_kv_smem, limit);
  if (!qt) return att_unsupported(k, a, bwd_q_smem(a, 1), limit);
  if (!kb) return att_unsupported(k, a, bwd_kv_smem(a, 1), limit);
  int64_t qblocks = a.BH * cdiv(a.T, qt);
  size_t qbytes = bwd_q_smem(a, qt);
  switch (qt) {
  case 16: launch_att(attn_bwd_q_k<16>, qblocks, qbytes, L->stream, Q, K, V, G, dQ, lse, delta, a); break;
  case 8: launch_att(attn_bwd_q_k<8>, qblocks, qbytes, L->stream, Q, K, V, G, dQ, lse, delta, a); break;
  case 4: launch_att(attn_bwd_q_k<4>, qblocks, qbytes, L->stream, Q, K, V, G, dQ, lse, delta, a); break;
  case 2: launch_att(attn_bwd_q_k<2>, qblocks, qbytes, L->stream, Q, K, V, G, dQ, lse, delta, a); break;
  default: launch_att(attn_bwd_q_k<1>, qblocks, qbytes, L->stream, Q, K, V, G, dQ, lse, delta, a); break;
  }
  if ((dK || dV) && a.S > 0) {
    int64_t kblocks = a.BH * cdiv(a.S, kb);
    size_t kbytes = bwd_kv_smem(a, kb);
    const float *cl = lse, *cd = delta;
    switch (kb) {
    case 16: launch_att(attn_bwd_kv_k<16>, kblocks, kbytes, L->stream, Q, K, V, G, cl, cd, dK, dV, a); break;
    case 8: launch_att(attn_bwd_kv_k<8>, kblocks, kbytes, L->stream, Q, K, V, G, cl, cd, dK, dV, a); break;
    case 4: launch_att(attn_bwd_kv_k<4>, kblocks, kbytes, L->stream, Q, K, V, G, cl, cd, dK, dV, a); break;
    case 2: launch_att(attn_bwd_kv_k<2>, kblocks, kbytes, L->stream, Q, K, V, G, cl, cd, dK, dV, a); break;
    default: launch_att(attn_bwd_kv_k<1>, kblocks, kbytes, L->stream, Q, K, V, G, cl, cd, dK, dV, a); break;
    }
  }
  return rg_cuda_check_launch(k, "attention_bwd");
}

static ce_args ce_shape(const rg_kargs *k) {
  ce_args a;
  a.x = (const float *)k->in[0].p;
  a.tg = (const int32_t *)k->in[1].p;
  a.C = last_dim(&k->in[0]);
  a.N = k->in[1].n; /* one target per row, also when C == 0 (then every target is bad) */
  a.has_ignore = k->node->i[0] != 0;
  a.ignore = k->node->i[1];
  return a;
}

/* Scratch: header, then per-block loss and count partials (doubles). */
rg_status rg_cuda_cross_entropy(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  ce_args a = ce_shape(k);
  rowcfg c = row_config(a.N, a.C);
  int64_t rows_per = c.warp ? 8 : 1;
  int64_t nb = max64(1, min64(cdiv(a.N, rows_per), LOSS_BLOCKS)); /* fixed by the shapes */
  size_t need = HDR_BYTES + 2 * (size_t)nb * sizeof(double);
  if (need > L->scratch_bytes) return no_scratch(k, need);
  check_hdr *h = (check_hdr *)L->scratch;
  double *part = (double *)((char *)L->scratch + HDR_BYTES), *cnt = part + nb;
  hdr_init_k<<<1, 1, 0, L->stream>>>(h);
  if (c.warp)
    ce_fwd_k<true><<<(unsigned)nb, c.threads, 0, L->stream>>>(a, h, part, cnt);
  else
    ce_fwd_k<false><<<(unsigned)nb, c.threads, 0, L->stream>>>(a, h, part, cnt);
  ce_final_k<<<1, THREADS, 0, L->stream>>>(part, cnt, (int)nb, h, a.tg, a.C,
                                          (float *)k->out[0].p, L->err, L->node);
  return rg_cuda_check_launch(k, "cross_entropy");
}

rg_status rg_cuda_cross_entropy_bwd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  ce_args a = ce_shape(k);
  if (a.N == 0) return RG_OK;
  if (L->scratch_bytes < sizeof(check_hdr)) return no_scratch(k, sizeof(check_hdr));
  check_hdr *h = (check_hdr *)L->scratch;
  hdr_init_k<<<1, 1, 0, L->stream>>>(h);
  ce_count_k<<<(unsigned)min64(rg_cuda_blocks(a.N, THREADS), 1024), THREADS, 0, L->stream>>>(a, h);
  rowcfg c = row_config(a.N, a.C);
  const float *gl = (const float *)k->in[2].p;
  float *dx = (float *)k->out[0].p;
  if (c.warp)
    ce_bwd_k<true><<<c.grid, c.threads, 0, L->stream>>>(a, gl, h, dx, L->err, L->node);
  else
    ce_bwd_k<false><<<c.grid, c.threads, 0, L->stream>>>(a, gl, h, dx, L->err, L->node);
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
