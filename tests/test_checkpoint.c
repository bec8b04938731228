/*
 * test_checkpoint.c - rg_save / rg_load: round trip, resume equality, metadata, and every
 * kind of bad file giving RG_ERR_IO with the model, optimizer and metadata unchanged.
 * Non-finite values: a save refuses them (the old file untouched), a load refuses a file
 * holding one (nothing changed), rg_options.nonfinite_checkpoints lets both through.
 * Paths: a save writes through a symbolic link, and refuses a FIFO or a directory.
 * rg_st_write / rg_st_open: any dtypes, shapes and metadata round trip; bad headers and
 * arguments are refused naming the problem; a checkpoint reads as a safetensors file.
 */
#include "common.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define B 8
#define D 6
#define K 3

static char path[256], bad[256];
static int with_opt = 1; /* load the optimizer's state too (hand-made headers hold none) */

/* A 6-8-3 MLP with AdamW; the batch of step s is a pure function of s. */
typedef struct model { rg_ctx *ctx; rg_tensor w1, b1, w2; rg_optim *opt; } model;

static model make_opts(rg_options o) {
  model m = {open_cpu_opts(o), {0}, {0}, {0}, NULL};
  if (!m.ctx) return m;
  rg_init n = {RG_INIT_NORMAL, 0.5f, 0};
  m.w1 = rg_param(m.ctx, "fc1.weight", RG_F32, 2, (int64_t[]){8, D}, n);
  m.b1 = rg_param(m.ctx, "fc1.bias", RG_F32, 1, (int64_t[]){8}, (rg_init){0});
  m.w2 = rg_param(m.ctx, "fc2.weight", RG_F32, 2, (int64_t[]){K, 8}, n);
  m.opt = rg_optim_adamw(m.ctx, &(rg_adamw_options){.lr = 1e-2f, .weight_decay = 0.01f});
  return m;
}

static model make(uint64_t seed) { return make_opts((rg_options){.seed = seed}); }

static float step(model *m, int s) {
  float x[B * D];
  int32_t y[B];
  for (int i = 0; i < B * D; i++) x[i] = (float)(((s * 131 + i * 37) % 97) / 48.0 - 1.0);
  for (int i = 0; i < B; i++) y[i] = (s + i * 5) % K;
  rg_ctx *c = m->ctx;
  rg_step_begin(c);
  rg_tensor xi = rg_input(c, RG_F32, 2, (int64_t[]){B, D}, x);
  rg_tensor yi = rg_input(c, RG_I32, 1, (int64_t[]){B}, y);
  rg_tensor h = rg_dropout(c, rg_relu(c, rg_linear(c, xi, m->w1, m->b1)), 0.25f);
  rg_tensor loss = rg_cross_entropy(c, rg_linear(c, h, m->w2, RG_NONE), yi);
  rg_backward(c, loss);
  rg_optim_step(m->opt);
  rg_zero_grad(c);
  float l = -1;
  CHECK_ST(c, rg_item(c, loss, &l), RG_OK);
  return l;
}

static void read_all(model *m, float *out) { /* weights, in order: 48 + 8 + 24 */
  CHECK_ST(m->ctx, rg_read(m->ctx, m->w1, out, 48 * 4), RG_OK);
  CHECK_ST(m->ctx, rg_read(m->ctx, m->b1, out + 48, 8 * 4), RG_OK);
  CHECK_ST(m->ctx, rg_read(m->ctx, m->w2, out + 56, 24 * 4), RG_OK);
}

static void close_model(model *m) {
  rg_optim_free(m->opt);
  CHECK_ST(m->ctx, rg_close(m->ctx), RG_OK);
}

