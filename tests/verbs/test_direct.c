/* SPDX-License-Identifier: MIT */
/*
 * The same-host direct path (docs/direct.md), between two processes: a forked target serves
 * commands over a socketpair, the parent is the requester.
 *  - WRITE and READ (1 MiB, several SGEs, inline, an MR registered at another IOVA) move the
 *    data with no packet reaching the target (its rx_packets stay put) and complete at once;
 *  - long ones, shared with the helper thread in chunks or not, place every byte;
 *  - a bad rkey, a range outside the MR, an MR without remote write: the WR goes as packets
 *    and fails with REM_ACCESS_ERR from the target's responder; nothing is written;
 *  - ordering: a WRITE posted behind a SEND that waits for a receive buffer (RNR) is not
 *    placed before that SEND executes;
 *  - deregistration: once ibv_dereg_mr has returned in the target, nothing more lands in that
 *    memory, while the requester keeps writing through the old key;
 *  - a target QP in ERR gets nothing;
 *  - a target killed with SIGKILL (its table left behind) gets nothing; the READ gives up;
 *  - a target with SOFTRDMA_DIRECT=0 exports no table: the same WRITE goes as packets;
 *  - WRITE with immediate: the data placed by the copy, one packet with the immediate only;
 *    the target's receive completes with the immediate and the length, after the data, and a
 *    stream of them posted without a poll is placed WR by WR; memory windows (type 1 bound by
 *    ibv_bind_mw, type 2 by a BIND_MW work request) are written through directly, and once
 *    unbound or invalidated their old key gets REM_ACCESS_ERR, nothing written.
 * Every check sees both processes: data as the target reads its own memory, counters of both.
 */
#include <endian.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"

#define WAIT_WC(cq, id, st, op) vu_expect_wc(cq, id, st, op, 10000, __LINE__)

#define TLEN (2u << 20)		/* the target's buffer: MR over the first half, a guard after */
#define MRLEN (1u << 20)
#define ROLEN 65536		/* a second MR without remote write, at TLEN - ROLEN */
#define WOFF (MRLEN + 65536)	/* an MR for windows only (bind rights, no remote access) */
#define WLEN (512u << 10)

/* ---- the target ---------------------------------------------------------------------------- */
struct cmd {
	char op;
	uint32_t off, len, seed;
};
struct target_info {
	struct vu_endpoint ep;		/* QP and the main MR */
	uint32_t ro_rkey;		/* MR without remote write (remote read only) */
	uint64_t ro_addr;
	uint32_t iova_rkey;		/* MR at IOVA over buf[MRLEN, MRLEN + 64 KiB) */
};
#define IOVA 0x40000000ull

struct target {
	struct vu_dev d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr, *ro, *rmr, *iv, *wm;
	struct ibv_mw *mw1, *mw2;
	uint8_t *buf, *rbuf;
};

/* Posts one local operation (signaled, wr_id 77) on the target's QP and waits for it; receive
 * completions met meanwhile are not expected here. Returns its status, or -2. */
static long target_local(struct target *t, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	wr->wr_id = 77;
	wr->send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(t->qp, wr, &bad))
		return -2;
	return vu_wait(t->cq, &wc, 5000) == 1 && wc.wr_id == 77 ? (long)wc.status : -2;
}

static int target_connect(int sock, struct target *t)
{
	struct target_info me;
	struct vu_endpoint peer;
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;

	if (t->qp)
		ibv_destroy_qp(t->qp);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	t->qp = vu_qp_create(&t->d, t->cq, t->cq, &q);
	if (!t->qp)
		return 1;
	memset(&me, 0, sizeof(me));
	me.ep.gid = t->d.gid;
	me.ep.qpn = t->qp->qp_num;
	me.ep.psn = 1000;
	me.ep.addr = (uintptr_t)t->buf;
	me.ep.rkey = t->mr ? t->mr->rkey : 0;
	me.ep.len = MRLEN;
	me.ro_rkey = t->ro->rkey;
	me.ro_addr = (uintptr_t)t->buf + TLEN - ROLEN;
	me.iova_rkey = t->iv->rkey;
	if (vu_sock_send(sock, &me, sizeof(me)) || vu_sock_recv(sock, &peer, sizeof(peer)))
		return 2;
	vu_conn_cfg_default(&c);
	c.sq_psn = me.ep.psn;
	c.rq_psn = peer.psn;
	return vu_qp_connect(t->qp, &c, &peer.gid, peer.qpn) ? 3 : 0;
}

