/*
 * trace_file.h - what the trace tests share (test_trace.c on the CPU, test_trace_cuda.c
 * on a GPU): a trace file read and checked against the Chrome trace-event format the
 * library promises (docs/trace.md), its events looked up, and a small training step.
 */
#ifndef RG_TESTS_TRACE_FILE_H
#define RG_TESTS_TRACE_FILE_H

#include "common.h"
#include "json.h"

#include <stdint.h>

/* The whole file at path as a string, or NULL. */
static inline char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *b = malloc(cap);
  for (size_t r; b && (r = fread(b + n, 1, cap - n - 1, f)) > 0;) {
    n += r;
    if (n + 1 == cap) {
      char *g = realloc(b, cap *= 2);
      if (!g) free(b);
      b = g;
    }
  }
  fclose(f);
  if (b) b[n] = 0;
  return b;
}

/* The trace at path parsed; NULL (and a failed check naming why) unless it is strict
   JSON of the promised shape: an object whose "traceEvents" is an array of objects, each
   with a known ph, a name, a pid and a tid, a ts (not for metadata) >= 0, a dur >= 0 for
   spans, an args object. *events gets that array. */
static inline jv *load_trace(const char *path, const jv **events) {
  char *text = read_text(path), err[200];
  CHECK(text != NULL, "%s was not written", path);
  jv *root = text ? json_parse(text, err, sizeof err) : NULL;
  CHECK(!text || root, "%s is not valid JSON: %s", path, err);
  free(text);
  const jv *ev = json_get(root, "traceEvents");
  CHECK(!root || (ev && ev->type == J_ARR), "%s has no traceEvents array", path);
  if (!ev || ev->type != J_ARR) return json_free(root), NULL;
  int bad = 0;
  for (int i = 0; i < ev->n && bad < 5; i++) {
    const jv *e = &ev->items[i];
    const char *ph = json_sget(e, "ph");
    int ok = e->type == J_OBJ && strlen(ph) == 1 && strchr("XiCM", ph[0]) &&
             json_get(e, "name") && json_get(e, "name")->type == J_STR &&
             json_nget(e, "pid") > 0 && json_nget(e, "tid") >= 0 &&
             json_get(e, "args") && json_get(e, "args")->type == J_OBJ &&
             (ph[0] == 'M' || json_nget(e, "ts") >= 0) &&
             (ph[0] != 'X' || json_nget(e, "dur") >= 0);
    CHECK(ok, "%s: event %d (%s) breaks the trace-event format", path, i, json_sget(e, "name"));
    bad += !ok;
  }
  *events = ev;
  return root;
}

/* The i-th event (from *from on) with this ph, name and (tid >= 0) tid; NULL if none. */
static inline const jv *find_event(const jv *events, int *from, char ph, const char *name, int tid) {
  for (int i = *from; i < events->n; i++) {
    const jv *e = &events->items[i];
    if (json_sget(e, "ph")[0] == ph && !strcmp(json_sget(e, "name"), name) &&
        (tid < 0 || json_nget(e, "tid") == tid)) {
      *from = i + 1;
      return e;
    }
  }
  return NULL;
}

static inline int count_events(const jv *events, char ph, const char *name, int tid) {
  int n = 0, at = 0;
  while (find_event(events, &at, ph, name, tid)) n++;
  return n;
}

static inline const jv *args_of(const jv *e) { return json_get(e, "args"); }

/* A 2-8-2 MLP's training step on a fixed batch of N points under label "mlp", its loss
   read (the step's barrier). */
enum { MLP_N = 16 };
typedef struct mlp { rg_tensor w1, b1, w2, b2; rg_optim *opt; } mlp;

static inline mlp mlp_new(rg_ctx *c) {
  rg_init nrm = {RG_INIT_NORMAL, 0.5f, 0}, z = {RG_INIT_ZEROS, 0, 0};
  mlp m = {rg_param(c, "w1", RG_F32, 2, (int64_t[]){8, 2}, nrm),
           rg_param(c, "b1", RG_F32, 1, (int64_t[]){8}, z),
           rg_param(c, "w2", RG_F32, 2, (int64_t[]){2, 8}, nrm),
           rg_param(c, "b2", RG_F32, 1, (int64_t[]){2}, z), NULL};
  m.opt = rg_optim_adamw(c, &(rg_adamw_options){.lr = 1e-2f});
  return m;
}

static inline rg_status mlp_step(rg_ctx *c, const mlp *m, float *loss) {
  static float x[MLP_N][2];
  static int32_t y[MLP_N];
  for (int i = 0; i < MLP_N; i++)
    x[i][0] = (float)(i % 4) - 1.5f, x[i][1] = (float)(i / 4) - 1.5f,
    y[i] = x[i][0] * x[i][1] > 0;
  rg_step_begin(c);
  rg_label_push(c, "mlp");
  rg_tensor xs = rg_input(c, RG_F32, 2, (int64_t[]){MLP_N, 2}, x);
  rg_tensor ys = rg_input(c, RG_I32, 1, (int64_t[]){MLP_N}, y);
  rg_tensor h = rg_linear_act(c, xs, m->w1, m->b1, RG_ACT_RELU);
  rg_tensor l = rg_cross_entropy(c, rg_linear(c, h, m->w2, m->b2), ys);
  rg_label_pop(c);
  rg_backward(c, l);
  rg_optim_step(m->opt);
  rg_zero_grad(c);
  return rg_item(c, l, loss);
}

#endif
