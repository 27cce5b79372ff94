/*
 * session_dovecot.c - AUTH answered by Dovecot's auth service
 * (auth.backend: dovecot): one connection per worker to its auth-client
 * socket (or an auth inet_listener), on the worker's loop, that every
 * session of the worker shares, each AUTH exchange a request of its own.
 *
 * PURPOSE   session_auth.c keeps the SMTP side (the 334 lines, the failure
 *           count and delays, the log); this file carries the SASL
 *           exchange to Dovecot and back without looking into it: the
 *           client's mechanism and base64 go to Dovecot as they came
 *           (AUTH, CONT), Dovecot's challenges come back (CONT), and its
 *           verdict (OK user=..., FAIL) is handed to the session through
 *           the smtpd_dc_fn given at smtpd_dc_new().  The lines are parsed
 *           by the sasl module (no I/O there; it has a fuzz target).
 * PROTOCOL  auth-client 1.x: we send "VERSION 1 2" and "CPID <pid>";
 *           Dovecot answers VERSION, MECH lines, SPID, CUID, COOKIE, DONE.
 *           A major version other than 1, or SPID before any MECH (the
 *           auth-master or auth-userdb socket by mistake), drops the
 *           connection.  Requests are "AUTH id MECH service=smtp nologin
 *           no-penalty lip= rip= lport= rport= session= [secured]
 *           [resp=]": nologin because Dovecot only checks here (no mail
 *           process is started); no-penalty because mtad delays and counts
 *           failures itself (auth.failure_delay, auth.max_failures and
 *           limits.ban, node-wide), and Dovecot's per-address penalty
 *           would stack a second, unannounced delay on top; secured when
 *           the session has TLS or is on loopback (where Dovecot's own
 *           login processes say the same: nothing on the wire to sniff).
 * MECHS     The EHLO AUTH line lists the mechanisms of the last handshake
 *           (PLAIN LOGIN until one is done: an AUTH then gets 454), less
 *           those this relay must not offer: "private" ones, ANONYMOUS
 *           (a login with no password would get relaying), EXTERNAL (the
 *           client certificate is not passed on) and the mutual-auth ones
 *           (SCRAM, GSSAPI: their final server data has no place here).
 * REQUESTS  At most SMTPD_DC_REQS at once per worker; an id is the slot
 *           (low 8 bits) and a sequence number, so a late answer to a
 *           slot that was reused is not taken for the new request.  Each
 *           request waits at most auth.dovecot_timeout for Dovecot's
 *           answer (a CANCEL goes out when it gives up): the session then
 *           gets TEMP, which it answers 454 4.7.0.
 * CONNECT   Workers run under seccomp, which refuses them new unix
 *           sockets (common/sandbox.c: a new AF_UNIX socket could reach
 *           any socket on the host that Landlock does not cover).  So for
 *           a unix socket the worker asks the master (CHAN_AUTH_CONNECT);
 *           the master connects the one path of auth.dovecot_socket
 *           (nothing the worker says names it) and passes the connected
 *           descriptor back (CHAN_AUTH_SOCKET), or why not
 *           (CHAN_AUTH_REFUSED).  The sandbox is not widened, and the
 *           connection can be made again after a Dovecot restart, which a
 *           socket opened before the lock-down could not.  For
 *           "inet:ADDRESS:PORT" the worker connects itself (TCP is
 *           allowed; the address is an IP literal, nothing to resolve).
 * BACKOFF   A lost connection, a failed connect or a handshake that does
 *           not finish in auth.dovecot_timeout closes it; requests waiting
 *           on it get TEMP at once; the next try is after 100 ms, doubled
 *           up to 5 s, and back to 100 ms after a handshake completes.
 * FAILURE   Never blocks the loop (every socket is non-blocking; the
 *           output is buffered up to SMTPD_DC_OUT_MAX); what Dovecot sends
 *           that does not parse closes the connection, logged once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <openssl/crypto.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "sasl/sasl.h"
#include "smtpd/smtpd_int.h"

#define SMTPD_DC_BACKOFF_MIN_MS 100
#define SMTPD_DC_BACKOFF_MAX_MS 5000
#define SMTPD_DC_OUT_MAX        (1024 * 1024)
#define SMTPD_DC_EHLO_MAX       400

enum { DC_DOWN = 0, DC_ASKED, DC_CONNECTING, DC_HANDSHAKE, DC_READY };

struct smtpd_dc_slot {
    uint32_t         id;            /* 0: free */
    int              wait;          /* Dovecot's turn: the timer runs */
    void            *owner;
    struct ev_timer  timer;
    struct smtpd_dc *dc;
};

