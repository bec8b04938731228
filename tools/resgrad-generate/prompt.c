/*
 * prompt.c - the prompts: token id lists (--tokens, --tokens-file) and text (--prompt,
 * --prompt-file) made ids by a codec, GPT-2's BPE tokenizer (resgrad_text.h) or a
 * resgrad-train text model's byte vocabulary; and the text of generated ids.
 */
#include "gen.h"

#include <resgrad_text.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct codec {
  rg_bpe *bpe;    /* NULL: the model's bytes */
  const model *m;
};

codec *codec_open(const gopts *o, const model *m, int *rc) {
  if (m->bytes && o->tokenizer) {
    errorf("--tokenizer: the model of --model '%s' reads bytes (a resgrad-train text "
           "model); leave out --tokenizer", o->model);
    *rc = EXIT_USAGE;
    return NULL;
  }
  codec *c = calloc(1, sizeof *c);
  if (!c) {
    errorf("out of memory for the tokenizer");
    *rc = EXIT_RUNTIME;
    return NULL;
  }
  c->m = m;
  if (m->bytes) return c;
  char msg[512];
  const char *path = o->tokenizer ? o->tokenizer : m->folder;
  c->bpe = rg_bpe_load(path, msg, sizeof msg);
  if (!c->bpe) {
    if (o->tokenizer) errorf("--tokenizer '%s': %s", path, msg);
    else
      errorf("text needs GPT-2's tokenizer and the model's folder '%s' has none (%s): give "
             "--tokenizer PATH, or prompts as --tokens IDS with --format ids", path, msg);
    *rc = EXIT_USAGE;
    free(c);
    return NULL;
  }
  return c;
}

void codec_free(codec *c) {
  if (c) rg_bpe_free(c->bpe);
  free(c);
}

int codec_print(const codec *c, const int32_t *ids, int64_t n) {
  if (!c->bpe) {
    for (int64_t i = 0; i < n; i++) putchar(c->m->byte_of[ids[i]]);
    return 0;
  }
  int64_t len = rg_bpe_decode(c->bpe, ids, n, NULL, 0);
  char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (len < 0 || !buf || rg_bpe_decode(c->bpe, ids, n, buf, (size_t)len + 1) != len) {
    errorf(len < 0 ? "a generated id is outside the tokenizer's vocabulary of %d: the "
                     "tokenizer is not the model's (print ids with --format ids)"
                   : "out of memory for the text of %d tokens",
           len < 0 ? (int)rg_bpe_vocab_size(c->bpe) : (int)n);
    free(buf);
    return EXIT_RUNTIME;
  }
  fwrite(buf, 1, (size_t)len, stdout);
  free(buf);
  return 0;
}

/* ---- reading --------------------------------------------------------------------------- */

typedef struct list {
  int32_t **row;
  int64_t *len;
  int64_t n, cap;
} list;

static int add(list *l, int32_t *ids, int64_t n) {
  if (l->n == l->cap) {
    int64_t cap = l->cap ? 2 * l->cap : 8;
    int32_t **r = realloc(l->row, sizeof *r * (size_t)cap);
    if (r) l->row = r;
    int64_t *len = realloc(l->len, sizeof *len * (size_t)cap);
    if (len) l->len = len;
    if (!r || !len) {
      free(ids);
      errorf("out of memory for %lld prompts", (long long)cap);
      return EXIT_RUNTIME;
    }
    l->cap = cap;
  }
  l->row[l->n] = ids;
  l->len[l->n++] = n;
  return 0;
}

static void free_list(list *l) {
  for (int64_t i = 0; i < l->n; i++) free(l->row[i]);
  free(l->row);
  free(l->len);
}

