// SPDX-License-Identifier: MIT
/*
 * The RoCEv2 Invariant CRC (IBA annex A17.3.3, computed the way the Linux rxe driver does),
 * the slow-path recovery of an unknown IPv4 ID, and real IP/UDP headers for the pcap tap.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "hdr.h"
#include "icrc.h"

#define SR_IPV4_HLEN 20
#define SR_IPV6_HLEN 40
#define SR_UDP_HLEN 8
#define SR_IPPROTO_UDP 17
#define SR_IPV4_DF 0x4000
#define SR_DEFAULT_TTL 64

/*
 * The IP and UDP headers as the ICRC sees them (A17.3.3): the fields a router may change are
 * replaced by ones. IPv4: TOS, TTL and header checksum; IPv6: traffic class, flow label and hop
 * limit; UDP: checksum. Lengths, addresses, ports, and the IPv4 ID and flags stay. A receiver
 * gets none of this from a UDP socket, so it is rebuilt from the tuple. Returns the length.
 */
static size_t masked_ipudp(uint8_t *h, const struct sr_ipudp *ipu, size_t udp_payload_len)
{
	uint16_t udp_len = (uint16_t)(SR_UDP_HLEN + udp_payload_len);
	uint8_t *u;

	if (ipu->family == 6) {
		h[0] = 0x6f;			/* version 6 | traffic class (masked) */
		memset(h + 1, 0xff, 3);		/* traffic class low nibble | flow label */
		sr_st_be16(h + 4, udp_len);	/* payload length */
		h[6] = SR_IPPROTO_UDP;
		h[7] = 0xff;			/* hop limit */
		memcpy(h + 8, ipu->src, 16);
		memcpy(h + 24, ipu->dst, 16);
		u = h + SR_IPV6_HLEN;
	} else {
		h[0] = 0x45;			/* version 4, 5 words: RoCEv2 uses no options */
		h[1] = 0xff;			/* TOS */
		sr_st_be16(h + 2, (uint16_t)(SR_IPV4_HLEN + udp_len));
		sr_st_be16(h + 4, ipu->ip_id);
		sr_st_be16(h + 6, ipu->df ? SR_IPV4_DF : 0);
		h[8] = 0xff;			/* TTL */
		h[9] = SR_IPPROTO_UDP;
		h[10] = h[11] = 0xff;		/* header checksum */
		memcpy(h + 12, ipu->src, 4);
		memcpy(h + 16, ipu->dst, 4);
		u = h + SR_IPV4_HLEN;
	}
	sr_st_be16(u, ipu->sport);
	sr_st_be16(u + 2, ipu->dport);
	sr_st_be16(u + 4, udp_len);
	u[6] = u[7] = 0xff;			/* UDP checksum */
	return (size_t)(u + SR_UDP_HLEN - h);
}

void sr_icrc_begin(struct sr_icrc *st, const struct sr_ipudp *ipu, size_t udp_payload_len)
{
	uint8_t h[SR_IPV6_HLEN + SR_UDP_HLEN];

	st->crc = sr_crc32_raw(SR_ICRC_SEED, h, masked_ipudp(h, ipu, udp_payload_len));
}

/* The BTH as the ICRC sees it, at dst. */
static void masked_bth(uint8_t *dst, const void *bth)
{
	memcpy(dst, bth, SR_BTH_LEN);
	dst[4] = 0xff;	/* resv8a: FECN, BECN and reserved bits, which switches may set */
}

void sr_icrc_bth(struct sr_icrc *st, const void *bth)
{
	uint8_t b[SR_BTH_LEN];

	masked_bth(b, bth);
	st->crc = sr_crc32_raw(st->crc, b, sizeof(b));
}

void sr_icrc_update(struct sr_icrc *st, const void *buf, size_t len)
{
	st->crc = sr_crc32_raw(st->crc, buf, len);
}

uint32_t sr_icrc_final(const struct sr_icrc *st)
{
	return ~st->crc;
}

/*
 * One pass: the masked IP/UDP headers (28 or 48 bytes), the masked BTH and the first bytes of
 * the rest make one 64-byte block, and the fold goes on from there. Taken piece by piece, the
 * 40-60 bytes of pseudo-header went through the byte tables on every packet: 60-70 ns of the
 * 417 an 8 KiB packet took, and most of a small packet's.
 */
