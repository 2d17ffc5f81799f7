/* SPDX-License-Identifier: MIT */
/*
 * rsockets through the public API (rsocket(7)), in one process: every connection is made
 * between two rsockets of this process on 127.0.0.1, so the whole stack runs (rdma_cm, RC and
 * UD QPs on the loopback soft NIC). Edge cases the rsocket tools do not reach:
 *
 *   - the number is a real fd of the library, distinct from the application's fds
 *   - non-blocking connect (EINPROGRESS, then POLLOUT and SO_ERROR 0); refused connections
 *   - EAGAIN of non-blocking calls (MSG_DONTWAIT, O_NONBLOCK via rfcntl)
 *   - rpoll and rselect over an rsocket and a pipe together, with timeouts and wake-ups
 *   - MSG_PEEK, MSG_WAITALL, rreadv/rwritev
 *   - writes far larger than either side's buffers, verified byte for byte
 *   - rshutdown(SHUT_WR) half-close: EOF one way, data still flows the other way
 *   - EOF after the peer's rclose, after all its data; then EPIPE/ECONNRESET on send
 *   - a peer process killed mid-stream: the reader gets ECONNRESET after the data, never EOF;
 *     the writer's rsend ECONNRESET; rclose with data the dead peer never acknowledged fails
 *   - riomap/riowrite into the peer's buffer
 *   - datagrams: rsendto/rrecvfrom with addresses, EMSGSIZE
 */
#include "sr_test.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rsocket.h>

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	return a;
}

/* A listener on 127.0.0.1 and an ephemeral port; *port gets it. */
static int listener(uint16_t *port, int buf)
{
	struct sockaddr_in a = loopback(0);
	socklen_t len = sizeof(a);
	int one = 1, l = rsocket(AF_INET, SOCK_STREAM, 0);

	REQUIRE(l >= 0);
	CHECK_EQ(rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	if (buf) {
		CHECK_EQ(rsetsockopt(l, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)), 0);
		CHECK_EQ(rsetsockopt(l, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)), 0);
	}
	REQUIRE(rbind(l, (struct sockaddr *)&a, sizeof(a)) == 0);
	REQUIRE(rlisten(l, 8) == 0);
	REQUIRE(rgetsockname(l, (struct sockaddr *)&a, &len) == 0);
	*port = ntohs(a.sin_port);
	REQUIRE(*port != 0);
	return l;
}

/* A connected pair (client c, accepted s), made with a non-blocking connect. */
static void make_pair(int *c, int *s, int buf)
{
	uint16_t port;
	int l = listener(&port, buf), err = -1, ret;
	struct sockaddr_in a = loopback(port);
	socklen_t len = sizeof(err);
	struct pollfd p;

	*c = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(*c >= 0);
	if (buf) {
		CHECK_EQ(rsetsockopt(*c, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf)), 0);
		CHECK_EQ(rsetsockopt(*c, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf)), 0);
	}
	CHECK_EQ(rfcntl(*c, F_SETFL, O_NONBLOCK), 0);
	CHECK(rfcntl(*c, F_GETFL) & O_NONBLOCK);
	ret = rconnect(*c, (struct sockaddr *)&a, sizeof(a));
	if (ret)
		CHECK_EQ(errno, EINPROGRESS);
	*s = raccept(l, NULL, NULL);
	REQUIRE(*s >= 0);
	p = (struct pollfd){ .fd = *c, .events = POLLOUT };
	CHECK_EQ(rpoll(&p, 1, 5000), 1);
	CHECK(p.revents & POLLOUT);
	CHECK_EQ(rgetsockopt(*c, SOL_SOCKET, SO_ERROR, &err, &len), 0);
	CHECK_EQ(err, 0);
	CHECK_EQ(rfcntl(*c, F_SETFL, 0), 0);
	CHECK_EQ(rclose(l), 0);
}

