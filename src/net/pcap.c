// SPDX-License-Identifier: MIT
/*
 * The pcap tap (see pcap.h). File format: the classic libpcap format, nanosecond variant
 * (magic 0xa1b23c4d), written in host byte order as every reader expects.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/fd.h"
#include "net/pcap.h"

#define SR_PCAP_MAGIC_NSEC 0xa1b23c4du
#define SR_PCAP_IOV_MAX 64	/* payload pieces sent straight to writev(); more are copied */
#define SR_IPUDP_MAX 48		/* IPv6 + UDP */

struct sr_pcap_filehdr {
	uint32_t magic;
	uint16_t version_major, version_minor;
	int32_t thiszone;
	uint32_t sigfigs;
	uint32_t snaplen;
	uint32_t linktype;
};
_Static_assert(sizeof(struct sr_pcap_filehdr) == 24, "pcap file header is 24 bytes");

struct sr_pcap_rechdr {
	uint32_t ts_sec, ts_nsec;
	uint32_t incl_len, orig_len;
};
_Static_assert(sizeof(struct sr_pcap_rechdr) == 16, "pcap record header is 16 bytes");

struct sr_pcap {
	pthread_mutex_t lock;
	int fd;			/* -1 after a write error */
	uint64_t records;	/* changed under lock, read without it (atomics) */
	uint64_t dropped;
};

/* Expands %p (pid) and %% in `path`. -1 with ENAMETOOLONG when it does not fit. */
static int expand_path(char *out, size_t outlen, const char *path)
{
	size_t n = 0;

	for (const char *s = path; *s; s++) {
		char pid[24];
		const char *add = pid;

		if (s[0] == '%' && s[1] == 'p') {
			snprintf(pid, sizeof(pid), "%ld", (long)getpid());
			s++;
		} else if (s[0] == '%' && s[1] == '%') {
			add = "%";
			s++;
		} else {
			pid[0] = *s;
			pid[1] = '\0';
		}
		if (n + strlen(add) >= outlen) {
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(out + n, add, strlen(add));
		n += strlen(add);
	}
	out[n] = '\0';
	return 0;
}

/* writev() until everything is written; -1 on an error (iov is consumed). Raw system calls
 * here and in write_record: libc's are cancellation points, and the receive path captures
 * (and sends ACKs) under the NIC's receive lock (engine/nic.c, sr_nic_poll_at). */
static int writev_all(int fd, struct iovec *iov, int cnt)
{
	while (cnt > 0) {
		ssize_t w = (ssize_t)syscall(SYS_writev, fd, iov, cnt);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		while (cnt > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

struct sr_pcap *sr_pcap_open(const char *path)
{
	struct sr_pcap_filehdr fh = {
		.magic = SR_PCAP_MAGIC_NSEC,
		.version_major = 2,
		.version_minor = 4,
		.snaplen = SR_PCAP_SNAPLEN,
		.linktype = SR_PCAP_LINKTYPE_RAW,
	};
	struct iovec iov = { .iov_base = &fh, .iov_len = sizeof(fh) };
	char name[PATH_MAX];
	struct sr_pcap *pc;
	int err;

	if (expand_path(name, sizeof(name), path))
		return NULL;
	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return NULL;
	pc->fd = sr_fd_high(open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	if (pc->fd < 0)
		goto free_pc;
	if (writev_all(pc->fd, &iov, 1))
		goto close_fd;
	pthread_mutex_init(&pc->lock, NULL);
	return pc;

close_fd:
	err = errno;
	close(pc->fd);
	errno = err;
free_pc:
	err = errno;
	free(pc);
	errno = err;
	return NULL;
}

/*
 * Fills out[] with the payload pieces, at most `room` bytes in all. Pieces beyond
 * SR_PCAP_IOV_MAX - 1 are copied into *heap (freed by the caller). Returns the count, or -1.
 */
static int gather(struct iovec *out, const struct iovec *iov, int iovcnt, size_t room,
		  void **heap)
{
	int n = 0;

	for (int i = 0; i < iovcnt && room; i++) {
		size_t take = iov[i].iov_len < room ? iov[i].iov_len : room;

		if (n == SR_PCAP_IOV_MAX - 1) {		/* last slot: copy the rest */
			uint8_t *p = *heap = malloc(room);

			if (!p)
				return -1;
			out[n].iov_base = p;
			for (; i < iovcnt && room; i++) {
				take = iov[i].iov_len < room ? iov[i].iov_len : room;
				memcpy(p, iov[i].iov_base, take);
				p += take;
				room -= take;
			}
			out[n].iov_len = (size_t)(p - (uint8_t *)out[n].iov_base);
			return n + 1;
		}
		out[n].iov_base = iov[i].iov_base;
		out[n++].iov_len = take;
		room -= take;
	}
	return n;
}

static void write_record(struct sr_pcap *pc, const struct sr_ipudp *ipu, const struct iovec *iov,
			 int iovcnt)
{
	struct {
		struct sr_pcap_rechdr rh;
		uint8_t ipudp[SR_IPUDP_MAX];
	} __attribute__((packed)) head;
	struct iovec out[1 + SR_PCAP_IOV_MAX];
	struct timespec ts;
	size_t paylen = 0, hlen, orig;
	void *heap = NULL;
	int n;

	for (int i = 0; i < iovcnt; i++)
		paylen += iov[i].iov_len;
	hlen = sr_ipudp_build(head.ipudp, ipu, paylen, iov, iovcnt);
	orig = hlen + paylen;
	clock_gettime(CLOCK_REALTIME, &ts);
	head.rh.ts_sec = (uint32_t)ts.tv_sec;
	head.rh.ts_nsec = (uint32_t)ts.tv_nsec;
	head.rh.orig_len = orig > UINT32_MAX ? UINT32_MAX : (uint32_t)orig;
	head.rh.incl_len = orig > SR_PCAP_SNAPLEN ? SR_PCAP_SNAPLEN : (uint32_t)orig;
	out[0].iov_base = &head;
	out[0].iov_len = sizeof(head.rh) + hlen;
	n = gather(out + 1, iov, iovcnt, head.rh.incl_len - hlen, &heap);
	if (n < 0 || writev_all(pc->fd, out, 1 + n)) {
		/* A partial record may be on disk: stop here so everything before it stays valid. */
		(void)syscall(SYS_close, pc->fd);
		pc->fd = -1;
		__atomic_fetch_add(&pc->dropped, 1, __ATOMIC_RELAXED);
	} else {
		__atomic_fetch_add(&pc->records, 1, __ATOMIC_RELAXED);
	}
	free(heap);
}

void sr_pcap_write(struct sr_pcap *pc, const struct sr_ipudp *ipu, const struct iovec *iov,
		   int iovcnt)
{
	if (!pc)
		return;
	pthread_mutex_lock(&pc->lock);
	if (pc->fd < 0)
		__atomic_fetch_add(&pc->dropped, 1, __ATOMIC_RELAXED);
	else
		write_record(pc, ipu, iov, iovcnt);
	pthread_mutex_unlock(&pc->lock);
}

uint64_t sr_pcap_records(const struct sr_pcap *pc)
{
	return pc ? __atomic_load_n(&pc->records, __ATOMIC_RELAXED) : 0;
}

uint64_t sr_pcap_dropped(const struct sr_pcap *pc)
{
	return pc ? __atomic_load_n(&pc->dropped, __ATOMIC_RELAXED) : 0;
}

void sr_pcap_close(struct sr_pcap *pc)
{
	if (!pc)
		return;
	if (pc->fd >= 0)
		close(pc->fd);
	pthread_mutex_destroy(&pc->lock);
	free(pc);
}
