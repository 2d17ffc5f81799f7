// SPDX-License-Identifier: MIT
/*
 * The BTH opcode table (IBA vol 1, 9.2, table 38; RoCEv2 annex A17; XRC annex; IBA 1.5 memory
 * placement extensions for FLUSH and ATOMIC WRITE).
 *
 * The rows are generated from two lists of operations, so RC, UC and XRC cannot drift apart,
 * and every offset and length is computed from the header mask by constant expressions, so no
 * number in a row is typed by hand. sr_opcode_table_check() then re-derives everything at run
 * time from first principles as a second opinion.
 */
#include <stdio.h>
#include <string.h>

#include "opcode.h"

/*
 * Header order after the BTH (IBA 9.2: headers appear in this order when present):
 * XRCETH, DETH, FETH, RETH | AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, payload.
 * The enum sr_hdr_id is not in wire order (FETH was added last), so the order lives here.
 */
#define SR_HAS(m, h) (((m) & SR_M_##h) ? SR_##h##_LEN : 0)
#define SR_OFF_XRCETH(m)	SR_BTH_LEN
#define SR_OFF_DETH(m)		(SR_OFF_XRCETH(m) + SR_HAS(m, XRCETH))
#define SR_OFF_FETH(m)		(SR_OFF_DETH(m) + SR_HAS(m, DETH))
#define SR_OFF_RETH(m)		(SR_OFF_FETH(m) + SR_HAS(m, FETH))
#define SR_OFF_ATMETH(m)	(SR_OFF_RETH(m) + SR_HAS(m, RETH))
#define SR_OFF_AETH(m)		(SR_OFF_ATMETH(m) + SR_HAS(m, ATMETH))
#define SR_OFF_ATMACK(m)	(SR_OFF_AETH(m) + SR_HAS(m, AETH))
#define SR_OFF_IMMDT(m)		(SR_OFF_ATMACK(m) + SR_HAS(m, ATMACK))
#define SR_OFF_IETH(m)		(SR_OFF_IMMDT(m) + SR_HAS(m, IMMDT))
#define SR_OFF_PAYLOAD(m)	(SR_OFF_IETH(m) + SR_HAS(m, IETH))

/* Offset of header h when present, else 0. The payload offset is always the header length. */
#define SR_OFF(m, h) (((m) & SR_M_##h) ? SR_OFF_##h(m) : 0)

#define SR_ROW(m, nm)                                                         \
	{                                                                     \
		.name = (nm),                                                 \
		.mask = (m) | SR_M_BTH,                                       \
		.length = SR_OFF_PAYLOAD(m),                                  \
		.offset = {                                                   \
			[SR_H_BTH] = 0,                                       \
			[SR_H_XRCETH] = SR_OFF(m, XRCETH),                    \
			[SR_H_DETH] = SR_OFF(m, DETH),                        \
			[SR_H_RETH] = SR_OFF(m, RETH),                        \
			[SR_H_ATMETH] = SR_OFF(m, ATMETH),                    \
			[SR_H_AETH] = SR_OFF(m, AETH),                        \
			[SR_H_ATMACK] = SR_OFF(m, ATMACK),                    \
			[SR_H_IMMDT] = SR_OFF(m, IMMDT),                      \
			[SR_H_IETH] = SR_OFF(m, IETH),                        \
			[SR_H_FETH] = SR_OFF(m, FETH),                        \
			[SR_H_PAYLOAD] = SR_OFF_PAYLOAD(m),                   \
		},                                                            \
	}

/* Shorthands for the lists below. */
#define REQ	SR_M_REQ
#define RESP	SR_M_RESP
#define SEND	(SR_M_SEND | SR_M_PAYLOAD)
#define WRITE	(SR_M_WRITE | SR_M_PAYLOAD)
#define FIRST	SR_M_START
#define MIDDLE	SR_M_MIDDLE
#define LAST	SR_M_END
#define ONLY	(SR_M_START | SR_M_END)
#define RWR	SR_M_RWR
#define COMP	SR_M_COMP

/*
 * SEND and RDMA WRITE: the operations of every connected service (RC, UC, XRC).
 * A receive WQE is consumed by the first packet of a SEND and by the packet carrying the
 * immediate of a WRITE with immediate (IBA ch. 9, SEND and RDMA WRITE); it completes on the
 * last packet.
 */
