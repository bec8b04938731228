/*
 * main.c - resgrad-generate's run: options, the model, the prompts (all checked before
 * any generation), one rg_gpt_generate over every row, the output.
 */
#define _POSIX_C_SOURCE 200809L
#include "gen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void errorf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", PROG);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int open_ctx(const gopts *o, rg_ctx **ctx) {
  rg_options ro = {0};
  ro.device = !strcmp(o->device, "cpu") ? RG_DEVICE_CPU
              : !strcmp(o->device, "cuda") ? RG_DEVICE_CUDA : RG_DEVICE_AUTO;
  ro.threads = (int)o->threads;
  ro.quiet = 1; /* the device is named on the progress line */
  rg_status st = rg_open(ctx, &ro);
  if (st == RG_OK) return 0;
  errorf("--device %s: cannot open it: %s%s", o->device, rg_status_str(st),
         st == RG_ERR_UNSUPPORTED ? " (no CUDA in this build or machine; use --device cpu)"
                                  : "");
  return st == RG_ERR_UNSUPPORTED ? EXIT_USAGE : EXIT_RUNTIME;
}

/* One row: the prompt (--echo), then the new tokens up to the first -1. */
static int print_row(const gopts *o, const codec *c, const prompts *p, int64_t r,
                     const int32_t *out) {
  int64_t n = 0;
  while (n < o->max_new && out[n] >= 0) n++;
  const int32_t *in = p->ids + r * p->len;
  if (!strcmp(o->format, "ids")) {
    for (int64_t t = 0; o->echo && t < p->lens[r]; t++) printf("%s%d", t ? "," : "", in[t]);
    if (o->echo) printf(" | ");
    for (int64_t t = 0; t < n; t++) printf("%s%d", t ? "," : "", out[t]);
    putchar('\n');
    return 0;
  }
  if (p->n > 1) printf("=== %lld ===\n", (long long)r + 1);
  int rc = o->echo ? codec_print(c, in, p->lens[r]) : 0;
  if (!rc) rc = codec_print(c, out, n);
  putchar('\n');
  return rc;
}

static int generate(const gopts *o, rg_ctx *ctx, const model *m, const codec *c,
                    const prompts *p) {
  int32_t *out = malloc(sizeof *out * (size_t)(p->n * o->max_new));
  if (!out) {
    errorf("out of memory for %lld x %lld tokens", (long long)p->n, (long long)o->max_new);
    return EXIT_RUNTIME;
  }
  rg_sample_config sc = {o->temperature, o->top_k, o->top_p, o->seed, (int32_t)o->stop};
  if (!o->quiet)
    fprintf(stderr, "%s: %s, %lld layers, width %lld, %lld heads, vocab %lld, block %lld "
            "(%lld parameters) on %s; %lld rows, %s\n", PROG, m->kind,
            (long long)m->cfg->layers, (long long)m->cfg->width, (long long)m->cfg->heads,
            (long long)m->cfg->vocab, (long long)m->cfg->block,
            (long long)rg_gpt_param_count(m->gpt), rg_device_name(ctx), (long long)p->n,
            o->sampling ? "sampling" : "greedy");
  double t0 = now_s();
  rg_status st = rg_gpt_generate(m->gpt, p->ids, p->lens, p->n, p->len, o->max_new, &sc, out);
  double dt = now_s() - t0;
  int rc = 0;
  if (st != RG_OK) {
    errorf("generating: %s", rg_errmsg(ctx));
    rc = EXIT_RUNTIME;
  }
  int64_t made = 0;
  for (int64_t i = 0; !rc && i < p->n * o->max_new; i++) made += out[i] >= 0;
  for (int64_t r = 0; !rc && r < p->n; r++) rc = print_row(o, c, p, r, out + r * o->max_new);
  fflush(stdout);
  if (!rc && !o->quiet)
    fprintf(stderr, "%s: %lld new tokens in %.3f s (%.1f tokens/s)\n", PROG, (long long)made,
            dt, dt > 0 ? (double)made / dt : 0.0);
  free(out);
  return rc;
}

int main(int argc, char **argv) {
  gopts o;
  int rc = parse_args(&o, argc, argv);
  if (rc >= 0) return rc;
  rg_ctx *ctx = NULL;
  model m;
  memset(&m, 0, sizeof m);
  codec *c = NULL;
  prompts p = {0};
  rc = open_ctx(&o, &ctx);
  if (!rc) rc = load_model(ctx, o.model, &m);
  int text = o.nprompts || o.prompt_file || !strcmp(o.format, "text");
  if (!rc && text) c = codec_open(&o, &m, &rc);
  if (!rc) rc = read_prompts(&o, &m, c, &p);
  if (!rc) rc = generate(&o, ctx, &m, c, &p);
  free_prompts(&p);
  codec_free(c);
  rg_gpt_free(m.gpt);
  if (ctx && rg_close(ctx) != RG_OK && !rc) rc = EXIT_RUNTIME;
  free_opts(&o);
  return rc;
}
