/*
 * model.c - --model: a Hugging Face GPT-2 (a folder holding model.safetensors and
 * config.json, or the file), through rg_gpt_load_hf; or a checkpoint resgrad-train wrote,
 * whose metadata holds the model's shape (and, for a text model, its byte vocabulary),
 * through rg_gpt_new and rg_load without the optimizer state.
 */
#include "gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* resgrad-train's metadata keys and the formats of their values (its ckpt.c). */
#define KEY_CONFIG "resgrad-train.config"
#define KEY_TASK "resgrad-train.task"
#define KEY_VOCAB "resgrad-train.vocab"

static int is_dir(const char *p) {
  struct stat s;
  return !stat(p, &s) && S_ISDIR(s.st_mode);
}
static int exists(const char *p) {
  struct stat s;
  return !stat(p, &s);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* A text model's vocabulary: token i is the byte of hex digits 2i, 2i + 1. 0 or -1. */
static int byte_vocab(model *m, const char *hex, int64_t vocab) {
  if (!hex || (int64_t)strlen(hex) != 2 * vocab || vocab > 256) return -1;
  for (int i = 0; i < 256; i++) m->tok_of[i] = -1;
  for (int64_t i = 0; i < vocab; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0 || m->tok_of[hi * 16 + lo] >= 0) return -1;
    m->byte_of[i] = (unsigned char)(hi * 16 + lo);
    m->tok_of[hi * 16 + lo] = (int)i;
  }
  m->bytes = 1;
  return 0;
}

/* A resgrad-train checkpoint: the shape from its metadata, then the weights. */
static int load_resgrad(rg_ctx *ctx, rg_st_file *f, const char *path, model *m) {
  rg_gpt_config cfg = {0};
  long long l, w, h, v, b, p = 0;
  int n = 0, k = 0;
  const char *conf = rg_st_meta(f, KEY_CONFIG), *task = rg_st_meta(f, KEY_TASK);
  int ok = sscanf(conf, "layers=%lld width=%lld heads=%lld vocab=%lld block=%lld%n", &l, &w,
                  &h, &v, &b, &n) == 5;
  if (ok && conf[n]) ok = sscanf(conf + n, " positions=%lld%n", &p, &k) == 1 && !conf[n + k];
  if (!ok) {
    errorf("--model '%s': its %s metadata '%s' is not a model shape resgrad-train writes",
           path, KEY_CONFIG, conf);
    return EXIT_USAGE;
  }
  /* the position table: "positions=" when the training windows (block) were shorter */
  cfg.layers = l, cfg.width = w, cfg.heads = h, cfg.vocab = v, cfg.block = p ? p : b;
  if (task && !strcmp(task, "text") && byte_vocab(m, rg_st_meta(f, KEY_VOCAB), v)) {
    errorf("--model '%s': a text checkpoint whose %s metadata is not %lld bytes in hex",
           path, KEY_VOCAB, v);
    return EXIT_USAGE;
  }
  snprintf(m->kind, sizeof m->kind, "resgrad-train checkpoint");
  m->gpt = rg_gpt_new(ctx, &cfg, NULL);
  if (!m->gpt) {
    errorf("--model '%s': cannot build its model (%s): %s", path, conf, rg_errmsg(ctx));
    return EXIT_RUNTIME;
  }
  rg_status st = rg_load(ctx, path, NULL);
  if (st != RG_OK) {
    errorf("--model '%s': %s", path, rg_errmsg(ctx));
    return st == RG_ERR_IO ? EXIT_USAGE : EXIT_RUNTIME;
  }
  return 0;
}

int load_model(rg_ctx *ctx, const char *path, model *m) {
  memset(m, 0, sizeof *m);
  if (is_dir(path)) {
    snprintf(m->folder, sizeof m->folder, "%s", path);
    snprintf(m->file, sizeof m->file, "%s/model.safetensors", path);
    if (!exists(m->file)) {
      char bin[4200];
      snprintf(bin, sizeof bin, "%s/pytorch_model.bin", path);
      errorf("--model '%s': the folder has no model.safetensors%s", path,
             exists(bin) ? " (pytorch_model.bin is not read: save the model again with "
                           "save_pretrained(..., safe_serialization=True))"
                         : "; give a Hugging Face GPT-2 folder or a safetensors file");
      return EXIT_USAGE;
    }
  } else {
    if (!exists(path)) {
      errorf("--model '%s': no such file or folder", path);
      return EXIT_USAGE;
    }
    snprintf(m->file, sizeof m->file, "%s", path);
    const char *slash = strrchr(path, '/');
    snprintf(m->folder, sizeof m->folder, "%.*s", slash ? (int)(slash - path) : 1,
             slash ? path : ".");
  }
  rg_st_file *f = rg_st_open(ctx, m->file);
  if (!f) {
    errorf("--model '%s': %s", path, rg_errmsg(ctx));
    return EXIT_USAGE;
  }
  int rc;
  if (rg_st_meta(f, KEY_CONFIG)) {
    rc = load_resgrad(ctx, f, m->file, m);
  } else {
    snprintf(m->kind, sizeof m->kind, "Hugging Face GPT-2");
    m->gpt = rg_gpt_load_hf(ctx, m->file, 0, NULL);
    rc = m->gpt ? 0 : rg_error(ctx) == RG_ERR_IO || rg_error(ctx) == RG_ERR_MISUSE
                          ? EXIT_USAGE : EXIT_RUNTIME;
    if (!m->gpt) errorf("--model '%s': %s", path, rg_errmsg(ctx));
  }
  rg_st_close(f);
  if (!rc) m->cfg = rg_gpt_config_of(m->gpt);
  return rc;
}
