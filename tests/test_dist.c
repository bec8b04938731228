/*
 * test_dist.c - data-parallel training (rg_dist_init) across processes, on the CPU.
 *
 * The ranks are child processes; dist_common.h has the model, its data and run_ranks.
 *
 * What is checked:
 *  (a) one rank, from rg_dist_options and from the environment, gives losses and weights
 *      bit-identical to a context without rg_dist_init, and records no all-reduce;
 *  (b) 2 and 3 ranks of batch B (rank r takes rows [rB, (r+1)B) of the step's batch)
 *      follow the loss of one rank of batch 2B / 3B within a relative 1e-4 at each of
 *      20 steps (the mean over the ranks' losses; measured: about 1e-7), the weights
 *      end within 1e-4 of it, and bit-identical on every rank. With bucket_bytes 1 each
 *      gradient gets its own ALLREDUCE node, after every ACCUM into it, the first before
 *      the ACCUMs of the first layer (issued as soon as complete, not at the end); with
 *      the default size one node holds all six. rg_save writes only on rank 0;
 *  (c) a rank that exits mid-run (rank 1, then rank 0) makes the other's next step fail
 *      with RG_ERR_IO naming it, long before the timeout (20 s), with its weights those
 *      of the last complete step; a rank that stops without exiting makes the other fail
 *      after the timeout (2 s), not before; later steps fail at once with the message;
 *  (d) settings and rendezvous errors: missing and malformed RG_WORLD_SIZE, RG_RANK,
 *      RG_RENDEZVOUS, RG_DIST_TIMEOUT and options (MISUSE, naming them), no parameters
 *      yet, a second rg_dist_init, rank 0 alone and rank 1 alone (IO after the timeout,
 *      naming the missing rank), two ranks with different models or buckets (MISUSE on
 *      rank 0 naming rank 1, IO on rank 1); after each the context works and is not
 *      distributed;
 *  (e) resgrad-run: a failing rank makes it exit with that rank's status, naming it, and
 *      stop the others within its grace period; every rank gets its environment.
 */
#define _POSIX_C_SOURCE 200809L

#include "dist_common.h"

/* A context with the model (rank 1's differs when wide) that joined the ranks; NULL,
   with r's status and message set and the context closed, if any of that failed. */
static rg_ctx *join(int rank, int world, int port, double timeout, size_t bucket, int wide,
                    mlp *m, result *r) {
  char rv[64];
  snprintf(rv, sizeof rv, "tcp:127.0.0.1:%d", port);
  rg_dist_options o = {world, rank, rv, timeout, bucket};
  rg_ctx *ctx = open_seeded();
  if (!ctx) return NULL;
  r->status = build(ctx, m, wide && rank == 1) ? rg_dist_init(ctx, &o) : rg_error(ctx);
  if (r->status == RG_OK) return ctx;
  keep_error(ctx, r, r->status);
  rg_close(ctx);
  return NULL;
}

/* ---- (a) one rank ------------------------------------------------------------------- */

/* aux[0]: all-reduce nodes of the distributed run; results: r = plain, and the two
   world-1 runs' losses and weights compared here (aux[1], aux[2] = 1 if bit-identical). */
