/*
 * gen.h - what the files of resgrad-generate share: options, the model, the prompts.
 *
 * resgrad-generate continues prompts with a GPT through rg_gpt_generate (a KV cache on
 * the device) and prints the new tokens (docs/generate.md is its manual). Files:
 *   options.c  the options, parsing, --help, the checks of combinations
 *   model.c    the model: a Hugging Face GPT-2 folder or file, or a resgrad-train
 *              checkpoint; a text checkpoint's byte vocabulary
 *   prompt.c   prompts: token id lists, files of them, text through a tokenizer
 *   main.c     the run: context, model, prompts, generation, output
 *
 * Invariants:
 *  - the options are checked before a context is opened, and every prompt against the
 *    model (ids below its vocabulary, lengths within its block) before any generation.
 *  - output goes to stdout, one line per generated row (text rows are headed when there
 *    are several); progress and errors to stderr, errors as one line.
 *  - exit codes: 0 done, 1 a failure while running (device, file read), 2 a usage error
 *    (options, prompts or the files they name).
 */
#ifndef RESGRAD_GENERATE_H
#define RESGRAD_GENERATE_H

#include <resgrad.h>
#include <resgrad_nn.h>

#include <stddef.h>
#include <stdint.h>

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

#define PROG "resgrad-generate"

/* ---- options (options.c) ------------------------------------------------------------ */

typedef struct gopts {
  const char *model, *device, *tokens_file, *prompt_file, *tokenizer, *format;
  const char **tokens, **prompts; /* each --tokens and --prompt, in order */
  int ntokens, nprompts;
  int64_t max_new, top_k, batch, threads, stop;
  float temperature, top_p;
  uint64_t seed;
  int sampling; /* --temperature, --top-k or --top-p given: draw, else greedy */
  int echo, quiet;
} gopts;

/* Parses argv into o. Returns -1 to go on, else the exit code (0 after --help). */
int parse_args(gopts *o, int argc, char **argv);
void free_opts(gopts *o);

/* ---- messages (main.c) -------------------------------------------------------------- */

void errorf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---- the model (model.c) ------------------------------------------------------------ */

typedef struct model {
  rg_gpt *gpt;
  const rg_gpt_config *cfg;
  char kind[32];             /* "Hugging Face GPT-2" or "resgrad-train checkpoint" */
  char file[4096];           /* the weights' file */
  char folder[4096];         /* where a tokenizer is looked for by default */
  int bytes;                 /* a resgrad-train text model: token i is byte byte_of[i] */
  unsigned char byte_of[256];
  int tok_of[256];           /* byte -> token, -1 when the model has none */
} model;

/* Loads --model into ctx. Returns 0, EXIT_USAGE (not a model this program reads: one
   line saying what it is and what would do) or EXIT_RUNTIME. */
int load_model(rg_ctx *ctx, const char *path, model *m);

/* ---- prompts (prompt.c) ------------------------------------------------------------- */

typedef struct prompts {
  int32_t *ids;  /* [n, len] row-major, right-padded with 0 */
  int64_t *lens; /* [n] */
  int64_t n, len;
  int text;      /* the prompts were text */
} prompts;

/* The codec that turns text into ids and back: a BPE tokenizer or a byte vocabulary. */
typedef struct codec codec;
/* The tokenizer of --tokenizer, else of the model's folder (NULL for a byte model: its
   vocabulary is the codec). Returns NULL after one line saying why, with *rc set to the
   exit code; *rc is left alone on success. */
codec *codec_open(const gopts *o, const model *m, int *rc);
void codec_free(codec *c);
/* Writes the text of ids[0..n) to stdout. Returns 0, or EXIT_RUNTIME after saying why. */
int codec_print(const codec *c, const int32_t *ids, int64_t n);

/* Every prompt of o (token lists, then text through c), each repeated --batch times, and
   checked against the model. Returns 0 or EXIT_USAGE after one line naming the prompt. */
int read_prompts(const gopts *o, const model *m, const codec *c, prompts *p);
void free_prompts(prompts *p);

#endif