uint32_t sr_icrc_calc(const struct sr_ipudp *ipu, const void *pkt, size_t len)
{
	const uint8_t *p = pkt;
	uint8_t head[64];
	size_t h, rest, fill;

	if (len < SR_BTH_LEN + SR_ICRC_LEN)
		return 0;
	h = masked_ipudp(head, ipu, len);
	masked_bth(head + h, p);
	h += SR_BTH_LEN;
	rest = len - SR_BTH_LEN - SR_ICRC_LEN;
	fill = sizeof(head) - h;
	if (rest < fill)
		return ~sr_crc32_raw(sr_crc32_raw(SR_ICRC_SEED, head, h), p + SR_BTH_LEN, rest);
	memcpy(head + h, p + SR_BTH_LEN, fill);
	return ~sr_crc32_raw_head64(SR_ICRC_SEED, head, p + SR_BTH_LEN + fill, rest - fill);
}

/*
 * sr_icrc_calc of the packet made of hdr (hlen bytes, BTH first), the payload at pay (paylen)
 * and the pad at pad (len - hlen - paylen - 4 bytes), while the payload goes to dst in the same
 * pass: the CRC describes the bytes stored at dst, which are the bytes read once from pay.
 * Nothing else is written to dst. A sender takes its snapshot this way, a receiver places a
 * payload, each reading the bytes once instead of twice.
 */
uint32_t sr_icrc_calc_copy(const struct sr_ipudp *ipu, const void *hdr, size_t hlen,
			   const void *pay, size_t paylen, const void *pad, size_t len, void *dst)
{
	const uint8_t *p = pay, *ext = (const uint8_t *)hdr + SR_BTH_LEN;
	uint8_t *d = dst;
	uint8_t head[64];	/* masked IP/UDP and BTH: at most 60 bytes */
	size_t h, fill, extlen = hlen - SR_BTH_LEN, padlen = len - SR_ICRC_LEN - hlen - paylen;
	uint32_t crc;

	h = masked_ipudp(head, ipu, len);
	masked_bth(head + h, hdr);
	h += SR_BTH_LEN;
	if (h + extlen > 64 || paylen < 64 - h - extlen) {
		/* headers beyond one block, or a short payload: piece by piece */
		crc = sr_crc32_raw(sr_crc32_raw(SR_ICRC_SEED, head, h), ext, extlen);
		memcpy(d, p, paylen);
		crc = sr_crc32_raw(crc, d, paylen);
	} else {
		memcpy(head + h, ext, extlen);
		h += extlen;
		fill = 64 - h;
		memcpy(d, p, fill);
		memcpy(head + h, d, fill);
		crc = sr_crc32_raw_head64_copy(SR_ICRC_SEED, head, d + fill, p + fill,
					       paylen - fill);
	}
	return ~sr_crc32_raw(crc, pad, padlen);
}

bool sr_icrc_check(const struct sr_ipudp *ipu, const void *pkt, size_t len)
{
	if (len < SR_BTH_LEN + SR_ICRC_LEN)
		return false;
	return sr_icrc_calc(ipu, pkt, len) == sr_ld_le32((const uint8_t *)pkt + len - SR_ICRC_LEN);
}

/* ---- Recovering an IPv4 ID -------------------------------------------------------------- */
/*
 * The raw CRC is affine over GF(2) in its input: for a fixed length, flipping a set of input
 * bits XORs the result with the CRC (seed 0) of just those bits, independently of everything
 * else. A set bit of value v in byte k of an n-byte message contributes
 *	T[v] * x^(8(n-1-k)) mod P
 * (T[v] = CRC of the lone byte; each following zero byte multiplies by x^8). So, with the ID
 * taken as 0, the difference between the computed and the received ICRC must equal the XOR of
 * the contributions b_i of the ID bits that are set: 32 equations in 16 unknowns. Gaussian
 * elimination over the b_i solves it; the b_i are independent (multiplying by a power of x is
 * invertible mod P because P(0) = 1, and a nonzero polynomial of degree < 16 is not a multiple
 * of P), so a solution is unique when it exists. The DF bit is one more contribution: with DF
 * assumed set first, a failure retries with it flipped. Cost: no CRC pass beyond the check that
 * failed (its result is the starting point), and about twenty 32x32 GF(2) products.
 * A random corruption passes with probability 2^-16 per DF guess: the price of not knowing
 * the ID, which is why this runs only for IPv4 peers that do not send ID 0.
 */
