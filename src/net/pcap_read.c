// SPDX-License-Identifier: MIT
#include "net/pcap_read.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/hdr.h"

#define MAGIC_USEC 0xa1b2c3d4u
#define MAGIC_NSEC 0xa1b23c4du

enum {
	LT_ETHERNET = 1,
	LT_RAW = 101,
	LT_SLL = 113,
	LT_IPV4 = 228,
	LT_IPV6 = 229,
	LT_SLL2 = 276,
};

static uint32_t rd32(const struct sr_pcapr *r, const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return r->swapped ? __builtin_bswap32(v) : v;
}

static uint16_t rd16(const struct sr_pcapr *r, const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return r->swapped ? __builtin_bswap16(v) : v;
}

static int parse_filehdr(struct sr_pcapr *r)
{
	uint32_t magic;

	if (r->len < 24)
		return -EINVAL;
	memcpy(&magic, r->data, 4);
	r->swapped = magic == __builtin_bswap32(MAGIC_USEC) || magic == __builtin_bswap32(MAGIC_NSEC);
	magic = rd32(r, r->data);
	if (magic != MAGIC_USEC && magic != MAGIC_NSEC)
		return -EINVAL;
	r->nsec = magic == MAGIC_NSEC;
	if (rd16(r, r->data + 4) != 2)
		return -EINVAL;
	r->snaplen = rd32(r, r->data + 16);
	r->linktype = rd32(r, r->data + 20) & 0x0fffffff;	/* upper bits: FCS info */
	r->pos = 24;
	return 0;
}

int sr_pcapr_open_mem(struct sr_pcapr *r, const void *buf, size_t len)
{
	int err;

	memset(r, 0, sizeof(*r));
	r->data = malloc(len ? len : 1);
	if (!r->data)
		return -ENOMEM;
	memcpy(r->data, buf, len);
	r->len = len;
	err = parse_filehdr(r);
	if (err)
		sr_pcapr_close(r);
	return err;
}

