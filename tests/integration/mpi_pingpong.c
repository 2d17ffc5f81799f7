/* SPDX-License-Identifier: MIT */
/*
 * A 2-rank MPI ping-pong with every byte checked, for test_mpi.sh (compiled there with Open
 * MPI's and MPICH's mpicc: it is not part of the CMake build, which needs no MPI).
 *
 * For each size (8 bytes to 2 MiB, times 4): ITERS round trips. Rank 0 fills the buffer with a
 * pattern of (size, iteration, offset) and sends it; rank 1 checks it, and sends back the
 * pattern of the next iteration; rank 0 checks that. Prints "SIZE ITERS USEC_PER_HALF_RTT" per
 * size and "PASS"; exits 1 at the first wrong byte, naming it.
 *
 *   mpi_pingpong [ITERS [MAX [FACTOR [fast]]]]
 *
 * ITERS: default 100; sizes of 1 MiB and up run ITERS / 10 + 1 times. Sizes go from 8 bytes
 * to MAX (default 4 MiB) by FACTOR (default 4). "fast" (bench/mpi.sh) leaves the pattern out
 * of the timed loop, whose fill and check of every byte would weigh on large messages as much
 * as the transfer: the buffers are checked once per size instead, in an exchange after the
 * timed one. It also runs 10 untimed round trips per size first (2 from 1 MiB: UCX wires up
 * its connections lazily), and rank 0 prints a fourth column, the median round trip halved:
 * on a shared machine a few descheduled round trips weigh on the mean alone.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t pattern(size_t size, int iter, size_t i)
{
	uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(size * 40503u) ^ (uint32_t)iter * 97u;

	return (uint8_t)(x ^ x >> 13 ^ x >> 24);
}

static void fill(uint8_t *b, size_t size, int iter)
{
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(size, iter, i);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int check(const uint8_t *b, size_t size, int iter, int rank)
{
	for (size_t i = 0; i < size; i++)
		if (b[i] != pattern(size, iter, i)) {
			fprintf(stderr, "rank %d: size %zu iteration %d: byte %zu is 0x%02x, wanted 0x%02x\n",
				rank, size, iter, i, b[i], pattern(size, iter, i));
			return -1;
		}
	return 0;
}

int main(int argc, char **argv)
{
	const size_t max = argc > 2 ? (size_t)strtoull(argv[2], NULL, 0) : 4u << 20;
	const size_t factor = argc > 3 ? (size_t)strtoull(argv[3], NULL, 0) : 4;
	const int fast = argc > 4 && !strcmp(argv[4], "fast");
	int rank, nranks, iters = argc > 1 ? atoi(argv[1]) : 100;
	uint8_t *buf;
	double *rtt = NULL;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2 || iters < 1 || max < 8 || factor < 2) {
		if (!rank)
			fprintf(stderr, "mpi_pingpong: needs 2 ranks, ITERS >= 1, MAX >= 8, FACTOR >= 2\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	buf = malloc(max);
	if (fast)
		rtt = malloc(sizeof(*rtt) * (size_t)iters);
	if (!buf || (fast && !rtt))
		MPI_Abort(MPI_COMM_WORLD, 2);
	for (size_t size = 8; size <= max; size *= factor) {
		int n = size >= (1u << 20) ? iters / 10 + 1 : iters, n0 = 0, bad = 0;
		double t0, t1 = 0;

		/* fast: a few untimed round trips first (UCX wires up its connections lazily) */
		for (int it = 0; fast && it < (size >= (1u << 20) ? 2 : 10); it++) {
			if (rank == 0) {
				MPI_Send(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD);
			}
		}
		MPI_Barrier(MPI_COMM_WORLD);
		t0 = MPI_Wtime();
		for (int it = 0; fast && it < n; it++) {
			if (rank == 0) {
				double ts = MPI_Wtime();

				MPI_Send(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				rtt[it] = MPI_Wtime() - ts;
			} else {
				MPI_Recv(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD);
			}
		}
		if (fast) {
			t1 = MPI_Wtime();
			n0 = n;
			n = 1;	/* then one exchange with every byte checked */
		}
		for (int it = 0; it < n && !bad; it++) {
			if (rank == 0) {
				fill(buf, size, 2 * it);
				MPI_Send(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD);
				memset(buf, 0, size);
				MPI_Recv(buf, (int)size, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				bad = check(buf, size, 2 * it + 1, rank);
			} else {
				memset(buf, 0, size);
				MPI_Recv(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				bad = check(buf, size, 2 * it, rank);
				fill(buf, size, 2 * it + 1);
				MPI_Send(buf, (int)size, MPI_BYTE, 0, it, MPI_COMM_WORLD);
			}
		}
		if (bad)
			MPI_Abort(MPI_COMM_WORLD, 1);
		if (rank == 0 && fast) {
			qsort(rtt, (size_t)n0, sizeof(*rtt), cmp_double);
			printf("%zu %d %.2f %.2f\n", size, n0, (t1 - t0) * 1e6 / n0 / 2,
			       (n0 % 2 ? rtt[n0 / 2] : (rtt[n0 / 2 - 1] + rtt[n0 / 2]) / 2) * 1e6 / 2);
		} else if (rank == 0) {
			printf("%zu %d %.2f\n", size, n, (MPI_Wtime() - t0) * 1e6 / n / 2);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		printf("PASS\n");
	free(buf);
	free(rtt);
	MPI_Finalize();
	return 0;
}
