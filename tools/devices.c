/* SPDX-License-Identifier: MIT */
/*
 * softrdma devices: the soft NICs as any verbs program sees them (public API only, through
 * our libibverbs.so.1), and softrdma gid: what a GID means.
 *
 * GIDs name UDP endpoints (the format the engine publishes):
 *   ::ffff:a.b.c.d                       IPv4 a.b.c.d, UDP port 4791 (standard RoCEv2)
 *   0000:0000:0000:0000:PPPP:ffff:a.b.c.d  IPv4 a.b.c.d, UDP port PPPP (bytes 8-9, big endian)
 *   anything else                        that IPv6 address, UDP port 4791
 */
#include "cli.h"
#include "core/addr.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ROCE_PORT 4791
#define GID_SHOWN_MAX 16	/* GID entries listed per port */

/* "fe80:0000:...": all eight groups, as ibv_devinfo prints GIDs. */
static void gid_full(const uint8_t g[16], char *buf, size_t size)
{
	snprintf(buf, size, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		 g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12],
		 g[13], g[14], g[15]);
}

/* What a GID names, read by the library's own decoder (core/addr.c, docs/gid.md). */
static void gid_meaning(const uint8_t g[16], char *buf, size_t size)
{
	union ibv_gid gid;
	struct sr_addr a;
	char ip[INET6_ADDRSTRLEN];

	memcpy(gid.raw, g, 16);
	if (sr_addr_from_gid(&a, &gid)) {
		snprintf(buf, size, "(empty)");
		return;
	}
	inet_ntop(a.family, a.raw, ip, sizeof(ip));
	snprintf(buf, size, "%s %s, UDP port %u", a.family == AF_INET ? "IPv4" : "IPv6", ip,
		 (unsigned)a.port);
}

/* "a.b.c.d[:port]" or "[v6]:4791" to a GID; a GID text is taken as is. 0, or -1. */
static int gid_from_text(const char *s, uint8_t g[16])
{
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon, *close;
	unsigned long port = ROCE_PORT;
	char *end;

	if (inet_pton(AF_INET6, s, g) == 1)
		return 0;	/* already a GID */
	if (s[0] == '[') {
		close = strchr(s, ']');
		if (!close || (size_t)(close - s - 1) >= sizeof(host))
			return -1;
		memcpy(host, s + 1, close - s - 1);
		host[close - s - 1] = '\0';
		if (close[1] == ':') {
			errno = 0;
			port = strtoul(close + 2, &end, 10);
			if (errno || *end || end == close + 2)
				return -1;
		} else if (close[1]) {
			return -1;
		}
		/* There is no GID for IPv6 on another port. */
		return port == ROCE_PORT && inet_pton(AF_INET6, host, g) == 1 ? 0 : -1;
	}
	colon = strchr(s, ':');
	if ((colon ? (size_t)(colon - s) : strlen(s)) >= sizeof(host))
		return -1;
	snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - s) : (int)strlen(s), s);
	if (colon) {
		errno = 0;
		port = strtoul(colon + 1, &end, 10);
		if (errno || *end || end == colon + 1 || port == 0 || port > 65535)
			return -1;
	}
	struct sr_addr a = { .family = AF_INET, .port = (uint16_t)port };
	union ibv_gid gid;

	if (inet_pton(AF_INET, host, &a.v4) != 1)
		return -1;
	sr_gid_from_addr(&gid, &a);	/* the library's encoder (core/addr.c) */
	memcpy(g, gid.raw, 16);
	return 0;
}

int cmd_gid(int argc, char **argv)
{
	char full[48], meaning[96];
	uint8_t g[16];
	int rc = CLI_OK;

	if (argc < 2)
		return cli_usage_error("gid", "give a GID or an address[:port]");
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		cli_usage(stdout);
		return CLI_OK;
	}
	for (int i = 1; i < argc; i++) {
		if (gid_from_text(argv[i], g)) {
			cli_printable(meaning, sizeof(meaning), argv[i], strlen(argv[i]));
			fprintf(stderr, "softrdma gid: \"%s\" is neither a GID nor IPv4[:port] nor [IPv6]:4791\n",
				meaning);
			rc = CLI_USAGE;
			continue;
		}
		gid_full(g, full, sizeof(full));
		gid_meaning(g, meaning, sizeof(meaning));
		printf("%s  %s\n", full, meaning);
	}
	return rc;
}

