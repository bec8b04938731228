/*
 * cuda.h - what the CUDA backend's files share. Included only by the .cu files of src/cuda.
 *
 * Every op has a launcher rg_cuda_<name>(k) (one per row of ops.h, so a missing one fails
 * the link). A launcher enqueues its kernels on k's stream and returns RG_OK, or a status
 * with the reason in k->msg when it cannot launch (RG_ERR_UNSUPPORTED for an op or dtype
 * this backend does not do yet: never a silent fallback). Launchers never synchronise and
 * never allocate device memory: scratch comes from rg_cuda_scratch.
 *
 * Run-time faults a caller can cause (an index out of range) are reported by the kernel
 * through the error word: the first kernel to fail writes its code, node index and the
 * offending value with rg_cuda_raise; the backend reads the word after the drain's
 * synchronisation and fails the drain at that node. Kernels that modify persistent
 * tensors in place skip their work when the word is set, so a failed step changes no
 * weights.
 */
#ifndef RG_CUDA_H
#define RG_CUDA_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

extern "C" {
#include "../core/internal.h"
}

/* The error word, in device memory (kernels read it cheaply); the backend copies it to
   pinned host memory at the end of each drain. */
typedef struct rg_cuda_err {
  int code;       /* 0 = none; else a positive rg_cuda_errcode */
  int node;       /* index of the failing node within its drain */
  long long value, pos, limit;
  /* matmul_acc's alpha and beta, read by cuBLASLt from here: {1, 1}, and alpha 0 from the
     moment a fault is raised, so the gradient GEMMs after it add nothing (matmul.cu) */
  float ab[2];
  /* {0, 1}, never written: a tuning launch of matmul_acc (rg_options.gemm_tune) reads
     these, so it leaves the gradient as it was */
  float keep[2];
} rg_cuda_err;
/* The word with no fault: what every reset writes. */
static const rg_cuda_err rg_cuda_err_clean = {0, 0, 0, 0, 0, {1.f, 1.f}, {0.f, 1.f}};
/* RG_CUDA_E_PEER: another rank raised a fault in this step (value = its rank), seen by
   an all-reduce (nccl.cu), so every rank skips the step's in-place updates alike.
   RG_CUDA_E_ABORT: written by the host when it aborts a step's all-reduces (nccl.cu), so
   the updates queued after them skip; cleared again before the next drain.
   RG_CUDA_E_RING: a ring gather's index outside [0, count) (limit = count);
   RG_CUDA_E_EMPTY: a sample from an empty ring (ring.cu).
   RG_CUDA_E_POS: a KV cache position outside [0, S - T] (value = it, pos = the batch row,
   limit = S - T; decode.cu). */
enum { RG_CUDA_E_INDEX = 1, RG_CUDA_E_TARGET = 2, RG_CUDA_E_NONFINITE = 3, RG_CUDA_E_PEER = 4,
       RG_CUDA_E_ABORT = 5, RG_CUDA_E_RING = 6, RG_CUDA_E_EMPTY = 7, RG_CUDA_E_POS = 8 };

