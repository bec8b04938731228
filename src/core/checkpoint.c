/*
 * checkpoint.c - rg_save / rg_load in the safetensors format: an 8-byte little-endian
 * header length, a JSON header {"name": {"dtype", "shape", "data_offsets"}, ...,
 * "__metadata__": {...}}, then raw little-endian data.
 *
 * Invariants:
 *  - A save writes a temporary file in the target's directory, flushes and fsyncs it and
 *    renames it over the target: a crash leaves the old file or the new one. The target
 *    is the path, or the final target of a symbolic link (so the link stays one); a path
 *    that exists and is not a regular file is refused.
 *  - Neither a save nor a load lets a NaN or Inf of an F32 or BF16 tensor through (unless
 *    rg_options.nonfinite_checkpoints): each tensor is checked once, on its bytes in host
 *    memory, while the save streams them or before the load uploads any.
 *  - A load validates everything (header length, JSON, names, dtypes, shapes, offsets
 *    inside the file, no overlaps, every expected tensor present) and reads all data
 *    into host memory before it changes any tensor: a bad file changes nothing.
 *  - Names: parameters by their own names; optimizer state as "optim.m.<name>",
 *    "optim.v.<name>", "optim.hyper" and "optim.step".
 *  - rg_st_open and rg_st_write read and write any safetensors file's tensors as host
 *    bytes with the same parser, checks and atomic write: rg_st_open validates the whole
 *    header (every dtype known, every shape's bytes equal to its offsets, offsets inside
 *    the file, no overlaps, no name twice) before it returns.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RG_FORMAT_VERSION "1"
#define MAX_HEADER ((uint64_t)64 << 20) /* a header this large is corrupt, not real */

/* One tensor of a checkpoint: where it lives in the context and in the file. */
typedef struct entry {
  char name[300];
  uint32_t ref;        /* the context's tensor, or 0 for bytes the caller gave (rg_st_write) */
  uint64_t begin, end; /* offsets in the data section */
  int found;
  int skip; /* optimizer state in a file loaded without an optimizer: checked, not read */
  /* What a save writes: dtype, shape and bytes (from the tensor, or the caller's). */
  const char *dtype;
  int ndim;
  int64_t dims[RG_ST_MAX_DIMS];
  uint64_t nbytes;
  const void *host;
} entry;

static const char *st_dtype(int dt) { return dt == RG_F32 ? "F32" : dt == RG_BF16 ? "BF16" : "I32"; }

/* The dtypes of the safetensors format and their element sizes; 0 for a name it lacks. */
static size_t st_size(const char *dt) {
  static const struct { const char *name; size_t size; } known[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8},     {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U64", 8},  {"U32", 4},  {"U16", 2},     {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (!strcmp(dt, known[i].name)) return known[i].size;
  return 0;
}

/* The bytes of a tensor of size-byte elements and this shape, or UINT64_MAX when they
   overflow 2^63. */
static uint64_t st_bytes(size_t size, int ndim, const uint64_t *dims) {
  uint64_t n = size;
  for (int d = 0; d < ndim; d++) {
    if (dims[d] && n > (UINT64_MAX >> 1) / dims[d]) return UINT64_MAX;
    n *= dims[d];
  }
  return n;
}

static void name_state(char *out, size_t cap, const char *kind, const char *pname) {
  snprintf(out, cap, "optim.%s.%s", kind, pname);
}

/* RG_ERR_NONFINITE, why naming the tensor and its first NaN or Inf, when p (numel
   elements of dtype) holds one and rg_options.nonfinite_checkpoints does not let it through. */
static rg_status all_finite(rg_ctx *ctx, const char *name, int dtype, int64_t numel, const void *p,
                            char *why, size_t cap) {
  float v;
  int64_t e = ctx->opt.nonfinite_checkpoints ? -1 : rg__nonfinite(p, dtype, numel, &v);
  if (e < 0) return RG_OK;
  snprintf(why, cap, "tensor \"%.200s\" element %lld is %s", name, (long long)e,
           rg__nonfinite_name(v));
  return RG_ERR_NONFINITE;
}

/* Every tensor a checkpoint of ctx (+ opt) holds, in a fixed order. */
/* The tensors a save writes (or a load expects), with room for `extra` more. */
static entry *collect(rg_ctx *ctx, const rg_optim *opt, int extra, int *count,
                      const char *call) {
  int n = ctx->nparams + extra;
  if (opt) n += opt->m.n + opt->v.n + 2;
  entry *e = rg__calloc(ctx, (size_t)(n ? n : 1), sizeof *e);
  if (!e) return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory"), NULL;
  int k = 0;
  for (int i = 0; i < ctx->nparams; i++, k++) {
    snprintf(e[k].name, sizeof e[k].name, "%s", ctx->pnames[i]);
    e[k].ref = ctx->prefs[i];
  }
  for (int i = 0; opt && i < opt->m.n; i++, k++) {
    name_state(e[k].name, sizeof e[k].name, "m", ctx->pnames[i]);
    e[k].ref = opt->m.ref[i];
  }
  for (int i = 0; opt && i < opt->v.n; i++, k++) {
    name_state(e[k].name, sizeof e[k].name, "v", ctx->pnames[i]);
    e[k].ref = opt->v.ref[i];
  }
  if (opt) {
    snprintf(e[k].name, sizeof e[k].name, "optim.hyper");
    e[k++].ref = opt->hyper;
    snprintf(e[k].name, sizeof e[k].name, "optim.step");
    e[k++].ref = opt->step;
  }
  for (int i = 0; i < k; i++) {
    const rg_tinfo *t = rg__t(ctx, e[i].ref);
    e[i].dtype = st_dtype(t->dtype);
    e[i].ndim = t->ndim;
    memcpy(e[i].dims, t->dims, sizeof t->dims);
    e[i].nbytes = t->nbytes;
  }
  *count = k;
  return e;
}

/* RG_OK, or RG_ERR_MISUSE when opt does not fit the model (this call's status, not an
   earlier sticky error). */
static rg_status optim_ok(rg_ctx *ctx, const rg_optim *opt, const char *call) {
  if (opt && (opt->ctx != ctx || opt->pgen != ctx->pool[RG_POOL_PERSISTENT].gen ||
              opt->params.n != ctx->nparams))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "the optimizer does not belong to this "
                    "context's current parameters (made in another context, before "
                    "rg_reset, or before parameters were added); create it after the model");
  return RG_OK;
}

