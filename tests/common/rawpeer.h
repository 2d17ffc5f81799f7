/* SPDX-License-Identifier: MIT */
/*
 * A raw RoCEv2 endpoint for tests: a plain UDP socket that builds and parses packets with
 * src/wire (headers, opcode table, ICRC), so a test can play a scripted peer of a real QP or
 * throw hostile packets at one. It knows nothing of the engine: only the wire format and the
 * softrdma GID format (docs/gid.md: ::ffff:a.b.c.d is UDP 4791, 0:0:0:0:PPPP:ffff:a.b.c.d is
 * UDP port PPPP).
 */
#ifndef SR_RAWPEER_H
#define SR_RAWPEER_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"
#include "wire/pkt.h"

struct rawpeer {
	int fd;
	struct sockaddr_in me;		/* where the raw socket is bound */
	struct sockaddr_in dev;		/* the device it talks to */
	union ibv_gid gid;		/* the raw socket's own GID (a QP's AV points here) */
};

/* IPv4 address and UDP port a softrdma GID names; false for a GID that is not IPv4. */
bool rp_gid_to_sin(const union ibv_gid *gid, struct sockaddr_in *sin);
/* Binds a UDP socket on 127.0.0.1 (any port) aimed at the device named by dev_gid. 0 or errno. */
int rp_open(struct rawpeer *rp, const union ibv_gid *dev_gid);
void rp_close(struct rawpeer *rp);

/*
 * Sends hdr (BTH and extension headers, hlen bytes) + payload + pad + ICRC to the device. The
 * BTH pad count is set from paylen. icrc_xor is XORed into the correct ICRC (0: valid).
 * Returns 0 or errno.
 */
int rp_send(struct rawpeer *rp, const void *hdr, size_t hlen, const void *payload,
	    size_t paylen, uint32_t icrc_xor);
/* Sends len raw bytes as the UDP payload, nothing added. */
int rp_send_raw(struct rawpeer *rp, const void *buf, size_t len);
/* The valid ICRC for a whole packet buf[0..len) (its last 4 bytes ignored) from us. */
uint32_t rp_icrc(const struct rawpeer *rp, const void *buf, size_t len);
/* The same for a packet sent with IPv4 ID id (packet id of a GSO send, src/net/udp.c). */
uint32_t rp_icrc_id(const struct rawpeer *rp, const void *buf, size_t len, uint16_t id);
/* Sends buf as one UDP GSO send of seg-byte datagrams (the last may be shorter). 0 or errno. */
int rp_send_gso(struct rawpeer *rp, const void *buf, size_t len, uint16_t seg);

/* Receives one packet within timeout_ms into buf; parses it into *pkt (pkt may be NULL).
 * Returns its length, 0 on timeout, -1 on a parse failure or a bad ICRC. */
int rp_recv(struct rawpeer *rp, void *buf, size_t cap, struct sr_pkt *pkt, int timeout_ms);
/* The same while an application polls cq for the whole wait (softrdma's receive runs in the
 * polls: the stack under test takes what the peer sent and answers meanwhile); completions are
 * discarded. Looks for a packet once a millisecond. */
int rp_recv_polling(struct rawpeer *rp, struct ibv_cq *cq, void *buf, size_t cap,
		    struct sr_pkt *pkt, int timeout_ms);
/* Polls cq for ms milliseconds, discarding completions (drives softrdma's receive path). */
void rp_pump(struct ibv_cq *cq, int ms);
/* True when no packet arrives within timeout_ms; else *pkt is the one that did (its header
 * fields; the payload is in a buffer the next call reuses). */
bool rp_quiet(struct rawpeer *rp, int timeout_ms, struct sr_pkt *pkt);
/* The same as a check: a packet that arrives is a test failure naming it, the caller's line
 * and what was wanted instead (`want`, e.g. "nothing"). */
bool rp_expect_quiet(struct rawpeer *rp, int timeout_ms, const char *want, int line);

/* Sends the RC READ responses to a request at PSN psn for the len bytes at data, mtu bytes a
 * packet (FIRST/MIDDLE/LAST, or ONLY), to QP dqpn, their AETH carrying msn; packet number
 * skip (0-based) is left out, as if lost (-1: none). Returns 0 or errno. */
int rp_send_read_resp(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, const void *data,
		      uint32_t len, uint32_t mtu, int skip, uint32_t msn);
/* The same, packets from .. to - 1 (0-based) only: a response sequence under way. */
int rp_send_read_resp_part(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, const void *data,
			   uint32_t len, uint32_t mtu, uint32_t from, uint32_t to, uint32_t msn);

/* Sends an RC ACK (or NAK: syndrome) of PSN psn, MSN 0, to QP dqpn. 0 or errno. */
int rp_send_ack(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, uint8_t syndrome);

/* Header builders: return the header length written into hdr (SR_MAX... 64 bytes suffice). */
size_t rp_hdr_ack(void *hdr, uint32_t dqpn, uint32_t psn, uint8_t syndrome, uint32_t msn);
size_t rp_hdr_write(void *hdr, uint8_t opcode, uint32_t dqpn, uint32_t psn, bool ackreq,
		    uint64_t va, uint32_t rkey, uint32_t len);
size_t rp_hdr_send(void *hdr, uint8_t opcode, uint32_t dqpn, uint32_t psn, bool ackreq);
/* One RC SEND_ONLY of 16 bytes (each the PSN's low byte) asking for an ACK, to dqpn at *psn;
 * *psn moves on. 0 or -errno. */
int rp_send_small(struct rawpeer *rp, uint32_t dqpn, uint32_t *psn);
/* One RC WRITE_ONLY of one byte, psn's low byte, at va (rkey) to QP dqpn, asking for an ACK if
 * ackreq, byte4 ORed into BTH byte 4 (SR_BTH_SR_MARK: a softrdma peer's mark; 0: none). 0 or
 * errno. */
int rp_send_write_byte(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, bool ackreq,
		       uint8_t byte4, uint64_t va, uint32_t rkey);
/* Reads and drops whatever the device has sent the peer (its ACKs), without waiting. */
void rp_drain(struct rawpeer *rp);

#endif /* SR_RAWPEER_H */
