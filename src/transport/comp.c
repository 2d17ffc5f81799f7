/* SPDX-License-Identifier: MIT */
/*
 * The completer: consumes responses (ACK/NAK, READ responses, ATOMIC ACKs) on an RC requester
 * and completes send WQEs, strictly in order.
 *
 * comp.psn is the oldest PSN not yet acknowledged. Responses are cumulative (IBA 9.7.5.1): an
 * ACK or a response for PSN p acknowledges everything before p, so every WQE that ends before
 * p completes -- except a READ or ATOMIC, whose data must arrive in its own response; an ACK
 * beyond a READ whose response never came means that response was lost, and the requester
 * goes back and asks again (IBA 9.7.5.1.x "implied NAK").
 *
 * Retries: a NAK-sequence-error or a timeout rewinds the requester to comp.psn. retry_cnt
 * limits retries without forward progress (any newly acknowledged PSN restores it); rnr_retry
 * does the same for RNR NAKs, 7 meaning forever (IBA 9.7.5.2.8, C9-155).
 */
#include "core/log.h"
#include "core/param.h"
#include "transport/xport.h"
#include "wire/icrc.h"

/* RFC 6298 2.2/2.3: the first sample sets SRTT = R, RTTVAR = R/2; then RTTVAR = 3/4 RTTVAR +
 * 1/4 |SRTT - R|, SRTT = 7/8 SRTT + 1/8 R. */
static void rtt_update(struct sr_qp *qp, uint64_t r)
{
	if (!qp->comp.srtt_ns) {
		qp->comp.srtt_ns = r;
		qp->comp.rttvar_ns = r / 2;
		/* The first sample arms the probes (probe_ns): the progress thread may sleep on a
		 * deadline computed without them, the local ACK timeout. */
		sr_nic_kick(qp->nic);
	} else {
		uint64_t d = qp->comp.srtt_ns > r ? qp->comp.srtt_ns - r : r - qp->comp.srtt_ns;

		qp->comp.rttvar_ns = (3 * qp->comp.rttvar_ns + d) / 4;
		qp->comp.srtt_ns = (7 * qp->comp.srtt_ns + r) / 8;
	}
}

static void progress_made(struct sr_qp *qp)
{
	uint64_t now = sr_drain_now_ns();	/* the drain's, when an application drains */

	sr_cwnd_grow(qp);
	qp->comp.retry_left = qp->attr.retry_cnt;
	qp->comp.rnr_left = qp->attr.rnr_retry;
	qp->comp.last_progress = now;
	qp->comp.nak_rewound = false;
	qp->comp.backoff = 0;
	qp->comp.tlp_count = 0;
	if (qp->comp.rtt_valid && sr_psn_gt(qp->comp.psn, qp->comp.rtt_psn)) {
		uint64_t r = now - qp->comp.rtt_t0;

		if (!r)
			r = 1;
		/* the completer runs on the receive path only: nic->rx_lock held */
		sr_stat_add_excl(&qp->nic->stats, SR_STAT_rtt_samples, 1);
		sr_stat_add_excl(&qp->nic->stats, SR_STAT_rtt_sample_us, r / 1000);
		if (!qp->comp.rtt_min_ns || r < qp->comp.rtt_min_ns)
			qp->comp.rtt_min_ns = r;
		rtt_update(qp, r);
		qp->comp.rtt_valid = false;
	}
}

static uint64_t local_ack_timeout(const struct sr_qp *qp);

/*
 * How long without progress before a fast (uncounted) go-back-N: the retransmission timeout of
 * TCP (RFC 6298), SRTT + 4 RTTVAR (at least 2 SRTT, below), at least rto_min_us (a loaded 2-core machine delays ACKs by
 * milliseconds, and a spurious go-back-N adds load), at most the local ACK timeout in force
 * (the IBA timeout is the user's bound on the round trip; past it the counted timer acts). A
 * tail loss (the last packets of a window, with nothing after them to reveal the gap) would
 * otherwise cost the full local ACK timeout. Before the first sample there is none: the round
 * trip is unknown (a peer 20 ms away took a fixed 10 ms for a loss, and every resend then
 * spoiled the next sample, by Karn's rule, so no sample was ever taken and every window was
 * sent twice), and the IBA timer alone runs, as TCP's initial RTO.
 */
