/*
 * session_cmd.c - the commands of an inbound session: the command table
 * and the commands that are not part of a mail transaction or of TLS
 * (EHLO, HELO, RSET, NOOP, VRFY, HELP, QUIT; split from session.c).
 *
 * PURPOSE   One table, indexed by verb: the verb's name, the transaction
 *           phases it is allowed in, the 503 reply for each other phase,
 *           and its handler.  sess_command() checks the line, then the
 *           table, then calls the handler, so no handler repeats a phase
 *           check (like OpenSMTPD's smtp_session.c, Postfix's
 *           smtpd_cmd_table[]).
 * LIMITS    More than limits.max_junk_commands NOOP/RSET/VRFY/
 *           HELP since the last accepted message end the session (421).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "delivery/delivery.h"
#include "smtp/smtp.h"
#include "common/net.h"
#include "sasl/sasl.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

/* SMTP AUTH and the submission role: session_auth.c decides; these
 * describe the session to it and act on its answer. */
static struct smtpd_auth_ctx *
sess_auth_ctx(struct sess *s, struct smtpd_auth_ctx *c)
{
    const struct sockaddr_in6 *s6 = &s->peer.sin6;

    c->ip = s->ip;
    c->port = s->port;
    c->sid = s->sid;
    c->tls = s->tp.ssl != NULL;
    c->loopback = (s->peer.sa.sa_family == AF_INET &&
        (ntohl(s->peer.sin.sin_addr.s_addr) >> 24) == 127) ||
        (s->peer.sa.sa_family == AF_INET6 &&
        IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
    c->esmtp = (s->flags & SF_ESMTP) != 0;
    c->in_txn = s->txn != NULL;
    c->role = s->role;
    c->sa = s->auth;
    c->group = status_addr_group(&s->peer.sa,
        (unsigned)s->d->cfg->ipv6_prefix, &c->group_ss);
    c->owner = s;
    c->fd = s->tp.fd;
    return c;
}


/* sess_auth_hold - a failed AUTH: its reply waits on the session's timer
 * (auth.failure_delay).  Meanwhile the session is not watched for input
 * and runs nothing (SS_AUTH_HOLD): commands pipelined behind the AUTH
 * stay in the buffer or the socket and are answered after the held
 * reply; replies queued before it are still written (a blocked write
 * keeps its EV_WRITE watch). */
static void
sess_auth_hold(struct sess *s, uint64_t ms)
{
    sess_enter(s, SS_AUTH_HOLD);
    ev_timer_start(s->d->loop, &s->timer, ms);
    if (!(s->flags & SF_WBLOCK))
        sess_watch(s, 0);
}


/* sess_auth_resume - after an answer that came off the session's own
 * input (the held delay, the hash): whatever the client pipelined
 * meanwhile. */
static void
sess_auth_resume(struct sess *s)
{
    if (s->state != SS_CMD || (s->flags & SF_WBLOCK))
        return;                 /* max_errors; or sess_write resumes */
    sess_watch(s, EV_READ);
    sess_process(s);
}


/* sess_auth_answer - act on what session_auth.c answered. */
static void
sess_auth_answer(struct sess *s, int rc, const char *reply)
{
    if (rc == SMTPD_AUTH_OK)
        s->flags |= SF_RELAY | SF_SIGN;     /* from wherever it connects */
    if (rc == SMTPD_AUTH_WAIT) {
        /* like the hold below: nothing read until the hash answers */
        sess_enter(s, SS_AUTH_WAIT);
        if (!(s->flags & SF_WBLOCK))
            sess_watch(s, 0);
        return;
    }
    if (rc == SMTPD_AUTH_HOLD) {
        sess_auth_hold(s, smtpd_auth_hold_ms(s->auth));
        return;
    }
    if (rc == SMTPD_AUTH_CLOSE) {
        STATUS_ADD(s->d->st->errors, 1);
        sess_close_after(s, reply);
        return;
    }
    sess_reply(s, reply);
}


/* sess_auth_release - the delay is over: the held 535 (or the 421 that
 * closes), then whatever the client pipelined meanwhile. */
void
sess_auth_release(struct sess *s)
{
    char reply[512];
    int  rc = smtpd_auth_release(s->d, s->auth, reply, sizeof(reply));

    sess_enter(s, SS_CMD);
    sess_auth_answer(s, rc, reply);
    sess_auth_resume(s);
}


/* sess_auth_done - the hash of s's password is done.  A session that was
 * told 421 meanwhile (a stop, its lifetime) only takes the count. */
static void
sess_auth_done(struct sess *s, int match)
{
    struct smtpd_auth_ctx c;
    char                  reply[512];
    int                   rc;

    rc = smtpd_auth_done(s->d, sess_auth_ctx(s, &c), s->auth, match, reply,
        sizeof(reply));
    if (s->state != SS_AUTH_WAIT)
        return;
    sess_enter(s, SS_CMD);
    sess_auth_answer(s, rc, reply);
    sess_auth_resume(s);
}


static void
sess_on_hash(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct smtpd *d = arg;
    void         *owner;
    int           match;

    (void)loop;
    (void)fd;
    (void)events;
    while (smtpd_hash_reap(d->hash, &owner, &match))
        if (owner != NULL)
            sess_auth_done(owner, match);
}


/* sess_on_dovecot - Dovecot's answer for s (session_dovecot.c). */
static void
sess_on_dovecot(void *owner, int kind, const char *text)
{
    struct sess          *s = owner;
    struct smtpd_auth_ctx c;
    char                  reply[SASL_LINE_MAX + 8];
    int                   rc;

    rc = smtpd_auth_dc_done(s->d, sess_auth_ctx(s, &c), s->auth, kind, text,
        reply, sizeof(reply));
    if (s->state != SS_AUTH_WAIT)
        return;
    sess_enter(s, SS_CMD);
    sess_auth_answer(s, rc, reply);
    sess_auth_resume(s);
}


void
smtpd_auth_socket(struct smtpd *d, int fd, const char *why)
{
    if (d->dovecot == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    smtpd_dc_socket(d->dovecot, fd, why);
}


void
sess_auth_setup(struct smtpd *d, int (*auth_connect)(void *arg))
{
    if (config_auth_dovecot(d->cfg)) {
        d->dovecot = smtpd_dc_new(d->loop, d->cfg, sess_on_dovecot,
            auth_connect, d->arg);
        return;                     /* no hashing: Dovecot checks */
    }
    if (d->auth == NULL)
        return;
    d->hash = smtpd_hash_new();
    if (d->hash != NULL && ev_watch(d->loop, smtpd_hash_fd(d->hash),
        EV_READ, sess_on_hash, d) < 0) {
        smtpd_hash_free(d->hash);
        d->hash = NULL;
    }
    if (d->hash == NULL)
        log_err("AUTH: cannot set up the hashing threads: %s; AUTH "
            "answers 454", strerror(errno));
}


void
sess_auth_teardown(struct smtpd *d)
{
    smtpd_dc_free(d->dovecot);
    d->dovecot = NULL;
    if (d->hash == NULL)
        return;
    ev_unwatch(d->loop, smtpd_hash_fd(d->hash));
    smtpd_hash_free(d->hash);
    d->hash = NULL;
}


void
sess_auth(struct sess *s, struct str arg, int cont)
{
    struct smtpd_auth_ctx c;
    char                  reply[512];
    int                   rc;

    sess_auth_ctx(s, &c);
    rc = cont ? smtpd_auth_line(s->d, &c, s->auth, arg, reply, sizeof(reply))
              : smtpd_auth_cmd(s->d, &c, &s->auth, arg, reply, sizeof(reply));
    sess_auth_answer(s, rc, reply);
}


int
sess_auth_mail(struct sess *s, const char *sender)
{
    struct smtpd_auth_ctx c;
    char                  reply[SMTP_ADDR_MAX + 300];

    if (smtpd_auth_mail(s->d, sess_auth_ctx(s, &c), sender, reply,
        sizeof(reply)) == 0)
        return 0;
    sess_reply(s, reply);
    return -1;
}


static void
sess_cmd_auth(struct sess *s, struct str arg)
{
    sess_auth(s, arg, 0);
}


/* sess_limits - the EHLO LIMITS line (RFC 9422) into out: only the
 * limits this session enforces, RCPTMAX (limits.max_recipients, a 452
 * past it) and MAILMAX when limits.max_transactions is set (a 421). */
static const char *
sess_limits(const struct config *cfg, char *out, size_t outsz)
{
    char mailmax[24] = "";

    if (cfg->max_transactions > 0)
        snprintf(mailmax, sizeof(mailmax), " MAILMAX=%d",
            cfg->max_transactions);
    snprintf(out, outsz, "250-LIMITS RCPTMAX=%d%s\r\n",
        cfg->max_recipients, mailmax);
    return out;
}


static void
sess_ehlo(struct sess *s, struct str arg, int esmtp)
{
    const char          *reply;

    if (smtp_parse_helo(arg, &reply) < 0) {
        sess_reply(s, reply);
        return;
    }
    sess_txn_free(s);               /* EHLO implies RSET */
    while (arg.n > 0 && arg.p[arg.n - 1] == ' ')
        arg.n--;                    /* the name as validated, unpadded */
    free(s->helo);
    s->helo = xstrndup(arg.p, arg.n);
    if (s->milter != NULL && sess_milter_helo(s, esmtp))
        return;                     /* answered once the milters say */
    sess_ehlo_reply(s, esmtp);
}


/* sess_ehlo_reply - the 250 to a HELO or EHLO whose name is s->helo. */
void
sess_ehlo_reply(struct sess *s, int esmtp)
{
    const struct config *cfg = s->d->cfg;
    struct smtpd_auth_ctx actx;
    char                 limits[64];

    if (!esmtp) {
        s->flags &= ~SF_ESMTP;
        sess_replyf(s, "250 %s", cfg->hostname);
        return;
    }
    s->flags |= SF_ESMTP;
    sess_out_take(s);
    buf_printf(&s->out,
        "250-%s\r\n"
        "%s"
        "250-PIPELINING\r\n"
        "250-SIZE %llu\r\n"
        "250-8BITMIME\r\n"
        "250-SMTPUTF8\r\n"
        "250-CHUNKING\r\n"
        "250-BINARYMIME\r\n"
        "250-ENHANCEDSTATUSCODES\r\n"
        "%s"
        "%s"
        "%s"
        "250 DSN\r\n",
        cfg->hostname,
        s->d->tls_ctx != NULL && s->tp.ssl == NULL ? "250-STARTTLS\r\n" : "",
        (unsigned long long)cfg->max_message_size,
        smtpd_auth_ehlo(s->d, sess_auth_ctx(s, &actx)),
        /* RFC 8689 2: only where MAIL ... REQUIRETLS would be accepted */
        s->tp.ssl != NULL ? "250-REQUIRETLS\r\n" : "",
        sess_limits(cfg, limits, sizeof(limits)));
    sess_pending_add(s);
}


/* sess_junk - NOOP, RSET, VRFY and HELP cost nothing to send and keep a
 * session alive: past limits.max_junk_commands since the last message the
 * session is closed with 421.  Returns -1 when it was, else 0. */
static int
sess_junk(struct sess *s)
{
    char text[300];

    if (++s->njunk <= (uint32_t)s->d->cfg->max_junk_commands)
        return 0;
    SESS_LOG_INFO(s, "too many junk commands from [%s]:%u; session=%s",
        s->ip, (unsigned)s->port, s->sid);
    STATUS_ADD(s->d->st->errors, 1);
    snprintf(text, sizeof(text), "421 4.7.0 %s Error: too many junk "
        "commands", s->d->cfg->hostname);
    sess_close_after(s, text);
    return -1;
}


/* --- the commands without a transaction of their own ---------------- */

static void
sess_cmd_ehlo(struct sess *s, struct str arg)
{
    sess_ehlo(s, arg, 1);
}


static void
sess_cmd_helo(struct sess *s, struct str arg)
{
    sess_ehlo(s, arg, 0);
}


static void
sess_cmd_rset(struct sess *s, struct str arg)
{
    (void)arg;
    sess_txn_free(s);
    sess_reply(s, "250 2.0.0 Ok");
}


static void
sess_cmd_noop(struct sess *s, struct str arg)
{
    (void)arg;
    sess_reply(s, "250 2.0.0 Ok");
}


static void
sess_cmd_quit(struct sess *s, struct str arg)
{
    (void)arg;
    sess_close_after(s, "221 2.0.0 Bye");
}


static void
sess_cmd_vrfy(struct sess *s, struct str arg)
{
    if (arg.n == 0)
        sess_reply(s, "501 5.5.4 Syntax: VRFY address");
    else
        sess_reply(s, "252 2.5.2 Cannot VRFY user, but will accept "
            "message and attempt delivery");
}


static void
sess_cmd_help(struct sess *s, struct str arg)
{
    (void)arg;
    sess_reply(s, "214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT "
        "RSET NOOP QUIT VRFY HELP");
}


static void
sess_cmd_unknown(struct sess *s, struct str arg)
{
    (void)arg;
    sess_reply(s, "500 5.5.2 Error: command not recognized");
}


/* --- the command table ------------------------------------------------ */

#define SP_(p)      (1u << (p))
#define SP_ANY      (SP_(SP_GREET) | SP_(SP_READY) | SP_(SP_MAIL) | \
                     SP_(SP_RCPT) | SP_(SP_CHUNK))

#define SESS_NEED_HELO  "503 5.5.1 Error: send HELO/EHLO first"
#define SESS_NEED_MAIL  "503 5.5.1 Error: need MAIL command"
#define SESS_NEED_RCPT  "503 5.5.1 Error: need RCPT command"
#define SESS_NESTED     "503 5.5.1 Error: nested MAIL command"

/* One verb: what the session checks before the handler runs. */
struct sess_cmd {
    const char *name;               /* for the disconnect log line */
    /* 501 when the command has an argument (checked before the phase),
     * or NULL when an argument is the handler's business */
    const char *noarg;
    unsigned    phases;             /* SP_() mask of the phases allowed */
    const char *denied[SP_COUNT];   /* the 503 in each other phase */
    /* The handler answers the phase itself (sess_cmd_denied()): BDAT
     * must read its chunk before it may say 503. */
    uint8_t     late;
    uint8_t     junk;               /* counts toward max_junk_commands */
    void      (*fn)(struct sess *s, struct str arg);
};

static const struct sess_cmd sess_cmds[SMTP_AUTH + 1] = {
    [SMTP_UNKNOWN]  = { "unknown", NULL, SP_ANY, { NULL }, 0, 0,
                        sess_cmd_unknown },
    [SMTP_EHLO]     = { "ehlo", NULL, SP_ANY, { NULL }, 0, 0,
                        sess_cmd_ehlo },
    [SMTP_HELO]     = { "helo", NULL, SP_ANY, { NULL }, 0, 0,
                        sess_cmd_helo },
    [SMTP_MAIL]     = { "mail", NULL, SP_(SP_READY),
                        { [SP_GREET] = SESS_NEED_HELO,
                          [SP_MAIL] = SESS_NESTED,
                          [SP_RCPT] = SESS_NESTED,
                          [SP_CHUNK] = SESS_NESTED },
                        0, 0, sess_mail },
    [SMTP_RCPT]     = { "rcpt", NULL, SP_(SP_MAIL) | SP_(SP_RCPT),
                        { [SP_GREET] = SESS_NEED_MAIL,
                          [SP_READY] = SESS_NEED_MAIL,
                          /* RFC 3030 2: no RCPT once a chunk arrived */
                          [SP_CHUNK] = "503 5.5.1 Error: RCPT not allowed "
                                       "after BDAT" },
                        0, 0, sess_rcpt },
    [SMTP_DATA]     = { "data", "501 5.5.4 Syntax: DATA", SP_(SP_RCPT),
                        { [SP_GREET] = SESS_NEED_MAIL,
                          [SP_READY] = SESS_NEED_MAIL,
                          [SP_MAIL] = SESS_NEED_RCPT,
                          [SP_CHUNK] = "503 5.5.1 Error: DATA not allowed "
                                       "after BDAT" },
                        0, 0, sess_data },
    [SMTP_BDAT]     = { "bdat", NULL, SP_(SP_RCPT) | SP_(SP_CHUNK),
                        { [SP_GREET] = SESS_NEED_MAIL,
                          [SP_READY] = SESS_NEED_MAIL,
                          [SP_MAIL] = SESS_NEED_RCPT },
                        1, 0, sess_bdat },
    [SMTP_RSET]     = { "rset", "501 5.5.4 Syntax: RSET", SP_ANY, { NULL },
                        0, 1, sess_cmd_rset },
    [SMTP_NOOP]     = { "noop", NULL, SP_ANY, { NULL }, 0, 1,
                        sess_cmd_noop },
    [SMTP_QUIT]     = { "quit", NULL, SP_ANY, { NULL }, 0, 0,
                        sess_cmd_quit },
    [SMTP_VRFY]     = { "vrfy", NULL, SP_ANY, { NULL }, 0, 1,
                        sess_cmd_vrfy },
    [SMTP_HELP]     = { "help", NULL, SP_ANY, { NULL }, 0, 1,
                        sess_cmd_help },
    [SMTP_STARTTLS] = { "starttls", "501 5.5.4 Syntax: STARTTLS", SP_ANY,
                        { NULL }, 0, 0, sess_starttls },
    /* AUTH (RFC 4954): session_auth.c answers every phase itself (503
     * in a transaction or once authenticated, 538 without TLS) */
    [SMTP_AUTH]     = { "auth", NULL, SP_ANY, { NULL }, 0, 0,
                        sess_cmd_auth },
};


/* sess_phase - where the session is in the mail transaction. */
static enum sess_phase
sess_phase(const struct sess *s)
{
    if (s->txn == NULL)
        return s->helo == NULL ? SP_GREET : SP_READY;
    if (s->txn->used_bdat)
        return SP_CHUNK;
    return s->txn->env.nrcpt == 0 ? SP_MAIL : SP_RCPT;
}


const char *
sess_cmd_name(enum smtp_verb verb)
{
    return (unsigned)verb <= SMTP_AUTH ? sess_cmds[verb].name
                                           : "unknown";
}


const char *
sess_cmd_denied(const struct sess *s, enum smtp_verb verb)
{
    const struct sess_cmd *c = &sess_cmds[verb];
    enum sess_phase        p = sess_phase(s);

    if (c->phases & SP_(p))
        return NULL;
    return c->denied[p];
}


void
sess_command(struct sess *s, struct str line, int bare_lf)
{
    const struct config   *cfg = s->d->cfg;
    const struct sess_cmd *c;
    const char            *denied;
    enum smtp_verb         verb;
    struct str             arg;

    if (!cfg->bare_newline_accept &&
        (bare_lf || memchr(line.p, '\r', line.n) != NULL)) {
        sess_reply(s, "550 5.5.2 Error: bare <CR> or <LF> received");
        return;
    }
    if (line.n > SMTP_LINE_MAX) {
        sess_reply(s, "500 5.5.2 Error: line too long");
        return;
    }
    if (smtpd_auth_waiting(s->auth)) {
        sess_auth(s, line, 1);      /* an AUTH exchange's line */
        return;
    }
    verb = smtp_parse_verb(line, &arg);
    if ((unsigned)verb > SMTP_AUTH)
        verb = SMTP_UNKNOWN;
    if (s->ncmd[verb] < UINT16_MAX)
        s->ncmd[verb]++;
    c = &sess_cmds[verb];
    if (c->junk && sess_junk(s) < 0)
        return;
    if (c->noarg != NULL && arg.n > 0) {
        sess_reply(s, c->noarg);
        return;
    }
    if (!c->late && (denied = sess_cmd_denied(s, verb)) != NULL) {
        sess_reply(s, denied);
        return;
    }
    c->fn(s, arg);
}
