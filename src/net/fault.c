/* SPDX-License-Identifier: MIT */
/* Fault injection: parsing the spec and deciding each packet's fate (see fault.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "net/fault.h"

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unit(struct sr_fault *f)
{
	return (double)(splitmix(&f->rng) >> 11) / (double)(1ull << 53);
}

uint32_t sr_fault_rand(struct sr_fault *f, uint32_t n)
{
	return n ? (uint32_t)(splitmix(&f->rng) % n) : 0;
}

struct sr_fault *sr_fault_parse(const char *spec, int *err)
{
	struct sr_fault *f;
	char *copy, *save = NULL;
	bool seeded = false, any = false;

	*err = 0;
	if (!spec || !*spec)
		return NULL;
	f = calloc(1, sizeof(*f));
	copy = strdup(spec);
	if (!f || !copy) {
		free(f);
		free(copy);
		*err = -ENOMEM;
		return NULL;
	}
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *end;
		double v;

		if (!eq)
			goto bad;
		*eq = 0;
		if (!strcmp(tok, "to")) {
			if (inet_pton(AF_INET, eq + 1, f->to_addr) == 1)
				f->to_family = 4;
			else if (inet_pton(AF_INET6, eq + 1, f->to_addr) == 1)
				f->to_family = 6;
			else
				goto bad;
			continue;
		}
		v = strtod(eq + 1, &end);
		if (end == eq + 1 || *end)
			goto bad;
		if (!strcmp(tok, "seed")) {
			f->rng = (uint64_t)v;
			seeded = true;
			continue;
		}
		if (!strcmp(tok, "after")) {
			if (v < 0)
				goto bad;
			f->after = (uint64_t)v;
			continue;
		}
		if (!strcmp(tok, "delay") || !strcmp(tok, "jitter")) {
			/* microseconds, at most a minute */
			if (!(v >= 0 && v <= 60e6))
				goto bad;
			*(tok[0] == 'd' ? &f->delay_ns : &f->jitter_ns) = (uint64_t)(v * 1000.0);
			any |= v > 0;
			continue;
		}
		if (!strcmp(tok, "limit")) {
			if (!(v >= 1 && v <= SR_FAULT_LIMIT_MAX) || v != (double)(uint32_t)v)
				goto bad;
			f->limit = (uint32_t)v;
			continue;
		}
		if (v < 0 || v > 1)
			goto bad;
		if (!strcmp(tok, "drop"))
			f->drop = v;
		else if (!strcmp(tok, "dup"))
			f->dup = v;
		else if (!strcmp(tok, "reorder"))
			f->reorder = v;
		else if (!strcmp(tok, "corrupt"))
			f->corrupt = v;
		else
			goto bad;
		any |= v > 0;
	}
	free(copy);
	if (!any) {
		free(f);
		return NULL;
	}
	if (!f->limit)
		f->limit = SR_FAULT_LIMIT_DEFAULT;
	if (!seeded && getrandom(&f->rng, sizeof(f->rng), 0) != sizeof(f->rng))
		f->rng = 0x5eed;
	pthread_mutex_init(&f->lock, NULL);
	return f;
bad:
	free(copy);
	free(f);
	*err = -EINVAL;
	return NULL;
}

void sr_fault_free(struct sr_fault *f)
{
	if (!f)
		return;
	free(f->held);
	if (f->q) {
		for (uint32_t i = 0; i < f->q_n; i++)
			free(f->q[(f->q_head + i) % f->limit].buf);
		free(f->q);
	}
	free(f);
}

bool sr_fault_selects(const struct sr_fault *f, const struct sr_ipudp *t)
{
	if (!f->to_family)
		return true;
	return t->family == f->to_family &&
	       !memcmp(t->dst, f->to_addr, f->to_family == 4 ? 4 : 16);
}

uint64_t sr_fault_due(struct sr_fault *f, uint64_t now)
{
	uint64_t d = f->delay_ns;

	if (f->jitter_ns) {
		/* uniform in [delay - jitter, delay + jitter], at 1 ns granularity, not below 0 */
		uint64_t span = 2 * f->jitter_ns + 1;
		uint64_t r = splitmix(&f->rng) % span;

		d = d + r >= f->jitter_ns ? d + r - f->jitter_ns : 0;
	}
	d += now;
	if (d < f->q_last_due)
		d = f->q_last_due;	/* FIFO: never before a packet queued earlier */
	f->q_last_due = d;
	return d;
}

enum sr_fault_act sr_fault_decide(struct sr_fault *f)
{
	if (f->sent < f->after) {
		f->sent++;
		return SR_FAULT_PASS;
	}
	if (f->drop > 0 && unit(f) < f->drop)
		return SR_FAULT_DROP;
	if (f->dup > 0 && unit(f) < f->dup)
		return SR_FAULT_DUP;
	if (f->reorder > 0 && unit(f) < f->reorder)
		return SR_FAULT_REORDER;
	if (f->corrupt > 0 && unit(f) < f->corrupt)
		return SR_FAULT_CORRUPT;
	return SR_FAULT_PASS;
}
