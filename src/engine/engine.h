/* SPDX-License-Identifier: MIT */
/*
 * The engine: the top of the soft NIC, above the transport (docs/architecture.md, "Layers").
 * It owns the NIC's life (nic.c: socket through src/net, the progress thread, its timer pass
 * and receive loop, the application's own receive while it polls), posting (post.c: work
 * requests into the queues, then the requester) and multicast delivery (mcast.c). The verbs
 * face calls it; core, transport and net never do (core reaches it through the hooks it
 * installs, struct sr_engine_hooks, and the NIC's doorbell).
 */
#ifndef SR_ENGINE_ENGINE_H
#define SR_ENGINE_ENGINE_H

#include "core/core.h"

/* ---- the soft NIC (nic.c) ---------------------------------------------------------------- */
/* Process-wide device list (built once). */
int sr_devices(struct sr_device ***list);
int sr_nic_get(struct sr_device *dev, struct sr_nic **out);
/* Drops a context's reference on nic (a NIC inherited across fork is the parent's: ignored). */
void sr_nic_put(struct sr_device *dev, struct sr_nic *nic);
/* Receives and processes what is waiting, without blocking; returns packets processed or 0.
 * Called by an application polling a CQ: the progress thread then leaves the socket to it. */
int sr_nic_poll(struct sr_nic *nic);
/* The same with the clock already read (`now`, sr_now_ns): a CQ poll that found nothing. */
int sr_nic_poll_at(struct sr_nic *nic, uint64_t now);
/* The application stops polling (it is about to block): the progress thread takes over
 * (kicked, if it may have left the socket unarmed; not when the sleeper watches it itself). */
void sr_nic_app_idle(struct sr_nic *nic, bool kick);

/* ---- multicast (mcast.c) ----------------------------------------------------------------- */
struct sr_mcast {
	union ibv_gid gid;
	struct sr_addr addr;		/* the IP group, UDP 4791 */
	int fd;
	struct sr_qp **qps;		/* attached UD QPs (referenced) */
	uint32_t nqp, cap;
	struct sr_mcast *next;
};
int sr_mcast_attach(struct sr_qp *qp, const union ibv_gid *gid);
int sr_mcast_detach(struct sr_qp *qp, const union ibv_gid *gid);
void sr_mcast_detach_all(struct sr_qp *qp);
/* Delivers a packet for QPN 0xffffff that arrived on group fd to every attached QP. */
void sr_mcast_rcv(struct sr_nic *nic, int fd, struct sr_pkt *pkt, const struct sr_addr *src);
/* Drains every group socket the progress thread found readable. */
void sr_mcast_poll(struct sr_nic *nic, int fd);
bool sr_gid_is_mcast(const union ibv_gid *gid);

/* ---- posting (post.c) -------------------------------------------------------------------- */
int sr_post_state_ok(struct sr_qp *qp);
/* Validates the WQE in slot (filled by the caller); computes its length. */
int sr_swqe_finish(struct sr_qp *qp, uint32_t slot);
/* Copies inline data (from sges or bufs) into slot's inline buffer. */
int sr_swqe_inline(struct sr_qp *qp, uint32_t slot, const struct ibv_sge *sg, size_t n,
		   const struct ibv_data_buf *bufs);
/* The arguments of BIND_MW (type1: from ibv_bind_mw), REG_MR and FLUSH into w->u; 0 or -errno
 * (EINVAL, EOPNOTSUPP for what softrdma does not implement). */
int sr_swqe_bind(struct sr_qp *qp, struct sr_swqe *w, struct ibv_mw *mw, uint32_t rkey,
		 const struct ibv_mw_bind_info *b, bool type1);
int sr_swqe_reg(struct sr_qp *qp, struct sr_swqe *w, struct ibv_mr *mr, uint32_t key,
		unsigned access);
int sr_swqe_flush(struct sr_swqe *w, uint32_t rkey, uint64_t raddr, size_t len, uint8_t type,
		  uint8_t level);
int sr_qp_post_send(struct sr_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int sr_qp_post_recv(struct sr_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* After new WQEs: send (or flush in ERR/SQE); qp lock held. */
void sr_sq_kick(struct sr_qp *qp);
/* After a post (qp->lock held): a deferred ACK, then the requester (may_wait: post_batch). */
void sr_sq_posted(struct sr_qp *qp, bool may_wait);
/* ibv_bind_mw (type 1): queues the bind on qp; mw->ibmw.rkey becomes the new key. */
int sr_qp_post_bind_mw(struct sr_qp *qp, struct sr_mw *mw, const struct ibv_mw_bind *b);

#endif /* SR_ENGINE_ENGINE_H */
