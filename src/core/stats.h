/* SPDX-License-Identifier: MIT */
/*
 * Per-device counters. Each soft NIC keeps them in a small shared-memory file
 * (<stats_dir>/softrdma-<uid>/<pid>-<dev>.stat) so that `softrdma stat` reads a live process's
 * counters without asking it anything. The file is self-describing (see include/softrdma/stats.h
 * for its layout), so the CLI does not depend on this list's order.
 */
#ifndef SR_CORE_STATS_H
#define SR_CORE_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SR_STAT_LIST(X)                                                               \
	X(tx_packets, "packets transmitted (after fault injection)")                \
	X(tx_bytes, "UDP payload bytes transmitted")                                \
	X(rx_packets, "packets received")                                           \
	X(rx_bytes, "UDP payload bytes received")                                   \
	X(rx_app_datagrams, "datagrams (one holds several packets when coalesced) taken by an application polling a CQ (param poll_rx), not by the progress thread") \
	X(rx_chan_datagrams, "datagrams taken by a completion channel's consumer that the datagram woke (param chan_rx), not by the progress thread") \
	X(rx_watch_takes, "receives with data that the progress thread made while watching a polling application, packets that application left waiting (param rx_watch_us)") \
	X(rx_plain_on, "times the progress thread turned UDP_GRO off for a polling application whose datagrams came alone, which it then receives by recvfrom (turned on again at the first batch, or when the application stops polling)") \
	X(timer_busy_skips, "looks at a QP's timers that the progress thread put off because a polling application held the QP's lock (at most 1 ms in a row)") \
	X(rx_thread_wakes, "times a datagram woke the progress thread (socket armed: nobody watching; a ping-pong whose applications poll should cause few)") \
	X(thread_wakes, "times the progress thread woke, for any reason: a datagram, a kick, a timeout (the watch's looks, timers, deferred ACKs); each costs a context switch and may preempt a polling application") \
	X(rx_linger_takes, "receives with data that the progress thread made while lingering after a stream's drain, each a wake-up saved (param rx_linger_us)") \
	X(rx_linger_skips, "drains after which the progress thread did not linger, since the lingers just before found nothing (a back-off: 1, 3, 7, then 15 drains; param rx_linger_us)") \
	X(tx_errors, "sendmsg failures (the packet is lost; the transport recovers)") \
	X(tx_gso_sends, "GSO sends (a sendmsg, or one message of a sendmmsg) that carried several packets (UDP GSO, parameter gso)") \
	X(tx_mmsg_sends, "sendmmsg calls that sent several runs (GSO sends of one packet length) at once") \
	X(tx_write_fshort, "RDMA WRITEs whose FIRST packet carried the segment less its RETH, all packets but the LAST then one size (the peer takes it: parameter seg_fshort)") \
	X(tx_write_even, "RDMA WRITEs cut evenly: FIRST P - 16 bytes, every later packet P but a LAST that may be shorter, all those one datagram size (the peer takes it: parameter seg_even)") \
	X(tx_read_overlap, "RDMA READ requests for the next piece of a READ sent while the piece before was still being answered (parameter read_overlap)") \
	X(rx_placed_checked, "RC WRITE and SEND packets, and RC READ responses, placed and ICRC-checked in one pass (MIDDLE of the message in progress, resp.c sr_resp_place; of the oldest WQE's READ, comp.c sr_comp_place)") \
	X(rx_id_refused, "packets from a softrdma sender whose ICRC matched only with an IPv4 ID such a sender never uses, dropped as drop_icrc (corruption; or a path that rewrites IP IDs: param icrc_id_strict)") \
	X(rx_id_recovered, "IPv4 packets whose IP ID was not the one expected, recovered from the ICRC (Linux rxe; a GSO batch cut before a receiver without GRO)") \
	X(retransmits, "request packets sent again (go-back-N)")                  \
	X(repairs, "single packets resent after a NAK (selective repair, param repair)") \
	X(tail_probes, "single packets resent after 2 RTTs without progress (tail-loss probe, param repair)") \
	X(probe_acks_early, "ACKs of a tail-loss-probed packet alone sooner after the probe than the shortest round trip, or later after it than the probe came after the packet's first send: the first copy's, late; not taken as loss of what follows") \
	X(retry_timeouts, "local ACK timeouts (counted against retry_cnt)")         \
	X(fast_retransmits, "early go-back-N after a few RTTs without progress (not counted)") \
	X(cwnd_cuts, "send window cuts to 3/4 after a loss at the path's base round trip (a NAK or a fast go-back-N; once per window of packets): a random loss") \
	X(cwnd_halvings, "send window cuts to 1/2 after a loss with a queue on the path (SRTT more than 1 ms and twice the base round trip above it): the congestion response") \
	X(cwnd_restarts, "send window restarts at 4 packets after a local ACK timeout (then slow start)") \
	X(rtt_samples, "round-trip samples taken (RC requester: a packet sent once, to the ACK that covers it)") \
	X(rtt_sample_us, "sum of those samples, us (divided by rtt_samples: the mean round trip)") \
	X(rtt_bounds, "round-trip samples from a probe shown premature (probe_acks_early, the later kind): the time from the probe to the ACK, a lower bound of the round trip, above SRTT") \
	X(rtt_karn_discards, "round-trip samples given up: a packet at or before the sampled one was sent again (Karn)") \
	X(retry_exceeded, "WRs completed with RETRY_EXC_ERR")                       \
	X(rnr_naks_sent, "RNR NAKs sent (no receive WQE)")                          \
	X(rnr_naks_rcvd, "RNR NAKs received")                                       \
	X(rnr_retry_exceeded, "WRs completed with RNR_RETRY_EXC_ERR")               \
	X(seq_naks_sent, "PSN sequence error NAKs sent")                            \
	X(seq_naks_rcvd, "PSN sequence error NAKs received")                        \
	X(seq_naks_ignored, "of those, ignored: a rewind was under way, nothing new acknowledged") \
	X(access_naks_sent, "remote access error NAKs sent (bad rkey, bounds, rights)") \
	X(key_stale, "accesses refused: key of an invalidated, unbound or replaced generation (MW, fast-reg MR)") \
	X(map_replays, "retransmissions or replays served by a fast-reg map invalidated after their PSN") \
	X(flush_msync, "persistence FLUSHes written back with msync (file-backed MRs)") \
	X(inv_req_naks_sent, "invalid request NAKs sent")                           \
	X(op_naks_sent, "remote operational error NAKs sent")                       \
	X(naks_rcvd, "other NAKs received (access, invalid request, operational)") \
	X(ooo_kept, "requests kept by the responder after a gap (ooo_window)")   \
	X(ooo_run, "kept requests executed once the gap was filled")             \
	X(dup_requests, "duplicate request packets (re-ACKed or replayed)")         \
	X(acks_sent, "ACK packets sent")                                            \
	X(acks_deferred, "ACKs that waited for the application's answer and left with it (param ack_defer_us)") \
	X(acks_deferred_late, "deferred ACKs sent alone: no answer within ack_defer_us")  \
	X(acks_unasked, "ACKs sent alone for message ends that did not ask (param ack_lazy): no other ACK or response covered them within 2 x ack_defer_us") \
	X(ackreq_skipped, "message ends sent without AckReq: the last packet of an unsignaled SEND or WRITE toward a softrdma peer (param ack_lazy)") \
	X(acks_rode, "ACKs that left inside the request of the application's answer rather than as a packet of their own: deferred ACKs toward a softrdma peer that takes them (param ack_ride; counted in acks_deferred too, not in acks_sent)") \
	X(acks_rcvd, "ACK packets received (a carried one too: acks_rode_rcvd)")   \
	X(acks_rode_rcvd, "ACKs received inside a softrdma peer's request (BTH resv7 bit 28), taken before that request") \
	X(offer_kept, "packets whose in-band offer (BTH byte 4: softrdma's mark and segment units, outside the ICRC) differed from the one their connected QP holds for its peer, which kept it (a change needs two packets in a row: one flipped bit changes nothing)") \
	X(drop_short, "dropped: too short for its headers")                         \
	X(drop_opcode, "dropped: invalid or unsupported opcode")                    \
	X(drop_tver, "dropped: BTH transport version not 0")                        \
	X(drop_pad, "dropped: bad pad count")                                       \
	X(drop_icrc, "dropped: ICRC mismatch")                                      \
	X(drop_ride, "dropped: a request marked as carrying an ACK where none may ride (not a whole RC message in one packet), too short for it, or not carrying an ACK; or one with the bit but not the mark from a peer whose packets carry it (the mark lost on the way: the ACK would be taken for payload)") \
	X(drop_qpn, "dropped: no such destination QP")                              \
	X(drop_qp_gone, "dropped: for a QP destroyed here in the last 10 s (a peer's last ACK, probe or retransmission after the end)") \
	X(drop_qp_type, "dropped: opcode class does not match the QP type")        \
	X(drop_qp_state, "dropped: QP not in a state that accepts the packet")     \
	X(drop_src, "dropped: source address/QP is not the QP's peer")             \
	X(drop_pkey, "dropped: P_Key mismatch")                                     \
	X(drop_qkey, "dropped: Q_Key mismatch (UD)")                                \
	X(drop_psn, "dropped: out-of-sequence PSN (after a NAK) or stale response") \
	X(drop_unexpected, "dropped: response with nothing outstanding / bad length") \
	X(drop_uc_msg, "dropped: UC packets of a message already broken by loss")  \
	X(drop_no_rwqe, "dropped: UD/UC message with no receive WQE")             \
	X(drop_too_long, "dropped: message longer than the receive buffer (UD/UC)") \
	X(odp_accesses, "ODP: accesses to ODP MRs (pages faulted in as needed)")       \
	X(odp_access_errors, "ODP: accesses refused, the memory is not mapped (or not writable)") \
	X(odp_prefetches, "ODP: ibv_advise_mr ranges prefetched")                     \
	X(direct_writes, "same-host direct path: RDMA WRITEs placed with process_vm_writev, no packet (param direct)") \
	X(direct_reads, "same-host direct path: RDMA READs fetched with process_vm_readv, no packet") \
	X(direct_write_imms, "same-host direct path: RDMA WRITEs with immediate whose data was placed so; the immediate follows as a packet without payload") \
	X(direct_bytes, "same-host direct path: payload bytes moved") \
	X(direct_helper_bytes, "same-host direct path: bytes of those copied by the helper thread beside the posting one (param direct_split)") \
	X(direct_fallbacks, "same-host direct path: WRs sent as packets after all (key, state or copy check failed)") \
	X(rx_write_imm_placed, "responder: WRITE with immediate whose data the same-host peer had placed (direct path): receive completed, nothing copied") \
	X(cq_overflow, "completions lost to a full CQ (CQ error event raised)")   \
	X(fault_drop, "fault injection: packets dropped")                          \
	X(fault_dup, "fault injection: packets duplicated")                        \
	X(fault_reorder, "fault injection: packets delayed behind the next one")   \
	X(fault_corrupt, "fault injection: packets corrupted")                     \
	X(fault_delayed, "fault injection: packets held in the delay line (delay, jitter)") \
	X(fault_delay_overflow, "fault injection: packets dropped, the delay line full (limit)") \
	X(async_events, "asynchronous events raised")                                \
	X(rx_pauses, "progress thread left the socket to an application with completions to take") \
	X(rx_pause_expired, "... and took it back, the completions still untaken (backlog_pause_us, buffer half full)") \
	X(rx_pause_timer_takes, "datagrams received during a pause because a retransmission timer was due (the ACK it waits for may be in the socket)") \
	X(cm_msgs_rcvd, "rdma_cm: CM messages received")                            \
	X(cm_drop_malformed, "rdma_cm: dropped: not a CM message, other version, bad length") \
	X(cm_drop_unknown, "rdma_cm: dropped: unknown connection, wrong peer or state (stale, replayed, forged)") \
	X(cm_rejects_sent, "rdma_cm: requests rejected (no listener, rejected, bad request)") \
	X(cm_timeouts, "rdma_cm: REQ/REP/DREQ given up after retries, or a silent peer") \
	X(cm_req_held, "rdma_cm: REQs left unanswered (their port's listener had just gone, or its bound id does not listen yet; the requester retries)") \
	X(cm_mads_sent, "rdma_cm over the IB CM (cm_wire=ibcm): CM MADs sent from QP1")         \
	X(cm_mads_rcvd, "rdma_cm over the IB CM: CM MADs received on QP1")                  \
	X(cm_mad_send_errors, "rdma_cm over the IB CM: CM MADs QP1 could not send")         \
	X(cm_reqs_rcvd, "rdma_cm over the IB CM: REQs that became a CONNECT_REQUEST")       \
	X(cm_rejects_rcvd, "rdma_cm over the IB CM: REJs received for a connection (REJECTED)") \
	X(cm_qp1_queries, "rdma_cm over the IB CM: QP1 QUERYs to a listener on this host (where its process's QP1 is)") \
	X(cm_redirects_sent, "rdma_cm over the IB CM: REQs (SIDR_REQs) for another process's listener on this address answered with a port and CM redirect (REJ 24, SIDR_REP status 4)") \
	X(cm_redirects_followed, "rdma_cm over the IB CM: redirects followed (the REQ or SIDR_REQ sent again to the listener's QP1)") \
	X(cm_redirects_refused, "rdma_cm over the IB CM: redirects not followed (a field failed its check, a loop, or too many): REJECTED / UNREACHABLE")

