/* SPDX-License-Identifier: MIT */
/*
 * rtrs-test: a server (an in-memory disk answered from a worker thread, as RNBD answers after
 * io_uring) and a client (random READs and WRITEs over distinct slots, every byte checked
 * against a mirror), for tests/integration/test_rtrs*.sh. Public API only (rtrs.h).
 *
 *   rtrs-test server -l ADDR [-l ADDR]... [-q QD] [-c CHUNK] [-d DISK_MB] [-H HB_MS] [-t SECONDS]
 *                    [-i 0|1 (always_invalidate, default 1)] [-z (answer at once, no disk)]
 *   rtrs-test bench -p DST[@SRC] [-p ...] [-S SIZE] [-D DEPTH] [-T SECS] [-r] [-P rr|mi|ml] [-b]
 *                   fixed-time benchmark: DEPTH requests of SIZE bytes in flight (WRITEs, -r
 *                   READs), no byte check; prints "bench: ... iops=N mib_s=N" 
 *   rtrs-test hostile -p DST        malformed requests (test_rtrs_loopback)
 *   rtrs-test oldkey -p DST -p DST  a request's old chunk key is dead after its response
 *   rtrs-test client -p DST[@SRC] [-p ...] [-n IOS] [-D DEPTH] [-P rr|mi|ml] [-H HB_MS]
 *                    [-R RECONNECT_MS] [-F FAIL_TIMEOUT_MS] [-s SEED] [-m MIN_OK] [-x]
 *                    [-T SECS] [-A SECS] [-C CONNECT_MS] [-Z | -O]
 *                    [-I MS: idle this long before the IO and before the close]
 *                    [-B MS: the first request's callback blocks this long (a stalled
 *                    completion thread: the heartbeats' answers wait in its CQ)]
 *                    [-W US: requests with RTRS_REQ_POLL, waited for by rtrs_clt_poll for up
 *                    to US first; prints poll_calls= and polled= (the polls that saw it done)]
 * -Z: the client's buffers are registered with the session (rtrs_clt_reg_buf, zero copy);
 * bench registers its buffer unless -b (every request copied through the bounce buffers).
 * -O: all of the client's memory is registered instead (rtrs_clt_reg_buf(NULL, SIZE_MAX):
 * implicit On-Demand Paging), its buffers allocated one by one as without -Z.
 * -T SECS: keep issuing until SECS have passed as well. -A SECS: then keep issuing until all
 * paths are connected (a test that cut one waits for its reconnection, not for a fixed time),
 * at most SECS more. -C MS: the connect timeout (rtrs_clt_open's wait for a first path, and
 * each path's attempt; default 10 s). The client prints per-path counters at the end as
 * "path DST reqs=N failovers=N ...".
 * Exit 0: every request succeeded and every byte matched (-x: failures allowed, counted).
 */
#include "rtrs.h"
#include "rtrs-common.h"
#include "rtrs-srv-check.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct hdr {
	uint64_t off;
	uint32_t len;
	uint32_t magic;
};
#define HDR_MAGIC 0x52545253u
#define HDR_PEEK 0x4b454550u	/* READ answered with the chunk as it is (oldkey check) */

/* ---------------------------------------------------------------------------------------- */
static char *disk;
static size_t disk_size;

struct work {
	struct rtrs_srv_op *op;
	enum rtrs_dir dir;
	void *data;
	size_t len;
	struct hdr h;
	struct work *next;
};
static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wcv = PTHREAD_COND_INITIALIZER;
static struct work *whead, *wtail;

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&wmu);
		while (!whead)
			pthread_cond_wait(&wcv, &wmu);
		struct work *w = whead;
		whead = w->next;
		if (!whead)
			wtail = NULL;
		pthread_mutex_unlock(&wmu);
		int err = 0;
		if (w->h.magic == HDR_PEEK && w->dir == RTRS_READ)
			err = 0;	/* the chunk's bytes go back untouched */
		else if (w->h.magic != HDR_MAGIC || w->h.off + w->len > disk_size || w->h.len != w->len)
			err = EINVAL;
		else if (w->dir == RTRS_WRITE)
			memcpy(disk + w->h.off, w->data, w->len);
		else
			memcpy(w->data, disk + w->h.off, w->len);
		rtrs_srv_resp_rdma(w->op, err);
		free(w);
	}
	return NULL;
}

static int answer_at_once;	/* server -z: transport only (bench/rtrs.sh) */

