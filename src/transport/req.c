/* SPDX-License-Identifier: MIT */
/*
 * The requester: what a work request becomes on the wire.
 *
 * A WQE gets its PSNs the first time it starts (first_psn .. last_psn: one per packet, and for
 * an RDMA READ one per response packet) and keeps them: a go-back-N retransmission (rewind)
 * resends exactly the same packets. The requester runs on whichever thread made progress
 * possible: the poster (ibv_post_send), the completer (an ACK opened the window), or the timer.
 *
 * Limits honoured here: the send window (max_inflight unacknowledged packets), max_rd_atomic
 * outstanding READ/ATOMIC requests (IBA 9.5.9), IBV_SEND_FENCE (wait for every prior READ and
 * ATOMIC to complete, IBA 10.8.3.3), the RNR wait, and SQD (no new WQE starts).
 *
 * A READ's responses count against the send window too, as the packets they are: a READ is
 * asked for in pieces of at most the window (each piece an ordinary READ request for the next
 * bytes, at the next PSNs), the next piece once half the window is free (two requests of a
 * WQE outstanding at most, sr_req_read_overlap_ok) or once every response of the previous one
 * is in. A responder answers a READ at once and in full, and READ responses are neither
 * acknowledged nor flow controlled: one 8 MiB READ would pour 2048 packets into the
 * requester's socket faster than it can take them, and every retry would pour them again. A
 * piece once asked for keeps its bounds (rd_end_psn, and rd_mid_psn for the one before while
 * it is answered): a retry asks for the rest of that same piece, which the responder then
 * answers as a duplicate (a READ retried from a PSN within the request it repeats).
 */
#include <errno.h>

#include "core/log.h"
#include "core/param.h"
#include "transport/xport.h"

static uint8_t send_opcode(uint8_t tr, bool first, bool last, bool imm, bool inv)
{
	if (first && last)
		return SR_OPC(tr, inv ? SR_OP_SEND_ONLY_INV : imm ? SR_OP_SEND_ONLY_IMM : SR_OP_SEND_ONLY);
	if (first)
		return SR_OPC(tr, SR_OP_SEND_FIRST);
	if (last)
		return SR_OPC(tr, inv ? SR_OP_SEND_LAST_INV : imm ? SR_OP_SEND_LAST_IMM : SR_OP_SEND_LAST);
	return SR_OPC(tr, SR_OP_SEND_MIDDLE);
}

static uint8_t write_opcode(uint8_t tr, bool first, bool last, bool imm)
{
	if (first && last)
		return SR_OPC(tr, imm ? SR_OP_WRITE_ONLY_IMM : SR_OP_WRITE_ONLY);
	if (first)
		return SR_OPC(tr, SR_OP_WRITE_FIRST);
	if (last)
		return SR_OPC(tr, imm ? SR_OP_WRITE_LAST_IMM : SR_OP_WRITE_LAST);
	return SR_OPC(tr, SR_OP_WRITE_MIDDLE);
}

/* The byte (from the WQE's start) where the READ request about to go out at req.psn ends: the
 * end of the request that PSN belongs to (a retry asks for the rest of it, as the responder
 * knows it), or, past every request asked so far, of a new piece of at most what the send
 * window has room for (never fewer than SR_READ_PIECE_MIN packets: a small READ is not cut
 * into smaller ones). A new piece asked while the one before is still being answered
 * (sr_req_read_overlap_ok) keeps that one's end in rd_mid_psn until its last response. */
#define SR_READ_PIECE_MIN 16

static uint32_t read_piece_end(struct sr_qp *qp, struct sr_swqe *w)
{
	uint32_t psn = qp->req.psn, end;

	if (sr_rd_mid_valid(w) && !sr_psn_gt(psn, w->rd_mid_psn))	/* (never the READ's last) */
		return ((uint32_t)sr_psn_diff(w->rd_mid_psn, w->first_psn) + 1) * w->seg;
	/* rd_end_psn is first_psn - 1 until a piece is asked for. */
	if (sr_psn_lt(w->rd_end_psn, w->first_psn) || sr_psn_gt(psn, w->rd_end_psn)) {
		int32_t inflight = sr_psn_diff(psn, qp->comp.psn);
		uint32_t room = 0, left = (uint32_t)sr_psn_diff(w->last_psn, psn) + 1;

		if (inflight >= 0 && (uint32_t)inflight < sr_cwnd(qp))
			room = sr_cwnd(qp) - (uint32_t)inflight;
		if (room < SR_READ_PIECE_MIN)
			room = SR_READ_PIECE_MIN;
		if (!sr_psn_lt(w->rd_end_psn, w->first_psn) && !sr_psn_gt(qp->comp.psn, w->rd_end_psn)) {
			/* The piece before is still being answered: two outstanding. */
			w->rd_mid_psn = w->rd_end_psn;
			qp->req.rd_extra++;
			sr_stat_inc(&qp->nic->stats, SR_STAT_tx_read_overlap);
		}
		w->rd_end_psn = sr_psn_add(psn, (int32_t)(left < room ? left : room) - 1);
	}
	end = ((uint32_t)sr_psn_diff(w->rd_end_psn, w->first_psn) + 1) * w->seg;
	return end < w->length ? end : w->length;
}

/*
 * May the requester, standing past every piece asked of READ w (req.psn == rd_end_psn + 1),
 * ask for the next one before the last response of the one before is in? A READ piece waits
 * for its turnaround otherwise: at a path MTU of 1024 a window of 128 responses is ~52 us of
 * data, and the next request, its trip and the responder's first answer add ~8 us to each
 * (bench/README.md, "READ in overlapping pieces"). It may when half the window is free (so pieces stay
 * large: the responder answers each with one pass), at most two requests of w are outstanding,
 * and the peer's responder has a slot for one more (max_rd_atomic: each request outstanding
 * holds one there until its responses are all sent, IBA 9.5.9; rd_extra counts the second
 * ones).
 */
bool sr_req_read_overlap_ok(struct sr_qp *qp, struct sr_swqe *w)
{
	int32_t inflight = sr_psn_diff(qp->req.psn, qp->comp.psn);
	uint32_t cwnd = sr_cwnd(qp);

	return sr_params()->read_overlap && !sr_rd_mid_valid(w) && inflight >= 0 &&
	       (uint32_t)inflight + cwnd / 2 <= cwnd && cwnd / 2 >= SR_READ_PIECE_MIN &&
	       qp->req.rd_atomic + qp->req.rd_extra < qp->attr.max_rd_atomic;
}

/* Does the requester, at WQE w (req.idx), stand past every piece asked of a READ under way,
 * with responses still to come? The next piece then waits for sr_req_read_overlap_ok. */
static bool read_at_boundary(const struct sr_qp *qp, const struct sr_swqe *w)
{
	return w->opcode == IBV_WR_RDMA_READ && qp->req.offset &&
	       sr_psn_gt(qp->req.psn, w->rd_end_psn) && qp->comp.psn != qp->req.psn;
}

/* The requester waits at a READ piece boundary, and a response just made room for the next
 * piece: the completer calls the requester now, not at the piece's last response. */
bool sr_req_read_waits(struct sr_qp *qp)
{
	struct sr_swqe *w;

	if (qp->req.idx == qp->sq.head)
		return false;
	w = sr_sq_at(&qp->sq, qp->req.idx);
	return read_at_boundary(qp, w) && sr_req_read_overlap_ok(qp, w);
}

