/* SPDX-License-Identifier: MIT */
/*
 * Data integrity under packet loss, duplication, reordering and corruption, between two
 * processes.
 *
 * SOFTRDMA_FAULT is set before the fork (so both processes inject faults on everything they
 * transmit: requests, ACKs, READ responses). The parent drives a seeded random mix of RDMA WRITE,
 * READ, SEND and ATOMIC (FETCH_ADD and CMP_SWAP, succeeding and failing) against the child's
 * memory, keeping many WRs in flight, and keeps a model of what the child's memory must hold,
 * computed independently of the stack: every WR changes the model in posting order (RC executes
 * in order). READ results and atomic return values are checked against the model as they
 * complete; each SEND is checked by the child (length, immediate data, a hash of every byte);
 * at the end the child ships its whole target buffer back over the socketpair -- not over RDMA
 * -- and every byte is compared with the model.
 *
 * Volume: 256 MiB in the normal build, 32 MiB in sanitizer builds; but the workload stops
 * early when it has run for 60 s (the test must fit a CI budget), and says how far it got.
 * SR_FAULT_SEED, SR_FAULT_MIB and SR_FAULT_BUDGET_S (0: no time limit) override the seed, the
 * volume and the time budget; SR_FAULT_SPEC the faults (a SOFTRDMA_FAULT value: the variants of
 * tests/CMakeLists.txt and tools/chaos.sh); SR_FAULT_NETNS="NSA:DEVA,NSB:DEVB" puts the
 * initiator in network namespace NSA on interface DEVA and the target in NSB on DEVB
 * (integration/test_chaos_netns); SR_FAULT_MTU4096 a 4096-byte path MTU (large segments).
 * The last line, "figures: ...", is what tools/chaos.sh tabulates.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* corrupt: the middle packets of a WRITE are placed before their ICRC is checked, in the same
 * pass (resp.c, sr_resp_place); a corrupted one must leave no trace in the final image. */
#define FAULTS "drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01"
#define TSIZE (16u << 20)		/* the child's target buffer */
#define ATOMIC_AREA 4096		/* atomics hit the first 512 words (and WRITEs/READs may too) */
#define NRECV 64			/* receive WQEs the child keeps posted */
#define RSLOT (64u << 10)		/* bytes per receive WQE, the largest SEND */
#define WINDOW 32			/* WRs in flight */
#define SLOT (256u << 10)		/* local staging per WR, the largest WRITE/READ */
#define T_SEED 4242

enum op { OP_WRITE, OP_READ, OP_SEND, OP_FAA, OP_CAS };

struct ep {
	union ibv_gid gid;
	uint32_t qpn, psn;
	uint64_t addr;
	uint32_t rkey;
	uint32_t pad;
};

struct send_rec {
	uint32_t len, imm;
	uint64_t hash;
};

/* Messages on the socket after the connection is up. */
struct done_msg {
	uint64_t nsends;
};

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h ^ n;
}

static void fill_random(uint8_t *p, size_t n, uint64_t *rng)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = vu_rand(rng);

		memcpy(p + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = vu_rand(rng);

		memcpy(p + i, &v, n - i);
	}
}

static struct ibv_qp *make_qp(struct vu_dev *d, struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct vu_qp_cfg q;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.max_send_wr = WINDOW + 4;
	q.max_recv_wr = NRECV + 4;
	q.max_send_sge = 1;
	q.max_recv_sge = 1;
	q.max_inline = 0;
	return vu_qp_create(d, scq, rcq, &q);
}

static void conn_cfg(struct vu_conn_cfg *c, uint32_t my_psn, uint32_t peer_psn)
{
	vu_conn_cfg_default(c);
	/* SR_FAULT_MTU4096: a 4096-byte path MTU, so in-band large segments (with SOFTRDMA_SEG_MAX
	 * 8192: WRITEs of 3-14 packets with a FIRST short by its RETH, docs/cm.md) */
	if (getenv("SR_FAULT_MTU4096"))
		c->mtu = IBV_MTU_4096;
	c->sq_psn = my_psn;
	c->rq_psn = peer_psn;
	/* 268 ms: counted retries tolerate a peer starved of CPU for a while on a loaded 2-core
	 * machine (retry_cnt 7: about 2 s); loss itself is repaired long before, by the fast
	 * retransmissions and sequence NAKs, which do not depend on this timeout. */
	c->timeout = 16;
	c->retry_cnt = 7;
	c->rnr_retry = 7;
	c->min_rnr_timer = 1;
	c->max_rd_atomic = 16;
	c->max_dest_rd_atomic = 16;
}

