// SPDX-License-Identifier: MIT
/*
 * The CM MAD codec (src/wire/mad.c) against the Linux kernel's rdma_cm as rxe sends it.
 *
 * Every UD SEND to QP1 in the rdma_cm captures of tests/interop/rxe-pcaps/suite/ (rping,
 * ucmatose, udaddy, ib_write_bw -R: REQ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP) must
 *  - be a UD SEND_ONLY to QP1 from QP1 with the GSI Q_Key and the default P_Key;
 *  - decode, field by field, to what Wireshark's dissector found (cm-mads.txt, made by
 *    cm-mads.py with tshark: an independent decoder), and for the fields tshark 4.0 gets
 *    wrong or does not decode (flow label, packet rate, SIDR), to values read off the bytes;
 *  - re-encode byte-exact (all 256 bytes), and so must the rdma_cm header in REQ/SIDR_REQ.
 * Then every bit field at its largest value must round-trip without touching its neighbours,
 * and malformed MADs (length, class, version, LAP) must be refused.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/pcap_read.h"
#include "sr_test.h"
#include "wire/hdr.h"
#include "wire/mad.h"
#include "wire/opcode.h"
#include "wire/pkt.h"

#define MAX_FIELDS 96

struct kv {
	char name[48];
	char val[48];
};

struct fields {
	int n;
	struct kv f[MAX_FIELDS];
};

static void add(struct fields *fs, const char *name, const char *fmt, unsigned long long v)
{
	REQUIRE(fs->n < MAX_FIELDS);
	snprintf(fs->f[fs->n].name, sizeof(fs->f[0].name), "%s", name);
	snprintf(fs->f[fs->n].val, sizeof(fs->f[0].val), fmt, v);
	fs->n++;
}

#define ADD(fs, name, v) add(fs, name, "0x%llx", (unsigned long long)(v))

static void add_ip4(struct fields *fs, const char *name, const uint8_t *a16)
{
	REQUIRE(fs->n < MAX_FIELDS);
	snprintf(fs->f[fs->n].name, sizeof(fs->f[0].name), "%s", name);
	inet_ntop(AF_INET, a16 + 12, fs->f[fs->n].val, sizeof(fs->f[0].val));
	fs->n++;
}

static const char *lookup(const struct fields *fs, const char *name)
{
	for (int i = 0; i < fs->n; i++)
		if (!strcmp(fs->f[i].name, name))
			return fs->f[i].val;
	return NULL;
}

static void path_fields(struct fields *fs, const char *pfx, const struct sr_cm_path *p)
{
	char n[48];

#define P(field, v) (snprintf(n, sizeof(n), "%s.%s", pfx, field), ADD(fs, n, v))
	P("local_lid", p->local_lid);
	P("remote_lid", p->remote_lid);
	P("traffic_class", p->traffic_class);
	P("hop_limit", p->hop_limit);
	P("sl", p->sl);
	P("subnet_local", p->subnet_local);
	P("local_ack_timeout", p->local_ack_timeout);
#undef P
	snprintf(n, sizeof(n), "%s.local_gid4", pfx);
	add_ip4(fs, n, p->local_gid);
	snprintf(n, sizeof(n), "%s.remote_gid4", pfx);
	add_ip4(fs, n, p->remote_gid);
}

/* Our decoding of one MAD (and its BTH/DETH), under the names cm-mads.txt uses. */
static void our_fields(struct fields *fs, const struct sr_pkt *p, const struct sr_cm_mad *m)
{
	const struct sr_deth *deth = (const void *)(p->hdr + SR_BTH_LEN);
	const struct sr_cma_hdr_wire *cw;
	struct sr_cma_hdr ch;

	fs->n = 0;
	ADD(fs, "bth.dqpn", p->qpn);
	add(fs, "bth.opcode", "%llu", p->opcode);
	add(fs, "bth.pkey", "%llu", sr_bth_pkey((const void *)p->hdr));
	ADD(fs, "deth.qkey", sr_deth_qkey(deth));
	ADD(fs, "deth.sqpn", sr_deth_sqp(deth));
	ADD(fs, "base_version", m->hdr.base_version);
	ADD(fs, "mgmt_class", m->hdr.mgmt_class);
	ADD(fs, "class_version", m->hdr.class_version);
	ADD(fs, "method", m->hdr.method);
	ADD(fs, "status", m->hdr.status);
	ADD(fs, "tid", m->hdr.tid);
	ADD(fs, "attr_id", m->hdr.attr_id);
	ADD(fs, "attr_mod", m->hdr.attr_mod);
	switch (m->hdr.attr_id) {
	case SR_CM_ATTR_REQ: {
		const struct sr_cm_req *r = &m->req;

		ADD(fs, "local_comm_id", r->local_comm_id);
		ADD(fs, "service_id", r->service_id);
		ADD(fs, "local_ca_guid", r->local_ca_guid);
		ADD(fs, "local_qkey", r->local_qkey);
		ADD(fs, "local_qpn", r->local_qpn);
		ADD(fs, "responder_resources", r->responder_resources);
		ADD(fs, "local_eecn", r->local_eecn);
		ADD(fs, "initiator_depth", r->initiator_depth);
		ADD(fs, "remote_eecn", r->remote_eecn);
		ADD(fs, "remote_cm_response_timeout", r->remote_cm_response_timeout);
		ADD(fs, "transport_service_type", r->transport_service_type);
		ADD(fs, "e2e_flow_control", r->e2e_flow_control);
		ADD(fs, "starting_psn", r->starting_psn);
		ADD(fs, "local_cm_response_timeout", r->local_cm_response_timeout);
		ADD(fs, "retry_count", r->retry_count);
		ADD(fs, "pkey", r->pkey);
		ADD(fs, "path_mtu", r->path_mtu);
		ADD(fs, "rdc_exists", r->rdc_exists);
		ADD(fs, "rnr_retry_count", r->rnr_retry_count);
		ADD(fs, "max_cm_retries", r->max_cm_retries);
		ADD(fs, "srq", r->srq);
		ADD(fs, "ext_transport_type", r->ext_transport_type);
		path_fields(fs, "primary", &r->primary);
		path_fields(fs, "alternate", &r->alternate);
		cw = (const void *)r->pdata;
		ADD(fs, "cma.major", cw->version >> 4);
		if (sr_cma_hdr_decode(&ch, r->pdata) == 0) {
			ADD(fs, "cma.ip_version", ch.ip_version);
			ADD(fs, "cma.port", ch.port);
			add_ip4(fs, "cma.src4", ch.src_addr);
			add_ip4(fs, "cma.dst4", ch.dst_addr);
		}
		break;
	}
	case SR_CM_ATTR_REP: {
		const struct sr_cm_rep *r = &m->rep;

		ADD(fs, "local_comm_id", r->local_comm_id);
		ADD(fs, "remote_comm_id", r->remote_comm_id);
		ADD(fs, "local_qkey", r->local_qkey);
		ADD(fs, "local_qpn", r->local_qpn);
		ADD(fs, "local_eecn", r->local_eecn);
		ADD(fs, "starting_psn", r->starting_psn);
		ADD(fs, "responder_resources", r->responder_resources);
		ADD(fs, "initiator_depth", r->initiator_depth);
		ADD(fs, "target_ack_delay", r->target_ack_delay);
		ADD(fs, "failover_accepted", r->failover_accepted);
		ADD(fs, "e2e_flow_control", r->e2e_flow_control);
		ADD(fs, "rnr_retry_count", r->rnr_retry_count);
		ADD(fs, "srq", r->srq);
		ADD(fs, "local_ca_guid", r->local_ca_guid);
		break;
	}
	case SR_CM_ATTR_RTU:
	case SR_CM_ATTR_DREP:
		ADD(fs, "local_comm_id", m->rtu.local_comm_id);
		ADD(fs, "remote_comm_id", m->rtu.remote_comm_id);
		break;
	case SR_CM_ATTR_DREQ:
		ADD(fs, "local_comm_id", m->dreq.local_comm_id);
		ADD(fs, "remote_comm_id", m->dreq.remote_comm_id);
		ADD(fs, "remote_qpn", m->dreq.remote_qpn);
		break;
	default:
		break;
	}
}

