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
struct spool_msg;
struct dkim_keys;

struct smtpd {
    /* from struct smtpd_env */
    struct ev_loop       *loop;
    const struct config  *cfg;
    struct spool         *spool;
    struct router        *router;
    struct deliver       *deliver;
    struct status_worker *st;
    struct ssl_ctx_st    *tls_ctx;
    struct dkim_keys     *dkim;     /* NULL: no signing */
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

/* DKIM signing while a message streams to the spool (session_dkim.c).
 * begin: NULL when there are no keys.  feed: before each span goes to
 * spool_write(); reserves room once the header section is complete.
 * end: before spool_finish(); signs and fills the room, *domain = the d=
 * signed for (NULL: not signed).  feed and end return SPOOL_OK, a
 * negative SPOOL_E* (spool failure), or SMTPD_DKIM_EFAIL (signing failed:
 * answer 4xx). */
#define SMTPD_DKIM_EFAIL  (-100)
struct smtpd_dkim;
struct smtpd_dkim *smtpd_dkim_begin(const struct dkim_keys *ks);
void    smtpd_dkim_free(struct smtpd_dkim *sd);           /* NULL ok */
int     smtpd_dkim_feed(struct smtpd_dkim *sd, struct spool_msg *m,
            const char *p, size_t n, const char *id);
int     smtpd_dkim_end(struct smtpd_dkim *sd, struct spool_msg *m,
            const char *id, const char **domain);

#endif /* MTAD_SMTPD_INT_H */
