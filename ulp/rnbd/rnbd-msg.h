/* SPDX-License-Identifier: MIT */
/*
 * The validating parser of every RNBD message a server receives, and the encoders both sides
 * use. Pure code: no IO, no allocation. A message is checked field by field before anything acts
 * on it; the device-dependent checks (the id names an open device, the range lies inside it)
 * are rnbd_io_check(), called by the server once it has the device.
 */
#ifndef RNBD_MSG_H
#define RNBD_MSG_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "rnbd-proto.h"

/* A received message, decoded and checked. */
struct rnbd_req {
	unsigned type;			/* enum rnbd_msg_type: SESS_INFO, OPEN, CLOSE or IO */
	uint8_t ver;			/* SESS_INFO */
	uint8_t access_mode;		/* OPEN */
	char name[RNBD_NAME_MAX + 1];	/* OPEN: normalized (no leading or doubled '/') */
	uint32_t device_id;		/* CLOSE, IO */
	uint32_t op;			/* IO: enum rnbd_io_op */
	uint32_t flags;			/* IO: RNBD_F_* */
	uint64_t sector;		/* IO */
	uint32_t bi_size;		/* IO */
	uint16_t prio;			/* IO */
};

/*
 * Decodes and checks one message: dir is the RTRS direction it came with (RNBD_DIR_READ or
 * RNBD_DIR_WRITE), usr/usrlen its user header, datalen the size of its data (WRITE: bytes
 * carried; READ: room for the answer). Returns 0, or a negative errno that is the answer:
 *   -EINVAL      short or oversized header, unknown type, wrong direction, data length that
 *                does not match, size not a multiple of 512, unknown flag, bad access mode,
 *                name not NUL-terminated / empty / containing "..", nonzero reserved bytes are
 *                allowed (the kernel leaves them uninitialized)
 *   -EOPNOTSUPP  an IO op this protocol does not know
 */
int rnbd_parse(int dir, const void *usr, size_t usrlen, size_t datalen, struct rnbd_req *r);

/* The range of an IO against a device of nsectors sectors: 0 or -EINVAL (past the end, or
 * sector + size overflows). */
int rnbd_io_check(const struct rnbd_req *r, uint64_t nsectors);

/* Encoders (the client's side, and the server's answers). */
void rnbd_enc_sess_info(struct rnbd_msg_sess_info *m, uint8_t ver);
void rnbd_enc_sess_info_rsp(struct rnbd_msg_sess_info_rsp *m, uint8_t ver);
/* -ENAMETOOLONG when name does not fit, -EINVAL for an empty name or a bad mode. */
int rnbd_enc_open(struct rnbd_msg_open *m, unsigned access_mode, const char *name);
void rnbd_enc_close(struct rnbd_msg_close *m, uint32_t device_id);
void rnbd_enc_io(struct rnbd_msg_io *m, uint32_t device_id, uint64_t sector, uint32_t rw,
		 uint32_t bi_size, uint16_t prio);

/* The client's check of an OPEN_RSP (56 bytes received): 0 or -EPROTO (wrong type, logical
 * block size 0 or not a power of two >= 512, a size in bytes past INT64_MAX, ...). */
struct rnbd_dev_attrs {
	uint32_t device_id;
	uint64_t nsectors;
	uint32_t max_hw_sectors, max_write_zeroes_sectors, max_discard_sectors;
	uint32_t discard_granularity, discard_alignment;
	uint16_t physical_block_size, logical_block_size, max_segments, secure_discard;
	uint8_t cache_policy;
};
int rnbd_dec_open_rsp(const void *buf, size_t len, struct rnbd_dev_attrs *a);
void rnbd_enc_open_rsp(struct rnbd_msg_open_rsp *m, const struct rnbd_dev_attrs *a);
int rnbd_dec_sess_info_rsp(const void *buf, size_t len, uint8_t *ver);

#endif
