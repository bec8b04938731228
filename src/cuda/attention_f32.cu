/*
 * attention_f32.cu - the attention kernels for F32 inputs: FMA chains on f32 tiles, the
 * reference path (within 1e-5 of the CPU). The model, the forward's online softmax and the
 * backward's two kernels are described in attention.h.
 *
 * A block of 256 threads owns a tile of 64 rows (queries, or keys in the key pass) and
 * walks the other side in tiles of 64. Rows are copied from global memory into shared
 * tiles [64][LD], zero past the tensor's last row and past D; DM is the template bound on
 * D (64 or 128: D <= 128 is what the backend supports); LD = DM + 4 floats. Threads form
 * a 16 x 16 grid, ty = tid / 16, tx = tid % 16:
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
 * Resources per block, shared memory in KB for DM = 64 / 128: forward 68 / 116 (Q K V P),
 * kernel 1 85 / 149 (Q G K V P), kernel 2 102 / 166 (K V Q G Pt Dt). At DM = 64 two blocks
 * fit an SM, and __launch_bounds__ caps registers at 128 for it; at DM = 128 one block
 * fits, and registers are not capped. Neither spills.
 *
 * Barriers: every loop iteration is  sync (the previous iteration's readers are done) ->
 * fill tiles -> sync -> scores, write P -> sync -> products from P.
 */
#include "attention.h"

