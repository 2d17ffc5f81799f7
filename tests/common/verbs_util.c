/* SPDX-License-Identifier: MIT */
/* Shared setup for the verbs tests: see verbs_util.h. Public headers only. */
#include "verbs_util.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <softrdma/stats.h>

#include "sr_test.h"

/* ---- device ---------------------------------------------------------------------------- */
int vu_open(struct vu_dev *d)
{
	struct ibv_device **list;
	struct ibv_port_attr pa;
	int n, pick = 0, ret;

	memset(d, 0, sizeof(*d));
	list = ibv_get_device_list(&n);
	if (!list)
		return errno ? errno : ENODEV;
	if (n < 1) {
		ibv_free_device_list(list);
		return ENODEV;
	}
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), "softrdma0"))
			pick = i;
	d->ctx = ibv_open_device(list[pick]);
	ibv_free_device_list(list);
	if (!d->ctx)
		return errno ? errno : ENODEV;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		ret = errno ? errno : ENOMEM;
		goto close;
	}
	ret = ibv_query_port(d->ctx, 1, &pa);
	if (ret)
		goto close;
	/* The GID naming the device's UDP port, which a peer can reach with the GID alone: the
	 * table's last (index 1 on a device that could not have 4791, docs/gid.md). */
	if (!pa.gid_tbl_len || ibv_query_gid(d->ctx, 1, pa.gid_tbl_len - 1, &d->gid)) {
		ret = EIO;
		goto close;
	}
	d->active_mtu = pa.active_mtu;
	return 0;
close:
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	ibv_close_device(d->ctx);
	memset(d, 0, sizeof(*d));
	return ret;
}

void vu_close(struct vu_dev *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	memset(d, 0, sizeof(*d));
}

/* ---- QPs ------------------------------------------------------------------------------------ */
void vu_qp_cfg_default(struct vu_qp_cfg *q, enum ibv_qp_type type)
{
	memset(q, 0, sizeof(*q));
	q->type = type;
	q->max_send_wr = 64;
	q->max_recv_wr = 64;
	q->max_send_sge = 4;
	q->max_recv_sge = 4;
	q->max_inline = 256;
	q->sq_sig_all = 1;
	q->cqe = 1024;
}

void vu_conn_cfg_default(struct vu_conn_cfg *c)
{
	memset(c, 0, sizeof(*c));
	c->mtu = IBV_MTU_1024;
	c->timeout = 14;
	c->retry_cnt = 7;
	c->rnr_retry = 7;
	c->min_rnr_timer = 1;
	c->max_rd_atomic = 16;
	c->max_dest_rd_atomic = 16;
	c->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		    IBV_ACCESS_REMOTE_ATOMIC;
	c->qkey = 0x11111111;
}

struct ibv_qp *vu_qp_create(struct vu_dev *d, struct ibv_cq *scq, struct ibv_cq *rcq,
			    const struct vu_qp_cfg *q)
{
	if (q->send_ops_flags) {
		struct ibv_qp_init_attr_ex ax;

		memset(&ax, 0, sizeof(ax));
		ax.qp_type = q->type;
		ax.send_cq = scq;
		ax.recv_cq = rcq;
		ax.srq = q->srq;
		ax.sq_sig_all = q->sq_sig_all;
		ax.cap.max_send_wr = q->max_send_wr;
		ax.cap.max_recv_wr = q->srq ? 0 : q->max_recv_wr;
		ax.cap.max_send_sge = q->max_send_sge;
		ax.cap.max_recv_sge = q->srq ? 0 : q->max_recv_sge;
		ax.cap.max_inline_data = q->max_inline;
		ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ax.pd = d->pd;
		ax.send_ops_flags = q->send_ops_flags;
		return ibv_create_qp_ex(d->ctx, &ax);
	}

	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.qp_type = q->type;
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.srq = q->srq;
	ia.sq_sig_all = q->sq_sig_all;
	ia.cap.max_send_wr = q->max_send_wr;
	ia.cap.max_recv_wr = q->srq ? 0 : q->max_recv_wr;
	ia.cap.max_send_sge = q->max_send_sge;
	ia.cap.max_recv_sge = q->srq ? 0 : q->max_recv_sge;
	ia.cap.max_inline_data = q->max_inline;
	return ibv_create_qp(d->pd, &ia);
}

void vu_ah_attr(struct ibv_ah_attr *ah, const union ibv_gid *dgid)
{
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->port_num = 1;
	ah->grh.dgid = *dgid;
	ah->grh.sgid_index = 0;
	ah->grh.hop_limit = 64;
}

