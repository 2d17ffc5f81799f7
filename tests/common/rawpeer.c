/* SPDX-License-Identifier: MIT */
/* A raw RoCEv2 endpoint for tests: see rawpeer.h. */
#include "rawpeer.h"
#include "sr_test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/udp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

bool rp_gid_to_sin(const union ibv_gid *gid, struct sockaddr_in *sin)
{
	static const uint8_t zero8[8];
	uint16_t port;

	if (memcmp(gid->raw, zero8, 8) || gid->raw[10] != 0xff || gid->raw[11] != 0xff)
		return false;
	port = sr_ld_be16(&gid->raw[8]);
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port ? port : SR_ROCEV2_UDP_PORT);
	memcpy(&sin->sin_addr, &gid->raw[12], 4);
	return true;
}

int rp_open(struct rawpeer *rp, const union ibv_gid *dev_gid)
{
	socklen_t sl = sizeof(rp->me);
	uint16_t port;

	memset(rp, 0, sizeof(*rp));
	if (!rp_gid_to_sin(dev_gid, &rp->dev))
		return EAFNOSUPPORT;
	rp->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (rp->fd < 0)
		return errno;
	rp->me.sin_family = AF_INET;
	rp->me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	rp->me.sin_port = 0;
	if (bind(rp->fd, (struct sockaddr *)&rp->me, sizeof(rp->me)) ||
	    getsockname(rp->fd, (struct sockaddr *)&rp->me, &sl)) {
		int err = errno;

		close(rp->fd);
		return err;
	}
	/* Our GID: the port is never 4791 (the kernel picked an ephemeral one), so it goes in. */
	port = ntohs(rp->me.sin_port);
	memset(&rp->gid, 0, sizeof(rp->gid));
	sr_st_be16(&rp->gid.raw[8], port);
	rp->gid.raw[10] = 0xff;
	rp->gid.raw[11] = 0xff;
	memcpy(&rp->gid.raw[12], &rp->me.sin_addr, 4);
	return 0;
}

void rp_close(struct rawpeer *rp)
{
	if (rp->fd > 0)
		close(rp->fd);
	rp->fd = -1;
}

static void tuple(const struct rawpeer *rp, struct sr_ipudp *t, bool outgoing)
{
	const struct sockaddr_in *s = outgoing ? &rp->me : &rp->dev;
	const struct sockaddr_in *d = outgoing ? &rp->dev : &rp->me;

	memset(t, 0, sizeof(*t));
	t->family = 4;
	memcpy(t->src, &s->sin_addr, 4);
	memcpy(t->dst, &d->sin_addr, 4);
	t->sport = ntohs(s->sin_port);
	t->dport = ntohs(d->sin_port);
	t->ip_id = 0;		/* what a softrdma receiver assumes first (src/wire/icrc.h) */
	t->df = true;
	t->ttl = 64;
}

uint32_t rp_icrc_id(const struct rawpeer *rp, const void *buf, size_t len, uint16_t id)
{
	struct sr_ipudp t;

	tuple(rp, &t, true);
	t.ip_id = id;
	return sr_icrc_calc(&t, buf, len);
}

uint32_t rp_icrc(const struct rawpeer *rp, const void *buf, size_t len)
{
	return rp_icrc_id(rp, buf, len, 0);
}

