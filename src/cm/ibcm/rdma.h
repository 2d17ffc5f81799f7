/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm over the IB CM, as the kernel's rdma_cm does it (drivers/infiniband/core/cma.c's
 * behaviour, IBA annex A11 "RDMA IP CM Service"): the REQ (and SIDR_REQ) of an rdma_cm
 * connection built from the connection's parameters and parsed back. Service ID
 * 0x0000000001 PS PORT, rdma_cm's 36-byte header (sr_cma_hdr) first in the private data, the
 * user's private data after it. Used by drive.c (SOFTRDMA_CM_WIRE=ibcm, docs/cm.md).
 */
#ifndef SR_CM_IBCM_RDMA_H
#define SR_CM_IBCM_RDMA_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#include "wire/mad.h"

/* rdma_cm port spaces (enum rdma_port_space) */
#define IBCM_PS_IPOIB 0x0002
#define IBCM_PS_IB 0x013f
#define IBCM_PS_TCP 0x0106
#define IBCM_PS_UDP 0x0111

struct ibcm_rdma_conn {
	uint16_t ps;				/* port space */
	struct sockaddr_storage src, dst;	/* the rdma_cm addresses, ports included */
	union ibv_gid sgid, dgid;		/* the path's GIDs */
	enum ibv_qp_type qp_type;		/* RC, UC, XRC_SEND (XRC_RECV on the passive side) */
	uint32_t qpn;
	uint32_t psn;		/* the PSN the sender of the REQ expects to receive first */
	uint8_t responder_resources, initiator_depth;
	uint8_t retry_count, rnr_retry_count;	/* 3 bits each */
	uint8_t mtu;				/* enum ibv_mtu */
	bool srq;
	uint64_t ca_guid;
	uint16_t pkey;
	/* CM and path parameters (ibcm_rdma_defaults: the kernel's) */
	uint8_t remote_cm_response_timeout, local_cm_response_timeout, max_cm_retries;
	uint16_t local_lid, remote_lid;
	uint32_t flow_label;
	uint8_t traffic_class, hop_limit, sl, local_ack_timeout, packet_rate;
	uint8_t target_ack_delay;		/* REP (5 bits) */
	uint32_t qkey;				/* SIDR_REP: the UD QP's Q_Key */
	uint8_t sidr_status;			/* SIDR_REP: enum sr_cm_sidr_status */
	const uint8_t *pdata;			/* the user's private data */
	uint8_t pdata_len;
};

/* The kernel rdma_cm's choices for a RoCE path: CM response timeouts 20 (4.096 us x 2^20,
 * about 4.3 s), Max CM Retries 15, LIDs 0xffff (permissive: RoCE has none), P_Key 0xffff,
 * hop limit 64, local ACK timeout 19 (rxe's). */
void ibcm_rdma_defaults(struct ibcm_rdma_conn *p);
/* rdma_cm's service ID: 0 .. 0, then the port space and the port (IBA A11). */
uint64_t ibcm_rdma_service_id(uint16_t ps, uint16_t port);
/* The largest private data a REQ of this port space carries for the user. */
size_t ibcm_rdma_req_pdata_max(uint16_t ps);
/* Fills *req (REQ message body). 0, or -EINVAL: private data too long, addresses of
 * different or unknown families, an unknown QP type or port space. */
int ibcm_rdma_req_build(struct sr_cm_req *req, const struct ibcm_rdma_conn *p);
/*
 * Parses a REQ of rdma_cm into *p (pdata points into req). 0, or -EINVAL when the service ID
 * is not rdma_cm's or, in an IP port space, rdma_cm's header is missing or malformed (the
 * kernel rejects such a REQ: reason 8, invalid service ID, or 28, consumer defined).
 */
int ibcm_rdma_req_parse(const struct sr_cm_req *req, struct ibcm_rdma_conn *p);

/*
 * What a parsed REQ asks of the QP that the passive side cannot give: 0 when nothing, else the
 * IBA REJ reason (table 112). The path MTU is a 4-bit field of which only 1..5 (256..4096) name
 * an MTU; any other value would reach ibv_modify_qp as an enum ibv_mtu that does not exist, so
 * such a REQ is rejected with reason 26 (invalid path MTU) before an id is made for it.
 */
int ibcm_rdma_req_check(const struct ibcm_rdma_conn *p);

/*
 * The passive side's REP (IBA 12.6.8) from its QP: QPN, the PSN it expects to receive, depths,
 * RNR retry count, SRQ, CA GUID, target ACK delay, and the user's private data (no rdma_cm
 * header). 0, or -EINVAL (private data over 196 bytes). Parse: the same fields back (pdata
 * points into rep, all 196 bytes).
 */
int ibcm_rdma_rep_build(struct sr_cm_rep *rep, const struct ibcm_rdma_conn *p);
void ibcm_rdma_rep_parse(const struct sr_cm_rep *rep, struct ibcm_rdma_conn *p);
/*
 * SIDR for rdma_cm's UD ids (IBA 12.11): the SIDR_REQ carries the service ID and P_Key and,
 * in the IP port spaces, rdma_cm's header then the user's private data (216 bytes less the
 * header); the SIDR_REP the status, and on success the UD QP's number and Q_Key, then the
 * user's private data (136). The request ID is the CM's: the caller sets it. Build: 0 or
 * -EINVAL (private data too long, addresses as for the REQ); parse: 0 or -EINVAL (not
 * rdma_cm's service ID or header).
 */
int ibcm_rdma_sidr_req_build(struct sr_cm_sidr_req *r, const struct ibcm_rdma_conn *p);
int ibcm_rdma_sidr_req_parse(const struct sr_cm_sidr_req *r, struct ibcm_rdma_conn *p);
int ibcm_rdma_sidr_rep_build(struct sr_cm_sidr_rep *r, uint64_t service_id,
			     const struct ibcm_rdma_conn *p);
void ibcm_rdma_sidr_rep_parse(const struct sr_cm_sidr_rep *r, struct ibcm_rdma_conn *p);

#endif /* SR_CM_IBCM_RDMA_H */
