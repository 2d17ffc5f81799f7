/* SPDX-License-Identifier: MIT */
/*
 * The stream data path (docs/rsocket.md): one RC QP per connection, one CQ and completion
 * channel.
 *
 * Each side owns a receive ring the peer writes into with RDMA WRITE WITH IMMEDIATE: the data
 * of write k lands right after the data of write k-1 (mod the ring size; a write never wraps,
 * the sender splits it), and the immediate carries its length. So the receiver only counts:
 * r_tail (landed) and r_head (taken by the application). Every write also consumes one of
 * the receiver's posted receive slots, which is posted again as soon as its completion is seen.
 *
 * Flow control is by credits the receiver returns in CREDIT messages: how many bytes its
 * application has taken (the sender may fill the ring up to that) and how many receive slots
 * it has posted again (the sender may have `credits` messages outstanding). A CREDIT is sent
 * when half the ring or half the slots have been freed since the last one, so a ping-pong sends
 * none and a stream one per half ring. A CREDIT itself needs no credit: the receiver keeps
 * RS_CTRL_EXTRA slots beyond the credits for them, and an overrun would only draw an RNR NAK,
 * retried forever (rnr_retry 7), never an error.
 *
 * The sender copies into a registered send buffer (or sends inline up to the inline size);
 * its space comes back when the WR completes. Only some WRs are signaled: at least every
 * quarter of the send queue and every quarter of the send buffer, so that whenever either is
 * full a signaled completion is on its way.
 */
#include <stdlib.h>
#include <string.h>

#include "cm/rsocket/rs.h"

static void proto_error(struct rsock *rs, const char *what)
{
	rs_warn(rs, "protocol error: %s; connection reset", what);
	rs->st.qp_err = true;
	if (!rs->so_error)
		rs->so_error = ECONNRESET;
	if (rs->state == RS_CONNECTED || rs->state == RS_ACCEPTING) {
		rdma_disconnect(rs->id);
		rs->state = RS_DISCONNECTED;
	}
}

/* ---- setup ---------------------------------------------------------------------------------- */
static void *alloc_buf(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, (len + 4095) & ~(size_t)4095))
		return NULL;
	memset(p, 0, len);
	return p;
}

