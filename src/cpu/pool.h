/*
 * pool.h - the CPU backend's threads: one pool per context, and the parallel for every
 * CPU kernel splits its work with.
 *
 * A pool of T threads is the calling thread and T - 1 workers, started by rg_cpu_pool_new
 * (at rg_open) and joined by rg_cpu_pool_free (at rg_close). rg_cpu_for hands out the
 * chunks of one range to whichever of them is free: the caller takes part and claims
 * chunks as the workers do, so a worker the OS has not scheduled (a core busy with another
 * process) delays nothing; the caller only ever waits for chunks another thread is
 * running. Idle workers spin for a short, bounded time, yielding the core, then sleep on
 * a condition variable; none spins while no kernel runs.
 *
 * Determinism: the chunks' bounds depend on n and the thread bound alone, each index is
 * run exactly once, and bodies write disjoint outputs (or per-chunk partials summed by the
 * caller in a fixed order), so results do not depend on which thread ran which chunk.
 *
 * Nesting: a body that calls rg_cpu_for runs that inner range on its own thread, serially.
 */
#ifndef RG_CPU_POOL_H
#define RG_CPU_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef struct rg_cpu_pool rg_cpu_pool;

/* The body of a parallel for: indices [lo, hi) of the range. slot, in [0, threads) of the
   rg_cpu_for call, names the thread running it (0: the caller) for per-thread scratch;
   two bodies running at once never share a slot. */
typedef void (*rg_cpu_body)(void *arg, int64_t lo, int64_t hi, int slot);

/* A pool of `threads` threads (at least 1; 1 starts none). NULL when a thread cannot be
   started or memory runs out; msg then says why and what to do. */
rg_cpu_pool *rg_cpu_pool_new(int threads, char *msg, size_t msgcap);
/* Stops and joins the workers. Called with no rg_cpu_for running on the pool. NULL: no-op. */
void rg_cpu_pool_free(rg_cpu_pool *p);
int rg_cpu_pool_threads(const rg_cpu_pool *p);

/* Makes p the pool that rg_cpu_for uses on the calling thread (NULL: none, every range
   runs serially); returns the one it replaces. The backend sets it around a drain. */
rg_cpu_pool *rg_cpu_pool_use(rg_cpu_pool *p);

/* Runs fn over [0, n) on at most `threads` threads of this thread's pool, and returns
   when every index has run. n <= 0 calls nothing. Serial (one call fn(arg, 0, n, 0)) when
   threads <= 1, n == 1, no pool is in use on this thread, or from inside a body. */
void rg_cpu_for(int64_t n, int threads, rg_cpu_body fn, void *arg);

/* The thread count a context gets when rg_options.threads is 0: RG_THREADS when set to a
   positive number; else OMP_NUM_THREADS's first count, else the CPUs this process may run
   on, either capped by OMP_THREAD_LIMIT. (The OpenMP variables are read because programs
   that embed the library, R CMD check and PyTorch-side scripts among them, bound threads
   with them.) */
int rg_cpu_default_threads(void);

#endif
