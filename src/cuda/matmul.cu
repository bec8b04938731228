/*
 * matmul.cu - matmul (batched, broadcast, transpose flags) and linear through cuBLASLt.
 *
 * Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T = B^T A^T, so every call passes B
 * first. Strict FP32 compute (CUBLAS_COMPUTE_32F) by default, so results match the CPU
 * to float rounding; rg_options.tf32 selects CUBLAS_COMPUTE_32F_FAST_TF32. A and B are
 * both F32 or both BF16 (CUDA_R_16BF, tensor cores with F32 accumulation, always
 * CUBLAS_COMPUTE_32F). A batch whose operands are each either full or a single matrix is
 * one strided-batched call (stride 0 broadcasts); any other broadcast loops per batch, at
 * addresses cuBLASLt is told the alignment of. matmul_acc adds its product to a gradient
 * in place (beta = 1) with alpha and beta read from device memory: alpha is 0 when a
 * kernel earlier in the drain raised a fault, so a failed step leaves the gradient exactly
 * as it was (every faulting kernel writes zeros, never garbage, so 0 * product stays 0).
 * The scalars live in the error word (rg_cuda_err.ab), whose raise zeroes alpha: no
 * kernel computes them.
 * linear_act applies ReLU or GELU in the epilogue (GELU also stores its input, the aux
 * matrix, for the backward pass); matmul_dgelu multiplies the product by GELU's
 * derivative at that stored input (cuBLASLt's DGELU epilogue, reading it as its aux).
 *
 * Output types: C and D are F32, or BF16 with BF16 factors (bf16 autocast's activations:
 * the F32 sums rounded once, in the epilogue; GELU's aux matrix is then BF16 too);
 * matmul_acc's are F32. The bias has D's type: cuBLASLt adds only a bias of D's type (the
 * table of types cublasLtMatmul supports: bias CUDA_R_16BF for CUDA_R_16BF factors and C,
 * CUDA_R_32F for a CUDA_R_32F C; other pairs only in its FP8 kernels), and the core
 * rounds a bf16 product's bias to BF16 as autocast does (ops.h).
 */
#include "cuda.h"

#include <cublasLt.h>
#include <stdio.h>
#include <string.h>

typedef struct gemm_args {
  int ta, tb;                  /* A stored [K,M] / B stored [N,K] (row-major) */
  int64_t M, N, K;
  const void *A, *B;           /* F32 or BF16 (both the same: dtype) */
  void *C;                     /* F32 or BF16: ctype */
  int64_t batch, sa, sb, sc;   /* batch count and element strides (0 = broadcast) */
  const void *bias;            /* [N] of C's type added to every row of C, or NULL */
  int dtype;                   /* RG_F32 or RG_BF16: A's and B's */
  int ctype;                   /* RG_F32, or RG_BF16 with BF16 factors: C's and aux's */
  const float *ab;             /* NULL: C = AB; else device {alpha, beta}: C = alpha AB + beta C */
  int act;                     /* RG_ACT_*: C = act(AB + bias) in the epilogue; or ACT_DGELU */
  void *aux;                   /* RG_ACT_GELU: AB + bias, the activation's input, goes here;
                                  ACT_DGELU: GELU's input, C = gelu'(aux) AB is read here */
} gemm_args;
enum { ACT_DGELU = 3 };        /* after the RG_ACT_* values */

/* The largest power of two, at most 256, dividing an operand's address and (in a strided
   batch) its batch stride: every address cuBLASLt reads it at. The heuristic otherwise
   assumes 256-byte alignment, which a batch offset in the per-batch loop lacks. */
static uint32_t alignment(const void *p, int64_t stride_bytes) {
  uint64_t a = (uint64_t)(uintptr_t)p | (uint64_t)stride_bytes | 256u;
  return (uint32_t)(a & (~a + 1));
}
/* Where those go, for cuBLASLt's A, B, C and D (our B, A, C, C). */
static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};

