/*
 * bpe_load.c - rg_bpe_load: a GPT-2 tokenizer read from vocab.json and merges.txt, or
 * from tokenizer.json (Hugging Face's tokenizers format), into an rg_bpe.
 *
 * Invariants of a loaded tokenizer (each checked, a file that breaks one refused with a
 * message naming the file, the place and what to do):
 *  - ids are in [0, 2^31 - 1); no id and no token string is named twice;
 *  - every byte's one-character token is in the vocabulary (byte-level BPE needs all 256,
 *    or some text could not be encoded);
 *  - every merge names two tokens of the vocabulary, and the token they make is in it
 *    too, so encoding never meets a string without an id;
 *  - special tokens (tokenizer.json's added_tokens; "<|endoftext|>" for vocab.json) are in
 *    the table and are cut out of the text whole.
 * Each token also keeps the bytes it decodes to: its characters mapped back through
 * GPT-2's byte-to-character table, or, for a special token or a character outside that
 * table, the token's own UTF-8.
 *
 * tokenizer.json must describe GPT-2's pipeline: model BPE without dropout, word prefixes
 * or suffixes, byte fallback or ignore_merges; no normalizer (or an empty Sequence); the
 * ByteLevel pre-tokenizer with GPT-2's pattern and no prefix space; the ByteLevel decoder
 * and post-processor, or none; added tokens without lstrip, rstrip or single_word.
 * Anything else would encode differently here, so it is refused rather than
 * approximated. Merges may be "left right" strings or ["left", "right"] pairs (newer
 * files). Added tokens, special or not, are cut out of the text whole, as tokenizers
 * does; one the model's vocabulary lacks gets its id from added_tokens.
 *
 * A folder holding both formats is read through vocab.json and merges.txt; one holding
 * tokenizer.json and only half of the pair, through tokenizer.json.
 */
#include "text/text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void rg__text_msg(char *msg, size_t msg_size, const char *fmt, ...) {
  if (!msg_size) return;
  int k = snprintf(msg, msg_size, "rg_bpe_load: ");
  va_list ap;
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < msg_size) vsnprintf(msg + k, msg_size - (size_t)k, fmt, ap);
  va_end(ap);
}

