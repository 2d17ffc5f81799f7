/* SPDX-License-Identifier: MIT */
/*
 * The rsocket wire protocol (docs/rsocket.md), behind one boundary: every byte layout the two
 * ends of an rsocket exchange is defined here, and only the encoders/decoders in proto.c touch
 * it. Version RS_PROTO_VERSION; a peer speaking another version (or not rsockets at all) is
 * rejected when the connection is made.
 *
 * Stream sockets (RC, RDMA_PS_TCP):
 *   - connection private data (REQ and REP): struct rs_conn, 32 bytes: magic "RS", version,
 *     the sender's receive ring (address, rkey, size), its message credits and IO map size;
 *   - data: RDMA WRITE WITH IMMEDIATE into the peer's receive ring, at the offset the byte
 *     count sent so far gives (mod the ring size); immediate = RS_IMM_DATA << 28 | length;
 *   - riowrite: RDMA WRITE (no immediate) into a buffer the peer announced with an IOMAP;
 *   - control: SEND of a struct rs_ctrl (at most RS_CTRL_LEN bytes) into a receive slot.
 *
 * Datagram sockets (UD, RDMA_PS_UDP): every datagram starts with struct rs_dg_hdr (40 bytes)
 * naming the sender's socket address and its data-plane endpoint (GID, QPN), so the receiver
 * can report the source and answer without a resolution of its own.
 *
 * Reserved fields are sent as zero and ignored on receipt.
 */
#ifndef SR_RSOCKET_PROTO_H
#define SR_RSOCKET_PROTO_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#define RS_PROTO_VERSION 1
#define RS_MAGIC0 'R'
#define RS_MAGIC1 'S'

/* ---- connection private data ---------------------------------------------------------------
 *   0  'R' 'S'    magic
 *   2  u8         version (RS_PROTO_VERSION)
 *   3  u8         flags (0; reserved)
 *   4  be32       rkey of the sender's receive ring
 *   8  be64       address of the receive ring
 *  16  be32       size of the receive ring in bytes (a power of two is not required)
 *  20  be16       message credits: receive WRs the peer may consume with data/IOMAP/SHUTDOWN
 *  22  be16       IO map size: how many riomap() announcements the sender keeps (0: none)
 *  24  8 bytes    reserved
 */
#define RS_CONN_LEN 32

struct rs_conn {
	uint8_t version;
	uint32_t rkey;
	uint64_t addr;
	uint32_t size;
	uint16_t credits;
	uint16_t iomap_size;
};

void rs_conn_encode(const struct rs_conn *c, uint8_t buf[RS_CONN_LEN]);
/* 0, or -EPROTO: too short, not "RS", or another version. */
int rs_conn_decode(struct rs_conn *c, const void *buf, size_t len);

/* ---- immediate data of a data write ------------------------------------------------------------ */
#define RS_IMM_DATA 0u			/* the only opcode of version 1; others are errors */
#define RS_IMM_LEN_MAX ((1u << 28) - 1)

static inline uint32_t rs_imm_data(uint32_t len)
{
	return htonl(RS_IMM_DATA << 28 | len);
}

/* The length of a data write, or -1 if the immediate is not a data write. */
static inline int64_t rs_imm_len(uint32_t imm_be)
{
	uint32_t v = ntohl(imm_be);

	return v >> 28 == RS_IMM_DATA ? (int64_t)(v & RS_IMM_LEN_MAX) : -1;
}

/* ---- control messages ------------------------------------------------------------------------------
 *   0  u8    type (enum rs_ctrl_type)
 *   1  3     reserved
 *   4  body:
 *      CREDIT    be32 bytes consumed by the application so far (mod 2^32),
 *                be32 receive WRs consumed and posted again so far (mod 2^32)
 *      SHUTDOWN  nothing: the sender sends no more data (EOF after what came before)
 *      IOMAP     be32 rkey, be64 offset, be64 address, be64 length (0: the mapping at
 *                `offset` is withdrawn)
 */
#define RS_CTRL_LEN 32
#define RS_SLOT_LEN 64		/* receive slot; larger than any control message */

enum rs_ctrl_type {
	RS_CTRL_CREDIT = 1,
	RS_CTRL_SHUTDOWN = 2,
	RS_CTRL_IOMAP = 3,
};

struct rs_ctrl {
	uint8_t type;
	uint32_t freed, msgs;			/* CREDIT */
	uint32_t rkey;				/* IOMAP */
	uint64_t offset, addr, len;
};

/* Returns the encoded length. */
size_t rs_ctrl_encode(const struct rs_ctrl *c, uint8_t buf[RS_CTRL_LEN]);
/* 0, or -EPROTO (unknown type, too short). */
int rs_ctrl_decode(struct rs_ctrl *c, const void *buf, size_t len);

/* ---- datagram header ---------------------------------------------------------------------------------
 *   0  u8     version (RS_PROTO_VERSION)
 *   1  u8     address family of the source: 4 or 6
 *   2  be16   source port
 *   4  be32   source QPN (the UD QP answers go to)
 *   8  16     source IP (IPv4: the first 4 bytes)
 *  24  16     source GID (data plane)
 *  40  payload
 */
#define RS_DG_HDR_LEN 40
#define RS_GRH_LEN 40

struct rs_dg_hdr {
	struct sockaddr_storage src;		/* family, IP, port */
	uint32_t qpn;
	union ibv_gid gid;
};

void rs_dg_hdr_encode(const struct rs_dg_hdr *h, uint8_t buf[RS_DG_HDR_LEN]);
int rs_dg_hdr_decode(struct rs_dg_hdr *h, const void *buf, size_t len);

#endif /* SR_RSOCKET_PROTO_H */
