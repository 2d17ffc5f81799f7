/* The RTRS 2.0 wire layouts (ulp/rtrs/rtrs-proto.h) byte by byte against docs/rtrs.md, and the
 * immediate encodings. The API header must compile on its own. */
#include "rtrs.h"
#include "rtrs-proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); fails++; } } while (0)

int main(void)
{
	struct rtrs_msg_conn_req req;
	memset(&req, 0, sizeof(req));
	req.magic = RTRS_MAGIC;
	req.version = RTRS_PROTO_VER;
	req.cid = 0x0102;
	req.cid_num = 0x0304;
	req.recon_cnt = 0x0506;
	for (int i = 0; i < 16; i++) {
		req.sess_uuid[i] = (uint8_t)(0x10 + i);
		req.paths_uuid[i] = (uint8_t)(0x40 + i);
	}
	req.first_conn = RTRS_CON_REQ_FIRST_CONN;
	const uint8_t *b = (const uint8_t *)&req;
	CHECK(b[0] == 0 && b[1] == 0);
	CHECK(b[2] == 0xBD && b[3] == 0x1B);	/* magic 0x1BBD little endian */
	CHECK(b[4] == 0x00 && b[5] == 0x02);	/* version 2.0 = 0x0200 */
	CHECK(b[6] == 0x02 && b[7] == 0x01);
	CHECK(b[8] == 0x04 && b[9] == 0x03);
	CHECK(b[10] == 0x06 && b[11] == 0x05);
	CHECK(b[12] == 0x10 && b[27] == 0x1f);
	CHECK(b[28] == 0x40 && b[43] == 0x4f);
	CHECK(b[44] == 1);

	struct rtrs_msg_conn_rsp rsp;
	memset(&rsp, 0, sizeof(rsp));
	rsp.queue_depth = 512;
	rsp.max_io_size = 0x11223344;
	rsp.flags = RTRS_MSG_NEW_RKEY_F;
	b = (const uint8_t *)&rsp;
	CHECK(b[6] == 0x00 && b[7] == 0x02);
	CHECK(b[8] == 0x44 && b[11] == 0x11);
	CHECK(b[16] == 2);

	/* immediates */
	uint32_t t, p;
	rtrs_from_imm(rtrs_to_imm(RTRS_HB_ACK_IMM, 0), &t, &p);
	CHECK(t == RTRS_HB_ACK_IMM && p == 0);
	CHECK(rtrs_to_imm(RTRS_HB_MSG_IMM, 0) == 0x80000000u);
	uint32_t imm = rtrs_to_io_rsp_imm(511, -5, 1), id;
	int err;
	rtrs_from_imm(imm, &t, &p);
	CHECK(t == RTRS_IO_RSP_W_INV_IMM);
	rtrs_from_io_rsp_imm(p, &id, &err);
	CHECK(id == 511 && err == 5);
	CHECK(imm == (0x20000000u | (5u << 19) | 511u));
	/* mem_bits as the kernel: 28 - (ilog2(qd - 1) + 1) */
	CHECK(rtrs_mem_bits(512) == 19);
	CHECK(rtrs_mem_bits(513) == 18);
	CHECK(rtrs_mem_bits(2) == 27);
	CHECK(rtrs_mem_bits(65535) == 12);

	/* descriptor */
	struct rtrs_sg_desc d = { .addr = 0x0102030405060708ull, .key = 0xa0b0c0d0, .len = 4096 };
	b = (const uint8_t *)&d;
	CHECK(b[0] == 0x08 && b[7] == 0x01 && b[8] == 0xd0 && b[12] == 0x00 && b[13] == 0x10);

	if (fails)
		return 1;
	printf("ok\n");
	return 0;
}