static uint64_t probe_ns(const struct sr_qp *qp)
{
	uint64_t cap = qp->timeout_ns ? local_ack_timeout(qp) : UINT64_MAX;
	uint64_t min = (uint64_t)sr_params()->rto_min_us * 1000;
	uint64_t p;

	if (!qp->comp.srtt_ns)
		return cap;
	p = qp->comp.srtt_ns + 4 * qp->comp.rttvar_ns;
	/* ... and at least two round trips: in a stream the ACKs come in bursts a round trip
	 * apart and a steady path leaves RTTVAR small, so SRTT + 4 RTTVAR sat just above the gap
	 * between bursts and a scheduling hiccup crossed it (a go-back-N of the whole window each
	 * time). A lost tail is the probe's first (tlp_ns); Linux floors the variance term too. */
	if (p < 2 * qp->comp.srtt_ns)
		p = 2 * qp->comp.srtt_ns;
	if (p < min)
		p = min;
	return p < cap ? p : cap;
}

static struct sr_swqe *oldest(struct sr_qp *qp)
{
	if (qp->sq.tail == qp->sq.head)
		return NULL;
	struct sr_swqe *w = sr_sq_at(&qp->sq, qp->sq.tail);

	return w->state == SR_WQE_POSTED ? NULL : w;
}

void sr_comp_error_oldest(struct sr_qp *qp)
{
	struct sr_swqe *w = oldest(qp);

	if (!w || !w->status)
		return;
	sr_comp_wqe(qp, w, (enum ibv_wc_status)w->status);
	if (sr_qp_reliable(qp))
		sr_qp_to_error(qp);
	else
		sr_qp_to_sqe(qp);
}

/* Completes an error on the oldest WQE and moves the QP to ERR (the rest flushes). */
static void fail_oldest(struct sr_qp *qp, enum ibv_wc_status st)
{
	struct sr_swqe *w = oldest(qp);

	if (w)
		sr_comp_wqe(qp, w, st);
	sr_qp_to_error(qp);
}

/*
 * Completes WQEs that a response for PSN psn implies are done: fully sent SEND/WRITE WQEs whose
 * last PSN is before psn (or at psn when `inclusive`). Stops at a READ/ATOMIC, at a WQE not fully
 * sent, and at a WQE that carries a local error (which then completes with it). Returns the
 * first WQE it could not complete, or NULL when the SQ has nothing outstanding.
 */
static struct sr_swqe *complete_before(struct sr_qp *qp, uint32_t psn, bool inclusive)
{
	struct sr_swqe *w;

	while ((w = oldest(qp))) {
		if (w->status) {
			sr_comp_error_oldest(qp);
			return NULL;
		}
		if (sr_op_is_local(w->opcode)) {
			sr_comp_wqe(qp, w, IBV_WC_SUCCESS);	/* executed; all before it done */
			continue;
		}
		if (sr_op_is_rd_atomic(w->opcode))
			return w;
		if (inclusive ? sr_psn_gt(w->last_psn, psn) : sr_psn_ge(w->last_psn, psn))
			return w;
		/* Covered: the responder has every packet, even if we are resending some (the
		 * requester catches up, sr_req_progress). */
		if (sr_psn_lt(qp->comp.psn, sr_psn_next(w->last_psn)))
			qp->comp.psn = sr_psn_next(w->last_psn);
		sr_comp_wqe(qp, w, IBV_WC_SUCCESS);
		progress_made(qp);
		if (qp->state == IBV_QPS_ERR)
			return NULL;
	}
	return NULL;
}

/*
 * Selective repair. A softrdma responder keeps the requests that arrive after a gap (resp.c)
 * and, once the gap is filled, acknowledges all of them -- or NAKs the next gap when one is
 * left. Resending the whole window after a NAK (go-back-N) would then send again what the
 * peer already has; resending only the missing packet costs one packet per loss. A responder
 * that keeps nothing (rxe, IBA's go-back-N) shows it on the first repair: a NAK proved that
 * later packets had reached it, yet its answer to the resent packet acknowledges that packet
 * alone. From then on this QP uses go-back-N.
 */
static bool resend_one(struct sr_qp *qp, uint32_t psn, bool nak)
{
	if (!sr_req_resend_one(qp, psn))
		return false;
	qp->comp.repairing = true;
	qp->comp.repair_nak = nak;
	qp->comp.repair_psn = psn;
	qp->comp.tlp_at = sr_now_ns();	/* unanswered, it is resent by the probe timer */
	return true;
}

static bool try_repair(struct sr_qp *qp, uint32_t psn)
{
	if (qp->comp.peer_keeps < 0 || !sr_params()->repair || !resend_one(qp, psn, true))
		return false;
	sr_stat_inc(&qp->nic->stats, SR_STAT_repairs);
	return true;
}

static void retry_from(struct sr_qp *qp, uint32_t psn, bool count, bool timeout, bool repair);