int rs_stream_alloc(struct rsock *rs)
{
	struct rs_stream *st = &rs->st;
	struct ibv_context *ctx = rs->id->verbs;
	struct ibv_qp_init_attr qa;
	uint32_t cqe;

	if (!ctx)
		return -ENODEV;
	rs->pd = rs_pd(ctx);
	if (!rs->pd)
		return -errno;
	st->rsize = rs->rcvbuf;
	st->ssize = rs->sndbuf;
	st->credits = rs->rqsize;
	st->nslots = st->credits + RS_CTRL_EXTRA;
	st->sq_depth = rs->sqsize;
	cqe = st->sq_depth + st->nslots + 16;
	rs->cch = ibv_create_comp_channel(ctx);
	if (!rs->cch)
		return -errno;
	rs_set_fd_nonblock(rs->cch->fd);
	rs->cq = ibv_create_cq(ctx, (int)cqe, rs, rs->cch, 0);
	st->rbuf = alloc_buf(st->rsize);
	st->sbuf = alloc_buf(st->ssize);
	st->slots = alloc_buf((size_t)st->nslots * RS_SLOT_LEN);
	st->wr_bytes = calloc(st->sq_depth, sizeof(*st->wr_bytes));
	st->pmaps = calloc(rs->iomap_size ? rs->iomap_size : 1, sizeof(*st->pmaps));
	if (!rs->cq || !st->rbuf || !st->sbuf || !st->slots || !st->wr_bytes || !st->pmaps)
		return -ENOMEM;
	st->rmr = ibv_reg_mr(rs->pd, st->rbuf, st->rsize,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	st->smr = ibv_reg_mr(rs->pd, st->sbuf, st->ssize, IBV_ACCESS_LOCAL_WRITE);
	st->slot_mr = ibv_reg_mr(rs->pd, st->slots, (size_t)st->nslots * RS_SLOT_LEN,
				 IBV_ACCESS_LOCAL_WRITE);
	if (!st->rmr || !st->smr || !st->slot_mr)
		return errno ? -errno : -ENOMEM;

	memset(&qa, 0, sizeof(qa));
	qa.qp_context = rs;
	qa.send_cq = rs->cq;
	qa.recv_cq = rs->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = st->sq_depth;
	qa.cap.max_recv_wr = st->nslots;
	qa.cap.max_send_sge = 2;
	qa.cap.max_recv_sge = 1;
	qa.cap.max_inline_data = rs->inline_size > RS_CTRL_LEN ? rs->inline_size : RS_CTRL_LEN;
	if (rdma_create_qp(rs->id, rs->pd, &qa))
		return -errno;
	rs->qp = rs->id->qp;
	if (qa.cap.max_inline_data < rs->inline_size)
		rs->inline_size = qa.cap.max_inline_data;
	return rs_stream_post_recvs(rs);
}

static int post_slot(struct rsock *rs, uint32_t i)
{
	struct rs_stream *st = &rs->st;
	struct ibv_sge sge = {
		.addr = (uintptr_t)(st->slots + (size_t)i * RS_SLOT_LEN),
		.length = RS_SLOT_LEN,
		.lkey = st->slot_mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = RS_WRID_RECV | i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(rs->qp, &wr, &bad);
}

int rs_stream_post_recvs(struct rsock *rs)
{
	for (uint32_t i = 0; i < rs->st.nslots; i++) {
		int ret = post_slot(rs, i);

		if (ret)
			return -ret;
	}
	return 0;
}

void rs_conn_local(const struct rsock *rs, struct rs_conn *c)
{
	const struct rs_stream *st = &rs->st;

	memset(c, 0, sizeof(*c));
	c->version = RS_PROTO_VERSION;
	c->rkey = st->rmr->rkey;
	c->addr = (uintptr_t)st->rbuf;
	c->size = st->rsize;
	c->credits = (uint16_t)st->credits;
	c->iomap_size = rs->iomap_size;
}

void rs_stream_peer(struct rsock *rs, const struct rs_conn *c)
{
	struct rs_stream *st = &rs->st;

	st->p_addr = c->addr;
	st->p_rkey = c->rkey;
	st->p_size = c->size;
	st->p_credits = c->credits;
	st->p_iomap_size = c->iomap_size;
}

/* ---- posting ------------------------------------------------------------------------------------ */
static bool sq_full(const struct rs_stream *st, uint32_t keep)
{
	return st->wr_next - st->wr_done + keep >= st->sq_depth;
}

static bool want_signal(struct rs_stream *st, uint32_t sbytes, bool force)
{
	if (force || st->unsig_wrs + 1 >= st->sq_depth / 4 ||
	    st->unsig_bytes + sbytes >= st->ssize / 4) {
		st->unsig_wrs = 0;
		st->unsig_bytes = 0;
		return true;
	}
	st->unsig_wrs++;
	st->unsig_bytes += sbytes;
	return false;
}

static int post_send(struct rsock *rs, struct ibv_send_wr *wr, uint32_t sbytes)
{
	struct rs_stream *st = &rs->st;
	struct ibv_send_wr *bad;
	int ret;

	wr->wr_id = st->wr_next;
	ret = ibv_post_send(rs->qp, wr, &bad);
	if (ret)
		return -ret;
	st->wr_bytes[st->wr_next % st->sq_depth] = sbytes;
	st->wr_next++;
	return 0;
}

int rs_post_ctrl(struct rsock *rs, const struct rs_ctrl *c, bool signaled)
{
	struct rs_stream *st = &rs->st;
	uint8_t buf[RS_CTRL_LEN];
	struct ibv_sge sge = { .addr = (uintptr_t)buf };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND };
	int ret;

	if (sq_full(st, 0))
		return -EAGAIN;
	sge.length = (uint32_t)rs_ctrl_encode(c, buf);
	wr.send_flags = IBV_SEND_INLINE | (want_signal(st, 0, signaled) ? IBV_SEND_SIGNALED : 0);
	ret = post_send(rs, &wr, 0);
	if (!ret)
		st->s_msgs++;
	return ret;
}

int rs_post_write(struct rsock *rs, const struct iovec *iov, int iovcnt, size_t off, uint32_t n,
		  uint64_t raddr, uint32_t rkey, bool imm)
{
	struct rs_stream *st = &rs->st;
	uint8_t tmp[RS_MAX_INLINE];
	struct ibv_sge sge[2];
	struct ibv_send_wr wr = { .sg_list = sge, .num_sge = 1 };
	uint32_t sbytes = 0;
	int ret;

	if (n <= rs->inline_size) {
		rs_iov_gather(tmp, iov, iovcnt, off, n);
		sge[0] = (struct ibv_sge){ .addr = (uintptr_t)tmp, .length = n };
		wr.send_flags = IBV_SEND_INLINE;
	} else {
		uint32_t pos = (uint32_t)(st->sb_head % st->ssize);
		uint32_t first = n < st->ssize - pos ? n : st->ssize - pos;

		rs_iov_gather(st->sbuf + pos, iov, iovcnt, off, first);
		sge[0] = (struct ibv_sge){ .addr = (uintptr_t)(st->sbuf + pos), .length = first,
					   .lkey = st->smr->lkey };
		if (first < n) {
			rs_iov_gather(st->sbuf, iov, iovcnt, off + first, n - first);
			sge[1] = (struct ibv_sge){ .addr = (uintptr_t)st->sbuf, .length = n - first,
						   .lkey = st->smr->lkey };
			wr.num_sge = 2;
		}
		sbytes = n;
	}
	wr.opcode = imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.imm_data = rs_imm_data(n);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (want_signal(st, sbytes, false))
		wr.send_flags |= IBV_SEND_SIGNALED;
	ret = post_send(rs, &wr, sbytes);
	if (ret)
		return ret;
	st->data_end = st->wr_next;
	st->sb_head += sbytes;
	if (imm) {
		st->s_tail += n;
		st->s_msgs++;
	}
	return 0;
}

/* ---- credits and EOF ---------------------------------------------------------------------- */
static bool can_post(struct rsock *rs)
{
	return rs->qp && !rs->st.qp_err &&
	       (rs->state == RS_CONNECTED || rs->state == RS_ACCEPTING);
}

static void credit_check(struct rsock *rs)
{
	struct rs_stream *st = &rs->st;
	struct rs_ctrl c = { .type = RS_CTRL_CREDIT };

	if (!can_post(rs))
		return;
	if (!st->credit_due && st->r_head - st->r_head_told < st->rsize / 2 &&
	    st->r_msgs - st->r_msgs_told < st->credits / 2)
		return;
	c.freed = (uint32_t)st->r_head;
	c.msgs = st->r_msgs;
	if (rs_post_ctrl(rs, &c, false)) {
		st->credit_due = true;	/* the send queue is full: after the next completion */
		return;
	}
	st->credit_due = false;
	st->r_head_told = st->r_head;
	st->r_msgs_told = st->r_msgs;
}

/* The SHUTDOWN of a local SHUT_WR goes out once there is room for it, after all data. */
static void eof_flush(struct rsock *rs)
{
	struct rs_stream *st = &rs->st;
	struct rs_ctrl c = { .type = RS_CTRL_SHUTDOWN };

	if (!rs->shut_wr || rs->eof_sent || rs->state != RS_CONNECTED || !can_post(rs))
		return;
	if (sq_full(st, 0) || (uint32_t)(st->s_msgs - st->s_msgs_acked) >= st->p_credits)
		return;
	if (!rs_post_ctrl(rs, &c, true))	/* signaled: its completion means all is sent */
		rs->eof_sent = true;
}

static void on_credit(struct rsock *rs, const struct rs_ctrl *c)
{
	struct rs_stream *st = &rs->st;
	uint64_t freed = st->s_freed + (uint32_t)(c->freed - (uint32_t)st->s_freed);
	uint32_t released = c->msgs - st->s_msgs_acked;

	if (freed > st->s_tail || released > st->s_msgs - st->s_msgs_acked) {
		proto_error(rs, "CREDIT beyond what was sent");
		return;
	}
	st->s_freed = freed;
	st->s_msgs_acked = c->msgs;
}

/* ---- completions ------------------------------------------------------------------------------ */
static void on_wc_error(struct rsock *rs, const struct ibv_wc *wc)
{
	struct rs_stream *st = &rs->st;

	if (!st->qp_err && wc->status != IBV_WC_WR_FLUSH_ERR) {
		rs_warn(rs, "%s completion: %s", wc->wr_id & RS_WRID_RECV ? "receive" : "send",
			ibv_wc_status_str(wc->status));
		if (!rs->so_error)
			rs->so_error = ECONNRESET;
	}
	/* Flushed: the QP went to ERR, most likely because the CM disconnected it; the event
	 * channel says why. */
	st->qp_err = true;
	rs->cm_pending = true;
}

static void on_recv(struct rsock *rs, const struct ibv_wc *wc)
{
	struct rs_stream *st = &rs->st;
	uint32_t slot = (uint32_t)wc->wr_id;
	struct rs_ctrl c;

	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		int64_t len = rs_imm_len(wc->imm_data);

		if (len < 0 || st->r_tail + (uint64_t)len - st->r_head > st->rsize) {
			proto_error(rs, "data beyond the receive ring");
			return;
		}
		st->r_tail += (uint64_t)len;
		if (rs->shut_rd)
			st->r_head = st->r_tail;	/* nobody reads: dropped, the credit flows */
	} else if (wc->opcode == IBV_WC_RECV && slot < st->nslots &&
		   !rs_ctrl_decode(&c, st->slots + (size_t)slot * RS_SLOT_LEN, wc->byte_len)) {
		switch (c.type) {
		case RS_CTRL_CREDIT:
			on_credit(rs, &c);
			break;
		case RS_CTRL_SHUTDOWN:
			rs_dbg(rs, "EOF from the peer");
			rs->peer_eof = true;
			break;
		case RS_CTRL_IOMAP:
			rs_iomap_recv(rs, &c);
			break;
		}
	} else {
		proto_error(rs, "unknown message");
		return;
	}
	if (!st->qp_err && slot < st->nslots && post_slot(rs, slot) == 0)
		st->r_msgs++;
}