/* 2N steps straight equal N steps, save, a fresh context loads, N more steps. */
static void test_resume(void) {
  enum { N = 6 };
  float straight[2 * N], resumed[2 * N];
  model a = make(7);
  if (!a.ctx) return;
  for (int s = 0; s < 2 * N; s++) straight[s] = step(&a, s);
  close_model(&a);

  model b = make(7);
  for (int s = 0; s < N; s++) resumed[s] = step(&b, s);
  CHECK_ST(b.ctx, rg_meta_set(b.ctx, "config", "6-8-3"), RG_OK);
  CHECK_ST(b.ctx, rg_save(b.ctx, path, b.opt), RG_OK);
  close_model(&b);

  model c = make(99); /* another seed: everything must come from the file */
  CHECK_ST(c.ctx, rg_load(c.ctx, path, c.opt), RG_OK);
  CHECK(rg_optim_steps(c.opt) == N, "step count restored: %lld", (long long)rg_optim_steps(c.opt));
  const char *cfg = rg_meta_get(c.ctx, "config");
  CHECK(cfg && !strcmp(cfg, "6-8-3"), "metadata restored: %s", cfg ? cfg : "(null)");
  for (int s = N; s < 2 * N; s++) resumed[s] = step(&c, s);
  for (int s = 0; s < 2 * N; s++)
    CHECK(straight[s] == resumed[s], "step %d: straight %.9g resumed %.9g", s, straight[s],
          resumed[s]);
  close_model(&c);
}

static void write_file(const char *p, const void *data, size_t n) {
  FILE *f = fopen(p, "wb");
  CHECK(f != NULL, "cannot write %s", p);
  if (!f) return;
  fwrite(data, 1, n, f);
  fclose(f);
}

static unsigned char *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  rewind(f);
  unsigned char *d = malloc(*n + 1);
  if (d && fread(d, 1, *n, f) != *n) *n = 0;
  fclose(f);
  return d;
}

/* A file with the given JSON header and `data` bytes of data. */
static void with_header(const char *json, size_t data) {
  size_t h = strlen(json);
  unsigned char *buf = calloc(1, 8 + h + data);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(buf + 8, json, h);
  write_file(bad, buf, 8 + h + data);
  free(buf);
}

/* Loading `bad` must fail with want, name the problem, and change nothing. */
static int n_refused, n_mutated; /* files tried, for the summary line */

static void expect_refused(model *m, rg_status want, const char *what, const char *needle) {
  float before[80], after[80];
  n_refused++;
  read_all(m, before);
  int64_t steps = rg_optim_steps(m->opt);
  rg_clear_error(m->ctx);
  rg_status st = rg_load(m->ctx, bad, with_opt ? m->opt : NULL);
  CHECK(st == want, "%s: rg_load -> %s (%s)", what, rg_status_str(st), rg_errmsg(m->ctx));
  CHECK(!needle || msg_has(m->ctx, needle), "%s: message names the problem: %s", what,
        rg_errmsg(m->ctx));
  rg_clear_error(m->ctx);
  read_all(m, after);
  CHECK(!memcmp(before, after, sizeof before), "%s: weights unchanged", what);
  CHECK(rg_optim_steps(m->opt) == steps, "%s: optimizer unchanged", what);
  const char *cfg = rg_meta_get(m->ctx, "config");
  CHECK(cfg && !strcmp(cfg, "mine"), "%s: metadata unchanged", what);
}

static void expect_io(model *m, const char *what, const char *needle) {
  expect_refused(m, RG_ERR_IO, what, needle);
}

