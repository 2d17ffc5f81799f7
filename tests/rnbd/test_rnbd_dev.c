/* SPDX-License-Identifier: MIT */
/*
 * The RNBD server without a network: the device layer (search path and %SESSNAME%, staying
 * inside it, access rules, IO through io_uring with and without O_DIRECT, FUA/FLUSH, DISCARD,
 * WRITE_ZEROES, refusals that change nothing) and the session logic fed raw messages, hostile
 * ones included (bad device id, bad op, out of range, closed device).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sr_test.h"
#include "rnbd-dev.h"
#include "rnbd-srv.h"

#define DISK_SIZE (4u << 20)

static char dir[256];
static char disk_path[300];

/* ---- waiting for answers ---- */
struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int pending;
	int errs[256];
	int nerrs;
};

static struct waiter W = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER };

static void on_done(void *priv, int err)
{
	pthread_mutex_lock(&W.lock);
	intptr_t slot = (intptr_t)priv;
	if (slot >= 0 && slot < 256)
		W.errs[slot] = err;
	W.pending--;
	W.nerrs += err != 0;
	pthread_cond_broadcast(&W.cv);
	pthread_mutex_unlock(&W.lock);
}

static void wait_all(void)
{
	pthread_mutex_lock(&W.lock);
	while (W.pending > 0)
		pthread_cond_wait(&W.cv, &W.lock);
	pthread_mutex_unlock(&W.lock);
}

static void expect(int n)
{
	pthread_mutex_lock(&W.lock);
	W.pending += n;
	W.nerrs = 0;
	pthread_mutex_unlock(&W.lock);
}

static int submit1(struct rnbd_handle *h, uint32_t op, uint32_t flags, uint64_t sector,
		   uint32_t size, void *data)
{
	struct rnbd_req r = { .type = RNBD_MSG_IO, .op = op, .flags = flags, .sector = sector,
			      .bi_size = size };
	expect(1);
	rnbd_handle_submit(h, &r, data, on_done, (void *)0);
	wait_all();
	return W.errs[0];
}

static int srv1(struct rnbd_srv_sess *s, int dir_, const void *usr, size_t usrlen, void *data,
		size_t datalen)
{
	expect(1);
	rnbd_srv_process(s, dir_, usr, usrlen, data, datalen, on_done, (void *)0);
	wait_all();
	return W.errs[0];
}

/* ---- the file behind ---- */
static uint64_t file_sum(const char *path)
{
	static uint8_t buf[DISK_SIZE];
	int fd = open(path, O_RDONLY);
	ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf), 0) : -1;
	uint64_t h = 1469598103934665603ull;

	if (fd >= 0)
		close(fd);
	for (ssize_t i = 0; i < n; i++)
		h = (h ^ buf[i]) * 1099511628211ull;
	return h ^ (uint64_t)n;
}

static void file_read(const char *path, uint64_t off, void *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	REQUIRE(fd >= 0);
	REQUIRE(pread(fd, buf, len, off) == (ssize_t)len);
	close(fd);
}

static void make_file(const char *path, size_t size, uint8_t fill)
{
	static uint8_t buf[DISK_SIZE];
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	REQUIRE(fd >= 0);
	memset(buf, fill, size);
	REQUIRE(write(fd, buf, size) == (ssize_t)size);
	close(fd);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 9));
}

