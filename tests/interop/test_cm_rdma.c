// SPDX-License-Identifier: MIT
/*
 * rdma_cm over the IB CM (src/cm/ibcm/rdma.c) against the kernel's: every REQ in the rxe
 * captures (rping, ucmatose, ib_write_bw -R) parses into the connection's parameters (port
 * space TCP, the addresses and ports of both ends, QPN, PSN, RDMA depths, MTU, GIDs), and
 * building a REQ from those parameters gives back the kernel's REQ byte for byte; the same
 * for every REP, and for udaddy's SIDR_REQ (RDMA_PS_UDP) and SIDR_REP (QPN, Q_Key). Then
 * what the mapping refuses or chooses: private data limits per port space, the transport type
 * of UC and XRC, IPv6 addresses, a service ID or rdma_cm header that is not rdma_cm's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm/ibcm/rdma.h"
#include "net/pcap_read.h"
#include "sr_test.h"
#include "wire/hdr.h"
#include "wire/pkt.h"

static int nreq, nrep, nsidr;

/* Our build of m's message must be m's 256 bytes. */
static void same_bytes(const char *file, const struct sr_cm_mad *m, const struct sr_cm_mad *ours)
{
	uint8_t a[SR_MAD_LEN], b[SR_MAD_LEN];

	REQUIRE(sr_cm_mad_encode(m, a) == 0);
	REQUIRE(sr_cm_mad_encode(ours, b) == 0);
	for (int i = 0; i < SR_MAD_LEN; i++)
		if (a[i] != b[i]) {
			SR_FAIL("%s %s: rebuilt byte %d: 0x%02x, kernel's 0x%02x", file,
				sr_cm_attr_name(m->hdr.attr_id), i, b[i], a[i]);
			break;
		}
}

static void check_rep(const char *file, const struct sr_cm_mad *m)
{
	struct ibcm_rdma_conn p;
	struct sr_cm_mad again = *m;

	nrep++;
	ibcm_rdma_rep_parse(&m->rep, &p);
	CHECK_EQ(p.qpn, m->rep.local_qpn);
	CHECK_EQ(p.psn, m->rep.starting_psn);
	CHECK_EQ(p.target_ack_delay, 15);	/* rxe's */
	CHECK_EQ(p.pdata_len, 196);
	memset(&again.rep, 0xee, sizeof(again.rep));
	CHECK_EQ(ibcm_rdma_rep_build(&again.rep, &p), 0);
	again.rep.local_comm_id = m->rep.local_comm_id;	/* the CM's */
	again.rep.remote_comm_id = m->rep.remote_comm_id;
	same_bytes(file, m, &again);
}

/* udaddy: the UD id's SIDR_REQ (RDMA_PS_UDP) and its answer (QPN, RDMA_UDP_QKEY). */
static void check_sidr(const char *file, const struct sr_cm_mad *m)
{
	struct ibcm_rdma_conn p;
	struct sr_cm_mad again = *m;

	nsidr++;
	if (m->hdr.attr_id == SR_CM_ATTR_SIDR_REQ) {
		const struct sockaddr_in *d;

		CHECK_EQ(ibcm_rdma_sidr_req_parse(&m->sidr_req, &p), 0);
		CHECK_EQ(p.ps, IBCM_PS_UDP);
		CHECK_EQ(p.qp_type, IBV_QPT_UD);
		CHECK_EQ(p.pkey, 0xffff);
		d = (const struct sockaddr_in *)&p.dst;
		CHECK_EQ(ntohs(d->sin_port), 7174);
		CHECK_EQ(ntohl(d->sin_addr.s_addr), 0x0a000001);
		CHECK_EQ(p.pdata_len, 180);
		memset(&again.sidr_req, 0xee, sizeof(again.sidr_req));
		CHECK_EQ(ibcm_rdma_sidr_req_build(&again.sidr_req, &p), 0);
		again.sidr_req.request_id = m->sidr_req.request_id;
	} else {
		ibcm_rdma_sidr_rep_parse(&m->sidr_rep, &p);
		CHECK_EQ(p.sidr_status, SR_CM_SIDR_SUCCESS);
		CHECK_EQ(p.qkey, 0x01234567);		/* RDMA_UDP_QKEY */
		CHECK_EQ(p.qpn, m->sidr_rep.qpn);
		p.pdata_len = 136;
		memset(&again.sidr_rep, 0xee, sizeof(again.sidr_rep));
		CHECK_EQ(ibcm_rdma_sidr_rep_build(&again.sidr_rep, m->sidr_rep.service_id, &p), 0);
		again.sidr_rep.request_id = m->sidr_rep.request_id;
	}
	same_bytes(file, m, &again);
}

