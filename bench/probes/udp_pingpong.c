/*
 * udp_pingpong: the floor under any UDP-based transport's latency. One datagram in flight,
 * the server echoes it back; the client reports half the round trip.
 *
 *   udp_pingpong -S [-m spin|block] [-p PORT] [-B ADDR] [-c]        server (echoes, exits on a
 *                                                                    zero-length datagram)
 *   udp_pingpong -C HOST [-m spin|block] [-p PORT] [-n ITERS] [-w WARMUP] [-l SIZE] [-u]
 *
 * By default the client's socket is connected and the server's is not (it answers with sendto).
 * -u: the client does not connect either (sendto each time, as softrdma's one socket per device
 * does); -c: the server connects to its client after the first datagram (as a socket per peer
 * would). A connected socket keeps its route (no lookup per send) and, between namespaces, its
 * received packets skip the input route lookup (UDP early demux only finds connected sockets).
 *
 * spin:  both sides poll the socket with MSG_DONTWAIT in a loop (a busy-polling stack's floor).
 * block: both sides sleep in recv() (an interrupt-driven stack's floor).
 * The client prints one line: size iters mean_us median_us min_us p99_us (half round trip).
 * Every wait is bounded: a reply missing for 2 s (client) or a silent peer for 30 s (server)
 * ends the program with status 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int spin = 1;

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Receive one datagram within limit_s seconds; returns its length, -1 on timeout or error. */
static ssize_t rx(int fd, char *buf, size_t len, struct sockaddr_storage *from, socklen_t *flen,
		  double limit_s)
{
	double deadline = now_us() + limit_s * 1e6;

	for (;;) {
		*flen = sizeof(*from);
		ssize_t n = recvfrom(fd, buf, len, spin ? MSG_DONTWAIT : 0, (struct sockaddr *)from,
				     flen);
		if (n >= 0)
			return n;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		if (now_us() > deadline)
			return -1;
	}
}

/* send() on a connected socket, sendto() to `to` on an unconnected one. */
static ssize_t snd(int fd, const char *buf, size_t len, const struct addrinfo *to)
{
	return to ? sendto(fd, buf, len, 0, to->ai_addr, to->ai_addrlen) : send(fd, buf, len, 0);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *host = NULL, *bind_addr = NULL, *port = "18515";
	int server = 0, iters = 100000, warmup = 1000, size = 8, opt, conn = 1, srv_conn = 0;

	while ((opt = getopt(argc, argv, "SC:m:p:B:n:w:l:uc")) != -1) {
		switch (opt) {
		case 'S': server = 1; break;
		case 'C': host = optarg; break;
		case 'm': spin = strcmp(optarg, "block") != 0; break;
		case 'p': port = optarg; break;
		case 'B': bind_addr = optarg; break;
		case 'n': iters = atoi(optarg); break;
		case 'w': warmup = atoi(optarg); break;
		case 'l': size = atoi(optarg); break;
		case 'u': conn = 0; break;
		case 'c': srv_conn = 1; break;
		default:
			fprintf(stderr, "usage: udp_pingpong -S|-C HOST [-m spin|block] [-p PORT] "
					"[-B ADDR] [-n ITERS] [-w WARMUP] [-l SIZE] [-u] [-c]\n");
			return 2;
		}
	}
	if (server == !!host || size < 1 || size > 65000 || iters < 1) {
		fprintf(stderr, "udp_pingpong: exactly one of -S, -C HOST; 1 <= size <= 65000\n");
		return 2;
	}

	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM,
				  .ai_flags = server ? AI_PASSIVE : 0 }, *ai;
	int rc = getaddrinfo(server ? bind_addr : host, port, &hints, &ai);
	if (rc) {
		fprintf(stderr, "udp_pingpong: %s\n", gai_strerror(rc));
		return 1;
	}
	int fd = socket(ai->ai_family, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	if (!spin) {
		struct timeval tv = { .tv_sec = server ? 30 : 2 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	char *buf = calloc(1, 65536);
	struct sockaddr_storage peer;
	socklen_t plen;

	if (server) {
		if (bind(fd, ai->ai_addr, ai->ai_addrlen)) {
			perror("bind");
			return 1;
		}
		for (;;) {
			ssize_t n = rx(fd, buf, 65536, &peer, &plen, 30);
			if (n < 0) {
				fprintf(stderr, "udp_pingpong server: no datagram for 30 s\n");
				return 1;
			}
			if (n == 0)
				return 0;
			if (srv_conn == 1) {
				if (connect(fd, (struct sockaddr *)&peer, plen)) {
					perror("connect");
					return 1;
				}
				srv_conn = 2;
			}
			if ((srv_conn ? send(fd, buf, n, 0)
				      : sendto(fd, buf, n, 0, (struct sockaddr *)&peer, plen)) != n) {
				perror("sendto");
				return 1;
			}
		}
	}

	if (conn && connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		perror("connect");
		return 1;
	}
	/* The server may not be bound yet: knock until it answers (at most 10 s). */
	for (int i = 0;; i++) {
		if (snd(fd, buf, size, conn ? NULL : ai) != size && errno != ECONNREFUSED) {
			perror("send");
			return 1;
		}
		if (rx(fd, buf, 65536, &peer, &plen, 0.05) == size)
			break;
		if (i == 200) {
			fprintf(stderr, "udp_pingpong: no answer from %s:%s\n", host, port);
			return 1;
		}
		usleep(50000);
	}
	double *t = malloc(sizeof(double) * iters);
	for (int i = -warmup; i < iters; i++) {
		double t0 = now_us();
		if (snd(fd, buf, size, conn ? NULL : ai) != size) {
			perror("send");
			return 1;
		}
		if (rx(fd, buf, 65536, &peer, &plen, 2) != size) {
			fprintf(stderr, "udp_pingpong: reply %d lost or late (2 s)\n", i);
			return 1;
		}
		if (i >= 0)
			t[i] = (now_us() - t0) / 2;
	}
	snd(fd, buf, 0, conn ? NULL : ai);
	double sum = 0;
	for (int i = 0; i < iters; i++)
		sum += t[i];
	qsort(t, iters, sizeof(double), cmp_double);
	printf("%d %d %.3f %.3f %.3f %.3f\n", size, iters, sum / iters, t[iters / 2], t[0],
	       t[(int)(iters * 0.99)]);
	return 0;
}
