/*
 * fuzz_load.c - libFuzzer target for rg_load, the safetensors loader, and rg_st_open /
 * rg_st_read, which read any safetensors file with the same parser.
 *
 * Each input becomes one file that a fresh CPU context loads into a small fixed model
 * (F32 parameters of 0 to 4 axes, one of them empty, names with a quote and UTF-8,
 * trained two steps with AdamW, two metadata keys). What must hold:
 *  - no crash, no sanitizer report, no hang, no large allocation;
 *  - the status is RG_OK, RG_ERR_IO, or RG_ERR_NONFINITE (a NaN or Inf in a tensor the
 *    load would take, which the file's data may hold). Not RG_ERR_OOM: the loader
 *    allocates the header (at most the file's size and at most 64 MiB) and the model's
 *    own tensor sizes, never a size the file declares beyond the file, so an OOM here
 *    would be an over-allocation;
 *  - on failure: the message is non-empty and starts with "rg_load"; every parameter, the
 *    optimizer's step count and rg_meta_get's values are bit-identical to before, and so
 *    is everything else a checkpoint holds (a save afterwards is byte-identical to one of
 *    the untouched model: moments, hyperparameters, seed, step counter, metadata);
 *  - on success: the header is strict JSON (see RG_FUZZ_LAX_JSON below), no two non-empty
 *    tensors overlap, every parameter (rg_read) is finite and, like the step count
 *    (rg_optim_steps) and every tensor of a save afterwards, equals the file's bytes at
 *    its data_offsets, the metadata equals the file's (rg_meta_get and the saved copy),
 *    and a training step runs;
 *  - rg_st_open of the same file fails with RG_ERR_IO, or accepts a header this harness
 *    parses, and rg_st_read gives each tensor's bytes at its offsets;
 *  - either way the context keeps working: a training step afterwards succeeds.
 * Any violation prints "fuzz_load: ..." and aborts, so libFuzzer keeps the input.
 *
 * Input: the first byte is the mode, the rest the body.
 *  mode bit 0 = 0: the body is the file itself.
 *  mode bit 0 = 1: the file starts as a valid checkpoint of the model and the body is a
 *    list of edits (below), so mutations reach the checks behind a valid header.
 *  mode bit 1 = 1: load without the optimizer (rg_load(ctx, path, NULL)); the edited
 *    checkpoint is then a weights-only one.
 * Edits: one byte op (op % 10) and its operands (u16/u64 little-endian); the list ends
 * where the body does. "Header" edits rewrite the JSON and keep the 8-byte length equal
 * to the header's size; "raw" edits apply, in order, to the assembled file.
 *   0 SET   u16 off, u8 v        raw: file[off % size] = v
 *   1 HLEN  u64 v                raw: the 8-byte header length := v
 *   2 TRUNC u16 n                raw: cut the file to n bytes (if longer)
 *   3 NUM   u8 i, u8 kind, ...   header: the i-th number := kind%4: 0 u64 v, 1 its value
 *                                + (int8) d, 2 2^64-1, 3 the value of number u8 j
 *   4 STR   u8 i, u8 n, n bytes  header: the i-th string's contents := the bytes
 *   5 DEL   u8 i                 header: remove the i-th top-level member
 *   6 DUP   u8 i                 header: repeat the i-th top-level member after it
 *   7 INS   u16 off, u8 n, bytes header: insert the bytes at off % (size + 1)
 *   8 CUT   u16 off, u8 n        header: remove n bytes at off % size
 *   9 DLEN  u16 n                the data section := n bytes (cut, or zero-extended)
 * Indices are taken modulo the count; tests/fuzz/tools/gen_load_corpus.c writes the seeds
 * in tests/fuzz/corpus/load/ this way.
 *
 * Running (clang; the library sources compiled in with the same sanitizers; CMake's
 * RG_FUZZ=ON builds the same as fuzz_load, and every build replays the corpus in ctest):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_DEFAULT_SOURCE \
 *     -Iinclude -Isrc tests/fuzz/fuzz_load.c src/core/[a-z]*.c src/cpu/[a-z]*.c \
 *     src/nn/[a-z]*.c src/cuda/stub.c -lm -pthread -o fuzz_load
 *   mkdir -p new && ./fuzz_load -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=128 \
 *     -max_len=65536 new tests/fuzz/corpus/load
 * -timeout catches hangs (an input takes about 2 ms under ASan, opening and closing a
 * context included); -rss_limit_mb and -malloc_limit_mb catch over-allocation (the
 * largest legitimate allocation is a context's arena chunk, about 1 MiB; the header of
 * a file of at most -max_len bytes is smaller). Add -fork=2 -ignore_crashes=1 to keep
 * going past a finding (each is saved as crash-*); ./fuzz_load crash-<hash> replays one.
 * Environment: RG_FUZZ_LAX_JSON=1 skips the strict-JSON check of accepted headers (and
 * the checks that need the file parsed) instead of aborting, to look past that finding.
 * Files: two per process, "rg_fuzz_load.<pid>.{in,out}" in $TMPDIR, else /dev/shm, else
 * /tmp; removed at exit and before an abort.
 */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "resgrad.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The harness's own code is left out of coverage, so that new features mean new library
   behaviour rather than new paths through this file's parser. */
#if defined(__clang__) && __clang_major__ >= 13
#define FZ_NOCOV __attribute__((no_sanitize("coverage")))
#else
#define FZ_NOCOV
#endif

/* ---- small helpers ----------------------------------------------------------------------- */

static void fz_cleanup(void);
static FZ_NOCOV void fz_die(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;
static FZ_NOCOV void fz_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz_load: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fz_cleanup(); /* abort skips atexit */
  abort();
}

typedef struct fz_buf { uint8_t *p; size_t n, cap; } fz_buf;

