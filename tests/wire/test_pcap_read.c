// SPDX-License-Identifier: MIT
/*
 * The test pcap reader (tests/common/pcap_read.c) on the variants other tools write: the other
 * byte order, microsecond timestamps, Ethernet with VLAN tags and padding, Linux cooked SLL and
 * SLL2, RAW; and on damaged files and packets, which it must reject without reading outside.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "net/pcap_read.h"
#include "sr_test.h"
#include "wire/hdr.h"

static uint64_t rng_state = 0x853c49e6748fea9bull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* A pcap file being built in memory, in either byte order. */
struct file {
	uint8_t d[8192];
	size_t n;
	bool be;
};

static void put(struct file *f, const void *p, size_t len)
{
	REQUIRE(f->n + len <= sizeof(f->d));
	memcpy(f->d + f->n, p, len);
	f->n += len;
}

static void put32(struct file *f, uint32_t v)
{
	uint8_t b[4];

	if (f->be)
		sr_st_be32(b, v);
	else
		sr_st_le32(b, v);
	put(f, b, 4);
}

static void put16(struct file *f, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)(f->be ? v >> 8 : v), (uint8_t)(f->be ? v : v >> 8) };

	put(f, b, 2);
}

static void file_hdr(struct file *f, bool be, uint32_t magic, uint32_t linktype)
{
	f->n = 0;
	f->be = be;
	put32(f, magic);
	put16(f, 2);
	put16(f, 4);
	put32(f, 0);
	put32(f, 0);
	put32(f, 65535);
	put32(f, linktype);
}

static void record(struct file *f, uint32_t sec, uint32_t frac, const void *frame, size_t len)
{
	put32(f, sec);
	put32(f, frac);
	put32(f, (uint32_t)len);
	put32(f, (uint32_t)len);
	put(f, frame, len);
}

/* An IP/UDP packet carrying `plen` bytes of 0x5a. Returns its length. */
static size_t ip_packet(uint8_t *out, int family, size_t plen)
{
	struct sr_ipudp u = { .family = (uint8_t)family, .sport = 1234, .dport = 4791,
			      .ip_id = 0x4321, .df = true, .ttl = 33, .flow_label = 0xfedcb };
	uint8_t payload[256];
	struct iovec iov = { payload, plen };
	size_t h;

	for (int i = 0; i < 16; i++) {
		u.src[i] = (uint8_t)(i + 1);
		u.dst[i] = (uint8_t)(0xf0 + i);
	}
	memset(payload, 0x5a, plen);
	h = sr_ipudp_build(out, &u, plen, &iov, 1);
	memcpy(out + h, payload, plen);
	return h + plen;
}

/* The reader must yield the IP packet with its UDP payload of `plen` bytes of 0x5a. */
static void expect_ip(struct sr_pcapr *r, int family, size_t plen, uint64_t ts_ns)
{
	struct sr_pcapr_rec rec;
	struct sr_ipudp u;
	const uint8_t *pl;
	size_t n;

	REQUIRE(sr_pcapr_next(r, &rec) == 1);
	CHECK_EQ(rec.ts_ns, ts_ns);
	REQUIRE(rec.ip);
	CHECK_EQ(sr_pcapr_udp(rec.ip, rec.ip_len, &u, &pl, &n), 0);
	CHECK(u.family == family && u.sport == 1234 && u.dport == 4791 && u.ttl == 33);
	CHECK(u.src[0] == 1 && u.dst[0] == 0xf0);
	if (family == 4)
		CHECK(u.ip_id == 0x4321 && u.df);
	else
		CHECK_EQ(u.flow_label, 0xfedcb);
	CHECK_EQ(n, plen);
	for (size_t i = 0; i < n && pl; i++)
		CHECK_EQ(pl[i], 0x5a);
}