/* "name=value": equal as numbers, or as text (IPv4 addresses). */
static bool same_value(const char *want, const char *got)
{
	char *e1, *e2;
	unsigned long long a, b;

	if (strchr(want, '.'))
		return !strcmp(want, got);
	a = strtoull(want, &e1, 0);
	b = strtoull(got, &e2, 0);
	return !*e1 && !*e2 && a == b;
}

struct expect {
	char file[64];
	long frame;
	char *line;		/* the name=value tokens */
};

static int nexpect;
static struct expect expects[64];
static int matched;

static void load_expect(const char *dir)
{
	char path[PATH_MAX + 32], line[8192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cm-mads.txt", dir);
	f = fopen(path, "r");
	REQUIRE(f);
	while (fgets(line, sizeof(line), f)) {
		struct expect *e = &expects[nexpect];
		int off = 0;

		if (line[0] == '#' || line[0] == '\n')
			continue;
		REQUIRE(nexpect < 64);
		REQUIRE(sscanf(line, "%63s %ld %n", e->file, &e->frame, &off) == 2 && off > 0);
		e->line = strdup(line + off);
		REQUIRE(e->line);
		nexpect++;
	}
	fclose(f);
	CHECK(nexpect >= 20);
}

static void compare_expect(const char *file, long frame, const struct fields *fs)
{
	for (int i = 0; i < nexpect; i++) {
		char *save, *tok, *copy;

		if (strcmp(expects[i].file, file) || expects[i].frame != frame)
			continue;
		matched++;
		copy = strdup(expects[i].line);
		REQUIRE(copy);
		for (tok = strtok_r(copy, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			char *eq = strchr(tok, '=');
			const char *got;

			REQUIRE(eq);
			*eq = '\0';
			got = lookup(fs, tok);
			if (!got)
				SR_FAIL("%s #%ld: field %s not decoded", file, frame, tok);
			else if (!same_value(eq + 1, got))
				SR_FAIL("%s #%ld: %s: tshark %s, ours %s", file, frame, tok, eq + 1, got);
		}
		free(copy);
		return;
	}
	SR_FAIL("%s #%ld: not in cm-mads.txt", file, frame);
}

static int counts[0x20];

/* What tshark 4.0 does not decode (right): checked against the bytes, read by hand. */
static void check_by_hand(const char *file, long frame, const struct sr_cm_mad *m)
{
	if (!strcmp(file, "rping_C5.pcap") && frame == 1) {
		/* primary path word at CM offset 88: ae 26 a0 00 */
		CHECK_EQ(m->req.primary.flow_label, 0xae26a);
		CHECK_EQ(m->req.primary.packet_rate, 0);
		CHECK_EQ(m->req.alternate.flow_label, 0);
		CHECK_EQ(m->req.sap_supported, 0);
	}
	if (!strcmp(file, "udaddy.pcap") && frame == 1) {
		struct sr_cma_hdr ch;
		static const uint8_t src[16] = { [12] = 10, 0, 0, 2 }, dst[16] = { [12] = 10, 0, 0, 1 };

		CHECK_EQ(m->hdr.attr_id, SR_CM_ATTR_SIDR_REQ);
		CHECK_EQ(m->sidr_req.request_id, 0x1058b42d);
		CHECK_EQ(m->sidr_req.pkey, 0xffff);
		CHECK_EQ(m->sidr_req.service_id, sr_cm_service_id(0x0111, 0x1c06)); /* RDMA_PS_UDP */
		CHECK_EQ(sr_cma_hdr_decode(&ch, m->sidr_req.pdata), 0);
		CHECK_EQ(ch.version, 0);
		CHECK_EQ(ch.ip_version, 4);
		CHECK_EQ(ch.port, 0xcbd8);
		CHECK(!memcmp(ch.src_addr, src, 16));
		CHECK(!memcmp(ch.dst_addr, dst, 16));
	}
	if (!strcmp(file, "udaddy.pcap") && frame == 2) {
		CHECK_EQ(m->hdr.attr_id, SR_CM_ATTR_SIDR_REP);
		CHECK_EQ(m->sidr_rep.request_id, 0x1058b42d);
		CHECK_EQ(m->sidr_rep.status, SR_CM_SIDR_SUCCESS);
		CHECK_EQ(m->sidr_rep.info_len, 0);
		CHECK_EQ(m->sidr_rep.qpn, 0x21);
		CHECK_EQ(m->sidr_rep.service_id, 0x01111c06);
		CHECK_EQ(m->sidr_rep.qkey, 0x01234567);	/* RDMA_UDP_QKEY */
	}
}

static void check_mad_packet(const char *file, long frame, const uint8_t *udp, size_t len)
{
	uint8_t *pkt = malloc(len), out[SR_MAD_LEN];
	struct sr_pkt p;
	struct sr_cm_mad m;
	struct fields fs;
	const uint8_t *mad;

	REQUIRE(pkt);
	memcpy(pkt, udp, len);
	REQUIRE(sr_pkt_parse(&p, pkt, len) == SR_PE_OK);
	CHECK_EQ(p.opcode, SR_TR_UD | SR_OP_SEND_ONLY);
	CHECK_EQ(sr_bth_pkey((const void *)p.hdr), SR_DEFAULT_PKEY);
	CHECK_EQ(sr_deth_qkey((const void *)(p.hdr + SR_BTH_LEN)), SR_GSI_QKEY);
	CHECK_EQ(sr_deth_sqp((const void *)(p.hdr + SR_BTH_LEN)), SR_GSI_QPN);
	CHECK_EQ(p.paylen, SR_MAD_LEN);
	mad = p.hdr + p.hdr_len;
	CHECK_EQ(sr_cm_mad_decode(&m, mad, p.paylen), 0);
	counts[m.hdr.attr_id & 0x1f]++;
	our_fields(&fs, &p, &m);
	compare_expect(file, frame, &fs);
	check_by_hand(file, frame, &m);
	CHECK_EQ(sr_cm_mad_encode(&m, out), 0);
	if (memcmp(out, mad, SR_MAD_LEN)) {
		for (int i = 0; i < SR_MAD_LEN; i++)
			if (out[i] != mad[i]) {
				SR_FAIL("%s #%ld %s: re-encoded byte %d: 0x%02x, capture 0x%02x", file,
					frame, sr_cm_attr_name(m.hdr.attr_id), i, out[i], mad[i]);
				break;
			}
	}
	if (m.hdr.attr_id == SR_CM_ATTR_REQ || m.hdr.attr_id == SR_CM_ATTR_SIDR_REQ) {
		const uint8_t *pd = m.hdr.attr_id == SR_CM_ATTR_REQ ? m.req.pdata : m.sidr_req.pdata;
		struct sr_cma_hdr ch;
		uint8_t again[SR_CMA_HDR_LEN];

		CHECK_EQ(sr_cma_hdr_decode(&ch, pd), 0);
		sr_cma_hdr_encode(&ch, again);
		CHECK(!memcmp(again, pd, SR_CMA_HDR_LEN));
	}
	free(pkt);
}

static void scan(const char *dir, const char *name)
{
	char path[PATH_MAX + 64];
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	long frame = 0;
	int more;

	snprintf(path, sizeof(path), "%s/suite/%s", dir, name);
	REQUIRE(sr_pcapr_open(&r, path) == 0);
	while ((more = sr_pcapr_next(&r, &rec)) == 1) {
		struct sr_ipudp ipu;
		const uint8_t *pl;
		size_t plen;

		frame++;
		if (sr_pcapr_udp(rec.ip, rec.ip_len, &ipu, &pl, &plen) ||
		    ipu.dport != SR_ROCEV2_UDP_PORT || plen < SR_BTH_LEN)
			continue;
		if (sr_bth_qpn((const void *)pl) == SR_GSI_QPN)
			check_mad_packet(name, frame, pl, plen);
	}
	CHECK_EQ(more, 0);
	sr_pcapr_close(&r);
}

/* Every bit field at its largest value, one at a time: it must come back, and nothing else
 * may change (a field that spilled into its neighbour would show there). */
static void check_bitfields(void)
{
	struct sr_cm_mad m, d;
	uint8_t buf[SR_MAD_LEN], zero[SR_MAD_LEN];

	memset(&m, 0, sizeof(m));
	m.hdr = (struct sr_mad_hdr){ SR_MAD_BASE_VERSION, SR_MAD_CLASS_CM, SR_MAD_CM_CLASS_VERSION,
				     SR_MAD_METHOD_SEND, 0, 0, 0x0123456789abcdefull,
				     SR_CM_ATTR_REQ, 0 };
	REQUIRE(sr_cm_mad_encode(&m, zero) == 0);
#define ONE(field, max, off, bytes_hex)                                                    \
	do {                                                                               \
		struct sr_cm_mad t = m;                                                    \
		static const uint8_t want[] = bytes_hex;                                   \
		t.req.field = max;                                                         \
		REQUIRE(sr_cm_mad_encode(&t, buf) == 0);                                   \
		CHECK(!memcmp(buf + SR_MAD_HDR_LEN + (off), want, sizeof(want)));          \
		memcpy(buf + SR_MAD_HDR_LEN + (off), zero + SR_MAD_HDR_LEN + (off), sizeof(want)); \
		if (memcmp(buf, zero, SR_MAD_LEN))                                         \
			SR_FAIL("REQ " #field " spills out of its bytes");                 \
		REQUIRE(sr_cm_mad_encode(&t, buf) == 0);                                   \
		CHECK_EQ(sr_cm_mad_decode(&d, buf, SR_MAD_LEN), 0);                        \
		CHECK_EQ(d.req.field, max);                                                \
	} while (0)
#define B(...) { __VA_ARGS__ }
	/* IBA table 106 positions (byte offset in the CM data, the bits it occupies) */
	ONE(local_qpn, 0xffffff, 32, B(0xff, 0xff, 0xff, 0x00));
	ONE(responder_resources, 0xff, 32, B(0x00, 0x00, 0x00, 0xff));
	ONE(initiator_depth, 0xff, 36, B(0x00, 0x00, 0x00, 0xff));
	ONE(remote_cm_response_timeout, 0x1f, 43, B(0xf8));
	ONE(transport_service_type, 3, 43, B(0x06));
	ONE(e2e_flow_control, 1, 43, B(0x01));
	ONE(starting_psn, 0xffffff, 44, B(0xff, 0xff, 0xff, 0x00));
	ONE(local_cm_response_timeout, 0x1f, 47, B(0xf8));
	ONE(retry_count, 7, 47, B(0x07));
	ONE(path_mtu, 0xf, 50, B(0xf0));
	ONE(rdc_exists, 1, 50, B(0x08));
	ONE(rnr_retry_count, 7, 50, B(0x07));
	ONE(max_cm_retries, 0xf, 51, B(0xf0));
	ONE(srq, 1, 51, B(0x08));
	ONE(ext_transport_type, 7, 51, B(0x07));
	ONE(primary.flow_label, 0xfffff, 88, B(0xff, 0xff, 0xf0, 0x00));
	ONE(primary.packet_rate, 0x3f, 88, B(0x00, 0x00, 0x00, 0x3f));
	ONE(primary.sl, 0xf, 94, B(0xf0));
	ONE(primary.subnet_local, 1, 94, B(0x08));
	ONE(primary.local_ack_timeout, 0x1f, 95, B(0xf8));
	ONE(alternate.local_ack_timeout, 0x1f, 139, B(0xf8));
	ONE(sap_supported, 1, 139, B(0x04));
#undef ONE

	/* REP, MRA, REJ, DREQ, SIDR_REP bit fields */
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_REP;
	m.rep.target_ack_delay = 0x1f;
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 26], 0xf8);
	m.rep.target_ack_delay = 0;
	m.rep.failover_accepted = 3;
	m.rep.rnr_retry_count = 7;
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 26], 0x06);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 27], 0xe0);
	m.rep.srq = 1;
	m.rep.e2e_flow_control = 1;
	m.rep.local_qpn = 0xabcdef;
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 26], 0x07);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 27], 0xf0);
	CHECK(!memcmp(buf + SR_MAD_HDR_LEN + 12, "\xab\xcd\xef\x00", 4));
	CHECK_EQ(sr_cm_mad_decode(&d, buf, SR_MAD_LEN), SR_MAD_ENOTCM);	/* header left 0 */

	memset(&m, 0, sizeof(m));
	m.hdr = (struct sr_mad_hdr){ 1, 7, 2, 3, 0, 0, 1, SR_CM_ATTR_MRA, 0 };
	m.mra.msg_mraed = SR_CM_MSG_OTHER;
	m.mra.service_timeout = 0x1f;
	m.mra.pdata[SR_CM_MRA_PDATA - 1] = 0x5a;
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 8], 0x80);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 9], 0xf8);
	CHECK_EQ(buf[SR_MAD_LEN - 1], 0x5a);
	CHECK_EQ(sr_cm_mad_decode(&d, buf, SR_MAD_LEN), 0);
	CHECK_EQ(d.mra.msg_mraed, SR_CM_MSG_OTHER);
	CHECK_EQ(d.mra.service_timeout, 0x1f);

	m.hdr.attr_id = SR_CM_ATTR_REJ;
	memset(&m.rej, 0, sizeof(m.rej));
	m.rej.msg_rejected = SR_CM_MSG_REP;
	m.rej.ari_len = 0x7f;
	m.rej.reason = SR_CM_REJ_CONSUMER_DEFINED;
	m.rej.pdata[0] = 0xa5;
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 8], 0x40);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 9], 0xfe);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 11], 28);
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 84], 0xa5);
	CHECK_EQ(sr_cm_mad_decode(&d, buf, SR_MAD_LEN), 0);
	CHECK_EQ(d.rej.ari_len, 0x7f);
	CHECK_EQ(d.rej.reason, SR_CM_REJ_CONSUMER_DEFINED);

	m.hdr.attr_id = SR_CM_ATTR_DREQ;
	memset(&m.dreq, 0, sizeof(m.dreq));
	m.dreq.remote_qpn = 0xffffff;
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK(!memcmp(buf + SR_MAD_HDR_LEN + 8, "\xff\xff\xff\x00", 4));

	m.hdr.attr_id = SR_CM_ATTR_SIDR_REP;
	memset(&m.sidr_rep, 0, sizeof(m.sidr_rep));
	m.sidr_rep.qpn = 0x123456;
	m.sidr_rep.qkey = 0x01234567;
	m.sidr_rep.pdata[0] = 0x11;
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK(!memcmp(buf + SR_MAD_HDR_LEN + 8, "\x12\x34\x56\x00", 4));
	CHECK(!memcmp(buf + SR_MAD_HDR_LEN + 20, "\x01\x23\x45\x67", 4));
	CHECK_EQ(buf[SR_MAD_HDR_LEN + 96], 0x11);

	/* the rdma_cm service ID: 0x0000000001 PS PORT (RDMA_PS_TCP 0x0106, port 7174) */
	CHECK_EQ(sr_cm_service_id(0x0106, 0x1c06), 0x0000000001061c06ull);
}