static void one_rank(int rank, int world, int port, result *r) {
  (void)rank, (void)world, (void)port;
  result *d = calloc(1, sizeof *d);
  mlp m;
  rg_ctx *ctx = open_seeded();
  if (!d || !ctx || !build(ctx, &m, 0)) return;
  train(ctx, &m, 0, 2 * B, r);
  rg_close(ctx);
  for (int how = 0; how < 2; how++) {
    ctx = open_seeded();
    if (!ctx || !build(ctx, &m, 0)) break;
    rg_dist_options o = {.world_size = 1};
    if (how) {
      setenv("RG_WORLD_SIZE", "1", 1);
      setenv("RG_RANK", "0", 1);
      unsetenv("RG_RENDEZVOUS");
    }
    CHECK_ST(ctx, rg_dist_init(ctx, how ? NULL : &o), RG_OK);
    CHECK(rg_dist_rank(ctx) == 0 && rg_dist_world(ctx) == 1, "world-1 rank %d of %d",
          rg_dist_rank(ctx), rg_dist_world(ctx));
    float l;
    CHECK_ST(ctx, step(ctx, &m, 0, 0, 2 * B, &l), RG_OK);
    rg_tensor loss = forward_loss(ctx, &m, 0, 0, 2 * B); /* a backward left queued */
    CHECK_ST(ctx, rg_backward(ctx, loss), RG_OK);
    r->aux[0] += count_allreduce(ctx);
    rg_close(ctx);
    ctx = open_seeded(); /* again from the start, for the comparison */
    if (!ctx || !build(ctx, &m, 0)) break;
    CHECK_ST(ctx, rg_dist_init(ctx, how ? NULL : &o), RG_OK);
    train(ctx, &m, 0, 2 * B, d);
    r->aux[1 + how] = d->status == RG_OK && !memcmp(d->loss, r->loss, sizeof d->loss) &&
                      !memcmp(d->w, r->w, sizeof d->w);
    CHECK_ST(ctx, rg_save(ctx, "dist_one.st", m.opt), RG_OK);
    CHECK(!access("dist_one.st", F_OK), "rank 0 of 1 wrote no checkpoint");
    remove("dist_one.st");
    CHECK_ST(ctx, rg_dist_close(ctx), RG_OK);
    CHECK(rg_dist_world(ctx) == 1, "not a context of its own after rg_dist_close");
    rg_close(ctx);
  }
  free(d);
}

static void test_one_rank(void) {
  result r;
  if (!run_ranks("one", 1, one_rank, -1, 60, &r)) return;
  CHECK(r.status == RG_OK, "world 1: %s", r.msg);
  CHECK(r.aux[0] == 0, "world 1 recorded %d all-reduce nodes; it should record none", r.aux[0]);
  CHECK(r.aux[1], "world 1 from rg_dist_options: losses or weights differ from a plain run");
  CHECK(r.aux[2], "world 1 from the environment: losses or weights differ from a plain run");
}

/* ---- (b) several ranks against one with the whole batch ------------------------------- */

/* The reference: one rank with the ranks' rows together. */
static int g_world; /* the ranks the reference stands for */
static void whole(int rank, int world, int port, result *r) {
  (void)rank, (void)world, (void)port;
  mlp m;
  rg_ctx *ctx = open_seeded();
  if (ctx && build(ctx, &m, 0)) train(ctx, &m, 0, g_world * B, r);
  rg_close(ctx);
}

/* Checks the buckets recorded by one backward with bucket_bytes 1: aux[0] = nodes,
   aux[1] = 1 if each gradient is in exactly one and every add into it comes before,
   aux[2] = 1 if the first ALLREDUCE precedes the adds into the first layer's gradients.
   An add is an ACCUM, or the GEMM or column sum rg_backward folded it into. */
static void check_buckets(rg_ctx *ctx, const mlp *m, result *r) {
  size_t k0 = ctx->n_nodes;
  rg_tensor loss = forward_loss(ctx, m, 0, 0, B);
  if (rg_backward(ctx, loss) != RG_OK) return;
  int seen[6] = {0}, ordered = 1;
  size_t first_ar = 0, first_layer = 0;
  for (size_t k = k0; k < ctx->n_nodes; k++) {
    const rg_node *n = &ctx->nodes[k];
    bool adds = rg_optab[n->op].flags & RG_F_ACC;
    for (int i = 0; i < 6 && adds; i++) {
      uint32_t g = rg__t(ctx, ctx->prefs[i])->grad;
      if (n->in[0] != g) continue;
      if (seen[i]) ordered = 0; /* accumulated after its all-reduce */
      if (i < 2 && !first_layer) first_layer = k;
    }
    if (n->op != RG_OP_ALLREDUCE) continue;
    r->aux[0]++;
    if (!first_ar) first_ar = k;
    const rg_list *l = n->aux;
    for (int j = 0; j < l->n; j++)
      for (int i = 0; i < 6; i++) seen[i] += l->ref[j] == rg__t(ctx, ctx->prefs[i])->grad;
  }
  for (int i = 0; i < 6; i++) ordered &= seen[i] == 1;
  r->aux[1] = ordered;
  r->aux[2] = first_ar && first_layer && first_ar < first_layer;
}

