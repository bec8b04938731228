/*
 * test_vec.c - the CPU's vectorised row functions (src/cpu/vec.h), every table this CPU
 * can run (portable always; AVX2 and AVX-512 where the CPU has them), against double-
 * precision loops.
 *
 * Lengths 0 to 70 and 200 cover empty rows, tails shorter than a vector, one and several
 * vectors and the 4-vector blocks. Tolerances: a float sum of n products in any order is
 * within n 2^-24 of sum |a b| (2e-7 (n + 2) bounds it with room); exp and the GELU forms
 * within 8e-7 relative (libm's expf is within about 1e-7). Special values: exp of -inf
 * and of arguments below -87.3 is 0, NaN stays NaN, and GELU at +-30 is x and 0. The
 * elementwise functions must give an element the same bits at any position in a row (a
 * tail element as in a full vector), so must mm at any position in its product (its
 * tolerance as dot's, per element), and rg_cpu_vec must return one of the tables and
 * the same one every call. check_norm_rows says what the norms' rows and ReLU must do.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/vec.h"

#define NMAX 256

/* The row lengths every function is run at (lens[0] is 0). */
static const int64_t lens[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63,
                               64, 65, 70, 200};
#define NLENS (sizeof lens / sizeof *lens)

static float frand(uint32_t *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 32768.f - 1.f; /* [-1, 1) */
}

