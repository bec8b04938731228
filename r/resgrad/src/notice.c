/*
 * notice.c - the sink of the bundled library's notices (its core's notice.c calls it,
 * configure defines RG_NOTICE_SINK=rgr_notice): R's error stream, REprintf, which R's
 * sink() and the console see, where a package may not write to stderr itself. The library
 * writes notices from the thread that called it, R's. A library linked through pkg-config
 * was compiled without the sink and writes its notices to stderr.
 */
#include "rgr.h"

void rgr_notice(const char *line);

void rgr_notice(const char *line) { REprintf("%s", line); }
