/*
 * decode.c - what a trained model says: greedy answers to addition problems (the held-out
 * accuracy, --sample, --prompt) and sampled text (--sample with --temperature, --top-k,
 * --top-p or --greedy, after an optional --prompt).
 */
#include "train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Greedy answers of n problems whose rows [n, T] hold the question: one forward per
   answer digit over all n, each reading back only the n arg-max tokens. ans: [n, D+1]. */
rg_status add_decode(run *r, int32_t *rows, int64_t n, int32_t *buf, int32_t *ans) {
  const int64_t T = r->t.T, D = r->t.digits;
  rg_ctx *ctx = r->ctx;
  rg_status st = RG_OK;
  for (int64_t p = 0; p <= D && st == RG_OK; p++) {
    int64_t len = 2 * D + 2 + p, dims[2] = {n, len};
    for (int64_t i = 0; i < n; i++) memcpy(buf + i * len, rows + i * T, sizeof *buf * (size_t)len);
    st = rg_step_begin(ctx);
    if (st != RG_OK) break;
    rg_tensor logits = rg_gpt_forward(r->gpt, rg_input(ctx, RG_I32, 2, dims, buf));
    rg_tensor next = rg_argmax(ctx, rg_slice(ctx, logits, 1, len - 1, 1), 2, 0); /* [n,1] */
    st = rg_read(ctx, next, buf, sizeof *buf * (size_t)n);
    for (int64_t i = 0; st == RG_OK && i < n; i++) {
      ans[i * (D + 1) + p] = buf[i];
      if (len < T) rows[i * T + len] = buf[i];
    }
  }
  return st;
}

static uint64_t answer_value(const int32_t *digits, int64_t D) {
  uint64_t v = 0;
  for (int64_t i = D; i >= 0; i--) v = v * 10 + (uint64_t)(digits[i] >= 0 && digits[i] < 10 ? digits[i] : 0);
  return v;
}

static int answer_ok(const int32_t *digits, int64_t D, uint64_t c) {
  for (int64_t i = 0; i <= D; i++, c /= 10)
    if (digits[i] != (int32_t)(c % 10)) return 0;
  return 1;
}

/* Exact-match accuracy on the held-out problems; prints the first --sample of them. */
int add_accuracy(run *r) {
  const int64_t T = r->t.T, D = r->t.digits, chunk = EVAL_CHUNK;
  int32_t *rows = malloc(sizeof *rows * (size_t)(chunk * T));
  int32_t *buf = malloc(sizeof *buf * (size_t)(chunk * T));
  int32_t *ans = malloc(sizeof *ans * (size_t)(chunk * (D + 1)));
  int32_t tgt[32];
  rg_status st = RG_OK;
  int rc = rows && buf && ans ? 0 : (errorf("out of memory for decoding"), EXIT_RUNTIME);
  double t0 = now_s();
  rg_set_training(r->ctx, 0);
  r->correct = 0;
  for (int64_t i0 = 0; !rc && i0 < r->t.ev_n; i0 += chunk) {
    int64_t n = r->t.ev_n - i0 < chunk ? r->t.ev_n - i0 : chunk;
    for (int64_t i = 0; i < n; i++) add_row(&r->t, r->t.ev_a[i0 + i], r->t.ev_b[i0 + i], rows + i * T, tgt);
    st = add_decode(r, rows, n, buf, ans);
    if (st != RG_OK) {
      rc = rg_fail(r->ctx, st, "held-out accuracy");
      break;
    }
    for (int64_t i = 0; i < n; i++) {
      uint64_t a = r->t.ev_a[i0 + i], b = r->t.ev_b[i0 + i];
      int ok = answer_ok(ans + i * (D + 1), D, a + b);
      r->correct += ok;
      if (i0 + i < r->o->sample)
        printf("%0*llu+%0*llu = %llu  model: %llu  %s\n", (int)D, (unsigned long long)a,
               (int)D, (unsigned long long)b, (unsigned long long)(a + b),
               (unsigned long long)answer_value(ans + i * (D + 1), D), ok ? "ok" : "WRONG");
    }
  }
  rg_set_training(r->ctx, 1);
  r->t_eval += now_s() - t0;
  free(rows);
  free(buf);
  free(ans);
  return rc;
}

/* --prompt for addition: "A+B" (or "A+B="), each of at most --digits digits. */
static int parse_sum(const char *s, int D, uint64_t *a, uint64_t *b) {
  size_t na = strspn(s, "0123456789");
  if (!na || na > (size_t)D || s[na] != '+') return -1;
  const char *t = s + na + 1;
  size_t nb = strspn(t, "0123456789");
  if (!nb || nb > (size_t)D || (t[nb] && strcmp(t + nb, "="))) return -1;
  *a = strtoull(s, NULL, 10);
  *b = strtoull(t, NULL, 10);
  return 0;
}

int check_prompt(const run *r) {
  const char *p = r->o->prompt;
  if (!p) return -1;
  if (r->t.kind == TASK_ADD) {
    uint64_t a, b;
    if (!parse_sum(p, r->t.digits, &a, &b)) return -1;
    errorf("--prompt '%s' is not a sum of two numbers of at most %d digits, like %.*s+%.*s",
           p, r->t.digits, r->t.digits, "123456789", r->t.digits, "987654321");
    return EXIT_USAGE;
  }
  for (const unsigned char *c = (const unsigned char *)p; *c; c++)
    if (r->t.tok_of[*c] < 0) {
      errorf("--prompt: byte 0x%02x ('%c') at offset %ld is not in the model's vocabulary "
             "(the bytes of its training text)", *c, *c >= 32 && *c < 127 ? *c : '?',
             (long)(c - (const unsigned char *)p));
      return EXIT_USAGE;
    }
  return -1;
}

