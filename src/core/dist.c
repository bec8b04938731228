/*
 * dist.c - data-parallel training across processes (resgrad.h, "distributed"):
 * rg_dist_init / rg_dist_close, the TCP transport, the gradient buckets rg_backward
 * records, and the all-reduce the CPU backend runs for them.
 *
 * The ranks form a star: rank 0 holds a connection to every other rank, every other rank
 * one to rank 0. Each exchange is rank 0 serving the ranks in rank order, so the bytes a
 * rank ends with depend on the inputs alone, never on timing: the all-reduce adds the
 * gradients in rank order into rank 0's, divides by the world size and sends rank 0's
 * bytes to everyone.
 *
 * A backend that moves the gradients itself (CUDA: NCCL, rg_backend.dist_open) uses the
 * same rendezvous: rank 0 makes the group's name (NCCL's unique id) and sends it to the
 * others, every rank joins the group, and the ALLREDUCE nodes are the backend's. The
 * connections then carry nothing more but stay open: while the backend waits for a step
 * it asks rg__dist_lost whether a peer's connection closed, which is how a rank that
 * died is seen (and named) without waiting for the whole timeout.
 *
 * Invariants:
 *  - Sockets are non-blocking and every wait is a poll() bounded by the timeout; a closed
 *    or reset connection is an error at once; sends never raise SIGPIPE.
 *  - The first transport failure closes every connection of this rank (its peers then
 *    fail at once rather than at their timeout) and is kept: every later collective
 *    fails with its message.
 *  - Each collective starts with a header (kind, sequence number, bytes) that the
 *    receiver checks, so ranks that recorded different work fail instead of mixing
 *    bytes up.
 *  - No global state: everything lives in ctx->dist.
 */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* where it is missing (macOS) setup() sets SO_NOSIGPIPE instead */
#endif

#define CALL "rg_dist_init"
#define DEFAULT_TIMEOUT 60.0
#define DEFAULT_BUCKET ((size_t)25 << 20)
#define MAX_WORLD 65536
#define MAGIC 0x3164677273657200ull /* "\0resgd1" */
#define CHUNK 16384                 /* floats rank 0 receives and adds at a time */

enum { M_HELLO = 1, M_ACK, M_REDUCE, M_RESULT, M_GROUP };
#define DEV_AVG (1ull << 62)
/* Every message starts with one (the ranks run one build on one architecture).
   HELLO: a rank, b world, c parameters (| DEV_AVG when the backend averages, so ranks
   on different kinds of device are told apart), d fingerprint of their names, dtypes,
   shapes.
   ACK: a world. REDUCE (to rank 0) and RESULT (from it): a sequence number, b bytes.
   GROUP (from rank 0, then RG_DIST_ID bytes): b = RG_DIST_ID. */
typedef struct hdr { uint64_t magic, kind, a, b, c, d; } hdr;

typedef struct rg_dist {
  int rank, world;
  double timeout;       /* seconds */
  int ms;               /* the same, for poll() */
  size_t bucket_bytes;
  int *fd;              /* [world]: the connection to rank r, -1 if none */
  uint64_t seq;         /* all-reduces run so far */
  bool dev;             /* the backend averages the gradients (rg_backend.dist_open) */
  rg_status broken;     /* the first transport failure; RG_OK while none */
  char why[768];        /* its message */
  /* rg_backward's buckets: see rg__dist_plan */
  int64_t *first;       /* [nparams]: index of the first tape node using parameter p, or -1 */
  int *order;           /* parameters by first use, latest first */
  uint32_t *cur;        /* gradients of the bucket being filled */
  int np, cap, pos, ncur;
  size_t cur_bytes;
  int64_t nbucket;      /* buckets recorded by this backward */
  float buf[CHUNK];
} rg_dist;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ms_left(double deadline) {
  double s = deadline - now();
  return s <= 0 ? 0 : s > 1e6 ? 1000000000 : (int)(s * 1000) + 1;
}

/* ---- connections -------------------------------------------------------------------- */

static void hang_up(rg_dist *d) {
  for (int r = 0; r < d->world; r++)
    if (d->fd[r] >= 0) close(d->fd[r]), d->fd[r] = -1;
}

/* Leaves the backend's group (if it joined one; at once with abort or after a failure,
   else with the peers) and closes the connections. */
static rg_status free_dist(rg_ctx *ctx, rg_dist *d, bool abort) {
  rg_status st = RG_OK;
  if (!d) return st;
  if (d->dev) {
    char msg[512] = "";
    st = ctx->be->dist_close(ctx, abort || d->broken != RG_OK, msg, sizeof msg);
    if (st != RG_OK) rg__fail(ctx, st, "rg_dist_close", "%s", msg);
  }
  if (d->fd) hang_up(d);
  rg__free(ctx, d->fd);
  rg__free(ctx, d->first);
  rg__free(ctx, d->order);
  rg__free(ctx, d->cur);
  rg__free(ctx, d);
  return st;
}

