/* SPDX-License-Identifier: MIT */
/*
 * The table of rsockets and their life (rs_alloc, rs_get/rs_put, rs_free through the socket's
 * rs_ops); options (rsetsockopt, rgetsockopt, rfcntl) and rgetsockname; the shared helpers
 * (PDs, logging, time). rsocket, rclose and rgetpeername, which differ by type, are io.c's.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cm/rsocket/rs.h"

/* ---- logging ------------------------------------------------------------------------------ */
int rs_log_level = RS_LOG_WARN;
unsigned rs_poll_us = RS_DEF_POLL_US;

__attribute__((constructor)) static void rs_env_init(void)
{
	const char *l = getenv("SOFTRDMA_LOG"), *p = getenv("SOFTRDMA_RSOCKET_POLL_US");

	if (l) {
		if (!strcasecmp(l, "error"))
			rs_log_level = RS_LOG_ERROR;
		else if (!strcasecmp(l, "info"))
			rs_log_level = RS_LOG_INFO;
		else if (!strcasecmp(l, "debug"))
			rs_log_level = RS_LOG_DEBUG;
	}
	if (p && *p)
		rs_poll_us = (unsigned)strtoul(p, NULL, 0);
}

/* One write(2) per message, straight to fd 2 (never through an interposed write()). */
void rs_log(int level, const char *fmt, ...)
{
	static const char *names[] = { "error", "warn", "info", "debug" };
	char buf[512];
	va_list ap;
	int n;

	n = snprintf(buf, sizeof(buf), "softrdma rsocket %s: ", names[level]);
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	(void)!syscall(SYS_write, 2, buf, (size_t)n);
}

const char *rs_state_name(enum rs_state s)
{
	static const char *const names[] = {
#define RS_STATE_NAME(s) #s,
		RS_STATES(RS_STATE_NAME)
#undef RS_STATE_NAME
	};

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

uint64_t rs_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

int rs_set_fd_nonblock(int fd)
{
	long fl = syscall(SYS_fcntl, fd, F_GETFL);

	if (fl < 0)
		return -errno;
	return syscall(SYS_fcntl, fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

void rs_copy_addr(struct sockaddr *dst, socklen_t *dlen, const struct sockaddr *src)
{
	socklen_t l = rs_sa_len(src);

	if (!dst || !dlen)
		return;
	memcpy(dst, src, *dlen < l ? *dlen : l);
	*dlen = l;
}

/* ---- shared verbs objects --------------------------------------------------------------------- */
static pthread_mutex_t pd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { struct ibv_context *ctx; struct ibv_pd *pd; } pds[16];

/* One PD per device, shared by every rsocket of the process (never freed, as the devices). */
struct ibv_pd *rs_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = NULL;
	int i;

	pthread_mutex_lock(&pd_lock);
	for (i = 0; i < 16 && pds[i].ctx; i++) {
		if (pds[i].ctx == ctx) {
			pd = pds[i].pd;
			break;
		}
	}
	if (!pd && i < 16) {
		pd = ibv_alloc_pd(ctx);
		if (pd) {
			pds[i].ctx = ctx;
			pds[i].pd = pd;
		}
	}
	pthread_mutex_unlock(&pd_lock);
	if (!pd && !errno)
		errno = ENOMEM;
	return pd;
}

/* The first device (librdmacm's contexts stay open for the life of the process). */
struct ibv_context *rs_default_ctx(void)
{
	struct ibv_context **l;
	struct ibv_context *c = NULL;
	int n = 0;

	l = rdma_get_devices(&n);
	if (l && n > 0)
		c = l[0];
	rdma_free_devices(l);
	if (!c)
		errno = ENODEV;
	return c;
}

/* ---- the table -------------------------------------------------------------------------------- */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsock **table;
static int table_cap;

struct rsock *rs_get(int fd)
{
	struct rsock *rs = NULL;

	pthread_mutex_lock(&table_lock);
	if (fd >= 0 && fd < table_cap)
		rs = table[fd];
	if (rs)
		rs->refs++;
	pthread_mutex_unlock(&table_lock);
	if (!rs)
		errno = EBADF;
	return rs;
}

void rs_put(struct rsock *rs)
{
	bool last;

	pthread_mutex_lock(&table_lock);
	last = --rs->refs == 0;
	pthread_mutex_unlock(&table_lock);
	if (last)
		rs_free(rs);
}

int rs_insert(struct rsock *rs)
{
	pthread_mutex_lock(&table_lock);
	if (rs->fd >= table_cap) {
		int cap = table_cap ? table_cap : 256;
		struct rsock **t;

		while (cap <= rs->fd)
			cap *= 2;
		t = realloc(table, (size_t)cap * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&table_lock);
			return -ENOMEM;
		}
		memset(t + table_cap, 0, (size_t)(cap - table_cap) * sizeof(*t));
		table = t;
		table_cap = cap;
	}
	table[rs->fd] = rs;
	rs->refs = 1;	/* the table's */
	pthread_mutex_unlock(&table_lock);
	return 0;
}

void rs_remove(struct rsock *rs)
{
	pthread_mutex_lock(&table_lock);
	if (rs->fd >= 0 && rs->fd < table_cap && table[rs->fd] == rs)
		table[rs->fd] = NULL;
	pthread_mutex_unlock(&table_lock);
}

/* ---- life --------------------------------------------------------------------------------------- */
struct rsock *rs_alloc(int domain, int type, const struct rsock *inherit)
{
	struct rsock *rs = calloc(1, sizeof(*rs));

	if (!rs) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&rs->lock, NULL);
	rs->domain = domain;
	rs->type = type;
	rs->state = RS_INIT;
	rs->acceptq_tail = &rs->acceptq;
	if (inherit) {
		/* An accepted socket starts with its listener's options (rdma-core does too). */
		rs->ops = inherit->ops;
		rs->sndbuf = inherit->sndbuf;
		rs->rcvbuf = inherit->rcvbuf;
		rs->sqsize = inherit->sqsize;
		rs->rqsize = inherit->rqsize;
		rs->inline_size = inherit->inline_size;
		rs->iomap_size = inherit->iomap_size;
		rs->nodelay = inherit->nodelay;
		rs->keepalive = inherit->keepalive;
		rs->oobinline = inherit->oobinline;
		rs->linger = inherit->linger;
		rs->keepidle = inherit->keepidle;
		rs->keepintvl = inherit->keepintvl;
		rs->keepcnt = inherit->keepcnt;
		rs->tos = inherit->tos;
		rs->rcvtimeo = inherit->rcvtimeo;
		rs->sndtimeo = inherit->sndtimeo;
	} else {
		rs->sndbuf = RS_DEF_BUF;
		rs->rcvbuf = RS_DEF_BUF;
		rs->sqsize = RS_DEF_SQ;
		rs->rqsize = RS_DEF_RQ;
		rs->inline_size = RS_DEF_INLINE;
		rs->keepidle = 7200;
		rs->keepintvl = 75;
		rs->keepcnt = 9;
	}
	rs->ch = rdma_create_event_channel();
	if (!rs->ch) {
		int err = errno;

		pthread_mutex_destroy(&rs->lock);
		free(rs);
		errno = err ? err : ENOMEM;
		return NULL;
	}
	rs_set_fd_nonblock(rs->ch->fd);
	rs->fd = rs->ch->fd;
	return rs;
}

