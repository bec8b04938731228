/*
 * test_crash.c - rg_save is crash-safe: a process killed (SIGKILL) at any moment while it
 * saves leaves the old checkpoint or the new one, never a torn file or a mix of two.
 *
 * Each iteration forks a child that opens a quiet CPU context, builds a model of a few MB
 * and saves it over and over to one path; before save number g every element of every
 * parameter is set to g and the metadata key "gen" to "g". After each completed rg_save
 * the child reports g (and how long the save took) on a pipe. The parent kills the child
 * with SIGKILL after a random delay (0 .. ~3 saves, adapted to the measured save time;
 * one iteration in ten, the first included, is killed before it is even ready), so kills
 * land before the first save, inside a write, inside fsync, between rename and the next
 * save, and inside rg_write. Then it checks:
 *  - the path is absent only while no save has ever completed;
 *  - otherwise rg_load gives RG_OK, every element of every parameter holds one value g
 *    and the metadata says the same g (never two generations mixed);
 *  - g is the last save the child reported or the one after it (a save may complete
 *    before its report), and generations never go back;
 *  - the directory holds nothing but the checkpoint and "<path>.tmp.<pid>.<context>.<call>" files left by
 *    killed savers; those never break a later save or load (checked with a stale temp
 *    file next to the parent's own save, larger than a checkpoint), and are
 *    removed at the end.
 *
 * A killed process loses nothing the kernel already has, so this checks the ordering of
 * write, rename and the temp file's name, not the fsyncs (which matter for power loss).
 *
 * Environment: RG_CRASH_ITERS (default 200), RG_CRASH_SEED (default: time and pid;
 * printed). The loop stops early (still checked, reported) after 25 s so slow machines
 * and sanitizer builds stay within the test's budget. Files go to a fresh directory
 * under $TMPDIR (default /tmp), removed at the end.
 */
#define _POSIX_C_SOURCE 200809L

#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NP 4
static const char *const pname[NP] = {"embed.weight", "blocks.0.attn.w", "blocks.0.ln.b",
                                      "head.weight"};
static const int64_t pdims[NP][2] = {{256, 1024}, {512, 512}, {1, 1000}, {128, 1024}};
static int64_t pnumel[NP];

static char dir[512], path[600];
static uint64_t rng_state;

