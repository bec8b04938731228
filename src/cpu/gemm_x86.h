/*
 * gemm_x86.h - what the x86-64 GEMM kernels share: packing a k-major strip of width w
 * from w rows of a row-major matrix (an A strip from op(A) = A, a B strip from op(B) =
 * B's transpose) through 8 x 8 transposes in AVX registers, or from w adjacent columns
 * (op(A) = A's transpose, op(B) = B) by masked 8-float copies. The includer defines TARGET (its function
 * target attribute, which must include AVX) and includes <immintrin.h> first.
 */
#ifndef RG_CPU_GEMM_X86_H
#define RG_CPU_GEMM_X86_H

/* r[q] becomes column q of the 8 x 8 block whose rows were r[0..7]. */
TARGET static inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Stores the first n (1..8) floats of v at p. */
TARGET static inline void store_first(float *p, __m256 v, int n) {
  if (n == 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  __m128 lo = _mm256_castps256_ps128(v);
  if (n >= 4) {
    _mm_storeu_ps(p, lo);
    lo = _mm256_extractf128_ps(v, 1);
    p += 4;
    n -= 4;
  }
  if (n >= 2) {
    _mm_storel_pi((__m64 *)p, lo);
    lo = _mm_movehl_ps(lo, lo);
    p += 2;
    n -= 2;
  }
  if (n) _mm_store_ss(p, lo);
}

/* dst[p * w + c] = a[p * lda + c] for c < h (columns from h to w are zero), p < kc. */
TARGET static void pack_cols(const float *a, int64_t lda, int h, int w, int64_t kc,
                             float *dst) {
  __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t p = 0; p < kc; p++, a += lda, dst += w)
    for (int c = 0; c < w; c += 8) {
      __m256 v = c + 8 <= h ? _mm256_loadu_ps(a + c)
                            : _mm256_maskload_ps(a + c, _mm256_cmpgt_epi32(
                                                            _mm256_set1_epi32(h - c), lane));
      if (c + 8 <= w) _mm256_storeu_ps(dst + c, v);
      else _mm256_maskstore_ps(dst + c, _mm256_cmpgt_epi32(_mm256_set1_epi32(w - c), lane), v);
    }
}

/* dst[p * w + r] = a[r * lda + p] for r < h (rows from h to w are zero), p < kc. */
TARGET static void pack_rows(const float *a, int64_t lda, int h, int w, int64_t kc,
                             float *dst) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    for (int r0 = 0; r0 < w; r0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; i++)
        r[i] = r0 + i < h ? _mm256_loadu_ps(a + (r0 + i) * lda + p) : _mm256_setzero_ps();
      transpose8(r);
      int n = w - r0 < 8 ? w - r0 : 8;
      for (int q = 0; q < 8; q++) store_first(dst + (p + q) * w + r0, r[q], n);
    }
  }
  for (; p < kc; p++)
    for (int r = 0; r < w; r++) dst[p * w + r] = r < h ? a[r * lda + p] : 0.f;
}

#endif
