/*
 * worker_int.h - the worker's internal state, shared by worker/worker.c
 * (loop, listeners, channel, admission) and worker/sess.c (the inbound
 * SMTP sessions).  Nothing outside worker/ includes this.
 *
 * CONTRACT  One struct worker per process.  Sessions are linked into
 *           w->sessions for their whole life, into w->pending while they
 *           have replies to flush in the before-sleep hook, and into
 *           w->commit while their message waits for the group commit.
 *           Hooks are registered in this order: sess_commit_hook (group
 *           commit, which queues the 250s), then sess_flush_hook (one write
 *           per session per turn).
 * STOP      Graceful retirement ("stop"): the worker unwatches its
 *           listeners, accepts what is already queued for it, closes them,
 *           and keeps serving every session normally, transactions and all.
 *           A session between transactions (no MAIL, no unparsed input) that
 *           has been quiet for WORKER_STOP_GRACE_MS gets "421 4.3.2" and is
 *           closed; a client sending one message after another is never
 *           quiet that long, so it sees no error.  At the stop deadline
 *           (stop_final) every session left gets the 421 at once.
 */
#ifndef MTAD_WORKER_INT_H
#define MTAD_WORKER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/ev.h"
#include "common/status.h"
#include "router/router.h"
#include "worker/worker.h"

struct sess;
struct ssl_ctx_st;
struct wproxy;
struct config_listen;


/* Quiet time after which a session between transactions is closed during
 * a graceful stop: longer than a client needs to answer a reply, short
 * enough that the old generation goes away soon after a reload. */
#define WORKER_STOP_GRACE_MS  2000

struct worker {
    struct worker_args   a;
    const struct config *cfg;
    struct ev_loop      *loop;
    struct spool        *spool;
    struct router       *router;
    struct deliver      *deliver;
    struct status_worker *st;
    struct status_worker st_local;  /* when the master gave no status page */

    /* admission: daemon-wide counts in the shared page (a private one
     * when the master gave none) */
    struct status_page  *admit;
    unsigned             admit_slot;
    size_t               nsess;     /* this worker's sessions */

    int                 *lfds;      /* listeners (-1 once closed) */
    size_t               nlisten;
    int                  listening; /* listeners watched */
    int                  accept_pause; /* EMFILE: retry on the next tick */
    int                  stopping;  /* "stop" received */
    int                  stop_final; /* stop deadline passed: no grace */
    struct ev_timer      stop_timer; /* the stop deadline */
    int                  exit_code;
    struct ev_timer      tick;      /* 1 s: throttle, stop progress */
    struct ev_timer      log_timer; /* staged log records go out then */

    /* proxy_protocol listeners: connections waiting for their PROXY
     * header (proxy_conn.c), not yet sessions */
    struct wproxy       *proxy_wait;
    size_t               nproxy;
    int                  draining;  /* "drain": listeners closed for good */

    struct sess         *sessions;  /* every session (doubly linked) */
    struct sess         *pending;   /* replies to flush this turn */
    struct sess        **commit;    /* waiting for the group commit */
    size_t               ncommit, commitcap;

    char               **out_spare; /* recycled reply buffers */
    size_t               nout_spare;

    struct router_result rres;      /* scratch for RCPT lookups */

    /* STARTTLS (NULL: not offered).  Built in worker_init() while still
     * privileged, so the key file may be readable by root only; the
     * private key then lives in every worker's memory (no exec, as in
     * nginx): a compromised worker can read it. */
    struct ssl_ctx_st   *tls_ctx;
    /* TLS sessions with decrypted bytes left in the SSL object: the loop
     * is level-triggered and the socket may be quiet, so tls_timer (0 ms)
     * reads them again on the next turn.  Entries may be NULL (freed). */
    struct sess        **tls_ready;
    size_t               ntls_ready, tls_readycap;
    struct ev_timer      tls_timer;
};

/* worker.c */
int     worker_ip_acquire(struct worker *w, const struct sockaddr *sa);
void    worker_ip_release(struct worker *w, const struct sockaddr *sa);
void    worker_session_gone(struct worker *w);
void    worker_check_done(struct worker *w);
/* Admission, then the session: the address is the client's (the peer's,
 * or the one a PROXY header named). */
void    worker_admit(struct worker *w, int fd, struct sockaddr_storage *ss,
            socklen_t len);

/* proxy_conn.c: a connection on a proxy_protocol listener (see there) */
void    wproxy_accept(struct worker *w, int fd,
            const struct sockaddr_storage *ss, socklen_t len,
            const struct config_listen *l);
void    wproxy_close_all(struct worker *w);

/* sess.c */
void    sess_accept(struct worker *w, int fd, const struct sockaddr *sa,
            socklen_t salen);
void    sess_commit_hook(struct ev_loop *loop, void *arg);
void    sess_flush_hook(struct ev_loop *loop, void *arg);
/* Graceful stop (see STOP): sess_stop_begin() when "stop" arrives (quiet
 * sessions between transactions go, the others get their grace timer);
 * sess_stop_all() at the deadline, with w->stop_final set: a 421 to every
 * session, each closed once it is written or after linger_ms. */
void    sess_stop_begin(struct worker *w);
void    sess_stop_all(struct worker *w, uint64_t linger_ms);
void    sess_close_all(struct worker *w);  /* immediate: aborts messages */
/* w->tls_timer's callback: one more read for every session on w->tls_ready
 * (see struct worker). */
void    sess_tls_ready_run(struct ev_loop *loop, struct ev_timer *t,
            void *arg);

#endif /* MTAD_WORKER_INT_H */
