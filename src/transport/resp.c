/* SPDX-License-Identifier: MIT */
/*
 * The responder: executes incoming requests and answers them.
 *
 * RC (IBA 9.7.4 / 9.7.5): a packet with the expected PSN is executed; a later PSN means loss,
 * answered with one NAK-sequence-error, after which out-of-sequence packets are dropped
 * silently until the expected one arrives (C9-112?); an earlier PSN is a duplicate: SEND/WRITE
 * are re-acknowledged, READ and ATOMIC are replayed from the responder resources (the READ
 * re-reads memory, the ATOMIC returns its saved result -- it must not execute twice). ACKs are
 * coalesced: one per receive batch per QP, for the latest PSN that asked for one (but see
 * complete_rwqe: a completion that wakes a sleeping consumer is acknowledged first).
 *
 * Errors the requester must hear about are NAKed and move this QP to ERR too (IBA 9.9.3:
 * remote access, invalid request, remote operational errors). UC and UD never answer: a broken
 * UC message is dropped whole, a UD datagram with no receive buffer is dropped.
 */
#include <errno.h>
#include <stdlib.h>

#include "core/log.h"
#include "core/param.h"
#include "core/post.h"
#include "transport/xport.h"
#include "wire/icrc.h"

enum rsp {
	RSP_OK,		/* executed; ACK if asked */
	RSP_DONE,	/* executed and answered (READ/ATOMIC) */
	RSP_RNR,	/* no receive WQE: RNR NAK sent */
	RSP_DROP,	/* silently dropped */
	RSP_ERR,	/* NAKed, QP moved to ERR */
};

/* ---- sending responses ------------------------------------------------------------------- */
static int resp_xmit(struct sr_qp *qp, uint8_t op, uint32_t psn, uint8_t syn,
		     const struct iovec *iov, int niov, uint32_t paylen, uint64_t orig)
{
	uint8_t hdr[SR_MAX_HDR] __attribute__((aligned(8)));
	const struct sr_opcode_info *oi = &sr_opcode[op];

	sr_bth_build((struct sr_bth *)hdr, op, false, false, (-paylen) & 3, SR_DEFAULT_PKEY,
		     qp->attr.dest_qp_num, false, psn);
	sr_qp_cut_offers(qp, hdr);
	if (qp->nic->ack_ride && qp->peer_sr)
		sr_bth_set_sr_ackride((struct sr_bth *)hdr);	/* the offer (sr_resp_ride) */
	if (oi->mask & SR_M_AETH)
		sr_aeth_build((struct sr_aeth *)(hdr + oi->offset[SR_H_AETH]), syn, qp->resp.msn);
	if (oi->mask & SR_M_ATMACK)
		sr_atmack_build((struct sr_atmack *)(hdr + oi->offset[SR_H_ATMACK]), orig);
	/* Anything sent for psn acknowledges what came before: no separate ACK needed. */
	if (qp->resp.ack_pending && sr_psn_le(qp->resp.ack_psn, psn))
		qp->resp.ack_pending = false;
	return sr_net_xmit(qp->nic, &qp->peer, hdr, oi->length, iov, niov, paylen);
}

int sr_send_ack(struct sr_qp *qp, uint32_t psn, uint8_t syn)
{
	struct sr_stats *st = &qp->nic->stats;

	sr_dbg("qp#%u: send ACK/NAK syndrome 0x%02x PSN %u", sr_qpn(qp), syn, psn);
	switch (syn & SR_AETH_TYPE_MASK) {
	case SR_AETH_ACK:
		sr_stat_inc(st, SR_STAT_acks_sent);
		break;
	case SR_AETH_RNR_NAK:
		sr_stat_inc(st, SR_STAT_rnr_naks_sent);
		break;
	default:
		switch (syn & SR_AETH_VALUE_MASK) {
		case SR_NAK_PSN_SEQ_ERR:
			qp->resp.lossy = true;
			sr_stat_inc(st, SR_STAT_seq_naks_sent);
			break;
		case SR_NAK_REM_ACCESS_ERR:
			sr_stat_inc(st, SR_STAT_access_naks_sent);
			break;
		case SR_NAK_INVALID_REQ:
			sr_stat_inc(st, SR_STAT_inv_req_naks_sent);
			break;
		default:
			sr_stat_inc(st, SR_STAT_op_naks_sent);
			break;
		}
	}
	return resp_xmit(qp, SR_OPC(sr_qp_tr(qp), SR_OP_ACK), psn, syn, NULL, 0, 0, 0);
}

static void ack_later(struct sr_qp *qp, uint32_t psn)
{
	struct sr_nic *nic = qp->nic;

	qp->resp.ack_psn = psn;
	qp->resp.ack_class = qp->resp.cur_class;
	qp->resp.ack_pending = true;
	qp->resp.ack_unasked = false;
	if (qp->resp.on_ack_list)
		return;
	qp->resp.on_ack_list = true;
	sr_qp_ref(qp);
	qp->resp.ack_next = nic->ack_list;
	nic->ack_list = qp;
}

/*
 * A message end that did not ask for an ACK, from a softrdma requester (param ack_lazy, req.c
 * ack_lazy_ok): the requester leaves it unacknowledged only while it asks again soon (every
 * ack_lazy packets, every ack_defer_us), and ACKs are cumulative, so the next ACK this responder
 * sends covers it. Should none come, it leaves alone 2 x ack_defer_us after the batch that
 * executed the message (sr_resp_flush_acks): the peer's tail-loss probe waits 0.5 ms at least
 * after the last packet sent, and the progress thread looks for it as for a deferred ACK. An
 * ACK already to be sent (coalesced at the end of this batch, or deferred to the application's
 * answer) covers it too. Destroying the QP, or moving it to ERR or RESET, sends it at once
 * (sr_resp_ack_now).
 */
static void ack_unasked(struct sr_qp *qp, uint32_t psn)
{
	if (qp->resp.ack_pending) {
		qp->resp.ack_psn = psn;
		return;
	}
	ack_later(qp, psn);
	qp->resp.ack_unasked = true;
	qp->resp.unasked_due = 0;
}

static bool ack_deferrable(const struct sr_qp *qp);

/*
 * Is an ACK pending that the application's answer must carry (qp->lock held)? One the flush
 * deferred (ack_due set), and also one the flush has not seen yet: the receive batch that
 * executed the message posted its completion and runs on (another thread: the progress thread,
 * another poller) while the application polls it, answers, and posts before the batch ends.
 * Left for the flush, that ACK would be deferred again behind the answer already sent, and the
 * answer would reach the peer before the completion it should follow (docs/architecture.md,
 * "Order"). Only when the flush would defer it: a coalesced ACK of a stream still leaves once
 * at its batch's end, not once per post.
 */
static bool ack_owed_to_answer(const struct sr_qp *qp)
{
	if (!qp->resp.ack_pending)
		return false;
	return qp->resp.ack_due ||
	       (!qp->resp.ack_unasked && sr_params()->ack_defer_us > 0 && ack_deferrable(qp));
}