int rp_send_gso(struct rawpeer *rp, const void *buf, size_t len, uint16_t seg)
{
	union {
		char b[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} ctl;
	struct iovec v = { (void *)buf, len };
	struct msghdr m = {
		.msg_name = &rp->dev, .msg_namelen = sizeof(rp->dev), .msg_iov = &v, .msg_iovlen = 1,
		.msg_control = ctl.b, .msg_controllen = sizeof(ctl.b),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	memset(&ctl, 0, sizeof(ctl));
	c->cmsg_level = SOL_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(seg));
	memcpy(CMSG_DATA(c), &seg, sizeof(seg));
	return sendmsg(rp->fd, &m, 0) == (ssize_t)len ? 0 : errno ? errno : EIO;
}

int rp_send_raw(struct rawpeer *rp, const void *buf, size_t len)
{
	ssize_t r = sendto(rp->fd, buf, len, 0, (const struct sockaddr *)&rp->dev, sizeof(rp->dev));

	return r == (ssize_t)len ? 0 : errno ? errno : EIO;
}

int rp_send(struct rawpeer *rp, const void *hdr, size_t hlen, const void *payload,
	    size_t paylen, uint32_t icrc_xor)
{
	uint8_t buf[65536];
	unsigned pad = (unsigned)(-paylen & 3);
	size_t len = hlen + paylen + pad + SR_ICRC_LEN;
	struct sr_bth *bth = (struct sr_bth *)buf;

	if (len > sizeof(buf) || hlen < SR_BTH_LEN)
		return EINVAL;
	memcpy(buf, hdr, hlen);
	bth->flags = (uint8_t)((bth->flags & ~SR_BTH_PAD_MASK) | (pad << SR_BTH_PAD_SHIFT));
	if (paylen)
		memcpy(buf + hlen, payload, paylen);
	memset(buf + hlen + paylen, 0, pad);
	sr_st_le32(buf + len - SR_ICRC_LEN, rp_icrc(rp, buf, len) ^ icrc_xor);
	return rp_send_raw(rp, buf, len);
}

int rp_recv(struct rawpeer *rp, void *buf, size_t cap, struct sr_pkt *pkt, int timeout_ms)
{
	struct pollfd pfd = { .fd = rp->fd, .events = POLLIN };
	struct sr_ipudp t;
	struct sr_pkt tmp;
	ssize_t n;

	if (poll(&pfd, 1, timeout_ms) != 1)
		return 0;
	n = recv(rp->fd, buf, cap, 0);
	if (n <= 0)
		return 0;
	if (!pkt)
		pkt = &tmp;
	if (sr_pkt_parse(pkt, buf, (size_t)n) != SR_PE_OK)
		return -1;
	tuple(rp, &t, false);
	/* ID 0 from a packet sent alone; packet i of a GSO batch has ID i (src/net/udp.c). */
	if (!sr_icrc_check(&t, buf, (size_t)n) &&
	    !(t.family == 4 && sr_icrc_recover_v4_id(&t, buf, (size_t)n)))
		return -1;
	return (int)n;
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void rp_pump(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	uint64_t end = ms_now() + (uint64_t)ms;

	do {
		ibv_poll_cq(cq, 1, &wc);
	} while (ms_now() < end);
}

int rp_recv_polling(struct rawpeer *rp, struct ibv_cq *cq, void *buf, size_t cap,
		    struct sr_pkt *pkt, int timeout_ms)
{
	uint64_t end = ms_now() + (uint64_t)timeout_ms;
	int n;

	do {
		rp_pump(cq, 1);
		n = rp_recv(rp, buf, cap, pkt, 0);
	} while (n == 0 && ms_now() < end);
	return n;
}

size_t rp_hdr_ack(void *hdr, uint32_t dqpn, uint32_t psn, uint8_t syndrome, uint32_t msn)
{
	uint8_t op = SR_OPC(SR_TR_RC, SR_OP_ACK);
	const struct sr_opcode_info *oi = &sr_opcode[op];

	memset(hdr, 0, oi->length);
	sr_bth_build(hdr, op, false, false, 0, SR_DEFAULT_PKEY, dqpn, false, psn);
	sr_aeth_build((struct sr_aeth *)((uint8_t *)hdr + oi->offset[SR_H_AETH]), syndrome, msn);
	return oi->length;
}

int rp_send_ack(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, uint8_t syndrome)
{
	uint8_t hdr[64];
	size_t hlen = rp_hdr_ack(hdr, dqpn, psn & 0xffffff, syndrome, 0);

	return rp_send(rp, hdr, hlen, NULL, 0, 0);
}

int rp_send_write_byte(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, bool ackreq,
		       uint8_t byte4, uint64_t va, uint32_t rkey)
{
	uint8_t hdr[64], b = (uint8_t)psn;
	size_t hlen = rp_hdr_write(hdr, SR_OPC(SR_TR_RC, SR_OP_WRITE_ONLY), dqpn, psn, ackreq, va,
				   rkey, 1);

	hdr[4] |= byte4;
	return rp_send(rp, hdr, hlen, &b, 1, 0);
}

size_t rp_hdr_write(void *hdr, uint8_t opcode, uint32_t dqpn, uint32_t psn, bool ackreq,
		    uint64_t va, uint32_t rkey, uint32_t len)
{
	const struct sr_opcode_info *oi = &sr_opcode[opcode];

	memset(hdr, 0, oi->length);
	sr_bth_build(hdr, opcode, false, false, 0, SR_DEFAULT_PKEY, dqpn, ackreq, psn);
	if (oi->mask & SR_M_RETH)
		sr_reth_build((struct sr_reth *)((uint8_t *)hdr + oi->offset[SR_H_RETH]), va, rkey,
			      len);
	return oi->length;
}

size_t rp_hdr_send(void *hdr, uint8_t opcode, uint32_t dqpn, uint32_t psn, bool ackreq)
{
	const struct sr_opcode_info *oi = &sr_opcode[opcode];

	memset(hdr, 0, oi->length);
	sr_bth_build(hdr, opcode, false, false, 0, SR_DEFAULT_PKEY, dqpn, ackreq, psn);
	return oi->length;
}

bool rp_quiet(struct rawpeer *rp, int timeout_ms, struct sr_pkt *pkt)
{
	static uint8_t buf[65536];

	return rp_recv(rp, buf, sizeof(buf), pkt, timeout_ms) <= 0;
}

bool rp_expect_quiet(struct rawpeer *rp, int timeout_ms, const char *want, int line)
{
	struct sr_pkt pkt;

	if (rp_quiet(rp, timeout_ms, &pkt))
		return true;
	SR_FAIL("line %d: %s PSN %u sent within %d ms, wanted %s", line,
		sr_opcode_name(pkt.opcode), pkt.psn, timeout_ms, want);
	return false;
}

int rp_send_read_resp_part(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, const void *data,
			   uint32_t len, uint32_t mtu, uint32_t from, uint32_t to, uint32_t msn)
{
	uint32_t n = len ? (len + mtu - 1) / mtu : 1;

	for (uint32_t k = from; k < to && k < n; k++) {
		uint8_t hdr[64];
		uint32_t plen = len - k * mtu < mtu ? len - k * mtu : mtu;
		uint8_t op = SR_OPC(SR_TR_RC, n == 1 ? SR_OP_READ_RESP_ONLY
					      : k == 0 ? SR_OP_READ_RESP_FIRST
					      : k == n - 1 ? SR_OP_READ_RESP_LAST
							   : SR_OP_READ_RESP_MIDDLE);
		const struct sr_opcode_info *oi = &sr_opcode[op];
		int ret;

		memset(hdr, 0, sizeof(hdr));
		sr_bth_build((struct sr_bth *)hdr, op, false, false, 0, SR_DEFAULT_PKEY, dqpn, false,
			     (psn + k) & 0xffffff);
		if (oi->mask & SR_M_AETH)
			sr_aeth_build((struct sr_aeth *)(hdr + oi->offset[SR_H_AETH]),
				      SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, msn);
		ret = rp_send(rp, hdr, oi->length, (const uint8_t *)data + k * mtu, plen, 0);
		if (ret)
			return ret;
	}
	return 0;
}

int rp_send_read_resp(struct rawpeer *rp, uint32_t dqpn, uint32_t psn, const void *data,
		      uint32_t len, uint32_t mtu, int skip, uint32_t msn)
{
	int ret;

	if (skip < 0)
		return rp_send_read_resp_part(rp, dqpn, psn, data, len, mtu, 0, UINT32_MAX, msn);
	ret = rp_send_read_resp_part(rp, dqpn, psn, data, len, mtu, 0, (uint32_t)skip, msn);
	return ret ? ret : rp_send_read_resp_part(rp, dqpn, psn, data, len, mtu, (uint32_t)skip + 1,
						  UINT32_MAX, msn);
}

int rp_send_small(struct rawpeer *rp, uint32_t dqpn, uint32_t *psn)
{
	uint8_t hdr[64], msg[16];
	size_t hlen = rp_hdr_send(hdr, SR_OPC(SR_TR_RC, SR_OP_SEND_ONLY), dqpn, *psn, true);
	int ret;

	memset(msg, (int)(*psn & 0xff), sizeof(msg));
	ret = rp_send(rp, hdr, hlen, msg, sizeof(msg), 0);
	*psn = (*psn + 1) & 0xffffff;
	return ret;
}

void rp_drain(struct rawpeer *rp)
{
	uint8_t buf[256];
	struct sr_pkt pkt;

	while (rp_recv(rp, buf, sizeof(buf), &pkt, 0) > 0)
		;
}
