/* SPDX-License-Identifier: MIT */
/*
 * The transport's entry points: what the engine (src/engine) drives. The requester (req.c),
 * responder (resp.c), completer (comp.c), demultiplexer (recv.c) and the same-host direct
 * path's requester side (direct.c, dcopy.c). The helpers the roles share among themselves are
 * in transport/xport.h.
 */
#ifndef SR_TRANSPORT_TRANSPORT_H
#define SR_TRANSPORT_TRANSPORT_H

#include "core/core.h"

struct sr_pkt;
struct sr_ackride;
/* A parsed, checked packet for this NIC from src. */
void sr_rcv(struct sr_nic *nic, struct sr_pkt *pkt, const struct sr_addr *src);
/* Sends what the SQ allows now; qp lock held. */
void sr_req_progress(struct sr_qp *qp);
/* After a post's pass (req.stamp_due): its first packet's times, read now that it left. */
void sr_req_stamp(struct sr_qp *qp);
/* The payload of each packet of WQE w, were it to start now (req.c). */
uint32_t sr_req_seg(struct sr_qp *qp, const struct sr_swqe *w);
uint32_t sr_req_even_seg(const struct sr_qp *qp, const struct sr_swqe *w, uint32_t seg);
/* READ pieces (req.c): may the next piece of READ w go before the one before is answered;
 * does the requester wait at such a boundary with room for it now (the completer then calls
 * sr_req_progress at once). */
bool sr_req_read_overlap_ok(struct sr_qp *qp, struct sr_swqe *w);
bool sr_req_read_waits(struct sr_qp *qp);
/* Go back to psn and resend from there (retransmit); qp lock held. */
void sr_req_rewind(struct sr_qp *qp, uint32_t psn);
/* Something sent is not yet acknowledged (the retransmission timer runs). */
bool sr_req_outstanding(struct sr_qp *qp);
/* Sends again the one packet with PSN psn (a SEND/WRITE packet, asking for an ACK), without
 * moving the requester. False when psn is not such a packet of an outstanding WQE. */
bool sr_req_resend_one(struct sr_qp *qp, uint32_t psn);
/* A READ response with its ICRC unchecked: placed and checked in one pass if it is the next
 * MIDDLE response of the oldest WQE's READ, else checked; false when the ICRC is bad (qp lock
 * held). */
bool sr_comp_place(struct sr_qp *qp, struct sr_pkt *pkt);
/* Karn: gives up the RTT sample under way when a packet at or before it is sent again. */
void sr_rtt_discard(struct sr_qp *qp, uint32_t psn);
void sr_comp_rcv(struct sr_qp *qp, struct sr_pkt *pkt);
void sr_resp_rcv(struct sr_qp *qp, struct sr_pkt *pkt, const struct sr_addr *src);
/* A request with its ICRC unchecked: placed and checked in one pass if it is the next MIDDLE
 * packet of an RC WRITE or SEND, else checked; false when the ICRC is bad (qp lock held). */
bool sr_resp_place(struct sr_qp *qp, struct sr_pkt *pkt);
/* Sends the coalesced ACKs of the batch just processed (rx_lock held). */
void sr_resp_flush_acks(struct sr_nic *nic);
void sr_resp_final_ack(struct sr_qp *qp);	/* qp->lock held: repeat the last ACK on destroy */
void sr_resp_ack_now(struct sr_qp *qp);	/* qp->lock held: a held ACK leaves (QP to ERR/RESET) */
void sr_resp_ride_arm(struct sr_qp *qp);	/* qp->lock held: before a post's pass */
bool sr_resp_ride(struct sr_qp *qp, struct sr_ackride *r);	/* the pass's first packet */
void sr_resp_answer(struct sr_qp *qp);		/* qp->lock held: the application posts a send */
/* Timer service for qp at time now; returns the next deadline (0: none); qp lock held. */
uint64_t sr_qp_timers(struct sr_qp *qp, uint64_t now);
uint64_t sr_qp_timer_first_ns(const struct sr_qp *qp);
/* Delivers a UD packet to qp (multicast: for each attached QP; qp lock held). */
void sr_ud_rcv(struct sr_qp *qp, struct sr_pkt *pkt, const struct sr_addr *src);
/* Drops the requester's, completer's and responder's state (to RESET, destroy). */
void sr_transport_reset(struct sr_qp *qp);
/* The oldest WQE carries a local error: complete it with it and leave RTS (comp.c). */
void sr_comp_error_oldest(struct sr_qp *qp);
/* Completes the executed local operations (BIND_MW, LOCAL_INV, REG_MR) at the head of the SQ. */
void sr_comp_local(struct sr_qp *qp);

/* ---- same-host direct path: the requester's side (direct.c, docs/direct.md) -------------- */
/* Executes WQE w (at req.idx, nothing outstanding before it) without a packet when the peer
 * is a softrdma process on this host; false: send it as packets. */
bool sr_direct_exec(struct sr_qp *qp, struct sr_swqe *w);
/* Its copy: process_vm_writev (readv) of lv to [raddr, +len) of pid, long ones shared with a
 * helper thread (src/transport/dcopy.c). Returns the bytes copied, or -1 with errno. */
ssize_t sr_dcopy(struct sr_nic *nic, pid_t pid, bool rd, const struct iovec *lv,
		 unsigned long ln, uintptr_t raddr, size_t len);

#endif /* SR_TRANSPORT_TRANSPORT_H */
