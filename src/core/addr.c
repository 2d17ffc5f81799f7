/* SPDX-License-Identifier: MIT */
/* Endpoint addresses and the GID format: see addr.h and docs/gid.md. */
#include "core/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>

#include "wire/hdr.h"

static bool gid_is_v4(const uint8_t *g)
{
	static const uint8_t zero8[8];

	return !memcmp(g, zero8, 8) && g[10] == 0xff && g[11] == 0xff;
}

void sr_gid_from_addr(union ibv_gid *gid, const struct sr_addr *a)
{
	memset(gid, 0, sizeof(*gid));
	if (a->family == AF_INET) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &a->v4, 4);
		if (a->port != SR_ROCEV2_UDP_PORT)
			sr_st_be16(&gid->raw[8], a->port);
	} else {
		memcpy(gid->raw, &a->v6, 16);
	}
}

uint16_t sr_lid_port(uint16_t dlid)
{
	return dlid >= 1024 && dlid < 49152 ? dlid : 0;
}

uint16_t sr_addr_lid(const struct sr_addr *a)
{
	if (a->family != AF_INET || a->port == SR_ROCEV2_UDP_PORT)
		return 0;
	return sr_lid_port(a->port);
}

int sr_gid_table_len(const struct sr_addr *a)
{
	return sr_addr_lid(a) ? 2 : 1;
}

int sr_gid_at(const struct sr_addr *a, int index, union ibv_gid *gid)
{
	struct sr_addr std = *a;

	if (index < 0 || index >= sr_gid_table_len(a))
		return -ENODATA;
	if (index == 0 && sr_addr_lid(a))
		std.port = SR_ROCEV2_UDP_PORT;	/* the address GID; the port is the LID */
	sr_gid_from_addr(gid, &std);
	return 0;
}

uint16_t sr_gid_port(const union ibv_gid *gid)
{
	return gid_is_v4(gid->raw) ? sr_ld_be16(&gid->raw[8]) : 0;
}

int sr_addr_from_gid(struct sr_addr *a, const union ibv_gid *gid)
{
	static const uint8_t zero16[16];

	memset(a, 0, sizeof(*a));
	if (!memcmp(gid->raw, zero16, 16))
		return -EINVAL;
	if (gid_is_v4(gid->raw)) {
		uint16_t port = sr_gid_port(gid);

		a->family = AF_INET;
		memcpy(&a->v4, &gid->raw[12], 4);
		a->port = port ? port : SR_ROCEV2_UDP_PORT;
		return 0;
	}
	a->family = AF_INET6;
	memcpy(&a->v6, gid->raw, 16);
	a->port = SR_ROCEV2_UDP_PORT;
	return 0;
}

bool sr_addr_ip_eq(const struct sr_addr *a, const struct sr_addr *b)
{
	if (a->family != b->family)
		return false;
	if (a->family == AF_INET)
		return a->v4.s_addr == b->v4.s_addr;
	return !memcmp(&a->v6, &b->v6, 16);
}

bool sr_addr_eq(const struct sr_addr *a, const struct sr_addr *b)
{
	return sr_addr_ip_eq(a, b) && a->port == b->port;
}

const char *sr_addr_str(const struct sr_addr *a, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];

	inet_ntop(a->family, a->raw, ip, sizeof(ip));
	if (a->family == AF_INET6)
		snprintf(buf, len, "[%s]:%u", ip, a->port);
	else
		snprintf(buf, len, "%s:%u", ip, a->port);
	return buf;
}

socklen_t sr_addr_to_sockaddr(const struct sr_addr *a, struct sockaddr_storage *ss)
{
	/* Only the returned length is written (zeroing all 128 bytes was a rep stos in every
	 * send). */
	if (a->family == AF_INET) {
		*(struct sockaddr_in *)ss = (struct sockaddr_in){
			.sin_family = AF_INET, .sin_port = htons(a->port), .sin_addr = a->v4 };
		return sizeof(struct sockaddr_in);
	}
	*(struct sockaddr_in6 *)ss = (struct sockaddr_in6){
		.sin6_family = AF_INET6, .sin6_port = htons(a->port), .sin6_addr = a->v6 };
	return sizeof(struct sockaddr_in6);
}

void sr_addr_from_sockaddr(struct sr_addr *a, const struct sockaddr *sa)
{
	memset(a, 0, sizeof(*a));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;

		a->family = AF_INET;
		a->port = ntohs(s->sin_port);
		a->v4 = s->sin_addr;
	} else {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		/* A v4-mapped source on a dual-stack socket is an IPv4 peer. */
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			a->family = AF_INET;
			memcpy(&a->v4, &s6->sin6_addr.s6_addr[12], 4);
		} else {
			a->family = AF_INET6;
			a->v6 = s6->sin6_addr;
		}
		a->port = ntohs(s6->sin6_port);
	}
}
