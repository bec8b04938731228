/*
 * gemm_avx512.c - gemm.h's register kernel for AVX-512F: a 12 x 32 tile in 24 vector
 * accumulators (two vectors a row), compiled with a function target attribute so the
 * rest of the build needs no instruction-set flag; NULL from rg_gemm_avx512 where the
 * compiler cannot target x86-64 AVX-512.
 */
#include "gemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define MR 12
#define NR 32
/* How many k steps ahead the kernel asks for B's lines: the B strips stream from L2. */
#define PF 4
#define TARGET __attribute__((target("avx512f,avx2,fma")))

#include "gemm_x86.h"

/* Row i's two accumulators, the step that feeds them, and their store. */
#define ACC(i) __m512 c##i##_0 = _mm512_setzero_ps(), c##i##_1 = _mm512_setzero_ps();
/* Row i of A is at a0, a4 or a8 (rows 0, 4, 8) plus 0, rs, 2 rs or rs3 = 3 rs: four rows
   a base pointer, by the scaled index addressing of x86. */
#define STEP(i, base, off)                                                                 \
  {                                                                                        \
    __m512 a = _mm512_set1_ps(base[off]);                                                  \
    c##i##_0 = _mm512_fmadd_ps(a, b0, c##i##_0);                                           \
    c##i##_1 = _mm512_fmadd_ps(a, b1, c##i##_1);                                           \
  }
#define OUT(i)                                                                             \
  if (i < m) row_out(c + (int64_t)i * ldc, c##i##_0, c##i##_1, k0, k1, base0, base1, add);

/* Stores a row: C's values plus v when add, else v plus the bias (zero without one). */
TARGET static inline void row_out(float *r, __m512 v0, __m512 v1, __mmask16 k0, __mmask16 k1,
                                  __m512 base0, __m512 base1, int add) {
  if (add) {
    base0 = _mm512_maskz_loadu_ps(k0, r);
    base1 = _mm512_maskz_loadu_ps(k1, r + 16);
  }
  v0 = _mm512_add_ps(base0, v0);
  v1 = _mm512_add_ps(base1, v1);
  _mm512_mask_storeu_ps(r, k0, v0);
  _mm512_mask_storeu_ps(r + 16, k1, v1);
}

TARGET static void tile(int64_t kc, const float *ap, int64_t rs, int64_t ks, const float *bp,
                        float *c, int64_t ldc, int m, int n, int add, const float *bias) {
  ACC(0) ACC(1) ACC(2) ACC(3) ACC(4) ACC(5) ACC(6) ACC(7) ACC(8) ACC(9) ACC(10) ACC(11)
  const float *a0 = ap, *a4 = ap + 4 * rs, *a8 = ap + 8 * rs;
  int64_t rs3 = 3 * rs;
  for (int64_t p = 0; p < kc; p++, a0 += ks, a4 += ks, a8 += ks, bp += NR) {
    __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
    _mm_prefetch((const char *)(bp + PF * NR), _MM_HINT_T0);
    _mm_prefetch((const char *)(bp + PF * NR + 16), _MM_HINT_T0);
    STEP(0, a0, 0) STEP(1, a0, rs) STEP(2, a0, 2 * rs) STEP(3, a0, rs3)
    STEP(4, a4, 0) STEP(5, a4, rs) STEP(6, a4, 2 * rs) STEP(7, a4, rs3)
    STEP(8, a8, 0) STEP(9, a8, rs) STEP(10, a8, 2 * rs) STEP(11, a8, rs3)
  }
  /* the columns [0, n) of the tile's two vectors */
  __mmask16 k0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
  __mmask16 k1 = n >= 32 ? (__mmask16)0xFFFF : n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
  __m512 base0 = _mm512_setzero_ps(), base1 = base0;
  if (bias && !add) {
    base0 = _mm512_maskz_loadu_ps(k0, bias);
    base1 = _mm512_maskz_loadu_ps(k1, bias + 16);
  }
  OUT(0) OUT(1) OUT(2) OUT(3) OUT(4) OUT(5) OUT(6) OUT(7) OUT(8) OUT(9) OUT(10) OUT(11)
}

/* gemm_x86.h's pack_cols in 16-float masked moves (masked-off lanes are never read). */
TARGET static void pack_cols16(const float *a, int64_t lda, int h, int w, int64_t kc,
                               float *dst) {
  if (w > 32) { /* wider than this file's strips (MR, NR): the AVX form */
    pack_cols(a, lda, h, w, kc, dst);
    return;
  }
  __mmask16 ld[2] = {0, 0}, st[2] = {0, 0}; /* lanes read (h) and written (w), a vector */
  for (int g = 0; g * 16 < w; g++) {
    int nl = h - g * 16, ns = w - g * 16;
    ld[g] = nl >= 16 ? (__mmask16)0xFFFF : nl > 0 ? (__mmask16)((1u << nl) - 1) : 0;
    st[g] = ns >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << ns) - 1);
  }
  for (int64_t p = 0; p < kc; p++, a += lda, dst += w) {
    _mm512_mask_storeu_ps(dst, st[0], _mm512_maskz_loadu_ps(ld[0], a));
    if (w > 16) _mm512_mask_storeu_ps(dst + 16, st[1], _mm512_maskz_loadu_ps(ld[1], a + 16));
  }
}

static const rg_gemm_kernel kernel = {"avx512", MR, NR, tile, pack_rows, pack_cols16};

const rg_gemm_kernel *rg_gemm_avx512(void) { return &kernel; }
#else
const rg_gemm_kernel *rg_gemm_avx512(void) { return 0; }
#endif
