/*
 * test_data.c - token datasets (rg_data_*): llm.c token files (written here, and by
 * tools/llmc_tokens.py when python3 is present), raw bytes, sequential and random
 * batches as pure functions of their number, targets one token after the inputs, the
 * prefetch worker changing nothing, data-parallel shares, and bad files refused with
 * messages that say what is wrong.
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <stdint.h>
#include <unistd.h>

/* The pattern tools/llmc_tokens.py --count N --vocab V writes. */
static int32_t pattern(int64_t i, int64_t vocab) { return (int32_t)((i * 7919 + 13) % vocab); }

/* An llm.c token file: header words magic, version, count (count_in_header tokens
   claimed), then ntok tokens of the pattern. */
static void write_llmc(const char *path, int32_t magic, int32_t version, int32_t count,
                       int64_t ntok, int64_t vocab) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL, "cannot write %s", path);
  if (!f) return;
  unsigned char h[1024] = {0};
  int32_t w[3] = {magic, version, count};
  for (int k = 0; k < 3; k++)
    for (int b = 0; b < 4; b++) h[4 * k + b] = (unsigned char)((uint32_t)w[k] >> (8 * b));
  fwrite(h, 1, sizeof h, f);
  for (int64_t i = 0; i < ntok; i++) {
    int32_t v = pattern(i, vocab);
    unsigned char b[2] = {(unsigned char)(v & 255), (unsigned char)(v >> 8)};
    fwrite(b, 1, 2, f);
  }
  fclose(f);
}

static void write_bytes(const char *path, const unsigned char *p, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL, "cannot write %s", path);
  if (!f) return;
  fwrite(p, 1, n, f);
  fclose(f);
}

/* Batch of d as host arrays idx, tgt [B*T]; 0 on success. */
static int take(rg_ctx *ctx, rg_data *d, int64_t B, int64_t T, int random, int32_t *idx,
                int32_t *tgt) {
  rg_tensor x, y;
  rg_status st = rg_data_batch(d, B, T, random, &x, &y);
  CHECK(st == RG_OK, "rg_data_batch -> %s: %s", rg_status_str(st), rg_errmsg(ctx));
  if (st != RG_OK) return 1;
  size_t bytes = sizeof(int32_t) * (size_t)(B * T);
  CHECK(rg_dim(ctx, x, 0) == B && rg_dim(ctx, x, 1) == T && rg_dtype_of(ctx, x) == RG_I32,
        "idx is not I32 [B, T]");
  st = rg_read(ctx, x, idx, bytes);
  if (st == RG_OK) st = rg_read(ctx, y, tgt, bytes);
  CHECK(st == RG_OK, "rg_read -> %s: %s", rg_status_str(st), rg_errmsg(ctx));
  return st != RG_OK;
}

/* Every row of a batch is a window of the pattern file: idx[t] = tok[s + t], tgt[t] =
   tok[s + t + 1] for some s; returns the row starts (or -1 where none fits). */
static void row_starts(const int32_t *idx, const int32_t *tgt, int64_t B, int64_t T,
                       int64_t ntok, int64_t vocab, int64_t *start) {
  for (int64_t b = 0; b < B; b++) {
    start[b] = -1;
    for (int64_t s = 0; s + T < ntok && start[b] < 0; s++) {
      int ok = 1;
      for (int64_t t = 0; t < T && ok; t++)
        ok = idx[b * T + t] == pattern(s + t, vocab) && tgt[b * T + t] == pattern(s + t + 1, vocab);
      if (ok) start[b] = s;
    }
  }
}

static void test_llmc_sequential(void) {
  enum { N = 1000, V = 5000, B = 3, T = 16 };
  write_llmc("seq.bin", 20240520, 1, N, N, V);
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_data *d = rg_data_open(ctx, "seq.bin", &(rg_data_options){.vocab = V});
  CHECK(d != NULL, "rg_data_open: %s", rg_errmsg(ctx));
  if (!d) {
    rg_close(ctx);
    return;
  }
  CHECK(rg_data_tokens(d) == N, "tokens %lld", (long long)rg_data_tokens(d));
  CHECK(rg_data_format_of(d) == RG_DATA_LLMC, "AUTO did not read the magic");
  static int32_t idx[B * T], tgt[B * T];
  int64_t E = (N - 1) / (B * T); /* 20 batches an epoch */
  for (int64_t n = 0; n < E + 2; n++) {
    CHECK(rg_data_next(d) == n, "next %lld, want %lld", (long long)rg_data_next(d), (long long)n);
    if (take(ctx, d, B, T, 0, idx, tgt)) break;
    int64_t k = n % E;
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < T; t++) {
        int64_t s = (k * B + b) * T + t;
        CHECK(idx[b * T + t] == pattern(s, V) && tgt[b * T + t] == pattern(s + 1, V),
              "batch %lld row %lld col %lld: %d %d, want %d %d", (long long)n, (long long)b,
              (long long)t, idx[b * T + t], tgt[b * T + t], pattern(s, V), pattern(s + 1, V));
      }
    CHECK(rg_data_epoch(d) == (n + 1) / E, "after batch %lld epoch %lld", (long long)n,
          (long long)rg_data_epoch(d));
  }
  /* Seeking back gives batch 0 again; so does batch E (the wrap). */
  static int32_t again[B * T], tgt2[B * T];
  CHECK_ST(ctx, rg_data_seek(d, 0), RG_OK);
  take(ctx, d, B, T, 0, idx, tgt);
  CHECK_ST(ctx, rg_data_seek(d, E), RG_OK);
  take(ctx, d, B, T, 0, again, tgt2);
  CHECK(!memcmp(idx, again, sizeof idx) && !memcmp(tgt, tgt2, sizeof tgt),
        "batch E is not batch 0");
  rg_data_free(d);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Random batches: a function of (seed, n); windows of the file; every start reachable. */
