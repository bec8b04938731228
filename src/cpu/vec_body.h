/*
 * vec_body.h - the row functions of vec.h written once over a vector of W floats; each
 * instruction set's file (vec.c, vec_avx2.c, vec_avx512.c) defines the macros below and
 * includes this file, so the three tables compute the same formulas.
 *
 * The includer defines:
 *   VN(x)            the name of function x in this table (a prefix per table)
 *   VATTR            the functions' attribute (a target(...) or nothing)
 *   V, W             the vector type and its number of floats
 *   VLOAD(p), VSTORE(p, v), VSET1(x)       unaligned load and store, broadcast
 *   VADD, VSUB, VMUL, VDIV, VFMA(a, b, c)  lanewise; VFMA is a*b+c
 *   VMAX(a, b), VMIN(a, b)  a > b ? a : b and a < b ? a : b lanewise (b where a is NaN,
 *                           so a clamp written VMAX(lo, x) keeps a NaN x)
 *   VLTSEL(a, b, x, y)      a < b ? x : y lanewise
 *   VROUND(v)               to the nearest integer, ties to even
 *   VPOW2(n)                2^n for integral n in [-126, 127]
 *   VHSUM(v), VHMAX(v)      the lanes' sum (fixed order) and maximum, as float
 *   VHSUMD(v)               the lanes' sum in double
 *   VSQRT(v)                the correctly rounded square root
 *   VD, VDZERO              an accumulator of W doubles held as two halves (lo, hi), zero
 *   VDACC(lo, hi, v)        lo += v's first half, hi += its second half, in double
 *   VDHSUM(lo, hi)          the accumulator's sum (fixed order), as double
 *   VDADDTO(p, v)           p[i] += v[i] in double for the W doubles at p
 * and may define VEC_TR8 where its target has AVX's 8-float vectors (both x86 tables):
 * transpose then moves 8 x 8 blocks through registers; VMM_NV and VMM_ACC, mm's widest
 * tile in vectors and its accumulators (defaults 4 and 16); VMM_ROWS where a vector is
 * one float: mm then works by rows.
 *
 * Invariants (vec.h): sums run in an order fixed by n alone; a tail shorter than W goes
 * through a zero-padded vector, so every element of an elementwise function gets the
 * same arithmetic wherever it sits in the row.
 */

#include <string.h>

/* Loads n < W floats into a zero-padded vector (and stores the first n lanes back);
   keep zeroes the lanes from n on. An instruction set with masked loads and stores
   defines VLOADN(p, n), VSTOREN(p, v, n) and VKEEP(v, n), and its functions then keep no
   vector-sized buffer on the stack: GCC misaligns such a buffer of 64-byte vectors when
   ASan moves it to its fake stack (detect_stack_use_after_return), which faults. */
#ifdef VLOADN
VATTR static inline V VN(load_part)(const float *p, int64_t n) { return VLOADN(p, n); }
VATTR static inline void VN(store_part)(float *p, V v, int64_t n) { VSTOREN(p, v, n); }
VATTR static inline V VN(keep)(V v, int64_t n) { return VKEEP(v, n); }
#else
VATTR static inline V VN(load_part)(const float *p, int64_t n) {
  float b[W] = {0};
  memcpy(b, p, (size_t)n * sizeof(float));
  return VLOAD(b);
}
VATTR static inline void VN(store_part)(float *p, V v, int64_t n) {
  float b[W];
  VSTORE(b, v);
  memcpy(p, b, (size_t)n * sizeof(float));
}
VATTR static inline V VN(keep)(V v, int64_t n) {
  float b[W] = {0};
  VN(store_part)(b, v, n);
  return VLOAD(b);
}
#endif

