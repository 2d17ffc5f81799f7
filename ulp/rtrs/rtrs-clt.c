/* SPDX-License-Identifier: MIT */
/*
 * RTRS client (docs/rtrs.md): a session of several paths, each a service connection plus IO
 * connections; permits = server chunks; multipath policies; heartbeats; reconnect with delay
 * and jitter; fail-over of requests in flight. One event thread per session; callers submit
 * from any thread under the session lock. Public verbs and rdma_cm only.
 */
#include "rtrs-common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define CLT_MAX_PATHS 16
#define CLT_MAX_CONS 17
#define CLT_IO_RECV_SIZE 64
#define CLT_SVC_RECVS 8
#define CLT_QD_CAP 1024	/* QPs are sized before the server's queue depth is known */
#define CLT_WRID_TEST (UINT64_MAX - 1)
#define CLT_MAX_UBUFS 16	/* regions registered with rtrs_clt_reg_buf */
#define CLT_MAX_SEND_SGE 16	/* a zero-copy WRITE: the caller's pieces + [usr][trailer] */
/* The all-memory region (implicit ODP) takes requests of at least this many bytes: on softrdma
 * each message through it costs an madvise (about 0.5 us), the copy of 8 KiB as much. */
#define CLT_ODP_MIN_LEN 16384

/* Memory of the caller's registered with every path (rtrs_clt_reg_buf): requests whose scatter
 * list lies in one such region go without the bounce copy. */
struct clt_ubuf {
	char *addr;
	size_t len;
	unsigned int refs;	/* requests not yet completed that use it */
	int used;
};

struct clt_path;

struct clt_con {
	struct clt_path *path;
	unsigned int cid;
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	char *rbuf;
	size_t rsize;
	struct ibv_mr *rmr;
	unsigned int nrecv;
	unsigned int wr_cnt;	/* requests posted (rtrs_signal) */
	int established;
};

struct clt_path {
	struct rtrs_clt *clt;
	int used;
	struct sockaddr_storage src, dst;
	int has_src;
	char src_s[64], dst_s[64];
	uint8_t uuid[16];
	uint16_t recon_cnt;
	unsigned int cid_num;
	struct clt_con cons[CLT_MAX_CONS];
	unsigned int nest, rr;
	struct ibv_pd *pd;
	struct ibv_mr *data_mr, *msg_mr;
	struct ibv_mr *umr[CLT_MAX_UBUFS];	/* the session's ubufs in this path's PD */
	unsigned int max_sge;	/* send SGEs of the IO connections' QPs */
	struct rtrs_sg_desc *rbufs;
	/* NEW_RKEY sessions: a type 2 window per permit over its READ landing buffer, bound for
	 * each READ on the permit's IO connection (req_con), invalidated by the server */
	struct ibv_mw **rmw;
	uint32_t *rmw_key;
	uint8_t *rmw_bound;
	int state, removing;
	uint64_t state_ns, reconnect_at, hb_sent_ns;
	int hb_wait;
	/* heartbeats sent and not answered yet (reliable connection: each is answered once) */
	unsigned int hb_out;
	unsigned int attempts;
	struct rtrs_path_stats st;
	char why[160];	/* what made the next path_fail's EIO (printed with it) */
	/* rtrs_clt_request posts with mu dropped, holding post_lk for reading; path_teardown
	 * holds it for writing while it destroys the QPs, windows and MRs, and counts gen: a
	 * poster that finds gen changed does not post (path_fail has taken its request).
	 * Both stay the last fields: path_init clears only what is before them, so a slot
	 * reused by rtrs_clt_add_path keeps its lock (a stale poster may still hold it) and
	 * its gen keeps counting up (reset to 0, a stale poster's gen 0 would match again and
	 * it would post on the QP the teardown destroyed). */
	pthread_rwlock_t post_lk;
	unsigned int gen;
};
_Static_assert(offsetof(struct clt_path, gen) > offsetof(struct clt_path, post_lk),
	       "path_init clears a clt_path up to post_lk");

enum { REQ_FREE, REQ_PENDING, REQ_INFLIGHT };

struct clt_req {
	uint32_t id;
	int state;
	enum rtrs_dir dir;
	rtrs_conf_fn conf;
	void *priv;
	struct iovec *sg;
	unsigned int sg_cnt;
	uint32_t len;
	uint16_t usr_len;
	int ubuf;	/* the registered region holding all of sg, or -1 */
	int staged;	/* WRITE: data, usr and trailer are in the permit's bounce buffer */
	int bounced;	/* READ: the last post landed the data in the bounce buffer */
	struct clt_path *path;
	uint64_t submit_ns;
	int done_err;
	struct clt_req *dnext;
};

struct rtrs_clt {
	struct rtrs_clt_opts o;
	char name[RTRS_NAME_MAX + 1];
	char stats_dir[256];
	uint8_t uuid[16];
	struct rdma_event_channel *ech;
	struct ibv_comp_channel *cch[CLT_MAX_PATHS];
	struct ibv_context *cch_dev[CLT_MAX_PATHS];
	int ncch;
	/* RTRS_EVENT_SLEEP=cq (rtrs_event_sleep_cq): a thread per channel (cch_thr) polls and
	 * sleeps in ibv_get_cq_event; thr takes the CM events and the timers */
	int cq_sleep;
	struct rtrs_chan_thr *cch_thr[CLT_MAX_PATHS];
	int efd;
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct clt_path paths[CLT_MAX_PATHS];
	/* session, once the first CON_RSP came */
	uint32_t qd, chunk, max_io, max_hdr;
	unsigned int mem_bits;
	int new_rkey;	/* CON_RSP had NEW_RKEY: the server's always_invalidate */
	/* test hooks (rtrs-common.h) */
	int force_path;
	int64_t force_id;
	int test_status;	/* completion status of the last rtrs_clt_test_raw2, -1 pending */
	char *data;	/* qd x chunk: WRITE bounce and READ landing */
	char *msg;	/* qd x (max_hdr + 8 + 16): each permit's user header and trailer */
	struct clt_ubuf ubufs[CLT_MAX_UBUFS];
	size_t msg_stride;
	struct clt_req *reqs;
	uint32_t *free_ids;
	uint32_t nfree;
	unsigned int rr;
	int any_connected_before, all_down_notified;
	/* link_ev tickets (clt_link_ev): taken where the state changes, called in their order;
	 * lev_thr is inside link_ev while lev_in */
	uint64_t lev_next, lev_turn;
	int lev_in;
	pthread_t lev_thr;
	int last_err;
	volatile int stop;
	int closing;
	struct clt_req *done_head;
	/* threads other than the event thread waiting for mu (clt_lock), or for a permit while
	 * one is free: the polling event thread steps aside for them */
	volatile int lock_waiters, permit_waiters;
	/* rtrs_clt_poll: a thread that waits for its own request polls the CQs itself (at most
	 * one at a time); meanwhile, and while nothing is in flight, the event thread sleeps with
	 * the IO connections' CQs unarmed (ev_unarmed), so that no completion wakes it */
	int app_pollers;
	int ev_unarmed;
	int poll_mode;	/* the last request was submitted with RTRS_REQ_POLL */
	uint64_t app_polls, app_poll_done, app_poll_busy, app_poll_kicks;
};

/* A channel's thread (RTRS_EVENT_SLEEP=cq). */
static void *clt_cq_thread(void *arg);

/* The lock, from the API (not the event thread): counted, so that the event thread, which
 * holds it while it polls, lets go for a moment. */
static void clt_lock(struct rtrs_clt *c)
{
	__atomic_add_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_lock(&c->mu);
	__atomic_sub_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
}

/* Under c->mu, right where the session's state changed: calls link_ev(ev) with mu dropped once
 * every event taken before it has been delivered. Paths fail and come back on different
 * threads (a channel's, the CM thread's), so without the ticket a RECONNECTED could overtake
 * the DISCONNECTED before it, or run beside it. The wait is counted in lock_waiters (as
 * clt_lock), so that a channel's thread polling with mu held lets the waiter in. */
static void clt_link_ev(struct rtrs_clt *c, enum rtrs_clt_link_ev ev)
{
	if (c->lev_in && pthread_equal(c->lev_thr, pthread_self())) {
		/* an event that link_ev itself caused (rtrs_clt_remove_path in it): at once,
		 * nested, as its turn would never come */
		pthread_mutex_unlock(&c->mu);
		c->o.link_ev(c->o.priv, ev);
		pthread_mutex_lock(&c->mu);
		return;
	}
	uint64_t t = c->lev_next++;
	if (c->lev_turn != t) {
		__atomic_add_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
		while (c->lev_turn != t)
			pthread_cond_wait(&c->cv, &c->mu);
		__atomic_sub_fetch(&c->lock_waiters, 1, __ATOMIC_ACQ_REL);
	}
	c->lev_in = 1;
	c->lev_thr = pthread_self();
	pthread_mutex_unlock(&c->mu);
	c->o.link_ev(c->o.priv, ev);
	pthread_mutex_lock(&c->mu);
	c->lev_in = 0;
	c->lev_turn++;
	pthread_cond_broadcast(&c->cv);
}

void rtrs_clt_opts_init(struct rtrs_clt_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	o->policy = RTRS_MP_MIN_INFLIGHT;
	o->io_cons = 1;
	o->hb_interval_ms = RTRS_HB_INTERVAL_MS;
	o->hb_missed_max = RTRS_HB_MISSED_MAX;
	o->reconnect_delay_ms = 1000;
	o->max_reconnect_attempts = -1;
	o->connect_timeout_ms = 10000;
	o->fail_timeout_ms = 30000;
	o->max_segments = 128;
	o->poll_us = rtrs_poll_us_default();
}

static void rand_bytes(uint8_t *b, size_t n)
{
	FILE *f = fopen("/dev/urandom", "r");
	if (!f || fread(b, 1, n, f) != n) {
		for (size_t i = 0; i < n; i++)
			b[i] = (uint8_t)(rand() ^ (int)rtrs_now_ns());
	}
	if (f)
		fclose(f);
}

