// SPDX-License-Identifier: MIT
/*
 * The wire formats: every header's builder and accessors (extreme values, exact bytes), the
 * opcode table (self-check and spot checks against IBA table 38), PSN arithmetic across the
 * 2^24 wrap, and the packet parser, including a fuzz loop of random and mutated packets.
 * CRC/ICRC live in test_icrc.c, the pcap tap in test_pcap.c.
 */
#include <stdlib.h>
#include <string.h>

#include "sr_test.h"
#include "wire/hdr.h"
#include "wire/icrc.h"
#include "wire/opcode.h"
#include "wire/pkt.h"
#include "wire/psn.h"

/* xorshift64*: deterministic, so a failure reproduces. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* ---- Headers ------------------------------------------------------------------------ */

static void bth_case(uint8_t opc, bool se, bool mig, unsigned pad, uint16_t pkey, uint32_t qpn,
		     bool ackreq, uint32_t psn)
{
	struct sr_bth b;

	memset(&b, 0xa5, sizeof(b));
	sr_bth_build(&b, opc, se, mig, pad, pkey, qpn, ackreq, psn);
	CHECK_EQ(sr_bth_opcode(&b), opc);
	CHECK_EQ(sr_bth_se(&b), se);
	CHECK_EQ(sr_bth_mig(&b), mig);
	CHECK_EQ(sr_bth_pad(&b), pad & 3);
	CHECK_EQ(sr_bth_tver(&b), 0);
	CHECK_EQ(sr_bth_pkey(&b), pkey);
	CHECK_EQ(sr_bth_qpn(&b), qpn & SR_BTH_QPN_MASK);
	CHECK(!sr_bth_fecn(&b) && !sr_bth_becn(&b));
	CHECK_EQ(b.qpn[0], 0);		/* resv8a written as zero */
	CHECK_EQ(sr_bth_ackreq(&b), ackreq);
	CHECK_EQ(sr_bth_psn(&b), psn & SR_PSN_MASK);
	CHECK_EQ(b.apsn[0] & 0x7f, 0);	/* reserved bits after AckReq */
	sr_bth_set_psn(&b, psn + 1);
	CHECK_EQ(sr_bth_psn(&b), (psn + 1) & SR_PSN_MASK);
	CHECK_EQ(sr_bth_ackreq(&b), ackreq);
	sr_bth_set_ackreq(&b, !ackreq);
	CHECK_EQ(sr_bth_ackreq(&b), !ackreq);
	CHECK_EQ(sr_bth_psn(&b), (psn + 1) & SR_PSN_MASK);
}

static void test_bth(void)
{
	/* Exact bytes, IBA 9.2 figure: opcode, SE|M|Pad|TVer, P_Key, resv8|DestQP, A|resv7|PSN. */
	static const uint8_t want[12] = { 0x0a, 0xb0, 0x12, 0x34, 0x00, 0xab, 0xcd, 0xef,
					  0x80, 0x12, 0x34, 0x56 };
	struct sr_bth b;

	sr_bth_build(&b, 0x0a, true, false, 3, 0x1234, 0xabcdef, true, 0x123456);
	CHECK(!memcmp(&b, want, sizeof(want)));
	bth_case(0, false, false, 0, 0, 0, false, 0);
	bth_case(0xff, true, true, 3, 0xffff, SR_BTH_QPN_MASK, true, SR_PSN_MASK);
	bth_case(0x64, false, true, 1, SR_DEFAULT_PKEY, 0x1ffffff, false, 0x1000000); /* masked */
	for (int i = 0; i < 10000; i++) {
		uint64_t r = rnd();

		bth_case((uint8_t)r, r & 0x100, r & 0x200, (r >> 10) & 3, (uint16_t)(r >> 12),
			 (uint32_t)(r >> 28), r & (1ull << 63), (uint32_t)(r >> 36));
	}
	/* FECN and BECN are set by switches; the accessors must see them and keep the QPN. */
	b.qpn[0] = 0xc0;
	CHECK(sr_bth_fecn(&b) && sr_bth_becn(&b));
	CHECK_EQ(sr_bth_qpn(&b), 0xabcdef);
	b.qpn[0] = 0x40;
	CHECK(!sr_bth_fecn(&b) && sr_bth_becn(&b));
	b.flags |= 0x0f;
	CHECK_EQ(sr_bth_tver(&b), 0xf);
}