/* ---- the number ---------------------------------------------------------------------------- */
static void test_numbers(void)
{
	int pfd[2], c, s;

	REQUIRE(pipe(pfd) == 0);
	make_pair(&c, &s, 0);
	CHECK(c != pfd[0] && c != pfd[1] && s != pfd[0] && s != pfd[1] && c != s);
	/* A real descriptor: the kernel knows it (the library owns it). */
	CHECK(fcntl(c, F_GETFD) >= 0);
	CHECK(fcntl(s, F_GETFD) >= 0);
	CHECK_EQ(rclose(c), 0);
	CHECK_EQ(rclose(s), 0);
	errno = 0;
	CHECK_EQ(rclose(c), -1);
	CHECK_EQ(errno, EBADF);
	errno = 0;
	CHECK_EQ(rrecv(pfd[0], &c, 1, 0), -1);	/* not an rsocket */
	CHECK_EQ(errno, EBADF);
	close(pfd[0]);
	close(pfd[1]);
}

static void test_refused(void)
{
	uint16_t port;
	int l = listener(&port, 0), c;
	struct sockaddr_in a;

	CHECK_EQ(rclose(l), 0);	/* nobody listens there any more */
	a = loopback(port);
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(c >= 0);
	errno = 0;
	CHECK_EQ(rconnect(c, (struct sockaddr *)&a, sizeof(a)), -1);
	CHECK_EQ(errno, ECONNREFUSED);
	CHECK_EQ(rclose(c), 0);
}

/* ---- names, non-blocking, peek ------------------------------------------------------------------ */
static void test_basics(void)
{
	struct sockaddr_in ca, sa, cp, sp;
	socklen_t l1 = sizeof(ca), l2 = sizeof(sa), l3 = sizeof(cp), l4 = sizeof(sp);
	char buf[64];
	int c, s;

	make_pair(&c, &s, 0);
	CHECK_EQ(rgetsockname(c, (struct sockaddr *)&ca, &l1), 0);
	CHECK_EQ(rgetsockname(s, (struct sockaddr *)&sa, &l2), 0);
	CHECK_EQ(rgetpeername(c, (struct sockaddr *)&cp, &l3), 0);
	CHECK_EQ(rgetpeername(s, (struct sockaddr *)&sp, &l4), 0);
	CHECK_EQ(cp.sin_port, sa.sin_port);
	CHECK_EQ(sp.sin_port, ca.sin_port);
	CHECK_EQ(cp.sin_addr.s_addr, htonl(INADDR_LOOPBACK));

	/* Nothing to read: EAGAIN, with MSG_DONTWAIT or O_NONBLOCK. */
	errno = 0;
	CHECK_EQ(rrecv(s, buf, sizeof(buf), MSG_DONTWAIT), -1);
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(rfcntl(s, F_SETFL, O_NONBLOCK), 0);
	errno = 0;
	CHECK_EQ(rread(s, buf, sizeof(buf)), -1);
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(rfcntl(s, F_SETFL, 0), 0);

	/* MSG_PEEK leaves the data; MSG_WAITALL waits for all of it. */
	CHECK_EQ(rsend(c, "abcdef", 6, 0), 6);
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(rrecv(s, buf, 3, MSG_PEEK), 3);
	CHECK(!memcmp(buf, "abc", 3));
	CHECK_EQ(rrecv(s, buf, 6, MSG_WAITALL), 6);
	CHECK(!memcmp(buf, "abcdef", 6));

	/* Gather and scatter. */
	struct iovec out[3] = { { "012", 3 }, { "3456", 4 }, { "789", 3 } };
	char a[4] = { 0 }, b[7] = { 0 };
	struct iovec in[2] = { { a, 4 }, { b, 6 } };
	struct msghdr mh = { .msg_iov = in, .msg_iovlen = 2 };

	CHECK_EQ(rwritev(c, out, 3), 10);
	CHECK_EQ(rrecvmsg(s, &mh, MSG_WAITALL), 10);
	CHECK(!memcmp(a, "0123", 4) && !memcmp(b, "456789", 6));
	CHECK_EQ(rclose(c), 0);
	CHECK_EQ(rclose(s), 0);
}

/* ---- rpoll and rselect with a pipe ------------------------------------------------------------- */
struct delayed {
	int fd;
	bool rsock;
	int ms;
};

static void *write_later(void *arg)
{
	struct delayed *d = arg;

	usleep((useconds_t)d->ms * 1000);
	if (d->rsock)
		CHECK_EQ(rsend(d->fd, "x", 1, 0), 1);
	else
		CHECK_EQ(write(d->fd, "x", 1), 1);
	return NULL;
}

