/*
 * notice.c - the library's notices (the AUTO->CPU fallback, RG_TRACE's node lines, a
 * renamed trace file): one formatted line each, written to one sink.
 *
 * The sink is stderr, unless the library's sources are compiled into a program that
 * defines RG_NOTICE_SINK as the name of its own function void NAME(const char *line):
 * the R package does (its notices go through R's REprintf, and its shared object then
 * refers to no stderr, as R requires of a package). A line ends in '\n'; a longer one
 * is cut at 1023 bytes. Callers decide whether to notify (rg_options.quiet); notices
 * are written from the thread that calls into the library.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

#ifdef RG_NOTICE_SINK
void RG_NOTICE_SINK(const char *line);
#else
static void write_stderr(const char *line) { fputs(line, stderr); }
#define RG_NOTICE_SINK write_stderr
#endif

void rg__notice(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof line - 2 ? (size_t)n : sizeof line - 2;
  line[len] = '\n';
  line[len + 1] = '\0';
  RG_NOTICE_SINK(line);
}
