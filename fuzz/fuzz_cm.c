/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harness: one datagram into the CM's wire decoder (src/cm/proto.c, today's private
 * protocol; docs/cm.md). A datagram the decoder accepts must survive a round trip: encoding
 * what it decoded gives a datagram of the same length that decodes to the same message (only
 * reserved bytes may differ), and the private data it reports lies within the datagram. The
 * state machines behind the decoder (src/cm/cm.c) are not driven here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct cm_msg m, m2;
	uint8_t buf[CM_MSG_MAX];
	int len;

	if (cm_msg_decode(&m, d, n))
		return 0;
	(void)cm_msg_name(m.type);
	if (m.pdata_len > CM_PDATA_MAX || m.pdata_len > cm_pdata_max(m.type, m.ps) ||
	    (size_t)m.pdata_len > n || memcmp(m.pdata, d + n - m.pdata_len, m.pdata_len)) {
		fprintf(stderr, "fuzz_cm: private data of %u bytes is not the datagram's tail\n",
			m.pdata_len);
		abort();
	}
	len = cm_msg_encode(&m, buf, sizeof(buf));
	if (len != (int)n) {
		fprintf(stderr, "fuzz_cm: decoded %zu bytes, encoded %d\n", n, len);
		abort();
	}
	if (cm_msg_decode(&m2, buf, (size_t)len) || memcmp(&m, &m2, sizeof(m))) {
		fprintf(stderr, "fuzz_cm: %s does not survive encode + decode\n",
			cm_msg_name(m.type));
		abort();
	}
	return 0;
}