static void test_poll(void)
{
	int pfd[2], c, s;
	struct pollfd p[2];
	double t0, el;
	char x;
	pthread_t th;

	REQUIRE(pipe(pfd) == 0);
	make_pair(&c, &s, 0);
	p[0] = (struct pollfd){ .fd = s, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = pfd[0], .events = POLLIN };

	/* Nothing ready: the timeout. */
	t0 = now_ms();
	CHECK_EQ(rpoll(p, 2, 150), 0);
	el = now_ms() - t0;
	if (el < 140 || el > 1500)
		SR_FAIL("rpoll(150 ms) took %.0f ms", el);
	CHECK_EQ(rpoll(p, 2, 0), 0);

	/* The pipe, while asleep. */
	struct delayed d1 = { pfd[1], false, 100 };

	pthread_create(&th, NULL, write_later, &d1);
	CHECK_EQ(rpoll(p, 2, 5000), 1);
	CHECK_EQ(p[0].revents, 0);
	CHECK_EQ(p[1].revents, POLLIN);
	pthread_join(th, NULL);
	CHECK_EQ(read(pfd[0], &x, 1), 1);

	/* The rsocket, while asleep. */
	struct delayed d2 = { c, true, 100 };

	pthread_create(&th, NULL, write_later, &d2);
	t0 = now_ms();
	CHECK_EQ(rpoll(p, 2, 5000), 1);
	CHECK(p[0].revents & POLLIN);
	CHECK_EQ(p[1].revents, 0);
	if (now_ms() - t0 > 2000)
		SR_FAIL("rpoll woke %.0f ms after the data", now_ms() - t0 - 100);
	pthread_join(th, NULL);
	CHECK_EQ(rrecv(s, &x, 1, 0), 1);

	/* Both at once; POLLOUT of a connected socket with room. */
	CHECK_EQ(rsend(c, "y", 1, 0), 1);
	CHECK_EQ(write(pfd[1], "y", 1), 1);
	usleep(50000);
	p[0].events = POLLIN | POLLOUT;
	CHECK_EQ(rpoll(p, 2, 1000), 2);
	CHECK_EQ(p[0].revents, POLLIN | POLLOUT);
	CHECK_EQ(p[1].revents, POLLIN);
	CHECK_EQ(rrecv(s, &x, 1, 0), 1);
	CHECK_EQ(read(pfd[0], &x, 1), 1);

	/* rselect: the same, as fd_sets. */
	fd_set rd;
	struct timeval tv = { 0, 100000 };
	int nfds = (s > pfd[0] ? s : pfd[0]) + 1;

	FD_ZERO(&rd);
	FD_SET(s, &rd);
	FD_SET(pfd[0], &rd);
	CHECK_EQ(rselect(nfds, &rd, NULL, NULL, &tv), 0);
	CHECK_EQ(write(pfd[1], "z", 1), 1);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	FD_SET(pfd[0], &rd);
	tv = (struct timeval){ 2, 0 };
	CHECK_EQ(rselect(nfds, &rd, NULL, NULL, &tv), 1);
	CHECK(FD_ISSET(pfd[0], &rd) && !FD_ISSET(s, &rd));
	CHECK_EQ(read(pfd[0], &x, 1), 1);

	CHECK_EQ(rclose(c), 0);
	CHECK_EQ(rclose(s), 0);
	close(pfd[0]);
	close(pfd[1]);
}

/* ---- large transfers ------------------------------------------------------------------------------ */
#define BIG (8u << 20)

static uint8_t pattern(size_t i)
{
	return (uint8_t)(i * 2654435761u >> 13);
}

struct xfer {
	int fd;
	size_t len;
	ssize_t ret;
	int err;
};

static void *big_send(void *arg)
{
	struct xfer *x = arg;
	uint8_t *b = malloc(x->len);

	for (size_t i = 0; i < x->len; i++)
		b[i] = pattern(i);
	x->ret = rsend(x->fd, b, x->len, 0);	/* blocking: all of it, or an error */
	x->err = errno;
	free(b);
	return NULL;
}