#define LT_TRY(call)                                                                   \
  do {                                                                                 \
    cublasStatus_t s_ = (call);                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      snprintf(k->msg, k->msgcap, "%s failed with cuBLAS status %d", #call, (int)s_);  \
      st = RG_ERR_DEVICE;                                                              \
      goto done;                                                                       \
    }                                                                                  \
  } while (0)

/* One configured product: what cublasLtMatmul needs besides the algorithm. */
typedef struct lt_call {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulPreference_t pref;
} lt_call;

static cublasStatus_t lt_run(const rg_cuda_launch *L, const gemm_args *g, const lt_call *c,
                             const cublasLtMatmulAlgo_t *algo, const float *ab) {
  static const float one_zero[2] = {1.f, 0.f};
  const float *s = ab ? ab : one_zero;
  return cublasLtMatmul((cublasLtHandle_t)L->lt, c->op, s, g->B, c->la, g->A, c->lb, s + 1,
                        g->C, c->lc, g->C, c->lc, algo, L->lt_ws, L->lt_ws_bytes, L->stream);
}

/* The heuristic's best n algorithms, or none (*found = 0). cuBLASLt answers
   CUBLAS_STATUS_NOT_SUPPORTED when it has none for the configuration (types, epilogue,
   alignments): that is none found too, so that linear_act can still run its product and
   activation apart. */
static cublasStatus_t heuristic(const rg_cuda_launch *L, const lt_call *c, int n,
                                cublasLtMatmulHeuristicResult_t *heur, int *found) {
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)L->lt, c->op, c->la,
                                                    c->lb, c->lc, c->lc, c->pref, n, heur, found);
  if (s != CUBLAS_STATUS_NOT_SUPPORTED) return s;
  *found = 0;
  return CUBLAS_STATUS_SUCCESS;
}

/* ---- the GEMM tuner (rg_options.gemm_tune) ------------------------------------------
   cuBLASLt's heuristic ranks algorithms by a model, not by the machine: at GPT-2's shapes
   its first pick can be slower than the fastest of its next seven. With
   gemm_tune, the first time a configuration runs outside a graph capture (a signature's
   first drain is always eager), each of the heuristic's best TUNE_CANDIDATES algorithms
   runs TUNE_REPS + 1 times on the real operands, timed by events, and the fastest is kept
   for the context's life: its graphs capture it. The timed launches write the real
   output, which the call proper then overwrites; matmul_acc's read the error word's
   {0, 1} scalars, so they leave the gradient as it was. Products below TUNE_MIN_MACS are
   left to the heuristic (gemm_tune 1): at gpt-char's small shapes a tuned step was
   slower, their times in a loop on warm caches saying little of their times in a step.
   The choice rests on timings, so two runs may pick differently and their results differ
   in the last bits (a tuned context is deterministic from then on). A configuration met
   first inside a capture takes the heuristic's first, uncached. */
#define TUNE_MIN_MACS ((double)(1ull << 32))
#define TUNE_CANDIDATES 8
#define TUNE_REPS 4
typedef struct tune_key { /* what a configuration's algorithms depend on */
  int64_t M, N, K, batch, sa, sb, sc;
  int32_t ta, tb, dtype, ctype, act, bias, acc, compute;
  uint32_t align[4];
} tune_key;
typedef struct tune_entry {
  tune_key key;
  cublasLtMatmulAlgo_t algo;
  int found;
} tune_entry;
typedef struct gemm_tuner {
  tune_entry *e;
  size_t n, cap;
  cudaEvent_t t0, t1;
} gemm_tuner;

void rg_cuda_tune_free(rg_cuda_launch *L) {
  gemm_tuner *t = (gemm_tuner *)L->tune;
  if (!t) return;
  if (t->t0) cudaEventDestroy(t->t0);
  if (t->t1) cudaEventDestroy(t->t1);
  free(t->e);
  free(t);
  L->tune = NULL;
}