typedef struct rg_cuda_launch {
  cudaStream_t stream;
  rg_cuda_err *err;     /* device view of the error word */
  /* 16 bytes of all ones (device): the cross-entropy forward's check word (losses.cu),
     which its final kernel puts back, so it needs no kernel to set it before each use. */
  void *ce_check;
  int node;             /* index of the node being launched, within its drain */
  void *scratch;        /* RG_CUDA_SCRATCH bytes of device scratch, 256-aligned */
  size_t scratch_bytes;
  void *lt;             /* cublasLtHandle_t */
  void *lt_ws;          /* cuBLASLt workspace */
  size_t lt_ws_bytes;
  void *tune;           /* rg_options.gemm_tune: the algorithms chosen so far (matmul.cu) */
  /* cuDNN's fused attention (attention_dnn.cu, dnn_att.c): its handle and plans (an rg_dnn,
     opened at the first attention it may run; NULL before), and dnn_off: the context
     opted out (rg_options.no_cudnn) or cuDNN would not open, so resgrad's kernels run. */
  void *dnn;
  bool dnn_off;
  void *dnn_ws;         /* cuDNN's workspace (device), grown to the largest plan's */
  size_t dnn_ws_bytes;
  int sms;              /* multiprocessors, to size grids */
  int dev;              /* the context's GPU */
  /* Distributed training (nccl.cu): the NCCL communicator of rg_dist_init (NULL when
     there is none, or after a failure aborted it), this rank, the seconds a wait for
     the peers may last, a device int the all-reduces pass the fault flag through, and
     how many communicators this context has made (part of an ALLREDUCE's signature, so
     a graph that names an earlier one is never replayed). */
  void *comm;
  int rank;
  double timeout;
  int *flag;
  uint64_t comm_epoch;
  /* The all-reduces run on their own stream so that they overlap the rest of the
     backward pass: each waits for ready (recorded on stream when its bucket is
     complete) and records done; inflight says done has not been joined back into
     stream yet (rg_cuda_join), and the gradients concerned carry RG_T_COMM. */
  cudaStream_t comm_stream;
  cudaEvent_t ready, done;
  bool inflight;
} rg_cuda_launch;

/* Makes the context's stream wait for every all-reduce launched so far in the drain of
   nodes [first, upto) and clears their gradients' RG_T_COMM (backend.cu). Nothing to do
   when none is in flight. */
cudaError_t rg_cuda_join(rg_ctx *ctx, size_t first, size_t upto);

/* Frees the GEMM tuner's choices (matmul.cu); NULL-safe. */
void rg_cuda_tune_free(rg_cuda_launch *L);

/* The launch state of a CUDA context (backend.cu). */
rg_cuda_launch *rg_cuda_launch_of(rg_ctx *ctx);
/* Destroys every cached graph (backend.cu): before a communicator is closed, since NCCL
   keeps a communicator's resources while a graph that captured its calls exists. */
void rg_cuda_drop_graphs(rg_ctx *ctx);

/* NCCL (nccl.cu), the backend's dist_* members where the build has NCCL. */
rg_status rg_cuda_dist_id(rg_ctx *ctx, void *id, char *msg, size_t cap);
rg_status rg_cuda_dist_open(rg_ctx *ctx, int rank, int world, const void *id, double timeout,
                            char *msg, size_t cap);
rg_status rg_cuda_dist_close(rg_ctx *ctx, bool abort, char *msg, size_t cap);
/* Waits for the stream of a drain that holds all-reduces: at most the timeout, less when
   a peer's connection closes; on failure aborts the communicator, breaks the transport
   (rg__dist_fail) and writes why to msg. */
rg_status rg_cuda_dist_wait(rg_ctx *ctx, char *msg, size_t cap);
/* After a drain failed to launch node `failed` of [first, last): if an all-reduce at or
   after it was not issued, the peers would wait for it forever, so the communicator is
   aborted and the transport broken (they fail at once); msg gets a note saying so. */
void rg_cuda_dist_unissued(rg_ctx *ctx, size_t failed, size_t last, char *msg, size_t cap);

/* The launch context of the node being run (set by the backend before each launcher). */
static inline rg_cuda_launch *rg_cuda_ctx(rg_kargs *k) { return (rg_cuda_launch *)k->be; }

#define RG_CUDA_DECL(E, n, ...) rg_status rg_cuda_##n(rg_kargs *k);
RG_OPS(RG_CUDA_DECL)
#undef RG_CUDA_DECL

/* check_finite: raises RG_CUDA_E_NONFINITE when a float output of the node holds a NaN
   or an Inf (value = output index, pos = one such element, limit = 0 NaN, 1 +Inf,
   -1 -Inf). */
rg_status rg_cuda_check_finite(rg_kargs *k);

