/* SPDX-License-Identifier: MIT */
/* MADs and CM messages: decoding and encoding (layout in mad.h and docs/cm.md). */
#include <string.h>

#include "wire/hdr.h"
#include "wire/mad.h"

/* Bit fields as the IBA numbers them: `off` bits from the most significant bit of a byte. */
static inline uint8_t bits8(uint8_t b, unsigned off, unsigned width)
{
	return (uint8_t)((b >> (8 - off - width)) & ((1u << width) - 1));
}

static inline uint8_t put8(uint8_t v, unsigned off, unsigned width)
{
	return (uint8_t)((v & ((1u << width) - 1)) << (8 - off - width));
}

/* A be32 word whose top 24 bits are one field and low 8 another. */
static inline uint32_t hi24(const uint8_t *p) { return sr_ld_be32(p) >> 8; }
static inline void st24_8(uint8_t *p, uint32_t hi, uint8_t lo)
{
	sr_st_be32(p, (hi & 0xffffff) << 8 | lo);
}

void sr_mad_hdr_decode(struct sr_mad_hdr *h, const uint8_t *buf)
{
	const struct sr_mad_hdr_wire *w = (const void *)buf;

	h->base_version = w->base_version;
	h->mgmt_class = w->mgmt_class;
	h->class_version = w->class_version;
	h->method = w->method;
	h->status = sr_ld_be16(w->status);
	h->class_specific = sr_ld_be16(w->class_specific);
	h->tid = sr_ld_be64(w->tid);
	h->attr_id = sr_ld_be16(w->attr_id);
	h->attr_mod = sr_ld_be32(w->attr_mod);
}

void sr_mad_hdr_encode(const struct sr_mad_hdr *h, uint8_t *buf)
{
	struct sr_mad_hdr_wire *w = (void *)buf;

	memset(w, 0, sizeof(*w));
	w->base_version = h->base_version;
	w->mgmt_class = h->mgmt_class;
	w->class_version = h->class_version;
	w->method = h->method;
	sr_st_be16(w->status, h->status);
	sr_st_be16(w->class_specific, h->class_specific);
	sr_st_be64(w->tid, h->tid);
	sr_st_be16(w->attr_id, h->attr_id);
	sr_st_be32(w->attr_mod, h->attr_mod);
}

static void path_decode(struct sr_cm_path *p, const struct sr_cm_path_wire *w)
{
	uint32_t fr = sr_ld_be32(w->flow_rate);

	p->local_lid = sr_ld_be16(w->local_lid);
	p->remote_lid = sr_ld_be16(w->remote_lid);
	memcpy(p->local_gid, w->local_gid, 16);
	memcpy(p->remote_gid, w->remote_gid, 16);
	p->flow_label = fr >> 12;
	p->packet_rate = fr & 0x3f;
	p->traffic_class = w->traffic_class;
	p->hop_limit = w->hop_limit;
	p->sl = bits8(w->sl_subnet, 0, 4);
	p->subnet_local = bits8(w->sl_subnet, 4, 1);
	p->local_ack_timeout = bits8(w->ack_timeout, 0, 5);
}

static void path_encode(const struct sr_cm_path *p, struct sr_cm_path_wire *w)
{
	sr_st_be16(w->local_lid, p->local_lid);
	sr_st_be16(w->remote_lid, p->remote_lid);
	memcpy(w->local_gid, p->local_gid, 16);
	memcpy(w->remote_gid, p->remote_gid, 16);
	sr_st_be32(w->flow_rate, (p->flow_label & 0xfffff) << 12 | (p->packet_rate & 0x3f));
	w->traffic_class = p->traffic_class;
	w->hop_limit = p->hop_limit;
	w->sl_subnet = put8(p->sl, 0, 4) | put8(p->subnet_local, 4, 1);
	w->ack_timeout = put8(p->local_ack_timeout, 0, 5);
}

