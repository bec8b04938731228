/*
 * test_cli.c - resgrad-train's handling of the files and numbers it is given, run as a
 * user runs it (the built binary, through fork and execv) on tiny models.
 *
 * What is checked:
 *  - colliding paths (a table): for each pair of an input and an output, or two outputs
 *    ((--text, --save), (--text, --plot), (--resume, --plot), (--save, --plot)), naming
 *    one file by the same name, "./name", "sub/../name", a symlink or a hard link (either
 *    side), and for two outputs not yet there also a dangling symlink: exit 2, one line on
 *    stderr naming both options, nothing on stdout, every file in the scratch directory
 *    unchanged (a symlink still a symlink) and none added. --resume P --save P continues
 *    in place (a checkpoint that resumes again) and --text P --resume P (two inputs) is
 *    not refused as a collision;
 *  - an unwritable directory (0555 for a user; /proc, where nobody creates files), a
 *    missing one, a directory given as --save, --plot, --resume or --text: exit 2, naming
 *    the option or the reason, nothing written;
 *  - --plot /dev/full: exit 1 naming --plot and "No space left on device", the --save of
 *    the same run complete and every earlier file intact;
 *  - --trace writes a trace that is strict JSON with the run's drains; a missing
 *    directory, a directory, or the path of another output is refused (exit 2);
 *  - a --batch far beyond memory is refused (exit 2, naming the largest that fits), not
 *    killed;
 *  - a checkpoint with a NaN in wte.weight is refused naming the tensor, the file
 *    untouched; --allow-nonfinite loads it;
 *  - kill -9 during --save-every leaves a checkpoint that resumes and at most one
 *    temporary file;
 *  - --text - trains from a pipe;
 *  - --top-k 1 samples what --greedy does, a fixed --seed samples the same twice, and
 *    --greedy --top-k is a usage error;
 *  - numbers out of range or not numbers, and --resume of an addition model with --text;
 *  - --tokens and --val-tokens (llm.c token files written here): a run that trains and
 *    reports the held-out loss, then refusals naming the option and the reason: a
 *    truncated file, a token >= --vocab, no --vocab, --val-tokens alone, and each file
 *    the same as --save or --plot.
 *
 * The program is found next to this test's executable; the test is skipped (77) when it
 * was not built. Everything happens in a fresh directory cli.XXXXXX under ctest's working
 * directory (build/tests/test_cli), removed at the end; the program's stdout and stderr go
 * to out.txt and err.txt beside it.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "json.h"

static char prog[4096];
static const char TINY[] = "<tiny>"; /* in an argument list: the tiny model's options */
static const char *const tiny_args[] = {"--layers", "1", "--width", "16", "--heads", "2",
                                        "--batch", "4", "--steps", "2", "--eval", "8",
                                        "--device", "cpu", NULL};
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static struct { int code, sig; char out[1 << 16], err[1 << 14], cmd[2048]; } R;

/* ---- files -------------------------------------------------------------------------- */

static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  size_t cap = 1 << 16, n = 0, got;
  unsigned char *b = f ? malloc(cap + 1) : NULL;
  while (b && (got = fread(b + n, 1, cap - n, f)) > 0)
    if ((n += got) == cap) {
      unsigned char *nb = realloc(b, (cap *= 2) + 1);
      if (!nb) free(b);
      b = nb;
    }
  if (f) fclose(f);
  if (b) b[n] = 0;
  if (len) *len = n;
  return b;
}

static void put_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(data, 1, n, f) == n;
  if (f && fclose(f)) ok = 0;
  CHECK(ok, "cannot write %s", path);
}

