/* SPDX-License-Identifier: MIT */
/*
 * The opcode table: one row per BTH opcode (IBA 9.2, table 38), saying which headers follow the
 * BTH, their offsets, the total header length and the class of the packet. The datapath asks
 * `mask & SR_M_END` instead of listing opcodes. A row with name == NULL is an opcode softrdma
 * does not accept (reserved, RD, CNP is accepted only to be counted and dropped).
 */
#ifndef SR_WIRE_OPCODE_H
#define SR_WIRE_OPCODE_H

#include <stdint.h>

#include "hdr.h"

/* BTH opcode values. Transport class is the top 3 bits. */
enum sr_transport {
	SR_TR_RC = 0x00,
	SR_TR_UC = 0x20,
	SR_TR_RD = 0x40,
	SR_TR_UD = 0x60,
	SR_TR_CNP = 0x80,
	SR_TR_XRC = 0xa0,
};

enum sr_op {			/* operation, low 5 bits */
	SR_OP_SEND_FIRST = 0x00,
	SR_OP_SEND_MIDDLE = 0x01,
	SR_OP_SEND_LAST = 0x02,
	SR_OP_SEND_LAST_IMM = 0x03,
	SR_OP_SEND_ONLY = 0x04,
	SR_OP_SEND_ONLY_IMM = 0x05,
	SR_OP_WRITE_FIRST = 0x06,
	SR_OP_WRITE_MIDDLE = 0x07,
	SR_OP_WRITE_LAST = 0x08,
	SR_OP_WRITE_LAST_IMM = 0x09,
	SR_OP_WRITE_ONLY = 0x0a,
	SR_OP_WRITE_ONLY_IMM = 0x0b,
	SR_OP_READ_REQ = 0x0c,
	SR_OP_READ_RESP_FIRST = 0x0d,
	SR_OP_READ_RESP_MIDDLE = 0x0e,
	SR_OP_READ_RESP_LAST = 0x0f,
	SR_OP_READ_RESP_ONLY = 0x10,
	SR_OP_ACK = 0x11,
	SR_OP_ATOMIC_ACK = 0x12,
	SR_OP_CMP_SWAP = 0x13,
	SR_OP_FETCH_ADD = 0x14,
	SR_OP_SEND_LAST_INV = 0x16,
	SR_OP_SEND_ONLY_INV = 0x17,
	SR_OP_FLUSH = 0x1c,
	SR_OP_ATOMIC_WRITE = 0x1d,
};

/* Full opcodes used by the datapath by name. */
#define SR_OPC(tr, op) ((uint8_t)((tr) | (op)))
#define SR_OPCODE_CNP 0x81

/* Header ids: index into sr_opcode_info.offset[]. */
enum sr_hdr_id {
	SR_H_BTH,
	SR_H_XRCETH,
	SR_H_DETH,
	SR_H_RETH,
	SR_H_ATMETH,
	SR_H_AETH,
	SR_H_ATMACK,
	SR_H_IMMDT,
	SR_H_IETH,
	SR_H_FETH,
	SR_H_PAYLOAD,
	SR_H_COUNT
};

/* Mask bits. Bits 0..SR_H_COUNT-1: header present (SR_M_PAYLOAD: the packet may carry payload). */
#define SR_M_BTH	(1u << SR_H_BTH)
#define SR_M_XRCETH	(1u << SR_H_XRCETH)
#define SR_M_DETH	(1u << SR_H_DETH)
#define SR_M_RETH	(1u << SR_H_RETH)
#define SR_M_ATMETH	(1u << SR_H_ATMETH)
#define SR_M_AETH	(1u << SR_H_AETH)
#define SR_M_ATMACK	(1u << SR_H_ATMACK)
#define SR_M_IMMDT	(1u << SR_H_IMMDT)
#define SR_M_IETH	(1u << SR_H_IETH)
#define SR_M_FETH	(1u << SR_H_FETH)
#define SR_M_PAYLOAD	(1u << SR_H_PAYLOAD)
/* Class bits. */
#define SR_M_REQ	(1u << 12)	/* a request: handled by the responder */
#define SR_M_RESP	(1u << 13)	/* a response (ACK, ATOMIC ACK, READ response): the completer */
#define SR_M_SEND	(1u << 14)
#define SR_M_WRITE	(1u << 15)
#define SR_M_READ	(1u << 16)	/* READ request or READ response */
#define SR_M_ATOMIC	(1u << 17)	/* CMP_SWAP, FETCH_ADD (request) */
#define SR_M_FLUSH	(1u << 18)
#define SR_M_ATOMIC_WRITE (1u << 19)
#define SR_M_START	(1u << 20)	/* FIRST or ONLY */
#define SR_M_MIDDLE	(1u << 21)
#define SR_M_END	(1u << 22)	/* LAST or ONLY */
#define SR_M_RWR	(1u << 23)	/* consumes a receive WQE: SEND (START), WRITE with IMM (END) */
#define SR_M_COMP	(1u << 24)	/* completes a receive WQE: SEND END, WRITE_*_IMM END */
#define SR_M_RC		(1u << 25)
#define SR_M_UC		(1u << 26)
#define SR_M_UD		(1u << 27)
#define SR_M_XRC	(1u << 28)
#define SR_M_INV	SR_M_IETH
#define SR_M_IMM	SR_M_IMMDT

struct sr_opcode_info {
	const char *name;		/* "RC SEND_FIRST"; NULL: not a valid opcode */
	uint32_t mask;
	uint8_t length;			/* BTH + every extension header, bytes */
	uint8_t offset[SR_H_COUNT];	/* from the start of the BTH; valid when the mask bit is set */
};

extern const struct sr_opcode_info sr_opcode[256];

/* Self-check of the table's consistency (offsets increasing, lengths summing). 0 or -1. */
int sr_opcode_table_check(char *err, int errlen);

/* The row's name ("RC SEND_FIRST"), or "INVALID" for an unnamed row: safe in any log line. */
const char *sr_opcode_name(uint8_t opcode);

#endif /* SR_WIRE_OPCODE_H */
