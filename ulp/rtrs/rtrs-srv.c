/* SPDX-License-Identifier: MIT */
/*
 * RTRS server (docs/rtrs.md): listens, accepts the connections of paths of sessions (CON_REQ /
 * CON_RSP), answers INFO_REQ with the session's chunks, checks and delivers IO requests, sends
 * the answers, answers heartbeats. One event thread per context; public verbs and rdma_cm only.
 */
#include "rtrs-common.h"
#include "rtrs-srv-check.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define SRV_MAX_DESC RTRS_SRV_MAX_DESC
#define CLOSING(p) do { if (getenv("RTRS_DEBUG")) fprintf(stderr, "rtrs-srv: path closes (line %d)\n", __LINE__); (p)->closing = 1; } while (0)
#define SRV_MAX_CONS RTRS_SRV_MAX_CONS
#define SRV_RECV_SIZE 512
#define SRV_SVC_RECVS 16
/* wr_id of signaled local operations: kind << 32 | chunk id */
#define SRV_WRID_INV (1ull << 40)
#define SRV_WRID_BIND (2ull << 40)
#define SRV_WRID_REBIND (3ull << 40)
#define SRV_WRID_KIND(w) ((w) & (3ull << 40))

struct srv_path;

struct srv_con {
	struct srv_path *path;
	unsigned int cid;
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char *rbuf;
	struct ibv_mr *rmr;
	unsigned int nrecv;
	unsigned int wr_cnt;	/* answers posted (rtrs_signal) */
	int established;
};

struct srv_sess;

struct srv_path {
	struct srv_sess *sess;
	struct srv_path *next;
	uint8_t uuid[16];
	uint16_t recon_cnt;
	unsigned int cid_num;
	struct srv_con cons[SRV_MAX_CONS];
	unsigned int nest;
	struct ibv_pd *pd;
	struct ibv_mr *chunk_mr;
	char *sbuf;		/* INFO_RSP */
	struct ibv_mr *smr;
	/* always_invalidate: one type 1 window per chunk, its key renewed after every IO
	 * (docs/rtrs.md). Every bind and unbind of the path's windows goes on the path's bind
	 * queue (bqp: an RC QP of the PD connected to itself that carries nothing else), so they
	 * keep their order and complete without waiting behind answers on an IO connection. */
	struct ibv_mw **mw;
	struct ibv_cq *bcq;
	struct ibv_qp *bqp;
	uint32_t *mkey;			/* current key of each chunk's window */
	uint32_t *inv_payload;		/* IO_REQ waiting for its chunk's unbind */
	uint8_t *inv_busy;
	uint8_t *inv_cid;		/* the connection that IO_REQ came on */
	struct rtrs_srv_op **rebind_op;	/* answer waiting for its chunk's re-bind */
	struct rtrs_msg_rkey_rsp *rk;	/* RKEY_RSP sent with each response */
	struct ibv_mr *rkmr;
	unsigned int binds_left;	/* first binds not completed yet */
	int info_pending;		/* INFO_REQ came before them: INFO_RSP waits */
	int connected, closing;
	uint64_t last_rx_ns;
	struct rtrs_path_stats st;
};

struct rtrs_srv_op {
	struct srv_sess *sess;
	struct srv_path *path;	/* NULL: path gone, answer dropped */
	struct srv_con *con;
	uint32_t id;
	enum rtrs_dir dir;
	uint32_t datalen;
	uint16_t usr_len, flags;
	unsigned int sg_cnt;
	struct rtrs_sg_desc desc[SRV_MAX_DESC];
	int answered;
	int err;
	uint32_t rkey;		/* always_invalidate: the chunk's new key (RKEY_RSP) */
	struct rtrs_srv_op *qnext;
	char usr[];
};

struct srv_sess {
	struct rtrs_srv_ctx *ctx;
	struct srv_sess *next;
	uint8_t uuid[16];
	char name[RTRS_NAME_MAX + 1];
	void *priv;
	char *buf;
	uint32_t qd, chunk;
	struct rtrs_srv_op **ops;	/* current op per chunk */
	struct srv_path *paths;
	unsigned int outstanding;	/* ops with the user */
	int up, dead;
};

struct rtrs_srv_ctx {
	struct rtrs_srv_ops ops;
	struct rtrs_srv_opts o;
	char stats_dir[256];
	struct rdma_event_channel *ech;
	struct ibv_context *verbs_hint;
	struct ibv_comp_channel *cch[8];	/* one per device seen */
	struct ibv_context *cch_dev[8];
	int ncch;
	/* RTRS_EVENT_SLEEP=cq (rtrs_event_sleep_cq): a thread per channel (cch_thr) polls and
	 * sleeps in ibv_get_cq_event; thr takes the CM events, the timers and the stats */
	int cq_sleep;
	struct rtrs_chan_thr *cch_thr[8];
	struct rdma_cm_id *listen[16];
	size_t nlisten;
	int efd;
	pthread_t thr;
	pthread_mutex_t mu;
	struct srv_sess *sessions;
	struct rtrs_srv_op *respq, *respq_tail;
	struct srv_sess *graveyard;
	volatile int stop;
	int sleeping;	/* the event thread sleeps in poll(): an answer queued must wake it */
	volatile int lock_waiters;	/* threads in srv_lock or srv_pass_wait (the user's answers,
					 * the CM thread, other channels' threads) */
	/* A thread runs a callback with mu dropped (srv_cb_unlock): the paths, sessions and ops
	 * it holds must stay, so no other thread starts a pass (polls, closes paths, handles CM
	 * events, answers from the queue) until it is back (srv_pass_wait). With one thread
	 * (poll) only the user's answers meet it: they are queued then, as always. */
	int in_cb;
	pthread_cond_t cb_cv;
};

/* A channel's thread (RTRS_EVENT_SLEEP=cq). */
static void *srv_cq_thread(void *arg);

/* Under c->mu: drops it for a callback (srv_cb_relock takes it back). */
static void srv_cb_unlock(struct rtrs_srv_ctx *c)
{
	c->in_cb = 1;
	pthread_mutex_unlock(&c->mu);
}

static void srv_cb_relock(struct rtrs_srv_ctx *c)
{
	pthread_mutex_lock(&c->mu);
	c->in_cb = 0;
	pthread_cond_broadcast(&c->cb_cv);
}

/* Under c->mu, before a pass: waits until no other thread is inside a callback. Counted in
 * lock_waiters meanwhile, as srv_lock counts: woken, pthread_cond_wait must take mu back, and a
 * channel's thread that polls with mu held (RTRS_POLL_US=-1, or completions closer than
 * poll_us) lets go only for counted waiters; uncounted, the CM thread starved there. */
static void srv_pass_wait(struct rtrs_srv_ctx *c)
{
	if (!c->in_cb)
		return;
	__atomic_add_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
	while (c->in_cb)
		pthread_cond_wait(&c->cb_cv, &c->mu);
	__atomic_sub_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
}

/* The lock, from the API (not the event thread): counted, so that the event thread, which
 * holds it while it polls, lets go for a moment. */
static void srv_lock(struct rtrs_srv_ctx *c)
{
	__atomic_add_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_lock(&c->mu);
	__atomic_sub_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
}