/* ~2000 bytes of words, punctuation and newlines, the same every time. */
static void make_text(const char *path) {
  static const char *w[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy",
                            "dog", "while", "rain", "falls", "on", "7", "quiet", "HILLS",
                            "and", "every", "river", "runs", "(north)", "to", "sea", "42"};
  char buf[2100];
  size_t n = 0;
  for (uint32_t x = 12345; n < 2000;) {
    x = x * 1664525u + 1013904223u;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", w[(x >> 16) % 24],
                          (x >> 8) % 11 == 0 ? ".\n" : (x >> 8) % 7 == 0 ? ", " : " ");
  }
  put_file(path, buf, n);
}

/* Removes path and everything under it (a 0555 directory too). */
static void remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st)) return;
  if (S_ISDIR(st.st_mode)) {
    chmod(path, 0755);
    DIR *d = opendir(path);
    struct dirent *e;
    char sub[4096];
    while (d && (e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        remove_tree(sub);
      }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* ---- snapshots of the scratch directory: every file's kind and bytes (a link's text) -- */

typedef struct entry { char path[512]; char kind; unsigned char *data; size_t len; } entry;
typedef struct snap { entry e[128]; int n; } snap;

static void snap_dir(snap *s, const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    CHECK(s->n < 128, "more than 128 files in the scratch directory");
    if (s->n == 128) break;
    entry *e = &s->e[s->n++];
    struct stat st;
    snprintf(e->path, sizeof e->path, "%s/%s", dir, de->d_name);
    int gone = lstat(e->path, &st) != 0;
    e->kind = gone ? '?' : S_ISLNK(st.st_mode) ? 'l' : S_ISDIR(st.st_mode) ? 'd' : 'f';
    e->data = NULL, e->len = 0;
    if (e->kind == 'l') {
      e->data = calloc(1, 4096);
      ssize_t k = readlink(e->path, (char *)e->data, 4095);
      e->len = k > 0 ? (size_t)k : 0;
    } else if (e->kind == 'f') {
      e->data = slurp(e->path, &e->len);
    } else if (e->kind == 'd') {
      snap_dir(s, e->path);
    }
  }
  if (d) closedir(d);
}
static void snap_take(snap *s) { s->n = 0, snap_dir(s, "."); }
static void snap_free(snap *s) {
  for (int i = 0; i < s->n; i++) free(s->e[i].data);
  s->n = 0;
}
static const entry *snap_find(const snap *s, const char *path) {
  for (int i = 0; i < s->n; i++)
    if (!strcmp(s->e[i].path, path)) return &s->e[i];
  return NULL;
}

/* Every file of before is still there, of the same kind and bytes; new files are listed
   unless allowed (NULL: none may appear). */
static void snap_check(const snap *before, const char *allowed) {
  static snap now;
  snap_take(&now);
  for (int i = 0; i < before->n; i++) {
    const entry *a = &before->e[i], *b = snap_find(&now, a->path);
    int same = b && b->kind == a->kind && b->len == a->len &&
               (!a->len || !memcmp(a->data, b->data, a->len));
    CHECK(same, "%s: %s was %s by the run", R.cmd, a->path, !b ? "removed"
          : b->kind != a->kind ? "replaced by another kind of file" : "changed");
  }
  for (int i = 0; i < now.n; i++)
    CHECK(snap_find(before, now.e[i].path) || (allowed && !strcmp(now.e[i].path, allowed)),
          "%s: wrote a new file %s", R.cmd, now.e[i].path);
  snap_free(&now);
}

/* ---- running the program -------------------------------------------------------------- */

static void add_arg(const char **argv, int *n, const char *a) {
  size_t len = strlen(R.cmd);
  if (*n < 94) argv[(*n)++] = a;
  snprintf(R.cmd + len, sizeof R.cmd - len, "%s%s", len ? " " : "", a);
}

/* Starts the program with args (TINY expands), stdin a pipe fed with the file in (or
   /dev/null), stdout and stderr to ../out.txt and ../err.txt; R.cmd says what ran. */
