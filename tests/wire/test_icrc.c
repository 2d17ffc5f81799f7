// SPDX-License-Identifier: MIT
/*
 * CRC-32 engines, the RoCEv2 ICRC, the IPv4 ID recovery and the IP/UDP header builder.
 * Also prints the CRC throughput of each engine on 4 KiB buffers.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "sr_test.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static void fill(uint8_t *b, size_t len)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)rnd();
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The definition, one bit at a time: the reference both engines must match. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
	while (len--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ ((crc & 1) ? 0xedb88320u : 0);
	}
	return crc;
}

/* ---- CRC-32 -------------------------------------------------------------------------- */

static void test_crc_vectors(void)
{
	static const char check[] = "123456789";
	uint8_t ff[8];

	/* CRC-32 (IEEE 802.3) check value: pre- and post-inverted. */
	CHECK_EQ(~sr_crc32_raw(~0u, check, 9), 0xcbf43926);
	/* Without the final inversion (CRC-32/JAMCRC); with a zero seed, from the definition. */
	CHECK_EQ(sr_crc32_raw(~0u, check, 9), 0x340bc6d9);
	CHECK_EQ(sr_crc32_raw(0, check, 9), crc_bitwise(0, (const uint8_t *)check, 9));
	CHECK_EQ(sr_crc32_raw(0x12345678, "", 0), 0x12345678);
	/* The ICRC seed is the state after the masked LRH's 8 bytes of ones (A17.3.3). */
	memset(ff, 0xff, sizeof(ff));
	CHECK_EQ(sr_crc32_raw(~0u, ff, 8), SR_ICRC_SEED);
	/* Appending the little-endian CRC of a message gives the CRC-32 residue. */
	{
		uint8_t m[13];

		memcpy(m, check, 9);
		sr_st_le32(m + 9, ~sr_crc32_raw(~0u, check, 9));
		CHECK_EQ(~sr_crc32_raw(~0u, m, 13), 0x2144df1c);
	}
}

/* The engines against the bitwise definition: every length to 1 KiB, odd alignments, seeds.
 * Run once per folding engine the CPU has (sr_crc32_engine caps it). */
static void test_crc_engines(void)
{
	static uint8_t buf[70000 + 16];
	int bad = 0;

	fill(buf, sizeof(buf));
	printf("crc32: pclmul %s, engine %d\n", sr_crc32_have_pclmul() ? "available" : "not available",
	       sr_crc32_engine(-1));
	for (size_t len = 0; len <= 1024; len++) {
		size_t off = rnd() % 16;
		uint32_t seed = (uint32_t)rnd();
		uint32_t want = crc_bitwise(seed, buf + off, len);

		if (sr_crc32_raw_sw(seed, buf + off, len) != want ||
		    sr_crc32_raw_pclmul(seed, buf + off, len) != want ||
		    sr_crc32_raw(seed, buf + off, len) != want)
			bad++;
	}
	for (int i = 0; i < 200; i++) {
		size_t len = rnd() % 70000, off = rnd() % 16;
		uint32_t seed = (uint32_t)rnd();
		uint32_t sw = sr_crc32_raw_sw(seed, buf + off, len);

		bad += sw != sr_crc32_raw_pclmul(seed, buf + off, len);
		bad += sw != sr_crc32_raw(seed, buf + off, len);
		if (i < 10)
			bad += sw != crc_bitwise(seed, buf + off, len);
	}
	/* A 64-byte head block, then the rest from elsewhere (sr_icrc_calc's one pass). */
	for (size_t len = 0; len <= 1024; len++) {
		size_t off = rnd() % 16, at = 1000 + rnd() % 1000;
		uint32_t seed = (uint32_t)rnd();
		uint32_t want = crc_bitwise(crc_bitwise(seed, buf + off, 64), buf + at, len);

		bad += sr_crc32_raw_head64(seed, buf + off, buf + at, len) != want;
	}
	CHECK_EQ(bad, 0);
	/* The same while copying: the bytes land at dst, nothing around them. */
	for (size_t len = 0; len <= 1100; len++) {
		static uint8_t dst[1200];
		size_t off = rnd() % 16, at = 1000 + rnd() % 1000, d = 1 + rnd() % 31;
		uint32_t seed = (uint32_t)rnd();
		uint32_t want = crc_bitwise(crc_bitwise(seed, buf + off, 64), buf + at, len);

		memset(dst, 0xa5, sizeof(dst));
		bad += sr_crc32_raw_head64_copy(seed, buf + off, dst + d, buf + at, len) != want;
		bad += memcmp(dst + d, buf + at, len) != 0;
		bad += dst[d - 1] != 0xa5 || dst[d + len] != 0xa5;
	}
	/* Long ones, copied: every 64-byte lane count and tail past the wide engine's loop. */
	for (int i = 0; i < 300; i++) {
		static uint8_t dst[70000 + 64];
		size_t len = i < 100 ? 448 + (size_t)i * 17 : rnd() % 66000;
		size_t off = rnd() % 16, at = 16 + rnd() % 1000, d = 1 + rnd() % 31;
		uint32_t seed = (uint32_t)rnd();
		uint32_t want = sr_crc32_raw_sw(sr_crc32_raw_sw(seed, buf + off, 64), buf + at, len);

		memset(dst, 0xa5, len + 64);
		bad += sr_crc32_raw_head64_copy(seed, buf + off, dst + d, buf + at, len) != want;
		bad += sr_crc32_raw_head64(seed, buf + off, buf + at, len) != want;
		bad += memcmp(dst + d, buf + at, len) != 0;
		bad += dst[d - 1] != 0xa5 || dst[d + len] != 0xa5;
		if (i < 3)
			bad += want != crc_bitwise(crc_bitwise(seed, buf + off, 64), buf + at, len);
	}
	CHECK_EQ(bad, 0);
}

