/* SPDX-License-Identifier: MIT */
/*
 * Direct data placement: riomap, riounmap, riowrite (rsocket(7)).
 *
 * riomap(PROT_WRITE) registers a buffer for remote writes and announces it to the peer with an
 * IOMAP control message (offset, address, rkey, length), in the stream: the peer knows the
 * mapping once it has processed what was sent before the next data. riowrite is then an RDMA
 * WRITE (no immediate) into it: it consumes no credit and the receiver is not told, but it is
 * ordered with the stream like any other transfer. riounmap withdraws a mapping (an IOMAP of
 * length 0). Each side accepts as many mappings as its RDMA_IOMAPSIZE (exchanged when the
 * connection is made); riomap fails with ENOMEM beyond the peer's.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cm/rsocket/rs.h"

#define RS_CTRL_WAIT_MS 10000

/* Sends a control message that needs a credit, waiting for one (bounded). */
static int send_ctrl_wait(struct rsock *rs, const struct rs_ctrl *c)
{
	struct rs_stream *st = &rs->st;
	uint64_t deadline = rs_now_us() + RS_CTRL_WAIT_MS * 1000ull;

	for (;;) {
		if (rs->state == RS_ACCEPTING || rs->state == RS_CONNECTING) {
			int err = rs_wait_connected(rs, false);

			if (err)
				return err;
		}
		if (rs->state != RS_CONNECTED || st->qp_err)
			return -ENOTCONN;
		if ((uint32_t)(st->s_msgs - st->s_msgs_acked) < st->p_credits &&
		    st->wr_next - st->wr_done + 1 < st->sq_depth)
			return rs_post_ctrl(rs, c, false);
		if (rs_progress(rs))
			continue;
		if (rs_now_us() >= deadline)
			return -ETIMEDOUT;
		rs_wait(rs, RS_CTRL_WAIT_MS);
	}
}

RS_EXPORT off_t riomap(int fd, void *buf, size_t len, int prot, int flags, off_t offset)
{
	struct rsock *rs = rs_get(fd);
	struct rs_lmap *m = NULL;
	bool remote = prot & PROT_WRITE;
	int ret = 0;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	if (rs->type != SOCK_STREAM || !rs->pd || !buf || !len || (prot & ~PROT_WRITE)) {
		ret = -EINVAL;
		goto out;
	}
	if (remote && rs->st.nremote >= rs->st.p_iomap_size) {
		ret = -ENOMEM;	/* the peer takes no more (RDMA_IOMAPSIZE) */
		goto out;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		goto out;
	}
	m->mr = ibv_reg_mr(rs->pd, buf, len,
			   IBV_ACCESS_LOCAL_WRITE | (remote ? IBV_ACCESS_REMOTE_WRITE : 0));
	if (!m->mr) {
		ret = errno ? -errno : -ENOMEM;
		goto out;
	}
	m->buf = buf;
	m->len = len;
	m->offset = offset == -1 ? (uint64_t)(uintptr_t)buf : (uint64_t)offset;
	m->remote = remote;
	if (remote) {
		struct rs_ctrl c = { .type = RS_CTRL_IOMAP, .rkey = m->mr->rkey, .offset = m->offset,
				     .addr = (uintptr_t)buf, .len = len };

		ret = send_ctrl_wait(rs, &c);
		if (ret)
			goto out;
		rs->st.nremote++;
	}
	m->next = rs->st.lmaps;
	rs->st.lmaps = m;
	offset = (off_t)m->offset;
	m = NULL;
out:
	if (m) {
		if (m->mr)
			ibv_dereg_mr(m->mr);
		free(m);
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	(void)flags;
	return ret ? (off_t)rs_err(ret) : offset;
}

RS_EXPORT int riounmap(int fd, void *buf, size_t len)
{
	struct rsock *rs = rs_get(fd);
	struct rs_lmap **p, *m = NULL;
	int ret = 0;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	for (p = &rs->st.lmaps; *p; p = &(*p)->next) {
		if ((*p)->buf == buf && (*p)->len == len) {
			m = *p;
			*p = m->next;
			break;
		}
	}
	if (!m) {
		ret = -EINVAL;
	} else {
		if (m->remote) {
			struct rs_ctrl c = { .type = RS_CTRL_IOMAP, .offset = m->offset };

			rs->st.nremote--;
			if (rs->state == RS_CONNECTED)
				send_ctrl_wait(rs, &c);	/* best effort: the mapping goes anyway */
		}
		ibv_dereg_mr(m->mr);
		free(m);
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}

static const struct rs_pmap *find_pmap(const struct rsock *rs, uint64_t offset)
{
	for (int i = 0; i < rs->iomap_size; i++) {
		const struct rs_pmap *m = &rs->st.pmaps[i];

		if (m->used && offset >= m->offset && offset - m->offset < m->len)
			return m;
	}
	return NULL;
}

RS_EXPORT size_t riowrite(int fd, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsock *rs = rs_get(fd);
	struct iovec iov = { (void *)buf, count };
	size_t done = 0;
	int err = 0;

	if (!rs)
		return (size_t)-1;
	pthread_mutex_lock(&rs->lock);
	bool nb = rs_nonblock(rs, flags);
	int tmo = rs_timeo_ms(&rs->sndtimeo);

	if (rs->type != SOCK_STREAM)
		err = -EINVAL;
	else if (rs->shut_wr)
		err = -EPIPE;
	else if (rs->state != RS_CONNECTED)
		err = rs_wait_connected(rs, nb);
	while (!err && done < count) {
		uint64_t off = (uint64_t)offset + done;
		const struct rs_pmap *m = find_pmap(rs, off);
		uint32_t n;

		if (!m) {
			/* Nothing the peer announced covers it (yet): the application syncs. */
			err = -EINVAL;
			break;
		}
		if (rs->st.qp_err || rs->state != RS_CONNECTED) {
			err = -ECONNRESET;	/* as rdma-core's riowrite */
			break;
		}
		n = rs_send_room(rs, count - done < m->len - (off - m->offset) ?
					     count - done : m->len - (off - m->offset), false);
		if (!n) {
			if (rs_progress(rs))
				continue;
			if (nb) {
				rs_yield();
				err = -EAGAIN;
				break;
			}
			if (rs_wait(rs, tmo) == -ETIMEDOUT) {
				err = -EAGAIN;
				break;
			}
			continue;
		}
		err = rs_post_write(rs, &iov, 1, done, n, m->addr + (off - m->offset), m->rkey, false);
		if (!err)
			done += n;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	if (done)
		return done;
	return (size_t)rs_err(err);
}
