/*
 * test_trace_cuda.c - the trace file on a GPU: a step that repeats runs eagerly once
 * (a device span per op, from CUDA events), is captured as a CUDA graph the next time
 * (a host "capture" span, then the graph's first launch) and replays after that (a host
 * "replay" span and a device "graph" span per replay); the spans agree with rg_stats'
 * captures and replays. A drain that a kernel fails (an index out of range, found by the
 * error word) leaves valid JSON naming the op. Exits 77 (skipped) without a usable GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include "trace_file.h"

#include <unistd.h>

enum { STEPS = 5 };

static rg_ctx *open_traced(const char *path) {
  rg_ctx *c = NULL;
  rg_status st = rg_open(&c, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1,
                                           .trace_path = path});
  CHECK(st == RG_OK, "rg_open(CUDA, trace) -> %s", rg_status_str(st));
  return c;
}

static void graphs(const char *path) {
  rg_ctx *c = open_traced(path);
  if (!c) return;
  mlp m = mlp_new(c);
  float loss = 0;
  for (int s = 0; s < STEPS; s++) CHECK_ST(c, mlp_step(c, &m, &loss), RG_OK);
  rg_stats st;
  rg_stats_get(c, &st);
  rg_optim_free(m.opt);
  CHECK_ST(c, rg_close(c), RG_OK);
  int eager = STEPS - (int)st.graph_captures - (int)st.graph_replays;
  CHECK(st.graph_captures == 1 && st.graph_replays >= 1 && eager >= 1,
        "%llu captures and %llu replays of %d steps: the step should replay (%s)",
        (unsigned long long)st.graph_captures, (unsigned long long)st.graph_replays, STEPS,
        st.graph_miss_reason);

  const jv *ev = NULL;
  jv *root = load_trace(path, &ev);
  if (!root) return;
  int at = 0;
  const jv *cap = find_event(ev, &at, 'X', "capture", 1);
  const jv *made = cap ? json_get(args_of(cap), "captured") : NULL;
  CHECK(count_events(ev, 'X', "capture", 1) == (int)st.graph_captures && made &&
            made->type == J_BOOL && made->num == 1,
        "one capture span, and it captured");
  CHECK(count_events(ev, 'X', "launch", 1) == (int)st.graph_captures, "the first launch");
  CHECK(count_events(ev, 'X', "replay", 1) == (int)st.graph_replays, "%d replay spans",
        count_events(ev, 'X', "replay", 1));
  /* One device span per graph launch, timed by the events around it. */
  int first = 0, replays = 0;
  at = 0;
  for (const jv *e; (e = find_event(ev, &at, 'X', "graph", 2));) {
    const jv *a = args_of(e);
    first += !strcmp(json_sget(a, "run"), "first");
    replays += !strcmp(json_sget(a, "run"), "replay");
    CHECK(json_nget(e, "dur") > 0 && json_nget(a, "nodes") > 5, "a timed graph of the step");
  }
  CHECK(first == 1 && replays == (int)st.graph_replays, "graph spans: %d first, %d replays",
        first, replays);
  /* The eager steps: a device span per op (the captured and replayed ones have none). */
  static const char *const ops[] = {"upload", "linear_act", "linear", "cross_entropy", "adamw"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
    CHECK(count_events(ev, 'X', ops[i], 2) >= eager,
          "%s: %d device spans in %d eager steps", ops[i], count_events(ev, 'X', ops[i], 2),
          eager);
  at = 0;
  const jv *lin = find_event(ev, &at, 'X', "linear_act", 2);
  CHECK(lin && !strcmp(json_sget(args_of(lin), "label"), "mlp"), "the op's label");
  json_free(root);
}

/* A kernel's fault (an embedding index past its table) fails the drain: the file parses
   while the context is open and names the op. */
static void fault(const char *path) {
  rg_ctx *c = open_traced(path);
  if (!c) return;
  rg_tensor table = rg_param(c, "table", RG_F32, 2, (int64_t[]){4, 3},
                             (rg_init){RG_INIT_ONES, 0, 0});
  rg_tensor ids = rg_input(c, RG_I32, 1, (int64_t[]){2}, (int32_t[]){0, 7});
  float v;
  CHECK_ST(c, rg_item(c, rg_sum(c, rg_embedding(c, table, ids), RG_ALL_AXES, 0), &v),
           RG_ERR_MISUSE);
  const jv *ev = NULL;
  jv *root = load_trace(path, &ev);
  int at = 0, found = 0;
  for (const jv *e; root && (e = find_event(ev, &at, 'X', "drain", 1));)
    found += !strcmp(json_sget(args_of(e), "failed_op"), "embedding");
  CHECK(found == 1, "the failed drain's span names the op");
  json_free(root);
  rg_close(c);
}

int main(void) {
  rg_ctx *probe = NULL;
  rg_status st = rg_open(&probe, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1});
  if (st != RG_OK) {
    printf("test_trace_cuda: skipped (%s: no CUDA GPU or no CUDA backend in this build)\n",
           rg_status_str(st));
    return SKIP_EXIT;
  }
  rg_close(probe);
  const char *tmp = getenv("TMPDIR");
  char dir[64], a[128], b[128];
  snprintf(dir, sizeof dir, "%.40s/rg_trace_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "cannot make a temporary folder %s\n", dir);
    return 1;
  }
  snprintf(a, sizeof a, "%s/graphs.json", dir);
  snprintf(b, sizeof b, "%s/fault.json", dir);
  graphs(a);
  fault(b);
  remove(a);
  remove(b);
  rmdir(dir);
  return finish();
}
