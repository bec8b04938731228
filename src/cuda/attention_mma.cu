/*
 * attention_mma.cu - the attention kernels for BF16 inputs: mma.sync m16n8k16 (bf16 in,
 * f32 accumulation) with every score-shaped tile in registers. The model, the forward's
 * online softmax and the backward's two kernels are described in attention.h.
 *
 * A block of 128 threads (4 warps) owns a tile of 64 MR rows (queries in the forward and
 * kernel 1, keys in kernel 2), warp w the 16 MR rows from 16 MR w, and walks the other
 * side in tiles of 64. MR, the warp's m16 tiles, is a template parameter: 1 or 2 (see
 * "rows a warp" below). Shared tiles are bf16 [rows][DM + 8], zero past the last row and
 * past D. A tile of q, k or v is copied in 16-byte chunks (8 columns) by
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
 *
 * Rows a warp. At MR = 1 every ldmatrix.x4 of B feeds 2 mma's: a k step of q k^T loads 5
 * fragments for 8 mma's, one of p v 1 for 2, so shared-memory reads and ldmatrix issue,
 * not the tensor cores, set the pace. At MR = 2 the same loads serve twice the rows (q
 * k^T: 4 for 16 mma's with q in registers; p v: 1 for 4), and each copy of a walked tile
 * from L2 serves 128 rows instead of 64; the price is twice the accumulators, so two
 * blocks an SM (8 warps of 32 rows) instead of three (12 of 16). Kernel 2 at MR = 2 holds
 * dk and dv for 32 keys (128 registers at DM = 64), so it walks each query tile in two
 * column blocks of 32 (a 32 x 32 score tile: 32 registers), each ldmatrix.x4 of B still
 * feeding 4 mma's. At DM = 128, MR = 2 spills in kernel 1 and cannot fit kernel 2's
 * accumulators. The forward gains from MR = 2, the backward does not (the occupancy lost
 * eats the loads saved): so the forward runs MR = 2 and the backward MR = 1. The
 * backward's MR = 2 forms passed test_cuda when forced; they stay as templates, not
 * instantiated, for tuning on other GPUs.
 * The backward is latency-bound (few warps a scheduler, under one of them eligible, the
 * tensor pipe mostly idle), so at DM = 64 its kernels are fitted for more blocks an SM:
 * kernel 1 four (128 registers), kernel 2 three (168). Kernel 1 also makes delta from the
 * loads of its g tile (gfill's DELTA) rather than by a warp's serial pass over 16 rows of
 * g and o. Holding kernel 1's q and g fragments in registers (as the forward holds q) was
 * no faster; splitting kernel 2's query tiles into two column blocks at MR = 1 was slower.
 *
 * The copy of g. Kernel 1 reads all of g anyway (its G tile, rounded as it fills, and
 * delta), so it also writes the rounded tile to scratch after delta, 256-byte aligned, as
 * dense rows of D rounded up to 8 (zero past D): [BH, T, d8], 16-byte aligned whatever
 * g's layout. Kernel 2 copies its G tiles from there by cp.async (GPT-2: 12.6 MB of the
 * 64 MiB scratch); where the copy does not fit it rounds f32 g itself, at once.
 *
 * Resources per block, shared memory in KB for DM = 64 / 128:
 *            forward              kernel 1                 kernel 2
 *   MR = 1   45 / 85: Q 2x(K V)   54 / 102: Q G 2x(K V) Dl 55 / 103: K V 2x(Q G Ls Dl)
 *   MR = 2   54 / 102             72 / -                   73 / -
 * An H100 or H200 SM has 64 K registers and 228 KB of shared memory. At MR = 1 and
 * DM = 64 the forward and kernel 1 are capped at 128 registers, for four blocks (4 x 55 KB
 * of shared memory fits), and kernel 2 at 168 for three (a fourth's 57 KB would not);
 * every other variant is capped for two (255). None spills under its cap; capping the
 * MR = 2 forward and kernel 1 at 168, for three blocks, would make them spill. The f32
 * loads of g are made 4 float4 a thread at a time, so they fit beside the accumulators.
 *
 * Barriers: one a loop iteration. Before the loop each thread issues its copies of the
 * block's own tiles and of walked tile 0 into buffer 0 (and fills the rest synchronously:
 * g, lse, delta). Iteration i: cp_wait (this thread's copies of tile i, the only ones in
 * flight, have landed) -> sync: tile i is whole in buffer i % 2 for every warp, and every
 * warp has finished iteration i - 1, the last reader of buffer (i + 1) % 2 -> issue tile
 * i + 1 into buffer (i + 1) % 2 (cp.async, or stores for zeros and the synchronous fills)
 * -> the products of tile i, reading only buffer i % 2 and the block's own tiles; kernel 2
 * then stores tile i + 1's lse and delta, loaded before its products, into buffer
 * (i + 1) % 2. So a buffer is written only between the barrier after its last read and
 * the barrier before its next read. A warp that skips a tile's products still issues its
 * share of the next copies and meets every barrier (the skip is after them, and inside
 * an iteration). A block that walks no tile still waits for its copies before it exits;
 * nothing shared is read after the loop.
 */
