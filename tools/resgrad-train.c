/*
 * resgrad-train.c - resgrad's main program: trains a small GPT and says what it learned.
 *
 * Tasks:
 *   (default)     multi-digit addition. A problem is "123+456=" followed by the answer
 *                 written backwards ("975" then the carry digit "0"), so each answer digit
 *                 depends only on digits already seen; that is what makes it learnable
 *                 for a causal model in a few thousand steps. Problems come from a seed,
 *                 half of the training operands shorter than D digits (see add_operand);
 *                 an unordered pair {a, b} is held out when a hash of it says so, so
 *                 neither a+b nor b+a is ever trained on. Accuracy is exact match of the
 *                 whole answer under greedy decoding, one forward per answer digit over
 *                 the whole held-out batch.
 *   --text FILE   a character-level (byte-level) language model; the last 10% of the file
 *                 is held out. --sample N prints N generated characters.
 *
 * --distributed: one rank of a data-parallel run (resgrad-run -n N -- resgrad-train
 * --distributed ...; rg_dist_init). Rank r trains on rows [r*B, (r+1)*B) of the step's
 * batch of N*B rows, so N ranks of --batch B see the data of one rank of --batch N*B.
 * Only rank 0 evaluates, prints, plots and saves, and only rank 0 stops on Ctrl-C (the
 * others then fail at the next step, finding rank 0 gone).
 *
 * It uses only resgrad.h and resgrad_nn.h. A training step is DESIGN.md's step: one
 * rg_step_begin, the batch uploaded, the loss recorded, rg_backward, a clipped AdamW
 * step and one rg_item, the step's only barrier.
 *
 * Invariants:
 *  - the batch of step s is a pure function of (seed, s, rank) and the learning rate of
 *    step s a pure function of (s, --steps, --warmup, --lr); the optimizer state travels
 *    in the checkpoint. So N steps + --save + --resume for the rest gives the same losses, bit
 *    for bit, as one uninterrupted run (tests/test_train.c checks it).
 *  - evaluation never changes what training computes (no dropout, no shared RNG), so
 *    --eval-every changes the plot but not the losses.
 *  - errors print one line on stderr. Exit codes: 0 done, 1 runtime error, 2 usage
 *    error, 130 interrupted (Ctrl-C: the step in flight finishes, --save still writes).
 */
#define _POSIX_C_SOURCE 200809L

#include <resgrad.h>
#include <resgrad_nn.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

#define PROG "resgrad-train"
#define IGNORE_TOKEN (-1)     /* targets the loss skips (the question part of a problem) */
#define TOK_PLUS 10           /* addition tokens: digits 0..9, then '+' and '=' */
#define TOK_EQUALS 11
#define ADD_VOCAB 12
#define HELD_OUT_PER_MILLE 100 /* share of unordered pairs {a, b} never trained on */
#define HELD_OUT_LOSS_N 256    /* held-out problems (or text windows) in the loss curve */
#define EVAL_CHUNK 256         /* held-out problems decoded per forward */
#define LR_FLOOR 0.1           /* cosine decay ends at this fraction of --lr */
#define PLOT_POINTS 800        /* the training curve is averaged down to this many */
#define PI 3.14159265358979323846

/* Set by the SIGINT handler; the training loop stops after the step in flight. */
static volatile sig_atomic_t g_interrupted;
/* A progress line is on the terminal without its newline (errors end it first). */
static int g_line_open;
/* Who speaks in error lines: PROG, or "PROG (rank R of N)" in a distributed run. */
static char g_who[64] = PROG;

/* ---- messages ------------------------------------------------------------------------ */

static void errorf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (g_line_open) fputc('\n', stderr);
  g_line_open = 0;
  fprintf(stderr, "%s: ", g_who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* A failed resgrad call: one line with what we were doing and the library's message. */
static int rg_fail(rg_ctx *ctx, rg_status st, const char *doing) {
  const char *msg = ctx ? rg_errmsg(ctx) : "";
  errorf("%s: %s", doing, *msg ? msg : rg_status_str(st));
  return EXIT_RUNTIME;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- options ------------------------------------------------------------------------- */

typedef enum opt_type { OPT_INT, OPT_REAL, OPT_U64, OPT_STR, OPT_FLAG } opt_type;

typedef struct opts {
  const char *text, *device, *save, *resume, *plot;
  int64_t digits, block, layers, width, heads;
  int64_t steps, stop_at, batch, warmup, threads, eval, eval_every, log_every, sample;
  float lr, wd, clip, temperature;
  uint64_t seed;
  int64_t distributed, help;
} opts;

typedef struct opt_row {
  const char *name, *arg, *def, *help;
  opt_type type;
  size_t off;
  double lo, hi; /* inclusive range of a number */
} opt_row;

#define ROW(name, arg, def, type, field, lo, hi, help) \
  {name, arg, def, help, type, offsetof(opts, field), lo, hi}
/* The one list of options: --help, the defaults and the parser all come from it. */
static const opt_row OPTS[] = {
  ROW("text", "FILE", "", OPT_STR, text, 0, 0,
      "train a character-level model on FILE instead of addition"),
  ROW("digits", "N", "3", OPT_INT, digits, 1, 9, "addition: digits per operand"),
  ROW("block", "N", "64", OPT_INT, block, 2, 4096, "--text: context length in bytes"),
  ROW("layers", "N", "2", OPT_INT, layers, 1, 64, "transformer blocks"),
  ROW("width", "N", "64", OPT_INT, width, 1, 8192, "embedding width (a multiple of --heads)"),
  ROW("heads", "N", "4", OPT_INT, heads, 1, 256, "attention heads"),
  ROW("steps", "N", "3000", OPT_INT, steps, 0, 1e9,
      "training steps in all; the lr schedule spans them"),
  ROW("stop-at", "K", "0", OPT_INT, stop_at, 0, 1e9,
      "end this run after step K, as if interrupted (0: at --steps); the lr schedule "
      "still spans --steps, so --resume finishes the same run"),
  ROW("batch", "N", "32", OPT_INT, batch, 1, 1 << 20, "sequences per step"),
  ROW("lr", "X", "0.002", OPT_REAL, lr, 1e-9, 10, "peak learning rate (AdamW)"),
  ROW("warmup", "N", "200", OPT_INT, warmup, 0, 1e9,
      "linear warm-up steps, then cosine decay to 0.1 x --lr"),
  ROW("wd", "X", "0.1", OPT_REAL, wd, 0, 10, "AdamW weight decay"),
  ROW("clip", "X", "1", OPT_REAL, clip, 0, 1e9, "clip the gradient norm to X (0 = off)"),
  ROW("seed", "N", "1", OPT_U64, seed, 0, 0, "seed for the initial weights and the batches"),
  ROW("device", "D", "auto", OPT_STR, device, 0, 0, "auto, cpu or cuda"),
  ROW("threads", "N", "1", OPT_INT, threads, 0, 4096,
      "CPU threads, 0 = all cores (more threads make this small model slower)"),
  ROW("eval", "N", "1000", OPT_INT, eval, 1, 1e7,
      "addition: held-out problems for the final accuracy"),
  ROW("eval-every", "N", "0", OPT_INT, eval_every, 0, 1e9,
      "held-out loss every N steps (0: 25 times per run)"),
  ROW("log-every", "N", "100", OPT_INT, log_every, 1, 1e9,
      "progress line every N steps when stderr is not a terminal"),
  ROW("sample", "N", "0", OPT_INT, sample, 0, 1e8,
      "print N generated characters (--text) or N solved held-out problems"),
  ROW("temperature", "X", "0.8", OPT_REAL, temperature, 1e-3, 100,
      "--sample: softmax temperature"),
  ROW("save", "PATH", "", OPT_STR, save, 0, 0, "write a checkpoint (model, optimizer, step)"),
  ROW("resume", "PATH", "", OPT_STR, resume, 0, 0,
      "continue from a checkpoint; options not given are taken from it"),
  ROW("plot", "PATH", "", OPT_STR, plot, 0, 0,
      "write the training and held-out loss curves as SVG"),
  ROW("distributed", "", "", OPT_FLAG, distributed, 0, 0,
      "one rank of a data-parallel run started by resgrad-run (which sets RG_RANK, "
      "RG_LOCAL_RANK, RG_WORLD_SIZE, RG_RENDEZVOUS): each rank trains on its own --batch "
      "sequences of each step; rank 0 alone prints, plots and saves. On GPUs each rank "
      "takes GPU RG_LOCAL_RANK and the gradients are averaged with NCCL"),
  ROW("help", "", "", OPT_FLAG, help, 0, 0, "print this help and exit"),
};
#undef ROW
#define NOPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static const opt_row *opt_find(const char *name, size_t len) {
  for (int i = 0; i < NOPTS; i++)
    if (strlen(OPTS[i].name) == len && !strncmp(OPTS[i].name, name, len)) return &OPTS[i];
  return NULL;
}

/* Parses v into the field of row r. Returns "" or why it is not a valid value. */
static const char *opt_set(opts *o, const opt_row *r, const char *v, char *why, size_t cap) {
  void *field = (char *)o + r->off;
  char *end = NULL;
  errno = 0;
  switch (r->type) {
  case OPT_STR:
    *(const char **)field = *v ? v : NULL;
    return "";
  case OPT_FLAG:
    *(int64_t *)field = 1;
    return "";
  case OPT_INT: {
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno) return "is not an integer";
    if ((double)x < r->lo || (double)x > r->hi) {
      snprintf(why, cap, "is out of range [%.0f, %.0f]", r->lo, r->hi);
      return why;
    }
    *(int64_t *)field = x;
    return "";
  }
  case OPT_U64: {
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end || errno || strchr(v, '-')) return "is not a non-negative integer";
    *(uint64_t *)field = x;
    return "";
  }
  case OPT_REAL: {
    float x = strtof(v, &end);
    if (!*v || *end || errno || !isfinite(x)) return "is not a number";
    if (x < r->lo || x > r->hi) {
      snprintf(why, cap, "is out of range [%g, %g]", r->lo, r->hi);
      return why;
    }
    *(float *)field = x;
    return "";
  }
  }
  return "has an unknown type";
}