VATTR static float VN(dot)(const float *a, const float *b, int64_t n) {
  V s0 = VSET1(0.f), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    s0 = VFMA(VLOAD(a + i), VLOAD(b + i), s0);
    s1 = VFMA(VLOAD(a + i + W), VLOAD(b + i + W), s1);
    s2 = VFMA(VLOAD(a + i + 2 * W), VLOAD(b + i + 2 * W), s2);
    s3 = VFMA(VLOAD(a + i + 3 * W), VLOAD(b + i + 3 * W), s3);
  }
  for (; i + W <= n; i += W) s0 = VFMA(VLOAD(a + i), VLOAD(b + i), s0);
  if (i < n) s1 = VFMA(VN(load_part)(a + i, n - i), VN(load_part)(b + i, n - i), s1);
  return VHSUM(VADD(VADD(s0, s1), VADD(s2, s3)));
}

VATTR static void VN(axpy)(float *y, float a, const float *x, int64_t n) {
  V va = VSET1(a);
  int64_t i = 0;
  for (; i + W <= n; i += W) VSTORE(y + i, VFMA(va, VLOAD(x + i), VLOAD(y + i)));
  if (i < n)
    VN(store_part)(y + i, VFMA(va, VN(load_part)(x + i, n - i), VN(load_part)(y + i, n - i)),
                   n - i);
}

/* y[d] = sum_j w[j] X[j ld + d] for d < n (plus y's own value when add), j < m in
   order: a block of 4W columns keeps its sums in registers across all m rows of X. */
VATTR static void VN(wsum)(float *y, const float *w, const float *X, int64_t ld, int64_t m,
                           int64_t n, int add) {
  int64_t d = 0;
  for (; d + 4 * W <= n; d += 4 * W) {
    V a0 = add ? VLOAD(y + d) : VSET1(0.f), a1 = add ? VLOAD(y + d + W) : VSET1(0.f);
    V a2 = add ? VLOAD(y + d + 2 * W) : VSET1(0.f);
    V a3 = add ? VLOAD(y + d + 3 * W) : VSET1(0.f);
    for (int64_t j = 0; j < m; j++) {
      const float *x = X + j * ld + d;
      V wj = VSET1(w[j]);
      a0 = VFMA(wj, VLOAD(x), a0);
      a1 = VFMA(wj, VLOAD(x + W), a1);
      a2 = VFMA(wj, VLOAD(x + 2 * W), a2);
      a3 = VFMA(wj, VLOAD(x + 3 * W), a3);
    }
    VSTORE(y + d, a0);
    VSTORE(y + d + W, a1);
    VSTORE(y + d + 2 * W, a2);
    VSTORE(y + d + 3 * W, a3);
  }
  for (; d + W <= n; d += W) {
    V a = add ? VLOAD(y + d) : VSET1(0.f);
    for (int64_t j = 0; j < m; j++) a = VFMA(VSET1(w[j]), VLOAD(X + j * ld + d), a);
    VSTORE(y + d, a);
  }
  if (d < n) {
    V a = add ? VN(load_part)(y + d, n - d) : VSET1(0.f);
    for (int64_t j = 0; j < m; j++)
      a = VFMA(VSET1(w[j]), VN(load_part)(X + j * ld + d, n - d), a);
    VN(store_part)(y + d, a, n - d);
  }
}

VATTR static float VN(max)(const float *x, int64_t n) {
  V m = VSET1(x[0]);
  int64_t i = 0;
  for (; i + W <= n; i += W) m = VMAX(VLOAD(x + i), m);
  float r = VHMAX(m);
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

/* exp(x) for x <= 88 (vec.h): x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6
   polynomial, scaled by 2^n; below -87.3 (where 2^n would leave the normal range) 0. */
VATTR static inline V VN(exp)(V x) {
  const V lo = VSET1(-87.3f), hi = VSET1(88.0f);
  V xc = VMIN(hi, VMAX(lo, x));
  V n = VROUND(VMUL(xc, VSET1(1.44269504088896341f)));
  V r = VFMA(n, VSET1(-0.693359375f), xc);
  r = VFMA(n, VSET1(2.12194440e-4f), r);
  V p = VSET1(1.9875691500e-4f);
  p = VFMA(p, r, VSET1(1.3981999507e-3f));
  p = VFMA(p, r, VSET1(8.3334519073e-3f));
  p = VFMA(p, r, VSET1(4.1665795894e-2f));
  p = VFMA(p, r, VSET1(1.6666665459e-1f));
  p = VFMA(p, r, VSET1(5.0000001201e-1f));
  p = VFMA(p, VMUL(r, r), VADD(r, VSET1(1.f)));
  V e = VMUL(p, VPOW2(n));
  return VLTSEL(x, lo, VSET1(0.f), e);
}

VATTR static double VN(exp_sum)(const float *x, float shift, float *y, int64_t n) {
  V sh = VSET1(shift);
  double s = 0;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V e = VN(exp)(VSUB(VLOAD(x + i), sh));
    if (y) VSTORE(y + i, e);
    s += VHSUMD(e);
  }
  if (i < n) {
    V e = VN(keep)(VN(exp)(VSUB(VN(load_part)(x + i, n - i), sh)), n - i);
    if (y) VN(store_part)(y + i, e, n - i);
    s += VHSUMD(e);
  }
  return s;
}