int vu_qp_to_init(struct ibv_qp *qp, const struct vu_conn_cfg *c)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = c->qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = c->access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int vu_qp_to_rtr(struct ibv_qp *qp, const struct vu_conn_cfg *c, const union ibv_gid *dgid,
		 uint32_t dqpn)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (qp->qp_type != IBV_QPT_UD) {
		a.path_mtu = c->mtu;
		a.dest_qp_num = dqpn;
		a.rq_psn = c->rq_psn;
		vu_ah_attr(&a.ah_attr, dgid);
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	}
	if (qp->qp_type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = c->max_dest_rd_atomic;
		a.min_rnr_timer = c->min_rnr_timer;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int vu_qp_to_rts(struct ibv_qp *qp, const struct vu_conn_cfg *c)
{
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = c->sq_psn;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = c->timeout;
		a.retry_cnt = c->retry_cnt;
		a.rnr_retry = c->rnr_retry;
		a.max_rd_atomic = c->max_rd_atomic;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int vu_qp_connect(struct ibv_qp *qp, const struct vu_conn_cfg *c, const union ibv_gid *dgid,
		  uint32_t dqpn)
{
	int ret = vu_qp_to_init(qp, c);

	if (!ret)
		ret = vu_qp_to_rtr(qp, c, dgid, dqpn);
	if (!ret)
		ret = vu_qp_to_rts(qp, c);
	return ret;
}

void vu_conn_cfg_raw(struct vu_conn_cfg *c, uint32_t sq_psn, uint32_t rq_psn)
{
	vu_conn_cfg_default(c);
	c->sq_psn = sq_psn;
	c->rq_psn = rq_psn;
}

struct ibv_qp *vu_qp_connect_raw(struct vu_dev *d, struct ibv_cq *cq, const struct vu_qp_cfg *q,
				 const struct vu_conn_cfg *c, const union ibv_gid *peer_gid,
				 uint32_t peer_qpn)
{
	struct vu_qp_cfg def;
	struct ibv_qp *qp;

	if (!q) {
		vu_qp_cfg_default(&def, IBV_QPT_RC);
		q = &def;
	}
	qp = vu_qp_create(d, cq, cq, q);
	REQUIRE(qp);
	REQUIRE(vu_qp_connect(qp, c, peer_gid, peer_qpn) == 0);
	return qp;
}

struct ibv_qp *vu_qp_to_peer(struct vu_dev *d, struct ibv_cq *cq, const struct vu_conn_cfg *c,
			     const union ibv_gid *peer_gid, uint32_t peer_qpn,
			     const struct vu_buf *buf, uint32_t nrecv, uint32_t recv_len)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg def;
	struct ibv_qp *qp;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.max_recv_wr = nrecv;
	if (!c) {
		vu_conn_cfg_default(&def);
		c = &def;
	}
	qp = vu_qp_create(d, cq, cq, &q);
	if (!qp)
		return NULL;
	if (vu_qp_connect(qp, c, peer_gid, peer_qpn))
		goto fail;
	for (uint32_t i = 0; i < nrecv; i++)
		if (vu_post_recv(qp, i, buf->mr, buf->p + (size_t)i * recv_len, recv_len))
			goto fail;
	return qp;
fail:
	ibv_destroy_qp(qp);
	return NULL;
}

int vu_qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return (int)a.qp_state;
}

int vu_pair_create_reset(struct vu_dev *d, const struct vu_qp_cfg *q, struct vu_pair *p)
{
	struct vu_qp_cfg def;
	int cqe;

	if (!q) {
		vu_qp_cfg_default(&def, IBV_QPT_RC);
		q = &def;
	}
	cqe = q->cqe > 0 ? q->cqe : 1024;
	memset(p, 0, sizeof(*p));
	p->dev = d;
	for (int i = 0; i < 2; i++) {
		p->scq[i] = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
		p->rcq[i] = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
		if (!p->scq[i] || !p->rcq[i])
			goto fail;
		p->qp[i] = vu_qp_create(d, p->scq[i], p->rcq[i], q);
		if (!p->qp[i])
			goto fail;
	}
	return 0;
fail:
	{
		int err = errno ? errno : ENOMEM;

		vu_pair_destroy(p);
		return err;
	}
}