/*
 * One clock read for the first packet of a requester pass: its WQE's first-sent time
 * (start_ns), the RTT sample's start and, when it is the pass's only packet, the last new
 * packet (comp.last_new, the tail-loss probe's start) are one moment to within that packet,
 * which leaves at the end of the pass anyway (sr_net_batch_end). A clock_gettime costs 45-100
 * ns on the VMs measured, and a ping-pong's answer read it three times here. In a post's pass
 * (req.stamp_late) that read comes after the packet left (sr_req_stamp), off the way of a
 * ping-pong's answer: 34 ns on the Intel Xeon (bench/README.md, "8 B busy-poll"). The times
 * are the packet's to within its sendmsg: a round-trip sample is that much shorter (a few
 * microseconds at most; the timers count in milliseconds).
 */
static inline uint64_t req_now(struct sr_qp *qp, uint64_t *now)
{
	if (!*now) {
		if (qp->req.stamp_late) {
			*now = SR_STAMP_LATE;
			qp->req.stamp_due = true;
		} else {
			*now = sr_now_ns();
		}
	}
	return *now;
}

/* The same for a time compared right away (ack_lazy_ok): the clock itself. Times written as
 * SR_STAMP_LATE before are still stamped after the packets left. */
static inline uint64_t req_now_exact(uint64_t *now)
{
	if (!*now || *now == SR_STAMP_LATE)
		*now = sr_now_ns();
	return *now;
}

void sr_req_stamp(struct sr_qp *qp)
{
	uint64_t t = sr_now_ns();
	struct sr_swqe *w = sr_sq_at(&qp->sq, qp->req.stamp_idx);

	qp->req.stamp_due = false;
	if (w->start_ns == SR_STAMP_LATE)
		w->start_ns = t;
	if (qp->comp.rtt_t0 == SR_STAMP_LATE)
		qp->comp.rtt_t0 = t;
	if (qp->comp.last_progress == SR_STAMP_LATE)
		qp->comp.last_progress = t;
	if (qp->comp.last_new == SR_STAMP_LATE)
		qp->comp.last_new = t;
}

/*
 * Does the LAST packet of WRITE w (slot idx), about to be built with PSN req.psn, have
 * the next WQE right behind it in this pass? Then it need not ask for an ACK of its own: ACKs are
 * cumulative, and the count of packets since the last AckReq (at most every ack_every, or half the
 * window) runs on across the two. A stream of WRITEs of a few packets (16 KiB over 8 KiB segments:
 * a run of two packets, one datagram to the receiver) drew an ACK for nearly every WRITE; each
 * cost the responder a sendmsg and the requester a receive and a completion pass. Only a plain
 * WRITE of several packets (a SEND's receiver may wake a consumer, which the ACK must precede; a
 * stream of one-packet WRITEs leaves in long GSO runs and draws an ACK per receive batch already,
 * and asking less often measured 0.97-1.0x on loopback at 8 KiB, so it keeps its rule), and only
 * when the next WQE is a SEND or WRITE that nothing in the loop of sr_req_progress holds back:
 * posted (not a resend), no fence, room in the window for its first packet. Until a packet asks
 * again (req.ackreq_owed), the packet that fills the window asks: the pass that skipped always
 * ends with a packet that asks, so the skipped packet's ACK comes a round trip after it, as
 * before, and not once the window has reopened (a peer 20 ms away: its retransmission timer, a
 * round trip and its variance, fired first and test_slow_peer resent 8 % of its packets). Should
 * the pass still stop before one asks (a local error of the next WQE), it ends by sending its last
 * packet again, asking (sr_req_progress). The last WQE posted always asks: a sender that waits for
 * its completion waits for nothing more than before.
 */
static bool more_follows(struct sr_qp *qp, uint32_t idx, const struct sr_swqe *w)
{
	const struct sr_swqe *x;

	if (w->opcode != IBV_WR_RDMA_WRITE || w->npkts < 2 || w->dplaced ||
	    qp->state != IBV_QPS_RTS || qp->req.force_ackreq || idx != qp->req.idx ||
	    idx + 1 == qp->sq.head)
		return false;
	x = sr_sq_at(&qp->sq, idx + 1);
	if (x->state != SR_WQE_POSTED || (x->flags & IBV_SEND_FENCE))
		return false;
	switch (x->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
		break;
	default:
		return false;
	}
	return (uint32_t)sr_psn_diff(sr_psn_next(qp->req.psn), qp->comp.psn) < sr_cwnd(qp);
}

/*
 * Message ends that need not ask (param ack_lazy). An unsignaled WQE's completion is never seen
 * by the application, so the ACK of its last packet matters only for reliability (the timers
 * must not fire, a loss must be repaired) and to free its SQ slot. In a ping-pong of unsignaled
 * SENDs (UCX's rc_verbs signals one in 64) the ACK of each message cost a packet of its own in
 * each turn: built, checksummed, one more segment through the kernel, parsed, checked and taken
 * through the completer at the peer, some 300-450 ns of a 3.4 us half round trip. So the last
 * packet of an unsignaled SEND or WRITE toward a softrdma peer, whose responder acknowledges
 * such packets by itself (resp.c, ack_unasked), does not ask, as long as the requester still
 * asks often enough: a packet asks when ack_lazy packets went since the last that asked, when
 * that one asked ack_defer_us ago or longer (so a responder's bound on the unasked, 2 x
 * ack_defer_us, never comes first while the requester keeps sending, and sparse messages ask
 * as before), when half the SQ's WQEs or half the window wait for an ACK, and for every
 * signaled WQE (sq_sig_all too), fence, repair, probe and resend. Not in a stream (no poll of
 * the send CQ since the previous post), nor while a packet that asked waits for its ACK: a
 * stream's ACKs come per receive batch already, one more that asks costs the responder
 * nothing when it lands in the same batch, and the post batching (post.c) holds WQEs only
 * behind an ACK that is coming (a 64-byte ib_send_bw, which polls its CQ between bursts of
 * posts, measured 0.96x with the first WQE of each burst skipping). t: the clock, read by the
 * caller.
 */
static bool ack_lazy_candidate(const struct sr_qp *qp, const struct sr_swqe *w)
{
	if (!qp->nic->ack_lazy || qp->type != IBV_QPT_RC || !qp->peer_sr || qp->sig_all ||
	    (w->flags & (IBV_SEND_SIGNALED | IBV_SEND_FENCE)) || w->in_stream || w->dplaced ||
	    qp->state != IBV_QPS_RTS || qp->req.force_ackreq || qp->req.ackreq_owed ||
	    sr_psn_lt(qp->req.psn, qp->req.high_psn))
		return false;
	switch (w->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return true;
	default:
		return false;
	}
}

static bool ack_lazy_ok(struct sr_qp *qp, uint32_t idx, uint64_t t)
{
	uint64_t defer = (uint64_t)sr_params()->ack_defer_us * 1000;

	return !sr_psn_gt(qp->req.ask_end, qp->comp.psn) &&
	       qp->req.since_ackreq + 1 < qp->nic->ack_lazy && t - qp->req.ask_ns < defer &&
	       idx + 1 - qp->sq.tail < qp->sq.max_wr / 2 &&
	       (uint32_t)sr_psn_diff(sr_psn_next(qp->req.psn), qp->comp.psn) < sr_cwnd(qp) / 2;
}

