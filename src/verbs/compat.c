// SPDX-License-Identifier: MIT
/*
 * Old-ABI symbols. libibverbs 1.0 (2006) had different layouts for the device, context and
 * every object; rdma-core still exports those entry points as non-default name@IBVERBS_1.0
 * beside the current name@@IBVERBS_1.1. Only a binary linked against libibverbs 1.0 binds to
 * them, none built in the last fifteen years does, and softrdma has no 1.0 objects to hand
 * out: each one fails cleanly. They exist so that the dynamic symbol table matches rdma-core's
 * node for node.
 *
 * The local names (sr_compat_*) are hidden by the version script; only the versioned alias
 * made by .symver is exported. A single '@' makes it a non-default version, so the current
 * ibv_create_qp (the verbs face's, listed under IBVERBS_1.1 in libibverbs.map) stays the one
 * new links and unversioned lookups find.
 */
#include <errno.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/*
 * The 1.0 object types. Their layouts do not matter: nothing is ever created, and no stub
 * dereferences its arguments.
 */
struct ibv_device_1_0;
struct ibv_context_1_0;
struct ibv_pd_1_0;
struct ibv_mr_1_0;
struct ibv_cq_1_0;
struct ibv_srq_1_0;
struct ibv_qp_1_0;
struct ibv_qp_init_attr_1_0;
struct ibv_ah_1_0;

/*
 * COMPAT_FAIL(name, ret, fail, args...) defines sr_compat_<name>(args) returning <fail> with
 * errno = EOPNOTSUPP, exported as <name>@IBVERBS_1.0. COMPAT_VOID does the same for the
 * void calls (acknowledge, free), which have nothing to fail and nothing to do.
 */
