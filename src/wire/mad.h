/* SPDX-License-Identifier: MIT */
/*
 * Management datagrams (IBA vol 1, ch. 13.4) and the Communication Manager's messages (ch. 12.6,
 * management class 0x07, class version 2), as the kernel's rdma_cm and every RoCE stack send
 * them: a 256-byte MAD in a UD SEND_ONLY to QP1 (the GSI QP), Q_Key 0x80010000, default P_Key.
 * Byte layout: docs/cm.md ("The IB CM on the wire").
 *
 * One packed struct of bytes per message, each with a _Static_assert on its size; every field,
 * bit fields included, is read and written only through the decode/encode functions below,
 * which own byte order and bit positions (IBA numbers bits from the most significant bit of a
 * big-endian word). The decoded form (struct sr_cm_mad) holds every field the IBA defines,
 * reserved ones excluded: encode(decode(m)) is byte-exact for a MAD whose reserved bits are 0.
 * Pure code: this directory includes nothing of the project.
 */
#ifndef SR_WIRE_MAD_H
#define SR_WIRE_MAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	SR_MAD_LEN = 256,
	SR_MAD_HDR_LEN = 24,
	SR_MAD_DATA_LEN = SR_MAD_LEN - SR_MAD_HDR_LEN,	/* 232: a CM message body */
	SR_CMA_HDR_LEN = 36,				/* rdma_cm's header in REQ/SIDR_REQ data */
};

#define SR_GSI_QPN 1
#define SR_GSI_QKEY 0x80010000u		/* IBA 13.5.3.1: the well-known Q_Key of QP1 */
#define SR_DEFAULT_PKEY 0xffff		/* IBA 10.9.1.2: full member of the default partition */

#define SR_MAD_BASE_VERSION 1
#define SR_MAD_CLASS_CM 0x07
#define SR_MAD_CM_CLASS_VERSION 2

/* Methods (IBA 13.4.5): the CM uses Send for every message (12.6.1). */
#define SR_MAD_METHOD_GET 0x01
#define SR_MAD_METHOD_SET 0x02
#define SR_MAD_METHOD_SEND 0x03
#define SR_MAD_METHOD_RESP 0x80		/* the R bit */

/* CM attribute IDs (IBA table 104). */
enum sr_cm_attr {
	SR_CM_ATTR_CLASS_PORT_INFO = 0x0001,
	SR_CM_ATTR_REQ = 0x0010,
	SR_CM_ATTR_MRA = 0x0011,
	SR_CM_ATTR_REJ = 0x0012,
	SR_CM_ATTR_REP = 0x0013,
	SR_CM_ATTR_RTU = 0x0014,
	SR_CM_ATTR_DREQ = 0x0015,
	SR_CM_ATTR_DREP = 0x0016,
	SR_CM_ATTR_SIDR_REQ = 0x0017,
	SR_CM_ATTR_SIDR_REP = 0x0018,
	SR_CM_ATTR_LAP = 0x0019,
	SR_CM_ATTR_APR = 0x001a,
};

/* Private data sizes of each message (IBA 12.6; rdma_cm takes SR_CMA_HDR_LEN of REQ/SIDR_REQ). */
enum {
	SR_CM_REQ_PDATA = 92,
	SR_CM_MRA_PDATA = 222,
	SR_CM_REJ_ARI = 72,
	SR_CM_REJ_PDATA = 148,
	SR_CM_REP_PDATA = 196,
	SR_CM_RTU_PDATA = 224,
	SR_CM_DREQ_PDATA = 220,
	SR_CM_DREP_PDATA = 224,
	SR_CM_SIDR_REQ_PDATA = 216,
	SR_CM_SIDR_REP_INFO = 72,
	SR_CM_SIDR_REP_PDATA = 136,
};

/* "Message MRAed" / "message rejected" values (IBA 12.6.6, 12.6.7). */
#define SR_CM_MSG_REQ 0
#define SR_CM_MSG_REP 1
#define SR_CM_MSG_OTHER 2

