/* SPDX-License-Identifier: MIT */
/*
 * Devices and the soft NIC.
 *
 * The device list is built once per process from the `netdev` parameter: one device per listed
 * interface (softrdma0, softrdma1, ...), or a single loopback device. A device's NIC (its UDP
 * socket, tables and progress thread) is created when the first context opens it and shared by
 * every context of the process, as one HCA is shared by every context on a real machine.
 *
 * The progress thread is what makes this a NIC rather than a library: an RDMA WRITE lands in a
 * passive target that never calls into softrdma. It sleeps in epoll on the socket, a wake-up
 * eventfd and a timeout that serves the retransmit/RNR timers.
 *
 * An application that polls an empty CQ drains the socket itself (parameter poll_rx), so a
 * ping-pong pays no thread hand-off. The progress thread then keeps out of its way without
 * ever leaving a packet waiting: the socket is registered one-shot; when a packet wakes the
 * thread while the application is in a polling loop, the thread gives it a short grace
 * (SR_APP_GRACE_NS) to take the packet, then takes whatever is still waiting (trylock: never
 * blocking a polling application) and re-arms. An application that polled its CQ for a send
 * completion but now waits for data elsewhere (ib_write_lat spins on memory) gets no grace. Without
 * this, every packet would wake a third thread that, on a 2-core machine, preempts one of the
 * two spinning ones and contends for the receive lock.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <ifaddrs.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "core/fd.h"
#include "core/log.h"
#include "core/param.h"
#include "core/sig.h"
#include "engine/engine.h"
#include "net/net.h"
#include "transport/transport.h"
#include "wire/hdr.h"
#include "wire/icrc.h"

static struct sr_device *devices[SR_MAX_DEVICES];
static int ndevices;
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

/* Marker stored where rdma-core's verbs_device keeps its ops pointer. */
static const char sr_verbs_ops_marker[] = "softrdma";

static struct sr_device *device_new(const char *netdev)
{
	struct sr_device *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->index = ndevices;
	d->verbs_ops = sr_verbs_ops_marker;
	d->ibdev.node_type = IBV_NODE_CA;
	d->ibdev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->ibdev.name, sizeof(d->ibdev.name), "softrdma%d", d->index);
	snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "uverbs%d", d->index);
	/* Outside `softrdma run`'s view (docs/view.md) these paths do not exist, and sysfs
	 * readers fail cleanly; in it they are the directories the view shows. */
	snprintf(d->ibdev.dev_path, sizeof(d->ibdev.dev_path),
		 "/sys/class/infiniband_verbs/uverbs%d", d->index);
	snprintf(d->ibdev.ibdev_path, sizeof(d->ibdev.ibdev_path),
		 "/sys/class/infiniband/softrdma%d", d->index);
	if (netdev)
		snprintf(d->netdev, sizeof(d->netdev), "%s", netdev);
	pthread_mutex_init(&d->lock, NULL);
	return d;
}

static void nic_atfork_child(void);
static void view_refresh(struct sr_device *d, const struct sr_nic *nic);

/* Param crc_engine: set once, before any device (and so any thread that sends) exists. The
 * engines' results are identical, so a thread that still saw the best one computes the same
 * CRCs. */
static void crc_engine_apply(void)
{
	const char *want = sr_params()->crc_engine;
	int e;

	if (!want || !*want)
		return;
	e = sr_crc32_engine_parse(want);
	if (e < 0) {
		sr_warn("SOFTRDMA_CRC_ENGINE=\"%s\" is not an engine (tables, pclmul, vpclmul256, "
			"vpclmul512); using the best the CPU has, %s", want,
			sr_crc32_engine_name(sr_crc32_engine(-1)));
		return;
	}
	if (sr_crc32_engine(e) != e)
		sr_info("crc_engine %s: this CPU has at most %s", want,
			sr_crc32_engine_name(sr_crc32_engine(-1)));
	else
		sr_info("crc_engine capped at %s", want);
}

static void devices_build(void)
{
	const char *list = sr_params()->netdev;

	pthread_atfork(NULL, NULL, nic_atfork_child);
	crc_engine_apply();
	if (!list || !*list) {
		devices[0] = device_new(NULL);
		ndevices = 1;
		return;
	}
	char *copy = strdup(list), *save = NULL;

	for (char *tok = strtok_r(copy, ",", &save); tok && ndevices < SR_MAX_DEVICES;
	     tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (*tok) {
			devices[ndevices] = device_new(tok);
			ndevices++;
		}
	}
	free(copy);
	if (!ndevices) {
		devices[0] = device_new(NULL);
		ndevices = 1;
	}
}

int sr_devices(struct sr_device ***list)
{
	pthread_once(&devices_once, devices_build);
	*list = devices;
	return ndevices;
}

/* ---- choosing the address ------------------------------------------------------------------ */
static unsigned if_mtu(const char *ifname)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unsigned mtu = 1500;

	if (fd < 0)
		return mtu;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	if (!ioctl(fd, SIOCGIFMTU, &ifr))
		mtu = (unsigned)ifr.ifr_mtu;
	close(fd);
	return mtu;
}

/* The first IPv4 address of ifname (else its first global IPv6 address). */
static int if_addr(const char *ifname, struct sr_addr *a)
{
	struct ifaddrs *ifa, *i;
	int ret = -ENODEV;

	if (getifaddrs(&ifa))
		return -errno;
	for (int pass = 0; pass < 2 && ret; pass++) {
		for (i = ifa; i; i = i->ifa_next) {
			if (!i->ifa_addr || strcmp(i->ifa_name, ifname))
				continue;
			if (pass == 0 && i->ifa_addr->sa_family == AF_INET) {
				sr_addr_from_sockaddr(a, i->ifa_addr);
				ret = 0;
				break;
			}
			if (pass == 1 && i->ifa_addr->sa_family == AF_INET6) {
				struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)i->ifa_addr;

				if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
					continue;
				sr_addr_from_sockaddr(a, i->ifa_addr);
				ret = 0;
				break;
			}
		}
	}
	freeifaddrs(ifa);
	return ret;
}

/* The interface that owns address a (for its MTU); "lo" when none matches. */
static void if_of_addr(const struct sr_addr *a, char *name, size_t len)
{
	struct ifaddrs *ifa, *i;

	snprintf(name, len, "lo");
	if (getifaddrs(&ifa))
		return;
	for (i = ifa; i; i = i->ifa_next) {
		struct sr_addr b;

		if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET &&
				     i->ifa_addr->sa_family != AF_INET6))
			continue;
		sr_addr_from_sockaddr(&b, i->ifa_addr);
		if (sr_addr_ip_eq(a, &b)) {
			snprintf(name, len, "%s", i->ifa_name);
			break;
		}
	}
	freeifaddrs(ifa);
}

static enum ibv_mtu mtu_enum_for(unsigned ifmtu)
{
	/* Room for IPv6 + UDP + the largest header set + ICRC, as rxe leaves 80 bytes. */
	long room = (long)ifmtu - 80;
	long cap = sr_params()->mtu;
	enum ibv_mtu m = IBV_MTU_256;

	for (enum ibv_mtu e = IBV_MTU_256; e <= IBV_MTU_4096; e++)
		if ((long)sr_mtu_bytes(e) <= room && (!cap || (long)sr_mtu_bytes(e) <= cap))
			m = e;
	return m;
}

/*
 * Large segments (docs/architecture.md): the payload of one packet between two softrdma peers
 * that agreed on it when rdma_cm connected them, instead of the IB path MTU's 4096 bytes. A
 * multiple of 4096 that fits the interface MTU with the same 80 bytes of headers; loopback
 * (MTU 65536) gives 61440. Below 8192 there is nothing to gain: none is offered.
 */
static uint32_t seg_for(unsigned ifmtu)
{
	long room = (long)ifmtu - 80, cap = sr_params()->seg_max;

	if (cap < room)
		room = cap;
	if (room > 65507 - 64)
		room = 65507 - 64;	/* a UDP datagram's payload, less BTH..ICRC (an lo MTU may be larger) */
	room -= room % 4096;
	return room >= 8192 && (sr_params()->mtu == 0 || sr_params()->mtu >= 4096) ? (uint32_t)room : 0;
}

