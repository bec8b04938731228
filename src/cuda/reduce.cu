/*
 * reduce.cu - CUDA reductions and their companions: sum, mean, max, argmax over one axis or
 * all axes, max's backward, sum_to (the gradient of a broadcast operand) and expand (the
 * broadcast itself). Mirrors src/cpu/reduce.c.
 *
 * Invariants:
 *  - Sums accumulate in double, like the CPU, and in an order fixed by the shapes (and the
 *    backend's scratch size): per-thread strided partials, a fixed tree per block, and for
 *    long reductions per-segment partials in scratch added in segment order by a second
 *    kernel. No float atomics, so a result is bit-identical from run to run.
 *  - Every sum is described the same way: x's axes of size > 1 split into "kept" (they
 *    index the output, row-major) and "reduced" (summed away), adjacent axes merged when
 *    contiguous. A one-axis sum is x as [outer, len, inner] with len reduced; sum_to keeps
 *    the axes out keeps. Kernels pick coalesced access from the innermost x axis: kept
 *    (threads over outputs) or reduced (threads over one output's reduced run). x as a
 *    contiguous [R, C] summed over R (a bias gradient) has its own two passes (col_sum),
 *    whose second, rg_cuda_col_final, other files' column sums share.
 *  - The sums (sum, mean, sum_to, sum_to_acc) read x as F32 or BF16 (a gradient under
 *    bf16 autocast), widened exactly; their outputs are F32. The kernels are instantiated
 *    per x type; the F32 ones are the kernels as they were.
 *  - Max and argmax take the first maximum; a NaN counts as larger than any number (the
 *    first NaN wins), as on the CPU. Candidates are compared by (value, index), so the
 *    combine order across threads does not change the winner.
 */
#include "cuda.h"

#include <math.h>
#include <stdio.h>

