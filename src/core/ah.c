/* SPDX-License-Identifier: MIT */
/* Address vectors: what ibv_ah_attr means on a RoCEv2 port (always routed by GID). */
#include <errno.h>

#include "core/core.h"

int sr_ah_resolve(struct sr_nic *nic, const struct ibv_ah_attr *attr, struct sr_addr *dst)
{
	int ret;

	/* RoCE has no LIDs: an address vector without a GRH cannot be routed (as the kernel's
	 * rdma_check_ah_attr() refuses it on an Ethernet port). */
	if (!attr->is_global)
		return -EINVAL;
	if (attr->port_num != 1)
		return -EINVAL;
	if (attr->grh.sgid_index >= sr_gid_table_len(&nic->addr))
		return -EINVAL;
	ret = sr_addr_from_gid(dst, &attr->grh.dgid);
	if (ret)
		return ret;
	if (dst->family != nic->addr.family)
		return -EINVAL;	/* an IPv4 port cannot reach an IPv6 GID, nor the reverse */
	/* A GID of the standard form (::ffff:a.b.c.d, no port in it) with a dlid: the dlid is
	 * the port of a softrdma device that could not have 4791 on its address, which reports
	 * its port as its LID (docs/gid.md, "The LID carries the port"). A standard RoCE peer
	 * reports LID 0. */
	if (dst->family == AF_INET && !sr_gid_port(&attr->grh.dgid) && sr_lid_port(attr->dlid))
		dst->port = sr_lid_port(attr->dlid);
	return 0;
}
