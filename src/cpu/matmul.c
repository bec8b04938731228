/*
 * matmul.c - CPU matrix products: matmul (transpose flags, broadcast batch axes), linear,
 * and the choice of GEMM under both: the built-in one (gemm.c) where it has a vector
 * kernel for the CPU, else BLAS sgemm when the build found one (RG_HAVE_CBLAS).
 *
 * Invariants:
 *  - Row-major throughout. op(A) is M x K and op(B) is K x N; a transposed operand is
 *    read through its leading dimension, never copied to a transposed temporary.
 *  - Results are identical for any thread count, with either GEMM.
 *  - BF16 operands arrive widened to F32 (backend.c), so the same GEMM gives exactly the
 *    F32 product of the rounded values.
 *  - Why the built-in GEMM goes first on x86-64: a BLAS built for many CPUs picks its
 *    kernels from a list of CPUs it knows, and on a newer one falls back to its oldest
 *    (OpenBLAS 0.3.21 runs SSE3 kernels on CPUs it does not name), while the built-in
 *    kernels are chosen from the CPU's feature bits. RG_CPU_GEMM=blas or =builtin in the
 *    environment, read once, overrides the choice.
 */
#include "cpu.h"

#include "gemm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RG_HAVE_CBLAS
#include <cblas.h>
#endif

