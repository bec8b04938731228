/*
 * matmul.c - CPU matrix products: matmul (transpose flags, broadcast batch axes), linear,
 * and the GEMM under both: BLAS sgemm when the build found one (RG_HAVE_CBLAS), else a
 * built-in cache-blocked GEMM that is always compiled so tests can compare the two.
 *
 * Invariants:
 *  - Row-major throughout. op(A) is M x K and op(B) is K x N; a transposed operand is
 *    read through its leading dimension, never copied to a transposed temporary.
 *  - The built-in GEMM splits C into fixed MC x NC tiles and gives each tile to one
 *    thread, which walks K in fixed KC blocks: every element of C is summed in an order
 *    fixed by the shapes alone, so results are identical for any thread count.
 *  - No heap in the GEMM: the packed panels live on the calling thread's stack (under
 *    80 KB). BF16 operands arrive widened to F32 (backend.c), so the same GEMM gives
 *    exactly the F32 product of the rounded values.
 */
#include "cpu.h"

#include <string.h>

#ifdef RG_HAVE_CBLAS
#include <cblas.h>
#endif

/* Register tile MR x NR: 12 vector accumulators, leaving a register each for the two B
   vectors and the broadcast A value out of the 16 that SSE2 and AVX provide. GCC and
   Clang get explicit vectors because their auto-vectoriser handles the plain loop badly,
   and worse at higher optimisation levels; other compilers get the plain loop, which
   sums in the same order. */
#if defined(__GNUC__) || defined(__clang__)
#define RG_GEMM_VEC 1
#if defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * sizeof(float))));
#define MR 6
#define NR (2 * VW)
#else
#define RG_GEMM_VEC 0
#define MR 4
#define NR 8
#endif
/* Cache tile: packed A (MC x KC, 36 KB) and B (KC x NC, 32 KB) panels stay in L2 while
   the micro-kernel sweeps them. MC is a multiple of MR and NC of NR, so padded strips
   fit the panels. */
#define MC (12 * MR)
#define NC 64
#define KC 128
/* Below this many multiply-adds a GEMM runs on the calling thread only. */
#define GEMM_PAR_MIN (1 << 18)


/* ---- the built-in GEMM ---------------------------------------------------------------- */

typedef struct gemm_args {
  int ta, tb, accumulate;
  int64_t M, N, K, lda, ldb, ldc;
  const float *A, *B;
  float *C;
} gemm_args;

/* op(A)[i0.., p0..] into MR-row strips, k-major inside a strip; rows past mc are zero. */
static void pack_a(const gemm_args *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   float *ap) {
  for (int64_t s = 0; s < mc; s += MR) {
    float *dst = ap + s * kc;
    for (int64_t p = 0; p < kc; p++) {
      for (int64_t r = 0; r < MR; r++) {
        int64_t i = i0 + s + r, q = p0 + p;
        float v = 0.f;
        if (s + r < mc) v = g->ta ? g->A[q * g->lda + i] : g->A[i * g->lda + q];
        dst[p * MR + r] = v;
      }
    }
  }
}

/* op(B)[p0.., j0..] into NR-column strips, k-major inside a strip; columns past nc are
   zero. */
static void pack_b(const gemm_args *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                   float *bp) {
  for (int64_t s = 0; s < nc; s += NR) {
    float *dst = bp + s * kc;
    int64_t w = min64(NR, nc - s);
    for (int64_t p = 0; p < kc; p++) {
      int64_t q = p0 + p;
      for (int64_t c = 0; c < NR; c++) {
        int64_t j = j0 + s + c;
        float v = 0.f;
        if (c < w) v = g->tb ? g->B[j * g->ldb + q] : g->B[q * g->ldb + j];
        dst[p * NR + c] = v;
      }
    }
  }
}

/* Writes (or adds) the valid mr x nr corner of a register tile to C. */
static void store_tile(float acc[MR][NR], float *c, int64_t ldc, int64_t mr, int64_t nr,
                       bool add) {
  for (int64_t i = 0; i < mr; i++) {
    float *row = c + i * ldc;
    if (add)
      for (int64_t j = 0; j < nr; j++) row[j] += acc[i][j];
    else
      for (int64_t j = 0; j < nr; j++) row[j] = acc[i][j];
  }
}

/* C[mr x nr] (+)= packed A strip * packed B strip over kc, summed in k order. */
#if RG_GEMM_VEC
static void micro(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                  int64_t mr, int64_t nr, bool add) {
  vf acc[MR][2];
  memset(acc, 0, sizeof acc);
  for (int64_t p = 0; p < kc; p++) {
    vf b0, b1;
    memcpy(&b0, bp + p * NR, sizeof b0);
    memcpy(&b1, bp + p * NR + VW, sizeof b1);
    /* unrolled so the accumulators live in registers at -O2 too */
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++) {
      float a = ap[p * MR + i];
      acc[i][0] += b0 * a;
      acc[i][1] += b1 * a;
    }
  }
  float out[MR][NR];
  memcpy(out, acc, sizeof out);
  store_tile(out, c, ldc, mr, nr, add);
}
#else
static void micro(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                  int64_t mr, int64_t nr, bool add) {
  float acc[MR][NR] = {{0}};
  for (int64_t p = 0; p < kc; p++) {
    const float *a = ap + p * MR, *b = bp + p * NR;
    for (int i = 0; i < MR; i++)
      for (int j = 0; j < NR; j++) acc[i][j] += a[i] * b[j];
  }
  store_tile(acc, c, ldc, mr, nr, add);
}
#endif

