/*
 * pool.c - the CPU backend's thread pool and its parallel for (pool.h).
 *
 * One job at a time: rg_cpu_for posts it under the mutex (function, argument, range,
 * chunk count) and bumps the epoch. Chunks are claimed by compare-and-swap on `next`,
 * which holds the job's epoch (low 32 bits) beside the next chunk's index, so a worker
 * that copied an earlier job and was descheduled before claiming cannot take a chunk of a
 * later one. `left` counts the chunks not yet finished; the caller returns when it is 0,
 * which orders every body's writes before the caller's next read (release/acquire).
 * Worker slots 1 .. parts-1 are given out under the mutex, so slots stay below the
 * caller's thread bound.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Chunks per thread of a job: a descheduled thread holds back at most one small chunk. */
#define CHUNKS_PER_THREAD 4
/* How long a worker looks for the next job, and a caller for the last chunks, before
   sleeping; kernels of one drain follow each other within this, so a step's jobs rarely
   pay for a wake-up. After the first SPIN_PAUSES checks each further one yields the core. */
#define SPIN_NS 50000
#define SPIN_PAUSES 256

struct rg_cpu_pool {
  int threads;
  int started; /* workers running */
  pthread_t *th;
  pthread_mutex_t mu;
  pthread_cond_t wake; /* workers wait here for a job or stop */
  pthread_cond_t done; /* a caller waits here for its job's last chunk */
  /* The job: written under mu by rg_cpu_for, copied under mu by workers. */
  rg_cpu_body fn;
  void *arg;
  int64_t n, nchunk;
  int parts, joined;       /* the thread bound; workers that took a slot */
  int sleepers;            /* under mu: workers waiting on wake */
  bool waiting;            /* under mu: a caller sleeps on done */
  atomic_bool stop;        /* written under mu, read by spinning workers too */
  atomic_uint epoch;       /* bumped by each job */
  atomic_uint_fast64_t next; /* (chunk index << 32) | epoch */
  atomic_llong left;       /* chunks of the job not yet finished */
};

static _Thread_local rg_cpu_pool *current;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The bounded spin: true once ready(p, v) holds, false when SPIN_NS passed without it. */
static bool spin(rg_cpu_pool *p, bool (*ready)(rg_cpu_pool *, unsigned), unsigned v) {
  int64_t end = 0;
  for (int i = 0;; i++) {
    if (ready(p, v)) return true;
    if (i < SPIN_PAUSES) {
      cpu_relax();
      continue;
    }
    if (!end) end = now_ns() + SPIN_NS;
    else if (now_ns() > end) return false;
    sched_yield();
  }
}
static bool new_job(rg_cpu_pool *p, unsigned seen) {
  return atomic_load_explicit(&p->epoch, memory_order_acquire) != seen ||
         atomic_load_explicit(&p->stop, memory_order_relaxed);
}
static bool job_done(rg_cpu_pool *p, unsigned unused) {
  (void)unused;
  return atomic_load_explicit(&p->left, memory_order_acquire) == 0;
}

/* Claims and runs chunks of the job of epoch `ep` until none is left. */
static void run_chunks(rg_cpu_pool *p, unsigned ep, rg_cpu_body fn, void *arg, int64_t n,
                       int64_t nchunk, int slot) {
  uint_fast64_t cur = atomic_load_explicit(&p->next, memory_order_relaxed);
  for (;;) {
    if ((unsigned)(cur & 0xffffffffu) != ep) return; /* a later job: not ours */
    int64_t c = (int64_t)(cur >> 32);
    if (c >= nchunk) return;
    if (!atomic_compare_exchange_weak(&p->next, &cur, cur + ((uint_fast64_t)1 << 32)))
      continue; /* cur reloaded */
    fn(arg, n * c / nchunk, n * (c + 1) / nchunk, slot);
    if (atomic_fetch_sub(&p->left, 1) == 1) { /* the job's last chunk */
      pthread_mutex_lock(&p->mu);
      if (p->waiting) pthread_cond_broadcast(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
    cur = atomic_load_explicit(&p->next, memory_order_relaxed);
  }
}

static void *worker(void *v) {
  rg_cpu_pool *p = v;
  unsigned seen = 0;
  for (;;) {
    spin(p, new_job, seen);
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->epoch) == seen && !atomic_load(&p->stop)) {
      p->sleepers++;
      pthread_cond_wait(&p->wake, &p->mu);
      p->sleepers--;
    }
    if (atomic_load(&p->stop)) {
      pthread_mutex_unlock(&p->mu);
      return NULL;
    }
    seen = atomic_load(&p->epoch);
    if (p->joined + 1 >= p->parts) { /* the job has all the threads it may use */
      pthread_mutex_unlock(&p->mu);
      continue;
    }
    int slot = ++p->joined;
    rg_cpu_body fn = p->fn;
    void *arg = p->arg;
    int64_t n = p->n, nchunk = p->nchunk;
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, seen, fn, arg, n, nchunk, slot);
  }
}

