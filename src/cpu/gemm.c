/*
 * gemm.c - the built-in GEMM: C = op(A) op(B) (+ C), row-major, packed panels and a
 * register kernel per instruction set (gemm.h), the blocks of C spread over the context's
 * threads.
 *
 * Invariants:
 *  - K is cut into equal blocks of at most KC_MAX by K alone; each element of C is the sum
 *    of its blocks' partial sums in block order, each partial summed from zero in k order
 *    by the kernel (gemm.h). Nothing else depends on how C is cut, so results are the same
 *    for any thread count and any cut of C into tasks.
 *  - op(A) and op(B) are read through their leading dimensions; transposes cost nothing
 *    but the packing's access order.
 *  - The packed panels of each thread live in one buffer per call: on the stack when small
 *    and one thread runs, else from the heap (false when it cannot be had).
 *  - Row sums of op(A) (rowsum) are taken from its packed panels by the tasks of the first
 *    column of tasks, in their first column block: each row by one task, K block after K
 *    block, so in k order whatever the thread count.
 */
#include "cpu.h"
#include "gemm.h"
#include "vec.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Blocking: a task's rows go MC at a time (its packed A, MC x kc, stays in L2 while the
   kernel sweeps B), its columns NC at a time (the packed B, kc x NC). MC is a multiple of
   every kernel's MR and NC of every NR. */
#define KC_MAX 256
#define MC 96
#define NC 512
/* Below this many multiply-adds a GEMM runs on the calling thread only. */
#define GEMM_PAR_MIN (1 << 18)
/* Stack floats for the panels of a small one-thread product. */
#define STACK_FLOATS 4096

/* ---- the portable kernel ----------------------------------------------------------------- */

/* GCC and Clang get explicit vectors (of the baseline's width) because their
   auto-vectoriser handles the plain loop badly; other compilers get the plain loop, which
   sums in the same order. */
#if defined(__GNUC__) || defined(__clang__)
#if defined(__AVX__)
#define VW 8
#else
#define VW 4
#endif
typedef float vf __attribute__((vector_size(VW * sizeof(float))));
#define PMR 6
#define PNR (2 * VW)
static void portable_tile(int64_t kc, const float *ap, int64_t rs, int64_t ks, const float *bp,
                          float *c, int64_t ldc, int m, int n, int add, const float *bias) {
  vf acc[PMR][2];
  memset(acc, 0, sizeof acc);
  for (int64_t p = 0; p < kc; p++) {
    vf b0, b1;
    memcpy(&b0, bp + p * PNR, sizeof b0);
    memcpy(&b1, bp + p * PNR + VW, sizeof b1);
#pragma GCC unroll 8
    for (int i = 0; i < PMR; i++) {
      float a = ap[p * ks + i * rs];
      acc[i][0] += b0 * a;
      acc[i][1] += b1 * a;
    }
  }
  float out[PMR][PNR];
  memcpy(out, acc, sizeof out);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++)
      c[i * ldc + j] = (add ? c[i * ldc + j] : bias ? bias[j] : 0.f) + out[i][j];
}
#else
#define PMR 4
#define PNR 8
static void portable_tile(int64_t kc, const float *ap, int64_t rs, int64_t ks, const float *bp,
                          float *c, int64_t ldc, int m, int n, int add, const float *bias) {
  float acc[PMR][PNR] = {{0}};
  for (int64_t p = 0; p < kc; p++)
    for (int i = 0; i < PMR; i++)
      for (int j = 0; j < PNR; j++) acc[i][j] += ap[p * ks + i * rs] * bp[p * PNR + j];
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++)
      c[i * ldc + j] = (add ? c[i * ldc + j] : bias ? bias[j] : 0.f) + acc[i][j];
}
#endif

const rg_gemm_kernel rg_gemm_portable = {"portable", PMR, PNR, portable_tile, NULL, NULL};

