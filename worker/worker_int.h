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

/* Connections per client address: a chained hash, one node per address
 * with at least one open session. */
struct worker_ipnode {
    struct worker_ipnode *next;
    uint8_t               family;
    uint8_t               addr[16];
    uint32_t              count;
};

#define WORKER_IP_BUCKETS  1024     /* power of two */

struct worker {
    struct worker_args   a;
    const struct config *cfg;
    struct ev_loop      *loop;
    struct spool        *spool;
    struct router       *router;
    struct deliver      *deliver;
    struct status_worker *st;
    struct status_worker st_local;  /* when the master gave no status page */

    /* admission: per-worker shares of the daemon-wide limits */
    size_t               nsess;
    size_t               max_sess;
    uint32_t             max_per_ip;
    struct worker_ipnode *ip[WORKER_IP_BUCKETS];

    int                 *lfds;      /* listeners (-1 once closed) */
    size_t               nlisten;
    int                  listening; /* listeners watched */
    int                  accept_pause; /* EMFILE: retry on the next tick */
    int                  stopping;  /* "stop" received */
    int                  exit_code;
    struct ev_timer      tick;      /* 1 s: throttle, stop progress */

    struct sess         *sessions;  /* every session (doubly linked) */
    struct sess         *pending;   /* replies to flush this turn */
    struct sess        **commit;    /* waiting for the group commit */
    size_t               ncommit, commitcap;

    char               **out_spare; /* recycled reply buffers */
    size_t               nout_spare;

    struct router_result rres;      /* scratch for RCPT lookups */
};

/* worker.c */
int     worker_ip_acquire(struct worker *w, const struct sockaddr *sa);
void    worker_ip_release(struct worker *w, const struct sockaddr *sa);
void    worker_session_gone(struct worker *w);

/* sess.c */
void    sess_accept(struct worker *w, int fd, const struct sockaddr *sa,
            socklen_t salen);
void    sess_commit_hook(struct ev_loop *loop, void *arg);
void    sess_flush_hook(struct ev_loop *loop, void *arg);
void    sess_stop_idle(struct worker *w);  /* graceful stop: idle ones go */
void    sess_close_all(struct worker *w);  /* immediate: aborts messages */

#endif /* MTAD_WORKER_INT_H */
