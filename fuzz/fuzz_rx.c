/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: received datagrams into a real soft NIC (the engine of src/, built with
 * ASan and UBSan), delivered through sr_net_rx_datagram, the receive loop's own per-datagram
 * path (parse, ICRC, demultiplex, responder, completer), without a socket. Input format:
 * fuzz_rx.h. Built twice: fuzz_rx (one packet per input) and fuzz_rx_seq (-DFUZZ_SEQ: a list of
 * packets and clock steps, reaching retransmission, RNR waits, duplicate READ replay and the
 * out-of-order buffer).
 *
 * Every input gets a fresh set of verbs objects on the one device: two PDs, a CQ, an SRQ, QPs
 * of every type in several states (FQ_*, XRC target included), MRs with and without remote
 * rights, a type 1 and a type 2 memory window, a fast-registration MR with an invalidated and
 * a valid key generation, an ODP MR over a hole, pending READ and ATOMIC requests (FK_* for
 * the keys). The registered
 * memory sits between PROT_NONE guard pages, with canaries between the MRs. After each input
 * the harness checks that nothing changed that no key allowed a peer to change: the canaries,
 * the remote-read-only MR, the windows' MR outside the windows, the bytes of the local MR that
 * are in no receive WQE and no READ/ATOMIC result, the page the invalidated generation mapped.
 * (Not checked: what a valid key lets a peer write: the all-rights MR, the windows, the valid
 * fast-registration map, the other PD's MR, which its own QP may reach.) The guard pages catch
 * anything beyond. A change aborts, which libFuzzer reports as a crash with the input.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <softrdma/softrdma.h>

#include "core/core.h"
#include "net/net.h"		/* sr_net_rx_datagram */
#include "transport/transport.h"	/* sr_resp_flush_acks, sr_qp_timers */
#include "wire/icrc.h"
#include "wire/pkt.h"
#include "fuzz_rx.h"

#define PAGE 4096
/* Registered memory: offsets in the data area (between the guard pages). */
#define OFF_RW 0
#define LEN_RW 8192
#define OFF_RO 8704
#define LEN_RO 4096
#define OFF_LOCAL 13312
#define LEN_LOCAL 24576
#define OFF_MWMR 38400
#define LEN_MWMR 8192
#define MW_OFF 1024		/* the window, inside the MR */
#define MW_LEN 4096
#define MW2_OFF 5120		/* the type 2 window, inside the same MR */
#define MW2_LEN 2048
#define OFF_PD2 47104
#define LEN_PD2 5632
#define OFF_FROLD 53248		/* the page the invalidated generation of the fast-reg MR mapped */
#define OFF_FR 57344		/* the two pages its valid generation maps (second page first) */
#define DATA_LEN 65536		/* 16 pages: the last map ends at the upper guard page */
/* In the local MR: receive buffers [0, 16640) (FQ_RC 4 x 2048, SRQ 4 x 512, UC 4 x 512, UD
 * 4 x 1088: multi-packet SENDs fit), send sources [16640, 18176) and [20992, 21056) (read
 * only), READ target [18176, 20676), ATOMIC results [20736, 20752); the rest in no WQE. */
#define LOC_RC 0
#define LOC_SRQ 8192
#define LOC_UC 10240
#define LOC_UD 12288
#define LOC_SRC 16640
#define LOC_READ 18176
#define LOC_ATOMIC 20736
#define LOC_SRC2 20992
#define LOC_XRC 22528		/* XRC SRQ receive buffers: 2 x 1024 */
#define PEER_QPN 0x000123

static struct ibv_context *ctx;
static struct sr_nic *nic;
static uint8_t *data;			/* DATA_LEN bytes between two guard pages */
static uint8_t *odp;			/* 3 pages (the middle one PROT_NONE) between guard pages */
static uint8_t ref[DATA_LEN];		/* what data holds before each input */
static int sink = -1;			/* the connected peer's address: a socket nobody reads */
static struct sr_addr peer, stranger;
static union ibv_gid peer_gid;
static uint64_t clock_skew;		/* fuzz_rx_seq: how far the clock was stepped */

/* One input's objects. */
static struct {
	struct ibv_pd *pd, *pd2;
	struct ibv_cq *cq;
	struct ibv_srq *srq, *xsrq;
	struct ibv_xrcd *xrcd;
	struct ibv_mr *mr[FK_COUNT];
	struct ibv_mw *mw, *mw2;
	struct ibv_qp *qp[FQ_COUNT];
	uint32_t gone_qpn, xsrqn;
	uint32_t key[FK_COUNT];
	uint64_t base[FK_COUNT];
	uint32_t len[FK_COUNT];
} o;

static void die(const char *what)
{
	fprintf(stderr, "fuzz_rx: setup failed: %s (errno %d)\n", what, errno);
	abort();
}

static void addr_of_sock(int fd, struct sr_addr *a)
{
	struct sockaddr_in sin;
	socklen_t l = sizeof(sin);

	if (getsockname(fd, (struct sockaddr *)&sin, &l))
		die("getsockname");
	sr_addr_from_sockaddr(a, (struct sockaddr *)&sin);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct ibv_device **list;
	struct sockaddr_in sin = { .sin_family = AF_INET };
	int n;

	/* Nothing but what the input says: no same-host shortcut, no batching, no receive by
	 * polling (there is no socket traffic), quiet logs. */
	setenv("SOFTRDMA_DIRECT", "0", 1);
	setenv("SOFTRDMA_GSO", "0", 1);
	setenv("SOFTRDMA_POLL_RX", "0", 1);
	setenv("SOFTRDMA_LOG", "error", 1);
	setenv("SOFTRDMA_STATS_DIR", "/tmp", 0);
	list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	ibv_free_device_list(list);
	nic = sr_ctx(ctx)->nic;
	/* The progress thread would receive and run timers concurrently: stop it, so that an
	 * input means the same thing every time (fuzz_rx_seq runs the timers itself). */
	atomic_store(&nic->stop, true);
	sr_nic_kick(nic);
	pthread_join(nic->thread, NULL);
	nic->thread = 0;

	sink = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (sink < 0 || bind(sink, (struct sockaddr *)&sin, sizeof(sin)))
		die("sink socket");
	n = 4096;
	setsockopt(sink, SOL_SOCKET, SO_RCVBUF, &n, sizeof(n));
	addr_of_sock(sink, &peer);
	sr_gid_from_addr(&peer_gid, &peer);
	stranger = peer;
	stranger.port = (uint16_t)(peer.port ^ 0x5a5a);

	data = mmap(NULL, DATA_LEN + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (data == MAP_FAILED)
		die("mmap");
	data += PAGE;
	if (mprotect(data, DATA_LEN, PROT_READ | PROT_WRITE))
		die("mprotect");
	for (size_t i = 0; i < DATA_LEN; i++)
		ref[i] = (uint8_t)(i * 131 + (i >> 8) * 7 + 0x5c);
	odp = mmap(NULL, 5 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (odp == MAP_FAILED)
		die("mmap (ODP)");
	odp += PAGE;
	if (mprotect(odp, PAGE, PROT_READ | PROT_WRITE) ||
	    mprotect(odp + 2 * PAGE, PAGE, PROT_READ | PROT_WRITE))
		die("mprotect (ODP)");
	return 0;
}

static struct ibv_qp *qp_new(struct ibv_pd *pd, enum ibv_qp_type type, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = o.cq, .recv_cq = o.cq, .srq = srq, .qp_type = type,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 2, .max_inline_data = 64 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);

	if (!qp)
		die("ibv_create_qp");
	return qp;
}

/* Takes qp towards `to`; RC and UC connect to the sink as peer. */
static void qp_move(struct ibv_qp *qp, enum ibv_qp_state to)
{
	struct ibv_qp_attr a;
	bool ud = qp->qp_type == IBV_QPT_UD;

	if (to == IBV_QPS_RESET)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = FUZZ_QKEY;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			    IBV_ACCESS_REMOTE_ATOMIC | SOFTRDMA_ACCESS_FLUSH_GLOBAL;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS)))
		die("INIT");
	if (to == IBV_QPS_INIT)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (!ud) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = PEER_QPN;
		a.rq_psn = 1000;
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 1;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = peer_gid;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
	}
	if (ibv_modify_qp(qp, &a, ud ? IBV_QP_STATE :
				  qp->qp_type == IBV_QPT_UC ?
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN :
				  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	if (to == IBV_QPS_RTR)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 5000;
	a.timeout = 10;
	a.retry_cnt = 3;
	a.rnr_retry = 2;
	a.max_rd_atomic = 4;
	if (ibv_modify_qp(qp, &a, ud ? IBV_QP_STATE | IBV_QP_SQ_PSN :
				  qp->qp_type == IBV_QPT_UC ? IBV_QP_STATE | IBV_QP_SQ_PSN :
				  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
	if (to == IBV_QPS_RTS)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = to;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("SQD/ERR");
}

static void post_recv(struct ibv_qp *qp, struct ibv_srq *srq, uint32_t off, uint32_t len)
{
	struct ibv_sge s = { (uintptr_t)(data + OFF_LOCAL + off), len, o.mr[FK_LOCAL]->lkey };
	struct ibv_recv_wr wr = { .wr_id = off, .sg_list = &s, .num_sge = 1 }, *bad;

	if (srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad))
		die("post_recv");
}

static void post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr,
		      uint32_t loff, uint32_t len, uint64_t rva, uint32_t rkey)
{
	struct ibv_sge s = { (uintptr_t)mr->addr + loff, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = loff, .sg_list = &s, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = rva;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 2;
	} else {
		wr.wr.rdma.remote_addr = rva;
		wr.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(qp, &wr, &bad))
		die("post_send");
}

static void drain_cq(void)
{
	struct ibv_wc wc[16];

	while (ibv_poll_cq(o.cq, 16, wc) > 0)
		;
}

/* A local work request of FQ_RC (REG_MR, LOCAL_INV), executed in SQ order: its completion. */
static void local_wr(struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	wr->wr_id = 0xfeed;
	wr->send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(o.qp[FQ_RC], wr, &bad))
		die("post REG_MR/LOCAL_INV");
	for (int i = 0; i < 1000; i++) {
		if (ibv_poll_cq(o.cq, 1, &wc) != 1 || wc.wr_id != 0xfeed)
			continue;	/* (the window's bind completes here too) */
		if (wc.status != IBV_WC_SUCCESS)
			die("REG_MR/LOCAL_INV failed");
		return;
	}
	die("no REG_MR/LOCAL_INV completion");
}

