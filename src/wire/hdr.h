/* SPDX-License-Identifier: MIT */
/*
 * InfiniBand transport headers as carried by RoCEv2 (IBA vol 1, ch. 9; RoCEv2 annex A17).
 *
 * One packed struct per header, each with a _Static_assert on its wire size. Byte order lives
 * only in the accessors below: callers never touch a multi-byte field directly.
 * Pure code: this directory includes nothing of the project.
 */
#ifndef SR_WIRE_HDR_H
#define SR_WIRE_HDR_H

#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define SR_ROCEV2_UDP_PORT 4791

/* Header lengths in bytes. */
enum {
	SR_BTH_LEN = 12,
	SR_RDETH_LEN = 4,
	SR_DETH_LEN = 8,
	SR_XRCETH_LEN = 4,
	SR_RETH_LEN = 16,
	SR_ATMETH_LEN = 28,
	SR_AETH_LEN = 4,
	SR_ATMACK_LEN = 8,
	SR_IMMDT_LEN = 4,
	SR_IETH_LEN = 4,
	SR_FETH_LEN = 4,
	SR_ICRC_LEN = 4,
};

/* Unaligned big-endian loads and stores. */
static inline uint16_t sr_ld_be16(const void *p) { uint16_t v; memcpy(&v, p, 2); return be16toh(v); }
static inline uint32_t sr_ld_be32(const void *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }
static inline uint64_t sr_ld_be64(const void *p) { uint64_t v; memcpy(&v, p, 8); return be64toh(v); }
static inline void sr_st_be16(void *p, uint16_t v) { v = htobe16(v); memcpy(p, &v, 2); }
static inline void sr_st_be32(void *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static inline void sr_st_be64(void *p, uint64_t v) { v = htobe64(v); memcpy(p, &v, 8); }
static inline uint32_t sr_ld_le32(const void *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static inline void sr_st_le32(void *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }

/* ---- BTH: Base Transport Header (IBA 9.2) ---------------------------------------------- */
struct sr_bth {
	uint8_t opcode;
	uint8_t flags;		/* SE(1) MigReq(1) PadCnt(2) TVer(4) */
	uint8_t pkey[2];
	uint8_t qpn[4];		/* resv8a: FECN(1) BECN(1) resv6 | DestQP(24) */
	uint8_t apsn[4];	/* AckReq(1) resv7 | PSN(24) */
} __attribute__((packed));
_Static_assert(sizeof(struct sr_bth) == SR_BTH_LEN, "BTH is 12 bytes");

#define SR_BTH_SE 0x80
#define SR_BTH_MIG 0x40
#define SR_BTH_PAD_SHIFT 4
#define SR_BTH_PAD_MASK 0x30
#define SR_BTH_TVER_MASK 0x0f
#define SR_BTH_FECN 0x80000000u
#define SR_BTH_BECN 0x40000000u
#define SR_BTH_QPN_MASK 0x00ffffffu
/* softrdma's own use of the 6 reserved bits of BTH byte 4 (resv6, after FECN and BECN). IBA
 * has them sent as 0 and ignored on receive, and the ICRC masks the whole byte (switches may
 * set FECN/BECN), so other stacks neither see nor check them. A softrdma sender sets bit 5
 * and, in bits 0-3, the largest packet payload its NIC takes, in 4 KiB units (0: none beyond
 * the path MTU; never above 15, since it comes from an MTU of at most 65535): the offer of
 * in-band large segments (docs/cm.md, Large segments). Bit 4 (SR_BTH_SR_FSHORT), sent only
 * with the mark and on a QP whose peer offered no more than this NIC takes: this responder
 * takes a WRITE whose FIRST carries its segment less the RETH (docs/cm.md). A softrdma before
 * it read bits 0-4 as the size, so it reads a size of 64 KiB or more, and takes the smaller
 * of that and its own: by the rule above, the smaller of the two offers all the same. */
#define SR_BTH_SR_MARK 0x20u		/* in byte 4 */
#define SR_BTH_SR_FSHORT 0x10u
#define SR_BTH_SR_UNITS 0x0fu
#define SR_BTH_ACKREQ 0x80000000u
/* softrdma's own use of one bit of BTH resv7 (after AckReq): a READ request from a softrdma
 * requester (marked, above) whose responses are to come in large segments: min(the offer in
 * this request's byte 4, the responder's own seg_max) bytes each instead of the path MTU
 * (docs/cm.md, In-band large segments). Sent as 0 otherwise; the ICRC covers it. */
#define SR_BTH_SR_RDSEG 0x40000000u
/* The same bit in an RDMA WRITE Only with Immediate from a marked softrdma requester: the
 * RETH's DMA length of data is already in place, put there by the same-host direct path
 * (docs/direct.md); the packet carries no payload, only the immediate, and its responder
 * checks the key over the range, consumes a receive WQE and completes it, copying nothing. */
#define SR_BTH_SR_PLACED SR_BTH_SR_RDSEG
/* softrdma's own use of bit 29 (resv7) in any marked packet, the offer of the even cut: this
 * NIC's responder takes a WRITE cut into packets of one datagram size, its FIRST carrying P - 16
 * bytes (its RETH makes up the rest), every later packet P but the LAST, which may be shorter,
 * every packet padded to 4 bytes alike, P at most the segment + 16 (docs/cm.md, In-band large
 * segments). Sent only where
 * SR_BTH_SR_FSHORT is; sent as 0 otherwise (an older softrdma ignores it: the ICRC covers it, and
 * every IBA receiver ignores resv7). */
#define SR_BTH_SR_EVEN 0x20000000u
/* softrdma's own use of bit 27 (resv7) in any marked packet, the offer of the even cut at the
 * path MTU: this NIC's responder takes, where no large segment is in use, a WRITE cut as above
 * with P at most the path MTU + 16 (a FIRST of fewer bytes than the path MTU sets P to its
 * payload + 16; a FIRST of exactly the path MTU is IBA's cut). Sent independently of the other
 * offers, toward a marked peer of an RC or UC QP (docs/cm.md, "The even cut at the path MTU");
 * sent as 0 otherwise (an older softrdma ignores it, so it is never sent such a cut). */
#define SR_BTH_SR_EVENMTU 0x08000000u
/* Bit 28 of resv7 (bit 29 is SR_BTH_SR_EVEN's, bit 27 SR_BTH_SR_EVENMTU's; bits 26-24 stay
 * reserved, sent as 0),
 * meaningful only in a marked packet (docs/cm.md, "An ACK that rides in a request"):
 * - in an RC request whose one packet is the whole message (an ONLY, READ request, atomic,
 *   FLUSH, ATOMIC WRITE): the packet carries an ACK of the sender's responder, an 8-byte
 *   struct sr_ackride right after the opcode's headers, before the payload; its receiver takes
 *   that ACK first, as if it had come alone just before the request;
 * - in a response (ACK, READ response, ATOMIC ACK): the sender's NIC takes such requests (the
 *   offer; a peer sends them only to a NIC that made it, param ack_ride).
 * Sent as 0 otherwise and toward other stacks; the ICRC covers it. */
#define SR_BTH_SR_ACKRIDE 0x10000000u
/* The bits the PSN setters keep. */
#define SR_BTH_SR_KEEP                                                                     \
	(SR_BTH_ACKREQ | SR_BTH_SR_RDSEG | SR_BTH_SR_EVEN | SR_BTH_SR_EVENMTU | SR_BTH_SR_ACKRIDE)
#define SR_BTH_PSN_MASK 0x00ffffffu
#define SR_DEFAULT_PKEY 0xffff
#define SR_QPN_MULTICAST 0xffffff

static inline uint8_t sr_bth_opcode(const struct sr_bth *b) { return b->opcode; }
static inline bool sr_bth_se(const struct sr_bth *b) { return b->flags & SR_BTH_SE; }
static inline bool sr_bth_mig(const struct sr_bth *b) { return b->flags & SR_BTH_MIG; }
static inline unsigned sr_bth_pad(const struct sr_bth *b) { return (b->flags & SR_BTH_PAD_MASK) >> SR_BTH_PAD_SHIFT; }
static inline unsigned sr_bth_tver(const struct sr_bth *b) { return b->flags & SR_BTH_TVER_MASK; }
static inline uint16_t sr_bth_pkey(const struct sr_bth *b) { return sr_ld_be16(b->pkey); }
static inline uint32_t sr_bth_qpn(const struct sr_bth *b) { return sr_ld_be32(b->qpn) & SR_BTH_QPN_MASK; }
static inline bool sr_bth_fecn(const struct sr_bth *b) { return sr_ld_be32(b->qpn) & SR_BTH_FECN; }
static inline bool sr_bth_becn(const struct sr_bth *b) { return sr_ld_be32(b->qpn) & SR_BTH_BECN; }
static inline bool sr_bth_ackreq(const struct sr_bth *b) { return sr_ld_be32(b->apsn) & SR_BTH_ACKREQ; }
static inline bool sr_bth_sr_rdseg(const struct sr_bth *b) { return sr_ld_be32(b->apsn) & SR_BTH_SR_RDSEG; }
static inline uint32_t sr_bth_psn(const struct sr_bth *b) { return sr_ld_be32(b->apsn) & SR_BTH_PSN_MASK; }
static inline bool sr_bth_sr_marked(const struct sr_bth *b) { return b->qpn[0] & SR_BTH_SR_MARK; }
static inline bool sr_bth_sr_placed(const struct sr_bth *b) { return sr_ld_be32(b->apsn) & SR_BTH_SR_PLACED; }
/* A marked packet's bit 28 (SR_BTH_SR_ACKRIDE): a carried ACK (request) or the offer (response). */
static inline bool sr_bth_sr_ackride(const struct sr_bth *b)
{
	return sr_bth_sr_marked(b) && (sr_ld_be32(b->apsn) & SR_BTH_SR_ACKRIDE);
}
/* The payload a softrdma sender's NIC takes (bytes; 0: unmarked or nothing beyond the MTU). */
static inline uint32_t sr_bth_sr_seg(const struct sr_bth *b)
{
	return sr_bth_sr_marked(b) ? (uint32_t)(b->qpn[0] & SR_BTH_SR_UNITS) * 4096u : 0;
}

/* The sender's responder takes a WRITE FIRST short by its RETH (a marked packet's bit 4). */
static inline bool sr_bth_sr_fshort(const struct sr_bth *b)
{
	return sr_bth_sr_marked(b) && (b->qpn[0] & SR_BTH_SR_FSHORT);
}

/* The sender's responder takes the even cut (a marked packet's resv7 bit 29). */
static inline bool sr_bth_sr_even(const struct sr_bth *b)
{
	return sr_bth_sr_marked(b) && (sr_ld_be32(b->apsn) & SR_BTH_SR_EVEN);
}

/* ... and the even cut at the path MTU (a marked packet's resv7 bit 27). */
static inline bool sr_bth_sr_evenmtu(const struct sr_bth *b)
{
	return sr_bth_sr_marked(b) && (sr_ld_be32(b->apsn) & SR_BTH_SR_EVENMTU);
}

/* Writes a whole BTH. Reserved bits are written as zero (IBA: sent as 0, ignored on receive). */
static inline void sr_bth_build(struct sr_bth *b, uint8_t opcode, bool se, bool mig, unsigned pad,
				uint16_t pkey, uint32_t qpn, bool ackreq, uint32_t psn)
{
	b->opcode = opcode;
	b->flags = (se ? SR_BTH_SE : 0) | (mig ? SR_BTH_MIG : 0) |
		   ((pad << SR_BTH_PAD_SHIFT) & SR_BTH_PAD_MASK); /* TVer = 0 */
	sr_st_be16(b->pkey, pkey);
	sr_st_be32(b->qpn, qpn & SR_BTH_QPN_MASK);
	sr_st_be32(b->apsn, (ackreq ? SR_BTH_ACKREQ : 0) | (psn & SR_BTH_PSN_MASK));
}
static inline void sr_bth_set_psn(struct sr_bth *b, uint32_t psn)
{
	sr_st_be32(b->apsn, (sr_ld_be32(b->apsn) & SR_BTH_SR_KEEP) | (psn & SR_BTH_PSN_MASK));
}
static inline void sr_bth_set_ackreq(struct sr_bth *b, bool ackreq)
{
	sr_st_be32(b->apsn, (ackreq ? SR_BTH_ACKREQ : 0) |
				    (sr_ld_be32(b->apsn) & (SR_BTH_SR_KEEP & ~SR_BTH_ACKREQ)) |
				    sr_bth_psn(b));
}
static inline void sr_bth_set_sr_rdseg(struct sr_bth *b)
{
	sr_st_be32(b->apsn, sr_ld_be32(b->apsn) | SR_BTH_SR_RDSEG);
}
static inline void sr_bth_set_sr_even(struct sr_bth *b)
{
	sr_st_be32(b->apsn, sr_ld_be32(b->apsn) | SR_BTH_SR_EVEN);
}
static inline void sr_bth_set_sr_evenmtu(struct sr_bth *b)
{
	sr_st_be32(b->apsn, sr_ld_be32(b->apsn) | SR_BTH_SR_EVENMTU);
}
static inline void sr_bth_set_sr_ackride(struct sr_bth *b)
{
	sr_st_be32(b->apsn, sr_ld_be32(b->apsn) | SR_BTH_SR_ACKRIDE);
}

/* ---- RETH: RDMA Extended Transport Header (9.3.3) -------------------------------------- */
struct sr_reth {
	uint8_t va[8];
	uint8_t rkey[4];
	uint8_t len[4];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_reth) == SR_RETH_LEN, "RETH is 16 bytes");
static inline uint64_t sr_reth_va(const struct sr_reth *h) { return sr_ld_be64(h->va); }
static inline uint32_t sr_reth_rkey(const struct sr_reth *h) { return sr_ld_be32(h->rkey); }
static inline uint32_t sr_reth_len(const struct sr_reth *h) { return sr_ld_be32(h->len); }
static inline void sr_reth_build(struct sr_reth *h, uint64_t va, uint32_t rkey, uint32_t len)
{
	sr_st_be64(h->va, va);
	sr_st_be32(h->rkey, rkey);
	sr_st_be32(h->len, len);
}

/* ---- AtomicETH (9.3.4) ------------------------------------------------------------------ */
struct sr_atmeth {
	uint8_t va[8];
	uint8_t rkey[4];
	uint8_t swap_add[8];
	uint8_t compare[8];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_atmeth) == SR_ATMETH_LEN, "AtomicETH is 28 bytes");
