/*
 * decode.cu - CUDA kernels of autoregressive decoding (ops.h: KV_WRITE,
 * ATTENTION_CACHED, SAMPLE). Mirrors src/cpu/decode.c.
 *
 * Invariants:
 *  - Positions are checked by one block that raises the lowest bad batch row (the one
 *    the CPU names) before the kernels that use them; the write of the cache skips its
 *    work once the error word is set, and the attention reads nothing outside the cache
 *    (a bad row's output is zeros), so a failed step changes no cache row.
 *  - Positions, counters and the cache are read on the device when the node runs: a
 *    replayed graph works at the positions of that step.
 *  - ATTENTION_CACHED: one block per (batch row, query row, head); its scores sit in
 *    shared memory, so S is bounded by what a block may hold (checked at launch).
 *  - SAMPLE: one block per row, the thresholds found bit by bit as the CPU finds them
 *    (counts exact, masses in double, added in an order fixed by the block size).
 */
#include "rows.h"
#include "../core/sample.h"

#include <stdio.h>

namespace { /* file-private: kernels (the launchers follow) */

#define ATT_THREADS 512
#define SAMPLE_THREADS 1024
#define ATT_MAX_SMEM (48 * 1024)

__device__ __forceinline__ bool faulted(const rg_cuda_err *err) {
  return *(const volatile int *)&err->code != 0;
}

__device__ __forceinline__ bool pos_ok(int32_t p, int64_t S, int64_t T) {
  return p >= 0 && p <= S - T;
}

/* One block: the lowest batch row whose position is outside [0, S - T], raised. */
__global__ void pos_check_k(const int32_t *__restrict__ pos, int64_t B, int64_t S, int64_t T,
                            rg_cuda_err *err, int node) {
  __shared__ unsigned long long bad;
  if (threadIdx.x == 0) bad = NO_BAD;
  __syncthreads();
  for (int64_t b = threadIdx.x; b < B; b += blockDim.x)
    if (!pos_ok(pos[b], S, T)) atomicMin(&bad, (unsigned long long)b);
  __syncthreads();
  if (threadIdx.x == 0 && bad != NO_BAD)
    rg_cuda_raise(err, RG_CUDA_E_POS, node, pos[bad], (long long)bad, S - T);
}

/* Element e of [B, T, 2, H, D]: the k (0) or v (1) of one head of one row. */
__global__ void kv_write_k(float *__restrict__ kc, float *__restrict__ vc,
                           const float *__restrict__ qkv, const int32_t *__restrict__ pos,
                           int64_t B, int64_t T, int64_t H, int64_t S, int64_t D,
                           const rg_cuda_err *err) {
  if (faulted(err)) return;
  int64_t C = H * D, n = B * T * 2 * C;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = e % (2 * C), bt = e / (2 * C), b = bt / T, t = bt % T;
    int64_t which = c / C, h = c % C / D, j = c % D;
    float *dst = which ? vc : kc;
    dst[((b * H + h) * S + pos[b] + t) * D + j] = qkv[bt * 3 * C + C + c];
  }
}

/* Block r = (b T + t) H + h. Scores in sh[0, n), then the output's partial sums of G
   groups of D threads in sh[S, S + G D). */
