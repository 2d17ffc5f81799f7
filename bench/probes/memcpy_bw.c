/*
 * memcpy_bw: the same-host physical limit of any copy-based transport. Copies a source region
 * far larger than the last-level cache into a destination of the same size, CHUNK bytes per
 * memcpy, front to back, over and over for the given time; both regions are touched first.
 *
 *   memcpy_bw [-b CHUNK] [-m REGION_MIB] [-t SECONDS]
 *
 * Prints one line: chunk MiB_per_s (bytes copied / elapsed, 1 MiB = 2^20 bytes, like perftest
 * and ucx_perftest).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	size_t chunk = 1 << 20, region = 256;
	double secs = 1;
	int opt;

	while ((opt = getopt(argc, argv, "b:m:t:")) != -1) {
		switch (opt) {
		case 'b': chunk = strtoull(optarg, NULL, 0); break;
		case 'm': region = strtoull(optarg, NULL, 0); break;
		case 't': secs = atof(optarg); break;
		default:
			fprintf(stderr, "usage: memcpy_bw [-b CHUNK] [-m REGION_MIB] [-t SECONDS]\n");
			return 2;
		}
	}
	region <<= 20;
	if (chunk < 1 || chunk > region) {
		fprintf(stderr, "memcpy_bw: 1 <= chunk <= region\n");
		return 2;
	}
	region -= region % chunk;
	char *src = aligned_alloc(4096, region), *dst = aligned_alloc(4096, region);
	if (!src || !dst) {
		perror("memcpy_bw: alloc");
		return 1;
	}
	memset(src, 1, region);
	memset(dst, 2, region);

	size_t bytes = 0;
	double t0 = now_s(), t;
	do {
		for (size_t off = 0; off < region; off += chunk)
			memcpy(dst + off, src + off, chunk);
		bytes += region;
		/* Keep the compiler from dropping the copies. */
		__asm__ volatile("" : : "r"(dst) : "memory");
		t = now_s();
	} while (t - t0 < secs);
	printf("%zu %.1f\n", chunk, bytes / (t - t0) / (1 << 20));
	return 0;
}
