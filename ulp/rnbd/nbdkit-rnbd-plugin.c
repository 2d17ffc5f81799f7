/* SPDX-License-Identifier: MIT */
/*
 * nbdkit-rnbd-plugin: the RNBD client as an nbdkit plugin, so every NBD program (qemu-img,
 * nbdcopy, nbdfuse, fio's nbd engine, nbd-client) uses a remote RNBD device.
 *
 *   nbdkit .../nbdkit-rnbd-plugin.so session=NAME path=ADDR [path=ADDR...] device=NAME \
 *          [access=ro|rw|migration]
 *   nbdkit .../nbdkit-rnbd-plugin.so local=DIR device=NAME [session=NAME] [access=...]
 *
 * local=DIR runs the RNBD server in the plugin's process (exporting DIR), messages passed by
 * function call: the whole RNBD path without a network, for tests and trials.
 *
 * One RNBD session and one open of the device per nbdkit process (made after nbdkit forks),
 * shared by every NBD connection: parallel thread model, multi-conn safe (a FLUSH on any
 * connection is an fdatasync of the whole device on the server).
 */
#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "rnbd-clt.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL

#define MAX_PATHS 8

static const char *sessname = "nbdkit-rnbd";
static const char *paths[MAX_PATHS];
static unsigned npaths;
static const char *device;
static const char *local_dir;
static unsigned access_mode = RNBD_ACCESS_RW;
static const char *stats_file;
/* stats_dir, heartbeats, ... */
static struct rnbd_rtrs_opts rtrs_opts = { .wait_poll_us = -1, .poll_inflight_max = -1 };
static pthread_t stats_thread;
static bool stats_running;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stats_cv = PTHREAD_COND_INITIALIZER;

static struct rnbd_clt *clt;

static int rnbd_config(const char *key, const char *value)
{
	if (!strcmp(key, "session")) {
		sessname = value;
	} else if (!strcmp(key, "path")) {
		if (npaths == MAX_PATHS) {
			nbdkit_error("at most %d path= keys", MAX_PATHS);
			return -1;
		}
		paths[npaths++] = value;
	} else if (!strcmp(key, "device")) {
		device = value;
	} else if (!strcmp(key, "rtrs_stats_dir")) {
		rtrs_opts.stats_dir = value;
	} else if (!strcmp(key, "hb_interval_ms")) {
		rtrs_opts.hb_interval_ms = atoi(value);
	} else if (!strcmp(key, "hb_missed")) {
		rtrs_opts.hb_missed_max = atoi(value);
	} else if (!strcmp(key, "reconnect_delay_ms")) {
		rtrs_opts.reconnect_delay_ms = atoi(value);
	} else if (!strcmp(key, "fail_timeout_ms")) {
		rtrs_opts.fail_timeout_ms = atoi(value);
	} else if (!strcmp(key, "wait_poll_us")) {
		rtrs_opts.wait_poll_us = atoi(value);
		if (rtrs_opts.wait_poll_us < 0 || rtrs_opts.wait_poll_us > 1000000) {
			nbdkit_error("wait_poll_us=%s: 0..1000000", value);
			return -1;
		}
	} else if (!strcmp(key, "poll_inflight_max")) {
		rtrs_opts.poll_inflight_max = atoi(value);
		if (rtrs_opts.poll_inflight_max < 0 || rtrs_opts.poll_inflight_max > 65535) {
			nbdkit_error("poll_inflight_max=%s: 0..65535", value);
			return -1;
		}
	} else if (!strcmp(key, "zero_copy")) {
		rtrs_opts.no_zero_copy = !strcmp(value, "0") || !strcmp(value, "off");
	} else if (!strcmp(key, "stats")) {
		stats_file = value;
	} else if (!strcmp(key, "local")) {
		local_dir = value;
	} else if (!strcmp(key, "access")) {
		if (!strcmp(value, "ro"))
			access_mode = RNBD_ACCESS_RO;
		else if (!strcmp(value, "rw"))
			access_mode = RNBD_ACCESS_RW;
		else if (!strcmp(value, "migration"))
			access_mode = RNBD_ACCESS_MIGRATION;
		else {
			nbdkit_error("access=%s: ro, rw or migration", value);
			return -1;
		}
	} else {
		nbdkit_error("unknown parameter '%s'", key);
		return -1;
	}
	return 0;
}