static void opts_defaults(opts *o) {
  char why[96];
  memset(o, 0, sizeof *o);
  for (int i = 0; i < NOPTS; i++)
    if (OPTS[i].type != OPT_FLAG) (void)opt_set(o, &OPTS[i], OPTS[i].def, why, sizeof why);
}

/* "  --name ARG" then text from column 23, wrapped before column 80. */
static void print_option(FILE *f, const char *lhs, const char *text) {
  int col = fprintf(f, "  %-20s", lhs);
  if (col > 22) col = fprintf(f, "\n%22s", "") - 1;
  while (*text) {
    size_t n = strcspn(text, " ");
    if (col + 1 + (int)n > 79) col = fprintf(f, "\n%22s", "") - 1;
    col += fprintf(f, " %.*s", (int)n, text);
    text += n;
    text += strspn(text, " ");
  }
  fputc('\n', f);
}

static void print_help(FILE *f) {
  fprintf(f,
          "usage: " PROG " [options]\n\n"
          "Trains a small GPT with resgrad. Without --text it learns multi-digit addition\n"
          "(123+456=975 0: the answer is written backwards) and reports exact-match\n"
          "accuracy on problems it never saw; with --text FILE it learns the bytes of FILE.\n"
          "Progress goes to stderr, the summary (and --sample) to stdout.\n\noptions:\n");
  for (int i = 0; i < NOPTS; i++) {
    const opt_row *r = &OPTS[i];
    char lhs[40], text[320];
    snprintf(lhs, sizeof lhs, "--%s%s%s", r->name, *r->arg ? " " : "", r->arg);
    if (r->type == OPT_FLAG || !*r->def) snprintf(text, sizeof text, "%s", r->help);
    else snprintf(text, sizeof text, "%s (default %s)", r->help, r->def);
    print_option(f, lhs, text);
  }
  fprintf(f, "\nexamples:\n"
             "  " PROG "                      addition: 2-3 minutes on 2 cores\n"
             "  " PROG " --steps 3000 --stop-at 1500 --save a.st\n"
             "  " PROG " --resume a.st        finishes that run: steps 1500..3000\n"
             "  " PROG " --text book.txt --steps 2000 --sample 500 --plot loss.svg\n"
             "  resgrad-run -n 2 -- " PROG " --distributed --device cpu --batch 16\n"
             "  resgrad-run -n 2 -- " PROG " --distributed --device cuda   one rank per GPU\n"
             "\nexit status: 0 done, 1 runtime error, 2 usage error, 130 interrupted\n");
}

/* Parses argv into o, noting which options were given. Returns -1 to go on, else the
   exit code (0 after --help). */
static int parse_args(opts *o, unsigned char *given, int argc, char **argv) {
  opts_defaults(o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strncmp(a, "--", 2) || !a[2]) {
      errorf("unexpected argument '%s' (options start with --; see --help)", a);
      return EXIT_USAGE;
    }
    const char *eq = strchr(a + 2, '=');
    size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
    const opt_row *r = opt_find(a + 2, len);
    if (!r) {
      errorf("unknown option '%.*s' (see --help)", (int)(len + 2), a);
      return EXIT_USAGE;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (r->type == OPT_FLAG && v) {
      errorf("--%s takes no value", r->name);
      return EXIT_USAGE;
    }
    if (r->type != OPT_FLAG && !v) {
      if (i + 1 >= argc) {
        errorf("--%s needs a value (%s)", r->name, r->arg);
        return EXIT_USAGE;
      }
      v = argv[++i];
    }
    char why[96];
    const char *bad = opt_set(o, r, v ? v : "", why, sizeof why);
    if (*bad) {
      errorf("--%s: '%s' %s", r->name, v, bad);
      return EXIT_USAGE;
    }
    if (r->type == OPT_STR && !*v) {
      errorf("--%s: the value is empty", r->name);
      return EXIT_USAGE;
    }
    given[r - OPTS] = 1;
  }
  if (o->help) {
    print_help(stdout);
    return EXIT_OK;
  }
  return -1;
}

/* Checks what single options cannot: combinations. Returns -1 or EXIT_USAGE. */
static int check_opts(const opts *o) {
  if (strcmp(o->device, "auto") && strcmp(o->device, "cpu") && strcmp(o->device, "cuda")) {
    errorf("--device: '%s' is not one of auto, cpu, cuda", o->device);
    return EXIT_USAGE;
  }
  if (o->width % o->heads) {
    errorf("--width %lld is not a multiple of --heads %lld", (long long)o->width,
           (long long)o->heads);
    return EXIT_USAGE;
  }
  if (o->stop_at > o->steps) {
    errorf("--stop-at %lld is past --steps %lld", (long long)o->stop_at, (long long)o->steps);
    return EXIT_USAGE;
  }
  return -1;
}

/* ---- random numbers: pure functions of (seed, stream, index) --------------------------- */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint64_t rng_next(uint64_t *s) { return mix64(*s += 0x9e3779b97f4a7c15ull); }
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

enum { STREAM_TRAIN = 1, STREAM_EVAL, STREAM_SAMPLE };
static uint64_t stream_seed(uint64_t seed, int stream, int64_t index) {
  uint64_t s = mix64(seed + 0x9e3779b97f4a7c15ull * (uint64_t)stream);
  return mix64(s ^ ((uint64_t)index * 0xd1b54a32d192ed03ull));
}

/* ---- tasks --------------------------------------------------------------------------- */

typedef enum task_kind { TASK_ADD, TASK_TEXT } task_kind;

typedef struct task {
  task_kind kind;
  int digits;
  int64_t vocab, T;       /* T: the model's block = the training sequence length */
  uint64_t range;         /* addition: operands are in [0, range) */
  unsigned char byte_of[256]; /* text: token -> byte */
  int tok_of[256];            /* text: byte -> token, -1 if absent */
  int32_t *data;              /* text: the file as tokens; NULL when only sampling */
  int64_t ndata, ntrain;      /* [0, ntrain) trains, [ntrain, ndata) is held out */
  int32_t *ho_idx, *ho_tgt;   /* held-out loss batch [ho_n, T] */
  int64_t ho_n;
  uint64_t *ev_a, *ev_b;      /* addition: held-out problems for accuracy */
  int64_t ev_n;
} task;

static void task_free(task *t) {
  free(t->data);
  free(t->ho_idx);
  free(t->ho_tgt);
  free(t->ev_a);
  free(t->ev_b);
}

/* Held out or not is decided on the unordered pair, so b+a is not a hint for a+b. */
static int add_held_out(uint64_t a, uint64_t b) {
  uint64_t lo = a < b ? a : b, hi = a < b ? b : a;
  return mix64(mix64(lo + 0x51ed27a3ull) ^ hi) % 1000 < HELD_OUT_PER_MILLE;
}

/* seq: a (most significant digit first), '+', b, '=', then a+b backwards with its carry
   digit last: 3D+3 tokens. */