__global__ void attention_cached_k(const float *__restrict__ qkv, const float *__restrict__ kc,
                                   const float *__restrict__ vc,
                                   const int32_t *__restrict__ pos, float *__restrict__ o,
                                   int64_t T, int64_t H, int64_t S, int64_t D, float scale) {
  extern __shared__ float sh[];
  __shared__ double red[32];
  int64_t r = blockIdx.x, h = r % H, bt = r / H, b = bt / T, t = bt % T, C = H * D;
  float *out = o + bt * C + h * D;
  int32_t p = pos[b];
  if (!pos_ok(p, S, T)) { /* raised by pos_check_k: zeros, nothing read */
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) out[j] = 0;
    return;
  }
  int64_t n = p + t + 1;
  const float *q = qkv + bt * 3 * C + h * D;
  const float *kb = kc + (b * H + h) * S * D, *vb = vc + (b * H + h) * S * D;
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int64_t s = warp; s < n; s += nw) { /* a warp per key: coalesced rows */
    float d = 0;
    for (int64_t j = lane; j < D; j += 32) d += q[j] * kb[s * D + j];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) d += __shfl_xor_sync(FULL, d, off);
    if (lane == 0) sh[s] = d * scale;
  }
  __syncthreads();
  float m = -INFINITY;
  for (int64_t s = threadIdx.x; s < n; s += blockDim.x) m = fmaxf(m, sh[s]);
  m = warp_max(m);
  __shared__ float mw[32];
  if (lane == 0) mw[warp] = m;
  __syncthreads();
  m = warp_max(lane < nw ? mw[lane] : -INFINITY);
  double l = 0;
  for (int64_t s = threadIdx.x; s < n; s += blockDim.x) {
    float e = __expf(sh[s] - m);
    sh[s] = e;
    l += e;
  }
  l = block_sum(l, red); /* its barriers also order the writes of sh above */
  int64_t G = blockDim.x / D, g = threadIdx.x / D, j = threadIdx.x % D;
  float *part = sh + S;
  if (g < G) {
    float acc = 0;
    for (int64_t s = g; s < n; s += G) acc += sh[s] * vb[s * D + j];
    part[g * D + j] = acc;
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = 0;
    for (int64_t k = 0; k < G; k++) acc += part[k * D + c];
    out[c] = (float)(acc / l);
  }
}

/* The block's largest v, ties to the lowest i; every thread gets (v, i). */
__device__ void block_argmax(float &v, int64_t &i) {
  __shared__ float sv[32];
  __shared__ long long si[32];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    float ov = __shfl_xor_sync(FULL, v, off);
    long long oi = __shfl_xor_sync(FULL, (long long)i, off);
    if (ov > v || (ov == v && oi < i) || (i < 0 && oi >= 0)) v = ov, i = oi;
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  v = lane < nw ? sv[lane] : -INFINITY;
  i = lane < nw ? si[lane] : -1;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    float ov = __shfl_xor_sync(FULL, v, off);
    long long oi = __shfl_xor_sync(FULL, (long long)i, off);
    if (ov > v || (ov == v && oi < i && oi >= 0) || (i < 0 && oi >= 0)) v = ov, i = oi;
  }
}

/* As the CPU's threshold(): the largest key c (bit by bit) whose elements with key >=
   max(c, lo) count (weights == false) or weigh, w = exp((x - m)/t), at least need. */
__device__ uint32_t threshold_dev(const float *x, int64_t V, uint32_t lo, double need,
                                  bool weights, float m, float t, double *red) {
  uint32_t c = 0;
  for (int bit = 31; bit >= 0; bit--) {
    uint32_t cand = c | 1u << bit, at = cand > lo ? cand : lo;
    double got = 0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      if (rg_sample_key(x[i]) >= at) got += weights ? (double)expf((x[i] - m) / t) : 1.0;
    got = block_sum(got, red);
    if (got >= need) c = cand;
  }
  return c > lo ? c : lo;
}

