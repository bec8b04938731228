/*
 * task.c - what resgrad-train learns: multi-digit addition or the bytes of a text.
 *
 * Addition: a problem is "123+456=" followed by the answer written backwards ("975"
 * then the carry digit "0"), so each answer digit depends only on digits already seen;
 * that is what makes it learnable for a causal model in a few thousand steps. Problems
 * come from a seed, half of the training operands shorter than D digits (add_operand);
 * an unordered pair {a, b} is held out when a hash of it says so, so neither a+b nor b+a
 * is ever trained on.
 * Text: a byte-level language model; the last 10% of the file is held out.
 */
#include "train.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define TOK_PLUS 10 /* addition tokens: digits 0..9, then '+' and '=' */
#define TOK_EQUALS 11
#define ADD_VOCAB 12
#define HELD_OUT_PER_MILLE 100 /* share of unordered pairs {a, b} never trained on */
#define HELD_OUT_LOSS_N 256    /* held-out problems (or text windows) in the loss curve */

/* ---- random numbers: pure functions of (seed, stream, index) ------------------------- */

uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rng_next(uint64_t *s) { return mix64(*s += 0x9e3779b97f4a7c15ull); }
double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

uint64_t stream_seed(uint64_t seed, int stream, int64_t index) {
  uint64_t s = mix64(seed + 0x9e3779b97f4a7c15ull * (uint64_t)stream);
  return mix64(s ^ ((uint64_t)index * 0xd1b54a32d192ed03ull));
}

/* ---- tasks ------------------------------------------------------------------------- */

void task_free(task *t) {
  free(t->data);
  free(t->ho_idx);
  free(t->ho_tgt);
  free(t->ev_a);
  free(t->ev_b);
}

/* Held out or not is decided on the unordered pair, so b+a is not a hint for a+b. */
static int add_held_out(uint64_t a, uint64_t b) {
  uint64_t lo = a < b ? a : b, hi = a < b ? b : a;
  return mix64(mix64(lo + 0x51ed27a3ull) ^ hi) % 1000 < HELD_OUT_PER_MILLE;
}

/* seq: a (most significant digit first), '+', b, '=', then a+b backwards with its carry
   digit last: 3D+3 tokens. */
void add_encode(int D, uint64_t a, uint64_t b, int32_t *seq) {
  uint64_t c = a + b;
  for (int i = D - 1; i >= 0; i--, a /= 10, b /= 10) {
    seq[i] = (int32_t)(a % 10);
    seq[D + 1 + i] = (int32_t)(b % 10);
  }
  seq[D] = TOK_PLUS;
  seq[2 * D + 1] = TOK_EQUALS;
  for (int i = 0; i <= D; i++, c /= 10) seq[2 * D + 2 + i] = (int32_t)(c % 10);
}

/* One training row: the model reads seq[0..T) and is scored only on the answer. */
void add_row(const task *t, uint64_t a, uint64_t b, int32_t *idx, int32_t *tgt) {
  int32_t seq[32];
  int D = t->digits;
  add_encode(D, a, b, seq);
  for (int64_t i = 0; i < t->T; i++) {
    idx[i] = seq[i];
    tgt[i] = i + 1 >= 2 * D + 2 ? seq[i + 1] : IGNORE_TOKEN;
  }
}

/* A training operand is half the time any D-digit number and otherwise a shorter one
   (zero-padded): in short problems the high answer digits are a bare carry, which teaches
   the carry apart from the digit sums. Held-out problems are uniform over all pairs. */
static uint64_t add_operand(const task *t, uint64_t *s, int training) {
  uint64_t range = t->range;
  if (training && t->digits > 1 && (rng_next(s) & 1)) {
    int k = 1 + (int)(rng_next(s) % (uint64_t)(t->digits - 1)); /* 1..D-1 digits */
    for (range = 10; k > 1; k--) range *= 10;
  }
  return rng_next(s) % range;
}

