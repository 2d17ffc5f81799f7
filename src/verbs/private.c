// SPDX-License-Identifier: MIT
/*
 * IBVERBS_PRIVATE_34: the interface between rdma-core's libibverbs and its kernel providers.
 *
 * Nobody but a provider calls these, and softrdma loads no provider: it is the device. They
 * exist because perftest links Debian's libmlx5.so.1 and libefa.so.1 directly, and a BIND_NOW
 * process dies at start-up if one of their ~70 imports is missing. What those libraries do run
 * is their constructor, which registers the driver (verbs_register_driver_34: accepted and
 * ignored). Everything else is unreachable on a softrdma device, so the kernel-command helpers
 * fail with EOPNOTSUPP (pointer returns: NULL with errno) and the context helpers do nothing.
 *
 * rdma-core's driver.h and cmd_*.h, which declare these, are not installed on Debian. The
 * signatures below are rdma-core 44's; the private structures stay opaque since no function
 * here looks inside them. The argument lists only document the ABI: every one of these is a
 * plain C call whose failure path never reads an argument.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>

/* rdma-core's provider-side objects (driver.h): embedded in providers, never seen by us. */
struct verbs_device_ops;
struct verbs_sysfs_dev;
struct verbs_xrcd;
struct verbs_mr;
struct verbs_cq;
struct verbs_srq;
struct verbs_qp;
struct verbs_flow_action;
struct verbs_dm;
struct verbs_counters;
struct verbs_context_ops;
/* An ioctl() command under construction (cmd_ioctl.h). */
struct ibv_command_buffer;
/* write()-ABI command layouts (kern-abi.h): these share names with verbs but are structs. */
struct ibv_get_context;
struct ibv_query_port;
struct ibv_alloc_pd;
struct ibv_open_xrcd;
struct ibv_reg_mr;
struct ibv_rereg_mr;
struct ibv_alloc_mw;
struct ibv_create_cq;
struct ibv_create_cq_ex;
struct ibv_resize_cq;
struct ibv_modify_cq;
struct ibv_create_srq;
struct ibv_create_xsrq;
struct ibv_modify_srq;
struct ibv_query_srq;
struct ibv_create_qp;
struct ibv_create_qp_ex;
struct ibv_open_qp;
struct ibv_query_qp;
struct ibv_modify_qp;
struct ibv_modify_qp_ex;
struct ibv_create_wq;
struct ibv_modify_wq;

/* rdma-core's sysfs GID type (driver.h), distinct from the public enum ibv_gid_type. */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

/*
 * A kernel command: there is no uverbs device behind a softrdma context. Returns the errno,
 * the convention of every ibv_cmd_* that returns int (except poll, below); errno is set as
 * well for callers that look there.
 */
static int no_kernel(void)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* One line per command: NO_KERNEL_CMD(name, its rdma-core 44 parameters...). */
#define NO_KERNEL_CMD(name, ...)                                               \
	int name(__VA_ARGS__);                                                 \
	int name(__VA_ARGS__)                                                  \
	{                                                                      \
		return no_kernel();                                            \
	}

/*
 * Read by providers when destroying objects of a disassociated (hot-unplugged) device.
 * rdma-core's is a bool; the symbol is data, one byte, and must stay so.
 */
bool verbs_allow_disassociate_destroy;

/* Called from the constructors of every provider library that is loaded: nothing to keep. */
void verbs_register_driver_34(const struct verbs_device_ops *ops);
void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
}

/*
 * Provider log sink. rdma-core's verbs_log() macros land here; honour the same VERBS_LOG_LEVEL
 * (0 none .. 4 debug) and print to stderr. Reachable only from a provider's context, so in
 * practice never, but it costs nothing to keep it honest.
 */
static uint32_t verbs_log_level;
static pthread_once_t verbs_log_once = PTHREAD_ONCE_INIT;

static void verbs_log_init(void)
{
	const char *env = getenv("VERBS_LOG_LEVEL");

	if (env)
		verbs_log_level = (uint32_t)strtoul(env, NULL, 0);
}

void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	pthread_once(&verbs_log_once, verbs_log_init);
	if (level > verbs_log_level)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	errno = saved;
}

/* Context construction and teardown: a provider never gets a device from us to build on. */
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops);
void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops)
{
}