/* Milliseconds of TUNE_REPS launches of algo after one untimed, or -1 if it fails. */
static float tune_time(const rg_cuda_launch *L, const gemm_tuner *t, const gemm_args *g,
                       const lt_call *c, const cublasLtMatmulAlgo_t *algo, const float *ab) {
  float ms = -1.f;
  if (lt_run(L, g, c, algo, ab) != CUBLAS_STATUS_SUCCESS) return -1.f;
  if (cudaEventRecord(t->t0, L->stream) != cudaSuccess) return -1.f;
  for (int r = 0; r < TUNE_REPS; r++)
    if (lt_run(L, g, c, algo, ab) != CUBLAS_STATUS_SUCCESS) return -1.f;
  if (cudaEventRecord(t->t1, L->stream) != cudaSuccess ||
      cudaEventSynchronize(t->t1) != cudaSuccess ||
      cudaEventElapsedTime(&ms, t->t0, t->t1) != cudaSuccess)
    return -1.f;
  return ms;
}

/* The algorithm for g's configuration (c; compute type and alignments as gemm set them):
   the tuner's choice (made now if need be), else the heuristic's first. *found = 0:
   there is none. */
static rg_status pick(rg_kargs *k, const gemm_args *g, const lt_call *c, int32_t compute,
                      const uint32_t (&align)[4], cublasLtMatmulAlgo_t *algo, int *found) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  cublasLtMatmulHeuristicResult_t heur[TUNE_CANDIDATES];
  gemm_tuner *t = (gemm_tuner *)L->tune;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  tune_key key;
  bool tune = k->ctx->opt.gemm_tune >= 2 ||
              (k->ctx->opt.gemm_tune == 1 &&
               (double)g->M * (double)g->N * (double)g->K * (double)g->batch >= TUNE_MIN_MACS);
  if (tune) {
    memset(&key, 0, sizeof key); /* padding included: keys compare by memcmp */
    key.M = g->M, key.N = g->N, key.K = g->K, key.batch = g->batch;
    key.sa = g->sa, key.sb = g->sb, key.sc = g->sc, key.ta = g->ta, key.tb = g->tb;
    key.dtype = g->dtype, key.ctype = g->ctype, key.act = g->act, key.bias = g->bias != NULL;
    key.acc = g->ab != NULL, key.compute = compute;
    memcpy(key.align, align, sizeof key.align);
  }
  if (tune && t)
    for (size_t i = 0; i < t->n; i++)
      if (!memcmp(&t->e[i].key, &key, sizeof key)) {
        *algo = t->e[i].algo;
        *found = t->e[i].found;
        return RG_OK;
      }
  if (tune && cudaStreamIsCapturing(L->stream, &cs) != cudaSuccess) tune = false;
  tune = tune && cs == cudaStreamCaptureStatusNone;
  if (tune && !t) { /* the tuner's state, made at its first use; without it, no tuning */
    L->tune = t = (gemm_tuner *)rg__calloc(k->ctx, 1, sizeof *t);
    if (t && (cudaEventCreate(&t->t0) != cudaSuccess || cudaEventCreate(&t->t1) != cudaSuccess))
      rg_cuda_tune_free(L), t = NULL;
    tune = t != NULL;
  }
  cublasStatus_t s = heuristic(L, c, tune ? TUNE_CANDIDATES : 1, heur, found);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(k->msg, k->msgcap, "cublasLtMatmulAlgoGetHeuristic failed with cuBLAS status %d",
             (int)s);
    return RG_ERR_DEVICE;
  }
  int best = 0;
  if (tune && *found > 1) {
    const float *ab = g->ab ? L->err->keep : NULL;
    float best_ms = -1.f, first_ms = -1.f;
    for (int i = 0; i < *found; i++) {
      float ms = tune_time(L, t, g, c, &heur[i].algo, ab);
      if (i == 0) first_ms = ms;
      if (ms >= 0.f && (best_ms < 0.f || ms < best_ms)) best = i, best_ms = ms;
    }
    (void)cudaGetLastError(); /* a candidate that failed to launch leaves nothing behind */
    if (k->ctx->opt.trace)
      fprintf(stderr, "resgrad: gemm_tune %lldx%lldx%lld (batch %lld): candidate %d of %d, "
              "%.1f us (the first: %.1f)\n", (long long)g->M, (long long)g->N,
              (long long)g->K, (long long)g->batch, best, *found, best_ms * 1e3 / TUNE_REPS,
              first_ms * 1e3 / TUNE_REPS);
  }
  if (*found) *algo = heur[best].algo;
  if (tune && rg__grow(k->ctx, (void **)&t->e, sizeof *t->e, t->n + 1, &t->cap))
    t->e[t->n++] = (tune_entry){key, *algo, *found > 0};
  return RG_OK;
}

