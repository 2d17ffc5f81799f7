/* SPDX-License-Identifier: MIT */
/*
 * A hostile client, many times over: random and mutated RNBD messages (types, directions,
 * lengths, device ids, ops, flags, sectors and sizes near every boundary) into the server's
 * session logic. Every message gets exactly one answer; nothing crashes (ASan build too); the
 * file changes only where a WRITE the server accepted said, which a model of the disk checks.
 * A second device, opened read-only, must not change at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sr_test.h"
#include "rnbd-srv.h"

#define DISK (1u << 20)
#define NSECT (DISK / 512)

static char dir[256], rw_path[300], ro_path[300];
static uint8_t model[DISK];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int answers, last_err;

static void on_done(void *priv, int err)
{
	pthread_mutex_lock(&lock);
	answers++;
	last_err = err;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&lock);
}

static int send_msg(struct rnbd_srv_sess *s, int dir_, const void *usr, size_t usrlen, void *data,
		    size_t datalen)
{
	pthread_mutex_lock(&lock);
	int want = answers + 1;
	pthread_mutex_unlock(&lock);
	rnbd_srv_process(s, dir_, usr, usrlen, data, datalen, on_done, NULL);
	pthread_mutex_lock(&lock);
	while (answers < want)
		pthread_cond_wait(&cv, &lock);
	int e = last_err;
	CHECK_EQ(answers, want);	/* exactly one answer */
	pthread_mutex_unlock(&lock);
	return e;
}

static uint32_t seed = 12345;
static uint32_t rnd(void) { seed = seed * 1664525 + 1013904223; return seed >> 8 ^ seed << 13; }

static uint64_t pick_sector(void)
{
	static const uint64_t edge[] = { 0, 1, NSECT - 8, NSECT - 1, NSECT, NSECT + 1,
					 UINT64_MAX, UINT64_MAX - 7, 1ull << 55, 0x7fffffffffffffffull };
	return rnd() & 1 ? edge[rnd() % 10] : rnd() % (NSECT + 16);
}

static uint32_t pick_size(void)
{
	static const uint32_t edge[] = { 0, 1, 511, 512, 513, 4096, DISK, DISK + 512, 0xfffffe00u,
					 0xffffffffu };
	return rnd() & 1 ? edge[rnd() % 10] : (rnd() % 64) * 512;
}

static bool file_is(const char *path, const uint8_t *want)
{
	static uint8_t buf[DISK];
	int fd = open(path, O_RDONLY);
	struct stat sb;
	/* the same bytes, and not one more (a write past the end would grow the file) */
	bool ok = fd >= 0 && fstat(fd, &sb) == 0 && sb.st_size == DISK &&
		  pread(fd, buf, DISK, 0) == DISK && !memcmp(buf, want, DISK);
	if (fd >= 0)
		close(fd);
	return ok;
}

static void make(const char *path, uint8_t *content)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	for (unsigned i = 0; i < DISK; i++)
		content[i] = rnd();
	REQUIRE(fd >= 0 && write(fd, content, DISK) == DISK);
	close(fd);
}