/* The whole file, NUL-terminated, in *len bytes; NULL with msg set. */
static char *read_all(const char *path, size_t *len, char *msg, size_t msg_size) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    rg__text_msg(msg, msg_size, "cannot open %s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf; n += got) {
    if (n + 1 >= cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    got = fread(buf + n, 1, cap - 1 - n, f);
    if (!got) break;
  }
  int bad = buf && ferror(f);
  fclose(f);
  if (!buf || bad) {
    rg__text_msg(msg, msg_size, bad ? "cannot read %s" : "%s: out of host memory", path);
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

static int is_dir(const char *path) {
  struct stat st;
  return !stat(path, &st) && S_ISDIR(st.st_mode);
}

static int exists(const char *path) {
  struct stat st;
  return !stat(path, &st);
}


/* ---- building the tokenizer ---------------------------------------------------------- */

typedef struct builder {
  rg_bpe *bpe;
  size_t capstrs;
  const char *file; /* for messages */
  char *msg;
  size_t msg_size;
  int64_t named; /* the tokens the file names (vocabulary and added tokens) */
} builder;

/* Ids may leave holes, but not so many that the table would be mostly holes: a file that
   names a few tokens with ids near 2^31 would otherwise cost 32 GiB. */
#define RG__HOLES 65536

/* Where in a file something is: a byte of a JSON text, or a line. */
typedef struct place { const char *text; size_t at; long line; } place;

static long line_of(place w) {
  long line = w.line, col;
  if (w.text) rg__text_linecol(w.text, w.at, &line, &col);
  return line;
}

static int oom(builder *b) {
  rg__text_msg(b->msg, b->msg_size, "%s: out of host memory", b->file);
  return -1;
}

/* Makes ids [0, n) exist (new ones holes). */
static int grow(builder *b, int32_t n) {
  rg_bpe *bpe = b->bpe;
  if (n <= bpe->n) return 0;
  if (n > 2 * b->named + RG__HOLES) {
    rg__text_msg(b->msg, b->msg_size, "%s: id %ld is far beyond the %lld tokens the file "
                 "names (ids may leave at most %d + that many unnamed): the file is corrupt; "
                 "fetch it again", b->file, (long)n - 1, (long long)b->named, RG__HOLES);
    return -1;
  }
  rg__tok *t = realloc(bpe->tok, sizeof *t * (size_t)n);
  if (!t) return oom(b);
  for (int32_t k = bpe->n; k < n; k++) t[k] = (rg__tok){UINT32_MAX, 0, 0, 0};
  bpe->tok = t;
  bpe->n = n;
  return 0;
}

/* Gives id (in the table) the token string s[0..len). */
static int set_token(builder *b, int32_t id, const char *s, size_t len, place w) {
  rg_bpe *bpe = b->bpe;
  if (bpe->tok[id].str_off != UINT32_MAX) {
    rg__text_msg(b->msg, b->msg_size, "%s: line %ld: id %ld is given to \"%.*s\" and to "
                 "\"%s\": the file is corrupt; fetch it again", b->file, line_of(w),
                 (long)id, (int)len, s, bpe->strs + bpe->tok[id].str_off);
    return -1;
  }
  if (bpe->nstrs + len + 1 > b->capstrs) {
    size_t cap = b->capstrs ? b->capstrs : 1 << 16;
    while (cap < bpe->nstrs + len + 1) cap *= 2;
    if (cap > UINT32_MAX) return oom(b);
    char *ns = realloc(bpe->strs, cap);
    if (!ns) return oom(b);
    bpe->strs = ns;
    b->capstrs = cap;
  }
  memcpy(bpe->strs + bpe->nstrs, s, len);
  bpe->strs[bpe->nstrs + len] = 0;
  bpe->tok[id] = (rg__tok){(uint32_t)bpe->nstrs, (uint32_t)len, 0, 0};
  bpe->nstrs += len + 1;
  return 0;
}

/* Makes id (a token of the table) special. */
static int add_special(builder *b, int32_t id) {
  rg_bpe *bpe = b->bpe;
  for (int32_t k = 0; k < bpe->nspecial; k++)
    if (bpe->special[k] == id) return 0;
  int32_t *ns = realloc(bpe->special, sizeof *ns * ((size_t)bpe->nspecial + 1));
  if (!ns) return oom(b);
  bpe->special = ns;
  bpe->special[bpe->nspecial++] = id;
  const rg__tok *t = &bpe->tok[id];
  if (t->str_len) bpe->first[(unsigned char)bpe->strs[t->str_off]] = true;
  return 0;
}

/* The string map, the merge map's room for nmerges and each byte's token. */
static int index_tokens(builder *b, int32_t nmerges) {
  rg_bpe *bpe = b->bpe;
  int32_t dup;
  if (rg__bpe_maps(bpe, nmerges, &dup)) {
    if (dup < 0) return oom(b);
    rg__text_msg(b->msg, b->msg_size, "%s: the token \"%s\" has two ids (%ld and another): "
                 "the file is corrupt; fetch it again", b->file,
                 bpe->strs + bpe->tok[dup].str_off, (long)dup);
    return -1;
  }
  for (int by = 0; by < 256; by++) {
    char ch[4];
    int k = rg__utf8_put(rg__byte_char(by), ch);
    bpe->byte_id[by] = rg__bpe_lookup(bpe, ch, (size_t)k);
    if (bpe->byte_id[by] < 0) {
      rg__text_msg(b->msg, b->msg_size, "%s: the vocabulary has no token for byte 0x%02X "
                   "(\"%.*s\"): a byte-level BPE needs all 256 (train it with the ByteLevel "
                   "alphabet as its initial alphabet)", b->file, by, k, ch);
      return -1;
    }
  }
  return 0;
}

/* The bytes every token decodes to (after the special tokens are known). */
static int decode_tokens(builder *b) {
  rg_bpe *bpe = b->bpe;
  int32_t inverse[0x144]; /* a byte-level character -> its byte */
  for (int c = 0; c < 0x144; c++) inverse[c] = -1;
  for (int by = 0; by < 256; by++) inverse[rg__byte_char(by)] = by;
  bpe->bytes = malloc(bpe->nstrs ? bpe->nstrs : 1); /* never more bytes than the UTF-8 */
  bool *special = calloc((size_t)bpe->n + 1, 1);
  if (!bpe->bytes || !special) {
    free(special);
    return oom(b);
  }
  for (int32_t k = 0; k < bpe->nspecial; k++) special[bpe->special[k]] = true;
  for (int32_t id = 0; id < bpe->n; id++) {
    rg__tok *t = &bpe->tok[id];
    t->byte_off = (uint32_t)bpe->nbytes;
    if (t->str_off == UINT32_MAX) continue;
    const unsigned char *s = (const unsigned char *)bpe->strs + t->str_off;
    for (uint32_t i = 0; i < t->str_len;) {
      uint32_t cp = 0;
      int k = rg__utf8_next(s + i, t->str_len - i, &cp);
      if (k <= 0) k = 1; /* (JSON strings are valid UTF-8) */
      if (!special[id] && k > 0 && cp < 0x144 && inverse[cp] >= 0) {
        bpe->bytes[bpe->nbytes++] = (char)inverse[cp];
      } else {
        memcpy(bpe->bytes + bpe->nbytes, s + i, (size_t)k);
        bpe->nbytes += (size_t)k;
      }
      i += (uint32_t)k;
    }
    t->byte_len = (uint32_t)bpe->nbytes - t->byte_off;
  }
  free(special);
  return 0;
}

/* Adds merge number r, "left right", found at w. */
static int add_merge(builder *b, const char *left, size_t ll, const char *right, size_t rl,
                     uint32_t r, place w) {
  rg_bpe *bpe = b->bpe;
  int32_t a = rg__bpe_lookup(bpe, left, ll), c = rg__bpe_lookup(bpe, right, rl);
  if (a < 0 || c < 0) {
    rg__text_msg(b->msg, b->msg_size, "%s: line %ld: the merge \"%.*s %.*s\" names \"%.*s\", "
                 "which the vocabulary lacks: the merges and the vocabulary are not of one "
                 "tokenizer", b->file, line_of(w), (int)ll, left, (int)rl, right,
                 a < 0 ? (int)ll : (int)rl, a < 0 ? left : right);
    return -1;
  }
  char stack[256], *joined = ll + rl <= sizeof stack ? stack : malloc(ll + rl);
  if (!joined) return oom(b);
  memcpy(joined, left, ll);
  memcpy(joined + ll, right, rl);
  int32_t out = rg__bpe_lookup(bpe, joined, ll + rl);
  if (joined != stack) free(joined);
  if (out < 0) {
    rg__text_msg(b->msg, b->msg_size, "%s: line %ld: the merge \"%.*s %.*s\" makes "
                 "\"%.*s%.*s\", which the vocabulary lacks: the merges and the vocabulary "
                 "are not of one tokenizer", b->file, line_of(w), (int)ll, left, (int)rl,
                 right, (int)ll, left, (int)rl, right);
    return -1;
  }
  rg__bpe_add_pair(bpe, a, c, out, r);
  return 0;
}

/* The id that JSON value v must be, or -1 with msg set. */
static int32_t json_id(builder *b, const rg__json *j, const char *text, int32_t v,
                       const char *what) {
  const rg__jnode *n = &j->node[v];
  if (n->type != RG__J_NUM || n->num < 0 || n->num >= (double)(INT32_MAX - 1) ||
      n->num != (double)(int32_t)n->num) {
    long line, col;
    rg__text_linecol(text, n->at, &line, &col);
    rg__text_msg(b->msg, b->msg_size, "%s: line %ld, column %ld: %s is not an id (a whole "
                 "number in [0, 2^31 - 1)): the file is not a tokenizer's", b->file, line,
                 col, what);
    return -1;
  }
  return (int32_t)n->num;
}

/* The tokens of the JSON object vocab ("token": id). */
static int read_vocab(builder *b, const rg__json *j, const char *text, int32_t vocab) {
  if (vocab < 0 || j->node[vocab].type != RG__J_OBJ) {
    long line = 1, col = 1;
    if (vocab >= 0) rg__text_linecol(text, j->node[vocab].at, &line, &col);
    rg__text_msg(b->msg, b->msg_size, "%s: line %ld: the vocabulary is %s, not a JSON "
                 "object of \"token\": id", b->file, line, vocab < 0 ? "missing" : "there");
    return -1;
  }
  int32_t top = -1; /* the largest id first, so the table is allocated once */
  for (int32_t e = j->node[vocab].first; e >= 0; e = j->node[e].next) {
    int32_t id = json_id(b, j, text, e, "a value of the vocabulary");
    if (id < 0) return -1;
    if (id > top) top = id;
  }
  if (grow(b, top + 1)) return -1;
  for (int32_t e = j->node[vocab].first; e >= 0; e = j->node[e].next)
    if (set_token(b, (int32_t)j->node[e].num, rg__json_key(j, e), j->node[e].klen,
                  (place){text, j->node[e].at, 0}))
      return -1;
  return 0;
}

static rg_bpe *fail(builder *b) {
  rg_bpe_free(b->bpe);
  return NULL;
}

static int parse(builder *b, rg__json *j, const char *text, size_t len) {
  char err[160];
  if (!rg__json_parse(j, text, len, err, sizeof err)) return 0;
  rg__text_msg(b->msg, b->msg_size, "%s: %s: the file is not JSON (cut short?); fetch or "
               "write it again", b->file, err);
  return -1;
}

/* Adds the merges of merges.txt's text (lines "left right", a "#version" line first). */
static int read_merges_txt(builder *b, char *text, size_t len) {
  uint32_t rank = 0;
  long line = 0;
  for (char *p = text, *end = text + len; p < end;) {
    char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    size_t n = (size_t)(eol - p);
    if (n && p[n - 1] == '\r') n--;
    line++;
    char *sp = memchr(p, ' ', n);
    if ((line == 1 && n >= 8 && !memcmp(p, "#version", 8)) || !n) {
      /* the version line, or an empty line */
    } else if (!sp || sp == p || sp + 1 == p + n || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - p))) {
      rg__text_msg(b->msg, b->msg_size, "%s: line %ld: \"%.*s\" is not a merge (two tokens "
                   "separated by one space): the file is not a GPT-2 merges.txt", b->file,
                   line, (int)(n > 60 ? 60 : n), p);
      return -1;
    } else if (add_merge(b, p, (size_t)(sp - p), sp + 1, n - (size_t)(sp + 1 - p), rank++,
                         (place){NULL, 0, line})) {
      return -1;
    }
    p = eol + 1;
  }
  return 0;
}

