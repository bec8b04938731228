/*
 * gpt_hf.c - GPT-2 checkpoints in Hugging Face's layout, read into an rg_gpt and written
 * from one (rg_gpt_load_hf, rg_gpt_save_hf), on the public API's safetensors calls.
 *
 * Hugging Face's GPT-2 differs from rg_gpt only in how it is stored: tensor names may
 * start with "transformer.", the four projections (attn.c_attn, attn.c_proj, mlp.c_fc,
 * mlp.c_proj) are Conv1D weights [in, out] where resgrad keeps [out, in], the head
 * "lm_head.weight" is tied to "wte.weight" (absent, or equal to it), and the attention's
 * causal mask may be stored as buffers (h.N.attn.bias, h.N.attn.masked_bias). The
 * computation is the same: GELU's tanh approximation ("gelu_new"), layer norms with eps
 * 1e-5, attention scaled by 1/sqrt(head size).
 *
 * Invariants: every name, dtype and shape of the file (and config.json, when it is read)
 * is checked before any parameter is made, so a file that is not a GPT-2 makes nothing;
 * values are converted to F32 on the host (F16 and BF16 exactly: every such value is an
 * F32); the tensors written are F32 and named "transformer." + GPT-2's name, as
 * GPT2LMHeadModel.save_pretrained names them.
 */
#define _POSIX_C_SOURCE 200809L
#include "nn_util.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One tensor of a GPT-2 checkpoint. */
typedef struct want {
  char leaf[64];   /* GPT-2's name without "transformer.": "h.3.attn.c_attn.weight" */
  int ndim;
  int64_t dims[2]; /* in the file's layout: a Conv1D weight is [in, out] */
  int conv;        /* a Conv1D weight, stored transposed to resgrad's [out, in] */
} want;

/* The tensors of a GPT-2 of config c, in the order of its state dict; *n of them. */
static want *wants(const rg_gpt_config *c, int *n) {
  const int64_t C = c->width;
  static const struct { const char *leaf; int64_t a, b; int conv; } block[] = {
      {"ln_1.weight", 1, 0, 0},       {"ln_1.bias", 1, 0, 0},
      {"attn.c_attn.weight", 1, 3, 1}, {"attn.c_attn.bias", 3, 0, 0},
      {"attn.c_proj.weight", 1, 1, 1}, {"attn.c_proj.bias", 1, 0, 0},
      {"ln_2.weight", 1, 0, 0},       {"ln_2.bias", 1, 0, 0},
      {"mlp.c_fc.weight", 1, 4, 1},   {"mlp.c_fc.bias", 4, 0, 0},
      {"mlp.c_proj.weight", 4, 1, 1}, {"mlp.c_proj.bias", 1, 0, 0}};
  enum { PER = sizeof block / sizeof *block };
  *n = (int)(4 + PER * c->layers);
  want *w = calloc((size_t)*n, sizeof *w);
  if (!w) return NULL;
  int k = 0;
  w[k++] = (want){"wte.weight", 2, {c->vocab, C}, 0};
  w[k++] = (want){"wpe.weight", 2, {c->block, C}, 0};
  for (int64_t i = 0; i < c->layers; i++)
    for (int j = 0; j < PER; j++, k++) {
      snprintf(w[k].leaf, sizeof w[k].leaf, "h.%lld.%s", (long long)i, block[j].leaf);
      w[k].ndim = block[j].b ? 2 : 1;
      w[k].dims[0] = block[j].a * C;
      w[k].dims[1] = block[j].b * C;
      w[k].conv = block[j].conv;
    }
  w[k++] = (want){"ln_f.weight", 1, {C, 0}, 0};
  w[k++] = (want){"ln_f.bias", 1, {C, 0}, 0};
  return w;
}

/* ---- reading ------------------------------------------------------------------------- */

typedef struct reader {
  rg_ctx *ctx;
  const char *path;
  rg_st_file *f;
  const char *root; /* "transformer." or "" */
} reader;

/* Sets RG_ERR_IO: the file is not a GPT-2 in Hugging Face's layout, and why. */
static void not_gpt2(const reader *r, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  rg_raise(r->ctx, RG_ERR_IO, "rg_gpt_load_hf: \"%s\" is not a GPT-2 checkpoint in Hugging "
           "Face's layout: %s", r->path, why);
}

/* The file's tensor root + leaf, or NULL. */
static const rg_st_tensor *find(const reader *r, const char *leaf) {
  char name[160];
  snprintf(name, sizeof name, "%s%s", r->root, leaf);
  return rg_st_find(r->f, name);
}