int sr_pcapr_open(struct sr_pcapr *r, const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, n;
	int err;

	if (!f)
		return -errno;
	do {
		if (len == cap) {
			uint8_t *nb = realloc(buf, cap = cap ? 2 * cap : 65536);

			if (!nb) {
				free(buf);
				fclose(f);
				return -ENOMEM;
			}
			buf = nb;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n);
	fclose(f);
	err = sr_pcapr_open_mem(r, buf, len);
	free(buf);
	return err;
}

void sr_pcapr_close(struct sr_pcapr *r)
{
	free(r->data);
	memset(r, 0, sizeof(*r));
}

/* Where the IP packet starts in a frame of the file's link type; NULL when it is not IP. */
static const uint8_t *find_ip(const struct sr_pcapr *r, const uint8_t *f, size_t len, size_t *iplen)
{
	size_t off;
	uint16_t proto = 0;

	switch (r->linktype) {
	case LT_RAW:
	case LT_IPV4:
	case LT_IPV6:
		off = 0;
		proto = len && (f[0] >> 4) == 6 ? 0x86dd : 0x0800;
		break;
	case LT_ETHERNET:
		for (off = 12; off + 2 <= len; off += 4) {	/* skip 802.1Q / 802.1ad tags */
			proto = sr_ld_be16(f + off);
			if (proto != 0x8100 && proto != 0x88a8 && proto != 0x9100)
				break;
		}
		if (off + 2 > len)
			return NULL;
		off += 2;
		break;
	case LT_SLL:
		if (len < 16)
			return NULL;
		proto = sr_ld_be16(f + 14);
		off = 16;
		break;
	case LT_SLL2:
		if (len < 20)
			return NULL;
		proto = sr_ld_be16(f);
		off = 20;
		break;
	default:
		return NULL;
	}
	if ((proto != 0x0800 && proto != 0x86dd) || off >= len)
		return NULL;
	if ((f[off] >> 4) != (proto == 0x0800 ? 4 : 6))
		return NULL;
	*iplen = len - off;
	return f + off;
}

int sr_pcapr_next(struct sr_pcapr *r, struct sr_pcapr_rec *rec)
{
	const uint8_t *h = r->data + r->pos;
	uint64_t frac;

	memset(rec, 0, sizeof(*rec));
	if (r->pos == r->len)
		return 0;
	if (r->len - r->pos < 16)
		return -1;
	rec->caplen = rd32(r, h + 8);
	rec->origlen = rd32(r, h + 12);
	if (rec->caplen > r->len - r->pos - 16)
		return -1;
	frac = rd32(r, h + 4);
	rec->ts_ns = (uint64_t)rd32(r, h) * 1000000000u + (r->nsec ? frac : frac * 1000);
	rec->frame = h + 16;
	rec->ip = find_ip(r, rec->frame, rec->caplen, &rec->ip_len);
	r->pos += 16 + rec->caplen;
	return 1;
}

static int parse_udp(const uint8_t *u, size_t len, struct sr_ipudp *ipu, const uint8_t **payload,
		     size_t *paylen)
{
	uint16_t ulen;

	if (len < 8)
		return -1;
	ulen = sr_ld_be16(u + 4);
	if (ulen < 8 || ulen > len)
		return -1;
	ipu->sport = sr_ld_be16(u);
	ipu->dport = sr_ld_be16(u + 2);
	*payload = u + 8;
	*paylen = ulen - 8u;
	return 0;
}

static int parse_v4(const uint8_t *ip, size_t len, struct sr_ipudp *ipu, const uint8_t **payload,
		    size_t *paylen)
{
	size_t ihl, tot;
	uint16_t frag;

	if (len < 20)
		return -1;
	ihl = (ip[0] & 0x0f) * 4u;
	tot = sr_ld_be16(ip + 2);
	frag = sr_ld_be16(ip + 6);
	if (ihl < 20 || tot < ihl || tot > len || ip[9] != 17 || (frag & 0x3fff))
		return -1;	/* not UDP, truncated, or a fragment (MF or an offset) */
	ipu->family = 4;
	ipu->tos = ip[1];
	ipu->ip_id = sr_ld_be16(ip + 4);
	ipu->df = frag & 0x4000;
	ipu->ttl = ip[8];
	memcpy(ipu->src, ip + 12, 4);
	memcpy(ipu->dst, ip + 16, 4);
	return parse_udp(ip + ihl, tot - ihl, ipu, payload, paylen);
}

static int parse_v6(const uint8_t *ip, size_t len, struct sr_ipudp *ipu, const uint8_t **payload,
		    size_t *paylen)
{
	uint32_t vtf;
	size_t plen;

	if (len < 40)
		return -1;
	vtf = sr_ld_be32(ip);
	plen = sr_ld_be16(ip + 4);
	if (ip[6] != 17 || plen > len - 40)
		return -1;	/* extension headers are not expected on RoCEv2 */
	ipu->family = 6;
	ipu->tos = (uint8_t)(vtf >> 20);
	ipu->flow_label = vtf & 0xfffff;
	ipu->ttl = ip[7];
	memcpy(ipu->src, ip + 8, 16);
	memcpy(ipu->dst, ip + 24, 16);
	return parse_udp(ip + 40, plen, ipu, payload, paylen);
}

int sr_pcapr_udp(const uint8_t *ip, size_t len, struct sr_ipudp *ipu, const uint8_t **payload,
		 size_t *paylen)
{
	memset(ipu, 0, sizeof(*ipu));
	*payload = NULL;
	*paylen = 0;
	if (!ip || !len)
		return -1;
	switch (ip[0] >> 4) {
	case 4:
		return parse_v4(ip, len, ipu, payload, paylen);
	case 6:
		return parse_v6(ip, len, ipu, payload, paylen);
	default:
		return -1;
	}
}
