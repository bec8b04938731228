/*
 * options.c - resgrad-generate's options (getopt_long), --help, and the checks of
 * combinations that single options cannot make.
 */
#include "gen.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  O_MODEL = 256, O_TOKENS, O_TOKENS_FILE, O_PROMPT, O_PROMPT_FILE, O_TOKENIZER, O_MAX_NEW,
  O_TEMPERATURE, O_TOP_K, O_TOP_P, O_SEED, O_STOP, O_BATCH, O_DEVICE, O_THREADS,
  O_FORMAT, O_ECHO, O_QUIET, O_HELP
};

static const struct option LONG[] = {
  {"model", required_argument, 0, O_MODEL},
  {"tokens", required_argument, 0, O_TOKENS},
  {"tokens-file", required_argument, 0, O_TOKENS_FILE},
  {"prompt", required_argument, 0, O_PROMPT},
  {"prompt-file", required_argument, 0, O_PROMPT_FILE},
  {"tokenizer", required_argument, 0, O_TOKENIZER},
  {"max-new", required_argument, 0, O_MAX_NEW},
  {"temperature", required_argument, 0, O_TEMPERATURE},
  {"top-k", required_argument, 0, O_TOP_K},
  {"top-p", required_argument, 0, O_TOP_P},
  {"seed", required_argument, 0, O_SEED},
  {"stop", required_argument, 0, O_STOP},
  {"batch", required_argument, 0, O_BATCH},
  {"device", required_argument, 0, O_DEVICE},
  {"threads", required_argument, 0, O_THREADS},
  {"format", required_argument, 0, O_FORMAT},
  {"echo", no_argument, 0, O_ECHO},
  {"quiet", no_argument, 0, O_QUIET},
  {"help", no_argument, 0, O_HELP},
  {0, 0, 0, 0},
};

static const char HELP[] =
    "usage: " PROG " --model PATH (--tokens IDS | --prompt TEXT | ...) [options]\n"
    "\n"
    "Continues prompts with a GPT, with a KV cache on the device (greedy unless a\n"
    "sampling option is given). Prints one line of new token ids per prompt, or their\n"
    "text when the prompt was text; progress goes to stderr.\n"
    "\n"
    "model:\n"
    "  --model PATH        a Hugging Face GPT-2 folder (model.safetensors and\n"
    "                      config.json), such a model.safetensors file, or a checkpoint\n"
    "                      that resgrad-train --save wrote\n"
    "  --device D          auto, cpu or cuda (default auto)\n"
    "  --threads N         CPU threads, 0 = all cores (default 0)\n"
    "prompts (any number of each kind; ids and text are not mixed):\n"
    "  --tokens IDS        token ids separated by commas or spaces: \"464,2068,7586\"\n"
    "  --tokens-file FILE  one prompt of token ids per line ('-': standard input)\n"
    "  --prompt TEXT       text, made ids by the tokenizer (or by a resgrad-train text\n"
    "                      model's bytes)\n"
    "  --prompt-file FILE  the whole file is one text prompt ('-': standard input)\n"
    "  --tokenizer PATH    GPT-2's tokenizer: a folder with vocab.json and merges.txt or\n"
    "                      tokenizer.json, or that file (default: the model's folder)\n"
    "generation:\n"
    "  --max-new N         new tokens per prompt (default 32)\n"
    "  --temperature X     sample from softmax(logits / X); 0 = greedy (default 0, or 1\n"
    "                      when --top-k or --top-p is given)\n"
    "  --top-k K           sample from the K most likely tokens only (0: all)\n"
    "  --top-p P           sample from the smallest set of tokens whose probability\n"
    "                      reaches P, in (0, 1] (1: all)\n"
    "  --seed N            the draws are a function of (seed, position, row) (default 1)\n"
    "  --stop ID           a token that ends its row (printed; default: none)\n"
    "  --batch N           generate N rows from each prompt: with sampling, N different\n"
    "                      continuations (default 1)\n"
    "output:\n"
    "  --format F          ids or text (default: text for text prompts, else ids)\n"
    "  --echo              print each prompt before its new tokens (ids: PROMPT | NEW)\n"
    "  --quiet             no progress on stderr\n"
    "  --help              print this help and exit\n"
    "\n"
    "examples:\n"
    "  " PROG " --model gpt2/ --prompt 'The meaning of life is' --max-new 40\n"
    "  " PROG " --model gpt2/ --tokens 464,2068,7586 --temperature 0.8 --top-k 50\n"
    "  " PROG " --model book.st --prompt 'Once' --top-p 0.9 --batch 4\n"
    "\n"
    "exit status: 0 done; 1 a failure while running; 2 a usage error (options, prompts\n"
    "or the files they name: caught before any generation)\n";

/* A whole integer in [lo, hi]; 0, or 1 after saying why. */
static int parse_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end) {
    errorf("--%s: '%s' is not an integer", opt, v);
    return 1;
  }
  if (errno || x < lo || x > hi) {
    errorf("--%s: '%s' is out of range [%lld, %lld]", opt, v, (long long)lo, (long long)hi);
    return 1;
  }
  *out = x;
  return 0;
}

