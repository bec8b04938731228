/*
 * dist_common.h - what the data-parallel tests share (test_dist.c on the CPU,
 * test_nccl.c and test_nccl2.c on GPUs): the model and its data, a training step, and
 * run_ranks, which runs each rank in a child process.
 *
 * Every rank is a child process forked by the test; the parent does no resgrad work
 * itself (it forks while it is single-threaded, and before anything touched CUDA). A
 * child writes what it saw (status, message, losses, weights, times) to a file the
 * parent reads. Children end themselves with alarm(), and the parent SIGKILLs whatever
 * is left at a deadline, so a hang fails the test instead of stalling it. Rank 0 listens
 * on a port the kernel just called free (free_port, tools/free_port.h).
 *
 * The model: a 4-16-16-3 tanh MLP (6 parameters, 403 weights), AdamW, gradient norm
 * clipped to 1, cross-entropy on a batch that is a pure function of (step, row).
 * g_device picks the contexts' device (the CPU unless a test says otherwise).
 */
#ifndef RG_TESTS_DIST_COMMON_H
#define RG_TESTS_DIST_COMMON_H

#include "../tools/free_port.h"
#include "common.h"
#include "core/internal.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEPS 20
#define B 8             /* rows per rank per step */
#define NW 403          /* weights of the MLP */
#define MAXR 3          /* ranks at most */
#define TOL 1e-4        /* relative, against one rank with the whole batch */
#define CHILD_ALARM 60  /* seconds a child may live */

static const char *const names[6] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias",
                                     "fc3.weight", "fc3.bias"};
static const int64_t shapes[6][2] = {{16, 4}, {16}, {16, 16}, {16}, {3, 16}, {3}};

/* What a child reports. */
typedef struct result {
  int status;               /* rg_status of what was being checked */
  char msg[1024];           /* rg_errmsg then */
  float loss[STEPS];
  float w[NW];
  float w_before[NW];       /* (c): weights after the last complete step */
  double seconds;           /* (c), (d): how long the failing call took */
  int rank, world, aux[8];  /* aux: per-case extras */
} result;

typedef struct mlp { rg_tensor p[6]; rg_optim *opt; } mlp;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the model and its data --------------------------------------------------------- */

static rg_device g_device = RG_DEVICE_CPU; /* what the ranks' contexts open */

static rg_ctx *open_seeded(void) {
  rg_options o = {.seed = 7, .threads = 1};
  if (g_device == RG_DEVICE_CPU) return open_cpu_opts(o);
  rg_ctx *ctx = NULL;
  o.device = g_device;
  o.quiet = 1;
  rg_status st = rg_open(&ctx, &o);
  CHECK(st == RG_OK, "rg_open -> %s: %s", rg_status_str(st), ctx ? rg_errmsg(ctx) : "");
  return st == RG_OK ? ctx : NULL;
}

/* A different model when wide (for the mismatch check): fc1.weight [16, 5]. */
static int build(rg_ctx *ctx, mlp *m, int wide) {
  for (int i = 0; i < 6; i++) {
    int64_t d[2] = {shapes[i][0], shapes[i][1] + (wide && i == 0)};
    rg_init init = i % 2 ? (rg_init){RG_INIT_ZEROS, 0, 0} : (rg_init){RG_INIT_NORMAL, 0.5f, 0};
    m->p[i] = rg_param(ctx, names[i], RG_F32, i % 2 ? 1 : 2, d, init);
  }
  m->opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 0.02f});
  return m->opt != NULL;
}

static float hashf(uint64_t x) { /* in [-1, 1) */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return (float)((x ^ (x >> 31)) >> 40) / (float)(1 << 23) - 1.0f;
}

/* Rows [first, first + n) of the batch of a step. */
static void batch(int step, int first, int n, float *x, int32_t *y) {
  for (int i = 0; i < n; i++) {
    uint64_t row = (uint64_t)step * 1000 + (uint64_t)(first + i);
    for (int j = 0; j < 4; j++) x[i * 4 + j] = hashf(row * 4 + (uint64_t)j);
    y[i] = (x[i * 4] + x[i * 4 + 1] > 0) + (x[i * 4 + 2] > 0.3f);
  }
}

static rg_tensor forward_loss(rg_ctx *ctx, const mlp *m, int step, int first, int n) {
  float x[MAXR * B * 4];
  int32_t y[MAXR * B];
  batch(step, first, n, x, y);
  rg_tensor h = rg_input(ctx, RG_F32, 2, (int64_t[]){n, 4}, x);
  h = rg_tanh(ctx, rg_linear(ctx, h, m->p[0], m->p[1]));
  h = rg_tanh(ctx, rg_linear(ctx, h, m->p[2], m->p[3]));
  h = rg_linear(ctx, h, m->p[4], m->p[5]);
  return rg_cross_entropy(ctx, h, rg_input(ctx, RG_I32, 1, (int64_t[]){n}, y));
}

