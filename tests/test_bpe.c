/*
 * test_bpe.c - the byte-level BPE tokenizer (resgrad_text.h) on a small vocabulary the
 * test writes: the 256 byte tokens, merges "h e", "l l", "he ll", "hell o", "Ġ w" and
 * <|endoftext|>. Checks ids, decode(encode(x)) == x, invalid UTF-8, missing files and a
 * merge naming an unknown token.
 */
#include "common.h"
#include "resgrad_text.h"
#include "text/text.h"

#include <sys/stat.h>

static void write_files(const char *dir, const char *extra_merge) {
  char p[256];
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/vocab.json", dir);
  FILE *f = fopen(p, "w");
  fputs("{", f);
  for (int b = 0; b < 256; b++) {
    char ch[4];
    int k = rg__utf8_put(rg__byte_char(b), ch);
    if (ch[0] == '"' || ch[0] == '\\') fprintf(f, "\"\\%c\": %d,", ch[0], b);
    else fprintf(f, "\"%.*s\": %d,", k, ch, b);
  }
  fputs("\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, \"\\u0120w\": 260, "
        "\"<|endoftext|>\": 261}", f);
  fclose(f);
  snprintf(p, sizeof p, "%s/merges.txt", dir);
  f = fopen(p, "w");
  fprintf(f, "#version: 0.2\nh e\nl l\nhe ll\nhell o\n\xC4\xA0 w\n%s", extra_merge);
  fclose(f);
}

int main(void) {
  char msg[512];
  write_files("tok", "");
  rg_bpe *bpe = rg_bpe_load("tok", msg, sizeof msg);
  CHECK(bpe, "load: %s", msg);
  if (!bpe) return finish();
  CHECK(rg_bpe_vocab_size(bpe) == 262, "vocab %d", rg_bpe_vocab_size(bpe));
  CHECK(rg_bpe_token_id(bpe, "<|endoftext|>") == 261, "eot");
  const char *text = "hello world<|endoftext|>  x\xC3\xA9";
  int32_t ids[64];
  int64_t n = rg_bpe_encode(bpe, text, strlen(text), ids, 64);
  /* hello | Ġw o r l d | eot | Ġ | Ġx (space run: "  x" -> " ", " x") | é (2 bytes) */
  int32_t want[] = {259, 260, 'o', 'r', 'l', 'd', 261, 32, 32, 'x', 0xC3, 0xA9};
  CHECK(n == 12, "n %lld", (long long)n);
  for (int i = 0; i < 12 && n == 12; i++)
    CHECK(ids[i] == want[i], "id %d: %d want %d", i, ids[i], want[i]);
  char out[64];
  CHECK(rg_bpe_decode(bpe, ids, n, out, sizeof out) == (int64_t)strlen(text) &&
        !strcmp(out, text), "round trip: %s", out);
  CHECK(rg_bpe_encode(bpe, text, strlen(text), ids, 2) == 12, "count past cap");
  CHECK(rg_bpe_encode_msg(bpe, "a\xFF", 2, ids, 64, msg, sizeof msg) == -1 &&
        strstr(msg, "byte 1"), "invalid UTF-8: %s", msg);
  int32_t bad = 999;
  CHECK(rg_bpe_decode(bpe, &bad, 1, out, sizeof out) == -1, "bad id");
  rg_bpe_free(bpe);
  CHECK(!rg_bpe_load("missing", msg, sizeof msg) && strstr(msg, "missing"), "%s", msg);
  write_files("tok2", "q zz\n");
  CHECK(!rg_bpe_load("tok2", msg, sizeof msg) && strstr(msg, "line 7") && strstr(msg, "zz"),
        "unknown merge: %s", msg);
  FILE *f = fopen("tok2/vocab.json", "w");
  fputs("{\"a\": 1, \"b", f);
  fclose(f);
  CHECK(!rg_bpe_load("tok2", msg, sizeof msg) && strstr(msg, "vocab.json") &&
        strstr(msg, "line 1"), "truncated: %s", msg);
  return finish();
}
