/* SPDX-License-Identifier: MIT */
/*
 * Memory regions and the access check.
 *
 * Keys: index << 8 | tag. The index finds the MR in the NIC's key table; the 8-bit tag is
 * random (getrandom) at every registration, as the IBA "key" portion that ibv_inc_rkey
 * advances. A key whose index is reused by a later registration misses unless the tag also
 * matches. Every access, local or remote, goes through sr_mr_get(): key, PD, bounds, rights.
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
 * is the width of one packet's copy.)
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/core.h"
#include "core/log.h"
#include "core/param.h"

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

struct sr_mr *sr_mr_get(struct sr_nic *nic, uint32_t key, bool remote, struct sr_pd *pd,
			uint64_t va, uint64_t len, unsigned access, uint8_t **ptr,
			enum sr_access_err *err)
{
	struct sr_table *t = &nic->keys;
	uint32_t index = SR_KEY_INDEX(key);
	struct sr_mr *mr = NULL;

	pthread_mutex_lock(&t->lock);
	if (index < t->size)
		mr = t->slot[index];
	if (mr && (remote ? mr->ibmr.rkey : mr->ibmr.lkey) == key && key)
		atomic_fetch_add(&mr->refs, 1);
	else
		mr = NULL;
	pthread_mutex_unlock(&t->lock);

	if (!mr || mr->pd != pd) {
		*err = SR_ACC_BAD_KEY;
		goto fail;
	}
	if ((mr->access & access) != access) {
		*err = SR_ACC_RIGHTS;
		goto fail;
	}
	/* [va, va + len) inside [iova, iova + length), without overflow. */
	if (va < mr->iova || va - mr->iova > mr->length || len > mr->length - (va - mr->iova)) {
		*err = SR_ACC_BOUNDS;
		goto fail;
	}
	*ptr = mr->base + (va - mr->iova);
	if (mr->odp) {
		sr_stat_inc(&nic->stats, SR_STAT_odp_accesses);
		if (odp_fault(*ptr, len, access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						   IBV_ACCESS_REMOTE_ATOMIC))) {
			sr_stat_inc(&nic->stats, SR_STAT_odp_access_errors);
			*err = SR_ACC_BOUNDS;
			goto fail;
		}
	}
	*err = SR_ACC_OK;
	return mr;
fail:
	if (mr)
		sr_mr_put(mr);
	return NULL;
}

void sr_mr_put(struct sr_mr *mr)
{
	atomic_fetch_sub(&mr->refs, 1);
}

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
	 IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_HUGETLB | IBV_ACCESS_ON_DEMAND)

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

static void mr_set_keys(struct sr_mr *mr)
{
	uint32_t key = (mr->index << 8) | sr_random8();

	mr->ibmr.lkey = key;
	mr->ibmr.rkey = (mr->access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				       IBV_ACCESS_REMOTE_ATOMIC)) ? key : 0;
	mr->ibmr.handle = mr->index;
}

int sr_mr_reg(struct sr_pd *pd, void *addr, size_t length, uint64_t iova, unsigned access,
	      struct sr_mr **out)
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
	atomic_store(&mr->refs, 1);
	mr->ibmr.context = pd->ibpd.context;
	mr->ibmr.pd = &pd->ibpd;
	mr->ibmr.addr = addr;
	mr->ibmr.length = length;

	idx = sr_table_add(&nic->keys, mr);
	if (idx < 0 || (uint32_t)idx >= (1u << 24)) {
		if (idx >= 0)
			sr_table_del(&nic->keys, (uint32_t)idx);
		if (mr->pinned)
			munlock(addr, length);
		free(mr);
		return -ENOMEM;
	}
	mr->index = (uint32_t)idx;
	mr_set_keys(mr);
	atomic_fetch_add(&pd->users, 1);
	*out = mr;
	return 0;
}

/* Waits until no access is in progress (a NIC finishes its DMA before dereg returns). */
static void mr_quiesce(struct sr_mr *mr)
{
	while (atomic_load(&mr->refs) > 1)
		sched_yield();
}

int sr_mr_dereg(struct sr_mr *mr)
{
	sr_table_del(&mr->nic->keys, mr->index);
	mr_quiesce(mr);
	if (mr->pinned)
		munlock(mr->base, mr->length);
	atomic_fetch_sub(&mr->pd->users, 1);
	free(mr);
	return 0;
}

/* ibv_rereg_mr: IBV_REREG_MR_CHANGE_TRANSLATION / _PD / _ACCESS, keys kept (as rxe does). */
int sr_mr_rereg(struct sr_mr *mr, int flags, struct sr_pd *pd, void *addr, size_t length,
		unsigned access)
{
	int ret;

	if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		      IBV_REREG_MR_CHANGE_ACCESS))
		return -EINVAL;
	if (!flags)
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

	/* Take it out of service while it changes, then put it back under the same index. */
	pthread_mutex_lock(&mr->nic->keys.lock);
	mr->nic->keys.slot[mr->index] = NULL;
	pthread_mutex_unlock(&mr->nic->keys.lock);
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
	if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
		mr->access = access & SR_MR_ACCESS_OK;
		mr_set_keys(mr);
	}
	pthread_mutex_lock(&mr->nic->keys.lock);
	mr->nic->keys.slot[mr->index] = mr;
	pthread_mutex_unlock(&mr->nic->keys.lock);
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
		uint32_t index = SR_KEY_INDEX(sge[i].lkey);
		struct sr_table *t = &nic->keys;
		struct sr_mr *mr = NULL;
		uint64_t va = sge[i].addr, len = sge[i].length;
		int ret = 0;

		pthread_mutex_lock(&t->lock);
		if (index < t->size)
			mr = t->slot[index];
		if (mr && mr->ibmr.lkey == sge[i].lkey && sge[i].lkey)
			atomic_fetch_add(&mr->refs, 1);
		else
			mr = NULL;
		pthread_mutex_unlock(&t->lock);
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