static int nic_choose_addr(struct sr_nic *nic)
{
	struct sr_device *d = nic->dev;
	const struct sr_params *p = sr_params();
	char ifname[IF_NAMESIZE];
	int ret;

	memset(&nic->addr, 0, sizeof(nic->addr));
	if (d->index == 0 && p->addr && *p->addr) {
		if (inet_pton(AF_INET, p->addr, &nic->addr.v4) == 1) {
			nic->addr.family = AF_INET;
		} else if (inet_pton(AF_INET6, p->addr, &nic->addr.v6) == 1) {
			nic->addr.family = AF_INET6;
		} else {
			sr_err("%s: SOFTRDMA_ADDR=%s is not an IP address", d->ibdev.name, p->addr);
			return -EINVAL;
		}
		if_of_addr(&nic->addr, ifname, sizeof(ifname));
	} else if (d->netdev[0]) {
		ret = if_addr(d->netdev, &nic->addr);
		if (ret) {
			sr_err("%s: interface %s has no usable IP address", d->ibdev.name, d->netdev);
			return ret;
		}
		snprintf(ifname, sizeof(ifname), "%s", d->netdev);
	} else {
		nic->addr.family = AF_INET;
		nic->addr.v4.s_addr = htonl(INADDR_LOOPBACK);
		nic->addr_auto = true;
		snprintf(ifname, sizeof(ifname), "lo");
	}
	nic->ifmtu = if_mtu(ifname);
	nic->active_mtu = mtu_enum_for(nic->ifmtu);
	nic->seg_max = seg_for(nic->ifmtu);
	/* The in-band offer every packet carries (BTH resv6, wire/hdr.h). */
	nic->bth_mark = (uint8_t)(SR_BTH_SR_MARK |
				  (p->seg_inband ? (nic->seg_max / 4096) & SR_BTH_SR_UNITS : 0));
	nic->addr.port = d->index == 0 ? (uint16_t)p->port : SR_ROCEV2_UDP_PORT;
	return 0;
}

/* ---- timers ---------------------------------------------------------------------------------- */
/*
 * A QP whose timers all stopped (its sends were acknowledged) stays on the timer list this
 * long. Taken off at once, it went back on with its next send, which then had to wake the
 * thread (sleeping with no timer armed) for a timer half a millisecond away: in a ping-pong
 * between the namespaces a wake-up per message, each preempting a spinning application.
 */
#define SR_TIMER_KEEP_NS 10000000ull

/*
 * While an application polls, the thread's looks at the timers find its QP locks taken now and
 * then (it posts, it completes). Waiting for such a lock cost the application a futex wake-up
 * and, on 2 cores, a preemption of one of the spinning processes: a third of the thread's lock
 * waits in ib_write_lat between the namespaces. Then a QP whose lock is taken is left for the
 * thread's next look: it asks for one within SR_TIMER_BUSY_RETRY_NS, which the pass's
 * millisecond granularity rounds to 1 ms (a watching thread looks every rx_watch_us anyway).
 * A lock is waited for only when it has been taken at every look for SR_TIMER_BUSY_MAX_NS
 * (this QP's lock here; the receive lock in nic_thread, whose holder the timers wait for as
 * well). That was 1 ms, two looks in a row, and in a stream it was not enough: the sender's
 * application holds the receive lock and its QP's while it takes ACKs and sends what they
 * open (most of its time in a 64 KiB ib_write_bw between the namespaces), so two looks often
 * both found one taken, and the thread waited ~870 times a second for the QP's alone, each
 * wait a futex wake-up the application paid on unlock (6 % of its samples in the wake-up).
 * A lock taken at every look for long is held by an application working on it: taking ACKs
 * keeps the QP's timers from coming due (each counts from the last progress), and a QP
 * waiting for a lost packet leaves its lock free while its application polls; a preempted
 * holder of the receive lock receives nothing either way until it runs, and the thread
 * waits for it after the bound. So 20 ms: a timer is late by that much at most where every
 * look found its lock taken, and a stream no longer waits (ib_write_bw between the
 * namespaces, paired: 64 KiB 1.10x, 8 of 8 pairs faster; 1 MiB 1.11x, 7 of 8; 16 KiB 1.03x;
 * ib_write_lat unchanged; bench/README.md).
 */
#define SR_TIMER_BUSY_RETRY_NS 50000ull
#define SR_TIMER_BUSY_MAX_NS 20000000ull

/* Runs every armed timer; returns the time to wait in ms (-1: nothing armed). `gentle`: an
 * application polls, and a QP whose lock it holds is left for a later look (above).
 * *armed_at: when the first timer a QP armed is due (UINT64_MAX: none; the looks at idle QPs
 * kept on the list do not count). */
static int nic_run_timers(struct sr_nic *nic, bool gentle, uint64_t *armed_at)
{
	uint64_t now = sr_now_ns(), next = UINT64_MAX;

	*armed_at = UINT64_MAX;
	struct sr_qp **snap;
	uint32_t n;

	pthread_mutex_lock(&nic->timer_lock);
	n = nic->ntimer;
	if (!n) {
		atomic_store(&nic->sleeping, true);
		pthread_mutex_unlock(&nic->timer_lock);
		return -1;
	}
	snap = malloc(n * sizeof(*snap));
	if (!snap) {
		pthread_mutex_unlock(&nic->timer_lock);
		return 1;
	}
	for (uint32_t i = 0; i < n; i++) {
		snap[i] = nic->timer_qps[i];
		sr_qp_ref(snap[i]);
	}
	pthread_mutex_unlock(&nic->timer_lock);

	for (uint32_t i = 0; i < n; i++) {
		struct sr_qp *qp = snap[i];
		uint64_t t;

		if (pthread_mutex_trylock(&qp->lock)) {
			/* timer_busy_since is the thread's own field. */
			if (!qp->timer_busy_since)
				qp->timer_busy_since = now;
			if (gentle && now - qp->timer_busy_since < SR_TIMER_BUSY_MAX_NS) {
				if (now + SR_TIMER_BUSY_RETRY_NS < next)
					next = now + SR_TIMER_BUSY_RETRY_NS;
				sr_stat_inc(&nic->stats, SR_STAT_timer_busy_skips);
				sr_qp_put(qp);
				continue;
			}
			pthread_mutex_lock(&qp->lock);
		}
		qp->timer_busy_since = 0;
		t = sr_qp_timers(qp, now);
		if (t) {
			qp->timer_idle_since = 0;
			if (t < *armed_at)
				*armed_at = t;
		} else if (qp->on_timer_list &&
			   (qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQD) &&
			   (!qp->timer_idle_since || now - qp->timer_idle_since < SR_TIMER_KEEP_NS)) {
			/* Nothing armed, but the QP was busy a moment ago: it stays on the list
			 * (see SR_TIMER_KEEP_NS), and the thread looks at it again in time for
			 * any timer its next send may arm. */
			if (!qp->timer_idle_since)
				qp->timer_idle_since = now;
			t = now + sr_qp_timer_first_ns(qp);
		}
		if (!t && qp->on_timer_list) {
			sr_timer_disarm(qp);
		} else if (t && t < next) {
			next = t;
		}
		pthread_mutex_unlock(&qp->lock);
		sr_qp_put(qp);
	}
	free(snap);

	long tick = sr_params()->tick_ms > 0 ? sr_params()->tick_ms : 10;

	if (next == UINT64_MAX)
		return (int)tick;
	now = sr_now_ns();
	if (next <= now)
		return 0;
	uint64_t ms = (next - now + 999999) / 1000000;

	return (int)(ms < (uint64_t)tick ? ms : (uint64_t)tick);
}

/* ---- receive ----------------------------------------------------------------------------- */
#define SR_APP_GRACE_NS 20000ull
/* An application in a polling loop polls every microsecond or so; one whose last poll is older
 * than this is doing something else (ib_write_lat spins on memory once its send completed),
 * and waiting for it would only add the grace to every packet. */
#define SR_APP_ACTIVE_NS 2000ull
/* ... and one that polled within this is still around: it comes back to receive for itself,
 * and on 2 cores a thread spinning beside it (lingering, below; busy-poll mode) takes the CPU
 * it polls on. */
#define SR_LINGER_QUIET_NS 1000000ull

/*
 * Lingering (param rx_linger_us). In a stream that only the thread receives (ib_write_bw's
 * target never polls), every GSO datagram found the thread asleep, so the sender's sendmsg
 * paid for waking it (8 % of the sender's CPU in a profile of 1 MiB ib_write_bw between the
 * namespaces) and the thread for being scheduled in. After a drain that took packets, the
 * thread keeps receiving until the socket has been empty for rx_linger_us; 8 alternating
 * pairs of runs measured 2660 MiB/s median without, 2994 with 30 us. The same holds for the
 * passive side of a ping-pong (ib_read_lat's responder): its next request comes within
 * microseconds, and a wake-up costs more than the wait, on a virtual machine much more (an
 * idle vCPU halts, and waking it goes through the host). Not while an application polls (it
 * received in the last SR_LINGER_QUIET_NS): it receives for itself, and on 2 cores a
 * lingering thread would take the CPU it polls on (ib_read_bw's requester slowed down).
 */

/*
 * An application that polls an empty CQ drains the socket. One that polls between pieces of
 * other work (QEMU polls both CQs after each page it migrates: half a million polls per GiB)
 * would pay a recvmmsg for nearly every poll; after a drain that found nothing, the next one
 * waits poll_rx_gap_ns (the progress thread still takes what arrives if the application
 * stops polling). An application that does nothing but poll (it is back within
 * SR_APP_SPIN_NS of its last poll: perftest waiting for a completion) waits for nothing else,
 * and drains every time.
 */
#define SR_APP_SPIN_NS 500ull
/*
 * ... and after spinning this long without a packet, it yields the CPU once. On 2 cores the
 * peer it waits for may be queued on the same CPU behind it (two spinning applications of a
 * ping-pong), where it would wait for the end of this one's slice, or for the load balancer,
 * which leaves a task that ran within the last half millisecond where it is: 0.5-1 ms stalls
 * that only the peer's tail-loss probe ended. Alone on its CPU, a yield costs a system call.
 */