static void ranks(int rank, int world, int port, result *r) {
  mlp m;
  rg_ctx *ctx = join(rank, world, port, 20, world == 2 ? 1 : 0, 0, &m, r);
  if (!ctx) return;
  CHECK(rg_dist_rank(ctx) == rank && rg_dist_world(ctx) == world, "rank %d of %d",
        rg_dist_rank(ctx), rg_dist_world(ctx));
  check_buckets(ctx, &m, r);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  CHECK_ST(ctx, rg_zero_grad(ctx), RG_OK);
  train(ctx, &m, rank * B, B, r);
  char path[64];
  snprintf(path, sizeof path, "dist_save_%d.st", rank);
  CHECK_ST(ctx, rg_save(ctx, path, m.opt), RG_OK);
  r->aux[3] = !access(path, F_OK);
  remove(path);
  rg_close(ctx);
}

static void test_ranks(int world) {
  result ref, res[MAXR];
  char tag[16];
  g_world = world;
  snprintf(tag, sizeof tag, "whole%d", world);
  if (!run_ranks(tag, 1, whole, -1, 60, &ref)) return;
  snprintf(tag, sizeof tag, "ranks%d", world);
  if (!run_ranks(tag, world, ranks, -1, 60, res)) return;
  CHECK(ref.status == RG_OK, "one rank of batch %d: %s", world * B, ref.msg);
  double worst = 0, worst_w = 0;
  for (int r = 0; r < world; r++) {
    CHECK(res[r].status == RG_OK, "%d ranks: rank %d: %s", world, r, res[r].msg);
    CHECK(!memcmp(res[r].w, res[0].w, sizeof res[0].w), "%d ranks: rank %d's weights differ "
          "from rank 0's", world, r);
    CHECK(res[r].aux[3] == (r == 0), "%d ranks: rank %d %s a checkpoint", world, r,
          r ? "wrote" : "did not write");
    if (world == 2) {
      CHECK(res[r].aux[0] == 6 && res[r].aux[1] && res[r].aux[2], "rank %d: %d all-reduce "
            "nodes for 6 gradients with bucket_bytes 1 (each in one: %d, the first before "
            "the first layer's gradients: %d)", r, res[r].aux[0], res[r].aux[1],
            res[r].aux[2]);
    } else {
      CHECK(res[r].aux[0] == 1 && res[r].aux[1], "rank %d: %d all-reduce nodes with the "
            "default bucket size (one expected, holding every gradient: %d)", r,
            res[r].aux[0], res[r].aux[1]);
    }
  }
  for (int s = 0; s < STEPS; s++) {
    double mean = 0;
    for (int r = 0; r < world; r++) mean += res[r].loss[s] / world;
    double rel = fabs(mean - ref.loss[s]) / fabs(ref.loss[s]);
    if (rel > worst) worst = rel;
    CHECK(rel <= TOL, "%d ranks: step %d: mean loss %.9g, one rank of batch %d %.9g "
          "(relative %.2e > %.0e)", world, s, mean, world * B, (double)ref.loss[s], rel, TOL);
  }
  for (int i = 0; i < NW; i++) {
    double d = fabs((double)res[0].w[i] - ref.w[i]) / (fabs(ref.w[i]) + 1e-3);
    if (d > worst_w) worst_w = d;
  }
  CHECK(worst_w <= TOL, "%d ranks: weights differ from one rank of batch %d by %.2e",
        world, world * B, worst_w);
  CHECK(ref.loss[STEPS - 1] < 0.8 * ref.loss[0], "the reference did not learn: %g -> %g",
        (double)ref.loss[0], (double)ref.loss[STEPS - 1]);
  printf("%d ranks of batch %d vs 1 of batch %d: loss within %.1e, weights within %.1e, "
         "bit-identical across ranks\n", world, B, world * B, worst, worst_w);
}

