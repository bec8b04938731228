/*
 * main.c - resgrad-train's run: every path and the memory checked first, then the
 * training loop, the evaluation, the checkpoint, the plot and the summary.
 *
 * A training step is the design's step: one rg_step_begin, the batch uploaded, the loss
 * recorded, rg_backward, a clipped AdamW step and one rg_item, the step's only barrier.
 *
 * --distributed: one rank of a data-parallel run (resgrad-run -n N -- resgrad-train
 * --distributed ...; rg_dist_init). Rank r trains on rows [r*B, (r+1)*B) of the step's
 * batch of N*B rows, so N ranks of --batch B see the data of one rank of --batch N*B.
 * Only rank 0 evaluates, prints, plots and saves, and only rank 0 stops on Ctrl-C (the
 * others then fail at the next step, finding rank 0 gone).
 */
#define _POSIX_C_SOURCE 200809L
#include "train.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LR_FLOOR 0.1 /* cosine decay ends at this fraction of --lr */

/* Set by the SIGINT handler; the training loop stops after the step in flight. */
static volatile sig_atomic_t g_interrupted;
/* A progress line is on the terminal without its newline (errors end it first). */
static int g_line_open;
/* Who speaks in error lines: PROG, or "PROG (rank R of N)" in a distributed run. */
static char g_who[64] = PROG;

/* ---- messages ------------------------------------------------------------------------ */

void errorf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (g_line_open) fputc('\n', stderr);
  g_line_open = 0;
  fprintf(stderr, "%s: ", g_who);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int rg_fail(rg_ctx *ctx, rg_status st, const char *doing) {
  const char *msg = ctx ? rg_errmsg(ctx) : "";
  errorf("%s: %s", doing, *msg ? msg : rg_status_str(st));
  return EXIT_RUNTIME;
}

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the model and its steps ------------------------------------------------------------ */

/* The learning rate: linear warm-up over --warmup steps, then cosine decay to LR_FLOOR x
   --lr at --steps, computed on the device from the optimizer's step count (restored by
   rg_load, which keeps the schedule), so a step uploads no rate. A run of no more steps
   than its warm-up never leaves it (total is then only past the warm-up, as the schedule
   requires). */
int set_schedule(run *r) {
  const opts *o = r->o;
  rg_schedule q = {.kind = RG_SCHED_COSINE, .lr = o->lr, .min_lr = o->lr * (float)LR_FLOOR,
                   .warmup = o->warmup, .total = o->steps > o->warmup ? o->steps : o->warmup + 1};
  rg_status st = rg_optim_set_schedule(r->opt, &q);
  return st == RG_OK ? 0 : rg_fail(r->ctx, st, "the learning-rate schedule");
}

rg_tensor batch_loss(run *r, const int32_t *idx, const int32_t *tgt, int64_t B) {
  int64_t dims[2] = {B, r->t.T};
  rg_tensor x, y;
  if (!idx) { /* --tokens: the data's next batch, gathered while the last step ran */
    if (rg_data_batch(r->data, B, r->t.T, 1, &x, &y) != RG_OK) return RG_NONE;
  } else {
    x = rg_input(r->ctx, RG_I32, 2, dims, idx);
    y = rg_input(r->ctx, RG_I32, 2, dims, tgt);
  }
  return r->t.kind == TASK_ADD ? rg_gpt_loss_ignore(r->gpt, x, y, IGNORE_TOKEN)
                               : rg_gpt_loss(r->gpt, x, y);
}

rg_status train_step(run *r, const int32_t *idx, const int32_t *tgt, float *loss) {
  rg_ctx *ctx = r->ctx;
  rg_status st = rg_step_begin(ctx);
  rg_tensor l = RG_NONE;
  if (st == RG_OK) {
    l = batch_loss(r, idx, tgt, r->o->batch);
    st = rg_backward(ctx, l);
  }
  if (st == RG_OK && r->o->clip > 0) st = rg_clip_grad_norm(ctx, r->o->clip);
  if (st == RG_OK) st = rg_optim_step(r->opt);
  if (st == RG_OK) st = rg_zero_grad(ctx);
  if (st == RG_OK) st = rg_item(ctx, l, loss);
  return st == RG_OK ? rg_error(ctx) : st; /* a failure after the loss: the all-reduce */
}