/* ---- vocab.json and merges.txt ------------------------------------------------------- */

static rg_bpe *load_pair(const char *vpath, const char *mpath, char *msg, size_t msg_size) {
  builder b = {calloc(1, sizeof(rg_bpe)), 0, vpath, msg, msg_size, 0};
  if (!b.bpe) return rg__text_msg(msg, msg_size, "out of host memory"), NULL;
  size_t vlen, mlen;
  char *vtext = read_all(vpath, &vlen, msg, msg_size);
  if (!vtext) return fail(&b);
  rg__json j;
  int bad = parse(&b, &j, vtext, vlen);
  if (!bad) b.named = j.node[0].count;
  bad = bad || read_vocab(&b, &j, vtext, 0);
  rg__json_free(&j); /* (a document that failed to parse is freed and zeroed already) */
  free(vtext);
  char *mtext = bad ? NULL : read_all(mpath, &mlen, msg, msg_size);
  if (!mtext) return fail(&b);
  int32_t lines = 1;
  for (size_t i = 0; i < mlen; i++) lines += mtext[i] == '\n';
  bad = index_tokens(&b, lines);
  /* GPT-2's one special token, as transformers' GPT2Tokenizer has it */
  int32_t eot = bad ? -1 : rg__bpe_lookup(b.bpe, "<|endoftext|>", 13);
  bad = bad || (eot >= 0 && add_special(&b, eot)) || decode_tokens(&b);
  b.file = mpath;
  bad = bad || read_merges_txt(&b, mtext, mlen);
  free(mtext);
  return bad ? fail(&b) : b.bpe;
}

