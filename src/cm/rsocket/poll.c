/* SPDX-License-Identifier: MIT */
/*
 * Waiting: progress on one rsocket, the blocking wait of its calls, rpoll and rselect.
 *
 * Everything an rsocket waits for shows on two fds the library owns: its completion channel
 * (completions of its CQ, once armed) and its rdma_cm event channel (its number). A wait first
 * polls the CQ for a short time (rs_poll_us, SOFTRDMA_RSOCKET_POLL_US, default 10 us: a reply
 * that is already on its way is taken without sleeping), then arms the CQ, looks once more,
 * and sleeps in poll(2) on those fds -- and, for rpoll, on the application's own fds -- never
 * longer than RS_WAKE_MS at a time. Nothing ever spins without a bound.
 *
 * poll(2) itself is called through the raw system call: librspreload interposes poll().
 */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include "cm/rsocket/rs.h"

static int sys_poll(struct pollfd *p, nfds_t n, int ms)
{
	struct timespec ts, *tp = NULL;

	if (ms >= 0) {
		ts.tv_sec = ms / 1000;
		ts.tv_nsec = (long)(ms % 1000) * 1000000;
		tp = &ts;
	}
	return (int)syscall(SYS_ppoll, p, n, tp, NULL, 0);
}

/*
 * An application that spins on non-blocking calls (rstream's default) keeps a core busy; on a
 * machine with as many spinning processes as cores, the soft NIC's progress thread then waits
 * for a time slice -- possibly while it holds the NIC's receive lock, which stalls the spinner
 * too (milliseconds: retransmission timers fire). Yielding each time a non-blocking call would
 * block lets that thread run at once.
 */
void rs_yield(void)
{
	sched_yield();
}

int rs_timeo_ms(const struct timeval *tv)
{
	if (!tv->tv_sec && !tv->tv_usec)
		return -1;
	if (tv->tv_sec > INT_MAX / 1000 - 1)
		return INT_MAX;
	return (int)(tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000);
}

/* Takes the completion events waiting on the channel (the CQ is then polled by the caller).
 * On an empty channel this also tells the soft NIC the application is about to sleep, so its
 * progress thread receives at once. */
static int drain_comp_events(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;
	int n = 0;

	if (!rs->cch)
		return 0;
	while (!ibv_get_cq_event(rs->cch, &cq, &ctx))
		n++;
	if (n)
		ibv_ack_cq_events(rs->cq, (unsigned)n);
	return n;
}

static int arm(struct rsock *rs)
{
	if (rs->cq)
		ibv_req_notify_cq(rs->cq, 0);
	return rs_progress(rs) + drain_comp_events(rs);
}

static int wait_fds(struct rsock *rs, struct pollfd *p)
{
	int n = 0;

	if (rs->cch)
		p[n++] = (struct pollfd){ .fd = rs->cch->fd, .events = POLLIN };
	p[n++] = (struct pollfd){ .fd = rs->ch->fd, .events = POLLIN };
	return n;
}

static void woken(struct rsock *rs, const struct pollfd *p, int n)
{
	for (int i = 0; i < n; i++) {
		if (!p[i].revents)
			continue;
		if (rs->cch && p[i].fd == rs->cch->fd)
			drain_comp_events(rs);
		else
			rs->cm_pending = true;
	}
}

int rs_wait(struct rsock *rs, int timeout_ms)
{
	uint64_t start = rs_now_us(), now;
	struct pollfd p[2];
	int n, t;

	while (rs_now_us() - start < rs_poll_us) {
		pthread_mutex_unlock(&rs->lock);
		pthread_mutex_lock(&rs->lock);
		if (rs_progress(rs))
			return 0;
	}
	if (arm(rs))
		return 0;
	now = rs_now_us();
	if (timeout_ms >= 0 && now - start >= (uint64_t)timeout_ms * 1000)
		return -ETIMEDOUT;
	t = timeout_ms < 0 ? RS_WAKE_MS : timeout_ms - (int)((now - start) / 1000);
	if (t > RS_WAKE_MS)
		t = RS_WAKE_MS;
	n = wait_fds(rs, p);
	pthread_mutex_unlock(&rs->lock);
	sys_poll(p, (nfds_t)n, t);
	pthread_mutex_lock(&rs->lock);
	woken(rs, p, n);
	if (timeout_ms >= 0 && rs_now_us() - start >= (uint64_t)timeout_ms * 1000)
		return -ETIMEDOUT;
	return 0;
}

