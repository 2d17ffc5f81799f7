/* SPDX-License-Identifier: MIT */
/*
 * XRC (eXtended Reliable Connected, IBA 1.2.1 annex A14): domains and XRC SRQs.
 *
 * An XRC domain groups XRC SRQs and XRC_RECV (target) QPs: a request arriving at a target QP
 * names, in its XRCETH, the XRC SRQ of the same domain that receives it (resp.c). Each process
 * has its own soft NIC, so a domain is per process: ibv_open_xrcd with a file descriptor
 * returns the same domain for the same inode within the process (reference counted), never
 * one shared with another process.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "core/post.h"

static pthread_mutex_t xrcd_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_xrcd *xrcd_list;	/* domains opened by inode */
static _Atomic uint32_t next_srqn = 0x100;

int sr_xrcd_open(struct sr_ctx *ctx, const struct ibv_xrcd_init_attr *attr, struct sr_xrcd **out)
{
	struct sr_xrcd *x;
	struct stat st;

	/* As the kernel's uverbs: fd and oflags are both required; fd -1 is a private domain. */
	if (!attr || attr->comp_mask & ~(uint32_t)(IBV_XRCD_INIT_ATTR_RESERVED - 1) ||
	    !(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
	    !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
	    (attr->oflags & ~(O_CREAT | O_EXCL)))
		return -EINVAL;
	if (attr->fd >= 0 && fstat(attr->fd, &st))
		return -EBADF;
	pthread_mutex_lock(&xrcd_list_lock);
	if (attr->fd >= 0) {
		for (x = xrcd_list; x; x = x->next) {
			if (x->ctx->nic == ctx->nic && x->fdev == st.st_dev && x->ino == st.st_ino)
				break;
		}
		if (x) {
			if (attr->oflags & O_EXCL) {
				pthread_mutex_unlock(&xrcd_list_lock);
				return -EEXIST;
			}
			x->opens++;
			pthread_mutex_unlock(&xrcd_list_lock);
			*out = x;
			return 0;
		}
		if (!(attr->oflags & O_CREAT)) {
			pthread_mutex_unlock(&xrcd_list_lock);
			return -EINVAL;
		}
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		pthread_mutex_unlock(&xrcd_list_lock);
		return -ENOMEM;
	}
	x->ctx = ctx;
	x->ibxrcd.context = &ctx->vctx.context;
	pthread_mutex_init(&x->lock, NULL);
	x->opens = 1;
	if (attr->fd >= 0) {
		x->by_inode = true;
		x->fdev = st.st_dev;
		x->ino = st.st_ino;
		x->next = xrcd_list;
		xrcd_list = x;
	}
	pthread_mutex_unlock(&xrcd_list_lock);
	*out = x;
	return 0;
}

int sr_xrcd_close(struct sr_xrcd *x)
{
	pthread_mutex_lock(&xrcd_list_lock);
	if (x->opens == 1 && atomic_load(&x->users)) {
		pthread_mutex_unlock(&xrcd_list_lock);
		return -EBUSY;
	}
	if (--x->opens) {
		pthread_mutex_unlock(&xrcd_list_lock);
		return 0;
	}
	if (x->by_inode) {
		struct sr_xrcd **pp = &xrcd_list;

		while (*pp != x)
			pp = &(*pp)->next;
		*pp = x->next;
	}
	pthread_mutex_unlock(&xrcd_list_lock);
	pthread_mutex_destroy(&x->lock);
	free(x);
	return 0;
}

int sr_xrc_srq_create(struct sr_pd *pd, struct sr_xrcd *xrcd, struct sr_cq *cq,
		      struct ibv_srq_init_attr *attr, struct sr_srq **out)
{
	struct sr_srq *srq;
	int ret;

	if (pd->ctx->nic != xrcd->ctx->nic || cq->ctx->nic != pd->ctx->nic)
		return -EINVAL;
	ret = sr_srq_create(pd, attr, &srq);
	if (ret)
		return ret;
	srq->xrcd = xrcd;
	srq->cq = cq;
	do
		srq->srqn = atomic_fetch_add(&next_srqn, 1) & 0xffffff;
	while (!srq->srqn);
	atomic_fetch_add(&cq->users, 1);
	atomic_fetch_add(&xrcd->users, 1);
	pthread_mutex_lock(&xrcd->lock);
	srq->xnext = xrcd->srqs;
	xrcd->srqs = srq;
	pthread_mutex_unlock(&xrcd->lock);
	*out = srq;
	return 0;
}

int sr_xrc_srq_unlink(struct sr_srq *srq)
{
	struct sr_xrcd *x = srq->xrcd;
	struct sr_srq **pp;

	pthread_mutex_lock(&x->lock);
	if (srq->xrefs) {
		pthread_mutex_unlock(&x->lock);
		return -EBUSY;	/* a message is being received into it right now */
	}
	for (pp = &x->srqs; *pp && *pp != srq; pp = &(*pp)->xnext)
		;
	if (*pp)
		*pp = srq->xnext;
	pthread_mutex_unlock(&x->lock);
	atomic_fetch_sub(&srq->cq->users, 1);
	atomic_fetch_sub(&x->users, 1);
	return 0;
}

struct sr_srq *sr_xrc_srq_get(struct sr_xrcd *x, uint32_t srqn)
{
	struct sr_srq *s;

	pthread_mutex_lock(&x->lock);
	for (s = x->srqs; s && s->srqn != srqn; s = s->xnext)
		;
	if (s)
		s->xrefs++;
	pthread_mutex_unlock(&x->lock);
	return s;
}

void sr_xrc_srq_put(struct sr_srq *srq)
{
	pthread_mutex_lock(&srq->xrcd->lock);
	srq->xrefs--;
	pthread_mutex_unlock(&srq->xrcd->lock);
}

void sr_xrc_unbind(struct sr_qp *qp)
{
	if (qp->type != IBV_QPT_XRC_RECV || !qp->srq)
		return;
	sr_xrc_srq_put(qp->srq);
	qp->srq = NULL;
	qp->pd = NULL;
	qp->rcq = NULL;
}