static rg_status gemm(rg_kargs *k, const gemm_args *g) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  rg_status st = RG_OK;
  lt_call c = {NULL, NULL, NULL, NULL, NULL};
  cublasLtMatmulAlgo_t algo;
  int found = 0;
  /* Column-major operands: X = B^T (N x K), Y = A^T (K x M), C^T (N x M). */
  cublasOperation_t opx = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opy = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint64_t xr = g->tb ? g->K : g->N, xc = g->tb ? g->N : g->K;
  uint64_t yr = g->ta ? g->M : g->K, yc = g->ta ? g->K : g->M;
  int32_t batch = (int32_t)g->batch;
  int64_t sx = g->sb, sy = g->sa, sc = g->sc;
  static const cublasLtEpilogue_t epis[4][2] = {
      {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS},
      {CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_RELU_BIAS},
      {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
      {CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU}}; /* never with a bias */
  cublasLtEpilogue_t epi = epis[g->act][g->bias != NULL];
  int64_t aux_ld = g->N;
  bool bf16 = g->dtype == RG_BF16, bf16_out = g->ctype == RG_BF16;
  cudaDataType_t in_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  cudaDataType_t out_type = bf16_out ? CUDA_R_16BF : CUDA_R_32F;
  int32_t bias_type = out_type, aux_type = CUDA_R_16BF;
  int64_t esz = (int64_t)rg__dtype_size(g->dtype), strided = batch > 1;
  int64_t osz = (int64_t)rg__dtype_size(g->ctype);
  uint32_t ac = alignment(g->C, strided * sc * osz);
  uint32_t align[4] = {alignment(g->B, strided * sx * esz), alignment(g->A, strided * sy * esz),
                       ac, ac};
  cublasComputeType_t compute = k->ctx->opt.tf32 && !bf16 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                          : CUBLAS_COMPUTE_32F;
  if (bf16_out && !bf16) { /* a type pair cuBLASLt lacks (the core never records it) */
    snprintf(k->msg, k->msgcap, "cuBLASLt has no BF16 product of F32 factors");
    return RG_ERR_UNSUPPORTED;
  }
  LT_TRY(cublasLtMatmulDescCreate(&c.op, compute, CUDA_R_32F));
  LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &opx, sizeof opx));
  LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &opy, sizeof opy));
  LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (g->ab) {
    int32_t mode = CUBLASLT_POINTER_MODE_DEVICE;
    LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode,
                                          sizeof mode));
  }
  if (g->bias) { /* D's type (the default), said outright since A and B may differ */
    LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                          sizeof g->bias));
    LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                          &bias_type, sizeof bias_type));
  }
  if (g->act == RG_ACT_GELU || g->act == ACT_DGELU) { /* the aux matrix is laid out as D */
    LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                          &g->aux, sizeof g->aux));
    LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                          sizeof aux_ld));
    /* D's type is the default; said outright for BF16 (an F32 D's descriptor is left as it
       always was) */
    if (bf16_out)
      LT_TRY(cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                            &aux_type, sizeof aux_type));
  }
  LT_TRY(cublasLtMatrixLayoutCreate(&c.la, in_type, xr, xc, (int64_t)xr));
  LT_TRY(cublasLtMatrixLayoutCreate(&c.lb, in_type, yr, yc, (int64_t)yr));
  LT_TRY(cublasLtMatrixLayoutCreate(&c.lc, out_type, (uint64_t)g->N, (uint64_t)g->M, g->N));
  if (batch > 1) {
    LT_TRY(cublasLtMatrixLayoutSetAttribute(c.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, 4));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(c.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, 4));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(c.lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, 4));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(c.la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &sx, 8));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(c.lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &sy, 8));
    LT_TRY(cublasLtMatrixLayoutSetAttribute(c.lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &sc, 8));
  }
  LT_TRY(cublasLtMatmulPreferenceCreate(&c.pref));
  LT_TRY(cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &L->lt_ws_bytes, sizeof L->lt_ws_bytes));
  for (int i = 0; i < 4; i++)
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(c.pref, align_attr[i], &align[i], sizeof align[i]));
  st = pick(k, g, &c, (int32_t)compute, align, &algo, &found);
  if (st != RG_OK) goto done;
  if (!found) {
    snprintf(k->msg, k->msgcap, "cuBLASLt has no algorithm for a %lldx%lldx%lld product",
             (long long)g->M, (long long)g->N, (long long)g->K);
    st = RG_ERR_UNSUPPORTED;
    goto done;
  }
  LT_TRY(lt_run(L, g, &c, &algo, g->ab));
