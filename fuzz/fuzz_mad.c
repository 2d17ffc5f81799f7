/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: one MAD into the IB CM's codec (src/wire/mad.c) and rdma_cm's mapping of
 * it (src/cm/ibcm/rdma.c), the code a CM MAD from QP1 meets first (src/cm/ibcm/agent.c
 * decodes, drive.c parses). The input is the MAD: when it is not 256 bytes long the decoder
 * must refuse it (SR_MAD_EBADLEN), and the rest of the checks run on it cut or zero-padded to
 * 256 bytes.
 *
 * What counts as a crash besides ASan/UBSan (abort()):
 *  - the MAD header does not survive decode + encode (bytes other than the reserved 18-19
 *    differ) or decode + encode + decode;
 *  - sr_cm_mad_decode's verdict is not the one the header calls for (another base version,
 *    class or class version: SR_MAD_ENOTCM; an attribute it does not decode, LAP, APR,
 *    ClassPortInfo...: SR_MAD_EATTR, with the header still decoded);
 *  - a message it accepts (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP) is not
 *    encoded back to exactly its input bytes with the reserved bits cleared (the reserved
 *    bits are listed here from the IBA's tables, independently of the codec), or does not
 *    decode again to the same fields;
 *  - rdma_cm's header (sr_cma_hdr_decode) in a REQ's or SIDR_REQ's private data: accepted
 *    with a version other than 0 or an IP version other than 4 or 6, refused otherwise, or
 *    not encoded back to its bytes (IPVersion's reserved low nibble aside);
 *  - rdma_cm's parse of a REQ / SIDR_REQ (ibcm_rdma_req_parse, ..._sidr_req_parse) accepts a
 *    service ID that is not 0x0000000001 PS PORT of a known port space, gives private data
 *    outside the message, an address family other than the header's, ports other than the
 *    header's and the service ID's; or what it parsed, built again (ibcm_rdma_req_build,
 *    ..._sidr_req_build), does not parse to the same connection;
 *  - the ClassPortInfo a REJ's reject info or a SIDR_REP's additional info may hold (the port
 *    and CM redirect, REJ reason 24 / SIDR_REP status 4) does not survive decode + encode as
 *    its 72 bytes with the reserved byte 32 cleared, or decode + encode + decode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>

#include "cm/ibcm/rdma.h"
#include "wire/mad.h"

static void fail(const char *what, uint16_t attr)
{
	fprintf(stderr, "fuzz_mad: %s (attribute 0x%04x %s)\n", what, attr, sr_cm_attr_name(attr));
	abort();
}

/* ---- the bits each message defines (IBA vol 1, 12.6 tables 106-121; mad.h's layout) -------- */
static uint8_t defined[SR_MAD_LEN];

/* Marks `width` bits from bit `bit` (0: the most significant) of byte `byte` as defined. */
static void mark(unsigned byte, unsigned bit, unsigned width)
{
	for (unsigned i = 0; i < width; i++) {
		unsigned b = bit + i;

		defined[byte + b / 8] |= (uint8_t)(0x80u >> (b % 8));
	}
}

static void bytes(unsigned byte, unsigned n)
{
	mark(byte, 0, 8 * n);
}

/* A path of a REQ at data offset o (44 bytes). */
static void path(unsigned o, bool alternate)
{
	bytes(o, 36);			/* LIDs, GIDs */
	mark(o + 36, 0, 20);		/* FlowLabel */
	mark(o + 36, 26, 6);		/* PacketRate (6 bits reserved before it) */
	bytes(o + 40, 2);		/* TrafficClass, HopLimit */
	mark(o + 42, 0, 5);		/* SL, SubnetLocal */
	mark(o + 43, 0, 5);		/* LocalAckTimeout */
	if (alternate)
		mark(o + 43, 5, 1);	/* the REQ's SAP Supported bit */
}

/* Fills `defined` for attribute a: 0, or -1 for an attribute the codec does not decode. */
static int layout(uint16_t a)
{
	const unsigned d = SR_MAD_HDR_LEN;

	memset(defined, 0, sizeof(defined));
	bytes(0, 18);			/* the header but its reserved bytes 18-19 */
	bytes(20, 4);
	switch (a) {
	case SR_CM_ATTR_REQ:
		bytes(d + 0, 4);	/* Local Communication ID */
		bytes(d + 8, 16);	/* Service ID, Local CA GUID */
		bytes(d + 28, 24);	/* Q_Key .. MaxCMRetries/SRQ/ExtTransportType: all defined */
		path(d + 52, false);
		path(d + 96, true);
		bytes(d + 140, SR_CM_REQ_PDATA);
		return 0;
	case SR_CM_ATTR_MRA:
		bytes(d + 0, 8);
		mark(d + 8, 0, 2);	/* Message MRAed */
		mark(d + 9, 0, 5);	/* Service Timeout */
		bytes(d + 10, SR_CM_MRA_PDATA);
		return 0;
	case SR_CM_ATTR_REJ:
		bytes(d + 0, 8);
		mark(d + 8, 0, 2);	/* Message Rejected */
		mark(d + 9, 0, 7);	/* Reject Info Length */
		bytes(d + 10, 2 + SR_CM_REJ_ARI + SR_CM_REJ_PDATA);
		return 0;
	case SR_CM_ATTR_REP:
		bytes(d + 0, 12);	/* IDs, Q_Key */
		bytes(d + 12, 3);	/* Local QPN */
		bytes(d + 16, 3);	/* Local EECN */
		bytes(d + 20, 3);	/* Starting PSN */
		bytes(d + 24, 3);	/* resources, depth, TargetAckDelay/Failover/E2E */
		mark(d + 27, 0, 4);	/* RNR Retry Count, SRQ */
		bytes(d + 28, 8 + SR_CM_REP_PDATA);
		return 0;
	case SR_CM_ATTR_RTU:
	case SR_CM_ATTR_DREP:
		bytes(d + 0, 8 + SR_CM_RTU_PDATA);
		return 0;
	case SR_CM_ATTR_DREQ:
		bytes(d + 0, 8);
		bytes(d + 8, 3);	/* Remote QPN/EECN */
		bytes(d + 12, SR_CM_DREQ_PDATA);
		return 0;
	case SR_CM_ATTR_SIDR_REQ:
		bytes(d + 0, 6);	/* Request ID, P_Key */
		bytes(d + 8, 8 + SR_CM_SIDR_REQ_PDATA);
		return 0;
	case SR_CM_ATTR_SIDR_REP:
		bytes(d + 0, 6);	/* Request ID, Status, Additional Info Length */
		bytes(d + 8, 3);	/* QPN */
		bytes(d + 12, 12 + SR_CM_SIDR_REP_INFO + SR_CM_SIDR_REP_PDATA);
		return 0;
	default:
		return -1;
	}
}

/* ---- rdma_cm's header and parse ------------------------------------------------------------ */
static void check_cma_hdr(const uint8_t *pdata, uint16_t attr)
{
	struct sr_cma_hdr h, h2;
	uint8_t back[SR_CMA_HDR_LEN], want[SR_CMA_HDR_LEN];
	int rc;
	bool ok = pdata[0] == 0 && ((pdata[1] >> 4) == 4 || (pdata[1] >> 4) == 6);

	memset(&h, 0, sizeof(h));
	memset(&h2, 0, sizeof(h2));
	rc = sr_cma_hdr_decode(&h, pdata);
	if ((rc == 0) != ok)
		fail(rc ? "cma_hdr refused although valid" : "cma_hdr accepted although invalid",
		     attr);
	memset(back, 0xa5, sizeof(back));
	sr_cma_hdr_encode(&h, back);
	memcpy(want, pdata, sizeof(want));
	want[1] &= 0xf0;		/* IPVersion(4) reserved(4) */
	if (memcmp(back, want, sizeof(want)))
		fail("cma_hdr does not survive decode + encode", attr);
	if (sr_cma_hdr_decode(&h2, back) != rc || memcmp(&h, &h2, sizeof(h)))
		fail("cma_hdr does not survive decode + encode + decode", attr);
}

static uint16_t sa_port(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET ? ((const struct sockaddr_in *)ss)->sin_port
					      : ((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* What ibcm_rdma_*_parse accepted: its service ID, addresses and private data. */
static void check_conn(const struct ibcm_rdma_conn *p, uint64_t service_id, const uint8_t *pdata,
		       size_t pdata_size, uint16_t attr)
{
	bool ip = p->ps == IBCM_PS_TCP || p->ps == IBCM_PS_UDP || p->ps == IBCM_PS_IPOIB;

	if (service_id >> 32 || (uint16_t)(service_id >> 16) != p->ps ||
	    (!ip && p->ps != IBCM_PS_IB))
		fail("rdma_cm parse accepted a service ID that is not rdma_cm's", attr);
	if (p->pdata < pdata || p->pdata + p->pdata_len > pdata + pdata_size)
		fail("rdma_cm parse gives private data outside the message", attr);
	if (ip) {
		struct sr_cma_hdr h;
		int fam;

		if (sr_cma_hdr_decode(&h, pdata))
			fail("rdma_cm parse accepted an invalid cma_hdr", attr);
		fam = h.ip_version == 4 ? AF_INET : AF_INET6;
		if (p->src.ss_family != fam || p->dst.ss_family != fam)
			fail("rdma_cm parse: address family is not the header's IP version", attr);
		if (sa_port(&p->src) != h.port || sa_port(&p->dst) != (uint16_t)service_id)
			fail("rdma_cm parse: ports are not the header's and the service ID's", attr);
		if (p->pdata != pdata + SR_CMA_HDR_LEN)
			fail("rdma_cm parse: the user's data does not follow the header", attr);
	} else if (p->src.ss_family || p->dst.ss_family) {
		fail("rdma_cm parse gives addresses without rdma_cm's header", attr);
	}
}

static bool conn_eq(const struct ibcm_rdma_conn *pa, const struct ibcm_rdma_conn *pb)
{
	struct ibcm_rdma_conn a, b;	/* byte copies: parse memsets, so padding compares too */

	if (pa->pdata_len != pb->pdata_len || memcmp(pa->pdata, pb->pdata, pa->pdata_len))
		return false;
	memcpy(&a, pa, sizeof(a));
	memcpy(&b, pb, sizeof(b));
	a.pdata = b.pdata = NULL;
	return !memcmp(&a, &b, sizeof(a));
}

static void check_rdma_req(const struct sr_cm_req *req)
{
	struct ibcm_rdma_conn p, p2;
	struct sr_cm_req req2;

	if (ibcm_rdma_req_parse(req, &p))
		return;
	check_conn(&p, req->service_id, req->pdata, sizeof(req->pdata), SR_CM_ATTR_REQ);
	if (p.qp_type != IBV_QPT_RC && p.qp_type != IBV_QPT_UC && p.qp_type != IBV_QPT_XRC_RECV)
		fail("rdma_cm REQ parse gives a QP type it cannot connect", SR_CM_ATTR_REQ);
	/* Built again from what was parsed (as the active side would send it), then parsed. */
	memcpy(&p2, &p, sizeof(p2));
	if (p2.qp_type == IBV_QPT_XRC_RECV)
		p2.qp_type = IBV_QPT_XRC_SEND;
	if (ibcm_rdma_req_build(&req2, &p2))
		fail("rdma_cm REQ parsed but cannot be built again", SR_CM_ATTR_REQ);
	if (ibcm_rdma_req_parse(&req2, &p2) || !conn_eq(&p, &p2))
		fail("rdma_cm REQ does not survive parse + build + parse", SR_CM_ATTR_REQ);
}

static void check_rdma_sidr_req(const struct sr_cm_sidr_req *r)
{
	struct ibcm_rdma_conn p, p2;
	struct sr_cm_sidr_req r2;

	if (ibcm_rdma_sidr_req_parse(r, &p))
		return;
	check_conn(&p, r->service_id, r->pdata, sizeof(r->pdata), SR_CM_ATTR_SIDR_REQ);
	if (ibcm_rdma_sidr_req_build(&r2, &p))
		fail("rdma_cm SIDR_REQ parsed but cannot be built again", SR_CM_ATTR_SIDR_REQ);
	if (ibcm_rdma_sidr_req_parse(&r2, &p2) || !conn_eq(&p, &p2))
		fail("rdma_cm SIDR_REQ does not survive parse + build + parse", SR_CM_ATTR_SIDR_REQ);
}

static void check_rdma_reps(const struct sr_cm_mad *m)
{
	struct ibcm_rdma_conn p;

	if (m->hdr.attr_id == SR_CM_ATTR_REP) {
		ibcm_rdma_rep_parse(&m->rep, &p);
		if (p.pdata != m->rep.pdata || p.pdata_len > sizeof(m->rep.pdata) ||
		    p.qpn > 0xffffff || p.psn > 0xffffff || p.rnr_retry_count > 7)
			fail("rdma_cm REP parse out of bounds", SR_CM_ATTR_REP);
	} else if (m->hdr.attr_id == SR_CM_ATTR_SIDR_REP) {
		ibcm_rdma_sidr_rep_parse(&m->sidr_rep, &p);
		if (p.pdata != m->sidr_rep.pdata || p.pdata_len > sizeof(m->sidr_rep.pdata) ||
		    p.qpn > 0xffffff)
			fail("rdma_cm SIDR_REP parse out of bounds", SR_CM_ATTR_SIDR_REP);
	}
}

/* ClassPortInfo (IBA 13.4.8.1): one reserved byte, 32 (before RedirectQP's 24 bits). */
static void check_class_port_info(const uint8_t *in, uint16_t attr)
{
	struct sr_class_port_info c, c2;
	uint8_t buf[SR_CLASS_PORT_INFO_LEN];

	sr_class_port_info_decode(&c, in);
	sr_class_port_info_encode(&c, buf);
	for (int i = 0; i < SR_CLASS_PORT_INFO_LEN; i++)
		if (buf[i] != (i == 32 ? 0 : in[i]))
			fail("ClassPortInfo does not survive decode + encode", attr);
	sr_class_port_info_decode(&c2, buf);
	if (memcmp(&c, &c2, sizeof(c)))
		fail("ClassPortInfo does not survive decode + encode + decode", attr);
}

/* ---- the MAD ------------------------------------------------------------------------------- */
static void check_mad(const uint8_t *in)
{
	static struct sr_cm_mad m, m2;
	struct sr_mad_hdr h, h2;
	uint8_t buf[SR_MAD_LEN], buf2[SR_MAD_LEN];
	int rc;
	bool cm;

	/* The common header, any class (memset: the structs are compared whole, padding too). */
	memset(&h, 0, sizeof(h));
	memset(&h2, 0, sizeof(h2));
	sr_mad_hdr_decode(&h, in);
	memset(buf, 0x5a, sizeof(buf));
	sr_mad_hdr_encode(&h, buf);
	if (memcmp(buf, in, 18) || buf[18] || buf[19] || memcmp(buf + 20, in + 20, 4))
		fail("MAD header does not survive decode + encode", h.attr_id);
	sr_mad_hdr_decode(&h2, buf);
	if (memcmp(&h, &h2, sizeof(h)))
		fail("MAD header does not survive decode + encode + decode", h.attr_id);

	rc = sr_cm_mad_decode(&m, in, SR_MAD_LEN);
	cm = h.base_version == SR_MAD_BASE_VERSION && h.mgmt_class == SR_MAD_CLASS_CM &&
	     h.class_version == SR_MAD_CM_CLASS_VERSION;
	if (rc != SR_MAD_EBADLEN && memcmp(&m.hdr, &h, sizeof(h)))
		fail("sr_cm_mad_decode's header differs from sr_mad_hdr_decode's", h.attr_id);
	if (!cm) {
		if (rc != SR_MAD_ENOTCM)
			fail("not a CM MAD (version, class) but not refused as such", h.attr_id);
		return;
	}
	if (layout(h.attr_id)) {
		if (rc != SR_MAD_EATTR)
			fail("an attribute the codec does not know was not SR_MAD_EATTR", h.attr_id);
		if (sr_cm_mad_encode(&m, buf) != -1)
			fail("an attribute the codec does not know was encoded", h.attr_id);
		return;
	}
	if (rc)
		fail("a CM message was refused", h.attr_id);
	(void)sr_cm_attr_name(h.attr_id);

	/* Encoded back: the input with its reserved bits cleared, byte for byte. */
	if (sr_cm_mad_encode(&m, buf))
		fail("a decoded CM message does not encode", h.attr_id);
	for (int i = 0; i < SR_MAD_LEN; i++) {
		if (buf[i] != (in[i] & defined[i])) {
			fprintf(stderr, "fuzz_mad: byte %d: in 0x%02x, defined bits 0x%02x, encoded "
				"0x%02x\n", i, in[i], defined[i], buf[i]);
			fail("decode + encode is not the input without its reserved bits",
			     h.attr_id);
		}
	}
	if (sr_cm_mad_decode(&m2, buf, SR_MAD_LEN) || memcmp(&m, &m2, sizeof(m)))
		fail("decode + encode + decode gives other fields", h.attr_id);
	if (sr_cm_mad_encode(&m2, buf2) || memcmp(buf, buf2, sizeof(buf)))
		fail("encode is not stable", h.attr_id);

	/* rdma_cm's reading of it (src/cm/ibcm/rdma.c), as drive.c's on_req / on_sidr_req do. */
	if (h.attr_id == SR_CM_ATTR_REQ) {
		check_cma_hdr(m.req.pdata, h.attr_id);
		check_rdma_req(&m.req);
	} else if (h.attr_id == SR_CM_ATTR_SIDR_REQ) {
		check_cma_hdr(m.sidr_req.pdata, h.attr_id);
		check_rdma_sidr_req(&m.sidr_req);
	}
	check_rdma_reps(&m);
	if (h.attr_id == SR_CM_ATTR_REJ)
		check_class_port_info(m.rej.ari, h.attr_id);
	else if (h.attr_id == SR_CM_ATTR_SIDR_REP)
		check_class_port_info(m.sidr_rep.info, h.attr_id);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static struct sr_cm_mad m;
	uint8_t mad[SR_MAD_LEN];

	if (n != SR_MAD_LEN) {
		if (sr_cm_mad_decode(&m, d, n) != SR_MAD_EBADLEN)
			fail("a MAD that is not 256 bytes long was not refused", 0);
		memset(mad, 0, sizeof(mad));
		memcpy(mad, d, n < sizeof(mad) ? n : sizeof(mad));
		check_mad(mad);
		return 0;
	}
	check_mad(d);
	return 0;
}