rg_status heldout_loss(run *r, float *out) {
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

/* The first element of a parameter that is not finite: its index, or -1. */
static int64_t first_nonfinite(rg_ctx *ctx, rg_tensor p, float *buf, int64_t n, float *v) {
  if (rg_read(ctx, p, buf, sizeof *buf * (size_t)n) != RG_OK) return -1;
  for (int64_t i = 0; i < n; i++)
    if (!isfinite(buf[i])) return *v = buf[i], i;
  return -1;
}

/* Step `step` went non-finite (its loss, or its gradient norm, which made the optimizer
   skip the update). Names the first tensor that is: a parameter an earlier update broke,
   else the first op output of the step recomputed with every output checked
   (rg_set_check_finite), which the library names with its label. */
static int report_nonfinite(run *r, int64_t step, float loss, rg_status st) {
  rg_ctx *ctx = r->ctx;
  char what[1200] = "";
  rg_clear_error(ctx);
  int64_t most = 0;
  for (int i = 0; i < rg_param_count(ctx); i++)
    if (rg_numel(ctx, rg_param_at(ctx, i)) > most) most = rg_numel(ctx, rg_param_at(ctx, i));
  float *buf = malloc(sizeof *buf * (size_t)(most ? most : 1)), v = 0;
  for (int i = 0; buf && i < rg_param_count(ctx) && !*what; i++) {
    rg_tensor p = rg_param_at(ctx, i);
    int64_t k = first_nonfinite(ctx, p, buf, rg_numel(ctx, p), &v);
    if (k >= 0)
      snprintf(what, sizeof what, "parameter '%s' element %lld is %g", rg_name(ctx, p),
               (long long)k, (double)v);
  }
  free(buf);
  if (!*what) {
    rg_set_check_finite(ctx, 1);
    rg_clear_error(ctx);
    rg_status s = rg_step_begin(ctx);
    if (s == RG_OK && r->data) s = rg_data_seek(r->data, step); /* that step's batch again */
    if (s == RG_OK)
      s = rg_backward(ctx, batch_loss(r, r->data ? NULL : r->idx, r->tgt, r->o->batch));
    if (s == RG_OK) s = rg_sync(ctx);
    snprintf(what, sizeof what, "%s", s != RG_OK ? rg_errmsg(ctx)
             : "every output of the step's forward and backward is finite when recomputed; "
               "the gradient norm overflowed");
    rg_set_check_finite(ctx, 0);
  }
  errorf("training went non-finite at step %lld (%s); first non-finite tensor: %s; try a "
         "lower --lr%s%s", (long long)step,
         st == RG_ERR_NONFINITE ? "the gradient norm" : isnan(loss) ? "the loss is NaN"
                                                                    : "the loss is Inf",
         what, r->o->allow_nonfinite ? " (or resume from a finite checkpoint: "
                                        "--allow-nonfinite loaded this one)"
               : r->o->clip > 0 ? "" : " or --clip 1",
         r->o->save ? " (the checkpoint on disk was not touched)" : "");
  return EXIT_RUNTIME;
}

static int train(run *r) {
  const opts *o = r->o;
  int64_t stop = o->stop_at ? o->stop_at : o->steps;
  int64_t every = o->eval_every ? o->eval_every : (o->steps / 25 > 0 ? o->steps / 25 : 1);
  if (r->step >= stop) return 0;
  if ((r->t.kind == TASK_TEXT && !r->t.data) || (r->t.kind == TASK_TOKENS && !r->data)) {
    errorf("to train the model of --resume '%s' further, give its %s FILE", o->resume,
           r->t.kind == TASK_TEXT ? "--text" : "--tokens");
    return EXIT_USAGE;
  }
  int heldout = r->t.ho_n && !r->rank; /* rank 0 evaluates for all: same weights */
  int rc = heldout ? record_heldout(r) : 0;
  double t_loop = now_s();
  while (!rc && r->step < stop && !g_interrupted) {
    rg_stats a, b;
    float loss = 0;
    int64_t s = r->step;
    if (!r->data) make_batch(&r->t, o->seed, s, r->rank * o->batch, o->batch, r->idx, r->tgt);
    rg_stats_get(r->ctx, &a);
    double t0 = now_s();
    rg_status st = train_step(r, r->data ? NULL : r->idx, r->tgt, &loss);
    r->t_train += now_s() - t0;
    rg_stats_get(r->ctx, &b);
    if (st == RG_ERR_NONFINITE || (st == RG_OK && !isfinite(loss)))
      return report_nonfinite(r, s, loss, st);
    if (st != RG_OK) {
      char what[64];
      snprintf(what, sizeof what, "training step %lld", (long long)s);
      return rg_fail(r->ctx, st, what);
    }
    count_xfer(r, &a, &b);
    r->loss[r->step++ - r->step0] = loss;
    if (heldout && (r->step % every == 0 || r->step == stop)) rc = record_heldout(r);
    if (!rc && o->save_every && r->step % o->save_every == 0 && r->step < stop && !r->rank)
      rc = save_checkpoint(r);
    if (!r->rank) progress(r, loss, stop, t_loop);
  }
  progress_end();
  if (!rc && g_interrupted)
    errorf("interrupted after step %lld of %lld", (long long)r->step, (long long)o->steps);
  return rc;
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
  if (have_ho && r->t.kind == TASK_TOKENS)
    printf("held-out loss %.9g (%lld windows of %lld tokens of --val-tokens)\n", (double)ho,
           (long long)r->t.ho_n, (long long)r->t.T);
  else if (have_ho && r->t.kind == TASK_TEXT)
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

/* --trace's file: the path, or with --distributed "-rankR" before its extension (so each
   rank writes its own; the rank is RG_RANK's, which resgrad-run sets). */
static const char *trace_path(const opts *o, char *buf, size_t cap) {
  const char *rank = getenv("RG_RANK");
  if (!o->distributed || !rank || !*rank) return o->trace;
  const char *slash = strrchr(o->trace, '/'), *dot = strrchr(o->trace, '.');
  if (!dot || (slash && dot < slash)) dot = o->trace + strlen(o->trace);
  snprintf(buf, cap, "%.*s-rank%.8s%s", (int)(dot - o->trace), o->trace, rank, dot);
  return buf;
}

int open_model(run *r, int dry, size_t pass_budget, size_t persistent_budget) {
  const opts *o = r->o;
  rg_options ro = {0};
  ro.device = !strcmp(o->device, "cpu") ? RG_DEVICE_CPU
              : !strcmp(o->device, "cuda") ? RG_DEVICE_CUDA : RG_DEVICE_AUTO;
  ro.seed = o->seed;
  ro.threads = (int)o->threads;
  ro.quiet = 1; /* the device in use is on the progress line and in the summary */
  ro.dry_run = dry;
  ro.pass_budget = pass_budget;
  ro.persistent_budget = persistent_budget;
  ro.nonfinite_checkpoints = (int)o->allow_nonfinite;
  char trace[4096 + 32];
  if (o->trace && !dry) ro.trace_path = trace_path(o, trace, sizeof trace);
  rg_status st = rg_open(&r->ctx, &ro);
  if (st == RG_ERR_IO && ro.trace_path) {
    errorf("--trace '%s': cannot write the trace file there (RG_ERR_IO)", ro.trace_path);
    return EXIT_RUNTIME;
  }
  if (st != RG_OK) {
    errorf("--device %s: cannot open it: %s%s", o->device, rg_status_str(st),
           st == RG_ERR_UNSUPPORTED ? " (no CUDA in this build or machine; use --device cpu)" : "");
    return st == RG_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME;
  }
  if (rg_device_kind(r->ctx) == RG_DEVICE_CUDA && o->width / o->heads > 128) {
    errorf("--width %lld / --heads %lld is a head size of %lld; on a GPU it is at most 128 "
           "(use --heads %lld or more, or --device cpu)", (long long)o->width,
           (long long)o->heads, (long long)(o->width / o->heads),
           (long long)((o->width + 127) / 128));
    return EXIT_USAGE;
  }
  rg_gpt_config cfg = {.vocab = r->t.vocab, .block = o->positions ? o->positions : r->t.T,
                       .layers = o->layers, .width = o->width, .heads = o->heads,
                       .checkpoint = (int)o->checkpoint_activations};
  r->gpt = o->init_hf && !o->resume ? init_hf_model(r, dry) : rg_gpt_new(r->ctx, &cfg, NULL);
  if (!r->gpt) return rg_fail(r->ctx, rg_error(r->ctx), "cannot build the model");
  rg_adamw_options ao = {o->lr, 0.9f, 0.99f, 1e-8f, o->wd};
  r->opt = rg_optim_adamw(r->ctx, &ao);
  if (!r->opt) return rg_fail(r->ctx, rg_error(r->ctx), "cannot make the optimizer");
  int rc = set_schedule(r);
  return !rc && o->distributed && !dry ? join_ranks(r) : rc;
}

/* --tokens on the run's context: batch n of the file is step n's (rg_data_seek), for
   this rank's share of each step's rows; its worker gathers step n + 1's rows while
   step n runs. */
static int open_data(run *r) {
  const opts *o = r->o;
  rg_data_options d = {.vocab = o->vocab, .seed = o->seed, .world = r->world, .rank = r->rank};
  r->data = rg_data_open(r->ctx, o->tokens, &d);
  if (!r->data || rg_data_seek(r->data, r->step) != RG_OK)
    return rg_fail(r->ctx, rg_error(r->ctx), "--tokens");
  return 0;
}

int close_model(run *r) {
  rg_data_free(r->data);
  r->data = NULL;
  rg_optim_free(r->opt);
  rg_gpt_free(r->gpt);
  rg_status st = rg_close(r->ctx);
  r->opt = NULL, r->gpt = NULL, r->ctx = NULL;
  if (st == RG_OK) return 0;
  errorf("rg_close: %s", rg_status_str(st));
  return EXIT_RUNTIME;
}

/* The batch and the loss of each step this run trains (none: a resumed run that is done). */
static int alloc_buffers(run *r) {
  const opts *o = r->o;
  int64_t stop = o->stop_at ? o->stop_at : o->steps;
  int64_t n = stop > r->step ? stop - r->step : 0, rows = n ? o->batch : 1;
  r->idx = malloc(sizeof *r->idx * (size_t)(rows * r->t.T));
  r->tgt = malloc(sizeof *r->tgt * (size_t)(rows * r->t.T));
  r->loss = malloc(sizeof *r->loss * (size_t)(n ? n : 1));
  if (r->idx && r->tgt && r->loss) return 0;
  errorf("out of memory for a batch of %lld x %lld", (long long)o->batch, (long long)r->t.T);
  return EXIT_RUNTIME;
}

/* After training: checkpoint, held-out loss and accuracy, plot, summary, samples. */
static int finish(run *r) {
  const opts *o = r->o;
  if (r->rank) return 0; /* rank 0 reports (and saves) for every rank */
  int rc = o->save ? save_checkpoint(r) : 0;
  int have_ho = r->t.ho_n > 0;
  float ho = 0;
  if (!rc && have_ho && !(r->nho && r->ho_x[r->nho - 1] == r->step)) rc = record_heldout(r);
  if (have_ho && r->nho) ho = r->ho_y[r->nho - 1];
  if (!rc && have_ho && !isfinite(ho)) {
    errorf("the model's held-out loss is %g: its outputs are not finite; resume from an "
           "earlier checkpoint or train again", (double)ho);
    rc = EXIT_RUNTIME;
  }
  if (!rc && r->t.kind == TASK_ADD) rc = add_accuracy(r);
  if (!rc && o->plot) rc = write_plot(r);
  if (!rc) summary(r, have_ho, ho);
  if (!rc && o->prompt && r->t.kind == TASK_ADD) rc = add_prompt(r);
  if (!rc && o->sample && r->t.kind == TASK_TEXT) {
    printf("--- sample: %lld bytes, %s ---\n", (long long)o->sample,
           o->greedy || o->top_k == 1 ? "greedy" : "temperature, top-k, top-p as given");
    rc = sample_text(r);
  }
  return rc;
}

/* Everything the options and files can be checked for, before any work: the options,
   the paths, the checkpoint's metadata, the text, the prompt and the memory. */
static int prepare(run *r, size_t *pass_budget, size_t *persistent_budget) {
  opts *o = r->o;
  int rc = check_paths(o, &r->p);
  if (rc >= 0) return rc;
  rc = o->resume ? resume_options(o, r->given, &r->meta) : 0;
  if (!rc && o->init_hf && init_hf_options(o, r->given) >= 0) rc = EXIT_USAGE;
  int text = o->text || !strcmp(r->meta.task, "text");
  int tokens = o->tokens || !strcmp(r->meta.task, "tokens");
  if (!rc && check_opts(o, r->given, text, tokens) >= 0) rc = EXIT_USAGE;
  if (!rc && tokens) rc = task_tokens_init(&r->t, o);
  else if (!rc && text) rc = task_text_init(&r->t, o, o->resume ? r->meta.vocab : NULL);
  else if (!rc) rc = task_add_init(&r->t, o);
  if (rc) return rc;
  config_string(o, &r->t, r->config, sizeof r->config);
  task_string(&r->t, r->taskname, sizeof r->taskname);
  if (check_prompt(r) >= 0) return EXIT_USAGE;
  rc = plan_memory(r, pass_budget, persistent_budget);
  return rc >= 0 ? rc : 0;
}

static int run_all(opts *o, const unsigned char *given) {
  run r = {0};
  r.o = o;
  r.given = given;
  r.world = 1;
  r.t_start = now_s();
  r.tty = isatty(fileno(stderr));
  size_t pass_budget = 0, persistent_budget = 0;
  int rc = prepare(&r, &pass_budget, &persistent_budget);
  if (!rc) rc = open_model(&r, 0, pass_budget, persistent_budget);
  if (!rc && o->resume) rc = load_checkpoint(&r);
  if (!rc && o->tokens) rc = open_data(&r);
  if (!rc) rc = alloc_buffers(&r);
  if (!rc) rc = train(&r);
  if (!rc) rc = finish(&r);
  if (!rc && g_interrupted && r.step < (o->stop_at ? o->stop_at : o->steps)) rc = EXIT_INTERRUPTED;
  if (r.ctx && close_model(&r) && !rc) rc = EXIT_RUNTIME;
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
  unsigned char given[MAX_OPTS] = {0};
  int rc = parse_args(&o, given, argc, argv);
  if (rc >= 0) return rc;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends the program at once */
  sigaction(SIGINT, &sa, NULL);
  return run_all(&o, given);
}
