/* SPDX-License-Identifier: MIT */
/*
 * Which device serves which IP address. The CM opens every device once (rdma_get_devices
 * returns these contexts, as rdma-core's librdmacm does) and learns each one's IP address from
 * its GID 0 (docs/gid.md): ::ffff:a.b.c.d is IPv4 a.b.c.d (the port-naming form too), anything
 * else an IPv6 address.
 *
 * Loopback is special: a process's loopback device may sit on any 127.x.y.z (the first process
 * on a host has 127.0.0.1, the next ones other addresses), yet every loopback address an
 * application names is served by it -- the CM's own sockets carry the connection setup, the
 * GIDs exchanged in it carry the data-plane addresses.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cm/cm.h"
#include "cm/sys.h"

struct cm_dev *cm_devs;
int cm_ndevs;

static bool is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
	if (a->sa_family == AF_INET6) {
		const struct in6_addr *x = &((const struct sockaddr_in6 *)a)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(x))
			return x->s6_addr[12] == 127;
		return IN6_IS_ADDR_LOOPBACK(x);
	}
	return false;
}

static bool is_any(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
	return false;
}

/* Same IP (v4-mapped IPv6 equals its IPv4). */
static bool ip_eq(const struct sockaddr *a, const struct sockaddr *b)
{
	uint8_t x[16], y[16];
	int lx = 0, ly = 0;

	for (int k = 0; k < 2; k++) {
		const struct sockaddr *s = k ? b : a;
		uint8_t *o = k ? y : x;
		int *l = k ? &ly : &lx;

		if (s->sa_family == AF_INET) {
			memcpy(o, &((const struct sockaddr_in *)s)->sin_addr, 4);
			*l = 4;
		} else if (s->sa_family == AF_INET6) {
			const struct in6_addr *v6 = &((const struct sockaddr_in6 *)s)->sin6_addr;

			if (IN6_IS_ADDR_V4MAPPED(v6)) {
				memcpy(o, &v6->s6_addr[12], 4);
				*l = 4;
			} else {
				memcpy(o, v6, 16);
				*l = 16;
			}
		}
	}
	return lx && lx == ly && !memcmp(x, y, (size_t)lx);
}

static void gid_to_ip(const union ibv_gid *g, struct sockaddr_storage *ss)
{
	static const uint8_t zero8[8];

	memset(ss, 0, sizeof(*ss));
	if (!memcmp(g->raw, zero8, 8) && g->raw[10] == 0xff && g->raw[11] == 0xff) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;

		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, &g->raw[12], 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, g->raw, 16);
	}
}

uint32_t sr_priv_seg_offer(struct ibv_context *ctx) __attribute__((weak));

int cm_devices_init(void)
{
	struct ibv_device **list;
	int n;

	if (cm_devs)
		return 0;
	list = ibv_get_device_list(&n);
	if (!list)
		return -errno;
	cm_devs = calloc((size_t)(n ? n : 1), sizeof(*cm_devs));
	if (!cm_devs) {
		ibv_free_device_list(list);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		struct cm_dev *d = &cm_devs[cm_ndevs];
		struct ibv_port_attr pa;

		d->ctx = ibv_open_device(list[i]);
		if (!d->ctx)
			continue;
		/* The GID naming the device's UDP port: the last of its table (index 1 on a
		 * device that could not have 4791, whose GID 0 is its address only, docs/gid.md). */
		if (ibv_query_port(d->ctx, 1, &pa) || !pa.gid_tbl_len ||
		    ibv_query_gid(d->ctx, 1, pa.gid_tbl_len - 1, &d->gid)) {
			ibv_close_device(d->ctx);
			continue;
		}
		d->gid_index = (uint8_t)(pa.gid_tbl_len - 1);
		gid_to_ip(&d->gid, &d->ip);
		d->mtu = pa.active_mtu;
		d->seg = sr_priv_seg_offer ? sr_priv_seg_offer(d->ctx) : 0;
		d->loopback = is_loopback((struct sockaddr *)&d->ip);
		cm_ndevs++;
	}
	ibv_free_device_list(list);
	return cm_ndevs ? 0 : -ENODEV;
}

