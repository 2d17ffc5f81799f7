/* SPDX-License-Identifier: MIT */
/*
 * Parsing one received RoCEv2 UDP payload (BTH .. ICRC) into a validated view. The parser only
 * checks what the bytes themselves say (length, opcode, version, pad); transport rules (PSN, QP
 * state, keys) belong to the engine.
 */
#ifndef SR_WIRE_PKT_H
#define SR_WIRE_PKT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hdr.h"
#include "opcode.h"

struct sr_ipudp;

/* Why a packet was rejected by the parser. Stable order: used as counter indexes. */
#define SR_PARSE_ERRORS(X)                                                  \
	X(OK, "valid")                                                      \
	X(SHORT, "shorter than BTH + ICRC or than its opcode's headers")   \
	X(BAD_OPCODE, "opcode not valid for RoCEv2 / not supported")       \
	X(BAD_TVER, "BTH transport header version is not 0")              \
	X(BAD_PAD, "pad count larger than the payload or payload on a no-payload opcode") \
	X(BAD_ICRC, "ICRC does not match")                                \
	X(BAD_RIDE, "a carried ACK (BTH resv7 bit 28 of a softrdma request) where none may ride, or malformed")

enum sr_parse_err {
#define SR_PE_ENUM(n, d) SR_PE_##n,
	SR_PARSE_ERRORS(SR_PE_ENUM)
#undef SR_PE_ENUM
	SR_PE_COUNT
};
/* "OK", "SHORT", ...: the enum's own names, for counters. */
extern const char *const sr_parse_err_name[SR_PE_COUNT];
/* The one-line descriptions from the list above, for logs. */
extern const char *const sr_parse_err_desc[SR_PE_COUNT];

struct sr_pkt {
	uint8_t *hdr;		/* start of the BTH */
	uint32_t len;		/* BTH through ICRC */
	uint32_t mask;		/* sr_opcode[opcode].mask */
	uint8_t opcode;
	uint8_t pad;
	uint8_t hdr_len;	/* sr_opcode[opcode].length, + SR_ACKRIDE_LEN with a carried ACK */
	uint32_t qpn;		/* destination QP */
	uint32_t psn;
	bool ackreq;
	bool se;
	uint32_t paylen;	/* payload bytes, pad excluded */
	/*
	 * Receive only. icrc_tuple: the ICRC is not checked yet, and will be against this
	 * IP/UDP tuple (the IPv4 ID in it may be corrected), by the placement of a WRITE or
	 * SEND MIDDLE packet, which copies the payload and checks it in one pass, or by
	 * sr_net_icrc_ok before anything else acts on the packet (src/net/udp.c, rx_one,
	 * and src/transport/resp.c, sr_resp_place). placed: the payload is in place.
	 */
	struct sr_ipudp *icrc_tuple;
	bool placed;
};

/* Fills p from buf[0..len). Does not check the ICRC (the caller knows the IP/UDP tuple). */
enum sr_parse_err sr_pkt_parse(struct sr_pkt *p, void *buf, size_t len);

static inline void *sr_pkt_h(const struct sr_pkt *p, enum sr_hdr_id h)
{
	return p->hdr + sr_opcode[p->opcode].offset[h];
}
static inline void *sr_pkt_payload(const struct sr_pkt *p) { return p->hdr + p->hdr_len; }
static inline const struct sr_bth *sr_pkt_bth(const struct sr_pkt *p) { return (const struct sr_bth *)p->hdr; }
/* The ACK a softrdma request carries (SR_BTH_SR_ACKRIDE, checked by the parser), or NULL. */
static inline const struct sr_ackride *sr_pkt_ackride(const struct sr_pkt *p)
{
	return p->hdr_len != sr_opcode[p->opcode].length
		       ? (const struct sr_ackride *)(p->hdr + sr_opcode[p->opcode].length)
		       : NULL;
}
/* Makes *ack the ACK packet that request p carries (p: parsed, sr_pkt_ackride(p) not NULL), as
 * if it had come alone: its BTH (p's, with the ACK opcode and the carried PSN) and AETH are
 * written to buf, its ICRC checked already (p's covers them). */
#define SR_ACKRIDE_PKT_LEN (SR_BTH_LEN + SR_AETH_LEN + SR_ICRC_LEN)
void sr_pkt_ackride_pkt(const struct sr_pkt *p, uint8_t buf[SR_ACKRIDE_PKT_LEN], struct sr_pkt *ack);

#endif /* SR_WIRE_PKT_H */