/* ---- metadata ------------------------------------------------------------------------ */

static const char *const reserved[] = {"format", "format_version", "seed", "step", "optim"};

static bool is_reserved(const char *k) {
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(k, reserved[i])) return true;
  return false;
}

/* Sets key in the list (*m, *n pairs, *cap pairs). */
static rg_status meta_put(rg_ctx *ctx, char ***m, int *n, int *cap, const char *k,
                          const char *v) {
  char *vv = rg__strdup(ctx, v);
  if (!vv) return RG_ERR_OOM;
  for (int i = 0; i < *n; i++)
    if (!strcmp((*m)[2 * i], k)) {
      rg__free(ctx, (*m)[2 * i + 1]);
      (*m)[2 * i + 1] = vv;
      return RG_OK;
    }
  size_t c = (size_t)*cap * 2;
  char *kk = rg__strdup(ctx, k);
  if (!kk || !rg__grow(ctx, (void **)m, sizeof **m, (size_t)*n * 2 + 2, &c)) {
    rg__free(ctx, kk);
    rg__free(ctx, vv);
    return RG_ERR_OOM;
  }
  *cap = (int)(c / 2);
  (*m)[2 * *n] = kk;
  (*m)[2 * *n + 1] = vv;
  (*n)++;
  return RG_OK;
}

static void meta_free(rg_ctx *ctx, char **m, int n) {
  for (int i = 0; i < 2 * n; i++) rg__free(ctx, m[i]);
  rg__free(ctx, m);
}

rg_status rg_meta_set(rg_ctx *ctx, const char *key, const char *value) {
  if (!ctx) return RG_ERR_MISUSE;
  if (!key || !*key || strlen(key) > 255 || !value || strlen(value) > 1023)
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_meta_set", "the key must be 1..255 bytes and the "
                    "value non-NULL and at most 1023 bytes");
  if (is_reserved(key))
    return rg__fail(ctx, RG_ERR_MISUSE, "rg_meta_set", "\"%s\" is a key the library writes "
                    "itself; choose another", key);
  if (meta_put(ctx, &ctx->meta, &ctx->nmeta, &ctx->capmeta, key, value) != RG_OK)
    return rg__fail(ctx, RG_ERR_OOM, "rg_meta_set", "out of host memory");
  return RG_OK;
}

const char *rg_meta_get(rg_ctx *ctx, const char *key) {
  for (int i = 0; ctx && key && i < ctx->nmeta; i++)
    if (!strcmp(ctx->meta[2 * i], key)) return ctx->meta[2 * i + 1];
  return NULL;
}

/* ---- save ------------------------------------------------------------------------------- */

typedef struct sbuf { char *p; size_t n, cap; bool oom; rg_ctx *ctx; } sbuf;

static void put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (w < 0) { b->oom = true; return; }
    if (b->p && b->n + (size_t)w < b->cap) { b->n += (size_t)w; return; }
    size_t cap = b->cap ? b->cap : 1024;
    while (cap <= b->n + (size_t)w) cap *= 2;
    char *np = rg__realloc(b->ctx, b->p, cap);
    if (!np) { b->oom = true; return; }
    b->p = np;
    b->cap = cap;
  }
}

/* JSON string with the escapes the format needs; names are the user's. */
static void put_str(sbuf *b, const char *s) {
  put(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') put(b, "\\%c", c);
    else if (c < 0x20) put(b, "\\u%04x", c);
    else put(b, "%c", c);
  }
  put(b, "\"");
}

static rg_status write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return RG_ERR_IO;
    c += w;
    n -= (size_t)w;
  }
  return RG_OK;
}

/* The header's start for rg_save: '{' and the library's and the user's metadata. */
static sbuf library_meta(rg_ctx *ctx, const rg_optim *opt) {
  sbuf h = {.ctx = ctx};
  put(&h, "{\"__metadata__\":{\"format\":\"resgrad\",\"format_version\":\"" RG_FORMAT_VERSION
          "\",\"seed\":\"%llu\",\"step\":\"%llu\",\"optim\":\"%s\"}",
      (unsigned long long)ctx->opt.seed, (unsigned long long)ctx->step,
      !opt ? "none" : opt->kind == RG_OPT_ADAMW ? "adamw" : "sgd");
  if (!h.oom) h.n--; /* reopen __metadata__ for the user's keys */
  for (int i = 0; i < ctx->nmeta; i++) {
    put(&h, ",");
    put_str(&h, ctx->meta[2 * i]);
    put(&h, ":");
    put_str(&h, ctx->meta[2 * i + 1]);
  }
  put(&h, "}");
  return h;
}

/* Writes the n tensors of e to path atomically, after the header h holds so far (the
   opening '{' and any "__metadata__" member; save_to frees it). call names the caller in
   errors. */