/* x^n mod P and zero-byte shifts against running the CRC over real zero bytes. */
static void test_crc_gf2(void)
{
	static const uint8_t zeros[4096];

	CHECK_EQ(sr_crc32_xpow(0), 0x80000000u);	/* x^0: bit 31 in the reflected form */
	CHECK_EQ(sr_crc32_xpow(1), 0x40000000u);
	CHECK_EQ(sr_crc32_xpow(31), 1);
	CHECK_EQ(sr_crc32_xpow(32), 0xedb88320u);	/* x^32 = the polynomial's lower terms */
	CHECK_EQ(sr_crc32_mulmod(sr_crc32_xpow(100), sr_crc32_xpow(23)), sr_crc32_xpow(123));
	for (int i = 0; i < 100; i++) {
		uint32_t c = (uint32_t)rnd();
		size_t n = rnd() % sizeof(zeros);

		CHECK_EQ(sr_crc32_zeros(c, n), sr_crc32_raw(c, zeros, n));
	}
}

static void bench_one(const char *name, uint32_t (*fn)(uint32_t, const void *, size_t))
{
	static uint8_t buf[4096];
	uint32_t crc = 0;
	double t0, dt;
	long n = 0;

	fill(buf, sizeof(buf));
	t0 = now_s();
	do {
		for (int i = 0; i < 256; i++)
			crc = fn(crc, buf, sizeof(buf));
		n += 256;
		dt = now_s() - t0;
	} while (dt < 0.2);
	printf("crc32 %-11s 4 KiB buffers: %8.0f MB/s (%08x)\n", name, n * 4096.0 / dt / 1e6, crc);
}

/* The one pass of placement and of the sender's snapshot: 8 KiB pieces into a 1 MiB region. */
static void bench_copy(const char *name)
{
	static uint8_t src[8192], head[64], dst[1 << 20];
	uint32_t crc = 0;
	double t0, dt;
	long n = 0;

	fill(src, sizeof(src));
	fill(head, sizeof(head));
	t0 = now_s();
	do {
		for (size_t o = 0; o < sizeof(dst); o += sizeof(src))
			crc = sr_crc32_raw_head64_copy(crc, head, dst + o, src, sizeof(src));
		n += sizeof(dst) / sizeof(src);
		dt = now_s() - t0;
	} while (dt < 0.2);
	printf("crc32 %-11s copy of 8 KiB pieces into 1 MiB: %8.0f MB/s (%08x)\n", name,
	       n * 8192.0 / dt / 1e6, crc);
}

/* ---- ICRC --------------------------------------------------------------------------- */

static void ipv4(struct sr_ipudp *u, const char *src, const char *dst, uint16_t sport)
{
	memset(u, 0, sizeof(*u));
	u->family = 4;
	inet_pton(AF_INET, src, u->src);
	inet_pton(AF_INET, dst, u->dst);
	u->sport = sport;
	u->dport = SR_ROCEV2_UDP_PORT;
}

static void ipv6(struct sr_ipudp *u, const char *src, const char *dst, uint16_t sport)
{
	memset(u, 0, sizeof(*u));
	u->family = 6;
	inet_pton(AF_INET6, src, u->src);
	inet_pton(AF_INET6, dst, u->dst);
	u->sport = sport;
	u->dport = SR_ROCEV2_UDP_PORT;
}

