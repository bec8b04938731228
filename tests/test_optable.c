/*
 * test_optable.c - the op table (src/core/ops.h) against what each of its rows needs:
 *  - flags that agree with each other and with the row's arity;
 *  - a backward rule (a "case RG_OP_<ENUM>:" of rg__backward_rule, src/core/autograd.c)
 *    exactly for the ops marked RG_F_DIFF;
 *  - a gradient-check case in tests/test_ops.c for every op that carries a gradient
 *    (RG_F_DIFF) or that rg_backward records (RG_F_BWD), but an all-reduce (RG_F_COMM:
 *    one process, where the checks run, records none; test_dist and test_nccl compare it
 *    with plain runs);
 *  - a CUDA-vs-CPU parity case in tests/test_cuda.c for every op (it runs where there is
 *    a GPU, and reports itself skipped elsewhere; the case must exist all the same).
 * A case counts for the ops of its RG_COVERS list (covers.h), which the case checks
 * against its tapes when it runs; the rules and the lists are read from the source text
 * under RG_SOURCE_DIR, which ctest sets. Last, rg_backward through an op without a rule
 * must fail, naming the op, and leave the context working.
 */
#include "common.h"
#include "source.h"
#include "covers.h"

#include <stdbool.h>

static const char *const enum_name[RG_OP_COUNT] = {
#define ENUM_NAME(E, ...) #E,
    RG_OPS(ENUM_NAME)
#undef ENUM_NAME
};

/* The file at RG_SOURCE_DIR/path, NUL-terminated (the caller frees it); NULL, with a failed
   check, if it cannot be read. */
static char *source(const char *path) {
  const char *dir = getenv("RG_SOURCE_DIR");
  CHECK(dir && *dir, "RG_SOURCE_DIR is not set: run this test with ctest, or set it to the "
        "checkout");
  char *text = read_source(path);
  CHECK(!dir || !*dir || text, "cannot read %s/%s", dir ? dir : "", path);
  return text;
}

/* The op whose enum name (after "RG_OP_") starts p, or RG_OP_COUNT. */
static rg_op op_at(const char *p) {
  size_t n = 0;
  while ((p[n] >= 'A' && p[n] <= 'Z') || (p[n] >= '0' && p[n] <= '9') || p[n] == '_') n++;
  for (int i = 0; i < RG_OP_COUNT; i++)
    if (strlen(enum_name[i]) == n && !memcmp(enum_name[i], p, n)) return (rg_op)i;
  return RG_OP_COUNT;
}

/* Marks has[op] for every op named "<before>RG_OP_<ENUM>" in text [from, to). */
static void mark(const char *from, const char *to, const char *before, unsigned char *has) {
  char key[32];
  snprintf(key, sizeof key, "%sRG_OP_", before);
  for (const char *p = from; (p = strstr(p, key)) && p < to; p += strlen(key)) {
    rg_op op = op_at(p + strlen(key));
    if (op < RG_OP_COUNT) has[op] = 1;
  }
}

/* The ops with a rule: the case labels of rg__backward_rule's switch. */
static bool rules(unsigned char *has) {
  char *text = source("src/core/autograd.c");
  if (!text) return false;
  const char *body = strstr(text, "\nvoid rg__backward_rule(");
  const char *end = body ? strstr(body, "\n}\n") : NULL;
  CHECK(end, "src/core/autograd.c: no function rg__backward_rule found");
  if (end) mark(body, end, "case ", has);
  free(text);
  return end != NULL;
}

/* The ops named in the RG_COVERS lists of a test file. */
static bool covered(const char *path, unsigned char *has) {
  char *text = source(path);
  if (!text) return false;
  for (const char *p = text, *end; (p = strstr(p, "RG_COVERS(")) && (end = strchr(p, ')'));
       p = end)
    mark(p, end, "", has);
  free(text);
  return true;
}