static int srv_rdma_ev(struct rtrs_srv_sess *s, void *sp, struct rtrs_srv_op *op, enum rtrs_dir dir,
		       void *data, size_t len, const void *usr, size_t usrlen)
{
	(void)s;
	(void)sp;
	if (usrlen != sizeof(struct hdr))
		return EINVAL;
	if (answer_at_once)	/* no disk, no worker: the answer goes from the event thread */
		return rtrs_srv_resp_rdma(op, 0);
	struct work *w = calloc(1, sizeof(*w));
	if (!w)
		return ENOMEM;
	w->op = op;
	w->dir = dir;
	w->data = data;
	w->len = len;
	memcpy(&w->h, usr, sizeof(w->h));
	pthread_mutex_lock(&wmu);
	if (wtail)
		wtail->next = w;
	else
		whead = w;
	wtail = w;
	pthread_cond_signal(&wcv);
	pthread_mutex_unlock(&wmu);
	return 0;
}

static int srv_link_ev(struct rtrs_srv_sess *s, enum rtrs_srv_link_ev ev, void *priv)
{
	(void)priv;
	static char last[256];
	/* each client run (session name with its pid) starts from a zeroed disk; a session that
	 * comes back after all its paths failed keeps it */
	if (ev == RTRS_SRV_LINK_EV_CONNECTED && strcmp(last, rtrs_srv_get_sess_name(s))) {
		memset(disk, 0, disk_size);
		snprintf(last, sizeof(last), "%s", rtrs_srv_get_sess_name(s));
	}
	printf("session %s %s\n", rtrs_srv_get_sess_name(s),
	       ev == RTRS_SRV_LINK_EV_CONNECTED ? "connected" : "disconnected");
	fflush(stdout);
	return 0;
}

static int server(int argc, char **argv)
{
	const char *addrs[16];
	size_t n = 0;
	struct rtrs_srv_opts o;
	int secs = 60, opt;
	size_t mb = 64;

	rtrs_srv_opts_init(&o);
	while ((opt = getopt(argc, argv, "l:q:c:d:H:t:i:z")) != -1) {
		switch (opt) {
		case 'l': if (n < 16) addrs[n++] = optarg; break;
		case 'q': o.queue_depth = (uint32_t)atoi(optarg); break;
		case 'c': o.chunk_size = (uint32_t)atoi(optarg); break;
		case 'd': mb = (size_t)atoi(optarg); break;
		case 'H': o.hb_interval_ms = (unsigned int)atoi(optarg); break;
		case 't': secs = atoi(optarg); break;
		case 'i': o.always_invalidate = atoi(optarg); break;
		case 'z': answer_at_once = 1; break;
		default: return 2;
		}
	}
	if (!n)
		addrs[n++] = "0.0.0.0";
	disk_size = mb << 20;
	disk = calloc(1, disk_size);
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	struct rtrs_srv_ops ops = { .rdma_ev = srv_rdma_ev, .link_ev = srv_link_ev };
	struct rtrs_srv_ctx *ctx = rtrs_srv_open(&ops, addrs, n, &o);
	if (!ctx) {
		fprintf(stderr, "rtrs_srv_open: %s\n", strerror(errno));
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	sleep((unsigned int)secs);
	struct rtrs_path_stats st[16];
	int k = rtrs_srv_path_stats(ctx, st, 16);
	for (int i = 0; i < k && i < 16; i++)
		printf("srvpath %s reqs=%llu bad_msgs=%llu rkey_renewals=%llu\n", st[i].dst,
		       (unsigned long long)(st[i].reqs_read + st[i].reqs_write),
		       (unsigned long long)st[i].bad_msgs, (unsigned long long)st[i].rkey_renewals);
	rtrs_srv_close(ctx);
	return 0;
}

/* ---------------------------------------------------------------------------------------- */
struct cio {
	int busy, tainted;
	enum rtrs_dir dir;
	struct hdr h;
	char *buf;
	int done, err;
};
static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ccv = PTHREAD_COND_INITIALIZER;
static char *mirror;
static long fails, mismatches, completed, ok_after_fail, unchecked;
static int inflight;
static int wait_depth;	/* client -W: rtrs_clt_poll's predicate, inflight below this */
static long polled, poll_calls;

static int below_depth(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&cmu);
	int r = inflight < wait_depth;
	pthread_mutex_unlock(&cmu);
	return r;
}