static void fast_reg(uint32_t key, unsigned access)
{
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	softrdma_wr_set_reg_mr(&wr, o.mr[FK_FR], key, access);
	local_wr(&wr);
}

static void local_inv(uint32_t key)
{
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_LOCAL_INV;
	wr.invalidate_rkey = key;
	local_wr(&wr);
}

static struct ibv_mr *reg(struct ibv_pd *pd, int k, uint32_t off, uint32_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, data + off, len, access);

	if (!mr)
		die("ibv_reg_mr");
	o.key[k] = mr->rkey;
	o.base[k] = (uintptr_t)(data + off);
	o.len[k] = len;
	return mr;
}

static void setup(void)
{
	const int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			IBV_ACCESS_REMOTE_ATOMIC | SOFTRDMA_ACCESS_FLUSH_GLOBAL;

	memset(&o, 0, sizeof(o));
	memcpy(data, ref, DATA_LEN);
	o.pd = ibv_alloc_pd(ctx);
	o.pd2 = ibv_alloc_pd(ctx);
	o.cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!o.pd || !o.pd2 || !o.cq)
		die("pd/cq");
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };

	o.srq = ibv_create_srq(o.pd, &sa);
	if (!o.srq)
		die("srq");
	o.mr[FK_RW] = reg(o.pd, FK_RW, OFF_RW, LEN_RW, all);
	o.mr[FK_RO] = reg(o.pd, FK_RO, OFF_RO, LEN_RO, IBV_ACCESS_REMOTE_READ);
	o.mr[FK_LOCAL] = reg(o.pd, FK_LOCAL, OFF_LOCAL, LEN_LOCAL, IBV_ACCESS_LOCAL_WRITE);
	o.mr[FK_MWMR] = reg(o.pd, FK_MWMR, OFF_MWMR, LEN_MWMR,
			    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	o.mr[FK_PD2] = reg(o.pd2, FK_PD2, OFF_PD2, LEN_PD2, all);
	o.mr[FK_ODP] = ibv_reg_mr(o.pd, odp, 3 * PAGE, all | IBV_ACCESS_ON_DEMAND);
	if (!o.mr[FK_ODP])
		die("ibv_reg_mr (ODP)");
	o.key[FK_ODP] = o.mr[FK_ODP]->rkey;
	o.base[FK_ODP] = (uintptr_t)odp;
	o.len[FK_ODP] = 3 * PAGE;
	o.key[FK_BADTAG] = o.key[FK_RW] ^ 0x5a;
	o.key[FK_OWN] = 0;
	o.base[FK_BADTAG] = o.base[FK_RW];
	o.len[FK_BADTAG] = o.len[FK_RW];

	for (int i = 0; i < FQ_COUNT; i++) {
		enum ibv_qp_type t = i == FQ_UC ? IBV_QPT_UC : i == FQ_UD ? IBV_QPT_UD : IBV_QPT_RC;

		if (i != FQ_XRC)
			o.qp[i] = qp_new(i == FQ_RC_PD2 ? o.pd2 : o.pd, t,
					 i == FQ_RC_SRQ ? o.srq : NULL);
	}
	/* XRC: a domain, its SRQ (in the first PD, on the CQ), a target QP. */
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD |
						     IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1 };
	struct ibv_srq_init_attr_ex xs = {
		.attr = { .max_wr = 4, .max_sge = 1 }, .srq_type = IBV_SRQT_XRC,
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ,
	};
	struct ibv_qp_init_attr_ex xq = { .qp_type = IBV_QPT_XRC_RECV,
					  .comp_mask = IBV_QP_INIT_ATTR_XRCD };

	o.xrcd = ibv_open_xrcd(ctx, &xa);
	if (!o.xrcd)
		die("ibv_open_xrcd");
	xs.pd = o.pd;
	xs.xrcd = o.xrcd;
	xs.cq = o.cq;
	o.xsrq = ibv_create_srq_ex(ctx, &xs);
	xq.xrcd = o.xrcd;
	o.qp[FQ_XRC] = ibv_create_qp_ex(ctx, &xq);
	if (!o.xsrq || !o.qp[FQ_XRC] || ibv_get_srq_num(o.xsrq, &o.xsrqn))
		die("XRC SRQ/QP");
	o.gone_qpn = o.qp[FQ_GONE]->qp_num;
	ibv_destroy_qp(o.qp[FQ_GONE]);
	o.qp[FQ_GONE] = NULL;
	static const enum ibv_qp_state st[FQ_COUNT] = {
		[FQ_RC] = IBV_QPS_RTS, [FQ_RC_SRQ] = IBV_QPS_RTS, [FQ_RC_RNR] = IBV_QPS_RTS,
		[FQ_RC_RTR] = IBV_QPS_RTR, [FQ_RC_SQD] = IBV_QPS_SQD, [FQ_RC_ERR] = IBV_QPS_ERR,
		[FQ_RC_INIT] = IBV_QPS_INIT, [FQ_UC] = IBV_QPS_RTS, [FQ_UD] = IBV_QPS_RTS,
		[FQ_RC_RESET] = IBV_QPS_RESET, [FQ_RC_PD2] = IBV_QPS_RTS, [FQ_XRC] = IBV_QPS_RTR,
	};
	for (int i = 0; i < FQ_COUNT; i++)
		if (o.qp[i])
			qp_move(o.qp[i], st[i]);

	/* The window: bound by FQ_RC before anything else is posted there. */
	o.mw = ibv_alloc_mw(o.pd, IBV_MW_TYPE_1);
	if (!o.mw)
		die("ibv_alloc_mw");
	struct ibv_mw_bind b = {
		.wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = o.mr[FK_MWMR], .addr = (uintptr_t)(data + OFF_MWMR + MW_OFF),
			       .length = MW_LEN,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						  IBV_ACCESS_REMOTE_ATOMIC },
	};
	if (ibv_bind_mw(o.qp[FQ_RC], o.mw, &b))
		die("ibv_bind_mw");
	o.key[FK_MW] = o.mw->rkey;
	o.base[FK_MW] = (uintptr_t)(data + OFF_MWMR + MW_OFF);
	o.len[FK_MW] = MW_LEN;

	/* A type 2 window, bound by FQ_RC (and usable through it only). */
	struct ibv_send_wr bw;

	o.mw2 = ibv_alloc_mw(o.pd, IBV_MW_TYPE_2);
	if (!o.mw2)
		die("ibv_alloc_mw type 2");
	memset(&bw, 0, sizeof(bw));
	bw.opcode = IBV_WR_BIND_MW;
	bw.bind_mw.mw = o.mw2;
	bw.bind_mw.rkey = ibv_inc_rkey(o.mw2->rkey);
	bw.bind_mw.bind_info.mr = o.mr[FK_MWMR];
	bw.bind_mw.bind_info.addr = (uintptr_t)(data + OFF_MWMR + MW2_OFF);
	bw.bind_mw.bind_info.length = MW2_LEN;
	bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC;
	local_wr(&bw);
	o.key[FK_MW2] = bw.bind_mw.rkey;
	o.base[FK_MW2] = (uintptr_t)(data + OFF_MWMR + MW2_OFF);
	o.len[FK_MW2] = MW2_LEN;

	/* Fast registration: generation 1 maps one page, is registered and invalidated;
	 * generation 2 maps two other pages, in reverse order, and stays valid. */
	struct ibv_mr *fr = softrdma_alloc_mr(o.pd, 4);
	struct ibv_sge old_pg[1] = { { (uintptr_t)(data + OFF_FROLD), 4096, 0 } };
	struct ibv_sge new_pg[2] = { { (uintptr_t)(data + OFF_FR + 4096), 4096, 0 },
				     { (uintptr_t)(data + OFF_FR), 4096, 0 } };
	const unsigned fr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

	if (!fr)
		die("softrdma_alloc_mr");
	o.mr[FK_FR] = fr;
	o.key[FK_FR_OLD] = softrdma_update_fast_reg_key(fr, 1);
	if (softrdma_map_mr_sg(fr, old_pg, 1, 4096) != 1)
		die("softrdma_map_mr_sg 1");
	fast_reg(o.key[FK_FR_OLD], fr_access);
	local_inv(o.key[FK_FR_OLD]);
	o.base[FK_FR_OLD] = (uintptr_t)(data + OFF_FROLD);
	o.len[FK_FR_OLD] = 4096;
	o.key[FK_FR] = softrdma_update_fast_reg_key(fr, 2);
	if (softrdma_map_mr_sg(fr, new_pg, 2, 4096) != 2)
		die("softrdma_map_mr_sg 2");
	fast_reg(o.key[FK_FR], fr_access);
	o.base[FK_FR] = (uintptr_t)(data + OFF_FR + 4096);
	o.len[FK_FR] = 8192;

	/* Receive WQEs (UD: 40 bytes of GRH first). */
	for (uint32_t i = 0; i < 4; i++) {
		post_recv(o.qp[FQ_RC], NULL, LOC_RC + i * 2048, 2048);
		post_recv(NULL, o.srq, LOC_SRQ + i * 512, 512);
		post_recv(o.qp[FQ_UC], NULL, LOC_UC + i * 512, 512);
		post_recv(o.qp[FQ_UD], NULL, LOC_UD + i * 1088, 1088);
	}
	for (uint32_t i = 0; i < 2; i++)
		post_recv(NULL, o.xsrq, LOC_XRC + i * 1024, 1024);
	/* Requests in flight to the peer, whose responses an input may bring: a SEND, a WRITE,
	 * a READ of 3 response packets, a CMP_SWAP and a FETCH_ADD (8-byte results). */
	struct ibv_mr *l = o.mr[FK_LOCAL];

	post_send(o.qp[FQ_RC], IBV_WR_SEND, l, LOC_SRC, 100, 0, 0);
	post_send(o.qp[FQ_RC], IBV_WR_RDMA_WRITE, l, LOC_SRC, 1500, 0x10000, 0x1234);
	post_send(o.qp[FQ_RC], IBV_WR_RDMA_READ, l, LOC_READ, 2500, 0x20000, 0x1234);
	post_send(o.qp[FQ_RC], IBV_WR_ATOMIC_CMP_AND_SWP, l, LOC_ATOMIC, 8, 0x30000, 0x1234);
	post_send(o.qp[FQ_RC], IBV_WR_ATOMIC_FETCH_AND_ADD, l, LOC_ATOMIC + 8, 8, 0x30008, 0x1234);
	post_send(o.qp[FQ_RC_RNR], IBV_WR_SEND, l, LOC_SRC2, 64, 0, 0);
	post_send(o.qp[FQ_RC_PD2], IBV_WR_RDMA_READ, o.mr[FK_PD2], 0, 256, 0x40000, 0x99);
	drain_cq();
	clock_skew = 0;
}

