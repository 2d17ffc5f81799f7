/* SPDX-License-Identifier: MIT */
/*
 * Completion queues, completion channels and asynchronous events.
 *
 * Channel and async event "fds" are eventfds used as level flags: non-zero exactly while the
 * FIFO next to them holds an event (set on empty -> non-empty, cleared on non-empty -> empty,
 * both under the FIFO's lock), so poll()/epoll see them readable exactly while an event waits.
 * A blocking get sleeps like the kernel's uverbs files do (a channel's also on the NIC's
 * socket: see "completion channel" below), and O_NONBLOCK set by the application is honoured. Destroying an object withdraws its undelivered events; a count per
 * event would then go stale (readable, yet a read that blocks forever).
 *
 * A full CQ is an error of the CQ (IBA 11.4.2.1: CQ overrun): the completion is dropped and
 * counted, IBV_EVENT_CQ_ERR is raised once, and what is already in the CQ stays intact.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "core/fd.h"
#include "core/log.h"
#include "core/param.h"
#include "core/sig.h"

/* ---- FIFO helpers -------------------------------------------------------------------------- */
/* FIFOs are rings indexed by free-running counters modulo a power-of-two capacity. Growing
 * copies the live entries to the start of a twice larger ring; the caller then rebases its
 * counters (head -= tail; tail = 0). */
static int fifo_grow(void **buf, uint32_t *cap, uint32_t head, uint32_t tail, size_t elem)
{
	uint32_t n = *cap ? *cap * 2 : 16;
	uint8_t *nb = malloc(n * elem);

	if (!nb)
		return -ENOMEM;
	for (uint32_t i = tail; i != head; i++)
		memcpy(nb + (size_t)(i - tail) * elem,
		       (uint8_t *)*buf + (size_t)(i % *cap) * elem, elem);
	free(*buf);
	*buf = nb;
	*cap = n;
	return 0;
}

/* Raw system calls, not libc's write() and read(): those are cancellation points, and a
 * completion made by an application's receive (under the NIC's receive lock, engine/nic.c
 * sr_nic_poll_at) sets its channel's flag. */
static void flag_set(int fd)
{
	uint64_t one = 1;

	(void)syscall(SYS_write, fd, &one, sizeof(one));
}

static void flag_clear(int fd)
{
	uint64_t v;

	(void)syscall(SYS_read, fd, &v, sizeof(v));	/* only called when set: never blocks */
}

/* Nothing queued: -EAGAIN on a non-blocking fd, else wait until something may be. A signal
 * ends the wait with -EINTR, as rdma-core's read() of the fd does. */
static int flag_wait(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (fcntl(fd, F_GETFL) & O_NONBLOCK)
		return -EAGAIN;
	if (poll(&p, 1, -1) < 0)
		return -errno;
	return 0;
}

/* ---- completion channel -------------------------------------------------------------------- */
/*
 * A consumer asleep in ibv_get_cq_event is woken by the datagram itself (param chan_rx).
 * Without it, it was woken in two hops: the datagram woke the progress thread, which received
 * it, pushed the event and wrote the channel's flag, which woke the consumer (a thread
 * hand-off per message, on 2 cores about half of an event-driven ping-pong's round trip).
 *
 * A blocking ibv_get_cq_event that finds nothing sleeps in epoll_pwait on an internal epoll
 * (wfd) holding the channel's flag and the NIC's socket, the socket registered EPOLLEXCLUSIVE,
 * as the progress thread's is while any channel does this (nic->chan_waits; engine/nic.c). The
 * kernel wakes one exclusive waiter per datagram, in registration order, and counts an epoll as
 * woken only if a thread sleeps in epoll_wait on it: a consumer asleep here takes the datagram
 * alone and receives it through the path a polling application uses (the receive lock waited
 * for: its holder may be receiving this channel's event), then looks at its queue again. When
 * no consumer sleeps, the thread is woken as before, so a datagram is never left waiting
 * because a consumer stopped waiting; the thread re-registers its socket at each re-arm
 * (EPOLL_CTL_ADD puts it behind every channel). A datagram for another channel's CQ is
 * received all the same and makes that channel's event (one wake-up, as the thread's was).
 * Timers and deferred ACKs stay with the thread (a deferral kicks it, as a polling
 * application's does).
 *
 * The channel's fd (the flag, an eventfd) is what it was: poll() on it, a non-blocking get and
 * an fd nested in the application's epoll see events only. Making it readable for datagrams
 * too was tried and not kept (docs/architecture.md, "A consumer woken by the datagram"): every
 * datagram of the NIC then woke every poller of every such fd (librdmacm's own CM thread
 * too) as well as the thread, and RTRS, which polls its channels so, got slower.
 */
