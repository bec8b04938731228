/*
 * train.h - what the files of resgrad-train share: options, the task, the run.
 *
 * resgrad-train trains a small GPT with nothing but resgrad.h and resgrad_nn.h and says
 * what it learned (docs/resgrad-train.md is its manual). Files:
 *   main.c     the run: checks, memory plan, training loop, summary
 *   options.c  the option table, parsing, --help, the checks of combinations
 *   paths.c    every path resolved and checked before any work; atomic file writes
 *   task.c     the addition, text and token-file tasks: batches, held-out sets,
 *              vocabularies
 *   ckpt.c     checkpoint metadata (read before the model exists), save and load
 *   memory.c   a dry run of the step that says whether the run fits, before it starts
 *   init_hf.c  --init-hf: the shape of a Hugging Face GPT-2 to fine-tune, and its weights
 *   decode.c   greedy answers (addition), sampling (text: temperature, top-k, top-p)
 *   plot.c     the SVG of the loss curves
 *
 * Invariants:
 *  - the batch of step s is a pure function of (seed, s, rank) and the learning rate of
 *    step s a pure function of (s, --steps, --warmup, --lr), computed on the device from
 *    the optimizer's step count (rg_optim_set_schedule); the optimizer state travels
 *    in the checkpoint. So N steps + --save + --resume for the rest gives the same losses,
 *    bit for bit, as one uninterrupted run (tests/test_train.c checks it).
 *  - evaluation never changes what training computes (no dropout, no shared RNG), so
 *    --eval-every changes the plot but not the losses.
 *  - nothing is written, allocated or trained before every path is checked (paths.c):
 *    no output may be the same file as an input or another output.
 *  - errors print one line on stderr. Exit codes: 0 done, 1 a failure while running,
 *    2 a usage error (options, or the files they name, caught before any work),
 *    130 interrupted (Ctrl-C: the step in flight finishes, --save still writes).
 */
#ifndef RESGRAD_TRAIN_H
#define RESGRAD_TRAIN_H

#include <resgrad.h>
#include <resgrad_nn.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

#define PROG "resgrad-train"
#define IGNORE_TOKEN (-1) /* targets the loss skips (the question part of a problem) */

/* ---- options (options.c) ---------------------------------------------------------------- */

typedef struct opts {
  const char *text, *tokens, *val_tokens, *device, *save, *resume, *plot, *trace, *prompt;
  const char *init_hf;
  int64_t vocab, digits, block, positions, layers, width, heads;
  int64_t steps, stop_at, batch, warmup, threads, eval, eval_every, log_every, sample;
  int64_t save_every, top_k;
  float lr, wd, clip, temperature, top_p;
  uint64_t seed;
  int64_t distributed, greedy, allow_nonfinite, checkpoint_activations, help;
} opts;

typedef enum opt_type { OPT_INT, OPT_REAL, OPT_U64, OPT_STR, OPT_FLAG } opt_type;
typedef struct opt_row {
  const char *name, *arg, *def, *help;
  opt_type type;
  size_t off;
  double lo, hi; /* inclusive range of a number */
} opt_row;
extern const opt_row OPTS[];
extern const int NOPTS;
enum { MAX_OPTS = 64 }; /* size of the given[] flags, one per option */

/* The row of option "name" (len bytes), or NULL. */
const opt_row *opt_find(const char *name, size_t len);
/* Parses v into row r's field of o. Returns "" or why v is not a valid value. */
const char *opt_set(opts *o, const opt_row *r, const char *v, char *why, size_t cap);
/* Parses argv into o, noting in given[] which options were given. Returns -1 to go on,
   else the exit code (0 after --help). */
int parse_args(opts *o, unsigned char *given, int argc, char **argv);
/* Checks what single options cannot: combinations. Returns -1 or EXIT_USAGE. */
int check_opts(const opts *o, const unsigned char *given, int text_task, int tokens_task);
int given_opt(const unsigned char *given, const char *name);

/* ---- messages (main.c) ------------------------------------------------------------------ */

