/*
 * program.h - running an installed program of the build as a user does (the tests of
 * resgrad-train and resgrad-generate): found next to the test's executable, run through
 * the shell with its output collected, its lines picked apart. Include it after
 * common.h, in a file that defines _POSIX_C_SOURCE 200809L before any include.
 */
#ifndef RG_TESTS_PROGRAM_H
#define RG_TESTS_PROGRAM_H

#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct result {
  int code;           /* exit status, -1 if it did not exit normally */
  char out[1 << 16];  /* stdout */
  char err[1 << 14];  /* stderr */
} result;

static inline void slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = 0;
  if (f) fclose(f);
}

/* The program `name` in the folder of argv0 into out; 0 when it is there and executable. */
static inline int program_path(const char *argv0, const char *name, char *out, size_t cap) {
  const char *slash = strrchr(argv0, '/');
  int dir = slash ? (int)(slash - argv0) : 1;
  snprintf(out, cap, "%.*s/%s", dir, slash ? argv0 : ".", name);
  return access(out, X_OK);
}

/* Runs "<prefix>'<prog>' <args>" through the shell (prefix: a launcher such as
   resgrad-run's, or ""), its stdout and stderr into r (through out.txt and err.txt in
   the working folder). */
static inline void run_program(result *r, const char *prefix, const char *prog,
                               const char *args) {
  char cmd[6000];
  snprintf(cmd, sizeof cmd, "%s'%s' %s >out.txt 2>err.txt", prefix, prog, args);
  int st = system(cmd);
  r->code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  slurp("out.txt", r->out, sizeof r->out);
  slurp("err.txt", r->err, sizeof r->err);
}

/* The rest of the line of out that starts with key, or "" (copied into buf). */
static inline const char *line_after(const char *out, const char *key, char *buf,
                                     size_t cap) {
  const char *p = strstr(out, key);
  buf[0] = 0;
  if (!p) return buf;
  p += strlen(key);
  size_t n = strcspn(p, "\n");
  if (n >= cap) n = cap - 1;
  memcpy(buf, p, n);
  buf[n] = 0;
  return buf;
}

static inline int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* A run that must fail: exit code `code` and exactly one line on stderr that mentions
   what. */
static inline void expect_exit(const char *prefix, const char *prog, int code,
                               const char *what, const char *args) {
  result *r = malloc(sizeof *r);
  if (!r) return;
  run_program(r, prefix, prog, args);
  CHECK(r->code == code, "'%s' exited %d, expected %d; stderr: %s", args, r->code, code, r->err);
  CHECK(count_lines(r->err) == 1, "'%s' printed %d lines on stderr: %s", args,
        count_lines(r->err), r->err);
  CHECK(strstr(r->err, what) != NULL, "'%s': stderr lacks \"%s\": %s", args, what, r->err);
  free(r);
}

#endif
