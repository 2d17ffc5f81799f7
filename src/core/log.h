/* SPDX-License-Identifier: MIT */
/*
 * Levelled logging to stderr, prefixed "softrdma: ". Level from the `log` parameter. Messages
 * that a hostile peer can trigger go through sr_log_rl() (rate limited: at most a burst of 10
 * per second per call site, then a count of suppressed messages).
 */
#ifndef SR_CORE_LOG_H
#define SR_CORE_LOG_H

#include <stdatomic.h>
#include <stdint.h>

enum sr_log_level { SR_LOG_ERROR, SR_LOG_WARN, SR_LOG_INFO, SR_LOG_DEBUG };

extern int sr_log_level;	/* set from the parameter at the first sr_params() */

void sr_log_msg(enum sr_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parameter crash_trace: a backtrace on stderr for a crash signal whose handler is the default. */
void sr_crash_trace_install(void);

struct sr_ratelimit {
	_Atomic uint64_t window_start_ns;
	_Atomic uint32_t count;
	_Atomic uint32_t suppressed;
};
/* true when a message may be printed now (prints the suppressed count itself). */
int sr_ratelimit_ok(struct sr_ratelimit *rl);

#define sr_log(lvl, ...)                                                       \
	do {                                                                   \
		if ((lvl) <= sr_log_level)                                     \
			sr_log_msg((lvl), __VA_ARGS__);                        \
	} while (0)
#define sr_err(...) sr_log(SR_LOG_ERROR, __VA_ARGS__)
#define sr_warn(...) sr_log(SR_LOG_WARN, __VA_ARGS__)
#define sr_info(...) sr_log(SR_LOG_INFO, __VA_ARGS__)
#define sr_dbg(...) sr_log(SR_LOG_DEBUG, __VA_ARGS__)
/* Rate-limited, for anything a remote peer can provoke. */
#define sr_log_rl(lvl, ...)                                                    \
	do {                                                                   \
		static struct sr_ratelimit _rl;                                \
		if ((lvl) <= sr_log_level && sr_ratelimit_ok(&_rl))            \
			sr_log_msg((lvl), __VA_ARGS__);                        \
	} while (0)

#endif /* SR_CORE_LOG_H */