namespace { /* file-private: kernels and helpers (the launchers follow) */

#define THREADS 256
/* Threads that share one output in the column kernels (blockDim.y). */
#define COL_Y 8
/* Outputs per 256-thread block in the row kernels (one warp each). */
#define ROW_WARPS 8
/* Aim for at least this many reduced elements per thread before splitting into segments. */
#define PER_THREAD 64
/* Enough blocks to fill the GPU: segments are added until a grid reaches this many. */
#define TARGET_BLOCKS 4096
/* Blocks of the first pass of a one-output sum (its partials are added by one block). */
#define FLAT_BLOCKS 1024
#define FLAT_CHUNK 8192

typedef struct span3 { int64_t outer, len, inner; } span3;

span3 split_axis(const rg_tv *x, int64_t axis) {
  span3 s = {1, x->n, 1};
  if (axis < 0 || x->ndim == 0) return s;
  s.len = x->dims[axis];
  for (int64_t a = 0; a < axis; a++) s.outer *= x->dims[a];
  for (int64_t a = axis + 1; a < x->ndim; a++) s.inner *= x->dims[a];
  return s;
}

/* A block's sum s for output e of segment seg: to the partials [segments][nout] when
   there are several segments (part != NULL), else the result itself. */
__device__ __forceinline__ void seg_out(double *part, int64_t seg, int64_t nout, int64_t e,
                                        double s, double div, float *out,
                                        const rg_cuda_err *acc) {
  if (part)
    part[seg * nout + e] = s;
  else
    rg_cuda_put(out, e, s, div, acc);
}

/* ---- axis sets: the description of a sum --------------------------------------------------- */

typedef struct axset {
  int n;
  int64_t size[RG_MAX_DIMS], stride[RG_MAX_DIMS];
} axset;

/* Appends an axis (outer to inner), merging it into the previous one when contiguous. */
void axset_push(axset *s, int64_t size, int64_t stride) {
  if (s->n > 0 && s->stride[s->n - 1] == size * stride) {
    s->size[s->n - 1] *= size;
    s->stride[s->n - 1] = stride;
    return;
  }
  s->size[s->n] = size;
  s->stride[s->n] = stride;
  s->n++;
}

int64_t axset_count(const axset *s) {
  int64_t c = 1;
  for (int a = 0; a < s->n; a++) c *= s->size[a];
  return c;
}

/* x offset of the idx-th position of the row-major walk over s's axes (idx < count). */
__device__ __forceinline__ int64_t axset_offset(const axset &s, int64_t idx) {
  int64_t off = 0;
#pragma unroll
  for (int a = RG_MAX_DIMS - 1; a >= 1; a--) {
    if (a < s.n) {
      off += (idx % s.size[a]) * s.stride[a];
      idx /= s.size[a];
    }
  }
  return s.n > 0 ? off + idx * s.stride[0] : 0;
}

typedef struct sum_plan {
  axset kept, red;
  int64_t nout, rcount;
} sum_plan;

/* x's axes of size > 1 with their row-major strides; keep[a] says which set each joins. */
sum_plan plan_sum(const rg_tv *x, const bool *keep) {
  sum_plan p;
  p.kept.n = p.red.n = 0;
  int64_t st[RG_MAX_DIMS], s = 1;
  for (int a = x->ndim - 1; a >= 0; a--) {
    st[a] = s;
    s *= x->dims[a];
  }
  for (int a = 0; a < x->ndim; a++) {
    if (x->dims[a] == 1) continue;
    axset_push(keep[a] ? &p.kept : &p.red, x->dims[a], st[a]);
  }
  p.nout = axset_count(&p.kept);
  p.rcount = axset_count(&p.red);
  return p;
}

/* One output: block b sums x[b*cs, (b+1)*cs) into part[b]. */
template <class TX>
__global__ void flat_part_k(const TX *__restrict__ x, int64_t n, int64_t cs,
                            double *__restrict__ part) {
  __shared__ double sh[32];
  int64_t lo = (int64_t)blockIdx.x * cs, hi = min(n, lo + cs);
  double acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += rg_ld(x, i);
  acc = block_sum(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* Adds nb partials in a fixed order and writes out[0] = sum / div. */
__global__ void flat_final_k(const double *__restrict__ part, int nb, double div,
                             float *__restrict__ out, const rg_cuda_err *acc) {
  __shared__ double sh[32];
  double sum = 0;
  for (int i = threadIdx.x; i < nb; i += blockDim.x) sum += part[i];
  sum = block_sum(sum, sh);
  if (threadIdx.x == 0) rg_cuda_put(out, 0, sum, div, acc);
}

/* Innermost x axis kept: threadIdx.x walks consecutive outputs (coalesced), threadIdx.y
   and blockIdx.y (segments of rseg reduced positions) split the reduced positions. With
   part == NULL the block writes out = sum / div, else part[segment * nout + e]. */
template <class TX>
__global__ void cols_k(const TX *__restrict__ x, axset kept, axset red, int64_t nout,
                       int64_t rcount, int64_t rseg, double div, float *__restrict__ out,
                       double *__restrict__ part, const rg_cuda_err *acc) {
  __shared__ double sh[COL_Y][33];
  int tx = threadIdx.x, ty = threadIdx.y;
  int64_t e = (int64_t)blockIdx.x * 32 + tx;
  int64_t r0 = (int64_t)blockIdx.y * rseg, r1 = min(rcount, r0 + rseg);
  double sum = 0;
  if (e < nout) {
    const TX *base = x + axset_offset(kept, e);
    for (int64_t r = r0 + ty; r < r1; r += COL_Y) sum += rg_ld(base, axset_offset(red, r));
  }
  sh[ty][tx] = sum;
  __syncthreads();
  if (ty == 0 && e < nout) {
    double s = 0;
#pragma unroll
    for (int j = 0; j < COL_Y; j++) s += sh[j][tx];
    seg_out(part, blockIdx.y, nout, e, s, div, out, acc);
  }
}

/* Innermost x axis reduced: one warp per output, lanes over consecutive reduced positions
   (coalesced); blockIdx.y picks the segment as in cols_k. */
template <class TX>
__global__ void rows_k(const TX *__restrict__ x, axset kept, axset red, int64_t nout,
                       int64_t rcount, int64_t rseg, double div, float *__restrict__ out,
                       double *__restrict__ part, const rg_cuda_err *acc) {
  int lane = threadIdx.x & 31;
  int64_t e = (int64_t)blockIdx.x * ROW_WARPS + (threadIdx.x >> 5);
  if (e >= nout) return; /* whole warps leave together: no block barrier follows */
  int64_t r0 = (int64_t)blockIdx.y * rseg, r1 = min(rcount, r0 + rseg);
  const TX *base = x + axset_offset(kept, e);
  double sum = 0;
  for (int64_t r = r0 + lane; r < r1; r += 32) sum += rg_ld(base, axset_offset(red, r));
  sum = warp_sum(sum);
  if (lane == 0) {
    seg_out(part, blockIdx.y, nout, e, sum, div, out, acc);
  }
}

/* out[e] = (sum over segments of part[s * nout + e], in segment order) / div. */
__global__ void seg_final_k(const double *__restrict__ part, int64_t nseg, int64_t nout,
                            double div, float *__restrict__ out, const rg_cuda_err *acc) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < nout;
       e += (int64_t)gridDim.x * blockDim.x) {
    double s = 0;
    for (int64_t g = 0; g < nseg; g++) s += part[g * nout + e];
    rg_cuda_put(out, e, s, div, acc);
  }
}

/* ---- column sums of a [R, C] matrix ----------------------------------------------------
   The commonest sum of a training step: a bias gradient (sum_to of [rows, C] to [C]) and a
   sum over axis 0. The general column kernel (cols_k) is slow here: an axset offset per
   element costs int64 divisions, and 32 columns a block leave most of the GPU idle when
   C is small. Here a warp reads 128 consecutive columns as groups of
   four (512 coalesced bytes a row, 256 of bf16; 32 elements where C % 4 != 0), and the
   rows are cut into chunks so that the grid has about CP_BLOCKS blocks whatever C is.
   Each block adds its chunk (a fixed split over its CP_Y row threads, added in order) to
   a row of double partials [nchunk][C]; col_final_k adds the chunks in a fixed order. The
   chunking depends only on R and C, so results repeat bit for bit. At most CP_ONE_ROWS rows are one chunk (32 rows a row thread): a small
   batch's bias gradient is then one kernel, its launch the larger cost. */

#define CP_Y 8         /* row threads per block of col_part_k */
#define CP_BLOCKS 512  /* about 4 blocks per SM on a 132-SM GPU (a constant: see above) */
#define CP_MIN_ROWS 32 /* rows per chunk at least: 4 per row thread */
#define CP_ONE_ROWS 256 /* rows summed in one chunk (one kernel) whatever C is */
#define CF_Y 32        /* chunk threads per column in col_final_k */

template <class TX> __device__ __forceinline__ void add_cols(const TX *p, double (&s)[1]) {
  s[0] += rg_ld(p, 0);
}
template <class TX> __device__ __forceinline__ void add_cols(const TX *p, double (&s)[4]) {
  float4 v = rg_ld4(p, 0); /* C % 4 == 0 and x 16-byte aligned: every row is */
  s[0] += v.x, s[1] += v.y, s[2] += v.z, s[3] += v.w;
}

/* Block (x, y): columns [x * 32V, (x+1) * 32V), rows [y * rchunk, (y+1) * rchunk). Lane tx
   owns V consecutive columns; row thread ty takes rows ty, ty + CP_Y, ... of the chunk.
   With part == NULL (one chunk) the block writes the results itself. */
template <int V, class TX>
__global__ void col_part_k(const TX *__restrict__ x, int64_t R, int64_t C, int64_t rchunk,
                           double *__restrict__ part, double div, float *__restrict__ out,
                           const rg_cuda_err *acc) {
  __shared__ double sh[CP_Y][32 * V + 1];
  int tx = threadIdx.x, ty = threadIdx.y;
  int64_t cb = (int64_t)blockIdx.x * 32 * V, c0 = cb + tx * V;
  int64_t r0 = (int64_t)blockIdx.y * rchunk, r1 = min(R, r0 + rchunk);
  double s[V];
#pragma unroll
  for (int q = 0; q < V; q++) s[q] = 0;
  if (c0 < C) {
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += CP_Y) add_cols(x + r * C + c0, s);
  }
#pragma unroll
  for (int q = 0; q < V; q++) sh[ty][tx * V + q] = s[q];
  __syncthreads();
  int t = ty * 32 + tx; /* 256 threads, at most 128 columns: one each */
  int64_t c = cb + t;
  if (t >= 32 * V || c >= C) return;
  double sum = 0;
#pragma unroll
  for (int j = 0; j < CP_Y; j++) sum += sh[j][t];
  seg_out(part, blockIdx.y, C, c, sum, div, out, acc);
}

