/* SPDX-License-Identifier: MIT */
/*
 * The server's device layer: exports the files and block devices found under a search path,
 * enforces the kernel's access rules, and runs IO through io_uring. It knows RNBD requests
 * (struct rnbd_req, already parsed) but nothing of the transport: a request's answer is a
 * callback. Used by the server (rnbd-srv.c) and directly by its unit test.
 */
#ifndef RNBD_DEV_H
#define RNBD_DEV_H

#include <stdint.h>
#include <stdbool.h>

#include "rnbd-msg.h"

struct rnbd_store;	/* the search path, the open devices, the io_uring engine */
struct rnbd_handle;	/* one open of one device (by one session) */

struct rnbd_store_opts {
	const char *search_path;	/* may contain %SESSNAME% (then: prefix/SESSNAME/name) */
	unsigned queue_depth;		/* io_uring entries (default 256) */
	uint32_t max_io_bytes;		/* max_hw_sectors * 512 in OPEN_RSP (default 128 KiB) */
	bool no_direct;			/* never O_DIRECT (tests) */
	int sync_io;			/* RNBD_SYNC_IO_*: where IO runs (below) */
};

/*
 * Where a request's IO runs. io_uring hands work that cannot complete at once to its worker
 * threads, and a file system without non-blocking IO (tmpfs) has all of it handed over: a
 * thread hand-off or two per request. A device in memory (tmpfs, ramfs, a RAM disk) never
 * waits for a disk, so its IO is done at once, synchronously, on the thread that submits it
 * (the transport's event thread), which then answers without any hand-off.
 */
#define RNBD_SYNC_IO_AUTO 0	/* synchronous for devices in memory, io_uring otherwise */
#define RNBD_SYNC_IO_ALWAYS 1	/* synchronous for every device (tests; small setups) */
#define RNBD_SYNC_IO_NEVER (-1)	/* io_uring for every device */

/* 0 or -errno. */
int rnbd_store_new(const struct rnbd_store_opts *o, struct rnbd_store **out);
/* Every handle must be closed before. */
void rnbd_store_free(struct rnbd_store *st);

/*
 * Opens device `name` (as parsed: relative, no "..") for session `sessname` in `mode`.
 * Access rules, per device (same file or block device = same device, whatever the name):
 * any number of RO opens; RW only when no writer; MIGRATION when fewer than two writers.
 * Errors: -EINVAL (bad session name, not a file or block device), -EPERM (access rule),
 * -ENOENT and the other errnos of open(2). The path never leaves the search directory
 * (openat2 RESOLVE_BENEATH: no "..", no absolute symlink out of it).
 */
int rnbd_store_open(struct rnbd_store *st, const char *sessname, const char *name,
		    unsigned mode, struct rnbd_handle **out);
/* Waits for the handle's IO in flight, then drops it (and the device with its last open). */
void rnbd_handle_close(struct rnbd_handle *h);
/* The OPEN_RSP limits of the handle's device (device_id left 0). */
void rnbd_handle_attrs(const struct rnbd_handle *h, struct rnbd_dev_attrs *a);
unsigned rnbd_handle_mode(const struct rnbd_handle *h);
uint64_t rnbd_handle_nsectors(const struct rnbd_handle *h);
const char *rnbd_handle_path(const struct rnbd_handle *h);

typedef void (*rnbd_done_fn)(void *priv, int err);
/*
 * Runs IO request r (parsed by rnbd_parse; its range is checked here against the device) with
 * data (READ: bi_size bytes to fill; WRITE: bi_size bytes to write; else NULL). done(priv, err)
 * is called exactly once: from the engine's thread, or before this returns when the IO
 * completed at once (synchronous IO, or io_uring completed it in the submission) or the
 * request is refused (err < 0: -EINVAL out of range, -EPERM write through an RO open, -EOPNOTSUPP
 * SECURE_ERASE). A refused request touches nothing.
 */
void rnbd_handle_submit(struct rnbd_handle *h, const struct rnbd_req *r, void *data,
			rnbd_done_fn done, void *priv);

/* Counters of a device (all opens together). */
struct rnbd_dev_stats {
	uint64_t reads, writes, flushes, discards, write_zeroes, bytes_read, bytes_written;
	uint64_t errors, refused, direct_ios, buffered_ios;
	uint64_t sync_ios;	/* READ/WRITE done synchronously on the submitting thread */
};
void rnbd_handle_stats(const struct rnbd_handle *h, struct rnbd_dev_stats *s);
/* Calls fn for every open device of the store (path, writers, opens, counters). */
void rnbd_store_foreach(struct rnbd_store *st,
			void (*fn)(void *arg, const char *path, unsigned opens, unsigned writers,
				   const struct rnbd_dev_stats *s), void *arg);

#endif
