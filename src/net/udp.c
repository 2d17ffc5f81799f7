/* SPDX-License-Identifier: MIT */
/*
 * The wire: one UDP socket per soft NIC.
 *
 * The socket is made and driven with raw system calls, not libc's socket()/sendmsg(): Debian's
 * librspreload.so interposes those to turn an ordinary program's sockets into rsockets, and
 * the stack's own socket must never be captured by it (it would recurse into ourselves).
 *
 * IPv4 sockets set IP_PMTUDISC_DO: packets carry DF, are never fragmented (a packet larger
 * than the path fails instead, as on a NIC), and Linux then sends IP ID 0 from an unconnected
 * socket -- which is what makes our ICRC, computed over the IP header before the kernel builds
 * it, come out right (src/wire/icrc.h).
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <linux/sock_diag.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"
#include "core/fd.h"
#include "core/log.h"
#include "core/param.h"
#include "net/fault.h"
#include "net/net.h"
#include "net/pcap.h"
#include "wire/icrc.h"
#include "wire/pkt.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define SR_RX_BUFSZ 65536	/* the largest UDP payload: room for large segments and GRO */
#define SR_RX_CTL CMSG_SPACE(sizeof(int))

struct sr_rxring {
	struct mmsghdr msg[SR_NET_RX_BATCH];
	struct iovec iov[SR_NET_RX_BATCH];
	struct sockaddr_storage src[SR_NET_RX_BATCH];
	uint8_t ctl[SR_NET_RX_BATCH][SR_RX_CTL] __attribute__((aligned(8)));
	uint8_t *buf;
	/* The headers the kernel may have changed since they were last set (the first `dirty`
	 * ones), and the control length they were set with: an idle poll that finds nothing
	 * sets nothing again (a spinning receiver polls often; resetting all 32 headers each
	 * time was 3-4 % of a netns stream's CPU). */
	int dirty;
	size_t ctllen;
	/* The lone receive by recvfrom (rx_plain, sr_net_rx_plain_look): allowed (written by the
	 * progress thread under nic->rx_lock, read by receives under it; on a NIC with UDP_GRO,
	 * true exactly while the thread has the option off); and the thread's own state: never
	 * again (a failed membarrier or setsockopt), the backoff of the quiet time after plain
	 * periods that ended soon, since when lone datagrams only, since when plain, since when
	 * not watching. `several`: receives on the NIC's socket that returned several datagrams, a
	 * coalesced one, or one cut from a GSO batch, since the thread last looked (written under
	 * rx_lock; the thread's reset may lose one, which does not matter). */
	bool plain;
	bool plain_never;
	unsigned backoff;
	uint64_t quiet_since;
	uint64_t quiet_packets;
	uint64_t plain_since;
	uint64_t unwatched_since;
	_Atomic unsigned several;
};

static int sys_socket(int dom, int type, int proto)
{
	return (int)syscall(SYS_socket, dom, type, proto);
}
static int sys_setsockopt(int fd, int lvl, int opt, const void *v, socklen_t l)
{
	return (int)syscall(SYS_setsockopt, fd, lvl, opt, v, l);
}
static int sys_bind(int fd, const struct sockaddr *sa, socklen_t l)
{
	return (int)syscall(SYS_bind, fd, sa, l);
}
/* Sends the datagram m describes. One contiguous piece without a control message goes by
 * sendto, which spares the kernel the message header's and the iovec's copies and checks that
 * sendmsg makes. */
static ssize_t sys_sendmsg(int fd, const struct msghdr *m)
{
	if (m->msg_iovlen == 1 && !m->msg_controllen)
		return (ssize_t)syscall(SYS_sendto, fd, m->msg_iov->iov_base, m->msg_iov->iov_len,
					0, m->msg_name, m->msg_namelen);
	return (ssize_t)syscall(SYS_sendmsg, fd, m, 0);
}
static int sys_recvmmsg(int fd, struct mmsghdr *m, unsigned n, int flags)
{
	return (int)syscall(SYS_recvmmsg, fd, m, n, flags, NULL);
}

static void set_buf(int fd, int force, int plain, long want)
{
	int v = (int)want;

	/* SO_*BUFFORCE passes rmem_max/wmem_max when privileged; otherwise take what we get. */
	if (sys_setsockopt(fd, SOL_SOCKET, force, &v, sizeof(v)))
		sys_setsockopt(fd, SOL_SOCKET, plain, &v, sizeof(v));
}

static int try_bind(int fd, struct sr_addr *a)
{
	struct sockaddr_storage ss;
	socklen_t l = sr_addr_to_sockaddr(a, &ss);

	return sys_bind(fd, (struct sockaddr *)&ss, l) ? -errno : 0;
}

