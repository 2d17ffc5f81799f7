/* SPDX-License-Identifier: MIT */
/*
 * Devices, contexts, queries and asynchronous events: the exported entry points.
 *
 * The context is an extended one (abi_compat = __VERBS_ABI_IS_EXTENDED, sz set), so the inline
 * verbs_get_ctx_op() in <infiniband/verbs.h> finds query_port, query_device_ex, create_cq_ex
 * and create_qp_ex; ops the device does not have stay NULL there, and those inline helpers then
 * return EOPNOTSUPP/ENOSYS themselves.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/param.h"
#include "verbs/verbs.h"

#undef ibv_get_device_list
#undef ibv_query_port

/* ---- devices --------------------------------------------------------------------------- */
struct ibv_device **ibv_get_device_list(int *num)
{
	struct sr_device **devs;
	int n = sr_devices(&devs);
	struct ibv_device **list = calloc((size_t)n + 1, sizeof(*list));

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < n; i++)
		list[i] = &devs[i]->ibdev;
	if (num)
		*num = n;
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *dev)
{
	return dev->name;
}

static struct sr_device *sr_dev(struct ibv_device *d)
{
	return (struct sr_device *)d;
}

__be64 ibv_get_device_guid(struct ibv_device *dev)
{
	return sr_device_guid(sr_dev(dev));
}

int ibv_get_device_index(struct ibv_device *dev)
{
	return sr_dev(dev)->index;
}

/* ---- context ------------------------------------------------------------------------------ */
static int sr_v_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a,
			   size_t len);
static int sr_v_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
			  struct ibv_sge *sg_list, uint32_t num_sge);
static int sr_v_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
				struct ibv_device_attr_ex *a, size_t len);

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	struct sr_ctx *ctx = calloc(1, sizeof(*ctx));
	struct ibv_context *c;
	int ret;

	if (!ctx)
		return sr_null(-ENOMEM);
	ret = sr_nic_get(sr_dev(dev), &ctx->nic);
	if (ret) {
		free(ctx);
		return sr_null(ret);
	}
	ctx->dev = sr_dev(dev);
	pthread_mutex_init(&ctx->ev_lock, NULL);
	c = &ctx->vctx.context;
	c->device = dev;
	/* No command goes through a kernel here, but programs take cmd_fd for an open fd (pyverbs
	 * dups it to try ibv_import_device, which then fails with EOPNOTSUPP): one that
	 * stands for the context and grants nothing, closed with it. */
	c->cmd_fd = eventfd(0, EFD_CLOEXEC);
	c->async_fd = eventfd(0, EFD_CLOEXEC);	/* a level flag (core/cq.c) */
	c->num_comp_vectors = 1;
	c->abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&c->mutex, NULL);
	c->ops.poll_cq = sr_v_poll_cq;
	c->ops.req_notify_cq = sr_v_req_notify_cq;
	c->ops.post_send = sr_v_post_send;
	c->ops.post_recv = sr_v_post_recv;
	c->ops.post_srq_recv = sr_v_post_srq_recv;
	c->ops.alloc_mw = sr_v_alloc_mw;
	c->ops.dealloc_mw = sr_v_dealloc_mw;
	c->ops.bind_mw = sr_v_bind_mw;
	ctx->vctx.sz = sizeof(ctx->vctx);
	ctx->vctx.query_port = sr_v_query_port;
	ctx->vctx.query_device_ex = sr_v_query_device_ex;
	ctx->vctx.create_cq_ex = sr_v_create_cq_ex;
	ctx->vctx.create_qp_ex = sr_v_create_qp_ex;
	ctx->vctx.advise_mr = sr_v_advise_mr;
	ctx->vctx.open_xrcd = sr_v_open_xrcd;
	ctx->vctx.close_xrcd = sr_v_close_xrcd;
	ctx->vctx.create_srq_ex = sr_v_create_srq_ex;
	ctx->vctx.get_srq_num = sr_v_get_srq_num;
	ctx->vctx.open_qp = sr_v_open_qp;
	if (c->async_fd < 0 || c->cmd_fd < 0) {
		ret = -errno;
		if (c->async_fd >= 0)
			close(c->async_fd);
		if (c->cmd_fd >= 0)
			close(c->cmd_fd);
		sr_nic_put(ctx->dev, ctx->nic);
		free(ctx);
		return sr_null(ret);
	}
	return c;
}

