/*
 * gen_load_corpus.c - writes the seed corpus of tests/fuzz/fuzz_load.c and, on request,
 * reproducers of loader bugs the fuzzer found.
 *
 *   gen_load_corpus OUTDIR            the seeds (tests/fuzz/corpus/load/ in the repository)
 *   gen_load_corpus --repro DIR       the reproducers: NAME.input (a fuzz_load input) and
 *                                     NAME.safetensors (the file rg_load sees); says
 *                                     whether each still fails the harness
 *
 * It includes fuzz_load.c, so the seeds are built against the very model and input
 * format of the fuzzer. Every seed is run through LLVMFuzzerTestOneInput as it is
 * written and must give the status (RG_OK or RG_ERR_IO) and message it is meant to
 * exercise; a seed that does not stops the generator. Seeds in mode 1 describe edits by
 * token (the i-th number or string of the header), so they stay meaningful if the
 * checkpoint's layout changes a little; rerun this after changing the model in
 * fuzz_load.c or the checkpoint format. Not built by CMake (tests/fuzz/fuzz_*.c are);
 * from the repository root:
 *   cc -std=c11 -D_DEFAULT_SOURCE -O1 -Iinclude -Isrc tests/fuzz/tools/gen_load_corpus.c \
 *     src/core/[a-z]*.c src/cpu/[a-z]*.c src/nn/[a-z]*.c src/cuda/stub.c -lm -pthread \
 *     -o /tmp/gen_load_corpus
 *   rm -rf tests/fuzz/corpus/load && /tmp/gen_load_corpus tests/fuzz/corpus/load
 */
#include "../fuzz_load.c"

#include <errno.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

static const char *outdir;
static fz_buf hfull, hweights; /* the two reference headers, for token lookups */
static uint64_t dlen_full;     /* bytes of data in the full reference */
static int nseeds;
static size_t total_bytes;

/* ---- an input being built ---------------------------------------------------------------- */

typedef struct seed { fz_buf b; const fz_buf *h; } seed;

static void s_u8(seed *s, uint64_t v) {
  uint8_t c = (uint8_t)v;
  fz_insert(&s->b, s->b.n, &c, 1);
}
static void s_le(seed *s, uint64_t v, int n) {
  for (int i = 0; i < n; i++) s_u8(s, v >> (8 * i));
}
static void s_bytes(seed *s, const void *p, size_t n) { fz_insert(&s->b, s->b.n, p, n); }

static seed start(uint8_t mode) {
  seed s = {{0}, mode & 2 ? &hweights : &hfull};
  s_u8(&s, mode);
  return s;
}
static seed start_raw(uint8_t mode, const void *file, size_t n) {
  seed s = start(mode);
  s_bytes(&s, file, n);
  return s;
}

static void idx_ok(size_t i) {
  if (i > 255) fz_die("gen: token index %zu does not fit an op's byte", i);
}
/* One builder per edit of fuzz_load.c's list (same numbers, same operands). */
static void op_set(seed *s, uint64_t off, uint8_t v) { s_u8(s, 0), s_le(s, off, 2), s_u8(s, v); }
static void op_hlen(seed *s, uint64_t v) { s_u8(s, 1), s_le(s, v, 8); }
static void op_trunc(seed *s, uint64_t n) { s_u8(s, 2), s_le(s, n, 2); }
static void op_num_head(seed *s, size_t i, int kind) {
  idx_ok(i);
  s_u8(s, 3), s_u8(s, i), s_u8(s, (uint64_t)kind);
}
static void op_num(seed *s, size_t i, uint64_t v) { op_num_head(s, i, 0), s_le(s, v, 8); }
static void op_num_add(seed *s, size_t i, int d) {
  op_num_head(s, i, 1), s_u8(s, (uint64_t)(int64_t)d);
}
static void op_num_max(seed *s, size_t i) { op_num_head(s, i, 2); }
static void op_num_copy(seed *s, size_t i, size_t j) {
  idx_ok(j);
  op_num_head(s, i, 3), s_u8(s, j);
}
static void op_str(seed *s, size_t i, const char *v) {
  idx_ok(i);
  s_u8(s, 4), s_u8(s, i), s_u8(s, strlen(v)), s_bytes(s, v, strlen(v));
}
static void op_del(seed *s, size_t i) { idx_ok(i), s_u8(s, 5), s_u8(s, i); }
static void op_dup(seed *s, size_t i) { idx_ok(i), s_u8(s, 6), s_u8(s, i); }
static void op_ins(seed *s, size_t off, const void *p, size_t n) {
  if (n > 255) fz_die("gen: an insertion of %zu bytes", n);
  s_u8(s, 7), s_le(s, off, 2), s_u8(s, n), s_bytes(s, p, n);
}
static void op_cut(seed *s, size_t off, size_t n) { s_u8(s, 8), s_le(s, off, 2), s_u8(s, n); }
static void op_dlen(seed *s, uint64_t n) { s_u8(s, 9), s_le(s, n, 2); }