static int parse_real(const char *opt, const char *v, double lo, double hi, float *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (!*v || *end || isnan(x)) {
    errorf("--%s: '%s' is not a number", opt, v);
    return 1;
  }
  if (errno == ERANGE || x < lo || x > hi) {
    errorf("--%s: '%s' is out of range [%g, %g]", opt, v, lo, hi);
    return 1;
  }
  *out = (float)x;
  return 0;
}

static int push(const char ***list, int *n, const char *v) {
  const char **l = realloc(*list, sizeof *l * (size_t)(*n + 1));
  if (!l) {
    errorf("out of memory for the options");
    return 1;
  }
  l[(*n)++] = v;
  *list = l;
  return 0;
}

void free_opts(gopts *o) {
  free(o->tokens);
  free(o->prompts);
  o->tokens = o->prompts = NULL;
}

/* What single options cannot check. */
static int check(gopts *o, int temp_given) {
  const char *why = NULL;
  int ids = o->ntokens || o->tokens_file, text = o->nprompts || o->prompt_file;
  if (!o->model) why = "--model PATH is required: a Hugging Face GPT-2 folder or a "
                       "resgrad-train checkpoint";
  else if (!ids && !text)
    why = "no prompt: give --tokens IDS (e.g. --tokens 464,2068) or --prompt TEXT";
  else if (ids && text)
    why = "prompts are either token ids (--tokens, --tokens-file) or text (--prompt, "
          "--prompt-file): give one kind";
  else if (strcmp(o->device, "auto") && strcmp(o->device, "cpu") && strcmp(o->device, "cuda"))
    why = "--device: give auto, cpu or cuda";
  else if (o->format && strcmp(o->format, "ids") && strcmp(o->format, "text"))
    why = "--format: give ids or text";
  else if (o->tokens_file && o->prompt_file && !strcmp(o->tokens_file, "-") &&
           !strcmp(o->prompt_file, "-"))
    why = "--tokens-file - and --prompt-file - both read standard input: give one";
  else if (temp_given && o->temperature == 0 && (o->top_k || o->top_p < 1))
    why = "--temperature 0 is greedy: --top-k and --top-p apply to sampling; leave them "
          "out or give a temperature > 0";
  if (why) {
    errorf("%s", why);
    return EXIT_USAGE;
  }
  if (!o->format) o->format = text ? "text" : "ids";
  if (!temp_given && (o->top_k || o->top_p < 1)) o->temperature = 1;
  o->sampling = o->temperature > 0;
  return -1;
}

int parse_args(gopts *o, int argc, char **argv) {
  memset(o, 0, sizeof *o);
  o->device = "auto";
  o->max_new = 32;
  o->top_p = 1;
  o->seed = 1;
  o->stop = -1;
  o->batch = 1;
  int temp_given = 0, c, bad = 0;
  opterr = 0;
  while (!bad && (c = getopt_long(argc, argv, ":", LONG, NULL)) != -1) {
    const char *name = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    const char *v = optarg;
    int64_t x = 0;
    switch (c) {
    case O_MODEL: o->model = v; break;
    case O_TOKENS: bad = push(&o->tokens, &o->ntokens, v); break;
    case O_TOKENS_FILE: o->tokens_file = v; break;
    case O_PROMPT: bad = push(&o->prompts, &o->nprompts, v); break;
    case O_PROMPT_FILE: o->prompt_file = v; break;
    case O_TOKENIZER: o->tokenizer = v; break;
    case O_FORMAT: o->format = v; break;
    case O_DEVICE: o->device = v; break;
    case O_MAX_NEW: bad = parse_int("max-new", v, 1, 1 << 30, &o->max_new); break;
    case O_TOP_K: bad = parse_int("top-k", v, 0, INT32_MAX, &o->top_k); break;
    case O_BATCH: bad = parse_int("batch", v, 1, 1 << 20, &o->batch); break;
    case O_THREADS: bad = parse_int("threads", v, 0, 4096, &o->threads); break;
    case O_STOP: bad = parse_int("stop", v, -1, INT32_MAX, &o->stop); break;
    case O_SEED:
      bad = parse_int("seed", v, 0, INT64_MAX, &x);
      o->seed = (uint64_t)x;
      break;
    case O_TEMPERATURE:
      bad = parse_real("temperature", v, 0, 1e4, &o->temperature);
      temp_given = 1;
      break;
    case O_TOP_P: bad = parse_real("top-p", v, 1e-9, 1, &o->top_p); break;
    case O_ECHO: o->echo = 1; break;
    case O_QUIET: o->quiet = 1; break;
    case O_HELP:
      fputs(HELP, stdout);
      free_opts(o);
      return EXIT_OK;
    case ':':
      errorf("%s needs a value (see --help)", name);
      bad = 1;
      break;
    default:
      errorf("unknown option '%s' (see --help)", name);
      bad = 1;
    }
    if (!bad && v && !*v) {
      errorf("%s: the value is empty", name);
      bad = 1;
    }
  }
  if (!bad && optind < argc) {
    errorf("unexpected argument '%s' (options start with --; a prompt is --prompt TEXT)",
           argv[optind]);
    bad = 1;
  }
  int rc = bad ? EXIT_USAGE : check(o, temp_given);
  if (rc >= 0) free_opts(o);
  return rc;
}