struct gf2_basis {
	uint32_t row[32];	/* row[b]: a combination whose highest set bit is b, or 0 */
	uint32_t tag[32];	/* which unknowns (bit i = ID bit i) make up row[b] */
};

static void basis_add(struct gf2_basis *bs, uint32_t v, uint32_t tag)
{
	for (int b = 31; b >= 0 && v; b--) {
		if (!(v & (1u << b)))
			continue;
		if (!bs->row[b]) {
			bs->row[b] = v;
			bs->tag[b] = tag;
			return;
		}
		v ^= bs->row[b];
		tag ^= bs->tag[b];
	}
}

/* The unknowns whose contributions XOR to `target`, or -1 when none do. */
static int64_t basis_solve(const struct gf2_basis *bs, uint32_t target)
{
	uint32_t tag = 0;

	for (int b = 31; b >= 0 && target; b--) {
		if (!(target & (1u << b)))
			continue;
		if (!bs->row[b])
			return -1;
		target ^= bs->row[b];
		tag ^= bs->tag[b];
	}
	return tag;
}

/* CRC contribution of the lone byte `v`, followed by `after` more bytes. */
static uint32_t contribution(uint8_t v, uint32_t x8_after)
{
	return sr_crc32_mulmod(x8_after, sr_crc32_raw_sw(0, &v, 1));
}

bool sr_icrc_recover_v4_id_from(struct sr_ipudp *ipu, size_t len, uint32_t got, uint32_t want)
{
	/* Bytes the CRC covers after the IPv4 header's byte 6 (flags): 13 of IP, UDP, BTH..pad. */
	size_t after6 = (SR_IPV4_HLEN - 7) + SR_UDP_HLEN + (len - SR_ICRC_LEN);
	uint32_t x8 = sr_crc32_xpow(8), z6, z5, z4, c[16], diff, df_flip;
	struct gf2_basis bs;
	int64_t id;

	if (ipu->family != 4 || len < SR_BTH_LEN + SR_ICRC_LEN)
		return false;
	z6 = sr_crc32_xpow(8 * (uint64_t)after6);
	z5 = sr_crc32_mulmod(z6, x8);	/* the ID's low byte is byte 5, its high byte 4 */
	z4 = sr_crc32_mulmod(z5, x8);
	memset(&bs, 0, sizeof(bs));
	for (int i = 0; i < 8; i++) {
		c[i] = contribution((uint8_t)(1u << i), z5);
		c[i + 8] = contribution((uint8_t)(1u << i), z4);
	}
	for (int i = 0; i < 16; i++)
		basis_add(&bs, c[i], 1u << i);
	df_flip = contribution(SR_IPV4_DF >> 8, z6);

	/* got was made with the caller's guess: take the guess's ID bits and DF out of the
	 * difference, which is then the one against ID 0 with DF set. */
	diff = got ^ want;
	for (int i = 0; i < 16; i++)
		if (ipu->ip_id & (1u << i))
			diff ^= c[i];
	if (!ipu->df)
		diff ^= df_flip;
	for (int pass = 0; pass < 2; pass++, diff ^= df_flip) {
		id = basis_solve(&bs, diff);
		if (id < 0)
			continue;
		ipu->ip_id = (uint16_t)id;
		ipu->df = pass == 0;
		return true;
	}
	return false;
}

bool sr_icrc_recover_v4_id(struct sr_ipudp *ipu, const void *pkt, size_t len)
{
	if (ipu->family != 4 || len < SR_BTH_LEN + SR_ICRC_LEN)
		return false;
	return sr_icrc_recover_v4_id_from(ipu, len, sr_icrc_calc(ipu, pkt, len),
					  sr_ld_le32((const uint8_t *)pkt + len - SR_ICRC_LEN));
}