#define SR_APP_YIELD_NS 20000ull
/*
 * ... or this long finding the receive lock taken. Its holder is then the progress thread,
 * and if it is not running, it was woken on this CPU after waiting for a lock this
 * application held a moment (a CQ's, a QP's): the scheduler does not preempt a spinner for a
 * waking thread (EEVDF lets the current task finish its slice, 1-4 ms on 2 cores; the
 * thread's nice does not change that), and every poll would find the lock taken until the
 * next tick. Holders that run on the other CPU only cost this application a system call.
 * In busy-poll mode too (until 2026-11-29 it returned at once there, on the grounds that a
 * busy-polling thread steps aside by itself when it sees the poll): a spin preempted on this
 * CPU while it holds the lock sees nothing until it runs again. Busy ib_write_lat between the
 * namespaces, each process pinned to a CPU: 300-400 tail-loss probes per side and 100 000
 * round trips and a 99.9th percentile of 1.6-1.9 ms before, 23-102 and 0.2-0.3 ms after;
 * unpinned, 5-408 against 2-54 per side (bench/README.md).
 */
#define SR_APP_LOCKED_YIELD_NS 5000ull

/* The earlier of the ACK list's two deadlines, ack_due (deferred ACKs) and unasked_due (the
 * ACK of unasked message ends, resp.c ack_unasked), each loaded with order mo; 0: neither. */
static inline uint64_t ack_list_next(struct sr_nic *nic, memory_order mo)
{
	uint64_t d = atomic_load_explicit(&nic->ack_due, mo);
	uint64_t u = atomic_load_explicit(&nic->unasked_due, mo);

	return u && (!d || u < d) ? u : d;
}

/* Whether the ACK list holds an ACK due by now, or one not judged yet (rx_lock held): the
 * ACKs of unasked message ends (resp.c, ack_unasked) stay on the list across a ping-pong's
 * turns, and an empty poll need not look at them every time. */
static bool ack_list_due(struct sr_nic *nic, uint64_t now)
{
	uint64_t d = ack_list_next(nic, memory_order_relaxed);

	return !d || now >= d;
}

int sr_nic_poll(struct sr_nic *nic)
{
	return sr_nic_poll_at(nic, sr_now_ns());
}

int sr_nic_poll_at(struct sr_nic *nic, uint64_t now)
{
	bool spinning = now - atomic_load_explicit(&nic->app_poll_end_ns, memory_order_relaxed) <
			SR_APP_SPIN_NS;
	uint64_t since, after = SR_APP_YIELD_NS, end = 0;
	int n = 0;

	atomic_store_explicit(&nic->app_poll_ns, now, memory_order_relaxed);
	if (!spinning && now - atomic_load_explicit(&nic->rx_empty_ns, memory_order_relaxed) <
			 (uint64_t)sr_params()->poll_rx_gap_ns) {
		atomic_store_explicit(&nic->app_poll_end_ns, now, memory_order_relaxed);
		return 0;
	}
	/*
	 * A thread cancelled while it holds the receive lock would die with it, and the NIC would
	 * never receive again. Cancellation is not disabled here (the pair cost ~39 ns of each
	 * poll): nothing reachable under the lock is a cancellation point. The socket's calls are
	 * raw system calls (net/udp.c), and so are the doorbell's and a channel's eventfd writes
	 * (core/nic.c, core/cq.c), the log's write (core/log.c), the capture's writev
	 * (net/pcap.c), a FLUSH's msync (core/mr.c) and the wait of a remote invalidation
	 * (core/direct.c, key_wait); the same-host path's file look-ups disable cancellation
	 * themselves (transport/direct.c, peer_refresh). Keep it so: libc's read, write, close,
	 * open, sleeps, stdio and condition waits are cancellation points.
	 */
	if (!pthread_mutex_trylock(&nic->rx_lock)) {
		/* After a drain that found nothing, the next datagram is most likely alone (the
		 * answer of a ping-pong): ask for one, and the kernel does not look for a second
		 * (the empty look cost ~0.25 us of each answer's receive). Anything more waits
		 * for the next poll, which asks for a full batch. That one datagram's steps share
		 * one clock read (sr_drain_clock); a batch's, which may take long, read their own. */
		if (nic->app_rx_empty)
			sr_drain_clock = SR_CLOCK_UNREAD;
		n = sr_net_rx_upto(nic, nic->app_rx_empty ? 1 : SR_NET_RX_BATCH);
		nic->app_rx_empty = n <= 0;
		if (n > 0)
			sr_stat_add_excl(&nic->stats, SR_STAT_rx_app_datagrams, (uint64_t)n);
		if (n > 0 || (nic->ack_list && ack_list_due(nic, now)))
			sr_resp_flush_acks(nic);
		if (n <= 0)
			atomic_store_explicit(&nic->rx_empty_ns, now, memory_order_relaxed);
		else if (sr_drain_clock > SR_CLOCK_UNREAD)
			end = sr_drain_clock;	/* the end of this poll, to within the datagram */
		sr_drain_clock = 0;
		pthread_mutex_unlock(&nic->rx_lock);
	} else {
		after = SR_APP_LOCKED_YIELD_NS;
	}
	since = atomic_load_explicit(&nic->app_spin_ns, memory_order_relaxed);
	if (n > 0 || !spinning) {
		since = 0;
	} else if (!since) {
		since = now;
	} else if (now - since > after) {
		sched_yield();
		since = sr_now_ns();
	}
	atomic_store_explicit(&nic->app_spin_ns, since, memory_order_relaxed);
	atomic_store_explicit(&nic->app_poll_end_ns, end ? end : sr_now_ns(), memory_order_relaxed);
	return n;
}

void sr_nic_app_idle(struct sr_nic *nic, bool kick)
{
	if (atomic_exchange(&nic->app_poll_ns, 0) && kick)
		sr_nic_kick(nic);
}

/*
 * A completion channel's consumer takes what waits on the socket (param chan_rx, core/cq.c):
 * the receive path of a polling application, without counting as one (app_poll_ns: the
 * thread would give it a grace it does not use). Returns the datagrams taken.
 */
static int nic_chan_rx(struct sr_nic *nic, bool wait)
{
	/* Called with cancellation disabled and signals blocked (core/cq.c). */
	int got = 0, n;

	if (wait ? pthread_mutex_lock(&nic->rx_lock) : pthread_mutex_trylock(&nic->rx_lock))
		return 0;
	while (got < 64 && (n = sr_net_rx(nic)) > 0) {
		got += n;
		sr_resp_flush_acks(nic);
	}
	if (nic->ack_list)
		sr_resp_flush_acks(nic);
	pthread_mutex_unlock(&nic->rx_lock);
	if (got)
		sr_stat_add(&nic->stats, SR_STAT_rx_chan_datagrams, (uint64_t)got);
	return got;
}

/*
 * How the thread watches the socket: level-triggered one-shot (re-armed by EPOLL_CTL_MOD), or,
 * while a channel's blocking waits watch it too (nic->chan_waits), EPOLLEXCLUSIVE, which
 * cannot be one-shot: disarmed by EPOLL_CTL_DEL when it reports, armed by EPOLL_CTL_ADD, which
 * also puts the thread behind every channel in the socket's wait queue, so that a datagram
 * wakes a consumer asleep in ibv_get_cq_event rather than the thread (core/cq.c).
 */
enum { RX_REG_NONE, RX_REG_ONESHOT, RX_REG_EXCL };

static void rx_arm(struct sr_nic *nic, int *reg)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.fd = nic->fd };

	if (atomic_load_explicit(&nic->chan_waits, memory_order_relaxed) > 0) {
		if (*reg != RX_REG_NONE)
			epoll_ctl(nic->epfd, EPOLL_CTL_DEL, nic->fd, NULL);
		ev.events = EPOLLIN | EPOLLEXCLUSIVE;
		*reg = epoll_ctl(nic->epfd, EPOLL_CTL_ADD, nic->fd, &ev) ? RX_REG_NONE : RX_REG_EXCL;
		if (*reg == RX_REG_EXCL)
			return;
		ev.events = EPOLLIN | EPOLLONESHOT;
	}
	/* Level-triggered one-shot: data already waiting reports at once. */
	if (*reg == RX_REG_ONESHOT) {
		epoll_ctl(nic->epfd, EPOLL_CTL_MOD, nic->fd, &ev);
	} else {
		if (*reg == RX_REG_EXCL)
			epoll_ctl(nic->epfd, EPOLL_CTL_DEL, nic->fd, NULL);
		*reg = RX_REG_ONESHOT;
		epoll_ctl(nic->epfd, EPOLL_CTL_ADD, nic->fd, &ev);
	}
}

/* The socket reported: disarmed (a one-shot registration disarmed itself). */
static void rx_disarm(struct sr_nic *nic, int *reg)
{
	if (*reg == RX_REG_EXCL) {
		epoll_ctl(nic->epfd, EPOLL_CTL_DEL, nic->fd, NULL);
		*reg = RX_REG_NONE;
	}
}