/* Writes "rank R of W: <fmt>" to msg, keeps it as the failure every later collective
   reports (the first one only) and closes every connection. Returns st. */
static rg_status vbroke(rg_dist *d, rg_status st, char *msg, size_t cap, const char *fmt,
                        va_list ap) {
  int n = snprintf(msg, cap, "rank %d of %d: ", d->rank, d->world);
  if (n >= 0 && (size_t)n < cap) vsnprintf(msg + n, cap - (size_t)n, fmt, ap);
  if (d->broken == RG_OK) {
    d->broken = st;
    snprintf(d->why, sizeof d->why, "%s", msg);
  }
  hang_up(d);
  return st;
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static rg_status broke(rg_dist *d, rg_status st, char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st = vbroke(d, st, msg, cap, fmt, ap);
  va_end(ap);
  return st;
}

rg_status rg__dist_fail(rg_ctx *ctx, rg_status st, char *msg, size_t cap, const char *fmt,
                        ...) {
  va_list ap;
  va_start(ap, fmt);
  if (ctx->dist) {
    st = vbroke(ctx->dist, st, msg, cap, fmt, ap);
  } else {
    vsnprintf(msg, cap, fmt, ap);
  }
  va_end(ap);
  return st;
}

int rg__dist_lost(rg_ctx *ctx) {
  rg_dist *d = ctx->dist;
  for (int r = 0; d && r < d->world; r++) {
    struct pollfd pf = {d->fd[r], POLLIN, 0};
    char c;
    if (pf.fd < 0 || poll(&pf, 1, 0) <= 0) continue;
    ssize_t k = recv(pf.fd, &c, 1, MSG_PEEK);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
      return r; /* end of file or reset; nothing else is ever sent once the group exists */
  }
  return -1;
}

/* Non-blocking, closed on exec, no Nagle delay (a header is sent before its data). */
static void setup(int fd) {
  int one = 1;
  (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
#ifdef SO_NOSIGPIPE
  (void)setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
}

/* Moves exactly n bytes to (out) or from fd, each wait at most ms. Returns 0, or why
   not: ETIMEDOUT, EPIPE for a connection the peer closed (end of file or reset), or
   another errno. */
static int io(int fd, void *p, size_t n, bool out, int ms) {
  char *c = p;
  while (n) {
    struct pollfd pf = {fd, (short)(out ? POLLOUT : POLLIN), 0};
    int r = poll(&pf, 1, ms);
    if (r == 0) return ETIMEDOUT;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    ssize_t k = out ? send(fd, c, n, MSG_NOSIGNAL) : recv(fd, c, n, 0);
    if (k > 0) {
      c += k;
      n -= (size_t)k;
    } else if (k == 0) {
      return EPIPE;
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return errno == ECONNRESET ? EPIPE : errno;
    }
  }
  return 0;
}

/* io() with peer's connection; a failure breaks the transport with a message saying
   what this rank was doing (what) and what to do. */
static rg_status xfer(rg_dist *d, int peer, void *p, size_t n, bool out, const char *what,
                      char *msg, size_t cap) {
  int e = d->fd[peer] < 0 ? EPIPE : io(d->fd[peer], p, n, out, d->ms);
  if (e == ETIMEDOUT)
    return broke(d, RG_ERR_IO, msg, cap, "rank %d %s for %g s while this rank was %s: it "
                 "is stuck, stopped or far slower than this rank; look at that process, "
                 "or raise RG_DIST_TIMEOUT (rg_dist_options.timeout) if it is only slow",
                 peer, out ? "took no data" : "sent nothing", d->timeout, what);
  if (e == EPIPE)
    return broke(d, RG_ERR_IO, msg, cap, "rank %d closed its connection while this rank "
                 "was %s: that process exited or failed (its own output says why); stop "
                 "every rank and start the run again (from its last checkpoint)", peer, what);
  if (e)
    return broke(d, RG_ERR_IO, msg, cap, "%s on the connection to rank %d while this rank "
                 "was %s", strerror(e), peer, what);
  return RG_OK;
}

static rg_status check_hdr(rg_dist *d, int peer, const hdr *got, const hdr *want,
                           const char *what, char *msg, size_t cap) {
  if (got->magic == MAGIC && got->kind == want->kind && got->a == want->a &&
      got->b == want->b)
    return RG_OK;
  return broke(d, RG_ERR_MISUSE, msg, cap, "rank %d sent message %llu/%llu/%llu where "
               "this rank, %s, expected %llu/%llu/%llu (kind/sequence/bytes): the ranks "
               "recorded different work (another model, batch shape or number of "
               "rg_backward calls); every rank must record the same backward passes",
               peer, (unsigned long long)got->kind, (unsigned long long)got->a,
               (unsigned long long)got->b, what, (unsigned long long)want->kind,
               (unsigned long long)want->a, (unsigned long long)want->b);
}

/* ---- rendezvous ----------------------------------------------------------------------- */

/* Rank 0: a non-blocking socket listening on host:port, or -1 (transport broken). */
static int listen_on(rg_dist *d, const char *host, const char *port, char *msg, size_t cap) {
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int e = getaddrinfo(host, port, &hints, &ai), fd = -1, err = 0, one = 1;
  if (e) {
    broke(d, RG_ERR_IO, msg, cap, "cannot resolve the rendezvous host '%s': %s", host,
          gai_strerror(e));
    return -1;
  }
  for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, d->world)) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) {
    broke(d, RG_ERR_IO, msg, cap, "cannot listen on %s:%s (%s): %s", host, port,
          strerror(err), err == EADDRINUSE ? "another program or an earlier run holds the "
          "port; give RG_RENDEZVOUS another one (resgrad-run picks a free one)"
          : "HOST must be an address of rank 0's machine; check RG_RENDEZVOUS");
    return -1;
  }
  setup(fd);
  return fd;
}