/*
 * A probe shown premature (repair_answered): the probed packet's first copy left before the
 * probe, so whichever copy its ACK answers, the time since the probe is a lower bound of the
 * round trip now, and it is above SRTT (the probe waited longer than SRTT): taken as a sample
 * (counted: rtt_bounds; RTTVAR takes the jump, so the timers widen at once). Without it the
 * estimate froze at the queue-free round trip: Karn's rule gives up the sample under way at
 * every resend, a probe fired during each sample's flight, behind a 1 Gbit/s shaper whose
 * queue held 5-10 ms the probe kept firing at 0.5 ms (3 samples in a 3 s run of RTRS READ,
 * 1,090 resends per 1000 requests). Only there: after any resend, the first ACK of older
 * packets bounds the round trip from below too, but on a loaded machine under loss that time
 * included the peer's stalls, widened the timers after each, and left more of 20 % loss to
 * the IBA timeout.
 */
static void rtt_bound(struct sr_qp *qp, uint64_t r)
{
	if (r <= qp->comp.srtt_ns)
		return;
	sr_stat_inc(&qp->nic->stats, SR_STAT_rtt_bounds);
	rtt_update(qp, r);
}

/* A response moved comp.psn (by an ACK when `is_ack`, else a NAK): what it says about a packet
 * resent alone. Returns true when it started a go-back-N (the caller stops). */
static bool repair_answered(struct sr_qp *qp, bool is_ack)
{
	uint32_t next = sr_psn_next(qp->comp.repair_psn);

	if (!qp->comp.repairing || !sr_psn_gt(qp->comp.psn, qp->comp.repair_psn))
		return false;
	qp->comp.repairing = false;
	if (sr_psn_gt(qp->comp.psn, next)) {
		/* Acknowledged more than was resent after a NAK: the peer kept it. (After a
		 * tail-loss probe it proves nothing: the probe may have been a duplicate.) */
		if (qp->comp.repair_nak)
			qp->comp.peer_keeps = 1;
		return false;
	}
	uint64_t since = sr_now_ns() - qp->comp.tlp_at;

	sr_dbg("qp#%u: ACK of PSN %u alone, %llu us after its resend (its answer from %llu to "
	       "%llu us)", sr_qpn(qp), qp->comp.repair_psn, (unsigned long long)since / 1000,
	       (unsigned long long)qp->comp.rtt_min_ns / 1000,
	       (unsigned long long)qp->comp.probe_age_ns / 1000);
	if (is_ack && !qp->comp.repair_nak && qp->comp.rtt_min_ns &&
	    (since < qp->comp.rtt_min_ns || since > qp->comp.probe_age_ns)) {
		/* An ACK sooner after a tail-loss probe than the path's shortest round trip cannot
		 * answer it: it answers the packet's first copy, late, as every ACK behind a full
		 * queue (a shaped link: tc tbf) or a stalled peer is. It says nothing of what
		 * follows. The probe's own answer, if the rest is lost, comes later and names no
		 * more than this: it is judged then (repairing stays set); an ACK of more clears it
		 * (above). Before this, each such ACK resent the whole window for nothing.
		 * Nor does an ACK later after the probe than the probe came after the packet's
		 * first copy (probe_age_ns, from its WQE's first send: never shorter): whichever
		 * copy it answers, the round trip is at least that long now, so the probe left
		 * before the first copy could have been answered; its silence then proved no
		 * loss, and the round trip it shows, longer than the probe's own wait (at least
		 * SRTT + 2 RTTVAR), is a queue that grew, not a loss: behind a queue of
		 * milliseconds the first copy's ACK came later than the shortest round trip after
		 * the probe, and each resent every request outstanding (RTRS READ over a 1 Gbit/s
		 * shaper). The time since the probe is then a lower bound of the round trip
		 * (rtt_bound). (A loss at the very moment the round trip more than doubles is left
		 * to the next probe and the fast go-back-N.) */
		sr_stat_inc(&qp->nic->stats, SR_STAT_probe_acks_early);
		qp->comp.repairing = true;
		if (since > qp->comp.probe_age_ns)
			rtt_bound(qp, since);
		return false;
	}
	if (is_ack && sr_psn_lt(qp->comp.psn, qp->req.high_psn)) {
		/* That packet alone, with more outstanding: the rest is lost -- or, after a NAK
		 * that proved later packets had arrived, dropped by a peer that keeps nothing. */
		if (qp->comp.repair_nak && qp->comp.peer_keeps == 0) {
			sr_dbg("qp#%u: the peer drops packets after a gap: go-back-N from now on",
			       sr_qpn(qp));
			qp->comp.peer_keeps = -1;
		}
		retry_from(qp, qp->comp.psn, false, false, false);
		return true;
	}
	return false;
}