#include "attention.h"

namespace { /* file-private: kernels and helpers (the launchers follow) */

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

/* MK: the warp's 16 MR x 64 score tile, laid out as mask_rows's (rows queries from tr,
   the lane's first row as a query index; columns the keys [j0, j0 + kn)), in the base-2
   domain with the masks' term: s sl + mask_at log2(e) where the entry is visible (column
   < kn, row < T, causal: key <= row), -inf elsewhere (a padded key's term is -inf too).
   (b, h): the head's batch and head, for mask_at. */
template <int MR>
__device__ __forceinline__ void mask_scale(acc8 (&s)[MR][8], const att_dims &a,
                                           const att_io &io, int64_t b, int64_t h, int kn,
                                           int j0, int tr, float sl) {
  const int c2 = (lane_() & 3) * 2;
#pragma unroll
  for (int i = 0; i < MR; i++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      int t = tr + 16 * i + 8 * hh;
      int lim = t >= a.T ? 0 : a.causal ? min(kn, t - j0 + 1) : kn; /* columns < lim */
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 2 * hh; e < 2 * hh + 2; e++) {
          int c = 8 * n + c2 + (e & 1);
          s[i][n][e] = c < lim ? fmaf(s[i][n][e], sl, mask_at(io, a, b, h, t, j0 + c) * LOG2E)
                               : -INFINITY;
        }
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
   at the end. MK: with the masks, the scores scaled and masked at once (mask_scale). */
template <int DM, int MR, bool MK>
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
  const float su = MK ? 1.f : sl;   /* the scale still to apply once the scores are masked */
  const int64_t mb = bh / a.H, mh = bh % a.H; /* the masks' batch and head */
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
    if constexpr (MK)
      mask_scale<MR>(s, a, io, mb, mh, kn, j0, tw + g, sl);
    else if (kn < TR || (a.causal && j0 + TR - 1 > tw))
      mask_rows<MR>(s, -INFINITY, a, kn, j0, tw + g);
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
        float mn = fmaxf(m[i][h], mx * su); /* su > 0: the largest of the s su */
        mu[h] = mn == -INFINITY ? 0.f : mn; /* nothing visible yet: every p is 0 */
        al[h] = rg_ex2(m[i][h] - mu[h]);    /* 0 while m = -inf */
        m[i][h] = mn;
      }
      float ps[2] = {0.f, 0.f};
#pragma unroll
      for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          s[i][n][e] = rg_ex2(fmaf(s[i][n][e], su, -mu[e >> 1])); /* masked: 2^-inf = 0 */
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
   Qs, Gs [64 MR][DM + 8], and Ks, Vs twice (as in the forward), [64][DM + 8] bf16. MK:
   with the masks, p = 2^(mask_scale's s - lse log2(e)). */
template <int DM, int MR, bool MK>
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
    if constexpr (MK) {
      mask_scale<MR>(s, a, io, bh / a.H, bh % a.H, kn, j0, tw + g, sl);
#pragma unroll
      for (int i = 0; i < MR; i++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++) s[i][n][e] = rg_ex2(s[i][n][e] - lg[i][e >> 1]);
    } else {
#pragma unroll
      for (int i = 0; i < MR; i++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
          for (int e = 0; e < 4; e++)
            s[i][n][e] = rg_ex2(fmaf(s[i][n][e], sl, -lg[i][e >> 1]));
      if (kn < TR || (a.causal && j0 + TR - 1 > tw)) mask_rows<MR>(s, 0.f, a, kn, j0, tw + g);
    }
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
   when gc is NULL from f32 g, rounded here. MK: with the masks, each visible entry's
   p = 2^(s sl + mask_at log2(e) - lse log2(e)), every other 0. */
template <int DM, int MR, bool MK>
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
      if constexpr (MK) {
#pragma unroll
        for (int n = 0; n < QC / 8; n++) {
          float2 lv = *(const float2 *)(Lt + q0 + 8 * n + c2);
#pragma unroll
          for (int i = 0; i < MR; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) { /* key s0 + ck, query t0 + r */
              int ck = kw + 16 * i + g + 8 * (e >> 1), r = q0 + 8 * n + c2 + (e & 1);
              bool vis = ck < kn && r < tn && (!a.causal || t0 + r >= s0 + ck);
              float x = vis ? fmaf(s[i][n][e], sl,
                                   mask_at(io, a, bh / a.H, bh % a.H, t0 + r, s0 + ck) * LOG2E)
                            : -INFINITY;
              s[i][n][e] = rg_ex2(x - (e & 1 ? lv.y : lv.x));
            }
        }
      } else {
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

/* Shared memory of the mma kernels: bf16 tiles [64][DM + 8], and f32 extras. */
template <int DM> size_t msmem_bytes(int tiles, int floats) {
  return sizeof(bf16) * (size_t)(tiles * TR * (DM + 8)) + sizeof(float) * (size_t)floats;
}

/* The mma kernels at MR rows a warp: tiles of 64 MR rows (queries in the forward and
   kernel 1, keys in kernel 2) against walked tiles of 64. */
template <int DM, int MR, bool MK = false>
rg_status fwd_mma(rg_kargs *k, const att_dims &a, const att_io &io) {
  return launch_att(k, a, att_fwd_mma<DM, MR, MK>, a.BH * cdiv(a.T, MR * TR), MT,
                    msmem_bytes<DM>(MR + 4, 0), io, a);
}
template <int DM, int MR, bool MK>
rg_status bwd_q_mma(rg_kargs *k, const att_dims &a, const att_io &io, float *delta, bf16 *gc) {
  return launch_att(k, a, att_bwd_q_mma<DM, MR, MK>, a.BH * cdiv(a.T, MR * TR), MT,
                    msmem_bytes<DM>(2 * MR + 4, MR * TR), io, delta, gc, a);
}
template <int DM, int MR, bool MK>
rg_status bwd_kv_mma(rg_kargs *k, const att_dims &a, const att_io &io, const float *delta,
                     const bf16 *gc) {
  return launch_att(k, a, att_bwd_kv_mma<DM, MR, MK>, a.BH * cdiv(a.S, MR * TR), MT,
                    msmem_bytes<DM>(2 * MR + 4, 4 * TR), io, delta, gc, a);
}

/* The kernels at DM = 64 or 128. The forward at MR = 2 (see the header); but where its
   grid is under two blocks an SM, MR = 1's twice as many blocks of half the work finish
   sooner. A masked call (MK) runs at MR = 1: one instantiation fewer, and no register
   pressure of the mask's reads beside MR = 2's accumulators. */
template <int DM> rg_status fwd(rg_kargs *k, const att_dims &a, const att_io &io) {
  if (io.kp || io.bias) return fwd_mma<DM, 1, true>(k, a, io);
  return a.BH * cdiv(a.T, 2 * TR) < 2 * rg_cuda_ctx(k)->sms ? fwd_mma<DM, 1>(k, a, io)
                                                             : fwd_mma<DM, 2>(k, a, io);
}
/* The backward at MR = 1 (see the header). */
template <int DM, bool MK>
rg_status bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *delta, bf16 *gc) {
  rg_status st = bwd_q_mma<DM, 1, MK>(k, a, io, delta, gc);
  if (st != RG_OK || (!io.dk && !io.dv) || a.S == 0) return st;
  return bwd_kv_mma<DM, 1, MK>(k, a, io, delta, gc);
}

} /* namespace */

rg_status rg_cuda_att_mma_fwd(rg_kargs *k, const att_dims &a, const att_io &io) {
  return a.D <= 64 ? fwd<64>(k, a, io) : fwd<128>(k, a, io);
}

rg_status rg_cuda_att_mma_bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *delta,
                              bf16 *gc) {
  if (io.kp || io.bias)
    return a.D <= 64 ? bwd<64, true>(k, a, io, delta, gc) : bwd<128, true>(k, a, io, delta, gc);
  return a.D <= 64 ? bwd<64, false>(k, a, io, delta, gc) : bwd<128, false>(k, a, io, delta, gc);
}