/* Column c of part [nchunk][ncol]: thread ty adds chunks ty, ty + CF_Y, ..., then the
   block adds the CF_Y sums in order. Columns [C, 2C) (a part holding two results side by
   side) go to out2 (added with acc2); a NULL output's columns are not written. */
__global__ void col_final_k(const double *__restrict__ part, int64_t nchunk, int64_t ncol,
                            int64_t C, double div, float *__restrict__ out,
                            float *__restrict__ out2, const rg_cuda_err *acc,
                            const rg_cuda_err *acc2) {
  __shared__ double sh[CF_Y][33];
  int tx = threadIdx.x, ty = threadIdx.y;
  int64_t c = (int64_t)blockIdx.x * 32 + tx;
  double s = 0;
  if (c < ncol)
    for (int64_t g = ty; g < nchunk; g += CF_Y) s += part[g * ncol + c];
  sh[ty][tx] = s;
  __syncthreads();
  if (ty != 0 || c >= ncol) return;
  double sum = 0;
#pragma unroll
  for (int j = 0; j < CF_Y; j++) sum += sh[j][tx];
  if (c < C && out)
    rg_cuda_put(out, c, sum, div, acc);
  else if (c >= C && out2)
    rg_cuda_put(out2, c - C, sum, div, acc2);
}

