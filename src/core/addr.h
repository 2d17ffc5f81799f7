/* SPDX-License-Identifier: MIT */
/*
 * Endpoint addresses and the GID format (docs/gid.md).
 *
 * A softrdma port is an IP address plus a UDP port. The GID names it:
 *   ::ffff:a.b.c.d                          IPv4 a.b.c.d, UDP 4791 (the standard RoCEv2 GID)
 *   0000:0000:0000:0000:PPPP:ffff:a.b.c.d   IPv4 a.b.c.d, UDP port PPPP (a device that could not
 *                                           have 4791, e.g. the second process on one host)
 *   anything else                           an IPv6 address, UDP 4791
 */
#ifndef SR_CORE_ADDR_H
#define SR_CORE_ADDR_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>

struct sr_addr {
	uint8_t family;		/* AF_INET or AF_INET6 */
	uint16_t port;		/* UDP port, host order */
	union {
		struct in_addr v4;
		struct in6_addr v6;
		uint8_t raw[16];
	};
};

void sr_gid_from_addr(union ibv_gid *gid, const struct sr_addr *a);
/* 0, or -EINVAL for a GID softrdma cannot route (all zero, multicast handled elsewhere). */
int sr_addr_from_gid(struct sr_addr *a, const union ibv_gid *gid);
bool sr_addr_eq(const struct sr_addr *a, const struct sr_addr *b);
bool sr_addr_ip_eq(const struct sr_addr *a, const struct sr_addr *b);
/* "1.2.3.4:4791" / "[::1]:4791" into buf (at least 64 bytes). */
const char *sr_addr_str(const struct sr_addr *a, char *buf, size_t len);
/* sockaddr conversions; returns the sockaddr length. */
socklen_t sr_addr_to_sockaddr(const struct sr_addr *a, struct sockaddr_storage *ss);
void sr_addr_from_sockaddr(struct sr_addr *a, const struct sockaddr *sa);

#endif /* SR_CORE_ADDR_H */