static void add_draw(const task *t, uint64_t *s, int held_out, uint64_t *a, uint64_t *b) {
  do {
    *a = add_operand(t, s, !held_out);
    *b = add_operand(t, s, !held_out);
  } while (add_held_out(*a, *b) != held_out);
}

/* Rows [first, first + B) of the batch of a step, a pure function of (seed, step): the
   rows before first (other ranks' share) are drawn, not kept. */
void make_batch(const task *t, uint64_t seed, int64_t step, int64_t first, int64_t B,
                       int32_t *idx, int32_t *tgt) {
  uint64_t s = stream_seed(seed, STREAM_TRAIN, step);
  for (int64_t i = 0; i < first + B; i++) {
    int32_t *x = i < first ? NULL : idx + (i - first) * t->T;
    int32_t *y = i < first ? NULL : tgt + (i - first) * t->T;
    if (t->kind == TASK_ADD) {
      uint64_t a, b;
      add_draw(t, &s, 0, &a, &b);
      if (x) add_row(t, a, b, x, y);
    } else {
      int64_t off = (int64_t)(rng_next(&s) % (uint64_t)(t->ntrain - t->T));
      if (!x) continue;
      memcpy(x, t->data + off, sizeof *x * (size_t)t->T);
      memcpy(y, t->data + off + 1, sizeof *y * (size_t)t->T);
    }
  }
}

static int alloc_heldout(task *t, int64_t n) {
  t->ho_n = n;
  t->ho_idx = malloc(sizeof *t->ho_idx * (size_t)(n * t->T));
  t->ho_tgt = malloc(sizeof *t->ho_tgt * (size_t)(n * t->T));
  if (t->ho_idx && t->ho_tgt) return 0;
  errorf("out of memory for the held-out set");
  return EXIT_RUNTIME;
}

/* Addition: a fixed held-out set (independent of --seed, so runs are comparable). */
int task_add_init(task *t, const opts *o) {
  t->kind = TASK_ADD;
  t->digits = (int)o->digits;
  t->vocab = ADD_VOCAB;
  t->T = 3 * o->digits + 2;
  t->range = 1;
  for (int i = 0; i < t->digits; i++) t->range *= 10;
  t->ev_n = o->eval;
  t->ev_a = malloc(sizeof *t->ev_a * (size_t)t->ev_n);
  t->ev_b = malloc(sizeof *t->ev_b * (size_t)t->ev_n);
  if (!t->ev_a || !t->ev_b) {
    errorf("out of memory for %lld held-out problems", (long long)t->ev_n);
    return EXIT_RUNTIME;
  }
  uint64_t s = stream_seed(0, STREAM_EVAL, 0);
  int any = 0;
  for (uint64_t a = 0; a < t->range && a < 1000 && !any; a++) /* some pair is held out? */
    for (uint64_t b = 0; b < t->range && !any; b++) any = add_held_out(a, b);
  if (!any) {
    errorf("--digits %d leaves no problem to hold out; use --digits 2 or more", t->digits);
    return EXIT_USAGE;
  }
  for (int64_t i = 0; i < t->ev_n; i++) add_draw(t, &s, 1, &t->ev_a[i], &t->ev_b[i]);
  int64_t n = t->ev_n < HELD_OUT_LOSS_N ? t->ev_n : HELD_OUT_LOSS_N;
  if (alloc_heldout(t, n)) return EXIT_RUNTIME;
  for (int64_t i = 0; i < n; i++)
    add_row(t, t->ev_a[i], t->ev_b[i], t->ho_idx + i * t->T, t->ho_tgt + i * t->T);
  return 0;
}

/* The whole of path ("-": standard input, to its end). */
static int read_file(const char *path, unsigned char **out, int64_t *n) {
  int std = !strcmp(path, "-");
  FILE *f = std ? stdin : fopen(path, "rb");
  if (!f) {
    errorf("--text '%s': %s", path, strerror(errno));
    return EXIT_USAGE;
  }
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = malloc(cap);
  for (size_t got = 1; buf && got > 0;) {
    if (len == cap) {
      unsigned char *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
      if (!buf) break;
    }
    got = fread(buf + len, 1, cap - len, f);
    len += got;
  }
  int err = ferror(f) ? errno : 0;
  if (!std) fclose(f);
  if (!buf || err) {
    if (buf) errorf("--text '%s': cannot read it: %s", std ? "-" : path, strerror(err));
    else errorf("--text '%s': out of memory reading it", path);
    free(buf);
    return EXIT_RUNTIME;
  }
  *out = buf;
  *n = (int64_t)len;
  return 0;
}

