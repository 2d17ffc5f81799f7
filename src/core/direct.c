/* SPDX-License-Identifier: MIT */
/*
 * The same-host direct path (param `direct`, docs/direct.md): the exported table. Its owner
 * publishes its keys and QPs here, under the objects' own locks; the requester's side (the
 * copy) is transport/direct.c.
 *
 * When both ends of an RC connection are softrdma processes of one host and one network
 * namespace, an RDMA WRITE (READ) needs no packet: the requester copies the payload into (out
 * of) the target's memory itself, with one process_vm_writev (process_vm_readv), after the
 * access check the target's responder would have made. The target never runs; a receiver that
 * spins on memory (ib_write_lat) sees the data as soon as the system call returns.
 *
 * What the check needs, each NIC exports in a shared file, <stats_dir>/softrdma-<uid>/
 * direct-<netns>-<ip>:<port>: a header (pid and start time of the process), one entry per QP
 * index (QPN, state, access flags, PD, peer) and one per key index (rkey, PD, rights, range,
 * where byte 0 is in the owner's memory). Entries are written by their owner under the lock
 * that guards the object (keys lock, QP lock) as seqlocks; the requester reads them lock-free.
 *
 * Semantics kept:
 * - Keys, rights, bounds and PD are checked as the responder checks them (sr_mem_get), and the
 *   target QP must be connected to this QP (its QPN and address), in a state that receives,
 *   with the QP-level remote access enabled. Anything else (a window, a fast-registration MR,
 *   a key that does not match, a failed copy) falls back to packets, where the responder
 *   judges it and answers with the IBA error: the direct path never decides an error itself.
 * - Ordering: a WR goes direct only when nothing is outstanding before it on its QP (every
 *   earlier WQE completed), so the data of a later request is never placed before an earlier
 *   one executes, and an earlier SEND with invalidate has been executed before a later WRITE
 *   is judged. It then completes at once, in order.
 * - Deregistration: each key entry has a `busy` count, raised by a requester around its copy.
 *   ibv_dereg_mr clears the entry, then waits until busy is 0 (Dekker: each side stores, then
 *   loads the other's word, with a full fence between): no copy lands in memory after
 *   ibv_dereg_mr has returned, as no DMA does on a NIC.
 *
 * Trust: the file is mode 0600 in a per-user 0700 directory, and process_vm_writev needs
 * ptrace rights over the target anyway (same user, and Yama permitting): a process that may
 * use this path could already write the target's memory directly. The checks are there for
 * IBA semantics, not as a security boundary against the same user. Where the kernel refuses
 * (EPERM: another user, Yama ptrace_scope >= 1, a non-dumpable target), the peer is marked
 * and packets are used.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/param.h"
#include "core/direct.h"

/* ---- helpers ------------------------------------------------------------------------------ */
static unsigned long long ns_inode(const char *which)
{
	struct stat st;

	return stat(which, &st) ? 0 : (unsigned long long)st.st_ino;
}

/* Field 22 of /proc/<pid>/stat: the start time, which tells a reused pid from its owner. */
uint64_t sr_direct_proc_start(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long v = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');

	/* After "pid (comm)": state is field 3, start time field 22. */
	for (int f = 2; p && f < 22; f++)
		p = strchr(p + 1, ' ');
	if (p)
		sscanf(p + 1, "%llu", &v);
	return v;
}

int sr_direct_table_name(const struct sr_direct *d, const struct sr_addr *a, char *buf,
			 size_t len)
{
	char as[80];

	return snprintf(buf, len, "direct-%llu-%s", d->netns, sr_addr_str(a, as, sizeof(as))) <
		       (int)len
		       ? 0
		       : -ENAMETOOLONG;
}

/* ---- the exported table ------------------------------------------------------------------ */
/* Tables of this process still open at exit() are removed by an exit hook (a killed process
 * leaves its table behind: the next owner of the address removes it, and requesters check
 * the owner's pid and start time). */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_direct *open_list[SR_MAX_DEVICES];
static pid_t open_pid;

