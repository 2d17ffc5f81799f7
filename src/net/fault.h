/* SPDX-License-Identifier: MIT */
/*
 * Transmit-side fault injection, from the `fault` parameter:
 *   SOFTRDMA_FAULT="drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01,seed=42"
 * Each is a per-packet probability, decided in that order. "reorder" holds a packet back and
 * sends it after the next one (or after 1 ms if no other packet comes); "corrupt" flips one bit
 * of the packet (the receiver's ICRC check must catch it). "after=N" lets the first N packets
 * through untouched: "drop=1,after=20000" is a link that dies in the middle of a transfer.
 */
#ifndef SR_NET_FAULT_H
#define SR_NET_FAULT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "wire/icrc.h"

enum sr_fault_act { SR_FAULT_PASS, SR_FAULT_DROP, SR_FAULT_DUP, SR_FAULT_REORDER, SR_FAULT_CORRUPT };

struct sr_fault {
	double drop, dup, reorder, corrupt;
	uint64_t after, sent;		/* faults start after `after` packets */
	uint64_t rng;
	pthread_mutex_t lock;		/* the RNG and the held packet */
	uint8_t *held;			/* a packet waiting to be sent late (reorder) */
	size_t held_len;
	struct sockaddr_storage held_dst;
	socklen_t held_dlen;
	struct sr_ipudp held_tuple;
	uint64_t held_at;		/* ns */
};

/* NULL when spec is empty or has nothing to inject; *err set on a malformed spec. */
struct sr_fault *sr_fault_parse(const char *spec, int *err);
void sr_fault_free(struct sr_fault *f);
enum sr_fault_act sr_fault_decide(struct sr_fault *f);	/* f->lock held */
uint32_t sr_fault_rand(struct sr_fault *f, uint32_t n);	/* uniform in [0, n); lock held */

#endif /* SR_NET_FAULT_H */