int sr_net_open(struct sr_nic *nic)
{
	const struct sr_params *p = sr_params();
	int fd, one = 1, ret, err;
	char buf[80];

	fd = sr_fd_high(sys_socket(nic->addr.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return -errno;
	nic->fd = fd;
	if (nic->addr.family == AF_INET) {
		int v = IP_PMTUDISC_DO;

		sys_setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &v, sizeof(v));
	} else {
		int v = IPV6_PMTUDISC_DO;

		sys_setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &v, sizeof(v));
		sys_setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	}
	/* UD multicast leaves through this socket too: on our interface, looped back to the
	 * host's other members (mcast.c). */
	if (nic->addr.family == AF_INET) {
		struct in_addr ifa = nic->addr.v4;
		int ttl = 16;

		sys_setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &ifa, sizeof(ifa));
		sys_setsockopt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof(one));
		sys_setsockopt(fd, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof(ttl));
	} else {
		sys_setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, &one, sizeof(one));
	}
	set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, p->rcvbuf);
	set_buf(fd, SO_SNDBUFFORCE, SO_SNDBUF, p->sndbuf);

	ret = try_bind(fd, &nic->addr);
	if (ret == -EADDRINUSE && nic->addr_auto) {
		/* Zero configuration, and another process already has 127.0.0.1: Linux routes all
		 * of 127.0.0.0/8 to lo, so take another loopback address and keep the standard
		 * port. Every GID stays a plain ::ffff:a.b.c.d (programs such as perftest insist
		 * on that) and captures decode as RoCEv2 as they are (docs/gid.md). */
		for (int i = 0; i < 64 && ret == -EADDRINUSE; i++) {
			uint8_t r[3];

			if (getrandom(r, sizeof(r), 0) != sizeof(r))
				memcpy(r, &(uint64_t){ sr_now_ns() }, 3);
			nic->addr.raw[0] = 127;
			nic->addr.raw[1] = (uint8_t)(1 + r[0] % 254);
			nic->addr.raw[2] = r[1];
			nic->addr.raw[3] = (uint8_t)(1 + r[2] % 254);
			ret = try_bind(fd, &nic->addr);
		}
		if (!ret)
			sr_info("%s: 127.0.0.1:4791 is taken; using %s", nic->dev->ibdev.name,
				sr_addr_str(&nic->addr, buf, sizeof(buf)));
	}
	if (ret == -EADDRINUSE && nic->addr.family == AF_INET) {
		/* The address is fixed (an interface, SOFTRDMA_ADDR) and another process has its
		 * port: take another port and say so in the GID (docs/gid.md). Ports are picked
		 * below the RoCEv2 source-port range 49152.. so a reply to a standard peer is never
		 * confused with one to a softrdma peer. */
		uint16_t want = nic->addr.port;

		for (int i = 0; i < 256 && ret == -EADDRINUSE; i++) {
			uint16_t r;

			if (getrandom(&r, sizeof(r), 0) != sizeof(r))
				r = (uint16_t)(sr_now_ns() >> 10);
			nic->addr.port = (uint16_t)(20000 + r % 12768);
			ret = try_bind(fd, &nic->addr);
		}
		if (!ret)
			sr_info("%s: UDP port %u is taken; using %u", nic->dev->ibdev.name, want,
				nic->addr.port);
	}
	if (ret) {
		sr_err("%s: cannot bind %s: %s", nic->dev->ibdev.name,
		       sr_addr_str(&nic->addr, buf, sizeof(buf)), strerror(-ret));
		return ret;
	}

	nic->rx = calloc(1, sizeof(*nic->rx));
	if (!nic->rx)
		return -ENOMEM;
	nic->rx->buf = malloc((size_t)SR_NET_RX_BATCH * SR_RX_BUFSZ);
	if (!nic->rx->buf)
		return -ENOMEM;
	for (int i = 0; i < SR_NET_RX_BATCH; i++) {
		struct msghdr *h = &nic->rx->msg[i].msg_hdr;

		nic->rx->iov[i].iov_base = nic->rx->buf + (size_t)i * SR_RX_BUFSZ;
		nic->rx->iov[i].iov_len = SR_RX_BUFSZ;
		h->msg_name = &nic->rx->src[i];
		h->msg_iov = &nic->rx->iov[i];
		h->msg_iovlen = 1;
		h->msg_control = nic->rx->ctl[i];
	}
	nic->rx->dirty = SR_NET_RX_BATCH;

	/* GRO: a run of equal packets from one sender may arrive as one datagram (a GSO send
	 * that crossed lo or a veth unsegmented, or packets a NIC coalesced); rx splits it. */
	if (p->gso)
		nic->gro = !sys_setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one));
	/* Without UDP_GRO the kernel cuts every GSO batch as it queues it: nothing coalesced,
	 * and a lone receive needs no control message (rx_plain). */
	nic->rx->plain = !nic->gro;

	nic->fault = sr_fault_parse(p->fault, &err);
	if (err) {
		sr_err("SOFTRDMA_FAULT=%s: expected name=probability pairs "
		       "(drop, dup, reorder, corrupt), delay=US, jitter=US, limit=N, to=IP, seed=N, after=N", p->fault);
		return err;
	}
	if (p->pcap && *p->pcap) {
		nic->pcap = sr_pcap_open(p->pcap);
		if (!nic->pcap)
			sr_warn("cannot open pcap file %s: %s", p->pcap, strerror(errno));
	}
	/* Fault injection and the pcap tap act on each packet as it is sent. */
	nic->gso = p->gso && !nic->fault && !nic->pcap;
	return 0;
}

int sr_net_mcast_open(struct sr_nic *nic, const struct sr_addr *group)
{
	struct sockaddr_storage ss;
	struct epoll_event ev = { .events = EPOLLIN };
	socklen_t l;
	int fd, one = 1, ret;

	fd = sr_fd_high(sys_socket(group->family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return -errno;
	sys_setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	l = sr_addr_to_sockaddr(group, &ss);
	if (sys_bind(fd, (struct sockaddr *)&ss, l))
		goto fail;
	if (group->family == AF_INET) {
		struct ip_mreq mr = { .imr_multiaddr = group->v4, .imr_interface = nic->addr.v4 };

		if (sys_setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof(mr)))
			goto fail;
	} else {
		struct ipv6_mreq mr = { .ipv6mr_multiaddr = group->v6,
					.ipv6mr_interface = nic->dev->netdev[0] ?
						if_nametoindex(nic->dev->netdev) : 0 };

		if (sys_setsockopt(fd, IPPROTO_IPV6, IPV6_JOIN_GROUP, &mr, sizeof(mr)))
			goto fail;
	}
	set_buf(fd, SO_RCVBUFFORCE, SO_RCVBUF, sr_params()->rcvbuf);
	ev.data.fd = fd;
	if (epoll_ctl(nic->epfd, EPOLL_CTL_ADD, fd, &ev))
		goto fail;
	return fd;
fail:
	ret = -errno;
	close(fd);
	return ret;
}

static void release_held(struct sr_nic *nic, struct sr_fault *f);
static uint64_t release_delayed(struct sr_nic *nic, struct sr_fault *f, uint64_t now);

void sr_net_close(struct sr_nic *nic)
{
	/* A packet reorder injection still holds goes out now: the process may be exiting right
	 * after its last send (a UC/UD sender has its completion already), and the peer waits. */
	if (nic->fault && nic->fd >= 0) {
		pthread_mutex_lock(&nic->fault->lock);
		release_held(nic, nic->fault);
		/* So do the packets of the delay line, early (the thread that would have sent
		 * them has stopped). */
		release_delayed(nic, nic->fault, UINT64_MAX);
		pthread_mutex_unlock(&nic->fault->lock);
	}
	if (nic->fd >= 0)
		close(nic->fd);
	nic->fd = -1;
	if (nic->rx) {
		free(nic->rx->buf);
		free(nic->rx);
		nic->rx = NULL;
	}
	sr_fault_free(nic->fault);
	nic->fault = NULL;
	sr_pcap_close(nic->pcap);
	nic->pcap = NULL;
}

/* ---- transmit ----------------------------------------------------------------------------- */
/* (Copies of constant length: a memset and two memcpy calls of variable length were ~20 ns
 * of a small packet's way to its sendmsg.) */
static void tuple(struct sr_ipudp *t, const struct sr_addr *src, const struct sr_addr *dst)
{
	*t = (struct sr_ipudp){ .family = src->family == AF_INET ? 4 : 6, .sport = src->port,
				.dport = dst->port, .df = true, .ttl = 64 };
	if (src->family == AF_INET) {
		memcpy(t->src, src->raw, 4);
		memcpy(t->dst, dst->raw, 4);
	} else {
		memcpy(t->src, src->raw, 16);
		memcpy(t->dst, dst->raw, 16);
	}
}

/* Sends one packet; the pcap tap records exactly what went out. */
static int send_iov(struct sr_nic *nic, const struct sr_ipudp *t, const struct sockaddr_storage *ss,
		    socklen_t sl, struct iovec *iov, int n, size_t len)
{
	struct msghdr m = { .msg_name = (void *)ss, .msg_namelen = sl, .msg_iov = iov,
			    .msg_iovlen = (size_t)n };
	ssize_t r;

	do
		r = sys_sendmsg(nic->fd, &m);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		/* ENOBUFS/EAGAIN: a full socket is a lost packet; the transport retransmits. */
		sr_stat_inc(&nic->stats, SR_STAT_tx_errors);
		if (errno != EAGAIN && errno != ENOBUFS)
			sr_log_rl(SR_LOG_WARN, "sendmsg: %s", strerror(errno));
		return -errno;
	}
	sr_stat_inc(&nic->stats, SR_STAT_tx_packets);
	sr_stat_add(&nic->stats, SR_STAT_tx_bytes, len);
	if (nic->pcap)
		sr_pcap_write(nic->pcap, t, iov, n);
	return 0;
}