/* The counters that tell how recovery went (this process's device). */
static void print_counters(const char *who)
{
	static const char *const names[] = {
		"tx_packets", "fault_drop", "fault_dup", "fault_reorder", "fault_corrupt",
		"fault_delayed", "retransmits", "tail_probes",
		"retry_timeouts", "fast_retransmits", "retry_exceeded", "seq_naks_sent",
		"seq_naks_rcvd", "seq_naks_ignored", "inv_req_naks_sent", "access_naks_sent",
		"op_naks_sent", "naks_rcvd", "dup_requests", "drop_psn", "drop_unexpected",
		"drop_qp_state", "rnr_naks_sent", "repairs", "rtt_samples", "rtt_sample_us",
		"rtt_karn_discards", "offer_kept", "drop_ride",
	};

	printf("%s:", who);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int64_t v = vu_stat(names[i]);

		if (v)
			printf(" %s %lld", names[i], (long long)v);
	}
	printf("\n");
	fflush(stdout);
}

/* The faults spec asks for `name` (name=V with V > 0). */
static bool asks(const char *faults, const char *name)
{
	size_t l = strlen(name);

	for (const char *p = faults; p && *p; p = strchr(p, ','), p = p ? p + 1 : NULL)
		if (!strncmp(p, name, l) && p[l] == '=' && strtod(p + l + 1, NULL) > 0)
			return true;
	return false;
}

/* SR_FAULT_NETNS="NSA:DEVA,NSB:DEVB": side 0 (initiator) or 1 (target) enters its namespace and
 * binds its device to its interface; nothing when unset. Before the device opens. */
static void enter_netns(int side)
{
	const char *env = getenv("SR_FAULT_NETNS");
	char spec[256], *part, *dev, *save = NULL, path[300];
	int fd;

	if (!env || !*env)
		return;
	snprintf(spec, sizeof(spec), "%s", env);
	part = strtok_r(spec, ",", &save);
	if (side && part)
		part = strtok_r(NULL, ",", &save);
	REQUIRE(part && (dev = strchr(part, ':')));
	*dev++ = 0;
	snprintf(path, sizeof(path), "/run/netns/%s", part);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	REQUIRE(fd >= 0);
	REQUIRE(setns(fd, CLONE_NEWNET) == 0);
	close(fd);
	setenv("SOFTRDMA_NETDEV", dev, 1);
	printf("%s: network namespace %s, interface %s\n", side ? "target" : "initiator", part, dev);
}