/* REJ reasons (IBA table 112), the ones rdma_cm gives or reports. */
enum sr_cm_rej_reason {
	SR_CM_REJ_NO_QP = 1,
	SR_CM_REJ_NO_EEC = 2,
	SR_CM_REJ_NO_RESOURCES = 3,
	SR_CM_REJ_TIMEOUT = 4,
	SR_CM_REJ_UNSUPPORTED = 5,
	SR_CM_REJ_INVALID_COMM_ID = 6,
	SR_CM_REJ_INVALID_COMM_INSTANCE = 7,
	SR_CM_REJ_INVALID_SERVICE_ID = 8,
	SR_CM_REJ_INVALID_TRANSPORT_TYPE = 9,
	SR_CM_REJ_STALE_CONN = 10,
	SR_CM_REJ_RDC_NOT_EXIST = 11,
	SR_CM_REJ_INVALID_GID = 12,
	SR_CM_REJ_INVALID_LID = 13,
	SR_CM_REJ_INVALID_SL = 14,
	SR_CM_REJ_INVALID_TRAFFIC_CLASS = 15,
	SR_CM_REJ_INVALID_HOP_LIMIT = 16,
	SR_CM_REJ_INVALID_PACKET_RATE = 17,
	SR_CM_REJ_INVALID_ALT_GID = 18,
	SR_CM_REJ_INVALID_ALT_LID = 19,
	SR_CM_REJ_INVALID_ALT_SL = 20,
	SR_CM_REJ_INVALID_ALT_TRAFFIC_CLASS = 21,
	SR_CM_REJ_INVALID_ALT_HOP_LIMIT = 22,
	SR_CM_REJ_INVALID_ALT_PACKET_RATE = 23,
	SR_CM_REJ_PORT_CM_REDIRECT = 24,
	SR_CM_REJ_PORT_REDIRECT = 25,
	SR_CM_REJ_INVALID_MTU = 26,
	SR_CM_REJ_INSUFFICIENT_RESP_RESOURCES = 27,
	SR_CM_REJ_CONSUMER_DEFINED = 28,
	SR_CM_REJ_INVALID_RNR_RETRY = 29,
	SR_CM_REJ_DUPLICATE_LOCAL_COMM_ID = 30,
	SR_CM_REJ_INVALID_CLASS_VERSION = 31,
	SR_CM_REJ_INVALID_FLOW_LABEL = 32,
	SR_CM_REJ_INVALID_ALT_FLOW_LABEL = 33,
	SR_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED = 35,
};

/* SIDR_REP status (IBA table 120). */
enum sr_cm_sidr_status {
	SR_CM_SIDR_SUCCESS = 0,
	SR_CM_SIDR_UNSUPPORTED = 1,	/* service ID not supported */
	SR_CM_SIDR_REJECT = 2,
	SR_CM_SIDR_NO_QP = 3,
	SR_CM_SIDR_REDIRECT = 4,
	SR_CM_SIDR_UNSUPPORTED_VERSION = 5,
};

/* REQ transport service type (IBA 12.6.5) and extended transport type (XRC: 1). */
#define SR_CM_TST_RC 0
#define SR_CM_TST_UC 1
#define SR_CM_TST_RD 2
#define SR_CM_EXT_XRC 1

/* rdma_cm's service IDs: 0x0000000001 PS PORT, PS the port space (RDMA_PS_TCP 0x0106, ...). */
static inline uint64_t sr_cm_service_id(uint16_t ps, uint16_t port)
{
	return ((uint64_t)ps << 16) | port;
}

/* ---- wire structs: bytes only ---------------------------------------------------------- */

struct sr_mad_hdr_wire {
	uint8_t base_version;
	uint8_t mgmt_class;
	uint8_t class_version;
	uint8_t method;			/* R(1) Method(7) */
	uint8_t status[2];
	uint8_t class_specific[2];
	uint8_t tid[8];
	uint8_t attr_id[2];
	uint8_t resv[2];
	uint8_t attr_mod[4];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_mad_hdr_wire) == SR_MAD_HDR_LEN, "MAD header is 24 bytes");

/* A path in a REQ (primary, alternate): IBA table 106, bytes 52-95 / 96-139. */
struct sr_cm_path_wire {
	uint8_t local_lid[2];
	uint8_t remote_lid[2];
	uint8_t local_gid[16];
	uint8_t remote_gid[16];
	uint8_t flow_rate[4];		/* FlowLabel(20) resv(6) PacketRate(6) */
	uint8_t traffic_class;
	uint8_t hop_limit;
	uint8_t sl_subnet;		/* SL(4) SubnetLocal(1) resv(3) */
	uint8_t ack_timeout;		/* LocalAckTimeout(5) resv(3); in the alternate path of
					 * a REQ, bit 5 is SAP Supported */
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_path_wire) == 44, "REQ path is 44 bytes");