/* epoll_wait with a nanosecond timeout (-1: none), falling back to milliseconds. */
static int wait_ns(int epfd, struct epoll_event *ev, int n, int64_t ns)
{
	static bool no_pwait2;
	struct timespec ts;
	int r;

	if (!no_pwait2) {
		ts.tv_sec = ns / 1000000000;
		ts.tv_nsec = ns % 1000000000;
		r = epoll_pwait2(epfd, ev, n, ns < 0 ? NULL : &ts, NULL);
		if (r >= 0 || errno != ENOSYS)
			return r;
		no_pwait2 = true;
	}
	return epoll_wait(epfd, ev, n, ns < 0 ? -1 : (int)((ns + 999999) / 1000000));
}

/*
 * A consumer polls a CQ in which completions pile up (SR_CQ_BACKLOG of them): the progress
 * thread is outrunning an application that is not running -- on 2 cores, typically because the
 * thread itself holds the CPU that application waits for (its peer spins on the other one).
 * Completions made that way reach the application in one burst long after the packets came,
 * and what it measures (perftest's receiver starts its clock at its first completion) is a
 * rate no data path has. So the thread pauses, up to backlog_pause_us: the packets wait in the
 * socket (as in a NIC's receive ring; RC senders wait for their ACKs), its CPU is free, and
 * the application, once it polls the CQ empty, receives the rest itself (poll_rx) at its own
 * pace. The pause ends when the backlog is taken, when half the socket's receive buffer is
 * used (UD and UC senders are not flow controlled: the next packets would be lost), or after
 * backlog_pause_us (an application that does not poll that CQ; on a loaded machine a runnable
 * application may wait several scheduler ticks of 4 ms, behind other busy tasks): then the
 * thread drains the socket and does not pause again until a backlogged CQ is polled. The
 * thread re-checks every millisecond, and a poll that takes the backlog wakes it at once.
 */
#define SR_PAUSE_STEP_NS 1000000ull

/* Whether an application polled for packets in the last `ns` (app_poll_ns; 0: never). */
static bool app_polled_within(struct sr_nic *nic, uint64_t now, uint64_t ns)
{
	uint64_t last = atomic_load_explicit(&nic->app_poll_ns, memory_order_relaxed);

	return last && now - last < ns;
}

static bool backlog_pending(struct sr_nic *nic)
{
	return sr_params()->backlog_pause_us > 0 && atomic_load(&nic->cq_backlog) > 0 &&
	       !atomic_load(&nic->backlog_off);
}

/*
 * After a batch, keeps receiving until the socket has been empty for `us`, so the next packet
 * is taken without a wake-up; returns the receives that found something. At most 10 ms in one
 * go, so timers still run and the thread re-arms; rx_lock held. Two users: busy-poll mode
 * (busy_poll_us > 0, opt-in, after every batch: on a 2-core machine with two spinning
 * applications this adds two more spinning threads, see docs/params.md), and lingering in a
 * stream (below).
 */
static uint64_t spin_rx(struct sr_nic *nic, long us)
{
	uint64_t now, idle_end, hard_end, got = 0;

	if (us <= 0)
		return 0;
	now = sr_now_ns();
	idle_end = now + (uint64_t)us * 1000;
	hard_end = now + 10 * 1000000ull;
	while (!atomic_load(&nic->stop) && !backlog_pending(nic)) {
		now = sr_now_ns();
		if (now >= idle_end || now >= hard_end)
			break;
		/* An application polling its CQ receives by itself: holding the receive lock,
		 * this spin would only take its CPU and leave it nothing to take. Not only one
		 * polling this very moment: one that polled in the last millisecond is between
		 * two polls (perftest looks at its buffer, posts), and on its CPU a spin that
		 * went on after taking its packet kept it from running until the scheduler's
		 * slice ended: in busy-poll mode, ib_write_lat between the namespaces lost a
		 * round trip to a tail-loss probe once in a thousand (99.9th percentile 1.1-1.7
		 * ms; 72-147 us after). */
		if (app_polled_within(nic, now, SR_LINGER_QUIET_NS))
			break;
		if (sr_net_rx(nic) > 0) {
			sr_resp_flush_acks(nic);
			idle_end = sr_now_ns() + (uint64_t)us * 1000;
			got++;
		}
	}
	/* Stopped by a backlog this spin made: a pause, counted as the receive loop counts it
	 * (test_rx_backlog waits for it; under load the loop took a few datagrams, the linger
	 * the rest). */
	if (got && backlog_pending(nic))
		sr_stat_inc(&nic->stats, SR_STAT_rx_pauses);
	return got;
}

/*
 * A linger that found nothing was a spin for nothing, and it is not free where the CPUs are
 * shared: with two ib_write_bw pairs between the namespaces (four processes, each side's
 * thread lingering on 2 cores), the receivers' lingers found a datagram in 255 of ~20,000
 * (a lone pair's: ~127 each) -- the datagrams they waited for come from a sender that
 * wanted the very CPU they spun on -- and the two pairs moved 0.8x of what one pair does.
 * So after lingers in a row that took nothing, the next drains go without one: 1, 3, 7, then
 * 15 each time (a wake-up each, against a 30 us spin), and a linger that takes anything ends
 * the back-off. A stream that lingers serve seldom meets an empty one, and recovers within 15
 * drains when it does; a peer that pauses longer than the linger (a slow ping-pong) stops
 * paying for it.
 * Returns the drains to skip.
 */
#define SR_LINGER_MISS_MAX 4
static unsigned linger_next(uint64_t took, unsigned *miss)
{
	if (took) {
		*miss = 0;
		return 0;
	}
	if (*miss < SR_LINGER_MISS_MAX)
		++*miss;
	return (1u << *miss) - 1;
}

/*
 * The progress thread's nice while it runs (nic_set_nice) and the process's own, to which a
 * busy-poll spin drops (this thread's; INT_MIN: the nice was not changed).
 */
static __thread int nice_thread = INT_MIN, nice_process;

static void busy_poll(struct sr_nic *nic)
{
	pid_t tid;
	bool drop = nice_thread != INT_MIN;

	if (sr_params()->busy_poll_us <= 0 ||
	    app_polled_within(nic, sr_now_ns(), SR_LINGER_QUIET_NS))
		return;		/* spin_rx would stop at once; the two setpriority calls need not */
	tid = (pid_t)syscall(SYS_gettid);

	/* A spin above the applications would starve them (on 2 cores, an application
	 * spinning on memory waits for the data this spin takes, then for the CPU the spin
	 * holds): it runs at the process's priority, and the thread is back above it for
	 * its next wake-up. */
	if (drop)
		(void)setpriority(PRIO_PROCESS, (id_t)tid, nice_process);
	(void)spin_rx(nic, sr_params()->busy_poll_us);
	if (drop)
		(void)setpriority(PRIO_PROCESS, (id_t)tid, nice_thread);
}

/*
 * The progress thread's priority (parameter nic_nice). On a 2-core machine where both
 * applications spin (ib_write_lat: one on memory, the other on its CQ), the thread a packet
 * wakes must preempt a spinner, and the scheduler lets the spinner finish its slice first:
 * 1-4 ms per packet instead of microseconds. A higher priority than the applications' makes the
 * wake-up preempt at once; the thread still sleeps whenever the socket is empty. Asks for the
 * parameter's value, else the best RLIMIT_NICE allows, else leaves it. Off by default since
 * the short slice below does the same for a ping-pong without the weight (nice -10 is 9.3
 * times an application's): on a CPU it shares, the raised thread took that much of it, and an
 * RTRS stream (whose event threads sleep and wake beside it) ran 1.17x faster without it;
 * and it needed a privilege an ordinary user lacks, where the slice needs none.
 */
static void nic_set_nice(struct sr_nic *nic)
{
	long want = sr_params()->nic_nice;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	struct rlimit rl;
	int cur;

	if (!want)
		return;
	errno = 0;
	cur = getpriority(PRIO_PROCESS, (id_t)tid);
	if (errno || want >= cur)
		return;
	if (want < -20)
		want = -20;
	nice_process = cur;
	if (!setpriority(PRIO_PROCESS, (id_t)tid, (int)want)) {
		nice_thread = (int)want;
		return;
	}
	/* Unprivileged: RLIMIT_NICE allows down to 20 - rlim_cur. */
	if (!getrlimit(RLIMIT_NICE, &rl) && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur > 0) {
		long floor = 20 - (long)rl.rlim_cur;
		int got = (int)(floor > want ? floor : want);

		if (floor < cur && !setpriority(PRIO_PROCESS, (id_t)tid, got)) {
			nice_thread = got;
			return;
		}
	}
	sr_info("%s: progress thread stays at nice %d (nic_nice %ld not permitted)",
		nic->dev->ibdev.name, cur, want);
}

