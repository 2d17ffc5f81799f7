/* SPDX-License-Identifier: MIT */
/* The RNBD client's request logic (rnbd-clt.h). */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rnbd-clt.h"

/*
 * A group of requests waited for together. The count and the first error are atomics, and the
 * waiting thread sleeps on a semaphore that the last completion posts: the completing thread
 * (RTRS's event thread) takes no lock, and the waiter, once woken, needs none either. (With a
 * mutex and a condition variable, the waiter woken by the broadcast often found the mutex still
 * held by the completing thread and slept a second time on it: at depth 32 a quarter of the
 * completions, in a `perf record -e sched:sched_switch` of nbdkit.) glibc's semaphore may be
 * destroyed as soon as sem_wait returns, even while sem_post is still returning.
 */
struct waiter {
	sem_t sem;
	atomic_uint pending;	/* sent and not yet answered, + 1 while still sending */
	atomic_int err;
};

static void waiter_init(struct waiter *w)
{
	sem_init(&w->sem, 0, 0);
	atomic_init(&w->pending, 1);	/* the sender's own reference (waiter_wait_on drops it) */
	atomic_init(&w->err, 0);
}

static void waiter_done(void *priv, int err)
{
	struct waiter *w = priv;

	if (err) {
		int e = err > 0 ? -err : err, zero = 0;
		atomic_compare_exchange_strong(&w->err, &zero, e);
	}
	if (atomic_fetch_sub(&w->pending, 1) == 1)
		sem_post(&w->sem);
}

static int waiter_done_p(void *arg)
{
	struct waiter *w = arg;

	return atomic_load(&w->pending) == 0;
}

/* The transport's poll first (the answer taken by this thread, no wake-up), then the
 * semaphore. */
static int waiter_wait_on(struct rnbd_clt *c, struct waiter *w)
{
	waiter_done(w, 0);	/* the sender's reference: every message is out */
	if (c && c->ops->poll)
		c->ops->poll(c->ctx, waiter_done_p, w);
	while (sem_wait(&w->sem) && errno == EINTR)
		;
	sem_destroy(&w->sem);
	return atomic_load(&w->err);
}

/* Sends one message as part of w (counted before it leaves: done may run at once). */
static void send_one(struct rnbd_clt *c, struct waiter *w, int dir, const void *usr,
		     size_t usrlen, void *data, size_t datalen)
{
	int rc;

	atomic_fetch_add(&w->pending, 1);
	rc = c->ops->request(c->ctx, dir, usr, usrlen, data, datalen, waiter_done, w);
	if (rc)
		waiter_done(w, rc);
}

static int sess_info(struct rnbd_clt *c, uint8_t *ver);

int rnbd_clt_raw(struct rnbd_clt *c, int dir, const void *usr, size_t usrlen, void *data,
		 size_t datalen)
{
	struct waiter w;

	waiter_init(&w);
	send_one(c, &w, dir, usr, usrlen, data, datalen);
	return waiter_wait_on(c, &w);
}

