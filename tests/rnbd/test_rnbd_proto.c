/* SPDX-License-Identifier: MIT */
/*
 * RNBD 2.0 messages: byte layout of every message against hand-written bytes (the kernel's
 * layout), and the validating parser: every message the server receives, good and bad, field
 * by field.
 */
#include <errno.h>

#include "sr_test.h"
#include "rnbd-msg.h"

static int parse(int dir, const void *m, size_t len, size_t datalen, struct rnbd_req *r)
{
	return rnbd_parse(dir, m, len, datalen, r);
}

static void layout(void)
{
	struct rnbd_msg_io io;
	const uint8_t *b = (const uint8_t *)&io;

	rnbd_enc_io(&io, 0x01020304, 0x1122334455667788ull, RNBD_OP_WRITE | RNBD_F_FUA, 0x1000, 7);
	static const uint8_t want[32] = {
		4, 0, 0, 0,			/* type IO, padding */
		4, 3, 2, 1,			/* device_id le32 */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,	/* sector le64 */
		1, 2, 0, 0,			/* rw: WRITE | FUA (bit 9) */
		0, 0x10, 0, 0,			/* bi_size */
		7, 0,				/* prio */
	};
	CHECK(!memcmp(b, want, 32));

	struct rnbd_msg_open om;
	CHECK_EQ(rnbd_enc_open(&om, RNBD_ACCESS_MIGRATION, "a/b"), 0);
	b = (const uint8_t *)&om;
	CHECK_EQ(b[0], 2);
	CHECK_EQ(b[4], 2);
	CHECK(!memcmp(b + 6, "a/b", 4));
	char longname[300];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[299] = 0;
	CHECK_EQ(rnbd_enc_open(&om, RNBD_ACCESS_RW, longname), -ENAMETOOLONG);
	longname[254] = 0;	/* 254 characters + NUL: the largest that fits */
	CHECK_EQ(rnbd_enc_open(&om, RNBD_ACCESS_RW, longname), 0);
	CHECK_EQ(rnbd_enc_open(&om, 3, "x"), -EINVAL);

	struct rnbd_msg_close cm;
	rnbd_enc_close(&cm, 9);
	b = (const uint8_t *)&cm;
	CHECK_EQ(b[0], 5);
	CHECK_EQ(b[4], 9);

	struct rnbd_msg_sess_info si;
	rnbd_enc_sess_info(&si, 2);
	b = (const uint8_t *)&si;
	CHECK_EQ(b[0], 0);
	CHECK_EQ(b[4], 2);

	struct rnbd_dev_attrs a = { .device_id = 3, .nsectors = 0x100000000ull, .max_hw_sectors = 256,
		.max_write_zeroes_sectors = 8, .max_discard_sectors = 16, .discard_granularity = 4096,
		.discard_alignment = 0, .physical_block_size = 4096, .logical_block_size = 512,
		.max_segments = 128, .secure_discard = 0, .cache_policy = RNBD_WRITEBACK | RNBD_FUA };
	struct rnbd_msg_open_rsp rsp;
	rnbd_enc_open_rsp(&rsp, &a);
	b = (const uint8_t *)&rsp;
	CHECK_EQ(b[0], 3);
	CHECK_EQ(b[4], 3);
	CHECK_EQ(b[12], 1);		/* nsectors bit 32 */
	CHECK_EQ(b[17], 1);		/* max_hw_sectors 256 */
	CHECK_EQ(b[20], 8);		/* max_write_zeroes_sectors */
	CHECK_EQ(b[24], 16);		/* max_discard_sectors */
	CHECK_EQ(b[29], 0x10);		/* discard_granularity 4096 */
	CHECK_EQ(b[37], 0x10);		/* physical_block_size 4096 at 36 */
	CHECK_EQ(b[39], 2);		/* logical_block_size 512 at 38 */
	CHECK_EQ(b[40], 128);		/* max_segments */
	CHECK_EQ(b[45], 3);		/* cache_policy */
	struct rnbd_dev_attrs back;
	CHECK_EQ(rnbd_dec_open_rsp(&rsp, sizeof(rsp), &back), 0);
	CHECK_EQ(back.device_id, a.device_id);
	CHECK_EQ(back.nsectors, a.nsectors);
	CHECK_EQ(back.max_hw_sectors, a.max_hw_sectors);
	CHECK_EQ(back.max_write_zeroes_sectors, a.max_write_zeroes_sectors);
	CHECK_EQ(back.max_discard_sectors, a.max_discard_sectors);
	CHECK_EQ(back.discard_granularity, a.discard_granularity);
	CHECK_EQ(back.physical_block_size, a.physical_block_size);
	CHECK_EQ(back.logical_block_size, a.logical_block_size);
	CHECK_EQ(back.max_segments, a.max_segments);
	CHECK_EQ(back.cache_policy, a.cache_policy);
	rsp.logical_block_size = htole16(0);	/* the kernel's client refuses this too */
	CHECK_EQ(rnbd_dec_open_rsp(&rsp, sizeof(rsp), &back), -EPROTO);
	rsp.logical_block_size = htole16(520);
	CHECK_EQ(rnbd_dec_open_rsp(&rsp, sizeof(rsp), &back), -EPROTO);
	rsp.logical_block_size = htole16(512);
	CHECK_EQ(rnbd_dec_open_rsp(&rsp, sizeof(rsp) - 1, &back), -EPROTO);
	rsp.hdr.type = htole16(RNBD_MSG_SESS_INFO_RSP);
	CHECK_EQ(rnbd_dec_open_rsp(&rsp, sizeof(rsp), &back), -EPROTO);
}