/*
 * A WRITE of more than two in-band segments to a responder that says it takes it
 * (SR_BTH_SR_FSHORT) has its FIRST carry the segment less its RETH, so that every packet but
 * the LAST is one datagram size: a FIRST of a whole segment is 16 bytes longer than the
 * MIDDLEs, and since only the last piece of a GSO send may differ, it went with one MIDDLE and
 * the rest in further sends (a 32 KiB WRITE over 8 KiB segments: two sends, now one). Only for
 * WRITEs of at most two GSO sends once cut: two segments or less already are one send, and
 * the cut would add a packet; a long WRITE saves no send (1 MiB over 8 KiB: 19 either way) and
 * pays the extra 16-byte packet (0.96x between two namespaces, bench/README.md). The responder
 * takes the FIRST's payload + 16 as the message's segment (resp.c mtu_ok); packet k > 0
 * starts at k * seg - 16 (wqe_off).
 */
static bool write_first_short(const struct sr_qp *qp, const struct sr_swqe *w)
{
	uint32_t per_send = SR_NET_GSO_BYTES / (w->seg + SR_BTH_LEN + SR_ICRC_LEN);

	return (w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) &&
	       qp->peer_fshort && w->seg > qp->mtu && !w->dplaced &&
	       w->length > 2 * (uint64_t)w->seg &&
	       sr_npkts(w->length + SR_RETH_LEN, w->seg) <= 2 * per_send;
}

/* May a WRITE over segment seg be cut evenly into parts of p (the responder's rules, resp.c
 * mtu_ok: at the path MTU, or over a large segment)? */
static bool even_ok(const struct sr_qp *qp, uint32_t seg, uint64_t p)
{
	if (seg == qp->mtu)
		return p - SR_RETH_LEN != qp->mtu && 2 * p > seg + SR_RETH_LEN;
	return ((p - SR_RETH_LEN) & 4095) && p - SR_RETH_LEN > qp->mtu;
}

/* The fewest packets from n + 1 to n + n / 2 that split all evenly into parts the responder
 * takes: n + 1 where they fit in one GSO send, more only where they fill at most half of one
 * (each packet more costs about what sharing the send saves: 32 KiB over a path MTU of 1024
 * as 48 packets instead of 32 ran 0.78x, 40 KiB as 52 for 40 0.94x, 12 KiB as 16 for 12
 * 1.07-1.20x); 0: none. */
static uint32_t even_more(const struct sr_qp *qp, uint32_t seg, uint32_t all, uint32_t n)
{
	for (uint32_t m = n + 1; m <= n + n / 2; m++) {
		if ((uint64_t)m * (all / m + 64) * (m > n + 1 ? 2 : 1) > SR_NET_GSO_BYTES)
			return 0;
		if (!(all % m) && even_ok(qp, seg, all / m))
			return m;
	}
	return 0;
}

/*
 * The even cut (docs/cm.md): toward a responder that says it takes it (SR_BTH_SR_EVEN), a
 * WRITE whose length + 16 needs n > 1 packets of at most the segment + 16 goes as a FIRST of
 * P - 16 bytes (its RETH makes up the rest), n - 2 packets of P and a LAST of the rest, every
 * packet padded to 4 bytes alike (IBA pads only the LAST; this responder takes it). Where the
 * length + 16 splits into n equal parts, P is that part and the LAST is P too: every datagram
 * of the WRITE is one size, and so is every datagram of the next WRITE so cut, and a stream of
 * them shares GSO sends across WRITEs as one-packet WRITEs do, where a FIRST (even one short
 * by its RETH) can never follow a shorter LAST in one send. Over 8 KiB segments 16 KiB is
 * 8184 + 8200 bytes, 32 KiB 8180 + 3 x 8196, 64 KiB 8178 + 7 x 8194 (the 16 KiB dip between
 * two namespaces, bench/README.md). Where it does not split so, P is the part rounded up to a
 * multiple of 4 and the LAST is shorter: all but the LAST still one datagram size, so only the
 * LAST ends a GSO send (256 KiB: 8180 + 30 x 8196 + 8084, five sends of seven packets or less
 * where a whole-segment FIRST, 16 bytes longer than the MIDDLEs, went with one MIDDLE and
 * took six; 1.04x between two namespaces, bench/README.md). Never more sends than a cut at
 * whole segments, nor more packets but in the last case below. No even cut for a P whose
 * FIRST would be a whole multiple of 4 KiB (the responder reads such a FIRST as the segment
 * itself) or at most the path MTU: such WRITEs keep the cut below.
 *
 * Where no large segment is in use (seg is the path MTU: a network of MTU 1500, where it is
 * 1024), the same cut goes toward a responder that offers it at the path MTU
 * (SR_BTH_SR_EVENMTU), P at most the path MTU + 16 and more than half of it: 4 KiB over 1024 is
 * 1012 + 3 x 1028, where IBA's cut, a FIRST 16 bytes longer than the rest, took two GSO sends
 * per WRITE and no two WRITEs ever shared one (4 KiB streamed at 0.54x the rate of 1 KiB,
 * bench/README.md). No datagram is longer than IBA's longest (a FIRST of the path MTU with its
 * RETH), and none for a P whose FIRST would carry exactly the path MTU (the responder reads
 * that as IBA's cut).
 *
 * A WRITE that fits in one GSO send but whose length + 16 does not split into n equal parts
 * takes a few packets more where that many split it (even_more): its shorter LAST would end
 * the send, so a stream of such WRITEs took a send each, where WRITEs of one datagram size
 * share them (MTU 1500: 3 KiB as 4 x 772; 12 KiB as 16 x 769, 1.07-1.2x, paired; docs/cm.md).
 * Returns P, or 0 for no even cut. seg: the WQE's segment (sr_req_seg: the path MTU or a
 * multiple of 4 KiB).
 */
uint32_t sr_req_even_seg(const struct sr_qp *qp, const struct sr_swqe *w, uint32_t seg)
{
	uint64_t all = (uint64_t)w->length + SR_RETH_LEN;
	uint64_t n, p;
	uint32_t m;

	if ((w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) ||
	    w->length <= seg)
		return 0;
	if (seg == qp->mtu ? !qp->peer_even_mtu || qp->seg || !sr_params()->seg_even_mtu
		   : !qp->peer_even || !qp->peer_fshort || seg < qp->mtu || !sr_params()->seg_even)
		return 0;
	n = (all + seg + SR_RETH_LEN - 1) / (seg + SR_RETH_LEN);
	if (all % n && all <= SR_NET_GSO_BYTES &&
	    (m = even_more(qp, seg, (uint32_t)all, (uint32_t)n)))
		n = m;
	if (all % n) {
		/* the part rounded up to 4: at most seg + 16 (a multiple of 4); the LAST keeps
		 * at least one byte (n - 1 parts of P fall short of all while all / n > 4n) */
		p = (all / n + 4) & ~(uint64_t)3;
		if ((n - 1) * p >= all)
			return 0;
	} else {
		p = all / n;
	}
	return even_ok(qp, seg, p) ? (uint32_t)p : 0;
}

/* Where packet k of w starts in its message. */
static inline uint32_t wqe_off(const struct sr_swqe *w, uint32_t k)
{
	return k ? k * w->seg - w->seg_cut : 0;
}

/* Builds and sends the packet of WQE w (slot idx) that starts at byte req.offset with PSN
 * req.psn. Returns the bytes that packet covers, or -(ibv_wc_status) on a local error. now:
 * the clock of the pass's first packet (req_now: read here if still 0 and an RTT sample
 * starts), or NULL for any other packet (read here if needed). */
