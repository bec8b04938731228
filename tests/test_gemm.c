/*
 * test_gemm.c - the CPU GEMMs (src/cpu/cpu.h): rg_cpu_gemm (BLAS when the build found
 * one) and rg_cpu_gemm_builtin, against a naive double-precision loop.
 *
 * C[M,N] = op(A) op(B) (+ C), row-major with leading dimensions. Every case runs all four
 * transpose combinations with accumulate off and on, each with nothing more, a bias, or
 * row sums of op(A) (bit for bit SUM_TO_ACC's), over odd sizes (1x1x1, 17x33x65,
 * 128x64x96, and sizes past the built-in GEMM's blocks: K over 256, M over 96, N over
 * 1024), with leading dimensions equal to and larger than the row length.
 * Padding between rows holds NaN in A and B (reading it would poison a result) and a
 * sentinel in C (writing it is caught). With accumulate off, C starts as NaN (it must
 * not be read). The built-in GEMM must give bit-identical results for 1, 2 and 3 threads
 * of a CPU pool (src/cpu/pool.h) made current for the whole test, as a drain makes it.
 * ctest runs it once per instruction set's kernel (RG_CPU_ISA, src/cpu/gemm.h).
 *
 * Tolerance: each element's error is divided by sum_k |a_ik b_kj| (+ |c_ij| when
 * accumulating), the scale of any float summation; a float sum of K products in any
 * order is within K * 2^-24 of that (about 6e-8 K), and 2e-7 (K + 2) bounds it with room.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/cpu.h"

#define SENTINEL 12345.678f

typedef bool (*gemm_fn)(const rg_cpu_gemm_args *g, int threads);

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) {
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (float)((double)((rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53 * 2 - 1);
}

static double worst_seen;

/* A rows x cols matrix with leading dimension ld: values in [-1,1], NaN in the padding. */
static float *make(int64_t rows, int64_t cols, int64_t ld, float pad) {
  size_t n = (size_t)(rows * ld + 1);
  float *m = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) m[i] = pad;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) m[r * ld + c] = frand();
  return m;
}

/* op(X)[i][k] for X stored row-major with leading dimension ld. */
static double at(const float *X, int t, int64_t ld, int64_t i, int64_t k) {
  return t ? X[k * ld + i] : X[i * ld + k];
}

/* Runs one case and compares; returns the worst normalised error (INFINITY on a padding
   write). out (optional) receives C for the thread-count comparison. */
