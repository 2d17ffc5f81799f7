/* SPDX-License-Identifier: MIT */
/*
 * UD multicast (IBA 10.5): a multicast GID is an IP multicast group. On RoCEv2 over IPv4 the
 * GID of group 239.x.y.z is ::ffff:239.x.y.z. Attaching the first QP to a group opens a UDP
 * socket bound to the group address at 4791 (SO_REUSEADDR: every process of the host with a
 * member gets a copy) and joins the group on the NIC's interface; a packet for the multicast
 * QPN 0xffffff that arrives on it goes to every QP attached to the group. Sending needs
 * nothing special: a UD AH whose GID is a group sends to the group address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "core/core.h"
#include "core/log.h"
#include "engine/engine.h"
#include "net/net.h"
#include "transport/transport.h"
#include "wire/pkt.h"

bool sr_gid_is_mcast(const union ibv_gid *gid)
{
	static const uint8_t zero10[10];

	if (!memcmp(gid->raw, zero10, 10) && gid->raw[10] == 0xff && gid->raw[11] == 0xff)
		return (gid->raw[12] & 0xf0) == 0xe0;	/* 224.0.0.0/4 */
	return gid->raw[0] == 0xff;			/* ff00::/8 */
}

static struct sr_mcast *find(struct sr_nic *nic, const union ibv_gid *gid)
{
	for (struct sr_mcast *m = nic->mcast; m; m = m->next)
		if (!memcmp(&m->gid, gid, sizeof(*gid)))
			return m;
	return NULL;
}

int sr_mcast_attach(struct sr_qp *qp, const union ibv_gid *gid)
{
	struct sr_nic *nic = qp->nic;
	struct sr_mcast *m;
	int ret = 0;

	if (qp->type != IBV_QPT_UD || !sr_gid_is_mcast(gid))
		return -EINVAL;
	/* Lock order rx_lock -> mcast_lock: a group socket is never closed while received on. */
	pthread_mutex_lock(&nic->rx_lock);
	pthread_mutex_lock(&nic->mcast_lock);
	m = find(nic, gid);
	if (!m) {
		m = calloc(1, sizeof(*m));
		if (!m) {
			ret = -ENOMEM;
			goto out;
		}
		m->gid = *gid;
		if (sr_addr_from_gid(&m->addr, gid) || m->addr.family != nic->addr.family) {
			free(m);
			ret = -EINVAL;
			goto out;
		}
		m->fd = sr_net_mcast_open(nic, &m->addr);
		if (m->fd < 0) {
			ret = m->fd;
			free(m);
			goto out;
		}
		m->next = nic->mcast;
		nic->mcast = m;
	}
	for (uint32_t i = 0; i < m->nqp; i++)
		if (m->qps[i] == qp)
			goto out;	/* attaching twice is not an error (IBA 11.3.2?) */
	if (m->nqp == m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 4;
		struct sr_qp **q = realloc(m->qps, cap * sizeof(*q));

		if (!q) {
			ret = -ENOMEM;
			goto out;
		}
		m->qps = q;
		m->cap = cap;
	}
	sr_qp_ref(qp);
	m->qps[m->nqp++] = qp;
out:
	pthread_mutex_unlock(&nic->mcast_lock);
	pthread_mutex_unlock(&nic->rx_lock);
	return ret;
}

static void group_free(struct sr_nic *nic, struct sr_mcast *m)
{
	for (struct sr_mcast **p = &nic->mcast; *p; p = &(*p)->next) {
		if (*p == m) {
			*p = m->next;
			break;
		}
	}
	epoll_ctl(nic->epfd, EPOLL_CTL_DEL, m->fd, NULL);
	close(m->fd);
	free(m->qps);
	free(m);
}

static int detach(struct sr_nic *nic, struct sr_mcast *m, struct sr_qp *qp)
{
	for (uint32_t i = 0; i < m->nqp; i++) {
		if (m->qps[i] == qp) {
			m->qps[i] = m->qps[--m->nqp];
			sr_qp_put(qp);
			if (!m->nqp)
				group_free(nic, m);
			return 0;
		}
	}
	return -EINVAL;
}

int sr_mcast_detach(struct sr_qp *qp, const union ibv_gid *gid)
{
	struct sr_nic *nic = qp->nic;
	struct sr_mcast *m;
	int ret;

	pthread_mutex_lock(&nic->rx_lock);
	pthread_mutex_lock(&nic->mcast_lock);
	m = find(nic, gid);
	ret = m ? detach(nic, m, qp) : -EINVAL;
	pthread_mutex_unlock(&nic->mcast_lock);
	pthread_mutex_unlock(&nic->rx_lock);
	return ret;
}

void sr_mcast_detach_all(struct sr_qp *qp)
{
	struct sr_nic *nic = qp->nic;

	pthread_mutex_lock(&nic->rx_lock);
	pthread_mutex_lock(&nic->mcast_lock);
	for (struct sr_mcast *m = nic->mcast, *n; m; m = n) {
		n = m->next;
		detach(nic, m, qp);
	}
	pthread_mutex_unlock(&nic->mcast_lock);
	pthread_mutex_unlock(&nic->rx_lock);
}

void sr_mcast_rcv(struct sr_nic *nic, int fd, struct sr_pkt *pkt, const struct sr_addr *src)
{
	struct sr_qp *qps[64];
	uint32_t n = 0;

	if (!(pkt->mask & SR_M_UD)) {
		sr_stat_inc(&nic->stats, SR_STAT_drop_qp_type);
		return;
	}
	pthread_mutex_lock(&nic->mcast_lock);
	for (struct sr_mcast *m = nic->mcast; m; m = m->next) {
		if (m->fd != fd)
			continue;
		for (uint32_t i = 0; i < m->nqp && n < 64; i++) {
			sr_qp_ref(m->qps[i]);
			qps[n++] = m->qps[i];
		}
	}
	pthread_mutex_unlock(&nic->mcast_lock);
	if (!n)
		sr_stat_inc(&nic->stats, SR_STAT_drop_qpn);
	for (uint32_t i = 0; i < n; i++) {
		pthread_mutex_lock(&qps[i]->lock);
		if (qps[i]->state == IBV_QPS_RTR || qps[i]->state == IBV_QPS_RTS ||
		    qps[i]->state == IBV_QPS_SQD || qps[i]->state == IBV_QPS_SQE)
			sr_ud_rcv(qps[i], pkt, src);
		else
			sr_stat_inc(&nic->stats, SR_STAT_drop_qp_state);
		pthread_mutex_unlock(&qps[i]->lock);
		sr_qp_put(qps[i]);
	}
}

void sr_mcast_poll(struct sr_nic *nic, int fd)
{
	struct sr_addr group;
	bool found = false;

	pthread_mutex_lock(&nic->rx_lock);
	pthread_mutex_lock(&nic->mcast_lock);
	for (struct sr_mcast *m = nic->mcast; m; m = m->next) {
		if (m->fd == fd) {
			group = m->addr;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&nic->mcast_lock);
	for (int budget = 0; found && budget < 16 && sr_net_rx_fd(nic, fd, &group) > 0; budget++)
		;
	pthread_mutex_unlock(&nic->rx_lock);
}