static int target(int sock, void *arg)
{
	struct target t;
	struct cmd m;
	struct ibv_wc wc;

	if (arg)
		setenv("SOFTRDMA_DIRECT", "0", 1);	/* before the device opens */
	memset(&t, 0, sizeof(t));
	if (vu_open(&t.d))
		return 10;
	t.buf = aligned_alloc(4096, TLEN);
	t.rbuf = aligned_alloc(4096, 4096);
	if (!t.buf || !t.rbuf)
		return 11;
	memset(t.buf, 0, TLEN);
	t.mr = ibv_reg_mr(t.d.pd, t.buf, MRLEN, VU_ACCESS_ALL);
	t.ro = ibv_reg_mr(t.d.pd, t.buf + TLEN - ROLEN, ROLEN,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	t.rmr = ibv_reg_mr(t.d.pd, t.rbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	t.iv = ibv_reg_mr_iova(t.d.pd, t.buf + MRLEN, 65536, IOVA, VU_ACCESS_ALL);
	t.wm = ibv_reg_mr(t.d.pd, t.buf + WOFF, WLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	t.mw1 = ibv_alloc_mw(t.d.pd, IBV_MW_TYPE_1);
	t.mw2 = ibv_alloc_mw(t.d.pd, IBV_MW_TYPE_2);
	t.cq = ibv_create_cq(t.d.ctx, 256, NULL, NULL, 0);
	if (!t.mr || !t.ro || !t.rmr || !t.iv || !t.wm || !t.mw1 || !t.mw2 || !t.cq)
		return 12;
	long ready = target_connect(sock, &t);

	if (ready || vu_sock_send(sock, &ready, sizeof(ready)))
		return 13;
	for (;;) {
		long r = 0;

		if (vu_sock_recv(sock, &m, sizeof(m)))
			return 14;
		switch (m.op) {
		case 'F':	/* fill [off, off + len) with the byte `seed` */
			memset(t.buf + m.off, (int)m.seed, m.len);
			break;
		case 'C':	/* first offset not as vu_fill(seed) wrote it, or -1 */
			r = vu_check(t.buf + m.off, m.len, m.seed);
			break;
		case 'B':	/* first offset not equal to byte `seed`, or -1 */
			r = vu_check_byte(t.buf + m.off, m.len, (uint8_t)m.seed);
			break;
		case 'R':	/* post a receive; its completion is drained later */
			r = vu_post_recv(t.qp, 7, t.rmr, t.rbuf, 4096);
			break;
		case 'W':	/* wait for one receive completion */
			r = vu_wait(t.cq, &wc, 5000) == 1 ? (long)wc.status : -2;
			break;
		case 'E': {	/* move the QP to ERR */
			struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

			r = ibv_modify_qp(t.qp, &a, IBV_QP_STATE);
			while (vu_wait(t.cq, &wc, 50) == 1)
				;
			break;
		}
		case 'D': {	/* dereg the MR, then watch its memory: nothing may land in it */
			uint8_t *snap = malloc(MRLEN);

			r = ibv_dereg_mr(t.mr);
			t.mr = NULL;
			if (!snap)
				return 17;
			/* From the end backwards: a copy still running (forwards) is caught
			 * ahead of where it writes. */
			for (uint32_t off = MRLEN; off; off -= 4096)
				memcpy(snap + off - 4096, t.buf + off - 4096, 4096);
			vu_sleep_ms(300);
			if (!r) {
				r = -1;
				for (uint32_t i = 0; i < MRLEN && r < 0; i++)
					if (snap[i] != t.buf[i])
						r = i;
			}
			free(snap);
			break;
		}
		case 'I': {	/* one receive completion: byte_len << 32 | immediate, or < 0 */
			int k = vu_wait(t.cq, &wc, 5000);

			r = k != 1 ? -2 : wc.status ? -1000 - (long)wc.status
			    : wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ? -3
			    : (long)((uint64_t)wc.byte_len << 32 | be32toh(wc.imm_data));
			break;
		}
		case 'M': {	/* bind the type 1 window over [off, off + len) (0: unbind): its key */
			struct ibv_mw_bind b = { .wr_id = 77, .send_flags = IBV_SEND_SIGNALED };

			b.bind_info = (struct ibv_mw_bind_info){ t.wm, (uintptr_t)t.buf + m.off, m.len,
								 m.len ? IBV_ACCESS_REMOTE_WRITE : 0 };
			r = ibv_bind_mw(t.qp, t.mw1, &b) ? -2 : vu_wait(t.cq, &wc, 5000) == 1 &&
					wc.wr_id == 77 && !wc.status ? (long)t.mw1->rkey : -3;
			break;
		}
		case '2': {	/* bind the type 2 window to this QP (BIND_MW work request): its key */
			struct ibv_send_wr w = { .opcode = IBV_WR_BIND_MW };
			uint32_t k = ibv_inc_rkey(t.mw2->rkey);

			w.bind_mw.mw = t.mw2;
			w.bind_mw.rkey = k;
			w.bind_mw.bind_info = (struct ibv_mw_bind_info){
				t.wm, (uintptr_t)t.buf + m.off, m.len, IBV_ACCESS_REMOTE_WRITE };
			r = target_local(&t, &w);
			if (!r) {
				t.mw2->rkey = k;
				r = k;
			} else {
				r = -1000 - r;
			}
			break;
		}
		case 'L': {	/* LOCAL_INV of the type 2 window: the status */
			struct ibv_send_wr w = { .opcode = IBV_WR_LOCAL_INV,
						 .invalidate_rkey = t.mw2->rkey };

			r = target_local(&t, &w);
			break;
		}
		case 'N':	/* a new QP (after an error), connected to the parent's new one */
			r = target_connect(sock, &t);
			break;
		case 'Q':
			return 0;
		default:
			return 15;
		}
		if (vu_sock_send(sock, &r, sizeof(r)))
			return 16;
	}
}

/* ---- the requester ------------------------------------------------------------------------- */
static struct vu_dev dev;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qp;
static struct vu_buf lb;

struct tgt {
	struct vu_child ch;
	struct target_info ti;
};

static long tcmd(struct tgt *t, char op, uint32_t off, uint32_t len, uint32_t seed)
{
	struct cmd m = { .op = op, .off = off, .len = len, .seed = seed };
	long r = -100;

	REQUIRE(vu_sock_send(t->ch.sock, &m, sizeof(m)) == 0);
	if (op != 'N' && op != 'Q')	/* 'N': answered after the exchange; 'Q': never */
		REQUIRE(vu_sock_recv(t->ch.sock, &r, sizeof(r)) == 0);
	return r;
}

/* A new QP of ours, connected to the target's (current) one. */
static void connect_to(struct tgt *t, uint8_t timeout, uint8_t retry)
{
	struct vu_endpoint me;
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;

	if (qp)
		ibv_destroy_qp(qp);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.max_inline = 256;
	qp = vu_qp_create(&dev, scq, rcq, &q);
	REQUIRE(qp);
	REQUIRE(vu_sock_recv(t->ch.sock, &t->ti, sizeof(t->ti)) == 0);
	memset(&me, 0, sizeof(me));
	me.gid = dev.gid;
	me.qpn = qp->qp_num;
	me.psn = 2000;
	REQUIRE(vu_sock_send(t->ch.sock, &me, sizeof(me)) == 0);
	vu_conn_cfg_default(&c);
	c.sq_psn = me.psn;
	c.rq_psn = t->ti.ep.psn;
	c.timeout = timeout;
	c.retry_cnt = retry;
	REQUIRE(vu_qp_connect(qp, &c, &t->ti.ep.gid, t->ti.ep.qpn) == 0);
	/* The target's QP is in RTS too before anything is posted (else a first WRITE would
	 * find it in INIT and go as packets). */
	long r = -1;

	REQUIRE(vu_sock_recv(t->ch.sock, &r, sizeof(r)) == 0 && r == 0);
}

static void reconnect(struct tgt *t, uint8_t timeout, uint8_t retry)
{
	tcmd(t, 'N', 0, 0, 0);
	connect_to(t, timeout, retry);
}

static int64_t tstat(struct tgt *t, const char *name)
{
	return vu_stat_pid(t->ch.pid, name);
}

static void test_write_read(struct tgt *t)
{
	int64_t w0 = vu_stat("direct_writes"), r0 = vu_stat("direct_reads");
	int64_t rx0 = tstat(t, "rx_packets");
	uint64_t ra = t->ti.ep.addr;

	/* 1 MiB WRITE: the whole MR. */
	vu_fill(lb.p, MRLEN, 11);
	CHECK_EQ(vu_post_rdma(qp, 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, MRLEN, ra, t->ti.ep.rkey,
			      IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'C', 0, MRLEN, 11), -1);

	/* Gathered from three SGEs into the middle of the MR. */
	{
		struct ibv_sge sg[3] = {
			{ (uintptr_t)lb.p + MRLEN, 1000, lb.mr->lkey },
			{ (uintptr_t)lb.p + MRLEN + 5000, 3096, lb.mr->lkey },
			{ (uintptr_t)lb.p + MRLEN + 1000, 4000, lb.mr->lkey },
		};
		struct ibv_send_wr wr = { .wr_id = 2, .sg_list = sg, .num_sge = 3,
					  .opcode = IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		memset(lb.p + MRLEN, 0x5a, 9000);
		wr.wr.rdma.remote_addr = ra + 12345;
		wr.wr.rdma.rkey = t->ti.ep.rkey;
		CHECK_EQ(ibv_post_send(qp, &wr, &bad), 0);
		WAIT_WC(scq, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
		CHECK_EQ(tcmd(t, 'B', 12345, 8096, 0x5a), -1);
	}
	/* Inline. */
	memset(lb.p + MRLEN, 0x77, 200);
	CHECK_EQ(vu_post_rdma(qp, 3, IBV_WR_RDMA_WRITE, lb.mr, lb.p + MRLEN, 200, ra + 100000,
			      t->ti.ep.rkey, IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
	WAIT_WC(scq, 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'B', 100000, 200, 0x77), -1);

	/* READ it all back, including from the MR that allows remote read only. */
	tcmd(t, 'F', 0, MRLEN, 0);
	tcmd(t, 'F', TLEN - ROLEN, ROLEN, 0x33);
	vu_fill(lb.p + MRLEN, MRLEN, 12);
	CHECK_EQ(vu_post_rdma(qp, 4, IBV_WR_RDMA_WRITE, lb.mr, lb.p + MRLEN, MRLEN, ra,
			      t->ti.ep.rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 4, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	memset(lb.p, 0, MRLEN);
	CHECK_EQ(vu_post_rdma(qp, 5, IBV_WR_RDMA_READ, lb.mr, lb.p, MRLEN, ra, t->ti.ep.rkey,
			      IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 5, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	CHECK_EQ(vu_check(lb.p, MRLEN, 12), -1);
	CHECK_EQ(vu_post_rdma(qp, 6, IBV_WR_RDMA_READ, lb.mr, lb.p, ROLEN, t->ti.ro_addr,
			      t->ti.ro_rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 6, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	CHECK_EQ(vu_check_byte(lb.p, ROLEN, 0x33), -1);

	/* An MR registered at an IOVA other than its address: translated, not taken as is. */
	vu_fill(lb.p, 8192, 19);
	CHECK_EQ(vu_post_rdma(qp, 7, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 8192, IOVA + 4096,
			      t->ti.iova_rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 7, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'C', MRLEN + 4096, 8192, 19), -1);
	memset(lb.p, 0, 8192);
	CHECK_EQ(vu_post_rdma(qp, 8, IBV_WR_RDMA_READ, lb.mr, lb.p, 8192, IOVA + 4096,
			      t->ti.iova_rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 8, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	CHECK_EQ(vu_check(lb.p, 8192, 19), -1);

	CHECK_EQ(vu_stat("direct_writes") - w0, 5);
	CHECK_EQ(vu_stat("direct_reads") - r0, 3);
	/* Nothing reached the target as packets: 2 MiB of WRITEs are 2048 packets otherwise. */
	CHECK(tstat(t, "rx_packets") - rx0 < 10);
}

/*
 * A stream of small WRITEs (param direct_stream_min): the first goes direct, the ones posted
 * after it with no poll of the send CQ in between go as packets (in batches); once the
 * application has polled, the next one goes direct again. Every byte lands, in order.
 */
static void test_stream(struct tgt *t)
{
	int64_t w0 = vu_stat("direct_writes"), rx0 = tstat(t, "rx_packets");
	uint64_t ra = t->ti.ep.addr;

	tcmd(t, 'F', 0, 16 * 256, 0);
	vu_fill(lb.p, 16 * 256, 21);
	for (uint32_t i = 0; i < 16; i++)
		CHECK_EQ(vu_post_rdma(qp, 40 + i, IBV_WR_RDMA_WRITE, lb.mr, lb.p + i * 256, 256,
				      ra + i * 256, t->ti.ep.rkey, IBV_SEND_SIGNALED), 0);
	for (uint32_t i = 0; i < 16; i++)
		WAIT_WC(scq, 40 + i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'C', 0, 16 * 256, 21), -1);
	CHECK_EQ(vu_stat("direct_writes") - w0, 1);
	CHECK(tstat(t, "rx_packets") - rx0 >= 15);
	/* Polled since: direct again, and a large one in a stream stays direct. */
	vu_fill(lb.p, 65536, 22);
	CHECK_EQ(vu_post_rdma(qp, 60, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 32768, ra, t->ti.ep.rkey,
			      IBV_SEND_SIGNALED), 0);
	CHECK_EQ(vu_post_rdma(qp, 61, IBV_WR_RDMA_WRITE, lb.mr, lb.p + 32768, 32768, ra + 32768,
			      t->ti.ep.rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 60, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	WAIT_WC(scq, 61, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'C', 0, 65536, 22), -1);
	CHECK_EQ(vu_stat("direct_writes") - w0, 3);
}

/*
 * A long copy is shared with a helper thread, in chunks (src/transport/dcopy.c), or made
 * whole, whichever has been faster for its size; each way is probed every 64 copies. 80
 * WRITEs and 80 READs, each gathered from (scattered into) 4 SGEs of odd sizes, at an odd
 * target offset: chunk boundaries fall inside SGEs and pages. Every byte is checked, the
 * WRITEs' in the target's own memory.
 */
#define SPLIT_OFF 4097u
#define SPLIT_LEN (MRLEN - SPLIT_OFF - 3)

static void sge_split(struct ibv_sge *sg)
{
	static const uint32_t at[4] = { 3, 400000, 404100, 1000000 };
	static const uint32_t sz[3] = { 300001, 4095, 500000 };

	for (int i = 0; i < 4; i++) {
		sg[i].addr = (uintptr_t)lb.p + at[i];
		sg[i].length = i < 3 ? sz[i] : SPLIT_LEN - sz[0] - sz[1] - sz[2];
		sg[i].lkey = lb.mr->lkey;
	}
}

static void test_split(struct tgt *t)
{
	int64_t w0 = vu_stat("direct_writes"), r0 = vu_stat("direct_reads");
	int64_t h0 = vu_stat("direct_helper_bytes");
	uint8_t *pat = malloc(SPLIT_LEN);
	struct ibv_sge sg[4];
	uint32_t i, k, at;

	REQUIRE(pat);
	sge_split(sg);
	for (i = 0; i < 160; i++) {
		bool rd = i >= 80;
		uint32_t seed = rd ? 179 : 100 + i;
		struct ibv_send_wr wr = { .wr_id = 50 + i, .sg_list = sg, .num_sge = 4,
					  .opcode = rd ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		if (!rd)
			vu_fill(pat, SPLIT_LEN, seed);
		for (k = 0, at = 0; k < 4; at += sg[k].length, k++)
			if (rd)
				memset((void *)(uintptr_t)sg[k].addr, 0, sg[k].length);
			else
				memcpy((void *)(uintptr_t)sg[k].addr, pat + at, sg[k].length);
		wr.wr.rdma.remote_addr = t->ti.ep.addr + SPLIT_OFF;
		wr.wr.rdma.rkey = t->ti.ep.rkey;
		CHECK_EQ(ibv_post_send(qp, &wr, &bad), 0);
		WAIT_WC(scq, 50 + i, IBV_WC_SUCCESS,
			rd ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE);
		if (!rd) {
			CHECK_EQ(tcmd(t, 'C', SPLIT_OFF, SPLIT_LEN, seed), -1);
			continue;
		}
		for (k = 0, at = 0; k < 4; at += sg[k].length, k++)
			memcpy(pat + at, (void *)(uintptr_t)sg[k].addr, sg[k].length);
		CHECK_EQ(vu_check(pat, SPLIT_LEN, 179), -1);
	}
	free(pat);
	CHECK_EQ(vu_stat("direct_writes") - w0, 80);
	CHECK_EQ(vu_stat("direct_reads") - r0, 80);
	/* Whether the helper got a CPU in time is the scheduler's business: shown, not checked. */
	printf("split copies: the helper copied %lld of %u bytes\n",
	       (long long)(vu_stat("direct_helper_bytes") - h0), 160 * SPLIT_LEN);
}

/*
 * WRITE with immediate on the direct path, and memory windows. The data is placed by the copy
 * and one packet without payload carries the immediate: the target's receive completes with
 * the immediate and the WRITE's length, and its data is there. Windows are judged as the
 * responder judges them: a live one is written through directly; once unbound (type 1) or
 * invalidated (type 2), its old key goes as packets and gets REM_ACCESS_ERR, nothing written.
 */
static void test_write_imm_mw(struct tgt *t)
{
	int64_t i0 = vu_stat("direct_write_imms"), w0 = vu_stat("direct_writes");
	int64_t p0 = tstat(t, "rx_write_imm_placed"), rx0 = tstat(t, "rx_packets");
	uint64_t ra = t->ti.ep.addr;
	long r;

	/* One of 512 KiB: over packets it is 9 of them at least. */
	tcmd(t, 'F', 0, MRLEN, 0);
	vu_fill(lb.p, MRLEN / 2, 31);
	CHECK_EQ(tcmd(t, 'R', 0, 0, 0), 0);
	CHECK_EQ(vu_post_write_imm(qp, 70, lb.mr, lb.p, MRLEN / 2, ra, t->ti.ep.rkey, 0xabc123,
				   IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 70, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	r = tcmd(t, 'I', 0, 0, 0);
	CHECK_EQ(r, (long)((uint64_t)(MRLEN / 2) << 32 | 0xabc123));
	CHECK_EQ(tcmd(t, 'C', 0, MRLEN / 2, 31), -1);
	CHECK_EQ(vu_stat("direct_write_imms") - i0, 1);
	CHECK_EQ(tstat(t, "rx_write_imm_placed") - p0, 1);
	CHECK(tstat(t, "rx_packets") - rx0 < 4);

	/* A stream of 8 posted without a poll: each placed, the immediates in order. */
	for (uint32_t i = 0; i < 8; i++)
		CHECK_EQ(tcmd(t, 'R', 0, 0, 0), 0);
	vu_fill(lb.p, MRLEN, 32);
	for (uint32_t i = 0; i < 8; i++)
		CHECK_EQ(vu_post_write_imm(qp, 80 + i, lb.mr, lb.p + i * 65536, 65536,
					   ra + i * 65536, t->ti.ep.rkey, 0x100 + i, IBV_SEND_SIGNALED),
			 0);
	for (uint32_t i = 0; i < 8; i++)
		WAIT_WC(scq, 80 + i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	for (uint32_t i = 0; i < 8; i++)
		CHECK_EQ(tcmd(t, 'I', 0, 0, 0), (long)((uint64_t)65536 << 32 | (0x100 + i)));
	CHECK_EQ(tcmd(t, 'C', 0, 8 * 65536, 32), -1);
	CHECK_EQ(vu_stat("direct_write_imms") - i0, 9);
	CHECK_EQ(tstat(t, "rx_write_imm_placed") - p0, 9);

	/* A type 1 window over 256 KiB of the window MR: WRITE and WRITE with immediate. */
	tcmd(t, 'F', WOFF, WLEN, 0x66);
	long k1 = tcmd(t, 'M', WOFF, 262144, 0);
	CHECK(k1 >= 0);
	vu_fill(lb.p, 131072, 33);
	CHECK_EQ(vu_post_rdma(qp, 90, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 131072, ra + WOFF,
			      (uint32_t)k1, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 90, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'C', WOFF, 131072, 33), -1);
	CHECK_EQ(vu_stat("direct_writes") - w0, 1);
	CHECK_EQ(tcmd(t, 'R', 0, 0, 0), 0);
	vu_fill(lb.p, 131072, 34);
	CHECK_EQ(vu_post_write_imm(qp, 91, lb.mr, lb.p, 131072, ra + WOFF + 131072, (uint32_t)k1,
				   0x77, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 91, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'I', 0, 0, 0), (long)((uint64_t)131072 << 32 | 0x77));
	CHECK_EQ(tcmd(t, 'C', WOFF + 131072, 131072, 34), -1);
	CHECK_EQ(vu_stat("direct_write_imms") - i0, 10);
	/* Beyond the window (inside the MR): refused. */
	CHECK_EQ(vu_post_rdma(qp, 92, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 8192, ra + WOFF + 262144 - 4096,
			      (uint32_t)k1, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 92, IBV_WC_REM_ACCESS_ERR, -1);
	reconnect(t, 14, 7);
	CHECK_EQ(tcmd(t, 'B', WOFF + 262144, WLEN - 262144, 0x66), -1);
	/* Unbound: the old key is dead, over packets too; nothing written. */
	CHECK(tcmd(t, 'M', WOFF, 0, 0) >= 0);
	int64_t n0 = tstat(t, "access_naks_sent");
	tcmd(t, 'F', WOFF, WLEN, 0x67);
	CHECK_EQ(vu_post_rdma(qp, 93, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 131072, ra + WOFF,
			      (uint32_t)k1, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 93, IBV_WC_REM_ACCESS_ERR, -1);
	reconnect(t, 14, 7);
	CHECK_EQ(tcmd(t, 'R', 0, 0, 0), 0);
	CHECK_EQ(vu_post_write_imm(qp, 94, lb.mr, lb.p, 131072, ra + WOFF, (uint32_t)k1, 0x78,
				   IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 94, IBV_WC_REM_ACCESS_ERR, -1);
	CHECK(tcmd(t, 'I', 0, 0, 0) < 0);	/* flushed by the error, or none */
	reconnect(t, 14, 7);
	CHECK_EQ(tcmd(t, 'B', WOFF, WLEN, 0x67), -1);
	CHECK_EQ(tstat(t, "access_naks_sent") - n0, 2);

	/* A type 2 window bound to the target's QP: direct; after LOCAL_INV, refused. */
	long k2 = tcmd(t, '2', WOFF, 262144, 0);
	CHECK(k2 >= 0);
	CHECK_EQ(tcmd(t, 'R', 0, 0, 0), 0);
	vu_fill(lb.p, 131072, 35);
	CHECK_EQ(vu_post_write_imm(qp, 95, lb.mr, lb.p, 131072, ra + WOFF, (uint32_t)k2, 0x79,
				   IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 95, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'I', 0, 0, 0), (long)((uint64_t)131072 << 32 | 0x79));
	CHECK_EQ(tcmd(t, 'C', WOFF, 131072, 35), -1);
	CHECK_EQ(vu_stat("direct_write_imms") - i0, 11);
	CHECK_EQ(tcmd(t, 'L', 0, 0, 0), 0);
	tcmd(t, 'F', WOFF, WLEN, 0x68);
	CHECK_EQ(vu_post_rdma(qp, 96, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 131072, ra + WOFF,
			      (uint32_t)k2, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 96, IBV_WC_REM_ACCESS_ERR, -1);
	reconnect(t, 14, 7);
	CHECK_EQ(tcmd(t, 'B', WOFF, WLEN, 0x68), -1);
	CHECK_EQ(tstat(t, "access_naks_sent") - n0, 3);
}

/* Each of these fails at the target's responder, over packets; nothing is written. */
static void test_access_errors(struct tgt *t)
{
	uint64_t ra = t->ti.ep.addr;
	int64_t f0 = vu_stat("direct_fallbacks"), n0 = tstat(t, "access_naks_sent");

	const struct {
		const char *what;
		enum ibv_wr_opcode op;
		uint32_t len;
		uint64_t raddr;
		uint32_t rkey;
	} bad[] = {
		{ "a key of another generation", IBV_WR_RDMA_WRITE, 8192, ra, t->ti.ep.rkey ^ 0x5a },
		{ "past the end of the MR", IBV_WR_RDMA_WRITE, 8192, ra + MRLEN - 4096,
		  t->ti.ep.rkey },
		{ "an MR without remote write", IBV_WR_RDMA_WRITE, 4096, t->ti.ro_addr,
		  t->ti.ro_rkey },
		{ "a READ past the end", IBV_WR_RDMA_READ, 8192, ra + MRLEN - 4096, t->ti.ep.rkey },
	};

	tcmd(t, 'F', 0, TLEN, 0x11);
	vu_fill(lb.p, 8192, 13);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		printf("access error: %s\n", bad[i].what);
		CHECK_EQ(vu_post_rdma(qp, 10 + i, bad[i].op, lb.mr, lb.p, bad[i].len, bad[i].raddr,
				      bad[i].rkey, IBV_SEND_SIGNALED), 0);
		WAIT_WC(scq, 10 + i, IBV_WC_REM_ACCESS_ERR, -1);
		reconnect(t, 14, 7);	/* the error took both QPs to ERR */
	}
	CHECK_EQ(tcmd(t, 'B', 0, TLEN, 0x11), -1);	/* not a byte written anywhere */
	CHECK_EQ(vu_stat("direct_fallbacks") - f0, 4);
	CHECK_EQ(tstat(t, "access_naks_sent") - n0, 4);
}

/* A WRITE behind a SEND that waits for a receive buffer is not placed before the SEND runs. */
static void test_ordering(struct tgt *t)
{
	uint64_t ra = t->ti.ep.addr;

	tcmd(t, 'F', 0, 65536, 0x22);
	memset(lb.p, 0x44, 64);
	vu_fill(lb.p + 4096, 65536, 14);
	CHECK_EQ(vu_post_send(qp, 20, IBV_WR_SEND, lb.mr, lb.p, 64, 0, IBV_SEND_SIGNALED), 0);
	CHECK_EQ(vu_post_rdma(qp, 21, IBV_WR_RDMA_WRITE, lb.mr, lb.p + 4096, 65536, ra,
			      t->ti.ep.rkey, IBV_SEND_SIGNALED), 0);
	vu_sleep_ms(200);	/* the SEND is RNR-NAKed meanwhile */
	CHECK_EQ(tcmd(t, 'B', 0, 65536, 0x22), -1);
	CHECK_EQ(tcmd(t, 'R', 0, 0, 0), 0);
	WAIT_WC(scq, 20, IBV_WC_SUCCESS, IBV_WC_SEND);
	WAIT_WC(scq, 21, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'W', 0, 0, 0), IBV_WC_SUCCESS);
	CHECK_EQ(tcmd(t, 'C', 0, 65536, 14), -1);
}

/* A target QP in ERR receives nothing. */
static void test_target_error(struct tgt *t)
{
	tcmd(t, 'F', 0, 65536, 0x55);
	CHECK_EQ(tcmd(t, 'E', 0, 0, 0), 0);
	vu_fill(lb.p, 65536, 15);
	CHECK_EQ(vu_post_rdma(qp, 30, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 65536, t->ti.ep.addr,
			      t->ti.ep.rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 30, IBV_WC_RETRY_EXC_ERR, -1);
	CHECK_EQ(tcmd(t, 'B', 0, 65536, 0x55), -1);
}

/* The target deregisters its MR while we write through it: after ibv_dereg_mr returns,
 * nothing lands. Our WRITEs then fail (over packets, REM_ACCESS_ERR). */
static void test_dereg_race(struct tgt *t)
{
	struct cmd m = { .op = 'D' };
	struct ibv_wc wc;
	uint64_t id = 100;
	long r = -100;
	int errors = 0, writes = 0;

	/* Every WRITE changes every byte of the MR: one that landed after the dereg shows. */
	vu_fill(lb.p, MRLEN, 16);
	vu_fill(lb.p + MRLEN, MRLEN, 18);
	for (uint64_t t0 = vu_now_ms(); vu_now_ms() - t0 < 5000 && !errors;) {
		/* The target deregisters while WRITEs keep coming. */
		if (writes == 20)
			REQUIRE(vu_sock_send(t->ch.sock, &m, sizeof(m)) == 0);
		CHECK_EQ(vu_post_rdma(qp, id, IBV_WR_RDMA_WRITE, lb.mr, lb.p + (id & 1) * MRLEN,
				      MRLEN, t->ti.ep.addr, t->ti.ep.rkey, IBV_SEND_SIGNALED), 0);
		if (vu_wait(scq, &wc, 5000) != 1)
			break;
		if (wc.status != IBV_WC_SUCCESS) {
			CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
			errors++;
		}
		writes++;
		id++;
	}
	CHECK_EQ(errors, 1);
	CHECK(writes > 20);
	REQUIRE(vu_sock_recv(t->ch.sock, &r, sizeof(r)) == 0);
	CHECK_EQ(r, -1);	/* nothing changed in the memory after dereg returned */
	printf("dereg race: %d WRITEs, the last refused\n", writes);
}

/* A target killed (SIGKILL: its table stays behind, marked open) gets nothing, and nothing
 * breaks: the READ goes as packets to nobody and gives up. */
static void test_dead_target(struct tgt *t)
{
	int64_t r0 = vu_stat("direct_reads");
	int st;

	reconnect(t, 8, 1);	/* 1 ms timeout, one retry */
	kill(t->ch.pid, SIGKILL);
	CHECK_EQ(waitpid(t->ch.pid, &st, 0), t->ch.pid);
	close(t->ch.sock);
	CHECK_EQ(vu_post_rdma(qp, 50, IBV_WR_RDMA_READ, lb.mr, lb.p, ROLEN, t->ti.ro_addr,
			      t->ti.ro_rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 50, IBV_WC_RETRY_EXC_ERR, -1);
	CHECK_EQ(vu_stat("direct_reads"), r0);
}

static void test_target_without_direct(struct tgt *t)
{
	int64_t w0 = vu_stat("direct_writes");

	vu_fill(lb.p, MRLEN, 17);
	CHECK_EQ(vu_post_rdma(qp, 40, IBV_WR_RDMA_WRITE, lb.mr, lb.p, MRLEN, t->ti.ep.addr,
			      t->ti.ep.rkey, IBV_SEND_SIGNALED), 0);
	WAIT_WC(scq, 40, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK_EQ(tcmd(t, 'C', 0, MRLEN, 17), -1);
	CHECK_EQ(vu_stat("direct_writes"), w0);	/* no table to go by: packets */
	CHECK(tstat(t, "rx_packets") > 256);
}

int main(void)
{
	struct tgt t1, t2;

	sr_test_timeout(120);
	setenv("SOFTRDMA_DIRECT", "1", 1);
	/* Fork before this process opens a device (verbs_util.h). */
	REQUIRE(vu_fork(&t1.ch, target, NULL, 100) == 0);
	REQUIRE(vu_fork(&t2.ch, target, (void *)1, 100) == 0);
	REQUIRE(vu_open(&dev) == 0);
	scq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	rcq = ibv_create_cq(dev.ctx, 256, NULL, NULL, 0);
	REQUIRE(scq && rcq);
	REQUIRE(vu_buf_alloc(&dev, &lb, 2 * MRLEN, VU_ACCESS_ALL) == 0);

	connect_to(&t1, 14, 7);
	test_write_read(&t1);
	test_stream(&t1);
	test_split(&t1);
	test_write_imm_mw(&t1);
	test_access_errors(&t1);
	test_ordering(&t1);
	reconnect(&t1, 8, 1);	/* 1 ms timeout, one retry: the next WRITE must give up */
	test_target_error(&t1);
	reconnect(&t1, 14, 7);
	test_dereg_race(&t1);
	test_dead_target(&t1);

	ibv_destroy_qp(qp);
	qp = NULL;
	connect_to(&t2, 14, 7);
	test_target_without_direct(&t2);
	tcmd(&t2, 'Q', 0, 0, 0);
	CHECK_EQ(vu_child_wait(&t2.ch, 30), 0);
	return sr_test_done("test_direct");
}
