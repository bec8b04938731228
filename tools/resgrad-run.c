/*
 * resgrad-run.c - starts the ranks of a data-parallel run on this machine.
 *
 *   resgrad-run -n N [--port P] [--timeout S] [--grace S] -- PROGRAM [ARGS...]
 *
 * Forks N copies of PROGRAM, each with RG_RANK (0..N-1), RG_LOCAL_RANK (the same, on one
 * machine), RG_WORLD_SIZE=N and RG_RENDEZVOUS=tcp:127.0.0.1:PORT in its environment (and
 * RG_DIST_TIMEOUT with --timeout), which is what rg_dist_init(ctx, NULL) reads (and a
 * CUDA context, opened with the default device_index, takes GPU RG_LOCAL_RANK). The
 * children's output passes through untouched. It waits for all of them; when one fails
 * (exits non-zero or is killed by a signal) it gives the others --grace seconds to end
 * by themselves (they normally do at once, finding the failed rank gone), then sends
 * them SIGTERM and, a second later, SIGKILL, and exits with the first failure's code
 * after one line naming that rank and how it ended. SIGTERM and SIGHUP sent to
 * resgrad-run are passed on to the ranks as SIGTERM. Ctrl-C reaches the ranks directly
 * (they are in its process group): resgrad-run does not pass SIGINT on, which would
 * make it a second Ctrl-C, and goes on waiting for them.
 *
 * Several machines: start PROGRAM on each with those variables set by hand (RG_RENDEZVOUS
 * naming rank 0's machine); this launcher is for one machine.
 *
 * Exit status: 0 when every rank exited 0; the first failing rank's exit status, or 128 +
 * its signal; 2 for a usage error; 1 when a rank could not be started.
 */
#define _POSIX_C_SOURCE 200809L

#include "free_port.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "resgrad-run"
#define MAX_RANKS 1024

/* Set by SIGTERM or SIGHUP: stop the ranks (read by the wait loop). SIGINT is caught
   and dropped: the ranks got it too. (A handler, not SIG_IGN, which exec would keep.) */
static volatile sig_atomic_t g_signal;

static void on_signal(int sig) {
  if (sig != SIGINT) g_signal = sig;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: " PROG " -n N [--port P] [--timeout S] [--grace S] -- PROGRAM [ARGS...]\n\n"
          "Runs N copies of PROGRAM as the ranks of a data-parallel resgrad run on this\n"
          "machine. Rank r gets RG_RANK=r, RG_LOCAL_RANK=r, RG_WORLD_SIZE=N and\n"
          "RG_RENDEZVOUS=tcp:127.0.0.1:PORT, which rg_dist_init reads; on GPUs rank r\n"
          "uses GPU r. Output passes through unchanged. If a rank fails, the others are\n"
          "stopped and " PROG " exits with that rank's status after one line naming it.\n"
          "\noptions:\n"
          "  -n N          ranks to start (1..%d)\n"
          "  --port P      rank 0 listens on 127.0.0.1:P (default: a free port)\n"
          "  --timeout S   RG_DIST_TIMEOUT for the ranks: seconds any wait for a peer may\n"
          "                last (default: the library's, 60)\n"
          "  --grace S     seconds the other ranks get to end by themselves after one\n"
          "                failed, before SIGTERM (default 3)\n"
          "  --help        print this help and exit\n\n"
          "example:\n"
          "  " PROG " -n 2 -- resgrad-train --distributed --device cpu --batch 16\n"
          "  " PROG " -n 2 -- resgrad-train --distributed --device cuda\n\n"
          "exit status: 0 all ranks succeeded; else the first failed rank's exit status\n"
          "(128 + signal if it was killed); 2 usage error; 1 a rank could not start\n",
          MAX_RANKS);
}

/* A number in [lo, hi] from s, or -1. */
static double number(const char *s, double lo, double hi) {
  char *end = NULL;
  errno = 0;
  double x = s && *s ? strtod(s, &end) : -1;
  return s && *s && !*end && !errno && x >= lo && x <= hi ? x : -1;
}

