/*
 * free_port.h - free_port(), shared by resgrad-run.c and the data-parallel tests
 * (tests/dist_common.h includes it by its path): a port for rank 0 to listen on.
 *
 * The port is the kernel's choice for a loopback socket bound to port 0, closed again
 * at once: nobody listens on it now, though another program could take it before rank 0
 * binds it (rank 0 then fails, saying the port is in use).
 */
#ifndef RG_TOOLS_FREE_PORT_H
#define RG_TOOLS_FREE_PORT_H

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A TCP port of 127.0.0.1 that nobody listens on now, or -1. */
static inline int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
      !getsockname(fd, (struct sockaddr *)&a, &len))
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

#endif