static float half_to_float(uint16_t h) {
  unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v = e == 0 ? ldexpf((float)m, -24)                      /* zero, subnormals */
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(m | 0x400), (int)e - 25); /* (1 + m/1024) 2^(e-15) */
  return h & 0x8000 ? -v : v;
}

/* Tensor t as numel F32 values (malloc'd), transposed from [in, out] to [out, in] when
   conv; NULL with the error set. dtype is F32, BF16 or F16 (checked before). */
static float *read_f32(const reader *r, const rg_st_tensor *t, int conv) {
  size_t numel = 1;
  for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->dims[d];
  float *out = malloc(numel * sizeof *out + 1);
  void *raw = strcmp(t->dtype, "F32") ? malloc(t->nbytes + 1) : out;
  if (!out || !raw) {
    rg_raise(r->ctx, RG_ERR_OOM, "rg_gpt_load_hf: out of host memory for \"%s\"", t->name);
    if (raw != out) free(raw);
    free(out);
    return NULL;
  }
  if (rg_st_read(r->f, t, raw, t->nbytes) != RG_OK) {
    if (raw != out) free(raw);
    free(out);
    return NULL;
  }
  const uint16_t *h = raw;
  if (!strcmp(t->dtype, "BF16"))
    for (size_t i = 0; i < numel; i++) {
      uint32_t bits = (uint32_t)h[i] << 16;
      memcpy(&out[i], &bits, sizeof bits);
    }
  else if (!strcmp(t->dtype, "F16"))
    for (size_t i = 0; i < numel; i++) out[i] = half_to_float(h[i]);
  if (raw != out) free(raw);
  for (size_t i = 0; i < numel; i++)
    if (!isfinite(out[i])) {
      rg_raise(r->ctx, RG_ERR_NONFINITE, "rg_gpt_load_hf: tensor \"%s\" of \"%s\" holds a "
               "NaN or Inf at element %zu: the checkpoint is broken", t->name, r->path, i);
      free(out);
      return NULL;
    }
  if (conv) { /* [in, out] -> [out, in] */
    size_t in = (size_t)t->dims[0], o = (size_t)t->dims[1];
    float *tr = malloc(numel * sizeof *tr + 1);
    if (!tr) {
      rg_raise(r->ctx, RG_ERR_OOM, "rg_gpt_load_hf: out of host memory for \"%s\"", t->name);
      free(out);
      return NULL;
    }
    for (size_t i = 0; i < in; i++)
      for (size_t j = 0; j < o; j++) tr[j * in + i] = out[i * o + j];
    free(out);
    out = tr;
  }
  return out;
}

/* The number of blocks: one more than the largest N of a tensor root + "h.N.". */
static int64_t count_layers(const reader *r) {
  int64_t layers = 0;
  size_t rl = strlen(r->root);
  for (int i = 0; i < rg_st_count(r->f); i++) {
    const char *s = rg_st_at(r->f, i)->name;
    if (strncmp(s, r->root, rl) || strncmp(s + rl, "h.", 2) || !isdigit((unsigned char)s[rl + 2]))
      continue;
    char *end;
    long long n = strtoll(s + rl + 2, &end, 10);
    if (*end == '.' && n >= 0 && n < (1 << 20) && n + 1 > layers) layers = n + 1;
  }
  return layers;
}

/* Whether name is a tensor a GPT-2 file may hold beside the parameters: the causal mask's
   buffers and the tied head (whose values are checked elsewhere). */
static int ignorable(const reader *r, const char *name) {
  if (!strcmp(name, "lm_head.weight")) return 1;
  size_t rl = strlen(r->root);
  if (strncmp(name, r->root, rl) || strncmp(name + rl, "h.", 2)) return 0;
  char *end;
  (void)strtoll(name + rl + 2, &end, 10);
  return end != name + rl + 2 && (!strcmp(end, ".attn.bias") || !strcmp(end, ".attn.masked_bias"));
}

/* Checks that the file holds exactly GPT-2's tensors for c (w, n of them), each F32, BF16
   or F16 and of its shape; 0 with the error set if not. */