/* Copies the pieces of iov, one after another, to dst. */
static void gather(uint8_t *dst, const struct iovec *iov, int n)
{
	for (int i = 0; i < n; i++) {
		memcpy(dst, iov[i].iov_base, iov[i].iov_len);
		dst += iov[i].iov_len;
	}
}

/*
 * Builds a whole packet at p: the headers (BTH already marked), a snapshot of the payload, the
 * pad, and the ICRC (t: the IP/UDP tuple it goes with). The ICRC is computed over the snapshot,
 * not the source: the application may be writing that memory right now (QEMU migrates the RAM
 * of a running guest), and a checksum over one read sent with the bytes of another would be a
 * packet the peer drops as corrupt -- over and over, for a page that is rewritten all the time.
 * A NIC reads the memory once too; what it sends is whatever that read saw. The snapshot also
 * takes any number of pieces (many SGEs over scattered pages). len: its length, pad to 4
 * bytes and ICRC included.
 */
static void build_packet(uint8_t *p, const struct sr_ipudp *t, const uint8_t *hdr,
			 unsigned hlen, const struct iovec *pay, int npay, uint32_t paylen,
			 size_t len)
{
	static const uint8_t zeros[4];
	uint32_t icrc;

	memcpy(p, hdr, hlen);
	/* The pad (0-3 bytes) as one 4-byte store: what it writes past the pad is the ICRC's
	 * place, written last (a memset of variable length was a call). */
	memset(p + hlen + paylen, 0, 4);
	if (npay == 1) {	/* the snapshot and its CRC from one read of the source */
		icrc = sr_icrc_calc_copy(t, hdr, hlen, pay[0].iov_base, paylen, zeros, len,
					 p + hlen);
	} else {
		gather(p + hlen, pay, npay);
		icrc = sr_icrc_calc(t, p, len);
	}
	sr_st_le32(p + len - SR_ICRC_LEN, icrc);
}

/* ---- transmit batches (UDP GSO) ------------------------------------------------------------
 *
 * Between sr_net_batch_begin and _end, the packets a thread sends are gathered, whole (headers,
 * payload snapshot, pad, ICRC), into one buffer, in runs: a run is packets to one destination
 * with one length (the last may be shorter), and becomes one UDP GSO send (UDP_SEGMENT): the
 * kernel cuts it into the same datagrams, once, after one trip through the stack. Across lo or
 * a veth a run even stays whole up to the receiving socket, which takes it in one datagram with
 * UDP_GRO (sr_net_rx_fd). A packet that cannot join the open run (longer, or after a shorter
 * one) starts the next run in the same buffer, and the runs leave together, in order, in one
 * sendmmsg: a WRITE's FIRST, 16 bytes longer than its MIDDLE and LAST packets (its RETH), ends
 * a run, so a stream of two-packet WRITEs is a run per WRITE, and those then cost one system
 * call per batch rather than one per WRITE (bench/README.md, "16 and 32 KiB"). (Toward a
 * softrdma peer that takes it, a WRITE of a few packets has a FIRST short by its RETH instead,
 * one size with the MIDDLEs: transport/req.c, write_first_short.)
 *
 * The ICRC covers the IPv4 ID. An unconnected socket with DF sends ID 0 (see the top of the
 * file), and segmentation numbers the pieces of one send 0, 1, 2, ... (inet_gso_segment): so
 * packet i of a run gets its ICRC with ID i, and the packets on the wire are exactly what
 * packet-by-packet sends of the same IDs would be (test_gso checks a capture of software-cut
 * segments). A receiver that sees them one by one and expects ID 0 recovers the ID from the
 * ICRC (sr_icrc_recover_v4_id), as it does for Linux rxe.
 *
 * A batch leaves before a new run starts in it that could not grow to a whole GSO send in the
 * room left (run_room): the buffer, then 128 KiB, held two runs of seven 8212-byte packets
 * (the 8 KiB segments between two namespaces) and a third of one, and that lone packet cost a
 * send of its own (an skb through the stack, a datagram at the receiver) for every 15
 * packets of a stream; now a batch is whole runs, 4 of 7 in 256 KiB (bench/README.md, "Whole
 * GSO runs in a batch").
 */
#define SR_GSO_MAX_SEGS 64	/* UDP_MAX_SEGMENTS of older kernels */
#define SR_GSO_MAX_BYTES SR_NET_GSO_BYTES
#define SR_XB_RUNS 16		/* GSO sends one sendmmsg carries at most */
#define SR_XB_BYTES (4 * 65536)	/* what a batch gathers at most, all runs together */

struct sr_xrun {
	struct sr_addr dst;
	size_t off;		/* where in buf it starts */
	size_t len;
	uint32_t seg;		/* length of each packet but the last */
	uint32_t n;		/* packets */
	bool closed;		/* a shorter packet ended it */
};

struct sr_xbatch {
	int depth;		/* nesting of begin/end */
	struct sr_nic *nic;	/* every run's: one socket */
	uint32_t nrun;		/* runs gathered; run[nrun - 1] is the open one */
	size_t len;		/* bytes gathered, all runs */
	struct sr_xrun run[SR_XB_RUNS];
	uint8_t buf[SR_XB_BYTES];
};
static __thread struct sr_xbatch *xb;
static pthread_key_t xb_key;	/* frees a thread's batch buffer when the thread ends */
static pthread_once_t xb_once = PTHREAD_ONCE_INIT;

static void xb_key_init(void)
{
	(void)pthread_key_create(&xb_key, free);
}

static int sys_sendmmsg(int fd, struct mmsghdr *m, unsigned n, int flags)
{
	return (int)syscall(SYS_sendmmsg, fd, m, n, flags);
}

/* A run that GSO failed on: its packets one by one, from now on every packet (nic->gso off).
 * Their ICRCs were made for IDs 1.. and now go with ID 0: a softrdma receiver recovers the ID,
 * another one drops them and the transport retransmits. */
