/* SPDX-License-Identifier: MIT */
/*
 * RNBD wire protocol, version 2 (major 2, minor 0; plus the two compatible flags that later
 * minors added: PREFLUSH in 2.1 and NOUNMAP in 2.2). Every message is little-endian and laid out
 * byte for byte as the Linux kernel's drivers/block/rnbd (docs/rnbd.md has the layout and how
 * each message rides on RTRS). This header is self-contained: libc only.
 *
 * How messages travel (the kernel's convention, kept exactly):
 *   SESS_INFO  RTRS READ,  user header = struct rnbd_msg_sess_info (36 B),
 *              data = the client's 36 B buffer that receives struct rnbd_msg_sess_info_rsp
 *   OPEN       RTRS READ,  user header = struct rnbd_msg_open (264 B),
 *              data = the client's 56 B buffer that receives struct rnbd_msg_open_rsp
 *   CLOSE      RTRS WRITE, user header = struct rnbd_msg_close (8 B), no data
 *   IO         user header = struct rnbd_msg_io (32 B); op READ as an RTRS READ with the
 *              buffer to fill (bi_size bytes); WRITE as an RTRS WRITE carrying bi_size bytes;
 *              FLUSH, DISCARD, WRITE_ZEROES, SECURE_ERASE as an RTRS WRITE with no data
 * The answer to every message is the RTRS response's errno (0 = success).
 */
#ifndef RNBD_PROTO_H
#define RNBD_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <endian.h>

#define RNBD_PROTO_VER_MAJOR 2
#define RNBD_PROTO_VER_MINOR 0

/* The port the kernel's RTRS server listens on by default (rnbd-server's port_nr). */
#define RNBD_RTRS_PORT 1234

#define RNBD_SECTOR_SHIFT 9
#define RNBD_SECTOR_SIZE 512u
/* NAME_MAX of Linux: the device name field of OPEN. */
#define RNBD_NAME_MAX 255

enum rnbd_msg_type {
	RNBD_MSG_SESS_INFO = 0,
	RNBD_MSG_SESS_INFO_RSP = 1,
	RNBD_MSG_OPEN = 2,
	RNBD_MSG_OPEN_RSP = 3,
	RNBD_MSG_IO = 4,
	RNBD_MSG_CLOSE = 5,
};

/* RO: any number of opens. RW: one writer. MIGRATION: a second writer next to an RW one. */
enum rnbd_access_mode {
	RNBD_ACCESS_RO = 0,
	RNBD_ACCESS_RW = 1,
	RNBD_ACCESS_MIGRATION = 2,
};

struct rnbd_msg_hdr {
	uint16_t type;		/* le16, enum rnbd_msg_type */
	uint16_t padding;
};

struct rnbd_msg_sess_info {
	struct rnbd_msg_hdr hdr;
	uint8_t ver;		/* the client's major version */
	uint8_t reserved[31];
};

struct rnbd_msg_sess_info_rsp {
	struct rnbd_msg_hdr hdr;
	uint8_t ver;		/* min(client's, server's) major version */
	uint8_t reserved[31];
};

struct rnbd_msg_open {
	struct rnbd_msg_hdr hdr;
	uint8_t access_mode;	/* enum rnbd_access_mode */
	uint8_t resv1;
	char dev_name[RNBD_NAME_MAX];	/* NUL-terminated, relative to the server's search path */
	uint8_t reserved[3];
};

struct rnbd_msg_close {
	struct rnbd_msg_hdr hdr;
	uint32_t device_id;	/* le32 */
};

/* cache_policy bits of OPEN_RSP */
enum rnbd_cache_policy {
	RNBD_FUA = 1 << 0,
	RNBD_WRITEBACK = 1 << 1,
};

struct rnbd_msg_open_rsp {
	struct rnbd_msg_hdr hdr;
	uint32_t device_id;		/* le32: the id IO and CLOSE name the device by */
	uint64_t nsectors;		/* le64: size in 512-byte sectors */
	uint32_t max_hw_sectors;	/* le32: largest IO, in sectors */
	uint32_t max_write_zeroes_sectors; /* le32 (max_write_same_sectors before Linux 5.18) */
	uint32_t max_discard_sectors;	/* le32 */
	uint32_t discard_granularity;	/* le32, bytes */
	uint32_t discard_alignment;	/* le32, bytes */
	uint16_t physical_block_size;	/* le16, bytes */
	uint16_t logical_block_size;	/* le16, bytes (the kernel's client refuses 0) */
	uint16_t max_segments;		/* le16 */
	uint16_t secure_discard;	/* le16: SECURE_ERASE supported */
	uint8_t obsolete_rotational;
	uint8_t cache_policy;		/* enum rnbd_cache_policy */
	uint8_t reserved[10];
};