static void on_send(struct rsock *rs, const struct ibv_wc *wc)
{
	struct rs_stream *st = &rs->st;
	uint64_t id = wc->wr_id;

	/* Only a successful completion says the peer has the data (RC: acknowledged); a
	 * flushed or failed one says nothing about it or the unsignaled WRs before it. */
	if (wc->status == IBV_WC_SUCCESS && id < st->wr_next && id + 1 > st->wr_ok)
		st->wr_ok = id + 1;
	if (id < st->wr_done || id >= st->wr_next)
		return;	/* covered by an earlier completion */
	for (uint64_t i = st->wr_done; i <= id; i++)
		st->sb_tail += st->wr_bytes[i % st->sq_depth];
	st->wr_done = id + 1;
}

int rs_cq_drain(struct rsock *rs)
{
	struct ibv_wc wc[32];
	int n, total = 0;

	if (!rs->cq)
		return 0;
	do {
		n = ibv_poll_cq(rs->cq, 32, wc);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				on_wc_error(rs, &wc[i]);
			if (wc[i].wr_id & RS_WRID_RECV) {
				if (wc[i].status == IBV_WC_SUCCESS)
					on_recv(rs, &wc[i]);
			} else {
				on_send(rs, &wc[i]);
			}
		}
		total += n > 0 ? n : 0;
	} while (n == 32);
	if (total || rs->st.credit_due) {
		credit_check(rs);
		eof_flush(rs);
	}
	return total;
}