/* ---- tokenizer.json ----------------------------------------------------------------- */

/* Refuses a tokenizer.json whose node v (or the whole file, v < 0) is not GPT-2's
   pipeline; what says what was found. */
static int refuse(builder *b, const rg__json *j, const char *text, int32_t v,
                  const char *what) {
  long line = 1, col = 1;
  if (v >= 0) rg__text_linecol(text, j->node[v].at, &line, &col);
  rg__text_msg(b->msg, b->msg_size, "%s: line %ld: %s: rg_bpe reads only GPT-2's byte-level "
               "BPE (model BPE, no normalizer, the ByteLevel pre-tokenizer without prefix "
               "space), since any other tokenizer would encode differently here", b->file,
               line, what);
  return -1;
}

/* Whether v is absent, null, false, or an empty string. */
static bool unset(const rg__json *j, int32_t v) {
  if (v < 0) return true;
  int t = j->node[v].type;
  return t == RG__J_NULL || t == RG__J_FALSE || (t == RG__J_STR && !j->node[v].slen);
}

static bool is_true(const rg__json *j, int32_t v) {
  return v >= 0 && j->node[v].type == RG__J_TRUE;
}

/* The string of the "type" entry of object v, or "" (so a message can quote it). */
static const char *type_of(const rg__json *j, int32_t v) {
  int32_t t = rg__json_get(j, v, "type");
  return t >= 0 && j->node[t].type == RG__J_STR ? rg__json_str(j, t) : "";
}

