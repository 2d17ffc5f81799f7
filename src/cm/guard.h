/* SPDX-License-Identifier: MIT */
/*
 * The CM's guardian (docs/cm.md, "A process that dies"): a small process that outlives a
 * softrdma process speaking the IB CM and sends the DREQs of its connections when it dies,
 * whatever ends it (exit, a signal, SIGKILL), as the kernel does for a process whose rdma_cm
 * ids live in the kernel. The library keeps, in a shared memory file, the DREQ of every IB CM
 * connection that is up (guard.c); the guardian (tools/cm-guard.c, installed beside
 * librdmacm.so.1 as softrdma-cm-guard) waits for the end of a pipe only the process holds,
 * then sends them from a soft NIC of its own.
 */
#ifndef SR_CM_GUARD_H
#define SR_CM_GUARD_H

#include <stdint.h>

#include "wire/mad.h"

#define CM_GUARD_MAGIC 0x53524347u	/* "SRCG" */
#define CM_GUARD_SLOTS 1024
#define CM_GUARD_HELPER "softrdma-cm-guard"
/* The guardian's file descriptors: the pipe's read end and the table. */
#define CM_GUARD_FD_PIPE 3
#define CM_GUARD_FD_TABLE 4

/* One connection. `seq` is odd while the process writes the slot (a slot caught half written
 * by a SIGKILL is skipped); `used` says the connection is up. */
struct cm_guard_slot {
	volatile uint32_t seq;
	volatile uint32_t used;
	uint32_t local_id;		/* our communication ID (a DREP names it) */
	uint32_t pad;
	uint8_t local_gid[16];		/* the device the connection runs on */
	uint8_t peer_gid[16];		/* the peer's QP1 */
	uint8_t dreq[SR_MAD_LEN];	/* the DREQ, in wire form */
};

struct cm_guard_table {
	uint32_t magic, nslots;
	uint32_t pad[14];
	struct cm_guard_slot slot[CM_GUARD_SLOTS];
};

#endif /* SR_CM_GUARD_H */