static struct sr_nic *chan_nic(struct sr_channel *ch)
{
	struct sr_nic *nic = sr_ctx(ch->ch.context)->nic;

	/* A child of fork abandons its parent's NICs (fd -1). */
	if (!sr_params()->chan_rx || !nic || nic->fd < 0 || !nic->engine || !nic->engine->chan_rx)
		return NULL;
	return nic;
}

/* The internal epoll of blocking waits (0), made at the first one. */
static int chan_wait_fd(struct sr_channel *ch, struct sr_nic *nic)
{
	struct epoll_event ev = { .events = EPOLLIN };

	if (ch->wfd < 0) {
		int fd = sr_fd_high(epoll_create1(EPOLL_CLOEXEC));

		if (fd < 0)
			return -errno;
		ev.data.fd = ch->ch.fd;
		if (epoll_ctl(fd, EPOLL_CTL_ADD, ch->ch.fd, &ev)) {
			int err = -errno;

			close(fd);
			return err;
		}
		ch->wfd = fd;
	}
	if (ch->wsock != nic->fd) {
		ev.events = EPOLLIN | EPOLLEXCLUSIVE;
		ev.data.fd = nic->fd;
		if (epoll_ctl(ch->wfd, EPOLL_CTL_ADD, nic->fd, &ev))
			return -errno;
		ch->wsock = nic->fd;
		/* The thread's registration becomes exclusive at its next re-arm; kicked, it
		 * re-arms now if it sleeps with the socket armed the one-shot way. */
		if (atomic_fetch_add(&nic->chan_waits, 1) == 0)
			sr_nic_kick(nic);
	}
	return 0;
}

int sr_channel_create(struct sr_ctx *ctx, struct sr_channel **out)
{
	struct sr_channel *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return -ENOMEM;
	ch->ch.fd = eventfd(0, EFD_CLOEXEC);
	if (ch->ch.fd < 0) {
		int err = -errno;

		free(ch);
		return err;
	}
	ch->wfd = ch->wsock = -1;
	ch->ch.context = &ctx->vctx.context;
	ch->ch.refcnt = 0;
	pthread_mutex_init(&ch->lock, NULL);
	*out = ch;
	return 0;
}

/* The channel's end: at its destroy, or, destroyed while threads slept in it, by the last of them. */
static void channel_free(struct sr_channel *ch)
{
	if (ch->wsock >= 0) {
		struct sr_nic *nic = sr_ctx(ch->ch.context)->nic;

		if (nic)
			atomic_fetch_sub(&nic->chan_waits, 1);
	}
	if (ch->wfd >= 0)
		close(ch->wfd);
	close(ch->ch.fd);
	pthread_mutex_destroy(&ch->lock);
	free(ch->q);
	free(ch);
}

/*
 * A thread may still sleep in ibv_get_cq_event (a CQ-less channel: refcnt 0): the channel is
 * then only marked and its flag set, which wakes the sleepers; they return EBADF (their fd was
 * closed under them) and the last one frees it. (rdma-core's sleeper would sleep on forever.)
 */