static struct ibv_comp_channel *clt_cch(struct rtrs_clt *c, struct ibv_context *dev)
{
	for (int i = 0; i < c->ncch; i++)
		if (c->cch_dev[i] == dev)
			return c->cch[i];
	if (c->ncch == CLT_MAX_PATHS)
		return NULL;
	struct ibv_comp_channel *ch = rtrs_chan_open(dev, c->cq_sleep, clt_cq_thread, c,
						     &c->cch_thr[c->ncch]);
	if (!ch)
		return NULL;
	c->cch[c->ncch] = ch;
	c->cch_dev[c->ncch++] = dev;
	return ch;
}

static void set_state(struct clt_path *p, int st)
{
	p->state = st;
	p->st.state = st;
	p->state_ns = rtrs_now_ns();
}

static void con_destroy(struct clt_con *con)
{
	if (con->id && con->established)
		rdma_disconnect(con->id);
	if (con->id && con->qp)
		rdma_destroy_qp(con->id);
	con->qp = NULL;
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

static void path_teardown(struct clt_path *p)
{
	pthread_rwlock_wrlock(&p->post_lk);
	p->gen++;
	for (unsigned int i = 0; i < CLT_MAX_CONS; i++)
		con_destroy(&p->cons[i]);
	/* windows before the MR they are bound to */
	for (uint32_t i = 0; p->rmw && i < p->clt->qd; i++)
		if (p->rmw[i])
			ibv_dealloc_mw(p->rmw[i]);
	free(p->rmw);
	free(p->rmw_key);
	free(p->rmw_bound);
	p->rmw = NULL;
	p->rmw_key = NULL;
	p->rmw_bound = NULL;
	for (int i = 0; i < CLT_MAX_UBUFS; i++)
		if (p->umr[i])
			ibv_dereg_mr(p->umr[i]);
	memset(p->umr, 0, sizeof(p->umr));
	if (p->data_mr)
		ibv_dereg_mr(p->data_mr);
	if (p->msg_mr)
		ibv_dereg_mr(p->msg_mr);
	p->data_mr = p->msg_mr = NULL;
	if (p->pd)
		ibv_dealloc_pd(p->pd);
	p->pd = NULL;
	p->nest = 0;
	p->hb_wait = 0;
	p->hb_out = 0;
	p->st.hb_missed = 0;
	pthread_rwlock_unlock(&p->post_lk);
}

/* Registers the caller's region i in path p's PD: local write for a WRITE's gather, and for a
 * READ's landing either a window's bind (always_invalidate) or remote write. */
static int ubuf_reg(struct rtrs_clt *c, struct clt_path *p, int i)
{
	/* all memory (addr NULL, len SIZE_MAX): implicit On-Demand Paging, where the device has
	 * it (ibv_reg_mr refuses it elsewhere: that path copies). Never remote access to all of
	 * it: a READ lands there only through the permit's window, bound to its buffer alone
	 * and invalidated by the answer (always_invalidate); without windows READs bounce. */
	unsigned int odp = c->ubufs[i].addr ? 0 : IBV_ACCESS_ON_DEMAND;

	p->umr[i] = ibv_reg_mr(p->pd, c->ubufs[i].addr, c->ubufs[i].len,
			       IBV_ACCESS_LOCAL_WRITE | odp |
			       (c->new_rkey || odp ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_WRITE));
	return p->umr[i] ? 0 : errno ? errno : ENOMEM;
}

static int path_start(struct rtrs_clt *c, struct clt_path *p)
{
	p->cid_num = 1 + c->o.io_cons;
	p->nest = 0;
	p->max_sge = 0;
	set_state(p, p->attempts ? RTRS_PATH_RECONNECTING : RTRS_PATH_CONNECTING);
	for (unsigned int i = 0; i < p->cid_num; i++) {
		struct clt_con *con = &p->cons[i];
		memset(con, 0, sizeof(*con));
		con->path = p;
		con->cid = i;
		if (rdma_create_id(c->ech, &con->id, con, RDMA_PS_TCP))
			return errno;
		if (rdma_resolve_addr(con->id, p->has_src ? (struct sockaddr *)&p->src : NULL,
				      (struct sockaddr *)&p->dst, 2000))
			return errno;
	}
	return 0;
}

static int path_usable(struct clt_path *p)
{
	return p->used && p->state == RTRS_PATH_CONNECTED && !p->removing;
}

static struct clt_path *pick_path(struct rtrs_clt *c, struct clt_path *avoid)
{
	struct clt_path *best = NULL;
	int n = 0;
	for (int i = 0; i < CLT_MAX_PATHS; i++)
		if (path_usable(&c->paths[i]) && &c->paths[i] != avoid)
			n++;
	if (!n)
		return NULL;
	if (c->o.policy == RTRS_MP_ROUND_ROBIN) {
		unsigned int k = c->rr++ % (unsigned int)n;
		for (int i = 0; i < CLT_MAX_PATHS; i++)
			if (path_usable(&c->paths[i]) && &c->paths[i] != avoid && k-- == 0)
				return &c->paths[i];
	}
	for (int i = 0; i < CLT_MAX_PATHS; i++) {
		struct clt_path *p = &c->paths[i];
		if (!path_usable(p) || p == avoid)
			continue;
		if (!best) {
			best = p;
		} else if (c->o.policy == RTRS_MP_MIN_LATENCY) {
			uint32_t a = p->st.hb_rtt_us ? p->st.hb_rtt_us : UINT32_MAX;
			uint32_t b = best->st.hb_rtt_us ? best->st.hb_rtt_us : UINT32_MAX;
			if (a < b || (a == b && p->st.inflight < best->st.inflight))
				best = p;
		} else if (p->st.inflight < best->st.inflight) {
			best = p;
		}
	}
	return best;
}

/* Under c->mu: posts req on path p. Returns 0 or an errno. */
static struct clt_con *req_con(struct clt_path *p, uint32_t id)
{
	/* NEW_RKEY: the server's window of chunk id serves one IO connection (its 1 + id mod
	 * IO connections); the READ window of permit id lives there too */
	return &p->cons[1 + id % (p->cid_num - 1)];
}

/* A request's work requests, built under c->mu (req_build) and posted with or without it. */
struct clt_post {
	struct clt_req *r;
	struct clt_path *p;
	struct ibv_qp *qp;
	unsigned int gen;	/* p->gen when built */
	struct ibv_sge sge[CLT_MAX_SEND_SGE];
	struct ibv_send_wr pre[2], wr, *head;
	int win;	/* a READ window's bind: its state before, to undo */
	uint32_t okey;
	uint8_t obound;
};

/* Under c->mu: builds r's post on path p and books it as posted (window key, counters,
 * INFLIGHT on p), so that neither an answer nor path_fail finds it otherwise once it leaves;
 * req_unpost undoes what a failed ibv_post_send did not send. */
static int req_build(struct rtrs_clt *c, struct clt_req *r, struct clt_path *p,
		     struct clt_post *w)
{
	struct clt_con *con = c->new_rkey ? req_con(p, r->id) :
			      &p->cons[1 + (p->rr++ % (p->cid_num - 1))];
	char *data = c->data + (size_t)r->id * c->chunk;
	char *m = c->msg + (size_t)r->id * c->msg_stride;
	struct ibv_mr *umr = r->ubuf >= 0 ? p->umr[r->ubuf] : NULL;
	struct ibv_sge *sge = w->sge;
	int nsge = 0;
	uint32_t off, rdma_off = 0;	/* rdma_off: where in the chunk the WRITE lands */
	struct ibv_send_wr *pre = w->pre, *head = NULL;
	uint32_t nk = 0;	/* the READ window's new key */
	int win = 0;
	unsigned int pieces = 0, first = 0;

	if (!con->qp)
		return ENOTCONN;
	for (unsigned int i = r->sg_cnt; i-- > 0;)
		if (r->sg[i].iov_len) {
			pieces++;
			first = i;
		}
	if (r->dir == RTRS_WRITE) {
		/* [data][usr][trailer]: the caller's header and the trailer are in the permit's
		 * message slot; the data comes from the caller's registered memory (zero copy),
		 * else from the permit's bounce buffer, where all three are staged once */
		struct rtrs_msg_rdma_write w = { RTRS_MSG_WRITE, r->usr_len };
		off = r->len + r->usr_len;
		if (umr && !r->staged && pieces + 1 <= p->max_sge) {
			for (unsigned int i = 0; i < r->sg_cnt; i++)
				if (r->sg[i].iov_len)
					sge[nsge++] = (struct ibv_sge){ (uintptr_t)r->sg[i].iov_base,
									(uint32_t)r->sg[i].iov_len,
									umr->lkey };
			memcpy(m + r->usr_len, &w, sizeof(w));
			sge[nsge++] = (struct ibv_sge){ (uintptr_t)m, r->usr_len + (uint32_t)sizeof(w),
							p->msg_mr->lkey };
		} else {
			if (!r->staged) {
				size_t pos = 0;
				for (unsigned int i = 0; i < r->sg_cnt; i++) {
					memcpy(data + pos, r->sg[i].iov_base, r->sg[i].iov_len);
					pos += r->sg[i].iov_len;
				}
				memcpy(data + r->len, m, r->usr_len);
				memcpy(data + r->len + r->usr_len, &w, sizeof(w));
				r->staged = 1;
			}
			sge[nsge++] = (struct ibv_sge){ (uintptr_t)data, off + (uint32_t)sizeof(w),
							p->data_mr->lkey };
		}
	} else {
		/* the data lands in the caller's memory when it is one piece of a registered
		 * region, else in the permit's bounce buffer (copied out at the answer) */
		int zc = umr && r->len && pieces == 1 && (p->rmw || c->ubufs[r->ubuf].addr);
		struct ibv_mr *lmr = zc ? umr : p->data_mr;
		uintptr_t land = zc ? (uintptr_t)r->sg[first].iov_base : (uintptr_t)data;
		struct rtrs_msg_rdma_read rd = { RTRS_MSG_READ, r->usr_len, 0, 1 };
		struct rtrs_sg_desc d = { land, lmr->rkey, r->len };
		if (p->rmw && r->len) {
			/* the landing buffer of this READ only, through the permit's window with a
			 * new key; the server invalidates it (SEND with invalidate) */
			unsigned int k = 0;
			if (p->rmw_bound[r->id]) {	/* not invalidated by the last answer */
				pre[k] = (struct ibv_send_wr){ .wr_id = UINT64_MAX,
							       .opcode = IBV_WR_LOCAL_INV,
							       .invalidate_rkey = p->rmw_key[r->id] };
				k++;
			}
			nk = ibv_inc_rkey(p->rmw_key[r->id]);
			pre[k] = (struct ibv_send_wr){ .wr_id = UINT64_MAX, .opcode = IBV_WR_BIND_MW };
			pre[k].bind_mw.mw = p->rmw[r->id];
			pre[k].bind_mw.rkey = nk;
			pre[k].bind_mw.bind_info = (struct ibv_mw_bind_info){
				lmr, land, r->len, IBV_ACCESS_REMOTE_WRITE };
			if (k)
				pre[0].next = &pre[1];
			head = &pre[0];
			win = 1;
			d.key = nk;
			rd.flags = RTRS_MSG_NEED_INVAL_F;
		}
		memcpy(m + r->usr_len, &rd, sizeof(rd));
		memcpy(m + r->usr_len + sizeof(rd), &d, sizeof(d));
		/* as the kernel's client: [user header][trailer][descriptor] go into the chunk
		 * after room for the data, off = len + usr_len; the kernel's server takes the READ
		 * length from off - usr_len (process_read), not from the descriptors */
		off = r->len + r->usr_len;
		rdma_off = r->len;
		sge[nsge++] = (struct ibv_sge){ (uintptr_t)m,
						r->usr_len + (uint32_t)(sizeof(rd) + sizeof(d)),
						p->msg_mr->lkey };
		r->bounced = !zc;
	}
	struct ibv_send_wr *wr = &w->wr;
	*wr = (struct ibv_send_wr){ .wr_id = r->id, .sg_list = sge, .num_sge = nsge,
				    .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				    .send_flags = rtrs_signal(&con->wr_cnt) };
	wr->imm_data = htobe32(rtrs_to_imm(RTRS_IO_REQ_IMM, r->id << c->mem_bits | off));
	wr->wr.rdma.remote_addr = p->rbufs[r->id].addr + rdma_off;
	wr->wr.rdma.rkey = p->rbufs[r->id].key;
	w->head = rtrs_wr_append(head, wr);
	w->r = r;
	w->p = p;
	w->qp = con->qp;
	w->gen = p->gen;
	w->win = win;
	if (win) {
		w->okey = p->rmw_key[r->id];
		w->obound = p->rmw_bound[r->id];
		p->rmw_key[r->id] = nk;
		p->rmw_bound[r->id] = 1;
	}
	if (r->dir == RTRS_WRITE) {
		p->st.reqs_write++;
		p->st.bytes_write += r->len;
	} else {
		p->st.reqs_read++;
		p->st.bytes_read += r->len;
	}
	r->path = p;
	r->state = REQ_INFLIGHT;
	p->st.inflight++;
	return 0;
}

/* Under c->mu: ibv_post_send of w failed at *bad: r goes back to PENDING (posted again
 * later), the window's state follows what was sent (the WRs before *bad). */
static void req_unpost(struct clt_post *w, struct ibv_send_wr *bad)
{
	struct clt_req *r = w->r;
	struct clt_path *p = w->p;

	if (w->win && bad != &w->wr) {
		struct ibv_send_wr *bind = w->head->next == &w->wr ? w->head : w->head->next;

		p->rmw_key[r->id] = w->okey;
		/* only the LOCAL_INV went: the window is unbound, its key unchanged */
		p->rmw_bound[r->id] = bad == bind && bind != w->head ? 0 : w->obound;
	}
	if (r->dir == RTRS_WRITE) {
		p->st.reqs_write--;
		p->st.bytes_write -= r->len;
	} else {
		p->st.reqs_read--;
		p->st.bytes_read -= r->len;
	}
	r->path = NULL;
	r->state = REQ_PENDING;
	p->st.inflight--;
}

/* Under c->mu: builds and posts r on p. */
static int req_post(struct rtrs_clt *c, struct clt_req *r, struct clt_path *p)
{
	struct clt_post w;
	struct ibv_send_wr *bad;
	int rc = req_build(c, r, p, &w);

	if (rc)
		return rc;
	if (ibv_post_send(w.qp, w.head, &bad)) {
		req_unpost(&w, bad);
		return EIO;	/* not counted: the request is posted again later (pending) */
	}
	return 0;
}

/* Under c->mu: queue a completion (called back after the lock is dropped). */
static void req_done(struct rtrs_clt *c, struct clt_req *r, int err)
{
	if (r->path && r->state == REQ_INFLIGHT)
		r->path->st.inflight--;
	if (err && r->path)
		r->path->st.errors++;
	if (r->ubuf >= 0)
		c->ubufs[r->ubuf].refs--;
	r->ubuf = -1;
	if (!err && r->dir == RTRS_READ && r->bounced) {
		char *data = c->data + (size_t)r->id * c->chunk;
		size_t pos = 0;
		for (unsigned int i = 0; i < r->sg_cnt; i++) {
			memcpy(r->sg[i].iov_base, data + pos, r->sg[i].iov_len);
			pos += r->sg[i].iov_len;
		}
	}
	r->state = REQ_FREE;
	r->path = NULL;
	r->done_err = err;
	r->dnext = c->done_head;
	c->done_head = r;
}

static void run_done(struct rtrs_clt *c)
{
	while (c->done_head) {
		struct clt_req *r = c->done_head;
		c->done_head = r->dnext;
		rtrs_conf_fn conf = r->conf;
		void *priv = r->priv;
		int err = r->done_err;
		free(r->sg);
		r->sg = NULL;
		c->free_ids[c->nfree++] = r->id;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->mu);
		conf(priv, err);
		pthread_mutex_lock(&c->mu);
	}
}

