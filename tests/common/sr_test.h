/* SPDX-License-Identifier: MIT */
/*
 * Minimal test helpers shared by every C test: asserts that print both values and where, and a
 * whole-test alarm so nothing hangs. Each test is its own process (ctest runs them).
 */
#ifndef SR_TEST_H
#define SR_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int sr_test_failures;

#define SR_FAIL(...)                                                              \
	do {                                                                      \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);              \
		fprintf(stderr, __VA_ARGS__);                                     \
		fprintf(stderr, "\n");                                            \
		sr_test_failures++;                                               \
	} while (0)

#define CHECK(cond)                                                               \
	do {                                                                      \
		if (!(cond))                                                      \
			SR_FAIL("%s", #cond);                                     \
	} while (0)

#define CHECK_EQ(a, b)                                                            \
	do {                                                                      \
		long long _a = (long long)(a), _b = (long long)(b);               \
		if (_a != _b)                                                     \
			SR_FAIL("%s == %s: %lld (0x%llx) != %lld (0x%llx)", #a, #b, \
				_a, (unsigned long long)_a, _b, (unsigned long long)_b); \
	} while (0)

/* Fatal variant: stop the test now (later steps depend on this one). */
#define REQUIRE(cond)                                                             \
	do {                                                                      \
		if (!(cond)) {                                                    \
			SR_FAIL("required: %s", #cond);                           \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

/* 1 in the AddressSanitizer build (tests size their work down there), else 0. */
#if defined(__SANITIZE_ADDRESS__)
#define SR_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SR_SANITIZED 1
#endif
#endif
#ifndef SR_SANITIZED
#define SR_SANITIZED 0
#endif

/* Arms SIGALRM to abort the process after `seconds`; call first in main(). */
void sr_test_timeout(unsigned seconds);
/* Prints a summary and returns the exit status for main(). */
int sr_test_done(const char *name);

#endif
