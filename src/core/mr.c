/* SPDX-License-Identifier: MIT */
/*
 * Memory regions, fast registration and the access check.
 *
 * Keys: index << 8 | tag. The index finds the object (MR or MW, mw.c) in the NIC's key table;
 * the 8-bit tag is random (getrandom) at every registration, as the IBA "key" portion that
 * ibv_inc_rkey advances. A key whose index is reused by a later registration misses unless the
 * tag also matches. Every access, local or remote, goes through sr_mem_get(): key, kind, state,
 * PD (and QP), bounds, rights.
 *
 * A fast-registration MR (softrdma_alloc_mr) has no memory of its own until a REG_MR work
 * request makes one of its maps valid; each key generation has its own map with its own state
 * (core.h, struct sr_frmap, and docs/memory.md). The maps and the window bindings are read by
 * the datapath and changed by the verbs and by local operations, all under nic->keys.lock.
 *
 * softrdma reaches registered memory through this process's virtual addresses, so nothing has
 * to be pinned; the `pin` parameter locks it anyway (mlock) for users who want it resident.
 *
 * On-Demand Paging (IBV_ACCESS_ON_DEMAND) MRs are never locked, and may cover address space
 * that is not (or no longer) mapped, up to the whole of it (implicit ODP: NULL, SIZE_MAX).
 * Before the engine touches an ODP range, sr_mr_get() faults it in with madvise
 * MADV_POPULATE_READ / _WRITE, which fails cleanly on a hole or a read-only mapping: the access
 * is then refused (remote access error / local protection error) instead of the stack taking
 * a SIGSEGV. (The application could still unmap between that check and the copy; that window
 * is the width of one packet's copy.) An munmap does not invalidate the MR, as on ODP
 * hardware (mlx5: the MMU notifier drops the device's page mappings, not the key): the MR
 * names virtual addresses, so whatever is mapped there at the access is reached, and a hole
 * is an access error (test_odp).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "core/log.h"
#include "core/param.h"
#include "wire/psn.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22	/* Linux 5.14 */
#define MADV_POPULATE_WRITE 23
#endif

#define SR_KEY_INDEX(k) ((k) >> 8)
#define SR_KEY_TAG(k) ((k)&0xffu)

