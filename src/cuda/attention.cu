/*
 * attention.cu - scaled dot-product attention and its backward pass, flash-attention
 * style: the T x S matrix of scores never exists in memory, only 64 x 64 tiles of it in
 * registers and shared memory. Mirrors the attention section of src/cpu/nn.c.
 *
 * Per head: q [T,D], k and v [S,D], scale = 1/sqrt(D), s = scale q.k; when causal, key j
 * is masked from query t when j > t. A row with no visible key (only when S == 0) gives
 * o = 0. The same kernels serve rg_attention (heads dense in [B,H,T,D]) and
 * rg_attention_qkv (heads are D-column strips of the rows of [B,T,3C] and [B,T,C]): each
 * tensor is addressed through a layout, row t of head (b, h) at b sb + h sh + t sr.
 *
 * Precision follows the dtype. q, k and v (and o, in the backward) are all F32 or all
 * BF16; g and lse are F32; o has the inputs' dtype; dq, dk and dv are F32 or BF16 (a BF16
 * result is rounded once, to nearest even, when stored). Softmax statistics (running max,
 * sum, lse, delta = sum_d g o with o widened) and the exponentials are f32 throughout.
 * The six products (q k^T, p v; g v^T, ds k, ds^T q, p^T g) are:
 *  - F32 inputs: the f32 kernels, FMA chains on f32 tiles, the reference path (within
 *    1e-5 of the CPU). tf32 wmma (m16n16k8) through shared result tiles measured slower
 *    than the FMA chains at GPT-2's shape (backward 1.93 against 1.68 ms, H200);
 *  - BF16 inputs: the bf16 kernels, mma.sync m16n8k16 (bf16 in, f32 accumulation) with
 *    every score-shaped tile in registers: q, k and v are used as they are in memory, g
 *    is rounded to bf16 once (backward kernel 1), p and ds as they become the A operand
 *    of the next product; ds is computed from the rounded p. (They replaced wmma
 *    m16n16k16 products through a shared f32 result tile: forward 0.290 ms, backward
 *    0.823 ms at GPT-2's shape, H200; with f32 tensors rounded as the tiles filled they
 *    took 0.147 and 0.539 ms.)
 *
 * f32 kernels. A block of 256 threads owns a tile of 64 rows (queries, or keys in the key
 * pass) and walks the other side in tiles of 64. Rows are copied from global memory into
 * shared tiles [64][LD], zero past the tensor's last row and past D; DM is the template
 * bound on D (64 or 128: D <= 128 is what the backend supports); LD = DM + 4 floats.
 * Threads form a 16 x 16 grid, ty = tid / 16, tx = tid % 16:
 *  - a 64 x 64 product A B^T over d (scores q.k, g.v) gives each thread a 4 x 4
 *    micro-tile: rows 4 ty + i, columns tx + 16 j; each entry is an FMA chain over
 *    d = 0, 1, ... (the same chain in every pass, so the backward rebuilds the forward's
 *    scores bit for bit);
 *  - a 64 x DM product P M (p.v, ds.k, ...) accumulates rows 4 ty + i, columns
 *    64 h + 4 tx + e of the output, summing over the 64 inner rows in order.
 * A row is spread over the 16 threads of one half-warp, so row maxima and sums are
 * 16-lane butterflies (every lane ends with the same bits). Strides DM + 4 and 64 + 4 are
 * 4 mod 32 floats: the float4 loads of a quarter-warp (8 different rows, or 8 consecutive
 * float4 of one row) hit 8 different groups of 4 banks, and the scalar stores of P hit 32
 * banks.
 *
 * bf16 kernels. A block of 128 threads (4 warps) owns a tile of 64 MR rows (queries in
 * the forward and kernel 1, keys in kernel 2), warp w the 16 MR rows from 16 MR w, and
 * walks the other side in tiles of 64. MR, the warp's m16 tiles, is a template parameter:
 * 1 or 2 (see "rows a warp" below). Shared tiles are bf16 [rows][DM + 8], zero past the
 * last row and past D. A tile of q, k or v is copied in 16-byte chunks (8 columns) by
 * cp.async (.cg: through L2 only) when a.v8 says its rows start 16-byte aligned and
 * D % 8 == 0; otherwise by 2-byte loads, at once (D = 17 or 100, odd strides). The tiles
 * a block walks are double-buffered: tile i + 1 is copied into the second buffer while
 * tile i is worked on. An m16 tile of a product A B^T against 64 rows of B (scores, dp)
 * is 8 m16n8 accumulator tiles, 32 f32 registers a lane: lane (g = lane / 4,
 * q = lane % 4) holds rows g and g + 8, columns 8 n + 2 q and + 1 of tile n, so a row
 * lives in the 4 lanes of a quad and its max is a 2-step butterfly. Per k step of 16 over
 * d (d < D rounded up to 16) the warp loads A's 16 x 16 block of each m16 tile with one
 * ldmatrix.x4 (the forward keeps its q fragments in registers instead, where MR DM <= 128)
 * and B's 64 x 16 with four; each B fragment feeds MR mma's. Accumulator tiles 2 k and
 * 2 k + 1, rounded to bf16 in pairs, are exactly the A fragment of inner rows
 * 16 k .. 16 k + 15 of the next product, so p and ds never leave registers; that
 * product's B operand (v, k, g or q: a [64 inner][DM] tile) is read with ldmatrix.trans,
 * again one fragment for MR mma's. Rows of DM + 8 bf16 are 16 bytes past a multiple of
 * 128 bytes, so the 8 row addresses of each ldmatrix matrix fall in 8 different groups of
 * 4 banks, and a quarter-warp's 8 chunks of a fill (128 consecutive bytes of one row) do
 * too. The key pass works on transposed tiles (rows keys, columns queries), a query tile
 * in MR column blocks of QC = 64 / MR: p^T and ds^T are then the A operands of
 * dv += p^T g and dk += ds^T q, and the query tile's lse and delta come from a shared [64]
 * each. Exponentials are base 2, one FMA and one ex2.approx.ftz an entry (2^(s log2(e) -
 * m); a p below 2^-126 flushes to 0); lse is still the natural log. A warp skips the
 * products of a walked tile (or column block) that none of its rows sees: causal, every
 * key after its last query; rows past T or S. The mask is evaluated per entry only on
 * tiles that cross the diagonal or the end of the keys or queries, as a bound on the
 * column a row sees. Results go straight from the accumulators to global memory (a pair
 * per lane: float2, or __nv_bfloat162).
 *
 * Rows a warp. At MR = 1 every ldmatrix.x4 of B feeds 2 mma's: a k step of q k^T loads 5
 * fragments for 8 mma's, one of p v 1 for 2, so shared-memory reads and ldmatrix issue,
 * not the tensor cores, set the pace. At MR = 2 the same loads serve twice the rows (q
 * k^T: 4 for 16 mma's with q in registers; p v: 1 for 4), and each copy of a walked tile
 * from L2 serves 128 rows instead of 64; the price is twice the accumulators, so two
 * blocks an SM (8 warps of 32 rows) instead of three (12 of 16). Kernel 2 at MR = 2 holds
 * dk and dv for 32 keys (128 registers at DM = 64), so it walks each query tile in two
 * column blocks of 32 (a 32 x 32 score tile: 32 registers), each ldmatrix.x4 of B still
 * feeding 4 mma's. At DM = 128, MR = 2 spills in kernel 1 (104 bytes) and cannot fit
 * kernel 2's accumulators. Measured on an H200 at GPT-2 124M's shape (B 8, H 12, T 1024,
 * D 64, causal, bf16; bench/attention --qkv --bf16): forward 0.126 ms at MR = 1, 0.117
 * at MR = 2; backward 0.448 ms with both kernels at MR = 1, 0.450-0.475 with either or
 * both at MR = 2 (the occupancy lost eats the loads saved). So the forward runs MR = 2
 * and the backward MR = 1. The backward's MR = 2 forms passed test_cuda on the H200
 * when forced; they stay as templates, not instantiated, for tuning on other GPUs.
 * The backward is latency-bound (ncu: 2-3 warps a scheduler, under one eligible, tensor
 * pipe ~25% busy), so at DM = 64 its kernels are fitted for more blocks an SM: kernel 1
 * four (128 registers), kernel 2 three (168), where they had three and two; per call
 * (ncu, same shape) 124 -> 116 us and 166 -> 141 us. Kernel 1 also makes delta from the
 * loads of its g tile (gfill's DELTA) instead of a warp's serial pass over 16 rows of g and
 * o: 167 -> 124 us. Holding kernel 1's q and g fragments in registers (as the forward
 * holds q) measured no faster; splitting kernel 2's query tiles into two column blocks at
 * MR = 1 measured slower (151 us).
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
 * bf16: kernel 1 reads all of g anyway (its G tile, rounded as it fills, and delta), so
 * it also writes the rounded tile to scratch after delta, 256-byte aligned, as dense rows
 * of D rounded up to 8 (zero past D): [BH, T, d8], 16-byte aligned whatever g's layout.
 * Kernel 2 copies its G tiles from there by cp.async (GPT-2: 12.6 MB of the 64 MiB
 * scratch); where the copy does not fit it rounds f32 g itself, at once.
 *
 * Resources per block, shared memory in KB for DM = 64 / 128:
 *            forward              kernel 1                 kernel 2
 *   f32      68 / 116: Q K V P    85 / 149: Q G K V P      102 / 166: K V Q G Pt Dt
 *   bf16     45 / 85: Q 2x(K V)   54 / 102: Q G 2x(K V) Dl 55 / 103: K V 2x(Q G Ls Dl)
 *   MR = 2   54 / 102             72 / -                   73 / -
 * Above 48 KB each launch opts in. f32: at DM = 64 two blocks fit an SM, and
 * __launch_bounds__ caps registers at 128 for it; at DM = 128 one block fits, registers
 * are not capped (ptxas -v, nvcc 13, forward / kernel 1 / kernel 2: 122 / 128 / 128 and
 * 166 / 168 / 230, no spills). bf16 (an H100 / H200 SM: 64 K registers, 228 KB of shared
 * memory), registers used (ptxas -v, nvcc 13, no spills), forward / kernel 1 / kernel 2:
 *   MR = 1, DM = 64    127 / 128 / 165   four blocks an SM, three for kernel 2
 *   MR = 1, DM = 128   223 / 228 / 255   two blocks an SM
 *   MR = 2, DM = 64    249 / 255 / 250   two blocks an SM
 *   MR = 2, DM = 128   255 / - / -       two blocks an SM
 * At MR = 1 and DM = 64 the forward and kernel 1 are capped at 128 registers, for four
 * blocks (4 x 55 KB of shared memory fits), and kernel 2 at 168 for three (a fourth's
 * 57 KB would not); every other variant is capped for two (255).
 * Capping the MR = 2 forward and kernel 1 at 168 for three blocks spills 100 and 194
 * bytes. The f32 loads of g are made 4 float4 a thread at a time, so they fit beside the
 * accumulators.
 *
 * Barriers, f32: every loop iteration is  sync (the previous iteration's readers are
 * done) -> fill tiles -> sync -> scores, write P -> sync -> products from P. bf16: one a
 * loop iteration. Before the loop each thread issues its copies of the block's own tiles
 * and of walked tile 0 into buffer 0 (and fills the rest synchronously: g, lse, delta).
 * Iteration i: cp_wait (this thread's copies of tile i, the only ones in flight, have
 * landed) -> sync: tile i is whole in buffer i % 2 for every warp, and every warp has
 * finished iteration i - 1, the last reader of buffer (i + 1) % 2 -> issue tile i + 1
 * into buffer (i + 1) % 2 (cp.async, or stores for zeros and the synchronous fills) ->
 * the products of tile i, reading only buffer i % 2 and the block's own tiles; kernel 2
 * then stores tile i + 1's lse and delta, loaded before its products, into buffer
 * (i + 1) % 2. So a buffer is written only between the barrier after its last read and
 * the barrier before its next read. A warp that skips a tile's products still issues its
 * share of the next copies and meets every barrier (the skip is after them, and inside
 * an iteration). A block that walks no tile still waits for its copies before it exits;
 * nothing shared is read after the loop.
 */