static void direct_at_exit(void)
{
	pthread_mutex_lock(&open_lock);
	for (int i = 0; i < SR_MAX_DEVICES; i++) {
		if (open_list[i] && open_pid == getpid()) {
			atomic_store(&open_list[i]->map->open, 0);
			unlink(open_list[i]->path);
		}
		open_list[i] = NULL;
	}
	pthread_mutex_unlock(&open_lock);
}

static void open_track(struct sr_direct *d, bool add)
{
	static bool hooked;

	pthread_mutex_lock(&open_lock);
	if (!hooked) {
		hooked = true;
		atexit(direct_at_exit);
	}
	open_pid = getpid();
	for (int i = 0; i < SR_MAX_DEVICES; i++) {
		if (add ? !open_list[i] : open_list[i] == d) {
			open_list[i] = add ? d : NULL;
			break;
		}
	}
	pthread_mutex_unlock(&open_lock);
}

void sr_direct_open(struct sr_nic *nic)
{
	const struct sr_params *p = sr_params();
	struct sr_direct *d = calloc(1, sizeof(*d));
	char dir[256], name[160];
	int dfd, fd;

	if (!d)
		return;
	pthread_mutex_init(&d->lock, NULL);
	d->netns = ns_inode("/proc/self/ns/net");
	d->pidns = ns_inode("/proc/self/ns/pid");
	nic->direct = d;
	dfd = sr_shm_dir_open(dir, sizeof(dir));
	if (dfd < 0 || sr_direct_table_name(d, &nic->addr, name, sizeof(name)))
		goto out;
	/* Only one live NIC owns this address: a file under its name is a dead one's. */
	unlinkat(dfd, name, 0);
	if (!p->direct || nic->fault || nic->pcap || !d->netns)
		goto out;	/* faults and captures need every byte on the wire */

	size_t qp_off = 4096, key_off = qp_off + (size_t)nic->qps.size * sizeof(struct dqp);
	size_t len = key_off + (size_t)nic->keys.size * sizeof(struct dkey);

	fd = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		goto out;
	/* Sparse: only the pages of entries in use take memory. */
	void *m = ftruncate(fd, (off_t)len) ? MAP_FAILED
					    : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		unlinkat(dfd, name, 0);
		goto out;
	}
	struct dhdr *h = m;

	h->magic = DIRECT_MAGIC;
	h->version = DIRECT_VERSION;
	h->pid = (uint64_t)getpid();
	h->start = sr_direct_proc_start(getpid());
	h->pidns = d->pidns;
	h->nqp = nic->qps.size;
	h->nkey = nic->keys.size;
	h->qp_off = qp_off;
	h->key_off = key_off;
	atomic_store(&h->open, 1);
	d->map = h;
	d->len = len;
	snprintf(d->path, sizeof(d->path), "%s/%s", dir, name);
	d->use = true;
	open_track(d, true);
	sr_dbg("%s: direct path table %s", nic->dev->ibdev.name, d->path);
out:
	if (dfd >= 0)
		close(dfd);
}

void sr_direct_close(struct sr_nic *nic)
{
	struct sr_direct *d = nic->direct;

	if (!d)
		return;
	if (d->map) {
		open_track(d, false);
		atomic_store(&d->map->open, 0);
		unlink(d->path);
		munmap(d->map, d->len);
	}
	for (int pass = 0; pass < 2; pass++) {
		struct sr_dpeer *pe = pass ? d->dead : d->peers;

		while (pe) {
			struct sr_dpeer *next = pe->next;

			if (pe->map)
				munmap(pe->map, pe->len);
			free(pe);
			pe = next;
		}
	}
	pthread_mutex_destroy(&d->lock);
	free(d);
	nic->direct = NULL;
}

static void key_wait(struct dkey *k, uint32_t rkey);

static void key_write(struct sr_mr *mr, bool live)
{
	struct sr_direct *d = mr->nic->direct;
	struct dkey *k;

	if (!d || !d->map || mr->index >= d->map->nkey)
		return;
	k = key_ent(d->map, mr->index);
	seq_write_begin(&k->seq);
	memset(&k->d, 0, sizeof(k->d));
	if (live && !mr->fr && mr->ibmr.rkey) {
		k->d.key = mr->ibmr.rkey;
		k->d.access = mr->access;
		k->d.pd = (uint64_t)(uintptr_t)mr->pd;
		k->d.iova = mr->iova;
		k->d.len = mr->length;
		k->d.base = (uint64_t)(uintptr_t)mr->base;
	}
	seq_write_end(&k->seq);
}