/* Faults [p, p + len) in, writable if asked: 0, or -EFAULT if part of it is not mapped so. */
static int odp_fault(const uint8_t *p, uint64_t len, bool write)
{
	static long page;
	uintptr_t a, e;

	if (!len)
		return 0;
	if (!page)
		page = sysconf(_SC_PAGESIZE);
	a = (uintptr_t)p & ~(uintptr_t)(page - 1);
	e = (uintptr_t)p + len;
	if (e < (uintptr_t)p)
		return -EFAULT;
	if (madvise((void *)a, e - a, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0)
		return 0;
	return errno == EINVAL ? -EOPNOTSUPP : -EFAULT;
}

uint8_t sr_random8(void)
{
	uint8_t v;

	if (getrandom(&v, 1, 0) != 1)
		v = (uint8_t)(sr_now_ns() >> 7);	/* never seen; but not zero entropy */
	return v;
}

struct sr_kobj sr_kobj_dying;	/* type 0 */

uint64_t sr_kobj_serial(void)
{
	static _Atomic uint64_t next = 1;

	return atomic_fetch_add(&next, 1);
}

/* The object at a key's index, or NULL (keys lock held). */
static struct sr_kobj *key_slot(struct sr_nic *nic, uint32_t index)
{
	return index < nic->keys.size ? nic->keys.slot[index] : NULL;
}

static struct sr_mr *kobj_mr(struct sr_kobj *o)
{
	return o && o->type == SR_KOBJ_MR ? (struct sr_mr *)((char *)o - offsetof(struct sr_mr, k))
					  : NULL;
}

struct sr_mw *sr_kobj_mw(struct sr_kobj *o)
{
	return o && o->type == SR_KOBJ_MW ? (struct sr_mw *)((char *)o - offsetof(struct sr_mw, k))
					  : NULL;
}

/* The MR registered at index with this serial (keys lock held), or NULL. */
struct sr_mr *sr_mr_find(struct sr_nic *nic, uint32_t index, uint64_t serial)
{
	struct sr_mr *mr = kobj_mr(key_slot(nic, index));

	return mr && mr->k.serial == serial ? mr : NULL;
}

/* [va, va + len) inside [base, base + size), without overflow. */
static bool in_range(uint64_t va, uint64_t len, uint64_t base, uint64_t size)
{
	return va >= base && va - base <= size && len <= size - (va - base);
}

/* ---- the access check -------------------------------------------------------------------- */

/* What a checked key resolves to: an MR's memory, or one of its fast-registration maps. */
struct view {
	struct sr_mr *mr;		/* the MR to reference */
	const struct sr_frmap *map;	/* NULL: contiguous, base + (va - iova) */
	uint8_t *base;
	uint64_t iova;
	uint64_t lo, len;		/* the whole range the key covers */
};

/* A map invalidated after `a->psn` on the same QP still serves that access (core.h). */
static bool map_valid_at(const struct sr_frmap *m, const struct sr_acc *a)
{
	if (m->inval_qpn != a->qpn || !a->qpn)
		return false;
	if (a->space == SR_SPACE_REQ && !m->inval_resp && m->held)
		return sr_psn_lt(a->psn, m->inval_psn);
	if (a->space == SR_SPACE_RESP && m->inval_resp)
		return sr_psn_lt(a->psn, m->inval_psn);
	return false;
}

static struct sr_frmap *map_of(struct sr_frmr *fr, uint8_t tag)
{
	for (uint32_t i = 0; i < fr->nmaps; i++)
		if (fr->map[i].state != SR_MAP_UNUSED && fr->map[i].key == tag)
			return &fr->map[i];
	return NULL;
}

static enum sr_access_err check_frmr(struct sr_nic *nic, struct sr_mr *mr, const struct sr_acc *a,
				     uint32_t key, unsigned access, struct view *v)
{
	struct sr_frmap *m = map_of(mr->fr, (uint8_t)SR_KEY_TAG(key));

	if (!m || m->state == SR_MAP_FREE) {
		sr_stat_inc(&nic->stats, SR_STAT_key_stale);
		return SR_ACC_BAD_KEY;
	}
	if (m->state != SR_MAP_VALID) {
		if (!map_valid_at(m, a)) {
			sr_stat_inc(&nic->stats, SR_STAT_key_stale);
			return SR_ACC_BAD_KEY;
		}
		sr_stat_inc(&nic->stats, SR_STAT_map_replays);
	}
	if (mr->pd != a->pd)
		return SR_ACC_BAD_KEY;
	if ((m->access & access) != access)
		return SR_ACC_RIGHTS;
	v->mr = mr;
	v->map = m;
	v->lo = m->iova;
	v->len = m->length;
	return SR_ACC_OK;
}

static enum sr_access_err check_mw(struct sr_nic *nic, struct sr_mw *mw, const struct sr_acc *a,
				   uint32_t key, unsigned access, struct view *v)
{
	if (!a->remote)
		return SR_ACC_BAD_KEY;	/* a window has no lkey */
	if (mw->key != key || !mw->bound) {
		sr_stat_inc(&nic->stats, SR_STAT_key_stale);
		return SR_ACC_BAD_KEY;
	}
	/* IBA 10.6.7: the QP's PD is the window's; a type 2 window serves only its own QP. */
	if (mw->pd != a->pd || (mw->ibmw.type == IBV_MW_TYPE_2 && mw->qpn != a->qpn))
		return SR_ACC_BAD_KEY;
	if ((mw->access & access) != access)
		return SR_ACC_RIGHTS;
	v->mr = mw->mr;
	v->map = NULL;
	v->base = mw->mr->base;
	v->iova = mw->mr->iova;
	v->lo = mw->addr;
	v->len = mw->length;
	return SR_ACC_OK;
}

static enum sr_access_err check_mr(struct sr_mr *mr, const struct sr_acc *a, uint32_t key,
				   unsigned access, struct view *v)
{
	if ((a->remote ? mr->ibmr.rkey : mr->ibmr.lkey) != key || mr->pd != a->pd)
		return SR_ACC_BAD_KEY;
	if ((mr->access & access) != access)
		return SR_ACC_RIGHTS;
	v->mr = mr;
	v->map = NULL;
	v->base = mr->base;
	v->iova = mr->iova;
	v->lo = mr->iova;
	v->len = mr->length;
	return SR_ACC_OK;
}

/* Key, kind, state, PD, QP, rights (keys lock held); not the bounds. */
static enum sr_access_err check_key(struct sr_nic *nic, const struct sr_acc *a, uint32_t key,
				    unsigned access, struct view *v)
{
	struct sr_kobj *o = key ? key_slot(nic, SR_KEY_INDEX(key)) : NULL;
	struct sr_mr *mr;

	if (!o)
		return SR_ACC_BAD_KEY;
	if (o->type == SR_KOBJ_MW)
		return check_mw(nic, sr_kobj_mw(o), a, key, access, v);
	mr = kobj_mr(o);
	if (!mr)
		return SR_ACC_BAD_KEY;	/* sr_kobj_dying */
	if (mr->fr)
		return check_frmr(nic, mr, a, key, access, v);
	return check_mr(mr, a, key, access, v);
}

/* The process memory of [va, va + len) (inside the view's range): pieces into iov, merging
 * pages that happen to be adjacent. Returns the count, or -1 when max is not enough. */
static int view_iov(const struct view *v, uint64_t va, uint64_t len, struct iovec *iov, int max)
{
	const struct sr_frmap *m = v->map;
	int n = 0;

	if (!len)
		return 0;
	if (!m) {
		if (max < 1)
			return -1;
		iov[0].iov_base = v->base + (va - v->iova);
		iov[0].iov_len = len;
		return 1;
	}
	uint64_t off = va - m->iova + m->first_off;
	uint64_t psz = 1ull << m->page_shift;

	while (len) {
		uint64_t in = off & (psz - 1);
		uint64_t take = psz - in < len ? psz - in : len;
		uint8_t *p = m->pages[off >> m->page_shift] + in;

		if (n && (uint8_t *)iov[n - 1].iov_base + iov[n - 1].iov_len == p) {
			iov[n - 1].iov_len += take;
		} else {
			if (n == max)
				return -1;
			iov[n].iov_base = p;
			iov[n].iov_len = take;
			n++;
		}
		off += take;
		len -= take;
	}
	return n;
}

/* An access to mr in progress (keys lock held, or the slot read under sr_table_enter). */
static void mr_hold(struct sr_mr *mr)
{
	atomic_fetch_add(&mr->nic->keys.busy[mr->index], 1);
}

/*
 * The common case without the keys lock: a plain MR (no fast-registration maps, not a
 * window) whose key, PD and rights match. Reads the slot under sr_table_enter, which then is
 * the access's hold (sr_mr_put); every other case, and every refusal, is left to the locked
 * check, which counts and judges it as before. Fields read here change only while the slot
 * holds sr_kobj_dying (dereg, rereg) or before the slot is published (mr_create).
 */
static bool mem_get_fast(struct sr_nic *nic, const struct sr_acc *a, uint32_t key,
			 unsigned access, struct view *v)
{
	struct sr_table *t = &nic->keys;
	uint32_t i = SR_KEY_INDEX(key);
	struct sr_mr *mr;

	if (!key || i >= t->size)
		return false;
	mr = kobj_mr(sr_table_enter(t, i));
	if (mr && !mr->fr && check_mr(mr, a, key, access, v) == SR_ACC_OK)
		return true;
	sr_table_leave(t, i);
	return false;
}

struct sr_mr *sr_mem_get(struct sr_nic *nic, const struct sr_acc *a, uint32_t key, uint64_t va,
			 uint64_t len, unsigned access, struct iovec *iov, int max_iov, int *niov,
			 enum sr_access_err *err)
{
	struct view v;
	enum sr_access_err e;
	bool faulted = access & SR_ACCESS_FAULTED;
	int n = 0;

	access &= ~SR_ACCESS_FAULTED;
	if (mem_get_fast(nic, a, key, access, &v)) {
		if (in_range(va, len, v.lo, v.len) &&
		    (!iov || (n = view_iov(&v, va, len, iov, max_iov)) >= 0)) {
			e = SR_ACC_OK;
			goto held;
		}
		sr_mr_put(v.mr);	/* the locked check below refuses it */
	}
	pthread_mutex_lock(&nic->keys.lock);
	e = check_key(nic, a, key, access, &v);
	if (!e && !in_range(va, len, v.lo, v.len))
		e = SR_ACC_BOUNDS;
	if (!e && iov && (n = view_iov(&v, va, len, iov, max_iov)) < 0)
		e = SR_ACC_BOUNDS;	/* more pieces than the caller can take */
	if (!e)
		mr_hold(v.mr);
	pthread_mutex_unlock(&nic->keys.lock);
held:
	/* ODP: fault the range in first; a hole or a read-only mapping refuses the access. A
	 * packet of a message whose whole range was faulted in at its first packet is not again
	 * (SR_ACCESS_FAULTED): one madvise per message, not per packet. */
	if (!e && v.mr->odp && !faulted) {
		sr_stat_inc(&nic->stats, SR_STAT_odp_accesses);
		if (odp_fault(v.base + (va - v.iova), len,
			      access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_ATOMIC))) {
			sr_stat_inc(&nic->stats, SR_STAT_odp_access_errors);
			sr_mr_put(v.mr);
			e = SR_ACC_BOUNDS;
		}
	}
	*err = e;
	if (niov)
		*niov = e ? 0 : n;
	return e ? NULL : v.mr;
}

