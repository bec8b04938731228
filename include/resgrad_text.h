/*
 * resgrad_text.h - GPT-2's byte-level BPE tokenizer: text to token ids and back.
 *
 * A tokenizer is plain host data, independent of any context: loaded once, read-only
 * afterwards, so one tokenizer may be used from any number of threads at once. Nothing
 * here exits or aborts on a condition the caller can cause; failures return NULL or -1
 * and, where a message buffer is given, say what is wrong and what to do.
 *
 *   char msg[256];
 *   rg_bpe *bpe = rg_bpe_load("gpt2/", msg, sizeof msg);   // vocab.json + merges.txt
 *   if (!bpe) fail(msg);
 *   int32_t ids[64];
 *   int64_t n = rg_bpe_encode(bpe, "Hello world", 11, ids, 64);
 *
 * Encoding is GPT-2's: special tokens ("<|endoftext|>") are cut out whole, the rest is
 * cut by GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
 * \s+(?!\S)|\s+ (Unicode classes from the table rg_bpe_unicode_version names), and each
 * piece's bytes are merged by the merges' ranks. No token is added before or after.
 * docs/text.md is the manual: both file formats, what a tokenizer.json must be, limits.
 */
#ifndef RESGRAD_TEXT_H
#define RESGRAD_TEXT_H

#include "resgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rg_bpe rg_bpe;
/* path: a directory holding vocab.json + merges.txt, or holding tokenizer.json, or a
   tokenizer.json file. On failure returns NULL and writes a message naming the file, the
   line/offset and what to do into msg (msg_size bytes, may be 0). */
RG_API rg_bpe *rg_bpe_load(const char *path, char *msg, size_t msg_size);
RG_API void rg_bpe_free(rg_bpe *bpe);
/* The number of ids: the largest id + 1 (50257 for GPT-2). */
RG_API int32_t rg_bpe_vocab_size(const rg_bpe *bpe);
/* Token ids of text[0..len) into ids[0..cap); returns how many ids the text has (may be
   more than cap, as snprintf), or -1 for text that is not valid UTF-8 (msg). */
RG_API int64_t rg_bpe_encode(const rg_bpe *bpe, const char *text, size_t len, int32_t *ids,
                             int64_t cap);
/* rg_bpe_encode, with the reason for -1 in msg (msg_size bytes, may be 0): the byte offset
   of the first byte that is not UTF-8, or out of host memory. */
RG_API int64_t rg_bpe_encode_msg(const rg_bpe *bpe, const char *text, size_t len,
                                 int32_t *ids, int64_t cap, char *msg, size_t msg_size);
/* The bytes of ids[0..n) into out[0..cap) (not NUL-terminated unless room: as snprintf,
   returns the byte count); -1 for an id outside the vocabulary. */
RG_API int64_t rg_bpe_decode(const rg_bpe *bpe, const int32_t *ids, int64_t n, char *out,
                             size_t cap);
/* The id of a token string such as "<|endoftext|>", or -1. */
RG_API int32_t rg_bpe_token_id(const rg_bpe *bpe, const char *token);
/* The vocabulary's string of id ("Ġthe"), or NULL for an id outside it. */
RG_API const char *rg_bpe_token_str(const rg_bpe *bpe, int32_t id);
/* The Unicode version of the letter, number and whitespace classes, "18.0.0". */
RG_API const char *rg_bpe_unicode_version(void);

#ifdef __cplusplus
}
#endif

#endif