template <class TX>
rg_status col_sum(rg_kargs *k, const TX *x, int64_t R, int64_t C, double div, float *out,
                  const rg_cuda_err *acc) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  bool v4 = C % 4 == 0 && ((uintptr_t)x & 15) == 0;
  int64_t gx = cdiv(C, v4 ? 128 : 32);
  int64_t nchunk = R <= CP_ONE_ROWS ? 1
                                    : min64(max64(1, CP_BLOCKS / gx), max64(1, R / CP_MIN_ROWS));
  nchunk = min64(min64(nchunk, 65535), (int64_t)(L->scratch_bytes / sizeof(double)) / C);
  int64_t rchunk = max64(1, cdiv(R, max64(1, nchunk)));
  nchunk = max64(1, cdiv(R, rchunk)); /* no empty trailing chunk */
  if (gx > 0x7fffffff) {
    snprintf(k->msg, k->msgcap, "%lld columns is more than one launch covers", (long long)C);
    return RG_ERR_UNSUPPORTED;
  }
  double *part = nchunk > 1 ? (double *)L->scratch : NULL;
  dim3 grid((unsigned)gx, (unsigned)nchunk), block(32, CP_Y);
  if (v4)
    col_part_k<4><<<grid, block, 0, L->stream>>>(x, R, C, rchunk, part, div, out, acc);
  else
    col_part_k<1><<<grid, block, 0, L->stream>>>(x, R, C, rchunk, part, div, out, acc);
  if (part) rg_cuda_col_final(L, part, nchunk, C, C, div, out, NULL, acc, NULL);
  return RG_OK;
}

/* Enqueues the sum described by p: out[e] = (sum of its reduced positions) / div, or with
   acc (the error word: sum_to_acc) out[e] += that sum (div 1) unless a fault came first. */
