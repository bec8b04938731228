/*
 * gemm.h - the built-in GEMM's register kernels, one per instruction set, chosen with the
 * row functions' table (vec.h): the kernel of the table's instruction set, so RG_CPU_ISA
 * forces both.
 *
 * A kernel computes one MR x NR tile of C from packed panels (gemm.c):
 *   ap: MR rows of op(A), element (r, p) at ap[r * rs + p * ks]: a packed strip (rs 1,
 *       ks MR; rows past the tile's end zero) or op(A) where it stands (all MR rows
 *       real);
 *   bp: NR columns of op(B), k-major (bp[p * NR + c]), columns past the end zero;
 * and writes the tile's first m rows and n columns to C (row-major, leading dimension
 * ldc): added to C's values when add, else plus bias[j] (bias NULL: nothing). Each element is summed in p order from zero
 * by one fused multiply-add a step (a multiply and an add in the portable kernel), so its
 * bits depend on kc and its own row and column only, not on where the tile sits.
 */
#ifndef RG_CPU_GEMM_H
#define RG_CPU_GEMM_H

#include <stdint.h>

typedef struct rg_gemm_kernel {
  const char *name; /* the instruction set's, as vec.h's table names it */
  int mr, nr;
  void (*tile)(int64_t kc, const float *ap, int64_t rs, int64_t ks, const float *bp, float *c,
               int64_t ldc, int m, int n, int add, const float *bias);
  /* Packs a strip of width w (mr for A, nr for B) from h <= w rows of a row-major
     matrix: dst[p * w + r] = a[r * lda + p] for p < kc, zero for rows r >= h; the strips
     of A from op(A) = A and of B from op(B) = B's transpose. NULL: gemm.c's loops. */
  void (*pack_rows)(const float *a, int64_t lda, int h, int w, int64_t kc, float *dst);
  /* The same strip from h <= w adjacent columns: dst[p * w + c] = a[p * lda + c], zero
     for c >= h. NULL: gemm.c's loops. */
  void (*pack_cols)(const float *a, int64_t lda, int h, int w, int64_t kc, float *dst);
} rg_gemm_kernel;

/* The process's kernel: the one of rg_cpu_vec()'s instruction set. */
const rg_gemm_kernel *rg_gemm_kernel_get(void);

/* Per instruction set; NULL where the build cannot target it. */
extern const rg_gemm_kernel rg_gemm_portable;
const rg_gemm_kernel *rg_gemm_avx2(void);
const rg_gemm_kernel *rg_gemm_avx512(void);

#endif
