/* SPDX-License-Identifier: MIT */
/*
 * The RNBD server's session logic, independent of the transport: one rnbd_srv_sess per RTRS
 * session; every message the transport receives goes to rnbd_srv_process(), which parses it
 * (rnbd_parse), acts, and answers through the callback with an errno, as the kernel's
 * rnbd-srv answers through rtrs_srv_resp_rdma().
 */
#ifndef RNBD_SRV_H
#define RNBD_SRV_H

#include <stddef.h>
#include <stdint.h>

#include "rnbd-dev.h"

#define RNBD_SRV_MAX_DEVS 1024	/* open devices per session */

struct rnbd_srv_sess;

struct rnbd_srv_counters {	/* per session */
	uint64_t msgs, bad_msgs, bad_dev_id, opens, open_refused, closes, ios;
};

int rnbd_srv_sess_new(struct rnbd_store *st, const char *sessname, struct rnbd_srv_sess **out);
/* Closes every device the session still has open (waiting for their IO), then frees it. */
void rnbd_srv_sess_free(struct rnbd_srv_sess *s);

/*
 * One message: dir (RNBD_DIR_READ/WRITE), the user header, and the data buffer (READ: datalen
 * bytes the answer goes into; WRITE: datalen bytes received). done(priv, err) runs exactly once,
 * possibly before this returns; data must stay valid until then.
 */
void rnbd_srv_process(struct rnbd_srv_sess *s, int dir, const void *usr, size_t usrlen,
		      void *data, size_t datalen, rnbd_done_fn done, void *priv);

void rnbd_srv_sess_counters(struct rnbd_srv_sess *s, struct rnbd_srv_counters *c);
const char *rnbd_srv_sess_name(const struct rnbd_srv_sess *s);

#endif