void verbs_uninit_context(struct verbs_context *context);
void verbs_uninit_context(struct verbs_context *context)
{
}

/*
 * The one helper that is pure public-struct work: initialise the core fields of a CQ a
 * provider allocated. The channel's refcnt is the public counter ibv_destroy_comp_channel
 * checks (EBUSY while CQs use it); it is guarded by the context mutex.
 */
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context);
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context,
		   struct ibv_comp_channel *channel, void *cq_context)
{
	cq->context = context;
	cq->channel = channel;
	if (channel) {
		pthread_mutex_lock(&context->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&context->mutex);
	}
	cq->cq_context = cq_context;
	cq->comp_events_completed = 0;
	cq->async_events_completed = 0;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
}

/* Sysfs file of a provider's device: we never hand a provider a sysfs device. */
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev,
			      const char *fnfmt, ...) __attribute__((format(printf, 4, 5)));
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev,
			      const char *fnfmt, ...)
{
	errno = sysfs_dev ? EOPNOTSUPP : EINVAL;
	return -1;
}

/*
 * The ioctl() path. A provider sizes its on-stack attribute array with this count before
 * filling it; it walks private linked buffers whose layout we do not mirror, and the array is
 * only ever handed to execute_ioctl() below, which fails. The caller's own count is a safe
 * size for what the caller itself writes.
 */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *link);
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *link)
{
	return num_attrs;
}

NO_KERNEL_CMD(execute_ioctl, struct ibv_context *context, struct ibv_command_buffer *cmd)

/*
 * Data-path commands. poll returns a count, so its failure is negative (a positive errno
 * would read as completions); posts report the first work request as the bad one.
 */
int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc);
int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc)
{
	errno = EOPNOTSUPP;
	return -1;
}

int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return no_kernel();
}

int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return no_kernel();
}

int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr);
int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return no_kernel();
}

NO_KERNEL_CMD(ibv_cmd_req_notify_cq, struct ibv_cq *cq, int solicited_only)

/* Device and context. */
NO_KERNEL_CMD(ibv_cmd_get_context, struct verbs_context *context, struct ibv_get_context *cmd,
	      size_t cmd_size, struct ib_uverbs_get_context_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_query_context, struct ibv_context *ctx, struct ibv_command_buffer *driver)
NO_KERNEL_CMD(ibv_cmd_query_device_any, struct ibv_context *context,
	      const struct ibv_query_device_ex_input *input, struct ibv_device_attr_ex *attr,
	      size_t attr_size, struct ib_uverbs_ex_query_device_resp *resp, size_t *resp_size)
NO_KERNEL_CMD(ibv_cmd_query_port, struct ibv_context *context, uint8_t port_num,
	      struct ibv_port_attr *port_attr, struct ibv_query_port *cmd, size_t cmd_size)

/* PD, XRCD. */
NO_KERNEL_CMD(ibv_cmd_alloc_pd, struct ibv_context *context, struct ibv_pd *pd,
	      struct ibv_alloc_pd *cmd, size_t cmd_size, struct ib_uverbs_alloc_pd_resp *resp,
	      size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_dealloc_pd, struct ibv_pd *pd)
NO_KERNEL_CMD(ibv_cmd_open_xrcd, struct ibv_context *context, struct verbs_xrcd *xrcd,
	      int vxrcd_size, struct ibv_xrcd_init_attr *attr, struct ibv_open_xrcd *cmd,
	      size_t cmd_size, struct ib_uverbs_open_xrcd_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_close_xrcd, struct verbs_xrcd *xrcd)

/* MR, MW, DM. */
NO_KERNEL_CMD(ibv_cmd_reg_mr, struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va,
	      int access, struct verbs_mr *vmr, struct ibv_reg_mr *cmd, size_t cmd_size,
	      struct ib_uverbs_reg_mr_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_rereg_mr, struct verbs_mr *vmr, uint32_t flags, void *addr,
	      size_t length, uint64_t hca_va, int access, struct ibv_pd *pd,
	      struct ibv_rereg_mr *cmd, size_t cmd_sz, struct ib_uverbs_rereg_mr_resp *resp,
	      size_t resp_sz)
