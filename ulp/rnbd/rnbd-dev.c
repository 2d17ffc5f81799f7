/* SPDX-License-Identifier: MIT */
/*
 * The server's device layer (rnbd-dev.h): search path, access rules, io_uring IO.
 *
 * Each open (handle) has its own file descriptors, opened read-only for an RO open, so a write
 * through an RO open is impossible below the check too. A device (the same inode, or the same
 * block device, whatever the name) counts its writers for the access rules. IO goes to an
 * O_DIRECT descriptor when the buffer, offset and length meet the file system's alignment
 * (probed at open), else to a buffered one; FUA is RWF_DSYNC on the write, PREFLUSH and FLUSH
 * an fdatasync (IORING_FSYNC_DATASYNC), DISCARD and WRITE_ZEROES fallocate.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include <liburing.h>

#include "rnbd-dev.h"

struct rnbd_dev {
	struct rnbd_dev *next;
	dev_t key_dev;
	ino_t key_ino;
	char path[PATH_MAX];
	unsigned opens, writers;
	struct {
		_Atomic uint64_t reads, writes, flushes, discards, write_zeroes, bytes_read,
			bytes_written, errors, refused, direct_ios, buffered_ios, sync_ios;
	} c;
};

struct rnbd_handle {
	struct rnbd_store *st;
	struct rnbd_dev *dev;
	unsigned mode;
	int fd;			/* buffered */
	int dfd;		/* O_DIRECT, or -1 */
	unsigned dio_align;
	bool is_bdev;
	bool secure_erase;	/* a block device that takes BLKSECDISCARD (probed at open) */
	bool sync_io;		/* IO runs synchronously on the submitting thread (rnbd-dev.h) */
	uint64_t size, nsectors;
	uint16_t lbs, pbs;
	pthread_mutex_t lock;
	pthread_cond_t idle;
	unsigned inflight;
};

struct rnbd_store {
	char search_path[PATH_MAX];
	uint32_t max_io_bytes;
	bool no_direct;
	int sync_io;
	pthread_mutex_t lock;		/* devices list */
	struct rnbd_dev *devs;
	struct io_uring ring;
	pthread_mutex_t sq_lock;
	pthread_mutex_t cq_lock;	/* whoever reaps the CQ holds it (reap_cq) */
	_Atomic unsigned outstanding;	/* SQEs submitted whose CQE is not reaped yet */
	pthread_mutex_t idle_lock;	/* the completion thread's sleep while nothing is */
	pthread_cond_t idle_cv;		/* outstanding */
	_Atomic bool cq_idle;
	pthread_t cq_thread;
	_Atomic bool stopping;		/* read by the engine thread without sq_lock */
};

enum io_stage { ST_PREFLUSH, ST_MAIN, ST_POSTSYNC };

struct rnbd_io {
	struct rnbd_handle *h;
	struct rnbd_req r;
	uint8_t *data;
	uint32_t done_bytes;	/* READ/WRITE progress (short transfers continue) */
	enum io_stage stage;
	bool direct;
	rnbd_done_fn done;
	void *priv;
};

/* ---- engine ---- */

static void io_finish(struct rnbd_io *io, int err)
{
	struct rnbd_handle *h = io->h;
	struct rnbd_dev *d = h->dev;

	if (err)
		atomic_fetch_add(&d->c.errors, 1);
	io->done(io->priv, err);
	free(io);
	pthread_mutex_lock(&h->lock);
	if (--h->inflight == 0)
		pthread_cond_broadcast(&h->idle);
	pthread_mutex_unlock(&h->lock);
}

static void io_complete(struct rnbd_io *io, int res);
static void *secure_erase_main(void *arg);

/* Under cq_lock: completes every CQE there is. io_complete may queue the request's next stage
 * (its reap_cq finds the lock taken: this loop takes that CQE too). */
static void drain_cq_locked(struct rnbd_store *st)
{
	struct io_uring_cqe *cqe;

	while (io_uring_peek_cqe(&st->ring, &cqe) == 0) {
		struct rnbd_io *io = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&st->ring, cqe);
		atomic_fetch_sub(&st->outstanding, 1);
		if (io)		/* NULL: the stop NOP */
			io_complete(io, res);
	}
}

/*
 * Reaps the CQ if no other thread does. A thread that finds the lock taken leaves its CQEs to
 * the holder, which looks at the CQ again after it let go: nothing is left behind (the CQE was
 * posted before the failed trylock, the holder's look comes after its unlock).
 */