/* ---- finding tokens in a reference header ------------------------------------------------ */

/* The first string whose raw (still escaped) contents are raw. */
static size_t str_idx(const fz_buf *h, const char *raw) {
  size_t b, e, n = fz_tokens(h, 1, 0, &b, &e);
  for (size_t i = 0; i < n; i++) {
    fz_tokens(h, 1, i, &b, &e);
    if (e - b == strlen(raw) && !memcmp(h->p + b, raw, e - b)) return i;
  }
  fz_die("gen: no string \"%s\" in the reference header", raw);
}
/* The k-th number after string i (for a tensor's name: its shape, then its offsets). */
static size_t num_after(const fz_buf *h, size_t i, int k) {
  size_t sb, se, b, e, n = fz_tokens(h, 0, 0, &b, &e);
  fz_tokens(h, 1, i, &sb, &se);
  for (size_t j = 0; j < n; j++) {
    fz_tokens(h, 0, j, &b, &e);
    if (b > se && k-- == 0) return j;
  }
  fz_die("gen: no number %d after string %zu", k, i);
}
static uint64_t num_val(const fz_buf *h, size_t j) {
  size_t b, e;
  fz_tokens(h, 0, j, &b, &e);
  return fz_token_value(h, b, e);
}
/* data_offsets of the tensor named raw (ndim axes): the index of begin (end is +1). */
static size_t off_idx(const fz_buf *h, const char *raw, int ndim) {
  return num_after(h, str_idx(h, raw), ndim);
}
/* The top-level member whose name is raw. */
static size_t member_idx(const fz_buf *h, const char *raw) {
  size_t b, e, n = fz_tokens(h, 2, 0, &b, &e), l = strlen(raw);
  for (size_t i = 0; i < n; i++) {
    fz_tokens(h, 2, i, &b, &e);
    if (e - b > l + 1 && h->p[b] == '"' && !memcmp(h->p + b + 1, raw, l) &&
        h->p[b + 1 + l] == '"')
      return i;
  }
  fz_die("gen: no member \"%s\"", raw);
}
/* Byte offset (in the header) of the first needle at or after from. */
static size_t pos_of(const fz_buf *h, const char *needle, size_t from) {
  size_t l = strlen(needle);
  for (size_t i = from; i + l <= h->n; i++)
    if (!memcmp(h->p + i, needle, l)) return i;
  fz_die("gen: no \"%s\" in the reference header", needle);
}

/* ---- writing and checking ---------------------------------------------------------------- */

static void write_or_die(const char *path, const void *p, size_t n) {
  if (!fz_write_file(path, p, n)) fz_die("gen: cannot write %s: %s", path, strerror(errno));
}

/* Writes the seed and runs it: want is RG_OK or RG_ERR_IO, needle (or NULL) a part of the
   message it must give. */
static void emit(const char *name, seed *s, rg_status want, const char *needle) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", outdir, name);
  write_or_die(path, s->b.p, s->b.n);
  LLVMFuzzerTestOneInput(s->b.p, s->b.n);
  if (fz.last_status != want || (needle && !strstr(fz.last_msg, needle)))
    fz_die("gen: seed %s gives %s (%s), meant to give %s%s%s", name,
           rg_status_str(fz.last_status), fz.last_msg, rg_status_str(want),
           needle ? " with " : "", needle ? needle : "");
  nseeds++;
  total_bytes += s->b.n;
  free(s->b.p);
}

/* A reproducer: the input, the file, and whether the harness still fails on it. */
static void repro(const char *name, seed *s, const char *what) {
  char path[1024];
  fz_buf file = {0};
  fz_build(s->b.p, s->b.n, &file);
  snprintf(path, sizeof path, "%s/%s.input", outdir, name);
  write_or_die(path, s->b.p, s->b.n);
  snprintf(path, sizeof path, "%s/%s.safetensors", outdir, name);
  write_or_die(path, file.p, file.n);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    LLVMFuzzerTestOneInput(s->b.p, s->b.n);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  int fails = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  printf("%s: %s\n  %s\n", name, fails ? "REPRODUCES (the harness aborts, above)" : "fixed",
         what);
  free(file.p);
  free(s->b.p);
}

