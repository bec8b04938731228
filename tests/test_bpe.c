/*
 * test_bpe.c - the byte-level BPE tokenizer (resgrad_text.h) on a small vocabulary the
 * test writes: the 256 byte tokens, merges "h e", "l l", "he ll", "hell o", "Ġ w" and
 * <|endoftext|>. Checks ids, decode(encode(x)) == x, invalid UTF-8, missing files and a
 * merge naming an unknown token; then tokenizer.json files the test writes, one that loads
 * (with an added token outside the model's vocabulary) and ones that are not GPT-2's
 * pipeline, each refused with a message naming what differs.
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

/* Writes dir/tokenizer.json: the 256 byte tokens and "he" (merge "h e"), <pad> added at
   id 300. top and model are put first in their objects, so an entry there overrides the
   default one after it (the reader takes the first of a repeated key). */
static void write_json(const char *dir, const char *top, const char *model) {
  char p[256];
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/tokenizer.json", dir);
  FILE *f = fopen(p, "w");
  /* laid out as GPT-2's own tokenizer.json is: no model type, empty prefix and suffix,
     ByteLevel post-processor with add_prefix_space (it only trims offsets) */
  fprintf(f, "{%s \"added_tokens\": [{\"id\": 300, \"content\": \"<pad>\", \"special\": "
          "true, \"lstrip\": false, \"normalized\": true}], \"normalizer\": null, "
          "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
          "\"trim_offsets\": true}, \"post_processor\": {\"type\": \"ByteLevel\", "
          "\"add_prefix_space\": true, \"trim_offsets\": false}, \"decoder\": {\"type\": "
          "\"ByteLevel\", \"add_prefix_space\": true},\n\"model\": {%s \"dropout\": null, "
          "\"unk_token\": null, \"continuing_subword_prefix\": \"\", \"end_of_word_suffix\": "
          "\"\", \"fuse_unk\": false, \"vocab\": {", top, model);
  for (int b = 0; b < 256; b++) {
    char ch[4];
    int k = rg__utf8_put(rg__byte_char(b), ch);
    if (ch[0] == '"' || ch[0] == '\\') fprintf(f, "\"\\%c\": %d, ", ch[0], b);
    else fprintf(f, "\"%.*s\": %d, ", k, ch, b);
  }
  fputs("\"he\": 256}, \"merges\": [\"h e\"]}}\n", f);
  fclose(f);
}

/* Loading dir must fail with a message holding want. */
static void refused(const char *dir, const char *want) {
  char msg[512];
  rg_bpe *bpe = rg_bpe_load(dir, msg, sizeof msg);
  CHECK(!bpe && strstr(msg, want), "%s: want a refusal naming \"%s\", got: %s", dir, want,
        bpe ? "a tokenizer" : msg);
  rg_bpe_free(bpe);
}

static void check_json(void) {
  char msg[512];
  write_json("tj", "", "");
  rg_bpe *bpe = rg_bpe_load("tj", msg, sizeof msg);
  CHECK(bpe, "tokenizer.json: %s", msg);
  if (bpe) {
    CHECK(rg_bpe_vocab_size(bpe) == 301 && rg_bpe_token_id(bpe, "<pad>") == 300 &&
          !rg_bpe_token_str(bpe, 299), "the added token's id");
    int32_t ids[16], want[] = {256, 300, 'e', 'h', 300};
    int64_t n = rg_bpe_encode(bpe, "he<pad>eh<pad>", 14, ids, 16);
    CHECK(n == 5, "tokenizer.json: %lld ids", (long long)n);
    for (int i = 0; i < 5 && n == 5; i++) CHECK(ids[i] == want[i], "id %d: %d", i, ids[i]);
    char out[32];
    CHECK(rg_bpe_decode(bpe, ids, n, out, sizeof out) == 14 && !strcmp(out, "he<pad>eh<pad>"),
          "tokenizer.json round trip: %s", out);
    rg_bpe_free(bpe);
  }
  bpe = rg_bpe_load("tj/tokenizer.json", msg, sizeof msg);
  CHECK(bpe, "tokenizer.json as a file: %s", msg);
  rg_bpe_free(bpe);
  static const struct { const char *top, *model, *want; } bad[] = {
      {"\"normalizer\": {\"type\": \"NFC\"},", "", "the normalizer is NFC"},
      {"", "\"type\": \"WordPiece\",", "the model is WordPiece"},
      {"", "\"byte_fallback\": true,", "byte_fallback"},
      {"\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true},", "",
       "prefix space"},
      {"\"pre_tokenizer\": {\"type\": \"Metaspace\"},", "", "the pre-tokenizer is Metaspace"},
      {"\"added_tokens\": [{\"id\": 5, \"content\": \"<s>\", \"lstrip\": true}],", "",
       "lstrip"},
      {"\"post_processor\": {\"type\": \"TemplateProcessing\"},", "", "TemplateProcessing"},
      {"", "\"vocab\": {\"a\": 0},", "no token for byte"},
      {"", "\"merges\": [[\"h\", \"e\", \"x\"]],", "neither"},
      {"", "\"vocab\": {\"a\": 2000000000},", "far beyond"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    char dir[16];
    snprintf(dir, sizeof dir, "tj%zu", k + 1);
    write_json(dir, bad[k].top, bad[k].model);
    refused(dir, bad[k].want);
  }
  refused("tok/vocab.json", "looks like a vocab.json");
  write_files("tok3", "");
  FILE *f = fopen("tok3/vocab.json", "w");
  fputs("{\"a\": 1.5}", f);
  fclose(f);
  refused("tok3", "not an id");
  FILE *half = fopen("tj/vocab.json", "w"); /* half a pair beside tokenizer.json */
  fputs("{}", half);
  fclose(half);
  bpe = rg_bpe_load("tj", msg, sizeof msg);
  CHECK(bpe && rg_bpe_vocab_size(bpe) == 301, "tokenizer.json beside half a pair: %s", msg);
  rg_bpe_free(bpe);
  mkdir("empty", 0755);
  refused("empty", "holds neither vocab.json");
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
  check_json();
  return finish();
}