/* Checks that the stages around the model are GPT-2's: no normalizer, the ByteLevel
   pre-tokenizer (GPT-2's pattern, no prefix space), and, where given, the ByteLevel
   decoder and a post-processor that adds no token. */
static int check_pipeline(builder *b, const rg__json *j, const char *text) {
  char what[192];
  int32_t norm = rg__json_get(j, 0, "normalizer");
  if (!unset(j, norm)) {
    int32_t list = rg__json_get(j, norm, "normalizers");
    if (strcmp(type_of(j, norm), "Sequence") || list < 0 || j->node[list].count) {
      snprintf(what, sizeof what, "the normalizer is %s", *type_of(j, norm)
               ? type_of(j, norm) : "set");
      return refuse(b, j, text, norm, what);
    }
  }
  int32_t pre = rg__json_get(j, 0, "pre_tokenizer");
  if (unset(j, pre) || strcmp(type_of(j, pre), "ByteLevel")) {
    snprintf(what, sizeof what, "the pre-tokenizer is %s, not ByteLevel",
             unset(j, pre) ? "missing" : *type_of(j, pre) ? type_of(j, pre) : "unnamed");
    return refuse(b, j, text, pre, what);
  }
  if (is_true(j, rg__json_get(j, pre, "add_prefix_space")))
    return refuse(b, j, text, pre, "the ByteLevel pre-tokenizer adds a prefix space");
  int32_t rx = rg__json_get(j, pre, "use_regex"); /* absent in older files: true */
  if (rx >= 0 && !is_true(j, rx))
    return refuse(b, j, text, pre, "the ByteLevel pre-tokenizer does not cut by GPT-2's "
                  "pattern (use_regex false)");
  int32_t dec = rg__json_get(j, 0, "decoder");
  if (!unset(j, dec) && strcmp(type_of(j, dec), "ByteLevel")) {
    snprintf(what, sizeof what, "the decoder is %s, not ByteLevel", type_of(j, dec));
    return refuse(b, j, text, dec, what);
  }
  int32_t post = rg__json_get(j, 0, "post_processor");
  if (!unset(j, post) && strcmp(type_of(j, post), "ByteLevel")) {
    snprintf(what, sizeof what, "the post-processor is %s, which may add tokens (rg_bpe adds "
             "none)", *type_of(j, post) ? type_of(j, post) : "unnamed");
    return refuse(b, j, text, post, what);
  }
  return 0;
}