static void run_unbatched(struct sr_nic *nic, const uint8_t *buf, const struct sr_xrun *r,
			  const struct sockaddr_storage *ss, socklen_t sl)
{
	for (uint32_t i = 0, off = 0; i < r->n; i++) {
		uint32_t l = i + 1 < r->n ? r->seg : (uint32_t)(r->len - off);
		struct iovec one = { (void *)(buf + r->off + off), l };

		/* No tuple: a NIC with a pcap tap never batches. */
		send_iov(nic, NULL, ss, sl, &one, 1, l);
		off += l;
	}
}

static void batch_flush(void)
{
	struct sr_xbatch *b = xb;
	struct sr_nic *nic;
	struct sockaddr_storage ss[SR_XB_RUNS];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl[SR_XB_RUNS];
	struct iovec v[SR_XB_RUNS];
	struct mmsghdr mm[SR_XB_RUNS];
	uint32_t k = 0;

	if (!b || !b->nrun)
		return;
	nic = b->nic;
	if (b->nrun == 1)
		memset(mm, 0, sizeof(mm[0]));	/* (of constant length: no call) */
	else
		memset(mm, 0, sizeof(mm[0]) * b->nrun);
	for (uint32_t i = 0; i < b->nrun; i++) {
		struct sr_xrun *r = &b->run[i];
		struct msghdr *m = &mm[i].msg_hdr;

		v[i].iov_base = b->buf + r->off;
		v[i].iov_len = r->len;
		m->msg_name = &ss[i];
		m->msg_namelen = sr_addr_to_sockaddr(&r->dst, &ss[i]);
		m->msg_iov = &v[i];
		m->msg_iovlen = 1;
		if (r->n > 1) {
			struct cmsghdr *c;
			uint16_t seg = (uint16_t)r->seg;

			memset(&ctl[i], 0, sizeof(ctl[i]));
			m->msg_control = ctl[i].buf;
			m->msg_controllen = sizeof(ctl[i].buf);
			c = CMSG_FIRSTHDR(m);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(seg));
			memcpy(CMSG_DATA(c), &seg, sizeof(seg));
		}
	}
	while (k < b->nrun) {
		struct sr_xrun *r = &b->run[k];
		int sent;

		/* One run: sendmsg, as before there were runs (no mmsghdr to fill in the kernel;
		 * one packet, no control message: sendto). */
		if (b->nrun - k == 1)
			sent = sys_sendmsg(nic->fd, &mm[k].msg_hdr) < 0 ? -1 : 1;
		else
			sent = sys_sendmmsg(nic->fd, &mm[k], b->nrun - k, 0);
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent < 0 && r->n > 1 && errno != EAGAIN && errno != ENOBUFS) {
			/* No GSO on this path (EIO: an egress device without checksum offload;
			 * EINVAL, ENOPROTOOPT: an old kernel). */
			sr_warn("%s: UDP GSO failed (%s); sending packet by packet",
				nic->dev->ibdev.name, strerror(errno));
			nic->gso = false;
			for (; k < b->nrun; k++)
				run_unbatched(nic, b->buf, &b->run[k], &ss[k], mm[k].msg_hdr.msg_namelen);
			break;
		}
		if (sent < 0) {
			/* A full socket (or a lone packet refused): the run is lost; the transport
			 * recovers. The runs after it still go. */
			sr_stat_add(&nic->stats, SR_STAT_tx_errors, r->n);
			k++;
			continue;
		}
		if (sent > 1)
			sr_stat_inc(&nic->stats, SR_STAT_tx_mmsg_sends);
		for (int j = 0; j < sent; j++, k++) {
			sr_stat_add(&nic->stats, SR_STAT_tx_packets, b->run[k].n);
			sr_stat_add(&nic->stats, SR_STAT_tx_bytes, b->run[k].len);
			if (b->run[k].n > 1)
				sr_stat_inc(&nic->stats, SR_STAT_tx_gso_sends);
		}
	}
	b->nrun = 0;
	b->len = 0;
}

void sr_net_batch_begin(void)
{
	if (!xb) {
		pthread_once(&xb_once, xb_key_init);
		xb = calloc(1, sizeof(*xb));
		if (!xb)
			return;	/* then packets go one by one */
		(void)pthread_setspecific(xb_key, xb);
	}
	xb->depth++;
}

void sr_net_batch_end(void)
{
	if (xb && --xb->depth == 0)
		batch_flush();
}

/* The bytes of a whole run of packets of len bytes. */
static inline size_t run_room(size_t len)
{
	size_t n = SR_GSO_MAX_BYTES / len;

	return (n < SR_GSO_MAX_SEGS ? n : SR_GSO_MAX_SEGS) * len;
}

/* Adds a packet (BTH already marked) of len bytes to this thread's batch, which is open
 * (xb->depth > 0); false: send it alone (after what is gathered). */
static bool batch_add(struct sr_xbatch *b, struct sr_nic *nic, const struct sr_addr *dst,
		      struct sr_ipudp *t, const uint8_t *hdr, unsigned hlen,
		      const struct iovec *pay, int npay, uint32_t paylen, size_t len)
{
	struct sr_xrun *r;

	if (!nic->gso || len > SR_GSO_MAX_BYTES) {
		batch_flush();
		return false;
	}
	if (b->nrun && (b->nic != nic || b->len + len > SR_XB_BYTES))
		batch_flush();
	r = b->nrun ? &b->run[b->nrun - 1] : NULL;
	if (r && (r->closed || len > r->seg || r->n == SR_GSO_MAX_SEGS ||
		  r->len + len > SR_GSO_MAX_BYTES || !sr_addr_eq(&r->dst, dst))) {
		if (b->nrun == SR_XB_RUNS || b->len + run_room(len) > SR_XB_BYTES)
			batch_flush();
		r = NULL;	/* the next run */
	}
	if (!r) {
		r = &b->run[b->nrun++];
		b->nic = nic;
		r->dst = *dst;
		r->off = b->len;
		r->len = 0;
		r->seg = (uint32_t)len;
		r->n = 0;
		r->closed = false;
	} else if (len < r->seg) {
		r->closed = true;
	}
	t->ip_id = (uint16_t)r->n;	/* IPv4; IPv6 has none */
	build_packet(b->buf + b->len, t, hdr, hlen, pay, npay, paylen, len);
	r->len += len;
	r->n++;
	b->len += len;
	return true;
}

static uint8_t *linearize(const struct iovec *iov, int n, size_t len)
{
	uint8_t *b = malloc(len ? len : 1);

	if (b)
		gather(b, iov, n);
	return b;
}

/*
 * The delay line (fault.h: delay, jitter, limit). Every packet the other faults let through
 * is copied into a FIFO ring and sent when due: by the next packet sent through fault
 * injection, or by the progress thread (sr_net_tick), which sleeps until the oldest one is due
 * (a packet queued into an empty line kicks it, so it never sleeps past one). f->lock held.
 */
