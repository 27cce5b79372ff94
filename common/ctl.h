/*
 * ctl.h - the control protocol between mtactl and the master.
 *
 * PROTOCOL  A unix stream socket (server.control_socket, mode 0660, group
 *           server.group).  The client connects and sends ONE request line
 *           ending in "\n":
 *             status | reload | stop | check | kick <queue-id> | kick *
 *             | routes (the routes table changed: publish it to the
 *             workers; answered once they were told)
 *           (later issues add more words).  The server answers with lines
 *           and closes the connection: the first line is "ok" or
 *           "error: <text>", the rest is the body (for "status" a report of
 *           "key: value" lines and one "worker key=value ..." line per
 *           worker; for a rejected "reload" the config errors, one per line).
 *           "queue-stream" is answered with "ok\nqstream N\n" and, in the
 *           same message, N descriptors (SCM_RIGHTS): one socket per
 *           worker, on which it writes its listing records (spool.h)
 *           (mtactl/queue_daemon.c reads them; master/qstream.c).
 *           "reload" is answered only when the outcome is known: "ok" after
 *           the new generation of workers reported ready, "error: ..." when
 *           the new config was rejected.
 * CONTRACT  ctl_request() connects, sends, and reads the whole reply within
 *           timeout_ms (-1: no limit).
 * FAILURE   Never logs.  CTL_OK when the server said "ok", CTL_EREFUSED
 *           when it said "error: ...", CTL_ESYS (errno kept: ENOENT,
 *           ECONNREFUSED, EACCES, ETIMEDOUT, ...) when it could not be
 *           reached or the connection failed, CTL_EPROTO for a reply that
 *           is not one of the two.
 */
#ifndef MTAD_CTL_H
#define MTAD_CTL_H

#define CTL_REQUEST_MAX  1024       /* bytes of one request line */
#define CTL_REPLY_MAX    (4u << 20) /* a client stops reading past this */

enum ctl_rc {
    CTL_OK = 0, CTL_ESYS = -1, CTL_EREFUSED = -3, CTL_EPROTO = -4
};

/* *reply (malloc'd, NUL-terminated, the whole reply including its first
 * line) is set on CTL_OK, CTL_EREFUSED and CTL_EPROTO, NULL on CTL_ESYS. */
int         ctl_request(const char *sockpath, const char *request,
                int timeout_ms, char **reply);
/* The body of a reply: what follows its first line ("" when none). */
const char *ctl_reply_body(const char *reply);

#endif /* MTAD_CTL_H */
