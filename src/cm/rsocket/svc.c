/* SPDX-License-Identifier: MIT */
/*
 * The service thread: answers what must be answered while the application is busy elsewhere.
 *
 * A datagram rsocket must answer the SIDR requests of peers resolving its address whether or
 * not its application is inside an rsocket call at that moment (a server may be computing, or
 * blocked on another socket; two sockets of one thread may even resolve each other). rdma-core
 * has a service thread for this too. One thread per process, started with the first datagram
 * socket, sleeps in epoll on the event channels of the datagram sockets and drains them under
 * each socket's lock. The sockets themselves still read their channel on every call; whoever
 * comes first handles an event.
 */
#include <stdlib.h>
#include <sys/epoll.h>

#include "cm/rsocket/rs.h"
#include "core/fd.h"
#include "core/sig.h"

static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static int svc_epfd = -1;

static void *svc_run(void *arg)
{
	struct epoll_event ev[16];

	(void)arg;
	for (;;) {
		int n = epoll_wait(svc_epfd, ev, 16, -1);

		for (int i = 0; i < n; i++) {
			struct rsock *rs = rs_get(ev[i].data.fd);

			if (!rs)
				continue;	/* closed meanwhile */
			pthread_mutex_lock(&rs->lock);
			if (rs->type == SOCK_DGRAM && !rs->closed)
				rs->ops->cm_drain(rs);
			pthread_mutex_unlock(&rs->lock);
			rs_put(rs);
		}
	}
	return NULL;
}

static int svc_start(void)
{
	pthread_attr_t at;
	pthread_t t;
	int ret;

	if (svc_epfd >= 0)
		return 0;
	svc_epfd = sr_fd_high(epoll_create1(EPOLL_CLOEXEC));
	if (svc_epfd < 0)
		return -errno;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	ret = sr_thread_create(&t, &at, svc_run, NULL);	/* core/sig.h */
	pthread_attr_destroy(&at);
	if (ret) {
		sys_close(svc_epfd);
		svc_epfd = -1;
		return -ret;
	}
	return 0;
}

int rs_svc_add(struct rsock *rs)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = rs->fd };
	int ret;

	pthread_mutex_lock(&svc_lock);
	ret = svc_start();
	if (!ret && epoll_ctl(svc_epfd, EPOLL_CTL_ADD, rs->fd, &ev))
		ret = -errno;
	pthread_mutex_unlock(&svc_lock);
	return ret;
}

void rs_svc_del(struct rsock *rs)
{
	pthread_mutex_lock(&svc_lock);
	if (svc_epfd >= 0)
		epoll_ctl(svc_epfd, EPOLL_CTL_DEL, rs->fd, NULL);
	pthread_mutex_unlock(&svc_lock);
}