VATTR static void VN(exp_scale)(const float *x, float shift, float scale, float *y,
                                 int64_t n) {
  V sh = VSET1(shift), sc = VSET1(scale);
  int64_t i = 0;
  for (; i + W <= n; i += W) VSTORE(y + i, VMUL(VN(exp)(VSUB(VLOAD(x + i), sh)), sc));
  if (i < n)
    VN(store_part)(y + i, VMUL(VN(exp)(VSUB(VN(load_part)(x + i, n - i), sh)), sc), n - i);
}

#define VEC_GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define VEC_GELU_A 0.044715f

/* s = sigmoid(2u) = 1 / (1 + exp(-2u)), u = c (x + a x^3): 0.5 (1 + tanh u) = s. The
   exponent is clamped at 88, where s is 0 to float precision anyway. */
VATTR static inline V VN(gelu_s)(V x) {
  V x2 = VMUL(x, x);
  V u = VMUL(VMUL(x, VSET1(VEC_GELU_C)), VFMA(x2, VSET1(VEC_GELU_A), VSET1(1.f)));
  V e = VN(exp)(VMIN(VSET1(88.0f), VMUL(u, VSET1(-2.f))));
  return VDIV(VSET1(1.f), VADD(VSET1(1.f), e));
}

VATTR static inline V VN(gelu1)(V x) { return VMUL(x, VN(gelu_s)(x)); }

/* gelu'(x) = s + 2 x s (1 - s) c (1 + 3 a x^2), with 1 - tanh^2 u = 4 s (1 - s). */
VATTR static inline V VN(dgelu1)(V x, V g) {
  V s = VN(gelu_s)(x);
  V x2 = VMUL(x, x);
  V du = VMUL(VSET1(2.f * VEC_GELU_C), VFMA(x2, VSET1(3.f * VEC_GELU_A), VSET1(1.f)));
  V t = VMUL(VMUL(x, du), VMUL(s, VSUB(VSET1(1.f), s)));
  return VMUL(g, VADD(s, t));
}

VATTR static void VN(gelu)(const float *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) VSTORE(y + i, VN(gelu1)(VLOAD(x + i)));
  if (i < n) VN(store_part)(y + i, VN(gelu1)(VN(load_part)(x + i, n - i)), n - i);
}

VATTR static void VN(gelu_bwd)(const float *x, const float *g, float *d, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) VSTORE(d + i, VN(dgelu1)(VLOAD(x + i), VLOAD(g + i)));
  if (i < n)
    VN(store_part)(d + i, VN(dgelu1)(VN(load_part)(x + i, n - i), VN(load_part)(g + i, n - i)),
                   n - i);
}

/* AdamW, op for op as optim.c's scalar form (no fused multiply-add, so each element gets
   exactly the scalar's bits: mul, add, sqrt and div are correctly rounded either way). */