int sr_channel_destroy(struct sr_channel *ch)
{
	pthread_mutex_lock(&ch->lock);
	if (ch->ch.refcnt) {
		pthread_mutex_unlock(&ch->lock);
		return -EBUSY;
	}
	if (ch->waiters) {
		ch->dead = true;
		flag_set(ch->ch.fd);
		pthread_mutex_unlock(&ch->lock);
		return 0;
	}
	pthread_mutex_unlock(&ch->lock);
	channel_free(ch);
	return 0;
}

static void channel_push(struct sr_channel *ch, struct sr_cq *cq)
{
	pthread_mutex_lock(&ch->lock);
	if (ch->head - ch->tail == ch->cap) {
		if (fifo_grow((void **)&ch->q, &ch->cap, ch->head, ch->tail, sizeof(*ch->q))) {
			pthread_mutex_unlock(&ch->lock);
			sr_err("completion channel: out of memory, event lost");
			return;
		}
		ch->head -= ch->tail;	/* the grown ring starts at 0 */
		ch->tail = 0;
	}
	ch->q[ch->head % ch->cap] = cq;
	if (ch->head++ == ch->tail)
		flag_set(ch->ch.fd);
	pthread_mutex_unlock(&ch->lock);
}

static void channel_purge(struct sr_channel *ch, struct sr_cq *cq)
{
	pthread_mutex_lock(&ch->lock);
	uint32_t w = ch->tail;
	bool had = ch->head != ch->tail;

	for (uint32_t r = ch->tail; r != ch->head; r++) {
		struct sr_cq *c = ch->q[r % ch->cap];

		if (c != cq)
			ch->q[w++ % ch->cap] = c;
	}
	ch->head = w;
	if (had && ch->head == ch->tail)
		flag_clear(ch->ch.fd);
	pthread_mutex_unlock(&ch->lock);
}

/* Whether a get that finds nothing will wait on the socket itself (the progress thread need
 * not be kicked to receive for it). */
bool sr_channel_watches_rx(struct sr_channel *ch)
{
	return chan_nic(ch) && !(fcntl(ch->ch.fd, F_GETFL) & O_NONBLOCK);
}

/* A sleeper leaves its wait (returned, or cancelled in it): whether the channel was destroyed
 * meanwhile (then not to be touched again: the last sleeper has freed it). */
static bool chan_leave(struct sr_channel *ch)
{
	bool dead, last;

	pthread_mutex_lock(&ch->lock);
	dead = ch->dead;
	last = --ch->waiters == 0;
	pthread_mutex_unlock(&ch->lock);
	if (dead && last)
		channel_free(ch);
	return dead;
}

static void chan_leave_cancelled(void *ch)
{
	chan_leave(ch);
}

/* Sleeps (on wfd, or on the flag alone), the only place where it may be cancelled, with the
 * caller's signal mask `open`: the events, or -1 with errno. */
static int chan_sleep(struct sr_channel *ch, bool on_wfd, struct epoll_event *ev,
		      const sigset_t *open, int cstate)
{
	struct pollfd p = { .fd = ch->ch.fd, .events = POLLIN };
	int n, err;

	pthread_setcancelstate(cstate, NULL);
	pthread_cleanup_push(chan_leave_cancelled, ch);
	if (on_wfd)
		n = epoll_pwait(ch->wfd, ev, 2, -1, open);
	else
		n = ppoll(&p, 1, NULL, open);
	err = errno;
	pthread_cleanup_pop(0);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	errno = err;
	return n;
}

/*
 * ibv_get_cq_event: 0 with *cq set, or -errno (EAGAIN on a non-blocking empty channel).
 *
 * Its wait is what rdma-core's read() of the channel fd is, a cancellation point ended by a
 * signal with EINTR (rping cancels its CQ thread there; qperf ends a test with SIGALRM), but
 * the sleeper also works: it receives the NIC's datagrams, with the receive lock and other
 * channels' locks held. So cancellation is enabled only while it sleeps (a thread cancelled
 * while receiving would die holding them and the NIC would never receive again: a cancel
 * that comes then is acted on when it sleeps again), and signals are blocked from its first
 * wait to its return, each wait opening them atomically (epoll_pwait/ppoll, the pselect
 * pattern): a signal that comes while it receives stays pending and ends its next wait with
 * EINTR, where a handler run between the receive and the wait would let it sleep on. The
 * synchronous signals of a fault are never blocked.
 */
