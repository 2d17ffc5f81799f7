/* SPDX-License-Identifier: MIT */
/* Helpers shared by the requester, responder and completer. Internal to src/transport. */
#ifndef SR_TRANSPORT_XPORT_H
#define SR_TRANSPORT_XPORT_H

#include "core/core.h"
#include "core/param.h"
#include "net/net.h"
#include "transport/transport.h"
#include "wire/opcode.h"
#include "wire/pkt.h"
#include "wire/psn.h"

/* Largest header set a request or response needs (BTH+XRCETH+RETH+ImmDt/IETH, or
 * BTH+DETH+ImmDt, or BTH+AETH+AtomicAckETH, or BTH+AtomicETH). */
#define SR_MAX_HDR 64
/* Most iovecs one packet's payload can need: two per SGE (a piece of at most one MTU of a
 * fast-registration MR crosses at most one page boundary: pages are at least 4 KiB), plus
 * two. sr_net_xmit gathers any number into its snapshot. */
#define SR_MAX_IOV (2 * SR_MAX_SGE + 2)

static inline uint32_t sr_npkts(uint32_t len, uint32_t mtu)
{
	return len ? (len + mtu - 1) / mtu : 1;
}

/* May this QP's packets say SR_BTH_SR_FSHORT (its responder takes a WRITE FIRST short by the
 * RETH)? Only once the peer offered in-band segments no larger than this NIC takes: a softrdma
 * before the bit reads it as part of the size (64 KiB or more) and takes the smaller of that
 * and its own, which is then the smaller of the two offers, as it should be. */
static inline bool sr_qp_fshort_offer(const struct sr_qp *qp)
{
	return qp->peer_sr && qp->peer_seg > 4096 && qp->peer_seg <= qp->nic->seg_max &&
	       (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_UC) && !qp->seg &&
	       qp->attr.path_mtu == IBV_MTU_4096 && sr_params()->seg_inband &&
	       sr_params()->seg_fshort;
}

/* ... and SR_BTH_SR_EVEN (it takes a WRITE cut evenly: docs/cm.md)? */
static inline bool sr_qp_even_offer(const struct sr_qp *qp)
{
	return sr_qp_fshort_offer(qp) && sr_params()->seg_even;
}

/* ... and SR_BTH_SR_EVENMTU (it takes the even cut at the path MTU where no large segment is in
 * use: docs/cm.md)? Toward any marked peer of an RC/UC QP whose segment rdma_cm did not set. */
static inline bool sr_qp_even_mtu_offer(const struct sr_qp *qp)
{
	return qp->peer_sr && (qp->type == IBV_QPT_RC || qp->type == IBV_QPT_UC) && !qp->seg &&
	       sr_params()->seg_even_mtu;
}

/* Writes this responder's WRITE-cut offers (SR_BTH_SR_FSHORT, SR_BTH_SR_EVEN,
 * SR_BTH_SR_EVENMTU) into the BTH of a packet the QP sends, request or response. */
static inline void sr_qp_cut_offers(const struct sr_qp *qp, uint8_t *hdr)
{
	if (sr_qp_even_mtu_offer(qp))
		sr_bth_set_sr_evenmtu((struct sr_bth *)hdr);
	if (!sr_qp_fshort_offer(qp))
		return;
	hdr[4] |= SR_BTH_SR_FSHORT;
	if (sr_params()->seg_even)
		sr_bth_set_sr_even((struct sr_bth *)hdr);
}

/* The transport class of the QP's opcodes. */
static inline uint8_t sr_qp_tr(const struct sr_qp *qp)
{
	switch (qp->type) {
	case IBV_QPT_RC:
		return SR_TR_RC;
	case IBV_QPT_UC:
		return SR_TR_UC;
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		return SR_TR_XRC;
	default:
		return SR_TR_UD;
	}
}

/*
 * A payload gathered from (or to be scattered into) memory named by SGEs: the iovecs and the
 * MR references that keep it valid until the copy is done. Released by sr_sgl_release().
 */
struct sr_sgl {
	struct iovec iov[SR_MAX_IOV];
	struct sr_mr *mr[SR_MAX_IOV];
	int n;
};
void sr_sgl_release(struct sr_sgl *s);
/*
 * Resolves bytes [off, off + len) of the message described by sge[0..nsge) into s, checking
 * every lkey with `access` (0 for local read, IBV_ACCESS_LOCAL_WRITE to write) on behalf of a
 * (PD, QP, PSN: see struct sr_acc). Returns 0 or the ibv_wc_status to complete with
 * (IBV_WC_LOC_PROT_ERR, IBV_WC_LOC_LEN_ERR).
 */
int sr_sgl_map(struct sr_nic *nic, const struct sr_acc *a, const struct ibv_sge *sge,
	       uint32_t nsge, uint64_t off, uint32_t len, unsigned access, struct sr_sgl *s);
/* Checks the keys of bytes [0, len) of the message once, faulting in the ranges of ODP MRs, so
 * that its packets may map their pieces with SR_ACCESS_FAULTED: 0 or an ibv_wc_status. */
int sr_sgl_fault(struct sr_nic *nic, const struct sr_acc *a, const struct ibv_sge *sge,
		 uint32_t nsge, uint64_t len, unsigned access);
/* The sr_acc of a requester WQE (its gather or scatter) and of a responder request. */
static inline struct sr_acc sr_acc_req(const struct sr_qp *qp, const struct sr_swqe *w)
{
	return (struct sr_acc){ .pd = qp->pd, .qpn = sr_qpn(qp), .psn = w->first_psn,
				.space = SR_SPACE_REQ };
}
static inline struct sr_acc sr_acc_resp(const struct sr_qp *qp, uint32_t psn, bool remote)
{
	return (struct sr_acc){ .pd = qp->pd, .qpn = sr_qpn(qp), .psn = psn,
				.space = remote ? SR_SPACE_RESP : SR_SPACE_NOW, .remote = remote };
}
/* Copies len bytes of buf into iov[0..n). */
void sr_iov_copy_in(const struct iovec *iov, int n, const void *buf, uint32_t len);
/* Copies len bytes from buf into s's iovecs. */
void sr_sgl_copy_in(struct sr_sgl *s, const void *buf, uint32_t len);
/* Checks pkt's ICRC and copies its payload into iov[0..n): in one pass over the bytes when n
 * is 1, else the check, then the copy. True when it matched (the tuple is then cleared and the
 * packet marked placed); on a mismatch nothing counts as placed. */
bool sr_place_checked(struct sr_nic *nic, struct sr_pkt *pkt, const struct iovec *iov, int n);

/* Responder / completer packets (resp.c). */
int sr_send_ack(struct sr_qp *qp, uint32_t psn, uint8_t syndrome);

/* The RC send window (req.c). */
uint32_t sr_cwnd(struct sr_qp *qp);
void sr_cwnd_grow(struct sr_qp *qp);
void sr_cwnd_loss(struct sr_qp *qp, bool timeout);

/* RNR timer encodings of IBA table 45, in ns. */
uint64_t sr_rnr_timer_ns(unsigned code);

#endif /* SR_TRANSPORT_XPORT_H */