static pid_t spawn(const char *in, const char *const *args) {
  const char *argv[96];
  int n = 0;
  argv[n++] = prog;
  R.cmd[0] = 0;
  for (int i = 0; args[i]; i++)
    if (args[i] == TINY)
      for (int k = 0; tiny_args[k]; k++) add_arg(argv, &n, tiny_args[k]);
    else
      add_arg(argv, &n, args[i]);
  argv[n] = NULL;
  size_t inlen = 0;
  unsigned char *data = in ? slurp(in, &inlen) : NULL;
  int fd[2] = {-1, -1};
  CHECK(!in || (data && !pipe(fd)), "cannot feed %s through a pipe", in);
  fflush(stdout), fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    int o = open("../out.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open("../err.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int i = in ? fd[0] : open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || i < 0 || dup2(i, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
      _exit(126);
    close(o), close(e), close(i);
    if (in) close(fd[1]);
    execv(prog, (char *const *)argv);
    _exit(127);
  }
  CHECK(pid > 0, "fork: %s", strerror(errno));
  if (in && fd[1] >= 0) {
    close(fd[0]);
    signal(SIGPIPE, SIG_IGN); /* a program that stops reading early fails a check later */
    for (size_t off = 0; pid > 0 && off < inlen;) {
      ssize_t w = write(fd[1], data + off, inlen - off);
      if (w <= 0 && errno != EINTR) break;
      off += w > 0 ? (size_t)w : 0;
    }
    close(fd[1]);
    signal(SIGPIPE, SIG_DFL);
  }
  free(data);
  return pid;
}

/* R gets the exit code (-1 if killed), the signal, stdout and stderr of a run. */
static int status_to_R(int st) {
  R.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  R.sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  unsigned char *o = slurp("../out.txt", NULL), *e = slurp("../err.txt", NULL);
  snprintf(R.out, sizeof R.out, "%s", o ? (char *)o : "");
  snprintf(R.err, sizeof R.err, "%s", e ? (char *)e : "");
  free(o), free(e);
  return R.code;
}

static int collect(pid_t pid) {
  int st = 0;
  while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return status_to_R(pid > 0 ? st : 127 << 8);
}

static int run(const char *in, const char *const *args) { return collect(spawn(in, args)); }

static int lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* A run refused before any work: exit 2, one line on stderr holding need1 and need2
   (either may be NULL), nothing on stdout, no file changed or added. */
static void refused(const char *need1, const char *need2, const char *const *args) {
  static snap before;
  snap_take(&before);
  run(NULL, args);
  CHECK(R.code == 2 && lines(R.err) == 1 && !R.out[0], "'%s' exited %d (signal %d), "
        "%d lines on stderr (want 2 and one line, no stdout): %s%s", R.cmd, R.code, R.sig,
        lines(R.err), R.err, R.out);
  CHECK(!need1 || strstr(R.err, need1), "'%s': stderr lacks \"%s\": %s", R.cmd, need1, R.err);
  CHECK(!need2 || strstr(R.err, need2), "'%s': stderr lacks \"%s\": %s", R.cmd, need2, R.err);
  snap_check(&before, NULL);
  snap_free(&before);
}

/* ---- safetensors ---------------------------------------------------------------------- */

/* The header of checkpoint path (NUL-terminated, malloc'd) and its length, or NULL. */
static char *st_header(const char *path, uint64_t *hlen) {
  size_t n;
  unsigned char *b = slurp(path, &n);
  *hlen = 0;
  for (int i = 0; b && n >= 8 && i < 8; i++) *hlen |= (uint64_t)b[i] << (8 * i);
  char *h = b && n >= 8 && *hlen <= n - 8 ? malloc(*hlen + 1) : NULL;
  if (h) memcpy(h, b + 8, *hlen), h[*hlen] = 0;
  free(b);
  return h;
}

/* The text after "key": (and spaces, and an opening quote) in s, or NULL. */
static const char *json_value(const char *s, const char *key) {
  char k[128];
  snprintf(k, sizeof k, "\"%s\"", key);
  for (const char *p = s; (p = strstr(p, k)); p++) {
    const char *v = p + strlen(k);
    v += strspn(v, " ");
    if (*v++ != ':') continue;
    v += strspn(v, " ");
    return v + (*v == '"');
  }
  return NULL;
}

/* The file offset of F32 tensor name's first element, or -1. */
static long st_offset(const char *path, const char *name) {
  uint64_t hlen;
  char *h = st_header(path, &hlen);
  const char *t = h ? json_value(h, name) : NULL, *end = t ? strchr(t, '}') : NULL;
  const char *dt = end ? json_value(t, "dtype") : NULL;
  const char *off = end ? json_value(t, "data_offsets") : NULL;
  long r = dt && off && dt < end && off < end && !strncmp(dt, "F32", 3) && *off == '['
           ? 8 + (long)hlen + strtol(off + 1, NULL, 10) : -1;
  free(h);
  return r;
}

/* resgrad-train's step metadata of a checkpoint, or -1. */
static long st_step(const char *path) {
  uint64_t hlen;
  char *h = st_header(path, &hlen);
  const char *v = h ? json_value(h, "resgrad-train.step") : NULL;
  long r = v ? strtol(v, NULL, 10) : -1;
  free(h);
  return r;
}

/* ---- the cases ------------------------------------------------------------------------ */

static void copy_file(const char *from, const char *to) {
  size_t n;
  unsigned char *b = slurp(from, &n);
  CHECK(b != NULL, "cannot read %s", from);
  if (b) put_file(to, b, n);
  free(b);
}

/* 1. Two options naming one file in every way; the one allowed overlap and two inputs. */
static void test_collisions(void) {
  static const struct { const char *a, *file, *b; int exists; } pairs[] = {
    {"--text", "data.txt", "--save", 1}, {"--text", "data.txt", "--plot", 1},
    {"--resume", "k.st", "--plot", 1},   {"--save", "old.st", "--plot", 1},
    {"--save", "new.st", "--plot", 0}, /* neither exists yet; sym.new.st dangles */
  };
  static const char *const forms[] = {"%s", "./%s", "sub/../%s", "sym.%s", "hard.%s"};
  char buf[64];
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) { /* data.txt's once */
    snprintf(buf, sizeof buf, "sym.%s", pairs[p].file);
    CHECK(!symlink(pairs[p].file, buf) || errno == EEXIST, "symlink %s: %s", buf,
          strerror(errno));
    snprintf(buf, sizeof buf, "hard.%s", pairs[p].file);
    CHECK(!pairs[p].exists || !link(pairs[p].file, buf) || errno == EEXIST, "link %s: %s",
          buf, strerror(errno));
  }
  for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++)
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++)
      for (int side = 0; side < 2; side++) {
        char alias[64];
        if ((f == 0 && side) || (!pairs[p].exists && f == 4)) continue;
        snprintf(alias, sizeof alias, forms[f], pairs[p].file);
        const char *args[12] = {TINY, pairs[p].a, side ? alias : pairs[p].file, pairs[p].b,
                                side ? pairs[p].file : alias, NULL, NULL, NULL};
        if (!strcmp(pairs[p].a, "--text")) args[5] = "--block", args[6] = "8";
        refused(pairs[p].a, pairs[p].b, args);
      }
  /* --resume P --save P continues in place: the file is replaced by one that resumes */
  size_t n0, n1;
  copy_file("k.st", "k2.st");
  unsigned char *b0 = slurp("k2.st", &n0);
  run(NULL, ARGS(TINY, "--resume", "k2.st", "--save", "./k2.st", "--steps", "4"));
  unsigned char *b1 = slurp("k2.st", &n1);
  CHECK(R.code == 0 && b0 && b1 && (n0 != n1 || memcmp(b0, b1, n0)) && st_step("k2.st") == 4,
        "'%s' exited %d, step metadata %ld (want 0, k2.st replaced at step 4): %s", R.cmd,
        R.code, st_step("k2.st"), R.err);
  free(b0), free(b1);
  run(NULL, ARGS(TINY, "--resume", "k2.st", "--steps", "5"));
  CHECK(R.code == 0 && strstr(R.out, "trained steps 4..5"), "'%s' (the checkpoint saved in "
        "place) exited %d: %s%s", R.cmd, R.code, R.out, R.err);
  /* two inputs may be one file: the checkpoint reader, not the path check, answers */
  run(NULL, ARGS(TINY, "--text", "data.txt", "--resume", "./data.txt"));
  CHECK(R.code == 2 && !strstr(R.err, "same file") && strstr(R.err, "safetensors"),
        "'%s' exited %d, want 2 from reading the checkpoint: %s", R.cmd, R.code, R.err);
}

