/*
 * worker_int.h - the worker's internal state, shared by worker/worker.c
 * (loop, listeners, channel, admission) and worker/proxy_conn.c
 * (connections on proxy_protocol listeners, before they are sessions).
 * Nothing outside worker/ includes this.
 */
#ifndef MTAD_WORKER_INT_H
#define MTAD_WORKER_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/ev.h"
#include "common/status.h"
#include "worker/worker.h"

struct smtpd;
struct ssl_ctx_st;
struct dkim_keys;
struct wproxy;
struct config_listen;
struct events;

struct worker {
    struct worker_args   a;
    const struct config *cfg;
    struct ev_loop      *loop;
    struct spool        *spool;
    struct router       *router;     /* on the snapshot snap */
    char                 snap[PATH_MAX];
    struct deliver      *deliver;
    struct status_worker *st;
    struct status_worker st_local;  /* when the master gave no status page */
    struct grey         *grey;      /* greylist.mdb, or NULL (greylist off) */

    /* admission: daemon-wide counts in the shared page (a private one
     * when the master gave none) */
    struct status_page  *admit;
    unsigned             admit_slot;
    size_t               nsess;     /* this worker's sessions */

    int                 *lfds;      /* listeners (-1 once closed) */
    unsigned char       *lnodelay;  /* listener i has TCP_NODELAY, which
                                     * its accepted sockets inherit */
    size_t               nlisten;
    /* lfds[cfg->nlisten], when there is one: the API's injection socket
     * (config_inject_listen), described by inject_l */
    struct config_listen *inject_l; /* NULL: none */
    int                  listening; /* listeners watched */
    int                  accept_pause; /* EMFILE: retry on the next tick */
    unsigned             accept_batch; /* accepts this wakeup (on_accept) */
    int                  accept_full; /* the last batch found no end */
    uint64_t             accept_turn; /* ... in this loop turn */
    int                  stopping;  /* "stop" received */
    struct ev_timer      stop_timer; /* the stop deadline */
    int                  exit_code;
    struct ev_timer      tick;      /* 1 s: throttle, stop progress */
    struct ev_timer      log_timer; /* staged log records go out then */

    /* proxy_protocol listeners: connections waiting for their PROXY
     * header (proxy_conn.c), not yet sessions */
    struct wproxy       *proxy_wait;
    size_t               nproxy;
    int                  draining;  /* "drain": listeners closed for good */

    struct smtpd        *smtpd;     /* the inbound sessions */
    struct events       *events;    /* delivery events; NULL: off */

    /* STARTTLS (NULL: not offered).  Built in worker_init() while still
     * privileged, so the key file may be readable by root only; the
     * private key then lives in every worker's memory (no exec, as in
     * nginx): a compromised worker can read it. */
    struct ssl_ctx_st   *tls_ctx;
    /* dkim.sign keys (NULL: none), loaded here for the same reason and
     * with the same trade-off as the TLS key. */
    struct dkim_keys    *dkim;
    /* auth.password_file (NULL: no AUTH), read before the drop. */
    struct smtpd_auth   *auth;
};

/* worker.c */
void    worker_check_done(struct worker *w);
/* Admission, then the session: the address is the client's (the peer's,
 * or the one a PROXY header named). */
void    worker_admit(struct worker *w, int fd, struct sockaddr_storage *ss,
            socklen_t len, const struct config_listen *l);

/* proxy_conn.c: a connection on a proxy_protocol listener (see there) */
void    wproxy_accept(struct worker *w, int fd,
            const struct sockaddr_storage *ss, socklen_t len,
            const struct config_listen *l);
void    wproxy_close_all(struct worker *w);
/* The injection socket, when the master passed one (a listener fd after
 * cfg->nlisten): w->inject_l describes it.  init: 0, or -1 logged. */
int     worker_inject_init(struct worker *w);
void    worker_inject_free(struct worker *w);

/* worker_keys.c */
int worker_tls_init(struct worker *w);
int worker_dkim_init(struct worker *w);
int worker_quotas_on(const struct config *cfg);
void worker_grey_init(struct worker *w);

#endif /* MTAD_WORKER_INT_H */