static int check_tensors(const reader *r, const want *w, int n) {
  for (int k = 0; k < n; k++) {
    const rg_st_tensor *t = find(r, w[k].leaf);
    if (!t) {
      not_gpt2(r, "tensor \"%s%s\" is missing", r->root, w[k].leaf);
      return 0;
    }
    if (strcmp(t->dtype, "F32") && strcmp(t->dtype, "BF16") && strcmp(t->dtype, "F16")) {
      not_gpt2(r, "tensor \"%s\" is %s; F32, BF16 and F16 can be loaded", t->name, t->dtype);
      return 0;
    }
    if (t->ndim != w[k].ndim || t->dims[0] != w[k].dims[0] ||
        (w[k].ndim == 2 && t->dims[1] != w[k].dims[1])) {
      char have[64] = "[", need[64];
      for (int d = 0; d < t->ndim && d < 4; d++)
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%lld", d ? "," : "",
                 (long long)t->dims[d]);
      strcat(have, t->ndim > 4 ? ",...]" : "]");
      if (w[k].ndim == 2)
        snprintf(need, sizeof need, "[%lld,%lld]", (long long)w[k].dims[0],
                 (long long)w[k].dims[1]);
      else
        snprintf(need, sizeof need, "[%lld]", (long long)w[k].dims[0]);
      not_gpt2(r, "tensor \"%s\" is %s but a GPT-2 with the sizes of its wte, wpe and "
               "blocks has %s there%s", t->name, have, need,
               w[k].conv ? " (Hugging Face's Conv1D layout, [in, out])" : "");
      return 0;
    }
  }
  for (int i = 0; i < rg_st_count(r->f); i++) {
    const char *s = rg_st_at(r->f, i)->name;
    size_t rl = strlen(r->root);
    int known = ignorable(r, s);
    for (int k = 0; !known && k < n; k++)
      known = !strncmp(s, r->root, rl) && !strcmp(s + rl, w[k].leaf);
    if (!known) {
      not_gpt2(r, "it holds a tensor \"%s\" that GPT-2 does not have (a checkpoint of "
               "another model?)", s);
      return 0;
    }
  }
  return 1;
}

/* "lm_head.weight", when present, must be the tied wte: same shape and values. */
static int check_head(const reader *r) {
  const rg_st_tensor *head = rg_st_find(r->f, "lm_head.weight"), *wte = find(r, "wte.weight");
  if (!head) return 1;
  if (head->ndim != 2 || head->dims[0] != wte->dims[0] || head->dims[1] != wte->dims[1]) {
    not_gpt2(r, "\"lm_head.weight\" does not have wte's shape; resgrad's GPT ties its head "
             "to wte");
    return 0;
  }
  float *a = read_f32(r, head, 0), *b = a ? read_f32(r, wte, 0) : NULL;
  int same = b && !memcmp(a, b, (size_t)(wte->dims[0] * wte->dims[1]) * sizeof *a);
  if (b && !same)
    not_gpt2(r, "\"lm_head.weight\" differs from \"%s\" (an untied head); resgrad's GPT "
             "ties its head to wte", wte->name);
  free(a);
  free(b);
  return same;
}

/* ---- config.json --------------------------------------------------------------------- */

/* The text after "key": in json, or NULL. GPT-2's config.json holds the keys read here
   once, at its top level. */
static const char *cfg_at(const char *json, const char *key) {
  size_t n = strlen(key);
  for (const char *p = json; (p = strchr(p, '"')); p++)
    if (!strncmp(p + 1, key, n) && p[n + 1] == '"') {
      const char *q = p + n + 2;
      while (isspace((unsigned char)*q)) q++;
      if (*q != ':') continue;
      for (q++; isspace((unsigned char)*q);) q++;
      return q;
    }
  return NULL;
}

/* A number at key: 1 with *v, 0 when absent or null, -1 when it is not a number. */
static int cfg_num(const char *json, const char *key, double *v) {
  const char *p = cfg_at(json, key);
  if (!p || !strncmp(p, "null", 4)) return 0;
  char *end;
  *v = strtod(p, &end);
  return end != p ? 1 : -1;
}

/* Whether the string at key is one of the |-separated list (1), absent (0), or another
   value (-1, *got holding it). */
static int cfg_str(const char *json, const char *key, const char *list, char *got, size_t cap) {
  const char *p = cfg_at(json, key);
  if (!p || *p != '"') return p ? (snprintf(got, cap, "%.40s", p), -1) : 0;
  const char *e = strchr(p + 1, '"');
  snprintf(got, cap, "%.*s", e ? (int)(e - p - 1) : 0, p + 1);
  for (const char *s = list; *s;) {
    size_t n = strcspn(s, "|");
    if (strlen(got) == n && !strncmp(s, got, n)) return 1;
    s += n + (s[n] == '|');
  }
  return -1;
}