struct smtpd_dc {
    struct ev_loop      *loop;
    const struct config *cfg;
    smtpd_dc_fn         *fn;
    int                (*ask)(void *arg);   /* CHAN_AUTH_CONNECT */
    void                *ask_arg;
    struct sockaddr_storage addr;
    unsigned             addrlen;
    int                  fd;
    int                  state;     /* DC_* */
    int                  have_mech; /* a MECH line came in this handshake */
    int                  logged_down;   /* one warning per outage */
    unsigned             gen;       /* bumped at every close */
    uint32_t             seq;
    uint64_t             backoff_ms;
    struct ev_timer      retry;     /* DC_DOWN: the next try */
    struct ev_timer      htimer;    /* the connect and handshake deadline */
    struct buf           out;
    size_t               inlen;
    char                 ehlo[SMTPD_DC_EHLO_MAX + 64];
    char                 nextehlo[SMTPD_DC_EHLO_MAX + 32];
    struct smtpd_dc_slot slot[SMTPD_DC_REQS];
    char                 in[SASL_LINE_MAX + 2];
    char                 scratch[SASL_LINE_MAX + 2];
};

static void smtpd_dc_try(struct smtpd_dc *dc);
static void smtpd_dc_on_io(struct ev_loop *loop, int fd, unsigned events,
    void *arg);


/* --- the connection --------------------------------------------------- */

static void
smtpd_dc_watch(struct smtpd_dc *dc)
{
    unsigned ev = EV_READ;

    if (dc->state == DC_CONNECTING || buf_avail(&dc->out) > 0)
        ev |= EV_WRITE;
    if (ev_watch(dc->loop, dc->fd, ev, smtpd_dc_on_io, dc) < 0)
        log_warn("auth: dovecot: epoll_ctl: %s", strerror(errno));
}


/* smtpd_dc_down - close the connection, fail what waits on it, and arm
 * the next try.  The callbacks run last: they may start new requests,
 * which see DC_DOWN and fail at once. */
static void
smtpd_dc_down(struct smtpd_dc *dc, const char *why)
{
    void    *owner[SMTPD_DC_REQS];
    unsigned i, n = 0;

    if (dc->fd >= 0) {
        ev_unwatch(dc->loop, dc->fd);
        close(dc->fd);
        dc->fd = -1;
    }
    if (!dc->logged_down)
        log_warn("auth: dovecot %s: %s; AUTH answers 454 until it is back "
            "(next try in %llu ms)", dc->cfg->auth_dovecot_socket, why,
            (unsigned long long)dc->backoff_ms);
    dc->logged_down = 1;
    dc->state = DC_DOWN;
    dc->gen++;
    dc->inlen = 0;
    OPENSSL_cleanse(dc->out.data, dc->out.cap);
    buf_consume(&dc->out, buf_avail(&dc->out));
    ev_timer_stop(dc->loop, &dc->htimer);
    ev_timer_start(dc->loop, &dc->retry, dc->backoff_ms);
    dc->backoff_ms = dc->backoff_ms * 2 > SMTPD_DC_BACKOFF_MAX_MS ?
        SMTPD_DC_BACKOFF_MAX_MS : dc->backoff_ms * 2;
    for (i = 0; i < SMTPD_DC_REQS; i++) {
        struct smtpd_dc_slot *sl = &dc->slot[i];

        if (sl->id == 0)
            continue;
        ev_timer_stop(dc->loop, &sl->timer);
        if (sl->wait)
            owner[n++] = sl->owner;
        sl->id = 0;                 /* a client's turn: its CONT fails */
        sl->owner = NULL;
    }
    for (i = 0; i < n; i++)
        dc->fn(owner[i], SMTPD_DC_TEMP, "connection to dovecot lost");
}


