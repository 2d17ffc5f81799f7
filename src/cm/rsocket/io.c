/* SPDX-License-Identifier: MIT */
/*
 * The exported calls that move data and the socket-level calls that dispatch by socket type:
 * rsocket (which gives the socket its type's rs_ops), rclose, rgetpeername, rbind, rlisten,
 * raccept, rconnect, rshutdown; rsend/rsendto/rsendmsg/rwrite/rwritev and
 * rrecv/rrecvfrom/rrecvmsg/rread/rreadv. Errors follow the socket calls: -1 with errno.
 */
#include <limits.h>
#include <netinet/in.h>
#include <string.h>

#include "cm/rsocket/rs.h"

static int check_iov(const struct iovec *iov, int iovcnt)
{
	if (iovcnt < 0 || iovcnt > IOV_MAX || (iovcnt && !iov))
		return -EINVAL;
	return 0;
}

/* ---- life ------------------------------------------------------------------------------------ */
RS_EXPORT int rsocket(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct rsock *rs;
	int ret;

	if (domain != AF_INET && domain != AF_INET6)
		return rs_err(EAFNOSUPPORT);
	if (base != SOCK_STREAM && base != SOCK_DGRAM)
		return rs_err(ESOCKTNOSUPPORT);
	if (protocol && !(base == SOCK_STREAM && protocol == IPPROTO_TCP) &&
	    !(base == SOCK_DGRAM && protocol == IPPROTO_UDP))
		return rs_err(EPROTONOSUPPORT);
	rs = rs_alloc(domain, base, NULL);
	if (!rs)
		return -1;
	rs->ops = base == SOCK_STREAM ? &rs_stream_ops : &rs_dg_ops;
	/* Creating the id opens the devices now: under librspreload, the engine's own sockets
	 * are made while its socket() knows it is inside rsocket(). */
	ret = rdma_create_id(rs->ch, &rs->id, rs, base == SOCK_STREAM ? RDMA_PS_TCP : RDMA_PS_UDP);
	if (ret) {
		ret = errno == ENODEV || errno == ENOENT ? ENODEV : errno;
		rs_free(rs);
		return rs_err(ret);
	}
	if (type & SOCK_NONBLOCK)
		rs->fd_flags |= O_NONBLOCK;
	ret = rs_insert(rs);
	if (ret) {
		rs_free(rs);
		return rs_err(ret);
	}
	rs_dbg(rs, "created (%s, %s)", domain == AF_INET ? "AF_INET" : "AF_INET6",
	       base == SOCK_STREAM ? "SOCK_STREAM" : "SOCK_DGRAM");
	return rs->fd;
}