int sr_channel_get(struct sr_channel *ch, struct sr_cq **out)
{
	sigset_t all, old;
	bool masked = false;
	int cstate, ret;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cstate);
	for (;;) {
		struct sr_cq *cq = NULL;
		struct epoll_event ev[2];
		struct sr_nic *nic;
		bool rx = false;
		int n, err;

		/* The delivery is counted before the channel's lock is let go: sr_cq_destroy
		 * purges under that lock and then waits for the acks of what was counted, so a
		 * CQ taken off the queue but not yet counted was freed under this thread. */
		pthread_mutex_lock(&ch->lock);
		if (ch->tail != ch->head) {
			cq = ch->q[ch->tail++ % ch->cap];
			if (ch->tail == ch->head)
				flag_clear(ch->ch.fd);
			pthread_mutex_lock(&cq->ibcq.mutex);
			cq->comp_events_delivered++;
			pthread_mutex_unlock(&cq->ibcq.mutex);
		}
		pthread_mutex_unlock(&ch->lock);
		if (cq) {
			*out = cq;
			ret = 0;
			break;
		}
		/* Nothing queued: -EAGAIN on a non-blocking fd, else sleep until something may
		 * be, on wfd when the sleeper receives itself, else on the flag alone. */
		if (fcntl(ch->ch.fd, F_GETFL) & O_NONBLOCK) {
			ret = -EAGAIN;
			break;
		}
		nic = chan_nic(ch);
		pthread_mutex_lock(&ch->lock);
		ret = nic ? chan_wait_fd(ch, nic) : -1;
		ch->waiters++;
		pthread_mutex_unlock(&ch->lock);
		if (!masked) {
			sr_sigset_async(&all);
			pthread_sigmask(SIG_BLOCK, &all, &old);
			masked = true;
		}
		n = chan_sleep(ch, !ret, ev, &old, cstate);
		err = errno;
		for (int i = 0; !ret && i < n; i++)
			if (ev[i].data.fd != ch->ch.fd)
				rx = true;
		if (chan_leave(ch)) {
			ret = -EBADF;
			break;
		}
		if (n < 0) {
			ret = -err;
			break;
		}
		if (rx)
			nic->engine->chan_rx(nic, true);
	}
	if (masked)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_setcancelstate(cstate, NULL);
	return ret;
}

/* ---- CQ --------------------------------------------------------------------------------------- */
int sr_cq_create(struct sr_ctx *ctx, int cqe, struct sr_channel *ch, struct sr_cq **out)
{
	struct sr_cq *cq;
	uint32_t n = 2;

	if (cqe < 1 || cqe > 4194304)
		return -EINVAL;
	while (n < (uint32_t)cqe + 1)
		n <<= 1;
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	cq->ring = calloc(n, sizeof(*cq->ring));
	if (!cq->ring) {
		free(cq);
		return -ENOMEM;
	}
	cq->ctx = ctx;
	cq->mask = n - 1;
	cq->capacity = (uint32_t)cqe;
	cq->chan = ch;
	if (ch)
		__atomic_fetch_add(&ch->ch.refcnt, 1, __ATOMIC_RELAXED);
	pthread_mutex_init(&cq->lock, NULL);
	pthread_mutex_init(&cq->ibcq.mutex, NULL);
	pthread_cond_init(&cq->ibcq.cond, NULL);
	cq->ibcq.context = &ctx->vctx.context;
	cq->ibcq.channel = ch ? &ch->ch : NULL;
	cq->ibcq.cqe = cqe;
	*out = cq;
	return 0;
}