static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_us(uint64_t us) {
  struct timespec t = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

/* The model: NP parameters in one quiet single-threaded CPU context. */
static rg_ctx *build(rg_tensor *p) {
  rg_ctx *ctx = NULL;
  rg_options o = {.device = RG_DEVICE_CPU, .quiet = 1, .threads = 1};
  if (rg_open(&ctx, &o) != RG_OK) return NULL;
  for (int i = 0; i < NP; i++)
    p[i] = rg_param(ctx, pname[i], RG_F32, 2, pdims[i], (rg_init){0});
  if (rg_error(ctx) != RG_OK) {
    rg_close(ctx);
    return NULL;
  }
  return ctx;
}

/* One report on the pipe: g >= 1 after each completed save, 0 = ready, -1 = failure. */
typedef struct report { int32_t g; uint32_t save_us; } report;

static void put_report(int fd, int32_t g, uint32_t us) {
  report r = {g, us};
  ssize_t w;
  do w = write(fd, &r, sizeof r);
  while (w < 0 && errno == EINTR);
}

/* The saver: never returns. */
static void child(int fd, int32_t start) {
  rg_tensor p[NP];
  rg_ctx *ctx = build(p);
  float *buf = ctx ? malloc(sizeof(float) * (size_t)pnumel[0]) : NULL;
  if (!buf) {
    put_report(fd, -1, 0);
    _exit(3);
  }
  put_report(fd, 0, 0);
  for (int32_t g = start;; g++) {
    char v[32];
    snprintf(v, sizeof v, "%ld", (long)g);
    for (int64_t i = 0; i < pnumel[0]; i++) buf[i] = (float)g;
    for (int i = 0; i < NP; i++)
      if (rg_write(ctx, p[i], buf, sizeof(float) * (size_t)pnumel[i]) != RG_OK) {
        put_report(fd, -1, 0);
        _exit(4);
      }
    if (rg_meta_set(ctx, "gen", v) != RG_OK) {
      put_report(fd, -1, 0);
      _exit(5);
    }
    double t0 = now();
    if (rg_save(ctx, path, NULL) != RG_OK) {
      put_report(fd, -1, 0);
      _exit(6);
    }
    put_report(fd, g, (uint32_t)((now() - t0) * 1e6));
  }
}

/* Reads one report, waiting at most ms milliseconds: 1 read, 0 end of file/timeout. */
static int get_report(int fd, report *r, int ms) {
  struct pollfd pf = {fd, POLLIN, 0};
  int k;
  do k = poll(&pf, 1, ms);
  while (k < 0 && errno == EINTR);
  if (k <= 0) return 0;
  size_t got = 0;
  while (got < sizeof *r) {
    ssize_t n = read(fd, (char *)r + got, sizeof *r - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    got += (size_t)n;
  }
  return 1;
}

/* Loads path into the verifier context and returns the one generation it holds, or -1
   (after a failed check) if it does not load or mixes values. */
static long check_file(rg_ctx *ctx, rg_tensor *p, float *buf, const char *what) {
  rg_clear_error(ctx);
  rg_status st = rg_load(ctx, path, NULL);
  CHECK(st == RG_OK, "%s: rg_load -> %s (%s)", what, rg_status_str(st), rg_errmsg(ctx));
  if (st != RG_OK) return -1;
  float g = -1;
  long bad = 0;
  for (int i = 0; i < NP; i++) {
    st = rg_read(ctx, p[i], buf, sizeof(float) * (size_t)pnumel[i]);
    CHECK(st == RG_OK, "%s: rg_read -> %s", what, rg_status_str(st));
    if (st != RG_OK) return -1;
    if (i == 0) g = buf[0];
    for (int64_t e = 0; e < pnumel[i]; e++)
      if (buf[e] != g && bad++ < 3)
        CHECK(0, "%s: %s[%lld] = %.9g but %s[0] = %.9g: two generations mixed", what,
              pname[i], (long long)e, buf[e], pname[0], g);
  }
  const char *m = rg_meta_get(ctx, "gen");
  char want[32];
  snprintf(want, sizeof want, "%ld", (long)g);
  CHECK(m && !strcmp(m, want), "%s: metadata gen is %s but the weights hold %s", what,
        m ? m : "(none)", want);
  if (bad || !m || strcmp(m, want) || g < 1 || g != (float)(long)g) return -1;
  return (long)g;
}

static int is_tmp_name(const char *name, const char *base) {
  size_t n = strlen(base);
  if (strncmp(name, base, n) || strncmp(name + n, ".tmp.", 5)) return 0;
  const char *d = name + n + 5; /* "<pid>.<context>.<call>": digits, hex and dots */
  if (!*d) return 0;
  for (; *d; d++)
    if (!strchr("0123456789abcdef.", *d)) return 0;
  return 1;
}

/* Is there a temp file "<base>.tmp.<pid>.*" of process pid in dir? */
static int has_tmp_of(const char *base, long pid) {
  char pre[700];
  snprintf(pre, sizeof pre, "%s.tmp.%ld.", base, pid);
  DIR *d = opendir(dir);
  int found = 0;
  for (struct dirent *e; d && (e = readdir(d)) && !found;)
    found = !strncmp(e->d_name, pre, strlen(pre));
  if (d) closedir(d);
  return found;
}

/* Counts the temp files in dir; fails on anything that is neither one nor the checkpoint.
   With remove set, deletes the temp files. */
static int scan_dir(const char *base, int remove) {
  DIR *d = opendir(dir);
  CHECK(d != NULL, "opendir %s: %s", dir, strerror(errno));
  if (!d) return 0;
  int tmps = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, base))
      continue;
    if (is_tmp_name(de->d_name, base)) {
      tmps++;
      if (remove) {
        char f[1200];
        snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
        CHECK(unlink(f) == 0, "unlink %s: %s", f, strerror(errno));
      }
    } else {
      CHECK(0, "unexpected file %s/%s", dir, de->d_name);
    }
  }
  closedir(d);
  return tmps;
}

