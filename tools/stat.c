/* SPDX-License-Identifier: MIT */
/*
 * softrdma stat: reads the live counter files of every process using softrdma.
 *
 * The files are written by other processes, possibly buggy or hostile ones (anything of our
 * uid can write the directory), so every size, count and offset read from them is checked
 * against what was actually read, and every string is shown with unprintable bytes replaced.
 * A file is read with read(2) into our own buffer rather than mapped: a writer truncating a
 * mapped file would kill us with SIGBUS.
 */
#include "cli.h"

#include "core/param.h"
#include "core/stats.h"
#include "softrdma/stats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Far beyond anything we write (a few KiB); a bigger file is not ours. */
#define STAT_FILE_MAX (16u << 20)
#define STAT_COUNTERS_MAX 65536u
#define STAT_NAME_MAX 256u

struct stat_entry {
	char file[256];
	int pid;
	unsigned major, minor;
	uint64_t start_ns;
	char dev[SOFTRDMA_STAT_DEVNAME_LEN];
	char ident[SOFTRDMA_STAT_IDENT_LEN];
	uint32_t n;
	size_t name_w;		/* bytes per entry of names, including the NUL */
	char *names;		/* n printable, NUL-terminated names */
	uint64_t *values;
};

static void entry_free(struct stat_entry *e)
{
	free(e->names);
	free(e->values);
	e->names = NULL;
	e->values = NULL;
}

/* Validates the file image buf[0..len) and fills e. Returns NULL, or why it was rejected. */
static const char *stat_parse(const char *buf, size_t len, struct stat_entry *e, char *why,
			      size_t why_size)
{
	struct softrdma_stat_file_hdr h;
	uint64_t names_end, values_end;

	if (len < SOFTRDMA_STAT_HDR_V1_0_SIZE)
		return "too short for a stat file header";
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, SOFTRDMA_STAT_MAGIC, SOFTRDMA_STAT_MAGIC_LEN))
		return "not a softrdma stat file (bad magic)";
	if (h.version_major != SOFTRDMA_STAT_VERSION_MAJOR) {
		snprintf(why, why_size, "format version %u.%u, this softrdma reads %d.x",
			 h.version_major, h.version_minor, SOFTRDMA_STAT_VERSION_MAJOR);
		return why;
	}
	/* Any minor is fine: newer ones only append to the header. */
	if (h.hdr_size < SOFTRDMA_STAT_HDR_V1_0_SIZE || h.hdr_size > len)
		return "bad header size";
	if (h.file_size > len)
		return "truncated";
	if (h.num_counters > STAT_COUNTERS_MAX)
		return "absurd number of counters";
	if (h.name_len == 0 || h.name_len > STAT_NAME_MAX)
		return "bad counter name length";
	names_end = (uint64_t)h.names_off + (uint64_t)h.num_counters * h.name_len;
	values_end = (uint64_t)h.values_off + (uint64_t)h.num_counters * sizeof(uint64_t);
	if (h.names_off < SOFTRDMA_STAT_HDR_V1_0_SIZE || names_end > len)
		return "counter names out of bounds";
	if (h.values_off % 8 || h.values_off < SOFTRDMA_STAT_HDR_V1_0_SIZE || values_end > len)
		return "counter values out of bounds or misaligned";

	e->pid = h.pid;
	e->major = h.version_major;
	e->minor = h.version_minor;
	e->start_ns = h.start_time_ns;
	cli_printable(e->dev, sizeof(e->dev), h.devname, sizeof(h.devname));
	cli_printable(e->ident, sizeof(e->ident), h.ident, sizeof(h.ident));
	e->n = h.num_counters;
	e->name_w = h.name_len + 1;
	e->names = calloc(e->n ? e->n : 1, e->name_w);
	e->values = calloc(e->n ? e->n : 1, sizeof(uint64_t));
	if (!e->names || !e->values) {
		entry_free(e);
		return "out of memory";
	}
	for (uint32_t i = 0; i < e->n; i++) {
		cli_printable(e->names + i * e->name_w, e->name_w,
			      buf + h.names_off + (size_t)i * h.name_len, h.name_len);
		memcpy(&e->values[i], buf + h.values_off + (size_t)i * sizeof(uint64_t),
		       sizeof(uint64_t));
	}
	return NULL;
}

