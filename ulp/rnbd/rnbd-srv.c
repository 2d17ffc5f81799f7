/* SPDX-License-Identifier: MIT */
/* The RNBD server's session logic (rnbd-srv.h). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-srv.h"

struct sess_dev {
	struct rnbd_handle *h;
	char name[RNBD_NAME_MAX + 1];
};

struct rnbd_srv_sess {
	struct rnbd_store *st;
	char name[256];
	uint8_t ver;
	pthread_mutex_t lock;
	struct sess_dev devs[RNBD_SRV_MAX_DEVS];	/* device_id = index */
	struct {
		_Atomic uint64_t msgs, bad_msgs, bad_dev_id, opens, open_refused, closes, ios;
	} c;
};

int rnbd_srv_sess_new(struct rnbd_store *st, const char *sessname, struct rnbd_srv_sess **out)
{
	struct rnbd_srv_sess *s;

	if (!sessname || strlen(sessname) >= sizeof(s->name))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->st = st;
	strcpy(s->name, sessname);
	s->ver = RNBD_PROTO_VER_MAJOR;
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

void rnbd_srv_sess_free(struct rnbd_srv_sess *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < RNBD_SRV_MAX_DEVS; i++)
		if (s->devs[i].h)
			rnbd_handle_close(s->devs[i].h);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

const char *rnbd_srv_sess_name(const struct rnbd_srv_sess *s) { return s->name; }

void rnbd_srv_sess_counters(struct rnbd_srv_sess *s, struct rnbd_srv_counters *c)
{
	c->msgs = s->c.msgs;
	c->bad_msgs = s->c.bad_msgs;
	c->bad_dev_id = s->c.bad_dev_id;
	c->opens = s->c.opens;
	c->open_refused = s->c.open_refused;
	c->closes = s->c.closes;
	c->ios = s->c.ios;
}

static int do_open(struct rnbd_srv_sess *s, const struct rnbd_req *r, void *data)
{
	struct rnbd_dev_attrs a;
	struct rnbd_handle *h;
	int id = -1, rc;

	pthread_mutex_lock(&s->lock);
	/* the same name opened again by this session: the same device id (as the kernel) */
	for (unsigned i = 0; i < RNBD_SRV_MAX_DEVS; i++)
		if (s->devs[i].h && !strcmp(s->devs[i].name, r->name)) {
			id = i;
			break;
		}
	if (id < 0) {
		for (unsigned i = 0; i < RNBD_SRV_MAX_DEVS; i++)
			if (!s->devs[i].h) {
				id = i;
				break;
			}
		if (id < 0) {
			rc = -ENOSPC;
			goto out;
		}
		rc = rnbd_store_open(s->st, s->name, r->name, r->access_mode, &h);
		if (rc)
			goto out;
		s->devs[id].h = h;
		strcpy(s->devs[id].name, r->name);
	}
	rnbd_handle_attrs(s->devs[id].h, &a);
	a.device_id = id;
	rnbd_enc_open_rsp(data, &a);
	rc = 0;
out:
	pthread_mutex_unlock(&s->lock);
	atomic_fetch_add(rc ? &s->c.open_refused : &s->c.opens, 1);
	return rc;
}

static int do_close(struct rnbd_srv_sess *s, uint32_t id)
{
	struct rnbd_handle *h = NULL;

	pthread_mutex_lock(&s->lock);
	if (id < RNBD_SRV_MAX_DEVS) {
		h = s->devs[id].h;
		s->devs[id].h = NULL;
	}
	pthread_mutex_unlock(&s->lock);
	if (!h) {
		atomic_fetch_add(&s->c.bad_dev_id, 1);
		return -ENOTCONN;
	}
	rnbd_handle_close(h);	/* waits for its IO in flight */
	atomic_fetch_add(&s->c.closes, 1);
	return 0;
}

void rnbd_srv_process(struct rnbd_srv_sess *s, int dir, const void *usr, size_t usrlen,
		      void *data, size_t datalen, rnbd_done_fn done, void *priv)
{
	struct rnbd_req r;
	int rc = rnbd_parse(dir, usr, usrlen, datalen, &r);

	atomic_fetch_add(&s->c.msgs, 1);
	if (rc) {
		atomic_fetch_add(&s->c.bad_msgs, 1);
		done(priv, rc);
		return;
	}
	switch (r.type) {
	case RNBD_MSG_SESS_INFO:
		s->ver = r.ver < RNBD_PROTO_VER_MAJOR ? r.ver : RNBD_PROTO_VER_MAJOR;
		rnbd_enc_sess_info_rsp(data, s->ver);
		done(priv, 0);
		return;
	case RNBD_MSG_OPEN:
		done(priv, do_open(s, &r, data));
		return;
	case RNBD_MSG_CLOSE:
		done(priv, do_close(s, r.device_id));
		return;
	case RNBD_MSG_IO: {
		struct rnbd_handle *h = NULL;
		pthread_mutex_lock(&s->lock);
		if (r.device_id < RNBD_SRV_MAX_DEVS)
			h = s->devs[r.device_id].h;
		if (!h) {
			pthread_mutex_unlock(&s->lock);
			atomic_fetch_add(&s->c.bad_dev_id, 1);
			done(priv, -ENOTCONN);	/* the kernel's answer to an unknown id */
			return;
		}
		atomic_fetch_add(&s->c.ios, 1);
		/* submitted under the lock: a CLOSE cannot slip between lookup and in-flight count */
		rnbd_handle_submit(h, &r, data, done, priv);
		pthread_mutex_unlock(&s->lock);
		return;
	}
	}
}
