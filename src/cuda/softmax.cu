/*
 * softmax.cu - CUDA kernels for softmax and log-softmax over the last axis, and their
 * backward kernels. Mirrors src/cpu/softmax.c.
 *
 * Invariants:
 *  - A row is handled by one group of threads (rows.h: a warp when C <= 1024, else a
 *    block); its sum of exponentials accumulates in double like the CPU, in an order fixed
 *    by the group size, so results repeat exactly.
 *  - A row subtracts its maximum before exp.
 */
#include "rows.h"

#include <math.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

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
   x three times with scalar loads. Each exp is computed once; a thread's partial sum is
   float (at most 32 terms), the block's double. */
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