struct sr_cm_req_wire {
	uint8_t local_comm_id[4];
	uint8_t resv4[4];
	uint8_t service_id[8];
	uint8_t local_ca_guid[8];
	uint8_t resv24[4];
	uint8_t local_qkey[4];
	uint8_t qpn_rres[4];		/* LocalQPN(24) ResponderResources(8) */
	uint8_t eecn_idepth[4];		/* LocalEECN(24) InitiatorDepth(8) */
	uint8_t reecn_misc[4];		/* RemoteEECN(24) RemoteCMRespTimeout(5) TST(2) E2EFC(1) */
	uint8_t psn_misc[4];		/* StartingPSN(24) LocalCMRespTimeout(5) RetryCount(3) */
	uint8_t pkey[2];
	uint8_t mtu_rnr;		/* PathMTU(4) RDCExists(1) RNRRetryCount(3) */
	uint8_t maxret_srq;		/* MaxCMRetries(4) SRQ(1) ExtTransportType(3) */
	struct sr_cm_path_wire primary, alternate;
	uint8_t pdata[SR_CM_REQ_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_req_wire) == SR_MAD_DATA_LEN, "REQ is 232 bytes");

struct sr_cm_mra_wire {
	uint8_t local_comm_id[4];
	uint8_t remote_comm_id[4];
	uint8_t msg_mraed;		/* MessageMRAed(2) resv(6) */
	uint8_t service_timeout;	/* ServiceTimeout(5) resv(3) */
	uint8_t pdata[SR_CM_MRA_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_mra_wire) == SR_MAD_DATA_LEN, "MRA is 232 bytes");

struct sr_cm_rej_wire {
	uint8_t local_comm_id[4];
	uint8_t remote_comm_id[4];
	uint8_t msg_rejected;		/* MessageRejected(2) resv(6) */
	uint8_t ari_len;		/* RejectedInfoLength(7) resv(1) */
	uint8_t reason[2];
	uint8_t ari[SR_CM_REJ_ARI];
	uint8_t pdata[SR_CM_REJ_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_rej_wire) == SR_MAD_DATA_LEN, "REJ is 232 bytes");

struct sr_cm_rep_wire {
	uint8_t local_comm_id[4];
	uint8_t remote_comm_id[4];
	uint8_t local_qkey[4];
	uint8_t local_qpn[4];		/* LocalQPN(24) resv(8) */
	uint8_t local_eecn[4];		/* LocalEECN(24) resv(8) */
	uint8_t psn[4];			/* StartingPSN(24) resv(8) */
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t misc;			/* TargetAckDelay(5) FailoverAccepted(2) E2EFC(1) */
	uint8_t rnr_srq;		/* RNRRetryCount(3) SRQ(1) resv(4) */
	uint8_t local_ca_guid[8];
	uint8_t pdata[SR_CM_REP_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_rep_wire) == SR_MAD_DATA_LEN, "REP is 232 bytes");

/* RTU and DREP share a layout: the two communication IDs and 224 bytes of private data. */
struct sr_cm_rtu_wire {
	uint8_t local_comm_id[4];
	uint8_t remote_comm_id[4];
	uint8_t pdata[SR_CM_RTU_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_rtu_wire) == SR_MAD_DATA_LEN, "RTU/DREP is 232 bytes");

struct sr_cm_dreq_wire {
	uint8_t local_comm_id[4];
	uint8_t remote_comm_id[4];
	uint8_t remote_qpn[4];		/* RemoteQPN/EECN(24) resv(8) */
	uint8_t pdata[SR_CM_DREQ_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_dreq_wire) == SR_MAD_DATA_LEN, "DREQ is 232 bytes");

struct sr_cm_sidr_req_wire {
	uint8_t request_id[4];
	uint8_t pkey[2];
	uint8_t resv6[2];
	uint8_t service_id[8];
	uint8_t pdata[SR_CM_SIDR_REQ_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_sidr_req_wire) == SR_MAD_DATA_LEN, "SIDR_REQ is 232 bytes");

struct sr_cm_sidr_rep_wire {
	uint8_t request_id[4];
	uint8_t status;
	uint8_t info_len;
	uint8_t resv6[2];
	uint8_t qpn[4];			/* QPN(24) resv(8) */
	uint8_t service_id[8];
	uint8_t qkey[4];
	uint8_t info[SR_CM_SIDR_REP_INFO];
	uint8_t pdata[SR_CM_SIDR_REP_PDATA];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cm_sidr_rep_wire) == SR_MAD_DATA_LEN, "SIDR_REP is 232 bytes");

/* rdma_cm's private-data header (the kernel's cma_hdr), first in REQ and SIDR_REQ data of the
 * IP port spaces: an IPv4 address sits in the last 4 bytes of its 16. */
struct sr_cma_hdr_wire {
	uint8_t version;		/* 0 */
	uint8_t ip_version;		/* IPVersion(4) resv(4): 4 or 6 */
	uint8_t port[2];		/* the requester's (source) port */
	uint8_t src_addr[16];
	uint8_t dst_addr[16];
} __attribute__((packed));
_Static_assert(sizeof(struct sr_cma_hdr_wire) == SR_CMA_HDR_LEN, "cma_hdr is 36 bytes");