void rs_free(struct rsock *rs)
{
	if (rs->ops)
		rs->ops->destroy(rs);
	if (rs->id)
		rdma_destroy_id(rs->id);
	rdma_destroy_event_channel(rs->ch);	/* closes the number */
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}

/* ---- names ----------------------------------------------------------------------------------- */
RS_EXPORT int rgetsockname(int fd, struct sockaddr *a, socklen_t *len)
{
	struct rsock *rs = rs_get(fd);
	struct sockaddr_storage ss;

	if (!rs)
		return -1;
	if (!a || !len) {
		rs_put(rs);
		return rs_err(EFAULT);
	}
	pthread_mutex_lock(&rs->lock);
	memset(&ss, 0, sizeof(ss));
	if (rs->id && rs->id->route.addr.src_addr.sa_family)
		memcpy(&ss, rdma_get_local_addr(rs->id), rs_sa_len(rdma_get_local_addr(rs->id)));
	else
		ss.ss_family = (sa_family_t)rs->domain;
	pthread_mutex_unlock(&rs->lock);
	rs_copy_addr(a, len, (struct sockaddr *)&ss);
	rs_put(rs);
	return 0;
}

/* ---- rfcntl ------------------------------------------------------------------------------------- */
RS_EXPORT int rfcntl(int fd, int cmd, ...)
{
	struct rsock *rs = rs_get(fd);
	va_list ap;
	long arg;
	int ret = 0;

	if (!rs)
		return -1;
	va_start(ap, cmd);
	arg = va_arg(ap, long);
	va_end(ap);
	pthread_mutex_lock(&rs->lock);
	switch (cmd) {
	case F_GETFL:
		ret = rs->fd_flags | O_RDWR;
		break;
	case F_SETFL:
		/* Only O_NONBLOCK means something to an rsocket; the rest is ignored, as on a
		 * socket. */
		rs->fd_flags = (int)(arg & O_NONBLOCK);
		break;
	case F_GETFD:
	case F_SETFD:
		/* The close-on-exec flag of the number itself. */
		ret = (int)syscall(SYS_fcntl, fd, cmd, arg);
		break;
	default:
		ret = -EINVAL;
		break;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret < 0 ? rs_err(cmd == F_GETFD || cmd == F_SETFD ? errno : -ret) : ret;
}

/* ---- options --------------------------------------------------------------------------------------- */
static int opt_int(const void *v, socklen_t len, int *out)
{
	if (!v || len < (socklen_t)sizeof(int))
		return -EINVAL;
	memcpy(out, v, sizeof(int));
	return 0;
}

static uint32_t clamp_u32(int v, uint32_t lo, uint32_t hi)
{
	return v < (int)lo ? lo : (uint32_t)v > hi ? hi : (uint32_t)v;
}

/* Sizes only matter before the connection (the buffers are made then); later they are kept
 * and reported, as Linux keeps a later SO_RCVBUF that no longer changes much. */
static int set_sol_socket(struct rsock *rs, int opt, const void *v, socklen_t len)
{
	int i, ret = 0;

	switch (opt) {
	case SO_REUSEADDR:
		if (!(ret = opt_int(v, len, &i))) {
			rs->reuseaddr = i != 0;
			if (rs->id)
				rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR,
						&i, sizeof(i));
		}
		return ret;
	case SO_REUSEPORT:
	case SO_OOBINLINE:
		if (!(ret = opt_int(v, len, &i)) && opt == SO_OOBINLINE)
			rs->oobinline = i != 0;
		return ret;
	case SO_RCVBUF:
	case SO_SNDBUF:
		if (!(ret = opt_int(v, len, &i))) {
			uint32_t b = clamp_u32(i, RS_MIN_BUF, RS_MAX_BUF);

			b = (b + 4095) & ~4095u;
			if (opt == SO_RCVBUF)
				rs->rcvbuf = b;
			else
				rs->sndbuf = b;
		}
		return ret;
	case SO_KEEPALIVE:
		/* The CM probes every established connection anyway (a dead peer is found in
		 * seconds); the flag is kept and reported. */
		if (!(ret = opt_int(v, len, &i)))
			rs->keepalive = i != 0;
		return ret;
	case SO_LINGER:
		if (!v || len < (socklen_t)sizeof(struct linger))
			return -EINVAL;
		memcpy(&rs->linger, v, sizeof(rs->linger));
		return 0;
	case SO_RCVTIMEO:
	case SO_SNDTIMEO:
		if (!v || len < (socklen_t)sizeof(struct timeval))
			return -EINVAL;
		memcpy(opt == SO_RCVTIMEO ? &rs->rcvtimeo : &rs->sndtimeo, v, sizeof(struct timeval));
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

static int set_rdma(struct rsock *rs, int opt, const void *v, socklen_t len)
{
	int i, ret;

	if (opt == RDMA_ROUTE) {
		/* A path record from rdma_getaddrinfo: this CM resolves routes itself, so a
		 * well-formed one is accepted and not needed. */
		if (!v || !len || len % sizeof(struct ibv_path_data))
			return -EINVAL;
		rs_dbg(rs, "RDMA_ROUTE given (%u bytes); the CM's own route is used", len);
		return 0;
	}
	ret = opt_int(v, len, &i);
	if (ret)
		return ret;
	if (rs->qp)
		return -EINVAL;	/* only before the connection is made (rdma-core too) */
	switch (opt) {
	case RDMA_SQSIZE:
		rs->sqsize = clamp_u32(i, RS_MIN_QP, RS_MAX_QP);
		return 0;
	case RDMA_RQSIZE:
		rs->rqsize = clamp_u32(i, RS_MIN_QP, RS_MAX_QP);
		return 0;
	case RDMA_INLINE:
		rs->inline_size = clamp_u32(i, 0, RS_MAX_INLINE);
		return 0;
	case RDMA_IOMAPSIZE:
		rs->iomap_size = (uint16_t)clamp_u32(i, 0, 1024);
		return 0;
	default:
		return -EOPNOTSUPP;
	}
}

RS_EXPORT int rsetsockopt(int fd, int level, int opt, const void *v, socklen_t len)
{
	struct rsock *rs = rs_get(fd);
	int i, ret = -EOPNOTSUPP;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	switch (level) {
	case SOL_SOCKET:
		ret = set_sol_socket(rs, opt, v, len);
		break;
	case IPPROTO_TCP:
		if (rs->type != SOCK_STREAM)
			break;
		if (opt != TCP_NODELAY && opt != TCP_MAXSEG && opt != TCP_KEEPIDLE &&
		    opt != TCP_KEEPINTVL && opt != TCP_KEEPCNT)
			break;
		if ((ret = opt_int(v, len, &i)))
			break;
		if (opt == TCP_NODELAY)
			rs->nodelay = i != 0;	/* data always leaves at once: there is no Nagle */
		else if (opt == TCP_KEEPIDLE)
			rs->keepidle = i;
		else if (opt == TCP_KEEPINTVL)
			rs->keepintvl = i;
		else if (opt == TCP_KEEPCNT)
			rs->keepcnt = i;
		break;
	case IPPROTO_IPV6:
		if (opt == IPV6_V6ONLY && !(ret = opt_int(v, len, &i))) {
			rs->v6only = i != 0;
			if (rs->id)
				rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY,
						&i, sizeof(i));
		}
		break;
	case IPPROTO_IP:
		if (opt == IP_TOS && !(ret = opt_int(v, len, &i))) {
			uint8_t tos = (uint8_t)i;

			rs->tos = tos;
			if (rs->id)
				rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS,
						&tos, sizeof(tos));
		}
		break;
	case SOL_RDMA:
		ret = set_rdma(rs, opt, v, len);
		break;
	}
	if (ret == -EOPNOTSUPP)
		rs_dbg(rs, "setsockopt level %d option %d: not supported", level, opt);
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}