static inline uint64_t sr_atmeth_va(const struct sr_atmeth *h) { return sr_ld_be64(h->va); }
static inline uint32_t sr_atmeth_rkey(const struct sr_atmeth *h) { return sr_ld_be32(h->rkey); }
static inline uint64_t sr_atmeth_swap_add(const struct sr_atmeth *h) { return sr_ld_be64(h->swap_add); }
static inline uint64_t sr_atmeth_compare(const struct sr_atmeth *h) { return sr_ld_be64(h->compare); }
static inline void sr_atmeth_build(struct sr_atmeth *h, uint64_t va, uint32_t rkey,
				   uint64_t swap_add, uint64_t compare)
{
	sr_st_be64(h->va, va);
	sr_st_be32(h->rkey, rkey);
	sr_st_be64(h->swap_add, swap_add);
	sr_st_be64(h->compare, compare);
}

/* ---- AETH: ACK Extended Transport Header (9.3.5) ----------------------------------------- */
struct sr_aeth {
	uint8_t smsn[4];	/* Syndrome(8) | MSN(24) */
} __attribute__((packed));
_Static_assert(sizeof(struct sr_aeth) == SR_AETH_LEN, "AETH is 4 bytes");

/* Syndrome: bits 6..5 select the type, bits 4..0 the value (IBA table 44). */
#define SR_AETH_TYPE_MASK 0x60
#define SR_AETH_ACK 0x00		/* value = credit count; 0x1f = invalid (no flow control) */
#define SR_AETH_RNR_NAK 0x20		/* value = RNR timer code */
#define SR_AETH_NAK 0x60		/* value = NAK code below */
#define SR_AETH_VALUE_MASK 0x1f
#define SR_AETH_ACK_UNLIMITED 0x1f
enum sr_nak_code {
	SR_NAK_PSN_SEQ_ERR = 0,
	SR_NAK_INVALID_REQ = 1,
	SR_NAK_REM_ACCESS_ERR = 2,
	SR_NAK_REM_OP_ERR = 3,
	SR_NAK_INVALID_RD_REQ = 4,
};
#define SR_MSN_MASK 0x00ffffffu
static inline uint8_t sr_aeth_syndrome(const struct sr_aeth *h) { return h->smsn[0]; }
static inline uint32_t sr_aeth_msn(const struct sr_aeth *h) { return sr_ld_be32(h->smsn) & SR_MSN_MASK; }
static inline void sr_aeth_build(struct sr_aeth *h, uint8_t syndrome, uint32_t msn)
{
	sr_st_be32(h->smsn, ((uint32_t)syndrome << 24) | (msn & SR_MSN_MASK));
}

