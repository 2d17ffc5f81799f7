/* SPDX-License-Identifier: MIT */
/*
 * Entry points for softrdma's own librdmacm (version node SOFTRDMA_PRIVATE_1): not an API for
 * applications, and librdmacm reaches them through weak references so it does not depend on
 * them.
 */
#include <string.h>

#include "verbs/verbs.h"

/* Adds n to the counter called `name` (src/core/stats.h) of ctx's soft NIC. */
void sr_priv_stat_add(struct ibv_context *ctx, const char *name, uint64_t n);
void sr_priv_stat_add(struct ibv_context *ctx, const char *name, uint64_t n)
{
	if (!ctx || !name)
		return;
	for (int k = 0; k < SR_STAT_MAX; k++) {
		if (!strcmp(sr_stat_name[k], name)) {
			sr_stat_add(&sr_ctx(ctx)->nic->stats, (enum sr_stat)k, n);
			return;
		}
	}
}