static void sess_info(void)
{
	struct rnbd_msg_sess_info m;
	struct rnbd_req r;

	rnbd_enc_sess_info(&m, 2);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 36, &r), 0);
	CHECK_EQ(r.type, RNBD_MSG_SESS_INFO);
	CHECK_EQ(r.ver, 2);
	CHECK_EQ(parse(RNBD_DIR_WRITE, &m, sizeof(m), 36, &r), -EINVAL);	/* direction */
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 35, &r), -EINVAL);	/* no room for rsp */
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m) - 1, 36, &r), -EINVAL);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m) + 1, 36, &r), -EINVAL);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, 3, 36, &r), -EINVAL);	/* shorter than a header */
	CHECK_EQ(parse(RNBD_DIR_READ, NULL, 0, 36, &r), -EINVAL);
	CHECK_EQ(parse(7, &m, sizeof(m), 36, &r), -EINVAL);
	/* answers never come this way; unknown types are refused */
	m.hdr.type = htole16(RNBD_MSG_SESS_INFO_RSP);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 36, &r), -EINVAL);
	m.hdr.type = htole16(RNBD_MSG_OPEN_RSP);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 36, &r), -EINVAL);
	m.hdr.type = htole16(6);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 36, &r), -EINVAL);
	m.hdr.type = htole16(0xffff);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 36, &r), -EINVAL);
}

static int open_name(const char *name, struct rnbd_req *r)
{
	struct rnbd_msg_open m;

	memset(&m, 0, sizeof(m));
	m.hdr.type = htole16(RNBD_MSG_OPEN);
	m.access_mode = RNBD_ACCESS_RW;
	memcpy(m.dev_name, name, strlen(name) + 1);
	return parse(RNBD_DIR_READ, &m, sizeof(m), 56, r);
}

