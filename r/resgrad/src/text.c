/*
 * text.c - GPT-2's byte-level BPE tokenizer (resgrad_text.h) as an external pointer
 * (class "ag_tokenizer_ptr") with a finalizer that frees it.
 *
 * A tokenizer is host data of its own, tied to no context, so it needs no claim on one.
 * Text goes in as UTF-8 (R converts it) and comes back as UTF-8 or as raw bytes: a
 * sequence of ids may end inside a character, which only the raw form can hold.
 */
#include "rgr.h"

#include <resgrad_text.h>
#include <string.h>

static void bpe_finalize(SEXP p) {
  rg_bpe *b = R_ExternalPtrAddr(p);
  if (!b) return;
  R_ClearExternalPtr(p);
  rg_bpe_free(b);
}

static rg_bpe *bpe_of(SEXP p) {
  return rgr_addr_of(p, "ag_tokenizer_ptr", "tokenizer", "make one with ag_tokenizer()");
}

SEXP rgr_bpe_load(SEXP path) {
  char msg[1024];
  rg_bpe *b = rg_bpe_load(Rf_translateChar(STRING_ELT(path, 0)), msg, sizeof msg);
  if (!b) rgr_signal(RG_ERR_IO, "ag_tokenizer: %s", msg);
  return rgr_make_ptr(b, R_NilValue, bpe_finalize, "ag_tokenizer_ptr");
}

SEXP rgr_bpe_vocab_size(SEXP p) { return Rf_ScalarInteger(rg_bpe_vocab_size(bpe_of(p))); }

/* text: one string, already UTF-8. */
SEXP rgr_bpe_encode(SEXP p, SEXP text) {
  rg_bpe *b = bpe_of(p);
  const char *s = CHAR(STRING_ELT(text, 0));
  size_t len = strlen(s);
  char msg[512];
  /* One id per byte is the usual bound; a longer answer is encoded again at its size. */
  int64_t cap = (int64_t)len + 1;
  int32_t *ids = (int32_t *)R_alloc((size_t)cap, sizeof *ids);
  int64_t n = rg_bpe_encode_msg(b, s, len, ids, cap, msg, sizeof msg);
  if (n > cap) {
    cap = n;
    ids = (int32_t *)R_alloc((size_t)cap, sizeof *ids);
    n = rg_bpe_encode_msg(b, s, len, ids, cap, msg, sizeof msg);
  }
  if (n < 0) rgr_signal(RG_ERR_MISUSE, "ag_encode: %s", msg);
  SEXP r = PROTECT(Rf_allocVector(INTSXP, (R_xlen_t)n));
  for (int64_t i = 0; i < n; i++) INTEGER(r)[i] = ids[i];
  UNPROTECT(1);
  return r;
}

/* ids: an integer vector without NA (R checked); raw: TRUE for the bytes as a raw vector. */
SEXP rgr_bpe_decode(SEXP p, SEXP ids, SEXP raw) {
  rg_bpe *b = bpe_of(p);
  int64_t n = XLENGTH(ids);
  const int32_t *v = INTEGER(ids);
  int64_t need = rg_bpe_decode(b, v, n, NULL, 0);
  if (need < 0) {
    int32_t vocab = rg_bpe_vocab_size(b);
    for (int64_t i = 0; i < n; i++)
      if (v[i] < 0 || v[i] >= vocab || !rg_bpe_token_str(b, v[i]))
        rgr_signal(RG_ERR_MISUSE, "ag_decode: id %d (element %lld) is not in the "
                   "vocabulary: ids are in [0, %d)", v[i], (long long)i + 1, vocab);
    rgr_signal(RG_ERR_MISUSE, "ag_decode: an id is not in the vocabulary");
  }
  char *out = R_alloc((size_t)need + 1, 1);
  rg_bpe_decode(b, v, n, out, (size_t)need + 1);
  if (Rf_asLogical(raw) == TRUE) {
    SEXP r = PROTECT(Rf_allocVector(RAWSXP, (R_xlen_t)need));
    if (need) memcpy(RAW(r), out, (size_t)need);
    UNPROTECT(1);
    return r;
  }
  if (memchr(out, 0, (size_t)need))
    rgr_signal(RG_ERR_MISUSE, "ag_decode: the text holds a NUL byte, which an R string "
               "cannot: decode with raw = TRUE");
  return Rf_ScalarString(Rf_mkCharLenCE(out, (int)need, CE_UTF8));
}
