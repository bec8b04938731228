/*
 * json.c - the JSON reader the tokenizer's files need (vocab.json, tokenizer.json).
 *
 * RFC 8259, strictly: no comments, no trailing commas, only the escapes the RFC lists,
 * no raw control characters in strings, nothing after the value but whitespace. Strings
 * are decoded into one pool: \u escapes (a surrogate pair as one code point; a lone
 * surrogate is an error) become UTF-8, and raw bytes must be valid UTF-8. Nesting is
 * bounded (DEPTH) so a hostile file cannot exhaust the stack. Every error names the line,
 * column and byte where the text breaks the grammar.
 */
#include "text/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH 64

typedef struct parser {
  rg__json *j;
  const char *s;
  size_t n, p;
  char *err;
  size_t errcap;
  int failed;
} parser;

void rg__text_linecol(const char *text, size_t at, long *line, long *col) {
  long l = 1, c = 1;
  for (size_t i = 0; i < at; i++) {
    if (text[i] == '\n') {
      l++;
      c = 1;
    } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
      c++;
    }
  }
  *line = l;
  *col = c;
}

static int fail(parser *ps, size_t at, const char *what) {
  if (!ps->failed) {
    long line, col;
    rg__text_linecol(ps->s, at, &line, &col);
    snprintf(ps->err, ps->errcap, "line %ld, column %ld (byte %zu): %s", line, col, at,
             what);
    ps->failed = 1;
  }
  return -1;
}

static void ws(parser *ps) {
  while (ps->p < ps->n && (ps->s[ps->p] == ' ' || ps->s[ps->p] == '\t' ||
                           ps->s[ps->p] == '\n' || ps->s[ps->p] == '\r'))
    ps->p++;
}

static int32_t new_node(parser *ps, int type) {
  rg__json *j = ps->j;
  if (j->n == j->cap) {
    int32_t cap = j->cap ? 2 * j->cap : 256;
    rg__jnode *nn = realloc(j->node, sizeof *nn * (size_t)cap);
    if (!nn) return fail(ps, ps->p, "out of memory");
    j->node = nn;
    j->cap = cap;
  }
  rg__jnode *v = &j->node[j->n];
  memset(v, 0, sizeof *v);
  v->type = type;
  v->first = v->next = -1;
  v->at = ps->p;
  return j->n++;
}

static int pool_put(parser *ps, const char *b, size_t len) {
  rg__json *j = ps->j;
  if (j->npool + len + 1 > j->cappool) {
    size_t cap = j->cappool ? j->cappool : 4096;
    while (cap < j->npool + len + 1) cap *= 2;
    char *np = realloc(j->pool, cap);
    if (!np) return fail(ps, ps->p, "out of memory");
    j->pool = np;
    j->cappool = cap;
  }
  memcpy(j->pool + j->npool, b, len);
  j->npool += len;
  return 0;
}

static int hex4(parser *ps, size_t at, uint32_t *v) {
  *v = 0;
  if (at + 4 > ps->n) return fail(ps, at, "\\u escape cut short");
  for (int k = 0; k < 4; k++) {
    char c = ps->s[at + (size_t)k];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return fail(ps, at, "\\u needs four hex digits");
    *v = *v << 4 | (uint32_t)d;
  }
  return 0;
}

/* The string at ps->p (its opening quote), decoded and appended to the pool with a NUL;
   its offset and length. */