static void open_msg(void)
{
	struct rnbd_msg_open m;
	struct rnbd_req r;

	CHECK_EQ(rnbd_enc_open(&m, RNBD_ACCESS_RO, "disk.img"), 0);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 56, &r), 0);
	CHECK_EQ(r.type, RNBD_MSG_OPEN);
	CHECK_EQ(r.access_mode, RNBD_ACCESS_RO);
	CHECK(!strcmp(r.name, "disk.img"));
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 55, &r), -EINVAL);
	CHECK_EQ(parse(RNBD_DIR_WRITE, &m, sizeof(m), 56, &r), -EINVAL);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m) - 1, 56, &r), -EINVAL);
	for (unsigned mode = 0; mode < 256; mode++) {
		m.access_mode = mode;
		CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 56, &r), mode <= 2 ? 0 : -EINVAL);
	}
	/* the name: NUL-terminated inside its 255 bytes */
	m.access_mode = RNBD_ACCESS_RW;
	memset(m.dev_name, 'a', sizeof(m.dev_name));
	m.reserved[0] = 0;	/* a NUL after the field does not count */
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 56, &r), -EINVAL);
	m.dev_name[254] = 0;
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 56, &r), 0);
	CHECK_EQ(strlen(r.name), 254);

	CHECK_EQ(open_name("", &r), -EINVAL);
	CHECK_EQ(open_name("/", &r), -EINVAL);
	CHECK_EQ(open_name("///", &r), -EINVAL);
	CHECK_EQ(open_name("..", &r), -EINVAL);
	CHECK_EQ(open_name("../etc/passwd", &r), -EINVAL);
	CHECK_EQ(open_name("a/../../b", &r), -EINVAL);
	CHECK_EQ(open_name("a/..", &r), -EINVAL);
	CHECK_EQ(open_name("a..b", &r), -EINVAL);	/* the kernel's rule: any ".." */
	CHECK_EQ(open_name("dir/", &r), -EINVAL);
	CHECK_EQ(open_name("a\nb", &r), -EINVAL);
	CHECK_EQ(open_name("a\x7f", &r), -EINVAL);
	/* leading and doubled slashes collapse, as the kernel's path builder */
	CHECK_EQ(open_name("//dev//ram0", &r), 0);
	CHECK(!strcmp(r.name, "dev/ram0"));
	CHECK_EQ(open_name("./x", &r), 0);	/* "." stays inside; the device layer resolves */
}

static void close_msg(void)
{
	struct rnbd_msg_close m;
	struct rnbd_req r;

	rnbd_enc_close(&m, 0xdeadbeef);
	CHECK_EQ(parse(RNBD_DIR_WRITE, &m, sizeof(m), 0, &r), 0);
	CHECK_EQ(r.type, RNBD_MSG_CLOSE);
	CHECK_EQ(r.device_id, 0xdeadbeef);
	CHECK_EQ(parse(RNBD_DIR_READ, &m, sizeof(m), 0, &r), -EINVAL);
	CHECK_EQ(parse(RNBD_DIR_WRITE, &m, sizeof(m), 1, &r), -EINVAL);
	CHECK_EQ(parse(RNBD_DIR_WRITE, &m, sizeof(m) - 1, 0, &r), -EINVAL);
	CHECK_EQ(parse(RNBD_DIR_WRITE, &m, sizeof(m) + 4, 0, &r), -EINVAL);
}

static int io(int dir, uint32_t rw, uint32_t size, size_t datalen, size_t usrlen, struct rnbd_req *r)
{
	struct rnbd_msg_io m;

	rnbd_enc_io(&m, 1, 8, rw, size, 3);
	return parse(dir, &m, usrlen, datalen, r);
}