/*
 * The progress thread's time slice (parameter nic_slice_us). What the raised nice above buys a
 * ping-pong is the wake-up preemption: EEVDF puts a woken task before the running one when its
 * virtual deadline is earlier, and a task's deadline is its slice away (in virtual time, so a
 * heavier one's is nearer). A short slice gives a woken thread that early deadline with the
 * process's own weight: the spinner is preempted as at nice -10, but on a CPU where both run
 * the thread gets no more of it than its share, and the load balancer does not weigh it as
 * nine applications. Linux 6.12+ (sched_runtime of a SCHED_OTHER task, no privilege needed,
 * clamped by the kernel to 0.1..100 ms); an older kernel refuses it or ignores it. Only for
 * SCHED_OTHER and SCHED_BATCH: under chrt -f the thread is real-time already.
 */
struct sr_sched_attr {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};

static void nic_set_slice(struct sr_nic *nic)
{
	long us = sr_params()->nic_slice_us;
	pid_t tid = (pid_t)syscall(SYS_gettid);
	struct sr_sched_attr a;

	if (us <= 0)
		return;
	memset(&a, 0, sizeof(a));
	if (syscall(SYS_sched_getattr, tid, &a, sizeof(a), 0) || (a.policy != SCHED_OTHER &&
								   a.policy != SCHED_BATCH))
		return;
	a.size = sizeof(a);
	a.flags = 0;
	a.runtime = (uint64_t)us * 1000;
	if (syscall(SYS_sched_setattr, tid, &a, 0))
		sr_info("%s: progress thread keeps the kernel's time slice (nic_slice_us %ld: %s)",
			nic->dev->ibdev.name, us, strerror(errno));
}

/*
 * The watch grows (parameter rx_watch_max_us). Each look of a watch costs a wake-up (about
 * 20 us of CPU on the 2-core VM, and a preemption of a polling application), and an MPI rank
 * polls for as long as it runs: every look finds it in its polling loop, and the thread woke
 * 5,000 times a second for nothing. So after SR_WATCH_GROW_LOOKS looks in a row that found
 * nothing to do (the application in its polling loop, or an empty socket), the interval
 * doubles, up to rx_watch_max_us; a look that takes packets, or a deferred ACK the thread
 * had to send, puts it back to rx_watch_us and keeps it there for SR_WATCH_HOLD_NS: an
 * application that ever leaves packets waiting (ib_write_lat spins on memory once its send
 * completed) gets the short watch. What a grown watch costs is the watch's price, longer: a
 * packet that comes while the application waits elsewhere waits for the next look, and a
 * deferred ACK for the application's next poll or the thread's next look (watch_slack_ns, no
 * kick: resp.c). Returns the interval (ns; 0: no watch).
 */
#define SR_WATCH_GROW_LOOKS 2
#define SR_WATCH_HOLD_NS 2000000ull
enum {
	SR_WATCH_IDLE,	/* the look found nothing to do */
	SR_WATCH_BUSY,	/* it found the receive lock taken: tells nothing */
	SR_WATCH_TOOK,	/* it took packets, or sent a deferred ACK */
	SR_WATCH_END,	/* the watch ended */
	SR_WATCH_TOOK_END,	/* it ended taking packets the application left */
};

static uint64_t watch_look(struct sr_nic *nic, uint64_t base, uint64_t cur, int look, int *idle,
			   uint64_t *hold)
{
	uint64_t max = (uint64_t)sr_params()->rx_watch_max_us * 1000;

	if (!cur || cur < base)
		cur = base;
	if (look == SR_WATCH_TOOK || look == SR_WATCH_TOOK_END) {
		cur = look == SR_WATCH_TOOK ? base : 0;
		*idle = 0;
		*hold = sr_now_ns() + SR_WATCH_HOLD_NS;
	} else if (look == SR_WATCH_END) {
		cur = 0;
		*idle = 0;
	} else if (look == SR_WATCH_IDLE && ++*idle >= SR_WATCH_GROW_LOOKS && max > cur &&
		   sr_now_ns() >= *hold) {
		cur = cur * 2 < max ? cur * 2 : max;
		*idle = 0;
	}
	atomic_store_explicit(&nic->watch_slack_ns, cur > base ? cur : 0, memory_order_relaxed);
	return cur;
}

/* The drain before lone datagrams go by recvfrom (sr_net_rx_plain_look; rx_lock held): true
 * when it emptied the socket. Not when the CQs' backlog asks for a pause: the application is
 * behind, and its datagrams do not come alone. */
static bool plain_drain(struct sr_nic *nic)
{
	int got = 0, n;

	while ((n = sr_net_rx(nic)) > 0) {
		sr_resp_flush_acks(nic);
		got += n;
		if (got >= 64 || backlog_pending(nic))
			return false;
	}
	return errno == EAGAIN || errno == EWOULDBLOCK;	/* the receive's own */
}