int vu_pair_connect(struct vu_pair *p, const struct vu_conn_cfg *c)
{
	struct vu_conn_cfg def, side[2];
	int ret;

	if (!c) {
		vu_conn_cfg_default(&def);
		c = &def;
	}
	side[0] = *c;
	side[1] = *c;
	side[1].sq_psn = c->rq_psn;
	side[1].rq_psn = c->sq_psn;
	for (int i = 0; i < 2; i++) {
		ret = vu_qp_to_init(p->qp[i], &side[i]);
		if (ret)
			return ret;
	}
	for (int i = 0; i < 2; i++) {
		ret = vu_qp_to_rtr(p->qp[i], &side[i], &p->dev->gid, p->qp[1 - i]->qp_num);
		if (ret)
			return ret;
	}
	for (int i = 0; i < 2; i++) {
		ret = vu_qp_to_rts(p->qp[i], &side[i]);
		if (ret)
			return ret;
	}
	return 0;
}

int vu_pair_create(struct vu_dev *d, const struct vu_qp_cfg *q, const struct vu_conn_cfg *c,
		   struct vu_pair *p)
{
	int ret = vu_pair_create_reset(d, q, p);

	if (ret)
		return ret;
	ret = vu_pair_connect(p, c);
	if (ret)
		vu_pair_destroy(p);
	return ret;
}

void vu_pair_destroy(struct vu_pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->qp[i])
			ibv_destroy_qp(p->qp[i]);
		if (p->scq[i])
			ibv_destroy_cq(p->scq[i]);
		if (p->rcq[i])
			ibv_destroy_cq(p->rcq[i]);
	}
	memset(p, 0, sizeof(*p));
}

/* ---- memory ------------------------------------------------------------------------------- */
int vu_buf_alloc(struct vu_dev *d, struct vu_buf *b, size_t len, unsigned access)
{
	size_t map = len ? (len + 4095) & ~(size_t)4095 : 4096;

	memset(b, 0, sizeof(*b));
	b->p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->p == MAP_FAILED) {
		b->p = NULL;
		return errno;
	}
	b->len = len;
	if (!access)
		return 0;
	b->mr = ibv_reg_mr(d->pd, b->p, len, (int)access);
	if (!b->mr) {
		int err = errno ? errno : ENOMEM;

		munmap(b->p, map);
		b->p = NULL;
		return err;
	}
	return 0;
}

void vu_buf_free(struct vu_buf *b)
{
	if (b->mr)
		ibv_dereg_mr(b->mr);
	if (b->p)
		munmap(b->p, b->len ? (b->len + 4095) & ~(size_t)4095 : 4096);
	memset(b, 0, sizeof(*b));
}

/* ---- posting ------------------------------------------------------------------------------ */
static void one_sge(struct ibv_send_wr *wr, struct ibv_sge *sge, uint64_t wr_id,
		    enum ibv_wr_opcode op, struct ibv_mr *mr, const void *addr, uint32_t len,
		    unsigned flags)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = wr_id;
	wr->opcode = op;
	wr->send_flags = flags;
	if (mr || len) {
		sge->addr = (uintptr_t)addr;
		sge->length = len;
		sge->lkey = mr ? mr->lkey : 0;
		wr->sg_list = sge;
		wr->num_sge = 1;
	}
}

int vu_post_send(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_mr *mr,
		 const void *addr, uint32_t len, uint32_t imm_host, unsigned flags)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;

	one_sge(&wr, &sge, wr_id, op, mr, addr, len, flags);
	wr.imm_data = htobe32(imm_host);
	return ibv_post_send(qp, &wr, &bad);
}

int vu_post_rdma(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_mr *mr,
		 const void *addr, uint32_t len, uint64_t raddr, uint32_t rkey, unsigned flags)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;

	one_sge(&wr, &sge, wr_id, op, mr, addr, len, flags);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

int vu_post_write_then_bad_lkey(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr,
				const void *addr, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	return vu_post_write_then_bad_lkey2(qp, wr_id, mr, addr, len, len, raddr, rkey);
}

int vu_post_write_then_bad_lkey2(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr,
				 const void *addr, uint32_t len, uint32_t len2, uint64_t raddr,
				 uint32_t rkey)
{
	struct ibv_send_wr wr[2], *bad;
	struct ibv_sge sge[2];

	for (int i = 0; i < 2; i++) {
		one_sge(&wr[i], &sge[i], wr_id + i, IBV_WR_RDMA_WRITE, mr, addr, i ? len2 : len,
			IBV_SEND_SIGNALED);
		wr[i].wr.rdma.remote_addr = raddr + (uint64_t)len * i;
		wr[i].wr.rdma.rkey = rkey;
	}
	sge[1].lkey ^= 0x33;
	wr[0].next = &wr[1];
	return ibv_post_send(qp, wr, &bad);
}