#define SR_OPS_CONNECTED(X)                                                            \
	X(SEND_FIRST, "SEND_FIRST", REQ | SEND | FIRST | RWR)                          \
	X(SEND_MIDDLE, "SEND_MIDDLE", REQ | SEND | MIDDLE)                             \
	X(SEND_LAST, "SEND_LAST", REQ | SEND | LAST | COMP)                            \
	X(SEND_LAST_IMM, "SEND_LAST_IMM", REQ | SEND | LAST | COMP | SR_M_IMMDT)       \
	X(SEND_ONLY, "SEND_ONLY", REQ | SEND | ONLY | RWR | COMP)                      \
	X(SEND_ONLY_IMM, "SEND_ONLY_IMM", REQ | SEND | ONLY | RWR | COMP | SR_M_IMMDT) \
	X(WRITE_FIRST, "WRITE_FIRST", REQ | WRITE | FIRST | SR_M_RETH)                 \
	X(WRITE_MIDDLE, "WRITE_MIDDLE", REQ | WRITE | MIDDLE)                          \
	X(WRITE_LAST, "WRITE_LAST", REQ | WRITE | LAST)                                \
	X(WRITE_LAST_IMM, "WRITE_LAST_IMM", REQ | WRITE | LAST | RWR | COMP | SR_M_IMMDT) \
	X(WRITE_ONLY, "WRITE_ONLY", REQ | WRITE | ONLY | SR_M_RETH)                    \
	X(WRITE_ONLY_IMM, "WRITE_ONLY_IMM",                                            \
	  REQ | WRITE | ONLY | RWR | COMP | SR_M_RETH | SR_M_IMMDT)

/*
 * The operations of the reliable connected services only (RC, XRC): READ, atomics, the
 * acknowledgements, SEND with invalidate (IBA 9.2 table 38: none of these exist for UC),
 * FLUSH and ATOMIC WRITE (IBA 1.5 memory placement extensions). FLUSH carries FETH then RETH
 * and no payload; ATOMIC WRITE carries a RETH and exactly 8 bytes of payload, a length the
 * responder checks (a wrong one is a NAK Invalid Request, not a silent drop).
 */
#define SR_OPS_RELIABLE(X)                                                             \
	X(READ_REQ, "READ_REQUEST", REQ | SR_M_READ | ONLY | SR_M_RETH)                \
	X(READ_RESP_FIRST, "READ_RESP_FIRST",                                          \
	  RESP | SR_M_READ | SR_M_PAYLOAD | FIRST | SR_M_AETH)                         \
	X(READ_RESP_MIDDLE, "READ_RESP_MIDDLE", RESP | SR_M_READ | SR_M_PAYLOAD | MIDDLE) \
	X(READ_RESP_LAST, "READ_RESP_LAST",                                            \
	  RESP | SR_M_READ | SR_M_PAYLOAD | LAST | SR_M_AETH)                          \
	X(READ_RESP_ONLY, "READ_RESP_ONLY",                                            \
	  RESP | SR_M_READ | SR_M_PAYLOAD | ONLY | SR_M_AETH)                          \
	X(ACK, "ACK", RESP | ONLY | SR_M_AETH)                                         \
	X(ATOMIC_ACK, "ATOMIC_ACK", RESP | ONLY | SR_M_AETH | SR_M_ATMACK)             \
	X(CMP_SWAP, "CMP_SWAP", REQ | SR_M_ATOMIC | ONLY | SR_M_ATMETH)                \
	X(FETCH_ADD, "FETCH_ADD", REQ | SR_M_ATOMIC | ONLY | SR_M_ATMETH)              \
	X(SEND_LAST_INV, "SEND_LAST_INV", REQ | SEND | LAST | COMP | SR_M_IETH)        \
	X(SEND_ONLY_INV, "SEND_ONLY_INV", REQ | SEND | ONLY | RWR | COMP | SR_M_IETH)  \
	X(FLUSH, "FLUSH", REQ | SR_M_FLUSH | ONLY | SR_M_FETH | SR_M_RETH)             \
	X(ATOMIC_WRITE, "ATOMIC_WRITE",                                                \
	  REQ | SR_M_ATOMIC_WRITE | SR_M_PAYLOAD | ONLY | SR_M_RETH)

/* XRC requests carry an XRCETH naming the target SRQ; responses do not (XRC annex). */
#define SR_XRC_MASK(m) ((m) | SR_M_XRC | (((m) & SR_M_REQ) ? SR_M_XRCETH : 0))

#define SR_RC_ROW(op, nm, m) [SR_TR_RC | SR_OP_##op] = SR_ROW((m) | SR_M_RC, "RC " nm),
#define SR_UC_ROW(op, nm, m) [SR_TR_UC | SR_OP_##op] = SR_ROW((m) | SR_M_UC, "UC " nm),
#define SR_XRC_ROW(op, nm, m) [SR_TR_XRC | SR_OP_##op] = SR_ROW(SR_XRC_MASK(m), "XRC " nm),

