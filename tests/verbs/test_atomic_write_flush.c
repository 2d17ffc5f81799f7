/* SPDX-License-Identifier: MIT */
/*
 * ATOMIC WRITE and FLUSH (IBA memory placement extensions):
 *  - the device reports both (device_cap_flags_ex);
 *  - ATOMIC WRITE through ibv_post_send (from an lkey, inline) and ibv_wr_atomic_write: exactly
 *    8 bytes at an aligned address, the QP's and MR's remote write right (as rxe: not remote
 *    atomic), ordered after the WRITE before it, completion opcode IBV_WC_ATOMIC_WRITE;
 *  - ATOMIC WRITE never tears: a reader thread spinning on the target word while thousands of
 *    ATOMIC WRITEs land never sees a value mixing two of them;
 *  - FLUSH (softrdma_wr_flush): placement types and selectivity, the MR's and the QP's
 *    SOFTRDMA_ACCESS_FLUSH_* rights, argument checks, EOPNOTSUPP through ibv_post_send, and
 *    registration of persistence only over a shared file mapping;
 *  - persistence: a forked target registers a file mapping; the parent WRITEs, FLUSHes for
 *    persistence, SIGKILLs the target the moment the FLUSH completes, and finds the data in
 *    the file.
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <softrdma/softrdma.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define GUARD 0xee
#define BUFSZ (64u << 10)
#define FLEN (256u << 10)		/* the persistent file */
#define PLEN (64u << 10)		/* written and flushed */
#define TEAR_OPS (SR_SANITIZED ? 4000 : 40000)

static struct vu_dev dev;
static struct vu_buf lb, rb;

#define WAIT_WC(cq, id, st, op) vu_expect_wc(cq, id, st, op, 10000, __LINE__)

static const uint64_t send_ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE |
				 SOFTRDMA_QP_EX_WITH_FLUSH;

static void make_pair(struct vu_pair *p, unsigned access)
{
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.send_ops_flags = send_ops;
	vu_conn_cfg_default(&c);
	if (access)
		c.access = access;
	REQUIRE(vu_pair_create(&dev, &q, &c, p) == 0);
}

static int post_aw(struct ibv_qp *qp, uint64_t wr_id, void *src, uint32_t len, uint32_t lkey,
		   uint64_t raddr, uint32_t rkey, unsigned flags)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = IBV_WR_ATOMIC_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED | flags;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

static int wr_flush(struct ibv_qp *qp, uint64_t wr_id, uint32_t rkey, uint64_t raddr, size_t len,
		    uint8_t type, uint8_t level)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);

	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
	softrdma_wr_flush(x, rkey, raddr, len, type, level);
	return ibv_wr_complete(x);
}

/* ---- persistence across the death of the target ------------------------------------------- */
struct persist_arg {
	char path[256];
};

