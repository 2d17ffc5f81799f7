/* SPDX-License-Identifier: MIT */
/*
 * Fault injection's delay line (SOFTRDMA_FAULT delay=, jitter=, to=; src/net/fault.h), between
 * two processes on loopback addresses of their own (SOFTRDMA_ADDR), RC SENDs of 20 KiB (several
 * packets each) in a ping-pong, every byte checked on both sides:
 *   1. delay=20000 on both sides, to= the peer: every round trip takes at least 2 x 20 ms, and
 *      packets were held (fault_delayed).
 *   2. delay=3000,jitter=3000 on both sides: the line is a FIFO, so no packet overtakes another
 *      and no responder ever sees a gap (seq_naks_sent 0 on both sides), data exact.
 *   3. A delays to B, B's filter names an address nobody has: B holds no packet (fault_delayed
 *      0 while it sent), A's round trips still take at least 20 ms (one way).
 * Only lower bounds on time: the machine may be loaded. Waiting sleeps (no two processes
 * spinning on a 2-core machine).
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MSG (20u << 10)
#define ITERS 12

struct side {
	const char *addr, *fault;
};

struct scase {
	const char *name;
	struct side a, b;
	uint64_t min_rtt_us;		/* lower bound of every round trip */
	int a_delays, b_delays;		/* 1: packets must be held, 0: none may be, -1: either */
};

struct report {
	int64_t delayed, tx, seq_naks, failures;
};

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One completion, polling then sleeping (not spinning: 2 cores, another process waits too). */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms)
{
	uint64_t end = vu_now_ms() + (uint64_t)timeout_ms;

	for (;;) {
		int r = ibv_poll_cq(cq, 1, wc);

		if (r)
			return r == 1;
		if (vu_now_ms() > end)
			return 0;
		usleep(200);
	}
}

struct conn {
	struct vu_dev d;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct vu_buf sbuf, rbuf;
};

static void conn_up(struct conn *c, int sock)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg cc;
	struct vu_endpoint me = { 0 }, peer;

	REQUIRE(vu_open(&c->d) == 0);
	REQUIRE((c->scq = ibv_create_cq(c->d.ctx, 64, NULL, NULL, 0)));
	REQUIRE((c->rcq = ibv_create_cq(c->d.ctx, 64, NULL, NULL, 0)));
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	REQUIRE((c->qp = vu_qp_create(&c->d, c->scq, c->rcq, &q)));
	REQUIRE(vu_buf_alloc(&c->d, &c->sbuf, MSG, IBV_ACCESS_LOCAL_WRITE) == 0);
	REQUIRE(vu_buf_alloc(&c->d, &c->rbuf, MSG, IBV_ACCESS_LOCAL_WRITE) == 0);
	me.gid = c->d.gid;
	me.qpn = c->qp->qp_num;
	REQUIRE(vu_sock_send(sock, &me, sizeof(me)) == 0);
	REQUIRE(vu_sock_recv(sock, &peer, sizeof(peer)) == 0);
	vu_conn_cfg_default(&cc);
	cc.mtu = IBV_MTU_4096;
	REQUIRE(vu_qp_connect(c->qp, &cc, &peer.gid, peer.qpn) == 0);
	REQUIRE(vu_post_recv(c->qp, 1, c->rbuf.mr, c->rbuf.p, MSG) == 0);
	/* Both have a receive posted before either sends. */
	REQUIRE(vu_sock_send(sock, &me, 1) == 0);
	REQUIRE(vu_sock_recv(sock, &peer, 1) == 0);
}

static void conn_down(struct conn *c)
{
	ibv_destroy_qp(c->qp);
	vu_buf_free(&c->sbuf);
	vu_buf_free(&c->rbuf);
	ibv_destroy_cq(c->scq);
	ibv_destroy_cq(c->rcq);
	vu_close(&c->d);
}

/* Sends message `seed`; false on a failed completion. */
static bool send_msg(struct conn *c, uint32_t seed)
{
	struct ibv_wc wc;

	vu_fill(c->sbuf.p, MSG, seed);
	if (vu_post_send(c->qp, seed, IBV_WR_SEND, c->sbuf.mr, c->sbuf.p, MSG, 0,
			 IBV_SEND_SIGNALED))
		return false;
	if (!wait_wc(c->scq, &wc, 20000) || wc.status != IBV_WC_SUCCESS) {
		SR_FAIL("send %u: %s", seed, vu_wc_str(&wc));
		return false;
	}
	return true;
}

/* Receives message `seed`, checks every byte, reposts; false on failure. */
static bool recv_msg(struct conn *c, uint32_t seed)
{
	struct ibv_wc wc;
	long bad;

	if (!wait_wc(c->rcq, &wc, 20000) || wc.status != IBV_WC_SUCCESS || wc.byte_len != MSG) {
		SR_FAIL("receive %u: %s", seed, wc.status ? vu_wc_str(&wc) : "none or short");
		return false;
	}
	bad = vu_check(c->rbuf.p, MSG, seed);
	if (bad >= 0) {
		SR_FAIL("message %u: byte %ld differs", seed, bad);
		return false;
	}
	return vu_post_recv(c->qp, 1, c->rbuf.mr, c->rbuf.p, MSG) == 0;
}