/* Checks the model object: BPE with none of the options GPT-2 does not use. */
static int check_model(builder *b, const rg__json *j, const char *text, int32_t model) {
  char what[192];
  if (model < 0 || j->node[model].type != RG__J_OBJ)
    return refuse(b, j, text, model, model < 0 ? "the file has no \"model\"" :
                  "\"model\" is not an object");
  int32_t type = rg__json_get(j, model, "type");
  if (type >= 0 && strcmp(type_of(j, model), "BPE")) {
    snprintf(what, sizeof what, "the model is %s, not BPE", type_of(j, model));
    return refuse(b, j, text, model, what);
  }
  static const char *const off[] = {"dropout", "continuing_subword_prefix",
                                    "end_of_word_suffix", "byte_fallback", "ignore_merges"};
  for (size_t k = 0; k < sizeof off / sizeof *off; k++) {
    int32_t v = rg__json_get(j, model, off[k]);
    if (!unset(j, v)) {
      snprintf(what, sizeof what, "the model sets %s", off[k]);
      return refuse(b, j, text, v, what);
    }
  }
  return 0;
}

/* The added tokens (entries {"id", "content", ...}): each is given its id if the model's
   vocabulary lacks it; *list gets the array (or -1). Run before the maps are built. */
static int read_added(builder *b, const rg__json *j, const char *text, int32_t *list) {
  *list = rg__json_get(j, 0, "added_tokens");
  if (unset(j, *list)) {
    *list = -1;
    return 0;
  }
  if (j->node[*list].type != RG__J_ARR)
    return refuse(b, j, text, *list, "\"added_tokens\" is not an array");
  for (int32_t e = j->node[*list].first; e >= 0; e = j->node[e].next) {
    int32_t c = rg__json_get(j, e, "content");
    int32_t idv = rg__json_get(j, e, "id");
    if (c < 0 || j->node[c].type != RG__J_STR || !j->node[c].slen || idv < 0)
      return refuse(b, j, text, e, "an added token lacks its \"id\" or its \"content\"");
    static const char *const off[] = {"lstrip", "rstrip", "single_word"};
    for (size_t k = 0; k < sizeof off / sizeof *off; k++)
      if (is_true(j, rg__json_get(j, e, off[k]))) {
        char what[192];
        snprintf(what, sizeof what, "the added token \"%.60s\" sets %s (rg_bpe cuts added "
                 "tokens out exactly as written)", rg__json_str(j, c), off[k]);
        return refuse(b, j, text, e, what);
      }
    int32_t id = json_id(b, j, text, idv, "an added token's \"id\"");
    if (id < 0 || grow(b, id + 1)) return -1;
    const rg__tok *t = &b->bpe->tok[id];
    if (t->str_off != UINT32_MAX && t->str_len == j->node[c].slen &&
        !memcmp(b->bpe->strs + t->str_off, rg__json_str(j, c), t->str_len))
      continue; /* the vocabulary has it already, as GPT-2's "<|endoftext|>" */
    if (set_token(b, id, rg__json_str(j, c), j->node[c].slen, (place){text, j->node[e].at, 0}))
      return -1;
  }
  return 0;
}

/* Adds the merges of the JSON array merges: "left right" strings or [left, right]. */
static int read_merges_json(builder *b, const rg__json *j, const char *text, int32_t merges) {
  uint32_t rank = 0;
  for (int32_t e = j->node[merges].first; e >= 0; e = j->node[e].next) {
    const rg__jnode *m = &j->node[e];
    place w = {text, m->at, 0};
    if (m->type == RG__J_STR) {
      const char *s = rg__json_str(j, e), *sp = memchr(s, ' ', m->slen);
      if (!sp || sp == s || sp + 1 == s + m->slen || memchr(sp + 1, ' ', m->slen - (size_t)(sp + 1 - s)))
        return refuse(b, j, text, e, "a merge is not two tokens separated by one space");
      if (add_merge(b, s, (size_t)(sp - s), sp + 1, m->slen - (size_t)(sp + 1 - s), rank++, w))
        return -1;
    } else if (m->type == RG__J_ARR && m->count == 2 && j->node[m->first].type == RG__J_STR &&
               j->node[j->node[m->first].next].type == RG__J_STR) {
      int32_t l = m->first, r = j->node[l].next;
      if (add_merge(b, rg__json_str(j, l), j->node[l].slen, rg__json_str(j, r),
                    j->node[r].slen, rank++, w))
        return -1;
    } else {
      return refuse(b, j, text, e, "a merge is neither \"left right\" nor [\"left\", "
                    "\"right\"]");
    }
  }
  return 0;
}