/* ---- the seeds --------------------------------------------------------------------------- */

static void le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A weights-only checkpoint written by hand: other spacing, escapes, member order, the
   metadata last, the data in reverse order, and an unused gap. Loads without optimizer. */
static void handwritten(void) {
  fz_buf h = {0}, d = {0};
  static const char *const names[FZ_NP] = {"\\u0066c1.weight", "fc1\\u002ebias",
                                            "blk \\\"0\\\".gain\xc3\xa9", "\\u0073cale",
                                            "fc2.weight", "conv.kernel", "empty"};
  size_t end = 16; /* 16 unused bytes at the end of the data */
  for (int i = 0; i < FZ_NP; i++) end += fz_nbytes(i);
  d.n = 0;
  fz_reserve(&d, end);
  memset(d.p, 0x5a, end);
  d.n = end;
  fz_insert(&h, h.n, "{\n", 2);
  size_t at = end - 16;
  for (int i = FZ_NP - 1; i >= 0; i--) {
    size_t n = fz_nbytes(i);
    at -= n;
    for (size_t k = 0; k < n / 4; k++) {
      float v = (float)i + 0.25f * (float)k - 1.0f;
      memcpy(d.p + at + 4 * k, &v, 4);
    }
    char t[512], shape[64] = "";
    for (int a = 0; a < fz_params[i].ndim; a++)
      snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", a ? ", " : "",
               (long long)fz_params[i].dims[a]);
    snprintf(t, sizeof t, "  \"%s\" : { \"data_offsets\" : [ %zu , %zu ], \"shape\":[%s],"
             "\t\"dtype\":\"F32\" },\n", names[i], at, at + n, shape);
    fz_insert(&h, h.n, t, strlen(t));
  }
  const char *meta = "  \"__metadata__\": {\"config\": \"hand\\twritten \\u007e\\/\", "
                     "\"seed\": \"42\", \"step\": \"7\", \"format\": \"resgrad\"}\r\n}\n   ";
  fz_insert(&h, h.n, meta, strlen(meta));
  uint8_t len[8];
  le64(len, h.n);
  seed s = start(2);
  s_bytes(&s, len, 8);
  s_bytes(&s, h.p, h.n);
  s_bytes(&s, d.p, d.n);
  emit("raw-handwritten", &s, RG_OK, NULL);
  free(h.p);
  free(d.p);
}

static void raw_seeds(void) {
  seed s;
  s = start_raw(0, fz.base_full.p, fz.base_full.n);
  emit("raw-valid", &s, RG_OK, NULL);
  s = start_raw(2, fz.base_weights.p, fz.base_weights.n);
  emit("raw-valid-weights", &s, RG_OK, NULL);
  s = start_raw(2, fz.base_full.p, fz.base_full.n);
  emit("raw-full-loaded-without-optimizer", &s, RG_ERR_IO, "does not have");
  s = start_raw(0, fz.base_weights.p, fz.base_weights.n);
  emit("raw-weights-loaded-with-optimizer", &s, RG_ERR_IO, "missing");
  s = start(0);
  emit("raw-empty", &s, RG_ERR_IO, "shorter");
  s = start_raw(0, fz.base_full.p, 5);
  emit("raw-5-bytes", &s, RG_ERR_IO, "shorter");
  uint8_t f[32] = {0};
  s = start_raw(0, f, 8);
  emit("raw-length-0", &s, RG_ERR_IO, "header length");
  memset(f, 0xff, 8);
  memcpy(f + 8, "{}", 2);
  s = start_raw(0, f, 10);
  emit("raw-length-max", &s, RG_ERR_IO, "header length");
  le64(f, ((uint64_t)64 << 20) + 1);
  s = start_raw(0, f, 10);
  emit("raw-length-64MiB-plus-1", &s, RG_ERR_IO, "header length");
  le64(f, 2);
  s = start_raw(0, f, 10);
  emit("raw-empty-object", &s, RG_ERR_IO, "missing");
  memcpy(f + 8, "[]", 2);
  s = start_raw(0, f, 10);
  emit("raw-not-an-object", &s, RG_ERR_IO, "object");
  handwritten();
}

