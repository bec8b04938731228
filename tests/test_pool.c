/*
 * test_pool.c - the CPU backend's thread pool and parallel for (src/cpu/pool.h).
 *
 * Checks that every index of a range runs exactly once, in bodies whose slots stay below
 * the call's thread bound and are never shared by two bodies at once; many small ranges
 * back to back (the pattern of a drain), ranges shorter than the pool, empty ranges, a
 * thread bound of 1 and no pool in use (one serial call); a body's own rg_cpu_for runs
 * serially on that body's thread; pools freed right after work, unused, or while workers
 * are still spinning; two pools driven from two threads at once; RG_THREADS; and contexts
 * closed with recorded work still queued. make tsan runs this file under ThreadSanitizer.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/pool.h"

#define MAXN 4096
#define MAXT 8

typedef struct {
  int counts[MAXN];     /* each index's runs: each written by the one body that owns it */
  atomic_int busy[MAXT]; /* 1 while a body runs in that slot */
  atomic_int bad_slot, shared_slot, calls;
  int threads;
} mark_job;

static void mark(void *a, int64_t lo, int64_t hi, int slot) {
  mark_job *j = a;
  atomic_fetch_add(&j->calls, 1);
  if (slot < 0 || slot >= j->threads || slot >= MAXT) {
    atomic_fetch_add(&j->bad_slot, 1);
    return;
  }
  if (atomic_exchange(&j->busy[slot], 1)) atomic_fetch_add(&j->shared_slot, 1);
  for (int64_t i = lo; i < hi; i++) j->counts[i]++;
  atomic_store(&j->busy[slot], 0);
}

/* Runs one range and checks it; returns the number of body calls. */
static int run_marked(int64_t n, int threads, const char *what) {
  static mark_job j;
  memset(&j, 0, sizeof j);
  j.threads = threads < 1 ? 1 : threads;
  rg_cpu_for(n, threads, mark, &j);
  int wrong = 0;
  for (int64_t i = 0; i < n; i++) wrong += j.counts[i] != 1;
  CHECK(wrong == 0, "%s: n=%lld threads=%d: %d indices did not run exactly once", what,
        (long long)n, threads, wrong);
  CHECK(atomic_load(&j.bad_slot) == 0, "%s: a slot outside [0, %d)", what, j.threads);
  CHECK(atomic_load(&j.shared_slot) == 0, "%s: two bodies ran in one slot at once", what);
  return atomic_load(&j.calls);
}

/* ---- nesting ---------------------------------------------------------------------------- */

typedef struct {
  pthread_t owner; /* the thread of the outer body (inner ranges) */
  atomic_int inner_calls, bad_range;
  int inner_n;
} nest_job;

static void nest_inner(void *a, int64_t lo, int64_t hi, int slot) {
  nest_job *j = a;
  atomic_fetch_add(&j->inner_calls, 1);
  if (lo != 0 || hi != j->inner_n || slot != 0 || !pthread_equal(pthread_self(), j->owner))
    atomic_fetch_add(&j->bad_range, 1);
}

static void nest_outer(void *a, int64_t lo, int64_t hi, int slot) {
  nest_job *j = a;
  (void)slot;
  for (int64_t i = lo; i < hi; i++) {
    /* Each inner range must run as one serial call on this very thread. */
    nest_job inner;
    memset(&inner, 0, sizeof inner);
    inner.owner = pthread_self();
    inner.inner_n = j->inner_n;
    rg_cpu_for(j->inner_n, MAXT, nest_inner, &inner);
    if (atomic_load(&inner.inner_calls) != 1 || atomic_load(&inner.bad_range) != 0)
      atomic_fetch_add(&j->bad_range, 1);
  }
}

/* ---- two pools from two threads ------------------------------------------------------------ */