#include "cuda.h"
#ifdef RG_HAVE_CUDNN
#include "dnn_att.h"
#endif

#include <math.h>
#include <stdio.h>
#include <string.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define FULL 0xffffffffu
#define NT 256      /* threads per block of the f32 kernels: a 16 x 16 grid */
#define TR 64       /* rows of a tile (queries or keys) */
#define DMAX 128    /* largest supported head size */
/* Blocks per SM the register allocation must allow: two at DM = 64 (their shared memory
   fits twice), one at DM = 128 (it does not, so registers need not be capped). */
#define MINB(DM) ((DM) == 64 ? 2 : 1)

typedef __nv_bfloat16 bf16;

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

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
} att_io;

/* Shared tiles of the f32 kernels, in floats. */
template <int DM> struct tl {
  static constexpr int LD = DM + 4;   /* row stride of q, k, v, g tiles */
  static constexpr int LDP = TR + 4;  /* row stride of the P / dS tiles */
  static constexpr int SIZE = TR * LD;
  static constexpr int PSIZE = TR * LDP;
  static constexpr int H = DM / 64;   /* float4 per thread per output row */
};

/* float4 one thread of NT moves per fill of a 64 x DM tile */
template <int DM> struct per { static constexpr int N = TR * DM / 4 / NT; };

/* Offset of head bh's first row in layout l. */
__device__ __forceinline__ int64_t head_at(const att_dims &a, const att_lay &l, int64_t bh) {
  return bh / a.H * l.sb + bh % a.H * l.sh;
}

__device__ __forceinline__ int tx_(void) { return (int)(threadIdx.x & 15); }
__device__ __forceinline__ int ty_(void) { return (int)(threadIdx.x >> 4); }

__device__ __forceinline__ float max16(float v) {
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
  return v;
}
__device__ __forceinline__ float sum16(float v) {
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}
__device__ __forceinline__ float comp(const float4 &v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
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
/* Two tiles at once (k and v, or q and g), of row strides la and lb. */
template <int DM>
__device__ __forceinline__ void fill2(float *da, const float *sa, int64_t la, float *db,
                                      const float *sb, int64_t lb, int n, const att_dims &a) {
  float4 ra[per<DM>::N], rb[per<DM>::N];
  fetch<DM>(ra, sa, n, la, a);
  fetch<DM>(rb, sb, n, lb, a);
  stash<DM, tl<DM>::LD>(da, ra);
  stash<DM, tl<DM>::LD>(db, rb);
}

/* ---- the f32 products: FMA chains in registers ---- */

/* acc[i][j] += A[4 ty + i] . B[tx + 16 j] over d in [0, dn): A and B are shared tiles of
   stride LD, zero past D. */
template <int LD>
__device__ __forceinline__ void mm_nt(const float *A, const float *B, int dn,
                                      float (&acc)[4][4]) {
  const float *pa = A + ty_() * 4 * LD, *pb = B + tx_() * LD;
#pragma unroll 1
  for (int d = 0; d < dn; d += 4) {
    float4 x[4], y[4];
#pragma unroll
    for (int i = 0; i < 4; i++) x[i] = *(const float4 *)(pa + i * LD + d);
#pragma unroll
    for (int j = 0; j < 4; j++) y[j] = *(const float4 *)(pb + 16 * j * LD + d);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        acc[i][j] = fmaf(x[i].x, y[j].x, acc[i][j]);
        acc[i][j] = fmaf(x[i].y, y[j].y, acc[i][j]);
        acc[i][j] = fmaf(x[i].z, y[j].z, acc[i][j]);
        acc[i][j] = fmaf(x[i].w, y[j].w, acc[i][j]);
      }
  }
}

/* acc[i][4 h + e] += sum over c in [0, 64), in order, of P[4 ty + i][c] M[c][64 h + 4 tx + e]:
   P a [64][64] tile of stride LDP, M a shared tile of stride LD. */
template <int DM>
__device__ __forceinline__ void mm_nn(const float *P, const float *M,
                                      float (&acc)[4][4 * tl<DM>::H]) {
  constexpr int LD = tl<DM>::LD, LDP = tl<DM>::LDP, H = tl<DM>::H;
  const float *pp = P + ty_() * 4 * LDP, *pm = M + tx_() * 4;
#pragma unroll 2
  for (int c = 0; c < TR; c += 4) {
    float4 x[4];
#pragma unroll
    for (int i = 0; i < 4; i++) x[i] = *(const float4 *)(pp + i * LDP + c);
#pragma unroll
    for (int cc = 0; cc < 4; cc++)
#pragma unroll
      for (int h = 0; h < H; h++) {
        float4 y = *(const float4 *)(pm + (c + cc) * LD + 64 * h);
#pragma unroll
        for (int i = 0; i < 4; i++) {
          float w = comp(x[i], cc);
          acc[i][4 * h + 0] = fmaf(w, y.x, acc[i][4 * h + 0]);
          acc[i][4 * h + 1] = fmaf(w, y.y, acc[i][4 * h + 1]);
          acc[i][4 * h + 2] = fmaf(w, y.z, acc[i][4 * h + 2]);
          acc[i][4 * h + 3] = fmaf(w, y.w, acc[i][4 * h + 3]);
        }
      }
  }
}

/* Writes rows [0, n) and columns [0, D) of the thread's part of a 64 x DM result to the
   rows of stride ld that start at element off of dst, each value times mul[i]: F32, or
   with a.obf rounded to BF16. */
template <int DM>
__device__ __forceinline__ void store_rows(void *dst, int64_t off, int n, int64_t ld,
                                           const att_dims &a,
                                           const float (&acc)[4][4 * tl<DM>::H],
                                           const float (&mul)[4]) {
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int r = ty_() * 4 + i;
    if (r >= n) continue;
#pragma unroll
    for (int h = 0; h < tl<DM>::H; h++) {
      int d = 64 * h + tx_() * 4;
      if (d >= a.D) continue;
      int64_t e = off + r * ld + d;
      float4 v = make_float4(acc[i][4 * h] * mul[i], acc[i][4 * h + 1] * mul[i],
                             acc[i][4 * h + 2] * mul[i], acc[i][4 * h + 3] * mul[i]);
      if (a.obf) {
        bf16 *p = (bf16 *)dst + e;
        if (a.vec) {
          put4(p, v);
        } else {
          p[0] = __float2bfloat16_rn(v.x);
          if (d + 1 < a.D) p[1] = __float2bfloat16_rn(v.y);
          if (d + 2 < a.D) p[2] = __float2bfloat16_rn(v.z);
          if (d + 3 < a.D) p[3] = __float2bfloat16_rn(v.w);
        }
      } else {
        float *p = (float *)dst + e;
        if (a.vec) {
          *(float4 *)p = v;
        } else {
          p[0] = v.x;
          if (d + 1 < a.D) p[1] = v.y;
          if (d + 2 < a.D) p[2] = v.z;
          if (d + 3 < a.D) p[3] = v.w;
        }
      }
    }
  }
}

template <int N> __device__ __forceinline__ void zero(float (&x)[4][N]) {
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < N; j++) x[i][j] = 0.f;
}

/* p = exp(scale s - lse) and ds = p (dp - delta) scale on the thread's entries (row 4 ty + i,
   column tx + 16 j) of a 64 x 64 tile, 0 where vis(i, j) is false: s = A.B^T, dp = C.E^T.
   p goes to P and is read back for ds, so one 4 x 4 accumulator is live at a time (the
   registers matter: two blocks must fit an SM at DM = 64); DS may be P (ds replaces p).
   ROWS: lse and delta belong to rows i (queries are rows), else to columns j. */
template <int DM, bool ROWS, typename Vis>
__device__ __forceinline__ void p_ds(const float *A, const float *B, const float *C,
                                     const float *E, const att_dims &a, const float (&ls)[4],
                                     const float (&dl)[4], Vis vis, float *P, float *DS) {
  constexpr int LD = tl<DM>::LD, LDP = tl<DM>::LDP;
  float acc[4][4];
  zero(acc);
  mm_nt<LD>(A, B, a.dn, acc);
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
      P[(4 * ty_() + i) * LDP + tx_() + 16 * j] =
          vis(i, j) ? expf(acc[i][j] * a.scale - (ROWS ? ls[i] : ls[j])) : 0.f;
  zero(acc);
  mm_nt<LD>(C, E, a.dn, acc);
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int e = (4 * ty_() + i) * LDP + tx_() + 16 * j; /* this thread's own p */
      float ds = P[e] * (acc[i][j] - (ROWS ? dl[i] : dl[j])) * a.scale;
      DS[e] = vis(i, j) ? ds : 0.f;
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

/* Key tile j0 (kn rows) into Ks and Vs, between the barriers that make it safe: the
   previous tile's readers of Ks, Vs and Ps are done before, the tile is whole after. */
template <int DM>
__device__ __forceinline__ void key_tile(const att_dims &a, const float *Kb, const float *Vb,
                                         int j0, int kn, float *Ks, float *Vs) {
  __syncthreads();
  fill2<DM>(Ks, Kb + j0 * a.k.sr, a.k.sr, Vs, Vb + j0 * a.k.sr, a.k.sr, kn, a);
  __syncthreads();
}

/* 1 / l, and 0 for a row with no visible key (l == 0; a NaN l stays NaN). */
__device__ __forceinline__ float inv_or_zero(float l) { return l == 0.f ? 0.f : 1.f / l; }

/* Forward. Shared: Qs, Ks, Vs [64][LD], Ps [64][LDP]. */
template <int DM>
__global__ void __launch_bounds__(NT, MINB(DM)) att_fwd_k(const att_io io, const att_dims a) {
  constexpr int LDP = tl<DM>::LDP;
  extern __shared__ __align__(128) unsigned char att_sm[];
  float *Qs = (float *)att_sm, *Ks = Qs + tl<DM>::SIZE, *Vs = Ks + tl<DM>::SIZE;
  float *Ps = Vs + tl<DM>::SIZE;
  const int tx = tx_(), ty = ty_();
  int64_t bh;
  int t0, nq, nk;
  query_tile(a, TR, bh, t0, nq, nk);
  int64_t koff = head_at(a, a.k, bh);
  const float *Kb = (const float *)io.k + koff, *Vb = (const float *)io.v + koff;
  {
    float4 r[per<DM>::N];
    fetch<DM>(r, (const float *)io.q + head_at(a, a.q, bh) + t0 * a.q.sr, nq, a.q.sr, a);
    stash<DM, tl<DM>::LD>(Qs, r);
  }
  float m[4], l[4], o[4][4 * tl<DM>::H];
#pragma unroll
  for (int i = 0; i < 4; i++) m[i] = -INFINITY, l[i] = 0.f;
  zero(o);
  for (int j0 = 0; j0 < nk; j0 += TR) { /* the online softmax over the key tiles */
    int kn = min(TR, nk - j0);
    key_tile<DM>(a, Kb, Vb, j0, kn, Ks, Vs);
    float s[4][4];
    zero(s);
    mm_nt<tl<DM>::LD>(Qs, Ks, a.dn, s);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      int t = t0 + 4 * ty + i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        int c = tx + 16 * j;
        bool vis = c < kn && (!a.causal || j0 + c <= t);
        s[i][j] = vis ? s[i][j] * a.scale : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      float mn = fmaxf(m[i], max16(mx));
      float mu = mn == -INFINITY ? 0.f : mn; /* nothing visible yet: every p is 0 */
      float al = expf(m[i] - mu);            /* 0 while m[i] = -inf */
      float ps = 0.f;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float p = s[i][j] == -INFINITY ? 0.f : expf(s[i][j] - mu);
        ps += p;
        Ps[(4 * ty + i) * LDP + tx + 16 * j] = p;
      }
      l[i] = l[i] * al + sum16(ps);
      m[i] = mn;
#pragma unroll
      for (int k = 0; k < 4 * tl<DM>::H; k++) o[i][k] *= al;
    }
    __syncthreads(); /* Ps written */
    mm_nn<DM>(Ps, Vs, o);
  }
  float inv[4];
  int64_t row = bh * a.T + t0;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    inv[i] = inv_or_zero(l[i]);
    int r = 4 * ty + i;
    if (tx == 0 && r < nq) io.lse[row + r] = l[i] == 0.f ? 0.f : m[i] + logf(l[i]);
  }
  store_rows<DM>(io.out, head_at(a, a.o, bh) + t0 * a.o.sr, nq, a.o.sr, a, o, inv);
}