int sr_cq_destroy(struct sr_cq *cq)
{
	if (atomic_load(&cq->users))
		return -EBUSY;
	if (cq->chan)
		channel_purge(cq->chan, cq);
	sr_async_event_purge(cq->ctx, cq);
	/* As rdma-core: wait until every event the application received has been acked. */
	pthread_mutex_lock(&cq->ibcq.mutex);
	while (cq->ibcq.comp_events_completed != cq->comp_events_delivered ||
	       cq->ibcq.async_events_completed != cq->async_events_delivered)
		pthread_cond_wait(&cq->ibcq.cond, &cq->ibcq.mutex);
	pthread_mutex_unlock(&cq->ibcq.mutex);
	if (cq->chan)
		__atomic_fetch_sub(&cq->chan->ch.refcnt, 1, __ATOMIC_RELAXED);
	if (cq->in_backlog)
		atomic_fetch_sub(&cq->ctx->nic->cq_backlog, 1);
	if (cq->armed && cq->chan)
		atomic_fetch_sub(&cq->ctx->nic->cq_notify, 1);
	free(cq->ring);
	free(cq);
	return 0;
}

int sr_cq_resize(struct sr_cq *cq, int cqe)
{
	uint32_t n = 2;
	struct ibv_wc *ring;

	if (cqe < 1 || cqe > 4194304)
		return -EINVAL;
	while (n < (uint32_t)cqe + 1)
		n <<= 1;
	ring = calloc(n, sizeof(*ring));
	if (!ring)
		return -ENOMEM;
	pthread_mutex_lock(&cq->lock);
	uint32_t used = cq->head - cq->tail;

	if (used > (uint32_t)cqe) {
		pthread_mutex_unlock(&cq->lock);
		free(ring);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < used; i++)
		ring[i] = cq->ring[(cq->tail + i) & cq->mask];
	free(cq->ring);
	cq->ring = ring;
	cq->mask = n - 1;
	cq->tail = 0;
	cq->head = used;
	cq->capacity = (uint32_t)cqe;
	cq->ibcq.cqe = cqe;
	pthread_mutex_unlock(&cq->lock);
	return 0;
}

void sr_cq_post(struct sr_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	bool notify = false, overflow = false;

	pthread_mutex_lock(&cq->lock);
	if (cq->overflowed || cq->head - cq->tail >= cq->capacity) {
		overflow = !cq->overflowed;
		cq->overflowed = true;
		pthread_mutex_unlock(&cq->lock);
		sr_stat_inc(&cq->ctx->nic->stats, SR_STAT_cq_overflow);
		if (overflow) {
			sr_warn("cq %p: overrun (capacity %u): completions are being lost",
				(void *)cq, cq->capacity);
			sr_async_event(cq->ctx, IBV_EVENT_CQ_ERR, cq);
		}
		return;
	}
	cq->ring[cq->head & cq->mask] = *wc;
	cq->head++;
	if (cq->armed && (cq->armed == SR_CQ_ARM_ANY || solicited ||
			  wc->status != IBV_WC_SUCCESS)) {
		cq->armed = 0;
		notify = cq->chan != NULL;
		if (notify)
			atomic_fetch_sub(&cq->ctx->nic->cq_notify, 1);
	}
	/* Receive completions pile up in a CQ whose consumer polls (it does not sleep on the
	 * channel) but has not polled it for backlog_idle_us: it is not running, and the
	 * progress thread leaves the rest to it for a moment. A consumer that polled a moment
	 * ago is running and only has a deep queue (RTRS at queue depth 32 has 32 requests in
	 * its CQ whenever its event thread is a moment behind): pausing for it turned its
	 * peer's ACKs into packets held in the socket, and its own retransmission timers into
	 * spurious resends. (Send completions do not count: the thread that makes them from
	 * ACKs also sends the next packets for an application that is not running.) */
	if (!cq->in_backlog && !cq->armed && (wc->opcode & IBV_WC_RECV) &&
	    cq->head - cq->tail >= SR_CQ_BACKLOG) {
		uint64_t last = atomic_load_explicit(&cq->poll_ns, memory_order_relaxed);
		uint64_t idle = (uint64_t)sr_params()->backlog_idle_us * 1000;

		/* However recent its last poll, a consumer with SR_CQ_BACKLOG_DEEP waiting is
		 * behind: a receiver preempted right after a poll would otherwise find every
		 * message of a short run made in one burst (perftest's UC ib_send_bw, 500
		 * SENDs of 4 KiB, reported 13 GB/s). */
		if (!last || !idle || cq->head - cq->tail >= SR_CQ_BACKLOG_DEEP ||
		    sr_now_ns() - last >= idle) {
			cq->in_backlog = true;
			atomic_fetch_add(&cq->ctx->nic->cq_backlog, 1);
		}
	}
	pthread_mutex_unlock(&cq->lock);
	if (notify)
		channel_push(cq->chan, cq);
}

