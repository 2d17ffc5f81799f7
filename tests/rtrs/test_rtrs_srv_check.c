/* The RTRS server's checks of what a client sends (ulp/rtrs/rtrs-srv-check.c), case by case:
 * every refusal reason once, next to the request it refuses made valid (the control), so a
 * check that stops refusing, or starts refusing good requests, fails here in the gcc and
 * sanitizer builds too (fuzz/fuzz_rtrs drives the same functions with libFuzzer). */
#include "rtrs-srv-check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); fails++; } } while (0)
#define REFUSED(why, expect) CHECK((why) && !strcmp((why), (expect)))

enum { QD = 4, CHUNK = 8192, MAX_HDR = 1024 };
static char buf[QD * CHUNK];

static uint32_t pl(uint32_t id, uint32_t off)
{
	return id << rtrs_mem_bits(QD) | off;
}

/* A WRITE trailer at chunk id offset off with usr_len bytes of user header before it. */
static void put_write(uint32_t id, uint32_t off, uint16_t usr_len, uint16_t type)
{
	memset(buf, 0, sizeof(buf));
	memcpy(buf + id * CHUNK + off, &type, 2);
	memcpy(buf + id * CHUNK + off + 2, &usr_len, 2);
}

/* A READ trailer with n descriptors of the given lengths. */
static void put_read(uint32_t id, uint32_t off, uint16_t usr_len, uint16_t n, const uint32_t *lens)
{
	struct rtrs_msg_rdma_read rd = { .type = RTRS_MSG_READ, .usr_len = usr_len,
					 .flags = RTRS_MSG_NEED_INVAL_F, .sg_cnt = n };

	memset(buf, 0, sizeof(buf));
	memcpy(buf + id * CHUNK + off, &rd, sizeof(rd));
	for (unsigned i = 0; i < n && off + sizeof(rd) + (i + 1) * 16 <= CHUNK; i++) {
		struct rtrs_sg_desc d = { 0x1000u * (i + 1), 0x42, lens[i] };

		memcpy(buf + id * CHUNK + off + sizeof(rd) + i * 16, &d, 16);
	}
}