/* Backward kernel 1, per query tile: delta of its rows (to scratch), then dq. Shared: Qs,
   Gs, Ks, Vs [64][LD], Ps [64][LDP] (ds). */
template <int DM>
__global__ void __launch_bounds__(NT, MINB(DM))
    att_bwd_q_k(const att_io io, float *__restrict__ delta, const att_dims a) {
  extern __shared__ __align__(128) unsigned char att_sm[];
  float *Qs = (float *)att_sm, *Gs = Qs + tl<DM>::SIZE, *Ks = Gs + tl<DM>::SIZE;
  float *Vs = Ks + tl<DM>::SIZE, *Ps = Vs + tl<DM>::SIZE;
  const int tx = tx_(), ty = ty_();
  int64_t bh;
  int t0, nq, nk;
  query_tile(a, TR, bh, t0, nq, nk);
  int64_t qoff = head_at(a, a.q, bh) + t0 * a.q.sr, koff = head_at(a, a.k, bh);
  int64_t goff = head_at(a, a.o, bh) + t0 * a.o.sr, row = bh * a.T + t0;
  const float *Kb = (const float *)io.k + koff, *Vb = (const float *)io.v + koff;
  fill2<DM>(Qs, (const float *)io.q + qoff, a.q.sr, Gs, io.g + goff, a.o.sr, nq, a);
  /* delta = g.o from global memory (the forward's o) */
  float ls[4], dl[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int r = 4 * ty + i;
    float part = 0.f;
    if (r < nq) {
      const float *g = io.g + goff + r * a.o.sr, *o = (const float *)io.o + goff + r * a.o.sr;
      for (int d = tx; d < a.D; d += 16) part = fmaf(g[d], o[d], part);
    }
    dl[i] = sum16(part);
    ls[i] = r < nq ? io.lse[row + r] : 0.f;
    if (tx == 0 && r < nq) delta[row + r] = dl[i];
  }
  if (!io.dq) return; /* uniform over the block */
  float dq[4][4 * tl<DM>::H];
  zero(dq);
  for (int j0 = 0; j0 < nk; j0 += TR) {
    int kn = min(TR, nk - j0);
    key_tile<DM>(a, Kb, Vb, j0, kn, Ks, Vs); /* its first sync also fences Qs, Gs */
    p_ds<DM, true>(Qs, Ks, Gs, Vs, a, ls, dl, [=](int i, int j) {
      int c = tx + 16 * j;
      return c < kn && (!a.causal || j0 + c <= t0 + 4 * ty + i);
    }, Ps, Ps);
    __syncthreads(); /* Ps written */
    mm_nn<DM>(Ps, Ks, dq);
  }
  const float one[4] = {1.f, 1.f, 1.f, 1.f};
  store_rows<DM>(io.dq, qoff, nq, a.q.sr, a, dq, one);
}

/* Backward kernel 2, per key tile (in key order, which is heaviest first when causal: the
   first key tiles are seen by the most queries): over the query tiles that see its keys,
   in order of t, dv = sum_t p_t g_t and dk = sum_t ds_t q_t. The 4 x 4 micro-tiles here
   are transposed: rows are keys, columns queries. Shared: Ks, Vs, Qs, Gs [64][LD],
   Pt, Dt [64][LDP] (p and ds, key-major). */
template <int DM>
__global__ void __launch_bounds__(NT, MINB(DM))
    att_bwd_kv_k(const att_io io, const float *__restrict__ delta, const att_dims a) {
  extern __shared__ __align__(128) unsigned char att_sm[];
  float *Ks = (float *)att_sm, *Vs = Ks + tl<DM>::SIZE, *Qs = Vs + tl<DM>::SIZE;
  float *Gs = Qs + tl<DM>::SIZE, *Pt = Gs + tl<DM>::SIZE, *Dt = Pt + tl<DM>::PSIZE;
  const int tx = tx_(), ty = ty_();
  int64_t bh = (int64_t)blockIdx.x % a.BH;
  int s0 = (int)((int64_t)blockIdx.x / a.BH) * TR, kn = min(TR, a.S - s0);
  int64_t koff = head_at(a, a.k, bh) + s0 * a.k.sr;
  const float *Qb = (const float *)io.q + head_at(a, a.q, bh), *Gb = io.g + head_at(a, a.o, bh);
  const float *lb = io.lse + bh * a.T, *db = delta + bh * a.T;
  fill2<DM>(Ks, (const float *)io.k + koff, a.k.sr, Vs, (const float *)io.v + koff, a.k.sr, kn, a);
  float dk[4][4 * tl<DM>::H], dv[4][4 * tl<DM>::H];
  zero(dk);
  zero(dv);
  for (int t0 = a.causal ? s0 / TR * TR : 0; t0 < a.T; t0 += TR) {
    int tn = min(TR, a.T - t0);
    float ls[4], dl[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int r = tx + 16 * j;
      ls[j] = r < tn ? lb[t0 + r] : 0.f;
      dl[j] = r < tn ? db[t0 + r] : 0.f;
    }
    __syncthreads(); /* Ks, Vs filled (first pass); the previous Qs, Gs, Pt, Dt consumed */
    fill2<DM>(Qs, Qb + t0 * a.q.sr, a.q.sr, Gs, Gb + t0 * a.o.sr, a.o.sr, tn, a);
    __syncthreads();
    p_ds<DM, false>(Ks, Qs, Vs, Gs, a, ls, dl, [=](int i, int j) {
      int c = 4 * ty + i, r = tx + 16 * j;
      return c < kn && r < tn && (!a.causal || t0 + r >= s0 + c);
    }, Pt, Dt);
    __syncthreads(); /* Pt, Dt written */
    if (io.dv) mm_nn<DM>(Pt, Gs, dv);
    if (io.dk) mm_nn<DM>(Dt, Qs, dk);
  }
  const float one[4] = {1.f, 1.f, 1.f, 1.f};
  if (io.dk) store_rows<DM>(io.dk, koff, kn, a.k.sr, a, dk, one);
  if (io.dv) store_rows<DM>(io.dv, koff, kn, a.k.sr, a, dv, one);
}

/* ---- the bf16 path: mma.sync m16n8k16 with the score tiles in registers ---- */

#define MT 128 /* threads per block of the mma kernels: 4 warps of 16 MR rows each */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
/* Blocks per SM the register allocation must allow (see the header): at DM = 64 and 16
   rows a warp, four for the forward and kernel 1 (128 registers), three for kernel 2
   (168); else two (255). */
#define MMB(DM, MR) ((DM) == 64 && (MR) == 1 ? 4 : 2)
#define MMB_KV(DM) ((DM) == 64 ? 3 : 2)
#define FC 4 /* float4 a thread loads per chunk of gfill */

/* One m16n8 f32 accumulator tile: c[0], c[1] at row g, columns 2 q, 2 q + 1; c[2], c[3]
   at row g + 8 (g = lane / 4, q = lane % 4). */
typedef float acc8[4];

__device__ __forceinline__ unsigned sm_addr(const void *p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
/* Four 8 x 8 b16 matrices, lanes 8 i .. 8 i + 7 giving the row addresses of matrix i;
   r[i] is this lane's pair of matrix i (row lane / 4, columns 2 (lane % 4) and + 1, or
   with .trans that pair of the transposed matrix). The memory clobber keeps the reads
   between the barriers that bracket them. */
__device__ __forceinline__ void ldm4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldm4t(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
/* c += A B: A 16 x 16 (a[0..3]: rows g, g + 8 at k = 2 q, then at k = 2 q + 8), B 16 x 8
   (b0: k = 2 q, 2 q + 1 of column g; b1: k + 8). */
__device__ __forceinline__ void mma16816(acc8 &c, const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  unsigned u;
  memcpy(&u, &v, 4);
  return u;
}
__device__ __forceinline__ int lane_(void) { return (int)(threadIdx.x & 31); }

/* 16 bytes from global to shared memory without passing through registers (or L1: .cg),
   completing at the issuing thread's next cp_wait; the memory clobbers keep ordinary
   shared accesses on their side of it. */
__device__ __forceinline__ void cp16(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sm_addr(dst)),
               "l"(__cvta_generic_to_global(src))
               : "memory");
}
/* Every copy this thread issued has landed (visible to the block after a barrier):
   wait_all commits the copies not yet in a group and waits for every group. */