static void test_eths(void)
{
	static const uint64_t v64[] = { 0, 1, 0x0123456789abcdefull, UINT64_MAX };
	static const uint32_t v32[] = { 0, 1, 0x89abcdef, UINT32_MAX };

	for (int i = 0; i < 4; i++) {
		struct sr_reth reth;
		struct sr_atmeth atm;
		struct sr_atmack ack;
		uint64_t a = v64[i], b = v64[3 - i];
		uint32_t k = v32[i], l = v32[3 - i];

		sr_reth_build(&reth, a, k, l);
		CHECK(sr_reth_va(&reth) == a && sr_reth_rkey(&reth) == k && sr_reth_len(&reth) == l);
		sr_atmeth_build(&atm, a, k, b, a ^ b);
		CHECK(sr_atmeth_va(&atm) == a && sr_atmeth_rkey(&atm) == k);
		CHECK(sr_atmeth_swap_add(&atm) == b && sr_atmeth_compare(&atm) == (a ^ b));
		sr_atmack_build(&ack, a);
		CHECK(sr_atmack_orig(&ack) == a);
	}
	/* Big-endian on the wire: the VA's most significant byte first. */
	{
		struct sr_reth reth;

		sr_reth_build(&reth, 0x0102030405060708ull, 0x090a0b0c, 0x0d0e0f10);
		for (int i = 0; i < 16; i++)
			CHECK_EQ(((uint8_t *)&reth)[i], i + 1);
	}
}

static void test_small_eths(void)
{
	struct sr_aeth aeth;
	struct sr_deth deth;
	struct sr_xrceth x;
	struct sr_ieth ieth;
	struct sr_immdt imm;
	struct sr_feth feth;

	sr_aeth_build(&aeth, SR_AETH_NAK | SR_NAK_REM_ACCESS_ERR, 0xffffff);
	CHECK_EQ(sr_aeth_syndrome(&aeth), 0x62);
	CHECK_EQ(sr_aeth_syndrome(&aeth) & SR_AETH_TYPE_MASK, SR_AETH_NAK);
	CHECK_EQ(sr_aeth_msn(&aeth), 0xffffff);
	sr_aeth_build(&aeth, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0x1234567);	/* MSN masked */
	CHECK_EQ(sr_aeth_syndrome(&aeth), 0x1f);
	CHECK_EQ(sr_aeth_msn(&aeth), 0x234567);
	sr_aeth_build(&aeth, 0xff, 0);
	CHECK(sr_aeth_syndrome(&aeth) == 0xff && sr_aeth_msn(&aeth) == 0);

	sr_deth_build(&deth, 0x80010000, 0xffffffff);	/* a controlled Q_Key; SrcQP masked */
	CHECK_EQ(sr_deth_qkey(&deth), 0x80010000);
	CHECK_EQ(sr_deth_sqp(&deth), 0xffffff);
	CHECK_EQ(deth.sqp[0], 0);
	sr_deth_build(&deth, 0, 1);
	CHECK(sr_deth_qkey(&deth) == 0 && sr_deth_sqp(&deth) == 1);

	sr_xrceth_build(&x, 0xfedcba98);
	CHECK_EQ(sr_xrceth_srqn(&x), 0xdcba98);
	CHECK_EQ(x.srqn[0], 0);
	sr_ieth_build(&ieth, 0xdeadbeef);
	CHECK_EQ(sr_ieth_rkey(&ieth), 0xdeadbeef);
	CHECK_EQ(ieth.rkey[0], 0xde);

	/* ImmDt stays in network order end to end (ibv_wc.imm_data is __be32). */
	sr_immdt_build_raw(&imm, htobe32(0x01020304));
	CHECK(imm.imm[0] == 1 && imm.imm[3] == 4);
	CHECK_EQ(sr_immdt_raw(&imm), htobe32(0x01020304));

	for (unsigned sel = 0; sel < 4; sel++) {
		for (unsigned plt = 0; plt < 16; plt++) {
			sr_feth_build(&feth, sel, plt);
			CHECK_EQ(sr_feth_sel(&feth), sel);
			CHECK_EQ(sr_feth_plt(&feth), plt);
			CHECK(!feth.bits[0] && !feth.bits[1] && !feth.bits[2]);
		}
	}
	sr_feth_build(&feth, 7, 0x1f);	/* out of range: masked */
	CHECK(sr_feth_sel(&feth) == 3 && sr_feth_plt(&feth) == 0xf);
}