static void *drive(void *v) {
  int *fails = v;
  char why[160];
  rg_cpu_pool *p = rg_cpu_pool_new(3, why, sizeof why);
  if (!p) {
    (*fails)++;
    return NULL;
  }
  rg_cpu_pool_use(p);
  for (int rep = 0; rep < 300; rep++) {
    int64_t n = 1 + rep % 257;
    mark_job *j = calloc(1, sizeof *j);
    if (!j) {
      (*fails)++;
      break;
    }
    j->threads = 3;
    rg_cpu_for(n, 3, mark, j);
    for (int64_t i = 0; i < n; i++) *fails += j->counts[i] != 1;
    *fails += atomic_load(&j->shared_slot) + atomic_load(&j->bad_slot);
    free(j);
  }
  rg_cpu_pool_use(NULL);
  rg_cpu_pool_free(p);
  return NULL;
}

/* ---- contexts --------------------------------------------------------------------------- */

/* A CPU context with `threads` threads: y = relu(x W) over a product big enough to split,
   into out; when drain is false the ops stay queued and rg_close must discard them. */
static void ctx_run(int threads, bool drain, float *out, int64_t n_out) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.threads = threads});
  if (!ctx) return;
  enum { M = 256, K = 192, N = 160 };
  static float hx[M * K], hw[K * N];
  uint32_t s = 99;
  for (int i = 0; i < M * K; i++) hx[i] = (float)((s = s * 1664525u + 1013904223u) >> 9) / 8388608.f - 1.f;
  for (int i = 0; i < K * N; i++) hw[i] = (float)((s = s * 1664525u + 1013904223u) >> 9) / 8388608.f - 1.f;
  int64_t xs[2] = {M, K}, ws[2] = {K, N};
  rg_tensor x = rg_input(ctx, RG_F32, 2, xs, hx);
  rg_tensor w = rg_input(ctx, RG_F32, 2, ws, hw);
  rg_tensor y = rg_relu(ctx, rg_matmul(ctx, x, w));
  rg_tensor sm = rg_softmax(ctx, y);
  if (drain) CHECK_ST(ctx, rg_read(ctx, sm, out, (size_t)n_out * sizeof(float)), RG_OK);
  rg_close(ctx); /* drain false: closed with the ops queued */
}

