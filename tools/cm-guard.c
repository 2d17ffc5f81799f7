/* SPDX-License-Identifier: MIT */
/*
 * softrdma-cm-guard: the CM's guardian (src/cm/guard.h, docs/cm.md "A process that dies").
 *
 * librdmacm starts it, once a connection over the IB CM is up, with fd 3 the read end of a
 * pipe whose write end only the guarded process holds, and fd 4 the table of the DREQs of its
 * connections that are up. It forks itself off (the library reaps the first process at once),
 * waits for the end of the pipe (the process is gone, however it ended), then sends every DREQ
 * the table still holds to the peer's QP1 from a soft NIC of its own (on the process's address,
 * on a UDP port of its own), again every 300 ms until its DREP comes (a softrdma peer's DREP to
 * a connection it no longer knows; a kernel peer answers to port 4791), for 1 s, and leaves.
 * An empty table: it leaves at once.
 *
 * SOFTRDMA_CM_GUARD=log: what it does, on the standard error the library then leaves it.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "cm/guard.h"
#include "cm/ibcm/agent.h"

#define MAX_DEVS 16
#define TOTAL_MS 1000
#define RESEND_MS 300

static bool verbose;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return;
	fprintf(stderr, "softrdma-cm-guard[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Same IP address; a softrdma GID may name a UDP port in bytes 8-9 (docs/gid.md). */
static bool gid_ip_eq(const uint8_t *a, const uint8_t *b)
{
	static const uint8_t zero[8];
	bool a4 = !memcmp(a, zero, 8) && a[10] == 0xff && a[11] == 0xff;
	bool b4 = !memcmp(b, zero, 8) && b[10] == 0xff && b[11] == 0xff;

	if (a4 || b4)
		return a4 && b4 && !memcmp(a + 12, b + 12, 4);
	return !memcmp(a, b, 16);
}

struct conn {
	struct cm_guard_slot s;
	int dev;
	struct ibv_ah *ah;
	bool done;
};