/*
 * First probe after 2 RTTs without progress (at least 500 us), at most half the fast
 * retransmission delay -- but never before the round trip plus its variance (SRTT + 2
 * RTTVAR): an ACK that is merely on its way is not a lost tail. On loopback that floor is far
 * below 500 us and changes nothing; on a path 20 ms away, half the fast retransmission delay
 * came before the ACKs. Before the first sample (probe_ns: `fast` is then the local ACK
 * timeout), see below.
 */
static uint64_t tlp_ns(const struct sr_qp *qp, uint64_t fast)
{
	uint64_t p = 2 * qp->comp.srtt_ns;
	uint64_t floor = qp->comp.srtt_ns + 2 * qp->comp.rttvar_ns;

	if (!qp->comp.srtt_ns) {
		/* No round trip measured yet: 500 us as before (a stall on loopback ends at once),
		 * doubled after each probe sent before the first sample and kept so across flights
		 * (Karn's backoff): on a long path the probes then soon wait long enough for a
		 * sample to get through, a few spurious packets once per QP. */
		p = qp->comp.tlp0_ns > 500000 ? qp->comp.tlp0_ns : 500000;
		return p < fast ? p : fast;
	}
	if (p < 500000)
		p = 500000;
	if (p > fast / 2)
		p = fast / 2;
	if (p < floor)
		p = floor;
	return p < fast ? p : fast;
}

static void retry_from(struct sr_qp *qp, uint32_t psn, bool count, bool timeout, bool repair)
{
	sr_dbg("qp#%u: retry from PSN %u (%s%s), sent up to %u, retries left %u, srtt %llu us, "
	       "rttvar %llu us, %llu us since progress", sr_qpn(qp), psn,
	       timeout ? "timeout" : count ? "NAK" : "NAK, implied NAK or fast retransmit",
	       count ? ", counted" : "", qp->req.high_psn, qp->comp.retry_left,
	       (unsigned long long)qp->comp.srtt_ns / 1000, (unsigned long long)qp->comp.rttvar_ns / 1000,
	       (unsigned long long)(sr_now_ns() - qp->comp.last_progress) / 1000);
	sr_cwnd_loss(qp, timeout);
	if (count) {
		if (!qp->comp.retry_left) {
			sr_stat_inc(&qp->nic->stats, SR_STAT_retry_exceeded);
			fail_oldest(qp, IBV_WC_RETRY_EXC_ERR);
			return;
		}
		qp->comp.retry_left--;
	}
	if (repair && try_repair(qp, psn)) {
		qp->comp.last_progress = sr_now_ns();
		sr_req_progress(qp);
		return;
	}
	qp->comp.repairing = false;
	sr_req_rewind(qp, psn);
	qp->comp.last_progress = sr_now_ns();
	sr_req_progress(qp);
}

void sr_comp_local(struct sr_qp *qp)
{
	struct sr_swqe *w;

	while ((w = oldest(qp)) && sr_op_is_local(w->opcode)) {
		if (w->status) {
			sr_comp_error_oldest(qp);
			return;
		}
		sr_comp_wqe(qp, w, IBV_WC_SUCCESS);
	}
}

/* ATOMIC WRITE and FLUSH are answered by an RDMA READ response without payload (as rxe and
 * the IBA memory placement extensions do): it completes them. */
static void empty_read_resp(struct sr_qp *qp, struct sr_swqe *w, struct sr_pkt *pkt)
{
	if ((pkt->opcode & 0x1f) != SR_OP_READ_RESP_ONLY || pkt->paylen ||
	    pkt->psn != w->first_psn || pkt->psn != qp->comp.psn) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_unexpected);
		return;
	}
	qp->comp.psn = sr_psn_next(pkt->psn);
	progress_made(qp);
	sr_comp_wqe(qp, w, IBV_WC_SUCCESS);
	sr_req_progress(qp);
}

/*
 * A READ response whose ICRC is still unchecked (pkt->icrc_tuple, src/net/udp.c): the next
 * MIDDLE response of the READ the oldest WQE is goes straight to its place in the READ's local
 * buffer, the ICRC computed in the same pass as the copy (sr_icrc_calc_copy), then compared, as
 * a WRITE's MIDDLE packets are at the responder (resp.c, sr_resp_place, which says why bytes
 * may land before their check). Here they land only in the READ's buffer, at the place the
 * requester's own state gives for the next response it expects (never where the packet
 * says), a buffer the application may not use before the READ completes; a packet that fails
 * the check moves nothing, so the response asked for again writes the same bytes before the
 * READ can complete, and that needs its LAST response, which is checked before anything acts
 * on it. Any other response has its ICRC checked first. False: the ICRC does not match (the
 * caller counts the drop). Saves the requester a read of every byte: the check and then the
 * copy were two passes over each response (9 % and 5 % of an ib_read_bw requester's samples
 * between two namespaces).
 */