static void teardown(void)
{
	drain_cq();
	for (int i = 0; i < FQ_COUNT; i++)
		if (o.qp[i] && ibv_destroy_qp(o.qp[i]))
			die("ibv_destroy_qp");
	if (ibv_dealloc_mw(o.mw) || ibv_dealloc_mw(o.mw2))
		die("ibv_dealloc_mw");
	for (int k = 0; k < FK_COUNT; k++)
		if (o.mr[k] && ibv_dereg_mr(o.mr[k]))
			die("ibv_dereg_mr");
	if (ibv_destroy_srq(o.xsrq) || ibv_close_xrcd(o.xrcd))
		die("XRC teardown");
	if (ibv_destroy_srq(o.srq) || ibv_destroy_cq(o.cq) || ibv_dealloc_pd(o.pd) ||
	    ibv_dealloc_pd(o.pd2))
		die("teardown");
}

/* Bytes no peer may change: the canaries between the MRs, the read-only MR, the window's MR
 * outside the window. (The MRs with remote write, the receive buffers and the other PD's MR,
 * which its own QP may reach, can change.) */
static void check_memory(void)
{
	static const struct { uint32_t off, len; const char *what; } fixed[] = {
		{ OFF_RW + LEN_RW, OFF_RO - OFF_RW - LEN_RW, "canary after the RW MR" },
		{ OFF_RO, LEN_RO, "the remote-read-only MR" },
		{ OFF_RO + LEN_RO, OFF_LOCAL - OFF_RO - LEN_RO, "canary after the RO MR" },
		{ OFF_LOCAL + LEN_LOCAL, OFF_MWMR - OFF_LOCAL - LEN_LOCAL, "canary after the local MR" },
		{ OFF_MWMR, MW_OFF, "the window's MR below the window" },
		{ OFF_MWMR + MW2_OFF + MW2_LEN, LEN_MWMR - MW2_OFF - MW2_LEN,
		  "the windows' MR above the windows" },
		{ OFF_MWMR + LEN_MWMR, OFF_PD2 - OFF_MWMR - LEN_MWMR, "canary after the window's MR" },
		{ OFF_PD2 + LEN_PD2, OFF_FROLD - OFF_PD2 - LEN_PD2, "canary after the other PD's MR" },
		{ OFF_FROLD, 4096, "the page of the invalidated fast-reg generation" },
	};

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		const uint8_t *p = data + fixed[i].off, *r = ref + fixed[i].off;

		for (uint32_t j = 0; j < fixed[i].len; j++) {
			if (p[j] != r[j]) {
				fprintf(stderr, "fuzz_rx: %s changed at byte %u (0x%02x, was 0x%02x)\n",
					fixed[i].what, j, p[j], r[j]);
				abort();
			}
		}
	}
	/* The local MR: only receive buffers and READ/ATOMIC results may change. */
	for (uint32_t j = LOC_SRC; j < LEN_LOCAL; j++) {
		if ((j >= LOC_READ && j < LOC_READ + 2500) || (j >= LOC_ATOMIC && j < LOC_ATOMIC + 16) ||
		    (j >= LOC_XRC && j < LOC_XRC + 2048))
			continue;
		if (data[OFF_LOCAL + j] != ref[OFF_LOCAL + j]) {
			fprintf(stderr, "fuzz_rx: local MR byte %u, in no writable WQE, changed\n", j);
			abort();
		}
	}
}