/* ---- decoded form -------------------------------------------------------------------- */

struct sr_mad_hdr {
	uint8_t base_version, mgmt_class, class_version, method;
	uint16_t status, class_specific;
	uint64_t tid;
	uint16_t attr_id;
	uint32_t attr_mod;
};

struct sr_cm_path {
	uint16_t local_lid, remote_lid;
	uint8_t local_gid[16], remote_gid[16];
	uint32_t flow_label;		/* 20 bits */
	uint8_t packet_rate;		/* 6 bits */
	uint8_t traffic_class, hop_limit;
	uint8_t sl;			/* 4 bits */
	bool subnet_local;
	uint8_t local_ack_timeout;	/* 5 bits */
};

struct sr_cm_req {
	uint32_t local_comm_id;
	uint64_t service_id, local_ca_guid;
	uint32_t local_qkey;
	uint32_t local_qpn;		/* 24 bits */
	uint8_t responder_resources;
	uint32_t local_eecn;		/* 24 bits */
	uint8_t initiator_depth;
	uint32_t remote_eecn;		/* 24 bits */
	uint8_t remote_cm_response_timeout;	/* 5 bits: 4.096 us * 2^n */
	uint8_t transport_service_type;	/* 2 bits: SR_CM_TST_* */
	bool e2e_flow_control;
	uint32_t starting_psn;		/* 24 bits */
	uint8_t local_cm_response_timeout;	/* 5 bits */
	uint8_t retry_count;		/* 3 bits */
	uint16_t pkey;
	uint8_t path_mtu;		/* 4 bits: IBV_MTU_* */
	bool rdc_exists;
	uint8_t rnr_retry_count;	/* 3 bits */
	uint8_t max_cm_retries;		/* 4 bits */
	bool srq;
	uint8_t ext_transport_type;	/* 3 bits: SR_CM_EXT_XRC */
	struct sr_cm_path primary, alternate;
	bool sap_supported;
	uint8_t pdata[SR_CM_REQ_PDATA];
};

struct sr_cm_mra {
	uint32_t local_comm_id, remote_comm_id;
	uint8_t msg_mraed;		/* 2 bits: SR_CM_MSG_* */
	uint8_t service_timeout;	/* 5 bits */
	uint8_t pdata[SR_CM_MRA_PDATA];
};

struct sr_cm_rej {
	uint32_t local_comm_id, remote_comm_id;
	uint8_t msg_rejected;		/* 2 bits: SR_CM_MSG_* */
	uint8_t ari_len;		/* 7 bits */
	uint16_t reason;
	uint8_t ari[SR_CM_REJ_ARI];
	uint8_t pdata[SR_CM_REJ_PDATA];
};

struct sr_cm_rep {
	uint32_t local_comm_id, remote_comm_id;
	uint32_t local_qkey;
	uint32_t local_qpn, local_eecn, starting_psn;	/* 24 bits each */
	uint8_t responder_resources, initiator_depth;
	uint8_t target_ack_delay;	/* 5 bits */
	uint8_t failover_accepted;	/* 2 bits */
	bool e2e_flow_control;
	uint8_t rnr_retry_count;	/* 3 bits */
	bool srq;
	uint64_t local_ca_guid;
	uint8_t pdata[SR_CM_REP_PDATA];
};

/* RTU and DREP */
struct sr_cm_rtu {
	uint32_t local_comm_id, remote_comm_id;
	uint8_t pdata[SR_CM_RTU_PDATA];
};

struct sr_cm_dreq {
	uint32_t local_comm_id, remote_comm_id;
	uint32_t remote_qpn;		/* 24 bits */
	uint8_t pdata[SR_CM_DREQ_PDATA];
};

struct sr_cm_sidr_req {
	uint32_t request_id;
	uint16_t pkey;
	uint64_t service_id;
	uint8_t pdata[SR_CM_SIDR_REQ_PDATA];
};

struct sr_cm_sidr_rep {
	uint32_t request_id;
	uint8_t status, info_len;
	uint32_t qpn;			/* 24 bits */
	uint64_t service_id;
	uint32_t qkey;
	uint8_t info[SR_CM_SIDR_REP_INFO];
	uint8_t pdata[SR_CM_SIDR_REP_PDATA];
};

