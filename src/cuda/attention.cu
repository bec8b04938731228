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
 * Tiles. A block of 256 threads owns a tile of 64 rows (queries, or keys in the key pass)
 * and walks the other side in tiles of 64. Rows are copied from global memory into shared
 * tiles [64][DM + 4], zero past the tensor's last row and past D; DM is the template bound
 * on D (64 or 128: D <= 128 is what the backend supports). Threads form a 16 x 16 grid,
 * ty = tid / 16, tx = tid % 16:
 *  - a 64 x 64 product A B^T over d (scores q.k, g.v) is a 4 x 4 register micro-tile per
 *    thread: rows 4 ty + i, columns tx + 16 j, each entry an FMA chain over d = 0, 1, ...
 *    (the same chain in every pass, so the backward rebuilds the forward's scores bit for
 *    bit);
 *  - a 64 x DM product P M (p.v, ds.k, ...) accumulates rows 4 ty + i, columns
 *    64 h + 4 tx + e of the output, summing over the 64 inner rows in order.
 * A row is spread over the 16 threads of one half-warp, so row maxima and sums are
 * 16-lane butterflies (every lane ends with the same bits). Strides DM + 4 and 64 + 4 are
 * 4 mod 32 floats: the float4 loads of a quarter-warp (8 different rows, or 8 consecutive
 * float4 of one row) hit 8 different groups of 4 banks, and the scalar stores of P hit 32
 * banks.
 *
 * Forward, one block per (bh, query tile): online softmax over the key tiles up to the
 * diagonal (m = running max of the scaled scores, l = running sum of exp(s - m), the
 * output accumulator rescaled by exp(m_old - m_new) when m grows), o = acc / l at the end.
 * Masked entries get s = -inf and p = 0 exactly (never exp(-inf - -inf)). They still meet
 * the products as 0 * v: a non-finite v (or k) of a key masked from row t but inside a tile
 * row t visits makes row t NaN, where the CPU, which skips masked keys, stays finite (the
 * later rows that see that key are non-finite on both).
 *
 * Backward, two kernels, no atomics (every output element is summed by one thread in a
 * fixed order, so results repeat exactly):
 *  1. per query tile: the forward's loop again, giving lse = m + log l and
 *     delta = sum_d g o (= sum_j p_j dp_j), saved in scratch (8 bytes a query row); then,
 *     if dq is wanted, a second loop over the same key tiles: p = exp(s - lse),
 *     dp = g.v, ds = p (dp - delta) scale, dq = sum_j ds_j k_j.
 *  2. per key tile: over the query tiles that see its keys, p and ds again (from the
 *     saved lse and delta), dv = sum_t p_t g_t and dk = sum_t ds_t q_t.
 *
 * Resources per block (DM = 64 / 128): shared memory 68 / 116 KB (forward), 85 / 149 KB
 * (kernel 1), 102 / 166 KB (kernel 2), all above the 48 KB default, so each launch opts
 * in. At DM = 64 two blocks fit an SM, and __launch_bounds__ caps registers at 128 for it
 * (ptxas with nvcc 13: no spills); at DM = 128 one block fits, registers are not capped.
 *
 * Barriers: every loop iteration is  sync (the previous iteration's readers are done) ->
 * fill tiles -> sync -> scores, write P -> sync -> products from P. Anything read after a
 * loop that may run zero times is fenced by its own sync.
 */
#include "cuda.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define FULL 0xffffffffu
#define NT 256      /* threads per block: a 16 x 16 grid */
#define TR 64       /* rows of a tile (queries or keys) */
#define LDP (TR + 4) /* stride of the P / dS tiles [64][64] */
#define DMAX 128    /* largest supported head size */
/* Blocks per SM the register allocation must allow: two at DM = 64 (their shared memory
   fits twice), one at DM = 128 (it does not, so registers need not be capped). */
#define MINB(DM) ((DM) == 64 ? 2 : 1)

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
  int dn;     /* D rounded up to 4: the extent of the score dot products */
  int causal;
  int vec;    /* D and every stride % 4 == 0, every pointer 16-byte aligned: float4 access */
  float scale;
} att_dims;