bool sr_comp_place(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_swqe *w = oldest(qp);
	struct sr_sgl sgl;
	struct sr_acc a;
	bool ok;

	if (!(pkt->mask & SR_M_READ) || (pkt->mask & (SR_M_START | SR_M_END)) || !w ||
	    (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD) ||
	    w->opcode != IBV_WR_RDMA_READ || w->status || pkt->psn != qp->comp.psn ||
	    !sr_psn_in(pkt->psn, w->first_psn, w->last_psn) || !sr_psn_lt(pkt->psn, w->rd_end_psn) ||
	    pkt->psn == w->rd_mid_psn || pkt->paylen != w->seg)
		return sr_net_icrc_ok(qp->nic, pkt);
	a = sr_acc_req(qp, w);
	if (sr_sgl_map(qp->nic, &a, sr_sq_sges(&qp->sq, qp->sq.tail), w->num_sge,
		       (uint64_t)sr_psn_diff(pkt->psn, w->first_psn) * w->seg, pkt->paylen,
		       IBV_ACCESS_LOCAL_WRITE, &sgl))
		return sr_net_icrc_ok(qp->nic, pkt);	/* read_resp fails the READ */
	ok = sr_place_checked(qp->nic, pkt, sgl.iov, sgl.n);
	sr_sgl_release(&sgl);
	return ok;
}

static void read_resp(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_swqe *w = complete_before(qp, pkt->psn, false);
	uint32_t k, off, expect;
	struct sr_sgl sgl;
	int st;

	if (w && (w->opcode == IBV_WR_ATOMIC_WRITE || w->opcode == SR_WR_FLUSH)) {
		empty_read_resp(qp, w, pkt);
		return;
	}
	if (!w || w->opcode != IBV_WR_RDMA_READ || !sr_psn_in(pkt->psn, w->first_psn, w->last_psn)) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_unexpected);
		return;
	}
	if (pkt->psn != qp->comp.psn) {
		/* A gap: a response was lost (or is late). Ask again from the first missing one
		 * right away, once per gap, rather than wait for the timer (as rxe does: an
		 * "implied NAK"). A late response then arrives as a duplicate and is dropped. */
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_psn);
		if (sr_psn_gt(pkt->psn, qp->comp.psn) && !qp->comp.nak_rewound) {
			qp->comp.nak_rewound = true;
			retry_from(qp, qp->comp.psn, false, false, false);
		}
		return;
	}
	k = (uint32_t)sr_psn_diff(pkt->psn, w->first_psn);
	off = k * w->seg;
	expect = w->length - off < w->seg ? w->length - off : w->seg;
	/* A response sequence may restart (FIRST) at any PSN a retried request asked from, but it
	 * ends (LAST/ONLY) exactly where the request asked for ends -- the end of the piece of the
	 * READ it was (req.c) -- and every packet before the last is a full MTU (IBA 9.7.5.1.3), or a
	 * full segment of a READ that asked for large ones (req_seg). */
	bool is_last = pkt->mask & SR_M_END;
	bool mid = sr_rd_mid_valid(w) && pkt->psn == w->rd_mid_psn;	/* the end of the request
									 * before the last one */

	if (is_last != (mid || pkt->psn == w->rd_end_psn) || pkt->paylen != expect) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_unexpected);
		return;
	}
	if (pkt->paylen && !pkt->placed) {
		struct sr_acc a = sr_acc_req(qp, w);

		st = sr_sgl_map(qp->nic, &a, sr_sq_sges(&qp->sq, qp->sq.tail), w->num_sge, off,
				pkt->paylen, IBV_ACCESS_LOCAL_WRITE, &sgl);
		if (st) {
			fail_oldest(qp, (enum ibv_wc_status)st);
			return;
		}
		sr_sgl_copy_in(&sgl, sr_pkt_payload(pkt), pkt->paylen);
		sr_sgl_release(&sgl);
	}
	qp->comp.psn = sr_psn_next(pkt->psn);
	progress_made(qp);
	if (mid) {
		/* Its responder slot is free again; the last request goes on. */
		w->rd_mid_psn = sr_psn_add(w->first_psn, -1);
		qp->req.rd_extra--;
	}
	if (is_last) {
		if (pkt->psn == w->last_psn)
			sr_comp_wqe(qp, w, IBV_WC_SUCCESS);
		sr_req_progress(qp);	/* the next piece, an rd_atomic slot or a fence */
	} else if (sr_req_read_waits(qp)) {
		sr_req_progress(qp);	/* the next piece, while this one is answered */
	}
}