static int emit(struct sr_nic *nic, struct sr_fault *f, const struct sr_ipudp *t,
		const struct sockaddr_storage *ss, socklen_t sl, struct iovec *iov, int n, size_t len)
{
	struct sr_fault_pkt *p;
	bool was_empty;

	if (!sr_fault_delays(f))
		return send_iov(nic, t, ss, sl, iov, n, len);
	if (!f->q) {
		f->q = calloc(f->limit, sizeof(*f->q));
		if (!f->q)
			return send_iov(nic, t, ss, sl, iov, n, len);
	}
	if (f->q_n == f->limit) {
		sr_stat_inc(&nic->stats, SR_STAT_fault_delay_overflow);
		return 0;	/* a full queue on the path: the packet is lost */
	}
	p = &f->q[(f->q_head + f->q_n) % f->limit];
	p->buf = linearize(iov, n, len);
	if (!p->buf)
		return send_iov(nic, t, ss, sl, iov, n, len);
	p->len = len;
	p->dst = *ss;
	p->dlen = sl;
	p->tuple = *t;
	p->due = sr_fault_due(f, sr_now_ns());
	was_empty = !f->q_n;
	f->q_n++;
	sr_stat_inc(&nic->stats, SR_STAT_fault_delayed);
	if (was_empty)
		sr_nic_kick(nic);	/* the thread may sleep with nothing else to time */
	return 0;
}

/* Sends what the delay line holds that is due by `now` (all of it when now is UINT64_MAX);
 * returns the due time of the next packet, 0 when none waits (f->lock held). */
static uint64_t release_delayed(struct sr_nic *nic, struct sr_fault *f, uint64_t now)
{
	while (f->q_n) {
		struct sr_fault_pkt *p = &f->q[f->q_head];
		struct iovec v = { p->buf, p->len };

		if (p->due > now)
			return p->due;
		send_iov(nic, &p->tuple, &p->dst, p->dlen, &v, 1, p->len);
		free(p->buf);
		p->buf = NULL;
		f->q_head = (f->q_head + 1) % f->limit;
		f->q_n--;
	}
	return 0;
}

/* Sends a packet held back by reorder injection (f->lock held). */
static void release_held(struct sr_nic *nic, struct sr_fault *f)
{
	struct iovec v = { f->held, f->held_len };

	if (!f->held)
		return;
	emit(nic, f, &f->held_tuple, &f->held_dst, f->held_dlen, &v, 1, f->held_len);
	free(f->held);
	f->held = NULL;
}

/* Applies fault injection to one packet that the filter selects; returns what sending it (or
 * queueing it in the delay line) returned. */
static int faulted(struct sr_nic *nic, const struct sr_ipudp *t, const struct sockaddr_storage *ss,
		   socklen_t sl, struct iovec *iov, int n, size_t len)
{
	struct sr_fault *f = nic->fault;
	struct iovec v;
	uint8_t *copy;
	int ret = 0;

	pthread_mutex_lock(&f->lock);
	if (f->q_n)
		release_delayed(nic, f, sr_now_ns());
	switch (sr_fault_decide(f)) {
	case SR_FAULT_DROP:
		sr_stat_inc(&nic->stats, SR_STAT_fault_drop);
		break;
	case SR_FAULT_DUP:
		sr_stat_inc(&nic->stats, SR_STAT_fault_dup);
		ret = emit(nic, f, t, ss, sl, iov, n, len);
		emit(nic, f, t, ss, sl, iov, n, len);
		release_held(nic, f);
		break;
	case SR_FAULT_REORDER:
		copy = linearize(iov, n, len);
		if (!copy || f->held) {
			/* One packet is already waiting: this one overtakes it. */
			ret = emit(nic, f, t, ss, sl, iov, n, len);
			release_held(nic, f);
			free(copy);
			break;
		}
		sr_stat_inc(&nic->stats, SR_STAT_fault_reorder);
		f->held = copy;
		f->held_len = len;
		f->held_dst = *ss;
		f->held_tuple = *t;
		f->held_dlen = sl;
		f->held_at = sr_now_ns();
		/* If no other packet follows, the progress thread sends it after 1 ms: wake it,
		 * it may be asleep with nothing else to time. */
		sr_nic_kick(nic);
		break;
	case SR_FAULT_CORRUPT:
		copy = linearize(iov, n, len);
		if (copy) {
			/* Any bit, BTH byte 4's too: RoCEv2 leaves that byte out of the ICRC
			 * (FECN, BECN, resv6), so a flip there arrives; softrdma's offers ride
			 * there, and a QP changes the one it holds only when two packets in a
			 * row say so (recv.c hear_offer). */
			uint32_t bit = sr_fault_rand(f, (uint32_t)len * 8);

			copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
			v.iov_base = copy;
			v.iov_len = len;
			sr_stat_inc(&nic->stats, SR_STAT_fault_corrupt);
			ret = emit(nic, f, t, ss, sl, &v, 1, len);
			free(copy);
		}
		release_held(nic, f);
		break;
	default:
		ret = emit(nic, f, t, ss, sl, iov, n, len);
		release_held(nic, f);	/* the held packet now comes after this one */
		break;
	}
	pthread_mutex_unlock(&f->lock);
	return ret;
}

/* Called by the progress thread: sends a packet held too long by reorder injection and the
 * packets of the delay line that are due. Returns how long the thread may sleep before it must
 * call again, ns (-1: nothing held). */
int64_t sr_net_tick(struct sr_nic *nic)
{
	struct sr_fault *f = nic->fault;
	int64_t wait = -1;
	uint64_t now, next;

	if (!f)
		return -1;
	/* Held by a sending thread, which sends what is due first: look again soon rather than
	 * wait behind it (preempted on a loaded machine, it would stall the whole thread). */
	if (pthread_mutex_trylock(&f->lock))
		return 200000;
	now = sr_now_ns();
	if (f->held && now - f->held_at > 1000000)
		release_held(nic, f);
	if (f->held)
		wait = 1000000;
	next = f->q_n ? release_delayed(nic, f, now) : 0;
	if (next) {
		int64_t left = (int64_t)(next - now);

		if (wait < 0 || left < wait)
			wait = left;
	}
	pthread_mutex_unlock(&f->lock);
	return wait;
}