static int rnbd_config_complete(void)
{
	if (!device) {
		nbdkit_error("device=NAME is required");
		return -1;
	}
	if (!local_dir && npaths == 0) {
		nbdkit_error("path=ADDR (one per path) or local=DIR is required");
		return -1;
	}
	if (local_dir && npaths) {
		nbdkit_error("local= and path= exclude each other");
		return -1;
	}
#ifndef RNBD_HAVE_RTRS
	if (!local_dir) {
		nbdkit_error("path=: this build has no RTRS transport (ulp/rtrs)");
		errno = EOPNOTSUPP;
		return -1;
	}
#endif
	return 0;
}

#define rnbd_config_help \
	"session=NAME             RTRS session name (default nbdkit-rnbd)\n" \
	"path=[SRC@]DST[:PORT]    one RTRS path (repeat for more)\n" \
	"device=NAME              device to open, relative to the server's search path\n" \
	"access=ro|rw|migration   access mode (default rw)\n" \
	"local=DIR                run the RNBD server in this process, exporting DIR\n" \
	"stats=FILE               the counters, rewritten every second while nbdkit runs\n" \
	"rtrs_stats_dir=DIR       where RTRS writes its per-path counters\n" \
	"hb_interval_ms=N hb_missed=N reconnect_delay_ms=N   RTRS heartbeats and reconnects\n" \
	"fail_timeout_ms=N        a request no path takes fails after N ms (RTRS: 30000)\n" \
	"wait_poll_us=N           a request alone in flight: its thread polls for the answer\n" \
	"                         up to N us before it sleeps (default 1000; 0: never)\n" \
	"poll_inflight_max=N      RTRS's thread polls on after an answer only while at most\n" \
	"                         N requests are in flight (default 1; 0: no limit)\n" \
	"zero_copy=0|1            requests in nbdkit's buffers, no RTRS bounce copy, where\n" \
	"                         the device has implicit ODP (default 1)"

/* The counters to stats_file (written beside it, then renamed: a reader sees whole files). */
static void stats_write(void)
{
	char tmp[4096];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", stats_file);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "session %s\ndevice %s\naccess %s\n", sessname, device,
		rnbd_access_mode_str(access_mode));
	rnbd_clt_stats_print(clt, f);
	if (fclose(f) == 0)
		rename(tmp, stats_file);
}

static void *stats_main(void *arg)
{
	struct timespec t;

	pthread_mutex_lock(&stats_lock);
	while (stats_running) {
		stats_write();
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_sec += 1;
		pthread_cond_timedwait(&stats_cv, &stats_lock, &t);
	}
	stats_write();
	pthread_mutex_unlock(&stats_lock);
	return NULL;
}

static int rnbd_after_fork(void)
{
	const struct rnbd_xport_ops *ops;
	void *ctx;
	int rc;

#ifdef RNBD_HAVE_RTRS
	if (!local_dir)
		rc = rnbd_rtrs_new(sessname, paths, npaths, &rtrs_opts, &ops, &ctx);
	else
#endif
		rc = rnbd_local_new(local_dir, sessname, &ops, &ctx);
	if (rc) {
		nbdkit_error("rnbd: transport: %s", strerror(-rc));
		return -1;
	}
	rc = rnbd_clt_new(ops, ctx, &clt);
	if (rc) {
		nbdkit_error("rnbd: session %s: %s", sessname, strerror(-rc));
		return -1;
	}
	rc = rnbd_clt_open(clt, device, access_mode);
	if (rc) {
		nbdkit_error("rnbd: open %s (%s): %s", device, rnbd_access_mode_str(access_mode),
			     strerror(-rc));
		rnbd_clt_free(clt);
		clt = NULL;
		return -1;
	}
	nbdkit_debug("rnbd: %s open, id %u, %llu sectors, max io %u", device, clt->a.device_id,
		     (unsigned long long)clt->a.nsectors, clt->max_io);
	if (stats_file) {
		stats_running = true;
		if (pthread_create(&stats_thread, NULL, stats_main, NULL))
			stats_running = false;
	}
	return 0;
}

static void rnbd_cleanup(void)
{
	if (stats_running) {
		pthread_mutex_lock(&stats_lock);
		stats_running = false;
		pthread_cond_signal(&stats_cv);
		pthread_mutex_unlock(&stats_lock);
		pthread_join(stats_thread, NULL);
	}
	if (clt) {
		rnbd_clt_close(clt);
		rnbd_clt_free(clt);
		clt = NULL;
	}
}

static void *rnbd_open(int readonly)
{
	if (!clt) {
		nbdkit_error("rnbd: no session");
		return NULL;
	}
	return clt;
}

