/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: rsocket's protocol messages (src/cm/rsocket/proto.c; docs/rsocket.md).
 * The first input byte picks the decoder (connection private data, control message, datagram
 * header, data-write immediate), the rest is the message. What a decoder accepts must survive
 * a round trip through its encoder (reserved bytes aside), and a datagram header's source
 * address must be one the sockets API can use (family AF_INET/AF_INET6, QPN of 24 bits).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm/rsocket/proto.h"

#define FAIL(...) do { fprintf(stderr, "fuzz_rsocket: " __VA_ARGS__); abort(); } while (0)

static void conn(const uint8_t *d, size_t n)
{
	struct rs_conn c, c2;
	uint8_t buf[RS_CONN_LEN];

	memset(&c, 0, sizeof(c));
	memset(&c2, 0, sizeof(c2));
	if (rs_conn_decode(&c, d, n))
		return;
	if (!c.size || !c.credits || c.version != RS_PROTO_VERSION)
		FAIL("connection data accepted with size %u credits %u version %u\n", c.size,
		     c.credits, c.version);
	rs_conn_encode(&c, buf);
	if (rs_conn_decode(&c2, buf, sizeof(buf)) || memcmp(&c, &c2, sizeof(c)))
		FAIL("connection data does not survive encode + decode\n");
}

static void ctrl(const uint8_t *d, size_t n)
{
	struct rs_ctrl c, c2;
	uint8_t buf[RS_CTRL_LEN];
	size_t len;

	if (rs_ctrl_decode(&c, d, n))
		return;
	len = rs_ctrl_encode(&c, buf);
	if (len > n || len > RS_CTRL_LEN)
		FAIL("control message type %u: %zu bytes encoded from %zu\n", c.type, len, n);
	if (rs_ctrl_decode(&c2, buf, len) || memcmp(&c, &c2, sizeof(c)))
		FAIL("control message type %u does not survive encode + decode\n", c.type);
}

static void dg(const uint8_t *d, size_t n)
{
	struct rs_dg_hdr h, h2;
	uint8_t buf[RS_DG_HDR_LEN];

	if (rs_dg_hdr_decode(&h, d, n))
		return;
	if ((h.src.ss_family != AF_INET && h.src.ss_family != AF_INET6) || h.qpn > 0xffffff)
		FAIL("datagram header accepted with family %u QPN 0x%x\n", h.src.ss_family, h.qpn);
	rs_dg_hdr_encode(&h, buf);
	if (rs_dg_hdr_decode(&h2, buf, sizeof(buf)) || memcmp(&h, &h2, sizeof(h)))
		FAIL("datagram header does not survive encode + decode\n");
}

static void imm(const uint8_t *d, size_t n)
{
	uint32_t v;
	int64_t len;

	if (n < 4)
		return;
	memcpy(&v, d, 4);
	len = rs_imm_len(v);
	if (len > (int64_t)RS_IMM_LEN_MAX || len < -1)
		FAIL("immediate 0x%x gives length %lld\n", ntohl(v), (long long)len);
	if (len >= 0 && rs_imm_data((uint32_t)len) != v)
		FAIL("immediate 0x%x does not survive encode + decode\n", ntohl(v));
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (n < 1)
		return 0;
	switch (d[0] & 3) {
	case 0:
		conn(d + 1, n - 1);
		break;
	case 1:
		ctrl(d + 1, n - 1);
		break;
	case 2:
		dg(d + 1, n - 1);
		break;
	default:
		imm(d + 1, n - 1);
		break;
	}
	return 0;
}
