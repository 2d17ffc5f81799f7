/* SPDX-License-Identifier: MIT */
/*
 * Runtime parameters: the table generated from SR_PARAM_LIST, values from SOFTRDMA_<NAME>.
 *
 * The environment is read once (pthread_once) because the engine reads the values on hot
 * paths without a lock; a process that wants other values sets its environment before it
 * opens a device, as `softrdma run` does.
 */
#include "core/param.h"
#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The default as text: a STR default is already a string literal, the others are tokens. */
#define SR_PARAM_DEFTXT_INT(def) #def
#define SR_PARAM_DEFTXT_BOOL(def) #def
#define SR_PARAM_DEFTXT_STR(def) def

const struct sr_param_desc sr_param_table[] = {
#define SR_PARAM_DESC(name, type, def, doc) \
	{ #name, SR_PT_##type, SR_PARAM_DEFTXT_##type(def), doc },
	SR_PARAM_LIST(SR_PARAM_DESC)
#undef SR_PARAM_DESC
};
const int sr_param_count = sizeof(sr_param_table) / sizeof(sr_param_table[0]);

/* Where each parameter lives in struct sr_params, in table order. */
static const size_t param_off[] = {
#define SR_PARAM_OFF(name, type, def, doc) offsetof(struct sr_params, name),
	SR_PARAM_LIST(SR_PARAM_OFF)
#undef SR_PARAM_OFF
};

static const struct sr_params param_defaults = {
#define SR_PARAM_DEF(name, type, def, doc) .name = def,
	SR_PARAM_LIST(SR_PARAM_DEF)
#undef SR_PARAM_DEF
};

struct sr_params sr_params_loaded;	/* param.h, sr_params */
_Atomic bool sr_params_ready;
static pthread_once_t params_once = PTHREAD_ONCE_INIT;

const char *sr_param_env_name(int index, char *buf, int len)
{
	const char *n;
	int i;

	if (len <= 0)
		return buf;
	if (index < 0 || index >= sr_param_count) {
		buf[0] = '\0';
		return buf;
	}
	n = sr_param_table[index].name;
	snprintf(buf, len, "SOFTRDMA_%s", n);
	for (i = 0; buf[i]; i++)
		buf[i] = toupper((unsigned char)buf[i]);
	return buf;
}

int sr_param_find(const char *name)
{
	for (int i = 0; i < sr_param_count; i++)
		if (!strcasecmp(sr_param_table[i].name, name))
			return i;
	return -1;
}

int sr_param_parse_int(const char *s, long *out)
{
	unsigned long long mag, mult = 1;
	const char *p = s;
	char *end;
	int neg = 0, base = 10;

	if (*p == '-' || *p == '+')
		neg = *p++ == '-';
	/* Decimal or 0x hex only: strtol's base 0 would read "010" as octal 8, which surprises
	 * anyone who is not thinking in C. */
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		base = 16;
		p += 2;
		if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
			return -EINVAL;	/* strtoull would take a second prefix */
	}
	if (!isxdigit((unsigned char)*p) || (base == 10 && !isdigit((unsigned char)*p)))
		return -EINVAL;	/* also rejects strtoull's own sign and blank skipping */
	errno = 0;
	mag = strtoull(p, &end, base);
	if (errno == ERANGE)
		return -ERANGE;
	switch (*end) {
	case 'k': case 'K':
		mult = 1ULL << 10;
		end++;
		break;
	case 'm': case 'M':
		mult = 1ULL << 20;
		end++;
		break;
	case 'g': case 'G':
		mult = 1ULL << 30;
		end++;
		break;
	}
	if (*end)
		return -EINVAL;
	if (mag > (unsigned long long)LONG_MAX / mult)
		return -ERANGE;
	mag *= mult;
	*out = neg ? -(long)mag : (long)mag;
	return 0;
}