/* Under c->mu: a path failed: tear it down, move its requests, schedule the reconnect. */
static void path_fail(struct rtrs_clt *c, struct clt_path *p, int err)
{
	if (p->state == RTRS_PATH_DEAD || p->state == RTRS_PATH_CLOSED) {
		p->why[0] = 0;
		return;
	}
	int was = p->state == RTRS_PATH_CONNECTED;
	/* completions left in the CQs die with them; the test hook's status is kept */
	for (unsigned int k = 0; k < CLT_MAX_CONS; k++) {
		struct ibv_wc wc[16];
		int n;
		while (p->cons[k].cq && (n = ibv_poll_cq(p->cons[k].cq, 16, wc)) > 0)
			for (int i = 0; i < n; i++)
				if (wc[i].wr_id == CLT_WRID_TEST)
					c->test_status = (int)wc[i].status;
	}
	path_teardown(p);
	c->last_err = err;
	if (p->removing || c->closing) {
		set_state(p, RTRS_PATH_CLOSED);
	} else if (c->o.max_reconnect_attempts >= 0 &&
		   p->attempts >= (unsigned int)c->o.max_reconnect_attempts) {
		set_state(p, RTRS_PATH_DEAD);
	} else {
		set_state(p, RTRS_PATH_RECONNECTING);
		uint64_t d = (uint64_t)c->o.reconnect_delay_ms;
		uint64_t jitter = d / 2 ? (uint64_t)rand() % (d / 2 + 1) : 0;
		p->reconnect_at = rtrs_now_ns() + (d + jitter) * 1000000ull;
	}
	if (was)
		fprintf(stderr, "rtrs-clt: %s: path %s failed (%s)%s%s\n", c->name, p->dst_s,
			strerror(err), p->why[0] ? ": " : "", p->why);
	p->why[0] = 0;
	for (uint32_t i = 0; c->reqs && i < c->qd; i++) {
		struct clt_req *r = &c->reqs[i];
		if (r->state != REQ_INFLIGHT || r->path != p)
			continue;
		p->st.inflight--;
		r->path = NULL;
		r->state = REQ_PENDING;
		p->st.failovers++;
		struct clt_path *q = pick_path(c, p);
		if (q && !req_post(c, r, q))
			continue;
		/* waits in PENDING for a path, up to fail_timeout_ms from its submission */
	}
	int any = 0;
	for (int i = 0; i < CLT_MAX_PATHS; i++)
		any |= path_usable(&c->paths[i]);
	if (!any && c->any_connected_before && !c->all_down_notified) {
		c->all_down_notified = 1;
		if (c->o.link_ev)
			clt_link_ev(c, RTRS_CLT_LINK_EV_DISCONNECTED);
	}
}

