/*
 * test_generate_cli.c - the resgrad-generate program, run as a user runs it, on the
 * Hugging Face GPT-2 fixture (tests/data/hf_gpt2_tiny) and on a checkpoint resgrad-train
 * writes.
 *
 * What is checked:
 *  - greedy output for two prompts of different lengths is rg_gpt_generate's for the same
 *    prompts (the library called here on the same files), and PyTorch's greedy
 *    continuation that the fixture holds (expected.safetensors "greedy_*");
 *  - a seeded draw (temperature, top-k, top-p, --batch) is the library's with that
 *    configuration, and the same twice;
 *  - --tokens-file reads one prompt a line; --echo prints the prompt first; --stop ends
 *    a row;
 *  - a text --prompt (or --prompt-file) goes through GPT-2's tokenizer (tests/data/bpe,
 *    --tokenizer) and the new tokens come back as its text: the library's tokens for the
 *    encoded prompt, decoded (as ids with --format ids; ids in, text out with --format
 *    text);
 *  - a resgrad-train text checkpoint continues a text --prompt through its bytes, and a
 *    checkpoint of resgrad-train --init-hf (0 steps: the fixture's weights, positions
 *    beyond its training windows) generates what the fixture does;
 *  - usage errors are one line on stderr with exit code 2, naming what is wrong.
 *
 * Skipped (77) when the program was not built (RG_BUILD_TOOLS=OFF). ctest runs it in
 * build/tests/test_generate_cli, where it writes its files.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "hf_fixture.h"
#include "program.h"
#include "resgrad_text.h"

#include <sys/stat.h>

static char prog[4096], train[4096], model[4096];

enum { NEW = 8, MAXROW = 8 };

static void run(result *r, const char *args) {
  char full[2048];
  snprintf(full, sizeof full, "--device cpu --quiet --model '%s' %s", model, args);
  run_program(r, "", prog, full);
}

/* The rows of ids the program printed: rows[i][0..lens[i]). Returns the row count. */
static int parse_rows(const char *out, int32_t rows[][NEW + 32], int *lens) {
  int n = 0;
  for (const char *p = out; *p && n < MAXROW; n++) {
    lens[n] = 0;
    while (*p && *p != '\n') {
      char *end;
      long v = strtol(p, &end, 10);
      if (end == p) break;
      if (lens[n] < NEW + 32) rows[n][lens[n]++] = (int32_t)v;
      p = end + (*end == ',');
    }
    p += strcspn(p, "\n");
    p += *p == '\n';
  }
  return n;
}

/* The library's tokens for prompts (row-major [b, plen], lengths lens) under sc. */
static int library(const int32_t *prompts, const int64_t *lens, int64_t b, int64_t plen,
                   const rg_sample_config *sc, int32_t *out) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return 0;
  char file[4096];
  hf_path(file, sizeof file, "model.safetensors");
  rg_gpt *g = rg_gpt_load_hf(ctx, file, 0, NULL);
  CHECK(g != NULL, "rg_gpt_load_hf: %s", rg_errmsg(ctx));
  rg_status st = g ? rg_gpt_generate(g, prompts, lens, b, plen, NEW, sc, out) : RG_ERR_IO;
  CHECK(st == RG_OK, "rg_gpt_generate: %s", rg_errmsg(ctx));
  rg_gpt_free(g);
  rg_close(ctx);
  return st == RG_OK;
}

static void same_rows(const char *what, const result *r, const int32_t *want, int nrows) {
  static int32_t rows[MAXROW][NEW + 32];
  int lens[MAXROW];
  CHECK(r->code == 0, "%s: exit %d: %s", what, r->code, r->err);
  int n = parse_rows(r->out, rows, lens);
  CHECK(n == nrows, "%s: %d rows printed, want %d:\n%s", what, n, nrows, r->out);
  for (int i = 0; i < n && i < nrows; i++) {
    int k = 0;
    while (k < NEW && want[i * NEW + k] >= 0) k++;
    CHECK(lens[i] == k && !memcmp(rows[i], want + i * NEW, sizeof(int32_t) * (size_t)k),
          "%s: row %d differs from the library's (%d tokens printed, %d wanted):\n%s", what,
          i, lens[i], k, r->out);
  }
}

