/* SPDX-License-Identifier: MIT */
/*
 * Every runtime parameter, declared once: name, type, default, one line of doc. The value comes
 * from the environment variable SOFTRDMA_<NAME> (upper case), else the default. `softrdma
 * params` prints this table. Add a parameter here and nowhere else.
 *
 * Types: INT (long, decimal or 0x hex, optional k/m/g suffix), BOOL (0/1/yes/no/on/off/true/
 * false), STR (string; "" = unset).
 */
#ifndef SR_CORE_PARAM_H
#define SR_CORE_PARAM_H

#include <stdatomic.h>
#include <stdbool.h>

#define SR_PARAM_LIST(X)                                                                        \
	X(netdev, STR, "", "comma list of interfaces; one device per entry (softrdma0, softrdma1..), bound to its IP address; empty: one loopback device") \
	X(addr, STR, "", "bind the (first) device to this IP address instead of an interface's (IPv4 or IPv6)") \
	X(port, INT, 4791, "UDP port of the (first) device; when busy, another port is picked and encoded in the GID") \
	X(mtu, INT, 0, "largest RoCE path MTU the port offers (256..4096); 0: derived from the interface MTU") \
	X(fault, STR, "", "transmit fault injection, e.g. drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01,seed=1; after=N spares the first N packets. delay=US,jitter=US hold each packet for delay +- a uniform jitter, us, sent by the progress thread when due; a FIFO: jitter never reorders (a real path's queue does not; netem's default does; reorder= is the knob for that, and an RTT estimator should be measured on jitter alone); at most limit=N packets held (default 1000, as netem), more are dropped (counter fault_delay_overflow). to=IP applies all of it only to packets for that address (one process, two paths); others pass untouched") \
	X(pcap, STR, "", "write every packet sent and received, with IP/UDP headers, to this pcap file (%p: pid)") \
	X(pin, BOOL, 0, "lock registered memory (mlock); then RLIMIT_MEMLOCK applies and reg_mr may fail with ENOMEM") \
	X(icrc_check, BOOL, 1, "verify the ICRC of received packets (drop and count on mismatch)") \
	X(crc_engine, STR, "", "cap the CRC engine of the ICRC at: tables (slicing-by-8), pclmul (PCLMULQDQ, 16-byte lanes), vpclmul256 (VPCLMULQDQ with AVX2) or vpclmul512 (with AVX-512); never above what the CPU has; empty: the best the CPU has. Results are identical; it makes one CPU measure the speed of an older one (bench/run --crc-engine)") \
	X(icrc_id_strict, BOOL, 1, "a packet from a softrdma sender may have its IPv4 ID recovered from the ICRC only to the IDs such a sender uses (0..63, DF); 0: any ID, for a path that rewrites IP IDs (counter rx_id_refused says when that happens)") \
	X(log, STR, "warn", "log level: error, warn, info, debug") \
	X(direct, BOOL, 1, "between two softrdma processes of one host and network namespace, an RC RDMA WRITE or READ moves its payload with one process_vm_writev/readv after checking the target's key table (exported in stats_dir), no packet; 0: always UDP. Off while fault injection or a pcap is on") \
	X(direct_stream_min, INT, 16384, "in a stream of posts (no poll of the send CQ since the QP's previous post), an RDMA WRITE smaller than this takes packets, which leave in batches, rather than the direct path's one process_vm_writev each; 0: direct at any size") \
	X(direct_split, INT, 262144, "a direct-path copy of at least this many bytes is cut into chunks that a second thread copies beside the posting one (one helper per process, 2+ CPUs); 0: one thread copies") \
	X(seg_max, INT, 65536, "largest payload of one packet on a connection rdma_cm makes between two softrdma peers that both offer it (bounded by the interface MTU, a multiple of 4096; below 8192: the IB path MTU only)") \
	X(cm_wire, STR, "ibcm", "what librdmacm speaks on the wire to set up connections (RC, UC, XRC) and resolve UD services: ibcm (IB CM MADs to QP1, REQ..RTU and SIDR, as the kernel's rdma_cm, kernel rxe and RoCE NICs) or private (softrdma's own UDP messages between the two processes' CM sockets, with large segments negotiated in the REQ/REP: docs/cm.md)") \
	X(seg_inband, BOOL, 1, "offer large segments in every packet (BTH reserved bits) and, on an RC/UC connection rdma_cm did not set up, send SEND/WRITE packets of the size a softrdma peer offers (path MTU 4096 only)") \
	X(seg_fshort, BOOL, 1, "with seg_inband, tell a softrdma peer (BTH byte 4, bit 4) that this responder takes a WRITE whose FIRST packet carries the segment less its 16-byte RETH, so the peer's WRITEs of more than two segments leave with all packets but the LAST one datagram size (one GSO send); 0: the peer cuts FIRST packets of a whole segment, as before") \
	X(seg_even, BOOL, 1, "with seg_fshort, tell a softrdma peer (BTH resv7, bit 29) that this responder takes a WRITE cut evenly: its FIRST carries P - 16 bytes and every later packet P (the LAST at most P), P up to the segment + 16, each padded to 4 bytes alike, so that every packet of the WRITE but a shorter LAST is one datagram size, and where the length + 16 splits exactly every packet of it and of the next such WRITE, and a stream of them shares GSO sends (16 and 32 KiB over 8 KiB segments; a longer WRITE takes fewer sends than with a whole-segment FIRST). 0: neither offered nor sent") \
	X(seg_even_mtu, BOOL, 1, "tell a softrdma peer (BTH resv7, bit 27) that this responder takes the even cut at the path MTU on an RC/UC QP with no large segment in use (a network of MTU 1500, say): a WRITE of n > 1 packets as a FIRST of P - 16 bytes and packets of P, P at most the path MTU + 16, so that a stream of few-packet WRITEs leaves in shared GSO sends (every datagram one size) where a FIRST 16 bytes longer than its MIDDLEs split every WRITE in two sends; 0: neither offered nor sent") \
	X(gso, BOOL, 1, "send a run of equal-sized packets to one peer in one sendmsg (UDP GSO; their IPv4 IDs and ICRCs are those of separate sends) and take coalesced ones in one receive (UDP GRO). Off while fault injection or a pcap is on") \
	X(cm_guard, STR, "1", "with cm_wire=ibcm, a guardian process (softrdma-cm-guard, beside librdmacm.so.1) sends the DREQs of the process's connections that are up when it ends, however it ends (SIGKILL too), as the kernel does for its rdma_cm ids: 0 off, log also says what it did on the standard error (docs/cm.md)") \
	X(post_batch, INT, 32, "on an RC QP with a WQE waiting for its ACK, a posted send smaller than one packet, or of one to post_batch_pkts packets behind another of at least one, waits in the queue until this many wait, the ACK comes or a SEND or WRITE of more than post_batch_pkts packets (or of one behind a smaller one) is posted, then they leave together (1: every post sends at once)") \
	X(post_batch_pkts, INT, 4, "with post_batch, a SEND or WRITE of at least one and at most this many packets waits like a smaller one when the WQE before it fills a packet too, so that a stream of WRITEs of a few packets leaves in shared sends (a network of MTU 1500: 2 KiB ib_write_bw 5.4x, 4 KiB 1.6x); 1: only those of exactly one packet") \
	X(read_overlap, BOOL, 1, "ask for the next piece of a READ larger than the send window once half the window is free, while the responses of the piece before still arrive (two READ requests of one WQE outstanding, within max_rd_atomic), rather than after its last response: a turnaround per piece saved (a network of MTU 1500: 1 MiB ib_read_bw 1.43x); 0: the next piece after the last response") \
	X(max_inflight, INT, 128, "largest number of unacknowledged request packets per QP (the send window)") \
	X(ack_defer_us, INT, 50, "on an RC QP whose application answers each message with a send of its own (a ping-pong), the ACK of a message waits for that send and leaves with it (one datagram; the receiver takes the ACK first), or alone after this long (at most 5 times: the progress thread looks less often while the application polls), us: the answer then finds its peer still polling for the ACK, with no thread to wake. Toward softrdma peers only (0: ACK at once)") \
	X(ack_ride, BOOL, 1, "with ack_defer_us, a deferred ACK leaves inside the answer's request packet (8 bytes after its headers, BTH resv7 bit 28) instead of as a second datagram after it, when that packet is a whole RC message and the peer is a softrdma NIC whose responses offer to take it (the same bit in every response toward a softrdma peer); 0: neither offered nor sent") \
	X(ack_every, INT, 32, "request an ACK at least every this many packets of a long message, or of a stream of WRITEs of several packets each posted right behind one another") \
	X(ack_lazy, INT, 16, "toward a softrdma peer, the last packet of an unsignaled SEND or WRITE (posted after a poll of the send CQ: not in a stream; no fence; not sq_sig_all) does not ask for an ACK while no packet that asked awaits its ACK, fewer than this many packets went since the last that asked, that one asked under ack_defer_us ago, fewer than half the SQ's WQEs and half the window wait for an ACK; the peer's responder acknowledges such packets with its next ACK, or alone 2 x ack_defer_us after them (0 or 1, or ack_defer_us 0: every message end asks)") \
	X(retry_backoff, BOOL, 1, "double the local ACK timeout after each timeout without progress (at most 2 s): a peer starved of CPU is not a dead peer") \
	X(ooo_window, INT, 256, "responder keeps up to this many requests that arrive after a gap and runs them once it is filled (0: drop them, plain go-back-N; at most 256)") \
	X(repair, BOOL, 1, "after a sequence NAK resend only the missing packet, while the peer is seen to keep the packets after a gap (0: always go-back-N)") \
	X(rto_min_us, INT, 10000, "fast retransmission after max(this, SRTT + 4 RTTVAR) without progress, at most the local ACK timeout, us (uncounted; the IBA timeout counts; none before the first RTT sample)") \
	X(rx_linger_us, INT, 30, "after a drain that took packets while no application polls (a stream, the passive side of a ping-pong), the progress thread keeps receiving until the socket has been empty this long, us, rather than sleep until the next datagram wakes it (0: never; busy_poll_us, when set, replaces it; after lingers that found nothing the next drains go without one, stat rx_linger_skips)") \
	X(rx_watch_us, INT, 200, "while an application polls its CQs (it receives by itself, param poll_rx), the progress thread leaves the socket unarmed and looks for packets left waiting this often, us, rather than be woken by each datagram (0: woken by each)") \
	X(rx_watch_max_us, INT, 1000, "the watch's looks (rx_watch_us) grow, doubling, up to this long, us, while every look finds the application in its polling loop and none has had to take a packet or send a late ACK for 2 ms; the first look that takes something goes back to rx_watch_us (at most rx_watch_us: fixed)") \
	X(busy_poll_us, INT, 0, "progress thread spins this long on an empty socket before sleeping, unless an application polled its CQs in the last millisecond (it receives by itself, see rx_watch_us) (0: sleep at once)") \
	X(nic_nice, INT, 0, "nice value the progress thread asks for (0: the process's own, never changed); e.g. -10 puts it above the applications, as before nic_slice_us: its wake-ups then preempt a spinning application, but on a CPU it shares it takes nine times an application's share and the load balancer weighs it so (RTRS's 128 KiB WRITE stream measured 1.17x faster with 0 and the short slice); kept at the process's own when not permitted (root, CAP_SYS_NICE or RLIMIT_NICE allow it), and dropped to it while a busy-poll spin runs") \
	X(nic_slice_us, INT, 100, "time slice the progress thread asks of the scheduler (EEVDF custom slice, sched_setattr sched_runtime; Linux 6.12+, no privilege needed; 100..100000), us: a thread with a shorter slice than a spinning application's preempts it when a packet wakes it, without the weight a raised nice gives (0: the kernel's default)") \
	X(backlog_pause_us, INT, 30000, "progress thread pauses up to this long while a polled CQ holds 32+ completions its application has not taken (0: never)") \
	X(backlog_idle_us, INT, 1000, "... once that CQ's consumer has not polled it for this long, us, or 128 wait: one that polled more recently is running and only has a deep queue (0: pause whenever 32 wait)") \
	X(poll_rx, BOOL, 1, "an application polling an empty CQ also drains the socket itself (no thread hand-off)") \
	X(chan_rx, BOOL, 1, "a consumer asleep in a blocking ibv_get_cq_event is woken by the datagram itself and receives it, rather than by the progress thread after it received it (one of the sleepers of the process, or the thread, is woken per datagram: EPOLLEXCLUSIVE)") \
	X(rx_plain, BOOL, 1, "while an application polls and its datagrams come alone (a ping-pong), the progress thread turns UDP_GRO off (after 10 ms of lone datagrams, then an RCU grace period by membarrier) and a one-datagram receive goes by recvfrom, ~50 ns cheaper than recvmmsg with the GRO control message; GRO goes on again when two receives within one of the watch's looks are batches, or 10 ms after the watch ended (0: never)") \
	X(poll_rx_gap_ns, INT, 2000, "after an application's drain of the socket found nothing, its next drain waits this long, ns (an application that polls between other work does not pay a syscall per poll)") \
	X(tick_ms, INT, 10, "progress thread wake-up period while any QP may need a timer") \
	X(rcvbuf, INT, 8388608, "UDP socket receive buffer size requested, bytes") \
	X(sndbuf, INT, 4194304, "UDP socket send buffer size requested, bytes") \
	X(stats_dir, STR, "/dev/shm", "directory of the live counter files read by `softrdma stat`") \
	X(crash_trace, BOOL, 0, "on SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT, print the crashing thread's backtrace to stderr, then die of the signal; only where the program left that signal's handler at its default (the test suites set it, to explain a crash seen once)") \
	X(stats_dump, STR, "", "when a device closes (or the process exits), append its non-zero counters to this file (%p: pid)") \
	X(max_qp, INT, 16384, "largest number of QPs per device") \
	X(max_mr, INT, 65536, "largest number of MRs per device") \
	X(frmr_maps, INT, 4, "key generations a fast-registration MR keeps at once (valid, being invalidated, mapped ahead), 2..16") \
	X(max_cqe, INT, 4194304, "largest CQ size")

