/* SPDX-License-Identifier: MIT */
/*
 * Shared steps of the rdma_cm tests in tests/cm: wait for one CM event of a given type, make an
 * IPv4 address, resolve a client id, give an id a small RC QP, and connect a client to a
 * listening port and carry one SEND across. Public <rdma/rdma_cma.h> only. Failures are
 * reported through sr_test.h (SR_FAIL, REQUIRE), as in the tests themselves.
 */
#ifndef SR_CM_UTIL_H
#define SR_CM_UTIL_H

#include <netinet/in.h>
#include <stdint.h>

#include <rdma/rdma_cma.h>

/* The next event on ch, which must be `type` (any id); NULL on timeout or another event (the
 * other event is acknowledged and reported). */
struct rdma_cm_event *cm_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type type,
				int timeout_ms);

/* AF_INET address ip:port (port in network order). */
struct sockaddr_in cm_ip4(const char *ip, uint16_t port_be);

/* An id of port space ps on ch with ip:port resolved (address and route). */
struct rdma_cm_id *cm_client(struct rdma_event_channel *ch, enum rdma_port_space ps,
			     const char *ip, uint16_t port_be);

/* A QP of type t, 8 send and 8 receive WRs of one SGE, on the id's device with the id's PD. */
void cm_make_qp(struct rdma_cm_id *id, enum ibv_qp_type t);

/* rdma_connect(c, p); the CONNECT_REQUEST it makes (within req_timeout_ms) is given a QP of
 * type t (cm_make_qp) and accepted with p. Returns the accepted id; the ESTABLISHED events are
 * the caller's. */
struct rdma_cm_id *cm_connect_accept(struct rdma_event_channel *ch, struct rdma_cm_id *c,
				     enum ibv_qp_type t, struct rdma_conn_param *p,
				     int req_timeout_ms);

/*
 * A client connects to ip:port, the listener's side accepts; a SEND crosses. Both ids are
 * destroyed again. Each side's PD is the device's default PD from the moment the id has a
 * device (librdmacm sets it; pyverbs creates an AH on it before any QP). With `late`, that
 * bound id is made to listen only after the client's rdma_connect (qperf's order: the port goes
 * to the peer, then rdma_listen).
 */
void cm_connect_and_send(struct rdma_event_channel *ch, const char *ip, uint16_t port_be,
			 struct rdma_cm_id *late);

#endif