/* Flags that contradict each other or the row's arity. */
static void consistent(int op) {
  const rg_opinfo *o = &rg_optab[op];
  unsigned f = o->flags;
  const char *k = o->kernel;
  CHECK(k && *k && o->name && !strncmp(o->name, "rg_", 3), "op %d: no name", op);
  CHECK(o->nin >= 0 && o->nin <= RG_MAX_IN && o->nout >= 0 && o->nout <= RG_MAX_OUT,
        "%s: %d inputs and %d outputs; a node holds %d and %d", k, o->nin, o->nout, RG_MAX_IN,
        RG_MAX_OUT);
  CHECK(!(f & RG_F_DIFF) || (o->nin > 0 && o->nout > 0), "%s is RG_F_DIFF with %d inputs and "
        "%d outputs: a gradient goes from an output to an input", k, o->nin, o->nout);
  CHECK(!(f & RG_F_PRODUCT) || (f & RG_F_DIFF), "%s is RG_F_PRODUCT, not RG_F_DIFF", k);
  CHECK(!(f & RG_F_ACC) || (o->nout == 0 && o->nin > 0), "%s is RG_F_ACC with %d outputs: it "
        "adds into in[0] instead", k, o->nout);
  CHECK(!(f & (RG_F_LIST | RG_F_OPTIM)) || o->nout == 0, "%s works through aux with %d "
        "outputs: it changes tensors in place", k, o->nout);
  CHECK((f & (RG_F_LIST | RG_F_OPTIM)) != (RG_F_LIST | RG_F_OPTIM), "%s: aux is one thing: "
        "RG_F_LIST or RG_F_OPTIM", k);
  CHECK(!(f & RG_F_COMM) || (f & RG_F_LIST), "%s is RG_F_COMM without RG_F_LIST", k);
  CHECK(!(f & RG_F_FOLDS) || ((f & RG_F_BWD) && o->nin == 6), "%s is RG_F_FOLDS, but not "
        "RG_F_BWD with LAYERNORM_BWD's 6 inputs", k);
}

/* rg_backward through an op without a rule. No op is reached so today (an I32 result, as
   ARGMAX's, never needs a gradient; every float op has a rule), so ARGMAX's result is
   made to look as if it needed one, as an op missing from autograd.c would, under a loss
   through a cast of it. The backward fails naming rg_argmax, queues nothing, and the
   context goes on working. */
static void no_rule(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor x = rg_param(ctx, "x", RG_F32, 1, (int64_t[]){4},
                         (rg_init){RG_INIT_UNIFORM, -1, 1});
  rg_step_begin(ctx);
  rg_tensor i = rg_argmax(ctx, x, 0, 0);
  uint32_t ref = 0;
  CHECK_ST(ctx, rg__check(ctx, i, "test_optable", 1, &ref), RG_OK);
  if (ref) rg__t(ctx, ref)->flags |= RG_T_GRAD;
  rg_tensor loss = rg_sum(ctx, rg_cast(ctx, i, RG_F32), RG_ALL_AXES, 0);
  size_t queued = ctx->n_nodes - ctx->q_head;
  CHECK_ST(ctx, rg_backward(ctx, loss), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_argmax") && msg_has(ctx, "no gradient"), "the failure must name "
        "rg_argmax and say it has no gradient: %s", rg_errmsg(ctx));
  CHECK(ctx->n_nodes - ctx->q_head == queued, "the failed rg_backward left %zu nodes queued",
        ctx->n_nodes - ctx->q_head - queued);
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  CHECK_ST(ctx, rg_backward(ctx, rg_sum(ctx, rg_scale(ctx, x, 3), RG_ALL_AXES, 0)), RG_OK);
  float g[4] = {0};
  CHECK_ST(ctx, rg_read(ctx, rg_grad(ctx, x), g, sizeof g), RG_OK);
  CHECK(g[0] == 3 && g[3] == 3, "the gradient after the failure: %g, want 3", g[0]);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  unsigned char rule[RG_OP_COUNT] = {0}, grad[RG_OP_COUNT] = {0}, gpu[RG_OP_COUNT] = {0};
  bool ok = rules(rule) && covered("tests/test_ops.c", grad) &&
            covered("tests/test_cuda.c", gpu);
  for (int op = 0; op < RG_OP_COUNT; op++) {
    const rg_opinfo *o = &rg_optab[op];
    unsigned f = o->flags;
    consistent(op);
    if (!ok) continue;
    CHECK(rule[op] || !(f & RG_F_DIFF), "%s (%s) is RG_F_DIFF but has no backward rule: add "
          "its case to rg__backward_rule (autograd.c)", o->kernel, o->name);
    CHECK(!rule[op] || (f & RG_F_DIFF), "%s (%s) has a backward rule but is not RG_F_DIFF in "
          "ops.h", o->kernel, o->name);
    CHECK(grad[op] || !(f & (RG_F_DIFF | RG_F_BWD)) || (f & RG_F_COMM), "%s (%s) has no "
          "gradient check: add RG_OP_%s to the RG_COVERS list of a case of tests/test_ops.c "
          "whose rg_gradcheck reaches it", o->kernel, o->name, enum_name[op]);
    CHECK(gpu[op], "%s (%s) has no CUDA parity case: add RG_OP_%s to the RG_COVERS list of a "
          "case of tests/test_cuda.c that records it", o->kernel, o->name, enum_name[op]);
  }
  no_rule();
  if (!failed())
    printf("test_optable: %d ops: rules, gradient checks and parity cases all present\n",
           (int)RG_OP_COUNT);
  return finish();
}