static void fix_packet(uint8_t flags, uint8_t qsel, uint8_t ksel, int8_t dpsn, uint8_t *p,
		       size_t len)
{
	struct sr_pkt pkt;
	struct sr_qp *qp;

	if (len < SR_BTH_LEN + SR_ICRC_LEN)
		return;
	qsel %= FQ_COUNT;
	if (flags & FX_QPN) {
		uint32_t qpn = qsel == FQ_GONE ? o.gone_qpn : o.qp[qsel]->qp_num;

		p[2] = 0xff;
		p[3] = 0xff;
		p[5] = (uint8_t)(qpn >> 16);
		p[6] = (uint8_t)(qpn >> 8);
		p[7] = (uint8_t)qpn;
	}
	if (sr_pkt_parse(&pkt, p, len) != SR_PE_OK)
		return;		/* the ICRC may still be fixed: the parser drops it anyway */
	qp = qsel == FQ_GONE ? NULL : sr_qp(o.qp[qsel]);
	if ((flags & FX_PSN) && qp) {
		uint32_t psn = ((pkt.mask & SR_M_REQ) ? qp->resp.epsn : qp->comp.psn) + (uint32_t)dpsn;

		p[9] = (uint8_t)(psn >> 16 & 0xff);
		p[10] = (uint8_t)(psn >> 8);
		p[11] = (uint8_t)psn;
		if (sr_pkt_ackride(&pkt)) {
			/* The ACK it carries (SR_BTH_SR_ACKRIDE): from the completer's PSN. */
			uint8_t *k = p + sr_opcode[pkt.opcode].length + SR_AETH_LEN;

			psn = qp->comp.psn + (uint32_t)dpsn;
			k[1] = (uint8_t)(psn >> 16 & 0xff);
			k[2] = (uint8_t)(psn >> 8);
			k[3] = (uint8_t)psn;
		}
	}
	ksel %= FK_COUNT;
	uint8_t *h = NULL;
	uint8_t *lenp = NULL;

	if (pkt.mask & SR_M_RETH) {
		h = sr_pkt_h(&pkt, SR_H_RETH);
		lenp = h + 12;
	} else if (pkt.mask & SR_M_ATMETH) {
		h = sr_pkt_h(&pkt, SR_H_ATMETH);
	}
	if (h && ksel != FK_OWN) {
		if (flags & FX_KEY)
			sr_st_be32(h + 8, o.key[ksel]);
		if (flags & FX_VA) {
			uint64_t va = sr_ld_be64(h);

			sr_st_be64(h, o.base[ksel] + va % (o.len[ksel] + 256) - 128);
		}
	}
	if (lenp && (flags & FX_LEN))
		sr_st_be32(lenp, sr_ld_be32(lenp) % 9000);
	if ((pkt.mask & SR_M_IETH) && (flags & FX_KEY) && ksel != FK_OWN)
		sr_st_be32(sr_pkt_h(&pkt, SR_H_IETH), o.key[ksel]);	/* SEND with invalidate */
	if ((pkt.mask & SR_M_XRCETH) && (flags & FX_KEY))
		sr_st_be32(sr_pkt_h(&pkt, SR_H_XRCETH), o.xsrqn);
	if ((pkt.mask & SR_M_DETH) && (flags & FX_KEY))
		sr_st_be32(sr_pkt_h(&pkt, SR_H_DETH), FUZZ_QKEY);
}