static void fill_report(struct report *r)
{
	r->delayed = vu_stat("fault_delayed");
	r->tx = vu_stat("tx_packets");
	r->seq_naks = vu_stat("seq_naks_sent");
	r->failures = sr_test_failures;
}

/* B: answers each message with the next one. */
static int side_b(int sock, void *arg)
{
	const struct scase *sc = arg;
	struct conn c;
	struct report r;

	setenv("SOFTRDMA_ADDR", sc->b.addr, 1);
	setenv("SOFTRDMA_FAULT", sc->b.fault, 1);
	conn_up(&c, sock);
	for (uint32_t i = 0; i < ITERS; i++) {
		if (!recv_msg(&c, 2 * i + 1) || !send_msg(&c, 2 * i + 2))
			break;
	}
	fill_report(&r);
	vu_sock_send(sock, &r, sizeof(r));
	vu_sock_recv(sock, &r, 1);	/* A is done with the QP */
	conn_down(&c);
	return sr_test_failures ? 1 : 0;
}

/* A: the case, in a process of its own (its own parameters), B a child of it. */
static int side_a(int sock, void *arg)
{
	const struct scase *sc = arg;
	struct vu_child child;
	struct conn c;
	struct report ra, rb;
	uint64_t min_rtt = UINT64_MAX, sum = 0;
	uint32_t done = 0;

	(void)sock;
	REQUIRE(vu_fork(&child, side_b, (void *)sc, 100) == 0);
	setenv("SOFTRDMA_ADDR", sc->a.addr, 1);
	setenv("SOFTRDMA_FAULT", sc->a.fault, 1);
	conn_up(&c, child.sock);
	for (uint32_t i = 0; i < ITERS; i++) {
		uint64_t t0 = now_us(), rtt;

		if (!send_msg(&c, 2 * i + 1) || !recv_msg(&c, 2 * i + 2))
			break;
		rtt = now_us() - t0;
		sum += rtt;
		if (rtt < min_rtt)
			min_rtt = rtt;
		done++;
	}
	fill_report(&ra);
	REQUIRE(vu_sock_recv(child.sock, &rb, sizeof(rb)) == 0);
	vu_sock_send(child.sock, &rb, 1);
	printf("%s: %u round trips of 2 x %u bytes, min %.1f ms, mean %.1f ms; A held %lld of %lld "
	       "packets sent, B %lld of %lld; seq NAKs sent %lld / %lld\n", sc->name, done, MSG,
	       min_rtt / 1000.0, done ? sum / 1000.0 / done : 0.0, (long long)ra.delayed,
	       (long long)ra.tx, (long long)rb.delayed, (long long)rb.tx, (long long)ra.seq_naks,
	       (long long)rb.seq_naks);
	CHECK_EQ(done, ITERS);
	CHECK_EQ(rb.failures, 0);
	if (done)
		CHECK(min_rtt >= sc->min_rtt_us);
	CHECK(ra.tx > 0 && rb.tx > 0);
	if (sc->a_delays >= 0)
		CHECK(sc->a_delays ? ra.delayed > 0 : ra.delayed == 0);
	if (sc->b_delays >= 0)
		CHECK(sc->b_delays ? rb.delayed > 0 : rb.delayed == 0);
	/* The delay line keeps order: a responder never sees a gap (nothing is lost either). */
	CHECK_EQ(ra.seq_naks, 0);
	CHECK_EQ(rb.seq_naks, 0);
	conn_down(&c);
	CHECK_EQ(vu_child_wait(&child, 30), 0);
	return sr_test_failures ? 1 : 0;
}

int main(void)
{
	static char a[32], b[32], x[32], fa[3][96], fb[3][96];
	unsigned net = (unsigned)getpid();
	struct vu_child child;

	sr_test_timeout(280);
	/* Loopback addresses of this run's own (all of 127/8 is lo's). */
	snprintf(a, sizeof(a), "127.%u.%u.1", 100 + net % 100, (net / 100) % 250 + 1);
	snprintf(b, sizeof(b), "127.%u.%u.2", 100 + net % 100, (net / 100) % 250 + 1);
	snprintf(x, sizeof(x), "127.%u.%u.3", 100 + net % 100, (net / 100) % 250 + 1);
	snprintf(fa[0], sizeof(fa[0]), "delay=20000,to=%s", b);
	snprintf(fb[0], sizeof(fb[0]), "delay=20000,to=%s", a);
	snprintf(fa[1], sizeof(fa[1]), "delay=3000,jitter=3000,seed=5");
	snprintf(fb[1], sizeof(fb[1]), "delay=3000,jitter=3000,seed=6");
	snprintf(fa[2], sizeof(fa[2]), "delay=20000,to=%s", b);
	snprintf(fb[2], sizeof(fb[2]), "delay=20000,to=%s", x);
	const struct scase cases[] = {
		{ "delay both ways", { a, fa[0] }, { b, fb[0] }, 40000, 1, 1 },
		{ "delay+jitter, FIFO", { a, fa[1] }, { b, fb[1] }, 0, 1, 1 },
		{ "filter", { a, fa[2] }, { b, fb[2] }, 20000, 1, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		REQUIRE(vu_fork(&child, side_a, (void *)&cases[i], 120) == 0);
		if (vu_child_wait(&child, 130) != 0)
			SR_FAIL("case \"%s\" failed (its lines above)", cases[i].name);
	}
	return sr_test_done("test_fault_delay");
}