static void check_req(const char *file, const struct sr_cm_mad *m)
{
	struct ibcm_rdma_conn p;
	struct sr_cm_mad again = *m;
	uint8_t a[SR_MAD_LEN], b[SR_MAD_LEN];
	const struct sockaddr_in *s, *d;
	char sa[32], da[32];

	nreq++;
	CHECK_EQ(ibcm_rdma_req_parse(&m->req, &p), 0);
	CHECK_EQ(p.ps, IBCM_PS_TCP);
	CHECK_EQ(p.qp_type, IBV_QPT_RC);
	CHECK_EQ(p.src.ss_family, AF_INET);
	s = (const struct sockaddr_in *)&p.src;
	d = (const struct sockaddr_in *)&p.dst;
	inet_ntop(AF_INET, &s->sin_addr, sa, sizeof(sa));
	inet_ntop(AF_INET, &d->sin_addr, da, sizeof(da));
	CHECK(!strcmp(sa, "10.0.0.2"));
	CHECK(!strcmp(da, "10.0.0.1"));
	CHECK_EQ(ntohs(d->sin_port), m->req.service_id & 0xffff);
	CHECK(ntohs(s->sin_port) != 0);
	CHECK_EQ(p.qpn, m->req.local_qpn);
	CHECK_EQ(p.psn, m->req.starting_psn);
	CHECK_EQ(p.mtu, IBV_MTU_1024);
	CHECK_EQ(p.pdata_len, 56);
	CHECK(p.pdata == m->req.pdata + SR_CMA_HDR_LEN);
	CHECK_EQ(p.sgid.raw[15], 2);	/* ::ffff:10.0.0.2 */
	CHECK_EQ(p.dgid.raw[15], 1);
	/* the kernel's choices are ibcm_rdma_defaults' */
	CHECK_EQ(p.remote_cm_response_timeout, 20);
	CHECK_EQ(p.local_cm_response_timeout, 20);
	CHECK_EQ(p.max_cm_retries, 15);
	CHECK_EQ(p.local_lid, 0xffff);
	CHECK_EQ(p.hop_limit, 64);
	CHECK_EQ(p.local_ack_timeout, 19);
	/* and back: the kernel's REQ, byte for byte */
	memset(&again.req, 0xee, sizeof(again.req));
	CHECK_EQ(ibcm_rdma_req_build(&again.req, &p), 0);
	again.req.local_comm_id = m->req.local_comm_id;	/* the CM's, not the mapping's */
	REQUIRE(sr_cm_mad_encode(m, a) == 0);
	REQUIRE(sr_cm_mad_encode(&again, b) == 0);
	for (int i = 0; i < SR_MAD_LEN; i++)
		if (a[i] != b[i]) {
			SR_FAIL("%s: rebuilt REQ byte %d: 0x%02x, kernel's 0x%02x", file, i, b[i], a[i]);
			break;
		}
}