static const char HEX[] = "0123456789abcdef";

void vocab_to_hex(const task *t, char *out) {
  for (int64_t i = 0; i < t->vocab; i++) {
    out[2 * i] = HEX[t->byte_of[i] >> 4];
    out[2 * i + 1] = HEX[t->byte_of[i] & 15];
  }
  out[2 * t->vocab] = 0;
}

int hexval(char c) {
  const char *p = c ? strchr(HEX, c) : NULL;
  return p ? (int)(p - HEX) : -1;
}

/* Sets the vocabulary from a checkpoint's hex string; 0 or -1 when malformed. */
static int vocab_from_hex(task *t, const char *hex) {
  size_t n = strlen(hex);
  if (n == 0 || n % 2 || n > 512) return -1;
  t->vocab = (int64_t)(n / 2);
  for (int i = 0; i < 256; i++) t->tok_of[i] = -1;
  for (int64_t i = 0; i < t->vocab; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0 || t->tok_of[hi * 16 + lo] >= 0) return -1;
    t->byte_of[i] = (unsigned char)(hi * 16 + lo);
    t->tok_of[hi * 16 + lo] = (int)i;
  }
  return 0;
}

static void vocab_from_bytes(task *t, const unsigned char *buf, int64_t n) {
  int present[256] = {0};
  for (int64_t i = 0; i < n; i++) present[buf[i]] = 1;
  t->vocab = 0;
  for (int c = 0; c < 256; c++) {
    t->tok_of[c] = present[c] ? (int)t->vocab : -1;
    if (present[c]) t->byte_of[t->vocab++] = (unsigned char)c;
  }
}

/* Encodes the file; the last 10% (at least one window) is held out. */
static int text_split(task *t, const opts *o, const unsigned char *buf, int64_t n) {
  int64_t win = t->T + 1, ho = n / 10 > win ? n / 10 : win;
  if (n - ho < win + 1) {
    errorf("--text '%s' has %lld bytes; --block %lld needs at least %lld (or a smaller "
           "--block)", o->text, (long long)n, (long long)t->T, (long long)(2 * win + 1));
    return EXIT_USAGE;
  }
  t->data = malloc(sizeof *t->data * (size_t)n);
  if (!t->data) {
    errorf("out of memory for the %lld bytes of '%s'", (long long)n, o->text);
    return EXIT_RUNTIME;
  }
  for (int64_t i = 0; i < n; i++) {
    t->data[i] = t->tok_of[buf[i]];
    if (t->data[i] < 0) {
      errorf("--text '%s' has byte 0x%02x at offset %lld, which the vocabulary of --resume "
             "'%s' lacks: the checkpoint was trained on another text", o->text, buf[i],
             (long long)i, o->resume);
      return EXIT_USAGE;
    }
  }
  t->ndata = n;
  t->ntrain = n - ho;
  int64_t k = ho / win < HELD_OUT_LOSS_N / 4 ? ho / win : HELD_OUT_LOSS_N / 4;
  if (alloc_heldout(t, k)) return EXIT_RUNTIME;
  for (int64_t i = 0; i < k; i++) { /* windows spread evenly over the held-out tail */
    int64_t off = t->ntrain + (k > 1 ? i * (ho - win) / (k - 1) : 0);
    memcpy(t->ho_idx + i * t->T, t->data + off, sizeof(int32_t) * (size_t)t->T);
    memcpy(t->ho_tgt + i * t->T, t->data + off + 1, sizeof(int32_t) * (size_t)t->T);
  }
  return 0;
}

