/* SPDX-License-Identifier: MIT */
/*
 * Shared setup for the tests in tests/verbs: open softrdma0, make CQs and QPs, connect a pair of
 * QPs inside one process (RESET -> INIT -> RTR -> RTS with each other's GID and QPN), register
 * buffers, post and poll with a deadline, run a function in a forked child, and read this
 * process's live counters.
 *
 * Public headers only (<infiniband/verbs.h> and the public <softrdma/stats.h>): these helpers
 * work the same against any verbs provider, and nothing here reaches into the engine.
 * Helpers return 0 or a positive errno unless said otherwise; they never exit the test.
 */
#ifndef SR_VERBS_UTIL_H
#define SR_VERBS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

/* ---- device ---------------------------------------------------------------------------- */
struct vu_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;		/* port 1's GID naming its UDP port (its last) */
	enum ibv_mtu active_mtu;
};

/* Opens softrdma0 (else the first device), allocates a PD, reads the GID and port MTU. */
int vu_open(struct vu_dev *d);
void vu_close(struct vu_dev *d);

/* ---- QP creation and connection ---------------------------------------------------------- */
struct vu_qp_cfg {
	enum ibv_qp_type type;
	uint32_t max_send_wr, max_recv_wr;
	uint32_t max_send_sge, max_recv_sge;
	uint32_t max_inline;
	int sq_sig_all;
	struct ibv_srq *srq;
	uint64_t send_ops_flags;	/* non-zero: created with ibv_create_qp_ex (ibv_wr_* API) */
	int cqe;			/* CQ size for vu_pair_create */
};

struct vu_conn_cfg {
	enum ibv_mtu mtu;
	uint32_t sq_psn;		/* first PSN this QP sends */
	uint32_t rq_psn;		/* first PSN it expects (the peer's sq_psn) */
	uint8_t timeout, retry_cnt, rnr_retry, min_rnr_timer;
	uint8_t max_rd_atomic, max_dest_rd_atomic;
	unsigned access;		/* qp_access_flags */
	uint32_t qkey;			/* UD */
};

/* RC, 64 WRs each way, 4 SGEs, 256 bytes inline, every WR signaled, CQs of 1024. */
void vu_qp_cfg_default(struct vu_qp_cfg *q, enum ibv_qp_type type);
/* MTU 1024, PSNs 0, timeout 14 (67 ms), retry 7, RNR retry 7, min RNR timer 1 (10 us),
 * 16 outstanding READ/ATOMIC each way, all remote rights, Q_Key 0x11111111. */
void vu_conn_cfg_default(struct vu_conn_cfg *c);

/* NULL with errno set on failure. */
struct ibv_qp *vu_qp_create(struct vu_dev *d, struct ibv_cq *scq, struct ibv_cq *rcq,
			    const struct vu_qp_cfg *q);
int vu_qp_to_init(struct ibv_qp *qp, const struct vu_conn_cfg *c);
/* RC/UC: path to dgid, dest QPN dqpn; UD ignores both. */
int vu_qp_to_rtr(struct ibv_qp *qp, const struct vu_conn_cfg *c, const union ibv_gid *dgid,
		 uint32_t dqpn);
int vu_qp_to_rts(struct ibv_qp *qp, const struct vu_conn_cfg *c);
/* All three steps. */
int vu_qp_connect(struct ibv_qp *qp, const struct vu_conn_cfg *c, const union ibv_gid *dgid,
		  uint32_t dqpn);
/* The state ibv_query_qp reports, or -1. */
int vu_qp_state(struct ibv_qp *qp);
/*
 * An RC QP (vu_qp_cfg_default) on cq (send and receive) connected to a scripted peer at
 * peer_gid, QPN peer_qpn (tests/common/rawpeer.h), by c (NULL: vu_conn_cfg_default), with nrecv
 * receives of recv_len bytes posted from buf (the i-th: wr_id i, at buf->p + i * recv_len).
 * NULL on a failure. For the tests whose raw peer sends to a real QP.
 */