/*
 * A loopback address with no loopback device (every device on an interface, SOFTRDMA_NETDEV)
 * is served by the first device, as the kernel's rdma_cm binds a loopback address to the first
 * device with an active port (libfabric binds each interface's address, 127.0.0.1 included).
 * The CM's own messages then travel over loopback, the data over that device's address.
 */
struct cm_dev *cm_dev_for_local(const struct sockaddr *a)
{
	if (cm_devices_init())
		return NULL;
	if (is_any(a))
		return &cm_devs[0];
	for (int i = 0; i < cm_ndevs; i++) {
		if (is_loopback(a) ? cm_devs[i].loopback : ip_eq(a, (struct sockaddr *)&cm_devs[i].ip))
			return &cm_devs[i];
	}
	return is_loopback(a) ? &cm_devs[0] : NULL;
}

struct ibv_pd *cm_dev_pd(struct cm_dev *d)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	struct ibv_pd *pd;

	pthread_mutex_lock(&lock);
	if (!d->pd)
		d->pd = ibv_alloc_pd(d->ctx);
	pd = d->pd;
	pthread_mutex_unlock(&lock);
	return pd;
}

struct cm_dev *cm_dev_by_ctx(struct ibv_context *ctx)
{
	for (int i = 0; i < cm_ndevs; i++)
		if (cm_devs[i].ctx == ctx)
			return &cm_devs[i];
	return NULL;
}

bool cm_is_mcast(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return IN_MULTICAST(ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr));
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_MULTICAST(&((const struct sockaddr_in6 *)a)->sin6_addr);
	return false;
}

int cm_dev_for_dst(const struct sockaddr *dst, struct cm_dev **dev, struct sockaddr_storage *src)
{
	socklen_t l = dst->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	int fd, ret;

	ret = cm_devices_init();
	if (ret)
		return ret;
	if (cm_is_mcast(dst)) {
		/* A group is reached from the device itself (mcast.c sends on its interface);
		 * the caller keeps an explicit bind. Routing may well have no entry for it. */
		*dev = &cm_devs[0];
		memcpy(src, &cm_devs[0].ip, sizeof(*src));
		return 0;
	}
	/* Ask the kernel's routing which local address would reach dst. */
	fd = sys_socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sys_connect(fd, dst, l)) {
		ret = -errno;
		sys_close(fd);
		return ret;
	}
	l = sizeof(*src);
	ret = sys_getsockname(fd, (struct sockaddr *)src, &l) ? -errno : 0;
	sys_close(fd);
	if (ret)
		return ret;
	if (is_loopback(dst))
		*dev = cm_dev_for_local(dst);
	else
		*dev = cm_dev_for_local((struct sockaddr *)src);
	if (!*dev)
		return -ENODEV;	/* no softrdma device on that interface */
	((struct sockaddr_in *)src)->sin_port = 0;
	return 0;
}

/* Is ip an address of this host (of this network namespace)? Only then can a socket bind it. */
static bool is_local_ip(const struct sockaddr *ip)
{
	struct sockaddr_storage ss;
	socklen_t l = ip->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	int fd = sys_socket(ip->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool ok;

	if (fd < 0)
		return false;
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, ip, l);	/* port 0 */
	ok = sys_bind(fd, (struct sockaddr *)&ss, l) == 0;
	sys_close(fd);
	return ok;
}

bool cm_addr_on_host(const struct sockaddr *a)
{
	return is_loopback(a) || is_local_ip(a);
}

/*
 * Does the data-plane GID a peer announced belong to the host the CM message came from? Its
 * IP must be the message's source address. A message from a loopback address comes from this
 * host, whose processes' devices may sit on any of its addresses: a loopback device on another
 * 127.x.y.z than the one its CM socket uses, or a device on an interface whose process reached
 * us over loopback; the GID must then name an address of this host.
 */
bool cm_gid_matches(const union ibv_gid *gid, const struct sockaddr *from)
{
	struct sockaddr_storage ip;

	gid_to_ip(gid, &ip);
	if (is_loopback(from))	/* from this host: the GID must be one of its addresses */
		return is_loopback((struct sockaddr *)&ip) || is_local_ip((struct sockaddr *)&ip);
	return ip_eq((struct sockaddr *)&ip, from);
}
