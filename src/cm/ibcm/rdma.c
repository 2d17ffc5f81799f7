/* SPDX-License-Identifier: MIT */
/* rdma_cm's REQ over the IB CM (rdma.h). */
#include <errno.h>
#include <string.h>

#include "cm/ibcm/rdma.h"

#define TST_EXTENDED 3		/* REQ transport service type 3: see the extended type (XRC: 1) */

void ibcm_rdma_defaults(struct ibcm_rdma_conn *p)
{
	memset(p, 0, sizeof(*p));
	p->ps = IBCM_PS_TCP;
	p->qp_type = IBV_QPT_RC;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->mtu = IBV_MTU_1024;
	p->pkey = SR_DEFAULT_PKEY;
	p->remote_cm_response_timeout = 20;
	p->local_cm_response_timeout = 20;
	p->max_cm_retries = 15;
	p->local_lid = p->remote_lid = 0xffff;
	p->hop_limit = 64;
	p->local_ack_timeout = 19;
}

uint64_t ibcm_rdma_service_id(uint16_t ps, uint16_t port)
{
	return sr_cm_service_id(ps, port);
}

static bool ip_ps(uint16_t ps)
{
	return ps == IBCM_PS_TCP || ps == IBCM_PS_UDP || ps == IBCM_PS_IPOIB;
}