namespace { /* file-private: kernels and helpers (the launchers follow) */

/* Blocks per SM the register allocation must allow: two at DM = 64 (their shared memory
   fits twice), one at DM = 128 (it does not, so registers need not be capped). */
#define MINB(DM) ((DM) == 64 ? 2 : 1)

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
   MK: scale s + add(i, j) (the masks' term, read only where vis) in place of scale s.
   p goes to P and is read back for ds, so one 4 x 4 accumulator is live at a time (the
   registers matter: two blocks must fit an SM at DM = 64); DS may be P (ds replaces p).
   ROWS: lse and delta belong to rows i (queries are rows), else to columns j. */
template <int DM, bool ROWS, bool MK, typename Vis, typename Add>
__device__ __forceinline__ void p_ds(const float *A, const float *B, const float *C,
                                     const float *E, const att_dims &a, const float (&ls)[4],
                                     const float (&dl)[4], Vis vis, Add add, float *P,
                                     float *DS) {
  constexpr int LD = tl<DM>::LD, LDP = tl<DM>::LDP;
  float acc[4][4];
  zero(acc);
  mm_nt<LD>(A, B, a.dn, acc);
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      bool v = vis(i, j);
      float x = acc[i][j] * a.scale;
      if constexpr (MK) x = v ? x + add(i, j) : x;
      P[(4 * ty_() + i) * LDP + tx_() + 16 * j] = v ? expf(x - (ROWS ? ls[i] : ls[j])) : 0.f;
    }
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

/* Key tile j0 (kn rows) into Ks and Vs, between the barriers that make it safe: the
   previous tile's readers of Ks, Vs and Ps are done before, the tile is whole after. */
template <int DM>
__device__ __forceinline__ void key_tile(const att_dims &a, const float *Kb, const float *Vb,
                                         int j0, int kn, float *Ks, float *Vs) {
  __syncthreads();
  fill2<DM>(Ks, Kb + j0 * a.k.sr, a.k.sr, Vs, Vb + j0 * a.k.sr, a.k.sr, kn, a);
  __syncthreads();
}

/* Forward. Shared: Qs, Ks, Vs [64][LD], Ps [64][LDP]. MK: with the masks (mask_at). */
template <int DM, bool MK>
__global__ void __launch_bounds__(NT, MINB(DM)) att_fwd_k(const att_io io, const att_dims a) {
  constexpr int LDP = tl<DM>::LDP;
  extern __shared__ __align__(128) unsigned char att_sm[];
  float *Qs = (float *)att_sm, *Ks = Qs + tl<DM>::SIZE, *Vs = Ks + tl<DM>::SIZE;
  float *Ps = Vs + tl<DM>::SIZE;
  const int tx = tx_(), ty = ty_();
  int64_t bh;
  int t0, nq, nk;
  query_tile(a, TR, bh, t0, nq, nk);
  const int64_t mb = bh / a.H, mh = bh % a.H; /* the masks' batch and head */
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
        if constexpr (MK)
          s[i][j] = vis && t < a.T ? s[i][j] * a.scale + mask_at(io, a, mb, mh, t, j0 + c)
                                   : -INFINITY;
        else
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
template <int DM, bool MK>
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
    p_ds<DM, true, MK>(Qs, Ks, Gs, Vs, a, ls, dl, [=](int i, int j) {
      int c = tx + 16 * j;
      return c < kn && (!a.causal || j0 + c <= t0 + 4 * ty + i);
    }, [&](int i, int j) { /* rows past T: masked */
      int t = t0 + 4 * ty + i;
      return t < a.T ? mask_at(io, a, bh / a.H, bh % a.H, t, j0 + tx + 16 * j) : -INFINITY;
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
template <int DM, bool MK>
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
    p_ds<DM, false, MK>(Ks, Qs, Vs, Gs, a, ls, dl, [=](int i, int j) {
      int c = 4 * ty + i, r = tx + 16 * j;
      return c < kn && r < tn && (!a.causal || t0 + r >= s0 + c);
    }, [&](int i, int j) {
      return mask_at(io, a, bh / a.H, bh % a.H, t0 + tx + 16 * j, s0 + 4 * ty + i);
    }, Pt, Dt);
    __syncthreads(); /* Pt, Dt written */
    if (io.dv) mm_nn<DM>(Pt, Gs, dv);
    if (io.dk) mm_nn<DM>(Dt, Qs, dk);
  }
  const float one[4] = {1.f, 1.f, 1.f, 1.f};
  if (io.dk) store_rows<DM>(io.dk, koff, kn, a.k.sr, a, dk, one);
  if (io.dv) store_rows<DM>(io.dv, koff, kn, a.k.sr, a, dv, one);
}

/* Dynamic shared memory of the f32 kernels: tiles [64][DM + 4] and P tiles [64][68]. */
template <int DM> size_t smem_bytes(int tiles, int ptiles) {
  return sizeof(float) * (size_t)(tiles * tl<DM>::SIZE + ptiles * tl<DM>::PSIZE);
}

/* The kernels at DM = 64 or 128, with the masks (MK) or without. */
template <int DM, bool MK> rg_status fwd(rg_kargs *k, const att_dims &a, const att_io &io) {
  return launch_att(k, a, att_fwd_k<DM, MK>, a.BH * cdiv(a.T, TR), NT, smem_bytes<DM>(3, 1),
                    io, a);
}
template <int DM, bool MK>
rg_status bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *delta) {
  int64_t qb = a.BH * cdiv(a.T, TR), kb = a.BH * cdiv(a.S, TR);
  const float *cd = delta;
  rg_status st =
      launch_att(k, a, att_bwd_q_k<DM, MK>, qb, NT, smem_bytes<DM>(4, 1), io, delta, a);
  if (st != RG_OK || (!io.dk && !io.dv) || a.S == 0) return st;
  return launch_att(k, a, att_bwd_kv_k<DM, MK>, kb, NT, smem_bytes<DM>(4, 2), io, cd, a);
}

} /* namespace */

rg_status rg_cuda_att_f32_fwd(rg_kargs *k, const att_dims &a, const att_io &io) {
  if (io.kp || io.bias) return a.D <= 64 ? fwd<64, true>(k, a, io) : fwd<128, true>(k, a, io);
  return a.D <= 64 ? fwd<64, false>(k, a, io) : fwd<128, false>(k, a, io);
}

rg_status rg_cuda_att_f32_bwd(rg_kargs *k, const att_dims &a, const att_io &io, float *delta) {
  if (io.kp || io.bias)
    return a.D <= 64 ? bwd<64, true>(k, a, io, delta) : bwd<128, true>(k, a, io, delta);
  return a.D <= 64 ? bwd<64, false>(k, a, io, delta) : bwd<128, false>(k, a, io, delta);
}
