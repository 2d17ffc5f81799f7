/* SPDX-License-Identifier: MIT */
/*
 * Deferred ACKs (parameter ack_defer_us, src/transport/resp.c), watched packet by packet. The RC
 * QP's path points at a raw UDP socket of this test (tests/common/rawpeer.c), which plays the
 * peer: it sends one-byte WRITEs that ask for an ACK, and acknowledges the QP's own WRITEs.
 *
 * The rule: once the application has answered the last two messages with a send of its own, the
 * ACK of the next one waits for the answer and leaves right after it, in the same batch; if no
 * answer comes within ack_defer_us, the ACK leaves alone. A message left unanswered ends the
 * deferral; destroying the QP, or moving it to ERR or RESET, sends a deferred ACK at once; a peer whose packets do not carry
 * softrdma's mark (BTH resv6) never waits. The raw peer marks its packets unless told not to. ack_defer_us is 1 s here, so that
 * "held" and "late" are far apart from any scheduling delay.
 *
 * Last, the receiving side: a GSO datagram whose last, shorter packet is an ACK (what a
 * softrdma peer sends when it answers) has the ACK taken first, with the IPv4 ID of its place
 * in the batch.
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"
#include "core/core.h"	/* SR_ACK_LOOK_POLLING */

#include <linux/sockios.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>

#define FAKE_QPN 0x00d0d0
#define RVA 0x200000000ull
#define RKEY 0x5678
#define P0 700u			/* the QP's first request PSN */
#define DEFER_MS 1000
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf lb, tgt;
static struct rawpeer rp;
static struct ibv_qp *qp;
static struct ibv_cq *cq;
static uint32_t rpsn;		/* the peer's next request PSN */
static uint32_t spsn;		/* the QP's next request PSN */
static int answers;		/* wr_id of the QP's next WRITE */
static uint8_t mark;		/* BTH byte 4 of the peer's packets: softrdma's mark, or 0 */
static struct timespec t_write;	/* when the peer's last request left (CLOCK_REALTIME) */

/* The peer writes one byte (its PSN's low byte) into tgt, asking for an ACK. */
static void peer_write(void)
{
	clock_gettime(CLOCK_REALTIME, &t_write);
	REQUIRE(rp_send_write_byte(&rp, qp->qp_num, rpsn, true, mark,
				   (uint64_t)(uintptr_t)tgt.p + rpsn % 64, tgt.mr->rkey) == 0);
	rpsn++;
}

/* When the packet just read was sent, in ms after the peer's last message: the kernel's receive
 * timestamp (the raw peer's socket is on this host, so that is when it was sent). */
static double sent_after_ms(void)
{
	struct timespec at;

	REQUIRE(ioctl(rp.fd, SIOCGSTAMPNS, &at) == 0);
	return (at.tv_sec - t_write.tv_sec) * 1e3 + (at.tv_nsec - t_write.tv_nsec) / 1e6;
}

/* Set by a check that met a scheduling stall it cannot judge: the case runs again. */
static bool stalled;

/*
 * The next packet: an ACK of the peer's last request, or the QP's WRITE. `ms` is when it is
 * due; it is waited for STALL_MS longer, since a loaded machine can leave the progress thread
 * or this one without a CPU for that long (an ACK due at once came after 333 ms, 1 run in 13
 * beside two busy loops at load 19). An ACK due at once (ms below DEFER_MS) passes if it was
 * sent before the deferral could have ended, by its timestamp (a held ACK leaves DEFER_MS
 * after the message at the earliest); one sent later was held, or this test was not
 * scheduled for DEFER_MS and the deferral ended on its own (an ACK where the QP's answer was
 * due too): that case cannot be judged and runs again.
 */
#define STALL_MS (2 * DEFER_MS)
#define EXPECT_ACK(ms) expect(OPC(ACK), rpsn - 1, ms, __LINE__)
#define EXPECT_WRITE(ms) expect(OPC(WRITE_ONLY), spsn++, ms, __LINE__)
static bool expect(uint8_t op, uint32_t psn, int ms, int line)
{
	uint8_t buf[4096];
	struct sr_pkt pkt;
	double after_ms;

	if (rp_recv(&rp, buf, sizeof(buf), &pkt, ms + STALL_MS) <= 0) {
		SR_FAIL("line %d: no packet within %d ms (wanted %s PSN %u)", line, ms + STALL_MS,
			sr_opcode_name(op), psn);
		return false;
	}
	if (pkt.opcode == OPC(ACK) && pkt.psn == rpsn - 1 && ms < DEFER_MS &&
	    (after_ms = sent_after_ms()) >= DEFER_MS - 1) {
		printf("line %d: the ACK left %.0f ms after the message, held or this test not "
		       "scheduled: the case again\n", line, after_ms);
		stalled = true;
		return false;
	}
	if (pkt.opcode != op || pkt.psn != psn) {
		SR_FAIL("line %d: got %s PSN %u, wanted %s PSN %u", line,
			sr_opcode_name(pkt.opcode), pkt.psn, sr_opcode_name(op), psn);
		return false;
	}
	return true;
}