static void add_encode(int D, uint64_t a, uint64_t b, int32_t *seq) {
  uint64_t c = a + b;
  for (int i = D - 1; i >= 0; i--, a /= 10, b /= 10) {
    seq[i] = (int32_t)(a % 10);
    seq[D + 1 + i] = (int32_t)(b % 10);
  }
  seq[D] = TOK_PLUS;
  seq[2 * D + 1] = TOK_EQUALS;
  for (int i = 0; i <= D; i++, c /= 10) seq[2 * D + 2 + i] = (int32_t)(c % 10);
}

/* One training row: the model reads seq[0..T) and is scored only on the answer. */
static void add_row(const task *t, uint64_t a, uint64_t b, int32_t *idx, int32_t *tgt) {
  int32_t seq[32];
  int D = t->digits;
  add_encode(D, a, b, seq);
  for (int64_t i = 0; i < t->T; i++) {
    idx[i] = seq[i];
    tgt[i] = i + 1 >= 2 * D + 2 ? seq[i + 1] : IGNORE_TOKEN;
  }
}

/* A training operand is half the time any D-digit number and otherwise a shorter one
   (zero-padded): in short problems the high answer digits are a bare carry, which teaches
   the carry apart from the digit sums. Held-out problems are uniform over all pairs. */
static uint64_t add_operand(const task *t, uint64_t *s, int training) {
  uint64_t range = t->range;
  if (training && t->digits > 1 && (rng_next(s) & 1)) {
    int k = 1 + (int)(rng_next(s) % (uint64_t)(t->digits - 1)); /* 1..D-1 digits */
    for (range = 10; k > 1; k--) range *= 10;
  }
  return rng_next(s) % range;
}

static void add_draw(const task *t, uint64_t *s, int held_out, uint64_t *a, uint64_t *b) {
  do {
    *a = add_operand(t, s, !held_out);
    *b = add_operand(t, s, !held_out);
  } while (add_held_out(*a, *b) != held_out);
}

/* Rows [first, first + B) of the batch of a step, a pure function of (seed, step): the
   rows before first (other ranks' share) are drawn, not kept. */
static void make_batch(const task *t, uint64_t seed, int64_t step, int64_t first, int64_t B,
                       int32_t *idx, int32_t *tgt) {
  uint64_t s = stream_seed(seed, STREAM_TRAIN, step);
  for (int64_t i = 0; i < first + B; i++) {
    int32_t *x = i < first ? NULL : idx + (i - first) * t->T;
    int32_t *y = i < first ? NULL : tgt + (i - first) * t->T;
    if (t->kind == TASK_ADD) {
      uint64_t a, b;
      add_draw(t, &s, 0, &a, &b);
      if (x) add_row(t, a, b, x, y);
    } else {
      int64_t off = (int64_t)(rng_next(&s) % (uint64_t)(t->ntrain - t->T));
      if (!x) continue;
      memcpy(x, t->data + off, sizeof *x * (size_t)t->T);
      memcpy(y, t->data + off + 1, sizeof *y * (size_t)t->T);
    }
  }
}

static int alloc_heldout(task *t, int64_t n) {
  t->ho_n = n;
  t->ho_idx = malloc(sizeof *t->ho_idx * (size_t)(n * t->T));
  t->ho_tgt = malloc(sizeof *t->ho_tgt * (size_t)(n * t->T));
  if (t->ho_idx && t->ho_tgt) return 0;
  errorf("out of memory for the held-out set");
  return EXIT_RUNTIME;
}

/* Addition: a fixed held-out set (independent of --seed, so runs are comparable). */
static int task_add_init(task *t, const opts *o) {
  t->kind = TASK_ADD;
  t->digits = (int)o->digits;
  t->vocab = ADD_VOCAB;
  t->T = 3 * o->digits + 2;
  t->range = 1;
  for (int i = 0; i < t->digits; i++) t->range *= 10;
  t->ev_n = o->eval;
  t->ev_a = malloc(sizeof *t->ev_a * (size_t)t->ev_n);
  t->ev_b = malloc(sizeof *t->ev_b * (size_t)t->ev_n);
  if (!t->ev_a || !t->ev_b) {
    errorf("out of memory for %lld held-out problems", (long long)t->ev_n);
    return EXIT_RUNTIME;
  }
  uint64_t s = stream_seed(0, STREAM_EVAL, 0);
  int any = 0;
  for (uint64_t a = 0; a < t->range && a < 1000 && !any; a++) /* some pair is held out? */
    for (uint64_t b = 0; b < t->range && !any; b++) any = add_held_out(a, b);
  if (!any) {
    errorf("--digits %d leaves no problem to hold out; use --digits 2 or more", t->digits);
    return EXIT_USAGE;
  }
  for (int64_t i = 0; i < t->ev_n; i++) add_draw(t, &s, 1, &t->ev_a[i], &t->ev_b[i]);
  int64_t n = t->ev_n < HELD_OUT_LOSS_N ? t->ev_n : HELD_OUT_LOSS_N;
  if (alloc_heldout(t, n)) return EXIT_RUNTIME;
  for (int64_t i = 0; i < n; i++)
    add_row(t, t->ev_a[i], t->ev_b[i], t->ho_idx + i * t->T, t->ho_tgt + i * t->T);
  return 0;
}

static int read_file(const char *path, unsigned char **out, int64_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    errorf("cannot open '%s': %s", path, strerror(errno));
    return EXIT_RUNTIME;
  }
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = malloc(cap);
  for (size_t got = 1; buf && got > 0;) {
    if (len == cap) {
      unsigned char *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
      if (!buf) break;
    }
    got = fread(buf + len, 1, cap - len, f);
    len += got;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf || err) {
    errorf(buf ? "cannot read '%s'" : "out of memory reading '%s'", path);
    free(buf);
    return EXIT_RUNTIME;
  }
  *out = buf;
  *n = (int64_t)len;
  return 0;
}

static const char HEX[] = "0123456789abcdef";

static void vocab_to_hex(const task *t, char *out) {
  for (int64_t i = 0; i < t->vocab; i++) {
    out[2 * i] = HEX[t->byte_of[i] >> 4];
    out[2 * i + 1] = HEX[t->byte_of[i] & 15];
  }
  out[2 * t->vocab] = 0;
}

static int hexval(char c) {
  const char *p = c ? strchr(HEX, c) : NULL;
  return p ? (int)(p - HEX) : -1;
}

/* Sets the vocabulary from a checkpoint's hex string; 0 or -1 when malformed. */
static int vocab_from_hex(task *t, const char *hex) {
  size_t n = strlen(hex);
  if (n == 0 || n % 2 || n > 512) return -1;
  t->vocab = (int64_t)(n / 2);
  for (int i = 0; i < 256; i++) t->tok_of[i] = -1;
  for (int64_t i = 0; i < t->vocab; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0 || t->tok_of[hi * 16 + lo] >= 0) return -1;
    t->byte_of[i] = (unsigned char)(hi * 16 + lo);
    t->tok_of[hi * 16 + lo] = (int)i;
  }
  return 0;
}

static void vocab_from_bytes(task *t, const unsigned char *buf, int64_t n) {
  int present[256] = {0};
  for (int64_t i = 0; i < n; i++) present[buf[i]] = 1;
  t->vocab = 0;
  for (int c = 0; c < 256; c++) {
    t->tok_of[c] = present[c] ? (int)t->vocab : -1;
    if (present[c]) t->byte_of[t->vocab++] = (unsigned char)c;
  }
}

/* Encodes the file; the last 10% (at least one window) is held out. */
static int text_split(task *t, const opts *o, const unsigned char *buf, int64_t n) {
  int64_t win = t->T + 1, ho = n / 10 > win ? n / 10 : win;
  if (n - ho < win + 1) {
    errorf("'%s' has %lld bytes; --block %lld needs at least %lld (or a smaller --block)",
           o->text, (long long)n, (long long)t->T, (long long)(2 * win + 1));
    return EXIT_RUNTIME;
  }
  t->data = malloc(sizeof *t->data * (size_t)n);
  if (!t->data) {
    errorf("out of memory for the %lld bytes of '%s'", (long long)n, o->text);
    return EXIT_RUNTIME;
  }
  for (int64_t i = 0; i < n; i++) {
    t->data[i] = t->tok_of[buf[i]];
    if (t->data[i] < 0) {
      errorf("'%s' has byte 0x%02x at offset %lld, which the checkpoint's vocabulary lacks",
             o->text, buf[i], (long long)i);
      return EXIT_RUNTIME;
    }
  }
  t->ndata = n;
  t->ntrain = n - ho;
  int64_t k = ho / win < HELD_OUT_LOSS_N / 4 ? ho / win : HELD_OUT_LOSS_N / 4;
  if (alloc_heldout(t, k)) return EXIT_RUNTIME;
  for (int64_t i = 0; i < k; i++) { /* windows spread evenly over the held-out tail */
    int64_t off = t->ntrain + (k > 1 ? i * (ho - win) / (k - 1) : 0);
    memcpy(t->ho_idx + i * t->T, t->data + off, sizeof(int32_t) * (size_t)t->T);
    memcpy(t->ho_tgt + i * t->T, t->data + off + 1, sizeof(int32_t) * (size_t)t->T);
  }
  return 0;
}

