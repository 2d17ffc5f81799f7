/* SPDX-License-Identifier: MIT */
/*
 * Levelled logging to stderr and the per-call-site rate limiter.
 *
 * Each message is formatted into one buffer and written with a single write(2): stdio would
 * split a line into several writes, and the progress thread's lines would then interleave with
 * the application's. A line longer than the buffer is cut and marked with "...".
 */
#include "core/log.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int sr_log_level = SR_LOG_WARN;

#define SR_LOG_PREFIX "softrdma: "
#define SR_LOG_LINE_MAX 1024

#define SR_RL_BURST 10
#define SR_RL_WINDOW_NS 1000000000ULL

/* A raw write: libc's is a cancellation point, and the receive path logs (rate-limited) under
 * the NIC's receive lock, which a cancelled thread would never release (engine/nic.c,
 * sr_nic_poll_at). */
static void log_write(const char *buf, size_t len)
{
	while (len) {
		ssize_t n = (ssize_t)syscall(SYS_write, STDERR_FILENO, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;	/* nowhere to report a failing stderr */
		buf += n;
		len -= n;
	}
}

void sr_log_msg(enum sr_log_level lvl, const char *fmt, ...)
{
	char buf[SR_LOG_LINE_MAX];
	size_t pre = sizeof(SR_LOG_PREFIX) - 1, len;
	int saved = errno;	/* callers log, then return -errno: keep it intact */
	va_list ap;
	int n;

	(void)lvl;
	memcpy(buf, SR_LOG_PREFIX, pre);
	va_start(ap, fmt);
	/* Room is kept for the newline. */
	n = vsnprintf(buf + pre, sizeof(buf) - pre - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	len = pre + (size_t)n;
	if (len > sizeof(buf) - 2) {
		len = sizeof(buf) - 2;
		memcpy(buf + len - 3, "...", 3);
	}
	/* A caller's own trailing newline would make an empty line. */
	if (len > pre && buf[len - 1] == '\n')
		len--;
	buf[len++] = '\n';
	log_write(buf, len);
	errno = saved;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	/* Coarse is plenty for a one-second window and costs no syscall. */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * Parameter crash_trace. A crash in a test that ran a real client as a separate process
 * (test_rdmacm_utils' cmtime server, once) leaves only an exit status, and no core file where
 * the machine keeps none. With this, stderr (which the suites keep) has the thread's frames as
 * "library(+offset)", for addr2line. Only async-signal-safe calls, after a first backtrace()
 * at install time has loaded what it needs; then the default action, so the exit status stays.
 */
static void crash_handler(int sig)
{
	void *frames[64];
	char msg[96];
	int n, len;

	len = snprintf(msg, sizeof(msg), "softrdma crash_trace: signal %d (%s) in pid %d tid %ld\n",
		       sig, sig == SIGSEGV ? "SIGSEGV" : sig == SIGABRT ? "SIGABRT" : "", (int)getpid(),
		       (long)syscall(SYS_gettid));
	if (len > 0 && write(STDERR_FILENO, msg, (size_t)len) < 0)
		len = 0;
	n = backtrace(frames, 64);
	backtrace_symbols_fd(frames, n, STDERR_FILENO);
	signal(sig, SIG_DFL);
	raise(sig);
}

void sr_crash_trace_install(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
	void *frames[2];

	backtrace(frames, 2);	/* loads the unwinder now, not inside the handler */
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		struct sigaction old, sa;

		if (sigaction(sigs[i], NULL, &old) || old.sa_handler != SIG_DFL ||
		    (old.sa_flags & SA_SIGINFO))
			continue;	/* the program (or a sanitizer) has its own */
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = crash_handler;
		sa.sa_flags = SA_RESETHAND;
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}

int sr_ratelimit_ok(struct sr_ratelimit *rl)
{
	uint64_t now = now_ns();
	uint64_t start = atomic_load_explicit(&rl->window_start_ns, memory_order_relaxed);

	/* Whoever moves the window on reports what the old one swallowed. Between the CAS and
	 * the reset of count a racing thread may be counted in the old window: harmless, the
	 * limit is about volume, not exactness. */
	if (start == 0 || now - start >= SR_RL_WINDOW_NS) {
		if (atomic_compare_exchange_strong(&rl->window_start_ns, &start, now ? now : 1)) {
			uint32_t missed = atomic_exchange(&rl->suppressed, 0);

			atomic_store(&rl->count, 0);
			if (missed)
				sr_log_msg(SR_LOG_WARN, "%u messages suppressed", missed);
		}
	}
	if (atomic_fetch_add_explicit(&rl->count, 1, memory_order_relaxed) < SR_RL_BURST)
		return 1;
	atomic_fetch_add_explicit(&rl->suppressed, 1, memory_order_relaxed);
	return 0;
}
