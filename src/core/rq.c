/* SPDX-License-Identifier: MIT */
/*
 * Receive queues: a QP's own RQ and shared receive queues (SRQ). A receive WQE is copied in at
 * post time (the application may reuse its ibv_recv_wr at once); the responder takes the oldest
 * one when a message that needs it arrives (resp.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/log.h"

int sr_rq_init(struct sr_rq *rq, uint32_t max_wr, uint32_t max_sge)
{
	uint32_t n = 2;

	while (n < max_wr)
		n <<= 1;
	if (!max_sge)
		max_sge = 1;
	rq->stride = (uint32_t)(sizeof(struct sr_rwqe) + max_sge * sizeof(struct ibv_sge));
	rq->buf = calloc(n, rq->stride);
	if (!rq->buf)
		return -ENOMEM;
	rq->mask = n - 1;
	rq->head = rq->tail = 0;
	rq->max_wr = max_wr;
	rq->max_sge = max_sge;
	return 0;
}

void sr_rq_free(struct sr_rq *rq)
{
	free(rq->buf);
	rq->buf = NULL;
}

int sr_rq_post(struct sr_rq *rq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		struct sr_rwqe *w;
		uint64_t len = 0;

		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > rq->max_sge) {
			*bad = wr;
			return -EINVAL;
		}
		if (sr_rq_count(rq) >= rq->max_wr) {
			*bad = wr;
			return -ENOMEM;
		}
		for (int i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if (len > SR_MAX_MSG_SIZE) {
			*bad = wr;
			return -EINVAL;
		}
		w = sr_rq_at(rq, rq->head);
		w->wr_id = wr->wr_id;
		w->num_sge = (uint32_t)wr->num_sge;
		w->length = (uint32_t)len;
		if (wr->num_sge)
			memcpy(w->sge, wr->sg_list, (size_t)wr->num_sge * sizeof(struct ibv_sge));
		rq->head++;
	}
	return 0;
}

/* ---- SRQ ---------------------------------------------------------------------------------- */
int sr_srq_create(struct sr_pd *pd, struct ibv_srq_init_attr *attr, struct sr_srq **out)
{
	struct sr_srq *srq;
	int ret;

	if (!attr->attr.max_wr || attr->attr.max_wr > SR_MAX_QP_WR ||
	    attr->attr.max_sge > SR_MAX_SGE)
		return -EINVAL;
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return -ENOMEM;
	ret = sr_rq_init(&srq->rq, attr->attr.max_wr, attr->attr.max_sge);
	if (ret) {
		free(srq);
		return ret;
	}
	srq->ctx = pd->ctx;
	srq->pd = pd;
	pthread_mutex_init(&srq->lock, NULL);
	srq->ibsrq.context = pd->ibpd.context;
	srq->ibsrq.srq_context = attr->srq_context;
	srq->ibsrq.pd = &pd->ibpd;
	pthread_mutex_init(&srq->ibsrq.mutex, NULL);
	pthread_cond_init(&srq->ibsrq.cond, NULL);
	/* Report what was really allocated (ibv_create_srq(3): values may be larger). */
	attr->attr.max_sge = srq->rq.max_sge;
	atomic_fetch_add(&pd->users, 1);
	*out = srq;
	return 0;
}

int sr_srq_modify(struct sr_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	int ret = 0;

	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return -EINVAL;
	if (mask & IBV_SRQ_MAX_WR)
		return -EOPNOTSUPP;	/* no IBV_DEVICE_SRQ_RESIZE */
	pthread_mutex_lock(&srq->lock);
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit >= srq->rq.max_wr)
			ret = -EINVAL;
		else
			srq->limit = attr->srq_limit;	/* 0 disarms */
	}
	pthread_mutex_unlock(&srq->lock);
	return ret;
}

int sr_srq_query(struct sr_srq *srq, struct ibv_srq_attr *attr)
{
	pthread_mutex_lock(&srq->lock);
	attr->max_wr = srq->rq.max_wr;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->limit;
	pthread_mutex_unlock(&srq->lock);
	return 0;
}

int sr_srq_destroy(struct sr_srq *srq)
{
	if (atomic_load(&srq->users))
		return -EBUSY;
	if (srq->xrcd) {
		int ret = sr_xrc_srq_unlink(srq);

		if (ret)
			return ret;
	}
	sr_async_event_purge(srq->ctx, srq);
	pthread_mutex_lock(&srq->ibsrq.mutex);
	while (srq->ibsrq.events_completed != srq->async_events_delivered)
		pthread_cond_wait(&srq->ibsrq.cond, &srq->ibsrq.mutex);
	pthread_mutex_unlock(&srq->ibsrq.mutex);
	atomic_fetch_sub(&srq->pd->users, 1);
	sr_rq_free(&srq->rq);
	free(srq);
	return 0;
}

int sr_srq_post(struct sr_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int ret;

	pthread_mutex_lock(&srq->lock);
	ret = sr_rq_post(&srq->rq, wr, bad);
	pthread_mutex_unlock(&srq->lock);
	return ret;
}

/*
 * Takes the oldest receive WQE into dst (room for max_sge entries); false when empty. Raises
 * the limit event when the queue drops below an armed limit (then disarms, IBA 10.2.9.3).
 */
bool sr_srq_take(struct sr_srq *srq, struct sr_rwqe *dst)
{
	bool limit_hit = false;

	pthread_mutex_lock(&srq->lock);
	if (!sr_rq_count(&srq->rq)) {
		pthread_mutex_unlock(&srq->lock);
		return false;
	}
	memcpy(dst, sr_rq_at(&srq->rq, srq->rq.tail), srq->rq.stride);
	srq->rq.tail++;
	if (srq->limit && sr_rq_count(&srq->rq) < srq->limit) {
		srq->limit = 0;
		limit_hit = true;
	}
	pthread_mutex_unlock(&srq->lock);
	if (limit_hit)
		sr_async_event(srq->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, srq);
	return true;
}