static void test_random(void) {
  enum { N = 300, V = 700, B = 4, T = 8, STEPS = 40 };
  write_llmc("rand.bin", 20240520, 1, N, N, V);
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_data *a = rg_data_open(ctx, "rand.bin", &(rg_data_options){.seed = 7});
  rg_data *b = rg_data_open(ctx, "rand.bin", &(rg_data_options){.seed = 7, .no_prefetch = 1});
  rg_data *c = rg_data_open(ctx, "rand.bin", &(rg_data_options){.seed = 8});
  CHECK(a && b && c, "rg_data_open: %s", rg_errmsg(ctx));
  if (!a || !b || !c) {
    rg_close(ctx);
    return;
  }
  static int32_t ia[STEPS][B * T], ta[B * T], ib[B * T], tb[B * T], ic[B * T], tc[B * T];
  int differ = 0, lo = N, hi = -1;
  for (int n = 0; n < STEPS; n++) {
    if (take(ctx, a, B, T, 1, ia[n], ta) || take(ctx, b, B, T, 1, ib, tb) ||
        take(ctx, c, B, T, 1, ic, tc))
      break;
    CHECK(!memcmp(ia[n], ib, sizeof ib) && !memcmp(ta, tb, sizeof tb),
          "batch %d differs with and without prefetch", n);
    differ += memcmp(ia[n], ic, sizeof ic) != 0;
    int64_t s[B];
    row_starts(ia[n], ta, B, T, N, V, s);
    for (int r = 0; r < B; r++) {
      CHECK(s[r] >= 0 && s[r] + T < N, "batch %d row %d is no window of the file", n, r);
      lo = s[r] < lo ? (int)s[r] : lo, hi = s[r] > hi ? (int)s[r] : hi;
    }
  }
  CHECK(differ > STEPS / 2, "seeds 7 and 8 gave the same batches %d times", STEPS - differ);
  CHECK(lo < 40 && hi > N - T - 40, "starts span [%d, %d] of [0, %d)", lo, hi, N - T);
  /* Batch 5 again, after seeking (the prefetched batch 40 is not used). */
  CHECK_ST(ctx, rg_data_seek(a, 5), RG_OK);
  take(ctx, a, B, T, 1, ib, tb);
  CHECK(!memcmp(ia[5], ib, sizeof ib), "batch 5 after a seek differs");
  CHECK(rg_data_next(a) == 6, "next %lld after batch 5", (long long)rg_data_next(a));
  /* A batch of another shape right after a prefetch of the old one. */
  take(ctx, a, 2, 3, 1, ib, tb);
  for (int r = 0; r < 2; r++)
    for (int t = 0; t + 1 < 3; t++)
      CHECK(tb[r * 3 + t] == ib[r * 3 + t + 1], "targets are not the inputs shifted");
  CHECK(rg_data_epoch(a) == (int64_t)(7.0 * 2 * 3 / N), "epoch of random batches %lld",
        (long long)rg_data_epoch(a));
  rg_data_free(a);
  rg_data_free(c);
  CHECK_ST(ctx, rg_close(ctx), RG_OK); /* frees b */
}

