/* SPDX-License-Identifier: MIT */
/*
 * Signals and softrdma's own threads.
 *
 * A signal sent to the process goes to any thread that does not block it. softrdma's internal
 * threads (the soft NIC's progress thread, the CM thread, the rsocket service thread) run no
 * application code, so they block every signal an application may handle: a SIGALRM that ends
 * qperf's wait in ibv_get_cq_event must reach the waiting thread (as EINTR), not run its handler
 * on a thread of ours. ibv_get_cq_event blocks the same set while it receives datagrams itself
 * and opens it only while it sleeps (core/cq.c). The signals a fault raises in the faulting
 * thread stay open: blocking them would not stop them, only make the kernel kill the process.
 */
#ifndef SR_CORE_SIG_H
#define SR_CORE_SIG_H

#include <pthread.h>
#include <signal.h>

/* Every signal but those a fault raises. */
static inline void sr_sigset_async(sigset_t *set)
{
	sigfillset(set);
	sigdelset(set, SIGSEGV);
	sigdelset(set, SIGBUS);
	sigdelset(set, SIGFPE);
	sigdelset(set, SIGILL);
	sigdelset(set, SIGTRAP);
	sigdelset(set, SIGABRT);
}

/* pthread_create for a thread of softrdma's own: it starts with sr_sigset_async blocked. */
static inline int sr_thread_create(pthread_t *t, const pthread_attr_t *attr,
				   void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	int ret;

	sr_sigset_async(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = pthread_create(t, attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ret;
}

#endif
