/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: CM datagrams into the CM's state machines (src/cm/cm.c), not just its
 * decoder. librdmacm's sources are linked in with the verbs face and the engine; one listening
 * id (RDMA_PS_TCP on 127.0.0.1) lives for the whole run, and every input gets a fresh active
 * id that has sent its REQ to a fake peer (a UDP socket of the harness that never answers), so
 * messages can find an id in LISTEN, REQ_RCVD (the children the input's REQs create), REQ_SENT
 * and whatever the input moves them to. Datagrams are delivered by cm_rx_datagram, the CM
 * thread's own per-datagram path, as if they had come from the fake peer (or a stranger).
 *
 * Input: records [ctl][len][len bytes of CM datagram]. ctl bits:
 *   0x01  to the active id's socket (else the listener's)
 *   0x02  receiver's communication id := the active id's (or the newest child's, to the
 *         listener's socket)
 *   0x04  sender's communication id := 0x777 (the fake peer's)
 *   0x08  from a stranger's address, not the fake peer's
 *   0x10  port space RDMA_PS_TCP, receiver's port := the listener's
 *   0x20  after this record, accept... no: reject the newest child (rdma_reject), as an
 *         application would
 * Events are taken and acknowledged after every record; children are rejected and destroyed
 * at the end. What counts as a crash: ASan/UBSan, a hang (libFuzzer -timeout), a leak.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "cm/cm.h"
#include "cm/proto.h"

#define MAX_CHILDREN 64
#define FAKE_REMOTE_ID 0x777

static struct rdma_event_channel *ch;
static struct rdma_cm_id *listener;
static uint16_t listen_port;		/* host order */
static struct sockaddr_in peer, stranger;	/* the fake peer's CM address; another one */
static int peer_fd = -1;

static struct rdma_cm_id *active;
static struct rdma_cm_id *children[MAX_CHILDREN];
static int nchildren;

static void die(const char *what)
{
	fprintf(stderr, "fuzz_cm_state: setup failed: %s (errno %d)\n", what, errno);
	abort();
}

/* Takes every queued event; CONNECT_REQUEST children are kept for the end. Returns the type
 * of the last event for `want_id` (or -1). */
static int drain_events(void)
{
	struct rdma_cm_event *ev;
	int last = -1;

	while (rdma_get_cm_event(ch, &ev) == 0) {
		last = ev->event;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			if (nchildren < MAX_CHILDREN) {
				children[nchildren++] = ev->id;
			} else {
				rdma_reject(ev->id, NULL, 0);
				rdma_ack_cm_event(ev);
				rdma_destroy_id(ev->id);
				continue;
			}
		}
		rdma_ack_cm_event(ev);
	}
	return last;
}

static void wait_event(enum rdma_cm_event_type want)
{
	for (int i = 0; i < 200; i++) {
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };

		if (drain_events() == (int)want)
			return;
		poll(&p, 1, 10);
	}
	fprintf(stderr, "fuzz_cm_state: no event %s\n", rdma_event_str(want));
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_in any = { .sin_family = AF_INET };
	socklen_t l = sizeof(peer);

	setenv("SOFTRDMA_CM_WIRE", "private", 1);	/* the private protocol is what it fuzzes */
	setenv("SOFTRDMA_DIRECT", "0", 1);
	setenv("SOFTRDMA_LOG", "error", 1);
	setenv("SOFTRDMA_STATS_DIR", "/tmp", 0);
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(listener, (struct sockaddr *)&any) || rdma_listen(listener, 8))
		die("listener");
	listen_port = ntohs(rdma_get_src_port(listener));

	peer_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (peer_fd < 0 || bind(peer_fd, (struct sockaddr *)&any, sizeof(any)) ||
	    getsockname(peer_fd, (struct sockaddr *)&peer, &l))
		die("fake peer socket");
	l = 4096;
	setsockopt(peer_fd, SOL_SOCKET, SO_RCVBUF, &l, sizeof(l));
	stranger = peer;
	stranger.sin_port = htons((uint16_t)(ntohs(peer.sin_port) ^ 0x5a5a));
	return 0;
}

/* A fresh active id with its REQ sent to the fake peer (REQ_SENT). */
static void active_new(void)
{
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7, .qp_num = 0x123 };

	if (rdma_create_id(ch, &active, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(active, NULL, (struct sockaddr *)&peer, 1000))
		die("rdma_resolve_addr");
	wait_event(RDMA_CM_EVENT_ADDR_RESOLVED);
	if (rdma_resolve_route(active, 1000))
		die("rdma_resolve_route");
	wait_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
	if (rdma_connect(active, &p))
		die("rdma_connect");
}

static void deliver(uint8_t ctl, const uint8_t *d, size_t n)
{
	uint8_t buf[CM_MSG_MAX + 64];
	struct rdma_cm_id *via = (ctl & 0x01) ? active : listener;

	if (n > sizeof(buf))
		n = sizeof(buf);
	memcpy(buf, d, n);
	if (n >= CM_HDR_LEN) {
		if (ctl & 0x02) {
			struct rdma_cm_id *to = (ctl & 0x01) || !nchildren ? active
									    : children[nchildren - 1];
			uint32_t v = htonl(((struct cm_id *)to)->local_id);

			memcpy(buf + 8, &v, 4);
		}
		if (ctl & 0x04) {
			uint32_t v = htonl(FAKE_REMOTE_ID);

			memcpy(buf + 4, &v, 4);
		}
		if (ctl & 0x10) {
			uint16_t ps = htons(RDMA_PS_TCP), port = htons(listen_port);

			memcpy(buf + 12, &ps, 2);
			memcpy(buf + 16, &port, 2);
		}
	}
	cm_rx_datagram(via, (struct sockaddr *)((ctl & 0x08) ? &stranger : &peer), buf, n);
	drain_events();
	if ((ctl & 0x20) && nchildren)
		rdma_reject(children[nchildren - 1], NULL, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	uint8_t junk[512];

	active_new();
	for (int steps = 0; n >= 2 && steps < 32; steps++) {
		size_t l = d[1] < n - 2 ? d[1] : n - 2;

		deliver(d[0], d + 2, l);
		d += 2 + l;
		n -= 2 + l;
	}
	drain_events();
	for (int i = 0; i < nchildren; i++) {
		rdma_reject(children[i], NULL, 0);
		drain_events();
		if (rdma_destroy_id(children[i]))
			die("rdma_destroy_id (child)");
	}
	nchildren = 0;
	drain_events();
	if (rdma_destroy_id(active))
		die("rdma_destroy_id");
	drain_events();
	/* What the CM sent to the fake peer (REQs, RTUs, DREQs...): nobody reads it. */
	while (recv(peer_fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	return 0;
}
