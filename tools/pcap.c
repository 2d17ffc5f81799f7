/* SPDX-License-Identifier: MIT */
/*
 * softrdma pcap: decode RoCEv2 packets in capture files and verify their ICRC.
 *
 * Works on captures of the SOFTRDMA_PCAP tap and on captures of other stacks (tcpdump on a
 * veth, Linux rxe): every UDP payload sent to port 4791, or to/from a port given with -p (a
 * softrdma device on another port), is parsed with the engine's own parser and its ICRC checked
 * against the IP/UDP header actually captured. Exit status 1 when any such packet is malformed
 * or has a bad ICRC, or when a file holds no RoCEv2 packet at all. A UD SEND to QP1 that holds a
 * Communication Manager MAD is named (REQ, REP, ...: src/wire/mad.h) and counted by type.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "net/pcap_read.h"
#include "wire/icrc.h"
#include "wire/mad.h"
#include "wire/pkt.h"

#define MAX_PORTS 16

struct pcap_opts {
	uint16_t ports[MAX_PORTS];
	int nports;
	bool verbose;
};

static bool port_wanted(const struct pcap_opts *o, const struct sr_ipudp *t)
{
	/* RoCEv2 goes to 4791; on loopback a softrdma device at 4791 also answers from it. */
	if (t->dport == 4791 || t->sport == 4791)
		return true;
	for (int i = 0; i < o->nports; i++)
		if (t->sport == o->ports[i] || t->dport == o->ports[i])
			return true;
	return false;
}

static void addr_str(const struct sr_ipudp *t, const uint8_t *a, uint16_t port, char *buf,
		     size_t len)
{
	char ip[INET6_ADDRSTRLEN];

	inet_ntop(t->family == 4 ? AF_INET : AF_INET6, a, ip, sizeof(ip));
	snprintf(buf, len, t->family == 4 ? "%s:%u" : "[%s]:%u", ip, port);
}

static int check_file(const char *path, const struct pcap_opts *o)
{
	unsigned long counts[256] = { 0 }, roce = 0, good = 0, bad = 0, malformed = 0, other = 0;
	unsigned long cm[0x20] = { 0 }, mads = 0;
	struct sr_pcapr r;
	struct sr_pcapr_rec rec;
	int ret, n = 0;

	ret = sr_pcapr_open(&r, path);
	if (ret) {
		fprintf(stderr, "softrdma pcap: %s: %s\n", path,
			ret == -EINVAL ? "not a classic pcap file" : strerror(-ret));
		return CLI_FAIL;
	}
	while ((ret = sr_pcapr_next(&r, &rec)) == 1) {
		struct sr_ipudp t;
		const uint8_t *pay;
		size_t plen;
		struct sr_pkt pkt;
		enum sr_parse_err pe;

		n++;
		if (!rec.ip || sr_pcapr_udp(rec.ip, rec.ip_len, &t, &pay, &plen) || !port_wanted(o, &t)) {
			other++;
			continue;
		}
		roce++;
		/* The parser wants a writable buffer it may keep pointers into. */
		uint8_t *copy = malloc(plen ? plen : 1);

		if (!copy)
			return CLI_FAIL;
		memcpy(copy, pay, plen);
		pe = sr_pkt_parse(&pkt, copy, plen);
		bool ok = pe == SR_PE_OK && sr_icrc_check(&t, copy, plen);

		if (pe != SR_PE_OK)
			malformed++;
		else if (ok)
			good++, counts[pkt.opcode]++;
		else
			bad++, counts[pkt.opcode]++;
		const char *mad = "";
		char madname[40];

		if (pe == SR_PE_OK && pkt.qpn == SR_GSI_QPN &&
		    pkt.opcode == (SR_TR_UD | SR_OP_SEND_ONLY)) {
			struct sr_cm_mad m;
			int e = sr_cm_mad_decode(&m, pkt.hdr + pkt.hdr_len, pkt.paylen);

			mads++;
			if (e == 0 || e == SR_MAD_EATTR) {
				if (m.hdr.attr_id < 0x20)
					cm[m.hdr.attr_id]++;
				snprintf(madname, sizeof(madname), "  CM %s",
					 sr_cm_attr_name(m.hdr.attr_id));
				mad = madname;
			} else {
				mad = "  MAD (not CM)";
			}
		}
		if (o->verbose || !ok) {
			char s[64], d[64];

			addr_str(&t, t.src, t.sport, s, sizeof(s));
			addr_str(&t, t.dst, t.dport, d, sizeof(d));
			if (pe != SR_PE_OK)
				printf("%5d %s > %s  malformed: %s\n", n, s, d, sr_parse_err_desc[pe]);
			else
				printf("%5d %s > %s  %-24s QP 0x%06x PSN %8u%s len %4zu  ICRC %s%s\n",
				       n, s, d, sr_opcode_name(pkt.opcode), pkt.qpn, pkt.psn,
				       pkt.ackreq ? " A" : "  ", plen, ok ? "ok" : "BAD", mad);
		}
		free(copy);
	}
	sr_pcapr_close(&r);
	if (ret < 0) {
		fprintf(stderr, "softrdma pcap: %s: truncated or corrupt record after %d\n", path, n);
		return CLI_FAIL;
	}
	printf("%s: %lu RoCEv2 packets, ICRC ok=%lu bad=%lu malformed=%lu, other=%lu |", path, roce,
	       good, bad, malformed, other);
	for (int op = 0; op < 256; op++)
		if (counts[op])
			printf(" %s x%lu", sr_opcode_name((uint8_t)op), counts[op]);
	if (mads) {
		unsigned long named = 0;

		printf(" | MADs to QP1 x%lu:", mads);
		for (int a = 0; a < 0x20; a++)
			if (cm[a]) {
				printf(" CM %s x%lu", sr_cm_attr_name((uint16_t)a), cm[a]);
				named += cm[a];
			}
		if (named < mads)
			printf(" other x%lu", mads - named);
	}
	printf("\n");
	return (bad || malformed || !roce) ? CLI_FAIL : CLI_OK;
}

int cmd_pcap(int argc, char **argv)
{
	struct pcap_opts o = { .nports = 0 };
	int c, status = CLI_OK;

	optind = 1;
	while ((c = getopt(argc, argv, "+p:vh")) != -1) {
		switch (c) {
		case 'p': {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*end || v <= 0 || v > 65535 || o.nports == MAX_PORTS)
				return cli_usage_error("pcap", "-p wants a UDP port (at most %d)",
						       MAX_PORTS);
			o.ports[o.nports++] = (uint16_t)v;
			break;
		}
		case 'v':
			o.verbose = true;
			break;
		case 'h':
			cli_usage(stdout);
			return CLI_OK;
		default:
			return cli_usage_error("pcap", "bad option");
		}
	}
	if (optind >= argc)
		return cli_usage_error("pcap", "no capture file given");
	for (int i = optind; i < argc; i++)
		if (check_file(argv[i], &o) != CLI_OK)
			status = CLI_FAIL;
	return status;
}