/* The ranks that have not connected, as "2, 3, ..." */
static void missing(const rg_dist *d, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  for (int r = 1; r < d->world && n + 16 < cap; r++)
    if (d->fd[r] < 0) n += (size_t)snprintf(out + n, cap - n, "%s%d", n ? ", " : "", r);
}

/* Rank 0: takes one connection from every other rank within the timeout. Each says
   hello with its rank, the world size and its model's fingerprint, which must be ours;
   a connection that does not say hello is not one of ours and is dropped. Then every
   rank gets the ack. */
static rg_status gather(rg_dist *d, const char *host, const char *port, const hdr *mine,
                        char *msg, size_t cap) {
  int lfd = listen_on(d, host, port, msg, cap), have = 1;
  if (lfd < 0) return RG_ERR_IO;
  double deadline = now() + d->timeout;
  rg_status st = RG_OK;
  while (st == RG_OK && have < d->world) {
    struct pollfd pf = {lfd, POLLIN, 0};
    int r = poll(&pf, 1, ms_left(deadline)), c = r > 0 ? accept(lfd, NULL, NULL) : -1;
    hdr h;
    if (r == 0) {
      char who[256];
      missing(d, who, sizeof who);
      st = broke(d, RG_ERR_IO, msg, cap, "%d of the other %d ranks did not connect to "
                 "%s:%s within %g s (missing: rank %s): start every rank with the same "
                 "RG_WORLD_SIZE and RG_RENDEZVOUS (resgrad-run does), or raise "
                 "RG_DIST_TIMEOUT", d->world - have, d->world - 1, host, port, d->timeout,
                 who);
    } else if (c >= 0) {
      setup(c);
      if (io(c, &h, sizeof h, false, ms_left(deadline)) || h.magic != MAGIC ||
          h.kind != M_HELLO) {
        close(c);
      } else if (h.b != (uint64_t)d->world || h.a == 0 || h.a >= h.b || d->fd[h.a] >= 0) {
        close(c);
        st = broke(d, RG_ERR_MISUSE, msg, cap, "a process connected as rank %llu of %llu "
                   "%s: give every process its own RG_RANK in [0, RG_WORLD_SIZE) and the "
                   "same RG_WORLD_SIZE", (unsigned long long)h.a, (unsigned long long)h.b,
                   h.b != (uint64_t)d->world ? "but rank 0 has another world size"
                   : h.a == 0 ? "but this process is rank 0" : "twice");
      } else {
        d->fd[h.a] = c;
        have++;
        if ((h.c ^ mine->c) & DEV_AVG)
          st = broke(d, RG_ERR_MISUSE, msg, cap, "rank %llu runs on %s, rank 0 on %s: "
                     "open every rank's context on the same kind of device",
                     (unsigned long long)h.a, h.c & DEV_AVG ? "GPUs" : "the CPU",
                     mine->c & DEV_AVG ? "GPUs" : "the CPU");
        else if (h.c != mine->c || h.d != mine->d)
          st = broke(d, RG_ERR_MISUSE, msg, cap, "rank %llu built another model (%llu "
                     "parameters, or other names, dtypes or shapes) than rank 0 (%llu "
                     "parameters): every rank must build the same model before "
                     "rg_dist_init", (unsigned long long)h.a,
                     (unsigned long long)(h.c & ~DEV_AVG),
                     (unsigned long long)(mine->c & ~DEV_AVG));
      }
    } else if (r < 0 ? errno != EINTR
                     : errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
      st = broke(d, RG_ERR_IO, msg, cap, "waiting for connections on %s:%s: %s", host, port,
                 strerror(errno));
    }
  }
  close(lfd);
  hdr ack = {MAGIC, M_ACK, (uint64_t)d->world, 0, 0, 0};
  for (int r = 1; st == RG_OK && r < d->world; r++)
    st = xfer(d, r, &ack, sizeof ack, true, "welcoming the ranks", msg, cap);
  return st;
}

