/* SPDX-License-Identifier: MIT */
/*
 * Busy-poll mode (parameter busy_poll_us) keeps the progress thread's priority (nic_nice) for
 * its wake-ups and drops it to the process's own while it spins (docs/architecture.md "The
 * soft NIC and its threads"). Before, busy-poll mode never raised the thread: in a ping-pong
 * whose applications poll, the thread watches rather than spins, so busy-poll mode was the
 * default mode without the priority, and each packet only the thread could take (ib_write_lat
 * spinning on memory) waited for a spinning application's time slice.
 *
 * With rx_watch_us 0 (no watch) and busy_poll_us 5 s, every SEND of the raw peer wakes the
 * thread, which takes it and spins (10 ms at most in one go). The test looks at every thread
 * of the process: one (the progress thread) is at nic_nice while asleep, at the process's nice
 * while a spin runs, and at nic_nice again after it. Needs root (CAP_SYS_NICE); else 77.
 */
#include <dirent.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"
#include "rawpeer.h"

#define FAKE_QPN 0x00beef
#define SENDS 20
#define OPC(x) SR_OPC(SR_TR_RC, SR_OP_##x)

static struct vu_dev dev;
static struct vu_buf rbuf;
static struct rawpeer rp;

/* The thread of this process (not the caller) at nice `nice`, or 0. */
static pid_t thread_at(int nice)
{
	pid_t self = (pid_t)syscall(SYS_gettid), found = 0;
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	REQUIRE(d);
	while (!found && (e = readdir(d))) {
		pid_t tid = (pid_t)atoi(e->d_name);
		int v;

		if (tid <= 0 || tid == self)
			continue;
		errno = 0;
		v = getpriority(PRIO_PROCESS, (id_t)tid);
		if (!errno && v == nice)
			found = tid;
	}
	closedir(d);
	return found;
}

static int nice_of(pid_t tid)
{
	errno = 0;
	int v = getpriority(PRIO_PROCESS, (id_t)tid);

	return errno ? 1000 : v;
}

int main(void)
{
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_wc wc;
	uint8_t buf[256];
	struct sr_pkt pkt;
	int base, seen_low = 0;
	pid_t nic = 0;

	sr_test_timeout(120);
	if (geteuid() != 0) {
		printf("test_busy_poll_nice: not root, the thread's nice cannot be raised: skipped\n");
		return 77;
	}
	base = getpriority(PRIO_PROCESS, 0);
	if (base <= -10) {
		printf("test_busy_poll_nice: process already at nice %d: skipped\n", base);
		return 77;
	}
	/* Before the first verbs call: parameters are read once. */
	setenv("SOFTRDMA_BUSY_POLL_US", "5000000", 1);
	setenv("SOFTRDMA_RX_WATCH_US", "0", 1);
	setenv("SOFTRDMA_NIC_NICE", "-10", 1);
	REQUIRE(vu_open(&dev) == 0);
	REQUIRE(vu_buf_alloc(&dev, &rbuf, SENDS * 64, VU_ACCESS_ALL) == 0);
	REQUIRE(rp_open(&rp, &dev.gid) == 0);
	cq = ibv_create_cq(dev.ctx, 2 * SENDS, NULL, NULL, 0);
	REQUIRE(cq);
	qp = vu_qp_to_peer(&dev, cq, NULL, &rp.gid, FAKE_QPN, &rbuf, SENDS, 64);
	REQUIRE(qp);

	/* The progress thread raised itself when it started. */
	for (int i = 0; i < 200 && !nic; i++) {
		nic = thread_at(-10);
		if (!nic)
			usleep(10000);
	}
	if (!nic)
		SR_FAIL("no thread at nice -10 in busy-poll mode (the progress thread kept %d)", base);
	REQUIRE(nic);

	for (uint32_t psn = 0; psn < SENDS && !seen_low; psn++) {
		uint8_t hdr[64], msg[16];
		size_t hlen = rp_hdr_send(hdr, OPC(SEND_ONLY), qp->qp_num, psn, true);
		uint64_t end;

		memset(msg, (int)psn, sizeof(msg));
		REQUIRE(rp_send(&rp, hdr, hlen, msg, sizeof(msg), 0) == 0);
		/* The thread takes it and spins for 10 ms: look for 500 ms (a loaded machine). */
		end = vu_now_ms() + 500;
		while (vu_now_ms() < end && !seen_low)
			seen_low = nice_of(nic) == base;
		/* After the spin, it sleeps at nic_nice again. */
		end = vu_now_ms() + 2000;
		while (vu_now_ms() < end && nice_of(nic) != -10)
			usleep(1000);
		CHECK_EQ(nice_of(nic), -10);
	}
	if (!seen_low)
		SR_FAIL("the progress thread never spun at the process's nice %d", base);

	/* The SENDs were received (the first at least; sending stopped at the first spin seen). */
	REQUIRE(vu_wait(cq, &wc, 2000) == 1);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.opcode, IBV_WC_RECV);
	while (rp_recv(&rp, buf, sizeof(buf), &pkt, 0) > 0)
		;

	CHECK_EQ(ibv_destroy_qp(qp), 0);
	CHECK_EQ(ibv_destroy_cq(cq), 0);
	rp_close(&rp);
	vu_buf_free(&rbuf);
	vu_close(&dev);
	return sr_test_done("test_busy_poll_nice");
}
