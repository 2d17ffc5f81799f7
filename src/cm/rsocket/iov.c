/* SPDX-License-Identifier: MIT */
/*
 * iovec copies, shared by the stream and datagram data paths.
 */
#include <string.h>

#include "cm/rsocket/rs.h"

size_t rs_iov_len(const struct iovec *iov, int iovcnt)
{
	size_t n = 0;

	for (int i = 0; i < iovcnt; i++)
		n += iov[i].iov_len;
	return n;
}

void rs_iov_gather(void *dst, const struct iovec *iov, int iovcnt, size_t off, size_t n)
{
	uint8_t *d = dst;

	for (int i = 0; i < iovcnt && n; i++) {
		size_t l = iov[i].iov_len, k;

		if (off >= l) {
			off -= l;
			continue;
		}
		k = l - off < n ? l - off : n;
		memcpy(d, (const uint8_t *)iov[i].iov_base + off, k);
		d += k;
		n -= k;
		off = 0;
	}
}

void rs_iov_scatter(const struct iovec *iov, int iovcnt, size_t off, const void *src, size_t n)
{
	const uint8_t *s = src;

	for (int i = 0; i < iovcnt && n; i++) {
		size_t l = iov[i].iov_len, k;

		if (off >= l) {
			off -= l;
			continue;
		}
		k = l - off < n ? l - off : n;
		memcpy((uint8_t *)iov[i].iov_base + off, s, k);
		s += k;
		n -= k;
		off = 0;
	}
}
