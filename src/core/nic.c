/* SPDX-License-Identifier: MIT */
/*
 * What every layer may do to the soft NIC object without knowing who serves it: ring its
 * doorbell (sr_nic_kick: the wake-up eventfd that the engine's progress thread sleeps on) and
 * put a QP on its timer list (sr_timer_arm: the engine's timer pass walks it). Both are object
 * state with a wake-up; neither calls above core (docs/architecture.md, "Layers").
 */
#include <endian.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "core/log.h"

__thread uint64_t sr_drain_clock;	/* core.h, sr_drain_now_ns */

/* ibv_get_device_guid: 02:'S':'R':index then the pid: each process has its own soft NIC. */
__be64 sr_device_guid(const struct sr_device *d)
{
	uint64_t g = 0x0253520000000000ull | ((uint64_t)(uint8_t)d->index << 32) |
		     (uint32_t)getpid();

	return htobe64(g);
}

void sr_nic_kick(struct sr_nic *nic)
{
	uint64_t one = 1;

	/* A raw write: libc's is a cancellation point, and the receive path rings the doorbell
	 * under the receive lock (engine/nic.c, sr_nic_poll_at). */
	(void)syscall(SYS_write, nic->evfd, &one, sizeof(one));
}

/* Registers qp for timer service (qp lock held); wakes the thread if it sleeps. */
void sr_timer_arm(struct sr_qp *qp)
{
	struct sr_nic *nic = qp->nic;
	bool wake = false;

	if (qp->on_timer_list)
		return;
	pthread_mutex_lock(&nic->timer_lock);
	if (nic->ntimer == nic->timer_cap) {
		uint32_t cap = nic->timer_cap ? nic->timer_cap * 2 : 64;
		struct sr_qp **n = realloc(nic->timer_qps, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&nic->timer_lock);
			sr_err("qp#%u: no memory for a timer; retransmission disabled", sr_qpn(qp));
			return;
		}
		nic->timer_qps = n;
		nic->timer_cap = cap;
	}
	sr_qp_ref(qp);
	nic->timer_qps[nic->ntimer++] = qp;
	qp->on_timer_list = true;
	if (atomic_load(&nic->sleeping)) {
		atomic_store(&nic->sleeping, false);
		wake = true;
	}
	pthread_mutex_unlock(&nic->timer_lock);
	if (wake)
		sr_nic_kick(nic);
}
