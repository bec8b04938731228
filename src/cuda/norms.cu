/*
 * norms.cu - CUDA kernels for layernorm and rmsnorm over the last axis, the residual add
 * fused with the layernorm that reads it, and their backward kernels. Mirrors
 * src/cpu/norms.c.
 *
 * Invariants:
 *  - A row is handled by one group of threads (rows.h: a warp when C <= 1024, else a
 *    block), or for rows of C % 4 == 0 up to 1024 by a warp holding the row in registers.
 *    Row statistics accumulate in double like the CPU (in the register kernels a lane's
 *    partial sums are float: see there), in an order fixed by the group size, so results
 *    repeat exactly.
 *  - Normalisation takes the mean first and the variance of the centred values.
 *  - dgamma and dbeta (sums across rows) never use float atomics: fixed per-block or
 *    per-segment partials go to scratch and a second kernel adds them in order.
 *  - Where the CPU computes a float product then a float sum, the kernels use __fmul_rn /
 *    __fadd_rn so nvcc does not fuse them into an FMA with different rounding.
 *  - Element types: y is F32 or BF16, and so is one of the fused add's inputs; the
 *    backward may also write dx rounded to BF16 (LAYERNORM_BWD's out[3]); every other
 *    tensor is F32. Those kernels are instantiated per type (cuda.h: rg_cuda_typed),
 *    compute in float as for F32 and round a BF16 result once.
 */
#include "rows.h"

#include <math.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define THREADS 256
/* Threads sharing one column in the column kernels (blockDim.y). */
#define COL_Y 8
/* Reduced rows per thread before a column sum is split into segments. */
#define PER_THREAD 64
#define TARGET_BLOCKS 4096

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
   statistics (warp_stats) and float4 loads of gamma and beta: with row_stats' doubles it
   was bound by the float-double conversions, no faster than norm_fwd_k.

   The backward does it for C <= 1024 (NV = 2, 4, 6 or 8). The strided kernels above read
   x four times and g twice a row, then both again for dgamma and dbeta, with a dozen or
   more float to double conversions an element (Hopper converts at an eighth of the float
   rate). Keeping the sums of g xhat and g for the lane's columns in registers beside the
   row, in double per element, would leave room for one block of 8 warps an SM. So:
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
   two fit an SM (<= 128 registers a thread at 8 warps), about one wave on a GPU of 132
   SMs, 16 warps an SM with a row each in flight. */

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
   costs no float-double conversion (row_stats' doubles take four an element, at an eighth
   of the float rate, and they bound the forward). */
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
} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

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
  if (params && stat_bytes > L->scratch_bytes) return rg_cuda_no_scratch(k, stat_bytes);
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