static int persist_target(int sock, void *varg)
{
	struct persist_arg *a = varg;
	struct vu_dev d;
	struct vu_endpoint me, peer;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	uint8_t *map;
	int fd;

	fd = open(a->path, O_RDWR);
	if (fd < 0)
		return 2;
	map = mmap(NULL, FLEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return 3;
	if (vu_open(&d))
		return 4;
	mr = ibv_reg_mr(d.pd, map, FLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					 SOFTRDMA_ACCESS_FLUSH_PERSISTENT |
					 SOFTRDMA_ACCESS_FLUSH_GLOBAL);
	cq = ibv_create_cq(d.ctx, 64, NULL, NULL, 0);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	qp = cq ? vu_qp_create(&d, cq, cq, &q) : NULL;
	if (!mr || !qp)
		return 5;
	memset(&me, 0, sizeof(me));
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	me.psn = 100;
	me.addr = (uintptr_t)map;
	me.rkey = mr->rkey;
	me.len = FLEN;
	if (vu_sock_send(sock, &me, sizeof(me)) || vu_sock_recv(sock, &peer, sizeof(peer)))
		return 6;
	vu_conn_cfg_default(&c);
	c.sq_psn = me.psn;
	c.rq_psn = peer.psn;
	c.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		   SOFTRDMA_ACCESS_FLUSH_PERSISTENT | SOFTRDMA_ACCESS_FLUSH_GLOBAL;
	if (vu_qp_connect(qp, &c, &peer.gid, peer.qpn))
		return 7;
	if (vu_sock_send(sock, "R", 1))
		return 8;
	/* A passive target: its soft NIC's thread does the work until it is killed. */
	for (;;)
		pause();
}

static void test_persistence_after_kill(void)
{
	struct persist_arg arg;
	struct vu_child child;
	struct vu_endpoint me, peer;
	struct vu_pair p;	/* only side 0 used: the CQs and the QP */
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	uint8_t *src, *back;
	char ready;
	int fd, st;

	snprintf(arg.path, sizeof(arg.path), "flush_persist_%d.bin", (int)getpid());
	fd = open(arg.path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0);
	REQUIRE(ftruncate(fd, FLEN) == 0);
	close(fd);
	/* Fork before this process opens a device (verbs_util.h). */
	REQUIRE(vu_fork(&child, persist_target, &arg, 60) == 0);
	REQUIRE(vu_open(&dev) == 0);
	memset(&p, 0, sizeof(p));
	p.dev = &dev;
	p.scq[0] = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	p.rcq[0] = ibv_create_cq(dev.ctx, 64, NULL, NULL, 0);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.send_ops_flags = send_ops;
	p.qp[0] = vu_qp_create(&dev, p.scq[0], p.rcq[0], &q);
	src = malloc(PLEN);
	back = malloc(PLEN);
	REQUIRE(p.qp[0] && src && back);
	struct ibv_mr *smr = ibv_reg_mr(dev.pd, src, PLEN, IBV_ACCESS_LOCAL_WRITE);

	REQUIRE(smr);
	REQUIRE(vu_sock_recv(child.sock, &peer, sizeof(peer)) == 0);
	memset(&me, 0, sizeof(me));
	me.gid = dev.gid;
	me.qpn = p.qp[0]->qp_num;
	me.psn = 200;
	REQUIRE(vu_sock_send(child.sock, &me, sizeof(me)) == 0);
	vu_conn_cfg_default(&c);
	c.sq_psn = me.psn;
	c.rq_psn = peer.psn;
	REQUIRE(vu_qp_connect(p.qp[0], &c, &peer.gid, peer.qpn) == 0);
	REQUIRE(vu_sock_recv(child.sock, &ready, 1) == 0);

	vu_fill(src, PLEN, 77);
	{
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);

		ibv_wr_start(x);
		x->wr_flags = IBV_SEND_SIGNALED;
		x->wr_id = 1;
		ibv_wr_rdma_write(x, peer.rkey, peer.addr + 4096);
		ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, PLEN);
		x->wr_id = 2;
		x->wr_flags = IBV_SEND_SIGNALED;
		softrdma_wr_flush(x, peer.rkey, peer.addr + 4096, PLEN, SOFTRDMA_FLUSH_PERSISTENT,
				  SOFTRDMA_FLUSH_RANGE);
		CHECK_EQ(ibv_wr_complete(x), 0);
	}
	WAIT_WC(p.scq[0], 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS, SOFTRDMA_WC_FLUSH);
	/* The moment the FLUSH completed: no chance to write anything back on the way out. */
	kill(child.pid, SIGKILL);
	CHECK_EQ(waitpid(child.pid, &st, 0), child.pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	close(child.sock);
	/* Its counters outlive it (SIGKILL: no exit hook removed the file): one msync. */
	CHECK_EQ(vu_stat_pid(child.pid, "flush_msync"), 1);

	fd = open(arg.path, O_RDONLY);
	REQUIRE(fd >= 0);
	CHECK_EQ(pread(fd, back, PLEN, 4096), (ssize_t)PLEN);
	CHECK_EQ(vu_check(back, PLEN, 77), -1);
	CHECK_EQ(pread(fd, back, 4096, 0), 4096);
	CHECK_EQ(vu_check_byte(back, 4096, 0), -1);	/* around it: untouched */
	close(fd);
	unlink(arg.path);
	{
		/* The killed target's counter file stays behind (no exit hook ran): remove it. */
		const char *dir = getenv("SOFTRDMA_STATS_DIR");
		char path[512];

		snprintf(path, sizeof(path), "%s/softrdma-%u/%d-softrdma0.stat",
			 dir && *dir ? dir : "/dev/shm", (unsigned)getuid(), (int)child.pid);
		unlink(path);
	}
	ibv_destroy_qp(p.qp[0]);
	ibv_destroy_cq(p.scq[0]);
	ibv_destroy_cq(p.rcq[0]);
	ibv_dereg_mr(smr);
	free(src);
	free(back);
}

/* ---- capabilities ------------------------------------------------------------------------ */
static void test_caps(void)
{
	struct ibv_device_attr_ex ax;

	CHECK_EQ(ibv_query_device_ex(dev.ctx, NULL, &ax), 0);
	CHECK(ax.device_cap_flags_ex & SOFTRDMA_DEVICE_ATOMIC_WRITE);
	CHECK(ax.device_cap_flags_ex & SOFTRDMA_DEVICE_FLUSH_GLOBAL);
	CHECK(ax.device_cap_flags_ex & SOFTRDMA_DEVICE_FLUSH_PERSISTENT);
	CHECK_EQ(ax.orig_attr.vendor_id, SOFTRDMA_VENDOR_ID);
}

