/* SPDX-License-Identifier: MIT */
/* The CM's MAD agent on QP1 (agent.h). */
#include <errno.h>
#include <stdbool.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm/ibcm/agent.h"

#define GRH_LEN 40
#define SLOT (GRH_LEN + SR_MAD_LEN)

/* softrdma's libibverbs (private node): weak, so this code loads on another libibverbs too */
struct ibv_qp *sr_priv_create_gsi_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia)
	__attribute__((weak));

static int post_rx(struct ibcm_agent *a, unsigned i)
{
	struct ibv_sge sge = { (uintptr_t)(a->buf + (size_t)i * SLOT), SLOT, a->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(a->qp, &wr, &bad);
}

void ibcm_agent_close(struct ibcm_agent *a)
{
	if (a->qp)
		ibv_destroy_qp(a->qp);
	if (a->scq)
		ibv_destroy_cq(a->scq);
	if (a->rcq)
		ibv_destroy_cq(a->rcq);
	if (a->ch)
		ibv_destroy_comp_channel(a->ch);
	if (a->mr)
		ibv_dereg_mr(a->mr);
	free(a->buf);
	if (a->pd)
		ibv_dealloc_pd(a->pd);
	memset(a, 0, sizeof(*a));
}

int ibcm_agent_open(struct ibcm_agent *a, struct ibv_context *ctx)
{
	struct ibv_qp_init_attr ia = {
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = IBCM_AGENT_TX, .max_recv_wr = IBCM_AGENT_RX,
			 .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = SR_MAD_LEN },
		.sq_sig_all = 1,
	};
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = SR_GSI_QKEY };
	int ret = -ENOMEM;

	memset(a, 0, sizeof(*a));
	if (!sr_priv_create_gsi_qp)
		return -EOPNOTSUPP;
	a->ctx = ctx;
	a->pd = ibv_alloc_pd(ctx);
	a->buf = calloc(IBCM_AGENT_RX, SLOT);
	a->ch = ibv_create_comp_channel(ctx);
	if (!a->pd || !a->buf || !a->ch)
		goto fail;
	a->mr = ibv_reg_mr(a->pd, a->buf, (size_t)IBCM_AGENT_RX * SLOT, IBV_ACCESS_LOCAL_WRITE);
	a->scq = ibv_create_cq(ctx, IBCM_AGENT_TX, NULL, NULL, 0);
	a->rcq = ibv_create_cq(ctx, IBCM_AGENT_RX, NULL, a->ch, 0);
	if (!a->mr || !a->scq || !a->rcq)
		goto fail;
	ia.send_cq = a->scq;
	ia.recv_cq = a->rcq;
	a->qp = sr_priv_create_gsi_qp(a->pd, &ia);
	if (!a->qp) {
		ret = -errno;
		goto fail;
	}
	ret = -ibv_modify_qp(a->qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						IBV_QP_QKEY);
	qa.qp_state = IBV_QPS_RTR;
	if (!ret)
		ret = -ibv_modify_qp(a->qp, &qa, IBV_QP_STATE);
	qa.qp_state = IBV_QPS_RTS;
	qa.sq_psn = 0;
	if (!ret)
		ret = -ibv_modify_qp(a->qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN);
	for (unsigned i = 0; !ret && i < IBCM_AGENT_RX; i++)
		ret = -post_rx(a, i);
	if (!ret)
		ret = -ibv_req_notify_cq(a->rcq, 0);
	if (ret)
		goto fail;
	return 0;
fail:
	ibcm_agent_close(a);
	return ret ? ret : -ENOMEM;
}

