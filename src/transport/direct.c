/* SPDX-License-Identifier: MIT */
/*
 * The same-host direct path (param `direct`, docs/direct.md).
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
#include <sys/uio.h>
#include <unistd.h>

#include "core/log.h"
#include "core/param.h"
#include "transport/xport.h"

#define DIRECT_MAGIC 0x54445253u	/* "SRDT" */
#define DIRECT_VERSION 2u
#define PEER_RETRY_NS 1000000000ull	/* look again for a peer that had no usable table */
#define PEER_EPERM_RETRY_NS 60000000000ull
#define PEER_CHECK_NS 100000000ull	/* how often a peer in use is checked to be alive */

struct dhdr {
	uint32_t magic, version;
	uint64_t pid;
	uint64_t start;			/* the owner's start time (/proc/<pid>/stat field 22) */
	uint64_t pidns;			/* the owner's pid namespace (inode): pid means that */
	uint32_t nqp, nkey;		/* entries (powers of two: the table sizes) */
	uint64_t qp_off, key_off;	/* byte offsets of the entry arrays */
	_Atomic uint32_t open;		/* 1 while the NIC serves; 0 once it closed */
};

struct dqp_data {
	uint32_t qpn;			/* 0: no RC QP at this index */
	uint32_t dest_qpn;
	uint32_t access;		/* qp_access_flags */
	uint8_t state;
	uint64_t pd;
	struct sr_addr peer;
};
struct dqp {
	_Atomic uint32_t seq;		/* odd while being written */
	struct dqp_data d;
};

struct dkey_data {
	uint32_t key;			/* the rkey; 0: nothing usable at this index */
	uint32_t access;
	uint64_t pd;
	uint64_t iova, len;
	uint64_t base;			/* where iova is in the owner's memory */
};
struct dkey {
	_Atomic uint32_t seq;
	_Atomic uint32_t busy;		/* requesters copying through this key right now */
	struct dkey_data d;
};

struct sr_dpeer {
	struct sr_addr addr;
	struct dhdr *map;		/* NULL: no usable table (retry after retry_ns) */
	size_t len;
	pid_t pid;
	uint64_t start;			/* the owner's start time, as mapped */
	dev_t fdev;			/* the file mapped */
	ino_t ino;
	uint32_t nqp, nkey;		/* the table's geometry, validated once at open */
	uint64_t qp_off, key_off;
	uint64_t retry_ns;		/* not mapped: look again after this */
	uint64_t refused_until;		/* EPERM: packets until then (the mapping is kept) */
	uint64_t checked_ns;		/* last time the owner was seen alive */
	struct sr_dpeer *next;
};

/* What a requester uses of a peer, copied under d->lock (the mapping itself stays valid:
 * retired mappings are unmapped only at close). */
struct peer_view {
	struct sr_dpeer *pe;
	uint8_t *base;
	pid_t pid;
	uint32_t nqp, nkey;
	uint64_t qp_off, key_off;
};

struct sr_direct {
	bool use;			/* this NIC may go direct as a requester */
	char path[448];			/* our exported table ("" if none) */
	struct dhdr *map;
	size_t len;
	unsigned long long netns;	/* this process's network and pid namespaces (inodes) */
	unsigned long long pidns;
	pthread_mutex_t lock;		/* peers (a leaf lock) */
	struct sr_dpeer *peers;
	struct sr_dpeer *dead;		/* replaced mappings: another thread may still copy */
};

