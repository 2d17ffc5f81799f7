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
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>

#include "core/core.h"
#include "core/log.h"
#include "core/param.h"

#define SR_KEY_INDEX(k) ((k) >> 8)
#define SR_KEY_TAG(k) ((k)&0xffu)

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
	 IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_HUGETLB)

int sr_mr_check_access(unsigned access)
{
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE;	/* optional: may be ignored */
	if (access & IBV_ACCESS_ON_DEMAND)
		return -EOPNOTSUPP;
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
	if (!addr && length)
		return -EINVAL;
	if ((uintptr_t)addr + length < (uintptr_t)addr || iova + length < iova)
		return -EINVAL;
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	if (sr_params()->pin) {
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