void sr_mr_put(struct sr_mr *mr)
{
	sr_table_leave(&mr->nic->keys, mr->index);
}

int sr_mem_flush(struct sr_nic *nic, const struct sr_acc *a, uint32_t key, uint64_t va,
		 uint64_t len, bool whole, unsigned access, bool persist, enum sr_access_err *err)
{
	struct view v;
	enum sr_access_err e;
	int ret = 0;

	pthread_mutex_lock(&nic->keys.lock);
	e = check_key(nic, a, key, access, &v);
	if (!e && whole) {
		va = v.lo;
		len = v.len;
	}
	if (!e && !in_range(va, len, v.lo, v.len))
		e = SR_ACC_BOUNDS;
	/* Persistence is granted on plain MRs only (registration checked the file mapping). */
	if (!e && persist && v.map)
		e = SR_ACC_RIGHTS;
	if (!e)
		mr_hold(v.mr);
	pthread_mutex_unlock(&nic->keys.lock);
	*err = e;
	if (e)
		return e;
	/* Global visibility: every store the responder made before this point (they were all
	 * executed in PSN order by this thread) is visible to every CPU after the fence. */
	atomic_thread_fence(memory_order_seq_cst);
	if (persist && len) {
		long pg = sysconf(_SC_PAGESIZE);
		uintptr_t p = (uintptr_t)(v.base + (va - v.iova));
		uintptr_t start = p & ~(uintptr_t)(pg - 1);

		sr_stat_inc(&nic->stats, SR_STAT_flush_msync);
		/* Raw: libc's msync is a cancellation point, and a FLUSH executes on the receive
		 * path under the NIC's receive lock (engine/nic.c, sr_nic_poll_at). */
		if (syscall(SYS_msync, start, (size_t)(p + len - start), MS_SYNC)) {
			sr_log_rl(SR_LOG_WARN, "FLUSH: msync of %llu bytes failed: %s",
				  (unsigned long long)len, strerror(errno));
			ret = -EIO;
		}
	}
	sr_mr_put(v.mr);
	return ret;
}