_Static_assert(MC % 12 == 0 && MC % PMR == 0 && NC % 32 == 0 && NC % PNR == 0 && PMR <= 16,
               "the blocks hold whole tiles of every kernel, of at most 16 rows");

const rg_gemm_kernel *rg_gemm_kernel_get(void) {
  static _Atomic(const rg_gemm_kernel *) chosen;
  const rg_gemm_kernel *k = atomic_load_explicit(&chosen, memory_order_acquire);
  if (k) return k;
  const char *isa = rg_cpu_vec()->name; /* the same choice as the row functions */
  k = !strcmp(isa, "avx512") ? rg_gemm_avx512() : !strcmp(isa, "avx2") ? rg_gemm_avx2() : NULL;
  if (!k) k = &rg_gemm_portable;
  atomic_store_explicit(&chosen, k, memory_order_release);
  return k;
}

/* ---- packing ------------------------------------------------------------------------------- */

typedef struct gemm_job {
  const rg_gemm_kernel *kn;
  rg_cpu_gemm_args a; /* its bias a row added at the first K block (not with accumulate) */
  double *sums;       /* M row sums of op(A) being taken, or NULL */
  int64_t kc;         /* the K block (invariants) */
  int64_t rows, cols; /* a task's block of C */
  int64_t col_tasks;  /* tasks across N */
  float *work;        /* per thread slot: the packed B, then the packed A */
  int64_t bfloats, per_slot;
} gemm_job;

/* Rows of the source read at a time when a strip's elements are adjacent in them: the
   rows stay in L1 while every strip takes its part, instead of each strip walking all kc
   rows (a strided walk through memory that stalls on every row). */
#define PACK_ROWS 16

/* A panel of strips of width w (MR for A, NR for B), k-major inside a strip
   (dst[s * kc + p * w + c] for the strip at s): element (p, s + c) is x[p * ld + s + c]
   when adjacent, else x[(s + c) * ld + p]; c at or past n - s is zero. */
static void pack_panel(const rg_gemm_kernel *kn, const float *x, int64_t ld, bool adjacent,
                       int64_t n, int w, int64_t kc, float *dst) {
  if (adjacent) {
    for (int64_t q = 0; q < kc; q += PACK_ROWS) {
      int64_t kq = min64(PACK_ROWS, kc - q);
      for (int64_t s = 0; s < n; s += w) {
        int h = (int)min64(w, n - s);
        const float *src = x + q * ld + s;
        float *d = dst + s * kc + q * w;
        if (kn->pack_cols) {
          kn->pack_cols(src, ld, h, w, kq, d);
          continue;
        }
        for (int64_t p = 0; p < kq; p++)
          for (int c = 0; c < w; c++) d[p * w + c] = c < h ? src[p * ld + c] : 0.f;
      }
    }
    return;
  }
  for (int64_t s = 0; s < n; s += w) {
    int h = (int)min64(w, n - s);
    const float *src = x + s * ld;
    float *d = dst + s * kc;
    if (kn->pack_rows) {
      kn->pack_rows(src, ld, h, w, kc, d);
      continue;
    }
    for (int c = 0; c < w; c++)
      for (int64_t p = 0; p < kc; p++) d[p * w + c] = c < h ? src[c * ld + p] : 0.f;
  }
}

/* op(A)[i0 .. i0+mc, p0 .. p0+kc] into MR-row strips. */
static void pack_a(const gemm_job *g, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   float *ap) {
  const float *x = g->a.ta ? g->a.A + p0 * g->a.lda + i0 : g->a.A + i0 * g->a.lda + p0;
  pack_panel(g->kn, x, g->a.lda, g->a.ta, mc, g->kn->mr, kc, ap);
}

/* op(B)[p0 .. p0+kc, j0 .. j0+nc] into NR-column strips. */
static void pack_b(const gemm_job *g, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                   float *bp) {
  const float *x = g->a.tb ? g->a.B + j0 * g->a.ldb + p0 : g->a.B + p0 * g->a.ldb + j0;
  pack_panel(g->kn, x, g->a.ldb, !g->a.tb, nc, g->kn->nr, kc, bp);
}

