/*
 * vec_avx512.c - vec.h's table for AVX-512 (AVX-512F only), compiled with function
 * target attributes so the rest of the build needs no instruction-set flag; NULL from
 * rg_vec_avx512 where the compiler cannot target x86-64 AVX-512.
 */
#include "vec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define VN(x) avx512_##x
#define VATTR __attribute__((target("avx512f")))
#define V __m512
#define W 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VMIN(a, b) _mm512_min_ps(a, b)
#define VLTSEL(a, b, x, y) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x)
#define VROUND(v) _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2(n)                                                                           \
  _mm512_castsi512_ps(                                                                     \
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define VHSUM(v) _mm512_reduce_add_ps(v)
#define VHMAX(v) _mm512_reduce_max_ps(v)
#define VHSUMD(v) avx512_hsumd(v)
#define VSQRT(v) _mm512_sqrt_ps(v)
#define VD __m512d
#define VDZERO _mm512_setzero_pd()
#define VDACC(lo, hi, v)                                                                   \
  ((lo) = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v))),                   \
   (hi) = _mm512_add_pd(hi, _mm512_cvtps_pd(avx512_upper(v))))
#define VDHSUM(lo, hi) _mm512_reduce_add_pd(_mm512_add_pd(lo, hi))
#define VDADDTO(p, v) avx512_daddto(p, v)
#define VLOADN(p, n) _mm512_maskz_loadu_ps(avx512_first(n), p)
#define VSTOREN(p, v, n) _mm512_mask_storeu_ps(p, avx512_first(n), v)
#define VKEEP(v, n) _mm512_maskz_mov_ps(avx512_first(n), v)

/* The mask of lanes [0, n), n < 16. */
static inline __mmask16 avx512_first(int64_t n) { return (__mmask16)((1u << n) - 1); }

/* Lanes 8 to 15. */
VATTR static inline __m256 avx512_upper(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

VATTR static inline void avx512_daddto(double *p, __m512 v) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v)), hi = _mm512_cvtps_pd(avx512_upper(v));
  _mm512_storeu_pd(p, _mm512_add_pd(_mm512_loadu_pd(p), lo));
  _mm512_storeu_pd(p + 8, _mm512_add_pd(_mm512_loadu_pd(p + 8), hi));
}

VATTR static inline double avx512_hsumd(__m512 v) {
  __m256 hi = avx512_upper(v);
  __m512d d = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), _mm512_cvtps_pd(hi));
  return _mm512_reduce_add_pd(d);
}

#define VEC_TR8 1
#include "vec_body.h"

static const rg_vec_ops table = VEC_TABLE("avx512");

const rg_vec_ops *rg_vec_avx512(void) { return &table; }
#else
const rg_vec_ops *rg_vec_avx512(void) { return 0; }
#endif