/* The ids of s (s_len bytes): integers >= 0 separated by commas and white space. */
static int parse_ids(list *l, const char *what, const char *s, size_t s_len) {
  int32_t *ids = malloc(sizeof *ids * (s_len / 2 + 1));
  int64_t n = 0;
  if (!ids) return errorf("out of memory for %s", what), EXIT_RUNTIME;
  const char *p = s, *end = s + s_len;
  while (p < end) {
    if (strchr(", \t\r\n", *p)) {
      p++;
      continue;
    }
    const char *q = p;
    while (q < end && *q >= '0' && *q <= '9') q++;
    long long v = 0;
    for (const char *d = p; d < q && v <= INT32_MAX; d++) v = v * 10 + (*d - '0');
    if (q == p || (q < end && !strchr(", \t\r\n", *q)) || v > INT32_MAX) {
      int w = (int)strcspn(p, ", \t\r\n");
      errorf("%s: '%.*s' is not a token id (ids are integers >= 0, separated by commas or "
             "spaces)", what, w > 40 ? 40 : w, p);
      free(ids);
      return EXIT_USAGE;
    }
    ids[n++] = (int32_t)v;
    p = q;
  }
  return add(l, ids, n);
}

/* A whole file ('-': standard input) into *buf (NUL-terminated); its size into *n. */
static int slurp(const char *opt, const char *path, char **buf, size_t *n) {
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  *buf = NULL;
  *n = 0;
  if (!f) {
    errorf("%s '%s': %s", opt, path, strerror(errno));
    return EXIT_USAGE;
  }
  size_t cap = 0;
  int rc = 0;
  for (;;) {
    if (*n + 4097 > cap) {
      char *b = realloc(*buf, cap = 2 * cap + 8192);
      if (!b) {
        errorf("%s '%s': out of memory", opt, path);
        rc = EXIT_RUNTIME;
        break;
      }
      *buf = b;
    }
    size_t got = fread(*buf + *n, 1, 4096, f);
    *n += got;
    if (got < 4096) break;
  }
  if (!rc && ferror(f)) {
    errorf("%s '%s': cannot read it: %s", opt, path, strerror(errno));
    rc = EXIT_USAGE;
  }
  if (f != stdin) fclose(f);
  if (rc) free(*buf), *buf = NULL;
  else (*buf)[*n] = 0;
  return rc;
}

static int encode(list *l, const codec *c, const char *what, const char *s, size_t n) {
  int32_t *ids = malloc(sizeof *ids * (n + 1));
  if (!ids) return errorf("out of memory for %s", what), EXIT_RUNTIME;
  int64_t k = 0;
  if (!c->bpe) {
    for (size_t i = 0; i < n; i++) {
      int t = c->m->tok_of[(unsigned char)s[i]];
      if (t < 0) {
        errorf("%s: byte %zu (0x%02x) is not in the model's vocabulary of %lld bytes", what,
               i, (unsigned char)s[i], (long long)c->m->cfg->vocab);
        free(ids);
        return EXIT_USAGE;
      }
      ids[k++] = t;
    }
  } else {
    char msg[256];
    /* byte-level BPE makes at most one id per byte */
    k = rg_bpe_encode_msg(c->bpe, s, n, ids, (int64_t)n + 1, msg, sizeof msg);
    if (k < 0) {
      errorf("%s: %s", what, msg);
      free(ids);
      return EXIT_USAGE;
    }
  }
  return add(l, ids, k);
}

/* Every prompt of o, in the order: --tokens, --tokens-file's lines, --prompt,
   --prompt-file. */
