/*
 * attention.h - what the files of the CUDA attention share (attention.cu: the launchers;
 * attention_f32.cu, attention_mma.cu: resgrad's kernels for F32 and BF16 inputs;
 * attention_dnn.cu: cuDNN's fused attention): the shapes and operands of a call, and the
 * helpers both kernel files use. Scaled dot-product attention and its backward pass,
 * flash-attention style: the T x S matrix of scores never exists in memory, only 64 x 64
 * tiles of it in registers and shared memory. Mirrors
 * src/cpu/attention.c.
 *
 * Per head: q [T,D], k and v [S,D], scale = 1/sqrt(D), s = scale q.k; when causal, key j
 * is masked from query t when j > t. rg_attention_mask's masks (att_io: key padding, an
 * additive bias) enter each score of a tile as the tile is computed (mask_at: -inf for a
 * padded key, else + bias), through the kernels' MK instantiations, so the mask-free
 * kernels are compiled as before. A row with no visible key (S == 0, or every key masked)
 * gives o = 0 and lse = 0, and its p are 0 in the backward. Masked calls never go to
 * cuDNN (attention.cu), and the mma forward runs them at MR = 1. The same kernels serve rg_attention (heads dense in [B,H,T,D]) and
 * rg_attention_qkv (heads are D-column strips of the rows of [B,T,3C] and [B,T,C]): each
 * tensor is addressed through a layout, row t of head (b, h) at b sb + h sh + t sr.
 *
 * Precision follows the dtype. q, k and v (and o, in the backward) are all F32 or all
 * BF16; g and lse are F32; o has the inputs' dtype; dq, dk and dv are F32 or BF16 (a BF16
 * result is rounded once, to nearest even, when stored). Softmax statistics (running max,
 * sum, lse, delta = sum_d g o with o widened) and the exponentials are f32 throughout.
 * The six products (q k^T, p v; g v^T, ds k, ds^T q, p^T g) are:
 *  - F32 inputs: the f32 kernels (attention_f32.cu), FMA chains on f32 tiles, the
 *    reference path (within 1e-5 of the CPU). tf32 wmma (m16n16k8) through shared result
 *    tiles was slower than the FMA chains;
 *  - BF16 inputs: the bf16 kernels (attention_mma.cu), mma.sync m16n8k16 (bf16 in, f32
 *    accumulation) with every score-shaped tile in registers: q, k and v are used as they
 *    are in memory, g is rounded to bf16 once (backward kernel 1), p and ds as they become
 *    the A operand of the next product; ds is computed from the rounded p. (They replaced
 *    wmma m16n16k16 products through a shared f32 result tile, which were slower, also
 *    with f32 tensors rounded as the tiles filled.)
 *
 * Forward, one block per (bh, query tile): online softmax over the key tiles up to the
 * diagonal (m = running max of the scaled scores, l = running sum of exp(s - m), the
 * output accumulator rescaled by exp(m_old - m_new) when m grows), o = acc / l at the end,
 * and lse = m + log l per query row, the op's second output (0 for a row that sees no
 * key, as on the CPU: it is never read, and stays finite for check_finite). Masked
 * entries get s = -inf and p = 0 exactly (never exp(-inf - -inf)). They still meet the
 * products as 0 * v: a non-finite v (or k) of a key masked from row t but inside a tile
 * row t visits (the mma kernels: whose products row t's warp does not skip) makes row t
 * NaN, where the CPU, which skips masked keys, stays finite (the later rows that see that
 * key are non-finite on both).
 *
 * Backward, two kernels, no atomics (every output element is summed by one thread, or
 * one tensor-core fragment chain, in a fixed order, so results repeat exactly):
 *  1. per query tile: delta = sum_d g o from the forward's o, saved in scratch (4 bytes a
 *     query row); then, if dq is wanted, a loop over the key tiles: p = exp(s - lse) with
 *     the forward's lse, dp = g.v, ds = p (dp - delta) scale, dq = sum_j ds_j k_j.
 *  2. per key tile: over the query tiles that see its keys, p and ds again (from lse and
 *     delta), dv = sum_t p_t g_t and dk = sum_t ds_t q_t.
 * So the backward runs 7 tile products where the forward runs 2 (dq in kernel 2 would
 * save 2 of them, but only through float atomics or a [T/64, T, D] buffer per head).
 *
 * Shared memory above 48 KB a block is opted in at each launch (launch_att).
 */
#ifndef RG_CUDA_ATTENTION_H
#define RG_CUDA_ATTENTION_H

#include "cuda.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NT 256      /* threads per block of the f32 kernels: a 16 x 16 grid */
#define TR 64       /* rows of a tile (queries or keys) */
#define DMAX 128    /* largest supported head size */

typedef __nv_bfloat16 bf16;