/* smtpd_dc_flush - write what is buffered; -1: the connection is gone. */
static int
smtpd_dc_flush(struct smtpd_dc *dc)
{
    ssize_t n;

    while (buf_avail(&dc->out) > 0) {
        n = send(dc->fd, buf_head(&dc->out), buf_avail(&dc->out),
            MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            smtpd_dc_down(dc, n < 0 ? strerror(errno) : "write failed");
            return -1;
        }
        OPENSSL_cleanse(buf_head(&dc->out), (size_t)n);
        buf_consume(&dc->out, (size_t)n);
    }
    if (buf_avail(&dc->out) == 0)
        buf_compact(&dc->out);
    smtpd_dc_watch(dc);
    return 0;
}


/* smtpd_dc_send - one line out (buffered when the socket is full). */
static int
smtpd_dc_send(struct smtpd_dc *dc, const char *line, size_t n)
{
    if (buf_avail(&dc->out) + n > SMTPD_DC_OUT_MAX)
        return -1;
    buf_append(&dc->out, line, n);
    if (dc->state != DC_READY && dc->state != DC_HANDSHAKE)
        return 0;                   /* the connect's EV_WRITE sends it */
    return smtpd_dc_flush(dc);
}


/* smtpd_dc_mechs_add - one MECH line into the next EHLO list. */
static void
smtpd_dc_mechs_add(struct smtpd_dc *dc, const struct sasl_line *l)
{
    size_t n = strlen(dc->nextehlo);

    dc->have_mech = 1;
    if ((l->mech_flags & (SASL_MECH_PRIVATE | SASL_MECH_ANONYMOUS |
        SASL_MECH_MUTUAL)) || strcmp(l->mech, "ANONYMOUS") == 0 ||
        strcmp(l->mech, "EXTERNAL") == 0 || strstr(l->mech, "SCRAM") ==
        l->mech || strcmp(l->mech, "GSSAPI") == 0 ||
        strcmp(l->mech, "GS2-KRB5") == 0)
        return;
    if (n + strlen(l->mech) + 1 > SMTPD_DC_EHLO_MAX)
        return;
    snprintf(dc->nextehlo + n, sizeof(dc->nextehlo) - n, " %s", l->mech);
}


/* smtpd_dc_ready - DONE: the handshake is over. */
static void
smtpd_dc_ready(struct smtpd_dc *dc)
{
    ev_timer_stop(dc->loop, &dc->htimer);
    dc->state = DC_READY;
    dc->backoff_ms = SMTPD_DC_BACKOFF_MIN_MS;
    if (dc->nextehlo[0] != '\0')
        snprintf(dc->ehlo, sizeof(dc->ehlo), "250-AUTH%s\r\n", dc->nextehlo);
    else
        dc->ehlo[0] = '\0';         /* nothing we may offer */
    log_notice("auth: dovecot %s: connected; mechanisms:%s",
        dc->cfg->auth_dovecot_socket, dc->nextehlo[0] != '\0' ?
        dc->nextehlo : " (none usable)");
    dc->logged_down = 0;
}


/* smtpd_dc_user_ok - a login mtad can use: 1..255 bytes, no space or
 * control character (as auth.password_file's names).  It goes into the
 * log (escaped), submission.sender_login_match and, with
 * auth.received_header, the Received: header, where a CR or LF from the
 * backend would start a header of its own; a cut name could match
 * another user's addresses. */
static int
smtpd_dc_user_ok(const char *u)
{
    size_t i;

    if (u == NULL || u[0] == '\0' || strlen(u) > 255)
        return 0;
    for (i = 0; u[i] != '\0'; i++)
        if ((unsigned char)u[i] <= ' ' || u[i] == 0x7f)
            return 0;
    return 1;
}


