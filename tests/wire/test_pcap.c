// SPDX-License-Identifier: MIT
/*
 * The pcap tap written by src/net/pcap.c, read back by tests/common/pcap_read.c: records,
 * headers, checksums, ICRC, threads, a killed writer, truncation. (The reader's other file
 * variants are in test_pcap_read.c.)
 *
 * tests/wire links only src/wire, so the tap's source is compiled into this test directly:
 * it depends on libc and src/wire only, which this also proves.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "net/pcap.c"
#include "net/pcap_read.h"
#include "sr_test.h"
#include "wire/hdr.h"
#include "wire/opcode.h"

static uint64_t rng_state = 0x5851f42d4c957f2dull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static char tmpdir[64];

static void tuple(struct sr_ipudp *u, int family, uint16_t sport)
{
	memset(u, 0, sizeof(*u));
	u->family = (uint8_t)family;
	for (int i = 0; i < 16; i++) {
		u->src[i] = (uint8_t)(0x10 + i);
		u->dst[i] = (uint8_t)(0x80 + i);
	}
	u->sport = sport;
	u->dport = SR_ROCEV2_UDP_PORT;
	u->ip_id = (uint16_t)(sport * 40503u);	/* no rnd(): writer threads call this */
	u->df = true;
	u->flow_label = 0x54321;
}

/* A RoCEv2 SEND ONLY of `paylen` bytes with a valid ICRC for tuple u. */
static size_t make_send(uint8_t *pkt, const struct sr_ipudp *u, size_t paylen, uint32_t psn)
{
	size_t len = SR_BTH_LEN + paylen + SR_ICRC_LEN;

	for (size_t i = 0; i < len; i++)
		pkt[i] = (uint8_t)rnd();
	sr_bth_build((struct sr_bth *)pkt, SR_OPC(SR_TR_RC, SR_OP_SEND_ONLY), false, false, 0,
		     0xffff, 0x42, true, psn);
	sr_st_le32(pkt + len - SR_ICRC_LEN, sr_icrc_calc(u, pkt, len));
	return len;
}

/* Splits pkt into n iovec pieces at random places. */
static int split(struct iovec *iov, int n, uint8_t *pkt, size_t len)
{
	size_t pos = 0;

	for (int i = 0; i < n; i++) {
		size_t take = i == n - 1 ? len - pos : rnd() % (len - pos + 1);

		iov[i].iov_base = pkt + pos;
		iov[i].iov_len = take;
		pos += take;
	}
	return n;
}

/* Reads one record back and checks it is the packet that was written. */
static void expect_record(struct sr_pcapr *r, const struct sr_ipudp *u, const uint8_t *pkt,
			  size_t len)
{
	struct sr_pcapr_rec rec;
	struct sr_ipudp got;
	const uint8_t *pl;
	size_t plen;

	REQUIRE(sr_pcapr_next(r, &rec) == 1);
	CHECK(rec.ip == rec.frame);		/* LINKTYPE_RAW */
	CHECK_EQ(rec.caplen, rec.origlen);
	CHECK_EQ(sr_pcapr_udp(rec.ip, rec.ip_len, &got, &pl, &plen), 0);
	CHECK_EQ(plen, len);
	CHECK(pl && !memcmp(pl, pkt, len));
	CHECK(got.family == u->family && got.sport == u->sport && got.dport == u->dport);
	CHECK(!memcmp(got.src, u->src, u->family == 4 ? 4 : 16));
	CHECK(!memcmp(got.dst, u->dst, u->family == 4 ? 4 : 16));
	if (u->family == 4)
		CHECK(got.ip_id == u->ip_id && got.df == u->df && got.ttl == 64);
	else
		CHECK(got.flow_label == u->flow_label);
	CHECK(pl && sr_icrc_check(&got, pl, plen));	/* the capture verifies like rxe's */
}

static void test_roundtrip(void)
{
	static uint8_t pkts[40][2100];
	static size_t lens[40];
	static struct sr_ipudp tuples[40];
	char pattern[128], path[128];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	struct sr_pcap *pc;

	snprintf(pattern, sizeof(pattern), "%s/rt-%%p-100%%%%.pcap", tmpdir);
	snprintf(path, sizeof(path), "%s/rt-%ld-100%%.pcap", tmpdir, (long)getpid());
	pc = sr_pcap_open(pattern);
	REQUIRE(pc);
	for (int i = 0; i < 40; i++) {
		struct iovec iov[100];
		int n = i < 20 ? 1 + (int)(rnd() % 5) : 100;	/* 100 pieces: the copy path */

		tuple(&tuples[i], i % 3 ? 4 : 6, (uint16_t)(49152 + i));
		lens[i] = make_send(pkts[i], &tuples[i], rnd() % 2048, (uint32_t)i);
		sr_pcap_write(pc, &tuples[i], iov, split(iov, n, pkts[i], lens[i]));
	}
	CHECK_EQ(sr_pcap_records(pc), 40);
	CHECK_EQ(sr_pcap_dropped(pc), 0);
	sr_pcap_close(pc);

	REQUIRE(sr_pcapr_open(&r, path) == 0);
	CHECK(r.linktype == SR_PCAP_LINKTYPE_RAW && r.nsec && !r.swapped);
	CHECK_EQ(r.snaplen, SR_PCAP_SNAPLEN);
	for (int i = 0; i < 40; i++)
		expect_record(&r, &tuples[i], pkts[i], lens[i]);
	CHECK_EQ(sr_pcapr_next(&r, &rec), 0);
	sr_pcapr_close(&r);
	unlink(path);

	/* A NULL tap is a no-op; a path that cannot be created fails with errno. */
	sr_pcap_write(NULL, &tuples[0], NULL, 0);
	sr_pcap_close(NULL);
	errno = 0;
	CHECK(!sr_pcap_open("/nonexistent-dir/x.pcap") && errno == ENOENT);
}

