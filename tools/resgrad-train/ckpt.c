/*
 * ckpt.c - resgrad-train's checkpoints: the metadata it stores beside the tensors, read
 * before the model exists (the model is built from it), and the save and load around
 * rg_save and rg_load.
 */
#include "train.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define KEY_CONFIG "resgrad-train.config"
#define KEY_TASK "resgrad-train.task"
#define KEY_RUN "resgrad-train.run"
#define KEY_STEP "resgrad-train.step"
#define KEY_VOCAB "resgrad-train.vocab"

/* A JSON reader just big enough for a safetensors header's __metadata__ object (the
   model must be built before rg_load, so its config has to be read first, here). */
typedef struct jcur { const char *p, *end; } jcur;

static void jws(jcur *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}
static int jlit(jcur *j, char c) {
  jws(j);
  if (j->p >= j->end || *j->p != c) return 0;
  j->p++;
  return 1;
}
/* A string into buf (escapes decoded; \u beyond ASCII becomes '?'); buf may be NULL. */
static int jstring(jcur *j, char *buf, size_t cap) {
  size_t n = 0;
  if (!jlit(j, '"')) return 0;
  while (j->p < j->end && *j->p != '"') {
    char c = *j->p++;
    if (c == '\\' && j->p < j->end) {
      c = *j->p++;
      if (c == 'n') c = '\n';
      else if (c == 't') c = '\t';
      else if (c == 'r') c = '\r';
      else if (c == 'b') c = '\b';
      else if (c == 'f') c = '\f';
      else if (c == 'u') {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
          int h = j->p < j->end ? hexval((char)(*j->p | 0x20)) : -1;
          if (h < 0) return 0;
          v = v * 16 + (unsigned)h;
          j->p++;
        }
        c = v < 0x80 ? (char)v : '?';
      }
    }
    if (buf && n + 1 < cap) buf[n++] = c;
  }
  if (buf && cap) buf[n] = 0;
  return jlit(j, '"');
}
/* Skips any value. */
static int jskip(jcur *j) {
  jws(j);
  if (j->p >= j->end) return 0;
  if (*j->p == '"') return jstring(j, NULL, 0);
  if (*j->p != '{' && *j->p != '[') {
    while (j->p < j->end && !strchr(",}] \t\r\n", *j->p)) j->p++;
    return 1;
  }
  int depth = 0;
  do {
    if (*j->p == '"') {
      if (!jstring(j, NULL, 0)) return 0;
      continue;
    }
    depth += (*j->p == '{' || *j->p == '[') - (*j->p == '}' || *j->p == ']');
    j->p++;
  } while (depth > 0 && j->p < j->end);
  return depth == 0;
}

static int jmetadata(jcur *j, ckpt_meta *m) {
  struct { const char *key; char *dst; size_t cap; } want[] = {
    {KEY_CONFIG, m->config, sizeof m->config}, {KEY_TASK, m->task, sizeof m->task},
    {KEY_RUN, m->run, sizeof m->run},          {KEY_STEP, m->step, sizeof m->step},
    {KEY_VOCAB, m->vocab, sizeof m->vocab}};
  if (!jlit(j, '{')) return 0;
  for (int first = 1; !jlit(j, '}'); first = 0) {
    char key[300], val[1100];
    if ((!first && !jlit(j, ',')) || !jstring(j, key, sizeof key) || !jlit(j, ':') ||
        !jstring(j, val, sizeof val))
      return 0;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
      size_t n = strlen(val);
      if (strcmp(key, want[k].key)) continue;
      if (n >= want[k].cap) return 0; /* longer than resgrad-train ever writes */
      memcpy(want[k].dst, val, n + 1);
    }
  }
  return 1;
}