/* One training step on rows [first, first + n); the loss into *loss. */
static rg_status step(rg_ctx *ctx, const mlp *m, int s, int first, int n, float *loss) {
  rg_status st = rg_step_begin(ctx);
  rg_tensor l = forward_loss(ctx, m, s, first, n);
  if (st == RG_OK) st = rg_backward(ctx, l);
  if (st == RG_OK) st = rg_clip_grad_norm(ctx, 1.0f);
  if (st == RG_OK) st = rg_optim_step(m->opt);
  if (st == RG_OK) st = rg_zero_grad(ctx);
  if (st == RG_OK) st = rg_item(ctx, l, loss);
  return st == RG_OK ? rg_error(ctx) : st; /* a failure after the loss (the all-reduce) */
}

static rg_status read_weights(rg_ctx *ctx, const mlp *m, float *w) {
  rg_status st = RG_OK;
  for (int i = 0, off = 0; i < 6 && st == RG_OK; off += (int)rg_numel(ctx, m->p[i++]))
    st = rg_read(ctx, m->p[i], w + off, sizeof(float) * (size_t)rg_numel(ctx, m->p[i]));
  return st;
}

/* STEPS steps on rows [first, first + n) of each batch, into r. */
static void train(rg_ctx *ctx, const mlp *m, int first, int n, result *r) {
  r->status = RG_OK;
  for (int s = 0; s < STEPS && r->status == RG_OK; s++)
    r->status = step(ctx, m, s, first, n, &r->loss[s]);
  if (r->status == RG_OK) r->status = read_weights(ctx, m, r->w);
  if (r->status != RG_OK) snprintf(r->msg, sizeof r->msg, "%s", rg_errmsg(ctx));
}

static void keep_error(rg_ctx *ctx, result *r, rg_status st) {
  r->status = st;
  snprintf(r->msg, sizeof r->msg, "%s", rg_errmsg(ctx));
}

/* ---- running ranks as child processes ------------------------------------------------ */

typedef void (*rank_fn)(int rank, int world, int port, result *r);

/* Runs fn as ranks 0..world-1 in child processes and collects their results (a rank
   that wrote none, having exited on purpose with status 3, gets status 1). Rank `linger` (or -1) is
   expected to wait forever: it is killed once the others are done. Returns 0 if every
   child ended within limit seconds, else kills them all and fails a check. */
static int run_ranks(const char *tag, int world, rank_fn fn, int linger, double limit,
                     result *res) {
  int port = free_port();
  CHECK(port > 0, "no free port: %s", strerror(errno));
  pid_t pid[MAXR];
  char path[MAXR][64];
  fflush(NULL);
  for (int r = 0; r < world; r++) {
    snprintf(path[r], sizeof path[r], "dist_%s_%d.bin", tag, r);
    remove(path[r]);
    pid[r] = fork();
    if (pid[r] == 0) {
      test_failures_ = 0; /* the child's own checks */
      alarm(CHILD_ALARM);
      result *out = calloc(1, sizeof *out);
      if (!out) _exit(2);
      out->rank = r;
      out->world = world;
      fn(r, world, port, out);
      FILE *f = fopen(path[r], "wb");
      int ok = f && fwrite(out, sizeof *out, 1, f) == 1;
      if (f) ok = !fclose(f) && ok;
      free(out);
      exit(ok && !failed() ? 0 : 1);
    }
    CHECK(pid[r] > 0, "fork: %s", strerror(errno));
    if (pid[r] < 0) world = r;
  }
  double deadline = now_s() + limit;
  int left = world, ok = 1;
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < world; r++)
        if (pid[r] == p) {
          pid[r] = 0;
          left--;
          int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
          CHECK(code == 0 || code == 3 || r == linger, "%s: rank %d ended with status 0x%x "
                "(a failed check prints above)", tag, r, status);
        }
      continue;
    }
    int others = left - (linger >= 0 && pid[linger] > 0);
    if (!others && linger >= 0 && pid[linger] > 0) kill(pid[linger], SIGKILL);
    if (now_s() > deadline) {
      CHECK(0, "%s: ranks still running after %g s: killed", tag, limit);
      for (int r = 0; r < world; r++)
        if (pid[r] > 0) kill(pid[r], SIGKILL);
      ok = 0;
      deadline = now_s() + 60;
    }
    struct timespec tick = {0, 5 * 1000000L};
    nanosleep(&tick, NULL);
  }
  for (int r = 0; r < world; r++) {
    FILE *f = fopen(path[r], "rb");
    memset(&res[r], 0, sizeof res[r]);
    res[r].status = 1; /* none written */
    if (f) {
      CHECK(fread(&res[r], sizeof res[r], 1, f) == 1, "%s: short result file", path[r]);
      fclose(f);
    }
    remove(path[r]);
  }
  return ok;
}