enum sr_stat {
#define SR_STAT_ENUM(name, doc) SR_STAT_##name,
	SR_STAT_LIST(SR_STAT_ENUM)
#undef SR_STAT_ENUM
	SR_STAT_MAX
};

struct sr_stats {
	_Atomic uint64_t *v;	/* SR_STAT_MAX counters (inside the shared file, or private memory) */
	void *map;		/* the mapping, NULL when private */
	size_t map_len;
	char path[256];
	/* Added to the original contract; private to stats.c. */
	int fd;			/* the file, holding the shared flock that says "alive"; -1 if none */
	int pid;		/* opener: a forked child must not remove or dump its parent's file */
	int finished;		/* already dumped and removed (by the exit hook) */
	char dev[64];		/* for the dump at exit */
	char ident[128];
	struct sr_stats *next;	/* list of open sets, walked at exit */
};

extern const char *const sr_stat_name[SR_STAT_MAX];
extern const char *const sr_stat_doc[SR_STAT_MAX];

/* Creates the shared counter file for device `devname` of this process (falls back to private
 * memory when the directory is not writable). Never fails: counters are always usable. */
void sr_stats_open(struct sr_stats *s, const char *devname, const char *ident);
/* Removes the file (and appends the final counters to stats_dump when that is set). A set still
 * open when the process exits (exit() or return from main) is dumped and its file removed by
 * an exit hook; the memory stays valid, since other threads may still be counting. */
