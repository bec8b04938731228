/*
 * bpe.c - GPT-2's byte-level BPE: encoding, decoding and the tokenizer's two hash maps.
 *
 * Encoding (rg_bpe_encode): the text must be valid UTF-8. Special tokens are cut out
 * first, whole, wherever they occur (the leftmost, and the longest of those that start
 * there); each stretch between them is cut into pieces by GPT-2's pattern (pretok.c);
 * each piece's bytes become their one-character tokens, which are then merged:
 *
 *   Invariant (GPT-2's bpe()): each round finds the lowest rank among the adjacent pairs
 *   and merges every occurrence of that pair, left to right, without overlap; rounds go
 *   on while some pair has a rank.
 *
 * Done literally that is quadratic in a piece's length. Here the pairs wait in a heap
 * ordered by (rank, position); a round pops every entry of the lowest rank first and
 * only then merges them in position order, so a pair that a merge makes (whose rank
 * may be lower: a token can be made by another pair than the one that first made it) is
 * not merged before the round's other occurrences, exactly as in the literal algorithm.
 * A merge never makes a pair of the round's own rank (the merged token is longer than
 * either half), so a round's pops are all it merges. Entries that a merge invalidated are
 * recognised when popped: their left symbol is gone, or the two symbols are no longer
 * adjacent or no longer the pair's ids. O(n log n) per piece.
 *
 * The calls keep the tokenizer read-only, so one tokenizer serves any number of threads.
 */
#include "text/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- maps ---------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h ^ h >> 29;
}