/* The config.json beside path, malloc'd and NUL-terminated, or NULL with *err set. */
static char *read_config(const char *path, char *cfgpath, size_t cap, const char **err) {
  const char *slash = strrchr(path, '/');
  snprintf(cfgpath, cap, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0, path);
  FILE *f = fopen(cfgpath, "rb");
  if (!f) return *err = "it cannot be opened", NULL;
  enum { MAX = 1 << 20 };
  char *s = malloc(MAX + 1);
  size_t n = s ? fread(s, 1, MAX, f) : 0;
  int full = s && !feof(f);
  fclose(f);
  if (!s || full) {
    free(s);
    return *err = s ? "it is larger than 1 MiB" : "out of host memory", NULL;
  }
  s[n] = 0;
  return s;
}

/* Reads n_head from config.json beside the file into *heads and checks that the config
   describes the same model and computation as the tensors (c). 0 with the error set. */
static int config_heads(const reader *r, const rg_gpt_config *c, int64_t *heads) {
  char cfgpath[4200], got[64];
  const char *err = NULL;
  char *json = read_config(r->path, cfgpath, sizeof cfgpath, &err);
  if (!json) {
    rg_raise(r->ctx, RG_ERR_IO, "rg_gpt_load_hf: heads is 0, so n_head is read from \"%s\", "
             "but %s: put the model's config.json beside the file or pass heads", cfgpath, err);
    return 0;
  }
  const char *why = NULL;
  char buf[200];
  double v;
  static const struct { const char *key; size_t at; } sizes[] = {
      {"vocab_size", offsetof(rg_gpt_config, vocab)}, {"n_positions", offsetof(rg_gpt_config, block)},
      {"n_layer", offsetof(rg_gpt_config, layers)}, {"n_embd", offsetof(rg_gpt_config, width)}};
  int has = cfg_num(json, "n_head", &v);
  if (has != 1 || v < 1 || v != floor(v) || v > 1e9) why = "it has no positive integer \"n_head\"";
  else *heads = (int64_t)v;
  for (size_t i = 0; !why && i < sizeof sizes / sizeof *sizes; i++) {
    int64_t want = *(const int64_t *)((const char *)c + sizes[i].at);
    if (cfg_num(json, sizes[i].key, &v) == 1 && v != (double)want) {
      snprintf(buf, sizeof buf, "its \"%s\" is %g but the tensors' is %lld", sizes[i].key, v,
               (long long)want);
      why = buf;
    }
  }
  if (!why && cfg_str(json, "model_type", "gpt2", got, sizeof got) < 0) {
    snprintf(buf, sizeof buf, "its \"model_type\" is \"%s\", not \"gpt2\"", got);
    why = buf;
  }
  if (!why && cfg_str(json, "activation_function", "gelu_new|gelu_pytorch_tanh|gelu_fast",
                      got, sizeof got) < 0) {
    snprintf(buf, sizeof buf, "its \"activation_function\" is \"%s\"; resgrad's GPT uses "
             "GELU's tanh approximation (\"gelu_new\")", got);
    why = buf;
  }
  if (!why && cfg_num(json, "layer_norm_epsilon", &v) == 1 && fabs(v - 1e-5) > 1e-12) {
    snprintf(buf, sizeof buf, "its \"layer_norm_epsilon\" is %g; resgrad's GPT uses 1e-5", v);
    why = buf;
  }
  const char *scale = cfg_at(json, "scale_attn_weights"),
             *inverse = cfg_at(json, "scale_attn_by_inverse_layer_idx");
  if (!why && scale && !strncmp(scale, "false", 5))
    why = "its \"scale_attn_weights\" is false; resgrad's attention scales by 1/sqrt(head size)";
  if (!why && inverse && !strncmp(inverse, "true", 4))
    why = "its \"scale_attn_by_inverse_layer_idx\" is true, which resgrad's GPT does not do";
  if (!why && c->width % *heads) {
    snprintf(buf, sizeof buf, "its \"n_head\" %lld does not divide the tensors' n_embd %lld",
             (long long)*heads, (long long)c->width);
    why = buf;
  }
  free(json);
  if (why)
    rg_raise(r->ctx, RG_ERR_IO, "rg_gpt_load_hf: \"%s\" does not describe a GPT-2 resgrad "
             "can load as \"%s\": %s", cfgpath, r->path, why);
  return !why;
}