/* Text: vocabulary from the checkpoint (hex, when resuming) or from the file's bytes. */
static int task_text_init(task *t, const opts *o, const char *ckpt_vocab) {
  t->kind = TASK_TEXT;
  t->T = o->block;
  if (ckpt_vocab && vocab_from_hex(t, ckpt_vocab)) {
    errorf("'%s': the resgrad-train.vocab metadata is malformed", o->resume);
    return EXIT_RUNTIME;
  }
  if (!o->text) return 0; /* resumed for sampling only */
  unsigned char *buf = NULL;
  int64_t n = 0;
  int rc = read_file(o->text, &buf, &n);
  if (rc) return rc;
  if (!ckpt_vocab) vocab_from_bytes(t, buf, n);
  rc = text_split(t, o, buf, n);
  free(buf);
  return rc;
}

/* ---- checkpoint metadata ------------------------------------------------------------- */

/* What resgrad-train stores besides the tensors. */
typedef struct ckpt_meta {
  char config[256], task[64], run[256], step[32], vocab[1024];
} ckpt_meta;

#define KEY_CONFIG "resgrad-train.config"
#define KEY_TASK "resgrad-train.task"
#define KEY_RUN "resgrad-train.run"
#define KEY_STEP "resgrad-train.step"
#define KEY_VOCAB "resgrad-train.vocab"

/* A JSON reader just big enough for a safetensors header's __metadata__ object (the
   model must be built before rg_load, so its config has to be read first, here). */
typedef struct jcur { const char *p, *end; } jcur;

static void jws(jcur *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}
static int jlit(jcur *j, char c) {
  jws(j);
  if (j->p >= j->end || *j->p != c) return 0;
  j->p++;
  return 1;
}
/* A string into buf (escapes decoded; \u beyond ASCII becomes '?'); buf may be NULL. */
static int jstring(jcur *j, char *buf, size_t cap) {
  size_t n = 0;
  if (!jlit(j, '"')) return 0;
  while (j->p < j->end && *j->p != '"') {
    char c = *j->p++;
    if (c == '\\' && j->p < j->end) {
      c = *j->p++;
      if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
      else if (c == 'r') c = '\r';
      else if (c == 'b') c = '\b';
      else if (c == 'f') c = '\f';
      else if (c == 'u') {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
          int h = j->p < j->end ? hexval((char)(*j->p | 0x20)) : -1;
          if (h < 0) return 0;
          v = v * 16 + (unsigned)h;
          j->p++;
        }
        c = v < 0x80 ? (char)v : '?';
      }
    }
    if (buf && n + 1 < cap) buf[n++] = c;
  }
  if (buf && cap) buf[n] = 0;
  return jlit(j, '"');
}
/* Skips any value. */
static int jskip(jcur *j) {
  jws(j);
  if (j->p >= j->end) return 0;
  if (*j->p == '"') return jstring(j, NULL, 0);
  if (*j->p != '{' && *j->p != '[') {
    while (j->p < j->end && !strchr(",}] \t\r\n", *j->p)) j->p++;
    return 1;
  }
  int depth = 0;
  do {
    if (*j->p == '"') {
      if (!jstring(j, NULL, 0)) return 0;
      continue;
    }
    depth += (*j->p == '{' || *j->p == '[') - (*j->p == '}' || *j->p == ']');
    j->p++;
  } while (depth > 0 && j->p < j->end);
  return depth == 0;
}

static int jmetadata(jcur *j, ckpt_meta *m) {
  struct { const char *key; char *dst; size_t cap; } want[] = {
    {KEY_CONFIG, m->config, sizeof m->config}, {KEY_TASK, m->task, sizeof m->task},
    {KEY_RUN, m->run, sizeof m->run},          {KEY_STEP, m->step, sizeof m->step},
    {KEY_VOCAB, m->vocab, sizeof m->vocab}};
  if (!jlit(j, '{')) return 0;
  for (int first = 1; !jlit(j, '}'); first = 0) {
    char key[300], val[1100];
    if ((!first && !jlit(j, ',')) || !jstring(j, key, sizeof key) || !jlit(j, ':') ||
        !jstring(j, val, sizeof val))
      return 0;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
      size_t n = strlen(val);
      if (strcmp(key, want[k].key)) continue;
      if (n >= want[k].cap) return 0; /* longer than resgrad-train ever writes */
      memcpy(want[k].dst, val, n + 1);
    }
  }
  return 1;
}

/* Reads the checkpoint's metadata. Returns "" or why it could not. */
static const char *peek_meta(const char *path, ckpt_meta *m, char *why, size_t cap) {
  memset(m, 0, sizeof *m);
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(why, cap, "cannot open it: %s", strerror(errno));
    return why;
  }
  unsigned char lb[8];
  uint64_t hlen = 0;
  char *hdr = NULL;
  const char *bad = "";
  if (fread(lb, 1, 8, f) != 8) bad = "it is shorter than a safetensors header";
  for (int i = 0; !*bad && i < 8; i++) hlen |= (uint64_t)lb[i] << (8 * i);
  if (!*bad && (hlen < 2 || hlen > (64u << 20)))
    bad = "it is not a safetensors file (its header length is implausible)";
  if (!*bad && !(hdr = malloc((size_t)hlen))) bad = "out of memory for its header";
  if (!*bad && fread(hdr, 1, (size_t)hlen, f) != hlen) bad = "its header is truncated";
  fclose(f);
  jcur j = {hdr, hdr + hlen};
  int ok = !*bad && jlit(&j, '{');
  for (int first = 1; ok && !jlit(&j, '}'); first = 0) {
    char name[300];
    ok = (first || jlit(&j, ',')) && jstring(&j, name, sizeof name) && jlit(&j, ':');
    if (ok) ok = strcmp(name, "__metadata__") ? jskip(&j) : jmetadata(&j, m);
  }
  free(hdr);
  if (*bad) return bad;
  if (!ok) return "its header is not the JSON of a safetensors file";
  if (!m->config[0]) return "it has no " KEY_CONFIG " metadata (not written by " PROG "?)";
  return "";
}

/* Takes "name=value" words of s for every option not given on the command line. */
static int adopt(opts *o, const unsigned char *given, const char *s, const char *path) {
  char word[128];
  for (int n = 0; sscanf(s, "%127s%n", word, &n) == 1; s += n) {
    char *eq = strchr(word, '=');
    const opt_row *r = eq ? opt_find(word, (size_t)(eq - word)) : NULL;
    if (!r || given[r - OPTS] || r->type == OPT_STR) continue; /* e.g. vocab=: not ours */
    char why[96];
    if (*opt_set(o, r, eq + 1, why, sizeof why)) {
      errorf("'%s': bad value '%s' in its metadata", path, word);
      return EXIT_RUNTIME;
    }
  }
  return 0;
}

/* The words that must match between a checkpoint and the run that resumes it. */
static void config_string(const opts *o, const task *t, char *out, size_t cap) {
  snprintf(out, cap, "layers=%lld width=%lld heads=%lld vocab=%lld block=%lld",
           (long long)o->layers, (long long)o->width, (long long)o->heads,
           (long long)t->vocab, (long long)t->T);
}
static void task_string(const task *t, char *out, size_t cap) {
  if (t->kind == TASK_TEXT) snprintf(out, cap, "text");
  else snprintf(out, cap, "addition digits=%d", t->digits);
}
/* What a resumed run takes over when not told otherwise (the lr schedule's inputs). */
static void run_string(const opts *o, char *out, size_t cap) {
  snprintf(out, cap, "steps=%lld batch=%lld lr=%.9g warmup=%lld wd=%.9g clip=%.9g seed=%llu",
           (long long)o->steps, (long long)o->batch, (double)o->lr, (long long)o->warmup,
           (double)o->wd, (double)o->clip, (unsigned long long)o->seed);
}