static void greedy(result *r) {
  int32_t prompts[2 * 5] = {3, 14, 15, 9, 26, 7, 1}, want[2 * NEW];
  int64_t lens[2] = {5, 2};
  if (!library(prompts, lens, 2, 5, NULL, want)) return;
  run(r, "--tokens 3,14,15,9,26 --tokens '7 1' --max-new 8");
  same_rows("greedy", r, want, 2);

  /* PyTorch's greedy continuation of the same prompts, where the fixture holds it */
  char path[4096];
  hf_path(path, sizeof path, "expected.safetensors");
  rg_ctx *ctx = open_cpu();
  rg_st_file *f = ctx ? rg_st_open(ctx, path) : NULL;
  const rg_st_tensor *g0 = f ? rg_st_find(f, "greedy_0") : NULL;
  const rg_st_tensor *g1 = f ? rg_st_find(f, "greedy_1") : NULL;
  if (g0 && g1) {
    int32_t t0[NEW], t1[NEW];
    int ok = g0->nbytes == sizeof t0 && g1->nbytes == sizeof t1 &&
             rg_st_read(f, g0, t0, sizeof t0) == RG_OK && rg_st_read(f, g1, t1, sizeof t1) == RG_OK;
    CHECK(ok, "the fixture's greedy_0, greedy_1 are not I32 [%d]", NEW);
    CHECK(!memcmp(t0, want, sizeof t0) && !memcmp(t1, want + NEW, sizeof t1),
          "greedy tokens differ from PyTorch's (the fixture's greedy_0, greedy_1)");
  } else {
    printf("the fixture holds no greedy_0/greedy_1: PyTorch's continuation not compared\n");
  }
  rg_st_close(f);
  if (ctx) rg_close(ctx);

  /* one prompt a line; --echo prints it first */
  FILE *tf = fopen("prompts.txt", "w");
  CHECK(tf != NULL, "cannot write prompts.txt");
  if (tf) {
    fputs("3, 14, 15, 9, 26\n\n7 1\n", tf);
    fclose(tf);
  }
  run(r, "--tokens-file prompts.txt --max-new 8");
  same_rows("--tokens-file", r, want, 2);
  run(r, "--tokens 7,1 --max-new 3 --echo");
  char line[256];
  snprintf(line, sizeof line, "7,1 | %d,%d,%d\n", want[NEW], want[NEW + 1], want[NEW + 2]);
  CHECK(r->code == 0 && !strcmp(r->out, line), "--echo printed '%s', want '%s'", r->out, line);

  /* --stop: the row ends at the stop token, which is printed */
  char args[128];
  snprintf(args, sizeof args, "--tokens 7,1 --max-new 8 --stop %d", want[NEW + 1]);
  run(r, args);
  int32_t cut[NEW];
  int k = 0;
  while (k < NEW && (k == 0 || want[NEW + k - 1] != want[NEW + 1])) cut[k] = want[NEW + k], k++;
  for (int i = k; i < NEW; i++) cut[i] = -1;
  same_rows("--stop", r, cut, 1);
}

static void sampled(result *r) {
  int32_t prompts[2 * 2 * 5] = {3, 14, 15, 9, 26, 3, 14, 15, 9, 26, 7, 1, 0, 0, 0, 7, 1},
          want[4 * NEW];
  int64_t lens[4] = {5, 5, 2, 2};
  rg_sample_config sc = {0.9f, 20, 0.95f, 77, -1};
  if (!library(prompts, lens, 4, 5, &sc, want)) return;
  const char *args = "--tokens 3,14,15,9,26 --tokens 7,1 --max-new 8 --batch 2 "
                     "--temperature 0.9 --top-k 20 --top-p 0.95 --seed 77";
  run(r, args);
  same_rows("sampling", r, want, 4);
  char first[sizeof r->out];
  memcpy(first, r->out, sizeof first);
  run(r, args);
  CHECK(!strcmp(first, r->out), "the same seed printed two different samples");
}

/* Text through GPT-2's tokenizer: a random model of the tokenizer's vocabulary, saved as
   a Hugging Face folder; the program's text is the library's tokens decoded. */
