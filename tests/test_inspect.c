/*
 * test_inspect.c - rg_describe, rg_is_pending, rg_pool_of and rg_dump_handles: a pending op
 * output is described with its op and label, then as ready after rg_sync; a parameter as
 * persistent with its name and gradient; a failed value with the drain's message; stale,
 * forged and RG_NONE handles as such. None of them drains (rg_stats' drain count stays)
 * or sets the sticky error. Truncation follows snprintf. The dump lists each tensor once.
 */
#include "common.h"

static uint64_t drains(rg_ctx *ctx) {
  rg_stats s;
  rg_stats_get(ctx, &s);
  return s.drains;
}

/* rg_describe into a buffer that holds any line of this test; checks the returned length. */
static const char *describe(rg_ctx *ctx, rg_tensor t) {
  static char buf[2048];
  int n = rg_describe(ctx, t, buf, sizeof buf);
  CHECK(n > 0 && (size_t)n == strlen(buf), "rg_describe returned %d for \"%s\"", n, buf);
  return buf;
}

#define HAS(text, needle) CHECK(strstr(text, needle), "\"%s\" lacks \"%s\"", text, needle)

typedef struct lines { int n; char text[64][256]; } lines;
static void keep(void *user, const char *text) {
  lines *l = user;
  if (l->n < 64) snprintf(l->text[l->n], sizeof l->text[l->n], "%s", text);
  l->n++;
}
static int times(const lines *l, const char *text) {
  int k = 0;
  for (int i = 0; i < l->n && i < 64; i++) k += !strcmp(l->text[i], text);
  return k;
}