/* ---- the target (child) ---------------------------------------------------------------------- */
static int target(int sock, void *arg)
{
	struct vu_dev d;
	struct vu_buf t, r;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct vu_conn_cfg c;
	struct ep me, peer;
	struct send_rec *recs = NULL;
	size_t nrec = 0, cap = 0;
	struct done_msg done = { 0 };
	bool have_done = false;
	uint64_t rng = 77;

	(void)arg;
	enter_netns(1);
	REQUIRE(vu_open(&d) == 0);
	REQUIRE(vu_buf_alloc(&d, &t, TSIZE, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&d, &r, (size_t)NRECV * RSLOT, IBV_ACCESS_LOCAL_WRITE) == 0);
	vu_fill(t.p, TSIZE, T_SEED);
	cq = ibv_create_cq(d.ctx, 4 * NRECV, NULL, NULL, 0);
	REQUIRE(cq);
	qp = make_qp(&d, cq, cq);
	REQUIRE(qp);
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	me.psn = (uint32_t)vu_rand(&rng) & 0xffffff;
	me.addr = (uintptr_t)t.p;
	me.rkey = t.mr->rkey;
	REQUIRE(vu_sock_send(sock, &me, sizeof(me)) == 0);
	REQUIRE(vu_sock_recv(sock, &peer, sizeof(peer)) == 0);
	conn_cfg(&c, me.psn, peer.psn);
	REQUIRE(vu_qp_connect(qp, &c, &peer.gid, peer.qpn) == 0);
	for (uint32_t i = 0; i < NRECV; i++)
		REQUIRE(vu_post_recv(qp, i, r.mr, r.p + (size_t)i * RSLOT, RSLOT) == 0);
	/* Tell the initiator the receives are up. */
	REQUIRE(vu_sock_send(sock, &me, 1) == 0);

	/* Take SENDs until the initiator says how many there were and they all arrived. */
	while (!have_done || nrec < done.nsends) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(cq, 16, wc);

		for (int i = 0; i < n; i++) {
			uint32_t slot = (uint32_t)wc[i].wr_id;

			if (wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV) {
				SR_FAIL("target: receive #%zu: %s", nrec, vu_wc_str(&wc[i]));
				print_counters("target");
				free(recs);
				return 1;
			}
			if (nrec == cap) {
				cap = cap ? cap * 2 : 1024;
				recs = realloc(recs, cap * sizeof(*recs));
				REQUIRE(recs);
			}
			recs[nrec].len = wc[i].byte_len;
			recs[nrec].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? be32toh(wc[i].imm_data)
									     : 0;
			recs[nrec].hash = fnv1a(r.p + (size_t)slot * RSLOT, wc[i].byte_len);
			nrec++;
			memset(r.p + (size_t)slot * RSLOT, 0, wc[i].byte_len);
			REQUIRE(vu_post_recv(qp, slot, r.mr, r.p + (size_t)slot * RSLOT, RSLOT) == 0);
		}
		if (!have_done && n == 0) {
			struct pollfd pfd = { .fd = sock, .events = POLLIN };

			if (poll(&pfd, 1, 0) == 1) {
				if (vu_sock_recv(sock, &done, sizeof(done))) {
					/* The initiator gave up: say what we saw. */
					SR_FAIL("target: initiator gone after %zu SENDs", nrec);
					print_counters("target");
					free(recs);
					return 1;
				}
				have_done = true;
			}
		}
	}
	if (nrec != done.nsends)
		SR_FAIL("target: %zu SENDs arrived, %llu sent", nrec,
			(unsigned long long)done.nsends);
	REQUIRE(vu_sock_send(sock, &nrec, sizeof(nrec)) == 0);
	REQUIRE(vu_sock_send(sock, recs, nrec * sizeof(*recs)) == 0);
	REQUIRE(vu_sock_send(sock, t.p, TSIZE) == 0);
	/* Stay up until the initiator has read everything (its QP still talks to ours). */
	{
		uint8_t bye;

		vu_sock_recv(sock, &bye, 1);
	}
	print_counters("target");
	free(recs);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	vu_buf_free(&t);
	vu_buf_free(&r);
	vu_close(&d);
	return sr_test_failures ? 1 : 0;
}

/* ---- the initiator (parent) ----------------------------------------------------------------- */
struct inflight {
	uint64_t seq;
	enum op op;
	uint32_t len;
	uint64_t off;		/* in the target buffer (WRITE, READ, atomics) */
	uint64_t expect;	/* atomics: the original value the model predicts */
};

/*
 * A READ that is retried reads the target memory again (IBA: the responder re-executes a
 * duplicate READ), so a WRITE or ATOMIC posted after it may already have changed what the retry
 * returns. IBV_SEND_FENCE is how an application orders them (IBA 10.8.3.3): the WR waits until
 * every earlier READ and ATOMIC has completed. Fence a WR that changes bytes an unfinished READ
 * covers; the model then stays exact.
 */
static bool overlaps_unfinished_read(const struct inflight *fl, uint64_t completed,
				     uint64_t posted, uint64_t off, uint64_t len)
{
	for (uint64_t q = completed; q < posted; q++) {
		const struct inflight *f = &fl[q % WINDOW];

		if (f->op == OP_READ && off < f->off + f->len && f->off < off + len)
			return true;
	}
	return false;
}

