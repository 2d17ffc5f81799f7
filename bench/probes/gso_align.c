/*
 * gso_align: what one UDP GSO sendmsg costs against where its source buffer starts modulo
 * 4096. The kernel copies a GSO send into page fragments (the thread's task_frag, starting at
 * offset 0 of a page when the last send's skbs are already freed, as here: the receiving socket
 * on lo is drained after each send), so the source offset is also the distance, modulo 4096,
 * between the copy's source and its destination.
 *
 *   gso_align [SENDS_PER_ROUND]
 *
 * Sends 57,456 bytes (7 segments of 8,208: what softrdma's GSO batches are between two
 * namespaces with MTU 9000) to a socket of its own on 127.0.0.1, for each source offset, in 15
 * interleaved rounds; prints per offset the best round's microseconds per send. A machine
 * whose copy (rep movsb) slows down when the destination is a little ahead of the source
 * modulo 4096 shows it at offsets just below 4096.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	static const int offs[] = { 0, 8, 32, 64, 2048, 4000, 4032, 4048, 4064,
				    4072, 4080, 4088, 4095 };
	enum { NOFF = sizeof(offs) / sizeof(offs[0]), LEN = 57456, ROUNDS = 15 };
	static uint8_t rbuf[65536];
	struct sockaddr_in a = { .sin_family = AF_INET };
	int reps = argc > 1 ? atoi(argv[1]) : 200, big = 1 << 20;
	int seg = 8208;
	double best[NOFF];
	socklen_t al = sizeof(a);
	uint8_t *mem;
	int fd, rfd;

	fd = socket(AF_INET, SOCK_DGRAM, 0);
	rfd = socket(AF_INET, SOCK_DGRAM, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || rfd < 0 || bind(rfd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(rfd, (struct sockaddr *)&a, &al)) {
		perror("gso_align: socket");
		return 1;
	}
	(void)setsockopt(rfd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof(seg))) {
		perror("gso_align: UDP_SEGMENT");
		return 1;
	}
	mem = aligned_alloc(4096, 2 * 65536);
	if (!mem || reps < 1)
		return 1;
	memset(mem, 1, 2 * 65536);
	for (int j = 0; j < NOFF; j++)
		best[j] = 1e9;
	for (int k = 0; k < ROUNDS; k++) {
		for (int j = 0; j < NOFF; j++) {
			double t0 = now_s(), t;

			for (int i = 0; i < reps; i++) {
				if (sendto(fd, mem + offs[j], LEN, 0, (struct sockaddr *)&a,
					   sizeof(a)) < 0) {
					perror("gso_align: sendto");
					return 1;
				}
				while (recv(rfd, rbuf, sizeof(rbuf), MSG_DONTWAIT) > 0)
					;
			}
			t = (now_s() - t0) / reps;
			if (t < best[j])
				best[j] = t;
		}
	}
	for (int j = 0; j < NOFF; j++)
		printf("offset %4d  %6.2f us/send\n", offs[j], best[j] * 1e6);
	return 0;
}
