/*
 * gemm_avx2.c - gemm.h's register kernel for AVX2 with FMA: a 6 x 16 tile in 12 vector
 * accumulators (two vectors a row, three registers left of sixteen for B and the
 * broadcast), compiled with a function target attribute; NULL from rg_gemm_avx2 where
 * the compiler cannot target x86-64 AVX2.
 */
#include "gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define MR 6
#define NR 16
#define TARGET __attribute__((target("avx2,fma")))

#include "gemm_x86.h"

#define ACC(i) __m256 c##i##_0 = _mm256_setzero_ps(), c##i##_1 = _mm256_setzero_ps();
#define STEP(i)                                                                            \
  {                                                                                        \
    __m256 a = _mm256_broadcast_ss(ap + i * rs);                                           \
    c##i##_0 = _mm256_fmadd_ps(a, b0, c##i##_0);                                           \
    c##i##_1 = _mm256_fmadd_ps(a, b1, c##i##_1);                                           \
  }
#define OUT(i)                                                                             \
  if (i < m) row_out(c + (int64_t)i * ldc, c##i##_0, c##i##_1, k0, k1, base0, base1, add);

/* Lanes j of a mask vector are all ones where j + first < n. */
TARGET static inline __m256i lanes_below(int n, int first) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n - first),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Stores a row: C's values plus v when add, else v plus the bias (zero without one). */
TARGET static inline void row_out(float *r, __m256 v0, __m256 v1, __m256i k0, __m256i k1,
                                  __m256 base0, __m256 base1, int add) {
  if (add) {
    base0 = _mm256_maskload_ps(r, k0);
    base1 = _mm256_maskload_ps(r + 8, k1);
  }
  v0 = _mm256_add_ps(base0, v0);
  v1 = _mm256_add_ps(base1, v1);
  _mm256_maskstore_ps(r, k0, v0);
  _mm256_maskstore_ps(r + 8, k1, v1);
}

TARGET static void tile(int64_t kc, const float *ap, int64_t rs, int64_t ks, const float *bp,
                        float *c, int64_t ldc, int m, int n, int add, const float *bias) {
  ACC(0) ACC(1) ACC(2) ACC(3) ACC(4) ACC(5)
  for (int64_t p = 0; p < kc; p++, ap += ks, bp += NR) {
    __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
    STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5)
  }
  __m256i k0 = lanes_below(n, 0), k1 = lanes_below(n, 8);
  __m256 base0 = _mm256_setzero_ps(), base1 = base0;
  if (bias && !add) {
    base0 = _mm256_maskload_ps(bias, k0);
    base1 = _mm256_maskload_ps(bias + 8, k1);
  }
  OUT(0) OUT(1) OUT(2) OUT(3) OUT(4) OUT(5)
}

static const rg_gemm_kernel kernel = {"avx2", MR, NR, tile, pack_rows, pack_cols};

const rg_gemm_kernel *rg_gemm_avx2(void) { return &kernel; }
#else
const rg_gemm_kernel *rg_gemm_avx2(void) { return 0; }
#endif