enum sr_param_type { SR_PT_INT, SR_PT_BOOL, SR_PT_STR };

struct sr_params {
#define SR_PARAM_FIELD_INT long
#define SR_PARAM_FIELD_BOOL bool
#define SR_PARAM_FIELD_STR const char *
#define SR_PARAM_FIELD(name, type, def, doc) SR_PARAM_FIELD_##type name;
	SR_PARAM_LIST(SR_PARAM_FIELD)
#undef SR_PARAM_FIELD
};

/* The values, loaded from the environment at the first call of sr_params() (thread-safe).
 * Once loaded, a load and a test: the send path asks for them several times a post, and the
 * pthread_once of every call cost ~15 ns a post (bench/README.md, "8 B busy-poll"). */
extern struct sr_params sr_params_loaded;
extern _Atomic bool sr_params_ready;
const struct sr_params *sr_params_first(void);

static inline const struct sr_params *sr_params(void)
{
	if (__builtin_expect(atomic_load_explicit(&sr_params_ready, memory_order_acquire), 1))
		return &sr_params_loaded;
	return sr_params_first();
}

/* Table access for `softrdma params`. */
struct sr_param_desc {
	const char *name;
	enum sr_param_type type;
	const char *def;	/* the default, as text */
	const char *doc;
};
extern const struct sr_param_desc sr_param_table[];
extern const int sr_param_count;
/* Current value as text (for `softrdma params`); buf of at least 256 bytes. */
const char *sr_param_value_str(int index, char *buf, int len);

