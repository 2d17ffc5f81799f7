/* SPDX-License-Identifier: MIT */
/*
 * Scatter/gather lists: turning a message range into memory the engine may touch. Every piece
 * passes the one access check (sr_mem_get) and holds its MR until the copy is done, so an MR
 * deregistered concurrently waits for the copy instead of being written after it is gone.
 */
#include "transport/xport.h"
#include "wire/icrc.h"

void sr_sgl_release(struct sr_sgl *s)
{
	for (int i = 0; i < s->n; i++)
		if (s->mr[i])
			sr_mr_put(s->mr[i]);
	s->n = 0;
}

int sr_sgl_map(struct sr_nic *nic, const struct sr_acc *a, const struct ibv_sge *sge,
	       uint32_t nsge, uint64_t off, uint32_t len, unsigned access, struct sr_sgl *s)
{
	uint64_t pos = 0;

	s->n = 0;
	for (uint32_t i = 0; i < nsge && len; i++) {
		uint64_t l = sge[i].length;
		uint64_t skip, take;
		enum sr_access_err err;
		int n;

		if (pos + l <= off) {
			pos += l;
			continue;
		}
		skip = off > pos ? off - pos : 0;
		take = l - skip < len ? l - skip : len;
		if (s->n == SR_MAX_IOV)
			goto prot;
		/* One reference per SGE, kept on its first piece. */
		s->mr[s->n] = sr_mem_get(nic, a, sge[i].lkey, sge[i].addr + skip, take, access,
					 &s->iov[s->n], SR_MAX_IOV - s->n, &n, &err);
		if (!s->mr[s->n])
			goto prot;
		for (int k = 1; k < n; k++)
			s->mr[s->n + k] = NULL;
		s->n += n;
		len -= (uint32_t)take;
		off += take;
		pos += l;
	}
	if (len) {
		sr_sgl_release(s);
		return IBV_WC_LOC_LEN_ERR;
	}
	return 0;
prot:
	sr_sgl_release(s);
	return IBV_WC_LOC_PROT_ERR;
}

int sr_sgl_fault(struct sr_nic *nic, const struct sr_acc *a, const struct ibv_sge *sge,
		 uint32_t nsge, uint64_t len, unsigned access)
{
	for (uint32_t i = 0; i < nsge && len; i++) {
		uint64_t take = sge[i].length < len ? sge[i].length : len;
		enum sr_access_err err;
		struct sr_mr *mr;

		if (!take)
			continue;
		mr = sr_mem_get(nic, a, sge[i].lkey, sge[i].addr, take, access, NULL, 0, NULL,
				&err);
		if (!mr)
			return IBV_WC_LOC_PROT_ERR;
		sr_mr_put(mr);
		len -= take;
	}
	return len ? IBV_WC_LOC_LEN_ERR : 0;
}

void sr_iov_copy_in(const struct iovec *iov, int n, const void *buf, uint32_t len)
{
	const uint8_t *p = buf;

	for (int i = 0; i < n && len; i++) {
		size_t l = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(iov[i].iov_base, p, l);
		p += l;
		len -= (uint32_t)l;
	}
}

void sr_sgl_copy_in(struct sr_sgl *s, const void *buf, uint32_t len)
{
	sr_iov_copy_in(s->iov, s->n, buf, len);
}

bool sr_place_checked(struct sr_nic *nic, struct sr_pkt *pkt, const struct iovec *iov, int n)
{
	uint8_t *pay = sr_pkt_payload(pkt);
	bool ok;

	if (n == 1) {
		ok = sr_net_icrc_match(nic, pkt->icrc_tuple, pkt->hdr, pkt->len,
				       sr_icrc_calc_copy(pkt->icrc_tuple, pkt->hdr, pkt->hdr_len,
							 pay, pkt->paylen, pay + pkt->paylen,
							 pkt->len, iov[0].iov_base));
		if (ok)
			sr_stat_inc(&nic->stats, SR_STAT_rx_placed_checked);
	} else {	/* two SGEs, or a map cut at a page: check, then copy */
		ok = sr_net_icrc_ok(nic, pkt);
		if (ok)
			sr_iov_copy_in(iov, n, pay, pkt->paylen);
	}
	if (!ok)
		return false;
	pkt->icrc_tuple = NULL;
	pkt->placed = true;
	return true;
}

uint64_t sr_rnr_timer_ns(unsigned code)
{
	/* IBA table 45 (and ibv_modify_qp(3)): microseconds per 5-bit encoding. */
	static const uint32_t us[32] = {
		655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
		163840, 245760, 327680, 491520,
	};

	return (uint64_t)us[code & 31] * 1000;
}