int rnbd_clt_new(const struct rnbd_xport_ops *ops, void *ctx, struct rnbd_clt **out)
{
	struct rnbd_clt *c = calloc(1, sizeof(*c));
	int rc;

	if (!c) {
		ops->close(ctx);
		return -ENOMEM;
	}
	c->ops = ops;
	c->ctx = ctx;
	pthread_mutex_init(&c->rmw_lock, NULL);
	pthread_mutex_init(&c->st_lock, NULL);
	pthread_condattr_t ca;	/* timed waits on CLOCK_MONOTONIC (deadline_in) */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->st_cv, &ca);
	pthread_condattr_destroy(&ca);
	c->state = RNBD_CLT_MAPPED;
	c->remap_wait_ms = 10000;
	rc = sess_info(c, &c->ver);
	if (rc) {
		rnbd_clt_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* SESS_INFO: the negotiated version, 0 or -errno. */
static int sess_info(struct rnbd_clt *c, uint8_t *ver)
{
	struct rnbd_msg_sess_info m;
	struct rnbd_msg_sess_info_rsp rsp;
	int rc;

	rnbd_enc_sess_info(&m, RNBD_PROTO_VER_MAJOR);
	memset(&rsp, 0, sizeof(rsp));
	rc = rnbd_clt_raw(c, RNBD_DIR_READ, &m, sizeof(m), &rsp, sizeof(rsp));
	if (!rc)
		rc = rnbd_dec_sess_info_rsp(&rsp, sizeof(rsp), ver);
	if (!rc && *ver != RNBD_PROTO_VER_MAJOR)
		rc = -EPROTONOSUPPORT;
	return rc;
}

/* OPEN of name in mode: the attributes and the transfer limit, 0 or -errno. */
static int do_open(struct rnbd_clt *c, const char *name, unsigned mode, struct rnbd_dev_attrs *a,
		   uint32_t *max_io)
{
	struct rnbd_msg_open m;
	struct rnbd_msg_open_rsp rsp;
	uint32_t xmax;
	int rc = rnbd_enc_open(&m, mode, name);

	if (rc)
		return rc;
	memset(&rsp, 0, sizeof(rsp));
	rc = rnbd_clt_raw(c, RNBD_DIR_READ, &m, sizeof(m), &rsp, sizeof(rsp));
	if (rc)
		return rc;
	rc = rnbd_dec_open_rsp(&rsp, sizeof(rsp), a);
	if (rc)
		return rc;
	xmax = c->ops->max_io(c->ctx) & ~(RNBD_SECTOR_SIZE - 1);
	*max_io = a->max_hw_sectors << RNBD_SECTOR_SHIFT;
	if (!*max_io || *max_io > xmax)
		*max_io = xmax;
	return *max_io ? 0 : -EPROTO;
}

static void link_cb(void *arg, int ev)
{
	struct rnbd_clt *c = arg;

	pthread_mutex_lock(&c->st_lock);
	if (ev == RNBD_LINK_DOWN) {
		c->downs++;
		c->state = RNBD_CLT_DISCONNECTED;
		c->remap_req = false;
		atomic_fetch_add(&c->c.disconnects, 1);
	} else {
		c->state = RNBD_CLT_REMAPPING;
		c->remap_req = true;
	}
	pthread_cond_broadcast(&c->st_cv);
	pthread_mutex_unlock(&c->st_lock);
}

static void deadline_in(struct timespec *t, unsigned ms)
{
	clock_gettime(CLOCK_MONOTONIC, t);
	t->tv_sec += ms / 1000;
	t->tv_nsec += (long)(ms % 1000) * 1000000;
	if (t->tv_nsec >= 1000000000) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000;
	}
}

/* The remap thread: SESS_INFO and OPEN again when asked; retried every second while a path
 * is up and the server refuses (another writer took the device meanwhile, ...). */
static void *remap_main(void *arg)
{
	struct rnbd_clt *c = arg;
	struct timespec t;

	pthread_mutex_lock(&c->st_lock);
	while (!c->stopping) {
		if (!c->remap_req) {
			pthread_cond_wait(&c->st_cv, &c->st_lock);
			continue;
		}
		c->remap_req = false;
		if (!c->open)	/* closed meanwhile: nothing to map */
			continue;
		uint64_t downs = c->downs;
		pthread_mutex_unlock(&c->st_lock);

		struct rnbd_dev_attrs a;
		uint32_t max_io = 0;
		uint8_t ver = 0;
		int rc = sess_info(c, &ver);
		if (!rc)
			rc = do_open(c, c->name, c->mode, &a, &max_io);
		if (!rc && a.nsectors != c->a.nsectors)
			fprintf(stderr, "rnbd: %s: size changed at remap (%llu -> %llu sectors)\n",
				c->name, (unsigned long long)c->a.nsectors,
				(unsigned long long)a.nsectors);

		pthread_mutex_lock(&c->st_lock);
		if (c->stopping)
			break;
		if (!rc && c->downs == downs) {
			c->ver = ver;
			__atomic_store_n(&c->a.device_id, a.device_id, __ATOMIC_RELEASE);
			c->a.max_discard_sectors = a.max_discard_sectors;
			c->a.max_write_zeroes_sectors = a.max_write_zeroes_sectors;
			c->max_io = max_io < c->max_io ? max_io : c->max_io;
			c->state = RNBD_CLT_MAPPED;
			c->gen++;
			atomic_fetch_add(&c->c.remaps, 1);
			pthread_cond_broadcast(&c->st_cv);
			fprintf(stderr, "rnbd: %s remapped, device id %u\n", c->name, a.device_id);
			continue;
		}
		if (rc) {
			atomic_fetch_add(&c->c.remap_failures, 1);
			fprintf(stderr, "rnbd: %s: remap failed: %s\n", c->name, strerror(-rc));
		}
		if (c->state == RNBD_CLT_DISCONNECTED || c->remap_req)
			continue;	/* the next RNBD_LINK_UP asks again, or has */
		/* a path is up but the server refused (or the paths went and came back
		 * meanwhile): again in a second */
		c->remap_req = true;
		deadline_in(&t, 1000);
		while (!c->stopping && pthread_cond_timedwait(&c->st_cv, &c->st_lock, &t) == 0)
			if (c->state == RNBD_CLT_DISCONNECTED)
				break;
	}
	pthread_mutex_unlock(&c->st_lock);
	return NULL;
}

