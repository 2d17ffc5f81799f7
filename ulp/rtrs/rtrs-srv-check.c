/* SPDX-License-Identifier: MIT */
/* The RTRS server's checks of client messages (rtrs-srv-check.h). */
#include "rtrs-srv-check.h"

#include <errno.h>
#include <string.h>

int rtrs_srv_check_con_req(const void *pdata, size_t plen, struct rtrs_msg_conn_req *rq)
{
	if (!pdata || plen < sizeof(*rq))
		return -EPROTO;
	memcpy(rq, pdata, sizeof(*rq));
	if (rq->magic != RTRS_MAGIC || (rq->version >> 8) != RTRS_PROTO_VER_MAJOR ||
	    rq->cid_num < 1 || rq->cid_num > RTRS_SRV_MAX_CONS || rq->cid >= rq->cid_num)
		return -EPROTO;
	return 0;
}

int rtrs_srv_check_info_req(const void *buf, size_t len, char name[RTRS_NAME_MAX + 1])
{
	const char *b = buf;
	uint16_t type;

	if (!buf || len < sizeof(struct rtrs_msg_info_req))
		return -EPROTO;
	memcpy(&type, b, 2);
	if (type != RTRS_MSG_INFO_REQ)
		return -EPROTO;
	memcpy(name, b + 2, RTRS_NAME_MAX);
	name[RTRS_NAME_MAX] = 0;
	return 0;
}

const char *rtrs_srv_check_io(uint32_t payload, unsigned int cid, uint32_t qd, uint32_t chunk,
			      uint32_t max_hdr_size, const char *buf, struct rtrs_srv_io *io)
{
	unsigned int mem_bits = rtrs_mem_bits(qd);
	uint32_t id = payload >> mem_bits, off = payload & ((1u << mem_bits) - 1);

	memset(io, 0, sizeof(*io));
	/* any connection: the kernel's client sends its user (admin) messages, RNBD's SESS_INFO,
	 * OPEN and CLOSE, as IO on the service connection (cid 0, RTRS_ADMIN_CON), and the
	 * kernel's server takes IO there (post_recv_path posts IO receives on every connection) */
	(void)cid;
	if (id >= qd)
		return "chunk id >= queue depth";
	if ((uint64_t)off + sizeof(struct rtrs_msg_rdma_write) > chunk)
		return "offset outside the chunk";
	const char *c = buf + (size_t)id * chunk;
	uint16_t type, usr_len;
	memcpy(&type, c + off, 2);
	memcpy(&usr_len, c + off + 2, 2);
	if (usr_len > off || usr_len > max_hdr_size)
		return "user header length";
	io->id = id;
	io->off = off;
	io->usr_len = usr_len;
	if (type == RTRS_MSG_WRITE) {
		io->dir = RTRS_WRITE;
		io->datalen = off - usr_len;
		if (io->datalen > chunk - max_hdr_size && io->datalen + usr_len > chunk)
			return "WRITE length";
		return NULL;
	}
	if (type != RTRS_MSG_READ)
		return "message type";
	struct rtrs_msg_rdma_read rd;
	if ((uint64_t)off + sizeof(rd) > chunk)
		return "READ trailer outside the chunk";
	memcpy(&rd, c + off, sizeof(rd));
	/* no descriptor: a READ that moves no data, as the kernel's client sends RNBD's FLUSH
	 * (REQ_OP_FLUSH is not a write); the kernel's server answers it without an RDMA WRITE */
	if (rd.sg_cnt == 0 && (rd.flags & RTRS_MSG_NEED_INVAL_F))
		return "READ NEED_INVAL without descriptor";
	if (rd.sg_cnt > RTRS_SRV_MAX_DESC ||
	    (uint64_t)off + sizeof(rd) + (uint64_t)rd.sg_cnt * sizeof(struct rtrs_sg_desc) > chunk)
		return "READ descriptor count";
	memcpy(io->desc, c + off + sizeof(rd), (size_t)rd.sg_cnt * sizeof(struct rtrs_sg_desc));
	uint64_t total = 0;
	for (unsigned int i = 0; i < rd.sg_cnt; i++) {
		if (io->desc[i].len > chunk)
			return "READ descriptor length > chunk";
		total += io->desc[i].len;
	}
	if (total > chunk - max_hdr_size)
		return "READ length > max IO size";
	io->dir = RTRS_READ;
	io->sg_cnt = rd.sg_cnt;
	io->flags = rd.flags;
	io->datalen = (uint32_t)total;
	return NULL;
}
