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

/*
 * What a device bound to a shows through the verbs API (docs/gid.md, "The LID carries the
 * port"). GID index 0 is always the address GID, ::ffff:a.b.c.d for IPv4: programs such as
 * perftest refuse a peer whose GID is of another "type" than theirs. An IPv4 device on another
 * UDP port than 4791 has a table of two, its port GID at index 1, and reports the port as its
 * LID (which RoCE does not use otherwise): a program that exchanges LID and GID, as perftest
 * and the rdma-core examples do, puts it in the address vector's dlid, and a softrdma sender
 * sends there (sr_lid_port).
 */
int sr_gid_table_len(const struct sr_addr *a);
/* GID number index of the table above: 0, or -ENODATA past its end. */
int sr_gid_at(const struct sr_addr *a, int index, union ibv_gid *gid);
/* The LID a device bound to a reports: its UDP port when it is not 4791 (IPv4), else 0. */
uint16_t sr_addr_lid(const struct sr_addr *a);
/* The UDP port a dlid names beside an IPv4 GID of the standard form, or 0 when it names none:
 * 1024..49151 only (never a well-known port, never a RoCEv2 sender's entropy source port). */
uint16_t sr_lid_port(uint16_t dlid);
/* The UDP port an IPv4 GID names in its bytes 8-9 (the port GID form), or 0 when it names none
 * (the standard ::ffff:a.b.c.d, or not an IPv4 GID). */
uint16_t sr_gid_port(const union ibv_gid *gid);
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