/* client -W US: wait for inflight < depth by polling first (rtrs_clt_poll), then as usual. */
static void wait_below(struct rtrs_clt *clt, int depth, unsigned int poll_us)
{
	if (poll_us) {
		wait_depth = depth;
		poll_calls++;
		if (!rtrs_clt_poll(clt, below_depth, NULL, poll_us))
			polled++;
	}
	pthread_mutex_lock(&cmu);
	while (inflight >= depth)
		pthread_cond_wait(&ccv, &cmu);
}

static int block_ms;	/* client -B */

static void conf(void *priv, int err)
{
	struct cio *io = priv;
	int ms = __atomic_exchange_n(&block_ms, 0, __ATOMIC_ACQ_REL);
	if (ms > 0)
		poll(NULL, 0, ms);	/* the first callback only */
	pthread_mutex_lock(&cmu);
	if (err) {
		fails++;
		if (io->dir == RTRS_WRITE)
			io->tainted = 1;	/* a failed WRITE may or may not have landed */
	} else if (io->tainted) {
		if (io->dir == RTRS_READ)
			unchecked++;
	} else if (io->dir == RTRS_WRITE) {
		if (fails)
			ok_after_fail++;
		memcpy(mirror + io->h.off, io->buf, io->h.len);
	} else if (fails && !memcmp(mirror + io->h.off, io->buf, io->h.len)) {
		ok_after_fail++;
	} else if (memcmp(mirror + io->h.off, io->buf, io->h.len)) {
		mismatches++;
		fprintf(stderr, "READ off %llu len %u: bytes differ\n",
			(unsigned long long)io->h.off, io->h.len);
	}
	completed++;
	io->busy = 0;
	inflight--;
	pthread_cond_broadcast(&ccv);
	pthread_mutex_unlock(&cmu);
}

/* -p DST[@SRC] into paths[*np] (at most 16); -1 when full. */
static int add_path(struct rtrs_path_addr *paths, size_t *np, char *arg)
{
	char *at = strchr(arg, '@');

	if (*np == 16)
		return -1;
	if (at)
		*at = 0;
	paths[*np].dst = arg;
	paths[(*np)++].src = at ? at + 1 : NULL;
	return 0;
}

/* -P rr|ml|anything else (min-inflight) */
static enum rtrs_mp_policy parse_policy(const char *arg)
{
	return !strcmp(arg, "rr") ? RTRS_MP_ROUND_ROBIN :
	       !strcmp(arg, "ml") ? RTRS_MP_MIN_LATENCY : RTRS_MP_MIN_INFLIGHT;
}

/* Every path of the session connected (-A). */
static int all_paths_up(struct rtrs_clt *clt)
{
	struct rtrs_path_stats st[16];
	int n = rtrs_clt_path_stats(clt, st, 16);

	for (int i = 0; i < n && i < 16; i++)
		if (st[i].state != RTRS_PATH_CONNECTED)
			return 0;
	return 1;
}

