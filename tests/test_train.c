/*
 * test_train.c - the resgrad-train program, run as a user runs it (the built binary,
 * through popen), on tiny models so the whole test takes seconds.
 *
 * What is checked:
 *  - resume is exact: 2N steps in one run and N steps + --save + --resume for the other N
 *    print the same final and held-out losses, to the last bit (%.9g of a float);
 *  - the same with the options taken from the checkpoint (--resume alone);
 *  - errors are one line on stderr with the documented exit code 2: a bad option value,
 *    an unknown option, a missing file, a checkpoint of another model shape or head
 *    count (tests/test_cli.c checks the files' side in depth);
 *  - --plot writes a complete SVG with both curves, axis titles and a legend;
 *  - --text trains, samples, saves, and a text checkpoint samples again without the file;
 *  - --tokens (a text file read as raw bytes): resume is exact as above, and 2 ranks of
 *    --batch 8 give the held-out loss of one rank of --batch 16 within 1e-3 (each rank
 *    takes its share of the step's rows from rg_data);
 *  - --init-hf fine-tunes the Hugging Face GPT-2 fixture on a token file: the training
 *    loss falls, the checkpoint resumes without --init-hf; a shape option, a missing
 *    --tokens or a --block beyond the model's positions is refused;
 *  - --distributed under resgrad-run: one rank gives the plain run's losses bit for bit;
 *    2 ranks of --batch 8 give the held-out loss of one rank of --batch 16 within a
 *    relative 1e-3 after 30 steps (they see the same rows), one summary, rank 0's
 *    checkpoint, which a plain run resumes; without resgrad-run's environment it says so.
 *
 * The program is found next to this test's executable (CMake puts both in the build
 * directory); the test is skipped (77) when it was not built (RG_BUILD_TOOLS=OFF).
 * ctest runs it in build/tests/test_train, where it writes its files.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "program.h"

static char prog[4096];
static char launcher[4200]; /* "'<dir>/resgrad-run' -n N -- " while a test runs ranks */

/* A small, fast model: every run below trains this unless it says otherwise. */
#define TINY "--layers 1 --width 32 --heads 2 --batch 16 --eval 64 --eval-every 10 --lr 0.01"