static void test_large(void)
{
	int c, s;
	struct xfer x;
	pthread_t th;
	uint8_t *b = malloc(BIG);
	size_t got = 0, bad = 0;

	REQUIRE(b);
	make_pair(&c, &s, 16384);	/* 16 KiB buffers: the 8 MiB write waits 500 times */
	x = (struct xfer){ .fd = c, .len = BIG };
	pthread_create(&th, NULL, big_send, &x);
	while (got < BIG) {
		/* Odd sizes: reads straddle the ring's end. */
		ssize_t n = rrecv(s, b + got, BIG - got < 7777 ? BIG - got : 7777, 0);

		if (n <= 0) {
			SR_FAIL("rrecv after %zu bytes: %zd (%s)", got, n, strerror(errno));
			break;
		}
		got += (size_t)n;
	}
	pthread_join(th, NULL);
	CHECK_EQ(x.ret, BIG);
	for (size_t i = 0; i < got; i++)
		bad += b[i] != pattern(i);
	CHECK_EQ(bad, 0);
	CHECK_EQ(rclose(c), 0);
	CHECK_EQ(rclose(s), 0);
	free(b);
}

/* ---- shutdown and close ------------------------------------------------------------------------------ */
static void test_half_close(void)
{
	char buf[16];
	int c, s;

	make_pair(&c, &s, 0);
	CHECK_EQ(rsend(c, "request", 7, 0), 7);
	CHECK_EQ(rshutdown(c, SHUT_WR), 0);
	errno = 0;
	CHECK_EQ(rsend(c, "more", 4, 0), -1);	/* shut for writing */
	CHECK_EQ(errno, EPIPE);
	CHECK_EQ(rrecv(s, buf, sizeof(buf), MSG_WAITALL), 7);	/* the data, then EOF */
	CHECK(!memcmp(buf, "request", 7));
	CHECK_EQ(rrecv(s, buf, sizeof(buf), 0), 0);
	CHECK_EQ(rrecv(s, buf, sizeof(buf), 0), 0);	/* EOF stays */

	struct pollfd p = { .fd = s, .events = POLLIN };

	CHECK_EQ(rpoll(&p, 1, 1000), 1);	/* EOF is readable */
	CHECK(p.revents & POLLIN);
	/* The other way still works. */
	CHECK_EQ(rsend(s, "reply", 5, 0), 5);
	CHECK_EQ(rrecv(c, buf, 5, MSG_WAITALL), 5);
	CHECK(!memcmp(buf, "reply", 5));
	CHECK_EQ(rclose(s), 0);
	CHECK_EQ(rrecv(c, buf, sizeof(buf), 0), 0);	/* and now EOF this way too */
	CHECK_EQ(rclose(c), 0);
}

static void *send_then_close(void *arg)
{
	struct xfer *x = arg;

	big_send(x);
	CHECK_EQ(rclose(x->fd), 0);	/* lingers until what was sent is delivered */
	return NULL;
}

static void test_close_eof(void)
{
	static uint8_t b[200000];
	struct xfer x;
	pthread_t th;
	size_t got = 0;
	int c, s;
	ssize_t n;

	/* 200 KB through a 64 KiB ring, the writer closing right after its last rsend: the
	 * reader still gets every byte, then EOF. */
	make_pair(&c, &s, 65536);
	x = (struct xfer){ .fd = c, .len = sizeof(b) };
	pthread_create(&th, NULL, send_then_close, &x);
	while (got < sizeof(b) && (n = rrecv(s, b + got, sizeof(b) - got, 0)) > 0)
		got += (size_t)n;
	CHECK_EQ(got, sizeof(b));
	CHECK_EQ(rrecv(s, b, sizeof(b), 0), 0);	/* EOF, after every byte */
	pthread_join(th, NULL);
	CHECK_EQ(x.ret, (ssize_t)sizeof(b));
	for (size_t i = 0; i < got; i++)
		if (b[i] != pattern(i)) {
			SR_FAIL("byte %zu: %u != %u", i, b[i], pattern(i));
			break;
		}
	/* The peer is gone: sending fails -- as with TCP, not necessarily the first send after
	 * the close, but once the disconnection is seen (at the latest when the send queue
	 * needs its completions). */
	errno = 0;
	n = 0;
	for (int i = 0; i < 5000 && n >= 0; i++) {
		n = rsend(s, "x", 1, 0);
		if (n >= 0)
			usleep(1000);
	}
	CHECK_EQ(n, -1);
	CHECK(errno == EPIPE || errno == ECONNRESET);
	CHECK_EQ(rclose(s), 0);
}