static int client(int argc, char **argv)
{
	struct rtrs_path_addr paths[16];
	size_t np = 0;
	struct rtrs_clt_opts o;
	long nios = 10000;
	int depth = 32, opt, allow_fail = 0, min_secs = 0, zc = 0, odp = 0, wait_secs = 0;
	int idle_ms = 0;
	unsigned int seed = 1, poll_us = 0;
	size_t mb = 64;

	rtrs_clt_opts_init(&o);
	while ((opt = getopt(argc, argv, "p:n:D:P:H:R:F:s:d:xM:T:W:ZOA:C:I:B:")) != -1) {
		switch (opt) {
		case 'p':
			if (add_path(paths, &np, optarg))
				return 2;
			break;
		case 'n': nios = atol(optarg); break;
		case 'D': depth = atoi(optarg); break;
		case 'P': o.policy = parse_policy(optarg); break;
		case 'H': o.hb_interval_ms = (unsigned int)atoi(optarg); break;
		case 'M': o.hb_missed_max = (unsigned int)atoi(optarg); break;
		case 'R': o.reconnect_delay_ms = (unsigned int)atoi(optarg); break;
		case 'F': o.fail_timeout_ms = (unsigned int)atoi(optarg); break;
		case 's': seed = (unsigned int)atoi(optarg); break;
		case 'd': mb = (size_t)atoi(optarg); break;
		case 'x': allow_fail = 1; break;
		case 'T': min_secs = atoi(optarg); break;
		case 'W': poll_us = (unsigned int)atoi(optarg); break;
		case 'A': wait_secs = atoi(optarg); break;
		case 'C': o.connect_timeout_ms = (unsigned int)atoi(optarg); break;
		case 'Z': zc = 1; break;
		case 'O': odp = 1; break;
		case 'I': idle_ms = atoi(optarg); break;
		case 'B': block_ms = atoi(optarg); break;
		default: return 2;
		}
	}
	srand(seed);
	char name[64];
	snprintf(name, sizeof(name), "rtrs-test-%d", (int)getpid());
	struct rtrs_clt *clt = rtrs_clt_open(name, paths, np, &o);
	if (!clt) {
		fprintf(stderr, "rtrs_clt_open: %s\n", strerror(errno));
		return 1;
	}
	struct rtrs_attrs a;
	rtrs_clt_query(clt, &a);
	size_t slot = a.max_io_size & ~(size_t)511;
	size_t nslots = (mb << 20) / slot;
	if (depth > (int)nslots)
		depth = (int)nslots;
	printf("connected qd=%u max_io=%u slots=%zu\n", a.queue_depth, a.max_io_size, nslots);
	fflush(stdout);
	mirror = calloc(1, mb << 20);
	struct cio *ios = calloc(nslots, sizeof(*ios));
	/* -Z: the slots are one region registered with the session (rtrs_clt_reg_buf: zero copy
	 * for WRITEs, and for READs of one piece) */
	char *region = zc ? aligned_alloc(4096, nslots * slot) : NULL;
	for (size_t i = 0; i < nslots; i++)
		ios[i].buf = zc ? region + i * slot : malloc(slot);
	int rerr = zc ? rtrs_clt_reg_buf(clt, region, nslots * slot) :
		   odp ? rtrs_clt_reg_buf(clt, NULL, SIZE_MAX) : 0;
	if (rerr) {
		fprintf(stderr, "rtrs_clt_reg_buf: %s\n", strerror(rerr));
		return 1;
	}
	/* -I: idle before the IO and before the close (the session's threads asleep: heartbeats
	 * must carry the paths, the IO must wake them, the close must end them) */
	if (idle_ms > 0)
		poll(NULL, 0, idle_ms);
	time_t t0 = time(NULL);
	long k;
	for (k = 0; k < nios || time(NULL) - t0 < min_secs ||
		    (wait_secs && time(NULL) - t0 < min_secs + wait_secs && !all_paths_up(clt));
	     k++) {
		wait_below(clt, depth, poll_us);
		size_t s;
		do
			s = (size_t)rand() % nslots;
		while (ios[s].busy);
		struct cio *io = &ios[s];
		io->busy = 1;
		inflight++;
		pthread_mutex_unlock(&cmu);
		uint32_t len = (uint32_t)(512 * (1 + (size_t)rand() % (slot / 512)));
		uint64_t off = s * slot + 512 * ((size_t)rand() % ((slot - len) / 512 + 1));
		io->dir = rand() & 1 ? RTRS_WRITE : RTRS_READ;
		io->h = (struct hdr){ off, len, HDR_MAGIC };
		if (io->dir == RTRS_WRITE)
			for (uint32_t i = 0; i < len; i += 4) {
				uint32_t v = (uint32_t)rand();
				memcpy(io->buf + i, &v, 4);
			}
		else
			memset(io->buf, 0xee, len);
		struct iovec iov[2] = { { io->buf, len / 2 }, { io->buf + len / 2, len - len / 2 } };
		/* -Z: one piece or two (a READ of one piece lands in place, of two is copied) */
		unsigned int niov = zc && (rand() & 1) ? 1 : 2;
		if (niov == 1)
			iov[0].iov_len = len;
		int r = rtrs_clt_request(clt, io->dir, conf, io, &io->h, sizeof(io->h), iov, niov,
					 poll_us ? RTRS_REQ_POLL : 0);
		if (r) {
			fprintf(stderr, "rtrs_clt_request: %s\n", strerror(r));
			pthread_mutex_lock(&cmu);
			fails++;
			io->busy = 0;
			inflight--;
			pthread_mutex_unlock(&cmu);
		}
	}
	wait_below(clt, 1, poll_us);
	pthread_mutex_unlock(&cmu);
	if (idle_ms > 0)
		poll(NULL, 0, idle_ms);
	struct rtrs_path_stats st[16];
	int npaths = rtrs_clt_path_stats(clt, st, 16);
	for (int i = 0; i < npaths && i < 16; i++)
		printf("path %s state=%d reqs=%llu failovers=%llu reconnects=%llu hb_rtt_us=%u "
		       "hb_rtt_min_us=%u hb_sent=%llu hb_missed_total=%llu errors=%llu "
		       "rkey_renewals=%llu\n",
		       st[i].dst, st[i].state,
		       (unsigned long long)(st[i].reqs_read + st[i].reqs_write),
		       (unsigned long long)st[i].failovers, (unsigned long long)st[i].reconnects,
		       st[i].hb_rtt_us, st[i].hb_rtt_min_us, (unsigned long long)st[i].hb_sent,
		       (unsigned long long)st[i].hb_missed_total, (unsigned long long)st[i].errors,
		       (unsigned long long)st[i].rkey_renewals);
	printf("ios=%ld completed=%ld failed=%ld mismatches=%ld seconds=%ld ok_after_fail=%ld "
	       "unchecked=%ld poll_calls=%ld polled=%ld\n", k, completed, fails, mismatches,
	       (long)(time(NULL) - t0), ok_after_fail, unchecked, poll_calls, polled);
	fflush(stdout);
	if ((zc || odp) && (rerr = rtrs_clt_unreg_buf(clt, zc ? region : NULL))) {
		fprintf(stderr, "rtrs_clt_unreg_buf: %s\n", strerror(rerr));
		mismatches++;
	}
	rtrs_clt_close(clt);
	for (size_t i = 0; !zc && i < nslots; i++)
		free(ios[i].buf);
	free(region);
	free(ios);
	if (mismatches || (fails && !allow_fail))
		return 1;
	return 0;
}