__device__ __forceinline__ void cp_wait(void) { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* Rows [0, n) of a bf16 tile at src (row stride ld, D columns) into the shared tile dst
   [R][DM + 8], zero past row n and past D, in 16-byte chunks (8 columns; thread i takes
   chunks i, i + 128, ..., so a quarter-warp's 8 chunks are 128 consecutive bytes of one
   row). vec: every row starts 16-byte aligned and a chunk that starts before D may be
   read whole (D % 8 == 0, or zeros up to a multiple of 8 as in the copy of g): each chunk
   is one cp16, complete at the caller's cp_wait. Otherwise 2-byte loads, stored before
   returning (loop not unrolled: the callers' accumulators need the registers). */
template <int DM, int R = TR>
__device__ __forceinline__ void bfill(bf16 *dst, const bf16 *src, int n, int64_t ld, int D,
                                      bool vec) {
  constexpr int CR = DM / 8, LD = DM + 8; /* chunks per row, tile row stride */
  if (vec) {
#pragma unroll
    for (int k = 0; k < R * CR / MT; k++) {
      int i = (int)threadIdx.x + k * MT, r = i / CR, d = i % CR * 8;
      bf16 *s = dst + r * LD + d;
      if (r < n && d < D)
        cp16(s, src + r * ld + d);
      else
        *(uint4 *)s = make_uint4(0u, 0u, 0u, 0u);
    }
    return;
  }
#pragma unroll 1
  for (int i = (int)threadIdx.x; i < R * CR; i += MT) {
    int r = i / CR, d = i % CR * 8;
    unsigned h[8];
#pragma unroll
    for (int e = 0; e < 8; e++)
      h[e] = r < n && d + e < D ? __bfloat16_as_ushort(src[r * ld + d + e]) : 0u;
    *(uint4 *)(dst + r * LD + d) =
        make_uint4(h[0] | h[1] << 16, h[2] | h[3] << 16, h[4] | h[5] << 16, h[6] | h[7] << 16);
  }
}

/* Rows [0, n) of f32 g (row stride ld) rounded to bf16 (nearest even) into the shared
   tile dst [R][DM + 8], zero past row n and past D, and with cp also into rows [0, n) of
   stride a.d8 at cp (columns [0, d8): zero past D). Synchronous, in chunks of FC float4 a
   thread (32 rows at DM = 64, 16 at DM = 128), so few loads are in flight beside the
   callers' accumulators (up to 128 registers in kernel 2).
   DELTA (kernel 1): also delta = sum_d g o of rows [0, n) (g unrounded, o the forward's
   BF16 output widened; o has g's layout): each thread's 4 columns of a row by one FMA
   chain, then the DM / 4 threads of the row, adjacent lanes of one warp, by a butterfly,
   so the order is fixed. The row's first thread writes it to dsh[row] (shared) and
   dg[row]. o is loaded with g, so all of a chunk's loads are in flight at once. */
template <int DM, int R = TR, bool DELTA = false>
__device__ __forceinline__ void gfill(bf16 *dst, const float *src, int n, int64_t ld,
                                      const att_dims &a, bf16 *cp, const bf16 *o = nullptr,
                                      float *dsh = nullptr, float *dg = nullptr) {
  constexpr int RC = MT * FC * 4 / DM, LD = DM + 8, TPR = DM / 4;
#pragma unroll
  for (int r0 = 0; r0 < R; r0 += RC) {
    float4 v[FC], w[FC];
    fetch<DM, MT>(v, src + r0 * ld, n - r0, ld, a);
    if (DELTA) fetch<DM, MT>(w, o + r0 * ld, n - r0, ld, a);
    stash<DM, LD, MT>(dst + r0 * LD, v);
#pragma unroll
    for (int k = 0; k < FC; k++) {
      int i = (int)threadIdx.x + k * MT, r = r0 + i / TPR, d = i % TPR * 4;
      if (DELTA) {
        float part = v[k].x * w[k].x;
        part = fmaf(v[k].w, w[k].w, fmaf(v[k].z, w[k].z, fmaf(v[k].y, w[k].y, part)));
#pragma unroll
        for (int m = 1; m < TPR; m <<= 1) part += __shfl_xor_sync(FULL, part, m);
        if (d == 0 && r < n) dsh[r] = dg[r] = part;
      }
      if (cp && r < n && d < a.d8) put4(cp + r * a.d8 + d, v[k]); /* 8-byte aligned */
    }
  }
}

template <int N> __device__ __forceinline__ void zero8(acc8 (&x)[N]) {
#pragma unroll
  for (int n = 0; n < N; n++) x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.f;
}

/* acc = A B^T for the warp's 16 MR rows of A (A points at the first; acc[i] holds rows
   16 i .. 16 i + 15) against the NC rows of B, over d in [0, dn): A and B bf16 tiles of
   row stride DM + 8, zero past D. acc[i][n] holds columns 8 n .. 8 n + 7. Each k step
   loads MR ldmatrix of A and NC / 16 of B, each B fragment feeding MR pairs of mma's. */
template <int DM, int MR, int NC>
__device__ __forceinline__ void mma_nt(acc8 (&acc)[MR][NC / 8], const bf16 *A, const bf16 *B,
                                       int dn) {
  constexpr int LD = DM + 8;
  const int l = lane_();
  /* A: matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) = a[0..3];
     B: (rows 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15) = b0, b1 of the column
     tiles n and n + 1 */
  unsigned pa = sm_addr(A + (l & 15) * LD + (l >> 4) * 8);
  unsigned pb = sm_addr(B + ((l >> 4) * 8 + (l & 7)) * LD + ((l >> 3) & 1) * 8);
#pragma unroll
  for (int i = 0; i < MR; i++) zero8(acc[i]);
#pragma unroll
  for (int k = 0; k < DM; k += 16) {
    if (k >= dn) break; /* uniform: the rest of d is zero */
    unsigned fa[MR][4];
#pragma unroll
    for (int i = 0; i < MR; i++) ldm4(fa[i], pa + 2 * (16 * i * LD + k));
#pragma unroll
    for (int n = 0; n < NC / 8; n += 2) {
      unsigned fb[4];
      ldm4(fb, pb + 2 * (n * 8 * LD + k));
#pragma unroll
      for (int i = 0; i < MR; i++) {
        mma16816(acc[i][n], fa[i], fb[0], fb[1]);
        mma16816(acc[i][n + 1], fa[i], fb[2], fb[3]);
      }
    }
  }
}

/* The A fragments of the warp's 16 MR rows at A (a tile of row stride DM + 8) for every
   k step of 16 below dn, as mma_nt loads them: fa[i][k / 16]. */
template <int DM, int MR>
__device__ __forceinline__ void ld_a(unsigned (&fa)[MR][DM / 16][4], const bf16 *A, int dn) {
  constexpr int LD = DM + 8;
  const int l = lane_();
  unsigned pa = sm_addr(A + (l & 15) * LD + (l >> 4) * 8);
#pragma unroll
  for (int k = 0; k < DM; k += 16) {
    if (k >= dn) break;
#pragma unroll
    for (int i = 0; i < MR; i++) ldm4(fa[i][k / 16], pa + 2 * (16 * i * LD + k));
  }
}
/* mma_nt with A's fragments already in registers (ld_a). */
template <int DM, int MR, int NC>
__device__ __forceinline__ void mma_ntr(acc8 (&acc)[MR][NC / 8],
                                        const unsigned (&fa)[MR][DM / 16][4], const bf16 *B,
                                        int dn) {
  constexpr int LD = DM + 8;
  const int l = lane_();
  unsigned pb = sm_addr(B + ((l >> 4) * 8 + (l & 7)) * LD + ((l >> 3) & 1) * 8);
#pragma unroll
  for (int i = 0; i < MR; i++) zero8(acc[i]);
#pragma unroll
  for (int k = 0; k < DM; k += 16) {
    if (k >= dn) break;
#pragma unroll
    for (int n = 0; n < NC / 8; n += 2) {
      unsigned fb[4];
      ldm4(fb, pb + 2 * (n * 8 * LD + k));
#pragma unroll
      for (int i = 0; i < MR; i++) {
        mma16816(acc[i][n], fa[i][k / 16], fb[0], fb[1]);
        mma16816(acc[i][n + 1], fa[i][k / 16], fb[2], fb[3]);
      }
    }
  }
}

/* acc += P M: P the warp's 16 MR x KC bf16 operand in registers (p[i][k] the A fragment
   of rows 16 i .. 16 i + 15 and inner rows 16 k .. 16 k + 15), M a bf16 tile of KC rows
   of stride DM + 8 read transposed by ldmatrix (its rows are the inner dimension); column
   tiles at or past dn are skipped (zero). Each fragment of M feeds MR pairs of mma's. */
template <int DM, int MR, int KC>
__device__ __forceinline__ void mma_pm(acc8 (&acc)[MR][DM / 8],
                                       const unsigned (&p)[MR][KC / 16][4], const bf16 *M,
                                       int dn) {
  constexpr int LD = DM + 8;
  const int l = lane_();
  /* matrices (rows 0-7, columns 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) transposed =
     b0, b1 of the column tiles n and n + 1 */
  unsigned pm = sm_addr(M + (l & 15) * LD + (l >> 4) * 8);
#pragma unroll
  for (int n = 0; n < DM / 8; n += 2) {
    if (8 * n >= dn) break;
#pragma unroll
    for (int k = 0; k < KC / 16; k++) {
      unsigned fb[4];
      ldm4t(fb, pm + 2 * (16 * k * LD + 8 * n));
#pragma unroll
      for (int i = 0; i < MR; i++) {
        mma16816(acc[i][n], p[i][k], fb[0], fb[1]);
        mma16816(acc[i][n + 1], p[i][k], fb[2], fb[3]);
      }
    }
  }
}

/* The accumulator tiles 2 k and 2 k + 1 of a 16 x NC result are, rounded to bf16 and
   paired, the A fragment of inner rows 16 k .. 16 k + 15 of the next product. */
template <int NC>
__device__ __forceinline__ void to_a(unsigned (&p)[NC / 16][4], const acc8 (&s)[NC / 8]) {
#pragma unroll
  for (int k = 0; k < NC / 16; k++) {
    p[k][0] = pack2(s[2 * k][0], s[2 * k][1]);
    p[k][1] = pack2(s[2 * k][2], s[2 * k][3]);
    p[k][2] = pack2(s[2 * k + 1][0], s[2 * k + 1][1]);
    p[k][3] = pack2(s[2 * k + 1][2], s[2 * k + 1][3]);
  }
}
/* Entry e of accumulator tile n, as rounded into to_a's fragments. */
template <int K>
__device__ __forceinline__ float from_a(const unsigned (&p)[K][4], int n, int e) {
  unsigned u = p[n >> 1][(n & 1) * 2 + (e >> 1)];
  return e & 1 ? hi2(u) : lo2(u);
}

/* ds = p (dp - delta) scale, and 0 where p is 0: every masked entry (p = 0 exactly, so
   the mask need not stay live across the dp product), and entries whose p underflowed. */
__device__ __forceinline__ float ds_of(float p, float dp, float dl, float scale) {
  return p == 0.f ? 0.f : p * (dp - dl) * scale;
}

/* Sets to v the entries of the warp's 16 MR x 64 score tile (rows queries, columns the
   keys [j0, j0 + kn) of a key tile) that are masked: column c = 8 n + 2 (lane % 4) +
   (e & 1) from row tr + 16 i + 8 (e >> 1) (tr: the lane's first row, as a query index)
   when c >= kn or, causal, j0 + c > the row. */
template <int MR>
__device__ __forceinline__ void mask_rows(acc8 (&s)[MR][8], float v, const att_dims &a,
                                          int kn, int j0, int tr) {
  const int c2 = (lane_() & 3) * 2;
#pragma unroll
  for (int i = 0; i < MR; i++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int lim = a.causal ? min(kn, tr + 16 * i + 8 * h - j0 + 1) : kn; /* columns < lim */
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; e++)
          if (8 * n + c2 + (e & 1) >= lim) s[i][n][e] = v;
    }
}

/* Writes the lane's entries of a warp's 16 x DM result (rows r0 + g, r0 + g + 8 of the
   block's tile, columns < D) to the rows of stride ld that start at element off of dst,
   F32 or, with a.obf, rounded to BF16; skips rows >= n; row half h times mul[h]. */
template <int DM>
__device__ __forceinline__ void mstore(void *dst, int64_t off, int n, int64_t ld,
                                       const att_dims &a, const acc8 (&acc)[DM / 8], int r0,
                                       const float (&mul)[2]) {
  const int l = lane_(), g = l >> 2, c2 = (l & 3) * 2;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int r = r0 + g + 8 * h;
    if (r >= n) continue;
#pragma unroll
    for (int t = 0; t < DM / 8; t++) {
      int d = 8 * t + c2;
      if (d >= a.D) continue;
      int64_t e = off + r * ld + d;
      float v0 = acc[t][2 * h] * mul[h], v1 = acc[t][2 * h + 1] * mul[h];
      if (a.obf) {
        bf16 *p = (bf16 *)dst + e;
        if (a.vec) { /* d even, rows on 4 elements */
          *(__nv_bfloat162 *)p = __floats2bfloat162_rn(v0, v1);
        } else {
          p[0] = __float2bfloat16_rn(v0);
          if (d + 1 < a.D) p[1] = __float2bfloat16_rn(v1);
        }
      } else {
        float *p = (float *)dst + e;
        if (a.vec) {
          *(float2 *)p = make_float2(v0, v1);
        } else {
          p[0] = v0;
          if (d + 1 < a.D) p[1] = v1;
        }
      }
    }
  }
}