static int64_t rnbd_get_size(void *h)
{
	return (int64_t)(clt->a.nsectors << RNBD_SECTOR_SHIFT);
}

static int rnbd_block_size(void *h, uint32_t *minimum, uint32_t *preferred, uint32_t *maximum)
{
	*minimum = clt->a.logical_block_size;
	*preferred = clt->a.physical_block_size > 4096 ? clt->a.physical_block_size : 4096;
	*maximum = 0xffffffff;	/* requests are split at max_io here */
	return 0;
}

static int rnbd_can_write(void *h) { return access_mode != RNBD_ACCESS_RO; }
static int rnbd_can_flush(void *h) { return 1; }
static int rnbd_can_fua(void *h) { return NBDKIT_FUA_NATIVE; }
static int rnbd_can_multi_conn(void *h) { return 1; }
static int rnbd_can_trim(void *h) { return clt->a.max_discard_sectors != 0; }
static int rnbd_can_zero(void *h) { return 1; }
static int rnbd_is_rotational(void *h) { return 0; }

/* The errno NBD carries: its own set (EPERM EIO ENOMEM EINVAL ENOSPC EOVERFLOW ENOTSUP
 * ESHUTDOWN); a transport's (ENOTCONN, ETIMEDOUT, ECONNABORTED, ...) is an EIO to the client. */
static int fail(int rc)
{
	int e = rc < 0 ? -rc : rc;

	nbdkit_debug("rnbd: request failed: %s", strerror(e));
	switch (e) {
	case EPERM: case EIO: case ENOMEM: case EINVAL: case ENOSPC: case EOVERFLOW:
	case EOPNOTSUPP: case EROFS:
		break;
	default:
		e = EIO;
	}
	nbdkit_set_error(e);
	return -1;
}

static int rnbd_pread(void *h, void *buf, uint32_t count, uint64_t offset, uint32_t flags)
{
	int rc = rnbd_clt_pread(clt, buf, count, offset);
	return rc ? fail(rc) : 0;
}

static int rnbd_pwrite(void *h, const void *buf, uint32_t count, uint64_t offset, uint32_t flags)
{
	int rc = rnbd_clt_pwrite(clt, buf, count, offset, flags & NBDKIT_FLAG_FUA ? RNBD_F_FUA : 0);
	return rc ? fail(rc) : 0;
}

static int rnbd_flush(void *h, uint32_t flags)
{
	int rc = rnbd_clt_io(clt, RNBD_OP_FLUSH, 0, 0, NULL);
	return rc ? fail(rc) : 0;
}

static int rnbd_trim(void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
	int rc = rnbd_clt_trim(clt, count, offset, flags & NBDKIT_FLAG_FUA ? RNBD_F_FUA : 0);
	return rc ? fail(rc) : 0;
}

static int rnbd_zero(void *h, uint32_t count, uint64_t offset, uint32_t flags)
{
	int rc;

	if (flags & NBDKIT_FLAG_FAST_ZERO)
		return fail(EOPNOTSUPP);
	rc = rnbd_clt_zero(clt, count, offset, flags & NBDKIT_FLAG_FUA ? RNBD_F_FUA : 0);
	return rc ? fail(rc) : 0;
}

static struct nbdkit_plugin plugin = {
	.name = "rnbd",
	.longname = "softrdma RNBD client",
	.version = "0.1",
	.description = "RNBD (RDMA network block device) client: a remote RNBD device over NBD",
	.config = rnbd_config,
	.config_complete = rnbd_config_complete,
	.config_help = rnbd_config_help,
	.magic_config_key = "device",
	.after_fork = rnbd_after_fork,
	.cleanup = rnbd_cleanup,
	.open = rnbd_open,
	.get_size = rnbd_get_size,
	.block_size = rnbd_block_size,
	.can_write = rnbd_can_write,
	.can_flush = rnbd_can_flush,
	.can_fua = rnbd_can_fua,
	.can_multi_conn = rnbd_can_multi_conn,
	.can_trim = rnbd_can_trim,
	.can_zero = rnbd_can_zero,
	.is_rotational = rnbd_is_rotational,
	.pread = rnbd_pread,
	.pwrite = rnbd_pwrite,
	.flush = rnbd_flush,
	.trim = rnbd_trim,
	.zero = rnbd_zero,
	.errno_is_preserved = 0,
};

NBDKIT_REGISTER_PLUGIN(plugin)