/* ---- registration ------------------------------------------------------------------------ */
static int mr_pin(void *addr, size_t len)
{
	struct rlimit rl;

	if (!len || !mlock(addr, len))
		return 0;
	getrlimit(RLIMIT_MEMLOCK, &rl);
	sr_err("ibv_reg_mr: cannot lock %zu bytes (SOFTRDMA_PIN=1): RLIMIT_MEMLOCK is %llu bytes; "
	       "raise it (ulimit -l) or leave SOFTRDMA_PIN unset (softrdma needs no pinning)",
	       len, (unsigned long long)rl.rlim_cur);
	return -ENOMEM;
}

/* Access flags an MR may carry; the rest is EINVAL, as the kernel's ib_check_mr_access. */
#define SR_MR_ACCESS_OK                                                                     \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |         \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |             \
	 IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_HUGETLB | SR_ACCESS_FLUSH_GLOBAL |          \
	 SR_ACCESS_FLUSH_PERSISTENT | IBV_ACCESS_ON_DEMAND)

int sr_mr_check_access(unsigned access)
{
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;	/* optional: may be ignored */
	if (access & ~SR_MR_ACCESS_OK)
		return -EINVAL;
	/* IBA 10.6.3.1 / C10-...: remote write and atomic need local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	return 0;
}

/*
 * Persistence needs a place to persist to: the whole range must be a shared mapping of a file
 * (MAP_SHARED), whose pages msync() writes back. Anonymous or private memory has none, and a
 * persistence FLUSH could not keep its promise: registration fails (as rxe refuses
 * IB_ACCESS_FLUSH_PERSISTENT on memory that is not persistent).
 */
static bool range_is_shared_file(const void *addr, size_t len)
{
	uintptr_t want = (uintptr_t)addr, end = want + len;
	char line[512];
	FILE *f;

	if (!len)
		return true;
	f = fopen("/proc/self/maps", "re");
	if (!f)
		return false;
	while (want < end && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, inode;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &inode) != 4)
			continue;
		if (hi <= want)
			continue;
		if (lo > want || perms[3] != 's' || !inode)
			break;
		want = hi;
	}
	fclose(f);
	return want >= end;
}

/* A new key (the index and a random tag) for both lkey and rkey. As kernel rxe, an MR has one
 * key for both whatever its rights (a fast-registration MR too: the maps say what it grants):
 * a remote access with it is checked against the rights, and a peer that learnt the rkey
 * before ibv_rereg_mr granted a remote right can use it afterwards (pyverbs's
 * test_mr_rereg_access). */
static void mr_set_keys(struct sr_mr *mr)
{
	uint32_t key = (mr->index << 8) | sr_random8();

	mr->ibmr.lkey = key;
	mr->ibmr.rkey = key;
	mr->ibmr.handle = mr->index;
}