/* smtpd_dc_answer - OK, CONT or FAIL for a request. */
static void
smtpd_dc_answer(struct smtpd_dc *dc, const struct sasl_line *l)
{
    struct smtpd_dc_slot *sl = &dc->slot[l->id % SMTPD_DC_REQS];
    void                 *owner = sl->owner;
    const char           *text = "";
    int                   kind;

    if (sl->id != l->id || !sl->wait)
        return;                     /* cancelled, timed out, or not asked */
    ev_timer_stop(dc->loop, &sl->timer);
    if (l->kind == SASL_CONT) {
        sl->wait = 0;               /* the client's turn */
        dc->fn(owner, SMTPD_DC_CONT, l->data);
        return;
    }
    sl->id = 0;
    sl->owner = NULL;
    if (l->kind == SASL_OK && smtpd_dc_user_ok(l->user)) {
        kind = SMTPD_DC_OK;
        text = l->user;
    } else if (l->kind == SASL_OK) {
        kind = SMTPD_DC_TEMP;
        text = "dovecot said OK without a usable user name (none, over "
            "255 bytes, or with a space or control character)";
    } else {
        kind = (l->fail_flags & SASL_FAIL_TEMP) ? SMTPD_DC_TEMP
                                                : SMTPD_DC_FAIL;
        text = l->user != NULL ? l->user : "";
    }
    dc->fn(owner, kind, text);
}


/* smtpd_dc_line - one line from Dovecot; -1: drop the connection. */
static int
smtpd_dc_line(struct smtpd_dc *dc, const char *p, size_t n)
{
    struct sasl_line l;

    switch (sasl_parse(p, n, dc->scratch, sizeof(dc->scratch), &l)) {
    case SASL_BAD:
        smtpd_dc_down(dc, "a malformed line from dovecot");
        return -1;
    case SASL_VERSION:
        if (l.major != 1) {
            smtpd_dc_down(dc, "auth protocol major version is not 1");
            return -1;
        }
        return 0;
    case SASL_MECH:
        if (dc->state == DC_HANDSHAKE)
            smtpd_dc_mechs_add(dc, &l);
        return 0;
    case SASL_SPID:
        if (dc->state == DC_HANDSHAKE && !dc->have_mech) {
            smtpd_dc_down(dc, "not an auth-client socket (no MECH lines: "
                "auth-master or auth-userdb?)");
            return -1;
        }
        return 0;
    case SASL_DONE:
        if (dc->state == DC_HANDSHAKE)
            smtpd_dc_ready(dc);
        return 0;
    case SASL_OK:
    case SASL_CONT:
    case SASL_FAIL:
        if (dc->state == DC_READY)
            smtpd_dc_answer(dc, &l);
        return 0;
    default:
        return 0;                   /* CUID, COOKIE, unknown: ignored */
    }
}


/* smtpd_dc_read - what Dovecot sent, line by line. */
static void
smtpd_dc_read(struct smtpd_dc *dc)
{
    unsigned gen = dc->gen;
    size_t   start, i;
    ssize_t  n;

    for (;;) {
        n = recv(dc->fd, dc->in + dc->inlen, sizeof(dc->in) - dc->inlen,
            MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) {
            smtpd_dc_down(dc, n == 0 ? "dovecot closed the connection" :
                strerror(errno));
            return;
        }
        start = 0;
        for (i = dc->inlen; i < dc->inlen + (size_t)n; i++) {
            if (dc->in[i] != '\n')
                continue;
            if (smtpd_dc_line(dc, dc->in + start, i - start) < 0 ||
                dc->gen != gen)
                return;             /* closed (a callback may close it) */
            start = i + 1;
        }
        dc->inlen += (size_t)n;
        memmove(dc->in, dc->in + start, dc->inlen - start);
        dc->inlen -= start;
        if (dc->inlen >= sizeof(dc->in)) {
            smtpd_dc_down(dc, "a line from dovecot over 16 KiB");
            return;
        }
    }
}


