/* SPDX-License-Identifier: MIT */
/*
 * A device that could not have UDP 4791 on its fixed address (docs/gid.md, "The LID carries the
 * port"): this test holds 4791 on a 127/8 address of its own with a plain socket, as another
 * process would, then opens softrdma there (SOFTRDMA_ADDR), so the device takes another port P.
 *
 *   GID table   two entries, both RoCE v2: index 0 the address GID ::ffff:a.b.c.d (what
 *               perftest compares with its peer's), index 1 the port GID 0:0:0:0:PPPP:ffff:...;
 *               index 2 is not there (ibv_query_gid, _ex, _table, the GID type)
 *   LID         ibv_query_port says P
 *   dlid        an AH to the standard GID ::ffff:a.b.c.d with dlid Q (1024..49151) sends to
 *               UDP port Q; dlid 0, or one in the RoCEv2 source-port range (50000), sends to
 *               4791; a port GID wins over the dlid
 *   sgid_index  0 and 1 are accepted, 2 refused (EINVAL)
 *   UD reply    a datagram the device sends to a UD QP of its own completes with wc.slid P
 *               (the sender's LID); ibv_init_ah_from_wc gives dlid P and sgid_index 1 (the
 *               GID naming the port the reply leaves from), and an address vector
 *               made from the completion as rdma-core makes one (dgid ::ffff:a.b.c.d from the
 *               GRH area, dlid = wc.slid), or by ibv_create_ah_from_wc, reaches the device at
 *               P, not 4791's owner
 *
 * The datagrams are UD SENDs, caught by plain UDP sockets on this test's address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sr_test.h"
#include "verbs_util.h"

static struct vu_dev dev;
static struct in_addr ip;

/* A UDP socket bound to ip:port (0: any port in 20000..32767 that is free). -1 if none. */
static int udp_on(uint16_t port, uint16_t *bound)
{
	for (int i = 0; i < 200; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr = ip };
		uint16_t r = 0;
		int fd;

		if (!port && getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint16_t)(getpid() + i);
		a.sin_port = htons(port ? port : (uint16_t)(20000 + r % 12768));
		fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -1;
		if (!bind(fd, (struct sockaddr *)&a, sizeof(a))) {
			if (bound)
				*bound = ntohs(a.sin_port);
			return fd;
		}
		close(fd);
		if (port)
			return -1;
	}
	return -1;
}