struct ibv_ah *ibcm_agent_ah(struct ibcm_agent *a, const union ibv_gid *dgid)
{
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };

	aa.grh.dgid = *dgid;
	aa.grh.hop_limit = 64;
	return ibv_create_ah(a->pd, &aa);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Takes the send completions there are, without waiting: each frees its send queue slot;
 * one that failed is counted (the MAD was lost: the CM's retransmission covers it). */
static void reap_tx(struct ibcm_agent *a)
{
	struct ibv_wc wc[16];
	int n;

	while ((n = ibv_poll_cq(a->scq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				a->tx_errors++;
		a->tx_out -= (unsigned)n < a->tx_out ? (unsigned)n : a->tx_out;
	}
}

/*
 * Never waits: the MAD goes inline (the work request takes a copy of its 256 bytes, so the
 * caller's buffer and address handle may go at once), and the send queue holds IBCM_AGENT_TX
 * of them. A full queue (the NIC has not sent the earlier ones yet) fails with -EAGAIN rather
 * than waiting under the CM's lock: a MAD is a datagram, and the CM state machine sends
 * again what was not answered (IBA 12.9).
 */
int ibcm_agent_send(struct ibcm_agent *a, struct ibv_ah *ah, const struct sr_cm_mad *m)
{
	uint8_t mad[SR_MAD_LEN];

	if (sr_cm_mad_encode(m, mad))
		return -EINVAL;
	return ibcm_agent_send_raw(a, ah, mad);
}

int ibcm_agent_send_raw(struct ibcm_agent *a, struct ibv_ah *ah, const uint8_t *mad)
{
	struct ibv_sge sge = { (uintptr_t)mad, SR_MAD_LEN, 0 };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED }, *bad;

	reap_tx(a);
	if (a->tx_out >= IBCM_AGENT_TX)
		return -EAGAIN;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = SR_GSI_QPN;
	wr.wr.ud.remote_qkey = SR_GSI_QKEY;
	if (ibv_post_send(a->qp, &wr, &bad))
		return -EIO;
	a->tx_out++;
	reap_tx(a);	/* a UD send usually completed within the post */
	return 0;
}

int ibcm_agent_recv(struct ibcm_agent *a, struct ibcm_rx *rx, int timeout_ms)
{
	uint64_t end = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	bool armed = false;

	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(a->rcq, 1, &wc);

		if (n < 0)
			return -EIO;
		if (n == 1) {
			uint8_t *slot = a->buf + (size_t)wc.wr_id * SLOT;
			int got = 0;

			int rc = wc.status == IBV_WC_SUCCESS && wc.byte_len == SLOT
				 ? sr_cm_mad_decode(&rx->mad, slot + GRH_LEN, SR_MAD_LEN)
				 : SR_MAD_EBADLEN;

			if (rc == 0 || (rc == SR_MAD_EATTR &&
					rx->mad.hdr.attr_id == SR_CM_ATTR_CLASS_PORT_INFO)) {
				struct ibv_ah_attr aa;

				/* The sender's GID as the GRH area gives it (over IPv4 its last 20
				 * bytes are the IPv4 header: ibv_init_ah_from_wc reads it there) */
				rx->src_qp = wc.src_qp;
				/* The 'SR' marker is written by our own receive path for every IPv4
				 * sender (docs/gid.md); a softrdma device sends from its own port,
				 * below 49152, where kernel rxe and NICs send from a flow-entropy
				 * port of 49152 and up. */
				bool mark = slot[0] == 'S' && slot[1] == 'R';

				rx->sport = mark ? (uint16_t)(slot[2] << 8 | slot[3]) : 0;
				rx->softrdma = rx->sport && rx->sport < 49152;
				rx->ah = NULL;
				if (!ibv_init_ah_from_wc(a->ctx, 1, &wc, (struct ibv_grh *)slot, &aa)) {
					rx->sgid = aa.grh.dgid;
					rx->ah = ibv_create_ah(a->pd, &aa);
				}
				got = rx->ah ? 1 : 0;
			}
			if (!got)
				a->dropped++;
			if (post_rx(a, (unsigned)wc.wr_id))
				return -EIO;
			if (got)
				return 1;
			continue;
		}
		uint64_t t = now_ms();

		if (t >= end)
			return 0;
		if (!armed) {
			/* arm, then poll once more: a completion between the two is not lost */
			if (ibv_req_notify_cq(a->rcq, 0))
				return -EIO;
			armed = true;
			continue;
		}
		struct pollfd pfd = { .fd = a->ch->fd, .events = POLLIN };
		struct ibv_cq *ev_cq;
		void *ev_ctx;

		if (poll(&pfd, 1, (int)(end - t)) > 0 &&
		    ibv_get_cq_event(a->ch, &ev_cq, &ev_ctx) == 0)
			ibv_ack_cq_events(ev_cq, 1);
		armed = false;
	}
}
