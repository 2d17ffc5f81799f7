/* SPDX-License-Identifier: MIT */
/*
 * Seed corpora for the fuzz targets, made at build/test time (nothing large is kept in the
 * repository):
 *   mkseeds PCAPDIR RXDIR SEQDIR CMDIR RSDIR
 * RXDIR: every RoCEv2 packet of the captures in PCAPDIR (Linux rxe's, tests/interop/rxe-pcaps)
 * as a fuzz_rx record (fuzz_rx.h) aimed at the QP of its transport with every rewrite on;
 * SEQDIR: runs of 16 consecutive packets of one direction, with a clock step in the middle,
 * for fuzz_rx_seq; CMDIR: one encoded message of each CM type; RSDIR: each rsocket message.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm/proto.h"
#include "cm/rsocket/proto.h"
#include "net/pcap_read.h"
#include "wire/pkt.h"
#include "fuzz_rx.h"

static int nfiles;

static void put(const char *dir, const char *name, int i, const void *p, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s-%d", dir, name, i);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, len, f) != len) {
		perror(path);
		exit(1);
	}
	fclose(f);
	nfiles++;
}

static int qp_for(uint8_t opcode)
{
	switch (opcode & 0xe0) {
	case SR_TR_UC:
		return FQ_UC;
	case SR_TR_UD:
		return FQ_UD;
	default:
		return FQ_RC;
	}
}

/* Appends a fuzz_rx record for the packet to rec; returns its length. */
static size_t record(uint8_t *rec, const uint8_t *pay, size_t len)
{
	rec[0] = FX_QPN | FX_KEY | FX_PSN | FX_VA;
	rec[1] = (uint8_t)qp_for(pay[0]);
	rec[2] = FK_RW;
	rec[3] = 0;
	memcpy(rec + 4, pay, len);
	return len + 4;
}

static void from_pcap(const char *path, const char *name, const char *rxdir, const char *seqdir)
{
	static uint8_t rec[70000], seq[1 << 20];
	struct sr_pcapr r;
	struct sr_pcapr_rec pr;
	struct sr_ipudp ipu, first;
	size_t seqlen = 0;
	int nrx = 0, nseq = 0, inseq = 0;

	if (sr_pcapr_open(&r, path))
		return;
	while (sr_pcapr_next(&r, &pr) == 1 && nrx < 400) {
		const uint8_t *pay;
		size_t len;
		struct sr_pkt pkt;
		uint8_t tmp[16384];

		if (!pr.ip || sr_pcapr_udp(pr.ip, pr.ip_len, &ipu, &pay, &len) ||
		    ipu.dport != 4791 || len > sizeof(tmp) || len + 6 > 8191)
			continue;
		memcpy(tmp, pay, len);
		if (sr_pkt_parse(&pkt, tmp, len) != SR_PE_OK)
			continue;
		put(rxdir, name, nrx++, rec, record(rec, pay, len));
		/* Sequences: one direction (the first packet's destination). */
		if (!inseq) {
			first = ipu;
			seqlen = 0;
		} else if (memcmp(first.dst, ipu.dst, 16) || first.dport != ipu.dport) {
			continue;
		}
		size_t l = record(seq + seqlen + 2, pay, len);

		seq[seqlen] = (uint8_t)l;
		seq[seqlen + 1] = (uint8_t)(l >> 8);
		seqlen += 2 + l;
		if (++inseq == 8) {		/* a clock step of 50 ms: timers run */
			seq[seqlen++] = 500 & 0xff;
			seq[seqlen++] = 0x80 | 500 >> 8;
		}
		if (inseq == 16 || seqlen > sizeof(seq) - 20000) {
			if (nseq < 16)
				put(seqdir, name, nseq++, seq, seqlen);
			inseq = 0;
		}
	}
	if (inseq && nseq < 16)
		put(seqdir, name, nseq, seq, seqlen);
	sr_pcapr_close(&r);
}

static void cm_seeds(const char *dir)
{
	uint8_t buf[CM_MSG_MAX];

	for (int t = 1; t < CM_MSG_TYPES; t++) {
		struct cm_msg m = { .type = (uint8_t)t, .src_id = 0x1234, .dst_id = t == 1 ? 0 : 0x5678,
				    .ps = 0x0106, .src_port = 40000, .dst_port = 7471,
				    .qpn = 0x11, .psn = 0x22, .qkey = 0x33, .mtu = IBV_MTU_1024,
				    .responder_resources = 4, .initiator_depth = 4, .retry_count = 7,
				    .rnr_retry_count = 7, .qp_type = IBV_QPT_RC, .pdata_len = 8 };
		int len = cm_msg_encode(&m, buf, sizeof(buf));

		if (len > 0)
			put(dir, "cm", t, buf, (size_t)len);
	}
}

static void rs_seeds(const char *dir)
{
	uint8_t buf[1 + RS_DG_HDR_LEN];
	struct rs_conn c = { .rkey = 0x1234, .addr = 0x7f0000001000, .size = 65536, .credits = 64,
			     .iomap_size = 4 };
	struct rs_ctrl cr = { .type = RS_CTRL_CREDIT, .freed = 100, .msgs = 3 };
	struct rs_ctrl io = { .type = RS_CTRL_IOMAP, .rkey = 0x55, .offset = 4096,
			      .addr = 0x7f0000002000, .len = 8192 };
	struct rs_ctrl sh = { .type = RS_CTRL_SHUTDOWN };
	struct rs_dg_hdr h = { .qpn = 0x42 };
	uint32_t v = rs_imm_data(1000);

	buf[0] = 0;
	rs_conn_encode(&c, buf + 1);
	put(dir, "rs-conn", 0, buf, 1 + RS_CONN_LEN);
	buf[0] = 1;
	put(dir, "rs-ctrl", 0, buf, 1 + rs_ctrl_encode(&cr, buf + 1));
	put(dir, "rs-ctrl", 1, buf, 1 + rs_ctrl_encode(&io, buf + 1));
	put(dir, "rs-ctrl", 2, buf, 1 + rs_ctrl_encode(&sh, buf + 1));
	buf[0] = 2;
	h.src.ss_family = AF_INET;
	rs_dg_hdr_encode(&h, buf + 1);
	put(dir, "rs-dg", 0, buf, 1 + RS_DG_HDR_LEN);
	buf[0] = 3;
	memcpy(buf + 1, &v, 4);
	put(dir, "rs-imm", 0, buf, 5);
}

int main(int argc, char **argv)
{
	DIR *dir;
	struct dirent *e;

	if (argc != 6) {
		fprintf(stderr, "usage: mkseeds PCAPDIR RXDIR SEQDIR CMDIR RSDIR\n");
		return 2;
	}
	dir = opendir(argv[1]);
	if (!dir) {
		perror(argv[1]);
		return 1;
	}
	while ((e = readdir(dir))) {
		char path[4096], name[256];
		size_t l = strlen(e->d_name);

		if (l < 6 || strcmp(e->d_name + l - 5, ".pcap"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		snprintf(name, sizeof(name), "%.*s", (int)(l - 5), e->d_name);
		from_pcap(path, name, argv[2], argv[3]);
	}
	closedir(dir);
	cm_seeds(argv[4]);
	rs_seeds(argv[5]);
	printf("mkseeds: %d seed files\n", nfiles);
	return 0;
}
