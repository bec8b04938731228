/*
 * profile.c - RG_PROFILE=1: time per op, gathered by a backend over its drains and printed
 * as one table through the notice sink (notice.c: stderr unless the embedding program
 * names its own) when the context closes. The backends time their nodes their own
 * way (CUDA: event pairs on the stream, device time; CPU: the host's monotonic clock around
 * each kernel) and share the counting and the table here, so both print the same columns.
 *
 * Invariants: the first RG_PROFILE_SKIP drains of a context are not counted (they pay for
 * first touches: loading kernels, faulting memory in, growing arenas); only the leaf layer
 * is called, so any layer or backend may report.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool rg__profile_wanted(void) {
  const char *env = getenv("RG_PROFILE");
  return env && *env == '1';
}

bool rg__profile_counts(rg_profile *p) {
  if (p->seen++ < RG_PROFILE_SKIP) return false;
  p->drains++;
  return true;
}

void rg__profile_add(rg_profile *p, int op, double ms) {
  p->ms[op] += ms;
  p->calls[op]++;
}

void rg__profile_print(const rg_profile *p, const char *clock) {
  if (!p->drains) return;
  double total = 0;
  int order[RG_OP_COUNT], n = 0;
  for (int i = 0; i < RG_OP_COUNT; i++)
    if (p->calls[i]) order[n++] = i, total += p->ms[i];
  for (int i = 1; i < n; i++) /* insertion sort by time, descending */
    for (int j = i; j > 0 && p->ms[order[j]] > p->ms[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1], order[j - 1] = t;
    }
  rg__notice("resgrad profile: %lld drains, %.3f ms of %s per drain", p->drains,
             total / (double)p->drains, clock);
  rg__notice("  %-28s %10s %12s %10s %6s", "op", "calls", "total ms", "mean us", "%");
  for (int k = 0; k < n; k++) {
    int i = order[k];
    /* ops recorded by one call (rg_backward's accum, matmul_acc, sum_to_acc) are told
       apart by their own names */
    bool shared = false;
    for (int j = 0; j < RG_OP_COUNT; j++)
      shared |= j != i && !strcmp(rg_optab[j].name, rg_optab[i].name);
    char name[64];
    if (shared)
      snprintf(name, sizeof name, "%s (%s)", rg_optab[i].name, rg_optab[i].kernel);
    else
      snprintf(name, sizeof name, "%s", rg_optab[i].name);
    rg__notice("  %-28s %10lld %12.3f %10.2f %6.1f", name, p->calls[i], p->ms[i],
               1e3 * p->ms[i] / (double)p->calls[i], 100.0 * p->ms[i] / (total > 0 ? total : 1));
  }
}
