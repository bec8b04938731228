/*
 * rows.h - what the kernels that work row by row over the last axis share (softmax.cu,
 * norms.cu, embedding.cu, losses.cu): reductions over a row's group of threads, the row
 * loop and the launch shape of a row kernel, row alignment tests, and the check word of
 * the kernels that check ids.
 *
 * Invariants:
 *  - A tensor [..., C] is R = n / C contiguous rows of C. A row is handled by one group of
 *    threads: a warp when C <= 1024, else a whole block (row_config).
 *  - Reductions over a group add in an order fixed by the group's size, and every thread
 *    of the group gets the same bits, so results repeat exactly.
 *  - The check word holds the lowest failing position (integer atomicMin: deterministic),
 *    so the position a failing drain names is the one the CPU names.
 */
#ifndef RG_CUDA_ROWS_H
#define RG_CUDA_ROWS_H

#include "cuda.h"

#include <math.h>

namespace { /* file-private in each includer */

/* "no failing position yet" in the check word (positions are compared with atomicMin). */
#define NO_BAD 0xffffffffffffffffull

inline int64_t last_dim(const rg_tv *x) { return x->ndim ? x->dims[x->ndim - 1] : 1; }

/* ---- group reductions --------------------------------------------------------------------- */

/* Butterfly maximum: every lane ends with the same bits. */
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
  return v;
}

/* A row group is one warp (WARP) or the whole block. Every thread of the group gets the
   result; in block mode the leading barrier makes back-to-back calls safe. */
template <bool WARP> __device__ __forceinline__ double grp_sum(double v, double *sh) {
  return WARP ? warp_sum(v) : block_sum(v, sh);
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

inline rowcfg row_config(int64_t R, int64_t C) {
  rowcfg c;
  c.warp = C <= 1024;
  c.threads = c.warp ? 256 : (C > 8192 ? 1024 : 256);
  int64_t blocks = c.warp ? cdiv(R, 8) : R;
  c.grid = (unsigned)max64(1, min64(blocks, 1 << 20));
  return c;
}

inline bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Rows of C floats at p, q (NULL: none) can be read and written as float4: every row
   starts 16-byte aligned. Tensors start 256-aligned, so this is C % 4 == 0 in practice. */
inline bool rows4(int64_t C, const void *p, const void *q) {
  return C % 4 == 0 && aligned16(p) && aligned16(q);
}

/* ---- id checks (embedding, cross-entropy) ------------------------------------------------- */

/* The check word of the kernels that check ids: the lowest failing position (NO_BAD when
   none) and a count. Embedding's sits at the start of scratch; cross-entropy's is the
   context's own (rg_cuda_launch.ce_check). */
typedef struct check_hdr {
  unsigned long long bad;
  unsigned long long count;
} check_hdr;

/* Called by one thread of a kernel after the check: reports its position, if any (a
   volatile load of the word other blocks' atomics set). */
__device__ __forceinline__ void report_bad(const check_hdr *h, const int32_t *idx, int64_t V,
                                           int code, rg_cuda_err *err, int node) {
  unsigned long long p = *(const volatile unsigned long long *)&h->bad;
  if (p != NO_BAD) rg_cuda_raise(err, code, node, idx[p], (long long)p, V);
}

} /* namespace */

#endif