VATTR static inline void VN(adamw1)(const rg_vec_adam *c, float *w, const float *g, float *m,
                                    float *v, int64_t n) {
  V gv = n == W ? VLOAD(g) : VN(load_part)(g, n);
  V mv = n == W ? VLOAD(m) : VN(load_part)(m, n);
  V vv = n == W ? VLOAD(v) : VN(load_part)(v, n);
  V wv = n == W ? VLOAD(w) : VN(load_part)(w, n);
  mv = VADD(mv, VMUL(VSET1(c->omb1), VSUB(gv, mv)));
  vv = VADD(VMUL(vv, VSET1(c->b2)), VMUL(VSET1(c->omb2), VMUL(gv, gv)));
  V den = VADD(VDIV(VSQRT(vv), VSET1(c->bc2_sqrt)), VSET1(c->eps));
  wv = VADD(VMUL(wv, VSET1(c->decay)), VMUL(VSET1(-c->step_size), VDIV(mv, den)));
  if (n == W) {
    VSTORE(m, mv), VSTORE(v, vv), VSTORE(w, wv);
  } else {
    VN(store_part)(m, mv, n), VN(store_part)(v, vv, n), VN(store_part)(w, wv, n);
  }
}

VATTR static void VN(adamw)(const rg_vec_adam *c, float *w, const float *g, float *m, float *v,
                            int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) VN(adamw1)(c, w + i, g + i, m + i, v + i, W);
  if (i < n) VN(adamw1)(c, w + i, g + i, m + i, v + i, n - i);
}

#undef VEC_GELU_C
#undef VEC_GELU_A

/* ---- the norms' rows -------------------------------------------------------------------
   A row's sums: each block of 4 vectors is summed lanewise in float (a few roundings of
   its own terms' magnitude, as the float products already carry), and the blocks in
   double lanes; the last partial block a vector at a time, all in an order fixed by n. */

VATTR static double VN(sum)(const float *x, int64_t n) {
  VD a0 = VDZERO, a1 = VDZERO;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    V s = VADD(VADD(VLOAD(x + i), VLOAD(x + i + W)),
               VADD(VLOAD(x + i + 2 * W), VLOAD(x + i + 3 * W)));
    VDACC(a0, a1, s);
  }
  for (; i + W <= n; i += W) VDACC(a0, a1, VLOAD(x + i));
  if (i < n) VDACC(a0, a1, VN(load_part)(x + i, n - i));
  return VDHSUM(a0, a1);
}

/* (x - m)^2 for k <= W elements at x (0 in the lanes past k). */
VATTR static inline V VN(sq)(const float *x, V m, int64_t k) {
  V d = VSUB(k == W ? VLOAD(x) : VN(load_part)(x, k), m);
  return k == W ? VMUL(d, d) : VN(keep)(VMUL(d, d), k);
}

VATTR static double VN(sqdev)(const float *x, float mu, int64_t n) {
  V m = VSET1(mu);
  VD a0 = VDZERO, a1 = VDZERO;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) {
    V s = VADD(VADD(VN(sq)(x + i, m, W), VN(sq)(x + i + W, m, W)),
               VADD(VN(sq)(x + i + 2 * W, m, W), VN(sq)(x + i + 3 * W, m, W)));
    VDACC(a0, a1, s);
  }
  for (; i + W <= n; i += W) VDACC(a0, a1, VN(sq)(x + i, m, W));
  if (i < n) VDACC(a0, a1, VN(sq)(x + i, m, n - i));
  return VDHSUM(a0, a1);
}

/* One vector of norm's output. */
VATTR static inline V VN(norm1)(V x, V m, V r, const float *gamma, const float *beta,
                                int64_t i, int64_t k) {
  V v = VMUL(VSUB(x, m), r);
  if (gamma) v = VMUL(v, k == W ? VLOAD(gamma + i) : VN(load_part)(gamma + i, k));
  if (beta) v = VADD(v, k == W ? VLOAD(beta + i) : VN(load_part)(beta + i, k));
  return v;
}

VATTR static void VN(norm)(const float *x, float mu, float rstd, const float *gamma,
                           const float *beta, float *y, int64_t n) {
  V m = VSET1(mu), r = VSET1(rstd);
  int64_t i = 0;
  for (; i + W <= n; i += W) VSTORE(y + i, VN(norm1)(VLOAD(x + i), m, r, gamma, beta, i, W));
  if (i < n)
    VN(store_part)(y + i, VN(norm1)(VN(load_part)(x + i, n - i), m, r, gamma, beta, i, n - i),
                   n - i);
}