static int post_recv(struct clt_con *con, unsigned int i)
{
	struct ibv_sge sge = { (uintptr_t)(con->rbuf + (size_t)i * con->rsize), (uint32_t)con->rsize,
			       con->rmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_recv(con->qp, &wr, &bad);
}

static int post_imm0(struct clt_con *con, uint32_t imm)
{
	struct ibv_send_wr wr = { .wr_id = UINT64_MAX, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(imm) }, *bad;
	return ibv_post_send(con->qp, &wr, &bad);
}

/* Under c->mu: the first CON_RSP sets the session up. */
static int sess_setup(struct rtrs_clt *c, const struct rtrs_msg_conn_rsp *rsp)
{
	int nr = !!(rsp->flags & RTRS_MSG_NEW_RKEY_F);
	if (c->qd) {
		if (rsp->queue_depth != c->qd || rsp->max_io_size != c->max_io ||
		    rsp->max_hdr_size != c->max_hdr || nr != c->new_rkey)
			return EPROTO;
		return 0;
	}
	c->new_rkey = nr;
	if (!rsp->queue_depth || rsp->queue_depth > CLT_QD_CAP || rsp->max_hdr_size > 65535 ||
	    !rsp->max_io_size)
		return EPROTO;
	c->qd = rsp->queue_depth;
	c->max_io = rsp->max_io_size;
	c->max_hdr = rsp->max_hdr_size;
	c->chunk = c->max_io + c->max_hdr;
	c->mem_bits = rtrs_mem_bits(c->qd);
	c->msg_stride = ((size_t)c->max_hdr + 8 + 16 + 63) & ~(size_t)63;
	if (c->msg_stride < sizeof(struct rtrs_msg_info_req))
		c->msg_stride = 320;
	c->data = aligned_alloc(4096, (((size_t)c->qd * c->chunk) + 4095) & ~(size_t)4095);
	c->msg = calloc(c->qd + 1, c->msg_stride);
	c->reqs = calloc(c->qd, sizeof(*c->reqs));
	c->free_ids = calloc(c->qd, sizeof(uint32_t));
	if (!c->data || !c->msg || !c->reqs || !c->free_ids)
		return ENOMEM;
	for (uint32_t i = 0; i < c->qd; i++) {
		c->reqs[i].id = i;
		c->reqs[i].ubuf = -1;
		c->free_ids[c->nfree++] = c->qd - 1 - i;
	}
	return 0;
}

static void on_established(struct rtrs_clt *c, struct clt_con *con, const void *pd, size_t plen)
{
	struct clt_path *p = con->path;
	struct rtrs_msg_conn_rsp rsp;
	int err;

	if (plen < sizeof(rsp)) {
		path_fail(c, p, EPROTO);
		return;
	}
	memcpy(&rsp, pd, sizeof(rsp));
	if (rsp.magic != RTRS_MAGIC || (rsp.version >> 8) != RTRS_PROTO_VER_MAJOR || rsp.errno_) {
		path_fail(c, p, EPROTO);
		return;
	}
	err = sess_setup(c, &rsp);
	if (err) {
		path_fail(c, p, err);
		return;
	}
	con->established = 1;
	/* receive buffers: the service connection's big enough for INFO_RSP */
	con->rsize = con->cid ? CLT_IO_RECV_SIZE : sizeof(struct rtrs_msg_info_rsp) + (size_t)c->qd * 16;
	/* an answer may take two receives (SEND with invalidate, then the response) */
	con->nrecv = con->cid ? 2 * c->qd + 8 : CLT_SVC_RECVS;
	con->rbuf = calloc(con->nrecv, con->rsize);
	con->rmr = con->rbuf ? ibv_reg_mr(p->pd, con->rbuf, con->nrecv * con->rsize,
					  IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!con->rmr) {
		path_fail(c, p, ENOMEM);
		return;
	}
	for (unsigned int i = 0; i < con->nrecv; i++)
		if (post_recv(con, i)) {
			path_fail(c, p, EIO);
			return;
		}
	if (++p->nest < p->cid_num)
		return;
	/* every connection is up: register the session's buffers, ask for the chunks */
	p->data_mr = ibv_reg_mr(p->pd, c->data, (size_t)c->qd * c->chunk,
				IBV_ACCESS_LOCAL_WRITE |
				(c->new_rkey ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_WRITE));
	if (p->data_mr && c->new_rkey) {
		p->rmw = calloc(c->qd, sizeof(*p->rmw));
		p->rmw_key = calloc(c->qd, sizeof(*p->rmw_key));
		p->rmw_bound = calloc(c->qd, 1);
		if (!p->rmw || !p->rmw_key || !p->rmw_bound) {
			path_fail(c, p, ENOMEM);
			return;
		}
		for (uint32_t i = 0; i < c->qd; i++) {
			p->rmw[i] = ibv_alloc_mw(p->pd, IBV_MW_TYPE_2);
			if (!p->rmw[i]) {
				path_fail(c, p, errno ? errno : EOPNOTSUPP);
				return;
			}
			p->rmw_key[i] = p->rmw[i]->rkey;
		}
	}
	p->msg_mr = ibv_reg_mr(p->pd, c->msg, (size_t)(c->qd + 1) * c->msg_stride,
			       IBV_ACCESS_LOCAL_WRITE);
	if (!p->data_mr || !p->msg_mr) {
		path_fail(c, p, ENOMEM);
		return;
	}
	/* the caller's registered regions (a failure leaves that region to the bounce copy on
	 * this path) */
	for (int i = 0; i < CLT_MAX_UBUFS; i++)
		if (c->ubufs[i].used)
			ubuf_reg(c, p, i);
	/* INFO_REQ from the spare message slot (index qd) */
	struct rtrs_msg_info_req *ir = (void *)(c->msg + (size_t)c->qd * c->msg_stride);
	memset(ir, 0, sizeof(*ir));
	ir->type = RTRS_MSG_INFO_REQ;
	memcpy(ir->sessname, c->name, strnlen(c->name, RTRS_NAME_MAX));
	struct ibv_sge sge = { (uintptr_t)ir, sizeof(*ir), p->msg_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = UINT64_MAX, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(p->cons[0].qp, &wr, &bad))
		path_fail(c, p, EIO);
}

static void on_info_rsp(struct rtrs_clt *c, struct clt_path *p, const char *b, size_t len)
{
	struct rtrs_msg_info_rsp m;
	if (len < sizeof(m)) {
		path_fail(c, p, EPROTO);
		return;
	}
	memcpy(&m, b, sizeof(m));
	if (m.sg_cnt != c->qd || len < sizeof(m) + (size_t)m.sg_cnt * 16) {
		path_fail(c, p, EPROTO);
		return;
	}
	free(p->rbufs);
	p->rbufs = malloc((size_t)c->qd * 16);
	if (!p->rbufs) {
		path_fail(c, p, ENOMEM);
		return;
	}
	memcpy(p->rbufs, b + sizeof(m), (size_t)c->qd * 16);
	for (uint32_t i = 0; i < c->qd; i++)
		if (p->rbufs[i].len < c->chunk) {
			path_fail(c, p, EPROTO);
			return;
		}
	if (p->attempts)
		p->st.reconnects++;
	p->attempts = 0;
	set_state(p, RTRS_PATH_CONNECTED);
	p->hb_sent_ns = rtrs_now_ns();
	rtrs_addr_str(rdma_get_local_addr(p->cons[0].id), p->st.src, sizeof(p->st.src));
	rtrs_addr_str(rdma_get_peer_addr(p->cons[0].id), p->st.dst, sizeof(p->st.dst));
	if (c->all_down_notified) {
		c->all_down_notified = 0;
		if (c->o.link_ev)
			clt_link_ev(c, RTRS_CLT_LINK_EV_RECONNECTED);
	}
	c->any_connected_before = 1;
	pthread_cond_broadcast(&c->cv);
}

static void on_route(struct rtrs_clt *c, struct clt_con *con)
{
	struct clt_path *p = con->path;
	struct rdma_cm_id *id = con->id;

	if (!p->pd) {
		p->pd = ibv_alloc_pd(id->verbs);
		if (!p->pd) {
			path_fail(c, p, ENOMEM);
			return;
		}
	} else if (p->pd->context != id->verbs) {
		path_fail(c, p, EINVAL);
		return;
	}
	unsigned int qd = c->qd ? c->qd : CLT_QD_CAP;
	/* per request: LOCAL_INV, bind, request; per answer: two receives */
	unsigned int ns = con->cid ? 3 * qd + 16 : 64, nr = con->cid ? 2 * qd + 8 : CLT_SVC_RECVS;
	struct ibv_comp_channel *ch = clt_cch(c, id->verbs);
	con->cq = ch ? ibv_create_cq(id->verbs, (int)(ns + nr), con, ch, 0) : NULL;
	if (!con->cq) {
		path_fail(c, p, ENOMEM);
		return;
	}
	ibv_req_notify_cq(con->cq, 0);
	/* IO connections: as many send SGEs as the device has, up to CLT_MAX_SEND_SGE (a
	 * zero-copy WRITE gathers the caller's pieces and the header slot) */
	unsigned int sge = 1;
	struct ibv_device_attr da;
	if (con->cid && !ibv_query_device(id->verbs, &da) && da.max_sge > 1)
		sge = da.max_sge < CLT_MAX_SEND_SGE ? (unsigned int)da.max_sge : CLT_MAX_SEND_SGE;
	struct ibv_qp_init_attr qa = { .send_cq = con->cq, .recv_cq = con->cq,
				       .cap = { .max_send_wr = ns, .max_recv_wr = nr,
						.max_send_sge = sge, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	if (rdma_create_qp(id, p->pd, &qa)) {
		path_fail(c, p, errno ? errno : ENOMEM);
		return;
	}
	con->qp = id->qp;
	if (con->cid) {
		if (qa.cap.max_send_sge < sge)
			sge = qa.cap.max_send_sge ? qa.cap.max_send_sge : 1;
		if (!p->max_sge || sge < p->max_sge)
			p->max_sge = sge;
	}
	struct rtrs_msg_conn_req rq;
	memset(&rq, 0, sizeof(rq));
	rq.magic = RTRS_MAGIC;
	rq.version = RTRS_PROTO_VER;
	rq.cid = (uint16_t)con->cid;
	rq.cid_num = (uint16_t)p->cid_num;
	rq.recon_cnt = p->recon_cnt;
	memcpy(rq.sess_uuid, p->uuid, 16);
	memcpy(rq.paths_uuid, c->uuid, 16);
	rq.first_conn = !c->any_connected_before && con->cid == 0;
	struct rdma_conn_param cp = { .private_data = &rq, .private_data_len = sizeof(rq),
				      .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	if (rdma_connect(id, &cp))
		path_fail(c, p, errno ? errno : EIO);
}

static int poll_con(struct rtrs_clt *c, struct clt_con *con);

static void handle_cm(struct rtrs_clt *c)
{
	struct rdma_cm_event *ev;
	while (!rdma_get_cm_event(c->ech, &ev)) {
		struct rdma_cm_event e = *ev;
		char pd[256];
		size_t plen = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
		if (plen > sizeof(pd))
			plen = sizeof(pd);
		if (plen)
			memcpy(pd, ev->param.conn.private_data, plen);
		rdma_ack_cm_event(ev);
		struct clt_con *con = e.id->context;
		if (!con || con->id != e.id)
			continue;
		struct clt_path *p = con->path;
		switch (e.event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(e.id, 2000))
				path_fail(c, p, errno);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			on_route(c, con);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			on_established(c, con, pd, plen);
			break;
		case RDMA_CM_EVENT_REJECTED:
			path_fail(c, p, ECONNREFUSED);
			break;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_CONNECT_ERROR:
			path_fail(c, p, EHOSTUNREACH);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			/* what completed before the peer left counts (answers, errors) */
			for (unsigned int k = 0; k < p->cid_num && con->id == e.id; k++)
				if (p->cons[k].cq)
					poll_con(c, &p->cons[k]);
			if (con->id == e.id)
				path_fail(c, p, ECONNRESET);
			break;
		default:
			break;
		}
	}
}

/* Under c->mu: takes every completion of con's CQ. Returns how many there were. */
static int poll_con(struct rtrs_clt *c, struct clt_con *con)
{
	struct clt_path *p = con->path;
	struct ibv_wc wc[16];
	int n, got = 0;

	while (con->cq && (n = ibv_poll_cq(con->cq, 16, wc)) > 0) {
		got += n;
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id == CLT_WRID_TEST)
				c->test_status = (int)wc[i].status;
			if (wc[i].status != IBV_WC_SUCCESS) {
				/* said with the path's failure (the flake hunt of test_rtrs_netns
				 * needs to know which completion failed) */
				snprintf(p->why, sizeof(p->why),
					 "con %u: completion %s (wr_id %llu opcode %d vendor_err %u)",
					 con->cid, ibv_wc_status_str(wc[i].status),
					 (unsigned long long)wc[i].wr_id, (int)wc[i].opcode,
					 wc[i].vendor_err);
				if (getenv("RTRS_DEBUG"))
					fprintf(stderr, "rtrs-clt: %s: path %s %s\n", c->name, p->dst_s, p->why);
				path_fail(c, p, EIO);
				return got;
			}
			if (!(wc[i].opcode & IBV_WC_RECV))
				continue;
			p->st.hb_missed = 0;
			p->hb_wait = 0;
			int send_imm = wc[i].opcode == IBV_WC_RECV && (wc[i].wc_flags & IBV_WC_WITH_IMM);
			if (send_imm) {
				/* NEW_RKEY: the response is a SEND with immediate of RKEY_RSP, the
				 * chunk's new key for this path */
				struct rtrs_msg_rkey_rsp k;
				const char *b = con->rbuf + wc[i].wr_id * con->rsize;
				if (!c->new_rkey || wc[i].byte_len < sizeof(k) || !p->rbufs) {
					path_fail(c, p, EPROTO);
					return got;
				}
				memcpy(&k, b, sizeof(k));
				if (k.type != RTRS_MSG_RKEY_RSP || k.buf_id >= c->qd) {
					path_fail(c, p, EPROTO);
					return got;
				}
				p->rbufs[k.buf_id].key = k.rkey;
				p->st.rkey_renewals++;
			}
			if (wc[i].opcode == IBV_WC_RECV && (wc[i].wc_flags & IBV_WC_WITH_INV)) {
				/* the server invalidated a READ window (the response follows) */
			} else if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM || send_imm) {
				uint32_t t, pl, id;
				int err;
				rtrs_from_imm(be32toh(wc[i].imm_data), &t, &pl);
				if (t == RTRS_IO_RSP_IMM || t == RTRS_IO_RSP_W_INV_IMM) {
					rtrs_from_io_rsp_imm(pl, &id, &err);
					if (id >= c->qd || c->reqs[id].state != REQ_INFLIGHT ||
					    c->reqs[id].path != p) {
						path_fail(c, p, EPROTO);
						return got;
					}
					if (p->rmw && p->rmw_bound[id]) {
						if (t == RTRS_IO_RSP_W_INV_IMM) {
							p->rmw_bound[id] = 0;
						} else {
							/* not invalidated by the server: invalidated here
							 * (ordered before the permit's next bind, which is
							 * on the same connection) */
							struct ibv_send_wr iw = {
								.wr_id = UINT64_MAX, .opcode = IBV_WR_LOCAL_INV,
								.invalidate_rkey = p->rmw_key[id] }, *bad;
							if (!ibv_post_send(req_con(p, id)->qp, &iw, &bad))
								p->rmw_bound[id] = 0;
						}
					}
					req_done(c, &c->reqs[id], err);
				} else if (t == RTRS_HB_ACK_IMM) {
					/* A round trip only from the answer of the one heartbeat
					 * outstanding: with an older one unanswered too (sent again
					 * after an interval without an answer), this may be the
					 * older one's, and timing it from the newer one's send gave
					 * a path 20 ms away a 12 ms round trip (Karn's rule). */
					if (p->hb_out == 1) {
						uint64_t rtt = (rtrs_now_ns() - p->hb_sent_ns) / 1000;
						p->st.hb_rtt_us = rtt ? (uint32_t)rtt : 1;
						if (!p->st.hb_rtt_min_us ||
						    p->st.hb_rtt_us < p->st.hb_rtt_min_us)
							p->st.hb_rtt_min_us = p->st.hb_rtt_us;
					}
					if (p->hb_out)
						p->hb_out--;
				} else if (t == RTRS_HB_MSG_IMM) {
					post_imm0(con, rtrs_to_imm(RTRS_HB_ACK_IMM, 0));
				}
			} else if (wc[i].opcode == IBV_WC_RECV) {
				const char *b = con->rbuf + wc[i].wr_id * con->rsize;
				uint16_t type;
				memcpy(&type, b, 2);
				if (type == RTRS_MSG_INFO_RSP && con->cid == 0) {
					on_info_rsp(c, p, b, wc[i].byte_len);
				} else if (type == RTRS_MSG_RKEY_RSP && wc[i].byte_len >= 8) {
					struct rtrs_msg_rkey_rsp k;
					memcpy(&k, b, sizeof(k));
					if (k.buf_id < c->qd && p->rbufs)
						p->rbufs[k.buf_id].key = k.rkey;
				}
			}
			if (!con->qp)
				return got;
			if (post_recv(con, (unsigned int)wc[i].wr_id)) {
				snprintf(p->why, sizeof(p->why), "con %u: ibv_post_recv: %s", con->cid,
					 strerror(errno));
				path_fail(c, p, EIO);
				return got;
			}
		}
	}
	return got;
}