/* 2. Directories that cannot take the file, do not exist, or are given as files. */
static void test_directories(void) {
  CHECK(!mkdir("adir", 0755), "mkdir adir: %s", strerror(errno));
  if (geteuid() != 0) { /* permissions do not stop root */
    CHECK(!mkdir("ro", 0755) && !chmod("ro", 0555), "mkdir ro: %s", strerror(errno));
    refused("--plot", "cannot create", ARGS(TINY, "--plot", "ro/x.svg"));
    refused("--save", "cannot create", ARGS(TINY, "--save", "ro/x.st"));
  }
  if (!access("/proc/self", F_OK)) {
    refused("--plot", "cannot create", ARGS(TINY, "--plot", "/proc/rg-cli-test.svg"));
    refused("--save", "cannot create", ARGS(TINY, "--save", "/proc/rg-cli-test.st"));
  }
  refused("--plot", "does not exist", ARGS(TINY, "--plot", "nodir/x.svg"));
  refused("--save", "does not exist", ARGS(TINY, "--save", "nodir/x.st"));
  refused("--save", "directory", ARGS(TINY, "--save", "adir"));
  refused("--plot", "directory", ARGS(TINY, "--plot", "adir"));
  refused("--resume", "directory", ARGS(TINY, "--resume", "adir"));
  refused("--text", "directory", ARGS(TINY, "--text", "adir", "--block", "8"));
}