static double gelu_ref(double x) {
  return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double dgelu_ref(double x) {
  double c = 0.7978845608028654, a = 0.044715, t = tanh(c * (x + a * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x);
}

static bool close_rel(double got, double want, double tol) {
  return fabs(got - want) <= tol * fmax(fabs(want), 1e-30) + 1e-37;
}

/* The norms' rows and ReLU over the same lengths: sums against double loops (blocks of 4
   vectors summed in float, then in double: a few roundings of sum |x|, 4e-7), norm and
   norm_dx against the double formulas with the float mu and rstd they get (a few float
   roundings of the terms' magnitudes, the means' included: 2e-6), with and without
   gamma, beta, the centring and the added gradient; norm_dparam adds 3 rows' g and
   g xhat (summed in float: a few roundings, 4e-7). None writes past its row. ReLU and its backward give
   the scalar rule's bits, NaN, -0 and infinities included. */
static void check_norm_rows(const rg_vec_ops *v) {
  static float x[NMAX + 1], g[NMAX + 1], ga[NMAX], be[NMAX], ad[NMAX], y[NMAX + 1];
  static double ag[NMAX + 16], ab[NMAX + 16], ag0[NMAX + 16], ab0[NMAX + 16];
  static float P[3 * (NMAX + 3)], Q[3 * (NMAX + 3)];
  uint32_t seed = 11;
  for (size_t li = 1; li < NLENS; li++) { /* a norm's row has at least one element */
    int64_t n = lens[li];
    double sx = 0, sabs = 0;
    for (int64_t i = 0; i < n; i++) {
      x[i] = frand(&seed) * 3.f + 0.5f, g[i] = frand(&seed), ga[i] = 1.f + frand(&seed) / 2;
      be[i] = frand(&seed), ad[i] = frand(&seed);
      sx += x[i], sabs += fabs(x[i]);
    }
    x[n] = 1e30f, g[n] = 1e30f; /* past the row: must not be read into a sum */
    double got = v->sum(x, n);
    CHECK(fabs(got - sx) <= 4e-7 * sabs, "%s sum n=%lld: %.17g, want %.17g", v->name,
          (long long)n, got, sx);
    float mu = (float)(sx / (double)n);
    double sq = 0;
    for (int64_t i = 0; i < n; i++) sq += ((double)x[i] - mu) * ((double)x[i] - mu);
    got = v->sqdev(x, mu, n);
    CHECK(fabs(got - sq) <= 4e-7 * sq + 1e-30, "%s sqdev n=%lld: %.17g, want %.17g", v->name,
          (long long)n, got, sq);
    float rstd = (float)(1 / sqrt(sq / (double)n + 1e-5));
    for (int aff = 0; aff < 4; aff++) {
      const float *gp = aff & 1 ? ga : NULL, *bp = aff & 2 ? be : NULL;
      y[n] = 7.f;
      v->norm(x, mu, rstd, gp, bp, y, n);
      for (int64_t i = 0; i < n; i++) {
        double xh = ((double)x[i] - mu) * rstd, t = xh * (gp ? gp[i] : 1);
        double want = t + (bp ? bp[i] : 0);
        CHECK(fabs(y[i] - want) <= 2e-6 * (fabs(t) + fabs(bp ? bp[i] : 0)) + 1e-30,
              "%s norm n=%lld gamma %d beta %d at %lld: %g, want %g", v->name, (long long)n,
              !!gp, !!bp, (long long)i, y[i], want);
      }
      CHECK(y[n] == 7.f, "%s norm n=%lld wrote past the row", v->name, (long long)n);
    }
    for (int form = 0; form < 8; form++) {
      const float *gp = form & 1 ? ga : NULL, *add = form & 2 ? ad : NULL;
      int centre = form >> 2;
      double s1 = 0, s2 = 0, m1 = 0, m2 = 0;
      for (int64_t i = 0; i < n; i++) {
        double xh = ((double)x[i] - mu) * rstd, dxh = (double)g[i] * (gp ? gp[i] : 1);
        s1 += dxh, s2 += dxh * xh;
        m1 += fabs(dxh) / (double)n, m2 += fabs(dxh * xh) / (double)n;
      }
      double a = centre ? s1 / (double)n : 0, b = s2 / (double)n;
      y[n] = 7.f;
      v->norm_dx(x, gp, g, add, mu, rstd, centre, y, n);
      for (int64_t i = 0; i < n; i++) {
        double xh = ((double)x[i] - mu) * rstd, dxh = (double)g[i] * (gp ? gp[i] : 1);
        double want = rstd * (dxh - a - xh * b) + (add ? add[i] : 0);
        double mag = rstd * (fabs(dxh) + m1 + fabs(xh) * m2) + (add ? fabs(add[i]) : 0);
        CHECK(fabs(y[i] - want) <= 2e-6 * mag + 1e-30,
              "%s norm_dx n=%lld gamma %d add %d centre %d at %lld: %g, want %g", v->name,
              (long long)n, !!gp, !!add, centre, (long long)i, y[i], want);
      }
      CHECK(y[n] == 7.f, "%s norm_dx n=%lld wrote past the row", v->name, (long long)n);
    }
    /* norm_dparam over 3 rows of leading dimension n + 3, each with its mu and rstd */
    int64_t ld = n + 3;
    float mus[3] = {mu, -0.25f, 1.5f}, rs[3] = {rstd, 2.f, 0.75f};
    for (int64_t i = 0; i < 3 * ld; i++) P[i] = frand(&seed) * 2, Q[i] = frand(&seed);
    for (int which = 1; which < 4; which++) {
      for (int64_t i = 0; i < n; i++) ag0[i] = ag[i] = frand(&seed), ab0[i] = ab[i] = frand(&seed);
      v->norm_dparam(P, Q, ld, mus, rs, 3, which & 1 ? ag : NULL, which & 2 ? ab : NULL, n);
      for (int64_t i = 0; i < n; i++) {
        double gx = 0, gxa = 0, gs = 0, gsa = 0;
        for (int r = 0; r < 3; r++) {
          double t = (double)Q[r * ld + i] * (((double)P[r * ld + i] - mus[r]) * rs[r]);
          gx += t, gxa += fabs(t), gs += Q[r * ld + i], gsa += fabs(Q[r * ld + i]);
        }
        if (which & 1)
          CHECK(fabs(ag[i] - (ag0[i] + gx)) <= 4e-7 * gxa + 1e-15,
                "%s norm_dparam n=%lld dgamma at %lld: %g, want %g", v->name, (long long)n,
                (long long)i, ag[i], ag0[i] + gx);
        else
          CHECK(ag[i] == ag0[i], "%s norm_dparam n=%lld changed dgamma", v->name, (long long)n);
        if (which & 2)
          CHECK(fabs(ab[i] - (ab0[i] + gs)) <= 4e-7 * gsa + 1e-15,
                "%s norm_dparam n=%lld dbeta at %lld", v->name, (long long)n, (long long)i);
        else
          CHECK(ab[i] == ab0[i], "%s norm_dparam n=%lld changed dbeta", v->name, (long long)n);
      }
    }
  }
  /* ReLU: the scalar rule's bits, at every position of a row of 70 (tails and vectors) */
  float u[70], gg[70], r[71], d[71];
  for (int i = 0; i < 70; i++) u[i] = frand(&seed) * 2, gg[i] = frand(&seed) * 5;
  u[3] = NAN, u[4] = -0.f, u[5] = 0.f, u[6] = INFINITY, u[7] = -INFINITY, u[66] = NAN;
  gg[8] = INFINITY, gg[9] = NAN;
  for (int n = 0; n <= 70; n++) {
    r[n] = d[n] = 7.f;
    v->relu(u, r, n);
    v->relu_bwd(u, gg, d, n);
    for (int i = 0; i < n; i++) {
      float wr = u[i] < 0.f ? 0.f : u[i], wd = u[i] > 0.f ? gg[i] : 0.f;
      CHECK(!memcmp(&r[i], &wr, 4) && !memcmp(&d[i], &wd, 4),
            "%s relu n=%d at %d (x %g, g %g): %g %g, want %g %g", v->name, n, i, u[i], gg[i],
            r[i], d[i], wr, wd);
    }
    CHECK(r[n] == 7.f && d[n] == 7.f, "%s relu n=%d wrote past the row", v->name, n);
  }
}

static void check_table(const rg_vec_ops *v) {
  static float a[NMAX], b[NMAX], y[NMAX], y0[NMAX], w[NMAX], X[NMAX * 8];
  uint32_t seed = 7;
  for (size_t li = 0; li < NLENS; li++) {
    int64_t n = lens[li];
    double sabs = 0, sdot = 0;
    for (int64_t i = 0; i < n; i++) {
      a[i] = frand(&seed) * 4.f;
      b[i] = frand(&seed) * 4.f;
      y0[i] = frand(&seed);
      sdot += (double)a[i] * b[i];
      sabs += fabs((double)a[i] * b[i]);
    }
    float d = v->dot(a, b, n);
    CHECK(fabs(d - sdot) <= 2e-7 * (double)(n + 2) * (sabs + 1e-30), "%s dot n=%lld: %g, want %g",
          v->name, (long long)n, d, sdot);
    memcpy(y, y0, sizeof y);
    v->axpy(y, 0.75f, a, n);
    for (int64_t i = 0; i < n; i++)
      CHECK(fabs(y[i] - (y0[i] + 0.75 * a[i])) <= 1e-6 * (fabs(y0[i]) + fabs(a[i])),
            "%s axpy n=%lld at %lld", v->name, (long long)n, (long long)i);
    CHECK(y[n] == y0[n], "%s axpy n=%lld wrote past the row", v->name, (long long)n);
    if (n) {
      double m = a[0];
      for (int64_t i = 1; i < n; i++) m = a[i] > m ? a[i] : m;
      CHECK(v->max(a, n) == (float)m, "%s max n=%lld", v->name, (long long)n);
    }
    /* wsum over m = 5 rows of X with leading dimension n + 3, into y and onto y */
    int64_t m = 5, ld = n + 3;
    for (int64_t i = 0; i < m * ld; i++) X[i] = frand(&seed);
    for (int64_t j = 0; j < m; j++) w[j] = frand(&seed);
    for (int add = 0; add < 2; add++) {
      memcpy(y, y0, sizeof y);
      v->wsum(y, w, X, ld, m, n, add);
      for (int64_t i = 0; i < n; i++) {
        double want = add ? y0[i] : 0, s = add ? fabs(y0[i]) : 0;
        for (int64_t j = 0; j < m; j++) want += (double)w[j] * X[j * ld + i], s += fabs(w[j] * X[j * ld + i]);
        CHECK(fabs(y[i] - want) <= 2e-7 * (double)(m + 2) * (s + 1e-30),
              "%s wsum n=%lld add=%d at %lld: %g, want %g", v->name, (long long)n, add,
              (long long)i, y[i], want);
      }
      CHECK(y[n] == y0[n], "%s wsum n=%lld wrote past the row", v->name, (long long)n);
    }
    /* exp over [-90, 0] (and y == x in place) */
    for (int64_t i = 0; i < n; i++) a[i] = -90.f * (frand(&seed) + 1.f) / 2.f;
    double se = 0;
    for (int64_t i = 0; i < n; i++) se += exp((double)a[i] - 1.5);
    double s = v->exp_sum(a, 1.5f, y, n);
    CHECK(close_rel(s, se, 1e-6), "%s exp_sum n=%lld: %g, want %g", v->name, (long long)n, s,
          se);
    for (int64_t i = 0; i < n; i++) {
      double want = a[i] - 1.5 < -87.3 ? 0 : exp((double)a[i] - 1.5);
      CHECK(close_rel(y[i], want, 8e-7) || (a[i] - 1.5 < -87 && y[i] < 2e-38),
            "%s exp_sum n=%lld at %lld: exp(%g) = %g, want %g", v->name, (long long)n,
            (long long)i, a[i] - 1.5, y[i], want);
    }
    v->exp_scale(a, 0.5f, 3.f, y, n);
    for (int64_t i = 0; i < n; i++) {
      double want = a[i] - 0.5 < -87.3 ? 0 : 3 * exp((double)a[i] - 0.5);
      CHECK(close_rel(y[i], want, 8e-7) || (a[i] - 0.5 < -87 && y[i] < 6e-38),
            "%s exp_scale n=%lld at %lld", v->name, (long long)n, (long long)i);
    }
    /* GELU over [-8, 8] */
    for (int64_t i = 0; i < n; i++) a[i] = frand(&seed) * 8.f, b[i] = frand(&seed);
    v->gelu(a, y, n);
    for (int64_t i = 0; i < n; i++)
      CHECK(fabs(y[i] - gelu_ref(a[i])) <= 8e-7 * fabs(a[i]) + 1e-30,
            "%s gelu(%g) = %g, want %g", v->name, a[i], y[i], gelu_ref(a[i]));
    v->gelu_bwd(a, b, y, n);
    for (int64_t i = 0; i < n; i++)
      CHECK(fabs(y[i] - b[i] * dgelu_ref(a[i])) <= 2e-6 * fabs(b[i]) * (1 + fabs(a[i])),
            "%s gelu_bwd(%g) = %g, want %g", v->name, a[i], y[i], b[i] * dgelu_ref(a[i]));
  }
  check_norm_rows(v);
  /* special values, and the same bits for an element in a tail or in a full vector */
  float sp[NMAX], out[NMAX], one[1];
  for (int i = 0; i < NMAX; i++) sp[i] = frand(&seed) * 10.f;
  sp[0] = -INFINITY, sp[1] = NAN, sp[2] = -100.f, sp[3] = 0.f;
  v->exp_sum(sp, 0.f, out, 4);
  CHECK(out[0] == 0.f && out[1] != out[1] && out[2] == 0.f && out[3] == 1.f,
        "%s exp of -inf, NaN, -100, 0: %g %g %g %g", v->name, out[0], out[1], out[2], out[3]);
  sp[0] = 30.f, sp[2] = -30.f;
  v->gelu(sp, out, NMAX);
  CHECK(out[0] == 30.f && out[1] != out[1] && fabsf(out[2]) < 1e-30f,
        "%s gelu of 30, NaN, -30: %g %g %g", v->name, out[0], out[1], out[2]);
  for (int i = 4; i < NMAX; i++) {
    v->gelu(sp + i, one, 1);
    CHECK(memcmp(one, out + i, sizeof one) == 0, "%s gelu at %d: a tail differs", v->name, i);
  }
}

/* mm against double loops: every row count of a tile and past it, column counts of no,
   part of one, one and several vectors (and past the widest tile), k = 0 (C = 0, or C's
   own values when add), A read directly and transposed; nothing outside the m x n block
   of C is written. Then the invariant attention relies on: an element's bits do not
   depend on where it sits in C (its row and column computed alone give the same). */
static void check_mm(const rg_vec_ops *v) {
  enum { MM = 11, NN = 75, KK = 70, LDC = NN + 5 };
  static float A[MM * KK], At[KK * MM], B[KK * NN], C[MM * LDC], C0[MM * LDC], one;
  uint32_t seed = 11;
  for (int i = 0; i < MM * KK; i++) A[i] = frand(&seed) * 2.f;
  for (int i = 0; i < MM; i++)
    for (int l = 0; l < KK; l++) At[l * MM + i] = A[i * KK + l];
  for (int i = 0; i < KK * NN; i++) B[i] = frand(&seed) * 2.f;
  for (int i = 0; i < MM * LDC; i++) C0[i] = frand(&seed);
  static const int64_t ms[] = {1, 2, 3, 4, 5, 8, 11}, ns[] = {0, 1, 5, 16, 17, 32, 33, 48, 64, 75},
                       ks[] = {0, 1, 7, 64, 70};
  for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++)
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
      for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
        for (int add = 0; add < 2; add++)
          for (int tr = 0; tr < 2; tr++) {
            int64_t m = ms[mi], n = ns[ni], k = ks[ki];
            memcpy(C, C0, sizeof C);
            if (tr)
              v->mm(C, LDC, At, 1, MM, B, NN, m, n, k, add);
            else
              v->mm(C, LDC, A, KK, 1, B, NN, m, n, k, add);
            int bad = 0;
            for (int64_t i = 0; i < MM; i++)
              for (int64_t j = 0; j < LDC; j++) {
                float got = C[i * LDC + j];
                if (i >= m || j >= n) {
                  bad += got != C0[i * LDC + j];
                  continue;
                }
                double want = add ? C0[i * LDC + j] : 0, sabs = fabs(want);
                for (int64_t l = 0; l < k; l++) {
                  want += (double)A[i * KK + l] * B[l * NN + j];
                  sabs += fabs((double)A[i * KK + l] * B[l * NN + j]);
                }
                bad += !(fabs(got - want) <= 2e-7 * (double)(k + 2) * (sabs + 1e-30));
              }
            CHECK(!bad, "%s mm m=%lld n=%lld k=%lld add=%d %s: %d elements wrong or written "
                  "outside the block", v->name, (long long)m, (long long)n, (long long)k, add,
                  tr ? "A transposed" : "A direct", bad);
          }
  /* element (i, j) of the full product, computed as a 1 x 1 product */
  v->mm(C, LDC, A, KK, 1, B, NN, MM, NN, KK, 0);
  int moved = 0;
  for (int64_t i = 0; i < MM; i++)
    for (int64_t j = 0; j < NN; j++) {
      v->mm(&one, 1, A + i * KK, KK, 1, B + j, NN, 1, 1, KK, 0);
      moved += memcmp(&one, &C[i * LDC + j], sizeof one) != 0;
    }
  CHECK(!moved, "%s mm: %d elements differ from the same element computed alone", v->name,
        moved);
}

/* transpose: blocks of every size around the 8 x 8 one, copied exactly, nothing written
   outside the transposed block. */
static void check_transpose(const rg_vec_ops *v) {
  enum { M = 27, N = 26, LDX = 31, LDY = 33 };
  static float x[M * LDX], y[N * LDY];
  uint32_t seed = 5;
  for (int i = 0; i < M * LDX; i++) x[i] = frand(&seed);
  static const int64_t sz[] = {0, 1, 7, 8, 9, 16, 17, 26};
  for (size_t mi = 0; mi < sizeof sz / sizeof *sz; mi++)
    for (size_t ni = 0; ni < sizeof sz / sizeof *sz; ni++) {
      int64_t m = sz[mi], n = sz[ni];
      for (int i = 0; i < N * LDY; i++) y[i] = -7.f;
      v->transpose(y, LDY, x, LDX, m, n);
      int bad = 0;
      for (int64_t j = 0; j < N; j++)
        for (int64_t i = 0; i < LDY; i++)
          bad += y[j * LDY + i] != (i < m && j < n ? x[i * LDX + j] : -7.f);
      CHECK(!bad, "%s transpose %lld x %lld: %d elements wrong", v->name, (long long)m,
            (long long)n, bad);
    }
}

int main(void) {
  const rg_vec_ops *tabs[] = {&rg_vec_portable, rg_vec_avx2(), rg_vec_avx512()};
  const char *feat[] = {NULL, "avx2", "avx512f"};
  int ran = 0;
  for (int i = 0; i < 3; i++) {
    if (!tabs[i]) continue;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (i == 1 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) continue;
    if (i == 2 && !__builtin_cpu_supports("avx512f")) continue;
#else
    if (feat[i]) continue;
#endif
    check_table(tabs[i]);
    check_mm(tabs[i]);
    check_transpose(tabs[i]);
    ran++;
  }
  const rg_vec_ops *c = rg_cpu_vec();
  CHECK(c == tabs[0] || c == tabs[1] || c == tabs[2], "rg_cpu_vec returned no table");
  CHECK(rg_cpu_vec() == c, "rg_cpu_vec changed its choice");
  if (!failed())
    printf("test_vec: %d table(s) checked; this process uses %s\n", ran, c ? c->name : "?");
  (void)feat;
  return finish();
}
