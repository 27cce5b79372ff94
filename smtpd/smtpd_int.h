/*
 * smtpd_int.h - what the files of smtpd/ share; nothing outside smtpd/
 * includes it (the layering check enforces that).
 */
#ifndef MTAD_SMTPD_INT_H
#define MTAD_SMTPD_INT_H

#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/net.h"
#include "common/util.h"
#include "router/router.h"
#include "smtp/smtp.h"
#include "spool/spool.h"
#include "smtpd/smtpd.h"

struct sess;
struct spool_msg;
struct dkim_keys;
struct grey;

/* A message in the group commit: once renamed, its transaction stays
 * alive even if its client leaves (s = NULL): the file is in queue/. */
struct sess_cq {
    struct sess      *s;
    struct sess_txn  *t;
    uint64_t          size;
    int               rc;
};

/* A list of them, kept and grown (session_commit.c). */
struct sess_cqueue {
    struct sess_cq   *q;
    size_t            n, cap;
};

struct smtpd {
    /* from struct smtpd_env */
    struct ev_loop       *loop;
    const struct config  *cfg;
    struct spool         *spool;
    struct router        *router;
    struct deliver       *deliver;
    struct status_worker *st;
    struct events        *events;   /* delivery events; NULL: off */
    struct ssl_ctx_st    *tls_ctx;
    struct dkim_keys     *dkim;     /* NULL: no signing */
    struct smtpd_auth    *auth;     /* NULL: no AUTH */
    struct status_page   *shared;   /* the AUTH failure counts */
    void                (*gone)(void *arg, const struct sockaddr *peer);
    void                 *arg;

    int                   stopping; /* smtpd_stop_begin() was called */
    int                   stop_final; /* the deadline: no grace */
    uint64_t              nospace;    /* spool writes refused for space
                                       * since the last commit (one
                                       * warning per episode) */

    struct sess          *sessions; /* every session (doubly linked) */
    struct sess          *pending;  /* replies to flush this turn */
    /* The group commit (spool.fsync; session_commit.c).  cq_commit: the
     * messages finished this turn; cq_run: the round being answered;
     * off the loop, cq_wait: renamed, waiting for the next sync, and
     * cq_sync: those the running sync covers.  cq_ms, cq_rc: a round as
     * the spool's calls take it.  All live as long as d, grown to the
     * largest round: nothing is allocated per turn.  sync_fd: the
     * spool's eventfd, -1 when the commit is inline. */
    struct sess_cqueue    cq_commit, cq_run, cq_wait, cq_sync;
    struct spool_msg    **cq_ms;
    int                  *cq_rc;
    size_t                cq_argcap;
    int                   sync_fd;
    /* Session ids (session.c, sess_sid_next): the worker's slot, and
     * the wall-clock millisecond and count of the last id given. */
    unsigned              sid_slot;
    uint64_t              sid_ms;
    uint32_t              sid_count;

    char                **out_spare; /* recycled reply buffers */
    size_t                nout_spare;

    struct router_result  rres;     /* scratch for RCPT lookups */

    /* TLS sessions with decrypted bytes left in the SSL object: the loop
     * is level-triggered and the socket may be quiet, so tls_timer (0 ms)
     * reads them again on the next turn.  Entries may be NULL (freed). */
    struct sess         **tls_ready;
    size_t                ntls_ready, tls_readycap;
    struct ev_timer       tls_timer;