static uint64_t hash_pair(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

/* The smallest power of two that holds n entries at most half full. */
static uint32_t table_size(int64_t n) {
  uint32_t s = 16;
  while ((int64_t)s < 2 * n) s *= 2;
  return s;
}

int32_t rg__bpe_lookup(const rg_bpe *bpe, const char *s, size_t len) {
  for (uint32_t i = (uint32_t)hash_bytes(s, len) & bpe->smask;; i = (i + 1) & bpe->smask) {
    uint32_t v = bpe->smap[i];
    if (!v) return -1;
    const rg__tok *t = &bpe->tok[v - 1];
    if (t->str_len == len && !memcmp(bpe->strs + t->str_off, s, len)) return (int32_t)v - 1;
  }
}

uint32_t rg__bpe_pair(const rg_bpe *bpe, int32_t a, int32_t b, int32_t *out) {
  uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  for (uint32_t i = (uint32_t)hash_pair(k) & bpe->pmask;; i = (i + 1) & bpe->pmask) {
    if (bpe->pkey[i] == k) {
      *out = bpe->pout[i];
      return bpe->prank[i];
    }
    if (bpe->pkey[i] == RG__NOPAIR) return UINT32_MAX;
  }
}

int rg__bpe_maps(rg_bpe *bpe, int32_t cap, int32_t *dup) {
  *dup = -1;
  bpe->smask = table_size(bpe->n) - 1;
  bpe->pmask = table_size(cap) - 1;
  bpe->smap = calloc((size_t)bpe->smask + 1, sizeof *bpe->smap);
  bpe->pkey = malloc(((size_t)bpe->pmask + 1) * sizeof *bpe->pkey);
  bpe->prank = malloc(((size_t)bpe->pmask + 1) * sizeof *bpe->prank);
  bpe->pout = malloc(((size_t)bpe->pmask + 1) * sizeof *bpe->pout);
  if (!bpe->smap || !bpe->pkey || !bpe->prank || !bpe->pout) return -1;
  memset(bpe->pkey, 0xFF, ((size_t)bpe->pmask + 1) * sizeof *bpe->pkey);
  for (int32_t id = 0; id < bpe->n; id++) {
    const rg__tok *t = &bpe->tok[id];
    if (t->str_off == UINT32_MAX) continue;
    const char *s = bpe->strs + t->str_off;
    if (rg__bpe_lookup(bpe, s, t->str_len) >= 0) {
      *dup = id;
      return -1;
    }
    uint32_t i = (uint32_t)hash_bytes(s, t->str_len) & bpe->smask;
    while (bpe->smap[i]) i = (i + 1) & bpe->smask;
    bpe->smap[i] = (uint32_t)id + 1;
  }
  return 0;
}

void rg__bpe_add_pair(rg_bpe *bpe, int32_t a, int32_t b, int32_t out, uint32_t r) {
  uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
  uint32_t i = (uint32_t)hash_pair(k) & bpe->pmask;
  while (bpe->pkey[i] != RG__NOPAIR && bpe->pkey[i] != k) i = (i + 1) & bpe->pmask;
  bpe->pkey[i] = k;
  bpe->prank[i] = r;
  bpe->pout[i] = out;
}

uint32_t rg__byte_char(int b) {
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
    return (uint32_t)b;
  int k = 0; /* b's place among the bytes that are not printable */
  for (int c = 0; c < b; c++)
    k += !((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF));
  return 256u + (uint32_t)k;
}

/* ---- the merges of one piece --------------------------------------------------------- */

typedef struct cand { uint32_t rank; int32_t left, right, a, b; } cand;

/* Scratch for one encode call, grown to the longest piece. */
typedef struct work {
  int32_t *id, *next, *prev;
  cand *heap, *round;
  size_t cap; /* symbols; the heap and a round hold 3 * cap */
} work;

static int work_grow(work *w, size_t n) {
  if (n <= w->cap) return 0;
  size_t cap = w->cap ? w->cap : 64;
  while (cap < n) cap *= 2;
  int32_t *id = realloc(w->id, cap * sizeof *id);
  if (id) w->id = id;
  int32_t *nx = realloc(w->next, cap * sizeof *nx);
  if (nx) w->next = nx;
  int32_t *pv = realloc(w->prev, cap * sizeof *pv);
  if (pv) w->prev = pv;
  cand *h = realloc(w->heap, 3 * cap * sizeof *h);
  if (h) w->heap = h;
  cand *r = realloc(w->round, 3 * cap * sizeof *r);
  if (r) w->round = r;
  if (!id || !nx || !pv || !h || !r) return -1;
  w->cap = cap;
  return 0;
}

static int before(const cand *x, const cand *y) {
  return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(cand *h, size_t *n, cand c) {
  size_t i = (*n)++;
  while (i > 0 && before(&c, &h[(i - 1) / 2])) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
  cand top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && before(&h[c + 1], &h[c])) c++;
    if (!before(&h[c], &last)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

/* Pushes the pair of symbols l and r (r may be -1) if it has a merge. */
static void offer(const rg_bpe *bpe, work *w, size_t *nh, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return;
  int32_t out;
  uint32_t rank = rg__bpe_pair(bpe, w->id[l], w->id[r], &out);
  if (rank != UINT32_MAX) heap_push(w->heap, nh, (cand){rank, l, r, w->id[l], w->id[r]});
}

/* Encodes the piece s[0..n) into its symbols (w->id, linked by w->next from 0). */
static void merge_piece(const rg_bpe *bpe, work *w, const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    w->id[i] = bpe->byte_id[s[i]];
    w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    w->prev[i] = (int32_t)i - 1;
  }
  size_t nh = 0;
  for (size_t i = 0; i + 1 < n; i++) offer(bpe, w, &nh, (int32_t)i, (int32_t)i + 1);
  while (nh) {
    uint32_t rank = w->heap[0].rank;
    size_t nr = 0;
    while (nh && w->heap[0].rank == rank) w->round[nr++] = heap_pop(w->heap, &nh);
    for (size_t k = 0; k < nr; k++) {
      cand c = w->round[k];
      if (w->id[c.left] != c.a || w->next[c.left] != c.right || w->id[c.right] != c.b)
        continue; /* a merge of this round took one of its symbols */
      int32_t out = -1;
      rg__bpe_pair(bpe, c.a, c.b, &out);
      w->id[c.left] = out;
      w->id[c.right] = -1;
      int32_t after = w->next[c.right];
      w->next[c.left] = after;
      if (after >= 0) w->prev[after] = c.left;
      offer(bpe, w, &nh, w->prev[c.left], c.left);
      offer(bpe, w, &nh, c.left, after);
    }
  }
}

/* ---- the public calls ---------------------------------------------------------------- */

/* The special token that starts at s[at], longest first; its id and *len, or -1. */
static int32_t special_at(const rg_bpe *bpe, const char *s, size_t n, size_t at, size_t *len) {
  int32_t best = -1;
  *len = 0;
  for (int32_t k = 0; k < bpe->nspecial; k++) {
    const rg__tok *t = &bpe->tok[bpe->special[k]];
    if (t->str_len > *len && t->str_len <= n - at &&
        !memcmp(s + at, bpe->strs + t->str_off, t->str_len)) {
      best = bpe->special[k];
      *len = t->str_len;
    }
  }
  return best;
}

int64_t rg_bpe_encode_msg(const rg_bpe *bpe, const char *text, size_t len, int32_t *ids,
                          int64_t cap, char *msg, size_t msg_size) {
  if (msg_size) msg[0] = 0;
  if (!bpe || (!text && len) || cap < 0 || (!ids && cap > 0)) {
    if (msg_size)
      snprintf(msg, msg_size, "rg_bpe_encode: %s", !bpe ? "the tokenizer is NULL"
               : !text ? "text is NULL with len > 0" : "ids is NULL with cap > 0, or cap < 0");
    return -1;
  }
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    int k = rg__utf8_next(s + i, len - i, &cp);
    if (!k) {
      if (msg_size)
        snprintf(msg, msg_size, "rg_bpe_encode: byte %zu (0x%02X) does not start a valid "
                 "UTF-8 character: pass text as UTF-8 (decode it from its encoding first)",
                 i, s[i]);
      return -1;
    }
    i += (size_t)k;
  }
  work w = {0};
  int64_t count = 0;
  size_t pos = 0;
  while (pos < len) {
    size_t stop = pos, slen = 0; /* the next special token: [stop, stop + slen) */
    int32_t sid = -1;
    for (; stop < len; stop++)
      if (bpe->first[s[stop]] && (sid = special_at(bpe, text, len, stop, &slen)) >= 0) break;
    while (pos < stop) {
      size_t end = rg__pretok_next(s, stop, pos);
      if (work_grow(&w, end - pos)) {
        count = -1;
        if (msg_size) snprintf(msg, msg_size, "rg_bpe_encode: out of host memory");
        goto done;
      }
      merge_piece(bpe, &w, s + pos, end - pos);
      for (int32_t i = 0; i >= 0; i = w.next[i]) {
        if (count < cap) ids[count] = w.id[i];
        count++;
      }
      pos = end;
    }
    if (sid >= 0) {
      if (count < cap) ids[count] = sid;
      count++;
      pos = stop + slen;
    }
  }
done:
  free(w.id);
  free(w.next);
  free(w.prev);
  free(w.heap);
  free(w.round);
  return count;
}

int64_t rg_bpe_encode(const rg_bpe *bpe, const char *text, size_t len, int32_t *ids,
                      int64_t cap) {
  return rg_bpe_encode_msg(bpe, text, len, ids, cap, NULL, 0);
}

int64_t rg_bpe_decode(const rg_bpe *bpe, const int32_t *ids, int64_t n, char *out,
                      size_t cap) {
  if (!bpe || n < 0 || (!ids && n > 0) || (!out && cap > 0)) return -1;
  size_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= bpe->n || bpe->tok[id].str_off == UINT32_MAX) return -1;
    const rg__tok *t = &bpe->tok[id];
    if (total < cap) {
      size_t k = cap - total < t->byte_len ? cap - total : t->byte_len;
      memcpy(out + total, bpe->bytes + t->byte_off, k);
    }
    total += t->byte_len;
  }
  if (total < cap) out[total] = 0;
  return (int64_t)total;
}

int32_t rg_bpe_token_id(const rg_bpe *bpe, const char *token) {
  if (!bpe || !token) return -1;
  return rg__bpe_lookup(bpe, token, strlen(token));
}

int32_t rg_bpe_vocab_size(const rg_bpe *bpe) { return bpe ? bpe->n : 0; }

const char *rg_bpe_token_str(const rg_bpe *bpe, int32_t id) {
  if (!bpe || id < 0 || id >= bpe->n || bpe->tok[id].str_off == UINT32_MAX) return NULL;
  return bpe->strs + bpe->tok[id].str_off;
}

const char *rg_bpe_unicode_version(void) { return rg__uc_version; }

void rg_bpe_free(rg_bpe *bpe) {
  if (!bpe) return;
  free(bpe->tok);
  free(bpe->strs);
  free(bpe->bytes);
  free(bpe->smap);
  free(bpe->pkey);
  free(bpe->prank);
  free(bpe->pout);
  free(bpe->special);
  free(bpe);
}
