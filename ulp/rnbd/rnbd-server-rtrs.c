/* SPDX-License-Identifier: MIT */
/*
 * The server program's transport: RTRS (ulp/rtrs/rtrs.h). Each RTRS session gets one
 * rnbd_srv_sess; each request RTRS hands over goes to rnbd_srv_process with the server's chunk
 * as its data buffer, and its answer is the RTRS response's errno (the kernel's rnbd-srv does
 * the same with rtrs_srv_resp_rdma).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-server.h"
#include "rtrs.h"

/* The RTRS sessions and theirs: link_ev DISCONNECTED names only the RTRS session. */
struct pair {
	struct rtrs_srv_sess *rs;
	struct rnbd_srv_sess *s;
};
static struct pair pairs[RNBD_SERVER_MAX_SESS];
static pthread_mutex_t pairs_lock = PTHREAD_MUTEX_INITIALIZER;

static void answer(void *op, int err)
{
	rtrs_srv_resp_rdma(op, err < 0 ? -err : err);
}

static int rdma_ev(struct rtrs_srv_sess *rs, void *sess_priv, struct rtrs_srv_op *op,
		   enum rtrs_dir dir, void *data, size_t datalen, const void *usr, size_t usrlen)
{
	if (!sess_priv)
		return ENOTCONN;
	rnbd_srv_process(sess_priv, dir == RTRS_READ ? RNBD_DIR_READ : RNBD_DIR_WRITE, usr, usrlen,
			 data, datalen, answer, op);
	return 0;
}

static int link_ev(struct rtrs_srv_sess *rs, enum rtrs_srv_link_ev ev, void *ctx_priv)
{
	struct rnbd_server *srv = ctx_priv;
	struct rnbd_srv_sess *s = NULL;
	int rc;

	if (ev == RTRS_SRV_LINK_EV_CONNECTED) {
		rc = rnbd_srv_sess_new(srv->st, rtrs_srv_get_sess_name(rs), &s);
		if (rc)
			return -rc;
		pthread_mutex_lock(&pairs_lock);
		for (unsigned i = 0; i < RNBD_SERVER_MAX_SESS; i++)
			if (!pairs[i].rs) {
				pairs[i] = (struct pair){ rs, s };
				rc = 1;
				break;
			}
		pthread_mutex_unlock(&pairs_lock);
		if (rc != 1) {
			rnbd_srv_sess_free(s);
			return EMFILE;
		}
		rtrs_srv_set_sess_priv(rs, s);
		rnbd_server_add_sess(srv, s);
		fprintf(stderr, "rnbd-server: session %s connected\n", rtrs_srv_get_sess_name(rs));
		return 0;
	}
	pthread_mutex_lock(&pairs_lock);
	for (unsigned i = 0; i < RNBD_SERVER_MAX_SESS; i++)
		if (pairs[i].rs == rs) {
			s = pairs[i].s;
			pairs[i] = (struct pair){ 0 };
			break;
		}
	pthread_mutex_unlock(&pairs_lock);
	if (s) {
		fprintf(stderr, "rnbd-server: session %s disconnected\n", rnbd_srv_sess_name(s));
		rnbd_server_del_sess(srv, s);
		rnbd_srv_sess_free(s);	/* closes its devices once their IO is answered */
	}
	return 0;
}

static const struct rtrs_srv_ops ops = { .rdma_ev = rdma_ev, .link_ev = link_ev };

int rnbd_server_start(struct rnbd_server *srv)
{
	struct rtrs_srv_opts o;
	char addr[8][300];
	const char *addrs[8];
	unsigned n = srv->nlisten ? srv->nlisten : 1;

	rtrs_srv_opts_init(&o);
	o.priv = srv;
	if (srv->hb_interval_ms)
		o.hb_interval_ms = srv->hb_interval_ms;
	if (srv->no_always_invalidate)
		o.always_invalidate = 0;
	if (srv->chunk_size)
		o.chunk_size = srv->chunk_size;
	if (srv->sess_qd)
		o.queue_depth = srv->sess_qd;
	for (unsigned i = 0; i < n; i++) {
		if (srv->nlisten)
			snprintf(addr[i], sizeof(addr[i]), "%s:%d", srv->listen_addr[i], srv->port);
		else
			snprintf(addr[i], sizeof(addr[i]), ":%d", srv->port);
		addrs[i] = addr[i];
	}
	srv->xport = rtrs_srv_open(&ops, addrs, n, &o);
	return srv->xport ? 0 : -errno;
}

void rnbd_server_stop(struct rnbd_server *srv)
{
	if (srv->xport)
		rtrs_srv_close(srv->xport);	/* link_ev DISCONNECTED for every session */
	srv->xport = NULL;
}

uint32_t rnbd_server_max_io(const struct rnbd_server *s)
{
	struct rtrs_srv_opts o;

	rtrs_srv_opts_init(&o);
	if (s->chunk_size)
		o.chunk_size = s->chunk_size;
	return o.chunk_size - o.max_hdr_size;
}

void rnbd_server_xport_stats(struct rnbd_server *srv, FILE *f)
{
	static const char *const st[] = { "connecting", "connected", "reconnecting", "dead",
					  "closed" };
	struct rtrs_path_stats ps[64];
	int n;

	if (!srv->xport)
		return;
	n = rtrs_srv_path_stats(srv->xport, ps, 64);
	for (int i = 0; i < n && i < 64; i++)
		fprintf(f, "path %s src %s dst %s state %s inflight %u reqs_read %llu reqs_write %llu "
			"bytes_read %llu bytes_write %llu errors %llu bad_msgs %llu hb_missed_total "
			"%llu\n", ps[i].sessname, ps[i].src, ps[i].dst,
			ps[i].state >= 0 && ps[i].state < 5 ? st[ps[i].state] : "?", ps[i].inflight,
			(unsigned long long)ps[i].reqs_read, (unsigned long long)ps[i].reqs_write,
			(unsigned long long)ps[i].bytes_read, (unsigned long long)ps[i].bytes_write,
			(unsigned long long)ps[i].errors, (unsigned long long)ps[i].bad_msgs,
			(unsigned long long)ps[i].hb_missed_total);
}
