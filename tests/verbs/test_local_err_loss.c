/* SPDX-License-Identifier: MIT */
/*
 * A WRITE whose acknowledgement is lost, posted together with a WRITE that fails locally (a bad
 * lkey). The requester stops at the second (IBA 10.8.3.1: a local protection error, nothing more
 * is sent), but the first is outstanding: its retransmission timer must run, the resend must
 * leave, and once the peer acknowledges it the first completes with SUCCESS and the second with
 * IBV_WC_LOC_PROT_ERR. The peer is a raw UDP socket of this test (tests/common/rawpeer.c) that
 * drops the first copy of the WRITE (as if its ACK were lost) and acknowledges the resend.
 *
 * Run twice: with repair (the tail-loss probe may resend the one packet) and with
 * SOFTRDMA_REPAIR=0 (go-back-N: the timer rewinds the send queue, which must restart a
 * requester that had stopped at the failed WQE).
 */
#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAKE_QPN 0x00e0e0
#define RVA 0x300000000ull
#define RKEY 0x4321
#define P0 900u
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static void run(const char *repair)
{
	struct vu_dev dev;
	struct vu_buf lb;
	struct rawpeer rp;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct vu_conn_cfg c;
	struct ibv_wc wc;
	uint8_t buf[4096], hdr[64];
	struct sr_pkt pkt;
	int copies = 0;

	setenv("SOFTRDMA_REPAIR", repair, 1);
	printf("repair=%s\n", repair);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &lb, 4096, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	REQUIRE(cq);
	vu_conn_cfg_raw(&c, P0, 0);
	c.timeout = 12;		/* 16.8 ms */
	qp = vu_qp_connect_raw(&dev, cq, NULL, &c, &rp.gid, FAKE_QPN);

	memset(lb.p, 0x5a, 64);
	CHECK_EQ(vu_post_write_then_bad_lkey(qp, 1, lb.mr, lb.p, 64, RVA, RKEY), 0);

	/* The first copy is dropped; a resend must come (the IBA timeout is 16.8 ms; allow
	 * scheduling delays on a loaded machine). */
	while (copies < 2) {
		if (rp_recv(&rp, buf, sizeof(buf), &pkt, 3000) <= 0) {
			SR_FAIL("copy %d of the first WRITE did not come within 3 s", copies + 1);
			break;
		}
		if (pkt.opcode != OPC(WRITE_ONLY) || pkt.psn != P0) {
			SR_FAIL("got %s PSN %u, wanted the first WRITE (PSN %u)",
				sr_opcode_name(pkt.opcode), pkt.psn, P0);
			break;
		}
		copies++;
	}
	if (copies == 2) {
		size_t hlen = rp_hdr_ack(hdr, qp->qp_num, P0, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);

		REQUIRE(rp_send(&rp, hdr, hlen, NULL, 0, 0) == 0);
		if (!vu_wait(cq, &wc, 3000) || wc.wr_id != 1 || wc.status != IBV_WC_SUCCESS)
			SR_FAIL("first completion: %s, wanted wr_id 1 success", vu_wc_str(&wc));
		if (!vu_wait(cq, &wc, 3000) || wc.wr_id != 2 || wc.status != IBV_WC_LOC_PROT_ERR)
			SR_FAIL("second completion: %s, wanted wr_id 2 local protection error",
				vu_wc_str(&wc));
	}
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	rp_close(&rp);
	vu_buf_free(&lb);
	vu_close(&dev);
}

int main(void)
{
	int st;
	pid_t pid;

	sr_test_timeout(60);
	/* Each setting in a process of its own: parameters are read once per process. */
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		run("0");
		_exit(sr_test_done("test_local_err_loss (repair=0)"));
	}
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	run("1");
	return sr_test_done("test_local_err_loss");
}