/* ---- Opcode table ---------------------------------------------------------------------- */

static void expect_row(uint8_t opc, const char *name, unsigned len, uint32_t hdrs)
{
	const struct sr_opcode_info *o = &sr_opcode[opc];
	uint32_t all = (1u << SR_H_PAYLOAD) - 1;

	REQUIRE(o->name);
	if (strcmp(o->name, name))
		SR_FAIL("opcode 0x%02x is %s, expected %s", opc, o->name, name);
	CHECK_EQ(o->length, len);
	if ((o->mask & all) != (hdrs | SR_M_BTH))
		SR_FAIL("%s: header mask 0x%x, expected 0x%x", name, o->mask & all, hdrs | SR_M_BTH);
}

static void test_opcode_spots(void)
{
	const struct sr_opcode_info *o;

	expect_row(0x00, "RC SEND_FIRST", 12, 0);
	expect_row(0x03, "RC SEND_LAST_IMM", 16, SR_M_IMMDT);
	expect_row(0x0b, "RC WRITE_ONLY_IMM", 32, SR_M_RETH | SR_M_IMMDT);
	expect_row(0x0c, "RC READ_REQUEST", 28, SR_M_RETH);
	expect_row(0x0e, "RC READ_RESP_MIDDLE", 12, 0);
	expect_row(0x10, "RC READ_RESP_ONLY", 16, SR_M_AETH);
	expect_row(0x11, "RC ACK", 16, SR_M_AETH);
	expect_row(0x12, "RC ATOMIC_ACK", 24, SR_M_AETH | SR_M_ATMACK);
	expect_row(0x13, "RC CMP_SWAP", 40, SR_M_ATMETH);
	expect_row(0x14, "RC FETCH_ADD", 40, SR_M_ATMETH);
	expect_row(0x16, "RC SEND_LAST_INV", 16, SR_M_IETH);
	expect_row(0x17, "RC SEND_ONLY_INV", 16, SR_M_IETH);
	expect_row(0x1c, "RC FLUSH", 32, SR_M_FETH | SR_M_RETH);
	expect_row(0x1d, "RC ATOMIC_WRITE", 28, SR_M_RETH);
	expect_row(0x20, "UC SEND_FIRST", 12, 0);
	expect_row(0x2b, "UC WRITE_ONLY_IMM", 32, SR_M_RETH | SR_M_IMMDT);
	expect_row(0x64, "UD SEND_ONLY", 20, SR_M_DETH);
	expect_row(0x65, "UD SEND_ONLY_IMM", 24, SR_M_DETH | SR_M_IMMDT);
	expect_row(0x81, "CNP", 12, 0);
	expect_row(0xa6, "XRC WRITE_FIRST", 32, SR_M_XRCETH | SR_M_RETH);
	expect_row(0xac, "XRC READ_REQUEST", 32, SR_M_XRCETH | SR_M_RETH);
	expect_row(0xad, "XRC READ_RESP_FIRST", 16, SR_M_AETH);	/* responses: no XRCETH */
	expect_row(0xb1, "XRC ACK", 16, SR_M_AETH);
	expect_row(0xb2, "XRC ATOMIC_ACK", 24, SR_M_AETH | SR_M_ATMACK);
	expect_row(0xb3, "XRC CMP_SWAP", 44, SR_M_XRCETH | SR_M_ATMETH);
	expect_row(0xb7, "XRC SEND_ONLY_INV", 20, SR_M_XRCETH | SR_M_IETH);

	/* Offsets in header order. */
	o = &sr_opcode[0x0b];
	CHECK(o->offset[SR_H_RETH] == 12 && o->offset[SR_H_IMMDT] == 28);
	o = &sr_opcode[0x12];
	CHECK(o->offset[SR_H_AETH] == 12 && o->offset[SR_H_ATMACK] == 16);
	o = &sr_opcode[0x1c];
	CHECK(o->offset[SR_H_FETH] == 12 && o->offset[SR_H_RETH] == 16);
	CHECK(!(o->mask & SR_M_PAYLOAD));
	o = &sr_opcode[0x65];
	CHECK(o->offset[SR_H_DETH] == 12 && o->offset[SR_H_IMMDT] == 20);
	o = &sr_opcode[0xab];
	CHECK(o->offset[SR_H_XRCETH] == 12 && o->offset[SR_H_RETH] == 16);
	CHECK(o->offset[SR_H_IMMDT] == 32 && o->offset[SR_H_PAYLOAD] == 36);

	/* Class bits the engine relies on. */
	CHECK(sr_opcode[0x00].mask & SR_M_RWR && !(sr_opcode[0x00].mask & SR_M_COMP));
	CHECK(!(sr_opcode[0x01].mask & (SR_M_RWR | SR_M_COMP | SR_M_START | SR_M_END)));
	CHECK(sr_opcode[0x04].mask & SR_M_START && sr_opcode[0x04].mask & SR_M_END);
	CHECK(sr_opcode[0x09].mask & SR_M_RWR && sr_opcode[0x09].mask & SR_M_COMP);
	CHECK(!(sr_opcode[0x08].mask & (SR_M_RWR | SR_M_COMP)));
	CHECK(sr_opcode[0x0d].mask & SR_M_RESP && sr_opcode[0x0d].mask & SR_M_READ);
	CHECK(sr_opcode[0x0c].mask & SR_M_REQ && !(sr_opcode[0x0c].mask & SR_M_PAYLOAD));
	CHECK(sr_opcode[0x1d].mask & SR_M_ATOMIC_WRITE && sr_opcode[0x1d].mask & SR_M_PAYLOAD);
	CHECK(sr_opcode[0x13].mask & SR_M_ATOMIC);
	CHECK(sr_opcode[0x64].mask & SR_M_UD && sr_opcode[0x24].mask & SR_M_UC);
	CHECK(sr_opcode[0xa0].mask & SR_M_XRC && sr_opcode[0x00].mask & SR_M_RC);
	CHECK(!strcmp(sr_opcode_name(0x40), "INVALID") && !strcmp(sr_opcode_name(4), "RC SEND_ONLY"));
}