/* ---------------------------------------------------------------------------------------- */
/* hostile: malformed requests through the raw test hook; each must close the path (the
 * client reconnects), the session goes on, a checked WRITE+READ works after each. */
static int sync_io(struct rtrs_clt *clt, enum rtrs_dir dir, uint64_t off, char *buf, uint32_t len)
{
	struct cio io = { .dir = dir, .h = { off, len, HDR_MAGIC }, .buf = buf, .busy = 1 };
	struct iovec iov = { buf, len };
	pthread_mutex_lock(&cmu);
	inflight++;
	pthread_mutex_unlock(&cmu);
	int r = rtrs_clt_request(clt, dir, conf, &io, &io.h, sizeof(io.h), &iov, 1, 0);
	if (r)
		return r;
	pthread_mutex_lock(&cmu);
	while (io.busy)
		pthread_cond_wait(&ccv, &cmu);
	pthread_mutex_unlock(&cmu);
	return 0;
}

static uint64_t reconnects(struct rtrs_clt *clt)
{
	struct rtrs_path_stats st[4];
	int n = rtrs_clt_path_stats(clt, st, 4);
	return n > 0 ? st[0].reconnects : 0;
}

static int hostile(int argc, char **argv)
{
	struct rtrs_path_addr pa = { NULL, NULL };
	struct rtrs_clt_opts o;
	int opt;

	rtrs_clt_opts_init(&o);
	o.reconnect_delay_ms = 200;
	o.hb_interval_ms = 200;
	while ((opt = getopt(argc, argv, "p:")) != -1)
		if (opt == 'p')
			pa.dst = optarg;
	mirror = calloc(1, 64 << 20);
	char name[64];
	snprintf(name, sizeof(name), "rtrs-hostile-%d", (int)getpid());
	struct rtrs_clt *clt = rtrs_clt_open(name, &pa, 1, &o);
	if (!clt) {
		fprintf(stderr, "rtrs_clt_open: %s\n", strerror(errno));
		return 1;
	}
	struct rtrs_attrs a;
	rtrs_clt_query(clt, &a);
	unsigned int mb = rtrs_mem_bits(a.queue_depth);
	uint32_t chunk = a.chunk_size, bad_id = a.queue_depth;
	if (bad_id >= (1u << (28 - mb))) {
		fprintf(stderr, "queue depth %u leaves no out-of-range chunk id\n", a.queue_depth);
		return 2;
	}
	struct {
		const char *name;
		uint32_t id, off;
		unsigned char msg[64];
		size_t len;
	} cases[6];
	int nc = 0;
	struct rtrs_msg_rdma_write w = { RTRS_MSG_WRITE, 0 };
	struct rtrs_msg_rdma_read rd = { RTRS_MSG_READ, 0, 0, 1 };
	struct rtrs_sg_desc d = { 4096, 1, 0 };
	/* 1. chunk id >= queue depth */
	cases[nc] = (typeof(cases[0])){ "chunk id", bad_id, 100, {0}, sizeof(w) };
	memcpy(cases[nc++].msg, &w, sizeof(w));
	/* 2. offset outside the chunk */
	cases[nc] = (typeof(cases[0])){ "offset", 0, chunk + 64, {0}, sizeof(w) };
	memcpy(cases[nc++].msg, &w, sizeof(w));
	/* 3. user header longer than the offset */
	w.usr_len = 200;
	cases[nc] = (typeof(cases[0])){ "length", 0, 100, {0}, sizeof(w) };
	memcpy(cases[nc++].msg, &w, sizeof(w));
	/* 4. READ descriptor longer than a chunk */
	d.len = chunk + 4096;
	cases[nc] = (typeof(cases[0])){ "descriptor length", 0, 0, {0}, sizeof(rd) + sizeof(d) };
	memcpy(cases[nc].msg, &rd, sizeof(rd));
	memcpy(cases[nc++].msg + sizeof(rd), &d, sizeof(d));
	/* 5. READ descriptor count above the server's limit (0 is the kernel's FLUSH: valid) */
	rd.sg_cnt = RTRS_SRV_MAX_DESC + 1;
	cases[nc] = (typeof(cases[0])){ "descriptor count", 0, 0, {0}, sizeof(rd) };
	memcpy(cases[nc++].msg, &rd, sizeof(rd));
	char *buf = malloc(65536), *back = malloc(65536);
	int bad = 0;
	for (int i = 0; i < nc; i++) {
		uint64_t before = reconnects(clt);
		/* the message lands at chunk (id mod qd) offset off (mod the chunk): the server
		 * reads what the immediate says */
		uint32_t imm = rtrs_to_imm(RTRS_IO_REQ_IMM, cases[i].id << mb | cases[i].off);
		int r = rtrs_clt_test_raw(clt, imm, cases[i].msg, cases[i].len, cases[i].id,
					  cases[i].off);
		if (r) {
			printf("case %s: post failed: %s\n", cases[i].name, strerror(r));
			bad++;
			continue;
		}
		int waited = 0;
		while (reconnects(clt) == before && waited < 10000) {
			usleep(20000);
			waited += 20;
		}
		int closed = reconnects(clt) > before;
		for (int k = 0; k < 65536; k++)
			buf[k] = (char)(rand());
		memset(back, 0, 65536);
		int e1 = sync_io(clt, RTRS_WRITE, (uint64_t)i << 20, buf, 65536);
		int e2 = sync_io(clt, RTRS_READ, (uint64_t)i << 20, back, 65536);
		int same = !memcmp(buf, back, 65536);
		printf("case %s: path closed and reconnected=%d, checked IO after: %s\n", cases[i].name,
		       closed, !e1 && !e2 && same && !fails ? "ok" : "FAILED");
		if (!closed || e1 || e2 || !same || fails)
			bad++;
	}
	printf("hostile cases=%d bad=%d\n", nc, bad);
	rtrs_clt_close(clt);
	free(buf);
	free(back);
	return bad ? 1 : 0;
}