static rg_status save_to(rg_ctx *ctx, const char *path, const char *call, sbuf h, entry *e,
                         int n) {
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    if (h.n > 1) put(&h, ",");
    put_str(&h, e[i].name);
    put(&h, ":{\"dtype\":\"%s\",\"shape\":[", e[i].dtype);
    for (int d = 0; d < e[i].ndim; d++) put(&h, "%s%lld", d ? "," : "", (long long)e[i].dims[d]);
    put(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
        (unsigned long long)(off + e[i].nbytes));
    off += e[i].nbytes;
  }
  put(&h, "}");
  while (!h.oom && h.n % 8) put(&h, " "); /* data starts 8-aligned, as the format advises */
  if (h.oom) {
    rg__free(ctx, h.p);
    return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory for the header");
  }
  size_t plen = strlen(path);
  char *tmp = rg__malloc(ctx, plen + 64);
  if (!tmp) {
    rg__free(ctx, h.p);
    return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory");
  }
  /* Unique per process, context and call, and created exclusively: two contexts (or
     threads) saving to one path never share a temporary file. */
  int fd = -1;
  for (int tries = 0; fd < 0 && tries < 100; tries++) { /* a stale file may hold a name */
    snprintf(tmp, plen + 64, "%s.tmp.%ld.%lx.%llu", path, (long)getpid(),
             (unsigned long)(uintptr_t)ctx, (unsigned long long)++ctx->saves);
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  rg_status st = fd < 0 ? RG_ERR_IO : RG_OK;
  const char *why = fd < 0 ? strerror(errno) : "";
  char bad[320] = "";
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
  if (st == RG_OK) st = write_all(fd, len, 8);
  if (st == RG_OK) st = write_all(fd, h.p, h.n);
  for (int i = 0; st == RG_OK && i < n; i++) {
    if (!e[i].ref) { /* the caller's bytes; F32 and BF16 are checked for NaN and Inf */
      size_t size = st_size(e[i].dtype);
      int dt = !strcmp(e[i].dtype, "F32") ? RG_F32 : !strcmp(e[i].dtype, "BF16") ? RG_BF16
                                                                                : RG_I32;
      st = all_finite(ctx, e[i].name, dt, (int64_t)(e[i].nbytes / size), e[i].host, bad,
                  sizeof bad);
      if (st == RG_OK) st = write_all(fd, e[i].host, (size_t)e[i].nbytes);
      continue;
    }
    rg_tinfo *t = rg__t(ctx, e[i].ref);
    void *buf = rg__malloc(ctx, t->nbytes ? t->nbytes : 1);
    if (!buf) {
      st = RG_ERR_OOM;
      break;
    }
    st = ctx->be->download(ctx, buf, t->data, t->nbytes);
    rg__count_xfer(ctx, true, RG_SITE_CHECKPOINT, t->nbytes);
    if (st == RG_OK) st = all_finite(ctx, e[i].name, t->dtype, t->numel, buf, bad, sizeof bad);
    if (st == RG_OK) st = write_all(fd, buf, t->nbytes);
    rg__free(ctx, buf);
  }
  if (st == RG_ERR_IO && fd >= 0) why = strerror(errno);
  if (st == RG_OK && fsync(fd) != 0) st = RG_ERR_IO, why = strerror(errno);
  if (fd >= 0 && close(fd) != 0 && st == RG_OK) st = RG_ERR_IO, why = strerror(errno);
  if (st == RG_OK && rename(tmp, path) != 0) st = RG_ERR_IO, why = strerror(errno);
  if (st != RG_OK) unlink(tmp);
  rg__free(ctx, tmp);
  rg__free(ctx, h.p);
  if (st == RG_ERR_NONFINITE)
    return rg__fail(ctx, st, call, "%s, so \"%s\" was not written (the previous file, if "
                    "any, is unchanged): %sset rg_options.nonfinite_checkpoints = 1 to save "
                    "it anyway", bad, path, strcmp(call, "rg_save") ? "" :
                    "training went non-finite before this save. Find where with "
                    "rg_set_check_finite, resume from an earlier checkpoint, or ");
  if (st != RG_OK)
    return rg__fail(ctx, st, call, "could not write \"%s\" (%s); the previous file, if any, "
                    "is unchanged", path, st == RG_ERR_OOM ? "out of host memory" : why);
  /* Make the rename durable: fsync the directory that holds the file. */
  char *dir = rg__strdup(ctx, path);
  if (dir) {
    char *slash = strrchr(dir, '/');
    if (slash) slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
    int dfd = open(slash ? dir : ".", O_RDONLY);
    if (dfd >= 0) {
      fsync(dfd);
      close(dfd);
    }
    rg__free(ctx, dir);
  }
  return RG_OK;
}

/* The file a save to path replaces: path, or the final target of a symbolic link (a
   rename over the link would make it a file). NULL (the error set) for a path that exists
   and is not a regular file: a rename over a directory fails, but over a FIFO or a
   device it replaces the node (as root, /dev/null itself). Freed with rg__free. */
