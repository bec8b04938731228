/*
 * test_hf.c - rg_gpt_load_hf and rg_gpt_save_hf on the CPU, against a tiny GPT-2 that
 * Hugging Face's transformers made (tests/data/hf_gpt2_tiny, tools/hf_gpt2_fixture.py):
 *  - loaded, its logits on a fixed batch are transformers' (computed in float64) within
 *    1e-4 absolute (the logits reach about 3.4; float32's rounding leaves about 1e-6),
 *    and rg_gpt_generate continues two prompts greedily with transformers' tokens;
 *  - exported, the file holds the same names, shapes and bytes as transformers' file,
 *    and it and its config.json load back to the same logits;
 *  - the file's variants load alike: names without "transformer.", the causal mask's
 *    buffers, a tied "lm_head.weight"; BF16 and F16 values load exactly (each is the
 *    F32 value with its low mantissa bits cleared);
 *  - a file that is not such a GPT-2 makes no parameter and gives an error naming what is
 *    wrong: a resgrad checkpoint, a truncated file, a wrong shape, a missing tensor, an
 *    unknown one, an I32 tensor, an untied head, a NaN, no wte, a lone tensor of a far
 *    block, no config.json, a config of another activation, heads that do not divide
 *    n_embd, no file.
 */
#include "hf_fixture.h"

#include <sys/stat.h>

#define TOL 1e-4

/* A copy of a safetensors file's tensors in memory, to edit and write again. */
enum { MAXT = 64 };
typedef struct tset {
  int n;
  rg_st_tensor t[MAXT];
  char name[MAXT][128];
  unsigned char *buf[MAXT];
} tset;

static void tset_load(rg_ctx *ctx, tset *s, const char *path) {
  memset(s, 0, sizeof *s);
  rg_st_file *f = rg_st_open(ctx, path);
  CHECK(f != NULL, "open %s: %s", path, rg_errmsg(ctx));
  for (int i = 0; f && i < rg_st_count(f) && i < MAXT; i++, s->n++) {
    const rg_st_tensor *t = rg_st_at(f, i);
    s->t[i] = *t;
    snprintf(s->name[i], sizeof s->name[i], "%s", t->name);
    s->t[i].name = s->name[i];
    s->buf[i] = malloc(t->nbytes + 1);
    s->t[i].data = s->buf[i];
    CHECK_ST(ctx, rg_st_read(f, t, s->buf[i], t->nbytes), RG_OK);
  }
  rg_st_close(f);
}

static void tset_free(tset *s) {
  for (int i = 0; i < s->n; i++) free(s->buf[i]);
  s->n = 0;
}

static int tset_find(tset *s, const char *name) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->name[i], name)) return i;
  return -1;
}

/* Appends a tensor of nbytes bytes (zeros) and returns its index. */
static int tset_add(tset *s, const char *name, const char *dtype, int ndim,
                    const int64_t *dims, size_t nbytes) {
  int i = s->n++;
  snprintf(s->name[i], sizeof s->name[i], "%s", name);
  s->buf[i] = calloc(1, nbytes + 1);
  s->t[i] = (rg_st_tensor){.name = s->name[i], .ndim = ndim, .nbytes = nbytes,
                           .data = s->buf[i]};
  snprintf(s->t[i].dtype, sizeof s->t[i].dtype, "%s", dtype);
  if (ndim) memcpy(s->t[i].dims, dims, sizeof(int64_t) * (size_t)ndim);
  return i;
}

static void tset_drop(tset *s, int i) {
  free(s->buf[i]);
  for (int k = i; k + 1 < s->n; k++) {
    s->t[k] = s->t[k + 1];
    memcpy(s->name[k], s->name[k + 1], sizeof s->name[k]);
    s->t[k].name = s->name[k];
    s->buf[k] = s->buf[k + 1];
  }
  s->n--;
}

