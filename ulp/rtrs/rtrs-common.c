/* SPDX-License-Identifier: MIT */
/* Addresses and the counters file, shared by the RTRS client and server. */
#include "rtrs-common.h"

#include <poll.h>
#include <sched.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rtrs_parse_addr(const char *s, struct sockaddr_storage *ss, int passive)
{
	char host[256] = "", port[16] = "";
	const char *p;

	if (!s)
		return EINVAL;
	if (s[0] == '[') {
		p = strchr(s, ']');
		if (!p || (size_t)(p - s - 1) >= sizeof(host))
			return EINVAL;
		memcpy(host, s + 1, (size_t)(p - s - 1));
		p++;
		if (*p == ':')
			snprintf(port, sizeof(port), "%s", p + 1);
		else if (*p)
			return EINVAL;
	} else {
		p = strrchr(s, ':');
		if (p && strchr(s, ':') == p) {
			if ((size_t)(p - s) >= sizeof(host))
				return EINVAL;
			memcpy(host, s, (size_t)(p - s));
			snprintf(port, sizeof(port), "%s", p + 1);
		} else {
			if (strlen(s) >= sizeof(host))
				return EINVAL;
			snprintf(host, sizeof(host), "%s", s);
		}
	}
	if (!port[0])
		snprintf(port, sizeof(port), "%d", RTRS_DEFAULT_PORT);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = passive ? AI_PASSIVE : 0 }, *res;
	if (getaddrinfo(host[0] ? host : NULL, port, &hints, &res))
		return EINVAL;
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

void rtrs_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char h[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (!sa) {
		snprintf(buf, len, "-");
		return;
	}
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)sa;
		inet_ntop(AF_INET, &in->sin_addr, h, sizeof(h));
		port = ntohs(in->sin_port);
		snprintf(buf, len, "%s:%d", h, port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, h, sizeof(h));
		port = ntohs(in6->sin6_port);
		snprintf(buf, len, "[%s]:%d", h, port);
	} else {
		snprintf(buf, len, "-");
	}
}

const char *rtrs_state_name(int state)
{
	static const char *const n[] = { "connecting", "connected", "reconnecting", "dead",
					 "closed" };
	return state >= 0 && state <= 4 ? n[state] : "?";
}

void rtrs_stats_write(const char *dir, const char *kind, const char *name,
		      const struct rtrs_path_stats *st, int n)
{
	char path[512], tmp[540];
	FILE *f;

	if (!dir || !dir[0])
		return;
	snprintf(path, sizeof(path), "%s/rtrs-%d-%s-%s", dir, (int)getpid(), kind, name);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	for (int i = 0; i < n; i++) {
		const struct rtrs_path_stats *s = &st[i];
		fprintf(f,
			"%s %s sess=%s src=%s dst=%s state=%s inflight=%u reqs_read=%llu "
			"reqs_write=%llu bytes_read=%llu bytes_write=%llu failovers=%llu "
			"reconnects=%llu reconnect_attempts=%llu hb_sent=%llu hb_missed_total=%llu "
			"hb_rtt_us=%u hb_missed=%u errors=%llu bad_msgs=%llu rkey_renewals=%llu\n",
			kind, name, s->sessname, s->src, s->dst, rtrs_state_name(s->state),
			s->inflight, (unsigned long long)s->reqs_read,
			(unsigned long long)s->reqs_write, (unsigned long long)s->bytes_read,
			(unsigned long long)s->bytes_write, (unsigned long long)s->failovers,
			(unsigned long long)s->reconnects,
			(unsigned long long)s->reconnect_attempts, (unsigned long long)s->hb_sent,
			(unsigned long long)s->hb_missed_total, s->hb_rtt_us, s->hb_missed,
			(unsigned long long)s->errors, (unsigned long long)s->bad_msgs,
			(unsigned long long)s->rkey_renewals);
	}
	fclose(f);
	rename(tmp, path);
}
int rtrs_poll_us_default(void)
{
	const char *e = getenv("RTRS_POLL_US");
	if (e && *e) {
		char *end;
		long v = strtol(e, &end, 10);
		if (!*end && v >= -1 && v <= 1000000)
			return (int)v;
	}
	return RTRS_POLL_US_DEFAULT;
}

void rtrs_yield_while(volatile int *waiters, uint64_t ns)
{
	uint64_t t0 = rtrs_now_ns();
	while (__atomic_load_n(waiters, __ATOMIC_ACQUIRE) > 0 && rtrs_now_ns() - t0 < ns)
		sched_yield();
}