static void mode1_seeds(void) {
  const fz_buf *h = &hfull;
  uint64_t hlen = h->n, n = fz.base_full.n;
  size_t w1 = off_idx(h, "fc1.weight", 2), b1 = off_idx(h, "fc1.bias", 1);
  size_t gain = off_idx(h, "blk \\\"0\\\".gain\xc3\xa9", 1), st = off_idx(h, "optim.step", 1);
  size_t emp = off_idx(h, "empty", 2);
  seed s;

  s = start(1);
  emit("m1-valid", &s, RG_OK, NULL);
  s = start(3);
  emit("m3-valid", &s, RG_OK, NULL);

  /* Truncations. */
  static const struct { const char *name; int kind; } tr[] = {
      {"m1-trunc-0", 0}, {"m1-trunc-4", 4}, {"m1-trunc-8", 8}, {"m1-trunc-12", 12},
      {"m1-trunc-header-half", -1}, {"m1-trunc-header-end", -2}, {"m1-trunc-last-byte", -3}};
  for (size_t i = 0; i < sizeof tr / sizeof *tr; i++) {
    s = start(1);
    op_trunc(&s, tr[i].kind >= 0 ? (uint64_t)tr[i].kind : tr[i].kind == -1 ? 8 + hlen / 2
                 : tr[i].kind == -2 ? 8 + hlen : n - 1);
    emit(tr[i].name, &s, RG_ERR_IO, NULL);
  }
  s = start(3);
  op_trunc(&s, fz.base_weights.n - 1);
  emit("m3-trunc-last-byte", &s, RG_ERR_IO, "data_offsets");

  /* Declared header lengths. */
  s = start(1);
  op_hlen(&s, UINT64_MAX);
  emit("m1-length-max", &s, RG_ERR_IO, "header length");
  s = start(1);
  op_hlen(&s, (uint64_t)64 << 20);
  emit("m1-length-64MiB", &s, RG_ERR_IO, "header length");
  s = start(1);
  op_hlen(&s, 0);
  emit("m1-length-0", &s, RG_ERR_IO, "header length");
  s = start(1);
  op_hlen(&s, hlen + 1);
  emit("m1-length-plus-1", &s, RG_ERR_IO, NULL);
  s = start(1);
  op_hlen(&s, n - 8);
  emit("m1-length-whole-file", &s, RG_ERR_IO, NULL);

  /* Offsets past the end of the data, huge, reversed. */
  s = start(1);
  op_num(&s, st, dlen_full);
  op_num(&s, st + 1, dlen_full + 4);
  emit("m1-offsets-past-end", &s, RG_ERR_IO, "data_offsets");
  s = start(1);
  op_num_max(&s, w1);
  emit("m1-offset-u64-max", &s, RG_ERR_IO, "too large");
  s = start(1);
  op_num(&s, w1, (uint64_t)1e18);
  op_num(&s, w1 + 1, (uint64_t)1e18 + 48);
  emit("m1-offsets-huge", &s, RG_ERR_IO, "data_offsets");
  s = start(1);
  op_num_copy(&s, b1 + 1, b1);
  op_num_add(&s, b1, 16);
  emit("m1-offsets-reversed", &s, RG_ERR_IO, "data_offsets");
  s = start(1);
  op_num_add(&s, w1 + 1, 4);
  emit("m1-offsets-wrong-size", &s, RG_ERR_IO, "data_offsets");
  s = start(1);
  op_dlen(&s, dlen_full - 1);
  emit("m1-data-short", &s, RG_ERR_IO, "data_offsets");
  s = start(1);
  op_dlen(&s, dlen_full + 100);
  emit("m1-data-long", &s, RG_OK, NULL);
  s = start(1);
  op_num(&s, emp, dlen_full);
  op_num(&s, emp + 1, dlen_full);
  emit("m1-empty-tensor-at-end", &s, RG_OK, NULL);
  s = start(1);
  op_num(&s, emp, dlen_full + 1);
  op_num(&s, emp + 1, dlen_full + 1);
  emit("m1-empty-tensor-past-end", &s, RG_ERR_IO, "data_offsets");
  s = start(1);
  op_num(&s, emp, 0);
  op_num(&s, emp + 1, 0);
  emit("m1-empty-tensor-at-0", &s, RG_OK, NULL);

  /* Overlaps. */
  s = start(1);
  op_num(&s, b1, 8);
  op_num(&s, b1 + 1, 24);
  emit("m1-overlap", &s, RG_ERR_IO, "overlap");
  s = start(1);
  op_num_copy(&s, gain, b1);
  op_num_copy(&s, gain + 1, b1 + 1);
  emit("m1-overlap-same-range", &s, RG_ERR_IO, "overlap");
  s = start(1);
  op_num(&s, gain, num_val(h, b1));
  op_num(&s, gain + 1, num_val(h, b1 + 1));
  op_num(&s, b1, num_val(h, gain));
  op_num(&s, b1 + 1, num_val(h, gain + 1));
  emit("m1-swapped-ranges", &s, RG_OK, NULL);
  s = start(3);
  op_num(&s, off_idx(&hweights, "fc2.weight", 2), 4);
  op_num(&s, off_idx(&hweights, "fc2.weight", 2) + 1, 36);
  emit("m3-overlap", &s, RG_ERR_IO, "overlap");

  /* Duplicate names. */
  s = start(1);
  op_dup(&s, member_idx(h, "fc1.weight"));
  emit("m1-duplicate-member", &s, RG_ERR_IO, "twice");
  s = start(1);
  op_str(&s, str_idx(h, "fc1.bias"), "fc1.weight");
  emit("m1-duplicate-by-rename", &s, RG_ERR_IO, "twice");
  s = start(1);
  op_dup(&s, member_idx(h, "__metadata__"));
  emit("m1-duplicate-metadata", &s, RG_OK, NULL);

  /* Names: non-UTF-8, escapes, unknown, too long. */
  s = start(1);
  op_str(&s, str_idx(h, "fc2.weight"), "fc2.w\xff\xfeight");
  emit("m1-name-not-utf8", &s, RG_ERR_IO, "does not have");
  s = start(1);
  op_str(&s, str_idx(h, "mine"), "m\xc3\x28i\xffne");
  emit("m1-metadata-not-utf8", &s, RG_OK, NULL);
  s = start(1);
  op_str(&s, str_idx(h, "fc1.weight"), "\\u0066c1\\u002Eweight");
  emit("m1-name-escaped", &s, RG_OK, NULL);
  static const struct { const char *name, *value; } esc[] = {
      {"m1-name-escape-non-ascii", "fc1.weight\\u00e9"},
      {"m1-name-escape-nul", "fc1.weight\\u0000"},
      {"m1-name-escape-surrogate", "fc1.weight\\ud83d\\ude00"},
      {"m1-name-escape-unknown", "fc1.weight\\x41"},
      {"m1-name-escape-short", "fc1.weight\\u00"},
      {"m1-name-control-char", "fc1.weight\n"}};
  for (size_t i = 0; i < sizeof esc / sizeof *esc; i++) {
    s = start(1);
    op_str(&s, str_idx(h, "fc1.weight"), esc[i].value);
    emit(esc[i].name, &s, RG_ERR_IO, NULL);
  }
  s = start(1);
  op_str(&s, str_idx(h, "conv.kernel"), "extra");
  emit("m1-unknown-tensor", &s, RG_ERR_IO, "does not have");
  s = start(3);
  op_str(&s, str_idx(&hweights, "fc1.bias"), "optim.step");
  emit("m3-optimizer-tensor-without-optimizer", &s, RG_ERR_IO, "does not have");
  char pad[256];
  memset(pad, 'n', 200);
  s = start(1);
  op_ins(&s, pos_of(h, "\"fc1.weight\"", 0) + 1, pad, 200);
  op_ins(&s, pos_of(h, "\"fc1.weight\"", 0) + 1, pad, 200);
  emit("m1-name-too-long", &s, RG_ERR_IO, "too long");

  /* dtype and shape. */
  static const struct { const char *name, *dtype; } dt[] = {
      {"m1-dtype-bf16", "BF16"}, {"m1-dtype-f16", "F16"}, {"m1-dtype-i32", "I32"},
      {"m1-dtype-empty", ""}, {"m1-dtype-long", "FLOAT32_TOO_LONG"}};
  for (size_t i = 0; i < sizeof dt / sizeof *dt; i++) {
    s = start(1);
    op_str(&s, str_idx(h, "fc1.weight") + 2, dt[i].dtype); /* name, "dtype", "F32" */
    emit(dt[i].name, &s, RG_ERR_IO, NULL);
  }
  s = start(1);
  op_str(&s, str_idx(h, "optim.step") + 2, "F32");
  emit("m1-step-dtype-f32", &s, RG_ERR_IO, "I32");
  s = start(1);
  op_num_add(&s, w1 - 2, 1);
  emit("m1-shape-dim-plus-1", &s, RG_ERR_IO, "different model");
  size_t sh = pos_of(h, "[", pos_of(h, "\"fc1.weight\"", 0)) + 1;
  s = start(1);
  op_ins(&s, sh, "1,", 2);
  emit("m1-shape-extra-axis", &s, RG_ERR_IO, "different model");
  s = start(1);
  op_ins(&s, sh, "1,1,1,1,", 8);
  emit("m1-shape-6-axes", &s, RG_ERR_IO, "too long");
  s = start(1);
  op_ins(&s, pos_of(h, "[", pos_of(h, "\"scale\"", 0)) + 1, "1", 1);
  emit("m1-scalar-given-an-axis", &s, RG_ERR_IO, "different model");
  s = start(1);
  op_cut(&s, sh, 2); /* "[4,3]" -> "[3]" */
  emit("m1-shape-axis-removed", &s, RG_ERR_IO, "different model");

  /* Missing tensors and metadata. */
  static const struct { const char *name, *member; } miss[] = {
      {"m1-missing-step", "optim.step"}, {"m1-missing-hyper", "optim.hyper"},
      {"m1-missing-moment", "optim.v.fc2.weight"}, {"m1-missing-param", "fc1.bias"}};
  for (size_t i = 0; i < sizeof miss / sizeof *miss; i++) {
    s = start(1);
    op_del(&s, member_idx(h, miss[i].member));
    emit(miss[i].name, &s, RG_ERR_IO, "missing");
  }
  s = start(1);
  op_del(&s, member_idx(h, "__metadata__"));
  emit("m1-missing-metadata", &s, RG_OK, NULL);
  s = start(1);
  op_str(&s, str_idx(h, "config"), "format");
  emit("m1-metadata-reserved-key", &s, RG_OK, NULL);
  s = start(1);
  op_str(&s, str_idx(h, "step") + 1, "abc");
  emit("m1-metadata-step-not-a-number", &s, RG_OK, NULL);
  s = start(1);
  op_str(&s, str_idx(h, "seed") + 1, "18446744073709551615");
  emit("m1-metadata-seed-max", &s, RG_OK, NULL);
  size_t mine = pos_of(h, "\"mine\"", 0);
  s = start(1);
  op_cut(&s, mine, 6);
  op_ins(&s, mine, "123", 3);
  emit("m1-metadata-number-value", &s, RG_ERR_IO, "string");
  s = start(1);
  memset(pad, 'a', 250);
  for (int i = 0; i < 5; i++) op_ins(&s, mine + 1, pad, 250);
  emit("m1-metadata-value-too-long", &s, RG_ERR_IO, "too long");
  s = start(1);
  op_ins(&s, pos_of(h, "\"config\"", 0) + 1, pad, 250);
  op_ins(&s, pos_of(h, "\"config\"", 0) + 1, pad, 10);
  emit("m1-metadata-key-too-long", &s, RG_ERR_IO, "too long");

  /* JSON structure. */
  size_t last = h->n;
  while (last > 0 && h->p[last - 1] == ' ') last--;
  s = start(1);
  op_ins(&s, last, "x", 1);
  emit("m1-trailing-garbage", &s, RG_ERR_IO, "trailing");
  s = start(1);
  op_ins(&s, last, " \t\r\n ", 5);
  emit("m1-trailing-whitespace", &s, RG_OK, NULL);
  s = start(1);
  op_cut(&s, last - 1, 1);
  emit("m1-missing-final-brace", &s, RG_ERR_IO, NULL);
  s = start(1);
  memset(pad, '[', 200);
  op_ins(&s, 0, pad, 200);
  emit("m1-deep-nesting", &s, RG_ERR_IO, "object");
  s = start(1);
  op_ins(&s, pos_of(h, "{", pos_of(h, "\"fc1.weight\"", 0)) + 1, "\"x\":[1],", 8);
  emit("m1-tensor-unknown-key", &s, RG_ERR_IO, "unknown or repeated key");
  s = start(1);
  op_ins(&s, pos_of(h, "{", pos_of(h, "\"fc1.weight\"", 0)) + 1, "\"dtype\":\"F32\",", 14);
  emit("m1-tensor-repeated-key", &s, RG_ERR_IO, "unknown or repeated key");
  s = start(1);
  op_ins(&s, pos_of(h, "]", pos_of(h, "data_offsets", pos_of(h, "\"fc1.bias\"", 0))), ",16", 3);
  emit("m1-three-offsets", &s, RG_ERR_IO, NULL);

  /* Data bytes: any values load (NaN included), a negative step count too. */
  s = start(1);
  op_set(&s, 8 + hlen + 1, 0x7f);
  op_set(&s, 8 + hlen + 2, 0xc0);
  op_set(&s, 8 + hlen + 3, 0x7f);
  emit("m1-data-nan", &s, RG_OK, NULL);
  s = start(1);
  for (int i = 0; i < 4; i++) op_set(&s, 8 + hlen + num_val(h, st) + (uint64_t)i, 0xff);
  emit("m1-step-negative", &s, RG_OK, NULL);
}