/* 1 when the writer lives. Its shared flock says so; without flock support, ask kill(). */
static bool stat_alive(int fd, int pid)
{
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		return false;
	if (errno == EWOULDBLOCK)
		return true;
	return !(pid > 0 && kill(pid, 0) && errno == ESRCH);
}

static char *read_file(int fd, size_t size, size_t *len)
{
	char *buf = malloc(size ? size : 1);
	size_t got = 0;

	if (!buf)
		return NULL;
	while (got < size) {
		ssize_t n = read(fd, buf + got, size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;	/* shrank under us: the parser sees what is there */
		got += n;
	}
	*len = got;
	return buf;
}

/* Reads one file into e. 1: shown, 0: skipped (dead, removed; or rejected, reported). */
static int stat_load(int dfd, const char *name, struct stat_entry *e)
{
	char why[128], shown[256];
	const char *bad = "not a regular file of ours";
	struct stat st, now;
	size_t len = 0;
	char *buf;
	int fd;

	memset(e, 0, sizeof(*e));
	snprintf(e->file, sizeof(e->file), "%s", name);
	/* O_NONBLOCK: a FIFO named *.stat must not hang us before fstat says what it is. */
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)	/* its process just closed it */
			return 0;
		cli_printable(shown, sizeof(shown), name, strlen(name));
		fprintf(stderr, "softrdma stat: skipping %s: %s\n", shown,
			errno == ELOOP ? "a symbolic link" : strerror(errno));
		return 0;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
		goto reject;
	bad = "too large for a stat file";
	if ((uint64_t)st.st_size > STAT_FILE_MAX)
		goto reject;
	buf = read_file(fd, st.st_size, &len);
	bad = buf ? stat_parse(buf, len, e, why, sizeof(why)) : "out of memory";
	free(buf);
	if (bad)
		goto reject;
	if (!stat_alive(fd, e->pid)) {
		/* Left by a process that died without closing its device. Still holding the
		 * exclusive lock, check that the name is still this file before removing it. */
		if (!fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) && now.st_ino == st.st_ino &&
		    now.st_dev == st.st_dev)
			unlinkat(dfd, name, 0);
		entry_free(e);
		close(fd);
		return 0;
	}
	close(fd);
	return 1;

reject:
	cli_printable(shown, sizeof(shown), name, strlen(name));
	fprintf(stderr, "softrdma stat: skipping %s: %s\n", shown, bad);
	close(fd);
	return 0;
}

static int entry_cmp(const void *a, const void *b)
{
	const struct stat_entry *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (strcmp(x->dev, y->dev))
		return strcmp(x->dev, y->dev);
	return strcmp(x->file, y->file);
}