int rnbd_clt_open(struct rnbd_clt *c, const char *name, unsigned mode)
{
	int rc;

	if (strlen(name) >= sizeof(c->name))
		return -ENAMETOOLONG;
	rc = do_open(c, name, mode, &c->a, &c->max_io);
	if (rc)
		return rc;
	strcpy(c->name, name);
	c->open = true;
	c->mode = mode;
	pthread_mutex_lock(&c->st_lock);
	c->state = RNBD_CLT_MAPPED;
	if (!c->thread_started)
		c->thread_started = pthread_create(&c->remap_thread, NULL, remap_main, c) == 0;
	pthread_mutex_unlock(&c->st_lock);
	if (c->ops->set_link_cb)
		c->ops->set_link_cb(c->ctx, link_cb, c);
	return 0;
}

int rnbd_clt_close(struct rnbd_clt *c)
{
	struct rnbd_msg_close m;
	int state;

	if (!c->open)
		return 0;
	c->open = false;
	pthread_mutex_lock(&c->st_lock);
	state = c->state;
	pthread_mutex_unlock(&c->st_lock);
	/* not mapped: the server dropped the open with the session; a CLOSE would only wait for
	 * a path (up to the transport's fail timeout) to be refused */
	if (state != RNBD_CLT_MAPPED)
		return 0;
	rnbd_enc_close(&m, c->a.device_id);
	return rnbd_clt_raw(c, RNBD_DIR_WRITE, &m, sizeof(m), NULL, 0);
}

void rnbd_clt_free(struct rnbd_clt *c)
{
	if (!c)
		return;
	if (c->ops->set_link_cb)
		c->ops->set_link_cb(c->ctx, NULL, NULL);
	pthread_mutex_lock(&c->st_lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->st_cv);
	pthread_mutex_unlock(&c->st_lock);
	if (c->thread_started)	/* a remap under way ends within the transport's timeout */
		pthread_join(c->remap_thread, NULL);
	c->ops->close(c->ctx);
	pthread_mutex_destroy(&c->rmw_lock);
	pthread_mutex_destroy(&c->st_lock);
	pthread_cond_destroy(&c->st_cv);
	free(c);
}

static void count(struct rnbd_clt *c, uint32_t op, uint64_t len, int rc)
{
	if (rc) {
		atomic_fetch_add(&c->c.errors, 1);
		return;
	}
	switch (op) {
	case RNBD_OP_READ:
		atomic_fetch_add(&c->c.reads, 1);
		atomic_fetch_add(&c->c.bytes_read, len);
		break;
	case RNBD_OP_WRITE:
		atomic_fetch_add(&c->c.writes, 1);
		atomic_fetch_add(&c->c.bytes_written, len);
		break;
	case RNBD_OP_FLUSH: atomic_fetch_add(&c->c.flushes, 1); break;
	case RNBD_OP_DISCARD: atomic_fetch_add(&c->c.discards, 1); break;
	default: atomic_fetch_add(&c->c.write_zeroes, 1); break;
	}
}

/* One block request as messages to the server, waited for (no counting). */
static int io_once(struct rnbd_clt *c, uint32_t rw, uint64_t off, uint64_t len, void *buf)
{
	uint32_t op = rnbd_op(rw), flags = rnbd_flags(rw), piece;
	uint32_t id = __atomic_load_n(&c->a.device_id, __ATOMIC_ACQUIRE);
	uint8_t *p = buf;
	struct waiter w;
	struct rnbd_msg_io *msgs;
	size_t n, i;

	switch (op) {
	case RNBD_OP_READ:
	case RNBD_OP_WRITE:
		piece = c->max_io;
		break;
	case RNBD_OP_DISCARD:
		piece = c->a.max_discard_sectors << RNBD_SECTOR_SHIFT;
		break;
	case RNBD_OP_WRITE_ZEROES:
		piece = c->a.max_write_zeroes_sectors << RNBD_SECTOR_SHIFT;
		break;
	default:
		piece = 0;
	}
	if (op == RNBD_OP_FLUSH || (len == 0 && op == RNBD_OP_WRITE)) {
		struct rnbd_msg_io m;
		rnbd_enc_io(&m, id, 0, rw, 0, 0);
		waiter_init(&w);
		send_one(c, &w, RNBD_DIR_WRITE, &m, sizeof(m), NULL, 0);
		return waiter_wait_on(c, &w);
	}
	if (len == 0)
		return 0;
	if (piece == 0)
		return -EOPNOTSUPP;
	piece &= ~(RNBD_SECTOR_SIZE - 1);
	n = (len + piece - 1) / piece;
	msgs = calloc(n, sizeof(*msgs));
	if (!msgs)
		return -ENOMEM;
	waiter_init(&w);
	for (i = 0; i < n; i++) {
		uint64_t o = off + (uint64_t)i * piece;
		uint32_t l = len - (uint64_t)i * piece < piece ? len - (uint64_t)i * piece : piece;
		uint32_t f = flags & ~(i ? RNBD_F_PREFLUSH : 0);
		bool data = op == RNBD_OP_READ || op == RNBD_OP_WRITE;

		rnbd_enc_io(&msgs[i], id, o >> RNBD_SECTOR_SHIFT, op | f, l, 0);
		send_one(c, &w, op == RNBD_OP_READ ? RNBD_DIR_READ : RNBD_DIR_WRITE, &msgs[i],
			 sizeof(msgs[i]), data ? p + (size_t)i * piece : NULL, data ? l : 0);
	}
	int rc = waiter_wait_on(c, &w);
	free(msgs);
	return rc;
}