/* ---- softrdma's ACK that rides in a request (SR_BTH_SR_ACKRIDE; docs/cm.md) ------------- *
 * Between the opcode's headers and the payload of a marked RC request with bit 28 set: the
 * AETH of an ACK (its syndrome an ACK's, type 00; the MSN), then a kind (1: an ACK; others
 * reserved, refused) and the PSN that ACK acknowledges. The receiver's parser strips it (the
 * payload starts after it) and takes the ACK as it would an ACK packet of that PSN and AETH. */
struct sr_ackride {
	struct sr_aeth aeth;
	uint8_t kpsn[4];	/* kind(8) | PSN(24) */
} __attribute__((packed));
enum { SR_ACKRIDE_LEN = 8, SR_ACKRIDE_KIND_ACK = 1 };
_Static_assert(sizeof(struct sr_ackride) == SR_ACKRIDE_LEN, "a carried ACK is 8 bytes");
static inline unsigned sr_ackride_kind(const struct sr_ackride *h) { return h->kpsn[0]; }
static inline uint32_t sr_ackride_psn(const struct sr_ackride *h) { return sr_ld_be32(h->kpsn) & SR_BTH_PSN_MASK; }
static inline void sr_ackride_build(struct sr_ackride *h, uint8_t syndrome, uint32_t msn, uint32_t psn)
{
	sr_aeth_build(&h->aeth, syndrome, msn);
	sr_st_be32(h->kpsn, ((uint32_t)SR_ACKRIDE_KIND_ACK << 24) | (psn & SR_BTH_PSN_MASK));
}

