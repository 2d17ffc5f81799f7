/* SPDX-License-Identifier: MIT */
/*
 * The client's RTRS transport: one RTRS session of all the paths; each RNBD message is one
 * RTRS request (READ: the answer lands in the buffer; WRITE: the buffer is carried), as the
 * kernel's rnbd-clt sends them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-clt.h"
#include "rtrs.h"

struct rx {
	struct rtrs_clt *clt;
	struct rtrs_attrs attrs;
};

static int rx_request(void *ctx, int dir, const void *usr, size_t usrlen, void *data,
		      size_t datalen, rnbd_done_fn done, void *priv)
{
	struct rx *x = ctx;
	struct iovec iov = { .iov_base = data, .iov_len = datalen };
	int rc;

	/* done takes 0 or an errno of either sign (rnbd-clt's waiter), as rtrs_conf_fn gives */
	rc = rtrs_clt_request(x->clt, dir == RNBD_DIR_READ ? RTRS_READ : RTRS_WRITE, done, priv,
			      usr, usrlen, datalen ? &iov : NULL, datalen ? 1 : 0, 0);
	return rc ? -rc : 0;
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
	free(x);
}

static const struct rnbd_xport_ops rx_ops = {
	.request = rx_request,
	.max_io = rx_max_io,
	.close = rx_close,
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
	rtrs_clt_opts_init(&o);
	o.stats_dir = ro->stats_dir;
	if (ro->hb_interval_ms)
		o.hb_interval_ms = ro->hb_interval_ms;
	if (ro->hb_missed_max)
		o.hb_missed_max = ro->hb_missed_max;
	if (ro->reconnect_delay_ms)
		o.reconnect_delay_ms = ro->reconnect_delay_ms;
	x->clt = rtrs_clt_open(sessname, pa, n, &o);
	if (!x->clt) {
		rc = -errno;
		free(x);
		goto free_src;
	}
	rc = rtrs_clt_query(x->clt, &x->attrs);
	if (rc) {
		rtrs_clt_close(x->clt);
		free(x);
		rc = -rc;
		goto free_src;
	}
	*ops = &rx_ops;
	*ctx = x;
free_src:
	for (size_t i = 0; i < n; i++)
		free((char *)pa[i].src);
	return rc;
}