static const char *port_state(enum ibv_port_state s)
{
	static const char *const names[] = {
		[IBV_PORT_NOP] = "NOP",
		[IBV_PORT_DOWN] = "DOWN",
		[IBV_PORT_INIT] = "INIT",
		[IBV_PORT_ARMED] = "ARMED",
		[IBV_PORT_ACTIVE] = "ACTIVE",
		[IBV_PORT_ACTIVE_DEFER] = "ACTIVE_DEFER",
	};

	return (unsigned)s < sizeof(names) / sizeof(names[0]) && names[s] ? names[s] : "?";
}

static int mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

static const char *link_layer(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_ETHERNET:
		return "Ethernet";
	case IBV_LINK_LAYER_INFINIBAND:
		return "InfiniBand";
	default:
		return "link layer unspecified";
	}
}

static int port_print(struct ibv_context *ctx, const char *dev, int port)
{
	char full[48], meaning[96];
	struct ibv_port_attr pa;
	union ibv_gid gid;
	int rc;

	rc = ibv_query_port(ctx, port, &pa);
	if (rc) {
		fprintf(stderr, "softrdma devices: %s port %d: ibv_query_port: %s\n", dev, port,
			strerror(rc));
		return CLI_FAIL;
	}
	printf("    port %d        %s, %s, active MTU %d (max %d)\n", port, port_state(pa.state),
	       link_layer(pa.link_layer), mtu_bytes(pa.active_mtu), mtu_bytes(pa.max_mtu));
	for (int i = 0; i < pa.gid_tbl_len && i < GID_SHOWN_MAX; i++) {
		static const uint8_t zero[16];

		if (ibv_query_gid(ctx, port, i, &gid)) {
			if (i == 0) {
				fprintf(stderr, "softrdma devices: %s port %d: ibv_query_gid: %s\n",
					dev, port, strerror(errno));
				return CLI_FAIL;
			}
			break;
		}
		if (i > 0 && !memcmp(gid.raw, zero, sizeof(zero)))
			continue;
		gid_full(gid.raw, full, sizeof(full));
		gid_meaning(gid.raw, meaning, sizeof(meaning));
		printf("    GID[%d]%*s%s  %s\n", i, i < 10 ? 8 : 7, "", full, meaning);
	}
	return CLI_OK;
}

static int device_print(struct ibv_device *d)
{
	struct ibv_device_attr attr;
	struct ibv_context *ctx;
	char name[80];
	uint64_t guid;
	int rc;

	cli_printable(name, sizeof(name), ibv_get_device_name(d) ? ibv_get_device_name(d) : "?",
		      64);
	ctx = ibv_open_device(d);
	if (!ctx) {
		fprintf(stderr, "softrdma devices: %s: ibv_open_device: %s\n", name, strerror(errno));
		return CLI_FAIL;
	}
	rc = ibv_query_device(ctx, &attr);
	if (rc) {
		fprintf(stderr, "softrdma devices: %s: ibv_query_device: %s\n", name, strerror(rc));
		ibv_close_device(ctx);
		return CLI_FAIL;
	}
	guid = be64toh(attr.node_guid);
	printf("%s\n", name);
	printf("    node GUID     %04x:%04x:%04x:%04x\n", (unsigned)(guid >> 48) & 0xffff,
	       (unsigned)(guid >> 32) & 0xffff, (unsigned)(guid >> 16) & 0xffff,
	       (unsigned)guid & 0xffff);
	rc = CLI_OK;
	for (int p = 1; p <= attr.phys_port_cnt; p++)
		if (port_print(ctx, name, p))
			rc = CLI_FAIL;
	ibv_close_device(ctx);
	return rc;
}

int cmd_devices(int argc, char **argv)
{
	struct ibv_device **list;
	int num = 0, rc = CLI_OK;

	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		cli_usage(stdout);
		return CLI_OK;
	}
	if (argc > 1)
		return cli_usage_error("devices", "unexpected argument \"%s\"", argv[1]);
	list = ibv_get_device_list(&num);
	if (!list) {
		fprintf(stderr, "softrdma devices: ibv_get_device_list: %s\n", strerror(errno));
		return CLI_FAIL;
	}
	if (!num)
		puts("no devices");
	for (int i = 0; i < num; i++) {
		if (i)
			putchar('\n');
		if (device_print(list[i]))
			rc = CLI_FAIL;
	}
	ibv_free_device_list(list);
	return rc;
}
