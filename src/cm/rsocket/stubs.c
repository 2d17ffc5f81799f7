/* SPDX-License-Identifier: MIT */
/*
 * rsockets are not implemented yet (the cm: issue's next step): every call fails with
 * ENOSYS, never silently. Replaced file by file as rsockets land.
 */
#include <errno.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <rdma/rsocket.h>

#define NOSYS(ret) do { errno = ENOSYS; return ret; } while (0)

int rsocket(int domain, int type, int protocol) { NOSYS(-1); }
int rbind(int s, const struct sockaddr *a, socklen_t l) { NOSYS(-1); }
int rlisten(int s, int backlog) { NOSYS(-1); }
int raccept(int s, struct sockaddr *a, socklen_t *l) { NOSYS(-1); }
int rconnect(int s, const struct sockaddr *a, socklen_t l) { NOSYS(-1); }
int rshutdown(int s, int how) { NOSYS(-1); }
int rclose(int s) { NOSYS(-1); }
ssize_t rrecv(int s, void *b, size_t n, int f) { NOSYS(-1); }
ssize_t rrecvfrom(int s, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l) { NOSYS(-1); }
ssize_t rrecvmsg(int s, struct msghdr *m, int f) { NOSYS(-1); }
ssize_t rsend(int s, const void *b, size_t n, int f) { NOSYS(-1); }
ssize_t rsendto(int s, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l) { NOSYS(-1); }
ssize_t rsendmsg(int s, const struct msghdr *m, int f) { NOSYS(-1); }
ssize_t rread(int s, void *b, size_t n) { NOSYS(-1); }
ssize_t rreadv(int s, const struct iovec *iov, int n) { NOSYS(-1); }
ssize_t rwrite(int s, const void *b, size_t n) { NOSYS(-1); }
ssize_t rwritev(int s, const struct iovec *iov, int n) { NOSYS(-1); }
int rpoll(struct pollfd *fds, nfds_t n, int t) { NOSYS(-1); }
int rselect(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t) { NOSYS(-1); }
int rgetpeername(int s, struct sockaddr *a, socklen_t *l) { NOSYS(-1); }
int rgetsockname(int s, struct sockaddr *a, socklen_t *l) { NOSYS(-1); }
int rsetsockopt(int s, int lv, int o, const void *v, socklen_t l) { NOSYS(-1); }
int rgetsockopt(int s, int lv, int o, void *v, socklen_t *l) { NOSYS(-1); }
int rfcntl(int s, int cmd, ...) { NOSYS(-1); }
off_t riomap(int s, void *b, size_t n, int p, int f, off_t o) { NOSYS(-1); }
int riounmap(int s, void *b, size_t n) { NOSYS(-1); }
size_t riowrite(int s, const void *b, size_t n, off_t o, int f) { NOSYS(0); }
