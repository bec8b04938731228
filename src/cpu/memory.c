/*
 * memory.c - rg_device_memory for the CPU: the host memory this process may still take.
 *
 * total is MemTotal and available MemAvailable of /proc/meminfo (sysconf's page counts
 * where there is no /proc). available is then bounded by what the process's memory
 * cgroup, and each cgroup above it, still allows (v2: memory.max - memory.current; v1:
 * memory.limit_in_bytes - memory.usage_in_bytes) and by RLIMIT_AS less the address space
 * in use: an allocation past either fails however much the machine has free. A bound
 * whose files cannot be read (no such cgroup, no limit: "max") bounds nothing.
 */
#include "cpu.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static uint64_t minu64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t room(uint64_t limit, uint64_t used) { return limit > used ? limit - used : 0; }

/* The number on the first line of file path that starts with key (any line when key is
   "") and has a number after it. */
static bool read_num(const char *path, const char *key, uint64_t *v) {
  FILE *f = fopen(path, "r");
  if (!f) return false;
  char line[256];
  unsigned long long x = 0;
  size_t k = strlen(key);
  bool ok = false;
  while (!ok && fgets(line, sizeof line, f))
    ok = !strncmp(line, key, k) && sscanf(line + k, "%llu", &x) == 1;
  fclose(f);
  *v = x;
  return ok;
}

/* Bounds *avail by limit - usage of the cgroup at root + path and of each one above it
   (path is cut back a component at a time, down to root itself). */
static void cgroup_bound(uint64_t *avail, const char *root, char *path, const char *limit,
                         const char *usage) {
  for (;;) {
    char f[4096];
    uint64_t lim, use;
    snprintf(f, sizeof f, "%s%s/%s", root, path, limit);
    bool ok = read_num(f, "", &lim);
    snprintf(f, sizeof f, "%s%s/%s", root, path, usage);
    if (ok && read_num(f, "", &use)) *avail = minu64(*avail, room(lim, use));
    char *slash = strrchr(path, '/');
    if (!slash) break;
    *slash = 0;
  }
}

/* Bounds *avail by the memory cgroups of /proc/self/cgroup: lines "0::/path" (v2) and
   "N:controller,...:/path" (v1, the memory controller's). */
static void cgroups_bound(uint64_t *avail) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return;
  char line[2048];
  while (fgets(line, sizeof line, f)) {
    char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL, list[256];
    if (!path) continue;
    *path++ = 0;
    path[strcspn(path, "\n")] = 0;
    snprintf(list, sizeof list, ",%s,", ctl + 1);
    if (!ctl[1])
      cgroup_bound(avail, "/sys/fs/cgroup", path, "memory.max", "memory.current");
    else if (strstr(list, ",memory,"))
      cgroup_bound(avail, "/sys/fs/cgroup/memory", path, "memory.limit_in_bytes",
                   "memory.usage_in_bytes");
  }
  fclose(f);
}

static size_t to_size(uint64_t v) { return v < (uint64_t)SIZE_MAX ? (size_t)v : SIZE_MAX; }

rg_status rg_cpu_meminfo(rg_ctx *ctx, size_t *available, size_t *total) {
  long page = sysconf(_SC_PAGESIZE), phys = sysconf(_SC_PHYS_PAGES);
  long avphys = sysconf(_SC_AVPHYS_PAGES);
  uint64_t tot, avail, pages = 0;
  if (read_num("/proc/meminfo", "MemTotal:", &tot)) tot *= 1024;
  else if (page > 0 && phys > 0) tot = (uint64_t)phys * (uint64_t)page;
  else
    return rg__fail(ctx, RG_ERR_UNSUPPORTED, "rg_device_memory", "this system tells neither "
                    "through /proc/meminfo nor through sysconf(_SC_PHYS_PAGES) how much "
                    "memory it has; size the run by hand");
  if (read_num("/proc/meminfo", "MemAvailable:", &avail)) avail *= 1024;
  else avail = page > 0 && avphys > 0 ? (uint64_t)avphys * (uint64_t)page : tot;
  cgroups_bound(&avail);
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    if (page > 0 && read_num("/proc/self/statm", "", &pages)) pages *= (uint64_t)page;
    avail = minu64(avail, room((uint64_t)rl.rlim_cur, pages));
  }
  *total = to_size(tot);
  *available = to_size(minu64(avail, tot));
  return RG_OK;
}