void rtrs_srv_opts_init(struct rtrs_srv_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->chunk_size = 128 * 1024;
	o->queue_depth = 512;
	o->max_hdr_size = 4096;
	o->always_invalidate = 1;
	o->hb_interval_ms = RTRS_HB_INTERVAL_MS;
	o->hb_missed_max = RTRS_HB_MISSED_MAX;
	o->poll_us = rtrs_poll_us_default();
}

static struct ibv_comp_channel *ctx_cch(struct rtrs_srv_ctx *c, struct ibv_context *dev)
{
	for (int i = 0; i < c->ncch; i++)
		if (c->cch_dev[i] == dev)
			return c->cch[i];
	if (c->ncch == 8)
		return NULL;
	struct ibv_comp_channel *ch = rtrs_chan_open(dev, c->cq_sleep, srv_cq_thread, c,
						     &c->cch_thr[c->ncch]);
	if (!ch)
		return NULL;
	c->cch[c->ncch] = ch;
	c->cch_dev[c->ncch++] = dev;
	return ch;
}

static int post_recv(struct srv_con *con, unsigned int i)
{
	struct ibv_sge sge = { (uintptr_t)(con->rbuf + (size_t)i * SRV_RECV_SIZE), SRV_RECV_SIZE,
			       con->rmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(con->qp, &wr, &bad);
}

static void con_destroy(struct srv_con *con)
{
	if (con->id) {
		if (con->established)
			rdma_disconnect(con->id);
		if (con->qp)
			rdma_destroy_qp(con->id);
		con->qp = NULL;
	}
	if (con->cq)
		ibv_destroy_cq(con->cq);
	con->cq = NULL;
	if (con->rmr)
		ibv_dereg_mr(con->rmr);
	con->rmr = NULL;
	free(con->rbuf);
	con->rbuf = NULL;
	if (con->id) {
		con->id->context = NULL;
		rdma_destroy_id(con->id);
	}
	con->id = NULL;
	con->established = 0;
}

static void sess_maybe_free(struct rtrs_srv_ctx *c, struct srv_sess *s);

/* Under c->mu. Tears a path down; its ops with the user are answered into the void. */
static void path_close(struct rtrs_srv_ctx *c, struct srv_path *p)
{
	struct srv_sess *s = p->sess;

	for (uint32_t i = 0; i < s->qd; i++) {
		struct rtrs_srv_op *op = s->ops[i];
		if (op && op->path == p)
			op->path = NULL, op->con = NULL;
	}
	for (unsigned int i = 0; i < SRV_MAX_CONS; i++)
		if (p->cons[i].id || p->cons[i].cq)
			con_destroy(&p->cons[i]);
	if (p->bqp)
		ibv_destroy_qp(p->bqp);
	if (p->bcq)
		ibv_destroy_cq(p->bcq);
	/* windows before the MR they are bound to (a bound MR cannot be deregistered) */
	for (uint32_t i = 0; p->mw && i < s->qd; i++) {
		if (p->mw[i])
			ibv_dealloc_mw(p->mw[i]);
		if (p->rebind_op && p->rebind_op[i])
			free(p->rebind_op[i]);	/* its answer dies with the path */
	}
	free(p->mw);
	free(p->mkey);
	free(p->inv_payload);
	free(p->inv_busy);
	free(p->inv_cid);
	free(p->rebind_op);
	if (p->rkmr)
		ibv_dereg_mr(p->rkmr);
	free(p->rk);
	if (p->chunk_mr)
		ibv_dereg_mr(p->chunk_mr);
	if (p->smr)
		ibv_dereg_mr(p->smr);
	free(p->sbuf);
	if (p->pd)
		ibv_dealloc_pd(p->pd);
	for (struct srv_path **pp = &s->paths; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	free(p);
	if (!s->paths) {
		int was_up = s->up;
		s->up = 0;
		s->dead = 1;
		if (was_up && c->ops.link_ev) {
			srv_cb_unlock(c);
			c->ops.link_ev((struct rtrs_srv_sess *)s, RTRS_SRV_LINK_EV_DISCONNECTED,
				       c->o.priv);
			srv_cb_relock(c);
		}
		for (struct srv_sess **ps = &c->sessions; *ps; ps = &(*ps)->next)
			if (*ps == s) {
				*ps = s->next;
				break;
			}
		sess_maybe_free(c, s);
	}
}

static void sess_maybe_free(struct rtrs_srv_ctx *c, struct srv_sess *s)
{
	/* Ops not yet through op_answer are counted in outstanding and keep the session (its
	 * chunks, which the user may still be using) in the graveyard until they are. */
	if (s->outstanding) {
		s->next = c->graveyard;
		c->graveyard = s;
		return;
	}
	free(s->ops);
	free(s->buf);
	free(s);
}

static struct srv_path *path_bad(struct rtrs_srv_ctx *c, struct srv_path *p, const char *why)
{
	char d[64];
	rtrs_addr_str(p->cons[0].id ? rdma_get_peer_addr(p->cons[0].id) : NULL, d, sizeof(d));
	fprintf(stderr, "rtrs-srv: session %s path from %s: bad request (%s): path closed\n",
		p->sess->name, d, why);
	p->st.bad_msgs++;
	/* the counter survives the path in the session's total (kept in the ctx log only) */
	CLOSING(p);
	return p;
}

static int send_info_rsp(struct srv_path *p, struct srv_con *con)
{
	struct srv_sess *s = p->sess;
	size_t len = sizeof(struct rtrs_msg_info_rsp) + (size_t)s->qd * sizeof(struct rtrs_sg_desc);
	struct rtrs_msg_info_rsp *m = (void *)p->sbuf;

	m->type = RTRS_MSG_INFO_RSP;
	m->sg_cnt = (uint16_t)s->qd;
	memset(m->reserved, 0, sizeof(m->reserved));
	for (uint32_t i = 0; i < s->qd; i++) {
		m->desc[i].addr = (uintptr_t)(s->buf + (size_t)i * s->chunk);
		m->desc[i].key = p->mw ? p->mkey[i] : p->chunk_mr->rkey;
		m->desc[i].len = s->chunk;
	}
	struct ibv_sge sge = { (uintptr_t)p->sbuf, (uint32_t)len, p->smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 0, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	return ibv_post_send(con->qp, &wr, &bad);
}

static int post_imm(struct srv_con *con, uint32_t imm, struct ibv_send_wr *head)
{
	struct ibv_send_wr wr = { .wr_id = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = rtrs_signal(&con->wr_cnt),
				  .imm_data = htobe32(imm) }, *bad;
	head = rtrs_wr_append(head, &wr);
	return ibv_post_send(con->qp, head, &bad);
}

static int bind_chunk(struct srv_path *p, uint32_t id, uint64_t wr_id, unsigned int flags,
		      uint32_t len);

/* always_invalidate: the answers whose re-binds completed in one pass over the bind queue
 * (poll_binds: about 3.5 at a time at depth 32), chained per connection into one post, so
 * that softrdma sends them in one GSO send instead of one each. */
#define SRV_ANS_BATCH 8
struct srv_ans_batch {
	struct srv_con *con;
	unsigned int nops, nw, ns;
	struct ibv_sge sges[SRV_ANS_BATCH * (SRV_MAX_DESC + 1)];
	struct ibv_send_wr wrs[SRV_ANS_BATCH * (SRV_MAX_DESC + 3)];
};

/* Under c->mu: posts what b holds (on p, which must still be there). */
static void ans_flush(struct srv_path *p, struct srv_ans_batch *b)
{
	struct ibv_send_wr *bad;

	if (b->nw && !p->closing && b->con->qp) {
		for (unsigned int i = 0; i + 1 < b->nw; i++)
			b->wrs[i].next = &b->wrs[i + 1];
		b->wrs[b->nw - 1].next = NULL;
		if (ibv_post_send(b->con->qp, &b->wrs[0], &bad))
			CLOSING(p);
	}
	b->con = NULL;
	b->nops = b->nw = b->ns = 0;
}

/* Under c->mu: posts the answer of op on its connection (with always_invalidate, once the
 * chunk's re-bind has completed: op->rkey is live), or with b adds it to b's chain (posted
 * by ans_flush). Frees op. */
static void answer_post(struct srv_path *p, struct rtrs_srv_op *op, struct srv_ans_batch *b)
{
	struct srv_sess *s = op->sess;

	if (s->dead || !op->con || !op->con->qp || p->closing) {
		free(op);	/* the client re-issues it on another path */
		return;
	}
	struct ibv_sge own_sges[SRV_MAX_DESC + 1];
	struct ibv_send_wr own_wrs[SRV_MAX_DESC + 3];
	struct ibv_sge *sges = own_sges;
	struct ibv_send_wr *wrs = own_wrs;
	if (b && p->mw) {
		if (b->con != op->con || b->nops == SRV_ANS_BATCH)
			ans_flush(p, b);
		b->con = op->con;
		sges = &b->sges[b->ns];
		wrs = &b->wrs[b->nw];
	}
	struct ibv_send_wr *head = NULL;
	unsigned int nw = 0;
	if (op->dir == RTRS_READ && !op->err) {
		char *src = s->buf + (size_t)op->id * s->chunk;
		uint64_t off = 0;
		for (unsigned int i = 0; i < op->sg_cnt; i++) {
			sges[i] = (struct ibv_sge){ (uintptr_t)(src + off), op->desc[i].len,
						    p->chunk_mr->lkey };
			wrs[i] = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &sges[i], .num_sge = 1,
						       .opcode = IBV_WR_RDMA_WRITE };
			wrs[i].wr.rdma.remote_addr = op->desc[i].addr;
			wrs[i].wr.rdma.rkey = op->desc[i].key;
			off += op->desc[i].len;
		}
		nw = op->sg_cnt;
		p->st.bytes_read += off;
	}
	/* NEED_INVAL: the client's READ key dies by a SEND with invalidate before the answer */
	int w_inv = op->dir == RTRS_READ && (op->flags & RTRS_MSG_NEED_INVAL_F) && op->sg_cnt;
	if (w_inv) {
		wrs[nw] = (struct ibv_send_wr){ .wr_id = 3, .opcode = IBV_WR_SEND_WITH_INV };
		wrs[nw++].invalidate_rkey = op->desc[0].key;
	}
	uint32_t imm = rtrs_to_io_rsp_imm(op->id, op->err, w_inv);
	int perr;
	if (p->mw) {
		/* always_invalidate: the answer is a SEND with immediate of RKEY_RSP (the chunk's
		 * new key), after the data WRITEs and the SEND with invalidate, all in one post */
		struct ibv_send_wr *bad;
		p->st.rkey_renewals++;
		struct rtrs_msg_rkey_rsp *m = &p->rk[op->id];
		m->type = RTRS_MSG_RKEY_RSP;
		m->buf_id = (uint16_t)op->id;
		m->rkey = op->rkey;
		sges[SRV_MAX_DESC] = (struct ibv_sge){ (uintptr_t)m, sizeof(*m), p->rkmr->lkey };
		wrs[nw] = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &sges[SRV_MAX_DESC],
						.num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
						.send_flags = rtrs_signal(&op->con->wr_cnt),
						.imm_data = htobe32(imm) };
		if (b) {
			b->nops++;
			b->nw += nw + 1;
			b->ns += SRV_MAX_DESC + 1;
			free(op);
			return;
		}
		for (unsigned int i = 0; i < nw; i++)
			wrs[i].next = &wrs[i + 1];
		perr = ibv_post_send(op->con->qp, &wrs[0], &bad);
	} else {
		if (nw) {
			for (unsigned int i = 0; i + 1 < nw; i++)
				wrs[i].next = &wrs[i + 1];
			head = &wrs[0];
		}
		perr = post_imm(op->con, imm, head);
	}
	if (perr)
		CLOSING(p);
	free(op);
}

/* Under c->mu: the user answered op. */
static void op_answer(struct rtrs_srv_ctx *c, struct rtrs_srv_op *op)
{
	struct srv_sess *s = op->sess;
	struct srv_path *p = op->path;
	(void)c;

	s->outstanding--;
	if (s->ops[op->id] != op) {	/* replaced by a re-issue: its answer is dropped */
		free(op);
		return;
	}
	s->ops[op->id] = NULL;
	if (s->dead || !p || !op->con || !op->con->qp || p->closing) {
		free(op);	/* the client re-issues it on another path */
		return;
	}
	if (op->err)
		p->st.errors++;
	p->st.inflight--;
	if (!p->mw) {
		answer_post(p, op, NULL);
		return;
	}
	/* always_invalidate: the chunk's window (unbound when the IO came) is bound again, with
	 * the next key, on the bind queue; the answer, which carries the key, is posted when
	 * that bind has completed (poll_binds): posted at once on the IO connection, it could
	 * reach the client before the window is bound, as the bind queue and the connection are
	 * not ordered. The client learns the new key from that answer only; a client that
	 * guessed it could change only its own READ's data before it leaves (the request was
	 * read and checked under the old, dead key). */
	if (bind_chunk(p, op->id, SRV_WRID_REBIND | op->id, IBV_SEND_SIGNALED, s->chunk)) {
		CLOSING(p);
		free(op);
		return;
	}
	op->rkey = p->mkey[op->id];
	free(p->rebind_op[op->id]);	/* only a client that did not wait for its answer */
	p->rebind_op[op->id] = op;
}

/* Under c->mu: op answered with err (an errno, either sign), queued for the event thread. */
static void respq_push(struct rtrs_srv_ctx *c, struct rtrs_srv_op *op, int err)
{
	op->answered = 1;
	op->err = err < 0 ? -err : err;
	op->qnext = NULL;
	if (c->respq_tail)
		c->respq_tail->qnext = op;
	else
		c->respq = op;
	c->respq_tail = op;
}

/* Under c->mu, no thread in a callback: the queued answers, and the sessions that were
 * waiting only for theirs. Returns the answers. */
static int srv_answers(struct rtrs_srv_ctx *c)
{
	int got = 0;

	while (c->respq) {
		struct rtrs_srv_op *op = c->respq;
		c->respq = op->qnext;
		if (!c->respq)
			c->respq_tail = NULL;
		op_answer(c, op);
		got++;
	}
	for (struct srv_sess **ps = &c->graveyard; *ps;) {
		struct srv_sess *s = *ps;
		if (!s->outstanding) {
			*ps = s->next;
			free(s->ops);
			free(s->buf);
			free(s);
		} else {
			ps = &s->next;
		}
	}
	return got;
}

int rtrs_srv_resp_rdma(struct rtrs_srv_op *op, int errno_)
{
	if (!op)
		return EINVAL;
	struct srv_sess *s = op->sess;	/* kept until this op is through op_answer */
	struct rtrs_srv_ctx *c;
	c = s->ctx;
	srv_lock(c);
	if (op->answered) {
		pthread_mutex_unlock(&c->mu);
		return EINVAL;
	}
	respq_push(c, op, errno_);
	int ret = op->path ? 0 : ENOTCONN;
	int wake = c->sleeping;	/* a polling loop takes the queue without being woken */
	if (c->cq_sleep) {
		/* The answering thread posts it (and what else waits) itself, unless a thread is
		 * inside a callback, which takes the queue when it is back (srv_answers): no
		 * thread is woken for it. */
		if (!c->in_cb)
			srv_answers(c);
		wake = 0;
	}
	pthread_mutex_unlock(&c->mu);
	uint64_t one = 1;
	if (wake && write(c->efd, &one, sizeof(one)) < 0) {
		/* the loop also drains the queue on its tick */
	}
	return ret;
}

/* Under c->mu: an IO_REQ on con. Returns nonzero when the path must close. */
static int handle_io_req(struct rtrs_srv_ctx *c, struct srv_con *con, uint32_t payload)
{
	struct srv_path *p = con->path;
	struct srv_sess *s = p->sess;
	struct rtrs_srv_io io;
	const char *why = rtrs_srv_check_io(payload, con->cid, s->qd, s->chunk, c->o.max_hdr_size,
					    s->buf, &io);

	if (why)
		return path_bad(c, p, why), 1;
	uint32_t id = io.id;
	uint16_t usr_len = io.usr_len;
	char *chunk = s->buf + (size_t)id * s->chunk;
	struct rtrs_srv_op *op = calloc(1, sizeof(*op) + usr_len + 1);
	if (!op)
		return 1;
	op->sess = s;
	op->path = p;
	op->con = con;
	op->id = id;
	op->usr_len = usr_len;
	memcpy(op->usr, chunk + io.off - usr_len, usr_len);
	void *data = chunk;
	op->dir = io.dir;
	op->datalen = io.datalen;
	if (io.dir == RTRS_WRITE) {
		p->st.reqs_write++;
		p->st.bytes_write += op->datalen;
	} else {
		memcpy(op->desc, io.desc, (size_t)io.sg_cnt * sizeof(io.desc[0]));
		op->sg_cnt = io.sg_cnt;
		op->flags = io.flags;
		p->st.reqs_read++;
	}
	/* a re-issue while the user still holds the chunk's previous op: that op's answer
	 * will be dropped (op_answer sees it is no longer current) */
	s->ops[id] = op;
	s->outstanding++;
	p->st.inflight++;
	srv_cb_unlock(c);
	int r = c->ops.rdma_ev((struct rtrs_srv_sess *)s, s->priv, op, op->dir, data, op->datalen,
			       op->usr, usr_len);
	srv_cb_relock(c);
	if (r && !op->answered)
		respq_push(c, op, r);
	return 0;
}

/* Binds chunk id's window on the path's bind queue (ibv_bind_mw: a type 1 window gets the
 * next key at once) over len bytes of the chunk (0: unbound, the old key dead); p->mkey[id] is
 * the new key. Nonzero: the post failed. */
static int bind_chunk(struct srv_path *p, uint32_t id, uint64_t wr_id, unsigned int flags,
		      uint32_t len)
{
	struct srv_sess *s = p->sess;
	struct ibv_mw_bind b = { .wr_id = wr_id, .send_flags = flags };

	if (!p->bqp)
		return 1;
	b.bind_info = (struct ibv_mw_bind_info){
		p->chunk_mr, (uintptr_t)(s->buf + (size_t)id * s->chunk), len,
		len ? IBV_ACCESS_REMOTE_WRITE : 0 };
	if (ibv_bind_mw(p->bqp, p->mw[id], &b))
		return 1;
	p->mkey[id] = p->mw[id]->rkey;
	return 0;
}

/* Under c->mu, always_invalidate: an IO_REQ arrived on con. The chunk's key is invalidated
 * first (unbound: a bind of length 0, on the bind queue); the request is read and checked only
 * once that completes (poll_binds), so the client can no longer change the chunk under the
 * server. Nonzero: the path must close. */
static int io_req_inv(struct rtrs_srv_ctx *c, struct srv_con *con, uint32_t payload)
{
	struct srv_path *p = con->path;
	struct srv_sess *s = p->sess;
	uint32_t id = payload >> rtrs_mem_bits(s->qd);

	if (id >= s->qd)
		return path_bad(c, p, "chunk id >= queue depth"), 1;
	if (p->inv_busy[id])
		return path_bad(c, p, "chunk already being invalidated"), 1;
	/* a type 1 window is invalidated by a bind of length 0 (its key moves on) */
	if (bind_chunk(p, id, SRV_WRID_INV | id, IBV_SEND_SIGNALED, 0))
		return 1;
	p->inv_busy[id] = 1;
	p->inv_payload[id] = payload;
	p->inv_cid[id] = (uint8_t)con->cid;
	return 0;
}

/* Under c->mu, always_invalidate: the path's bind queue, made when its first connection is
 * established, and the first bind of every chunk's window on it. The queue is an RC QP of the
 * path's PD connected to itself (the address and PSNs rdma_init_qp_attr gives for con, the
 * destination its own GID and QP number): a QP must be in RTS to take ibv_bind_mw (IBA
 * 10.6.7.2.2, rdma-core's providers, the kernel's rxe), and one that never sends a packet has
 * no peer to wait for, so its binds complete at once and in their order. Public verbs only:
 * the same on a ConnectX or rxe. Nonzero: the path must close. */
static int bind_queue_create(struct rtrs_srv_ctx *c, struct srv_path *p, struct srv_con *con)
{
	struct srv_sess *s = p->sess;
	struct ibv_context *dev = con->id->verbs;
	struct ibv_comp_channel *ch = ctx_cch(c, dev);
	unsigned int n = 2 * s->qd + 16;	/* at most an unbind and a bind per chunk */
	struct ibv_qp_attr a, rts;
	int mask, rts_mask;

	p->bcq = ch ? ibv_create_cq(dev, (int)n + 1, NULL, ch, 0) : NULL;
	if (!p->bcq)
		return 1;
	struct ibv_qp_init_attr qa = { .send_cq = p->bcq, .recv_cq = p->bcq,
				       .cap = { .max_send_wr = n, .max_recv_wr = 1,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	p->bqp = ibv_create_qp(p->pd, &qa);
	if (!p->bqp)
		return 1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(con->id, &a, &mask))
		return 1;
	a.qp_access_flags = 0;	/* no remote access: nothing ever arrives on it */
	if (ibv_modify_qp(p->bqp, &a, mask))
		return 1;
	memset(&rts, 0, sizeof(rts));
	rts.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(con->id, &rts, &rts_mask))
		return 1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (rdma_init_qp_attr(con->id, &a, &mask))
		return 1;
	a.qp_access_flags = 0;
	a.dest_qp_num = p->bqp->qp_num;
	a.rq_psn = rts.sq_psn;
	if (a.ah_attr.is_global) {
		if (ibv_query_gid(dev, a.ah_attr.port_num, a.ah_attr.grh.sgid_index,
				  &a.ah_attr.grh.dgid))
			return 1;
	} else {
		struct ibv_port_attr pa;
		if (ibv_query_port(dev, a.ah_attr.port_num, &pa))
			return 1;
		a.ah_attr.dlid = pa.lid;
	}
	if (ibv_modify_qp(p->bqp, &a, mask) || ibv_modify_qp(p->bqp, &rts, rts_mask))
		return 1;
	ibv_req_notify_cq(p->bcq, 0);
	for (uint32_t i = 0; i < s->qd; i++)
		if (bind_chunk(p, i, SRV_WRID_BIND | i, IBV_SEND_SIGNALED, s->chunk))
			return 1;
	return 0;
}

static struct srv_path *path_of(struct rtrs_srv_ctx *c, struct srv_path *p)
{
	for (struct srv_sess *s = c->sessions; s; s = s->next)
		for (struct srv_path *q = s->paths; q; q = q->next)
			if (q == p)
				return p;
	return NULL;
}

static void send_hb_ack(struct srv_con *con)
{
	post_imm(con, rtrs_to_imm(RTRS_HB_ACK_IMM, 0), NULL);
}

/* Under c->mu. */
static int poll_con(struct rtrs_srv_ctx *c, struct srv_con *con)
{
	struct ibv_wc wc[16];
	int n, got = 0;
	struct srv_path *p = con->path;

	while (con->cq && (n = ibv_poll_cq(con->cq, 16, wc)) > 0) {
		got += n;
		for (int i = 0; i < n; i++) {
			if (p->closing)
				break;
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
					fprintf(stderr, "rtrs-srv: %s: completion error %s\n",
						p->sess->name, ibv_wc_status_str(wc[i].status));
				CLOSING(p);
				break;
			}
			if (!(wc[i].opcode & IBV_WC_RECV))
				continue;
			p->last_rx_ns = rtrs_now_ns();
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				uint32_t t, pl;
				rtrs_from_imm(be32toh(wc[i].imm_data), &t, &pl);
				if (t == RTRS_IO_REQ_IMM) {
					if (p->mw ? io_req_inv(c, con, pl) : handle_io_req(c, con, pl))
						CLOSING(p);
				} else if (t == RTRS_HB_MSG_IMM) {
					send_hb_ack(con);
				} else if (t != RTRS_HB_ACK_IMM) {
					path_bad(c, p, "immediate type");
				}
			} else if (wc[i].opcode == IBV_WC_RECV) {
				char *b = con->rbuf + wc[i].wr_id * SRV_RECV_SIZE;
				char name[RTRS_NAME_MAX + 1];
				if (con->cid == 0 && !rtrs_srv_check_info_req(b, wc[i].byte_len, name)) {
					struct srv_sess *s = p->sess;
					if (!s->name[0])
						memcpy(s->name, name, sizeof(s->name));
					snprintf(p->st.sessname, sizeof(p->st.sessname), "%.63s", s->name);
					if (!s->up) {	/* the session is up once its name is known */
						s->up = 1;
						int r = 0;
						if (c->ops.link_ev) {
							srv_cb_unlock(c);
							r = c->ops.link_ev((struct rtrs_srv_sess *)s,
									   RTRS_SRV_LINK_EV_CONNECTED, c->o.priv);
							srv_cb_relock(c);
						}
						if (!path_of(c, p))
							return got;
						if (r) {
							CLOSING(p);
							break;
						}
					}
					if (p->binds_left)
						p->info_pending = 1;	/* sent when the binds are done */
					else if (send_info_rsp(p, con))
						CLOSING(p);
				} else {
					path_bad(c, p, "SEND message");
				}
			}
			if (!p->closing && post_recv(con, (unsigned int)wc[i].wr_id))
				CLOSING(p);
			if (!path_of(c, p))
				return got;
		}
		if (p->closing)
			break;
	}
	return got;
}