/* A CM MAD: the header, and the message its attribute ID names. */
struct sr_cm_mad {
	struct sr_mad_hdr hdr;
	union {
		struct sr_cm_req req;
		struct sr_cm_mra mra;
		struct sr_cm_rej rej;
		struct sr_cm_rep rep;
		struct sr_cm_rtu rtu;
		struct sr_cm_rtu drep;
		struct sr_cm_dreq dreq;
		struct sr_cm_sidr_req sidr_req;
		struct sr_cm_sidr_rep sidr_rep;
	};
};

struct sr_cma_hdr {
	uint8_t version;
	uint8_t ip_version;		/* 4 or 6 */
	uint16_t port;
	uint8_t src_addr[16], dst_addr[16];	/* IPv4: in bytes 12-15 */
};

/* Errors of sr_cm_mad_decode(). */
#define SR_MAD_EBADLEN (-1)		/* not 256 bytes */
#define SR_MAD_ENOTCM (-2)		/* another base version, class or class version */
#define SR_MAD_EATTR (-3)		/* an attribute the CM does not decode (LAP, APR, ...) */

/* The common MAD header alone (any class). */
void sr_mad_hdr_decode(struct sr_mad_hdr *h, const uint8_t *buf);
void sr_mad_hdr_encode(const struct sr_mad_hdr *h, uint8_t *buf);
/* Decodes a CM MAD of len bytes into *m: 0 or an SR_MAD_E* error (m->hdr is set whenever
 * len is 256, so a caller can answer an unsupported attribute). */
int sr_cm_mad_decode(struct sr_cm_mad *m, const uint8_t *buf, size_t len);
/* Encodes *m into buf[SR_MAD_LEN] (reserved fields zero); -1 for an attribute it does not know. */
int sr_cm_mad_encode(const struct sr_cm_mad *m, uint8_t *buf);
const char *sr_cm_attr_name(uint16_t attr_id);

/*
 * ClassPortInfo (IBA 13.4.8.1): 72 bytes a management class's agent says of itself, among them
 * where its requests should go instead (the Redirect* fields). The CM's REJ with reason 24
 * (port and CM redirect, IBA 12.6.7.2) carries one as its additional reject information, and a
 * SIDR_REP with status 4 (redirect, 12.11.2) as its additional information: the requester sends
 * its REQ (SIDR_REQ) again to RedirectGID's QP RedirectQP. Byte layout (multi-byte fields
 * big-endian): 0 BaseVersion; 1 ClassVersion; 2 CapabilityMask (16); 4 CapabilityMask2 27 /
 * RespTimeValue 5; 8 RedirectGID (16); 24 RedirectTC 8 / RedirectSL 4 / RedirectFL 20;
 * 28 RedirectLID; 30 RedirectP_Key; 32 reserved 8 / RedirectQP 24; 36 RedirectQ_Key;
 * 40 TrapGID (16); 56 TrapTC 8 / TrapSL 4 / TrapFL 20; 60 TrapLID; 62 TrapP_Key;
 * 64 TrapHL 8 / TrapQP 24; 68 TrapQ_Key.
 */
#define SR_CLASS_PORT_INFO_LEN 72
struct sr_class_port_info {
	uint8_t base_version, class_version;
	uint16_t capability_mask;
	uint32_t capability_mask2;	/* 27 bits */
	uint8_t resp_time_value;	/* 5 bits */
	uint8_t redirect_gid[16];
	uint8_t redirect_tc;
	uint8_t redirect_sl;		/* 4 bits */
	uint32_t redirect_fl;		/* 20 bits */
	uint16_t redirect_lid, redirect_pkey;
	uint32_t redirect_qp;		/* 24 bits */
	uint32_t redirect_qkey;
	uint8_t trap_gid[16];
	uint8_t trap_tc;
	uint8_t trap_sl;		/* 4 bits */
	uint32_t trap_fl;		/* 20 bits */
	uint16_t trap_lid, trap_pkey;
	uint8_t trap_hl;
	uint32_t trap_qp;		/* 24 bits */
	uint32_t trap_qkey;
};
/* From / into SR_CLASS_PORT_INFO_LEN bytes (encode zeroes the reserved byte). */
void sr_class_port_info_decode(struct sr_class_port_info *c, const uint8_t *buf);
void sr_class_port_info_encode(const struct sr_class_port_info *c, uint8_t *buf);

/* rdma_cm's header from / into the first SR_CMA_HDR_LEN bytes of a REQ or SIDR_REQ's private
 * data. decode: 0, or -1 when the version is not 0 or the IP version not 4 or 6. */
int sr_cma_hdr_decode(struct sr_cma_hdr *h, const uint8_t *pdata);
void sr_cma_hdr_encode(const struct sr_cma_hdr *h, uint8_t *pdata);

#endif /* SR_WIRE_MAD_H */