static void reap_cq(struct rnbd_store *st)
{
	while (io_uring_cq_ready(&st->ring)) {
		if (pthread_mutex_trylock(&st->cq_lock))
			return;
		drain_cq_locked(st);
		pthread_mutex_unlock(&st->cq_lock);
	}
}

/* IO still in flight after its submission: the completion thread must wait for it. */
static void wake_cq_thread(struct rnbd_store *st)
{
	if (!atomic_load(&st->outstanding) || !atomic_load(&st->cq_idle))
		return;
	pthread_mutex_lock(&st->idle_lock);
	pthread_cond_signal(&st->idle_cv);
	pthread_mutex_unlock(&st->idle_lock);
}

static struct io_uring_sqe *get_sqe(struct rnbd_store *st)
{
	struct io_uring_sqe *sqe;

	while (!(sqe = io_uring_get_sqe(&st->ring)))
		io_uring_submit(&st->ring);
	return sqe;
}

static int write_zeroes_slow(struct rnbd_handle *h, uint64_t off, uint64_t len);

/* The io's current stage done at once on this thread (a device in memory): what its
 * io_uring operation would do, with the same result (bytes or -errno). */
static int io_sync(struct rnbd_io *io, int fd, uint64_t off, uint32_t len)
{
	struct rnbd_handle *h = io->h;
	struct iovec v = { io->data + io->done_bytes, len };
	ssize_t n;

	if (io->stage == ST_PREFLUSH || io->stage == ST_POSTSYNC || io->r.op == RNBD_OP_FLUSH)
		return fdatasync(h->fd) < 0 ? -errno : 0;
	switch (io->r.op) {
	case RNBD_OP_READ:
		do
			n = preadv2(fd, &v, 1, off, 0);
		while (n < 0 && errno == EINTR);
		return n < 0 ? -errno : (int)n;
	case RNBD_OP_WRITE:
		do
			n = pwritev2(fd, &v, 1, off, io->r.flags & RNBD_F_FUA ? RWF_DSYNC : 0);
		while (n < 0 && errno == EINTR);
		return n < 0 ? -errno : (int)n;
	case RNBD_OP_DISCARD:
		return fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) < 0 ?
		       -errno : 0;
	default:	/* WRITE_ZEROES */
		return fallocate(h->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len) < 0 ?
		       -errno : 0;
	}
}

/* Queues the io's current stage (or runs it at once: sync_io). Caller holds nothing. */
static void io_queue(struct rnbd_io *io)
{
	struct rnbd_handle *h = io->h;
	struct rnbd_store *st = h->st;
	uint64_t off = (io->r.sector << RNBD_SECTOR_SHIFT) + io->done_bytes;
	uint32_t len = io->r.bi_size - io->done_bytes;
	struct io_uring_sqe *sqe;
	int fd = io->direct ? h->dfd : h->fd;

	if (io->stage == ST_MAIN && io->r.op == RNBD_OP_SECURE_ERASE) {
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, secure_erase_main, io))
			io_complete(io, -ENOMEM);
		pthread_attr_destroy(&at);
		return;
	}
	if (h->sync_io)
		return io_complete(io, io_sync(io, fd, off, len));
	pthread_mutex_lock(&st->sq_lock);
	sqe = get_sqe(st);
	if (io->stage == ST_PREFLUSH || io->stage == ST_POSTSYNC || io->r.op == RNBD_OP_FLUSH) {
		io_uring_prep_fsync(sqe, h->fd, IORING_FSYNC_DATASYNC);
	} else if (io->r.op == RNBD_OP_READ) {
		io_uring_prep_read(sqe, fd, io->data + io->done_bytes, len, off);
	} else if (io->r.op == RNBD_OP_WRITE) {
		io_uring_prep_write(sqe, fd, io->data + io->done_bytes, len, off);
		if (io->r.flags & RNBD_F_FUA)
			sqe->rw_flags = RWF_DSYNC;
	} else if (io->r.op == RNBD_OP_DISCARD) {
		io_uring_prep_fallocate(sqe, h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
					off, len);
	} else {	/* WRITE_ZEROES */
		io_uring_prep_fallocate(sqe, h->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
					off, len);
	}
	io_uring_sqe_set_data(sqe, io);
	atomic_fetch_add(&st->outstanding, 1);
	io_uring_submit(&st->ring);
	pthread_mutex_unlock(&st->sq_lock);
	/* what completed in the submission (a read from the page cache, ...) is answered here,
	 * on the submitting thread (RTRS's event thread): no hand-off to the completion thread */
	reap_cq(st);
	wake_cq_thread(st);
}