int main(void)
{
	struct rtrs_srv_io io;
	const char *why;

	/* --- IO requests */
	put_write(2, 4096 + 32, 32, RTRS_MSG_WRITE);
	why = rtrs_srv_check_io(pl(2, 4096 + 32), 1, QD, CHUNK, MAX_HDR, buf, &io);
	CHECK(!why);
	CHECK(io.id == 2 && io.off == 4096 + 32 && io.dir == RTRS_WRITE && io.usr_len == 32 &&
	      io.datalen == 4096);
	/* the service connection carries IO too: the kernel's client sends RNBD's SESS_INFO, OPEN
	 * and CLOSE there (RTRS_ADMIN_CON); the same request is read the same way */
	why = rtrs_srv_check_io(pl(2, 4096 + 32), 0, QD, CHUNK, MAX_HDR, buf, &io);
	CHECK(!why);
	CHECK(io.id == 2 && io.off == 4096 + 32 && io.dir == RTRS_WRITE && io.usr_len == 32 &&
	      io.datalen == 4096);
	/* id 4 of 4: the payload's id bits reach past the queue depth */
	REFUSED(rtrs_srv_check_io(pl(4, 0), 1, QD, CHUNK, MAX_HDR, buf, &io),
		"chunk id >= queue depth");
	REFUSED(rtrs_srv_check_io(pl(3, CHUNK - 3), 1, QD, CHUNK, MAX_HDR, buf, &io),
		"offset outside the chunk");
	REFUSED(rtrs_srv_check_io(pl(3, CHUNK), 1, QD, CHUNK, MAX_HDR, buf, &io),
		"offset outside the chunk");
	put_write(0, 16, 32, RTRS_MSG_WRITE);		/* header longer than the offset */
	REFUSED(rtrs_srv_check_io(pl(0, 16), 1, QD, CHUNK, MAX_HDR, buf, &io), "user header length");
	put_write(0, 4000, MAX_HDR + 1, RTRS_MSG_WRITE);	/* longer than max_hdr_size */
	REFUSED(rtrs_srv_check_io(pl(0, 4000), 1, QD, CHUNK, MAX_HDR, buf, &io),
		"user header length");
	put_write(0, 4000, MAX_HDR, RTRS_MSG_WRITE);	/* control: exactly max_hdr_size */
	CHECK(!rtrs_srv_check_io(pl(0, 4000), 1, QD, CHUNK, MAX_HDR, buf, &io));
	put_write(1, 64, 8, RTRS_MSG_INFO_RSP);
	REFUSED(rtrs_srv_check_io(pl(1, 64), 1, QD, CHUNK, MAX_HDR, buf, &io), "message type");
	/* the last 4 bytes of the last chunk: a WRITE trailer fits, a READ one does not */
	put_write(3, CHUNK - 4, 0, RTRS_MSG_WRITE);
	CHECK(!rtrs_srv_check_io(pl(3, CHUNK - 4), 1, QD, CHUNK, MAX_HDR, buf, &io));
	CHECK(io.datalen == CHUNK - 4);
	put_write(3, CHUNK - 4, 0, RTRS_MSG_READ);
	REFUSED(rtrs_srv_check_io(pl(3, CHUNK - 4), 1, QD, CHUNK, MAX_HDR, buf, &io),
		"READ trailer outside the chunk");

	uint32_t lens[9] = { 1024, 512, 512, 0, 0, 0, 0, 0, 1 };
	put_read(1, 32, 32, 3, lens);
	why = rtrs_srv_check_io(pl(1, 32), 2, QD, CHUNK, MAX_HDR, buf, &io);
	CHECK(!why);
	CHECK(io.dir == RTRS_READ && io.sg_cnt == 3 && io.datalen == 2048 && io.usr_len == 32 &&
	      io.flags == RTRS_MSG_NEED_INVAL_F && io.desc[1].addr == 0x2000 && io.desc[2].len == 512);
	/* no descriptor: the kernel's client sends RNBD's FLUSH so (a READ that moves no data) */
	put_read(1, 32, 32, 0, lens);		/* put_read sets NEED_INVAL */
	REFUSED(rtrs_srv_check_io(pl(1, 32), 2, QD, CHUNK, MAX_HDR, buf, &io),
		"READ NEED_INVAL without descriptor");
	memset(buf + CHUNK + 32 + 4, 0, 2);	/* flags 0, as the kernel's FLUSH */
	why = rtrs_srv_check_io(pl(1, 32), 2, QD, CHUNK, MAX_HDR, buf, &io);
	CHECK(!why);
	CHECK(io.dir == RTRS_READ && io.sg_cnt == 0 && io.datalen == 0 && io.usr_len == 32);
	put_read(1, 32, 32, 9, lens);
	REFUSED(rtrs_srv_check_io(pl(1, 32), 2, QD, CHUNK, MAX_HDR, buf, &io), "READ descriptor count");
	put_read(1, 32, 32, 8, lens);			/* control: 8 descriptors */
	CHECK(!rtrs_srv_check_io(pl(1, 32), 2, QD, CHUNK, MAX_HDR, buf, &io));
	put_read(1, CHUNK - 8 - 16, 0, 2, lens);	/* the second descriptor leaves the chunk */
	REFUSED(rtrs_srv_check_io(pl(1, CHUNK - 8 - 16), 2, QD, CHUNK, MAX_HDR, buf, &io),
		"READ descriptor count");
	put_read(1, CHUNK - 8 - 16, 0, 1, lens);	/* control: one fits exactly */
	CHECK(!rtrs_srv_check_io(pl(1, CHUNK - 8 - 16), 2, QD, CHUNK, MAX_HDR, buf, &io));
	uint32_t big[2] = { CHUNK + 1, 0 };
	put_read(0, 0, 0, 1, big);
	REFUSED(rtrs_srv_check_io(pl(0, 0), 1, QD, CHUNK, MAX_HDR, buf, &io),
		"READ descriptor length > chunk");
	/* each within the chunk, the sum past the max IO size: the kernel's old bug */
	uint32_t sum[2] = { CHUNK - MAX_HDR, 1 };
	put_read(0, 0, 0, 2, sum);
	REFUSED(rtrs_srv_check_io(pl(0, 0), 1, QD, CHUNK, MAX_HDR, buf, &io),
		"READ length > max IO size");
	put_read(0, 0, 0, 1, sum);			/* control: exactly the max IO size */
	CHECK(!rtrs_srv_check_io(pl(0, 0), 1, QD, CHUNK, MAX_HDR, buf, &io));
	CHECK(io.datalen == CHUNK - MAX_HDR);
	uint32_t wrap[2] = { 0x80000000u, 0x80000000u };	/* would wrap a 32-bit sum */
	put_read(0, 0, 0, 2, wrap);
	CHECK(rtrs_srv_check_io(pl(0, 0), 1, QD, CHUNK, MAX_HDR, buf, &io) != NULL);

	/* --- CON_REQ */
	struct rtrs_msg_conn_req rq = { .magic = RTRS_MAGIC, .version = RTRS_PROTO_VER, .cid = 2,
					.cid_num = 3 }, out;
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == 0 && out.cid == 2);
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq) - 1, &out) == -EPROTO);
	CHECK(rtrs_srv_check_con_req(NULL, 0, &out) == -EPROTO);
	rq.version = 0x0201;				/* minor versions are compatible */
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == 0);
	rq.version = 0x0300;
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == -EPROTO);
	rq.version = RTRS_PROTO_VER;
	rq.magic = 0xBD1B;
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == -EPROTO);
	rq.magic = RTRS_MAGIC;
	rq.cid = 3;					/* cid == cid_num */
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == -EPROTO);
	rq.cid = 0;
	rq.cid_num = 0;
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == -EPROTO);
	rq.cid_num = RTRS_SRV_MAX_CONS + 1;
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == -EPROTO);
	rq.cid_num = RTRS_SRV_MAX_CONS;
	rq.cid = RTRS_SRV_MAX_CONS - 1;
	CHECK(rtrs_srv_check_con_req(&rq, sizeof(rq), &out) == 0);

	/* --- INFO_REQ */
	struct rtrs_msg_info_req ir = { .type = RTRS_MSG_INFO_REQ };
	char name[RTRS_NAME_MAX + 1];
	memcpy(ir.sessname, "host-a@srv", 10);
	CHECK(rtrs_srv_check_info_req(&ir, sizeof(ir), name) == 0 && !strcmp(name, "host-a@srv"));
	CHECK(rtrs_srv_check_info_req(&ir, sizeof(ir) - 1, name) == -EPROTO);
	memset(ir.sessname, 'x', sizeof(ir.sessname));	/* no NUL in the field: cut at 255 */
	CHECK(rtrs_srv_check_info_req(&ir, sizeof(ir), name) == 0 && strlen(name) == RTRS_NAME_MAX);
	ir.type = RTRS_MSG_READ;
	CHECK(rtrs_srv_check_info_req(&ir, sizeof(ir), name) == -EPROTO);

	if (fails) {
		fprintf(stderr, "test_rtrs_srv_check: %d check(s) FAILED\n", fails);
		return 1;
	}
	printf("test_rtrs_srv_check: ok\n");
	return 0;
}
