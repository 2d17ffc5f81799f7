/* SPDX-License-Identifier: MIT */
/*
 * The library's side of the CM's guardian (guard.h, docs/cm.md "A process that dies").
 *
 * The kernel's rdma_cm ids live in the kernel: when their process dies, however it dies, the
 * kernel destroys them and sends a DREQ for each connection, so a peer waiting on a receive
 * learns at once that its connection is gone. A softrdma process's ids die with it. So, once
 * a connection over the IB CM is up, the process starts a guardian (softrdma-cm-guard, found
 * beside librdmacm.so.1) with the read end of a pipe whose write end only this process holds
 * (close-on-exec; a fork child closes its copy), and a shared memory file holding, for every
 * connection that is up, the DREQ that would end it. The table follows the connections from
 * the CM thread (cm_guard_sync) and from rdma_destroy_id (cm_guard_drop). When the process
 * ends, the pipe's end reaches the guardian, which sends the DREQs still in the table from a
 * soft NIC of its own and leaves. A process that destroyed its ids leaves an empty table: the
 * guardian then does nothing.
 *
 * SOFTRDMA_CM_GUARD=0 turns it off; without the helper next to the library there is none.
 * Every function here runs with cm.lock held.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cm/cm.h"
#include "cm/guard.h"
#include "core/fd.h"

extern char **environ;

static struct {
	int state;			/* 0: not started, 1: running, -1: off or failed */
	int wfd;			/* the pipe's write end (close-on-exec) */
	struct cm_guard_table *t;
	unsigned used;
} g = { .wfd = -1 };

static bool guard_wanted(void)
{
	const char *v = getenv("SOFTRDMA_CM_GUARD");

	return !v || strcmp(v, "0");
}

/* softrdma-cm-guard in the directory librdmacm.so.1 was loaded from. */
static bool helper_path(char *out, size_t n)
{
	Dl_info info;
	const char *slash;

	if (!dladdr((void *)helper_path, &info) || !info.dli_fname)
		return false;
	slash = strrchr(info.dli_fname, '/');
	if (!slash)
		return false;
	if ((size_t)(slash - info.dli_fname) + 1 + sizeof(CM_GUARD_HELPER) > n)
		return false;
	memcpy(out, info.dli_fname, (size_t)(slash - info.dli_fname) + 1);
	strcpy(out + (slash - info.dli_fname) + 1, CM_GUARD_HELPER);
	return access(out, X_OK) == 0;
}

/*
 * Starting the helper must not disturb the application. The helper forks the guardian off and
 * ends at once, and its end sends a SIGCHLD to the thread that started it. With the default
 * disposition the kernel drops it, but only if that thread does not have SIGCHLD blocked at
 * that moment: a blocked signal is never counted as ignored (its handler may change before it
 * is unblocked). It is then queued for the process, and the kernel wakes another thread to take
 * it, whose epoll_wait or poll returns EINTR although nothing is delivered. The CM thread
 * blocks every signal for a moment whenever it creates a thread (glibc does, around the
 * clone), posix_spawn blocks them all until its child has exec'd, and on a loaded machine the
 * helper ends inside such a moment often enough: fi_pingpong's fi_eq_sread failed with EINTR in
 * about 1 run in 10 (integration/test_libfabric; the kernel's signal_generate trace showed the
 * helper's SIGCHLD queued, not ignored). So a thread of its own starts the helper, with SIGCHLD
 * unblocked throughout, and waits for the helper's end before it leaves. It starts it as
 * posix_spawn would (a vfork-style clone whose child only makes system calls until the exec),
 * except for that one signal. The child keeps the other signals blocked across the exec, so no
 * handler of the application ever runs in it (exec resets them), and the helper sets its own
 * mask and dispositions first thing.
 */
struct spawn_args {
	const char *path;
	char *const *argv;
	char *const *envp;
	int rfd, tfd;
	bool keep_stderr;
	int err;		/* errno of what failed in the child; 0 if exec succeeded */
};

static long child_sys(struct spawn_args *a, long ret)
{
	if (ret < 0 && !a->err)
		a->err = errno;
	return ret;
}

/* The child: it shares the caller's memory and thread storage until the exec, so only system
 * calls (no library state, no sanitizer bookkeeping). */