int main(void)
{
	static uint8_t ro_content[DISK], data[DISK + 4096];
	struct rnbd_store *st;
	struct rnbd_srv_sess *s;
	struct rnbd_msg_open om;
	struct rnbd_msg_open_rsp rsp;
	int iters = SR_SANITIZED ? 3000 : 20000, accepted_writes = 0, refused = 0;

	sr_test_timeout(110);
	snprintf(dir, sizeof(dir), "%s/rnbd-hostile.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	REQUIRE(mkdtemp(dir));
	snprintf(rw_path, sizeof(rw_path), "%s/rw", dir);
	snprintf(ro_path, sizeof(ro_path), "%s/ro", dir);
	make(rw_path, model);
	make(ro_path, ro_content);
	struct rnbd_store_opts o = { .search_path = dir, .max_io_bytes = 128 * 1024 };
	int rc = rnbd_store_new(&o, &st);
	if (rc == -ENOSYS || rc == -EPERM)
		return 77;
	REQUIRE(rc == 0);
	REQUIRE(rnbd_srv_sess_new(st, "hostile", &s) == 0);
	rnbd_enc_open(&om, RNBD_ACCESS_RW, "rw");
	REQUIRE(send_msg(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)) == 0);
	uint32_t rw_id = le32toh(rsp.device_id);
	rnbd_enc_open(&om, RNBD_ACCESS_RO, "ro");
	REQUIRE(send_msg(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)) == 0);
	uint32_t ro_id = le32toh(rsp.device_id);

	for (int i = 0; i < iters; i++) {
		uint8_t usr[300];
		size_t usrlen;
		int dir_ = rnd() % 8 ? (int)(rnd() & 1) : (int)(rnd() % 5);
		size_t datalen;
		struct rnbd_msg_io io;
		uint32_t kind = rnd() % 10;

		if (kind < 7) {	/* an IO message with fields near their edges */
			uint32_t id = rnd() % 4 ? (rnd() & 1 ? rw_id : ro_id) : rnd() % 5 + (rnd() & 1) * 0xfffffff0u;
			uint32_t op = rnd() % 4 ? rnd() % 6 : rnd() % 256;
			uint32_t flags = rnd() % 4 ? (rnd() % 16) << RNBD_OP_BITS : rnd() & ~0xffu;
			uint64_t sector = pick_sector();
			uint32_t size = pick_size();
			rnbd_enc_io(&io, id, sector, op | flags, size, rnd());
			memcpy(usr, &io, sizeof(io));
			usrlen = rnd() % 6 ? sizeof(io) : rnd() % 40;
			datalen = rnd() % 3 ? size : pick_size();
			if (datalen > DISK + 4096)
				datalen = rnd() % (DISK + 4096);
			if (rnd() & 1) {	/* nearly right: the direction and length that fit the op */
				op = rnd() % 6;
				dir_ = op == RNBD_OP_READ ? RNBD_DIR_READ : RNBD_DIR_WRITE;
				size = op == RNBD_OP_FLUSH ? 0 : (rnd() % 64 + 1) * 512;
				sector = rnd() % (NSECT + 8);
				datalen = op <= RNBD_OP_WRITE ? size : 0;
				flags &= RNBD_F_ALL;
				rnbd_enc_io(&io, id, sector, op | flags, size, 0);
				memcpy(usr, &io, sizeof(io));
			}
		} else {	/* anything: random bytes with a plausible type */
			usrlen = rnd() % sizeof(usr);
			for (size_t k = 0; k < usrlen; k++)
				usr[k] = rnd();
			if (usrlen >= 2 && rnd() & 1) {
				usr[0] = rnd() % 8;
				usr[1] = 0;
			}
			if (usrlen >= 2 && usr[0] == RNBD_MSG_OPEN && rnd() % 4)
				usr[1] = 1;	/* no random OPENs of random names, mostly */
			datalen = rnd() % 128;
		}
		for (size_t k = 0; k < datalen; k++)
			data[k] = rnd();
		int e = send_msg(s, dir_, usr, usrlen, data, datalen);
		/* what the server accepted as a write to the RW device goes into the model */
		struct rnbd_req r;
		if (e == 0 && rnbd_parse(dir_, usr, usrlen, datalen, &r) == 0 && r.type == RNBD_MSG_IO &&
		    r.device_id == rw_id) {
			uint64_t off = r.sector * 512;
			if (r.op == RNBD_OP_WRITE) {
				memcpy(model + off, data, r.bi_size);
				accepted_writes++;
			} else if (r.op == RNBD_OP_WRITE_ZEROES || r.op == RNBD_OP_DISCARD) {
				memset(model + off, 0, r.bi_size);	/* discard punches: zeroes here */
			}
		}
		if (e == 0 && usrlen >= 2 && usr[0] == RNBD_MSG_CLOSE && usr[1] == 0) {
			/* a random CLOSE that hit one of our ids: open it again */
			rnbd_enc_open(&om, RNBD_ACCESS_RW, "rw");
			REQUIRE(send_msg(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)) == 0);
			rw_id = le32toh(rsp.device_id);
			rnbd_enc_open(&om, RNBD_ACCESS_RO, "ro");
			REQUIRE(send_msg(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)) == 0);
			ro_id = le32toh(rsp.device_id);
		}
		refused += e != 0;
	}
	CHECK(file_is(rw_path, model));
	CHECK(file_is(ro_path, ro_content));
	CHECK(accepted_writes > 0);
	CHECK(refused > iters / 2);
	struct rnbd_srv_counters c;
	rnbd_srv_sess_counters(s, &c);
	fprintf(stderr, "%d messages: %d refused, %d writes accepted; bad_msgs %llu bad_dev_id %llu\n",
		iters, refused, accepted_writes, (unsigned long long)c.bad_msgs,
		(unsigned long long)c.bad_dev_id);
	rnbd_srv_sess_free(s);
	rnbd_store_free(st);
	unlink(rw_path);
	unlink(ro_path);
	rmdir(dir);
	return sr_test_done("test_rnbd_hostile");
}