static void tset_write(rg_ctx *ctx, tset *s, const char *path) {
  static const char *const meta[] = {"format", "pt", NULL};
  CHECK_ST(ctx, rg_st_write(ctx, path, s->t, s->n, meta), RG_OK);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL, "cannot write %s", path);
  if (f) fputs(text, f), fclose(f);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *s = calloc(1, 1 << 16);
  if (s) (void)!fread(s, 1, (1 << 16) - 1, f);
  fclose(f);
  return s;
}

/* Loads path (heads, prefix) in a fresh context; checks its logits within tol. */
static void expect_logits(const char *what, const char *path, int64_t heads,
                          const char *prefix, double tol) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_gpt *g = rg_gpt_load_hf(ctx, path, heads, prefix);
  CHECK(g != NULL, "%s: rg_gpt_load_hf: %s", what, rg_errmsg(ctx));
  if (g) {
    const rg_gpt_config *c = rg_gpt_config_of(g);
    CHECK(c->vocab == HF_V && c->block == HF_T && c->layers == HF_L && c->width == HF_C &&
              c->heads == HF_H,
          "%s: config %lld %lld %lld %lld %lld", what, (long long)c->vocab,
          (long long)c->block, (long long)c->layers, (long long)c->width, (long long)c->heads);
    double err = hf_logits_err(ctx, g);
    CHECK(err >= 0 && err <= tol, "%s: max |logit - transformers'| = %.3g > %.3g", what, err,
          tol);
    printf("%-46s max |logit - transformers'| %.2e\n", what, err);
    int diff = hf_greedy_diff(ctx, g);
    CHECK(diff == 0, "%s: greedy generation: %d of 16 tokens differ from transformers'", what,
          diff);
  }
  rg_gpt_free(g);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Loading path must fail with want and a message holding needle, making no parameter. */
static void expect_refused(const char *what, const char *path, int64_t heads, rg_status want,
                           const char *needle) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_gpt *g = rg_gpt_load_hf(ctx, path, heads, NULL);
  CHECK(g == NULL && rg_error(ctx) == want, "%s: got %p, %s: %s", what, (void *)g,
        rg_status_str(rg_error(ctx)), rg_errmsg(ctx));
  CHECK(msg_has(ctx, needle), "%s: the message names the problem (%s): %s", what, needle,
        rg_errmsg(ctx));
  if (want != RG_ERR_NONFINITE)
    CHECK(rg_param_count(ctx) == 0, "%s: %d parameters made", what, rg_param_count(ctx));
  printf("%-46s %s\n", what, rg_errmsg(ctx));
  rg_gpt_free(g);
  rg_close(ctx);
}

static void test_load(void) {
  char model[4096];
  hf_path(model, sizeof model, "model.safetensors");
  expect_logits("transformers' file, n_head from config.json", model, 0, NULL, TOL);
  expect_logits("transformers' file, heads 3, prefix gpt0.", model, HF_H, "gpt0.", TOL);
}

/* Exported, the tensors are transformers' bytes; the folder loads back. */
static void test_export(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  char model[4096];
  hf_path(model, sizeof model, "model.safetensors");
  mkdir("export", 0755);
  rg_gpt *g = rg_gpt_load_hf(ctx, model, 0, "m.");
  CHECK_ST(ctx, g ? rg_gpt_save_hf(g, "export/model.safetensors") : rg_error(ctx), RG_OK);
  rg_gpt_free(g);
  tset a, b;
  tset_load(ctx, &a, model);
  tset_load(ctx, &b, "export/model.safetensors");
  CHECK(a.n == b.n && a.n == 4 + 12 * HF_L, "tensors: %d exported, %d in the file", b.n, a.n);
  int same = 0;
  for (int i = 0; i < a.n; i++) {
    int k = tset_find(&b, a.name[i]);
    CHECK(k >= 0, "\"%s\" exported", a.name[i]);
    if (k < 0) continue;
    int ok = !strcmp(a.t[i].dtype, b.t[k].dtype) && a.t[i].ndim == b.t[k].ndim &&
             !memcmp(a.t[i].dims, b.t[k].dims, sizeof(int64_t) * (size_t)a.t[i].ndim) &&
             a.t[i].nbytes == b.t[k].nbytes && !memcmp(a.buf[i], b.buf[k], a.t[i].nbytes);
    CHECK(ok, "\"%s\": exported dtype, shape or bytes differ", a.name[i]);
    same += ok;
  }
  printf("exported: %d of %d tensors equal to transformers' byte for byte\n", same, a.n);
  tset_free(&a);
  tset_free(&b);
  rg_st_file *f = rg_st_open(ctx, "export/model.safetensors");
  const char *fmt = rg_st_meta(f, "format");
  CHECK(fmt && !strcmp(fmt, "pt"), "metadata format: %s", fmt ? fmt : "(none)");
  rg_st_close(f);
  char *cfg = read_text("export/config.json");
  CHECK(cfg && strstr(cfg, "\"model_type\": \"gpt2\"") && strstr(cfg, "\"n_head\": 3") &&
            strstr(cfg, "\"gelu_new\""),
        "config.json written: %s", cfg ? cfg : "(none)");
  free(cfg);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
  expect_logits("exported folder, n_head from its config.json", "export/model.safetensors", 0,
               NULL, TOL);
}