int main(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return finish();
  int64_t wd[2] = {3, 2}, xd[2] = {4, 2};
  float xv[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rg_tensor w = rg_param(ctx, "w1", RG_F32, 2, wd, (rg_init){RG_INIT_NORMAL, 0.5f, 0});
  rg_tensor x = rg_input(ctx, RG_F32, 2, xd, xv);
  rg_label_push(ctx, "block0");
  rg_label_push(ctx, "mlp");
  rg_tensor y = rg_linear(ctx, x, w, RG_NONE);
  rg_label_pop(ctx);
  rg_label_pop(ctx);
  CHECK_ST(ctx, rg_error(ctx), RG_OK);

  /* A pending op output: its op and label, no barrier. */
  uint64_t d0 = drains(ctx);
  const char *s = describe(ctx, y);
  HAS(s, "F32 [4,3] pass gen 1 slot ");
  HAS(s, "pending: rg_linear [block0/mlp]");
  HAS(s, "requires grad");
  CHECK(rg_is_pending(ctx, y) == 1 && rg_pool_of(ctx, y) == RG_POOL_PASS, "y: pending %d, "
        "pool %d", rg_is_pending(ctx, y), rg_pool_of(ctx, y));
  CHECK(drains(ctx) == d0 && rg_is_pending(ctx, y), "describing drained the queue");

  /* The parameter: persistent, named, ready, with its gradient. */
  s = describe(ctx, w);
  HAS(s, "F32 [3,2] persistent gen 1 slot 1, param \"w1\", ready");
  HAS(s, "requires grad, has grad");
  CHECK(!rg_is_pending(ctx, w) && rg_pool_of(ctx, w) == RG_POOL_PERSISTENT,
        "w: pending %d, pool %d", rg_is_pending(ctx, w), rg_pool_of(ctx, w));
  s = describe(ctx, x);
  CHECK(!strstr(s, "grad"), "an input has no gradient: %s", s);

  /* Truncation: snprintf's contract. */
  char full[256], small[8];
  int need = rg_describe(ctx, y, NULL, 0);
  CHECK(rg_describe(ctx, y, full, sizeof full) == need && (size_t)need == strlen(full),
        "length %d of \"%s\"", need, full);
  memset(small, 'x', sizeof small);
  CHECK(rg_describe(ctx, y, small, sizeof small) == need && strlen(small) == 7 &&
            !strncmp(small, full, 7), "cut to \"%.8s\"", small);
  CHECK(rg_describe(ctx, y, small, 1) == need && small[0] == 0, "cap 1 gives \"\"");

  /* The dump: every tensor once, pass pool first; a bad pool or callback is refused. */
  lines *all = calloc(1, sizeof *all), *pass = calloc(1, sizeof *pass),
        *pers = calloc(1, sizeof *pers);
  if (!all || !pass || !pers) return free(all), free(pass), free(pers), finish();
  int n = rg_dump_handles(ctx, -1, keep, all);
  CHECK(n == all->n && n >= 3 && n <= 64, "dump of both pools: %d lines", n);
  CHECK(rg_dump_handles(ctx, RG_POOL_PASS, keep, pass) == pass->n &&
            rg_dump_handles(ctx, RG_POOL_PERSISTENT, keep, pers) == pers->n &&
            pass->n + pers->n == n, "pools %d + %d of %d lines", pass->n, pers->n, n);
  for (int i = 0; i < n && i < 64; i++)
    CHECK(times(all, all->text[i]) == 1, "listed twice: %s", all->text[i]);
  HAS(pers->text[1], "grad of \"w1\"");
  CHECK(times(all, describe(ctx, y)) == 1 && times(all, describe(ctx, w)) == 1 &&
            times(pass, describe(ctx, y)) == 1 && times(pers, describe(ctx, w)) == 1,
        "the dump lists y and w once, each in its pool");
  CHECK(!strcmp(all->text[0], pass->text[0]), "pass pool first");
  for (int i = 0; i < n && i < 64; i++) printf("dump: %s\n", all->text[i]);
  CHECK(rg_dump_handles(ctx, 2, keep, all) == -1 && rg_dump_handles(ctx, 0, NULL, NULL) == -1
            && rg_dump_handles(NULL, -1, keep, all) == -1, "bad arguments give -1");
  CHECK(drains(ctx) == d0 && rg_error(ctx) == RG_OK, "the dump drained or set an error");

  /* After the barrier: ready, still naming its maker. */
  CHECK_ST(ctx, rg_sync(ctx), RG_OK);
  s = describe(ctx, y);
  HAS(s, "ready: rg_linear [block0/mlp]");
  CHECK(!rg_is_pending(ctx, y), "y is pending after rg_sync");

  /* RG_NONE, a forged id, no context. */
  HAS(describe(ctx, RG_NONE), "RG_NONE");
  rg_tensor forged = {y.id + 1000};
  HAS(describe(ctx, forged), "not a handle of this context");
  HAS(describe(ctx, (rg_tensor){y.id + ((uint64_t)5 << 32)}), "not a handle of this context");
  HAS(describe(NULL, y), "no context");
  CHECK(!rg_is_pending(ctx, RG_NONE) && !rg_is_pending(ctx, forged) &&
            rg_pool_of(ctx, RG_NONE) == -1 && rg_pool_of(ctx, forged) == -1 &&
            rg_pool_of(NULL, w) == -1 && !rg_is_pending(NULL, w), "bad handles");

  /* A value whose drain failed: the drain's message. */
  int64_t one = 1;
  int32_t bad = 7;
  rg_tensor e = rg_embedding(ctx, w, rg_input(ctx, RG_I32, 1, &one, &bad));
  CHECK(rg_sync(ctx) != RG_OK, "an index past the table fails the drain");
  rg_clear_error(ctx);
  s = describe(ctx, e);
  HAS(s, "requires grad, failed: rg_embedding");
  printf("failed: %s\n", s);
  CHECK(!rg_is_pending(ctx, e), "a failed value is not pending");

  /* A stale handle: described, no sticky error, no barrier. */
  CHECK_ST(ctx, rg_step_begin(ctx), RG_OK);
  rg_tensor z = rg_scale(ctx, w, 2);
  d0 = drains(ctx);
  HAS(describe(ctx, y), "stale (pass pool generation 1, now 2)");
  CHECK(!rg_is_pending(ctx, y) && rg_pool_of(ctx, y) == -1, "a stale handle is no pool's");
  CHECK(rg_error(ctx) == RG_OK && drains(ctx) == d0 && rg_is_pending(ctx, z),
        "describing a stale handle set %s or drained", rg_status_str(rg_error(ctx)));
  HAS(describe(ctx, z), "F32 [3,2] pass gen 2 slot ");
  HAS(describe(ctx, w), "persistent gen 1 slot 1");

  free(all), free(pass), free(pers);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
  return finish();
}
