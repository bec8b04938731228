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
} rg_cuda_err;
enum { RG_CUDA_E_INDEX = 1, RG_CUDA_E_TARGET = 2, RG_CUDA_E_NONFINITE = 3 };

typedef struct rg_cuda_launch {
  cudaStream_t stream;
  rg_cuda_err *err;     /* device view of the error word */
  int node;             /* index of the node being launched, within its drain */
  void *scratch;        /* RG_CUDA_SCRATCH bytes of device scratch, 256-aligned */
  size_t scratch_bytes;
  void *lt;             /* cublasLtHandle_t */
  void *lt_ws;          /* cuBLASLt workspace */
  size_t lt_ws_bytes;
  int sms;              /* multiprocessors, to size grids */
} rg_cuda_launch;

/* The launch context of the node being run (set by the backend before each launcher). */
static inline rg_cuda_launch *rg_cuda_ctx(rg_kargs *k) { return (rg_cuda_launch *)k->be; }

#define RG_CUDA_DECL(E, n, s, ni, no) rg_status rg_cuda_##n(rg_kargs *k);
RG_OPS(RG_CUDA_DECL)
#undef RG_CUDA_DECL

/* check_finite: raises RG_CUDA_E_NONFINITE when a float output of the node holds a NaN
   or an Inf (value = output index, pos = one such element, limit = 0 NaN, 1 +Inf,
   -1 -Inf). */
rg_status rg_cuda_check_finite(rg_kargs *k);

/* reduce.cu: the second pass of a deterministic column sum. part [nchunk][ncol] holds
   per-chunk partials; column c's chunks are added in a fixed order and written with
   out[c] = sum / div (c < C) or out2[c - C] = sum / div (a part holding two results side
   by side, ncol = 2C; a NULL output's columns are not written); with acc (the error
   word) out[c] += sum instead, skipped after a fault. Launch errors are left for the
   caller's rg_cuda_check_launch. */
void rg_cuda_col_final(rg_cuda_launch *L, const double *part, int64_t nchunk, int64_t ncol,
                       int64_t C, double div, float *out, float *out2, const rg_cuda_err *acc);

/* Checks the launch just made; on failure writes cudaGetErrorString to k->msg. */
rg_status rg_cuda_check_launch(rg_kargs *k, const char *what);

/* Writes k->msg "<op> is not implemented by the CUDA backend yet" and returns
   RG_ERR_UNSUPPORTED. */
rg_status rg_cuda_unsupported(rg_kargs *k, const char *what);

/* Records a fault in the error word (first one wins). */
__device__ inline void rg_cuda_raise(rg_cuda_err *e, int code, int node, long long value,
                                     long long pos, long long limit) {
  if (atomicCAS(&e->code, 0, code) == 0) {
    e->node = node;
    e->value = value;
    e->pos = pos;
    e->limit = limit;
    __threadfence();
  }
}

/* Grid size for n elements at `threads` per block, capped to keep grid-stride loops. */
static inline unsigned rg_cuda_blocks(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 8) b = 65535 * 8;
  return (unsigned)b;
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