/*
 * Waits until the device is mapped: 0 and the mapping's generation, or -EIO at once while
 * every path is down (the kernel's client fails IO on a disconnected device the same way), or
 * after remap_wait_ms of a remap that does not finish.
 */
static int wait_mapped(struct rnbd_clt *c, uint64_t *gen)
{
	struct timespec t;
	int rc = 0;

	pthread_mutex_lock(&c->st_lock);
	if (c->state == RNBD_CLT_REMAPPING) {
		deadline_in(&t, c->remap_wait_ms);
		while (c->state == RNBD_CLT_REMAPPING && !c->stopping)
			if (pthread_cond_timedwait(&c->st_cv, &c->st_lock, &t))
				break;
	}
	if (c->state != RNBD_CLT_MAPPED)
		rc = -EIO;
	*gen = c->gen;
	pthread_mutex_unlock(&c->st_lock);
	return rc;
}

/* The server answered ENOTCONN: it does not know our device id (its session was replaced).
 * Asks for a remap unless one has happened since the request went out. */
static void want_remap(struct rnbd_clt *c, uint64_t gen)
{
	pthread_mutex_lock(&c->st_lock);
	if (c->gen == gen && c->state == RNBD_CLT_MAPPED && c->thread_started) {
		c->state = RNBD_CLT_REMAPPING;
		c->remap_req = true;
		pthread_cond_broadcast(&c->st_cv);
	}
	pthread_mutex_unlock(&c->st_lock);
}

int rnbd_clt_io(struct rnbd_clt *c, uint32_t rw, uint64_t off, uint64_t len, void *buf)
{
	uint32_t op = rnbd_op(rw);
	uint64_t gen;
	int rc;

	if (!c->open)
		return -ENOTCONN;
	if ((off | len) & (RNBD_SECTOR_SIZE - 1) || op >= RNBD_OP_LAST)
		return -EINVAL;
	for (int attempt = 0;; attempt++) {
		rc = wait_mapped(c, &gen);
		if (rc) {
			atomic_fetch_add(&c->c.refused_down, 1);
			break;
		}
		rc = io_once(c, rw, off, len, buf);
		if (rc != -ENOTCONN || attempt == 2)
			break;
		/* sent again once remapped: a READ or WRITE of the same range, or a FLUSH, may
		 * run twice (RTRS's fail-over gives the same at-least-once) */
		want_remap(c, gen);
		atomic_fetch_add(&c->c.resent, 1);
	}
	count(c, op, len, rc);
	return rc;
}

static const char *state_str(int s)
{
	return s == RNBD_CLT_MAPPED ? "mapped" : s == RNBD_CLT_DISCONNECTED ? "disconnected" :
	       "remapping";
}

void rnbd_clt_stats_print(struct rnbd_clt *c, FILE *f)
{
	int state;

	pthread_mutex_lock(&c->st_lock);
	state = c->state;
	pthread_mutex_unlock(&c->st_lock);
	fprintf(f, "state %s\n", c->open ? state_str(state) : "closed");
	fprintf(f, "device_id %u\nnsectors %llu\nmax_io %u\n", c->a.device_id,
		(unsigned long long)c->a.nsectors, c->max_io);
	fprintf(f, "reads %llu\nwrites %llu\nflushes %llu\ndiscards %llu\nwrite_zeroes %llu\n",
		(unsigned long long)c->c.reads, (unsigned long long)c->c.writes,
		(unsigned long long)c->c.flushes, (unsigned long long)c->c.discards,
		(unsigned long long)c->c.write_zeroes);
	fprintf(f, "bytes_read %llu\nbytes_written %llu\nerrors %llu\n",
		(unsigned long long)c->c.bytes_read, (unsigned long long)c->c.bytes_written,
		(unsigned long long)c->c.errors);
	fprintf(f, "disconnects %llu\nremaps %llu\nremap_failures %llu\nresent %llu\n"
		"refused_down %llu\n", (unsigned long long)c->c.disconnects,
		(unsigned long long)c->c.remaps, (unsigned long long)c->c.remap_failures,
		(unsigned long long)c->c.resent, (unsigned long long)c->c.refused_down);
	if (c->ops->stats)
		c->ops->stats(c->ctx, f);
}

