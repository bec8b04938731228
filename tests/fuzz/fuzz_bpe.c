/*
 * fuzz_bpe.c - libFuzzer target for the BPE tokenizer (resgrad_text.h): its encoder
 * against the literal algorithm, and its loaders on hostile files.
 *
 * Input: the first byte is the mode, the rest the body.
 *  mode % 3 == 0: the body is text, encoded with a fixed tokenizer whose merges are
 *    chosen to be awkward (a token made by two different pairs, runs that merge in
 *    overlapping ways, merges of merges of spaces, a multi-byte character, a special
 *    token). What must hold:
 *     - encode fails exactly when the body is not UTF-8, with a message naming byte
 *       offset of the first bad byte;
 *     - otherwise the count is at most the body's length, equal with any cap (a cap of 0
 *       or 1 writes nothing past it), the ids are the literal algorithm's (GPT-2's bpe():
 *       each round merges every occurrence of the lowest-ranked pair, left to right),
 *       run on the same pieces, and decode gives the body back byte for byte.
 *  mode % 3 == 1: the body is a tokenizer.json; mode % 3 == 2: the body is vocab.json,
 *    a 0 byte, then merges.txt. Loading must not crash, leak or hang; a failure has a
 *    message starting "rg_bpe_load: "; a tokenizer that loads encodes a fixed text into at
 *    most its length in ids, each of which decodes.
 * Any violation prints "fuzz_bpe: ..." and aborts, so libFuzzer keeps the input.
 * Files: "rg-fuzz-bpe-<pid>-XXXXXX/" in $TMPDIR, else /tmp; removed at exit.
 *
 * The seed corpus (tests/fuzz/corpus/bpe) holds a few texts and files of each mode,
 * written by hand; each file is named by the SHA-1 of its content, as libFuzzer names
 * what it keeps.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "resgrad_text.h"
#include "text/text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[512], path_json[600], path_vocab[600], path_merges[600];
static rg_bpe *fixed;
static int32_t eot_id;

static void cleanup(void) {
  rg_bpe_free(fixed);
  fixed = NULL;
  if (!dir[0]) return;
  unlink(path_json);
  unlink(path_vocab);
  unlink(path_merges);
  rmdir(dir);
}

static void die(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;
static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz_bpe: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  cleanup();
  abort();
}

static void write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n || fclose(f)) die("cannot write %s", path);
}

/* The fixed tokenizer: the 256 byte tokens (id = byte), then the merges below, each
   making the next id unless its token exists already ("a ba" makes "aba" again, which
   "ab a" made), then <|endoftext|>. */
static const char *const merges[] = {
    "a a", "a b", "b a", "aa a", "ab a", "a ba", "aa aa", "\xC4\xA0 a", "\xC4\xA0 \xC4\xA0",
    "b b", "ba b", "\xC4\xA0\x61 b", "\xC4\xA0\xC4\xA0 \xC4\xA0\xC4\xA0", "\xC3\x83 \xC2\xA9",
    "\xC3\x83\xC2\xA9 \xC3\x83\xC2\xA9", "' s", "\xC4\xA0 '", "1 2", "12 3", "\xC4\x8A \xC4\x8A",
};
#define NMERGES ((int)(sizeof merges / sizeof *merges))

static void setup(void) {
  const char *base = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/rg-fuzz-bpe-%ld-XXXXXX", base && *base ? base : "/tmp",
           (long)getpid());
  if (!mkdtemp(dir)) die("mkdtemp %s failed", dir);
  atexit(cleanup);
  snprintf(path_json, sizeof path_json, "%s/tokenizer.json", dir);
  snprintf(path_vocab, sizeof path_vocab, "%s/vocab.json", dir);
  snprintf(path_merges, sizeof path_merges, "%s/merges.txt", dir);
  char vocab[16384], mtext[1024];
  size_t v = 0, m = 0;
  v += (size_t)snprintf(vocab + v, sizeof vocab - v, "{");
  for (int b = 0; b < 256; b++) {
    char ch[4];
    int k = rg__utf8_put(rg__byte_char(b), ch);
    v += (size_t)snprintf(vocab + v, sizeof vocab - v, "\"%s%.*s\": %d, ",
                          ch[0] == '"' || ch[0] == '\\' ? "\\" : "", k, ch, b);
  }
  m += (size_t)snprintf(mtext, sizeof mtext, "#version: 0.2\n");
  int next = 256;
  for (int i = 0; i < NMERGES; i++) {
    const char *sp = strchr(merges[i], ' ');
    char joined[32];
    snprintf(joined, sizeof joined, "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
    int seen = 0;
    for (int k = 0; k < i; k++) {
      const char *ks = strchr(merges[k], ' ');
      char other[32];
      snprintf(other, sizeof other, "%.*s%s", (int)(ks - merges[k]), merges[k], ks + 1);
      seen = seen || !strcmp(other, joined);
    }
    if (!seen)
      v += (size_t)snprintf(vocab + v, sizeof vocab - v, "\"%s\": %d, ", joined, next++);
    m += (size_t)snprintf(mtext + m, sizeof mtext - m, "%s\n", merges[i]);
  }
  v += (size_t)snprintf(vocab + v, sizeof vocab - v, "\"<|endoftext|>\": %d}", next);
  write_file(path_vocab, vocab, v);
  write_file(path_merges, mtext, m);
  char msg[512];
  fixed = rg_bpe_load(dir, msg, sizeof msg);
  if (!fixed) die("the fixed tokenizer does not load: %s", msg);
  eot_id = rg_bpe_token_id(fixed, "<|endoftext|>");
  if (eot_id != next || rg_bpe_vocab_size(fixed) != next + 1) die("the fixed tokenizer's ids");
  unlink(path_vocab);
  unlink(path_merges);
}