int main(void) {
  char why[160];

  /* No pool in use on this thread, or a bound of 1: one serial call. */
  rg_cpu_pool_use(NULL);
  CHECK(run_marked(1000, 4, "no pool") == 1, "no pool: the range was split");
  CHECK(run_marked(0, 4, "no pool, empty") == 0, "n = 0 called the body");

  rg_cpu_pool *p = rg_cpu_pool_new(4, why, sizeof why);
  CHECK(p != NULL, "rg_cpu_pool_new(4): %s", why);
  if (!p) return finish();
  CHECK(rg_cpu_pool_threads(p) == 4, "pool of %d threads, want 4", rg_cpu_pool_threads(p));
  CHECK(rg_cpu_pool_use(p) == NULL, "rg_cpu_pool_use returned a pool none had set");

  CHECK(run_marked(1000, 1, "bound 1") == 1, "threads = 1: the range was split");
  CHECK(run_marked(0, 4, "empty") == 0, "n = 0 called the body");
  CHECK(run_marked(-5, 4, "negative") == 0, "n < 0 called the body");
  for (int64_t n = 1; n <= 3; n++) /* fewer indices than threads */
    CHECK(run_marked(n, 4, "n < threads") <= n, "n=%lld: more calls than indices", (long long)n);
  run_marked(MAXN, 4, "large");
  run_marked(MAXN, 2, "bound 2 of 4");
  run_marked(MAXN, 64, "bound above the pool");

  /* Many small ranges back to back, as a drain issues them. */
  uint32_t s = 12345;
  for (int rep = 0; rep < 3000 && !failed(); rep++) {
    s = s * 1664525u + 1013904223u;
    int64_t n = (s >> 8) % 70;
    int t = 1 + (int)((s >> 20) % 5);
    run_marked(n, t, "many small");
  }

  /* Nested: a body's rg_cpu_for runs serially on its own thread. */
  nest_job nj;
  memset(&nj, 0, sizeof nj);
  nj.inner_n = 37;
  rg_cpu_for(64, 4, nest_outer, &nj);
  CHECK(atomic_load(&nj.bad_range) == 0,
        "a nested rg_cpu_for was split or ran elsewhere (%d bad)", atomic_load(&nj.bad_range));

  /* Freed right after work: workers may still be spinning for the next job. */
  rg_cpu_pool_use(NULL);
  rg_cpu_pool_free(p);
  rg_cpu_pool_free(NULL);
  for (int i = 0; i < 20; i++) {
    rg_cpu_pool *q = rg_cpu_pool_new(1 + i % 4, why, sizeof why);
    CHECK(q != NULL, "rg_cpu_pool_new(%d): %s", 1 + i % 4, why);
    if (!q) break;
    if (i % 2) { /* half of them freed unused */
      rg_cpu_pool *old = rg_cpu_pool_use(q);
      run_marked(100, 4, "short-lived pool");
      rg_cpu_pool_use(old);
    }
    rg_cpu_pool_free(q);
  }

  /* Two pools driven from two threads at once. */
  pthread_t th[2];
  int fails[2] = {0, 0};
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, drive, &fails[i]) == 0, "pthread_create");
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK(fails[0] == 0 && fails[1] == 0, "two pools at once: %d and %d failures", fails[0],
        fails[1]);

  /* RG_THREADS when rg_options.threads is 0; anything but a positive count is ignored;
     then OMP_NUM_THREADS's first count, capped by OMP_THREAD_LIMIT (not RG_THREADS). */
  unsetenv("OMP_NUM_THREADS");
  unsetenv("OMP_THREAD_LIMIT");
  setenv("OMP_NUM_THREADS", "5,2", 1);
  CHECK(rg_cpu_default_threads() == 5, "OMP_NUM_THREADS=5,2 gave %d", rg_cpu_default_threads());
  setenv("OMP_THREAD_LIMIT", "2", 1);
  CHECK(rg_cpu_default_threads() == 2, "OMP_THREAD_LIMIT=2 gave %d", rg_cpu_default_threads());
  setenv("RG_THREADS", "4", 1);
  CHECK(rg_cpu_default_threads() == 4, "RG_THREADS=4 under OMP_THREAD_LIMIT=2 gave %d",
        rg_cpu_default_threads());
  unsetenv("OMP_NUM_THREADS");
  unsetenv("OMP_THREAD_LIMIT");
  setenv("RG_THREADS", "3", 1);
  CHECK(rg_cpu_default_threads() == 3, "RG_THREADS=3 gave %d", rg_cpu_default_threads());
  setenv("RG_THREADS", "zero", 1);
  int fallback = rg_cpu_default_threads();
  CHECK(fallback >= 1, "RG_THREADS=zero gave %d", fallback);
  unsetenv("RG_THREADS");
  CHECK(rg_cpu_default_threads() == fallback, "unset RG_THREADS: %d, not %d",
        rg_cpu_default_threads(), fallback);
  setenv("RG_THREADS", "3", 1);
  rg_ctx *ctx = open_cpu_opts((rg_options){0});
  if (ctx) {
    CHECK(strstr(rg_device_name(ctx), "(3 threads)") != NULL, "RG_THREADS=3: device %s",
          rg_device_name(ctx));
    rg_close(ctx);
  }
  unsetenv("RG_THREADS");

  /* Contexts: the same bits for 1, 2 and 3 threads; closed with work still queued. */
  enum { NOUT = 256 * 160 };
  static float r1[NOUT], r2[NOUT], r3[NOUT];
  ctx_run(1, true, r1, NOUT);
  ctx_run(2, true, r2, NOUT);
  ctx_run(3, true, r3, NOUT);
  CHECK(memcmp(r1, r2, sizeof r1) == 0 && memcmp(r1, r3, sizeof r1) == 0,
        "results differ between 1, 2 and 3 threads");
  for (int i = 0; i < 5; i++) ctx_run(2 + i % 2, false, NULL, 0);

  if (!failed()) printf("test_pool: PASS\n");
  return finish();
}