done:
  if (c.pref) cublasLtMatmulPreferenceDestroy(c.pref);
  if (c.lc) cublasLtMatrixLayoutDestroy(c.lc);
  if (c.lb) cublasLtMatrixLayoutDestroy(c.lb);
  if (c.la) cublasLtMatrixLayoutDestroy(c.la);
  if (c.op) cublasLtMatmulDescDestroy(c.op);
  return st;
}

/* out [X, K] = in [K, X] transposed, through 32 x 32 tiles in shared memory (the extra
   column keeps a tile's column reads off one bank). Blocks of 32 x 8 threads. */
__global__ void transpose_k(const float *in, float *out, int64_t K, int64_t X) {
  __shared__ float tile[32][33];
  int64_t x0 = (int64_t)blockIdx.x * 32, k0 = (int64_t)blockIdx.y * 32;
  for (int r = threadIdx.y; r < 32; r += 8) {
    int64_t kk = k0 + r, xx = x0 + threadIdx.x;
    if (kk < K && xx < X) tile[r][threadIdx.x] = in[kk * X + xx];
  }
  __syncthreads();
  for (int r = threadIdx.y; r < 32; r += 8) {
    int64_t xx = x0 + r, kk = k0 + threadIdx.x;
    if (kk < K && xx < X) out[xx * K + kk] = tile[threadIdx.x][r];
  }
}

/* TF32 tensor cores want a K-contiguous operand: with both stored K-outer (a weight
   gradient, a^T b over the rows) cuBLASLt runs well below its usual rate. So the smaller
   of the two is transposed into the scratch first, when it fits and the product is large
   enough (2^30 multiply-adds) for the gain to outweigh the extra kernel: a small product
   is launch-bound either way. 16-bit operands need none of this. */
#define KC_MIN_MACS ((double)(1 << 30))
static rg_status k_contiguous(rg_kargs *k, gemm_args *g) {
  rg_cuda_launch *L = rg_cuda_ctx(k);
  if (!k->ctx->opt.tf32 || g->dtype != RG_F32 || !g->ta || g->tb || g->batch != 1 ||
      (double)g->M * (double)g->N * (double)g->K < KC_MIN_MACS)
    return RG_OK;
  bool a = g->M <= g->N; /* transpose A [K,M] -> [M,K], or else B [K,N] -> [N,K] */
  int64_t X = a ? g->M : g->N;
  if ((uint64_t)(X * g->K) > L->scratch_bytes / 4) return RG_OK;
  float *t = (float *)L->scratch;
  dim3 grid((unsigned)((X + 31) / 32), (unsigned)((g->K + 31) / 32));
  if (grid.y > 65535) return RG_OK;
  transpose_k<<<grid, dim3(32, 8), 0, L->stream>>>((const float *)(a ? g->A : g->B), t, g->K, X);
  if (a) g->A = t, g->ta = 0;
  else g->B = t, g->tb = 1;
  return rg_cuda_check_launch(k, "transpose");
}