static rg_bpe *load_json(const char *path, char *msg, size_t msg_size) {
  builder b = {calloc(1, sizeof(rg_bpe)), 0, path, msg, msg_size, 0};
  if (!b.bpe) return rg__text_msg(msg, msg_size, "out of host memory"), NULL;
  size_t len;
  char *text = read_all(path, &len, msg, msg_size);
  if (!text) return fail(&b);
  rg__json j;
  if (parse(&b, &j, text, len)) {
    free(text);
    return fail(&b);
  }
  int32_t model = rg__json_get(&j, 0, "model"), added = -1;
  int32_t merges = rg__json_get(&j, model, "merges");
  int32_t vocab = rg__json_get(&j, model, "vocab"), list = rg__json_get(&j, 0, "added_tokens");
  b.named = (vocab >= 0 ? j.node[vocab].count : 0) + (list >= 0 ? j.node[list].count : 0);
  int bad = 0;
  if (j.node[0].type != RG__J_OBJ) {
    bad = refuse(&b, &j, text, 0, "the file is not a JSON object");
  } else if (model < 0 && j.node[0].first >= 0 && j.node[j.node[0].first].type == RG__J_NUM) {
    rg__text_msg(msg, msg_size, "%s looks like a vocab.json: pass the folder holding it "
                 "and merges.txt", path);
    bad = 1;
  } else if (check_model(&b, &j, text, model) || check_pipeline(&b, &j, text)) {
    bad = 1;
  } else if (merges < 0 || j.node[merges].type != RG__J_ARR) {
    bad = refuse(&b, &j, text, model, "the model has no \"merges\" array");
  }
  bad = bad || read_vocab(&b, &j, text, vocab) ||
        read_added(&b, &j, text, &added) || index_tokens(&b, j.node[merges].count);
  for (int32_t e = bad || added < 0 ? -1 : j.node[added].first; e >= 0 && !bad;
       e = j.node[e].next) {
    int32_t c = rg__json_get(&j, e, "content");
    bad = add_special(&b, rg__bpe_lookup(b.bpe, rg__json_str(&j, c), j.node[c].slen));
  }
  bad = bad || decode_tokens(&b) || read_merges_json(&b, &j, text, merges);
  rg__json_free(&j);
  free(text);
  return bad ? fail(&b) : b.bpe;
}

/* ---- the call ------------------------------------------------------------------------ */

rg_bpe *rg_bpe_load(const char *path, char *msg, size_t msg_size) {
  if (msg_size) msg[0] = 0;
  if (!path || !*path) {
    rg__text_msg(msg, msg_size, "path is empty: pass a folder holding vocab.json and "
                 "merges.txt, or tokenizer.json");
    return NULL;
  }
  size_t n = strlen(path);
  char *v = malloc(n + 16), *m = malloc(n + 16);
  rg_bpe *bpe = NULL;
  if (!v || !m) {
    rg__text_msg(msg, msg_size, "out of host memory");
  } else if (!exists(path)) {
    rg__text_msg(msg, msg_size, "%s is missing: pass a folder holding vocab.json and "
                 "merges.txt, or tokenizer.json, or a tokenizer.json file", path);
  } else if (!is_dir(path)) {
    bpe = load_json(path, msg, msg_size);
  } else {
    /* both of the pair first; else tokenizer.json; else the pair's missing half named */
    snprintf(v, n + 16, "%s/tokenizer.json", path);
    int json = exists(v);
    snprintf(v, n + 16, "%s/vocab.json", path);
    snprintf(m, n + 16, "%s/merges.txt", path);
    int pair = exists(v) + exists(m);
    if (pair == 2 || (pair && !json)) {
      bpe = load_pair(v, m, msg, msg_size);
    } else if (json) {
      snprintf(v, n + 16, "%s/tokenizer.json", path);
      bpe = load_json(v, msg, msg_size);
    } else {
      rg__text_msg(msg, msg_size, "%s holds neither vocab.json and merges.txt nor "
                   "tokenizer.json: pass the folder of a GPT-2 tokenizer", path);
    }
  }
  free(v);
  free(m);
  return bpe;
}
