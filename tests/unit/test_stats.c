/* SPDX-License-Identifier: MIT */
/*
 * Counter files: open creates <dir>/softrdma-<uid>/<pid>-<dev>.stat, the counters read back
 * through the public layout (include/softrdma/stats.h, by name, not by enum position), a
 * live file is flock'ed, a stale one of our pid is replaced, close removes it and appends the
 * stats_dump lines, the exit hook does the same for a process that never closes, and an
 * unusable directory falls back to private counters.
 */
#include "sr_test.h"

#include "core/param.h"
#include "core/stats.h"
#include "softrdma/stats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];		/* the stats_dir of this test */
static char subdir[128];	/* dir/softrdma-<uid> */

static long read_all(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY);
	long n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

static int exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* A counter's value found by name in the raw file, as any outside reader would; -1: absent. */
static long long file_counter(const char *buf, long len, const char *name)
{
	const struct softrdma_stat_file_hdr *h = (const void *)buf;

	for (uint32_t i = 0; i < h->num_counters; i++) {
		const char *n = buf + h->names_off + (size_t)i * h->name_len;
		uint64_t v;

		if (h->names_off + (size_t)(i + 1) * h->name_len > (size_t)len)
			return -1;
		if (strncmp(n, name, h->name_len))
			continue;
		memcpy(&v, buf + h->values_off + 8 * (size_t)i, sizeof(v));
		return (long long)v;
	}
	return -1;
}