/* ---- tests ---- */
static void paths(struct rnbd_store *st)
{
	struct rnbd_handle *h;
	char p[400];

	CHECK_EQ(rnbd_store_open(st, "s", "disk", RNBD_ACCESS_RO, &h), 0);
	rnbd_handle_close(h);
	CHECK_EQ(rnbd_store_open(st, "s", "nothere", RNBD_ACCESS_RO, &h), -ENOENT);
	CHECK(h == NULL);
	CHECK_EQ(rnbd_store_open(st, "s", "../disk", RNBD_ACCESS_RO, &h), -EINVAL);
	CHECK_EQ(rnbd_store_open(st, "s", "/etc/passwd", RNBD_ACCESS_RO, &h), -EINVAL);
	/* a symlink out of the search path is not followed out of it */
	snprintf(p, sizeof(p), "%s/escape", dir);
	REQUIRE(symlink("/etc/passwd", p) == 0);
	CHECK(rnbd_store_open(st, "s", "escape", RNBD_ACCESS_RO, &h) < 0);
	snprintf(p, sizeof(p), "%s/escape2", dir);
	REQUIRE(symlink("../../../../../../../../etc/passwd", p) == 0);
	CHECK(rnbd_store_open(st, "s", "escape2", RNBD_ACCESS_RO, &h) < 0);
	/* one inside is */
	snprintf(p, sizeof(p), "%s/inside", dir);
	REQUIRE(symlink("disk", p) == 0);
	CHECK_EQ(rnbd_store_open(st, "s", "inside", RNBD_ACCESS_RO, &h), 0);
	rnbd_handle_close(h);
	/* a directory, a fifo: not devices */
	snprintf(p, sizeof(p), "%s/sub", dir);
	REQUIRE(mkdir(p, 0755) == 0);
	CHECK_EQ(rnbd_store_open(st, "s", "sub", RNBD_ACCESS_RO, &h), -EINVAL);
	snprintf(p, sizeof(p), "%s/fifo", dir);
	REQUIRE(mkfifo(p, 0644) == 0);
	CHECK_EQ(rnbd_store_open(st, "s", "fifo", RNBD_ACCESS_RO, &h), -EINVAL);
	/* a file in a subdirectory */
	snprintf(p, sizeof(p), "%s/sub/d2", dir);
	make_file(p, 8192, 0);
	CHECK_EQ(rnbd_store_open(st, "s", "sub/d2", RNBD_ACCESS_RW, &h), 0);
	CHECK_EQ(rnbd_handle_nsectors(h), 16);
	rnbd_handle_close(h);
}

static void sessname_path(void)
{
	struct rnbd_store *st;
	struct rnbd_handle *h;
	char sp[400], p[400];

	snprintf(sp, sizeof(sp), "%s/%%SESSNAME%%", dir);
	struct rnbd_store_opts o = { .search_path = sp };
	REQUIRE(rnbd_store_new(&o, &st) == 0);
	snprintf(p, sizeof(p), "%s/alpha", dir);
	REQUIRE(mkdir(p, 0755) == 0);
	snprintf(p, sizeof(p), "%s/alpha/vol", dir);
	make_file(p, 4096, 1);
	CHECK_EQ(rnbd_store_open(st, "alpha", "vol", RNBD_ACCESS_RO, &h), 0);
	CHECK(h && strstr(rnbd_handle_path(h), "/alpha/vol"));
	rnbd_handle_close(h);
	/* another session does not see alpha's devices */
	CHECK_EQ(rnbd_store_open(st, "beta", "vol", RNBD_ACCESS_RO, &h), -ENOENT);
	/* session names that would leave the search path */
	CHECK_EQ(rnbd_store_open(st, "..", "disk", RNBD_ACCESS_RO, &h), -EINVAL);
	CHECK_EQ(rnbd_store_open(st, "a/b", "disk", RNBD_ACCESS_RO, &h), -EINVAL);
	CHECK_EQ(rnbd_store_open(st, "", "disk", RNBD_ACCESS_RO, &h), -EINVAL);
	CHECK_EQ(rnbd_store_open(st, ".", "disk", RNBD_ACCESS_RO, &h), -EINVAL);
	rnbd_store_free(st);
}