static FZ_NOCOV void fz_reserve(fz_buf *b, size_t n) {
  if (n <= b->cap) return;
  size_t c = b->cap ? b->cap : 256;
  while (c < n) c *= 2;
  uint8_t *p = realloc(b->p, c);
  if (!p) fz_die("out of memory (%zu bytes)", c);
  b->p = p;
  b->cap = c;
}
static FZ_NOCOV void fz_insert(fz_buf *b, size_t at, const void *src, size_t n) {
  if (!n) return;
  if (at > b->n) at = b->n;
  fz_reserve(b, b->n + n);
  memmove(b->p + at + n, b->p + at, b->n - at);
  memcpy(b->p + at, src, n);
  b->n += n;
}
static FZ_NOCOV void fz_erase(fz_buf *b, size_t at, size_t n) {
  if (at >= b->n || !n) return;
  if (n > b->n - at) n = b->n - at;
  memmove(b->p + at, b->p + at + n, b->n - at - n);
  b->n -= n;
}
static FZ_NOCOV void fz_set(fz_buf *b, const void *src, size_t n) {
  b->n = 0;
  fz_insert(b, 0, src, n);
}

static FZ_NOCOV uint64_t fz_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static FZ_NOCOV int fz_write_file(const char *path, const void *p, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 0;
  const uint8_t *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) {
      close(fd);
      return 0;
    }
    c += w;
    n -= (size_t)w;
  }
  return close(fd) == 0;
}

static FZ_NOCOV int fz_read_file(const char *path, fz_buf *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  out->n = 0;
  long sz = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  rewind(f);
  int ok = sz >= 0;
  if (ok) {
    fz_reserve(out, (size_t)sz + 1);
    out->n = fread(out->p, 1, (size_t)sz, f);
    ok = out->n == (size_t)sz;
  }
  fclose(f);
  return ok;
}

/* ---- the fixed model --------------------------------------------------------------------- */

#define FZ_NP 7
#define FZ_B 3
static const struct {
  const char *name;
  int ndim;
  int64_t dims[RG_MAX_DIMS];
  rg_init init;
} fz_params[FZ_NP] = {
    {"fc1.weight", 2, {4, 3}, {RG_INIT_NORMAL, 0.5f, 0}},
    {"fc1.bias", 1, {4}, {RG_INIT_UNIFORM, -0.1f, 0.1f}},
    {"blk \"0\".gain\xc3\xa9", 1, {4}, {RG_INIT_CONST, 1.0f, 0}}, /* a quote and UTF-8 */
    {"scale", 0, {0}, {RG_INIT_CONST, 0.75f, 0}},                  /* no axes: 1 element */
    {"fc2.weight", 2, {2, 4}, {RG_INIT_NORMAL, 0.5f, 0}},
    {"conv.kernel", 4, {2, 1, 1, 2}, {RG_INIT_ONES, 0, 0}},       /* unused by the loss */
    {"empty", 2, {0, 3}, {RG_INIT_ZEROS, 0, 0}},                   /* no elements */
};
static const char *const fz_meta_keys[2] = {"config", "note"};
static const char *const fz_meta_vals[2] = {"mine", "a \"quoted\\ note\" \x01 with\ttab"};
#define FZ_STEPS 2

typedef struct fz_model {
  rg_ctx *ctx;
  rg_tensor p[FZ_NP];
  rg_optim *opt;
} fz_model;

static FZ_NOCOV size_t fz_nbytes(int i) {
  size_t n = 4;
  for (int d = 0; d < fz_params[i].ndim; d++) n *= (size_t)fz_params[i].dims[d];
  return n;
}

/* One step on a batch that is a pure function of s. */
static FZ_NOCOV rg_status fz_train(fz_model *m, int s) {
  float x[FZ_B * 3];
  int32_t y[FZ_B];
  for (int i = 0; i < FZ_B * 3; i++) x[i] = (float)((s * 7 + i * 5) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < FZ_B; i++) y[i] = (s + i) % 2;
  rg_ctx *c = m->ctx;
  rg_status st = rg_step_begin(c);
  if (st != RG_OK) return st;
  rg_tensor xi = rg_input(c, RG_F32, 2, (int64_t[]){FZ_B, 3}, x);
  rg_tensor yi = rg_input(c, RG_I32, 1, (int64_t[]){FZ_B}, y);
  rg_tensor h = rg_relu(c, rg_linear(c, xi, m->p[0], m->p[1]));
  h = rg_mul(c, rg_mul(c, h, m->p[2]), m->p[3]);
  rg_tensor loss = rg_cross_entropy(c, rg_linear(c, h, m->p[4], RG_NONE), yi);
  st = rg_backward(c, loss);
  if (st == RG_OK) st = rg_optim_step(m->opt);
  if (st == RG_OK) st = rg_zero_grad(c);
  float l;
  return st == RG_OK ? rg_item(c, loss, &l) : st;
}

/* A fresh context holding the model in its reference state (FZ_STEPS steps, metadata). */
static FZ_NOCOV void fz_make(fz_model *m) {
  memset(m, 0, sizeof *m);
  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1, .threads = 1, .seed = 11};
  if (rg_open(&m->ctx, &o) != RG_OK) fz_die("rg_open failed");
  for (int i = 0; i < FZ_NP; i++)
    m->p[i] = rg_param(m->ctx, fz_params[i].name, RG_F32, fz_params[i].ndim,
                       fz_params[i].dims, fz_params[i].init);
  m->opt = rg_optim_adamw(m->ctx, &(rg_adamw_options){.lr = 0.05f, .weight_decay = 0.1f});
  for (int s = 0; s < FZ_STEPS; s++) fz_train(m, s);
  for (int i = 0; i < 2; i++) rg_meta_set(m->ctx, fz_meta_keys[i], fz_meta_vals[i]);
  if (rg_error(m->ctx) != RG_OK) fz_die("building the model: %s", rg_errmsg(m->ctx));
}

static FZ_NOCOV void fz_free(fz_model *m) {
  rg_optim_free(m->opt);
  rg_status st = rg_close(m->ctx);
  if (st != RG_OK) fz_die("rg_close -> %s", rg_status_str(st));
  m->ctx = NULL;
}

/* ---- process state ----------------------------------------------------------------------- */

static struct {
  int ready, lax_json;
  rg_status last_status;   /* what the last input's rg_load returned, and its message */
  char last_msg[512];      /* (for tests/fuzz/tools/gen_load_corpus.c) */
  char in_path[512], out_path[512];
  fz_buf base_full, base_weights; /* the reference state saved with / without the optimizer */
  uint8_t *p0[FZ_NP];             /* the reference parameters */
} fz;