/* ---- (c) a rank that dies or hangs ------------------------------------------------------ */

static int g_victim, g_hang; /* which rank fails, and whether it hangs instead of exiting */

static void victim(int rank, int world, int port, result *r) {
  mlp m;
  rg_ctx *ctx = join(rank, world, port, g_hang ? 2 : 20, 0, 0, &m, r);
  if (!ctx) return;
  outlive(ctx, &m, rank, g_victim, g_hang, r);
  CHECK_ST(ctx, rg_dist_close(ctx), RG_OK);
  rg_close(ctx);
}

static void test_victim(int who, int hang) {
  char tag[32], want[64];
  g_victim = who;
  g_hang = hang;
  snprintf(tag, sizeof tag, "%s%d", hang ? "hang" : "die", who);
  if (hang)
    snprintf(want, sizeof want, "rank %d sent nothing for 2 s", who);
  else
    snprintf(want, sizeof want, "rank %d closed its connection", who);
  outlive_case(tag, victim, who, hang, 2, want, 10);
}

/* ---- (d) settings and rendezvous errors --------------------------------------------------- */

/* rg_dist_init in ctx with env set as given ("NAME=value" or "NAME" to unset), expecting
   status want and a message holding needle; the context stays usable and single. */
static void expect_init(rg_ctx *ctx, const rg_dist_options *o, const char *const *env,
                        rg_status want, const char *needle) {
  unsetenv("RG_WORLD_SIZE");
  unsetenv("RG_RANK");
  unsetenv("RG_RENDEZVOUS");
  unsetenv("RG_DIST_TIMEOUT");
  for (; env && *env; env++) {
    char kv[128];
    snprintf(kv, sizeof kv, "%s", *env);
    char *eq = strchr(kv, '=');
    if (eq) *eq = 0, setenv(kv, eq + 1, 1);
  }
  rg_clear_error(ctx);
  rg_status st = rg_dist_init(ctx, o);
  CHECK(st == want && msg_has(ctx, needle), "rg_dist_init -> %s, want %s with \"%s\": %s",
        rg_status_str(st), rg_status_str(want), needle, rg_errmsg(ctx));
  CHECK(rg_dist_world(ctx) == 1 || want == RG_OK, "a failed rg_dist_init left a world of %d",
        rg_dist_world(ctx));
  rg_clear_error(ctx);
}