/* --resume: reads the file's metadata and fills the options not given from it. */
static int resume_options(opts *o, const unsigned char *given, ckpt_meta *m) {
  char why[160];
  const char *bad = peek_meta(o->resume, m, why, sizeof why);
  if (*bad) {
    errorf("cannot resume from '%s': %s", o->resume, bad);
    return EXIT_RUNTIME;
  }
  int file_text = !strcmp(m->task, "text");
  if (!file_text && strncmp(m->task, "addition", 8)) {
    errorf("cannot resume from '%s': unknown task '%s'", o->resume, m->task);
    return EXIT_RUNTIME;
  }
  if (o->text && !file_text) {
    errorf("cannot resume from '%s': it is a model of '%s', not of --text", o->resume, m->task);
    return EXIT_USAGE;
  }
  if (file_text && !m->vocab[0]) {
    errorf("cannot resume from '%s': a text model without " KEY_VOCAB " metadata", o->resume);
    return EXIT_RUNTIME;
  }
  int rc = adopt(o, given, m->config, o->resume);
  if (!rc) rc = adopt(o, given, m->run, o->resume);
  if (!rc) rc = adopt(o, given, m->task, o->resume);
  return rc;
}

/* ---- the run --------------------------------------------------------------------------- */

typedef struct run {
  opts *o;
  task t;
  ckpt_meta meta;       /* the --resume file's */
  rg_ctx *ctx;
  rg_gpt *gpt;
  rg_optim *opt;
  int32_t *idx, *tgt;   /* one training batch [batch, T] */
  int64_t step0, step;  /* first step of this run; steps completed */
  float *loss;          /* training loss of each step of this run */
  int64_t *ho_x;        /* held-out loss curve: after ho_x[i] steps, ho_y[i] */
  float *ho_y;
  int64_t nho, capho;
  double t_start, t_train, t_eval;
  rg_xfer up, down;     /* host<->device traffic of the training steps */
  int64_t correct;      /* addition: exactly right held-out answers */
  int tty;
  int rank, world;      /* this process's rank of world (0 of 1 unless --distributed) */
  double last_draw;
  char config[256], taskname[64];
} run;

static float lr_at(const opts *o, int64_t step) {
  double base = o->lr;
  if (step < o->warmup) return (float)(base * (double)(step + 1) / (double)o->warmup);
  double span = (double)(o->steps - o->warmup);
  double x = span > 0 ? (double)(step - o->warmup) / span : 1.0;
  if (x > 1) x = 1;
  double lo = base * LR_FLOOR;
  return (float)(lo + 0.5 * (base - lo) * (1.0 + cos(PI * x)));
}

static rg_tensor batch_loss(run *r, const int32_t *idx, const int32_t *tgt, int64_t B) {
  int64_t dims[2] = {B, r->t.T};
  rg_tensor x = rg_input(r->ctx, RG_I32, 2, dims, idx);
  rg_tensor y = rg_input(r->ctx, RG_I32, 2, dims, tgt);
  return r->t.kind == TASK_ADD ? rg_gpt_loss_ignore(r->gpt, x, y, IGNORE_TOKEN)
                               : rg_gpt_loss(r->gpt, x, y);
}

/* One step as DESIGN.md writes it; rg_item is its only barrier. */
static rg_status train_step(run *r, int64_t step, float *loss) {
  const opts *o = r->o;
  rg_ctx *ctx = r->ctx;
  make_batch(&r->t, o->seed, step, r->rank * o->batch, o->batch, r->idx, r->tgt);
  rg_status st = rg_step_begin(ctx);
  rg_tensor l = RG_NONE;
  if (st == RG_OK) st = rg_optim_set_lr(r->opt, lr_at(o, step));
  if (st == RG_OK) {
    l = batch_loss(r, r->idx, r->tgt, o->batch);
    st = rg_backward(ctx, l);
  }
  if (st == RG_OK && o->clip > 0) st = rg_clip_grad_norm(ctx, o->clip);
  if (st == RG_OK) st = rg_optim_step(r->opt);
  if (st == RG_OK) st = rg_zero_grad(ctx);
  if (st == RG_OK) st = rg_item(ctx, l, loss);
  return st == RG_OK ? rg_error(ctx) : st; /* a failure after the loss: the all-reduce */
}

/* Loss on the held-out batch, in evaluation mode. */
static rg_status heldout_loss(run *r, float *out) {
  rg_set_training(r->ctx, 0);
  rg_status st = rg_step_begin(r->ctx);
  if (st == RG_OK) st = rg_item(r->ctx, batch_loss(r, r->t.ho_idx, r->t.ho_tgt, r->t.ho_n), out);
  rg_set_training(r->ctx, 1);
  return st;
}

static int record_heldout(run *r) {
  float l;
  double t0 = now_s();
  rg_status st = heldout_loss(r, &l);
  r->t_eval += now_s() - t0;
  if (st != RG_OK) return rg_fail(r->ctx, st, "held-out loss");
  if (r->nho == r->capho) {
    int64_t cap = r->capho ? 2 * r->capho : 64;
    int64_t *x = realloc(r->ho_x, sizeof *x * (size_t)cap);
    if (x) r->ho_x = x;
    float *y = realloc(r->ho_y, sizeof *y * (size_t)cap);
    if (y) r->ho_y = y;
    if (!x || !y) {
      errorf("out of memory for the held-out loss curve");
      return EXIT_RUNTIME;
    }
    r->capho = cap;
  }
  r->ho_x[r->nho] = r->step;
  r->ho_y[r->nho++] = l;
  return 0;
}

/* ---- progress ------------------------------------------------------------------------ */

static void fmt_duration(double s, char *out, size_t cap) {
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(out, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) snprintf(out, cap, "%ldm%02lds", t / 60, t % 60);
  else snprintf(out, cap, "%lds", t);
}

static void fmt_rate(double x, char *out, size_t cap) {
  if (x >= 1e6) snprintf(out, cap, "%.2fM", x / 1e6);
  else if (x >= 1e4) snprintf(out, cap, "%.1fk", x / 1e3);
  else snprintf(out, cap, "%.0f", x);
}

/* On a terminal one line redrawn at most 10 times a second; otherwise a line every
   --log-every steps and at the last one. */
static void progress(run *r, float loss, int64_t stop, double t_loop) {
  const opts *o = r->o;
  double now = now_s();
  int last = r->step == stop;
  if (r->tty ? (!last && now - r->last_draw < 0.1) : (!last && r->step % o->log_every))
    return;
  r->last_draw = now;
  int64_t done = r->step - r->step0;
  char rate[32], eta[32], ho[48] = "";
  fmt_rate(r->t_train > 0 ? (double)(done * o->batch * r->world * r->t.T) / r->t_train : 0,
           rate, sizeof rate);
  fmt_duration(done ? (now - t_loop) / (double)done * (double)(stop - r->step) : 0, eta,
               sizeof eta);
  if (r->nho) snprintf(ho, sizeof ho, "  held-out %.4f", (double)r->ho_y[r->nho - 1]);
  fprintf(stderr, "%sstep %lld/%lld  loss %.4f%s  %s tok/s  ETA %s  %s%s", r->tty ? "\r\033[K" : "",
          (long long)r->step, (long long)o->steps, (double)loss, ho, rate, eta,
          rg_device_name(r->ctx), r->tty ? "" : "\n");
  g_line_open = r->tty;
  fflush(stderr);
}

static void progress_end(void) {
  if (g_line_open) fputc('\n', stderr);
  g_line_open = 0;
}

/* ---- training ------------------------------------------------------------------------ */

static void count_xfer(run *r, const rg_stats *a, const rg_stats *b) {
  r->up.bytes += b->up.bytes - a->up.bytes;
  r->up.count += b->up.count - a->up.count;
  r->down.bytes += b->down.bytes - a->down.bytes;
  r->down.count += b->down.count - a->down.count;
}

static int train(run *r) {
  const opts *o = r->o;
  int64_t stop = o->stop_at ? o->stop_at : o->steps;
  int64_t every = o->eval_every ? o->eval_every : (o->steps / 25 > 0 ? o->steps / 25 : 1);
  if (r->step >= stop) return 0;
  if (r->t.kind == TASK_TEXT && !r->t.data) {
    errorf("to train the model of '%s' further, give its --text FILE", o->resume);
    return EXIT_USAGE;
  }
  int heldout = r->t.ho_n && !r->rank; /* rank 0 evaluates for all: same weights */
  int rc = heldout ? record_heldout(r) : 0;
  double t_loop = now_s();
  while (!rc && r->step < stop && !g_interrupted) {
    rg_stats a, b;
    float loss = 0;
    rg_stats_get(r->ctx, &a);
    double t0 = now_s();
    rg_status st = train_step(r, r->step, &loss);
    r->t_train += now_s() - t0;
    rg_stats_get(r->ctx, &b);
    if (st != RG_OK) {
      char what[64];
      snprintf(what, sizeof what, "training step %lld", (long long)r->step);
      return rg_fail(r->ctx, st, what);
    }
    if (!isfinite(loss)) {
      errorf("the loss is %g at step %lld; try a lower --lr", (double)loss, (long long)r->step);
      return EXIT_RUNTIME;
    }
    count_xfer(r, &a, &b);
    r->loss[r->step++ - r->step0] = loss;
    if (heldout && (r->step % every == 0 || r->step == stop)) rc = record_heldout(r);
    if (!r->rank) progress(r, loss, stop, t_loop);
  }
  progress_end();
  if (!rc && g_interrupted)
    errorf("interrupted after step %lld of %lld", (long long)r->step, (long long)o->steps);
  return rc;
}