int main(void) {
  const char *s = getenv("RG_CRASH_ITERS");
  int iters = s && atoi(s) > 0 ? atoi(s) : 200;
  s = getenv("RG_CRASH_SEED");
  uint64_t seed =
      s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
  rng_state = seed;
  int64_t maxn = 0;
  for (int i = 0; i < NP; i++) {
    pnumel[i] = pdims[i][0] * pdims[i][1];
    if (pnumel[i] > maxn) maxn = pnumel[i];
  }
  CHECK(maxn == pnumel[0], "the first parameter is the largest");
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/rg_crash_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "test_crash: mkdtemp %s: %s\n", dir, strerror(errno));
    return 1;
  }
  const char *base = "ckpt.safetensors";
  snprintf(path, sizeof path, "%s/%s", dir, base);

  rg_tensor p[NP];
  rg_ctx *ctx = build(p); /* the verifier: same model, never saves during the loop */
  float *buf = malloc(sizeof(float) * (size_t)maxn);
  CHECK(ctx && buf, "verifier context");
  if (!ctx || !buf) return finish();

  double t_start = now(), save_us = 3000; /* estimate of one save; refined as reports come */
  long prev = 0;      /* generation in the file (0: no file yet) */
  int32_t start = 1;  /* the next child's first generation */
  /* What the kills hit: before the child was ready; before it reported any save; after
     it reported some; with its temp file left (inside a save, between open and rename);
     after a rename it had not reported yet. */
  int done = 0, early = 0, none = 0, some = 0, mid = 0, unreported = 0, absent = 0, saves = 0;
  for (int it = 0; it < iters && !failed(); it++) {
    if (now() - t_start > 25.0) {
      printf("test_crash: stopping after %d of %d iterations (25 s budget)\n", it, iters);
      break;
    }
    int fds[2];
    if (pipe(fds) != 0) {
      CHECK(0, "pipe: %s", strerror(errno));
      break;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      CHECK(0, "fork: %s", strerror(errno));
      break;
    }
    if (pid == 0) {
      close(fds[0]);
      child(fds[1], start);
    }
    close(fds[1]);
    report r;
    int32_t last = 0; /* last completed save the child reported */
    int ready = 0;
    if (it % 10 == 0) { /* kill before (or while) it builds the model */
      sleep_us(rnd() % 500);
      early++;
    } else {
      ready = get_report(fds[0], &r, 30000);
      CHECK(ready && r.g == 0, "iteration %d: the child did not get ready (%d, %ld)", it,
            ready, ready ? (long)r.g : 0L);
      sleep_us(rnd() % (uint64_t)(3 * save_us + 1));
    }
    kill(pid, SIGKILL);
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR) {
    }
    CHECK(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL,
          "iteration %d: the child ended by itself (status 0x%x: it reports its own failures "
          "with exit codes 3-6)", it, wst);
    while (get_report(fds[0], &r, 0)) {
      CHECK(r.g >= 0, "iteration %d: the child's rg_save failed", it);
      if (r.g > 0) {
        CHECK(r.g == (last ? last + 1 : start), "iteration %d: report %ld out of order", it,
              (long)r.g);
        last = r.g;
        saves++;
        save_us = 0.8 * save_us + 0.2 * (double)r.save_us;
      }
    }
    close(fds[0]);
    done++;
    last ? some++ : none++;
    if (has_tmp_of(base, (long)pid)) mid++;

    char what[64];
    snprintf(what, sizeof what, "iteration %d (after %d saves)", it,
             last ? last - start + 1 : 0);
    struct stat sb;
    if (stat(path, &sb) != 0) {
      CHECK(errno == ENOENT, "%s: stat: %s", what, strerror(errno));
      CHECK(prev == 0 && last == 0, "%s: the checkpoint vanished (generation %ld was saved, "
            "the child reported %ld)", what, prev, (long)last);
      absent++;
    } else {
      long g = check_file(ctx, p, buf, what);
      if (g < 0) break;
      if (last) {
        CHECK(g == last || g == (long)last + 1, "%s: the file holds generation %ld but the "
              "child's last completed save was %ld", what, g, (long)last);
      } else {
        CHECK(g == prev || g == start, "%s: the file holds generation %ld; it held %ld and "
              "the child was saving %ld", what, g, prev, (long)start);
      }
      CHECK(g >= prev, "%s: generation went back from %ld to %ld", what, prev, g);
      if (g == (last ? (long)last + 1 : (long)start)) unreported++;
      prev = g;
    }
    start = (int32_t)((prev > last ? prev : last) + 1);
  }

  /* Leftover temp files: only "<path>.tmp.<pid>", and they break nothing. */
  int tmps = scan_dir(base, 0);
  if (!failed()) {
    char own[700];
    snprintf(own, sizeof own, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(own, "wb"); /* a stale temp file larger than a checkpoint */
    CHECK(f != NULL, "cannot create %s", own);
    if (f) {
      for (int64_t i = 0; i < maxn; i++) buf[i] = -1.0f;
      for (int k = 0; k < 4; k++) fwrite(buf, sizeof(float), (size_t)maxn, f);
      fclose(f);
    }
    long g = prev + 1000;
    for (int64_t i = 0; i < maxn; i++) buf[i] = (float)g;
    char v[32];
    snprintf(v, sizeof v, "%ld", g);
    for (int i = 0; i < NP; i++)
      CHECK_ST(ctx, rg_write(ctx, p[i], buf, sizeof(float) * (size_t)pnumel[i]), RG_OK);
    CHECK_ST(ctx, rg_meta_set(ctx, "gen", v), RG_OK);
    CHECK_ST(ctx, rg_save(ctx, path, NULL), RG_OK);
    /* Saves use a fresh name per call (created with O_EXCL), so a stale file is left
       alone and never mixed into a checkpoint. */
    CHECK(access(own, F_OK) == 0, "the stale temp file %s is left alone", own);
    for (int i = 0; i < NP; i++) { /* scribble, so the load below must really restore */
      memset(buf, 0, sizeof(float) * (size_t)pnumel[i]);
      CHECK_ST(ctx, rg_write(ctx, p[i], buf, sizeof(float) * (size_t)pnumel[i]), RG_OK);
    }
    CHECK(check_file(ctx, p, buf, "the parent's save over stale temp files") == g,
          "the parent's save holds generation %ld", g);
  }
  int removed = scan_dir(base, 1);
  CHECK(removed == tmps + !failed(), "temp files: %d seen (+1 stale), %d removed", tmps,
        removed);
  unlink(path);
  CHECK(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));

  free(buf);
  rg_close(ctx);
  printf("test_crash: %d kills (seed 0x%llx, %.1f s): %d before the saver was ready, %d "
         "before its first reported save, %d after 1+ saves; %d inside a save (temp file "
         "left), %d after a rename not yet reported; no checkpoint yet %d times; %d saves "
         "(~%.0f us each)\n", done, (unsigned long long)seed,
         now() - t_start, early, none, some, mid, unreported, absent, saves, save_us);
  int rc = finish();
  printf("test_crash: %s\n", rc ? "FAIL" : "ok");
  return rc;
}
