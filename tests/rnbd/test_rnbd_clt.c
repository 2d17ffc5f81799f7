/* SPDX-License-Identifier: MIT */
/*
 * The RNBD client's request logic against a real server's session logic and device layer in
 * this process (the local transport; no network): several clients of one server (access rules
 * across sessions), requests split at the device's limits, byte-granular reads and writes
 * (read-modify-write at the edges), zero and trim, errors coming back, hostile raw messages
 * from a client changing nothing on disk.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sr_test.h"
#include "rnbd-clt.h"
#include "rnbd-dev.h"

#define DISK (8u << 20)

static char dir[256], disk_path[300];
static uint8_t model[DISK];	/* what the disk must hold */

static struct rnbd_clt *client(struct rnbd_store *st, const char *sess)
{
	const struct rnbd_xport_ops *ops;
	void *ctx;
	struct rnbd_clt *c;

	REQUIRE(rnbd_local_new_on(st, sess, &ops, &ctx) == 0);
	REQUIRE(rnbd_clt_new(ops, ctx, &c) == 0);
	CHECK_EQ(c->ver, RNBD_PROTO_VER_MAJOR);
	return c;
}

static bool disk_is_model(void)
{
	static uint8_t buf[DISK];
	int fd = open(disk_path, O_RDONLY);
	ssize_t n = fd >= 0 ? pread(fd, buf, DISK, 0) : -1;
	if (fd >= 0)
		close(fd);
	return n == DISK && !memcmp(buf, model, DISK);
}

static void rnd(uint8_t *b, size_t n, uint32_t *s)
{
	for (size_t i = 0; i < n; i++) {
		*s = *s * 1103515245 + 12345;
		b[i] = *s >> 16;
	}
}

/* Threads sharing one client, each on its own region: writes and reads in parallel, every
 * read checked (the transport's answers come from the server's engine thread). */
struct worker {
	struct rnbd_clt *c;
	uint64_t base;
	uint32_t seed;
	int errors;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	static __thread uint8_t wbuf[131072], rbuf[131072];
	uint8_t *shadow = model + w->base;	/* this thread's region of the model */

	for (int i = 0; i < (SR_SANITIZED ? 100 : 400); i++) {
		uint32_t r, off, len;
		rnd((uint8_t *)&r, 4, &w->seed);
		off = (r % 256) * 512;
		len = ((r >> 8) % 256 + 1) * 512;
		if (off + len > (1u << 19))
			len = (1u << 19) - off;
		if (r & (1u << 31)) {
			rnd(wbuf, len, &w->seed);
			if (rnbd_clt_io(w->c, RNBD_OP_WRITE | (r & 1 ? RNBD_F_FUA : 0),
					w->base + off, len, wbuf))
				w->errors++;
			memcpy(shadow + off, wbuf, len);
		} else {
			if (rnbd_clt_io(w->c, RNBD_OP_READ, w->base + off, len, rbuf) ||
			    memcmp(rbuf, shadow + off, len))
				w->errors++;
		}
	}
	return NULL;
}

static void parallel(struct rnbd_clt *c)
{
	struct worker w[4];
	pthread_t t[4];

	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .c = c, .base = (4u << 20) + i * (1u << 19), .seed = 100 + i };
		REQUIRE(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(w[i].errors, 0);
	}
	CHECK(disk_is_model());
}