int rs_wait_connected(struct rsock *rs, bool nb)
{
	for (;;) {
		switch (rs->state) {
		case RS_CONNECTED:
			return 0;
		case RS_FAILED: {
			int err = rs->so_error ? rs->so_error : ECONNREFUSED;

			rs->so_error = 0;
			return -err;
		}
		case RS_DISCONNECTED:
			return -ECONNRESET;
		case RS_RESOLVING:
		case RS_CONNECTING:
		case RS_ACCEPTING:
			break;
		default:
			return -ENOTCONN;
		}
		if (rs_progress(rs))
			continue;
		if (nb) {
			rs_yield();
			return -EAGAIN;
		}
		rs_wait(rs, -1);
	}
}

short rs_revents(struct rsock *rs, short events)
{
	rs_progress(rs);
	return rs->ops->revents(rs, events);
}

/* ---- rpoll ------------------------------------------------------------------------------------ */
struct poll_ctx {
	struct pollfd *fds;
	struct rsock **rs;
	nfds_t nfds;
	struct pollfd *sys;		/* scratch for poll(2) */
	nfds_t nsys;
};

/* One look at everything: the rsockets (after progress) and, when `normal`, the other fds
 * (poll(2) with no wait). Returns how many entries have events. */
static int check(struct poll_ctx *c, bool normal)
{
	nfds_t ns = 0;
	int n = 0;

	for (nfds_t i = 0; i < c->nfds; i++) {
		struct rsock *rs = c->rs[i];

		if (rs) {
			pthread_mutex_lock(&rs->lock);
			c->fds[i].revents = rs_revents(rs, c->fds[i].events);
			pthread_mutex_unlock(&rs->lock);
			n += c->fds[i].revents != 0;
		} else if (normal) {
			c->sys[ns++] = c->fds[i];
		} else {
			c->fds[i].revents = 0;
		}
	}
	if (normal && ns) {
		sys_poll(c->sys, ns, 0);
		ns = 0;
		for (nfds_t i = 0; i < c->nfds; i++) {
			if (c->rs[i])
				continue;
			c->fds[i].revents = c->sys[ns++].revents;
			n += c->fds[i].revents != 0;
		}
	}
	return n;
}

/* Arms every rsocket, then sleeps on every fd involved. Returns -1 (errno) on a poll error. */
static int sleep_once(struct poll_ctx *c, int ms)
{
	nfds_t ns = 0;
	int n = 0, r;

	for (nfds_t i = 0; i < c->nfds; i++) {
		struct rsock *rs = c->rs[i];

		if (!rs) {
			c->sys[ns++] = c->fds[i];
			continue;
		}
		pthread_mutex_lock(&rs->lock);
		n += arm(rs);
		ns += (nfds_t)wait_fds(rs, &c->sys[ns]);
		pthread_mutex_unlock(&rs->lock);
	}
	if (n)
		return 0;	/* something happened while arming: look again */
	r = sys_poll(c->sys, ns, ms);
	if (r < 0)
		return -1;
	ns = 0;
	for (nfds_t i = 0; i < c->nfds; i++) {
		struct rsock *rs = c->rs[i];

		if (!rs) {
			ns++;
			continue;
		}
		int k = rs->cch ? 2 : 1;

		pthread_mutex_lock(&rs->lock);
		woken(rs, &c->sys[ns], k);
		pthread_mutex_unlock(&rs->lock);
		ns += (nfds_t)k;
	}
	return 0;
}