/* Under c->mu, always_invalidate: the bind queue's completions. Returns them. */
static int poll_binds(struct rtrs_srv_ctx *c, struct srv_path *p)
{
	struct ibv_wc wc[16];
	struct srv_ans_batch b;
	int n, got = 0;

	b.con = NULL;
	b.nops = b.nw = b.ns = 0;
	while (p->bcq && !p->closing && (n = ibv_poll_cq(p->bcq, 16, wc)) > 0) {
		got += n;
		for (int i = 0; i < n && !p->closing; i++) {
			uint32_t id = (uint32_t)wc[i].wr_id;
			if (wc[i].status != IBV_WC_SUCCESS) {
				if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
					fprintf(stderr, "rtrs-srv: %s: bind completion error %s\n",
						p->sess->name, ibv_wc_status_str(wc[i].status));
				CLOSING(p);
				break;
			}
			if (id >= p->sess->qd)
				continue;
			switch (SRV_WRID_KIND(wc[i].wr_id)) {
			case SRV_WRID_BIND:	/* first binds: INFO_RSP waits for them */
				if (p->binds_left && !--p->binds_left && p->info_pending) {
					p->info_pending = 0;
					if (send_info_rsp(p, &p->cons[0]))
						CLOSING(p);
				}
				break;
			case SRV_WRID_INV: {	/* the chunk is closed: its request can be read */
				struct srv_con *con = &p->cons[p->inv_cid[id]];
				if (!p->inv_busy[id])
					break;
				p->inv_busy[id] = 0;
				ans_flush(p, &b);	/* the callback may close p */
				if (!con->qp || handle_io_req(c, con, p->inv_payload[id]))
					CLOSING(p);
				if (!path_of(c, p))
					return got;
				break;
			}
			case SRV_WRID_REBIND: {	/* the new key is live: the answer goes */
				struct rtrs_srv_op *op = p->rebind_op[id];
				p->rebind_op[id] = NULL;
				if (op)
					answer_post(p, op, &b);
				break;
			}
			}
		}
		ans_flush(p, &b);
	}
	return got;
}

