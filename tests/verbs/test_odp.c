/* SPDX-License-Identifier: MIT */
/*
 * On-Demand Paging, between two RC QPs of one process:
 *  - with pinning turned on (SOFTRDMA_PIN=1), ODP MRs are still never locked;
 *  - ibv_query_device_ex reports ODP (and implicit ODP) for every RC operation;
 *  - an ODP MR over 64 GiB of sparse address space (more than this machine's RAM, never
 *    touched by the test) takes remote WRITEs at a few places: the data lands and the
 *    process's resident memory grows by about what was written, not by the MR's size;
 *  - implicit ODP (NULL, SIZE_MAX): WRITE, READ and an ATOMIC through the one rkey;
 *  - a hole the application unmapped, and a read-only page, inside an ODP MR: a WRITE there
 *    completes with IBV_WC_REM_ACCESS_ERR; nothing crashes;
 *  - ibv_advise_mr: prefetch for write makes the range resident; the errors the kernel gives
 *    (ENOENT for a non-ODP MR or a read-only MR and PREFETCH_WRITE, EFAULT outside the MR or
 *    on a hole, EINVAL for no SGE, EOPNOTSUPP for an unknown flag).
 */
#include "sr_test.h"
#include "verbs_util.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define SPARSE (64ull << 30)
#define CHUNK (64u << 10)

static struct vu_dev dev;
static struct vu_pair pair;
static struct vu_buf src;	/* the requester's ordinary MR */

static long page_size;

/* VmLck of /proc/self/status, in bytes. */
static uint64_t locked_bytes(void)
{
	char line[256];
	unsigned long kb = 0;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmLck: %lu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb << 10;
}

static uint64_t resident_bytes(void)
{
	unsigned long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)page_size;
}

/* One RDMA op from src to (raddr, rkey); returns the completion status. */
static int rdma(enum ibv_wr_opcode op, uint32_t off, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;

	REQUIRE(vu_post_rdma(pair.qp[0], 1, op, src.mr, src.p + off, len, raddr, rkey,
			     IBV_SEND_SIGNALED) == 0);
	if (!vu_wait(pair.scq[0], &wc, 5000)) {
		SR_FAIL("no completion");
		return -1;
	}
	return wc.status;
}

/* The pair again after a remote error left both QPs in ERR. */
static void reconnect(void)
{
	struct vu_qp_cfg q;

	vu_pair_destroy(&pair);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	REQUIRE(vu_pair_create(&dev, &q, NULL, &pair) == 0);
}

static void test_caps(void)
{
	struct ibv_device_attr_ex a;
	const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			    IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC;

	printf("capabilities\n");
	memset(&a, 0, sizeof(a));
	REQUIRE(ibv_query_device_ex(dev.ctx, NULL, &a) == 0);
	CHECK(a.odp_caps.general_caps & IBV_ODP_SUPPORT);
	CHECK(a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
	CHECK_EQ(a.odp_caps.per_transport_caps.rc_odp_caps & rc, rc);
	CHECK(a.odp_caps.per_transport_caps.ud_odp_caps & IBV_ODP_SUPPORT_SEND);
}

static void test_sparse(void)
{
	uint8_t *base = mmap(NULL, SPARSE, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	const uint64_t offs[] = { 0, 5ull << 30, SPARSE / 2 + 12345, SPARSE - CHUNK };
	uint64_t before, after, written = 0;
	struct ibv_mr *mr;

	printf("64 GiB sparse ODP MR, remote WRITEs at %zu places\n", sizeof(offs) / sizeof(offs[0]));
	REQUIRE(base != MAP_FAILED);
	mr = ibv_reg_mr(dev.pd, base, SPARSE, IBV_ACCESS_ON_DEMAND | VU_ACCESS_ALL);
	REQUIRE(mr);
	/* SOFTRDMA_PIN=1 is set (see main): the ordinary MR of the test is locked, the ODP MR
	 * is not (64 GiB could not be). */
#ifndef __SANITIZE_ADDRESS__	/* (under ASan, mlock from the library shows no VmLck) */
	CHECK(locked_bytes() >= src.len);
#endif
	CHECK(locked_bytes() < src.len + (16u << 20));
	before = resident_bytes();
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		vu_fill(src.p, CHUNK, (uint32_t)i + 1);
		CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, 0, CHUNK, (uintptr_t)base + offs[i], mr->rkey),
			 IBV_WC_SUCCESS);
		CHECK_EQ(vu_check(base + offs[i], CHUNK, (uint32_t)i + 1), -1);
		written += CHUNK;
	}
	after = resident_bytes();
	printf("  resident: %llu KiB before, %llu KiB after, %llu KiB written\n",
	       (unsigned long long)(before >> 10), (unsigned long long)(after >> 10),
	       (unsigned long long)(written >> 10));
	/* The written pages (plus at most a page each side per chunk) and some slack for the
	 * test's own allocations: far below the 64 GiB the MR covers. */
	CHECK(after <= before + written + 8 * (uint64_t)page_size + (4u << 20));
	CHECK(after >= before + written / 2);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	munmap(base, SPARSE);
}