static int string(parser *ps, uint32_t *off, uint32_t *len) {
  if (ps->p >= ps->n || ps->s[ps->p] != '"') return fail(ps, ps->p, "a string expected");
  size_t start = ps->j->npool;
  if (start > UINT32_MAX - 1) return fail(ps, ps->p, "the strings exceed 4 GiB");
  ps->p++;
  for (;;) {
    size_t run = ps->p;
    while (ps->p < ps->n) {
      unsigned char c = (unsigned char)ps->s[ps->p];
      if (c == '"' || c == '\\' || c < 0x20) break;
      if (c < 0x80) {
        ps->p++;
        continue;
      }
      uint32_t cp;
      int k = rg__utf8_next((const unsigned char *)ps->s + ps->p, ps->n - ps->p, &cp);
      if (!k) return fail(ps, ps->p, "a string holds bytes that are not UTF-8");
      ps->p += (size_t)k;
    }
    if (pool_put(ps, ps->s + run, ps->p - run)) return -1;
    if (ps->p >= ps->n) return fail(ps, ps->p, "unterminated string (the file is cut short)");
    char c = ps->s[ps->p];
    if (c == '"') break;
    if (c != '\\') return fail(ps, ps->p, "a raw control character in a string");
    size_t at = ps->p++;
    if (ps->p >= ps->n) return fail(ps, at, "unterminated string (the file is cut short)");
    char e = ps->s[ps->p++], out[4];
    const char *plain = strchr("\"\\/bfnrt", e);
    if (e && plain) {
      static const char to[] = "\"\\/\b\f\n\r\t";
      out[0] = to[plain - "\"\\/bfnrt"];
      if (pool_put(ps, out, 1)) return -1;
    } else if (e == 'u') {
      uint32_t cp, lo;
      if (hex4(ps, ps->p, &cp)) return -1;
      ps->p += 4;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(ps, at, "a lone low surrogate \\u escape");
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (ps->p + 2 > ps->n || ps->s[ps->p] != '\\' || ps->s[ps->p + 1] != 'u' ||
            hex4(ps, ps->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
          return fail(ps, at, "a high surrogate \\u escape without its low surrogate");
        ps->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      }
      if (pool_put(ps, out, (size_t)rg__utf8_put(cp, out))) return -1;
    } else {
      return fail(ps, at, "an escape JSON does not have");
    }
  }
  ps->p++;
  size_t n = ps->j->npool - start;
  if (pool_put(ps, "", 1)) return -1; /* the NUL after it */
  if (n > UINT32_MAX) return fail(ps, ps->p, "a string longer than 4 GiB");
  *off = (uint32_t)start;
  *len = (uint32_t)n;
  return 0;
}

static int number(parser *ps, double *v) {
  size_t b = ps->p, p = ps->p;
  const char *s = ps->s;
  if (p < ps->n && s[p] == '-') p++;
  if (p < ps->n && s[p] == '0') {
    p++;
  } else if (p < ps->n && s[p] >= '1' && s[p] <= '9') {
    while (p < ps->n && s[p] >= '0' && s[p] <= '9') p++;
  } else {
    return fail(ps, b, "a value expected (a string, number, object, array, true, false "
                "or null)");
  }
  if (p < ps->n && s[p] == '.') {
    p++;
    if (p >= ps->n || s[p] < '0' || s[p] > '9') return fail(ps, p, "a digit expected");
    while (p < ps->n && s[p] >= '0' && s[p] <= '9') p++;
  }
  if (p < ps->n && (s[p] == 'e' || s[p] == 'E')) {
    p++;
    if (p < ps->n && (s[p] == '+' || s[p] == '-')) p++;
    if (p >= ps->n || s[p] < '0' || s[p] > '9') return fail(ps, p, "a digit expected");
    while (p < ps->n && s[p] >= '0' && s[p] <= '9') p++;
  }
  char buf[64];
  if (p - b >= sizeof buf) {
    *v = 0; /* a number this long is none the tokenizer reads; its value does not matter */
  } else {
    memcpy(buf, s + b, p - b);
    buf[p - b] = 0;
    *v = strtod(buf, NULL);
  }
  ps->p = p;
  return 0;
}

static int32_t value(parser *ps, int depth);

/* The entries of the container node i, whose opening bracket ps->p is past. */
static int entries(parser *ps, int32_t i, int obj, int depth) {
  char close = obj ? '}' : ']';
  int32_t last = -1;
  ws(ps);
  if (ps->p < ps->n && ps->s[ps->p] == close) {
    ps->p++;
    return 0;
  }
  for (;;) {
    uint32_t key = 0, klen = 0;
    if (obj) {
      ws(ps);
      if (ps->p >= ps->n) return fail(ps, ps->p, "the file ends inside an object");
      if (string(ps, &key, &klen)) return -1;
      ws(ps);
      if (ps->p >= ps->n || ps->s[ps->p] != ':') return fail(ps, ps->p, "':' expected");
      ps->p++;
    }
    int32_t v = value(ps, depth + 1);
    if (v < 0) return -1;
    rg__jnode *nv = &ps->j->node[v];
    nv->key = key;
    nv->klen = klen;
    if (last < 0) ps->j->node[i].first = v;
    else ps->j->node[last].next = v;
    last = v;
    ps->j->node[i].count++;
    ws(ps);
    if (ps->p >= ps->n)
      return fail(ps, ps->p, obj ? "the file ends inside an object (cut short?)"
                                 : "the file ends inside an array (cut short?)");
    char c = ps->s[ps->p++];
    if (c == close) return 0;
    if (c != ',') return fail(ps, ps->p - 1, obj ? "',' or '}' expected" : "',' or ']' expected");
  }
}

static int32_t value(parser *ps, int depth) {
  if (depth > DEPTH) return fail(ps, ps->p, "nested deeper than 64");
  ws(ps);
  if (ps->p >= ps->n) return fail(ps, ps->p, "a value expected, but the file ends");
  char c = ps->s[ps->p];
  static const struct { const char *word; int type; } words[] = {
      {"null", RG__J_NULL}, {"false", RG__J_FALSE}, {"true", RG__J_TRUE}};
  for (int k = 0; k < 3; k++) {
    size_t wl = strlen(words[k].word);
    if (c == words[k].word[0]) {
      if (ps->n - ps->p < wl || memcmp(ps->s + ps->p, words[k].word, wl))
        return fail(ps, ps->p, "a value expected");
      int32_t i = new_node(ps, words[k].type);
      ps->p += wl;
      return i;
    }
  }
  if (c == '"') {
    int32_t i = new_node(ps, RG__J_STR);
    if (i < 0) return -1;
    uint32_t off, len;
    if (string(ps, &off, &len)) return -1;
    ps->j->node[i].str = off;
    ps->j->node[i].slen = len;
    return i;
  }
  if (c == '{' || c == '[') {
    int32_t i = new_node(ps, c == '{' ? RG__J_OBJ : RG__J_ARR);
    if (i < 0) return -1;
    ps->p++;
    return entries(ps, i, c == '{', depth) ? -1 : i;
  }
  int32_t i = new_node(ps, RG__J_NUM);
  if (i < 0) return -1;
  double v;
  if (number(ps, &v)) return -1;
  ps->j->node[i].num = v;
  return i;
}

int rg__json_parse(rg__json *j, const char *text, size_t len, char *err, size_t errcap) {
  memset(j, 0, sizeof *j);
  parser ps = {j, text, len, 0, err, errcap, 0};
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) ps.p = 3; /* a byte-order mark */
  if (value(&ps, 0) == 0) {
    ws(&ps);
    if (ps.p < len) fail(&ps, ps.p, "text after the JSON value");
  }
  if (ps.failed) {
    rg__json_free(j);
    return -1;
  }
  return 0;
}

void rg__json_free(rg__json *j) {
  free(j->node);
  free(j->pool);
  memset(j, 0, sizeof *j);
}

int32_t rg__json_get(const rg__json *j, int32_t obj, const char *key) {
  if (obj < 0 || j->node[obj].type != RG__J_OBJ) return -1;
  size_t kl = strlen(key);
  for (int32_t e = j->node[obj].first; e >= 0; e = j->node[e].next)
    if (j->node[e].klen == kl && !memcmp(j->pool + j->node[e].key, key, kl)) return e;
  return -1;
}