static void io_msg(void)
{
	struct rnbd_req r;
	const int R = RNBD_DIR_READ, W = RNBD_DIR_WRITE;
	const size_t L = sizeof(struct rnbd_msg_io);

	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 4096, L, &r), 0);
	CHECK_EQ(r.type, RNBD_MSG_IO);
	CHECK_EQ(r.device_id, 1);
	CHECK_EQ(r.sector, 8);
	CHECK_EQ(r.op, RNBD_OP_READ);
	CHECK_EQ(r.bi_size, 4096);
	CHECK_EQ(r.prio, 3);
	/* a version-1 header (24 bytes, no prio) is still understood */
	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 4096, RNBD_MSG_IO_V1_LEN, &r), 0);
	CHECK_EQ(r.prio, 0);
	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 4096, 25, &r), -EINVAL);
	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 4096, 31, &r), -EINVAL);
	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 4096, 33, &r), -EINVAL);
	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 4096, 20, &r), -EINVAL);

	/* READ: an RTRS READ with exactly bi_size of room, not empty, whole sectors */
	CHECK_EQ(io(W, RNBD_OP_READ, 4096, 4096, L, &r), -EINVAL);
	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 4095, L, &r), -EINVAL);
	CHECK_EQ(io(R, RNBD_OP_READ, 4096, 8192, L, &r), -EINVAL);
	CHECK_EQ(io(R, RNBD_OP_READ, 0, 0, L, &r), -EINVAL);
	CHECK_EQ(io(R, RNBD_OP_READ, 4000, 4000, L, &r), -EINVAL);
	/* WRITE: carries exactly bi_size */
	CHECK_EQ(io(W, RNBD_OP_WRITE | RNBD_F_FUA | RNBD_F_SYNC, 512, 512, L, &r), 0);
	CHECK_EQ(r.flags, RNBD_F_FUA | RNBD_F_SYNC);
	CHECK_EQ(io(W, RNBD_OP_WRITE | RNBD_F_PREFLUSH, 0, 0, L, &r), 0);	/* empty: flags only */
	CHECK_EQ(io(R, RNBD_OP_WRITE, 512, 512, L, &r), -EINVAL);
	CHECK_EQ(io(W, RNBD_OP_WRITE, 1024, 512, L, &r), -EINVAL);
	CHECK_EQ(io(W, RNBD_OP_WRITE, 512, 1024, L, &r), -EINVAL);
	CHECK_EQ(io(W, RNBD_OP_WRITE, 513, 513, L, &r), -EINVAL);
	/* FLUSH: no data, no size */
	CHECK_EQ(io(W, RNBD_OP_FLUSH, 0, 0, L, &r), 0);
	CHECK_EQ(io(W, RNBD_OP_FLUSH, 512, 0, L, &r), -EINVAL);
	CHECK_EQ(io(W, RNBD_OP_FLUSH, 0, 512, L, &r), -EINVAL);
	/* as an RTRS READ too: the kernel's rnbd-client sends it so (REQ_OP_FLUSH is no write) */
	CHECK_EQ(io(R, RNBD_OP_FLUSH, 0, 0, L, &r), 0);
	CHECK_EQ(io(R, RNBD_OP_FLUSH, 0, 512, L, &r), -EINVAL);
	/* range ops: a size, no data */
	for (uint32_t op = RNBD_OP_DISCARD; op <= RNBD_OP_WRITE_ZEROES; op++) {
		CHECK_EQ(io(W, op, 1 << 20, 0, L, &r), 0);
		CHECK_EQ(io(W, op, 0, 0, L, &r), -EINVAL);
		CHECK_EQ(io(W, op, 4096, 4096, L, &r), -EINVAL);
		CHECK_EQ(io(R, op, 4096, 0, L, &r), -EINVAL);
		CHECK_EQ(io(W, op, 4097, 0, L, &r), -EINVAL);
	}
	CHECK_EQ(io(W, RNBD_OP_WRITE_ZEROES | RNBD_F_NOUNMAP, 4096, 0, L, &r), 0);
	CHECK_EQ(io(W, RNBD_OP_DISCARD | RNBD_F_NOUNMAP, 4096, 0, L, &r), -EINVAL);
	/* unknown ops and flags */
	for (uint32_t op = RNBD_OP_LAST; op < 256; op++)
		CHECK_EQ(io(W, op, 0, 0, L, &r), -EOPNOTSUPP);
	for (unsigned bit = RNBD_OP_BITS + 4; bit < 32; bit++)
		CHECK_EQ(io(W, RNBD_OP_WRITE | (1u << bit), 512, 512, L, &r), -EINVAL);
}

static void range(void)
{
	struct rnbd_req r = { .type = RNBD_MSG_IO, .op = RNBD_OP_WRITE };

	r.sector = 0, r.bi_size = 512 * 100;
	CHECK_EQ(rnbd_io_check(&r, 100), 0);
	r.sector = 1;
	CHECK_EQ(rnbd_io_check(&r, 100), -EINVAL);
	r.sector = 99, r.bi_size = 512;
	CHECK_EQ(rnbd_io_check(&r, 100), 0);
	r.sector = 100;
	CHECK_EQ(rnbd_io_check(&r, 100), -EINVAL);
	r.sector = UINT64_MAX, r.bi_size = 512;	/* sector + size wraps around */
	CHECK_EQ(rnbd_io_check(&r, 100), -EINVAL);
	r.sector = UINT64_MAX - 3, r.bi_size = 4096;
	CHECK_EQ(rnbd_io_check(&r, UINT64_MAX), -EINVAL);
	r.op = RNBD_OP_FLUSH, r.sector = 12345, r.bi_size = 0;	/* a flush has no range */
	CHECK_EQ(rnbd_io_check(&r, 100), 0);
}

int main(void)
{
	sr_test_timeout(60);
	layout();
	sess_info();
	open_msg();
	close_msg();
	io_msg();
	range();
	return sr_test_done("test_rnbd_proto");
}
