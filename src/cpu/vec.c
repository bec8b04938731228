/*
 * vec.c - vec.h's portable table (plain C, one float at a time) and the choice of the
 * process's table: RG_CPU_ISA if set, else the widest the CPU runs.
 */
#include "vec.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define VN(x) portable_##x
#define VATTR
#define V float
#define W 1
#define VLOAD(p) (*(p))
#define VSTORE(p, v) (*(p) = (v))
#define VSET1(x) (x)
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMUL(a, b) ((a) * (b))
#define VDIV(a, b) ((a) / (b))
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VMAX(a, b) ((a) > (b) ? (a) : (b))
#define VMIN(a, b) ((a) < (b) ? (a) : (b))
#define VLTSEL(a, b, x, y) ((a) < (b) ? (x) : (y))
#define VROUND(v) nearbyintf(v)
#define VPOW2(n) portable_pow2(n)
#define VHSUM(v) (v)
#define VHMAX(v) (v)
#define VHSUMD(v) ((double)(v))
#define VSQRT(v) sqrtf(v)
#define VD double
#define VDZERO 0.0
#define VDACC(lo, hi, v) ((lo) += (double)(v), (void)(hi))
#define VDHSUM(lo, hi) ((lo) + (hi))
#define VDADDTO(p, v) (*(p) += (double)(v))

/* 2^n from its exponent bits; n NaN (a NaN argument) gives NaN. */
static inline float portable_pow2(float n) {
  if (n != n) return n;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

#define VMM_ROWS 1

#include "vec_body.h"

const rg_vec_ops rg_vec_portable = VEC_TABLE("portable");

static const rg_vec_ops *best(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && rg_vec_avx512()) return rg_vec_avx512();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && rg_vec_avx2())
    return rg_vec_avx2();
#endif
  return &rg_vec_portable;
}

static const rg_vec_ops *choose(void) {
  const rg_vec_ops *b = best();
  const char *e = getenv("RG_CPU_ISA");
  if (!e || !*e) return b;
  if (!strcmp(e, "portable")) return &rg_vec_portable;
  /* a forced table the CPU cannot run falls back to the best it can (vec.h) */
  if (!strcmp(e, "avx2") && b != &rg_vec_portable) return rg_vec_avx2();
  return b;
}

static _Atomic(const rg_vec_ops *) chosen;

const rg_vec_ops *rg_cpu_vec(void) {
  const rg_vec_ops *t = atomic_load_explicit(&chosen, memory_order_acquire);
  if (t) return t;
  t = choose(); /* racing first calls choose the same table */
  atomic_store_explicit(&chosen, t, memory_order_release);
  return t;
}