int add_prompt(run *r) {
  const int64_t D = r->t.digits;
  int32_t rows[32], buf[32], ans[16], tgt[32];
  uint64_t a, b;
  parse_sum(r->o->prompt, (int)D, &a, &b); /* checked by check_prompt */
  add_row(&r->t, a, b, rows, tgt);
  rg_set_training(r->ctx, 0);
  rg_status st = add_decode(r, rows, 1, buf, ans);
  rg_set_training(r->ctx, 1);
  if (st != RG_OK) return rg_fail(r->ctx, st, "--prompt");
  printf("%0*llu+%0*llu = %llu  model: %llu  %s\n", (int)D, (unsigned long long)a, (int)D,
         (unsigned long long)b, (unsigned long long)(a + b),
         (unsigned long long)answer_value(ans, D), answer_ok(ans, D, a + b) ? "ok" : "WRONG");
  fflush(stdout);
  return 0;
}

/* The next byte from logits[V]: greedy (top-k 1 too), else drawn at the temperature from
   the top-k most likely, cut to the smallest set whose probability reaches top-p. */
static int64_t pick(const opts *o, const float *logits, int64_t V, uint64_t *s) {
  int64_t order[256], n = 0;
  for (int64_t i = 0; i < V; i++) { /* by logit, descending; ties by token, ascending */
    int64_t j = n++;
    for (; j > 0 && logits[order[j - 1]] < logits[i]; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  int64_t k = o->greedy ? 1 : o->top_k ? o->top_k : V;
  if (k > V) k = V;
  double p[256], sum = 0;
  for (int64_t i = 0; i < k; i++)
    sum += p[i] = exp(((double)logits[order[i]] - logits[order[0]]) / o->temperature);
  double acc = 0;
  for (int64_t i = 0; i < k; i++) /* top-p: keep the first that reach it */
    if ((acc += p[i] / sum) >= o->top_p) k = i + 1;
  double total = 0;
  for (int64_t i = 0; i < k; i++) total += p[i];
  double u = rng_uniform(s) * total, c = 0;
  for (int64_t i = 0; i < k; i++)
    if ((c += p[i]) > u) return order[i];
  return order[k - 1];
}

/* --text --sample N: N bytes, each from one forward over the last <= block tokens. */
int sample_text(run *r) {
  const int64_t T = r->t.T, V = r->t.vocab;
  int32_t *win = malloc(sizeof *win * (size_t)T);
  float *logits = malloc(sizeof *logits * (size_t)V);
  uint64_t s = stream_seed(r->o->seed, STREAM_SAMPLE, r->step);
  int64_t len = 0;
  int rc = win && logits ? 0 : (errorf("out of memory for sampling"), EXIT_RUNTIME);
  rg_ctx *ctx = r->ctx;
  const char *p = r->o->prompt;
  if (!rc && p) { /* the prompt's last T bytes start the window; all of it is printed */
    size_t n = strlen(p);
    for (size_t i = n > (size_t)T ? n - (size_t)T : 0; i < n; i++)
      win[len++] = r->t.tok_of[(unsigned char)p[i]];
    fputs(p, stdout);
  } else if (!rc) {
    win[len++] = r->t.tok_of['\n'] >= 0 ? r->t.tok_of['\n'] : r->t.data ? r->t.data[0] : 0;
    if (r->t.byte_of[win[0]] != '\n') putchar(r->t.byte_of[win[0]]);
  }
  rg_set_training(ctx, 0);
  for (int64_t i = 0; !rc && i < r->o->sample; i++) {
    int64_t dims[2] = {1, len};
    rg_status st = rg_step_begin(ctx);
    rg_tensor out = rg_gpt_forward(r->gpt, rg_input(ctx, RG_I32, 2, dims, win));
    rg_tensor last = rg_slice(ctx, out, 1, len - 1, 1);
    if (st == RG_OK) st = rg_read(ctx, last, logits, sizeof *logits * (size_t)V);
    if (st != RG_OK) {
      rc = rg_fail(ctx, st, "sampling");
      break;
    }
    for (int64_t v = 0; v < V && !rc; v++)
      if (!isfinite(logits[v])) {
        errorf("sampling: the model's logits are not finite (%g for byte 0x%02x at sample "
               "byte %lld): its weights are broken; resume from an earlier checkpoint or "
               "train again", (double)logits[v], r->t.byte_of[v], (long long)i);
        rc = EXIT_RUNTIME;
      }
    if (rc) break;
    int32_t tok = (int32_t)pick(r->o, logits, V, &s);
    putchar(r->t.byte_of[tok]);
    if (len == T) memmove(win, win + 1, sizeof *win * (size_t)(T - 1));
    win[len == T ? T - 1 : len++] = tok;
  }
  rg_set_training(ctx, 1);
  putchar('\n');
  fflush(stdout);
  free(win);
  free(logits);
  return rc;
}