/* ---- evaluation ---------------------------------------------------------------------- */

/* Greedy answers of n problems whose rows [n, T] hold the question: one forward per
   answer digit over all n, each reading back only the n arg-max tokens. ans: [n, D+1]. */
static rg_status add_decode(run *r, int32_t *rows, int64_t n, int32_t *buf, int32_t *ans) {
  const int64_t T = r->t.T, D = r->t.digits;
  rg_ctx *ctx = r->ctx;
  rg_status st = RG_OK;
  for (int64_t p = 0; p <= D && st == RG_OK; p++) {
    int64_t len = 2 * D + 2 + p, dims[2] = {n, len};
    for (int64_t i = 0; i < n; i++) memcpy(buf + i * len, rows + i * T, sizeof *buf * (size_t)len);
    st = rg_step_begin(ctx);
    if (st != RG_OK) break;
    rg_tensor logits = rg_gpt_forward(r->gpt, rg_input(ctx, RG_I32, 2, dims, buf));
    rg_tensor next = rg_argmax(ctx, rg_slice(ctx, logits, 1, len - 1, 1), 2, 0); /* [n,1] */
    st = rg_read(ctx, next, buf, sizeof *buf * (size_t)n);
    for (int64_t i = 0; st == RG_OK && i < n; i++) {
      ans[i * (D + 1) + p] = buf[i];
      if (len < T) rows[i * T + len] = buf[i];
    }
  }
  return st;
}

static uint64_t answer_value(const int32_t *digits, int64_t D) {
  uint64_t v = 0;
  for (int64_t i = D; i >= 0; i--) v = v * 10 + (uint64_t)(digits[i] >= 0 && digits[i] < 10 ? digits[i] : 0);
  return v;
}

static int answer_ok(const int32_t *digits, int64_t D, uint64_t c) {
  for (int64_t i = 0; i <= D; i++, c /= 10)
    if (digits[i] != (int32_t)(c % 10)) return 0;
  return 1;
}

/* Exact-match accuracy on the held-out problems; prints the first --sample of them. */
static int add_accuracy(run *r) {
  const int64_t T = r->t.T, D = r->t.digits, chunk = EVAL_CHUNK;
  int32_t *rows = malloc(sizeof *rows * (size_t)(chunk * T));
  int32_t *buf = malloc(sizeof *buf * (size_t)(chunk * T));
  int32_t *ans = malloc(sizeof *ans * (size_t)(chunk * (D + 1)));
  int32_t tgt[32];
  rg_status st = RG_OK;
  int rc = rows && buf && ans ? 0 : (errorf("out of memory for decoding"), EXIT_RUNTIME);
  double t0 = now_s();
  rg_set_training(r->ctx, 0);
  r->correct = 0;
  for (int64_t i0 = 0; !rc && i0 < r->t.ev_n; i0 += chunk) {
    int64_t n = r->t.ev_n - i0 < chunk ? r->t.ev_n - i0 : chunk;
    for (int64_t i = 0; i < n; i++) add_row(&r->t, r->t.ev_a[i0 + i], r->t.ev_b[i0 + i], rows + i * T, tgt);
    st = add_decode(r, rows, n, buf, ans);
    if (st != RG_OK) {
      rc = rg_fail(r->ctx, st, "held-out accuracy");
      break;
    }
    for (int64_t i = 0; i < n; i++) {
      uint64_t a = r->t.ev_a[i0 + i], b = r->t.ev_b[i0 + i];
      int ok = answer_ok(ans + i * (D + 1), D, a + b);
      r->correct += ok;
      if (i0 + i < r->o->sample)
        printf("%0*llu+%0*llu = %llu  model: %llu  %s\n", (int)D, (unsigned long long)a,
               (int)D, (unsigned long long)b, (unsigned long long)(a + b),
               (unsigned long long)answer_value(ans + i * (D + 1), D), ok ? "ok" : "WRONG");
    }
  }
  rg_set_training(r->ctx, 1);
  r->t_eval += now_s() - t0;
  free(rows);
  free(buf);
  free(ans);
  return rc;
}

/* Draws a token from probabilities p[V]. */
static int64_t draw(const float *p, int64_t V, uint64_t *s) {
  double u = rng_uniform(s), acc = 0;
  for (int64_t i = 0; i < V; i++)
    if ((acc += p[i]) > u) return i;
  return V - 1;
}

/* --text --sample N: N bytes, each from one forward over the last <= block tokens. */
static int sample_text(run *r) {
  const int64_t T = r->t.T, V = r->t.vocab;
  int32_t *win = malloc(sizeof *win * (size_t)T);
  float *p = malloc(sizeof *p * (size_t)V);
  uint64_t s = stream_seed(r->o->seed, STREAM_SAMPLE, r->step);
  int64_t len = 1;
  int rc = win && p ? 0 : (errorf("out of memory for sampling"), EXIT_RUNTIME);
  rg_ctx *ctx = r->ctx;
  if (!rc) {
    win[0] = r->t.tok_of['\n'] >= 0 ? r->t.tok_of['\n'] : r->t.data ? r->t.data[0] : 0;
    if (r->t.byte_of[win[0]] != '\n') putchar(r->t.byte_of[win[0]]);
  }
  rg_set_training(ctx, 0);
  for (int64_t i = 0; !rc && i < r->o->sample; i++) {
    int64_t dims[2] = {1, len};
    rg_status st = rg_step_begin(ctx);
    rg_tensor logits = rg_gpt_forward(r->gpt, rg_input(ctx, RG_I32, 2, dims, win));
    rg_tensor last = rg_slice(ctx, logits, 1, len - 1, 1);
    rg_tensor probs = rg_softmax(ctx, rg_scale(ctx, last, 1.0f / r->o->temperature));
    if (st == RG_OK) st = rg_read(ctx, probs, p, sizeof *p * (size_t)V);
    if (st != RG_OK) {
      rc = rg_fail(ctx, st, "sampling");
      break;
    }
    int32_t tok = (int32_t)draw(p, V, &s);
    putchar(r->t.byte_of[tok]);
    if (len == T) memmove(win, win + 1, sizeof *win * (size_t)(T - 1));
    win[len == T ? T - 1 : len++] = tok;
  }
  rg_set_training(ctx, 1);
  putchar('\n');
  fflush(stdout);
  free(win);
  free(p);
  return rc;
}

/* ---- checkpoints --------------------------------------------------------------------- */

static int save_checkpoint(run *r) {
  char runs[256], step[32], vocab[520] = "";
  run_string(r->o, runs, sizeof runs);
  snprintf(step, sizeof step, "%lld", (long long)r->step);
  rg_status st = rg_meta_set(r->ctx, KEY_CONFIG, r->config);
  if (st == RG_OK) st = rg_meta_set(r->ctx, KEY_TASK, r->taskname);
  if (st == RG_OK) st = rg_meta_set(r->ctx, KEY_RUN, runs);
  if (st == RG_OK) st = rg_meta_set(r->ctx, KEY_STEP, step);
  if (st == RG_OK && r->t.kind == TASK_TEXT) {
    vocab_to_hex(&r->t, vocab);
    st = rg_meta_set(r->ctx, KEY_VOCAB, vocab);
  }
  if (st == RG_OK) st = rg_save(r->ctx, r->o->save, r->opt);
  if (st != RG_OK) {
    char what[300];
    snprintf(what, sizeof what, "cannot save '%s'", r->o->save);
    return rg_fail(r->ctx, st, what);
  }
  return 0;
}