/* ---- load ---------------------------------------------------------------------------- */

/* Writes the file's values into the parameters of g (made by rg_gpt_new with prefix). */
static int load_values(const reader *r, const want *w, int n, const char *prefix) {
  for (int k = 0; k < n; k++) {
    const rg_st_tensor *t = find(r, w[k].leaf);
    float *v = read_f32(r, t, w[k].conv);
    if (!v) return 0;
    char *name = malloc(strlen(prefix) + strlen(w[k].leaf) + 1);
    rg_status st = RG_ERR_OOM;
    if (name) {
      strcat(strcpy(name, prefix), w[k].leaf);
      rg_tensor p = rg_param_find(r->ctx, name);
      size_t numel = (size_t)w[k].dims[0] * (size_t)(w[k].ndim == 2 ? w[k].dims[1] : 1);
      st = rg_write(r->ctx, p, v, numel * sizeof *v);
    } else {
      rg_raise(r->ctx, st, "rg_gpt_load_hf: out of host memory");
    }
    free(name);
    free(v);
    if (st != RG_OK) return 0;
  }
  return 1;
}

rg_gpt *rg_gpt_load_hf(rg_ctx *ctx, const char *path, int64_t heads, const char *prefix) {
  if (!ctx) return NULL;
  if (!path || !*path || heads < 0) {
    rg__nn_misuse(ctx, "rg_gpt_load_hf: %s", heads < 0 ? "heads must be >= 0 (0: n_head "
                  "from config.json beside the file)" : "path is empty");
    return NULL;
  }
  reader r = {ctx, path, rg_st_open(ctx, path), ""};
  if (!r.f) return NULL;
  rg_gpt *g = NULL;
  want *w = NULL;
  int n = 0;
  const char *format = rg_st_meta(r.f, "format");
  if (format && !strcmp(format, "resgrad")) {
    not_gpt2(&r, "it is a resgrad checkpoint (rg_save): load it with rg_load into a model "
             "made with rg_gpt_new");
    goto done;
  }
  r.root = rg_st_find(r.f, "transformer.wte.weight") ? "transformer." : "";
  const rg_st_tensor *wte = find(&r, "wte.weight"), *wpe = find(&r, "wpe.weight");
  if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->dims[1] != wpe->dims[1]) {
    not_gpt2(&r, !wte || !wpe ? "it has no \"wte.weight\" and \"wpe.weight\" (nor "
             "\"transformer.wte.weight\" and \"transformer.wpe.weight\")"
             : "its wte and wpe are not two matrices [vocab, n_embd] and [n_positions, "
               "n_embd]");
    goto done;
  }
  rg_gpt_config cfg = {.vocab = wte->dims[0], .block = wpe->dims[0], .layers = count_layers(&r),
                       .width = wte->dims[1], .heads = heads};
  if (cfg.layers > rg_st_count(r.f) / 12) { /* before a list of that many is made */
    not_gpt2(&r, "it has tensors of block h.%lld but %d tensors in all, fewer than 12 per "
             "block: blocks are missing", (long long)cfg.layers - 1, rg_st_count(r.f));
    goto done;
  }
  if (!(w = wants(&cfg, &n))) {
    rg_raise(ctx, RG_ERR_OOM, "rg_gpt_load_hf: out of host memory");
    goto done;
  }
  if (!check_tensors(&r, w, n) || !check_head(&r)) goto done;
  if (!heads && !config_heads(&r, &cfg, &cfg.heads)) goto done;
  if (cfg.width % cfg.heads) {
    rg__nn_misuse(ctx, "rg_gpt_load_hf: heads %lld does not divide the file's n_embd %lld; "
                  "pass its n_head (or 0 to read it from config.json)", (long long)heads,
                  (long long)cfg.width);
    goto done;
  }
  if (!(g = rg_gpt_new(ctx, &cfg, prefix))) goto done;
  if (!load_values(&r, w, n, prefix ? prefix : "")) {
    rg_gpt_free(g);
    g = NULL;
  }
done:
  free(w);
  rg_st_close(r.f);
  return g;
}

/* ---- save ---------------------------------------------------------------------------- */

/* Writes config.json beside path (atomically: a temporary file renamed over it) for a
   GPT2LMHeadModel of config c. 0 with the error set. */
