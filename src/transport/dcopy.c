/* SPDX-License-Identifier: MIT */
/*
 * The direct path's copy (src/transport/direct.c), shared with a second thread when it is long.
 *
 * A same-host RDMA WRITE (READ) is one process_vm_writev (readv) made by the posting thread;
 * nothing else in either process runs meanwhile (the target never does). On this project's
 * 2-core machines that left one core idle while a 1 MiB WRITE was copied at the speed of one
 * core (about 11 GB/s for 1 MiB here, 4 GB/s for 8 MiB). A copy of param direct_split bytes
 * or more is therefore cut into CHUNKS pieces (two halves), and a helper thread (one per
 * process, started at the first such copy, only when the process may run on 2 CPUs or more)
 * copies beside the posting thread. Each piece is claimed before it is copied: the posting
 * thread claims from the first up, the helper from the last down, so each stays with
 * the same part of a buffer that is copied again and again, and with its own core's cache
 * (with a shared counter either thread took either half, and runs were slower), and a helper
 * that is slow to wake only takes less. The posting thread then waits for the half the helper
 * is in before it returns; the WR completes only after every byte is in place, as before.
 * Whether a copy is shared at all is decided by measurement (sr_dcopy, below).
 *
 * The helper spins SPIN_NS after a copy for the next one (ib_write_bw posts the next WRITE a
 * few microseconds later), then sleeps in a futex. It never spins otherwise.
 *
 * The job lives in static state, one at a time: a thread that finds it taken (another thread
 * of the process is copying with the helper) copies alone. Every job field is written before
 * `open` is raised, and the posting thread keeps the job until `inside` is 0 after it closed
 * it: a helper raises `inside` before it reads `open` (Dekker, both seq_cst), so a helper
 * either is seen inside or sees the job closed.
 */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "core/param.h"
#include "transport/xport.h"

#define SPIN_NS 30000ull
#define CHUNKS 2ul		/* halves: each thread keeps to its own (see the top) */
#define PAGE 4096ul
#define WAIT_SPIN_NS 20000ull	/* then the posting thread yields while it waits */
#define BUSY (-2)		/* shared(): the helper is another thread's just now */
#define SLICE_MAX 64		/* iovecs of one chunk; more local SGEs: that copy goes alone */

static struct {
	pthread_mutex_t start_lock;
	_Atomic pid_t ready;			/* the process whose helper runs */
	pid_t failed;				/* ... or could not be started */
	_Atomic bool busy;			/* a job is being set up or run */
	_Atomic uint32_t seq;			/* futex word: bumped for each job */
	_Atomic bool sleeping;
	_Atomic bool open;			/* the job takes helpers */
	_Atomic int inside;			/* helpers in the job */
	/* The job. */
	pid_t pid;
	bool rd;
	const struct iovec *lv;
	unsigned long ln;
	uintptr_t raddr;
	size_t len, chunk;
	_Atomic bool claimed[CHUNKS];		/* chunk i is taken */
	_Atomic size_t done;			/* bytes copied */
	_Atomic size_t helped;			/* ... of which by the helper */
	_Atomic int err;
} H = { .start_lock = PTHREAD_MUTEX_INITIALIZER };

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* The iovecs of [off, off + len) of lv into out; returns their number, 0 if over max. */
static int slice(const struct iovec *lv, unsigned long ln, size_t off, size_t len,
		 struct iovec *out, int max)
{
	int n = 0;

	for (unsigned long i = 0; i < ln && len; i++) {
		if (off >= lv[i].iov_len) {
			off -= lv[i].iov_len;
			continue;
		}
		size_t take = lv[i].iov_len - off;

		if (take > len)
			take = len;
		if (n == max)
			return 0;
		out[n].iov_base = (char *)lv[i].iov_base + off;
		out[n].iov_len = take;
		n++;
		len -= take;
		off = 0;
	}
	return n;
}

/* One system call: lv to [raddr, raddr + len) of pid, or (rd) from there into lv. */
static ssize_t one_call(pid_t pid, bool rd, const struct iovec *lv, unsigned long ln,
			uintptr_t raddr, size_t len)
{
	struct iovec r = { (void *)raddr, len };

	return rd ? process_vm_readv(pid, lv, ln, &r, 1, 0)
		  : process_vm_writev(pid, lv, ln, &r, 1, 0);
}

