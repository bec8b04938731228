/*
 * alloc.c - the library's host allocator: every host allocation goes through these, so a
 * test can fail the N-th one (rg_ctx.alloc_fail_at).
 *
 * Invariants: a zero-byte request gets a real block (so NULL always means failure); a
 * NULL ctx allocates without counting; nothing here calls the rest of the core.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

bool rg__alloc_tick(rg_ctx *ctx) {
  if (!ctx) return true;
  ctx->alloc_count++;
  return !(ctx->alloc_fail_at && ctx->alloc_count == ctx->alloc_fail_at);
}
static bool alloc_fails(rg_ctx *ctx) { return !rg__alloc_tick(ctx); }
void *rg__malloc(rg_ctx *ctx, size_t n) { return alloc_fails(ctx) ? NULL : malloc(n ? n : 1); }
void *rg__calloc(rg_ctx *ctx, size_t n, size_t size) {
  return alloc_fails(ctx) ? NULL : calloc(n ? n : 1, size ? size : 1);
}
void *rg__realloc(rg_ctx *ctx, void *p, size_t n) {
  return alloc_fails(ctx) ? NULL : realloc(p, n ? n : 1);
}
void rg__free(rg_ctx *ctx, void *p) { (void)ctx; free(p); }
char *rg__strdup(rg_ctx *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = rg__malloc(ctx, n);
  if (d) memcpy(d, s, n);
  return d;
}
bool rg__grow(rg_ctx *ctx, void **arr, size_t esz, size_t need, size_t *cap) {
  if (need <= *cap) return true;
  size_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  void *p = rg__realloc(ctx, *arr, nc * esz);
  if (!p) return false;
  *arr = p;
  *cap = nc;
  return true;
}