static void deliver(const uint8_t *rec, size_t n)
{
	static uint8_t buf[16384];
	uint8_t flags;
	size_t len;
	const struct sr_addr *src;

	if (n < 4)
		return;
	flags = rec[0];
	len = n - 4 > sizeof(buf) ? sizeof(buf) : n - 4;
	memcpy(buf, rec + 4, len);
	fix_packet(flags, rec[1], rec[2], (int8_t)rec[3], buf, len);
	src = (flags & FX_STRANGER) ? &stranger : &peer;
	if ((flags & FX_ICRC_KEEP) != FX_ICRC_KEEP && len >= SR_BTH_LEN + SR_ICRC_LEN) {
		struct sr_ipudp t = { .family = 4, .sport = src->port, .dport = nic->addr.port,
				      .df = true, .ttl = 64 };

		memcpy(t.src, src->raw, 4);
		memcpy(t.dst, nic->addr.raw, 4);
		sr_st_le32(buf + len - SR_ICRC_LEN, sr_icrc_calc(&t, buf, len));
	}
	pthread_mutex_lock(&nic->rx_lock);
	sr_net_rx_datagram(nic, buf, len, src);
	sr_resp_flush_acks(nic);
	pthread_mutex_unlock(&nic->rx_lock);
	drain_cq();
}

#ifdef FUZZ_SEQ
/* The progress thread's timer pass, at a clock stepped forward by the input. */
static void run_timers(void)
{
	uint64_t now = sr_now_ns() + clock_skew;

	for (int i = 0; i < FQ_COUNT; i++) {
		struct sr_qp *qp;

		if (!o.qp[i])
			continue;
		qp = sr_qp(o.qp[i]);
		pthread_mutex_lock(&qp->lock);
		sr_qp_timers(qp, now);
		pthread_mutex_unlock(&qp->lock);
	}
	drain_cq();
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	setup();
#ifdef FUZZ_SEQ
	for (int steps = 0; n >= 2 && steps < 64; steps++) {
		unsigned v = d[0] | d[1] << 8;
		size_t l;

		d += 2;
		n -= 2;
		if (v & 0x8000) {
			clock_skew += (uint64_t)(v & 0x7fff) * 100000ull;
			run_timers();
			continue;
		}
		l = v & 0x1fff;
		if (l > n)
			l = n;
		deliver(d, l);
		d += l;
		n -= l;
	}
#else
	deliver(d, n);
#endif
	check_memory();
	teardown();
	check_memory();
	return 0;
}