/* A [64][DM] tile in shared memory, and what one thread does with it. */
template <int DM> struct tl {
  static constexpr int LD = DM + 4;              /* row stride, 4 mod 32 */
  static constexpr int SIZE = TR * LD;           /* floats */
  static constexpr int PER = TR * DM / 4 / NT;   /* float4 one thread moves per fill */
  static constexpr int H = DM / 64;              /* float4 per thread per output row */
};

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

/* Tile filling in two steps, so all of a thread's global loads are in flight before its
   first shared store: fetch rows [0, n) (row stride ld, D columns) at src into registers
   (zero past row n and past D), then stash them in a shared tile. */
template <int DM>
__device__ __forceinline__ void fetch(float4 (&r)[tl<DM>::PER], const float *src, int n,
                                      int64_t ld, const att_dims &a) {
#pragma unroll
  for (int k = 0; k < tl<DM>::PER; k++) {
    int i = (int)threadIdx.x + k * NT, row = i / (DM / 4), d = i % (DM / 4) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row < n && d < a.D) {
      const float *p = src + row * ld + d;
      if (a.vec) {
        v = *(const float4 *)p; /* D % 4 == 0: d + 3 < D */
      } else {
        v.x = p[0];
        if (d + 1 < a.D) v.y = p[1];
        if (d + 2 < a.D) v.z = p[2];
        if (d + 3 < a.D) v.w = p[3];
      }
    }
    r[k] = v;
  }
}
template <int DM>
__device__ __forceinline__ void stash(float *dst, const float4 (&r)[tl<DM>::PER]) {
#pragma unroll
  for (int k = 0; k < tl<DM>::PER; k++) {
    int i = (int)threadIdx.x + k * NT, row = i / (DM / 4), d = i % (DM / 4) * 4;
    *(float4 *)(dst + row * tl<DM>::LD + d) = r[k];
  }
}
/* Two tiles at once (k and v, or q and g), of row strides la and lb. */
template <int DM>
__device__ __forceinline__ void fill2(float *da, const float *sa, int64_t la, float *db,
                                      const float *sb, int64_t lb, int n, const att_dims &a) {
  float4 ra[tl<DM>::PER], rb[tl<DM>::PER];
  fetch<DM>(ra, sa, n, la, a);
  fetch<DM>(rb, sb, n, lb, a);
  stash<DM>(da, ra);
  stash<DM>(db, rb);
}

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
  constexpr int LD = tl<DM>::LD, H = tl<DM>::H;
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
   rows of stride ld at dst, each value times mul[i]. */
template <int DM>
__device__ __forceinline__ void store_rows(float *dst, int n, int64_t ld, const att_dims &a,
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
      float *p = dst + r * ld + d;
      float4 v = make_float4(acc[i][4 * h] * mul[i], acc[i][4 * h + 1] * mul[i],
                             acc[i][4 * h + 2] * mul[i], acc[i][4 * h + 3] * mul[i]);
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
template <int LD, bool ROWS, typename Vis>
__device__ __forceinline__ void p_ds(const float *A, const float *B, const float *C,
                                     const float *E, const att_dims &a, const float (&ls)[4],
                                     const float (&dl)[4], Vis vis, float *P, float *DS) {
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
      DS[e] = vis(i, j) ? P[e] * (acc[i][j] - (ROWS ? dl[i] : dl[j])) * a.scale : 0.f;
    }
}

/* The block's tile: heaviest first when causal (the last query tiles see the most keys),
   so the long blocks start in the first wave. */
__device__ __forceinline__ void query_tile(const att_dims &a, int64_t &bh, int &t0, int &nq,
                                           int &nk) {
  int ntq = (int)cdiv(a.T, TR);
  bh = (int64_t)blockIdx.x % a.BH;
  t0 = (ntq - 1 - (int)((int64_t)blockIdx.x / a.BH)) * TR;
  nq = min(TR, a.T - t0);
  nk = a.causal ? min(a.S, t0 + nq) : a.S; /* keys [0, nk) are visible to some row */
}

/* The operands and results of either op: head 0 of batch 0 of each. */
typedef struct att_io {
  const float *q, *k, *v, *g;
  float *o, *dq, *dk, *dv;
} att_io;

/* Key tile j0 (kn rows) into Ks and Vs, between the barriers that make it safe: the
   previous tile's readers of Ks, Vs and Ps are done before, the tile is whole after. */