/* ---- AtomicAckETH (9.3.6) ---------------------------------------------------------------- */
struct sr_atmack {
	uint8_t orig[8];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_atmack) == SR_ATMACK_LEN, "AtomicAckETH is 8 bytes");
static inline uint64_t sr_atmack_orig(const struct sr_atmack *h) { return sr_ld_be64(h->orig); }
static inline void sr_atmack_build(struct sr_atmack *h, uint64_t orig) { sr_st_be64(h->orig, orig); }

/* ---- ImmDt (9.3.7). Kept in network order: ibv_wc.imm_data is __be32. ------------------- */
struct sr_immdt {
	uint8_t imm[4];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_immdt) == SR_IMMDT_LEN, "ImmDt is 4 bytes");
static inline uint32_t sr_immdt_raw(const struct sr_immdt *h) { uint32_t v; memcpy(&v, h->imm, 4); return v; }
static inline void sr_immdt_build_raw(struct sr_immdt *h, uint32_t be_imm) { memcpy(h->imm, &be_imm, 4); }

/* ---- IETH: Invalidate ETH (9.3.8) --------------------------------------------------------- */
struct sr_ieth {
	uint8_t rkey[4];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_ieth) == SR_IETH_LEN, "IETH is 4 bytes");
static inline uint32_t sr_ieth_rkey(const struct sr_ieth *h) { return sr_ld_be32(h->rkey); }
static inline void sr_ieth_build(struct sr_ieth *h, uint32_t rkey) { sr_st_be32(h->rkey, rkey); }