/* Forward, one block of 4 warps per (bh, query tile of 64 MR rows), warp w owning query
   rows 16 MR w .. 16 MR w + 16 MR - 1. Shared: Qs [64 MR][DM + 8], and Ks, Vs twice,
   [64][DM + 8] bf16: key tile j works from buffer j % 2 while tile j + 1 lands in the
   other. Statistics in the base-2 domain: m = running max of s log2(e), p =
   2^(s log2(e) - m); each lane sums only its own columns of a row (its part is rescaled
   with the row, m being the same in the 4 lanes of the quad), and the quad adds the parts
   at the end. */
template <int DM, int MR>
__global__ void __launch_bounds__(MT, MMB(DM, MR)) att_fwd_mma(const att_io io, const att_dims a) {
  constexpr int LD = DM + 8, TS = TR * LD, WR = 16 * MR;
  extern __shared__ __align__(128) unsigned char att_sm[];
  bf16 *Qs = (bf16 *)att_sm, *KV = Qs + MR * TS; /* buffer b: Ks at KV + 2 b TS, Vs after it */
  const int w = (int)threadIdx.x >> 5, l = lane_(), g = l >> 2;
  int64_t bh;
  int t0, nq, nk;
  query_tile(a, MR * TR, bh, t0, nq, nk);
  int64_t koff = head_at(a, a.k, bh);
  const bf16 *Kb = (const bf16 *)io.k + koff, *Vb = (const bf16 *)io.v + koff;
  auto kv_tile = [&](int j0, int b) { /* keys [j0, j0 + 64) of [0, nk) into buffer b */
    int kn = min(TR, nk - j0);
    bf16 *Kd = KV + 2 * b * TS;
    bfill<DM>(Kd, Kb + j0 * a.k.sr, kn, a.k.sr, a.D, a.v8);
    bfill<DM>(Kd + TS, Vb + j0 * a.k.sr, kn, a.k.sr, a.D, a.v8);
  };
  bfill<DM, MR * TR>(Qs, (const bf16 *)io.q + head_at(a, a.q, bh) + t0 * a.q.sr, nq, a.q.sr,
                     a.D, a.v8);
  if (nk > 0) kv_tile(0, 0);
  const float sl = a.scale * LOG2E; /* > 0 */
  const int tw = t0 + WR * w; /* the warp's first row; the lane's are tw + 16 i + g + 8 h */
  float m[MR][2], ls[MR][2];
  acc8 o[MR][DM / 8];
  /* HQ: the warp's rows of Qs stay in registers as A fragments (MR DM / 4 of them; at
     MR DM = 256 they spill) */
  constexpr bool HQ = MR * DM <= 128;
  unsigned fq[MR][DM / 16][4];
#pragma unroll
  for (int i = 0; i < MR; i++) {
    m[i][0] = m[i][1] = -INFINITY, ls[i][0] = ls[i][1] = 0.f;
    zero8(o[i]);
  }
  for (int j0 = 0, b = 0; j0 < nk; j0 += TR, b ^= 1) { /* online softmax over key tiles */
    int kn = min(TR, nk - j0);
    cp_wait();       /* this thread's copies of tile j0 (and of Qs) have landed */
    __syncthreads(); /* tile j0 is whole in buffer b; every warp is done with buffer b ^ 1 */
    if (j0 + TR < nk) kv_tile(j0 + TR, b ^ 1); /* lands while this tile is worked on */
    /* uniform over the warp: its rows are past T, or (causal) all before key j0 */
    if (WR * w >= nq || (a.causal && j0 > tw + WR - 1)) continue;
    const bf16 *Ks = KV + 2 * b * TS, *Vs = Ks + TS;
    acc8 s[MR][8];
    if constexpr (HQ) {
      if (j0 == 0) ld_a<DM, MR>(fq, Qs + WR * w * LD, a.dn); /* Qs is whole from here on */
      mma_ntr<DM, MR, TR>(s, fq, Ks, a.dn);
    } else {
      mma_nt<DM, MR, TR>(s, Qs + WR * w * LD, Ks, a.dn);
    }
    if (kn < TR || (a.causal && j0 + TR - 1 > tw)) mask_rows<MR>(s, -INFINITY, a, kn, j0, tw + g);
    unsigned p[MR][4][4];
#pragma unroll
    for (int i = 0; i < MR; i++) {
      float al[2], mu[2];
#pragma unroll
      for (int h = 0; h < 2; h++) { /* a row lives in the 4 lanes of a quad */
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 8; n++) mx = fmaxf(mx, fmaxf(s[i][n][2 * h], s[i][n][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, 2));
        float mn = fmaxf(m[i][h], mx * sl); /* sl > 0: the largest of the s sl */
        mu[h] = mn == -INFINITY ? 0.f : mn; /* nothing visible yet: every p is 0 */
        al[h] = rg_ex2(m[i][h] - mu[h]);    /* 0 while m = -inf */
        m[i][h] = mn;
      }
      float ps[2] = {0.f, 0.f};
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          s[i][n][e] = rg_ex2(fmaf(s[i][n][e], sl, -mu[e >> 1])); /* masked: 2^-inf = 0 */
          ps[e >> 1] += s[i][n][e];
        }
      ls[i][0] = ls[i][0] * al[0] + ps[0];
      ls[i][1] = ls[i][1] * al[1] + ps[1];
#pragma unroll
      for (int n = 0; n < DM / 8; n++)
        o[i][n][0] *= al[0], o[i][n][1] *= al[0], o[i][n][2] *= al[1], o[i][n][3] *= al[1];
      to_a<TR>(p[i], s[i]);
    }
    mma_pm<DM, MR, TR>(o, p, Vs, a.dn);
  }
  cp_wait(); /* no key tile (S == 0): Qs's copies land before the block exits */
  int64_t row = bh * a.T + t0;
#pragma unroll
  for (int i = 0; i < MR; i++) {
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float L = ls[i][h]; /* the quad's parts, added in a fixed order */
      L += __shfl_xor_sync(FULL, L, 1);
      L += __shfl_xor_sync(FULL, L, 2);
      inv[h] = inv_or_zero(L);
      int r = WR * w + 16 * i + g + 8 * h;
      if ((l & 3) == 0 && r < nq) io.lse[row + r] = L == 0.f ? 0.f : (m[i][h] + log2f(L)) * LN2;
    }
    mstore<DM>(io.out, head_at(a, a.o, bh) + t0 * a.o.sr, nq, a.o.sr, a, o[i],
               WR * w + 16 * i, inv);
  }
}

/* Backward kernel 1, per query tile of 64 MR rows, warp w owning query rows
   16 MR w .. 16 MR w + 16 MR - 1: delta of its rows (to scratch), g rounded to bf16 (to
   gc, when not NULL: rows of d8 in the order of lse's, for kernel 2), then dq. Shared:
   Qs, Gs [64 MR][DM + 8], and Ks, Vs twice (as in the forward), [64][DM + 8] bf16. */
template <int DM, int MR>
__global__ void __launch_bounds__(MT, MMB(DM, MR))
    att_bwd_q_mma(const att_io io, float *__restrict__ delta, bf16 *__restrict__ gc,
                  const att_dims a) {
  constexpr int LD = DM + 8, TS = TR * LD, WR = 16 * MR;
  extern __shared__ __align__(128) unsigned char att_sm[];
  bf16 *Qs = (bf16 *)att_sm, *Gs = Qs + MR * TS, *KV = Gs + MR * TS; /* buffer b: + 2 b TS */
  float *Dsh = (float *)(KV + 4 * TS); /* [64 MR]: the tile's delta */
  const int w = (int)threadIdx.x >> 5, g = lane_() >> 2;
  int64_t bh;
  int t0, nq, nk;
  query_tile(a, MR * TR, bh, t0, nq, nk);
  int64_t qoff = head_at(a, a.q, bh) + t0 * a.q.sr, koff = head_at(a, a.k, bh);
  int64_t goff = head_at(a, a.o, bh) + t0 * a.o.sr, row = bh * a.T + t0;
  const bf16 *Kb = (const bf16 *)io.k + koff, *Vb = (const bf16 *)io.v + koff;
  auto kv_tile = [&](int j0, int b) { /* keys [j0, j0 + 64) of [0, nk) into buffer b */
    int kn = min(TR, nk - j0);
    bf16 *Kd = KV + 2 * b * TS;
    bfill<DM>(Kd, Kb + j0 * a.k.sr, kn, a.k.sr, a.D, a.v8);
    bfill<DM>(Kd + TS, Vb + j0 * a.k.sr, kn, a.k.sr, a.D, a.v8);
  };
  if (io.dq) { /* in flight during the delta pass */
    bfill<DM, MR * TR>(Qs, (const bf16 *)io.q + qoff, nq, a.q.sr, a.D, a.v8);
    if (nk > 0) kv_tile(0, 0);
  }
  gfill<DM, MR * TR, true>(Gs, io.g + goff, nq, a.o.sr, a, gc ? gc + row * a.d8 : nullptr,
                           (const bf16 *)io.o + goff, Dsh, delta + row);
  if (!io.dq) return; /* uniform over the block */
  __syncthreads(); /* Dsh is whole */
  float dl[MR][2], lg[MR][2];
#pragma unroll
  for (int j = 0; j < MR; j++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int r = WR * w + 16 * j + g + 8 * h;
      dl[j][h] = r < nq ? Dsh[r] : 0.f;
      lg[j][h] = r < nq ? io.lse[row + r] * LOG2E : 0.f;
    }
  const float sl = a.scale * LOG2E;
  const int tw = t0 + WR * w; /* the warp's first row; the lane's are tw + 16 i + g + 8 h */
  acc8 dq[MR][DM / 8];
#pragma unroll
  for (int i = 0; i < MR; i++) zero8(dq[i]);
  for (int j0 = 0, b = 0; j0 < nk; j0 += TR, b ^= 1) {
    int kn = min(TR, nk - j0);
    cp_wait();       /* this thread's copies of tile j0 (and of Qs) have landed */
    __syncthreads(); /* tile j0 whole in buffer b (Qs, Gs too); buffer b ^ 1 is free */
    if (j0 + TR < nk) kv_tile(j0 + TR, b ^ 1);
    /* uniform over the warp: its rows are past T, or (causal) all before key j0 */
    if (WR * w >= nq || (a.causal && j0 > tw + WR - 1)) continue;
    const bf16 *Ks = KV + 2 * b * TS, *Vs = Ks + TS;
    acc8 s[MR][8];
    unsigned p[MR][4][4], ds[MR][4][4];
    mma_nt<DM, MR, TR>(s, Qs + WR * w * LD, Ks, a.dn);
#pragma unroll
    for (int i = 0; i < MR; i++)
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          s[i][n][e] = rg_ex2(fmaf(s[i][n][e], sl, -lg[i][e >> 1]));
    if (kn < TR || (a.causal && j0 + TR - 1 > tw)) mask_rows<MR>(s, 0.f, a, kn, j0, tw + g);
#pragma unroll
    for (int i = 0; i < MR; i++) to_a<TR>(p[i], s[i]);
    mma_nt<DM, MR, TR>(s, Gs + WR * w * LD, Vs, a.dn); /* dp */
#pragma unroll
    for (int i = 0; i < MR; i++) {
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++)
          s[i][n][e] = ds_of(from_a(p[i], n, e), s[i][n][e], dl[i][e >> 1], a.scale);
      to_a<TR>(ds[i], s[i]);
    }
    mma_pm<DM, MR, TR>(dq, ds, Ks, a.dn);
  }
  cp_wait(); /* no key tile (S == 0): Qs's copies land before the block exits */
  const float one[2] = {1.f, 1.f};
