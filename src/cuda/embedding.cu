/*
 * embedding.cu - CUDA kernels for the embedding lookup and its backward pass. Mirrors
 * src/cpu/embedding.c.
 *
 * Invariants:
 *  - Bad ids are found by a check kernel that keeps the lowest failing position (rows.h:
 *    the check word); the next kernel raises it through the error word and skips those
 *    positions, so nothing is read or written out of bounds and the position named is the
 *    one the CPU names.
 *  - The backward never uses float atomics where scratch allows: it sorts positions by id
 *    (a counting sort made stable by ranking) and sums each table row in position order,
 *    as the CPU does; a small table finds its rows' positions by scanning, in an order
 *    fixed by the number of positions. Only the fallback for a sort that does not fit in
 *    scratch adds with float atomics.
 */
#include "rows.h"

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define THREADS 256
/* Scratch bytes of the check word: the data that follows it starts this far in. */
#define HDR_BYTES 256

/* ---- id checks ---------------------------------------------------------------------------- */

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

/* offs[v] = exclusive prefix sum of counts (offs[V] = total), over blocks of SCAN_CHUNK
   counts: emb_part_k sums each block's counts into part[b]; emb_scan_k then scans its
   block from the sum of the parts before it, and zeroes the counts for reuse as fill
   cursors. Integer sums: the same offsets in any order. A thread takes SCAN_EPT
   consecutive counts. (A single block scanning all V would do the work of the whole GPU
   on one SM.) */
#define SCAN_EPT 8
#define SCAN_THREADS 256
#define SCAN_CHUNK (SCAN_EPT * SCAN_THREADS)

/* Exclusive prefix over the block of v (every thread's value); *total gets the block's sum. */
__device__ int32_t block_excl_scan(int32_t v, int32_t *total) {
  __shared__ int32_t wsum[33];
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int32_t incl = v;
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
    if (lane < nw) wsum[lane] = wi - w;
    if (lane == 31) wsum[32] = wi;
  }
  __syncthreads();
  *total = wsum[32];
  return wsum[wid] + incl - v;
}

__global__ void __launch_bounds__(SCAN_THREADS)
    emb_part_k(const int32_t *__restrict__ counts, int64_t V, int32_t *__restrict__ part) {
  int64_t i0 = (int64_t)blockIdx.x * SCAN_CHUNK + SCAN_EPT * threadIdx.x;
  int32_t local = 0, total;
#pragma unroll
  for (int q = 0; q < SCAN_EPT; q++) local += i0 + q < V ? counts[i0 + q] : 0;
  block_excl_scan(local, &total);
  if (threadIdx.x == 0) part[blockIdx.x] = total;
}

__global__ void __launch_bounds__(SCAN_THREADS)
    emb_scan_k(int32_t *__restrict__ counts, int32_t *__restrict__ offs, int64_t V,
               const int32_t *__restrict__ part) {
  __shared__ int32_t base;
  if (threadIdx.x < 32) { /* the parts before this block, summed by warp 0 */
    int32_t b = 0;
    for (unsigned j = threadIdx.x; j < blockIdx.x; j += 32) b += part[j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) b += __shfl_xor_sync(FULL, b, o);
    if (threadIdx.x == 0) base = b;
  }
  int64_t i0 = (int64_t)blockIdx.x * SCAN_CHUNK + SCAN_EPT * threadIdx.x;
  int32_t c[SCAN_EPT], local = 0, total;
#pragma unroll
  for (int q = 0; q < SCAN_EPT; q++) {
    c[q] = i0 + q < V ? counts[i0 + q] : 0;
    local += c[q];
  }
  int32_t run = block_excl_scan(local, &total) + base; /* its barriers publish base */
#pragma unroll
  for (int q = 0; q < SCAN_EPT; q++)
    if (i0 + q < V) {
      offs[i0 + q] = run;
      run += c[q];
      counts[i0 + q] = 0;
    }
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) offs[V] = base + total;
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

