/* SPDX-License-Identifier: MIT */
/* The softrdma command-line tool: one function per subcommand. */
#ifndef SR_TOOLS_CLI_H
#define SR_TOOLS_CLI_H

#include <stdio.h>

/* Exit codes. run also passes on the command's own, and uses the shell's 126/127. */
#define CLI_OK 0
#define CLI_FAIL 1
#define CLI_USAGE 2
#define CLI_RUN_FAIL 125	/* `softrdma run` itself failed, as env(1) and timeout(1) do */
#define CLI_CANNOT_EXEC 126
#define CLI_NOT_FOUND 127

void cli_usage(FILE *f);
/* Prints "softrdma CMD: <message>" and the usage hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int cmd_run(int argc, char **argv);
int cmd_params(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_gid(int argc, char **argv);
int cmd_pcap(int argc, char **argv);

/* run's device view (view.c): enters a private mount namespace showing the devices in /dev
 * and /sys. 0 done; 1 not possible here (told on stderr, the program runs without it); -1
 * failed (told). */
int view_enter(void);

/* Copies s into dst (size bytes) with anything unprintable replaced by '?': names read from a
 * stat file or a device are shown on a terminal. */
void cli_printable(char *dst, size_t size, const char *s, size_t max);
/* Prints s as the text of a markdown table cell ('|' escaped). */
void cli_md_cell(const char *s);

#endif /* SR_TOOLS_CLI_H */
