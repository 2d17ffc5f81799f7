/* SPDX-License-Identifier: MIT */
/*
 * rnbd-hostile: a client of an RNBD server over RTRS that sends it bad messages, for the
 * integration test (tests/integration/test_rnbd_rtrs.sh): it opens DEVICE read-write and sends
 * IO to a device id it does not have, unknown ops and flags, ranges past the end of the device
 * or wrapping around, sizes that do not match the data, SECURE_ERASE of a file, headers of the
 * wrong length, unknown and answer message types, a WRITE sent as an RTRS READ. Each must come back with the server's error
 * (checked against the expected errno); the caller checks that the file did not change. Then a
 * good READ shows the session still works.
 *
 *   rnbd-hostile --session NAME --path [SRC@]DST[:PORT] [--path ...] --device NAME
 *                [--access rw|migration]
 *
 * Exit 0 when every answer was the expected one, 1 otherwise, 2 on a usage or setup error.
 */
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-clt.h"

static int failed;

static void expect(const char *what, int got, int want)
{
	printf("%s %s: %d (%s), want %d\n", got == want ? "ok" : "FAIL", what, got,
	       got ? strerror(-got) : "success", want);
	if (got != want)
		failed++;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "session", required_argument, 0, 's' }, { "path", required_argument, 0, 'p' },
		{ "device", required_argument, 0, 'd' }, { "access", required_argument, 0, 'a' },
		{ 0 } };
	unsigned mode = RNBD_ACCESS_RW;
	const char *sess = "rnbd-hostile", *dev = NULL, *paths[8];
	size_t npaths = 0;
	const struct rnbd_xport_ops *ops;
	struct rnbd_rtrs_opts ro = { 0 };
	struct rnbd_clt *c;
	struct rnbd_msg_io io;
	static uint8_t buf[65536];
	void *ctx;
	int o, rc;

	while ((o = getopt_long(argc, argv, "s:p:d:a:", opts, NULL)) != -1) {
		switch (o) {
		case 'a':
			mode = !strcmp(optarg, "migration") ? RNBD_ACCESS_MIGRATION : RNBD_ACCESS_RW;
			break;
		case 's': sess = optarg; break;
		case 'p':
			if (npaths == 8)
				return 2;
			paths[npaths++] = optarg;
			break;
		case 'd': dev = optarg; break;
		default: return 2;
		}
	}
	if (!dev || !npaths) {
		fprintf(stderr, "usage: rnbd-hostile --session NAME --path ADDR... --device NAME\n");
		return 2;
	}
	rc = rnbd_rtrs_new(sess, paths, npaths, &ro, &ops, &ctx);
	if (!rc)
		rc = rnbd_clt_new(ops, ctx, &c);
	if (!rc) {
		rc = rnbd_clt_open(c, dev, mode);
		if (rc)
			rnbd_clt_free(c);
	}
	if (rc) {
		fprintf(stderr, "rnbd-hostile: %s: %s\n", dev, strerror(-rc));
		return 2;
	}
	uint32_t id = c->a.device_id;
	uint64_t n = c->a.nsectors;
	printf("device %s id %u nsectors %llu\n", dev, id, (unsigned long long)n);
	memset(buf, 0xee, sizeof(buf));

	rnbd_enc_io(&io, id + 1000, 0, RNBD_OP_WRITE, 4096, 0);
	expect("WRITE to a device id not opened", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io),
							       buf, 4096), -ENOTCONN);
	rnbd_enc_io(&io, id + 1000, 0, RNBD_OP_WRITE_ZEROES, 4096, 0);
	expect("WRITE_ZEROES to a device id not opened",
	       rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), NULL, 0), -ENOTCONN);
	rnbd_enc_io(&io, id, 0, 0x42, 4096, 0);
	expect("unknown op 0x42", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096),
	       -EOPNOTSUPP);
	rnbd_enc_io(&io, id, 0, RNBD_OP_WRITE | (1u << 20), 4096, 0);
	expect("unknown flag", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096),
	       -EINVAL);
	rnbd_enc_io(&io, id, n - 1, RNBD_OP_WRITE, 4096, 0);
	expect("WRITE across the end", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096),
	       -EINVAL);
	rnbd_enc_io(&io, id, n, RNBD_OP_WRITE, 512, 0);
	expect("WRITE just past the end",
	       rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf, 512), -EINVAL);
	rnbd_enc_io(&io, id, UINT64_MAX - 3, RNBD_OP_WRITE, 4096, 0);
	expect("WRITE whose range wraps around",
	       rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096), -EINVAL);
	rnbd_enc_io(&io, id, n - 8, RNBD_OP_WRITE_ZEROES, 1 << 20, 0);
	expect("WRITE_ZEROES across the end",
	       rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), NULL, 0), -EINVAL);
	rnbd_enc_io(&io, id, n + 8, RNBD_OP_DISCARD, 4096, 0);
	expect("DISCARD past the end", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), NULL, 0),
	       -EINVAL);
	rnbd_enc_io(&io, id, n, RNBD_OP_READ, 4096, 0);
	expect("READ past the end", rnbd_clt_raw(c, RNBD_DIR_READ, &io, sizeof(io), buf, 4096),
	       -EINVAL);
	rnbd_enc_io(&io, id, 0, RNBD_OP_WRITE, 8192, 0);
	expect("WRITE whose size is not its data's",
	       rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096), -EINVAL);
	rnbd_enc_io(&io, id, 0, RNBD_OP_WRITE, 1000, 0);
	expect("WRITE of a size that is no sector multiple",
	       rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf, 1000), -EINVAL);
	rnbd_enc_io(&io, id, 0, RNBD_OP_SECURE_ERASE, 4096, 0);
	expect("SECURE_ERASE of a file", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), NULL, 0),
	       -EOPNOTSUPP);
	rnbd_enc_io(&io, id, 0, RNBD_OP_WRITE, 4096, 0);
	expect("IO header of 20 bytes", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, 20, buf, 4096),
	       -EINVAL);
	rnbd_enc_io(&io, id, 0, RNBD_OP_WRITE, 4096, 0);
	io.hdr.type = htole16(9);
	expect("unknown message type 9", rnbd_clt_raw(c, RNBD_DIR_WRITE, &io, sizeof(io), buf,
						      4096), -EINVAL);
	struct rnbd_msg_open_rsp rsp = { .hdr.type = htole16(RNBD_MSG_OPEN_RSP) };
	expect("an OPEN_RSP sent to the server",
	       rnbd_clt_raw(c, RNBD_DIR_WRITE, &rsp, sizeof(rsp), NULL, 0), -EINVAL);
	rnbd_enc_io(&io, id, 0, RNBD_OP_WRITE, 4096, 0);
	expect("WRITE sent as an RTRS READ",
	       rnbd_clt_raw(c, RNBD_DIR_READ, &io, sizeof(io), buf, 4096), -EINVAL);
	/* the session still works */
	expect("a good READ after all that", rnbd_clt_io(c, RNBD_OP_READ, 0, 65536, buf), 0);
	rnbd_clt_close(c);
	rnbd_clt_free(c);
	printf("%s: %d unexpected answers\n", failed ? "FAILED" : "passed", failed);
	return failed ? 1 : 0;
}