static void gemm_tile(const gemm_args *g, int64_t i0, int64_t j0) {
  _Alignas(64) float ap[MC * KC];
  _Alignas(64) float bp[KC * NC];
  int64_t mc = min64(MC, g->M - i0), nc = min64(NC, g->N - j0);
  for (int64_t p0 = 0; p0 < g->K; p0 += KC) {
    int64_t kc = min64(KC, g->K - p0);
    bool add = p0 > 0 || g->accumulate;
    pack_a(g, i0, mc, p0, kc, ap);
    pack_b(g, p0, kc, j0, nc, bp);
    for (int64_t s = 0; s < mc; s += MR) {
      for (int64_t t = 0; t < nc; t += NR) {
        float *c = g->C + (i0 + s) * g->ldc + j0 + t;
        micro(kc, ap + s * kc, bp + t * kc, c, g->ldc, min64(MR, mc - s), min64(NR, nc - t),
              add);
      }
    }
  }
}

/* K == 0: the product is zero, so C is zeroed or (accumulating) left as it is. */
static void empty_product(int64_t M, int64_t N, float *C, int64_t ldc, int accumulate) {
  if (accumulate) return;
  for (int64_t i = 0; i < M; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
}

static void tiles_range(void *a, int64_t lo, int64_t hi, int slot) {
  const gemm_args *g = a;
  int64_t nb = (g->N + NC - 1) / NC;
  (void)slot;
  for (int64_t w = lo; w < hi; w++) gemm_tile(g, (w / nb) * MC, (w % nb) * NC);
}

void rg_cpu_gemm_builtin(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                         int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                         int accumulate, int threads) {
  gemm_args g = {ta, tb, accumulate, M, N, K, lda, ldb, ldc, A, B, C};
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    empty_product(M, N, C, ldc, accumulate);
    return;
  }
  int64_t mb = (M + MC - 1) / MC, nb = (N + NC - 1) / NC;
  rg_cpu_for(mb * nb, M * N * K >= GEMM_PAR_MIN ? threads : 1, tiles_range, &g);
}

#ifdef RG_HAVE_CBLAS
/* Splits a BLAS product over the context's threads: the BLAS runs on one thread (backend.c
   sets OpenBLAS so; its own pool, spinning beside the context's, made 2-thread runs
   collapse whenever a core was busy), and C is cut into blocks of rows, or of columns when
   it has more columns, each one sgemm call. The cut depends on the shape alone, so a
   product's blocks, and the sums in them, are the same for any thread count. A block is at
   least BLAS_BLOCK wide (smaller calls cost more in packing than they gain) and there are
   at most BLAS_BLOCKS of them. */
#define BLAS_BLOCK 32
#define BLAS_BLOCKS 16

static void blas_call(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                      int accumulate) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, accumulate ? 1.0f : 0.0f,
              C, (int)ldc);
}

/* Blocks [lo, hi) of a product cut by rg_cpu_gemm. */
typedef struct {
  gemm_args g;
  bool rows;
  int64_t dim, bs;
} blas_job;
static void blas_range(void *a, int64_t lo, int64_t hi, int slot) {
  const blas_job *j = a;
  const gemm_args *g = &j->g;
  (void)slot;
  for (int64_t b = lo; b < hi; b++) {
    int64_t o = b * j->bs, n = min64(j->dim, o + j->bs) - o;
    if (j->rows) /* rows o.. of C and of op(A) */
      blas_call(g->ta, g->tb, n, g->N, g->K, g->ta ? g->A + o : g->A + o * g->lda, g->lda, g->B,
                g->ldb, g->C + o * g->ldc, g->ldc, g->accumulate);
    else /* columns o.. of C and of op(B) */
      blas_call(g->ta, g->tb, g->M, n, g->K, g->A, g->lda, g->tb ? g->B + o * g->ldb : g->B + o,
                g->ldb, g->C + o, g->ldc, g->accumulate);
  }
}

void rg_cpu_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate,
                 int threads) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { /* BLAS would reject the zero leading dimension */
    empty_product(M, N, C, ldc, accumulate);
    return;
  }
  bool rows = M >= N;
  int64_t dim = rows ? M : N;
  int64_t bs = (dim + BLAS_BLOCKS - 1) / BLAS_BLOCKS;
  bs = bs < BLAS_BLOCK ? BLAS_BLOCK : bs;
  int64_t nb = M * N * K >= GEMM_PAR_MIN ? (dim + bs - 1) / bs : 1;
  if (nb == 1) bs = dim;
  blas_job j = {{ta, tb, accumulate, M, N, K, lda, ldb, ldc, A, B, C}, rows, dim, bs};
  rg_cpu_for(nb, threads, blas_range, &j);
}
#else
void rg_cpu_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                 const float *B, int64_t ldb, float *C, int64_t ldc, int accumulate,
                 int threads) {
  rg_cpu_gemm_builtin(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, accumulate, threads);
}
#endif

