/*
 * test_trace.c - the trace file (rg_options.trace_path, RG_TRACE=<path>) on the CPU.
 *
 * A small training step traced to a file in a temporary folder gives strict JSON in the
 * trace-event format with the events docs/trace.md promises: a drain span with its
 * reason, recording spans, a span per op named by the op with its label, transfers with
 * their bytes and site, arena allocations, and counters. The file parses after a drain
 * that failed (an index out of range) while the context is still open, after a process
 * that exits without rg_close (with a closing event) and after one killed between
 * flushes (without it), and after a write that fails part-way (a file size limit): the
 * sticky error is then RG_ERR_IO naming the file, and rg_close returns it. RG_TRACE=<path>
 * writes one too, two contexts given one path write two files, and a path that cannot be
 * written fails rg_open with RG_ERR_IO.
 */
#define _POSIX_C_SOURCE 200809L
#include "trace_file.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

static const char *in_dir(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", dir, name);
  return buf;
}

static rg_ctx *open_traced(const char *path) {
  return open_cpu_opts((rg_options){.trace_path = path});
}

/* Two steps traced: the events a step is made of. */
static void step_events(void) {
  char path[128];
  rg_ctx *c = open_traced(in_dir(path, sizeof path, "step.json"));
  if (!c) return;
  mlp m = mlp_new(c);
  float loss = 0;
  for (int s = 0; s < 2; s++) CHECK_ST(c, mlp_step(c, &m, &loss), RG_OK);
  rg_stats st;
  rg_stats_get(c, &st);
  rg_optim_free(m.opt);
  CHECK_ST(c, rg_close(c), RG_OK);

  const jv *ev = NULL;
  jv *root = load_trace(path, &ev);
  if (!root) return;
  CHECK(!strcmp(json_sget(root, "displayTimeUnit"), "ms"), "displayTimeUnit");
  CHECK(count_events(ev, 'M', "thread_name", -1) == 2, "the two tracks are named");

  /* Drains: one span per drain, the step's read among them, and the time recorded before
     each. */
  CHECK(count_events(ev, 'X', "drain", 1) == (int)st.drains, "%d drain spans for %llu drains",
        count_events(ev, 'X', "drain", 1), (unsigned long long)st.drains);
  int at = 0, reads = 0;
  for (const jv *e; (e = find_event(ev, &at, 'X', "drain", 1));) {
    const jv *a = args_of(e);
    if (strcmp(json_sget(a, "reason"), "read")) continue;
    reads++;
    CHECK(json_nget(a, "nodes") > 5, "a step's drain ran %g nodes", json_nget(a, "nodes"));
    CHECK(!strcmp(json_sget(a, "status"), "RG_OK"), "status %s", json_sget(a, "status"));
  }
  CHECK(reads == 2, "%d drains for a read, want one per step", reads);
  CHECK(count_events(ev, 'X', "record", 1) >= 2, "recording spans");

  /* One span per op that ran, on the device track, named by the op, with the label it
     was recorded under and its output's shape. */
  static const char *const ops[] = {"upload", "linear_act", "linear", "cross_entropy", "adamw"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    CHECK(count_events(ev, 'X', ops[i], 2) >= 2, "%s ran twice", ops[i]);
  int spans = 0;
  for (int i = 0; i < ev->n; i++)
    spans += json_sget(&ev->items[i], "ph")[0] == 'X' && json_nget(&ev->items[i], "tid") == 2;
  CHECK(spans == (int)st.nodes_executed, "%d op spans for %llu nodes run", spans,
        (unsigned long long)st.nodes_executed);
  at = 0;
  const jv *lin = find_event(ev, &at, 'X', "linear_act", 2);
  CHECK(lin && !strcmp(json_sget(args_of(lin), "label"), "mlp"), "the op's label");
  CHECK(lin && !strcmp(json_sget(args_of(lin), "call"), "rg_linear_act"), "the op's call");
  CHECK(lin && !strcmp(json_sget(args_of(lin), "shape"), "16x8"), "shape %s",
        lin ? json_sget(args_of(lin), "shape") : "");

  /* Transfers: the batch up (128 bytes of points, 64 of labels), the loss down. */
  int up128 = 0, down4 = 0;
  at = 0;
  for (const jv *e; (e = find_event(ev, &at, 'i', "transfer up", 1));)
    up128 += json_nget(args_of(e), "bytes") == 128 &&
             !strcmp(json_sget(args_of(e), "site"), "input");
  at = 0;
  for (const jv *e; (e = find_event(ev, &at, 'i', "transfer down", 1));)
    down4 += json_nget(args_of(e), "bytes") == 4 && !strcmp(json_sget(args_of(e), "site"), "read");
  CHECK(up128 == 2 && down4 == 2, "transfers: %d batches up, %d losses down", up128, down4);
  CHECK(count_events(ev, 'i', "transfer up", 1) == (int)st.up.count, "every upload counted");

  /* Allocations and counters. */
  at = 0;
  const jv *alloc = find_event(ev, &at, 'X', "alloc", 1);
  CHECK(alloc && json_nget(args_of(alloc), "bytes") >= 1 << 20, "an arena chunk's span");
  at = 0;
  const jv *pool = NULL;
  for (const jv *e; (e = find_event(ev, &at, 'C', "pool bytes", -1));) pool = e;
  CHECK(pool && json_nget(args_of(pool), "persistent") > 0, "the pool counter");
  at = 0;
  const jv *moved = NULL;
  for (const jv *e; (e = find_event(ev, &at, 'C', "transferred bytes", -1));) moved = e;
  CHECK(moved && json_nget(args_of(moved), "up") == (double)st.up.bytes &&
            json_nget(args_of(moved), "down") == (double)st.down.bytes,
        "the transfer counter ends at rg_stats' bytes");
  CHECK(count_events(ev, 'C', "reserved bytes", -1) > 0, "the reserved-bytes counter");
  CHECK(count_events(ev, 'i', "exit without rg_close", -1) == 0, "closed properly");
  json_free(root);
}

/* A drain that fails (an embedding index past its table): the file parses while the
   context is open, names the failing op, and still parses after rg_close. */
static void failed_drain(void) {
  char path[128];
  rg_ctx *c = open_traced(in_dir(path, sizeof path, "fail.json"));
  if (!c) return;
  rg_tensor table = rg_param(c, "table", RG_F32, 2, (int64_t[]){4, 3},
                             (rg_init){RG_INIT_ONES, 0, 0});
  rg_label_push(c, "lookup \"x\"");
  rg_tensor ids = rg_input(c, RG_I32, 1, (int64_t[]){2}, (int32_t[]){0, 7});
  rg_tensor s = rg_sum(c, rg_embedding(c, table, ids), RG_ALL_AXES, 0);
  rg_label_pop(c);
  float v;
  CHECK_ST(c, rg_item(c, s, &v), RG_ERR_MISUSE);
  for (int closed = 0; closed < 2; closed++) {
    const jv *ev = NULL;
    jv *root = load_trace(path, &ev);
    int at = 0, found = 0;
    for (const jv *e; root && (e = find_event(ev, &at, 'X', "drain", 1));) {
      const jv *a = args_of(e);
      found += !strcmp(json_sget(a, "status"), "RG_ERR_MISUSE") &&
               !strcmp(json_sget(a, "failed_op"), "embedding") &&
               !strcmp(json_sget(a, "failed_label"), "lookup \\\"x\\\"");
    }
    CHECK(found == 1, "the failed drain's span (context %s)", closed ? "closed" : "open");
    json_free(root);
    if (!closed) CHECK_ST(c, rg_close(c), RG_OK); /* the failure was the drain's, reported */
  }
}

/* A process that traces a step and ends without rg_close: by exit (the file gets its
   last events and a closing one) or killed (the file as of its last flush). */
static void no_close(int killed) {
  char path[128];
  in_dir(path, sizeof path, killed ? "killed.json" : "exited.json");
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    rg_ctx *c = open_traced(path);
    mlp m = mlp_new(c);
    float loss;
    if (!c || mlp_step(c, &m, &loss) != RG_OK) _exit(2);
    if (killed) raise(SIGKILL);
    exit(0); /* no rg_close */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(killed ? WIFSIGNALED(status) : WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the child ended as planned (status %d)", status);
  const jv *ev = NULL;
  jv *root = load_trace(path, &ev);
  if (!root) return;
  int at = 0;
  const jv *d = find_event(ev, &at, 'X', "drain", 1);
  CHECK(d && !strcmp(json_sget(args_of(d), "reason"), "read"), "the step's drain is there");
  CHECK(count_events(ev, 'i', "exit without rg_close", -1) == !killed, "the exit event");
  /* The loss's download comes after the drain's flush: only exit's flush writes it. */
  CHECK(count_events(ev, 'i', "transfer down", 1) == !killed, "the events after the drain");
  json_free(root);
}

/* A trace that outgrows the process's file size limit (RLIMIT_FSIZE, SIGXFSZ ignored, so
   the write fails with EFBIG part-way): the file stays valid JSON with the events before
   the failed write, the sticky error names it, rg_close reports it. */
enum { LIMIT = 16384 };
static void write_fails(void) {
  char path[128];
  in_dir(path, sizeof path, "limit.json");
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {LIMIT, LIMIT};
    if (setrlimit(RLIMIT_FSIZE, &rl)) _exit(2);
    rg_ctx *c = open_traced(path);
    mlp m = mlp_new(c);
    float loss;
    for (int s = 0; c && s < 1000 && rg_error(c) == RG_OK; s++) (void)mlp_step(c, &m, &loss);
    int named = c && rg_error(c) == RG_ERR_IO && msg_has(c, "trace file");
    _exit(named && rg_close(c) == RG_ERR_IO ? 0 : 3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child saw RG_ERR_IO from the "
        "trace (status %d)", status);
  struct stat sb;
  CHECK(!stat(path, &sb) && sb.st_size <= LIMIT, "the file is within the limit");
  const jv *ev = NULL;
  jv *root = load_trace(path, &ev);
  CHECK(!root || count_events(ev, 'X', "drain", 1) > 0, "the drains before the failure");
  json_free(root);
}

static void env_and_paths(void) {
  char path[128], two[128];
  /* RG_TRACE=<path> */
  setenv("RG_TRACE", in_dir(path, sizeof path, "env.json"), 1);
  rg_ctx *c = open_cpu();
  unsetenv("RG_TRACE");
  if (c) {
    mlp m = mlp_new(c);
    float loss;
    CHECK_ST(c, mlp_step(c, &m, &loss), RG_OK);
    CHECK_ST(c, rg_close(c), RG_OK);
    const jv *ev = NULL;
    jv *root = load_trace(path, &ev);
    CHECK(!root || count_events(ev, 'X', "drain", 1) > 0, "RG_TRACE wrote the step");
    json_free(root);
  }
  /* Two contexts open at once on one path: the second writes "two-2.json". */
  rg_ctx *a = open_traced(in_dir(path, sizeof path, "two.json"));
  rg_ctx *b = open_traced(path);
  if (a && b) {
    mlp ma = mlp_new(a), mb = mlp_new(b);
    float loss;
    CHECK_ST(a, mlp_step(a, &ma, &loss), RG_OK);
    CHECK_ST(b, mlp_step(b, &mb, &loss), RG_OK);
  }
  rg_close(a);
  rg_close(b);
  for (int k = 0; k < 2; k++) {
    const jv *ev = NULL;
    jv *root = load_trace(in_dir(two, sizeof two, k ? "two-2.json" : "two.json"), &ev);
    CHECK(!root || count_events(ev, 'X', "drain", 1) > 0, "%s holds its context's drains", two);
    json_free(root);
  }
  /* Paths that cannot be written: rg_open fails and makes nothing. */
  const char *bad[] = {"/nonexistent-folder/run.json", "/dev/full"};
  for (int k = 0; k < 2; k++) {
    if (k == 1 && access(bad[k], W_OK)) continue; /* no /dev/full here */
    rg_ctx *x = NULL;
    rg_status st = rg_open(&x, &(rg_options){.device = RG_DEVICE_CPU, .quiet = 1,
                                             .trace_path = bad[k]});
    CHECK(st == RG_ERR_IO && !x, "rg_open with trace_path %s -> %s", bad[k], rg_status_str(st));
    rg_close(x);
  }
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%.40s/rg_trace_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "cannot make a temporary folder %s\n", dir);
    return 1;
  }
  /* The checks that fork come first, before this process has opened a context with more
     than one thread: a child forked while another thread runs may inherit a lock that
     thread held, and ThreadSanitizer's runtime (make tsan) reports such forks. */
  no_close(0);
  no_close(1);
  write_fails();
  step_events();
  failed_drain();
  env_and_paths();
  static const char *const made[] = {"step.json",   "fail.json",  "exited.json",
                                     "killed.json", "limit.json", "env.json",
                                     "two.json",    "two-2.json"};
  char path[128];
  for (size_t i = 0; i < sizeof made / sizeof *made; i++)
    remove(in_dir(path, sizeof path, made[i]));
  if (rmdir(dir)) CHECK(0, "%s holds files the test did not expect", dir);
  return finish();
}
