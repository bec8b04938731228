/*
 * losses.cu - CUDA kernels for the losses: cross-entropy over the last axis (with its
 * optional fused backward) and its backward kernel, and the mean squared error. Mirrors
 * src/cpu/losses.c.
 *
 * Invariants:
 *  - A row of logits is handled by one group of threads (rows.h: a warp when C <= 1024,
 *    else a block); its statistics are summed in an order fixed by the group size (a
 *    thread's partial sum is float: see the cross-entropy section), so results repeat
 *    exactly.
 *  - The means over rows (cross-entropy) and over elements (mse) never use float atomics:
 *    fixed per-block partials (double) go to scratch and a second kernel adds them in
 *    order.
 *  - A row's exponentials are taken relative to its running maximum.
 *  - Bad targets are kept as the lowest failing row (rows.h: the check word), which the
 *    final kernel raises through the error word; those rows are skipped, so nothing is
 *    read out of bounds and the row named is the one the CPU names.
 *  - Where the CPU computes a float product then a float sum, the kernels use __fmul_rn /
 *    __fadd_rn so nvcc does not fuse them into an FMA with different rounding.
 *  - Element types: the cross-entropy logits and dlogits are each F32 or BF16 (the kernels
 *    are instantiated per type, cuda.h: rg_cuda_typed, compute in float and round a BF16
 *    dlogit once); everything else is F32.
 */
#include "rows.h"

#include <float.h>
#include <math.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define THREADS 256
/* Blocks of the first pass of the mse mean (their partials are added by one block). */
#define LOSS_BLOCKS 1024
#define FLAT_CHUNK 8192

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

   Folding each logit in alone (compare with the running max, branch, a full-precision
   expf, and on a new max a second one to rescale the sum, then a float-to-double
   conversion and a double add that waits on the previous one) costs ~25 instructions an
   element, two to four of them at a quarter rate or less (MUFU, F2F.F64): bound by issue
   and latency, not memory, although the logits are read once. So each thread keeps a
   running max m and a float sum s of exp(x - m); it loads CE_UNROLL groups of 8 (all in
   flight before any is used), takes their max, rescales s at most once (when the max
   grows) and adds 2^((x - m) log2 e) for each, one MUFU.EX2 an element, the 32 terms
   summed pairwise: ~6 instructions an element, so memory sets the pace. m starts at
   -FLT_MAX, not -inf, so a logit of -inf (a masked class) adds 2^-inf = 0, not the NaN of
   -inf - -inf; a NaN or +inf logit makes the row's sum NaN, as on the CPU. A thread's s
   adds ~25 group sums at GPT-2's rows (relative error ~1e-6 at worst, ~1e-7 typical,
   against the CPU's double sum); the threads' pairs merge in float and the row's log is
   taken in double. Long rows take a block of 256 threads a row (up to CE_BLOCKS blocks,
   so the hardware balances rows over SMs), <= 64 registers so four blocks an SM, 64 bytes
   a thread in flight (F32: 128).

   The backward, which reads and writes each logit once and so is bound by memory,
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
   run the backward's kernel after it: for those long rows every fused form was slower
   than the two kernels (the row read again from L2; a copy of it in shared memory; the
   next row copied there by cp.async while the block works on the current one). A warp
   per row (8 rows a block) up to C = 1024, else a block of 256 per row. A second kernel
   (ce_final_k) adds the partials, rather than the last block of the first (each block
   counting itself on an atomic after a fence), which made every block wait at its end,
   where it loaded nothing. */
rg_status rg_cuda_cross_entropy(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  ce_args a = ce_shape(k);
  bool warp = row_config(a.N, a.C).warp, fuse = k->out[2].p != NULL && warp;
  int64_t nb = max64(1, min64(cdiv(a.N, warp ? 8 : 1), CE_BLOCKS)); /* fixed by the shapes */
  size_t need = 2 * (size_t)nb * sizeof(double) + sizeof(float);
  if (need > L->scratch_bytes) return rg_cuda_no_scratch(k, need);
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
   of 256 threads (C <= 8192), all of a row of 8192's loads at once, which keeps the most
   loads in flight. Rows of 1024 threads (C > 8192) load one group at a time: two were
   slower there. */
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
  if (nb < 1) return rg_cuda_no_scratch(k, sizeof(double));
  double *part = (double *)L->scratch;
  mse_part_k<<<(unsigned)nb, THREADS, 0, L->stream>>>((const float *)k->in[0].p,
                                                      (const float *)k->in[1].p, n,
                                                      cdiv(max64(n, 1), nb), part);
  mse_final_k<<<1, THREADS, 0, L->stream>>>(part, (int)nb, n, (float *)k->out[0].p);
  return rg_cuda_check_launch(k, "mse");
}