static void access_rules(struct rnbd_store *st)
{
	struct rnbd_handle *ro1, *ro2, *rw, *rw2, *mig, *mig2, *h;
	char p[400];

	CHECK_EQ(rnbd_store_open(st, "s", "disk", RNBD_ACCESS_RO, &ro1), 0);
	CHECK_EQ(rnbd_store_open(st, "t", "disk", RNBD_ACCESS_RO, &ro2), 0);
	CHECK_EQ(rnbd_store_open(st, "s", "disk", RNBD_ACCESS_RW, &rw), 0);
	CHECK_EQ(rnbd_store_open(st, "t", "disk", RNBD_ACCESS_RW, &rw2), -EPERM);
	CHECK(rw2 == NULL);
	/* the same file by another name is the same device */
	snprintf(p, sizeof(p), "%s/hardlink", dir);
	REQUIRE(link(disk_path, p) == 0);
	CHECK_EQ(rnbd_store_open(st, "t", "hardlink", RNBD_ACCESS_RW, &h), -EPERM);
	CHECK_EQ(rnbd_store_open(st, "t", "inside", RNBD_ACCESS_RW, &h), -EPERM);
	/* migration: a second writer, never a third */
	CHECK_EQ(rnbd_store_open(st, "t", "disk", RNBD_ACCESS_MIGRATION, &mig), 0);
	CHECK_EQ(rnbd_store_open(st, "u", "disk", RNBD_ACCESS_MIGRATION, &mig2), -EPERM);
	CHECK_EQ(rnbd_store_open(st, "u", "disk", RNBD_ACCESS_RW, &h), -EPERM);
	CHECK_EQ(rnbd_store_open(st, "u", "disk", RNBD_ACCESS_RO, &h), 0);	/* RO always */
	rnbd_handle_close(h);
	CHECK_EQ(rnbd_store_open(st, "u", "disk", 3, &h), -EINVAL);
	/* the first writer leaves: the migration target is the only writer, RW still refused */
	rnbd_handle_close(rw);
	CHECK_EQ(rnbd_store_open(st, "s", "disk", RNBD_ACCESS_RW, &rw), -EPERM);
	rnbd_handle_close(mig);
	CHECK_EQ(rnbd_store_open(st, "s", "disk", RNBD_ACCESS_RW, &rw), 0);
	rnbd_handle_close(rw);
	rnbd_handle_close(ro1);
	rnbd_handle_close(ro2);
	/* another file is another device */
	snprintf(p, sizeof(p), "%s/other", dir);
	make_file(p, 4096, 0);
	CHECK_EQ(rnbd_store_open(st, "s", "disk", RNBD_ACCESS_RW, &rw), 0);
	CHECK_EQ(rnbd_store_open(st, "s", "other", RNBD_ACCESS_RW, &rw2), 0);
	rnbd_handle_close(rw2);
	rnbd_handle_close(rw);
}