/* ---- sending ------------------------------------------------------------------------------------- */
uint32_t rs_send_room(struct rsock *rs, size_t want, bool need_credit)
{
	struct rs_stream *st = &rs->st;
	uint64_t n;

	if (sq_full(st, 1))	/* one entry stays free for a CREDIT */
		return 0;
	if (need_credit) {
		uint64_t space = st->p_size - (st->s_tail - st->s_freed);
		uint64_t contig = st->p_size - st->s_tail % st->p_size;

		if ((uint32_t)(st->s_msgs - st->s_msgs_acked) >= st->p_credits)
			return 0;
		n = space < contig ? space : contig;
	} else {
		n = RS_MAX_XFER;
	}
	if (n > RS_MAX_XFER)
		n = RS_MAX_XFER;
	if (n > want)
		n = want;
	if (n > rs->inline_size) {
		uint64_t sfree = st->ssize - (st->sb_head - st->sb_tail);

		if (sfree < n)
			n = sfree > rs->inline_size ? sfree : rs->inline_size;
	}
	return (uint32_t)n;
}

bool rs_stream_can_send(struct rsock *rs)
{
	return rs->state == RS_CONNECTED && !rs->st.qp_err && !rs->shut_wr &&
	       rs_send_room(rs, RS_MAX_XFER, true) > 0;
}