size_t ibcm_rdma_req_pdata_max(uint16_t ps)
{
	return SR_CM_REQ_PDATA - (ip_ps(ps) ? SR_CMA_HDR_LEN : 0);
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* An address as rdma_cm's header holds it: IPv6 whole, IPv4 in the last 4 bytes. */
static void addr16(const struct sockaddr_storage *ss, uint8_t *a)
{
	memset(a, 0, 16);
	if (ss->ss_family == AF_INET)
		memcpy(a + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	else
		memcpy(a, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
}

static void sockaddr_from16(struct sockaddr_storage *ss, int ipv, const uint8_t *a, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (ipv == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;

		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, a + 12, 4);
		s->sin_port = htons(port);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;

		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_addr, a, 16);
		s->sin6_port = htons(port);
	}
}

/* rdma_cm's header for p's addresses into pdata: 0, or -EINVAL (families differ, unknown). */
static int cma_hdr_build(uint8_t *pdata, const struct ibcm_rdma_conn *p)
{
	struct sr_cma_hdr h = { .version = 0 };

	if (p->src.ss_family != p->dst.ss_family ||
	    (p->src.ss_family != AF_INET && p->src.ss_family != AF_INET6))
		return -EINVAL;
	h.ip_version = p->src.ss_family == AF_INET ? 4 : 6;
	h.port = port_of(&p->src);
	addr16(&p->src, h.src_addr);
	addr16(&p->dst, h.dst_addr);
	sr_cma_hdr_encode(&h, pdata);
	return 0;
}

/* The addresses of rdma_cm's header in pdata into p (the destination port: the service's). */
static int cma_hdr_parse(const uint8_t *pdata, uint16_t port, struct ibcm_rdma_conn *p)
{
	struct sr_cma_hdr h;

	if (sr_cma_hdr_decode(&h, pdata))
		return -EINVAL;
	sockaddr_from16(&p->src, h.ip_version, h.src_addr, h.port);
	sockaddr_from16(&p->dst, h.ip_version, h.dst_addr, port);
	return 0;
}

static bool known_ps(uint16_t ps)
{
	return ps == IBCM_PS_TCP || ps == IBCM_PS_UDP || ps == IBCM_PS_IB || ps == IBCM_PS_IPOIB;
}

int ibcm_rdma_req_build(struct sr_cm_req *req, const struct ibcm_rdma_conn *p)
{
	size_t off = 0;

	if (p->pdata_len > ibcm_rdma_req_pdata_max(p->ps) || (p->pdata_len && !p->pdata))
		return -EINVAL;
	if (!known_ps(p->ps))
		return -EINVAL;
	memset(req, 0, sizeof(*req));
	switch (p->qp_type) {
	case IBV_QPT_RC:
		req->transport_service_type = SR_CM_TST_RC;
		break;
	case IBV_QPT_UC:
		req->transport_service_type = SR_CM_TST_UC;
		break;
	case IBV_QPT_XRC_SEND:
		req->transport_service_type = TST_EXTENDED;
		req->ext_transport_type = SR_CM_EXT_XRC;
		break;
	default:
		return -EINVAL;
	}
	if (ip_ps(p->ps)) {
		if (cma_hdr_build(req->pdata, p))
			return -EINVAL;
		off = SR_CMA_HDR_LEN;
	}
	if (p->pdata_len)
		memcpy(req->pdata + off, p->pdata, p->pdata_len);
	/* the destination port names the service; the IB port space takes it from the address
	 * too (rdma_cm's AF_IB would carry a whole service ID: not supported) */
	req->service_id = ibcm_rdma_service_id(p->ps, port_of(&p->dst));
	req->local_ca_guid = p->ca_guid;
	req->local_qpn = p->qpn & 0xffffff;
	req->responder_resources = p->responder_resources;
	req->initiator_depth = p->initiator_depth;
	req->remote_cm_response_timeout = p->remote_cm_response_timeout;
	req->starting_psn = p->psn & 0xffffff;
	req->local_cm_response_timeout = p->local_cm_response_timeout;
	req->retry_count = p->retry_count & 7;
	req->pkey = p->pkey;
	req->path_mtu = p->mtu;
	req->rnr_retry_count = p->rnr_retry_count & 7;
	req->max_cm_retries = p->max_cm_retries;
	req->srq = p->srq;
	req->primary.local_lid = p->local_lid;
	req->primary.remote_lid = p->remote_lid;
	memcpy(req->primary.local_gid, p->sgid.raw, 16);
	memcpy(req->primary.remote_gid, p->dgid.raw, 16);
	req->primary.flow_label = p->flow_label;
	req->primary.packet_rate = p->packet_rate;
	req->primary.traffic_class = p->traffic_class;
	req->primary.hop_limit = p->hop_limit;
	req->primary.sl = p->sl;
	req->primary.local_ack_timeout = p->local_ack_timeout;
	return 0;
}

int ibcm_rdma_req_parse(const struct sr_cm_req *req, struct ibcm_rdma_conn *p)
{
	uint16_t ps = (uint16_t)(req->service_id >> 16), port = (uint16_t)req->service_id;

	memset(p, 0, sizeof(*p));
	if (req->service_id >> 32 || !known_ps(ps))
		return -EINVAL;
	p->ps = ps;
	if (req->transport_service_type == SR_CM_TST_RC)
		p->qp_type = IBV_QPT_RC;
	else if (req->transport_service_type == SR_CM_TST_UC)
		p->qp_type = IBV_QPT_UC;
	else if (req->transport_service_type == TST_EXTENDED &&
		 req->ext_transport_type == SR_CM_EXT_XRC)
		p->qp_type = IBV_QPT_XRC_RECV;	/* the passive side's half of XRC */
	else
		return -EINVAL;
	if (ip_ps(ps)) {
		if (cma_hdr_parse(req->pdata, port, p))
			return -EINVAL;
		p->pdata = req->pdata + SR_CMA_HDR_LEN;
	} else {
		p->pdata = req->pdata;
	}
	p->pdata_len = (uint8_t)ibcm_rdma_req_pdata_max(ps);	/* the IB CM does not say less */
	p->ca_guid = req->local_ca_guid;
	p->qpn = req->local_qpn;
	p->psn = req->starting_psn;
	p->responder_resources = req->responder_resources;
	p->initiator_depth = req->initiator_depth;
	p->retry_count = req->retry_count;
	p->rnr_retry_count = req->rnr_retry_count;
	p->mtu = req->path_mtu;
	p->srq = req->srq;
	p->pkey = req->pkey;
	p->remote_cm_response_timeout = req->remote_cm_response_timeout;
	p->local_cm_response_timeout = req->local_cm_response_timeout;
	p->max_cm_retries = req->max_cm_retries;
	p->local_lid = req->primary.local_lid;
	p->remote_lid = req->primary.remote_lid;
	memcpy(p->sgid.raw, req->primary.local_gid, 16);
	memcpy(p->dgid.raw, req->primary.remote_gid, 16);
	p->flow_label = req->primary.flow_label;
	p->packet_rate = req->primary.packet_rate;
	p->traffic_class = req->primary.traffic_class;
	p->hop_limit = req->primary.hop_limit;
	p->sl = req->primary.sl;
	p->local_ack_timeout = req->primary.local_ack_timeout;
	return 0;
}

int ibcm_rdma_req_check(const struct ibcm_rdma_conn *p)
{
	if (p->mtu < IBV_MTU_256 || p->mtu > IBV_MTU_4096)
		return SR_CM_REJ_INVALID_MTU;
	return 0;
}

int ibcm_rdma_rep_build(struct sr_cm_rep *rep, const struct ibcm_rdma_conn *p)
{
	if (p->pdata_len > SR_CM_REP_PDATA || (p->pdata_len && !p->pdata))
		return -EINVAL;
	memset(rep, 0, sizeof(*rep));
	rep->local_qpn = p->qpn & 0xffffff;
	rep->starting_psn = p->psn & 0xffffff;
	rep->responder_resources = p->responder_resources;
	rep->initiator_depth = p->initiator_depth;
	rep->target_ack_delay = p->target_ack_delay & 0x1f;
	rep->rnr_retry_count = p->rnr_retry_count & 7;
	rep->srq = p->srq;
	rep->local_ca_guid = p->ca_guid;
	if (p->pdata_len)
		memcpy(rep->pdata, p->pdata, p->pdata_len);
	return 0;
}

void ibcm_rdma_rep_parse(const struct sr_cm_rep *rep, struct ibcm_rdma_conn *p)
{
	memset(p, 0, sizeof(*p));
	p->qpn = rep->local_qpn;
	p->psn = rep->starting_psn;
	p->responder_resources = rep->responder_resources;
	p->initiator_depth = rep->initiator_depth;
	p->target_ack_delay = rep->target_ack_delay;
	p->rnr_retry_count = rep->rnr_retry_count;
	p->srq = rep->srq;
	p->ca_guid = rep->local_ca_guid;
	p->pdata = rep->pdata;
	p->pdata_len = SR_CM_REP_PDATA;
}

int ibcm_rdma_sidr_req_build(struct sr_cm_sidr_req *r, const struct ibcm_rdma_conn *p)
{
	size_t off = ip_ps(p->ps) ? SR_CMA_HDR_LEN : 0;

	if (!known_ps(p->ps) || p->pdata_len > SR_CM_SIDR_REQ_PDATA - off ||
	    (p->pdata_len && !p->pdata))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	if (off && cma_hdr_build(r->pdata, p))
		return -EINVAL;
	if (p->pdata_len)
		memcpy(r->pdata + off, p->pdata, p->pdata_len);
	r->pkey = p->pkey;
	r->service_id = ibcm_rdma_service_id(p->ps, port_of(&p->dst));
	return 0;
}

int ibcm_rdma_sidr_req_parse(const struct sr_cm_sidr_req *r, struct ibcm_rdma_conn *p)
{
	uint16_t ps = (uint16_t)(r->service_id >> 16), port = (uint16_t)r->service_id;

	memset(p, 0, sizeof(*p));
	if (r->service_id >> 32 || !known_ps(ps))
		return -EINVAL;
	p->ps = ps;
	p->qp_type = IBV_QPT_UD;
	p->pkey = r->pkey;
	if (ip_ps(ps)) {
		if (cma_hdr_parse(r->pdata, port, p))
			return -EINVAL;
		p->pdata = r->pdata + SR_CMA_HDR_LEN;
		p->pdata_len = SR_CM_SIDR_REQ_PDATA - SR_CMA_HDR_LEN;
	} else {
		p->pdata = r->pdata;
		p->pdata_len = SR_CM_SIDR_REQ_PDATA;
	}
	return 0;
}

int ibcm_rdma_sidr_rep_build(struct sr_cm_sidr_rep *r, uint64_t service_id,
			     const struct ibcm_rdma_conn *p)
{
	if (p->pdata_len > SR_CM_SIDR_REP_PDATA || (p->pdata_len && !p->pdata))
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	r->status = p->sidr_status;
	r->service_id = service_id;
	/* IBA 12.11 (SIDR): QPN and Q_Key mean something only when the service was found */
	if (p->sidr_status == SR_CM_SIDR_SUCCESS) {
		r->qpn = p->qpn & 0xffffff;
		r->qkey = p->qkey;
	}
	if (p->pdata_len)
		memcpy(r->pdata, p->pdata, p->pdata_len);
	return 0;
}

void ibcm_rdma_sidr_rep_parse(const struct sr_cm_sidr_rep *r, struct ibcm_rdma_conn *p)
{
	memset(p, 0, sizeof(*p));
	p->qp_type = IBV_QPT_UD;
	p->sidr_status = r->status;
	p->qpn = r->qpn;
	p->qkey = r->qkey;
	p->pdata = r->pdata;
	p->pdata_len = SR_CM_SIDR_REP_PDATA;
}
