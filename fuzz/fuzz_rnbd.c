/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: RNBD messages into the real parser and checks of ulp/rnbd/rnbd-msg.c.
 * One input is [ctl][datalen le32][nsec][message...]:
 *   ctl bit 0  the RTRS direction the message came with (RNBD_DIR_READ / _WRITE)
 *   ctl bit 1  0: the server's side, rnbd_parse (SESS_INFO, OPEN, CLOSE, IO) and, for an IO,
 *              rnbd_io_check against a device of fuzz_rnbd_nsecs[nsec] sectors (fuzz_rtrs.h); datalen is the size of
 *              the request's data buffer (READ: room for the answer; WRITE: bytes carried)
 *              1: the client's side, rnbd_dec_sess_info_rsp and rnbd_dec_open_rsp of the
 *              message (what a hostile server answers)
 * The message is the input's tail, exactly its size: a read past it is an ASan report.
 * Besides ASan and UBSan, a crash is: a message accepted that the server would act on outside
 * its bounds (an answer larger than the buffer it goes into, an IO whose size is not the data's,
 * an IO past the end of the device, an unknown type, op or flag), a device name that could leave
 * the search directory or is not the field's (empty, "..", a leading or doubled '/', a control
 * character), what is accepted not surviving encode + parse; on the client's side an OPEN_RSP
 * accepted whose size in bytes does not fit the 64-bit signed size NBD and the block layer use,
 * or whose logical block size is not a power of two >= 512.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-msg.h"
#include "fuzz_rtrs.h"

