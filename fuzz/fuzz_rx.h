/* SPDX-License-Identifier: MIT */
/*
 * The input format of the receive-path harnesses (fuzz_rx.c), shared with the seed maker
 * (mkseeds.c). A record is 4 control bytes and one UDP payload (BTH .. ICRC):
 *
 *   0  flags (FX_*): which fields of the packet the harness rewrites before delivering it
 *   1  QP selector: index into the harness's QPs (FQ_*), when FX_QPN
 *   2  key selector: index into its keys (FK_*), when FX_KEY
 *   3  PSN offset (int8) from what the QP expects, when FX_PSN
 *   4  the packet
 *
 * fuzz_rx takes one record per input. fuzz_rx_seq takes a list: each entry starts with a
 * little-endian u16; with bit 15 set it is a clock step ((v & 0x7fff) * 100 us, then every
 * QP's timers run), else v & 0x1fff is the length of the record that follows.
 *
 * Rewriting is what lets a fuzzer reach the transport: QPNs and keys carry random tag bits and
 * a packet with a bad ICRC is dropped at once, so without help every input would end there.
 * Each rewrite is an input bit, so the fuzzer also tries packets without it.
 */
#ifndef SR_FUZZ_RX_H
#define SR_FUZZ_RX_H

#define FX_ICRC_KEEP 0x03	/* both low bits set: the ICRC is left as it is (else recomputed) */
#define FX_QPN 0x04		/* destination QPN (and P_Key 0xffff) of QP [1] */
#define FX_KEY 0x08		/* RETH/AtomicETH/IETH rkey of key [2], DETH Q_Key of a UD QP,
				 * XRCETH SRQ number of the XRC SRQ */
#define FX_PSN 0x10		/* PSN = expected + (int8)[3]; an ACK a request carries (BTH
				 * resv7 bit 28): its PSN = the completer's + (int8)[3] */
#define FX_STRANGER 0x20	/* from an address that is not the connected peer */
#define FX_VA 0x40		/* VA near the key's range (128 bytes either side) */
#define FX_LEN 0x80		/* RETH length modulo 9000 */

enum {
	FQ_RC,		/* RTS, receive WQEs, pending SEND/WRITE/READ/CMP_SWAP/FETCH_ADD, bound MW */
	FQ_RC_SRQ,	/* RTS, receives from the SRQ */
	FQ_RC_RNR,	/* RTS, no receive WQE (RNR), a pending SEND */
	FQ_RC_RTR,
	FQ_RC_SQD,
	FQ_RC_ERR,
	FQ_RC_INIT,
	FQ_UC,		/* RTS, receive WQEs */
	FQ_UD,		/* RTS, receive WQEs */
	FQ_RC_RESET,
	FQ_GONE,	/* the QPN of a QP destroyed during setup */
	FQ_RC_PD2,	/* RTS, in the second PD */
	FQ_XRC,		/* XRC target (XRC_RECV) in RTR, its domain's XRC SRQ with receive WQEs */
	FQ_COUNT
};

enum {
	FK_RW,		/* MR: every right */
	FK_RO,		/* MR: remote read only */
	FK_LOCAL,	/* MR: local write only (receive and READ/ATOMIC result buffers) */
	FK_MWMR,	/* MR under the window: local write + bind only */
	FK_MW,		/* type 1 window over part of FK_MWMR: remote read, write, atomic */
	FK_PD2,		/* MR of the second PD: every right */
	FK_BADTAG,	/* FK_RW's index with another tag */
	FK_OWN,		/* the packet's own key */
	FK_FR,		/* fast-registration MR, its valid key generation: two pages, mapped in
			 * reverse order (remote read, write, atomic) */
	FK_FR_OLD,	/* the same MR's previous generation, invalidated: mapped another page */
	FK_MW2,		/* type 2 window over another part of FK_MWMR, bound to FQ_RC only:
			 * remote write, read, atomic */
	FK_ODP,		/* On-Demand Paging MR, every right, over three pages whose middle one
			 * is PROT_NONE (a hole: refused, never a SIGSEGV) */
	FK_COUNT
};

#define FUZZ_QKEY 0x11111111u

#endif /* SR_FUZZ_RX_H */
