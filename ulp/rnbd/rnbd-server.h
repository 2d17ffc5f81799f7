/* SPDX-License-Identifier: MIT */
/* The server program's state, shared with its transport glue (rnbd-server-rtrs.c). */
#ifndef RNBD_SERVER_H
#define RNBD_SERVER_H

#include <pthread.h>
#include <stdio.h>

#include "rnbd-srv.h"

#define RNBD_SERVER_MAX_SESS 256

struct rnbd_server {
	struct rnbd_store *st;
	const char *listen_addr[8];
	unsigned nlisten;
	unsigned hb_interval_ms;
	int no_always_invalidate;	/* --always-invalidate 0 (the RTRS default is 1) */
	int port;
	uint32_t max_io;
	uint32_t chunk_size;	/* --chunk-size: RTRS chunk (0: RTRS's default, 128 KiB) */
	uint32_t sess_qd;	/* --sess-queue-depth: chunks per session (0: RTRS's, 512) */
	const char *stats_file;
	pthread_mutex_t lock;
	struct rnbd_srv_sess *sess[RNBD_SERVER_MAX_SESS];
	void *xport;		/* the transport's state */
};

/* The transport: listen, create an rnbd_srv_sess per session it brings, feed it messages. */
int rnbd_server_start(struct rnbd_server *s);
void rnbd_server_stop(struct rnbd_server *s);
/* The transport's per-path counters, one "path ..." line each. */
void rnbd_server_xport_stats(struct rnbd_server *s, FILE *f);
/* The transport's largest IO (its chunk less its header room), the default of --max-io. */
uint32_t rnbd_server_max_io(const struct rnbd_server *s);

void rnbd_server_add_sess(struct rnbd_server *s, struct rnbd_srv_sess *sess);
void rnbd_server_del_sess(struct rnbd_server *s, struct rnbd_srv_sess *sess);

#endif
