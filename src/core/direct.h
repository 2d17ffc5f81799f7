/* SPDX-License-Identifier: MIT */
/*
 * The same-host direct path's shared table (docs/direct.md): its format, and what its owner
 * (core/direct.c: published under the objects' locks) and requesters (transport/direct.c:
 * read lock-free) both use. Entries are seqlocks.
 */
#ifndef SR_CORE_DIRECT_H
#define SR_CORE_DIRECT_H

#include <stdatomic.h>
#include <string.h>

#include "core/core.h"

#define DIRECT_MAGIC 0x54445253u	/* "SRDT" */
#define DIRECT_VERSION 3u	/* 3: memory windows (dkey_data.qpn) */

struct dhdr {
	uint32_t magic, version;
	uint64_t pid;
	uint64_t start;			/* the owner's start time (/proc/<pid>/stat field 22) */
	uint64_t pidns;			/* the owner's pid namespace (inode): pid means that */
	uint32_t nqp, nkey;		/* entries (powers of two: the table sizes) */
	uint64_t qp_off, key_off;	/* byte offsets of the entry arrays */
	_Atomic uint32_t open;		/* 1 while the NIC serves; 0 once it closed */
};

struct dqp_data {
	uint32_t qpn;			/* 0: no RC QP at this index */
	uint32_t dest_qpn;
	uint32_t access;		/* qp_access_flags */
	uint8_t state;
	uint64_t pd;
	struct sr_addr peer;
};
struct dqp {
	_Atomic uint32_t seq;		/* odd while being written */
	struct dqp_data d;
};

struct dkey_data {
	uint32_t key;			/* the rkey; 0: nothing usable at this index */
	uint32_t qpn;			/* a type 2 window's QP (the only one it serves); 0: any
					 * QP of the PD (an MR, a type 1 window) */
	uint32_t access;
	uint64_t pd;
	uint64_t iova, len;
	uint64_t base;			/* where iova is in the owner's memory */
};
struct dkey {
	_Atomic uint32_t seq;
	_Atomic uint32_t busy;		/* requesters copying through this key right now */
	struct dkey_data d;
};

struct sr_dpeer {
	struct sr_addr addr;
	struct dhdr *map;		/* NULL: no usable table (retry after retry_ns) */
	size_t len;
	pid_t pid;
	uint64_t start;			/* the owner's start time, as mapped */
	dev_t fdev;			/* the file mapped */
	ino_t ino;
	uint32_t nqp, nkey;		/* the table's geometry, validated once at open */
	uint64_t qp_off, key_off;
	uint64_t retry_ns;		/* not mapped: look again after this */
	uint64_t refused_until;		/* EPERM: packets until then (the mapping is kept) */
	uint64_t checked_ns;		/* last time the owner was seen alive */
	struct sr_dpeer *next;
};

struct sr_direct {
	bool use;			/* this NIC may go direct as a requester */
	char path[448];			/* our exported table ("" if none) */
	struct dhdr *map;
	size_t len;
	unsigned long long netns;	/* this process's network and pid namespaces (inodes) */
	unsigned long long pidns;
	pthread_mutex_t lock;		/* peers (a leaf lock) */
	struct sr_dpeer *peers;
	struct sr_dpeer *dead;		/* replaced mappings: another thread may still copy */
};

/* Seqlock writes (the owner, under the object's lock) and reads (requesters, lock-free). */
static inline void seq_write_begin(_Atomic uint32_t *s)
{
	atomic_store_explicit(s, atomic_load_explicit(s, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static inline void seq_write_end(_Atomic uint32_t *s)
{
	atomic_fetch_add_explicit(s, 1, memory_order_release);
}

/* A consistent copy of an entry, or false when its owner keeps writing it. */
static inline bool seq_read(_Atomic uint32_t *s, const void *src, void *dst, size_t n)
{
	for (int tries = 0; tries < 64; tries++) {
		uint32_t a = atomic_load_explicit(s, memory_order_acquire);

		if (a & 1)
			continue;
		memcpy(dst, (const void *)src, n);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(s, memory_order_relaxed) == a)
			return true;
	}
	return false;
}

static inline struct dqp *qp_ent(struct dhdr *h, uint32_t idx)
{
	return (struct dqp *)((uint8_t *)h + h->qp_off) + idx;
}

static inline struct dkey *key_ent(struct dhdr *h, uint32_t idx)
{
	return (struct dkey *)((uint8_t *)h + h->key_off) + idx;
}

/* Field 22 of /proc/<pid>/stat: the start time, which tells a reused pid from its owner. */
uint64_t sr_direct_proc_start(pid_t pid);
/* The table's file name for the NIC at address a, in the shm directory (sr_shm_dir_open). */
int sr_direct_table_name(const struct sr_direct *d, const struct sr_addr *a, char *buf,
			 size_t len);

#endif /* SR_CORE_DIRECT_H */