/* Runs the program with args (a shell fragment) and collects what it printed. */
static void run(result *r, const char *fmt, ...) {
  char args[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  run_program(r, launcher, prog, args);
}

/* An error run: the exit code, and exactly one line on stderr that mentions what. */
static void expect_error(int code, const char *what, const char *args) {
  expect_exit(launcher, prog, code, what, args);
}

static void test_help(result *r) {
  run(r, "--help");
  CHECK(r->code == 0, "--help exited %d", r->code);
  const char *opts[] = {"--text", "--steps", "--batch", "--lr", "--layers", "--width",
                        "--heads", "--seed", "--device", "--save", "--resume", "--plot",
                        "--sample", "--help"};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
    CHECK(strstr(r->out, opts[i]) != NULL, "--help does not list %s", opts[i]);
  CHECK(strstr(r->out, "(default ") != NULL, "--help shows no defaults:\n%s", r->out);
}

static void test_usage_errors(void) {
  expect_error(2, "--steps", "--steps abc");
  expect_error(2, "--width", "--width 0");
  expect_error(2, "--width", "--width 30 --heads 4");
  expect_error(2, "--lr", "--lr -1");
  expect_error(2, "--bogus", "--bogus 3");
  expect_error(2, "--device", "--device tpu");
  expect_error(2, "--steps", "--steps");
  expect_error(2, "no-such-file.txt", "--text no-such-file.txt");
  expect_error(2, "no-such-checkpoint.st", "--resume no-such-checkpoint.st");
}

/* 40 steps at once, 20 + 20 through a checkpoint, and 20 + --resume alone. */
static void test_resume_exact(result *r) {
  char full_loss[128], full_ho[128], got[128], got_ho[128];
  run(r, TINY " --steps 40");
  CHECK(r->code == 0, "the full run exited %d: %s", r->code, r->err);
  line_after(r->out, "final loss ", full_loss, sizeof full_loss);
  line_after(r->out, "held-out loss ", full_ho, sizeof full_ho);
  CHECK(strstr(full_loss, "at step 40") != NULL, "no final loss at step 40 in:\n%s", r->out);

  /* each block an activation checkpoint region: the same run bit for bit */
  run(r, TINY " --steps 40 --checkpoint-activations");
  CHECK(r->code == 0, "--checkpoint-activations exited %d: %s", r->code, r->err);
  CHECK(!strcmp(line_after(r->out, "final loss ", got, sizeof got), full_loss),
        "--checkpoint-activations: final loss '%s' != '%s' without", got, full_loss);
  CHECK(!strcmp(line_after(r->out, "held-out loss ", got_ho, sizeof got_ho), full_ho),
        "--checkpoint-activations: held-out loss '%s' != '%s' without", got_ho, full_ho);

  run(r, TINY " --steps 40 --stop-at 20 --save half.st");
  CHECK(r->code == 0, "the first half exited %d: %s", r->code, r->err);
  CHECK(strstr(r->out, "at step 20") != NULL, "the first half did not stop at 20:\n%s", r->out);

  run(r, TINY " --steps 40 --resume half.st");
  CHECK(r->code == 0, "the resumed run exited %d: %s", r->code, r->err);
  CHECK(strstr(r->out, "trained steps 20..40") != NULL, "resumed at the wrong step:\n%s", r->out);
  CHECK(!strcmp(line_after(r->out, "final loss ", got, sizeof got), full_loss),
        "resumed final loss '%s' != uninterrupted '%s'", got, full_loss);
  CHECK(!strcmp(line_after(r->out, "held-out loss ", got_ho, sizeof got_ho), full_ho),
        "resumed held-out loss '%s' != uninterrupted '%s'", got_ho, full_ho);

  run(r, "--resume half.st"); /* model, schedule and seed from the checkpoint */
  CHECK(r->code == 0, "--resume alone exited %d: %s", r->code, r->err);
  CHECK(!strcmp(line_after(r->out, "final loss ", got, sizeof got), full_loss),
        "--resume alone: final loss '%s' != uninterrupted '%s'", got, full_loss);
}

static void test_wrong_model(void) {
  /* another shape or head count than the checkpoint's: refused before the model is
     built, naming the option and the checkpoint's value */
  expect_error(2, "width=32", "--resume half.st --width 64");
  expect_error(2, "--heads", "--resume half.st --heads 4");
  /* a model of addition is not a model of text */
  expect_error(2, "--text", "--resume half.st --text tiny.txt");
}

static void test_plot(result *r) {
  char svg[1 << 16];
  run(r, TINY " --steps 20 --plot loss.svg");
  CHECK(r->code == 0, "--plot run exited %d: %s", r->code, r->err);
  slurp("loss.svg", svg, sizeof svg);
  CHECK(!strncmp(svg, "<?xml", 5), "loss.svg does not start with an XML declaration");
  CHECK(strstr(svg, "</svg>\n") != NULL, "loss.svg is not complete");
  CHECK(strstr(svg, "<polyline") != NULL, "loss.svg has no curve");
  CHECK(strstr(svg, "training loss") && strstr(svg, "held-out loss"), "loss.svg has no legend");
  CHECK(strstr(svg, ">step</text>") != NULL, "loss.svg has no x-axis title");
}

static void test_text(result *r) {
  FILE *f = fopen("tiny.txt", "w");
  CHECK(f != NULL, "cannot write tiny.txt");
  if (!f) return;
  for (int i = 0; i < 200; i++) fputs("the quick brown fox jumps over the lazy dog.\n", f);
  fclose(f);
  run(r, TINY " --text tiny.txt --block 16 --steps 30 --sample 40 --save text.st");
  CHECK(r->code == 0, "--text run exited %d: %s", r->code, r->err);
  CHECK(strstr(r->out, "bits/byte") != NULL, "--text printed no held-out loss:\n%s", r->out);
  const char *s = strstr(r->out, "--- sample");
  CHECK(s != NULL, "--text printed no sample:\n%s", r->out);
  run(r, "--resume text.st --sample 25"); /* the vocabulary comes from the checkpoint */
  CHECK(r->code == 0, "sampling a text checkpoint exited %d: %s", r->code, r->err);
  CHECK(strstr(r->out, "--- sample: 25 bytes") != NULL, "no sample from the checkpoint:\n%s",
        r->out);
  f = fopen("short.txt", "w");
  if (f) {
    fputs("too short", f);
    fclose(f);
  }
  expect_error(2, "short.txt", "--text short.txt");
}

/* Token files: 30 steps at once against 15 + --resume 15, bit for bit; ranks' shares. */
static void test_tokens(result *r) {
  char full[128], full_ho[128], got[128];
  const char *tok = TINY " --tokens tiny.txt --val-tokens short.txt --vocab 256 --block 4 "
                    "--steps 30";
  run(r, "%s", tok);
  CHECK(r->code == 0 && strstr(r->out, ": tokens, GPT") && strstr(r->out, "--val-tokens"),
        "--tokens run exited %d: %s%s", r->code, r->out, r->err);
  line_after(r->out, "final loss ", full, sizeof full);
  line_after(r->out, "held-out loss ", full_ho, sizeof full_ho);
  run(r, "%s --stop-at 15 --save tok.st", tok);
  CHECK(r->code == 0, "--tokens --stop-at 15 exited %d: %s", r->code, r->err);
  run(r, "--resume tok.st --tokens tiny.txt --val-tokens short.txt");
  CHECK(r->code == 0 && strstr(r->out, "trained steps 15..30"), "resuming tok.st exited %d: "
        "%s%s", r->code, r->out, r->err);
  CHECK(!strcmp(line_after(r->out, "final loss ", got, sizeof got), full),
        "--tokens resumed final loss '%s' != uninterrupted '%s'", got, full);
  CHECK(!strcmp(line_after(r->out, "held-out loss ", got, sizeof got), full_ho),
        "--tokens resumed held-out loss '%s' != uninterrupted '%s'", got, full_ho);
  expect_error(2, "--resume", "--resume tok.st --steps 40"); /* training on needs the file */

  char path[4100];
  snprintf(path, sizeof path, "%.*s/resgrad-run", (int)(strrchr(prog, '/') - prog), prog);
  if (access(path, X_OK)) return;
  run(r, "--device cpu %s --batch 16", tok);
  line_after(r->out, "held-out loss ", full_ho, sizeof full_ho);
  snprintf(launcher, sizeof launcher, "'%s' -n 2 -- ", path);
  run(r, "--distributed --device cpu %s --batch 8", tok);
  launcher[0] = 0;
  line_after(r->out, "held-out loss ", got, sizeof got);
  double a = atof(full_ho), b = atof(got);
  CHECK(r->code == 0 && a > 0 && fabs(a - b) <= 1e-3 * a, "--tokens, 2 ranks of batch 8: "
        "exit %d, held-out loss '%s'; one rank of batch 16: '%s': %s", r->code, got, full_ho,
        r->err);
}

/* Fine-tuning the fixture (vocab 50, 16 positions) on a repeating pattern of 23 tokens. */
static void test_init_hf(result *r) {
  char hf[4096], first[64], last[64], args[4400];
  const char *src = getenv("RG_SOURCE_DIR");
  snprintf(hf, sizeof hf, "%s/tests/data/hf_gpt2_tiny", src ? src : "..");
  FILE *f = fopen("ft.bin", "wb");
  CHECK(f != NULL, "cannot write ft.bin");
  if (!f) return;
  for (int i = 0; i < 2300; i++) fputc(i % 23 * 7 % 50, f);
  fclose(f);
  snprintf(args, sizeof args, "--device cpu --init-hf '%s' --tokens ft.bin --block 8 "
           "--batch 8 --steps 40 --warmup 5 --lr 0.01 --log-every 1 --save ft.st", hf);
  run(r, "%s", args);
  CHECK(r->code == 0, "--init-hf exited %d: %s", r->code, r->err);
  CHECK(strstr(r->out, "layers=2 width=24 heads=3 vocab=50 block=8 positions=16"),
        "--init-hf did not take the model's shape:\n%s", r->out);
  double a = atof(line_after(r->err, "step 1/40  loss ", first, sizeof first));
  double b = atof(line_after(r->err, "step 40/40  loss ", last, sizeof last));
  CHECK(a > 0 && b > 0 && b < 0.8 * a, "fine-tuning: loss %g at step 1, %g at step 40", a, b);
  run(r, "--device cpu --resume ft.st --tokens ft.bin --steps 50");
  CHECK(r->code == 0 && strstr(r->out, "trained steps 40..50"), "resuming a fine-tuned "
        "checkpoint exited %d: %s%s", r->code, r->out, r->err);
  snprintf(args, sizeof args, "--init-hf '%s' --tokens ft.bin --layers 3", hf);
  expect_error(2, "--layers", args);
  snprintf(args, sizeof args, "--init-hf '%s' --tokens ft.bin --block 32", hf);
  expect_error(2, "--block 32 is longer than the model's 16 positions", args);
  snprintf(args, sizeof args, "--init-hf '%s'", hf);
  expect_error(2, "add --tokens FILE", args);
  expect_error(2, "--init-hf", "--init-hf no-such-model --tokens ft.bin");
}

static int count_of(const char *s, const char *needle) {
  int n = 0;
  for (; (s = strstr(s, needle)); s++) n++;
  return n;
}

/* The rows of 2 ranks of --batch 8 are those of one rank of --batch 16 (make_batch). */
static void test_distributed(result *r) {
  char path[4100], one[128], got[128];
  snprintf(path, sizeof path, "%.*s/resgrad-run", (int)(strrchr(prog, '/') - prog), prog);
  if (access(path, X_OK)) {
    printf("resgrad-run not built: --distributed not checked\n");
    return;
  }
  expect_error(1, "RG_WORLD_SIZE is not set", "--distributed --device cpu " TINY);
  run(r, "--device cpu " TINY " --steps 20");
  line_after(r->out, "final loss ", one, sizeof one);
  snprintf(launcher, sizeof launcher, "'%s' -n 1 -- ", path);
  run(r, "--distributed --device cpu " TINY " --steps 20");
  CHECK(r->code == 0 && !strcmp(line_after(r->out, "final loss ", got, sizeof got), one),
        "one rank: exit %d, final loss '%s', the plain run's '%s': %s", r->code, got, one,
        r->err);

  launcher[0] = 0;
  run(r, "--device cpu " TINY " --steps 30");
  line_after(r->out, "held-out loss ", one, sizeof one);
  snprintf(launcher, sizeof launcher, "'%s' -n 2 -- ", path);
  run(r, "--distributed --device cpu " TINY " --steps 30 --batch 8 --save dist.st");
  launcher[0] = 0;
  line_after(r->out, "held-out loss ", got, sizeof got);
  double a = atof(one), b = atof(got);
  CHECK(r->code == 0 && a > 0 && fabs(a - b) <= 1e-3 * a, "2 ranks of batch 8: exit %d, "
        "held-out loss '%s'; one rank of batch 16: '%s': %s", r->code, got, one, r->err);
  CHECK(count_of(r->out, "final loss ") == 1 && strstr(r->out, "2 ranks of batch 8"),
        "2 ranks: not one summary of rank 0:\n%s", r->out);
  run(r, "--resume dist.st");
  CHECK(r->code == 0 && strstr(r->out, "at step 30 of 30"), "a plain run resuming rank 0's "
        "checkpoint exited %d: %s%s", r->code, r->out, r->err);
}

int main(int argc, char **argv) {
  (void)argc;
  if (program_path(argv[0], "resgrad-train", prog, sizeof prog)) {
    printf("SKIP: %s was not built (RG_BUILD_TOOLS=OFF?)\n", prog);
    return 77;
  }
  result *r = malloc(sizeof *r);
  if (!r) return 1;
  test_help(r);
  test_usage_errors();
  test_resume_exact(r);
  test_text(r);
  test_tokens(r);
  test_wrong_model();
  test_init_hf(r);
  test_plot(r);
  test_distributed(r);
  free(r);
  if (test_failures_) fprintf(stderr, "%d check(s) failed\n", test_failures_);
  else printf("test_train: all checks passed\n");
  return test_failures_ ? 1 : 0;
}
