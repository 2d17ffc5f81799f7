/* SPDX-License-Identifier: MIT */
/*
 * Runtime parameters: each type parsed from the environment, suffixes, malformed values keep
 * the default with one warning naming the variable, the table matches struct sr_params, and
 * the rate limiter of the log module.
 */
#include "sr_test.h"

#include "core/log.h"
#include "core/param.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

/* Runs fn with stderr captured into buf. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t size)
{
	FILE *tmp = tmpfile();
	int saved = dup(2);
	size_t n;

	REQUIRE(tmp && saved >= 0);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(tmp);
	n = fread(buf, 1, size - 1, tmp);
	buf[n] = '\0';
	fclose(tmp);
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void test_parse_int(void)
{
	long v = -1;

	CHECK_EQ(sr_param_parse_int("0", &v), 0);
	CHECK_EQ(v, 0);
	CHECK_EQ(sr_param_parse_int("4791", &v), 0);
	CHECK_EQ(v, 4791);
	CHECK_EQ(sr_param_parse_int("010", &v), 0);	/* decimal, not octal */
	CHECK_EQ(v, 10);
	CHECK_EQ(sr_param_parse_int("0x1F", &v), 0);
	CHECK_EQ(v, 31);
	CHECK_EQ(sr_param_parse_int("0X10", &v), 0);
	CHECK_EQ(v, 16);
	CHECK_EQ(sr_param_parse_int("-5", &v), 0);
	CHECK_EQ(v, -5);
	CHECK_EQ(sr_param_parse_int("4k", &v), 0);
	CHECK_EQ(v, 4096);
	CHECK_EQ(sr_param_parse_int("8M", &v), 0);
	CHECK_EQ(v, 8 << 20);
	CHECK_EQ(sr_param_parse_int("2g", &v), 0);
	CHECK_EQ(v, 2L << 30);
	CHECK_EQ(sr_param_parse_int("0x10k", &v), 0);
	CHECK_EQ(v, 16 << 10);

	v = 77;
	CHECK_EQ(sr_param_parse_int("", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("k", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("12abc", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("4kk", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("4 ", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int(" 4", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("0x", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("0x0x10", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("--1", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("1.5", &v), -EINVAL);
	CHECK_EQ(sr_param_parse_int("99999999999999999999", &v), -ERANGE);
	CHECK_EQ(sr_param_parse_int("9999999999999g", &v), -ERANGE);
	CHECK_EQ(v, 77);	/* untouched on error */
}

static void test_parse_bool(void)
{
	static const char *const t[] = { "1", "yes", "on", "true", "YES", "On", "True" };
	static const char *const f[] = { "0", "no", "off", "false", "NO", "Off", "FALSE" };
	bool b;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		b = false;
		CHECK_EQ(sr_param_parse_bool(t[i], &b), 0);
		CHECK(b == true);
		CHECK_EQ(sr_param_parse_bool(f[i], &b), 0);
		CHECK(b == false);
	}
	CHECK_EQ(sr_param_parse_bool("2", &b), -EINVAL);
	CHECK_EQ(sr_param_parse_bool("y", &b), -EINVAL);
	CHECK_EQ(sr_param_parse_bool("", &b), -EINVAL);
	CHECK_EQ(sr_param_parse_log_level("debug"), SR_LOG_DEBUG);
	CHECK_EQ(sr_param_parse_log_level("WARN"), SR_LOG_WARN);
	CHECK_EQ(sr_param_parse_log_level("0"), SR_LOG_ERROR);
	CHECK_EQ(sr_param_parse_log_level("loud"), -1);
}

static void test_table(void)
{
	struct sr_params p;
	char buf[64];
	int n = 0;

	/* One table row per field of struct sr_params, in order, with unique names. */
#define COUNT(name, type, def, doc) n++;
	SR_PARAM_LIST(COUNT)
#undef COUNT
	CHECK_EQ(sr_param_count, n);
	for (int i = 0; i < sr_param_count; i++) {
		CHECK(sr_param_table[i].doc && sr_param_table[i].doc[0]);
		CHECK(sr_param_table[i].def != NULL);
		CHECK_EQ(sr_param_find(sr_param_table[i].name), i);
	}
	CHECK_EQ(sr_param_find("MAX_INFLIGHT"), sr_param_find("max_inflight"));
	CHECK_EQ(sr_param_find("no_such_thing"), -1);
	CHECK(!strcmp(sr_param_env_name(sr_param_find("max_inflight"), buf, sizeof(buf)),
		      "SOFTRDMA_MAX_INFLIGHT"));
	CHECK(!strcmp(sr_param_table[sr_param_find("port")].def, "4791"));
	CHECK(!strcmp(sr_param_table[sr_param_find("stats_dir")].def, "/dev/shm"));
	CHECK(!strcmp(sr_param_table[sr_param_find("netdev")].def, ""));
	CHECK(!strcmp(sr_param_table[sr_param_find("icrc_check")].def, "1"));
	CHECK_EQ(sr_param_table[sr_param_find("pin")].type, SR_PT_BOOL);
	CHECK_EQ(sr_param_table[sr_param_find("fault")].type, SR_PT_STR);

	/* Defaults with an empty environment. */
	for (int i = 0; i < sr_param_count; i++)
		unsetenv(sr_param_env_name(i, buf, sizeof(buf)));
	CHECK_EQ(sr_params_load(&p), 0);
	CHECK_EQ(p.port, 4791);
	CHECK_EQ(p.max_inflight, 128);
	CHECK_EQ(p.rcvbuf, 8388608);
	CHECK(p.pin == false);
	CHECK(p.icrc_check == true);
	CHECK(!strcmp(p.log, "warn"));
	CHECK(!strcmp(p.stats_dir, "/dev/shm"));
	CHECK_EQ(sr_log_level, SR_LOG_WARN);
	sr_params_free(&p);
}

struct load_result {
	struct sr_params p;
	int bad;
};

static void load_into(void *arg)
{
	struct load_result *r = arg;

	sr_params_free(&r->p);
	r->bad = sr_params_load(&r->p);
}

static void test_env(void)
{
	struct load_result r;
	char err[4096];

	sr_params_load(&r.p);	/* a valid set for load_into() to free */
	setenv("SOFTRDMA_MAX_INFLIGHT", "0x40", 1);
	setenv("SOFTRDMA_RCVBUF", "16m", 1);
	setenv("SOFTRDMA_PIN", "yes", 1);
	setenv("SOFTRDMA_ICRC_CHECK", "off", 1);
	setenv("SOFTRDMA_NETDEV", "eth0,eth1", 1);
	setenv("SOFTRDMA_PORT", "", 1);	/* empty: unset, no warning */
	capture_stderr(load_into, &r, err, sizeof(err));
	CHECK_EQ(r.bad, 0);
	CHECK_EQ(err[0], '\0');
	CHECK_EQ(r.p.max_inflight, 64);
	CHECK_EQ(r.p.rcvbuf, 16 << 20);
	CHECK(r.p.pin == true);
	CHECK(r.p.icrc_check == false);
	CHECK(!strcmp(r.p.netdev, "eth0,eth1"));
	CHECK_EQ(r.p.port, 4791);

	/* The value is a copy: changing the environment later changes nothing. */
	setenv("SOFTRDMA_NETDEV", "lo", 1);
	CHECK(!strcmp(r.p.netdev, "eth0,eth1"));

	/* Malformed: defaults kept, exactly one warning per bad variable, naming it. */
	setenv("SOFTRDMA_MAX_INFLIGHT", "lots", 1);
	setenv("SOFTRDMA_PIN", "maybe", 1);
	setenv("SOFTRDMA_TICK_MS", "99999999999999999999", 1);
	capture_stderr(load_into, &r, err, sizeof(err));
	CHECK_EQ(r.bad, 3);
	CHECK_EQ(r.p.max_inflight, 128);
	CHECK(r.p.pin == false);
	CHECK_EQ(r.p.tick_ms, 10);
	CHECK_EQ(r.p.rcvbuf, 16 << 20);	/* the good ones still apply */
	CHECK_EQ(count_lines(err), 3);
	CHECK(strstr(err, "SOFTRDMA_MAX_INFLIGHT") != NULL);
	CHECK(strstr(err, "SOFTRDMA_PIN") != NULL);
	CHECK(strstr(err, "SOFTRDMA_TICK_MS") != NULL);
	CHECK(strncmp(err, "softrdma: ", 10) == 0);

	/* SOFTRDMA_LOG=error silences the warnings; the values still fall back. */
	setenv("SOFTRDMA_LOG", "error", 1);
	capture_stderr(load_into, &r, err, sizeof(err));
	CHECK_EQ(r.bad, 3);
	CHECK_EQ(err[0], '\0');
	CHECK_EQ(sr_log_level, SR_LOG_ERROR);
	CHECK_EQ(r.p.max_inflight, 128);

	/* A bad level is itself one warning, and warn applies. */
	unsetenv("SOFTRDMA_MAX_INFLIGHT");
	unsetenv("SOFTRDMA_PIN");
	unsetenv("SOFTRDMA_TICK_MS");
	setenv("SOFTRDMA_LOG", "loud", 1);
	capture_stderr(load_into, &r, err, sizeof(err));
	CHECK_EQ(r.bad, 1);
	CHECK_EQ(count_lines(err), 1);
	CHECK(strstr(err, "SOFTRDMA_LOG") != NULL);
	CHECK_EQ(sr_log_level, SR_LOG_WARN);
	CHECK(!strcmp(r.p.log, "warn"));

	setenv("SOFTRDMA_LOG", "DEBUG", 1);
	capture_stderr(load_into, &r, err, sizeof(err));
	CHECK_EQ(sr_log_level, SR_LOG_DEBUG);

	for (int i = 0; i < sr_param_count; i++)
		unsetenv(sr_param_env_name(i, err, sizeof(err)));
	sr_log_level = SR_LOG_WARN;
	sr_params_free(&r.p);
}

static void test_once_and_value_str(void)
{
	const struct sr_params *p;
	char buf[256];

	setenv("SOFTRDMA_ACK_EVERY", "1k", 1);
	setenv("SOFTRDMA_POLL_RX", "false", 1);
	setenv("SOFTRDMA_FAULT", "drop=0.1", 1);
	p = sr_params();
	CHECK_EQ(p->ack_every, 1024);
	CHECK(p->poll_rx == false);
	/* Loaded once: later changes to the environment do not apply. */
	setenv("SOFTRDMA_ACK_EVERY", "7", 1);
	CHECK(sr_params() == p);
	CHECK_EQ(sr_params()->ack_every, 1024);

	CHECK(!strcmp(sr_param_value_str(sr_param_find("ack_every"), buf, sizeof(buf)), "1024"));
	CHECK(!strcmp(sr_param_value_str(sr_param_find("poll_rx"), buf, sizeof(buf)), "0"));
	CHECK(!strcmp(sr_param_value_str(sr_param_find("icrc_check"), buf, sizeof(buf)), "1"));
	CHECK(!strcmp(sr_param_value_str(sr_param_find("fault"), buf, sizeof(buf)), "drop=0.1"));
	CHECK(!strcmp(sr_param_value_str(sr_param_find("pcap"), buf, sizeof(buf)), ""));
	CHECK(!strcmp(sr_param_value_str(-1, buf, sizeof(buf)), ""));
	CHECK(!strcmp(sr_param_value_str(sr_param_count, buf, sizeof(buf)), ""));
}

static void test_path_expand(void)
{
	char buf[64], want[64];

	snprintf(want, sizeof(want), "/tmp/x-%d.pcap", (int)getpid());
	CHECK_EQ(sr_path_expand("/tmp/x-%p.pcap", buf, sizeof(buf)), 0);
	CHECK(!strcmp(buf, want));
	CHECK_EQ(sr_path_expand("100%%-%q", buf, sizeof(buf)), 0);
	CHECK(!strcmp(buf, "100%-%q"));
	CHECK_EQ(sr_path_expand("%p%p%p%p%p%p%p%p%p%p%p", buf, 16), -ENAMETOOLONG);
}

static void burst(void *arg)
{
	struct sr_ratelimit *rl = arg;
	int ok = 0;

	for (int i = 0; i < 25; i++)
		ok += sr_ratelimit_ok(rl);
	fprintf(stderr, "ok=%d\n", ok);
}

static void test_ratelimit(void)
{
	static struct sr_ratelimit rl;
	struct timespec ts = { 1, 100 * 1000 * 1000 };
	char err[1024];

	capture_stderr(burst, &rl, err, sizeof(err));
	CHECK(!strcmp(err, "ok=10\n"));
	nanosleep(&ts, NULL);
	/* The window reopens: first the count of what was swallowed, then a new burst. */
	capture_stderr(burst, &rl, err, sizeof(err));
	CHECK(!strcmp(err, "softrdma: 15 messages suppressed\nok=10\n"));
	if (strcmp(err, "softrdma: 15 messages suppressed\nok=10\n"))
		fprintf(stderr, "got: %s", err);
}

static void long_line(void *arg)
{
	char big[3000];

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	errno = EAGAIN;
	sr_log_msg(SR_LOG_ERROR, "%s", big);
	*(int *)arg = errno;
	sr_log_msg(SR_LOG_ERROR, "qp#%d: trailing newline\n", 12);
}

static void test_log_msg(void)
{
	char err[4096];
	int saved = 0;
	char *nl;

	capture_stderr(long_line, &saved, err, sizeof(err));
	CHECK_EQ(saved, EAGAIN);	/* logging preserves errno */
	nl = strchr(err, '\n');
	REQUIRE(nl);
	CHECK(nl - err < 1024);
	CHECK(!strncmp(nl - 3, "...", 3));
	CHECK(!strcmp(nl + 1, "softrdma: qp#12: trailing newline\n"));
}

int main(void)
{
	sr_test_timeout(60);
	test_parse_int();
	test_parse_bool();
	test_table();
	test_env();
	test_once_and_value_str();
	test_path_expand();
	test_ratelimit();
	test_log_msg();
	return sr_test_done("test_param");
}
