/* SPDX-License-Identifier: MIT */
/*
 * Seed corpora for the fuzz targets, made at build/test time (nothing large is kept in the
 * repository):
 *   mkseeds PCAPDIR RXDIR SEQDIR CMDIR RSDIR CMSTATEDIR RTRSDIR RNBDDIR MADDIR IBCMSTATEDIR
 * RXDIR: every RoCEv2 packet of the captures in PCAPDIR (Linux rxe's, tests/interop/rxe-pcaps)
 * as a fuzz_rx record (fuzz_rx.h) aimed at the QP of its transport with every rewrite on;
 * SEQDIR: runs of 16 consecutive packets of one direction, with a clock step in the middle,
 * for fuzz_rx_seq, and sequences written here that take the harness's NIC into its deep states
 * (multi-packet and out-of-order requests, duplicate READ/ATOMIC replay, READ responses and
 * ATOMIC ACKs for its pending requests, NAKs and RNR NAKs with clock steps, the SRQ, the
 * window, the other PD); CMDIR: one encoded message of each CM type; RSDIR: each rsocket
 * message; CMSTATEDIR: CM conversations for fuzz_cm_state (a REP, REJ, DREQ, PROBE for its
 * active id, REQs and what follows them for its listener); RTRSDIR: a CON_REQ and an INFO_REQ,
 * and for every session configuration of fuzz_rtrs.h each RNBD message as RTRS carries it (READs
 * with one and three descriptors, WRITEs with and without data); RNBDDIR: each RNBD message as
 * the server receives it, and the two answers the client decodes. MADDIR: every IB CM MAD of
 * the captures (UD SEND ONLY to QP1: REQ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP of Linux
 * rxe's rdma_cm) and one MAD of each CM attribute encoded here (REQs and SIDR_REQs with
 * rdma_cm's header, IPv4 and IPv6, of each port space; LAP, APR, ClassPortInfo headers).
 * IBCMSTATEDIR: conversations for fuzz_ibcm_state (its input format is in fuzz_ibcm_state.c):
 * loopback connections through every state to the time-wait's end, lost MADs and
 * retransmissions to UNREACHABLE, MRAs, rejects both ways, crossed DREQs, SIDR, the liveness
 * probe (Get / GetResp of ClassPortInfo), and the same messages from a stranger.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

#include "cm/ibcm/rdma.h"
#include "cm/proto.h"
#include "cm/rsocket/proto.h"
#include "net/pcap_read.h"
#include "wire/pkt.h"
#include "fuzz_rx.h"
#include "fuzz_rtrs.h"
#include "rnbd-msg.h"
#include "rtrs-proto.h"

static int nfiles;
static const char *maddir;	/* fuzz_mad seeds: the captures' CM MADs go there too */
static int nmads;

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
	case SR_TR_XRC:
		return FQ_XRC;
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
		/* A CM MAD: UD SEND ONLY to QP1, BTH + DETH, then the 256-byte MAD. */
		if (maddir && pkt.opcode == 0x64 && pkt.qpn == SR_GSI_QPN &&
		    pkt.paylen == SR_MAD_LEN)
			put(maddir, name, nmads++, sr_pkt_payload(&pkt), SR_MAD_LEN);
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


/* ---- sequences written by hand (fuzz_rx_seq) ------------------------------------------------ */
static uint8_t sq[65536];
static size_t sqlen;

/* Appends one record: the packet (opcode, headers from the arguments, paylen bytes of payload)
 * with every rewrite on (QPN of QP q, key k, PSN = expected + dpsn, VA base of the key + va). */
static void rec_pkt(int q, int k, int dpsn, uint8_t opcode, uint64_t va, uint32_t rlen,
		    uint8_t syn, uint32_t paylen)
{
	const struct sr_opcode_info *oi = &sr_opcode[opcode];
	unsigned pad = (4 - paylen % 4) % 4;
	size_t len = oi->length + paylen + pad + SR_ICRC_LEN;
	uint8_t *r = sq + sqlen + 2, *p = r + 4;

	if (sqlen + 2 + 4 + len > sizeof(sq))
		return;
	sq[sqlen] = (uint8_t)(len + 4);
	sq[sqlen + 1] = (uint8_t)((len + 4) >> 8);
	r[0] = FX_QPN | FX_KEY | FX_PSN | FX_VA;
	r[1] = (uint8_t)q;
	r[2] = (uint8_t)k;
	r[3] = (uint8_t)(int8_t)dpsn;
	memset(p, 0, len);
	sr_bth_build((struct sr_bth *)p, opcode, false, false, pad, SR_DEFAULT_PKEY, 0, true, 0);
	/* FX_VA maps va to base + va % (len + 256) - 128. */
	if (oi->mask & SR_M_RETH)
		sr_reth_build((struct sr_reth *)(p + oi->offset[SR_H_RETH]), va + 128, 0, rlen);
	if (oi->mask & SR_M_ATMETH)
		sr_atmeth_build((struct sr_atmeth *)(p + oi->offset[SR_H_ATMETH]), va + 128, 0, 1, 0);
	if (oi->mask & SR_M_AETH)
		sr_aeth_build((struct sr_aeth *)(p + oi->offset[SR_H_AETH]), syn, 0);
	if (oi->mask & SR_M_DETH)
		sr_deth_build((struct sr_deth *)(p + oi->offset[SR_H_DETH]), FUZZ_QKEY, 7);
	if (oi->mask & SR_M_FETH)
		sr_feth_build((struct sr_feth *)(p + oi->offset[SR_H_FETH]), 0, 1);
	memset(p + oi->length, 0xab, paylen);
	sqlen += 2 + 4 + len;
}

static void rec_clock(unsigned units100us)
{
	sq[sqlen++] = (uint8_t)units100us;
	sq[sqlen++] = (uint8_t)(0x80 | (units100us >> 8 & 0x7f));
}

