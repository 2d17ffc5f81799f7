/* SPDX-License-Identifier: MIT */
/*
 * Prototypes of names libibverbs.so.1 exports but the installed rdma-core headers do not
 * declare: rdma-core keeps them in its private marshall.h and driver.h, which Debian does not
 * install, yet librdmacm and the providers import them. Signatures are those of rdma-core 44.
 */
#ifndef SR_VERBS_ABI_H
#define SR_VERBS_ABI_H

#include <stddef.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/* Kernel (uverbs/ucma) structures to verbs structures and back; used by librdmacm. */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

/* sysfs helpers. */
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

/* madvise(MADV_DONTFORK) bookkeeping for pinned memory; softrdma needs none. */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

#endif /* SR_VERBS_ABI_H */
