/* SPDX-License-Identifier: MIT */
/*
 * The in-process transport: the client's messages go by function call to a server
 * (rnbd-srv.c) in this process. The data buffers are the client's own, where RTRS would copy
 * them into the server's chunks; everything else (parsing, device layer, answers) is the
 * server's real path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-clt.h"
#include "rnbd-srv.h"

struct local {
	struct rnbd_store *st;		/* NULL: the caller's */
	struct rnbd_store *srv_st;	/* the store the session is on */
	char sessname[256];
	pthread_rwlock_t lock;		/* sess (rnbd_local_sim replaces it) */
	struct rnbd_srv_sess *sess;	/* NULL: "every path down" */
	pthread_mutex_t cb_lock;
	void (*link_fn)(void *arg, int ev);
	void *link_arg;
};

static int local_request(void *ctx, int dir, const void *usr, size_t usrlen, void *data,
			 size_t datalen, rnbd_done_fn done, void *priv)
{
	struct local *l = ctx;
	int rc = 0;

	pthread_rwlock_rdlock(&l->lock);
	if (l->sess)
		rnbd_srv_process(l->sess, dir, usr, usrlen, data, datalen, done, priv);
	else
		rc = -ECONNABORTED;	/* what RTRS answers when no path comes back in time */
	pthread_rwlock_unlock(&l->lock);
	return rc;
}

static void local_set_link_cb(void *ctx, void (*fn)(void *arg, int ev), void *arg)
{
	struct local *l = ctx;

	pthread_mutex_lock(&l->cb_lock);
	l->link_fn = fn;
	l->link_arg = arg;
	pthread_mutex_unlock(&l->cb_lock);
}

static void local_event(struct local *l, int ev)
{
	pthread_mutex_lock(&l->cb_lock);
	if (l->link_fn)
		l->link_fn(l->link_arg, ev);
	pthread_mutex_unlock(&l->cb_lock);
}

int rnbd_local_sim(void *ctx, int what)
{
	struct local *l = ctx;
	struct rnbd_srv_sess *old = NULL, *s = NULL;
	int rc = 0;

	if (what != RNBD_LOCAL_DOWN) {
		rc = rnbd_srv_sess_new(l->srv_st, l->sessname, &s);
		if (rc)
			return rc;
	}
	pthread_rwlock_wrlock(&l->lock);
	if (what != RNBD_LOCAL_UP) {
		old = l->sess;
		l->sess = NULL;
	}
	if (s) {
		if (l->sess)	/* UP without a DOWN before: keep the session there is */
			old = l->sess;
		l->sess = s;
	}
	pthread_rwlock_unlock(&l->lock);
	rnbd_srv_sess_free(old);	/* closes its devices, as the server at DISCONNECTED */
	if (what == RNBD_LOCAL_DOWN)
		local_event(l, RNBD_LINK_DOWN);
	else if (what == RNBD_LOCAL_UP)
		local_event(l, RNBD_LINK_UP);
	return 0;
}

static uint32_t local_max_io(void *ctx) { return 128 * 1024; }

static void local_close(void *ctx)
{
	struct local *l = ctx;

	rnbd_srv_sess_free(l->sess);
	if (l->st)
		rnbd_store_free(l->st);
	pthread_rwlock_destroy(&l->lock);
	pthread_mutex_destroy(&l->cb_lock);
	free(l);
}

static const struct rnbd_xport_ops local_ops = {
	.request = local_request,
	.max_io = local_max_io,
	.close = local_close,
	.set_link_cb = local_set_link_cb,
};

static struct local *local_alloc(const char *sessname)
{
	struct local *l;

	if (!sessname || strlen(sessname) >= sizeof(l->sessname))
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	strcpy(l->sessname, sessname);
	pthread_rwlock_init(&l->lock, NULL);
	pthread_mutex_init(&l->cb_lock, NULL);
	return l;
}

static void local_unalloc(struct local *l)
{
	pthread_rwlock_destroy(&l->lock);
	pthread_mutex_destroy(&l->cb_lock);
	free(l);
}

int rnbd_local_new(const char *search_path, const char *sessname,
		   const struct rnbd_xport_ops **ops, void **ctx)
{
	struct rnbd_store_opts o = { .search_path = search_path, .max_io_bytes = 128 * 1024 };
	struct local *l = local_alloc(sessname);
	int rc;

	if (!l)
		return -EINVAL;
	rc = rnbd_store_new(&o, &l->st);
	if (!rc) {
		l->srv_st = l->st;
		rc = rnbd_srv_sess_new(l->st, sessname, &l->sess);
		if (rc)
			rnbd_store_free(l->st);
	}
	if (rc) {
		local_unalloc(l);
		return rc;
	}
	*ops = &local_ops;
	*ctx = l;
	return 0;
}

int rnbd_local_new_on(struct rnbd_store *st, const char *sessname,
		      const struct rnbd_xport_ops **ops, void **ctx)
{
	struct local *l = local_alloc(sessname);
	int rc;

	if (!l)
		return -EINVAL;
	l->srv_st = st;
	rc = rnbd_srv_sess_new(st, sessname, &l->sess);
	if (rc) {
		local_unalloc(l);
		return rc;
	}
	*ops = &local_ops;
	*ctx = l;
	return 0;
}