int ibv_close_device(struct ibv_context *c)
{
	struct sr_ctx *ctx = sr_ctx(c);

	close(c->async_fd);
	close(c->cmd_fd);
	sr_nic_put(ctx->dev, ctx->nic);
	free(ctx->evq);
	free(ctx);
	return 0;
}

/* ---- queries -------------------------------------------------------------------------------- */
void sr_fill_device_attr(struct sr_ctx *ctx, struct ibv_device_attr *a)
{
	const struct sr_params *p = sr_params();

	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "softrdma %s", "0.1.0");
	a->node_guid = ibv_get_device_guid(&ctx->dev->ibdev);
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = UINT64_MAX;
	a->page_size_cap = 0xfffff000;	/* any power-of-two page from 4 KiB: no page tables */
	a->vendor_id = SR_VENDOR_ID;
	a->vendor_part_id = SR_VENDOR_PART_ID;
	a->hw_ver = 1;
	a->max_qp = (int)p->max_qp;
	a->max_qp_wr = SR_MAX_QP_WR;
	/* Memory windows of both types (type 2 windows get the checks of 2A and 2B: the QP that
	 * bound them, and its PD), and the base memory management extensions: LOCAL_INV, SEND
	 * with invalidate and fast registration (the last through <softrdma/softrdma.h>). */
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID |
			      IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_XRC | IBV_DEVICE_MEM_WINDOW |
			      IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B |
			      IBV_DEVICE_MEM_MGT_EXTENSIONS;
	a->max_sge = SR_MAX_SGE;
	a->max_sge_rd = SR_MAX_SGE;
	a->max_cq = 65536;
	a->max_cqe = (int)p->max_cqe;
	a->max_mr = (int)p->max_mr;
	a->max_mw = (int)p->max_mr;	/* MRs and MWs share the key table */
	a->max_pd = 65536;
	a->max_qp_rd_atom = SR_MAX_RD_ATOMIC;
	a->max_qp_init_rd_atom = SR_MAX_RD_ATOMIC;
	a->max_res_rd_atom = (int)p->max_qp * SR_MAX_RD_ATOMIC;
	/* The responder's atomics are CPU atomics on the target memory: atomic against every
	 * other QP and against the application's own atomic instructions, which is
	 * IBV_ATOMIC_GLOB's promise. HCA (atomic against this device's other atomics) is
	 * reported, as kernel rxe does: a weaker claim, so still true, and the one UCX and others
	 * require before they use atomics at all (docs/architecture.md, Atomics). */
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_mcast_grp = SR_MAX_MCAST;
	a->max_mcast_qp_attach = 64;
	a->max_total_mcast_qp_attach = SR_MAX_MCAST * 64;
	a->max_ah = 65536;
	a->max_srq = 65536;
	a->max_srq_wr = SR_MAX_QP_WR;
	a->max_srq_sge = SR_MAX_SGE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
}

int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	sr_fill_device_attr(sr_ctx(c), a);
	return 0;
}

static int sr_v_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
			  struct ibv_sge *sg_list, uint32_t num_sge)
{
	return sr_mr_advise(sr_pd(pd), (int)advice, flags, sg_list, num_sge);
}

static int sr_v_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
				struct ibv_device_attr_ex *a, size_t len)
{
	struct ibv_device_attr_ex full;

	if (in && in->comp_mask)
		return EINVAL;
	memset(&full, 0, sizeof(full));
	sr_fill_device_attr(sr_ctx(c), &full.orig_attr);
	full.phys_port_cnt_ex = 1;
	/* On-Demand Paging: every MR is reached through virtual addresses, so ODP works for every
	 * operation of every transport, and implicitly (the whole address space). */
	full.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	full.odp_caps.per_transport_caps.rc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	full.odp_caps.per_transport_caps.uc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		IBV_ODP_SUPPORT_SRQ_RECV;
	full.odp_caps.per_transport_caps.ud_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	/* The bits newer rdma-core names IBV_DEVICE_FLUSH_GLOBAL, _FLUSH_PERSISTENT and
	 * _ATOMIC_WRITE (SOFTRDMA_DEVICE_* in softrdma.h). */
	full.device_cap_flags_ex = full.orig_attr.device_cap_flags | (1ull << 38) | (1ull << 39) |
				   (1ull << 40);
	memcpy(a, &full, len < sizeof(full) ? len : sizeof(full));
	return 0;
}