#define COMPAT_SYMVER(name, ver)                                                \
	__asm__(".symver sr_compat_" #name ", " #name "@" ver)

#define COMPAT_FAIL(name, ret, fail, ...)                                      \
	ret sr_compat_##name(__VA_ARGS__);                                     \
	COMPAT_SYMVER(name, "IBVERBS_1.0");                                    \
	ret sr_compat_##name(__VA_ARGS__)                                      \
	{                                                                      \
		errno = EOPNOTSUPP;                                            \
		return fail;                                                   \
	}

#define COMPAT_VOID(name, ...)                                                 \
	void sr_compat_##name(__VA_ARGS__);                                    \
	COMPAT_SYMVER(name, "IBVERBS_1.0");                                    \
	void sr_compat_##name(__VA_ARGS__)                                     \
	{                                                                      \
	}

/*
 * Return conventions follow the current verbs: calls that return an errno return EOPNOTSUPP;
 * those that historically returned -1 on failure (event reads, table queries) return -1.
 */

/* Device list and context. */
COMPAT_FAIL(ibv_get_device_list, struct ibv_device_1_0 **, NULL, int *num)
COMPAT_VOID(ibv_free_device_list, struct ibv_device_1_0 **list)
COMPAT_FAIL(ibv_get_device_name, const char *, NULL, struct ibv_device_1_0 *device)
COMPAT_FAIL(ibv_get_device_guid, __be64, 0, struct ibv_device_1_0 *device)
COMPAT_FAIL(ibv_open_device, struct ibv_context_1_0 *, NULL, struct ibv_device_1_0 *device)
COMPAT_FAIL(ibv_close_device, int, EOPNOTSUPP, struct ibv_context_1_0 *context)
COMPAT_FAIL(ibv_get_async_event, int, -1, struct ibv_context_1_0 *context,
	    struct ibv_async_event *event)
COMPAT_VOID(ibv_ack_async_event, struct ibv_async_event *event)

/* Queries. */
COMPAT_FAIL(ibv_query_device, int, EOPNOTSUPP, struct ibv_context_1_0 *context,
	    struct ibv_device_attr *device_attr)
COMPAT_FAIL(ibv_query_port, int, EOPNOTSUPP, struct ibv_context_1_0 *context,
	    uint8_t port_num, struct ibv_port_attr *port_attr)
COMPAT_FAIL(ibv_query_gid, int, -1, struct ibv_context_1_0 *context, uint8_t port_num,
	    int index, union ibv_gid *gid)
COMPAT_FAIL(ibv_query_pkey, int, -1, struct ibv_context_1_0 *context, uint8_t port_num,
	    int index, __be16 *pkey)

/* PD and MR. */
COMPAT_FAIL(ibv_alloc_pd, struct ibv_pd_1_0 *, NULL, struct ibv_context_1_0 *context)
COMPAT_FAIL(ibv_dealloc_pd, int, EOPNOTSUPP, struct ibv_pd_1_0 *pd)
COMPAT_FAIL(ibv_reg_mr, struct ibv_mr_1_0 *, NULL, struct ibv_pd_1_0 *pd, void *addr,
	    size_t length, int access)
COMPAT_FAIL(ibv_dereg_mr, int, EOPNOTSUPP, struct ibv_mr_1_0 *mr)

/* CQ and completion events. */
COMPAT_FAIL(ibv_create_cq, struct ibv_cq_1_0 *, NULL, struct ibv_context_1_0 *context,
	    int cqe, void *cq_context, struct ibv_comp_channel *channel, int comp_vector)
COMPAT_FAIL(ibv_resize_cq, int, EOPNOTSUPP, struct ibv_cq_1_0 *cq, int cqe)
COMPAT_FAIL(ibv_destroy_cq, int, EOPNOTSUPP, struct ibv_cq_1_0 *cq)
COMPAT_FAIL(ibv_get_cq_event, int, -1, struct ibv_comp_channel *channel,
	    struct ibv_cq_1_0 **cq, void **cq_context)
COMPAT_VOID(ibv_ack_cq_events, struct ibv_cq_1_0 *cq, unsigned int nevents)

/* SRQ. */
COMPAT_FAIL(ibv_create_srq, struct ibv_srq_1_0 *, NULL, struct ibv_pd_1_0 *pd,
	    struct ibv_srq_init_attr *srq_init_attr)
COMPAT_FAIL(ibv_modify_srq, int, EOPNOTSUPP, struct ibv_srq_1_0 *srq,
	    struct ibv_srq_attr *srq_attr, int srq_attr_mask)
COMPAT_FAIL(ibv_query_srq, int, EOPNOTSUPP, struct ibv_srq_1_0 *srq,
	    struct ibv_srq_attr *srq_attr)
COMPAT_FAIL(ibv_destroy_srq, int, EOPNOTSUPP, struct ibv_srq_1_0 *srq)

/* QP. */
COMPAT_FAIL(ibv_create_qp, struct ibv_qp_1_0 *, NULL, struct ibv_pd_1_0 *pd,
	    struct ibv_qp_init_attr_1_0 *qp_init_attr)
COMPAT_FAIL(ibv_query_qp, int, EOPNOTSUPP, struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr,
	    int attr_mask, struct ibv_qp_init_attr_1_0 *init_attr)
COMPAT_FAIL(ibv_modify_qp, int, EOPNOTSUPP, struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr,
	    int attr_mask)
COMPAT_FAIL(ibv_destroy_qp, int, EOPNOTSUPP, struct ibv_qp_1_0 *qp)

/* AH and multicast. */
COMPAT_FAIL(ibv_create_ah, struct ibv_ah_1_0 *, NULL, struct ibv_pd_1_0 *pd,
	    struct ibv_ah_attr *attr)
COMPAT_FAIL(ibv_destroy_ah, int, EOPNOTSUPP, struct ibv_ah_1_0 *ah)
COMPAT_FAIL(ibv_attach_mcast, int, EOPNOTSUPP, struct ibv_qp_1_0 *qp, union ibv_gid *gid,
	    uint16_t lid)
COMPAT_FAIL(ibv_detach_mcast, int, EOPNOTSUPP, struct ibv_qp_1_0 *qp, union ibv_gid *gid,
	    uint16_t lid)

/*
 * ibv_register_driver@IBVERBS_1.1: the provider registration of libibverbs <= 1.1. Drivers
 * have used verbs_register_driver_<N> since rdma-core 13, but old libfabric usnic providers
 * still call this one, only to keep old libibverbs quiet. Accept and ignore.
 */
typedef struct ibv_device *(*sr_compat_driver_init_fn)(const char *uverbs_sys_path,
							 int abi_version);

void sr_compat_ibv_register_driver(const char *name, sr_compat_driver_init_fn init_func);
COMPAT_SYMVER(ibv_register_driver, "IBVERBS_1.1");
void sr_compat_ibv_register_driver(const char *name, sr_compat_driver_init_fn init_func)
{
}