/* A record longer than the snap length is cut, with its original length kept. */
static void test_snaplen(void)
{
	size_t big = SR_PCAP_SNAPLEN + 1000;
	uint8_t *pkt = calloc(1, big);
	char path[128];
	struct iovec iov = { .iov_base = pkt, .iov_len = big };
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	struct sr_ipudp u;
	struct sr_pcap *pc;

	REQUIRE(pkt);
	snprintf(path, sizeof(path), "%s/big.pcap", tmpdir);
	tuple(&u, 4, 1);
	pc = sr_pcap_open(path);
	REQUIRE(pc);
	sr_pcap_write(pc, &u, &iov, 1);
	sr_pcap_close(pc);
	REQUIRE(sr_pcapr_open(&r, path) == 0);
	REQUIRE(sr_pcapr_next(&r, &rec) == 1);
	CHECK_EQ(rec.caplen, SR_PCAP_SNAPLEN);
	CHECK_EQ(rec.origlen, big + 28);
	CHECK_EQ(sr_pcapr_next(&r, &rec), 0);
	sr_pcapr_close(&r);
	unlink(path);
	free(pkt);
}

struct writer_arg {
	struct sr_pcap *pc;
	int id;
};

static void *writer(void *p)
{
	struct writer_arg *a = p;
	uint8_t pkt[600];
	struct sr_ipudp u;

	for (int i = 0; i < 500; i++) {
		struct iovec iov[3];
		size_t len;

		tuple(&u, a->id & 1 ? 6 : 4, (uint16_t)(1000 + a->id));
		/* rnd() is not thread-safe; the sizes need not be random here */
		len = SR_BTH_LEN + 8 + (size_t)(i % 480) + SR_ICRC_LEN;
		memset(pkt, a->id, len);
		sr_bth_build((struct sr_bth *)pkt, 0x04, false, false, 0, 0xffff, 1, false,
			     (uint32_t)i);
		sr_st_le32(pkt + len - SR_ICRC_LEN, sr_icrc_calc(&u, pkt, len));
		iov[0] = (struct iovec){ pkt, 7 };
		iov[1] = (struct iovec){ pkt + 7, 10 };
		iov[2] = (struct iovec){ pkt + 17, len - 17 };
		sr_pcap_write(a->pc, &u, iov, 3);
	}
	return NULL;
}

/* Four threads at once: every record intact, each thread's records in its own order. */
static void test_threads(void)
{
	struct writer_arg args[4];
	pthread_t th[4];
	uint32_t next_psn[4] = { 0 };
	char path[128];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	int n = 0;

	snprintf(path, sizeof(path), "%s/threads.pcap", tmpdir);
	args[0].pc = sr_pcap_open(path);
	REQUIRE(args[0].pc);
	for (int i = 0; i < 4; i++) {
		args[i].pc = args[0].pc;
		args[i].id = i;
		REQUIRE(pthread_create(&th[i], NULL, writer, &args[i]) == 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	sr_pcap_close(args[0].pc);

	REQUIRE(sr_pcapr_open(&r, path) == 0);
	while (sr_pcapr_next(&r, &rec) == 1) {
		struct sr_ipudp u;
		const uint8_t *pl;
		size_t plen;
		int id;

		n++;
		if (sr_pcapr_udp(rec.ip, rec.ip_len, &u, &pl, &plen) || plen < 17) {
			SR_FAIL("record %d unreadable", n);
			continue;
		}
		id = u.sport - 1000;
		CHECK(id >= 0 && id < 4 && pl[12] == id);
		CHECK(sr_icrc_check(&u, pl, plen));
		if (id >= 0 && id < 4)
			CHECK_EQ(sr_bth_psn((const struct sr_bth *)pl), next_psn[id]++);
	}
	CHECK_EQ(n, 2000);
	sr_pcapr_close(&r);
	unlink(path);
}

/* A writer killed by SIGKILL, never closing its tap, leaves every record readable. */
static void test_killed_writer(void)
{
	char path[128];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	int status, n = 0;
	pid_t pid;

	snprintf(path, sizeof(path), "%s/killed.pcap", tmpdir);
	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		struct sr_pcap *pc = sr_pcap_open(path);
		uint8_t pkt[300];
		struct sr_ipudp u;

		if (!pc)
			_exit(1);
		tuple(&u, 4, 7);
		for (int i = 0; i < 100; i++) {
			size_t len = make_send(pkt, &u, 200, (uint32_t)i);
			struct iovec iov = { pkt, len };

			sr_pcap_write(pc, &u, &iov, 1);
		}
		raise(SIGKILL);
		_exit(2);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	REQUIRE(sr_pcapr_open(&r, path) == 0);
	while (sr_pcapr_next(&r, &rec) == 1)
		n++;
	CHECK_EQ(n, 100);
	sr_pcapr_close(&r);
	unlink(path);
}

int main(void)
{
	sr_test_timeout(60);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sr-test-pcap-XXXXXX");
	REQUIRE(mkdtemp(tmpdir));
	test_roundtrip();
	test_snaplen();
	test_threads();
	test_killed_writer();
	rmdir(tmpdir);
	return sr_test_done("test_pcap");
}