static void check_refused(void)
{
	struct sr_cm_mad m;
	uint8_t buf[SR_MAD_LEN + 1];

	memset(&m, 0, sizeof(m));
	m.hdr = (struct sr_mad_hdr){ 1, 7, 2, 3, 0, 0, 7, SR_CM_ATTR_RTU, 0 };
	REQUIRE(sr_cm_mad_encode(&m, buf) == 0);
	CHECK_EQ(sr_cm_mad_decode(&m, buf, SR_MAD_LEN), 0);
	CHECK_EQ(sr_cm_mad_decode(&m, buf, SR_MAD_LEN - 1), SR_MAD_EBADLEN);
	CHECK_EQ(sr_cm_mad_decode(&m, buf, SR_MAD_LEN + 1), SR_MAD_EBADLEN);
	buf[1] = 0x03;	/* the SA's class */
	CHECK_EQ(sr_cm_mad_decode(&m, buf, SR_MAD_LEN), SR_MAD_ENOTCM);
	buf[1] = 0x07;
	buf[2] = 1;	/* CM class version 1 */
	CHECK_EQ(sr_cm_mad_decode(&m, buf, SR_MAD_LEN), SR_MAD_ENOTCM);
	buf[2] = 2;
	buf[0] = 2;
	CHECK_EQ(sr_cm_mad_decode(&m, buf, SR_MAD_LEN), SR_MAD_ENOTCM);
	buf[0] = 1;
	sr_st_be16(buf + 16, SR_CM_ATTR_LAP);
	CHECK_EQ(sr_cm_mad_decode(&m, buf, SR_MAD_LEN), SR_MAD_EATTR);
	CHECK_EQ(m.hdr.attr_id, SR_CM_ATTR_LAP);	/* the header is there to answer it */
	CHECK_EQ(m.hdr.tid, 7);
	m.hdr.attr_id = SR_CM_ATTR_APR;
	CHECK_EQ(sr_cm_mad_encode(&m, buf), -1);
	/* rdma_cm header: version other than 0, IP version other than 4 or 6 */
	memset(buf, 0, sizeof(buf));
	buf[1] = 0x40;
	CHECK_EQ(sr_cma_hdr_decode(&(struct sr_cma_hdr){ 0 }, buf), 0);
	buf[1] = 0x50;
	CHECK_EQ(sr_cma_hdr_decode(&(struct sr_cma_hdr){ 0 }, buf), -1);
	buf[1] = 0x60;
	buf[0] = 1;
	CHECK_EQ(sr_cma_hdr_decode(&(struct sr_cma_hdr){ 0 }, buf), -1);
}