static void test_file_layout(struct sr_stats *s)
{
	const struct softrdma_stat_file_hdr *h;
	char want[256], buf[8192];
	long len;
	int fd;

	snprintf(want, sizeof(want), "%s/%d-test0.stat", subdir, (int)getpid());
	CHECK(!strcmp(s->path, want));
	REQUIRE(s->map != NULL);

	sr_stat_add(s, SR_STAT_tx_packets, 5);
	sr_stat_add(s, SR_STAT_rx_bytes, 1000);
	sr_stat_inc(s, SR_STAT_async_events);
	sr_stat_inc(s, SR_STAT_async_events);
	CHECK_EQ(sr_stat_get(s, SR_STAT_async_events), 2);

	len = read_all(s->path, buf, sizeof(buf));
	REQUIRE(len >= SOFTRDMA_STAT_HDR_V1_0_SIZE);
	h = (const void *)buf;
	CHECK(!memcmp(h->magic, SOFTRDMA_STAT_MAGIC, SOFTRDMA_STAT_MAGIC_LEN));
	CHECK_EQ(h->version_major, 1);
	CHECK_EQ(h->version_minor, SOFTRDMA_STAT_VERSION_MINOR);
	CHECK_EQ(h->hdr_size, sizeof(*h));
	CHECK_EQ(h->file_size, len);
	CHECK_EQ(h->pid, getpid());
	CHECK_EQ(h->num_counters, SR_STAT_MAX);
	CHECK_EQ(h->name_len, SOFTRDMA_STAT_NAME_LEN);
	CHECK(h->names_off >= h->hdr_size);
	CHECK_EQ(h->values_off % 8, 0);
	CHECK(h->values_off >= h->names_off + h->num_counters * h->name_len);
	CHECK_EQ(h->values_off + 8 * h->num_counters, len);
	CHECK(h->start_time_ns > 1500000000ULL * 1000000000ULL);
	CHECK(!strcmp(h->devname, "test0"));
	CHECK(!strcmp(h->ident, "127.0.0.1:4791"));
	CHECK_EQ(h->reserved0, 0);
	for (int i = 0; i < SR_STAT_MAX; i++)
		CHECK(!strcmp(buf + h->names_off + i * h->name_len, sr_stat_name[i]));
	CHECK_EQ(file_counter(buf, len, "tx_packets"), 5);
	CHECK_EQ(file_counter(buf, len, "rx_bytes"), 1000);
	CHECK_EQ(file_counter(buf, len, "async_events"), 2);
	CHECK_EQ(file_counter(buf, len, "rx_packets"), 0);
	CHECK_EQ(file_counter(buf, len, "no_such_counter"), -1);

	/* Live: the writer's shared flock keeps a reader from taking it exclusively. */
	fd = open(s->path, O_RDONLY);
	REQUIRE(fd >= 0);
	CHECK(flock(fd, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK);
	close(fd);

	/* Counting after the read shows up in the mapping: it is the same page. */
	sr_stat_inc(s, SR_STAT_tx_packets);
	len = read_all(s->path, buf, sizeof(buf));
	CHECK_EQ(file_counter(buf, len, "tx_packets"), 6);
}

static void test_dir_mode(void)
{
	struct stat st;

	REQUIRE(!lstat(subdir, &st));
	CHECK(S_ISDIR(st.st_mode));
	CHECK_EQ(st.st_mode & 0777, 0700);
	CHECK_EQ(st.st_uid, geteuid());
}

/* A file of our pid with nobody holding it (a crashed predecessor) is replaced. */
static void test_stale(struct sr_stats *s)
{
	char path[256], buf[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/%d-test1.stat", subdir, (int)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0);
	CHECK_EQ(write(fd, "garbage", 7), 7);
	close(fd);
	sr_stats_open(s, "test1", "10.0.0.1:5000");
	CHECK(!strcmp(s->path, path));
	CHECK(read_all(path, buf, sizeof(buf)) > SOFTRDMA_STAT_HDR_V1_0_SIZE);
	CHECK(!memcmp(buf, SOFTRDMA_STAT_MAGIC, SOFTRDMA_STAT_MAGIC_LEN));
}

/* A second live device of the same name gets its own suffixed file. */
static void test_same_name(struct sr_stats *s)
{
	char want[256];

	sr_stats_open(s, "test0", "127.0.0.1:4792");
	snprintf(want, sizeof(want), "%s/%d-test0.1.stat", subdir, (int)getpid());
	CHECK(!strcmp(s->path, want));
	CHECK(s->map != NULL);
}

static void test_close_and_dump(struct sr_stats *s0, struct sr_stats *s2)
{
	char dump[256], path0[256], path2[256], buf[8192], want[256];

	snprintf(dump, sizeof(dump), "%s/dump-%d.txt", dir, (int)getpid());
	unlink(dump);
	snprintf(path0, sizeof(path0), "%s", s0->path);
	snprintf(path2, sizeof(path2), "%s", s2->path);
	sr_stats_close(s0, "test0");
	CHECK(!exists(path0));
	CHECK(s0->v == NULL);
	sr_stats_close(s0, "test0");	/* twice is harmless */
	sr_stats_close(s2, "test0");
	CHECK(!exists(path2));

	REQUIRE(read_all(dump, buf, sizeof(buf)) > 0);
	snprintf(want, sizeof(want),
		 "# softrdma pid %d device test0 127.0.0.1:4791\n"
		 "test0 tx_packets 6\n"
		 "test0 rx_bytes 1000\n"
		 "test0 async_events 2\n"
		 "# softrdma pid %d device test0 127.0.0.1:4792\n",
		 (int)getpid(), (int)getpid());
	CHECK(!strcmp(buf, want));
	if (strcmp(buf, want))
		fprintf(stderr, "dump:\n%s---\nwanted:\n%s---\n", buf, want);
}

/* A process that exits without closing: the exit hook dumps and removes its file, and leaves
 * the parent's (inherited across fork) alone. */
static void test_exit_hook(const struct sr_stats *parent)
{
	char dump[256], path[256], buf[4096];
	int status;
	pid_t pid;

	pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		static struct sr_stats c;

		sr_stats_open(&c, "child0", "127.0.0.1:4793");
		sr_stat_add(&c, SR_STAT_rx_packets, 3);
		exit(c.map ? 0 : 3);
	}
	REQUIRE(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	snprintf(path, sizeof(path), "%s/%d-child0.stat", subdir, (int)pid);
	CHECK(!exists(path));
	CHECK(exists(parent->path));
	snprintf(dump, sizeof(dump), "%s/dump-%d.txt", dir, (int)pid);
	CHECK(read_all(dump, buf, sizeof(buf)) > 0);
	CHECK(strstr(buf, "child0 rx_packets 3\n") != NULL);
	CHECK(strstr(buf, "test1") == NULL);
	unlink(dump);
}

/* No usable directory: private counters, same API, and the dump still works. */
static void test_fallback(void)
{
	char moved[160], dump[256], buf[4096];
	struct sr_stats s;
	int fd;

	snprintf(moved, sizeof(moved), "%s.moved", subdir);
	REQUIRE(!rename(subdir, moved));

	/* Someone else's object under our name: a plain file... */
	fd = open(subdir, O_WRONLY | O_CREAT | O_EXCL, 0600);
	REQUIRE(fd >= 0);
	close(fd);
	sr_stats_open(&s, "priv0", "x");
	CHECK(s.map == NULL);
	CHECK_EQ(s.fd, -1);
	REQUIRE(s.v != NULL);
	sr_stat_add(&s, SR_STAT_drop_icrc, 9);
	CHECK_EQ(sr_stat_get(&s, SR_STAT_drop_icrc), 9);
	sr_stats_close(&s, "priv0");
	unlink(subdir);

	/* ... or a symlink planted in a world-writable directory. */
	REQUIRE(!symlink(moved, subdir));
	sr_stats_open(&s, "priv1", "y");
	CHECK(s.map == NULL);
	sr_stat_inc(&s, SR_STAT_tx_errors);
	sr_stats_close(&s, "priv1");
	unlink(subdir);
	REQUIRE(!rename(moved, subdir));

	snprintf(dump, sizeof(dump), "%s/dump-%d.txt", dir, (int)getpid());
	REQUIRE(read_all(dump, buf, sizeof(buf)) > 0);
	CHECK(strstr(buf, "priv0 drop_icrc 9\n") != NULL);
	CHECK(strstr(buf, "priv1 tx_errors 1\n") != NULL);
	unlink(dump);
}

/* Every file closed: nothing left behind, not even a temporary. */
static void check_dir_empty(void)
{
	struct dirent *d;
	DIR *dp = opendir(subdir);

	REQUIRE(dp);
	while ((d = readdir(dp)))
		if (strcmp(d->d_name, ".") && strcmp(d->d_name, ".."))
			SR_FAIL("left in %s: %s", subdir, d->d_name);
	closedir(dp);
}

static void test_names(void)
{
	for (int i = 0; i < SR_STAT_MAX; i++) {
		CHECK(sr_stat_name[i] && strlen(sr_stat_name[i]) < SOFTRDMA_STAT_NAME_LEN);
		CHECK(sr_stat_doc[i] && sr_stat_doc[i][0]);
		for (int j = 0; j < i; j++)
			CHECK(strcmp(sr_stat_name[i], sr_stat_name[j]));
	}
	CHECK(!strcmp(sr_stat_name[SR_STAT_tx_packets], "tx_packets"));
	CHECK(!strcmp(sr_stat_name[SR_STAT_async_events], "async_events"));
	CHECK(!strcmp(sr_stat_name[SR_STAT_MAX - 1], "cm_req_held"));
}

int main(void)
{
	static struct sr_stats s0, s1, s2;
	char dumptmpl[128], cmd[128];

	sr_test_timeout(60);
	snprintf(dir, sizeof(dir), "/tmp/sr-test-stats-XXXXXX");
	REQUIRE(mkdtemp(dir));
	snprintf(subdir, sizeof(subdir), "%s/softrdma-%u", dir, (unsigned)geteuid());
	snprintf(dumptmpl, sizeof(dumptmpl), "%s/dump-%%p.txt", dir);
	setenv("SOFTRDMA_STATS_DIR", dir, 1);
	setenv("SOFTRDMA_STATS_DUMP", dumptmpl, 1);
	REQUIRE(!strcmp(sr_params()->stats_dir, dir));

	test_names();
	sr_stats_open(&s0, "test0", "127.0.0.1:4791");
	test_dir_mode();
	test_file_layout(&s0);
	test_stale(&s1);
	test_same_name(&s2);
	test_exit_hook(&s1);
	test_close_and_dump(&s0, &s2);
	sr_stats_close(&s1, "test1");
	check_dir_empty();
	test_fallback();

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (!sr_test_failures)
		CHECK_EQ(system(cmd), 0);
	return sr_test_done("test_stats");
}