static void settings(int rank, int world, int port, result *r) {
  (void)rank, (void)world;
  char rv[64];
  snprintf(rv, sizeof rv, "tcp:127.0.0.1:%d", port);
  rg_ctx *ctx = open_seeded();
  mlp m;
  if (!ctx) return;
  expect_init(ctx, NULL, NULL, RG_ERR_MISUSE, "no parameters yet");
  if (!build(ctx, &m, 0)) return;
  const char *no_world[] = {"RG_RANK=0", NULL}, *bad_world[] = {"RG_WORLD_SIZE=two", NULL};
  const char *no_rank[] = {"RG_WORLD_SIZE=2", NULL};
  const char *big_rank[] = {"RG_WORLD_SIZE=2", "RG_RANK=2", NULL};
  const char *no_rv[] = {"RG_WORLD_SIZE=2", "RG_RANK=1", NULL};
  const char *bad_rv[] = {"RG_WORLD_SIZE=2", "RG_RANK=1", "RG_RENDEZVOUS=127.0.0.1:80", NULL};
  const char *bad_port[] = {"RG_WORLD_SIZE=2", "RG_RANK=1", "RG_RENDEZVOUS=tcp:h:99999", NULL};
  const char *bad_t[] = {"RG_WORLD_SIZE=1", "RG_RANK=0", "RG_DIST_TIMEOUT=soon", NULL};
  expect_init(ctx, NULL, no_world, RG_ERR_MISUSE, "RG_WORLD_SIZE is not set");
  expect_init(ctx, NULL, bad_world, RG_ERR_MISUSE, "RG_WORLD_SIZE=\"two\" is not an integer");
  expect_init(ctx, NULL, no_rank, RG_ERR_MISUSE, "RG_RANK is not set");
  expect_init(ctx, NULL, big_rank, RG_ERR_MISUSE, "RG_RANK=\"2\" is not an integer in [0, 1]");
  expect_init(ctx, NULL, no_rv, RG_ERR_MISUSE, "RG_RENDEZVOUS is not set");
  expect_init(ctx, NULL, bad_rv, RG_ERR_MISUSE, "is not tcp:HOST:PORT");
  expect_init(ctx, NULL, bad_port, RG_ERR_MISUSE, "is not tcp:HOST:PORT");
  expect_init(ctx, NULL, bad_t, RG_ERR_MISUSE, "RG_DIST_TIMEOUT=\"soon\"");
  expect_init(ctx, &(rg_dist_options){2, 2, rv, 0, 0}, NULL, RG_ERR_MISUSE, "rank 2 of "
              "world_size 2");
  expect_init(ctx, &(rg_dist_options){1, 0, NULL, -1, 0}, NULL, RG_ERR_MISUSE, "timeout");
  /* alone: rank 0 waits for rank 1, rank 1 for rank 0; each gives up after 0.5 s */
  double t0 = now_s();
  expect_init(ctx, &(rg_dist_options){2, 0, rv, 0.5, 0}, NULL, RG_ERR_IO, "(missing: rank 1)");
  r->seconds = now_s() - t0;
  t0 = now_s();
  expect_init(ctx, &(rg_dist_options){2, 1, rv, 0.5, 0}, NULL, RG_ERR_IO,
              "could not connect to rank 0");
  r->aux[0] = (int)((now_s() - t0) * 1000);
  expect_init(ctx, &(rg_dist_options){.world_size = 1}, NULL, RG_OK, "");
  expect_init(ctx, &(rg_dist_options){.world_size = 1}, NULL, RG_ERR_MISUSE,
              "already rank 0 of 1");
  CHECK_ST(ctx, rg_dist_close(ctx), RG_OK);
  float l;
  CHECK_ST(ctx, step(ctx, &m, 0, 0, B, &l), RG_OK); /* still works */
  r->status = RG_OK;
  rg_close(ctx);
}

static void test_settings(void) {
  result r;
  if (!run_ranks("settings", 1, settings, -1, 60, &r)) return;
  CHECK(r.seconds >= 0.45 && r.seconds < 5, "rank 0 alone gave up after %.2f s (timeout "
        "0.5 s)", r.seconds);
  CHECK(r.aux[0] >= 450 && r.aux[0] < 5000, "rank 1 alone gave up after %d ms (timeout "
        "0.5 s)", r.aux[0]);
}

/* Rank 1 builds a wider first layer, or (g_buckets) makes a bucket of each gradient
   where rank 0 makes one of all. */
static int g_buckets;
static void mismatch(int rank, int world, int port, result *r) {
  mlp m;
  float l;
  rg_ctx *ctx = join(rank, world, port, 20, g_buckets && rank ? 1 : 0, !g_buckets, &m, r);
  if (ctx) keep_error(ctx, r, step(ctx, &m, 0, rank * B, B, &l));
  rg_close(ctx);
}