static void *nic_thread(void *arg)
{
	struct sr_nic *nic = arg;
	struct epoll_event ev[4];
	bool armed = true, grace = false;
	int rx_reg = RX_REG_ONESHOT;	/* as nic_create registered it */
	int64_t defer_ns = sr_params()->ack_defer_us * 1000;
	int64_t timeout = 0;
	uint64_t paused_since = 0, rx_busy_since = 0, timer_at = UINT64_MAX;
	uint64_t due_wake = UINT64_MAX;	/* when the last sleep was to end (timeout) */
	/* The watch's current interval (0: rx_watch_us), its looks in a row that found
	 * nothing to do, and until when it may not grow (see watch_look). */
	uint64_t watch_cur = 0, watch_hold = 0;
	int watch_idle = 0;
	/* Lingers in a row that found nothing, and drains left to go without one (linger_next). */
	unsigned linger_miss = 0, linger_skip = 0;

	/* Its timeouts are microseconds (the grace, the pause steps): a normal thread's 50 us
	 * timer slack would stretch a 20 us grace to 70. */
	prctl(PR_SET_TIMERSLACK, 1000UL);
	nic_set_nice(nic);
	nic_set_slice(nic);
	while (!atomic_load(&nic->stop)) {
		int n;

		/* Deferred ACKs (resp.c): a polling application sends those due itself; the
		 * thread looks for one that stopped polling, every ack_defer_us, or every
		 * SR_ACK_LOOK_POLLING times that while the application polls. So an ACK waits at
		 * most SR_ACK_LOOK_POLLING + 1 times ack_defer_us, and a ping-pong that defers one
		 * per message does not wake the thread per message (each wake-up preempts a
		 * spinning application). wake_at is published before ack_due is read, and a
		 * receiver that defers one stores ack_due before it reads wake_at: one of the two
		 * sees the other, so no deadline is slept through. In a ping-pong every answer
		 * takes its ACK with it and leaves none pending, so the thread keeps looking
		 * for SR_ACK_LOOK_KEEP_NS after the last deferral: else the next one would find
		 * it asleep for longer and wake it (a wake-up per message again). */
		uint64_t now = sr_now_ns(), due, udue;

		atomic_store(&nic->wake_at, timeout < 0 ? UINT64_MAX : now + (uint64_t)timeout);
		due = atomic_load(&nic->ack_due);
		/* A watch that grew (watch_slack_ns) has the application sending due ACKs
		 * itself: with none pending, it does not keep looking for the next one. */
		if (due || (now - atomic_load_explicit(&nic->ack_deferred_ns, memory_order_relaxed) <
				    SR_ACK_LOOK_KEEP_NS &&
			    !atomic_load_explicit(&nic->watch_slack_ns, memory_order_relaxed))) {
			int64_t left = due > now ? (int64_t)(due - now) : 0;
			int64_t look = defer_ns;

			/* With none pending, the next deferral is due ack_defer_us after it is
			 * made, and the thread looks within SR_ACK_LOOK_POLLING times that of its
			 * due: the same bound, without waking every ack_defer_us. An MPI rank
			 * that yields between polls (mpi_yield_when_idle) seldom polled within
			 * ack_defer_us, and its thread woke every 50 us, 10-20 thousand times a
			 * second, for ACKs its answers had already taken along. */
			/* With one pending, a grown watch's interval when longer (resp.c keeps
			 * the same bound; with none pending the thread comes here only without a
			 * grown watch, and the look is SR_ACK_LOOK_POLLING x ack_defer_us): in a
			 * ping-pong an ACK is pending half the time, and looking every
			 * SR_ACK_LOOK_POLLING x ack_defer_us for it woke the thread 4,000 times a
			 * second, each wake-up a preemption of the application. */
			if (!due || app_polled_within(nic, now, (uint64_t)defer_ns))
				look = (int64_t)sr_ack_look_ns(nic, (uint64_t)defer_ns);
			if (left < look)
				left = look;
			if (timeout < 0 || left < timeout) {
				timeout = left;
				atomic_store(&nic->wake_at, now + (uint64_t)left);
			}
		}
		/* The ACK of unasked message ends (resp.c, ack_unasked) is looked for at the
		 * cadence of a ping-pong without deferral, or of a grown watch (the application
		 * polls and sends it itself): it stays pending across the turns, and looking
		 * every ack_defer_us for it tripled the thread's wake-ups. */
		udue = atomic_load(&nic->unasked_due);
		if (udue) {
			int64_t left = udue > now ? (int64_t)(udue - now) : 0;
			int64_t look = (int64_t)sr_ack_look_ns(nic, (uint64_t)defer_ns);

			if (left < look)
				left = look;
			if (timeout < 0 || left < timeout) {
				timeout = left;
				atomic_store(&nic->wake_at, now + (uint64_t)left);
			}
		}
		due_wake = timeout < 0 ? UINT64_MAX : now + (uint64_t)timeout;
		n = wait_ns(nic->epfd, ev, 4, timeout);
		atomic_store(&nic->wake_at, 0);	/* awake: reads ack_due again before it sleeps */
		if (timeout)
			sr_stat_inc(&nic->stats, SR_STAT_thread_wakes);

		bool rx_event = false;

		for (int i = 0; i < n; i++) {
			if (ev[i].data.fd == nic->fd) {
				armed = false;	/* one-shot: disarmed by this report */
				rx_disarm(nic, &rx_reg);
				rx_event = true;
				sr_stat_inc(&nic->stats, SR_STAT_rx_thread_wakes);
			} else if (ev[i].data.fd == nic->evfd) {
				uint64_t v;

				(void)!read(nic->evfd, &v, sizeof(v));
			} else {
				sr_mcast_poll(nic, ev[i].data.fd);	/* a multicast group */
			}
		}
		/* A channel's blocking waits began to watch the socket (core/cq.c kicked): the
		 * thread's registration becomes exclusive now, not at its next re-arm. */
		if (armed && rx_reg == RX_REG_ONESHOT &&
		    atomic_load_explicit(&nic->chan_waits, memory_order_relaxed) > 0)
			rx_arm(nic, &rx_reg);
		timeout = -1;
		if (!armed && (paused_since || backlog_pending(nic))) {
			uint64_t now = sr_now_ns();
			uint64_t max = (uint64_t)sr_params()->backlog_pause_us * 1000;

			if (!paused_since) {
				paused_since = now;
				atomic_store(&nic->rx_paused, true);
			}
			if (!backlog_pending(nic)) {
				paused_since = 0;	/* taken: receive again */
			} else if (now - paused_since < max && !sr_net_rx_half_full(nic)) {
				uint64_t left = paused_since + max - now;

				timeout = (int64_t)(left < SR_PAUSE_STEP_NS ? left : SR_PAUSE_STEP_NS);
				/* A QP's retransmission timer is due: what it would resend may be
				 * acknowledged by a packet held in this socket. One receive first
				 * (the pause goes on), so the timers see that ACK. */
				if (now >= timer_at && !pthread_mutex_trylock(&nic->rx_lock)) {
					int got = sr_net_rx(nic);

					if (got > 0) {
						sr_resp_flush_acks(nic);
						sr_stat_add(&nic->stats, SR_STAT_rx_pause_timer_takes,
							    (uint64_t)got);
					}
					pthread_mutex_unlock(&nic->rx_lock);
				}
				goto timers;	/* the socket stays disarmed */
			} else {
				sr_stat_inc(&nic->stats, SR_STAT_rx_pause_expired);
				atomic_store(&nic->backlog_off, true);
				paused_since = 0;
			}
			if (!paused_since)
				atomic_store(&nic->rx_paused, false);
		}
		if (!armed) {
			uint64_t last = atomic_load_explicit(&nic->app_poll_ns, memory_order_relaxed);
			uint64_t now = sr_now_ns();
			uint64_t watch_ns = (uint64_t)sr_params()->rx_watch_us * 1000;
			/* The watch (rx_watch_us): the application polled a moment ago, and no
			 * consumer may be asleep on a completion channel (they wait in poll() on
			 * its fd as often as in ibv_get_cq_event, unseen) -- unless the polling
			 * went on for rx_watch_us after the last CQ was armed. A consumer that arms
			 * its CQ, polls once more (the usual order) and sleeps stops polling at
			 * once; a poller that keeps going long after an arm is another thread
			 * (UCX's async thread sleeps on its UD CQ's channel for as long as the
			 * process lives, while the application polls its RC CQs), and its polls
			 * receive for the sleeper too. rx_watching is stored before cq_notify and
			 * cq_arm_ns are read, and sr_cq_arm stores those before it reads
			 * rx_watching: one of the two sees the other, so an arm either ends the
			 * watch here or kicks the thread out of it. */
			bool watching = watch_ns && last && now - last < watch_ns;

			if (watching) {
				atomic_store(&nic->rx_watching, true);
				watching = !atomic_load(&nic->cq_notify) ||
					   last >= atomic_load(&nic->cq_arm_ns) + watch_ns;
			}

			/* The grace is for a datagram that woke the thread. A look of the watch (a
			 * timed wake-up, the socket unarmed) learns nothing by waiting: with the
			 * application in its polling loop it leaves the socket to it at once
			 * (app_rx below) and looks again in rx_watch_us. With a grace it woke
			 * twice per look, the second time 20 us after the first: in a UCX
			 * ping-pong (ucx_perftest tag_lat over rc_verbs) every look did. */
			if (!grace && (rx_event || !watching) && last && now - last < SR_APP_ACTIVE_NS) {
				/* The application is polling: let it take the packet. */
				grace = true;
				timeout = (int64_t)(last + SR_APP_GRACE_NS - now);
			} else {
				/* A polling application may hold the receive lock: then it is
				 * receiving, and leaving is enough. If it is not polling, a holder is
				 * one that was preempted mid-batch: wait for it rather than spin
				 * beside it (on 2 cores the spin would take the CPU the holder
				 * needs). While watching, the thread takes only what the application
				 * is not about to take (it is not in its polling loop just now), and
				 * only if the lock is free: waiting for an application that holds it
				 * cost that application a futex wake-up and, on 2 cores, a preemption
				 * of a spinning process. The timers then wait too (rx_busy_since), so
				 * a tail-loss probe does not leave while the answer to it waits in the
				 * socket behind a preempted holder; for SR_TIMER_BUSY_MAX_NS at most,
				 * then the thread waits for the lock. */
				bool polling = grace;
				/* In its polling loop when the look was due: the thread's own
				 * wake-up (a context switch of several microseconds on this VM, and
				 * on 2 cores often a preemption of that very application) must not
				 * make a polling application look idle. Judged from `now`, the
				 * thread took the packets of the application it had just preempted:
				 * at a timed wake-up it judges from the time it was due. In its loop
				 * means a poll within SR_APP_GRACE_NS of it, not SR_APP_ACTIVE_NS: a
				 * ping-pong's turn between two polls (perftest posts its answer, looks
				 * at its buffer) takes a few microseconds, and a look that fell into
				 * one took the packet the application was about to take, and held the
				 * watch short for SR_WATCH_HOLD_NS (ib_write_lat between the
				 * namespaces: 9 % of the looks, about half the thread's wake-ups). */
				uint64_t ref = !rx_event && due_wake < now ? due_wake : now;
				bool app_rx = watching && last + SR_APP_GRACE_NS > ref;
				bool wait = !polling && (!watching || (rx_busy_since &&
					    now - rx_busy_since >= SR_TIMER_BUSY_MAX_NS));
				int look = SR_WATCH_BUSY;

				grace = false;
				if (app_rx) {
					rx_busy_since = 0;
					look = SR_WATCH_IDLE;
				} else if (wait ? pthread_mutex_lock(&nic->rx_lock)
						: pthread_mutex_trylock(&nic->rx_lock)) {
					if (!watching)
						rx_busy_since = 0;
					else if (!rx_busy_since)
						rx_busy_since = now;
				} else {
					int got = 0;

					while (got < 64 && sr_net_rx(nic) > 0) {
						got++;
						sr_resp_flush_acks(nic);
						if (backlog_pending(nic)) {
							sr_stat_inc(&nic->stats, SR_STAT_rx_pauses);
							break;
						}
					}
					if (watching)
						sr_stat_add(&nic->stats, SR_STAT_rx_watch_takes, (uint64_t)got);
					look = got ? SR_WATCH_TOOK : SR_WATCH_IDLE;
					if (sr_params()->rx_linger_us > 0 && sr_params()->busy_poll_us <= 0 &&
					    !backlog_pending(nic) && got > 0 &&
					    !app_polled_within(nic, sr_now_ns(), SR_LINGER_QUIET_NS)) {
						if (linger_skip) {
							linger_skip--;
							sr_stat_inc(&nic->stats, SR_STAT_rx_linger_skips);
						} else {
							uint64_t took = spin_rx(nic, sr_params()->rx_linger_us);

							sr_stat_add(&nic->stats, SR_STAT_rx_linger_takes, took);
							linger_skip = linger_next(took, &linger_miss);
						}
					}
					/* Not beside an application that polls: it receives itself,
					 * and on 2 cores the spin would take its CPU. */
					if (!watching)
						busy_poll(nic);
					pthread_mutex_unlock(&nic->rx_lock);
					rx_busy_since = 0;
				}
				if (watching) {
					watch_cur = watch_look(nic, watch_ns, watch_cur, look,
							       &watch_idle, &watch_hold);
					timeout = (int64_t)watch_cur;	/* the socket stays unarmed */
					/* And out of the epoll set: a registration, even a
					 * disarmed one-shot, is a waiter in the socket's wait
					 * queue, and the kernel calls it for every datagram
					 * received (sock_def_readable) and every one sent once
					 * it is freed (sock_wfree's write-space wake-up): two
					 * locked wake-up calls with interrupts off, inside the
					 * sender's sendmsg. Between the namespaces (the
					 * receiver's softirq runs in the sender's sendmsg)
					 * that sendmsg took ~1.9 us against the probe's
					 * ~1.4; out of the set, ~1.5. The watch's end adds
					 * it back (rx_arm). */
					if (rx_reg == RX_REG_ONESHOT) {
						epoll_ctl(nic->epfd, EPOLL_CTL_DEL, nic->fd, NULL);
						rx_reg = RX_REG_NONE;
					}
					sr_net_rx_plain_look(nic, true, plain_drain);
				} else {
					sr_net_rx_plain_look(nic, false, plain_drain);
					atomic_store(&nic->rx_watching, false);
					/* A watch that ends taking packets: the application
					 * stopped polling with packets on their way to it. */
					watch_cur = watch_look(nic, watch_ns, watch_cur,
							       watch_cur && look == SR_WATCH_TOOK ?
							       SR_WATCH_TOOK_END : SR_WATCH_END,
							       &watch_idle, &watch_hold);
					rx_arm(nic, &rx_reg);
					armed = true;
				}
			}
		}
timers:;
		due = ack_list_next(nic, memory_order_seq_cst);
		if (due && sr_now_ns() >= due && !pthread_mutex_trylock(&nic->rx_lock)) {
			sr_resp_flush_acks(nic);	/* else the holder flushes after its receive */
			pthread_mutex_unlock(&nic->rx_lock);
			/* An ACK the application left to the thread: the watch looks often again
			 * (its growth is for applications that send theirs themselves). */
			if (watch_cur) {
				watch_cur = watch_look(nic, (uint64_t)sr_params()->rx_watch_us * 1000,
						       watch_cur, SR_WATCH_TOOK, &watch_idle,
						       &watch_hold);
				if (timeout > (int64_t)watch_cur)
					timeout = (int64_t)watch_cur;
			}
		}
		/* Not while a watch found the receive lock taken (above). */
		now = sr_now_ns();
		if (rx_busy_since && now - rx_busy_since < SR_TIMER_BUSY_MAX_NS)
			continue;
		/* Gentle while an application polls, in the sense lingering uses. */
		int t = nic_run_timers(nic, app_polled_within(nic, now, SR_LINGER_QUIET_NS),
				       &timer_at);

		if (t >= 0 && (timeout < 0 || (int64_t)t * 1000000 < timeout))
			timeout = (int64_t)t * 1000000;
		/* Fault injection's held packets (reorder, the delay line): */
		int64_t held = sr_net_tick(nic);

		if (held >= 0 && (timeout < 0 || held < timeout))
			timeout = held;
	}
	return NULL;
}