static struct srv_sess *sess_get(struct rtrs_srv_ctx *c, const uint8_t *uuid)
{
	for (struct srv_sess *s = c->sessions; s; s = s->next)
		if (!memcmp(s->uuid, uuid, 16))
			return s;
	struct srv_sess *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->ctx = c;
	memcpy(s->uuid, uuid, 16);
	s->qd = c->o.queue_depth;
	s->chunk = c->o.chunk_size;
	s->buf = aligned_alloc(4096, (size_t)s->qd * s->chunk);
	s->ops = calloc(s->qd, sizeof(*s->ops));
	if (!s->buf || !s->ops) {
		free(s->buf);
		free(s->ops);
		free(s);
		return NULL;
	}
	memset(s->buf, 0, (size_t)s->qd * s->chunk);
	s->next = c->sessions;
	c->sessions = s;
	return s;
}

static void reject(struct rdma_cm_id *id, int err)
{
	struct rtrs_msg_conn_rsp rsp;
	memset(&rsp, 0, sizeof(rsp));
	rsp.magic = RTRS_MAGIC;
	rsp.version = RTRS_PROTO_VER;
	rsp.errno_ = (uint16_t)(-err);
	rdma_reject(id, &rsp, sizeof(rsp));
	rdma_destroy_id(id);
}