__attribute__((no_sanitize("address", "undefined"), noinline))
static int spawn_child(void *arg)
{
	struct spawn_args *a = arg;
	static const char devnull[] = "/dev/null";
	long fd;

	child_sys(a, syscall(SYS_setsid));	/* a terminal's ^C to the process group: not ours */
	child_sys(a, syscall(SYS_dup3, a->rfd, CM_GUARD_FD_PIPE, 0));
	child_sys(a, syscall(SYS_dup3, a->tfd, CM_GUARD_FD_TABLE, 0));
	fd = child_sys(a, syscall(SYS_openat, AT_FDCWD, devnull, O_RDWR, 0));
	if (fd >= 0) {
		/* nothing of the application's output held open by the guardian */
		child_sys(a, syscall(SYS_dup3, fd, 0, 0));
		child_sys(a, syscall(SYS_dup3, fd, 1, 0));
		if (!a->keep_stderr)
			child_sys(a, syscall(SYS_dup3, fd, 2, 0));
		if (fd > 2)
			syscall(SYS_close, fd);
	}
	if (!a->err) {
		syscall(SYS_execve, a->path, a->argv, a->envp);
		a->err = errno;
	}
	syscall(SYS_exit, 127);
	return 127;
}

static int spawn_quiet(pid_t *pid, struct spawn_args *a)
{
	const size_t stack = 64 * 1024;
	sigset_t all, old;
	void *st;
	int r;

	st = mmap(NULL, stack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (st == MAP_FAILED)
		return errno;
	a->err = 0;
	sigfillset(&all);
	sigdelset(&all, SIGCHLD);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = clone(spawn_child, (char *)st + stack, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
	int e = errno;

	pthread_sigmask(SIG_SETMASK, &old, NULL);
	munmap(st, stack);
	if (r < 0)
		return e;
	*pid = r;
	if (a->err) {
		int st2;

		while (waitpid(r, &st2, 0) < 0 && errno == EINTR)
			;
		*pid = 0;
		return a->err;
	}
	return 0;
}

struct spawner {
	struct spawn_args a;
	sem_t done;		/* the child has exec'd (or failed): ret is set */
	int ret;
};

static void *spawner_run(void *arg)
{
	struct spawner *sp = arg;
	sigset_t chld;
	pid_t pid = 0;
	int st;

	pthread_setname_np(pthread_self(), "sr-cm-guard");
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	pthread_sigmask(SIG_UNBLOCK, &chld, NULL);
	sp->ret = spawn_quiet(&pid, &sp->a);
	sem_post(&sp->done);	/* sp is the caller's: not touched from here on */
	if (pid > 0)
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	return NULL;
}

/* The helper, started from a thread of its own (above); returns once it has exec'd. */
static int spawn_helper(struct spawn_args *a)
{
	struct spawner sp = { .a = *a };
	pthread_attr_t at;
	pthread_t t;
	int ret;

	if (sem_init(&sp.done, 0, 0))
		return errno;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	ret = pthread_create(&t, &at, spawner_run, &sp);
	pthread_attr_destroy(&at);
	if (!ret) {
		while (sem_wait(&sp.done) && errno == EINTR)
			;
		ret = sp.ret;
	}
	sem_destroy(&sp.done);
	return ret;
}

static int guard_start(void)
{
	char path[PATH_MAX];
	char *argv[] = { (char *)CM_GUARD_HELPER, NULL };
	int p[2] = { -1, -1 }, mfd = -1, rfd = -1, tfd = -1, ret;
	const char *v = getenv("SOFTRDMA_CM_GUARD");
	bool log = v && !strcmp(v, "log");
	void *map;

	if (!guard_wanted() || !helper_path(path, sizeof(path)))
		return -ENOENT;
	mfd = memfd_create("softrdma-cm-guard", MFD_CLOEXEC);
	if (mfd < 0 || ftruncate(mfd, sizeof(struct cm_guard_table)))
		goto fail;
	map = mmap(NULL, sizeof(struct cm_guard_table), PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (map == MAP_FAILED)
		goto fail;
	g.t = map;
	g.t->magic = CM_GUARD_MAGIC;
	g.t->nslots = CM_GUARD_SLOTS;
	if (pipe2(p, O_CLOEXEC))
		goto fail;
	/* Above the guardian's fixed numbers, so that the dup2s below never cross. */
	rfd = fcntl(p[0], F_DUPFD_CLOEXEC, 10);
	tfd = fcntl(mfd, F_DUPFD_CLOEXEC, 10);
	if (rfd < 0 || tfd < 0)
		goto fail;
	/* The environment without LD_PRELOAD: a preloaded library (librspreload under an
	 * rsocket application, say) is the application's, not the guardian's. */
	size_t ne = 0, k = 0;

	while (environ[ne])
		ne++;
	char **env = calloc(ne + 1, sizeof(*env));

	if (env) {
		for (size_t i = 0; i < ne; i++)
			if (strncmp(environ[i], "LD_PRELOAD=", 11))
				env[k++] = environ[i];
	}
	struct spawn_args sa = { .path = path, .argv = argv, .envp = env ? env : environ,
				  .rfd = rfd, .tfd = tfd, .keep_stderr = log };

	ret = spawn_helper(&sa);
	free(env);
	if (ret) {
		errno = ret;
		goto fail;
	}
	close(p[0]);
	close(rfd);
	close(tfd);
	close(mfd);
	/* above the application's numbers, as the library's other descriptors (core/fd.h) */
	g.wfd = sr_fd_high(p[1]);
	return 0;
fail:
	ret = -errno;
	{
		int fds[] = { p[0], p[1], mfd, rfd, tfd };

		for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
			if (fds[i] >= 0)
				close(fds[i]);
	}
	if (g.t)
		munmap(g.t, sizeof(*g.t));
	g.t = NULL;
	return ret;
}

static bool qualifies(const struct cm_id *id)
{
	if (!id->ibcm || id->id.ps == RDMA_PS_UDP || !id->dev || !id->ib.remote_id)
		return false;
	return id->state == CM_ESTABLISHED || id->state == CM_REP_SENT ||
	       id->state == CM_DREQ_SENT;
}

/* The DREQ that ends id's connection, in wire form: the one it sent (DREQ_SENT), or the one
 * rdma_disconnect would send now. */
static bool dreq_of(const struct cm_id *id, uint8_t *buf)
{
	struct ibcm_conn c = id->ib;
	struct ibcm_out out;

	if (c.state == IBCM_DREQ_SENT && c.have_last && c.last.hdr.attr_id == SR_CM_ATTR_DREQ)
		return sr_cm_mad_encode(&c.last, buf) == 0;
	if (ibcm_send_dreq(&c, NULL, 0, &out) || !out.send)
		return false;
	return sr_cm_mad_encode(&out.mad, buf) == 0;
}

static void slot_write(struct cm_id *id)
{
	struct cm_guard_slot *s = NULL;
	unsigned i;

	for (i = 0; i < CM_GUARD_SLOTS; i++) {
		if (!g.t->slot[i].used) {
			s = &g.t->slot[i];
			break;
		}
	}
	if (!s)
		return;	/* more connections than slots: this one's end goes unannounced */
	s->seq++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	if (!dreq_of(id, s->dreq)) {
		s->seq++;
		return;
	}
	s->local_id = id->local_id;
	memcpy(s->local_gid, id->dev->gid.raw, 16);
	memcpy(s->peer_gid, id->peer_gid.raw, 16);
	s->used = 1;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	s->seq++;
	id->guard_slot = i + 1;
	g.used++;
}

void cm_guard_drop(struct cm_id *id)
{
	if (!id->guard_slot || !g.t)
		return;
	g.t->slot[id->guard_slot - 1].used = 0;
	id->guard_slot = 0;
	g.used--;
}

void cm_guard_sync(void)
{
	if (g.state < 0)
		return;
	for (struct cm_id *id = cm.ids; id; id = id->next) {
		bool q = qualifies(id);

		if (q && !id->guard_slot) {
			if (!g.state) {
				g.state = guard_start() ? -1 : 1;
				if (g.state < 0)
					return;
			}
			slot_write(id);
		} else if (!q && id->guard_slot) {
			cm_guard_drop(id);
		}
	}
}

/* A fork child: the guardian and its table are the parent's (its copy of the pipe's write end
 * would keep the guardian waiting for the child too). Its own connections, if it makes any,
 * get a guardian of their own. */
static void guard_atfork_child(void)
{
	if (g.wfd >= 0)
		close(g.wfd);
	if (g.t)
		munmap(g.t, sizeof(*g.t));
	g.wfd = -1;
	g.t = NULL;
	g.used = 0;
	g.state = 0;
}

static void __attribute__((constructor)) guard_fork_hook(void)
{
	pthread_atfork(NULL, NULL, guard_atfork_child);
}