struct vu_buf;
/*
 * For the tests whose raw peer (tests/common/rawpeer.h) plays the other end of an RC QP:
 * vu_conn_cfg_raw fills c as vu_conn_cfg_default does, but for the first PSNs (sq_psn this QP
 * sends, rq_psn it expects from the peer); vu_qp_connect_raw creates an RC QP of q (NULL:
 * vu_qp_cfg_default) on cq (send and receive) and connects it by c to peer_gid, QPN peer_qpn.
 * A failure fails the test (REQUIRE).
 */
void vu_conn_cfg_raw(struct vu_conn_cfg *c, uint32_t sq_psn, uint32_t rq_psn);
struct ibv_qp *vu_qp_connect_raw(struct vu_dev *d, struct ibv_cq *cq, const struct vu_qp_cfg *q,
				 const struct vu_conn_cfg *c, const union ibv_gid *peer_gid,
				 uint32_t peer_qpn);
struct ibv_qp *vu_qp_to_peer(struct vu_dev *d, struct ibv_cq *cq, const struct vu_conn_cfg *c,
			     const union ibv_gid *peer_gid, uint32_t peer_qpn,
			     const struct vu_buf *buf, uint32_t nrecv, uint32_t recv_len);
/* An address vector for dgid (global, port 1, sgid index 0). */
void vu_ah_attr(struct ibv_ah_attr *ah, const union ibv_gid *dgid);

/* Two QPs of one process connected to each other, each with its own send and receive CQ.
 * Side 1 gets c with sq_psn and rq_psn swapped; c may be NULL (defaults). */
struct vu_pair {
	struct vu_dev *dev;
	struct ibv_cq *scq[2], *rcq[2];
	struct ibv_qp *qp[2];
};
int vu_pair_create(struct vu_dev *d, const struct vu_qp_cfg *q, const struct vu_conn_cfg *c,
		   struct vu_pair *p);
/* Creates the CQs and QPs only (both left in RESET). */
int vu_pair_create_reset(struct vu_dev *d, const struct vu_qp_cfg *q, struct vu_pair *p);
int vu_pair_connect(struct vu_pair *p, const struct vu_conn_cfg *c);
void vu_pair_destroy(struct vu_pair *p);

/* ---- memory ------------------------------------------------------------------------------- */
struct vu_buf {
	uint8_t *p;
	size_t len;
	struct ibv_mr *mr;
};
#define VU_ACCESS_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
/* Page-aligned, zeroed memory of len bytes (at least one page is mapped) registered with access
 * on d's PD; access 0 allocates without registering. */
int vu_buf_alloc(struct vu_dev *d, struct vu_buf *b, size_t len, unsigned access);
void vu_buf_free(struct vu_buf *b);

/* ---- posting ------------------------------------------------------------------------------ */
/* One-SGE WRs; lkey from mr (mr may be NULL with len 0: no SGE). Return ibv_post_* results. */
int vu_post_send(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_mr *mr,
		 const void *addr, uint32_t len, uint32_t imm_host, unsigned flags);
int vu_post_rdma(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_mr *mr,
		 const void *addr, uint32_t len, uint64_t raddr, uint32_t rkey, unsigned flags);
/* Two signaled RDMA WRITEs of len bytes from addr in one post: wr_id to raddr with mr's lkey,
 * then wr_id + 1 to raddr + len with a wrong lkey (a local protection error at the requester,
 * after the first was sent). */
int vu_post_write_then_bad_lkey(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr,
				const void *addr, uint32_t len, uint64_t raddr, uint32_t rkey);
/* The same with the second (bad) WRITE len2 bytes long. */
int vu_post_write_then_bad_lkey2(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr,
				 const void *addr, uint32_t len, uint32_t len2, uint64_t raddr,
				 uint32_t rkey);
/* RDMA WRITE with immediate data imm_host (sent in network order). */
int vu_post_write_imm(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, const void *addr,
		      uint32_t len, uint64_t raddr, uint32_t rkey, uint32_t imm_host,
		      unsigned flags);