#ifdef RG_HAVE_CBLAS
/* Below this many multiply-adds a BLAS product runs on the calling thread only. */
#define GEMM_PAR_MIN (1 << 18)

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
  rg_cpu_gemm_args g;
  bool rows;
  int64_t dim, bs;
} blas_job;
static void blas_range(void *a, int64_t lo, int64_t hi, int slot) {
  const blas_job *j = a;
  const rg_cpu_gemm_args *g = &j->g;
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

static void blas_gemm(const rg_cpu_gemm_args *g, int threads) {
  bool rows = g->M >= g->N;
  int64_t dim = rows ? g->M : g->N;
  int64_t bs = (dim + BLAS_BLOCKS - 1) / BLAS_BLOCKS;
  bs = bs < BLAS_BLOCK ? BLAS_BLOCK : bs;
  int64_t nb = g->M * g->N * g->K >= GEMM_PAR_MIN ? (dim + bs - 1) / bs : 1;
  if (nb == 1) bs = dim;
  blas_job j = {*g, rows, dim, bs};
  rg_cpu_for(nb, threads, blas_range, &j);
}

/* The BLAS unless the built-in GEMM has a vector kernel for this CPU, or as RG_CPU_GEMM
   says (read once). */
static bool use_blas(void) {
  static atomic_int choice; /* 0 not yet, 1 BLAS, 2 built-in */
  int c = atomic_load_explicit(&choice, memory_order_acquire);
  if (!c) {
    const char *e = getenv("RG_CPU_GEMM");
    if (e && !strcmp(e, "blas")) c = 1;
    else if (e && !strcmp(e, "builtin")) c = 2;
    else c = rg_gemm_kernel_get() == &rg_gemm_portable ? 1 : 2;
    atomic_store_explicit(&choice, c, memory_order_release);
  }
  return c == 1;
}
#endif

bool rg_cpu_gemm(const rg_cpu_gemm_args *g, int threads) {
#ifdef RG_HAVE_CBLAS
  if (g->M > 0 && g->N > 0 && g->K > 0 && use_blas()) { /* BLAS rejects a zero leading dimension */
    rg_cpu_gemm_args b = *g;
    if (b.bias) rg_cpu_gemm_bias_first(&b); /* C (+)= bias, then the product onto it */
    blas_gemm(&b, threads);
    if (b.rowsum) rg_cpu_gemm_rowsum(&b);
    return true;
  }
#endif
  return rg_cpu_gemm_builtin(g, threads);
}

/* ---- matmul ---------------------------------------------------------------------------- */

/* The status of a product whose GEMM could not have its packing buffers. */
static rg_status gemm_oom(rg_kargs *k) {
  snprintf(k->msg, k->msgcap, "out of host memory for the matrix product's packing buffers");
  return RG_ERR_OOM;
}

/* Products [lo, hi) of a batched matmul, each split over `inner` threads. */
typedef struct {
  rg_cpu_gemm_args g; /* A, B and C of the first product */
  const rg_tv *o;
  const int64_t *sa, *sb;
  int inner;
  atomic_bool oom;
} batch_job;
static void batch_range(void *a, int64_t lo, int64_t hi, int slot) {
  batch_job *j = a;
  (void)slot;
  for (int64_t bi = lo; bi < hi; bi++) {
    rg_cpu_gemm_args g = j->g;
    g.A += rg_cpu_bcast_offset(j->o, 2, j->sa, bi);
    g.B += rg_cpu_bcast_offset(j->o, 2, j->sb, bi);
    g.C += bi * g.M * g.N;
    if (!rg_cpu_gemm(&g, j->inner)) atomic_store(&j->oom, true);
  }
}

rg_status rg_cpu_matmul(rg_kargs *k) {
  const rg_tv *a = &k->in[0], *b = &k->in[1], *o = &k->out[0];
  int ta = k->node->i[0] != 0, tb = k->node->i[1] != 0, nd = o->ndim;
  int64_t M = o->dims[nd - 2], N = o->dims[nd - 1];
  int64_t K = ta ? a->dims[a->ndim - 2] : a->dims[a->ndim - 1];
  int64_t nbatch = (M > 0 && N > 0) ? o->n / (M * N) : 0;
  int64_t sa[RG_MAX_DIMS], sb[RG_MAX_DIMS];
  rg_cpu_bcast_strides(a, o, 2, sa);
  rg_cpu_bcast_strides(b, o, 2, sb);
  int nt = nthreads(k);
  /* Many independent products: one per thread beats splitting each one. */
  bool by_batch = nt > 1 && nbatch >= nt;
  batch_job j = {{.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = ta ? M : K,
                  .ldb = tb ? K : N, .ldc = N, .A = a->p, .B = b->p, .C = o->p},
                 o, sa, sb, by_batch ? 1 : nt, false};
  rg_cpu_for(nbatch, by_batch ? nt : 1, batch_range, &j);
  return atomic_load(&j.oom) ? gemm_oom(k) : RG_OK;
}

rg_status rg_cpu_matmul_acc(rg_kargs *k) {
  const rg_tv *d = &k->in[0], *a = &k->in[1], *b = &k->in[2];
  int ta = k->node->i[0] != 0, tb = k->node->i[1] != 0;
  int64_t M = d->dims[0], N = d->dims[1], K = ta ? a->dims[0] : a->dims[1];
  /* The bias gradient (ops.h) sums in[1] over its rows, which op(in[1]) has as columns
     (i[0] = 1): the GEMM takes those sums as it packs them. */
  rg_cpu_gemm_args g = {.ta = ta, .tb = tb, .accumulate = 1, .M = M, .N = N, .K = K,
                        .lda = ta ? M : K, .ldb = tb ? K : N, .ldc = N, .A = a->p, .B = b->p,
                        .C = d->p, .rowsum = ta ? k->in[3].p : NULL};
  if (!rg_cpu_gemm(&g, nthreads(k))) return gemm_oom(k);
  if (!k->in[3].p || ta) return RG_OK;
  rg_kargs s = *k; /* SUM_TO_ACC's arguments */
  s.in[0] = k->in[3];
  return rg_cpu_sum_to_acc(&s);
}

/* ---- linear ---------------------------------------------------------------------------- */

rg_status rg_cpu_linear(rg_kargs *k) {
  const rg_tv *x = &k->in[0], *w = &k->in[1], *bias = &k->in[2];
  int64_t O = w->dims[0], I = w->dims[1];
  int64_t R = O ? k->out[0].n / O : 0; /* from y: x may be empty (I == 0) */
  float *y = k->out[0].p;
  /* an empty product (I == 0) is zero: y is the bias, or zero */
  rg_cpu_gemm_args g = {.tb = 1, .M = R, .N = O, .K = I, .lda = I, .ldb = I, .ldc = O,
                        .A = x->p, .B = w->p, .C = y, .bias = bias->p};
  return rg_cpu_gemm(&g, nthreads(k)) ? RG_OK : gemm_oom(k);
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