static char *save_target(rg_ctx *ctx, const char *path, const char *call) {
  struct stat sb;
  if (lstat(path, &sb) != 0) { /* a new file, or a path the save reports as unwritable */
    char *p = rg__strdup(ctx, path);
    return p ? p : (rg__fail(ctx, RG_ERR_OOM, call, "out of host memory"), NULL);
  }
  bool link = S_ISLNK(sb.st_mode);
  char *target = link ? realpath(path, NULL) : rg__strdup(ctx, path);
  if (!target) {
    if (link)
      rg__fail(ctx, RG_ERR_IO, call, "\"%s\" is a symbolic link whose target cannot be "
               "resolved (%s); point it at an existing file, or remove it",
               path, strerror(errno));
    else
      rg__fail(ctx, RG_ERR_OOM, call, "out of host memory");
    return NULL;
  }
  if (stat(target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    rg__fail(ctx, RG_ERR_IO, call, "\"%s\" exists and is not a regular file (a "
             "directory, device or FIFO), which a checkpoint must not replace; nothing was "
             "written: give the path of a checkpoint file", target);
    rg__free(ctx, target);
    return NULL;
  }
  return target;
}

rg_status rg_save(rg_ctx *ctx, const char *path, const rg_optim *opt) {
  if (!ctx) return RG_ERR_MISUSE;
  if (ctx->opt.dry_run) return rg__dry_refuse(ctx, "rg_save");
  if (!path || !*path) return rg__fail(ctx, RG_ERR_MISUSE, "rg_save", "path is empty");
  rg_status st = optim_ok(ctx, opt, "rg_save");
  if (st == RG_OK) st = rg__drain(ctx, RG_DRAIN_SAVE);
  if (st != RG_OK || rg_dist_rank(ctx) != 0) return st; /* rank 0 writes for every rank */
  int n = 0;
  char *target = save_target(ctx, path, "rg_save");
  entry *e = target ? collect(ctx, opt, 0, &n, "rg_save") : NULL;
  st = e ? save_to(ctx, target, "rg_save", library_meta(ctx, opt), e, n) : ctx->last;
  rg__free(ctx, e);
  rg__free(ctx, target);
  return st;
}

/* ---- a strict JSON reader for the header ------------------------------------------------- */

typedef struct jr { const char *p, *end; char err[160]; bool oom; } jr;

static const char oom_msg[] = "out of host memory";

static bool jfail(jr *j, const char *what) {
  if (!j->err[0]) snprintf(j->err, sizeof j->err, "%s", what);
  return false;
}
static void ws(jr *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
    j->p++;
}
static bool lit(jr *j, char c) {
  ws(j);
  if (j->p < j->end && *j->p == c) {
    j->p++;
    return true;
  }
  return false;
}
/* A string into out (cap bytes, NUL-terminated); \uXXXX escapes below 0x80 only. */
static bool jstr(jr *j, char *out, size_t cap) {
  if (!lit(j, '"')) return jfail(j, "expected a string");
  size_t n = 0;
  while (j->p < j->end && *j->p != '"') {
    char c = *j->p++;
    if ((unsigned char)c < 0x20) return jfail(j, "control character in a string");
    if (c == '\\') {
      if (j->p >= j->end) break;
      char x = *j->p++;
      if (x == 'u') {
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
          if (j->p >= j->end) return jfail(j, "truncated \\u escape");
          char h = *j->p++;
          int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return jfail(j, "bad \\u escape");
          v = v * 16 + (unsigned)d;
        }
        if (v == 0 || v >= 0x80) return jfail(j, "unsupported \\u escape in a name");
        c = (char)v;
      } else {
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, x);
        if (!k || !x) return jfail(j, "bad escape in a string");
        c = to[k - from];
      }
    }
    if (n + 1 >= cap) return jfail(j, "a string is too long");
    out[n++] = c;
  }
  if (j->p >= j->end) return jfail(j, "unterminated string");
  j->p++;
  out[n] = 0;
  return true;
}
static bool juint(jr *j, uint64_t *v) {
  ws(j);
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail(j, "expected a number");
  if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
    return jfail(j, "a number has a leading zero");
  uint64_t x = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    if (x > (UINT64_MAX - 9) / 10) return jfail(j, "a number is too large");
    x = x * 10 + (uint64_t)(*j->p++ - '0');
  }
  *v = x;
  return true;
}
/* [n, n, ...] with at most cap entries. */
static bool jarray(jr *j, uint64_t *v, int cap, int *count) {
  *count = 0;
  if (!lit(j, '[')) return jfail(j, "expected an array");
  if (lit(j, ']')) return true;
  do {
    if (*count >= cap) return jfail(j, "an array is too long");
    if (!juint(j, &v[(*count)++])) return false;
  } while (lit(j, ','));
  return lit(j, ']') || jfail(j, "expected ']'");
}

typedef struct jtensor {
  char dtype[16];
  uint64_t shape[RG_ST_MAX_DIMS + 1], off[3];
  int ndim, noff;
} jtensor;

static bool jtensor_read(jr *j, jtensor *t) {
  memset(t, 0, sizeof *t);
  bool seen[3] = {0};
  if (!lit(j, '{')) return jfail(j, "expected a tensor object");
  if (lit(j, '}')) return jfail(j, "empty tensor object");
  do {
    char key[32];
    if (!jstr(j, key, sizeof key) || !lit(j, ':')) return jfail(j, "expected \"key\":");
    if (!strcmp(key, "dtype") && !seen[0]) {
      seen[0] = true;
      if (!jstr(j, t->dtype, sizeof t->dtype)) return false;
    } else if (!strcmp(key, "shape") && !seen[1]) {
      seen[1] = true;
      if (!jarray(j, t->shape, RG_ST_MAX_DIMS + 1, &t->ndim)) return false;
    } else if (!strcmp(key, "data_offsets") && !seen[2]) {
      seen[2] = true;
      if (!jarray(j, t->off, 3, &t->noff)) return false;
    } else {
      return jfail(j, "unknown or repeated key in a tensor object");
    }
  } while (lit(j, ','));
  if (!lit(j, '}')) return jfail(j, "expected '}'");
  if (!seen[0] || !seen[1] || !seen[2] || t->noff != 2)
    return jfail(j, "a tensor needs dtype, shape and data_offsets [begin, end]");
  return true;
}

/* The metadata read from a file, kept aside until the load commits. */
typedef struct jmeta {
  char **m;
  int n, cap;
  uint64_t step, seed;
  bool has_step, has_seed;
} jmeta;

/* With all, every key is kept as it is (rg_st_open); without, the library's own keys are
   read into step and seed and the rest dropped (rg_load). */
static bool jmetadata(rg_ctx *ctx, jr *j, jmeta *md, bool all) {
  if (!lit(j, '{')) return jfail(j, "__metadata__ must be an object");
  if (lit(j, '}')) return true;
  do {
    char k[256], v[1024];
    if (!jstr(j, k, sizeof k) || !lit(j, ':') || !jstr(j, v, sizeof v))
      return jfail(j, "__metadata__ holds string keys and string values");
    char *end;
    if (all) {
      if (meta_put(ctx, &md->m, &md->n, &md->cap, k, v) != RG_OK) {
        j->oom = true;
        return jfail(j, oom_msg);
      }
    } else if (!strcmp(k, "step")) {
      md->step = strtoull(v, &end, 10);
      md->has_step = *v && !*end;
    } else if (!strcmp(k, "seed")) {
      md->seed = strtoull(v, &end, 10);
      md->has_seed = *v && !*end;
    } else if (!is_reserved(k) && meta_put(ctx, &md->m, &md->n, &md->cap, k, v) != RG_OK) {
      j->oom = true;
      return jfail(j, oom_msg);
    }
  } while (lit(j, ','));
  return lit(j, '}') || jfail(j, "expected '}' after __metadata__");
}