/* ---- a peer that dies mid-stream ---------------------------------------------------------------- */
enum { CHILD_SEND, CHILD_SEND_SOME, CHILD_READ_DIE, CHILD_READ_STOP };
#define SOME_LEN (512u << 10)	/* fits in the default 1 MiB ring */

/* The child: connects to port; CHILD_SEND streams until killed; the others take 64 KiB, then
 * die (SIGKILL: no rclose, no SHUTDOWN) or stop (SIGSTOP: its soft NIC stops acknowledging). */
static void child_main(uint16_t port, int mode)
{
	static uint8_t b[65536];
	struct sockaddr_in a = loopback(port);
	int fd;

	alarm(60);
	fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || rconnect(fd, (struct sockaddr *)&a, sizeof(a)))
		_exit(2);
	if (mode == CHILD_SEND_SOME) {
		static uint8_t some[SOME_LEN];

		for (size_t i = 0; i < sizeof(some); i++)
			some[i] = pattern(i);
		if (rsend(fd, some, sizeof(some), 0) != (ssize_t)sizeof(some))
			_exit(3);
		for (;;)
			pause();
	}
	if (mode == CHILD_SEND) {
		memset(b, 0x5a, sizeof(b));
		for (;;)
			if (rsend(fd, b, sizeof(b), 0) < 0)
				_exit(3);
	}
	if (rrecv(fd, b, sizeof(b), MSG_WAITALL) != (ssize_t)sizeof(b))
		_exit(4);
	usleep(200000);
	raise(mode == CHILD_READ_DIE ? SIGKILL : SIGSTOP);
	for (;;)
		pause();
}

static int abort_pair(int mode, pid_t *pid)
{
	struct timeval tv = { .tv_sec = 30 };
	uint16_t port;
	int l = listener(&port, 0), s;

	*pid = fork();
	REQUIRE(*pid >= 0);
	if (!*pid)
		child_main(port, mode);
	s = raccept(l, NULL, NULL);
	REQUIRE(s >= 0);
	CHECK_EQ(rclose(l), 0);
	/* Bounded: a missed disconnection shows as EAGAIN, not a hang. */
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	return s;
}

static void reap(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	CHECK_EQ(waitpid(pid, &st, 0), pid);
}

