/* SPDX-License-Identifier: MIT */
/*
 * The CM wire protocol, behind one boundary (docs/cm.md): a decoded message (struct cm_msg)
 * and its encoding in a UDP datagram. Nothing outside proto.c knows the byte layout, so a
 * later step can swap in the IB CM MADs (on QP1, as the kernel's rdma_cm speaks over RoCEv2)
 * without touching the state machines.
 *
 * Every datagram starts with a versioned header:
 *
 *   0  'S' 'C'   magic
 *   2  version   1
 *   3  type      enum cm_msg_type
 *   4  be32      sender's communication id
 *   8  be32      receiver's communication id (0 in REQ, SIDR REQ)
 *  12  be16      port space (RDMA_PS_*)
 *  14  be16      sender's rdma_cm port
 *  16  be16      receiver's rdma_cm port (the service, in REQ)
 *  18  u8        private data length
 *  19  u8        flags (0; reserved)
 *  20  be32      reserved (0)
 *  24  body (per type, fixed size), then the private data
 *
 * Body of REQ, REP, SIDR REQ, SIDR REP (48 bytes): GID (16), be32 QPN, be32 start PSN, be32
 * Q_Key, then one byte each: MTU, responder resources, initiator depth, retry count, RNR retry
 * count, flow control, SRQ, QP type (enum ibv_qp_type of the sender's QP; XRC: a REQ from an
 * XRC_SEND QP is answered by a REP from an XRC_RECV one; 0 in a REP of an older softrdma);
 * be32 ECE vendor, be32 ECE options, u8 status, u8 large segment (in 4 KiB units: in a REQ
 * what the requester offers, in a REP what both will use; 0: none, the IB path MTU only), 2
 * reserved. (A peer that sends the byte as reserved, zero, gets
 * the path MTU.)
 * Body of REJ (4 bytes): be16 reason, 2 reserved. Body of QP1 REPLY (16 bytes): the GID of
 * the QP1 that takes CM MADs for the port asked about. Other types have no body.
 *
 * Reserved fields are sent as zero and ignored on receipt; a receiver drops (and counts) a
 * datagram with another magic or version, an unknown type, or a length that disagrees.
 */
#ifndef SR_CM_PROTO_H
#define SR_CM_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define CM_PROTO_VERSION 1
#define CM_HDR_LEN 24
#define CM_PDATA_MAX 224	/* the largest IB CM private data (RTU, DREP) */
#define CM_MSG_MAX 320

enum cm_msg_type {
	CM_MSG_REQ = 1,
	CM_MSG_REP = 2,
	CM_MSG_RTU = 3,
	CM_MSG_REJ = 4,
	CM_MSG_DREQ = 5,
	CM_MSG_DREP = 6,
	CM_MSG_SIDR_REQ = 7,
	CM_MSG_SIDR_REP = 8,
	CM_MSG_PROBE = 9,	/* liveness of an established connection */
	CM_MSG_PROBE_ACK = 10,
	/* With the IB CM on the wire (cm_wire=ibcm), to a destination on this host only: where
	 * is the QP1 of the process listening on this port? (docs/cm.md, "Loopback") */
	CM_MSG_QP1_QUERY = 11,
	CM_MSG_QP1_REPLY = 12,	/* its GID (the port it may name included: docs/gid.md) */
	CM_MSG_TYPES
};

/* IB CM reject reasons the REJECTED event reports as its status (IBA table 112). */
#define CM_REJ_INVALID_SERVICE_ID 8	/* nobody listens there */
#define CM_REJ_INVALID_TRANSPORT 9	/* an XRC_SEND QP answered by a non-XRC one, or the reverse */
#define CM_REJ_STALE_CONN 10
#define CM_REJ_CONSUMER_DEFINED 28	/* rdma_reject() */

/* SIDR REP status (IBA 12.11.9) */
#define CM_SIDR_OK 0
#define CM_SIDR_NO_SERVICE 1
#define CM_SIDR_REJECT 2

struct cm_msg {
	uint8_t type;
	uint32_t src_id, dst_id;
	uint16_t ps, src_port, dst_port;
	/* REQ, REP, SIDR REQ, SIDR REP: the sender's data-plane endpoint */
	union ibv_gid gid;
	uint32_t qpn, psn, qkey;
	uint8_t mtu;			/* enum ibv_mtu: the sender's port MTU */
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
	uint8_t flow_control, srq, qp_type, status;
	uint8_t seg4k;			/* large segment, 4 KiB units (0: none) */
	uint16_t reason;		/* REJ */
	uint32_t ece_vendor, ece_options;
	uint8_t pdata_len;
	uint8_t pdata[CM_PDATA_MAX];
};

/* Largest private data a message of this type carries in this port space (what rdma_cm
 * leaves of the IB CM's: REQ 56 for RDMA_PS_TCP/UDP after its IP header, REP 196, ...). */
size_t cm_pdata_max(uint8_t type, uint16_t ps);
/* Encodes m into buf; returns the length or -EINVAL (private data too long for the type). */
int cm_msg_encode(const struct cm_msg *m, uint8_t *buf, size_t len);
/* Decodes a datagram; 0, or -EPROTO (not ours / other version) or -EBADMSG (malformed). */
int cm_msg_decode(struct cm_msg *m, const uint8_t *buf, size_t len);
const char *cm_msg_name(uint8_t type);

#endif /* SR_CM_PROTO_H */