/* ---- NIC lifecycle ----------------------------------------------------------------------- */
/* A QP being destroyed (state RESET, no lock held) may still be on the responder's ACK list,
 * which holds a reference until the list's next flush drops it. An ACK owed only to message
 * ends that did not ask (resp.c, ack_unasked) keeps the list from being due for up to 2 x
 * ack_defer_us, and with no progress thread (the fuzz harness) nothing would flush it: so
 * ibv_destroy_qp flushes it itself. The flush sends what is due of the other QPs and keeps
 * the rest, as a receiver's would. */
static void nic_qp_leave_acks(struct sr_qp *qp)
{
	struct sr_nic *nic = qp->nic;

	pthread_mutex_lock(&nic->rx_lock);
	if (qp->resp.on_ack_list)
		sr_resp_flush_acks(nic);
	pthread_mutex_unlock(&nic->rx_lock);
}

/* What core and net call when an object changes or a packet comes (core/core.h): the
 * transport's roles and multicast delivery. */
static const struct sr_engine_hooks engine_hooks = {
	.rcv = sr_rcv,
	.mcast_rcv = sr_mcast_rcv,
	.qp_rts = sr_req_progress,
	.qp_ack_now = sr_resp_ack_now,
	.qp_reset = sr_transport_reset,
	.qp_final_ack = sr_resp_final_ack,
	.qp_leave_acks = nic_qp_leave_acks,
	.qp_detach_mcast = sr_mcast_detach_all,
	.chan_rx = nic_chan_rx,
};

static void nic_destroy(struct sr_nic *nic)
{
	if (nic->thread) {
		atomic_store(&nic->stop, true);
		sr_nic_kick(nic);
		pthread_join(nic->thread, NULL);
	}
	sr_direct_close(nic);
	sr_net_close(nic);
	if (nic->epfd >= 0)
		close(nic->epfd);
	if (nic->evfd >= 0)
		close(nic->evfd);
	for (uint32_t i = 0; i < nic->ntimer; i++)
		sr_qp_put(nic->timer_qps[i]);
	free(nic->timer_qps);
	sr_stats_close(&nic->stats, nic->dev->ibdev.name);
	sr_table_destroy(&nic->qps);
	sr_table_destroy(&nic->keys);
	free(nic);
}

static int nic_create(struct sr_device *d, struct sr_nic **out)
{
	const struct sr_params *p = sr_params();
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT };
	struct sr_nic *nic = calloc(1, sizeof(*nic));
	char ident[80];
	int ret;

	if (!nic)
		return -ENOMEM;
	nic->dev = d;
	nic->engine = &engine_hooks;
	nic->fd = nic->epfd = nic->evfd = -1;
	nic->icrc_check = p->icrc_check;
	nic->icrc_id_strict = p->icrc_id_strict;
	nic->max_inflight = p->max_inflight > 1 ? (uint32_t)p->max_inflight : 2;
	nic->ack_every = p->ack_every > 0 ? (uint32_t)p->ack_every : 1;
	nic->ack_lazy = p->ack_lazy > 1 && p->ack_defer_us > 0 ? (uint32_t)p->ack_lazy : 0;
	nic->ack_ride = p->ack_ride;
	pthread_mutex_init(&nic->rx_lock, NULL);
	pthread_mutex_init(&nic->timer_lock, NULL);
	pthread_mutex_init(&nic->mcast_lock, NULL);
	ret = sr_table_init(&nic->qps, p->max_qp > 16 ? (uint32_t)p->max_qp : 16);
	if (!ret)
		ret = sr_table_init(&nic->keys, p->max_mr > 16 ? (uint32_t)p->max_mr : 16);
	if (ret)
		goto fail;
	ret = nic_choose_addr(nic);
	if (ret)
		goto fail;
	ret = sr_net_open(nic);	/* binds; may move the port; sets up fault injection and pcap */
	if (ret)
		goto fail;
	sr_gid_from_addr(&nic->gid, &nic->addr);
	sr_direct_open(nic);
	/* Node GUID: 0x02 (locally administered) + "SR" + port + the low IP bytes. */
	{
		uint8_t g[8] = { 0x02, 'S', 'R', (uint8_t)(nic->addr.port >> 8),
				 (uint8_t)nic->addr.port };
		const uint8_t *ip = nic->addr.family == AF_INET ? nic->addr.raw : nic->addr.raw + 13;

		memcpy(&g[5], ip + 1, 3);
		memcpy(&nic->guid, g, 8);
	}
	sr_stats_open(&nic->stats, d->ibdev.name, sr_addr_str(&nic->addr, ident, sizeof(ident)));

	nic->evfd = sr_fd_high(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	nic->epfd = sr_fd_high(epoll_create1(EPOLL_CLOEXEC));
	if (nic->evfd < 0 || nic->epfd < 0) {
		ret = -errno;
		goto fail;
	}
	ev.data.fd = nic->fd;
	epoll_ctl(nic->epfd, EPOLL_CTL_ADD, nic->fd, &ev);
	ev.events = EPOLLIN;
	ev.data.fd = nic->evfd;
	epoll_ctl(nic->epfd, EPOLL_CTL_ADD, nic->evfd, &ev);
	/* Signals stay with the application's threads (core/sig.h). */
	ret = sr_thread_create(&nic->thread, NULL, nic_thread, nic);
	if (ret) {
		nic->thread = 0;
		ret = -ret;
		goto fail;
	}
	view_refresh(d, nic);
	sr_info("%s: up at %s, MTU %u (RoCE %u, segments of %u to softrdma peers)", d->ibdev.name,
		ident, nic->ifmtu, sr_mtu_bytes(nic->active_mtu), nic->seg_max);
	*out = nic;
	return 0;
fail:
	nic_destroy(nic);
	return ret;
}

/* Under `softrdma run`'s device view (tools/view.c, docs/view.md), the sysfs files naming
 * what is this process's own (its GID, its node GUID) are rewritten when its NIC comes up, so
 * they agree with ibv_query_gid and ibv_query_device. Best effort: the view is the program's
 * own tmpfs; a process that cannot write it (another user's view) leaves it as it is. */