int main(void)
{
	static const char *const files[] = { "rping_C5.pcap", "ucmatose.pcap", "udaddy.pcap",
					     "ib_write_bw_rdmacm.pcap" };
	const char *src = getenv("SR_SOURCE_DIR");
	char dir[PATH_MAX];

	sr_test_timeout(60);
	if (src && *src)
		snprintf(dir, sizeof(dir), "%.*s/tests/interop/rxe-pcaps", PATH_MAX - 32, src);
	else
		snprintf(dir, sizeof(dir), "tests/interop/rxe-pcaps");
	load_expect(dir);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		scan(dir, files[i]);
	CHECK_EQ(matched, nexpect);
	/* what the captures hold: a connection each of rping and ucmatose, two of ib_write_bw -R,
	 * one SIDR exchange of udaddy */
	CHECK_EQ(counts[SR_CM_ATTR_REQ & 0x1f], 4);
	CHECK_EQ(counts[SR_CM_ATTR_REP & 0x1f], 4);
	CHECK_EQ(counts[SR_CM_ATTR_RTU & 0x1f], 4);
	CHECK_EQ(counts[SR_CM_ATTR_DREQ & 0x1f], 4);
	CHECK_EQ(counts[SR_CM_ATTR_DREP & 0x1f], 4);
	CHECK_EQ(counts[SR_CM_ATTR_SIDR_REQ & 0x1f], 1);
	CHECK_EQ(counts[SR_CM_ATTR_SIDR_REP & 0x1f], 1);
	check_bitfields();
	check_refused();
	return sr_test_done("test_cm_mad");
}