/* ALLREDUCE nodes recorded in this pass generation. */
static int count_allreduce(rg_ctx *ctx) {
  int n = 0;
  for (size_t k = 0; k < ctx->n_nodes; k++) n += ctx->nodes[k].op == RG_OP_ALLREDUCE;
  return n;
}

/* ---- shared cases ---------------------------------------------------------------------- */

/* (A rank function.) aux[0] = CUDA GPUs usable here (0, 1, or 2 for two or more),
   aux[1] = 1 if the build has NCCL. A child asks, so the test never touches CUDA. */
static inline void gpu_probe(int rank, int world, int port, result *r) {
  (void)rank, (void)world, (void)port;
  for (int i = 0; i < 2; i++) {
    rg_ctx *c = NULL;
    rg_options o = {.device = RG_DEVICE_CUDA, .device_index = i, .quiet = 1};
    if (rg_open(&c, &o) != RG_OK) break;
    r->aux[0]++;
    r->aux[1] = c->be->dist_open != NULL;
    rg_close(c);
  }
  r->status = RG_OK;
}

#define DIE_AFTER 5 /* steps the failing rank of outlive() completes */

/* One of two joined ranks, with m built in ctx: after DIE_AFTER steps rank victim exits
   as a crash would (no cleanup, no result) or, with hang, stops until it is killed. The
   other rank keeps in r its weights before its next step, that step's status, message
   and duration, its weights after it, in aux[0] the status of the step after that and
   in aux[1] whether that one failed with the first failure's message. */
static inline void outlive(rg_ctx *ctx, const mlp *m, int rank, int victim, int hang,
                           result *r) {
  float l;
  for (int s = 0; s < DIE_AFTER; s++) CHECK_ST(ctx, step(ctx, m, s, rank * B, B, &l), RG_OK);
  if (rank == victim) {
    if (hang) pause();
    _exit(3);
  }
  CHECK_ST(ctx, read_weights(ctx, m, r->w_before), RG_OK);
  double t0 = now_s();
  r->status = step(ctx, m, DIE_AFTER, rank * B, B, &l);
  r->seconds = now_s() - t0;
  snprintf(r->msg, sizeof r->msg, "%s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, read_weights(ctx, m, r->w), RG_OK);
  r->aux[0] = step(ctx, m, DIE_AFTER + 1, rank * B, B, &l); /* fails at once */
  r->aux[1] = msg_has(ctx, "an earlier failure closed this rank's connections");
}

/* Runs fn (which calls outlive) as two ranks, rank who failing, and checks what the other
   saw: RG_ERR_IO with want in a message that names the all-reduce; after a hang, not before the timeout (s) and not much after;
   after an exit, within dead_within seconds; its weights untouched by the failed step,
   and the next step failing with the first failure's message. */
static inline void outlive_case(const char *tag, rank_fn fn, int who, int hang,
                                double timeout, const char *want, double dead_within) {
  result res[2];
  if (!run_ranks(tag, 2, fn, hang ? who : -1, 120, res)) return;
  const result *r = &res[1 - who];
  CHECK(r->status == RG_ERR_IO && strstr(r->msg, want), "rank %d after rank %d %s: %s "
        "(want RG_ERR_IO and \"%s\"): %s", 1 - who, who, hang ? "hung" : "exited",
        rg_status_str(r->status), want, r->msg);
  CHECK(strstr(r->msg, "rg_dist_allreduce") != NULL, "the message does not name the "
        "all-reduce: %s", r->msg);
  if (hang)
    CHECK(r->seconds >= timeout - 0.1 && r->seconds < timeout + 13, "a hung peer failed the "
          "step after %.2f s with a %g s timeout", r->seconds, timeout);
  else
    CHECK(r->seconds < dead_within, "a dead peer failed the step after %.2f s (want less "
          "than %g s)", r->seconds, dead_within);
  CHECK(!memcmp(r->w, r->w_before, sizeof r->w), "the failed step changed rank %d's weights",
        1 - who);
  CHECK(r->aux[0] == RG_ERR_IO && r->aux[1], "the step after the failure: %s, message from "
        "the first failure: %d", rg_status_str(r->aux[0]), r->aux[1]);
  printf("rank %d %s: rank %d failed after %.3f s: %s\n", who, hang ? "hung" : "exited",
         1 - who, r->seconds, r->msg);
}

#endif