/* Under c->mu. */
static void on_connect_request(struct rtrs_srv_ctx *c, struct rdma_cm_id *id, const void *pdata,
			       size_t plen)
{
	struct rtrs_msg_conn_req rq;
	if (rtrs_srv_check_con_req(pdata, plen, &rq)) {
		reject(id, -EPROTO);
		return;
	}
	struct srv_sess *s = sess_get(c, rq.paths_uuid);
	if (!s) {
		reject(id, -ENOMEM);
		return;
	}
	struct srv_path *p = NULL;
	for (struct srv_path *q = s->paths; q; q = q->next)
		if (!memcmp(q->uuid, rq.sess_uuid, 16))
			p = q;
	if (p && (p->recon_cnt != rq.recon_cnt || p->cid_num != rq.cid_num ||
		  p->cons[rq.cid].id)) {
		/* a reconnect of a path we still hold: the stale one goes */
		path_close(c, p);
		p = NULL;
		s = sess_get(c, rq.paths_uuid);
		if (!s) {
			reject(id, -ENOMEM);
			return;
		}
	}
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p) {
			reject(id, -ENOMEM);
			return;
		}
		p->sess = s;
		memcpy(p->uuid, rq.sess_uuid, 16);
		p->recon_cnt = rq.recon_cnt;
		p->cid_num = rq.cid_num;
		p->last_rx_ns = rtrs_now_ns();
		p->st.state = RTRS_PATH_CONNECTING;
		p->pd = ibv_alloc_pd(id->verbs);
		size_t ilen = sizeof(struct rtrs_msg_info_rsp) + (size_t)s->qd * 16;
		p->sbuf = calloc(1, ilen);
		int ai = c->o.always_invalidate;
		if (p->pd) {
			/* always_invalidate: the chunks are reachable through their windows only */
			p->chunk_mr = ibv_reg_mr(p->pd, s->buf, (size_t)s->qd * s->chunk,
						 IBV_ACCESS_LOCAL_WRITE |
						 (ai ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_WRITE));
			if (p->sbuf)
				p->smr = ibv_reg_mr(p->pd, p->sbuf, ilen, IBV_ACCESS_LOCAL_WRITE);
		}
		p->next = s->paths;
		s->paths = p;
		int werr = 0;
		if (ai && p->chunk_mr && rq.cid_num >= 2) {
			p->mw = calloc(s->qd, sizeof(*p->mw));
			p->mkey = calloc(s->qd, sizeof(*p->mkey));
			p->inv_payload = calloc(s->qd, sizeof(*p->inv_payload));
			p->inv_busy = calloc(s->qd, 1);
			p->rk = calloc(s->qd, sizeof(*p->rk));
			p->inv_cid = calloc(s->qd, 1);
			p->rebind_op = calloc(s->qd, sizeof(*p->rebind_op));
			werr = !p->mw || !p->mkey || !p->inv_payload || !p->inv_busy || !p->rk ||
			       !p->inv_cid || !p->rebind_op;
			if (!werr)
				p->rkmr = ibv_reg_mr(p->pd, p->rk, (size_t)s->qd * sizeof(*p->rk),
						     IBV_ACCESS_LOCAL_WRITE);
			werr |= !p->rkmr;
			for (uint32_t i = 0; !werr && i < s->qd; i++) {
				p->mw[i] = ibv_alloc_mw(p->pd, IBV_MW_TYPE_1);
				if (!p->mw[i]) {
					werr = 1;
					break;
				}
				p->mkey[i] = p->mw[i]->rkey;
			}
			p->binds_left = s->qd;
		}
		if (!p->chunk_mr || !p->smr || werr || (ai && rq.cid_num < 2)) {
			path_close(c, p);
			reject(id, -ENOMEM);
			return;
		}
	}
	if (id->verbs != p->pd->context) {
		reject(id, -EINVAL);
		return;
	}
	struct srv_con *con = &p->cons[rq.cid];
	con->path = p;
	con->cid = rq.cid;
	unsigned int nrecv = rq.cid ? s->qd + 8 : SRV_SVC_RECVS;
	/* per request: its data WRITEs, SEND with invalidate, answer (binds: the bind queue) */
	unsigned int nsend = rq.cid ? s->qd * (SRV_MAX_DESC + 4) + 16 : 64;
	struct ibv_comp_channel *ch = ctx_cch(c, id->verbs);
	con->cq = ch ? ibv_create_cq(id->verbs, (int)(nrecv + nsend), con, ch, 0) : NULL;
	con->rbuf = calloc(nrecv, SRV_RECV_SIZE);
	if (!con->cq || !con->rbuf)
		goto fail;
	con->rmr = ibv_reg_mr(p->pd, con->rbuf, (size_t)nrecv * SRV_RECV_SIZE, IBV_ACCESS_LOCAL_WRITE);
	if (!con->rmr)
		goto fail;
	struct ibv_qp_init_attr qa = { .send_cq = con->cq, .recv_cq = con->cq,
				       .cap = { .max_send_wr = nsend, .max_recv_wr = nrecv,
						.max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	if (rdma_create_qp(id, p->pd, &qa))
		goto fail;
	con->qp = id->qp;
	con->id = id;
	id->context = con;
	con->nrecv = nrecv;
	for (unsigned int i = 0; i < nrecv; i++)
		if (post_recv(con, i))
			goto fail_noid;
	ibv_req_notify_cq(con->cq, 0);
	struct rtrs_msg_conn_rsp rsp;
	memset(&rsp, 0, sizeof(rsp));
	rsp.magic = RTRS_MAGIC;
	rsp.version = RTRS_PROTO_VER;
	rsp.queue_depth = (uint16_t)s->qd;
	rsp.max_hdr_size = c->o.max_hdr_size;
	rsp.max_io_size = s->chunk - c->o.max_hdr_size;
	rsp.flags = p->mw ? RTRS_MSG_NEW_RKEY_F : 0;
	struct rdma_conn_param cp = { .private_data = &rsp, .private_data_len = sizeof(rsp),
				      .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7 };
	if (rdma_accept(id, &cp))
		goto fail_noid;
	return;
fail:
	reject(id, -ENOMEM);
	con->id = NULL;
	con_destroy(con);
	path_close(c, p);
	return;
fail_noid:
	path_close(c, p);
}

/* Under c->mu: asks for an event at the next completion of every CQ (before a sleep). */
static void srv_arm_all(struct rtrs_srv_ctx *c)
{
	for (struct srv_sess *s = c->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths; p; p = p->next) {
			for (unsigned int k = 0; k < p->cid_num; k++)
				if (p->cons[k].cq)
					ibv_req_notify_cq(p->cons[k].cq, 0);
			if (p->bcq)
				ibv_req_notify_cq(p->bcq, 0);
		}
}

/* Under c->mu: polls every CQ (cqs), closes closing and silent paths. Returns the completions. */
static int srv_pass(struct rtrs_srv_ctx *c, int cqs)
{
	uint64_t now = rtrs_now_ns();
	uint64_t dead_ns = (uint64_t)c->o.hb_interval_ms * 1000000ull * (c->o.hb_missed_max + 1);
	int got = 0;

	/* a path closed (and perhaps its session freed) restarts the walk: nothing of the
	 * lists is touched after it (ASan found the session's next read after its free) */
rescan:
	for (struct srv_sess *s = c->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths; p; p = p->next) {
			for (unsigned int k = 0; cqs && k < p->cid_num && !p->closing; k++)
				if (p->cons[k].cq)
					got += poll_con(c, &p->cons[k]);
			if (!path_of(c, p))
				goto rescan;
			/* after the connections: the unbinds of the IO_REQs just taken are done */
			if (cqs)
				got += poll_binds(c, p);
			if (!path_of(c, p))
				goto rescan;
			if (!cqs && p->connected && !p->closing && now > p->last_rx_ns &&
			    now - p->last_rx_ns > dead_ns) {
				/* the CM thread judges: what a channel's thread has not taken yet
				 * (it may be waiting for a CPU) counts first, as the old loop polled
				 * before it judged */
				for (unsigned int k = 0; k < p->cid_num && !p->closing; k++)
					if (p->cons[k].cq)
						poll_con(c, &p->cons[k]);
				if (!path_of(c, p))
					goto rescan;
				poll_binds(c, p);
				if (!path_of(c, p))
					goto rescan;
			}
			if (p->connected && !p->closing && now > p->last_rx_ns &&
			    now - p->last_rx_ns > dead_ns) {
				char d[64];
				rtrs_addr_str(p->cons[0].id ? rdma_get_peer_addr(p->cons[0].id) : NULL,
					      d, sizeof(d));
				fprintf(stderr, "rtrs-srv: session %s path from %s: nothing received for "
					"%llu ms: path closed\n", p->sess->name, d,
					(unsigned long long)((now - p->last_rx_ns) / 1000000));
				CLOSING(p);
			}
			if (p->closing) {
				path_close(c, p);
				goto rescan;
			}
		}
	return got;
}

/* Under c->mu: the CM channel's events (connection requests, establishment, disconnects). */
static void handle_cm(struct rtrs_srv_ctx *c)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(c->ech, &ev)) {
		struct rdma_cm_event e = *ev;
		char pd[256];
		size_t plen = ev->param.conn.private_data_len;
		if (plen > sizeof(pd))
			plen = sizeof(pd);
		if (ev->param.conn.private_data)
			memcpy(pd, ev->param.conn.private_data, plen);
		else
			plen = 0;
		rdma_ack_cm_event(ev);
		struct srv_con *con = e.id->context;
		if (e.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			on_connect_request(c, e.id, pd, plen);
			continue;
		}
		if (!con || con->id != e.id)
			continue;
		struct srv_path *p = con->path;
		if (e.event == RDMA_CM_EVENT_ESTABLISHED) {
			con->established = 1;
			if (p->mw && !p->bqp && bind_queue_create(c, p, con))
				CLOSING(p);
			if (++p->nest == p->cid_num) {
				/* the session is up once INFO_REQ names it (poll_con) */
				p->connected = 1;
				p->st.state = RTRS_PATH_CONNECTED;
				rtrs_addr_str(rdma_get_local_addr(e.id), p->st.src, sizeof(p->st.src));
				rtrs_addr_str(rdma_get_peer_addr(e.id), p->st.dst, sizeof(p->st.dst));
			}
		} else if (e.event == RDMA_CM_EVENT_DISCONNECTED ||
			   e.event == RDMA_CM_EVENT_CONNECT_ERROR ||
			   e.event == RDMA_CM_EVENT_UNREACHABLE || e.event == RDMA_CM_EVENT_REJECTED ||
			   e.event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
			CLOSING(p);
		}
	}
}