RS_EXPORT int rclose(int fd)
{
	struct rsock *rs = rs_get(fd);
	int err = 0;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	if (rs->closed) {
		pthread_mutex_unlock(&rs->lock);
		rs_put(rs);
		return rs_err(EBADF);
	}
	rs->closed = true;
	rs_dbg(rs, "close in state %s", rs_state_name(rs->state));
	if (rs->type == SOCK_STREAM && !(rs->linger.l_onoff && rs->linger.l_linger == 0)) {
		/* As close(2) on a TCP socket: what was sent still reaches the peer, then EOF.
		 * SO_LINGER with a zero timeout drops it instead (an abortive close). Data that
		 * never reached the peer (the connection broke first, or lingering timed out) makes
		 * the close fail, the descriptor being released all the same. */
		if (rs->state == RS_CONNECTED || rs->state == RS_ACCEPTING)
			err = rs_stream_shutdown(rs, SHUT_RDWR, true);
		else if (rs->state == RS_DISCONNECTED && rs->qp && !rs->peer_eof &&
			 rs_stream_unacked(rs))
			err = -ECONNRESET;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_remove(rs);
	rs_put(rs);	/* the table's reference */
	rs_put(rs);	/* ours: the last one frees */
	return err ? rs_err(err) : 0;
}

RS_EXPORT int rgetpeername(int fd, struct sockaddr *a, socklen_t *len)
{
	struct rsock *rs = rs_get(fd);
	int ret = 0;

	if (!rs)
		return -1;
	if (!a || !len) {
		rs_put(rs);
		return rs_err(EFAULT);
	}
	pthread_mutex_lock(&rs->lock);
	if (rs->type == SOCK_DGRAM)
		ret = rs_dg_getpeername(rs, a, len);
	else if (rs->state != RS_CONNECTED && rs->state != RS_DISCONNECTED &&
		 rs->state != RS_ACCEPTING)
		ret = -ENOTCONN;
	else
		rs_copy_addr(a, len, rdma_get_peer_addr(rs->id));
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}

/* ---- connection calls -------------------------------------------------------------------------- */
RS_EXPORT int rbind(int fd, const struct sockaddr *a, socklen_t len)
{
	struct rsock *rs = rs_get(fd);
	int ret;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	ret = rs->type == SOCK_STREAM ? rs_stream_bind(rs, a, len) : rs_dg_bind(rs, a, len);
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}

RS_EXPORT int rlisten(int fd, int backlog)
{
	struct rsock *rs = rs_get(fd);
	int ret;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	ret = rs->type == SOCK_STREAM ? rs_stream_listen(rs, backlog) : -EOPNOTSUPP;
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}

RS_EXPORT int raccept(int fd, struct sockaddr *a, socklen_t *len)
{
	struct rsock *rs = rs_get(fd);
	int ret;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	ret = rs->type == SOCK_STREAM ? rs_stream_accept(rs, a, len) : -EOPNOTSUPP;
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret < 0 ? rs_err(ret) : ret;
}

RS_EXPORT int rconnect(int fd, const struct sockaddr *a, socklen_t len)
{
	struct rsock *rs = rs_get(fd);
	int ret;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	ret = rs->type == SOCK_STREAM ? rs_stream_connect(rs, a, len) : rs_dg_connect(rs, a, len);
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}

RS_EXPORT int rshutdown(int fd, int how)
{
	struct rsock *rs = rs_get(fd);
	int ret = 0;

	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	if (rs->type == SOCK_STREAM) {
		ret = rs_stream_shutdown(rs, how, false);
	} else if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR) {
		ret = -EINVAL;
	} else {
		rs->shut_rd |= how != SHUT_WR;
		rs->shut_wr |= how != SHUT_RD;
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret ? rs_err(ret) : 0;
}

/* ---- data -------------------------------------------------------------------------------------------- */
static ssize_t sendv(int fd, const struct iovec *iov, int iovcnt, int flags,
		     const struct sockaddr *to, socklen_t tolen)
{
	struct rsock *rs;
	ssize_t ret = check_iov(iov, iovcnt);

	if (ret)
		return rs_err((int)ret);
	if (flags & MSG_OOB)
		return rs_err(EOPNOTSUPP);
	rs = rs_get(fd);
	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	if (rs->type == SOCK_STREAM)
		ret = rs_stream_sendv(rs, iov, iovcnt, flags);
	else
		ret = rs_dg_sendv(rs, iov, iovcnt, flags, to, tolen);
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret < 0 ? rs_err((int)ret) : ret;
}

static ssize_t recvv(int fd, const struct iovec *iov, int iovcnt, int flags,
		     struct sockaddr *from, socklen_t *fromlen)
{
	struct rsock *rs;
	ssize_t ret = check_iov(iov, iovcnt);

	if (ret)
		return rs_err((int)ret);
	if (flags & MSG_OOB)
		return rs_err(EOPNOTSUPP);
	rs = rs_get(fd);
	if (!rs)
		return -1;
	pthread_mutex_lock(&rs->lock);
	if (rs->type == SOCK_STREAM) {
		ret = rs_stream_recvv(rs, iov, iovcnt, flags);
		if (ret >= 0 && from && fromlen && rs->id)
			rs_copy_addr(from, fromlen, rdma_get_peer_addr(rs->id));
	} else {
		ret = rs_dg_recvv(rs, iov, iovcnt, flags, from, fromlen);
	}
	pthread_mutex_unlock(&rs->lock);
	rs_put(rs);
	return ret < 0 ? rs_err((int)ret) : ret;
}

RS_EXPORT ssize_t rsend(int fd, const void *buf, size_t len, int flags)
{
	struct iovec iov = { (void *)buf, len };

	return sendv(fd, &iov, 1, flags, NULL, 0);
}

RS_EXPORT ssize_t rsendto(int fd, const void *buf, size_t len, int flags,
			  const struct sockaddr *to, socklen_t tolen)
{
	struct iovec iov = { (void *)buf, len };

	return sendv(fd, &iov, 1, flags, to, tolen);
}

RS_EXPORT ssize_t rsendmsg(int fd, const struct msghdr *msg, int flags)
{
	if (!msg)
		return rs_err(EFAULT);
	return sendv(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name,
		     msg->msg_namelen);
}

RS_EXPORT ssize_t rwrite(int fd, const void *buf, size_t count)
{
	return rsend(fd, buf, count, 0);
}

RS_EXPORT ssize_t rwritev(int fd, const struct iovec *iov, int iovcnt)
{
	return sendv(fd, iov, iovcnt, 0, NULL, 0);
}

RS_EXPORT ssize_t rrecv(int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = { buf, len };

	return recvv(fd, &iov, 1, flags, NULL, NULL);
}

RS_EXPORT ssize_t rrecvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
			    socklen_t *fromlen)
{
	struct iovec iov = { buf, len };

	return recvv(fd, &iov, 1, flags, from, fromlen);
}

RS_EXPORT ssize_t rrecvmsg(int fd, struct msghdr *msg, int flags)
{
	ssize_t ret;

	if (!msg)
		return rs_err(EFAULT);
	ret = recvv(fd, msg->msg_iov, (int)msg->msg_iovlen, flags, msg->msg_name,
		    msg->msg_name ? &msg->msg_namelen : NULL);
	if (ret >= 0) {
		msg->msg_controllen = 0;
		msg->msg_flags = 0;
	}
	return ret;
}

RS_EXPORT ssize_t rread(int fd, void *buf, size_t count)
{
	return rrecv(fd, buf, count, 0);
}

RS_EXPORT ssize_t rreadv(int fd, const struct iovec *iov, int iovcnt)
{
	return recvv(fd, iov, iovcnt, 0, NULL, NULL);
}
