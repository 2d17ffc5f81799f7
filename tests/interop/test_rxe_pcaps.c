// SPDX-License-Identifier: MIT
/*
 * Captures of the Linux kernel's rdma_rxe decode and check with our wire layer.
 *
 * For every *.pcap in tests/interop/rxe-pcaps/suite/ (its README says how they were made;
 * $SR_RXE_PCAPS names another directory laid out the same), every RoCEv2 packet (UDP
 * destination port 4791) must parse, and its ICRC must verify with the IP/UDP fields from the
 * capture. The per-file packet counts, ICRC verdicts and per-opcode counts must equal those of
 * the independent recomputation in ICRC-check.txt. rxe sends random IPv4 IDs, so every such
 * packet also exercises sr_icrc_recover_v4_id(): with the ID zeroed the check must fail, and
 * the recovery must find exactly the ID (and DF) of the capture.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/pcap_read.h"
#include "sr_test.h"
#include "wire/icrc.h"
#include "wire/pkt.h"

#define MAX_FILES 64
#define MAX_OPS 32

/* Counts for one capture: what ICRC-check.txt says, or what we found. */
struct tally {
	char file[256];
	long pkts, ok, bad;
	int nops;
	struct {
		char name[40];
		long n;
	} ops[MAX_OPS];
};

struct rec_stats {
	long v4_ids, recovered;
	double recover_ns;
};