/* Two ranks of B rows take the rows of one process of 2B, in both modes. */
static void test_shards(void) {
  enum { N = 500, V = 300, B = 2, T = 5 };
  write_llmc("shard.bin", 20240520, 1, N, N, V);
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_data *one = rg_data_open(ctx, "shard.bin", &(rg_data_options){.seed = 3});
  rg_data *r0 = rg_data_open(ctx, "shard.bin", &(rg_data_options){.seed = 3, .world = 2});
  rg_data *r1 = rg_data_open(ctx, "shard.bin",
                             &(rg_data_options){.seed = 3, .world = 2, .rank = 1});
  CHECK(one && r0 && r1, "rg_data_open: %s", rg_errmsg(ctx));
  static int32_t all[2 * B * T], at[2 * B * T], x0[B * T], t0[B * T], x1[B * T], t1[B * T];
  for (int n = 0; one && r0 && r1 && n < 60; n++) {
    int random = n % 2;
    if (take(ctx, one, 2 * B, T, random, all, at) || take(ctx, r0, B, T, random, x0, t0) ||
        take(ctx, r1, B, T, random, x1, t1))
      break;
    CHECK(!memcmp(all, x0, sizeof x0) && !memcmp(all + B * T, x1, sizeof x1) &&
              !memcmp(at, t0, sizeof t0) && !memcmp(at + B * T, t1, sizeof t1),
          "batch %d (%s): the ranks' rows are not the single process's", n,
          random ? "random" : "sequential");
  }
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

static void test_raw(void) {
  unsigned char bytes[200];
  for (int i = 0; i < 200; i++) bytes[i] = (unsigned char)(i * 37 + 11);
  write_bytes("raw.txt", bytes, sizeof bytes);
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_data *d = rg_data_open(ctx, "raw.txt", NULL);
  CHECK(d && rg_data_tokens(d) == 200 && rg_data_format_of(d) == RG_DATA_RAW,
        "raw bytes: %s", rg_errmsg(ctx));
  int32_t idx[2 * 9], tgt[2 * 9];
  if (d && !take(ctx, d, 2, 9, 0, idx, tgt)) {
    take(ctx, d, 2, 9, 0, idx, tgt); /* batch 1: rows at 18 and 27 */
    for (int b = 0; b < 2; b++)
      for (int t = 0; t < 9; t++) {
        int s = 18 + 9 * b + t;
        CHECK(idx[b * 9 + t] == bytes[s] && tgt[b * 9 + t] == bytes[s + 1],
              "raw row %d col %d: %d %d, want %d %d", b, t, idx[b * 9 + t], tgt[b * 9 + t],
              bytes[s], bytes[s + 1]);
      }
  }
  /* vocab below a byte in the file: the first such byte and its position are named. */
  rg_clear_error(ctx);
  CHECK(!rg_data_open(ctx, "raw.txt", &(rg_data_options){.format = RG_DATA_RAW, .vocab = 200}),
        "a byte >= vocab was accepted");
  int first = 0;
  while (bytes[first] < 200) first++;
  char want[64];
  snprintf(want, sizeof want, "token %d (counting from 0) is %d", first, bytes[first]);
  CHECK(rg_error(ctx) == RG_ERR_IO && strstr(rg_errmsg(ctx), want),
        "vocab: %s (want '%s')", rg_errmsg(ctx), want);
  /* Forcing LLMC on a file without its magic. */
  rg_clear_error(ctx);
  unsigned char big[2048] = {1, 2, 3};
  write_bytes("nomagic.bin", big, sizeof big);
  CHECK(!rg_data_open(ctx, "nomagic.bin", &(rg_data_options){.format = RG_DATA_LLMC}) &&
            rg_error(ctx) == RG_ERR_IO && strstr(rg_errmsg(ctx), "magic 20240520"),
        "wrong magic: %s", rg_errmsg(ctx));
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

/* Opening path must fail with status want and a message holding text. */
static void refused(rg_ctx *ctx, const char *path, rg_data_options o, rg_status want,
                    const char *text) {
  rg_clear_error(ctx);
  rg_data *d = rg_data_open(ctx, path, &o);
  CHECK(!d && rg_error(ctx) == want && strstr(rg_errmsg(ctx), text),
        "%s: got %s '%s', want %s with '%s'", path, rg_status_str(rg_error(ctx)),
        rg_errmsg(ctx), rg_status_str(want), text);
  if (d) rg_data_free(d);
}

static void test_bad_files(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_data_options llmc = {.format = RG_DATA_LLMC};
  write_llmc("magic.bin", 20240521, 1, 10, 10, 100);
  refused(ctx, "magic.bin", llmc, RG_ERR_IO, "does not start with llm.c's magic");
  write_llmc("version.bin", 20240520, 2, 10, 10, 100);
  refused(ctx, "version.bin", llmc, RG_ERR_IO, "version 2");
  write_llmc("short.bin", 20240520, 1, 10, 9, 100);
  refused(ctx, "short.bin", llmc, RG_ERR_IO, "truncated");
  refused(ctx, "short.bin", (rg_data_options){0}, RG_ERR_IO, "truncated"); /* AUTO too */
  write_llmc("long.bin", 20240520, 1, 10, 11, 100);
  refused(ctx, "long.bin", llmc, RG_ERR_IO, "longer than its header says");
  write_llmc("zero.bin", 20240520, 1, 0, 0, 100);
  refused(ctx, "zero.bin", llmc, RG_ERR_IO, "holds 0 tokens");
  unsigned char head[100] = {0x88, 0xd8, 0x34, 0x01}; /* the magic, then too few bytes */
  write_bytes("header.bin", head, sizeof head);
  refused(ctx, "header.bin", llmc, RG_ERR_IO, "fewer than an llm.c token file's header");
  write_bytes("empty.txt", head, 0);
  refused(ctx, "empty.txt", (rg_data_options){0}, RG_ERR_IO, "empty");
  refused(ctx, "no-such-file.bin", (rg_data_options){0}, RG_ERR_IO, "cannot open it");
  refused(ctx, ".", (rg_data_options){0}, RG_ERR_IO, "not a regular file");
  write_llmc("vocab.bin", 20240520, 1, 50, 50, 60000);
  /* pattern(i) = (i * 7919 + 13) mod 60000: the first >= 5000 is i = 1, 7932 */
  refused(ctx, "vocab.bin", (rg_data_options){.vocab = 5000}, RG_ERR_IO,
          "token 1 (counting from 0) is 7932, not below the vocabulary size 5000");
  refused(ctx, "vocab.bin", (rg_data_options){.vocab = 70000}, RG_ERR_MISUSE, "vocab 70000");
  refused(ctx, "vocab.bin", (rg_data_options){.format = 9}, RG_ERR_MISUSE, "format 9");
  refused(ctx, "vocab.bin", (rg_data_options){.world = 2, .rank = 2}, RG_ERR_MISUSE, "rank 2");

  /* A batch larger than the file: refused, nothing taken; the next fits. */
  rg_clear_error(ctx);
  rg_data *d = rg_data_open(ctx, "vocab.bin", NULL); /* 50 tokens */
  rg_tensor x = RG_NONE, y = RG_NONE;
  CHECK(d != NULL, "vocab.bin: %s", rg_errmsg(ctx));
  if (d) {
    CHECK_ST(ctx, rg_data_batch(d, 7, 7, 0, &x, &y), RG_OK); /* 49 + 1 fits */
    CHECK(rg_is_live(ctx, x), "7 x 7 of 50 tokens was refused: %s", rg_errmsg(ctx));
    rg_clear_error(ctx);
    CHECK_ST(ctx, rg_data_batch(d, 5, 10, 1, &x, &y), RG_ERR_MISUSE); /* 51 > 50 */
    CHECK(!rg_is_live(ctx, x) && strstr(rg_errmsg(ctx), "holds 50"), "5 x 10: %s",
          rg_errmsg(ctx));
    CHECK(rg_data_next(d) == 1, "a refused batch advanced the number");
    rg_clear_error(ctx);
    CHECK_ST(ctx, rg_data_batch(d, 0, 4, 0, &x, &y), RG_ERR_MISUSE);
    CHECK_ST(ctx, rg_data_seek(d, -1), RG_ERR_MISUSE);
    rg_clear_error(ctx);
  }
  CHECK_ST(ctx, rg_data_batch(NULL, 1, 1, 0, &x, &y), RG_ERR_MISUSE);
  CHECK(rg_data_tokens(NULL) == 0 && rg_data_epoch(NULL) == 0, "NULL handle");
  rg_data_free(NULL);
  CHECK_ST(ctx, rg_close(ctx), RG_OK); /* frees d, its worker included */
}

/* The file tools/llmc_tokens.py writes reads back as the pattern. */
static void test_script(void) {
  const char *src = getenv("RG_SOURCE_DIR");
  if (!src || system("command -v python3 >/dev/null 2>&1") != 0) {
    printf("test_script: skipped (no python3 or RG_SOURCE_DIR)\n");
    return;
  }
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "python3 '%s/tools/llmc_tokens.py' script.bin --count 777 "
           "--vocab 50257", src);
  CHECK(system(cmd) == 0, "%s failed", cmd);
  rg_ctx *ctx = open_cpu();
  if (!ctx) return;
  rg_data *d = rg_data_open(ctx, "script.bin",
                            &(rg_data_options){.format = RG_DATA_LLMC, .vocab = 50257});
  CHECK(d && rg_data_tokens(d) == 777, "the script's file: %s", rg_errmsg(ctx));
  int32_t idx[4 * 12], tgt[4 * 12];
  if (d && !take(ctx, d, 4, 12, 0, idx, tgt))
    for (int i = 0; i < 4 * 12; i++)
      CHECK(idx[i] == pattern(i, 50257) && tgt[i] == pattern(i + 1, 50257),
            "token %d of the script's file: %d, want %d", i, idx[i], pattern(i, 50257));
  CHECK_ST(ctx, rg_close(ctx), RG_OK);
}

int main(void) {
  test_llmc_sequential();
  test_random();
  test_shards();
  test_raw();
  test_bad_files();
  test_script();
  return finish();
}
