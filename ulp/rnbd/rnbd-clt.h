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
	/*
	 * Optional. Registers fn, called with RNBD_LINK_DOWN when every path of the session is
	 * down and RNBD_LINK_UP when one is back after that (RTRS's link events). Called from
	 * the transport's thread: fn must not block.
	 */
	void (*set_link_cb)(void *ctx, void (*fn)(void *arg, int ev), void *arg);
	/* Optional: the transport's per-path counters, one "path ..." line each. */
	void (*stats)(void *ctx, FILE *f);
	/*
	 * Optional: waits for done(arg) by polling the transport in the calling thread for a
	 * while (rtrs_clt_poll): 0 when done, else nonzero and the caller waits for its
	 * callbacks as usual. done must not block.
	 */
	int (*poll)(void *ctx, int (*done)(void *arg), void *arg);
};

enum { RNBD_LINK_DOWN = 0, RNBD_LINK_UP = 1 };

/* The state of the client's open device (as the kernel's rnbd-clt dev_state). */
enum rnbd_clt_state {
	RNBD_CLT_MAPPED = 0,		/* open on the server: IO goes out */
	RNBD_CLT_DISCONNECTED = 1,	/* every path down: IO fails at once (EIO) */
	RNBD_CLT_REMAPPING = 2,		/* a path is back: SESS_INFO and OPEN again; IO waits */
};

struct rnbd_clt {
	const struct rnbd_xport_ops *ops;
	void *ctx;
	uint8_t ver;			/* negotiated major version */
	bool open;
	unsigned mode;
	char name[RNBD_NAME_MAX + 1];	/* the device, for a remap */
	struct rnbd_dev_attrs a;	/* from OPEN_RSP (device_id changes at a remap) */
	uint32_t max_io;		/* bytes: min(transport, device) */
	pthread_mutex_t rmw_lock;	/* unaligned writes: one read-modify-write at a time */
	/*
	 * Remapping (the kernel's rnbd-clt does the same at RTRS's RECONNECTED): when every path
	 * went down, the server dropped the session and the device's open with it; when a path
	 * is back, a thread sends SESS_INFO and OPEN again and IO resumes with the new device
	 * id. An IO the server answers with ENOTCONN (it does not know the id) also asks for a
	 * remap and is sent again after it.
	 */
	pthread_mutex_t st_lock;
	pthread_cond_t st_cv;
	int state;			/* enum rnbd_clt_state, under st_lock */
	uint64_t gen;			/* successful remaps so far, under st_lock */
	uint64_t downs;			/* RNBD_LINK_DOWN events, under st_lock */
	bool remap_req, stopping, thread_started;
	pthread_t remap_thread;
	unsigned remap_wait_ms;		/* IO waits this long for a remap under way (10000) */
	struct {			/* counted per request (before splitting) */
		_Atomic uint64_t reads, writes, flushes, discards, write_zeroes;
		_Atomic uint64_t bytes_read, bytes_written, errors;
		_Atomic uint64_t disconnects, remaps, remap_failures, resent, refused_down;
	} c;
};

/* Counters as "name value" lines (the plugin's stats= file), then the transport's per-path
 * lines. */
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
	unsigned fail_timeout_ms;	/* 0: RTRS's default */
	int wait_poll_us;		/* a waiting thread polls for its answer this long
					 * (rtrs_clt_poll): -1 default, 0 never */
	int poll_inflight_max;		/* RTRS's thread polls on after an answer only while
					 * at most this many requests are in flight (its
					 * poll_inflight_max): -1 default, 0 no limit */
	int no_zero_copy;		/* 1: every request through RTRS's bounce buffers;
					 * 0: the caller's buffers are reached in place where
					 * the device has implicit On-Demand Paging */
};
#define RNBD_WAIT_POLL_US_DEFAULT 1000
#define RNBD_POLL_INFLIGHT_MAX_DEFAULT 1
int rnbd_rtrs_new(const char *sessname, const char *const *paths, size_t n,
		  const struct rnbd_rtrs_opts *ro, const struct rnbd_xport_ops **ops, void **ctx);

/* The same on a store the caller owns (several clients of one server: access rules). */
struct rnbd_store;
int rnbd_local_new_on(struct rnbd_store *st, const char *sessname,
		      const struct rnbd_xport_ops **ops, void **ctx);
/*
 * Tests: what RTRS does to a session when its paths go. RNBD_LOCAL_DOWN: the server's session
 * is freed (its devices closed, as the server does at DISCONNECTED), requests fail with
 * ECONNABORTED, and the link callback gets RNBD_LINK_DOWN. RNBD_LOCAL_UP: a new server session
 * (no device open), then RNBD_LINK_UP. RNBD_LOCAL_RESET: both, with no event at all (a session
 * the server replaced without the client seeing every path down).
 */
enum { RNBD_LOCAL_DOWN, RNBD_LOCAL_UP, RNBD_LOCAL_RESET };
int rnbd_local_sim(void *ctx, int what);

#endif