const struct sr_opcode_info sr_opcode[256] = {
	SR_OPS_CONNECTED(SR_RC_ROW)
	SR_OPS_RELIABLE(SR_RC_ROW)
	SR_OPS_CONNECTED(SR_UC_ROW)
	SR_OPS_CONNECTED(SR_XRC_ROW)
	SR_OPS_RELIABLE(SR_XRC_ROW)
	/* UD: SEND ONLY with a DETH (Q_Key, source QP), optionally ImmDt (IBA 9.2, 9.3.2). */
	[SR_TR_UD | SR_OP_SEND_ONLY] =
		SR_ROW(SR_M_UD | SR_M_DETH | REQ | SEND | ONLY | RWR | COMP, "UD SEND_ONLY"),
	[SR_TR_UD | SR_OP_SEND_ONLY_IMM] =
		SR_ROW(SR_M_UD | SR_M_DETH | REQ | SEND | ONLY | RWR | COMP | SR_M_IMMDT,
		       "UD SEND_ONLY_IMM"),
	/*
	 * RoCEv2 Congestion Notification Packet (annex A17, congestion control): BTH, 16
	 * reserved bytes, ICRC. Named so that it can be counted: the parser skips the reserved
	 * bytes, the engine drops it. No transport bit: it belongs to no service.
	 */
	[SR_OPCODE_CNP] = SR_ROW(0, "CNP"),
};

const char *sr_opcode_name(uint8_t opcode)
{
	return sr_opcode[opcode].name ? sr_opcode[opcode].name : "INVALID";
}

/* ---- Self-check ---------------------------------------------------------------------- */

/* Header ids in wire order, with their lengths: the order of IBA 9.2, restated. */
static const struct {
	enum sr_hdr_id id;
	uint8_t len;
} wire_order[] = {
	{ SR_H_BTH, SR_BTH_LEN },	{ SR_H_XRCETH, SR_XRCETH_LEN },
	{ SR_H_DETH, SR_DETH_LEN },	{ SR_H_FETH, SR_FETH_LEN },
	{ SR_H_RETH, SR_RETH_LEN },	{ SR_H_ATMETH, SR_ATMETH_LEN },
	{ SR_H_AETH, SR_AETH_LEN },	{ SR_H_ATMACK, SR_ATMACK_LEN },
	{ SR_H_IMMDT, SR_IMMDT_LEN },	{ SR_H_IETH, SR_IETH_LEN },
};

#define SR_M_OPS (SR_M_SEND | SR_M_WRITE | SR_M_READ | SR_M_ATOMIC | SR_M_FLUSH | SR_M_ATOMIC_WRITE)
#define SR_M_TRANSPORTS (SR_M_RC | SR_M_UC | SR_M_UD | SR_M_XRC)

static int popcount(uint32_t v) { return __builtin_popcount(v); }

static int fail(char *err, int errlen, int opc, const char *what)
{
	if (err && errlen > 0)
		snprintf(err, (size_t)errlen, "opcode 0x%02x (%s): %s", opc,
			 sr_opcode[opc].name ? sr_opcode[opc].name : "unnamed", what);
	return -1;
}

/* Offsets strictly increasing in wire order, length = BTH + the sum of the headers present. */
static const char *check_layout(const struct sr_opcode_info *o)
{
	unsigned pos = 0;

	if (!(o->mask & SR_M_BTH))
		return "no BTH";
	for (size_t i = 0; i < sizeof(wire_order) / sizeof(wire_order[0]); i++) {
		if (!(o->mask & (1u << wire_order[i].id)))
			continue;
		if (o->offset[wire_order[i].id] != pos)
			return "header offset is not where the headers before it end";
		pos += wire_order[i].len;
	}
	if (o->length != pos)
		return "length is not BTH + the sum of its headers";
	if (o->offset[SR_H_PAYLOAD] != o->length)
		return "payload offset is not the header length";
	if ((o->mask & SR_M_RETH) && (o->mask & SR_M_ATMETH))
		return "RETH and AtomicETH together";
	if ((o->mask & SR_M_FETH) && !(o->mask & SR_M_RETH))
		return "FETH without RETH";
	return NULL;
}