/* Where the rows of one head live: row t of head bh = (b, h) starts at element
   b sb + h sh + t sr. rg_attention's [B,H,T,D] operands are dense (sr = D);
   rg_attention_qkv's heads are D-column strips of [B,T,3C] (sr = 3C) and of its [B,T,C]
   output (sr = C), so both ops run the same kernels and neither copies a head out. */
typedef struct att_lay { int64_t sb, sh, sr; } att_lay;

/* q and dq use lay q; k, v, dk and dv lay k; o and g lay o. */
typedef struct att_dims {
  int64_t BH, H;
  att_lay q, k, o;
  int T, S, D;
  int dn;     /* D rounded up to 16: the extent of the score dot products (zero past D) */
  int d8;     /* D rounded up to 8: the row stride of the bf16 copy of g in scratch */
  int causal;
  int ibf;    /* q, k, v (and o, in the backward) are BF16: the mma kernels; else F32 */
  int obf;    /* the results o, or dq, dk and dv, are BF16 (rounded once, when stored) */
  int vec;    /* every row of every tensor starts on a multiple of 4 elements and
                 D % 4 == 0: 4-element access (float4, or 8 bytes of bf16) */
  int v8;     /* BF16 q, k and v rows start on multiples of 8 elements (16 bytes) and
                 D % 8 == 0: their tiles fill by 16-byte cp.async */
  float scale;
} att_dims;

/* The operands and results of either op: head 0 of batch 0 of each, of the dtypes ibf and
   obf say (g and lse are always F32). lse [BH,T] is the forward's second output and the
   backward's input. */
typedef struct att_io {
  const void *q, *k, *v, *o;
  const float *g;
  void *out, *dq, *dk, *dv;
  float *lse;
  /* rg_attention's masks (ops.h), or NULL: key padding I32 [B,S]; the F32 bias, element
     (b, h, t, s) at b bst[0] + h bst[1] + t bst[2] + s bst[3] (rg__attn_bias_strides) */
  const int32_t *kp;
  const float *bias;
  int64_t bst[4];
} att_io;

/* The implementations, each for D <= 64 or D <= DMAX (its DM = 64 or 128), on T > 0 rows
   of queries and S >= 0 keys: the f32 kernels (attention_f32.cu) for F32 inputs, the mma
   kernels (attention_mma.cu) for BF16. delta: BH * T floats of scratch for the backward;
   gc: NULL, or BH * T * d8 bf16 of scratch for the mma kernels' copy of g. */
rg_status rg_cuda_att_f32_fwd(rg_kargs *k, const att_dims &a, const att_io &io);
rg_status rg_cuda_att_f32_bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *delta);
rg_status rg_cuda_att_mma_fwd(rg_kargs *k, const att_dims &a, const att_io &io);
rg_status rg_cuda_att_mma_bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *delta,
                              bf16 *gc);
#ifdef RG_HAVE_CUDNN
/* Runs the node on cuDNN's fused attention when it applies (*ran; attention_dnn.cu). */
rg_status rg_cuda_att_dnn(rg_kargs *k, const att_dims &a, const att_io &io, bool bwd,
                          bool *ran);
#endif

namespace { /* file-private in each includer */

/* Offset of head bh's first row in layout l. */
__device__ __forceinline__ int64_t head_at(const att_dims &a, const att_lay &l, int64_t bh) {
  return bh / a.H * l.sb + bh % a.H * l.sh;
}

/* The floats of a packed bf16 pair (element 2i in the low half). */
__device__ __forceinline__ float lo2(unsigned u) {
  __nv_bfloat162 v;
  memcpy(&v, &u, 4);
  return __low2float(v);
}
__device__ __forceinline__ float hi2(unsigned u) {
  __nv_bfloat162 v;
  memcpy(&v, &u, 4);
  return __high2float(v);
}
/* Elements [d, d + 4) of a row (p at d) into v (zero), v's elements past D left: with vec (D % 4 == 0,
   rows on 4 elements, so d + 3 < D) one aligned load, 16 bytes of float or 8 of bf16. */
__device__ __forceinline__ void load4(float4 &v, const float *p, int d, const att_dims &a) {
  if (a.vec) {
    v = *(const float4 *)p;
  } else {
    v.x = p[0];
    if (d + 1 < a.D) v.y = p[1];
    if (d + 2 < a.D) v.z = p[2];
    if (d + 3 < a.D) v.w = p[3];
  }
}
__device__ __forceinline__ void load4(float4 &v, const __nv_bfloat16 *p, int d,
                                      const att_dims &a) {
  if (a.vec) {
    uint2 u = *(const uint2 *)p;
    v = make_float4(lo2(u.x), hi2(u.x), lo2(u.y), hi2(u.y));
  } else {
    v.x = __bfloat162float(p[0]);
    if (d + 1 < a.D) v.y = __bfloat162float(p[1]);
    if (d + 2 < a.D) v.z = __bfloat162float(p[2]);
    if (d + 3 < a.D) v.w = __bfloat162float(p[3]);
  }
}

/* Tile filling in two steps, so all of a thread's global loads are in flight before its
   first shared store: fetch rows [0, n) (row stride ld, D columns, float or bf16) at src
   into registers (zero past row n and past D), then stash them in a shared tile of row
   stride LD. */
template <int DM, int N = NT, int P, typename T>
__device__ __forceinline__ void fetch(float4 (&r)[P], const T *src, int n, int64_t ld,
                                      const att_dims &a) {
#pragma unroll
  for (int k = 0; k < P; k++) {
    int i = (int)threadIdx.x + k * N, row = i / (DM / 4), d = i % (DM / 4) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row < n && d < a.D) load4(v, src + row * ld + d, d, a);
    r[k] = v;
  }
}
__device__ __forceinline__ void put4(float *p, const float4 &v) { *(float4 *)p = v; }
/* Rounded to bf16 (nearest even): 8 bytes, p 8-byte aligned. */
__device__ __forceinline__ void put4(__nv_bfloat16 *p, const float4 &v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  memcpy(&u.x, &lo, 4);
  memcpy(&u.y, &hi, 4);
  *(uint2 *)p = u;
}
template <int DM, int LD, int N = NT, typename T, int P>
__device__ __forceinline__ void stash(T *dst, const float4 (&r)[P]) {
#pragma unroll
  for (int k = 0; k < P; k++) {
    int i = (int)threadIdx.x + k * N, row = i / (DM / 4), d = i % (DM / 4) * 4;
    put4(dst + row * LD + d, r[k]);
  }
}

