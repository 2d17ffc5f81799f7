/* SPDX-License-Identifier: MIT */
/*
 * The lone receive by recvfrom (parameter rx_plain, src/net/udp.c "the lone receive by
 * recvfrom"): while a polling application's datagrams come alone, the progress thread turns
 * UDP_GRO off and a receive of one datagram goes by recvfrom, which cannot see a coalesced
 * datagram's segment size. A raw peer (tests/common/rawpeer.c) sends SENDs to an RC QP that the
 * test polls without pause:
 *
 *  - lone SENDs, one every 200 us: the thread switches (rx_plain_on) within 5 s;
 *  - a GSO send of 8 SENDs of one size: with UDP_GRO off the kernel cuts it as it queues it (or,
 *    if the thread switched back meanwhile, the socket takes it whole); either way every SEND
 *    arrives intact and in order, with no ICRC failure;
 *  - a datagram of two valid packets glued together (no GSO): read as one packet it fails its
 *    ICRC, is dropped and counted (drop_icrc), and nothing completes for it;
 *  - lone SENDs again complete, the glued PSNs first.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <time.h>

#define FAKE_QPN 0x00c0de
#define NRECV 64
#define SLOT 64
#define PAY 16
#define BATCH 8
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf rbuf;
static struct rawpeer rp;
static struct ibv_qp *qp;
static struct ibv_cq *cq;
static uint32_t psn;		/* the peer's next PSN */
static uint32_t sent, done;	/* SENDs sent (by PSN order) and completed */

/* One SEND ONLY of PAY bytes, each the low byte of its PSN, with the ICRC for IPv4 ID id, at
 * p; returns its length. */
static size_t build_send(uint8_t *p, uint32_t n, uint16_t id)
{
	size_t len = rp_hdr_send(p, OPC(SEND_ONLY), qp->qp_num, n & 0xffffff, true);

	memset(p + len, (int)(n & 0xff), PAY);
	len += PAY + SR_ICRC_LEN;
	sr_st_le32(p + len - SR_ICRC_LEN, rp_icrc_id(&rp, p, len, id));
	return len;
}

static uint64_t now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

static void send_lone(void)
{
	uint8_t hdr[64], msg[PAY];
	size_t hlen = rp_hdr_send(hdr, OPC(SEND_ONLY), qp->qp_num, psn & 0xffffff, true);

	memset(msg, (int)(psn & 0xff), sizeof(msg));
	REQUIRE(rp_send(&rp, hdr, hlen, msg, sizeof(msg), 0) == 0);
	psn++;
	sent++;
}

/* Polls the CQ without pause for ms milliseconds (or until stop() says so), sending a lone SEND
 * every 200 us when lone; checks each completion (in order, its bytes) and posts its slot
 * again. */
static void pump(int ms, bool lone, bool (*stop)(void))
{
	uint64_t end = vu_now_ms() + (uint64_t)ms, next = 0;
	struct ibv_wc wc;
	int spins = 0;

	while (vu_now_ms() < end && !(stop && stop())) {
		uint64_t now = now_us();
		int n = ibv_poll_cq(cq, 1, &wc);

		REQUIRE(n >= 0);
		if (n) {
			uint8_t *p = rbuf.p + wc.wr_id * SLOT;

			CHECK_EQ(wc.status, IBV_WC_SUCCESS);
			CHECK_EQ(wc.opcode, IBV_WC_RECV);
			CHECK_EQ(wc.byte_len, PAY);
			if (p[0] != (uint8_t)done || p[PAY - 1] != (uint8_t)done)
				SR_FAIL("SEND %u: bytes %u..%u, expected %u", done, p[0], p[PAY - 1],
					(uint8_t)done);
			done++;
			memset(p, 0xee, SLOT);
			REQUIRE(vu_post_recv(qp, wc.wr_id, rbuf.mr, p, SLOT) == 0);
		}
		if (lone && sent - done < NRECV / 2 && now >= next) {
			send_lone();
			next = now + 200;
		}
		if (++spins % 4096 == 0)
			rp_drain(&rp);	/* the QP's ACKs */
	}
}

static bool switched(void)
{
	return vu_stat("rx_plain_on") > 0;
}

static bool caught_up(void)
{
	return done == sent;
}

int main(void)
{
	uint8_t buf[BATCH * 128];
	size_t len = 0, one = 0;
	int64_t icrc, rec;

	sr_test_timeout(120);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf, NRECV * SLOT, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 2 * NRECV, NULL, NULL, 0);
	REQUIRE(cq);
	qp = vu_qp_to_peer(&dev, cq, NULL, &rp.gid, FAKE_QPN, &rbuf, NRECV, SLOT);
	REQUIRE(qp);

	printf("lone SENDs while the test polls: the thread switches to recvfrom\n");
	pump(5000, true, switched);
	CHECK(switched());
	pump(2000, false, caught_up);
	CHECK_EQ(done, sent);
	printf("  %u SENDs, rx_plain_on %lld\n", done, (long long)vu_stat("rx_plain_on"));

	printf("a GSO send of %d SENDs of one size\n", BATCH);
	icrc = vu_stat("drop_icrc");
	rec = vu_stat("rx_id_recovered");
	for (uint16_t i = 0; i < BATCH; i++) {
		one = build_send(buf + len, psn, i);
		len += one;
		psn++;
		sent++;
	}
	REQUIRE(rp_send_gso(&rp, buf, len, (uint16_t)one) == 0);
	pump(5000, false, caught_up);
	CHECK_EQ(done, sent);
	CHECK_EQ(vu_stat("drop_icrc"), icrc);
	printf("  %s (IDs recovered: %lld)\n",
	       vu_stat("rx_id_recovered") > rec ? "cut by the kernel: UDP_GRO was off"
						: "taken whole: UDP_GRO was on",
	       (long long)(vu_stat("rx_id_recovered") - rec));

	printf("two packets glued into one datagram: dropped by its ICRC\n");
	pump(50, true, NULL);	/* lone again */
	pump(2000, false, caught_up);
	icrc = vu_stat("drop_icrc");
	len = build_send(buf, psn, 0);
	len += build_send(buf + len, psn + 1, 0);
	REQUIRE(rp_send_raw(&rp, buf, len) == 0);
	pump(300, false, NULL);
	CHECK_EQ(done, sent);
	CHECK_EQ(vu_stat("drop_icrc"), icrc + 1);
	pump(200, true, NULL);
	pump(2000, false, caught_up);
	CHECK_EQ(done, sent);
	CHECK(done > BATCH);

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&rbuf);
	vu_close(&dev);
	return sr_test_done("test_rx_plain");
}