static void test_mismatch(int buckets) {
  result res[2];
  const char *want = buckets ? "rank 1 sent message 3/0/12 where this rank, averaging "
                               "gradients (all-reduce 0, 1612 bytes), expected 3/0/1612"
                             : "rank 1 built another model";
  g_buckets = buckets;
  if (!run_ranks("mismatch", 2, mismatch, -1, 60, res)) return;
  CHECK(res[0].status == RG_ERR_MISUSE && strstr(res[0].msg, want), "rank 0 with a "
        "different rank 1: %s: %s (want \"%s\")", rg_status_str(res[0].status), res[0].msg,
        want);
  CHECK(res[1].status == RG_ERR_IO && strstr(res[1].msg, "rank 0 closed its connection"),
        "rank 1 with a different model: %s: %s", rg_status_str(res[1].status), res[1].msg);
}

/* ---- (e) resgrad-run --------------------------------------------------------------------- */

static char g_dir[4096];

static void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f) fclose(f);
}

/* Runs resgrad-run with args (a shell fragment); returns its exit code, what it printed
   on stdout and stderr (cap bytes each) and the seconds it took. */
static int launch(const char *args, char *out, char *err, size_t cap, double *seconds) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/resgrad-run' %s >run_out.txt 2>run_err.txt", g_dir, args);
  double t0 = now_s();
  int st = system(cmd);
  *seconds = now_s() - t0;
  slurp("run_out.txt", out, cap);
  slurp("run_err.txt", err, cap);
  remove("run_out.txt");
  remove("run_err.txt");
  return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_launcher(void) {
  char path[4200], err[4096], out[4096];
  double t;
  snprintf(path, sizeof path, "%s/resgrad-run", g_dir);
  if (access(path, X_OK)) {
    printf("resgrad-run not built: its checks skipped\n");
    return;
  }
  int code = launch("-n 3 -- sh -c 'echo \"$RG_RANK $RG_LOCAL_RANK $RG_WORLD_SIZE "
                    "$RG_RENDEZVOUS\"'", out, err, sizeof out, &t);
  CHECK(code == 0 && strstr(out, "0 0 3 tcp:127.0.0.1:") && strstr(out, "1 1 3 tcp:") &&
        strstr(out, "2 2 3 tcp:"), "resgrad-run -n 3 exited %d and printed:\n%s", code, out);
  /* rank 1 fails at once; rank 0 would sleep 30 s: stopped after the 1 s grace */
  code = launch("-n 2 --grace 1 -- sh -c 'if [ \"$RG_RANK\" = 1 ]; then exit 3; fi; "
                "exec sleep 30'", out, err, sizeof out, &t);
  CHECK(code == 3 && strstr(err, "rank 1 of 2 exited with status 3"), "resgrad-run with a "
        "failing rank 1 exited %d: %s", code, err);
  CHECK(t < 10, "resgrad-run took %.1f s to stop rank 0 after rank 1 failed (grace 1 s)", t);
  code = launch("-n 2 -- no-such-program-here", out, err, sizeof out, &t);
  CHECK(code == 127 && strstr(err, "cannot run 'no-such-program-here'"), "resgrad-run of a "
        "missing program exited %d: %s", code, err);
  code = launch("-- true", out, err, sizeof out, &t);
  CHECK(code == 2 && strstr(err, "-n N is required"), "resgrad-run without -n exited %d: %s",
        code, err);
}

int main(int argc, char **argv) {
  (void)argc;
  const char *slash = strrchr(argv[0], '/');
  snprintf(g_dir, sizeof g_dir, "%.*s", slash ? (int)(slash - argv[0]) : 1,
           slash ? argv[0] : ".");
  alarm(240); /* the whole test; ctest's timeout is the outer bound */
  test_one_rank();
  test_ranks(2);
  test_ranks(3);
  test_victim(1, 0);
  test_victim(0, 0);
  test_victim(1, 1);
  test_settings();
  test_mismatch(0);
  test_mismatch(1);
  test_launcher();
  if (!failed()) printf("test_dist: all checks passed\n");
  return finish();
}