/* 3. A plot that cannot be written: the run fails, the checkpoint before it loads. */
static void test_dev_full(void) {
  if (access("/dev/full", W_OK)) {
    printf("note: no writable /dev/full: --plot /dev/full not checked\n");
    return;
  }
  static snap before;
  snap_take(&before);
  run(NULL, ARGS(TINY, "--plot", "/dev/full", "--save", "full.st"));
  CHECK(R.code == 1 && strstr(R.err, "--plot") && strstr(R.err, "No space left on device"),
        "'%s' exited %d (want 1, naming --plot and ENOSPC): %s", R.cmd, R.code, R.err);
  snap_check(&before, "./full.st");
  snap_free(&before);
  run(NULL, ARGS(TINY, "--resume", "full.st"));
  CHECK(R.code == 0 && strstr(R.out, "no training steps ran"), "'%s' (the checkpoint of the "
        "run whose plot failed) exited %d: %s", R.cmd, R.code, R.err);
}

/* --trace: the run's trace parses and holds its drains; its path is checked as --plot's. */
static void test_trace(void) {
  run(NULL, ARGS(TINY, "--trace", "run.json"));
  CHECK(R.code == 0, "'%s' exited %d: %s", R.cmd, R.code, R.err);
  char *text = (char *)slurp("run.json", NULL), err[200] = "no file";
  jv *root = text ? json_parse(text, err, sizeof err) : NULL;
  const jv *ev = json_get(root, "traceEvents");
  int drains = 0;
  for (int i = 0; ev && ev->type == J_ARR && i < ev->n; i++)
    drains += !strcmp(json_sget(&ev->items[i], "name"), "drain");
  CHECK(root && drains >= 2, "--trace run.json: %s, %d drain spans", root ? "parsed" : err,
        drains);
  json_free(root);
  free(text);
  remove("run.json");
  refused("--trace", "does not exist", ARGS(TINY, "--trace", "nodir/x.json"));
  refused("--trace", "directory", ARGS(TINY, "--trace", "adir"));
  refused("same file", "--trace", ARGS(TINY, "--plot", "p.svg", "--trace", "./p.svg"));
}