static double run_case(gemm_fn f, const char *name, int ta, int tb, int64_t M, int64_t N,
                       int64_t K, int64_t pad, int acc, int threads, float **out) {
  /* stored shapes: A is M x K (K x M if ta), B is K x N (N x K if tb) */
  int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  /* BLAS asks for leading dimensions >= 1 even when a matrix is empty */
  int64_t lda = (ac ? ac : 1) + pad, ldb = (bc ? bc : 1) + pad, ldc = (N ? N : 1) + pad;
  float *A = make(ar, ac, lda, NAN), *B = make(br, bc, ldb, NAN);
  float *C = make(M, N, ldc, SENTINEL);
  float *C0 = malloc((size_t)(M * ldc + 1) * sizeof(float));
  /* acc: bit 0 accumulate, bit 1 bias, bit 2 row sums (0 to 5: no op asks for both of
     the last two) */
  float *bias = acc & 2 ? make(1, N, N, NAN) : NULL;
  float *rowsum = acc & 4 ? make(1, M, M + 1, SENTINEL) : NULL, *rowsum0 = NULL;
  if (rowsum) {
    rowsum0 = malloc((size_t)(M + 1) * sizeof(float));
    memcpy(rowsum0, rowsum, (size_t)(M + 1) * sizeof(float));
  }
  if (!(acc & 1))
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = NAN; /* must not be read */
  memcpy(C0, C, (size_t)(M * ldc + 1) * sizeof(float));
  rg_cpu_gemm_args g = {.ta = ta, .tb = tb, .accumulate = acc & 1, .M = M, .N = N, .K = K,
                        .lda = lda, .ldb = ldb, .ldc = ldc, .A = A, .B = B, .C = C,
                        .bias = bias, .rowsum = rowsum};
  CHECK(f(&g, threads),
        "%s %lldx%lldx%lld: reported no memory for its buffers", name, (long long)M,
        (long long)N, (long long)K);
  double worst = 0, tol = 2e-7 * (double)(K + 2);
  int64_t wi = -1, wj = -1;
  double wgot = 0, wwant = 0;
  int pad_ok = 1;
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) {
      double s = 0, scale = 0;
      for (int64_t k = 0; k < K; k++) {
        double p = at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
        s += p;
        scale += fabs(p);
      }
      if (acc & 1) {
        s += C0[i * ldc + j];
        scale += fabs(C0[i * ldc + j]);
      }
      if (bias) {
        s += bias[j];
        scale += fabs(bias[j]);
      }
      double got = C[i * ldc + j], e = fabs(got - s) / (scale > 0 ? scale : 1);
      if (!(e <= worst)) {
        worst = isnan(e) ? INFINITY : e;
        wi = i;
        wj = j;
        wgot = got;
        wwant = s;
      }
    }
    for (int64_t j = N; j < ldc && i * ldc + j < M * ldc; j++)
      if (C[i * ldc + j] != SENTINEL) pad_ok = 0;
  }
  if (C[M * ldc] != SENTINEL) pad_ok = 0; /* one past the last row */
  CHECK(pad_ok, "%s ta=%d tb=%d %lldx%lldx%lld pad %lld acc %d: wrote into C's padding", name,
        ta, tb, (long long)M, (long long)N, (long long)K, (long long)pad, acc);
  CHECK(worst <= tol, "%s ta=%d tb=%d M=%lld N=%lld K=%lld pad %lld acc %d threads %d: C[%lld]"
        "[%lld] = %.9g, want %.9g (normalised error %.3g > %.3g)", name, ta, tb, (long long)M,
        (long long)N, (long long)K, (long long)pad, acc, threads, (long long)wi, (long long)wj,
        wgot, wwant, worst, tol);
  if (worst > worst_seen) worst_seen = worst;
  if (rowsum) { /* bit for bit the sums of SUM_TO_ACC: a double in k order, rounded once */
    int64_t bad = -1;
    for (int64_t i = 0; i < M && bad < 0; i++) {
      double sum = 0;
      for (int64_t k = 0; k < K; k++) sum += (float)at(A, ta, lda, i, k);
      float want = K > 0 ? rowsum0[i] + (float)sum : rowsum0[i];
      if (memcmp(&want, &rowsum[i], sizeof want)) bad = i;
    }
    CHECK(bad < 0 && rowsum[M] == SENTINEL, "%s ta=%d tb=%d %lldx%lldx%lld threads %d: row "
          "sum %lld is not SUM_TO_ACC's (or one past the end was written)", name, ta, tb,
          (long long)M, (long long)N, (long long)K, threads, (long long)bad);
    free(rowsum);
    free(rowsum0);
  }
  free(A);
  free(B);
  free(C0);
  free(bias);
  if (out) *out = C;
  else free(C);
  return pad_ok ? worst : INFINITY;
}

static const int64_t sizes[][3] = {
    {1, 1, 1}, {17, 33, 65}, {128, 64, 96}, {2, 3, 1}, {1, 7, 5}, {9, 1, 4}, {5, 6, 0},
    {65, 65, 129}, {4, 8, 128}, {3, 70, 2}, {13, 33, 600}, {200, 1100, 9}, {97, 40, 257},
};