static void timers(struct rtrs_clt *c, uint64_t now)
{
	for (int i = 0; i < CLT_MAX_PATHS; i++) {
		struct clt_path *p = &c->paths[i];
		if (!p->used)
			continue;
		if (p->state == RTRS_PATH_RECONNECTING && !p->cons[0].id && now >= p->reconnect_at) {
			p->attempts++;
			p->st.reconnect_attempts++;
			p->recon_cnt++;
			int err = path_start(c, p);
			if (err)
				path_fail(c, p, err);
			continue;
		}
		if ((p->state == RTRS_PATH_CONNECTING || p->state == RTRS_PATH_RECONNECTING) &&
		    p->cons[0].id && now - p->state_ns > (uint64_t)c->o.connect_timeout_ms * 1000000ull) {
			path_fail(c, p, ETIMEDOUT);
			continue;
		}
		if (p->state == RTRS_PATH_CONNECTED &&
		    now - p->hb_sent_ns >= (uint64_t)c->o.hb_interval_ms * 1000000ull) {
			if (p->hb_wait && c->cq_sleep) {
				/* the CM thread counts: an answer that a channel's thread has not
				 * taken yet (it may be waiting for a CPU) counts first */
				poll_con(c, &p->cons[0]);
				if (p->state != RTRS_PATH_CONNECTED)
					continue;
			}
			if (p->hb_wait) {
				p->st.hb_missed++;
				p->st.hb_missed_total++;
				if (p->st.hb_missed >= c->o.hb_missed_max) {
					path_fail(c, p, ETIMEDOUT);
					continue;
				}
			}
			p->hb_wait = 1;
			p->hb_sent_ns = now;
			/* (an answer the peer could not post never comes: after hb_missed_max
			 * heartbeats still outstanding the older ones count as lost, so that
			 * the round trip cannot freeze for the rest of the connection) */
			if (p->hb_out >= c->o.hb_missed_max)
				p->hb_out = 0;
			p->hb_out++;
			p->st.hb_sent++;
			if (post_imm0(&p->cons[0], rtrs_to_imm(RTRS_HB_MSG_IMM, 0))) {
				snprintf(p->why, sizeof(p->why), "heartbeat post: %s", strerror(errno));
				path_fail(c, p, EIO);
			}
		}
	}
	/* pending requests: place them, or fail them after fail_timeout_ms */
	for (uint32_t i = 0; c->reqs && i < c->qd; i++) {
		struct clt_req *r = &c->reqs[i];
		if (r->state != REQ_PENDING)
			continue;
		struct clt_path *p = pick_path(c, NULL);
		if (p && !req_post(c, r, p))
			continue;
		if (now - r->submit_ns > (uint64_t)c->o.fail_timeout_ms * 1000000ull)
			req_done(c, r, ETIMEDOUT);
	}
}

static void write_stats(struct rtrs_clt *c)
{
	struct rtrs_path_stats st[CLT_MAX_PATHS];
	int n = 0;
	for (int i = 0; i < CLT_MAX_PATHS; i++)
		if (c->paths[i].used)
			st[n++] = c->paths[i].st;
	rtrs_stats_write(c->stats_dir, "clt", c->name, st, n);
}

/* Under c->mu: every CQ of the session. Returns the completions taken. */
static int poll_all(struct rtrs_clt *c)
{
	int got = 0;
	for (int i = 0; i < CLT_MAX_PATHS; i++)
		for (unsigned int k = 0; k < CLT_MAX_CONS; k++)
			if (c->paths[i].used && c->paths[i].cons[k].cq)
				got += poll_con(c, &c->paths[i].cons[k]);
	return got;
}

/* Under c->mu: asks for an event at the next completion of every CQ (before a sleep); with io 0
 * only of the service connections' (heartbeats, INFO_RSP). */
static void arm_all(struct rtrs_clt *c, int io)
{
	for (int i = 0; i < CLT_MAX_PATHS; i++)
		for (unsigned int k = 0; k < (io ? CLT_MAX_CONS : 1u); k++)
			if (c->paths[i].used && c->paths[i].cons[k].cq)
				ibv_req_notify_cq(c->paths[i].cons[k].cq, 0);
}

/* Under c->mu: whether a completion of an IO connection must wake the event thread: no thread
 * polls for it (rtrs_clt_poll), and a request is in flight or the next one may come without
 * RTRS_REQ_POLL (the last one did). Otherwise nothing on those CQs needs the thread before its
 * next look: a poller takes what comes, a request with RTRS_REQ_POLL is polled for (or its
 * poll wakes the thread), and a completion of nothing in flight (a late send completion)
 * waits for the next poll. */
static int io_arm_needed(const struct rtrs_clt *c)
{
	return !c->app_pollers && (!c->poll_mode || (c->reqs && c->nfree < c->qd));
}