/* A connected non-blocking socket to a, or -1 with *err set. */
static int try_connect(const struct addrinfo *a, double deadline, int *err) {
  int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  setup(fd);
  if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
  *err = errno;
  if (errno == EINPROGRESS) {
    struct pollfd pf = {fd, POLLOUT, 0};
    int r, so = 0;
    socklen_t len = sizeof so;
    do r = poll(&pf, 1, ms_left(deadline));
    while (r < 0 && errno == EINTR);
    if (r > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len) == 0 && so == 0) return fd;
    *err = r == 0 ? ETIMEDOUT : r < 0 ? errno : so;
  }
  close(fd);
  return -1;
}

/* Another rank: connects to rank 0 (retrying until the timeout: rank 0 may start
   later), says hello and waits for the ack, which comes once every rank is there. */
static rg_status join(rg_dist *d, const char *host, const char *port, hdr *mine, char *msg,
                      size_t cap) {
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int e = getaddrinfo(host, port, &hints, &ai), err = ECONNREFUSED;
  if (e)
    return broke(d, RG_ERR_IO, msg, cap, "cannot resolve the rendezvous host '%s': %s", host,
                 gai_strerror(e));
  double deadline = now() + d->timeout;
  for (;;) {
    for (struct addrinfo *a = ai; a && d->fd[0] < 0; a = a->ai_next)
      d->fd[0] = try_connect(a, deadline, &err);
    int left = ms_left(deadline);
    if (d->fd[0] >= 0 || left == 0) break;
    struct timespec pause = {0, (left < 50 ? left : 50) * 1000000L};
    nanosleep(&pause, NULL);
  }
  freeaddrinfo(ai);
  if (d->fd[0] < 0)
    return broke(d, RG_ERR_IO, msg, cap, "could not connect to rank 0 at %s:%s within %g s "
                 "(%s): start rank 0 with the same RG_RENDEZVOUS, check the address, or "
                 "raise RG_DIST_TIMEOUT", host, port, d->timeout, strerror(err));
  hdr ack, want = {MAGIC, M_ACK, (uint64_t)d->world, 0, 0, 0};
  rg_status st = xfer(d, 0, mine, sizeof *mine, true, "saying hello to rank 0", msg, cap);
  if (st == RG_OK)
    st = xfer(d, 0, &ack, sizeof ack, false, "waiting for every rank to connect", msg, cap);
  return st == RG_OK ? check_hdr(d, 0, &ack, &want, "joining", msg, cap) : st;
}

/* FNV-1a over the parameters' names, dtypes and shapes. */
static uint64_t fingerprint(rg_ctx *ctx) {
  uint64_t h = RG_FNV_START;
  for (int i = 0; i < ctx->nparams; i++) {
    const rg_tinfo *t = rg__t(ctx, ctx->prefs[i]);
    h = rg__fnv1a(h, ctx->pnames[i], strlen(ctx->pnames[i]) + 1);
    h = rg__fnv1a(h, &t->dtype, 1);
    h = rg__fnv1a(h, t->dims, sizeof(int64_t) * t->ndim);
  }
  return h;
}

/* Rank 0's parameters to every other rank, in creation order. A local failure (of
   rg_read, rg_write) is set on ctx and hangs up, so the peers fail too. */
static rg_status share_params(rg_ctx *ctx, rg_dist *d, char *msg, size_t cap) {
  size_t most = 0;
  for (int i = 0; i < ctx->nparams; i++)
    if (rg__t(ctx, ctx->prefs[i])->nbytes > most) most = rg__t(ctx, ctx->prefs[i])->nbytes;
  void *buf = rg__malloc(ctx, most);
  rg_status st = buf ? RG_OK : broke(d, RG_ERR_OOM, msg, cap, "out of host memory for a "
                                     "%zu-byte parameter", most);
  for (int i = 0; st == RG_OK && i < ctx->nparams; i++) {
    rg_tensor h = rg__handle(ctx, ctx->prefs[i]);
    size_t nb = rg__t(ctx, ctx->prefs[i])->nbytes;
    char what[320];
    snprintf(what, sizeof what, "%s parameter '%s'", d->rank ? "receiving" : "sending",
             ctx->pnames[i]);
    if (d->rank == 0) {
      st = rg_read(ctx, h, buf, nb);
      for (int r = 1; st == RG_OK && r < d->world; r++)
        st = xfer(d, r, buf, nb, true, what, msg, cap);
    } else {
      st = xfer(d, 0, buf, nb, false, what, msg, cap);
      if (st == RG_OK) st = rg_write(ctx, h, buf, nb);
    }
    if (st != RG_OK) hang_up(d);
  }
  rg__free(ctx, buf);
  return st;
}