/* Sends a deferred ACK now (qp->lock held; see sr_resp_answer); false if there is none. */
static bool send_deferred(struct sr_qp *qp)
{
	bool due = ack_owed_to_answer(qp);

	if (due) {
		sr_send_ack(qp, qp->resp.ack_psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
		qp->resp.ack_pending = false;	/* the QP leaves the ACK list at its next flush */
	}
	qp->resp.ack_due = 0;
	return due;
}

/*
 * The QP stops answering: it moves to ERR or RESET, or is destroyed. A NIC acknowledges what it
 * executed when it executes it, so the peer's requester may already have seen its message
 * consumed here; an ACK this responder still held (coalesced to the end of a receive batch, or
 * deferred to the application's answer, which will not come now) leaves at once instead of
 * being dropped with the QP's state. Else the peer resends into a QP that no longer answers and
 * ends in IBV_WC_RETRY_EXC_ERR: fi_pingpong's last message, whose receiver disconnected (QP to
 * ERR) a moment after it polled the completion, did. Called with qp->lock held, before the
 * state changes.
 */
void sr_resp_ack_now(struct sr_qp *qp)
{
	if (!qp->resp.ack_pending || !sr_qp_reliable(qp) ||
	    (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
	     qp->state != IBV_QPS_SQE))
		return;
	sr_send_ack(qp, qp->resp.ack_psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
	qp->resp.ack_pending = false;	/* the QP leaves the ACK list at its next flush */
	qp->resp.ack_due = 0;
}

/*
 * A connected RC QP is being destroyed. Its peer may still be waiting for the ACK of the last
 * message this responder executed (the application saw the data and quit: ibv_rc_pingpong's
 * client does exactly that), and if that one ACK is lost the peer can only retransmit into a
 * QP that no longer exists and end in IBV_WC_RETRY_EXC_ERR. So, on a path that has shown
 * loss (this responder NAKed a gap; a duplicate alone may be a spurious probe), the last
 * ACK goes out twice more: duplicate ACKs are harmless to an IBA requester. A clean path gets
 * no extra packet (the peer, gone too by then, would count it as drop_qpn). Called with
 * qp->lock held.
 */
void sr_resp_final_ack(struct sr_qp *qp)
{
	sr_resp_ack_now(qp);	/* nothing will answer it any more */
	if (!sr_qp_reliable(qp) || !qp->resp.lossy ||
	    qp->resp.epsn == qp->attr.rq_psn)
		return;
	if (qp->state != IBV_QPS_RTR && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
	    qp->state != IBV_QPS_SQE)
		return;
	for (int i = 0; i < 2; i++)
		sr_send_ack(qp, sr_psn_add(qp->resp.epsn, -1), SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
}

/*
 * Deferred ACKs (parameter ack_defer_us). In a ping-pong over UDP (ib_write_lat, ib_send_lat)
 * each side's application polls its CQ for the ACK of what it sent, then waits for the answer
 * somewhere softrdma cannot see (ib_write_lat spins on memory). Acknowledged at once, a message
 * lets its sender stop polling, and the answer that follows must wake the sender's progress
 * thread, which on 2 cores first waits for a spinning application's slice. When this QP's
 * application has answered the last two messages with a send of its own, the ACK waits for
 * that send instead and leaves in the same batch, after it (sr_resp_answer, called by
 * sr_sq_posted): the peer is still polling for the ACK, and its poll takes the answer too, in
 * one datagram whose ACK it takes first (udp.c, response_last). Nothing waits much longer than
 * ack_defer_us: a polling receiver sends what is due at the end of its batch, the progress
 * thread looks at least every SR_ACK_LOOK_POLLING * ack_defer_us (nic->ack_due; see
 * nic_thread). An application that stops
 * answering resets the score, so a one-way stream never waits. IBA lets a responder coalesce
 * ACKs; the requester's timeout (milliseconds at least) is far beyond the deferral.
 *
 * Two refinements, both measured on UCX's rendezvous by RDMA WRITE (UCX_RNDV_SCHEME=put_zcopy,
 * bench/README.md): the requester sends a ready-to-send (SEND), the responder's application
 * answers with ready-to-receive (SEND), the requester WRITEs the data and, only once that WRITE
 * is acknowledged, sends the end-of-transfer (SEND). The WRITE is never answered, and its ACK
 * is what the next message waits for.
 * - The score is kept per class of message: those that complete a receive WQE (SEND, WRITE
 *   with immediate) and those that do not (WRITE, READ, atomics, FLUSH). An application answers
 *   what it sees; a protocol that mixes the two answers one class and not the other, and a
 *   single score made the answered SENDs vouch for the WRITE, whose ACK then waited
 *   ack_defer_us (up to 5 times that) for an answer that could not come.
 * - Only the ACK of a message's last packet waits. One asked for in the middle of a long
 *   message (every half send window) cannot be answered before the message ends; held, it
 *   stalled the requester's window once per ack_defer_us.
 */
#define SR_PP_SCORE 2

static uint8_t msg_class(const struct sr_pkt *pkt)
{
	return (pkt->mask & SR_M_SEND) || (pkt->mask & SR_M_IMMDT) ? 0 : 1;
}

/* Only toward a softrdma peer: another stack would see the answer before the ACK (resp.c's
 * order is kept by the receiver's udp.c, sr_net_rx_fd). */
static bool ack_deferrable(const struct sr_qp *qp)
{
	return qp->type == IBV_QPT_RC && qp->state == IBV_QPS_RTS && qp->peer_sr &&
	       qp->resp.pp_score[qp->resp.ack_class] >= SR_PP_SCORE && !qp->resp.nak_sent &&
	       !qp->resp.in_send && !qp->resp.in_write;
}

/* Counts the messages of a class in a row the application answered (qp->lock held; a
 * message's end): an answer posted since the previous message ended answers that one. */
static void score_answer(struct sr_qp *qp, const struct sr_pkt *pkt)
{
	uint8_t *score = &qp->resp.pp_score[qp->resp.last_class];

	if (!qp->resp.answered)
		*score = 0;
	else if (*score < SR_PP_SCORE)
		(*score)++;
	qp->resp.answered = false;
	qp->resp.last_class = msg_class(pkt);
}

void sr_resp_answer(struct sr_qp *qp)
{
	qp->resp.answered = true;
	qp->resp.ride_armed = false;
	if (send_deferred(qp))
		sr_stat_inc(&qp->nic->stats, SR_STAT_acks_deferred);
}

/*
 * An ACK that rides in the answer (param ack_ride). A deferred ACK leaves with the application's
 * answer, after it, in one GSO send: two segments, which the kernel cuts, delivers and (GRO)
 * joins again, and the peer parses, checks and takes one by one. Measured between two
 * namespaces, that pattern alone cost 1.33x a ping-pong of single datagrams (bench/README.md,
 * "8 B busy-poll between the namespaces"). Toward a softrdma peer whose responses offer it
 * (SR_BTH_SR_ACKRIDE in a response: qp->peer_ride), the ACK goes inside the answer's first
 * request packet instead, 8 bytes after its headers (struct sr_ackride), and that packet's
 * receiver takes it first, exactly as the ACK packet it replaces (recv.c): one datagram per
 * half round trip. Only the deferred ACK of a post's pass (sr_sq_posted arms it, sr_resp_answer
 * disarms it), only in the pass's first packet, and only when that packet is a whole RC
 * message (an ONLY, a READ request, an atomic, FLUSH, ATOMIC WRITE: nothing of the answer is
 * processed before the ACK) that stays within the path MTU with it; otherwise the ACK leaves
 * after the answer as before (send_deferred). Lost with its packet, it is recovered as any
 * lost ACK: the peer's tail-loss probe resends the message, whose duplicate is acknowledged
 * again. Late deferred ACKs, NAKs, READ responses, ACKs toward other stacks or peers that made
 * no offer are unchanged.
 */
void sr_resp_ride_arm(struct sr_qp *qp)
{
	qp->resp.ride_armed = qp->nic->ack_ride && qp->peer_ride && qp->peer_sr &&
			      ack_owed_to_answer(qp);
}

/* The deferred ACK, if one is pending, into r (req.c: the armed pass's first packet, which
 * qualifies); false: none. */
bool sr_resp_ride(struct sr_qp *qp, struct sr_ackride *r)
{
	if (!ack_owed_to_answer(qp))
		return false;
	sr_ackride_build(r, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, qp->resp.msn, qp->resp.ack_psn);
	sr_dbg("qp#%u: ACK of PSN %u rides in a request", sr_qpn(qp), qp->resp.ack_psn);
	qp->resp.ack_pending = false;	/* the QP leaves the ACK list at its next flush */
	qp->resp.ack_due = 0;
	sr_stat_inc(&qp->nic->stats, SR_STAT_acks_deferred);
	sr_stat_inc(&qp->nic->stats, SR_STAT_acks_rode);
	return true;
}

/* Does a held ACK wait on (its deadline *at, set to now + wait at its first look, not reached)?
 * Then *earliest takes the deadline if it is the earliest of the flush. */
static bool ack_hold(uint64_t *at, uint64_t wait, uint64_t now, uint64_t *earliest)
{
	if (!*at)
		*at = now + wait;
	if (now >= *at)
		return false;
	if (!*earliest || *at < *earliest)
		*earliest = *at;
	return true;
}

/* Called by a receiver at the end of its batch (rx_lock held), and by the progress thread when
 * a deferred ACK is due. */
void sr_resp_flush_acks(struct sr_nic *nic)
{
	long defer_ns = sr_params()->ack_defer_us * 1000;
	struct sr_qp *qp, *keep = NULL;
	uint64_t now = 0, due = 0, udue = 0;

	while ((qp = nic->ack_list)) {
		nic->ack_list = qp->resp.ack_next;
		pthread_mutex_lock(&qp->lock);
		if (qp->resp.ack_pending && qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_ERR) {
			bool hold = false;

			if (qp->resp.ack_unasked) {
				/* Owed to message ends that did not ask (ack_unasked). */
				if (!now)
					now = sr_drain_now_ns();
				hold = ack_hold(&qp->resp.unasked_due,
						2 * (uint64_t)(defer_ns > 0 ? defer_ns : 0), now, &udue);
				if (!hold)
					sr_stat_inc(&nic->stats, SR_STAT_acks_unasked);
			} else if (defer_ns > 0 && ack_deferrable(qp)) {
				if (!now)
					now = sr_drain_now_ns();
				hold = ack_hold(&qp->resp.ack_due, (uint64_t)defer_ns, now, &due);
				if (!hold)
					sr_stat_inc(&nic->stats, SR_STAT_acks_deferred_late);
			}
			if (hold) {
				qp->resp.ack_next = keep;
				keep = qp;
				pthread_mutex_unlock(&qp->lock);
				continue;
			}
			sr_send_ack(qp, qp->resp.ack_psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
		}
		qp->resp.ack_pending = false;
		qp->resp.ack_due = 0;
		qp->resp.ack_unasked = false;
		qp->resp.unasked_due = 0;
		qp->resp.on_ack_list = false;
		pthread_mutex_unlock(&qp->lock);
		sr_qp_put(qp);
	}
	nic->ack_list = keep;
	if (due || udue)
		atomic_store_explicit(&nic->ack_deferred_ns, now, memory_order_relaxed);
	atomic_store(&nic->ack_due, due);
	atomic_store(&nic->unasked_due, udue);
	if (udue && (!due || udue < due))
		due = udue;
	/* The progress thread must look by due + SR_ACK_LOOK_POLLING * ack_defer_us (it stores
	 * wake_at before it reads ack_due; see nic_thread), or by due + its grown watch, which
	 * it keeps only while the application polls (it sends what is due itself) and nothing
	 * was left for the thread to send or take. */
	if (due && atomic_load(&nic->wake_at) > due + sr_ack_look_ns(nic, (uint64_t)defer_ns))
		sr_nic_kick(nic);
}

/* NAK an error (not a sequence error) and take the QP to ERR (IBA 9.9.3.1, class C). */
static enum rsp nak_error(struct sr_qp *qp, uint32_t psn, enum sr_nak_code code)
{
	enum ibv_event_type ev = code == SR_NAK_REM_ACCESS_ERR ? IBV_EVENT_QP_ACCESS_ERR
			       : code == SR_NAK_INVALID_REQ    ? IBV_EVENT_QP_REQ_ERR
							       : IBV_EVENT_QP_FATAL;

	sr_send_ack(qp, psn, SR_AETH_NAK | code);
	sr_log_rl(SR_LOG_INFO, "qp#%u: NAK code %d for PSN %u, QP to ERR", sr_qpn(qp), code, psn);
	sr_async_event(qp->ctx, ev, qp);
	sr_qp_to_error(qp);
	return RSP_ERR;
}

static enum rsp nak_access(struct sr_qp *qp, uint32_t psn, enum sr_access_err e)
{
	(void)e;
	return nak_error(qp, psn, SR_NAK_REM_ACCESS_ERR);
}

/* ---- receive WQEs ---------------------------------------------------------------------- */
static bool take_rwqe(struct sr_qp *qp)
{
	if (qp->resp.have_rwqe)
		return true;
	if (qp->srq) {
		if (!sr_srq_take(qp->srq, qp->resp.rwqe))
			return false;
	} else {
		if (!sr_rq_count(&qp->rq))
			return false;
		memcpy(qp->resp.rwqe, sr_rq_at(&qp->rq, qp->rq.tail), qp->rq.stride);
		qp->rq.tail++;
	}
	qp->resp.have_rwqe = true;
	return true;
}

/* src_qp, slid: the UD sender's QPN and LID (0 on a connected QP). */
static void complete_rwqe(struct sr_qp *qp, enum ibv_wc_status st, enum ibv_wc_opcode op,
			  uint32_t byte_len, struct sr_pkt *pkt, uint32_t src_qp, uint16_t slid,
			  unsigned flags)
{
	struct ibv_wc wc = {
		.wr_id = qp->resp.rwqe->wr_id,
		.status = st,
		.opcode = op,
		.byte_len = byte_len,
		.qp_num = sr_qpn(qp),
		.src_qp = src_qp,
		.slid = slid,
		.wc_flags = flags,
	};

	/* A UD receive over RoCE: sl says what the GRH area holds, as ConnectX reports it (the
	 * CQE's RoCE packet type: bit 3 a UDP header, i.e. RoCEv2; bits 0-2 the L3 header, 1 IPv6,
	 * 2 IPv4). UCX's UD transport reads it to find the destination address in the GRH (the
	 * last 4 bytes for IPv4, as build_grh puts them) and drops what is not for its GIDs. */
	if (flags & IBV_WC_GRH)
		wc.sl = qp->nic->addr.family == AF_INET ? 0x8 | 0x2 : 0x8 | 0x1;
	if (pkt && (pkt->mask & SR_M_IMMDT)) {
		wc.imm_data = sr_immdt_raw(sr_pkt_h(pkt, SR_H_IMMDT));
		wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	if (pkt && (pkt->mask & SR_M_IETH) && st == IBV_WC_SUCCESS) {
		/* SEND with invalidate: the key the responder invalidated (host order). */
		wc.invalidated_rkey = sr_ieth_rkey(sr_pkt_h(pkt, SR_H_IETH));
		wc.wc_flags |= IBV_WC_WITH_INV;
	}
	qp->resp.have_rwqe = false;
	/*
	 * RC: a completion that wakes a consumer sleeping on the CQ's channel is acknowledged
	 * first, not at the end of the batch. Woken, the consumer may answer the message at once
	 * (a ping-pong), and its peer must not see the answer before the ACK of what it sent:
	 * on a NIC the ACK leaves before the CQE is even written, and programs that wait for "any
	 * event" and then poll one CQ once (perftest's -e) depend on that order.
	 */
	if (pkt && pkt->ackreq && st == IBV_WC_SUCCESS && qp->type == IBV_QPT_RC &&
	    sr_cq_would_notify(qp->rcq, pkt->se)) {
		sr_send_ack(qp, pkt->psn, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
		qp->resp.acked_now = true;
	}
	sr_cq_post(qp->rcq, &wc, pkt && (pkt->se || st != IBV_WC_SUCCESS));
}

/* Copies a SEND payload into the receive WQE at `off`. 0 or an ibv_wc_status. */
static int scatter(struct sr_qp *qp, uint32_t off, const void *data, uint32_t len)
{
	struct sr_rwqe *r = qp->resp.rwqe;
	struct sr_sgl sgl;
	int st;

	if (!len)
		return 0;
	if (off + (uint64_t)len > r->length)
		return IBV_WC_LOC_LEN_ERR;
	struct sr_acc a = sr_acc_resp(qp, 0, false);

	st = sr_sgl_map(qp->nic, &a, r->sge, r->num_sge, off, len, IBV_ACCESS_LOCAL_WRITE, &sgl);
	if (st)
		return st;
	sr_sgl_copy_in(&sgl, data, len);
	sr_sgl_release(&sgl);
	return 0;
}

/* ---- RC/UC operations -------------------------------------------------------------------- */
/*
 * FIRST and MIDDLE carry exactly one MTU; LAST and ONLY at most one (IBA 9.7.3.1?). A
 * softrdma peer (BTH resv6 marked) on a 4096-byte path may send larger packets, a multiple of
 * 4 KiB that this NIC takes (in-band large segments, req.c req_seg): the FIRST packet's
 * payload is then the message's segment, which every MIDDLE must match. A WRITE's FIRST may
 * be short of it by its RETH, 16 bytes (req.c write_first_short; this NIC says it takes that,
 * SR_BTH_SR_FSHORT): its payload + 16 is the segment then. Where this NIC also offers the even
 * cut (SR_BTH_SR_EVEN, req.c sr_req_even_seg), that segment may be any length up to seg_max +
 * 16 (with its pad, a datagram no longer than a whole-segment FIRST with its RETH: seg_max is
 * a multiple of 4 KiB); a FIRST whose payload is a multiple of 4 KiB is always the segment
 * itself. The packets before the LAST then carry a pad as well (IBA pads only the last): the
 * parser takes every payload as what precedes the pad (wire/pkt.c), so nothing else changes.
 * Where this NIC offers the even cut at the path MTU (SR_BTH_SR_EVENMTU), a WRITE's FIRST
 * shorter than the path MTU sets the segment to its payload + 16: more than half the path MTU
 * + 16 (the fewest packets of at most that size, req.c sr_req_even_seg), and under it + 16.
 */
static bool mtu_ok(struct sr_qp *qp, struct sr_pkt *pkt)
{
	bool large = qp->peer_sr && !qp->seg &&
		     qp->attr.path_mtu == IBV_MTU_4096 && sr_params()->seg_inband &&
		     (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_UC) &&
		     pkt->paylen <= qp->nic->seg_max;

	if (pkt->mask & SR_M_START) {
		qp->resp.seg = qp->mtu;
		if (pkt->paylen > qp->mtu) {
			uint32_t seg = pkt->paylen;

			uint32_t max = qp->nic->seg_max;

			/* A WRITE's FIRST may be short by its RETH (one datagram size): to a
			 * multiple of 4 KiB, or evenly cut (up to seg_max + 16) where this NIC
			 * offers that. */
			if ((seg & 4095) && !(pkt->mask & SR_M_END)) {
				if (!(pkt->mask & SR_M_RETH))
					return false;
				seg += SR_RETH_LEN;
				if (seg & 4095) {
					if (!sr_qp_even_offer(qp))
						return false;
					max += SR_RETH_LEN;
				}
			}
			if (!large || seg > max)
				return false;
			qp->resp.seg = seg;
			if (!(pkt->mask & SR_M_END))
				return true;
		} else if (pkt->paylen < qp->mtu && !(pkt->mask & SR_M_END)) {
			uint32_t p = pkt->paylen + SR_RETH_LEN;

			if (!(pkt->mask & SR_M_RETH) || !sr_qp_even_mtu_offer(qp) ||
			    2 * p <= qp->mtu + SR_RETH_LEN)
				return false;
			qp->resp.seg = p;
			return true;
		}
	}
	if (pkt->mask & SR_M_END)
		return pkt->paylen <= qp->resp.seg;
	return pkt->paylen == qp->resp.seg;
}

static enum rsp do_send(struct sr_qp *qp, struct sr_pkt *pkt)
{
	bool rc = sr_qp_reliable(qp);
	int st;

	if (!mtu_ok(qp, pkt))
		return rc ? nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ) : RSP_DROP;
	if (pkt->mask & SR_M_START) {
		if (!take_rwqe(qp)) {
			if (!rc) {
				sr_stat_inc(&qp->nic->stats, SR_STAT_drop_no_rwqe);
				return RSP_DROP;
			}
			/* IBA 9.7.5.2.8: RNR NAK, the requester retries after min_rnr_timer. */
			sr_send_ack(qp, pkt->psn, SR_AETH_RNR_NAK | qp->attr.min_rnr_timer);
			qp->resp.nak_sent = true;
			return RSP_RNR;
		}
		qp->resp.recv_off = 0;
	}
	st = pkt->placed ? 0 : scatter(qp, qp->resp.recv_off, sr_pkt_payload(pkt), pkt->paylen);
	if (st == IBV_WC_LOC_LEN_ERR && !rc) {
		/* UC: the message does not fit; the WQE completes in error, the QP lives on. */
		complete_rwqe(qp, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0, NULL, 0, 0, 0);
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_too_long);
		return RSP_DROP;
	}
	if (st) {
		complete_rwqe(qp, (enum ibv_wc_status)st, IBV_WC_RECV, 0, NULL, 0, 0, 0);
		if (rc)
			return nak_error(qp, pkt->psn, st == IBV_WC_LOC_LEN_ERR ? SR_NAK_INVALID_REQ
									 : SR_NAK_REM_OP_ERR);
		sr_qp_to_error(qp);
		return RSP_ERR;
	}
	qp->resp.recv_off += pkt->paylen;
	qp->resp.in_send = !(pkt->mask & SR_M_END);
	if (pkt->mask & SR_M_IETH) {
		/* SEND with invalidate (RC only): the data is placed, then the key named in the
		 * IETH is invalidated (IBA 9.4.1.x, 10.6.7.2). A key this QP may not invalidate
		 * fails the receive and the QP (as rxe: REM_INV_REQ_ERR). */
		uint32_t inv = sr_ieth_rkey(sr_pkt_h(pkt, SR_H_IETH));
		bool held;

		if (sr_key_invalidate(qp, inv, true, pkt->psn, &held)) {
			complete_rwqe(qp, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RECV, 0, NULL, 0, 0, 0);
			return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
		}
	}
	if (pkt->mask & SR_M_END) {
		qp->resp.msn++;	/* (before the completion: an ACK sent with it carries the MSN) */
		complete_rwqe(qp, IBV_WC_SUCCESS, IBV_WC_RECV, qp->resp.recv_off, pkt,
			      qp->attr.dest_qp_num, 0, 0);
	}
	return RSP_OK;
}

/* Pieces a packet's worth of memory can need: a fast-registration map splits it at page
 * boundaries (pages of at least 4 KiB; a packet of up to a large segment, less than 64 KiB,
 * crosses at most 16 of them, plus partial pages at both ends). */
#define SR_PKT_IOV 18

static enum rsp do_write(struct sr_qp *qp, struct sr_pkt *pkt)
{
	bool rc = sr_qp_reliable(qp);
	struct sr_acc a = sr_acc_resp(qp, pkt->psn, true);
	struct iovec iov[SR_PKT_IOV];
	enum sr_access_err err;
	struct sr_mr *mr, *held = NULL;
	int n = 0;

	if (!mtu_ok(qp, pkt))
		return rc ? nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ) : RSP_DROP;
	if (pkt->mask & SR_M_START) {
		struct sr_reth *reth = sr_pkt_h(pkt, SR_H_RETH);

		qp->resp.wva = sr_reth_va(reth);
		qp->resp.wrkey = sr_reth_rkey(reth);
		qp->resp.wlen = qp->resp.wleft = sr_reth_len(reth);
		/* The whole range is checked up front (C9-?): nothing lands if any is bad. A
		 * zero-length WRITE touches nothing and checks no key (IBA 9.4.3). A message in
		 * one packet that fills its range (an 8-byte WRITE) is placed through this same
		 * access: one key check and one locked hold and release per packet, not two. */
		bool whole = (pkt->mask & SR_M_END) && pkt->paylen == qp->resp.wlen &&
			     !pkt->placed;

		if (qp->resp.wlen) {
			mr = sr_mem_get(qp->nic, &a, qp->resp.wrkey, qp->resp.wva, qp->resp.wlen,
					IBV_ACCESS_REMOTE_WRITE, whole ? iov : NULL,
					whole ? SR_PKT_IOV : 0, whole ? &n : NULL, &err);
			if (!mr) {
				sr_log_rl(SR_LOG_INFO, "qp#%u: WRITE rkey 0x%x va 0x%llx len %u refused (%d)",
					  sr_qpn(qp), qp->resp.wrkey,
					  (unsigned long long)qp->resp.wva, qp->resp.wlen, err);
				if (!rc) {
					qp->resp.uc_drop = !(pkt->mask & SR_M_END);
					sr_stat_inc(&qp->nic->stats, SR_STAT_drop_unexpected);
					return RSP_DROP;
				}
				return nak_access(qp, pkt->psn, err);
			}
			if (whole)
				held = mr;
			else
				sr_mr_put(mr);
		}
	}
	/* A same-host softrdma requester placed the data itself (direct path) and sends the
	 * immediate alone: the key was checked over the whole range above, as for any WRITE;
	 * nothing is copied, and the receive completes with the RETH's length. */
	uint32_t plen = pkt->paylen;
	bool placed = rc && (pkt->mask & SR_M_IMMDT) && (pkt->mask & SR_M_START) &&
		      (pkt->mask & SR_M_END) && !pkt->paylen && qp->resp.wlen &&
		      qp->peer_sr && sr_bth_sr_placed(sr_pkt_bth(pkt));

	if (placed)
		plen = qp->resp.wlen;
	if (plen > qp->resp.wleft || ((pkt->mask & SR_M_END) && plen != qp->resp.wleft)) {
		if (held)
			sr_mr_put(held);
		return rc ? nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ) : RSP_DROP;
	}
	/* WRITE with immediate consumes a receive WQE: check before writing anything. */
	if ((pkt->mask & SR_M_IMMDT) && !take_rwqe(qp)) {
		if (held)
			sr_mr_put(held);
		if (!rc) {
			sr_stat_inc(&qp->nic->stats, SR_STAT_drop_no_rwqe);
			return RSP_DROP;
		}
		sr_send_ack(qp, pkt->psn, SR_AETH_RNR_NAK | qp->attr.min_rnr_timer);
		qp->resp.nak_sent = true;
		return RSP_RNR;
	}
	if (pkt->paylen && !pkt->placed) {
		/* the first packet checked (and for ODP faulted in) the whole range */
		mr = held ? held
			  : sr_mem_get(qp->nic, &a, qp->resp.wrkey, qp->resp.wva, pkt->paylen,
				       IBV_ACCESS_REMOTE_WRITE | SR_ACCESS_FAULTED, iov,
				       SR_PKT_IOV, &n, &err);
		if (!mr)	/* deregistered or invalidated mid-message */
			return rc ? nak_access(qp, pkt->psn, err) : RSP_DROP;
		sr_iov_copy_in(iov, n, sr_pkt_payload(pkt), pkt->paylen);
		sr_mr_put(mr);
	}
	if (placed)
		sr_stat_inc(&qp->nic->stats, SR_STAT_rx_write_imm_placed);
	qp->resp.wva += plen;
	qp->resp.wleft -= plen;
	qp->resp.in_write = !(pkt->mask & SR_M_END);
	if (pkt->mask & SR_M_END) {
		qp->resp.msn++;
		if (pkt->mask & SR_M_IMMDT)
			complete_rwqe(qp, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qp->resp.wlen, pkt,
				      qp->attr.dest_qp_num, 0, 0);
	}
	return RSP_OK;
}

/*
 * Is this the next MIDDLE packet of the RC WRITE or SEND in progress, with the length the
 * message's state wants and room for it in the target? (The checks do_write and do_send will
 * make, made before the ICRC; any packet that fails one has its ICRC checked first.) Never a
 * LAST packet: it writes the message's last byte (src/net/udp.c, icrc_deferrable).
 */
static bool continues(const struct sr_qp *qp, const struct sr_pkt *pkt)
{
	if (qp->type != IBV_QPT_RC ||
	    (pkt->mask & (SR_M_START | SR_M_END | SR_M_IMMDT | SR_M_IETH)) ||
	    !pkt->paylen || pkt->psn != qp->resp.epsn || pkt->paylen != qp->resp.seg ||
	    (qp->state == IBV_QPS_RTR ? !qp->resp.comm_est
				      : qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD &&
					qp->state != IBV_QPS_SQE))
		return false;
	if (pkt->mask & SR_M_WRITE)
		return qp->resp.in_write && (qp->attr.qp_access_flags & IBV_ACCESS_REMOTE_WRITE) &&
		       pkt->paylen < qp->resp.wleft;
	if (pkt->mask & SR_M_SEND)
		return qp->resp.in_send && qp->resp.have_rwqe &&
		       qp->resp.recv_off + (uint64_t)pkt->paylen <= qp->resp.rwqe->length;
	return false;
}

/*
 * A request whose ICRC is still unchecked (pkt->icrc_tuple, src/net/udp.c): the next MIDDLE
 * packet of the RC WRITE or SEND in progress goes straight to its place, the ICRC computed in
 * the same pass as the copy (sr_icrc_calc_copy), then compared; any other request has its ICRC
 * checked first. False: the ICRC does not match (the caller counts the drop).
 *
 * Why bytes may land before their check: they land only in the part of the message's target
 * that is still to be written -- a WRITE's [wva, wva + wleft), which the message's first packet
 * had checked against its key (and sr_mem_get checks again now), or a SEND's receive WQE from
 * recv_off on, a buffer the application gave for this message and may not touch before the
 * completion. A packet that fails the check moves nothing: not the PSN, not the message's
 * position, so the packet that passes (the sender's retransmission) writes the same bytes
 * again before the message can complete. A message that never completes leaves its target
 * undefined (IBA 9.4.3; a receive WQE flushed in error) -- as a failed one always does. A
 * corrupted header cannot aim elsewhere: the place comes from the QP's state, not the packet,
 * and the length must be the one the state expects. The message's last byte comes only from a
 * checked LAST packet, executed after every MIDDLE before it has been placed again from a good
 * packet: a reader polling that byte finds every byte before it final. (Between a bad MIDDLE
 * and its good copy, bytes of the part still to be written may be wrong; nothing promises
 * them.) Saves a read of every byte of a long message on the receiving side (a 12 % copy on
 * the receiving thread of an ib_write_bw stream).
 *
 * Where the piece is not one run of memory (a fast-registration map cut at a page, a receive
 * WQE's SGE boundary), the ICRC is checked first and the copy made here, from the same lookup:
 * do_write and do_send look a key up once per packet, as their counters expect.
 */
bool sr_resp_place(struct sr_qp *qp, struct sr_pkt *pkt)
{
	bool write = pkt->mask & SR_M_WRITE, ok;
	struct iovec iov[SR_PKT_IOV], *v;
	struct sr_mr *mr = NULL;
	struct sr_sgl sgl;
	int n;

	if (!continues(qp, pkt))
		return sr_net_icrc_ok(qp->nic, pkt);
	if (write) {
		struct sr_acc a = sr_acc_resp(qp, pkt->psn, true);
		enum sr_access_err err;

		/* a packet that continues a message: its first checked (and for ODP faulted
		 * in) the whole range */
		mr = sr_mem_get(qp->nic, &a, qp->resp.wrkey, qp->resp.wva, pkt->paylen,
				IBV_ACCESS_REMOTE_WRITE | SR_ACCESS_FAULTED, iov, SR_PKT_IOV, &n,
				&err);
		if (!mr)
			return sr_net_icrc_ok(qp->nic, pkt);
		v = iov;
	} else {
		struct sr_acc a = sr_acc_resp(qp, 0, false);
		struct sr_rwqe *r = qp->resp.rwqe;

		if (sr_sgl_map(qp->nic, &a, r->sge, r->num_sge, qp->resp.recv_off, pkt->paylen,
			       IBV_ACCESS_LOCAL_WRITE, &sgl))
			return sr_net_icrc_ok(qp->nic, pkt);
		v = sgl.iov;
		n = sgl.n;
	}
	ok = sr_place_checked(qp->nic, pkt, v, n);	/* a fast-registration map may be cut at a page */
	if (write)
		sr_mr_put(mr);
	else
		sr_sgl_release(&sgl);
	return ok;
}

/*
 * Sends the responses to a READ of len bytes at va, starting at PSN psn; the memory is judged
 * as at PSN req_psn, the READ request's (a replay reads what the READ could read then). It is
 * looked up again for each piece: a replay (a duplicate READ) runs long after the checks of
 * the original, and the MR may have been deregistered meanwhile. The piece that finds no
 * access is NAKed with a remote access error, as a new READ would be (rxe does the same), so
 * the requester completes the READ with IBV_WC_REM_ACCESS_ERR rather than retrying into its
 * timeout.
 */
static enum rsp read_respond(struct sr_qp *qp, uint32_t psn, uint64_t va, uint32_t rkey,
			     uint32_t len, uint32_t req_psn, uint32_t seg)
{
	struct sr_acc a = sr_acc_resp(qp, req_psn, true);
	uint32_t n = sr_npkts(len, seg);
	enum rsp ret = RSP_DONE;

	sr_net_batch_begin();
	for (uint32_t i = 0; i < n; i++) {
		uint32_t off = i * seg;
		uint32_t plen = len - off < seg ? len - off : seg;
		uint8_t op = n == 1 ? SR_OP_READ_RESP_ONLY : i == 0 ? SR_OP_READ_RESP_FIRST
			   : i == n - 1 ? SR_OP_READ_RESP_LAST : SR_OP_READ_RESP_MIDDLE;
		struct iovec iov[SR_PKT_IOV];
		struct sr_mr *mr = NULL;
		enum sr_access_err err;
		int niov = 0;

		if (plen) {
			mr = sr_mem_get(qp->nic, &a, rkey, va + off, plen, IBV_ACCESS_REMOTE_READ,
					iov, SR_PKT_IOV, &niov, &err);
			if (!mr) {
				ret = nak_access(qp, sr_psn_add(psn, (int32_t)i), err);
				break;
			}
		}
		resp_xmit(qp, SR_OPC(sr_qp_tr(qp), op), sr_psn_add(psn, (int32_t)i),
			  SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, iov, niov, plen, 0);
		if (mr)
			sr_mr_put(mr);
	}
	sr_net_batch_end();
	return ret;
}

static struct sr_res *res_new(struct sr_qp *qp)
{
	struct sr_res *r = &qp->resp.res[qp->resp.res_next++ % qp->resp.nres];

	memset(r, 0, sizeof(*r));
	return r;
}

/*
 * The payload of each response to READ request pkt: the path MTU, or the large segment a
 * softrdma requester asked for (SR_BTH_SR_RDSEG: min(its offer, our seg_max), which is what
 * its req_seg chose from our offer); 0 when it asks for one this QP cannot give. Its offer is
 * the one the QP holds for the peer (recv.c hear_offer), not this packet's byte 4 alone: the
 * ICRC leaves that out, and a bit flipped there would have the READ refused or cut at a size
 * the requester does not count by.
 */
static uint32_t read_seg(struct sr_qp *qp, struct sr_pkt *pkt)
{
	const struct sr_bth *bth = sr_pkt_bth(pkt);
	uint32_t s = qp->peer_sr ? qp->peer_seg : 0;

	if (!sr_bth_sr_rdseg(bth))
		return qp->mtu;
	if (s > qp->nic->seg_max)
		s = qp->nic->seg_max;
	if (qp->seg || qp->type != IBV_QPT_RC || qp->attr.path_mtu != IBV_MTU_4096 ||
	    s <= qp->mtu)
		return 0;
	return s;
}

static enum rsp do_read(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_reth *reth = sr_pkt_h(pkt, SR_H_RETH);
	uint64_t va = sr_reth_va(reth);
	uint32_t rkey = sr_reth_rkey(reth), len = sr_reth_len(reth);
	enum sr_access_err err;
	struct sr_mr *mr;
	struct sr_res *r;

	uint32_t seg = read_seg(qp, pkt);

	if (len > SR_MAX_MSG_SIZE || !seg)
		return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
	if (len) {
		struct sr_acc a = sr_acc_resp(qp, pkt->psn, true);

		mr = sr_mem_get(qp->nic, &a, rkey, va, len, IBV_ACCESS_REMOTE_READ, NULL, 0, NULL,
				&err);
		if (!mr)
			return nak_access(qp, pkt->psn, err);
		sr_mr_put(mr);
	}
	r = res_new(qp);
	r->type = SR_RES_READ;
	r->first_psn = pkt->psn;
	r->last_psn = sr_psn_add(pkt->psn, (int32_t)sr_npkts(len, seg) - 1);
	r->va = va;
	r->rkey = rkey;
	r->length = len;
	r->seg = seg;
	qp->resp.msn++;
	qp->resp.epsn = sr_psn_next(r->last_psn);
	return read_respond(qp, pkt->psn, va, rkey, len, pkt->psn, seg);
}

static enum rsp do_atomic(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_atmeth *a = sr_pkt_h(pkt, SR_H_ATMETH);
	uint64_t va = sr_atmeth_va(a), orig;
	struct sr_acc acc = sr_acc_resp(qp, pkt->psn, true);
	enum sr_access_err err;
	struct iovec iov;
	struct sr_mr *mr;
	struct sr_res *r;
	uint8_t *ptr;

	if (va & 7)	/* IBA 9.4.5: naturally aligned, else invalid request */
		return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
	mr = sr_mem_get(qp->nic, &acc, sr_atmeth_rkey(a), va, 8, IBV_ACCESS_REMOTE_ATOMIC, &iov, 1,
			NULL, &err);
	if (!mr)
		return nak_access(qp, pkt->psn, err);
	ptr = iov.iov_base;
	if ((uintptr_t)ptr & 7) {	/* an iova aligned, its memory not (a window's offset) */
		sr_mr_put(mr);
		return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
	}
	/* Real CPU atomics: atomic against the application's own atomics too (more than the
	 * IBV_ATOMIC_HCA the device reports). */
	if ((pkt->opcode & 0x1f) == SR_OP_CMP_SWAP) {
		orig = sr_atmeth_compare(a);
		__atomic_compare_exchange_n((uint64_t *)ptr, &orig, sr_atmeth_swap_add(a), false,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	} else {
		orig = __atomic_fetch_add((uint64_t *)ptr, sr_atmeth_swap_add(a), __ATOMIC_SEQ_CST);
	}
	sr_mr_put(mr);
	r = res_new(qp);
	r->type = SR_RES_ATOMIC;
	r->first_psn = r->last_psn = pkt->psn;
	r->orig = orig;
	qp->resp.msn++;
	qp->resp.epsn = sr_psn_next(pkt->psn);
	resp_xmit(qp, SR_OPC(sr_qp_tr(qp), SR_OP_ATOMIC_ACK), pkt->psn,
		  SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, NULL, 0, 0, orig);
	return RSP_DONE;
}

/* ATOMIC WRITE and FLUSH are answered by an RDMA READ response without payload (IBA memory
 * placement extensions; rxe does the same), and remembered so that a duplicate gets the same
 * answer without executing again: a second ATOMIC WRITE could undo a later WRITE. */
static enum rsp answer_empty(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_res *r = res_new(qp);

	r->type = SR_RES_EMPTY;
	r->first_psn = r->last_psn = pkt->psn;
	qp->resp.msn++;
	qp->resp.epsn = sr_psn_next(pkt->psn);
	resp_xmit(qp, SR_OPC(SR_TR_RC, SR_OP_READ_RESP_ONLY), pkt->psn,
		  SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, NULL, 0, 0, 0);
	return RSP_DONE;
}

/*
 * ATOMIC WRITE: 8 bytes placed with one aligned 64-bit store, after every earlier request of
 * the QP (release order), so a reader never sees a mix of old and new bytes. Rights as rxe:
 * the QP's and the key's remote write (not remote atomic).
 */
static enum rsp do_atomic_write(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_reth *reth = sr_pkt_h(pkt, SR_H_RETH);
	uint64_t va = sr_reth_va(reth), v;
	struct sr_acc acc = sr_acc_resp(qp, pkt->psn, true);
	enum sr_access_err err;
	struct iovec iov;
	struct sr_mr *mr;

	if (sr_reth_len(reth) != 8 || pkt->paylen != 8 || (va & 7))
		return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
	mr = sr_mem_get(qp->nic, &acc, sr_reth_rkey(reth), va, 8, IBV_ACCESS_REMOTE_WRITE, &iov, 1,
			NULL, &err);
	if (!mr)
		return nak_access(qp, pkt->psn, err);
	if ((uintptr_t)iov.iov_base & 7) {
		sr_mr_put(mr);
		return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
	}
	memcpy(&v, sr_pkt_payload(pkt), 8);	/* the requester's bytes, as they are */
	__atomic_store_n((uint64_t *)iov.iov_base, v, __ATOMIC_RELEASE);
	sr_mr_put(mr);
	return answer_empty(qp, pkt);
}

/*
 * FLUSH: everything this QP placed before it (PSN order) is made globally visible, or durable
 * (placement type persistence: msync of the range of a file-backed MR). Selectivity: the
 * RETH's range, or the whole region the key names. Rights: the QP's and the key's FLUSH access
 * for every placement type asked (as rxe's IB_ACCESS_FLUSH_GLOBAL/PERSISTENT).
 */
static enum rsp do_flush(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_feth *f = sr_pkt_h(pkt, SR_H_FETH);
	struct sr_reth *reth = sr_pkt_h(pkt, SR_H_RETH);
	unsigned plt = sr_feth_plt(f), sel = sr_feth_sel(f), access = 0;
	struct sr_acc acc = sr_acc_resp(qp, pkt->psn, true);
	enum sr_access_err err;
	int ret;

	if (!plt || (plt & ~(SR_FLUSH_GLOBAL | SR_FLUSH_PERSISTENT)) || sel > SR_FLUSH_MR)
		return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
	if (plt & SR_FLUSH_GLOBAL)
		access |= SR_ACCESS_FLUSH_GLOBAL;
	if (plt & SR_FLUSH_PERSISTENT)
		access |= SR_ACCESS_FLUSH_PERSISTENT;
	ret = sr_mem_flush(qp->nic, &acc, sr_reth_rkey(reth), sr_reth_va(reth), sr_reth_len(reth),
			   sel == SR_FLUSH_MR, access, plt & SR_FLUSH_PERSISTENT, &err);
	if (ret > 0)
		return nak_access(qp, pkt->psn, err);
	if (ret < 0)	/* the write-back failed: the data is not durable */
		return nak_error(qp, pkt->psn, SR_NAK_REM_OP_ERR);
	return answer_empty(qp, pkt);
}

/* ---- RC duplicates --------------------------------------------------------------------- */
static void rc_duplicate(struct sr_qp *qp, struct sr_pkt *pkt)
{
	sr_stat_inc(&qp->nic->stats, SR_STAT_dup_requests);
	sr_dbg("qp#%u: duplicate PSN %u (expecting %u)%s", sr_qpn(qp), pkt->psn, qp->resp.epsn,
	       pkt->ackreq ? ", ack requested" : "");
	if (pkt->mask & (SR_M_SEND | SR_M_WRITE)) {
		/* Already executed: acknowledge the latest PSN again if asked (C9-104?). */
		if (pkt->ackreq)
			sr_send_ack(qp, sr_psn_add(qp->resp.epsn, -1), SR_AETH_ACK | SR_AETH_ACK_UNLIMITED);
		return;
	}
	for (uint32_t i = 0; i < qp->resp.nres; i++) {
		struct sr_res *r = &qp->resp.res[i];

		if (!r->type || !sr_psn_in(pkt->psn, r->first_psn, r->last_psn))
			continue;
		if ((pkt->mask & SR_M_READ) && r->type == SR_RES_READ) {
			struct sr_reth *reth = sr_pkt_h(pkt, SR_H_RETH);
			uint32_t k = (uint32_t)sr_psn_diff(pkt->psn, r->first_psn);
			uint64_t va = sr_reth_va(reth);
			uint32_t len = sr_reth_len(reth);

			/* Only what the original asked for, from where the retry resumes. */
			if (sr_reth_rkey(reth) != r->rkey || va != r->va + (uint64_t)k * r->seg ||
			    (uint64_t)len + (uint64_t)k * r->seg != r->length || read_seg(qp, pkt) != r->seg)
				break;
			read_respond(qp, pkt->psn, va, r->rkey, len, r->first_psn, r->seg);
			return;
		}
		if ((pkt->mask & (SR_M_ATOMIC_WRITE | SR_M_FLUSH)) && r->type == SR_RES_EMPTY &&
		    r->first_psn == pkt->psn) {
			resp_xmit(qp, SR_OPC(SR_TR_RC, SR_OP_READ_RESP_ONLY), pkt->psn,
				  SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, NULL, 0, 0, 0);
			return;
		}
		if ((pkt->mask & SR_M_ATOMIC) && r->type == SR_RES_ATOMIC && r->first_psn == pkt->psn) {
			resp_xmit(qp, SR_OPC(sr_qp_tr(qp), SR_OP_ATOMIC_ACK), pkt->psn,
				  SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, NULL, 0, 0, r->orig);
			return;
		}
		break;
	}
	sr_stat_inc(&qp->nic->stats, SR_STAT_drop_unexpected);	/* too old to replay */
}

/* ---- per transport ----------------------------------------------------------------------- */
static bool sequence_ok(struct sr_qp *qp, struct sr_pkt *pkt)
{
	bool cont_send = (pkt->mask & SR_M_SEND) && !(pkt->mask & SR_M_START);
	bool cont_write = (pkt->mask & SR_M_WRITE) && !(pkt->mask & SR_M_START);

	/* A MIDDLE/LAST continues the message in progress; anything else starts one and may
	 * only come between messages (IBA 9.8.3.1 opcode sequence check). */
	if (qp->resp.in_send)
		return cont_send;
	if (qp->resp.in_write)
		return cont_write;
	return !cont_send && !cont_write;
}

static bool qp_allows(struct sr_qp *qp, struct sr_pkt *pkt)
{
	unsigned acc = qp->attr.qp_access_flags;

	if ((pkt->mask & SR_M_WRITE) && !(acc & IBV_ACCESS_REMOTE_WRITE))
		return false;
	if ((pkt->mask & SR_M_READ) && !(acc & IBV_ACCESS_REMOTE_READ))
		return false;
	if ((pkt->mask & SR_M_ATOMIC) && !(acc & IBV_ACCESS_REMOTE_ATOMIC))
		return false;
	if ((pkt->mask & SR_M_ATOMIC_WRITE) && !(acc & IBV_ACCESS_REMOTE_WRITE))
		return false;	/* as rxe: ATOMIC WRITE is a write */
	if (pkt->mask & SR_M_FLUSH) {
		unsigned plt = sr_feth_plt(sr_pkt_h(pkt, SR_H_FETH));

		if (((plt & SR_FLUSH_GLOBAL) && !(acc & SR_ACCESS_FLUSH_GLOBAL)) ||
		    ((plt & SR_FLUSH_PERSISTENT) && !(acc & SR_ACCESS_FLUSH_PERSISTENT)))
			return false;
	}
	return true;
}

/* ---- out-of-sequence requests ----------------------------------------------------------------
 * IBA go-back-N has the responder drop every packet after a gap; the requester then resends
 * its whole window. softrdma's responder keeps the requests that arrive after a gap (at most
 * ooo_window of them, at most SR_OOO_MAX, copies, only while a gap is open) and, when the missing packet arrives, executes
 * them in order and acknowledges the highest PSN. The wire behaviour stays the IBA's -- one
 * NAK-sequence-error, then an ACK for packets this responder really has -- but the requester
 * (softrdma's, or any that accepts an ACK beyond what it has resent so far) skips what is
 * acknowledged instead of resending it: a loss costs about one round trip of packets, not a
 * window.
 */
#define SR_OOO_MAX 256

struct sr_ooo_pkt {
	uint32_t psn;
	uint32_t len;
	uint8_t *data;		/* NULL: empty slot */
};

struct sr_ooo {
	struct sr_ooo_pkt slot[SR_OOO_MAX];
	uint32_t count;
};

static void ooo_free(struct sr_qp *qp)
{
	struct sr_ooo *o = qp->resp.ooo;

	if (!o)
		return;
	for (uint32_t i = 0; i < SR_OOO_MAX; i++)
		free(o->slot[i].data);
	free(o);
	qp->resp.ooo = NULL;
}

static void ooo_keep(struct sr_qp *qp, struct sr_pkt *pkt, int32_t d)
{
	struct sr_ooo_pkt *sl;

	long win = sr_params()->ooo_window;

	if (d <= 0 || d >= (win < SR_OOO_MAX ? win : SR_OOO_MAX))
		return;
	if (!qp->resp.ooo && !(qp->resp.ooo = calloc(1, sizeof(*qp->resp.ooo))))
		return;
	sl = &qp->resp.ooo->slot[pkt->psn % SR_OOO_MAX];
	if (sl->data && sl->psn == pkt->psn)
		return;	/* a duplicate of one kept already */
	if (sl->data)
		qp->resp.ooo->count--;	/* (a stale one replaced: count stays exact) */
	free(sl->data);
	sl->data = malloc(pkt->len);
	if (!sl->data)
		return;
	memcpy(sl->data, pkt->hdr, pkt->len);
	sl->len = pkt->len;
	sl->psn = pkt->psn;
	qp->resp.ooo->count++;
	sr_stat_inc(&qp->nic->stats, SR_STAT_ooo_kept);
}

/* The kept packet with the expected PSN, parsed into *pkt (its buffer is *data, to free). */
static bool ooo_next(struct sr_qp *qp, struct sr_pkt *pkt, uint8_t **data)
{
	struct sr_ooo *o = qp->resp.ooo;
	struct sr_ooo_pkt *sl;

	if (!o || !o->count)
		return false;
	sl = &o->slot[qp->resp.epsn % SR_OOO_MAX];
	if (!sl->data || sl->psn != qp->resp.epsn)
		return false;
	*data = sl->data;
	sl->data = NULL;
	o->count--;
	return sr_pkt_parse(pkt, *data, sl->len) == SR_PE_OK;
}

static enum rsp rc_execute(struct sr_qp *qp, struct sr_pkt *pkt);

/*
 * XRC target (XRC annex): the request's XRCETH names the XRC SRQ, of this QP's domain, whose
 * receive WQEs, CQ and PD (for SGEs and rkeys) the request uses. A message keeps the SRQ it
 * started with. False for an SRQ number that is not an XRC SRQ of the domain.
 */
static bool xrc_bind(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_srq *s;
	uint32_t srqn;

	if (qp->type != IBV_QPT_XRC_RECV)
		return true;
	srqn = sr_xrceth_srqn(sr_pkt_h(pkt, SR_H_XRCETH));
	if (qp->srq && qp->srq->srqn == srqn)
		return true;
	if (qp->resp.have_rwqe || qp->resp.in_send || qp->resp.in_write)
		return false;	/* another SRQ in the middle of a message */
	s = sr_xrc_srq_get(qp->xrcd, srqn);
	if (!s) {
		sr_log_rl(SR_LOG_INFO, "qp#%u: XRCETH names SRQ %u, not an XRC SRQ of the domain",
			  sr_qpn(qp), srqn);
		return false;
	}
	sr_xrc_unbind(qp);
	qp->srq = s;
	qp->pd = s->pd;
	qp->rcq = s->cq;
	return true;
}

static void rc_rcv(struct sr_qp *qp, struct sr_pkt *pkt)
{
	int32_t d = sr_psn_diff(pkt->psn, qp->resp.epsn);
	enum rsp r;

	if (d > 0) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_psn);
		ooo_keep(qp, pkt, d);
		if (!qp->resp.nak_sent) {
			sr_dbg("qp#%u: PSN %u while expecting %u: NAK", sr_qpn(qp), pkt->psn,
			       qp->resp.epsn);
			sr_send_ack(qp, qp->resp.epsn, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
			qp->resp.nak_sent = true;
		}
		return;
	}
	if (d < 0) {
		if (!xrc_bind(qp, pkt)) {
			sr_stat_inc(&qp->nic->stats, SR_STAT_drop_unexpected);
			return;
		}
		rc_duplicate(qp, pkt);
		return;
	}
	qp->resp.nak_sent = false;
	r = rc_execute(qp, pkt);
	/* The gap is filled: run what was kept behind it, in order, and say how far we got. */
	if ((r == RSP_OK || r == RSP_DONE) && qp->resp.ooo && qp->resp.ooo->count) {
		struct sr_pkt k;
		uint8_t *data;
		bool ran = false;

		while (qp->state != IBV_QPS_ERR && ooo_next(qp, &k, &data)) {
			sr_stat_inc(&qp->nic->stats, SR_STAT_ooo_run);
			r = rc_execute(qp, &k);
			free(data);
			ran = true;
			if (r != RSP_OK && r != RSP_DONE)
				break;
		}
		if (r != RSP_RNR && qp->state != IBV_QPS_ERR) {
			if (qp->resp.ooo->count && !qp->resp.nak_sent) {
				/* Another gap, with packets kept behind it: NAK it at once (the
				 * NAK acknowledges everything before it, IBA 9.7.5.1.x), also when
				 * it comes right after the packet that filled the first one (two
				 * packets lost in a row). The ACK of that packet alone, still to
				 * be sent, would tell the requester that nothing was kept, and it
				 * would fall back to go-back-N for good (comp.c, repair_answered). */
				sr_send_ack(qp, qp->resp.epsn, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR);
				qp->resp.nak_sent = true;
				qp->resp.ack_pending = false;
			} else if (ran) {
				ack_later(qp, sr_psn_add(qp->resp.epsn, -1));
			}
		}
	}
	if (qp->state == IBV_QPS_ERR)
		ooo_free(qp);
}

/* Executes the request with the expected PSN. */
static enum rsp rc_execute(struct sr_qp *qp, struct sr_pkt *pkt)
{
	enum rsp r;

	if (!xrc_bind(qp, pkt) || !sequence_ok(qp, pkt) || !qp_allows(qp, pkt))
		return nak_error(qp, pkt->psn, SR_NAK_INVALID_REQ);
	qp->resp.cur_class = msg_class(pkt);
	if (pkt->mask & SR_M_SEND)
		r = do_send(qp, pkt);
	else if (pkt->mask & SR_M_WRITE)
		r = do_write(qp, pkt);
	else if (pkt->mask & SR_M_READ)
		r = do_read(qp, pkt);
	else if (pkt->mask & SR_M_ATOMIC_WRITE)
		r = do_atomic_write(qp, pkt);
	else if (pkt->mask & SR_M_FLUSH)
		r = do_flush(qp, pkt);
	else
		r = do_atomic(qp, pkt);
	if (r == RSP_OK) {
		qp->resp.epsn = sr_psn_next(pkt->psn);
		if (pkt->mask & SR_M_END)
			score_answer(qp, pkt);
		if (pkt->ackreq && !qp->resp.acked_now)
			ack_later(qp, pkt->psn);
		else if (!pkt->ackreq && (pkt->mask & SR_M_END) && qp->type == IBV_QPT_RC &&
			 qp->peer_sr)
			ack_unasked(qp, pkt->psn);
	}
	qp->resp.acked_now = false;
	return r;
}

static void uc_rcv(struct sr_qp *qp, struct sr_pkt *pkt)
{
	bool start = pkt->mask & SR_M_START;

	if (pkt->psn != qp->resp.epsn) {
		if (sr_psn_lt(pkt->psn, qp->resp.epsn)) {
			/* Late or duplicated: UC PSNs only move forward (IBA 9.8.3). */
			sr_stat_inc(&qp->nic->stats, SR_STAT_drop_psn);
			return;
		}
		/* Loss: the message in progress is gone; a new one may start right here. */
		qp->resp.in_send = qp->resp.in_write = false;
		qp->resp.uc_drop = !start;
		qp->resp.epsn = sr_psn_next(pkt->psn);
		if (!start) {
			sr_stat_inc(&qp->nic->stats, SR_STAT_drop_psn);
			return;
		}
	} else {
		qp->resp.epsn = sr_psn_next(pkt->psn);
		if (qp->resp.uc_drop && !start) {
			sr_stat_inc(&qp->nic->stats, SR_STAT_drop_uc_msg);
			return;
		}
	}
	qp->resp.uc_drop = false;
	if (!sequence_ok(qp, pkt) || !qp_allows(qp, pkt)) {
		qp->resp.in_send = qp->resp.in_write = false;
		qp->resp.uc_drop = !(pkt->mask & SR_M_END);
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_uc_msg);
		return;
	}
	enum rsp r = (pkt->mask & SR_M_SEND) ? do_send(qp, pkt) : do_write(qp, pkt);

	if (r == RSP_DROP) {
		qp->resp.in_send = qp->resp.in_write = false;
		qp->resp.uc_drop = !(pkt->mask & SR_M_END);
	}
}

/*
 * UD receive: the first 40 bytes of the buffer get the GRH (IBA 11.4.1.1). On RoCEv2 over IPv4
 * its last 20 bytes are the IPv4 header; softrdma also stores the sender's UDP port in the
 * first 20 (otherwise unused) bytes so ibv_init_ah_from_wc() can answer a peer on another
 * port: "SR" + port, big-endian (docs/gid.md).
 */
static void build_grh(struct sr_qp *qp, const struct sr_addr *src, uint32_t paylen, uint8_t *grh)
{
	const struct sr_addr *me = &qp->nic->addr;

	memset(grh, 0, 40);
	if (src->family == AF_INET) {
		uint8_t *ip = grh + 20;

		grh[0] = 'S';
		grh[1] = 'R';
		sr_st_be16(&grh[2], src->port);
		ip[0] = 0x45;
		sr_st_be16(&ip[2], (uint16_t)(20 + 8 + SR_BTH_LEN + SR_DETH_LEN + paylen + SR_ICRC_LEN));
		ip[6] = 0x40;	/* DF */
		ip[8] = 64;
		ip[9] = 17;	/* UDP */
		memcpy(&ip[12], &src->v4, 4);
		memcpy(&ip[16], &me->v4, 4);
	} else {
		grh[0] = 0x60;
		sr_st_be16(&grh[4], (uint16_t)(8 + SR_BTH_LEN + SR_DETH_LEN + paylen + SR_ICRC_LEN));
		grh[6] = 17;
		grh[7] = 64;
		memcpy(&grh[8], &src->v6, 16);
		memcpy(&grh[24], &me->v6, 16);
	}
}

void sr_ud_rcv(struct sr_qp *qp, struct sr_pkt *pkt, const struct sr_addr *src)
{
	struct sr_deth *deth = sr_pkt_h(pkt, SR_H_DETH);
	uint8_t grh[40];
	int st;

	if (sr_deth_qkey(deth) != qp->attr.qkey) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_qkey);
		return;
	}
	if (pkt->paylen > qp->mtu) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_too_long);
		return;
	}
	if (!take_rwqe(qp)) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_no_rwqe);
		return;
	}
	build_grh(qp, src, pkt->paylen, grh);
	st = scatter(qp, 0, grh, 40);
	if (!st)
		st = scatter(qp, 40, sr_pkt_payload(pkt), pkt->paylen);
	if (st) {
		if (st == IBV_WC_LOC_LEN_ERR)
			sr_stat_inc(&qp->nic->stats, SR_STAT_drop_too_long);
		complete_rwqe(qp, (enum ibv_wc_status)st, IBV_WC_RECV, 0, NULL, 0, 0, 0);
		return;
	}
	/* slid: the sender's LID, i.e. its UDP port when it is a softrdma device off 4791 (docs/
	 * gid.md, "The LID carries the port"), else 0 as on any RoCE port (kernel rxe leaves it
	 * 0). An address vector made from the completion as rdma-core makes one (dgid
	 * ::ffff:a.b.c.d from the GRH area, dlid = slid) then reaches the sender's process. */
	complete_rwqe(qp, IBV_WC_SUCCESS, IBV_WC_RECV, 40 + pkt->paylen, pkt, sr_deth_sqp(deth),
		      sr_addr_lid(src), IBV_WC_GRH);
}

