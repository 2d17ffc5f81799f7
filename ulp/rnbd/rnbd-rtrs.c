/* SPDX-License-Identifier: MIT */
/*
 * The client's RTRS transport: one RTRS session of all the paths; each RNBD message is one
 * RTRS request (READ: the answer lands in the buffer; WRITE: the buffer is carried), as the
 * kernel's rnbd-clt sends them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-clt.h"
#include "rtrs.h"

struct rx {
	struct rtrs_clt *clt;
	struct rtrs_attrs attrs;
	pthread_mutex_t lock;		/* the link callback */
	void (*link_fn)(void *arg, int ev);
	void *link_arg;
	unsigned poll_us;		/* rtrs_clt_poll's budget; 0: the event thread answers */
};

/* RTRS's session events (its event thread) to the client's callback. */
static void rx_link_ev(void *priv, enum rtrs_clt_link_ev ev)
{
	struct rx *x = priv;

	pthread_mutex_lock(&x->lock);
	if (x->link_fn)
		x->link_fn(x->link_arg, ev == RTRS_CLT_LINK_EV_DISCONNECTED ? RNBD_LINK_DOWN :
							    RNBD_LINK_UP);
	pthread_mutex_unlock(&x->lock);
}

static void rx_set_link_cb(void *ctx, void (*fn)(void *arg, int ev), void *arg)
{
	struct rx *x = ctx;

	pthread_mutex_lock(&x->lock);
	x->link_fn = fn;
	x->link_arg = arg;
	pthread_mutex_unlock(&x->lock);
}

static const char *path_state_str(int s)
{
	static const char *const n[] = { "connecting", "connected", "reconnecting", "dead",
					 "closed" };
	return s >= 0 && s < 5 ? n[s] : "?";
}

/* One line per path: RTRS's counters (requests, bytes, fail-overs, reconnects, errors). */
static void rx_stats(void *ctx, FILE *f)
{
	struct rx *x = ctx;
	struct rtrs_path_stats ps[16];
	int n = rtrs_clt_path_stats(x->clt, ps, 16);

	for (int i = 0; i < n && i < 16; i++)
		fprintf(f, "path %d dst %s src %s state %s inflight %u reqs_read %llu "
			"reqs_write %llu bytes_read %llu bytes_write %llu failovers %llu "
			"reconnects %llu errors %llu hb_rtt_us %u hb_missed_total %llu\n", i,
			ps[i].dst, ps[i].src, path_state_str(ps[i].state), ps[i].inflight,
			(unsigned long long)ps[i].reqs_read, (unsigned long long)ps[i].reqs_write,
			(unsigned long long)ps[i].bytes_read, (unsigned long long)ps[i].bytes_write,
			(unsigned long long)ps[i].failovers, (unsigned long long)ps[i].reconnects,
			(unsigned long long)ps[i].errors, ps[i].hb_rtt_us,
			(unsigned long long)ps[i].hb_missed_total);
}

static int rx_request(void *ctx, int dir, const void *usr, size_t usrlen, void *data,
		      size_t datalen, rnbd_done_fn done, void *priv)
{
	struct rx *x = ctx;
	struct iovec iov = { .iov_base = data, .iov_len = datalen };
	int rc;

	/* done takes 0 or an errno of either sign (rnbd-clt's waiter), as rtrs_conf_fn gives */
	rc = rtrs_clt_request(x->clt, dir == RNBD_DIR_READ ? RTRS_READ : RTRS_WRITE, done, priv,
			      usr, usrlen, datalen ? &iov : NULL, datalen ? 1 : 0,
			      x->poll_us ? RTRS_REQ_POLL : 0);
	return rc ? -rc : 0;
}

/* rnbd-clt waits for every request it sends (waiter_wait_on): with RTRS_REQ_POLL the thread
 * that waits takes the answer itself, when its request is alone in flight. */
static int rx_poll(void *ctx, int (*done)(void *arg), void *arg)
{
	struct rx *x = ctx;

	return x->poll_us ? rtrs_clt_poll(x->clt, done, arg, x->poll_us) : EBUSY;
}

static uint32_t rx_max_io(void *ctx)
{
	struct rx *x = ctx;

	return x->attrs.max_io_size;
}

static void rx_close(void *ctx)
{
	struct rx *x = ctx;

	rtrs_clt_close(x->clt);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

static const struct rnbd_xport_ops rx_ops = {
	.request = rx_request,
	.max_io = rx_max_io,
	.close = rx_close,
	.set_link_cb = rx_set_link_cb,
	.stats = rx_stats,
	.poll = rx_poll,
};

int rnbd_rtrs_new(const char *sessname, const char *const *paths, size_t n,
		  const struct rnbd_rtrs_opts *ro, const struct rnbd_xport_ops **ops, void **ctx)
{
	struct rtrs_path_addr pa[16];
	struct rtrs_clt_opts o;
	struct rx *x;
	int rc;

	if (n == 0 || n > 16)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {	/* "SRC@DST" or "DST" */
		const char *at = strchr(paths[i], '@');
		if (at) {
			char *src = strndup(paths[i], at - paths[i]);
			pa[i] = (struct rtrs_path_addr){ .src = src, .dst = at + 1 };
		} else {
			pa[i] = (struct rtrs_path_addr){ .src = NULL, .dst = paths[i] };
		}
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		rc = -ENOMEM;
		goto free_src;
	}
	pthread_mutex_init(&x->lock, NULL);
	x->poll_us = ro->wait_poll_us < 0 ? RNBD_WAIT_POLL_US_DEFAULT : (unsigned)ro->wait_poll_us;
	rtrs_clt_opts_init(&o);
	o.stats_dir = ro->stats_dir;
	o.link_ev = rx_link_ev;
	o.priv = x;
	if (ro->fail_timeout_ms)
		o.fail_timeout_ms = ro->fail_timeout_ms;
	if (ro->hb_interval_ms)
		o.hb_interval_ms = ro->hb_interval_ms;
	if (ro->hb_missed_max)
		o.hb_missed_max = ro->hb_missed_max;
	if (ro->reconnect_delay_ms)
		o.reconnect_delay_ms = ro->reconnect_delay_ms;
	/* nbdkit's workers submit one request each and need the CPUs that a polling RTRS
	 * thread would take (docs/rnbd.md, "Sixth pass") */
	o.poll_inflight_max = ro->poll_inflight_max < 0 ? RNBD_POLL_INFLIGHT_MAX_DEFAULT :
			      (unsigned)ro->poll_inflight_max;
	x->clt = rtrs_clt_open(sessname, pa, n, &o);
	if (!x->clt) {
		rc = -errno;
		pthread_mutex_destroy(&x->lock);
		free(x);
		goto free_src;
	}
	rc = rtrs_clt_query(x->clt, &x->attrs);
	if (rc) {
		rtrs_clt_close(x->clt);
		pthread_mutex_destroy(&x->lock);
		free(x);
		rc = -rc;
		goto free_src;
	}
	/* the callers' buffers (nbdkit's, allocated per request) in place: all memory registered
	 * with implicit On-Demand Paging; a device without it (EINVAL, EOPNOTSUPP) leaves every
	 * request to RTRS's bounce copy, as before */
	if (!ro->no_zero_copy) {
		int zrc = rtrs_clt_reg_buf(x->clt, NULL, SIZE_MAX);
		if (zrc)
			fprintf(stderr, "rnbd: %s: zero copy off (implicit ODP: %s)\n", sessname,
				strerror(zrc));
	}
	*ops = &rx_ops;
	*ctx = x;
free_src:
	for (size_t i = 0; i < n; i++)
		free((char *)pa[i].src);
	return rc;
}