static int gather(const gopts *o, const codec *c, list *l) {
  char what[64];
  int rc = 0;
  for (int i = 0; !rc && i < o->ntokens; i++) {
    snprintf(what, sizeof what, "--tokens #%d", i + 1);
    rc = parse_ids(l, what, o->tokens[i], strlen(o->tokens[i]));
  }
  char *buf = NULL;
  size_t n = 0;
  if (!rc && o->tokens_file && !(rc = slurp("--tokens-file", o->tokens_file, &buf, &n))) {
    int line = 0;
    for (char *p = buf; !rc && p < buf + n;) {
      size_t len = strcspn(p, "\n");
      line++;
      if (strspn(p, ", \t\r") < len) {
        snprintf(what, sizeof what, "--tokens-file line %d", line);
        rc = parse_ids(l, what, p, len);
      }
      p += len + 1;
    }
    if (!rc && l->n == 0) {
      errorf("--tokens-file '%s' holds no prompt (one line of token ids per prompt)",
             o->tokens_file);
      rc = EXIT_USAGE;
    }
  }
  free(buf);
  buf = NULL;
  for (int i = 0; !rc && i < o->nprompts; i++) {
    snprintf(what, sizeof what, "--prompt #%d", i + 1);
    rc = encode(l, c, what, o->prompts[i], strlen(o->prompts[i]));
  }
  if (!rc && o->prompt_file && !(rc = slurp("--prompt-file", o->prompt_file, &buf, &n)))
    rc = encode(l, c, "--prompt-file", buf, n);
  free(buf);
  return rc;
}

/* Prompt i against the model: not empty, ids in its vocabulary, room for --max-new. */
static int check_prompt(const gopts *o, const model *m, const list *l, int64_t i) {
  const rg_gpt_config *cfg = m->cfg;
  int64_t n = l->len[i];
  if (n == 0) {
    errorf("prompt %lld is empty: give at least one token%s", (long long)i + 1,
           m->bytes ? "" : " (GPT-2's <|endoftext|> is 50256)");
    return EXIT_USAGE;
  }
  for (int64_t t = 0; t < n; t++)
    if (l->row[i][t] >= cfg->vocab) {
      errorf("prompt %lld: token %lld is %d, outside the model's vocabulary [0, %lld)",
             (long long)i + 1, (long long)t + 1, (int)l->row[i][t], (long long)cfg->vocab);
      return EXIT_USAGE;
    }
  if (n + o->max_new - 1 > cfg->block) {
    if (n > cfg->block)
      errorf("prompt %lld has %lld tokens, more than the model's block of %lld: shorten it",
             (long long)i + 1, (long long)n, (long long)cfg->block);
    else
      errorf("prompt %lld (%lld tokens) + --max-new %lld - 1 is more than the model's block "
             "of %lld positions: give --max-new %lld or less", (long long)i + 1, (long long)n,
             (long long)o->max_new, (long long)cfg->block, (long long)(cfg->block - n + 1));
    return EXIT_USAGE;
  }
  return 0;
}

int read_prompts(const gopts *o, const model *m, const codec *c, prompts *p) {
  memset(p, 0, sizeof *p);
  list l = {0};
  int rc = gather(o, c, &l);
  for (int64_t i = 0; !rc && i < l.n; i++) rc = check_prompt(o, m, &l, i);
  for (int64_t i = 0; !rc && i < l.n; i++)
    if (l.len[i] > p->len) p->len = l.len[i];
  p->n = l.n * o->batch;
  p->text = o->nprompts || o->prompt_file;
  if (!rc) {
    p->ids = calloc((size_t)(p->n * p->len), sizeof *p->ids);
    p->lens = malloc(sizeof *p->lens * (size_t)p->n);
    if (!p->ids || !p->lens) {
      errorf("out of memory for %lld prompts of %lld tokens", (long long)p->n,
             (long long)p->len);
      rc = EXIT_RUNTIME;
    }
  }
  for (int64_t r = 0; !rc && r < p->n; r++) {
    int64_t i = r / o->batch;
    p->lens[r] = l.len[i];
    memcpy(p->ids + r * p->len, l.row[i], sizeof(int32_t) * (size_t)l.len[i]);
  }
  free_list(&l);
  if (rc) free_prompts(p);
  return rc;
}

void free_prompts(prompts *p) {
  free(p->ids);
  free(p->lens);
  p->ids = NULL;
  p->lens = NULL;
}