static void atomic_ack(struct sr_qp *qp, struct sr_pkt *pkt)
{
	struct sr_swqe *w = complete_before(qp, pkt->psn, false);
	struct sr_sgl sgl;
	uint64_t orig;
	int st;

	if (!w || (w->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
		   w->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) || w->first_psn != pkt->psn ||
	    pkt->psn != qp->comp.psn) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_unexpected);
		return;
	}
	orig = sr_atmack_orig(sr_pkt_h(pkt, SR_H_ATMACK));
	struct sr_acc a = sr_acc_req(qp, w);

	st = sr_sgl_map(qp->nic, &a, sr_sq_sges(&qp->sq, qp->sq.tail), w->num_sge, 0, 8,
			IBV_ACCESS_LOCAL_WRITE, &sgl);
	if (st) {
		fail_oldest(qp, (enum ibv_wc_status)st);
		return;
	}
	sr_sgl_copy_in(&sgl, &orig, 8);	/* host order, as the application reads a uint64_t */
	sr_sgl_release(&sgl);
	qp->comp.psn = sr_psn_next(pkt->psn);
	progress_made(qp);
	sr_comp_wqe(qp, w, IBV_WC_SUCCESS);
	sr_req_progress(qp);
}

static void ack(struct sr_qp *qp, struct sr_pkt *pkt)
{
	sr_dbg("qp#%u: ACK PSN %u, comp.psn %u, req.psn %u, high %u", sr_qpn(qp), pkt->psn,
	       qp->comp.psn, qp->req.psn, qp->req.high_psn);
	struct sr_swqe *w = complete_before(qp, pkt->psn, true);

	if (qp->state == IBV_QPS_ERR)
		return;
	if (w && !w->status) {
		if (sr_op_is_rd_atomic(w->opcode)) {
			/* Acknowledged past a READ/ATOMIC whose response we do not have: it was
			 * lost. Ask again from where we are (not counted: the peer is alive). */
			if (sr_psn_ge(pkt->psn, w->first_psn) && !qp->comp.nak_rewound) {
				qp->comp.nak_rewound = true;
				retry_from(qp, qp->comp.psn, false, false, false);
				return;
			}
		} else if (sr_psn_ge(pkt->psn, qp->comp.psn) && sr_psn_lt(pkt->psn, qp->req.high_psn)) {
			/* Part of a long message acknowledged. */
			qp->comp.psn = sr_psn_next(pkt->psn);
			progress_made(qp);
		}
	}
	if (qp->state == IBV_QPS_ERR || repair_answered(qp, true))
		return;
	sr_req_progress(qp);
}