int vu_post_write_imm(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, const void *addr,
		      uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm_host,
		      unsigned flags)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;

	one_sge(&wr, &sge, wr_id, IBV_WR_RDMA_WRITE_WITH_IMM, mr, addr, len, flags);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	wr.imm_data = htobe32(imm_host);
	return ibv_post_send(qp, &wr, &bad);
}

int vu_post_atomic(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_mr *mr,
		   void *result, uint64_t raddr, uint32_t rkey, uint64_t compare_add,
		   uint64_t swap, unsigned flags)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;

	one_sge(&wr, &sge, wr_id, op, mr, result, 8, flags);
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return ibv_post_send(qp, &wr, &bad);
}

int vu_post_ud(struct ibv_qp *qp, uint64_t wr_id, struct ibv_ah *ah, uint32_t dqpn,
	       uint32_t qkey, struct ibv_mr *mr, const void *addr, uint32_t len, unsigned flags)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge;

	one_sge(&wr, &sge, wr_id, IBV_WR_SEND, mr, addr, len, flags);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = dqpn;
	wr.wr.ud.remote_qkey = qkey;
	return ibv_post_send(qp, &wr, &bad);
}

static void recv_wr(struct ibv_recv_wr *wr, struct ibv_sge *sge, uint64_t wr_id,
		    struct ibv_mr *mr, void *addr, uint32_t len)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = wr_id;
	if (mr || len) {
		sge->addr = (uintptr_t)addr;
		sge->length = len;
		sge->lkey = mr ? mr->lkey : 0;
		wr->sg_list = sge;
		wr->num_sge = 1;
	}
}

int vu_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *addr, uint32_t len)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;

	recv_wr(&wr, &sge, wr_id, mr, addr, len);
	return ibv_post_recv(qp, &wr, &bad);
}

int vu_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id, struct ibv_mr *mr, void *addr,
		     uint32_t len)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;

	recv_wr(&wr, &sge, wr_id, mr, addr, len);
	return ibv_post_srq_recv(srq, &wr, &bad);
}

/* ---- polling ------------------------------------------------------------------------------ */
uint64_t vu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void vu_sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

int vu_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms)
{
	uint64_t deadline = vu_now_ms() + (uint64_t)timeout_ms;
	int got = 0;
	unsigned spins = 0;

	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		if (r < 0)
			return r;
		got += r;
		if (got >= n)
			break;
		if (r == 0 && (++spins & 255) == 0) {
			if (vu_now_ms() >= deadline)
				break;
			/* Two cores: leave one to the progress thread now and then. */
			sched_yield();
		}
	}
	return got;
}

int vu_wait(struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms)
{
	return vu_poll(cq, wc, 1, timeout_ms) == 1;
}

int vu_drain(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms)
{
	uint64_t deadline = vu_now_ms() + (uint64_t)ms;
	struct ibv_wc scratch;
	int got = 0;

	while (vu_now_ms() < deadline) {
		struct ibv_wc *slot = got < n ? &wc[got] : &scratch;
		int r = ibv_poll_cq(cq, 1, slot);

		if (r > 0)
			got++;
		else
			vu_sleep_ms(1);
	}
	return got;
}

const char *vu_wc_str(const struct ibv_wc *wc)
{
	static __thread char buf[192];

	snprintf(buf, sizeof(buf), "wr_id %llu status %d (%s) opcode %d len %u imm 0x%x qp 0x%x "
		 "flags 0x%x", (unsigned long long)wc->wr_id, wc->status,
		 ibv_wc_status_str(wc->status), wc->opcode, wc->byte_len, be32toh(wc->imm_data),
		 wc->qp_num, wc->wc_flags);
	return buf;
}

/* ---- patterns ------------------------------------------------------------------------------ */
uint64_t vu_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint8_t pat(size_t i, uint32_t seed)
{
	/* Not periodic in any power of two below 2^32: an off-by-an-MTU copy shows. */
	uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u;

	return (uint8_t)(x >> 24 ^ x >> 11 ^ (uint32_t)(i >> 8));
}

void vu_fill(void *p, size_t len, uint32_t seed)
{
	uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		b[i] = pat(i, seed);
}

long vu_check(const void *p, size_t len, uint32_t seed)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i] != pat(i, seed))
			return (long)i;
	return -1;
}

long vu_check_byte(const void *p, size_t len, uint8_t v)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i] != v)
			return (long)i;
	return -1;
}