template <int DM>
__device__ __forceinline__ void key_tile(const att_dims &a, const float *Kb, const float *Vb,
                                         int j0, int kn, float *Ks, float *Vs) {
  __syncthreads();
  fill2<DM>(Ks, Kb + j0 * a.k.sr, a.k.sr, Vs, Vb + j0 * a.k.sr, a.k.sr, kn, a);
  __syncthreads();
}

/* The online softmax over key tiles [0, nk) for the query tile t0 held in Qs: leaves the
   thread's rows' running max m (of the scaled scores), sum l and unnormalised output o.
   Uses Ks, Vs, Ps; the caller syncs after Qs is filled and after this returns. */
template <int DM>
__device__ __forceinline__ void softmax_rows(const att_dims &a, const float *Kb,
                                             const float *Vb, int t0, int nk, const float *Qs,
                                             float *Ks, float *Vs, float *Ps, float (&m)[4],
                                             float (&l)[4], float (&o)[4][4 * tl<DM>::H]) {
  const int tx = tx_(), ty = ty_();
#pragma unroll
  for (int i = 0; i < 4; i++) m[i] = -INFINITY, l[i] = 0.f;
  zero(o);
  for (int j0 = 0; j0 < nk; j0 += TR) {
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
}

/* 1 / l, and 0 for a row with no visible key (l == 0; a NaN l stays NaN). */
__device__ __forceinline__ float inv_or_zero(float l) { return l == 0.f ? 0.f : 1.f / l; }

/* Forward. Shared: Qs, Ks, Vs [64][LD], Ps [64][LDP]. */
template <int DM>
__global__ void __launch_bounds__(NT, MINB(DM))
    att_fwd_k(const att_io io, const att_dims a) {
  extern __shared__ float4 att_sm[];
  float *Qs = (float *)att_sm, *Ks = Qs + tl<DM>::SIZE, *Vs = Ks + tl<DM>::SIZE;
  float *Ps = Vs + tl<DM>::SIZE;
  int64_t bh;
  int t0, nq, nk;
  query_tile(a, bh, t0, nq, nk);
  int64_t koff = head_at(a, a.k, bh);
  {
    float4 r[tl<DM>::PER];
    fetch<DM>(r, io.q + head_at(a, a.q, bh) + t0 * a.q.sr, nq, a.q.sr, a);
    stash<DM>(Qs, r);
  }
  float m[4], l[4], o[4][4 * tl<DM>::H], inv[4];
  softmax_rows<DM>(a, io.k + koff, io.v + koff, t0, nk, Qs, Ks, Vs, Ps, m, l, o);
#pragma unroll
  for (int i = 0; i < 4; i++) inv[i] = inv_or_zero(l[i]);
  store_rows<DM>(io.o + head_at(a, a.o, bh) + t0 * a.o.sr, nq, a.o.sr, a, o, inv);
}

/* Backward kernel 1, per query tile: lse and delta of its rows (to scratch), then dq.
   Shared: Qs, Gs, Ks, Vs [64][LD], Ps [64][LDP] (p in the first loop, ds in the second). */
template <int DM>
__global__ void __launch_bounds__(NT, MINB(DM))
    att_bwd_q_k(const att_io io, float *__restrict__ lse, float *__restrict__ delta,
                const att_dims a) {
  extern __shared__ float4 att_sm[];
  float *Qs = (float *)att_sm, *Gs = Qs + tl<DM>::SIZE, *Ks = Gs + tl<DM>::SIZE;
  float *Vs = Ks + tl<DM>::SIZE, *Ps = Vs + tl<DM>::SIZE;
  constexpr int LD = tl<DM>::LD, H = tl<DM>::H;
  const int tx = tx_(), ty = ty_();
  int64_t bh;
  int t0, nq, nk;
  query_tile(a, bh, t0, nq, nk);
  int64_t qoff = head_at(a, a.q, bh) + t0 * a.q.sr, koff = head_at(a, a.k, bh);
  const float *Kb = io.k + koff, *Vb = io.v + koff;
  fill2<DM>(Qs, io.q + qoff, a.q.sr, Gs, io.g + head_at(a, a.o, bh) + t0 * a.o.sr, a.o.sr, nq,
            a);
  float m[4], l[4], o[4][4 * H];
  softmax_rows<DM>(a, Kb, Vb, t0, nk, Qs, Ks, Vs, Ps, m, l, o);
  __syncthreads(); /* Gs filled even when no key tile ran; Ks, Vs, Ps consumed */
  float ls[4], dl[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float inv = inv_or_zero(l[i]), part = 0.f;
    const float *g = Gs + (4 * ty + i) * LD + 4 * tx; /* zero past D, and o is too */
#pragma unroll
    for (int h = 0; h < H; h++) {
      float4 gv = *(const float4 *)(g + 64 * h);
      part = fmaf(gv.x, o[i][4 * h] * inv, part);
      part = fmaf(gv.y, o[i][4 * h + 1] * inv, part);
      part = fmaf(gv.z, o[i][4 * h + 2] * inv, part);
      part = fmaf(gv.w, o[i][4 * h + 3] * inv, part);
    }
    dl[i] = sum16(part);
    ls[i] = l[i] == 0.f ? -INFINITY : m[i] + logf(l[i]); /* -inf: no p is ever built */
    int r = 4 * ty + i;
    if (tx == 0 && r < nq) {
      lse[bh * a.T + t0 + r] = ls[i];
      delta[bh * a.T + t0 + r] = dl[i];
    }
  }
  if (!io.dq) return; /* uniform over the block */
  float dq[4][4 * H];
  zero(dq);
  for (int j0 = 0; j0 < nk; j0 += TR) {
    int kn = min(TR, nk - j0);
    key_tile<DM>(a, Kb, Vb, j0, kn, Ks, Vs);
    p_ds<LD, true>(Qs, Ks, Gs, Vs, a, ls, dl, [=](int i, int j) {
      int c = tx + 16 * j;
      return c < kn && (!a.causal || j0 + c <= t0 + 4 * ty + i);
    }, Ps, Ps);
    __syncthreads(); /* Ps written */
    mm_nn<DM>(Ps, Ks, dq);
  }
  float one[4] = {1.f, 1.f, 1.f, 1.f};
  store_rows<DM>(io.dq + qoff, nq, a.q.sr, a, dq, one);
}

/* Backward kernel 2, per key tile (in key order, which is heaviest first when causal: the
   first key tiles are seen by the most queries): over the query tiles that see its keys,
   in order of t, dv = sum_t p_t g_t and dk = sum_t ds_t q_t. The 4 x 4 micro-tiles here
   are transposed: rows are keys, columns queries. Shared: Ks, Vs, Qs, Gs [64][LD],
   Pt, Dt [64][LDP] (p and ds, key-major). */
template <int DM>
__global__ void __launch_bounds__(NT, MINB(DM))
    att_bwd_kv_k(const att_io io, const float *__restrict__ lse,
                 const float *__restrict__ delta, const att_dims a) {
  extern __shared__ float4 att_sm[];
  float *Ks = (float *)att_sm, *Vs = Ks + tl<DM>::SIZE, *Qs = Vs + tl<DM>::SIZE;
  float *Gs = Qs + tl<DM>::SIZE, *Pt = Gs + tl<DM>::SIZE, *Dt = Pt + TR * LDP;
  constexpr int LD = tl<DM>::LD, H = tl<DM>::H;
  const int tx = tx_(), ty = ty_();
  int64_t bh = (int64_t)blockIdx.x % a.BH;
  int s0 = (int)((int64_t)blockIdx.x / a.BH) * TR, kn = min(TR, a.S - s0);
  int64_t koff = head_at(a, a.k, bh) + s0 * a.k.sr;
  const float *Qb = io.q + head_at(a, a.q, bh), *Gb = io.g + head_at(a, a.o, bh);
  const float *lb = lse + bh * a.T, *db = delta + bh * a.T;
  fill2<DM>(Ks, io.k + koff, a.k.sr, Vs, io.v + koff, a.k.sr, kn, a);
  float dk[4][4 * H], dv[4][4 * H];
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
    p_ds<LD, false>(Ks, Qs, Vs, Gs, a, ls, dl, [=](int i, int j) {
      int c = 4 * ty + i, r = tx + 16 * j;
      return c < kn && r < tn && (!a.causal || t0 + r >= s0 + c);
    }, Pt, Dt);
    __syncthreads(); /* Pt, Dt written */
    if (io.dv) mm_nn<DM>(Pt, Gs, dv);
    if (io.dk) mm_nn<DM>(Dt, Qs, dk);
  }
  float one[4] = {1.f, 1.f, 1.f, 1.f};
  if (io.dk) store_rows<DM>(io.dk + koff, kn, a.k.sr, a, dk, one);
  if (io.dv) store_rows<DM>(io.dv + koff, kn, a.k.sr, a, dv, one);
}