/* Copies chunk i of the open job, if nobody took it yet; returns the bytes copied. */
static size_t take_chunk(size_t i)
{
	struct iovec l[SLICE_MAX];
	size_t off = i * H.chunk, len;
	ssize_t got;
	int n;

	if (off >= H.len || atomic_exchange(&H.claimed[i], true))
		return 0;
	len = H.len - off < H.chunk ? H.len - off : H.chunk;
	n = slice(H.lv, H.ln, off, len, l, SLICE_MAX);
	got = one_call(H.pid, H.rd, l, (unsigned long)n, H.raddr + off, len);
	if (got < 0) {
		int none = 0;

		atomic_compare_exchange_strong(&H.err, &none, errno);
		return 0;
	}
	atomic_fetch_add(&H.done, (size_t)got);
	return (size_t)got;
}

static void *helper(void *arg)
{
	uint32_t seen = atomic_load(&H.seq);
	uint64_t last = 0;

	(void)arg;
	for (;;) {
		uint32_t s = atomic_load(&H.seq);

		if (s != seen) {
			seen = s;
			atomic_fetch_add(&H.inside, 1);
			if (atomic_load(&H.open)) {
				size_t mine = 0;

				for (size_t i = CHUNKS; i-- > 0;)
					mine += take_chunk(i);
				atomic_fetch_add(&H.helped, mine);
			}
			atomic_fetch_sub(&H.inside, 1);
			last = sr_now_ns();
			continue;
		}
		if (last && sr_now_ns() - last < SPIN_NS) {
			relax();
			continue;
		}
		last = 0;
		atomic_store(&H.sleeping, true);
		if (atomic_load(&H.seq) == seen)
			syscall(SYS_futex, &H.seq, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
		atomic_store(&H.sleeping, false);
	}
	return NULL;
}

/*
 * A child of fork() has no helper thread: it starts its own (H.ready holds another pid). It
 * may also have been forked in the middle of a copy by another thread, with the job taken, a
 * helper counted inside it, or the start lock held: it starts from a clean job.
 */
static void at_fork_child(void)
{
	pthread_mutex_init(&H.start_lock, NULL);
	atomic_store(&H.busy, false);
	atomic_store(&H.open, false);
	atomic_store(&H.inside, 0);
	atomic_store(&H.sleeping, false);
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_register(void)
{
	pthread_atfork(NULL, NULL, at_fork_child);
}

static bool helper_ready(void)
{
	pid_t me = getpid();

	pthread_once(&fork_once, fork_register);

	if (atomic_load_explicit(&H.ready, memory_order_acquire) == me)
		return true;
	pthread_mutex_lock(&H.start_lock);
	if (atomic_load(&H.ready) != me && H.failed != me) {
		pthread_attr_t at;
		sigset_t all, old;
		pthread_t t;
		int err = -1;

		cpu_set_t cpus;

		if (!sched_getaffinity(0, sizeof(cpus), &cpus) && CPU_COUNT(&cpus) >= 2 &&
		    !pthread_attr_init(&at)) {
			/* Signals stay with the application's threads. */
			sigfillset(&all);
			pthread_sigmask(SIG_SETMASK, &all, &old);
			pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
			err = pthread_create(&t, &at, helper, NULL);
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			pthread_attr_destroy(&at);
		}
		if (!err) {
			pthread_setname_np(t, "sr-dcopy");
			atomic_store_explicit(&H.ready, me, memory_order_release);
		} else {
			H.failed = me;	/* one CPU, or no thread: copies stay whole */
		}
	}
	pthread_mutex_unlock(&H.start_lock);
	return atomic_load(&H.ready) == me;
}

/* The copy with the helper; BUSY when another thread of the process has the helper. */
static ssize_t shared(struct sr_nic *nic, pid_t pid, bool rd, const struct iovec *lv,
		      unsigned long ln, uintptr_t raddr, size_t len)
{
	bool f = false;
	size_t done, helped;
	int err;

	if (atomic_load_explicit(&H.busy, memory_order_relaxed) ||
	    !atomic_compare_exchange_strong(&H.busy, &f, true))
		return BUSY;
	H.pid = pid;
	H.rd = rd;
	H.lv = lv;
	H.ln = ln;
	H.raddr = raddr;
	H.len = len;
	H.chunk = ((len + CHUNKS - 1) / CHUNKS + PAGE - 1) & ~(PAGE - 1);
	for (size_t i = 0; i < CHUNKS; i++)
		atomic_store(&H.claimed[i], false);
	atomic_store(&H.done, 0);
	atomic_store(&H.helped, 0);
	atomic_store(&H.err, 0);
	atomic_store(&H.open, true);
	atomic_fetch_add(&H.seq, 1);
	if (atomic_load(&H.sleeping))
		syscall(SYS_futex, &H.seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	for (size_t i = 0; i < CHUNKS; i++)
		take_chunk(i);
	atomic_store(&H.open, false);
	/* At most the helper's last chunk; longer if it was preempted (or faults on the
	 * target's memory): then give the CPU away rather than spin against it. */
	for (uint64_t t0 = 0; atomic_load(&H.inside);) {
		uint64_t now = sr_now_ns();

		if (!t0)
			t0 = now;
		if (now - t0 < WAIT_SPIN_NS)
			relax();
		else
			sched_yield();
	}
	done = atomic_load(&H.done);
	err = atomic_load(&H.err);
	helped = atomic_load(&H.helped);
	atomic_store(&H.busy, false);
	if (helped)
		sr_stat_add(&nic->stats, SR_STAT_direct_helper_bytes, helped);
	if (err && done < len) {
		errno = err;
		return -1;
	}
	return (ssize_t)done;
}

/*
 * Shared or whole: whichever has been faster for copies of this size (a power-of-two class),
 * measured on the copies themselves. Sharing is not always faster: pinning the target's pages,
 * the kernel takes the lock of the page table that maps them for each page, one lock per
 * 2 MiB of address space; two threads copying within the same 2 MiB pass that lock's cache
 * line back and forth. On the 2-core VM a 1 MiB ib_write_bw measured 9-22 GB/s shared,
 * run by run, against 10-11 whole; 8 MiB, 7-10 against 3.5-4.2. So every PROBE_EVERY copies of
 * a class, PROBE copies go the other way; the first copy after a switch (the helper may have
 * to be woken) is not counted.
 */
#define PROBE_EVERY 64u
#define PROBE 3u
#define CLASSES 14

static struct {
	_Atomic uint32_t n;
	_Atomic uint64_t cost[2];	/* ns per MiB, moving average; 0: not measured yet */
} classes[2][CLASSES];	/* [READ][size class]: the two directions pin different sides */

ssize_t sr_dcopy(struct sr_nic *nic, pid_t pid, bool rd, const struct iovec *lv,
		 unsigned long ln, uintptr_t raddr, size_t len)
{
	long split = sr_params()->direct_split;

	if (split <= 0 || len < (size_t)split || len < CHUNKS * PAGE || ln > SLICE_MAX ||
	    !helper_ready())
		return one_call(pid, rd, lv, ln, raddr, len);

	int k = 63 - __builtin_clzll(len) - 18;
	typeof(&classes[0][0]) c = &classes[rd][k < 0 ? 0 : k >= CLASSES ? CLASSES - 1 : k];
	uint32_t phase = atomic_fetch_add_explicit(&c->n, 1, memory_order_relaxed) % PROBE_EVERY;
	uint64_t c0 = atomic_load_explicit(&c->cost[0], memory_order_relaxed);
	uint64_t c1 = atomic_load_explicit(&c->cost[1], memory_order_relaxed);
	int best = c1 <= c0 ? 1 : 0, mode = phase < PROBE ? !best : best;
	bool count = phase != 0 && phase != PROBE;
	uint64_t t0 = sr_now_ns();
	ssize_t n = BUSY;

	if (mode)
		n = shared(nic, pid, rd, lv, ln, raddr, len);
	if (n == BUSY) {
		n = one_call(pid, rd, lv, ln, raddr, len);
		mode = 0;
	}
	if (count && n == (ssize_t)len) {
		uint64_t ns = (uint64_t)((unsigned __int128)(sr_now_ns() - t0) * (1u << 20) / len) + 1;
		uint64_t old = atomic_load_explicit(&c->cost[mode], memory_order_relaxed);

		atomic_store_explicit(&c->cost[mode], old ? old - old / 4 + ns / 4 : ns,
				      memory_order_relaxed);
	}
	return n;
}