/* Names without "transformer.", the mask's buffers and a tied head load alike. */
static void test_variants(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  char model[4096], cfg[4096];
  hf_path(model, sizeof model, "model.safetensors");
  hf_path(cfg, sizeof cfg, "config.json");
  char *config = read_text(cfg);
  CHECK(config != NULL, "read %s", cfg);
  mkdir("variant", 0755);
  write_text("variant/config.json", config ? config : "");
  tset s;
  tset_load(ctx, &s, model);
  for (int i = 0; i < s.n; i++) /* "transformer.h.0..." -> "h.0..." */
    memmove(s.name[i], s.name[i] + strlen("transformer."),
            strlen(s.name[i]) - strlen("transformer.") + 1);
  for (int l = 0; l < HF_L; l++) {
    char n[64];
    snprintf(n, sizeof n, "h.%d.attn.bias", l);
    tset_add(&s, n, "F32", 4, (int64_t[]){1, 1, HF_T, HF_T}, sizeof(float) * HF_T * HF_T);
    snprintf(n, sizeof n, "h.%d.attn.masked_bias", l);
    tset_add(&s, n, "F32", 0, NULL, sizeof(float));
  }
  int wte = tset_find(&s, "wte.weight");
  int head = tset_add(&s, "lm_head.weight", "F32", 2, (int64_t[]){HF_V, HF_C},
                      sizeof(float) * HF_V * HF_C);
  memcpy(s.buf[head], s.buf[wte], sizeof(float) * HF_V * HF_C);
  tset_write(ctx, &s, "variant/model.safetensors");
  expect_logits("no \"transformer.\", mask buffers, tied lm_head", "variant/model.safetensors",
                0, NULL, TOL);

  /* BF16 (the top half of each F32) and F16 (a normal F32's sign, exponent and top 10
     mantissa bits; tiny values flushed to 0): the loaded parameters are those values. */
  for (int half = 0; half < 2; half++) {
    tset h;
    tset_load(ctx, &h, model);
    for (int i = 0; i < h.n; i++) {
      size_t n = h.t[i].nbytes / 4;
      uint32_t *src = (uint32_t *)h.buf[i];
      uint16_t *dst = malloc(2 * n + 1);
      for (size_t k = 0; k < n; k++) {
        uint32_t x = src[k], e = (x >> 23) & 0xff;
        dst[k] = !half ? (uint16_t)(x >> 16)
                 : e < 127 - 14 ? (uint16_t)((x >> 16) & 0x8000) /* below F16's normals */
                                : (uint16_t)(((x >> 16) & 0x8000) | ((e - 127 + 15) << 10) |
                                             ((x >> 13) & 0x3ff));
      }
      free(h.buf[i]);
      h.buf[i] = (unsigned char *)dst;
      h.t[i].data = dst;
      snprintf(h.t[i].dtype, sizeof h.t[i].dtype, "%s", half ? "F16" : "BF16");
    }
    const char *path = half ? "variant/f16.safetensors" : "variant/bf16.safetensors";
    tset_write(ctx, &h, path);
    tset_free(&h);
    rg_ctx *c2 = open_cpu();
    rg_gpt *g = c2 ? rg_gpt_load_hf(c2, path, HF_H, NULL) : NULL;
    CHECK(g != NULL, "%s: %s", path, c2 ? rg_errmsg(c2) : "no context");
    tset f32;
    tset_load(ctx, &f32, model);
    int exact = 1;
    for (int p = 0; g && p < rg_param_count(c2); p++) {
      rg_tensor t = rg_param_at(c2, p);
      char hfname[160];
      snprintf(hfname, sizeof hfname, "transformer.%s", rg_name(c2, t));
      int k = tset_find(&f32, hfname);
      size_t n = (size_t)rg_numel(c2, t);
      float *v = malloc(4 * n);
      CHECK_ST(c2, rg_read(c2, t, v, 4 * n), RG_OK);
      int conv = rg_ndim(c2, t) == 2 && strstr(hfname, ".h.") != NULL;
      size_t rows = (size_t)rg_dim(c2, t, 0), cols = n / rows;
      for (size_t i = 0; k >= 0 && i < n; i++) {
        /* resgrad's [out, in] element i is the file's [in, out] element (c, r) */
        size_t at = conv ? (i % cols) * rows + i / cols : i;
        uint32_t x, y;
        memcpy(&x, (uint32_t *)f32.buf[k] + at, 4);
        memcpy(&y, v + i, 4);
        uint32_t e = (x >> 23) & 0xff;
        uint32_t want = !half ? x & 0xffff0000u : e < 127 - 14 ? x & 0x80000000u
                                                               : x & 0xffffe000u;
        exact &= y == want;
      }
      free(v);
    }
    CHECK(exact, "%s: loaded values are the file's exactly", path);
    tset_free(&f32);
    double err = g ? hf_logits_err(c2, g) : -1;
    double tol = half ? 2e-2 : 1e-1; /* the weights' rounding, not the loader's */
    CHECK(err >= 0 && err <= tol, "%s: max |logit - transformers'| %.3g > %.3g", path, err, tol);
    printf("%-46s max |logit - transformers'| %.2e, values exact\n", path, err);
    rg_gpt_free(g);
    if (c2) rg_close(c2);
  }
  tset_free(&s);
  free(config);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Writes transformers' file with one edit into bad/model.safetensors (beside a copy of
   its config.json, or none) and checks the load's refusal. */