/* 4. A batch far beyond memory is refused before anything is allocated, not killed.
   --batch 1000000 of this model needs about 20 GiB: a machine with more may run it, so
   that run trains no steps (--steps 0; the memory plan still sizes training steps). */
static void test_huge_batch(void) {
  const char *const batches[] = {"1073741824", "1000000"};
  for (int i = 0; i < 2; i++) {
    static snap before;
    snap_take(&before);
    run(NULL, ARGS(TINY, "--batch", batches[i], "--steps", i ? "0" : "2"));
    int fit = i && R.code == 0 && strstr(R.out, "no training steps ran");
    CHECK(fit || (R.code == 2 && lines(R.err) == 1 && (strstr(R.err, "largest --batch") ||
          strstr(R.err, "not even --batch 1 fits"))), "'%s' exited %d (signal %d), want 2 "
          "naming the largest --batch that fits: %s", R.cmd, R.code, R.sig, R.err);
    if (fit) printf("note: '%s' fits in this machine's memory\n", R.cmd);
    snap_check(&before, NULL);
    snap_free(&before);
  }
}

/* 5. A NaN in a checkpoint is refused (naming the tensor) unless --allow-nonfinite. */
static void test_nan_checkpoint(void) {
  copy_file("k.st", "nan.st");
  long off = st_offset("nan.st", "wte.weight");
  CHECK(off > 0, "no F32 wte.weight in the checkpoint's header");
  int fd = open("nan.st", O_WRONLY);
  const unsigned char nan[4] = {0x00, 0x00, 0xc0, 0x7f}; /* 0x7fc00000, little-endian */
  CHECK(off > 0 && fd >= 0 && pwrite(fd, nan, 4, off) == 4, "cannot patch nan.st");
  if (fd >= 0) close(fd);
  refused("wte.weight", "nan.st", ARGS(TINY, "--resume", "nan.st", "--steps", "3"));
  run(NULL, ARGS(TINY, "--resume", "nan.st", "--steps", "3", "--allow-nonfinite"));
  CHECK((R.code == 0 || R.code == 1) && !strstr(R.err, "--resume 'nan.st'"), "'%s' exited "
        "%d (want 0, or 1 from training, not the load refusal): %s", R.cmd, R.code, R.err);
}

/* 6. kill -9 while --save-every writes: the checkpoint on disk resumes. */
static void test_kill9(void) {
  pid_t pid = spawn(NULL, ARGS(TINY, "--steps", "100000", "--save-every", "1", "--save",
                               "ck.st", "--log-every", "1000000"));
  int st = 0;
  pid_t w = 0;
  struct timespec tick = {0, 50 * 1000 * 1000}, more = {0, 300 * 1000 * 1000};
  for (int i = 0; pid > 0 && !w && access("ck.st", F_OK) && i < 20 * 120; i++)
    if (!(w = waitpid(pid, &st, WNOHANG))) nanosleep(&tick, NULL); /* up to 120 s */
  if (pid > 0 && !w) {
    nanosleep(&more, NULL); /* a few more checkpoints, one maybe in flight */
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  }
  status_to_R(pid > 0 ? st : 127 << 8);
  CHECK(R.sig == SIGKILL && !access("ck.st", F_OK), "'%s' was not killed by SIGKILL after "
        "writing ck.st (ck.st %s, exit %d, signal %d): %s", R.cmd,
        access("ck.st", F_OK) ? "missing" : "there", R.code, R.sig, R.err);
  if (access("ck.st", F_OK)) return;
  int tmp = 0;
  DIR *d = opendir(".");
  for (struct dirent *e; d && (e = readdir(d));)
    if (strstr(e->d_name, ".tmp")) tmp++;
  if (d) closedir(d);
  CHECK(tmp <= 1, "%d temporary files are left after kill -9 (at most the one in flight)", tmp);
  long k = st_step("ck.st");
  char stop[32], want[64];
  snprintf(stop, sizeof stop, "%ld", k + 1);
  snprintf(want, sizeof want, "trained steps %ld..%ld", k, k + 1);
  run(NULL, ARGS(TINY, "--steps", "100000", "--resume", "ck.st", "--stop-at", stop));
  CHECK(k >= 1 && R.code == 0 && strstr(R.out, want), "'%s' (ck.st at step %ld after kill "
        "-9) exited %d: %s%s", R.cmd, k, R.code, R.out, R.err);
}