/* The block's tile of R query rows: heaviest first when causal (the last query tiles see
   the most keys), so the long blocks start in the first wave. */
__device__ __forceinline__ void query_tile(const att_dims &a, int R, int64_t &bh, int &t0,
                                           int &nq, int &nk) {
  int ntq = (int)cdiv(a.T, R);
  bh = (int64_t)blockIdx.x % a.BH;
  t0 = (ntq - 1 - (int)((int64_t)blockIdx.x / a.BH)) * R;
  nq = min(R, a.T - t0);
  nk = a.causal ? min(a.S, t0 + nq) : a.S; /* keys [0, nk) are visible to some row */
}

/* The masks' term of score (t, j) of head (b, h), t < T and j < S, as the CPU's
   attn_mask: -inf for a padded key, else the bias (0 without one). Read from global
   memory (L2) entry by entry as a tile needs it: no T x S matrix is made. */
__device__ __forceinline__ float mask_at(const att_io &io, const att_dims &a, int64_t b,
                                         int64_t h, int t, int j) {
  if (io.kp && io.kp[b * a.S + j]) return -INFINITY;
  return io.bias ? __ldg(io.bias + b * io.bst[0] + h * io.bst[1] + (int64_t)t * io.bst[2] +
                         (int64_t)j * io.bst[3])
                 : 0.f;
}

/* 1 / l, and 0 for a row with no visible key (l == 0; a NaN l stays NaN). */
__device__ __forceinline__ float inv_or_zero(float l) { return l == 0.f ? 0.f : 1.f / l; }

/* The rows of the tensor at p (elements of es bytes, layout l, D columns) start on
   multiples of n elements and D is one, so an n-element access stays inside a row. An
   absent tensor (NULL) passes. */
inline bool rows_on(const void *p, size_t es, const att_lay &l, int D, int n) {
  return (uintptr_t)p % (es * (size_t)n) == 0 && (l.sb | l.sh | l.sr | (int64_t)D) % n == 0;
}

inline size_t smem_optin(void) {
  int dev = 0, v = 48 * 1024;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    v = 48 * 1024;
  return (size_t)v;
}

/* Fails (RG_ERR_UNSUPPORTED) when a kernel needs more shared memory than the device has. */
inline rg_status smem_fits(rg_kargs *k, const att_dims &a, size_t need) {
  size_t limit = smem_optin();
  if (need <= limit) return RG_OK;
  snprintf(k->msg, k->msgcap,
           "attention with D = %d needs %zu bytes of shared memory per block; this device "
           "allows %zu", a.D, need, limit);
  return RG_ERR_UNSUPPORTED;
}

/* Launches kern on `blocks` blocks with `bytes` of dynamic shared memory (opting in above
   48 KB, which fails only for a size smem_fits let through: then that error is the
   status). */
template <typename Kern, typename... Args>
rg_status launch_att(rg_kargs *k, const att_dims &a, Kern kern, int64_t blocks, int threads,
                     size_t bytes, Args... args) {
  rg_status st = smem_fits(k, a, bytes);
  if (st != RG_OK) return st;
  if (bytes > 48 * 1024 &&
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
          cudaSuccess)
    return rg_cuda_check_launch(k, "attention (shared memory opt-in)");
  kern<<<(unsigned)blocks, threads, bytes, rg_cuda_ctx(k)->stream>>>(args...);
  return rg_cuda_check_launch(k, "attention");
}

} /* namespace */

#endif