static void seq_put(const char *dir, int i)
{
	put(dir, "synth", i, sq, sqlen);
	sqlen = 0;
}

#define RC(x) SR_OPC(SR_TR_RC, SR_OP_##x)
#define UC(x) SR_OPC(SR_TR_UC, SR_OP_##x)

static void synth(const char *dir)
{
	int n = 0;

	/* Multi-packet WRITE, then SEND, into FQ_RC. */
	rec_pkt(FQ_RC, FK_RW, 0, RC(WRITE_FIRST), 0, 3000, 0, 1024);
	rec_pkt(FQ_RC, FK_RW, 0, RC(WRITE_MIDDLE), 0, 0, 0, 1024);
	rec_pkt(FQ_RC, FK_RW, 0, RC(WRITE_LAST), 0, 0, 0, 952);
	rec_pkt(FQ_RC, FK_RW, 0, RC(SEND_FIRST), 0, 0, 0, 1024);
	rec_pkt(FQ_RC, FK_RW, 0, RC(SEND_LAST_IMM), 0, 0, 0, 500);
	rec_pkt(FQ_RC, FK_RW, 0, RC(SEND_ONLY_INV), 0, 0, 0, 16);
	seq_put(dir, n++);
	/* A whole 8 KiB WRITE: FIRST, six MIDDLEs (placed and checked in one pass), LAST. */
	rec_pkt(FQ_RC, FK_RW, 0, RC(WRITE_FIRST), 0, 8192, 0, 1024);
	for (int i = 0; i < 6; i++)
		rec_pkt(FQ_RC, FK_RW, 0, RC(WRITE_MIDDLE), 0, 0, 0, 1024);
	rec_pkt(FQ_RC, FK_RW, 0, RC(WRITE_LAST_IMM), 0, 0, 0, 1024);
	seq_put(dir, n++);
	/* Out of order: +2 and +1 kept, 0 fills the gap, then duplicates. */
	rec_pkt(FQ_RC, FK_RW, 2, RC(WRITE_ONLY), 64, 64, 0, 64);
	rec_pkt(FQ_RC, FK_RW, 1, RC(SEND_ONLY), 0, 0, 0, 64);
	rec_pkt(FQ_RC, FK_RW, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_RC, FK_RW, -1, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_RC, FK_RW, -3, RC(SEND_ONLY), 0, 0, 0, 64);
	seq_put(dir, n++);
	/* READ, duplicates of it (whole, from its middle), ATOMICs and their duplicates, ATOMIC
	 * WRITE, FLUSH. */
	rec_pkt(FQ_RC, FK_RW, 0, RC(READ_REQ), 0, 3000, 0, 0);
	rec_pkt(FQ_RC, FK_RW, -3, RC(READ_REQ), 0, 3000, 0, 0);
	rec_pkt(FQ_RC, FK_RW, -2, RC(READ_REQ), 1024, 1976, 0, 0);
	rec_pkt(FQ_RC, FK_RW, 0, RC(CMP_SWAP), 0, 0, 0, 0);
	rec_pkt(FQ_RC, FK_RW, -1, RC(CMP_SWAP), 0, 0, 0, 0);
	rec_pkt(FQ_RC, FK_MW, 0, RC(FETCH_ADD), 8, 0, 0, 0);
	rec_pkt(FQ_RC, FK_RW, 0, RC(ATOMIC_WRITE), 16, 8, 0, 8);
	rec_pkt(FQ_RC, FK_RW, 0, RC(FLUSH), 0, 4096, 0, 0);
	rec_pkt(FQ_RC, FK_RW, -2, RC(ATOMIC_WRITE), 16, 8, 0, 8);
	seq_put(dir, n++);
	/* Responses to FQ_RC's requests: the SEND's ACK lets the rest go; the WRITE's ACK, the
	 * READ's three responses, the ATOMICs' ACKs. Two PSN guesses for how the completer moves. */
	for (int v = 0; v < 2; v++) {
		rec_pkt(FQ_RC, FK_RW, 0, RC(ACK), 0, 0, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
		rec_pkt(FQ_RC, FK_RW, 1, RC(ACK), 0, 0, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
		rec_pkt(FQ_RC, FK_RW, 0, RC(READ_RESP_FIRST), 0, 0, SR_AETH_ACK_UNLIMITED, 1024);
		rec_pkt(FQ_RC, FK_RW, v, RC(READ_RESP_MIDDLE), 0, 0, 0, 1024);
		rec_pkt(FQ_RC, FK_RW, 2 * v, RC(READ_RESP_LAST), 0, 0, SR_AETH_ACK_UNLIMITED, 452);
		rec_pkt(FQ_RC, FK_RW, 0, RC(ATOMIC_ACK), 0, 0, SR_AETH_ACK_UNLIMITED, 0);
		rec_pkt(FQ_RC, FK_RW, v, RC(ATOMIC_ACK), 0, 0, SR_AETH_ACK_UNLIMITED, 0);
		seq_put(dir, n++);
	}
	/* NAKs: sequence error (go-back-N, repair), then timeouts until the retries run out. */
	rec_pkt(FQ_RC, FK_RW, 0, RC(ACK), 0, 0, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, 0);
	rec_pkt(FQ_RC, FK_RW, 1, RC(ACK), 0, 0, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, 0);
	for (int i = 0; i < 6; i++)
		rec_clock(200);
	seq_put(dir, n++);
	for (uint8_t code = 1; code <= 4; code++) {
		rec_pkt(FQ_RC, FK_RW, 0, RC(ACK), 0, 0, SR_AETH_NAK | code, 0);
		rec_clock(10);
		seq_put(dir, n++);
	}
	/* RNR NAKs to FQ_RC_RNR's SEND: waits, then more than rnr_retry of them. */
	for (int i = 0; i < 4; i++) {
		rec_pkt(FQ_RC_RNR, FK_RW, 0, RC(ACK), 0, 0, SR_AETH_RNR_NAK | 1, 0);
		rec_clock(5);
	}
	rec_pkt(FQ_RC_RNR, FK_RW, 0, RC(ACK), 0, 0, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0);
	seq_put(dir, n++);
	/* The SRQ (four receive WQEs, then RNR), UC, UD, the other PD, the window. */
	for (int i = 0; i < 5; i++)
		rec_pkt(FQ_RC_SRQ, FK_RW, 0, RC(SEND_ONLY), 0, 0, 0, 200);
	seq_put(dir, n++);
	rec_pkt(FQ_UC, FK_RW, 0, UC(SEND_FIRST), 0, 0, 0, 256);
	rec_pkt(FQ_UC, FK_RW, 0, UC(SEND_LAST), 0, 0, 0, 100);
	rec_pkt(FQ_UC, FK_RW, 0, UC(WRITE_FIRST), 0, 1500, 0, 1024);
	rec_pkt(FQ_UC, FK_RW, 1, UC(WRITE_LAST), 0, 0, 0, 476);
	rec_pkt(FQ_UC, FK_RW, 0, UC(WRITE_ONLY_IMM), 0, 16, 0, 16);
	rec_pkt(FQ_UD, FK_RW, 0, SR_OPC(SR_TR_UD, SR_OP_SEND_ONLY), 0, 0, 0, 300);
	rec_pkt(FQ_UD, FK_RW, 0, SR_OPC(SR_TR_UD, SR_OP_SEND_ONLY_IMM), 0, 0, 0, 1024);
	seq_put(dir, n++);
	rec_pkt(FQ_RC_PD2, FK_PD2, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_RC_PD2, FK_PD2, 0, RC(READ_RESP_ONLY), 0, 0, SR_AETH_ACK_UNLIMITED, 256);
	rec_pkt(FQ_RC_PD2, FK_RW, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	seq_put(dir, n++);
	rec_pkt(FQ_RC, FK_MW, 0, RC(WRITE_ONLY), 0, 4096, 0, 1024);
	rec_pkt(FQ_RC, FK_MW, 0, RC(READ_REQ), 4000, 96, 0, 0);
	rec_pkt(FQ_RC, FK_MWMR, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	seq_put(dir, n++);
	rec_pkt(FQ_RC, FK_MW2, 0, RC(WRITE_ONLY), 1000, 1024, 0, 1024);
	rec_pkt(FQ_RC, FK_MW2, 0, RC(CMP_SWAP), 2040, 0, 0, 0);
	rec_pkt(FQ_RC_SRQ, FK_MW2, 0, RC(WRITE_ONLY), 0, 64, 0, 64);	/* not its QP */
	rec_pkt(FQ_RC, FK_MW2, 0, RC(SEND_ONLY_INV), 0, 0, 0, 8);
	rec_pkt(FQ_RC, FK_MW2, 0, RC(WRITE_ONLY), 0, 64, 0, 64);	/* invalidated */
	seq_put(dir, n++);
	/* Fast registration: across the boundary of its two pages (mapped in reverse order),
	 * READ, ATOMIC, the invalidated generation, a SEND with invalidate, then the key again. */
	rec_pkt(FQ_RC, FK_FR, 0, RC(WRITE_ONLY), 4000, 200, 0, 200);
	rec_pkt(FQ_RC, FK_FR, 0, RC(READ_REQ), 3900, 400, 0, 0);
	rec_pkt(FQ_RC, FK_FR, 0, RC(FETCH_ADD), 4096, 0, 0, 0);
	rec_pkt(FQ_RC, FK_FR_OLD, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	seq_put(dir, n++);
	rec_pkt(FQ_RC, FK_FR, 0, RC(SEND_ONLY_INV), 0, 0, 0, 32);
	rec_pkt(FQ_RC, FK_FR, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	seq_put(dir, n++);
	/* XRC: SEND into the domain's SRQ (two WQEs, then RNR), WRITE and READ with the SRQ's
	 * PD's key, an ATOMIC. */
	for (int i = 0; i < 3; i++)
		rec_pkt(FQ_XRC, FK_RW, 0, SR_OPC(SR_TR_XRC, SR_OP_SEND_ONLY), 0, 0, 0, 300);
	rec_pkt(FQ_XRC, FK_RW, 0, SR_OPC(SR_TR_XRC, SR_OP_WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_XRC, FK_RW, 0, SR_OPC(SR_TR_XRC, SR_OP_READ_REQ), 0, 2000, 0, 0);
	rec_pkt(FQ_XRC, FK_RW, 0, SR_OPC(SR_TR_XRC, SR_OP_CMP_SWAP), 0, 0, 0, 0);
	seq_put(dir, n++);
	/* The ODP MR: across into its hole, in the hole, past it, a READ over it, an ATOMIC in
	 * it: each refused (the QP to ERR after the first), never a SIGSEGV. */
	rec_pkt(FQ_RC, FK_ODP, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_RC, FK_ODP, 0, RC(WRITE_ONLY), 4000, 200, 0, 200);
	seq_put(dir, n++);
	rec_pkt(FQ_RC, FK_ODP, 0, RC(READ_REQ), 8192, 64, 0, 0);
	rec_pkt(FQ_RC, FK_ODP, 0, RC(READ_REQ), 100, 9000, 0, 0);
	seq_put(dir, n++);
	rec_pkt(FQ_RC, FK_ODP, 0, RC(FETCH_ADD), 5000, 0, 0, 0);
	seq_put(dir, n++);
	/* States: RTR takes requests, SQD too; ERR, INIT, RESET and the destroyed QPN drop. */
	rec_pkt(FQ_RC_RTR, FK_RW, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_RC_SQD, FK_RW, 0, RC(READ_REQ), 0, 64, 0, 0);
	rec_pkt(FQ_RC_ERR, FK_RW, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_RC_INIT, FK_RW, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_RC_RESET, FK_RW, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	rec_pkt(FQ_GONE, FK_RW, 0, RC(WRITE_ONLY), 0, 64, 0, 64);
	seq_put(dir, n++);
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

/* fuzz_cm_state: records [ctl][len][datagram] (fuzz_cm_state.c). */
static uint8_t cs[4096];
static size_t cslen;

static void cs_msg(uint8_t ctl, uint8_t type, uint16_t reason, uint8_t pdata_len)
{
	struct cm_msg m = { .type = type, .src_id = 0x777, .ps = RDMA_PS_TCP, .src_port = 50000,
			    .qpn = 0x4242, .psn = 0x100, .mtu = IBV_MTU_1024,
			    .responder_resources = 2, .initiator_depth = 2, .retry_count = 7,
			    .rnr_retry_count = 7, .qp_type = IBV_QPT_RC, .reason = reason,
			    .pdata_len = pdata_len };
	int len;

	m.gid.raw[10] = 0xff;
	m.gid.raw[11] = 0xff;
	m.gid.raw[12] = 127;
	m.gid.raw[15] = 1;
	memset(m.pdata, 0x42, pdata_len);
	len = cm_msg_encode(&m, cs + cslen + 2, sizeof(cs) - cslen - 2);
	if (len <= 0)
		return;
	cs[cslen] = ctl;
	cs[cslen + 1] = (uint8_t)len;
	cslen += 2 + (size_t)len;
}

static void cs_put(const char *dir, int i)
{
	put(dir, "cmstate", i, cs, cslen);
	cslen = 0;
}

static void cm_state_seeds(const char *dir)
{
	int n = 0;

	/* The active id: REP (no QP: CONNECT_RESPONSE), then the peer's DREQ, PROBE, REJ. */
	cs_msg(0x07, CM_MSG_REP, 0, 16);
	cs_msg(0x07, CM_MSG_PROBE, 0, 0);
	cs_msg(0x07, CM_MSG_DREQ, 0, 0);
	cs_put(dir, n++);
	cs_msg(0x07, CM_MSG_REJ, CM_REJ_CONSUMER_DEFINED, 8);
	cs_put(dir, n++);
	cs_msg(0x07, CM_MSG_SIDR_REP, 0, 0);
	cs_msg(0x0f, CM_MSG_REP, 0, 0);		/* from a stranger */
	cs_put(dir, n++);
	/* The listener: a REQ (a child), its retransmission, an RTU and a DREQ for the child,
	 * a REJ; a REQ rejected by the application; REQs from a stranger, for another port. */
	cs_msg(0x14, CM_MSG_REQ, 0, 20);
	cs_msg(0x14, CM_MSG_REQ, 0, 20);
	cs_msg(0x06, CM_MSG_RTU, 0, 0);
	cs_msg(0x06, CM_MSG_DREQ, 0, 0);
	cs_msg(0x06, CM_MSG_REJ, CM_REJ_STALE_CONN, 0);
	cs_put(dir, n++);
	cs_msg(0x34, CM_MSG_REQ, 0, 0);
	cs_msg(0x14, CM_MSG_REQ, 0, 0);
	cs_msg(0x1c, CM_MSG_REQ, 0, 0);
	cs_msg(0x04, CM_MSG_REQ, 0, 0);
	cs_msg(0x14, CM_MSG_SIDR_REQ, 0, 0);
	cs_msg(0x00, CM_MSG_PROBE, 0, 0);
	cs_put(dir, n++);
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

/* ---- RTRS and RNBD ------------------------------------------------------------------------ */

/* The RNBD user headers of the seeds: each message with the RTRS direction and data length it
 * travels with (rnbd-proto.h). */
struct rnbd_seed {
	const char *name;
	int dir;
	uint32_t datalen;
	uint8_t usr[sizeof(struct rnbd_msg_open)];
	size_t usrlen;
};

static int rnbd_seed_list(struct rnbd_seed *v)
{
	int n = 0;
	static const struct { const char *name; uint32_t rw, size; uint64_t sector; } io[] = {
		{ "read", RNBD_OP_READ, 4096, 8 },
		{ "write", RNBD_OP_WRITE | RNBD_F_FUA, 4096, 0 },
		{ "write-preflush", RNBD_OP_WRITE | RNBD_F_PREFLUSH, 0, 0 },
		{ "flush", RNBD_OP_FLUSH, 0, 0 },
		{ "discard", RNBD_OP_DISCARD, 65536, 16 },
		{ "zeroes", RNBD_OP_WRITE_ZEROES | RNBD_F_NOUNMAP, 8192, 2040 },
		{ "erase", RNBD_OP_SECURE_ERASE, 512, 0 },
	};
	static const char *const names[] = { "disk0", "/vol//img.raw", "a/b/c" };

	memset(v, 0, 16 * sizeof(*v));
	v[n].name = "sess-info";
	v[n].dir = RNBD_DIR_READ;
	v[n].datalen = sizeof(struct rnbd_msg_sess_info_rsp);
	rnbd_enc_sess_info((void *)v[n].usr, RNBD_PROTO_VER_MAJOR);
	v[n++].usrlen = sizeof(struct rnbd_msg_sess_info);
	for (unsigned i = 0; i < 3; i++) {
		v[n].name = "open";
		v[n].dir = RNBD_DIR_READ;
		v[n].datalen = sizeof(struct rnbd_msg_open_rsp);
		rnbd_enc_open((void *)v[n].usr, i, names[i]);
		v[n++].usrlen = sizeof(struct rnbd_msg_open);
	}
	v[n].name = "close";
	v[n].dir = RNBD_DIR_WRITE;
	rnbd_enc_close((void *)v[n].usr, 0);
	v[n++].usrlen = sizeof(struct rnbd_msg_close);
	for (unsigned i = 0; i < sizeof(io) / sizeof(io[0]); i++) {
		v[n].name = io[i].name;
		v[n].dir = rnbd_op(io[i].rw) == RNBD_OP_READ ? RNBD_DIR_READ : RNBD_DIR_WRITE;
		v[n].datalen = rnbd_op(io[i].rw) <= RNBD_OP_WRITE ? io[i].size : 0;
		rnbd_enc_io((void *)v[n].usr, 0, io[i].sector, io[i].rw, io[i].size, 0);
		v[n++].usrlen = sizeof(struct rnbd_msg_io);
	}
	/* a version-1 client's IO header (no prio) */
	v[n] = v[n - 6];
	v[n].name = "write-v1";
	v[n++].usrlen = RNBD_MSG_IO_V1_LEN;
	return n;
}

static void rtrs_seeds(const char *dir)
{
	uint8_t b[8192];
	struct rtrs_msg_conn_req rq = { .magic = RTRS_MAGIC, .version = RTRS_PROTO_VER, .cid = 1,
					.cid_num = 3, .recon_cnt = 2,
					.first_conn = RTRS_CON_REQ_FIRST_CONN };
	struct rtrs_msg_info_req ir = { .type = RTRS_MSG_INFO_REQ };
	struct rnbd_seed v[16];
	int nv = rnbd_seed_list(v), k = 0;

	memset(rq.sess_uuid, 0x11, 16);
	memset(rq.paths_uuid, 0x22, 16);
	b[0] = 0;
	memcpy(b + 1, &rq, sizeof(rq));
	put(dir, "rtrs-con-req", 0, b, 1 + sizeof(rq));
	b[0] = 1;
	memcpy(ir.sessname, "client-host@server", 19);
	memcpy(b + 1, &ir, sizeof(ir));
	put(dir, "rtrs-info-req", 0, b, 1 + sizeof(ir));
	/* IO: [2][cfg][payload le32][back le16][cid][nsec] + user header, trailer, descriptors
	 * (READ: the header at chunk offset 0, the trailer after it; WRITE: data first, so the
	 * trailer sits at datalen + usrlen). */
	for (unsigned c = 0; c < FUZZ_RTRS_NCFG; c++) {
		const struct fuzz_rtrs_cfg *cf = &fuzz_rtrs_cfgs[c];
		unsigned mem_bits = rtrs_mem_bits(cf->qd);
		uint32_t chunk_id = cf->qd - 1;

		for (int i = 0; i < nv; i++) {
			size_t len = 10;
			uint32_t off;
			uint16_t t, ul = (uint16_t)v[i].usrlen;

			if (ul > cf->max_hdr)
				continue;
			if (v[i].dir == RNBD_DIR_WRITE) {
				if ((uint64_t)v[i].datalen + ul + 4 > cf->chunk)
					continue;
				off = v[i].datalen + ul;
			} else {
				off = ul;
			}
			memcpy(b + len, v[i].usr, ul);
			len += ul;
			t = v[i].dir == RNBD_DIR_WRITE ? RTRS_MSG_WRITE : RTRS_MSG_READ;
			memcpy(b + len, &t, 2);
			memcpy(b + len + 2, &ul, 2);
			len += 4;
			if (t == RTRS_MSG_READ) {
				/* one descriptor, or three that add up to the same length */
				int three = v[i].datalen >= 1024 && k % 2;
				uint16_t fl = 0, sg = three ? 3 : 1;
				struct rtrs_sg_desc dd[3] = {
					{ 0x7f0000100000ull, 0x1234, three ? 512 : v[i].datalen },
					{ 0x7f0000200000ull, 0x1234, 512 },
					{ 0x7f0000300000ull, 0x1234, v[i].datalen - 1024 },
				};
				memcpy(b + len, &fl, 2);
				memcpy(b + len + 2, &sg, 2);
				len += 4;
				memcpy(b + len, dd, sg * sizeof(dd[0]));
				len += sg * sizeof(dd[0]);
			}
			uint32_t pl = chunk_id << mem_bits | off;
			b[0] = 2;
			b[1] = (uint8_t)c;
			memcpy(b + 2, &pl, 4);
			b[6] = (uint8_t)ul;
			b[7] = (uint8_t)(ul >> 8);
			b[8] = 1;				/* the first IO connection */
			b[9] = (uint8_t)(3 + k % 3);		/* 2048 sectors, 2^21, 2^55 - 1 */
			put(dir, v[i].name, k++, b, len);
		}
	}
}

static void rnbd_seeds(const char *dir)
{
	uint8_t b[8 + sizeof(struct rnbd_msg_open)];
	struct rnbd_seed v[16];
	int nv = rnbd_seed_list(v);
	struct rnbd_dev_attrs a = { .device_id = 3, .nsectors = 2048, .max_hw_sectors = 256,
				    .max_discard_sectors = 256, .discard_granularity = 4096,
				    .physical_block_size = 4096, .logical_block_size = 512,
				    .max_segments = 1, .cache_policy = RNBD_WRITEBACK };

	/* [ctl: dir | side << 1][datalen le32][nsec][message] */
	for (int i = 0; i < nv; i++) {
		b[0] = (uint8_t)v[i].dir;
		memcpy(b + 1, &v[i].datalen, 4);
		b[5] = (uint8_t)(3 + i % 3);
		memcpy(b + 6, v[i].usr, v[i].usrlen);
		put(dir, v[i].name, i, b, 6 + v[i].usrlen);
	}
	struct rnbd_msg_open_rsp orsp;
	struct rnbd_msg_sess_info_rsp srsp;

	b[0] = 2;
	memset(b + 1, 0, 5);
	rnbd_enc_open_rsp(&orsp, &a);
	memcpy(b + 6, &orsp, sizeof(orsp));
	put(dir, "open-rsp", 0, b, 6 + sizeof(orsp));
	rnbd_enc_sess_info_rsp(&srsp, RNBD_PROTO_VER_MAJOR);
	memcpy(b + 6, &srsp, sizeof(srsp));
	put(dir, "sess-info-rsp", 0, b, 6 + sizeof(srsp));
}

/* fuzz_mad: one MAD of each CM attribute (and of three it does not decode). */
static void mad_put(const char *dir, const char *name, int i, struct sr_cm_mad *m)
{
	uint8_t buf[SR_MAD_LEN];

	m->hdr.base_version = SR_MAD_BASE_VERSION;
	m->hdr.mgmt_class = SR_MAD_CLASS_CM;
	m->hdr.class_version = SR_MAD_CM_CLASS_VERSION;
	m->hdr.method = SR_MAD_METHOD_SEND;
	m->hdr.tid = 0x42db4581eull + (uint64_t)i;
	if (sr_cm_mad_encode(m, buf)) {
		/* LAP, APR, ClassPortInfo: the header alone, some body */
		memset(buf, 0, sizeof(buf));
		sr_mad_hdr_encode(&m->hdr, buf);
		memset(buf + SR_MAD_HDR_LEN, 0x11, 16);
	}
	put(dir, name, i, buf, sizeof(buf));
}

static void mad_conn(struct ibcm_rdma_conn *c, uint16_t ps, int family)
{
	ibcm_rdma_defaults(c);
	c->ps = ps;
	if (family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&c->src, *d = (struct sockaddr_in *)&c->dst;

		s->sin_family = d->sin_family = AF_INET;
		s->sin_addr.s_addr = htonl(0x0a000002);
		d->sin_addr.s_addr = htonl(0x0a000001);
		s->sin_port = htons(56604);
		d->sin_port = htons(7174);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&c->src;
		struct sockaddr_in6 *d = (struct sockaddr_in6 *)&c->dst;

		s->sin6_family = d->sin6_family = AF_INET6;
		s->sin6_addr.s6_addr[0] = d->sin6_addr.s6_addr[0] = 0xfd;
		s->sin6_addr.s6_addr[15] = 2;
		d->sin6_addr.s6_addr[15] = 1;
		s->sin6_port = htons(56604);
		d->sin6_port = htons(7174);
	}
	c->sgid.raw[10] = c->sgid.raw[11] = c->dgid.raw[10] = c->dgid.raw[11] = 0xff;
	c->sgid.raw[12] = c->dgid.raw[12] = 10;
	c->sgid.raw[15] = 2;
	c->dgid.raw[15] = 1;
	c->qpn = 0x17;
	c->psn = 0x2fe935;
	c->responder_resources = c->initiator_depth = 1;
	c->ca_guid = 0xfffe000002ull;
	c->pdata = (const uint8_t *)"rdma_cm private data";
	c->pdata_len = 20;
}

static void mad_seeds(const char *dir)
{
	static const uint16_t ps[] = { IBCM_PS_TCP, IBCM_PS_UDP, IBCM_PS_IB, IBCM_PS_IPOIB };
	struct sr_cm_mad m;
	struct ibcm_rdma_conn c;
	int n = 0;

	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		for (int fam = 0; fam < 2; fam++) {
			memset(&m, 0, sizeof(m));
			mad_conn(&c, ps[i], fam ? AF_INET6 : AF_INET);
			c.qp_type = i == 1 ? IBV_QPT_UC : fam ? IBV_QPT_XRC_SEND : IBV_QPT_RC;
			if (ibcm_rdma_req_build(&m.req, &c) == 0) {
				m.hdr.attr_id = SR_CM_ATTR_REQ;
				m.req.local_comm_id = 0x1e58b42d;
				m.req.max_cm_retries = 15;
				m.req.alternate.local_lid = 1;
				m.req.sap_supported = true;
				mad_put(dir, "req", n++, &m);
			}
			memset(&m, 0, sizeof(m));
			if (ibcm_rdma_sidr_req_build(&m.sidr_req, &c) == 0) {
				m.hdr.attr_id = SR_CM_ATTR_SIDR_REQ;
				m.sidr_req.request_id = 0x1058b42d;
				mad_put(dir, "sidr-req", n++, &m);
			}
		}
	}
	memset(&m, 0, sizeof(m));
	mad_conn(&c, IBCM_PS_TCP, AF_INET);
	c.target_ack_delay = 15;
	c.srq = true;
	if (ibcm_rdma_rep_build(&m.rep, &c) == 0) {
		m.hdr.attr_id = SR_CM_ATTR_REP;
		m.rep.local_comm_id = 0x1d58b42d;
		m.rep.remote_comm_id = 0x1e58b42d;
		mad_put(dir, "rep", n++, &m);
	}
	memset(&m, 0, sizeof(m));
	c.sidr_status = SR_CM_SIDR_SUCCESS;
	c.qkey = 0x01234567;
	if (ibcm_rdma_sidr_rep_build(&m.sidr_rep, ibcm_rdma_service_id(IBCM_PS_UDP, 7174), &c) == 0) {
		m.hdr.attr_id = SR_CM_ATTR_SIDR_REP;
		m.sidr_rep.request_id = 0x1058b42d;
		mad_put(dir, "sidr-rep", n++, &m);
	}
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_MRA;
	m.mra.local_comm_id = 0x1d58b42d;
	m.mra.remote_comm_id = 0x1e58b42d;
	m.mra.msg_mraed = SR_CM_MSG_REP;
	m.mra.service_timeout = 20;
	mad_put(dir, "mra", n++, &m);
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_REJ;
	m.rej.local_comm_id = 0x1d58b42d;
	m.rej.remote_comm_id = 0x1e58b42d;
	m.rej.reason = SR_CM_REJ_CONSUMER_DEFINED;
	m.rej.ari_len = 4;
	memset(m.rej.ari, 0x22, 4);
	memset(m.rej.pdata, 0x33, 16);
	mad_put(dir, "rej", n++, &m);
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_RTU;
	m.rtu.local_comm_id = 0x1e58b42d;
	m.rtu.remote_comm_id = 0x1d58b42d;
	mad_put(dir, "rtu", n++, &m);
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_DREQ;
	m.dreq.local_comm_id = 0x1e58b42d;
	m.dreq.remote_comm_id = 0x1d58b42d;
	m.dreq.remote_qpn = 0x17;
	mad_put(dir, "dreq", n++, &m);
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_DREP;
	m.drep.local_comm_id = 0x1d58b42d;
	m.drep.remote_comm_id = 0x1e58b42d;
	mad_put(dir, "drep", n++, &m);
	memset(&m, 0, sizeof(m));
	m.hdr.attr_id = SR_CM_ATTR_LAP;
	mad_put(dir, "lap", n++, &m);
	m.hdr.attr_id = SR_CM_ATTR_APR;
	mad_put(dir, "apr", n++, &m);
	m.hdr.attr_id = SR_CM_ATTR_CLASS_PORT_INFO;
	m.hdr.method = SR_MAD_METHOD_GET;
	mad_put(dir, "classportinfo", n++, &m);
}

/* fuzz_ibcm_state: records [op][a][b], op 0 followed by [len][body] (fuzz_ibcm_state.c). */
static uint8_t is[4096];
static size_t islen;

static void is_rec(uint8_t op, uint8_t a, uint8_t b)
{
	is[islen++] = op;
	is[islen++] = a;
	is[islen++] = b;
}

/* A MAD from the input: attribute index a (fuzz_ibcm_state.c's table), control ctl, body. */
static void is_mad(uint8_t a, uint8_t ctl, const uint8_t *body, uint8_t len)
{
	is_rec(0, a, ctl);
	is[islen++] = len;
	if (len)
		memcpy(is + islen, body, len);
	islen += len;
}

static void is_put(const char *dir, const char *name, int i)
{
	put(dir, name, i, is, islen);
	islen = 0;
}

enum { IA_REQ, IA_MRA, IA_REJ, IA_REP, IA_RTU, IA_DREQ, IA_DREP, IA_SIDR_REQ, IA_SIDR_REP };
enum { IS_MAD = 0, IS_BACK = 2, IS_DROP = 3, IS_TICK = 4, IS_APP = 5 };
enum { APP_CONNECT, APP_ACCEPT, APP_REJECT, APP_DISCONNECT, APP_ESTABLISH, APP_DESTROY,
       APP_CONNECT_UD, APP_ANSWER_UD };

static void ibcm_state_seeds(const char *dir)
{
	uint8_t b[232];
	int n = 0;

	/* 1. A loopback connection through every state: REQ, REP, RTU, DREQ, DREP, time-wait. */
	is_rec(IS_APP, APP_CONNECT, 0);
	is_rec(IS_BACK, 0, 0);			/* the REQ: a child */
	is_rec(IS_APP, APP_ACCEPT, 0);
	is_rec(IS_BACK, 0, 0);			/* the REP: CONNECT_RESPONSE (no QP) */
	is_rec(IS_APP, APP_ESTABLISH, 0);
	is_rec(IS_BACK, 0, 0);			/* the RTU: the child ESTABLISHED */
	is_rec(IS_APP, APP_DISCONNECT, 0);	/* the active id's DREQ */
	is_rec(IS_BACK, 0, 0);			/* to the child: DREP at once */
	is_rec(IS_BACK, 0, 0);			/* the DREP: the active id in TIMEWAIT */
	is_rec(IS_TICK, 25, 255);		/* the time-wait ends */
	is_put(dir, "loop", n++);
	/* 2. The same, the passive side disconnecting, DREQs crossing, a duplicate REP. */
	is_rec(IS_APP, APP_CONNECT, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ACCEPT, 1);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ESTABLISH, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_DISCONNECT, 1);	/* the child's DREQ */
	is_rec(IS_APP, APP_DISCONNECT, 0);	/* and the active id's */
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_BACK, 0, 0);
	is_mad(IA_REP, 0x06, NULL, 0);		/* a late duplicate REP for the active id */
	is_rec(IS_TICK, 24, 200);
	is_rec(IS_TICK, 24, 200);
	is_put(dir, "loop-crossed", n++);
	/* 3. Lost: the REQ dropped, retransmitted by the timer; then no answer at all until
	 * UNREACHABLE; a REP's RTU lost (the duplicate REP answered again). */
	is_rec(IS_APP, APP_CONNECT, 0);
	is_rec(IS_DROP, 0, 0);
	is_rec(IS_TICK, 22, 100);		/* ~0.4 s: the REQ again */
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ACCEPT, 0);
	is_rec(IS_DROP, 0, 0);			/* the REP lost */
	is_rec(IS_TICK, 22, 100);		/* sent again */
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ESTABLISH, 0);
	is_rec(IS_DROP, 0, 0);			/* the RTU lost */
	for (int i = 0; i < 16; i++)
		is_rec(IS_TICK, 22, 100);	/* the child's REP to its last retry: UNREACHABLE */
	is_rec(IS_APP, APP_CONNECT, 0);
	for (int i = 0; i < 17; i++)
		is_rec(IS_TICK, 22, 100);	/* the REQ never answered */
	is_put(dir, "lost", n++);
	/* 4. MRAs: the active id's REQ MRAed, the child's REP MRAed (by the input), and their
	 * service timeouts running out. */
	is_rec(IS_APP, APP_CONNECT, 0);
	is_rec(IS_BACK, 0, 0);
	memset(b, 0, sizeof(b));
	b[9] = 18 << 3;				/* MRA: service timeout 18 (~1 s) */
	is_mad(IA_MRA, 0x06, b, 10);		/* REQ MRAed (the active id) */
	is_rec(IS_APP, APP_ACCEPT, 0);
	b[8] = 1 << 6;				/* REP MRAed */
	is_mad(IA_MRA, 0x16, b, 10);		/* to the child */
	is_rec(IS_TICK, 25, 100);
	is_rec(IS_TICK, 25, 100);
	is_put(dir, "mra", n++);
	/* 5. Rejects: the child rejected by the application; the active id rejected by a REJ of
	 * the input (before the peer knew our ID); a REJ from the stranger. */
	is_rec(IS_APP, APP_CONNECT, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_REJECT, 8);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_CONNECT, 0);
	memset(b, 0, sizeof(b));
	b[10] = 0;
	b[11] = 28;				/* consumer defined */
	is_mad(IA_REJ, 0x0a, b, 12);		/* from the stranger */
	is_mad(IA_REJ, 0x02, b, 12);
	is_rec(IS_BACK, 0, 0);			/* the REQ, now stale */
	is_put(dir, "reject", n++);
	/* 6. The listener alone, from the input: a valid REQ (and its duplicate), accept, RTU,
	 * DREQ, DREP, all with the child's IDs; a REQ for another port; one from a stranger. */
	memset(b, 0, sizeof(b));
	b[0] = 0x77;				/* Local Communication ID 0x77000000 */
	is_mad(IA_REQ, 0x40, b, 4);
	is_mad(IA_REQ, 0x40, b, 4);
	is_rec(IS_APP, APP_ACCEPT, 0);
	is_mad(IA_RTU, 0x16, NULL, 0);
	is_mad(IA_DREQ, 0x16, NULL, 0);
	is_mad(IA_DREQ, 0x16, NULL, 0);		/* repeated: DREP again */
	is_mad(IA_REQ, 0x00, b, 4);
	b[0] = 0x78;
	is_mad(IA_REQ, 0x48, b, 4);
	is_rec(IS_APP, APP_ACCEPT, 0);
	is_mad(IA_RTU, 0x1e, NULL, 0);		/* the stranger's RTU */
	is_rec(IS_APP, APP_DESTROY, 1);
	is_put(dir, "listener", n++);
	/* 7. SIDR: a UD id's SIDR_REQ looped back to the UD listener, accepted, answered; then
	 * one rejected; a SIDR_REP from the input for the UD id; unanswered to UNREACHABLE. */
	is_rec(IS_APP, APP_CONNECT_UD, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ANSWER_UD, 0x80);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_DESTROY, 0x80);
	is_rec(IS_APP, APP_CONNECT_UD, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ANSWER_UD, 0x05);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_DESTROY, 0x80);
	is_rec(IS_APP, APP_CONNECT_UD, 0);
	is_mad(IA_SIDR_REP, 0x22, NULL, 0);
	is_rec(IS_APP, APP_DESTROY, 0x80);
	is_rec(IS_APP, APP_CONNECT_UD, 0);
	for (int i = 0; i < 17; i++)
		is_rec(IS_TICK, 22, 100);
	is_mad(IA_SIDR_REQ, 0x40, NULL, 0);
	is_mad(IA_SIDR_REQ, 0x48, NULL, 0);
	is_put(dir, "sidr", n++);
	/* 8. Mutated loopback MADs: each message of a connection with one byte changed. */
	is_rec(IS_APP, APP_CONNECT, 0);
	is_rec(IS_BACK, 0x01, 24 + 43);		/* REQ: TST / timeouts byte */
	is_rec(IS_APP, APP_ACCEPT, 0);
	is_rec(IS_BACK, 0x80, 24 + 27);		/* REP: a reserved bit */
	is_rec(IS_APP, APP_ESTABLISH, 0);
	is_rec(IS_BACK, 0x01, 24 + 0);		/* RTU: the sender's ID */
	is_rec(IS_APP, APP_DESTROY, 0);
	is_rec(IS_BACK, 0, 0);
	is_put(dir, "mutated", n++);
	/* 9. The liveness probe between softrdma peers: an established loopback connection,
	 * Get(ClassPortInfo) each second, answered (GetResp), then no answer for 17 s. */
	is_rec(IS_APP, APP_CONNECT, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ACCEPT, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_APP, APP_ESTABLISH, 0);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_TICK, 23, 255);		/* ~2 s: probes from both ends */
	is_rec(IS_TICK, 23, 255);
	for (int i = 0; i < 4; i++)
		is_rec(IS_BACK, 0, 0);		/* the Gets, then their GetResps */
	is_rec(IS_TICK, 25, 255);		/* ~8.6 s of silence, twice: ended */
	is_rec(IS_TICK, 25, 255);
	is_rec(IS_BACK, 0, 0);
	is_rec(IS_BACK, 0, 0);
	is_put(dir, "probe", n++);
}

int main(int argc, char **argv)
{
	DIR *dir;
	struct dirent *e;

	if (argc != 11) {
		fprintf(stderr, "usage: mkseeds PCAPDIR RXDIR SEQDIR CMDIR RSDIR CMSTATEDIR RTRSDIR "
			"RNBDDIR MADDIR IBCMSTATEDIR\n");
		return 2;
	}
	maddir = argv[9];
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
	synth(argv[3]);
	cm_seeds(argv[4]);
	rs_seeds(argv[5]);
	cm_state_seeds(argv[6]);
	rtrs_seeds(argv[7]);
	rnbd_seeds(argv[8]);
	mad_seeds(argv[9]);
	ibcm_state_seeds(argv[10]);
	printf("mkseeds: %d seed files\n", nfiles);
	return 0;
}