static void test_bad_files(void) {
  model m = make(3);
  if (!m.ctx) return;
  step(&m, 0);
  CHECK_ST(m.ctx, rg_meta_set(m.ctx, "config", "theirs"), RG_OK);
  CHECK_ST(m.ctx, rg_save(m.ctx, path, m.opt), RG_OK);
  CHECK_ST(m.ctx, rg_meta_set(m.ctx, "config", "mine"), RG_OK);
  step(&m, 1);
  size_t n = 0;
  unsigned char *good = slurp(path, &n);
  CHECK(good && n > 100, "saved file readable (%zu bytes)", n);
  if (!good) return;
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)good[i] << (8 * i);

  CHECK(rg_load(m.ctx, "/nonexistent/dir/x.safetensors", m.opt) == RG_ERR_IO, "missing file");
  rg_clear_error(m.ctx);
  write_file(bad, good, 5);
  expect_io(&m, "5-byte file", "shorter");
  write_file(bad, good, 8 + hlen / 2);
  expect_io(&m, "truncated header", "header");
  write_file(bad, good, n - 7);
  expect_io(&m, "truncated data", NULL);
  unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
  write_file(bad, huge, sizeof huge);
  expect_io(&m, "huge declared header length", "header length");
  /* Every single-byte corruption of the header is caught or harmless; none crash. */
  unsigned char *mut = malloc(n);
  for (uint64_t i = 8; i < 8 + hlen; i += 7) {
    memcpy(mut, good, n);
    mut[i] ^= 0x5a;
    n_mutated++;
    write_file(bad, mut, n);
    rg_status st = rg_load(m.ctx, bad, m.opt);
    CHECK(st == RG_OK || st == RG_ERR_IO, "mutated byte %llu: %s", (unsigned long long)i,
          rg_status_str(st));
    rg_clear_error(m.ctx);
  }
  free(mut);
  CHECK_ST(m.ctx, rg_meta_set(m.ctx, "config", "mine"), RG_OK); /* a harmless mutation loaded */
  with_header("{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[8,6],\"data_offsets\":[0,192]}", 192);
  expect_io(&m, "bad JSON", "header");
  with_header("[]", 0);
  expect_io(&m, "not an object", "object");
  with_header("{\"__metadata__\":{}}", 0);
  expect_io(&m, "missing tensors", "missing");
  const char *w1 = "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[8,6],\"data_offsets\":[0,192]}";
  const char *b1 = "\"fc1.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[192,224]}";
  const char *w2 = "\"fc2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],\"data_offsets\":[224,320]}";
  char j[1024];
  snprintf(j, sizeof j, "{%s,%s,%s}", w1, b1, w2);
  with_header(j, 320);
  rg_clear_error(m.ctx);
  CHECK(rg_load(m.ctx, bad, NULL) == RG_OK, "weights-only file loads without an optimizer: %s",
        rg_errmsg(m.ctx));
  CHECK_ST(m.ctx, rg_meta_set(m.ctx, "config", "mine"), RG_OK);
  expect_io(&m, "optimizer state missing", "optim.");
  with_opt = 0;
  snprintf(j, sizeof j, "{%s,%s,%s,%s}", w1, b1, w2, w1);
  with_header(j, 320);
  expect_io(&m, "duplicate name", "twice");
  snprintf(j, sizeof j, "{%s,%s,\"fc2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],"
           "\"data_offsets\":[100,196]}}", w1, b1);
  with_header(j, 320);
  expect_io(&m, "overlapping tensors", "overlap");
  snprintf(j, sizeof j, "{%s,%s,\"fc2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],"
           "\"data_offsets\":[224,320]}}", w1, b1);
  with_header(j, 300);
  expect_io(&m, "offsets past the end", "data_offsets");
  snprintf(j, sizeof j, "{%s,%s,\"fc2.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],"
           "\"data_offsets\":[224,352]}}", w1, b1);
  with_header(j, 352);
  expect_io(&m, "wrong shape", "different model");
  snprintf(j, sizeof j, "{%s,%s,\"fc2.weight\":{\"dtype\":\"BF16\",\"shape\":[3,8],"
           "\"data_offsets\":[224,272]}}", w1, b1);
  with_header(j, 272);
  expect_io(&m, "wrong dtype", "BF16");
  snprintf(j, sizeof j, "{%s,%s,%s,\"extra\":{\"dtype\":\"F32\",\"shape\":[1],"
           "\"data_offsets\":[320,324]}}", w1, b1, w2);
  with_header(j, 324);
  expect_io(&m, "unknown tensor", "extra");
  snprintf(j, sizeof j, "{%s,%s,\"fc2.w\\u00e9ight\":{\"dtype\":\"F32\",\"shape\":[3,8],"
           "\"data_offsets\":[224,320]}}", w1, b1);
  with_header(j, 320);
  expect_io(&m, "non-ASCII escape", NULL);
  snprintf(j, sizeof j, "{%s,%s,\"fc2.w\xff\xfeight\":{\"dtype\":\"F32\",\"shape\":[3,8],"
           "\"data_offsets\":[224,320]}}", w1, b1);
  with_header(j, 320);
  expect_io(&m, "non-UTF-8 name", NULL);
  /* Without an optimizer, a file's optimizer state is skipped, but only the state this
     model's save could hold, and only when it lies inside the data. */