static void io_paths(struct rnbd_store *st, bool direct_expected, bool sync_expected)
{
	struct rnbd_handle *h, *ro;
	struct rnbd_dev_stats s;
	uint8_t *buf, *back, chk[8192];
	uint64_t sum;

	REQUIRE(posix_memalign((void **)&buf, 4096, 1 << 20) == 0);
	REQUIRE(posix_memalign((void **)&back, 4096, (1 << 20) + 512) == 0);
	REQUIRE(rnbd_store_open(st, "s", "disk", RNBD_ACCESS_RW, &h) == 0);
	CHECK_EQ(rnbd_handle_nsectors(h), DISK_SIZE / 512);

	/* aligned WRITE + READ */
	fill(buf, 65536, 1);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, 0, 128, 65536, buf), 0);
	memset(back, 0, 65536);
	CHECK_EQ(submit1(h, RNBD_OP_READ, 0, 128, 65536, back), 0);
	CHECK(!memcmp(buf, back, 65536));
	file_read(disk_path, 128 * 512, chk, 8192);
	CHECK(!memcmp(chk, buf, 8192));
	/* unaligned buffer and 512-byte granularity: the buffered path */
	fill(back + 1, 1536, 2);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, RNBD_F_FUA, 3, 1536, back + 1), 0);
	file_read(disk_path, 3 * 512, chk, 1536);
	CHECK(!memcmp(chk, back + 1, 1536));
	CHECK_EQ(submit1(h, RNBD_OP_READ, 0, 3, 1536, buf + 3), 0);
	CHECK(!memcmp(buf + 3, back + 1, 1536));
	rnbd_handle_stats(h, &s);
	CHECK(s.buffered_ios >= 2);
	if (direct_expected)
		CHECK(s.direct_ios >= 2);
	else
		CHECK_EQ(s.direct_ios, 0);
	if (sync_expected)	/* every READ and WRITE so far */
		CHECK_EQ(s.sync_ios, s.reads + s.writes);
	else
		CHECK_EQ(s.sync_ios, 0);
	/* PREFLUSH + FUA write, FLUSH, empty PREFLUSH write */
	fill(buf, 4096, 3);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, RNBD_F_PREFLUSH | RNBD_F_FUA | RNBD_F_SYNC, 4096, 4096, buf), 0);
	file_read(disk_path, 4096ull * 512, chk, 4096);
	CHECK(!memcmp(chk, buf, 4096));
	CHECK_EQ(submit1(h, RNBD_OP_FLUSH, 0, 0, 0, NULL), 0);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, RNBD_F_PREFLUSH, 0, 0, NULL), 0);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, RNBD_F_FUA, 0, 0, NULL), 0);
	/* WRITE_ZEROES and DISCARD (punched holes read back as zeroes on this file system) */
	fill(buf, 65536, 4);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, 0, 1024, 65536, buf), 0);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE_ZEROES, RNBD_F_FUA, 1024, 16384, NULL), 0);
	CHECK_EQ(submit1(h, RNBD_OP_READ, 0, 1024, 65536, back), 0);
	static const uint8_t zero[65536];
	CHECK(!memcmp(back, zero, 16384));
	CHECK(!memcmp(back + 16384, buf + 16384, 65536 - 16384));
	CHECK_EQ(submit1(h, RNBD_OP_DISCARD, 0, 1024 + 64, 8192, NULL), 0);
	CHECK_EQ(submit1(h, RNBD_OP_READ, 0, 1024, 65536, back), 0);
	CHECK(!memcmp(back + 32768, zero, 8192) || !memcmp(back + 32768, buf + 32768, 8192));
	CHECK(!memcmp(back + 40960, buf + 40960, 65536 - 40960));

	/* refusals change nothing */
	sum = file_sum(disk_path);
	fill(buf, 4096, 5);
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, 0, DISK_SIZE / 512, 512, buf), -EINVAL);	/* at the end */
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, 0, DISK_SIZE / 512 - 1, 1024, buf), -EINVAL);	/* across it */
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, 0, UINT64_MAX, 512, buf), -EINVAL);	/* wraps */
	CHECK_EQ(submit1(h, RNBD_OP_WRITE_ZEROES, 0, DISK_SIZE / 512 - 8, 8192, NULL), -EINVAL);
	CHECK_EQ(submit1(h, RNBD_OP_DISCARD, 0, DISK_SIZE / 512, 512, NULL), -EINVAL);
	CHECK_EQ(submit1(h, RNBD_OP_READ, 0, DISK_SIZE / 512, 512, back), -EINVAL);
	CHECK_EQ(submit1(h, RNBD_OP_SECURE_ERASE, 0, 0, 4096, NULL), -EOPNOTSUPP);
	CHECK_EQ(submit1(h, 77, 0, 0, 512, buf), -EOPNOTSUPP);
	CHECK_EQ(file_sum(disk_path), sum);
	/* the last sector is still writable */
	CHECK_EQ(submit1(h, RNBD_OP_WRITE, 0, DISK_SIZE / 512 - 1, 512, buf), 0);
	sum = file_sum(disk_path);

	/* an RO open reads, and refuses every kind of write */
	REQUIRE(rnbd_store_open(st, "t", "disk", RNBD_ACCESS_RO, &ro) == 0);
	CHECK_EQ(submit1(ro, RNBD_OP_READ, 0, 0, 4096, back), 0);
	CHECK_EQ(submit1(ro, RNBD_OP_WRITE, 0, 0, 4096, buf), -EPERM);
	CHECK_EQ(submit1(ro, RNBD_OP_WRITE_ZEROES, 0, 0, 4096, NULL), -EPERM);
	CHECK_EQ(submit1(ro, RNBD_OP_DISCARD, 0, 0, 4096, NULL), -EPERM);
	CHECK_EQ(submit1(ro, RNBD_OP_FLUSH, 0, 0, 0, NULL), 0);
	CHECK_EQ(file_sum(disk_path), sum);
	rnbd_handle_stats(ro, &s);
	CHECK(s.refused >= 3 + 8);	/* per device: these and the refusals above */
	rnbd_handle_close(ro);

	/* many at once: 64 writes of 16 KiB in flight, then read back */
	uint8_t *big;
	REQUIRE(posix_memalign((void **)&big, 4096, 64 * 16384) == 0);
	fill(big, 64 * 16384, 9);
	expect(64);
	for (int i = 0; i < 64; i++) {
		struct rnbd_req r = { .type = RNBD_MSG_IO, .op = RNBD_OP_WRITE,
				      .sector = 2048 + i * 32, .bi_size = 16384 };
		rnbd_handle_submit(h, &r, big + i * 16384, on_done, (void *)(intptr_t)i);
	}
	wait_all();
	CHECK_EQ(W.nerrs, 0);
	uint8_t *bb = malloc(64 * 16384);
	file_read(disk_path, 2048 * 512, bb, 64 * 16384);
	CHECK(!memcmp(bb, big, 64 * 16384));
	free(bb);
	free(big);
	rnbd_handle_close(h);
	free(buf);
	free(back);
}

