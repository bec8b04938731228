/*
 * data.c - token datasets (rg_data_*): a file memory-mapped and checked once at open,
 * batches cut from it as a pure function of their number, and a worker thread that
 * gathers the next batch while the caller runs the current step.
 *
 * Invariants:
 *  - After rg_data_open returns a handle, every token of the file is below the handle's
 *    vocabulary and the file's size is exactly what its format says: a batch never reads
 *    outside the map and never yields a token the model cannot embed.
 *  - Batch n's rows are a function of (seed, n, B, T, world, rank, mode) alone
 *    (row_start), so prefetching, seeking and resuming change no value.
 *  - The worker touches only the map (read-only) and the handle's buffer, and only
 *    between a request (job REQUESTED) and its answer (job DONE), under the handle's
 *    mutex; the calling thread touches the buffer only when the job is IDLE or DONE.
 *    The worker never calls into the context.
 *  - The uploads read a copy of the buffer in the pass's staging (rg_input), so the
 *    buffer is free again as soon as rg_data_batch returns: the worker's gathering of
 *    batch n + 1 and the device's reading of batch n touch different memory.
 */
#define _POSIX_C_SOURCE 200809L /* mmap, fstat, pthreads */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLMC_MAGIC 20240520
#define LLMC_VERSION 1
#define LLMC_HEADER 1024 /* 256 int32 */

enum { JOB_IDLE, JOB_REQUESTED, JOB_DONE };

/* What identifies a batch's contents, besides the handle's own file, seed and rank. */
typedef struct plan { int64_t n, B, T; int random; } plan;

struct rg_data {
  rg_ctx *ctx;
  char *path;
  const unsigned char *map;   /* the whole file, read-only */
  size_t map_bytes;
  const unsigned char *tok;   /* the first token */
  int width;                  /* bytes per token: 1 (raw) or 2 (llm.c, little-endian) */
  int64_t n;                  /* tokens */
  rg_data_format format;
  uint64_t seed;
  int world, rank;
  int64_t next;               /* the number of the next batch */
  plan last;                  /* the last batch taken (B == 0: none yet) */
  int32_t *buf;               /* one batch: idx [B, T], then targets [B, T] */
  size_t cap;                 /* int32 elements buf holds */
  bool threaded;              /* a worker runs: mu, cv and thread are live */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int job;                    /* JOB_*, under mu */
  bool quit;                  /* under mu: the worker ends */
  plan want;                  /* the requested batch (under mu until the job is DONE) */
  rg_data *next_open;         /* the context's list, so rg_close frees forgotten handles */
};

static inline int32_t token_at(const rg_data *d, int64_t i) {
  const unsigned char *p = d->tok + (size_t)i * (size_t)d->width;
  return d->width == 1 ? p[0] : (int32_t)(p[0] | (uint32_t)p[1] << 8);
}

static inline int64_t read_i32le(const unsigned char *p) {
  return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                   (uint32_t)p[3] << 24);
}

static bool same_plan(const plan *a, const plan *b) {
  return a->n == b->n && a->B == b->B && a->T == b->T && a->random == b->random;
}

/* Sequential batches per epoch for global batches of g rows of T tokens. */
static int64_t epoch_batches(const rg_data *d, int64_t g, int64_t T) {
  return (d->n - 1) / (g * T);
}

/* The first token of this rank's row b of batch p. */
static int64_t row_start(const rg_data *d, const plan *p, int64_t b) {
  int64_t g = (int64_t)d->world * p->B, row = (int64_t)d->rank * p->B + b;
  if (p->random) {
    uint32_t r[4];
    rg_philox(d->seed, (uint64_t)p->n, (uint64_t)row, r);
    uint64_t x = (uint64_t)r[0] << 32 | r[1];
    return (int64_t)(x % (uint64_t)(d->n - p->T));
  }
  int64_t k = p->n % epoch_batches(d, g, p->T);
  return (k * g + row) * p->T;
}

