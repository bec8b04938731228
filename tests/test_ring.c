/*
 * test_ring.c - ring buffers on the CPU (rg_ring_new, push, gather, sample, count, free):
 * the order of pushes and reads within the queue, wrap-around, indices out of range at
 * the barrier, stale handles (a reset persistent pool, a freed ring) and the reuse of a
 * freed ring's bytes, the draws of rg_ring_sample, and the transfers of a replay-buffer
 * training loop: one upload (the new entries) and one 4-byte download (the loss) a step.
 * The CUDA backend's kernels are compared with these in tests/test_cuda.c.
 */
#include "common.h"

enum { CAP = 4, ROWS = 3 };

/* Entries [k, ROWS] whose entry j (counting from first) holds first + j, 10 (first + j),
   100 (first + j): each entry says which it is. */
static rg_tensor entries(rg_ctx *ctx, int first, int k) {
  float v[CAP * ROWS];
  for (int j = 0; j < k; j++)
    for (int c = 0; c < ROWS; c++) v[j * ROWS + c] = (float)(first + j) * (c == 0 ? 1 : c == 1 ? 10 : 100);
  return rg_input(ctx, RG_F32, 2, (int64_t[]){k, ROWS}, v);
}

/* The entry numbers (by entries()'s first column) of a gathered [n, ROWS] tensor, checked
   whole: every column must agree with the first. */
static void read_ids(rg_ctx *ctx, rg_tensor g, int n, int *ids) {
  float v[16 * ROWS];
  CHECK_ST(ctx, rg_read(ctx, g, v, sizeof(float) * (size_t)(n * ROWS)), RG_OK);
  for (int p = 0; p < n; p++) {
    ids[p] = (int)v[p * ROWS];
    CHECK(v[p * ROWS + 1] == 10 * v[p * ROWS] && v[p * ROWS + 2] == 100 * v[p * ROWS],
          "row %d of the gather is not one entry: %g %g %g", p, v[p * ROWS], v[p * ROWS + 1],
          v[p * ROWS + 2]);
  }
}

static rg_tensor idx_of(rg_ctx *ctx, int n, const int32_t *v) {
  return rg_input(ctx, RG_I32, 1, (int64_t[]){n}, v);
}

static int64_t count_of(rg_ctx *ctx, rg_tensor ring) {
  int64_t c = -1;
  CHECK_ST(ctx, rg_ring_count(ctx, ring, &c), RG_OK);
  return c;
}

/* A gather recorded before a push reads what the ring held then; one after it, the new
   entries. The ring's handle is a persistent tensor, never pending. */
