/* SPDX-License-Identifier: MIT */
/*
 * The CM's state at the bottom of librdmacm's own files: the process-wide CM (struct
 * cm_global), its clock, the random numbers it draws, and ids (allocation, communication ids,
 * starting PSNs). The exported calls (api.c), the CM's state machines (cm.c, ibcm/drive.c) and
 * the QP glue (qp.c) all use these, and this file uses none of them (docs/architecture.md,
 * "Layers").
 */
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

#include "cm/cm.h"

struct cm_global cm = { .lock = PTHREAD_MUTEX_INITIALIZER };

uint64_t cm_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint32_t cm_rand32(void)
{
	uint32_t v;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)cm_now_ms() * 2654435761u;
	return v;
}

/* The id's starting send PSN, chosen once: an application that moves its own QP (an external
 * QP) asks rdma_init_qp_attr for RTS before rdma_accept, and the REP must then name the PSN
 * that QP was given. Called with cm.lock held. */
uint32_t cm_my_psn(struct cm_id *id)
{
	if (!id->my_psn_set) {
		id->my_psn = cm_rand32() & 0xffffff;
		id->my_psn_set = true;
	}
	return id->my_psn;
}

/* Communication ids start at a random value: a stale message of an earlier process on the
 * same port misses. 0 is never used (it means "not known yet" in messages). */
uint32_t cm_new_local_id(void)
{
	uint32_t v;

	if (!cm.next_local_id)
		cm.next_local_id = cm_rand32();
	v = cm.next_local_id++;
	return v ? v : cm.next_local_id++;
}

/* ---- ids --------------------------------------------------------------------------------------- */
struct cm_id *cm_id_alloc(struct cm_channel *ch, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qpt)
{
	struct cm_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->chan = ch;
	id->id.channel = ch->sync ? NULL : &ch->ch;
	id->id.context = context;
	id->id.ps = ps;
	id->id.qp_type = qpt;
	id->local_id = cm_new_local_id();
	id->state = CM_IDLE;
	id->retry_count = 7;
	id->rnr_retry_count = 7;
	id->path_mtu = IBV_MTU_1024;
	pthread_cond_init(&id->cond, NULL);
	id->next = cm.ids;
	cm.ids = id;
	return id;
}

void cm_fill_path(struct cm_id *id, const union ibv_gid *dgid, enum ibv_mtu mtu)
{
	struct ibv_sa_path_rec *p = id->id.route.path_rec;

	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return;
		id->id.route.path_rec = p;
	}
	id->id.route.num_paths = 1;
	p->sgid = id->dev->gid;
	/* The peer's data-plane GID, when known (a passive side has it from the REQ); an active
	 * side learns it at connection time, and until then the path names the peer's IP. */
	if (dgid) {
		p->dgid = *dgid;
	} else if (id->id.route.addr.dst_addr.sa_family == AF_INET) {
		memset(p->dgid.raw, 0, 10);
		p->dgid.raw[10] = p->dgid.raw[11] = 0xff;
		memcpy(&p->dgid.raw[12], &id->id.route.addr.dst_sin.sin_addr, 4);
	} else {
		memcpy(p->dgid.raw, &id->id.route.addr.dst_sin6.sin6_addr, 16);
	}
	p->pkey = htobe16(0xffff);
	p->mtu = (uint8_t)mtu;
	p->mtu_selector = 2;	/* exactly */
	p->hop_limit = 64;
	p->reversible = 1;
	p->numb_path = 1;
	p->packet_life_time = 14;
}