static void test_opcode_table(void)
{
	char err[200] = "";
	int named = 0, rc = 0, uc = 0, ud = 0, xrc = 0;

	if (sr_opcode_table_check(err, sizeof(err)))
		SR_FAIL("opcode table: %s", err);
	for (int opc = 0; opc < 256; opc++) {
		if (!sr_opcode[opc].name)
			continue;
		named++;
		rc += (opc & 0xe0) == SR_TR_RC;
		uc += (opc & 0xe0) == SR_TR_UC;
		ud += (opc & 0xe0) == SR_TR_UD;
		xrc += (opc & 0xe0) == SR_TR_XRC;
	}
	/* RC: 0x00-0x14, 0x16, 0x17, FLUSH, ATOMIC WRITE; UC: 0x20-0x2b; UD: 2; XRC as RC; CNP. */
	CHECK_EQ(rc, 25);
	CHECK_EQ(uc, 12);
	CHECK_EQ(ud, 2);
	CHECK_EQ(xrc, 25);
	CHECK_EQ(named, 25 + 12 + 2 + 25 + 1);
	for (int opc = 0x40; opc < 0x60; opc++)	/* RD: not supported */
		CHECK(!sr_opcode[opc].name);
	CHECK(!sr_opcode[0x15].name && !sr_opcode[0x18].name && !sr_opcode[0x2c].name);
	CHECK(!sr_opcode[0x60].name && !sr_opcode[0x66].name && !sr_opcode[0x80].name);
	CHECK(!sr_opcode[0xb5].name && !sr_opcode[0xc0].name && !sr_opcode[0xff].name);
	test_opcode_spots();
}

/* ---- PSN ------------------------------------------------------------------------------ */