/* An RC ACK sent by Linux rxe (ib_send_bw.pcap in the interop suite): a known answer. */
static void test_icrc_known(void)
{
	static const uint8_t ack[20] = {
		0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x1a, 0x00, 0x07, 0xf2, 0xde,
		0x1f, 0x00, 0x00, 0x01, 0xee, 0xf7, 0x5c, 0x41,
	};
	struct sr_ipudp u;

	ipv4(&u, "10.0.0.1", "10.0.0.2", 49828);
	u.ip_id = 0x2ab9;
	u.df = true;
	CHECK_EQ(sr_icrc_calc(&u, ack, sizeof(ack)), 0x415cf7ee);
	CHECK(sr_icrc_check(&u, ack, sizeof(ack)));
	u.ttl = 1;		/* masked fields do not matter */
	u.tos = 0xb8;
	CHECK(sr_icrc_check(&u, ack, sizeof(ack)));
	u.df = false;
	CHECK(!sr_icrc_check(&u, ack, sizeof(ack)));
	u.df = true;
	u.sport++;
	CHECK(!sr_icrc_check(&u, ack, sizeof(ack)));
	CHECK(!sr_icrc_check(&u, ack, 15));
}

static size_t make_packet(uint8_t *pkt, const struct sr_ipudp *u, uint8_t opc, size_t paylen)
{
	size_t len = sr_opcode[opc].length + paylen + SR_ICRC_LEN;

	fill(pkt, len);
	sr_bth_build((struct sr_bth *)pkt, opc, false, false, 0, 0xffff, 0x11, true, 0x22);
	sr_st_le32(pkt + len - SR_ICRC_LEN, sr_icrc_calc(u, pkt, len));
	return len;
}

/* Incremental over random splits == one-shot; the masked fields are really masked. */
static void test_icrc_incremental(const struct sr_ipudp *u)
{
	static uint8_t pkt[8192];

	for (int i = 0; i < 500; i++) {
		size_t len = make_packet(pkt, u, 0x0a, rnd() % 4200);
		uint32_t one = sr_icrc_calc(u, pkt, len);
		size_t body = len - SR_BTH_LEN - SR_ICRC_LEN, pos = SR_BTH_LEN;
		struct sr_icrc st;

		sr_icrc_begin(&st, u, len);
		sr_icrc_bth(&st, pkt);
		while (pos < SR_BTH_LEN + body) {
			size_t n = rnd() % (i & 1 ? 7 : 300);

			if (n > SR_BTH_LEN + body - pos)
				n = SR_BTH_LEN + body - pos;
			sr_icrc_update(&st, pkt + pos, n);
			pos += n;
		}
		CHECK_EQ(sr_icrc_final(&st), one);
		CHECK(sr_icrc_check(u, pkt, len));
		/* FECN/BECN (BTH byte 4) are masked; any other bit is covered. */
		pkt[4] ^= 0xc0;
		CHECK(sr_icrc_check(u, pkt, len));
		pkt[4] ^= 0xc0;
		{
			size_t at = rnd() % (len - SR_ICRC_LEN);

			if (at == 4)
				at = 5;
			pkt[at] ^= (uint8_t)(1u << (rnd() % 8));
			CHECK(!sr_icrc_check(u, pkt, len));
		}
	}
}

/*
 * sr_icrc_calc_copy (headers, payload and pad apart; the payload copied in the same pass) ==
 * sr_icrc_calc over the same packet made contiguous, for header lengths from 12 to 32 bytes
 * (past one 64-byte block with IPv6), any pad bytes (a receiver checks what came), and a copy
 * that writes the payload and nothing else.
 */