#define BUG(...) do { fprintf(stderr, "fuzz_rnbd: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static void check_name(const char *name)
{
	size_t l = strnlen(name, RNBD_NAME_MAX + 1);

	if (l == 0 || l > RNBD_NAME_MAX - 1)
		BUG("OPEN: device name of %zu bytes accepted", l);
	if (name[0] == '/' || name[l - 1] == '/' || strstr(name, "//") || strstr(name, ".."))
		BUG("OPEN: device name \"%s\" accepted", name);
	for (size_t i = 0; i < l; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
			BUG("OPEN: device name with byte %#x accepted", (unsigned char)name[i]);
}

static void server(int dir, const uint8_t *usr, size_t usrlen, uint32_t datalen, uint64_t nsec)
{
	struct rnbd_req r, r2;

	if (rnbd_parse(dir, usr, usrlen, datalen, &r))
		return;
	switch (r.type) {
	case RNBD_MSG_SESS_INFO: {
		struct rnbd_msg_sess_info m;

		if (dir != RNBD_DIR_READ || datalen < sizeof(struct rnbd_msg_sess_info_rsp))
			BUG("SESS_INFO accepted with %u bytes for its answer", datalen);
		rnbd_enc_sess_info(&m, r.ver);
		if (rnbd_parse(dir, &m, sizeof(m), datalen, &r2) || r2.ver != r.ver)
			BUG("SESS_INFO does not survive encode + parse");
		break;
	}
	case RNBD_MSG_OPEN: {
		struct rnbd_msg_open m;

		if (dir != RNBD_DIR_READ || datalen < sizeof(struct rnbd_msg_open_rsp))
			BUG("OPEN accepted with %u bytes for its answer", datalen);
		if (r.access_mode > RNBD_ACCESS_MIGRATION)
			BUG("OPEN with access mode %u accepted", r.access_mode);
		check_name(r.name);
		/* the normalized name is a fixed point: it parses to itself */
		if (rnbd_enc_open(&m, r.access_mode, r.name) ||
		    rnbd_parse(dir, &m, sizeof(m), datalen, &r2) || strcmp(r2.name, r.name) ||
		    r2.access_mode != r.access_mode)
			BUG("OPEN of \"%s\" does not survive encode + parse", r.name);
		break;
	}
	case RNBD_MSG_CLOSE: {
		struct rnbd_msg_close m;

		if (dir != RNBD_DIR_WRITE || datalen)
			BUG("CLOSE accepted with %u bytes of data", datalen);
		rnbd_enc_close(&m, r.device_id);
		if (rnbd_parse(dir, &m, sizeof(m), datalen, &r2) || r2.device_id != r.device_id)
			BUG("CLOSE does not survive encode + parse");
		break;
	}
	case RNBD_MSG_IO: {
		struct rnbd_msg_io m;

		if (r.op >= RNBD_OP_LAST || (r.flags & ~RNBD_F_ALL) || r.bi_size % RNBD_SECTOR_SIZE)
			BUG("IO op %u flags %#x size %u accepted", r.op, r.flags, r.bi_size);
		/* READ fills bi_size bytes of the buffer, WRITE writes bi_size bytes from it */
		if (r.op == RNBD_OP_READ && (dir != RNBD_DIR_READ || datalen != r.bi_size))
			BUG("READ of %u bytes accepted into %u bytes (dir %d)", r.bi_size, datalen, dir);
		/* FLUSH may come as an RTRS READ too (the kernel's client), always without data */
		if (r.op != RNBD_OP_READ &&
		    ((dir != RNBD_DIR_WRITE && !(r.op == RNBD_OP_FLUSH && dir == RNBD_DIR_READ)) ||
		     datalen != (r.op == RNBD_OP_WRITE ? r.bi_size : 0)))
			BUG("%s of %u bytes accepted with %u bytes of data (dir %d)", rnbd_op_str(r.op),
			    r.bi_size, datalen, dir);
		rnbd_enc_io(&m, r.device_id, r.sector, r.op | r.flags, r.bi_size, r.prio);
		if (rnbd_parse(dir, &m, sizeof(m), datalen, &r2) || r2.type != r.type ||
		    r2.device_id != r.device_id || r2.op != r.op || r2.flags != r.flags ||
		    r2.sector != r.sector || r2.bi_size != r.bi_size ||
		    (usrlen == sizeof(m) && r2.prio != r.prio))
			BUG("IO does not survive encode + parse");
		if (rnbd_io_check(&r, nsec))
			break;
		if (r.op != RNBD_OP_FLUSH &&
		    (unsigned __int128)r.sector * RNBD_SECTOR_SIZE + r.bi_size >
			    (unsigned __int128)nsec * RNBD_SECTOR_SIZE)
			BUG("%s of sector %llu, %u bytes accepted on a device of %llu sectors",
			    rnbd_op_str(r.op), (unsigned long long)r.sector, r.bi_size,
			    (unsigned long long)nsec);
		break;
	}
	default:
		BUG("message type %u accepted", r.type);
	}
}

static int pow2_ge512(unsigned v) { return v >= 512 && !(v & (v - 1)); }

static void client(const uint8_t *b, size_t len)
{
	struct rnbd_dev_attrs a, a2;
	struct rnbd_msg_open_rsp m;
	uint8_t ver;

	if (!rnbd_dec_sess_info_rsp(b, len, &ver) &&
	    (len < sizeof(struct rnbd_msg_sess_info_rsp) || b[0] != RNBD_MSG_SESS_INFO_RSP || b[1]))
		BUG("SESS_INFO_RSP of %zu bytes, type %u accepted", len, b[0] | b[1] << 8);
	if (rnbd_dec_open_rsp(b, len, &a))
		return;
	if (len < sizeof(m) || b[0] != RNBD_MSG_OPEN_RSP || b[1])
		BUG("OPEN_RSP of %zu bytes, type %u accepted", len, b[0] | b[1] << 8);
	if (!pow2_ge512(a.logical_block_size) ||
	    (a.physical_block_size && !pow2_ge512(a.physical_block_size)))
		BUG("OPEN_RSP with block sizes %u / %u accepted", a.logical_block_size,
		    a.physical_block_size);
	/* the plugin reports nsectors << 9 as an int64_t size */
	if (a.nsectors > (uint64_t)INT64_MAX >> RNBD_SECTOR_SHIFT)
		BUG("OPEN_RSP of %llu sectors accepted: its size overflows", (unsigned long long)a.nsectors);
	rnbd_enc_open_rsp(&m, &a);
	if (rnbd_dec_open_rsp(&m, sizeof(m), &a2) || memcmp(&a, &a2, sizeof(a)))
		BUG("OPEN_RSP does not survive encode + decode");
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (n < 6)
		return 0;
	int dir = d[0] & 1 ? RNBD_DIR_WRITE : RNBD_DIR_READ;
	uint32_t datalen = (uint32_t)d[1] | (uint32_t)d[2] << 8 | (uint32_t)d[3] << 16 |
			   (uint32_t)d[4] << 24;
	uint64_t nsec = fuzz_rnbd_nsecs[d[5] % FUZZ_RNBD_NNSECS];

	if (d[0] & 2)
		client(d + 6, n - 6);
	else
		server(dir, d + 6, n - 6, datalen, nsec);
	return 0;
}