static void nak(struct sr_qp *qp, struct sr_pkt *pkt, uint8_t syn)
{
	uint32_t psn0 = qp->comp.psn;	/* (complete_before may move it) */
	struct sr_swqe *w = complete_before(qp, pkt->psn, false);
	struct sr_stats *st = &qp->nic->stats;

	if (qp->state == IBV_QPS_ERR || !w)
		return;
	if ((syn & SR_AETH_TYPE_MASK) == SR_AETH_RNR_NAK) {
		sr_stat_inc(st, SR_STAT_rnr_naks_rcvd);
		if (!sr_psn_in(pkt->psn, w->first_psn, w->last_psn))
			return;
		/* Already waiting out an RNR NAK: nothing is sent during the wait, so this one
		 * answers a copy sent before it (a tail-loss probe's, when the first NAK was
		 * slow to come). It uses no retry and does not restart the wait. */
		if (qp->req.rnr_until)
			return;
		if (qp->comp.rnr_left == 0) {
			sr_stat_inc(st, SR_STAT_rnr_retry_exceeded);
			fail_oldest(qp, IBV_WC_RNR_RETRY_EXC_ERR);
			return;
		}
		if (qp->comp.rnr_left != 7)
			qp->comp.rnr_left--;
		qp->comp.psn = pkt->psn;
		qp->comp.repairing = false;
		sr_req_rewind(qp, pkt->psn);
		qp->req.rnr_until = sr_now_ns() + sr_rnr_timer_ns(syn & SR_AETH_VALUE_MASK);
		sr_timer_arm(qp);
		return;
	}
	switch (syn & SR_AETH_VALUE_MASK) {
	case SR_NAK_PSN_SEQ_ERR:
		sr_stat_inc(st, SR_STAT_seq_naks_rcvd);
		sr_dbg("qp#%u: NAK seq PSN %u, comp.psn %u, rewound %d", sr_qpn(qp), pkt->psn,
		       qp->comp.psn, qp->comp.nak_rewound);
		/* Packets before the NAKed PSN arrived: go back to the first missing one. */
		if (sr_psn_lt(pkt->psn, qp->comp.psn) || sr_psn_ge(pkt->psn, qp->req.high_psn))
			return;
		if (!sr_op_is_rd_atomic(w->opcode) || !sr_psn_gt(pkt->psn, w->first_psn))
			qp->comp.psn = pkt->psn;	/* (never skip a READ/ATOMIC response) */
		bool progress = qp->comp.psn != psn0;

		/* While a rewind is under way and this NAK acknowledges nothing new, it is ignored
		 * (rxe does the same): a copy of the NAK that started the rewind, or a later one the
		 * peer sent before the resent packets reached it -- a responder that keeps what
		 * follows a gap (resp.c) NAKs each gap of a flight in turn. Behind a READ or ATOMIC,
		 * which comp.psn may not pass, each such NAK used to start another go-back-N of
		 * the whole window and count against retry_cnt: a few gaps in one flight exhausted
		 * retry_cnt in milliseconds, and the resent windows flooded the peer, whose answers
		 * then came later still (test_fault_integrity, one run in 30). A rewind whose
		 * packets are lost again is the timer's (fast retransmission, local ACK timeout). */
		if (!progress && qp->comp.nak_rewound) {
			sr_stat_inc(st, SR_STAT_seq_naks_ignored);
			return;
		}
		if (progress) {
			progress_made(qp);
			repair_answered(qp, false);
		}
		qp->comp.nak_rewound = true;
		retry_from(qp, qp->comp.psn, !progress, false, true);
		return;
	case SR_NAK_INVALID_REQ:
		sr_stat_inc(st, SR_STAT_naks_rcvd);
		fail_oldest(qp, IBV_WC_REM_INV_REQ_ERR);
		return;
	case SR_NAK_REM_ACCESS_ERR:
		sr_stat_inc(st, SR_STAT_naks_rcvd);
		fail_oldest(qp, IBV_WC_REM_ACCESS_ERR);
		return;
	case SR_NAK_REM_OP_ERR:
		sr_stat_inc(st, SR_STAT_naks_rcvd);
		fail_oldest(qp, IBV_WC_REM_OP_ERR);
		return;
	case SR_NAK_INVALID_RD_REQ:
		sr_stat_inc(st, SR_STAT_naks_rcvd);
		fail_oldest(qp, IBV_WC_REM_INV_RD_REQ_ERR);
		return;
	default:
		sr_stat_inc(st, SR_STAT_drop_unexpected);	/* reserved code: ignore */
		return;
	}
}

void sr_comp_rcv(struct sr_qp *qp, struct sr_pkt *pkt)
{
	uint8_t syn = SR_AETH_ACK;

	if (!sr_qp_reliable(qp) || (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_qp_state);
		return;
	}
	/* A response must be for something we sent and have not seen acknowledged. */
	if (sr_psn_lt(pkt->psn, qp->comp.psn) || sr_psn_ge(pkt->psn, qp->req.high_psn) ||
	    qp->sq.tail == qp->sq.head) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_drop_psn);
		return;
	}
	if (pkt->mask & SR_M_AETH)
		syn = sr_aeth_syndrome(sr_pkt_h(pkt, SR_H_AETH));

	if (pkt->mask & SR_M_READ) {
		read_resp(qp, pkt);
	} else if (pkt->mask & SR_M_ATMACK) {
		if ((syn & SR_AETH_TYPE_MASK) == SR_AETH_ACK)
			atomic_ack(qp, pkt);
		else
			nak(qp, pkt, syn);
	} else {
		sr_stat_add_excl(&qp->nic->stats, SR_STAT_acks_rcvd, 1);	/* rx_lock held */
		if ((syn & SR_AETH_TYPE_MASK) == SR_AETH_ACK)
			ack(qp, pkt);
		else
			nak(qp, pkt, syn);
	}
	/* Drained in SQD: tell the application once (IBA 10.3.1.4). */
	if (qp->state == IBV_QPS_SQD && qp->sq_draining && qp->sq.tail == qp->req.idx &&
	    !qp->req.offset) {
		qp->sq_draining = false;
		qp->attr.sq_draining = 0;
		if (qp->sqd_notify)
			sr_async_event(qp->ctx, IBV_EVENT_SQ_DRAINED, qp);
	}
}

/*
 * The local ACK timeout in force: the QP's (IBA 9.7.6.1.3), doubled after each timeout without
 * progress, at most 2 s (parameter retry_backoff). The IBA timeout is a lower bound; on a
 * machine where the peer may not be scheduled for a while (2 shared cores, a busy CI), retries
 * at a fixed 67 ms give up on a peer that is merely starved. retry_cnt still counts the retries.
 */
