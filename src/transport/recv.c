/* SPDX-License-Identifier: MIT */
/*
 * Where a received packet goes. The packet has already been parsed and its ICRC checked
 * (src/net/udp.c), or the check was left to the placement of a WRITE or SEND MIDDLE packet
 * (sr_resp_place) and a drop here checks it first. Here it meets the transport's checks (IBA
 * 9.6, "packet header validation"): destination QP exists, its type matches the opcode's
 * transport, the P_Key matches, the QP's state accepts it, and on a connected QP the packet
 * comes from the connected peer. Then a request goes to the responder, a response to the
 * completer. Every drop is counted.
 */
#include "core/log.h"
#include "transport/xport.h"

static bool pkey_ok(uint16_t pkey)
{
	/* The port's only P_Key is the default 0xffff. Keys match on the low 15 bits, and two
	 * limited members (bit 15 clear) may not talk (IBA 10.9.3). */
	return (pkey & 0x7fff) == 0x7fff;
}

static bool type_ok(const struct sr_qp *qp, uint32_t mask)
{
	switch (qp->type) {
	case IBV_QPT_RC:
		return mask & SR_M_RC;
	case IBV_QPT_UC:
		return mask & SR_M_UC;
	case IBV_QPT_UD:
		return mask & SR_M_UD;
	case IBV_QPT_XRC_SEND:		/* the initiator takes XRC responses only */
		return (mask & SR_M_XRC) && (mask & SR_M_RESP);
	case IBV_QPT_XRC_RECV:		/* the target takes XRC requests only */
		return (mask & SR_M_XRC) && (mask & SR_M_REQ);
	default:
		return false;
	}
}

/*
 * A connected QP takes packets from its peer only. RoCEv2 senders pick their UDP source port
 * for flow entropy, so a peer at the standard port is matched on its IP address alone; a
 * softrdma peer on another port (encoded in its GID) always sends from that port.
 */
static bool source_ok(const struct sr_qp *qp, const struct sr_addr *src)
{
	if (qp->type == IBV_QPT_UD)
		return true;
	if (!sr_addr_ip_eq(&qp->peer, src))
		return false;
	return qp->peer.port == 4791 || qp->peer.port == src->port;
}

/* A drop, counted as a bad ICRC if the packet has one still unchecked (udp.c): exactly the
 * counts of a receive loop that checks every ICRC first. */
static void drop(struct sr_nic *nic, struct sr_pkt *pkt, enum sr_stat why)
{
	if (sr_net_icrc_ok(nic, pkt))
		sr_stat_inc(&nic->stats, why);
	else
		sr_net_icrc_drop(nic);
}

/*
 * A softrdma peer's request that carries an ACK (SR_BTH_SR_ACKRIDE, resp.c sr_resp_ride): the
 * ACK first, exactly as the ACK packet it stands for, had that come alone right before the
 * request (the same QP, peer and checks above; then the completer's own), and then the
 * request, as the next packet, if the QP still takes it. The parser has checked the
 * extension's form; the ICRC covered it.
 */
static bool ride_first(struct sr_nic *nic, struct sr_qp *qp, struct sr_pkt *pkt)
{
	uint8_t buf[SR_ACKRIDE_PKT_LEN];
	struct sr_pkt ack;

	sr_pkt_ackride_pkt(pkt, buf, &ack);
	sr_stat_add_excl(&nic->stats, SR_STAT_acks_rode_rcvd, 1);	/* rx_lock held */
	sr_comp_rcv(qp, &ack);
	return qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_INIT && qp->state != IBV_QPS_ERR;
}

/*
 * The peer's offer (docs/cm.md, In-band large segments): the mark and units of BTH byte 4,
 * which the ICRC leaves out, so a bit flipped on the way arrives unseen. A peer's NIC puts the
 * same offer in every packet (udp.c sr_net_xmit), so a connected QP takes the first one it
 * hears from this peer at once, and a different one only once two packets in a row carry it:
 * one packet's flipped bit changes nothing, and the QP goes on cutting its messages and its
 * READ responses (resp.c read_seg) as both sides agreed. Such a packet is counted
 * (offer_kept). A UD QP hears many peers: it takes each packet's.
 */