__global__ void sample_k(const float *__restrict__ logits, const int32_t *__restrict__ ctr,
                         int32_t *__restrict__ out, int64_t V, float t, float top_p,
                         int64_t top_k, uint64_t seed) {
  __shared__ double red[32];
  int64_t r = blockIdx.x;
  const float *x = logits + r * V;
  float best = -INFINITY;
  int64_t arg = -1;
  if (t == 0) { /* greedy: the first maximum */
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      if (arg < 0 || x[i] > best) best = x[i], arg = i;
    block_argmax(best, arg);
    if (threadIdx.x == 0) out[r] = (int32_t)(arg < 0 ? 0 : arg);
    return;
  }
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, x[i]);
  {
    int64_t dummy = 0;
    block_argmax(m, dummy);
  }
  uint32_t lo = 0;
  if (top_k > 0 && top_k < V) lo = threshold_dev(x, V, 0, (double)top_k, false, m, t, red);
  if (top_p < 1) {
    double z = 0;
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
      if (rg_sample_key(x[i]) >= lo) z += (double)expf((x[i] - m) / t);
    z = block_sum(z, red);
    lo = threshold_dev(x, V, lo, (double)top_p * z, true, m, t, red);
  }
  uint32_t counter = ctr ? (uint32_t)ctr[r] : 0u;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    if (rg_sample_key(x[i]) < lo) continue;
    float s = x[i] / t + rg_sample_gumbel(seed, counter, (uint64_t)r, (uint64_t)i);
    if (arg < 0 || s > best) best = s, arg = i;
  }
  block_argmax(best, arg);
  if (threadIdx.x == 0) out[r] = (int32_t)(arg < 0 ? 0 : arg);
}

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

rg_status rg_cuda_kv_write(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *K = &k->in[0], *qkv = &k->in[2];
  int64_t B = K->dims[0], H = K->dims[1], S = K->dims[2], D = K->dims[3], T = qkv->dims[1];
  const int32_t *pos = (const int32_t *)k->in[3].p;
  pos_check_k<<<1, 256, 0, L->stream>>>(pos, B, S, T, L->err, L->node);
  int64_t n = B * T * 2 * H * D;
  if (n > 0)
    kv_write_k<<<rg_cuda_blocks(n, 256), 256, 0, L->stream>>>(
        (float *)K->p, (float *)k->in[1].p, (const float *)qkv->p, pos, B, T, H, S, D,
        L->err);
  return rg_cuda_check_launch(k, "kv_write");
}

rg_status rg_cuda_attention_cached(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *qkv = &k->in[0], *K = &k->in[1];
  int64_t B = K->dims[0], H = K->dims[1], S = K->dims[2], D = K->dims[3], T = qkv->dims[1];
  int threads = D > ATT_THREADS ? 1024 : ATT_THREADS;
  size_t smem = sizeof(float) * (size_t)(S + threads);
  if (D > 1024 || smem > ATT_MAX_SMEM) {
    snprintf(k->msg, k->msgcap, "the cache [%lld, %lld, %lld, %lld] has more than %d "
             "positions or a head size over 1024, which this kernel does not do yet: make "
             "it shorter", (long long)B, (long long)H, (long long)S, (long long)D,
             (int)(ATT_MAX_SMEM / sizeof(float)) - threads);
    return RG_ERR_UNSUPPORTED;
  }
  const int32_t *pos = (const int32_t *)k->in[3].p;
  pos_check_k<<<1, 256, 0, L->stream>>>(pos, B, S, T, L->err, L->node);
  int64_t rows = B * T * H;
  if (rows > 0 && D > 0)
    attention_cached_k<<<(unsigned)rows, threads, smem, L->stream>>>(
        (const float *)qkv->p, (const float *)K->p, (const float *)k->in[2].p, pos,
        (float *)k->out[0].p, T, H, S, D, 1.0f / sqrtf((float)D));
  return rg_cuda_check_launch(k, "attention_cached");
}

rg_status rg_cuda_sample(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *x = &k->in[0];
  int64_t R = k->out[0].n, V = last_dim(x);
  if (R > 2147483647) {
    snprintf(k->msg, k->msgcap, "%lld rows are more than one launch takes", (long long)R);
    return RG_ERR_UNSUPPORTED;
  }
  if (R > 0)
    sample_k<<<(unsigned)R, SAMPLE_THREADS, 0, L->stream>>>(
        (const float *)x->p, (const int32_t *)k->in[1].p, (int32_t *)k->out[0].p, V,
        k->node->f[0], k->node->f[1], k->node->i[0], (uint64_t)k->node->i[1]);
  return rg_cuda_check_launch(k, "sample");
}