    struct smtpd_hash    *hash;     /* AUTH's hashing threads, or NULL */
    struct grey          *grey;     /* greylist.mdb; NULL: no greylisting */
    struct smtpd_dc      *dovecot;  /* auth.backend: dovecot, or NULL */
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

/* --- sessions (session.c, session_cmd.c, session_msg.c, session_tls.c) */

/* Structured log fields of the session's client (log.format: json):
 * its address and the session id (text records say "session=<sid>"). */
#define SESS_CLIENT(s) LKV_S("client", (s)->ip), \
    LKV_I("client_port", (s)->port), LKV_S("session", (s)->sid)
/* A session id: 16 lower-case hex digits (session.c) and its NUL. */
#define SESS_SID_SIZE   17
/* A record of the session that is no event of its own ("log"), with
 * the session's fields; the text must say "session=%s" itself. */
#define SESS_LOG_INFO(s, ...) \
    log_ev(LOGL_INFO, "log", LOG_KVS(SESS_CLIENT(s)), __VA_ARGS__)
#define SESS_REJECT(s, why) STATUS_ADD((s)->d->st->ops.rejects[why], 1)

#define SESS_OUT_HIGH   (64 * 1024) /* stop running commands above this */

enum sess_state {
    SS_CMD = 0,                     /* reading command lines */
    SS_DATA,                        /* DATA content, up to CRLF.CRLF */
    SS_BDAT,                        /* a BDAT chunk of exact length */
    SS_COMMIT,                      /* message finished, waiting for commit */
    SS_CLOSING,                     /* last reply queued; close once sent */
    SS_SCREEN,                      /* before the 220: the pregreet pause
                                       and the DNS lists (session_screen.c);
                                       any input refuses the client */
    SS_TLS,                         /* STARTTLS: writing the 220 in clear */
    SS_HANDSHAKE,                   /* SSL_accept() in progress */
    SS_AUTH_HOLD,                   /* a failed AUTH's reply held back
                                       (auth.failure_delay): nothing is
                                       read until the timer answers it */
    SS_AUTH_WAIT,                   /* an AUTH password being hashed off
                                       the loop: nothing is read until
                                       the answer comes (sess_auth_done) */
    SS_MILTER                       /* a command or the message waits for
                                       the milters' verdict: nothing is
                                       read until it comes
                                       (session_milter.c) */
};

#define SF_ESMTP     0x01u          /* EHLO (not HELO) was used */
#define SF_PENDING   0x02u          /* on d->pending */
#define SF_WBLOCK    0x04u          /* a write left bytes behind: EPOLLOUT */
#define SF_DISCARD   0x08u          /* dropping an over-long line to its LF */
#define SF_RELAY     0x10u          /* client in relay.allow_networks */
#define SF_COMMITQ   0x20u          /* on d->cq_commit */
#define SF_TLSREADY  0x40u          /* on d->tls_ready */
/* Mail from this session is DKIM-signed (when its From: domain has keys):
 * set at connect for a client in dkim.sign_networks; AUTH sets it for an
 * authenticated user. */
#define SF_SIGN      0x80u
#define SF_SYNCQ     0x100u         /* renamed, waiting for the async
                                       group commit (d->cq_wait/cq_sync) */
#define SF_GREY      0x200u         /* its listener greylists (greylist) */
#define SF_DNSWL     0x400u         /* screen.dnsbl scored it below 0 */
#define SF_EVENTED   0x200u         /* the group commit flushed the
                                       reception event of its message */

/* The mail transaction: from MAIL to the end of the message. */
struct sess_txn {
    struct spool_env  env;          /* client_ip/helo point into the session */
    size_t            rcap;
    struct spool_msg *msg;          /* created at DATA / first BDAT */
    char              id[SPOOL_ID_SIZE];
    char              sid[SESS_SID_SIZE];   /* its session's id, for a
                                       message whose client left */
    struct smtp_data  dp;
    uint64_t          bytes;        /* content bytes from the client */
    int               used_bdat;
    size_t            env_bytes;    /* envelope memory, for
                                       limits.max_envelope_size */
    uint64_t          size_decl;    /* MAIL ... SIZE=, 0 none (quotas) */
    int               bdat_cr;      /* BDAT: the last byte was a CR */
    int               bdat_bare;    /* BDAT: a bare CR or LF was seen */
    int               too_big;
    int               spool_rc;     /* first failed spool call, 0 = none */
    /* mail-loop guard: Received: headers counted in the header section */
    struct smtp_hops  hops;
    struct smtpd_dkim *dkim;        /* signing this message, or NULL */
    const char       *dkim_domain;  /* d= once signed (for the log) */
    int               tlsreq_done;  /* TLS-Required: looked at (RFC 8689) */
    /* spool_keep(): the envelope parsed back and the locked fd, handed to
     * delivery at the commit (kenv NULL: not kept, delivery reopens) */
    struct spool_env *kenv;
    int               kfd;
    off_t             koff;
    /* the milters' verdicts (session_milter.c): the message is dropped
     * after its 250 (discard), or committed on hold (quarantine) */
    int               milter_discard;
    int               milter_hold;
};

struct sess {
    struct smtpd    *d;
    struct sess      *prev, *next;   /* d->sessions */
    struct sess      *pprev, *pnext; /* d->pending */
    struct net_conn  tp;
    unsigned          watched;       /* EV_* mask given to the loop */
    struct ev_timer   timer;
    struct ev_timer   life;          /* limits.session_lifetime */
    struct buf        in;
    struct buf        out;
    struct sess_txn  *txn;
    char             *helo;
    uint64_t          bdat_left;     /* bytes of the current chunk to read */
    const char       *bdat_err;      /* reply for a chunk being discarded */
    uint64_t          active_ms;     /* ev_now() at the last read or flush */
    union sess_peer {
        struct sockaddr     sa;
        struct sockaddr_in  sin;
        struct sockaddr_in6 sin6;
    } peer;
    char              ip[INET6_ADDRSTRLEN];
    char              sid[SESS_SID_SIZE];  /* in its every log record */
    uint16_t          port;
    uint8_t           state;
    uint8_t           bdat_last;
    uint16_t          flags;
    uint16_t          nerrors;
    uint32_t          njunk;         /* NOOP/RSET/VRFY/HELP since a message */
    uint32_t          nmail;         /* MAIL commands accepted (transactions
                                        begun), for limits.max_transactions */
    uint16_t          ncmd[SMTP_AUTH + 1];
    struct smtpd_sauth *auth;        /* AUTH state (session_auth.c) */
    uint8_t           role;          /* the listener's CONFIG_ROLE_* */
    uint8_t           greet_tls;     /* implicit TLS: 220 after handshake */
    struct sess_screen *screen;      /* SS_SCREEN's state; NULL after */
    char              qerr[400];     /* a quota's 452 (session_quota.c) */
    struct sess_milter *milter;      /* the listener's milters; NULL: none */
};

/* session.c: life cycle, I/O, replies, timers, stop */
/* The one place a session changes state; arms the timer the new state
 * needs (the command or data timeout). */
void    sess_enter(struct sess *s, enum sess_state st);
void    sess_process(struct sess *s);       /* run the buffered input */
void    sess_read(struct sess *s);
void    sess_free(struct sess *s, const char *why);
unsigned sess_net_flags(const struct sess *s);  /* SF_RELAY, SF_SIGN */
void    sess_watch(struct sess *s, unsigned events);
void    sess_pending_add(struct sess *s);   /* flush s this turn */
void    sess_out_take(struct sess *s);      /* give s a reply buffer */
/* Queue a reply line (no CRLF); a 4xx/5xx counts toward max_errors. */
void    sess_reply(struct sess *s, const char *text);
/* Write the queued replies now instead of at the end of the turn (the
 * flush hook still runs for s; it finds them gone, or retries). */
void    sess_push(struct sess *s);
void    sess_replyf(struct sess *s, const char *fmt, ...)
            __attribute__((format(printf, 2, 3)));
/* A 4xx that is flow control: not counted as an error. */
void    sess_reply_flow(struct sess *s, const char *text);
/* The last reply: the session closes once it is written. */
void    sess_close_after(struct sess *s, const char *text);
void    sess_stop_check(struct sess *s);

/* session_screen.c: before the greeting */
/* 1: s is screened (SS_SCREEN; greeted or refused later); 0: greet it
 * now (sess_greet).  l: the listener (NULL: none of its keys). */
int     sess_screen_begin(struct sess *s, const struct config_listen *l);
void    sess_screen_io(struct sess *s, unsigned events);
void    sess_screen_timer(struct sess *s);
void    sess_screen_free(struct sess *s);   /* none: no-op */
/* session_grey.c: greylisting at RCPT; 0 when addr may be accepted, -1
 * when a 450 was queued (s's client, sender and addr: a triplet too new). */
int     sess_grey_rcpt(struct sess *s, const char *addr);
/* session_quota.c: queue quotas.  on: relay.yaml has one (the queue is
 * counted).  rcpt: 0, or -1 with the 452 queued (a message quota of the
 * recipient's domain, the sender's, the user's or the client network's).
 * data: NULL, or the 452 for DATA / the first BDAT (a bytes quota; in
 * s->qerr, valid while s lives). */
int     sess_quota_on(const struct smtpd *d);
int     sess_quota_rcpt(struct sess *s, const char *addr);
const char *sess_quota_data(struct sess *s);
/* session_ban.c: count one error of s's client toward limits.ban */
void    sess_ban_note(struct sess *s);
/* Queue the 220 (first_of_two: its "220-" line, the 220 comes later). */
void    sess_greet(struct sess *s, int first_of_two);

/* session_milter.c: the listener's milters (NULL s->milter: none, and
 * none of these is called).  begin: at connect, the listener's milters
 * noted (they are connected and sent the connect stage at the first
 * HELO/EHLO).  helo, mail, rcpt, data, eom:
 * 1 when the session now waits in SS_MILTER (the command is answered,
 * or the message committed, once the milters say), 0 when the caller
 * goes on as without milters (the verdict was known at once: nothing
 * was sent, or the answer was already given and the session goes on). */
void    sess_milter_begin(struct sess *s, const struct config_listen *l);
void    sess_milter_free(struct sess *s);
int     sess_milter_helo(struct sess *s, int esmtp);
int     sess_milter_mail(struct sess *s, struct str arg);
int     sess_milter_rcpt(struct sess *s, const struct smtp_rcpt *r,
            struct str arg);
int     sess_milter_data(struct sess *s);
int     sess_milter_eom(struct sess *s);
void    sess_milter_abort(struct sess *s);     /* the transaction ends */
/* After the commit: a quarantined message is put on hold (its state
 * saved held) before delivery hears of it.  1 when it was. */
int     sess_milter_hold(struct smtpd *d, struct sess_txn *t, uint64_t size);
/* the answers that go on where the milters had the session wait */
void    sess_ehlo_reply(struct sess *s, int esmtp);
void    sess_rcpt_add(struct sess *s, const struct smtp_rcpt *r);
void    sess_data_go(struct sess *s);
void    sess_finish_commit(struct sess *s, uint64_t size);

/* session_cmd.c: the command table */
/* Where a session is in the mail transaction: what the command table
 * allows (a 503 otherwise). */
enum sess_phase {
    SP_GREET = 0,                   /* no HELO/EHLO yet */
    SP_READY,                       /* HELO/EHLO, no MAIL */
    SP_MAIL,                        /* MAIL, no recipient accepted */
    SP_RCPT,                        /* recipients, no BDAT chunk */
    SP_CHUNK,                       /* a BDAT chunk was received */
    SP_COUNT
};
/* Run one command line (without its line end). */
void    sess_command(struct sess *s, struct str line, int bare_lf);
/* The verb's name for the log ("unknown" for any verb out of range). */
const char *sess_cmd_name(enum smtp_verb verb);
/* The 503 reply for verb in the session's phase, or NULL when allowed. */
const char *sess_cmd_denied(const struct sess *s, enum smtp_verb verb);

/* session_msg.c: the mail transaction.  The handlers run once the table
 * allowed the verb in the session's phase (BDAT asks it itself). */
void    sess_mail(struct sess *s, struct str arg);
void    sess_rcpt(struct sess *s, struct str arg);
void    sess_data(struct sess *s, struct str arg);
void    sess_bdat(struct sess *s, struct str arg);
/* Consume buffered content: 0, or MTA_AGAIN when more input is needed. */
int     sess_data_step(struct sess *s);
int     sess_bdat_step(struct sess *s);
void    sess_txn_free(struct sess *s);      /* NULL txn ok; aborts */
/* Free a transaction no session holds, aborting its message (one
 * renamed into queue/ stays there). */
void    sess_txn_release(struct sess_txn *t);
/* Log a failed spool call for s's message (a full spool: once). */
void    sess_spool_fail(struct sess *s, const char *what, int rc);
void    sess_storage_fail(struct sess *s);  /* 452 4.3.1, txn freed */

/* session_commit.c: from a finished message to its 250 and delivery */
/* The message is in queue/ (and synced with spool.fsync), size bytes:
 * 250, the log record, the hand-off to delivery; the txn is freed. */
void    sess_queued(struct sess *s, uint64_t size);
/* s's message is complete: it joins this turn's group commit and s
 * waits in SS_COMMIT for its answer. */
void    sess_commit_add(struct sess *s);
/* s gives up its transaction: off this turn's commit; 1 when its
 * message waits for a sync, which then ends the transaction (s->txn is
 * NULL then), else 0. */
int     sess_commit_leave(struct sess *s);
/* The group commit, an ev_before_sleep hook (arg: struct smtpd). */
void    sess_commit_hook(struct ev_loop *loop, void *arg);
/* Set up the group commit (smtpd_new: with spool.fsync and
 * spool_sync_init() done, its sync goes off the loop); end it at
 * smtpd_free, sessions already freed. */
void    sess_commit_setup(struct smtpd *d);
void    sess_commit_free(struct smtpd *d);

/* session_tls.c: STARTTLS */
void    sess_starttls(struct sess *s, struct str arg);
void    sess_tls_kick(struct sess *s);      /* read pending TLS bytes */
void    sess_tls_ready_del(struct sess *s);
void    sess_tls_ready_run(struct ev_loop *loop, struct ev_timer *t,
            void *arg);
int     sess_tls_begin(struct sess *s);     /* -1: s was freed */
int     sess_tls_step(struct sess *s);      /* -1: s was freed */


/* SMTP AUTH and the submission role (session_auth.c).  The session
 * describes itself in a smtpd_auth_ctx; sa is its AUTH state (NULL until
 * the first AUTH).  cmd runs an AUTH command, line each client line while
 * smtpd_auth_waiting(); both write the reply (no CRLF) and return:
 * CONT (334 sent, more lines), OK (235: authenticated), FAIL (an error
 * reply), CLOSE (421: too many failures, close the session), HOLD (a
 * failed check whose reply is held back: no reply yet; after
 * smtpd_auth_hold_ms(sa) the session calls smtpd_auth_release(), which
 * writes the reply and returns FAIL or CLOSE), WAIT (the password is
 * being hashed for c->owner: no reply yet; the answer goes to
 * smtpd_auth_done(), which returns OK, FAIL, CLOSE or HOLD as above; a
 * session that ends first calls smtpd_auth_cancel()).
 * smtpd_auth_mail: 0, or -1 with the reply for MAIL FROM:<sender>. */
enum { SMTPD_AUTH_OK = 0, SMTPD_AUTH_FAIL = -1,
       SMTPD_AUTH_CONT = MTA_AGAIN,     /* more input, like MTA_AGAIN */
       SMTPD_AUTH_CLOSE = -3, SMTPD_AUTH_HOLD = -4, SMTPD_AUTH_WAIT = -5 };
struct smtpd_sauth;
struct smtpd_auth_ctx {
    const char         *ip;
    unsigned            port;
    const char         *sid;        /* the session id, for the log */
    int                 tls;        /* TLS is on */
    int                 loopback;   /* the client is 127/8 or ::1 */
    int                 esmtp;      /* EHLO was given */
    int                 in_txn;     /* MAIL given, message not finished */
    int                 role;       /* CONFIG_ROLE_* */
    struct smtpd_sauth *sa;
    const struct sockaddr *group;   /* the address failures count for
                                       (status_addr_group: IPv6 per /N) */
    void               *owner;      /* the session, for a check's answer */
    int                 fd;         /* its socket (Dovecot's lip, lport) */
    struct sockaddr_storage group_ss;   /* group's storage */
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

/* events.when_full: backpressure, while the backlog is full */
#define SESS_EVENTS_FULL "452 4.3.1 Delivery events backlog full, try again " \
    "later"

/* session_events.c: the reception event of committed message t of
 * session s (NULL: its client left), emitted (the caller flushes before
 * the 250: events/events.h). */
void    sess_event_reception(struct smtpd *d, const struct sess *s,
            const struct sess_txn *t, uint64_t size);
int     smtpd_auth_mail(const struct smtpd *d, const struct smtpd_auth_ctx *c,
            const char *sender, char *reply, size_t rsz);
void    smtpd_auth_sess_free(struct smtpd_sauth *sa);      /* NULL ok */
/* An authenticated state without an exchange, for a session its listener
 * trusts (the injection socket: user "api"); its sender is not checked
 * against the login (submission.sender_login_match). */
struct smtpd_sauth *smtpd_auth_trusted(const char *name);
#define SMTPD_INJECT_USER "api"
uint64_t smtpd_auth_hold_ms(const struct smtpd_sauth *sa);  /* 0: none */
int     smtpd_auth_done(struct smtpd *d, const struct smtpd_auth_ctx *c,
            struct smtpd_sauth *sa, int match, char *reply, size_t rsz);
void    smtpd_auth_cancel(struct smtpd *d, struct smtpd_sauth *sa);

/* Password hashing off the loop (session_hash.c).  submit: a job id, or
 * -1 when every one of SMTPD_HASH_JOBS is busy (or pass is too long);
 * hash must outlive the job.  reap: 1 and a finished job's owner (NULL:
 * cancelled, drop it) and whether crypt(pass, hash) == hash; 0 when none
 * is left.  The loop watches fd (EV_READ) and reaps until 0. */
#define SMTPD_HASH_JOBS 256
struct smtpd_hash;
struct smtpd_hash *smtpd_hash_new(void);        /* NULL: eventfd failed */
void    smtpd_hash_free(struct smtpd_hash *h);  /* NULL ok; joins */
int     smtpd_hash_fd(const struct smtpd_hash *h);
int     smtpd_hash_submit(struct smtpd_hash *h, const char *pass,
            const char *hash, void *owner);
void    smtpd_hash_cancel(struct smtpd_hash *h, int id);
int     smtpd_hash_reap(struct smtpd_hash *h, void **owner, int *match);
/* Dovecot's auth service (session_dovecot.c; its header comment says how
 * it connects).  new: NULL when auth.dovecot_socket is unset or bad
 * (logged); ask sends CHAN_AUTH_CONNECT for a unix socket, whose answer
 * goes to smtpd_dc_socket() (fd -1: why).  ehlo: the "250-AUTH ...\r\n"
 * line ("" when nothing may be offered).  mech: the offered mechanism
 * named name, into out, or NULL.  auth: a request id (> 0) for owner, or
 * -1 (not connected, every slot busy): answer 454.  cont: the client's
 * next base64 after a CONT; -1: the request is gone (454).  The answer
 * comes through fn(owner, kind, text): CONT (text: base64 to send as
 * 334), OK (text: the user name Dovecot gave), FAIL (text: the user
 * name, or ""), TEMP (text: why); never after cancel. */
#define SMTPD_DC_REQS 256
enum { SMTPD_DC_OK = 0, SMTPD_DC_CONT, SMTPD_DC_FAIL, SMTPD_DC_TEMP };
struct smtpd_dc;
struct smtpd_dc_req {
    const char *mech;               /* as smtpd_dc_mech() gave it */
    const char *resp;               /* initial response (base64), or NULL */
    const char *lip, *rip, *sid;
    unsigned    lport, rport;
    int         secured;            /* TLS, or loopback */
};
typedef void smtpd_dc_fn(void *owner, int kind, const char *text);
struct smtpd_dc *smtpd_dc_new(struct ev_loop *loop, const struct config *cfg,
            smtpd_dc_fn *fn, int (*ask)(void *arg), void *ask_arg);
void    smtpd_dc_free(struct smtpd_dc *dc);                /* NULL ok */
void    smtpd_dc_socket(struct smtpd_dc *dc, int fd, const char *why);
const char *smtpd_dc_ehlo(const struct smtpd_dc *dc);
const char *smtpd_dc_mech(const struct smtpd_dc *dc, struct str name,
            char *out, size_t outsz);
long    smtpd_dc_auth(struct smtpd_dc *dc, const struct smtpd_dc_req *r,
            void *owner);
int     smtpd_dc_cont(struct smtpd_dc *dc, long id, struct str b64);
void    smtpd_dc_cancel(struct smtpd_dc *dc, long id);    /* NULL ok */
/* session_auth.c: Dovecot's answer for the session's exchange; returns
 * as smtpd_auth_done() does, or CONT (a 334 in reply). */
int     smtpd_auth_dc_done(struct smtpd *d, const struct smtpd_auth_ctx *c,
            struct smtpd_sauth *sa, int kind, const char *text, char *reply,
            size_t rsz);
int     smtpd_auth_release(const struct smtpd *d, struct smtpd_sauth *sa,
            char *reply, size_t rsz);
/* The delay of the reply to a client address's n-th failure (n >= 1):
 * auth.failure_delay doubled n - 1 times, capped at failure_delay_max. */
uint64_t smtpd_auth_delay(const struct config *cfg, unsigned n);

/* session_cmd.c: the session's side of AUTH */
void    sess_auth(struct sess *s, struct str arg, int cont);
void    sess_auth_release(struct sess *s);  /* SS_AUTH_HOLD's timer */
/* The hashing threads for d (smtpd_new, with an auth table); gone at
 * smtpd_free, after the sessions. */
void    sess_auth_setup(struct smtpd *d, int (*auth_connect)(void *arg));
void    sess_auth_teardown(struct smtpd *d);
int     sess_auth_mail(struct sess *s, const char *sender); /* -1: replied */

#endif /* MTAD_SMTPD_INT_H */