bool rs_stream_sends_done(const struct rsock *rs)
{
	return rs->st.wr_done == rs->st.wr_next;
}

bool rs_stream_unacked(const struct rsock *rs)
{
	return rs->st.wr_ok < rs->st.data_end;
}

/* 0 when data may be sent now, else the error to return (-EAGAIN: not yet connected). */
static int send_state(struct rsock *rs, bool nb)
{
	int err;

	if (rs->shut_wr)
		return -EPIPE;
	switch (rs->state) {
	case RS_CONNECTED:
		break;
	case RS_RESOLVING:
	case RS_CONNECTING:
	case RS_ACCEPTING:
		err = rs_wait_connected(rs, nb);
		if (err)
			return err;
		break;
	case RS_DISCONNECTED:
	case RS_FAILED:
		err = rs->so_error;
		rs->so_error = 0;
		return -(err ? err : ECONNRESET);	/* as rdma-core's rsend */
	default:
		return -ENOTCONN;
	}
	if (rs->st.qp_err) {
		err = rs->so_error;
		rs->so_error = 0;
		return -(err ? err : ECONNRESET);
	}
	return 0;
}

ssize_t rs_stream_sendv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	struct rs_stream *st = &rs->st;
	size_t total = rs_iov_len(iov, iovcnt), done = 0;
	bool nb = rs_nonblock(rs, flags);
	int tmo = rs_timeo_ms(&rs->sndtimeo), err;

	err = send_state(rs, nb);
	if (err)
		return err;
	while (done < total) {
		uint32_t n = rs_send_room(rs, total - done, true);

		if (!n) {
			if (rs_progress(rs)) {
				err = send_state(rs, nb);
				if (err)
					break;
				continue;
			}
			if (nb) {
				rs_yield();
				err = -EAGAIN;
				break;
			}
			if (rs_wait(rs, tmo) == -ETIMEDOUT) {
				err = -EAGAIN;
				break;
			}
			err = send_state(rs, nb);
			if (err)
				break;
			continue;
		}
		err = rs_post_write(rs, iov, iovcnt, done, n, st->p_addr + st->s_tail % st->p_size,
				    st->p_rkey, true);
		if (err) {
			rs_warn(rs, "post send: %s", strerror(-err));
			break;
		}
		done += n;
	}
	return done ? (ssize_t)done : err;
}

/* ---- receiving ---------------------------------------------------------------------------------- */
static void copy_out(struct rsock *rs, const struct iovec *iov, int iovcnt, size_t off, size_t n)
{
	struct rs_stream *st = &rs->st;
	uint32_t pos = (uint32_t)(st->r_head % st->rsize);
	size_t first = n < st->rsize - pos ? n : st->rsize - pos;

	rs_iov_scatter(iov, iovcnt, off, st->rbuf + pos, first);
	if (first < n)
		rs_iov_scatter(iov, iovcnt, off + first, st->rbuf, n - first);
}

ssize_t rs_stream_recvv(struct rsock *rs, const struct iovec *iov, int iovcnt, int flags)
{
	struct rs_stream *st = &rs->st;
	size_t total = rs_iov_len(iov, iovcnt), done = 0;
	bool nb = rs_nonblock(rs, flags);
	int tmo = rs_timeo_ms(&rs->rcvtimeo), err;

	switch (rs->state) {
	case RS_INIT:
	case RS_BOUND:
	case RS_LISTENING:
		return -ENOTCONN;
	case RS_RESOLVING:
	case RS_CONNECTING:
		err = rs_wait_connected(rs, nb);
		if (err)
			return err;
		break;
	default:
		break;
	}
	if (!total)
		return 0;
	for (;;) {
		uint64_t avail = st->r_tail - st->r_head;

		if (avail && !rs->shut_rd) {
			size_t n = avail < total - done ? avail : total - done;

			copy_out(rs, iov, iovcnt, done, n);
			done += n;
			if (flags & MSG_PEEK)
				return (ssize_t)done;
			st->r_head += n;
			credit_check(rs);
			if (done == total || !(flags & MSG_WAITALL))
				return (ssize_t)done;
			continue;
		}
		if (rs_progress(rs))
			continue;
		if (rs->shut_rd || rs->peer_eof)
			return (ssize_t)done;	/* EOF */
		/* Gone without the peer's SHUTDOWN (a disconnection, a QP error, a dead peer):
		 * the stream was cut short, never an EOF (TCP's reset). Every call says so. */
		if (rs->state == RS_DISCONNECTED || rs->state == RS_FAILED || st->qp_err) {
			if (done)
				return (ssize_t)done;
			err = rs->so_error;
			rs->so_error = 0;
			return -(err ? err : ECONNRESET);
		}
		if (nb) {
			rs_yield();
			return done ? (ssize_t)done : -EAGAIN;
		}
		if (rs_wait(rs, tmo) == -ETIMEDOUT)
			return done ? (ssize_t)done : -EAGAIN;
	}
}