int sr_net_xmit(struct sr_nic *nic, const struct sr_addr *dst, void *hdr, unsigned hlen,
		const struct iovec *pay, int npay, uint32_t paylen)
{
	/* Headers (at most 64 bytes: SR_MAX_HDR), the largest UDP payload, pad and ICRC. */
	static __thread uint8_t pkt[128 + 65536 + 8];
	size_t len = hlen + paylen + ((-paylen) & 3) + SR_ICRC_LEN;	/* pad to 4 bytes, ICRC */
	struct sockaddr_storage ss;
	struct sr_ipudp t;
	struct iovec v;
	socklen_t sl;

	if (paylen > 65536 || hlen > 128)
		return -EMSGSIZE;	/* no packet is larger: a segment is at most a UDP payload */
	tuple(&t, &nic->addr, dst);
	/* FECN, BECN and the transport's SR_BTH_SR_FSHORT (per QP) stay; the NIC's offer */
	((uint8_t *)hdr)[4] = (uint8_t)((((uint8_t *)hdr)[4] & (0xc0 | SR_BTH_SR_FSHORT)) |
					nic->bth_mark);
	struct sr_xbatch *b = xb;	/* (one TLS lookup: a call in a shared library) */

	if (b && b->depth && batch_add(b, nic, dst, &t, hdr, hlen, pay, npay, paylen, len))
		return 0;
	v.iov_base = pkt;	/* (another TLS lookup, after the batch's) */
	v.iov_len = len;
	build_packet(pkt, &t, hdr, hlen, pay, npay, paylen, len);
	sl = sr_addr_to_sockaddr(dst, &ss);
	if (nic->fault && sr_fault_selects(nic->fault, &t))
		return faulted(nic, &t, &ss, sl, &v, 1, len);
	return send_iov(nic, &t, &ss, sl, &v, 1, len);
}

/* ---- receive ------------------------------------------------------------------------------ */
static const enum sr_stat parse_drop[SR_PE_COUNT] = {
	[SR_PE_SHORT] = SR_STAT_drop_short,
	[SR_PE_BAD_OPCODE] = SR_STAT_drop_opcode,
	[SR_PE_BAD_TVER] = SR_STAT_drop_tver,
	[SR_PE_BAD_PAD] = SR_STAT_drop_pad,
	[SR_PE_BAD_ICRC] = SR_STAT_drop_icrc,
	[SR_PE_BAD_RIDE] = SR_STAT_drop_ride,
};

/*
 * The recovery of an unexpected IPv4 ID solves 17 bits (ID and DF) of the 32 the CRC checks,
 * so it would also "explain" one corrupted packet in 2^15: test_fault_integrity, corrupting
 * 15 % of its packets, found target memory with one flipped bit about once in two runs. A
 * softrdma sender (its mark in the BTH) sends with DF and numbers a GSO batch's packets 0..63;
 * any other ID found for its packet is corruption, and the check keeps 2^-26 of its strength.
 * Other senders (Linux rxe: random IDs) keep the weaker check they need.
 */
bool sr_net_icrc_match(struct sr_nic *nic, struct sr_ipudp *t, const uint8_t *buf, size_t len,
		       uint32_t got)
{
	uint32_t want = sr_ld_le32(buf + len - SR_ICRC_LEN);
	struct sr_ipudp keep;

	if (got == want)
		return true;
	keep = *t;	/* (not on the path every good packet takes) */
	if (!sr_icrc_recover_v4_id_from(t, len, got, want))
		return false;
	if (nic->icrc_id_strict && sr_bth_sr_marked((const struct sr_bth *)buf) &&
	    (t->ip_id >= SR_GSO_MAX_SEGS || !t->df)) {
		sr_stat_inc(&nic->stats, SR_STAT_rx_id_refused);
		sr_log_rl(SR_LOG_INFO, "a softrdma packet's ICRC matched only with IPv4 ID %u%s: "
			  "dropped as corrupt (a path that rewrites IP IDs needs icrc_id_strict=0)",
			  t->ip_id, t->df ? "" : " without DF");
		*t = keep;
		return false;
	}
	sr_stat_inc(&nic->stats, SR_STAT_rx_id_recovered);
	return true;
}

void sr_net_icrc_drop(struct sr_nic *nic)
{
	sr_stat_inc(&nic->stats, SR_STAT_drop_icrc);
	sr_log_rl(SR_LOG_INFO, "dropped a packet with a bad ICRC");
}

bool sr_net_icrc_ok(struct sr_nic *nic, struct sr_pkt *pkt)
{
	struct sr_ipudp *t = pkt->icrc_tuple;

	if (!t)
		return true;
	if (!sr_net_icrc_match(nic, t, pkt->hdr, pkt->len, sr_icrc_calc(t, pkt->hdr, pkt->len)))
		return false;
	pkt->icrc_tuple = NULL;
	return true;
}

/*
 * May the ICRC wait for the placement (resp.c, sr_resp_place; comp.c, sr_comp_place)? For the
 * MIDDLE packets of an RC WRITE or SEND, and the MIDDLE responses of an RC READ, which carry
 * nearly all of a long message's bytes: their payload goes to memory the message's first
 * packet already had checked (a READ's: its own local buffer), and the check runs in the same
 * pass as the copy. Not a LAST packet: it writes the message's last byte, and a reader polling
 * that byte (ibv_query_qp_data_in_order says it may) must find every byte before it final, not
 * a packet that is dropped a moment later; a READ's LAST completes it. Not with the pcap tap,
 * which records the packet with its recovered ID before the transport sees it.
 */
static bool icrc_deferrable(const struct sr_nic *nic, const struct sr_pkt *pkt)
{
	return !nic->pcap && pkt->paylen >= 512 &&
	       (pkt->opcode == SR_OPC(SR_TR_RC, SR_OP_WRITE_MIDDLE) ||
		pkt->opcode == SR_OPC(SR_TR_RC, SR_OP_SEND_MIDDLE) ||
		pkt->opcode == SR_OPC(SR_TR_RC, SR_OP_READ_RESP_MIDDLE));
}

/* One packet. *id: the IPv4 ID to expect (0 from a softrdma sender's packet sent alone; i for
 * the i-th of a GSO batch); on return, the ID it had, so the caller can expect the next one. */
static void rx_one(struct sr_nic *nic, uint8_t *buf, size_t len, const struct sr_addr *src,
		   int fd, const struct sr_addr *group, uint16_t *id)
{
	enum sr_parse_err pe;
	struct sr_ipudp t;
	struct sr_pkt pkt;

	/* Every receive holds nic->rx_lock (sr_net_rx_datagram's caller too). */
	sr_stat_add_excl(&nic->stats, SR_STAT_rx_packets, 1);
	sr_stat_add_excl(&nic->stats, SR_STAT_rx_bytes, len);
	tuple(&t, src, group ? group : &nic->addr);
	t.ip_id = *id;
	pe = sr_pkt_parse(&pkt, buf, len);
	/* A UDP socket never sees the IP header: assume ours (the expected ID, DF); a sender
	 * that numbers its IDs otherwise (Linux rxe) has its ID recovered from the ICRC
	 * (src/wire/icrc.h). */
	bool icrc_ok = true;

	if (pe == SR_PE_OK && nic->icrc_check) {
		/* pe OK: len holds a BTH and an ICRC */
		if (!group && icrc_deferrable(nic, &pkt))
			pkt.icrc_tuple = &t;
		else
			icrc_ok = sr_net_icrc_match(nic, &t, buf, len, sr_icrc_calc(&t, buf, len));
	}

	*id = t.ip_id;

	if (nic->pcap) {
		struct iovec v = { buf, len };

		sr_pcap_write(nic->pcap, &t, &v, 1);	/* with the recovered ID, so it verifies */
	}
	if (pe != SR_PE_OK) {
		sr_stat_inc(&nic->stats, parse_drop[pe]);
		return;
	}
	if (!icrc_ok) {
		sr_net_icrc_drop(nic);
		return;
	}
	if (group) {
		/* Addressed to a group: only multicast UD is valid (IBA 10.5.1). */
		if (pkt.qpn == SR_QPN_MULTICAST)
			nic->engine->mcast_rcv(nic, fd, &pkt, src);
		else
			sr_stat_inc(&nic->stats, SR_STAT_drop_qpn);
		return;
	}
	nic->engine->rcv(nic, &pkt, src);
	*id = t.ip_id;	/* as the transport found it, if it checked the ICRC */
}