/* ---- load ----------------------------------------------------------------------------------- */

static int cmp_begin(const void *a, const void *b) {
  const entry *x = *(const entry *const *)a, *y = *(const entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* An optimizer tensor a save of this model could have written: optim.hyper,
   optim.step, or optim.m. / optim.v. and one of its parameters' names. */
static bool optim_name(rg_ctx *ctx, const char *name) {
  if (!strcmp(name, "optim.hyper") || !strcmp(name, "optim.step")) return true;
  if (strncmp(name, "optim.m.", 8) && strncmp(name, "optim.v.", 8)) return false;
  for (int i = 0; i < ctx->nparams; i++)
    if (!strcmp(name + 8, ctx->pnames[i])) return true;
  return false;
}

/* Steps to the next member of the header object (after its '{' or a member): true with
   the member's name in name (the reader then stands at its value), false at the object's
   '}' (*r is "") or on an error (*r is the reason). */
static bool header_next(jr *j, bool *first, char *name, size_t cap, const char **r) {
  *r = "";
  if (lit(j, '}')) return false;
  if (!*first && !lit(j, ','))
    return *r = j->err[0] ? j->err : "expected ',' or '}' in the header", false;
  *first = false;
  if (!jstr(j, name, cap) || !lit(j, ':'))
    return *r = j->err[0] ? j->err : "expected a name", false;
  return true;
}

/* "" when nothing but the padding's spaces follows the header's JSON, else the reason. */
static const char *header_end(jr *j) {
  ws(j);
  for (const char *q = j->p; q < j->end; q++)
    if (*q != ' ') return "trailing bytes after the header's JSON";
  return "";
}

/* "" when no two non-empty ranges [begin, end) of e[0..n) overlap, else why naming two
   that do (oom_msg when out of host memory). */
static const char *overlaps(rg_ctx *ctx, entry *e, int n, char *why, size_t cap) {
  entry **by = rg__malloc(ctx, sizeof *by * (size_t)(n ? n : 1));
  if (!by) return oom_msg;
  for (int k = 0; k < n; k++) by[k] = &e[k];
  qsort(by, (size_t)n, sizeof *by, cmp_begin);
  /* Sorted by start, a non-empty tensor overlaps an earlier one exactly when it starts
     before the furthest end so far (empty tensors occupy nothing and are skipped). */
  const char *r = "";
  const entry *far = NULL;
  for (int k = 0; k < n; k++) {
    if (by[k]->end == by[k]->begin) continue;
    if (far && by[k]->begin < far->end) {
      snprintf(why, cap, "tensors \"%.100s\" and \"%.100s\" overlap", far->name, by[k]->name);
      r = why;
      break;
    }
    if (!far || by[k]->end > far->end) far = by[k];
  }
  rg__free(ctx, by);
  return r;
}

/* Parses and checks the header against the n expected entries. Returns "" or a reason.
   With cap_skip > 0 (a load without an optimizer), up to cap_skip tensors of optimizer
   state this model's save could have written (optim_name) are appended to e as skipped
   entries (*nskip of them): checked like the others (duplicates, offsets, overlaps),
   then not read. */
static const char *check_header(rg_ctx *ctx, jr *j, entry *e, int n, uint64_t data_len,
                                int cap_skip, int *nskip, jmeta *md, char *why, size_t cap) {
  if (!lit(j, '{')) return "the header is not a JSON object";
  bool first = true;
  char name[300];
  const char *r;
  while (header_next(j, &first, name, sizeof name, &r)) {
    if (!strcmp(name, "__metadata__")) {
      if (!jmetadata(ctx, j, md, false)) return j->oom ? oom_msg : j->err;
      continue;
    }
    jtensor t;
    if (!jtensor_read(j, &t)) return j->err;
    int k = 0;
    while (k < n + *nskip && strcmp(e[k].name, name)) k++;
    if (k == n + *nskip && cap_skip && optim_name(ctx, name)) {
      if (*nskip == cap_skip) return "it holds more optimizer state than this model has";
      snprintf(e[k].name, sizeof e[k].name, "%s", name);
      e[k].skip = 1;
      ++*nskip;
    }
    if (k == n + *nskip) {
      snprintf(why, cap, "it holds a tensor \"%.200s\" that this model does not have", name);
      return why;
    }
    if (e[k].found) {
      snprintf(why, cap, "tensor \"%.200s\" appears twice", name);
      return why;
    }
    if (e[k].skip) {
      if (t.off[0] > t.off[1] || t.off[1] > data_len) {
        snprintf(why, cap, "tensor \"%.200s\" has data_offsets [%llu, %llu] outside the %llu "
                 "bytes of data", name, (unsigned long long)t.off[0],
                 (unsigned long long)t.off[1], (unsigned long long)data_len);
        return why;
      }
      e[k].found = 1, e[k].begin = t.off[0], e[k].end = t.off[1];
      continue;
    }
    rg_tinfo *ti = rg__t(ctx, e[k].ref);
    bool shape_ok = t.ndim == ti->ndim;
    for (int d = 0; shape_ok && d < t.ndim; d++) shape_ok = t.shape[d] == (uint64_t)ti->dims[d];
    if (strcmp(t.dtype, st_dtype(ti->dtype)) || !shape_ok) {
      char want[96], have[96];
      int64_t fd[RG_ST_MAX_DIMS + 1];
      for (int d = 0; d < t.ndim; d++) fd[d] = (int64_t)t.shape[d];
      rg__fmt_shape(want, sizeof want, ti->ndim, ti->dims);
      rg__fmt_shape(have, sizeof have, t.ndim, fd);
      snprintf(why, cap, "tensor \"%.200s\" is %s %s in the file but %s %s here (a "
               "checkpoint of a different model?)", name, t.dtype, have, st_dtype(ti->dtype),
               want);
      return why;
    }
    if (t.off[0] > t.off[1] || t.off[1] > data_len || t.off[1] - t.off[0] != ti->nbytes) {
      snprintf(why, cap, "tensor \"%.200s\" has data_offsets [%llu, %llu] that do not hold "
               "its %zu bytes inside the %llu bytes of data", name,
               (unsigned long long)t.off[0], (unsigned long long)t.off[1], ti->nbytes,
               (unsigned long long)data_len);
      return why;
    }
    e[k].found = 1;
    e[k].begin = t.off[0];
    e[k].end = t.off[1];
  }
  if (*r || *(r = header_end(j))) return r;
  for (int k = 0; k < n; k++)
    if (!e[k].found) {
      snprintf(why, cap, "tensor \"%.200s\" is missing", e[k].name);
      return why;
    }
  return overlaps(ctx, e, n + *nskip, why, cap); /* the skipped tensors take part */
}

static bool read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

/* Reads the file's size into *fsize, its header's length into *hlen and the header into
   *hdr (rg__malloc'd, freed by the caller): NULL, or the reason the file is not
   safetensors (oom_msg when out of host memory; why may hold it). */
static const char *read_header(rg_ctx *ctx, FILE *f, uint64_t *fsize, uint64_t *hlen,
                               char **hdr, char *why, size_t cap) {
  unsigned char lb[8];
  *fsize = *hlen = 0;
  if (fseeko(f, 0, SEEK_END) == 0) {
    off_t sz = ftello(f);
    *fsize = sz > 0 ? (uint64_t)sz : 0;
  }
  rewind(f);
  if (*fsize < 8 || !read_exact(f, lb, 8)) return "the file is shorter than the 8-byte header length";
  for (int i = 0; i < 8; i++) *hlen |= (uint64_t)lb[i] << (8 * i);
  if (*hlen < 2 || *hlen > MAX_HEADER || *hlen > *fsize - 8) {
    snprintf(why, cap, "the header length %llu does not fit the %llu-byte file",
             (unsigned long long)*hlen, (unsigned long long)*fsize);
    return why;
  }
  if (!(*hdr = rg__malloc(ctx, (size_t)*hlen))) return oom_msg;
  if (!read_exact(f, *hdr, (size_t)*hlen)) return "the header is truncated";
  return NULL;
}

rg_status rg_load(rg_ctx *ctx, const char *path, rg_optim *opt) {
  const char *call = "rg_load";
  if (!ctx) return RG_ERR_MISUSE;
  if (ctx->opt.dry_run) return rg__dry_refuse(ctx, call);
  if (!path || !*path) return rg__fail(ctx, RG_ERR_MISUSE, call, "path is empty");
  rg_status st = optim_ok(ctx, opt, call);
  if (st == RG_OK) st = rg__drain(ctx, RG_DRAIN_SAVE);
  if (st != RG_OK) return st;
  FILE *f = fopen(path, "rb");
  if (!f) return rg__fail(ctx, RG_ERR_IO, call, "cannot open \"%s\": %s", path, strerror(errno));
  /* Without an optimizer, the file may hold an AdamW's state (m and v per parameter,
     hyper, step), which is checked and skipped. */
  int n = 0, nskip = 0, cap_skip = opt ? 0 : 2 * ctx->nparams + 2;
  entry *e = collect(ctx, opt, cap_skip, &n, call);
  char *hdr = NULL, why[512] = "";
  const char *bad = NULL;
  rg_status bad_st = RG_ERR_IO; /* OOM only where the loader's own allocation failed */
  uint64_t hlen = 0, fsize = 0;
  void **data = NULL;
  jmeta md = {0};
  if (!e) {
    fclose(f);
    return RG_ERR_OOM;
  }
  bad = read_header(ctx, f, &fsize, &hlen, &hdr, why, sizeof why);
  if (bad == oom_msg) bad_st = RG_ERR_OOM;
  if (!bad) {
    jr j = {hdr, hdr + hlen, "", false};
    const char *r = check_header(ctx, &j, e, n, fsize - 8 - hlen, cap_skip, &nskip, &md, why,
                                 sizeof why);
    if (r == oom_msg) bad = oom_msg, bad_st = RG_ERR_OOM;
    else if (*r) bad = r == why ? why : (snprintf(why, sizeof why, "bad header: %s", r), why);
  }
  /* Everything is read before anything is changed. */
  if (!bad && !(data = rg__calloc(ctx, (size_t)(n ? n : 1), sizeof *data))) bad = "out of host memory", bad_st = RG_ERR_OOM;
  for (int k = 0; !bad && k < n; k++) {
    size_t sz = (size_t)(e[k].end - e[k].begin);
    if (!(data[k] = rg__malloc(ctx, sz ? sz : 1))) bad = "out of host memory", bad_st = RG_ERR_OOM;
    else if (fseek(f, (long)(8 + hlen + e[k].begin), SEEK_SET) != 0 || !read_exact(f, data[k], sz))
      bad = "the data section is truncated";
    else if (all_finite(ctx, e[k].name, rg__t(ctx, e[k].ref)->dtype, rg__t(ctx, e[k].ref)->numel,
                        data[k], why, sizeof why) != RG_OK) {
      size_t w = strlen(why);
      snprintf(why + w, sizeof why - w, " (the run that saved it had gone non-finite): load "
               "an earlier checkpoint, or set rg_options.nonfinite_checkpoints = 1 to load "
               "it anyway");
      bad = why, bad_st = RG_ERR_NONFINITE;
    }
  }
  fclose(f);
  for (int k = 0; !bad && k < n && st == RG_OK; k++) {
    rg_tinfo *t = rg__t(ctx, e[k].ref);
    st = ctx->be->upload(ctx, t->data, data[k], t->nbytes);
    rg__shadow_stale(ctx, e[k].ref);
    rg__count_xfer(ctx, false, RG_SITE_CHECKPOINT, t->nbytes);
  }
  for (int k = 0; data && k < n; k++) rg__free(ctx, data[k]);
  rg__free(ctx, data);
  rg__free(ctx, hdr);
  rg__free(ctx, e);
  if (!bad && st == RG_OK) { /* commit the metadata and the dropout step counter */
    meta_free(ctx, ctx->meta, ctx->nmeta);
    ctx->meta = md.m;
    ctx->nmeta = md.n;
    ctx->capmeta = md.cap;
    if (md.has_step) ctx->step = md.step;
    if (md.has_seed) ctx->opt.seed = md.seed;
  } else {
    meta_free(ctx, md.m, md.n);
  }
  if (bad)
    return rg__fail(ctx, bad_st, call,
                    "\"%s\" was not loaded: %s; nothing was changed", path, bad);
  if (st != RG_OK) return rg__fail(ctx, st, call, "upload failed while loading \"%s\"", path);
  return RG_OK;
}

/* ---- any safetensors file: rg_st_open, rg_st_write ---------------------------------- */

struct rg_st_file {
  rg_ctx *ctx;
  FILE *f;
  uint64_t data_at;  /* where the data section starts in the file */
  int n, cap;
  entry *e;          /* each tensor's name and offsets in the data section */
  rg_st_tensor *t;   /* each tensor as the caller sees it (names point into e) */
  jmeta md;          /* every __metadata__ key, as the file has it */
};

void rg_st_close(rg_st_file *s) {
  if (!s) return;
  if (s->f) fclose(s->f);
  meta_free(s->ctx, s->md.m, s->md.n);
  rg__free(s->ctx, s->e);
  rg__free(s->ctx, s->t);
  rg__free(s->ctx, s);
}

/* One tensor of the header into s; "" or the reason the file is refused. */
static const char *st_add(rg_st_file *s, const char *name, const jtensor *t, uint64_t data_len,
                          char *why, size_t cap) {
  for (int k = 0; k < s->n; k++)
    if (!strcmp(s->e[k].name, name)) {
      snprintf(why, cap, "tensor \"%.200s\" appears twice", name);
      return why;
    }
  size_t size = st_size(t->dtype);
  if (!size) {
    snprintf(why, cap, "tensor \"%.200s\" has dtype \"%s\", which is not one of the "
             "format's", name, t->dtype);
    return why;
  }
  if (t->ndim > RG_ST_MAX_DIMS) {
    snprintf(why, cap, "tensor \"%.200s\" has more than %d axes", name, RG_ST_MAX_DIMS);
    return why;
  }
  uint64_t bytes = st_bytes(size, t->ndim, t->shape);
  if (t->off[0] > t->off[1] || t->off[1] > data_len || t->off[1] - t->off[0] != bytes) {
    snprintf(why, cap, "tensor \"%.200s\" has data_offsets [%llu, %llu] that do not hold "
             "its %llu bytes inside the %llu bytes of data", name,
             (unsigned long long)t->off[0], (unsigned long long)t->off[1],
             (unsigned long long)bytes, (unsigned long long)data_len);
    return why;
  }
  size_t c = (size_t)s->cap, c2 = c;
  if (!rg__grow(s->ctx, (void **)&s->e, sizeof *s->e, (size_t)s->n + 1, &c) ||
      !rg__grow(s->ctx, (void **)&s->t, sizeof *s->t, (size_t)s->n + 1, &c2))
    return oom_msg;
  s->cap = (int)(c < c2 ? c : c2);
  entry *e = &s->e[s->n];
  rg_st_tensor *o = &s->t[s->n++];
  memset(e, 0, sizeof *e);
  memset(o, 0, sizeof *o);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->begin = t->off[0];
  e->end = t->off[1];
  snprintf(o->dtype, sizeof o->dtype, "%s", t->dtype);
  o->ndim = t->ndim;
  for (int d = 0; d < t->ndim; d++) o->dims[d] = (int64_t)t->shape[d];
  o->nbytes = (size_t)bytes;
  return "";
}

/* The names in s->t point into s->e, which st_add may move: set once it is complete. */
static void st_names(rg_st_file *s) {
  for (int k = 0; k < s->n; k++) s->t[k].name = s->e[k].name;
}

rg_st_file *rg_st_open(rg_ctx *ctx, const char *path) {
  const char *call = "rg_st_open";
  if (!ctx) return NULL;
  if (!path || !*path) return rg__fail(ctx, RG_ERR_MISUSE, call, "path is empty"), NULL;
  rg_st_file *s = rg__calloc(ctx, 1, sizeof *s);
  if (!s) return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory"), NULL;
  s->ctx = ctx;
  s->f = fopen(path, "rb");
  if (!s->f) {
    rg__fail(ctx, RG_ERR_IO, call, "cannot open \"%s\": %s", path, strerror(errno));
    rg_st_close(s);
    return NULL;
  }
  char *hdr = NULL, why[512] = "";
  uint64_t fsize = 0, hlen = 0;
  const char *bad = read_header(ctx, s->f, &fsize, &hlen, &hdr, why, sizeof why);
  if (!bad) {
    jr j = {hdr, hdr + hlen, "", false};
    char name[300];
    bool first = true;
    const char *r = lit(&j, '{') ? "" : "the header is not a JSON object";
    while (!*r && header_next(&j, &first, name, sizeof name, &r)) {
      jtensor t;
      if (!strcmp(name, "__metadata__")) {
        if (!jmetadata(ctx, &j, &s->md, true)) r = j.oom ? oom_msg : j.err;
      } else if (!jtensor_read(&j, &t)) {
        r = j.err;
      } else {
        r = st_add(s, name, &t, fsize - 8 - hlen, why, sizeof why);
      }
    }
    if (!*r) r = header_end(&j);
    if (!*r) r = overlaps(ctx, s->e, s->n, why, sizeof why);
    if (*r) bad = r == why || r == oom_msg ? r : (snprintf(why, sizeof why, "bad header: %s", r), why);
  }
  rg__free(ctx, hdr);
  if (bad) {
    rg__fail(ctx, bad == oom_msg ? RG_ERR_OOM : RG_ERR_IO, call,
             "\"%s\" is not a safetensors file that can be read: %s", path, bad);
    rg_st_close(s);
    return NULL;
  }
  s->data_at = 8 + hlen;
  st_names(s);
  return s;
}

int rg_st_count(const rg_st_file *s) { return s ? s->n : 0; }

const rg_st_tensor *rg_st_at(const rg_st_file *s, int i) {
  return s && i >= 0 && i < s->n ? &s->t[i] : NULL;
}

const rg_st_tensor *rg_st_find(const rg_st_file *s, const char *name) {
  for (int k = 0; s && name && k < s->n; k++)
    if (!strcmp(s->e[k].name, name)) return &s->t[k];
  return NULL;
}

const char *rg_st_meta(const rg_st_file *s, const char *key) {
  for (int i = 0; s && key && i < s->md.n; i++)
    if (!strcmp(s->md.m[2 * i], key)) return s->md.m[2 * i + 1];
  return NULL;
}

rg_status rg_st_read(rg_st_file *s, const rg_st_tensor *t, void *dst, size_t bytes) {
  const char *call = "rg_st_read";
  if (!s) return RG_ERR_MISUSE;
  if (!t || t < s->t || t >= s->t + s->n)
    return rg__fail(s->ctx, RG_ERR_MISUSE, call, "the tensor is not one of this file's; "
                    "pass what rg_st_at or rg_st_find of this file returned");
  if (bytes != t->nbytes || (!dst && bytes))
    return rg__fail(s->ctx, RG_ERR_MISUSE, call, "tensor \"%.200s\" holds %zu bytes but "
                    "%zu bytes at %p were given", t->name, t->nbytes, bytes, dst);
  const entry *e = &s->e[t - s->t];
  if (fseeko(s->f, (off_t)(s->data_at + e->begin), SEEK_SET) != 0 ||
      !read_exact(s->f, dst, bytes))
    return rg__fail(s->ctx, RG_ERR_IO, call, "tensor \"%.200s\" could not be read (the file "
                    "changed or shrank since rg_st_open?)", t->name);
  return RG_OK;
}

rg_status rg_st_write(rg_ctx *ctx, const char *path, const rg_st_tensor *t, int n,
                      const char *const *meta) {
  const char *call = "rg_st_write";
  if (!ctx) return RG_ERR_MISUSE;
  if (ctx->opt.dry_run) return rg__dry_refuse(ctx, call); /* its reads are zeros */
  if (!path || !*path) return rg__fail(ctx, RG_ERR_MISUSE, call, "path is empty");
  if (n < 0 || (n && !t))
    return rg__fail(ctx, RG_ERR_MISUSE, call, "%d tensors at %p: pass n >= 0 tensors", n,
                    (const void *)t);
  for (int i = 0; i < n; i++) {
    const rg_st_tensor *x = &t[i];
    const char *why = NULL;
    size_t size = x->dtype[0] ? st_size(x->dtype) : 0;
    uint64_t dims[RG_ST_MAX_DIMS], bytes = 0;
    for (int d = 0; x->ndim >= 0 && d < x->ndim && d < RG_ST_MAX_DIMS; d++)
      dims[d] = x->dims[d] < 0 ? 0 : (uint64_t)x->dims[d];
    if (!x->name || !*x->name || strlen(x->name) >= sizeof ((entry *)0)->name)
      why = "its name must be 1 to 299 bytes";
    else if (!strcmp(x->name, "__metadata__"))
      why = "\"__metadata__\" is the format's own key";
    else if (!size)
      why = "its dtype is not one of the format's (\"F32\", \"BF16\", \"F16\", \"I32\"...)";
    else if (x->ndim < 0 || x->ndim > RG_ST_MAX_DIMS)
      why = "ndim must be in [0, RG_ST_MAX_DIMS]";
    for (int d = 0; !why && d < x->ndim; d++)
      if (x->dims[d] < 0) why = "a dimension is negative";
    if (!why && (bytes = st_bytes(size, x->ndim, dims)) > (uint64_t)(SIZE_MAX >> 1))
      why = "its size overflows";
    if (!why && bytes && !x->data) why = "its data is NULL";
    for (int k = 0; !why && k < i; k++)
      if (!strcmp(t[k].name, x->name)) why = "its name appears twice";
    if (why)
      return rg__fail(ctx, RG_ERR_MISUSE, call, "tensor %d (\"%.200s\"): %s; nothing was "
                      "written", i, x->name ? x->name : "(null)", why);
  }
  int nmeta = 0;
  while (meta && meta[2 * nmeta]) {
    if (!meta[2 * nmeta + 1])
      return rg__fail(ctx, RG_ERR_MISUSE, call, "metadata key \"%.200s\" has a NULL value; "
                      "meta is key, value, ..., NULL", meta[2 * nmeta]);
    nmeta++;
  }
  entry *e = rg__calloc(ctx, (size_t)(n ? n : 1), sizeof *e);
  if (!e) return rg__fail(ctx, RG_ERR_OOM, call, "out of host memory");
  for (int i = 0; i < n; i++) {
    snprintf(e[i].name, sizeof e[i].name, "%s", t[i].name);
    e[i].dtype = t[i].dtype;
    e[i].ndim = t[i].ndim;
    memcpy(e[i].dims, t[i].dims, sizeof t[i].dims);
    uint64_t dims[RG_ST_MAX_DIMS];
    for (int d = 0; d < t[i].ndim; d++) dims[d] = (uint64_t)t[i].dims[d];
    e[i].nbytes = st_bytes(st_size(t[i].dtype), t[i].ndim, dims);
    e[i].host = t[i].data;
  }
  sbuf h = {.ctx = ctx};
  put(&h, "{");
  if (nmeta) put(&h, "\"__metadata__\":{");
  for (int i = 0; i < nmeta; i++) {
    put(&h, i ? "," : "");
    put_str(&h, meta[2 * i]);
    put(&h, ":");
    put_str(&h, meta[2 * i + 1]);
  }
  if (nmeta) put(&h, "}");
  char *target = save_target(ctx, path, call);
  rg_status st = target ? save_to(ctx, target, call, h, e, n) : (rg__free(ctx, h.p), ctx->last);
  rg__free(ctx, target);
  rg__free(ctx, e);
  return st;
}