static void bpe_text(result *r) {
  char tok[4096], msg[256], folder[] = "bpe_model";
  hf_path(tok, sizeof tok, "../bpe");
  rg_bpe *bpe = rg_bpe_load(tok, msg, sizeof msg);
  CHECK(bpe != NULL, "rg_bpe_load(%s): %s", tok, msg);
  rg_ctx *ctx = bpe ? open_cpu() : NULL;
  if (!ctx) {
    rg_bpe_free(bpe);
    return;
  }
  rg_gpt_config cfg = {.vocab = rg_bpe_vocab_size(bpe), .block = 32, .layers = 1,
                       .width = 16, .heads = 2};
  rg_gpt *g = rg_gpt_new(ctx, &cfg, NULL);
  mkdir(folder, 0777);
  CHECK_ST(ctx, rg_gpt_save_hf(g, "bpe_model/model.safetensors"), RG_OK);
  const char *text = "Hello world, it's here";
  int32_t ids[64], out[NEW];
  int64_t n = rg_bpe_encode(bpe, text, strlen(text), ids, 64);
  CHECK(n > 0 && n < 64, "rg_bpe_encode gave %lld ids", (long long)n);
  char want[1024] = "";
  if (n > 0 && n < 64) {
    CHECK_ST(ctx, rg_gpt_generate(g, ids, NULL, 1, n, NEW, NULL, out), RG_OK);
    int64_t len = rg_bpe_decode(bpe, out, NEW, want, sizeof want - 1);
    CHECK(len >= 0, "rg_bpe_decode failed");
    if (len >= 0) strcat(want, "\n");
  }
  char args[8400];
  snprintf(args, sizeof args, "--device cpu --quiet --model %s --tokenizer '%s' --prompt \"%s\" "
           "--max-new %d", folder, tok, text, NEW);
  run_program(r, "", prog, args);
  CHECK(r->code == 0 && !strcmp(r->out, want), "--prompt printed '%s' (exit %d), the library "
        "'%s': %s", r->out, r->code, want, r->err);
  /* the same prompt from a file, and the ids instead of the text */
  FILE *pf = fopen("prompt.txt", "w");
  if (pf) {
    fputs(text, pf);
    fclose(pf);
  }
  snprintf(args, sizeof args, "--device cpu --quiet --model %s --tokenizer '%s' --prompt-file "
           "prompt.txt --max-new %d", folder, tok, NEW);
  run_program(r, "", prog, args);
  CHECK(r->code == 0 && !strcmp(r->out, want), "--prompt-file printed '%s' (exit %d), the "
        "library '%s': %s", r->out, r->code, want, r->err);
  snprintf(args, sizeof args, "--device cpu --quiet --model %s --tokenizer '%s' --prompt \"%s\" "
           "--max-new %d --format ids", folder, tok, text, NEW);
  run_program(r, "", prog, args);
  same_rows("--prompt --format ids", r, out, 1);
  char list[512] = "";
  for (int64_t i = 0; i < n && i < 64; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? "," : "", ids[i]);
  snprintf(args, sizeof args, "--device cpu --quiet --model %s --tokenizer '%s' --tokens %s "
           "--max-new %d --format text", folder, tok, list, NEW);
  run_program(r, "", prog, args);
  CHECK(r->code == 0 && !strcmp(r->out, want), "--tokens --format text printed '%s' (exit "
        "%d), the library '%s': %s", r->out, r->code, want, r->err);
  /* the model's folder has no tokenizer: the error says what to give */
  expect_exit("", prog, 2, "--tokenizer PATH", "--device cpu --model bpe_model --prompt hi");
  rg_gpt_free(g);
  rg_close(ctx);
  rg_bpe_free(bpe);
}