/* ---- matmul ---------------------------------------------------------------------------- */

/* Products [lo, hi) of a batched matmul, each split over `inner` threads. */
typedef struct {
  gemm_args g; /* A, B and C of the first product */
  const rg_tv *o;
  const int64_t *sa, *sb;
  int inner;
} batch_job;
static void batch_range(void *a, int64_t lo, int64_t hi, int slot) {
  const batch_job *j = a;
  const gemm_args *g = &j->g;
  (void)slot;
  for (int64_t bi = lo; bi < hi; bi++)
    rg_cpu_gemm(g->ta, g->tb, g->M, g->N, g->K, g->A + rg_cpu_bcast_offset(j->o, 2, j->sa, bi),
                g->lda, g->B + rg_cpu_bcast_offset(j->o, 2, j->sb, bi), g->ldb,
                g->C + bi * g->M * g->N, g->N, 0, j->inner);
}

rg_status rg_cpu_matmul(rg_kargs *k) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *o = &k->out[0];
  int ta = k->node->i[0] != 0, tb = k->node->i[1] != 0, nd = o->ndim;
  int64_t M = o->dims[nd - 2], N = o->dims[nd - 1];
  int64_t K = ta ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
  int64_t lda = ta ? M : K, ldb = tb ? K : N;
  int64_t nbatch = (M > 0 && N > 0) ? o->n / (M * N) : 0;
  int64_t sa[RG_MAX_DIMS], sb[RG_MAX_DIMS];
  rg_cpu_bcast_strides(a, o, 2, sa);
  rg_cpu_bcast_strides(b, o, 2, sb);
  const float *pa = a->p, *pb = b->p;
  float *po = o->p;
  int nt = nthreads(k);
  /* Many independent products: one per thread beats splitting each one. */
  bool by_batch = nt > 1 && nbatch >= nt;
  batch_job j = {{ta, tb, 0, M, N, K, lda, ldb, N, pa, pb, po}, o, sa, sb, by_batch ? 1 : nt};
  rg_cpu_for(nbatch, by_batch ? nt : 1, batch_range, &j);
  return RG_OK;
}

rg_status rg_cpu_matmul_acc(rg_kargs *k) {
  const rg_tv *d = &k->in[0], *a = &k->in[1], *b = &k->in[2];
  int ta = k->node->i[0] != 0, tb = k->node->i[1] != 0;
  int64_t M = d->dims[0], N = d->dims[1], K = ta ? a->dims[0] : a->dims[1];
  rg_cpu_gemm(ta, tb, M, N, K, a->p, ta ? M : K, b->p, tb ? K : N, d->p, N, 1, nthreads(k));
  if (!k->in[3].p) return RG_OK;
  rg_kargs s = *k; /* the bias gradient (ops.h): SUM_TO_ACC's arguments */
  s.in[0] = k->in[3];
  return rg_cpu_sum_to_acc(&s);
}

/* ---- linear ---------------------------------------------------------------------------- */

rg_status rg_cpu_linear(rg_kargs *k) {
  const rg_tv *x = &k->in[0], *w = &k->in[1], *bias = &k->in[2];
  int64_t O = w->dims[0], I = w->dims[1];
  int64_t R = O ? k->out[0].n / O : 0; /* from y: x may be empty (I == 0) */
  float *y = k->out[0].p;
  if (bias->p) { /* start from the bias and let the GEMM accumulate onto it */
    for (int64_t r = 0; r < R; r++) memcpy(y + r * O, bias->p, (size_t)O * sizeof(float));
  }
  if (I == 0) { /* an empty product is zero */
    if (!bias->p) memset(y, 0, (size_t)k->out[0].n * sizeof(float));
    return RG_OK;
  }
  rg_cpu_gemm(0, 1, R, O, I, x->p, I, w->p, I, y, O, bias->p != NULL, nthreads(k));
  return RG_OK;
}

rg_status rg_cpu_matmul_dgelu(rg_kargs *k) {
  rg_kargs mm, act;
  rg__matmul_dgelu_split(k, &mm, &act);
  rg_status st = rg_cpu_matmul(&mm);
  return st == RG_OK ? rg_cpu_gelu_bwd(&act) : st;
}

rg_status rg_cpu_linear_act(rg_kargs *k) {
  rg_kargs lin, act;
  rg__linear_act_split(k, &lin, &act);
  rg_status st = rg_cpu_linear(&lin);
  if (st != RG_OK) return st;
  return k->node->i[0] == RG_ACT_GELU ? rg_cpu_gelu(&act) : rg_cpu_relu(&act);
}