/* reduce.cu: the second pass of a deterministic column sum. part [nchunk][ncol] holds
   per-chunk partials; column c's chunks are added in a fixed order and written with
   out[c] = sum / div (c < C) or out2[c - C] = sum / div (a part holding two results side
   by side, ncol = 2C; a NULL output's columns are not written); with acc (acc2: out2's;
   the error word) out[c] += sum instead, as rg_cuda_put does. Launch errors are left for
   the caller's rg_cuda_check_launch. */
void rg_cuda_col_final(rg_cuda_launch *L, const double *part, int64_t nchunk, int64_t ncol,
                       int64_t C, double div, float *out, float *out2, const rg_cuda_err *acc,
                       const rg_cuda_err *acc2);

/* Checks the launch just made; on failure writes cudaGetErrorString to k->msg. */
rg_status rg_cuda_check_launch(rg_kargs *k, const char *what);

/* Writes k->msg "<op> is not implemented by the CUDA backend yet" and returns
   RG_ERR_UNSUPPORTED. */
rg_status rg_cuda_unsupported(rg_kargs *k, const char *what);

/* Writes k->msg that the launch needs `need` bytes of scratch, more than the backend has,
   and returns RG_ERR_UNSUPPORTED. */
rg_status rg_cuda_no_scratch(rg_kargs *k, size_t need);

/* Records a fault in the error word (first one wins). */
__device__ inline void rg_cuda_raise(rg_cuda_err *e, int code, int node, long long value,
                                     long long pos, long long limit) {
  if (atomicCAS(&e->code, 0, code) == 0) {
    e->ab[0] = 0.f;
    e->node = node;
    e->value = value;
    e->pos = pos;
    e->limit = limit;
    __threadfence();
  }
}

/* Writes one result of a sum: out[e] = v / div, or with acc (the error word: a gradient
   folded into the node that sums it) out[e] += v with the float add an ACCUM would do,
   skipped after a fault earlier in the drain so a failed step leaves the gradient as it
   was. */
__device__ __forceinline__ void rg_cuda_put(float *out, int64_t e, double v, double div,
                                            const rg_cuda_err *acc) {
  if (!acc)
    out[e] = (float)(v / div);
  else if (!*(const volatile int *)&acc->code)
    out[e] = __fadd_rn(out[e], (float)v);
}

/* ---- element types ------------------------------------------------------------------------
   Kernels that take BF16 tensors are templated on each tensor's stored type (float or
   rg_bf16) and compute in float: a bf16 widens exactly (its bits are the top half of a
   float's) and a result is rounded to nearest even once, when it is stored. The float
   instantiations do exactly what the kernels did before they were templated. */
typedef __nv_bfloat16 rg_bf16;

/* Calls f with rg_type<float>() for F32 or rg_type<rg_bf16>() for BF16, so that a launcher
   instantiates its kernel for the tensor's stored type:
     rg_cuda_typed(t->dtype, [&](auto tt) { typedef typename decltype(tt)::type T; ... }); */
template <class T> struct rg_type { typedef T type; };
template <class F> inline void rg_cuda_typed(int dtype, F f) {
  if (dtype == RG_BF16)
    f(rg_type<rg_bf16>());
  else
    f(rg_type<float>());
}
/* t's data as the tag's type. */
template <class T> inline T *rg_cuda_ptr(const rg_tv *t, rg_type<T>) { return (T *)t->p; }