/* Big-endian file, microseconds, Ethernet: a VLAN-tagged IPv4, an ARP, a padded small IPv6. */
static void test_ethernet(void)
{
	static struct file f;
	uint8_t frame[400];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	size_t n;

	file_hdr(&f, true, 0xa1b2c3d4, 1);
	memset(frame, 0, 12);
	sr_st_be16(frame + 12, 0x8100);		/* 802.1Q tag, VLAN 5 */
	sr_st_be16(frame + 14, 5);
	sr_st_be16(frame + 16, 0x0800);
	n = ip_packet(frame + 18, 4, 100);
	record(&f, 10, 999999, frame, 18 + n);
	sr_st_be16(frame + 12, 0x0806);		/* ARP: not IP */
	record(&f, 11, 0, frame, 42);
	sr_st_be16(frame + 12, 0x86dd);
	n = ip_packet(frame + 14, 6, 0);
	memset(frame + 14 + n, 0xee, 8);		/* Ethernet padding after the packet */
	record(&f, 12, 5, frame, 14 + n + 8);

	REQUIRE(sr_pcapr_open_mem(&r, f.d, f.n) == 0);
	CHECK(r.swapped == (__BYTE_ORDER == __LITTLE_ENDIAN) && !r.nsec && r.linktype == 1);
	expect_ip(&r, 4, 100, 10999999000ull);
	REQUIRE(sr_pcapr_next(&r, &rec) == 1);
	CHECK(!rec.ip && rec.caplen == 42);
	expect_ip(&r, 6, 0, 12000005000ull);
	CHECK_EQ(sr_pcapr_next(&r, &rec), 0);
	sr_pcapr_close(&r);
}

/* Little-endian nanosecond files: SLL with IPv6, SLL2 with IPv4, RAW with both. */
static void test_cooked_raw(void)
{
	static struct file f;
	uint8_t frame[400];
	struct sr_pcapr r;
	size_t n;

	file_hdr(&f, false, 0xa1b23c4d, 113);
	memset(frame, 0, 16);
	sr_st_be16(frame + 14, 0x86dd);
	n = ip_packet(frame + 16, 6, 200);
	record(&f, 1, 2, frame, 16 + n);
	REQUIRE(sr_pcapr_open_mem(&r, f.d, f.n) == 0);
	CHECK(r.nsec && r.linktype == 113);
	expect_ip(&r, 6, 200, 1000000002ull);
	sr_pcapr_close(&r);

	file_hdr(&f, false, 0xa1b23c4d, 276);
	memset(frame, 0, 20);
	sr_st_be16(frame, 0x0800);
	n = ip_packet(frame + 20, 4, 7);
	record(&f, 1, 3, frame, 20 + n);
	REQUIRE(sr_pcapr_open_mem(&r, f.d, f.n) == 0);
	expect_ip(&r, 4, 7, 1000000003ull);
	sr_pcapr_close(&r);

	file_hdr(&f, true, 0xa1b23c4d, 101);
	n = ip_packet(frame, 4, 1);
	record(&f, 0, 1, frame, n);
	n = ip_packet(frame, 6, 2);
	record(&f, 0, 2, frame, n);
	REQUIRE(sr_pcapr_open_mem(&r, f.d, f.n) == 0);
	expect_ip(&r, 4, 1, 1);
	expect_ip(&r, 6, 2, 2);
	sr_pcapr_close(&r);
}

