/*
 * ring.cu - CUDA kernels of the ring buffers (ops.h: RING_PUSH, RING_GATHER,
 * RING_SAMPLE). Mirrors src/cpu/ring.c.
 *
 * Invariants:
 *  - The state (head, count, draws) is read on the device when the node runs, so a
 *    replayed graph pushes to and samples from the ring as it is then.
 *  - A push or a sample advances the state in a one-thread kernel after the kernel that
 *    read it, and only while the error word is clear; a push copies nothing then either.
 *    So a failed step leaves the ring and its state as the CPU's drain, which stops at the
 *    fault, leaves them.
 *  - A gather's indices are checked by one block that keeps the lowest bad position (the
 *    one the CPU names) before the copy, which writes zeros for bad indices: nothing is
 *    read out of bounds.
 *  - Entries are moved as stored: 2-byte elements for BF16, 4-byte ones otherwise.
 */
#include "rows.h"

namespace { /* file-private: kernels (the launchers follow) */

#define THREADS 256

__device__ __forceinline__ bool faulted(const rg_cuda_err *err) {
  return *(const volatile int *)&err->code != 0;
}

template <class T>
__global__ void push_k(T *__restrict__ ring, const int32_t *__restrict__ s,
                       const T *__restrict__ e, int64_t n, int64_t rows, int64_t cap,
                       const rg_cuda_err *err) {
  if (faulted(err)) return;
  int64_t head = s[RG_RING_HEAD];
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t j = i / rows;
    ring[(head + j) % cap * rows + (i - j * rows)] = e[i];
  }
}

__global__ void push_state_k(int32_t *s, int64_t k, int64_t cap, const rg_cuda_err *err) {
  if (faulted(err)) return;
  s[RG_RING_HEAD] = (int32_t)((s[RG_RING_HEAD] + k) % cap);
  s[RG_RING_COUNT] = (int32_t)min64(s[RG_RING_COUNT] + k, cap);
}

/* One block: the lowest position whose index is outside [0, count), raised. */
__global__ void gather_check_k(const int32_t *__restrict__ idx, int64_t n,
                               const int32_t *__restrict__ s, rg_cuda_err *err, int node) {
  __shared__ unsigned long long bad;
  if (threadIdx.x == 0) bad = NO_BAD;
  __syncthreads();
  int64_t count = s[RG_RING_COUNT];
  for (int64_t p = threadIdx.x; p < n; p += blockDim.x)
    if (idx[p] < 0 || idx[p] >= count) atomicMin(&bad, (unsigned long long)p);
  __syncthreads();
  if (threadIdx.x == 0 && bad != NO_BAD)
    rg_cuda_raise(err, RG_CUDA_E_RING, node, idx[bad], (long long)bad, count);
}

template <class T>
__global__ void gather_k(const T *__restrict__ ring, const int32_t *__restrict__ s,
                         const int32_t *__restrict__ idx, T *__restrict__ out, int64_t n,
                         int64_t rows, int64_t cap) {
  int64_t count = s[RG_RING_COUNT], first = s[RG_RING_HEAD] - count + cap;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t p = i / rows;
    int32_t v = idx[p];
    out[i] = v >= 0 && v < count ? ring[(first + v) % cap * rows + (i - p * rows)] : T(0);
  }
}

__global__ void sample_k(const int32_t *__restrict__ s, int32_t *__restrict__ out, int64_t n,
                         uint64_t key) {
  int64_t count = s[RG_RING_COUNT];
  uint64_t draws = (uint32_t)s[RG_RING_DRAWS_LO] | (uint64_t)(uint32_t)s[RG_RING_DRAWS_HI] << 32;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    out[e] = count > 0 ? (int32_t)rg_philox_below(key, draws, (uint64_t)e, (uint64_t)count) : 0;
}

/* After sample_k: an empty ring raises; else the draw count advances. */
__global__ void sample_state_k(int32_t *s, rg_cuda_err *err, int node) {
  if (s[RG_RING_COUNT] <= 0) {
    rg_cuda_raise(err, RG_CUDA_E_EMPTY, node, 0, 0, 0);
    return;
  }
  if (faulted(err)) return;
  uint64_t draws = (uint32_t)s[RG_RING_DRAWS_LO] | (uint64_t)(uint32_t)s[RG_RING_DRAWS_HI] << 32;
  draws++;
  s[RG_RING_DRAWS_LO] = (int32_t)(uint32_t)draws;
  s[RG_RING_DRAWS_HI] = (int32_t)(uint32_t)(draws >> 32);
}

template <class T> void push_as(rg_cuda_launch *L, rg_kargs *k) {
  const rg_tv *r = &k->in[0], *e = &k->in[2];
  push_k<T><<<rg_cuda_blocks(e->n, THREADS), THREADS, 0, L->stream>>>(
      (T *)r->p, (const int32_t *)k->in[1].p, (const T *)e->p, e->n, r->dims[1], r->dims[0],
      L->err);
}

template <class T> void gather_as(rg_cuda_launch *L, rg_kargs *k) {
  const rg_tv *r = &k->in[0], *o = &k->out[0];
  gather_k<T><<<rg_cuda_blocks(o->n, THREADS), THREADS, 0, L->stream>>>(
      (const T *)r->p, (const int32_t *)k->in[1].p, (const int32_t *)k->in[2].p, (T *)o->p,
      o->n, r->dims[1], r->dims[0]);
}

} /* namespace */

/* ---- launchers ----------------------------------------------------------------------- */

rg_status rg_cuda_ring_push(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  if (k->in[0].dtype == RG_BF16) push_as<uint16_t>(L, k);
  else push_as<uint32_t>(L, k);
  push_state_k<<<1, 1, 0, L->stream>>>((int32_t *)k->in[1].p, k->in[2].n / k->in[0].dims[1],
                                       k->in[0].dims[0], L->err);
  return rg_cuda_check_launch(k, "ring_push");
}

rg_status rg_cuda_ring_gather(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int64_t n = k->in[2].n;
  if (n == 0) return RG_OK;
  gather_check_k<<<1, THREADS, 0, L->stream>>>((const int32_t *)k->in[2].p, n,
                                               (const int32_t *)k->in[1].p, L->err, L->node);
  if (k->in[0].dtype == RG_BF16) gather_as<uint16_t>(L, k);
  else gather_as<uint32_t>(L, k);
  return rg_cuda_check_launch(k, "ring_gather");
}

rg_status rg_cuda_ring_sample(rg_kargs *k) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  int32_t *s = (int32_t *)k->in[0].p;
  int64_t n = k->out[0].n;
  sample_k<<<rg_cuda_blocks(n, THREADS), THREADS, 0, L->stream>>>(
      s, (int32_t *)k->out[0].p, n, (uint64_t)k->node->i[0]);
  sample_state_k<<<1, 1, 0, L->stream>>>(s, L->err, L->node);
  return rg_cuda_check_launch(k, "ring_sample");
}
