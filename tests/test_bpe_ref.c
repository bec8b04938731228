/*
 * test_bpe_ref.c - the tokenizer against reference encoders: tests/data/bpe holds a
 * miniature GPT-2 tokenizer (957 tokens, laid out as GPT-2's files are: the byte tokens
 * first, in GPT-2's order, then one per merge, then <|endoftext|>) in both formats
 * and the ids that the tokenizers package, tiktoken and GPT-2's algorithm in plain
 * Python all gave for a varied set of texts (expected.json; tools/bpe_fixture.py wrote
 * it). Each format must give every text's ids exactly, and decode them back to the text.
 */
#include "common.h"
#include "resgrad_text.h"
#include "source.h"
#include "text/text.h"

/* Checks bpe (loaded from what) against every case of the document j. */
static void check_cases(const rg_bpe *bpe, const char *what, const rg__json *j) {
  int ncases = 0, nids = 0;
  int32_t ids[1024];
  char out[4096], msg[256];
  for (int32_t c = j->node[0].first; c >= 0; c = j->node[c].next, ncases++) {
    int32_t t = rg__json_get(j, c, "text"), w = rg__json_get(j, c, "ids");
    CHECK(t >= 0 && w >= 0, "expected.json: case %d lacks text or ids", ncases);
    if (t < 0 || w < 0) return;
    const char *text = rg__json_str(j, t);
    size_t len = j->node[t].slen;
    int64_t n = rg_bpe_encode_msg(bpe, text, len, ids, 1024, msg, sizeof msg);
    int32_t want = j->node[w].count;
    CHECK(n == want, "%s: case %d (\"%.40s\"): %lld ids, want %d (%s)", what, ncases, text,
          (long long)n, want, msg);
    if (n != want) continue;
    int k = 0;
    for (int32_t e = j->node[w].first; e >= 0; e = j->node[e].next, k++)
      CHECK(ids[k] == (int32_t)j->node[e].num, "%s: case %d (\"%.40s\"): id %d is %d, want "
            "%d", what, ncases, text, k, ids[k], (int)j->node[e].num);
    int64_t m = rg_bpe_decode(bpe, ids, n, out, sizeof out);
    CHECK(m == (int64_t)len && !memcmp(out, text, len), "%s: case %d: decode gives %lld "
          "bytes \"%.40s\", want the text's %zu", what, ncases, (long long)m, out, len);
    nids += (int)n;
  }
  CHECK(ncases >= 40 && nids >= 500, "%s: only %d cases, %d ids: expected.json is cut short",
        what, ncases, nids);
  if (!failed())
    printf("test_bpe_ref: %s: %d texts, %d ids, all equal to the references'\n", what,
           ncases, nids);
}

int main(void) {
  const char *dir = getenv("RG_SOURCE_DIR");
  char *text = read_source("tests/data/bpe/expected.json");
  CHECK(dir && text, "cannot read tests/data/bpe/expected.json under RG_SOURCE_DIR: run this "
        "test with ctest");
  if (!dir || !text) return finish();
  rg__json j;
  char err[256] = "not an array";
  int bad = rg__json_parse(&j, text, strlen(text), err, sizeof err) ||
            j.node[0].type != RG__J_ARR;
  CHECK(!bad, "expected.json: %s", err);
  if (bad) {
    free(text);
    return finish();
  }
  static const char *const forms[] = {
      "tests/data/bpe",                        /* vocab.json + merges.txt */
      "tests/data/bpe/tokenizer.json",         /* merges as ["left", "right"] */
      "tests/data/bpe/legacy",                 /* a folder: tokenizer.json, "left right" */
  };
  for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
    char path[4096], msg[512];
    snprintf(path, sizeof path, "%s/%s", dir, forms[f]);
    rg_bpe *bpe = rg_bpe_load(path, msg, sizeof msg);
    CHECK(bpe, "%s: %s", forms[f], msg);
    if (!bpe) continue;
    CHECK(rg_bpe_vocab_size(bpe) == 957, "%s: vocab %d", forms[f], rg_bpe_vocab_size(bpe));
    CHECK(rg_bpe_token_id(bpe, "<|endoftext|>") == 956, "%s: <|endoftext|> is %d", forms[f],
          rg_bpe_token_id(bpe, "<|endoftext|>"));
    CHECK(rg_bpe_token_id(bpe, "!") == 0 && rg_bpe_token_id(bpe, "\xC4\xA0") == 220,
          "%s: the byte tokens are not in GPT-2's order", forms[f]);
    check_cases(bpe, forms[f], &j);
    rg_bpe_free(bpe);
  }
  rg__json_free(&j);
  free(text);
  return finish();
}