/* Dynamic shared memory of each kernel. */
template <int DM> size_t fwd_bytes(void) { return sizeof(float) * (3 * tl<DM>::SIZE + TR * LDP); }
template <int DM> size_t bwd_q_bytes(void) { return sizeof(float) * (4 * tl<DM>::SIZE + TR * LDP); }
template <int DM> size_t bwd_kv_bytes(void) {
  return sizeof(float) * (4 * tl<DM>::SIZE + 2 * TR * LDP);
}

/* The dims, layouts and pointers of either op (as the CPU's attn_shape). */
att_dims att_shape(const rg_kargs *k, att_io *io) {
  att_dims a;
  const rg_tv *x = &k->in[0];
  int op = k->node->op;
  memset(io, 0, sizeof *io);
  if (op == RG_OP_ATTENTION || op == RG_OP_ATTENTION_BWD) {
    a.H = x->dims[1];
    a.T = (int)x->dims[2];
    a.D = (int)x->dims[3];
    a.S = (int)k->in[1].dims[2];
    a.q = {a.H * a.T * a.D, (int64_t)a.T * a.D, a.D};
    a.k = {a.H * a.S * a.D, (int64_t)a.S * a.D, a.D};
    a.o = a.q;
    io->q = (const float *)x->p, io->k = (const float *)k->in[1].p;
    io->v = (const float *)k->in[2].p;
    if (op == RG_OP_ATTENTION) {
      io->o = (float *)k->out[0].p;
    } else {
      io->g = (const float *)k->in[3].p;
      io->dq = (float *)k->out[0].p, io->dk = (float *)k->out[1].p;
      io->dv = (float *)k->out[2].p;
    }
  } else { /* qkv [B,T,3C]: q, k, v are the thirds of a row */
    int64_t C = x->dims[2] / 3;
    a.H = k->node->i[1];
    a.T = a.S = (int)x->dims[1];
    a.D = (int)(C / a.H);
    a.q = a.k = {a.T * 3 * C, a.D, 3 * C};
    a.o = {a.T * C, a.D, C};
    io->q = (const float *)x->p, io->k = io->q + C, io->v = io->q + 2 * C;
    if (op == RG_OP_ATTENTION_QKV) {
      io->o = (float *)k->out[0].p;
    } else {
      io->g = (const float *)k->in[1].p;
      io->dq = (float *)k->out[0].p, io->dk = io->dq + C, io->dv = io->dq + 2 * C;
    }
  }
  a.BH = x->dims[0] * a.H;
  a.dn = (a.D + 3) & ~3;
  a.scale = (float)(1.0 / sqrt((double)a.D));
  a.causal = k->node->i[0] != 0;
  /* float4 global access when every row starts 16-byte aligned */
  bool al = a.D % 4 == 0;
  const att_lay *ls[3] = {&a.q, &a.k, &a.o};
  for (int i = 0; i < 3; i++) al = al && (ls[i]->sb | ls[i]->sh | ls[i]->sr) % 4 == 0;
  const void *ps[8] = {io->q, io->k, io->v, io->g, io->o, io->dq, io->dk, io->dv};
  for (int i = 0; i < 8; i++) al = al && (uintptr_t)ps[i] % 16 == 0;
  a.vec = al;
  return a;
}