/* Text: vocabulary from the checkpoint (hex, when resuming) or from the file's bytes. */
int task_text_init(task *t, const opts *o, const char *ckpt_vocab) {
  t->kind = TASK_TEXT;
  t->T = o->block;
  if (ckpt_vocab && vocab_from_hex(t, ckpt_vocab)) {
    errorf("--resume '%s': its resgrad-train.vocab metadata is malformed", o->resume);
    return EXIT_USAGE;
  }
  if (!o->text) return 0; /* resumed for sampling only */
  unsigned char *buf = NULL;
  int64_t n = 0;
  int rc = read_file(o->text, &buf, &n);
  if (rc) return rc;
  if (!ckpt_vocab) vocab_from_bytes(t, buf, n);
  rc = text_split(t, o, buf, n);
  free(buf);
  return rc;
}


/* ---- token files ---------------------------------------------------------------------- */

/* Opens path on ctx as the run will (every token below --vocab); EXIT_USAGE naming opt
   and the library's reason when the file is not a token file of this vocabulary. */
static rg_data *open_tokens(rg_ctx *ctx, const char *opt, const char *path, int64_t vocab) {
  rg_data *d = rg_data_open(ctx, path, &(rg_data_options){.vocab = vocab, .no_prefetch = 1});
  if (!d) errorf("%s '%s': %s", opt, path, rg_errmsg(ctx));
  return d;
}

/* Tokens: both files checked on a CPU context of its own (the run's context does not
   exist yet); the held-out rows are the first windows of --val-tokens, read back. */
int task_tokens_init(task *t, const opts *o) {
  t->kind = TASK_TOKENS;
  t->vocab = o->vocab;
  t->T = o->block;
  if (!o->tokens) return 0; /* resumed for its summary only */
  rg_ctx *ctx = NULL;
  if (rg_open(&ctx, &(rg_options){.device = RG_DEVICE_CPU, .quiet = 1, .threads = 1}) != RG_OK) {
    errorf("cannot open a CPU context to read --tokens");
    return EXIT_RUNTIME;
  }
  int rc = 0;
  rg_data *d = open_tokens(ctx, "--tokens", o->tokens, o->vocab);
  if (!d) rc = EXIT_USAGE;
  else if ((t->ntok = rg_data_tokens(d)) < o->batch * t->T + 1) {
    errorf("--tokens '%s' has %lld tokens; --batch %lld of --block %lld needs at least %lld "
           "(a smaller --batch or --block, or a larger file)", o->tokens, (long long)t->ntok,
           (long long)o->batch, (long long)t->T, (long long)(o->batch * t->T + 1));
    rc = EXIT_USAGE;
  }
  rg_data *v = !rc && o->val_tokens ? open_tokens(ctx, "--val-tokens", o->val_tokens, o->vocab)
                                    : NULL;
  if (!rc && o->val_tokens && !v) rc = EXIT_USAGE;
  int64_t k = v ? (rg_data_tokens(v) - 1) / t->T : 0;
  if (v && k < 1) {
    errorf("--val-tokens '%s' has %lld tokens; --block %lld needs at least %lld",
           o->val_tokens, (long long)rg_data_tokens(v), (long long)t->T, (long long)(t->T + 1));
    rc = EXIT_USAGE;
  }
  if (!rc && v) {
    k = k < HELD_OUT_LOSS_N / 4 ? k : HELD_OUT_LOSS_N / 4;
    rc = alloc_heldout(t, k);
    rg_tensor x, y;
    size_t bytes = sizeof(int32_t) * (size_t)(k * t->T);
    rg_status st = rc ? RG_OK : rg_data_batch(v, k, t->T, 0, &x, &y);
    if (!rc && st == RG_OK) st = rg_read(ctx, x, t->ho_idx, bytes);
    if (!rc && st == RG_OK) st = rg_read(ctx, y, t->ho_tgt, bytes);
    if (!rc && st != RG_OK) rc = rg_fail(ctx, st, "reading --val-tokens");
  }
  rg_close(ctx); /* frees d and v */
  return rc;
}