/* Nothing is sent for ms. */
#define EXPECT_NOTHING(ms) rp_expect_quiet(&rp, ms, "nothing", __LINE__)

/*
 * The ACK of the peer's last message is held: nothing is sent for ms. What a case does when
 * that ACK leaves anyway depends on when it left, by the kernel's receive timestamp of the
 * packet (the raw peer's socket is on this host, so that is when it was sent), not by when
 * this thread got to see it: before DEFER_MS after the message it was not held (a failure);
 * at DEFER_MS or later it was held and left late, as it should, while this test was not
 * scheduled for that long on a loaded machine, so the case cannot go on and runs again.
 */
enum held { HELD, STALLED, NOT_HELD };
#define EXPECT_HELD(ms) expect_held(ms, __LINE__)
static enum held expect_held(int ms, int line)
{
	struct sr_pkt pkt;
	double after_ms;

	if (rp_quiet(&rp, ms, &pkt))
		return HELD;
	after_ms = sent_after_ms();
	if (pkt.opcode == OPC(ACK) && pkt.psn == rpsn - 1 && after_ms >= DEFER_MS - 1) {
		printf("line %d: the held ACK left late (%.0f ms after the message) while this "
		       "test was not scheduled: the case again\n", line, after_ms);
		return STALLED;
	}
	SR_FAIL("line %d: %s PSN %u sent %.1f ms after the peer's message, wanted nothing before "
		"%d ms", line, sr_opcode_name(pkt.opcode), pkt.psn, after_ms, DEFER_MS);
	return NOT_HELD;
}

/* The peer acknowledges the QP's requests up to psn; the QP's WRITE completes. */
static void peer_ack(uint32_t psn)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_ack(hdr, qp->qp_num, psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
	struct ibv_wc wc;

	hdr[4] |= mark;
	REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
	do {	/* the peer's SENDs completed receive WQEs of the same CQ */
		if (!vu_wait(cq, &wc, 2000) || wc.status != IBV_WC_SUCCESS) {
			SR_FAIL("the QP's WRITE PSN %u: %s", psn, vu_wc_str(&wc));
			return;
		}
	} while (wc.opcode == IBV_WC_RECV);
}

/* The peer sends a 4-byte message, asking for an ACK (a receive WQE of the QP takes it). */
static void peer_send(void)
{
	uint8_t hdr[64], b[4] = { 'S', (uint8_t)rpsn, 0, 0 };
	size_t hlen = rp_hdr_send(hdr, OPC(SEND_ONLY), qp->qp_num, rpsn, true);

	hdr[4] |= mark;
	clock_gettime(CLOCK_REALTIME, &t_write);
	REQUIRE(rp_send(&rp, hdr, hlen, b, sizeof(b), 0) == 0);
	rpsn++;
}

/* The peer's two-packet WRITE of 1025 bytes into tgt + 1024: the FIRST (a full 1024-byte path
 * MTU) or the LAST (1 byte), each asking for an ACK. */
static void peer_write_part(bool first)
{
	uint8_t hdr[64], b[1024];
	size_t hlen = rp_hdr_write(hdr, first ? OPC(WRITE_FIRST) : OPC(WRITE_LAST), qp->qp_num,
				   rpsn, true, (uint64_t)(uintptr_t)tgt.p + 1024, tgt.mr->rkey, 1025);

	memset(b, (uint8_t)rpsn, sizeof(b));
	hdr[4] |= mark;
	clock_gettime(CLOCK_REALTIME, &t_write);
	REQUIRE(rp_send(&rp, hdr, hlen, b, first ? sizeof(b) : 1, 0) == 0);
	rpsn++;
}

/* The application answers: one byte WRITE to the peer. */
static void answer(void)
{
	int i = answers++;

	lb.p[i % 64] = (uint8_t)i;
	CHECK_EQ(vu_post_rdma(qp, (uint64_t)i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + i % 64, 1,
			      RVA + (uint64_t)i, RKEY, 0), 0);
}

