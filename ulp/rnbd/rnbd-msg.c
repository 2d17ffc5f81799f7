/* SPDX-License-Identifier: MIT */
/* RNBD messages: the server's validating parser and the encoders (see rnbd-msg.h). */
#include <errno.h>
#include <string.h>

#include "rnbd-msg.h"

const char *rnbd_access_mode_str(unsigned mode)
{
	switch (mode) {
	case RNBD_ACCESS_RO: return "ro";
	case RNBD_ACCESS_RW: return "rw";
	case RNBD_ACCESS_MIGRATION: return "migration";
	default: return "unknown";
	}
}

const char *rnbd_op_str(unsigned op)
{
	static const char *const n[] = { "READ", "WRITE", "FLUSH", "DISCARD", "SECURE_ERASE",
					 "WRITE_ZEROES" };
	return op < RNBD_OP_LAST ? n[op] : "unknown";
}

static uint16_t ld16(const void *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t ld32(const void *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t ld64(const void *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* Copies the name field into r->name: NUL within the field, not empty once the leading '/'
 * are gone, no "..", no control character; doubled '/' collapse into one (as the kernel's
 * full-path builder does). */
static int parse_name(const char *field, char *out)
{
	const char *end = memchr(field, '\0', RNBD_NAME_MAX);
	if (!end)
		return -EINVAL;
	while (*field == '/')
		field++;
	if (field == end)
		return -EINVAL;
	if (strstr(field, ".."))
		return -EINVAL;
	size_t o = 0;
	for (const char *p = field; p < end; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return -EINVAL;
		if (*p == '/' && o > 0 && out[o - 1] == '/')
			continue;
		out[o++] = *p;
	}
	if (out[o - 1] == '/')	/* a directory, never a device */
		return -EINVAL;
	out[o] = '\0';
	return 0;
}

static int parse_io(int dir, const uint8_t *u, size_t usrlen, size_t datalen, struct rnbd_req *r)
{
	if (usrlen != sizeof(struct rnbd_msg_io) && usrlen != RNBD_MSG_IO_V1_LEN)
		return -EINVAL;
	r->device_id = ld32(u + offsetof(struct rnbd_msg_io, device_id));
	r->sector = ld64(u + offsetof(struct rnbd_msg_io, sector));
	uint32_t rw = ld32(u + offsetof(struct rnbd_msg_io, rw));
	r->bi_size = ld32(u + offsetof(struct rnbd_msg_io, bi_size));
	r->prio = usrlen == sizeof(struct rnbd_msg_io) ? ld16(u + offsetof(struct rnbd_msg_io, prio)) : 0;
	r->op = rnbd_op(rw);
	r->flags = rnbd_flags(rw);
	if (r->op >= RNBD_OP_LAST)
		return -EOPNOTSUPP;
	if (r->flags & ~RNBD_F_ALL)
		return -EINVAL;
	if ((r->flags & RNBD_F_NOUNMAP) && r->op != RNBD_OP_WRITE_ZEROES)
		return -EINVAL;
	if (r->bi_size % RNBD_SECTOR_SIZE)
		return -EINVAL;
	switch (r->op) {
	case RNBD_OP_READ:
		/* the data buffer is what the server fills: exactly bi_size */
		if (dir != RNBD_DIR_READ || r->bi_size == 0 || datalen != r->bi_size)
			return -EINVAL;
		break;
	case RNBD_OP_WRITE:
		/* a zero-length WRITE carries only its flags (a PREFLUSH, say) */
		if (dir != RNBD_DIR_WRITE || datalen != r->bi_size)
			return -EINVAL;
		break;
	case RNBD_OP_FLUSH:
		/* either direction: the kernel's client sends it as an RTRS READ (REQ_OP_FLUSH is
		 * not a write: rq_data_dir), softrdma's as a WRITE; no data either way */
		if (datalen != 0 || r->bi_size != 0)
			return -EINVAL;
		break;
	default:	/* DISCARD, SECURE_ERASE, WRITE_ZEROES: a range, no data */
		if (dir != RNBD_DIR_WRITE || datalen != 0 || r->bi_size == 0)
			return -EINVAL;
		break;
	}
	return 0;
}

int rnbd_parse(int dir, const void *usr, size_t usrlen, size_t datalen, struct rnbd_req *r)
{
	const uint8_t *u = usr;

	memset(r, 0, offsetof(struct rnbd_req, name));
	r->name[0] = '\0';
	if (!usr || usrlen < sizeof(struct rnbd_msg_hdr))
		return -EINVAL;
	if (dir != RNBD_DIR_READ && dir != RNBD_DIR_WRITE)
		return -EINVAL;
	r->type = ld16(u);
	switch (r->type) {
	case RNBD_MSG_SESS_INFO:
		if (usrlen != sizeof(struct rnbd_msg_sess_info) || dir != RNBD_DIR_READ ||
		    datalen < sizeof(struct rnbd_msg_sess_info_rsp))
			return -EINVAL;
		r->ver = u[offsetof(struct rnbd_msg_sess_info, ver)];
		return 0;
	case RNBD_MSG_OPEN:
		if (usrlen != sizeof(struct rnbd_msg_open) || dir != RNBD_DIR_READ ||
		    datalen < sizeof(struct rnbd_msg_open_rsp))
			return -EINVAL;
		r->access_mode = u[offsetof(struct rnbd_msg_open, access_mode)];
		if (r->access_mode > RNBD_ACCESS_MIGRATION)
			return -EINVAL;
		return parse_name((const char *)u + offsetof(struct rnbd_msg_open, dev_name), r->name);
	case RNBD_MSG_CLOSE:
		if (usrlen != sizeof(struct rnbd_msg_close) || dir != RNBD_DIR_WRITE || datalen != 0)
			return -EINVAL;
		r->device_id = ld32(u + offsetof(struct rnbd_msg_close, device_id));
		return 0;
	case RNBD_MSG_IO:
		return parse_io(dir, u, usrlen, datalen, r);
	default:	/* the answers (SESS_INFO_RSP, OPEN_RSP) never travel this way */
		return -EINVAL;
	}
}

int rnbd_io_check(const struct rnbd_req *r, uint64_t nsectors)
{
	uint64_t n = r->bi_size >> RNBD_SECTOR_SHIFT;

	if (r->op == RNBD_OP_FLUSH)
		return 0;
	if (r->sector > nsectors || n > nsectors - r->sector)
		return -EINVAL;
	return 0;
}

void rnbd_enc_sess_info(struct rnbd_msg_sess_info *m, uint8_t ver)
{
	memset(m, 0, sizeof(*m));
	m->hdr.type = htole16(RNBD_MSG_SESS_INFO);
	m->ver = ver;
}

void rnbd_enc_sess_info_rsp(struct rnbd_msg_sess_info_rsp *m, uint8_t ver)
{
	memset(m, 0, sizeof(*m));
	m->hdr.type = htole16(RNBD_MSG_SESS_INFO_RSP);
	m->ver = ver;
}

int rnbd_enc_open(struct rnbd_msg_open *m, unsigned access_mode, const char *name)
{
	size_t len = strlen(name);

	memset(m, 0, sizeof(*m));
	if (access_mode > RNBD_ACCESS_MIGRATION || len == 0)
		return -EINVAL;
	if (len >= sizeof(m->dev_name))
		return -ENAMETOOLONG;
	m->hdr.type = htole16(RNBD_MSG_OPEN);
	m->access_mode = access_mode;
	memcpy(m->dev_name, name, len);
	return 0;
}

void rnbd_enc_close(struct rnbd_msg_close *m, uint32_t device_id)
{
	memset(m, 0, sizeof(*m));
	m->hdr.type = htole16(RNBD_MSG_CLOSE);
	m->device_id = htole32(device_id);
}

void rnbd_enc_io(struct rnbd_msg_io *m, uint32_t device_id, uint64_t sector, uint32_t rw,
		 uint32_t bi_size, uint16_t prio)
{
	memset(m, 0, sizeof(*m));
	m->hdr.type = htole16(RNBD_MSG_IO);
	m->device_id = htole32(device_id);
	m->sector = htole64(sector);
	m->rw = htole32(rw);
	m->bi_size = htole32(bi_size);
	m->prio = htole16(prio);
}

void rnbd_enc_open_rsp(struct rnbd_msg_open_rsp *m, const struct rnbd_dev_attrs *a)
{
	memset(m, 0, sizeof(*m));
	m->hdr.type = htole16(RNBD_MSG_OPEN_RSP);
	m->device_id = htole32(a->device_id);
	m->nsectors = htole64(a->nsectors);
	m->max_hw_sectors = htole32(a->max_hw_sectors);
	m->max_write_zeroes_sectors = htole32(a->max_write_zeroes_sectors);
	m->max_discard_sectors = htole32(a->max_discard_sectors);
	m->discard_granularity = htole32(a->discard_granularity);
	m->discard_alignment = htole32(a->discard_alignment);
	m->physical_block_size = htole16(a->physical_block_size);
	m->logical_block_size = htole16(a->logical_block_size);
	m->max_segments = htole16(a->max_segments);
	m->secure_discard = htole16(a->secure_discard);
	m->cache_policy = a->cache_policy;
}

static bool pow2_ge512(unsigned v) { return v >= 512 && (v & (v - 1)) == 0; }

int rnbd_dec_open_rsp(const void *buf, size_t len, struct rnbd_dev_attrs *a)
{
	const uint8_t *b = buf;

	memset(a, 0, sizeof(*a));
	if (len < sizeof(struct rnbd_msg_open_rsp) || ld16(b) != RNBD_MSG_OPEN_RSP)
		return -EPROTO;
	a->device_id = ld32(b + offsetof(struct rnbd_msg_open_rsp, device_id));
	a->nsectors = ld64(b + offsetof(struct rnbd_msg_open_rsp, nsectors));
	a->max_hw_sectors = ld32(b + offsetof(struct rnbd_msg_open_rsp, max_hw_sectors));
	a->max_write_zeroes_sectors = ld32(b + offsetof(struct rnbd_msg_open_rsp, max_write_zeroes_sectors));
	a->max_discard_sectors = ld32(b + offsetof(struct rnbd_msg_open_rsp, max_discard_sectors));
	a->discard_granularity = ld32(b + offsetof(struct rnbd_msg_open_rsp, discard_granularity));
	a->discard_alignment = ld32(b + offsetof(struct rnbd_msg_open_rsp, discard_alignment));
	a->physical_block_size = ld16(b + offsetof(struct rnbd_msg_open_rsp, physical_block_size));
	a->logical_block_size = ld16(b + offsetof(struct rnbd_msg_open_rsp, logical_block_size));
	a->max_segments = ld16(b + offsetof(struct rnbd_msg_open_rsp, max_segments));
	a->secure_discard = ld16(b + offsetof(struct rnbd_msg_open_rsp, secure_discard));
	a->cache_policy = b[offsetof(struct rnbd_msg_open_rsp, cache_policy)];
	if (!pow2_ge512(a->logical_block_size))
		return -EPROTO;
	/* a size in bytes that no int64_t holds (the NBD size, off_t) */
	if (a->nsectors > (uint64_t)INT64_MAX >> RNBD_SECTOR_SHIFT)
		return -EPROTO;
	if (a->physical_block_size && !pow2_ge512(a->physical_block_size))
		return -EPROTO;
	return 0;
}

int rnbd_dec_sess_info_rsp(const void *buf, size_t len, uint8_t *ver)
{
	const uint8_t *b = buf;

	if (len < sizeof(struct rnbd_msg_sess_info_rsp) || ld16(b) != RNBD_MSG_SESS_INFO_RSP)
		return -EPROTO;
	*ver = b[offsetof(struct rnbd_msg_sess_info_rsp, ver)];
	return 0;
}
