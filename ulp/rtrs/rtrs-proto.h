/* SPDX-License-Identifier: MIT */
/*
 * rtrs-proto.h: the RTRS 2.0 wire protocol (the Linux kernel's drivers/infiniband/ulp/rtrs),
 * written from the kernel's layouts (facts: sizes, offsets, constants); docs/rtrs.md has the byte
 * layout and what goes where. Every multi-byte field is little endian on the wire except the
 * 32-bit immediate, which verbs carry big endian (ibv_wc.imm_data / ibv_send_wr.imm_data).
 * Self-contained: libc only.
 */
#ifndef SOFTRDMA_RTRS_PROTO_H
#define SOFTRDMA_RTRS_PROTO_H

#include <stdint.h>

#define RTRS_PROTO_VER_MAJOR 2
#define RTRS_PROTO_VER_MINOR 0
#define RTRS_PROTO_VER ((RTRS_PROTO_VER_MAJOR << 8) | RTRS_PROTO_VER_MINOR)
#define RTRS_MAGIC 0x1BBD

#define RTRS_MAX_SESS_QUEUE_DEPTH 65535
#define RTRS_MIN_CHUNK_SIZE 8192
#define RTRS_MAX_PATHS_NUM 128
#define RTRS_SERVICE_CON_QUEUE_DEPTH 512
#define RTRS_HB_INTERVAL_MS 5000
#define RTRS_HB_MISSED_MAX 5
#define RTRS_NAME_MAX 255

/* Immediate data: 4-bit type in the top bits, 28-bit payload. */
#define RTRS_IMM_TYPE_BITS 4
#define RTRS_IMM_PAYL_BITS 28
#define RTRS_IMM_PAYL_MASK ((1u << RTRS_IMM_PAYL_BITS) - 1)

enum rtrs_imm_type {
	RTRS_IO_REQ_IMM = 0,		/* client -> server: payload = chunk id << mem_bits | off */
	RTRS_IO_RSP_IMM = 1,		/* server -> client: payload = errno << 19 | msg id */
	RTRS_IO_RSP_W_INV_IMM = 2,	/* same, the client's READ rkey was invalidated */
	RTRS_HB_MSG_IMM = 8,
	RTRS_HB_ACK_IMM = 9,
};

/* Messages (the __le16 type of each) */
enum rtrs_msg_type {
	RTRS_MSG_INFO_REQ = 0,
	RTRS_MSG_INFO_RSP = 1,
	RTRS_MSG_WRITE = 2,
	RTRS_MSG_READ = 3,
	RTRS_MSG_RKEY_RSP = 4,
};

/* Flags: CON_RSP.flags (NEW_RKEY) and rtrs_msg_rdma_read.flags (NEED_INVAL). */
#define RTRS_MSG_NEED_INVAL_F (1u << 0)
#define RTRS_MSG_NEW_RKEY_F (1u << 1)

/* CON_REQ.first_conn is bit 0 of byte 44 */
#define RTRS_CON_REQ_FIRST_CONN 0x01

/* One RDMA buffer: a server chunk in INFO_RSP, a client buffer in a READ request. */
struct rtrs_sg_desc {
	uint64_t addr;
	uint32_t key;
	uint32_t len;
} __attribute__((packed));

/* rdma_connect private data (56 bytes, the most rdma_cm allows for RC over IP). */
struct rtrs_msg_conn_req {
	uint8_t cma_version;	/* 0 */
	uint8_t ip_version;	/* 0 */
	uint16_t magic;		/* RTRS_MAGIC */
	uint16_t version;	/* RTRS_PROTO_VER */
	uint16_t cid;		/* this connection: 0 = service connection */
	uint16_t cid_num;	/* connections in this path */
	uint16_t recon_cnt;	/* reconnects of this path: a higher one replaces a stale path */
	uint8_t sess_uuid[16];	/* the path */
	uint8_t paths_uuid[16];	/* the session (group of paths) */
	uint8_t first_conn;	/* bit 0: first connection of the session's first path */
	uint8_t reserved[11];
} __attribute__((packed));

/* rdma_accept private data (56 bytes). */
struct rtrs_msg_conn_rsp {
	uint16_t magic;
	uint16_t version;
	uint16_t errno_;	/* 0, or a negative errno (le16) with rdma_reject */
	uint16_t queue_depth;	/* chunks of the session */
	uint32_t max_io_size;	/* chunk size - max_hdr_size */
	uint32_t max_hdr_size;
	uint32_t flags;		/* RTRS_MSG_NEW_RKEY_F when always_invalidate */
	uint8_t reserved[36];
} __attribute__((packed));

/* Service connection, SEND client -> server. */
struct rtrs_msg_info_req {
	uint16_t type;		/* RTRS_MSG_INFO_REQ */
	uint8_t sessname[RTRS_NAME_MAX]; /* NUL padded */
	uint8_t reserved[15];
} __attribute__((packed));

