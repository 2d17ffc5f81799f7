/* SPDX-License-Identifier: MIT */
/* The CM wire protocol: encoding and strict decoding (layout in proto.h). */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "cm/proto.h"

/* Body length per type: connection data for REQ/REP/SIDR, a reason for REJ, nothing else. */
#define BODY_CONN 48	/* gid 16, qpn 4, psn 4, qkey 4, 8 single bytes, ece 8, status 1, 3 reserved */
#define BODY_REJ 4	/* reason 2, reserved 2 */
#define BODY_GID 16	/* QP1 REPLY: a GID */

static size_t body_len(uint8_t type)
{
	switch (type) {
	case CM_MSG_REQ:
	case CM_MSG_REP:
	case CM_MSG_SIDR_REQ:
	case CM_MSG_SIDR_REP:
		return BODY_CONN;
	case CM_MSG_REJ:
		return BODY_REJ;
	case CM_MSG_QP1_REPLY:
		return BODY_GID;
	default:
		return 0;
	}
}

size_t cm_pdata_max(uint8_t type, uint16_t ps)
{
	/* rdma_cm puts its own 36-byte header (addresses, ports) in the REQ/SIDR REQ private
	 * data of the IP port spaces; the applications get the rest (rdma_connect(3)). */
	size_t ip_hdr = (ps == RDMA_PS_TCP || ps == RDMA_PS_UDP) ? 36 : 0;

	switch (type) {
	case CM_MSG_REQ:
		return 92 - ip_hdr;
	case CM_MSG_REP:
		return 196;
	case CM_MSG_RTU:
		return 224;
	case CM_MSG_REJ:
		return 148;
	case CM_MSG_DREQ:
		return 220;
	case CM_MSG_DREP:
		return 224;
	case CM_MSG_SIDR_REQ:
		return 216 - ip_hdr;
	case CM_MSG_SIDR_REP:
		return 136;
	default:
		return 0;
	}
}

static void put16(uint8_t *p, uint16_t v) { v = htobe16(v); memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { v = htobe32(v); memcpy(p, &v, 4); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return be16toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return be32toh(v); }

int cm_msg_encode(const struct cm_msg *m, uint8_t *buf, size_t len)
{
	size_t blen = body_len(m->type), total = CM_HDR_LEN + blen + m->pdata_len;

	if (m->type == 0 || m->type >= CM_MSG_TYPES || m->pdata_len > cm_pdata_max(m->type, m->ps) ||
	    total > len)
		return -EINVAL;
	memset(buf, 0, CM_HDR_LEN + blen);
	buf[0] = 'S';
	buf[1] = 'C';
	buf[2] = CM_PROTO_VERSION;
	buf[3] = m->type;
	put32(buf + 4, m->src_id);
	put32(buf + 8, m->dst_id);
	put16(buf + 12, m->ps);
	put16(buf + 14, m->src_port);
	put16(buf + 16, m->dst_port);
	buf[18] = m->pdata_len;

	uint8_t *b = buf + CM_HDR_LEN;

	if (blen == BODY_CONN) {
		memcpy(b, m->gid.raw, 16);
		put32(b + 16, m->qpn & 0xffffff);
		put32(b + 20, m->psn & 0xffffff);
		put32(b + 24, m->qkey);
		b[28] = m->mtu;
		b[29] = m->responder_resources;
		b[30] = m->initiator_depth;
		b[31] = m->retry_count;
		b[32] = m->rnr_retry_count;
		b[33] = m->flow_control;
		b[34] = m->srq;
		b[35] = m->qp_type;
		put32(b + 36, m->ece_vendor);
		put32(b + 40, m->ece_options);
		b[44] = m->status;
		b[45] = m->seg4k;
	} else if (blen == BODY_REJ) {
		put16(b, m->reason);
	} else if (blen == BODY_GID) {
		memcpy(b, m->gid.raw, 16);
	}
	if (m->pdata_len)
		memcpy(buf + CM_HDR_LEN + blen, m->pdata, m->pdata_len);
	return (int)total;
}

int cm_msg_decode(struct cm_msg *m, const uint8_t *buf, size_t len)
{
	size_t blen;

	if (len < CM_HDR_LEN || buf[0] != 'S' || buf[1] != 'C' || buf[2] != CM_PROTO_VERSION)
		return -EPROTO;
	memset(m, 0, sizeof(*m));
	m->type = buf[3];
	if (m->type == 0 || m->type >= CM_MSG_TYPES)
		return -EBADMSG;
	m->src_id = get32(buf + 4);
	m->dst_id = get32(buf + 8);
	m->ps = get16(buf + 12);
	m->src_port = get16(buf + 14);
	m->dst_port = get16(buf + 16);
	m->pdata_len = buf[18];
	blen = body_len(m->type);
	if (len != CM_HDR_LEN + blen + m->pdata_len || m->pdata_len > cm_pdata_max(m->type, m->ps))
		return -EBADMSG;

	const uint8_t *b = buf + CM_HDR_LEN;

	if (blen == BODY_CONN) {
		memcpy(m->gid.raw, b, 16);
		m->qpn = get32(b + 16) & 0xffffff;
		m->psn = get32(b + 20) & 0xffffff;
		m->qkey = get32(b + 24);
		m->mtu = b[28];
		m->responder_resources = b[29];
		m->initiator_depth = b[30];
		m->retry_count = b[31];
		m->rnr_retry_count = b[32];
		m->flow_control = b[33];
		m->srq = b[34];
		m->qp_type = b[35];
		m->ece_vendor = get32(b + 36);
		m->ece_options = get32(b + 40);
		m->status = b[44];
		m->seg4k = b[45];
		if (m->mtu < IBV_MTU_256 || m->mtu > IBV_MTU_4096)
			return -EBADMSG;
	} else if (blen == BODY_REJ) {
		m->reason = get16(b);
	} else if (blen == BODY_GID) {
		memcpy(m->gid.raw, b, 16);
	}
	if (m->pdata_len)
		memcpy(m->pdata, buf + CM_HDR_LEN + blen, m->pdata_len);
	return 0;
}

const char *cm_msg_name(uint8_t type)
{
	static const char *const names[CM_MSG_TYPES] = {
		[CM_MSG_REQ] = "REQ", [CM_MSG_REP] = "REP", [CM_MSG_RTU] = "RTU",
		[CM_MSG_REJ] = "REJ", [CM_MSG_DREQ] = "DREQ", [CM_MSG_DREP] = "DREP",
		[CM_MSG_SIDR_REQ] = "SIDR_REQ", [CM_MSG_SIDR_REP] = "SIDR_REP",
		[CM_MSG_PROBE] = "PROBE", [CM_MSG_PROBE_ACK] = "PROBE_ACK",
		[CM_MSG_QP1_QUERY] = "QP1_QUERY", [CM_MSG_QP1_REPLY] = "QP1_REPLY",
	};

	return type < CM_MSG_TYPES && names[type] ? names[type] : "?";
}