template <class TX>
rg_status run_sum(rg_kargs *k, const TX *x, const sum_plan &p, double div, float *out,
                  const rg_cuda_err *acc) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  if (p.nout == 0) return RG_OK;
  double *part = (double *)L->scratch;
  int64_t cap = (int64_t)(L->scratch_bytes / sizeof(double));
  if (p.kept.n == 1 && p.kept.stride[0] == 1 && p.red.n == 1 && p.red.stride[0] == p.nout)
    return col_sum(k, x, p.rcount, p.nout, div, out, acc); /* x as [R, C], summed over R */
  bool contiguous = p.red.n == 0 || (p.red.n == 1 && p.red.stride[0] == 1);
  if (p.kept.n == 0 && contiguous) { /* one output over a contiguous run: two passes */
    if (cap < 1) {
      snprintf(k->msg, k->msgcap, "needs %zu bytes of CUDA scratch, the backend has %zu",
               sizeof(double), L->scratch_bytes);
      return RG_ERR_UNSUPPORTED;
    }
    int64_t n = p.rcount;
    int64_t nb = min64(min64(FLAT_BLOCKS, max64(1, cdiv(n, FLAT_CHUNK))), cap);
    int64_t cs = cdiv(n, nb);
    flat_part_k<<<(unsigned)nb, THREADS, 0, L->stream>>>(x, n, cs, part);
    flat_final_k<<<1, THREADS, 0, L->stream>>>(part, (int)nb, div, out, acc);
    return RG_OK;
  }
  bool cols = p.kept.n > 0 && p.kept.stride[p.kept.n - 1] == 1;
  int64_t per_out = cols ? COL_Y : 32, gx = cdiv(p.nout, cols ? 32 : ROW_WARPS);
  /* Segments: enough that each thread has ~PER_THREAD positions, no more than needed to
     fill the GPU, within the scratch. The count depends only on the shapes. */
  int64_t nseg = cdiv(p.rcount, per_out * PER_THREAD);
  nseg = min64(nseg, max64(1, TARGET_BLOCKS / gx));
  nseg = min64(nseg, 65535);
  nseg = min64(nseg, cap / p.nout);
  if (nseg < 1) nseg = 1;
  int64_t rseg = nseg > 1 ? cdiv(p.rcount, nseg) : p.rcount;
  if (nseg > 1) nseg = cdiv(p.rcount, rseg); /* no empty trailing segment */
  double *pp = nseg > 1 ? part : NULL;
  if (gx > 0x7fffffff) {
    snprintf(k->msg, k->msgcap, "%lld outputs is more than one launch covers",
             (long long)p.nout);
    return RG_ERR_UNSUPPORTED;
  }
  dim3 grid((unsigned)gx, (unsigned)nseg);
  if (cols)
    cols_k<<<grid, dim3(32, COL_Y), 0, L->stream>>>(x, p.kept, p.red, p.nout, p.rcount, rseg,
                                                     div, out, pp, acc);
  else
    rows_k<<<grid, 32 * ROW_WARPS, 0, L->stream>>>(x, p.kept, p.red, p.nout, p.rcount, rseg,
                                                    div, out, pp, acc);
  if (pp)
    seg_final_k<<<rg_cuda_blocks(p.nout, THREADS), THREADS, 0, L->stream>>>(pp, nseg, p.nout,
                                                                            div, out, acc);
  return RG_OK;
}

/* run_sum for x of either type. */
rg_status run_sum_of(rg_kargs *k, const rg_tv *x, const sum_plan &p, double div, float *out,
                     const rg_cuda_err *acc) {
  rg_status st = RG_OK;
  rg_cuda_typed(x->dtype, [&](auto tx) { st = run_sum(k, rg_cuda_ptr(x, tx), p, div, out, acc); });
  return st;
}

/* ---- max, argmax and max's backward ---------------------------------------------------- */

enum { M_MAX, M_ARGMAX, M_BWD };

__device__ __forceinline__ bool beats(float v, float best) {
  return v > best || (v != v && best == best);
}

