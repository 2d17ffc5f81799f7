/* SPDX-License-Identifier: MIT */
/*
 * Index tables. A key or QP number is an index into one of these plus random tag bits, so a
 * stale or guessed key misses even when its index is reused (see mr.c and qp.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "core/core.h"

int sr_table_init(struct sr_table *t, uint32_t size)
{
	uint32_t n = 2;

	while (n < size)
		n <<= 1;
	t->slot = calloc(n, sizeof(void *));
	if (!t->slot)
		return -ENOMEM;
	t->size = n;
	t->next_free_hint = 1;
	t->count = 0;
	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

void sr_table_destroy(struct sr_table *t)
{
	free(t->slot);
	t->slot = NULL;
	pthread_mutex_destroy(&t->lock);
}

int sr_table_add_locked(struct sr_table *t, void *obj)
{
	/* Index 0 is never used: a zero key or QPN 0 must never match anything. */
	for (uint32_t n = 0; n < t->size; n++) {
		uint32_t i = (t->next_free_hint + n) & (t->size - 1);

		if (i == 0 || t->slot[i])
			continue;
		t->slot[i] = obj;
		t->count++;
		/* Moving on instead of reusing at once keeps recently freed indexes cold. */
		t->next_free_hint = i + 1;
		return (int)i;
	}
	return -ENOMEM;
}

int sr_table_add(struct sr_table *t, void *obj)
{
	int ret;

	pthread_mutex_lock(&t->lock);
	ret = sr_table_add_locked(t, obj);
	pthread_mutex_unlock(&t->lock);
	return ret;
}

void sr_table_del(struct sr_table *t, uint32_t index)
{
	pthread_mutex_lock(&t->lock);
	if (index < t->size && t->slot[index]) {
		t->slot[index] = NULL;
		t->count--;
	}
	pthread_mutex_unlock(&t->lock);
}
