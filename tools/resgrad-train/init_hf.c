/*
 * init_hf.c - --init-hf: fine-tuning a Hugging Face GPT-2 on a token file.
 *
 * The model's shape is the checkpoint's: it is read before anything else (a dry-run
 * context loads the file, so every check of rg_gpt_load_hf runs before any work) and
 * put into the options, so the rest of the run (memory plan, summary, checkpoint
 * metadata) treats it as a model of that shape. Its position table is the checkpoint's
 * (--positions), the training windows --block long. A --save checkpoint of the run is
 * then an ordinary resgrad-train checkpoint of that shape: --resume continues it
 * without --init-hf, and resgrad-generate reads it.
 */
#include "train.h"

#include <string.h>
#include <sys/stat.h>

/* The checkpoint's file: PATH, or PATH/model.safetensors for a folder. */
const char *init_hf_file(const char *path) {
  static char file[4096 + 32];
  struct stat s;
  if (!stat(path, &s) && S_ISDIR(s.st_mode))
    snprintf(file, sizeof file, "%s/model.safetensors", path);
  else
    snprintf(file, sizeof file, "%s", path);
  return file;
}

int init_hf_options(opts *o, const unsigned char *given) {
  static const char *const shape[] = {"layers", "width", "heads", "positions"};
  const char *why = NULL;
  if (o->resume)
    why = "--init-hf starts a run from a Hugging Face model and --resume continues a "
          "checkpoint: give one of them";
  else if (!o->tokens)
    why = "--init-hf fine-tunes on a token file: add --tokens FILE (token ids of the "
          "model's vocabulary)";
  else if (o->text || given_opt(given, "digits"))
    why = "--init-hf fine-tunes on --tokens FILE; --text and --digits set up other tasks";
  else if (o->checkpoint_activations)
    why = "--checkpoint-activations is not available with --init-hf yet: leave it out";
  for (size_t i = 0; !why && i < sizeof shape / sizeof *shape; i++)
    if (given_opt(given, shape[i])) {
      errorf("--%s: the model's shape comes from --init-hf '%s': leave it out", shape[i],
             o->init_hf);
      return EXIT_USAGE;
    }
  if (why) {
    errorf("%s", why);
    return EXIT_USAGE;
  }
  rg_ctx *ctx = NULL;
  rg_options ro = {.device = RG_DEVICE_CPU, .quiet = 1, .dry_run = 1};
  if (rg_open(&ctx, &ro) != RG_OK) {
    errorf("--init-hf: cannot open a context to read the model");
    return EXIT_USAGE;
  }
  rg_gpt *g = rg_gpt_load_hf(ctx, init_hf_file(o->init_hf), 0, NULL);
  int rc = -1;
  if (!g) {
    errorf("--init-hf '%s': %s", o->init_hf, rg_errmsg(ctx));
    rc = EXIT_USAGE;
  } else {
    const rg_gpt_config *c = rg_gpt_config_of(g);
    if (given_opt(given, "vocab") && o->vocab != c->vocab) {
      errorf("--vocab %lld: the model of --init-hf '%s' has a vocabulary of %lld: leave out "
             "--vocab", (long long)o->vocab, o->init_hf, (long long)c->vocab);
      rc = EXIT_USAGE;
    } else if (o->block > c->block) {
      errorf("--block %lld is longer than the model's %lld positions (--init-hf '%s'): give "
             "--block %lld or less", (long long)o->block, (long long)c->block, o->init_hf,
             (long long)c->block);
      rc = EXIT_USAGE;
    }
    o->vocab = c->vocab, o->layers = c->layers, o->width = c->width, o->heads = c->heads;
    o->positions = c->block;
  }
  rg_gpt_free(g);
  rg_close(ctx);
  return rc;
}

rg_gpt *init_hf_model(run *r, int dry) {
  const opts *o = r->o;
  if (dry) { /* the same parameters without reading the file again */
    rg_gpt_config cfg = {.vocab = o->vocab, .block = o->positions, .layers = o->layers,
                         .width = o->width, .heads = o->heads};
    return rg_gpt_new(r->ctx, &cfg, NULL);
  }
  return rg_gpt_load_hf(r->ctx, init_hf_file(o->init_hf), 0, NULL);
}
