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

int ibcm_rdma_req_build(struct sr_cm_req *req, const struct ibcm_rdma_conn *p)
{
	size_t off = 0;

	if (p->pdata_len > ibcm_rdma_req_pdata_max(p->ps) || (p->pdata_len && !p->pdata))
		return -EINVAL;
	if (p->ps != IBCM_PS_TCP && p->ps != IBCM_PS_UDP && p->ps != IBCM_PS_IB &&
	    p->ps != IBCM_PS_IPOIB)
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
		struct sr_cma_hdr h = { .version = 0 };

		if (p->src.ss_family != p->dst.ss_family ||
		    (p->src.ss_family != AF_INET && p->src.ss_family != AF_INET6))
			return -EINVAL;
		h.ip_version = p->src.ss_family == AF_INET ? 4 : 6;
		h.port = port_of(&p->src);
		addr16(&p->src, h.src_addr);
		addr16(&p->dst, h.dst_addr);
		sr_cma_hdr_encode(&h, req->pdata);
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
	if (req->service_id >> 32 ||
	    (ps != IBCM_PS_TCP && ps != IBCM_PS_UDP && ps != IBCM_PS_IB && ps != IBCM_PS_IPOIB))
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
		struct sr_cma_hdr h;

		if (sr_cma_hdr_decode(&h, req->pdata))
			return -EINVAL;
		sockaddr_from16(&p->src, h.ip_version, h.src_addr, h.port);
		sockaddr_from16(&p->dst, h.ip_version, h.dst_addr, port);
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
