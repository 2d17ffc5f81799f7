/* SPDX-License-Identifier: MIT */
/*
 * The RNBD client's request logic, independent of the transport: SESS_INFO and OPEN at start,
 * IO split at the device's limits, CLOSE. The transport (RTRS, or the in-process server of
 * rnbd-local.c) is a table of functions.
 */
#ifndef RNBD_CLT_H
#define RNBD_CLT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>

#include "rnbd-msg.h"
#include "rnbd-dev.h"	/* rnbd_done_fn */

struct rnbd_xport_ops {
	/*
	 * Sends one message: dir RNBD_DIR_READ (data: datalen bytes to receive the answer into)
	 * or RNBD_DIR_WRITE (data: datalen bytes to send). Returns 0 and later calls
	 * done(priv, err) exactly once (err: the server's answer, or the transport's error), or
	 * returns -errno and never calls done.
	 */
	int (*request)(void *ctx, int dir, const void *usr, size_t usrlen, void *data,
		       size_t datalen, rnbd_done_fn done, void *priv);
	/* Largest data of one request, bytes. */
	uint32_t (*max_io)(void *ctx);
	void (*close)(void *ctx);
};

struct rnbd_clt {
	const struct rnbd_xport_ops *ops;
	void *ctx;
	uint8_t ver;			/* negotiated major version */
	bool open;
	unsigned mode;
	struct rnbd_dev_attrs a;	/* from OPEN_RSP */
	uint32_t max_io;		/* bytes: min(transport, device) */
	pthread_mutex_t rmw_lock;	/* unaligned writes: one read-modify-write at a time */
	struct {			/* counted per request (before splitting) */
		_Atomic uint64_t reads, writes, flushes, discards, write_zeroes;
		_Atomic uint64_t bytes_read, bytes_written, errors;
	} c;
};

/* Counters as "name value" lines (the plugin's stats= file). */
void rnbd_clt_stats_print(struct rnbd_clt *c, FILE *f);

/* SESS_INFO exchange; takes ownership of ctx (closed by rnbd_clt_free). 0 or -errno. */
int rnbd_clt_new(const struct rnbd_xport_ops *ops, void *ctx, struct rnbd_clt **out);
/* OPEN of `name` in `mode`: fills c->a. 0 or the server's -errno. */
int rnbd_clt_open(struct rnbd_clt *c, const char *name, unsigned mode);
/* CLOSE of the open device. */
int rnbd_clt_close(struct rnbd_clt *c);
void rnbd_clt_free(struct rnbd_clt *c);

/*
 * One block request, waited for: rw = op | RNBD_F_* flags; off and len in bytes, multiples of
 * 512 (-EINVAL otherwise); buf for READ/WRITE. Split at the limits, pieces in parallel; FUA
 * rides on every piece, PREFLUSH on the first only. 0 or the first -errno.
 */
int rnbd_clt_io(struct rnbd_clt *c, uint32_t rw, uint64_t off, uint64_t len, void *buf);

/*
 * Byte-granular requests (what NBD allows): the whole sectors go as they are; a partial sector
 * at either edge is read, merged and written back (read-modify-write, one at a time per
 * client). flags: RNBD_F_FUA or 0. pwrite with buf NULL writes zeroes. zero: WRITE_ZEROES for
 * the whole sectors, zeroes written at the edges. trim: DISCARD of the whole sectors inside the
 * range (the partial ones keep their data: discarding is advisory).
 */
int rnbd_clt_pread(struct rnbd_clt *c, void *buf, uint64_t count, uint64_t off);
int rnbd_clt_pwrite(struct rnbd_clt *c, const void *buf, uint64_t count, uint64_t off,
		    uint32_t flags);
int rnbd_clt_zero(struct rnbd_clt *c, uint64_t count, uint64_t off, uint32_t flags);
int rnbd_clt_trim(struct rnbd_clt *c, uint64_t count, uint64_t off, uint32_t flags);

/* Sends one raw message and waits (tests: hostile messages). */
int rnbd_clt_raw(struct rnbd_clt *c, int dir, const void *usr, size_t usrlen, void *data,
		 size_t datalen);

/* The in-process transport (rnbd-local.c): a server in this process exporting search_path,
 * the messages passed by function call. For tests and for trying the client without RTRS. */
int rnbd_local_new(const char *search_path, const char *sessname, const struct rnbd_xport_ops **ops,
		   void **ctx);
/* The RTRS transport (rnbd-rtrs.c, built with ulp/rtrs): one session of n paths, each
 * "DST" or "SRC@DST" with DST "HOST[:PORT]" (port 1234 by default, the kernel's). */
struct rnbd_rtrs_opts {
	const char *stats_dir;		/* RTRS's per-path counters; NULL: none */
	unsigned hb_interval_ms, hb_missed_max, reconnect_delay_ms;	/* 0: RTRS's defaults */
};
int rnbd_rtrs_new(const char *sessname, const char *const *paths, size_t n,
		  const struct rnbd_rtrs_opts *ro, const struct rnbd_xport_ops **ops, void **ctx);

/* The same on a store the caller owns (several clients of one server: access rules). */
struct rnbd_store;
int rnbd_local_new_on(struct rnbd_store *st, const char *sessname,
		      const struct rnbd_xport_ops **ops, void **ctx);

#endif
