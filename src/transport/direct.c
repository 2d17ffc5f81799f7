/* SPDX-License-Identifier: MIT */
/*
 * The same-host direct path (param `direct`, docs/direct.md): the requester's side. A WRITE
 * (READ) to a softrdma process of this host and network namespace is copied into (out of) its
 * memory with process_vm_writev (readv), after the check its responder would make, against
 * the table it exports (core/direct.c, which says what is kept: keys, ordering,
 * deregistration, trust). A WRITE with immediate has its data placed so, and its immediate
 * then goes as a packet of its own (req.c): the peer's receive completes when that arrives.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/param.h"
#include "core/direct.h"
#include "transport/xport.h"

#define PEER_RETRY_NS 1000000000ull	/* look again for a peer that had no usable table */
#define PEER_EPERM_RETRY_NS 60000000000ull
#define PEER_CHECK_NS 100000000ull	/* how often a peer in use is checked to be alive */

/*
 * The clock of these timers (a second, a minute, 100 ms): the kernel's tick, at most a tick
 * (1-10 ms) behind CLOCK_MONOTONIC, for 8 ns a read where CLOCK_MONOTONIC costs 34 (Intel
 * Xeon, 2026-11-28). Every RC WRITE and READ posted looks at its peer here first, between
 * namespaces (no table) too.
 */
static uint64_t peer_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What a requester uses of a peer, copied under d->lock (the mapping itself stays valid:
 * retired mappings are unmapped only at close). */
struct peer_view {
	struct sr_dpeer *pe;
	uint8_t *base;
	pid_t pid;
	uint32_t nqp, nkey;
	uint64_t qp_off, key_off;
};

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

	pe->retry_ns = peer_now_ns() + PEER_RETRY_NS;
	dfd = sr_shm_dir_open(dir, sizeof(dir));
	if (dfd < 0 || sr_direct_table_name(d, &pe->addr, name, sizeof(name)))
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
	    !h->pid || sr_direct_proc_start((pid_t)h->pid) != h->start) {
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
	pe->checked_ns = peer_now_ns();
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

	if (sr_direct_proc_start(pe->pid) != pe->start)
		return false;
	dfd = sr_shm_dir_open(dir, sizeof(dir));
	if (dfd >= 0 && !sr_direct_table_name(d, &pe->addr, name, sizeof(name)) &&
	    !fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW))
		same = st.st_dev == pe->fdev && st.st_ino == pe->ino;
	if (dfd >= 0)
		close(dfd);
	return same;
}

/*
 * Checks that pe's table is still its owner's, or looks for one (d->lock held). Not cancelled
 * in here: the files' open, read and close are cancellation points, and a thread cancelled in
 * them would die holding d->lock -- and, on the receive path (a requester's progress after an
 * ACK), the NIC's receive lock, which the application's poll holds without disabling
 * cancellation (engine/nic.c, sr_nic_poll_at). Each once a second or 100 ms at most.
 */
__attribute__((noinline, cold)) static void peer_refresh(struct sr_direct *d, struct sr_dpeer *pe,
							 uint64_t now)
{
	int cstate;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cstate);
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
	pthread_setcancelstate(cstate, NULL);
}

/* The peer's table, for one WR: false when there is none to use now, and then *skip_ns: the
 * time before which asking again finds none either (the next look for a table, the end of an
 * EPERM's wait). now: peer_now_ns(). */
static bool peer_get(struct sr_direct *d, const struct sr_addr *a, struct peer_view *v,
		     uint64_t now, uint64_t *skip_ns)
{
	struct sr_dpeer *pe;
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
	*skip_ns = now + PEER_RETRY_NS;	/* no memory for pe: as a peer without a table */
	if (!pe)
		goto out;
	if (now < pe->refused_until) {
		*skip_ns = pe->refused_until;
		goto out;
	}
	if ((peer_valid(pe) && now - pe->checked_ns >= PEER_CHECK_NS) ||
	    (!peer_valid(pe) && now >= pe->retry_ns))
		peer_refresh(d, pe, now);
	if (peer_valid(pe)) {
		v->pe = pe;
		v->base = (uint8_t *)pe->map;
		v->pid = pe->pid;
		v->nqp = pe->nqp;
		v->nkey = pe->nkey;
		v->qp_off = pe->qp_off;
		v->key_off = pe->key_off;
		ok = true;
	} else {
		*skip_ns = pe->retry_ns;
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
		pe->refused_until = peer_now_ns() + PEER_EPERM_RETRY_NS;
	} else if (pe->map) {
		peer_retire(d, pe);
		pe->retry_ns = peer_now_ns() + PEER_RETRY_NS;
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
	struct sr_sgl sgl;	/* not zeroed: 1.6 KiB, written up to its n */
	struct iovec liov;
	const struct iovec *lv;
	unsigned long ln;
	struct peer_view v;
	struct dqp_data q;
	struct dkey_data kd;
	struct dkey *k;
	ssize_t n = -1;
	uint64_t now, skip;
	int err = 0;

	sgl.n = 0;
	bool imm = w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;

	if (!d || qp->type != IBV_QPT_RC || !w->length ||
	    (w->opcode != IBV_WR_RDMA_WRITE && !imm && !rd))
		return false;
	/* A peer without a table (another namespace or host: every WRITE of a ping-pong
	 * between namespaces came here) is not looked up again, under d->lock, before the
	 * next look for its table would be made anyway: the QP remembers until when. (Before
	 * d->use: d is not in the cache of a post that goes as a packet.) */
	now = peer_now_ns();
	if (now < qp->direct_skip_ns || !d->use)
		return false;
	if (!peer_get(d, &qp->peer, &v, now, &skip)) {
		qp->direct_skip_ns = skip;
		return false;
	}

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
	/* An MR, or a bound window (a type 2 one serves only the QP it is bound to). */
	if (seq_read(&k->seq, &k->d, &kd, sizeof(kd)) && kd.key == w->rkey && kd.pd == q.pd &&
	    (!kd.qpn || kd.qpn == q.qpn) &&
	    (kd.access & need) == need && in_range(w->raddr, w->length, kd.iova, kd.len)) {
		n = sr_dcopy(nic, v.pid, rd, lv, ln, (uintptr_t)(kd.base + (w->raddr - kd.iova)),
			     w->length);
		if (n < 0)
			err = errno;
	}
	atomic_fetch_sub(&k->busy, 1);
	sr_sgl_release(&sgl);
	if (n == (ssize_t)w->length) {
		sr_stat_inc(&nic->stats, rd ? SR_STAT_direct_reads : imm ? SR_STAT_direct_write_imms
									 : SR_STAT_direct_writes);
		sr_stat_add(&nic->stats, SR_STAT_direct_bytes, w->length);
		return true;
	}
	if (err == EPERM || err == ESRCH)
		peer_refused(d, v.pe, err);
fallback:
	sr_stat_inc(&nic->stats, SR_STAT_direct_fallbacks);
	return false;
}