static int put_int(void *v, socklen_t *len, int val)
{
	if (!v || !len || *len < (socklen_t)sizeof(int))
		return -EINVAL;
	memcpy(v, &val, sizeof(int));
	*len = sizeof(int);
	return 0;
}

static int get_opt(struct rsock *rs, int level, int opt, void *v, socklen_t *len)
{
	int err;

	switch (level) {
	case SOL_SOCKET:
		switch (opt) {
		case SO_ERROR:
			/* A connect in progress makes its progress first (rconnect's caller polls
			 * POLLOUT, then asks). */
			if (rs->state == RS_RESOLVING || rs->state == RS_CONNECTING)
				rs_progress(rs);
			err = rs->so_error;
			rs->so_error = 0;
			return put_int(v, len, err);
		case SO_REUSEADDR: return put_int(v, len, rs->reuseaddr);
		case SO_KEEPALIVE: return put_int(v, len, rs->keepalive);
		case SO_OOBINLINE: return put_int(v, len, rs->oobinline);
		case SO_RCVBUF: return put_int(v, len, (int)rs->rcvbuf);
		case SO_SNDBUF: return put_int(v, len, (int)rs->sndbuf);
		case SO_TYPE: return put_int(v, len, rs->type);
		case SO_DOMAIN: return put_int(v, len, rs->domain);
		case SO_PROTOCOL:
			return put_int(v, len, rs->type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP);
		case SO_ACCEPTCONN: return put_int(v, len, rs->state == RS_LISTENING);
		case SO_LINGER:
			if (!v || !len || *len < (socklen_t)sizeof(struct linger))
				return -EINVAL;
			memcpy(v, &rs->linger, sizeof(rs->linger));
			*len = sizeof(rs->linger);
			return 0;
		case SO_RCVTIMEO:
		case SO_SNDTIMEO:
			if (!v || !len || *len < (socklen_t)sizeof(struct timeval))
				return -EINVAL;
			memcpy(v, opt == SO_RCVTIMEO ? &rs->rcvtimeo : &rs->sndtimeo,
			       sizeof(struct timeval));
			*len = sizeof(struct timeval);
			return 0;
		}
		break;
	case IPPROTO_TCP:
		if (rs->type != SOCK_STREAM)
			break;
		switch (opt) {
		case TCP_NODELAY: return put_int(v, len, rs->nodelay);
		case TCP_MAXSEG: return put_int(v, len, 2048);
		case TCP_KEEPIDLE: return put_int(v, len, rs->keepidle);
		case TCP_KEEPINTVL: return put_int(v, len, rs->keepintvl);
		case TCP_KEEPCNT: return put_int(v, len, rs->keepcnt);
		}
		break;
	case IPPROTO_IPV6:
		if (opt == IPV6_V6ONLY)
			return put_int(v, len, rs->v6only);
		break;
	case IPPROTO_IP:
		if (opt == IP_TOS)
			return put_int(v, len, rs->tos);
		break;
	case SOL_RDMA:
		switch (opt) {
		case RDMA_SQSIZE: return put_int(v, len, (int)rs->sqsize);
		case RDMA_RQSIZE: return put_int(v, len, (int)rs->rqsize);
		case RDMA_INLINE: return put_int(v, len, (int)rs->inline_size);
		case RDMA_IOMAPSIZE: return put_int(v, len, rs->iomap_size);
		}
		break;
	}
	return -EOPNOTSUPP;
}

RS_EXPORT int rgetsockopt(int fd, int level, int opt, void *v, socklen_t *len)
{
	struct rsock *rs = rs_get(fd);
	int ret;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	ret = get_opt(rs, level, opt, v, len);
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}