/* ---- helpers ------------------------------------------------------------------------------ */
static void seq_write_begin(_Atomic uint32_t *s)
{
	atomic_store_explicit(s, atomic_load_explicit(s, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static void seq_write_end(_Atomic uint32_t *s)
{
	atomic_fetch_add_explicit(s, 1, memory_order_release);
}

/* A consistent copy of an entry, or false when its owner keeps writing it. */
static bool seq_read(_Atomic uint32_t *s, const void *src, void *dst, size_t n)
{
	for (int tries = 0; tries < 64; tries++) {
		uint32_t a = atomic_load_explicit(s, memory_order_acquire);

		if (a & 1)
			continue;
		memcpy(dst, (const void *)src, n);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(s, memory_order_relaxed) == a)
			return true;
	}
	return false;
}

static unsigned long long ns_inode(const char *which)
{
	struct stat st;

	return stat(which, &st) ? 0 : (unsigned long long)st.st_ino;
}

/* Field 22 of /proc/<pid>/stat: the start time, which tells a reused pid from its owner. */
static uint64_t proc_start(pid_t pid)
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

static int table_name(const struct sr_direct *d, const struct sr_addr *a, char *buf, size_t len)
{
	char as[80];

	return snprintf(buf, len, "direct-%llu-%s", d->netns, sr_addr_str(a, as, sizeof(as))) <
		       (int)len
		       ? 0
		       : -ENAMETOOLONG;
}

static struct dqp *qp_ent(struct dhdr *h, uint32_t idx)
{
	return (struct dqp *)((uint8_t *)h + h->qp_off) + idx;
}

static struct dkey *key_ent(struct dhdr *h, uint32_t idx)
{
	return (struct dkey *)((uint8_t *)h + h->key_off) + idx;
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
	if (dfd < 0 || table_name(d, &nic->addr, name, sizeof(name)))
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
	h->start = proc_start(getpid());
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
	struct dkey *k;
	uint64_t t0 = 0;

	if (!d || !d->map || mr->index >= d->map->nkey)
		return;
	k = key_ent(d->map, mr->index);
	atomic_thread_fence(memory_order_seq_cst);
	while (atomic_load(&k->busy)) {
		uint64_t now = sr_now_ns();

		if (!t0)
			t0 = now;
		if (now - t0 > 2000000000ull) {
			/* A requester died in the middle of a copy (a live one takes microseconds). */
			sr_warn("ibv_dereg_mr: a same-host peer's copy through key 0x%x did not end in "
				"2 s (a requester that died in it?); going on", mr->ibmr.rkey);
			break;
		}
		usleep(20);
	}
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

/* ---- the requester's side ----------------------------------------------------------------- */
static bool peer_valid(struct sr_dpeer *pe)
{
	struct dhdr *h = pe->map;

	return h && atomic_load_explicit(&h->open, memory_order_acquire);
}

/* Takes pe's mapping out of use (d->lock held). It is not unmapped: another of our threads
 * may be copying through it right now; it goes at close. */
static void peer_retire(struct sr_direct *d, struct sr_dpeer *pe)
{
	struct sr_dpeer *old;

	if (!pe->map)
		return;
	old = calloc(1, sizeof(*old));
	if (!old)
		return;	/* kept in use: its copies fail and fall back */
	old->map = pe->map;
	old->len = pe->len;
	old->next = d->dead;
	d->dead = old;
	pe->map = NULL;
}

static void peer_open(struct sr_direct *d, struct sr_dpeer *pe)
{
	char dir[256], name[160];
	struct stat st;
	struct dhdr *h;
	int dfd, fd = -1;

	pe->retry_ns = sr_now_ns() + PEER_RETRY_NS;
	dfd = sr_shm_dir_open(dir, sizeof(dir));
	if (dfd < 0 || table_name(d, &pe->addr, name, sizeof(name)))
		goto out;
	fd = openat(dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || st.st_uid != geteuid() || !S_ISREG(st.st_mode) ||
	    (size_t)st.st_size < 4096)
		goto out;
	h = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		goto out;
	/* The geometry is read once, checked without overflow, and kept: the file is shared. */
	uint64_t size = (uint64_t)st.st_size, nqp = h->nqp, nkey = h->nkey;
	uint64_t qo = h->qp_off, ko = h->key_off;

	if (h->magic != DIRECT_MAGIC || h->version != DIRECT_VERSION || !atomic_load(&h->open) ||
	    !nqp || (nqp & (nqp - 1)) || nqp > (1u << 24) || !nkey || nkey > (1u << 24) ||
	    qo < sizeof(*h) || (qo & 7) || (ko & 7) || qo > size || ko > size ||
	    nqp * sizeof(struct dqp) > ko - qo || ko < qo ||
	    nkey * sizeof(struct dkey) > size - ko ||
	    h->pidns != d->pidns ||
	    !h->pid || proc_start((pid_t)h->pid) != h->start) {
		munmap(h, (size_t)st.st_size);	/* not a live softrdma table of ours to use */
		goto out;
	}
	peer_retire(d, pe);	/* the peer restarted: its old table */
	pe->map = h;
	pe->len = (size_t)st.st_size;
	pe->pid = (pid_t)h->pid;
	pe->start = h->start;
	pe->fdev = st.st_dev;
	pe->ino = st.st_ino;
	pe->nqp = (uint32_t)nqp;
	pe->nkey = (uint32_t)nkey;
	pe->qp_off = qo;
	pe->key_off = ko;
	pe->refused_until = 0;
	pe->checked_ns = sr_now_ns();
out:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
}

/* Is the owner of pe's table still the process that made it (and the file still there)?
 * A killed owner never clears `open`; its pid may even be reused. */
static bool peer_alive(struct sr_direct *d, struct sr_dpeer *pe)
{
	char dir[256], name[160];
	struct stat st;
	bool same = false;
	int dfd;

	if (proc_start(pe->pid) != pe->start)
		return false;
	dfd = sr_shm_dir_open(dir, sizeof(dir));
	if (dfd >= 0 && !table_name(d, &pe->addr, name, sizeof(name)) &&
	    !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW))
		same = st.st_dev == pe->fdev && st.st_ino == pe->ino;
	if (dfd >= 0)
		close(dfd);
	return same;
}

/* The peer's table, for one WR: false when there is none to use now. */
static bool peer_get(struct sr_direct *d, const struct sr_addr *a, struct peer_view *v)
{
	struct sr_dpeer *pe;
	uint64_t now = sr_now_ns();
	bool ok = false;

	pthread_mutex_lock(&d->lock);
	for (pe = d->peers; pe; pe = pe->next)
		if (sr_addr_eq(&pe->addr, a))
			break;
	if (!pe) {
		pe = calloc(1, sizeof(*pe));
		if (pe) {
			pe->addr = *a;
			pe->next = d->peers;
			d->peers = pe;
		}
	}
	if (!pe || now < pe->refused_until)
		goto out;
	if (peer_valid(pe) && now - pe->checked_ns >= PEER_CHECK_NS) {
		if (peer_alive(d, pe)) {
			pe->checked_ns = now;
		} else {
			peer_retire(d, pe);
			pe->retry_ns = 0;	/* a new owner's table may be there already */
		}
	}
	if (!peer_valid(pe) && now >= pe->retry_ns)
		peer_open(d, pe);
	if (peer_valid(pe)) {
		v->pe = pe;
		v->base = (uint8_t *)pe->map;
		v->pid = pe->pid;
		v->nqp = pe->nqp;
		v->nkey = pe->nkey;
		v->qp_off = pe->qp_off;
		v->key_off = pe->key_off;
		ok = true;
	}
out:
	pthread_mutex_unlock(&d->lock);
	return ok;
}

/* The kernel refused a copy: EPERM (not ours to write: packets for a while, the mapping
 * kept) or ESRCH (the owner is gone: its table is retired). */
static void peer_refused(struct sr_direct *d, struct sr_dpeer *pe, int err)
{
	pthread_mutex_lock(&d->lock);
	if (err == EPERM) {
		if (!pe->refused_until)
			sr_info("direct path to pid %d refused (EPERM: another user, Yama or a "
				"non-dumpable process); using packets", (int)pe->pid);
		pe->refused_until = sr_now_ns() + PEER_EPERM_RETRY_NS;
	} else if (pe->map) {
		peer_retire(d, pe);
		pe->retry_ns = sr_now_ns() + PEER_RETRY_NS;
	}
	pthread_mutex_unlock(&d->lock);
}

static bool in_range(uint64_t va, uint64_t len, uint64_t base, uint64_t size)
{
	return va >= base && va - base <= size && len <= size - (va - base);
}

bool sr_direct_exec(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_nic *nic = qp->nic;
	struct sr_direct *d = nic->direct;
	bool rd = w->opcode == IBV_WR_RDMA_READ;
	unsigned need = rd ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
	struct sr_sgl sgl = { .n = 0 };
	struct iovec liov;
	const struct iovec *lv;
	unsigned long ln;
	struct peer_view v;
	struct dqp_data q;
	struct dkey_data kd;
	struct dkey *k;
	ssize_t n = -1;
	int err = 0;

	if (!d || !d->use || qp->type != IBV_QPT_RC || !w->length ||
	    (w->opcode != IBV_WR_RDMA_WRITE && !rd))
		return false;
	if (!peer_get(d, &qp->peer, &v))
		return false;

	uint32_t dqpn = qp->attr.dest_qp_num, kidx = w->rkey >> 8;
	struct dqp *qe = (struct dqp *)(v.base + v.qp_off) + (dqpn & (v.nqp - 1));

	/* The target QP: connected to this one, receiving, remote access enabled. */
	if (!seq_read(&qe->seq, &qe->d, &q, sizeof(q)) ||
	    q.qpn != dqpn || q.dest_qpn != sr_qpn(qp) || !sr_addr_eq(&q.peer, &nic->addr) ||
	    (q.state != IBV_QPS_RTR && q.state != IBV_QPS_RTS && q.state != IBV_QPS_SQD &&
	     q.state != IBV_QPS_SQE) ||
	    (q.access & need) != need || kidx >= v.nkey)
		goto fallback;

	/* Our side, checked as for packets (the lkeys, judged at the PSN it would start at). */
	w->first_psn = qp->req.psn;
	if (w->inl) {
		liov.iov_base = sr_sq_inline(&qp->sq, qp->req.idx);
		liov.iov_len = w->length;
		lv = &liov;
		ln = 1;
	} else {
		struct sr_acc a = sr_acc_req(qp, w);

		if (sr_sgl_map(nic, &a, sr_sq_sges(&qp->sq, qp->req.idx), w->num_sge, 0, w->length,
			       rd ? IBV_ACCESS_LOCAL_WRITE : 0, &sgl))
			goto fallback;	/* the packet path reports the local error */
		lv = sgl.iov;
		ln = (unsigned long)sgl.n;
	}

	/* Their key: raise busy first, then read (a dereg clears, then waits for busy 0). */
	k = (struct dkey *)(v.base + v.key_off) + kidx;
	atomic_fetch_add(&k->busy, 1);
	atomic_thread_fence(memory_order_seq_cst);	/* Dekker: our store before its load */
	if (seq_read(&k->seq, &k->d, &kd, sizeof(kd)) && kd.key == w->rkey && kd.pd == q.pd &&
	    (kd.access & need) == need && in_range(w->raddr, w->length, kd.iova, kd.len)) {
		n = sr_dcopy(nic, v.pid, rd, lv, ln, (uintptr_t)(kd.base + (w->raddr - kd.iova)),
			     w->length);
		if (n < 0)
			err = errno;
	}
	atomic_fetch_sub(&k->busy, 1);
	sr_sgl_release(&sgl);
	if (n == (ssize_t)w->length) {
		sr_stat_inc(&nic->stats, rd ? SR_STAT_direct_reads : SR_STAT_direct_writes);
		sr_stat_add(&nic->stats, SR_STAT_direct_bytes, w->length);
		return true;
	}
	if (err == EPERM || err == ESRCH)
		peer_refused(d, v.pe, err);
fallback:
	sr_stat_inc(&nic->stats, SR_STAT_direct_fallbacks);
	return false;
}