static void test_bad_files(void)
{
	static struct file f;
	uint8_t frame[200];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	size_t n;

	CHECK(sr_pcapr_open_mem(&r, "", 0) < 0);
	CHECK(sr_pcapr_open_mem(&r, "\xd4\xc3\xb2\xa1\x02\x00", 6) < 0);	/* short header */
	file_hdr(&f, false, 0x0a0d0d0a, 1);				/* pcapng: not classic */
	CHECK(sr_pcapr_open_mem(&r, f.d, f.n) < 0);
	CHECK(sr_pcapr_open(&r, "/nonexistent/file.pcap") < 0);

	file_hdr(&f, false, 0xa1b2c3d4, 101);
	n = ip_packet(frame, 4, 20);
	record(&f, 0, 0, frame, n);
	for (size_t cut = 25; cut < f.n; cut++) {		/* every truncation of the record */
		REQUIRE(sr_pcapr_open_mem(&r, f.d, cut) == 0);
		CHECK_EQ(sr_pcapr_next(&r, &rec), -1);
		sr_pcapr_close(&r);
	}
	REQUIRE(sr_pcapr_open_mem(&r, f.d, 24) == 0);		/* header only: empty */
	CHECK_EQ(sr_pcapr_next(&r, &rec), 0);
	sr_pcapr_close(&r);
}

/* sr_pcapr_udp on packets that are not plain, whole UDP: all refused. */
static void test_bad_packets(void)
{
	uint8_t p[200];
	struct sr_ipudp u;
	const uint8_t *pl;
	size_t n, len;

	len = ip_packet(p, 4, 50);
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), 0);
	for (size_t cut = 0; cut < len; cut++)			/* truncated anywhere */
		CHECK_EQ(sr_pcapr_udp(p, cut, &u, &pl, &n), -1);
	p[6] |= 0x20;						/* more fragments */
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), -1);
	p[6] &= ~0x20;
	p[9] = 6;						/* TCP */
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), -1);
	p[9] = 17;
	sr_st_be16(p + 24, 200);				/* UDP length beyond the packet */
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), -1);
	sr_st_be16(p + 24, 7);					/* shorter than its header */
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), -1);

	len = ip_packet(p, 6, 10);
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), 0);
	for (size_t cut = 0; cut < len; cut++)
		CHECK_EQ(sr_pcapr_udp(p, cut, &u, &pl, &n), -1);
	p[6] = 0;						/* hop-by-hop options first */
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), -1);
	p[0] = 0x55;						/* neither 4 nor 6 */
	CHECK_EQ(sr_pcapr_udp(p, len, &u, &pl, &n), -1);
	CHECK_EQ(sr_pcapr_udp(NULL, 0, &u, &pl, &n), -1);
}

/* Random bytes after a valid file header, in every link type: never a crash or over-read. */
static void test_fuzz(void)
{
	static const uint32_t lts[] = { 1, 101, 113, 228, 229, 276, 0 };
	static struct file f;

	for (int i = 0; i < 20000; i++) {
		struct sr_pcapr r;
		struct sr_pcapr_rec rec;
		size_t extra = rnd() % 200;

		file_hdr(&f, rnd() & 1, rnd() & 1 ? 0xa1b2c3d4 : 0xa1b23c4d, lts[rnd() % 7]);
		for (size_t k = 0; k < extra; k++) {
			uint8_t b = (uint8_t)rnd();

			put(&f, &b, 1);
		}
		if (extra >= 16 && (i & 3)) {	/* mostly a plausible caplen for record 1 */
			uint32_t cap = (uint32_t)(rnd() % (extra - 15));

			if (f.be)
				sr_st_be32(f.d + 32, cap);
			else
				sr_st_le32(f.d + 32, cap);
		}
		REQUIRE(sr_pcapr_open_mem(&r, f.d, f.n) == 0);
		while (sr_pcapr_next(&r, &rec) == 1) {
			struct sr_ipudp u;
			const uint8_t *pl;
			size_t n;

			if (sr_pcapr_udp(rec.ip, rec.ip_len, &u, &pl, &n) == 0 && n)
				CHECK(pl + n <= rec.frame + rec.caplen);
		}
		sr_pcapr_close(&r);
	}
}

int main(void)
{
	sr_test_timeout(60);
	test_ethernet();
	test_cooked_raw();
	test_bad_files();
	test_bad_packets();
	test_fuzz();
	return sr_test_done("test_pcap_read");
}