#pragma unroll
  for (int i = 0; i < MR; i++) mstore<DM>(io.dq, qoff, nq, a.q.sr, a, dq[i], WR * w + 16 * i, one);
}

/* Backward kernel 2, per key tile of 64 MR rows (in key order, heaviest first when
   causal), warp w owning key rows 16 MR w .. 16 MR w + 16 MR - 1: over the query tiles
   that see its keys, in order of t, and within a tile over its MR column blocks of
   QC = 64 / MR queries, the transposed tiles p^T and ds^T (rows keys, columns queries,
   16 MR x QC) in registers, which are the A operands of dv += p^T g and dk += ds^T q.
   Shared: Ks, Vs [64 MR][DM + 8], and twice Qs, Gs [64][DM + 8] bf16 and Ls, Dl [64] f32
   (the query tile's lse log2(e) and delta): query tile i works from buffer i % 2 while
   tile i + 1 fills the other. G tiles come from kernel 1's bf16 copy gc by cp.async, or
   when gc is NULL from f32 g, rounded here. */
template <int DM, int MR>
__global__ void __launch_bounds__(MT, MMB_KV(DM))
    att_bwd_kv_mma(const att_io io, const float *__restrict__ delta,
                   const bf16 *__restrict__ gc, const att_dims a) {
  constexpr int LD = DM + 8, TS = TR * LD, WR = 16 * MR, QC = TR / MR;
  extern __shared__ __align__(128) unsigned char att_sm[];
  bf16 *Ks = (bf16 *)att_sm, *Vs = Ks + MR * TS, *QG = Vs + MR * TS; /* buffer b: + 2 b TS */
  float *Ls = (float *)(QG + 4 * TS), *Dl = Ls + 2 * TR;           /* buffer b: + b TR */
  const int w = (int)threadIdx.x >> 5, l = lane_(), g = l >> 2, c2 = (l & 3) * 2;
  int64_t bh = (int64_t)blockIdx.x % a.BH;
  int s0 = (int)((int64_t)blockIdx.x / a.BH) * MR * TR, kn = min(MR * TR, a.S - s0);
  int64_t koff = head_at(a, a.k, bh) + s0 * a.k.sr;
  const bf16 *Qb = (const bf16 *)io.q + head_at(a, a.q, bh);
  const float *Gb = io.g + head_at(a, a.o, bh);
  const bf16 *Cb = gc ? gc + bh * a.T * a.d8 : nullptr;
  const int64_t cs = TR * a.d8; /* the copy's step from one query tile to the next */
  const float *lb = io.lse + bh * a.T, *db = delta + bh * a.T;
  const int tf = a.causal ? s0 : 0; /* the first query tile that sees a key (s0 % 64 == 0) */
  auto qg_tile = [&](int t0, int b) { /* queries [t0, t0 + 64) of [0, T) into buffer b */
    int tn = min(TR, a.T - t0);
    bf16 *Qd = QG + 2 * b * TS;
    bfill<DM>(Qd, Qb + t0 * a.q.sr, tn, a.q.sr, a.D, a.v8);
    if (Cb) /* rows 16-byte aligned, zero from D to d8 */
      bfill<DM>(Qd + TS, Cb + t0 / TR * cs, tn, a.d8, a.D, true);
    else
      gfill<DM>(Qd + TS, Gb + t0 * a.o.sr, tn, a.o.sr, a, nullptr);
  };
  bfill<DM, MR * TR>(Ks, (const bf16 *)io.k + koff, kn, a.k.sr, a.D, a.v8);
  bfill<DM, MR * TR>(Vs, (const bf16 *)io.v + koff, kn, a.k.sr, a.D, a.v8);
  if (tf < a.T) {
    qg_tile(tf, 0);
    int r = (int)threadIdx.x;
    if (r < TR) {
      Ls[r] = tf + r < a.T ? lb[tf + r] * LOG2E : 0.f;
      Dl[r] = tf + r < a.T ? db[tf + r] : 0.f;
    }
  }
  const float sl = a.scale * LOG2E;
  const int kw = WR * w; /* the warp's first key row of the tile; the lane's: kw + 16 i + g + 8 h */
  acc8 dk[MR][DM / 8], dv[MR][DM / 8];
#pragma unroll
  for (int i = 0; i < MR; i++) {
    zero8(dk[i]);
    zero8(dv[i]);
  }
  for (int t0 = tf, b = 0; t0 < a.T; t0 += TR, b ^= 1) {
    int tn = min(TR, a.T - t0);
    cp_wait();       /* this thread's copies of tile t0 (and of Ks, Vs) have landed */
    __syncthreads(); /* tile t0 whole in buffer b (Ks, Vs too); buffer b ^ 1 is free */
    const bool next = t0 + TR < a.T;
    float nl = 0.f, nd = 0.f; /* the next tile's Ls, Dl of row threadIdx.x, stored below */
    if (next) {
      qg_tile(t0 + TR, b ^ 1);
      int r = t0 + TR + (int)threadIdx.x;
      if (threadIdx.x < TR && r < a.T) nl = lb[r] * LOG2E, nd = db[r];
    }
    const bf16 *Qs = QG + 2 * b * TS, *Gs = Qs + TS;
    const float *Lt = Ls + b * TR, *Dt = Dl + b * TR;
#pragma unroll 1
    for (int q0 = 0; q0 < TR; q0 += QC) { /* queries [q0, q0 + QC) of the tile */
      /* uniform over the warp: no query or no key left, or (causal) every query of the
         block before every key of the warp */
      if (q0 >= tn || kw >= kn) break;
      if (a.causal && t0 + q0 + QC - 1 < s0 + kw) continue;
      const bool full = kw + WR <= kn && q0 + QC <= tn && (!a.causal || t0 + q0 >= s0 + kw + WR - 1);
      acc8 s[MR][QC / 8];
      unsigned p[MR][QC / 16][4], ds[MR][QC / 16][4];
      mma_nt<DM, MR, QC>(s, Ks + kw * LD, Qs + q0 * LD, a.dn); /* s^T */
#pragma unroll
      for (int n = 0; n < QC / 8; n++) { /* the lane's 2 columns of tile n: 8-byte aligned */
        float2 lv = *(const float2 *)(Lt + q0 + 8 * n + c2);
#pragma unroll
        for (int i = 0; i < MR; i++)
#pragma unroll
          for (int e = 0; e < 4; e++)
            s[i][n][e] = rg_ex2(fmaf(s[i][n][e], sl, -(e & 1 ? lv.y : lv.x)));
      }
      if (!full) { /* query q0 + r is seen by key kw + ck when r in [lo, hi) */
#pragma unroll
        for (int i = 0; i < MR; i++)
#pragma unroll
          for (int h = 0; h < 2; h++) {
            int ck = kw + 16 * i + g + 8 * h;
            int lo = a.causal ? s0 + ck - t0 - q0 : -1, hi = ck < kn ? tn - q0 : 0;
#pragma unroll
            for (int n = 0; n < QC / 8; n++)
#pragma unroll
              for (int e = 2 * h; e < 2 * h + 2; e++) {
                int r = 8 * n + c2 + (e & 1);
                if (r < lo || r >= hi) s[i][n][e] = 0.f;
              }
          }
      }
#pragma unroll
      for (int i = 0; i < MR; i++) to_a<QC>(p[i], s[i]);
      if (io.dv) mma_pm<DM, MR, QC>(dv, p, Gs + q0 * LD, a.dn);
      if (io.dk) {
        mma_nt<DM, MR, QC>(s, Vs + kw * LD, Gs + q0 * LD, a.dn); /* dp^T */
#pragma unroll
        for (int n = 0; n < QC / 8; n++) {
          float2 dv2 = *(const float2 *)(Dt + q0 + 8 * n + c2);
#pragma unroll
          for (int i = 0; i < MR; i++)
#pragma unroll
            for (int e = 0; e < 4; e++)
              s[i][n][e] = ds_of(from_a(p[i], n, e), s[i][n][e], e & 1 ? dv2.y : dv2.x, a.scale);
        }
#pragma unroll
        for (int i = 0; i < MR; i++) to_a<QC>(ds[i], s[i]);
        mma_pm<DM, MR, QC>(dk, ds, Qs + q0 * LD, a.dn);
      }
    }
    if (next && threadIdx.x < TR) { /* buffer b ^ 1 is read only after the next barrier */
      Ls[(b ^ 1) * TR + threadIdx.x] = nl;
      Dl[(b ^ 1) * TR + threadIdx.x] = nd;
    }
  }
  cp_wait(); /* no query tile (causal, keys past T): Ks's, Vs's copies land before exit */
  const float one[2] = {1.f, 1.f};
#pragma unroll
  for (int i = 0; i < MR; i++) {
    if (io.dk) mstore<DM>(io.dk, koff, kn, a.k.sr, a, dk[i], kw + 16 * i, one);
    if (io.dv) mstore<DM>(io.dv, koff, kn, a.k.sr, a, dv[i], kw + 16 * i, one);
  }
}