/* dxh = g gamma (g without gamma) for the k <= W elements at i. */
VATTR static inline V VN(dxh)(const float *g, const float *gamma, int64_t i, int64_t k) {
  V gv = k == W ? VLOAD(g + i) : VN(load_part)(g + i, k);
  if (!gamma) return gv;
  return VMUL(gv, k == W ? VLOAD(gamma + i) : VN(load_part)(gamma + i, k));
}

VATTR static void VN(norm_dx)(const float *x, const float *gamma, const float *g,
                              const float *add, float mu, float rstd, int centre, float *dx,
                              int64_t n) {
  V m = VSET1(mu), r = VSET1(rstd);
  VD s0 = VDZERO, s1 = VDZERO, t0 = VDZERO, t1 = VDZERO;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W) { /* blocks of 4 vectors, as sum's */
    V sd = VSET1(0.f), sp = VSET1(0.f);
    for (int u = 0; u < 4; u++) {
      V d = VN(dxh)(g, gamma, i + u * W, W), xh = VMUL(VSUB(VLOAD(x + i + u * W), m), r);
      sd = VADD(sd, d);
      sp = VADD(sp, VMUL(d, xh));
    }
    VDACC(s0, s1, sd);
    VDACC(t0, t1, sp);
  }
  for (; i + W <= n; i += W) {
    V d = VN(dxh)(g, gamma, i, W), xh = VMUL(VSUB(VLOAD(x + i), m), r);
    VDACC(s0, s1, d);
    VDACC(t0, t1, VMUL(d, xh));
  }
  if (i < n) { /* d is 0 in the padding; keep its products 0 whatever xh is there */
    V d = VN(dxh)(g, gamma, i, n - i), xh = VMUL(VSUB(VN(load_part)(x + i, n - i), m), r);
    VDACC(s0, s1, d);
    VDACC(t0, t1, VN(keep)(VMUL(d, xh), n - i));
  }
  V a = VSET1(centre ? (float)(VDHSUM(s0, s1) / (double)n) : 0.f);
  V nb = VSET1((float)(-VDHSUM(t0, t1) / (double)n));
  for (i = 0; i < n; i += W) {
    int64_t k = n - i < W ? n - i : W;
    V xh = VMUL(VSUB(k == W ? VLOAD(x + i) : VN(load_part)(x + i, k), m), r);
    V v = VMUL(r, VFMA(xh, nb, VSUB(VN(dxh)(g, gamma, i, k), a)));
    if (add) v = VADD(v, k == W ? VLOAD(add + i) : VN(load_part)(add + i, k));
    if (k == W) VSTORE(dx + i, v);
    else VN(store_part)(dx + i, v, k);
  }
}

VATTR static void VN(norm_dparam)(const float *x, const float *g, int64_t ld,
                                  const float *mu, const float *rstd, int64_t rows, double *ag,
                                  double *ab, int64_t n) {
  for (int64_t i = 0; i < n; i += W) {
    int64_t k = n - i < W ? n - i : W;
    V sg = VSET1(0.f), sb = VSET1(0.f);
    for (int64_t r = 0; r < rows; r++) {
      const float *xr = x + r * ld + i, *gr = g + r * ld + i;
      V gv = k == W ? VLOAD(gr) : VN(load_part)(gr, k);
      if (ag) {
        V xh = VMUL(VSUB(k == W ? VLOAD(xr) : VN(load_part)(xr, k), VSET1(mu[r])),
                    VSET1(rstd[r]));
        sg = VADD(sg, VMUL(gv, xh));
      }
      sb = VADD(sb, gv);
    }
    if (ag) VDADDTO(ag + i, sg);
    if (ab) VDADDTO(ab + i, sb);
  }
}

VATTR static void VN(relu)(const float *x, float *y, int64_t n) {
  V z = VSET1(0.f);
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V v = VLOAD(x + i);
    VSTORE(y + i, VLTSEL(v, z, z, v));
  }
  if (i < n) {
    V v = VN(load_part)(x + i, n - i);
    VN(store_part)(y + i, VLTSEL(v, z, z, v), n - i);
  }
}

