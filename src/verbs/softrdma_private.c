/* SPDX-License-Identifier: MIT */
/*
 * Entry points for softrdma's own librdmacm (version node SOFTRDMA_PRIVATE_1): not an API for
 * applications, and librdmacm reaches them through weak references so it does not depend on
 * them.
 */
#include <errno.h>
#include <string.h>

#include "verbs/verbs.h"

/* Adds n to the counter called `name` (src/core/stats.h) of ctx's soft NIC. */
void sr_priv_stat_add(struct ibv_context *ctx, const char *name, uint64_t n);
void sr_priv_stat_add(struct ibv_context *ctx, const char *name, uint64_t n)
{
	if (!ctx || !name)
		return;
	for (int k = 0; k < SR_STAT_MAX; k++) {
		if (!strcmp(sr_stat_name[k], name)) {
			sr_stat_add(&sr_ctx(ctx)->nic->stats, (enum sr_stat)k, n);
			return;
		}
	}
}

/* The largest packet payload this context's NIC offers a softrdma peer (0: none). */
uint32_t sr_priv_seg_offer(struct ibv_context *ctx);
uint32_t sr_priv_seg_offer(struct ibv_context *ctx)
{
	return ctx ? sr_ctx(ctx)->nic->seg_max : 0;
}

/* The large segment agreed with the peer for an RC QP not yet in RTR; 0 or -errno. */
int sr_priv_qp_set_seg(struct ibv_qp *qp, uint32_t bytes);
int sr_priv_qp_set_seg(struct ibv_qp *qp, uint32_t bytes)
{
	return qp ? sr_qp_set_seg(sr_qp(qp), bytes) : -EINVAL;
}

/*
 * A UD QP that is this device's GSI QP (QP1): MADs to QP1 on the device's port reach its
 * receive queue (a GRH, then the 256-byte MAD), and it sends with source QP 1 and the GSI
 * Q_Key. One per device: EBUSY for a second. For softrdma's CM (the IB CM on the wire).
 */
struct ibv_qp *sr_priv_create_gsi_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia);
struct ibv_qp *sr_priv_create_gsi_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
{
	struct ibv_qp *qp;
	int ret;

	if (!pd || !ia || ia->qp_type != IBV_QPT_UD || ia->srq)
		return sr_null(-EINVAL);
	qp = ibv_create_qp(pd, ia);
	if (!qp)
		return NULL;
	ret = sr_qp_make_gsi(sr_qp(qp));
	if (ret) {
		ibv_destroy_qp(qp);
		return sr_null(ret);
	}
	return qp;
}

/*
 * For tests (tests/verbs/test_rc_retransmit): sets an RC QP's round-trip estimate as if it had
 * been measured -- SRTT, RTTVAR, and the path's smallest round trip = SRTT (no queue) -- and
 * drops a sample under way. Its tail-loss probe and fast go-back-N then come at times the test
 * chooses (docs/architecture.md, "Reliability"), hundreds of milliseconds apart if it wants,
 * so a scripted peer sees them in the order the timers define whatever the scheduling delays
 * of a loaded machine. 0 or -errno.
 */
int sr_priv_qp_set_rtt(struct ibv_qp *qp, uint64_t srtt_ns, uint64_t rttvar_ns);
int sr_priv_qp_set_rtt(struct ibv_qp *qp, uint64_t srtt_ns, uint64_t rttvar_ns)
{
	struct sr_qp *q;

	if (!qp || !srtt_ns)
		return -EINVAL;
	q = sr_qp(qp);
	if (!sr_qp_reliable(q))
		return -EINVAL;
	pthread_mutex_lock(&q->lock);
	q->comp.srtt_ns = srtt_ns;
	q->comp.rttvar_ns = rttvar_ns;
	q->comp.rtt_min_ns = srtt_ns;
	q->comp.rtt_valid = false;
	pthread_mutex_unlock(&q->lock);
	sr_nic_kick(q->nic);	/* the thread may sleep on a deadline computed without them */
	return 0;
}