/* ---- the blocks of one task, and the tasks --------------------------------------------------- */

/* t[r] += a strip's row r, in k order; with mr a constant each sum stays in a register. */
static inline void strip_sums(const float *a, int mr, int64_t kc, double *t) {
  for (int64_t p = 0; p < kc; p++)
    for (int r = 0; r < mr; r++) t[r] += a[p * mr + r];
}

/* sums[r] += row r of a packed panel of mc rows, in k order (rows past mc are zero in the
   last strip). */
static void add_row_sums(const float *ap, int64_t mc, int mr, int64_t kc, double *sums) {
  for (int64_t s = 0; s < mc; s += mr) {
    double t[16];
    int h = (int)min64(mr, mc - s);
    for (int r = 0; r < mr; r++) t[r] = r < h ? sums[s + r] : 0;
    const float *a = ap + s * kc;
    switch (mr) { /* every kernel's (gemm.h) */
    case 12: strip_sums(a, 12, kc, t); break;
    case 6: strip_sums(a, 6, kc, t); break;
    case 4: strip_sums(a, 4, kc, t); break;
    default: strip_sums(a, mr, kc, t);
    }
    for (int r = 0; r < h; r++) sums[s + r] = t[r];
  }
}

static void run_block(const gemm_job *g, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                      float *bp, float *ap) {
  const rg_gemm_kernel *kn = g->kn;
  for (int64_t jc = c0; jc < c1; jc += NC) {
    bool sum = g->sums && jc == 0; /* the row sums' one pass over op(A) (invariants) */
    int64_t nc = min64(NC, c1 - jc);
    for (int64_t pc = 0; pc < g->a.K; pc += g->kc) {
      int64_t kb = min64(g->kc, g->a.K - pc);
      int add = pc > 0 || g->a.accumulate;
      pack_b(g, pc, kb, jc, nc, bp);
      for (int64_t ic = r0; ic < r1; ic += MC) {
        int64_t mc = min64(MC, r1 - ic);
        /* Whole strips of an op(A) = A are read where they stand (its rows are runs in
           memory, and a strip stays in L1 while the kernel sweeps B), unless their sums
           are wanted; the rest is packed. A transposed strip, MR floats of each of kc
           rows, is packed: read in place it was slower. */
        int64_t held = sum || g->a.ta ? 0 : mc / kn->mr * kn->mr;
        if (held < mc) pack_a(g, ic + held, mc - held, pc, kb, ap);
        if (sum) add_row_sums(ap, mc, kn->mr, kb, g->sums + ic);
        for (int64_t ir = 0; ir < mc; ir += kn->mr) {
          int64_t i = ic + ir;
          bool in_place = ir < held;
          const float *a = in_place ? g->a.A + i * g->a.lda + pc : ap + (ir - held) * kb;
          int64_t rs = in_place ? g->a.lda : 1, ks = in_place ? 1 : kn->mr;
          for (int64_t jr = 0; jr < nc; jr += kn->nr)
            kn->tile(kb, a, rs, ks, bp + jr * kb, g->a.C + i * g->a.ldc + jc + jr, g->a.ldc,
                     (int)min64(kn->mr, mc - ir), (int)min64(kn->nr, nc - jr), add,
                     g->a.bias ? g->a.bias + jc + jr : NULL);
        }
      }
    }
  }
}