static const char *const op_name[] = { "WRITE", "READ", "SEND", "FETCH_ADD", "CMP_SWAP" };

static uint32_t pick_len(uint64_t *rng, uint32_t max)
{
	uint64_t r = vu_rand(rng) % 1000;
	uint32_t len;

	if (r < 10)
		return 0;
	if (r < 500)
		len = 1 + (uint32_t)(vu_rand(rng) % 4096);
	else if (r < 900)
		len = 4096 + (uint32_t)(vu_rand(rng) % (60u << 10));
	else
		len = (64u << 10) + (uint32_t)(vu_rand(rng) % (192u << 10));
	return len < max ? len : max;
}

int main(void)
{
	struct vu_child child;
	struct vu_dev d;
	struct vu_buf l;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct vu_conn_cfg c;
	struct ep me, peer;
	uint8_t *model, *expect_rd, *image;
	struct inflight fl[WINDOW];
	struct send_rec *sent = NULL;
	size_t nsent = 0, sent_cap = 0;
	uint64_t seed, rng, posted = 0, completed = 0, volume = 0, target_volume;
	uint64_t counts[5] = { 0 }, fences = 0, t0, elapsed, budget_ms;
	bool cut = false;
	const char *env, *faults;
	int ret;

	sr_test_timeout(280);
	env = getenv("SR_FAULT_SEED");
	seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
	env = getenv("SR_FAULT_MIB");
	target_volume = (env && *env ? strtoull(env, NULL, 0) : (SR_SANITIZED ? 32 : 256)) << 20;
	env = getenv("SR_FAULT_BUDGET_S");
	budget_ms = (env && *env ? strtoull(env, NULL, 0) : 60) * 1000;
	env = getenv("SR_FAULT_SPEC");
	faults = env && *env ? env : FAULTS;
	printf("seed %llu (SR_FAULT_SEED to repeat), volume %llu MiB%s, faults %s, time budget "
	       "%llu s\n", (unsigned long long)seed, (unsigned long long)(target_volume >> 20),
	       SR_SANITIZED ? " (sanitizer build)" : "", faults,
	       (unsigned long long)(budget_ms / 1000));
	rng = seed;

	/* Both processes inject faults: set before the fork and before any verbs call. */
	setenv("SOFTRDMA_FAULT", faults, 1);
	REQUIRE(vu_fork(&child, target, NULL, 270) == 0);

	enter_netns(0);
	REQUIRE(vu_open(&d) == 0);
	REQUIRE(vu_buf_alloc(&d, &l, (size_t)WINDOW * SLOT, IBV_ACCESS_LOCAL_WRITE) == 0);
	model = malloc(TSIZE);
	image = malloc(TSIZE);
	expect_rd = malloc((size_t)WINDOW * SLOT);
	REQUIRE(model && image && expect_rd);
	vu_fill(model, TSIZE, T_SEED);
	cq = ibv_create_cq(d.ctx, 4 * WINDOW, NULL, NULL, 0);
	REQUIRE(cq);
	qp = make_qp(&d, cq, cq);
	REQUIRE(qp);
	REQUIRE(vu_sock_recv(child.sock, &peer, sizeof(peer)) == 0);
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	me.psn = (uint32_t)vu_rand(&rng) & 0xffffff;
	me.addr = 0;
	me.rkey = 0;
	REQUIRE(vu_sock_send(child.sock, &me, sizeof(me)) == 0);
	conn_cfg(&c, me.psn, peer.psn);
	REQUIRE(vu_qp_connect(qp, &c, &peer.gid, peer.qpn) == 0);
	{
		uint8_t ready;

		REQUIRE(vu_sock_recv(child.sock, &ready, 1) == 0);
	}

	t0 = vu_now_ms();
	while (completed < posted || volume < target_volume) {
		if (!cut && budget_ms && vu_now_ms() - t0 > budget_ms && volume < target_volume) {
			/* Out of time: finish what is in flight, check everything, report. */
			cut = true;
			target_volume = volume;
			if (completed == posted)
				break;	/* cut with nothing in flight: nothing to wait for */
		}
		/* Post while there is room and volume to go. */
		while (posted - completed < WINDOW && volume < target_volume) {
			uint32_t s = (uint32_t)(posted % WINDOW);
			uint8_t *buf = l.p + (size_t)s * SLOT;
			struct inflight *f = &fl[s];
			uint64_t r = vu_rand(&rng) % 100;
			uint64_t off = 0, raddr;
			uint32_t len;
			bool fence = false;

			f->seq = posted;
			f->op = r < 35 ? OP_WRITE : r < 65 ? OP_READ : r < 85 ? OP_SEND
			      : r < 93 ? OP_FAA : OP_CAS;
			switch (f->op) {
			case OP_WRITE:
				len = pick_len(&rng, SLOT);
				off = vu_rand(&rng) % (TSIZE - len + 1);
				fill_random(buf, len, &rng);
				memcpy(model + off, buf, len);
				fence = overlaps_unfinished_read(fl, completed, posted, off, len);
				ret = vu_post_rdma(qp, posted, IBV_WR_RDMA_WRITE, l.mr, buf, len,
						   peer.addr + off, peer.rkey,
						   fence ? IBV_SEND_FENCE : 0);
				break;
			case OP_READ:
				len = pick_len(&rng, SLOT);
				off = vu_rand(&rng) % (TSIZE - len + 1);
				/* What the READ must return: the model as of now. */
				memcpy(expect_rd + (size_t)s * SLOT, model + off, len);
				memset(buf, 0xa5, len);
				ret = vu_post_rdma(qp, posted, IBV_WR_RDMA_READ, l.mr, buf, len,
						   peer.addr + off, peer.rkey, 0);
				break;
			case OP_SEND:
				len = pick_len(&rng, RSLOT);
				fill_random(buf, len, &rng);
				if (nsent == sent_cap) {
					sent_cap = sent_cap ? sent_cap * 2 : 1024;
					sent = realloc(sent, sent_cap * sizeof(*sent));
					REQUIRE(sent);
				}
				sent[nsent].len = len;
				sent[nsent].imm = (uint32_t)posted;
				sent[nsent].hash = fnv1a(buf, len);
				nsent++;
				ret = vu_post_send(qp, posted, IBV_WR_SEND_WITH_IMM, l.mr, buf, len,
						   (uint32_t)posted, 0);
				break;
			default: {
				uint64_t cur, add, cmp, swp;

				len = 8;
				off = (vu_rand(&rng) % (ATOMIC_AREA / 8)) * 8;
				raddr = peer.addr + off;
				memcpy(&cur, model + off, 8);
				f->expect = cur;
				memset(buf, 0xa5, 8);
				fence = overlaps_unfinished_read(fl, completed, posted, off, 8);
				if (f->op == OP_FAA) {
					add = vu_rand(&rng) % 3 ? vu_rand(&rng) % 1000
								: vu_rand(&rng);
					cur += add;
					memcpy(model + off, &cur, 8);
					ret = vu_post_atomic(qp, posted, IBV_WR_ATOMIC_FETCH_AND_ADD,
							     l.mr, buf, raddr, peer.rkey, add, 0,
							     fence ? IBV_SEND_FENCE : 0);
				} else {
					/* Half compare with the value there (swap), half not. */
					cmp = vu_rand(&rng) & 1 ? cur : cur ^ (1 + vu_rand(&rng) % 255);
					swp = vu_rand(&rng);
					if (cmp == cur)
						memcpy(model + off, &swp, 8);
					ret = vu_post_atomic(qp, posted, IBV_WR_ATOMIC_CMP_AND_SWP,
							     l.mr, buf, raddr, peer.rkey, cmp, swp,
							     fence ? IBV_SEND_FENCE : 0);
				}
				break;
			}
			}
			if (ret) {
				SR_FAIL("post %s #%llu: %d", op_name[f->op], (unsigned long long)posted,
					ret);
				goto out;
			}
			f->len = len;
			f->off = off;
			counts[f->op]++;
			fences += fence;
			volume += len;
			posted++;
		}

		/* Reap, in order. */
		struct ibv_wc wc[WINDOW];
		int n = vu_poll(cq, wc, 1, 20000);

		if (n <= 0) {
			SR_FAIL("no completion for 20 s (posted %llu, completed %llu)",
				(unsigned long long)posted, (unsigned long long)completed);
			goto out;
		}
		{
			int more = ibv_poll_cq(cq, WINDOW - 1, wc + 1);

			if (more > 0)
				n += more;
		}
		for (int i = 0; i < n; i++) {
			struct inflight *f = &fl[completed % WINDOW];
			uint8_t *buf = l.p + (size_t)(completed % WINDOW) * SLOT;

			if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != completed) {
				SR_FAIL("%s #%llu: %s", op_name[f->op], (unsigned long long)completed,
					vu_wc_str(&wc[i]));
				goto out;
			}
			if (f->op == OP_READ) {
				if (memcmp(buf, expect_rd + (size_t)(completed % WINDOW) * SLOT, f->len)) {
					long at = -1;

					for (uint32_t k = 0; k < f->len && at < 0; k++)
						if (buf[k] != expect_rd[(size_t)(completed % WINDOW) * SLOT + k])
							at = k;
					SR_FAIL("READ #%llu of %u bytes: byte %ld differs from the model",
						(unsigned long long)completed, f->len, at);
				}
			} else if (f->op == OP_FAA || f->op == OP_CAS) {
				uint64_t got;

				memcpy(&got, buf, 8);
				if (got != f->expect)
					SR_FAIL("%s #%llu returned 0x%llx, model says 0x%llx",
						op_name[f->op], (unsigned long long)completed,
						(unsigned long long)got, (unsigned long long)f->expect);
			}
			completed++;
		}
		if (sr_test_failures > 20)
			goto out;
	}
	elapsed = vu_now_ms() - t0;
	printf("%llu WRs (%llu WRITE, %llu READ, %llu SEND, %llu FETCH_ADD, %llu CMP_SWAP; "
	       "%llu fenced), %llu MiB in %llu ms\n", (unsigned long long)posted,
	       (unsigned long long)counts[0], (unsigned long long)counts[1],
	       (unsigned long long)counts[2], (unsigned long long)counts[3],
	       (unsigned long long)counts[4], (unsigned long long)fences,
	       (unsigned long long)(volume >> 20),
	       (unsigned long long)elapsed);
	if (cut)
		printf("NOTE: the %llu s budget ran out after %llu MiB (%.1f MiB/s under these "
		       "faults); everything done was checked\n", (unsigned long long)(budget_ms / 1000),
		       (unsigned long long)(volume >> 20),
		       elapsed ? (double)volume / 1048576.0 / ((double)elapsed / 1000.0) : 0.0);
	/* Each fault asked for was injected; loss and corruption were repaired by retransmission. */
	if (asks(faults, "drop"))
		CHECK(vu_stat("fault_drop") > 0);
	if (asks(faults, "dup"))
		CHECK(vu_stat("fault_dup") > 0);
	if (asks(faults, "reorder"))
		CHECK(vu_stat("fault_reorder") > 0);
	if (asks(faults, "corrupt"))
		CHECK(vu_stat("fault_corrupt") > 0);
	if (asks(faults, "delay"))
		CHECK(vu_stat("fault_delayed") > 0);
	if (asks(faults, "drop") || asks(faults, "corrupt"))
		CHECK(vu_stat("retransmits") > 0);
	/* The target caught corrupted packets, and placed WRITE packets with the one-pass check. */
	if (asks(faults, "corrupt"))
		CHECK(vu_stat_pid(child.pid, "drop_icrc") > 0);
	CHECK(vu_stat_pid(child.pid, "rx_placed_checked") > 0);
	printf("target: %lld packets placed and checked in one pass, %lld bad ICRCs dropped\n",
	       (long long)vu_stat_pid(child.pid, "rx_placed_checked"),
	       (long long)vu_stat_pid(child.pid, "drop_icrc"));

	/* The child's view: every SEND, then its whole memory. */
	{
		struct done_msg done = { .nsends = nsent };
		size_t nrec = 0;
		struct send_rec *recs;
		uint8_t bye = 1;

		REQUIRE(vu_sock_send(child.sock, &done, sizeof(done)) == 0);
		REQUIRE(vu_sock_recv(child.sock, &nrec, sizeof(nrec)) == 0);
		CHECK_EQ(nrec, nsent);
		recs = malloc((nrec ? nrec : 1) * sizeof(*recs));
		REQUIRE(recs);
		REQUIRE(vu_sock_recv(child.sock, recs, nrec * sizeof(*recs)) == 0);
		for (size_t i = 0; i < nrec && i < nsent; i++)
			if (recs[i].len != sent[i].len || recs[i].imm != sent[i].imm ||
			    recs[i].hash != sent[i].hash) {
				SR_FAIL("SEND %zu (WR #%u): arrived len %u imm %u hash %llx, sent len "
					"%u hash %llx", i, sent[i].imm, recs[i].len, recs[i].imm,
					(unsigned long long)recs[i].hash, sent[i].len,
					(unsigned long long)sent[i].hash);
				break;
			}
		free(recs);
		REQUIRE(vu_sock_recv(child.sock, image, TSIZE) == 0);
		if (memcmp(image, model, TSIZE)) {
			size_t bad = 0, first = TSIZE;

			for (size_t i = 0; i < TSIZE; i++)
				if (image[i] != model[i]) {
					if (first == TSIZE)
						first = i;
					bad++;
				}
			SR_FAIL("target memory: %zu bytes differ from the model, first at offset %zu "
				"(0x%02x, model 0x%02x)", bad, first, image[first], model[first]);
		}
		/* The figures of this run, both sides (the target's counters are read while it
		 * still runs). */
		printf("figures: faults=%s mib=%.1f wrs=%llu ms=%llu tx_packets=%lld+%lld "
		       "retransmits=%lld+%lld tail_probes=%lld+%lld retry_timeouts=%lld+%lld "
		       "fault_drop=%lld+%lld fault_dup=%lld+%lld "
		       "fault_reorder=%lld+%lld fault_corrupt=%lld+%lld fault_delayed=%lld+%lld "
		       "drop_icrc=%lld+%lld "
		       "dup_requests=%lld+%lld result=%s\n", faults, (double)volume / 1048576.0,
		       (unsigned long long)posted, (unsigned long long)elapsed,
		       (long long)vu_stat("tx_packets"), (long long)vu_stat_pid(child.pid, "tx_packets"),
		       (long long)vu_stat("retransmits"), (long long)vu_stat_pid(child.pid, "retransmits"),
		       (long long)vu_stat("tail_probes"), (long long)vu_stat_pid(child.pid, "tail_probes"),
		       (long long)vu_stat("retry_timeouts"),
		       (long long)vu_stat_pid(child.pid, "retry_timeouts"),
		       (long long)vu_stat("fault_drop"), (long long)vu_stat_pid(child.pid, "fault_drop"),
		       (long long)vu_stat("fault_dup"), (long long)vu_stat_pid(child.pid, "fault_dup"),
		       (long long)vu_stat("fault_reorder"),
		       (long long)vu_stat_pid(child.pid, "fault_reorder"),
		       (long long)vu_stat("fault_corrupt"),
		       (long long)vu_stat_pid(child.pid, "fault_corrupt"),
		       (long long)vu_stat("fault_delayed"),
		       (long long)vu_stat_pid(child.pid, "fault_delayed"),
		       (long long)vu_stat("drop_icrc"), (long long)vu_stat_pid(child.pid, "drop_icrc"),
		       (long long)vu_stat("dup_requests"),
		       (long long)vu_stat_pid(child.pid, "dup_requests"),
		       sr_test_failures ? "FAILED" : "byte-exact");
		fflush(stdout);
		vu_sock_send(child.sock, &bye, 1);
	}
out:
	print_counters("initiator");
	if (sr_test_failures)
		shutdown(child.sock, SHUT_RDWR);	/* the child stops waiting for us */
	CHECK_EQ(vu_child_wait(&child, 60), 0);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	vu_buf_free(&l);
	vu_close(&d);
	free(model);
	free(image);
	free(expect_rd);
	free(sent);
	return sr_test_done("test_fault_integrity");
}
