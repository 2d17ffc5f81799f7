/* SPDX-License-Identifier: MIT */
/*
 * Socket calls made with raw system calls. Debian's librspreload.so interposes the libc
 * socket functions to turn an ordinary program's sockets into rsockets; the CM's own sockets
 * (and rsockets' internals) must never be captured by it.
 */
#ifndef SR_CM_SYS_H
#define SR_CM_SYS_H

#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline int sys_socket(int d, int t, int p) { return (int)syscall(SYS_socket, d, t, p); }
static inline int sys_bind(int fd, const struct sockaddr *a, socklen_t l) { return (int)syscall(SYS_bind, fd, a, l); }
static inline int sys_connect(int fd, const struct sockaddr *a, socklen_t l) { return (int)syscall(SYS_connect, fd, a, l); }
static inline int sys_getsockname(int fd, struct sockaddr *a, socklen_t *l) { return (int)syscall(SYS_getsockname, fd, a, l); }
static inline int sys_setsockopt(int fd, int lv, int o, const void *v, socklen_t l) { return (int)syscall(SYS_setsockopt, fd, lv, o, v, l); }
/* A UDP socket with IP_RECVERR reports the ICMP error of an earlier datagram (port
 * unreachable: a peer that went away) on its next send, which is then not sent: that error is
 * not this datagram's, so it is sent again (the error queue still holds the report). */
static inline ssize_t sys_sendto(int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l)
{
	ssize_t r = (ssize_t)syscall(SYS_sendto, fd, b, n, f, a, l);

	if (r < 0 && (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH))
		r = (ssize_t)syscall(SYS_sendto, fd, b, n, f, a, l);
	return r;
}
static inline ssize_t sys_recvmsg(int fd, struct msghdr *m, int f) { return (ssize_t)syscall(SYS_recvmsg, fd, m, f); }
static inline int sys_close(int fd) { return (int)syscall(SYS_close, fd); }

#endif /* SR_CM_SYS_H */