static void view_put(const char *dir, const char *name, const char *text)
{
	char path[512], tmp[560];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	f = fopen(tmp, "we");
	if (!f)
		return;
	fputs(text, f);
	if (fclose(f) || rename(tmp, path))
		unlink(tmp);
}

static void gid_line(char *text, size_t size, const uint8_t *g)
{
	snprintf(text, size,
		 "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x\n", g[0],
		 g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
		 g[14], g[15]);
}

/* The device's directory of the view into dir, or false when there is no view to write. */
static bool view_dir(const struct sr_device *d, char *dir, size_t size)
{
	const char *v = getenv("SOFTRDMA_VIEW");

	if (!v || strcmp(v, "1"))
		return false;
	snprintf(dir, size, "/sys/class/infiniband/%s", d->ibdev.name);
	return !access(dir, W_OK);
}

/* Removes the GID entries from index n on (gids/N with its type and netdev): the table is n
 * long now. The view never holds more than a few (gid_tbl_len is 1 or 2). */
static void view_trim(const char *dir, int n)
{
	char path[460];

	for (int i = n; i < 8; i++) {
		snprintf(path, sizeof(path), "%s/ports/1/gids/%d", dir, i);
		if (unlink(path))
			break;
		snprintf(path, sizeof(path), "%s/ports/1/gid_attrs/types/%d", dir, i);
		unlink(path);
		snprintf(path, sizeof(path), "%s/ports/1/gid_attrs/ndevs/%d", dir, i);
		unlink(path);
	}
}

/* The port GID (gids/1 with its type and netdev) and the LID belong to one process of the
 * program: the last one that opened the device on another UDP port than 4791. Its pid is in
 * ports/1/.port_owner (a file of the view only, never replaced), and every change to those
 * entries is made holding an flock on it, so that a process does not take away another's
 * entries between reading and removing them. Returns the file's fd, locked, or -1. */
static int view_owner_lock(const char *dir)
{
	char path[460];
	int fd;

	snprintf(path, sizeof(path), "%s/ports/1/.port_owner", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX)) {
		if (errno != EINTR) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

/* The pid the owner file names, or 0 (none). */
static pid_t view_owner_read(int fd)
{
	char text[32];
	ssize_t n = pread(fd, text, sizeof(text) - 1, 0);

	if (n <= 0)
		return 0;
	text[n] = '\0';
	return (pid_t)strtol(text, NULL, 10);
}

static void view_owner_write(int fd, pid_t pid)
{
	char text[32];
	int n = pid ? snprintf(text, sizeof(text), "%d\n", (int)pid) : 0;

	if (ftruncate(fd, 0) == 0 && n > 0 && pwrite(fd, text, (size_t)n, 0) != n)
		(void)ftruncate(fd, 0);
}

/* Whether the process pid still runs. All processes of the program share `softrdma run`'s
 * pid namespace, so the pid that wrote the file names the same process here. A process killed
 * but not yet reaped by its parent counts as running until it is. */
static bool view_pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

static void view_refresh(struct sr_device *d, const struct sr_nic *nic)
{
	char dir[400], text[64], path[460];
	union ibv_gid g;
	uint64_t guid;
	pid_t owner;
	FILE *f;
	int fd;

	if (!view_dir(d, dir, sizeof(dir)))
		return;
	guid = be64toh(sr_device_guid(d));
	snprintf(text, sizeof(text), "%04x:%04x:%04x:%04x\n", (unsigned)(guid >> 48) & 0xffff,
		 (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
		 (unsigned)guid & 0xffff);
	view_put(dir, "node_guid", text);
	view_put(dir, "sys_image_guid", text);
	/* GID 0, the address, as ibv_query_gid gives it (docs/gid.md). */
	if (!sr_gid_at(&nic->addr, 0, &g)) {
		gid_line(text, sizeof(text), g.raw);
		view_put(dir, "ports/1/gids/0", text);
	}
	fd = view_owner_lock(dir);
	if (fd < 0)
		return;
	if (sr_gid_table_len(&nic->addr) > 1) {
		/* A device on another UDP port than 4791 has a second GID (its port GID) and its
		 * port as LID: this process owns them now. */
		for (int i = 1; !sr_gid_at(&nic->addr, i, &g); i++) {
			gid_line(text, sizeof(text), g.raw);
			snprintf(path, sizeof(path), "ports/1/gids/%d", i);
			view_put(dir, path, text);
		}
		view_trim(dir, sr_gid_table_len(&nic->addr));
		snprintf(text, sizeof(text), "0x%x\n", sr_addr_lid(&nic->addr));
		view_put(dir, "ports/1/lid", text);
		view_put(dir, "ports/1/gid_attrs/types/1", "RoCE v2\n");
		/* The second GID is on the first one's interface. */
		snprintf(path, sizeof(path), "%s/ports/1/gid_attrs/ndevs/0", dir);
		f = fopen(path, "re");
		if (f) {
			if (fgets(text, sizeof(text), f))
				view_put(dir, "ports/1/gid_attrs/ndevs/1", text);
			fclose(f);
		}
		view_owner_write(fd, getpid());
	} else {
		/* On 4791: this process has no port GID. The one in the view stays while the
		 * process that wrote it runs (another rank of the program, off 4791); one whose
		 * process is gone (killed with the device open) or that no one claims goes, with
		 * its LID. */
		owner = view_owner_read(fd);
		if (owner == getpid() || !view_pid_alive(owner)) {
			view_trim(dir, 1);
			view_put(dir, "ports/1/lid", "0x0\n");
			view_owner_write(fd, 0);
		}
	}
	close(fd);
}

/* The NIC is closed: its port is no one's now. A port GID it put in the view, and its port as
 * the LID, are taken away, as long as they are still its own (another process of the program
 * may have opened the device off 4791 since); GID 0, the address, stays. */
static void view_release(struct sr_device *d, const struct sr_nic *nic)
{
	char dir[400], want[64], text[64] = "", path[460];
	union ibv_gid g;
	pid_t owner;
	bool have;
	FILE *f;
	int fd;

	if (!sr_addr_lid(&nic->addr) || sr_gid_at(&nic->addr, 1, &g) || !view_dir(d, dir, sizeof(dir)))
		return;
	fd = view_owner_lock(dir);
	if (fd < 0)
		return;
	/* The entries are this process's, or no one claims them: `softrdma run` itself writes
	 * the files of the device it opens (tools/view.c) after its NIC came up. Then they must
	 * be this NIC's (not one this process opened since on another port). */
	owner = view_owner_read(fd);
	if (owner && owner != getpid())
		goto out;
	gid_line(want, sizeof(want), g.raw);
	snprintf(path, sizeof(path), "%s/ports/1/gids/1", dir);
	f = fopen(path, "re");
	have = f != NULL;
	if (f) {
		if (!fgets(text, sizeof(text), f))
			text[0] = '\0';
		fclose(f);
	}
	if (have ? strcmp(text, want) != 0 : !owner)
		goto out;
	view_trim(dir, 1);
	view_put(dir, "ports/1/lid", "0x0\n");
	view_owner_write(fd, 0);
out:
	close(fd);
}

int sr_nic_get(struct sr_device *d, struct sr_nic **out)
{
	int ret = 0;

	pthread_mutex_lock(&d->lock);
	if (!d->nic)
		ret = nic_create(d, &d->nic);
	if (!ret) {
		d->nic_users++;
		*out = d->nic;
	}
	pthread_mutex_unlock(&d->lock);
	return ret;
}

void sr_nic_put(struct sr_device *d, struct sr_nic *mine)
{
	struct sr_nic *nic = NULL;

	pthread_mutex_lock(&d->lock);
	if (mine == d->nic && --d->nic_users == 0) {
		nic = d->nic;
		d->nic = NULL;
	}
	pthread_mutex_unlock(&d->lock);
	if (nic) {
		view_release(d, nic);
		nic_destroy(nic);
	}
}

/*
 * The child of a fork inherits the parent's soft NICs but not their progress threads, and
 * their sockets are the parent's (both processes would read the same queue). The child
 * abandons them: its copies of their fds are closed, the devices forget them, and the next
 * ibv_open_device in the child makes a soft NIC of its own (its own address or port, its own
 * thread). The abandoned NICs' memory stays as it was: the inherited verbs objects point into
 * it, and the child must not use them (as with a kernel device, whose objects belong to the
 * parent's command fd). Devices' locks are made anew: another thread may have held one.
 */
static void nic_atfork_child(void)
{
	for (int i = 0; i < ndevices; i++) {
		struct sr_device *d = devices[i];
		struct sr_nic *nic;

		if (!d)
			continue;
		pthread_mutex_init(&d->lock, NULL);
		nic = d->nic;
		d->nic = NULL;
		d->nic_users = 0;
		if (!nic)
			continue;
		if (nic->fd >= 0)
			close(nic->fd);
		if (nic->epfd >= 0)
			close(nic->epfd);
		if (nic->evfd >= 0)
			close(nic->evfd);
		nic->fd = nic->epfd = nic->evfd = -1;
		nic->thread = 0;
	}
}
