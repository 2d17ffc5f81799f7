/* SPDX-License-Identifier: MIT */
/*
 * The fault injection spec (src/net/fault.c): every knob parsed to its value, malformed specs
 * refused (-EINVAL, nothing returned), a spec that injects nothing gives NULL, the destination
 * filter (to=) matches exactly its address, and the delay line's due times: within delay +-
 * jitter, never below zero, never before the packet queued before (FIFO).
 */
#include "sr_test.h"

#include "net/fault.h"

#include <arpa/inet.h>
#include <errno.h>

static struct sr_fault *parse_ok(const char *spec)
{
	int err = 1;
	struct sr_fault *f = sr_fault_parse(spec, &err);

	if (err || !f)
		SR_FAIL("spec \"%s\": err %d, %s", spec, err, f ? "parsed" : "NULL");
	return f;
}

static void parse_bad(const char *spec)
{
	int err = 0;
	struct sr_fault *f = sr_fault_parse(spec, &err);

	if (err != -EINVAL || f)
		SR_FAIL("spec \"%s\" should be refused: err %d, %s", spec, err, f ? "parsed" : "NULL");
	sr_fault_free(f);
}

static void tuple_to(struct sr_ipudp *t, const char *ip)
{
	memset(t, 0, sizeof(*t));
	if (inet_pton(AF_INET, ip, t->dst) == 1) {
		t->family = 4;
	} else {
		REQUIRE(inet_pton(AF_INET6, ip, t->dst) == 1);
		t->family = 6;
	}
}

int main(void)
{
	struct sr_fault *f;
	struct sr_ipudp t;
	int err;

	sr_test_timeout(60);

	/* Nothing to inject: NULL, no error. */
	CHECK(!sr_fault_parse("", &err) && !err);
	CHECK(!sr_fault_parse(NULL, &err) && !err);
	CHECK(!sr_fault_parse("drop=0,seed=3", &err) && !err);
	CHECK(!sr_fault_parse("to=10.0.0.1", &err) && !err);
	CHECK(!sr_fault_parse("delay=0,jitter=0,limit=5", &err) && !err);

	/* The old knobs still parse as before. */
	f = parse_ok("drop=0.05,dup=0.02,reorder=0.1,corrupt=0.01,seed=7,after=100");
	if (f) {
		CHECK(f->drop == 0.05 && f->dup == 0.02 && f->reorder == 0.1 && f->corrupt == 0.01);
		CHECK_EQ(f->after, 100);
		CHECK_EQ(f->delay_ns, 0);
		CHECK(!sr_fault_delays(f));
		CHECK_EQ(f->to_family, 0);
		sr_fault_free(f);
	}

	/* delay and jitter in microseconds (fractions allowed), limit, to= (IPv4). */
	f = parse_ok("delay=20000,jitter=5000.5,limit=64,to=10.1.2.3");
	if (f) {
		CHECK_EQ(f->delay_ns, 20000000);
		CHECK_EQ(f->jitter_ns, 5000500);
		CHECK_EQ(f->limit, 64);
		CHECK(sr_fault_delays(f));
		CHECK_EQ(f->to_family, 4);
		tuple_to(&t, "10.1.2.3");
		CHECK(sr_fault_selects(f, &t));
		tuple_to(&t, "10.1.2.4");
		CHECK(!sr_fault_selects(f, &t));
		tuple_to(&t, "::ffff:10.1.2.3");	/* another family: not the same address */
		CHECK(!sr_fault_selects(f, &t));
		CHECK(f->drop == 0 && f->dup == 0 && f->reorder == 0 && f->corrupt == 0);
		sr_fault_free(f);
	}
	/* Jitter alone is a delay line; the default limit is netem's 1000. */
	f = parse_ok("jitter=100");
	if (f) {
		CHECK(sr_fault_delays(f));
		CHECK_EQ(f->limit, SR_FAULT_LIMIT_DEFAULT);
		tuple_to(&t, "192.168.7.7");
		CHECK(sr_fault_selects(f, &t));	/* no to=: every destination */
		sr_fault_free(f);
	}
	/* to= with IPv6, and with a probability fault. */
	f = parse_ok("to=fd00::2,drop=1");
	if (f) {
		CHECK_EQ(f->to_family, 6);
		tuple_to(&t, "fd00::2");
		CHECK(sr_fault_selects(f, &t));
		tuple_to(&t, "fd00::3");
		CHECK(!sr_fault_selects(f, &t));
		tuple_to(&t, "0.0.0.0");
		CHECK(!sr_fault_selects(f, &t));
		sr_fault_free(f);
	}

	/* Malformed. */
	parse_bad("delay");
	parse_bad("delay=");
	parse_bad("delay=-1");
	parse_bad("delay=10ms");
	parse_bad("delay=61000000");	/* more than a minute */
	parse_bad("jitter=-5");
	parse_bad("jitter=abc");
	parse_bad("limit=0");
	parse_bad("limit=1.5");
	parse_bad("limit=2000000");
	parse_bad("delay=100,limit=-3");
	parse_bad("to=");
	parse_bad("to=10.1.2");
	parse_bad("to=host.example");
	parse_bad("to=10.0.0.1:4791");
	parse_bad("delay=100,bogus=1");
	parse_bad("drop=1.5");

	/* Due times: delay +- jitter, FIFO, never negative. */
	f = parse_ok("delay=1000,jitter=400,seed=11");
	if (f) {
		uint64_t now = 1000000000ull, prev = 0, lo = UINT64_MAX, hi = 0;
		int nonfifo = 0;

		for (int i = 0; i < 20000; i++) {
			/* Packets 1 ms apart (more than 2 jitters): each sees its own draw. */
			uint64_t d = sr_fault_due(f, now);

			if (d < prev)
				nonfifo++;
			prev = d;
			CHECK(d >= now + 600000 && d <= now + 1400000);
			if (d - now < lo)
				lo = d - now;
			if (d - now > hi)
				hi = d - now;
			now += 1000000;
		}
		CHECK_EQ(nonfifo, 0);
		/* The draws spread over the whole range (20000 uniform draws). */
		CHECK(lo < 620000 && hi > 1380000);
		/* Packets 1 us apart: a draw smaller than its predecessor's waits for it. */
		for (int i = 0; i < 20000; i++) {
			uint64_t d = sr_fault_due(f, now);

			CHECK(d >= prev && d >= now + 600000);
			prev = d;
			now += 1000;
		}
		sr_fault_free(f);
	}
	f = parse_ok("delay=100,jitter=500,seed=3");	/* jitter larger than the delay */
	if (f) {
		uint64_t now = 5000000000ull;
		int zero = 0;

		for (int i = 0; i < 5000; i++) {
			uint64_t d = sr_fault_due(f, now);

			CHECK(d >= now && d <= now + 600000);
			zero += d == now;
			now += 10000000;
		}
		CHECK(zero > 0);	/* clamped at no delay, never before `now` */
		sr_fault_free(f);
	}
	return sr_test_done("test_fault");
}