rg_cpu_pool *rg_cpu_pool_new(int threads, char *msg, size_t msgcap) {
  if (threads < 1) threads = 1;
  rg_cpu_pool *p = calloc(1, sizeof *p);
  if (p) p->th = calloc((size_t)threads, sizeof *p->th);
  if (!p || !p->th) {
    free(p);
    snprintf(msg, msgcap, "out of host memory for a pool of %d CPU threads", threads);
    return NULL;
  }
  p->threads = threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->epoch, 0);
  atomic_init(&p->next, 0);
  atomic_init(&p->left, 0);
  atomic_init(&p->stop, false);
  for (int i = 1; i < threads; i++) {
    int e = pthread_create(&p->th[i], NULL, worker, p);
    if (e) {
      snprintf(msg, msgcap, "could not start CPU thread %d of %d (%s): ask for fewer with "
               "rg_options.threads or RG_THREADS", i + 1, threads, strerror(e));
      rg_cpu_pool_free(p);
      return NULL;
    }
    p->started = i;
  }
  return p;
}

void rg_cpu_pool_free(rg_cpu_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i <= p->started; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->wake);
  pthread_mutex_destroy(&p->mu);
  if (current == p) current = NULL;
  free(p->th);
  free(p);
}

int rg_cpu_pool_threads(const rg_cpu_pool *p) { return p ? p->threads : 1; }

rg_cpu_pool *rg_cpu_pool_use(rg_cpu_pool *p) {
  rg_cpu_pool *old = current;
  current = p;
  return old;
}

void rg_cpu_for(int64_t n, int threads, rg_cpu_body fn, void *arg) {
  if (n <= 0) return;
  rg_cpu_pool *p = current;
  int parts = p ? p->threads : 1;
  if (threads < parts) parts = threads;
  if (n < parts) parts = (int)n;
  if (parts <= 1) {
    fn(arg, 0, n, 0);
    return;
  }
  int64_t nchunk = n < (int64_t)parts * CHUNKS_PER_THREAD ? n : (int64_t)parts * CHUNKS_PER_THREAD;
  pthread_mutex_lock(&p->mu);
  unsigned ep = atomic_load(&p->epoch) + 1;
  if (ep == 0) ep = 1; /* 0 is the epoch before any job, which workers have seen */
  p->fn = fn, p->arg = arg, p->n = n, p->nchunk = nchunk, p->parts = parts, p->joined = 0;
  atomic_store(&p->left, nchunk);
  atomic_store(&p->next, (uint_fast64_t)ep);
  atomic_store_explicit(&p->epoch, ep, memory_order_release);
  bool wake = p->sleepers > 0; /* spinning workers see the epoch without a wake-up */
  pthread_mutex_unlock(&p->mu);
  if (wake) pthread_cond_broadcast(&p->wake);

  current = NULL; /* a body's own rg_cpu_for runs serially */
  run_chunks(p, ep, fn, arg, n, nchunk, 0);
  current = p;
  if (!spin(p, job_done, 0)) {
    pthread_mutex_lock(&p->mu);
    p->waiting = true;
    while (atomic_load(&p->left) != 0) pthread_cond_wait(&p->done, &p->mu);
    p->waiting = false;
    pthread_mutex_unlock(&p->mu);
  }
}

/* The positive count an environment variable starts with (OMP_NUM_THREADS may be a list,
   "4,2"); 0 when unset or not a count. */
static int env_count(const char *name, bool whole) {
  const char *e = getenv(name);
  if (!e || !*e) return 0;
  char *end;
  long v = strtol(e, &end, 10);
  if (end == e || (whole ? *end != '\0' : (*end != '\0' && *end != ','))) return 0;
  return v > 0 && v <= 4096 ? (int)v : 0;
}

int rg_cpu_default_threads(void) {
  int n = env_count("RG_THREADS", true);
  if (n) return n;
  n = env_count("OMP_NUM_THREADS", false);
  if (!n) {
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n <= 0) {
      long c = sysconf(_SC_NPROCESSORS_ONLN);
      n = c > 0 && c <= 4096 ? (int)c : 1;
    }
  }
  int limit = env_count("OMP_THREAD_LIMIT", true);
  return limit && limit < n ? limit : n;
}
