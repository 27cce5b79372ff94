/*
 * smtpd_int.h - what the files of smtpd/ share; nothing outside smtpd/
 * includes it (the layering check enforces that).
 */
#ifndef MTAD_SMTPD_INT_H
#define MTAD_SMTPD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/ev.h"
#include "router/router.h"
#include "smtpd/smtpd.h"

struct sess;

struct smtpd {
    /* from struct smtpd_env */
    struct ev_loop       *loop;
    const struct config  *cfg;
    struct spool         *spool;
    struct router        *router;
    struct deliver       *deliver;
    struct status_worker *st;
    struct ssl_ctx_st    *tls_ctx;
    void                (*gone)(void *arg, const struct sockaddr *peer);
    void                 *arg;

    int                   stopping; /* smtpd_stop_begin() was called */
    int                   stop_final; /* the deadline: no grace */
    uint64_t              nospace;    /* spool writes refused for space
                                       * since the last commit (one
                                       * warning per episode) */

    struct sess          *sessions; /* every session (doubly linked) */
    struct sess          *pending;  /* replies to flush this turn */
    struct sess         **commit;   /* waiting for the group commit */
    size_t                ncommit, commitcap;

    char                **out_spare; /* recycled reply buffers */
    size_t                nout_spare;

    struct router_result  rres;     /* scratch for RCPT lookups */

    /* TLS sessions with decrypted bytes left in the SSL object: the loop
     * is level-triggered and the socket may be quiet, so tls_timer (0 ms)
     * reads them again on the next turn.  Entries may be NULL (freed). */
    struct sess         **tls_ready;
    size_t                ntls_ready, tls_readycap;
    struct ev_timer       tls_timer;
};

#endif /* MTAD_SMTPD_INT_H */