/* ---- two processes ----------------------------------------------------------------------- */
int vu_fork(struct vu_child *c, int (*fn)(int sock, void *arg), void *arg, unsigned timeout_s)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return errno;
	fflush(stdout);
	fflush(stderr);
	c->pid = fork();
	if (c->pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return errno;
	}
	if (c->pid == 0) {
		close(sv[0]);
		sr_test_failures = 0;
		sr_test_timeout(timeout_s);
		int rc = fn(sv[1], arg);

		if (!rc && sr_test_failures)
			rc = 1;
		close(sv[1]);
		/* exit(), not _exit(): the device's counters are dumped at exit. */
		exit(rc);
	}
	close(sv[1]);
	c->sock = sv[0];
	return 0;
}

int vu_child_wait(struct vu_child *c, unsigned timeout_s)
{
	uint64_t deadline = vu_now_ms() + (uint64_t)timeout_s * 1000;
	int status;
	pid_t r;

	for (;;) {
		r = waitpid(c->pid, &status, WNOHANG);
		if (r == c->pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (vu_now_ms() >= deadline) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &status, 0);
			fprintf(stderr, "child %d timed out: killed\n", (int)c->pid);
			status = -1;
			break;
		}
		vu_sleep_ms(5);
	}
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	if (status == -1)
		return -1;
	if (WIFSIGNALED(status)) {
		fprintf(stderr, "child %d killed by signal %d\n", (int)c->pid, WTERMSIG(status));
		return -1;
	}
	return WEXITSTATUS(status);
}

int vu_sock_send(int sock, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t r = send(sock, b, n, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

int vu_sock_recv(int sock, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		ssize_t r = recv(sock, b, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return errno;
		}
		if (r == 0)
			return EPIPE;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* ---- counters ------------------------------------------------------------------------------ */
int64_t vu_stat_pid(pid_t pid, const char *name)
{
	const char *dir = getenv("SOFTRDMA_STATS_DIR");
	struct softrdma_stat_file_hdr h;
	char path[512];
	uint8_t *buf = NULL;
	int64_t val = -1;
	ssize_t n;
	int fd;

	if (!dir || !*dir)
		dir = "/dev/shm";
	snprintf(path, sizeof(path), "%s/" SOFTRDMA_STAT_SUBDIR_PREFIX "%u/%d-softrdma0"
		 SOFTRDMA_STAT_SUFFIX, dir, (unsigned)geteuid(), pid ? (int)pid : (int)getpid());
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = pread(fd, &h, sizeof(h), 0);
	if (n != (ssize_t)sizeof(h) || memcmp(h.magic, SOFTRDMA_STAT_MAGIC, 8) ||
	    h.version_major != SOFTRDMA_STAT_VERSION_MAJOR || h.file_size > (16u << 20) ||
	    h.name_len == 0 || h.name_len > 256)
		goto out;
	buf = malloc(h.file_size);
	if (!buf || pread(fd, buf, h.file_size, 0) != (ssize_t)h.file_size)
		goto out;
	if ((uint64_t)h.names_off + (uint64_t)h.num_counters * h.name_len > h.file_size ||
	    (uint64_t)h.values_off + (uint64_t)h.num_counters * 8 > h.file_size)
		goto out;
	for (uint32_t i = 0; i < h.num_counters; i++) {
		const char *nm = (const char *)buf + h.names_off + (size_t)i * h.name_len;

		if (strnlen(nm, h.name_len) == strlen(name) && !strncmp(nm, name, h.name_len)) {
			uint64_t v;

			memcpy(&v, buf + h.values_off + (size_t)i * 8, 8);
			val = (int64_t)v;
			break;
		}
	}
out:
	free(buf);
	close(fd);
	return val;
}

int64_t vu_stat(const char *name)
{
	return vu_stat_pid(0, name);
}

struct ibv_wc vu_expect_wc(struct ibv_cq *cq, uint64_t wr_id, int status, int opcode,
			   int timeout_ms, int line)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	if (!vu_wait(cq, &wc, timeout_ms)) {
		SR_FAIL("line %d: no completion for wr_id %llu", line, (unsigned long long)wr_id);
		wc.status = IBV_WC_GENERAL_ERR;
		return wc;
	}
	if ((int)wc.status != status || wc.wr_id != wr_id ||
	    (status == IBV_WC_SUCCESS && opcode >= 0 && (int)wc.opcode != opcode))
		SR_FAIL("line %d: expected wr_id %llu status %d opcode %d, got %s", line,
			(unsigned long long)wr_id, status, opcode, vu_wc_str(&wc));
	return wc;
}