struct rnbd_msg_io {
	struct rnbd_msg_hdr hdr;
	uint32_t device_id;	/* le32 */
	uint64_t sector;	/* le64: first 512-byte sector */
	uint32_t rw;		/* le32: op (low 8 bits) | flags */
	uint32_t bi_size;	/* le32: bytes the op covers */
	uint16_t prio;		/* le16: IO priority (ioprio) */
	/* 6 bytes of tail padding: the kernel sends sizeof() = 32 */
};

#define RNBD_OP_BITS 8
#define RNBD_OP_MASK ((1u << RNBD_OP_BITS) - 1)

enum rnbd_io_op {
	RNBD_OP_READ = 0,
	RNBD_OP_WRITE = 1,
	RNBD_OP_FLUSH = 2,
	RNBD_OP_DISCARD = 3,
	RNBD_OP_SECURE_ERASE = 4,
	RNBD_OP_WRITE_ZEROES = 5,	/* was WRITE_SAME before Linux 5.18 */
	RNBD_OP_LAST,
};

enum rnbd_io_flags {
	RNBD_F_SYNC = 1u << (RNBD_OP_BITS + 0),
	RNBD_F_FUA = 1u << (RNBD_OP_BITS + 1),
	RNBD_F_PREFLUSH = 1u << (RNBD_OP_BITS + 2),	/* protocol 2.1 */
	RNBD_F_NOUNMAP = 1u << (RNBD_OP_BITS + 3),	/* protocol 2.2, WRITE_ZEROES only */
};
#define RNBD_F_ALL (RNBD_F_SYNC | RNBD_F_FUA | RNBD_F_PREFLUSH | RNBD_F_NOUNMAP)

static inline uint32_t rnbd_op(uint32_t rw) { return rw & RNBD_OP_MASK; }
static inline uint32_t rnbd_flags(uint32_t rw) { return rw & ~RNBD_OP_MASK; }

/* Sizes and offsets are the wire format: checked here, at compile time. */
_Static_assert(sizeof(struct rnbd_msg_hdr) == 4, "rnbd_msg_hdr");
_Static_assert(sizeof(struct rnbd_msg_sess_info) == 36, "rnbd_msg_sess_info");
_Static_assert(sizeof(struct rnbd_msg_sess_info_rsp) == 36, "rnbd_msg_sess_info_rsp");
_Static_assert(sizeof(struct rnbd_msg_open) == 264, "rnbd_msg_open");
_Static_assert(offsetof(struct rnbd_msg_open, dev_name) == 6, "rnbd_msg_open.dev_name");
_Static_assert(sizeof(struct rnbd_msg_close) == 8, "rnbd_msg_close");
_Static_assert(sizeof(struct rnbd_msg_open_rsp) == 56, "rnbd_msg_open_rsp");
_Static_assert(offsetof(struct rnbd_msg_open_rsp, nsectors) == 8, "open_rsp.nsectors");
_Static_assert(offsetof(struct rnbd_msg_open_rsp, physical_block_size) == 36, "open_rsp.pbs");
_Static_assert(offsetof(struct rnbd_msg_open_rsp, cache_policy) == 45, "open_rsp.cache_policy");
_Static_assert(sizeof(struct rnbd_msg_io) == 32, "rnbd_msg_io");
_Static_assert(offsetof(struct rnbd_msg_io, sector) == 8, "msg_io.sector");
_Static_assert(offsetof(struct rnbd_msg_io, rw) == 16, "msg_io.rw");
_Static_assert(offsetof(struct rnbd_msg_io, bi_size) == 20, "msg_io.bi_size");
_Static_assert(offsetof(struct rnbd_msg_io, prio) == 24, "msg_io.prio");
/* A version-1 client (no prio field) sends 24 bytes of IO header. */
#define RNBD_MSG_IO_V1_LEN offsetof(struct rnbd_msg_io, prio)

/* RTRS directions, as the kernel's READ/WRITE. */
#define RNBD_DIR_READ 0
#define RNBD_DIR_WRITE 1

const char *rnbd_access_mode_str(unsigned mode);
const char *rnbd_op_str(unsigned op);

#endif
