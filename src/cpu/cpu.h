/*
 * cpu.h - the CPU backend's kernels: one rg_cpu_<op> per row of ops.h.
 *
 * A kernel gets validated views (rg_kargs) and returns RG_OK, or a status with the reason
 * in k->msg (the core prefixes the op's name and label). Kernels never allocate tensors;
 * scratch comes from the stack or rg__malloc(k->ctx, ...) and is freed before return.
 * rg_cpu_for (pool.h) splits rows over the context's threads (at most k->threads); results
 * do not depend on the thread count (each output element is written by one thread,
 * reductions in a fixed order).
 * Matrix products go to the built-in GEMM (gemm.c), whose sums do not depend on how its
 * work is cut, or, with a CBLAS (RG_HAVE_CBLAS) and no vector kernel for the CPU, are cut
 * into blocks by their shape alone, each block one call of the BLAS on one thread:
 * OpenBLAS is set so (backend.c); another BLAS that threads a call itself may round
 * differently for another thread count.
 */
#ifndef RG_CPU_H
#define RG_CPU_H

#include "../core/internal.h"
#include "pool.h"

/* The threads a kernel may use (k->threads, at least 1). */
static inline int nthreads(const rg_kargs *k) { return k->threads > 0 ? k->threads : 1; }
/* The thread bound for rg_cpu_for: all of them when the work is big enough, else one. */
static inline int par_threads(const rg_kargs *k, bool big) { return big ? nthreads(k) : 1; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#define RG_CPU_DECL(E, n, ...) rg_status rg_cpu_##n(rg_kargs *k);
RG_OPS(RG_CPU_DECL)
#undef RG_CPU_DECL

/* Broadcasting (numpy, right-aligned): st[j] is the element stride of x along out's axis
   j for the axes before out's last `skip` (x's last `skip` axes form one block), 0 where
   x is broadcast; rg_cpu_bcast_offset turns an index r over those leading axes of out
   into x's element offset. Binary ops use skip 0 (offsets of rows: skip 1), batched
   matmul skip 2. */
void rg_cpu_bcast_strides(const rg_tv *x, const rg_tv *out, int skip, int64_t st[RG_MAX_DIMS]);
int64_t rg_cpu_bcast_offset(const rg_tv *out, int skip, const int64_t st[RG_MAX_DIMS],
                            int64_t r);

/* One product C[M,N] = op(A) op(B) (+ C if accumulate) (+ bias[j] in every row), row-major
   with leading dimensions; op(X) is X, or its transpose when tX. */
typedef struct rg_cpu_gemm_args {
  int ta, tb, accumulate;
  int64_t M, N, K, lda, ldb, ldc;
  const float *A, *B;
  float *C;
  const float *bias; /* N values, or NULL: none */
  /* M values, or NULL: rowsum[i] += row i of op(A) summed, in k order in a double, then
     rounded once; the sums of SUM_TO_ACC, bit for bit (a bias gradient, folded into the
     packing of the weight gradient's op(A)). */
  float *rowsum;
} rg_cpu_gemm_args;

/* The product: the built-in GEMM (gemm.c) where it has a vector kernel for this CPU, else
   BLAS sgemm when the build found one (matmul.c says why). false: out of host memory for
   the packing buffers, C and rowsum untouched. */
bool rg_cpu_gemm(const rg_cpu_gemm_args *g, int threads);
/* The built-in GEMM (gemm.c), always compiled (tests compare it with a naive loop). */
bool rg_cpu_gemm_builtin(const rg_cpu_gemm_args *g, int threads);
/* g->rowsum's sums by a plain loop (gemm.c), for products that do not pack op(A). */
void rg_cpu_gemm_rowsum(const rg_cpu_gemm_args *g);
/* C (+)= the bias in every row, then no bias and accumulate: for a product that cannot
   take the bias with its first K block (gemm.c). */
void rg_cpu_gemm_bias_first(rg_cpu_gemm_args *g);

/* The backend's meminfo (memory.c): the host memory this process may still take. */
rg_status rg_cpu_meminfo(rg_ctx *ctx, size_t *available, size_t *total);

#endif