VATTR static void VN(relu_bwd)(const float *u, const float *g, float *d, int64_t n) {
  V z = VSET1(0.f);
  int64_t i = 0;
  for (; i + W <= n; i += W) VSTORE(d + i, VLTSEL(z, VLOAD(u + i), VLOAD(g + i), z));
  if (i < n)
    VN(store_part)(d + i,
                   VLTSEL(z, VN(load_part)(u + i, n - i), VN(load_part)(g + i, n - i), z),
                   n - i);
}

#ifdef VMM_ROWS
/* mm one row of C at a time, as y += a x over its columns: the includer's vectors are
   single floats, and the compiler vectorises these column loops better than it does
   the register tile below. The same sums in the same order. */
VATTR static void VN(mm)(float *C, int64_t ldc, const float *A, int64_t ar, int64_t ak,
                         const float *B, int64_t ldb, int64_t m, int64_t n, int64_t k,
                         int add) {
  for (int64_t i = 0; i < m; i++) {
    float *c = C + i * ldc;
    if (!add)
      for (int64_t j = 0; j < n; j++) c[j] = 0.f;
    for (int64_t l = 0; l < k; l++) {
      float a = A[i * ar + l * ak];
      const float *b = B + l * ldb;
      for (int64_t j = 0; j < n; j++) c[j] = VFMA(a, b[j], c[j]);
    }
  }
}
#else
/* mm's register tiles: nv vectors of W columns (nv <= VMM_NV, at most 4) by as many rows
   as VMM_ACC accumulators allow (at most 8), kept in registers across the whole k loop:
   4 x 4 vectors, 5 x 3, 8 x 2 and 8 x 1 with the default 16 (an includer with fewer
   vector registers defines smaller VMM_NV and VMM_ACC). */
#ifndef VMM_NV
#define VMM_NV 4
#endif
#ifndef VMM_ACC
#define VMM_ACC 16
#endif

static inline int VN(mm_rows)(int nv) { return VMM_ACC / nv < 8 ? VMM_ACC / nv : 8; }

/* Rows [0, mr) by columns [0, nv W) of C; mr and nv are constants wherever it is inlined,
   so the loops over them unroll and acc stays in registers. */
