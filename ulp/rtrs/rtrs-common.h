/* SPDX-License-Identifier: MIT */
/* Internal helpers shared by the RTRS client and server (ulp/rtrs). Public verbs only. */
#ifndef SOFTRDMA_RTRS_COMMON_H
#define SOFTRDMA_RTRS_COMMON_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "rtrs.h"
#include "rtrs-proto.h"

/* head with wr appended at the end of its chain (wr alone when head is NULL). */
static inline struct ibv_send_wr *rtrs_wr_append(struct ibv_send_wr *head, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *t = head;

	if (!head)
		return wr;
	while (t->next)
		t = t->next;
	t->next = wr;
	return head;
}

static inline uint64_t rtrs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Requests and answers ask for a completion only every RTRS_SIGNAL_INTERVAL-th post on a
 * connection (as the kernel's RTRS, signal_interval): nothing is done with a successful one,
 * an error completes whether asked for or not, and one in RTRS_SIGNAL_INTERVAL retires the
 * unsignaled WRs before it on a NIC that frees send queue slots only so. A completion per
 * request was half of what the event threads polled, and filled the CQ the engine reads as
 * an application falling behind (softrdma pauses its receiving for one, docs/rtrs.md). */
#define RTRS_SIGNAL_INTERVAL 16u
static inline unsigned int rtrs_signal(unsigned int *cnt)
{
	return ++*cnt % RTRS_SIGNAL_INTERVAL ? 0 : IBV_SEND_SIGNALED;
}

/* The poll_us default of both sides' options: RTRS_POLL_US_DEFAULT, or $RTRS_POLL_US (-1..1000000). */
int rtrs_poll_us_default(void);

/* Spin for up to ns nanoseconds while cond holds, yielding the CPU. For the event thread, which
 * keeps its lock while it polls: it steps aside for a moment while another thread waits for the
 * lock (cond), so a busy session does not starve its submitters. */
void rtrs_yield_while(volatile int *waiters, uint64_t ns);
/* A polling thread that holds mu steps aside while *waiters > 0: it drops mu and yields until
 * they are served or 100 us have passed, then takes mu again. */
void rtrs_step_aside(pthread_mutex_t *mu, volatile int *waiters);

/* Polling on a shared CPU: a thread that spins while the CPU is contended is preempted
 * mid-spin and the packets it would have taken wait for it (softrdma's progress thread leaves
 * the socket to an application that polls), whereas a sleeping thread is woken at once. So a
 * polling loop measures, over each stretch of polling of at least 2 ms, the share of the
 * time its thread was on a CPU; below a half, it stops polling for RTRS_SPIN_BACKOFF_NS
 * (sleeps on its fds after each pass, as with poll_us 0), then tries again. */
#define RTRS_SPIN_BACKOFF_NS 100000000ull
struct rtrs_spin {
	uint64_t win_wall, win_cpu;	/* start of the current stretch (0: none) */
	uint64_t backoff_until;
	uint64_t backoffs;
};
static inline uint64_t rtrs_thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* While polling, about every millisecond. */
static inline void rtrs_spin_check(struct rtrs_spin *s, uint64_t now)
{
	uint64_t cpu = rtrs_thread_cpu_ns();

	if (!s->win_wall) {
		s->win_wall = now;
		s->win_cpu = cpu;
		return;
	}
	if (now - s->win_wall < 2000000ull)
		return;
	if ((cpu - s->win_cpu) * 2 < now - s->win_wall) {
		s->backoff_until = now + RTRS_SPIN_BACKOFF_NS;
		s->backoffs++;
	}
	s->win_wall = now;
	s->win_cpu = cpu;
}

/*
 * The event loop both sides' threads run (docs/rtrs.md, "Polling, then sleeping"): poll the
 * CQs while completions come and for poll_us after the last one, looking at the fds (CM
 * channel, eventfd, completion channels) every millisecond meanwhile; otherwise arm the CQs
 * and sleep on the fds. The caller holds its lock around every call; rtrs_loop_wait drops it
 * for the poll() only.
 */
struct rtrs_loop {
	int64_t spin_ns;	/* -1: busy-poll, never sleep; 0: sleep after every pass */
	uint64_t busy_until;	/* polling until then (the last completion + spin_ns) */
	uint64_t last_fds;	/* the last look at the fds */
	struct rtrs_spin sp;
};
void rtrs_loop_init(struct rtrs_loop *l, int poll_us);
/* The start of a pass at now: whether it polls (1) or is to arm and sleep (0); *look: whether
 * it looks at the fds (always before a sleep, else once a millisecond). */
int rtrs_loop_begin(struct rtrs_loop *l, uint64_t now, int *look);
/* got completions (or answers) were taken: polling goes on for spin_ns from now. */
void rtrs_loop_busy(struct rtrs_loop *l, int got);
/* poll() on the CM channel's fd, the eventfd and the completion channels for up to timeout ms
 * (0: a look), with mu released and *sleeping set meanwhile (when not NULL, and timeout > 0);
 * then drains the eventfd and the channels' events (acknowledged: nothing is left unacked for
 * a CQ the caller destroys next). Returns whether the CM channel has events to read. */
int rtrs_loop_wait(struct rtrs_loop *l, pthread_mutex_t *mu, int cm_fd, int efd,
		   struct ibv_comp_channel *const *cch, int ncch, int timeout, int *sleeping);

/*
 * Where an event thread sleeps ($RTRS_EVENT_SLEEP, read at open; docs/rtrs.md, "Sleeping in
 * ibv_get_cq_event"): "poll" (0): in poll() on the CM channel, an eventfd and every completion
 * channel (rtrs_loop_wait); "cq" (1, the default): a thread per completion channel sleeps in a
 * blocking ibv_get_cq_event on it, and another thread takes the CM events and the timers. A
 * driver that wakes the consumer of a channel by the packet itself (softrdma's chan_rx) then
 * saves a thread hand-off per request.
 */
int rtrs_event_sleep_cq(void);
/* Sleeps in a blocking ibv_get_cq_event on ch, the thread cancellable only there (the close
 * ends a sleeping thread with pthread_cancel: a cancellation point as rdma-core's read() of the
 * channel is), and acknowledges the event at once: no lock is held, and a CQ destroyed by
 * another thread meanwhile waits for nothing. 0 or an errno (EINTR: a signal). */
int rtrs_cq_wait(struct ibv_comp_channel *ch);
/* Takes and acknowledges the events waiting on ch without sleeping (O_NONBLOCK set around the
 * get: only the caller reads ch). For a thread that poll() found ch readable: the event may be
 * gone since (its CQ destroyed by another thread). 0 (none is fine) or an errno. */
int rtrs_cq_take(struct ibv_comp_channel *ch);

/* A completion channel's own thread (RTRS_EVENT_SLEEP=cq): owner is the client's session or
 * the server's context. */
struct rtrs_chan_thr {
	void *owner;
	struct ibv_comp_channel *ch;
	pthread_t thr;
};
/* A new completion channel of dev. With sleep, a thread start(t) of its own, t its
 * rtrs_chan_thr (*thr), sleeps in it (a blocking channel); without, it is made non-blocking
 * for a poll()ing loop and *thr is NULL. NULL when the channel or the thread cannot be made
 * (nothing is left then). */
struct ibv_comp_channel *rtrs_chan_open(struct ibv_context *dev, int sleep,
					void *(*start)(void *), void *owner,
					struct rtrs_chan_thr **thr);
/* Ends a channel's thread, if *t: cancelled in its sleep (the only place where it may be; one
 * that is running sees its owner's stop at its next pass), joined and freed; *t = NULL. */
void rtrs_chan_thr_stop(struct rtrs_chan_thr **t);

/* "HOST:PORT", "[V6]:PORT", ":PORT", "HOST" -> sockaddr (numeric or resolved). */
int rtrs_parse_addr(const char *s, struct sockaddr_storage *ss, int passive);
void rtrs_addr_str(const struct sockaddr *sa, char *buf, size_t len);

/* Writes lines of the counters to dir/rtrs-<pid>-<kind>-<name> (atomically by rename). */
void rtrs_stats_write(const char *dir, const char *kind, const char *name,
		      const struct rtrs_path_stats *st, int n);

const char *rtrs_state_name(int state);

#endif

/* Test hook (not public API): posts one raw RDMA WRITE with immediate imm of msg[0..len) at
 * offset off of chunk chunk (both taken modulo the real chunks, so the RDMA itself stays in the
 * server's memory) on the first connected path's first IO connection. For rtrs-test's hostile
 * client, which makes the server see malformed requests. 0 or an errno. */
struct rtrs_clt;
int rtrs_clt_test_raw(struct rtrs_clt *clt, uint32_t imm, const void *msg, size_t len,
		      uint32_t chunk, uint32_t off);

/* Test hooks for rtrs-test's always_invalidate check (not public API).
 * rtrs_clt_test_force: the next rtrs_clt_request takes permit id (EBUSY if it is not free)
 * and goes on path index path (the order of rtrs_clt_open's paths).
 * rtrs_clt_test_key: the server's current key of chunk id on path (0, or ENOENT before
 * INFO_RSP); *connected: whether that path is connected.
 * rtrs_clt_test_write_key: one plain RDMA WRITE of msg[0..len) to chunk id + off on path with
 * key, on the connection the chunk's requests use; waits up to timeout_ms for its completion.
 * Returns the completion's ibv_wc_status (0 = written), or a negative errno. */
#include <stddef.h>
int rtrs_clt_test_force(struct rtrs_clt *clt, int path, uint32_t id);
int rtrs_clt_test_key(struct rtrs_clt *clt, int path, uint32_t id, uint32_t *key, int *connected);
int rtrs_clt_test_write_key(struct rtrs_clt *clt, int path, uint32_t id, uint32_t off, uint32_t key,
			    const void *msg, size_t len, int timeout_ms);