static void fill_port(struct sr_ctx *ctx, struct ibv_port_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->state = IBV_PORT_ACTIVE;
	a->max_mtu = ctx->nic->active_mtu;
	a->active_mtu = ctx->nic->active_mtu;
	a->gid_tbl_len = sr_gid_table_len(&ctx->nic->addr);
	a->lid = sr_addr_lid(&ctx->nic->addr);	/* 0, or the UDP port (docs/gid.md) */
	a->max_msg_sz = SR_MAX_MSG_SIZE;
	a->pkey_tbl_len = 1;
	a->max_vl_num = 1;
	a->active_width = 2;	/* 4X */
	a->active_speed = 32;	/* EDR: what rxe reports for a software port */
	a->phys_state = 5;	/* LinkUp */
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
}

static int sr_v_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a,
			   size_t len)
{
	struct ibv_port_attr full;

	if (port != 1)
		return EINVAL;
	fill_port(sr_ctx(c), &full);
	memcpy(a, &full, len < sizeof(full) ? len : sizeof(full));
	return 0;
}

/* The old exported entry point: its struct ends with link_layer (rdma-core's compat layout). */
int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *a)
{
	return sr_v_query_port(c, port, (struct ibv_port_attr *)a,
			       offsetof(struct ibv_port_attr, link_layer) + 1);
}

int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid)
{
	if (port != 1 || sr_gid_at(&sr_ctx(c)->nic->addr, index, gid))
		return -1;
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;

	if (flags || entry_size < sizeof(e))
		return EINVAL;
	if (port != 1)
		return EINVAL;
	memset(&e, 0, sizeof(e));
	if (index > INT32_MAX || sr_gid_at(&sr_ctx(c)->nic->addr, (int)index, &e.gid))
		return ENODATA;
	e.gid_index = index;
	e.port_num = 1;
	e.gid_type = IBV_GID_TYPE_ROCE_V2;
	e.ndev_ifindex = sr_ctx(c)->dev->netdev[0] ? if_nametoindex(sr_ctx(c)->dev->netdev) : 1;
	memcpy(entry, &e, sizeof(e));
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *entries,
			     size_t max, uint32_t flags, size_t entry_size)
{
	int n;

	if (flags || entry_size < sizeof(*entries))
		return -EINVAL;
	if (!max)
		return -EINVAL;
	n = sr_gid_table_len(&sr_ctx(c)->nic->addr);
	if ((size_t)n > max)
		return -EINVAL;	/* as rdma-core: the table does not fit */
	for (int i = 0; i < n; i++)
		if (_ibv_query_gid_ex(c, 1, (uint32_t)i,
				      (struct ibv_gid_entry *)((char *)entries + (size_t)i * entry_size),
				      0, entry_size))
			return -EINVAL;
	return n;
}

/*
 * rdma-core's private GID-type query (what ibv_devinfo prints after each GID). Its enum lives
 * in the uninstalled driver.h: 0 is "IB/RoCE v1", 1 is "RoCE v2"; every softrdma GID is v2.
 */
int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, int *type);
int ibv_query_gid_type(struct ibv_context *c, uint8_t port, unsigned int index, int *type)
{
	if (port != 1 || index >= (unsigned int)sr_gid_table_len(&sr_ctx(c)->nic->addr))
		return EINVAL;
	*type = 1;
	return 0;
}

int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey)
{
	if (port != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey)
{
	if (port != 1)
		return -1;
	return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -1;
}

/* ---- asynchronous events -------------------------------------------------------------------- */

int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *ev)
{
	int ret = sr_async_event_get(sr_ctx(c), ev);

	if (ret) {
		errno = -ret;	/* EAGAIN on a non-blocking fd with nothing queued */
		return -1;
	}
	/* Its delivery is counted (for destroy's wait for the acks) by sr_async_event_get. */
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *ev)
{
	if (sr_event_is_qp(ev->event_type)) {
		struct ibv_qp *qp = ev->element.qp;

		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
	} else if (ev->event_type == IBV_EVENT_CQ_ERR) {
		struct ibv_cq *cq = ev->element.cq;

		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
	} else if (ev->event_type == IBV_EVENT_SRQ_ERR ||
		   ev->event_type == IBV_EVENT_SRQ_LIMIT_REACHED) {
		struct ibv_srq *srq = ev->element.srq;

		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
	}
}

/* Enhanced Connection Establishment: no vendor options to negotiate. */
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	return EOPNOTSUPP;
}
