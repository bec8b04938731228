/*
 * paths.c - every file resgrad-train reads or writes, checked before any work, and the
 * atomic write of the files it makes.
 *
 * A path is reduced to what it names: its canonical path (symlinks, "." and ".." resolved;
 * for a file that does not exist yet, its directory's canonical path and its name) and,
 * when it exists, its device and inode, which also catch hard links. Two paths are the
 * same file when either agrees. An output must differ from every input and every other
 * output; the one overlap allowed is --resume P --save P (continuing in place: rg_save
 * writes atomically, after rg_load has read the whole file).
 */
#define _XOPEN_SOURCE 700 /* realpath, mkstemp, fchmod */
#include "train.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

typedef struct file_id {
  const char *opt, *arg; /* "--save", the path as given */
  int output;
  int exists;            /* the canonical path names something now */
  dev_t dev;
  ino_t ino;
  mode_t mode;
  char canon[PATH_MAX];
} file_id;

/* The directory part of p ("." when there is none) into dir and its last part into base. */
static void split(const char *p, char *dir, char *base) {
  const char *slash = strrchr(p, '/');
  if (!slash) {
    strcpy(dir, ".");
    strcpy(base, p);
  } else {
    size_t n = slash == p ? 1 : (size_t)(slash - p);
    memcpy(dir, p, n);
    dir[n] = 0;
    strcpy(base, slash + 1);
  }
}

/* What path names, following symlinks (also dangling ones, whose target a write would
   create). Returns "" or why it cannot be resolved. */
static const char *resolve(const char *path, file_id *f, char *why, size_t cap) {
  char cur[PATH_MAX], dir[PATH_MAX], base[PATH_MAX], rdir[PATH_MAX];
  if (strlen(path) >= sizeof cur) return "the path is too long";
  strcpy(cur, path);
  for (int hops = 0;; hops++) {
    struct stat st;
    if (realpath(cur, f->canon)) { /* it exists: the canonical path says it all */
      if (stat(f->canon, &st)) break;
      f->exists = 1, f->dev = st.st_dev, f->ino = st.st_ino, f->mode = st.st_mode;
      return "";
    }
    if (errno != ENOENT) break;
    if (lstat(cur, &st) == 0 && S_ISLNK(st.st_mode) && hops < 40) { /* dangling link */
      char target[PATH_MAX];
      ssize_t n = readlink(cur, target, sizeof target - 1);
      if (n < 0) break;
      target[n] = 0;
      split(cur, dir, base);
      if (target[0] == '/' || !strcmp(dir, ".")) snprintf(cur, sizeof cur, "%s", target);
      else if ((size_t)snprintf(cur, sizeof cur, "%s/%s", dir, target) >= sizeof cur)
        return "the path is too long";
      continue;
    }
    /* Nothing there: the canonical directory and the name. */
    split(cur, dir, base);
    if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) return "it names a directory";
    if (!realpath(dir, rdir)) {
      snprintf(why, cap, "its directory '%s' %s", dir,
               errno == ENOENT ? "does not exist" : strerror(errno));
      return why;
    }
    if ((size_t)snprintf(f->canon, sizeof f->canon, "%s/%s", strcmp(rdir, "/") ? rdir : "",
                         base) >= sizeof f->canon)
      return "the path is too long";
    return "";
  }
  snprintf(why, cap, "%s", strerror(errno));
  return why;
}

/* An output's directory accepts a new file: made and removed again, which is the only
   test that holds for every user (root too) and every file system. */
static const char *dir_writable(const char *canon, char *why, size_t cap) {
  char dir[PATH_MAX], base[PATH_MAX], probe[PATH_MAX + 32];
  split(canon, dir, base);
  snprintf(probe, sizeof probe, "%s/.%s.XXXXXX", dir, PROG);
  int fd = mkstemp(probe);
  if (fd < 0) {
    snprintf(why, cap, "cannot create files in its directory '%s': %s", dir, strerror(errno));
    return why;
  }
  close(fd);
  unlink(probe);
  return "";
}