/* Dynamic shared memory of the f32 kernels: tiles [64][DM + 4] and P tiles [64][68]. */
template <int DM> size_t smem_bytes(int tiles, int ptiles) {
  return sizeof(float) * (size_t)(tiles * tl<DM>::SIZE + ptiles * tl<DM>::PSIZE);
}

/* The rows of the tensor at p (elements of es bytes, layout l, D columns) start on
   multiples of n elements and D is one, so an n-element access stays inside a row. An
   absent tensor (NULL) passes. */
bool rows_on(const void *p, size_t es, const att_lay &l, int D, int n) {
  return (uintptr_t)p % (es * (size_t)n) == 0 && (l.sb | l.sh | l.sr | (int64_t)D) % n == 0;
}

/* The dims, layouts and pointers of either op (as the CPU's attn_shape), once att_dtypes
   has passed. */
att_dims att_shape(const rg_kargs *k, att_io *io) {
  att_dims a;
  const rg_tv *x = &k->in[0];
  int op = k->node->op;
  memset(io, 0, sizeof *io);
  a.ibf = x->dtype == RG_BF16;
  a.obf = 0;
  for (int i = 0; i < RG_MAX_OUT; i++) /* o, or the first of dq, dk, dv present */
    if (k->out[i].p) {
      a.obf = k->out[i].dtype == RG_BF16;
      break;
    }
  size_t ie = a.ibf ? 2 : 4, oe = a.obf ? 2 : 4;
  if (op == RG_OP_ATTENTION || op == RG_OP_ATTENTION_BWD) {
    a.H = x->dims[1];
    a.T = (int)x->dims[2];
    a.D = (int)x->dims[3];
    a.S = (int)k->in[1].dims[2];
    a.q = {a.H * a.T * a.D, (int64_t)a.T * a.D, a.D};
    a.k = {a.H * a.S * a.D, (int64_t)a.S * a.D, a.D};
    a.o = a.q;
    io->q = x->p, io->k = k->in[1].p, io->v = k->in[2].p;
    if (op == RG_OP_ATTENTION) {
      io->out = k->out[0].p, io->lse = (float *)k->out[1].p;
    } else { /* q, k, v, o, g, lse */
      io->o = k->in[3].p, io->g = (const float *)k->in[4].p;
      io->lse = (float *)k->in[5].p;
      io->dq = k->out[0].p, io->dk = k->out[1].p, io->dv = k->out[2].p;
    }
  } else { /* qkv [B,T,3C]: q, k, v are the thirds of a row */
    int64_t C = x->dims[2] / 3;
    a.H = k->node->i[1];
    a.T = a.S = (int)x->dims[1];
    a.D = (int)(C / a.H);
    a.q = a.k = {a.T * 3 * C, a.D, 3 * C};
    a.o = {a.T * C, a.D, C};
    io->q = x->p, io->k = (const char *)x->p + C * ie, io->v = (const char *)x->p + 2 * C * ie;
    if (op == RG_OP_ATTENTION_QKV) {
      io->out = k->out[0].p, io->lse = (float *)k->out[1].p;
    } else { /* qkv, o, g, lse */
      io->o = k->in[1].p, io->g = (const float *)k->in[2].p;
      io->lse = (float *)k->in[3].p;
      io->dq = k->out[0].p;
      io->dk = (char *)io->dq + C * oe, io->dv = (char *)io->dq + 2 * C * oe;
    }
  }
  a.BH = x->dims[0] * a.H;
  a.dn = (a.D + 15) & ~15;
  a.d8 = (a.D + 7) & ~7;
  /* D = 0: every score is 0 whatever the scale; 1 keeps it positive, as the mma kernels'
     masks need (a masked score of -inf stays -inf when scaled) */
  a.scale = a.D ? (float)(1.0 / sqrt((double)a.D)) : 1.f;
  a.causal = k->node->i[0] != 0;
  struct { const void *p; size_t es; const att_lay *l; } t[9] = {
      {io->q, ie, &a.q},    {io->k, ie, &a.k},   {io->v, ie, &a.k},
      {io->o, ie, &a.o},    {io->g, 4, &a.o},    {io->out, oe, &a.o},
      {io->dq, oe, &a.q},   {io->dk, oe, &a.k},  {io->dv, oe, &a.k}};
  a.vec = 1;
  for (int i = 0; i < 9; i++) a.vec = a.vec && rows_on(t[i].p, t[i].es, *t[i].l, a.D, 4);
  a.v8 = a.ibf;
  for (int i = 0; i < 3; i++) a.v8 = a.v8 && rows_on(t[i].p, 2, *t[i].l, a.D, 8);
  return a;
}

/* The dtypes the kernels take: q, k, v (and o, in the backward) all F32 or all BF16, g
   and lse F32, the results F32 or BF16 (one dtype for dq, dk and dv), lse out F32. The
   core records nothing else; a node that broke the rule would otherwise be read as the
   other dtype, so it fails here instead. */
rg_status att_dtypes(rg_kargs *k) {
  int op = k->node->op;
  bool fwd = op == RG_OP_ATTENTION || op == RG_OP_ATTENTION_QKV;
  int nx = op == RG_OP_ATTENTION ? 3 : op == RG_OP_ATTENTION_QKV ? 1
           : op == RG_OP_ATTENTION_BWD ? 4 : 2; /* inputs of the q dtype */
  int nin = fwd ? nx : nx + 2, nout = fwd ? 2 : op == RG_OP_ATTENTION_BWD ? 3 : 1;
  int dt = k->in[0].dtype, ot = -1;
  bool ok = dt == RG_F32 || dt == RG_BF16;
  for (int i = 1; i < nin; i++) ok = ok && k->in[i].dtype == (i < nx ? dt : RG_F32);
  for (int i = 0; i < (fwd ? 1 : nout); i++) {
    if (!k->out[i].p) continue;
    if (ot < 0) ot = k->out[i].dtype;
    ok = ok && k->out[i].dtype == ot && (ot == RG_F32 || ot == RG_BF16);
  }
  if (fwd) ok = ok && k->out[1].dtype == RG_F32;
  if (ok) return RG_OK;
  char in[64] = "", out[32] = "";
  for (int i = 0; i < nin; i++)
    snprintf(in + strlen(in), sizeof in - strlen(in), "%s%s", i ? " " : "",
             rg__dtype_name(k->in[i].dtype));
  for (int i = 0; i < nout; i++)
    snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? " " : "",
             k->out[i].p ? rg__dtype_name(k->out[i].dtype) : "-");
  snprintf(k->msg, k->msgcap,
           "the CUDA attention takes q, k, v and o all F32 or all BF16, g and lse F32, and "
           "gives F32 or BF16 results (lse F32); this node has inputs %s, outputs %s", in, out);
  return RG_ERR_UNSUPPORTED;
}

size_t smem_optin(void) {
  int dev = 0, v = 48 * 1024;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    v = 48 * 1024;
  return (size_t)v;
}

/* Fails (RG_ERR_UNSUPPORTED) when a kernel needs more shared memory than the device has. */
rg_status smem_fits(rg_kargs *k, const att_dims &a, size_t need) {
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

/* Blocks are numbered in one grid dimension: at most one per query or key row. */
rg_status attention_limits(rg_kargs *k, const att_dims &a) {
  if (a.BH * (a.T > a.S ? a.T : a.S) > 0x7fffffff) {
    snprintf(k->msg, k->msgcap, "attention with %lld x %d rows is more than one launch covers",
             (long long)a.BH, a.T > a.S ? a.T : a.S);
    return RG_ERR_UNSUPPORTED;
  }
  if (a.D > DMAX) {
    snprintf(k->msg, k->msgcap,
             "attention with head size D = %d: the CUDA backend supports D <= %d (its tiles "
             "keep 64 x D blocks of q, k and v in shared memory)", a.D, DMAX);
    return RG_ERR_UNSUPPORTED;
  }
  return RG_OK;
}

rg_status no_scratch(rg_kargs *k, size_t need) {
  snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu", need,
           rg_cuda_ctx(k)->scratch_bytes);
  return RG_ERR_UNSUPPORTED;
}

/* Shared memory of the mma kernels: bf16 tiles [64][DM + 8], and f32 extras. */
template <int DM> size_t msmem_bytes(int tiles, int floats) {
  return sizeof(bf16) * (size_t)(tiles * TR * (DM + 8)) + sizeof(float) * (size_t)floats;
}

/* The mma kernels at MR rows a warp: tiles of 64 MR rows (queries in the forward and
   kernel 1, keys in kernel 2) against walked tiles of 64. */
template <int DM, int MR> rg_status fwd_mma(rg_kargs *k, const att_dims &a, const att_io &io) {
  return launch_att(k, a, att_fwd_mma<DM, MR>, a.BH * cdiv(a.T, MR * TR), MT,
                    msmem_bytes<DM>(MR + 4, 0), io, a);
}
template <int DM, int MR>
rg_status bwd_q_mma(rg_kargs *k, const att_dims &a, const att_io &io, float *delta, bf16 *gc) {
  return launch_att(k, a, att_bwd_q_mma<DM, MR>, a.BH * cdiv(a.T, MR * TR), MT,
                    msmem_bytes<DM>(2 * MR + 4, MR * TR), io, delta, gc, a);
}
template <int DM, int MR>
rg_status bwd_kv_mma(rg_kargs *k, const att_dims &a, const att_io &io, const float *delta,
                     const bf16 *gc) {
  return launch_att(k, a, att_bwd_kv_mma<DM, MR>, a.BH * cdiv(a.S, MR * TR), MT,
                    msmem_bytes<DM>(2 * MR + 4, 4 * TR), io, delta, gc, a);
}

/* The kernels for D (DM = 64 or 128) and the inputs' dtype. */
template <int DM> rg_status attention_fwd(rg_kargs *k, const att_dims &a, const att_io &io) {
  /* MR = 2: 0.117 against 0.126 ms (header); but where its grid is under two blocks an
     SM, MR = 1's twice as many blocks of half the work finish sooner (gpt-char: 128
     blocks of 128 queries at MR = 2, 9.90 -> 8.53 us a call at MR = 1; ncu, H200). */
  if (a.ibf)
    return a.BH * cdiv(a.T, 2 * TR) < 2 * rg_cuda_ctx(k)->sms ? fwd_mma<DM, 1>(k, a, io)
                                                               : fwd_mma<DM, 2>(k, a, io);
  return launch_att(k, a, att_fwd_k<DM>, a.BH * cdiv(a.T, TR), NT, smem_bytes<DM>(3, 1), io, a);
}

/* T > 0 and S >= 0; delta: BH * T floats; gc: NULL, or BH * T * d8 bf16 (the mma
   kernels' copy of g). */
template <int DM>
rg_status attention_bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *delta,
                        bf16 *gc) {
  int64_t qb = a.BH * cdiv(a.T, TR), kb = a.BH * cdiv(a.S, TR);
  const float *cd = delta;
  rg_status st;
  if (a.ibf) { /* MR = 1: MR = 2 measured no faster here (header) */
    st = bwd_q_mma<DM, 1>(k, a, io, delta, gc);
    if (st != RG_OK || (!io.dk && !io.dv) || a.S == 0) return st;
    return bwd_kv_mma<DM, 1>(k, a, io, cd, gc);
  }
  st = launch_att(k, a, att_bwd_q_k<DM>, qb, NT, smem_bytes<DM>(4, 1), io, delta, a);
  if (st != RG_OK || (!io.dk && !io.dv) || a.S == 0) return st;
  return launch_att(k, a, att_bwd_kv_k<DM>, kb, NT, smem_bytes<DM>(4, 2), io, cd, a);
}

} /* namespace */