static void destroy_qp(void)
{
	CHECK_EQ(ibv_destroy_qp(qp), 0);
	qp = NULL;
}

static void connect_qp(void)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_raw(&c, P0, 0);
	c.timeout = 0;	/* no retransmission: every packet below is one the test asked for */
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);
	rpsn = 0;
	spsn = P0;
	answers = 0;
}

/* Two messages, each answered: the next message's ACK is deferred. */
static bool ping_pong_twice(void)
{
	for (int i = 0; i < 2; i++) {
		peer_write();
		if (!EXPECT_ACK(DEFER_MS / 3))	/* not deferred yet: at once */
			return false;
		answer();
		if (!EXPECT_WRITE(DEFER_MS / 3))
			return false;
		peer_ack(spsn - 1);
	}
	return true;
}

static bool deferred_then_late_then_reset(void)
{
	uint64_t t0;
	int64_t with = vu_stat("acks_deferred"), late = vu_stat("acks_deferred_late");

	printf("an answered ping-pong defers the ACK to the answer; unanswered, it leaves late\n");
	connect_qp();
	if (!ping_pong_twice())
		return false;
	/* Third message: its ACK waits for the answer, then follows it. */
	peer_write();
	switch (EXPECT_HELD(DEFER_MS / 3)) {
	case STALLED: return true;
	case NOT_HELD: return false;
	case HELD: break;
	}
	answer();
	if (!EXPECT_WRITE(DEFER_MS / 3) || !EXPECT_ACK(DEFER_MS / 3))
		return false;
	CHECK_EQ(vu_stat("acks_deferred") - with, 1);
	peer_ack(spsn - 1);
	/* Fourth: no answer; the ACK leaves alone once ack_defer_us has passed (the progress
	 * thread looks every ack_defer_us, or every SR_ACK_LOOK_POLLING times that while the
	 * application polls: at most 5 times ack_defer_us). */
	t0 = vu_now_ms();
	peer_write();
	if (!EXPECT_ACK((SR_ACK_LOOK_POLLING + 2) * DEFER_MS))
		return false;
	CHECK(vu_now_ms() - t0 >= DEFER_MS - 20);
	CHECK_EQ(vu_stat("acks_deferred_late") - late, 1);
	/* Fifth: the fourth went unanswered, so no deferral any more. */
	peer_write();
	if (!EXPECT_ACK(DEFER_MS / 3))
		return false;
	CHECK_EQ(vu_stat("acks_deferred") - with, 1);
	destroy_qp();
	return false;
}

/* Three messages answered: the third one's ACK is held, and leaves after the answer. */
static enum held ping_pong_held(void)
{
	enum held h;

	if (!ping_pong_twice())
		return NOT_HELD;
	peer_write();
	h = EXPECT_HELD(DEFER_MS / 3);
	if (h != HELD)
		return h;
	answer();
	if (!EXPECT_WRITE(DEFER_MS / 3) || !EXPECT_ACK(DEFER_MS / 3))
		return NOT_HELD;
	peer_ack(spsn - 1);
	return HELD;
}

/*
 * In a ping-pong of long messages the requester asks for an ACK every half window, in the
 * middle of a message. No answer can come before the message ends: that ACK leaves at once
 * (held, it stalled the requester's window once per ack_defer_us). The ACK of the last packet
 * still waits for the answer.
 */
static bool mid_message_not_held(void)
{
	int64_t with = vu_stat("acks_deferred");

	printf("the ACK of a message's middle is not held; its last packet's is\n");
	connect_qp();
	switch (ping_pong_held()) {
	case STALLED: return true;
	case NOT_HELD: return false;
	case HELD: break;
	}
	peer_write_part(true);
	if (!EXPECT_ACK(DEFER_MS / 3))	/* at once */
		return false;
	peer_write_part(false);
	switch (EXPECT_HELD(DEFER_MS / 3)) {
	case STALLED: return true;
	case NOT_HELD: return false;
	case HELD: break;
	}
	answer();
	if (!EXPECT_WRITE(DEFER_MS / 3) || !EXPECT_ACK(DEFER_MS / 3))
		return false;
	CHECK_EQ(vu_stat("acks_deferred") - with, 2);
	CHECK_EQ(tgt.p[1024], (uint8_t)(rpsn - 2));
	CHECK_EQ(tgt.p[2048], (uint8_t)(rpsn - 1));
	destroy_qp();
	return false;
}