#define ONE_F32(name, b, e) \
  ",\"" name "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" #b "," #e "]}"
  char params[512];
  snprintf(params, sizeof params, "%s,%s,%s", w1, b1, w2);
  snprintf(j, sizeof j, "{%s%s}", params, ONE_F32("optim.step", 320, 324));
  with_header(j, 324);
  CHECK(rg_load(m.ctx, bad, NULL) == RG_OK, "optimizer state is skipped without an optimizer: %s",
        rg_errmsg(m.ctx));
  CHECK_ST(m.ctx, rg_meta_set(m.ctx, "config", "mine"), RG_OK);
  snprintf(j, sizeof j, "{%s%s}", params, ONE_F32("optim.step", 320, 330));
  with_header(j, 324);
  expect_io(&m, "skipped optimizer state past the end", "optim.step");
  snprintf(j, sizeof j, "{%s%s}", params, ONE_F32("optim.step", 316, 320));
  with_header(j, 320);
  expect_io(&m, "skipped optimizer state overlapping a parameter", "overlap");
  snprintf(j, sizeof j, "{%s%s%s}", params, ONE_F32("optim.step", 320, 324),
           ONE_F32("optim.step", 324, 328));
  with_header(j, 328);
  expect_io(&m, "skipped optimizer state twice", "twice");
  snprintf(j, sizeof j, "{%s%s}", params, ONE_F32("optim.m.fc9.weight", 320, 324));
  with_header(j, 324);
  expect_io(&m, "optimizer state of a parameter this model lacks", "fc9.weight");
#undef ONE_F32
  with_opt = 1;
  free(good);

  /* A failed save leaves the previous file alone. */
  size_t n0 = 0, n1 = 0;
  unsigned char *f0 = slurp(path, &n0);
  CHECK(rg_save(m.ctx, "/nonexistent/dir/x.safetensors", m.opt) == RG_ERR_IO, "save to a bad dir");
  rg_clear_error(m.ctx);
  unsigned char *f1 = slurp(path, &n1);
  CHECK(f0 && f1 && n0 == n1 && !memcmp(f0, f1, n0), "previous file untouched");
  free(f0);
  free(f1);
  CHECK(rg_meta_set(m.ctx, "step", "1") == RG_ERR_MISUSE, "reserved metadata key");
  rg_clear_error(m.ctx);
  close_model(&m);
}

/* Does the directory of p hold a temporary file of a save to p? */
static int temp_left(const char *p) {
  char dir[256];
  snprintf(dir, sizeof dir, "%s", p);
  char *slash = strrchr(dir, '/');
  const char *base = slash ? slash + 1 : p;
  if (slash) *slash = 0;
  char prefix[300];
  snprintf(prefix, sizeof prefix, "%s.tmp.", base);
  DIR *d = opendir(slash ? dir : ".");
  int found = 0;
  for (struct dirent *e; d && (e = readdir(d));)
    found |= !strncmp(e->d_name, prefix, strlen(prefix));
  if (d) closedir(d);
  return found;
}

static void set_weight(model *m, rg_tensor w, int i, float v) {
  float x[48];
  size_t n = (size_t)rg_numel(m->ctx, w) * 4;
  CHECK_ST(m->ctx, rg_read(m->ctx, w, x, n), RG_OK);
  x[i] = v;
  CHECK_ST(m->ctx, rg_write(m->ctx, w, x, n), RG_OK);
}

