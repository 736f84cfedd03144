/*
 * sock-impl.h - TCP socket setup shared by the data plane (src/ps, src/ring) and whoever else
 * listens or connects: listening, connecting with a timeout, the options the data plane sets,
 * addresses as text, and reading or writing every byte before a deadline.
 *
 * Errors: DT_ERR_ARG for an address that cannot be used at all (a port out of range, a listen
 * address that does not resolve), DT_ERR_NETWORK when a connection could not be made or was
 * lost (refused, reset, closed by the peer, a name that does not resolve yet, an address in
 * use: worth retrying), DT_ERR_TIMEOUT when the peer did not answer or finish in time (worth
 * retrying). Messages name the address and the system's reason ("cannot connect: Connection
 * refused"); callers put who they are in front (dt_err_wrap). errno is left as the system
 * set it (0 when the peer closed the connection), for callers that log it.
 *
 * Deadlines are absolute times on dt__now_ms's clock (core/clock-impl.h); -1 means none.
 */
#ifndef DTRAIN_NET_SOCK_IMPL_H
#define DTRAIN_NET_SOCK_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "dtrain/err.h"

/* Socket buffer size the data plane asks for: 4 MiB, Linux's usual net.core.wmem_max /
 * rmem_max (larger requests are cut to it; the kernel doubles the value for its own
 * bookkeeping); loopback and LAN transfers measured fastest with it (docs/PERFORMANCE.md). */
#define DT__SOCK_BUF_BYTES (4 << 20)

/* Listen on host:port (host "" or NULL: every interface; port 0: any free port) with
 * SO_REUSEADDR and the data plane's buffer sizes (set before listen: accepted sockets
 * inherit them, and the receive window's scale is fixed at the TCP handshake). *fd gets the
 * blocking, close-on-exec listening socket, *bound_port (may be NULL) the port it got. */
dt_err dt__sock_listen(const char *host, int port, int backlog, int *fd, int *bound_port);

/* Connect to host:port (every address the name resolves to, in order) within timeout_ms
 * (<= 0: the kernel's own limit), with TCP_NODELAY and the data plane's buffer sizes. *fd
 * gets a blocking, close-on-exec socket. A connection that TCP simultaneous open made to
 * itself (a local port in the ephemeral range that nobody listens on) counts as refused. */
dt_err dt__sock_connect(const char *host, int port, int timeout_ms, int *fd);

/* Options. Failures are ignored: a socket without them still works, only slower. */
void dt__sock_nodelay(int fd);         /* TCP_NODELAY: small frames leave at once */
void dt__sock_buffers(int fd);         /* SO_SNDBUF / SO_RCVBUF of DT__SOCK_BUF_BYTES */
int dt__sock_nonblock(int fd, int on); /* O_NONBLOCK on or off; -1 with errno on failure */

/* Whether a connected socket is connected to itself (see dt__sock_connect); sets errno to
 * ECONNREFUSED when it is. */
int dt__sock_self_connected(int fd);

/* "host:port" split at its last colon: the host (a [bracketed] IPv6 address without its
 * brackets) into host, cap bytes; the port, decimal 1..65535, into *port. Returns one of: */
enum {
    DT__HOSTPORT_OK = 0,
    DT__HOSTPORT_FORM,       /* not host:port: no colon, an empty host or port, too long */
    DT__HOSTPORT_PORT_NAN,   /* the port has a character that is not a digit */
    DT__HOSTPORT_PORT_RANGE, /* the port is 0 or above 65535 */
};
int dt__hostport_split(const char *addr, char *host, size_t cap, int *port);
/* What a status other than OK says, to follow the address in a message: " is not host:port",
 * ": port is not a number", ": port is out of range". */
const char *dt__hostport_why(int status);

/* "1.2.3.4:80", "[::1]:80" or "an unknown address". */
void dt__sock_addr_text(const struct sockaddr_storage *sa, char *out, size_t cap);

/* Read exactly n bytes before deadline_ms (-1: no deadline; the socket may be blocking or
 * not). *got (may be NULL) gets the bytes read, also on failure. DT_ERR_NETWORK when the
 * peer closed (errno 0) or the read failed, DT_ERR_TIMEOUT at the deadline (errno
 * ETIMEDOUT). */
dt_err dt__sock_read_full(int fd, void *buf, size_t n, int64_t deadline_ms, size_t *got);

/* Write every byte of iov[0..n) (iov is modified) before deadline_ms (-1: none), without
 * SIGPIPE. DT_ERR_NETWORK when the write failed, DT_ERR_TIMEOUT at the deadline, or when a
 * blocking socket's SO_SNDTIMEO ran out (errno EAGAIN). */
dt_err dt__sock_writev_all(int fd, struct iovec *iov, int n, int64_t deadline_ms);

#endif
