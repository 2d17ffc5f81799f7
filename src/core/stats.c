/* SPDX-License-Identifier: MIT */
/*
 * Per-device counters in a shared, self-describing file (layout: include/softrdma/stats.h).
 *
 * The file is built complete under no name (O_TMPFILE) or a hidden temporary one, then
 * linked into place: link(2) fails with EEXIST instead of replacing, which gives O_EXCL
 * semantics, and a reader never sees a half-written header. A shared flock held for the life
 * of the device tells readers (and a later process that reuses our pid) that the file is live.
 *
 * Nothing here may fail the device: when the directory is missing, not ours, or not
 * writable, the counters live in private memory and only a debug line says so.
 */
#include "core/fd.h"
#include "core/stats.h"
#include "core/log.h"
#include "core/param.h"
#include "softrdma/stats.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *const sr_stat_name[SR_STAT_MAX] = {
#define SR_STAT_NAME(name, doc) #name,
	SR_STAT_LIST(SR_STAT_NAME)
#undef SR_STAT_NAME
};

const char *const sr_stat_doc[SR_STAT_MAX] = {
#define SR_STAT_DOC(name, doc) doc,
	SR_STAT_LIST(SR_STAT_DOC)
#undef SR_STAT_DOC
};

/* Every name must fit its slot with a NUL. */
#define SR_STAT_NAME_FITS(name, doc)                                                       \
	_Static_assert(sizeof(#name) <= SOFTRDMA_STAT_NAME_LEN, "counter name too long: " #name);
SR_STAT_LIST(SR_STAT_NAME_FITS)
#undef SR_STAT_NAME_FITS

_Static_assert(offsetof(struct softrdma_stat_file_hdr, devname) == 56, "v1 layout");
_Static_assert(offsetof(struct softrdma_stat_file_hdr, ident) == 120, "v1 layout");
_Static_assert(sizeof(((struct sr_stats *)0)->dev) == SOFTRDMA_STAT_DEVNAME_LEN, "dev size");
_Static_assert(sizeof(((struct sr_stats *)0)->ident) == SOFTRDMA_STAT_IDENT_LEN, "ident size");

/* A second device of the same name in one process gets "<pid>-<dev>.<n>.stat". */
#define SR_STAT_MAX_SUFFIX 64

/* Counters for the impossible case (calloc failing at open): shared garbage beats a crash. */
static _Atomic uint64_t stats_sink[SR_STAT_MAX];

static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_stats *stats_open_list;
static pthread_once_t stats_hook_once = PTHREAD_ONCE_INIT;

static void copy_str(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

/* The file name part: no '/' and no leading '.', whatever the device is called. */
static void file_safe(char *dst, size_t size, const char *dev)
{
	size_t i;

	copy_str(dst, size, dev);
	for (i = 0; dst[i]; i++)
		if (dst[i] == '/' || (i == 0 && dst[i] == '.'))
			dst[i] = '_';
	if (i == 0)
		copy_str(dst, size, "_");
}

/* <stats_dir>/softrdma-<uid>, created if missing, opened as a directory we own. */
int sr_shm_dir_open(char *path, size_t size)
{
	const char *base = sr_params()->stats_dir;
	struct stat st;
	int dfd;

	if (!base || !*base)
		return -ENOENT;
	/* One level only: the base is a system or test directory; make it if a test asked for a
	 * fresh one, but never build a whole tree from a typo. */
	if (mkdir(base, 0777) && errno != EEXIST)
		return -errno;
	if ((size_t)snprintf(path, size, "%s/" SOFTRDMA_STAT_SUBDIR_PREFIX "%u", base,
			     (unsigned)geteuid()) >= size)
		return -ENAMETOOLONG;
	if (mkdir(path, 0700) && errno != EEXIST)
		return -errno;
	/* /dev/shm is world-writable: someone may have planted a symlink or a directory of
	 * theirs under our name. O_NOFOLLOW and the owner check refuse both. */
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fstat(dfd, &st) || st.st_uid != geteuid()) {
		close(dfd);
		return -EPERM;
	}
	return dfd;
}

/* EEXIST on `name`: a file left by a dead process (nobody holds its flock) is removed. */
static int stale_remove(int dfd, const char *name)
{
	struct stat a, b;
	int fd, rc = 0;

	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 1 : 0;	/* vanished meanwhile: retry the name */
	if (flock(fd, LOCK_EX | LOCK_NB) == 0 && !fstat(fd, &a) &&
	    !fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) && a.st_ino == b.st_ino &&
	    a.st_dev == b.st_dev) {
		/* Another cleaner may race us between the check and the unlink; the worst case
		 * is one live file unlinked by a second racer, which costs only its visibility. */
		rc = unlinkat(dfd, name, 0) == 0;
		if (rc)
			sr_dbg("stats: removed stale %s", name);
	}
	close(fd);
	return rc;
}

static void header_fill(void *map, size_t size, const char *dev, const char *ident)
{
	struct softrdma_stat_file_hdr *h = map;
	struct timespec ts;

	memcpy(h->magic, SOFTRDMA_STAT_MAGIC, SOFTRDMA_STAT_MAGIC_LEN);
	h->version_major = SOFTRDMA_STAT_VERSION_MAJOR;
	h->version_minor = SOFTRDMA_STAT_VERSION_MINOR;
	h->hdr_size = sizeof(*h);
	h->file_size = size;
	h->pid = getpid();
	h->num_counters = SR_STAT_MAX;
	clock_gettime(CLOCK_REALTIME, &ts);
	h->start_time_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	h->name_len = SOFTRDMA_STAT_NAME_LEN;
	h->names_off = sizeof(*h);
	h->values_off = (sizeof(*h) + SR_STAT_MAX * SOFTRDMA_STAT_NAME_LEN + 7) & ~7u;
	copy_str(h->devname, sizeof(h->devname), dev);
	copy_str(h->ident, sizeof(h->ident), ident);
	for (int i = 0; i < SR_STAT_MAX; i++)
		copy_str((char *)map + h->names_off + (size_t)i * SOFTRDMA_STAT_NAME_LEN,
			 SOFTRDMA_STAT_NAME_LEN, sr_stat_name[i]);
}

/*
 * Creates, fills and links the file. tmpfile: try O_TMPFILE (else a hidden named temporary).
 * Returns 0 with s->fd/map/v/path set, or -errno with nothing left behind.
 */
static int stats_file_create(struct sr_stats *s, int dfd, const char *dirpath, int tmpfile)
{
	size_t values_off = (sizeof(struct softrdma_stat_file_hdr) +
			     SR_STAT_MAX * SOFTRDMA_STAT_NAME_LEN + 7) & ~(size_t)7;
	size_t size = values_off + SR_STAT_MAX * sizeof(uint64_t);
	char tmp[96], name[SOFTRDMA_STAT_DEVNAME_LEN + 48], safe[SOFTRDMA_STAT_DEVNAME_LEN];
	int fd, rc, n, retried_stale = 0;
	void *map;

	file_safe(safe, sizeof(safe), s->dev);
	if (tmpfile) {
		fd = openat(dfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	} else {
		static _Atomic unsigned tmp_seq;

		snprintf(tmp, sizeof(tmp), ".tmp-%d-%u", (int)getpid(), atomic_fetch_add(&tmp_seq, 1));
		fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return -errno;
	fd = sr_fd_high(fd);	/* held for the device's life: above the application's numbers */
	/* Before the file has a name, so no reader can ever see it unlocked. Without flock
	 * support readers fall back to kill(pid, 0). */
	(void)flock(fd, LOCK_SH | LOCK_NB);
	if (ftruncate(fd, size)) {
		rc = -errno;
		goto close_file;
	}
	map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		goto close_file;
	}
	header_fill(map, size, s->dev, s->ident);

	for (n = 0; n < SR_STAT_MAX_SUFFIX;) {
		if (n == 0)
			snprintf(name, sizeof(name), "%d-%s" SOFTRDMA_STAT_SUFFIX, (int)getpid(), safe);
		else
			snprintf(name, sizeof(name), "%d-%s.%d" SOFTRDMA_STAT_SUFFIX, (int)getpid(),
				 safe, n);
		if (tmpfile) {
			char proc[48];

			/* linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH; /proc does not. */
			snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
			rc = linkat(AT_FDCWD, proc, dfd, name, AT_SYMLINK_FOLLOW);
		} else {
			rc = linkat(dfd, tmp, dfd, name, 0);
		}
		if (!rc)
			break;
		if (errno != EEXIST) {
			rc = -errno;
			goto unmap;
		}
		/* Our pid on a file: a crashed process that had it before us, or our own live
		 * device of the same name. Only the first is removed. */
		if (!retried_stale && stale_remove(dfd, name)) {
			retried_stale = 1;
			continue;
		}
		retried_stale = 0;
		n++;
	}
	if (n == SR_STAT_MAX_SUFFIX) {
		rc = -EEXIST;
		goto unmap;
	}
	if (!tmpfile)
		unlinkat(dfd, tmp, 0);
	if ((size_t)snprintf(s->path, sizeof(s->path), "%s/%s", dirpath, name) >= sizeof(s->path)) {
		/* Unreachable in practice (sr_shm_dir_open checked the directory's length), but a
		 * path we cannot unlink later must not exist. */
		unlinkat(dfd, name, 0);
		rc = -ENAMETOOLONG;
		goto unmap;
	}
	s->fd = fd;
	s->map = map;
	s->map_len = size;
	s->v = (_Atomic uint64_t *)((char *)map + values_off);
	return 0;

unmap:
	munmap(map, size);
close_file:
	/* The temporary's name is ours alone (pid and sequence): unlinking it twice is safe. */
	if (!tmpfile)
		unlinkat(dfd, tmp, 0);
	close(fd);
	return rc;
}

/* Appends "devname counter value" lines to stats_dump, in one write (O_APPEND keeps the
 * processes and devices sharing one dump file from interleaving). */
static void stats_dump(struct sr_stats *s)
{
	const char *tmpl = sr_params()->stats_dump;
	char path[4096], *buf;
	size_t cap, len;
	int fd;

	if (!tmpl || !*tmpl)
		return;
	if (sr_path_expand(tmpl, path, sizeof(path))) {
		sr_warn("stats_dump: path too long: %s", tmpl);
		return;
	}
	cap = 256 + (size_t)SR_STAT_MAX * (sizeof(s->dev) + SOFTRDMA_STAT_NAME_LEN + 24);
	buf = malloc(cap);
	if (!buf)
		return;
	len = snprintf(buf, cap, "# softrdma pid %d device %s%s%s\n", s->pid, s->dev,
		       s->ident[0] ? " " : "", s->ident);
	for (int i = 0; i < SR_STAT_MAX && len < cap; i++) {
		uint64_t v = sr_stat_get(s, i);

		if (v)
			len += snprintf(buf + len, cap - len, "%s %s %llu\n", s->dev, sr_stat_name[i],
					(unsigned long long)v);
	}
	if (len > cap)
		len = cap;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
		sr_warn("stats_dump: cannot write %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(buf);
}

/* Dump and remove the file, once. Called with stats_lock held. The memory stays mapped. */
static void stats_finish(struct sr_stats *s)
{
	struct stat a, b;

	if (s->finished || s->pid != getpid())
		return;
	s->finished = 1;
	stats_dump(s);
	/* Only our own file: if someone replaced it by hand, theirs stays. */
	if (s->fd >= 0 && s->path[0] && !fstat(s->fd, &a) && !lstat(s->path, &b) &&
	    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
		unlink(s->path);
}

static _Atomic bool stats_exit_done;

static void stats_at_exit(void)
{
	pthread_mutex_lock(&stats_lock);
	for (struct sr_stats *s = stats_open_list; s; s = s->next)
		stats_finish(s);
	pthread_mutex_unlock(&stats_lock);
	atomic_store(&stats_exit_done, true);
}

/*
 * Runs right after stats_at_exit (registered just before it). A program whose threads call
 * exit() at once -- rping's event thread calls it on an UNREACHABLE or REJECTED event while
 * its main thread returns from main -- runs the exit hooks in both: the thread that does not
 * take stats_at_exit reaches _exit and ends the process (exit_group) while the other is in the
 * middle of the dump, which left an empty stats_dump file (integration/test_cm_ibcm, about one
 * run in two at a load of 18; strace showed the openat cut short by the other thread's
 * exit_group). That thread takes this hook and waits for the dump, 5 s at most.
 */
static void stats_exit_wait(void)
{
	for (int i = 0; i < 5000 && !atomic_load(&stats_exit_done); i++)
		usleep(1000);
}

/* A child forked while another thread held the lock would hang in the exit hook. */
static void stats_atfork_child(void)
{
	pthread_mutex_init(&stats_lock, NULL);
}

static void stats_hook_install(void)
{
	atexit(stats_exit_wait);	/* runs after the next one (exit hooks run in reverse) */
	atexit(stats_at_exit);
	pthread_atfork(NULL, NULL, stats_atfork_child);
}

void sr_stats_open(struct sr_stats *s, const char *devname, const char *ident)
{
	char dirpath[sizeof(s->path) - SOFTRDMA_STAT_DEVNAME_LEN - 32];
	int dfd, rc;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->pid = getpid();
	copy_str(s->dev, sizeof(s->dev), devname);
	copy_str(s->ident, sizeof(s->ident), ident);
	pthread_once(&stats_hook_once, stats_hook_install);

	dfd = sr_shm_dir_open(dirpath, sizeof(dirpath));
	rc = dfd;
	if (dfd >= 0) {
		rc = stats_file_create(s, dfd, dirpath, 1);
		if (rc < 0)	/* no O_TMPFILE on this file system, or no /proc */
			rc = stats_file_create(s, dfd, dirpath, 0);
		close(dfd);
	}
	if (rc < 0) {
		sr_dbg("stats: %s: no shared counter file in %s (%s); counting privately",
		       s->dev, sr_params()->stats_dir, strerror(-rc));
		s->v = calloc(SR_STAT_MAX, sizeof(*s->v));
		if (!s->v)
			s->v = stats_sink;
	} else {
		sr_dbg("stats: %s: counters in %s", s->dev, s->path);
	}
	pthread_mutex_lock(&stats_lock);
	s->next = stats_open_list;
	stats_open_list = s;
	pthread_mutex_unlock(&stats_lock);
}

void sr_stats_close(struct sr_stats *s, const char *devname)
{
	struct sr_stats **pp;

	(void)devname;	/* the name given at open is the one in the file and the dump */
	if (!s->v)
		return;	/* never opened, or closed already */
	pthread_mutex_lock(&stats_lock);
	for (pp = &stats_open_list; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	stats_finish(s);
	pthread_mutex_unlock(&stats_lock);

	if (s->map)
		munmap(s->map, s->map_len);
	else if (s->v != stats_sink)
		free((void *)s->v);
	if (s->fd >= 0)
		close(s->fd);	/* releases the flock */
	s->v = NULL;
	s->map = NULL;
	s->fd = -1;
	s->path[0] = '\0';
}
