/* SPDX-License-Identifier: MIT */
/*
 * Transmit-side fault injection, from the `fault` parameter:
 *   SOFTRDMA_FAULT="drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01,seed=42"
 *   SOFTRDMA_FAULT="delay=20000,jitter=5000,to=10.1.2.1"
 * drop, dup, reorder and corrupt are per-packet probabilities, decided in that order. "reorder"
 * holds a packet back and sends it after the next one (or after 1 ms if no other packet comes);
 * "corrupt" flips one bit of the packet (the receiver's ICRC check must catch it, but for BTH
 * byte 4, which the ICRC leaves out: FECN and BECN, which softrdma does not act on, and its
 * in-band offers, which a receiver keeps until two packets in a row change them). "after=N"
 * lets the first N packets through untouched: "drop=1,after=20000" is a link that dies in the
 * middle of a transfer.
 *
 * "delay=US" holds every packet (what the other faults let through, copies included) for US
 * microseconds, "jitter=US" adds a uniform [-US, +US] to each (never below zero). The delay
 * line is a FIFO: a packet never leaves before one sent earlier (due = max(its own time, the
 * previous packet's)), like a queue in a real path; reordering is the `reorder` knob's. At
 * most "limit=N" packets wait (default 1000, netem's); more are dropped and counted
 * (fault_delay_overflow). The progress thread sends them when due (sr_net_tick).
 *
 * "to=IP" applies all of it only to packets for that destination address (IPv4 or IPv6): one
 * process may talk over several paths, and only one of them is to be slow or lossy. Packets to
 * other addresses pass untouched and do not count towards `after`.
 */
#ifndef SR_NET_FAULT_H
#define SR_NET_FAULT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "wire/icrc.h"

enum sr_fault_act { SR_FAULT_PASS, SR_FAULT_DROP, SR_FAULT_DUP, SR_FAULT_REORDER, SR_FAULT_CORRUPT };

#define SR_FAULT_LIMIT_DEFAULT 1000u
#define SR_FAULT_LIMIT_MAX 1000000u

/* A packet in the delay line. */
struct sr_fault_pkt {
	uint8_t *buf;
	size_t len;
	uint64_t due;			/* ns */
	struct sockaddr_storage dst;
	socklen_t dlen;
	struct sr_ipudp tuple;
};

struct sr_fault {
	double drop, dup, reorder, corrupt;
	uint64_t after, sent;		/* faults start after `after` packets */
	uint64_t delay_ns, jitter_ns;	/* the delay line; both 0: none */
	uint32_t limit;			/* packets the delay line holds at most */
	uint8_t to_family;		/* 0: every destination; 4 or 6: only to_addr */
	uint8_t to_addr[16];
	uint64_t rng;
	pthread_mutex_t lock;		/* the RNG, the held packet and the delay line */
	uint8_t *held;			/* a packet waiting to be sent late (reorder) */
	size_t held_len;
	struct sockaddr_storage held_dst;
	socklen_t held_dlen;
	struct sr_ipudp held_tuple;
	uint64_t held_at;		/* ns */
	/* The delay line: a ring of `limit` slots (allocated at the first delayed packet), in
	 * order of due time. */
	struct sr_fault_pkt *q;
	uint32_t q_head, q_n;
	uint64_t q_last_due;		/* due time of the last packet queued (FIFO) */
};

/* NULL when spec is empty or has nothing to inject; *err set on a malformed spec. */
struct sr_fault *sr_fault_parse(const char *spec, int *err);
void sr_fault_free(struct sr_fault *f);
/* Whether the filter (to=) selects a packet for the destination of tuple t. */
bool sr_fault_selects(const struct sr_fault *f, const struct sr_ipudp *t);
enum sr_fault_act sr_fault_decide(struct sr_fault *f);	/* f->lock held */
uint32_t sr_fault_rand(struct sr_fault *f, uint32_t n);	/* uniform in [0, n); lock held */
/* The due time of a packet queued now (ns; FIFO after the ones queued before); lock held. */
uint64_t sr_fault_due(struct sr_fault *f, uint64_t now);
static inline bool sr_fault_delays(const struct sr_fault *f)
{
	return f->delay_ns || f->jitter_ns;
}

#endif /* SR_NET_FAULT_H */