static int write_config(rg_ctx *ctx, const char *path, const rg_gpt_config *c) {
  const char *slash = strrchr(path, '/');
  char cfgpath[4200], tmp[4300];
  snprintf(cfgpath, sizeof cfgpath, "%.*sconfig.json", slash ? (int)(slash - path + 1) : 0,
           path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lx", cfgpath, (long)getpid(),
           (unsigned long)(uintptr_t)c); /* one per process and model */
  FILE *f = fopen(tmp, "w");
  int ok = f != NULL;
  if (f) {
    double p = (double)c->dropout;
    ok = fprintf(f,
                 "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                 "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_embd\": %lld,\n"
                 "  \"n_layer\": %lld,\n  \"n_head\": %lld,\n  \"n_inner\": null,\n"
                 "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                 "  \"resid_pdrop\": %g,\n  \"embd_pdrop\": %g,\n  \"attn_pdrop\": %g,\n"
                 "  \"scale_attn_weights\": true,\n"
                 "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                 "  \"tie_word_embeddings\": true,\n  \"bos_token_id\": %lld,\n"
                 "  \"eos_token_id\": %lld\n}\n",
                 (long long)c->vocab, (long long)c->block, (long long)c->width,
                 (long long)c->layers, (long long)c->heads, p, p, p, (long long)c->vocab - 1,
                 (long long)c->vocab - 1) > 0;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
  }
  ok = ok && rename(tmp, cfgpath) == 0;
  if (!ok) {
    remove(tmp);
    rg_raise(ctx, RG_ERR_IO, "rg_gpt_save_hf: the tensors were written to \"%s\" but \"%s\" "
             "could not be: check that its folder is writable", path, cfgpath);
  }
  return ok;
}

rg_status rg_gpt_save_hf(const rg_gpt *g, const char *path) {
  if (!g) return RG_ERR_MISUSE;
  rg_ctx *ctx = rg__gpt_ctx(g);
  if (!path || !*path) {
    rg__nn_misuse(ctx, "rg_gpt_save_hf: path is empty");
    return rg__nn_status(ctx);
  }
  if (rg_dist_rank(ctx) != 0) return rg_sync(ctx); /* rank 0 writes, as rg_save */
  const rg_gpt_config *c = rg_gpt_config_of(g);
  const char *prefix = rg__gpt_prefix(g);
  int n = 0;
  want *w = wants(c, &n);
  rg_st_tensor *t = w ? calloc((size_t)n, sizeof *t) : NULL;
  char **names = t ? calloc((size_t)n, sizeof *names) : NULL;
  float **vals = names ? calloc((size_t)n, sizeof *vals) : NULL;
  rg_status st = vals ? RG_OK : RG_ERR_OOM;
  for (int k = 0; st == RG_OK && k < n; k++) {
    size_t rows = (size_t)w[k].dims[0], cols = (size_t)(w[k].ndim == 2 ? w[k].dims[1] : 1);
    char *own = malloc(strlen(prefix) + strlen(w[k].leaf) + 1);
    names[k] = malloc(strlen("transformer.") + strlen(w[k].leaf) + 1);
    float *v = malloc(rows * cols * sizeof *v + 1);
    vals[k] = malloc(rows * cols * sizeof *v + 1);
    if (!own || !names[k] || !v || !vals[k]) {
      st = RG_ERR_OOM;
    } else {
      strcat(strcpy(own, prefix), w[k].leaf);
      strcat(strcpy(names[k], "transformer."), w[k].leaf);
      st = rg_read(ctx, rg_param_find(ctx, own), v, rows * cols * sizeof *v);
      for (size_t i = 0; st == RG_OK && i < rows; i++) /* [out, in] -> [in, out] if conv */
        for (size_t j = 0; j < cols; j++)
          vals[k][i * cols + j] = w[k].conv ? v[j * rows + i] : v[i * cols + j];
      t[k] = (rg_st_tensor){.name = names[k], .dtype = "F32", .ndim = w[k].ndim,
                            .dims = {w[k].dims[0], w[k].dims[1]}, .data = vals[k]};
    }
    free(own);
    free(v);
  }
  if (st == RG_ERR_OOM) rg_raise(ctx, st, "rg_gpt_save_hf: out of host memory");
  static const char *const meta[] = {"format", "pt", NULL};
  if (st == RG_OK) st = rg_st_write(ctx, path, t, n, meta);
  if (st == RG_OK && !write_config(ctx, path, c)) st = RG_ERR_IO;
  for (int k = 0; vals && k < n; k++) free(names[k]), free(vals[k]);
  free(vals);
  free(names);
  free(t);
  free(w);
  return st;
}