static void test_peer_killed(void)
{
	static uint8_t b[1 << 20];
	size_t got = 0, after = 0;
	ssize_t n;
	pid_t pid;
	int s, st;

	/* The writer is killed after 1 MiB: the reader takes what arrived, then ECONNRESET --
	 * an EOF here would pass a short stream off as complete. */
	s = abort_pair(CHILD_SEND, &pid);
	while (got < sizeof(b) && (n = rrecv(s, b, sizeof(b) - got, 0)) > 0)
		got += (size_t)n;
	CHECK_EQ(got, sizeof(b));
	CHECK_EQ(kill(pid, SIGKILL), 0);
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	errno = 0;
	while ((n = rrecv(s, b, sizeof(b), 0)) > 0)
		after += (size_t)n;
	CHECK_EQ(n, -1);
	CHECK_EQ(errno, ECONNRESET);
	fprintf(stderr, "killed writer: %zu bytes after the kill, then %s\n", after, strerror(errno));
	errno = 0;
	CHECK_EQ(rrecv(s, b, sizeof(b), 0), -1);	/* and it stays an error */
	CHECK_EQ(errno, ECONNRESET);
	CHECK_EQ(rclose(s), 0);	/* nothing of ours was lost */

	/* Data that landed before the writer died is all read, then the error. */
	s = abort_pair(CHILD_SEND_SOME, &pid);
	/* A peek takes what is there; rpoll makes progress (more of it lands meanwhile). */
	for (int i = 0; i < 2000 && (n = rrecv(s, b, SOME_LEN, MSG_PEEK)) < (ssize_t)SOME_LEN; i++) {
		struct pollfd p = { .fd = s, .events = POLLIN };

		usleep(10000);
		rpoll(&p, 1, 0);
	}
	CHECK_EQ(n, (ssize_t)SOME_LEN);	/* all of it in our ring, not yet read */
	reap(pid);
	got = 0;
	errno = 0;
	while ((n = rrecv(s, b + got, sizeof(b) - got, 0)) > 0)
		got += (size_t)n;
	CHECK_EQ(got, (size_t)SOME_LEN);
	CHECK_EQ(n, -1);
	CHECK_EQ(errno, ECONNRESET);
	for (size_t i = 0; i < got; i++)
		if (b[i] != pattern(i)) {
			SR_FAIL("byte %zu: %u != %u", i, b[i], pattern(i));
			break;
		}
	CHECK_EQ(rclose(s), 0);

	/* The reader dies: the writer's rsend fails with ECONNRESET (rdma-core's errno). */
	s = abort_pair(CHILD_READ_DIE, &pid);
	errno = 0;
	while ((n = rsend(s, b, 65536, 0)) > 0)
		;
	CHECK_EQ(n, -1);
	CHECK_EQ(errno, ECONNRESET);
	rclose(s);	/* its data may or may not have been acknowledged before the death */
	reap(pid);

	/* The reader stops acknowledging: what is written after that is never acknowledged, and
	 * rclose says so instead of reporting success. */
	s = abort_pair(CHILD_READ_STOP, &pid);
	CHECK_EQ(rsend(s, b, 65536, 0), 65536);
	CHECK_EQ(waitpid(pid, &st, WUNTRACED), pid);
	CHECK(WIFSTOPPED(st));
	CHECK_EQ(rsend(s, b, 65536, MSG_DONTWAIT), 65536);	/* room in the ring: posted */
	errno = 0;
	CHECK_EQ(rclose(s), -1);
	CHECK(errno == ECONNRESET || errno == ETIMEDOUT);
	fprintf(stderr, "stopped reader: rclose %s\n", strerror(errno));
	reap(pid);
}

/* ---- riomap / riowrite ------------------------------------------------------------------------------------ */
static void test_iomap(void)
{
	uint16_t port;
	int one = 1, l = listener(&port, 0), c, s, ret;
	struct sockaddr_in a = loopback(port);
	struct pollfd p;
	char *target = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char sync = 0;

	REQUIRE(target != MAP_FAILED);
	CHECK_EQ(rsetsockopt(l, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)), 0);
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK_EQ(rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)), 0);
	CHECK_EQ(rfcntl(c, F_SETFL, O_NONBLOCK), 0);
	ret = rconnect(c, (struct sockaddr *)&a, sizeof(a));
	if (ret)
		CHECK_EQ(errno, EINPROGRESS);
	s = raccept(l, NULL, NULL);
	REQUIRE(s >= 0);
	p = (struct pollfd){ .fd = c, .events = POLLOUT };
	CHECK_EQ(rpoll(&p, 1, 5000), 1);
	CHECK_EQ(rfcntl(c, F_SETFL, 0), 0);

	/* The server maps its buffer at offset 4096, then tells the client (in the stream). */
	CHECK_EQ(riomap(s, target, 8192, PROT_WRITE, 0, 4096), 4096);
	CHECK_EQ(rsend(s, &sync, 1, 0), 1);
	CHECK_EQ(rrecv(c, &sync, 1, 0), 1);
	CHECK_EQ((ssize_t)riowrite(c, "direct placement", 16, 4096 + 100, 0), 16);
	CHECK_EQ(rsend(c, &sync, 1, 0), 1);	/* ordered after the write */
	CHECK_EQ(rrecv(s, &sync, 1, 0), 1);
	CHECK(!memcmp(target + 100, "direct placement", 16));
	/* Outside every mapping. */
	errno = 0;
	CHECK_EQ((ssize_t)riowrite(c, "x", 1, 100, 0), -1);
	CHECK_EQ(errno, EINVAL);
	/* A second remote mapping exceeds the peer's RDMA_IOMAPSIZE of 1. */
	errno = 0;
	CHECK_EQ(riomap(s, target, 4096, PROT_WRITE, 0, -1), -1);
	CHECK_EQ(errno, ENOMEM);
	CHECK_EQ(riounmap(s, target, 8192), 0);
	CHECK_EQ(riounmap(s, target, 8192), -1);
	CHECK_EQ(rclose(c), 0);
	CHECK_EQ(rclose(s), 0);
	CHECK_EQ(rclose(l), 0);
	munmap(target, 8192);
}