static void test_implicit(void)
{
	struct ibv_mr *mr = ibv_reg_mr(dev.pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | VU_ACCESS_ALL);
	uint8_t *dst = aligned_alloc(4096, 2 * CHUNK);
	uint64_t *counter;

	printf("implicit ODP: the whole address space under one rkey\n");
	REQUIRE(mr && dst);
	memset(dst, 0, 2 * CHUNK);
	vu_fill(src.p, CHUNK, 77);
	CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, 0, CHUNK, (uintptr_t)dst, mr->rkey), IBV_WC_SUCCESS);
	CHECK_EQ(vu_check(dst, CHUNK, 77), -1);
	vu_fill(dst + CHUNK, CHUNK, 78);
	CHECK_EQ(rdma(IBV_WR_RDMA_READ, CHUNK, CHUNK, (uintptr_t)dst + CHUNK, mr->rkey),
		 IBV_WC_SUCCESS);
	CHECK_EQ(vu_check(src.p + CHUNK, CHUNK, 78), -1);
	counter = (uint64_t *)(dst + 64);
	*counter = 40;
	{
		struct ibv_wc wc;

		REQUIRE(vu_post_atomic(pair.qp[0], 2, IBV_WR_ATOMIC_FETCH_AND_ADD, src.mr, src.p,
				       (uintptr_t)counter, mr->rkey, 2, 0, IBV_SEND_SIGNALED) == 0);
		CHECK(vu_wait(pair.scq[0], &wc, 5000) && wc.status == IBV_WC_SUCCESS);
		CHECK_EQ(*counter, 42);
		CHECK_EQ(*(uint64_t *)src.p, 40);
	}
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	free(dst);
}

static void test_holes(void)
{
	size_t len = 16 * (size_t)page_size;
	uint8_t *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int64_t errs0 = vu_stat("odp_access_errors");
	struct ibv_mr *mr;

	printf("a hole and a read-only page inside an ODP MR\n");
	REQUIRE(base != MAP_FAILED);
	mr = ibv_reg_mr(dev.pd, base, len, IBV_ACCESS_ON_DEMAND | VU_ACCESS_ALL);
	REQUIRE(mr);
	/* The application gives the page up. Not munmap: any mapping made meanwhile (a thread's
	 * stack or TLS, ASan's allocator) could land in the hole, and the WRITE below would then
	 * be a success into it (seen 2 in 30 under ASan). A PROT_NONE page keeps the hole. */
	CHECK(mmap(base + 4 * page_size, (size_t)page_size, PROT_NONE,
		   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) != MAP_FAILED);
	CHECK_EQ(mprotect(base + 8 * page_size, (size_t)page_size, PROT_READ), 0);
	vu_fill(src.p, 64, 5);
	CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)base + 4 * page_size + 100, mr->rkey),
		 IBV_WC_REM_ACCESS_ERR);
	reconnect();
	CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)base + 8 * page_size, mr->rkey),
		 IBV_WC_REM_ACCESS_ERR);
	CHECK_EQ(vu_check_byte(base + 8 * page_size, (size_t)page_size, 0), -1);	/* untouched */
	reconnect();
	/* A READ of the hole is refused too; the rest of the MR still works. */
	CHECK_EQ(rdma(IBV_WR_RDMA_READ, 0, 64, (uintptr_t)base + 4 * page_size, mr->rkey),
		 IBV_WC_REM_ACCESS_ERR);
	reconnect();
	CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, 0, 64, (uintptr_t)base + 12 * page_size, mr->rkey),
		 IBV_WC_SUCCESS);
	CHECK_EQ(vu_check(base + 12 * page_size, 64, 5), -1);
	CHECK(vu_stat("odp_access_errors") - errs0 >= 3);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	munmap(base, len);
}