static FZ_NOCOV void fz_cleanup(void) {
  unlink(fz.in_path);
  unlink(fz.out_path);
}

static FZ_NOCOV void fz_init(void) {
  if (fz.ready) return;
  const char *lax = getenv("RG_FUZZ_LAX_JSON");
  fz.lax_json = lax && *lax && strcmp(lax, "0");
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(fz.in_path, sizeof fz.in_path, "%s/rg_fuzz_load.%ld.in", dir, (long)getpid());
  snprintf(fz.out_path, sizeof fz.out_path, "%s/rg_fuzz_load.%ld.out", dir, (long)getpid());
  atexit(fz_cleanup);
  fz_model m;
  fz_make(&m);
  for (int i = 0; i < FZ_NP; i++) {
    size_t n = fz_nbytes(i);
    if (n > 64) fz_die("parameter %d is larger than the 64-byte read buffers", i);
    fz.p0[i] = malloc(n ? n : 1);
    if (!fz.p0[i] || rg_read(m.ctx, m.p[i], fz.p0[i], n) != RG_OK) fz_die("reading params");
  }
  if (rg_optim_steps(m.opt) != FZ_STEPS)
    fz_die("the model took %lld steps", (long long)rg_optim_steps(m.opt));
  if (rg_save(m.ctx, fz.out_path, m.opt) != RG_OK ||
      !fz_read_file(fz.out_path, &fz.base_full) ||
      rg_save(m.ctx, fz.out_path, NULL) != RG_OK ||
      !fz_read_file(fz.out_path, &fz.base_weights))
    fz_die("saving the reference checkpoints: %s", rg_errmsg(m.ctx));
  fz_free(&m);
  if (fz.base_full.n < 8 || fz_le64(fz.base_full.p) > fz.base_full.n - 8 ||
      fz.base_weights.n < 8 || fz_le64(fz.base_weights.p) > fz.base_weights.n - 8)
    fz_die("the reference checkpoints are malformed");
  fz.ready = 1;
}

/* ---- a strict JSON reader (RFC 8259; string bytes >= 0x80 are not UTF-8-checked) --------- */

enum { FJ_OBJ, FJ_ARR, FJ_STR, FJ_NUM, FJ_LIT };

typedef struct fj_node {
  int type;
  char *key;          /* member name (decoded) when in an object, else NULL */
  size_t klen;
  char *str;          /* FJ_STR: decoded bytes */
  size_t slen;
  int is_uint;        /* FJ_NUM: a non-negative integer that fits uint64 */
  uint64_t u;
  struct fj_node *kid;
  int nkid, capkid;
} fj_node;

typedef struct fj { const uint8_t *p, *end, *start; char err[128]; int depth; } fj;

static FZ_NOCOV void fj_free_kids(fj_node *n) {
  for (int i = 0; i < n->nkid; i++) {
    fj_free_kids(&n->kid[i]);
    free(n->kid[i].key);
    free(n->kid[i].str);
  }
  free(n->kid);
  n->kid = NULL;
  n->nkid = n->capkid = 0;
}