/* Writes batch p into buf: idx rows, then targets rows. */
static void gather(const rg_data *d, const plan *p, int32_t *buf) {
  int32_t *idx = buf, *tgt = buf + p->B * p->T;
  for (int64_t b = 0; b < p->B; b++) {
    int64_t s = row_start(d, p, b);
    int32_t *x = idx + b * p->T, *y = tgt + b * p->T;
    int32_t prev = token_at(d, s);
    for (int64_t t = 0; t < p->T; t++) {
      int32_t nx = token_at(d, s + t + 1);
      x[t] = prev;
      y[t] = nx;
      prev = nx;
    }
  }
}

static void *worker(void *arg) {
  rg_data *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (d->job != JOB_REQUESTED && !d->quit) pthread_cond_wait(&d->cv, &d->mu);
    if (d->quit) break;
    plan p = d->want;
    pthread_mutex_unlock(&d->mu);
    gather(d, &p, d->buf);
    pthread_mutex_lock(&d->mu);
    d->job = JOB_DONE;
    pthread_cond_broadcast(&d->cv);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* Waits until the worker is not gathering; returns whether buf holds d->want. */
static bool wait_worker(rg_data *d) {
  if (!d->threaded) return false;
  pthread_mutex_lock(&d->mu);
  while (d->job == JOB_REQUESTED) pthread_cond_wait(&d->cv, &d->mu);
  bool done = d->job == JOB_DONE;
  d->job = JOB_IDLE;
  pthread_mutex_unlock(&d->mu);
  return done;
}

static void start_worker(rg_data *d) {
  if (pthread_mutex_init(&d->mu, NULL)) return;
  if (pthread_cond_init(&d->cv, NULL)) {
    pthread_mutex_destroy(&d->mu);
    return;
  }
  /* Without a thread (the system refused one) every batch is gathered by the caller:
     the same values, only no overlap. */
  if (pthread_create(&d->thread, NULL, worker, d)) {
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    return;
  }
  d->threaded = true;
}

static void stop_worker(rg_data *d) {
  if (!d->threaded) return;
  pthread_mutex_lock(&d->mu);
  d->quit = true;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  d->threaded = false;
}

/* ---- opening ------------------------------------------------------------------------- */

/* Maps the file; on failure RG_ERR_IO with the system's reason. */
static rg_status map_file(rg_ctx *ctx, rg_data *d) {
  int fd = open(d->path, O_RDONLY);
  struct stat st;
  const char *why = NULL;
  int e = 0;
  if (fd < 0) e = errno, why = "cannot open it";
  else if (fstat(fd, &st)) e = errno, why = "cannot stat it";
  else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
  else if (st.st_size == 0) why = "it is empty: it holds no tokens";
  if (!why) {
    d->map_bytes = (size_t)st.st_size;
    void *m = mmap(NULL, d->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) e = errno, why = "cannot map it";
    else d->map = m;
  }
  if (fd >= 0) close(fd); /* the map keeps the file */
  if (!why) return RG_OK;
  return rg__fail(ctx, RG_ERR_IO, "rg_data_open", "'%s': %s%s%s; give a readable token "
                  "file", d->path, why, e ? ": " : "", e ? strerror(e) : "");
}

/* Reads the format from the map: where the tokens are and how many. */
static rg_status read_layout(rg_ctx *ctx, rg_data *d, rg_data_format want) {
  const char *call = "rg_data_open";
  bool magic = d->map_bytes >= 4 && read_i32le(d->map) == LLMC_MAGIC;
  if (want == RG_DATA_AUTO) want = magic ? RG_DATA_LLMC : RG_DATA_RAW;
  d->format = want;
  if (want == RG_DATA_RAW) {
    d->tok = d->map, d->width = 1, d->n = (int64_t)d->map_bytes;
    return RG_OK;
  }
  if (d->map_bytes < LLMC_HEADER)
    return rg__fail(ctx, RG_ERR_IO, call, "'%s' has %zu bytes, fewer than an llm.c token "
                    "file's header of 1024 (256 int32): it is truncated or not such a file",
                    d->path, d->map_bytes);
  if (!magic)
    return rg__fail(ctx, RG_ERR_IO, call, "'%s' does not start with llm.c's magic %d (its "
                    "first int32 is %lld): not an llm.c token file; open it as raw bytes "
                    "(RG_DATA_RAW) if that is what it is", d->path, LLMC_MAGIC,
                    (long long)read_i32le(d->map));
  int64_t version = read_i32le(d->map + 4), n = read_i32le(d->map + 8);
  if (version != LLMC_VERSION)
    return rg__fail(ctx, RG_ERR_IO, call, "'%s' is llm.c token file version %lld; only "
                    "version %d (uint16 tokens) is read", d->path, (long long)version,
                    LLMC_VERSION);
  if (n <= 0)
    return rg__fail(ctx, RG_ERR_IO, call, "'%s': its header says it holds %lld tokens; "
                    "a token file needs at least one", d->path, (long long)n);
  uint64_t want_bytes = LLMC_HEADER + 2 * (uint64_t)n;
  if ((uint64_t)d->map_bytes != want_bytes)
    return rg__fail(ctx, RG_ERR_IO, call, "'%s' has %zu bytes but its header's %lld tokens "
                    "need exactly %llu (1024 of header, 2 a token): the file is %s", d->path,
                    d->map_bytes, (long long)n, (unsigned long long)want_bytes,
                    (uint64_t)d->map_bytes < want_bytes ? "truncated"
                                                        : "longer than its header says");
  d->tok = d->map + LLMC_HEADER, d->width = 2, d->n = n;
  return RG_OK;
}

/* Every token below vocab; else RG_ERR_IO naming the first that is not. */
static rg_status check_tokens(rg_ctx *ctx, const rg_data *d, int64_t vocab) {
  if (vocab >= (d->width == 1 ? 256 : 65536)) return RG_OK; /* the format bounds them */
  for (int64_t i = 0; i < d->n; i++) {
    int32_t v = token_at(d, i);
    if (v >= vocab)
      return rg__fail(ctx, RG_ERR_IO, "rg_data_open", "'%s': token %lld (counting from 0) "
                      "is %d, not below the vocabulary size %lld: the file was made for "
                      "another vocabulary, or the vocabulary given is too small",
                      d->path, (long long)i, (int)v, (long long)vocab);
  }
  return RG_OK;
}

static rg_status check_options(rg_ctx *ctx, const rg_data_options *o) {
  const char *call = "rg_data_open";
  if (o->format != RG_DATA_AUTO && o->format != RG_DATA_RAW && o->format != RG_DATA_LLMC)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "format %d is not RG_DATA_AUTO, RG_DATA_RAW "
                    "or RG_DATA_LLMC", (int)o->format);
  if (o->vocab < 0 || o->vocab > 65536)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "vocab %lld is not in [0, 65536] (0: the "
                    "format's own bound)", (long long)o->vocab);
  if (o->format == RG_DATA_RAW && o->vocab > 256)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "vocab %lld: raw bytes have at most 256 "
                    "tokens", (long long)o->vocab);
  if (o->world < 0 || (o->world == 0 && o->rank != 0) ||
      (o->world > 0 && (o->rank < 0 || o->rank >= o->world)))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "rank %d of world %d: want 0 <= rank < world "
                    "(or both 0)", o->rank, o->world);
  return RG_OK;
}