static void test_psn(void)
{
	CHECK_EQ(sr_psn_next(0xffffff), 0);
	CHECK_EQ(sr_psn_add(0xffffff, 1), 0);
	CHECK_EQ(sr_psn_add(0xfffffe, 5), 3);
	CHECK_EQ(sr_psn_add(2, -5), 0xfffffd);
	CHECK_EQ(sr_psn_add(0, -1), 0xffffff);
	CHECK_EQ(sr_psn_diff(0, 0xffffff), 1);		/* across the wrap */
	CHECK_EQ(sr_psn_diff(0xffffff, 0), -1);
	CHECK_EQ(sr_psn_diff(5, 0xfffffb), 10);
	CHECK_EQ(sr_psn_diff(0x123456, 0x123456), 0);
	CHECK(sr_psn_lt(0xffffff, 0) && sr_psn_gt(0, 0xffffff));
	CHECK(sr_psn_le(7, 7) && sr_psn_ge(7, 7) && !sr_psn_lt(7, 7) && !sr_psn_gt(7, 7));
	/* The half-space edge: 2^23 - 1 ahead is "after", exactly 2^23 is taken as "before". */
	CHECK_EQ(sr_psn_diff(0x7fffff, 0), 0x7fffff);
	CHECK(sr_psn_gt(0x7fffff, 0) && sr_psn_lt(0, 0x7fffff));
	CHECK_EQ(sr_psn_diff(0x800000, 0), -0x800000);
	CHECK(sr_psn_lt(0x800000, 0) && sr_psn_lt(0, 0x800000));
	CHECK_EQ(sr_psn_diff(0x800001, 0), -0x7fffff);
	CHECK(sr_psn_lt(0x800001, 0) && sr_psn_gt(0, 0x800001));
	CHECK(sr_psn_gt(0x000010, 0xfffff0));		/* 0x20 ahead, across the wrap */
	CHECK(sr_psn_in(1, 0xfffffe, 3) && sr_psn_in(0xfffffe, 0xfffffe, 3));
	CHECK(sr_psn_in(3, 0xfffffe, 3) && !sr_psn_in(4, 0xfffffe, 3) && !sr_psn_in(0xfffffd, 0xfffffe, 3));
	/* Garbage above bit 23 never leaks into a comparison. */
	CHECK_EQ(sr_psn_diff(0xff000001, 0x00000000), 1);
	for (int i = 0; i < 100000; i++) {
		uint32_t a = rnd() & SR_PSN_MASK;
		int32_t n = (int32_t)(rnd() % 0x1000000) - 0x800000;	/* [-2^23, 2^23) */

		CHECK_EQ(sr_psn_diff(sr_psn_add(a, n), a), n);
		CHECK_EQ(sr_psn_lt(a, sr_psn_add(a, n)), n > 0 || n == -0x800000);
	}
}

/* ---- Parser ----------------------------------------------------------------------------- */

/* A well-formed packet of opcode `opc`: headers (random bytes), payload, pad, ICRC space. */
static size_t make_pkt(uint8_t *buf, uint8_t opc, size_t paylen, unsigned pad)
{
	const struct sr_opcode_info *o = &sr_opcode[opc];
	size_t len = o->length + paylen + pad + SR_ICRC_LEN;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)rnd();
	sr_bth_build((struct sr_bth *)buf, opc, true, false, pad, 0xffff, 0x123456, true, 0xabcdef);
	return len;
}

static void test_parse_valid(void)
{
	static uint8_t buf[4096 + 128];

	for (int opc = 0; opc < 256; opc++) {
		const struct sr_opcode_info *o = &sr_opcode[opc];
		bool pl = o->mask & SR_M_PAYLOAD;

		if (!o->name)
			continue;
		for (unsigned pad = 0; pad < (pl ? 4u : 1u); pad++) {
			size_t paylen = pl ? (size_t)(rnd() % 4097) : 0;
			size_t len = make_pkt(buf, (uint8_t)opc, paylen, pad);
			struct sr_pkt p;

			if (opc == SR_OPCODE_CNP)
				len += 16;	/* the reserved bytes */
			CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_OK);
			CHECK(p.hdr == buf && p.len == len && p.opcode == opc && p.mask == o->mask);
			CHECK(p.hdr_len == o->length && p.pad == pad && p.paylen == paylen);
			CHECK(p.qpn == 0x123456 && p.psn == 0xabcdef && p.ackreq && p.se);
			CHECK((uint8_t *)sr_pkt_payload(&p) == buf + o->length);
			CHECK(sr_pkt_bth(&p) == (const struct sr_bth *)buf);
			/* One byte short of the headers + ICRC: SHORT. */
			CHECK_EQ(sr_pkt_parse(&p, buf, o->length + SR_ICRC_LEN - 1), SR_PE_SHORT);
		}
	}
}

/*
 * An ACK riding in a request (SR_BTH_SR_ACKRIDE, struct sr_ackride): a marked RC request that
 * is a whole message carries it after its headers, the parser strips it; any other request
 * with the bit is BAD_RIDE; a response's bit is the offer (no extension); an unmarked
 * packet's bit is reserved and ignored.
 */