/* The backend's group: rank 0 names it and sends the name to every other rank (after the
   rendezvous, so every rank is there), then each joins. A failure hangs up, so the peers
   fail at once rather than at the backend's timeout. */
static rg_status open_group(rg_ctx *ctx, rg_dist *d, char *msg, size_t cap) {
  unsigned char id[RG_DIST_ID];
  hdr h = {MAGIC, M_GROUP, 0, RG_DIST_ID, 0, 0}, got;
  rg_status st = RG_OK;
  if (d->rank == 0) {
    char why[512] = "";
    st = ctx->be->dist_id(ctx, id, why, sizeof why);
    if (st != RG_OK) return broke(d, st, msg, cap, "%s", why);
    for (int r = 1; st == RG_OK && r < d->world; r++) {
      st = xfer(d, r, &h, sizeof h, true, "sending the GPU group's id", msg, cap);
      if (st == RG_OK) st = xfer(d, r, id, sizeof id, true, "sending the id", msg, cap);
    }
  } else {
    st = xfer(d, 0, &got, sizeof got, false, "waiting for the GPU group's id", msg, cap);
    if (st == RG_OK) st = check_hdr(d, 0, &got, &h, "joining the GPU group", msg, cap);
    if (st == RG_OK) st = xfer(d, 0, id, sizeof id, false, "receiving the id", msg, cap);
  }
  if (st != RG_OK) return st;
  char why[512] = "";
  st = ctx->be->dist_open(ctx, d->rank, d->world, id, d->timeout, why, sizeof why);
  if (st != RG_OK) return broke(d, st, msg, cap, "%s", why);
  d->dev = true;
  return RG_OK;
}

/* ---- settings ------------------------------------------------------------------------- */

typedef struct settings {
  int rank, world;
  char host[256], port[8];
  double timeout;
} settings;

/* An integer environment variable in [lo, hi] into *out. */
static rg_status env_int(rg_ctx *ctx, const char *name, int lo, int hi, int *out) {
  const char *v = getenv(name);
  if (!v || !*v)
    return rg__fail(ctx, RG_ERR_MISUSE, CALL, "%s is not set: start the program with "
                    "resgrad-run -n N (which sets RG_RANK, RG_WORLD_SIZE and "
                    "RG_RENDEZVOUS), set those yourself, or pass rg_dist_options with "
                    "world_size > 0", name);
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (*end || errno || x < lo || x > hi)
    return rg__fail(ctx, RG_ERR_MISUSE, CALL, "%s=\"%.40s\" is not an integer in [%d, %d]",
                    name, v, lo, hi);
  *out = (int)x;
  return RG_OK;
}

/* "tcp:HOST:PORT" (HOST may be [v6]) into s->host, s->port. */
static bool parse_rendezvous(const char *v, settings *s) {
  if (strncmp(v, "tcp:", 4)) return false;
  v += 4;
  const char *colon = strrchr(v, ':'), *port = colon ? colon + 1 : "";
  size_t hl = colon ? (size_t)(colon - v) : 0;
  if (hl >= 2 && v[0] == '[' && v[hl - 1] == ']') v++, hl -= 2;
  char *end = NULL;
  long p = strtol(port, &end, 10);
  if (!hl || hl >= sizeof s->host || !*port || *end || p < 1 || p > 65535) return false;
  memcpy(s->host, v, hl);
  s->host[hl] = 0;
  snprintf(s->port, sizeof s->port, "%ld", p);
  return true;
}

