/*
 * udp_pingpong: the floor under any UDP-based transport's latency. One datagram in flight,
 * the server echoes it back; the client reports half the round trip.
 *
 *   udp_pingpong -S [-m spin|block] [-p PORT] [-B ADDR] [-c] [-2]   server (echoes, exits on a
 *                                                                    zero-length datagram)
 *   udp_pingpong -C HOST [-m spin|block] [-p PORT] [-n ITERS] [-w WARMUP] [-l SIZE] [-u] [-2]
 *
 * By default the client's socket is connected and the server's is not (it answers with sendto).
 * -u: the client does not connect either (sendto each time, as softrdma's one socket per device
 * does); -c: the server connects to its client after the first datagram (as a socket per peer
 * would). A connected socket keeps its route (no lookup per send) and, between namespaces, its
 * received packets skip the input route lookup (UDP early demux only finds connected sockets).
 *
 * -2 (on both sides): softrdma's wire pattern of a ping-pong. Each message is one
 * GSO send (UDP_SEGMENT) of two segments, SIZE bytes and then min(SIZE, 20) (an RDMA WRITE and
 * the 20-byte ACK it carries along, as softrdma's deferred ACK leaves in the answer's send), to
 * a socket with UDP_GRO that receives with recvmsg and its control message (the coalesced
 * datagram and its segment size). The server echoes a coalesced datagram as the same GSO send.
 * SIZE 40 is the wire size of an 8-byte WRITE (BTH, RETH, payload, ICRC).
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
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

static int spin = 1;
static int two;		/* -2: GSO sends of two segments, UDP_GRO receives */
static int gro_seg;	/* segment size of the last datagram received (0: not coalesced) */

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
		ssize_t n;

		*flen = sizeof(*from);
		if (two) {
			union {
				char b[CMSG_SPACE(sizeof(int))];
				struct cmsghdr align;
			} ctl;
			struct iovec v = { buf, len };
			struct msghdr m = { .msg_name = from, .msg_namelen = *flen, .msg_iov = &v,
					    .msg_iovlen = 1, .msg_control = ctl.b,
					    .msg_controllen = sizeof(ctl.b) };

			n = recvmsg(fd, &m, spin ? MSG_DONTWAIT : 0);
			*flen = m.msg_namelen;
			gro_seg = 0;
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); n >= 0 && c; c = CMSG_NXTHDR(&m, c))
				if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
					memcpy(&gro_seg, CMSG_DATA(c), sizeof(gro_seg));
		} else {
			n = recvfrom(fd, buf, len, spin ? MSG_DONTWAIT : 0, (struct sockaddr *)from,
				     flen);
		}
		if (n >= 0)
			return n;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
		if (now_us() > deadline)
			return -1;
	}
}

/* Sends len bytes to `to` (NULL: the connected peer); seg > 0: as a GSO send of seg-byte
 * segments. */
static ssize_t snd_seg(int fd, const char *buf, size_t len, const struct sockaddr *to,
		       socklen_t tolen, int seg)
{
	union {
		char b[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl;
	struct iovec v = { (void *)buf, len };
	struct msghdr m = { .msg_name = (void *)to, .msg_namelen = to ? tolen : 0, .msg_iov = &v,
			    .msg_iovlen = 1 };

	if (seg > 0 && (size_t)seg < len) {
		uint16_t s = (uint16_t)seg;
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.b;
		m.msg_controllen = sizeof(ctl.b);
		c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof(s));
		memcpy(CMSG_DATA(c), &s, sizeof(s));
	}
	return sendmsg(fd, &m, 0);
}

/* send() on a connected socket, sendto() to `to` on an unconnected one; with -2 the message
 * and a second segment of min(len, 20) bytes in one GSO send (returns len when both left). */
static ssize_t snd(int fd, const char *buf, size_t len, const struct addrinfo *to)
{
	if (two && len) {
		size_t all = len + (len < 20 ? len : 20);
		ssize_t n = snd_seg(fd, buf, all, to ? to->ai_addr : NULL,
				    to ? to->ai_addrlen : 0, (int)len);

		return n == (ssize_t)all ? (ssize_t)len : -1;
	}
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

	while ((opt = getopt(argc, argv, "SC:m:p:B:n:w:l:uc2")) != -1) {
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
		case '2': two = 1; break;
		default:
			fprintf(stderr, "usage: udp_pingpong -S|-C HOST [-m spin|block] [-p PORT] "
					"[-B ADDR] [-n ITERS] [-w WARMUP] [-l SIZE] [-u] [-c] [-2]\n");
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
	if (two) {
		int one = 1;

		if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one))) {
			perror("UDP_GRO");
			return 1;
		}
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
			if ((two ? snd_seg(fd, buf, (size_t)n,
					   srv_conn ? NULL : (struct sockaddr *)&peer, plen, gro_seg)
				 : srv_conn ? send(fd, buf, n, 0)
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
	/* What comes back: the message, with -2 coalesced with its second segment. */
	ssize_t want = two ? size + (size < 20 ? size : 20) : size;

	/* The server may not be bound yet: knock until it answers (at most 10 s). */
	for (int i = 0;; i++) {
		if (snd(fd, buf, size, conn ? NULL : ai) != size && errno != ECONNREFUSED) {
			perror("send");
			return 1;
		}
		if (rx(fd, buf, 65536, &peer, &plen, 0.05) == want)
			break;
		if (i == 200) {
			fprintf(stderr, "udp_pingpong: no answer from %s:%s\n", host, port);
			return 1;
		}
		usleep(50000);
	}
	/* An answer to an earlier knock may still come (a server slow to start): read and drop
	 * whatever arrives in the next 50 ms, or the timed loop would have two messages in
	 * flight and measure half the round trip. */
	usleep(50000);
	while (recv(fd, buf, 65536, MSG_DONTWAIT) >= 0)
		;
	double *t = malloc(sizeof(double) * iters);
	for (int i = -warmup; i < iters; i++) {
		double t0 = now_us();
		if (snd(fd, buf, size, conn ? NULL : ai) != size) {
			perror("send");
			return 1;
		}
		if (rx(fd, buf, 65536, &peer, &plen, 2) != want) {
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