template <class T> __global__ void zero_kernel(T *p, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    rg_st(p, i, 0.f);
}

/* Element offset of batch b of an operand with batch dims bd (right-aligned against the
   output's batch dims od, nb axes). */
static int64_t batch_offset(int64_t b, const int64_t *od, const int64_t *bd, int nbd, int nb,
                            int64_t mat) {
  int64_t off = 0, stride = mat;
  for (int d = nb - 1; d >= 0; d--) {
    int64_t c = b % od[d];
    b /= od[d];
    int j = d - (nb - nbd);
    if (j >= 0) {
      if (bd[j] != 1) off += c * stride;
      stride *= bd[j];
    }
  }
  return off;
}

rg_status rg_cuda_matmul(rg_kargs *k) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *o = &k->out[0];
  gemm_args g = {(int)k->node->i[0], (int)k->node->i[1], o->dims[o->ndim - 2],
                 o->dims[o->ndim - 1], 0, a->p, b->p, o->p, 1, 0, 0, 0, NULL,
                 a->dtype, o->dtype, NULL, RG_ACT_NONE, NULL};
  g.K = g.ta ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
  if (o->n == 0) return RG_OK;
  if (g.K == 0) {
    cudaStream_t s = rg_cuda_ctx(k)->stream;
    rg_cuda_typed(o->dtype, [&](auto to) {
      zero_kernel<<<rg_cuda_blocks(o->n, 256), 256, 0, s>>>(rg_cuda_ptr(o, to), o->n);
    });
    return rg_cuda_check_launch(k, "zero");
  }
  int nb = o->ndim - 2;
  int64_t batch = 1, na = 1, nbb = 1;
  for (int d = 0; d < nb; d++) batch *= o->dims[d];
  for (int d = 0; d < a->ndim - 2; d++) na *= a->dims[d];
  for (int d = 0; d < b->ndim - 2; d++) nbb *= b->dims[d];
  int64_t ma = g.M * g.K, mb = g.K * g.N, mc = g.M * g.N;
  if ((na == batch || na == 1) && (nbb == batch || nbb == 1)) {
    g.batch = batch;
    g.sa = na == 1 ? 0 : ma;
    g.sb = nbb == 1 ? 0 : mb;
    g.sc = mc;
    rg_status st = k_contiguous(k, &g);
    return st == RG_OK ? gemm(k, &g) : st;
  }
  size_t esz = rg__dtype_size(g.dtype), osz = rg__dtype_size(g.ctype);
  for (int64_t i = 0; i < batch; i++) { /* mixed broadcast, e.g. [2,1,..] x [1,3,..] */
    gemm_args gi = g;
    gi.A = (const char *)g.A + batch_offset(i, o->dims, a->dims, a->ndim - 2, nb, ma) * esz;
    gi.B = (const char *)g.B + batch_offset(i, o->dims, b->dims, b->ndim - 2, nb, mb) * esz;
    gi.C = (char *)g.C + i * mc * osz;
    rg_status st = gemm(k, &gi);
    if (st != RG_OK) return st;
  }
  return RG_OK;
}

rg_status rg_cuda_matmul_acc(rg_kargs *k) {
  const rg_cuda_launch *L = rg_cuda_ctx(k);
  const rg_tv *d = &k->in[0], *a = &k->in[1], *b = &k->in[2];
  gemm_args g = {(int)k->node->i[0], (int)k->node->i[1], d->dims[0], d->dims[1], 0, a->p, b->p,
                 d->p, 1, 0, 0, 0, NULL, a->dtype, RG_F32, L->err->ab,
                 RG_ACT_NONE, NULL};
  g.K = g.ta ? a->dims[0] : a->dims[1];
  rg_status st = d->n == 0 || g.K == 0 ? RG_OK : k_contiguous(k, &g); /* 0: adds nothing */
  if (st == RG_OK && d->n && g.K) st = gemm(k, &g);
  if (st != RG_OK || !k->in[3].p) return st;
  rg_kargs s = *k; /* the bias gradient (ops.h): SUM_TO_ACC's arguments */
  s.in[0] = k->in[3];
  return rg_cuda_sum_to_acc(&s);
}

