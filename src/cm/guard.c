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
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cm/cm.h"
#include "cm/guard.h"
#include "core/fd.h"

extern char **environ;

static struct {
	int state;			/* 0: not started, 1: running, -1: off or failed */
	int wfd;			/* the pipe's write end (close-on-exec) */
	pid_t pid;			/* the helper until it has forked the guardian off */
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

static int guard_start(void)
{
	char path[PATH_MAX];
	char *argv[] = { (char *)CM_GUARD_HELPER, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, dfl;
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
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, rfd, CM_GUARD_FD_PIPE);
	posix_spawn_file_actions_adddup2(&fa, tfd, CM_GUARD_FD_TABLE);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (!log)	/* nothing of the application's output held open by the guardian */
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGINT);
	sigaddset(&dfl, SIGTERM);
	sigaddset(&dfl, SIGHUP);
	sigaddset(&dfl, SIGPIPE);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dfl);
	/* A session of its own: a terminal's ^C to the process group does not reach it. */
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
					  POSIX_SPAWN_SETSID);
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
	ret = posix_spawn(&g.pid, path, &fa, &at, argv, env ? env : environ);
	free(env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
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
	g.pid = 0;
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
	if (g.pid > 0) {
		/* The helper forks the guardian off and leaves at once: reaped here, never
		 * waited for under the lock. */
		int st;
		pid_t r = waitpid(g.pid, &st, WNOHANG);

		if (r == g.pid || (r < 0 && errno == ECHILD))
			g.pid = 0;
	}
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
	g.pid = 0;
	g.used = 0;
	g.state = 0;
}

static void __attribute__((constructor)) guard_fork_hook(void)
{
	pthread_atfork(NULL, NULL, guard_atfork_child);
}