/* Reads the checkpoint's metadata. Returns "" or why it could not. */
static const char *peek_meta(const char *path, ckpt_meta *m, char *why, size_t cap) {
  memset(m, 0, sizeof *m);
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(why, cap, "cannot open it: %s", strerror(errno));
    return why;
  }
  unsigned char lb[8];
  uint64_t hlen = 0;
  char *hdr = NULL;
  const char *bad = "";
  if (fread(lb, 1, 8, f) != 8) bad = "it is shorter than a safetensors header";
  for (int i = 0; !*bad && i < 8; i++) hlen |= (uint64_t)lb[i] << (8 * i);
  if (!*bad && (hlen < 2 || hlen > (64u << 20)))
    bad = "it is not a safetensors file (its header length is implausible)";
  if (!*bad && !(hdr = malloc((size_t)hlen))) bad = "out of memory for its header";
  if (!*bad && fread(hdr, 1, (size_t)hlen, f) != hlen) bad = "its header is truncated";
  fclose(f);
  jcur j = {hdr, hdr + hlen};
  int ok = !*bad && jlit(&j, '{');
  for (int first = 1; ok && !jlit(&j, '}'); first = 0) {
    char name[300];
    ok = (first || jlit(&j, ',')) && jstring(&j, name, sizeof name) && jlit(&j, ':');
    if (ok) ok = strcmp(name, "__metadata__") ? jskip(&j) : jmetadata(&j, m);
  }
  free(hdr);
  if (*bad) return bad;
  if (!ok) return "its header is not the JSON of a safetensors file";
  if (!m->config[0]) return "it has no " KEY_CONFIG " metadata (not written by " PROG "?)";
  return "";
}

/* The words that must match between a checkpoint and the run that resumes it. */
/* "positions=" only when it is not the block, so the models of earlier versions keep
   their strings (load_checkpoint compares them whole). */
void config_string(const opts *o, const task *t, char *out, size_t cap) {
  int n = snprintf(out, cap, "layers=%lld width=%lld heads=%lld vocab=%lld block=%lld",
                   (long long)o->layers, (long long)o->width, (long long)o->heads,
                   (long long)t->vocab, (long long)t->T);
  if (o->positions && o->positions != t->T && n > 0 && (size_t)n < cap)
    snprintf(out + n, cap - (size_t)n, " positions=%lld", (long long)o->positions);
}
void task_string(const task *t, char *out, size_t cap) {
  if (t->kind == TASK_TEXT) snprintf(out, cap, "text");
  else if (t->kind == TASK_TOKENS) snprintf(out, cap, "tokens");
  else snprintf(out, cap, "addition digits=%d", t->digits);
}
/* What a resumed run takes over when not told otherwise (the lr schedule's inputs). */
static void run_string(const opts *o, char *out, size_t cap) {
  snprintf(out, cap, "steps=%lld batch=%lld lr=%.9g warmup=%lld wd=%.9g clip=%.9g seed=%llu",
           (long long)o->steps, (long long)o->batch, (double)o->lr, (long long)o->warmup,
           (double)o->wd, (double)o->clip, (unsigned long long)o->seed);
}

/* Field bytes of row r in o (numbers only). */
static const void *field(const opts *o, const opt_row *r, size_t *size) {
  *size = r->type == OPT_REAL ? sizeof(float) : sizeof(int64_t);
  return (const char *)o + r->off;
}

/* Takes the "name=value" words of s for every option not given on the command line. A
   word of the model (must_match) that the command line gives otherwise is refused: that
   model cannot be continued with it. */
static int adopt(opts *o, const unsigned char *given, const char *s, int must_match,
                 const ckpt_meta *m) {
  char word[128];
  for (int n = 0; sscanf(s, "%127s%n", word, &n) == 1; s += n) {
    char *eq = strchr(word, '=');
    const opt_row *r = eq ? opt_find(word, (size_t)(eq - word)) : NULL;
    if (!r || r->type == OPT_STR || r->type == OPT_FLAG) continue; /* vocab=: not ours */
    char why[96];
    opts file = *o;
    if (*opt_set(&file, r, eq + 1, why, sizeof why)) {
      errorf("--resume '%s': bad value '%s' in its metadata (not written by " PROG "?)",
             o->resume, word);
      return EXIT_USAGE;
    }
    size_t size;
    const void *mine = field(o, r, &size), *theirs = field(&file, r, &size);
    if (!given[r - OPTS]) {
      memcpy((char *)o + r->off, theirs, size);
    } else if (must_match && memcmp(mine, theirs, size)) {
      errorf("--resume '%s' holds a model with %s (%s, %s), but --%s is given otherwise: "
             "leave out --%s to continue that model, or leave out --resume to train a new "
             "one", o->resume, word, m->task, m->config, r->name, r->name);
      return EXIT_USAGE;
    }
  }
  return 0;
}

