/*
 * json.h - a strict JSON reader for the tests (RFC 8259): json_parse builds a tree or
 * says where the text breaks the grammar. Strict means no trailing commas, no comments,
 * no leading zeros or bare '.', only the escapes the RFC lists (\u with four hex digits),
 * no raw control characters in strings, and nothing but whitespace after the value. Only
 * for files the tests make: recursion is bounded by JSON_DEPTH and strings are kept
 * undecoded (escapes as written), which is all a comparison with plain names needs.
 */
#ifndef RG_TESTS_JSON_H
#define RG_TESTS_JSON_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
#define JSON_DEPTH 64

typedef struct jv {
  int type;
  double num;        /* J_NUM; J_BOOL: 0 or 1 */
  char *str;         /* J_STR: the characters between the quotes, escapes as written */
  int n;             /* J_ARR, J_OBJ: entries */
  struct jv *items;  /* their values */
  char **keys;       /* J_OBJ: their keys */
} jv;

typedef struct jparser { const char *s, *p; char *err; size_t errcap; } jparser;

static inline int json_fail_(jparser *j, const char *what) {
  if (!*j->err) snprintf(j->err, j->errcap, "%s at byte %ld", what, (long)(j->p - j->s));
  return 0;
}
static inline void json_ws_(jparser *j) {
  while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++;
}

/* A string at j->p (its opening quote); *out gets a copy of its contents. */
static inline int json_str_(jparser *j, char **out) {
  if (*j->p != '"') return json_fail_(j, "a string expected");
  const char *b = ++j->p;
  for (;;) {
    unsigned char c = (unsigned char)*j->p;
    if (!c) return json_fail_(j, "unterminated string");
    if (c < 0x20) return json_fail_(j, "control character in a string");
    if (c == '"') break;
    if (c == '\\') {
      char e = *++j->p;
      if (e == 'u') {
        for (int k = 1; k <= 4; k++)
          if (!isxdigit((unsigned char)j->p[k])) return json_fail_(j, "bad \\u escape");
        j->p += 4;
      } else if (!strchr("\"\\/bfnrt", e) || !e) {
        return json_fail_(j, "bad escape");
      }
    }
    j->p++;
  }
  size_t n = (size_t)(j->p - b);
  *out = malloc(n + 1);
  if (!*out) return json_fail_(j, "out of memory");
  memcpy(*out, b, n);
  (*out)[n] = 0;
  j->p++;
  return 1;
}

static inline int json_num_(jparser *j, double *out) {
  const char *b = j->p;
  if (*j->p == '-') j->p++;
  if (*j->p == '0') j->p++;
  else if (*j->p >= '1' && *j->p <= '9') while (isdigit((unsigned char)*j->p)) j->p++;
  else return json_fail_(j, "bad number");
  if (*j->p == '.') {
    if (!isdigit((unsigned char)*++j->p)) return json_fail_(j, "bad fraction");
    while (isdigit((unsigned char)*j->p)) j->p++;
  }
  if (*j->p == 'e' || *j->p == 'E') {
    j->p++;
    if (*j->p == '+' || *j->p == '-') j->p++;
    if (!isdigit((unsigned char)*j->p)) return json_fail_(j, "bad exponent");
    while (isdigit((unsigned char)*j->p)) j->p++;
  }
  *out = strtod(b, NULL);
  return 1;
}

static inline int json_value_(jparser *j, jv *v, int depth);

/* The entries of an array or object after its opening bracket, up to close. */
static inline int json_list_(jparser *j, jv *v, int depth, char close) {
  int cap = 0;
  json_ws_(j);
  if (*j->p == close) return j->p++, 1;
  for (;;) {
    if (v->n == cap) {
      cap = cap ? 2 * cap : 8;
      jv *it = realloc(v->items, sizeof *it * (size_t)cap);
      char **ks = v->type == J_OBJ ? realloc(v->keys, sizeof *ks * (size_t)cap) : NULL;
      if (it) v->items = it;
      if (ks) v->keys = ks;
      if (!it || (v->type == J_OBJ && !ks)) return json_fail_(j, "out of memory");
    }
    memset(&v->items[v->n], 0, sizeof *v->items);
    if (v->type == J_OBJ) {
      json_ws_(j);
      v->keys[v->n] = NULL;
      if (!json_str_(j, &v->keys[v->n])) return 0;
      json_ws_(j);
      if (*j->p++ != ':') return j->p--, json_fail_(j, "':' expected");
    }
    v->n++;
    if (!json_value_(j, &v->items[v->n - 1], depth + 1)) return 0;
    json_ws_(j);
    if (*j->p == close) return j->p++, 1;
    if (*j->p != ',') return json_fail_(j, "',' or a closing bracket expected");
    j->p++;
  }
}

static inline int json_value_(jparser *j, jv *v, int depth) {
  if (depth > JSON_DEPTH) return json_fail_(j, "nested too deeply");
  json_ws_(j);
  char c = *j->p;
  if (c == '{' || c == '[') {
    v->type = c == '{' ? J_OBJ : J_ARR;
    j->p++;
    return json_list_(j, v, depth, c == '{' ? '}' : ']');
  }
  if (c == '"') return v->type = J_STR, json_str_(j, &v->str);
  if (c == '-' || isdigit((unsigned char)c)) return v->type = J_NUM, json_num_(j, &v->num);
  static const struct { const char *w; int type; double num; } lit[] = {
      {"true", J_BOOL, 1}, {"false", J_BOOL, 0}, {"null", J_NULL, 0}};
  for (int k = 0; k < 3; k++)
    if (!strncmp(j->p, lit[k].w, strlen(lit[k].w))) {
      j->p += strlen(lit[k].w);
      v->type = lit[k].type;
      v->num = lit[k].num;
      return 1;
    }
  return json_fail_(j, "a value expected");
}

static inline void json_free_(jv *v) {
  for (int i = 0; i < v->n; i++) {
    json_free_(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->str);
}

static inline void json_free(jv *v) {
  if (!v) return;
  json_free_(v);
  free(v);
}

/* The tree of text, or NULL with err saying what broke where. */
static inline jv *json_parse(const char *text, char *err, size_t errcap) {
  jparser j = {text, text, err, errcap};
  *err = 0;
  jv *v = calloc(1, sizeof *v);
  if (!v) return snprintf(err, errcap, "out of memory"), NULL;
  int ok = json_value_(&j, v, 0);
  if (ok) {
    json_ws_(&j);
    if (*j.p) ok = json_fail_(&j, "text after the value");
  }
  if (!ok) json_free(v), v = NULL;
  return v;
}

/* Member key of object o, or NULL (also when o is not an object). */
static inline const jv *json_get(const jv *o, const char *key) {
  for (int i = 0; o && o->type == J_OBJ && i < o->n; i++)
    if (!strcmp(o->keys[i], key)) return &o->items[i];
  return NULL;
}

/* Member key of o as a string ("" if absent or not a string), or as a number (-1). */
static inline const char *json_sget(const jv *o, const char *key) {
  const jv *v = json_get(o, key);
  return v && v->type == J_STR ? v->str : "";
}
static inline double json_nget(const jv *o, const char *key) {
  const jv *v = json_get(o, key);
  return v && v->type == J_NUM ? v->num : -1;
}

#endif
