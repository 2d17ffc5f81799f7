/* SPDX-License-Identifier: MIT */
/*
 * The CM's MAD agent on one device: its QP1 (sr_priv_create_gsi_qp), receive buffers always
 * posted, CM MADs sent to a peer's QP1 and received from any. Through the public verbs API
 * only, as the rest of librdmacm. Used by drive.c (SOFTRDMA_CM_WIRE=ibcm, docs/cm.md).
 */
#ifndef SR_CM_IBCM_AGENT_H
#define SR_CM_IBCM_AGENT_H

#include <infiniband/verbs.h>

#include "wire/mad.h"

#define IBCM_AGENT_RX 256	/* receives kept posted: a burst of REQs (cmtime connects
				 * hundreds at once) lands in them until the CM thread drains */
#define IBCM_AGENT_TX 64	/* sends not yet completed */

struct ibcm_agent {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;		/* IBCM_AGENT_RX receive slots (GRH + MAD) */
	uint64_t dropped;	/* received, not a CM MAD (counted, never delivered) */
	unsigned tx_out;	/* sends posted, completion not taken yet */
	uint64_t tx_errors;	/* sends that completed in error */
};

/* A CM MAD received, and an address vector to answer its sender (destroy it when done). */
struct ibcm_rx {
	struct sr_cm_mad mad;
	union ibv_gid sgid;	/* the sender's GID (from the GRH) */
	uint32_t src_qp;	/* 1 for every CM peer */
	bool softrdma;		/* the sender is a softrdma NIC (GRH marker and a port below 49152, docs/gid.md) */
	uint16_t sport;		/* the sender's UDP source port (the GRH marker's; 0 without):
				 * below 49152 a softrdma device's own port, from 49152 a standard
				 * RoCEv2 sender's flow entropy (kernel rxe, NICs; docs/gid.md) */
	struct ibv_ah *ah;
};

/* Opens QP1 on ctx (with a PD of its own) and posts the receives. 0 or -errno (-EOPNOTSUPP
 * without softrdma's libibverbs, -EBUSY when the device's QP1 is taken). */
int ibcm_agent_open(struct ibcm_agent *a, struct ibv_context *ctx);
void ibcm_agent_close(struct ibcm_agent *a);
/* Sends m to QP1 behind ah (inline: ah and m may go at once); never waits. 0, -EAGAIN (the
 * send queue is full: the MAD is not sent, the CM's retransmission covers it) or -errno. */
int ibcm_agent_send(struct ibcm_agent *a, struct ibv_ah *ah, const struct sr_cm_mad *m);
/* The same for a MAD already in wire form (256 bytes): what the codec does not build. */
int ibcm_agent_send_raw(struct ibcm_agent *a, struct ibv_ah *ah, const uint8_t *mad);
/* An address vector to a GID (port 1, GID index 0), for the first message to a peer. */
struct ibv_ah *ibcm_agent_ah(struct ibcm_agent *a, const union ibv_gid *dgid);
/* The next CM MAD within timeout_ms: 1 (*rx filled), 0 (none), or -errno. Sleeps on the
 * completion channel; a MAD that does not decode is dropped and counted, except the CM
 * class's ClassPortInfo (Get or GetResp: only rx->mad.hdr is filled in). */
int ibcm_agent_recv(struct ibcm_agent *a, struct ibcm_rx *rx, int timeout_ms);

#endif /* SR_CM_IBCM_AGENT_H */