RS_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct poll_ctx c = { .fds = fds, .nfds = nfds };
	uint64_t start = rs_now_us();
	int n = 0, saved = errno, nrs = 0;

	if (nfds && !fds)
		return rs_err(EFAULT);
	c.rs = calloc(nfds ? nfds : 1, sizeof(*c.rs));
	c.sys = calloc(nfds ? 2 * nfds : 1, sizeof(*c.sys));
	if (!c.rs || !c.sys) {
		free(c.rs);
		free(c.sys);
		return rs_err(ENOMEM);
	}
	for (nfds_t i = 0; i < nfds; i++) {
		c.rs[i] = fds[i].fd >= 0 ? rs_get(fds[i].fd) : NULL;
		nrs += c.rs[i] != NULL;
	}
	errno = saved;
	if (!nrs) {
		n = sys_poll(fds, nfds, timeout);
		goto out;
	}
	for (;;) {
		uint64_t spin_end;
		int left;

		n = check(&c, true);
		if (n)
			break;
		if (!timeout) {
			rs_yield();	/* polled in a loop: let the NIC's thread run */
			break;
		}
		/* Poll for rs_poll_us -- or for the whole timeout when that is shorter than a
		 * sleep and a wake-up would take (a 1 ms rpoll is a busy wait anyway). */
		spin_end = rs_now_us() + (timeout > 0 && timeout <= RS_SPIN_MAX_MS
						  ? (uint64_t)timeout * 1000 : rs_poll_us);
		while (!n && rs_now_us() < spin_end) {
			n = check(&c, false);
			if (!n && timeout > 0 && timeout <= RS_SPIN_MAX_MS)
				rs_yield();
		}
		if (n)
			break;
		if (timeout > 0) {
			uint64_t el = (rs_now_us() - start) / 1000;

			if (el >= (uint64_t)timeout)
				break;
			left = timeout - (int)el;
		} else {
			left = RS_WAKE_MS;
		}
		if (left > RS_WAKE_MS)
			left = RS_WAKE_MS;
		if (sleep_once(&c, left) < 0) {
			n = -1;
			break;
		}
	}
out:
	saved = errno;
	for (nfds_t i = 0; i < nfds; i++)
		if (c.rs[i])
			rs_put(c.rs[i]);
	free(c.rs);
	free(c.sys);
	errno = saved;
	return n;
}

/* ---- rselect ------------------------------------------------------------------------------------ */
RS_EXPORT int rselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	struct pollfd *p;
	int n = 0, ret, timeout;

	if (nfds < 0 || nfds > FD_SETSIZE)
		return rs_err(EINVAL);
	p = calloc(nfds ? (size_t)nfds : 1, sizeof(*p));
	if (!p)
		return rs_err(ENOMEM);
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT;
		if (ev || (ex && FD_ISSET(fd, ex))) {
			p[n].fd = fd;
			p[n++].events = ev | (ex && FD_ISSET(fd, ex) ? POLLPRI : 0);
		}
	}
	timeout = tv ? (int)(tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000) : -1;
	ret = rpoll(p, (nfds_t)n, timeout);
	if (ret < 0) {
		free(p);
		return -1;
	}
	if (rd)
		FD_ZERO(rd);
	if (wr)
		FD_ZERO(wr);
	if (ex)
		FD_ZERO(ex);
	ret = 0;
	for (int i = 0; i < n; i++) {
		short r = p[i].revents;

		if (r & POLLNVAL) {
			free(p);
			return rs_err(EBADF);
		}
		if (rd && (r & (POLLIN | POLLHUP | POLLERR)) && (p[i].events & POLLIN)) {
			FD_SET(p[i].fd, rd);
			ret++;
		}
		if (wr && (r & (POLLOUT | POLLERR)) && (p[i].events & POLLOUT)) {
			FD_SET(p[i].fd, wr);
			ret++;
		}
		if (ex && (r & POLLPRI)) {
			FD_SET(p[i].fd, ex);
			ret++;
		}
	}
	free(p);
	return ret;
}