static rg_status settings_of(rg_ctx *ctx, const rg_dist_options *o, settings *s) {
  rg_status st = RG_OK;
  memset(s, 0, sizeof *s);
  if (o->world_size < 0 || (o->world_size > 0 && (o->rank < 0 || o->rank >= o->world_size)))
    return rg__fail(ctx, RG_ERR_MISUSE, CALL, "rg_dist_options has rank %d of world_size %d; "
                    "world_size must be >= 1 (or 0 to read the environment) and rank in "
                    "[0, world_size)", o->rank, o->world_size);
  if (o->world_size > 0) {
    s->world = o->world_size;
    s->rank = o->rank;
  } else {
    st = env_int(ctx, "RG_WORLD_SIZE", 1, MAX_WORLD, &s->world);
    if (st == RG_OK) st = env_int(ctx, "RG_RANK", 0, s->world - 1, &s->rank);
    if (st != RG_OK) return st;
  }
  const char *tv = getenv("RG_DIST_TIMEOUT");
  char *end = NULL;
  s->timeout = o->timeout != 0 ? o->timeout : tv && *tv ? strtod(tv, &end) : DEFAULT_TIMEOUT;
  if (!(s->timeout > 0 && s->timeout <= 1e6) || (end && *end))
    return o->timeout != 0
               ? rg__fail(ctx, RG_ERR_MISUSE, CALL, "rg_dist_options.timeout is %g; it must "
                          "be in (0, 1e6] seconds (or 0 for the default)", o->timeout)
               : rg__fail(ctx, RG_ERR_MISUSE, CALL, "RG_DIST_TIMEOUT=\"%.40s\" is not a "
                          "number of seconds in (0, 1e6]", tv);
  if (s->world == 1) return RG_OK;
  const char *rv = o->rendezvous ? o->rendezvous : getenv("RG_RENDEZVOUS");
  const char *src = o->rendezvous ? "rg_dist_options.rendezvous" : "RG_RENDEZVOUS";
  if (!rv || !*rv)
    return rg__fail(ctx, RG_ERR_MISUSE, CALL, "%s is not set: with %d ranks, rank 0 needs an "
                    "address to listen on, e.g. tcp:127.0.0.1:29500 (resgrad-run sets it)",
                    src, s->world);
  if (!parse_rendezvous(rv, s))
    return rg__fail(ctx, RG_ERR_MISUSE, CALL, "%s=\"%.80s\" is not tcp:HOST:PORT (e.g. "
                    "tcp:127.0.0.1:29500, tcp:[::1]:29500; PORT in 1..65535)", src, rv);
  return RG_OK;
}

/* ---- the public calls ----------------------------------------------------------------- */

rg_status rg_dist_init(rg_ctx *ctx, const rg_dist_options *opt) {
  if (!ctx) return RG_ERR_MISUSE;
  if (ctx->opt.dry_run) return rg__dry_refuse(ctx, CALL);
  if (ctx->dist)
    return rg__fail(ctx, RG_ERR_MISUSE, CALL, "this context is already rank %d of %d; call "
                    "rg_dist_close first", ctx->dist->rank, ctx->dist->world);
  if (!ctx->nparams)
    return rg__fail(ctx, RG_ERR_MISUSE, CALL, "the context has no parameters yet: build the "
                    "model first (rg_dist_init copies rank 0's parameters to every rank)");
  rg_dist_options o = opt ? *opt : (rg_dist_options){0};
  settings s;
  rg_status st = settings_of(ctx, &o, &s);
  if (st != RG_OK) return st;
  if (s.world > 1 && ctx->be != &rg_cpu_backend && !ctx->be->dist_open)
    return rg__fail(ctx, RG_ERR_UNSUPPORTED, CALL, "%d ranks on %s: this build of resgrad "
                    "has no NCCL, which GPU contexts need to average gradients across "
                    "processes. Install NCCL next to the CUDA toolkit (Debian/Ubuntu: "
                    "libnccl-dev), reconfigure (the CMake summary's NCCL line must say "
                    "found; RG_NCCL_ROOT points at another place) and rebuild; or open the "
                    "contexts with RG_DEVICE_CPU, or run one rank", s.world, ctx->devname);
  st = rg__drain(ctx, RG_DRAIN_SYNC);
  if (st != RG_OK) return st;
  rg_dist *d = rg__calloc(ctx, 1, sizeof *d);
  int *fd = d ? rg__malloc(ctx, sizeof *fd * (size_t)s.world) : NULL;
  if (!fd) {
    rg__free(ctx, d);
    return rg__fail(ctx, RG_ERR_OOM, CALL, "out of host memory");
  }
  for (int r = 0; r < s.world; r++) fd[r] = -1;
  d->fd = fd;
  d->rank = s.rank;
  d->world = s.world;
  d->timeout = s.timeout;
  d->ms = (int)ceil(s.timeout * 1000);
  d->bucket_bytes = o.bucket_bytes ? o.bucket_bytes : DEFAULT_BUCKET;
  char msg[768] = "";
  if (s.world > 1) {
    hdr mine = {MAGIC, M_HELLO, (uint64_t)s.rank, (uint64_t)s.world,
                (uint64_t)ctx->nparams | (ctx->be->dist_open ? DEV_AVG : 0), fingerprint(ctx)};
    st = s.rank == 0 ? gather(d, s.host, s.port, &mine, msg, sizeof msg)
                     : join(d, s.host, s.port, &mine, msg, sizeof msg);
  }
  /* A backend that averages itself does it with any number of ranks, one included, so
     one GPU runs the whole path (with one rank the average changes no bit). */
  if (st == RG_OK && ctx->be->dist_open) st = open_group(ctx, d, msg, sizeof msg);
  if (st == RG_OK && s.world > 1) st = share_params(ctx, d, msg, sizeof msg);
  if (st != RG_OK) {
    if (*msg) rg__fail(ctx, st, CALL, "%s", msg);
    (void)free_dist(ctx, d, true); /* the peers fail their rg_dist_init too */
    return st;
  }
  ctx->dist = d;
  return RG_OK;
}