static void
smtpd_dc_on_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct smtpd_dc *dc = arg;
    int              err = 0;
    socklen_t        elen = sizeof(err);

    (void)loop;
    (void)fd;
    if (dc->state == DC_CONNECTING) {
        if (getsockopt(dc->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 ||
            err != 0) {
            smtpd_dc_down(dc, strerror(err != 0 ? err : errno));
            return;
        }
        dc->state = DC_HANDSHAKE;
    }
    if ((events & EV_WRITE) && smtpd_dc_flush(dc) < 0)
        return;
    if (events & (EV_READ | EV_ERROR))
        smtpd_dc_read(dc);
}


static void
smtpd_dc_on_htimer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    smtpd_dc_down(arg, "no handshake within auth.dovecot_timeout");
}


/* smtpd_dc_begin - a connected (or connecting) fd: the handshake. */
static void
smtpd_dc_begin(struct smtpd_dc *dc, int fd, int connecting)
{
    char hello[64];
    int  n;

    dc->fd = fd;
    dc->state = connecting ? DC_CONNECTING : DC_HANDSHAKE;
    dc->have_mech = 0;
    dc->nextehlo[0] = '\0';
    if (ev_watch(dc->loop, fd, EV_READ | EV_WRITE, smtpd_dc_on_io, dc) < 0) {
        smtpd_dc_down(dc, strerror(errno));
        return;
    }
    ev_timer_start(dc->loop, &dc->htimer, dc->cfg->auth_dovecot_timeout_ms);
    n = snprintf(hello, sizeof(hello), "VERSION\t1\t2\nCPID\t%ld\n",
        (long)getpid());
    (void)smtpd_dc_send(dc, hello, (size_t)n);
}


/* smtpd_dc_try - the next attempt: ask the master (unix), or connect. */
static void
smtpd_dc_try(struct smtpd_dc *dc)
{
    int fd;

    if (dc->state != DC_DOWN)
        return;
    if (dc->addr.ss_family == AF_UNIX) {
        dc->state = DC_ASKED;
        ev_timer_start(dc->loop, &dc->htimer,
            dc->cfg->auth_dovecot_timeout_ms);
        if (dc->ask(dc->ask_arg) < 0)
            smtpd_dc_down(dc, "cannot ask the master to connect");
        return;
    }
    fd = socket(dc->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
        SOCK_CLOEXEC, 0);
    if (fd < 0) {
        smtpd_dc_down(dc, strerror(errno));
        return;
    }
    if (connect(fd, (struct sockaddr *)&dc->addr, dc->addrlen) == 0) {
        smtpd_dc_begin(dc, fd, 0);
        return;
    }
    if (errno == EINPROGRESS) {
        smtpd_dc_begin(dc, fd, 1);
        return;
    }
    close(fd);
    smtpd_dc_down(dc, strerror(errno));
}


static void
smtpd_dc_on_retry(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    smtpd_dc_try(arg);
}


void
smtpd_dc_socket(struct smtpd_dc *dc, int fd, const char *why)
{
    if (dc == NULL || dc->state != DC_ASKED) {
        if (fd >= 0)
            close(fd);              /* not asked for (any more) */
        return;
    }
    ev_timer_stop(dc->loop, &dc->htimer);
    if (fd < 0) {
        smtpd_dc_down(dc, why != NULL && why[0] != '\0' ? why :
            "the master could not connect");
        return;
    }
    smtpd_dc_begin(dc, fd, 0);
}


/* --- requests --------------------------------------------------------- */

