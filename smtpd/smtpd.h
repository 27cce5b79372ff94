/*
 * smtpd.h - inbound ESMTP sessions inside a worker's event loop (RFC 5321
 * with PIPELINING, SIZE, 8BITMIME, SMTPUTF8, CHUNKING, DSN, STARTTLS).
 *
 * CONTRACT  The worker admits a connection (limits, load) and hands the
 *           socket to smtpd_accept(); from then on the session belongs to
 *           smtpd until it calls env->gone(env->arg, peer) exactly once, as
 *           its last act.  Every message a session answers "250 queued" is
 *           in the spool's queue/ (and synced in durable mode) and has been
 *           handed to delivery with deliver_submit().
 *           smtpd_new() registers two before-sleep hooks on the loop (the
 *           group commit, then one write per session with replies); the
 *           worker's own hooks registered after them run after them.
 * STOP      smtpd_stop_begin(): sessions go on, transactions included; one
 *           that is quiet between transactions for SMTPD_STOP_GRACE_MS is
 *           told "421 4.3.2" and closed.  smtpd_stop_all(): the deadline;
 *           every session not in DATA is told 421 now and closed after at
 *           most linger_ms.  smtpd_free() closes what is left (aborting
 *           messages in progress; nothing acknowledged is lost).
 * FAILURE   Never crashes on input and never blocks; logs one line per
 *           decision (connect, reject, queued, disconnect), each with the
 *           session's id ("session=<16 hex>", the JSON field "session").
 */
#ifndef MTAD_SMTPD_H
#define MTAD_SMTPD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ev_loop;
struct config;
struct spool;
struct router;
struct deliver;
struct status_worker;
struct status_page;
struct ssl_ctx_st;
struct dkim_keys;
struct config_listen;
struct smtpd_auth;
struct grey;

/* Quiet time after which a session between transactions is closed during
 * a graceful stop. */
#define SMTPD_STOP_GRACE_MS  2000

struct smtpd_env {
    struct ev_loop       *loop;
    const struct config  *cfg;
    struct spool         *spool;
    struct router        *router;
    struct deliver       *deliver;
    struct status_worker *st;       /* this worker's counters */
    struct ssl_ctx_st    *tls_ctx;  /* NULL: STARTTLS not offered */
    struct dkim_keys     *dkim;     /* dkim.sign keys; NULL: no signing */
    struct smtpd_auth    *auth;     /* auth.password_file; NULL: no AUTH */
    struct grey          *grey;     /* greylist.mdb (or smtpd_set_grey()
                                       later); NULL: off */
    /* The worker's slot (0..255), held by no other live worker: part of
     * every session id, which makes them unique across workers. */
    unsigned              slot;
    struct status_page   *shared;   /* the node's status page: AUTH
                                       failures count daemon-wide */
    /* auth.backend: dovecot with a unix socket: ask the master to connect
     * it (CHAN_AUTH_CONNECT; the sandbox makes no unix sockets); its
     * answer goes to smtpd_auth_socket().  0, or -1 when it cannot ask. */
    int                 (*auth_connect)(void *arg);
    struct events        *events;   /* delivery events; NULL: off */
    /* A session ended; peer is the address it was admitted with. */
    void                (*gone)(void *arg, const struct sockaddr *peer);
    void                 *arg;
};

struct smtpd;
struct events;

struct smtpd *smtpd_new(const struct smtpd_env *env);
/* smtpd_set_grey - greylist.mdb, opened after smtpd_new() (as the
 * workers' user), before the first session; NULL: no greylisting. */
void    smtpd_set_grey(struct smtpd *d, struct grey *g);
void    smtpd_free(struct smtpd *d);                    /* NULL ok */
/* l: the listener it came on (role, implicit TLS); NULL = plain mx. */
void    smtpd_accept(struct smtpd *d, int fd, const struct sockaddr *sa,
            socklen_t salen, const struct config_listen *l);

/* smtpd_banned - sa is banned (limits.ban, mtactl ban) and not in
 * relay.allow_networks: 1 with the 421 to send (CRLF-ended) in text,
 * logged and counted; else 0.  Asked before a connection is admitted. */
int     smtpd_banned(struct smtpd *d, const struct sockaddr *sa, char *text,
            size_t tsz);

/* The auth.password_file table (user:crypt-hash lines), read by the
 * worker before it drops privileges; a warning when users besides root
 * and the groups gid and admin_gid may read it.  NULL: logged (file, line). */
struct smtpd_auth *smtpd_auth_load(const char *path, gid_t gid,
            gid_t admin_gid);
void    smtpd_auth_free(struct smtpd_auth *a);            /* NULL ok */
/* The master's answer to auth_connect: the connected socket (smtpd owns
 * it), or fd -1 and why it could not connect. */
void    smtpd_auth_socket(struct smtpd *d, int fd, const char *why);
void    smtpd_stop_begin(struct smtpd *d);
void    smtpd_stop_all(struct smtpd *d, uint64_t linger_ms);

#endif /* MTAD_SMTPD_H */