/* Copies a string into a fixed-size field, cutting what does not fit. */
static void set_str(char *dst, size_t size, const char *src)
{
	size_t n = strnlen(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

static void tally_op(struct tally *t, const char *name)
{
	for (int i = 0; i < t->nops; i++) {
		if (!strcmp(t->ops[i].name, name)) {
			t->ops[i].n++;
			return;
		}
	}
	REQUIRE(t->nops < MAX_OPS);
	set_str(t->ops[t->nops].name, sizeof(t->ops[0].name), name);
	t->ops[t->nops++].n = 1;
}

static long tally_get(const struct tally *t, const char *name)
{
	for (int i = 0; i < t->nops; i++)
		if (!strcmp(t->ops[i].name, name))
			return t->ops[i].n;
	return -1;
}

/*
 * One line: "pcaps/suite/F.pcap: N RoCEv2 pkts, ICRC ok=A bad=B | RC ACK x5, RC SEND_ONLY x5".
 * Returns 0, or -1 when the line is not of that form.
 */
static int parse_expect_line(char *line, struct tally *t)
{
	char *colon = strstr(line, ": "), *bar = strstr(line, " | "), *slash, *tok, *save;

	memset(t, 0, sizeof(*t));
	if (!colon || !bar)
		return -1;
	*colon = '\0';
	slash = strrchr(line, '/');
	set_str(t->file, sizeof(t->file), slash ? slash + 1 : line);
	if (sscanf(colon + 2, "%ld RoCEv2 pkts, ICRC ok=%ld bad=%ld", &t->pkts, &t->ok, &t->bad) != 3)
		return -1;
	for (tok = strtok_r(bar + 3, ",\n", &save); tok; tok = strtok_r(NULL, ",\n", &save)) {
		char *x = strrchr(tok, 'x');

		while (*tok == ' ')
			tok++;
		if (!x || x == tok || x[-1] != ' ' || t->nops == MAX_OPS)
			return -1;
		x[-1] = '\0';
		set_str(t->ops[t->nops].name, sizeof(t->ops[0].name), tok);
		t->ops[t->nops++].n = strtol(x + 1, NULL, 10);
	}
	return 0;
}

static int load_expect(const char *path, struct tally *exp, int max)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int n = 0;

	if (!f) {
		SR_FAIL("cannot open %s: %s", path, strerror(errno));
		return 0;
	}
	while (fgets(line, sizeof(line), f) && n < max) {
		if (line[0] == '#' || line[0] == '\n')
			continue;
		if (parse_expect_line(line, &exp[n]) == 0)
			n++;
		else
			SR_FAIL("%s: unparsable line: %s", path, line);
	}
	fclose(f);
	return n;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* With the ID zeroed the check must fail; the recovery must find the capture's ID and DF. */
static void check_recovery(const char *file, long idx, const struct sr_ipudp *real,
			   const uint8_t *pkt, size_t len, struct rec_stats *rs)
{
	struct sr_ipudp t = *real;
	double t0;
	bool found;

	if (real->family != 4 || real->ip_id == 0)
		return;
	rs->v4_ids++;
	t.ip_id = 0;
	t.df = !real->df;	/* a wrong guess of DF too: the recovery must not trust it */
	if (sr_icrc_check(&t, pkt, len))
		SR_FAIL("%s #%ld: ICRC still valid with IP ID 0 (real 0x%04x)", file, idx, real->ip_id);
	t0 = now_ns();
	found = sr_icrc_recover_v4_id(&t, pkt, len);
	rs->recover_ns += now_ns() - t0;
	if (!found) {
		SR_FAIL("%s #%ld: IP ID 0x%04x not recovered", file, idx, real->ip_id);
		return;
	}
	rs->recovered++;
	CHECK_EQ(t.ip_id, real->ip_id);
	CHECK_EQ(t.df, real->df);
}

/* Decodes one RoCEv2 packet into the tally. */
static void check_packet(const char *file, long idx, const struct sr_ipudp *ipu,
			 const uint8_t *udp_payload, size_t len, struct tally *got,
			 struct rec_stats *rs)
{
	uint8_t *pkt = malloc(len ? len : 1);	/* exact size: ASan sees any over-read */
	struct sr_pkt p;
	enum sr_parse_err e;

	REQUIRE(pkt);
	memcpy(pkt, udp_payload, len);
	got->pkts++;
	e = sr_pkt_parse(&p, pkt, len);
	if (e != SR_PE_OK) {
		SR_FAIL("%s #%ld: parse error %s (opcode 0x%02x, %zu bytes)", file, idx,
			sr_parse_err_name[e], pkt[0], len);
		tally_op(got, "PARSE_ERROR");
	} else {
		tally_op(got, sr_opcode[p.opcode].name);
		CHECK_EQ(p.hdr_len + p.paylen + p.pad + SR_ICRC_LEN, len);
	}
	if (sr_icrc_check(ipu, pkt, len)) {
		got->ok++;
		check_recovery(file, idx, ipu, pkt, len, rs);
	} else {
		got->bad++;
	}
	free(pkt);
}

static void scan_file(const char *dir, const char *file, struct tally *got, struct rec_stats *rs)
{
	char path[PATH_MAX + 512];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	long idx = 0;
	int err, more;

	memset(got, 0, sizeof(*got));
	set_str(got->file, sizeof(got->file), file);
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	err = sr_pcapr_open(&r, path);
	if (err) {
		SR_FAIL("%s: cannot read: %s", path, strerror(-err));
		return;
	}
	while ((more = sr_pcapr_next(&r, &rec)) == 1) {
		struct sr_ipudp ipu;
		const uint8_t *pl;
		size_t plen;

		idx++;
		if (sr_pcapr_udp(rec.ip, rec.ip_len, &ipu, &pl, &plen) ||
		    ipu.dport != SR_ROCEV2_UDP_PORT)
			continue;
		check_packet(file, idx, &ipu, pl, plen, got, rs);
	}
	if (more < 0)
		SR_FAIL("%s: truncated record after #%ld", path, idx);
	sr_pcapr_close(&r);
}

static void print_summary(const struct tally *t, const struct rec_stats *rs)
{
	printf("%s: %ld RoCEv2 pkts, ICRC ok=%ld bad=%ld, IP ID recovered %ld/%ld |", t->file,
	       t->pkts, t->ok, t->bad, rs->recovered, rs->v4_ids);
	for (int i = 0; i < t->nops; i++)
		printf("%s %s x%ld", i ? "," : "", t->ops[i].name, t->ops[i].n);
	printf("\n");
}

static void compare(const struct tally *exp, const struct tally *got)
{
	CHECK_EQ(got->pkts, exp->pkts);
	CHECK_EQ(got->ok, exp->ok);
	CHECK_EQ(got->bad, exp->bad);
	for (int i = 0; i < exp->nops; i++)
		if (tally_get(got, exp->ops[i].name) != exp->ops[i].n)
			SR_FAIL("%s: %s: expected x%ld, found x%ld", exp->file, exp->ops[i].name,
				exp->ops[i].n, tally_get(got, exp->ops[i].name));
	for (int i = 0; i < got->nops; i++)
		if (tally_get(exp, got->ops[i].name) < 0)
			SR_FAIL("%s: %s x%ld not in the expected counts", exp->file,
				got->ops[i].name, got->ops[i].n);
}

static int is_pcap(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return n > 5 && !strcmp(d->d_name + n - 5, ".pcap");
}

static void rxe_dir(const char *dir)
{
	static struct tally exp[MAX_FILES];
	struct tally got;
	char suite[PATH_MAX + 64], check[PATH_MAX + 64];
	struct dirent **names;
	struct rec_stats all = { 0 };
	int nexp, nfiles, matched = 0;

	snprintf(suite, sizeof(suite), "%s/suite", dir);
	snprintf(check, sizeof(check), "%s/ICRC-check.txt", dir);
	nexp = load_expect(check, exp, MAX_FILES);
	nfiles = scandir(suite, &names, is_pcap, alphasort);
	if (nfiles < 0) {
		SR_FAIL("%s: %s", suite, strerror(errno));
		return;
	}
	CHECK(nfiles > 0);
	for (int i = 0; i < nfiles; i++) {
		struct rec_stats rs = { 0 };
		int e;

		scan_file(suite, names[i]->d_name, &got, &rs);
		print_summary(&got, &rs);
		all.v4_ids += rs.v4_ids;
		all.recovered += rs.recovered;
		all.recover_ns += rs.recover_ns;
		for (e = 0; e < nexp && strcmp(exp[e].file, names[i]->d_name); e++)
			;
		if (e == nexp) {
			SR_FAIL("%s: not listed in ICRC-check.txt", names[i]->d_name);
		} else {
			compare(&exp[e], &got);
			matched++;
		}
		free(names[i]);
	}
	free(names);
	CHECK_EQ(matched, nexp);	/* every listed capture exists */
	CHECK(all.v4_ids > 0);
	printf("IP ID recovery: %ld/%ld, %.1f us per packet\n", all.recovered, all.v4_ids,
	       all.v4_ids ? all.recover_ns / all.v4_ids / 1000 : 0);
}

/* $SR_RXE_PCAPS; else tests/interop/rxe-pcaps of $SR_SOURCE_DIR, or next to this source file.
 * (They are in the repository: a clean clone needs nothing beside it.) */
static void pcaps_dir(char *dir, size_t size)
{
	const char *env = getenv("SR_RXE_PCAPS");
	const char *src = getenv("SR_SOURCE_DIR");
	const char *me = __FILE__, *tail = strstr(me, "/test_rxe_pcaps.c");

	if (env && *env)
		set_str(dir, size, env);
	else if (src && *src)
		snprintf(dir, size, "%.*s/tests/interop/rxe-pcaps", PATH_MAX - 32, src);
	else if (tail)
		snprintf(dir, size, "%.*s/rxe-pcaps", (int)(tail - me), me);
	else
		set_str(dir, size, "tests/interop/rxe-pcaps");
}

int main(void)
{
	char dir[PATH_MAX];

	sr_test_timeout(60);
	pcaps_dir(dir, sizeof(dir));
	rxe_dir(dir);
	return sr_test_done("test_rxe_pcaps");
}