static void req_decode(struct sr_cm_req *m, const struct sr_cm_req_wire *w)
{
	m->local_comm_id = sr_ld_be32(w->local_comm_id);
	m->service_id = sr_ld_be64(w->service_id);
	m->local_ca_guid = sr_ld_be64(w->local_ca_guid);
	m->local_qkey = sr_ld_be32(w->local_qkey);
	m->local_qpn = hi24(w->qpn_rres);
	m->responder_resources = w->qpn_rres[3];
	m->local_eecn = hi24(w->eecn_idepth);
	m->initiator_depth = w->eecn_idepth[3];
	m->remote_eecn = hi24(w->reecn_misc);
	m->remote_cm_response_timeout = bits8(w->reecn_misc[3], 0, 5);
	m->transport_service_type = bits8(w->reecn_misc[3], 5, 2);
	m->e2e_flow_control = bits8(w->reecn_misc[3], 7, 1);
	m->starting_psn = hi24(w->psn_misc);
	m->local_cm_response_timeout = bits8(w->psn_misc[3], 0, 5);
	m->retry_count = bits8(w->psn_misc[3], 5, 3);
	m->pkey = sr_ld_be16(w->pkey);
	m->path_mtu = bits8(w->mtu_rnr, 0, 4);
	m->rdc_exists = bits8(w->mtu_rnr, 4, 1);
	m->rnr_retry_count = bits8(w->mtu_rnr, 5, 3);
	m->max_cm_retries = bits8(w->maxret_srq, 0, 4);
	m->srq = bits8(w->maxret_srq, 4, 1);
	m->ext_transport_type = bits8(w->maxret_srq, 5, 3);
	path_decode(&m->primary, &w->primary);
	path_decode(&m->alternate, &w->alternate);
	m->sap_supported = bits8(w->alternate.ack_timeout, 5, 1);
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void req_encode(const struct sr_cm_req *m, struct sr_cm_req_wire *w)
{
	sr_st_be32(w->local_comm_id, m->local_comm_id);
	sr_st_be64(w->service_id, m->service_id);
	sr_st_be64(w->local_ca_guid, m->local_ca_guid);
	sr_st_be32(w->local_qkey, m->local_qkey);
	st24_8(w->qpn_rres, m->local_qpn, m->responder_resources);
	st24_8(w->eecn_idepth, m->local_eecn, m->initiator_depth);
	st24_8(w->reecn_misc, m->remote_eecn,
	       put8(m->remote_cm_response_timeout, 0, 5) | put8(m->transport_service_type, 5, 2) |
	       put8(m->e2e_flow_control, 7, 1));
	st24_8(w->psn_misc, m->starting_psn,
	       put8(m->local_cm_response_timeout, 0, 5) | put8(m->retry_count, 5, 3));
	sr_st_be16(w->pkey, m->pkey);
	w->mtu_rnr = put8(m->path_mtu, 0, 4) | put8(m->rdc_exists, 4, 1) |
		     put8(m->rnr_retry_count, 5, 3);
	w->maxret_srq = put8(m->max_cm_retries, 0, 4) | put8(m->srq, 4, 1) |
			put8(m->ext_transport_type, 5, 3);
	path_encode(&m->primary, &w->primary);
	path_encode(&m->alternate, &w->alternate);
	w->alternate.ack_timeout |= put8(m->sap_supported, 5, 1);
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

static void rep_decode(struct sr_cm_rep *m, const struct sr_cm_rep_wire *w)
{
	m->local_comm_id = sr_ld_be32(w->local_comm_id);
	m->remote_comm_id = sr_ld_be32(w->remote_comm_id);
	m->local_qkey = sr_ld_be32(w->local_qkey);
	m->local_qpn = hi24(w->local_qpn);
	m->local_eecn = hi24(w->local_eecn);
	m->starting_psn = hi24(w->psn);
	m->responder_resources = w->responder_resources;
	m->initiator_depth = w->initiator_depth;
	m->target_ack_delay = bits8(w->misc, 0, 5);
	m->failover_accepted = bits8(w->misc, 5, 2);
	m->e2e_flow_control = bits8(w->misc, 7, 1);
	m->rnr_retry_count = bits8(w->rnr_srq, 0, 3);
	m->srq = bits8(w->rnr_srq, 3, 1);
	m->local_ca_guid = sr_ld_be64(w->local_ca_guid);
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void rep_encode(const struct sr_cm_rep *m, struct sr_cm_rep_wire *w)
{
	sr_st_be32(w->local_comm_id, m->local_comm_id);
	sr_st_be32(w->remote_comm_id, m->remote_comm_id);
	sr_st_be32(w->local_qkey, m->local_qkey);
	st24_8(w->local_qpn, m->local_qpn, 0);
	st24_8(w->local_eecn, m->local_eecn, 0);
	st24_8(w->psn, m->starting_psn, 0);
	w->responder_resources = m->responder_resources;
	w->initiator_depth = m->initiator_depth;
	w->misc = put8(m->target_ack_delay, 0, 5) | put8(m->failover_accepted, 5, 2) |
		  put8(m->e2e_flow_control, 7, 1);
	w->rnr_srq = put8(m->rnr_retry_count, 0, 3) | put8(m->srq, 3, 1);
	sr_st_be64(w->local_ca_guid, m->local_ca_guid);
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

static void mra_decode(struct sr_cm_mra *m, const struct sr_cm_mra_wire *w)
{
	m->local_comm_id = sr_ld_be32(w->local_comm_id);
	m->remote_comm_id = sr_ld_be32(w->remote_comm_id);
	m->msg_mraed = bits8(w->msg_mraed, 0, 2);
	m->service_timeout = bits8(w->service_timeout, 0, 5);
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void mra_encode(const struct sr_cm_mra *m, struct sr_cm_mra_wire *w)
{
	sr_st_be32(w->local_comm_id, m->local_comm_id);
	sr_st_be32(w->remote_comm_id, m->remote_comm_id);
	w->msg_mraed = put8(m->msg_mraed, 0, 2);
	w->service_timeout = put8(m->service_timeout, 0, 5);
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

static void rej_decode(struct sr_cm_rej *m, const struct sr_cm_rej_wire *w)
{
	m->local_comm_id = sr_ld_be32(w->local_comm_id);
	m->remote_comm_id = sr_ld_be32(w->remote_comm_id);
	m->msg_rejected = bits8(w->msg_rejected, 0, 2);
	m->ari_len = bits8(w->ari_len, 0, 7);
	m->reason = sr_ld_be16(w->reason);
	memcpy(m->ari, w->ari, sizeof(m->ari));
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void rej_encode(const struct sr_cm_rej *m, struct sr_cm_rej_wire *w)
{
	sr_st_be32(w->local_comm_id, m->local_comm_id);
	sr_st_be32(w->remote_comm_id, m->remote_comm_id);
	w->msg_rejected = put8(m->msg_rejected, 0, 2);
	w->ari_len = put8(m->ari_len, 0, 7);
	sr_st_be16(w->reason, m->reason);
	memcpy(w->ari, m->ari, sizeof(w->ari));
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

static void rtu_decode(struct sr_cm_rtu *m, const struct sr_cm_rtu_wire *w)
{
	m->local_comm_id = sr_ld_be32(w->local_comm_id);
	m->remote_comm_id = sr_ld_be32(w->remote_comm_id);
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void rtu_encode(const struct sr_cm_rtu *m, struct sr_cm_rtu_wire *w)
{
	sr_st_be32(w->local_comm_id, m->local_comm_id);
	sr_st_be32(w->remote_comm_id, m->remote_comm_id);
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

static void dreq_decode(struct sr_cm_dreq *m, const struct sr_cm_dreq_wire *w)
{
	m->local_comm_id = sr_ld_be32(w->local_comm_id);
	m->remote_comm_id = sr_ld_be32(w->remote_comm_id);
	m->remote_qpn = hi24(w->remote_qpn);
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void dreq_encode(const struct sr_cm_dreq *m, struct sr_cm_dreq_wire *w)
{
	sr_st_be32(w->local_comm_id, m->local_comm_id);
	sr_st_be32(w->remote_comm_id, m->remote_comm_id);
	st24_8(w->remote_qpn, m->remote_qpn, 0);
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

static void sidr_req_decode(struct sr_cm_sidr_req *m, const struct sr_cm_sidr_req_wire *w)
{
	m->request_id = sr_ld_be32(w->request_id);
	m->pkey = sr_ld_be16(w->pkey);
	m->service_id = sr_ld_be64(w->service_id);
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void sidr_req_encode(const struct sr_cm_sidr_req *m, struct sr_cm_sidr_req_wire *w)
{
	sr_st_be32(w->request_id, m->request_id);
	sr_st_be16(w->pkey, m->pkey);
	sr_st_be64(w->service_id, m->service_id);
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

static void sidr_rep_decode(struct sr_cm_sidr_rep *m, const struct sr_cm_sidr_rep_wire *w)
{
	m->request_id = sr_ld_be32(w->request_id);
	m->status = w->status;
	m->info_len = w->info_len;
	m->qpn = hi24(w->qpn);
	m->service_id = sr_ld_be64(w->service_id);
	m->qkey = sr_ld_be32(w->qkey);
	memcpy(m->info, w->info, sizeof(m->info));
	memcpy(m->pdata, w->pdata, sizeof(m->pdata));
}

static void sidr_rep_encode(const struct sr_cm_sidr_rep *m, struct sr_cm_sidr_rep_wire *w)
{
	sr_st_be32(w->request_id, m->request_id);
	w->status = m->status;
	w->info_len = m->info_len;
	st24_8(w->qpn, m->qpn, 0);
	sr_st_be64(w->service_id, m->service_id);
	sr_st_be32(w->qkey, m->qkey);
	memcpy(w->info, m->info, sizeof(w->info));
	memcpy(w->pdata, m->pdata, sizeof(w->pdata));
}

int sr_cm_mad_decode(struct sr_cm_mad *m, const uint8_t *buf, size_t len)
{
	const void *d = buf + SR_MAD_HDR_LEN;

	memset(m, 0, sizeof(*m));
	if (len != SR_MAD_LEN)
		return SR_MAD_EBADLEN;
	sr_mad_hdr_decode(&m->hdr, buf);
	if (m->hdr.base_version != SR_MAD_BASE_VERSION || m->hdr.mgmt_class != SR_MAD_CLASS_CM ||
	    m->hdr.class_version != SR_MAD_CM_CLASS_VERSION)
		return SR_MAD_ENOTCM;
	switch (m->hdr.attr_id) {
	case SR_CM_ATTR_REQ: req_decode(&m->req, d); break;
	case SR_CM_ATTR_MRA: mra_decode(&m->mra, d); break;
	case SR_CM_ATTR_REJ: rej_decode(&m->rej, d); break;
	case SR_CM_ATTR_REP: rep_decode(&m->rep, d); break;
	case SR_CM_ATTR_RTU: rtu_decode(&m->rtu, d); break;
	case SR_CM_ATTR_DREQ: dreq_decode(&m->dreq, d); break;
	case SR_CM_ATTR_DREP: rtu_decode(&m->drep, d); break;
	case SR_CM_ATTR_SIDR_REQ: sidr_req_decode(&m->sidr_req, d); break;
	case SR_CM_ATTR_SIDR_REP: sidr_rep_decode(&m->sidr_rep, d); break;
	default: return SR_MAD_EATTR;
	}
	return 0;
}

int sr_cm_mad_encode(const struct sr_cm_mad *m, uint8_t *buf)
{
	void *d = buf + SR_MAD_HDR_LEN;

	memset(buf, 0, SR_MAD_LEN);
	sr_mad_hdr_encode(&m->hdr, buf);
	switch (m->hdr.attr_id) {
	case SR_CM_ATTR_REQ: req_encode(&m->req, d); break;
	case SR_CM_ATTR_MRA: mra_encode(&m->mra, d); break;
	case SR_CM_ATTR_REJ: rej_encode(&m->rej, d); break;
	case SR_CM_ATTR_REP: rep_encode(&m->rep, d); break;
	case SR_CM_ATTR_RTU: rtu_encode(&m->rtu, d); break;
	case SR_CM_ATTR_DREQ: dreq_encode(&m->dreq, d); break;
	case SR_CM_ATTR_DREP: rtu_encode(&m->drep, d); break;
	case SR_CM_ATTR_SIDR_REQ: sidr_req_encode(&m->sidr_req, d); break;
	case SR_CM_ATTR_SIDR_REP: sidr_rep_encode(&m->sidr_rep, d); break;
	default: return -1;
	}
	return 0;
}

const char *sr_cm_attr_name(uint16_t attr_id)
{
	switch (attr_id) {
	case SR_CM_ATTR_CLASS_PORT_INFO: return "ClassPortInfo";
	case SR_CM_ATTR_REQ: return "REQ";
	case SR_CM_ATTR_MRA: return "MRA";
	case SR_CM_ATTR_REJ: return "REJ";
	case SR_CM_ATTR_REP: return "REP";
	case SR_CM_ATTR_RTU: return "RTU";
	case SR_CM_ATTR_DREQ: return "DREQ";
	case SR_CM_ATTR_DREP: return "DREP";
	case SR_CM_ATTR_SIDR_REQ: return "SIDR_REQ";
	case SR_CM_ATTR_SIDR_REP: return "SIDR_REP";
	case SR_CM_ATTR_LAP: return "LAP";
	case SR_CM_ATTR_APR: return "APR";
	default: return "?";
	}
}

int sr_cma_hdr_decode(struct sr_cma_hdr *h, const uint8_t *pdata)
{
	const struct sr_cma_hdr_wire *w = (const void *)pdata;

	h->version = w->version;
	h->ip_version = bits8(w->ip_version, 0, 4);
	h->port = sr_ld_be16(w->port);
	memcpy(h->src_addr, w->src_addr, 16);
	memcpy(h->dst_addr, w->dst_addr, 16);
	return h->version == 0 && (h->ip_version == 4 || h->ip_version == 6) ? 0 : -1;
}

void sr_cma_hdr_encode(const struct sr_cma_hdr *h, uint8_t *pdata)
{
	struct sr_cma_hdr_wire *w = (void *)pdata;

	w->version = h->version;
	w->ip_version = put8(h->ip_version, 0, 4);
	sr_st_be16(w->port, h->port);
	memcpy(w->src_addr, h->src_addr, 16);
	memcpy(w->dst_addr, h->dst_addr, 16);
}

/* TC 8 / SL 4 / FL 20 in one be32 word (ClassPortInfo's Redirect* and Trap* paths). */
static void tcslfl_decode(const uint8_t *p, uint8_t *tc, uint8_t *sl, uint32_t *fl)
{
	uint32_t v = sr_ld_be32(p);

	*tc = (uint8_t)(v >> 24);
	*sl = (uint8_t)((v >> 20) & 0xf);
	*fl = v & 0xfffff;
}

static void tcslfl_encode(uint8_t *p, uint8_t tc, uint8_t sl, uint32_t fl)
{
	sr_st_be32(p, (uint32_t)tc << 24 | (uint32_t)(sl & 0xf) << 20 | (fl & 0xfffff));
}

void sr_class_port_info_decode(struct sr_class_port_info *c, const uint8_t *b)
{
	uint32_t v = sr_ld_be32(b + 4);

	memset(c, 0, sizeof(*c));
	c->base_version = b[0];
	c->class_version = b[1];
	c->capability_mask = sr_ld_be16(b + 2);
	c->capability_mask2 = v >> 5;
	c->resp_time_value = v & 0x1f;
	memcpy(c->redirect_gid, b + 8, 16);
	tcslfl_decode(b + 24, &c->redirect_tc, &c->redirect_sl, &c->redirect_fl);
	c->redirect_lid = sr_ld_be16(b + 28);
	c->redirect_pkey = sr_ld_be16(b + 30);
	c->redirect_qp = sr_ld_be32(b + 32) & 0xffffff;
	c->redirect_qkey = sr_ld_be32(b + 36);
	memcpy(c->trap_gid, b + 40, 16);
	tcslfl_decode(b + 56, &c->trap_tc, &c->trap_sl, &c->trap_fl);
	c->trap_lid = sr_ld_be16(b + 60);
	c->trap_pkey = sr_ld_be16(b + 62);
	c->trap_hl = b[64];
	c->trap_qp = sr_ld_be32(b + 64) & 0xffffff;
	c->trap_qkey = sr_ld_be32(b + 68);
}

void sr_class_port_info_encode(const struct sr_class_port_info *c, uint8_t *b)
{
	memset(b, 0, SR_CLASS_PORT_INFO_LEN);
	b[0] = c->base_version;
	b[1] = c->class_version;
	sr_st_be16(b + 2, c->capability_mask);
	sr_st_be32(b + 4, (c->capability_mask2 & 0x7ffffff) << 5 | (c->resp_time_value & 0x1f));
	memcpy(b + 8, c->redirect_gid, 16);
	tcslfl_encode(b + 24, c->redirect_tc, c->redirect_sl, c->redirect_fl);
	sr_st_be16(b + 28, c->redirect_lid);
	sr_st_be16(b + 30, c->redirect_pkey);
	sr_st_be32(b + 32, c->redirect_qp & 0xffffff);
	sr_st_be32(b + 36, c->redirect_qkey);
	memcpy(b + 40, c->trap_gid, 16);
	tcslfl_encode(b + 56, c->trap_tc, c->trap_sl, c->trap_fl);
	sr_st_be16(b + 60, c->trap_lid);
	sr_st_be16(b + 62, c->trap_pkey);
	sr_st_be32(b + 64, (uint32_t)c->trap_hl << 24 | (c->trap_qp & 0xffffff));
	sr_st_be32(b + 68, c->trap_qkey);
}