#define SECT_MASK ((uint64_t)RNBD_SECTOR_SIZE - 1)

/* The whole sectors covering [off, off+count), read into a new bounce buffer. */
static int read_cover(struct rnbd_clt *c, uint64_t off, uint64_t count, uint8_t **buf,
		      uint64_t *aoff, uint64_t *alen)
{
	int rc;

	*aoff = off & ~SECT_MASK;
	*alen = ((off + count + SECT_MASK) & ~SECT_MASK) - *aoff;
	if (posix_memalign((void **)buf, 4096, *alen))
		return -ENOMEM;
	rc = rnbd_clt_io(c, RNBD_OP_READ, *aoff, *alen, *buf);
	if (rc)
		free(*buf);
	return rc;
}

int rnbd_clt_pread(struct rnbd_clt *c, void *buf, uint64_t count, uint64_t off)
{
	uint64_t aoff, alen;
	uint8_t *b;
	int rc;

	if (!((off | count) & SECT_MASK))
		return rnbd_clt_io(c, RNBD_OP_READ, off, count, buf);
	rc = read_cover(c, off, count, &b, &aoff, &alen);
	if (rc)
		return rc;
	memcpy(buf, b + (off - aoff), count);
	free(b);
	return 0;
}

int rnbd_clt_pwrite(struct rnbd_clt *c, const void *buf, uint64_t count, uint64_t off,
		    uint32_t flags)
{
	uint32_t rw = RNBD_OP_WRITE | (flags & RNBD_F_FUA);
	uint64_t aoff, alen;
	uint8_t *b;
	int rc;

	if (buf && !((off | count) & SECT_MASK))
		return rnbd_clt_io(c, rw, off, count, (void *)buf);
	if (count == 0)
		return 0;
	pthread_mutex_lock(&c->rmw_lock);
	rc = read_cover(c, off, count, &b, &aoff, &alen);
	if (!rc) {
		if (buf)
			memcpy(b + (off - aoff), buf, count);
		else
			memset(b + (off - aoff), 0, count);
		rc = rnbd_clt_io(c, rw, aoff, alen, b);
		free(b);
	}
	pthread_mutex_unlock(&c->rmw_lock);
	return rc;
}

/* The whole sectors inside [off, off+count): *alen 0 when there are none. */
static void inner(uint64_t off, uint64_t count, uint64_t *aoff, uint64_t *alen)
{
	uint64_t s = (off + SECT_MASK) & ~SECT_MASK, e = (off + count) & ~SECT_MASK;

	*aoff = s;
	*alen = e > s ? e - s : 0;
}

int rnbd_clt_zero(struct rnbd_clt *c, uint64_t count, uint64_t off, uint32_t flags)
{
	uint32_t fua = flags & RNBD_F_FUA;
	uint64_t aoff, alen;
	int rc = 0;

	inner(off, count, &aoff, &alen);
	if (alen == 0)
		return rnbd_clt_pwrite(c, NULL, count, off, fua);
	if (aoff > off)
		rc = rnbd_clt_pwrite(c, NULL, aoff - off, off, fua);
	if (!rc)
		rc = rnbd_clt_io(c, RNBD_OP_WRITE_ZEROES | fua, aoff, alen, NULL);
	if (!rc && aoff + alen < off + count)
		rc = rnbd_clt_pwrite(c, NULL, off + count - (aoff + alen), aoff + alen, fua);
	return rc;
}

int rnbd_clt_trim(struct rnbd_clt *c, uint64_t count, uint64_t off, uint32_t flags)
{
	uint64_t aoff, alen;

	inner(off, count, &aoff, &alen);
	if (alen)
		return rnbd_clt_io(c, RNBD_OP_DISCARD | (flags & RNBD_F_FUA), aoff, alen, NULL);
	if (flags & RNBD_F_FUA)
		return rnbd_clt_io(c, RNBD_OP_FLUSH, 0, 0, NULL);
	return 0;
}
