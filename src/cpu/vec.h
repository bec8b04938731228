/*
 * vec.h - the CPU kernels' vectorised row functions (dot, axpy, max, exp, GELU, AdamW, the
 * norms' rows, ReLU) and a small register-tiled matrix product (attention's), one table
 * per instruction set, chosen once per process at run time.
 *
 * Invariants:
 *  - The build passes no global instruction-set flag: the AVX2+FMA and AVX-512 bodies
 *    are compiled with per-function target attributes (vec_avx2.c, vec_avx512.c), and
 *    the table is picked with the CPU's own feature bits, so one binary runs on any
 *    x86-64 (and the portable table on any other machine).
 *  - The choice is made once and never changes in a process: every call of a function
 *    sums in the same order for the same length, whatever the thread, the address or the
 *    thread count, so kernels that give each row to one thread stay bit-identical for
 *    any thread count. Tails shorter than a vector go through a zero-padded vector
 *    (elementwise functions compute every element with the same arithmetic).
 *  - RG_CPU_ISA=portable|avx2|avx512 in the environment, read at the first call, forces
 *    a table (tests run the CPU reference cases once per table); a table the CPU cannot
 *    run falls back to the best one it can.
 *  - exp_sum's exp is for arguments <= 88 (the kernels pass x - max <= 0): below about
 *    -87.3 (and at -inf) it gives 0, NaN stays NaN. It differs from libm's expf by a
 *    few units in the last place.
 */
#ifndef RG_CPU_VEC_H
#define RG_CPU_VEC_H

#include <stdint.h>

/* AdamW's per-step constants (optim.c folds them once in double, as PyTorch does). */
typedef struct rg_vec_adam {
  float decay, omb1, b2, omb2, step_size, bc2_sqrt, eps;
} rg_vec_adam;

typedef struct rg_vec_ops {
  const char *name; /* "portable", "avx2" or "avx512" */
  /* sum_i a[i] b[i] */
  float (*dot)(const float *a, const float *b, int64_t n);
  /* y[i] += a x[i] */
  void (*axpy)(float *y, float a, const float *x, int64_t n);
  /* y[d] = sum_j w[j] X[j ld + d] for d < n, j < m (added to y's values when add);
     each y[d] sums its m terms in j order */
  void (*wsum)(float *y, const float *w, const float *X, int64_t ld, int64_t m, int64_t n,
               int add);
  /* max_i x[i] (n >= 1); NaN-free rows only */
  float (*max)(const float *x, int64_t n);
  /* y[i] = exp(x[i] - shift) (y may be x, or NULL to only sum); returns the sum of the
     results, accumulated in double */
  double (*exp_sum)(const float *x, float shift, float *y, int64_t n);
  /* y[i] = exp(x[i] - shift) * scale (y may be x) */
  void (*exp_scale)(const float *x, float shift, float scale, float *y, int64_t n);
  /* y = gelu(x), the tanh approximation, as x / (1 + exp(-2u)), u = c (x + a x^3) */
  void (*gelu)(const float *x, float *y, int64_t n);
  /* d = g * gelu'(x), the tanh approximation's derivative */
  void (*gelu_bwd)(const float *x, const float *g, float *d, int64_t n);
  /* PyTorch's single-tensor AdamW on n F32 elements, in place: the scalar form's exact
     bits (optim.c) */
  void (*adamw)(const rg_vec_adam *c, float *w, const float *g, float *m, float *v,
                int64_t n);
  /* The norms' rows (norms.c). A row's sums add blocks of 4 vectors summed in float in
     double lanes; the per-element arithmetic is float. */
  /* sum_i x[i] */
  double (*sum)(const float *x, int64_t n);
  /* sum_i (x[i] - mu)^2, each square in float */
  double (*sqdev)(const float *x, float mu, int64_t n);
  /* y[i] = (x[i] - mu) rstd gamma[i] + beta[i]; gamma NULL: 1, beta NULL: 0 */
  void (*norm)(const float *x, float mu, float rstd, const float *gamma, const float *beta,
               float *y, int64_t n);
  /* A norm's dx: with xh = (x - mu) rstd and dxh = g gamma (g where gamma is NULL),
     dx = rstd (dxh - a - xh b), a = mean(dxh) (0 unless centre), b = mean(dxh xh), the
     means summed as sum's; then dx[i] + add[i] (a float add) where add is not NULL. */
  void (*norm_dx)(const float *x, const float *gamma, const float *g, const float *add,
                  float mu, float rstd, int centre, float *dx, int64_t n);
  /* For rows r < rows of x and g (leading dimension ld), with their mu[r] and rstd[r]:
     ag[i] += sum_r g xh, ab[i] += sum_r g, xh as norm_dx's; the rows' terms summed in
     float in row order, the result added in double. ag or ab may be NULL. Both have room
     for n rounded up to 16 (the widest vector): the lanes past n get zeroes or garbage,
     never a fault. */
  void (*norm_dparam)(const float *x, const float *g, int64_t ld, const float *mu,
                      const float *rstd, int64_t rows, double *ag, double *ab, int64_t n);
  /* y[i] = x[i] < 0 ? 0 : x[i] (NaN stays NaN) */
  void (*relu)(const float *x, float *y, int64_t n);
  /* d[i] = u[i] > 0 ? g[i] : 0 */
  void (*relu_bwd)(const float *u, const float *g, float *d, int64_t n);
  /* A small matrix product: C[i ldc + j] = sum_l A[i ar + l ak] B[l ldb + j] for i < m,
     j < n, l < k (added to C's values when add). A's two strides let it be read
     transposed (ar = 1, ak = its row length). Each element sums its k terms in l order,
     one fused multiply-add at a time, wherever it sits in C: its bits depend on its
     own row of A and column of B alone. */
  void (*mm)(float *C, int64_t ldc, const float *A, int64_t ar, int64_t ak, const float *B,
             int64_t ldb, int64_t m, int64_t n, int64_t k, int add);
  /* y[j ldy + i] = x[i ldx + j] for i < m, j < n: x's m x n block transposed (copies) */
  void (*transpose)(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t m, int64_t n);
} rg_vec_ops;

/* The process's table (thread-safe; the first call makes the choice). */
const rg_vec_ops *rg_cpu_vec(void);

/* The tables (NULL where the build has no such body); the test of the paths calls
   them directly. */
extern const rg_vec_ops rg_vec_portable;
const rg_vec_ops *rg_vec_avx2(void);
const rg_vec_ops *rg_vec_avx512(void);

#endif