void sr_resp_rcv(struct sr_qp *qp, struct sr_pkt *pkt, const struct sr_addr *src)
{
	switch (qp->state) {
	case IBV_QPS_RTR:
		if (!qp->resp.comm_est && qp->type != IBV_QPT_UD) {
			/* First packet on a connection still in RTR (IBA 11.6.3.2). */
			qp->resp.comm_est = true;
			sr_async_event(qp->ctx, IBV_EVENT_COMM_EST, qp);
		}
		break;
	case IBV_QPS_RTS:
	case IBV_QPS_SQD:
	case IBV_QPS_SQE:
		break;
	default:
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_qp_state);
		return;
	}
	if (sr_qp_reliable(qp))
		rc_rcv(qp, pkt);
	else if (qp->type == IBV_QPT_UC)
		uc_rcv(qp, pkt);
	else
		sr_ud_rcv(qp, pkt, src);
	/* XRC target: the SRQ stays bound only while a message is in progress. */
	if (!qp->resp.have_rwqe && !qp->resp.in_send && !qp->resp.in_write)
		sr_xrc_unbind(qp);
}

/* Back to RESET: forget every piece of transport state (qp lock held). */
void sr_transport_reset(struct sr_qp *qp)
{
	ooo_free(qp);
	/* LOCAL_INVs executed and never completed release the maps they hold. */
	for (uint32_t i = qp->sq.tail; i != qp->sq.head; i++) {
		struct sr_swqe *w = sr_sq_at(&qp->sq, i);

		if (w->opcode == IBV_WR_LOCAL_INV && w->u.inv.held) {
			sr_key_inval_done(qp, w->imm);
			w->u.inv.held = false;
		}
	}
	qp->sq.head = qp->sq.tail = 0;
	qp->rq.head = qp->rq.tail = 0;
	memset(&qp->req, 0, sizeof(qp->req));
	memset(&qp->comp, 0, sizeof(qp->comp));
	qp->resp.epsn = qp->resp.msn = 0;
	qp->resp.nak_sent = qp->resp.comm_est = qp->resp.in_send = qp->resp.in_write = false;
	qp->resp.uc_drop = qp->resp.have_rwqe = false;
	qp->resp.seg = 0;
	sr_qp_peer_forget(qp);
	sr_xrc_unbind(qp);
	if (qp->resp.res)
		memset(qp->resp.res, 0, qp->resp.nres * sizeof(*qp->resp.res));
	qp->rexmit_at = 0;
	qp->sq_draining = false;
}