static void test_parse_ride(void)
{
	static uint8_t buf[256];
	int rides = 0;

	for (int opc = 0; opc < 256; opc++) {
		const struct sr_opcode_info *o = &sr_opcode[opc];
		bool pl = o->mask & SR_M_PAYLOAD;
		size_t paylen = pl ? 5 : 0, len;
		bool may = (o->mask & (SR_M_REQ | SR_M_RC | SR_M_START | SR_M_END)) ==
			   (SR_M_REQ | SR_M_RC | SR_M_START | SR_M_END);
		struct sr_ackride *r = (struct sr_ackride *)(buf + o->length);
		struct sr_pkt p, ack;
		uint8_t abuf[SR_ACKRIDE_PKT_LEN];

		if (!o->name || opc == SR_OPCODE_CNP)
			continue;
		len = make_pkt(buf, (uint8_t)opc, paylen + SR_ACKRIDE_LEN, pl ? 3 : 0);
		buf[4] = SR_BTH_SR_MARK;
		sr_bth_set_sr_ackride((struct sr_bth *)buf);
		sr_bth_set_psn((struct sr_bth *)buf, 77);	/* keeps the bit */
		CHECK(sr_bth_sr_ackride((const struct sr_bth *)buf));
		sr_ackride_build(r, SR_AETH_ACK | SR_AETH_ACK_UNLIMITED, 0x10203, 0x654321);
		if (!(o->mask & SR_M_REQ)) {
			/* A response: the offer; the 8 bytes are its payload, if it has one. */
			CHECK_EQ(sr_pkt_parse(&p, buf, len), pl ? SR_PE_OK : SR_PE_BAD_PAD);
			if (pl)
				CHECK(!sr_pkt_ackride(&p) && p.hdr_len == o->length);
			continue;
		}
		if (!may) {
			CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_BAD_RIDE);
			continue;
		}
		rides++;
		CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_OK);
		CHECK(p.hdr_len == o->length + SR_ACKRIDE_LEN && p.paylen == paylen && p.psn == 77);
		CHECK((uint8_t *)sr_pkt_payload(&p) == buf + o->length + SR_ACKRIDE_LEN);
		CHECK(sr_pkt_ackride(&p) == r);
		sr_pkt_ackride_pkt(&p, abuf, &ack);
		CHECK(ack.opcode == SR_OPC(SR_TR_RC, SR_OP_ACK) && ack.psn == 0x654321 &&
		      ack.qpn == 0x123456 && !ack.ackreq && (ack.mask & SR_M_RESP));
		CHECK(sr_aeth_msn(sr_pkt_h(&ack, SR_H_AETH)) == 0x10203);
		CHECK(sr_bth_sr_marked(sr_pkt_bth(&ack)));
		/* No room for it (what is left would be payload): BAD_RIDE. */
		if (!pl)
			CHECK_EQ(sr_pkt_parse(&p, buf, o->length + SR_ACKRIDE_LEN - 1 + SR_ICRC_LEN),
				 SR_PE_BAD_RIDE);
		/* Not an ACK: a NAK, or another kind. */
		sr_ackride_build(r, SR_AETH_NAK | SR_NAK_PSN_SEQ_ERR, 0, 1);
		CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_BAD_RIDE);
		sr_ackride_build(r, SR_AETH_ACK, 0, 1);
		r->kpsn[0] = 0;
		CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_BAD_RIDE);
		/* Unmarked: the bit is reserved, nothing rides. */
		buf[4] = 0;
		CHECK_EQ(sr_pkt_parse(&p, buf, len), pl ? SR_PE_OK : SR_PE_BAD_PAD);
		if (pl)
			CHECK(!sr_pkt_ackride(&p) && p.paylen == paylen + SR_ACKRIDE_LEN);
	}
	CHECK_EQ(rides, 10);	/* RC SEND ONLY (3), WRITE ONLY (2), READ, 2 atomics, FLUSH, ATOMIC WRITE */
}

static enum sr_parse_err parse_bytes(const uint8_t *bytes, size_t len)
{
	uint8_t *b = malloc(len ? len : 1);	/* exact size: ASan sees any over-read */
	struct sr_pkt p;
	enum sr_parse_err e;

