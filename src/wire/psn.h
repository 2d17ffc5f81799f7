/* SPDX-License-Identifier: MIT */
/*
 * 24-bit PSN arithmetic (IBA 9.7.1). PSNs live in a circular space of 2^24; "a before b" means
 * the signed 24-bit distance b - a is positive. Half the space (2^23) is the ordering horizon.
 */
#ifndef SR_WIRE_PSN_H
#define SR_WIRE_PSN_H

#include <stdbool.h>
#include <stdint.h>

#define SR_PSN_MASK 0x00ffffffu
#define SR_PSN_HALF 0x00800000u

static inline uint32_t sr_psn_add(uint32_t psn, int32_t n) { return (psn + (uint32_t)n) & SR_PSN_MASK; }
static inline uint32_t sr_psn_next(uint32_t psn) { return (psn + 1) & SR_PSN_MASK; }
/* Signed distance a - b, in [-2^23, 2^23). */
static inline int32_t sr_psn_diff(uint32_t a, uint32_t b) { return (int32_t)((a - b) << 8) >> 8; }
static inline bool sr_psn_lt(uint32_t a, uint32_t b) { return sr_psn_diff(a, b) < 0; }
static inline bool sr_psn_le(uint32_t a, uint32_t b) { return sr_psn_diff(a, b) <= 0; }
static inline bool sr_psn_gt(uint32_t a, uint32_t b) { return sr_psn_diff(a, b) > 0; }
static inline bool sr_psn_ge(uint32_t a, uint32_t b) { return sr_psn_diff(a, b) >= 0; }
/* a in [lo, hi] (inclusive, circular) */
static inline bool sr_psn_in(uint32_t a, uint32_t lo, uint32_t hi)
{
	return sr_psn_ge(a, lo) && sr_psn_le(a, hi);
}

#endif /* SR_WIRE_PSN_H */
