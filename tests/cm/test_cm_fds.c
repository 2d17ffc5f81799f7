/* SPDX-License-Identifier: MIT */
/*
 * softrdma's own descriptors stay out of the application's numbers (src/core/fd.h).
 *
 * An rsocket listener on 127.0.0.1 and a connection to it (this opens the device, its soft NIC
 * and counter file, the CM thread with its epoll, eventfd and sockets, and with the IB CM the
 * device's QP1 and its channel), nc.traditional's way: the listener closed right after the
 * accept. Then:
 *
 *   - no socket, epoll instance or counter file of the library sits below SR_FD_BASE: those are
 *     descriptors a kernel RDMA stack keeps in the kernel, the application never sees them;
 *   - the descriptor the application opens before the accept (as librspreload's accept()
 *     does for the number it returns) is at most 16. nc.traditional refuses a socket above
 *     16 ("Preposterous fd value"): with the IB CM's QP1 channel, its accepted socket was 17
 *     under ctest (which leaves a descriptor of its own open in every test), and
 *     integration/test_rsockets' preload case failed.
 *
 * What the application does see keeps the lowest free numbers, as with the kernel's stack:
 * event channels (an rsocket's number), completion channels, a context's cmd_fd/async_fd.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <rdma/rsocket.h>

#include "sr_test.h"

#define FD_BASE 256	/* SR_FD_BASE of src/core/fd.h */

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	return a;
}

/* What descriptor fd of this process is (readlink of /proc/self/fd/N). */
static void fd_what(int fd, char *buf, size_t len)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, buf, len - 1);
	buf[n > 0 ? n : 0] = 0;
}

int main(void)
{
	struct sockaddr_in a = loopback(0);
	socklen_t len = sizeof(a);
	struct rlimit rl;
	struct pollfd p;
	int l, c, s, ret, err = -1, low = 0, fd;
	char what[256];
	DIR *d;
	struct dirent *e;

	sr_test_timeout(60);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur <= FD_BASE + 64) {
		printf("test_cm_fds: RLIMIT_NOFILE %llu leaves no room above %d: skipped\n",
		       (unsigned long long)rl.rlim_cur, FD_BASE);
		return 77;
	}
	l = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(l >= 0);
	REQUIRE(rbind(l, (struct sockaddr *)&a, sizeof(a)) == 0);
	REQUIRE(rlisten(l, 1) == 0);
	REQUIRE(rgetsockname(l, (struct sockaddr *)&a, &len) == 0);
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(c >= 0);
	CHECK_EQ(rfcntl(c, F_SETFL, O_NONBLOCK), 0);
	ret = rconnect(c, (struct sockaddr *)&a, sizeof(a));
	if (ret)
		CHECK_EQ(errno, EINPROGRESS);
	/* librspreload's accept() opens the number it gives the application first, then
	 * calls raccept(): that number is the first free one while the listener lives. */
	fd = open("/dev/null", O_RDONLY);
	s = raccept(l, NULL, NULL);
	REQUIRE(s >= 0);
	CHECK_EQ(rclose(l), 0);
	printf("test_cm_fds: an accepted socket under librspreload would be %d\n", fd);
	CHECK(fd >= 0 && fd <= 16);
	close(fd);
	p = (struct pollfd){ .fd = c, .events = POLLOUT };
	CHECK_EQ(rpoll(&p, 1, 10000), 1);
	len = sizeof(err);
	CHECK_EQ(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	CHECK_EQ(err, 0);
	CHECK_EQ(rsend(c, "x", 1, 0), 1);
	CHECK_EQ(rrecv(s, what, 1, 0), 1);

	d = opendir("/proc/self/fd");
	REQUIRE(d);
	while ((e = readdir(d))) {
		char *end;
		long n = strtol(e->d_name, &end, 10);

		if (*end || end == e->d_name || n == dirfd(d))
			continue;
		fd_what((int)n, what, sizeof(what));
		if (n < FD_BASE && (!strncmp(what, "socket:", 7) ||
				    !strcmp(what, "anon_inode:[eventpoll]") ||
				    strstr(what, "/softrdma-"))) {
			fprintf(stderr, "FAIL: fd %ld is the library's %s, below %d\n", n, what, FD_BASE);
			low++;
		}
	}
	closedir(d);
	CHECK_EQ(low, 0);
	CHECK_EQ(rclose(c), 0);
	CHECK_EQ(rclose(s), 0);
	return sr_test_done("test_cm_fds");
}