__device__ __forceinline__ float rg_ld(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float rg_ld(const rg_bf16 *p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void rg_st(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void rg_st(rg_bf16 *p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

/* The floats of packed bf16 pairs (element 2i in the low half, little-endian), and back. */
__device__ __forceinline__ float rg_bf16_lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float rg_bf16_hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }
__device__ __forceinline__ uint32_t rg_bf16x2(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return (uint32_t)__bfloat16_as_ushort(h.x) | (uint32_t)__bfloat16_as_ushort(h.y) << 16;
}

/* Elements [4j, 4j + 4) as one access: a float4 (16 bytes) or, for bf16, a uint2 (8 bytes).
   The group must be aligned to its size: true of every group of a tensor (they start on
   256 bytes) and of a row [r C, (r+1) C) when C % 4 == 0. */
__device__ __forceinline__ float4 rg_ld4(const float *p, int64_t j) {
  return ((const float4 *)p)[j];
}
__device__ __forceinline__ float4 rg_ld4(const rg_bf16 *p, int64_t j) {
  uint2 u = ((const uint2 *)p)[j];
  return make_float4(rg_bf16_lo(u.x), rg_bf16_hi(u.x), rg_bf16_lo(u.y), rg_bf16_hi(u.y));
}
__device__ __forceinline__ void rg_st4(float *p, int64_t j, float4 v) { ((float4 *)p)[j] = v; }
__device__ __forceinline__ void rg_st4(rg_bf16 *p, int64_t j, float4 v) {
  ((uint2 *)p)[j] = make_uint2(rg_bf16x2(v.x, v.y), rg_bf16x2(v.z, v.w));
}

/* 2^x in one MUFU.EX2 (about 2 ulp), a subnormal result flushed to 0 (exp2f keeps
   subnormals at the cost of three more instructions; a probability below 2^-126 is 0
   beside the row's largest, which is 1); 2^-inf = 0 exactly. */
__device__ __forceinline__ float rg_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* Elements [8j, 8j + 8): 16 bytes of bf16 (one uint4) or two float4; aligned as above. */
__device__ __forceinline__ void rg_ld8(const float *p, int64_t j, float (&v)[8]) {
  float4 a = ((const float4 *)p)[2 * j], b = ((const float4 *)p)[2 * j + 1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void rg_ld8(const rg_bf16 *p, int64_t j, float (&v)[8]) {
  uint4 u = ((const uint4 *)p)[j];
  v[0] = rg_bf16_lo(u.x), v[1] = rg_bf16_hi(u.x), v[2] = rg_bf16_lo(u.y), v[3] = rg_bf16_hi(u.y);
  v[4] = rg_bf16_lo(u.z), v[5] = rg_bf16_hi(u.z), v[6] = rg_bf16_lo(u.w), v[7] = rg_bf16_hi(u.w);
}
__device__ __forceinline__ void rg_st8(float *p, int64_t j, const float (&v)[8]) {
  ((float4 *)p)[2 * j] = make_float4(v[0], v[1], v[2], v[3]);
  ((float4 *)p)[2 * j + 1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void rg_st8(rg_bf16 *p, int64_t j, const float (&v)[8]) {
  ((uint4 *)p)[j] = make_uint4(rg_bf16x2(v[0], v[1]), rg_bf16x2(v[2], v[3]),
                               rg_bf16x2(v[4], v[5]), rg_bf16x2(v[6], v[7]));
}

/* Grid size for n elements at `threads` per block, capped to keep grid-stride loops. */
static inline unsigned rg_cuda_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 8) b = 65535 * 8;
  return (unsigned)b;
}

/* ---- what kernels share ------------------------------------------------------------------ */

#define FULL 0xffffffffu /* every lane of a warp: the shuffles' mask */

__host__ __device__ __forceinline__ int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Butterfly sum: every lane ends with the same bits (each step adds a commutative pair). */
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
  return v;
}

/* Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
   the result, with the same bits. sh holds 32 doubles; the leading barrier makes
   back-to-back calls safe. */
__device__ __forceinline__ double block_sum(double v, double *sh) {
  int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  return warp_sum(lane < nw ? sh[lane] : 0.0);
}

/* Row-major strides of a view, and the "broadcast" strides of an input view aligned
   right against an output of ndim axes (stride 0 on stretched axes). */
typedef struct rg_cuda_shape {
  int ndim;
  int64_t dims[RG_MAX_DIMS];
  int64_t strides[RG_MAX_DIMS];
} rg_cuda_shape;
rg_cuda_shape rg_cuda_shape_of(const rg_tv *t);
rg_cuda_shape rg_cuda_broadcast(const rg_tv *in, const rg_tv *out);

#endif