/* (v, i) is preferred over (bv, bi): it beats, or neither beats and it comes first. The
   rule is order-free, so any combine tree finds the CPU's first maximum. */
__device__ __forceinline__ bool better(float v, int64_t i, float bv, int64_t bi) {
  if (beats(v, bv)) return true;
  if (beats(bv, v)) return false;
  return i < bi;
}

/* A candidate that every real element is preferred over. */
#define NO_INDEX INT64_MAX

/* Writes the result of output oi for MAX (the value) or ARGMAX (the index). */
__device__ __forceinline__ void max_write(int mode, int64_t oi, float bv, int64_t bi,
                                          void *out) {
  if (mode == M_MAX)
    ((float *)out)[oi] = bv;
  else if (mode == M_ARGMAX)
    ((int32_t *)out)[oi] = (int32_t)bi;
}

/* Innermost (inner == 1) rows: a group of G threads per row of len; G = 32 (one warp, 8
   rows per block) or the whole block (one row per block). For M_BWD the group rewrites
   the row of dx: g at the maximum, 0 elsewhere. */
template <bool WARP>
__global__ void max_rows_k(const float *__restrict__ x, int64_t outer, int64_t len, int mode,
                           const float *__restrict__ g, void *__restrict__ out) {
  __shared__ float shv[32];
  __shared__ int64_t shi[32];
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  int G = WARP ? 32 : blockDim.x, t = WARP ? lane : threadIdx.x;
  int64_t rows_per = WARP ? blockDim.x >> 5 : 1;
  for (int64_t base = (int64_t)blockIdx.x * rows_per; base < outer;
       base += (int64_t)gridDim.x * rows_per) {
    int64_t o = base + (WARP ? wid : 0);
    bool live = o < outer;
    const float *row = x + (live ? o : 0) * len;
    float bv = -INFINITY;
    int64_t bi = NO_INDEX;
    if (live)
      for (int64_t l = t; l < len; l += G) {
        float v = row[l];
        if (better(v, l, bv, bi)) bv = v, bi = l;
      }
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
      float ov = __shfl_xor_sync(FULL, bv, s);
      int64_t oi = __shfl_xor_sync(FULL, bi, s);
      if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    if (!WARP) {
      __syncthreads();
      if (lane == 0) shv[wid] = bv, shi[wid] = bi;
      __syncthreads();
      int nw = blockDim.x >> 5;
      bv = lane < nw ? shv[lane] : -INFINITY;
      bi = lane < nw ? shi[lane] : NO_INDEX;
#pragma unroll
      for (int s = 16; s > 0; s >>= 1) {
        float ov = __shfl_xor_sync(FULL, bv, s);
        int64_t oi = __shfl_xor_sync(FULL, bi, s);
        if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
      }
    }
    if (!live) continue;
    if (mode == M_BWD) {
      float gv = g[o];
      float *d = (float *)out + o * len;
      for (int64_t l = t; l < len; l += G) d[l] = l == bi ? gv : 0.f;
    } else if (t == 0) {
      max_write(mode, o, bv, bi, out);
    }
  }
}

/* inner > 1: threadIdx.x walks 32 consecutive columns i, threadIdx.y splits len, y-grid
   strides over outer. */
__global__ void max_cols_k(const float *__restrict__ x, span3 s, int mode,
                           const float *__restrict__ g, void *__restrict__ out) {
  __shared__ float shv[COL_Y][32];
  __shared__ int64_t shi[COL_Y][32];
  int tx = threadIdx.x, ty = threadIdx.y;
  int64_t i = (int64_t)blockIdx.x * 32 + tx;
  bool live = i < s.inner;
  for (int64_t o = blockIdx.y; o < s.outer; o += gridDim.y) {
    const float *col = x + o * s.len * s.inner + i;
    float bv = -INFINITY;
    int64_t bi = NO_INDEX;
    if (live)
      for (int64_t l = ty; l < s.len; l += COL_Y) {
        float v = col[l * s.inner];
        if (better(v, l, bv, bi)) bv = v, bi = l;
      }
    shv[ty][tx] = bv;
    shi[ty][tx] = bi;
    __syncthreads();
    if (ty == 0) {
      for (int j = 1; j < COL_Y; j++)
        if (better(shv[j][tx], shi[j][tx], bv, bi)) bv = shv[j][tx], bi = shi[j][tx];
      shi[0][tx] = bi;
      if (live && mode != M_BWD) max_write(mode, o * s.inner + i, bv, bi, out);
    }
    __syncthreads();
    if (live && mode == M_BWD) {
      bi = shi[0][tx];
      float gv = g[o * s.inner + i];
      float *d = (float *)out + o * s.len * s.inner + i;
      for (int64_t l = ty; l < s.len; l += COL_Y) d[l * s.inner] = l == bi ? gv : 0.f;
    }
    __syncthreads(); /* shv/shi are reused by the next o */
  }
}