static void session_logic(struct rnbd_store *st)
{
	struct rnbd_srv_sess *s, *s2;
	struct rnbd_msg_sess_info si;
	struct rnbd_msg_sess_info_rsp sir;
	struct rnbd_msg_open om;
	struct rnbd_msg_open_rsp rsp;
	struct rnbd_msg_close cm;
	struct rnbd_msg_io io;
	struct rnbd_dev_attrs a;
	struct rnbd_srv_counters c;
	uint8_t *buf;
	uint64_t sum;

	REQUIRE(posix_memalign((void **)&buf, 4096, 65536) == 0);
	REQUIRE(rnbd_srv_sess_new(st, "clientA", &s) == 0);
	REQUIRE(rnbd_srv_sess_new(st, "clientB", &s2) == 0);

	rnbd_enc_sess_info(&si, 2);
	CHECK_EQ(srv1(s, RNBD_DIR_READ, &si, sizeof(si), &sir, sizeof(sir)), 0);
	uint8_t ver = 0;
	CHECK_EQ(rnbd_dec_sess_info_rsp(&sir, sizeof(sir), &ver), 0);
	CHECK_EQ(ver, 2);
	rnbd_enc_sess_info(&si, 7);	/* a newer client: the server's version */
	CHECK_EQ(srv1(s, RNBD_DIR_READ, &si, sizeof(si), &sir, sizeof(sir)), 0);
	CHECK_EQ(sir.ver, 2);

	rnbd_enc_open(&om, RNBD_ACCESS_RW, "disk");
	CHECK_EQ(srv1(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), 0);
	CHECK_EQ(rnbd_dec_open_rsp(&rsp, sizeof(rsp), &a), 0);
	CHECK_EQ(a.nsectors, DISK_SIZE / 512);
	CHECK_EQ(a.logical_block_size, 512);
	CHECK(a.max_hw_sectors >= 8);
	CHECK(a.cache_policy & RNBD_FUA);
	uint32_t id = a.device_id;
	/* the same name again: the same id (the kernel's behaviour) */
	CHECK_EQ(srv1(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), 0);
	CHECK_EQ(le32toh(rsp.device_id), id);
	/* another session: a second RW open is refused, migration allowed, RO allowed */
	CHECK_EQ(srv1(s2, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), -EPERM);
	rnbd_enc_open(&om, RNBD_ACCESS_MIGRATION, "disk");
	CHECK_EQ(srv1(s2, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), 0);
	uint32_t id2 = le32toh(rsp.device_id);
	rnbd_enc_close(&cm, id2);
	CHECK_EQ(srv1(s2, RNBD_DIR_WRITE, &cm, sizeof(cm), NULL, 0), 0);
	rnbd_enc_open(&om, RNBD_ACCESS_RO, "disk");
	CHECK_EQ(srv1(s2, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), 0);
	uint32_t ro_id = le32toh(rsp.device_id);
	rnbd_enc_open(&om, RNBD_ACCESS_RW, "../disk");
	CHECK_EQ(srv1(s2, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), -EINVAL);
	rnbd_enc_open(&om, RNBD_ACCESS_RW, "missing");
	CHECK_EQ(srv1(s2, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), -ENOENT);

	/* good IO */
	fill(buf, 8192, 11);
	rnbd_enc_io(&io, id, 64, RNBD_OP_WRITE | RNBD_F_FUA, 8192, 0);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), 0);
	memset(buf, 0, 8192);
	rnbd_enc_io(&io, id, 64, RNBD_OP_READ, 8192, 0);
	CHECK_EQ(srv1(s, RNBD_DIR_READ, &io, sizeof(io), buf, 8192), 0);
	uint8_t want[8192];
	fill(want, 8192, 11);
	CHECK(!memcmp(buf, want, 8192));

	/* hostile messages: each answered with an error, nothing on disk changes */
	sum = file_sum(disk_path);
	fill(buf, 8192, 12);
	rnbd_enc_io(&io, id + 1, 64, RNBD_OP_WRITE, 8192, 0);		/* an id never opened */
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -ENOTCONN);
	rnbd_enc_io(&io, 0xffffffff, 64, RNBD_OP_WRITE, 8192, 0);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -ENOTCONN);
	rnbd_enc_io(&io, id, 64, RNBD_OP_WRITE, 8192, 0);		/* s's id, from s2 */
	if (id != ro_id)
		CHECK_EQ(srv1(s2, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -ENOTCONN);
	rnbd_enc_io(&io, ro_id, 64, RNBD_OP_WRITE, 8192, 0);		/* through the RO open */
	CHECK_EQ(srv1(s2, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -EPERM);
	rnbd_enc_io(&io, id, 64, 0x7f, 8192, 0);			/* unknown op */
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -EOPNOTSUPP);
	rnbd_enc_io(&io, id, 64, RNBD_OP_WRITE | (1u << 20), 8192, 0);	/* unknown flag */
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -EINVAL);
	rnbd_enc_io(&io, id, DISK_SIZE / 512 - 8, RNBD_OP_WRITE, 8192, 0);	/* past the end */
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -EINVAL);
	rnbd_enc_io(&io, id, 64, RNBD_OP_WRITE, 16384, 0);		/* says more than it carries */
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -EINVAL);
	rnbd_enc_io(&io, id, 64, RNBD_OP_SECURE_ERASE, 8192, 0);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), NULL, 0), -EOPNOTSUPP);
	uint8_t junk[64];
	memset(junk, 0xa5, sizeof(junk));
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, junk, sizeof(junk), buf, 8192), -EINVAL);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, junk, 2, buf, 8192), -EINVAL);
	rnbd_enc_close(&cm, 999);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &cm, sizeof(cm), NULL, 0), -ENOTCONN);
	CHECK_EQ(file_sum(disk_path), sum);

	/* closed: the id is dead */
	rnbd_enc_close(&cm, id);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &cm, sizeof(cm), NULL, 0), 0);
	rnbd_enc_io(&io, id, 64, RNBD_OP_WRITE, 8192, 0);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &io, sizeof(io), buf, 8192), -ENOTCONN);
	CHECK_EQ(srv1(s, RNBD_DIR_WRITE, &cm, sizeof(cm), NULL, 0), -ENOTCONN);
	CHECK_EQ(file_sum(disk_path), sum);

	rnbd_srv_sess_counters(s, &c);
	CHECK(c.bad_msgs >= 5);
	CHECK(c.bad_dev_id >= 5);
	CHECK_EQ(c.opens, 2);
	CHECK_EQ(c.closes, 1);

	/* a session freed with a device open releases it: RW possible again */
	rnbd_enc_open(&om, RNBD_ACCESS_RW, "disk");
	CHECK_EQ(srv1(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), 0);
	rnbd_srv_sess_free(s);
	rnbd_srv_sess_free(s2);
	REQUIRE(rnbd_srv_sess_new(st, "clientC", &s) == 0);
	CHECK_EQ(srv1(s, RNBD_DIR_READ, &om, sizeof(om), &rsp, sizeof(rsp)), 0);
	rnbd_srv_sess_free(s);
	free(buf);
}