rg_data *rg_data_open(rg_ctx *ctx, const char *path, const rg_data_options *opt) {
  if (!ctx) return NULL;
  rg_data_options o = opt ? *opt : (rg_data_options){0};
  if (!path) return rg__fail(ctx, RG_ERR_MISUSE, "rg_data_open", "path is NULL"), NULL;
  if (check_options(ctx, &o) != RG_OK) return NULL;
  rg_data *d = rg__calloc(ctx, 1, sizeof *d);
  if (d) d->path = rg__strdup(ctx, path);
  if (!d || !d->path) {
    rg__free(ctx, d);
    return rg__fail(ctx, RG_ERR_OOM, "rg_data_open", "out of host memory"), NULL;
  }
  d->ctx = ctx;
  d->seed = o.seed;
  d->world = o.world ? o.world : 1;
  d->rank = o.rank;
  rg_status st = map_file(ctx, d);
  if (st == RG_OK) st = read_layout(ctx, d, o.format);
  if (st == RG_OK) st = check_tokens(ctx, d, o.vocab ? o.vocab : 65536);
  if (st == RG_OK && d->n < 2)
    st = rg__fail(ctx, RG_ERR_IO, "rg_data_open", "'%s' holds %lld token: a row needs at "
                  "least 2 (an input and its target)", path, (long long)d->n);
  if (st != RG_OK) {
    if (d->map) munmap((void *)d->map, d->map_bytes);
    rg__free(ctx, d->path);
    rg__free(ctx, d);
    return NULL;
  }
  if (!o.no_prefetch) start_worker(d);
  d->next_open = ctx->datas;
  ctx->datas = d;
  return d;
}

