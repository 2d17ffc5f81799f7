/* SPDX-License-Identifier: MIT */
/*
 * The pcap tap: every packet the stack sends or receives, written with real IPv4/IPv6 and UDP
 * headers (LINKTYPE_RAW) so Wireshark decodes it as RoCEv2 with no configuration.
 *
 * Classic pcap, nanosecond timestamps, host byte order. Each record reaches the file with one
 * writev(), so a process killed at any moment leaves a readable capture (at worst missing the
 * record being written). Thread-safe. Depends on libc and src/wire only.
 */
#ifndef SR_NET_PCAP_H
#define SR_NET_PCAP_H

#include <stdint.h>
#include <sys/uio.h>

#include "wire/icrc.h"

#define SR_PCAP_LINKTYPE_RAW 101	/* records are bare IPv4 or IPv6 packets */
#define SR_PCAP_SNAPLEN 262144u	/* records longer than this are truncated */

struct sr_pcap;

/*
 * Creates (truncates) the file at `path`, in which "%p" becomes the process id and "%%" a
 * percent sign, and writes the file header. NULL with errno set on failure.
 */
struct sr_pcap *sr_pcap_open(const char *path);

/*
 * Appends one record: the IP and UDP headers that sr_ipudp_build() makes from `ipu`, then the
 * UDP payload (BTH .. ICRC) gathered from iov[0..iovcnt). A NULL tap does nothing, so a caller
 * can pass its tap pointer unconditionally. After a write error the tap stops writing (the
 * file keeps the complete records before it) and counts what it drops.
 */
void sr_pcap_write(struct sr_pcap *pc, const struct sr_ipudp *ipu, const struct iovec *iov,
		   int iovcnt);

/* Records written, and records dropped after an error. */
uint64_t sr_pcap_records(const struct sr_pcap *pc);
uint64_t sr_pcap_dropped(const struct sr_pcap *pc);

/* Closes the file and frees the tap. No writer may be running. NULL is ignored. */
void sr_pcap_close(struct sr_pcap *pc);

#endif /* SR_NET_PCAP_H */