int resume_options(opts *o, const unsigned char *given, ckpt_meta *m) {
  char why[160];
  const char *bad = peek_meta(o->resume, m, why, sizeof why);
  if (*bad) {
    errorf("--resume '%s': %s", o->resume, bad);
    return EXIT_USAGE;
  }
  int file_text = !strcmp(m->task, "text"), file_tokens = !strcmp(m->task, "tokens");
  if (!file_text && !file_tokens && strncmp(m->task, "addition", 8)) {
    errorf("--resume '%s': unknown task '%s' in its metadata", o->resume, m->task);
    return EXIT_USAGE;
  }
  if (o->tokens && !file_tokens) {
    errorf("--resume '%s' holds a %s model (%s), and --tokens trains a token model: leave "
           "out --tokens to continue it, or leave out --resume to train a new token model",
           o->resume, file_text ? "text" : "addition", m->task);
    return EXIT_USAGE;
  }
  if (file_tokens && (o->text || given_opt(given, "digits"))) {
    errorf("--resume '%s' holds a token model; --%s sets up another task: leave it out (or "
           "--resume, to train a new model)", o->resume, o->text ? "text" : "digits");
    return EXIT_USAGE;
  }
  if (o->text && !file_text) {
    errorf("--resume '%s' holds an addition model (%s), and --text trains a text model: "
           "leave out --text to continue the addition model, or leave out --resume to "
           "train a new text model", o->resume, m->task);
    return EXIT_USAGE;
  }
  if (file_text && given_opt(given, "digits")) {
    errorf("--resume '%s' holds a text model, and --digits sets up addition: leave out "
           "--digits (or --resume, to train a new addition model)", o->resume);
    return EXIT_USAGE;
  }
  if (file_text && !m->vocab[0]) {
    errorf("--resume '%s': a text model without " KEY_VOCAB " metadata", o->resume);
    return EXIT_USAGE;
  }
  int rc = adopt(o, given, m->config, 1, m);
  if (!rc) rc = adopt(o, given, m->task, 1, m);
  if (!rc) rc = adopt(o, given, m->run, 0, m);
  return rc;
}
int save_checkpoint(run *r) {
  char runs[256], step[32], vocab[520] = "";
  run_string(r->o, runs, sizeof runs);
  snprintf(step, sizeof step, "%lld", (long long)r->step);
  rg_status st = rg_meta_set(r->ctx, KEY_CONFIG, r->config);
  if (st == RG_OK) st = rg_meta_set(r->ctx, KEY_TASK, r->taskname);
  if (st == RG_OK) st = rg_meta_set(r->ctx, KEY_RUN, runs);
  if (st == RG_OK) st = rg_meta_set(r->ctx, KEY_STEP, step);
  if (st == RG_OK && r->t.kind == TASK_TEXT) {
    vocab_to_hex(&r->t, vocab);
    st = rg_meta_set(r->ctx, KEY_VOCAB, vocab);
  }
  if (st == RG_OK) st = rg_save(r->ctx, r->p.save, r->opt);
  if (st != RG_OK) {
    char what[4200];
    snprintf(what, sizeof what, "--save '%s': not written (any earlier checkpoint there is "
             "as it was)", r->o->save);
    return rg_fail(r->ctx, st, what);
  }
  return 0;
}

int load_checkpoint(run *r) {
  const char *path = r->o->resume;
  rg_status st = rg_load(r->ctx, path, r->opt);
  if (st != RG_OK) {
    errorf("--resume '%s': %s%s", path, rg_errmsg(r->ctx),
           st == RG_ERR_NONFINITE ? " (--allow-nonfinite loads it anyway, for debugging)" : "");
    /* A file that is not what it claims is the user's input; a device fault is not. */
    return st == RG_ERR_IO || st == RG_ERR_NONFINITE || st == RG_ERR_MISUSE ? EXIT_USAGE
                                                                            : EXIT_RUNTIME;
  }
  const char *cfg = rg_meta_get(r->ctx, KEY_CONFIG), *tk = rg_meta_get(r->ctx, KEY_TASK);
  const char *sp = rg_meta_get(r->ctx, KEY_STEP);
  if (!cfg || strcmp(cfg, r->config)) {
    errorf("--resume '%s' holds a model '%s' but this run builds '%s'", path,
           cfg ? cfg : "(none)", r->config);
    return EXIT_USAGE;
  }
  if (!tk || strcmp(tk, r->taskname)) {
    errorf("--resume '%s' was trained on '%s', this run is '%s'", path,
           tk ? tk : "(none)", r->taskname);
    return EXIT_USAGE;
  }
  char *end = NULL;
  long long k = sp ? strtoll(sp, &end, 10) : -1;
  if (!sp || *end || k < 0) {
    errorf("--resume '%s': its " KEY_STEP " metadata is missing or bad", path);
    return EXIT_USAGE;
  }
  r->step0 = r->step = k;
  return 0;
}