/* ---- ATOMIC WRITE -------------------------------------------------------------------------- */
static void test_atomic_write(void)
{
	struct vu_pair p;
	uint64_t v = 0x1122334455667788ull, *tgt = (uint64_t *)(rb.p + 4096);

	memset(rb.p, GUARD, rb.len);
	make_pair(&p, 0);
	/* From an lkey. */
	memcpy(lb.p, &v, 8);
	CHECK_EQ(post_aw(p.qp[0], 1, lb.p, 8, lb.mr->lkey, (uintptr_t)tgt, rb.mr->rkey, 0), 0);
	WAIT_WC(p.scq[0], 1, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE);
	CHECK_EQ(*tgt, v);
	CHECK_EQ(vu_check_byte(rb.p, 4096, GUARD), -1);
	CHECK_EQ(vu_check_byte(rb.p + 4104, 4096, GUARD), -1);
	/* Inline (the 8 bytes are taken at post). */
	v = 0xdeadbeefcafef00dull;
	CHECK_EQ(post_aw(p.qp[0], 2, &v, 8, 0, (uintptr_t)tgt, rb.mr->rkey, IBV_SEND_INLINE), 0);
	v = 0;
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE);
	CHECK_EQ(*tgt, 0xdeadbeefcafef00dull);
	/* ibv_wr_atomic_write, ordered behind a WRITE: when the flag word is there, so is the
	 * data (and the two complete in order). */
	{
		struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);
		uint64_t flag = 42;

		vu_fill(lb.p, 8192, 3);
		ibv_wr_start(x);
		x->wr_flags = IBV_SEND_SIGNALED;
		x->wr_id = 3;
		ibv_wr_rdma_write(x, rb.mr->rkey, (uintptr_t)rb.p + 16384);
		ibv_wr_set_sge(x, lb.mr->lkey, (uintptr_t)lb.p, 8192);
		x->wr_id = 4;
		ibv_wr_atomic_write(x, rb.mr->rkey, (uintptr_t)tgt, &flag);
		flag = 0;	/* taken at the call */
		CHECK_EQ(ibv_wr_complete(x), 0);
		WAIT_WC(p.scq[0], 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
		WAIT_WC(p.scq[0], 4, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE);
		CHECK_EQ(*tgt, 42);
		CHECK_EQ(vu_check(rb.p + 16384, 8192, 3), -1);
	}
	/* Not 8 bytes, not aligned: refused at post. */
	CHECK_EQ(post_aw(p.qp[0], 5, lb.p, 4, lb.mr->lkey, (uintptr_t)tgt, rb.mr->rkey, 0), EINVAL);
	CHECK_EQ(post_aw(p.qp[0], 6, lb.p, 16, lb.mr->lkey, (uintptr_t)tgt, rb.mr->rkey, 0),
		 EINVAL);
	CHECK_EQ(post_aw(p.qp[0], 7, lb.p, 8, lb.mr->lkey, (uintptr_t)tgt + 4, rb.mr->rkey, 0),
		 EINVAL);
	vu_pair_destroy(&p);

	/* The target MR grants remote atomics but not remote write: refused (rxe's rule). */
	{
		struct ibv_mr *am = ibv_reg_mr(dev.pd, rb.p, rb.len,
					       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);

		REQUIRE(am);
		make_pair(&p, 0);
		*tgt = 7;
		CHECK_EQ(post_aw(p.qp[0], 8, lb.p, 8, lb.mr->lkey, (uintptr_t)tgt, am->rkey, 0), 0);
		WAIT_WC(p.scq[0], 8, IBV_WC_REM_ACCESS_ERR, -1);
		CHECK_EQ(*tgt, 7);
		vu_pair_destroy(&p);
		CHECK_EQ(ibv_dereg_mr(am), 0);
	}
	/* The target QP does not grant remote write: an invalid request. */
	make_pair(&p, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK_EQ(post_aw(p.qp[0], 9, lb.p, 8, lb.mr->lkey, (uintptr_t)tgt, rb.mr->rkey, 0), 0);
	WAIT_WC(p.scq[0], 9, IBV_WC_REM_INV_REQ_ERR, -1);
	CHECK_EQ(*tgt, 7);
	vu_pair_destroy(&p);
	/* RC only. */
	{
		struct vu_qp_cfg q;

		vu_qp_cfg_default(&q, IBV_QPT_UC);
		REQUIRE(vu_pair_create(&dev, &q, NULL, &p) == 0);
		CHECK_EQ(post_aw(p.qp[0], 10, lb.p, 8, lb.mr->lkey, (uintptr_t)tgt, rb.mr->rkey, 0),
			 EINVAL);
		vu_pair_destroy(&p);
	}
}