int sr_cq_poll(struct sr_cq *cq, int n, struct ibv_wc *wc)
{
	return sr_cq_poll_at(cq, n, wc, sr_now_ns());
}

/* sr_cq_poll with the clock already read (`now`): an empty poll followed by a drain of the
 * socket (sr_nic_poll_at) reads it once. */
int sr_cq_poll_at(struct sr_cq *cq, int n, struct ibv_wc *wc, uint64_t now)
{
	int got = 0;

	pthread_mutex_lock(&cq->lock);
	/* Written only here, under the lock: no locked add on every poll. */
	atomic_store_explicit(&cq->polls,
			      atomic_load_explicit(&cq->polls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_store_explicit(&cq->poll_ns, now, memory_order_relaxed);
	while (got < n && cq->tail != cq->head) {
		wc[got++] = cq->ring[cq->tail & cq->mask];
		cq->tail++;
	}
	bool was_backlog = cq->in_backlog;

	/* Its consumer is running: no backlog unless SR_CQ_BACKLOG_DEEP are still left
	 * (sr_cq_post looks again if it stops polling). With backlog_idle_us 0, as before:
	 * until fewer than SR_CQ_BACKLOG are left. */
	if (was_backlog && ((sr_params()->backlog_idle_us > 0 &&
			     cq->head - cq->tail < SR_CQ_BACKLOG_DEEP) ||
			    cq->head - cq->tail < SR_CQ_BACKLOG)) {
		cq->in_backlog = false;
		atomic_fetch_sub(&cq->ctx->nic->cq_backlog, 1);
	}
	pthread_mutex_unlock(&cq->lock);
	if (was_backlog) {
		struct sr_nic *nic = cq->ctx->nic;

		/* The consumer of a backlog is back: the progress thread may pause for it again,
		 * and need not wait any longer if it does now. */
		if (atomic_load_explicit(&nic->backlog_off, memory_order_relaxed))
			atomic_store(&nic->backlog_off, false);
		if (atomic_load_explicit(&nic->rx_paused, memory_order_relaxed))
			sr_nic_kick(nic);
	}
	return got;
}

void sr_cq_purge_qp(struct sr_cq *cq, uint32_t qpn, bool recv)
{
	uint32_t w, r;

	pthread_mutex_lock(&cq->lock);
	for (w = r = cq->tail; r != cq->head; r++) {
		const struct ibv_wc *wc = &cq->ring[r & cq->mask];

		if (wc->qp_num == qpn && (recv || !(wc->opcode & IBV_WC_RECV)))
			continue;
		if (w != r)
			cq->ring[w & cq->mask] = cq->ring[r & cq->mask];
		w++;
	}
	cq->head = w;
	if (cq->in_backlog && cq->head - cq->tail < SR_CQ_BACKLOG) {
		cq->in_backlog = false;
		atomic_fetch_sub(&cq->ctx->nic->cq_backlog, 1);
	}
	pthread_mutex_unlock(&cq->lock);
}

int sr_cq_count(struct sr_cq *cq)
{
	int n;

	pthread_mutex_lock(&cq->lock);
	n = (int)(cq->head - cq->tail);
	pthread_mutex_unlock(&cq->lock);
	return n;
}

bool sr_cq_would_notify(struct sr_cq *cq, bool solicited)
{
	bool r;

	pthread_mutex_lock(&cq->lock);
	r = cq->chan && (cq->armed == SR_CQ_ARM_ANY || (cq->armed && solicited));
	pthread_mutex_unlock(&cq->lock);
	return r;
}

int sr_cq_arm(struct sr_cq *cq, int solicited_only)
{
	struct sr_nic *nic = cq->ctx->nic;
	bool kick = false;

	pthread_mutex_lock(&cq->lock);
	/* Its consumer may sleep on the channel now, where softrdma cannot see it: the progress
	 * thread does not watch (rx_watch_us) while any CQ is armed so, unless applications
	 * went on polling for rx_watch_us after the arm (nic_thread), and one watching now is
	 * kicked, to arm the socket (after the unlock: the thread's completions take this lock). */
	if (cq->chan) {
		if (!cq->armed)
			atomic_fetch_add(&nic->cq_notify, 1);
		atomic_store(&nic->cq_arm_ns, sr_now_ns());
		kick = atomic_load(&nic->rx_watching);
	}
	/* "Next" wins over "solicited" when both are requested (IBA 11.4.2.2). */
	if (!solicited_only)
		cq->armed = SR_CQ_ARM_ANY;
	else if (cq->armed != SR_CQ_ARM_ANY)
		cq->armed = SR_CQ_ARM_SOLICITED;
	if (cq->in_backlog) {
		/* Its consumer is going to sleep on the channel: the thread must not wait for it. */
		cq->in_backlog = false;
		atomic_fetch_sub(&nic->cq_backlog, 1);
	}
	pthread_mutex_unlock(&cq->lock);
	if (kick)
		sr_nic_kick(nic);
	return 0;
}

/* ---- asynchronous events ------------------------------------------------------------------- */
void sr_async_event(struct sr_ctx *ctx, enum ibv_event_type type, void *element)
{
	struct sr_async_ev *e;

	pthread_mutex_lock(&ctx->ev_lock);
	if (ctx->ev_head - ctx->ev_tail == ctx->ev_cap) {
		if (fifo_grow((void **)&ctx->evq, &ctx->ev_cap, ctx->ev_head, ctx->ev_tail,
			      sizeof(*ctx->evq))) {
			pthread_mutex_unlock(&ctx->ev_lock);
			sr_err("async event %s lost: out of memory", sr_event_type_str(type));
			return;
		}
		ctx->ev_head -= ctx->ev_tail;	/* the grown ring starts at 0 */
		ctx->ev_tail = 0;
	}
	e = &ctx->evq[ctx->ev_head % ctx->ev_cap];
	memset(e, 0, sizeof(*e));
	e->ev.event_type = type;
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		e->ev.element.cq = element;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		e->ev.element.srq = element;
		break;
	case IBV_EVENT_DEVICE_FATAL:
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		e->ev.element.port_num = 1;
		break;
	default:
		e->ev.element.qp = element;
		break;
	}
	if (ctx->ev_head++ == ctx->ev_tail)
		flag_set(ctx->vctx.context.async_fd);
	pthread_mutex_unlock(&ctx->ev_lock);
	sr_stat_inc(&ctx->nic->stats, SR_STAT_async_events);
}

void sr_async_event_purge(struct sr_ctx *ctx, void *element)
{
	pthread_mutex_lock(&ctx->ev_lock);
	uint32_t w = ctx->ev_tail;
	bool had = ctx->ev_head != ctx->ev_tail;

	for (uint32_t r = ctx->ev_tail; r != ctx->ev_head; r++) {
		struct sr_async_ev e = ctx->evq[r % ctx->ev_cap];

		/* The element union holds a pointer for every object event. */
		if (e.ev.element.qp != element || !element)
			ctx->evq[w++ % ctx->ev_cap] = e;
	}
	ctx->ev_head = w;
	if (had && ctx->ev_head == ctx->ev_tail)
		flag_clear(ctx->vctx.context.async_fd);
	pthread_mutex_unlock(&ctx->ev_lock);
}

bool sr_event_is_qp(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return true;
	default:
		return false;
	}
}

