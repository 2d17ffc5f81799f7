// SPDX-License-Identifier: MIT
/*
 * The verbs that touch no object: enum-to-string, rate conversions, kernel-struct marshalling,
 * sysfs reading, fork control, and the import/dmabuf/L2 verbs that need a kernel and so fail.
 *
 * The strings are rdma-core 44's, word for word: scripts and users grep logs for them
 * ("transport retry counter exceeded"), so a drop-in must print the same text.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "core/core.h"	/* sr_event_type_str */
#include "verbs/abi.h"

/*
 * Each switch lists every enumerator and has no default, so -Wswitch flags a value added to
 * verbs.h that has no text; values outside the enum fall through to "unknown".
 */
const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS:		return "success";
	case IBV_WC_LOC_LEN_ERR:	return "local length error";
	case IBV_WC_LOC_QP_OP_ERR:	return "local QP operation error";
	case IBV_WC_LOC_EEC_OP_ERR:	return "local EE context operation error";
	case IBV_WC_LOC_PROT_ERR:	return "local protection error";
	case IBV_WC_WR_FLUSH_ERR:	return "Work Request Flushed Error";
	case IBV_WC_MW_BIND_ERR:	return "memory management operation error";
	case IBV_WC_BAD_RESP_ERR:	return "bad response error";
	case IBV_WC_LOC_ACCESS_ERR:	return "local access error";
	case IBV_WC_REM_INV_REQ_ERR:	return "remote invalid request error";
	case IBV_WC_REM_ACCESS_ERR:	return "remote access error";
	case IBV_WC_REM_OP_ERR:		return "remote operation error";
	case IBV_WC_RETRY_EXC_ERR:	return "transport retry counter exceeded";
	case IBV_WC_RNR_RETRY_EXC_ERR:	return "RNR retry counter exceeded";
	case IBV_WC_LOC_RDD_VIOL_ERR:	return "local RDD violation error";
	case IBV_WC_REM_INV_RD_REQ_ERR:	return "remote invalid RD request";
	case IBV_WC_REM_ABORT_ERR:	return "aborted error";
	case IBV_WC_INV_EECN_ERR:	return "invalid EE context number";
	case IBV_WC_INV_EEC_STATE_ERR:	return "invalid EE context state";
	case IBV_WC_FATAL_ERR:		return "fatal error";
	case IBV_WC_RESP_TIMEOUT_ERR:	return "response timeout error";
	case IBV_WC_GENERAL_ERR:	return "general error";
	case IBV_WC_TM_ERR:		return "TM error";
	case IBV_WC_TM_RNDV_INCOMPLETE:	return "TM software rendezvous";
	}
	return "unknown";
}

/* The table is core's (core/cq.c), which logs the text of an event it cannot queue. */
const char *ibv_event_type_str(enum ibv_event_type event)
{
	return sr_event_type_str(event);
}

const char *ibv_node_type_str(enum ibv_node_type node_type)
{
	switch (node_type) {
	case IBV_NODE_CA:		return "InfiniBand channel adapter";
	case IBV_NODE_SWITCH:		return "InfiniBand switch";
	case IBV_NODE_ROUTER:		return "InfiniBand router";
	case IBV_NODE_RNIC:		return "iWARP NIC";
	case IBV_NODE_USNIC:		return "usNIC";
	case IBV_NODE_USNIC_UDP:	return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED:	return "unspecified";
	case IBV_NODE_UNKNOWN:		break;
	}
	return "unknown";
}

const char *ibv_port_state_str(enum ibv_port_state port_state)
{
	switch (port_state) {
	case IBV_PORT_NOP:		return "no state change (NOP)";
	case IBV_PORT_DOWN:		return "down";
	case IBV_PORT_INIT:		return "init";
	case IBV_PORT_ARMED:		return "armed";
	case IBV_PORT_ACTIVE:		return "active";
	case IBV_PORT_ACTIVE_DEFER:	return "active defer";
	}
	return "unknown";
}

/*
 * One row per IB static rate: the enum, its multiple of the 2.5 Gb/s base rate (0 where the
 * rate is not an integer multiple: the 64b/66b-coded FDR/EDR/HDR speeds), and its exact data
 * rate in Mb/s. All four conversions read this table, so they cannot disagree.
 */
static const struct {
	enum ibv_rate rate;
	int mult;
	int mbps;
} rate_table[] = {
	{ IBV_RATE_2_5_GBPS,	1,	2500 },
	{ IBV_RATE_5_GBPS,	2,	5000 },
	{ IBV_RATE_10_GBPS,	4,	10000 },
	{ IBV_RATE_20_GBPS,	8,	20000 },
	{ IBV_RATE_30_GBPS,	12,	30000 },
	{ IBV_RATE_40_GBPS,	16,	40000 },
	{ IBV_RATE_60_GBPS,	24,	60000 },
	{ IBV_RATE_80_GBPS,	32,	80000 },
	{ IBV_RATE_120_GBPS,	48,	120000 },
	{ IBV_RATE_14_GBPS,	0,	14062 },
	{ IBV_RATE_56_GBPS,	0,	56250 },
	{ IBV_RATE_112_GBPS,	0,	112500 },
	{ IBV_RATE_168_GBPS,	0,	168750 },
	{ IBV_RATE_25_GBPS,	0,	25781 },
	{ IBV_RATE_100_GBPS,	0,	103125 },
	{ IBV_RATE_200_GBPS,	0,	206250 },
	{ IBV_RATE_300_GBPS,	0,	309375 },
	{ IBV_RATE_28_GBPS,	11,	28125 },
	{ IBV_RATE_50_GBPS,	20,	53125 },
	{ IBV_RATE_400_GBPS,	160,	425000 },
	{ IBV_RATE_600_GBPS,	240,	637500 },
	{ IBV_RATE_800_GBPS,	320,	850000 },
	{ IBV_RATE_1200_GBPS,	480,	1275000 },
};

