/*
 * test_memory.c - rg_device_memory: on the CPU 0 < available <= total, total is the
 * machine's memory, and a process whose address space RLIMIT_AS caps 256 MiB above what
 * it uses is told at most 256 MiB; NULL arguments are MISUSE; a dry-run context answers
 * for its device. On CUDA too where a GPU is usable.
 */
#include "common.h"

#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static void sane(rg_ctx *ctx, const char *what) {
  size_t avail = 0, total = 0;
  CHECK_ST(ctx, rg_device_memory(ctx, &avail, &total), RG_OK);
  CHECK(avail > 0 && avail <= total, "%s: available %zu of %zu", what, avail, total);
  printf("%s: %zu MiB available of %zu MiB\n", what, avail / MIB, total / MIB);
}

/* The address space in use, from /proc/self/statm; 0 if unknown. */
static size_t vm_size(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  if (f && fscanf(f, "%llu", &pages) != 1) pages = 0;
  if (f) fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* In a child (the limit stays there): RLIMIT_AS at what is in use + 256 MiB. */
static void rlimit_bound(rg_ctx *ctx) {
  const char *pre = getenv("LD_PRELOAD");
  size_t vm = vm_size();
  if (!vm || vm > ((size_t)1 << 40) || (pre && strstr(pre, "vgpreload"))) {
    printf("RLIMIT_AS check skipped: %s\n", !vm ? "no /proc/self/statm"
           : vm > ((size_t)1 << 40) ? "a sanitizer reserves terabytes of address space"
                                    : "valgrind manages the address space");
    return;
  }
  fflush(stdout); /* the child's exit must not print the parent's lines again */
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit rl = {vm_size() + 256 * MIB, RLIM_INFINITY};
    size_t avail = 0, total = 0;
    rg_status st = setrlimit(RLIMIT_AS, &rl) == 0 ? rg_device_memory(ctx, &avail, &total)
                                                  : RG_ERR_IO;
    printf("under RLIMIT_AS = in use + 256 MiB: %s, %zu MiB available\n", rg_status_str(st),
           avail / MIB);
    fflush(stdout);
    _exit(st == RG_OK && avail > 0 && avail <= 256 * MIB ? 0 : 1);
  }
  int ws = 0;
  CHECK(pid > 0 && waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
        "rg_device_memory under RLIMIT_AS: at most the 256 MiB left (child status %d)", ws);
}

int main(void) {
  rg_ctx *ctx = open_cpu();
  if (!ctx) return finish();
  sane(ctx, rg_device_name(ctx));
  size_t avail = 0, total = 0;
  CHECK_ST(ctx, rg_device_memory(ctx, &avail, &total), RG_OK);
  double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  CHECK(total > 0.99 * phys && total < 1.01 * phys, "total %zu is the machine's %.0f bytes",
        total, phys);
  CHECK_ST(ctx, rg_device_memory(ctx, NULL, &total), RG_ERR_MISUSE);
  CHECK(msg_has(ctx, "rg_device_memory"), "the message names the call: %s", rg_errmsg(ctx));
  rg_clear_error(ctx);
  CHECK_ST(ctx, rg_device_memory(ctx, &avail, NULL), RG_ERR_MISUSE);
  rg_clear_error(ctx);
  CHECK(rg_device_memory(NULL, &avail, &total) == RG_ERR_MISUSE, "NULL context");
  rlimit_bound(ctx);
  CHECK_ST(ctx, rg_close(ctx), RG_OK);

  rg_ctx *dry = open_cpu_opts((rg_options){.dry_run = 1});
  if (dry) sane(dry, rg_device_name(dry));
  rg_close(dry);
  rg_ctx *gpu = NULL, *gdry = NULL;
  if (rg_open(&gpu, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1}) == RG_OK) {
    sane(gpu, rg_device_name(gpu));
    CHECK_ST(gpu, rg_open(&gdry, &(rg_options){.device = RG_DEVICE_CUDA, .quiet = 1,
                                                .dry_run = 1}), RG_OK);
    if (gdry) sane(gdry, rg_device_name(gdry));
    rg_close(gdry);
    rg_close(gpu);
  } else {
    printf("cuda: no usable GPU, CUDA half not run\n");
  }
  return finish();
}
