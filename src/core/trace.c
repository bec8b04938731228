/*
 * trace.c - the trace file (rg_options.trace_path, RG_TRACE=<path>): events kept in a
 * buffer and written as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
 * chrome://tracing open (docs/trace.md).
 *
 * Invariants:
 *  - The file is a complete JSON document after every flush: the events written so far,
 *    then the closing brackets (TAIL), whose offset the next flush seeks back to and
 *    writes over. So a program that dies between flushes leaves a file that parses, with
 *    every event up to the last flush. A flush that fails (a full disk) writes TAIL back
 *    at its old offset and cuts what follows, so the file keeps the events before it.
 *  - Flushes come at the end of every drain, when the buffer passes FLUSH_BYTES, at
 *    rg_close, and at process exit for a context never closed (at_exit). A trace is
 *    written under its busy flag; at_exit only tries each flag once and skips a trace
 *    another thread holds (that file is still valid as of its last flush), so exiting
 *    never waits on, or races with, a thread that is using its context.
 *  - Timestamps are microseconds of the host's monotonic clock since the trace opened.
 *    Device spans (CUDA) are placed from the host time at which their first event was
 *    issued: their durations and their offsets from each other are the device's, their
 *    offset from the host spans is a lower bound.
 *  - Off, every hook is one test of ctx->trace. Only the host allocator and the sticky
 *    error are called from here (the leaf layer), so every layer may report events.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_BYTES ((size_t)1 << 20) /* a flush before the buffer grows past this */
#define TAIL "\n]}\n"

struct rg_trace {
  rg_ctx *ctx;
  FILE *f;
  char path[4096];
  char *buf;           /* events not yet written, each as ",\n{...}" */
  size_t len, cap;
  long tail;           /* file offset of TAIL: where the next flush writes */
  bool any;            /* an event is in the file (the next needs its comma) */
  bool dead;           /* a write failed, or at_exit wrote the last flush: no more */
  int werr;            /* errno of the failed write, not yet reported */
  double t0;           /* host clock at open, in microseconds */
  double rec;          /* when the first node of the queue was recorded, or -1 */
  uint64_t up, down;   /* bytes transferred, for the counter */
  uint64_t dropped;    /* events lost because the buffer could not grow */
  int pid;
  atomic_flag busy;
  struct rg_trace *next; /* the open traces, for at_exit and for clashing paths */
};

static atomic_flag g_lock = ATOMIC_FLAG_INIT; /* the list and the at_exit registration */
static rg_trace *g_open;
static bool g_registered;

static void lock(atomic_flag *f) {
  while (atomic_flag_test_and_set_explicit(f, memory_order_acquire)) {
  }
}
static void unlock(atomic_flag *f) { atomic_flag_clear_explicit(f, memory_order_release); }

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

double rg__trace_now(const rg_ctx *ctx) { return now_us() - ctx->trace->t0; }

const char *rg__drain_reason_name(rg_drain_reason why) {
  static const char *const reason[RG_DRAIN_REASON_COUNT] = {
      "read", "write", "sync", "step", "reset", "close", "guard", "check", "save"};
  return (unsigned)why < RG_DRAIN_REASON_COUNT ? reason[why] : "?";
}

/* ---- the buffer ------------------------------------------------------------------------ */

static void vappend(rg_trace *t, const char *fmt, va_list ap) {
  if (t->dead) return;
  for (int pass = 0; pass < 2; pass++) {
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, aq);
    va_end(aq);
    if (n < 0) return;
    if (t->buf && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap;
    if (!rg__grow(t->ctx, (void **)&t->buf, 1, t->len + (size_t)n + 1, &cap)) break;
    t->cap = cap;
  }
  t->dropped++;
}

static void append(rg_trace *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vappend(t, fmt, ap);
  va_end(ap);
}