int main(void)
{
	struct rnbd_store *st;
	struct rnbd_clt *a, *b, *m, *r;
	uint32_t seed = 7;
	static uint8_t buf[2 << 20], back[2 << 20];

	sr_test_timeout(100);
	snprintf(dir, sizeof(dir), "%s/rnbd-clt.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	REQUIRE(mkdtemp(dir));
	snprintf(disk_path, sizeof(disk_path), "%s/vol", dir);
	int fd = open(disk_path, O_RDWR | O_CREAT, 0644);
	REQUIRE(fd >= 0 && ftruncate(fd, DISK) == 0);
	close(fd);
	struct rnbd_store_opts o = { .search_path = dir, .max_io_bytes = 64 * 1024 };
	int rc = rnbd_store_new(&o, &st);
	if (rc == -ENOSYS || rc == -EPERM)
		return 77;
	REQUIRE(rc == 0);

	/* access rules across sessions of one server */
	a = client(st, "A");
	b = client(st, "B");
	m = client(st, "M");
	r = client(st, "R");
	CHECK_EQ(rnbd_clt_open(a, "vol", RNBD_ACCESS_RW), 0);
	CHECK_EQ(rnbd_clt_open(b, "vol", RNBD_ACCESS_RW), -EPERM);
	CHECK_EQ(rnbd_clt_open(m, "vol", RNBD_ACCESS_MIGRATION), 0);
	CHECK_EQ(rnbd_clt_open(r, "vol", RNBD_ACCESS_RO), 0);
	CHECK_EQ(rnbd_clt_open(b, "../vol", RNBD_ACCESS_RO), -EINVAL);
	CHECK_EQ(rnbd_clt_open(b, "nope", RNBD_ACCESS_RO), -ENOENT);
	CHECK_EQ(a->a.nsectors, DISK / 512);
	CHECK_EQ(a->max_io, 64 * 1024);		/* the server's limit, below the transport's */
	CHECK_EQ(a->a.logical_block_size, 512);

	/* a 1 MiB write goes as 16 pieces of 64 KiB, reads back whole */
	rnd(buf, 1 << 20, &seed);
	CHECK_EQ(rnbd_clt_io(a, RNBD_OP_WRITE | RNBD_F_FUA, 1 << 20, 1 << 20, buf), 0);
	memcpy(model + (1 << 20), buf, 1 << 20);
	CHECK_EQ(rnbd_clt_io(a, RNBD_OP_READ, 1 << 20, 1 << 20, back), 0);
	CHECK(!memcmp(back, buf, 1 << 20));
	CHECK(disk_is_model());
	/* the migration writer and the reader see it */
	CHECK_EQ(rnbd_clt_io(r, RNBD_OP_READ, 1 << 20, 1 << 20, back), 0);
	CHECK(!memcmp(back, buf, 1 << 20));

	/* byte-granular writes and reads: read-modify-write at the edges */
	for (int i = 0; i < 200; i++) {
		uint32_t off, len;
		rnd((uint8_t *)&off, 4, &seed);
		rnd((uint8_t *)&len, 4, &seed);
		off %= DISK - 70000;
		len = len % 70000 + 1;
		rnd(buf, len, &seed);
		struct rnbd_clt *w = i & 1 ? a : m;
		CHECK_EQ(rnbd_clt_pwrite(w, buf, len, off, i % 3 ? 0 : RNBD_F_FUA), 0);
		memcpy(model + off, buf, len);
		uint32_t roff = off + (len > 3 ? len / 3 : 0), rlen = len - (roff - off);
		CHECK_EQ(rnbd_clt_pread(r, back, rlen, roff), 0);
		CHECK(!memcmp(back, model + roff, rlen));
	}
	CHECK(disk_is_model());
	/* zero (partial sectors at both edges), trim, flush */
	CHECK_EQ(rnbd_clt_zero(a, 300000, 4000001, RNBD_F_FUA), 0);
	memset(model + 4000001, 0, 300000);
	CHECK_EQ(rnbd_clt_zero(a, 100, 5000003, 0), 0);
	memset(model + 5000003, 0, 100);
	CHECK(disk_is_model());
	CHECK_EQ(rnbd_clt_trim(a, 8192 + 100, 4100000 - 50, 0), 0);	/* inside the zeroes */
	CHECK_EQ(rnbd_clt_io(a, RNBD_OP_FLUSH, 0, 0, NULL), 0);
	CHECK(disk_is_model());

	parallel(a);

	/* errors come back, nothing changes */
	CHECK_EQ(rnbd_clt_io(a, RNBD_OP_WRITE, DISK, 512, buf), -EINVAL);	/* past the end */
	CHECK_EQ(rnbd_clt_pwrite(a, buf, 100, DISK - 50, 0), -EINVAL);
	CHECK_EQ(rnbd_clt_io(r, RNBD_OP_WRITE, 0, 4096, buf), -EPERM);		/* RO open */
	/* an RO open's OPEN_RSP has no discard/zero limits: the client does not even send */
	CHECK_EQ(r->a.max_discard_sectors, 0);
	CHECK_EQ(rnbd_clt_io(r, RNBD_OP_WRITE_ZEROES, 0, 4096, NULL), -EOPNOTSUPP);
	CHECK_EQ(rnbd_clt_io(r, RNBD_OP_DISCARD, 0, 4096, NULL), -EOPNOTSUPP);
	CHECK_EQ(rnbd_clt_io(a, RNBD_OP_WRITE, 1, 512, buf), -EINVAL);		/* not a sector */
	CHECK(disk_is_model());

	/* hostile raw messages from a client */
	struct rnbd_msg_io io;
	rnbd_enc_io(&io, a->a.device_id + 100, 0, RNBD_OP_WRITE, 4096, 0);	/* bad device id */
	CHECK_EQ(rnbd_clt_raw(a, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096), -ENOTCONN);
	rnbd_enc_io(&io, a->a.device_id, 0, 0x42, 4096, 0);			/* bad op */
	CHECK_EQ(rnbd_clt_raw(a, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096), -EOPNOTSUPP);
	rnbd_enc_io(&io, a->a.device_id, DISK / 512 - 1, RNBD_OP_WRITE, 4096, 0);	/* past the end */
	CHECK_EQ(rnbd_clt_raw(a, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096), -EINVAL);
	rnbd_enc_io(&io, a->a.device_id, 0, RNBD_OP_WRITE, 8192, 0);		/* size != data */
	CHECK_EQ(rnbd_clt_raw(a, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096), -EINVAL);
	rnbd_enc_io(&io, r->a.device_id, 0, RNBD_OP_WRITE, 4096, 0);		/* R's id, RO */
	CHECK_EQ(rnbd_clt_raw(r, RNBD_DIR_WRITE, &io, sizeof(io), buf, 4096), -EPERM);
	rnbd_enc_io(&io, r->a.device_id, 0, RNBD_OP_WRITE_ZEROES, 4096, 0);
	CHECK_EQ(rnbd_clt_raw(r, RNBD_DIR_WRITE, &io, sizeof(io), NULL, 0), -EPERM);
	rnbd_enc_io(&io, r->a.device_id, 0, RNBD_OP_DISCARD, 4096, 0);
	CHECK_EQ(rnbd_clt_raw(r, RNBD_DIR_WRITE, &io, sizeof(io), NULL, 0), -EPERM);
	CHECK(disk_is_model());

	/* the RW writer leaves: RW is still refused while the migration writer is there */
	CHECK_EQ(rnbd_clt_close(a), 0);
	CHECK_EQ(rnbd_clt_io(a, RNBD_OP_READ, 0, 512, back), -ENOTCONN);
	CHECK_EQ(rnbd_clt_open(b, "vol", RNBD_ACCESS_RW), -EPERM);
	CHECK_EQ(rnbd_clt_close(m), 0);
	CHECK_EQ(rnbd_clt_open(b, "vol", RNBD_ACCESS_RW), 0);
	CHECK_EQ(rnbd_clt_io(b, RNBD_OP_READ, 1 << 20, 1 << 20, back), 0);
	CHECK(!memcmp(back, model + (1 << 20), 1 << 20));
	CHECK(b->c.reads == 1 && b->c.bytes_read == 1 << 20 && b->c.errors == 0);
	CHECK(a->c.errors >= 2);	/* the two past the end (the unaligned one is refused here) */

	/* every path down: the server drops the session and its open (RTRS's DISCONNECTED);
	 * the client fails IO at once, and remaps when a path is back */
	rnd(buf, 65536, &seed);
	CHECK_EQ(rnbd_clt_io(b, RNBD_OP_WRITE, 6 << 20, 65536, buf), 0);
	memcpy(model + (6 << 20), buf, 65536);
	CHECK_EQ(rnbd_local_sim(b->ctx, RNBD_LOCAL_DOWN), 0);
	CHECK_EQ(rnbd_clt_io(b, RNBD_OP_READ, 6 << 20, 65536, back), -EIO);
	CHECK_EQ(b->c.disconnects, 1);
	CHECK_EQ(b->c.refused_down, 1);
	/* the server really let the open go: another writer gets the device meanwhile */
	struct rnbd_clt *y = client(st, "Y");
	CHECK_EQ(rnbd_clt_open(y, "vol", RNBD_ACCESS_RW), 0);
	/* a path is back: the remap's OPEN is refused while Y writes; IO waits, then fails */
	b->remap_wait_ms = 300;
	CHECK_EQ(rnbd_local_sim(b->ctx, RNBD_LOCAL_UP), 0);
	CHECK_EQ(rnbd_clt_io(b, RNBD_OP_READ, 6 << 20, 65536, back), -EIO);
	CHECK(b->c.remap_failures >= 1);
	CHECK_EQ(b->c.remaps, 0);
	/* Y leaves: the remap is retried (every second) and IO resumes */
	CHECK_EQ(rnbd_clt_close(y), 0);
	rnbd_clt_free(y);
	b->remap_wait_ms = 10000;
	memset(back, 0, 65536);
	CHECK_EQ(rnbd_clt_io(b, RNBD_OP_READ, 6 << 20, 65536, back), 0);
	CHECK(!memcmp(back, model + (6 << 20), 65536));
	CHECK_EQ(b->c.remaps, 1);
	/* the server replaced the session without the client seeing a path go: the IO it
	 * answers with ENOTCONN asks for a remap and is sent again */
	CHECK_EQ(rnbd_local_sim(b->ctx, RNBD_LOCAL_RESET), 0);
	rnd(buf, 65536, &seed);
	CHECK_EQ(rnbd_clt_io(b, RNBD_OP_WRITE | RNBD_F_FUA, 6 << 20, 65536, buf), 0);
	memcpy(model + (6 << 20), buf, 65536);
	CHECK_EQ(b->c.remaps, 2);
	CHECK(b->c.resent >= 1);
	CHECK(disk_is_model());
	/* and the access rules hold again: b is the writer */
	y = client(st, "Y");
	CHECK_EQ(rnbd_clt_open(y, "vol", RNBD_ACCESS_RW), -EPERM);
	rnbd_clt_free(y);
	/* closing while every path is down sends nothing (it would wait for a path): the server
	 * dropped the open with the session, and the device is free for another writer */
	CHECK_EQ(rnbd_local_sim(b->ctx, RNBD_LOCAL_DOWN), 0);
	CHECK_EQ(rnbd_clt_close(b), 0);
	y = client(st, "Y");
	CHECK_EQ(rnbd_clt_open(y, "vol", RNBD_ACCESS_RW), 0);
	rnbd_clt_free(y);

	rnbd_clt_free(a);
	rnbd_clt_free(b);
	rnbd_clt_free(m);
	rnbd_clt_free(r);	/* a client freed with its device open: the session closes it */
	rnbd_store_free(st);
	unlink(disk_path);
	rmdir(dir);
	return sr_test_done("test_rnbd_clt");
}
