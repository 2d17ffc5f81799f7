/* SPDX-License-Identifier: MIT */
/*
 * softrdma live counter files: the public, stable layout.
 *
 * Every open soft NIC publishes its counters in a small file
 *
 *	<stats_dir>/softrdma-<uid>/<pid>-<devname>.stat
 *
 * (stats_dir: parameter SOFTRDMA_STATS_DIR, default /dev/shm). The writer maps it MAP_SHARED
 * and bumps the counters in place, so any reader (`softrdma stat`, a monitoring agent) sees
 * live values without asking the process anything. The name is only a hint: everything a
 * reader needs is in the file itself, and a second device of the same name in one process gets
 * a suffixed file name ("<pid>-<devname>.<n>.stat").
 *
 * Layout (native byte order and alignment: the file never leaves the host):
 *
 *	offset 0              struct softrdma_stat_file_hdr (hdr_size bytes)
 *	offset names_off      num_counters names, name_len bytes each, NUL-padded
 *	offset values_off     num_counters uint64_t values (8-aligned), same order as the names
 *
 * A reader must
 *  - check magic and version_major (reject anything else: a new major is a new format);
 *  - accept any version_minor: a newer minor only appends header fields (hdr_size grows) and
 *    never moves or changes the meaning of an existing one;
 *  - take every offset and count from the header and bounds-check it against the file size;
 *  - find a counter by its name, never by its position (the writer's list may grow or be
 *    reordered between releases);
 *  - read each value with a single aligned 64-bit load (the writer updates them atomically).
 *
 * The file appears complete: the writer fills it under a temporary name (or as an O_TMPFILE)
 * and links it into place. The writer holds a shared flock(2) on it for as long as it lives,
 * so a reader that can take LOCK_EX|LOCK_NB knows the writer is gone (a crashed process); that
 * is robust against pid reuse, which a kill(pid, 0) test is not.
 *
 * Compatibility promise for version 1: fields are only ever added at the end of the header,
 * with a minor bump; nothing below is renamed, resized or moved.
 */
#ifndef SOFTRDMA_STATS_H
#define SOFTRDMA_STATS_H

#include <stdint.h>

#define SOFTRDMA_STAT_MAGIC "SRDMASTA"	/* 8 bytes, no terminating NUL in the file */
#define SOFTRDMA_STAT_MAGIC_LEN 8
#define SOFTRDMA_STAT_VERSION_MAJOR 1
#define SOFTRDMA_STAT_VERSION_MINOR 0

#define SOFTRDMA_STAT_NAME_LEN 32	/* name slot written by this version (name_len) */
#define SOFTRDMA_STAT_DEVNAME_LEN 64	/* as IBV_SYSFS_NAME_MAX */
#define SOFTRDMA_STAT_IDENT_LEN 128	/* "a.b.c.d:port" or "[v6%if]:port" */

/* File name pieces, for readers that scan the directory. */
#define SOFTRDMA_STAT_SUBDIR_PREFIX "softrdma-"	/* followed by the decimal uid */
#define SOFTRDMA_STAT_SUFFIX ".stat"

struct softrdma_stat_file_hdr {
	char magic[SOFTRDMA_STAT_MAGIC_LEN];	/*   0: SOFTRDMA_STAT_MAGIC */
	uint16_t version_major;			/*   8: 1 */
	uint16_t version_minor;			/*  10: 0 (readers accept any) */
	uint32_t hdr_size;			/*  12: bytes of header written, >= 256 */
	uint64_t file_size;			/*  16: total bytes of the file */
	int32_t pid;				/*  24: writer's process id (in its namespace) */
	uint32_t num_counters;			/*  28: number of names and values */
	uint64_t start_time_ns;			/*  32: CLOCK_REALTIME at open, ns since epoch */
	uint32_t name_len;			/*  40: bytes per name slot */
	uint32_t names_off;			/*  44: offset of the name table */
	uint32_t values_off;			/*  48: offset of the values, multiple of 8 */
	uint32_t reserved0;			/*  52: 0 */
	char devname[SOFTRDMA_STAT_DEVNAME_LEN];/*  56: device name, NUL-terminated */
	char ident[SOFTRDMA_STAT_IDENT_LEN];	/* 120: where the device listens, NUL-terminated */
	uint64_t reserved1;			/* 248: 0 */
	/* 256: version 1.0 ends here; later minors append fields */
};

#define SOFTRDMA_STAT_HDR_V1_0_SIZE 256

#ifdef __cplusplus
static_assert(sizeof(struct softrdma_stat_file_hdr) == SOFTRDMA_STAT_HDR_V1_0_SIZE,
	      "stat file header v1.0 is 256 bytes");
#else
_Static_assert(sizeof(struct softrdma_stat_file_hdr) == SOFTRDMA_STAT_HDR_V1_0_SIZE,
	       "stat file header v1.0 is 256 bytes");
#endif

#endif /* SOFTRDMA_STATS_H */
