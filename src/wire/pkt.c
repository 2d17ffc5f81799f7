// SPDX-License-Identifier: MIT
/*
 * Validating one received RoCEv2 UDP payload (BTH .. ICRC) against what its own bytes say:
 * the header validation of IBA 9.6.1 that needs no QP state. Every read is bounded by len
 * (checked before it happens), so hostile input can only be rejected, never over-read.
 */
#include <stdint.h>
#include <string.h>

#include "pkt.h"

const char *const sr_parse_err_name[SR_PE_COUNT] = {
#define SR_PE_NAME(n, d) [SR_PE_##n] = #n,
	SR_PARSE_ERRORS(SR_PE_NAME)
#undef SR_PE_NAME
};

const char *const sr_parse_err_desc[SR_PE_COUNT] = {
#define SR_PE_DESC(n, d) [SR_PE_##n] = d,
	SR_PARSE_ERRORS(SR_PE_DESC)
#undef SR_PE_DESC
};

/*
 * The bytes between the headers and the ICRC: payload plus pad. Pad (0..3 bytes, IBA 9.2:
 * PadCount) only ever follows a payload, so an opcode without one must have nothing there. The
 * CNP (RoCEv2 annex A17) has 16 reserved bytes there instead, ignored.
 */
static enum sr_parse_err check_payload(struct sr_pkt *p, size_t rest)
{
	if (!(p->mask & SR_M_PAYLOAD)) {
		if (p->opcode == SR_OPCODE_CNP)
			return p->pad ? SR_PE_BAD_PAD : SR_PE_OK;
		return rest || p->pad ? SR_PE_BAD_PAD : SR_PE_OK;
	}
	if (p->pad > rest)
		return SR_PE_BAD_PAD;
	p->paylen = (uint32_t)(rest - p->pad);
	return SR_PE_OK;
}

enum sr_parse_err sr_pkt_parse(struct sr_pkt *p, void *buf, size_t len)
{
	const struct sr_bth *bth = buf;
	const struct sr_opcode_info *info;

	memset(p, 0, sizeof(*p));
	p->hdr = buf;
	/* A length the struct cannot hold is as malformed as a short one (UDP caps it at 64K). */
	if (len < SR_BTH_LEN + SR_ICRC_LEN || len > UINT32_MAX)
		return SR_PE_SHORT;
	p->len = (uint32_t)len;
	p->opcode = sr_bth_opcode(bth);
	info = &sr_opcode[p->opcode];
	if (!info->name)
		return SR_PE_BAD_OPCODE;
	if (sr_bth_tver(bth) != 0)	/* IBA 9.6 header validation: only TVer 0 exists */
		return SR_PE_BAD_TVER;
	p->mask = info->mask;
	p->hdr_len = info->length;
	p->pad = (uint8_t)sr_bth_pad(bth);
	p->qpn = sr_bth_qpn(bth);
	p->psn = sr_bth_psn(bth);
	p->ackreq = sr_bth_ackreq(bth);
	p->se = sr_bth_se(bth);
	if (len < (size_t)info->length + SR_ICRC_LEN)
		return SR_PE_SHORT;
	if ((info->mask & SR_M_REQ) && sr_bth_sr_ackride(bth)) {
		const struct sr_ackride *r = (const void *)(p->hdr + info->length);

		/* Only a whole RC message in one packet carries an ACK (docs/cm.md), and only an
		 * ACK (kind 1, an ACK's syndrome): anything else is malformed. */
		if ((info->mask & (SR_M_RC | SR_M_START | SR_M_END)) != (SR_M_RC | SR_M_START | SR_M_END) ||
		    len < (size_t)info->length + SR_ACKRIDE_LEN + SR_ICRC_LEN ||
		    sr_ackride_kind(r) != SR_ACKRIDE_KIND_ACK ||
		    (sr_aeth_syndrome(&r->aeth) & SR_AETH_TYPE_MASK) != SR_AETH_ACK)
			return SR_PE_BAD_RIDE;
		p->hdr_len = (uint8_t)(info->length + SR_ACKRIDE_LEN);
	}
	return check_payload(p, len - p->hdr_len - SR_ICRC_LEN);
}

void sr_pkt_ackride_pkt(const struct sr_pkt *p, uint8_t buf[SR_ACKRIDE_PKT_LEN], struct sr_pkt *ack)
{
	const struct sr_ackride *r = sr_pkt_ackride(p);
	const struct sr_bth *bth = sr_pkt_bth(p);

	sr_bth_build((struct sr_bth *)buf, SR_OPC(SR_TR_RC, SR_OP_ACK), false, false, 0,
		     sr_bth_pkey(bth), p->qpn, false, sr_ackride_psn(r));
	buf[4] = p->hdr[4];	/* the mark and offers in byte 4, FECN, BECN: the carrier's */
	memcpy(buf + SR_BTH_LEN, &r->aeth, SR_AETH_LEN);
	memset(buf + SR_BTH_LEN + SR_AETH_LEN, 0, SR_ICRC_LEN);
	/* (cannot fail: a BTH of a valid opcode, an AETH, the ICRC's room) */
	(void)sr_pkt_parse(ack, buf, SR_ACKRIDE_PKT_LEN);
}