/* oldkey: after a request's response, its chunk key on that path must be dead (the server's
 * always_invalidate). Two paths: a WRITE on path 0 into chunk X; a plain RDMA WRITE of a
 * pattern into chunk X with the key that request used; then a READ of chunk X as the server
 * holds it (HDR_PEEK) on path 1 shows whether the pattern landed. Prints
 * "oldkey: renewed=R status=S untouched=U overwritten=O"; exit 0 when it could run. */
static int wait_connected(struct rtrs_clt *clt, int path, int ms)
{
	uint32_t key;
	int conn = 0;
	for (int w = 0; w < ms; w += 20) {
		if (!rtrs_clt_test_key(clt, path, 0, &key, &conn) && conn)
			return 1;
		usleep(20000);
	}
	return 0;
}

static int oldkey(int argc, char **argv)
{
	struct rtrs_path_addr pa[2] = { { NULL, NULL }, { NULL, NULL } };
	struct rtrs_clt_opts o;
	int opt, np = 0;

	rtrs_clt_opts_init(&o);
	o.reconnect_delay_ms = 200;
	o.hb_interval_ms = 200;
	while ((opt = getopt(argc, argv, "p:")) != -1)
		if (opt == 'p' && np < 2)
			pa[np++].dst = optarg;
	if (np != 2)
		return 2;
	mirror = calloc(1, 64 << 20);
	char name[64];
	snprintf(name, sizeof(name), "rtrs-oldkey-%d", (int)getpid());
	struct rtrs_clt *clt = rtrs_clt_open(name, pa, 2, &o);
	if (!clt) {
		fprintf(stderr, "rtrs_clt_open: %s\n", strerror(errno));
		return 1;
	}
	if (!wait_connected(clt, 0, 10000) || !wait_connected(clt, 1, 10000)) {
		fprintf(stderr, "paths not connected\n");
		return 1;
	}
	const uint32_t X = 3, LEN = 65536, POFF = 4096, PLEN = 4096;
	char *d1 = malloc(LEN), *peek = malloc(LEN), *pat = malloc(PLEN);
	for (uint32_t i = 0; i < LEN; i++)
		d1[i] = (char)rand();
	memset(pat, 0x5a, PLEN);
	uint32_t k0, k1;
	int conn, r;
	if (rtrs_clt_test_key(clt, 0, X, &k0, &conn) || rtrs_clt_test_force(clt, 0, X) ||
	    (r = sync_io(clt, RTRS_WRITE, 0, d1, LEN)) || fails) {
		fprintf(stderr, "first WRITE failed\n");
		return 1;
	}
	rtrs_clt_test_key(clt, 0, X, &k1, &conn);
	/* the old key, into the chunk, where the peek READ's own message does not reach */
	int st = rtrs_clt_test_write_key(clt, 0, X, POFF, k0, pat, PLEN, 5000);
	const char *sts = st < 0 ? strerror(-st) : ibv_wc_status_str((enum ibv_wc_status)st);
	memset(peek, 0, LEN);
	/* tainted: conf() does not compare it with the mirror */
	struct cio io = { .dir = RTRS_READ, .h = { 0, LEN, HDR_PEEK }, .buf = peek, .busy = 1,
			  .tainted = 1 };
	struct iovec iov = { peek, LEN };
	pthread_mutex_lock(&cmu);
	inflight++;
	pthread_mutex_unlock(&cmu);
	if (!wait_connected(clt, 1, 5000) || rtrs_clt_test_force(clt, 1, X) ||
	    rtrs_clt_request(clt, RTRS_READ, conf, &io, &io.h, sizeof(io.h), &iov, 1, 0)) {
		fprintf(stderr, "peek READ not submitted\n");
		return 1;
	}
	pthread_mutex_lock(&cmu);
	while (io.busy)
		pthread_cond_wait(&ccv, &cmu);
	pthread_mutex_unlock(&cmu);
	int untouched = !memcmp(peek + POFF, d1 + POFF, PLEN);
	int overwritten = !memcmp(peek + POFF, pat, PLEN);
	printf("oldkey: key %#x -> %#x renewed=%d status=%s untouched=%d overwritten=%d\n", k0, k1,
	       k0 != k1, sts, untouched, overwritten);
	rtrs_clt_close(clt);
	free(d1);
	free(peek);
	free(pat);
	return 0;
}