/* The child: the rank's environment, then PROGRAM. */
static void exec_rank(int rank, int n, int port, const char *timeout, char **argv) {
  char v[64];
  snprintf(v, sizeof v, "%d", rank);
  int bad = setenv("RG_RANK", v, 1) || setenv("RG_LOCAL_RANK", v, 1);
  snprintf(v, sizeof v, "%d", n);
  bad = bad || setenv("RG_WORLD_SIZE", v, 1);
  snprintf(v, sizeof v, "tcp:127.0.0.1:%d", port);
  bad = bad || setenv("RG_RENDEZVOUS", v, 1);
  bad = bad || (timeout && setenv("RG_DIST_TIMEOUT", timeout, 1));
  if (!bad) execvp(argv[0], argv);
  fprintf(stderr, PROG ": rank %d: cannot run '%s': %s\n", rank, argv[0], strerror(errno));
  _exit(127);
}

/* How a rank ended, as words and as an exit code for resgrad-run. */
static int describe(int status, char *out, size_t cap) {
  if (WIFSIGNALED(status)) {
    snprintf(out, cap, "was killed by signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
    return 128 + WTERMSIG(status);
  }
  snprintf(out, cap, "exited with status %d", WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

static void signal_all(const pid_t *pid, int n, int sig) {
  for (int r = 0; r < n; r++)
    if (pid[r] > 0) kill(pid[r], sig);
}

int main(int argc, char **argv) {
  int n = 0, port = 0, i = 1;
  double grace = 3;
  const char *timeout = NULL;
  while (i < argc && strcmp(argv[i], "--")) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "-n") && number(v, 1, MAX_RANKS) >= 1) {
      n = (int)number(v, 1, MAX_RANKS);
    } else if (!strcmp(a, "--port") && number(v, 1, 65535) >= 1) {
      port = (int)number(v, 1, 65535);
    } else if (!strcmp(a, "--timeout") && number(v, 1e-3, 1e6) > 0) {
      timeout = v;
    } else if (!strcmp(a, "--grace") && number(v, 0, 1e6) >= 0) {
      grace = number(v, 0, 1e6);
    } else {
      fprintf(stderr, PROG ": %s '%s'%s%s (see --help)\n",
              v && (!strcmp(a, "-n") || !strcmp(a, "--port") || !strcmp(a, "--timeout") ||
                    !strcmp(a, "--grace")) ? "bad value for" : "unexpected argument", a,
              v ? ": " : "", v ? v : "");
      return 2;
    }
    i += 2; /* the option and its value */
  }
  if (!n || i + 1 >= argc) {
    fprintf(stderr, PROG ": %s (see --help)\n",
            !n ? "-n N is required" : "no program after '--'");
    return 2;
  }
  char **prog = argv + i + 1;
  if (!port && (port = free_port()) < 0) {
    fprintf(stderr, PROG ": cannot find a free port on 127.0.0.1: %s; give --port\n",
            strerror(errno));
    return 1;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  fflush(NULL);

  pid_t pid[MAX_RANKS];
  int alive = 0, code = 0, first = -1;
  char how[96] = "";
  double stop_at = 0, kill_at = 0; /* SIGTERM, then SIGKILL, once a rank failed */
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    if (pid[r] == 0) exec_rank(r, n, port, timeout, prog);
    if (pid[r] < 0) {
      fprintf(stderr, PROG ": cannot start rank %d: %s\n", r, strerror(errno));
      code = 1;
      signal_all(pid, r, SIGKILL);
      n = r;
      break;
    }
    alive++;
  }
  while (alive) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      int r = 0;
      while (r < n && pid[r] != p) r++;
      if (r == n) continue;
      pid[r] = 0;
      alive--;
      if (first < 0 && code == 0 && (!WIFEXITED(status) || WEXITSTATUS(status))) {
        first = r;
        code = describe(status, how, sizeof how);
        stop_at = now_s() + grace;
      }
      continue;
    }
    if (p < 0 && errno != EINTR) break;
    if (g_signal) {
      signal_all(pid, n, SIGTERM);
      g_signal = 0;
    }
    double t = now_s();
    if (stop_at && t >= stop_at) {
      signal_all(pid, n, SIGTERM);
      stop_at = 0;
      kill_at = t + 1;
    } else if (kill_at && t >= kill_at) {
      signal_all(pid, n, SIGKILL);
      kill_at = 0;
    }
    struct timespec tick = {0, 20 * 1000000L};
    nanosleep(&tick, NULL);
  }
  if (first >= 0)
    fprintf(stderr, PROG ": rank %d of %d %s; the run failed\n", first, n, how);
  return code;
}