int sr_param_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "yes", "on", "true" };
	static const char *const no[] = { "0", "no", "off", "false" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

int sr_param_parse_log_level(const char *s)
{
	static const struct {
		const char *name;
		int lvl;
	} lv[] = {
		{ "error", SR_LOG_ERROR }, { "err", SR_LOG_ERROR }, { "0", SR_LOG_ERROR },
		{ "warn", SR_LOG_WARN }, { "warning", SR_LOG_WARN }, { "1", SR_LOG_WARN },
		{ "info", SR_LOG_INFO }, { "2", SR_LOG_INFO },
		{ "debug", SR_LOG_DEBUG }, { "3", SR_LOG_DEBUG },
	};

	for (size_t i = 0; i < sizeof(lv) / sizeof(lv[0]); i++)
		if (!strcasecmp(s, lv[i].name))
			return lv[i].lvl;
	return -1;
}

int sr_path_expand(const char *tmpl, char *buf, int len)
{
	int o = 0;

	if (len <= 0)
		return -ENAMETOOLONG;
	for (const char *p = tmpl; *p; p++) {
		char pid[24];
		const char *ins = pid;

		if (p[0] == '%' && p[1] == 'p') {
			snprintf(pid, sizeof(pid), "%d", (int)getpid());
			p++;
		} else if (p[0] == '%' && p[1] == '%') {
			ins = "%";
			p++;
		} else {
			pid[0] = *p;
			pid[1] = '\0';
		}
		for (; *ins; ins++) {
			if (o + 1 >= len) {
				buf[0] = '\0';
				return -ENAMETOOLONG;
			}
			buf[o++] = *ins;
		}
	}
	buf[o] = '\0';
	return 0;
}

/* One variable: 0 when absent/empty or valid (stored), -errno when malformed (default kept). */
static int param_load_one(int i, struct sr_params *p)
{
	const struct sr_param_desc *d = &sr_param_table[i];
	void *field = (char *)p + param_off[i];
	char env[64];
	const char *v;
	long l;
	bool b;
	int rc = 0;

	v = getenv(sr_param_env_name(i, env, sizeof(env)));
	/* Empty means "not set" for every type, so `FOO= cmd` restores a default. */
	if (!v || !*v)
		return 0;
	switch (d->type) {
	case SR_PT_INT:
		rc = sr_param_parse_int(v, &l);
		if (!rc)
			*(long *)field = l;
		else if (rc == -ERANGE)
			sr_warn("%s=\"%s\" is out of range; using the default %s", env, v, d->def);
		else
			sr_warn("%s=\"%s\" is not an integer (decimal or 0x hex, optional k/m/g "
				"suffix); using the default %s", env, v, d->def);
		break;
	case SR_PT_BOOL:
		rc = sr_param_parse_bool(v, &b);
		if (!rc)
			*(bool *)field = b;
		else
			sr_warn("%s=\"%s\" is not a boolean (0/1/yes/no/on/off/true/false); using the default %s",
				env, v, d->def);
		break;
	case SR_PT_STR:
		/* A copy, because the environment may be changed (setenv) behind our back later.
		 * The process-wide set is never freed: readers keep the pointer. */
		v = strdup(v);
		if (v)
			*(const char **)field = v;
		else
			rc = -ENOMEM;
		break;
	}
	return rc;
}

int sr_params_load(struct sr_params *p)
{
	int bad = 0, lvl, log_idx = sr_param_find("log");

	*p = param_defaults;
	/* The log level first: it decides whether the warnings below are printed at all. */
	if (param_load_one(log_idx, p))
		bad++;
	lvl = sr_param_parse_log_level(p->log);
	sr_log_level = lvl < 0 ? SR_LOG_WARN : lvl;
	if (lvl < 0) {
		sr_warn("SOFTRDMA_LOG=\"%s\" is not a log level (error, warn, info, debug); using warn",
			p->log);
		if (p->log != param_defaults.log)
			free((void *)p->log);
		p->log = param_defaults.log;
		bad++;
	}
	for (int i = 0; i < sr_param_count; i++)
		if (i != log_idx && param_load_one(i, p))
			bad++;
	return bad;
}

void sr_params_free(struct sr_params *p)
{
	for (int i = 0; i < sr_param_count; i++) {
		const char **f = (const char **)((char *)p + param_off[i]);
		const char *const *def = (const char *const *)((const char *)&param_defaults +
								param_off[i]);

		if (sr_param_table[i].type == SR_PT_STR && *f != *def)
			free((void *)*f);
	}
	*p = param_defaults;
}

static void params_init(void)
{
	sr_params_load(&sr_params_loaded);
	if (sr_params_loaded.crash_trace)
		sr_crash_trace_install();
	atomic_store_explicit(&sr_params_ready, true, memory_order_release);
}

const struct sr_params *sr_params_first(void)
{
	pthread_once(&params_once, params_init);
	return &sr_params_loaded;
}

const char *sr_param_value_str(int index, char *buf, int len)
{
	const struct sr_params *p = sr_params();
	const void *field;

	if (len <= 0)
		return buf;
	if (index < 0 || index >= sr_param_count) {
		buf[0] = '\0';
		return buf;
	}
	field = (const char *)p + param_off[index];
	switch (sr_param_table[index].type) {
	case SR_PT_INT:
		snprintf(buf, len, "%ld", *(const long *)field);
		break;
	case SR_PT_BOOL:
		snprintf(buf, len, "%d", *(const bool *)field ? 1 : 0);
		break;
	case SR_PT_STR:
		snprintf(buf, len, "%s", *(const char *const *)field);
		break;
	}
	return buf;
}