/* ---- DETH: Datagram ETH (9.3.2) ----------------------------------------------------------- */
struct sr_deth {
	uint8_t qkey[4];
	uint8_t sqp[4];		/* resv8 | SrcQP(24) */
} __attribute__((packed));
_Static_assert(sizeof(struct sr_deth) == SR_DETH_LEN, "DETH is 8 bytes");
static inline uint32_t sr_deth_qkey(const struct sr_deth *h) { return sr_ld_be32(h->qkey); }
static inline uint32_t sr_deth_sqp(const struct sr_deth *h) { return sr_ld_be32(h->sqp) & SR_BTH_QPN_MASK; }
static inline void sr_deth_build(struct sr_deth *h, uint32_t qkey, uint32_t sqp)
{
	sr_st_be32(h->qkey, qkey);
	sr_st_be32(h->sqp, sqp & SR_BTH_QPN_MASK);
}

/* ---- XRCETH (9.3.9 in IBA 1.2.1 XRC annex) -------------------------------------------------- */
struct sr_xrceth {
	uint8_t srqn[4];	/* resv8 | XRCSRQ(24) */
} __attribute__((packed));
_Static_assert(sizeof(struct sr_xrceth) == SR_XRCETH_LEN, "XRCETH is 4 bytes");
static inline uint32_t sr_xrceth_srqn(const struct sr_xrceth *h) { return sr_ld_be32(h->srqn) & SR_BTH_QPN_MASK; }
static inline void sr_xrceth_build(struct sr_xrceth *h, uint32_t srqn) { sr_st_be32(h->srqn, srqn & SR_BTH_QPN_MASK); }