/* A text model that resgrad-train saved continues a text prompt through its bytes. */
static void text_checkpoint(result *r) {
  if (access(train, X_OK)) {
    printf("resgrad-train not built: its checkpoints not checked\n");
    return;
  }
  FILE *f = fopen("abc.txt", "w");
  CHECK(f != NULL, "cannot write abc.txt");
  if (!f) return;
  for (int i = 0; i < 300; i++) fputs("abcabcabd", f);
  fclose(f);
  run_program(r, "", train, "--device cpu --text abc.txt --block 16 --layers 1 --width 32 "
              "--heads 2 --batch 16 --steps 60 --lr 0.01 --save abc.st");
  CHECK(r->code == 0, "resgrad-train exited %d: %s", r->code, r->err);
  snprintf(model, sizeof model, "abc.st");
  run(r, "--prompt abcab --max-new 7");
  CHECK(r->code == 0 && strlen(r->out) == 8 && r->out[7] == '\n' &&
            strspn(r->out, "abcd") == 7,
        "the text model printed '%s' (exit %d): %s", r->out, r->code, r->err);
  expect_exit("", prog, 2, "not in the model's vocabulary",
              "--device cpu --model abc.st --prompt 'xyz'");

  char args[4400], want[sizeof r->out];
  hf_path(model, sizeof model, "");
  run(r, "--tokens 3,14,15,9,26 --max-new 8");
  memcpy(want, r->out, sizeof want);
  f = fopen("ft.bin", "wb");
  if (f) {
    for (int i = 0; i < 500; i++) fputc(i % 50, f);
    fclose(f);
  }
  snprintf(args, sizeof args, "--device cpu --init-hf '%s' --tokens ft.bin --block 4 "
           "--steps 0 --save ft0.st", model);
  run_program(r, "", train, args);
  CHECK(r->code == 0, "resgrad-train --init-hf --steps 0 exited %d: %s", r->code, r->err);
  snprintf(model, sizeof model, "ft0.st");
  run(r, "--tokens 3,14,15,9,26 --max-new 8");
  CHECK(r->code == 0 && !strcmp(r->out, want), "the --init-hf checkpoint generated '%s', the "
        "fixture '%s': %s", r->out, want, r->err);
  hf_path(model, sizeof model, "");
}

/* A usage error on the fixture: exit 2 and one line that mentions what. */
static void bad(const char *what, const char *args) {
  char a[4600];
  snprintf(a, sizeof a, "--device cpu --model '%s' %s", model, args);
  expect_exit("", prog, 2, what, a);
}

static void usage(result *r) {
  expect_exit("", prog, 2, "--model PATH is required", "--tokens 1,2");
  bad("no prompt", "");
  bad("'x' is not a token id", "--tokens 1,x");
  bad("outside the model's vocabulary [0, 50)", "--tokens 1,50");
  bad("give --max-new 5 or less", "--tokens 1,2,3,4,5,6,7,8,9,10,11,12 --max-new 8");
  bad("--max-new", "--tokens 1,2 --max-new 0");
  bad("--top-p", "--tokens 1,2 --top-p 1.5");
  bad("--temperature 0 is greedy", "--tokens 1,2 --temperature 0 --top-k 5");
  bad("give one kind", "--tokens 1 --prompt hi");
  bad("--tokenizer", "--prompt hello");
  bad("--bogus", "--tokens 1 --bogus 3");
  bad("--device", "--tokens 1 --device tpu");
  expect_exit("", prog, 2, "no such file", "--model no-such-model --tokens 1");
  expect_exit("", prog, 2, "no model.safetensors", "--model . --tokens 1");
  run_program(r, "", prog, "--help");
  CHECK(r->code == 0 && strstr(r->out, "--model") && strstr(r->out, "--top-p") &&
            strstr(r->out, "--tokens-file"),
        "--help exited %d:\n%s", r->code, r->out);
}

int main(int argc, char **argv) {
  (void)argc;
  if (program_path(argv[0], "resgrad-generate", prog, sizeof prog)) {
    printf("SKIP: %s was not built (RG_BUILD_TOOLS=OFF?)\n", prog);
    return 77;
  }
  program_path(argv[0], "resgrad-train", train, sizeof train);
  hf_path(model, sizeof model, "");
  result *r = malloc(sizeof *r);
  if (!r) return 1;
  usage(r);
  greedy(r);
  sampled(r);
  bpe_text(r);
  text_checkpoint(r);
  free(r);
  if (test_failures_) fprintf(stderr, "%d check(s) failed\n", test_failures_);
  else printf("test_generate_cli: all checks passed\n");
  return test_failures_ ? 1 : 0;
}