void sr_net_rx_datagram(struct sr_nic *nic, uint8_t *buf, size_t len, const struct sr_addr *src)
{
	uint16_t id = 0;

	rx_one(nic, buf, len, src, nic->fd, NULL, &id);
}

bool sr_net_rx_half_full(struct sr_nic *nic)
{
	uint32_t mi[SK_MEMINFO_VARS];
	socklen_t l = sizeof(mi);

	if (syscall(SYS_getsockopt, nic->fd, SOL_SOCKET, SO_MEMINFO, mi, &l) || l < sizeof(mi))
		return true;	/* cannot tell: as if full */
	return mi[SK_MEMINFO_RMEM_ALLOC] > mi[SK_MEMINFO_RCVBUF] / 2;
}

static int rx_fd(struct sr_nic *nic, int fd, const struct sr_addr *group, unsigned max);

int sr_net_rx(struct sr_nic *nic)
{
	return rx_fd(nic, nic->fd, NULL, SR_NET_RX_BATCH);
}

int sr_net_rx_upto(struct sr_nic *nic, unsigned max)
{
	return rx_fd(nic, nic->fd, NULL, max < 1 ? 1 : max > SR_NET_RX_BATCH ? SR_NET_RX_BATCH : max);
}

/* The segment size of a datagram GRO coalesced from several (0: a single one). */
static size_t gro_size(struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		int v;

		if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
		    c->cmsg_len >= CMSG_LEN(sizeof(v))) {
			memcpy(&v, CMSG_DATA(c), sizeof(v));
			return v > 0 ? (size_t)v : 0;
		}
	}
	return 0;
}

/*
 * A coalesced datagram (segments of seg bytes, the last one at offset last) of requests whose
 * last packet is a response (ACK, READ response, ATOMIC ACK). Requests and responses run
 * different state machines (responder, completer), so the response may be taken first; not
 * ahead of other responses, whose PSN order counts.
 */
static bool response_last(const uint8_t *p, size_t last, size_t seg)
{
	if (!(sr_opcode[p[last]].mask & SR_M_RESP))
		return false;
	for (size_t off = 0; off < last; off += seg)
		if (!(sr_opcode[p[off]].mask & SR_M_REQ))
			return false;
	return true;
}

int sr_net_rx_fd(struct sr_nic *nic, int fd, const struct sr_addr *group)
{
	return rx_fd(nic, fd, group, SR_NET_RX_BATCH);
}