static void tasks_range(void *arg, int64_t lo, int64_t hi, int slot) {
  const gemm_job *g = arg;
  float *bp = g->work + slot * g->per_slot, *ap = bp + g->bfloats;
  for (int64_t t = lo; t < hi; t++) {
    int64_t r0 = (t / g->col_tasks) * g->rows, c0 = (t % g->col_tasks) * g->cols;
    run_block(g, r0, min64(g->a.M, r0 + g->rows), c0, min64(g->a.N, c0 + g->cols), bp, ap);
  }
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void rg_cpu_gemm_rowsum(const rg_cpu_gemm_args *a) {
  if (a->K <= 0) return; /* sums of nothing leave rowsum as it is, as SUM_TO_ACC does */
  for (int64_t i = 0; i < a->M; i++) {
    double sum = 0;
    for (int64_t p = 0; p < a->K; p++) sum += a->ta ? a->A[p * a->lda + i] : a->A[i * a->lda + p];
    a->rowsum[i] += (float)sum;
  }
}

void rg_cpu_gemm_bias_first(rg_cpu_gemm_args *a) {
  for (int64_t i = 0; i < a->M; i++)
    for (int64_t j = 0; j < a->N; j++)
      a->C[i * a->ldc + j] = (a->accumulate ? a->C[i * a->ldc + j] : 0.f) + a->bias[j];
  a->bias = NULL;
  a->accumulate = 1;
}

bool rg_cpu_gemm_builtin(const rg_cpu_gemm_args *args, int threads) {
  gemm_job g = {.kn = rg_gemm_kernel_get(), .a = *args};
  int64_t M = g.a.M, N = g.a.N, K = g.a.K;
  if (M <= 0 || N <= 0) { /* no C: any row sums by the plain loop */
    if (g.a.rowsum) rg_cpu_gemm_rowsum(&g.a);
    return true;
  }
  /* The bias goes in with the first K block, unless the product adds onto C or is empty */
  if (g.a.bias && (g.a.accumulate || K <= 0)) rg_cpu_gemm_bias_first(&g.a);
  if (K <= 0) { /* the product is zero: C is zeroed, or left as it is when accumulating */
    if (!g.a.accumulate)
      for (int64_t i = 0; i < M; i++) memset(g.a.C + i * g.a.ldc, 0, (size_t)N * sizeof(float));
    return true;
  }
  g.kc = cdiv(K, cdiv(K, KC_MAX));
  int nt = M * N * K >= GEMM_PAR_MIN && threads > 1 ? threads : 1;
  /* Tasks: about two a thread (the pool hands them to whichever thread is free), an
     rt x ct grid over C. Each task packs its own panels, op(A)'s rows ct times over and
     op(B)'s columns rt times over, so the grid is the one that packs least, M ct + N rt,
     with at least 4 strips of rows a task. */
  int64_t want = nt > 1 ? 2 * (int64_t)nt : 1, mr = g.kn->mr, row_tasks = 1;
  for (int64_t rt = 2; rt <= want && M / rt >= 4 * mr; rt++)
    if (want % rt == 0 && M * (want / rt) + N * rt < M * (want / row_tasks) + N * row_tasks)
      row_tasks = rt;
  g.rows = round_up(cdiv(M, row_tasks), mr);
  g.cols = round_up(cdiv(N, want / row_tasks), g.kn->nr);
  g.col_tasks = cdiv(N, g.cols);
  int64_t tasks = cdiv(M, g.rows) * g.col_tasks;
  g.bfloats = g.kc * round_up(min64(g.cols, NC), g.kn->nr);
  g.per_slot = round_up(g.bfloats + g.kc * round_up(min64(g.rows, MC), g.kn->mr), 16);
  if (tasks < nt) nt = (int)tasks;
  float stack[STACK_FLOATS];
  bool heap = nt > 1 || g.per_slot > STACK_FLOATS;
  g.work = heap ? malloc((size_t)(nt * g.per_slot) * sizeof(float)) : stack;
  g.sums = g.a.rowsum ? calloc((size_t)M, sizeof(double)) : NULL;
  if (!g.work || (g.a.rowsum && !g.sums)) {
    if (heap) free(g.work);
    free(g.sums);
    return false;
  }
  rg_cpu_for(tasks, nt, tasks_range, &g);
  if (heap) free(g.work);
  if (g.sums) {
    for (int64_t i = 0; i < M; i++) g.a.rowsum[i] += (float)g.sums[i];
    free(g.sums);
  }
  return true;
}