static void
smtpd_dc_on_timeout(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct smtpd_dc_slot *sl = arg;
    struct smtpd_dc      *dc = sl->dc;
    void                 *owner = sl->owner;
    char                  line[32];
    int                   n;

    (void)loop;
    (void)t;
    n = snprintf(line, sizeof(line), "CANCEL\t%u\n", (unsigned)sl->id);
    sl->id = 0;
    sl->owner = NULL;
    log_warn("auth: dovecot %s: no answer within auth.dovecot_timeout "
        "(%llu ms)", dc->cfg->auth_dovecot_socket,
        (unsigned long long)dc->cfg->auth_dovecot_timeout_ms);
    if (dc->state == DC_READY)
        (void)smtpd_dc_send(dc, line, (size_t)n);
    dc->fn(owner, SMTPD_DC_TEMP, "dovecot did not answer in time");
}


const char *
smtpd_dc_ehlo(const struct smtpd_dc *dc)
{
    return dc->ehlo;
}


const char *
smtpd_dc_mech(const struct smtpd_dc *dc, struct str name, char *out,
    size_t outsz)
{
    const char *p = dc->ehlo + 8;   /* after "250-AUTH" */
    size_t      k;

    if (strncmp(dc->ehlo, "250-AUTH", 8) != 0 || name.n == 0 ||
        name.n > SASL_MECH_MAX || name.n >= outsz)
        return NULL;
    while (*p == ' ') {
        p++;
        k = strcspn(p, " \r");
        if (k == name.n && strncasecmp(p, name.p, k) == 0) {
            memcpy(out, p, k);
            out[k] = '\0';
            return out;
        }
        p += k;
    }
    return NULL;
}


/* smtpd_dc_slot_take - a free slot with a new id, or NULL. */
static struct smtpd_dc_slot *
smtpd_dc_slot_take(struct smtpd_dc *dc, void *owner)
{
    unsigned i;

    for (i = 0; i < SMTPD_DC_REQS; i++) {
        struct smtpd_dc_slot *sl = &dc->slot[(dc->seq + i) % SMTPD_DC_REQS];

        if (sl->id != 0)
            continue;
        dc->seq = dc->seq % 0x7fffffu + 1;  /* ids 1..2^31-1: a long */
        sl->id = (dc->seq << 8) | (uint32_t)(sl - dc->slot);
        sl->owner = owner;
        sl->wait = 0;               /* 1 once its line is out: a close
                                       while it is sent fails nobody */
        return sl;
    }
    return NULL;
}


long
smtpd_dc_auth(struct smtpd_dc *dc, const struct smtpd_dc_req *r, void *owner)
{
    struct smtpd_dc_slot *sl;
    struct buf            b;
    long                  id;

    if (dc->state != DC_READY || (r->resp != NULL &&
        !sasl_is_base64(r->resp, strlen(r->resp))) ||
        (sl = smtpd_dc_slot_take(dc, owner)) == NULL)
        return -1;
    buf_init(&b);
    buf_printf(&b, "AUTH\t%u\t%s\tservice=smtp\tnologin\tno-penalty"
        "\tlip=%s\trip=%s\tlport=%u\trport=%u\tsession=%s%s",
        (unsigned)sl->id, r->mech, r->lip, r->rip, r->lport, r->rport,
        r->sid, r->secured ? "\tsecured" : "");
    if (r->resp != NULL)
        buf_printf(&b, "\tresp=%s", r->resp);
    buf_append(&b, "\n", 1);
    id = (long)sl->id;
    if (smtpd_dc_send(dc, buf_head(&b), buf_avail(&b)) < 0 ||
        dc->state != DC_READY || sl->id != (uint32_t)id) {
        OPENSSL_cleanse(b.data, b.cap);
        buf_free(&b);
        if (sl->id == (uint32_t)id) {
            sl->id = 0;
            sl->owner = NULL;
        }
        return -1;
    }
    OPENSSL_cleanse(b.data, b.cap);
    buf_free(&b);
    sl->wait = 1;
    ev_timer_start(dc->loop, &sl->timer, dc->cfg->auth_dovecot_timeout_ms);
    return id;
}