/* Under c->mu: the event thread sleeps with the IO CQs unarmed and a request may now complete
 * with no poller: wakes it (it arms them). Returns whether it must be woken (after the unlock). */
static int ev_kick_needed(struct rtrs_clt *c)
{
	if (!c->ev_unarmed || !io_arm_needed(c))
		return 0;
	c->ev_unarmed = 0;	/* one kick is enough */
	c->app_poll_kicks++;
	return 1;
}

static void ev_kick(struct rtrs_clt *c)
{
	uint64_t one = 1;
	if (write(c->efd, &one, sizeof(one)) < 0) {
		/* the eventfd is full: the thread is being woken anyway */
	}
}

/* A polling thread steps aside for a thread that waits for the lock, or for a permit that is
 * free (the submitter needs the lock to take it). */
static void clt_step_aside(struct rtrs_clt *c)
{
	if (c->lock_waiters || (c->permit_waiters && c->nfree))
		rtrs_step_aside(&c->mu, c->lock_waiters ? &c->lock_waiters : &c->permit_waiters);
}

/* rtrs_loop_begin for the client's polling threads (c->mu held): with more than
 * o.poll_inflight_max requests in flight the thread does not poll on after this pass; it
 * sleeps, and the next answer wakes it (docs/rnbd.md, "Sixth pass"). */
static int clt_loop_begin(struct rtrs_clt *c, struct rtrs_loop *lp, uint64_t now, int *look)
{
	if (c->o.poll_inflight_max && c->reqs && c->qd - c->nfree > c->o.poll_inflight_max)
		lp->busy_until = 0;
	return rtrs_loop_begin(lp, now, look);
}

/*
 * The session's thread. It polls its CQs while completions come (for o.poll_us after the last
 * one: an answer at queue depth 1 is then taken by the poll that waits for it, no thread is
 * woken; with softrdma the poll itself receives the packets), and only then arms the CQs and
 * sleeps in poll() on the completion channels, the CM channel and the eventfd. While polling,
 * it looks at those fds every millisecond (CM events, timers). It keeps the lock while it
 * polls and steps aside when another thread waits for it (clt_lock) or for a permit.
 */
