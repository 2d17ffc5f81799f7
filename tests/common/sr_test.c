/* SPDX-License-Identifier: MIT */
#include "sr_test.h"

#include <signal.h>
#include <unistd.h>

int sr_test_failures;

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL: test timed out\n";
	(void)sig;
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(124);
}

void sr_test_timeout(unsigned seconds)
{
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

int sr_test_done(const char *name)
{
	if (sr_test_failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, sr_test_failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}