/* Every value written has 8 equal bytes: a torn read has two different ones. */
struct tear {
	volatile uint64_t *word;
	_Atomic int stop;
	uint64_t reads, torn, first_torn;
};

static void *tear_reader(void *varg)
{
	struct tear *t = varg;

	while (!atomic_load_explicit(&t->stop, memory_order_relaxed)) {
		uint64_t v = __atomic_load_n(t->word, __ATOMIC_RELAXED);

		t->reads++;
		if (v != (v & 0xff) * 0x0101010101010101ull && !t->torn++)
			t->first_torn = v;
	}
	return NULL;
}

static void test_no_tearing(void)
{
	struct vu_pair p;
	struct tear t = { .word = (volatile uint64_t *)(rb.p + 8192 + 64) };
	pthread_t th;
	struct ibv_qp_ex *x;
	unsigned posted = 0, done = 0, outstanding = 0;
	uint64_t last = 0;
	bool failed = false;

	*t.word = 0;
	make_pair(&p, 0);
	x = ibv_qp_to_qp_ex(p.qp[0]);
	REQUIRE(pthread_create(&th, NULL, tear_reader, &t) == 0);
	while (done < TEAR_OPS) {
		struct ibv_wc wc[16];
		int n;

		while (posted < TEAR_OPS && outstanding < 32) {
			uint64_t v = (uint64_t)(posted % 255 + 1) * 0x0101010101010101ull;

			if (posted % 3 == 0) {
				ibv_wr_start(x);
				x->wr_id = posted;
				x->wr_flags = IBV_SEND_SIGNALED;
				ibv_wr_atomic_write(x, rb.mr->rkey, (uintptr_t)t.word, &v);
				REQUIRE(ibv_wr_complete(x) == 0);
			} else {
				REQUIRE(post_aw(p.qp[0], posted, &v, 8, 0, (uintptr_t)t.word,
						rb.mr->rkey, IBV_SEND_INLINE) == 0);
			}
			last = v;
			posted++;
			outstanding++;
		}
		n = ibv_poll_cq(p.scq[0], 16, wc);
		REQUIRE(n >= 0);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				SR_FAIL("ATOMIC WRITE %llu: %s", (unsigned long long)wc[i].wr_id,
					vu_wc_str(&wc[i]));
				failed = true;
			}
		}
		if (failed)
			break;
		done += (unsigned)n;
		outstanding -= (unsigned)n;
	}
	atomic_store(&t.stop, 1);
	pthread_join(th, NULL);
	printf("%u ATOMIC WRITEs, %llu concurrent reads, %llu torn\n", done,
	       (unsigned long long)t.reads, (unsigned long long)t.torn);
	CHECK_EQ(t.torn, 0);
	if (t.torn)
		SR_FAIL("first torn value 0x%016llx", (unsigned long long)t.first_torn);
	CHECK(t.reads > 0);
	CHECK_EQ(*t.word, last);
	vu_pair_destroy(&p);
}

