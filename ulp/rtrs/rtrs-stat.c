/* SPDX-License-Identifier: MIT */
/*
 * rtrs-stat: the per-path counters of running RTRS programs, from the files the library writes
 * every second under $RTRS_STATS_DIR (docs/rtrs.md, "Counters").
 *
 *   rtrs-stat [-a] [-w SECS [-n ROUNDS]] [DIR]
 *     DIR   the counters directory (default $RTRS_STATS_DIR, else .)
 *     -a    also the files of processes that have exited
 *     -w    print again every SECS seconds, with request and byte rates since the last round
 *     -n    stop after ROUNDS rounds (with -w; default: until interrupted)
 *
 * One line per path: process, client or server, session, remote address, state, requests in
 * flight, requests and bytes read and written, fail-overs, reconnects, heartbeat round trip,
 * chunk keys renewed (always_invalidate), malformed requests. libc only.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROWS 1024

struct row {
	char key[200];		/* file + remote address: the same path across rounds */
	int pid;
	char kind[8], sess[64], dst[64], state[16];
	unsigned long long inflight, rr, rw, br, bw, fo, rc, rtt, rk, bad;
};

static struct row prev[MAX_ROWS];
static int nprev;

static const char *field(const char *line, const char *name, char *out, size_t len)
{
	size_t n = strlen(name);
	const char *p = line;

	while ((p = strstr(p, name))) {
		if ((p == line || p[-1] == ' ') && p[n] == '=') {
			p += n + 1;
			size_t k = strcspn(p, " \n");
			if (k >= len)
				k = len - 1;
			memcpy(out, p, k);
			out[k] = 0;
			return out;
		}
		p += n;
	}
	snprintf(out, len, "-");
	return NULL;
}

static unsigned long long num(const char *line, const char *name)
{
	char b[32];
	return field(line, name, b, sizeof(b)) ? strtoull(b, NULL, 10) : 0;
}

static int alive(int pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

static int load(const char *dir, int all, struct row *rows)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d) {
		fprintf(stderr, "rtrs-stat: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d)) && n < MAX_ROWS) {
		int pid;
		char kind[8];
		size_t l = strlen(e->d_name);
		if (strncmp(e->d_name, "rtrs-", 5) || (l > 4 && !strcmp(e->d_name + l - 4, ".tmp")) ||
		    sscanf(e->d_name, "rtrs-%d-%7[a-z]-", &pid, kind) != 2)
			continue;
		if (!all && !alive(pid))
			continue;
		char path[4096], line[2048];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f) && n < MAX_ROWS) {
			struct row *r = &rows[n];
			memset(r, 0, sizeof(*r));
			r->pid = pid;
			snprintf(r->kind, sizeof(r->kind), "%s", kind);
			field(line, "sess", r->sess, sizeof(r->sess));
			field(line, "dst", r->dst, sizeof(r->dst));
			field(line, "state", r->state, sizeof(r->state));
			snprintf(r->key, sizeof(r->key), "%.120s %.64s", e->d_name, r->dst);
			r->inflight = num(line, "inflight");
			r->rr = num(line, "reqs_read");
			r->rw = num(line, "reqs_write");
			r->br = num(line, "bytes_read");
			r->bw = num(line, "bytes_write");
			r->fo = num(line, "failovers");
			r->rc = num(line, "reconnects");
			r->rtt = num(line, "hb_rtt_us");
			r->rk = num(line, "rkey_renewals");
			r->bad = num(line, "bad_msgs");
			n++;
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

static void print(struct row *rows, int n, double dt)
{
	printf("%-7s %-3s %-20s %-21s %-12s %5s %10s %10s %9s %9s %6s %5s %7s %10s %4s",
	       "PID", "", "SESSION", "REMOTE", "STATE", "INFL", "READS", "WRITES", "MiB_RD",
	       "MiB_WR", "FAILOV", "RECON", "RTT_us", "RKEYS", "BAD");
	if (dt > 0)
		printf(" %9s %9s", "REQ/s", "MiB/s");
	printf("\n");
	for (int i = 0; i < n; i++) {
		struct row *r = &rows[i];
		printf("%-7d %-3s %-20.20s %-21.21s %-12.12s %5llu %10llu %10llu %9.1f %9.1f %6llu "
		       "%5llu %7llu %10llu %4llu",
		       r->pid, r->kind, r->sess, r->dst, r->state, r->inflight, r->rr, r->rw,
		       (double)r->br / 1048576.0, (double)r->bw / 1048576.0, r->fo, r->rc, r->rtt,
		       r->rk, r->bad);
		if (dt > 0) {
			double reqs = 0, bytes = 0;
			for (int k = 0; k < nprev; k++)
				if (!strcmp(prev[k].key, r->key)) {
					reqs = (double)(r->rr + r->rw - prev[k].rr - prev[k].rw);
					bytes = (double)(r->br + r->bw - prev[k].br - prev[k].bw);
					break;
				}
			printf(" %9.0f %9.1f", reqs / dt, bytes / dt / 1048576.0);
		}
		printf("\n");
	}
	if (!n)
		printf("(no running RTRS program writes counters here)\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static struct row rows[MAX_ROWS];
	int opt, all = 0, rounds = 0;
	double every = 0;

	while ((opt = getopt(argc, argv, "aw:n:h")) != -1) {
		switch (opt) {
		case 'a': all = 1; break;
		case 'w': every = atof(optarg); break;
		case 'n': rounds = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: rtrs-stat [-a] [-w SECS [-n ROUNDS]] [DIR]\n");
			return 2;
		}
	}
	const char *dir = optind < argc ? argv[optind] : getenv("RTRS_STATS_DIR");
	if (!dir || !dir[0])
		dir = ".";
	if (every <= 0) {
		int n = load(dir, all, rows);
		if (n < 0)
			return 1;
		print(rows, n, 0);
		return 0;
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int round = 0; !rounds || round < rounds; round++) {
		if (round) {
			struct timespec ts = { (time_t)every,
					       (long)((every - (double)(time_t)every) * 1e9) };
			nanosleep(&ts, NULL);
		}
		int n = load(dir, all, rows);
		if (n < 0)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		time_t now = time(NULL);
		struct tm tm;
		char ts[32];
		strftime(ts, sizeof(ts), "%H:%M:%S", localtime_r(&now, &tm));
		printf("--- %s %s\n", ts, dir);
		print(rows, n, round ? dt : 0);
		memcpy(prev, rows, sizeof(*rows) * (size_t)n);
		nprev = n;
		t0 = t1;
	}
	return 0;
}