VATTR static inline __attribute__((always_inline)) void
VN(mm_tile)(float *C, int64_t ldc, const float *A, int64_t ar, int64_t ak, const float *B,
            int64_t ldb, int64_t k, int add, int mr, int nv) {
  V acc[8][4];
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < nv; c++) acc[r][c] = add ? VLOAD(C + r * ldc + c * W) : VSET1(0.f);
  for (int64_t l = 0; l < k; l++) {
    const float *b = B + l * ldb, *a = A + l * ak;
    V bv[4];
    for (int c = 0; c < nv; c++) bv[c] = VLOAD(b + c * W);
    for (int r = 0; r < mr; r++) {
      V av = VSET1(a[r * ar]);
      for (int c = 0; c < nv; c++) acc[r][c] = VFMA(av, bv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < nv; c++) VSTORE(C + r * ldc + c * W, acc[r][c]);
}

/* Rows [0, mr) by columns [0, n), n < W: one zero-padded vector, the same arithmetic. */
VATTR static inline __attribute__((always_inline)) void
VN(mm_part_tile)(float *C, int64_t ldc, const float *A, int64_t ar, int64_t ak, const float *B,
                 int64_t ldb, int64_t k, int add, int mr, int64_t n) {
  V acc[8];
  for (int r = 0; r < mr; r++) acc[r] = add ? VN(load_part)(C + r * ldc, n) : VSET1(0.f);
  for (int64_t l = 0; l < k; l++) {
    V bv = VN(load_part)(B + l * ldb, n);
    for (int r = 0; r < mr; r++) acc[r] = VFMA(VSET1(A[r * ar + l * ak]), bv, acc[r]);
  }
  for (int r = 0; r < mr; r++) VN(store_part)(C + r * ldc, acc[r], n);
}

/* One tile with mr and nv made constants (nv = 0: the zero-padded vector of n columns). */
VATTR static void VN(mm_one)(float *C, int64_t ldc, const float *A, int64_t ar, int64_t ak,
                             const float *B, int64_t ldb, int64_t k, int add, int mr, int nv,
                             int64_t n) {
  switch (mr * 8 + nv) {
#define VMM_T(r, c)                                                                        \
  case r * 8 + c: VN(mm_tile)(C, ldc, A, ar, ak, B, ldb, k, add, r, c); break;
#define VMM_P(r)                                                                           \
  case r * 8: VN(mm_part_tile)(C, ldc, A, ar, ak, B, ldb, k, add, r, n); break;
    VMM_T(1, 1) VMM_T(1, 2) VMM_T(1, 3) VMM_T(1, 4)
    VMM_T(2, 1) VMM_T(2, 2) VMM_T(2, 3) VMM_T(2, 4)
    VMM_T(3, 1) VMM_T(3, 2) VMM_T(3, 3) VMM_T(3, 4)
    VMM_T(4, 1) VMM_T(4, 2) VMM_T(4, 3) VMM_T(4, 4)
    VMM_T(5, 1) VMM_T(5, 2) VMM_T(5, 3)
    VMM_T(6, 1) VMM_T(6, 2) VMM_T(7, 1) VMM_T(7, 2) VMM_T(8, 1) VMM_T(8, 2)
    VMM_P(1) VMM_P(2) VMM_P(3) VMM_P(4) VMM_P(5) VMM_P(6) VMM_P(7) VMM_P(8)
#undef VMM_T
#undef VMM_P
  default: break;
  }
}

/* Column blocks of up to VMM_NV vectors (then the zero-padded one), each down the rows
   in tiles as tall as its width allows. */
VATTR static void VN(mm)(float *C, int64_t ldc, const float *A, int64_t ar, int64_t ak,
                         const float *B, int64_t ldb, int64_t m, int64_t n, int64_t k,
                         int add) {
  for (int64_t j = 0; j < n;) {
    int64_t left = (n - j) / W;
    int nv = left < VMM_NV ? (int)left : VMM_NV, rows = VN(mm_rows)(nv ? nv : 1);
    for (int64_t i = 0; i < m; i += rows) {
      int mr = m - i < rows ? (int)(m - i) : rows;
      VN(mm_one)(C + i * ldc + j, ldc, A + i * ar, ar, ak, B + j, ldb, k, add, mr, nv, n - j);
    }
    j += nv ? (int64_t)nv * W : n - j;
  }
}
#endif

#ifdef VEC_TR8
/* An 8 x 8 block transposed in registers: pairs of rows interleaved, then pairs of
   pairs, then the 128-bit halves exchanged. */
VATTR static inline void VN(tr8)(float *y, int64_t ldy, const float *x, int64_t ldx) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(x + i * ldx);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int j = 0; j < 4; j++) {
    _mm256_storeu_ps(y + j * ldy, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
    _mm256_storeu_ps(y + (j + 4) * ldy, _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
  }
}
#endif

VATTR static void VN(transpose)(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t m,
                                int64_t n) {
  int64_t i = 0;
#ifdef VEC_TR8
  for (; i + 8 <= m; i += 8) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) VN(tr8)(y + j * ldy + i, ldy, x + i * ldx + j, ldx);
    for (; j < n; j++)
      for (int64_t r = 0; r < 8; r++) y[j * ldy + i + r] = x[(i + r) * ldx + j];
  }
#endif
  for (; i < m; i++)
    for (int64_t j = 0; j < n; j++) y[j * ldy + i] = x[i * ldx + j];
}

/* The table's entries, for the includer's rg_vec_ops initialiser. */
#define VEC_TABLE(nm)                                                                      \
  {                                                                                        \
    nm, VN(dot), VN(axpy), VN(wsum), VN(max), VN(exp_sum), VN(exp_scale), VN(gelu),        \
        VN(gelu_bwd), VN(adamw), VN(sum), VN(sqdev), VN(norm), VN(norm_dx),                \
        VN(norm_dparam), VN(relu), VN(relu_bwd), VN(mm), VN(transpose)                     \
  }