/* bench: each completion submits the next request from the session's thread until the end */
static struct rtrs_clt *bclt;
static enum rtrs_dir bdir;
static struct iovec biov;
static struct hdr bhdr;
static volatile int bstop;
static long bdone, bwarm_done, berr;
static int binflight;
static uint64_t bwarm_ns;

static void bconf(void *priv, int err)
{
	(void)priv;
	pthread_mutex_lock(&cmu);
	if (err)
		berr++;
	bdone++;
	if (!bwarm_done && rtrs_now_ns() >= bwarm_ns)
		bwarm_done = bdone;
	int again = !bstop && !err;
	if (!again) {
		binflight--;
		pthread_cond_broadcast(&ccv);
	}
	pthread_mutex_unlock(&cmu);
	if (again && rtrs_clt_request(bclt, bdir, bconf, NULL, &bhdr, sizeof(bhdr), &biov, 1, 0)) {
		pthread_mutex_lock(&cmu);
		berr++;
		binflight--;
		pthread_cond_broadcast(&ccv);
		pthread_mutex_unlock(&cmu);
	}
}

static int bench(int argc, char **argv)
{
	struct rtrs_path_addr paths[16];
	size_t np = 0;
	struct rtrs_clt_opts o;
	int opt, depth = 32, bounce = 0;
	double secs = 5;
	uint32_t size = 4096;

	rtrs_clt_opts_init(&o);
	bdir = RTRS_WRITE;
	while ((opt = getopt(argc, argv, "p:S:D:T:rP:b")) != -1) {
		switch (opt) {
		case 'p':
			if (add_path(paths, &np, optarg))
				return 2;
			break;
		case 'S': size = (uint32_t)atoi(optarg); break;
		case 'D': depth = atoi(optarg); break;
		case 'T': secs = atof(optarg); break;
		case 'r': bdir = RTRS_READ; break;
		case 'P': o.policy = parse_policy(optarg); break;
		case 'b': bounce = 1; break;
		default: return 2;
		}
	}
	if (!np || depth < 1 || !size)
		return 2;
	char name[64];
	snprintf(name, sizeof(name), "rtrs-bench-%d", (int)getpid());
	bclt = rtrs_clt_open(name, paths, np, &o);
	if (!bclt) {
		fprintf(stderr, "rtrs_clt_open: %s\n", strerror(errno));
		return 1;
	}
	/* every path connected before the clock starts (up to 5 s) */
	for (int w = 0; w < 5000; w += 20) {
		struct rtrs_path_stats st[16];
		int n = rtrs_clt_path_stats(bclt, st, 16), up = 0;
		for (int i = 0; i < n && i < 16; i++)
			up += st[i].state == RTRS_PATH_CONNECTED;
		if (up == (int)np)
			break;
		usleep(20000);
	}
	struct rtrs_attrs a;
	rtrs_clt_query(bclt, &a);
	if (size > a.max_io_size || depth > (int)a.queue_depth) {
		fprintf(stderr, "size %u or depth %d above the session's %u / %u\n", size, depth,
			a.max_io_size, a.queue_depth);
		return 2;
	}
	char *buf = aligned_alloc(4096, ((size_t)size + 4095) & ~(size_t)4095);
	memset(buf, 0x42, size);
	/* registered with the session (zero copy) unless -b (copied through its bounce buffers) */
	int err = bounce ? 0 : rtrs_clt_reg_buf(bclt, buf, ((size_t)size + 4095) & ~(size_t)4095);
	if (err) {
		fprintf(stderr, "rtrs_clt_reg_buf: %s\n", strerror(err));
		return 1;
	}
	biov = (struct iovec){ buf, size };	/* requests share it: no check, only the transport */
	bhdr = (struct hdr){ 0, size, HDR_MAGIC };
	uint64_t t0 = rtrs_now_ns();
	double warm = secs / 5 < 1 ? secs / 5 : 1;
	bwarm_ns = t0 + (uint64_t)(warm * 1e9);
	uint64_t tend = t0 + (uint64_t)((secs + warm) * 1e9);
	binflight = depth;
	for (int i = 0; i < depth; i++)
		if (rtrs_clt_request(bclt, bdir, bconf, NULL, &bhdr, sizeof(bhdr), &biov, 1, 0)) {
			pthread_mutex_lock(&cmu);
			berr++;
			binflight--;
			pthread_mutex_unlock(&cmu);
		}
	while (rtrs_now_ns() < tend)
		usleep(10000);
	pthread_mutex_lock(&cmu);
	long at_end = bdone;
	bstop = 1;
	uint64_t t1 = rtrs_now_ns();
	while (binflight)
		pthread_cond_wait(&ccv, &cmu);
	pthread_mutex_unlock(&cmu);
	double el = (double)(t1 - bwarm_ns) / 1e9;
	double ios = (double)(at_end - bwarm_done);
	struct rtrs_path_stats st[16];
	int n = rtrs_clt_path_stats(bclt, st, 16);
	printf("bench: dir=%s size=%u depth=%d paths=%zu seconds=%.2f ios=%.0f iops=%.0f "
	       "mib_s=%.1f errors=%ld", bdir == RTRS_READ ? "read" : "write", size, depth, np, el,
	       ios, ios / el, ios * size / el / 1048576.0, berr);
	for (int i = 0; i < n && i < 16; i++)
		printf(" path%d_reqs=%llu", i, (unsigned long long)(st[i].reqs_read + st[i].reqs_write));
	printf("\n");
	if (!bounce && (err = rtrs_clt_unreg_buf(bclt, buf)))
		fprintf(stderr, "rtrs_clt_unreg_buf: %s\n", strerror(err));
	rtrs_clt_close(bclt);
	free(buf);
	return berr || err ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "server"))
		return server(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "hostile"))
		return hostile(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "oldkey"))
		return oldkey(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "bench"))
		return bench(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "client"))
		return client(argc - 1, argv + 1);
	fprintf(stderr, "usage: rtrs-test server|client ...\n");
	return 2;
}