static FZ_NOCOV int fj_fail(fj *j, const char *what) {
  if (!j->err[0])
    snprintf(j->err, sizeof j->err, "%s at byte %ld of the header", what,
             (long)(j->p - j->start));
  return 0;
}
static FZ_NOCOV void fj_ws(fj *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}
static FZ_NOCOV int fj_hex(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}
static FZ_NOCOV int fj_u4(fj *j, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    int h = j->p < j->end ? fj_hex(*j->p) : -1;
    if (h < 0) return fj_fail(j, "bad \\u escape");
    *v = *v * 16 + (unsigned)h;
    j->p++;
  }
  return 1;
}
static FZ_NOCOV int fj_string(fj *j, char **out, size_t *len) {
  if (j->p >= j->end || *j->p != '"') return fj_fail(j, "expected a string");
  j->p++;
  char *b = malloc((size_t)(j->end - j->p) + 1); /* decoding never grows a string */
  size_t n = 0;
  if (!b) fz_die("out of memory");
  for (;;) {
    if (j->p >= j->end) {
      free(b);
      return fj_fail(j, "unterminated string");
    }
    uint8_t c = *j->p++;
    if (c == '"') break;
    if (c < 0x20) {
      free(b);
      return fj_fail(j, "control character in a string");
    }
    if (c != '\\') {
      b[n++] = (char)c;
      continue;
    }
    if (j->p >= j->end) continue; /* reported as unterminated */
    uint8_t x = *j->p++;
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *k = x ? strchr(from, x) : NULL;
    if (k) {
      b[n++] = to[k - from];
      continue;
    }
    unsigned v;
    if (x != 'u' || !fj_u4(j, &v)) {
      free(b);
      return fj_fail(j, "bad escape");
    }
    if (v >= 0xd800 && v < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
      const uint8_t *save = j->p;
      unsigned lo;
      j->p += 2;
      if (fj_u4(j, &lo) && lo >= 0xdc00 && lo < 0xe000)
        v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
      else j->p = save, j->err[0] = 0;
    }
    /* UTF-8 (WTF-8 for a lone surrogate): at most 4 bytes for the 6 or 12 read. */
    if (v < 0x80) b[n++] = (char)v;
    else if (v < 0x800) b[n++] = (char)(0xc0 | v >> 6), b[n++] = (char)(0x80 | (v & 63));
    else if (v < 0x10000)
      b[n++] = (char)(0xe0 | v >> 12), b[n++] = (char)(0x80 | (v >> 6 & 63)),
      b[n++] = (char)(0x80 | (v & 63));
    else
      b[n++] = (char)(0xf0 | v >> 18), b[n++] = (char)(0x80 | (v >> 12 & 63)),
      b[n++] = (char)(0x80 | (v >> 6 & 63)), b[n++] = (char)(0x80 | (v & 63));
  }
  b[n] = 0; /* NUL-terminated for convenience; len excludes it */
  *out = b;
  *len = n;
  return 1;
}
static FZ_NOCOV int fj_number(fj *j, fj_node *n) {
  const uint8_t *s = j->p;
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') return fj_fail(j, "bad number");
  if (*j->p == '0') j->p++;
  else
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  const uint8_t *int_end = j->p;
  if (j->p < j->end && *j->p == '.') {
    j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return fj_fail(j, "bad fraction");
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return fj_fail(j, "bad exponent");
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  }
  n->type = FJ_NUM;
  n->is_uint = *s != '-' && int_end == j->p;
  for (const uint8_t *q = s; n->is_uint && q < int_end; q++) {
    if (n->u > (UINT64_MAX - (uint64_t)(*q - '0')) / 10) n->is_uint = 0;
    else n->u = n->u * 10 + (uint64_t)(*q - '0');
  }
  return 1;
}
static int fj_value(fj *j, fj_node *n);
static FZ_NOCOV int fj_kid(fj *j, fj_node *parent, fj_node **out) {
  if (parent->nkid == parent->capkid) {
    int c = parent->capkid ? parent->capkid * 2 : 4;
    fj_node *k = realloc(parent->kid, sizeof *k * (size_t)c);
    if (!k) fz_die("out of memory");
    parent->kid = k;
    parent->capkid = c;
  }
  *out = &parent->kid[parent->nkid++];
  memset(*out, 0, sizeof **out);
  (void)j;
  return 1;
}
static FZ_NOCOV int fj_value(fj *j, fj_node *n) {
  fj_ws(j);
  if (j->p >= j->end) return fj_fail(j, "expected a value");
  uint8_t c = *j->p;
  if (c == '{' || c == '[') {
    if (++j->depth > 32) return fj_fail(j, "nested too deeply");
    n->type = c == '{' ? FJ_OBJ : FJ_ARR;
    j->p++;
    fj_ws(j);
    if (j->p < j->end && *j->p == (c == '{' ? '}' : ']')) {
      j->p++;
      j->depth--;
      return 1;
    }
    for (;;) {
      fj_node *k;
      fj_kid(j, n, &k);
      if (c == '{') {
        fj_ws(j);
        if (!fj_string(j, &k->key, &k->klen)) return 0;
        fj_ws(j);
        if (j->p >= j->end || *j->p != ':') return fj_fail(j, "expected ':'");
        j->p++;
      }
      if (!fj_value(j, k)) return 0;
      fj_ws(j);
      if (j->p < j->end && *j->p == ',') {
        j->p++;
        continue;
      }
      if (j->p < j->end && *j->p == (c == '{' ? '}' : ']')) {
        j->p++;
        j->depth--;
        return 1;
      }
      return fj_fail(j, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
  }
  if (c == '"') {
    n->type = FJ_STR;
    return fj_string(j, &n->str, &n->slen);
  }
  if (c == '-' || (c >= '0' && c <= '9')) return fj_number(j, n);
  static const char *const lits[3] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t l = strlen(lits[i]);
    if ((size_t)(j->end - j->p) >= l && !memcmp(j->p, lits[i], l)) {
      n->type = FJ_LIT;
      j->p += l;
      return 1;
    }
  }
  return fj_fail(j, "expected a value");
}
/* Parses a whole header; on failure err says why and *root holds what was built. */
static FZ_NOCOV int fj_parse(const uint8_t *p, size_t n, fj_node *root, char *err, size_t cap) {
  fj j = {p, p + n, p, "", 0};
  memset(root, 0, sizeof *root);
  int ok = fj_value(&j, root);
  if (ok) {
    fj_ws(&j);
    if (j.p != j.end) ok = fj_fail(&j, "trailing bytes");
  }
  snprintf(err, cap, "%s", j.err);
  return ok;
}
static FZ_NOCOV void fj_free(fj_node *root) {
  fj_free_kids(root);
  free(root->str);
  free(root->key);
}

/* ---- what a parsed header says ----------------------------------------------------------- */

typedef struct fz_tensor { const char *name; size_t nlen; uint64_t begin, end; } fz_tensor;
typedef struct fz_header {
  fj_node root;
  fz_tensor *t;
  int nt;
  const fj_node *meta[64]; /* the metadata's members, the last value of each key */
  int nmeta;
  const uint8_t *data;
  uint64_t data_len;
} fz_header;

static FZ_NOCOV const fz_tensor *fz_find(const fz_header *h, const char *name, size_t nlen) {
  for (int i = 0; i < h->nt; i++)
    if (h->t[i].nlen == nlen && !memcmp(h->t[i].name, name, nlen)) return &h->t[i];
  return NULL;
}
static FZ_NOCOV const fj_node *fz_meta(const fz_header *h, const char *key) {
  for (int i = 0; i < h->nmeta; i++)
    if (h->meta[i]->klen == strlen(key) && !memcmp(h->meta[i]->key, key, h->meta[i]->klen))
      return h->meta[i];
  return NULL;
}

/* Reads a whole file as the loader should have: 0 and why if it is not a checkpoint this
   reader understands (for an accepted file that is itself a finding). */
static FZ_NOCOV int fz_header_read(const uint8_t *f, size_t size, fz_header *h, char *why,
                                   size_t cap, int *json_ok) {
  memset(h, 0, sizeof *h);
  *json_ok = 0;
  if (size < 8 || fz_le64(f) > size - 8) return snprintf(why, cap, "bad header length"), 0;
  uint64_t hlen = fz_le64(f);
  if (!fj_parse(f + 8, (size_t)hlen, &h->root, why, cap)) return 0;
  *json_ok = 1;
  h->data = f + 8 + hlen;
  h->data_len = size - 8 - hlen;
  if (h->root.type != FJ_OBJ) return snprintf(why, cap, "the header is not an object"), 0;
  h->t = calloc((size_t)h->root.nkid + 1, sizeof *h->t);
  if (!h->t) fz_die("out of memory");
  for (int i = 0; i < h->root.nkid; i++) {
    const fj_node *m = &h->root.kid[i];
    if (m->klen == 12 && !memcmp(m->key, "__metadata__", 12)) {
      if (m->type != FJ_OBJ) return snprintf(why, cap, "__metadata__ is not an object"), 0;
      for (int k = 0; k < m->nkid; k++) {
        const fj_node *kv = &m->kid[k];
        if (kv->type != FJ_STR)
          return snprintf(why, cap, "a metadata value is not a string"), 0;
        int at = 0;
        while (at < h->nmeta && !(h->meta[at]->klen == kv->klen &&
                                  !memcmp(h->meta[at]->key, kv->key, kv->klen)))
          at++;
        if (at == 64) return snprintf(why, cap, "more than 64 metadata keys"), 0;
        h->meta[at] = kv;
        if (at == h->nmeta) h->nmeta++;
      }
      continue;
    }
    const fj_node *off = NULL;
    for (int k = 0; m->type == FJ_OBJ && k < m->nkid; k++)
      if (!strcmp(m->kid[k].key, "data_offsets")) off = &m->kid[k];
    if (!off || off->type != FJ_ARR || off->nkid != 2 || !off->kid[0].is_uint ||
        !off->kid[1].is_uint)
      return snprintf(why, cap, "tensor \"%.60s\" has no data_offsets [begin, end]", m->key), 0;
    h->t[h->nt++] = (fz_tensor){m->key, m->klen, off->kid[0].u, off->kid[1].u};
  }
  return 1;
}
static FZ_NOCOV void fz_header_free(fz_header *h) {
  fj_free(&h->root);
  free(h->t);
}

/* ---- building the file from an input ----------------------------------------------------- */

typedef struct fz_reader { const uint8_t *p; size_t n, at; } fz_reader;
static FZ_NOCOV int fz_get(fz_reader *r, uint64_t *v, int bytes) {
  if (r->n - r->at < (size_t)bytes) return 0;
  *v = 0;
  for (int i = 0; i < bytes; i++) *v |= (uint64_t)r->p[r->at++] << (8 * i);
  return 1;
}

/* Tokens of a header that may be broken: strings (contents), digit runs, and the members
   of the outermost object. kind: 0 numbers, 1 strings, 2 members. Returns the count and
   stores the idx-th (modulo) range in *b, *e. */
static FZ_NOCOV size_t fz_tokens(const fz_buf *h, int kind, size_t idx, size_t *b, size_t *e) {
  size_t count = 0, want = SIZE_MAX, i = 0, mstart = SIZE_MAX;
  size_t rb[2] = {0, 0};
  int depth = 0;
  for (int pass = 0; pass < 2; pass++) {
    count = 0, i = 0, depth = 0, mstart = SIZE_MAX;
    while (i < h->n) {
      uint8_t c = h->p[i];
      if (c == '"') {
        size_t s = ++i;
        while (i < h->n && h->p[i] != '"') i += h->p[i] == '\\' ? 2 : 1;
        if (i > h->n) i = h->n;
        if (kind == 1) {
          if (count == want) rb[0] = s, rb[1] = i;
          count++;
        }
        if (depth == 1 && mstart == SIZE_MAX) mstart = s - 1;
        i++;
        continue;
      }
      if (c >= '0' && c <= '9') {
        size_t s = i;
        while (i < h->n && h->p[i] >= '0' && h->p[i] <= '9') i++;
        if (kind == 0) {
          if (count == want) rb[0] = s, rb[1] = i;
          count++;
        }
        if (depth == 1 && mstart == SIZE_MAX) mstart = s;
        continue;
      }
      if (depth == 1 && mstart != SIZE_MAX && (c == ',' || c == '}')) {
        if (kind == 2) {
          if (count == want) rb[0] = mstart, rb[1] = i;
          count++;
        }
        mstart = SIZE_MAX;
      }
      if (c == '{' || c == '[') {
        if (depth == 1 && mstart == SIZE_MAX) mstart = i;
        depth++;
      } else if (c == '}' || c == ']') {
        depth--;
      }
      i++;
    }
    if (!count || pass) break;
    want = idx % count;
  }
  *b = rb[0];
  *e = rb[1];
  return count;
}

static FZ_NOCOV uint64_t fz_token_value(const fz_buf *h, size_t b, size_t e) {
  uint64_t v = 0;
  for (size_t i = b; i < e; i++) {
    unsigned d = (unsigned)(h->p[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return UINT64_MAX;
    v = v * 10 + d;
  }
  return v;
}

typedef struct fz_raw { int op; uint64_t a, b; } fz_raw;

/* The file an input describes, into out. */
static FZ_NOCOV void fz_build(const uint8_t *data, size_t size, fz_buf *out) {
  uint8_t mode = size ? data[0] : 0;
  fz_reader r = {data + (size ? 1 : 0), size ? size - 1 : 0, 0};
  if (!(mode & 1)) {
    fz_set(out, r.p, r.n);
    return;
  }
  const fz_buf *base = mode & 2 ? &fz.base_weights : &fz.base_full;
  uint64_t hlen = fz_le64(base->p);
  fz_buf h = {0}, d = {0};
  fz_set(&h, base->p + 8, (size_t)hlen);
  fz_set(&d, base->p + 8 + hlen, base->n - 8 - (size_t)hlen);
  fz_raw raw[256];
  int nraw = 0;
  uint64_t op, a, b, n = 0;
  size_t tb, te, ub, ue;
  for (int ops = 0; ops < 256 && fz_get(&r, &op, 1); ops++) {
    if (h.n > ((size_t)1 << 20)) break;
    switch (op % 10) {
    case 0: /* SET */
      if (!fz_get(&r, &a, 2) || !fz_get(&r, &b, 1)) break;
      raw[nraw++] = (fz_raw){0, a, b};
      continue;
    case 1: /* HLEN */
      if (!fz_get(&r, &a, 8)) break;
      raw[nraw++] = (fz_raw){1, a, 0};
      continue;
    case 2: /* TRUNC */
      if (!fz_get(&r, &a, 2)) break;
      raw[nraw++] = (fz_raw){2, a, 0};
      continue;
    case 3: { /* NUM */
      if (!fz_get(&r, &a, 1) || !fz_get(&r, &b, 1)) break;
      uint64_t v = 0;
      if (b % 4 == 0 && !fz_get(&r, &v, 8)) break;
      if (b % 4 == 1 && !fz_get(&r, &n, 1)) break;
      if (b % 4 == 3 && !fz_get(&r, &n, 1)) break;
      if (!fz_tokens(&h, 0, (size_t)a, &tb, &te)) continue;
      if (b % 4 == 1) v = fz_token_value(&h, tb, te) + (uint64_t)(int64_t)(int8_t)(uint8_t)n;
      if (b % 4 == 2) v = UINT64_MAX;
      if (b % 4 == 3) {
        fz_tokens(&h, 0, (size_t)n, &ub, &ue);
        v = fz_token_value(&h, ub, ue);
      }
      char num[24];
      int k = snprintf(num, sizeof num, "%llu", (unsigned long long)v);
      fz_erase(&h, tb, te - tb);
      fz_insert(&h, tb, num, (size_t)k);
      continue;
    }
    case 4: /* STR */
      if (!fz_get(&r, &a, 1) || !fz_get(&r, &n, 1) || r.n - r.at < n) break;
      r.at += n;
      if (!fz_tokens(&h, 1, (size_t)a, &tb, &te)) continue;
      fz_erase(&h, tb, te - tb);
      fz_insert(&h, tb, r.p + r.at - n, (size_t)n);
      continue;
    case 5: /* DEL */
      if (!fz_get(&r, &a, 1)) break;
      if (!fz_tokens(&h, 2, (size_t)a, &tb, &te)) continue;
      if (te < h.n && h.p[te] == ',') te++; /* the member and its comma */
      else {
        size_t c = tb;
        while (c > 0 && (h.p[c - 1] == ' ' || h.p[c - 1] == '\n')) c--;
        if (c > 0 && h.p[c - 1] == ',') tb = c - 1;
      }
      fz_erase(&h, tb, te - tb);
      continue;
    case 6: { /* DUP */
      if (!fz_get(&r, &a, 1)) break;
      if (!fz_tokens(&h, 2, (size_t)a, &tb, &te)) continue;
      fz_buf m = {0};
      fz_insert(&m, 0, ",", 1);
      fz_insert(&m, 1, h.p + tb, te - tb);
      fz_insert(&h, te, m.p, m.n);
      free(m.p);
      continue;
    }
    case 7: /* INS */
      if (!fz_get(&r, &a, 2) || !fz_get(&r, &n, 1) || r.n - r.at < n) break;
      r.at += n;
      fz_insert(&h, (size_t)(a % (h.n + 1)), r.p + r.at - n, (size_t)n);
      continue;
    case 8: /* CUT */
      if (!fz_get(&r, &a, 2) || !fz_get(&r, &n, 1)) break;
      if (h.n) fz_erase(&h, (size_t)(a % h.n), (size_t)n);
      continue;
    case 9: /* DLEN */
      if (!fz_get(&r, &a, 2)) break;
      if (a > d.n) {
        size_t old = d.n;
        fz_reserve(&d, (size_t)a);
        memset(d.p + old, 0, (size_t)a - old);
      }
      d.n = (size_t)a;
      continue;
    }
    break; /* the body ended inside an op */
  }
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
  fz_set(out, len, 8);
  fz_insert(out, out->n, h.p, h.n);
  fz_insert(out, out->n, d.p, d.n);
  free(h.p);
  free(d.p);
  for (int i = 0; i < nraw; i++) {
    if (raw[i].op == 0 && out->n) out->p[raw[i].a % out->n] = (uint8_t)raw[i].b;
    if (raw[i].op == 1)
      for (size_t k = 0; k < 8 && k < out->n; k++) out->p[k] = (uint8_t)(raw[i].a >> (8 * k));
    if (raw[i].op == 2 && raw[i].a < out->n) out->n = (size_t)raw[i].a;
  }
}

/* ---- the checks -------------------------------------------------------------------------- */

static FZ_NOCOV int fz_is_reserved(const char *k, size_t n) {
  static const char *const r[5] = {"format", "format_version", "seed", "step", "optim"};
  for (int i = 0; i < 5; i++)
    if (strlen(r[i]) == n && !memcmp(k, r[i], n)) return 1;
  return 0;
}

/* A canonical decimal u64 ("0" or [1-9][0-9]*, no overflow) into *v. */
static FZ_NOCOV int fz_canonical_u64(const char *s, size_t n, uint64_t *v) {
  if (!n || n > 20 || (s[0] == '0' && n > 1)) return 0;
  *v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    unsigned d = (unsigned)(s[i] - '0');
    if (*v > (UINT64_MAX - d) / 10) return 0;
    *v = *v * 10 + d;
  }
  return 1;
}

/* After a failed load: nothing changed. */
static FZ_NOCOV void fz_check_unchanged(fz_model *m, rg_status st) {
  char msg[512]; /* a copy: rg_clear_error below empties the context's */
  snprintf(msg, sizeof msg, "%s", rg_errmsg(m->ctx) ? rg_errmsg(m->ctx) : "(null)");
  if (st != RG_ERR_IO && st != RG_ERR_NONFINITE)
    fz_die("rg_load -> %s, want RG_OK, RG_ERR_IO or RG_ERR_NONFINITE (%s)",
           rg_status_str(st), msg);
  if (strncmp(msg, "rg_load", 7))
    fz_die("the message of a failed rg_load is \"%s\"; it should start with \"rg_load\"",
           msg);
  if (rg_error(m->ctx) != st) fz_die("rg_error is %s after rg_load failed with %s",
                                     rg_status_str(rg_error(m->ctx)), rg_status_str(st));
  rg_clear_error(m->ctx);
  for (int i = 0; i < FZ_NP; i++) {
    size_t n = fz_nbytes(i);
    uint8_t v[64];
    if (rg_read(m->ctx, m->p[i], v, n) != RG_OK || memcmp(v, fz.p0[i], n))
      fz_die("a failed rg_load (%s) changed parameter \"%s\"", msg, fz_params[i].name);
  }
  if (rg_optim_steps(m->opt) != FZ_STEPS)
    fz_die("a failed rg_load (%s) changed the step count to %lld", msg,
           (long long)rg_optim_steps(m->opt));
  for (int i = 0; i < 2; i++) {
    const char *v = rg_meta_get(m->ctx, fz_meta_keys[i]);
    if (!v || strcmp(v, fz_meta_vals[i]))
      fz_die("a failed rg_load (%s) changed metadata \"%s\" to \"%s\"", msg, fz_meta_keys[i],
             v ? v : "(null)");
  }
  fz_buf snap = {0};
  if (rg_save(m->ctx, fz.out_path, m->opt) != RG_OK || !fz_read_file(fz.out_path, &snap))
    fz_die("saving after a failed load: %s", rg_errmsg(m->ctx));
  if (snap.n != fz.base_full.n || memcmp(snap.p, fz.base_full.p, snap.n))
    fz_die("a failed rg_load (%s) changed the state: a save afterwards differs from the "
           "untouched model's (%zu vs %zu bytes)", msg, snap.n, fz.base_full.n);
  free(snap.p);
}

/* After a successful load: the context holds what the file says. */
static FZ_NOCOV void fz_check_loaded(fz_model *m, const fz_buf *file, int with_opt) {
  fz_header in, sv;
  char why[160];
  int json_ok;
  if (!fz_header_read(file->p, file->n, &in, why, sizeof why, &json_ok)) {
    if (!json_ok && fz.lax_json) {
      fz_header_free(&in);
      return;
    }
    fz_die("rg_load accepted a file whose header is not %s: %s",
           json_ok ? "what a checkpoint holds" : "strict JSON", why);
  }
  /* No two non-empty tensors share a byte; all lie inside the data. */
  for (int i = 0; i < in.nt; i++) {
    const fz_tensor *a = &in.t[i];
    if (a->begin > a->end || a->end > in.data_len)
      fz_die("rg_load accepted \"%.60s\" at [%llu, %llu] outside the %llu data bytes", a->name,
             (unsigned long long)a->begin, (unsigned long long)a->end,
             (unsigned long long)in.data_len);
    for (int k = 0; k < i; k++) {
      const fz_tensor *b = &in.t[k];
      if (a->begin < a->end && b->begin < b->end && a->begin < b->end && b->begin < a->end)
        fz_die("rg_load accepted overlapping tensors \"%.60s\" [%llu, %llu] and \"%.60s\" "
               "[%llu, %llu]", b->name, (unsigned long long)b->begin,
               (unsigned long long)b->end, a->name, (unsigned long long)a->begin,
               (unsigned long long)a->end);
      if (a->nlen == b->nlen && !memcmp(a->name, b->name, a->nlen))
        fz_die("rg_load accepted tensor \"%.60s\" twice", a->name);
    }
  }
  /* Parameters through the API. */
  for (int i = 0; i < FZ_NP; i++) {
    const fz_tensor *t = fz_find(&in, fz_params[i].name, strlen(fz_params[i].name));
    size_t n = fz_nbytes(i);
    uint8_t v[64];
    if (!t) fz_die("rg_load accepted a file without parameter \"%s\"", fz_params[i].name);
    if (t->end - t->begin != n)
      fz_die("rg_load accepted \"%s\" with %llu bytes, want %zu", fz_params[i].name,
             (unsigned long long)(t->end - t->begin), n);
    if (rg_read(m->ctx, m->p[i], v, n) != RG_OK || memcmp(v, in.data + t->begin, n))
      fz_die("after rg_load, parameter \"%s\" differs from the file's bytes",
             fz_params[i].name);
    for (size_t b = 0; b < n; b += 4) {
      float x;
      memcpy(&x, v + b, 4);
      if (!isfinite(x))
        fz_die("rg_load accepted %g in parameter \"%s\"", x, fz_params[i].name);
    }
  }
  if (with_opt) {
    const fz_tensor *t = fz_find(&in, "optim.step", 10);
    if (!t || t->end - t->begin != 4) fz_die("rg_load accepted a file without optim.step");
    int32_t s;
    memcpy(&s, in.data + t->begin, 4);
    if (rg_optim_steps(m->opt) != (int64_t)s)
      fz_die("after rg_load, rg_optim_steps is %lld but the file says %ld",
             (long long)rg_optim_steps(m->opt), (long)s);
  }
  /* Metadata through the API: the file's keys, and only those (of the ones known here). */
  for (int i = 0; i < 2; i++) {
    const fj_node *want = fz_meta(&in, fz_meta_keys[i]);
    const char *got = rg_meta_get(m->ctx, fz_meta_keys[i]);
    if (!want != !got ||
        (got && (strlen(got) != want->slen || memcmp(got, want->str, want->slen))))
      fz_die("after rg_load, metadata \"%s\" is \"%s\" but the file says \"%.80s\"",
             fz_meta_keys[i], got ? got : "(none)", want ? want->str : "(none)");
  }
  for (int i = 0; i < in.nmeta; i++) {
    const fj_node *kv = in.meta[i];
    if (fz_is_reserved(kv->key, kv->klen) || strlen(kv->key) != kv->klen) continue;
    const char *got = rg_meta_get(m->ctx, kv->key);
    if (!got || strlen(got) != kv->slen || memcmp(got, kv->str, kv->slen))
      fz_die("after rg_load, metadata \"%.60s\" is \"%.60s\" but the file says \"%.60s\"",
             kv->key, got ? got : "(none)", kv->str);
  }
  /* Everything, through a save: each tensor is the file's (or, for optimizer state not
     loaded, the reference's), the metadata is the file's, seed and step as the file says. */
  fz_buf snap = {0};
  if (rg_save(m->ctx, fz.out_path, m->opt) != RG_OK || !fz_read_file(fz.out_path, &snap))
    fz_die("saving after a load: %s", rg_errmsg(m->ctx));
  if (!fz_header_read(snap.p, snap.n, &sv, why, sizeof why, &json_ok))
    fz_die("a save after rg_load cannot be read back: %s", why);
  static fz_header ref; /* the untouched model's, parsed once */
  static int ref_ready;
  if (!ref_ready &&
      !fz_header_read(fz.base_full.p, fz.base_full.n, &ref, why, sizeof why, &json_ok))
    fz_die("the reference checkpoint cannot be read: %s", why);
  ref_ready = 1;
  for (int i = 0; i < sv.nt; i++) {
    const fz_tensor *s = &sv.t[i];
    /* Loaded without an optimizer, the file's optimizer state was checked and skipped. */
    int skipped = !with_opt && s->nlen >= 6 && !memcmp(s->name, "optim.", 6);
    const fz_tensor *f = skipped ? NULL : fz_find(&in, s->name, s->nlen);
    const fz_header *src = &in;
    if (!f && !with_opt) f = fz_find(&ref, s->name, s->nlen), src = &ref;
    if (!f || f->end - f->begin != s->end - s->begin ||
        memcmp(src->data + f->begin, sv.data + s->begin, (size_t)(s->end - s->begin)))
      fz_die("after rg_load, tensor \"%.60s\" (saved again) differs from the file's", s->name);
  }
  for (int i = 0; i < in.nt; i++) {
    /* Without an optimizer, "optim.*" tensors are skipped whatever their names. */
    int skipped = !with_opt && in.t[i].nlen >= 6 && !memcmp(in.t[i].name, "optim.", 6);
    if (!skipped && !fz_find(&sv, in.t[i].name, in.t[i].nlen))
      fz_die("rg_load accepted tensor \"%.60s\", which the model does not save", in.t[i].name);
  }
  int user = 0;
  for (int i = 0; i < in.nmeta; i++) {
    const fj_node *kv = in.meta[i], *s = fz_meta(&sv, kv->key);
    if (fz_is_reserved(kv->key, kv->klen)) continue;
    user++;
    if (strlen(kv->key) != kv->klen) continue; /* an escaped NUL: fz_meta cannot look it up */
    if (!s || s->slen != kv->slen || memcmp(s->str, kv->str, kv->slen))
      fz_die("after rg_load, a save holds metadata \"%.60s\" = \"%.60s\", the file \"%.60s\"",
             kv->key, s ? s->str : "(none)", kv->str);
  }
  int saved_user = 0;
  for (int i = 0; i < sv.nmeta; i++)
    saved_user += !fz_is_reserved(sv.meta[i]->key, sv.meta[i]->klen);
  if (saved_user != user)
    fz_die("after rg_load, a save holds %d metadata keys of its own, the file %d", saved_user,
           user);
  static const char *const num_keys[2] = {"seed", "step"};
  for (int i = 0; i < 2; i++) {
    const fj_node *f = fz_meta(&in, num_keys[i]), *s = fz_meta(&sv, num_keys[i]);
    uint64_t fv, sv_;
    if (f && fz_canonical_u64(f->str, f->slen, &fv) &&
        (!s || !fz_canonical_u64(s->str, s->slen, &sv_) || fv != sv_))
      fz_die("after rg_load, a save has %s \"%s\" but the file says \"%s\"", num_keys[i],
             s ? s->str : "(none)", f->str);
  }
  fz_header_free(&sv);
  fz_header_free(&in);
  free(snap.p);
}

/* rg_st_open of the same file: refused with RG_ERR_IO and a message starting
   "rg_st_open", or accepted when the harness's own reader parses the header too, with the
   same tensors, each of which rg_st_read reads as the file's bytes at its offsets; the
   context's sticky error is cleared afterwards. */
static FZ_NOCOV void fz_check_st(fz_model *m, const fz_buf *file) {
  rg_clear_error(m->ctx);
  rg_st_file *f = rg_st_open(m->ctx, fz.in_path);
  if (!f) {
    if (rg_error(m->ctx) != RG_ERR_IO || strncmp(rg_errmsg(m->ctx), "rg_st_open", 10))
      fz_die("rg_st_open refused the file with %s: \"%s\"", rg_status_str(rg_error(m->ctx)),
             rg_errmsg(m->ctx));
    rg_clear_error(m->ctx);
    return;
  }
  fz_header h;
  char why[200];
  int json_ok;
  if (!fz_header_read(file->p, file->n, &h, why, sizeof why, &json_ok)) {
    if (!json_ok && getenv("RG_FUZZ_LAX_JSON")) {
      fz_header_free(&h);
      rg_st_close(f);
      return;
    }
    fz_die("rg_st_open accepted a file the harness cannot read: %s", why);
  }
  if (rg_st_count(f) != h.nt)
    fz_die("rg_st_open found %d tensors, the header has %d", rg_st_count(f), h.nt);
  for (int i = 0; i < rg_st_count(f); i++) {
    const rg_st_tensor *t = rg_st_at(f, i);
    const fz_tensor *ft = fz_find(&h, t->name, strlen(t->name));
    if (!ft || ft->end - ft->begin != t->nbytes || ft->end > h.data_len)
      fz_die("rg_st_open's tensor \"%s\" is not the header's", t->name);
    uint8_t *b = malloc(t->nbytes + 1);
    if (!b) fz_die("out of memory");
    if (rg_st_read(f, t, b, t->nbytes) != RG_OK || memcmp(b, h.data + ft->begin, t->nbytes))
      fz_die("rg_st_read of \"%s\" is not the file's bytes (%s)", t->name, rg_errmsg(m->ctx));
    free(b);
  }
  fz_header_free(&h);
  rg_st_close(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_init();
  static fz_buf file;
  fz_build(data, size, &file);
  if (!fz_write_file(fz.in_path, file.p, file.n)) fz_die("cannot write %s", fz.in_path);
  int with_opt = !(size && (data[0] & 2));

  fz_model m;
  fz_make(&m);
  rg_status st = rg_load(m.ctx, fz.in_path, with_opt ? m.opt : NULL);
  fz.last_status = st;
  snprintf(fz.last_msg, sizeof fz.last_msg, "%s", rg_errmsg(m.ctx));
  if (st == RG_OK) {
    if (rg_error(m.ctx) != RG_OK)
      fz_die("rg_load -> RG_OK with a sticky error: %s", rg_errmsg(m.ctx));
    fz_check_loaded(&m, &file, with_opt);
  } else {
    fz_check_unchanged(&m, st);
  }
  fz_check_st(&m, &file);
  st = fz_train(&m, FZ_STEPS);
  if (st != RG_OK)
    fz_die("a training step after rg_load -> %s (%s)", rg_status_str(st), rg_errmsg(m.ctx));
  fz_free(&m);
  if (file.cap > ((size_t)1 << 22)) { /* do not keep a large buffer between inputs */
    free(file.p);
    file = (fz_buf){0};
  }
  return 0;
}