/* ---- options ---------------------------------------------------------------------------------------------- */
static void test_options(void)
{
	int s = rsocket(AF_INET, SOCK_STREAM, 0), v = 0;
	socklen_t len = sizeof(v);
	struct linger lg = { 1, 5 };

	REQUIRE(s >= 0);
	v = 1;
	CHECK_EQ(rsetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)), 0);
	CHECK_EQ(rgetsockopt(s, IPPROTO_TCP, TCP_NODELAY, &v, &len), 0);
	CHECK_EQ(v, 1);
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)), 0);
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	v = 100000;
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v)), 0);
	len = sizeof(v);
	CHECK_EQ(rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &len), 0);
	CHECK(v >= 100000);
	v = 128;
	CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)), 0);
	CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_RQSIZE, &v, sizeof(v)), 0);
	v = 0;
	CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_INLINE, &v, sizeof(v)), 0);
	len = sizeof(v);
	CHECK_EQ(rgetsockopt(s, SOL_SOCKET, SO_TYPE, &v, &len), 0);
	CHECK_EQ(v, SOCK_STREAM);
	errno = 0;
	CHECK_EQ(rsetsockopt(s, SOL_SOCKET, SO_BROADCAST, &v, sizeof(v)), -1);
	CHECK_EQ(errno, EOPNOTSUPP);
	errno = 0;
	CHECK_EQ(rfcntl(s, F_DUPFD, 0), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(rclose(s), 0);
}

/* ---- datagrams --------------------------------------------------------------------------------------------- */
static void test_dgram(void)
{
	struct sockaddr_in a = loopback(0), from, sa;
	socklen_t len = sizeof(sa), flen = sizeof(from);
	int s = rsocket(AF_INET, SOCK_DGRAM, 0), c = rsocket(AF_INET, SOCK_DGRAM, 0);
	static char big[70000];
	char buf[2048];

	REQUIRE(s >= 0 && c >= 0);
	REQUIRE(rbind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
	REQUIRE(rgetsockname(s, (struct sockaddr *)&sa, &len) == 0);
	REQUIRE(sa.sin_port != 0);
	/* Resolution is answered in the background: both sockets belong to this thread. */
	CHECK_EQ(rsendto(c, "ping", 4, 0, (struct sockaddr *)&sa, sizeof(sa)), 4);
	CHECK_EQ(rrecvfrom(s, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen), 4);
	CHECK(!memcmp(buf, "ping", 4));
	CHECK_EQ(from.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	CHECK(from.sin_port != 0);
	CHECK_EQ(rsendto(s, "pong!", 5, 0, (struct sockaddr *)&from, flen), 5);
	CHECK_EQ(rrecv(c, buf, sizeof(buf), 0), 5);
	CHECK(!memcmp(buf, "pong!", 5));
	errno = 0;
	CHECK_EQ(rrecv(c, buf, sizeof(buf), MSG_DONTWAIT), -1);
	CHECK_EQ(errno, EAGAIN);
	errno = 0;
	CHECK_EQ(rsendto(c, big, sizeof(big), 0, (struct sockaddr *)&sa, sizeof(sa)), -1);
	CHECK_EQ(errno, EMSGSIZE);
	/* Connected: rsend without an address; a short read truncates the datagram. */
	CHECK_EQ(rconnect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	CHECK_EQ(rsend(c, "0123456789", 10, 0), 10);
	CHECK_EQ(rrecv(s, buf, 4, 0), 4);
	CHECK(!memcmp(buf, "0123", 4));
	CHECK_EQ(rclose(c), 0);
	CHECK_EQ(rclose(s), 0);
}

int main(void)
{
	sr_test_timeout(240);
	test_numbers();
	test_refused();
	test_options();
	test_basics();
	test_poll();
	test_half_close();
	test_large();
	test_close_eof();
	test_peer_killed();
	test_iomap();
	test_dgram();
	return sr_test_done("test_rsocket");
}