static void note_several(struct sr_rxring *r)
{
	atomic_store_explicit(&r->several, atomic_load_explicit(&r->several, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/*
 * One datagram by recvfrom (r->plain: no coalesced datagram can be waiting), which copies no
 * message header, iovec or control message in or out: an empty one costs ~125 ns here against
 * recvmmsg's ~175 with the control buffer. A datagram with another IPv4 ID than 0 is a piece of
 * a GSO batch the kernel cut (or an rxe peer's): traffic that GRO serves better.
 */
static int rx_plain(struct sr_nic *nic, struct sr_rxring *r)
{
	socklen_t alen = sizeof(r->src[0]);
	uint8_t *p = r->iov[0].iov_base;
	struct sr_addr src;
	uint16_t id = 0;
	ssize_t len = (ssize_t)syscall(SYS_recvfrom, nic->fd, p, SR_RX_BUFSZ, MSG_DONTWAIT | MSG_TRUNC,
				       &r->src[0], &alen);

	if (len < 0)
		return 0;
	if (len > SR_RX_BUFSZ) {
		sr_stat_inc(&nic->stats, SR_STAT_drop_short);
		return 1;
	}
	sr_addr_from_sockaddr(&src, (struct sockaddr *)&r->src[0]);
	rx_one(nic, p, (size_t)len, &src, nic->fd, NULL, &id);
	if (id)
		note_several(r);
	return 1;
}

static int rx_fd(struct sr_nic *nic, int fd, const struct sr_addr *group, unsigned max)
{
	struct sr_rxring *r = nic->rx;
	int n;

	if (max == 1 && r->plain && fd == nic->fd)
		return rx_plain(nic, r);

	size_t ctl = nic->gro && fd == nic->fd ? SR_RX_CTL : 0;

	if (ctl != r->ctllen) {
		r->ctllen = ctl;
		r->dirty = SR_NET_RX_BATCH;
	}
	for (int i = 0; i < r->dirty; i++) {
		r->msg[i].msg_hdr.msg_namelen = sizeof(r->src[i]);
		r->msg[i].msg_hdr.msg_controllen = ctl;
		r->msg[i].msg_hdr.msg_flags = 0;
	}
	r->dirty = 0;
	n = sys_recvmmsg(fd, r->msg, max, MSG_DONTWAIT);
	if (n <= 0)
		return 0;
	r->dirty = n;
	if (n > 1 && fd == nic->fd)
		note_several(r);
	for (int i = 0; i < n; i++) {
		struct sr_addr src;

		if (r->msg[i].msg_hdr.msg_flags & MSG_TRUNC) {
			sr_stat_inc(&nic->stats, SR_STAT_drop_short);
			continue;
		}
		sr_addr_from_sockaddr(&src, (struct sockaddr *)&r->src[i]);
		uint8_t *p = r->iov[i].iov_base;
		size_t len = r->msg[i].msg_len, seg = gro_size(&r->msg[i].msg_hdr);
		uint16_t id = 0;

		if (!seg || seg >= len) {
			rx_one(nic, p, len, &src, fd, group, &id);
			continue;
		}
		/* Several datagrams coalesced (GRO): consecutive IDs, from 0 for a softrdma
		 * batch; from whatever the first has otherwise. */
		note_several(r);
		size_t end = len, last = (len - 1) / seg * seg;

		if (response_last(p, last, seg)) {
			/* Requests that end with a response (a deferred ACK after the answer,
			 * sr_sq_posted): the response first, as its sender meant it. */
			uint16_t last_id = (uint16_t)(last / seg);

			end = last;
			rx_one(nic, p + last, len - last, &src, fd, group, &last_id);
		}
		for (size_t off = 0; off < end; off += seg, id++)
			rx_one(nic, p + off, end - off < seg ? end - off : seg, &src, fd, group, &id);
	}
	return n;
}

/* ---- the lone receive by recvfrom --------------------------------------------------------- */
/*
 * A polling application's ping-pong receives one lone datagram per half round trip, and with
 * UDP_GRO on it must take it by recvmmsg with a control buffer, whose copies of the message
 * header, the iovec and the control message cost ~50 ns more than recvfrom (per receive and
 * per empty poll). recvfrom cannot see the UDP_GRO segment size, and softrdma's packets carry
 * no length, so it may only be used while nothing coalesced can be queued: with UDP_GRO off,
 * the kernel cuts a GSO batch into datagrams as it queues it (udp_queue_rcv_skb,
 * udp_unexpected_gso: the option clears the socket's ACCEPT_L4, and it never sets
 * ACCEPT_FRAGLIST). The progress thread switches:
 *
 *  - on, once its watch of a polling application has seen for SR_PLAIN_QUIET_NS lone
 *    datagrams only, and at least SR_PLAIN_MIN_PACKETS of them (not silence: a connection's
 *    setup is quiet until its first batch). UDP_GRO off; then membarrier(MEMBARRIER_CMD_GLOBAL),
 *    an RCU grace period, so that every delivery that read the option still on (the softirq's
 *    check and queueing are one RCU read-side section) has queued its datagram; then, under
 *    rx_lock, the caller's drain takes what waits (recvmmsg and the control message, as ever)
 *    and only a drain that emptied the socket, all its receives lone, sets r->plain. A failed
 *    membarrier (an old kernel, seccomp, nohz_full) puts UDP_GRO back and never switches again.
 *  - off, at a look that finds SR_PLAIN_SEVERAL or more receives since the last that were not
 *    lone: several datagrams in one recvmmsg, a coalesced one, or one by recvfrom with an IPv4
 *    ID other than 0 (a piece of a batch the kernel cut: a stream). One alone (a tail-loss
 *    probe beside the answer) does not end it. Or once the watch has been over for
 *    SR_PLAIN_QUIET_NS (a short gap, the application preempted, keeps it). r->plain cleared
 *    under rx_lock (every receive reads it under that lock), then UDP_GRO on.
 *
 * Until the switch back a batch arrives cut, its packets' IDs recovered from their ICRCs
 * (rx_id_recovered). A plain period that ended within SR_PLAIN_KEEP_NS doubles the quiet time
 * before the next (up to SR_PLAIN_BACKOFF_MAX doublings): each switch on blocks the thread for
 * a grace period (8-20 ms on the 2-core VM), during which the application, polling, receives by
 * itself, and the thread's timers wait.
 */
#define SR_PLAIN_QUIET_NS 10000000ull
#define SR_PLAIN_KEEP_NS 1000000000ull
#define SR_PLAIN_BACKOFF_MAX 6
#define SR_PLAIN_SEVERAL 2
#define SR_PLAIN_MIN_PACKETS 32

static void plain_end(struct sr_nic *nic, struct sr_rxring *r, uint64_t now)
{
	int one = 1;

	pthread_mutex_lock(&nic->rx_lock);
	r->plain = false;
	pthread_mutex_unlock(&nic->rx_lock);
	if (sys_setsockopt(nic->fd, SOL_UDP, UDP_GRO, &one, sizeof(one))) {
		/* GRO stays off; recvmmsg with the control buffer serves as ever */
		r->plain_never = true;
		return;
	}
	if (r->plain_since && now - r->plain_since < SR_PLAIN_KEEP_NS) {
		if (r->backoff < SR_PLAIN_BACKOFF_MAX)
			r->backoff++;
	} else {
		r->backoff = 0;
	}
	r->plain_since = 0;
}

static void plain_begin(struct sr_nic *nic, struct sr_rxring *r, bool (*drain)(struct sr_nic *))
{
	int zero = 0;

	if (sys_setsockopt(nic->fd, SOL_UDP, UDP_GRO, &zero, sizeof(zero))) {
		r->plain_never = true;
		return;
	}
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0)) {
		sr_info("%s: no membarrier (%s): lone datagrams keep recvmmsg", nic->dev->ibdev.name,
			strerror(errno));
		r->plain_never = true;
		plain_end(nic, r, 0);
		return;
	}
	pthread_mutex_lock(&nic->rx_lock);
	atomic_store_explicit(&r->several, 0, memory_order_relaxed);
	if (drain(nic) && !atomic_load_explicit(&r->several, memory_order_relaxed))
		r->plain = true;
	pthread_mutex_unlock(&nic->rx_lock);
	if (!r->plain) {
		sr_dbg("%s: lone receives by recvfrom not begun: the drain found a batch",
		       nic->dev->ibdev.name);
		plain_end(nic, r, sr_now_ns());
		return;
	}
	r->plain_since = sr_now_ns();
	sr_stat_inc(&nic->stats, SR_STAT_rx_plain_on);
}

void sr_net_rx_plain_look(struct sr_nic *nic, bool watching, bool (*drain)(struct sr_nic *))
{
	struct sr_rxring *r = nic->rx;
	unsigned several;
	uint64_t now;

	if (!nic->gro || r->plain_never || !sr_params()->rx_plain)
		return;
	several = atomic_load_explicit(&r->several, memory_order_relaxed);
	if (several)
		atomic_store_explicit(&r->several, 0, memory_order_relaxed);
	now = sr_now_ns();
	if (watching)
		r->unwatched_since = 0;
	else if (!r->unwatched_since)
		r->unwatched_since = now;
	if (r->plain) {
		bool ended = !watching && now - r->unwatched_since >= SR_PLAIN_QUIET_NS;

		if (several >= SR_PLAIN_SEVERAL || ended) {
			sr_dbg("%s: lone receives by recvfrom end after %llu us: %s",
			       nic->dev->ibdev.name,
			       (unsigned long long)((now - r->plain_since) / 1000),
			       ended ? "the watch ended" : "not alone");
			plain_end(nic, r, now);
		}
		return;
	}
	if (!watching || several) {
		r->quiet_since = 0;
		return;
	}
	if (!r->quiet_since) {
		r->quiet_since = now;
		r->quiet_packets = sr_stat_get(&nic->stats, SR_STAT_rx_packets);
		return;
	}
	if (now - r->quiet_since < SR_PLAIN_QUIET_NS << r->backoff)
		return;
	r->quiet_since = 0;
	/* Lone datagrams, not silence: a connection's setup, before its first batch, is quiet. */
	if (sr_stat_get(&nic->stats, SR_STAT_rx_packets) - r->quiet_packets >= SR_PLAIN_MIN_PACKETS)
		plain_begin(nic, r, drain);
}