/* What the last run printed after its "--- sample" line, into buf ("" if nothing). */
static void sample_of(char *buf, size_t cap) {
  const char *s = strstr(R.out, "--- sample");
  s = s ? strchr(s, '\n') : NULL;
  snprintf(buf, cap, "%s", s ? s + 1 : "");
}

/* 7-10. Text from a pipe, sampling, numbers, an addition model given --text. */
static void test_text_and_numbers(void) {
  run("data.txt", ARGS(TINY, "--text", "-", "--block", "8"));
  CHECK(R.code == 0 && strstr(R.out, ": text, GPT"), "'%s' < data.txt exited %d: %s%s",
        R.cmd, R.code, R.out, R.err);

  char a[4096], b[4096];
  run(NULL, ARGS(TINY, "--resume", "t.st", "--sample", "40", "--top-k", "1"));
  sample_of(a, sizeof a);
  CHECK(R.code == 0 && strlen(a) > 40, "'%s' exited %d: %s%s", R.cmd, R.code, R.out, R.err);
  run(NULL, ARGS(TINY, "--resume", "t.st", "--sample", "40", "--greedy"));
  sample_of(b, sizeof b);
  CHECK(R.code == 0 && !strcmp(a, b), "--top-k 1 sampled '%s', --greedy '%s' (exit %d: %s)",
        a, b, R.code, R.err);
  run(NULL, ARGS(TINY, "--resume", "t.st", "--sample", "40", "--seed", "7"));
  sample_of(a, sizeof a);
  run(NULL, ARGS(TINY, "--resume", "t.st", "--sample", "40", "--seed", "7"));
  sample_of(b, sizeof b);
  CHECK(R.code == 0 && strlen(a) > 40 && !strcmp(a, b), "--seed 7 sampled '%s', then '%s' "
        "(exit %d: %s)", a, b, R.code, R.err);
  refused("--greedy", "--top-k", ARGS(TINY, "--resume", "t.st", "--sample", "40", "--greedy",
                                      "--top-k", "3"));

  refused("--steps", "out of range [0, 1000000000]",
          ARGS(TINY, "--steps", "99999999999999999999"));
  refused("--lr", "out of range", ARGS(TINY, "--lr", "1e9"));
  refused("--steps", "not an integer", ARGS(TINY, "--steps", "abc"));
  refused("--seed", NULL, ARGS(TINY, "--seed", "-1"));
  refused("addition model", "leave out", ARGS(TINY, "--resume", "k.st", "--text", "data.txt"));
}

