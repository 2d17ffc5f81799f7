/* SPDX-License-Identifier: MIT */
/*
 * softrdma: the command-line tool.
 *
 *   run       run an unmodified RDMA program on softrdma (LD_LIBRARY_PATH + parameters)
 *   devices   list the soft NICs through the public verbs API
 *   stat      live counters of every process using softrdma
 *   params    every runtime parameter, its default and current value
 *   gid       decode a GID (or encode an address:port as one)
 *   pcap      decode captures and verify every ICRC
 *
 * This file: dispatch, usage, run and params. stat.c and devices.c hold the others.
 */
#include "cli.h"

#include "core/param.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SOFTRDMA_VERSION
#define SOFTRDMA_VERSION "unknown"
#endif

void cli_usage(FILE *f)
{
	fputs("usage: softrdma <command> [options]\n"
	      "\n"
	      "  run [--netdev IF] [--fault SPEC] [--pcap FILE] [-o NAME=VALUE]... [--no-view] [--] CMD [ARGS...]\n"
	      "        run CMD (an unmodified RDMA program) on softrdma: puts softrdma's libibverbs\n"
	      "        first on LD_LIBRARY_PATH and sets the SOFTRDMA_* parameters given\n"
	      "        (-o: any parameter of `softrdma params`). CMD sees the devices in\n"
	      "        /dev/infiniband and /sys/class/infiniband, in a private mount namespace\n"
	      "        (docs/view.md); --no-view: not. Exit: CMD's status; 127 if CMD is\n"
	      "        not found, 126 if it cannot be executed, 125 if softrdma itself failed\n"
	      "  devices\n"
	      "        list devices: node GUID, port state, MTU, GIDs and the address each names\n"
	      "  stat [-a] [PID]\n"
	      "        live counters of every process (or PID) using softrdma; -a: also the zeros\n"
	      "  stat --doc [--markdown]\n"
	      "        every counter with its meaning\n"
	      "  params [--markdown]\n"
	      "        every runtime parameter: environment variable, type, default, current value\n"
	      "  gid GID|ADDR[:PORT]...\n"
	      "        what a GID means (IP address and UDP port), or the GID naming ADDR:PORT\n"
	      "  pcap [-v] [-p PORT]... FILE...\n"
	      "        decode the RoCEv2 packets of captures (UDP 4791 and the -p ports) and verify\n"
	      "        every ICRC; exit 1 on a bad ICRC, a malformed packet or no packet at all\n"
	      "  help, --help       this text\n"
	      "  version, --version\n"
	      "\n"
	      "Exit status: 0 ok, 1 failure, 2 usage error.\n",
	      f);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "softrdma%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(see `softrdma help`)\n", stderr);
	return CLI_USAGE;
}