void sr_stats_close(struct sr_stats *s, const char *devname);
/* <stats_dir>/softrdma-<uid>, created if missing and checked to be ours (mode 0700): an open
 * directory fd and its path in `path`, or -errno. The same-host direct path's key tables live
 * there too (src/transport/direct.c). */
int sr_shm_dir_open(char *path, size_t size);

static inline void sr_stat_add(struct sr_stats *s, enum sr_stat k, uint64_t n)
{
	atomic_fetch_add_explicit(&s->v[k], n, memory_order_relaxed);
}
static inline void sr_stat_inc(struct sr_stats *s, enum sr_stat k) { sr_stat_add(s, k, 1); }
/*
 * The same for a counter whose every writer holds one lock (the receive path's counters:
 * nic->rx_lock), so no two adds race: a load and a store, no lock-prefixed add. Exact all the
 * same, and a reader still sees each value whole (one aligned 64-bit store). A counter bumped
 * here must never be bumped by sr_stat_add, nor outside that lock: an add between the load and
 * the store would be lost.
 */
static inline void sr_stat_add_excl(struct sr_stats *s, enum sr_stat k, uint64_t n)
{
	atomic_store_explicit(&s->v[k], atomic_load_explicit(&s->v[k], memory_order_relaxed) + n,
			      memory_order_relaxed);
}
static inline uint64_t sr_stat_get(struct sr_stats *s, enum sr_stat k)
{
	return atomic_load_explicit(&s->v[k], memory_order_relaxed);
}

#endif /* SR_CORE_STATS_H */