int vu_post_atomic(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op, struct ibv_mr *mr,
		   void *result, uint64_t raddr, uint32_t rkey, uint64_t compare_add,
		   uint64_t swap, unsigned flags);
int vu_post_ud(struct ibv_qp *qp, uint64_t wr_id, struct ibv_ah *ah, uint32_t dqpn,
	       uint32_t qkey, struct ibv_mr *mr, const void *addr, uint32_t len, unsigned flags);
int vu_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mr *mr, void *addr, uint32_t len);
int vu_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id, struct ibv_mr *mr, void *addr,
		     uint32_t len);

/* ---- polling ------------------------------------------------------------------------------ */
/* Polls cq until n completions are collected or timeout_ms passes; returns how many it got
 * (negative: ibv_poll_cq failed). */
int vu_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, int timeout_ms);
/* One completion within timeout_ms: 1, or 0 on timeout. */
int vu_wait(struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms);
/* One completion within timeout_ms with this wr_id and status (and, when it succeeded and
 * opcode >= 0, this opcode); otherwise a test failure naming the caller's line. */
struct ibv_wc vu_expect_wc(struct ibv_cq *cq, uint64_t wr_id, int status, int opcode,
			   int timeout_ms, int line);
/* Polls cq for ms milliseconds (letting the engine make progress); returns completions seen,
 * stored in wc up to n. */
int vu_drain(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms);
/* "wr_id 7 status 0 (success) opcode 128 len 4 imm 0x0 qp 0x1234" into a static buffer. */
const char *vu_wc_str(const struct ibv_wc *wc);
void vu_sleep_ms(int ms);
uint64_t vu_now_ms(void);

/* ---- data patterns ----------------------------------------------------------------------- */
/* splitmix64: a seeded PRNG the tests share. */
uint64_t vu_rand(uint64_t *state);
/* Bytes that differ from offset to offset and from seed to seed. */
void vu_fill(void *p, size_t len, uint32_t seed);
/* Offset of the first byte not as vu_fill(seed) wrote it, or -1. */
long vu_check(const void *p, size_t len, uint32_t seed);
/* Offset of the first byte != v, or -1. */
long vu_check_byte(const void *p, size_t len, uint8_t v);

/* ---- two processes ----------------------------------------------------------------------- */
struct vu_child {
	pid_t pid;
	int sock;			/* parent's end of a socketpair to the child */
};
/* Forks; the child runs fn(its end of the socketpair, arg) under its own timeout_s alarm and
 * exits with fn's return value (0 = success). The child must not use the parent's verbs
 * objects; it may open the device again (tests/verbs/test_fork.c). */
int vu_fork(struct vu_child *c, int (*fn)(int sock, void *arg), void *arg, unsigned timeout_s);
/* Waits up to timeout_s for the child; returns its exit status, or -1 (killed, timed out:
 * then it is killed). */
int vu_child_wait(struct vu_child *c, unsigned timeout_s);
/* Whole-buffer socket I/O: 0 or an errno (EPIPE when the peer closed). */
int vu_sock_send(int sock, const void *p, size_t n);
int vu_sock_recv(int sock, void *p, size_t n);

/* What two processes exchange to connect a QP and reach a buffer. */
struct vu_endpoint {
	union ibv_gid gid;
	uint32_t qpn;
	uint32_t psn;
	uint64_t addr;
	uint32_t rkey;
	uint32_t pad;
	uint64_t len;
};

/* ---- counters ------------------------------------------------------------------------------ */
/* Counter `name` of device softrdma0 of process pid (0: this process), read from its live
 * counter file (<SOFTRDMA_STATS_DIR or /dev/shm>/softrdma-<uid>/<pid>-softrdma0.stat, layout in
 * <softrdma/stats.h>); -1 when the file or the counter is missing. */
int64_t vu_stat_pid(pid_t pid, const char *name);
int64_t vu_stat(const char *name);

#endif /* SR_VERBS_UTIL_H */
