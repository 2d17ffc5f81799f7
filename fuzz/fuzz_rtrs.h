/* SPDX-License-Identifier: MIT */
/* What fuzz_rtrs and fuzz_rnbd inputs mean, shared with the seed maker (mkseeds.c). */
#ifndef FUZZ_RTRS_H
#define FUZZ_RTRS_H

#include <stdint.h>

/* fuzz_rtrs: the session configurations an IO input chooses from (its byte 1). Each one valid
 * for rtrs_srv_open (fuzz_rtrs checks): chunk a power of two >= 8 KiB, max_hdr below half a
 * chunk, the payload's offset bits enough for a chunk. */
struct fuzz_rtrs_cfg {
	uint32_t qd, chunk, max_hdr;
};
static const struct fuzz_rtrs_cfg fuzz_rtrs_cfgs[] = {
	{ 512, 128 * 1024, 4096 },	/* rtrs_srv_opts_init's: rnbd-server's */
	{ 1, 8192, 0 },
	{ 2, 8192, 4095 },
	{ 3, 16384, 1024 },
	{ 1000, 8192, 100 },
	{ 4096, 8192, 4000 },
	{ 128, 1u << 20, 65536 },
	{ 64, 65536, 32767 },
};
#define FUZZ_RTRS_NCFG (sizeof(fuzz_rtrs_cfgs) / sizeof(fuzz_rtrs_cfgs[0]))

/* Both: the device sizes (in sectors) an accepted RNBD IO is checked against. */
static const uint64_t fuzz_rnbd_nsecs[] = { 0, 1, 8, 2048, 1ull << 21, (1ull << 55) - 1,
					    UINT64_MAX >> 9, UINT64_MAX };
#define FUZZ_RNBD_NNSECS (sizeof(fuzz_rnbd_nsecs) / sizeof(fuzz_rnbd_nsecs[0]))

#endif