static int mr_create(struct sr_pd *pd, void *addr, size_t length, uint64_t iova,
		     unsigned access, struct sr_frmr *fr, struct sr_mr **out)
{
	struct sr_nic *nic = pd->ctx->nic;
	struct sr_mr *mr;
	int ret, idx;

	ret = sr_mr_check_access(access);
	if (ret)
		return ret;
	/* Implicit ODP: the whole address space, ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND | ...). */
	bool implicit = !addr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND);

	if (!addr && length && !implicit)
		return -EINVAL;
	if (implicit)
		iova = 0;
	else if ((uintptr_t)addr + length < (uintptr_t)addr || iova + length < iova)
		return -EINVAL;
	if ((access & SR_ACCESS_FLUSH_PERSISTENT) && !range_is_shared_file(addr, length)) {
		sr_warn("ibv_reg_mr: persistent FLUSH access needs memory that can persist: a shared "
			"file mapping (mmap MAP_SHARED of a file) over the whole range");
		return -EINVAL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->odp = access & IBV_ACCESS_ON_DEMAND;
	if (sr_params()->pin && !mr->odp) {
		ret = mr_pin(addr, length);
		if (ret) {
			free(mr);
			return ret;
		}
		mr->pinned = true;
	}
	mr->pd = pd;
	mr->nic = nic;
	mr->base = addr;
	mr->iova = iova;
	mr->length = length;
	mr->access = access & SR_MR_ACCESS_OK;
	mr->fr = fr;
	mr->k.type = SR_KOBJ_MR;
	mr->k.serial = sr_kobj_serial();
	mr->ibmr.context = pd->ibpd.context;
	mr->ibmr.pd = &pd->ibpd;
	mr->ibmr.addr = addr;
	mr->ibmr.length = length;

	/* The index is reserved first, the keys set, then the MR published: no lookup (the
	 * lock-free one included) sees the slot without the keys. */
	pthread_mutex_lock(&nic->keys.lock);
	idx = sr_table_add_locked(&nic->keys, &sr_kobj_dying);
	if (idx >= 0 && (uint32_t)idx >= (1u << 24)) {
		__atomic_store_n(&nic->keys.slot[idx], NULL, __ATOMIC_RELEASE);
		nic->keys.count--;
		idx = -ENOMEM;
	}
	if (idx >= 0) {
		mr->index = (uint32_t)idx;
		mr_set_keys(mr);
		__atomic_store_n(&nic->keys.slot[idx], &mr->k, __ATOMIC_RELEASE);
		sr_direct_mr_publish(mr);
	}
	pthread_mutex_unlock(&nic->keys.lock);
	if (idx < 0) {
		if (mr->pinned)
			munlock(addr, length);
		free(mr);
		return -ENOMEM;
	}
	atomic_fetch_add(&pd->users, 1);
	*out = mr;
	return 0;
}

int sr_mr_reg(struct sr_pd *pd, void *addr, size_t length, uint64_t iova, unsigned access,
	      struct sr_mr **out)
{
	return mr_create(pd, addr, length, iova, access, NULL, out);
}

/* Waits until no access is in progress (a NIC finishes its DMA before dereg returns); the
 * slot holds sr_kobj_dying. */
static void mr_quiesce(struct sr_mr *mr)
{
	sr_table_drain(&mr->nic->keys, mr->index);
}

static void frmr_free(struct sr_frmr *fr)
{
	if (!fr)
		return;
	for (uint32_t i = 0; i < fr->nmaps; i++)
		free(fr->map[i].pages);
	free(fr);
}

int sr_mr_dereg(struct sr_mr *mr)
{
	struct sr_table *t = &mr->nic->keys;

	/* IBA 10.6.7.2.x: an MR with windows bound to it stays (rxe refuses too). */
	pthread_mutex_lock(&t->lock);
	if (mr->mw_bound) {
		pthread_mutex_unlock(&t->lock);
		return -EBUSY;
	}
	__atomic_store_n(&t->slot[mr->index], &sr_kobj_dying, __ATOMIC_SEQ_CST);
	sr_direct_mr_withdraw(mr);
	pthread_mutex_unlock(&t->lock);
	sr_direct_mr_wait(mr);
	mr_quiesce(mr);
	sr_table_free_index(t, mr->index);
	if (mr->pinned)
		munlock(mr->base, mr->length);
	atomic_fetch_sub(&mr->pd->users, 1);
	frmr_free(mr->fr);
	free(mr);
	return 0;
}

