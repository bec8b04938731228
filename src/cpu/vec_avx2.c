/*
 * vec_avx2.c - vec.h's table for AVX2 with FMA, compiled with function target
 * attributes so the rest of the build needs no instruction-set flag; NULL from
 * rg_vec_avx2 where the compiler cannot target x86-64 AVX2.
 */
#include "vec.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define VN(x) avx2_##x
#define VATTR __attribute__((target("avx2,fma")))
#define V __m256
#define W 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VMIN(a, b) _mm256_min_ps(a, b)
#define VLTSEL(a, b, x, y) _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ))
#define VROUND(v) _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2(n)                                                                           \
  _mm256_castsi256_ps(                                                                     \
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define VHSUM(v) avx2_hsum(v)
#define VHMAX(v) avx2_hmax(v)
#define VHSUMD(v) avx2_hsumd(v)
#define VSQRT(v) _mm256_sqrt_ps(v)
#define VD __m256d
#define VDZERO _mm256_setzero_pd()
#define VDACC(lo, hi, v)                                                                   \
  ((lo) = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v))),                   \
   (hi) = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))))
#define VDHSUM(lo, hi) avx2_dsum(_mm256_add_pd(lo, hi))
#define VDADDTO(p, v) avx2_daddto(p, v)

/* Halves, then pairs, then the last two lanes: a fixed order. */
VATTR static inline float avx2_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

VATTR static inline float avx2_hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

VATTR static inline double avx2_hsumd(__m256 v) {
  __m256d d = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                            _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

/* Halves, then the last two lanes: a fixed order. */
VATTR static inline double avx2_dsum(__m256d d) {
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(d), _mm256_extractf128_pd(d, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

VATTR static inline void avx2_daddto(double *p, __m256 v) {
  _mm256_storeu_pd(p, _mm256_add_pd(_mm256_loadu_pd(p),
                                    _mm256_cvtps_pd(_mm256_castps256_ps128(v))));
  _mm256_storeu_pd(p + 4, _mm256_add_pd(_mm256_loadu_pd(p + 4),
                                        _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))));
}

/* 16 vector registers: mm's tiles keep up to 12 accumulators (6 x 2 vectors, 8 x 1), two
   B vectors and a broadcast */
#define VMM_NV 2
#define VMM_ACC 12

#define VEC_TR8 1
#include "vec_body.h"

static const rg_vec_ops table = VEC_TABLE("avx2");

const rg_vec_ops *rg_vec_avx2(void) { return &table; }
#else
const rg_vec_ops *rg_vec_avx2(void) { return 0; }
#endif