/* s as a JSON string, quotes included, cut to fit cap. */
static void json_str(char *out, size_t cap, const char *s) {
  size_t o = 0;
  out[o++] = '"';
  for (; *s && o + 8 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') out[o++] = '\\', out[o++] = (char)c;
    else if (c < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
    else out[o++] = (char)c;
  }
  out[o++] = '"';
  out[o] = 0;
}

/* Writes the buffer after the events in the file, then TAIL. Caller holds busy. */
static void flush_locked(rg_trace *t) {
  if (t->dead || !t->len) return;
  const char *p = t->buf;
  size_t n = t->len;
  if (!t->any) p += 2, n -= 2; /* the first event has no comma before it */
  errno = 0;
  bool ok = fseek(t->f, t->tail, SEEK_SET) == 0 && fwrite(p, 1, n, t->f) == n &&
            fputs(TAIL, t->f) >= 0 && fflush(t->f) == 0;
  t->len = 0;
  if (!ok) { /* part of it may be in the file: put TAIL back where it was, cut the rest */
    t->werr = errno ? errno : EIO;
    t->dead = true;
    clearerr(t->f);
    /* Best effort: the write already failed and is reported; a failed cut changes
       nothing more (the file's valid prefix ends at TAIL either way). */
    if (fseek(t->f, t->tail, SEEK_SET) == 0 && fputs(TAIL, t->f) >= 0 && fflush(t->f) == 0 &&
        ftruncate(fileno(t->f), (off_t)t->tail + (off_t)strlen(TAIL)) != 0)
      t->werr = t->werr ? t->werr : errno;
    return;
  }
  t->tail += (long)n;
  t->any = true;
}

/* A failed write, said once through the sticky error. */
static void report(rg_trace *t) {
  if (!t->werr) return;
  rg__fail(t->ctx, RG_ERR_IO, "trace", "writing the trace file \"%s\" failed (%s); tracing "
           "stopped and the file holds the events up to the last complete write: free "
           "space or choose another path (rg_options.trace_path, RG_TRACE)", t->path,
           strerror(t->werr));
  t->werr = 0;
}

void rg__trace_flush(rg_ctx *ctx) {
  rg_trace *t = ctx->trace;
  lock(&t->busy);
  flush_locked(t);
  unlock(&t->busy);
  report(t);
}

/* ---- events ------------------------------------------------------------------------ */

void rg__trace_event(rg_ctx *ctx, char ph, int track, const char *name, double ts, double dur,
                     const char *args, ...) {
  rg_trace *t = ctx->trace;
  lock(&t->busy);
  size_t mark = t->len;
  uint64_t lost = t->dropped;
  char nm[160];
  json_str(nm, sizeof nm, name);
  append(t, ",\n{\"ph\":\"%c\",\"name\":%s,\"pid\":%d,\"tid\":%d,", ph, nm, t->pid,
         track);
  if (ph == 'i') append(t, "\"s\":\"t\",");
  append(t, "\"ts\":%.3f,", ts);
  if (ph == 'X') append(t, "\"dur\":%.3f,", dur > 0 ? dur : 0.0);
  append(t, "\"args\":{");
  if (args) {
    va_list ap;
    va_start(ap, args);
    vappend(t, args, ap);
    va_end(ap);
  }
  append(t, "}}");
  if (t->dropped != lost) t->len = mark; /* no half event */
  if (t->len >= FLUSH_BYTES) flush_locked(t);
  unlock(&t->busy);
  report(t);
}

void rg__trace_op(rg_ctx *ctx, size_t k, double ts, double dur) {
  const rg_node *n = &ctx->nodes[k];
  char lab[300], shape[96] = "";
  json_str(lab, sizeof lab, rg__label_str(ctx, n->label));
  if (n->out[0]) {
    const rg_tinfo *ti = rg__t(ctx, n->out[0]);
    size_t o = 0;
    for (int d = 0; d < ti->ndim && o + 24 < sizeof shape; d++)
      o += (size_t)snprintf(shape + o, sizeof shape - o, "%s%lld", d ? "x" : "",
                            (long long)ti->dims[d]);
  }
  rg__trace_event(ctx, 'X', RG_TRACK_DEVICE, rg_optab[n->op].kernel, ts, dur,
                  "\"call\":\"%s\",\"label\":%s,\"node\":%zu,\"shape\":\"%s\"",
                  rg_optab[n->op].name, lab, k, shape);
}

void rg__trace_recorded(rg_ctx *ctx) {
  if (ctx->trace->rec < 0) ctx->trace->rec = rg__trace_now(ctx);
}

void rg__trace_drain(rg_ctx *ctx, rg_drain_reason why, size_t first, size_t last, double ts,
                     rg_status st, size_t failed) {
  rg_trace *t = ctx->trace;
  double end = rg__trace_now(ctx);
  if (t->rec >= 0 && t->rec <= ts)
    rg__trace_event(ctx, 'X', RG_TRACK_HOST, "record", t->rec, ts - t->rec, "\"nodes\":%zu",
                    last - first);
  t->rec = -1;
  if (st == RG_OK || failed < first || failed >= last) {
    rg__trace_event(ctx, 'X', RG_TRACK_HOST, "drain", ts, end - ts,
                    "\"reason\":\"%s\",\"nodes\":%zu,\"first\":%zu,\"status\":\"%s\"",
                    rg__drain_reason_name(why), last - first, first, rg_status_str(st));
  } else {
    const rg_node *n = &ctx->nodes[failed];
    char lab[300];
    json_str(lab, sizeof lab, rg__label_str(ctx, n->label));
    rg__trace_event(ctx, 'X', RG_TRACK_HOST, "drain", ts, end - ts,
                    "\"reason\":\"%s\",\"nodes\":%zu,\"first\":%zu,\"status\":\"%s\","
                    "\"failed_node\":%zu,\"failed_op\":\"%s\",\"failed_label\":%s",
                    rg__drain_reason_name(why), last - first, first, rg_status_str(st),
                    failed, rg_optab[n->op].kernel, lab);
  }
  rg__trace_event(ctx, 'C', RG_TRACK_HOST, "pool bytes", end, 0,
                  "\"pass\":%zu,\"persistent\":%zu", ctx->pool[RG_POOL_PASS].bytes,
                  ctx->pool[RG_POOL_PERSISTENT].bytes);
  rg__trace_flush(ctx);
}

void rg__trace_xfer(rg_ctx *ctx, bool down, rg_site site, size_t bytes) {
  static const char *const name[RG_SITE_COUNT] = {"input", "write", "param_init", "optim",
                                                  "read", "checkpoint", "rng"};
  rg_trace *t = ctx->trace;
  double ts = rg__trace_now(ctx);
  *(down ? &t->down : &t->up) += bytes;
  rg__trace_event(ctx, 'i', RG_TRACK_HOST, down ? "transfer down" : "transfer up", ts, 0,
                  "\"bytes\":%zu,\"site\":\"%s\"", bytes,
                  (unsigned)site < RG_SITE_COUNT ? name[site] : "?");
  rg__trace_event(ctx, 'C', RG_TRACK_HOST, "transferred bytes", ts, 0,
                  "\"up\":%llu,\"down\":%llu", (unsigned long long)t->up,
                  (unsigned long long)t->down);
}

void rg__trace_arena(rg_ctx *ctx, const rg_arena *a, const char *what, size_t bytes,
                     double ts, bool ok) {
  const char *which = a == &ctx->stage ? "staging"
                      : a == &ctx->pool[RG_POOL_PERSISTENT].arena ? "persistent" : "pass";
  double end = rg__trace_now(ctx);
  rg__trace_event(ctx, 'X', RG_TRACK_HOST, what, ts, end - ts,
                  "\"arena\":\"%s\",\"bytes\":%zu,\"ok\":%s", which, bytes,
                  ok ? "true" : "false");
  rg__trace_event(ctx, 'C', RG_TRACK_HOST, "reserved bytes", end, 0,
                  "\"pass\":%zu,\"persistent\":%zu,\"staging\":%zu",
                  ctx->pool[RG_POOL_PASS].arena.reserved,
                  ctx->pool[RG_POOL_PERSISTENT].arena.reserved, ctx->stage.reserved);
}

/* ---- open and close ---------------------------------------------------------------- */

/* When the process ends, every trace still open (its context never closed) gets its last
   flush; not in a forked child, whose copies of its parent's traces are the parent's to
   write. */
static void at_exit(void) {
  if (atomic_flag_test_and_set_explicit(&g_lock, memory_order_acquire)) return;
  for (rg_trace *t = g_open; t; t = t->next) {
    if (t->pid != (int)getpid()) continue;
    if (atomic_flag_test_and_set_explicit(&t->busy, memory_order_acquire)) continue;
    if (!t->dead) {
      append(t, ",\n{\"ph\":\"i\",\"name\":\"exit without rg_close\",\"pid\":%d,\"tid\":%d,"
             "\"s\":\"g\",\"ts\":%.3f,\"args\":{}}", t->pid, RG_TRACK_HOST, now_us() - t->t0);
      flush_locked(t);
    }
    t->dead = true; /* the busy flag stays taken: nothing more is written */
  }
}

/* path, or when an open trace of this process already writes it, "stem-N.ext" for the
   smallest free N from 2. Caller holds g_lock. false if none is free. */
static bool free_path(char *out, size_t cap, const char *path) {
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : path))
    dot = path + strlen(path); /* no extension (a leading dot starts a name) */
  for (int k = 1; k < 1000; k++) {
    if (k == 1) snprintf(out, cap, "%s", path);
    else snprintf(out, cap, "%.*s-%d%s", (int)(dot - path), path, k, dot);
    bool taken = false;
    for (rg_trace *t = g_open; t && !taken; t = t->next) taken = !strcmp(t->path, out);
    if (!taken) return true;
  }
  return false;
}