/* A small table (V * n <= EMB_SCAN_MAX: a character vocabulary) skips the sort: block v
   finds its row's positions itself. Its EMB_WARPS warps take the positions in EMB_WARPS
   contiguous runs, 32 ids a ballot; a warp adds its matches' gradient rows in position
   order from 0.0f (lane l owns columns l, l + 32, ... of a pass of 32 * EMB_COLS), and the
   warps' sums are added in warp order: an order fixed by n, so the bits repeat (they
   differ from the CPU's single run by float rounding). Rows without a match get zeros.
   One kernel instead of seven. Block 0 raises for the lowest bad id. */
#define EMB_SCAN_MAX ((int64_t)1 << 22)
#define EMB_WARPS 8
__global__ void __launch_bounds__(32 * EMB_WARPS)
    emb_scan_acc_k(const float *__restrict__ g, const int32_t *__restrict__ idx,
                   float *__restrict__ dt, int64_t n, int64_t V, int64_t C, rg_cuda_err *err,
                   int node) {
  __shared__ float part[EMB_WARPS][32 * EMB_COLS];
  __shared__ int64_t bad_at[EMB_WARPS];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  int32_t v = (int32_t)blockIdx.x;
  int64_t run = (n + EMB_WARPS - 1) / EMB_WARPS, p_lo = min(n, w * run);
  int64_t p_hi = min(n, p_lo + run);
  if (blockIdx.x == 0) { /* the lowest bad position: each warp its run's first, then min */
    int64_t first = -1;
    for (int64_t p0 = p_lo; p0 < p_hi && first < 0; p0 += 32) {
      bool in = p0 + lane < p_hi;
      int32_t id = in ? idx[p0 + lane] : 0;
      unsigned bad = __ballot_sync(FULL, in && (id < 0 || id >= V));
      if (bad) first = p0 + __ffs(bad) - 1;
    }
    if (lane == 0) bad_at[w] = first;
    __syncthreads();
    if (threadIdx.x == 0)
      for (int k = 0; k < EMB_WARPS; k++)
        if (bad_at[k] >= 0) {
          rg_cuda_raise(err, RG_CUDA_E_INDEX, node, idx[bad_at[k]], bad_at[k], V);
          break;
        }
  }
  for (int64_t c0 = 0; c0 < C; c0 += 32 * EMB_COLS) {
    float acc[EMB_COLS];
#pragma unroll
    for (int q = 0; q < EMB_COLS; q++) acc[q] = 0.f;
    for (int64_t p0 = p_lo; p0 < p_hi; p0 += 32) {
      bool in = p0 + lane < p_hi;
      unsigned hit = __ballot_sync(FULL, in && idx[p0 + lane] == v);
      while (hit) {
        const float *row = g + (p0 + __ffs(hit) - 1) * C;
        hit &= hit - 1;
#pragma unroll
        for (int q = 0; q < EMB_COLS; q++) {
          int64_t c = c0 + lane + 32 * q;
          if (c < C) acc[q] += row[c];
        }
      }
    }
#pragma unroll
    for (int q = 0; q < EMB_COLS; q++) part[w][lane + 32 * q] = acc[q];
    __syncthreads();
    for (int j = threadIdx.x; j < 32 * EMB_COLS; j += blockDim.x) {
      int64_t c = c0 + j;
      float sum = 0.f;
      for (int k = 0; k < EMB_WARPS; k++) sum += part[k][j];
      if (c < C) dt[(int64_t)v * C + c] = sum;
    }
    __syncthreads();
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

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

rg_status rg_cuda_embedding(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const int32_t *idx = (const int32_t *)k->in[1].p;
  int64_t V = k->in[0].dims[0], C = k->in[0].dims[1], n = k->in[1].n;
  if (n == 0) return RG_OK;
  if (L->scratch_bytes < sizeof(check_hdr)) return rg_cuda_no_scratch(k, sizeof(check_hdr));
  check_hdr *h = (check_hdr *)L->scratch;
  hdr_init_k<<<1, 1, 0, L->stream>>>(h);
  ids_check_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(idx, n, V, h);
  emb_fwd_k<<<(unsigned)max64(1, min64(cdiv(n, 8), 1 << 20)), THREADS, 0, L->stream>>>(
      (const float *)k->in[0].p, idx, (float *)k->out[0].p, n, C, V, h, L->err, L->node);
  return rg_cuda_check_launch(k, "embedding");
}

/* A small table: emb_scan_acc_k alone. Else scratch: header, counts [V+1], offsets [V+1],
   bucket list [n], sorted list [n], the scan's block sums (int32). Without room for them
   (or with more than 2^31 positions) the float-atomic fallback runs. */
rg_status rg_cuda_embedding_bwd(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const int32_t *idx = (const int32_t *)k->in[0].p;
  const float *g = (const float *)k->in[1].p;
  float *dt = (float *)k->out[0].p;
  int64_t V = k->out[0].dims[0], C = k->out[0].dims[1], n = k->in[0].n;
  if (V > 0 && V <= 65535 && C > 0 && V * n <= EMB_SCAN_MAX) {
    emb_scan_acc_k<<<(unsigned)V, 32 * EMB_WARPS, 0, L->stream>>>(g, idx, dt, n, V, C,
                                                                  L->err, L->node);
    return rg_cuda_check_launch(k, "embedding_bwd");
  }
  if (L->scratch_bytes < HDR_BYTES) return rg_cuda_no_scratch(k, HDR_BYTES);
  check_hdr *h = (check_hdr *)L->scratch;
  hdr_init_k<<<1, 1, 0, L->stream>>>(h);
  int64_t nb = max64(1, cdiv(V, SCAN_CHUNK)); /* the scan's blocks */
  size_t need = HDR_BYTES + sizeof(int32_t) * (2 * (size_t)(V + 1) + 2 * (size_t)n + nb);
  if (need > L->scratch_bytes || n >= INT32_MAX || V >= INT32_MAX || V * C == 0) {
    if (n > 0) ids_check_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(idx, n, V, h);
    zero_f32_k<<<rg_cuda_blocks(V * C, THREADS), THREADS, 0, L->stream>>>(dt, V * C);
    emb_scatter_k<<<(unsigned)max64(1, min64(cdiv(n, 8), 1 << 20)), THREADS, 0, L->stream>>>(
        g, idx, dt, n, C, V, h, L->err, L->node);
    return rg_cuda_check_launch(k, "embedding_bwd");
  }
  int32_t *counts = (int32_t *)((char *)L->scratch + HDR_BYTES), *offs = counts + (V + 1);
  int32_t *list = offs + (V + 1), *sorted = list + n, *part = sorted + n;
  unsigned pg = rg_cuda_blocks(max64(n, 1), THREADS);
  zero_i32_k<<<rg_cuda_blocks(V + 1, THREADS), THREADS, 0, L->stream>>>(counts, V + 1);
  emb_hist_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, counts, h);
  emb_part_k<<<(unsigned)nb, SCAN_THREADS, 0, L->stream>>>(counts, V, part);
  emb_scan_k<<<(unsigned)nb, SCAN_THREADS, 0, L->stream>>>(counts, offs, V, part);
  emb_fill_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, offs, counts, list);
  emb_rank_k<<<pg, THREADS, 0, L->stream>>>(idx, n, V, offs, list, sorted);
  unsigned threads = (unsigned)min64(256, cdiv(C, 32) * 32);
  emb_acc_k<<<(unsigned)min64(V, 1 << 20), threads, 0, L->stream>>>(g, offs, sorted, dt, V, C,
                                                                   idx, h, L->err, L->node);
  return rg_cuda_check_launch(k, "embedding_bwd");
}