static uint64_t local_ack_timeout(const struct sr_qp *qp)
{
	uint64_t t = qp->timeout_ns << qp->comp.backoff;

	if (qp->comp.backoff && t > 2000000000ull)
		t = qp->timeout_ns > 2000000000ull ? qp->timeout_ns : 2000000000ull;
	return t;
}

/* The shortest time from a send to the first timer it arms (sr_qp_timers): an idle QP kept on
 * the timer list is looked at this often, since a send then arms without waking the thread. */
uint64_t sr_qp_timer_first_ns(const struct sr_qp *qp)
{
	uint64_t fast = probe_ns(qp), t = fast;

	if (sr_params()->repair && tlp_ns(qp, fast) < t)
		t = tlp_ns(qp, fast);
	if (qp->timeout_ns && local_ack_timeout(qp) < t)
		t = local_ack_timeout(qp);
	return t;
}

/* Retransmit and RNR timers. Returns the next deadline (ns) or 0 when nothing is armed. */
uint64_t sr_qp_timers(struct sr_qp *qp, uint64_t now)
{
	uint64_t next = 0;

	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
		return 0;
	if (qp->req.rnr_until) {
		if (now < qp->req.rnr_until)
			return qp->req.rnr_until;
		qp->req.rnr_until = 0;
		qp->comp.last_progress = now;
		sr_req_progress(qp);
	}
	if (!sr_qp_reliable(qp) || !sr_req_outstanding(qp) || !qp->timeout_ns)
		return qp->req.rnr_until;
	uint64_t deadline = qp->comp.last_progress + local_ack_timeout(qp);
	uint64_t base = qp->comp.last_progress > qp->comp.last_probe ? qp->comp.last_progress
								       : qp->comp.last_probe;
	uint64_t fast = base + probe_ns(qp);
	uint64_t tlp_base = qp->comp.last_progress > qp->comp.tlp_at ? qp->comp.last_progress
								     : qp->comp.tlp_at;
	if (qp->comp.last_new > tlp_base)
		tlp_base = qp->comp.last_new;	/* no probe for a tail just sent */
	uint64_t tlp = qp->comp.tlp_count < 2 && sr_params()->repair
			       ? tlp_base + tlp_ns(qp, probe_ns(qp))
			       : 0;

	if (now >= deadline) {
		/* The local ACK timeout (IBA 9.7.6.1.3): counted against retry_cnt. */
		sr_stat_inc(&qp->nic->stats, SR_STAT_retry_timeouts);
		qp->comp.nak_rewound = false;
		retry_from(qp, qp->comp.psn, true, true, false);
		if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
			return 0;
		if (sr_params()->retry_backoff && qp->comp.backoff < 16)
			qp->comp.backoff++;
		deadline = qp->comp.last_progress + local_ack_timeout(qp);
		fast = deadline;
	} else if (now >= fast) {
		sr_stat_inc(&qp->nic->stats, SR_STAT_fast_retransmits);
		qp->comp.nak_rewound = false;
		uint64_t keep = qp->comp.last_progress;

		retry_from(qp, qp->comp.psn, false, false, false);
		qp->comp.last_progress = keep;	/* the IBA timer keeps running */
		qp->comp.last_probe = now;
		fast = now + probe_ns(qp);
		tlp = 0;
	} else if (tlp && now >= tlp) {
		/* Tail-loss probe: the packet at comp.psn alone, asking for an ACK. Whether it or
		 * an ACK was lost, the answer (or a duplicate's re-ACK) says where the peer is. */
		if (resend_one(qp, qp->comp.psn, false))
			sr_stat_inc(&qp->nic->stats, SR_STAT_tail_probes);
		sr_dbg("qp#%u: tail-loss probe of PSN %u, first sent %llu us ago, %llu us since "
		       "progress", sr_qpn(qp), qp->comp.psn,
		       (unsigned long long)qp->comp.probe_age_ns / 1000,
		       (unsigned long long)(now - qp->comp.last_progress) / 1000);
		if (!qp->comp.srtt_ns)
			qp->comp.tlp0_ns = 2 * tlp_ns(qp, probe_ns(qp));
		qp->comp.tlp_at = now;
		qp->comp.tlp_count++;
		tlp = qp->comp.tlp_count < 2 ? now + tlp_ns(qp, probe_ns(qp)) : 0;
	}
	next = fast < deadline ? fast : deadline;
	if (tlp && tlp < next)
		next = tlp;
	if (qp->req.rnr_until && qp->req.rnr_until < next)
		next = qp->req.rnr_until;
	return next;
}
