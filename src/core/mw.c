/* SPDX-License-Identifier: MIT */
/*
 * Memory windows (IBA 10.6.7). A window is a key of its own over a range of an MR, with rights
 * of its own; a remote access through it is checked against the window's range and rights,
 * never the MR's (mr.c, check_mw).
 *
 *   Type 1: allocated unbound; ibv_bind_mw posts a bind with the next key tag (ibv_inc_rkey);
 *           a bind of length 0 unbinds. Usable through any QP of the window's PD. Cannot be
 *           invalidated.
 *   Type 2: allocated Free; bound by an IBV_WR_BIND_MW work request (only when Free) with the
 *           key the application chose (same index, new tag), to the QP that posted it: only
 *           that QP may use it, or invalidate it remotely (SEND with invalidate); LOCAL_INV on
 *           any QP of its PD returns it to Free.
 *
 * The MR must grant IBV_ACCESS_MW_BIND (C10-73), local write when the window grants remote
 * write or atomic (C10-74), and contain the window (C10-75). While a window is bound to it, an
 * MR cannot be deregistered (EBUSY). Every field a lookup reads is guarded by nic->keys.lock.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/core.h"
#include "core/log.h"
#include "core/post.h"

int sr_mw_alloc(struct sr_pd *pd, enum ibv_mw_type type, struct sr_mw **out)
{
	struct sr_nic *nic = pd->ctx->nic;
	struct sr_table *t = &nic->keys;
	struct sr_mw *mw;
	int idx;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)
		return -EINVAL;
	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return -ENOMEM;
	mw->pd = pd;
	mw->nic = nic;
	mw->k.type = SR_KOBJ_MW;
	mw->k.serial = sr_kobj_serial();
	mw->ibmw.context = pd->ibpd.context;
	mw->ibmw.pd = &pd->ibpd;
	mw->ibmw.type = type;

	/* Keys set under the lock that publishes the slot: a lookup never sees one without the
	 * other. */
	pthread_mutex_lock(&t->lock);
	idx = sr_table_add_locked(t, &sr_kobj_dying);
	if (idx >= 0 && (uint32_t)idx >= (1u << 24)) {
		__atomic_store_n(&t->slot[idx], NULL, __ATOMIC_RELEASE);
		t->count--;
		idx = -ENOMEM;
	}
	if (idx >= 0) {
		mw->index = (uint32_t)idx;
		mw->key = (mw->index << 8) | sr_random8();
		mw->ibmw.rkey = mw->key;
		mw->ibmw.handle = mw->index;
		__atomic_store_n(&t->slot[idx], &mw->k, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&t->lock);
	if (idx < 0) {
		free(mw);
		return -ENOMEM;
	}
	atomic_fetch_add(&pd->users, 1);
	*out = mw;
	return 0;
}

/* Back to unbound (keys lock held). */
static void mw_unbind(struct sr_mw *mw)
{
	if (mw->mr)
		mw->mr->mw_bound--;
	mw->mr = NULL;
	mw->bound = false;
	mw->addr = mw->length = 0;
	mw->access = 0;
	mw->qpn = 0;
}

int sr_mw_dealloc(struct sr_mw *mw)
{
	struct sr_table *t = &mw->nic->keys;

	/* Accesses in flight through the window hold its MR, not the window: once it is out of
	 * the table (and the lock-free lookups drained) nothing can reach it. */
	pthread_mutex_lock(&t->lock);
	uint32_t live = mw->bound ? mw->key : 0;

	mw_unbind(mw);
	sr_direct_mw_update(mw, live);	/* cleared, no peer's copy through it left */
	__atomic_store_n(&t->slot[mw->index], &sr_kobj_dying, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&t->lock);
	/* A lock-free lookup (mr.c) that read the slot before may still look at the window. */
	sr_table_drain(t, mw->index);
	sr_table_free_index(t, mw->index);
	atomic_fetch_sub(&mw->pd->users, 1);
	free(mw);
	return 0;
}