void sr_direct_mr_publish(struct sr_mr *mr)
{
	key_write(mr, true);
}

void sr_direct_mr_withdraw(struct sr_mr *mr)
{
	key_write(mr, false);
}

void sr_direct_mr_wait(struct sr_mr *mr)
{
	struct sr_direct *d = mr->nic->direct;

	if (!d || !d->map || mr->index >= d->map->nkey)
		return;
	key_wait(key_ent(d->map, mr->index), mr->ibmr.rkey);
}

/* Waits until no requester copies through key entry k (a dereg's or an invalidation's wait:
 * the entry was cleared before; see sr_direct_mr_wait). */
static void key_wait(struct dkey *k, uint32_t rkey)
{
	uint64_t t0 = 0;

	atomic_thread_fence(memory_order_seq_cst);
	while (atomic_load(&k->busy)) {
		uint64_t now = sr_now_ns();

		if (!t0)
			t0 = now;
		if (now - t0 > 2000000000ull) {
			/* A requester died in the middle of a copy (a live one takes microseconds). */
			sr_warn("a same-host peer's copy through key 0x%x did not end in 2 s (a "
				"requester that died in it?); going on", rkey);
			break;
		}
		/* Raw: usleep is a cancellation point, and a remote invalidation or a bind
		 * waits here under the NIC's receive lock (engine/nic.c, sr_nic_poll_at). */
		(void)syscall(SYS_nanosleep, &(struct timespec){ .tv_nsec = 20000 }, NULL);
	}
}

/*
 * A memory window's entry (nic->keys.lock held): it follows every bind, unbind, invalidation
 * and deallocation. The old entry is cleared and its copies drained before the new one is
 * written, so that once the operation that changed the window has executed, no copy through
 * its old key is still landing (as with ibv_dereg_mr; the verb completes after this returns).
 * A window's entry carries its own range and rights; base is where its first byte is.
 */
void sr_direct_mw_update(struct sr_mw *mw, uint32_t old_key)
{
	struct sr_direct *d = mw->nic->direct;
	struct dkey *k;

	if (!d || !d->map || mw->index >= d->map->nkey)
		return;
	k = key_ent(d->map, mw->index);
	if (old_key) {
		seq_write_begin(&k->seq);
		memset(&k->d, 0, sizeof(k->d));
		seq_write_end(&k->seq);
		key_wait(k, old_key);
	}
	if (!mw->bound || !mw->mr || mw->mr->fr || !mw->key)
		return;
	seq_write_begin(&k->seq);
	k->d.key = mw->key;
	k->d.qpn = mw->qpn;
	k->d.access = mw->access;
	k->d.pd = (uint64_t)(uintptr_t)mw->pd;
	k->d.iova = mw->addr;
	k->d.len = mw->length;
	k->d.base = (uint64_t)(uintptr_t)(mw->mr->base + (mw->addr - mw->mr->iova));
	seq_write_end(&k->seq);
}

static void qp_write(struct sr_qp *qp, bool live)
{
	struct sr_direct *d = qp->nic->direct;
	uint32_t idx = qp->qpx.qp_base.handle;
	struct dqp *e;

	if (!d || !d->map || idx >= d->map->nqp || qp->type != IBV_QPT_RC)
		return;
	e = qp_ent(d->map, idx);
	seq_write_begin(&e->seq);
	memset(&e->d, 0, sizeof(e->d));
	if (live && qp->state != IBV_QPS_RESET) {
		e->d.qpn = sr_qpn(qp);
		e->d.dest_qpn = qp->attr.dest_qp_num;
		e->d.access = qp->attr.qp_access_flags;
		e->d.state = (uint8_t)qp->state;
		e->d.pd = (uint64_t)(uintptr_t)qp->pd;
		e->d.peer = qp->peer;
	}
	seq_write_end(&e->seq);
}

void sr_direct_qp_publish(struct sr_qp *qp)
{
	qp_write(qp, true);
}

void sr_direct_qp_withdraw(struct sr_qp *qp)
{
	qp_write(qp, false);
}
