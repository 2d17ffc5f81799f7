/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: what an RTRS client sends the server, into the server's own checks
 * (ulp/rtrs/rtrs-srv-check.c, called by rtrs-srv.c before it acts on anything), and what the
 * server accepts on into the RNBD server's parser (ulp/rnbd/rnbd-msg.c), as rnbd-server chains
 * them. The first byte chooses what the rest is:
 *   0  CON_REQ private data (at most 256 bytes, as the server's event loop copies it)
 *   1  a SEND on the service connection (INFO_REQ; at most 512 bytes, its receive buffers)
 *   2  an IO request: [cfg][payload le32][back le16][cid][nsec][bytes...]: the session
 *      configuration cfg (queue depth, chunk size, max header size: fuzz_rtrs_cfgs[] of fuzz_rtrs.h,
 *      the first one rnbd-server's), the IO_REQ immediate's payload, the connection it came on (0 = service),
 *      and the bytes the client's RDMA WRITE left in the chunk, placed at back bytes before the
 *      offset the payload names (clamped into the chunks); nsec chooses the size of the device
 *      an accepted RNBD IO is checked against.
 * The chunks lie in one mapping between PROT_NONE guard pages, as large as the session's (up to
 * 128 MiB, untouched pages cost nothing), so a read past them is a SIGSEGV. Besides ASan and
 * UBSan, a crash is anything accepted that a later stage would act on outside its bounds: an
 * IO whose user header, trailer, descriptors, data or READ answer leave its chunk, a READ
 * larger than the advertised max IO size, a connection id outside the path's connections, a
 * session name that is not a NUL-terminated string of the field; and an RNBD message accepted
 * whose buffer is smaller than what the server writes into it, or an IO past the device.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rnbd-msg.h"
#include "rtrs-srv-check.h"
#include "fuzz_rtrs.h"

static char *chunks[FUZZ_RTRS_NCFG];
static int verbose = -1;	/* FUZZ_VERBOSE=1: say what each input was and what was accepted */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	if (verbose < 0)
		verbose = getenv("FUZZ_VERBOSE") != NULL;
	if (!verbose)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

#define BUG(...) do { fprintf(stderr, "fuzz_rtrs: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static char *chunks_of(unsigned k)
{
	const struct fuzz_rtrs_cfg *c = &fuzz_rtrs_cfgs[k];
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = (size_t)c->qd * c->chunk;

	if (chunks[k])
		return chunks[k];
	if (c->chunk < RTRS_MIN_CHUNK_SIZE || (c->chunk & (c->chunk - 1)) || !c->qd ||
	    c->qd > RTRS_MAX_SESS_QUEUE_DEPTH || c->max_hdr >= c->chunk / 2 ||
	    (1ull << rtrs_mem_bits(c->qd)) < c->chunk)
		BUG("cfg %u is one rtrs_srv_open refuses", k);
	char *m = mmap(NULL, len + 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (m == MAP_FAILED || mprotect(m + pg, len, PROT_READ | PROT_WRITE)) {
		perror("fuzz_rtrs: mmap");
		exit(1);
	}
	chunks[k] = m + pg;
	return chunks[k];
}

static void con_req(const uint8_t *d, size_t n)
{
	struct rtrs_msg_conn_req rq;

	if (n > 256)
		n = 256;
	if (rtrs_srv_check_con_req(d, n, &rq)) {
		say("CON_REQ of %zu bytes refused\n", n);
		return;
	}
	say("CON_REQ accepted: cid %u of %u\n", rq.cid, rq.cid_num);
	if (n < sizeof(rq) || rq.magic != RTRS_MAGIC || rq.version >> 8 != RTRS_PROTO_VER_MAJOR)
		BUG("CON_REQ of %zu bytes, magic %#x, version %#x accepted", n, rq.magic, rq.version);
	/* the server indexes the path's connections (RTRS_SRV_MAX_CONS) with cid */
	if (rq.cid_num < 1 || rq.cid_num > RTRS_SRV_MAX_CONS || rq.cid >= rq.cid_num)
		BUG("CON_REQ cid %u of %u accepted", rq.cid, rq.cid_num);
	if (memcmp(&rq, d, sizeof(rq)))
		BUG("CON_REQ: what was checked is not what arrived");
}

static void info_req(const uint8_t *d, size_t n)
{
	char name[RTRS_NAME_MAX + 2];
	size_t l;

	if (n > 512)
		n = 512;
	name[RTRS_NAME_MAX + 1] = 0x55;
	if (rtrs_srv_check_info_req(d, n, name)) {
		say("SEND of %zu bytes refused\n", n);
		return;
	}
	say("INFO_REQ accepted: session \"%s\"\n", name);
	if (name[RTRS_NAME_MAX + 1] != 0x55)
		BUG("INFO_REQ: name written past its %d bytes", RTRS_NAME_MAX + 1);
	if (n < sizeof(struct rtrs_msg_info_req) || d[0] != RTRS_MSG_INFO_REQ || d[1])
		BUG("SEND of %zu bytes, type %u accepted as INFO_REQ", n, d[0] | d[1] << 8);
	l = strnlen(name, RTRS_NAME_MAX + 1);
	if (l > RTRS_NAME_MAX || memcmp(name, d + 2, l) || (l < RTRS_NAME_MAX && d[2 + l]))
		BUG("INFO_REQ: session name of %zu bytes is not the field's string", l);
}

/* What rnbd-server does with an IO RTRS accepted: rnbd_srv_process parses it, answers SESS_INFO
 * and OPEN into the data buffer, runs READ / WRITE over bi_size bytes of it, checks the range
 * against the device (rnbd_handle_submit: rnbd_io_check). */
static void rnbd_chain(const struct rtrs_srv_io *io, const char *usr, uint64_t nsec)
{
	struct rnbd_req r;
	int dir = io->dir == RTRS_READ ? RNBD_DIR_READ : RNBD_DIR_WRITE;

	int rc = rnbd_parse(dir, usr, io->usr_len, io->datalen, &r);

	say("  RNBD: %s, type %u\n", rc ? strerror(-rc) : "accepted", r.type);
	if (rc)
		return;
	switch (r.type) {
	case RNBD_MSG_SESS_INFO:
		if (io->datalen < sizeof(struct rnbd_msg_sess_info_rsp))
			BUG("SESS_INFO accepted with %u bytes for its answer", io->datalen);
		break;
	case RNBD_MSG_OPEN:
		if (io->datalen < sizeof(struct rnbd_msg_open_rsp))
			BUG("OPEN accepted with %u bytes for its answer", io->datalen);
		break;
	case RNBD_MSG_CLOSE:
		break;
	case RNBD_MSG_IO:
		if ((r.op == RNBD_OP_READ || r.op == RNBD_OP_WRITE) && r.bi_size != io->datalen)
			BUG("RNBD %s of %u bytes accepted over %u bytes of data", rnbd_op_str(r.op),
			    r.bi_size, io->datalen);
		if (r.op == RNBD_OP_READ && io->dir != RTRS_READ)
			BUG("RNBD READ accepted in an RTRS WRITE");
		if (rnbd_io_check(&r, nsec)) {
			say("  RNBD %s of sector %llu, %u bytes: outside %llu sectors\n",
			    rnbd_op_str(r.op), (unsigned long long)r.sector, r.bi_size,
			    (unsigned long long)nsec);
			break;
		}
		say("  RNBD %s of sector %llu, %u bytes: within %llu sectors\n", rnbd_op_str(r.op),
		    (unsigned long long)r.sector, r.bi_size, (unsigned long long)nsec);
		if (r.op != RNBD_OP_FLUSH &&
		    (unsigned __int128)r.sector * RNBD_SECTOR_SIZE + r.bi_size >
			    (unsigned __int128)nsec * RNBD_SECTOR_SIZE)
			BUG("RNBD %s of sector %llu, %u bytes accepted on a device of %llu sectors",
			    rnbd_op_str(r.op), (unsigned long long)r.sector, r.bi_size,
			    (unsigned long long)nsec);
		break;
	default:
		BUG("RNBD message type %u accepted", r.type);
	}
}

static void io_req(const uint8_t *d, size_t n)
{
	if (n < 9)
		return;
	unsigned k = d[0] % FUZZ_RTRS_NCFG;
	const struct fuzz_rtrs_cfg *c = &fuzz_rtrs_cfgs[k];
	uint32_t payload = (uint32_t)d[1] | (uint32_t)d[2] << 8 | (uint32_t)d[3] << 16 |
			   (uint32_t)d[4] << 24;
	unsigned back = d[5] | d[6] << 8, cid = d[7] % 4;
	uint64_t nsec = fuzz_rnbd_nsecs[d[8] % FUZZ_RNBD_NNSECS];
	const uint8_t *bytes = d + 9;
	size_t nb = n - 9, total = (size_t)c->qd * c->chunk;
	char *buf = chunks_of(k);
	unsigned mem_bits = rtrs_mem_bits(c->qd);

	/* The payload's chunk and offset, reduced into the chunks only for placing the bytes. */
	/* the immediate's 28 bits of payload (rtrs_from_imm) */
	payload &= RTRS_IMM_PAYL_MASK;
	uint64_t at = (uint64_t)(payload >> mem_bits) % c->qd * c->chunk +
		      (payload & ((1u << mem_bits) - 1)) % c->chunk;
	at = at > back ? at - back : 0;
	if (nb > total)
		nb = total;
	if (at + nb > total)
		at = total - nb;
	memcpy(buf + at, bytes, nb);

	struct rtrs_srv_io io;
	const char *why = rtrs_srv_check_io(payload, cid, c->qd, c->chunk,
					    c->max_hdr, buf, &io);
	say("IO (cfg %u) chunk %u offset %u cid %u: %s\n", k, payload >> mem_bits,
	    payload & ((1u << mem_bits) - 1), cid, why ? why : "accepted");
	if (!why) {
		uint64_t lo = (uint64_t)io.id * c->chunk, hi = lo + c->chunk;

		/* any connection may carry IO: the kernel's client sends its admin requests on the
		 * service connection (cid 0), so that is no longer refused */
		if (io.id >= c->qd)
			BUG("chunk %u of %u accepted", io.id, c->qd);
		if (io.usr_len > io.off || io.usr_len > c->max_hdr)
			BUG("user header of %u bytes at offset %u accepted (max %u)", io.usr_len,
			    io.off, c->max_hdr);
		if (io.dir == RTRS_WRITE) {
			/* data [0, datalen), user header, 4-byte trailer */
			if ((uint64_t)io.datalen + io.usr_len != io.off ||
			    (uint64_t)io.off + sizeof(struct rtrs_msg_rdma_write) > c->chunk)
				BUG("WRITE: data %u + header %u, trailer at %u of a %u-byte chunk",
				    io.datalen, io.usr_len, io.off, c->chunk);
		} else if (io.dir == RTRS_READ) {
			uint64_t sum = 0;

			/* no descriptor (the kernel's FLUSH) only without NEED_INVAL: no key to kill */
			if (io.sg_cnt == 0 && (io.flags & RTRS_MSG_NEED_INVAL_F))
				BUG("READ NEED_INVAL without descriptor accepted");
			if (io.sg_cnt > RTRS_SRV_MAX_DESC ||
			    (uint64_t)io.off + sizeof(struct rtrs_msg_rdma_read) +
					    (uint64_t)io.sg_cnt * sizeof(struct rtrs_sg_desc) > c->chunk)
				BUG("READ: %u descriptors at %u of a %u-byte chunk", io.sg_cnt, io.off,
				    c->chunk);
			/* op_answer writes desc[i].len bytes each, from the chunk's start on */
			for (unsigned i = 0; i < io.sg_cnt; i++)
				sum += io.desc[i].len;
			if (sum != io.datalen || sum > c->chunk - c->max_hdr)
				BUG("READ of %llu bytes (datalen %u) accepted, max IO %u",
				    (unsigned long long)sum, io.datalen, c->chunk - c->max_hdr);
			if (memcmp(io.desc, buf + lo + io.off + sizeof(struct rtrs_msg_rdma_read),
				   io.sg_cnt * sizeof(struct rtrs_sg_desc)))
				BUG("READ: descriptors are not the chunk's");
		} else {
			BUG("IO of direction %d accepted", io.dir);
		}
		if (lo + io.off - io.usr_len < lo || lo + io.off > hi)
			BUG("user header outside its chunk");
		/* the user header as the server copies it (op->usr), exactly its size */
		char *usr = malloc(io.usr_len ? io.usr_len : 1);
		if (!usr)
			abort();
		memcpy(usr, buf + lo + io.off - io.usr_len, io.usr_len);
		rnbd_chain(&io, usr, nsec);
		free(usr);
	}
	memset(buf + at, 0, nb);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (n < 1)
		return 0;
	switch (d[0] % 3) {
	case 0:
		con_req(d + 1, n - 1);
		break;
	case 1:
		info_req(d + 1, n - 1);
		break;
	default:
		io_req(d + 1, n - 1);
		break;
	}
	return 0;
}
