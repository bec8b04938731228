/* source.c - read_source (source.h). */
#include "source.h"

#include <stdio.h>
#include <stdlib.h>

char *read_source(const char *path) {
  const char *dir = getenv("RG_SOURCE_DIR");
  if (!dir || !*dir) return NULL;
  char full[4096];
  snprintf(full, sizeof full, "%s/%s", dir, path);
  FILE *f = fopen(full, "rb");
  char *text = NULL;
  long n = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (text = malloc((size_t)n + 1)) && fread(text, 1, (size_t)n, f) == (size_t)n) {
    text[n] = 0;
  } else {
    free(text);
    text = NULL;
  }
  if (f) fclose(f);
  return text;
}