/* ---- Real headers for the pcap tap ----------------------------------------------------- */

/* One's-complement sum (RFC 1071) over bytes that continue a stream at parity *odd. */
static uint64_t csum_add(uint64_t sum, const uint8_t *p, size_t len, bool *odd)
{
	if (len && *odd) {
		sum += *p++;
		len--;
		*odd = false;
	}
	for (; len >= 2; p += 2, len -= 2)
		sum += (uint32_t)p[0] << 8 | p[1];
	if (len) {
		sum += (uint32_t)p[0] << 8;
		*odd = true;
	}
	return sum;
}

static uint16_t csum_fold(uint64_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static size_t build_v4(uint8_t *h, const struct sr_ipudp *ipu, uint16_t udp_len)
{
	bool odd = false;

	h[0] = 0x45;
	h[1] = ipu->tos;
	sr_st_be16(h + 2, (uint16_t)(SR_IPV4_HLEN + udp_len));
	sr_st_be16(h + 4, ipu->ip_id);
	sr_st_be16(h + 6, ipu->df ? SR_IPV4_DF : 0);
	h[8] = ipu->ttl ? ipu->ttl : SR_DEFAULT_TTL;
	h[9] = SR_IPPROTO_UDP;
	h[10] = h[11] = 0;
	memcpy(h + 12, ipu->src, 4);
	memcpy(h + 16, ipu->dst, 4);
	sr_st_be16(h + 10, csum_fold(csum_add(0, h, SR_IPV4_HLEN, &odd)));
	return SR_IPV4_HLEN;
}

static size_t build_v6(uint8_t *h, const struct sr_ipudp *ipu, uint16_t udp_len)
{
	sr_st_be32(h, 6u << 28 | (uint32_t)ipu->tos << 20 | (ipu->flow_label & 0xfffff));
	sr_st_be16(h + 4, udp_len);
	h[6] = SR_IPPROTO_UDP;
	h[7] = ipu->ttl ? ipu->ttl : SR_DEFAULT_TTL;
	memcpy(h + 8, ipu->src, 16);
	memcpy(h + 24, ipu->dst, 16);
	return SR_IPV6_HLEN;
}

/* UDP over IPv6 must carry a checksum (RFC 8200 8.1): pseudo-header, UDP header, payload. */
static uint16_t udp6_csum(const uint8_t *ip6, const uint8_t *udp, const struct iovec *iov,
			  int iovcnt)
{
	uint8_t pseudo[8] = { 0 };
	uint64_t sum;
	bool odd = false;

	memcpy(pseudo + 2, udp + 4, 2);		/* 32-bit upper-layer length */
	pseudo[7] = SR_IPPROTO_UDP;
	sum = csum_add(0, ip6 + 8, 32, &odd);	/* source and destination addresses */
	sum = csum_add(sum, pseudo, sizeof(pseudo), &odd);
	sum = csum_add(sum, udp, SR_UDP_HLEN, &odd);
	for (int i = 0; i < iovcnt && iov; i++)
		sum = csum_add(sum, iov[i].iov_base, iov[i].iov_len, &odd);
	sum = csum_fold(sum);
	return sum ? (uint16_t)sum : 0xffff;	/* 0 means "no checksum" and is not allowed */
}

size_t sr_ipudp_build(void *buf, const struct sr_ipudp *ipu, size_t udp_payload_len,
		      const struct iovec *payload, int iovcnt)
{
	uint16_t udp_len = (uint16_t)(SR_UDP_HLEN + udp_payload_len);
	uint8_t *h = buf, *u;

	u = h + (ipu->family == 6 ? build_v6(h, ipu, udp_len) : build_v4(h, ipu, udp_len));
	sr_st_be16(u, ipu->sport);
	sr_st_be16(u + 2, ipu->dport);
	sr_st_be16(u + 4, udp_len);
	sr_st_be16(u + 6, 0);	/* IPv4: no UDP checksum, as RoCEv2 senders send it */
	if (ipu->family == 6)
		sr_st_be16(u + 6, udp6_csum(h, u, payload, iovcnt));
	return (size_t)(u + SR_UDP_HLEN - h);
}