/* Service connection, SEND server -> client: one descriptor per chunk (sg_cnt = queue depth). */
struct rtrs_msg_info_rsp {
	uint16_t type;		/* RTRS_MSG_INFO_RSP */
	uint16_t sg_cnt;
	uint8_t reserved[4];
	struct rtrs_sg_desc desc[];
} __attribute__((packed));

/* SEND server -> client before the response of an IO, when NEW_RKEY: chunk buf_id's new key. */
struct rtrs_msg_rkey_rsp {
	uint16_t type;		/* RTRS_MSG_RKEY_RSP */
	uint16_t buf_id;
	uint32_t rkey;
} __attribute__((packed));

/* Trailer at chunk offset off (the IO_REQ immediate's) of a READ: user header before it, at
 * off - usr_len; sg_cnt descriptors of the client's buffers follow it. */
struct rtrs_msg_rdma_read {
	uint16_t type;		/* RTRS_MSG_READ */
	uint16_t usr_len;
	uint16_t flags;		/* RTRS_MSG_NEED_INVAL_F: invalidate desc[0].key when done */
	uint16_t sg_cnt;
	struct rtrs_sg_desc desc[];
} __attribute__((packed));

/* Trailer at chunk offset off of a WRITE: data at [0, off - usr_len), user header at
 * [off - usr_len, off). */
struct rtrs_msg_rdma_write {
	uint16_t type;		/* RTRS_MSG_WRITE */
	uint16_t usr_len;
} __attribute__((packed));

struct rtrs_msg_rdma_hdr {
	uint16_t type;
} __attribute__((packed));

_Static_assert(sizeof(struct rtrs_sg_desc) == 16, "rtrs_sg_desc");
_Static_assert(sizeof(struct rtrs_msg_conn_req) == 56, "conn_req");
_Static_assert(sizeof(struct rtrs_msg_conn_rsp) == 56, "conn_rsp");
_Static_assert(sizeof(struct rtrs_msg_info_req) == 272, "info_req");
_Static_assert(sizeof(struct rtrs_msg_info_rsp) == 8, "info_rsp");
_Static_assert(sizeof(struct rtrs_msg_rkey_rsp) == 8, "rkey_rsp");
_Static_assert(sizeof(struct rtrs_msg_rdma_read) == 8, "rdma_read");
_Static_assert(sizeof(struct rtrs_msg_rdma_write) == 4, "rdma_write");
_Static_assert(sizeof(struct rtrs_msg_rdma_hdr) == 2, "rdma_hdr");
_Static_assert(__builtin_offsetof(struct rtrs_msg_conn_req, sess_uuid) == 12, "conn_req");
_Static_assert(__builtin_offsetof(struct rtrs_msg_conn_req, first_conn) == 44, "conn_req");
_Static_assert(__builtin_offsetof(struct rtrs_msg_conn_rsp, flags) == 16, "conn_rsp");
_Static_assert(__builtin_offsetof(struct rtrs_msg_info_rsp, desc) == 8, "info_rsp");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "fields are stored little endian");

static inline uint32_t rtrs_to_imm(uint32_t type, uint32_t payload)
{
	return (type << RTRS_IMM_PAYL_BITS) | (payload & RTRS_IMM_PAYL_MASK);
}

static inline void rtrs_from_imm(uint32_t imm, uint32_t *type, uint32_t *payload)
{
	*type = imm >> RTRS_IMM_PAYL_BITS;
	*payload = imm & RTRS_IMM_PAYL_MASK;
}

/* Response payload: 9 bits of errno (its absolute value), 19 bits of msg id (the chunk id). */
static inline uint32_t rtrs_to_io_rsp_imm(uint32_t msg_id, int err, int w_inval)
{
	uint32_t e = (uint32_t)(err < 0 ? -err : err) & 0x1ff;

	return rtrs_to_imm(w_inval ? RTRS_IO_RSP_W_INV_IMM : RTRS_IO_RSP_IMM,
			   e << 19 | (msg_id & 0x7ffff));
}

static inline void rtrs_from_io_rsp_imm(uint32_t payload, uint32_t *msg_id, int *err)
{
	*msg_id = payload & 0x7ffff;
	*err = (int)((payload >> 19) & 0x1ff);	/* positive errno */
}

/* Bits of the IO_REQ payload that hold the offset: 28 - (ilog2(queue_depth - 1) + 1). */
static inline unsigned int rtrs_mem_bits(uint32_t queue_depth)
{
	unsigned int chunk_bits = queue_depth > 1 ? 32 - (unsigned int)__builtin_clz(queue_depth - 1) : 1;

	return RTRS_IMM_PAYL_BITS - chunk_bits;
}

#endif