rg_status rg_dist_close(rg_ctx *ctx) {
  if (!ctx || !ctx->dist) return RG_OK;
  rg_status st = rg__drain(ctx, RG_DRAIN_SYNC);
  rg_status cl = free_dist(ctx, ctx->dist, false);
  ctx->dist = NULL;
  return st != RG_OK ? st : cl;
}

void rg__dist_free(rg_ctx *ctx) {
  (void)free_dist(ctx, ctx->dist, false);
  ctx->dist = NULL;
}

int rg_dist_rank(const rg_ctx *ctx) { return ctx && ctx->dist ? ctx->dist->rank : 0; }
int rg_dist_world(const rg_ctx *ctx) { return ctx && ctx->dist ? ctx->dist->world : 1; }

/* ---- buckets (rg_backward) --------------------------------------------------------------
   A parameter's gradient is complete once the rule of every tape node that uses it has
   been recorded. The walk goes from the loss back to node 0, so that is when it has
   passed the parameter's first use. plan() finds each first use and orders the
   parameters latest first use first; reached(k) buckets those whose first use lies
   past node k. The order depends only on the recorded work, so every rank makes the
   same buckets. */

bool rg__dist_on(const rg_ctx *ctx) {
  return ctx->dist && (ctx->dist->world > 1 || ctx->dist->dev);
}

static int param_of(rg_ctx *ctx, uint32_t ref) {
  if (!ref || !(ref >> 31)) return -1;
  const rg_tinfo *t = rg__t(ctx, ref);
  return t->flags & RG_T_PARAM ? t->param : -1;
}

/* Records the all-reduce of the bucket being filled (nothing if it is empty). Its list
   lives in host staging, as long as the node. */
static rg_status emit(rg_ctx *ctx) {
  rg_dist *d = ctx->dist;
  if (!d->ncur) return RG_OK;
  rg_list *l = rg__stage(ctx, sizeof *l + sizeof(uint32_t) * (size_t)d->ncur);
  if (!l)
    return rg__fail(ctx, RG_ERR_OOM, "rg_backward", "out of host memory for a gradient "
                    "bucket");
  l->n = d->ncur;
  l->ref = (uint32_t *)(l + 1);
  memcpy(l->ref, d->cur, sizeof(uint32_t) * (size_t)d->ncur);
  int64_t iv[4] = {d->nbucket++, (int64_t)d->cur_bytes, 0, 0};
  d->ncur = 0;
  d->cur_bytes = 0;
  rg_status st = rg__emit(ctx, RG_OP_ALLREDUCE, NULL, NULL, iv, NULL, l, NULL);
  /* its own: not the label of the forward node whose rule was recorded last */
  if (st == RG_OK) ctx->nodes[ctx->n_nodes - 1].label = 0;
  return st;
}

static rg_status add(rg_ctx *ctx, int p) {
  rg_dist *d = ctx->dist;
  uint32_t g = rg__t(ctx, ctx->prefs[p])->grad;
  d->cur[d->ncur++] = g;
  d->cur_bytes += rg__t(ctx, g)->nbytes;
  return d->cur_bytes >= d->bucket_bytes ? emit(ctx) : RG_OK;
}

rg_status rg__dist_plan(rg_ctx *ctx, size_t end) {
  rg_dist *d = ctx->dist;
  int np = ctx->nparams;
  if (d->broken != RG_OK) /* its all-reduces could only fail: say so now */
    return rg__fail(ctx, d->broken, "rg_backward", "an earlier failure closed this rank's "
                    "connections: %s", d->why);
  if (np > d->cap) {
    int64_t *first = rg__realloc(ctx, d->first, sizeof *first * (size_t)np);
    if (first) d->first = first;
    int *order = first ? rg__realloc(ctx, d->order, sizeof *order * (size_t)np) : NULL;
    if (order) d->order = order;
    uint32_t *cur = order ? rg__realloc(ctx, d->cur, sizeof *cur * (size_t)np) : NULL;
    if (!cur)
      return rg__fail(ctx, RG_ERR_OOM, "rg_backward", "out of host memory for the gradient "
                      "buckets");
    d->cur = cur;
    d->cap = np;
  }
  for (int p = 0; p < np; p++) d->first[p] = -1;
  for (size_t k = 0; k < end; k++) {
    const rg_node *n = &ctx->nodes[k];
    for (int j = 0; (n->flags & RG_N_GRAD) && j < n->nin; j++) {
      int p = param_of(ctx, n->in[j]);
      if (p >= 0 && d->first[p] < 0) d->first[p] = (int64_t)k;
    }
  }
  /* Latest first use first (unused, -1, last). Parameters are mostly made in the order
     the forward uses them, so the reverse creation order this starts from is nearly
     sorted and the insertion sort about linear. */
  for (int i = 0; i < np; i++) {
    int p = np - 1 - i, j = i;
    for (; j > 0 && d->first[d->order[j - 1]] < d->first[p]; j--) d->order[j] = d->order[j - 1];
    d->order[j] = p;
  }
  d->np = np;
  d->pos = d->ncur = 0;
  d->cur_bytes = 0;
  d->nbucket = 0;
  return RG_OK;
}