void rtrs_step_aside(pthread_mutex_t *mu, volatile int *waiters)
{
	if (__atomic_load_n(waiters, __ATOMIC_ACQUIRE) <= 0)
		return;
	pthread_mutex_unlock(mu);
	rtrs_yield_while(waiters, 100000);
	pthread_mutex_lock(mu);
}

void rtrs_loop_init(struct rtrs_loop *l, int poll_us)
{
	memset(l, 0, sizeof(*l));
	l->spin_ns = poll_us < 0 ? -1 : (int64_t)poll_us * 1000;
}

int rtrs_loop_begin(struct rtrs_loop *l, uint64_t now, int *look)
{
	int spin = l->spin_ns < 0 ||
		   (l->spin_ns > 0 && now < l->busy_until && now >= l->sp.backoff_until);
	int ms = now - l->last_fds >= 1000000ull;

	if (spin && l->spin_ns > 0 && ms)
		rtrs_spin_check(&l->sp, now);	/* may start a back-off: polls once more */
	if (!spin)
		l->sp.win_wall = 0;
	*look = !spin || ms;
	return spin;
}

void rtrs_loop_busy(struct rtrs_loop *l, int got)
{
	if (got && l->spin_ns > 0)
		l->busy_until = rtrs_now_ns() + (uint64_t)l->spin_ns;
}

#define RTRS_LOOP_MAX_CCH 16
int rtrs_loop_wait(struct rtrs_loop *l, pthread_mutex_t *mu, int cm_fd, int efd,
		   struct ibv_comp_channel *const *cch, int ncch, int timeout, int *sleeping)
{
	struct pollfd pf[2 + RTRS_LOOP_MAX_CCH];
	int n = 0;

	if (ncch > RTRS_LOOP_MAX_CCH)
		ncch = RTRS_LOOP_MAX_CCH;
	pf[n++] = (struct pollfd){ cm_fd, POLLIN, 0 };
	pf[n++] = (struct pollfd){ efd, POLLIN, 0 };
	for (int i = 0; i < ncch; i++)
		pf[n++] = (struct pollfd){ cch[i]->fd, POLLIN, 0 };
	if (sleeping)
		*sleeping = timeout > 0;
	pthread_mutex_unlock(mu);
	poll(pf, (nfds_t)n, timeout);
	pthread_mutex_lock(mu);
	if (sleeping)
		*sleeping = 0;
	l->last_fds = rtrs_now_ns();
	if (pf[1].revents & POLLIN) {
		uint64_t v;
		if (read(efd, &v, sizeof(v)) < 0) {
			/* EAGAIN: another look took it */
		}
	}
	for (int i = 0; i < ncch; i++) {
		struct ibv_cq *cq;
		void *cctx;
		if (!(pf[2 + i].revents & POLLIN))
			continue;
		while (!ibv_get_cq_event(cch[i], &cq, &cctx))
			ibv_ack_cq_events(cq, 1);
	}
	return !!(pf[0].revents & POLLIN);
}

int rtrs_event_sleep_cq(void)
{
	const char *e = getenv("RTRS_EVENT_SLEEP");

	return !(e && !strcmp(e, "poll"));
}

int rtrs_cq_wait(struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq;
	void *cctx;
	int old, r;

	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
	r = ibv_get_cq_event(ch, &cq, &cctx);
	pthread_setcancelstate(old, NULL);
	if (r)
		return errno ? errno : EIO;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

int rtrs_cq_take(struct ibv_comp_channel *ch)
{
	int fl = fcntl(ch->fd, F_GETFL);
	struct ibv_cq *cq;
	void *cctx;
	int err = 0;

	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK))
		return errno ? errno : EIO;
	while (!ibv_get_cq_event(ch, &cq, &cctx))
		ibv_ack_cq_events(cq, 1);
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		err = errno ? errno : EIO;
	fcntl(ch->fd, F_SETFL, fl);
	return err;
}

struct ibv_comp_channel *rtrs_chan_open(struct ibv_context *dev, int sleep,
					void *(*start)(void *), void *owner,
					struct rtrs_chan_thr **thr)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(dev);
	struct rtrs_chan_thr *t;

	*thr = NULL;
	if (!ch)
		return NULL;
	if (!sleep) {
		fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
		return ch;
	}
	t = calloc(1, sizeof(*t));
	if (t) {
		t->owner = owner;
		t->ch = ch;
	}
	if (!t || pthread_create(&t->thr, NULL, start, t)) {
		free(t);
		ibv_destroy_comp_channel(ch);
		return NULL;
	}
	*thr = t;
	return ch;
}

void rtrs_chan_thr_stop(struct rtrs_chan_thr **t)
{
	if (!*t)
		return;
	pthread_cancel((*t)->thr);
	pthread_join((*t)->thr, NULL);
	free(*t);
	*t = NULL;
}