static void ordering(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor ring = rg_ring_new(ctx, RG_F32, CAP, ROWS);
  CHECK(rg_pool_of(ctx, ring) == RG_POOL_PERSISTENT && rg_dim(ctx, ring, 0) == CAP &&
        rg_dim(ctx, ring, 1) == ROWS, "the ring is a persistent [%d, %d] tensor", CAP, ROWS);
  CHECK(count_of(ctx, ring) == 0, "a new ring holds no entries");
  rg_step_begin(ctx);
  CHECK_ST(ctx, rg_ring_push(ctx, ring, entries(ctx, 1, 2)), RG_OK);
  rg_tensor before = rg_ring_gather(ctx, ring, idx_of(ctx, 2, (int32_t[]){0, 1}));
  CHECK_ST(ctx, rg_ring_push(ctx, ring, entries(ctx, 3, 1)), RG_OK);
  rg_tensor after = rg_ring_gather(ctx, ring, idx_of(ctx, 3, (int32_t[]){2, 0, 1}));
  CHECK(rg_is_pending(ctx, before) && rg_is_pending(ctx, after) && !rg_is_pending(ctx, ring),
        "gathers are pending values until a barrier; the ring never is");
  int ids[3];
  read_ids(ctx, after, 3, ids);
  CHECK(ids[0] == 3 && ids[1] == 1 && ids[2] == 2, "after the push: %d %d %d, want 3 1 2",
        ids[0], ids[1], ids[2]);
  read_ids(ctx, before, 2, ids);
  CHECK(ids[0] == 1 && ids[1] == 2, "recorded before the push: %d %d, want 1 2", ids[0],
        ids[1]);
  CHECK(count_of(ctx, ring) == 3, "three entries pushed");
  /* One entry as [ROWS], and the raw table: slots 0..3 hold entries 1..4. */
  float one[ROWS] = {4, 40, 400}, table[CAP * ROWS];
  CHECK_ST(ctx, rg_ring_push(ctx, ring, rg_input(ctx, RG_F32, 1, (int64_t[]){ROWS}, one)),
           RG_OK);
  CHECK_ST(ctx, rg_read(ctx, ring, table, sizeof table), RG_OK);
  for (int s = 0; s < CAP; s++)
    CHECK(table[s * ROWS] == s + 1, "slot %d holds entry %g, want %d", s, table[s * ROWS],
          s + 1);
  char d[256];
  rg_describe(ctx, ring, d, sizeof d);
  CHECK(strstr(d, "ring buffer"), "rg_describe names a ring: %s", d);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Pushes past the capacity overwrite the oldest entries: entry 0 is always the oldest
   held, whatever slot it is in; a push of a whole capacity replaces everything. */
static void wrap(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor ring = rg_ring_new(ctx, RG_F32, CAP, ROWS);
  rg_step_begin(ctx);
  rg_ring_push(ctx, ring, entries(ctx, 1, 3));
  rg_ring_push(ctx, ring, entries(ctx, 4, 3)); /* slots 3, 0, 1: entries 1 and 2 go */
  int ids[CAP];
  read_ids(ctx, rg_ring_gather(ctx, ring, idx_of(ctx, CAP, (int32_t[]){0, 1, 2, 3})), CAP,
           ids);
  CHECK(ids[0] == 3 && ids[1] == 4 && ids[2] == 5 && ids[3] == 6,
        "after 6 pushes into 4 slots: %d %d %d %d, want 3 4 5 6", ids[0], ids[1], ids[2],
        ids[3]);
  CHECK(count_of(ctx, ring) == CAP, "a full ring holds its capacity");
  float table[CAP * ROWS];
  CHECK_ST(ctx, rg_read(ctx, ring, table, sizeof table), RG_OK);
  CHECK(table[0] == 5 && table[ROWS] == 6 && table[2 * ROWS] == 3 && table[3 * ROWS] == 4,
        "the raw slots: %g %g %g %g, want 5 6 3 4", table[0], table[ROWS], table[2 * ROWS],
        table[3 * ROWS]);
  for (int round = 0; round < 3; round++) /* whole capacities, from a head of 2 */
    rg_ring_push(ctx, ring, entries(ctx, 10 + 4 * round, CAP));
  read_ids(ctx, rg_ring_gather(ctx, ring, idx_of(ctx, CAP, (int32_t[]){3, 2, 1, 0})), CAP,
           ids);
  CHECK(ids[0] == 21 && ids[1] == 20 && ids[2] == 19 && ids[3] == 18,
        "newest first: %d %d %d %d, want 21 20 19 18", ids[0], ids[1], ids[2], ids[3]);
  /* I32 and BF16 rings move their elements as stored. */
  rg_tensor ri = rg_ring_new(ctx, RG_I32, 3, 2), rb = rg_ring_new(ctx, RG_BF16, 3, 2);
  int32_t iv[8] = {7, -8, 2147483647, -2147483647 - 1, 5, 6, 1, 2}, igot[4];
  uint16_t bv[8] = {0x3f80, 0xbf81, 0x7f80, 0x0001, 1, 2, 3, 4}, bgot[4];
  rg_ring_push(ctx, ri, rg_input(ctx, RG_I32, 2, (int64_t[]){4, 2}, iv) /* 4 > 3: refused */);
  CHECK(rg_error(ctx) == RG_ERR_MISUSE && msg_has(ctx, "1 <= k <= 3"),
        "4 entries into a ring of 3: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  rg_ring_push(ctx, ri, rg_input(ctx, RG_I32, 2, (int64_t[]){2, 2}, iv));
  rg_ring_push(ctx, rb, rg_input(ctx, RG_BF16, 2, (int64_t[]){2, 2}, bv));
  rg_tensor two = idx_of(ctx, 2, (int32_t[]){1, 0});
  CHECK_ST(ctx, rg_read(ctx, rg_ring_gather(ctx, ri, two), igot, sizeof igot), RG_OK);
  CHECK_ST(ctx, rg_read(ctx, rg_ring_gather(ctx, rb, two), bgot, sizeof bgot), RG_OK);
  CHECK(!memcmp(igot, iv + 2, 8) && !memcmp(igot + 2, iv, 8), "an I32 ring's entries change");
  CHECK(!memcmp(bgot, bv + 2, 4) && !memcmp(bgot + 2, bv, 4), "a BF16 ring's bits change");
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Misuse is refused when recorded, naming it; indices outside [0, count) and samples of
   an empty ring fail the barrier, naming the value, and change nothing. */
static void bounds(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor ring = rg_ring_new(ctx, RG_F32, CAP, ROWS);
  rg_tensor plain = rg_constant(ctx, RG_F32, 2, (int64_t[]){CAP, ROWS}, (float[CAP * ROWS]){0});
  rg_step_begin(ctx);
  /* Refused when recorded, each with a message naming the call and what is wrong. */
#define REFUSED(call, needle)                                                             \
  do {                                                                                    \
    rg_clear_error(ctx);                                                                  \
    (void)(call);                                                                         \
    CHECK(rg_error(ctx) == RG_ERR_MISUSE && msg_has(ctx, needle), "%s: %s", #call,        \
          rg_errmsg(ctx));                                                                \
  } while (0)
  rg_tensor e1 = entries(ctx, 0, 1);
  rg_tensor narrow = rg_input(ctx, RG_F32, 2, (int64_t[]){1, 2}, (float[2]){0});
  rg_tensor ints = rg_input(ctx, RG_I32, 1, (int64_t[]){ROWS}, (int32_t[3]){0});
  REFUSED(rg_ring_push(ctx, plain, e1), "rg_ring_push: operand 1 is not a ring buffer");
  REFUSED(rg_ring_push(ctx, ring, narrow), "entries [1,2] do not fit");
  REFUSED(rg_ring_push(ctx, ring, ints), "dtype I32 and the ring F32");
  REFUSED(rg_ring_push(ctx, ring, ring), "the ring itself");
  REFUSED(rg_ring_gather(ctx, ring, e1), "rg_ring_gather: operand 2 has dtype F32");
  REFUSED(rg_ring_gather(ctx, plain, ints), "not a ring buffer");
  REFUSED(rg_ring_sample(ctx, ring, 0), "n 0 is outside");
  REFUSED(rg_ring_new(ctx, RG_F32, 0, 3), "capacity 0");
  REFUSED(rg_ring_new(ctx, RG_F32, (int64_t)1 << 31, 1), "2^31 - 1");
  REFUSED(rg_ring_new(ctx, (rg_dtype)7, 2, 1), "dtype 7");
  REFUSED(rg_ring_count(ctx, ring, NULL), "count is NULL");
#undef REFUSED
  rg_clear_error(ctx);
  /* Sampling the empty ring fails at the barrier. */
  rg_tensor s = rg_ring_sample(ctx, ring, 3);
  int32_t got[3];
  CHECK_ST(ctx, rg_read(ctx, s, got, sizeof got), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_ring_sample") && msg_has(ctx, "empty"), "empty sample: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  /* Two entries; index 2 at position 1 is the first bad one; the push after it never
     runs (the drain stops), so the ring still holds two. */
  rg_step_begin(ctx);
  rg_ring_push(ctx, ring, entries(ctx, 1, 2));
  rg_tensor g = rg_ring_gather(ctx, ring, idx_of(ctx, 3, (int32_t[]){1, 2, -1}));
  rg_ring_push(ctx, ring, entries(ctx, 3, 1));
  float v[3 * ROWS];
  CHECK_ST(ctx, rg_read(ctx, g, v, sizeof v), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_ring_gather") && msg_has(ctx, "index 2 at position 1") &&
        msg_has(ctx, "[0, 2)"), "the bad index, its position and the count: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK(count_of(ctx, ring) == 2, "the push after the failure did not run");
  rg_step_begin(ctx);
  rg_tensor neg = rg_ring_gather(ctx, ring, idx_of(ctx, 2, (int32_t[]){0, -1}));
  CHECK_ST(ctx, rg_read(ctx, neg, v, sizeof(float) * 2 * ROWS), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "index -1 at position 1"), "a negative index: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* A reset persistent pool makes a ring stale; so does rg_ring_free, whose bytes the next
   ring of that size takes, while nodes queued before the free still read the old ring. */
static void stale(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_tensor ring = rg_ring_new(ctx, RG_F32, CAP, ROWS);
  rg_step_begin(ctx);
  rg_ring_push(ctx, ring, entries(ctx, 1, 2));
  CHECK_ST(ctx, rg_reset(ctx, RG_POOL_PERSISTENT), RG_OK);
  rg_step_begin(ctx);
  CHECK_ST(ctx, rg_ring_push(ctx, ring, entries(ctx, 3, 1)), RG_ERR_STALE);
  CHECK(msg_has(ctx, "rg_ring_push") && msg_has(ctx, "was reset"), "after the reset: %s",
        rg_errmsg(ctx));
  rg_clear_error(ctx);

  ring = rg_ring_new(ctx, RG_F32, CAP, ROWS);
  rg_step_begin(ctx);
  rg_ring_push(ctx, ring, entries(ctx, 1, 2));
  rg_tensor queued = rg_ring_gather(ctx, ring, idx_of(ctx, 2, (int32_t[]){1, 0}));
  rg_stats s0, s1;
  rg_stats_get(ctx, &s0);
  CHECK_ST(ctx, rg_ring_free(ctx, ring), RG_OK);
  rg_stats_get(ctx, &s1);
  CHECK(s1.persistent_bytes + 2 * 256 == s0.persistent_bytes, "the free gives back the "
        "ring's bytes: %zu -> %zu", s0.persistent_bytes, s1.persistent_bytes);
  CHECK(!rg_is_live(ctx, ring) && rg_pool_of(ctx, ring) == -1, "a freed ring is not live");
  char d[256];
  rg_describe(ctx, ring, d, sizeof d);
  CHECK(strstr(d, "rg_ring_free"), "rg_describe of a freed ring: %s", d);
  CHECK_ST(ctx, rg_ring_push(ctx, ring, entries(ctx, 3, 1)), RG_ERR_STALE);
  CHECK(msg_has(ctx, "rg_ring_free"), "a freed ring's message: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_ring_free(ctx, ring), RG_ERR_STALE); /* twice */
  rg_clear_error(ctx);
  /* The new ring takes the freed bytes (the pool grows by nothing) and is zeroed by a
     node queued after the gather, which still reads entries 2 and 1. */
  rg_tensor again = rg_ring_new(ctx, RG_F32, CAP, ROWS);
  rg_stats_get(ctx, &s1);
  CHECK(s1.persistent_bytes == s0.persistent_bytes && s1.device_bytes == s0.device_bytes,
        "the new ring reuses the freed bytes: %zu -> %zu", s0.persistent_bytes,
        s1.persistent_bytes);
  int ids[2];
  read_ids(ctx, queued, 2, ids);
  CHECK(ids[0] == 2 && ids[1] == 1, "queued before the free: %d %d, want 2 1", ids[0], ids[1]);
  CHECK(count_of(ctx, again) == 0, "the new ring is empty");
  float table[CAP * ROWS];
  CHECK_ST(ctx, rg_read(ctx, again, table, sizeof table), RG_OK);
  CHECK(table[0] == 0 && table[ROWS] == 0, "the new ring is zeroed: %g %g", table[0],
        table[ROWS]);
  /* A lent ring is not freed. */
  rg_memref m;
  CHECK_ST(ctx, rg_export(ctx, again, NULL, &m), RG_OK);
  CHECK_ST(ctx, rg_ring_free(ctx, again), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_unexport"), "a lent ring: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_unexport(ctx, again), RG_OK);
  CHECK_ST(ctx, rg_ring_free(ctx, again), RG_OK);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Draws lie in [0, count), change from one sample to the next, repeat with the seed, and
   cover the ring; a captured step (the same recorded graph) draws anew each step. */
static void sample(void) {
  int32_t first[2][64];
  for (int run = 0; run < 2; run++) {
    rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 5});
    if (!ctx) return;
    rg_tensor ring = rg_ring_new(ctx, RG_F32, 16, ROWS);
    rg_step_begin(ctx);
    rg_ring_push(ctx, ring, entries(ctx, 0, 3));
    int seen[3] = {0};
    for (int step = 0; step < 2; step++) {
      rg_step_begin(ctx);
      CHECK_ST(ctx, rg_read(ctx, rg_ring_sample(ctx, ring, 64), first[step], sizeof first[0]),
               RG_OK);
      for (int e = 0; e < 64; e++) {
        CHECK(first[step][e] >= 0 && first[step][e] < 3, "draw %d is %d, outside [0, 3)", e,
              first[step][e]);
        if (first[step][e] >= 0 && first[step][e] < 3) seen[first[step][e]]++;
      }
    }
    CHECK(memcmp(first[0], first[1], sizeof first[0]), "two samples drew the same indices");
    CHECK(seen[0] > 20 && seen[1] > 20 && seen[2] > 20, "128 draws from 3 entries: %d %d %d",
          seen[0], seen[1], seen[2]);
    static int32_t keep[64];
    if (run == 0) memcpy(keep, first[1], sizeof keep);
    else CHECK(!memcmp(keep, first[1], sizeof keep), "the same seed drew other indices");
    CHECK_ST(ctx, rg_close(ctx), RG_OK);
  }
}

/* A replay-buffer regression: each step pushes 4 new transitions (x0, x1, y with y = 2 x0
   - 3 x1 + 1), samples a batch of 32 on the device and fits a linear model to it. After
   the first steps (the ring filling, rg_backward's one seed) every step moves exactly one
   upload (the transitions) and one 4-byte download (the loss), and the loss falls. */
static void replay_loop(void) {
  rg_ctx *ctx = open_cpu_opts((rg_options){.seed = 3});
  if (!ctx) return;
  enum { K = 4, B = 32, STEPS = 300 };
  rg_tensor ring = rg_ring_new(ctx, RG_F32, 256, ROWS);
  rg_tensor w = rg_param(ctx, "w", RG_F32, 2, (int64_t[]){1, 2}, (rg_init){0});
  rg_tensor b = rg_param(ctx, "b", RG_F32, 1, (int64_t[]){1}, (rg_init){0});
  rg_optim *opt = rg_optim_adamw(ctx, &(rg_adamw_options){.lr = 0.05f});
  unsigned seed = 1;
  float loss = 0, first = 0;
  rg_stats s0, s1;
  for (int step = 0; step < STEPS; step++) {
    if (step == 10) rg_stats_get(ctx, &s0);
    rg_step_begin(ctx);
    float t[K * ROWS];
    for (int j = 0; j < K; j++) {
      float x0 = (float)(seed = seed * 1103515245u + 12345u) / 4294967296.f - .5f;
      float x1 = (float)(seed = seed * 1103515245u + 12345u) / 4294967296.f - .5f;
      t[j * ROWS] = x0, t[j * ROWS + 1] = x1, t[j * ROWS + 2] = 2 * x0 - 3 * x1 + 1;
    }
    rg_ring_push(ctx, ring, rg_input(ctx, RG_F32, 2, (int64_t[]){K, ROWS}, t));
    rg_tensor batch = rg_ring_gather(ctx, ring, rg_ring_sample(ctx, ring, B));
    rg_tensor pred = rg_linear(ctx, rg_slice(ctx, batch, 1, 0, 2), w, b);
    rg_tensor l = rg_mse(ctx, pred, rg_slice(ctx, batch, 1, 2, 1));
    rg_backward(ctx, l);
    rg_optim_step(opt);
    rg_zero_grad(ctx);
    CHECK_ST(ctx, rg_item(ctx, l, &loss), RG_OK);
    if (step == 0) first = loss;
  }
  rg_stats_get(ctx, &s1);
  uint64_t steps = STEPS - 10;
  CHECK(s1.up.count - s0.up.count == steps && s1.up_site[RG_SITE_INPUT].count -
        s0.up_site[RG_SITE_INPUT].count == steps, "uploads in %llu steps: %llu, want one a "
        "step", (unsigned long long)steps, (unsigned long long)(s1.up.count - s0.up.count));
  CHECK(s1.up.bytes - s0.up.bytes == steps * K * ROWS * 4, "upload bytes: %llu",
        (unsigned long long)(s1.up.bytes - s0.up.bytes));
  CHECK(s1.down.count - s0.down.count == steps && s1.down.bytes - s0.down.bytes == 4 * steps,
        "downloads in %llu steps: %llu of %llu bytes, want one of 4 a step",
        (unsigned long long)steps, (unsigned long long)(s1.down.count - s0.down.count),
        (unsigned long long)(s1.down.bytes - s0.down.bytes));
  CHECK(loss < 1e-3f && loss < first / 100, "the loss fell from %g to %g", first, loss);
  printf("replay loop: %d steps, loss %.4g -> %.4g; per step %.0f upload(s) of %.0f bytes, "
         "%.0f download(s) of %.0f bytes\n", STEPS, first, loss,
         (double)(s1.up.count - s0.up.count) / steps, (double)(s1.up.bytes - s0.up.bytes) /
         (double)(s1.up.count - s0.up.count), (double)(s1.down.count - s0.down.count) / steps,
         (double)(s1.down.bytes - s0.down.bytes) / (double)(s1.down.count - s0.down.count));
  int64_t c = count_of(ctx, ring);
  CHECK(c == 256, "the ring holds %lld, want 256", (long long)c);
  rg_optim_free(opt);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* A dry run models a ring's bytes without running anything. */
static void dry(void) {
  rg_ctx *ctx = NULL;
  CHECK_ST(ctx, rg_open(&ctx, &(rg_options){.device = RG_DEVICE_CPU, .quiet = 1,
                                             .dry_run = 1}), RG_OK);
  if (!ctx) return;
  rg_stats s;
  rg_tensor ring = rg_ring_new(ctx, RG_F32, 1000, 10);
  rg_step_begin(ctx);
  rg_ring_push(ctx, ring, entries(ctx, 0, 2));
  int64_t c = -1;
  CHECK_ST(ctx, rg_ring_count(ctx, ring, &c), RG_OK);
  rg_stats_get(ctx, &s);
  CHECK(s.persistent_bytes == 40192 + 256, "a dry run's ring bytes: %zu", s.persistent_bytes);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  ordering();
  wrap();
  bounds();
  stale();
  sample();
  replay_loop();
  dry();
  if (!failed()) printf("test_ring: ordering, wrap-around, bounds, stale handles, samples "
                        "and a replay loop's transfers all hold\n");
  return finish();
}