static int check_one(file_id *f) {
  char why[PATH_MAX + 160];
  const char *bad = resolve(f->arg, f, why, sizeof why);
  if (!*bad && !f->output && !f->exists) bad = strerror(ENOENT);
  if (!*bad && f->exists && S_ISDIR(f->mode))
    bad = f->output ? "it is a directory; give a file path"
                    : !strcmp(f->opt, "--resume") ? "it is a directory, not a checkpoint file"
                                                  : "it is a directory, not a file";
  if (!*bad && !f->output && access(f->canon, R_OK)) bad = strerror(errno);
  if (!*bad && f->output && f->exists && S_ISREG(f->mode) && access(f->canon, W_OK))
    bad = "it is not writable (it would be replaced)";
  if (!*bad && f->output && f->exists && !S_ISREG(f->mode) && !strcmp(f->opt, "--save"))
    bad = "it is not a regular file; a checkpoint needs one";
  if (!*bad && f->output && (!f->exists || S_ISREG(f->mode)))
    bad = dir_writable(f->canon, why, sizeof why);
  if (!*bad) return 0;
  errorf("%s '%s': %s", f->opt, f->arg, bad);
  return 1;
}

static int same_file(const file_id *a, const file_id *b) {
  if (!strcmp(a->canon, b->canon)) return 1;
  return a->exists && b->exists && a->dev == b->dev && a->ino == b->ino;
}

int check_paths(const opts *o, paths *out) {
  const struct { const char *opt, *arg; int output; } want[] = {
    {"--text", o->text && strcmp(o->text, "-") ? o->text : NULL, 0},
    {"--tokens", o->tokens, 0},
    {"--val-tokens", o->val_tokens, 0},
    {"--resume", o->resume, 0},
    {"--init-hf", o->init_hf ? init_hf_file(o->init_hf) : NULL, 0},
    {"--save", o->save, 1},
    {"--plot", o->plot, 1},
    {"--trace", o->trace, 1},
  };
  file_id f[sizeof want / sizeof *want];
  int n = 0;
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    if (!want[i].arg) continue;
    memset(&f[n], 0, sizeof f[n]);
    f[n].opt = want[i].opt, f[n].arg = want[i].arg, f[n].output = want[i].output;
    if (check_one(&f[n])) return EXIT_USAGE;
    n++;
  }
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++) {
      const file_id *a = &f[i], *b = &f[j];
      if (!(a->output || b->output) || !same_file(a, b)) continue;
      if (!strcmp(a->opt, "--resume") && !strcmp(b->opt, "--save")) continue;
      errorf("%s '%s' and %s '%s' are the same file (%s); give %s another path", a->opt,
             a->arg, b->opt, b->arg, a->canon, b->output ? b->opt : a->opt);
      return EXIT_USAGE;
    }
  out->save[0] = out->plot[0] = 0;
  for (int i = 0; i < n; i++) {
    if (!strcmp(f[i].opt, "--save")) snprintf(out->save, sizeof out->save, "%s", f[i].canon);
    if (!strcmp(f[i].opt, "--plot")) snprintf(out->plot, sizeof out->plot, "%s", f[i].canon);
  }
  return -1;
}

/* fsync of the directory holding path, so a rename into it survives a crash. */
static void sync_dir(const char *path) {
  char dir[PATH_MAX], base[PATH_MAX];
  split(path, dir, base);
  int fd = open(dir, O_RDONLY);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

int write_atomic(const char *path, const char *opt, void (*write)(FILE *f, const void *user),
                 const void *user) {
  struct stat st;
  int exists = stat(path, &st) == 0;
  int direct = exists && !S_ISREG(st.st_mode); /* /dev/stdout, a FIFO, /dev/full */
  char tmp[PATH_MAX + 32];
  FILE *f = NULL;
  if (direct) {
    f = fopen(path, "w");
  } else {
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
    mode_t mask = umask(0);
    umask(mask);
    int fd = mkstemp(tmp);
    /* mkstemp makes the file 0600: it gets the old file's mode, or a new file's (0666
       less the umask). */
    if (fd >= 0 && (fchmod(fd, exists ? st.st_mode & 07777 : 0666 & ~mask) ||
                    !(f = fdopen(fd, "w")))) {
      int e = errno;
      close(fd);
      unlink(tmp);
      errno = e;
    }
  }
  if (!f) {
    errorf("%s: cannot write '%s': %s", opt, path, strerror(errno));
    return EXIT_RUNTIME;
  }
  write(f, user);
  int err = fflush(f) ? errno : ferror(f) ? EIO : 0;
  if (!err && !direct && fsync(fileno(f))) err = errno;
  if (fclose(f) && !err) err = errno;
  if (!err && !direct) {
    if (rename(tmp, path)) err = errno;
    else sync_dir(path);
  }
  if (err && !direct) unlink(tmp);
  if (err) {
    errorf("%s: cannot write '%s': %s%s", opt, path, strerror(err),
           direct ? "" : exists ? " (the old file is as it was)" : " (nothing was written)");
    return EXIT_RUNTIME;
  }
  return 0;
}