int main(void) {
  char why[160];
  rg_cpu_pool *pool = rg_cpu_pool_new(3, why, sizeof why);
  CHECK(pool != NULL, "rg_cpu_pool_new(3): %s", why);
  rg_cpu_pool_use(pool);
  gemm_fn fns[2] = {rg_cpu_gemm, rg_cpu_gemm_builtin};
  const char *names[2] = {"rg_cpu_gemm", "rg_cpu_gemm_builtin"};
  for (int fi = 0; fi < 2; fi++) {
    int before = test_failures_;
    worst_seen = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++)
          for (int acc = 0; acc <= 5; acc++)
            for (int64_t pad = 0; pad <= 5; pad += 5)
              run_case(fns[fi], names[fi], ta, tb, sizes[s][0], sizes[s][1], sizes[s][2], pad,
                       acc, 2, NULL);
    printf("%s %-20s worst normalised error %.2e\n", test_failures_ == before ? "PASS" : "FAIL",
           names[fi], worst_seen);
  }

  /* The built-in GEMM's result does not depend on the thread count: 1, 2 and 3 threads
     give bit-identical C, on shapes large enough to run in parallel (M*N*K >= 2^18 with
     several tiles) and on small ones. */
  int before = test_failures_;
  static const int64_t big[][3] = {{128, 64, 96}, {200, 150, 70}, {17, 33, 65}, {130, 130, 20},
                                   {400, 70, 300}, {40, 1100, 30}};
  for (size_t s = 0; s < sizeof big / sizeof big[0]; s++)
    for (int ta = 0; ta <= 1; ta++)
      for (int tb = 0; tb <= 1; tb++)
        for (int acc = 0; acc <= 5; acc++) {
          int64_t M = big[s][0], N = big[s][1], K = big[s][2], ldc = N + 3;
          float *c[3] = {0};
          for (int t = 0; t < 3; t++) {
            rng = 0x243F6A8885A308D3ull + s * 131 + (uint64_t)(ta * 4 + tb * 2 + acc);
            run_case(rg_cpu_gemm_builtin, "rg_cpu_gemm_builtin", ta, tb, M, N, K, 3, acc,
                     t + 1, &c[t]);
          }
          for (int t = 1; t < 3; t++)
            CHECK(!memcmp(c[0], c[t], (size_t)(M * ldc) * sizeof(float)),
                  "rg_cpu_gemm_builtin %lldx%lldx%lld ta=%d tb=%d acc=%d: %d threads differ "
                  "from 1 thread", (long long)M, (long long)N, (long long)K, ta, tb, acc,
                  t + 1);
          for (int t = 0; t < 3; t++) free(c[t]);
        }
  printf("%s %-20s 1, 2 and 3 threads bit-identical\n",
         test_failures_ == before ? "PASS" : "FAIL", "rg_cpu_gemm_builtin");

  /* M or N zero: nothing is touched. */
  float C[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL}, A[4] = {1, 2, 3, 4};
  for (int fi = 0; fi < 2; fi++) {
    rg_cpu_gemm_args e = {.M = 0, .N = 2, .K = 2, .lda = 2, .ldb = 2, .ldc = 2, .A = A, .B = A,
                          .C = C, .bias = fi ? A : NULL};
    fns[fi](&e, 2);
    e.M = 2, e.N = 0;
    fns[fi](&e, 2);
  }
  CHECK(C[0] == SENTINEL && C[3] == SENTINEL, "an empty GEMM wrote into C");
  /* No columns of C, but row sums still wanted (a layer with no inputs has a bias). */
  for (int fi = 0; fi < 2; fi++) {
    float r[2] = {1, 2};
    rg_cpu_gemm_args e = {.M = 2, .N = 0, .K = 2, .lda = 2, .ldb = 2, .ldc = 2, .A = A,
                          .B = A, .C = C, .rowsum = r};
    fns[fi](&e, 2);
    CHECK(r[0] == 4 && r[1] == 9, "%s with N = 0: row sums %g %g, want 4 9", names[fi], r[0],
          r[1]);
  }
  rg_cpu_pool_use(NULL);
  rg_cpu_pool_free(pool);
  return finish();
}