void errorf(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
/* A failed resgrad call: one line with what we were doing and the library's message;
   returns EXIT_RUNTIME. */
int rg_fail(rg_ctx *ctx, rg_status st, const char *doing);
double now_s(void);

/* ---- paths (paths.c) -------------------------------------------------------------------- */

/* Resolves and checks every input and output path of o (see train.h's invariants):
   -1 when all is well, else EXIT_USAGE after one line naming the options and the file.
   Fills the resolved output paths: writes go to the file a symlink names. */
typedef struct paths { char save[4096], plot[4096]; } paths;
int check_paths(const opts *o, paths *out);
/* Writes a file atomically with write(f, user): a regular file (or a new one) through a
   temporary file in its directory, flushed, synced and renamed over it, so a failure at
   any point leaves the old file as it was; anything else (/dev/stdout, a FIFO) directly.
   opt names the option in messages. Returns 0 or EXIT_RUNTIME after saying why. */
int write_atomic(const char *path, const char *opt, void (*write)(FILE *f, const void *user),
                 const void *user);

/* ---- random numbers (task.c): pure functions of (seed, stream, index) ------------------- */

enum { STREAM_TRAIN = 1, STREAM_EVAL, STREAM_SAMPLE };
uint64_t mix64(uint64_t z);
uint64_t rng_next(uint64_t *s);
double rng_uniform(uint64_t *s);
uint64_t stream_seed(uint64_t seed, int stream, int64_t index);

/* ---- tasks (task.c) --------------------------------------------------------------------- */

typedef enum task_kind { TASK_ADD, TASK_TEXT, TASK_TOKENS } task_kind;

typedef struct task {
  task_kind kind;
  int digits;
  int64_t vocab, T;           /* T: the model's block = the training sequence length */
  uint64_t range;             /* addition: operands are in [0, range) */
  unsigned char byte_of[256]; /* text: token -> byte */
  int tok_of[256];            /* text: byte -> token, -1 if absent */
  int32_t *data;              /* text: the file as tokens; NULL when only sampling */
  int64_t ndata, ntrain;      /* [0, ntrain) trains, [ntrain, ndata) is held out */
  int32_t *ho_idx, *ho_tgt;   /* held-out loss batch [ho_n, T] */
  int64_t ho_n;
  uint64_t *ev_a, *ev_b;      /* addition: held-out problems for accuracy */
  int64_t ev_n;
  int64_t ntok;               /* tokens: tokens in --tokens (0: not given) */
} task;

void task_free(task *t);
int task_add_init(task *t, const opts *o);
/* Text: the vocabulary from a checkpoint's hex string (when resuming) or from the bytes
   of --text (FILE, or standard input for "-"). */
int task_text_init(task *t, const opts *o, const char *ckpt_vocab);
/* Tokens: checks --tokens and --val-tokens (rg_data_open on a CPU context: format, size,
   every token below --vocab) and reads the held-out rows from the start of
   --val-tokens. */
int task_tokens_init(task *t, const opts *o);
void add_encode(int D, uint64_t a, uint64_t b, int32_t *seq);
void add_row(const task *t, uint64_t a, uint64_t b, int32_t *idx, int32_t *tgt);
/* Rows [first, first + B) of the batch of a step, a pure function of (seed, step). */
void make_batch(const task *t, uint64_t seed, int64_t step, int64_t first, int64_t B,
                int32_t *idx, int32_t *tgt);
void vocab_to_hex(const task *t, char *out);
int hexval(char c);

/* ---- checkpoints (ckpt.c) --------------------------------------------------------------- */

/* What resgrad-train stores besides the tensors. */
typedef struct ckpt_meta {
  char config[256], task[64], run[256], step[32], vocab[1024];
} ckpt_meta;

/* --resume: reads the file's metadata and fills the options not given from it. Returns
   0, or an exit code after saying why. */
int resume_options(opts *o, const unsigned char *given, ckpt_meta *m);
void config_string(const opts *o, const task *t, char *out, size_t cap);
void task_string(const task *t, char *out, size_t cap);

/* ---- the run (main.c) ------------------------------------------------------------------- */

typedef struct run {
  opts *o;
  const unsigned char *given;
  paths p;              /* resolved output paths */
  task t;
  ckpt_meta meta;       /* the --resume file's */
  rg_ctx *ctx;
  rg_gpt *gpt;
  rg_optim *opt;
  rg_data *data;        /* tokens: --tokens, batch n = step n (rg_data_seek) */
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

int save_checkpoint(run *r);
int load_checkpoint(run *r);

/* Opens r->ctx (dry: a dry run of the device, see memory.c) with the model and its
   optimizer; budgets 0 = none. */
int open_model(run *r, int dry, size_t pass_budget, size_t persistent_budget);
/* Frees the model and closes the context: 0, or EXIT_RUNTIME after saying why. */
int close_model(run *r);
/* Sets the optimizer's learning-rate schedule from --lr, --warmup and --steps. */
int set_schedule(run *r);
/* Records one training step on rows idx, tgt [batch, T] (NULL: the next batch of
   r->data) and reads its loss (the step's one barrier). */
rg_status train_step(run *r, const int32_t *idx, const int32_t *tgt, float *loss);
/* Loss on the held-out batch, in evaluation mode. */
rg_status heldout_loss(run *r, float *out);
rg_tensor batch_loss(run *r, const int32_t *idx, const int32_t *tgt, int64_t B);

/* ---- fine-tuning (init_hf.c) ------------------------------------------------------------ */

/* --init-hf: checks the options that go with it and takes the model's shape (--layers,
   --width, --heads, --positions, and --vocab when not given) from the checkpoint, read on
   a dry-run context. Returns -1 to go on, else EXIT_USAGE after one line saying why. */
int init_hf_options(opts *o, const unsigned char *given);
/* --init-hf's file: PATH, or PATH/model.safetensors for a folder (a static buffer). */
const char *init_hf_file(const char *path);
/* The --init-hf model on r->ctx (its weights; a dry-run context gets rg_gpt_new's model
   of the same shape, the same parameters). NULL with the sticky error set. */
rg_gpt *init_hf_model(run *r, int dry);

/* ---- memory (memory.c) ------------------------------------------------------------------ */

/* Sizes the run with dry runs of its steps before anything is allocated: refuses one that
   cannot fit in what the device has (EXIT_USAGE, naming the estimate, the limit and the
   largest --batch that fits), else sets the pools' budgets. Returns -1 to go on. */
int plan_memory(run *r, size_t *pass_budget, size_t *persistent_budget);

/* ---- decoding (decode.c) ---------------------------------------------------------------- */

#define EVAL_CHUNK 256 /* held-out problems decoded per forward */
/* Greedy answers of n problems whose rows [n, T] hold the question. ans: [n, D+1]. */
rg_status add_decode(run *r, int32_t *rows, int64_t n, int32_t *buf, int32_t *ans);
int add_accuracy(run *r);
/* --prompt: -1 when the model can read it, else EXIT_USAGE after saying why. */
int check_prompt(const run *r);
int add_prompt(run *r);
int sample_text(run *r);

/* ---- plot (plot.c) ---------------------------------------------------------------------- */

int write_plot(const run *r);

#endif