size_t smem_optin(void) {
  int dev = 0, v = 48 * 1024;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    v = 48 * 1024;
  return (size_t)v;
}

/* Launches kern on `blocks` blocks with `bytes` of dynamic shared memory (opting in above
   48 KB). */
template <typename Kern, typename... Args>
void launch_att(Kern kern, int64_t blocks, size_t bytes, cudaStream_t st, Args... args) {
  if (bytes > 48 * 1024)
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
  kern<<<(unsigned)blocks, NT, bytes, st>>>(args...);
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

/* Fails (RG_ERR_UNSUPPORTED) when a kernel needs more shared memory than the device has. */
rg_status smem_fits(rg_kargs *k, const att_dims &a, size_t need) {
  size_t limit = smem_optin();
  if (need <= limit) return RG_OK;
  snprintf(k->msg, k->msgcap,
           "attention with D = %d needs %zu bytes of shared memory per block; this device "
           "allows %zu", a.D, need, limit);
  return RG_ERR_UNSUPPORTED;
}

rg_status no_scratch(rg_kargs *k, size_t need) {
  snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu", need,
           rg_cuda_ctx(k)->scratch_bytes);
  return RG_ERR_UNSUPPORTED;
}

template <int DM> rg_status attention_fwd(rg_kargs *k, const att_dims &a, const att_io &io) {
  size_t bytes = fwd_bytes<DM>();
  rg_status st = smem_fits(k, a, bytes);
  if (st != RG_OK) return st;
  launch_att(att_fwd_k<DM>, a.BH * cdiv(a.T, TR), bytes, rg_cuda_ctx(k)->stream, io, a);
  return rg_cuda_check_launch(k, "attention");
}

