/* SPDX-License-Identifier: MIT */
/*
 * The RTRS server's checks of what a client sends, as pure functions (no verbs, no IO, no
 * allocation): the CON_REQ private data, the INFO_REQ message, and an IO request (the IO_REQ
 * immediate's chunk id and offset, and the WRITE / READ trailer it points at in the chunk). The
 * server (rtrs-srv.c) acts only on what these accept; fuzz/fuzz_rtrs.c drives them directly.
 */
#ifndef SOFTRDMA_RTRS_SRV_CHECK_H
#define SOFTRDMA_RTRS_SRV_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "rtrs.h"
#include "rtrs-proto.h"

#define RTRS_SRV_MAX_DESC 8	/* client buffers of one READ */
#define RTRS_SRV_MAX_CONS 64	/* connections of one path */

/* CON_REQ private data of plen bytes: 0 (rq filled) or -EPROTO (short, wrong magic or major
 * version, cid_num not in 1..RTRS_SRV_MAX_CONS, cid >= cid_num). */
int rtrs_srv_check_con_req(const void *pdata, size_t plen, struct rtrs_msg_conn_req *rq);

/* A SEND of len bytes on the service connection: 0 when it is an INFO_REQ (name gets its session
 * name, NUL-terminated, at most RTRS_NAME_MAX bytes), or -EPROTO. */
int rtrs_srv_check_info_req(const void *buf, size_t len, char name[RTRS_NAME_MAX + 1]);

/* An IO request the server accepted: everything lies inside chunk id. */
struct rtrs_srv_io {
	uint32_t id, off;		/* chunk id and offset of the trailer (the immediate's) */
	enum rtrs_dir dir;
	uint16_t usr_len, flags;	/* user header: usr_len bytes at chunk offset off - usr_len */
	uint32_t datalen;		/* WRITE: bytes at chunk offset 0; READ: sum of desc lens */
	unsigned int sg_cnt;		/* READ: the client's buffers */
	struct rtrs_sg_desc desc[RTRS_SRV_MAX_DESC];
};

/*
 * The IO_REQ immediate payload of a request on connection cid (any: 0, the service connection,
 * carries the kernel client's admin requests, RNBD's SESS_INFO/OPEN/CLOSE) of a session of qd chunks of chunk bytes each at buf, max_hdr_size its user header limit.
 * Returns NULL (io filled, from copies of what the chunk held: the client may rewrite the chunk
 * meanwhile) or why the request is refused (the server then closes the path).
 */
const char *rtrs_srv_check_io(uint32_t payload, unsigned int cid, uint32_t qd, uint32_t chunk,
			      uint32_t max_hdr_size, const char *buf, struct rtrs_srv_io *io);

#endif