int
smtpd_dc_cont(struct smtpd_dc *dc, long id, struct str b64)
{
    struct smtpd_dc_slot *sl = &dc->slot[(uint32_t)id % SMTPD_DC_REQS];
    struct buf            b;
    int                   rc;

    if (id <= 0 || sl->id != (uint32_t)id || sl->wait ||
        dc->state != DC_READY || !sasl_is_base64(b64.p, b64.n))
        return -1;
    buf_init(&b);
    buf_printf(&b, "CONT\t%u\t%.*s\n", (unsigned)sl->id, (int)b64.n, b64.p);
    rc = smtpd_dc_send(dc, buf_head(&b), buf_avail(&b));
    OPENSSL_cleanse(b.data, b.cap);
    buf_free(&b);
    if (rc < 0 || sl->id != (uint32_t)id) {
        if (sl->id == (uint32_t)id) {
            sl->id = 0;
            sl->owner = NULL;
        }
        return -1;
    }
    sl->wait = 1;
    ev_timer_start(dc->loop, &sl->timer, dc->cfg->auth_dovecot_timeout_ms);
    return 0;
}


void
smtpd_dc_cancel(struct smtpd_dc *dc, long id)
{
    struct smtpd_dc_slot *sl;
    char                  line[32];
    int                   n;

    if (dc == NULL || id <= 0)
        return;
    sl = &dc->slot[(uint32_t)id % SMTPD_DC_REQS];
    if (sl->id != (uint32_t)id)
        return;
    ev_timer_stop(dc->loop, &sl->timer);
    sl->id = 0;
    sl->owner = NULL;
    n = snprintf(line, sizeof(line), "CANCEL\t%u\n", (unsigned)id);
    if (dc->state == DC_READY)
        (void)smtpd_dc_send(dc, line, (size_t)n);
}


/* --- life ------------------------------------------------------------- */

struct smtpd_dc *
smtpd_dc_new(struct ev_loop *loop, const struct config *cfg, smtpd_dc_fn *fn,
    int (*ask)(void *arg), void *ask_arg)
{
    struct smtpd_dc *dc;
    const char      *why;
    unsigned         i;

    if (cfg->auth_dovecot_socket == NULL)
        return NULL;
    dc = xcalloc(1, sizeof(*dc));
    if (config_dovecot_addr(cfg->auth_dovecot_socket, &dc->addr,
        &dc->addrlen, &why) < 0 || (dc->addr.ss_family == AF_UNIX &&
        ask == NULL)) {
        log_err("auth.dovecot_socket %s: %s", cfg->auth_dovecot_socket,
            ask == NULL ? "no way to reach the master" : why);
        free(dc);
        return NULL;
    }
    dc->loop = loop;
    dc->cfg = cfg;
    dc->fn = fn;
    dc->ask = ask;
    dc->ask_arg = ask_arg;
    dc->fd = -1;
    dc->backoff_ms = SMTPD_DC_BACKOFF_MIN_MS;
    buf_init(&dc->out);
    snprintf(dc->ehlo, sizeof(dc->ehlo), "250-AUTH PLAIN LOGIN\r\n");
    ev_timer_init(&dc->retry, smtpd_dc_on_retry, dc);
    ev_timer_init(&dc->htimer, smtpd_dc_on_htimer, dc);
    for (i = 0; i < SMTPD_DC_REQS; i++) {
        dc->slot[i].dc = dc;
        ev_timer_init(&dc->slot[i].timer, smtpd_dc_on_timeout, &dc->slot[i]);
    }
    ev_timer_start(loop, &dc->retry, 0);    /* the first try, in the loop */
    return dc;
}


void
smtpd_dc_free(struct smtpd_dc *dc)
{
    unsigned i;

    if (dc == NULL)
        return;
    if (dc->fd >= 0) {
        ev_unwatch(dc->loop, dc->fd);
        close(dc->fd);
    }
    ev_timer_stop(dc->loop, &dc->retry);
    ev_timer_stop(dc->loop, &dc->htimer);
    for (i = 0; i < SMTPD_DC_REQS; i++)
        ev_timer_stop(dc->loop, &dc->slot[i].timer);
    OPENSSL_cleanse(dc->out.data, dc->out.cap);
    buf_free(&dc->out);
    free(dc);
}