rg_status max_common(rg_kargs *k, int mode, const char *what) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *x = &k->in[0];
  span3 s = split_axis(x, k->node->i[0]);
  const float *g = mode == M_BWD ? (const float *)k->in[1].p : NULL;
  if (s.outer * s.inner == 0) return RG_OK; /* nothing to write */
  if (s.len == 0) { /* as the CPU (record time already refuses an empty max) */
    snprintf(k->msg, k->msgcap,
             "the maximum over an empty axis is undefined: reduce over an axis of size > 0");
    return RG_ERR_MISUSE;
  }
  if (s.inner == 1) {
    if (s.len >= 8192 && s.outer < 1024) /* few long rows: a block each */
      max_rows_k<false><<<(unsigned)min64(s.outer, 65535), 1024, 0, L->stream>>>(
          (const float *)x->p, s.outer, s.len, mode, g, k->out[0].p);
    else
      max_rows_k<true><<<(unsigned)min64(cdiv(s.outer, 8), 1 << 20), 256, 0, L->stream>>>(
          (const float *)x->p, s.outer, s.len, mode, g, k->out[0].p);
  } else {
    int64_t gx = cdiv(s.inner, 32);
    if (gx > 0x7fffffff) {
      snprintf(k->msg, k->msgcap, "an inner extent of %lld is more than one launch covers",
               (long long)s.inner);
      return RG_ERR_UNSUPPORTED;
    }
    dim3 grid((unsigned)gx, (unsigned)min64(s.outer, 65535));
    max_cols_k<<<grid, dim3(32, COL_Y), 0, L->stream>>>((const float *)x->p, s, mode, g,
                                                        k->out[0].p);
  }
  return rg_cuda_check_launch(k, what);
}

/* ---- expand -------------------------------------------------------------------------------- */

/* out element e reads x at sum_j idx_j * st[j] (st[j] = 0 on broadcast axes). */
typedef struct bcast_map {
  int nd;
  int64_t dims[RG_MAX_DIMS], st[RG_MAX_DIMS];
} bcast_map;

template <typename I>
__global__ void expand_k(const float *__restrict__ x, float *__restrict__ o, int64_t n,
                         bcast_map m) {
  I dims[RG_MAX_DIMS], st[RG_MAX_DIMS];
#pragma unroll
  for (int j = 0; j < RG_MAX_DIMS; j++) dims[j] = (I)m.dims[j], st[j] = (I)m.st[j];
  for (uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; e < (uint64_t)n;
       e += (uint64_t)gridDim.x * blockDim.x) {
    I r = (I)e, off = 0;
#pragma unroll
    for (int j = RG_MAX_DIMS - 1; j >= 1; j--) {
      if (j < m.nd) {
        off += (r % dims[j]) * st[j];
        r /= dims[j];
      }
    }
    o[e] = x[off + r * st[0]];
  }
}

} /* namespace */

void rg_cuda_col_final(rg_cuda_launch *L, const double *part, int64_t nchunk, int64_t ncol,
                       int64_t C, double div, float *out, float *out2, const rg_cuda_err *acc,
                       const rg_cuda_err *acc2) {
  col_final_k<<<(unsigned)cdiv(ncol, 32), dim3(32, CF_Y), 0, L->stream>>>(
      part, nchunk, ncol, C, div, out, out2, acc, acc2);
}