	REQUIRE(b);
	memcpy(b, bytes, len);
	e = sr_pkt_parse(&p, b, len);
	free(b);
	return e;
}

static void test_parse_errors(void)
{
	uint8_t buf[256] = { 0 };
	struct sr_pkt p;
	size_t len;

	for (size_t l = 0; l < SR_BTH_LEN + SR_ICRC_LEN; l++)
		CHECK_EQ(parse_bytes(buf, l), SR_PE_SHORT);
	CHECK_EQ(sr_pkt_parse(&p, NULL, 0), SR_PE_SHORT);

	len = make_pkt(buf, 0x04, 10, 2);
	buf[0] = 0x15;					/* reserved RC opcode */
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_BAD_OPCODE);
	buf[0] = 0x44;					/* RD SEND_ONLY */
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_BAD_OPCODE);
	buf[0] = 0x04;
	buf[1] |= 0x01;					/* TVer 1 */
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_BAD_TVER);
	buf[1] &= ~SR_BTH_TVER_MASK;
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_OK);

	len = make_pkt(buf, 0x04, 2, 3);		/* pad larger than the payload */
	CHECK_EQ(sr_pkt_parse(&p, buf, len - 3), SR_PE_BAD_PAD);
	CHECK_EQ(sr_pkt_parse(&p, buf, len - 2), SR_PE_OK);	/* all pad, no payload */
	CHECK_EQ(p.paylen, 0);
	len = make_pkt(buf, 0x11, 0, 1);		/* pad on an ACK */
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_BAD_PAD);
	len = make_pkt(buf, 0x11, 0, 0);		/* bytes after an ACK's AETH */
	CHECK_EQ(sr_pkt_parse(&p, buf, len + 4), SR_PE_BAD_PAD);
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_OK);
	len = make_pkt(buf, 0x0c, 0, 0);		/* READ request: no payload */
	CHECK_EQ(sr_pkt_parse(&p, buf, len + 1), SR_PE_BAD_PAD);
	len = make_pkt(buf, 0x13, 0, 0);		/* CMP_SWAP cut inside its AtomicETH */
	CHECK_EQ(sr_pkt_parse(&p, buf, len - 1), SR_PE_SHORT);
	len = make_pkt(buf, 0x1c, 0, 0);		/* FLUSH: no payload */
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_OK);
	CHECK_EQ(sr_pkt_parse(&p, buf, len + 8), SR_PE_BAD_PAD);
	len = make_pkt(buf, 0x04, 0, 0);		/* empty SEND: legal */
	CHECK_EQ(sr_pkt_parse(&p, buf, len), SR_PE_OK);
	CHECK_EQ(p.paylen, 0);
	len = make_pkt(buf, 0x81, 0, 1);		/* CNP with a pad count */
	CHECK_EQ(sr_pkt_parse(&p, buf, len + 16), SR_PE_BAD_PAD);

	for (int e = 0; e < SR_PE_COUNT; e++)
		CHECK(sr_parse_err_name[e] && sr_parse_err_desc[e] && *sr_parse_err_desc[e]);
	CHECK(!strcmp(sr_parse_err_name[SR_PE_OK], "OK"));
	CHECK(!strcmp(sr_parse_err_name[SR_PE_BAD_PAD], "BAD_PAD"));
}

static const uint8_t hdr_len[SR_H_COUNT] = {
	[SR_H_BTH] = SR_BTH_LEN,	[SR_H_XRCETH] = SR_XRCETH_LEN,	[SR_H_DETH] = SR_DETH_LEN,
	[SR_H_RETH] = SR_RETH_LEN,	[SR_H_ATMETH] = SR_ATMETH_LEN,	[SR_H_AETH] = SR_AETH_LEN,
	[SR_H_ATMACK] = SR_ATMACK_LEN,	[SR_H_IMMDT] = SR_IMMDT_LEN,	[SR_H_IETH] = SR_IETH_LEN,
	[SR_H_FETH] = SR_FETH_LEN,
};

/* Reads every header the parser said is there; ASan flags any byte outside the packet. */
static unsigned touch_headers(const struct sr_pkt *p)
{
	const uint8_t *pl = sr_pkt_payload(p);
	unsigned sum = 0;

	for (int h = 0; h < SR_H_PAYLOAD; h++) {
		const uint8_t *q = sr_pkt_h(p, h);

		if (!(p->mask & (1u << h)))
			continue;
		for (unsigned i = 0; i < hdr_len[h]; i++)
			sum += q[i];
	}
	for (uint32_t i = 0; i < p->paylen + p->pad + SR_ICRC_LEN; i++)
		sum += pl[i];
	return sum;
}