NO_KERNEL_CMD(ibv_cmd_dereg_mr, struct verbs_mr *vmr)
NO_KERNEL_CMD(ibv_cmd_query_mr, struct ibv_pd *pd, struct verbs_mr *vmr, uint32_t mr_handle)
NO_KERNEL_CMD(ibv_cmd_advise_mr, struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
	      uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge)
NO_KERNEL_CMD(ibv_cmd_reg_dmabuf_mr, struct ibv_pd *pd, uint64_t offset, size_t length,
	      uint64_t iova, int fd, int access, struct verbs_mr *vmr)
NO_KERNEL_CMD(ibv_cmd_alloc_mw, struct ibv_pd *pd, enum ibv_mw_type type, struct ibv_mw *mw,
	      struct ibv_alloc_mw *cmd, size_t cmd_size, struct ib_uverbs_alloc_mw_resp *resp,
	      size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_dealloc_mw, struct ibv_mw *mw)
NO_KERNEL_CMD(ibv_cmd_alloc_dm, struct ibv_context *ctx, const struct ibv_alloc_dm_attr *dm_attr,
	      struct verbs_dm *dm, struct ibv_command_buffer *link)
NO_KERNEL_CMD(ibv_cmd_free_dm, struct verbs_dm *dm)
NO_KERNEL_CMD(ibv_cmd_reg_dm_mr, struct ibv_pd *pd, struct verbs_dm *dm, uint64_t offset,
	      size_t length, unsigned int access, struct verbs_mr *vmr,
	      struct ibv_command_buffer *link)

/* CQ. */
NO_KERNEL_CMD(ibv_cmd_create_cq, struct ibv_context *context, int cqe,
	      struct ibv_comp_channel *channel, int comp_vector, struct ibv_cq *cq,
	      struct ibv_create_cq *cmd, size_t cmd_size, struct ib_uverbs_create_cq_resp *resp,
	      size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_create_cq_ex, struct ibv_context *context,
	      const struct ibv_cq_init_attr_ex *cq_attr, struct verbs_cq *cq,
	      struct ibv_create_cq_ex *cmd, size_t cmd_size,
	      struct ib_uverbs_ex_create_cq_resp *resp, size_t resp_size, uint32_t cmd_flags)
NO_KERNEL_CMD(ibv_cmd_resize_cq, struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd,
	      size_t cmd_size, struct ib_uverbs_resize_cq_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_modify_cq, struct ibv_cq *cq, struct ibv_modify_cq_attr *attr,
	      struct ibv_modify_cq *cmd, size_t cmd_size)
NO_KERNEL_CMD(ibv_cmd_destroy_cq, struct ibv_cq *cq)

/* SRQ. */
NO_KERNEL_CMD(ibv_cmd_create_srq, struct ibv_pd *pd, struct ibv_srq *srq,
	      struct ibv_srq_init_attr *attr, struct ibv_create_srq *cmd, size_t cmd_size,
	      struct ib_uverbs_create_srq_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_create_srq_ex, struct ibv_context *context, struct verbs_srq *srq,
	      struct ibv_srq_init_attr_ex *attr_ex, struct ibv_create_xsrq *cmd, size_t cmd_size,
	      struct ib_uverbs_create_srq_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_modify_srq, struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
	      int srq_attr_mask, struct ibv_modify_srq *cmd, size_t cmd_size)
NO_KERNEL_CMD(ibv_cmd_query_srq, struct ibv_srq *srq, struct ibv_srq_attr *srq_attr,
	      struct ibv_query_srq *cmd, size_t cmd_size)
NO_KERNEL_CMD(ibv_cmd_destroy_srq, struct ibv_srq *srq)

