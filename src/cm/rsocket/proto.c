/* SPDX-License-Identifier: MIT */
/*
 * Encoders and decoders of the rsocket wire formats (proto.h). Byte order lives here only.
 */
#include <errno.h>
#include <string.h>

#include "cm/rsocket/proto.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}

/* ---- connection private data ------------------------------------------------------------- */
void rs_conn_encode(const struct rs_conn *c, uint8_t buf[RS_CONN_LEN])
{
	memset(buf, 0, RS_CONN_LEN);
	buf[0] = RS_MAGIC0;
	buf[1] = RS_MAGIC1;
	buf[2] = RS_PROTO_VERSION;
	put32(buf + 4, c->rkey);
	put64(buf + 8, c->addr);
	put32(buf + 16, c->size);
	put16(buf + 20, c->credits);
	put16(buf + 22, c->iomap_size);
}

int rs_conn_decode(struct rs_conn *c, const void *data, size_t len)
{
	const uint8_t *buf = data;

	if (!buf || len < RS_CONN_LEN || buf[0] != RS_MAGIC0 || buf[1] != RS_MAGIC1 ||
	    buf[2] != RS_PROTO_VERSION)
		return -EPROTO;
	c->version = buf[2];
	c->rkey = get32(buf + 4);
	c->addr = get64(buf + 8);
	c->size = get32(buf + 16);
	c->credits = get16(buf + 20);
	c->iomap_size = get16(buf + 22);
	if (!c->size || !c->credits)
		return -EPROTO;
	return 0;
}

/* ---- control messages ----------------------------------------------------------------------- */
size_t rs_ctrl_encode(const struct rs_ctrl *c, uint8_t buf[RS_CTRL_LEN])
{
	memset(buf, 0, RS_CTRL_LEN);
	buf[0] = c->type;
	switch (c->type) {
	case RS_CTRL_CREDIT:
		put32(buf + 4, c->freed);
		put32(buf + 8, c->msgs);
		return 12;
	case RS_CTRL_IOMAP:
		put32(buf + 4, c->rkey);
		put64(buf + 8, c->offset);
		put64(buf + 16, c->addr);
		put64(buf + 24, c->len);
		return 32;
	default:
		return 4;
	}
}

int rs_ctrl_decode(struct rs_ctrl *c, const void *data, size_t len)
{
	const uint8_t *buf = data;

	memset(c, 0, sizeof(*c));
	if (len < 4)
		return -EPROTO;
	c->type = buf[0];
	switch (c->type) {
	case RS_CTRL_CREDIT:
		if (len < 12)
			return -EPROTO;
		c->freed = get32(buf + 4);
		c->msgs = get32(buf + 8);
		return 0;
	case RS_CTRL_SHUTDOWN:
		return 0;
	case RS_CTRL_IOMAP:
		if (len < 32)
			return -EPROTO;
		c->rkey = get32(buf + 4);
		c->offset = get64(buf + 8);
		c->addr = get64(buf + 16);
		c->len = get64(buf + 24);
		return 0;
	default:
		return -EPROTO;
	}
}

/* ---- datagram header -------------------------------------------------------------------------- */
void rs_dg_hdr_encode(const struct rs_dg_hdr *h, uint8_t buf[RS_DG_HDR_LEN])
{
	memset(buf, 0, RS_DG_HDR_LEN);
	buf[0] = RS_PROTO_VERSION;
	if (h->src.ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)&h->src;

		buf[1] = 4;
		memcpy(buf + 2, &s->sin_port, 2);
		memcpy(buf + 8, &s->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&h->src;

		buf[1] = 6;
		memcpy(buf + 2, &s->sin6_port, 2);
		memcpy(buf + 8, &s->sin6_addr, 16);
	}
	put32(buf + 4, h->qpn);
	memcpy(buf + 24, h->gid.raw, 16);
}

int rs_dg_hdr_decode(struct rs_dg_hdr *h, const void *data, size_t len)
{
	const uint8_t *buf = data;

	memset(h, 0, sizeof(*h));
	if (len < RS_DG_HDR_LEN || buf[0] != RS_PROTO_VERSION)
		return -EPROTO;
	if (buf[1] == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)&h->src;

		s->sin_family = AF_INET;
		memcpy(&s->sin_port, buf + 2, 2);
		memcpy(&s->sin_addr, buf + 8, 4);
	} else if (buf[1] == 6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&h->src;

		s->sin6_family = AF_INET6;
		memcpy(&s->sin6_port, buf + 2, 2);
		memcpy(&s->sin6_addr, buf + 8, 16);
	} else {
		return -EPROTO;
	}
	h->qpn = get32(buf + 4) & 0xffffff;
	memcpy(h->gid.raw, buf + 24, 16);
	return 0;
}
