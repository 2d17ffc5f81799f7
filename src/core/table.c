/* SPDX-License-Identifier: MIT */
/*
 * Index tables. A key or QP number is an index into one of these plus random tag bits, so a
 * stale or guessed key misses even when its index is reused (see mr.c and qp.c).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "core/core.h"

int sr_table_init(struct sr_table *t, uint32_t size)
{
	uint32_t n = 2;

	while (n < size)
		n <<= 1;
	t->slot = calloc(n, sizeof(void *));
	t->busy = calloc(n, sizeof(*t->busy));
	if (!t->slot || !t->busy) {
		free(t->slot);
		free((void *)t->busy);
		t->slot = NULL;
		t->busy = NULL;
		return -ENOMEM;
	}
	t->size = n;
	t->next_free_hint = 1;
	t->count = 0;
	pthread_mutex_init(&t->lock, NULL);
	return 0;
}

void sr_table_destroy(struct sr_table *t)
{
	free(t->slot);
	free((void *)t->busy);
	t->slot = NULL;
	t->busy = NULL;
	pthread_mutex_destroy(&t->lock);
}

int sr_table_add_locked(struct sr_table *t, void *obj)
{
	/* Index 0 is never used: a zero key or QPN 0 must never match anything. */
	for (uint32_t n = 0; n < t->size; n++) {
		uint32_t i = (t->next_free_hint + n) & (t->size - 1);

		if (i == 0 || t->slot[i])
			continue;
		__atomic_store_n(&t->slot[i], obj, __ATOMIC_RELEASE);	/* sr_table_enter */
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

void sr_table_retire(struct sr_table *t, uint32_t index, void *tomb)
{
	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&t->slot[index], tomb, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&t->lock);
}

void sr_table_free_index(struct sr_table *t, uint32_t index)
{
	pthread_mutex_lock(&t->lock);
	__atomic_store_n(&t->slot[index], NULL, __ATOMIC_RELEASE);
	t->count--;
	pthread_mutex_unlock(&t->lock);
}

void sr_table_drain(struct sr_table *t, uint32_t index)
{
	atomic_thread_fence(memory_order_seq_cst);
	while (atomic_load(&t->busy[index]))
		sched_yield();
}