/* Under c->mu: the counters file, once a second. */
static void srv_stats(struct rtrs_srv_ctx *c, uint64_t *last)
{
	uint64_t now = rtrs_now_ns();

	if (now - *last > 1000000000ull && c->stats_dir[0]) {
		*last = now;
		struct rtrs_path_stats st[64];
		int k = 0;
		for (struct srv_sess *s = c->sessions; s; s = s->next)
			for (struct srv_path *p = s->paths; p && k < 64; p = p->next)
				st[k++] = p->st;
		rtrs_stats_write(c->stats_dir, "srv", "server", st, k);
	}
}

/*
 * RTRS_EVENT_SLEEP=cq: a completion channel's thread. As srv_thread, it polls every CQ while
 * completions come and for o.poll_us after the last one, stepping aside when another thread
 * waits for the lock; then it arms the CQs, looks once more, and sleeps in a blocking
 * ibv_get_cq_event on its channel alone, so that a driver that wakes such a sleeper by the
 * packet itself (softrdma's chan_rx) needs no thread of its own in between. CM events, the
 * silent paths' timer and the counters are srv_cm_thread's; answers from the user's threads
 * are posted by those threads (rtrs_srv_resp_rdma). rtrs_srv_close cancels it in its sleep.
 */
static void *srv_cq_thread(void *arg)
{
	struct rtrs_chan_thr *t = arg;
	struct rtrs_srv_ctx *c = t->owner;
	struct rtrs_loop lp;
	int woke = 0;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_setname_np(pthread_self(), "rtrs-srv");	/* perf, top -H */
	rtrs_loop_init(&lp, c->o.poll_us);
	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		srv_pass_wait(c);
		uint64_t now = rtrs_now_ns();
		int look, spin = rtrs_loop_begin(&lp, now, &look);
		if (look)
			lp.last_fds = now;	/* the fds are srv_cm_thread's */
		if (!spin && !woke) {
			/* arm, then look once more: what completed before the arm made no event */
			srv_arm_all(c);
			/* respq: answers queued during a callback of that pass (a link_ev) */
			if (!srv_answers(c) && !srv_pass(c, 1) && !c->respq) {
				pthread_mutex_unlock(&c->mu);
				int err = rtrs_cq_wait(t->ch);
				if (err && err != EINTR)
					poll(NULL, 0, 1);	/* not a busy loop if it keeps failing */
				pthread_mutex_lock(&c->mu);
				woke = 1;
				continue;
			}
		}
		woke = 0;
		int got = srv_answers(c);
		got += srv_pass(c, 1);
		rtrs_loop_busy(&lp, got);
		if (spin)
			rtrs_step_aside(&c->mu, &c->lock_waiters);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/*
 * RTRS_EVENT_SLEEP=cq: the context's thread. It sleeps in poll() on the CM channel and the
 * eventfd (the close) for up to 100 ms, then, once no thread is inside a callback, handles the
 * CM events (connections, their CQs and channels: a new channel gets its thread), closes paths
 * that closed or fell silent, posts queued answers and writes the counters. It polls no CQ.
 */
static void *srv_cm_thread(void *arg)
{
	struct rtrs_srv_ctx *c = arg;
	uint64_t last_stats = 0;

	pthread_setname_np(pthread_self(), "rtrs-srv-cm");
	srv_lock(c);
	while (!c->stop) {
		struct pollfd pf[2] = { { c->ech->fd, POLLIN, 0 }, { c->efd, POLLIN, 0 } };
		pthread_mutex_unlock(&c->mu);
		poll(pf, 2, 100);
		if (pf[1].revents & POLLIN) {
			uint64_t v;
			if (read(c->efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: nothing */
			}
		}
		srv_lock(c);
		if (c->stop)
			break;
		srv_pass_wait(c);
		if (pf[0].revents & POLLIN)
			handle_cm(c);
		srv_pass(c, 0);
		srv_answers(c);
		srv_stats(c, &last_stats);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/*
 * The context's thread. As the client's (rtrs-clt.c, clt_thread): it polls every CQ while
 * completions come and for o.poll_us after the last one, then arms the CQs and sleeps in
 * poll() on the completion channels, the CM channel and the eventfd (which an answer from
 * another thread writes only while the thread sleeps). While polling it looks at the fds
 * every millisecond and steps aside when another thread waits for the lock.
 */
static void *srv_thread(void *arg)
{
	struct rtrs_srv_ctx *c = arg;
	uint64_t last_stats = 0;
	struct rtrs_loop lp;

	pthread_setname_np(pthread_self(), "rtrs-srv");	/* perf, top -H */
	rtrs_loop_init(&lp, c->o.poll_us);
	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		int look, spin = rtrs_loop_begin(&lp, rtrs_now_ns(), &look);
		int got = 0;
		if (look) {
			int timeout = 0;
			if (!spin) {
				/* arm, then look once more: what completed before the arm
				 * made no event */
				srv_arm_all(c);
				got += srv_pass(c, 1);
				if (!got && !c->respq)
					timeout = 100;
			}
			if (rtrs_loop_wait(&lp, &c->mu, c->ech->fd, c->efd, c->cch, c->ncch, timeout,
					   &c->sleeping))
				handle_cm(c);
		}
		got += srv_answers(c);
		got += srv_pass(c, 1);
		rtrs_loop_busy(&lp, got);
		srv_stats(c, &last_stats);
		if (spin)
			rtrs_step_aside(&c->mu, &c->lock_waiters);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

struct rtrs_srv_ctx *rtrs_srv_open(const struct rtrs_srv_ops *ops, const char *const *addrs,
				   size_t n, const struct rtrs_srv_opts *opts)
{
	struct rtrs_srv_ctx *c;
	int err = 0;

	if (!ops || !ops->rdma_ev || !addrs || !n || n > 16) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ops = *ops;
	rtrs_srv_opts_init(&c->o);
	if (opts) {
		size_t sz = opts->size && opts->size < sizeof(c->o) ? opts->size : sizeof(c->o);
		memcpy(&c->o, opts, sz);
		c->o.size = sizeof(c->o);
	}
	if (c->o.chunk_size < RTRS_MIN_CHUNK_SIZE || (c->o.chunk_size & (c->o.chunk_size - 1)) ||
	    !c->o.queue_depth || c->o.queue_depth > RTRS_MAX_SESS_QUEUE_DEPTH ||
	    c->o.max_hdr_size >= c->o.chunk_size / 2 || !c->o.hb_interval_ms ||
	    (1ull << rtrs_mem_bits(c->o.queue_depth)) < c->o.chunk_size) {
		free(c);
		errno = EINVAL;
		return NULL;
	}
	const char *sd = c->o.stats_dir ? c->o.stats_dir : getenv("RTRS_STATS_DIR");
	if (sd)
		snprintf(c->stats_dir, sizeof(c->stats_dir), "%s", sd);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cb_cv, NULL);
	c->cq_sleep = rtrs_event_sleep_cq();
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	c->ech = rdma_create_event_channel();
	if (c->efd < 0 || !c->ech) {
		err = errno ? errno : ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		struct sockaddr_storage ss;
		err = rtrs_parse_addr(addrs[i], &ss, 1);
		if (err)
			goto fail;
		struct rdma_cm_id *id;
		if (rdma_create_id(c->ech, &id, NULL, RDMA_PS_TCP)) {
			err = errno;
			goto fail;
		}
		c->listen[c->nlisten++] = id;
		if (rdma_bind_addr(id, (struct sockaddr *)&ss) || rdma_listen(id, 64)) {
			err = errno ? errno : EADDRINUSE;
			goto fail;
		}
	}
	/* the loop reads events without blocking */
	fcntl(c->ech->fd, F_SETFL, fcntl(c->ech->fd, F_GETFL) | O_NONBLOCK);
	if (pthread_create(&c->thr, NULL, c->cq_sleep ? srv_cm_thread : srv_thread, c)) {
		err = EAGAIN;
		goto fail;
	}
	return c;
fail:
	for (size_t i = 0; i < c->nlisten; i++)
		rdma_destroy_id(c->listen[i]);
	if (c->ech)
		rdma_destroy_event_channel(c->ech);
	if (c->efd >= 0)
		close(c->efd);
	free(c);
	errno = err ? err : EINVAL;
	return NULL;
}

void rtrs_srv_close(struct rtrs_srv_ctx *c)
{
	if (!c)
		return;
	uint64_t one = 1;

	c->stop = 1;
	if (c->cq_sleep && write(c->efd, &one, sizeof(one)) < 0) {
		/* the CM thread sees stop within its 100 ms tick */
	}
	pthread_join(c->thr, NULL);
	/* Channels' threads: one asleep in ibv_get_cq_event is cancelled there (the only place
	 * where it may be); one that is running sees stop at its next pass. */
	for (int i = 0; i < c->ncch; i++)
		rtrs_chan_thr_stop(&c->cch_thr[i]);
	pthread_mutex_lock(&c->mu);
	while (c->sessions) {
		struct srv_sess *s = c->sessions;
		if (!s->paths) {
			c->sessions = s->next;
			sess_maybe_free(c, s);
			continue;
		}
		while (s->paths && c->sessions == s)
			path_close(c, s->paths);
	}
	while (c->respq) {
		struct rtrs_srv_op *op = c->respq;
		c->respq = op->qnext;
		op_answer(c, op);
	}
	pthread_mutex_unlock(&c->mu);
	for (size_t i = 0; i < c->nlisten; i++)
		rdma_destroy_id(c->listen[i]);
	for (int i = 0; i < c->ncch; i++)
		ibv_destroy_comp_channel(c->cch[i]);
	rdma_destroy_event_channel(c->ech);
	close(c->efd);
	/* sessions still held by the user (graveyard) leak on purpose: the user writes into them */
	free(c);
}

void rtrs_srv_set_sess_priv(struct rtrs_srv_sess *sess, void *priv)
{
	((struct srv_sess *)sess)->priv = priv;
}

const char *rtrs_srv_get_sess_name(struct rtrs_srv_sess *sess)
{
	return ((struct srv_sess *)sess)->name;
}

uint32_t rtrs_srv_get_queue_depth(struct rtrs_srv_sess *sess)
{
	return ((struct srv_sess *)sess)->qd;
}

struct rtrs_srv_sess *rtrs_srv_op_sess(struct rtrs_srv_op *op)
{
	return (struct rtrs_srv_sess *)op->sess;
}

int rtrs_srv_path_stats(struct rtrs_srv_ctx *c, struct rtrs_path_stats *out, int max)
{
	int k = 0;
	srv_lock(c);
	for (struct srv_sess *s = c->sessions; s; s = s->next)
		for (struct srv_path *p = s->paths; p; p = p->next) {
			if (k < max)
				out[k] = p->st;
			k++;
		}
	pthread_mutex_unlock(&c->mu);
	return k;
}
