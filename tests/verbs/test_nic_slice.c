/* SPDX-License-Identifier: MIT */
/*
 * The progress thread asks the scheduler for a short time slice (parameter nic_slice_us; EEVDF's
 * custom slice, sched_runtime of a SCHED_OTHER task) so that a packet that wakes it preempts a
 * spinning application at once, without a raised nice (docs/architecture.md "The soft NIC and
 * its threads"). No privilege is needed: the test runs as whoever runs it, and as root it drops
 * to nobody first (an ordinary user's case; the nice stays at the process's own there).
 *
 * With SOFTRDMA_NIC_SLICE_US=300 (a value no kernel default takes), exactly one thread of the
 * process (not the caller) has a 300 us slice, at the process's own nice (nic_nice 0, the
 * default), and the caller keeps the kernel's slice. Skipped (77) on a kernel without custom
 * slices (Linux before 6.12), seen by setting one on a thread of the test's own.
 */
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"

struct attr {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};

static int get_attr(pid_t tid, struct attr *a)
{
	memset(a, 0, sizeof(*a));
	return (int)syscall(SYS_sched_getattr, tid, a, sizeof(*a), 0);
}

/* Whether this kernel keeps a custom slice of a SCHED_OTHER task (tried on a thread of ours). */
static void *probe(void *arg)
{
	struct attr a;
	bool *ok = arg;

	if (get_attr(0, &a) || a.policy != SCHED_OTHER)
		return NULL;
	a.size = sizeof(a);
	a.flags = 0;
	a.runtime = 300000;
	if (syscall(SYS_sched_setattr, 0, &a, 0) || get_attr(0, &a))
		return NULL;
	*ok = a.runtime == 300000;
	return NULL;
}

int main(void)
{
	pid_t self = (pid_t)syscall(SYS_gettid), found = 0;
	struct vu_dev dev;
	struct dirent *e;
	struct attr a, mine;
	bool ok = false;
	pthread_t t;
	int n = 0, base;
	DIR *d;

	sr_test_timeout(120);
	REQUIRE(pthread_create(&t, NULL, probe, &ok) == 0);
	REQUIRE(pthread_join(t, NULL) == 0);
	if (!ok) {
		printf("test_nic_slice: this kernel keeps no custom slice (Linux 6.12+): skipped\n");
		return 77;
	}
	/* As an ordinary user (nobody) when run as root; the stats files then are not needed. */
	if (geteuid() == 0) {
		setenv("SOFTRDMA_STATS_DIR", "/nonexistent", 1);
		REQUIRE(setgid(65534) == 0 && setuid(65534) == 0);
	}
	REQUIRE(get_attr(0, &mine) == 0);
	if (mine.policy != SCHED_OTHER) {
		printf("test_nic_slice: run under policy %u, not SCHED_OTHER: skipped\n",
		       mine.policy);
		return 77;
	}
	base = getpriority(PRIO_PROCESS, 0);
	/* Before the first verbs call: parameters are read once. */
	setenv("SOFTRDMA_NIC_SLICE_US", "300", 1);
	unsetenv("SOFTRDMA_NIC_NICE");
	REQUIRE(vu_open(&dev) == 0);

	/* The progress thread sets its slice when it starts: look for up to 2 s. */
	for (int i = 0; i < 200 && !found; i++) {
		d = opendir("/proc/self/task");
		REQUIRE(d);
		n = 0;
		while ((e = readdir(d))) {
			pid_t tid = (pid_t)atoi(e->d_name);

			if (tid <= 0 || tid == self || get_attr(tid, &a))
				continue;
			if (a.runtime == 300000) {
				found = tid;
				n++;
			}
		}
		closedir(d);
		if (!found)
			usleep(10000);
	}
	if (!found)
		SR_FAIL("no thread with a 300 us slice (SOFTRDMA_NIC_SLICE_US=300)");
	REQUIRE(found);
	CHECK_EQ(n, 1);
	REQUIRE(get_attr(found, &a) == 0);
	CHECK_EQ(a.policy, SCHED_OTHER);
	/* nic_nice's default is 0: the thread keeps the process's weight. */
	CHECK_EQ(a.nice, base);
	/* The caller's own slice is not touched. */
	REQUIRE(get_attr(0, &a) == 0);
	CHECK_EQ(a.runtime, mine.runtime);

	vu_close(&dev);
	return sr_test_done("test_nic_slice");
}