#define RATE_ROWS (sizeof(rate_table) / sizeof(rate_table[0]))

int ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < RATE_ROWS; i++)
		if (rate_table[i].rate == rate)
			return rate_table[i].mult ? rate_table[i].mult : -1;
	return -1;
}

enum ibv_rate mult_to_ibv_rate(int mult)
{
	if (mult <= 0)
		return IBV_RATE_MAX;
	for (size_t i = 0; i < RATE_ROWS; i++)
		if (rate_table[i].mult == mult)
			return rate_table[i].rate;
	return IBV_RATE_MAX;
}

int ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < RATE_ROWS; i++)
		if (rate_table[i].rate == rate)
			return rate_table[i].mbps;
	return -1;
}

enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < RATE_ROWS; i++)
		if (rate_table[i].mbps == mbps)
			return rate_table[i].rate;
	return IBV_RATE_MAX;
}

/*
 * Marshalling between the kernel's uverbs/ucma structures and the verbs ones. softrdma never
 * talks to a kernel, but librdmacm imports these, and they are plain field copies. Like
 * rdma-core, only the fields the kernel reports are written: qp_state and the attribute mask
 * stay the caller's (rdma_init_qp_attr callers set qp_state themselves).
 */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;

	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;

	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);

	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/*
 * The path record has the same fields on both sides, in a different order and with different
 * widths; one macro list drives both directions so that they stay mirror images.
 */
#define PATH_REC_SCALARS(X)                                                     \
	X(dlid) X(slid) X(raw_traffic) X(flow_label) X(hop_limit)              \
	X(traffic_class) X(reversible) X(numb_path) X(pkey) X(sl)              \
	X(mtu_selector) X(mtu) X(rate_selector) X(rate)                        \
	X(packet_life_time_selector) X(packet_life_time) X(preference)

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
#define COPY(f) dst->f = src->f;
	PATH_REC_SCALARS(COPY)
#undef COPY
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
#define COPY(f) dst->f = src->f;
	PATH_REC_SCALARS(COPY)
#undef COPY
}

/*
 * sysfs. softrdma's devices live in no sysfs, but librdmacm and tools still call these to read
 * real files (e.g. /sys/class/infiniband_verbs/abi_version), so they are real.
 */
static char sysfs_path[IBV_SYSFS_PATH_MAX + 1];
static pthread_once_t sysfs_path_once = PTHREAD_ONCE_INIT;

static void sysfs_path_init(void)
{
	/* secure_getenv: a set-uid program must not be steered by its caller's environment. */
	const char *env = secure_getenv("SYSFS_PATH");
	size_t len;

	if (!env) {
		strcpy(sysfs_path, "/sys");
		return;
	}
	snprintf(sysfs_path, sizeof(sysfs_path), "%s", env);
	len = strlen(sysfs_path);
	while (len > 0 && sysfs_path[len - 1] == '/')
		sysfs_path[--len] = '\0';
}

const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sysfs_path_once, sysfs_path_init);
	return sysfs_path;
}

/*
 * Reads dir/file into buf and NUL-terminates it, dropping one trailing newline. Returns the
 * length of the string, or -1 with errno set. A file that fills the whole buffer without a
 * newline to overwrite cannot be terminated, so it fails rather than returning a truncated,
 * unterminated string.
 */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	size_t len = 0;
	ssize_t n;
	int fd, saved;

	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return -1;

	while (len < size) {
		n = read(fd, buf + len, size - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			saved = errno;
			close(fd);
			errno = saved;
			return -1;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);

	if (len == 0)
		return 0;
	if (buf[len - 1] == '\n')
		buf[--len] = '\0';
	else if (len < size)
		buf[len] = '\0';
	else {
		errno = EOVERFLOW;
		return -1;
	}
	return (int)len;
}

/*
 * Fork. rdma-core needs MADV_DONTFORK so that a child's copy-on-write cannot move a page the
 * HCA is DMAing to. softrdma's engine reaches memory through the process's own virtual
 * addresses, so after a fork each side simply sees its own pages: nothing to set up.
 */
int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

int ibv_dontfork_range(void *base, size_t size)
{
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}

/*
 * Sharing objects between processes through the uverbs command fd, dma-buf memory and
 * kernel neighbour resolution all need a kernel device: not supported.
 */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* Nothing can have been imported, so there is nothing to release. */
void ibv_unimport_pd(struct ibv_pd *pd)
{
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
				 uint64_t iova, int fd, int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}