static void test_icrc_copy(const struct sr_ipudp *u)
{
	static const uint8_t opcs[] = { 0x07, 0x09, 0x04, 0x0a, 0xaa, 0x06 };
	static uint8_t pkt[9300], pay[9300], dst[9300];
	int bad = 0;

	for (int i = 0; i < 3000; i++) {
		uint8_t opc = opcs[i % sizeof(opcs)], pad[3];
		size_t hlen = sr_opcode[opc].length;
		size_t paylen = i < 2900 ? rnd() % 1100 : 8000 + rnd() % 1200;
		size_t padn = (-paylen) & 3, len = hlen + paylen + padn + SR_ICRC_LEN;
		size_t d = rnd() % 64;

		fill(pkt, hlen);
		sr_bth_build((struct sr_bth *)pkt, opc, false, false, 0, 0xffff, 0x11, true, 0x22);
		fill(pay, paylen);
		fill(pad, sizeof(pad));
		memcpy(pkt + hlen, pay, paylen);
		memcpy(pkt + hlen + paylen, pad, padn);
		memset(dst, 0x5a, sizeof(dst));
		bad += sr_icrc_calc_copy(u, pkt, hlen, pay, paylen, pad, len, dst + d) !=
		       sr_icrc_calc(u, pkt, len);
		bad += memcmp(dst + d, pay, paylen) != 0;
		bad += (d && dst[d - 1] != 0x5a) || dst[d + paylen] != 0x5a;
	}
	CHECK_EQ(bad, 0);
}

static void test_icrc_masking(void)
{
	static uint8_t pkt[256];
	struct sr_ipudp u6, t;
	size_t len;

	ipv6(&u6, "fe80::1", "fd00::1:2", 50000);
	len = make_packet(pkt, &u6, 0x04, 100);
	t = u6;
	t.tos = 0xff;
	t.flow_label = 0xabcde;
	t.ttl = 3;
	CHECK(sr_icrc_check(&t, pkt, len));
	t.dst[15] ^= 1;
	CHECK(!sr_icrc_check(&t, pkt, len));
	t = u6;
	t.ip_id = 77;		/* IPv6 has no ID */
	t.df = !t.df;
	CHECK(sr_icrc_check(&t, pkt, len));
	t.family = 4;
	CHECK(!sr_icrc_check(&t, pkt, len));
	test_icrc_incremental(&u6);
	test_icrc_copy(&u6);
}

/* ---- IPv4 ID recovery ------------------------------------------------------------------- */

static void test_recover(void)
{
	static uint8_t pkt[4200];
	struct sr_ipudp u, t;
	double t0, spent = 0;
	int n = 0, false_pos = 0;

	ipv4(&u, "192.168.7.1", "192.168.7.200", 61234);
	for (int i = 0; i < 400; i++) {
		size_t paylen = i < 200 ? 4096 : rnd() % 4096;
		size_t len;

		u.ip_id = (uint16_t)rnd();
		u.df = i % 3 != 0;
		len = make_packet(pkt, &u, (uint8_t)(i & 1 ? 0x04 : 0x64), paylen);
		t = u;
		t.ip_id = i & 4 ? (uint16_t)rnd() : 0;
		t.df = (i & 2) != 0;	/* the caller's guess does not matter */
		CHECK((t.ip_id == u.ip_id && t.df == u.df) || !sr_icrc_check(&t, pkt, len));
		t0 = now_s();
		CHECK(sr_icrc_recover_v4_id(&t, pkt, len));
		if (paylen == 4096) {
			spent += now_s() - t0;
			n++;
		}
		CHECK_EQ(t.ip_id, u.ip_id);
		CHECK_EQ(t.df, u.df);
		/* Damage the packet (not BTH byte 4: masked): the recovery must refuse. */
		pkt[5 + rnd() % (len - SR_ICRC_LEN - 5)] ^= 0x10;
		t.ip_id = 0;
		false_pos += sr_icrc_recover_v4_id(&t, pkt, len);
	}
	CHECK(false_pos <= 1);	/* 2^-15 per try: 400 tries give 0 in all likelihood */
	printf("icrc: IPv4 ID recovery %.2f us per 4 KiB packet (%d false positives)\n",
	       spent / n * 1e6, false_pos);
	/* Not applicable: IPv6, or too short to hold an ICRC. */
	ipv6(&t, "::1", "::1", 1);
	CHECK(!sr_icrc_recover_v4_id(&t, pkt, 100));
	ipv4(&t, "1.2.3.4", "5.6.7.8", 1);
	CHECK(!sr_icrc_recover_v4_id(&t, pkt, 15));
}

/* ---- IP/UDP headers ---------------------------------------------------------------------- */

/* RFC 1071 sum over a buffer, the reference for the checksum checks. */
static uint32_t sum16(uint32_t s, const uint8_t *p, size_t len)
{
	for (size_t i = 0; i + 1 < len; i += 2)
		s += (uint32_t)p[i] << 8 | p[i + 1];
	if (len & 1)
		s += (uint32_t)p[len - 1] << 8;
	return s;
}

static uint16_t fold16(uint32_t s)
{
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return (uint16_t)s;
}