static int req_xmit(struct sr_qp *qp, uint32_t idx, struct sr_swqe *w, uint64_t *now)
{
	uint8_t hdr[SR_MAX_HDR] __attribute__((aligned(8)));
	uint8_t tr = sr_qp_tr(qp);
	uint32_t off = qp->req.offset, mtu = w->seg, paylen = 0, dqpn;
	bool first, last, ackreq = false, se = false, owed = false, cand = false, lazy = false;
	uint64_t t = 0;
	const struct sr_addr *dst;
	struct sr_sgl sgl;	/* not zeroed (1.6 KiB a packet): written up to its n */
	uint8_t opcode;
	unsigned hlen;
	int covered, st;

	sgl.n = 0;

	switch (w->opcode) {
	case IBV_WR_RDMA_READ:
		/* One request asks for the rest of the piece under way (read_piece). */
		opcode = SR_OPC(tr, SR_OP_READ_REQ);
		first = last = true;
		covered = (int)(read_piece_end(qp, w) - off);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		opcode = SR_OPC(tr, SR_OP_CMP_SWAP);
		first = last = true;
		covered = 8;
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		opcode = SR_OPC(tr, SR_OP_FETCH_ADD);
		first = last = true;
		covered = 8;
		break;
	case IBV_WR_ATOMIC_WRITE:
		opcode = SR_OPC(tr, SR_OP_ATOMIC_WRITE);
		first = last = true;
		paylen = 8;
		covered = 8;
		break;
	case SR_WR_FLUSH:
		opcode = SR_OPC(tr, SR_OP_FLUSH);
		first = last = true;
		covered = 0;
		break;
	default:
		if (off == 0)
			mtu -= w->seg_cut;
		paylen = w->length - off < mtu ? w->length - off : mtu;
		if (w->dplaced)
			paylen = 0;	/* the data is in place (direct path): the immediate only */
		first = off == 0;
		last = w->dplaced || off + paylen == w->length;
		covered = w->dplaced ? (int)w->length : (int)paylen;
		opcode = (w->opcode == IBV_WR_SEND || w->opcode == IBV_WR_SEND_WITH_IMM ||
			  w->opcode == IBV_WR_SEND_WITH_INV)
				 ? send_opcode(tr, first, last, w->opcode == IBV_WR_SEND_WITH_IMM,
					       w->opcode == IBV_WR_SEND_WITH_INV)
				 : write_opcode(tr, first, last,
						w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
		break;
	}

	const struct sr_opcode_info *oi = &sr_opcode[opcode];

	hlen = oi->length;
	if (sr_qp_reliable(qp)) {
		/* An ACK at every message end, and often enough within a long message that the
		 * window keeps moving: every ack_every packets, or every half window when the window
		 * is smaller (the responder acknowledges only when asked). A WRITE with another
		 * WQE right behind it in this pass is no message end for that rule: the count
		 * runs on into the next one (more_follows). */
		uint32_t every = sr_cwnd(qp) / 2;
		bool skip;

		if (every > qp->nic->ack_every)
			every = qp->nic->ack_every;
		skip = last && more_follows(qp, idx, w);
		cand = last && !skip && ack_lazy_candidate(qp, w);
		if (cand) {
			t = now ? req_now_exact(now) : sr_now_ns();
			lazy = ack_lazy_ok(qp, idx, t);
		}
		ackreq = (last && !skip && !lazy) || qp->req.force_ackreq ||
			 ++qp->req.since_ackreq >= (every ? every : 1) ||
			 (qp->req.ackreq_owed && (uint32_t)sr_psn_diff(sr_psn_next(qp->req.psn),
								qp->comp.psn) >= sr_cwnd(qp));
		if (ackreq)
			qp->req.since_ackreq = 0;
		owed = !ackreq && (skip || qp->req.ackreq_owed);
	}
	if (last && (w->flags & IBV_SEND_SOLICITED) &&
	    (oi->mask & (SR_M_SEND | SR_M_IMMDT)))
		se = true;
	if (qp->type == IBV_QPT_UD) {
		dst = &w->ud_dst;
		dqpn = w->ud_qpn;
	} else {
		dst = &qp->peer;
		dqpn = qp->attr.dest_qp_num;
	}
	if (ackreq && !qp->comp.rtt_valid && sr_psn_ge(qp->req.psn, qp->req.high_psn)) {
		qp->comp.rtt_valid = true;
		qp->comp.rtt_psn = qp->req.psn;
		qp->comp.rtt_t0 = now ? req_now(qp, now) : sr_now_ns();
	}
	sr_bth_build((struct sr_bth *)hdr, opcode, se, false, (-paylen) & 3, SR_DEFAULT_PKEY, dqpn,
		     ackreq, qp->req.psn);
	sr_qp_cut_offers(qp, hdr);
	if ((w->opcode == IBV_WR_RDMA_READ && w->seg > qp->mtu) || w->dplaced)
		sr_bth_set_sr_rdseg((struct sr_bth *)hdr);	/* READ: responses in w->seg
								 * (req_seg); WRITE with immediate:
								 * SR_BTH_SR_PLACED */
	if (oi->mask & SR_M_XRCETH)
		sr_xrceth_build((struct sr_xrceth *)(hdr + oi->offset[SR_H_XRCETH]), w->xrc_srqn);
	if (oi->mask & SR_M_DETH) {
		/* IBA 10.2.4: a Q_Key with the high bit set means "use the QP's own". */
		uint32_t qkey = (w->ud_qkey & 0x80000000u) ? qp->attr.qkey : w->ud_qkey;

		sr_deth_build((struct sr_deth *)(hdr + oi->offset[SR_H_DETH]), qkey, sr_qpn(qp));
	}
	if (oi->mask & SR_M_FETH)
		sr_feth_build((struct sr_feth *)(hdr + oi->offset[SR_H_FETH]), w->u.flush.level,
			      w->u.flush.type);
	if (oi->mask & SR_M_RETH) {
		uint32_t len = w->opcode == IBV_WR_RDMA_READ ? (uint32_t)covered
			     : w->opcode == SR_WR_FLUSH	    ? (uint32_t)w->u.flush.length
							    : w->length;
		uint64_t va = w->opcode == IBV_WR_RDMA_READ ? w->raddr + off : w->raddr;

		sr_reth_build((struct sr_reth *)(hdr + oi->offset[SR_H_RETH]), va, w->rkey, len);
	}
	if (oi->mask & SR_M_IETH)
		sr_ieth_build((struct sr_ieth *)(hdr + oi->offset[SR_H_IETH]), w->imm);
	if (oi->mask & SR_M_ATMETH) {
		bool cas = w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP;

		sr_atmeth_build((struct sr_atmeth *)(hdr + oi->offset[SR_H_ATMETH]), w->raddr,
				w->rkey, cas ? w->swap : w->compare_add, cas ? w->compare_add : 0);
	}
	if (oi->mask & SR_M_IMMDT)
		sr_immdt_build_raw((struct sr_immdt *)(hdr + oi->offset[SR_H_IMMDT]), w->imm);

	if (paylen) {
		if (w->opcode == IBV_WR_ATOMIC_WRITE && w->u.aw.have_value) {
			sgl.iov[0].iov_base = &w->u.aw.value;
			sgl.iov[0].iov_len = 8;
			sgl.mr[0] = NULL;
			sgl.n = 1;
		} else if (w->inl) {
			sgl.iov[0].iov_base = sr_sq_inline(&qp->sq, idx) + off;
			sgl.iov[0].iov_len = paylen;
			sgl.mr[0] = NULL;
			sgl.n = 1;
		} else {
			/* Judged as at the WQE's first PSN: a retransmission after a LOCAL_INV of
			 * its lkey still gathers from the map it was first sent from (mr.c). */
			struct sr_acc a = sr_acc_req(qp, w);
			unsigned acc = 0;

			/* A message of several packets: its first checks (and for ODP faults in)
			 * the whole of it once, the others only their keys (sr_sgl_fault) */
			if (paylen < w->length) {
				st = off ? 0 : sr_sgl_fault(qp->nic, &a, sr_sq_sges(&qp->sq, idx),
							    w->num_sge, w->length, 0);
				if (st)
					return -st;
				acc = SR_ACCESS_FAULTED;
			}
			st = sr_sgl_map(qp->nic, &a, sr_sq_sges(&qp->sq, idx), w->num_sge, off,
					paylen, acc, &sgl);
			if (st)
				return -st;
		}
	}
	if (sr_psn_lt(qp->req.psn, qp->req.high_psn))
		sr_stat_inc(&qp->nic->stats, SR_STAT_retransmits);	/* sent before */
	/* Only a packet that leaves settles what is owed: one that asks but failed its gather
	 * above (a bad lkey behind a WRITE that skipped) leaves the debt to the pass's end. */
	if (sr_qp_reliable(qp)) {
		qp->req.ackreq_owed = owed;
		if (ackreq) {
			if (sr_psn_ge(qp->req.psn, qp->req.ask_end))
				qp->req.ask_end = sr_psn_next(qp->req.psn);
			if (cand)
				qp->req.ask_ns = t;
		} else if (lazy) {
			sr_stat_inc(&qp->nic->stats, SR_STAT_ackreq_skipped);
		}
	}
	/* A post's first packet may carry the deferred ACK of the peer's last message (resp.c,
	 * sr_resp_ride): a whole message that stays within the path MTU with it. */
	if (qp->resp.ride_armed) {
		qp->resp.ride_armed = false;
		if (first && last && qp->type == IBV_QPT_RC && paylen + SR_ACKRIDE_LEN <= qp->mtu &&
		    sr_resp_ride(qp, (struct sr_ackride *)(hdr + hlen))) {
			sr_bth_set_sr_ackride((struct sr_bth *)hdr);
			hlen += SR_ACKRIDE_LEN;
		}
	}
	sr_net_xmit(qp->nic, dst, hdr, hlen, sgl.iov, sgl.n, paylen);
	sr_sgl_release(&sgl);
	return covered;
}

/*
 * The payload of each packet of WQE w, fixed when it starts: the QP's MTU (the path MTU, or
 * the segment rdma_cm agreed), or on an RC/UC connection with a 4096-byte path MTU that
 * rdma_cm did not set up, the largest segment both NICs take, once the peer has offered it
 * in its packets (BTH resv6; param seg_inband). A READ asks for its responses in that
 * segment (BTH SR_BTH_SR_RDSEG: the responder cuts them at min(our offer, its seg_max), which
 * is the same value, and counts their PSNs alike); an RC READ is the one way a packet from
 * the peer carries this side's data, so UCX's and MPI's rendezvous (RDMA READ) gets large
 * packets too. Its first packet may go at the path MTU before any packet of the peer was
 * seen: the offer is per message, never mid-message.
 */
uint32_t sr_req_seg(struct sr_qp *qp, const struct sr_swqe *w)
{
	uint32_t s = qp->peer_seg < qp->nic->seg_max ? qp->peer_seg : qp->nic->seg_max;

	if (sr_op_is_one_pkt(w->opcode) || qp->seg ||
	    (qp->type != IBV_QPT_RC && qp->type != IBV_QPT_UC) ||
	    qp->attr.path_mtu != IBV_MTU_4096 || !sr_params()->seg_inband || s <= qp->mtu)
		return qp->mtu;
	return s;
}

/* Executes a local operation (BIND_MW, LOCAL_INV, REG_MR): 0 or an ibv_wc_status. */
static int req_local(struct sr_qp *qp, struct sr_swqe *w)
{
	switch (w->opcode) {
	case IBV_WR_BIND_MW:
		return sr_mw_bind_exec(qp, w);
	case SR_WR_REG_MR:
		return sr_frmr_reg_exec(qp, w);
	case IBV_WR_LOCAL_INV:
		/* Every WQE before it has its PSNs below req.psn: their retransmissions still
		 * see the map (held until this WQE completes). */
		return sr_key_invalidate(qp, w->imm, false, qp->req.psn, &w->u.inv.held)
			       ? IBV_WC_LOC_QP_OP_ERR
			       : 0;
	default:
		return IBV_WC_LOC_QP_OP_ERR;
	}
}

/* ---- the send window ------------------------------------------------------------------ */
uint32_t sr_cwnd(struct sr_qp *qp)
{
	if (!qp->req.cwnd) {
		qp->req.cwnd = qp->nic->max_inflight;
		qp->req.ssthresh = qp->nic->max_inflight;
		qp->req.cwnd_psn = qp->comp.psn;
		qp->req.recover_psn = qp->comp.psn;
	}
	return qp->req.cwnd;
}

/* New packets acknowledged: grow (slow start below ssthresh, then one per window). */
void sr_cwnd_grow(struct sr_qp *qp)
{
	int32_t k = sr_psn_diff(qp->comp.psn, qp->req.cwnd_psn);
	uint32_t max = qp->nic->max_inflight;

	if (k <= 0)
		return;
	sr_cwnd(qp);
	qp->req.cwnd_psn = qp->comp.psn;
	if (qp->req.cwnd < qp->req.ssthresh) {
		qp->req.cwnd += (uint32_t)k;
	} else {
		qp->req.ca_acc += (uint32_t)k;
		while (qp->req.ca_acc >= qp->req.cwnd) {
			qp->req.ca_acc -= qp->req.cwnd;
			qp->req.cwnd++;
		}
	}
	if (qp->req.cwnd > max)
		qp->req.cwnd = max;
}

/*
 * A loss, once per window of packets in flight. A timeout means nothing gets through: start
 * again from a small window. A loss the responder reported (NAK), or a fast go-back-N, means
 * the path works but dropped a packet. Whether that was congestion is read from the round
 * trip, as TCP Veno does: a queue in front of a full link delays every packet before it drops
 * one, so a loss while SRTT stands well above the smallest round trip measured (the path
 * without a queue) -- by more than SR_CC_QUEUE_NS and more than that base itself -- halves
 * the window (Reno's response, so a softrdma flow shares a bottleneck with TCP instead of
 * crowding it out). A loss at the base round trip is taken for a random one -- on a software
 * stack that is common (a socket buffer, a scheduler hiccup, injected faults) -- and the window
 * shrinks by a quarter: halving on every random loss would leave a lossy link with a window of
 * a few packets and no throughput. Never below SR_CWND_FLOOR. (A window configured smaller
 * than twice the floor gets half of itself as the floor.)
 */
#define SR_CWND_FLOOR 16
#define SR_CC_QUEUE_NS 1000000ull

static bool queue_on_path(const struct sr_qp *qp)
{
	uint64_t base = qp->comp.rtt_min_ns, srtt = qp->comp.srtt_ns;

	return base && srtt > base && srtt - base > SR_CC_QUEUE_NS && srtt - base > base;
}

void sr_cwnd_loss(struct sr_qp *qp, bool timeout)
{
	uint32_t half = qp->nic->max_inflight / 2 ? qp->nic->max_inflight / 2 : 1;
	uint32_t floor = half < SR_CWND_FLOOR ? half : SR_CWND_FLOOR;
	bool congested;
	uint32_t cut;

	sr_cwnd(qp);
	if (sr_psn_lt(qp->comp.psn, qp->req.recover_psn) && !timeout)
		return;
	congested = !timeout && queue_on_path(qp);
	cut = congested ? qp->req.cwnd / 2 : qp->req.cwnd * 3 / 4;
	qp->req.ssthresh = cut > floor ? cut : floor;
	qp->req.cwnd = timeout ? (floor < 4 ? floor : 4) : qp->req.ssthresh;
	sr_stat_inc(&qp->nic->stats, timeout     ? SR_STAT_cwnd_restarts
				     : congested ? SR_STAT_cwnd_halvings
						 : SR_STAT_cwnd_cuts);
	qp->req.ca_acc = 0;
	qp->req.recover_psn = qp->req.high_psn;
}

bool sr_req_outstanding(struct sr_qp *qp)
{
	/* Sent and not acknowledged: a WQE the requester has moved past or is in the middle of,
	 * or the oldest, started before and rewound to its first packet -- which the requester
	 * may not resend at once (a READ waiting for its responses), yet must be timed. */
	return qp->sq.tail != qp->req.idx || qp->req.offset ||
	       (qp->sq.tail != qp->sq.head && sr_sq_at(&qp->sq, qp->sq.tail)->state != SR_WQE_POSTED);
}

/*
 * The completer may have completed WQEs the requester is still (re)sending (their packets had
 * arrived after all): move past them, and skip the part of the current WQE already
 * acknowledged.
 */
static void catch_up(struct sr_qp *qp)
{
	struct sr_sq *sq = &qp->sq;
	struct sr_swqe *w;

	if ((int32_t)(qp->req.idx - sq->tail) < 0) {
		qp->req.idx = sq->tail;
		qp->req.offset = 0;
		w = qp->req.idx != sq->head ? sr_sq_at(sq, qp->req.idx) : NULL;
		if (w && w->state != SR_WQE_POSTED) {
			/* Restart it from its first packet, with its own first PSN; the block below
			 * then skips what is already acknowledged. */
			w->state = SR_WQE_SENT;
			qp->req.psn = w->first_psn;
		} else if (sr_psn_lt(qp->req.psn, qp->comp.psn)) {
			qp->req.psn = qp->comp.psn;
		}
	}
	if (qp->req.idx == sq->tail && qp->req.idx != sq->head && sr_psn_lt(qp->req.psn, qp->comp.psn)) {
		w = sr_sq_at(sq, qp->req.idx);
		if (w->state == SR_WQE_POSTED || !sr_psn_in(qp->comp.psn, w->first_psn, w->last_psn))
			return;
		if (!sr_op_is_rd_atomic(w->opcode)) {
			w->state = SR_WQE_SENDING;
			qp->req.offset = wqe_off(w, (uint32_t)sr_psn_diff(qp->comp.psn, w->first_psn));
			qp->req.psn = qp->comp.psn;
		} else if (w->opcode == IBV_WR_RDMA_READ) {
			/* Responses came in while the requester was resending what precedes the READ.
			 * The piece they answer is not asked for again; once it is all in, the next
			 * one starts at comp.psn. (Left behind comp.psn, the requester would stand
			 * still: nothing it may send, nothing for the timer to time.) */
			uint32_t psn = sr_psn_gt(qp->comp.psn, w->rd_end_psn) ? qp->comp.psn
									 : sr_psn_next(w->rd_end_psn);

			w->state = SR_WQE_SENDING;
			qp->req.psn = psn;
			qp->req.offset = (uint32_t)sr_psn_diff(psn, w->first_psn) * w->seg;
			if (qp->req.offset >= w->length) {
				w->state = SR_WQE_SENT;	/* its last piece is under way */
				qp->req.idx++;
				qp->req.offset = 0;
			}
		}
	}
}

/*
 * A local operation reached by the requester executes now, in SQ order: after every earlier
 * WQE has been sent (not completed: IBV_SEND_FENCE waits for earlier READ/ATOMIC results). It
 * takes no PSN; first_psn records where the requester stood. It completes once it is the
 * oldest WQE (comp.c). Returns true when it failed (the requester stops, as for a local error).
 */
static bool req_local_step(struct sr_qp *qp, struct sr_swqe *w)
{
	int st = req_local(qp, w);

	w->first_psn = qp->req.psn;
	w->last_psn = sr_psn_add(qp->req.psn, -1);
	w->npkts = 0;
	w->state = SR_WQE_SENT;
	w->status = (uint8_t)st;
	qp->req.idx++;
	qp->req.offset = 0;
	if (st) {
		qp->req.stalled = true;
		if (qp->sq.tail == qp->req.idx - 1)
			sr_comp_error_oldest(qp);
		return true;
	}
	if (!sr_qp_reliable(qp) || qp->sq.tail == qp->req.idx - 1)
		sr_comp_wqe(qp, w, IBV_WC_SUCCESS);	/* nothing before it is outstanding */
	return false;
}

static void req_progress(struct sr_qp *qp);

/*
 * May a WRITE with immediate at req.idx have its data placed by the same-host direct path
 * now? Its data must not land before any earlier request of the QP has executed at the
 * responder, and an earlier SEND with invalidate must have run before its key is judged: so
 * every earlier WQE still outstanding must be a local operation (executed already, when the
 * requester passed it) or another such WRITE whose data is in place already, and whose packet
 * only carries the immediate. In a stream of them (RTRS: each request is one, into the
 * server's chunk) each is placed as it is posted while the earlier ones' immediates are still
 * on their way. Large ones only: a packet goes anyway, and a small payload costs less in it
 * than a system call of its own.
 */
#define SR_DIRECT_IMM_LOOK 256

static bool direct_imm_ok(struct sr_qp *qp, const struct sr_swqe *w)
{
	struct sr_sq *sq = &qp->sq;

	if (w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM || !qp->nic->direct ||
	    qp->state != IBV_QPS_RTS || w->length < (uint64_t)sr_params()->direct_stream_min ||
	    qp->req.idx - sq->tail > SR_DIRECT_IMM_LOOK)
		return false;
	for (uint32_t i = sq->tail; i != qp->req.idx; i++) {
		const struct sr_swqe *x = sr_sq_at(sq, i);

		if (!x->dplaced && !sr_op_is_local(x->opcode))
			return false;
	}
	return true;
}

/* The packets of one pass leave together where they can (UDP GSO, sr_net_batch_begin). */
void sr_req_progress(struct sr_qp *qp)
{
	sr_net_batch_begin();
	req_progress(qp);
	sr_net_batch_end();
}

/*
 * A window that filled waits to open by an eighth of itself (16 packets of the default 128)
 * before the next WQE leaves: the sender's side of silly window avoidance (RFC 1122 4.2.3.4).
 * A stream that fills the window (16 KiB WRITEs over 8 KiB segments: 64 of them are 128
 * packets, and perftest keeps 128 posted) was ACK-clocked message by message: each ACK the
 * receiver sent for the datagram it had just taken freed two or three packets, the requester
 * sent one WRITE (one GSO send of two packets: the FIRST is longer by its RETH), which drew one
 * ACK, and so on: 2.5 packets a pass and a system call, an ACK per 2.5 packets. Gated, a pass
 * sends eight WRITEs or more, whose GSO sends leave together in one sendmmsg (udp.c), and the
 * receiver takes several in one go and acknowledges them once (bench/README.md, "16 and 32
 * KiB"). Only at a new WQE, and one of at most an eighth of the window: a message begun goes on
 * as packets free, and a larger one (a 1 MiB WRITE is the whole window) is a batch by itself
 * (gated too, a 1 MiB stream lost a quarter of its rate: each WRITE waited for 16 packets of the
 * one before it). Only after the window stopped a pass (req.win_shut): a stream posted one by
 * one still fills it to the last packet. Not below a window of 16 (after a timeout). Every
 * message's last packet asks for an ACK (req_xmit), so a gated pass has an ACK coming, or the
 * timer. (One that skips, ack_lazy_ok, leaves with under half the window in flight and no ask
 * outstanding; of the half window that must follow it before the window shuts, one asks.)
 */
#define SR_CWND_GATE_DIV 8
#define SR_CWND_GATE_MAX 16

static bool window_gated(struct sr_qp *qp)
{
	struct sr_swqe *w = sr_sq_at(&qp->sq, qp->req.idx);
	uint32_t cwnd, used, step;

	if (!qp->req.win_shut || !sr_qp_reliable(qp) || qp->req.offset)
		return false;
	if (sr_op_is_local(w->opcode))
		return false;	/* takes no packet: the window does not concern it */
	cwnd = sr_cwnd(qp);
	if (cwnd < 2 * SR_CWND_GATE_DIV) {
		qp->req.win_shut = false;
		return false;
	}
	/* The step is capped in packets, so a large max_inflight does not make large messages
	 * wait too (gating 1 MiB WRITEs measured 0.75x) nor a small one wait for many ACKs. */
	step = cwnd / SR_CWND_GATE_DIV;
	if (step > SR_CWND_GATE_MAX)
		step = SR_CWND_GATE_MAX;
	used = (uint32_t)sr_psn_diff(qp->req.psn, qp->comp.psn);
	if (used >= cwnd)
		return false;	/* the window check stops the pass; the gate stays shut */
	/* A message of more than a step is a batch by itself: it goes as the window frees. */
	if (cwnd - used < step && (uint64_t)w->length <= (uint64_t)step * sr_req_seg(qp, w))
		return true;
	qp->req.win_shut = false;
	return false;
}

static void req_progress(struct sr_qp *qp)
{
	struct sr_sq *sq = &qp->sq;
	bool was_idle;
	uint64_t now = 0;
	uint32_t high0, sent = 0, even;

	if (sr_qp_reliable(qp)) {
		catch_up(qp);
		sr_comp_local(qp);
	}
	was_idle = !sr_req_outstanding(qp);
	high0 = qp->req.high_psn;

	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
		return;
	if (qp->req.rnr_until || qp->req.stalled)
		return;	/* the timer resumes an RNR wait; a stall ends in an error state */

	while (qp->req.idx != sq->head && !(!sent && window_gated(qp))) {
		struct sr_swqe *w = sr_sq_at(sq, qp->req.idx);
		int n;

		if (w->state != SR_WQE_POSTED && w->status) {
			/* The WQE that failed locally, reached again after a rewind resent what
			 * was before it: the requester stops past it again, as it did then. */
			qp->req.idx++;
			qp->req.offset = 0;
			qp->req.stalled = true;
			break;
		}
		if (sr_op_is_local(w->opcode) && w->state != SR_WQE_POSTED) {
			qp->req.idx++;	/* executed already: a rewind never repeats it */
			continue;
		}
		if (w->state == SR_WQE_POSTED) {
			/* Starting a new WQE. */
			if (qp->state == IBV_QPS_SQD)
				break;
			if ((w->flags & IBV_SEND_FENCE) && qp->req.rd_atomic)
				break;
			if (sr_op_is_local(w->opcode)) {
				if (req_local_step(qp, w))
					break;	/* stalled */
				continue;
			}
			/* Same-host direct path: with nothing outstanding before it, a WRITE or
			 * READ may be executed by a copy into (from) the peer's memory, and then
			 * completes at once, taking no PSN (direct.c). A small WRITE in a stream
			 * of posts goes as packets: they leave in batches, where each direct
			 * WRITE is a system call of its own. */
			if ((w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_READ) &&
			    qp->sq.tail == qp->req.idx && qp->state == IBV_QPS_RTS &&
			    qp->nic->direct &&
			    !(w->opcode == IBV_WR_RDMA_WRITE && w->in_stream &&
			      w->length < (uint64_t)sr_params()->direct_stream_min) &&
			    sr_direct_exec(qp, w)) {
				w->last_psn = sr_psn_add(qp->req.psn, -1);
				w->npkts = 0;
				qp->req.idx++;
				qp->req.offset = 0;
				sr_comp_wqe(qp, w, IBV_WC_SUCCESS);	/* w->state stays POSTED:
									 * no rd_atomic taken */
				continue;
			}
			/* A WRITE with immediate: its data by the direct path, then one packet
			 * (in the window, in PSN order) with the immediate, whose receive
			 * completes after the data is in place. */
			if (direct_imm_ok(qp, w) && sr_direct_exec(qp, w))
				w->dplaced = true;
			if (sr_op_is_rd_atomic(w->opcode)) {
				if (qp->req.rd_atomic + qp->req.rd_extra >= qp->attr.max_rd_atomic)
					break;
				qp->req.rd_atomic++;
			}
			w->first_psn = qp->req.psn;
			w->seg = sr_req_seg(qp, w);
			w->seg_cut = 0;
			even = w->dplaced ? 0 : sr_req_even_seg(qp, w, w->seg);
			if (even) {
				w->seg = even;
				w->seg_cut = SR_RETH_LEN;
				sr_stat_inc(&qp->nic->stats, SR_STAT_tx_write_even);
			} else if (write_first_short(qp, w)) {
				w->seg_cut = SR_RETH_LEN;
				sr_stat_inc(&qp->nic->stats, SR_STAT_tx_write_fshort);
			}
			w->npkts = sr_op_is_one_pkt(w->opcode) || w->dplaced
					   ? 1
					   : sr_npkts(w->length + w->seg_cut, w->seg);
			w->last_psn = sr_psn_add(w->first_psn, (int32_t)w->npkts - 1);
			w->rd_end_psn = sr_psn_add(w->first_psn, -1);	/* no piece asked for yet */
			w->rd_mid_psn = sr_psn_add(w->first_psn, -1);	/* nor two outstanding */
			w->state = SR_WQE_SENDING;
			qp->req.offset = 0;
		} else if (w->state == SR_WQE_SENT) {
			/* Sent before, rewound: resend it whole, with the same PSNs. */
			w->state = SR_WQE_SENDING;
			qp->req.offset = 0;
		}
		if (sr_qp_reliable(qp) &&
		    (uint32_t)sr_psn_diff(qp->req.psn, qp->comp.psn) >= sr_cwnd(qp)) {
			qp->req.win_shut = true;
			break;
		}
		/* The next piece of a READ once every response of the previous one is in, or
		 * once half the window is free (sr_req_read_overlap_ok). */
		if (read_at_boundary(qp, w) && !sr_req_read_overlap_ok(qp, w))
			break;

		/* First sent (comp.c, repair_answered); the pass's first packet shares its clock
		 * read (req_now), later ones read their own. */
		if (!qp->req.offset && sr_psn_ge(qp->req.psn, qp->req.high_psn)) {
			w->start_ns = sent ? sr_now_ns() : req_now(qp, &now);
			if (w->start_ns == SR_STAMP_LATE)
				qp->req.stamp_idx = qp->req.idx;
		}
		n = req_xmit(qp, qp->req.idx, w, sent ? NULL : &now);
		if (n < 0) {
			/* A local error (bad lkey, IBA 10.8.3.1 local protection error): nothing more
			 * is sent; the WQE completes with it once it is the oldest, then the QP leaves
			 * RTS (RC: ERR; UC/UD: SQE, IBA 10.3.1.x). */
			w->state = SR_WQE_SENT;
			w->status = (uint8_t)-n;
			qp->req.idx++;
			qp->req.offset = 0;
			qp->req.stalled = true;
			if (qp->sq.tail == qp->req.idx - 1)
				sr_comp_error_oldest(qp);
			break;	/* what was sent before it keeps its timer (below) */
		}
		sent++;
		if (w->opcode == IBV_WR_RDMA_READ) {
			/* The request covers the rest of its piece: skip the PSNs of its responses
			 * (a retry of the piece before the last one: to the last one's first). */
			qp->req.psn = sr_psn_next(sr_rd_mid_valid(w) && !sr_psn_gt(qp->req.psn, w->rd_mid_psn)
							  ? w->rd_mid_psn
							  : w->rd_end_psn);
			qp->req.offset += (uint32_t)n;
		} else {
			qp->req.psn = sr_psn_next(qp->req.psn);
			qp->req.offset += (uint32_t)n;
		}
		if (sr_psn_gt(qp->req.psn, qp->req.high_psn))
			qp->req.high_psn = qp->req.psn;
		if (qp->req.offset >= w->length || sr_op_is_one_pkt(w->opcode)) {
			w->state = SR_WQE_SENT;
			qp->req.idx++;
			qp->req.offset = 0;
			/* UC and UD have no acknowledgements: sent is done (IBA 9.8). */
			if (!sr_qp_reliable(qp))
				sr_comp_wqe(qp, w, IBV_WC_SUCCESS);
		}
	}
	if (qp->req.ackreq_owed) {
		/* The pass stopped behind a WRITE that left its AckReq to the next WQE
		 * (more_follows) before any packet asked: its last packet again, asking. */
		qp->req.ackreq_owed = false;
		if (qp->state == IBV_QPS_RTS)
			(void)sr_req_resend_one(qp, sr_psn_add(qp->req.psn, -1));
	}
	if (!sr_qp_reliable(qp) || (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD))
		return;	/* (a failed oldest WQE moved the QP to an error state) */
	if (sent && (was_idle || sr_psn_gt(qp->req.high_psn, high0))) {
		/* One packet (a ping-pong's answer): the clock read for it (first-sent time, RTT
		 * sample) is its moment; after a longer pass, read again (it took a while). */
		if (sent > 1)
			now = sr_now_ns();
		else
			req_now(qp, &now);
		if (was_idle)
			qp->comp.last_progress = now;
		/* A tail just sent is not a lost tail: the probe counts from here (comp.c,
		 * sr_qp_timers), as TCP arms its probe timeout at each new transmission. */
		qp->comp.last_new = now;
	}
	if (sr_req_outstanding(qp) && qp->timeout_ns && !qp->on_timer_list)
		sr_timer_arm(qp);
}

/* Karn's rule for a resend from PSN psn on: the sample under way, if it is at or after psn,
 * is given up (counted). A resend after the sampled packet leaves it alone. */
void sr_rtt_discard(struct sr_qp *qp, uint32_t psn)
{
	if (!qp->comp.rtt_valid || sr_psn_gt(psn, qp->comp.rtt_psn))
		return;
	qp->comp.rtt_valid = false;
	sr_stat_inc(&qp->nic->stats, SR_STAT_rtt_karn_discards);
}

bool sr_req_resend_one(struct sr_qp *qp, uint32_t psn)
{
	struct sr_sq *sq = &qp->sq;
	uint32_t i;

	if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD)
		return false;
	for (i = sq->tail; i != sq->head; i++) {
		struct sr_swqe *w = sr_sq_at(sq, i);

		if (w->state == SR_WQE_POSTED)
			return false;
		if (sr_op_is_local(w->opcode) || !sr_psn_in(psn, w->first_psn, w->last_psn))
			continue;
		if (sr_op_is_rd_atomic(w->opcode) || !sr_psn_lt(psn, qp->req.high_psn) ||
		    (i == qp->req.idx && !sr_psn_lt(psn, qp->req.psn)))
			return false;	/* a READ/ATOMIC, or a packet not sent yet */
		/* req_xmit builds the packet at (req.psn, req.offset): point them at psn, put
		 * them back after. */
		uint32_t psn0 = qp->req.psn, off0 = qp->req.offset, since0 = qp->req.since_ackreq;
		int n;

		/* Karn: no RTT sample from an ACK that covers a packet sent twice. That is the
		 * sampled packet itself, and every packet before it: ACKs are cumulative, so when
		 * an older packet was lost the peer acknowledges the sampled one only once this
		 * copy has filled the gap, and the sample would measure the repair (its NAK, the
		 * resend, a probe's wait) instead of the path. Such samples inflated SRTT under
		 * 20 % loss to tens of ms on loopback, and every timer waited as long. */
		sr_rtt_discard(qp, psn);
		qp->req.psn = psn;
		qp->req.offset = wqe_off(w, (uint32_t)sr_psn_diff(psn, w->first_psn));
		qp->req.force_ackreq = true;
		/* (A WRITE that left its AckReq to the next WQE, resent asking at the end of a
		 * post's pass: its time is not stamped yet, it was sent just now.) */
		qp->comp.probe_age_ns = w->start_ns == SR_STAMP_LATE ? 0 : sr_now_ns() - w->start_ns;
		n = req_xmit(qp, i, w, NULL);
		qp->req.force_ackreq = false;
		qp->req.psn = psn0;
		qp->req.offset = off0;
		qp->req.since_ackreq = since0;
		return n >= 0;
	}
	return false;
}