static void repros(void) {
  const fz_buf *h = &hfull;
  size_t w1 = off_idx(h, "fc1.weight", 2), b1 = off_idx(h, "fc1.bias", 1);
  size_t emp = off_idx(h, "empty", 2);
  seed s = start(1);
  op_num(&s, emp, num_val(h, w1) + 8); /* "empty" [8, 8]: inside fc1.weight [0, 48] */
  op_num(&s, emp + 1, num_val(h, w1) + 8);
  op_num(&s, b1, num_val(h, w1) + 16); /* fc1.bias [16, 32]: overlaps fc1.weight */
  op_num(&s, b1 + 1, num_val(h, w1) + 32);
  repro("overlap-hidden-by-empty-tensor", &s,
        "fc1.bias [16,32] overlaps fc1.weight [0,48]; a zero-byte tensor at [8,8] sits "
        "between them in begin order, and check_header compares each tensor only with the "
        "previous one (by[k]->begin < by[k-1]->end), so the overlap is not seen: RG_OK, "
        "want RG_ERR_IO \"overlap\"");
  s = start(1);
  op_str(&s, str_idx(h, "conv.kernel"), "out of host memory");
  repro("io-error-reported-as-oom", &s,
        "rg_load picks its status with strstr(bad, \"out of host memory\"), and the reason "
        "quotes the file's tensor name: a tensor named \"out of host memory\" (or any name "
        "holding it) gives RG_ERR_OOM, want RG_ERR_IO (\"does not have\")");
  s = start(1);
  op_str(&s, str_idx(h, "scale"), "s\\u000zale");
  repro("bad-hex-in-unicode-escape", &s,
        "jstr maps a non-hex digit to 99 and checks only v > 0xffff, so \"\\u000z\" "
        "decodes to 'c' (99): \"s\\u000zale\" is read as \"scale\" and loads, want "
        "RG_ERR_IO (bad \\u escape)");
  s = start(1);
  size_t w1_offsets = pos_of(h, "data_offsets", pos_of(h, "\"fc1.weight\"", 0));
  op_ins(&s, pos_of(h, "[", w1_offsets) + 1, "00", 2);
  repro("leading-zeros-in-number", &s,
        "juint accepts leading zeros (\"data_offsets\":[000,48]), which JSON forbids and "
        "other safetensors readers reject; RG_OK, want RG_ERR_IO");
}

int main(int argc, char **argv) {
  int repro_mode = argc == 3 && !strcmp(argv[1], "--repro");
  if (argc != 2 && !repro_mode) {
    fprintf(stderr, "usage: %s OUTDIR | --repro DIR\n", argv[0]);
    return 2;
  }
  outdir = argv[argc - 1];
  if (mkdir(outdir, 0755) != 0 && errno != EEXIST)
    fz_die("gen: mkdir %s: %s", outdir, strerror(errno));
  fz_init();
  uint64_t hl = fz_le64(fz.base_full.p);
  fz_set(&hfull, fz.base_full.p + 8, (size_t)hl);
  dlen_full = fz.base_full.n - 8 - hl;
  hl = fz_le64(fz.base_weights.p);
  fz_set(&hweights, fz.base_weights.p + 8, (size_t)hl);
  if (repro_mode) {
    repros();
    return 0;
  }
  raw_seeds();
  mode1_seeds();
  printf("%d seeds, %zu bytes, in %s\n", nseeds, total_bytes, outdir);
  return 0;
}