/*
 * UCX's rendezvous by WRITE, in miniature: SENDs the application answers, and a WRITE it does
 * not (the peer sends its next SEND only once the WRITE is acknowledged). The answered SENDs
 * do not vouch for the WRITE: its ACK leaves at once. The SEND after it still counts as
 * answered in a row, and its ACK waits for the answer.
 */
static bool unanswered_class_not_held(void)
{
	int64_t with = vu_stat("acks_deferred");

	printf("answered SENDs do not make an unanswered WRITE's ACK wait\n");
	connect_qp();
	for (int i = 0; i < 4; i++)
		CHECK_EQ(vu_post_recv(qp, 100 + i, tgt.mr, tgt.p + 2560 + 32 * i, 16), 0);
	for (int i = 0; i < 3; i++) {
		peer_send();
		if (i < 2) {
			if (!EXPECT_ACK(DEFER_MS / 3))	/* not deferred yet: at once */
				return false;
		} else {
			switch (EXPECT_HELD(DEFER_MS / 3)) {
			case STALLED: return true;
			case NOT_HELD: return false;
			case HELD: break;
			}
		}
		answer();
		if (!EXPECT_WRITE(DEFER_MS / 3) || (i == 2 && !EXPECT_ACK(DEFER_MS / 3)))
			return false;
		peer_ack(spsn - 1);
	}
	peer_write();
	if (!EXPECT_ACK(DEFER_MS / 3))	/* the WRITE: at once */
		return false;
	peer_send();
	switch (EXPECT_HELD(DEFER_MS / 3)) {
	case STALLED: return true;
	case NOT_HELD: return false;
	case HELD: break;
	}
	answer();
	if (!EXPECT_WRITE(DEFER_MS / 3) || !EXPECT_ACK(DEFER_MS / 3))
		return false;
	CHECK_EQ(vu_stat("acks_deferred") - with, 2);
	CHECK_EQ(memcmp(tgt.p + 2560 + 32 * 3, "S", 1), 0);
	destroy_qp();
	return false;
}

/* A peer that is not softrdma (no mark in its BTH) would see the answer before the ACK: it
 * gets every ACK at once. */
static bool not_toward_others(void)
{
	printf("toward another stack, ACKs are never deferred\n");
	mark = 0;
	connect_qp();
	if (ping_pong_twice()) {
		peer_write();
		EXPECT_ACK(DEFER_MS / 3);
	}
	destroy_qp();
	mark = SR_BTH_SR_MARK;
	return false;
}

static bool destroy_sends_it(void)
{
	printf("destroying the QP sends a deferred ACK at once\n");
	connect_qp();
	if (!ping_pong_twice())
		return false;
	peer_write();
	switch (EXPECT_HELD(DEFER_MS / 6)) {
	case STALLED: return true;
	case NOT_HELD: return false;
	case HELD: break;
	}
	destroy_qp();
	EXPECT_ACK(DEFER_MS / 3);
	return false;
}

/* Moving the QP to ERR (rdma_disconnect does, right after the application saw the last
 * message) or straight from RTS to RESET sends the ACK it held: the peer's message was
 * consumed, and on a NIC its ACK left on receipt. Dropped with the state, the peer could only
 * resend into a QP that no longer answers. */
static bool state_change_sends_it(enum ibv_qp_state to, const char *name)
{
	struct ibv_qp_attr a = { .qp_state = to };

	printf("moving the QP to %s sends a deferred ACK first\n", name);
	connect_qp();
	if (!ping_pong_twice())
		return false;
	peer_write();
	switch (EXPECT_HELD(DEFER_MS / 6)) {
	case STALLED: return true;
	case NOT_HELD: return false;
	case HELD: break;
	}
	CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
	EXPECT_ACK(DEFER_MS / 3);
	destroy_qp();
	EXPECT_NOTHING(DEFER_MS / 6);	/* once */
	return false;
}

static bool error_sends_it(void)
{
	return state_change_sends_it(IBV_QPS_ERR, "ERR");
}

static bool reset_sends_it(void)
{
	return state_change_sends_it(IBV_QPS_RESET, "RESET");
}

/*
 * The peer's GSO datagram [SEND request, ACK of the QP's WRITE]: the ACK is packet 1 (IPv4 ID 1
 * in its ICRC). The ACK is taken first, as its sender meant: the WRITE's completion comes
 * before the SEND's on the shared CQ. Both take effect, with no ICRC failure and no ID to
 * recover.
 */
