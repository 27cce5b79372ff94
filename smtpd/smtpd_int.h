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
#include "smtp/smtp.h"
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
    struct smtpd_auth    *auth;     /* NULL: no AUTH */
    void                (*gone)(void *arg, const struct sockaddr *peer);
    void                 *arg;

    int                   stopping; /* smtpd_stop_begin() was called */
    int                   stop_final; /* the deadline: no grace */

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

/* SMTP AUTH and the submission role (session_auth.c).  The session
 * describes itself in a smtpd_auth_ctx; sa is its AUTH state (NULL until
 * the first AUTH).  cmd runs an AUTH command, line each client line while
 * smtpd_auth_waiting(); both write the reply (no CRLF) and return:
 * CONT (334 sent, more lines), OK (235: authenticated), FAIL (an error
 * reply), CLOSE (421: too many failures, close the session).
 * smtpd_auth_mail: 0, or -1 with the reply for MAIL FROM:<sender>. */
enum { SMTPD_AUTH_OK = 0, SMTPD_AUTH_CONT, SMTPD_AUTH_FAIL,
       SMTPD_AUTH_CLOSE };
struct smtpd_sauth;
struct smtpd_auth_ctx {
    const char         *ip;
    unsigned            port;
    int                 tls;        /* TLS is on */
    int                 loopback;   /* the client is 127/8 or ::1 */
    int                 esmtp;      /* EHLO was given */
    int                 in_txn;     /* MAIL given, message not finished */
    int                 role;       /* CONFIG_ROLE_* */
    struct smtpd_sauth *sa;
};
int     smtpd_auth_cmd(struct smtpd *d, const struct smtpd_auth_ctx *c,
            struct smtpd_sauth **sap, struct str arg, char *reply,
            size_t rsz);
int     smtpd_auth_line(struct smtpd *d, const struct smtpd_auth_ctx *c,
            struct smtpd_sauth *sa, struct str line, char *reply,
            size_t rsz);
int     smtpd_auth_waiting(const struct smtpd_sauth *sa);
int     smtpd_auth_offered(const struct smtpd *d,
            const struct smtpd_auth_ctx *c);
const char *smtpd_auth_ehlo(const struct smtpd *d,
            const struct smtpd_auth_ctx *c);   /* "" or the 250-AUTH line */
const char *smtpd_auth_user(const struct smtpd_sauth *sa); /* NULL: none */
int     smtpd_auth_mail(const struct smtpd *d, const struct smtpd_auth_ctx *c,
            const char *sender, char *reply, size_t rsz);
void    smtpd_auth_sess_free(struct smtpd_sauth *sa);      /* NULL ok */

#endif /* MTAD_SMTPD_INT_H */