typedef void edit_fn(tset *s);
static void refuse_edit(const char *what, edit_fn *edit, int config, rg_status want,
                        const char *needle) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.nonfinite_checkpoints = 1}); /* writes a NaN */
  if (!ctx) return;
  char model[4096], cfg[4096];
  hf_path(model, sizeof model, "model.safetensors");
  hf_path(cfg, sizeof cfg, "config.json");
  mkdir("bad", 0755);
  remove("bad/config.json");
  if (config) {
    char *c = read_text(cfg);
    write_text("bad/config.json", c ? c : "");
    free(c);
  }
  tset s;
  tset_load(ctx, &s, model);
  if (edit) edit(&s);
  tset_write(ctx, &s, "bad/model.safetensors");
  tset_free(&s);
  rg_close(ctx);
  expect_refused(what, "bad/model.safetensors", 0, want, needle);
}

static void transpose_c_attn(tset *s) { /* [24, 72] stored as resgrad's [72, 24] */
  int i = tset_find(s, "transformer.h.0.attn.c_attn.weight");
  s->t[i].dims[0] = 3 * HF_C, s->t[i].dims[1] = HF_C;
}
static void drop_ln_2(tset *s) { tset_drop(s, tset_find(s, "transformer.h.1.ln_2.bias")); }
static void add_cross(tset *s) {
  tset_add(s, "transformer.h.0.crossattention.c_attn.weight", "F32", 2,
           (int64_t[]){HF_C, 3 * HF_C}, sizeof(float) * 3 * HF_C * HF_C);
}
static void ln_f_i32(tset *s) {
  snprintf(s->t[tset_find(s, "transformer.ln_f.bias")].dtype, 16, "I32");
}
static void untied(tset *s) {
  int h = tset_add(s, "lm_head.weight", "F32", 2, (int64_t[]){HF_V, HF_C},
                   sizeof(float) * HF_V * HF_C); /* zeros: not wte */
  (void)h;
}
static void nan_wpe(tset *s) {
  float nan = NAN;
  memcpy(s->buf[tset_find(s, "transformer.wpe.weight")] + 12, &nan, 4);
}
static void far_block(tset *s) { /* one tensor of block 999: 1000 blocks, 30 tensors */
  tset_add(s, "transformer.h.999.ln_1.weight", "F32", 1, (int64_t[]){HF_C},
           sizeof(float) * HF_C);
}
static void no_wte(tset *s) { tset_drop(s, tset_find(s, "transformer.wte.weight")); }