static int load_checkpoint(run *r) {
  const char *path = r->o->resume;
  rg_status st = rg_load(r->ctx, path, r->opt);
  if (st != RG_OK) {
    if (strcmp(r->meta.config, r->config))
      errorf("cannot resume: %s (the checkpoint's model is '%s', this run's '%s')",
             rg_errmsg(r->ctx), r->meta.config, r->config);
    else
      errorf("cannot resume: %s", rg_errmsg(r->ctx));
    return EXIT_RUNTIME;
  }
  const char *cfg = rg_meta_get(r->ctx, KEY_CONFIG), *tk = rg_meta_get(r->ctx, KEY_TASK);
  const char *sp = rg_meta_get(r->ctx, KEY_STEP);
  if (!cfg || strcmp(cfg, r->config)) {
    errorf("cannot resume from '%s': it holds a model '%s' but this run builds '%s'", path,
           cfg ? cfg : "(none)", r->config);
    return EXIT_RUNTIME;
  }
  if (!tk || strcmp(tk, r->taskname)) {
    errorf("cannot resume from '%s': it was trained on '%s', this run is '%s'", path,
           tk ? tk : "(none)", r->taskname);
    return EXIT_RUNTIME;
  }
  char *end = NULL;
  long long k = sp ? strtoll(sp, &end, 10) : -1;
  if (!sp || *end || k < 0) {
    errorf("cannot resume from '%s': its " KEY_STEP " metadata is missing or bad", path);
    return EXIT_RUNTIME;
  }
  r->step0 = r->step = k;
  return 0;
}

/* ---- SVG plot ------------------------------------------------------------------------ */

typedef struct axis { double lo, hi; int log; } axis; /* log: lo, hi are log10 */
enum { SVG_W = 820, SVG_H = 500, PL = 80, PR = 24, PT = 44, PB = 56 };

static double ax_pos(const axis *a, double v, double p0, double p1) {
  if (a->log) v = log10(v > 0 ? v : 1e-30);
  return p0 + (v - a->lo) / (a->hi - a->lo) * (p1 - p0);
}
static double nice_step(double range, int target) {
  double raw = range / target, mag = pow(10, floor(log10(raw))), f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void svg_text(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
}

static void svg_xtick(FILE *f, const axis *ax, double v) {
  double x = ax_pos(ax, v, PL, SVG_W - PR);
  fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n", x, PT,
          x, SVG_H - PB);
  fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>\n", x,
          SVG_H - PB, x, SVG_H - PB + 5);
  fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, SVG_H - PB + 19, v);
}

static void svg_ytick(FILE *f, const axis *ay, double v) {
  double y = ax_pos(ay, v, SVG_H - PB, PT);
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", PL, y,
          SVG_W - PR, y);
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>\n", PL - 5, y,
          PL, y);
  fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", PL - 8, y + 4, v);
}

static void svg_ticks(FILE *f, const axis *ax, const axis *ay) {
  double st = nice_step(ax->hi - ax->lo, 8);
  for (double k = ceil(ax->lo / st); k * st <= ax->hi + 1e-9 * st; k++) svg_xtick(f, ax, k * st);
  if (!ay->log) {
    st = nice_step(ay->hi - ay->lo, 6);
    for (double k = ceil(ay->lo / st); k * st <= ay->hi + 1e-9 * st; k++) svg_ytick(f, ay, k * st);
    return;
  }
  static const double mant[] = {1, 2, 5};
  int subs = ay->hi - ay->lo <= 2 ? 3 : 1;
  for (double e = ay->lo; e <= ay->hi; e++)
    for (int m = 0; m < subs; m++) {
      double v = mant[m] * pow(10, e);
      if (log10(v) <= ay->hi + 1e-9) svg_ytick(f, ay, v);
    }
}

/* The training curve, averaged over buckets so the file stays small. */
static void svg_train(FILE *f, const run *r, const axis *ax, const axis *ay) {
  int64_t n = r->step - r->step0, k = (n + PLOT_POINTS - 1) / PLOT_POINTS;
  fputs("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"", f);
  for (int64_t i = 0; i < n; i += k) {
    double sum = 0;
    int64_t m = 0;
    for (; m < k && i + m < n; m++) sum += r->loss[i + m];
    double x = (double)(r->step0 + i + m); /* steps completed at the bucket's end */
    fprintf(f, "%.1f,%.1f ", ax_pos(ax, x, PL, SVG_W - PR), ax_pos(ay, sum / (double)m, SVG_H - PB, PT));
  }
  fputs("\"/>\n", f);
}

static void svg_heldout(FILE *f, const run *r, const axis *ax, const axis *ay) {
  fputs("<polyline fill=\"none\" stroke=\"#d62728\" stroke-width=\"1.5\" points=\"", f);
  for (int64_t i = 0; i < r->nho; i++)
    fprintf(f, "%.1f,%.1f ", ax_pos(ax, (double)r->ho_x[i], PL, SVG_W - PR),
            ax_pos(ay, r->ho_y[i], SVG_H - PB, PT));
  fputs("\"/>\n", f);
  for (int64_t i = 0; i < r->nho; i++)
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"#d62728\"/>\n",
            ax_pos(ax, (double)r->ho_x[i], PL, SVG_W - PR), ax_pos(ay, r->ho_y[i], SVG_H - PB, PT));
}

static void svg_legend(FILE *f) {
  int x = SVG_W - PR - 170, y = PT + 10;
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"160\" height=\"48\" fill=\"white\" "
             "stroke=\"#999\"/>\n", x, y);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#1f77b4\" "
             "stroke-width=\"2\"/>\n<text x=\"%d\" y=\"%d\">training loss</text>\n",
          x + 10, y + 16, x + 40, y + 16, x + 48, y + 20);
  fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#d62728\" "
             "stroke-width=\"2\"/>\n<circle cx=\"%d\" cy=\"%d\" r=\"2.5\" fill=\"#d62728\"/>\n"
             "<text x=\"%d\" y=\"%d\">held-out loss</text>\n",
          x + 10, y + 34, x + 40, y + 34, x + 25, y + 34, x + 48, y + 38);
}

/* Range of both curves; 0 when there is nothing to plot. */
static int plot_axes(const run *r, axis *ax, axis *ay) {
  double lo = INFINITY, hi = 0;
  for (int64_t i = 0; i < r->step - r->step0; i++) {
    if (r->loss[i] > 0 && r->loss[i] < lo) lo = r->loss[i];
    if (r->loss[i] > hi) hi = r->loss[i];
  }
  for (int64_t i = 0; i < r->nho; i++) {
    if (r->ho_y[i] > 0 && r->ho_y[i] < lo) lo = r->ho_y[i];
    if (r->ho_y[i] > hi) hi = r->ho_y[i];
  }
  if (!(hi > 0) || r->step == r->step0) return 0;
  ax->log = 0;
  ax->lo = (double)r->step0;
  ax->hi = (double)r->step;
  ay->log = hi / lo > 20;
  if (ay->log) {
    ay->lo = floor(log10(lo));
    ay->hi = ceil(log10(hi));
  } else {
    double st = nice_step(hi, 6);
    ay->lo = 0;
    ay->hi = ceil(hi * 1.02 / st) * st;
  }
  return 1;
}

static int write_plot(const run *r) {
  const char *path = r->o->plot;
  axis ax, ay;
  if (!plot_axes(r, &ax, &ay)) {
    errorf("--plot: no training steps ran, so '%s' was not written", path);
    return 0;
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    errorf("--plot: cannot write '%s': %s", path, strerror(errno));
    return EXIT_RUNTIME;
  }
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
             "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
             "font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
          SVG_W, SVG_H, SVG_W, SVG_H, SVG_W, SVG_H);
  fprintf(f, "<text x=\"%d\" y=\"26\" text-anchor=\"middle\" font-size=\"15\">" PROG ": ", SVG_W / 2);
  svg_text(f, r->taskname);
  fputs(", ", f);
  svg_text(f, r->config);
  fputs("</text>\n", f);
  svg_ticks(f, &ax, &ay);
  svg_train(f, r, &ax, &ay);
  svg_heldout(f, r, &ax, &ay);
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#333\"/>\n",
          PL, PT, SVG_W - PL - PR, SVG_H - PT - PB);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n",
          (PL + SVG_W - PR) / 2, SVG_H - 14);
  fprintf(f, "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">"
             "cross-entropy loss%s</text>\n", (PT + SVG_H - PB) / 2,
          ay.log ? " (log scale)" : "");
  svg_legend(f);
  fputs("</svg>\n", f);
  int bad = ferror(f);
  if (fclose(f) || bad) {
    errorf("--plot: cannot write '%s': %s", path, strerror(errno));
    return EXIT_RUNTIME;
  }
  return 0;
}