static void test_build_v4(void)
{
	uint8_t h[64];
	struct sr_ipudp u;

	ipv4(&u, "10.1.2.3", "10.255.0.9", 0xc001);
	u.ip_id = 0xbeef;
	u.df = true;
	u.tos = 0x02;
	CHECK_EQ(sr_ipudp_build(h, &u, 1000, NULL, 0), 28);
	CHECK(h[0] == 0x45 && h[1] == 0x02 && sr_ld_be16(h + 2) == 1028);
	CHECK(sr_ld_be16(h + 4) == 0xbeef && sr_ld_be16(h + 6) == 0x4000);
	CHECK(h[8] == 64 && h[9] == 17);	/* default TTL */
	CHECK_EQ(fold16(sum16(0, h, 20)), 0xffff);	/* a valid header checksum */
	CHECK(!memcmp(h + 12, u.src, 4) && !memcmp(h + 16, u.dst, 4));
	CHECK(sr_ld_be16(h + 20) == 0xc001 && sr_ld_be16(h + 22) == 4791);
	CHECK(sr_ld_be16(h + 24) == 1008 && sr_ld_be16(h + 26) == 0);
	u.ttl = 255;
	u.df = false;
	sr_ipudp_build(h, &u, 0, NULL, 0);
	CHECK(h[8] == 255 && sr_ld_be16(h + 6) == 0 && sr_ld_be16(h + 2) == 28);
	CHECK_EQ(fold16(sum16(0, h, 20)), 0xffff);
}

static void test_build_v6(void)
{
	static uint8_t payload[3001];
	uint8_t h[64], pseudo[8] = { 0 };
	struct iovec iov[5];
	struct sr_ipudp u;
	size_t cut[4];
	uint32_t s;

	ipv6(&u, "2001:db8::1", "2001:db8::ff:2", 4242);
	u.tos = 0xa5;
	u.flow_label = 0x12345;
	u.ttl = 9;
	for (int round = 0; round < 200; round++) {
		size_t plen = rnd() % sizeof(payload), prev = 0;

		fill(payload, plen);
		/* Split the payload at random (often odd) places. */
		for (int i = 0; i < 4; i++)
			cut[i] = plen ? rnd() % (plen + 1) : 0;
		for (int i = 0; i < 4; i++)
			for (int j = i + 1; j < 4; j++)
				if (cut[j] < cut[i]) {
					size_t c = cut[i]; cut[i] = cut[j]; cut[j] = c;
				}
		for (int i = 0; i < 5; i++) {
			size_t end = i < 4 ? cut[i] : plen;

			iov[i].iov_base = payload + prev;
			iov[i].iov_len = end - prev;
			prev = end;
		}
		CHECK_EQ(sr_ipudp_build(h, &u, plen, iov, 5), 48);
		CHECK_EQ(sr_ld_be32(h), 0x6a512345);
		CHECK(sr_ld_be16(h + 4) == plen + 8 && h[6] == 17 && h[7] == 9);
		CHECK(sr_ld_be16(h + 44) == plen + 8 && sr_ld_be16(h + 46) != 0);
		/* Pseudo-header + UDP header + payload must sum to 0xffff. */
		sr_st_be32(pseudo, (uint32_t)(plen + 8));
		pseudo[7] = 17;
		s = sum16(0, h + 8, 32);
		s = sum16(s, pseudo, 8);
		s = sum16(s, h + 40, 8);
		s = sum16(s, payload, plen);
		CHECK_EQ(fold16(s), 0xffff);
	}
}

int main(void)
{
	struct sr_ipudp u4;

	sr_test_timeout(100);
	test_crc_vectors();
	for (int e = sr_crc32_engine(-1); e >= 0; e--) {	/* each engine, the best one last */
		sr_crc32_engine(e);
		test_crc_engines();
	}
	sr_crc32_engine(9);
	test_crc_gf2();
	test_icrc_known();
	ipv4(&u4, "10.0.0.1", "10.0.0.2", 0xd000);
	u4.df = true;
	test_icrc_incremental(&u4);
	test_icrc_copy(&u4);
	test_icrc_masking();
	test_recover();
	test_build_v4();
	test_build_v6();
	for (int e = 0; e <= 3 && sr_crc32_engine(e) == e; e++) {	/* each engine the CPU has */
		bench_one(sr_crc32_engine_name(e), sr_crc32_raw_pclmul);	/* the tables at 0 */
		bench_copy(sr_crc32_engine_name(e));
	}
	sr_crc32_engine(9);
	return sr_test_done("test_icrc");
}