/* ---- FLUSH --------------------------------------------------------------------------------- */
static void test_flush(void)
{
	const unsigned qacc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      SOFTRDMA_ACCESS_FLUSH_GLOBAL;
	struct ibv_mr *gm, *nm;
	struct vu_pair p;

	/* Persistence over anonymous memory: nothing could honour it. */
	errno = 0;
	CHECK(ibv_reg_mr(dev.pd, rb.p, rb.len, IBV_ACCESS_LOCAL_WRITE |
					       SOFTRDMA_ACCESS_FLUSH_PERSISTENT) == NULL);
	CHECK_EQ(errno, EINVAL);
	gm = ibv_reg_mr(dev.pd, rb.p, rb.len, (int)qacc);
	nm = ibv_reg_mr(dev.pd, rb.p, rb.len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	REQUIRE(gm && nm);

	make_pair(&p, qacc);
	/* Global visibility of a range, after a WRITE. */
	vu_fill(lb.p, 4096, 9);
	CHECK_EQ(vu_post_rdma(p.qp[0], 1, IBV_WR_RDMA_WRITE, lb.mr, lb.p, 4096, (uintptr_t)rb.p,
			      gm->rkey, 0), 0);
	CHECK_EQ(wr_flush(p.qp[0], 2, gm->rkey, (uintptr_t)rb.p, 4096, SOFTRDMA_FLUSH_GLOBAL,
			  SOFTRDMA_FLUSH_RANGE), 0);
	WAIT_WC(p.scq[0], 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	WAIT_WC(p.scq[0], 2, IBV_WC_SUCCESS, SOFTRDMA_WC_FLUSH);
	CHECK_EQ(vu_check(rb.p, 4096, 9), -1);
	/* Selectivity "whole MR": address and length are ignored. */
	CHECK_EQ(wr_flush(p.qp[0], 3, gm->rkey, 12345, 0, SOFTRDMA_FLUSH_GLOBAL, SOFTRDMA_FLUSH_MR),
		 0);
	WAIT_WC(p.scq[0], 3, IBV_WC_SUCCESS, SOFTRDMA_WC_FLUSH);
	/* Arguments: no placement type, unknown bits, unknown level; not via ibv_post_send. */
	CHECK_EQ(wr_flush(p.qp[0], 4, gm->rkey, (uintptr_t)rb.p, 64, 0, SOFTRDMA_FLUSH_RANGE), EINVAL);
	CHECK_EQ(wr_flush(p.qp[0], 5, gm->rkey, (uintptr_t)rb.p, 64, 4, SOFTRDMA_FLUSH_RANGE), EINVAL);
	CHECK_EQ(wr_flush(p.qp[0], 6, gm->rkey, (uintptr_t)rb.p, 64, SOFTRDMA_FLUSH_GLOBAL, 2), EINVAL);
	{
		struct ibv_send_wr wr = { .wr_id = 7, .opcode = SOFTRDMA_WR_FLUSH }, *bad;

		CHECK_EQ(ibv_post_send(p.qp[0], &wr, &bad), EOPNOTSUPP);
	}
	/* Out of the MR's range: refused. */
	CHECK_EQ(wr_flush(p.qp[0], 8, gm->rkey, (uintptr_t)rb.p + rb.len - 8, 64,
			  SOFTRDMA_FLUSH_GLOBAL, SOFTRDMA_FLUSH_RANGE), 0);
	WAIT_WC(p.scq[0], 8, IBV_WC_REM_ACCESS_ERR, -1);
	vu_pair_destroy(&p);
	/* The MR lacks the right: remote access error. */
	make_pair(&p, qacc);
	CHECK_EQ(wr_flush(p.qp[0], 9, nm->rkey, (uintptr_t)rb.p, 64, SOFTRDMA_FLUSH_GLOBAL,
			  SOFTRDMA_FLUSH_RANGE), 0);
	WAIT_WC(p.scq[0], 9, IBV_WC_REM_ACCESS_ERR, -1);
	vu_pair_destroy(&p);
	/* The QP lacks it (here: persistence): invalid request, as rxe. */
	make_pair(&p, qacc);
	CHECK_EQ(wr_flush(p.qp[0], 10, gm->rkey, (uintptr_t)rb.p, 64, SOFTRDMA_FLUSH_PERSISTENT,
			  SOFTRDMA_FLUSH_RANGE), 0);
	WAIT_WC(p.scq[0], 10, IBV_WC_REM_INV_REQ_ERR, -1);
	vu_pair_destroy(&p);
	/* The QP grants persistence but the MR (anonymous memory) cannot have it. */
	make_pair(&p, qacc | SOFTRDMA_ACCESS_FLUSH_PERSISTENT);
	CHECK_EQ(wr_flush(p.qp[0], 11, gm->rkey, (uintptr_t)rb.p, 64, SOFTRDMA_FLUSH_PERSISTENT,
			  SOFTRDMA_FLUSH_RANGE), 0);
	WAIT_WC(p.scq[0], 11, IBV_WC_REM_ACCESS_ERR, -1);
	vu_pair_destroy(&p);
	CHECK_EQ(ibv_dereg_mr(gm), 0);
	CHECK_EQ(ibv_dereg_mr(nm), 0);
}

int main(void)
{
	sr_test_timeout(180);
	test_persistence_after_kill();	/* forks: first, before anything else opens a device */
	REQUIRE(vu_buf_alloc(&dev, &lb, BUFSZ, VU_ACCESS_ALL) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rb, BUFSZ, VU_ACCESS_ALL) == 0);
	test_caps();
	test_atomic_write();
	test_no_tearing();
	test_flush();
	vu_buf_free(&lb);
	vu_buf_free(&rb);
	vu_close(&dev);
	return sr_test_done("test_atomic_write_flush");
}