/* ---- cuDNN's fused attention ------------------------------------------------------------
   In a build with cuDNN (RG_HAVE_CUDNN), BF16 attention runs cuDNN's flash attention
   (dnn_att.c), faster on Hopper than the mma kernels above (GPT-2 124M's shape, H200:
   see bench/RESULTS.md), wherever it applies: q, k, v (and o) BF16, T == S, D a multiple
   of 8 up to 128, T at least DNN_MIN_T, 16-byte aligned rows, and in the backward BF16
   dq, dk and dv, all three wanted (dnn_att writes them all). Elsewhere, in a context
   opened with rg_options.no_cudnn, or when cuDNN has no engine for the shape, the kernels
   above run; either side's lse serves the other's backward (the same natural-log
   statistics). Any other cuDNN failure is the node's error, its message saying how to
   run the kernels above instead.
   cuDNN's backward takes dO in q's dtype: g is rounded to BF16 into scratch first, in o's
   layout. The plans' workspace is the context's dnn_ws: the deterministic backward keeps
   its dS there, B H T^2 bf16 (192 MiB at GPT-2 124M's shape), so it grows to the largest
   plan's need, up to DNN_WS_MAX (past that: the kernels above). A plan is built, and the
   workspace grown, at the first eager run of a shape (cuDNN compiles kernels then, and
   growing waits for the device and drops the captured graphs, which name the old
   workspace: the one place a launcher waits or allocates), never in a graph capture,
   which repeats a signature already run eagerly. cuDNN runs from T = DNN_MIN_T: at
   GPT-2 124M's T = 1024 it took the bf16 step from 18.39 to 17.36 ms; at gpt-char's
   T = 128 the step measured the same either way, within its noise (its forward kernel
   slower than ours there, 9.7 against 8.5 us, its backward faster, 13.5 us with the
   rounding of g against 23.3: H200, cuDNN 9.14, bench/RESULTS.md). 512 lies between. */
#define DNN_WS_MAX ((size_t)1 << 30)
#define DNN_MIN_T 512
#ifdef RG_HAVE_CUDNN
namespace {

/* The context's rg_dnn, opened on first use; NULL when the context opted out or cuDNN
   failed to open (said once on stderr unless quiet). */
rg_dnn *dnn_of(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  if (L->dnn_off) return nullptr;
  if (!L->dnn) {
    char why[512];
    if (rg_dnn_open((rg_dnn **)&L->dnn, why, sizeof why) != RG_DNN_OK) {
      L->dnn_off = true;
      L->dnn = nullptr;
      if (!k->ctx->opt.quiet)
        fprintf(stderr, "resgrad: cuDNN's fused attention is unavailable (%s); attention "
                "runs resgrad's kernels\n", why);
      return nullptr;
    }
  }
  return (rg_dnn *)L->dnn;
}

rg_dnn_att dnn_desc(const att_dims &a) {
  rg_dnn_att d;
  d.B = a.BH / a.H, d.H = a.H, d.T = a.T, d.D = a.D;
  d.causal = a.causal;
  d.scale = a.scale;
  d.q = {a.q.sb, a.q.sh, a.q.sr};
  d.k = d.v = {a.k.sb, a.k.sh, a.k.sr};
  d.o = {a.o.sb, a.o.sh, a.o.sr};
  return d;
}

/* The shapes dnn_att takes (above); bwd: dq, dk and dv too. */
bool dnn_takes(const att_dims &a, const att_io &io, bool bwd) {
  if (!a.ibf || a.T != a.S || a.T < DNN_MIN_T || a.D % 8 || a.D > 128 || !a.v8 || !a.vec)
    return false;
  if (!rows_on(io.o, 2, a.o, a.D, 8) || !rows_on(io.out, 2, a.o, a.D, 8)) return false;
  if (!bwd) return a.obf;
  return a.obf && io.dq && io.dk && io.dv && rows_on(io.dq, 2, a.q, a.D, 8) &&
         rows_on(io.dk, 2, a.k, a.D, 8) && rows_on(io.dv, 2, a.k, a.D, 8);
}

/* The node's error after dnn_att's message in k->msg. */
rg_status dnn_failed(rg_kargs *k, rg_status st) {
  size_t n = strlen(k->msg);
  snprintf(k->msg + n, k->msgcap - n, " (cuDNN's fused attention; rg_options.no_cudnn = 1 "
           "or env RG_CUDNN=0 runs resgrad's kernels instead)");
  return st;
}

/* Runs the node on cuDNN when it applies (*ran); else leaves it to the kernels above. A
   failure after cuDNN took the shape is the node's error. */
rg_status dnn_run(rg_kargs *k, const att_dims &a, const att_io &io, bool bwd, bool *ran) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  *ran = false;
  rg_dnn *d = dnn_takes(a, io, bwd) ? dnn_of(k) : nullptr;
  if (!d) return RG_OK;
  rg_dnn_att at = dnn_desc(a);
  size_t ws = 0, n = (size_t)(a.BH * a.T * a.D);
  int r = (bwd ? rg_dnn_att_bwd_ws : rg_dnn_att_fwd_ws)(d, &at, &ws, k->msg, k->msgcap);
  if (r == RG_DNN_UNSUPPORTED || (r == RG_DNN_OK && ws > DNN_WS_MAX) ||
      (bwd && n * 2 > L->scratch_bytes)) {
    k->msg[0] = 0;
    return RG_OK;
  }
  if (r != RG_DNN_OK) return dnn_failed(k, RG_ERR_DEVICE);
  if (ws > L->dnn_ws_bytes) { /* grow (above): outside any capture */
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(L->stream, &cs) != cudaSuccess ||
        cs != cudaStreamCaptureStatusNone) {
      snprintf(k->msg, k->msgcap, "cuDNN's attention workspace would grow inside a graph "
               "capture (a bug: a shape is always run eagerly first)");
      return RG_ERR_DEVICE;
    }
    rg_cuda_drop_graphs(k->ctx);
    cudaFree(L->dnn_ws); /* waits for the kernels that use it */
    L->dnn_ws = nullptr, L->dnn_ws_bytes = 0;
    if (cudaMalloc(&L->dnn_ws, ws) != cudaSuccess) {
      (void)cudaGetLastError();
      L->dnn_ws = nullptr;
      snprintf(k->msg, k->msgcap, "out of device memory for a workspace of %zu bytes", ws);
      return dnn_failed(k, RG_ERR_OOM);
    }
    L->dnn_ws_bytes = ws;
  }
  if (bwd) { /* g (dense in o's layout) rounded to BF16 into scratch by the CAST launcher */
    rg_kargs c = *k;
    c.in[0] = k->in[k->node->op == RG_OP_ATTENTION_BWD ? 4 : 2];
    c.out[0] = c.in[0];
    c.out[0].p = L->scratch, c.out[0].dtype = RG_BF16;
    rg_status st = rg_cuda_cast(&c);
    if (st != RG_OK) return st;
    r = rg_dnn_att_bwd(d, &at, L->stream, io.q, io.k, io.v, io.o, L->scratch, io.lse, io.dq,
                       io.dk, io.dv, L->dnn_ws, k->msg, k->msgcap);
  } else {
    r = rg_dnn_att_fwd(d, &at, L->stream, io.q, io.k, io.v, io.out, io.lse, L->dnn_ws,
                       k->msg, k->msgcap);
  }
  if (r != RG_DNN_OK) return dnn_failed(k, RG_ERR_DEVICE);
  *ran = true;
  k->ctx->st.cudnn_attention++;
  return RG_OK;
}

} /* namespace */
#endif

/* ---- launchers ----------------------------------------------------------------------- */

static rg_status attention_fwd_any(rg_kargs *k) {
  rg_status st = att_dtypes(k);
  if (st != RG_OK) return st;
  att_io io;
  att_dims a = att_shape(k, &io);
  if (a.BH == 0 || a.T == 0) return RG_OK;
  st = attention_limits(k, a);
  if (st != RG_OK) return st;
#ifdef RG_HAVE_CUDNN
  bool ran;
  st = dnn_run(k, a, io, false, &ran);
  if (st != RG_OK || ran) return st;
#endif
  return a.D <= 64 ? attention_fwd<64>(k, a, io) : attention_fwd<128>(k, a, io);
}

/* Scratch: delta of every query row (4 bytes a row), then, 256-byte aligned, for the
   BF16 kernels when it fits, g rounded to bf16 in rows of d8 (dense [BH, T, d8], so every
   row is 16-byte aligned whatever g's layout): kernel 2 then fills its G tiles by
   cp.async instead of loading and rounding f32 g again (GPT-2: 12.6 MB of 64 MiB). */
static rg_status attention_bwd_any(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  rg_status st = att_dtypes(k);
  if (st != RG_OK) return st;
  att_io io;
  att_dims a = att_shape(k, &io);
  if (a.BH == 0 || a.D == 0 || (a.T == 0 && a.S == 0)) return RG_OK;
  st = attention_limits(k, a);
  if (st != RG_OK) return st;
  if (a.T == 0) { /* no queries (rg_attention only: qkv has S = T), so dk and dv are zero
                     and dense; stream-ordered memsets, capturable, whose status is the
                     runtime's last error, which check_launch reads */
    size_t bytes = (size_t)(a.BH * a.S * a.D) * (a.obf ? sizeof(bf16) : sizeof(float));
    if (io.dk) cudaMemsetAsync(io.dk, 0, bytes, L->stream);
    if (io.dv) cudaMemsetAsync(io.dv, 0, bytes, L->stream);
    return rg_cuda_check_launch(k, "attention_bwd");
  }
#ifdef RG_HAVE_CUDNN
  bool ran;
  st = dnn_run(k, a, io, true, &ran);
  if (st != RG_OK || ran) return st;
#endif
  size_t rows = (size_t)(a.BH * a.T), need = rows * sizeof(float);
  if (need > L->scratch_bytes) return no_scratch(k, need);
  float *delta = (float *)L->scratch;
  size_t at = (need + 255) & ~(size_t)255, gb = rows * (size_t)a.d8 * sizeof(bf16);
  bf16 *gc = a.ibf && (io.dk || io.dv) && a.S > 0 && at + gb <= L->scratch_bytes
                 ? (bf16 *)((char *)L->scratch + at)
                 : nullptr;
  return a.D <= 64 ? attention_bwd<64>(k, a, io, delta, gc)
                   : attention_bwd<128>(k, a, io, delta, gc);
}

rg_status rg_cuda_attention(rg_kargs *k) { return attention_fwd_any(k); }
rg_status rg_cuda_attention_qkv(rg_kargs *k) { return attention_fwd_any(k); }
rg_status rg_cuda_attention_bwd(rg_kargs *k) { return attention_bwd_any(k); }
rg_status rg_cuda_attention_qkv_bwd(rg_kargs *k) { return attention_bwd_any(k); }
