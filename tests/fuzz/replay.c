/*
 * replay.c - runs a libFuzzer target without libFuzzer.
 *
 * Linked with one tests/fuzz/fuzz_<name>.c (which defines LLVMFuzzerTestOneInput), it
 * feeds the target every file named on the command line and every regular file of every
 * directory named there (sorted by name, so a run is reproducible), one call per file.
 * That is how GCC builds run the fuzzers' corpora under ctest (fuzz_<name>_corpus), and
 * how a crash found by the libFuzzer binary is replayed under a debugger or valgrind:
 *
 *   build/fuzz_api_replay tests/fuzz/corpus/api          # the whole seed corpus
 *   build/fuzz_api_replay crash-3f2a...                  # one input
 *
 * Arguments starting with '-' are libFuzzer flags and are ignored, so a libFuzzer command
 * line replays here unchanged. A target reports a failure by aborting (as under
 * libFuzzer); this driver fails (exit 1) when a path cannot be read or when it was given
 * no input at all, which is always a mistake (an empty or missing corpus).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long n_inputs;
static unsigned long long n_bytes;

/* Reads the whole file into a buffer of exactly its size (so an overread is caught by
   ASan or valgrind) and runs the target on it. */
static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
    return 1;
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fclose(f);
      fprintf(stderr, "replay: out of memory reading %s\n", path);
      return 1;
    }
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    uint8_t *b = realloc(buf, cap * 2);
    if (!b) free(buf);
    buf = b;
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    fprintf(stderr, "replay: error reading %s\n", path);
    return 1;
  }
  uint8_t *exact = malloc(n ? n : 1);
  if (!exact) {
    free(buf);
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    return 1;
  }
  if (n) memcpy(exact, buf, n);
  free(buf);
  if (getenv("RG_REPLAY_VERBOSE")) fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  n_inputs++;
  n_bytes += n;
  return 0;
}

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) {
    fprintf(stderr, "replay: cannot open directory %s: %s\n", path, strerror(errno));
    return 1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  int bad = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue; /* ., .., hidden files (editor droppings) */
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *names);
      if (!nn) {
        bad = 1;
        break;
      }
      names = nn;
    }
    size_t len = strlen(path) + strlen(de->d_name) + 2;
    if (!(names[n] = malloc(len))) {
      bad = 1;
      break;
    }
    snprintf(names[n++], len, "%s/%s", path, de->d_name);
  }
  closedir(d);
  if (names) qsort(names, n, sizeof *names, cmp_names);
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (!bad && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) bad |= run_file(names[i]);
    free(names[i]);
  }
  free(names);
  if (bad) fprintf(stderr, "replay: could not read all of %s\n", path);
  return bad;
}

int main(int argc, char **argv) {
  int bad = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') continue; /* a libFuzzer flag */
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
      bad = 1;
    } else if (S_ISDIR(st.st_mode)) {
      bad |= run_dir(argv[i]);
    } else {
      bad |= run_file(argv[i]);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  printf("replay: %lu inputs (%llu bytes) in %.2f s\n", n_inputs, n_bytes, s);
  if (!n_inputs) {
    fprintf(stderr, "replay: no inputs; usage: %s FILE_OR_DIR...\n", argv[0]);
    return 1;
  }
  return bad;
}
