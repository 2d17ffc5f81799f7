/* SPDX-License-Identifier: MIT */
/*
 * Many QPs and many QP lifetimes (issue hostile:, chaos runs), in one process:
 *
 *   - 2,000 RC QPs at once (1,000 connected pairs on one CQ), a SEND across every pair, each
 *     received whole by its own peer, then all destroyed;
 *   - 100,000 cycles (20,000 under the sanitizers) of create, connect, one SEND each way,
 *     destroy (a pair of QPs each time);
 *
 * and afterwards as many file descriptors and threads as before, and (without the sanitizers) a
 * resident size that grew by less than 16 MiB over the cycles (measured from their own start,
 * after 100 warm-up cycles).
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#define NPAIRS 1000
#define MSG 64

static struct vu_dev dev;
static struct vu_buf buf;
static struct ibv_cq *cq;

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static long rss_kib(void)
{
	long pages = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &pages, &res) != 2)
		res = -1;
	fclose(f);
	return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static struct ibv_qp *new_qp(void)
{
	struct vu_qp_cfg q;

	vu_qp_cfg_default(&q, IBV_QPT_RC);
	q.max_send_wr = q.max_recv_wr = 4;
	q.max_send_sge = q.max_recv_sge = 1;
	q.max_inline = 0;
	return vu_qp_create(&dev, cq, cq, &q);
}

static bool connect_pair(struct ibv_qp *a, struct ibv_qp *b)
{
	struct vu_conn_cfg c;

	vu_conn_cfg_default(&c);
	c.sq_psn = c.rq_psn = 0;
	return vu_qp_connect(a, &c, &dev.gid, b->qp_num) == 0 &&
	       vu_qp_connect(b, &c, &dev.gid, a->qp_num) == 0;
}

/* Polls until n completions, all successful; returns how many came. */
static int reap(int n, int timeout_ms)
{
	struct ibv_wc wc[64];
	int got = 0;
	uint64_t end = vu_now_ms() + (uint64_t)timeout_ms;

	while (got < n && vu_now_ms() < end) {
		int k = ibv_poll_cq(cq, 64, wc);

		for (int i = 0; i < k; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				SR_FAIL("completion %s", vu_wc_str(&wc[i]));
			if (wc[i].opcode == IBV_WC_RECV && wc[i].byte_len != MSG)
				SR_FAIL("received %u bytes", wc[i].byte_len);
		}
		got += k > 0 ? k : 0;
	}
	return got;
}

static void many_qps(void)
{
	static struct ibv_qp *qp[2 * NPAIRS];
	uint8_t *rx = buf.p + 2 * NPAIRS * MSG;
	int got;

	printf("%d QPs at once\n", 2 * NPAIRS);
	for (int i = 0; i < 2 * NPAIRS; i++) {
		qp[i] = new_qp();
		REQUIRE(qp[i]);
	}
	for (int i = 0; i < NPAIRS; i++)
		REQUIRE(connect_pair(qp[2 * i], qp[2 * i + 1]));
	for (int i = 0; i < NPAIRS; i++) {
		vu_fill(buf.p + i * MSG, MSG, (uint32_t)i);
		CHECK_EQ(vu_post_recv(qp[2 * i + 1], (uint64_t)i, buf.mr, rx + i * MSG, MSG), 0);
		CHECK_EQ(vu_post_send(qp[2 * i], (uint64_t)i, IBV_WR_SEND, buf.mr, buf.p + i * MSG,
				      MSG, 0, IBV_SEND_SIGNALED), 0);
	}
	got = reap(2 * NPAIRS, 60000);
	CHECK_EQ(got, 2 * NPAIRS);
	for (int i = 0; i < NPAIRS; i++) {
		if (vu_check(rx + i * MSG, MSG, (uint32_t)i) != -1) {
			SR_FAIL("pair %d: the SEND did not arrive intact at its own peer", i);
			break;
		}
	}
	for (int i = 0; i < 2 * NPAIRS; i++)
		CHECK_EQ(ibv_destroy_qp(qp[i]), 0);
}

static void churn(int cycles)
{
	int fds0 = -1, thr0 = -1, fds1, thr1;
	long rss0 = -1, rss1;
	uint64_t t0 = 0;

	printf("%d create/connect/SEND/destroy cycles\n", cycles);
	for (int c = 0; c < cycles + 100; c++) {
		struct ibv_qp *a, *b;

		if (c == 100) {		/* after a warm-up: the baseline */
			fds0 = count_dir("/proc/self/fd");
			thr0 = count_dir("/proc/self/task");
			rss0 = rss_kib();
			t0 = vu_now_ms();
		}
		a = new_qp();
		b = new_qp();
		REQUIRE(a && b);
		REQUIRE(connect_pair(a, b));
		CHECK_EQ(vu_post_recv(b, 1, buf.mr, buf.p + MSG, MSG), 0);
		CHECK_EQ(vu_post_recv(a, 2, buf.mr, buf.p + 3 * MSG, MSG), 0);
		CHECK_EQ(vu_post_send(a, 3, IBV_WR_SEND, buf.mr, buf.p, MSG, 0, IBV_SEND_SIGNALED), 0);
		CHECK_EQ(vu_post_send(b, 4, IBV_WR_SEND, buf.mr, buf.p + 2 * MSG, MSG, 0,
				      IBV_SEND_SIGNALED), 0);
		if (reap(4, 10000) != 4) {
			SR_FAIL("cycle %d: a SEND did not complete", c);
			return;
		}
		CHECK_EQ(ibv_destroy_qp(a), 0);
		CHECK_EQ(ibv_destroy_qp(b), 0);
		if (sr_test_failures)
			return;
	}
	fds1 = count_dir("/proc/self/fd");
	thr1 = count_dir("/proc/self/task");
	rss1 = rss_kib();
	printf("  %llu ms; fds %d -> %d, threads %d -> %d, RSS %ld -> %ld KiB\n",
	       (unsigned long long)(vu_now_ms() - t0), fds0, fds1, thr0, thr1, rss0, rss1);
	CHECK_EQ(fds1, fds0);
	CHECK_EQ(thr1, thr0);
	/* (Under ASan freed memory waits in its quarantine, 256 MB: no RSS bound there.) */
	if (!SR_SANITIZED)
		CHECK(rss1 - rss0 < 16 * 1024);
}

int main(void)
{
	int fds, thr;

	sr_test_timeout(280);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &buf, 4 * NPAIRS * MSG, VU_ACCESS_ALL) == 0);
	cq = ibv_create_cq(dev.ctx, 4 * NPAIRS + 64, NULL, NULL, 0);
	REQUIRE(cq);
	fds = count_dir("/proc/self/fd");
	thr = count_dir("/proc/self/task");

	many_qps();
	churn(SR_SANITIZED ? 20000 : 100000);

	CHECK_EQ(count_dir("/proc/self/fd"), fds);
	CHECK_EQ(count_dir("/proc/self/task"), thr);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	vu_buf_free(&buf);
	vu_close(&dev);
	return sr_test_done("test_qp_churn");
}
