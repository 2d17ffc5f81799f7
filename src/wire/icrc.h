/* SPDX-License-Identifier: MIT */
/*
 * RoCEv2 Invariant CRC (IBA annex A17.3.3) and the IP/UDP encapsulation it covers.
 *
 * The ICRC is a CRC-32 (the Ethernet polynomial, reflected) computed over: 8 bytes of 0xff
 * standing for the masked LRH, the IP header with its variant fields masked to all ones
 * (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop limit), the UDP
 * header with its checksum masked to 0xffff, the BTH with its resv8a byte (FECN/BECN) masked
 * to 0xff, then every remaining header, the payload and the pad. The 4 ICRC bytes are the
 * complemented CRC, stored little-endian (as the Linux rxe driver writes them).
 *
 * A UDP socket never sees the IP header, so the receiver rebuilds it from what it knows. Our
 * sender makes that possible: its socket sets IP_PMTUDISC_DO, so Linux sends IPv4 with DF set
 * and IP ID 0 (unconnected socket). Linux rxe instead uses random IDs: sr_icrc_recover_v4_id()
 * solves for the ID (CRC-32 is linear), at the cost of 17 bits of the check's strength (ID and
 * DF); for a softrdma sender's packet the receiver accepts only the IDs such a sender uses
 * (src/net/udp.c, sr_net_icrc_match), which keeps all but 6 bits of it.
 */
#ifndef SR_WIRE_ICRC_H
#define SR_WIRE_ICRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An IP/UDP 5-tuple plus the IP header fields the ICRC covers. */
struct sr_ipudp {
	uint8_t family;		/* 4 or 6 */
	uint8_t src[16];	/* IPv4: first 4 bytes, network order */
	uint8_t dst[16];
	uint16_t sport, dport;	/* host order */
	uint16_t ip_id;		/* IPv4 identification, host order (0 for softrdma senders) */
	bool df;		/* IPv4 don't-fragment flag (set by softrdma senders) */
	uint8_t ttl;		/* used only when building real headers (pcap); masked in the ICRC */
	uint8_t tos;		/* idem (IPv6: traffic class) */
	uint32_t flow_label;	/* IPv6, idem */
};

/* Raw reflected CRC-32 (poly 0xEDB88320) without pre/post inversion: crc_out = f(crc_in, buf). */
uint32_t sr_crc32_raw(uint32_t crc, const void *buf, size_t len);
/* The same over the 64 bytes at head followed by the len bytes at buf (one folding pass). */
uint32_t sr_crc32_raw_head64(uint32_t crc, const void *head, const void *buf, size_t len);
/* The same while copying buf to dst (len bytes, read once): the CRC is that of the bytes
 * stored at dst, whatever another thread does to buf meanwhile. */
uint32_t sr_crc32_raw_head64_copy(uint32_t crc, const void *head, void *dst, const void *buf,
				  size_t len);
/* The same through one engine: slicing-by-8 tables, or PCLMULQDQ folding (falls back to the
 * tables where the CPU lacks it). Identical results; for tests and benchmarks. */
uint32_t sr_crc32_raw_sw(uint32_t crc, const void *buf, size_t len);
uint32_t sr_crc32_raw_pclmul(uint32_t crc, const void *buf, size_t len);
bool sr_crc32_have_pclmul(void);
/* The folding engine in use: 0 the tables, 1 PCLMULQDQ (16-byte lanes), then, for 512 bytes
 * and more, VPCLMULQDQ with 2 AVX2 (32-byte lanes) or 3 AVX-512 (64-byte lanes). limit >= 0
 * caps it at the best the CPU has (tests run each one; not thread-safe); returns the engine
 * now in use. */
int sr_crc32_engine(int limit);
/* The engines' names (tables, pclmul, vpclmul256, vpclmul512: param crc_engine), and back
 * (-1: no such engine). */
const char *sr_crc32_engine_name(int engine);
int sr_crc32_engine_parse(const char *name);
/*
 * GF(2) helpers in the reflected convention of the CRC (bit 31 = coefficient of x^0):
 * x^n mod P; a * b mod P; and the raw CRC state after `nbytes` more zero bytes.
 */
uint32_t sr_crc32_xpow(uint64_t n);
uint32_t sr_crc32_mulmod(uint32_t a, uint32_t b);
uint32_t sr_crc32_zeros(uint32_t crc, uint64_t nbytes);

/* Raw CRC state after 8 bytes of 0xff from the all-ones start: the masked LRH (A17.3.3). */
#define SR_ICRC_SEED 0xdebb20e3u

/* Incremental ICRC over a packet gathered from pieces (BTH first). */
struct sr_icrc {
	uint32_t crc;
};
/* udp_payload_len: bytes from the BTH through the ICRC, inclusive. */
void sr_icrc_begin(struct sr_icrc *st, const struct sr_ipudp *ipu, size_t udp_payload_len);
/* The BTH (12 bytes) with resv8a masked; must be the first update after begin. */
void sr_icrc_bth(struct sr_icrc *st, const void *bth);
void sr_icrc_update(struct sr_icrc *st, const void *buf, size_t len);
/* The 32-bit value to store with sr_st_le32() in the packet's last 4 bytes. */
uint32_t sr_icrc_final(const struct sr_icrc *st);

/* One-shot over a contiguous packet of `len` bytes (BTH .. ICRC inclusive). */
uint32_t sr_icrc_calc(const struct sr_ipudp *ipu, const void *pkt, size_t len);
/*
 * The same for a packet given as headers (hdr, hlen bytes: BTH first, hlen >= 12), payload (pay,
 * paylen bytes) and pad (pad, the rest up to the ICRC; len: BTH .. ICRC inclusive), while the
 * payload is copied to dst in the same pass. The result describes the bytes stored at dst.
 */
uint32_t sr_icrc_calc_copy(const struct sr_ipudp *ipu, const void *hdr, size_t hlen,
			   const void *pay, size_t paylen, const void *pad, size_t len, void *dst);
/* True when the packet's trailing 4 bytes match. */
bool sr_icrc_check(const struct sr_ipudp *ipu, const void *pkt, size_t len);
/*
 * For an IPv4 packet whose ICRC fails with the given ip_id/df, look for the 16-bit IP ID (with
 * DF set, then clear) that makes it valid. On success sets ipu->ip_id / ipu->df and returns
 * true. Costs one CRC pass and a few GF(2) products; used only on the slow path for senders that
 * number their IDs otherwise (Linux rxe; GSO batches cut before the receiver).
 */
bool sr_icrc_recover_v4_id(struct sr_ipudp *ipu, const void *pkt, size_t len);
/* The same without any pass: got is the ICRC the check computed with ipu's ip_id/df (the value
 * sr_icrc_calc returned), want the packet's own, len the packet's length. */
bool sr_icrc_recover_v4_id_from(struct sr_ipudp *ipu, size_t len, uint32_t got, uint32_t want);

/*
 * Writes a real IPv4 (20 bytes) or IPv6 (40 bytes) header and an 8-byte UDP header in front of
 * a UDP payload of udp_payload_len bytes, with a valid IPv4 header checksum; the UDP checksum
 * is 0 for IPv4 and, for IPv6, computed over the payload given as iov (may be NULL for 0).
 * Returns the number of bytes written (28 or 48). Used by the pcap tap.
 */
struct iovec;
size_t sr_ipudp_build(void *buf, const struct sr_ipudp *ipu, size_t udp_payload_len,
		      const struct iovec *payload, int iovcnt);

#endif /* SR_WIRE_ICRC_H */