/* ---- shutdown -------------------------------------------------------------------------------------- */
int rs_stream_shutdown(struct rsock *rs, int how, bool wait)
{
	struct rs_stream *st = &rs->st;
	uint64_t deadline;
	int linger_ms;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	if (rs->state != RS_CONNECTED && rs->state != RS_ACCEPTING && rs->state != RS_DISCONNECTED)
		return -ENOTCONN;
	if (how != SHUT_WR) {
		rs->shut_rd = true;
		st->r_head = st->r_tail;
		credit_check(rs);
	}
	if (how != SHUT_RD)
		rs->shut_wr = true;
	eof_flush(rs);
	if (!wait)
		return 0;
	/* rclose: until our SHUTDOWN (and so everything before it) is acknowledged. Data left
	 * unacknowledged is an error (nothing is lost silently): -ECONNRESET when the
	 * connection broke, -ETIMEDOUT when the linger time ran out. Not after the peer's own
	 * orderly SHUTDOWN: what is written to a peer that closed is dropped, as TCP does. */
	linger_ms = rs->linger.l_onoff ? rs->linger.l_linger * 1000 : RS_LINGER_MS;
	deadline = rs_now_us() + (uint64_t)linger_ms * 1000;
	while ((!rs->eof_sent || !rs_stream_sends_done(rs)) && can_post(rs)) {
		uint64_t now = rs_now_us();

		if (now >= deadline) {
			rs_dbg(rs, "close: unsent data dropped after %d ms", linger_ms);
			break;
		}
		if (rs_progress(rs))
			continue;
		rs_wait(rs, (int)((deadline - now) / 1000) + 1);
	}
	rs_progress(rs);
	if (!rs_stream_unacked(rs) || rs->peer_eof)
		return 0;
	rs_warn(rs, "close: %llu bytes sent, peer's ring freed to %llu; data unacknowledged (%s)",
		(unsigned long long)st->s_tail, (unsigned long long)st->s_freed,
		can_post(rs) ? "linger time out" : "connection lost");
	return can_post(rs) ? -ETIMEDOUT : -ECONNRESET;
}

/* ---- IO maps: the peer's announcements, ours freed (riomap and riowrite: iomap.c) ------------- */
/* An announcement from the peer (a receive completion). */
void rs_iomap_recv(struct rsock *rs, const struct rs_ctrl *c)
{
	struct rs_stream *st = &rs->st;
	struct rs_pmap *free_slot = NULL;

	for (int i = 0; i < rs->iomap_size; i++) {
		struct rs_pmap *m = &st->pmaps[i];

		if (m->used && m->offset == c->offset) {
			if (!c->len) {
				m->used = false;
			} else {
				m->addr = c->addr;
				m->len = c->len;
				m->rkey = c->rkey;
			}
			return;
		}
		if (!m->used && !free_slot)
			free_slot = m;
	}
	if (!c->len)
		return;
	if (!free_slot) {
		rs_warn(rs, "the peer announced more IO mappings than the %u granted; ignored",
			rs->iomap_size);
		return;
	}
	*free_slot = (struct rs_pmap){ .offset = c->offset, .addr = c->addr, .len = c->len,
				       .rkey = c->rkey, .used = true };
}

void rs_iomap_free(struct rsock *rs)
{
	while (rs->st.lmaps) {
		struct rs_lmap *m = rs->st.lmaps;

		rs->st.lmaps = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
}