static void test_nonfinite(void) {
  model m = make(4);
  if (!m.ctx) return;
  step(&m, 0);
  CHECK_ST(m.ctx, rg_meta_set(m.ctx, "config", "mine"), RG_OK);
  CHECK_ST(m.ctx, rg_save(m.ctx, path, m.opt), RG_OK);
  size_t n0 = 0, n1 = 0;
  unsigned char *f0 = slurp(path, &n0);
  /* A save of a NaN parameter writes nothing. */
  set_weight(&m, m.b1, 3, NAN);
  CHECK_ST(m.ctx, rg_save(m.ctx, path, m.opt), RG_ERR_NONFINITE);
  CHECK(msg_has(m.ctx, "fc1.bias") && msg_has(m.ctx, "element 3") && msg_has(m.ctx, "NaN") &&
        msg_has(m.ctx, "nonfinite_checkpoints"), "the message names the tensor, element and "
        "what to do: %s", rg_errmsg(m.ctx));
  rg_clear_error(m.ctx);
  unsigned char *f1 = slurp(path, &n1);
  CHECK(f0 && f1 && n0 == n1 && !memcmp(f0, f1, n0), "the previous file is untouched");
  CHECK(!temp_left(path), "no temporary file is left");
  free(f1);
  set_weight(&m, m.b1, 3, 0.5f);
  /* A file holding +Inf (patched into fc2.weight[5] of a good save) loads nothing. */
  uint64_t hlen = 0;
  for (int i = 0; f0 && i < 8; i++) hlen |= (uint64_t)f0[i] << (8 * i);
  size_t at = 8 + (size_t)hlen + (48 + 8 + 5) * 4;
  CHECK(f0 && at + 4 <= n0, "the saved file holds fc2.weight");
  if (!f0 || at + 4 > n0) return;
  float inf = INFINITY;
  memcpy(f0 + at, &inf, 4);
  write_file(bad, f0, n0);
  expect_refused(&m, RG_ERR_NONFINITE, "an Inf in a weight", "fc2.weight");
  CHECK_ST(m.ctx, rg_load(m.ctx, bad, m.opt), RG_ERR_NONFINITE);
  CHECK(msg_has(m.ctx, "element 5") && msg_has(m.ctx, "+Inf"), "the message names the "
        "element: %s", rg_errmsg(m.ctx));
  rg_clear_error(m.ctx);
  close_model(&m);
  /* rg_options.nonfinite_checkpoints: both go through. */
  model d = make_opts((rg_options){.seed = 4, .nonfinite_checkpoints = 1});
  if (!d.ctx) return;
  CHECK_ST(d.ctx, rg_load(d.ctx, bad, d.opt), RG_OK);
  float w2[24];
  CHECK_ST(d.ctx, rg_read(d.ctx, d.w2, w2, sizeof w2), RG_OK);
  CHECK(w2[5] == INFINITY, "the Inf was loaded: %g", w2[5]);
  set_weight(&d, d.b1, 0, NAN);
  CHECK_ST(d.ctx, rg_save(d.ctx, path, d.opt), RG_OK);
  close_model(&d);
  free(f0);
}