/* Which transport bit and name prefix the opcode's top 3 bits call for (IBA 9.2). */
static const char *check_transport(int opc, const struct sr_opcode_info *o)
{
	static const struct {
		uint8_t tr;
		uint32_t bit;
		const char *prefix;
	} trs[] = {
		{ SR_TR_RC, SR_M_RC, "RC " },	{ SR_TR_UC, SR_M_UC, "UC " },
		{ SR_TR_UD, SR_M_UD, "UD " },	{ SR_TR_XRC, SR_M_XRC, "XRC " },
	};

	if (opc == SR_OPCODE_CNP)
		return o->mask == SR_M_BTH && !strcmp(o->name, "CNP") ? NULL : "CNP row";
	for (size_t i = 0; i < sizeof(trs) / sizeof(trs[0]); i++) {
		if ((opc & 0xe0) != trs[i].tr)
			continue;
		if ((o->mask & SR_M_TRANSPORTS) != trs[i].bit)
			return "transport bit does not match the opcode's top 3 bits";
		if (strncmp(o->name, trs[i].prefix, strlen(trs[i].prefix)))
			return "name does not start with its transport";
		return NULL;
	}
	return "named row in an unsupported transport (RD, reserved)";
}

static const char *check_class(const struct sr_opcode_info *o)
{
	uint32_t m = o->mask;
	uint32_t seg = m & (SR_M_START | SR_M_MIDDLE | SR_M_END);
	bool imm_write = (m & SR_M_WRITE) && (m & SR_M_IMMDT);

	if (popcount(m & (SR_M_REQ | SR_M_RESP)) != 1)
		return "not exactly one of REQ, RESP";
	if (!seg || ((m & SR_M_MIDDLE) && seg != SR_M_MIDDLE))
		return "START/MIDDLE/END inconsistent";
	if ((m & SR_M_REQ) && popcount(m & SR_M_OPS) != 1)
		return "a request is not exactly one operation";
	if ((m & SR_M_RESP) && (m & SR_M_OPS & ~SR_M_READ))
		return "a response of an operation other than READ";
	if ((m & SR_M_RESP) && (m & (SR_M_XRCETH | SR_M_RWR | SR_M_COMP)))
		return "a response with XRCETH, RWR or COMP";
	if (!!(m & SR_M_XRC) != !!(m & SR_M_XRCETH) && (m & SR_M_REQ))
		return "XRCETH on a request iff XRC";
	if (!!(m & SR_M_UD) != !!(m & SR_M_DETH))
		return "DETH iff UD";
	if (!!(m & SR_M_PAYLOAD) != !!(m & (SR_M_SEND | SR_M_WRITE | SR_M_ATOMIC_WRITE |
					   ((m & SR_M_RESP) ? SR_M_READ : 0))))
		return "PAYLOAD not exactly on SEND, WRITE, READ responses, ATOMIC WRITE";
	if (!!(m & SR_M_RWR) != !!(((m & SR_M_SEND) && (m & SR_M_START)) ||
				   (imm_write && (m & SR_M_END))))
		return "RWR not exactly on SEND FIRST/ONLY and WRITE with immediate";
	if (!!(m & SR_M_COMP) != !!(((m & SR_M_SEND) || imm_write) && (m & SR_M_END)))
		return "COMP not exactly on SEND LAST/ONLY and WRITE with immediate";
	if ((m & SR_M_IMMDT) && !strstr(o->name, "_IMM"))
		return "ImmDt on an opcode not named _IMM";
	if (!!(m & SR_M_IETH) != !!strstr(o->name, "_INV"))
		return "IETH iff named _INV";
	return NULL;
}

/* XRC repeats RC operation for operation, and UC is the SEND/WRITE subset of RC. */
static const char *check_siblings(int opc, const struct sr_opcode_info *o)
{
	const struct sr_opcode_info *rc = &sr_opcode[opc & 0x1f];
	uint32_t same = ~(SR_M_TRANSPORTS | SR_M_XRCETH);

	if ((opc & 0xe0) != SR_TR_UC && (opc & 0xe0) != SR_TR_XRC)
		return NULL;
	if (!rc->name)
		return "no RC sibling";
	if ((o->mask & same) != (rc->mask & same))
		return "class differs from the RC sibling";
	if (strcmp(strchr(o->name, ' '), strchr(rc->name, ' ')))
		return "operation name differs from the RC sibling";
	return NULL;
}

int sr_opcode_table_check(char *err, int errlen)
{
	for (int opc = 0; opc < 256; opc++) {
		const struct sr_opcode_info *o = &sr_opcode[opc];
		const char *why;

		if (!o->name) {
			if (o->mask || o->length)
				return fail(err, errlen, opc, "unnamed row with a mask");
			continue;
		}
		why = check_layout(o);
		if (!why)
			why = check_transport(opc, o);
		if (!why && opc != SR_OPCODE_CNP)
			why = check_class(o);
		if (!why)
			why = check_siblings(opc, o);
		if (why)
			return fail(err, errlen, opc, why);
	}
	return 0;
}