/* SECURE_ERASE of a block device: io_uring has no such op, so BLKSECDISCARD on a thread of
 * its own (rare, and it may take long). */
static void *secure_erase_main(void *arg)
{
	struct rnbd_io *io = arg;
	uint64_t range[2] = { io->r.sector << RNBD_SECTOR_SHIFT, io->r.bi_size };
	int res = ioctl(io->h->fd, BLKSECDISCARD, range) < 0 ? -errno : 0;

	io_complete(io, res);
	return NULL;
}

/* WRITE_ZEROES where fallocate cannot zero: plain writes of zeroes (engine thread). */
static int write_zeroes_slow(struct rnbd_handle *h, uint64_t off, uint64_t len)
{
	static const uint8_t zero[65536];

	while (len) {
		size_t n = len < sizeof(zero) ? len : sizeof(zero);
		ssize_t w = pwrite(h->fd, zero, n, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += w;
		len -= w;
	}
	return 0;
}

/* One completion of io's current stage: next stage, or the answer. */
static void io_complete(struct rnbd_io *io, int res)
{
	struct rnbd_handle *h = io->h;
	struct rnbd_dev *d = h->dev;
	bool fua = io->r.flags & RNBD_F_FUA;

	if (io->stage == ST_PREFLUSH) {
		if (res < 0)
			return io_finish(io, res);
		io->stage = ST_MAIN;
		if (io->r.op == RNBD_OP_WRITE && io->r.bi_size == 0)
			return io_finish(io, 0);
		return io_queue(io);
	}
	if (io->stage == ST_POSTSYNC)
		return io_finish(io, res < 0 ? res : 0);

	switch (io->r.op) {
	case RNBD_OP_READ:
		if (res < 0)
			return io_finish(io, res);
		if (res == 0) {	/* the file shrank under us: zeroes, as past a hole */
			memset(io->data + io->done_bytes, 0, io->r.bi_size - io->done_bytes);
			res = io->r.bi_size - io->done_bytes;
		}
		io->done_bytes += res;
		atomic_fetch_add(&d->c.bytes_read, res);
		if (io->done_bytes < io->r.bi_size)
			return io_queue(io);
		return io_finish(io, 0);
	case RNBD_OP_WRITE:
		if (res < 0)
			return io_finish(io, res);
		if (res == 0)
			return io_finish(io, -EIO);
		io->done_bytes += res;
		atomic_fetch_add(&d->c.bytes_written, res);
		if (io->done_bytes < io->r.bi_size)
			return io_queue(io);
		return io_finish(io, 0);
	case RNBD_OP_FLUSH:
		return io_finish(io, res < 0 ? res : 0);
	case RNBD_OP_DISCARD:
		/* discarding is advisory: a file system or device that cannot keeps the data */
		if (res < 0 && res != -EOPNOTSUPP)
			return io_finish(io, res);
		break;
	case RNBD_OP_SECURE_ERASE:	/* not advisory: the device said it can */
		if (res < 0)
			return io_finish(io, res);
		break;
	case RNBD_OP_WRITE_ZEROES:
		if (res == -EOPNOTSUPP || res == -EINVAL)
			res = write_zeroes_slow(h, io->r.sector << RNBD_SECTOR_SHIFT, io->r.bi_size);
		if (res < 0)
			return io_finish(io, res);
		break;
	}
	if (fua) {	/* a range op with FUA: on stable storage before the answer */
		io->stage = ST_POSTSYNC;
		return io_queue(io);
	}
	io_finish(io, 0);
}

/*
 * The completion thread: completions that did not come during their submission (O_DIRECT
 * IO of a device, a buffered write handed to io_uring's workers, ...). It sleeps on a
 * condition while nothing is outstanding (a submitter that leaves IO in flight wakes it), else
 * in the kernel until a CQE comes, then reaps as reap_cq does.
 */
static void *cq_thread(void *arg)
{
	struct rnbd_store *st = arg;

	pthread_setname_np(pthread_self(), "rnbd-cq");
	for (;;) {
		pthread_mutex_lock(&st->idle_lock);
		while (!atomic_load(&st->outstanding) && !st->stopping) {
			atomic_store(&st->cq_idle, true);
			if (atomic_load(&st->outstanding))	/* submitted meanwhile */
				break;
			pthread_cond_wait(&st->idle_cv, &st->idle_lock);
		}
		atomic_store(&st->cq_idle, false);
		pthread_mutex_unlock(&st->idle_lock);
		if (st->stopping && !atomic_load(&st->outstanding))
			return NULL;
		if (!io_uring_cq_ready(&st->ring)) {
			/* wait for one CQE (it may be reaped by a submitter before we look) */
			int rc = syscall(__NR_io_uring_enter, st->ring.ring_fd, 0, 1,
					 IORING_ENTER_GETEVENTS, NULL, _NSIG / 8);
			if (rc < 0 && errno != EINTR && errno != EAGAIN && errno != EBUSY) {
				fprintf(stderr, "rnbd: io_uring_enter: %s\n", strerror(errno));
				return NULL;
			}
		}
		pthread_mutex_lock(&st->cq_lock);
		drain_cq_locked(st);
		pthread_mutex_unlock(&st->cq_lock);
		reap_cq(st);	/* what a failed trylock left meanwhile */
	}
}

int rnbd_store_new(const struct rnbd_store_opts *o, struct rnbd_store **out)
{
	struct rnbd_store *st = calloc(1, sizeof(*st));
	int rc;

	if (!st)
		return -ENOMEM;
	if (!o->search_path || !*o->search_path ||
	    strlen(o->search_path) >= sizeof(st->search_path)) {
		free(st);
		return -EINVAL;
	}
	strcpy(st->search_path, o->search_path);
	st->max_io_bytes = o->max_io_bytes ? o->max_io_bytes : 128 * 1024;
	st->max_io_bytes &= ~(RNBD_SECTOR_SIZE - 1);
	st->no_direct = o->no_direct;
	st->sync_io = o->sync_io;
	pthread_mutex_init(&st->lock, NULL);
	pthread_mutex_init(&st->sq_lock, NULL);
	pthread_mutex_init(&st->cq_lock, NULL);
	pthread_mutex_init(&st->idle_lock, NULL);
	pthread_cond_init(&st->idle_cv, NULL);
	rc = io_uring_queue_init(o->queue_depth ? o->queue_depth : 256, &st->ring, 0);
	if (rc < 0) {
		free(st);
		return rc;
	}
	rc = pthread_create(&st->cq_thread, NULL, cq_thread, st);
	if (rc) {
		io_uring_queue_exit(&st->ring);
		free(st);
		return -rc;
	}
	*out = st;
	return 0;
}

void rnbd_store_free(struct rnbd_store *st)
{
	struct io_uring_sqe *sqe;

	if (!st)
		return;
	/* a NOP wakes the completion thread if it waits in the kernel, the condition if it
	 * sleeps there; it reaps the NOP and, nothing outstanding, ends */
	pthread_mutex_lock(&st->idle_lock);
	st->stopping = true;
	pthread_cond_signal(&st->idle_cv);
	pthread_mutex_unlock(&st->idle_lock);
	pthread_mutex_lock(&st->sq_lock);
	sqe = get_sqe(st);
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	atomic_fetch_add(&st->outstanding, 1);
	io_uring_submit(&st->ring);
	pthread_mutex_unlock(&st->sq_lock);
	pthread_join(st->cq_thread, NULL);
	io_uring_queue_exit(&st->ring);
	while (st->devs) {	/* only when a caller leaked handles */
		struct rnbd_dev *d = st->devs;
		st->devs = d->next;
		free(d);
	}
	free(st);
}

/* ---- open / close ---- */

static bool sessname_ok(const char *s)
{
	if (!s || !*s || strchr(s, '/') || !strcmp(s, ".") || strstr(s, ".."))
		return false;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* The directory a session's names are relative to (the kernel's rule: with %SESSNAME%, the
 * part before it, then /SESSNAME). */
static int base_dir(const struct rnbd_store *st, const char *sessname, char *out, size_t n)
{
	const char *p = strstr(st->search_path, "%SESSNAME%");
	int len;

	if (!p)
		len = snprintf(out, n, "%s", st->search_path);
	else if (!sessname_ok(sessname))
		return -EINVAL;
	else
		len = snprintf(out, n, "%.*s/%s", (int)(p - st->search_path), st->search_path,
			       sessname);
	return len < 0 || (size_t)len >= n ? -ENAMETOOLONG : 0;
}

/* Can this descriptor do O_DIRECT IO at `align`? A read of one block says (a file system that
 * refuses O_DIRECT fails the open or this read with EINVAL). */
static bool probe_direct(int dfd, unsigned align, uint64_t size)
{
	void *buf;
	bool ok;

	if (size < align)
		return false;
	if (posix_memalign(&buf, 4096, align))
		return false;
	ok = pread(dfd, buf, align, 0) == (ssize_t)align;
	free(buf);
	return ok;
}

int rnbd_store_open(struct rnbd_store *st, const char *sessname, const char *name,
		    unsigned mode, struct rnbd_handle **out)
{
	char base[PATH_MAX], path[PATH_MAX];
	struct open_how how = { 0 };
	struct stat sb;
	struct rnbd_handle *h;
	struct rnbd_dev *d;
	int dirfd, fd, rc;

	*out = NULL;
	if (mode > RNBD_ACCESS_MIGRATION || !name || !*name || strstr(name, "..") || name[0] == '/')
		return -EINVAL;
	rc = base_dir(st, sessname, base, sizeof(base));
	if (rc)
		return rc;
	if (snprintf(path, sizeof(path), "%s/%s", base, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	dirfd = open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	/* O_NONBLOCK: a FIFO must not block the open (it is refused just after) */
	how.flags = (mode == RNBD_ACCESS_RO ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
	fd = syscall(SYS_openat2, dirfd, name, &how, sizeof(how));
	rc = fd < 0 ? -errno : 0;
	close(dirfd);
	if (rc)
		return rc;
	if (fstat(fd, &sb) < 0 || !(S_ISREG(sb.st_mode) || S_ISBLK(sb.st_mode))) {
		close(fd);
		return -EINVAL;
	}
	how.flags &= ~(uint64_t)O_NONBLOCK;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	h = calloc(1, sizeof(*h));
	if (!h) {
		close(fd);
		return -ENOMEM;
	}
	h->st = st;
	h->mode = mode;
	h->fd = fd;
	h->dfd = -1;
	h->is_bdev = S_ISBLK(sb.st_mode);
	h->lbs = 512;
	h->pbs = 4096;
	if (h->is_bdev) {
		uint64_t bytes = 0;
		int lbs = 0;
		unsigned pbs = 0;
		if (ioctl(fd, BLKGETSIZE64, &bytes) < 0) {
			rc = -errno;
			close(fd);
			free(h);
			return rc;
		}
		h->size = bytes;
		if (ioctl(fd, BLKSSZGET, &lbs) == 0 && lbs >= 512 && lbs <= 32768)
			h->lbs = lbs;
		if (ioctl(fd, BLKPBSZGET, &pbs) == 0 && pbs >= h->lbs && pbs <= 32768)
			h->pbs = pbs;
		/* Secure erase: the kernel's ioctl says EOPNOTSUPP for a device without it before
		 * it looks at the range, EINVAL for this unaligned one otherwise (nothing erased) */
		if (mode != RNBD_ACCESS_RO) {
			uint64_t probe[2] = { 1, 0 };
			h->secure_erase = ioctl(fd, BLKSECDISCARD, probe) < 0 && errno == EINVAL;
		}
	} else {
		h->size = sb.st_size;
	}
	h->nsectors = h->size >> RNBD_SECTOR_SHIFT;
	if (st->sync_io == RNBD_SYNC_IO_ALWAYS) {
		h->sync_io = true;
	} else if (st->sync_io == RNBD_SYNC_IO_AUTO) {
		/* in memory: tmpfs, ramfs, or a RAM disk (brd, major 1) */
		struct statfs fs;
		if (h->is_bdev)
			h->sync_io = major(sb.st_rdev) == 1;
		else if (fstatfs(fd, &fs) == 0)
			h->sync_io = fs.f_type == 0x01021994 /* TMPFS_MAGIC */ ||
				     fs.f_type == 0x858458f6 /* RAMFS_MAGIC */;
	}
	h->dio_align = h->is_bdev ? h->lbs : 4096;
	if (!st->no_direct) {
		char self[64];
		snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
		h->dfd = open(self, how.flags | O_DIRECT);
		if (h->dfd >= 0 && !probe_direct(h->dfd, h->dio_align, h->size)) {
			close(h->dfd);
			h->dfd = -1;
		}
	}
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->idle, NULL);

	pthread_mutex_lock(&st->lock);
	for (d = st->devs; d; d = d->next)
		if (d->key_dev == (h->is_bdev ? sb.st_rdev : sb.st_dev) &&
		    d->key_ino == (h->is_bdev ? 0 : sb.st_ino))
			break;
	if (!d) {
		d = calloc(1, sizeof(*d));
		if (!d) {
			rc = -ENOMEM;
			goto fail;
		}
		d->key_dev = h->is_bdev ? sb.st_rdev : sb.st_dev;
		d->key_ino = h->is_bdev ? 0 : sb.st_ino;
		snprintf(d->path, sizeof(d->path), "%s", path);
		d->next = st->devs;
		st->devs = d;
	}
	/* the kernel's rule (rnbd_srv_check_update_open_perm) */
	if ((mode == RNBD_ACCESS_RW && d->writers > 0) ||
	    (mode == RNBD_ACCESS_MIGRATION && d->writers > 1)) {
		rc = -EPERM;
		if (d->opens == 0) {	/* just created: unlink it again */
			st->devs = d->next;
			free(d);
		}
		goto fail;
	}
	d->opens++;
	if (mode != RNBD_ACCESS_RO)
		d->writers++;
	h->dev = d;
	pthread_mutex_unlock(&st->lock);
	*out = h;
	return 0;
fail:
	pthread_mutex_unlock(&st->lock);
	if (h->dfd >= 0)
		close(h->dfd);
	close(h->fd);
	free(h);
	return rc;
}

void rnbd_handle_close(struct rnbd_handle *h)
{
	struct rnbd_store *st;
	struct rnbd_dev **pp;

	if (!h)
		return;
	st = h->st;
	pthread_mutex_lock(&h->lock);
	while (h->inflight)
		pthread_cond_wait(&h->idle, &h->lock);
	pthread_mutex_unlock(&h->lock);
	pthread_mutex_lock(&st->lock);
	h->dev->opens--;
	if (h->mode != RNBD_ACCESS_RO)
		h->dev->writers--;
	if (h->dev->opens == 0)
		for (pp = &st->devs; *pp; pp = &(*pp)->next)
			if (*pp == h->dev) {
				*pp = h->dev->next;
				free(h->dev);
				break;
			}
	pthread_mutex_unlock(&st->lock);
	if (h->dfd >= 0)
		close(h->dfd);
	close(h->fd);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->idle);
	free(h);
}

void rnbd_handle_attrs(const struct rnbd_handle *h, struct rnbd_dev_attrs *a)
{
	/* bi_size is 32 bits: a range op covers at most 4 GiB - 1 MiB, aligned down */
	const uint32_t max_range = (UINT32_MAX >> RNBD_SECTOR_SHIFT) & ~2047u;

	memset(a, 0, sizeof(*a));
	a->nsectors = h->nsectors;
	a->max_hw_sectors = h->st->max_io_bytes >> RNBD_SECTOR_SHIFT;
	a->logical_block_size = h->lbs;
	a->physical_block_size = h->pbs;
	a->max_segments = 128;
	if (h->mode != RNBD_ACCESS_RO) {
		a->max_discard_sectors = max_range;
		a->max_write_zeroes_sectors = max_range;
		a->discard_granularity = h->pbs;
	}
	/* the kernel's server sends the device's max_secure_erase_sectors (in 16 bits); a file
	 * or a device without secure erase: 0, and SECURE_ERASE is EOPNOTSUPP */
	a->secure_discard = h->secure_erase ? 0xfff8 : 0;
	a->cache_policy = RNBD_WRITEBACK | RNBD_FUA;
}

unsigned rnbd_handle_mode(const struct rnbd_handle *h) { return h->mode; }
uint64_t rnbd_handle_nsectors(const struct rnbd_handle *h) { return h->nsectors; }
const char *rnbd_handle_path(const struct rnbd_handle *h) { return h->dev->path; }

/* ---- IO ---- */

void rnbd_handle_submit(struct rnbd_handle *h, const struct rnbd_req *r, void *data,
			rnbd_done_fn done, void *priv)
{
	struct rnbd_dev *d = h->dev;
	struct rnbd_io *io;
	int rc = rnbd_io_check(r, h->nsectors);
	bool writes = r->op != RNBD_OP_READ && r->op != RNBD_OP_FLUSH;

	if (!rc && r->type != RNBD_MSG_IO)
		rc = -EINVAL;
	if (!rc && writes && h->mode == RNBD_ACCESS_RO)
		rc = -EPERM;
	/* as the kernel's block layer answers it for a device without secure erase (and a file
	 * has none) */
	if (!rc && r->op == RNBD_OP_SECURE_ERASE && !h->secure_erase)
		rc = -EOPNOTSUPP;
	if (!rc && r->op >= RNBD_OP_LAST)
		rc = -EOPNOTSUPP;
	if (!rc && (r->op == RNBD_OP_READ || r->op == RNBD_OP_WRITE) && r->bi_size && !data)
		rc = -EINVAL;
	if (rc) {
		atomic_fetch_add(&d->c.refused, 1);
		done(priv, rc);
		return;
	}
	io = calloc(1, sizeof(*io));
	if (!io) {
		atomic_fetch_add(&d->c.errors, 1);
		done(priv, -ENOMEM);
		return;
	}
	io->h = h;
	io->r = *r;
	io->data = data;
	io->done = done;
	io->priv = priv;
	io->stage = (r->flags & RNBD_F_PREFLUSH) && r->op != RNBD_OP_FLUSH ? ST_PREFLUSH : ST_MAIN;
	switch (r->op) {
	case RNBD_OP_READ: atomic_fetch_add(&d->c.reads, 1); break;
	case RNBD_OP_WRITE: atomic_fetch_add(&d->c.writes, 1); break;
	case RNBD_OP_FLUSH: atomic_fetch_add(&d->c.flushes, 1); break;
	case RNBD_OP_DISCARD:
	case RNBD_OP_SECURE_ERASE: atomic_fetch_add(&d->c.discards, 1); break;
	default: atomic_fetch_add(&d->c.write_zeroes, 1); break;
	}
	if (r->op == RNBD_OP_READ || r->op == RNBD_OP_WRITE) {
		unsigned a = h->dio_align - 1;
		io->direct = h->dfd >= 0 && !(((uintptr_t)data | (r->sector << RNBD_SECTOR_SHIFT) |
					       r->bi_size) & a);
		atomic_fetch_add(io->direct ? &d->c.direct_ios : &d->c.buffered_ios, 1);
		if (h->sync_io)
			atomic_fetch_add(&d->c.sync_ios, 1);
	}
	pthread_mutex_lock(&h->lock);
	h->inflight++;
	pthread_mutex_unlock(&h->lock);
	if (r->op == RNBD_OP_WRITE && r->bi_size == 0 && io->stage == ST_MAIN) {
		/* an empty WRITE: only its flags mean something (FUA alone: a flush) */
		if (r->flags & RNBD_F_FUA) {
			io->stage = ST_POSTSYNC;
			io_queue(io);
		} else {
			io_finish(io, 0);
		}
		return;
	}
	io_queue(io);
}

static void copy_stats(const struct rnbd_dev *d, struct rnbd_dev_stats *s)
{
	s->reads = d->c.reads;
	s->writes = d->c.writes;
	s->flushes = d->c.flushes;
	s->discards = d->c.discards;
	s->write_zeroes = d->c.write_zeroes;
	s->bytes_read = d->c.bytes_read;
	s->bytes_written = d->c.bytes_written;
	s->errors = d->c.errors;
	s->refused = d->c.refused;
	s->direct_ios = d->c.direct_ios;
	s->buffered_ios = d->c.buffered_ios;
	s->sync_ios = d->c.sync_ios;
}

void rnbd_handle_stats(const struct rnbd_handle *h, struct rnbd_dev_stats *s)
{
	copy_stats(h->dev, s);
}

void rnbd_store_foreach(struct rnbd_store *st,
			void (*fn)(void *arg, const char *path, unsigned opens, unsigned writers,
				   const struct rnbd_dev_stats *s), void *arg)
{
	struct rnbd_dev_stats s;

	pthread_mutex_lock(&st->lock);
	for (struct rnbd_dev *d = st->devs; d; d = d->next) {
		copy_stats(d, &s);
		fn(arg, d->path, d->opens, d->writers, &s);
	}
	pthread_mutex_unlock(&st->lock);
}