/* A save through a symbolic link replaces its target; a FIFO or a directory is refused. */
static void test_paths(void) {
  model m = make(6);
  if (!m.ctx) return;
  step(&m, 0);
  char link[300], target[300], fifo[300], dir[300];
  snprintf(link, sizeof link, "%s.link", path);
  snprintf(target, sizeof target, "%s.target", path);
  snprintf(fifo, sizeof fifo, "%s.fifo", path);
  snprintf(dir, sizeof dir, "%s.dir", path);
  write_file(target, "old", 3);
  CHECK(symlink(target, link) == 0, "symlink %s", link);
  CHECK_ST(m.ctx, rg_save(m.ctx, link, m.opt), RG_OK);
  CHECK_ST(m.ctx, rg_save(m.ctx, path, m.opt), RG_OK); /* the same state, directly */
  struct stat sb;
  CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link is still a link");
  size_t na = 0, nb = 0;
  unsigned char *a = slurp(target, &na), *b = slurp(path, &nb);
  CHECK(a && b && na == nb && !memcmp(a, b, na), "the link's target holds the checkpoint");
  CHECK(!temp_left(link) && !temp_left(target), "no temporary file is left");
  free(a);
  free(b);
  model l = make(8);
  CHECK_ST(l.ctx, rg_load(l.ctx, link, l.opt), RG_OK);
  close_model(&l);
  unlink(link);
  unlink(target);
  CHECK(symlink("/nonexistent-rg-dir/x", link) == 0, "symlink %s", link);
  CHECK_ST(m.ctx, rg_save(m.ctx, link, m.opt), RG_ERR_IO);
  CHECK(msg_has(m.ctx, "symbolic link"), "a dangling link: %s", rg_errmsg(m.ctx));
  rg_clear_error(m.ctx);
  unlink(link);
  CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
  CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
  CHECK(symlink(fifo, link) == 0, "symlink %s", link);
  const char *refused[] = {fifo, dir, link};
  for (int i = 0; i < 3; i++) {
    CHECK_ST(m.ctx, rg_save(m.ctx, refused[i], m.opt), RG_ERR_IO);
    CHECK(msg_has(m.ctx, "not a regular file"), "%s: %s", refused[i], rg_errmsg(m.ctx));
    rg_clear_error(m.ctx);
  }
  CHECK(stat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO is still a FIFO");
  CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode), "the link to it is still a link");
  CHECK(rmdir(dir) == 0, "the directory is still an empty directory");
  CHECK(!temp_left(fifo) && !temp_left(dir), "no temporary file is left");
  unlink(link);
  unlink(fifo);
  close_model(&m);
}

/* rg_st_write and rg_st_open: any tensors and metadata round trip, a resgrad checkpoint
   reads as a safetensors file, bad headers and bad arguments are refused with a reason. */