/* ibv_rereg_mr: IBV_REREG_MR_CHANGE_TRANSLATION / _PD / _ACCESS, keys kept (as rxe does). */
int sr_mr_rereg(struct sr_mr *mr, int flags, struct sr_pd *pd, void *addr, size_t length,
		unsigned access)
{
	struct sr_table *t = &mr->nic->keys;
	int ret;

	if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		      IBV_REREG_MR_CHANGE_ACCESS))
		return -EINVAL;
	if (!flags || mr->fr)
		return -EINVAL;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		ret = sr_mr_check_access(access);
		if (ret)
			return ret;
	}
	if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && !addr && length)
		return -EINVAL;
	/* An ODP MR stays ODP and the reverse (as mlx5: no rereg into or out of ODP). */
	if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && !(access & IBV_ACCESS_ON_DEMAND) != !mr->odp)
		return -EOPNOTSUPP;
	if ((flags & IBV_REREG_MR_CHANGE_PD) && !pd)
		return -EINVAL;
	{
		/* Persistence stays granted only over a shared file mapping (sr_mr_reg). */
		unsigned acc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : mr->access;
		void *a = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->base;
		size_t l = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : mr->length;

		if ((acc & SR_ACCESS_FLUSH_PERSISTENT) && !range_is_shared_file(a, l))
			return -EINVAL;
	}

	/* Take it out of service while it changes, then put it back under the same index. */
	pthread_mutex_lock(&t->lock);
	if (mr->mw_bound) {
		pthread_mutex_unlock(&t->lock);
		return -EBUSY;
	}
	__atomic_store_n(&t->slot[mr->index], &sr_kobj_dying, __ATOMIC_SEQ_CST);
	sr_direct_mr_withdraw(mr);
	pthread_mutex_unlock(&t->lock);
	sr_direct_mr_wait(mr);
	mr_quiesce(mr);
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		if (mr->pinned)
			munlock(mr->base, mr->length);
		mr->base = addr;
		mr->iova = (uintptr_t)addr;
		mr->length = length;
		mr->ibmr.addr = addr;
		mr->ibmr.length = length;
		if (mr->pinned && mr_pin(addr, length))
			mr->pinned = false;
		if (mr->odp && !addr && length == SIZE_MAX)
			mr->iova = 0;	/* implicit ODP again */
	}
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		atomic_fetch_sub(&mr->pd->users, 1);
		mr->pd = pd;
		mr->ibmr.pd = &pd->ibpd;
		atomic_fetch_add(&pd->users, 1);
	}
	pthread_mutex_lock(&t->lock);
	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		/* The keys stay, as kernel rxe keeps them (a peer's rkey stays valid; what it
		 * may do follows the new rights). */
		mr->access = access & SR_MR_ACCESS_OK;
	}
	__atomic_store_n(&t->slot[mr->index], &mr->k, __ATOMIC_RELEASE);
	sr_direct_mr_publish(mr);
	pthread_mutex_unlock(&t->lock);
	return 0;
}

/*
 * ibv_advise_mr: prefetch ODP ranges. PREFETCH faults pages in for reading, PREFETCH_WRITE for
 * writing (the MR must allow local write), PREFETCH_NO_FAULT only hints (MADV_WILLNEED: what
 * is in the page cache gets mapped, nothing is faulted). Always synchronous, so
 * IBV_ADVISE_MR_FLAG_FLUSH is honoured trivially. Errors as the kernel's: an lkey that is not an
 * ODP MR of this PD (or not writable for PREFETCH_WRITE) is ENOENT, a range outside the MR or
 * not mapped is EFAULT. Returns a positive errno (the verbs_context convention).
 */
