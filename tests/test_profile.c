/*
 * test_profile.c - RG_PROFILE=1 on the CPU: rg_close prints the per-op table.
 *
 * A context opened with RG_PROFILE=1 reads its constant, then runs five drains of a small
 * product and a ReLU; stderr (redirected to a file) then holds the table's header counting
 * every drain but the first two, and a row for each op with a call per counted drain.
 * Without RG_PROFILE nothing is printed.
 */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <fcntl.h>
#include <unistd.h>

/* Runs the drains on a context opened with RG_PROFILE set to env (NULL: unset) and
   returns what rg_close printed on stderr (malloc'ed; NULL on failure); *drains: how
   many the context ran. */
static char *stderr_of_run(const char *env, long long *drains) {
  if (env)
    setenv("RG_PROFILE", env, 1);
  else
    unsetenv("RG_PROFILE");
  char path[] = "/tmp/rg_profile_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return NULL;
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  rg_ctx *c = open_cpu();
  if (c) {
    float a[16], out[16];
    for (int i = 0; i < 16; i++) a[i] = (float)(i % 5) - 2.f;
    rg_tensor x = rg_constant(c, RG_F32, 2, (int64_t[]){4, 4}, a);
    CHECK_ST(c, rg_read(c, x, out, sizeof out), RG_OK);
    for (int d = 0; d < 5; d++) {
      rg_step_begin(c);
      rg_tensor y = rg_relu(c, rg_matmul(c, x, x));
      CHECK_ST(c, rg_read(c, y, out, sizeof out), RG_OK);
    }
    rg_stats st;
    rg_stats_get(c, &st);
    *drains = (long long)st.drains;
    CHECK_ST(c, rg_close(c), RG_OK);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  off_t n = lseek(fd, 0, SEEK_END);
  char *text = malloc((size_t)n + 1);
  CHECK(text && pread(fd, text, (size_t)n, 0) == n, "read back %s", path);
  if (text) text[n] = 0;
  close(fd);
  unlink(path);
  unsetenv("RG_PROFILE");
  return text;
}

/* The calls column of op's row in the table, or -1 without one. */
static long long calls_of(const char *table, const char *op) {
  char key[64];
  snprintf(key, sizeof key, "\n  %s ", op);
  const char *row = strstr(table, key);
  return row ? strtoll(row + strlen(key), NULL, 10) : -1;
}

int main(void) {
  long long drains = 0;
  char *on = stderr_of_run("1", &drains);
  if (on) {
    long long counted = drains - 2;
    char head[64];
    snprintf(head, sizeof head, "resgrad profile: %lld drains, ", counted);
    CHECK(drains >= 5, "at least the 5 reads drained, not %lld", drains);
    CHECK(strstr(on, head) != NULL, "the header counts %lld drains: %s", counted, on);
    CHECK(strstr(on, "CPU time") != NULL, "the header names the clock: %s", on);
    CHECK(strstr(on, "calls") && strstr(on, "total ms") && strstr(on, "mean us"),
          "the columns: %s", on);
    CHECK(calls_of(on, "rg_matmul") == counted, "rg_matmul's row has a call a drain: %s", on);
    CHECK(calls_of(on, "rg_relu") == counted, "rg_relu's row has a call a drain: %s", on);
  }
  free(on);
  char *off = stderr_of_run(NULL, &drains);
  if (off) CHECK(!strstr(off, "resgrad profile"), "no table without RG_PROFILE: %s", off);
  free(off);
  return finish();
}