static void *clt_thread(void *arg)
{
	struct rtrs_clt *c = arg;
	uint64_t last_stats = 0;
	struct rtrs_loop lp;

	pthread_setname_np(pthread_self(), "rtrs-clt");	/* perf, top -H */
	rtrs_loop_init(&lp, c->o.poll_us);
	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		int look, spin = clt_loop_begin(c, &lp, rtrs_now_ns(), &look);
		if (look) {
			int timeout = 0;
			if (!spin) {
				/* arm, then look once more: what completed before the arm
				 * made no event */
				int io = io_arm_needed(c);
				arm_all(c, io);
				c->ev_unarmed = !io;
				if (poll_all(c)) {
					rtrs_loop_busy(&lp, 1);
				} else if (!c->done_head) {
					unsigned int tick = c->o.hb_interval_ms / 4;
					timeout = tick < 5 ? 5 : tick > 50 ? 50 : (int)tick;
				}
			}
			if (rtrs_loop_wait(&lp, &c->mu, c->ech->fd, c->efd, c->cch, c->ncch, timeout,
					   NULL))
				handle_cm(c);
			c->ev_unarmed = 0;
			uint64_t now = lp.last_fds;
			timers(c, now);
			if (c->stats_dir[0] && now - last_stats > 1000000000ull) {
				last_stats = now;
				write_stats(c);
			}
		}
		/* every CQ: notifications are per CQ and may be coalesced */
		rtrs_loop_busy(&lp, poll_all(c));
		run_done(c);
		if (spin)
			clt_step_aside(c);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/*
 * RTRS_EVENT_SLEEP=cq: a completion channel's thread. As clt_thread, it polls every CQ while
 * completions come and for o.poll_us after the last one, stepping aside for threads that wait
 * for the lock or a permit; then it arms the CQs, looks once more, and sleeps in a blocking
 * ibv_get_cq_event on its channel alone, so that a driver that wakes such a sleeper by the
 * packet itself (softrdma's chan_rx) needs no thread of its own in between. When a thread that
 * waits for its request polls for it (rtrs_clt_poll: the IO connections' CQs left unarmed,
 * ev_unarmed), it sleeps in poll() on the channel's fd and the eventfd instead, which the end
 * of that poll writes: asleep in ibv_get_cq_event it would receive the packets meant for the
 * polling thread. CM events and timers are clt_cm_thread's. rtrs_clt_close cancels it in its
 * sleep.
 */
static void *clt_cq_thread(void *arg)
{
	struct rtrs_chan_thr *t = arg;
	struct rtrs_clt *c = t->owner;
	struct rtrs_loop lp;
	int woke = 0;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_setname_np(pthread_self(), "rtrs-clt");	/* perf, top -H */
	rtrs_loop_init(&lp, c->o.poll_us);
	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		uint64_t now = rtrs_now_ns();
		int look, spin = clt_loop_begin(c, &lp, now, &look);
		if (look)
			lp.last_fds = now;	/* the CM channel is clt_cm_thread's */
		if (!spin && !woke) {
			/* arm, then look once more: what completed before the arm made no event */
			int io = io_arm_needed(c);
			arm_all(c, io);
			c->ev_unarmed = !io;
			if (!poll_all(c) && !c->done_head) {
				int err;
				pthread_mutex_unlock(&c->mu);
				if (io) {
					err = rtrs_cq_wait(t->ch);
				} else {
					struct pollfd pf[2] = { { c->efd, POLLIN, 0 },
								{ t->ch->fd, POLLIN, 0 } };
					uint64_t v;
					int old;
					err = 0;
					pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
					poll(pf, 2, -1);
					pthread_setcancelstate(old, NULL);
					if ((pf[0].revents & POLLIN) && read(c->efd, &v, sizeof(v)) < 0) {
						/* another channel's thread took it */
					}
					/* an event waits, unless the CM thread destroyed its CQ
					 * meanwhile (the event went with it): not a blocking get,
					 * which would sleep with the IO CQs unarmed */
					if (pf[1].revents & POLLIN)
						err = rtrs_cq_take(t->ch);
				}
				if (err && err != EINTR)
					poll(NULL, 0, 1);	/* not a busy loop if it keeps failing */
				pthread_mutex_lock(&c->mu);
				c->ev_unarmed = 0;
				woke = 1;
				continue;
			}
			c->ev_unarmed = 0;
		}
		woke = 0;
		rtrs_loop_busy(&lp, poll_all(c));
		run_done(c);
		if (spin)
			clt_step_aside(c);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/*
 * RTRS_EVENT_SLEEP=cq: the session's thread. It sleeps in poll() on the CM channel for a tick
 * (hb_interval_ms / 4, 5 to 50 ms, as clt_thread's sleep), then handles the CM events (paths
 * connecting: their CQs and channels, a new channel getting its thread), runs the timers
 * (heartbeats, reconnects, requests waiting for a path), calls back what they completed and
 * writes the counters. It polls a CQ only for a path that goes down (handle_cm).
 */
static void *clt_cm_thread(void *arg)
{
	struct rtrs_clt *c = arg;
	uint64_t last_stats = 0;
	unsigned int tick = c->o.hb_interval_ms / 4;

	tick = tick < 5 ? 5 : tick > 50 ? 50 : tick;
	pthread_setname_np(pthread_self(), "rtrs-clt-cm");
	clt_lock(c);
	while (!c->stop) {
		struct pollfd pf = { c->ech->fd, POLLIN, 0 };
		pthread_mutex_unlock(&c->mu);
		poll(&pf, 1, (int)tick);
		clt_lock(c);
		if (c->stop)
			break;
		if (pf.revents & POLLIN)
			handle_cm(c);
		uint64_t now = rtrs_now_ns();
		timers(c, now);
		if (c->stats_dir[0] && now - last_stats > 1000000000ull) {
			last_stats = now;
			write_stats(c);
		}
		run_done(c);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static int path_init(struct rtrs_clt *c, struct clt_path *p, const struct rtrs_path_addr *a)
{
	memset(p, 0, offsetof(struct clt_path, post_lk));	/* not post_lk, gen: above */
	p->clt = c;
	if (rtrs_parse_addr(a->dst, &p->dst, 0))
		return EINVAL;
	if (a->src) {
		if (rtrs_parse_addr(a->src, &p->src, 1))
			return EINVAL;
		((struct sockaddr_in *)&p->src)->sin_port = 0;
		p->has_src = 1;
	}
	snprintf(p->dst_s, sizeof(p->dst_s), "%s", a->dst);
	snprintf(p->src_s, sizeof(p->src_s), "%s", a->src ? a->src : "");
	snprintf(p->st.sessname, sizeof(p->st.sessname), "%.63s", c->name);
	snprintf(p->st.dst, sizeof(p->st.dst), "%s", a->dst);
	snprintf(p->st.src, sizeof(p->st.src), "%s", a->src ? a->src : "-");
	rand_bytes(p->uuid, 16);
	p->used = 1;
	return 0;
}

struct rtrs_clt *rtrs_clt_open(const char *sessname, const struct rtrs_path_addr *paths,
			       size_t n, const struct rtrs_clt_opts *opts)
{
	struct rtrs_clt *c;
	int err;

	if (!sessname || !sessname[0] || strlen(sessname) > RTRS_NAME_MAX || !paths || !n ||
	    n > CLT_MAX_PATHS) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	rtrs_clt_opts_init(&c->o);
	if (opts) {
		size_t sz = opts->size && opts->size < sizeof(c->o) ? opts->size : sizeof(c->o);
		memcpy(&c->o, opts, sz);
		c->o.size = sizeof(c->o);
	}
	if (c->o.io_cons < 1 || c->o.io_cons > CLT_MAX_CONS - 1 || !c->o.hb_interval_ms ||
	    !c->o.hb_missed_max || c->o.policy > RTRS_MP_MIN_LATENCY) {
		free(c);
		errno = EINVAL;
		return NULL;
	}
	snprintf(c->name, sizeof(c->name), "%s", sessname);
	c->force_path = -1;
	c->force_id = -1;
	const char *sd = c->o.stats_dir ? c->o.stats_dir : getenv("RTRS_STATS_DIR");
	if (sd)
		snprintf(c->stats_dir, sizeof(c->stats_dir), "%s", sd);
	rand_bytes(c->uuid, 16);
	pthread_mutex_init(&c->mu, NULL);
	for (int i = 0; i < CLT_MAX_PATHS; i++)
		pthread_rwlock_init(&c->paths[i].post_lk, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	c->cq_sleep = rtrs_event_sleep_cq();
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	c->ech = rdma_create_event_channel();
	if (c->efd < 0 || !c->ech) {
		err = ENOMEM;
		goto fail0;
	}
	fcntl(c->ech->fd, F_SETFL, fcntl(c->ech->fd, F_GETFL) | O_NONBLOCK);
	for (size_t i = 0; i < n; i++) {
		err = path_init(c, &c->paths[i], &paths[i]);
		if (err)
			goto fail0;
	}
	clt_lock(c);
	for (size_t i = 0; i < n; i++) {
		err = path_start(c, &c->paths[i]);
		if (err)
			path_fail(c, &c->paths[i], err);
	}
	pthread_mutex_unlock(&c->mu);
	if (pthread_create(&c->thr, NULL, c->cq_sleep ? clt_cm_thread : clt_thread, c)) {
		err = EAGAIN;
		goto fail0;
	}
	struct timespec dl;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += c->o.connect_timeout_ms / 1000;
	dl.tv_nsec += (long)(c->o.connect_timeout_ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	clt_lock(c);
	while (!c->any_connected_before) {
		if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) == ETIMEDOUT)
			break;
	}
	int ok = c->any_connected_before;
	err = c->last_err == ECONNREFUSED ? ECONNREFUSED : ETIMEDOUT;
	pthread_mutex_unlock(&c->mu);
	if (!ok) {
		rtrs_clt_close(c);
		errno = err;
		return NULL;
	}
	return c;
fail0:
	for (size_t i = 0; i < CLT_MAX_PATHS; i++)
		path_teardown(&c->paths[i]);
	if (c->ech)
		rdma_destroy_event_channel(c->ech);
	if (c->efd >= 0)
		close(c->efd);
	free(c);
	errno = err;
	return NULL;
}

void rtrs_clt_close(struct rtrs_clt *c)
{
	if (!c)
		return;
	c->stop = 1;
	pthread_join(c->thr, NULL);
	/* Channels' threads (made by the CM thread, now joined): one asleep is cancelled in its
	 * sleep (the only place where it may be); one that is running sees stop at its next pass. */
	for (int i = 0; i < c->ncch; i++)
		rtrs_chan_thr_stop(&c->cch_thr[i]);
	clt_lock(c);
	c->closing = 1;
	if (getenv("RTRS_DEBUG"))
		fprintf(stderr, "rtrs-clt: %s: rtrs_clt_poll calls %llu, answered %llu, busy %llu, "
			"event thread kicks %llu\n", c->name, (unsigned long long)c->app_polls,
			(unsigned long long)c->app_poll_done, (unsigned long long)c->app_poll_busy,
			(unsigned long long)c->app_poll_kicks);
	for (uint32_t i = 0; c->reqs && i < c->qd; i++)
		if (c->reqs[i].state != REQ_FREE)
			req_done(c, &c->reqs[i], ECONNABORTED);
	run_done(c);
	for (int i = 0; i < CLT_MAX_PATHS; i++) {
		struct clt_path *p = &c->paths[i];
		path_teardown(p);
		free(p->rbufs);
		if (p->used)
			set_state(p, RTRS_PATH_CLOSED);
	}
	if (c->stats_dir[0]) {
		char path[512];
		snprintf(path, sizeof(path), "%.200s/rtrs-%d-clt-%.255s", c->stats_dir, (int)getpid(), c->name);
		unlink(path);
	}
	pthread_mutex_unlock(&c->mu);
	for (int i = 0; i < c->ncch; i++)
		ibv_destroy_comp_channel(c->cch[i]);
	rdma_destroy_event_channel(c->ech);
	close(c->efd);
	free(c->data);
	free(c->msg);
	free(c->reqs);
	free(c->free_ids);
	free(c);
}

int rtrs_clt_query(struct rtrs_clt *c, struct rtrs_attrs *a)
{
	if (!c || !a)
		return EINVAL;
	clt_lock(c);
	memset(a, 0, sizeof(*a));
	a->queue_depth = c->qd;
	a->max_io_size = c->max_io;
	a->max_hdr_size = c->max_hdr;
	a->chunk_size = c->chunk;
	a->max_segments = c->o.max_segments;
	snprintf(a->sessname, sizeof(a->sessname), "%s", c->name);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int rtrs_clt_request(struct rtrs_clt *c, enum rtrs_dir dir, rtrs_conf_fn conf, void *priv,
		     const void *usr, size_t usr_len, const struct iovec *sg, unsigned int sg_cnt,
		     unsigned int flags)
{
	size_t len = 0;

	if (!c || !conf || (dir != RTRS_READ && dir != RTRS_WRITE) || (sg_cnt && !sg) ||
	    (usr_len && !usr) || sg_cnt > c->o.max_segments)
		return EINVAL;
	for (unsigned int i = 0; i < sg_cnt; i++)
		len += sg[i].iov_len;
	clt_lock(c);
	if (c->stop || c->closing) {
		pthread_mutex_unlock(&c->mu);
		return ENOTCONN;
	}
	if (usr_len > c->max_hdr || len > c->max_io) {
		pthread_mutex_unlock(&c->mu);
		return EMSGSIZE;
	}
	while (!c->nfree) {
		if (flags & RTRS_REQ_NOWAIT || c->stop) {
			pthread_mutex_unlock(&c->mu);
			return c->stop ? ENOTCONN : EAGAIN;
		}
		c->permit_waiters++;
		pthread_cond_wait(&c->cv, &c->mu);
		c->permit_waiters--;
	}
	struct clt_req *r;
	struct clt_path *fp = NULL;
	if (c->force_id >= 0) {	/* test hook: this permit on this path */
		uint32_t k = 0;
		while (k < c->nfree && c->free_ids[k] != (uint32_t)c->force_id)
			k++;
		if (k == c->nfree || c->force_path < 0 || !path_usable(&c->paths[c->force_path])) {
			pthread_mutex_unlock(&c->mu);
			return EBUSY;
		}
		c->free_ids[k] = c->free_ids[--c->nfree];
		r = &c->reqs[c->force_id];
		fp = &c->paths[c->force_path];
		c->force_id = -1;
	} else {
		r = &c->reqs[c->free_ids[--c->nfree]];
	}
	r->dir = dir;
	r->conf = conf;
	r->priv = priv;
	r->sg = sg_cnt ? malloc(sizeof(*sg) * sg_cnt) : NULL;
	if (sg_cnt && !r->sg) {
		c->free_ids[c->nfree++] = r->id;
		pthread_mutex_unlock(&c->mu);
		return ENOMEM;
	}
	if (sg_cnt)
		memcpy(r->sg, sg, sizeof(*sg) * sg_cnt);
	r->sg_cnt = sg_cnt;
	r->len = (uint32_t)len;
	r->usr_len = (uint16_t)usr_len;
	r->submit_ns = rtrs_now_ns();
	r->state = REQ_PENDING;
	r->path = NULL;
	/* the user header goes to the permit's message slot; the data stays where the caller
	 * has it until the request is posted (req_post: zero copy from a registered region, or
	 * staged once in the permit's bounce buffer); a fail-over re-sends the same */
	if (usr_len)
		memcpy(c->msg + (size_t)r->id * c->msg_stride, usr, usr_len);
	r->staged = 0;
	r->bounced = 0;
	r->ubuf = -1;
	int all = -1;	/* the all-memory region: only when no region of the caller's holds sg */
	for (int i = 0; len && i < CLT_MAX_UBUFS; i++) {
		struct clt_ubuf *u = &c->ubufs[i];
		uintptr_t ua = (uintptr_t)u->addr;
		unsigned int k = 0;
		if (!u->used)
			continue;
		if (!u->addr) {
			all = i;
			continue;
		}
		while (k < sg_cnt && (!sg[k].iov_len ||
				      ((uintptr_t)sg[k].iov_base >= ua &&
				       sg[k].iov_len <= u->len &&
				       (uintptr_t)sg[k].iov_base - ua <= u->len - sg[k].iov_len)))
			k++;
		if (k == sg_cnt) {
			r->ubuf = i;
			break;
		}
	}
	if (r->ubuf < 0 && len >= CLT_ODP_MIN_LEN)
		r->ubuf = all;
	if (r->ubuf >= 0)
		c->ubufs[r->ubuf].refs++;
	struct clt_path *p = fp ? fp : pick_path(c, NULL);
	struct clt_post w;
	/* alone in flight (depth 1), nobody waits for mu: posted under it, as before */
	int unlocked = p && c->qd - c->nfree > 1;
	if (p && (unlocked ? req_build(c, r, p, &w) : req_post(c, r, p)))
		p = NULL;
	/* no path now: the event thread places it or fails it after fail_timeout_ms; a request
	 * whose caller does not poll for it needs the event thread's CQs armed */
	c->poll_mode = !!(flags & RTRS_REQ_POLL);
	int kick = !p || (!c->poll_mode && ev_kick_needed(c));
	pthread_mutex_unlock(&c->mu);
	if (p && unlocked) {
		/* posted without mu: on softrdma the post sends the datagram (into the veth, to
		 * the receiver's socket), long enough that the other submitting threads and the
		 * event thread's completions would wait for mu behind it (docs/rtrs.md, "The
		 * client's post"). Once posted r is the answer's: not touched here again. */
		struct ibv_send_wr *bad = NULL;
		int rc = 0;
		pthread_rwlock_rdlock(&p->post_lk);
		if (p->gen == w.gen)	/* else path_fail has taken r (moved or pending) */
			rc = ibv_post_send(w.qp, w.head, &bad);
		pthread_rwlock_unlock(&p->post_lk);
		if (rc) {
			/* nothing of r's request went, so no answer can have freed it */
			clt_lock(c);
			if (p->gen == w.gen && r->state == REQ_INFLIGHT && r->path == p)
				req_unpost(&w, bad);
			pthread_mutex_unlock(&c->mu);
			kick = 1;
		}
	}
	if (kick)
		ev_kick(c);
	return 0;
}

int rtrs_clt_poll(struct rtrs_clt *c, int (*done)(void *arg), void *arg, unsigned int budget_us)
{
	if (!c || !done)
		return EINVAL;
	if (done(arg))
		return 0;
	/* Without the lock (which makes a polling event thread step aside): the event thread
	 * has its CQs armed, or polls, and others are in flight or polled for. ev_unarmed as
	 * of this thread's submission is seen (it took the lock since); set later, it was set
	 * beside a poller, whose end kicks the thread if need be. */
	if (!__atomic_load_n(&c->ev_unarmed, __ATOMIC_ACQUIRE) &&
	    (!budget_us || __atomic_load_n(&c->app_pollers, __ATOMIC_RELAXED) ||
	     c->qd - __atomic_load_n(&c->nfree, __ATOMIC_RELAXED) > 1))
		return EBUSY;
	clt_lock(c);
	c->app_polls++;
	/* one poller at a time, and only for a request alone in flight: with more, the event
	 * thread (which polls while completions come) serves them all without a hand-off */
	if (!budget_us || c->app_pollers || c->stop || c->closing || !c->reqs ||
	    c->qd - c->nfree > 1) {
		int kick = ev_kick_needed(c);
		c->app_poll_busy++;
		pthread_mutex_unlock(&c->mu);
		if (kick)
			ev_kick(c);
		return EBUSY;
	}
	c->app_pollers++;
	uint64_t end = rtrs_now_ns() + (uint64_t)budget_us * 1000;
	int rc = ETIMEDOUT;
	for (;;) {
		poll_all(c);
		run_done(c);	/* drops the lock around each callback */
		if (done(arg)) {
			rc = 0;
			break;
		}
		if (c->stop || c->closing || rtrs_now_ns() >= end)
			break;
		/* a submitter, or the event thread's API neighbours */
		rtrs_step_aside(&c->mu, &c->lock_waiters);
	}
	c->app_pollers--;
	if (!rc)
		c->app_poll_done++;
	int kick = ev_kick_needed(c);
	pthread_mutex_unlock(&c->mu);
	if (kick)
		ev_kick(c);
	return rc;
}

int rtrs_clt_reg_buf(struct rtrs_clt *c, void *addr, size_t len)
{
	if (!c || !len || (!addr && len != SIZE_MAX))
		return EINVAL;
	clt_lock(c);
	int slot = -1, err = 0;
	for (int i = 0; i < CLT_MAX_UBUFS; i++) {
		struct clt_ubuf *u = &c->ubufs[i];
		if (u->used && u->addr == addr)
			err = EEXIST;
		if (!u->used && slot < 0)
			slot = i;
	}
	if (!err && slot < 0)
		err = ENOSPC;
	if (!err) {
		c->ubufs[slot] = (struct clt_ubuf){ addr, len, 0, 1 };
		/* every path that has its buffers registered; the others at their setup */
		for (int i = 0; i < CLT_MAX_PATHS && !err; i++) {
			struct clt_path *p = &c->paths[i];
			if (p->used && p->pd && p->data_mr)
				err = ubuf_reg(c, p, slot);
		}
		if (err) {
			for (int i = 0; i < CLT_MAX_PATHS; i++)
				if (c->paths[i].umr[slot]) {
					ibv_dereg_mr(c->paths[i].umr[slot]);
					c->paths[i].umr[slot] = NULL;
				}
			c->ubufs[slot].used = 0;
		}
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}

int rtrs_clt_unreg_buf(struct rtrs_clt *c, void *addr)
{
	if (!c)
		return EINVAL;
	clt_lock(c);
	int err = ENOENT;
	for (int i = 0; i < CLT_MAX_UBUFS; i++) {
		struct clt_ubuf *u = &c->ubufs[i];
		if (!u->used || u->addr != addr)
			continue;
		if (u->refs) {
			err = EBUSY;
			break;
		}
		for (int k = 0; k < CLT_MAX_PATHS; k++)
			if (c->paths[k].umr[i]) {
				ibv_dereg_mr(c->paths[k].umr[i]);
				c->paths[k].umr[i] = NULL;
			}
		u->used = 0;
		err = 0;
		break;
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}

int rtrs_clt_add_path(struct rtrs_clt *c, const struct rtrs_path_addr *a)
{
	if (!c || !a || !a->dst)
		return EINVAL;
	clt_lock(c);
	int slot = -1;
	for (int i = 0; i < CLT_MAX_PATHS; i++) {
		struct clt_path *p = &c->paths[i];
		if (p->used && p->state != RTRS_PATH_CLOSED && !strcmp(p->dst_s, a->dst) &&
		    !strcmp(p->src_s, a->src ? a->src : "")) {
			pthread_mutex_unlock(&c->mu);
			return EEXIST;
		}
		if (slot < 0 && (!p->used || p->state == RTRS_PATH_CLOSED))
			slot = i;
	}
	if (slot < 0) {
		pthread_mutex_unlock(&c->mu);
		return ENOSPC;
	}
	struct clt_path *p = &c->paths[slot];
	free(p->rbufs);
	int err = path_init(c, p, a);
	if (!err) {
		err = path_start(c, p);
		if (err) {
			path_fail(c, p, err);
			err = 0;
		}
	} else {
		p->used = 0;
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}

int rtrs_clt_remove_path(struct rtrs_clt *c, const struct rtrs_path_addr *a)
{
	if (!c || !a || !a->dst)
		return EINVAL;
	clt_lock(c);
	struct clt_path *p = NULL;
	int others = 0;
	for (int i = 0; i < CLT_MAX_PATHS; i++) {
		struct clt_path *q = &c->paths[i];
		if (!q->used || q->state == RTRS_PATH_CLOSED)
			continue;
		if (!strcmp(q->dst_s, a->dst) && (!a->src || !strcmp(q->src_s, a->src)))
			p = q;
		else if (path_usable(q))
			others++;
	}
	int err = 0;
	if (!p)
		err = ENOENT;
	else if (!others)
		err = EBUSY;
	else {
		p->removing = 1;
		path_fail(c, p, ECONNABORTED);
		set_state(p, RTRS_PATH_CLOSED);
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}

int rtrs_clt_set_policy(struct rtrs_clt *c, enum rtrs_mp_policy policy)
{
	if (!c || policy > RTRS_MP_MIN_LATENCY)
		return EINVAL;
	clt_lock(c);
	c->o.policy = policy;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int rtrs_clt_path_stats(struct rtrs_clt *c, struct rtrs_path_stats *out, int max)
{
	int k = 0;
	clt_lock(c);
	for (int i = 0; i < CLT_MAX_PATHS; i++) {
		if (!c->paths[i].used)
			continue;
		if (k < max)
			out[k] = c->paths[i].st;
		k++;
	}
	pthread_mutex_unlock(&c->mu);
	return k;
}

int rtrs_clt_test_raw(struct rtrs_clt *c, uint32_t imm, const void *msg, size_t len,
		      uint32_t chunk, uint32_t off)
{
	clt_lock(c);
	struct clt_path *p = pick_path(c, NULL);
	if (!p || !c->nfree || len > c->chunk) {
		pthread_mutex_unlock(&c->mu);
		return p ? EINVAL : ENOTCONN;
	}
	chunk %= c->qd;
	off %= c->chunk - (uint32_t)len + 1;
	/* from a free permit's data buffer */
	uint32_t id = c->free_ids[c->nfree - 1];
	char *buf = c->data + (size_t)id * c->chunk;
	memcpy(buf, msg, len);
	struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)len, p->data_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = UINT64_MAX, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = p->rbufs[chunk].addr + off;
	wr.wr.rdma.rkey = p->rbufs[chunk].key;
	int r = ibv_post_send(p->cons[1].qp, &wr, &bad) ? EIO : 0;
	pthread_mutex_unlock(&c->mu);
	return r;
}

int rtrs_clt_test_force(struct rtrs_clt *c, int path, uint32_t id)
{
	if (path < 0 || path >= CLT_MAX_PATHS)
		return EINVAL;
	clt_lock(c);
	int err = id < c->qd ? 0 : EINVAL;
	if (!err) {
		c->force_path = path;
		c->force_id = id;
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}

int rtrs_clt_test_key(struct rtrs_clt *c, int path, uint32_t id, uint32_t *key, int *connected)
{
	if (path < 0 || path >= CLT_MAX_PATHS)
		return EINVAL;
	clt_lock(c);
	struct clt_path *p = &c->paths[path];
	int err = id < c->qd && p->rbufs ? 0 : ENOENT;
	if (!err)
		*key = p->rbufs[id].key;
	*connected = path_usable(p);
	pthread_mutex_unlock(&c->mu);
	return err;
}

int rtrs_clt_test_write_key(struct rtrs_clt *c, int path, uint32_t id, uint32_t off, uint32_t key,
			    const void *msg, size_t len, int timeout_ms)
{
	if (path < 0 || path >= CLT_MAX_PATHS)
		return -EINVAL;
	clt_lock(c);
	struct clt_path *p = &c->paths[path];
	if (!path_usable(p) || !c->nfree || id >= c->qd || len > c->chunk ||
	    off > c->chunk - len) {
		pthread_mutex_unlock(&c->mu);
		return -EINVAL;
	}
	char *buf = c->data + (size_t)c->free_ids[c->nfree - 1] * c->chunk;
	memcpy(buf, msg, len);
	struct ibv_sge sge = { (uintptr_t)buf, (uint32_t)len, p->data_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = CLT_WRID_TEST, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = p->rbufs[id].addr + off;
	wr.wr.rdma.rkey = key;
	c->test_status = -1;
	struct clt_con *con = c->new_rkey ? req_con(p, id) : &p->cons[1];
	if (ibv_post_send(con->qp, &wr, &bad)) {
		pthread_mutex_unlock(&c->mu);
		return -EIO;
	}
	for (int waited = 0; c->test_status < 0 && waited < timeout_ms; waited += 10) {
		pthread_mutex_unlock(&c->mu);
		usleep(10000);
		clt_lock(c);
	}
	int st = c->test_status;
	pthread_mutex_unlock(&c->mu);
	return st < 0 ? -ETIMEDOUT : st;
}
