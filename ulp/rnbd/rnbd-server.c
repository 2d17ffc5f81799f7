/* SPDX-License-Identifier: MIT */
/*
 * rnbd-server: exports the files and block devices under a search path over RTRS.
 *
 *   rnbd-server --search-path DIR [--listen ADDR] [--port 1234] [--max-io BYTES]
 *               [--queue-depth N] [--stats FILE] [--no-direct] [--sync-io auto|always|never]
 *
 * The RNBD logic is rnbd-srv.c and rnbd-dev.c; this file is the program around them: options,
 * the sessions RTRS brings (one rnbd_srv_sess each), counters written to --stats every second,
 * and a clean stop on SIGINT/SIGTERM.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rnbd-server.h"

static struct rnbd_server S;

void rnbd_server_add_sess(struct rnbd_server *s, struct rnbd_srv_sess *sess)
{
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < RNBD_SERVER_MAX_SESS; i++)
		if (!s->sess[i]) {
			s->sess[i] = sess;
			break;
		}
	pthread_mutex_unlock(&s->lock);
}

void rnbd_server_del_sess(struct rnbd_server *s, struct rnbd_srv_sess *sess)
{
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < RNBD_SERVER_MAX_SESS; i++)
		if (s->sess[i] == sess)
			s->sess[i] = NULL;
	pthread_mutex_unlock(&s->lock);
}

static void print_dev(void *arg, const char *path, unsigned opens, unsigned writers,
		      const struct rnbd_dev_stats *d)
{
	FILE *f = arg;

	fprintf(f, "device %s opens %u writers %u reads %llu writes %llu flushes %llu "
		"discards %llu write_zeroes %llu bytes_read %llu bytes_written %llu errors %llu "
		"refused %llu direct %llu buffered %llu sync %llu\n", path, opens, writers,
		(unsigned long long)d->reads, (unsigned long long)d->writes,
		(unsigned long long)d->flushes, (unsigned long long)d->discards,
		(unsigned long long)d->write_zeroes, (unsigned long long)d->bytes_read,
		(unsigned long long)d->bytes_written, (unsigned long long)d->errors,
		(unsigned long long)d->refused, (unsigned long long)d->direct_ios,
		(unsigned long long)d->buffered_ios, (unsigned long long)d->sync_ios);
}

static void stats_write(struct rnbd_server *s)
{
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", s->stats_file);
	f = fopen(tmp, "w");
	if (!f)
		return;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < RNBD_SERVER_MAX_SESS; i++) {
		struct rnbd_srv_counters c;
		if (!s->sess[i])
			continue;
		rnbd_srv_sess_counters(s->sess[i], &c);
		fprintf(f, "session %s msgs %llu bad_msgs %llu bad_dev_id %llu opens %llu "
			"open_refused %llu closes %llu ios %llu\n", rnbd_srv_sess_name(s->sess[i]),
			(unsigned long long)c.msgs, (unsigned long long)c.bad_msgs,
			(unsigned long long)c.bad_dev_id, (unsigned long long)c.opens,
			(unsigned long long)c.open_refused, (unsigned long long)c.closes,
			(unsigned long long)c.ios);
	}
	pthread_mutex_unlock(&s->lock);
	rnbd_store_foreach(s->st, print_dev, f);
	rnbd_server_xport_stats(s, f);
	if (fclose(f) == 0)
		rename(tmp, s->stats_file);
}

static volatile sig_atomic_t stop;
static void on_signal(int sig) { stop = 1; }

static void usage(FILE *f)
{
	fprintf(f, "usage: rnbd-server --search-path DIR [--listen ADDR] [--port PORT]\n"
		   "                   [--max-io BYTES] [--queue-depth N] [--stats FILE] [--no-direct]\n"
		   "                   [--sync-io auto|always|never] [--chunk-size BYTES]\n"
		   "                   [--sess-queue-depth N]\n"
		   "  --search-path DIR  export what is under DIR; %%SESSNAME%% in it: per session\n"
		   "  --listen ADDR      address to listen on (repeat: one per path; default: all)\n"
		   "  --hb-interval-ms N RTRS heartbeat interval\n"
		   "  --always-invalidate 0|1  RTRS chunk keys renewed per request (default 1;\n"
		   "                     0: one key for all chunks, docs/rtrs.md)\n"
		   "  --port PORT        RTRS port (default %d, the kernel's)\n"
		   "  --max-io BYTES     largest IO (default: the transport's)\n"
		   "  --chunk-size BYTES RTRS chunk: the largest IO is this less 4 KiB of header room\n"
		   "                     (default 131072, the kernel's; a power of two >= 8192)\n"
		   "  --sess-queue-depth N  RTRS chunks (requests in flight) per session (512)\n"
		   "  --stats FILE       counters, rewritten every second\n"
		   "  --sync-io MODE     IO done at once on the RTRS event thread: auto (devices in\n"
		   "                     memory: tmpfs, ramfs, RAM disks), always, never (io_uring)\n",
		   RNBD_RTRS_PORT);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "search-path", required_argument, 0, 's' }, { "listen", required_argument, 0, 'l' },
		{ "port", required_argument, 0, 'p' }, { "max-io", required_argument, 0, 'm' },
		{ "queue-depth", required_argument, 0, 'q' }, { "stats", required_argument, 0, 'S' },
		{ "no-direct", no_argument, 0, 'D' }, { "hb-interval-ms", required_argument, 0, 'H' },
		{ "always-invalidate", required_argument, 0, 'A' }, { "help", no_argument, 0, 'h' },
		{ "sync-io", required_argument, 0, 'Y' }, { "chunk-size", required_argument, 0, 'C' },
		{ "sess-queue-depth", required_argument, 0, 'Q' }, { 0 } };
	struct rnbd_store_opts so = { 0 };
	int c, rc;

	S.port = RNBD_RTRS_PORT;
	pthread_mutex_init(&S.lock, NULL);
	while ((c = getopt_long(argc, argv, "s:l:p:m:q:S:DH:A:Y:C:Q:h", opts, NULL)) != -1) {
		switch (c) {
		case 's': so.search_path = optarg; break;
		case 'l':
			if (S.nlisten == 8) {
				fprintf(stderr, "rnbd-server: at most 8 --listen\n");
				return 2;
			}
			S.listen_addr[S.nlisten++] = optarg;
			break;
		case 'H': S.hb_interval_ms = atoi(optarg); break;
		case 'A':
			if (strcmp(optarg, "0") && strcmp(optarg, "1")) {
				fprintf(stderr, "rnbd-server: --always-invalidate takes 0 or 1\n");
				return 2;
			}
			S.no_always_invalidate = !strcmp(optarg, "0");
			break;
		case 'p': S.port = atoi(optarg); break;
		case 'm': S.max_io = strtoul(optarg, NULL, 0); break;
		case 'q': so.queue_depth = atoi(optarg); break;
		case 'S': S.stats_file = optarg; break;
		case 'D': so.no_direct = true; break;
		case 'C': {
			unsigned long v = strtoul(optarg, NULL, 0);
			if (v < 8192 || v > (1ul << 24) || (v & (v - 1))) {
				fprintf(stderr, "rnbd-server: --chunk-size: a power of two, 8 KiB..16 MiB\n");
				return 2;
			}
			S.chunk_size = v;
			break;
		}
		case 'Q':
			S.sess_qd = atoi(optarg);
			if (S.sess_qd < 1 || S.sess_qd > 65535) {
				fprintf(stderr, "rnbd-server: --sess-queue-depth: 1..65535\n");
				return 2;
			}
			break;
		case 'Y':
			if (!strcmp(optarg, "auto"))
				so.sync_io = RNBD_SYNC_IO_AUTO;
			else if (!strcmp(optarg, "always"))
				so.sync_io = RNBD_SYNC_IO_ALWAYS;
			else if (!strcmp(optarg, "never"))
				so.sync_io = RNBD_SYNC_IO_NEVER;
			else {
				fprintf(stderr, "rnbd-server: --sync-io takes auto, always or never\n");
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!so.search_path || optind != argc) {
		usage(stderr);
		return 2;
	}
	so.max_io_bytes = S.max_io ? S.max_io : rnbd_server_max_io(&S);
	rc = rnbd_store_new(&so, &S.st);
	if (rc) {
		fprintf(stderr, "rnbd-server: %s: %s\n", so.search_path, strerror(-rc));
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	rc = rnbd_server_start(&S);
	if (rc) {
		fprintf(stderr, "rnbd-server: listening on port %d: %s\n", S.port, strerror(-rc));
		rnbd_store_free(S.st);
		return 1;
	}
	printf("rnbd-server: exporting %s on port %d\n", so.search_path, S.port);
	fflush(stdout);
	while (!stop) {
		if (S.stats_file)
			stats_write(&S);
		usleep(200 * 1000);
	}
	rnbd_server_stop(&S);	/* sessions closed: their devices too */
	if (S.stats_file)
		stats_write(&S);
	rnbd_store_free(S.st);
	return 0;
}