static void hear_offer(struct sr_nic *nic, struct sr_qp *qp, const struct sr_bth *b)
{
	uint8_t o = sr_bth_sr_marked(b) ? b->qpn[0] & (SR_BTH_SR_MARK | SR_BTH_SR_UNITS) : 0;
	uint8_t held = qp->peer_sr ? (uint8_t)(SR_BTH_SR_MARK | qp->peer_seg / 4096) : 0;

	if (qp->type != IBV_QPT_UD && qp->peer_heard && o != held &&
	    (uint8_t)(0x80 | o) != qp->peer_odd) {
		qp->peer_odd = (uint8_t)(0x80 | o);
		sr_stat_inc(&nic->stats, SR_STAT_offer_kept);
		return;
	}
	qp->peer_heard = true;
	qp->peer_odd = 0;
	qp->peer_seg = sr_bth_sr_seg(b);
	qp->peer_sr = sr_bth_sr_marked(b);
}

/* A request with resv7 bit 28 (a carried ACK, SR_BTH_SR_ACKRIDE) but without the mark, from a
 * peer whose packets carry it: the mark was lost on the way (byte 4, outside the ICRC), and the
 * parser left the ACK's 8 bytes in the payload. Dropped (drop_ride); the peer resends. From an
 * unmarked peer the bit is IBA's reserved one: ignored. */
static bool ride_unmarked(const struct sr_qp *qp, struct sr_pkt *pkt)
{
	const struct sr_bth *b = sr_pkt_bth(pkt);

	return (pkt->mask & SR_M_REQ) && qp->peer_sr && !sr_bth_sr_marked(b) &&
	       (sr_ld_be32(b->apsn) & SR_BTH_SR_ACKRIDE);
}

void sr_rcv(struct sr_nic *nic, struct sr_pkt *pkt, const struct sr_addr *src)
{
	struct sr_qp *qp;
	bool entered;

	if (pkt->opcode == SR_OPCODE_CNP || !(pkt->mask & (SR_M_REQ | SR_M_RESP))) {
		drop(nic, pkt, SR_STAT_drop_opcode);
		return;
	}
	if (!pkey_ok(sr_bth_pkey(sr_pkt_bth(pkt)))) {
		drop(nic, pkt, SR_STAT_drop_pkey);
		return;
	}
	qp = sr_qp_enter(nic, pkt->qpn);
	entered = qp != NULL;
	if (!qp)
		qp = sr_qp_lookup(nic, pkt->qpn);	/* QP1, and what is not there */
	if (!qp) {
		/* QP1 when no CM opened the GSI QP, and multicast, land here. */
		drop(nic, pkt, sr_qp_gone_recently(nic, pkt->qpn) ? SR_STAT_drop_qp_gone
								  : SR_STAT_drop_qpn);
		return;
	}
	pthread_mutex_lock(&qp->lock);
	if (!type_ok(qp, pkt->mask)) {
		drop(nic, pkt, SR_STAT_drop_qp_type);
	} else if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_INIT ||
		   qp->state == IBV_QPS_ERR) {
		/* Looked up just before ibv_destroy_qp took the QP out of the table (it is in
		 * RESET now): gone, as if it had come a moment later. */
		drop(nic, pkt, qp->state == IBV_QPS_RESET && sr_qp_gone_recently(nic, pkt->qpn)
					? SR_STAT_drop_qp_gone
					: SR_STAT_drop_qp_state);
	} else if (!source_ok(qp, src)) {
		drop(nic, pkt, SR_STAT_drop_src);
	} else if (pkt->icrc_tuple && !((pkt->mask & SR_M_REQ) ? sr_resp_place(qp, pkt)
							       : sr_comp_place(qp, pkt))) {
		sr_net_icrc_drop(nic);
	} else if (ride_unmarked(qp, pkt)) {
		drop(nic, pkt, SR_STAT_drop_ride);
	} else {
		hear_offer(nic, qp, sr_pkt_bth(pkt));
		qp->peer_fshort = sr_bth_sr_fshort(sr_pkt_bth(pkt));
		qp->peer_even = sr_bth_sr_even(sr_pkt_bth(pkt));
		qp->peer_even_mtu = sr_bth_sr_evenmtu(sr_pkt_bth(pkt));
		if (!(pkt->mask & SR_M_REQ)) {
			qp->peer_ride = sr_bth_sr_ackride(sr_pkt_bth(pkt));	/* the offer */
			sr_comp_rcv(qp, pkt);
		} else if (sr_pkt_ackride(pkt) && !ride_first(nic, qp, pkt)) {
			sr_stat_inc(&nic->stats, SR_STAT_drop_qp_state);
		} else {
			sr_resp_rcv(qp, pkt, src);
		}
	}
	pthread_mutex_unlock(&qp->lock);
	if (entered)
		sr_qp_leave(qp);
	else
		sr_qp_put(qp);
}