int sr_mr_advise(struct sr_pd *pd, int advice, uint32_t flags, const struct ibv_sge *sge,
		 uint32_t num_sge)
{
	struct sr_nic *nic = pd->ctx->nic;

	if (!num_sge || !sge)
		return EINVAL;
	if (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH)
		return EOPNOTSUPP;
	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	for (uint32_t i = 0; i < num_sge; i++) {
		struct sr_mr *mr;
		uint64_t va = sge[i].addr, len = sge[i].length;
		int ret = 0;

		pthread_mutex_lock(&nic->keys.lock);
		mr = sge[i].lkey ? kobj_mr(key_slot(nic, SR_KEY_INDEX(sge[i].lkey))) : NULL;
		if (mr && mr->ibmr.lkey == sge[i].lkey)
			mr_hold(mr);
		else
			mr = NULL;
		pthread_mutex_unlock(&nic->keys.lock);
		if (!mr)
			return ENOENT;
		if (mr->pd != pd || !mr->odp ||
		    (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
		     !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
			ret = ENOENT;
		else if (va < mr->iova || va - mr->iova > mr->length ||
			 len > mr->length - (va - mr->iova))
			ret = EFAULT;
		else if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
			long page = sysconf(_SC_PAGESIZE);
			uintptr_t p = (uintptr_t)(mr->base + (va - mr->iova));
			uintptr_t a = p & ~(uintptr_t)(page - 1);

			if (len)
				madvise((void *)a, p + len - a, MADV_WILLNEED);	/* a hint: never fails */
		} else if (odp_fault(mr->base + (va - mr->iova), len,
				     advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE)) {
			ret = EFAULT;
		}
		sr_mr_put(mr);
		if (ret)
			return ret;
		sr_stat_inc(&nic->stats, SR_STAT_odp_prefetches);
	}
	return 0;
}
/* ---- fast registration ------------------------------------------------------------------- */
int sr_frmr_alloc(struct sr_pd *pd, uint32_t max_pages, struct sr_mr **out)
{
	uint32_t nmaps = (uint32_t)sr_params()->frmr_maps;
	struct sr_frmr *fr;
	int ret;

	if (!max_pages || max_pages > SR_FRMR_MAX_PAGES)
		return -EINVAL;
	if (nmaps < 2)
		nmaps = 2;
	if (nmaps > SR_FRMR_MAX_MAPS)
		nmaps = SR_FRMR_MAX_MAPS;
	fr = calloc(1, sizeof(*fr) + nmaps * sizeof(struct sr_frmap));
	if (!fr)
		return -ENOMEM;
	fr->max_pages = max_pages;
	fr->nmaps = nmaps;
	/* An MR of no memory of its own (length 0): its maps will say what it covers. */
	ret = mr_create(pd, NULL, 0, 0, 0, fr, out);
	if (ret)
		free(fr);
	return ret;
}

void sr_frmr_update_key(struct sr_mr *mr, uint8_t key)
{
	pthread_mutex_lock(&mr->nic->keys.lock);
	mr->ibmr.lkey = mr->ibmr.rkey = (mr->index << 8) | key;
	pthread_mutex_unlock(&mr->nic->keys.lock);
}

/* The slot a new map with tag `tag` goes to (keys lock held), or NULL (-EBUSY). */
static struct sr_frmap *map_slot(struct sr_frmr *fr, uint8_t tag)
{
	struct sr_frmap *same = map_of(fr, tag), *best = NULL;

	if (same)	/* re-mapping a generation: only one nobody can be using */
		return same->state == SR_MAP_FREE || (same->state == SR_MAP_INVALID && !same->held)
			       ? same
			       : NULL;
	for (uint32_t i = 0; i < fr->nmaps; i++) {
		struct sr_frmap *m = &fr->map[i];

		if (m->state == SR_MAP_UNUSED)
			return m;
		if (m->state == SR_MAP_INVALID && !m->held && (!best || m->seq < best->seq))
			best = m;
	}
	return best;
}

int sr_frmr_map(struct sr_mr *mr, const struct ibv_sge *sg, int nents, unsigned page_size)
{
	struct sr_frmr *fr = mr->fr;
	struct sr_frmap *m;
	uint64_t psz = page_size, total = 0, prev_end = 0;
	uint32_t shift, npages = 0;
	uint8_t **pages, **old;
	int mapped = 0;

	if (!fr || !sg || nents <= 0)
		return -EINVAL;
	if (page_size < 4096 || (page_size & (page_size - 1)) || page_size > (1u << 30))
		return -EINVAL;
	shift = (uint32_t)__builtin_ctz(page_size);
	pages = malloc(fr->max_pages * sizeof(*pages));
	if (!pages)
		return -ENOMEM;
	/* As the kernel's ib_sg_to_pages: the iova space has no holes, so every element but
	 * the first starts on a page boundary and every one but the last ends on one; mapping
	 * stops at the first element that breaks this or does not fit. */
	for (int i = 0; i < nents; i++) {
		uint64_t a = sg[i].addr, l = sg[i].length, first, last, n;

		if (!l || a + l < a)
			break;
		if (i > 0 && ((a & (psz - 1)) || (prev_end & (psz - 1))))
			break;
		first = a & ~(psz - 1);
		last = (a + l - 1) & ~(psz - 1);
		n = ((last - first) >> shift) + 1;
		if (npages + n > fr->max_pages)
			break;
		for (uint64_t k = 0; k < n; k++)
			pages[npages++] = (uint8_t *)(uintptr_t)(first + (k << shift));
		total += l;
		prev_end = a + l;
		mapped++;
	}
	if (!mapped) {
		free(pages);
		return -EINVAL;
	}
	pthread_mutex_lock(&mr->nic->keys.lock);
	m = map_slot(fr, (uint8_t)SR_KEY_TAG(mr->ibmr.rkey));
	if (!m) {
		pthread_mutex_unlock(&mr->nic->keys.lock);
		free(pages);
		return -EBUSY;
	}
	old = m->pages;
	memset(m, 0, sizeof(*m));
	m->state = SR_MAP_FREE;
	m->key = (uint8_t)SR_KEY_TAG(mr->ibmr.rkey);
	m->iova = sg[0].addr;
	m->length = total;
	m->page_shift = shift;
	m->first_off = (uint32_t)(sg[0].addr & (psz - 1));
	m->npages = npages;
	m->seq = ++fr->seq;
	m->pages = pages;
	mr->ibmr.addr = (void *)(uintptr_t)sg[0].addr;
	mr->ibmr.length = total;
	pthread_mutex_unlock(&mr->nic->keys.lock);
	free(old);
	return mapped;
}

/* Access a REG_MR may grant (softrdma_wr_reg_mr): what an MR may carry, without the ones a
 * page list cannot honour. */
int sr_frmr_check_reg_access(unsigned access)
{
	if (access & (SR_ACCESS_FLUSH_PERSISTENT | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND))
		return -EOPNOTSUPP;
	if (access & IBV_ACCESS_MW_BIND)
		return -EOPNOTSUPP;	/* windows on fast-registration MRs: not implemented */
	return sr_mr_check_access(access);
}

int sr_frmr_reg_exec(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_nic *nic = qp->nic;
	struct sr_mr *mr;
	struct sr_frmap *m;
	int st = IBV_WC_LOC_QP_OP_ERR;

	pthread_mutex_lock(&nic->keys.lock);
	mr = sr_mr_find(nic, w->u.reg.mr_index, w->u.reg.mr_serial);
	if (!mr || !mr->fr || mr->pd != qp->pd) {
		sr_log_rl(SR_LOG_INFO, "qp#%u: REG_MR of a freed or foreign MR", sr_qpn(qp));
		goto out;
	}
	/* The seed's rule: the map with this key must exist and be FREE. */
	m = map_of(mr->fr, (uint8_t)SR_KEY_TAG(w->u.reg.key));
	if (!m || m->state != SR_MAP_FREE) {
		sr_log_rl(SR_LOG_INFO, "qp#%u: REG_MR key 0x%x: no free map with that key",
			  sr_qpn(qp), w->u.reg.key);
		goto out;
	}
	m->state = SR_MAP_VALID;
	m->access = w->u.reg.access;
	st = 0;
out:
	pthread_mutex_unlock(&nic->keys.lock);
	return st;
}

/* Invalidation of a fast-registration map (keys lock held). */
static int frmr_invalidate(struct sr_qp *qp, struct sr_mr *mr, uint32_t key, bool remote,
			   uint32_t psn, bool *held)
{
	struct sr_frmap *m = map_of(mr->fr, (uint8_t)SR_KEY_TAG(key));

	if (!m || mr->pd != qp->pd)
		return -EINVAL;
	if (m->state == SR_MAP_INVALID)
		return 0;	/* again: nothing changes (as rxe) */
	if (m->state == SR_MAP_VALID) {
		m->inval_qpn = sr_qpn(qp);
		m->inval_psn = psn;
		m->inval_resp = remote;
		m->held = !remote;
		*held = !remote;
	}
	m->state = SR_MAP_INVALID;	/* a FREE map invalidated is simply dropped */
	return 0;
}

int sr_mw_invalidate_locked(struct sr_qp *qp, struct sr_mw *mw, uint32_t key, bool remote);

int sr_key_invalidate(struct sr_qp *qp, uint32_t key, bool remote, uint32_t psn, bool *held)
{
	struct sr_nic *nic = qp->nic;
	struct sr_kobj *o;
	struct sr_mr *mr;
	int ret = -EINVAL;

	*held = false;
	pthread_mutex_lock(&nic->keys.lock);
	o = key ? key_slot(nic, SR_KEY_INDEX(key)) : NULL;
	if (o && o->type == SR_KOBJ_MW) {
		ret = sr_mw_invalidate_locked(qp, sr_kobj_mw(o), key, remote);
	} else if ((mr = kobj_mr(o)) && mr->fr) {
		ret = frmr_invalidate(qp, mr, key, remote, psn, held);
	}
	/* An MR from ibv_reg_mr, or a type 1 window, cannot be invalidated (IBA 10.6.6). */
	pthread_mutex_unlock(&nic->keys.lock);
	if (ret)
		sr_log_rl(SR_LOG_INFO, "qp#%u: %s invalidate of key 0x%x refused", sr_qpn(qp),
			  remote ? "remote" : "local", key);
	return ret;
}

void sr_key_inval_done(struct sr_qp *qp, uint32_t key)
{
	struct sr_nic *nic = qp->nic;
	struct sr_mr *mr;
	struct sr_frmap *m;

	pthread_mutex_lock(&nic->keys.lock);
	mr = kobj_mr(key_slot(nic, SR_KEY_INDEX(key)));
	if (mr && mr->fr) {
		m = map_of(mr->fr, (uint8_t)SR_KEY_TAG(key));
		if (m && m->state == SR_MAP_INVALID && m->held && !m->inval_resp &&
		    m->inval_qpn == sr_qpn(qp))
			m->held = false;
	}
	pthread_mutex_unlock(&nic->keys.lock);
}
