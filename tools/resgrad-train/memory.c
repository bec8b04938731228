/*
 * memory.c - a run that cannot fit is refused before it starts.
 *
 * The run's steps are recorded on a dry-run context (rg_options.dry_run: it allocates
 * and runs nothing, and its pools count the bytes a real context of the device would
 * hold), in the order the run records them: the held-out loss, training steps, the
 * held-out loss again, and the decoding or sampling forward. Its peaks are the estimate.
 * The estimate plus a slack must fit in what rg_device_memory says the device has (on the
 * CPU, also the program's own buffers), less a reserve for what the pools do not hold (the
 * device runtime, BLAS buffers, thread stacks). If it does not, the largest --batch that
 * fits is found by more dry runs (each takes milliseconds: nothing is computed). If it
 * does, the pools' budgets are the estimate plus the same slack, so a step that needs more
 * than estimated fails with RG_ERR_OOM and a message, before allocating, instead of being
 * killed by the system.
 */
#include "train.h"

#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

typedef struct need {
  size_t pass, persistent; /* budgets: pool peaks plus slack */
  size_t model;            /* the persistent pool's peak: parameters, gradients, AdamW */
  size_t total;            /* what must fit: reserved device bytes, slack, host buffers */
} need;

static size_t slack(size_t peak) { return peak / 16 + 8 * MIB; }

/* Host memory the program itself holds for a batch of B (on the CPU it is the device's). */
static size_t host_bytes(const run *r, int64_t B) {
  size_t n = 2 * sizeof(int32_t) * (size_t)B * (size_t)r->t.T; /* idx, tgt */
  n += sizeof(float) * (size_t)(r->o->stop_at ? r->o->stop_at : r->o->steps); /* losses */
  return n;
}

/* Whether the run trains at all (a resumed run may be done: then it only evaluates). */
static int trains(const run *r) {
  int64_t stop = r->o->stop_at ? r->o->stop_at : r->o->steps;
  return stop > (r->o->resume ? strtoll(r->meta.step, NULL, 10) : 0);
}

/* Records what a run of batch B records, on a dry-run context. Its uploads read no
   bytes (rg_options.dry_run), so one zeroed row stands for every batch. */
static int dry_run(const run *r, int64_t B, need *out, size_t *avail) {
  const int64_t T = r->t.T;
  opts o = *r->o;
  o.batch = B;
  run d = *r;
  d.o = &o;
  d.ctx = NULL, d.gpt = NULL, d.opt = NULL;
  int64_t n = r->t.kind == TASK_ADD ? (r->t.ev_n < EVAL_CHUNK ? r->t.ev_n : EVAL_CHUNK) : 1;
  int32_t *rows = calloc((size_t)(n * T), sizeof *rows); /* decoding's real buffers */
  int32_t *buf = calloc((size_t)(n * T), sizeof *buf);
  int32_t *ans = calloc((size_t)(n * (r->t.digits + 1)), sizeof *ans);
  int rc = rows && buf && ans ? open_model(&d, 1, 0, 0) : EXIT_RUNTIME;
  rg_status st = RG_OK;
  float x;
  if (!rows || !buf || !ans) errorf("out of memory sizing the run");
  if (!rc && r->t.ho_n) st = heldout_loss(&d, &x);
  for (int i = 0; !rc && st == RG_OK && i < 2 && trains(r); i++)
    st = train_step(&d, rows, rows, &x);
  if (!rc && st == RG_OK && r->t.ho_n) st = heldout_loss(&d, &x);
  if (!rc && st == RG_OK && r->t.kind == TASK_ADD) {
    st = add_decode(&d, rows, n, buf, ans);
  } else if (!rc && st == RG_OK && o.sample) { /* sampling: one row of the whole block */
    int64_t dims[2] = {1, T};
    st = rg_step_begin(d.ctx);
    rg_tensor y = rg_gpt_forward(d.gpt, rg_input(d.ctx, RG_I32, 2, dims, rows));
    if (st == RG_OK) st = rg_is_live(d.ctx, y) ? rg_sync(d.ctx) : rg_error(d.ctx);
  }
  size_t total = 0;
  if (!rc && st == RG_OK) st = rg_device_memory(d.ctx, avail, &total);
  if (!rc && st != RG_OK) rc = rg_fail(d.ctx, st, "sizing the run (a dry run of its steps)");
  if (!rc) {
    rg_stats s;
    rg_stats_get(d.ctx, &s);
    out->pass = s.pass_peak + slack(s.pass_peak);
    out->persistent = s.persistent_peak + slack(s.persistent_peak);
    out->model = s.persistent_peak;
    out->total = s.device_peak + slack(s.pass_peak) + slack(s.persistent_peak);
    if (rg_device_kind(d.ctx) == RG_DEVICE_CPU && trains(r)) out->total += host_bytes(r, B);
  }
  if (d.ctx && close_model(&d) && !rc) rc = EXIT_RUNTIME;
  free(rows), free(buf), free(ans);
  return rc;
}

static size_t reserve(size_t avail) { return 64 * MIB + avail / 32; }

static int fits(const need *n, size_t avail) {
  return avail > reserve(avail) && n->total <= avail - reserve(avail);
}

static void fmt_bytes(size_t b, char *out, size_t cap) {
  double x = (double)b;
  if (x >= 1024.0 * 1024 * 1024) snprintf(out, cap, "%.1f GiB", x / (1024.0 * 1024 * 1024));
  else if (x >= 1024.0 * 1024) snprintf(out, cap, "%.1f MiB", x / (1024.0 * 1024));
  else snprintf(out, cap, "%.1f KiB", x / 1024.0);
}

int plan_memory(run *r, size_t *pass_budget, size_t *persistent_budget) {
  need n;
  size_t avail = 0;
  int rc = dry_run(r, r->o->batch, &n, &avail);
  if (rc) return rc;
  if (fits(&n, avail)) {
    *pass_budget = n.pass;
    *persistent_budget = n.persistent;
    return -1;
  }
  int64_t lo = 0, hi = r->o->batch; /* batch lo fits (0: none found yet), hi does not */
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    need m;
    size_t a;
    if ((rc = dry_run(r, mid, &m, &a))) return rc;
    if (fits(&m, a)) lo = mid;
    else hi = mid;
  }
  char want[32], have[32], keep[32], model[32], fit[96];
  fmt_bytes(n.total, want, sizeof want);
  fmt_bytes(avail, have, sizeof have);
  fmt_bytes(reserve(avail), keep, sizeof keep);
  fmt_bytes(n.model, model, sizeof model);
  if (lo) snprintf(fit, sizeof fit, "the largest --batch that fits is %lld", (long long)lo);
  else snprintf(fit, sizeof fit, "not even --batch 1 fits: make the model smaller "
                "(--width, --layers)");
  errorf("--batch %lld needs about %s of memory (%s of it for the model and optimizer) but "
         "the device has %s available, of which %s stays in reserve; %s",
         (long long)r->o->batch, want, model, have, keep, fit);
  return EXIT_USAGE;
}