void sr_req_rewind(struct sr_qp *qp, uint32_t psn)
{
	struct sr_sq *sq = &qp->sq;
	uint32_t i;

	/* No RTT sample across a go-back-N (Karn): it resends from comp.psn or before the
	 * sample, or follows a NAK that took it already. (An RNR NAK moves comp.psn without
	 * taking one: its wait is not the path's.) */
	sr_rtt_discard(qp, qp->comp.rtt_psn);
	for (i = sq->tail; i != sq->head; i++) {
		struct sr_swqe *w = sr_sq_at(sq, i);

		if (w->state == SR_WQE_POSTED)
			break;
		if (!sr_op_is_local(w->opcode) && sr_psn_in(psn, w->first_psn, w->last_psn)) {
			uint32_t k = (uint32_t)sr_psn_diff(psn, w->first_psn);

			qp->req.idx = i;
			qp->req.stalled = false;	/* a WQE that failed locally stops it again */
			qp->req.offset = sr_op_is_rd_atomic(w->opcode) && w->opcode != IBV_WR_RDMA_READ
						 ? 0
						 : wqe_off(w, k);
			qp->req.psn = psn;
			w->state = SR_WQE_SENDING;
			/* Later WQEs already sent keep their PSNs and are resent in turn. */
			for (uint32_t j = i + 1; j != sq->head; j++) {
				struct sr_swqe *x = sr_sq_at(sq, j);

				if (x->state == SR_WQE_POSTED)
					break;
				if (!sr_op_is_local(x->opcode))
					x->state = SR_WQE_SENT;	/* "sent before": restart it */
			}
			return;
		}
	}
}