int main(void)
{
	const char *v = getenv("SOFTRDMA_CM_GUARD");
	struct cm_guard_table *t;
	struct conn *c;
	unsigned n = 0, left;
	char buf[64];
	struct ibv_device **list;
	struct ibv_context *ctx[MAX_DEVS] = { 0 };
	struct ibcm_agent ag[MAX_DEVS];
	bool ag_open[MAX_DEVS] = { 0 };
	union ibv_gid gid[MAX_DEVS];
	int nd = 0;
	uint64_t t0, last_send;

	verbose = v && !strcmp(v, "log");
	/* The library starts it with every signal blocked and the application's ignored signals
	 * still ignored (src/cm/guard.c, spawn_quiet): its own dispositions and mask first. */
	sigset_t none;

	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Nothing of the process it guards but its two descriptors (the library's clone passes
	 * on every descriptor that is not close-on-exec). */
	for (int fd = CM_GUARD_FD_TABLE + 1; fd < 1024; fd++)
		close(fd);
	signal(SIGPIPE, SIG_IGN);
	if (chdir("/"))	/* holds no directory of the process busy */
		return 1;
	pid_t p = fork();

	if (p > 0)
		_exit(0);
	/* (fork failed: it guards from here, reaped by the library when it ends) */
	for (;;) {
		ssize_t r = read(CM_GUARD_FD_PIPE, buf, sizeof(buf));

		if (r == 0 || (r < 0 && errno != EINTR))
			break;
	}
	t = mmap(NULL, sizeof(*t), PROT_READ, MAP_SHARED, CM_GUARD_FD_TABLE, 0);
	if (t == MAP_FAILED || t->magic != CM_GUARD_MAGIC) {
		say("no table");
		return 1;
	}
	c = calloc(CM_GUARD_SLOTS, sizeof(*c));
	if (!c)
		return 1;
	for (unsigned i = 0; i < CM_GUARD_SLOTS && i < t->nslots; i++) {
		uint32_t seq = t->slot[i].seq;

		if ((seq & 1) || !t->slot[i].used)
			continue;	/* free, or caught half written */
		memcpy(&c[n].s, &t->slot[i], sizeof(c[n].s));
		if (t->slot[i].seq == seq)
			n++;
	}
	if (!n) {
		say("the process ended with no connection up");
		return 0;
	}
	say("the process ended with %u connection(s) up: sending their DREQs", n);
	/* Our NIC: on the process's own address (its peers take a CM MAD only from their
	 * connection's peer address), but never on its UDP port: a process restarted at once
	 * (a server, the next case of a test) must find the standard port 4791 free, or it
	 * would take another one that kernel peers cannot reach (docs/gid.md). So a port of
	 * our own; a kernel peer's DREP, sent to 4791, does not reach us then, and each DREQ
	 * is sent a few times instead. */
	{
		char addr[INET6_ADDRSTRLEN], port[8];
		const uint8_t *l = c[0].s.local_gid;
		static const uint8_t zero[8];
		uint16_t r;

		if (!memcmp(l, zero, 8) && l[10] == 0xff && l[11] == 0xff)
			inet_ntop(AF_INET, l + 12, addr, sizeof(addr));
		else
			inet_ntop(AF_INET6, l, addr, sizeof(addr));
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint16_t)now_ms();
		snprintf(port, sizeof(port), "%u", 20000u + r % 12768u);
		setenv("SOFTRDMA_ADDR", addr, 1);
		setenv("SOFTRDMA_PORT", port, 1);
		say("sending from %s, UDP port %s or another free one", addr, port);
	}
	list = ibv_get_device_list(&nd);
	if (!list || !nd) {
		say("no device");
		return 1;
	}
	if (nd > MAX_DEVS)
		nd = MAX_DEVS;
	for (unsigned i = 0; i < n; i++) {
		c[i].dev = -1;
		for (int d = 0; d < nd && c[i].dev < 0; d++) {
			if (!ctx[d]) {
				ctx[d] = ibv_open_device(list[d]);
				if (!ctx[d] || ibv_query_gid(ctx[d], 1, 0, &gid[d]))
					continue;
			}
			if (gid_ip_eq(gid[d].raw, c[i].s.local_gid))
				c[i].dev = d;
		}
		if (c[i].dev < 0)
			c[i].dev = 0;
		int d = c[i].dev;

		if (!ctx[d] && !(ctx[d] = ibv_open_device(list[d])))
			continue;
		if (!ag_open[d]) {
			int ret = ibcm_agent_open(&ag[d], ctx[d]);

			if (ret) {
				say("QP1 on %s: %s", ibv_get_device_name(list[d]), strerror(-ret));
				continue;
			}
			ag_open[d] = true;
		}
		c[i].ah = ibcm_agent_ah(&ag[d], (const union ibv_gid *)c[i].s.peer_gid);
	}
	t0 = now_ms();
	last_send = 0;
	left = n;
	while (left && now_ms() - t0 < TOTAL_MS) {
		if (now_ms() - last_send >= RESEND_MS) {
			for (unsigned i = 0; i < n; i++)
				if (!c[i].done && c[i].ah)
					ibcm_agent_send_raw(&ag[c[i].dev], c[i].ah, c[i].s.dreq);
			last_send = now_ms();
		}
		for (int d = 0; d < nd; d++) {
			struct ibcm_rx rx;

			if (!ag_open[d])
				continue;
			while (ibcm_agent_recv(&ag[d], &rx, 20) == 1) {
				if (rx.mad.hdr.attr_id == SR_CM_ATTR_DREP) {
					for (unsigned i = 0; i < n; i++) {
						if (!c[i].done && c[i].dev == d &&
						    rx.mad.drep.remote_comm_id == c[i].s.local_id) {
							c[i].done = true;
							left--;
						}
					}
				}
				if (rx.ah)
					ibv_destroy_ah(rx.ah);
			}
		}
	}
	say("%u of %u DREQ(s) answered in %llu ms", n - left, n,
	    (unsigned long long)(now_ms() - t0));
	for (unsigned i = 0; i < n; i++)
		if (c[i].ah)
			ibv_destroy_ah(c[i].ah);
	for (int d = 0; d < nd; d++) {
		if (ag_open[d])
			ibcm_agent_close(&ag[d]);
		if (ctx[d])
			ibv_close_device(ctx[d]);
	}
	ibv_free_device_list(list);
	free(c);
	return 0;
}