int main(void)
{
	struct rnbd_store *st;
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	sr_test_timeout(100);
	snprintf(dir, sizeof(dir), "%s/rnbd-dev.XXXXXX", tmp);
	REQUIRE(mkdtemp(dir));
	snprintf(disk_path, sizeof(disk_path), "%s/disk", dir);
	make_file(disk_path, DISK_SIZE, 0x5a);

	/* three times: O_DIRECT where the file system allows, then never (both through io_uring
	 * unless TMPDIR is in memory), then never and synchronous (the path of a device in
	 * memory, rnbd-dev.h) */
	for (int pass = 0; pass < 3; pass++) {
		int nd = pass > 0;
		struct rnbd_store_opts o = { .search_path = dir, .no_direct = nd,
					     .sync_io = pass == 2 ? RNBD_SYNC_IO_ALWAYS :
								    RNBD_SYNC_IO_NEVER };
		int rc = rnbd_store_new(&o, &st);
		if (rc == -ENOSYS || rc == -EPERM) {
			fprintf(stderr, "io_uring unavailable here (%d)\n", rc);
			return 77;
		}
		REQUIRE(rc == 0);
		if (nd == 0) {
			paths(st);
			access_rules(st);
		}
		/* does this file system take O_DIRECT at all? */
		char probe[400];
		snprintf(probe, sizeof(probe), "%s/disk", dir);
		int dfd = open(probe, O_RDONLY | O_DIRECT);
		if (dfd >= 0)
			close(dfd);
		io_paths(st, !nd && dfd >= 0, pass == 2);
		session_logic(st);
		rnbd_store_free(st);
	}
	sessname_path();
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return sr_test_done("test_rnbd_dev");
}