static void entry_print(const struct stat_entry *e, bool all)
{
	time_t t = (time_t)(e->start_ns / 1000000000ULL);
	char when[64] = "?";
	struct tm tm;
	int w = 8, shown = 0;

	if (localtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	printf("pid %d  %s  %s  (started %s", e->pid, e->dev[0] ? e->dev : "?",
	       e->ident[0] ? e->ident : "?", when);
	if (e->major != SOFTRDMA_STAT_VERSION_MAJOR || e->minor != SOFTRDMA_STAT_VERSION_MINOR)
		printf(", file format %u.%u", e->major, e->minor);
	puts(")");
	for (uint32_t i = 0; i < e->n; i++) {
		int l = strlen(e->names + i * e->name_w);

		w = l > w ? l : w;
	}
	for (uint32_t i = 0; i < e->n; i++) {
		if (!all && !e->values[i])
			continue;
		printf("    %-*s %20" PRIu64 "\n", w, e->names + i * e->name_w, e->values[i]);
		shown++;
	}
	if (!shown)
		puts("    (every counter is zero)");
}

static int stat_doc(bool markdown)
{
	int w = 0;

	if (markdown) {
		puts("| Counter | Meaning |\n|---|---|");
		for (int i = 0; i < SR_STAT_MAX; i++) {
			printf("| `%s` | ", sr_stat_name[i]);
			cli_md_cell(sr_stat_doc[i]);
			puts(" |");
		}
		return CLI_OK;
	}
	for (int i = 0; i < SR_STAT_MAX; i++) {
		int l = strlen(sr_stat_name[i]);

		w = l > w ? l : w;
	}
	for (int i = 0; i < SR_STAT_MAX; i++)
		printf("%-*s  %s\n", w, sr_stat_name[i], sr_stat_doc[i]);
	return CLI_OK;
}

/* <stats_dir>/softrdma-<uid>, if it is a directory of ours (not something planted). */
static int stat_dir_open(char *path, size_t size)
{
	struct stat st;
	int dfd;

	snprintf(path, size, "%s/" SOFTRDMA_STAT_SUBDIR_PREFIX "%u", sr_params()->stats_dir,
		 (unsigned)geteuid());
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	if (fstat(dfd, &st) || st.st_uid != geteuid()) {
		close(dfd);
		return -EPERM;
	}
	return dfd;
}

static bool is_stat_name(const char *n)
{
	size_t l = strlen(n), s = strlen(SOFTRDMA_STAT_SUFFIX);

	/* Dot files are the writers' temporaries. */
	return n[0] != '.' && l > s && !strcmp(n + l - s, SOFTRDMA_STAT_SUFFIX);
}

int cmd_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "doc", no_argument, NULL, 'd' },
		{ "markdown", no_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool all = false, doc = false, markdown = false;
	struct stat_entry *ents = NULL;
	size_t n = 0, cap = 0;
	char path[4096], *end;
	struct dirent *d;
	long want = 0;
	int c, dfd;
	DIR *dp;

	optind = 1;
	opterr = 0;	/* our own message, with the command's name */
	while ((c = getopt_long(argc, argv, "+ah", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			all = true;
			break;
		case 'd':
			doc = true;
			break;
		case 'm':
			markdown = true;
			break;
		case 'h':
			cli_usage(stdout);
			return CLI_OK;
		default:
			return cli_usage_error("stat", "bad option \"%s\"", argv[optind - 1]);
		}
	}
	if (markdown && !doc)
		return cli_usage_error("stat", "--markdown goes with --doc");
	if (doc)
		return optind < argc ? cli_usage_error("stat", "--doc takes no argument")
				     : stat_doc(markdown);
	if (optind < argc) {
		errno = 0;
		want = strtol(argv[optind], &end, 10);
		if (errno || end == argv[optind] || *end || want <= 0 || want > INT32_MAX)
			return cli_usage_error("stat", "\"%s\" is not a process id", argv[optind]);
		if (++optind < argc)
			return cli_usage_error("stat", "unexpected argument \"%s\"", argv[optind]);
	}

	dfd = stat_dir_open(path, sizeof(path));
	if (dfd < 0 && dfd != -ENOENT) {
		fprintf(stderr, "softrdma stat: %s: %s\n", path, strerror(-dfd));
		return CLI_FAIL;
	}
	dp = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (dfd >= 0 && !dp) {
		fprintf(stderr, "softrdma stat: %s: %s\n", path, strerror(errno));
		close(dfd);
		return CLI_FAIL;
	}
	while (dp && (d = readdir(dp))) {
		if (!is_stat_name(d->d_name))
			continue;
		if (n == cap) {
			struct stat_entry *m = realloc(ents, (cap = cap ? 2 * cap : 16) * sizeof(*m));

			if (!m)
				break;
			ents = m;
		}
		if (stat_load(dirfd(dp), d->d_name, &ents[n])) {
			if (want && ents[n].pid != want)
				entry_free(&ents[n]);
			else
				n++;
		}
	}
	if (dp)
		closedir(dp);

	if (n)
		qsort(ents, n, sizeof(*ents), entry_cmp);
	for (size_t i = 0; i < n; i++) {
		if (i)
			putchar('\n');
		entry_print(&ents[i], all);
		entry_free(&ents[i]);
	}
	free(ents);
	if (!n && want) {
		fprintf(stderr, "softrdma stat: process %ld has no softrdma device open\n", want);
		return CLI_FAIL;
	}
	if (!n)
		printf("no softrdma device is open (looked in %s)\n", path);
	return CLI_OK;
}