static void test_refused(void) {
  refuse_edit("Conv1D weight stored [out, in]", transpose_c_attn, 1, RG_ERR_IO, "Conv1D");
  refuse_edit("a tensor missing", drop_ln_2, 1, RG_ERR_IO, "h.1.ln_2.bias\" is missing");
  refuse_edit("a tensor GPT-2 does not have", add_cross, 1, RG_ERR_IO, "crossattention");
  refuse_edit("an I32 tensor", ln_f_i32, 1, RG_ERR_IO, "F32, BF16 and F16");
  refuse_edit("an untied lm_head", untied, 1, RG_ERR_IO, "untied");
  refuse_edit("a NaN", nan_wpe, 1, RG_ERR_NONFINITE, "wpe.weight");
  refuse_edit("no wte", no_wte, 1, RG_ERR_IO, "wte.weight");
  refuse_edit("a tensor of block 999 alone", far_block, 1, RG_ERR_IO, "blocks are missing");
  refuse_edit("heads 0 and no config.json", NULL, 0, RG_ERR_IO, "config.json");

  char model[4096];
  hf_path(model, sizeof model, "model.safetensors");
  expect_refused("heads 5 do not divide n_embd 24", model, 5, RG_ERR_MISUSE, "does not divide");

  /* a config.json of another activation (erf GELU) */
  char cfg[4096];
  hf_path(cfg, sizeof cfg, "config.json");
  char *c = read_text(cfg), *at = c ? strstr(c, "\"gelu_new\"") : NULL;
  CHECK(at != NULL, "the fixture's config names gelu_new");
  if (at) {
    memcpy(at, "\"gelu\"    ", 10); /* same length: "gelu" and spaces */
    write_text("bad/config.json", c); /* beside transformers' file (the case above) */
    expect_refused("config.json: activation gelu", "bad/model.safetensors", 0, RG_ERR_IO,
                   "activation_function");
  }
  free(c);

  /* a truncated file */
  FILE *in = fopen(model, "rb"), *out = fopen("bad/cut.safetensors", "wb");
  CHECK(in && out, "copy %s", model);
  if (in && out) {
    static unsigned char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf, in);
    fwrite(buf, 1, n / 2, out);
  }
  if (in) fclose(in);
  if (out) fclose(out);
  expect_refused("a truncated file", "bad/cut.safetensors", 0, RG_ERR_IO, "data_offsets");

  /* a resgrad checkpoint of the same GPT */
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_gpt_config gc = {.vocab = HF_V, .block = HF_T, .layers = HF_L, .width = HF_C,
                      .heads = HF_H};
  rg_gpt *g = rg_gpt_new(ctx, &gc, NULL);
  CHECK_ST(ctx, g ? rg_save(ctx, "bad/resgrad.safetensors", NULL) : rg_error(ctx), RG_OK);
  rg_gpt_free(g);
  rg_close(ctx);
  expect_refused("a resgrad checkpoint", "bad/resgrad.safetensors", 0, RG_ERR_IO,
                 "resgrad checkpoint");
  expect_refused("no such file", "bad/none.safetensors", 0, RG_ERR_IO, "cannot open");
}

int main(void) {
  test_load();
  test_export();
  test_variants();
  test_refused();
  return finish();
}