void cli_printable(char *dst, size_t size, const char *s, size_t max)
{
	size_t i;

	if (!size)
		return;
	for (i = 0; i + 1 < size && i < max && s[i]; i++)
		dst[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	dst[i] = '\0';
}

/*
 * run
 */

/* <dir of our executable>/../lib, canonical, when it holds our libibverbs.so.1. */
static int our_lib_dir(char *out, size_t size)
{
	char exe[PATH_MAX], lib[PATH_MAX + 32], *slash;
	ssize_t n;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		fprintf(stderr, "softrdma run: cannot read /proc/self/exe: %s\n", strerror(errno));
		return -1;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	snprintf(lib, sizeof(lib), "%s/../lib", exe);
	if (!realpath(lib, exe) || strlen(exe) + 1 > size) {
		fprintf(stderr, "softrdma run: no library directory %s next to softrdma\n", lib);
		return -1;
	}
	snprintf(lib, sizeof(lib), "%s/libibverbs.so.1", exe);
	/* Running the program on the system's libibverbs would look like success while
	 * testing the wrong stack: refuse instead. */
	if (access(lib, R_OK)) {
		fprintf(stderr, "softrdma run: %s: %s (is softrdma installed with its lib/ directory?)\n",
			lib, strerror(errno));
		return -1;
	}
	snprintf(out, size, "%s", exe);
	return 0;
}

/* NAME=VALUE for parameter NAME; checks the name and the value's syntax. */
static int run_set(const char *assign)
{
	const char *eq = strchr(assign, '=');
	char name[64], env[80];
	long l;
	bool b;
	int i;

	if (!eq || eq == assign || (size_t)(eq - assign) >= sizeof(name))
		return cli_usage_error("run", "-o wants NAME=VALUE, not \"%s\"", assign);
	memcpy(name, assign, eq - assign);
	name[eq - assign] = '\0';
	i = sr_param_find(name);
	if (i < 0)
		return cli_usage_error("run", "no parameter \"%s\" (see `softrdma params`)", name);
	if ((sr_param_table[i].type == SR_PT_INT && eq[1] && sr_param_parse_int(eq + 1, &l)) ||
	    (sr_param_table[i].type == SR_PT_BOOL && eq[1] && sr_param_parse_bool(eq + 1, &b)))
		return cli_usage_error("run", "%s: \"%s\" is not a valid %s", name, eq + 1,
				       sr_param_table[i].type == SR_PT_INT ? "integer" : "boolean");
	setenv(sr_param_env_name(i, env, sizeof(env)), eq + 1, 1);
	return 0;
}

int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "netdev", required_argument, NULL, 'n' },
		{ "fault", required_argument, NULL, 'f' },
		{ "pcap", required_argument, NULL, 'p' },
		{ "set", required_argument, NULL, 'o' },
		{ "no-view", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char lib[PATH_MAX], set[PATH_MAX + 16];
	const char *old;
	char *path;
	bool view = true;
	int c, rc;

	optind = 1;
	opterr = 0;	/* our own message, with the command's name */
	/* '+': stop at the command, so its own options are left alone even without "--". */
	while ((c = getopt_long(argc, argv, "+o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			snprintf(set, sizeof(set), "netdev=%s", optarg);
			break;
		case 'f':
			snprintf(set, sizeof(set), "fault=%s", optarg);
			break;
		case 'p':
			snprintf(set, sizeof(set), "pcap=%s", optarg);
			break;
		case 'o':
			snprintf(set, sizeof(set), "%s", optarg);
			break;
		case 'V':
			view = false;
			continue;
		case 'h':
			cli_usage(stdout);
			return CLI_OK;
		default:
			return cli_usage_error("run", "bad option \"%s\"", argv[optind - 1]);
		}
		rc = run_set(set);
		if (rc)
			return rc;
	}
	if (optind >= argc)
		return cli_usage_error("run", "no command given");
	if (our_lib_dir(lib, sizeof(lib)))
		return CLI_RUN_FAIL;

	old = getenv("LD_LIBRARY_PATH");
	if (asprintf(&path, "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "") < 0) {
		fprintf(stderr, "softrdma run: out of memory\n");
		return CLI_RUN_FAIL;
	}
	setenv("LD_LIBRARY_PATH", path, 1);
	free(path);
	/* After the parameters are set: the view shows the devices the program will get. */
	unsetenv("SOFTRDMA_VIEW");
	if (view) {
		rc = view_enter();
		if (rc < 0)
			return CLI_RUN_FAIL;
		/* The library then rewrites the files naming its own GID and GUID (engine/nic.c). */
		if (rc == 0)
			setenv("SOFTRDMA_VIEW", "1", 1);
	}

	execvp(argv[optind], argv + optind);
	if (errno == ENOENT) {
		fprintf(stderr, "softrdma run: %s: command not found\n", argv[optind]);
		return CLI_NOT_FOUND;
	}
	fprintf(stderr, "softrdma run: cannot execute %s: %s\n", argv[optind], strerror(errno));
	return CLI_CANNOT_EXEC;
}

/*
 * params
 */

static const char *const type_name[] = {
	[SR_PT_INT] = "int",
	[SR_PT_BOOL] = "bool",
	[SR_PT_STR] = "str",
};

static const char *shown(const char *v, char *buf, size_t size)
{
	if (!*v)
		return "\"\"";
	cli_printable(buf, size, v, size);
	return buf;
}

void cli_md_cell(const char *s)
{
	for (; *s; s++) {
		if (*s == '|')
			putchar('\\');
		putchar(*s);
	}
}

static void params_markdown(void)
{
	char env[80];

	puts("# softrdma runtime parameters\n"
	     "\n"
	     "<!-- Generated by `softrdma params --markdown`: edit src/core/param.h, not this file. -->\n"
	     "\n"
	     "Every parameter is read once per process, at the first use of softrdma, from the\n"
	     "environment variable `SOFTRDMA_<NAME>`; an unset or empty variable means the default.\n"
	     "`softrdma run -o NAME=VALUE -- CMD` sets one for a program, and `softrdma params` shows\n"
	     "the values the current environment gives.\n"
	     "\n"
	     "Types: **int** is decimal or `0x` hex, with an optional `k`, `m` or `g` suffix (times\n"
	     "2^10, 2^20, 2^30); a leading `0` is still decimal. **bool** is one of\n"
	     "`0 1 no yes off on false true`, in any case. **str** is used as given. A malformed\n"
	     "value keeps the default, and one warning names the variable.\n"
	     "\n"
	     "| Parameter | Environment variable | Type | Default | Description |\n"
	     "|---|---|---|---|---|");
	for (int i = 0; i < sr_param_count; i++) {
		const struct sr_param_desc *d = &sr_param_table[i];

		printf("| `%s` | `%s` | %s | `", d->name, sr_param_env_name(i, env, sizeof(env)),
		       type_name[d->type]);
		cli_md_cell(*d->def ? d->def : "\"\"");
		fputs("` | ", stdout);
		cli_md_cell(d->doc);
		puts(" |");
	}
}

int cmd_params(int argc, char **argv)
{
	char env[80], val[256], a[256], b[256];
	int name_w = 4, env_w = 12, def_w = 7;

	if (argc == 2 && !strcmp(argv[1], "--markdown")) {
		params_markdown();
		return CLI_OK;
	}
	if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		cli_usage(stdout);
		return CLI_OK;
	}
	if (argc > 1)
		return cli_usage_error("params", "unexpected argument \"%s\"", argv[1]);

	for (int i = 0; i < sr_param_count; i++) {
		int n = strlen(sr_param_table[i].name), e = strlen(sr_param_env_name(i, env, 80));
		int d = strlen(shown(sr_param_table[i].def, a, sizeof(a)));

		name_w = n > name_w ? n : name_w;
		env_w = e > env_w ? e : env_w;
		def_w = d > def_w ? d : def_w;
	}
	/* sr_params() reads our own environment, so VALUE is what a program started from this
	 * shell would get (and a malformed variable is reported here as it would be there). */
	printf("%-*s  %-*s  %-4s  %-*s  %s\n", name_w, "NAME", env_w, "ENV VARIABLE", "TYPE", def_w,
	       "DEFAULT", "VALUE");
	for (int i = 0; i < sr_param_count; i++) {
		const struct sr_param_desc *d = &sr_param_table[i];

		sr_param_value_str(i, val, sizeof(val));
		printf("%-*s  %-*s  %-4s  %-*s  %s\n", name_w, d->name, env_w,
		       sr_param_env_name(i, env, sizeof(env)), type_name[d->type], def_w,
		       shown(d->def, a, sizeof(a)), shown(val, b, sizeof(b)));
		printf("%*s  %s\n", name_w, "", d->doc);
	}
	return CLI_OK;
}

/*
 * dispatch
 */

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int argc, char **argv);
	} cmds[] = {
		{ "run", cmd_run },
		{ "devices", cmd_devices },
		{ "stat", cmd_stat },
		{ "params", cmd_params },
		{ "gid", cmd_gid },
		{ "pcap", cmd_pcap },
	};
	const char *cmd = argc > 1 ? argv[1] : "help";

	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		cli_usage(stdout);
		return CLI_OK;
	}
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		printf("softrdma %s\n", SOFTRDMA_VERSION);
		return CLI_OK;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(cmd, cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	return cli_usage_error(NULL, "unknown command \"%s\"", cmd);
}