static void scan(const char *dir, const char *name)
{
	char path[PATH_MAX + 64];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;

	snprintf(path, sizeof(path), "%s/suite/%s", dir, name);
	REQUIRE(sr_pcapr_open(&r, path) == 0);
	while (sr_pcapr_next(&r, &rec) == 1) {
		struct sr_ipudp ipu;
		const uint8_t *pl;
		size_t plen;
		uint8_t *pkt;
		struct sr_pkt p;
		struct sr_cm_mad m;

		if (sr_pcapr_udp(rec.ip, rec.ip_len, &ipu, &pl, &plen) ||
		    ipu.dport != SR_ROCEV2_UDP_PORT || plen < SR_BTH_LEN ||
		    sr_bth_qpn((const void *)pl) != SR_GSI_QPN)
			continue;
		pkt = malloc(plen);
		REQUIRE(pkt);
		memcpy(pkt, pl, plen);
		REQUIRE(sr_pkt_parse(&p, pkt, plen) == SR_PE_OK);
		if (sr_cm_mad_decode(&m, p.hdr + p.hdr_len, p.paylen) != 0)
			SR_FAIL("%s: a MAD to QP1 that is not a CM MAD", name);
		else if (m.hdr.attr_id == SR_CM_ATTR_REQ)
			check_req(name, &m);
		else if (m.hdr.attr_id == SR_CM_ATTR_REP)
			check_rep(name, &m);
		else if (m.hdr.attr_id == SR_CM_ATTR_SIDR_REQ || m.hdr.attr_id == SR_CM_ATTR_SIDR_REP)
			check_sidr(name, &m);
		free(pkt);
	}
	sr_pcapr_close(&r);
}

static void check_choices(void)
{
	struct ibcm_rdma_conn p, q;
	struct sr_cm_req req;
	struct sockaddr_in6 *s6, *d6;
	uint8_t pd[92];

	ibcm_rdma_defaults(&p);
	/* addresses: IPv6 */
	s6 = (struct sockaddr_in6 *)&p.src;
	d6 = (struct sockaddr_in6 *)&p.dst;
	s6->sin6_family = d6->sin6_family = AF_INET6;
	inet_pton(AF_INET6, "fd00::2", &s6->sin6_addr);
	inet_pton(AF_INET6, "fd00::1", &d6->sin6_addr);
	s6->sin6_port = htons(40000);
	d6->sin6_port = htons(7471);
	memset(pd, 0xab, sizeof(pd));
	p.pdata = pd;
	p.pdata_len = 56;
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), 0);
	CHECK_EQ(req.service_id, 0x0000000001061d2full);
	CHECK_EQ(req.pdata[1], 0x60);
	CHECK_EQ(req.pdata[SR_CMA_HDR_LEN], 0xab);
	CHECK_EQ(ibcm_rdma_req_parse(&req, &q), 0);
	CHECK_EQ(q.dst.ss_family, AF_INET6);
	CHECK(!memcmp(&((struct sockaddr_in6 *)&q.src)->sin6_addr, &s6->sin6_addr, 16));
	CHECK_EQ(ntohs(((struct sockaddr_in6 *)&q.src)->sin6_port), 40000);
	CHECK_EQ(ntohs(((struct sockaddr_in6 *)&q.dst)->sin6_port), 7471);
	/* private data limits: 56 after the header in TCP/UDP, 92 in the IB port space */
	p.pdata_len = 57;
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), -EINVAL);
	p.ps = IBCM_PS_IB;
	p.pdata_len = 92;
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), 0);
	CHECK_EQ(req.pdata[0], 0xab);	/* no rdma_cm header */
	CHECK_EQ(req.service_id, 0x00000000013f1d2full);
	p.pdata_len = 93 & 0xff;
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), -EINVAL);
	p.ps = IBCM_PS_TCP;
	p.pdata_len = 0;
	/* transport types: UC 1; XRC 3 with extended type 1, parsed as the XRC target's half */
	p.qp_type = IBV_QPT_UC;
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), 0);
	CHECK_EQ(req.transport_service_type, 1);
	p.qp_type = IBV_QPT_XRC_SEND;
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), 0);
	CHECK_EQ(req.transport_service_type, 3);
	CHECK_EQ(req.ext_transport_type, 1);
	CHECK_EQ(ibcm_rdma_req_parse(&req, &q), 0);
	CHECK_EQ(q.qp_type, IBV_QPT_XRC_RECV);
	p.qp_type = IBV_QPT_UD;		/* UD goes by SIDR, not REQ */
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), -EINVAL);
	p.qp_type = IBV_QPT_RC;
	/* REP and SIDR private data limits: 196, 180 after the header (TCP/UDP), 136 */
	{
		struct sr_cm_rep rep;
		struct sr_cm_sidr_req sreq;
		struct sr_cm_sidr_rep srep;
		uint8_t big[SR_CM_SIDR_REQ_PDATA + 1] = { 0 };

		p.pdata = big;
		p.pdata_len = 196;
		CHECK_EQ(ibcm_rdma_rep_build(&rep, &p), 0);
		p.pdata_len = 197;
		CHECK_EQ(ibcm_rdma_rep_build(&rep, &p), -EINVAL);
		p.ps = IBCM_PS_UDP;
		p.pdata_len = 180;
		CHECK_EQ(ibcm_rdma_sidr_req_build(&sreq, &p), 0);
		p.pdata_len = 181;
		CHECK_EQ(ibcm_rdma_sidr_req_build(&sreq, &p), -EINVAL);
		p.pdata_len = 136;
		p.sidr_status = SR_CM_SIDR_UNSUPPORTED;
		p.qpn = 0x42;
		p.qkey = 0x01234567;
		CHECK_EQ(ibcm_rdma_sidr_rep_build(&srep, 1, &p), 0);
		CHECK_EQ(srep.status, SR_CM_SIDR_UNSUPPORTED);
		CHECK_EQ(srep.qpn, 0);		/* no QP for a service not found */
		p.pdata_len = 137;
		CHECK_EQ(ibcm_rdma_sidr_rep_build(&srep, 1, &p), -EINVAL);
		p.ps = IBCM_PS_TCP;
		p.pdata = pd;
		p.pdata_len = 0;
		p.sidr_status = 0;
	}
	/* families must agree */
	p.src.ss_family = AF_INET;
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), -EINVAL);
	p.src.ss_family = AF_INET6;
	/* a path MTU that names no MTU (0, 6..15) is refused with REJ reason 26 */
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), 0);
	for (unsigned mtu = 0; mtu < 16; mtu++) {
		req.path_mtu = (uint8_t)mtu;
		CHECK_EQ(ibcm_rdma_req_parse(&req, &q), 0);
		CHECK_EQ(ibcm_rdma_req_check(&q), mtu >= 1 && mtu <= 5 ? 0 : 26);
	}
	/* not rdma_cm's: another service ID prefix, an unknown port space, a bad header */
	CHECK_EQ(ibcm_rdma_req_build(&req, &p), 0);
	req.service_id |= 1ull << 40;
	CHECK_EQ(ibcm_rdma_req_parse(&req, &q), -EINVAL);
	req.service_id = 0x0000000001231d2full;
	CHECK_EQ(ibcm_rdma_req_parse(&req, &q), -EINVAL);
	req.service_id = 0x0000000001061d2full;
	req.pdata[1] = 0x50;
	CHECK_EQ(ibcm_rdma_req_parse(&req, &q), -EINVAL);
	req.pdata[1] = 0x60;
	req.transport_service_type = 2;	/* RD */
	CHECK_EQ(ibcm_rdma_req_parse(&req, &q), -EINVAL);
}