/* GPT-2's bpe() on the piece s[0..n), literally (quadratic): appends its ids to out. */
static size_t literal_piece(const unsigned char *s, size_t n, int32_t *out) {
  int32_t *p = malloc(sizeof *p * (n ? n : 1));
  if (!p) die("out of memory");
  size_t k = n;
  for (size_t i = 0; i < n; i++) p[i] = fixed->byte_id[s[i]];
  for (;;) {
    uint32_t best = UINT32_MAX;
    int32_t a = -1, b = -1, made = -1, o;
    for (size_t i = 0; i + 1 < k; i++) {
      uint32_t r = rg__bpe_pair(fixed, p[i], p[i + 1], &o);
      if (r < best) best = r, a = p[i], b = p[i + 1], made = o;
    }
    if (best == UINT32_MAX) break;
    size_t w = 0;
    for (size_t i = 0; i < k; i++) {
      if (i + 1 < k && p[i] == a && p[i + 1] == b) {
        p[w++] = made;
        i++;
      } else {
        p[w++] = p[i];
      }
    }
    k = w;
  }
  memcpy(out, p, sizeof *p * k);
  free(p);
  return k;
}

/* The literal encoding of valid UTF-8 text: <|endoftext|> cut out, pieces, bpe(). */
static size_t literal(const unsigned char *s, size_t n, int32_t *out) {
  static const char eot[] = "<|endoftext|>";
  size_t count = 0, pos = 0;
  while (pos < n) {
    size_t stop = pos;
    while (stop < n && !(n - stop >= 13 && !memcmp(s + stop, eot, 13))) stop++;
    while (pos < stop) {
      size_t end = rg__pretok_next(s, stop, pos);
      if (end <= pos || end > stop) die("a piece [%zu, %zu) out of [%zu, %zu)", pos, end, pos,
                                       stop);
      count += literal_piece(s + pos, end - pos, out + count);
      pos = end;
    }
    if (stop < n) {
      out[count++] = eot_id;
      pos = stop + 13;
    }
  }
  return count;
}

static int valid_utf8(const unsigned char *s, size_t n, size_t *bad) {
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int k = rg__utf8_next(s + i, n - i, &cp);
    if (!k) {
      *bad = i;
      return 0;
    }
    i += (size_t)k;
  }
  return 1;
}

static void check_text(const unsigned char *s, size_t n) {
  int32_t *ids = malloc(sizeof *ids * (n + 1)), *want = malloc(sizeof *want * (n + 1));
  char *back = malloc(n + 1), msg[256];
  if (!ids || !want || !back) die("out of memory");
  size_t bad = 0;
  int ok = valid_utf8(s, n, &bad);
  int64_t got = rg_bpe_encode_msg(fixed, (const char *)s, n, ids, (int64_t)n, msg, sizeof msg);
  if (!ok) {
    char where[64];
    snprintf(where, sizeof where, "byte %zu ", bad);
    if (got != -1 || !strstr(msg, where))
      die("text invalid at byte %zu: encode gave %lld, \"%s\"", bad, (long long)got, msg);
  } else {
    if (got < 0 || (size_t)got > n) die("encode gave %lld for %zu bytes: %s", (long long)got,
                                        n, msg);
    int32_t one[2] = {-7, -7};
    if (rg_bpe_encode(fixed, (const char *)s, n, NULL, 0) != got ||
        rg_bpe_encode(fixed, (const char *)s, n, one, 1) != got || one[1] != -7 ||
        (got && one[0] != ids[0]))
      die("encode's count or first id depends on cap");
    size_t k = literal(s, n, want);
    if (k != (size_t)got) die("encode gave %lld ids, the literal algorithm %zu", (long long)got, k);
    for (size_t i = 0; i < k; i++)
      if (ids[i] != want[i]) die("id %zu is %d, the literal algorithm's %d", i, ids[i], want[i]);
    int64_t m = rg_bpe_decode(fixed, ids, got, back, n + 1);
    if (m != (int64_t)n || memcmp(back, s, n)) die("decode(encode(text)) is not the text");
  }
  free(ids);
  free(want);
  free(back);
}

static void check_load(const char *path) {
  char msg[512];
  rg_bpe *bpe = rg_bpe_load(path, msg, sizeof msg);
  if (!bpe) {
    if (strncmp(msg, "rg_bpe_load: ", 13)) die("a failed load said \"%s\"", msg);
    return;
  }
  static const char text[] = "Hello, world! It's 2024 <|endoftext|> caf\xC3\xA9  \n";
  int32_t ids[sizeof text];
  int64_t n = rg_bpe_encode(bpe, text, sizeof text - 1, ids, (int64_t)sizeof text);
  if (n < 0 || n > (int64_t)sizeof text - 1) die("a loaded tokenizer gave %lld ids", (long long)n);
  char out[4096];
  if (rg_bpe_decode(bpe, ids, n, out, sizeof out) < 0) die("an id of encode does not decode");
  rg_bpe_free(bpe);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fixed) setup();
  if (!size) return 0;
  const uint8_t *body = data + 1;
  size_t n = size - 1;
  switch (data[0] % 3) {
  case 0:
    check_text(body, n);
    break;
  case 1:
    write_file(path_json, body, n);
    check_load(path_json);
    unlink(path_json);
    break;
  default: {
    const uint8_t *zero = memchr(body, 0, n);
    size_t vn = zero ? (size_t)(zero - body) : n;
    write_file(path_vocab, body, vn);
    write_file(path_merges, zero ? zero + 1 : body + n, zero ? n - vn - 1 : 0);
    check_load(dir);
    unlink(path_vocab);
    unlink(path_merges);
  }
  }
  return 0;
}