/* QP. */
NO_KERNEL_CMD(ibv_cmd_create_qp, struct ibv_pd *pd, struct ibv_qp *qp,
	      struct ibv_qp_init_attr *attr, struct ibv_create_qp *cmd, size_t cmd_size,
	      struct ib_uverbs_create_qp_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_create_qp_ex, struct ibv_context *context, struct verbs_qp *qp,
	      struct ibv_qp_init_attr_ex *attr_ex, struct ibv_create_qp *cmd, size_t cmd_size,
	      struct ib_uverbs_create_qp_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_create_qp_ex2, struct ibv_context *context, struct verbs_qp *qp,
	      struct ibv_qp_init_attr_ex *qp_attr, struct ibv_create_qp_ex *cmd, size_t cmd_size,
	      struct ib_uverbs_ex_create_qp_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_open_qp, struct ibv_context *context, struct verbs_qp *qp, int vqp_sz,
	      struct ibv_qp_open_attr *attr, struct ibv_open_qp *cmd, size_t cmd_size,
	      struct ib_uverbs_create_qp_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_query_qp, struct ibv_qp *qp, struct ibv_qp_attr *qp_attr, int attr_mask,
	      struct ibv_qp_init_attr *qp_init_attr, struct ibv_query_qp *cmd, size_t cmd_size)
NO_KERNEL_CMD(ibv_cmd_modify_qp, struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
	      struct ibv_modify_qp *cmd, size_t cmd_size)
NO_KERNEL_CMD(ibv_cmd_modify_qp_ex, struct ibv_qp *qp, struct ibv_qp_attr *attr,
	      int attr_mask, struct ibv_modify_qp_ex *cmd, size_t cmd_size,
	      struct ib_uverbs_ex_modify_qp_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_destroy_qp, struct ibv_qp *qp)

/* AH and multicast. */
NO_KERNEL_CMD(ibv_cmd_create_ah, struct ibv_pd *pd, struct ibv_ah *ah, struct ibv_ah_attr *attr,
	      struct ib_uverbs_create_ah_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_destroy_ah, struct ibv_ah *ah)
NO_KERNEL_CMD(ibv_cmd_attach_mcast, struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
NO_KERNEL_CMD(ibv_cmd_detach_mcast, struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)

/* Flow steering and flow actions. */
NO_KERNEL_CMD(ibv_cmd_create_flow, struct ibv_qp *qp, struct ibv_flow *flow_id,
	      struct ibv_flow_attr *flow_attr, void *ucmd, size_t ucmd_size)
NO_KERNEL_CMD(ibv_cmd_destroy_flow, struct ibv_flow *flow_id)
NO_KERNEL_CMD(ibv_cmd_create_flow_action_esp, struct ibv_context *ctx,
	      struct ibv_flow_action_esp_attr *attr, struct verbs_flow_action *flow_action,
	      struct ibv_command_buffer *driver)
NO_KERNEL_CMD(ibv_cmd_modify_flow_action_esp, struct verbs_flow_action *flow_action,
	      struct ibv_flow_action_esp_attr *attr, struct ibv_command_buffer *driver)
NO_KERNEL_CMD(ibv_cmd_destroy_flow_action, struct verbs_flow_action *action)

/* WQ and RSS indirection tables. */
NO_KERNEL_CMD(ibv_cmd_create_wq, struct ibv_context *context,
	      struct ibv_wq_init_attr *wq_init_attr, struct ibv_wq *wq, struct ibv_create_wq *cmd,
	      size_t cmd_size, struct ib_uverbs_ex_create_wq_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_modify_wq, struct ibv_wq *wq, struct ibv_wq_attr *attr,
	      struct ibv_modify_wq *cmd, size_t cmd_size)
NO_KERNEL_CMD(ibv_cmd_destroy_wq, struct ibv_wq *wq)
NO_KERNEL_CMD(ibv_cmd_create_rwq_ind_table, struct ibv_context *context,
	      struct ibv_rwq_ind_table_init_attr *init_attr,
	      struct ibv_rwq_ind_table *rwq_ind_table,
	      struct ib_uverbs_ex_create_rwq_ind_table_resp *resp, size_t resp_size)
NO_KERNEL_CMD(ibv_cmd_destroy_rwq_ind_table, struct ibv_rwq_ind_table *rwq_ind_table)

/* Counters. */
NO_KERNEL_CMD(ibv_cmd_create_counters, struct ibv_context *context,
	      struct ibv_counters_init_attr *init_attr, struct verbs_counters *vcounters,
	      struct ibv_command_buffer *link)
NO_KERNEL_CMD(ibv_cmd_destroy_counters, struct verbs_counters *vcounters)
NO_KERNEL_CMD(ibv_cmd_read_counters, struct verbs_counters *vcounters, uint64_t *counters_value,
	      uint32_t ncounters, uint32_t flags, struct ibv_command_buffer *link)