/* ---- batches ------------------------------------------------------------------------- */

rg_status rg_data_batch(rg_data *d, int64_t B, int64_t T, int random, rg_tensor *idx,
                        rg_tensor *targets) {
  if (!d) return RG_ERR_MISUSE;
  rg_ctx *ctx = d->ctx;
  const char *call = "rg_data_batch";
  if (idx) *idx = RG_NONE;
  if (targets) *targets = RG_NONE;
  if (!idx || !targets) return rg__fail(ctx, RG_ERR_MISUSE, call, "idx or targets is NULL");
  if (B < 1 || T < 1)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "B %lld and T %lld must both be at least 1",
                    (long long)B, (long long)T);
  int64_t g = (int64_t)d->world * B;
  if (B > INT64_MAX / d->world || g > (d->n - 1) / T)
    return rg__fail(ctx, RG_ERR_MISUSE, call, "a batch of %lld x %lld tokens%s needs %s "
                    "tokens of '%s', which holds %lld; use a smaller batch or sequence",
                    (long long)B, (long long)T, d->world > 1 ? " on every rank" : "",
                    "B * T * world + 1", d->path, (long long)d->n);
  plan p = {d->next, B, T, random != 0};
  size_t need = 2 * (size_t)B * (size_t)T; /* fits: B * T < n, a file's size */
  bool ready = wait_worker(d) && same_plan(&d->want, &p);
  if (need > d->cap) {
    int32_t *nb = rg__realloc(ctx, d->buf, need * sizeof *nb);
    if (!nb) return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for a batch");
    d->buf = nb, d->cap = need, ready = false;
  }
  if (!ready) gather(d, &p, d->buf);
  int64_t dims[2] = {B, T};
  rg_tensor x = rg_input(ctx, RG_I32, 2, dims, d->buf);
  rg_tensor y = rg_is_live(ctx, x) ? rg_input(ctx, RG_I32, 2, dims, d->buf + B * T) : RG_NONE;
  if (!rg_is_live(ctx, y)) return ctx->err != RG_OK ? ctx->err : RG_ERR_OOM;
  *idx = x, *targets = y;
  d->last = p;
  d->next++;
  if (d->threaded) {
    pthread_mutex_lock(&d->mu);
    d->want = (plan){d->next, B, T, p.random};
    d->job = JOB_REQUESTED;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
  }
  return RG_OK;
}

rg_status rg_data_seek(rg_data *d, int64_t batch) {
  if (!d) return RG_ERR_MISUSE;
  if (batch < 0)
    return rg__fail(d->ctx, RG_ERR_MISUSE, "rg_data_seek", "batch %lld is negative",
                    (long long)batch);
  d->next = batch; /* a prefetched batch of another number is not used (rg_data_batch) */
  return RG_OK;
}

int64_t rg_data_tokens(const rg_data *d) { return d ? d->n : 0; }
int64_t rg_data_next(const rg_data *d) { return d ? d->next : 0; }
rg_data_format rg_data_format_of(const rg_data *d) { return d ? d->format : RG_DATA_AUTO; }

int64_t rg_data_epoch(const rg_data *d) {
  if (!d || !d->last.B) return 0;
  int64_t g = (int64_t)d->world * d->last.B;
  if (!d->last.random) return d->next / epoch_batches(d, g, d->last.T);
  /* Tokens drawn over N, in floating point: the product may pass 2^63. */
  return (int64_t)((double)d->next * (double)g * (double)d->last.T / (double)d->n);
}

void rg_data_free(rg_data *d) {
  if (!d) return;
  rg_ctx *ctx = d->ctx;
  for (rg_data **p = &ctx->datas; *p; p = &(*p)->next_open)
    if (*p == d) {
      *p = d->next_open;
      break;
    }
  stop_worker(d);
  munmap((void *)d->map, d->map_bytes);
  rg__free(ctx, d->buf);
  rg__free(ctx, d->path);
  rg__free(ctx, d);
}