/* y = x w^T + b as one GEMM of x [rows, in] by w [out, in] transposed, y of out[0]'s type;
   act, aux as gemm_args'. */
static rg_status linear(rg_kargs *k, int act, void *aux) {
  const rg_tv *x = &k->in[0], *w = &k->in[1], *bias = &k->in[2], *y = &k->out[0];
  int64_t in = w->dims[1], out = w->dims[0], n = y->n;
  int64_t rows = in ? x->n / in : out ? n / out : 0;
  gemm_args g = {0, 1, rows, out, in, x->p, w->p, y->p, 1, 0, 0, 0, bias->p,
                 x->dtype, y->dtype, NULL, act, aux};
  if (n == 0) return RG_OK;
  if (in == 0) return rg_cuda_unsupported(k, "rg_linear with 0 input features");
  if (g.bias && bias->dtype != y->dtype) {
    snprintf(k->msg, k->msgcap, "cuBLASLt adds only a bias of the output's type (here %s "
             "and %s; the core rounds a bf16 product's bias)", rg__dtype_name(bias->dtype),
             rg__dtype_name(y->dtype));
    return RG_ERR_UNSUPPORTED;
  }
  return gemm(k, &g);
}

rg_status rg_cuda_linear(rg_kargs *k) { return linear(k, RG_ACT_NONE, NULL); }

/* GELU's derivative rides in cuBLASLt's epilogue (DGELU) when the aux matrix can (its
   leading dimension a multiple of 8, of D's type) and cuBLASLt has an algorithm;
   otherwise the product, then GELU_BWD in place. */
rg_status rg_cuda_matmul_dgelu(rg_kargs *k) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *u = &k->in[2], *o = &k->out[0];
  gemm_args g = {(int)k->node->i[0], (int)k->node->i[1], o->dims[0], o->dims[1], 0, a->p, b->p,
                 o->p, 1, 0, 0, 0, NULL, a->dtype, o->dtype, NULL, ACT_DGELU, u->p};
  g.K = g.ta ? a->dims[0] : a->dims[1];
  if (o->n == 0) return RG_OK;
  if (g.K > 0 && g.N % 8 == 0 && u->dtype == o->dtype && b->dtype == a->dtype) {
    rg_status st = gemm(k, &g);
    if (st != RG_ERR_UNSUPPORTED) return st;
  }
  rg_kargs mm, act;
  rg__matmul_dgelu_split(k, &mm, &act);
  rg_status st = rg_cuda_matmul(&mm);
  return st == RG_OK ? rg_cuda_gelu_bwd(&act) : st;
}

/* The activation rides in cuBLASLt's epilogue; GELU's input is stored as its aux matrix,
   whose leading dimension must be a multiple of 8. Otherwise, or when cuBLASLt offers no
   algorithm with that epilogue, the product and the activation run as two kernels (with
   BF16 outputs the activation then reads the rounded product). */
rg_status rg_cuda_linear_act(rg_kargs *k) {
  int act = (int)k->node->i[0];
  if (act == RG_ACT_RELU || k->in[1].dims[0] % 8 == 0) {
    rg_status st = linear(k, act, k->out[1].p);
    if (st != RG_ERR_UNSUPPORTED || k->in[1].dims[1] == 0) return st;
  }
  rg_kargs lin, a;
  rg__linear_act_split(k, &lin, &a);
  rg_status st = rg_cuda_linear(&lin);
  if (st != RG_OK) return st;
  return act == RG_ACT_GELU ? rg_cuda_gelu(&a) : rg_cuda_relu(&a);
}