/* ---- FETH: FLUSH Extended Transport Header (IBA 1.5 / memory placement extensions) -------- */
struct sr_feth {
	uint8_t bits[4];	/* resv26 | SEL(2) bits 5..4 | PLT(4) bits 3..0 */
} __attribute__((packed));
_Static_assert(sizeof(struct sr_feth) == SR_FETH_LEN, "FETH is 4 bytes");
#define SR_FETH_PLT_MASK 0x0fu	/* placement type: 1 global visibility, 2 persistence */
#define SR_FETH_SEL_SHIFT 4
#define SR_FETH_SEL_MASK 0x30u	/* selectivity level (range or whole MR; values: see the memory: issue) */
static inline unsigned sr_feth_plt(const struct sr_feth *h) { return sr_ld_be32(h->bits) & SR_FETH_PLT_MASK; }
static inline unsigned sr_feth_sel(const struct sr_feth *h) { return (sr_ld_be32(h->bits) & SR_FETH_SEL_MASK) >> SR_FETH_SEL_SHIFT; }
static inline void sr_feth_build(struct sr_feth *h, unsigned sel, unsigned plt)
{
	sr_st_be32(h->bits, ((sel << SR_FETH_SEL_SHIFT) & SR_FETH_SEL_MASK) | (plt & SR_FETH_PLT_MASK));
}

#endif /* SR_WIRE_HDR_H */