/* T > 0 and S >= 0; lse and delta: BH * T floats each. */
template <int DM>
rg_status attention_bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *lse,
                        float *delta) {
  size_t qbytes = bwd_q_bytes<DM>(), kbytes = bwd_kv_bytes<DM>();
  rg_status st = smem_fits(k, a, qbytes > kbytes ? qbytes : kbytes);
  if (st != RG_OK) return st;
  cudaStream_t s = rg_cuda_ctx(k)->stream;
  launch_att(att_bwd_q_k<DM>, a.BH * cdiv(a.T, TR), qbytes, s, io, lse, delta, a);
  if ((io.dk || io.dv) && a.S > 0) {
    const float *cl = lse, *cd = delta;
    launch_att(att_bwd_kv_k<DM>, a.BH * cdiv(a.S, TR), kbytes, s, io, cl, cd, a);
  }
  return rg_cuda_check_launch(k, "attention_bwd");
}

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

static rg_status attention_fwd_any(rg_kargs *k) {
  att_io io;
  att_dims a = att_shape(k, &io);
  if (k->out[0].n == 0) return RG_OK;
  rg_status st = attention_limits(k, a);
  if (st != RG_OK) return st;
  return a.D <= 64 ? attention_fwd<64>(k, a, io) : attention_fwd<128>(k, a, io);
}

/* Scratch: the log-sum-exp and delta of every query row (8 bytes a row). */
static rg_status attention_bwd_any(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  att_io io;
  att_dims a = att_shape(k, &io);
  if (a.BH == 0 || a.D == 0 || (a.T == 0 && a.S == 0)) return RG_OK;
  rg_status st = attention_limits(k, a);
  if (st != RG_OK) return st;
  if (a.T == 0) { /* no queries (rg_attention only: qkv has S = T), so dk and dv are zero
                     and dense; stream-ordered memsets, capturable, whose status is the
                     runtime's last error, which check_launch reads */
    size_t bytes = (size_t)(a.BH * a.S * a.D) * sizeof(float);
    if (io.dk) cudaMemsetAsync(io.dk, 0, bytes, L->stream);
    if (io.dv) cudaMemsetAsync(io.dv, 0, bytes, L->stream);
    return rg_cuda_check_launch(k, "attention_bwd");
  }
  size_t rows = (size_t)(a.BH * a.T), need = 2 * rows * sizeof(float);
  if (need > L->scratch_bytes) return no_scratch(k, need);
  float *lse = (float *)L->scratch, *delta = lse + rows;
  return a.D <= 64 ? attention_bwd<64>(k, a, io, lse, delta)
                   : attention_bwd<128>(k, a, io, lse, delta);
}

rg_status rg_cuda_attention(rg_kargs *k) { return attention_fwd_any(k); }
rg_status rg_cuda_attention_qkv(rg_kargs *k) { return attention_fwd_any(k); }
rg_status rg_cuda_attention_bwd(rg_kargs *k) { return attention_bwd_any(k); }
rg_status rg_cuda_attention_qkv_bwd(rg_kargs *k) { return attention_bwd_any(k); }