/* ClassPortInfo (IBA 13.4.8.1) as the port and CM redirect carries it (REJ reason 24's reject
 * info, SIDR_REP status 4's additional info; docs/cm.md): each field at its byte offset, the
 * round trip exact, and a REJ MAD with it at the REJ's offsets. */
static void check_class_port_info(void)
{
	struct sr_class_port_info c = {
		.base_version = 1, .class_version = 2, .capability_mask = 0x1234,
		.capability_mask2 = 0x5abcdef, .resp_time_value = 16, .redirect_tc = 0xa5,
		.redirect_sl = 0x9, .redirect_fl = 0xfedcb, .redirect_lid = 0xffff,
		.redirect_pkey = 0xffff, .redirect_qp = 1, .redirect_qkey = 0x80010000,
		.trap_tc = 0x11, .trap_sl = 0x2, .trap_fl = 0x33333, .trap_lid = 0x4444,
		.trap_pkey = 0x5555, .trap_hl = 0x66, .trap_qp = 0x777777, .trap_qkey = 0x88888888,
	}, d;
	static const uint8_t gid[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x01, 0xff, 0xff, 10, 1, 2, 3 };
	uint8_t b[SR_CLASS_PORT_INFO_LEN], mad[SR_MAD_LEN];
	struct sr_cm_mad m, back;

	memcpy(c.redirect_gid, gid, 16);
	memset(c.trap_gid, 0xee, 16);
	sr_class_port_info_encode(&c, b);
	CHECK_EQ(b[0], 1);
	CHECK_EQ(b[1], 2);
	CHECK_EQ(b[2] << 8 | b[3], 0x1234);
	CHECK_EQ((uint32_t)b[4] << 24 | (uint32_t)b[5] << 16 | (uint32_t)b[6] << 8 | b[7],
		 0x5abcdefu << 5 | 16);
	CHECK(!memcmp(b + 8, gid, 16));
	CHECK_EQ((uint32_t)b[24] << 24 | (uint32_t)b[25] << 16 | (uint32_t)b[26] << 8 | b[27],
		 0xa5u << 24 | 0x9u << 20 | 0xfedcb);
	CHECK_EQ(b[28] << 8 | b[29], 0xffff);			/* RedirectLID */
	CHECK_EQ(b[30] << 8 | b[31], 0xffff);			/* RedirectP_Key */
	CHECK_EQ(b[32], 0);					/* reserved */
	CHECK_EQ(b[33] << 16 | b[34] << 8 | b[35], 1);		/* RedirectQP */
	CHECK_EQ((uint32_t)b[36] << 24 | (uint32_t)b[37] << 16 | (uint32_t)b[38] << 8 | b[39],
		 0x80010000u);
	CHECK_EQ(b[40], 0xee);
	CHECK_EQ(b[55], 0xee);
	CHECK_EQ(b[60] << 8 | b[61], 0x4444);
	CHECK_EQ(b[62] << 8 | b[63], 0x5555);
	CHECK_EQ(b[64], 0x66);
	CHECK_EQ(b[65] << 16 | b[66] << 8 | b[67], 0x777777);
	CHECK_EQ(b[71], 0x88);
	sr_class_port_info_decode(&d, b);
	CHECK(!memcmp(&c, &d, sizeof(c)));

	memset(&m, 0, sizeof(m));
	m.hdr = (struct sr_mad_hdr){ .base_version = 1, .mgmt_class = SR_MAD_CLASS_CM,
				     .class_version = 2, .method = SR_MAD_METHOD_SEND, .tid = 7,
				     .attr_id = SR_CM_ATTR_REJ };
	m.rej.remote_comm_id = 0x01020304;
	m.rej.msg_rejected = SR_CM_MSG_REQ;
	m.rej.reason = SR_CM_REJ_PORT_CM_REDIRECT;
	m.rej.ari_len = SR_CLASS_PORT_INFO_LEN;
	memcpy(m.rej.ari, b, sizeof(b));
	CHECK_EQ(sr_cm_mad_encode(&m, mad), 0);
	CHECK_EQ(mad[SR_MAD_HDR_LEN + 8], 0);			/* MessageRejected REQ */
	CHECK_EQ(mad[SR_MAD_HDR_LEN + 9], 72 << 1);		/* RejectedInfoLength 72 */
	CHECK_EQ(mad[SR_MAD_HDR_LEN + 10] << 8 | mad[SR_MAD_HDR_LEN + 11], 24);
	CHECK(!memcmp(mad + SR_MAD_HDR_LEN + 12, b, sizeof(b)));
	CHECK_EQ(sr_cm_mad_decode(&back, mad, sizeof(mad)), 0);
	CHECK_EQ(back.rej.ari_len, 72);
	CHECK_EQ(back.rej.reason, 24);
}

int main(void)
{
	const char *src = getenv("SR_SOURCE_DIR");
	char dir[PATH_MAX];

	sr_test_timeout(60);
	if (src && *src)
		snprintf(dir, sizeof(dir), "%.*s/tests/interop/rxe-pcaps", PATH_MAX - 32, src);
	else
		snprintf(dir, sizeof(dir), "tests/interop/rxe-pcaps");
	scan(dir, "rping_C5.pcap");
	scan(dir, "ucmatose.pcap");
	scan(dir, "ib_write_bw_rdmacm.pcap");
	scan(dir, "udaddy.pcap");
	CHECK_EQ(nreq, 4);
	CHECK_EQ(nrep, 4);
	CHECK_EQ(nsidr, 2);
	check_choices();
	check_class_port_info();
	return sr_test_done("test_cm_rdma");
}
