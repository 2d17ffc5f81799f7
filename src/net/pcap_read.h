/* SPDX-License-Identifier: MIT */
/*
 * A small reader of classic pcap files (tests and `softrdma pcap`): both byte orders, microsecond and nanosecond
 * variants; link types Ethernet (1, with 802.1Q/802.1ad tags), Linux cooked SLL (113) and
 * SLL2 (276), RAW (101) and the bare IPv4/IPv6 types (228, 229). Yields each record's IP packet,
 * and splits an IP/UDP packet into the tuple the ICRC needs and the UDP payload.
 * Depends on libc and src/wire only; never reads outside the file it loaded.
 */
#ifndef SR_NET_PCAP_READ_H
#define SR_NET_PCAP_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/icrc.h"

struct sr_pcapr {
	uint8_t *data;		/* the whole file */
	size_t len;
	size_t pos;
	bool swapped;		/* written with the other byte order */
	bool nsec;		/* nanosecond timestamps */
	uint32_t linktype;
	uint32_t snaplen;
};

struct sr_pcapr_rec {
	uint64_t ts_ns;			/* since the epoch */
	const uint8_t *frame;		/* the captured bytes, link header included */
	size_t caplen, origlen;
	const uint8_t *ip;		/* the IPv4/IPv6 packet in the frame, or NULL */
	size_t ip_len;			/* captured bytes from ip to the end of the frame */
};

/* Loads `path`. 0, or -errno (-EINVAL: not a classic pcap file). */
int sr_pcapr_open(struct sr_pcapr *r, const char *path);
/* The same over a copy of a buffer already in memory. */
int sr_pcapr_open_mem(struct sr_pcapr *r, const void *buf, size_t len);
/* 1: *rec is the next record; 0: end of file; -1: a truncated or corrupt record. */
int sr_pcapr_next(struct sr_pcapr *r, struct sr_pcapr_rec *rec);
void sr_pcapr_close(struct sr_pcapr *r);

/*
 * Parses the IPv4 (no fragment) or IPv6 (UDP as the first next header) packet at ip[0..len)
 * into *ipu (addresses, ports, IPv4 ID/DF/TTL/TOS, IPv6 traffic class/flow label/hop limit)
 * and the UDP payload as the UDP length field gives it (Ethernet padding excluded).
 * 0, or -1 when it is not such a packet or is shorter than its own length fields.
 */
int sr_pcapr_udp(const uint8_t *ip, size_t len, struct sr_ipudp *ipu, const uint8_t **payload,
		 size_t *paylen);

#endif /* SR_NET_PCAP_READ_H */
