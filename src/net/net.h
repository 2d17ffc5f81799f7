/* SPDX-License-Identifier: MIT */
/*
 * The network layer: one UDP socket per soft NIC (udp.c), fault injection (fault.c), the pcap
 * tap (pcap.c). It sends what the transport builds and hands what it receives, parsed and
 * checked, to the receiver the engine installed (nic->engine, core/core.h): it calls nothing
 * above it.
 */
#ifndef SR_NET_NET_H
#define SR_NET_NET_H

#include "core/core.h"

struct sr_pkt;
/*
 * Transmits one packet: hdr (BTH and extension headers, hlen bytes, already built) then the
 * payload gathered from iov (any number of pieces, paylen bytes, at most 65536), pad to 4
 * bytes, ICRC. Fault injection and the pcap
 * tap sit here. Returns 0 or -errno (the packet is then lost; the transport recovers).
 */
int sr_net_xmit(struct sr_nic *nic, const struct sr_addr *dst, void *hdr, unsigned hlen,
		const struct iovec *iov, int iovcnt, uint32_t paylen);
/*
 * Between begin and end (nested: the outermost end), the calling thread's packets may be held
 * back and sent together as one UDP GSO send; end sends what is held. Every path that sends
 * several packets in a row brackets them so (sr_req_progress, READ responses).
 */
void sr_net_batch_begin(void);
void sr_net_batch_end(void);
#define SR_NET_GSO_BYTES 65000	/* one GSO send's UDP payload at most (65535 less IP and UDP) */
int sr_net_open(struct sr_nic *nic);
void sr_net_close(struct sr_nic *nic);
/* Receives and processes up to a batch; returns packets received (0: none waiting). Each
 * packet that passes the checks goes on through nic->engine->rcv (mcast_rcv for a group's). */
int sr_net_rx(struct sr_nic *nic);
#define SR_NET_RX_BATCH 32	/* datagrams one receive takes at most */
/* The same, asking the kernel for at most `max` datagrams (1..SR_NET_RX_BATCH). A receive that
 * asks for more than are waiting pays for one more, empty, receive in the kernel (~0.25 us):
 * a polling application that expects one datagram (its last drain found nothing) asks for 1. */
int sr_net_rx_upto(struct sr_nic *nic, unsigned max);
/* One datagram (UDP payload buf[0..len), from src, sent alone: IPv4 ID 0 expected) taken
 * through exactly what the receive loop does with each datagram it receives (parse, ICRC,
 * then nic->engine->rcv: demultiplex, responder or completer), without a socket. For the fuzz harnesses (fuzz/);
 * the caller holds nic->rx_lock and sends the batch's ACKs (sr_resp_flush_acks) after. */
void sr_net_rx_datagram(struct sr_nic *nic, uint8_t *buf, size_t len, const struct sr_addr *src);
/* The same on a multicast group's socket, whose packets are addressed to `group`. */
int sr_net_rx_fd(struct sr_nic *nic, int fd, const struct sr_addr *group);
/*
 * A received packet's ICRC, left unchecked by the receive loop (pkt->icrc_tuple set): checks
 * it now; true when it matches (the tuple is then cleared). sr_net_icrc_match: the same for a
 * value already computed (got, as sr_icrc_calc returns it), trying an unexpected IPv4 ID as
 * the receive loop does. Neither counts the drop.
 */
struct sr_ipudp;
bool sr_net_icrc_ok(struct sr_nic *nic, struct sr_pkt *pkt);
void sr_net_icrc_drop(struct sr_nic *nic);	/* counts drop_icrc and logs it (rate-limited) */
bool sr_net_icrc_match(struct sr_nic *nic, struct sr_ipudp *t, const uint8_t *buf, size_t len,
		       uint32_t got);
/*
 * The lone receive by recvfrom (udp.c, "the lone receive by recvfrom"): while a polling
 * application's datagrams come alone, UDP_GRO goes off and a receive of one datagram
 * (sr_net_rx_upto(nic, 1)) uses recvfrom. The progress thread calls this at each look of its
 * watch (watching) and when the watch ends (!watching), holding no lock; it may take
 * nic->rx_lock and wait for an RCU grace period. drain is called with nic->rx_lock held, takes
 * what waits in the socket through sr_net_rx and returns true when it found the socket empty.
 */
void sr_net_rx_plain_look(struct sr_nic *nic, bool watching, bool (*drain)(struct sr_nic *));
/* Is the receive socket's buffer more than half full (packets waiting to be received)? */
bool sr_net_rx_half_full(struct sr_nic *nic);
/* A socket receiving the IP multicast group at UDP 4791, joined on the NIC's interface. */
int sr_net_mcast_open(struct sr_nic *nic, const struct sr_addr *group);

/* Releases a packet held back by fault injection; true while one is still held. */
int64_t sr_net_tick(struct sr_nic *nic);	/* ns until it must run again, -1: never */

#endif /* SR_NET_NET_H */