rg_status rg__dist_reached(rg_ctx *ctx, size_t k) {
  rg_dist *d = ctx->dist;
  rg_status st = RG_OK;
  while (st == RG_OK && d->pos < d->np && d->first[d->order[d->pos]] > (int64_t)k)
    st = add(ctx, d->order[d->pos++]);
  return st;
}

rg_status rg__dist_flush(rg_ctx *ctx) {
  rg_dist *d = ctx->dist;
  rg_status st = RG_OK;
  while (st == RG_OK && d->pos < d->np) st = add(ctx, d->order[d->pos++]);
  return st == RG_OK ? emit(ctx) : st;
}

/* ---- the all-reduce (CPU backend: tensors are host memory) ------------------------------- */

/* Rank 0: adds peer's copy of t into t, CHUNK floats at a time. */
static rg_status add_from(rg_dist *d, int peer, const rg_tinfo *t, const char *what,
                          char *msg, size_t cap) {
  float *g = t->data;
  rg_status st = RG_OK;
  for (int64_t e0 = 0; st == RG_OK && e0 < t->numel; e0 += CHUNK) {
    int64_t n = t->numel - e0 < CHUNK ? t->numel - e0 : CHUNK;
    st = xfer(d, peer, d->buf, sizeof(float) * (size_t)n, false, what, msg, cap);
    for (int64_t e = 0; st == RG_OK && e < n; e++) g[e0 + e] += d->buf[e];
  }
  return st;
}

/* Sends (out) or receives every tensor of l to or from peer. */
static rg_status move_list(rg_ctx *ctx, rg_dist *d, int peer, const rg_list *l, bool out,
                           const char *what, char *msg, size_t cap) {
  rg_status st = RG_OK;
  for (int i = 0; st == RG_OK && i < l->n; i++) {
    rg_tinfo *t = rg__t(ctx, l->ref[i]);
    st = xfer(d, peer, t->data, t->nbytes, out, what, msg, cap);
  }
  return st;
}

rg_status rg__dist_allreduce_host(rg_ctx *ctx, const rg_list *l, char *msg, size_t cap) {
  rg_dist *d = ctx->dist;
  if (!d) {
    snprintf(msg, cap, "the context is no longer distributed (rg_dist_close ran before "
             "this all-reduce)");
    return RG_ERR_MISUSE;
  }
  if (d->broken != RG_OK) {
    snprintf(msg, cap, "an earlier failure closed this rank's connections: %s", d->why);
    return d->broken;
  }
  uint64_t bytes = 0;
  for (int i = 0; i < l->n; i++) bytes += rg__t(ctx, l->ref[i])->nbytes;
  char what[128];
  snprintf(what, sizeof what, "averaging gradients (all-reduce %llu, %llu bytes)",
           (unsigned long long)d->seq, (unsigned long long)bytes);
  hdr mine = {MAGIC, M_REDUCE, d->seq++, bytes, 0, 0}, got;
  rg_status st = RG_OK;
  if (d->rank) {
    st = xfer(d, 0, &mine, sizeof mine, true, what, msg, cap);
    if (st == RG_OK) st = move_list(ctx, d, 0, l, true, what, msg, cap);
    mine.kind = M_RESULT;
    if (st == RG_OK) st = xfer(d, 0, &got, sizeof got, false, what, msg, cap);
    if (st == RG_OK) st = check_hdr(d, 0, &got, &mine, what, msg, cap);
    return st == RG_OK ? move_list(ctx, d, 0, l, false, what, msg, cap) : st;
  }
  for (int r = 1; st == RG_OK && r < d->world; r++) { /* the sum, in rank order */
    st = xfer(d, r, &got, sizeof got, false, what, msg, cap);
    if (st == RG_OK) st = check_hdr(d, r, &got, &mine, what, msg, cap);
    for (int i = 0; st == RG_OK && i < l->n; i++)
      st = add_from(d, r, rg__t(ctx, l->ref[i]), what, msg, cap);
  }
  for (int i = 0; st == RG_OK && i < l->n; i++) {
    rg_tinfo *t = rg__t(ctx, l->ref[i]);
    float *g = t->data;
    for (int64_t e = 0; e < t->numel; e++) g[e] /= (float)d->world;
  }
  mine.kind = M_RESULT;
  for (int r = 1; st == RG_OK && r < d->world; r++) {
    st = xfer(d, r, &mine, sizeof mine, true, what, msg, cap);
    if (st == RG_OK) st = move_list(ctx, d, r, l, true, what, msg, cap);
  }
  return st;
}
