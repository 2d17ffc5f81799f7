/* SPDX-License-Identifier: MIT */
/* Fault injection: parsing the spec and deciding each packet's fate (see fault.h). */
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
	free(f);
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