/* Counts an event taken off the queue against its object, so that its destroy (which purges
 * the queue under ev_lock, then waits until every counted event was acked) cannot free it
 * under the taker. Called with ev_lock held. */
static void async_delivered(const struct ibv_async_event *ev)
{
	if (sr_event_is_qp(ev->event_type)) {
		struct sr_qp *qp = sr_qp(ev->element.qp);

		pthread_mutex_lock(&qp->qpx.qp_base.mutex);
		qp->async_events_delivered++;
		pthread_mutex_unlock(&qp->qpx.qp_base.mutex);
	} else if (ev->event_type == IBV_EVENT_CQ_ERR) {
		struct sr_cq *cq = sr_cq(ev->element.cq);

		pthread_mutex_lock(&cq->ibcq.mutex);
		cq->async_events_delivered++;
		pthread_mutex_unlock(&cq->ibcq.mutex);
	} else if (ev->event_type == IBV_EVENT_SRQ_ERR ||
		   ev->event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
		struct sr_srq *srq = sr_srq(ev->element.srq);

		pthread_mutex_lock(&srq->ibsrq.mutex);
		srq->async_events_delivered++;
		pthread_mutex_unlock(&srq->ibsrq.mutex);
	}
}

int sr_async_event_get(struct sr_ctx *ctx, struct ibv_async_event *out)
{
	for (;;) {
		bool got = false;
		int ret;

		pthread_mutex_lock(&ctx->ev_lock);
		if (ctx->ev_tail != ctx->ev_head) {
			*out = ctx->evq[ctx->ev_tail++ % ctx->ev_cap].ev;
			if (ctx->ev_tail == ctx->ev_head)
				flag_clear(ctx->vctx.context.async_fd);
			async_delivered(out);	/* under ev_lock, as sr_channel_get's count */
			got = true;
		}
		pthread_mutex_unlock(&ctx->ev_lock);
		if (got)
			return 0;
		ret = flag_wait(ctx->vctx.context.async_fd);
		if (ret)
			return ret;
	}
}