static void test_advise(void)
{
	size_t len = 256 * (size_t)page_size;
	uint8_t *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr, *ro;
	struct ibv_sge sge;
	uint64_t before;

	printf("ibv_advise_mr\n");
	REQUIRE(base != MAP_FAILED);
	mr = ibv_reg_mr(dev.pd, base, len / 2, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE);
	ro = ibv_reg_mr(dev.pd, base + len / 2, len / 2, IBV_ACCESS_ON_DEMAND);
	REQUIRE(mr && ro);
	before = resident_bytes();
	sge = (struct ibv_sge){ .addr = (uintptr_t)base, .length = (uint32_t)(len / 2), .lkey = mr->lkey };
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			       &sge, 1), 0);
	CHECK(resident_bytes() >= before + len / 2 - 4 * (uint64_t)page_size);
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), 0);
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1), 0);
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0), EINVAL);
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0x80, &sge, 1), EOPNOTSUPP);
	/* Out of the MR: EFAULT. */
	sge.length = (uint32_t)(len / 2) + 1;
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EFAULT);
	/* PREFETCH_WRITE on an MR without local write, and on a non-ODP MR: ENOENT. */
	sge = (struct ibv_sge){ .addr = (uintptr_t)base + len / 2, .length = 4096, .lkey = ro->lkey };
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), 0);
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1), ENOENT);
	sge = (struct ibv_sge){ .addr = (uintptr_t)src.p, .length = 64, .lkey = src.mr->lkey };
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), ENOENT);
	sge.lkey ^= 0x80;	/* another key tag */
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), ENOENT);
	/* A hole: EFAULT. */
	CHECK_EQ(munmap(base + 8 * page_size, (size_t)page_size), 0);
	sge = (struct ibv_sge){ .addr = (uintptr_t)base, .length = (uint32_t)(16 * page_size),
				.lkey = mr->lkey };
	CHECK_EQ(ibv_advise_mr(dev.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH,
			       &sge, 1), EFAULT);
	CHECK_EQ(ibv_dereg_mr(mr), 0);
	CHECK_EQ(ibv_dereg_mr(ro), 0);
	munmap(base, len);
}

int main(void)
{
	struct vu_qp_cfg q;

	sr_test_timeout(120);
	setenv("SOFTRDMA_PIN", "1", 1);	/* ODP MRs must stay unlocked even so */
	page_size = sysconf(_SC_PAGESIZE);
	REQUIRE(vu_open(&dev) == 0);
	vu_qp_cfg_default(&q, IBV_QPT_RC);
	REQUIRE(vu_pair_create(&dev, &q, NULL, &pair) == 0);
	REQUIRE(vu_buf_alloc(&dev, &src, 4 * CHUNK, VU_ACCESS_ALL) == 0);

	test_caps();
	test_sparse();
	test_implicit();
	test_holes();
	test_advise();

	vu_buf_free(&src);
	vu_pair_destroy(&pair);
	vu_close(&dev);
	return sr_test_done("test_odp");
}