/* ---- summary ------------------------------------------------------------------------- */

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static void summary(run *r, int have_ho, float ho) {
  const opts *o = r->o;
  int64_t n = r->step - r->step0;
  rg_stats s;
  rg_stats_get(r->ctx, &s);
  char ranks[64] = "";
  if (r->world > 1)
    snprintf(ranks, sizeof ranks, ", %d ranks of batch %lld", r->world, (long long)o->batch);
  printf("%s: %s, GPT %s (%lld parameters) on %s%s\n", PROG, r->taskname, r->config,
         (long long)rg_gpt_param_count(r->gpt), rg_device_name(r->ctx), ranks);
  if (n > 0) {
    printf("trained steps %lld..%lld of %lld in %.1f s (+%.1f s evaluating): %.2f steps/s, "
           "%.0f tokens/s\n", (long long)r->step0, (long long)r->step, (long long)o->steps,
           r->t_train, r->t_eval, (double)n / r->t_train,
           (double)(n * o->batch * r->world * r->t.T) / r->t_train);
    printf("final loss %.9g at step %lld\n", (double)r->loss[n - 1], (long long)r->step);
  } else {
    printf("no training steps ran (the model is at step %lld of %lld)\n", (long long)r->step,
           (long long)o->steps);
  }
  if (have_ho && r->t.kind == TASK_TEXT)
    printf("held-out loss %.9g (%.3f bits/byte, %lld windows of %lld bytes)\n", (double)ho,
           (double)ho / log(2.0), (long long)r->t.ho_n, (long long)r->t.T);
  else if (have_ho)
    printf("held-out loss %.9g (answer digits of %lld problems)\n", (double)ho,
           (long long)r->t.ho_n);
  if (r->t.kind == TASK_ADD)
    printf("held-out accuracy %.2f%% (%lld of %lld exact answers, greedy decoding)\n",
           100.0 * (double)r->correct / (double)r->t.ev_n, (long long)r->correct,
           (long long)r->t.ev_n);
  printf("peak memory %.2f MiB (pass pool %.2f MiB + persistent pool %.2f MiB)\n",
         mib(s.pass_peak + s.persistent_peak), mib(s.pass_peak), mib(s.persistent_peak));
  if (n > 0)
    printf("host<->device per training step: %.0f B up in %.1f transfers, %.0f B down in "
           "%.1f transfers\n", (double)r->up.bytes / (double)n, (double)r->up.count / (double)n,
           (double)r->down.bytes / (double)n, (double)r->down.count / (double)n);
  printf("wall time %.1f s\n", now_s() - r->t_start);
  fflush(stdout);
}

/* ---- main ---------------------------------------------------------------------------- */

static void on_sigint(int sig) {
  (void)sig;
  g_interrupted = 1;
}

/* --distributed: joins the other ranks (after the model exists: rank 0's weights are
   copied to all). Only rank 0 stops on Ctrl-C, so that it finishes its step and saves;
   the others then fail at their next step. */
static int join_ranks(run *r) {
  rg_status st = rg_dist_init(r->ctx, NULL);
  r->rank = rg_dist_rank(r->ctx);
  r->world = rg_dist_world(r->ctx);
  if (r->world > 1)
    snprintf(g_who, sizeof g_who, PROG " (rank %d of %d)", r->rank, r->world);
  if (st != RG_OK)
    return rg_fail(r->ctx, st, st == RG_ERR_UNSUPPORTED
                                   ? "--distributed (rebuild with NCCL, or add --device cpu)"
                                   : "--distributed");
  if (r->rank) signal(SIGINT, SIG_IGN);
  return 0;
}

static int open_model(run *r) {
  const opts *o = r->o;
  rg_options ro = {0};
  ro.device = !strcmp(o->device, "cpu") ? RG_DEVICE_CPU
              : !strcmp(o->device, "cuda") ? RG_DEVICE_CUDA : RG_DEVICE_AUTO;
  ro.seed = o->seed;
  ro.threads = (int)o->threads;
  ro.quiet = 1; /* the device in use is on the progress line and in the summary */
  rg_status st = rg_open(&r->ctx, &ro);
  if (st != RG_OK) {
    errorf("cannot open device '%s': %s%s", o->device, rg_status_str(st),
           st == RG_ERR_UNSUPPORTED ? " (no CUDA in this build or machine; use --device cpu)" : "");
    return EXIT_RUNTIME;
  }
  if (rg_device_kind(r->ctx) == RG_DEVICE_CUDA && o->width / o->heads > 128) {
    errorf("--width %lld / --heads %lld is a head size of %lld; on a GPU it is at most 128 "
           "(use --heads %lld or more, or --device cpu)", (long long)o->width,
           (long long)o->heads, (long long)(o->width / o->heads),
           (long long)((o->width + 127) / 128));
    return EXIT_USAGE;
  }
  rg_gpt_config cfg = {r->t.vocab, r->t.T, o->layers, o->width, o->heads, 0.0f};
  r->gpt = rg_gpt_new(r->ctx, &cfg, NULL);
  if (!r->gpt) return rg_fail(r->ctx, rg_error(r->ctx), "cannot build the model");
  rg_adamw_options ao = {o->lr, 0.9f, 0.99f, 1e-8f, o->wd};
  r->opt = rg_optim_adamw(r->ctx, &ao);
  if (!r->opt) return rg_fail(r->ctx, rg_error(r->ctx), "cannot make the optimizer");
  return o->distributed ? join_ranks(r) : 0;
}

static int alloc_buffers(run *r) {
  const opts *o = r->o;
  int64_t n = o->steps > r->step ? o->steps - r->step : 0;
  r->idx = malloc(sizeof *r->idx * (size_t)(o->batch * r->t.T));
  r->tgt = malloc(sizeof *r->tgt * (size_t)(o->batch * r->t.T));
  r->loss = malloc(sizeof *r->loss * (size_t)(n ? n : 1));
  if (r->idx && r->tgt && r->loss) return 0;
  errorf("out of memory for a batch of %lld x %lld", (long long)o->batch, (long long)r->t.T);
  return EXIT_RUNTIME;
}

/* After training: held-out loss and accuracy, checkpoint, plot, summary, samples. */
static int finish(run *r) {
  const opts *o = r->o;
  if (r->rank) return 0; /* rank 0 reports (and saves) for every rank */
  int rc = o->save ? save_checkpoint(r) : 0;
  int have_ho = r->t.ho_n > 0;
  float ho = 0;
  if (!rc && have_ho && !(r->nho && r->ho_x[r->nho - 1] == r->step)) rc = record_heldout(r);
  if (have_ho && r->nho) ho = r->ho_y[r->nho - 1];
  if (!rc && r->t.kind == TASK_ADD) rc = add_accuracy(r);
  if (!rc && o->plot) rc = write_plot(r);
  if (!rc) summary(r, have_ho, ho);
  if (!rc && o->sample && r->t.kind == TASK_TEXT) {
    printf("--- sample: %lld bytes, temperature %g ---\n", (long long)o->sample,
           (double)o->temperature);
    rc = sample_text(r);
  }
  return rc;
}

static int run_all(opts *o, const unsigned char *given) {
  run r = {0};
  r.o = o;
  r.world = 1;
  r.t_start = now_s();
  r.tty = isatty(fileno(stderr));
  int rc = o->resume ? resume_options(o, given, &r.meta) : 0;
  if (!rc && check_opts(o) >= 0) rc = EXIT_USAGE;
  if (!rc && (o->text || !strcmp(r.meta.task, "text")))
    rc = task_text_init(&r.t, o, o->resume ? r.meta.vocab : NULL);
  else if (!rc)
    rc = task_add_init(&r.t, o);
  if (!rc) {
    config_string(o, &r.t, r.config, sizeof r.config);
    task_string(&r.t, r.taskname, sizeof r.taskname);
    rc = open_model(&r);
  }
  if (!rc && o->resume) rc = load_checkpoint(&r);
  if (!rc) rc = alloc_buffers(&r);
  if (!rc) rc = train(&r);
  if (!rc) rc = finish(&r);
  if (!rc && g_interrupted && r.step < (o->stop_at ? o->stop_at : o->steps)) rc = EXIT_INTERRUPTED;
  rg_optim_free(r.opt);
  rg_gpt_free(r.gpt);
  rg_status st = rg_close(r.ctx);
  if (st != RG_OK && !rc) {
    errorf("rg_close: %s", rg_status_str(st));
    rc = EXIT_RUNTIME;
  }
  task_free(&r.t);
  free(r.idx);
  free(r.tgt);
  free(r.loss);
  free(r.ho_x);
  free(r.ho_y);
  return rc;
}

int main(int argc, char **argv) {
  opts o;
  unsigned char given[NOPTS] = {0};
  int rc = parse_args(&o, given, argc, argv);
  if (rc >= 0) return rc;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends the program at once */
  sigaction(SIGINT, &sa, NULL);
  return run_all(&o, given);
}