rg_status rg__trace_open(rg_ctx *ctx, const char *path) {
  if (strlen(path) >= sizeof ctx->trace->path - 8)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_open", "the trace path (rg_options.trace_path or "
                    "RG_TRACE) is %zu bytes long; use a shorter one", strlen(path));
  rg_trace *t = rg__calloc(ctx, 1, sizeof *t);
  if (!t) return rg__fail(ctx, RG_ERR_OOM, "rg_open", "out of host memory for the trace");
  t->ctx = ctx;
  t->rec = -1;
  t->pid = (int)getpid();
  atomic_flag_clear(&t->busy);
  lock(&g_lock);
  bool named = free_path(t->path, sizeof t->path, path);
  t->f = named ? fopen(t->path, "w") : NULL;
  int e = errno;
  if (t->f) {
    t->next = g_open, g_open = t;
    if (!g_registered) g_registered = atexit(at_exit) == 0;
  }
  unlock(&g_lock);
  if (!t->f) {
    rg__free(ctx, t);
    return rg__fail(ctx, RG_ERR_IO, "rg_open", "cannot open the trace file \"%s\" for writing "
                    "(%s): check that its directory exists and is writable, or change "
                    "rg_options.trace_path or RG_TRACE", path,
                    named ? strerror(e) : "too many open traces of that name");
  }
  if (strcmp(t->path, path) && !ctx->opt.quiet)
    rg__notice("resgrad: another context writes the trace \"%s\"; this one writes \"%s\"",
               path, t->path);
  ctx->trace = t;
  ctx->opt.trace_path = t->path;
  t->t0 = now_us();
  char dev[200];
  json_str(dev, sizeof dev, ctx->devname);
  int hdr = fprintf(t->f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"library\":\"resgrad "
                    RG_VERSION_STRING "\",\"device\":%s},\"traceEvents\":[\n", dev);
  t->tail = hdr > 0 ? (long)hdr : 0;
  char name[260];
  snprintf(name, sizeof name, "resgrad on %s", ctx->devname);
  json_str(dev, sizeof dev, name);
  append(t, ",\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":"
         "{\"name\":%s}}", t->pid, dev);
  append(t, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":"
         "{\"name\":\"host: record, drain, transfers, allocations\"}}", t->pid, RG_TRACK_HOST);
  append(t, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":"
         "{\"name\":\"%s\"}}", t->pid, RG_TRACK_DEVICE,
         ctx->dev == &rg_cuda_backend ? "device: ops and graphs (device time)"
                                      : "kernels: ops (host time)");
  if (hdr < 0) t->werr = errno ? errno : EIO, t->dead = true;
  rg__trace_flush(ctx);
  return t->dead ? RG_ERR_IO : RG_OK;
}

rg_status rg__trace_close(rg_ctx *ctx) {
  rg_trace *t = ctx->trace;
  if (!t) return RG_OK;
  if (t->dropped)
    rg__trace_event(ctx, 'i', RG_TRACK_HOST, "events dropped", rg__trace_now(ctx), 0,
                    "\"count\":%llu,\"why\":\"out of host memory\"",
                    (unsigned long long)t->dropped);
  lock(&g_lock);
  for (rg_trace **p = &g_open; *p; p = &(*p)->next)
    if (*p == t) {
      *p = t->next;
      break;
    }
  unlock(&g_lock);
  lock(&t->busy);
  flush_locked(t);
  if (fclose(t->f) != 0 && !t->dead) t->werr = errno ? errno : EIO, t->dead = true;
  unlock(&t->busy);
  report(t);
  bool bad = t->dead;
  ctx->trace = NULL;
  ctx->opt.trace_path = NULL;
  rg__free(ctx, t->buf);
  rg__free(ctx, t);
  return bad ? RG_ERR_IO : RG_OK;
}
