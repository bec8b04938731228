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
 * or suffixes, byte fallback or ignore_merges; no normalizer; the ByteLevel
 * pre-tokenizer with GPT-2's pattern and no prefix space. Anything else would encode
 * differently here, so it is refused rather than approximated.
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
} builder;

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
  builder b = {calloc(1, sizeof(rg_bpe)), 0, vpath, msg, msg_size};
  if (!b.bpe) return rg__text_msg(msg, msg_size, "out of host memory"), NULL;
  size_t vlen, mlen;
  char *vtext = read_all(vpath, &vlen, msg, msg_size);
  if (!vtext) return fail(&b);
  rg__json j;
  int bad = parse(&b, &j, vtext, vlen) || read_vocab(&b, &j, vtext, 0);
  if (!bad) rg__json_free(&j);
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

/* ---- the call ------------------------------------------------------------------------ */

rg_bpe *rg_bpe_load(const char *path, char *msg, size_t msg_size) {
  if (msg_size) msg[0] = 0;
  if (!path || !*path) {
    rg__text_msg(msg, msg_size, "path is empty: pass a folder holding vocab.json and "
                 "merges.txt");
    return NULL;
  }
  size_t n = strlen(path);
  char *v = malloc(n + 16), *m = malloc(n + 16);
  rg_bpe *bpe = NULL;
  if (!v || !m) {
    rg__text_msg(msg, msg_size, "out of host memory");
  } else if (!is_dir(path)) {
    rg__text_msg(msg, msg_size, "%s is %s: pass a folder holding vocab.json and merges.txt "
                 "(tokenizer.json is not read yet)", path,
                 exists(path) ? "not a folder" : "missing");
  } else {
    snprintf(v, n + 16, "%s/vocab.json", path);
    snprintf(m, n + 16, "%s/merges.txt", path);
    bpe = load_pair(v, m, msg, msg_size);
  }
  free(v);
  free(m);
  return bpe;
}