static void test_st(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  static const uint16_t h[6] = {1, 2, 3, 4, 5, 6};
  static const int64_t q[2] = {-7, 1LL << 40};
  static const unsigned char flags[3] = {1, 0, 1};
  const rg_st_tensor t[] = {
      {.name = "half", .dtype = "F16", .ndim = 2, .dims = {2, 3}, .data = h},
      {.name = "big \"ints\"", .dtype = "I64", .ndim = 1, .dims = {2}, .data = q},
      {.name = "flags", .dtype = "BOOL", .ndim = 3, .dims = {1, 3, 1}, .data = flags},
      {.name = "empty", .dtype = "F32", .ndim = 2, .dims = {0, 5}, .data = NULL},
      {.name = "scalar", .dtype = "U8", .ndim = 0, .data = flags}};
  static const char *const meta[] = {"format", "pt", "who", "a \"test\"", NULL};
  CHECK_ST(ctx, rg_st_write(ctx, bad, t, 5, meta), RG_OK);
  rg_st_file *f = rg_st_open(ctx, bad);
  CHECK(f && rg_st_count(f) == 5, "reopened: %s", rg_errmsg(ctx));
  for (int i = 0; f && i < 5; i++) {
    const rg_st_tensor *r = rg_st_at(f, i), *n = rg_st_find(f, t[i].name);
    CHECK(r == n && r && !strcmp(r->name, t[i].name) && !strcmp(r->dtype, t[i].dtype) &&
              r->ndim == t[i].ndim && !memcmp(r->dims, t[i].dims, sizeof r->dims) && !r->data,
          "tensor %d described as written", i);
    unsigned char buf[32] = {0};
    if (r && r->nbytes <= sizeof buf) {
      CHECK_ST(ctx, rg_st_read(f, r, buf, r->nbytes), RG_OK);
      CHECK(!r->nbytes || !memcmp(buf, t[i].data, r->nbytes), "tensor %d's bytes", i);
    }
  }
  const char *who = rg_st_meta(f, "who");
  CHECK(who && !strcmp(who, "a \"test\"") && !rg_st_meta(f, "none"), "metadata read back");
  CHECK(!rg_st_at(f, 5) && !rg_st_at(f, -1) && !rg_st_find(f, "nope"), "lookups outside");
  unsigned char small[4];
  CHECK_ST(ctx, rg_st_read(f, rg_st_find(f, "half"), small, sizeof small), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "12 bytes"), "wrong size named: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_st_read(f, &t[0], small, 12), RG_ERR_MISUSE); /* not the file's */
  rg_clear_error(ctx);
  rg_st_close(f);

  /* misuse: nothing written, the file above unchanged */
  const rg_st_tensor dup[] = {t[0], t[0]}, bad_dtype[] = {{.name = "x", .dtype = "F12"}},
                     no_data[] = {{.name = "x", .dtype = "F32", .ndim = 1, .dims = {2}}};
  CHECK_ST(ctx, rg_st_write(ctx, bad, dup, 2, NULL), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "twice"), "duplicate: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_st_write(ctx, bad, bad_dtype, 1, NULL), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "dtype"), "dtype: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_st_write(ctx, bad, no_data, 1, NULL), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "NULL"), "data: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_ctx *dry = open_cpu_opts((rg_options){.dry_run = 1});
  CHECK_ST(dry, dry ? rg_st_write(dry, bad, t, 5, NULL) : RG_ERR_UNSUPPORTED,
           RG_ERR_UNSUPPORTED);
  if (dry) rg_close(dry);
  f = rg_st_open(ctx, bad);
  CHECK(f && rg_st_count(f) == 5, "a refused write changed the file");
  rg_st_close(f);

  /* bad headers */
  static const struct { const char *json; size_t data; const char *needle; } hdr[] = {
      {"{\"a\":{\"dtype\":\"F17\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "F17"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "8 bytes"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "twice"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
       "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8, "overlap"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
       "more than 8 axes"},
      {"{\"__metadata__\":{\"k\":1}}", 0, "string"}};
  for (size_t i = 0; i < sizeof hdr / sizeof *hdr; i++) {
    with_header(hdr[i].json, hdr[i].data);
    CHECK(!rg_st_open(ctx, bad) && rg_error(ctx) == RG_ERR_IO && msg_has(ctx, hdr[i].needle),
          "bad header %zu refused naming \"%s\": %s", i, hdr[i].needle, rg_errmsg(ctx));
    rg_clear_error(ctx);
  }

  /* a resgrad checkpoint is a safetensors file */
  model m = make(5);
  CHECK_ST(m.ctx, rg_save(m.ctx, path, m.opt), RG_OK);
  f = rg_st_open(ctx, path);
  const rg_st_tensor *w1 = rg_st_find(f, "fc1.weight");
  const char *fmt = rg_st_meta(f, "format");
  CHECK(f && rg_st_count(f) == 3 + 2 * 3 + 2 && w1 && w1->nbytes == 48 * 4 && fmt &&
            !strcmp(fmt, "resgrad"),
        "a checkpoint read with rg_st_open: %s", rg_errmsg(ctx));
  float mine[48], file[48];
  CHECK_ST(m.ctx, rg_read(m.ctx, m.w1, mine, sizeof mine), RG_OK);
  if (w1) CHECK_ST(ctx, rg_st_read(f, w1, file, sizeof file), RG_OK);
  CHECK(w1 && !memcmp(mine, file, sizeof mine), "fc1.weight read as saved");
  rg_st_close(f);
  close_model(&m);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/rg_ckpt_%ld.safetensors", tmp ? tmp : "/tmp", (long)getpid());
  snprintf(bad, sizeof bad, "%s/rg_bad_%ld.safetensors", tmp ? tmp : "/tmp", (long)getpid());
  test_resume();
  test_bad_files();
  test_nonfinite();
  test_paths();
  test_st();
  unlink(path);
  unlink(bad);
  int r = finish();
  printf("test_checkpoint: %s (%d hostile files refused with nothing changed, %d "
         "single-byte header corruptions loaded or refused)\n", r ? "FAIL" : "ok", n_refused,
         n_mutated);
  return r;
}