/* The number of datagrams waiting on fd after up to timeout_ms for the first; drains them. */
static int arrived(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char buf[4096];
	int n = 0;

	while (poll(&p, 1, n ? 50 : timeout_ms) > 0 && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		n++;
	return n;
}

/* A UD SEND of 64 bytes through ah to QP dqpn, its completion awaited on cq. */
static void send_ah(struct ibv_qp *qp, struct ibv_cq *cq, struct vu_buf *b, struct ibv_ah *ah,
		    uint32_t dqpn)
{
	struct ibv_wc wc;

	CHECK(vu_post_ud(qp, 1, ah, dqpn, 0x11111111, b->mr, b->p, 64, IBV_SEND_SIGNALED) == 0);
	CHECK(vu_wait(cq, &wc, 5000) == 1 && wc.status == IBV_WC_SUCCESS);
}

/* A UD SEND through an AH to gid with dlid and sgid_index: 0, or the errno of ibv_create_ah. */
static int send_to(struct ibv_qp *qp, struct ibv_cq *cq, struct vu_buf *b, const union ibv_gid *gid,
		   uint16_t dlid, uint8_t sgid_index)
{
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;

	vu_ah_attr(&aa, gid);
	aa.dlid = dlid;
	aa.grh.sgid_index = sgid_index;
	ah = ibv_create_ah(dev.pd, &aa);
	if (!ah)
		return errno ? errno : EIO;
	send_ah(qp, cq, b, ah, 0x123456);
	ibv_destroy_ah(ah);
	return 0;
}

/* One datagram into rqp's receive at b->p + 2048 within 3 s: its completion (status -1 when
 * none came). */
static struct ibv_wc recv_one(struct ibv_qp *rqp, struct ibv_cq *rcq, struct vu_buf *b)
{
	struct ibv_wc wc = { .status = (enum ibv_wc_status)-1 };

	if (vu_wait(rcq, &wc, 3000) != 1)
		wc.status = (enum ibv_wc_status)-1;
	CHECK(vu_post_recv(rqp, 2, b->mr, (char *)b->p + 2048, 40 + 1024) == 0);	/* the next */
	return wc;
}

/*
 * The answer to a UD datagram from this device (UDP port `port`): the receiver's completion
 * names the sender's LID, and an address vector made from it reaches the sender's port, not
 * 4791's owner. The datagrams go from qp (send CQ cq) to rqp (receive CQ rcq), the answers
 * from rqp to itself, since the sender is this device.
 */
static void test_ud_reply(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_qp *rqp,
			  struct ibv_cq *scq, struct ibv_cq *rcq, struct vu_buf *b, int owner,
			  uint16_t port, const union ibv_gid *want0)
{
	const struct ibv_grh *grh = (const struct ibv_grh *)((char *)b->p + 2048);
	struct ibv_ah_attr aa, back;
	struct ibv_ah *ah;
	struct ibv_wc wc;

	REQUIRE(vu_post_recv(rqp, 2, b->mr, (char *)b->p + 2048, 40 + 1024) == 0);
	vu_ah_attr(&aa, &dev.gid);	/* the port GID: to this device */
	ah = ibv_create_ah(dev.pd, &aa);
	REQUIRE(ah);
	send_ah(qp, cq, b, ah, rqp->qp_num);
	ibv_destroy_ah(ah);
	wc = recv_one(rqp, rcq, b);
	REQUIRE(wc.status == IBV_WC_SUCCESS);
	CHECK(wc.wc_flags & IBV_WC_GRH);
	CHECK_EQ(wc.slid, port);

	/* ibv_init_ah_from_wc: the sender's port GID, and its LID as the dlid (as rdma-core). */
	CHECK_EQ(ibv_init_ah_from_wc(dev.ctx, 1, &wc, (struct ibv_grh *)grh, &back), 0);
	CHECK(!memcmp(&back.grh.dgid, &dev.gid, 16));
	CHECK_EQ(back.dlid, port);
	CHECK_EQ(back.grh.sgid_index, 1);	/* the reply leaves from port P: GID 1 names it */

	/* As rdma-core's ibv_init_ah_from_wc makes it for RoCE v2 over IPv4: the GID rebuilt from
	 * the IPv4 header's source address, the completion's slid as dlid. */
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	aa.port_num = 1;
	aa.grh.hop_limit = 64;
	aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
	memcpy(&aa.grh.dgid.raw[12], (const uint8_t *)grh + 20 + 12, 4);
	CHECK(!memcmp(&aa.grh.dgid, want0, 16));
	aa.dlid = wc.slid;
	ah = ibv_create_ah(dev.pd, &aa);
	REQUIRE(ah);
	send_ah(rqp, scq, b, ah, rqp->qp_num);
	ibv_destroy_ah(ah);
	wc = recv_one(rqp, rcq, b);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(wc.slid, port);
	CHECK_EQ(arrived(owner, 100), 0);

	/* ibv_create_ah_from_wc. */
	ah = ibv_create_ah_from_wc(dev.pd, &wc, (struct ibv_grh *)grh, 1);
	REQUIRE(ah);
	send_ah(rqp, scq, b, ah, rqp->qp_num);
	ibv_destroy_ah(ah);
	wc = recv_one(rqp, rcq, b);
	CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	CHECK_EQ(arrived(owner, 100), 0);
}

int main(void)
{
	struct ibv_port_attr pa;
	struct ibv_gid_entry e, table[4];
	union ibv_gid g0, g1, g2, want0, pgid;
	struct vu_qp_cfg q;
	struct vu_conn_cfg c;
	struct vu_buf b;
	struct ibv_cq *cq, *scq, *rcq;
	struct ibv_qp *qp, *rqp;
	int owner, other, type = -1;
	uint8_t r[2];
	uint16_t port, q_port;
	char text[INET_ADDRSTRLEN];

	sr_test_timeout(120);
	if (getrandom(r, sizeof(r), 0) != sizeof(r))
		r[0] = (uint8_t)getpid(), r[1] = (uint8_t)(getpid() >> 8);
	ip.s_addr = htonl(0x7f000000u | 0x5c0000u | (uint32_t)r[0] << 8 | (uint32_t)(1 + r[1] % 254));
	owner = udp_on(4791, NULL);	/* another process's 4791 */
	REQUIRE(owner >= 0);
	inet_ntop(AF_INET, &ip, text, sizeof(text));
	setenv("SOFTRDMA_ADDR", text, 1);
	setenv("SOFTRDMA_DIRECT", "0", 1);
	REQUIRE(vu_open(&dev) == 0);

	/* The port the device took, from its own GID (index 1). */
	REQUIRE(ibv_query_port(dev.ctx, 1, &pa) == 0);
	CHECK_EQ(pa.gid_tbl_len, 2);
	REQUIRE(ibv_query_gid(dev.ctx, 1, 1, &g1) == 0);
	port = (uint16_t)(g1.raw[8] << 8 | g1.raw[9]);
	printf("device on %s, UDP port %u (LID 0x%x)\n", text, port, pa.lid);
	CHECK(port != 4791 && port >= 20000 && port < 49152);
	CHECK_EQ(pa.lid, port);
	CHECK(!memcmp(&g1.raw[12], &ip, 4) && g1.raw[10] == 0xff && g1.raw[11] == 0xff);
	CHECK(!memcmp(&dev.gid, &g1, 16));	/* the test helper's GID: the one naming the port */

	memset(&want0, 0, sizeof(want0));
	want0.raw[10] = want0.raw[11] = 0xff;
	memcpy(&want0.raw[12], &ip, 4);
	REQUIRE(ibv_query_gid(dev.ctx, 1, 0, &g0) == 0);
	CHECK(!memcmp(&g0, &want0, 16));
	CHECK(ibv_query_gid(dev.ctx, 1, 2, &g2) != 0);

	CHECK_EQ(ibv_query_gid_ex(dev.ctx, 1, 0, &e, 0), 0);
	CHECK(!memcmp(&e.gid, &want0, 16) && e.gid_index == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2);
	CHECK_EQ(ibv_query_gid_ex(dev.ctx, 1, 1, &e, 0), 0);
	CHECK(!memcmp(&e.gid, &g1, 16) && e.gid_index == 1 && e.gid_type == IBV_GID_TYPE_ROCE_V2);
	CHECK_EQ(ibv_query_gid_ex(dev.ctx, 1, 2, &e, 0), ENODATA);
	CHECK_EQ(ibv_query_gid_table(dev.ctx, table, 4, 0), 2);
	CHECK(!memcmp(&table[0].gid, &want0, 16) && !memcmp(&table[1].gid, &g1, 16));
	CHECK(ibv_query_gid_table(dev.ctx, table, 1, 0) < 0);	/* does not fit */
	{
		extern int ibv_query_gid_type(struct ibv_context *, uint8_t, unsigned int, int *);

		CHECK(ibv_query_gid_type(dev.ctx, 1, 1, &type) == 0 && type == 1);
		CHECK(ibv_query_gid_type(dev.ctx, 1, 2, &type) != 0);
	}

	/* Where an AH sends. */
	other = udp_on(0, &q_port);	/* another device's port Q on the same address */
	REQUIRE(other >= 0);
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(cq);
	vu_qp_cfg_default(&q, IBV_QPT_UD);
	vu_conn_cfg_default(&c);
	qp = vu_qp_create(&dev, cq, cq, &q);
	REQUIRE(qp);
	REQUIRE(vu_qp_connect(qp, &c, NULL, 0) == 0);
	REQUIRE(vu_buf_alloc(&dev, &b, 4096, VU_ACCESS_ALL) == 0);

	/* dlid Q beside the standard GID: port Q. */
	CHECK_EQ(send_to(qp, cq, &b, &want0, q_port, 0), 0);
	CHECK_EQ(arrived(other, 2000), 1);
	CHECK_EQ(arrived(owner, 100), 0);
	/* No dlid: 4791. */
	CHECK_EQ(send_to(qp, cq, &b, &want0, 0, 0), 0);
	CHECK_EQ(arrived(owner, 2000), 1);
	CHECK_EQ(arrived(other, 100), 0);
	/* A dlid in the RoCEv2 source-port range names no port: 4791. */
	CHECK_EQ(send_to(qp, cq, &b, &want0, 50000, 0), 0);
	CHECK_EQ(arrived(owner, 2000), 1);
	CHECK_EQ(arrived(other, 100), 0);
	/* A port GID wins over the dlid: its port (Q), whatever the dlid says. */
	pgid = want0;
	pgid.raw[8] = (uint8_t)(q_port >> 8);
	pgid.raw[9] = (uint8_t)q_port;
	CHECK_EQ(send_to(qp, cq, &b, &pgid, 30000, 1), 0);	/* sgid_index 1 accepted */
	CHECK_EQ(arrived(other, 2000), 1);
	CHECK_EQ(arrived(owner, 100), 0);
	/* There is no GID 2. */
	CHECK_EQ(send_to(qp, cq, &b, &want0, 0, 2), EINVAL);

	/* Answering a datagram from this device. */
	scq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	rcq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	REQUIRE(scq && rcq);
	rqp = vu_qp_create(&dev, scq, rcq, &q);
	REQUIRE(rqp);
	REQUIRE(vu_qp_connect(rqp, &c, NULL, 0) == 0);
	test_ud_reply(qp, cq, rqp, scq, rcq, &b, owner, port, &want0);
	ibv_destroy_qp(rqp);
	ibv_destroy_cq(rcq);
	ibv_destroy_cq(scq);

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	vu_buf_free(&b);
	vu_close(&dev);
	close(other);
	close(owner);
	return sr_test_done("test_lid_port");
}