/* ibv_event_type_str's text (src/verbs/util.c returns it): rdma-core 44's, word for word, and
 * every enumerator listed with no default (-Wswitch flags a new one without text). */
const char *sr_event_type_str(enum ibv_event_type event)
{
	switch (event) {
	case IBV_EVENT_CQ_ERR:		return "CQ error";
	case IBV_EVENT_QP_FATAL:	return "local work queue catastrophic error";
	case IBV_EVENT_QP_REQ_ERR:	return "invalid request local work queue error";
	case IBV_EVENT_QP_ACCESS_ERR:	return "local access violation work queue error";
	case IBV_EVENT_COMM_EST:	return "communication established";
	case IBV_EVENT_SQ_DRAINED:	return "send queue drained";
	case IBV_EVENT_PATH_MIG:	return "path migrated";
	case IBV_EVENT_PATH_MIG_ERR:	return "path migration request error";
	case IBV_EVENT_DEVICE_FATAL:	return "local catastrophic error";
	case IBV_EVENT_PORT_ACTIVE:	return "port active";
	case IBV_EVENT_PORT_ERR:	return "port error";
	case IBV_EVENT_LID_CHANGE:	return "LID change";
	case IBV_EVENT_PKEY_CHANGE:	return "P_Key change";
	case IBV_EVENT_SM_CHANGE:	return "SM change";
	case IBV_EVENT_SRQ_ERR:		return "SRQ catastrophic error";
	case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ limit reached";
	case IBV_EVENT_QP_LAST_WQE_REACHED: return "last WQE reached";
	case IBV_EVENT_CLIENT_REREGISTER: return "client reregistration";
	case IBV_EVENT_GID_CHANGE:	return "GID table change";
	case IBV_EVENT_WQ_FATAL:	return "WQ fatal";
	}
	return "unknown";
}