static void fuzz_one(uint8_t *b, size_t len, long counts[SR_PE_COUNT], unsigned *sink)
{
	static const struct sr_ipudp ipu = { .family = 4, .dport = SR_ROCEV2_UDP_PORT, .df = true };
	struct sr_pkt p;
	enum sr_parse_err e = sr_pkt_parse(&p, b, len);

	REQUIRE(e >= 0 && e < SR_PE_COUNT);
	counts[e]++;
	if (e != SR_PE_OK)
		return;
	CHECK_EQ((size_t)p.hdr_len + p.paylen + p.pad + SR_ICRC_LEN +
		 (p.opcode == SR_OPCODE_CNP ? len - SR_BTH_LEN - SR_ICRC_LEN : 0), len);
	*sink += touch_headers(&p);
	*sink += sr_icrc_check(&ipu, b, len);
}

/*
 * Overwrites b[0..len) with a packet that was valid (right opcode, headers, pad and ICRC) for
 * some length, then damages a few bytes: the inputs closest to the parser's edges.
 */
static void mutate_valid(uint8_t *b, size_t len, const uint8_t *valid, unsigned nvalid)
{
	static const struct sr_ipudp ipu = { .family = 4, .dport = SR_ROCEV2_UDP_PORT, .df = true };
	uint8_t opc = valid[rnd() % nvalid];
	size_t need = sr_opcode[opc].length + SR_ICRC_LEN;
	unsigned pad = (sr_opcode[opc].mask & SR_M_PAYLOAD) ? rnd() % 4 : 0;

	if (len < need + pad)
		pad = 0;
	if (len >= need + pad) {
		sr_bth_build((struct sr_bth *)b, opc, rnd() & 1, false, pad, 0xffff,
			     (uint32_t)rnd(), rnd() & 1, (uint32_t)rnd());
		sr_st_le32(b + len - SR_ICRC_LEN, sr_icrc_calc(&ipu, b, len));
		CHECK(sr_icrc_check(&ipu, b, len));
	}
	for (unsigned n = rnd() % 4; n; n--)
		b[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
}

/* Random bytes and lengths, half of them given a valid opcode and TVer to get further in. */
static void test_fuzz(void)
{
	static uint8_t valid[256];
	long counts[SR_PE_COUNT] = { 0 };
	unsigned sink = 0, nvalid = 0;
	const int iters = 300000;

	for (int opc = 0; opc < 256; opc++)
		if (sr_opcode[opc].name)
			valid[nvalid++] = (uint8_t)opc;
	for (int i = 0; i < iters; i++) {
		size_t len = rnd() % (i & 1 ? 80 : 600);
		uint8_t *b = malloc(len ? len : 1);

		REQUIRE(b);
		for (size_t k = 0; k < len; k++)
			b[k] = (uint8_t)rnd();
		if ((i & 6) == 6 && len)
			mutate_valid(b, len, valid, nvalid);
		else if ((i & 2) && len) {
			b[0] = valid[rnd() % nvalid];
			if (len > 1)
				b[1] &= ~SR_BTH_TVER_MASK;
		}
		fuzz_one(b, len, counts, &sink);
		free(b);
	}
	for (int e = 0; e < SR_PE_COUNT; e++)
		printf("fuzz: %-10s %ld\n", sr_parse_err_name[e], counts[e]);
	CHECK(counts[SR_PE_OK] > 1000 && counts[SR_PE_SHORT] > 1000);
	CHECK(counts[SR_PE_BAD_OPCODE] > 1000 && counts[SR_PE_BAD_TVER] > 1000);
	CHECK(counts[SR_PE_BAD_PAD] > 1000);
	CHECK_EQ(counts[SR_PE_BAD_ICRC], 0);	/* the parser never checks the ICRC */
	(void)sink;
}

int main(void)
{
	sr_test_timeout(100);
	test_bth();
	test_eths();
	test_small_eths();
	test_opcode_table();
	test_psn();
	test_parse_valid();
	test_parse_errors();
	test_parse_ride();
	test_fuzz();
	return sr_test_done("test_wire");
}