static bool gso_request_then_ack(void)
{
	uint8_t buf[256], *ack;
	size_t slen, alen;
	struct ibv_wc wc;
	int64_t icrc = vu_stat("drop_icrc"), rec = vu_stat("rx_id_recovered");

	printf("a coalesced [request, ACK] from a softrdma peer: the ACK first\n");
	connect_qp();
	CHECK_EQ(vu_post_recv(qp, 99, tgt.mr, tgt.p + 100, 16), 0);
	answer();
	if (!EXPECT_WRITE(DEFER_MS / 3))
		return false;
	/* Packet 0: SEND ONLY of 5 bytes (pad 3), ID 0: longer than the ACK. */
	slen = rp_hdr_send(buf, OPC(SEND_ONLY), qp->qp_num, rpsn, true);
	buf[1] = (uint8_t)((buf[1] & ~SR_BTH_PAD_MASK) | (3 << SR_BTH_PAD_SHIFT));
	memcpy(buf + slen, "Zabcd\0\0\0", 8);
	slen += 8 + SR_ICRC_LEN;
	sr_st_le32(buf + slen - SR_ICRC_LEN, rp_icrc_id(&rp, buf, slen, 0));
	/* Packet 1: the ACK of the QP's WRITE, ID 1. */
	ack = buf + slen;
	alen = rp_hdr_ack(ack, qp->qp_num, spsn - 1, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
	alen += SR_ICRC_LEN;
	REQUIRE(alen < slen);
	sr_st_le32(ack + alen - SR_ICRC_LEN, rp_icrc_id(&rp, ack, alen, 1));
	clock_gettime(CLOCK_REALTIME, &t_write);
	REQUIRE(rp_send_gso(&rp, buf, slen + alen, (uint16_t)slen) == 0);
	rpsn++;
	if (!vu_wait(cq, &wc, 2000) || wc.status != IBV_WC_SUCCESS ||
	    wc.opcode != IBV_WC_RDMA_WRITE)
		SR_FAIL("first completion: %s, wanted the QP's WRITE", vu_wc_str(&wc));
	if (!vu_wait(cq, &wc, 2000) || wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV ||
	    wc.byte_len != 5)
		SR_FAIL("second completion: %s, wanted the peer's SEND", vu_wc_str(&wc));
	EXPECT_ACK(DEFER_MS / 3);	/* no ping-pong yet: acknowledged at once */
	CHECK_EQ(memcmp(tgt.p + 100, "Zabcd", 5), 0);
	CHECK_EQ(vu_stat("drop_icrc") - icrc, 0);
	CHECK_EQ(vu_stat("rx_id_recovered") - rec, 0);
	destroy_qp();
	return false;
}

/* A case returns true when it was stalled (EXPECT_HELD), or sets `stalled` (expect), and must
 * run again; a QP it left (a failed or stalled case) is destroyed, which also takes its
 * completions out of the CQ, and what it still sent is read, so that the next case starts
 * from a quiet socket. */
static void run_case(bool (*run)(void))
{
	for (int tries = 0;; tries++) {
		bool again;

		stalled = false;
		again = run() || stalled;

		if (qp)
			destroy_qp();
		for (int k = 0; k < 64 && !rp_quiet(&rp, DEFER_MS / 10, &(struct sr_pkt){ 0 }); k++)
			;	/* what a stalled or failed case left on its way */
		if (!again)
			return;
		if (tries == 4) {	/* a real deferral where none belongs "stalls" every time */
			SR_FAIL("stalled five times in a row");
			return;
		}
	}
}

int main(void)
{
	char v[16];

	sr_test_timeout(60);
	snprintf(v, sizeof(v), "%d", DEFER_MS * 1000);
	setenv("SOFTRDMA_ACK_DEFER_US", v, 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &tgt, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	{
		/* The first SIOCGSTAMPNS turns on receive timestamps (EXPECT_HELD) */
		struct timespec ts;

		(void)ioctl(rp.fd, SIOCGSTAMPNS, &ts);
	}
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);

	mark = SR_BTH_SR_MARK;
	run_case(deferred_then_late_then_reset);
	run_case(not_toward_others);
	run_case(destroy_sends_it);
	run_case(error_sends_it);
	run_case(reset_sends_it);
	run_case(gso_request_then_ack);
	run_case(mid_message_not_held);
	run_case(unanswered_class_not_held);

	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&tgt);
	vu_buf_free(&lb);
	vu_close(&dev);
	return sr_test_done("test_ack_defer");
}