/* ---- launchers ----------------------------------------------------------------------- */

static rg_status sum_mean(rg_kargs *k, bool mean, const char *what) {
  const rg_tv *x = &k->in[0];
  int64_t axis = k->node->i[0];
  bool keep[RG_MAX_DIMS];
  for (int a = 0; a < RG_MAX_DIMS; a++) keep[a] = axis >= 0 && a != axis;
  sum_plan p = plan_sum(x, keep);
  span3 s = split_axis(x, axis);
  double div = mean ? (double)s.len : 1.0; /* the CPU's divisor, 0/0 = NaN included */
  rg_status st = run_sum_of(k, x, p, div, (float *)k->out[0].p, NULL);
  if (st != RG_OK) return st;
  return rg_cuda_check_launch(k, what);
}

rg_status rg_cuda_sum(rg_kargs *k) { return sum_mean(k, false, "sum"); }
rg_status rg_cuda_mean(rg_kargs *k) { return sum_mean(k, true, "mean"); }

rg_status rg_cuda_max(rg_kargs *k) { return max_common(k, M_MAX, "max"); }
rg_status rg_cuda_argmax(rg_kargs *k) { return max_common(k, M_ARGMAX, "argmax"); }
rg_status rg_cuda_max_bwd(rg_kargs *k) { return max_common(k, M_BWD, "max_bwd"); }

/* Kept axes are the x axes that out has at the same (right-aligned) position with the
   same size, as in the CPU's split_kept; size-1 axes are dropped by plan_sum. sum_to_acc
   adds into out instead (acc = the error word). */
static rg_status sum_to(rg_kargs *k, const rg_tv *x, const rg_tv *out, const rg_cuda_err *acc,
                        const char *what) {
  int lead = x->ndim - out->ndim;
  bool keep[RG_MAX_DIMS] = {false, false, false, false};
  for (int a = 0; a < x->ndim; a++)
    keep[a] = a - lead >= 0 && out->dims[a - lead] == x->dims[a];
  sum_plan p = plan_sum(x, keep);
  rg_status st = run_sum_of(k, x, p, 1.0, (float *)out->p, acc);
  if (st != RG_OK) return st;
  return rg_cuda_check_launch(k, what);
}

rg_status rg_cuda_sum_to(rg_kargs *k) { return sum_to(k, &k->in[0], &k->out[0], NULL, "sum_to"); }
rg_status rg_cuda_sum_to_acc(rg_kargs *k) {
  return sum_to(k, &k->in[1], &k->in[0], rg_cuda_ctx(k)->err, "sum_to_acc");
}

rg_status rg_cuda_expand(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *x = &k->in[0], *o = &k->out[0];
  if (o->n == 0) return RG_OK;
  if (o->ndim == 0 || x->n == o->n) {
    cudaMemcpyAsync(o->p, x->p, (size_t)o->n * sizeof(float), cudaMemcpyDeviceToDevice,
                    L->stream);
    return rg_cuda_check_launch(k, "expand");
  }
  rg_cuda_shape bs = rg_cuda_broadcast(x, o); /* strides indexed by out's axes */
  bcast_map m;
  m.nd = o->ndim;
  for (int j = 0; j < RG_MAX_DIMS; j++) {
    m.dims[j] = j < o->ndim ? o->dims[j] : 1;
    m.st[j] = j < o->ndim ? bs.strides[j] : 0;
  }
  unsigned grid = rg_cuda_blocks(o->n, THREADS);
  if (o->n < ((int64_t)1 << 32) - THREADS)
    expand_k<uint32_t><<<grid, THREADS, 0, L->stream>>>((const float *)x->p, (float *)o->p,
                                                         o->n, m);
  else
    expand_k<uint64_t><<<grid, THREADS, 0, L->stream>>>((const float *)x->p, (float *)o->p,
                                                         o->n, m);
  return rg_cuda_check_launch(k, "expand");
}
