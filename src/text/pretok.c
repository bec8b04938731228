/*
 * pretok.c - UTF-8, the Unicode classes, and GPT-2's pre-tokenization: the text cut into
 * the pieces that BPE then encodes one at a time.
 *
 * GPT-2 cuts with the regular expression
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * applied repeatedly (findall). rg__pretok_next matches it at one position by hand, with
 * the alternatives in the pattern's order and each one's backtracking spelled out:
 *  - a contraction: an ASCII apostrophe and s, t, re, ve, m, ll or d (case matters);
 *  - ' ?X+' for X letters, numbers or "other" (none of the three classes): the optional
 *    space is U+0020 only, and it is taken only when an X follows it (else the
 *    alternative fails, since the space itself is not an X);
 *  - '\s+(?!\S)': the whitespace run up to its end when the text ends there; else the run
 *    without its last character, which leaves that one to start the next piece (" word");
 *    a run of one character before a non-space falls through to
 *  - '\s+': the whole run.
 * Every alternative consumes at least one character, so the pieces tile the text.
 */
#include "text/text.h"

int rg__utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
  if (!n) return 0;
  unsigned c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len;
  uint32_t v, min;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0; /* a continuation byte, an overlong lead (C0, C1) or past F4 */
  }
  if (n < (size_t)len) return 0;
  for (int k = 1; k < len; k++) {
    if ((s[k] & 0xC0) != 0x80) return 0;
    v = v << 6 | (s[k] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

int rg__utf8_put(uint32_t cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | cp >> 12);
    out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | cp >> 18);
  out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

int rg__uc_class(uint32_t cp) {
  if (cp < 0x80) { /* ASCII without the search */
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return RG__UC_LETTER;
    if (cp >= '0' && cp <= '9') return RG__UC_NUMBER;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return RG__UC_SPACE;
    return RG__UC_OTHER;
  }
  int lo = 0, hi = rg__uc_nranges - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < rg__uc_ranges[mid].lo) hi = mid - 1;
    else if (cp > rg__uc_ranges[mid].hi) lo = mid + 1;
    else return rg__uc_ranges[mid].cls;
  }
  return RG__UC_OTHER;
}

/* The class of the character at s[at] (valid UTF-8) and its length in *len; OTHER with
   *len 0 at the end. */
static int class_at(const unsigned char *s, size_t n, size_t at, int *len) {
  uint32_t cp = 0;
  *len = at < n ? rg__utf8_next(s + at, n - at, &cp) : 0;
  if (!*len) return -1;
  return rg__uc_class(cp);
}

/* The end of the run of characters of class cls that starts at at. */
static size_t run_of(const unsigned char *s, size_t n, size_t at, int cls, size_t *last) {
  int len;
  *last = at;
  while (class_at(s, n, at, &len) == cls) {
    *last = at;
    at += (size_t)len;
  }
  return at;
}

size_t rg__pretok_next(const unsigned char *s, size_t n, size_t at) {
  if (s[at] == '\'' && at + 1 < n) {
    unsigned char a = s[at + 1], b = at + 2 < n ? s[at + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return at + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
      return at + 3;
  }
  int len, cls = class_at(s, n, at, &len);
  size_t from = at, last;
  if (s[at] == ' ') { /* ' ?X+': the space counts only before an X */
    int next = class_at(s, n, at + 1, &len);
    if (next == RG__UC_LETTER || next == RG__UC_NUMBER || next == RG__UC_OTHER) {
      from = at + 1;
      cls = next;
    }
  }
  if (cls != RG__UC_SPACE) return run_of(s, n, from, cls, &last);
  size_t end = run_of(s, n, at, RG__UC_SPACE, &last);
  if (end == n || last == at) return end; /* at the text's end, or a run of one */
  return last;                            /* the run less its last character */
}