/* An llm.c token file of n tokens (i * 7 mod 300), its header claiming claim tokens. */
static void make_tokens(const char *path, int32_t claim, int n, int bump) {
  unsigned char *b = calloc(1024 + 2 * (size_t)n, 1);
  if (!b) return;
  int32_t h[3] = {20240520, 1, claim};
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < 4; i++) b[4 * k + i] = (unsigned char)((uint32_t)h[k] >> (8 * i));
  for (int i = 0; i < n; i++) {
    int v = i * 7 % 300 + (i == n / 2 ? bump : 0);
    b[1024 + 2 * i] = (unsigned char)(v & 255), b[1024 + 2 * i + 1] = (unsigned char)(v >> 8);
  }
  put_file(path, b, 1024 + 2 * (size_t)n);
  free(b);
}

/* 11. Token files: a run, then files and options refused. */
static void test_tokens(void) {
  make_tokens("tr.bin", 3000, 3000, 0);
  make_tokens("va.bin", 500, 500, 0);
  make_tokens("cut.bin", 3000, 2999, 0);
  make_tokens("big.bin", 500, 500, 300); /* token 250 is 250 * 7 % 300 + 300 = 550 */
  run(NULL, ARGS(TINY, "--tokens", "tr.bin", "--val-tokens", "va.bin", "--vocab", "300",
                 "--block", "8", "--save", "tok.st"));
  CHECK(R.code == 0 && strstr(R.out, ": tokens, GPT") && strstr(R.out, "held-out loss") &&
            strstr(R.out, "vocab=300 block=8"),
        "'%s' exited %d: %s%s", R.cmd, R.code, R.out, R.err);
  refused("--tokens 'cut.bin'", "truncated",
          ARGS(TINY, "--tokens", "cut.bin", "--vocab", "300", "--block", "8"));
  refused("--val-tokens 'big.bin'", "token 250 (counting from 0) is 550",
          ARGS(TINY, "--tokens", "tr.bin", "--val-tokens", "big.bin", "--vocab", "300",
               "--block", "8"));
  refused("--tokens needs --vocab", NULL, ARGS(TINY, "--tokens", "tr.bin"));
  refused("--val-tokens", "add --tokens", ARGS(TINY, "--val-tokens", "va.bin"));
  refused("--tokens 'tr.bin'", "--save 'tr.bin'",
          ARGS(TINY, "--tokens", "tr.bin", "--vocab", "300", "--save", "tr.bin"));
  refused("--val-tokens 'va.bin'", "--plot './va.bin'",
          ARGS(TINY, "--tokens", "tr.bin", "--val-tokens", "va.bin", "--vocab", "300",
               "--plot", "./va.bin"));
  refused("token model", "--text", ARGS(TINY, "--resume", "tok.st", "--text", "data.txt"));
}

int main(void) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(prog, sizeof prog, "%s/resgrad-train", n > 0 && slash ? self : ".");
  if (access(prog, X_OK)) {
    printf("SKIP: %s was not built (RG_BUILD_TOOLS=OFF?)\n", prog);
    return SKIP_EXIT;
  }
  char dir[] = "cli.XXXXXX";
  if (!mkdtemp(dir) || chdir(dir)) {
    fprintf(stderr, "cannot make and enter a scratch directory: %s\n", strerror(errno));
    return 1;
  }
  make_text("data.txt");
  put_file("old.st", "an old file\n", 12);
  CHECK(!mkdir("sub", 0755), "mkdir sub: %s", strerror(errno));
  run(NULL, ARGS(TINY, "--save", "k.st"));
  CHECK(R.code == 0, "'%s' exited %d: %s", R.cmd, R.code, R.err);
  run(NULL, ARGS(TINY, "--text", "data.txt", "--block", "8", "--save", "t.st"));
  CHECK(R.code == 0, "'%s' exited %d: %s", R.cmd, R.code, R.err);
  if (!failed()) {
    test_collisions();
    test_directories();
    test_dev_full();
    test_trace();
    test_huge_batch();
    test_nan_checkpoint();
    test_kill9();
    test_text_and_numbers();
    test_tokens();
  }
  if (chdir("..")) return 1;
  remove_tree(dir);
  if (!failed()) printf("test_cli: all checks passed\n");
  return finish();
}