/* The checks of a bind that depend on state (keys lock held): 0 or why not, for the log. */
static const char *bind_refusal(struct sr_qp *qp, struct sr_mw *mw, struct sr_mr *mr,
				const struct sr_swqe *w)
{
	bool t2 = mw->ibmw.type == IBV_MW_TYPE_2;
	uint64_t addr = w->u.bind.addr, len = w->u.bind.length;

	if ((w->u.bind.rkey >> 8) != mw->index)
		return "new rkey of another index";
	if (t2 && mw->bound)
		return "type 2 window not Free (o10-37.2.30)";
	if (t2 && qp->pd != mw->pd)
		return "type 2 window of another PD than the QP (C10-72)";
	if (t2 && (!mr || !len))
		return "type 2 window bound to no memory (o10-37.2.40)";
	if (!mr)
		return w->u.bind.mr_index ? "MR deregistered" : NULL;
	if (mr->fr)
		return "MR is a fast-registration MR";
	if (mr->pd != mw->pd)
		return "MR of another PD";
	if (!(mr->access & IBV_ACCESS_MW_BIND))
		return "MR without IBV_ACCESS_MW_BIND (C10-73)";
	if ((w->u.bind.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(mr->access & IBV_ACCESS_LOCAL_WRITE))
		return "writable window on an MR without local write (C10-74)";
	if (addr < mr->iova || addr - mr->iova > mr->length || len > mr->length - (addr - mr->iova))
		return "window outside the MR (C10-75)";
	return NULL;
}

int sr_mw_bind_exec(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_nic *nic = qp->nic;
	struct sr_kobj *o;
	struct sr_mw *mw = NULL;
	struct sr_mr *mr = NULL;
	const char *why;

	pthread_mutex_lock(&nic->keys.lock);
	o = w->u.bind.mw_index < nic->keys.size ? nic->keys.slot[w->u.bind.mw_index] : NULL;
	mw = sr_kobj_mw(o);
	if (!mw || mw->k.serial != w->u.bind.mw_serial) {
		why = "window deallocated";
		goto refuse;
	}
	if (w->u.bind.mr_index)
		mr = sr_mr_find(nic, w->u.bind.mr_index, w->u.bind.mr_serial);
	why = bind_refusal(qp, mw, mr, w);
	if (why)
		goto refuse;
	uint32_t live = mw->bound ? mw->key : 0;

	mw_unbind(mw);
	mw->key = w->u.bind.rkey;
	if (mr && w->u.bind.length) {
		mw->mr = mr;
		mr->mw_bound++;
		mw->addr = w->u.bind.addr;
		mw->length = w->u.bind.length;
		mw->access = w->u.bind.access;
		mw->qpn = mw->ibmw.type == IBV_MW_TYPE_2 ? sr_qpn(qp) : 0;
		mw->bound = true;
	}
	/* The same-host direct path's entry: the old key dead (no copy through it still
	 * landing) before this bind completes, the new one usable. */
	sr_direct_mw_update(mw, live);
	pthread_mutex_unlock(&nic->keys.lock);
	return 0;
refuse:
	pthread_mutex_unlock(&nic->keys.lock);
	sr_log_rl(SR_LOG_INFO, "qp#%u: bind of window index %u refused: %s", sr_qpn(qp),
		  w->u.bind.mw_index, why);
	return IBV_WC_MW_BIND_ERR;
}

/* LOCAL_INV or SEND with invalidate of a window (keys lock held, called from mr.c). */
int sr_mw_invalidate_locked(struct sr_qp *qp, struct sr_mw *mw, uint32_t key, bool remote)
{
	if (mw->ibmw.type != IBV_MW_TYPE_2 || mw->key != key || mw->pd != qp->pd)
		return -EINVAL;
	if (!mw->bound)
		return 0;	/* Free already */
	/* A remote invalidation arrives on the window's own QP only (type 2B). */
	if (remote && mw->qpn != sr_qpn(qp))
		return -EINVAL;
	mw_unbind(mw);
	sr_direct_mw_update(mw, key);
	return 0;
}
