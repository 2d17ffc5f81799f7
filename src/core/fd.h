/* SPDX-License-Identifier: MIT */
/*
 * softrdma's own descriptors above the application's range.
 *
 * A process on softrdma holds a dozen descriptors a kernel RDMA stack keeps in the kernel: the
 * soft NIC's UDP socket, its epoll and wake-up eventfd, the counter file, the CM thread's epoll,
 * eventfd and sockets, capture files. Taken at the lowest free numbers, they push the
 * application's own numbers up where programs do not expect them: nc.traditional refuses a
 * socket above 16 ("Preposterous fd value"), and under librspreload every socket it gets is a
 * descriptor opened after ours (the IB CM's QP1 channel made the accepted one 17 under ctest).
 * So each one the application never sees is moved to SR_FD_BASE or above when it is made (before
 * it is registered anywhere: an epoll set keys on the number). Descriptors the application sees
 * (completion and event channels, a context's cmd_fd and async_fd, an rsocket's number) keep the
 * lowest free number, as the kernel's would. Raw system calls: librspreload interposes fcntl()
 * and close(). docs/architecture.md, "Descriptors".
 */
#ifndef SR_CORE_FD_H
#define SR_CORE_FD_H

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SR_FD_BASE 256

/* fd, or its copy at SR_FD_BASE or above (close-on-exec; the original is closed). Kept where it
 * is when that fails (RLIMIT_NOFILE at or below the base) or when it is already high. */
static inline int sr_fd_high(int fd)
{
	int hi;

	if (fd < 0 || fd >= SR_FD_BASE)
		return fd;
	hi = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, SR_FD_BASE);
	if (hi < 0)
		return fd;
	(void)syscall(SYS_close, fd);
	return hi;
}

#endif /* SR_CORE_FD_H */
