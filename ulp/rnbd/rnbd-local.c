/* SPDX-License-Identifier: MIT */
/*
 * The in-process transport: the client's messages go by function call to a server
 * (rnbd-srv.c) in this process. The data buffers are the client's own, where RTRS would copy
 * them into the server's chunks; everything else (parsing, device layer, answers) is the
 * server's real path.
 */
#include <errno.h>
#include <stdlib.h>

#include "rnbd-clt.h"
#include "rnbd-srv.h"

struct local {
	struct rnbd_store *st;		/* NULL: the caller's */
	struct rnbd_srv_sess *sess;
};

static int local_request(void *ctx, int dir, const void *usr, size_t usrlen, void *data,
			 size_t datalen, rnbd_done_fn done, void *priv)
{
	struct local *l = ctx;

	rnbd_srv_process(l->sess, dir, usr, usrlen, data, datalen, done, priv);
	return 0;
}

static uint32_t local_max_io(void *ctx) { return 128 * 1024; }

static void local_close(void *ctx)
{
	struct local *l = ctx;

	rnbd_srv_sess_free(l->sess);
	if (l->st)
		rnbd_store_free(l->st);
	free(l);
}

static const struct rnbd_xport_ops local_ops = {
	.request = local_request,
	.max_io = local_max_io,
	.close = local_close,
};

int rnbd_local_new(const char *search_path, const char *sessname,
		   const struct rnbd_xport_ops **ops, void **ctx)
{
	struct rnbd_store_opts o = { .search_path = search_path, .max_io_bytes = 128 * 1024 };
	struct local *l = calloc(1, sizeof(*l));
	int rc;

	if (!l)
		return -ENOMEM;
	rc = rnbd_store_new(&o, &l->st);
	if (!rc) {
		rc = rnbd_srv_sess_new(l->st, sessname, &l->sess);
		if (rc)
			rnbd_store_free(l->st);
	}
	if (rc) {
		free(l);
		return rc;
	}
	*ops = &local_ops;
	*ctx = l;
	return 0;
}

int rnbd_local_new_on(struct rnbd_store *st, const char *sessname,
		      const struct rnbd_xport_ops **ops, void **ctx)
{
	struct local *l = calloc(1, sizeof(*l));
	int rc;

	if (!l)
		return -ENOMEM;
	rc = rnbd_srv_sess_new(st, sessname, &l->sess);
	if (rc) {
		free(l);
		return rc;
	}
	*ops = &local_ops;
	*ctx = l;
	return 0;
}