/*
 * Below: additions to the original contract (the CLI and the tests need them).
 */

/* "SOFTRDMA_<NAME>" of parameter `index`, in buf. */
const char *sr_param_env_name(int index, char *buf, int len);
/* Index of the parameter called `name` (case-insensitive), or -1. */
int sr_param_find(const char *name);

/* Parses the environment now into *p (sr_params() calls it once; tests call it again after
 * setenv). A malformed value keeps the default and logs one warning naming the variable.
 * Also applies the `log` parameter to sr_log_level (first, so SOFTRDMA_LOG=error silences
 * the warnings). Returns the number of malformed values. */
int sr_params_load(struct sr_params *p);
/* Frees the strings of a set filled by sr_params_load() (never pass sr_params()'s). */
void sr_params_free(struct sr_params *p);

/* The value syntaxes, exposed for tests and the CLI. 0, or -EINVAL (syntax), -ERANGE. */
int sr_param_parse_int(const char *s, long *out);
int sr_param_parse_bool(const char *s, bool *out);
/* "error" "warn" "info" "debug" (or 0..3) to an enum sr_log_level; -1 if none of them. */
int sr_param_parse_log_level(const char *s);

/* Expands a path parameter (pcap, stats_dump): "%p" becomes the pid, "%%" a '%'. Returns 0,
 * or -ENAMETOOLONG when the result does not fit in len bytes. */
int sr_path_expand(const char *tmpl, char *buf, int len);

#endif /* SR_CORE_PARAM_H */
