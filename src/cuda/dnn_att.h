/*
 * dnn_att.h - cuDNN's fused flash attention (bf16, forward with softmax statistics and
 * backward), driven through cuDNN 9's backend C API. No C++ and no cudnn-frontend.
 *
 * Tensors are bf16, seen as [B, H, T, D] through strides in elements (rg_dnn_lay: per
 * batch, per head, per row; D is contiguous). Self-attention only: T queries, T keys.
 * The statistics are f32, stats[(b*H + h)*T + t] = m + log(sum_j exp(s_tj - m)) with
 * s = scale * q.k, m = max_j s_tj, natural log, over the keys the row sees (causal: key
 * j is seen by query t iff j <= t).
 *
 * Usage: rg_dnn_open once per device; for each attention shape ask rg_dnn_att_fwd_ws /
 * rg_dnn_att_bwd_ws first (that builds and caches the plan: slow, cuDNN compiles
 * kernels at run time), then call rg_dnn_att_fwd / rg_dnn_att_bwd as often as wanted.
 * Those only enqueue work on the given stream, so they can be captured into a CUDA
 * graph; they allocate nothing, the caller passes at least the asked-for workspace
 * (16-byte aligned, 256 is best; cudaMalloc gives 256). (Called for a shape never asked
 * about, they build the plan first: slow, and not something to do under capture.)
 *
 * The backward is deterministic: the same inputs give bit-identical dq, dk, dv. dq, dk,
 * dv are overwritten, never accumulated into. Its workspace is the price: about
 * B*H*T^2 * 2 bytes (T rounded up to 128), 192 MiB at B=8, H=12, T=1024.
 *
 * Every function returns RG_DNN_OK, or a status with msg (when msg and cap are given)
 * naming what failed: the cuDNN call, cuDNN's status name and its last error text.
 * RG_DNN_UNSUPPORTED means cuDNN (or this module) does not do this shape or layout:
 * the caller should run its own kernels instead. Not thread-safe: one rg_dnn per thread.
 */
#ifndef RG_DNN_ATT_H
#define RG_DNN_ATT_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  RG_DNN_OK = 0,
  RG_DNN_UNSUPPORTED = 1, /* no cuDNN engine for this shape/layout (or this cuDNN/GPU) */
  RG_DNN_ERROR = 2        /* anything else: a cuDNN or CUDA call failed, a bad argument */
};

typedef struct rg_dnn rg_dnn; /* a cuDNN handle and the cache of built plans */

/* Element (b, h, t, d) of a [B, H, T, D] view is at base + b*lay.b + h*lay.h + t*lay.r + d.
   Each stride must be a multiple of 8 (16-byte aligned rows). */
typedef struct {
  int64_t b, h, r;
} rg_dnn_lay;

/* One attention shape. o's layout serves dO too; dq, dk, dv use q's, k's, v's.
   Dense [B,H,T,D]: {H*T*D, T*D, D}. Rows of a [B,T,3C] qkv buffer (C = H*D):
   q, k, v = {T*3C, D, 3C} from base, base + C, base + 2C; o, dO in [B,T,C]: {T*C, D, C}. */
typedef struct {
  int64_t B, H, T, D; /* D: a multiple of 8, at most 128 */
  int causal;         /* 1: key j visible to query t iff j <= t; 0: all keys */
  float scale;        /* usually 1/sqrt(D) */
  rg_dnn_lay q, k, v, o;
} rg_dnn_att;

int rg_dnn_open(rg_dnn **out, char *msg, size_t cap);
void rg_dnn_close(rg_dnn *d); /* frees every plan; NULL is fine */

/* Workspace bytes of a's forward / backward; builds and caches the plan on first use. */
int rg_dnn_att_fwd_ws(rg_dnn *d, const rg_dnn_att *a, size_t *bytes, char *msg, size_t cap);
int rg_dnn_att_bwd_ws(rg_dnn *d, const rg_dnn_att *a, size_t *bytes, char *msg, size_t cap);

/* o = softmax(scale q k^T, masked) v; stats as above. Pointers are device pointers. */
int rg_dnn_att_fwd(rg_dnn *d, const rg_dnn_att *a, cudaStream_t s, const void *q,
                   const void *k, const void *v, void *o, float *stats, void *ws, char *msg,
                   size_t cap);

/* dq, dk, dv from q, k, v, the forward's o and stats, and dO. */
int rg_dnn_att_bwd(rg_dnn *d, const rg_dnn_att *a, cudaStream_t s, const void *q,
                   const void *k, const void *v, const void *o, const void *dO,
                   const float *stats, void *dq, void *dk, void *dv, void *ws, char *msg,
                   size_t cap);

#ifdef __cplusplus
}
#endif

#endif
