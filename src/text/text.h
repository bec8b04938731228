/*
 * text.h - what the files of src/text share: the tokenizer's struct, the JSON reader,
 * the hash maps, the Unicode classes and UTF-8.
 *
 * src/text depends on nothing else of the library (no context, no sticky error): a
 * tokenizer is plain host data, and its calls report through the message buffer they
 * are given. Host memory is plain malloc, since no context exists to count it.
 */
#ifndef RG_TEXT_INTERNAL_H
#define RG_TEXT_INTERNAL_H

#include "resgrad_text.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- the tokenizer ------------------------------------------------------------------- */

/* An id's token: its string as the vocabulary spells it (byte-level characters, "Ġthe")
   and the bytes it decodes to, both in pools. A hole (an id no entry names) has
   str_len == 0 and str_off == UINT32_MAX. */
typedef struct rg__tok {
  uint32_t str_off, str_len;
  uint32_t byte_off, byte_len;
} rg__tok;

struct rg_bpe {
  int32_t n;              /* ids [0, n): the largest id + 1 */
  rg__tok *tok;           /* [n] */
  char *strs;             /* token strings, each NUL-terminated */
  char *bytes;            /* decoded bytes */
  size_t nstrs, nbytes;
  uint32_t *smap;         /* token string -> id + 1 (0: empty slot); mask smask */
  uint32_t smask;
  uint64_t *pkey;         /* merge pair (left id << 32 | right id); RG__NOPAIR: empty */
  uint32_t *prank;        /* its rank (position in the merges) */
  int32_t *pout;          /* the id it makes */
  uint32_t pmask;
  int32_t byte_id[256];   /* the id of each byte's one-character token */
  int32_t nspecial;       /* tokens split out of the text whole, before pre-tokenization */
  int32_t *special;       /* their ids */
  bool first[256];        /* a byte that starts a special token */
};

#define RG__NOPAIR UINT64_MAX

/* The byte-level character of byte b (GPT-2's bytes_to_unicode): printable Latin-1 bytes
   stand for themselves, the other 68 for U+0100 + their order. */
uint32_t rg__byte_char(int b);

/* The string map: the id of the token spelled s[0..len), or -1. */
int32_t rg__bpe_lookup(const rg_bpe *bpe, const char *s, size_t len);

/* The merge of (a, b): its rank, *out the id it makes; UINT32_MAX if there is none. */
uint32_t rg__bpe_pair(const rg_bpe *bpe, int32_t a, int32_t b, int32_t *out);

/* Builds the string map over the ids [0, n) and an empty merge map for cap merges; 0, or
   -1 (out of memory, or a string named twice: *dup gets its id). */
int rg__bpe_maps(rg_bpe *bpe, int32_t cap, int32_t *dup);

/* Adds the merge (a, b) -> out at rank r; a pair added again takes the later rank, as
   GPT-2's dict of ranks does. */
void rg__bpe_add_pair(rg_bpe *bpe, int32_t a, int32_t b, int32_t out, uint32_t r);

/* Writes "rg_bpe_load: " and the formatted text into msg (msg_size may be 0). */
void rg__text_msg(char *msg, size_t msg_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- UTF-8 and Unicode classes ------------------------------------------------------- */

enum { RG__UC_OTHER, RG__UC_LETTER, RG__UC_NUMBER, RG__UC_SPACE };
typedef struct rg__uc_range { uint32_t lo, hi; int cls; } rg__uc_range;
extern const char rg__uc_version[];      /* the Unicode version of the table */
extern const int rg__uc_nranges;
extern const rg__uc_range rg__uc_ranges[];
int rg__uc_class(uint32_t cp);

/* The length of the valid UTF-8 sequence at s[0..n) (1 to 4) and its code point in *cp,
   or 0 if the bytes there are not one (an overlong form, a surrogate, past U+10FFFF,
   cut short). */
int rg__utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* Writes cp as UTF-8 into out (4 bytes of room); its length. */
int rg__utf8_put(uint32_t cp, char *out);

/* The end of the pre-tokenization piece that starts at s[at] in s[0..n) (valid UTF-8):
   GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
   matched at at. */
size_t rg__pretok_next(const unsigned char *s, size_t n, size_t at);

/* ---- JSON ---------------------------------------------------------------------------- */

enum { RG__J_NULL, RG__J_FALSE, RG__J_TRUE, RG__J_NUM, RG__J_STR, RG__J_ARR, RG__J_OBJ };

/* A value of a parsed document. Containers list their entries through first and next;
   an object's entry has its key. Strings are decoded (escapes resolved, UTF-8) into the
   document's pool, NUL-terminated; a string may hold a NUL, so its length counts. */
typedef struct rg__jnode {
  int type;
  int32_t first, next;       /* first entry, next sibling; -1: none */
  int32_t count;             /* entries of a container */
  uint32_t key, klen;        /* an object entry's key: offset in the pool, length */
  uint32_t str, slen;        /* RG__J_STR: offset in the pool, length */
  double num;                /* RG__J_NUM */
  size_t at;                 /* the value's byte offset in the text */
} rg__jnode;

typedef struct rg__json {
  rg__jnode *node;  /* node[0] is the document's value */
  int32_t n, cap;
  char *pool;
  size_t npool, cappool;
} rg__json;

/* Parses text[0..len) (RFC 8259; nesting deeper than 64 refused). 0, or -1 with "line L,
   column C (byte B): what is wrong" in err; the document is freed either way on failure. */
int rg__json_parse(rg__json *j, const char *text, size_t len, char *err, size_t errcap);
void rg__json_free(rg__json *j);
/* The entry of object obj named key, or -1. */
int32_t rg__json_get(const rg__json *j, int32_t obj, const char *key);
/* The string of node i (J_STR), or of an object entry's key. */
static inline const char *rg__json_str(const rg__json *j, int32_t i) {
  return j->pool + j->node[i].str;
}
static inline const char *rg__json_key(const rg__json *j, int32_t i) {
  return j->pool + j->node[i].key;
}
/* Line and column (from 1) of byte at in text. */
void rg__text_linecol(const char *text, size_t at, long *line, long *col);

#endif
