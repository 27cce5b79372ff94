/*
 * session_auth.c - SMTP AUTH (RFC 4954) with PLAIN (RFC 4616) and LOGIN,
 * checked against auth.password_file with crypt(3); the submission role
 * of a listener (RFC 6409: AUTH before MAIL) and
 * submission.sender_login_match.
 *
 * PURPOSE   session.c keeps the SMTP state; this file decides what AUTH
 *           may do and answers it.  The hooks there are: one dispatch line
 *           (smtpd_auth_cmd), the lines of an AUTH exchange
 *           (smtpd_auth_line), one EHLO capability (smtpd_auth_ehlo) and
 *           one check in MAIL (smtpd_auth_mail).
 * FILE      auth.password_file holds "user:hash" lines (crypt(3) hashes:
 *           yescrypt "$y$", sha512-crypt "$6$", ...; '#' comments and
 *           blank lines allowed).  It may be readable by root only: each
 *           worker reads it in worker_init(), before it drops privileges;
 *           a reload forks new workers, which read it again.  A bad line
 *           stops the start (or the reload) with file:line in the log.
 * POLICY    AUTH is offered only over TLS, or on a loopback connection when
 *           auth.allow_plaintext_loopback is true (a local sendmail).
 *           Checks are counted per client address (IPv6 per
 *           limits.ipv6_prefix network) in one table of the shared status
 *           page that every worker of the node writes (status_auth_take:
 *           an address is forgotten SMTPD_AUTH_WINDOW_S after its last
 *           count), so neither a reconnect nor landing on another worker
 *           resets it.  A check is counted when the password arrives and
 *           given back when it matches, so checks running at once count
 *           too.  The reply
 *           to the n-th failure is held back auth.failure_delay * 2^(n-1),
 *           at most auth.failure_delay_max (Postfix's
 *           smtpd_error_sleep_time, doubled like a tarpit): the session
 *           keeps it (SMTPD_AUTH_HOLD) and answers from its timer, reading
 *           nothing meanwhile, so a guesser gets one try per delay per
 *           connection; the count is raised before the hash, so hanging up
 *           early gains nothing.  At auth.max_failures the held reply is
 *           421 and the session closes; later AUTH from that address gets
 *           421 at once, and so does a password sent in an exchange
 *           opened before: no more than auth.max_failures checks per
 *           address and window.  Each failed attempt is logged with the
 *           user name tried (escaped), never the password.
 * HASHING   A yescrypt check at its default cost is slow by design: it runs on the worker's hashing threads
 *           (session_hash.c) while the loop serves the other sessions.  The
 *           session waits for it (SMTPD_AUTH_WAIT), reading nothing, and
 *           smtpd_auth_done() takes the answer; a session that closes
 *           meanwhile cancels it (smtpd_auth_cancel).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "common/log.h"
#include "common/status.h"
#include "common/safefs.h"
#include "common/util.h"
#include "config/config.h"
#include "sasl/sasl.h"
#include "smtpd/smtpd_int.h"

/* The session's fields of a record (SESS_CLIENT for an auth context). */
#define SMTPD_AUTH_CLIENT(c) LKV_S("client", (c)->ip), \
    LKV_I("client_port", (c)->port), LKV_S("session", (c)->sid)
#define SMTPD_AUTH_WINDOW_S   (10 * 60)          /* failures forgotten */
#define SMTPD_AUTH_FILE_MAX   (16 * 1024 * 1024)

struct smtpd_auth_user {
    char *name;
    char *hash;
};

struct smtpd_auth {
    struct smtpd_auth_user *users;
    size_t                  nusers;
};

enum { SA_NONE = 0, SA_PLAIN, SA_LOGIN_USER, SA_LOGIN_PASS,
       SA_DOVECOT };                 /* Dovecot sent CONT: the client's turn */

struct smtpd_sauth {
    int   step;                      /* SA_*: waiting for a client line */
    int   held;                      /* SMTPD_AUTH_FAIL or _CLOSE: the
                                        reply the session holds back */
    uint64_t hold_ms;                /* for this long */
    int   busy;                      /* a check runs: job (session_hash.c) */
    int   job;
    int   found;                     /* ... for a user in the file */
    unsigned n;                      /* ... counted as the n-th */
    char  tried[256];                /* the user name given */
    char *user;                      /* authenticated as, or NULL */
    int   trusted;                   /* smtpd_auth_trusted(): any sender */
    const char *mech;
    long  dcid;                      /* Dovecot's request, 0: none */
    char  dcmech[SASL_MECH_MAX + 1]; /* its mechanism */
};


/* --- the password file ------------------------------------------------ */

void
smtpd_auth_free(struct smtpd_auth *a)
{
    size_t i;

    if (a == NULL)
        return;
    for (i = 0; i < a->nusers; i++) {
        free(a->users[i].name);
        if (a->users[i].hash != NULL)
            OPENSSL_cleanse(a->users[i].hash, strlen(a->users[i].hash));
        free(a->users[i].hash);
    }
    free(a->users);
    free(a);
}


/* smtpd_auth_parse - one line; 0, or -1 with why. */
static int
smtpd_auth_parse(struct smtpd_auth *a, char *line, const char **why)
{
    char  *colon = strchr(line, ':');
    size_t i;

    if (colon == NULL) {
        *why = "expected user:hash";
        return -1;
    }
    *colon = '\0';
    if (line[0] == '\0' || colon - line > 255) {
        *why = "user name empty or over 255 bytes";
        return -1;
    }
    for (i = 0; line[i] != '\0'; i++)
        if ((unsigned char)line[i] <= ' ' || line[i] == 0x7f) {
            *why = "user name with a space or control character";
            return -1;
        }
    if (colon[1] != '$' || strchr(colon + 1, ':') != NULL) {
        *why = "hash is not a crypt(3) hash like $y$... or $6$...";
        return -1;
    }
    for (i = 0; i < a->nusers; i++)
        if (strcmp(a->users[i].name, line) == 0) {
            *why = "user listed twice";
            return -1;
        }
    a->users = xrealloc(a->users, (a->nusers + 1) * sizeof(*a->users));
    a->users[a->nusers].name = xstrdup(line);
    a->users[a->nusers].hash = xstrdup(colon + 1);
    a->nusers++;
    return 0;
}


struct smtpd_auth *
smtpd_auth_load(const char *path, gid_t gid, gid_t admin_gid)
{
    struct smtpd_auth *a;
    struct stat        st;
    char              *text, *line, *next;
    const char        *why;
    char               why_mode[160];
    ssize_t            got;
    size_t             len = 0;
    unsigned           lineno = 0;
    int                fd;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size > SMTPD_AUTH_FILE_MAX) {
        log_err("auth.password_file %s: %s", path, fd < 0 ?
            strerror(errno) : "not a regular file of at most 16 MiB");
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    if (safefs_secret_exposed(&st, gid, admin_gid, why_mode, sizeof(why_mode)))
        log_warn("auth.password_file %s: %s", path, why_mode);
    text = xmalloc((size_t)st.st_size + 1);
    while (len < (size_t)st.st_size &&
        (got = read(fd, text + len, (size_t)st.st_size - len)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            log_err("auth.password_file %s: %s", path, strerror(errno));
            free(text);
            close(fd);
            return NULL;
        }
        len += (size_t)got;
    }
    close(fd);
    text[len] = '\0';
    a = xcalloc(1, sizeof(*a));
    for (line = text; line != NULL && *line != '\0'; line = next) {
        lineno++;
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        if (line[0] != '\0' && line[strlen(line) - 1] == '\r')
            line[strlen(line) - 1] = '\0';
        if (line[0] == '\0' || line[0] == '#')
            continue;
        if (smtpd_auth_parse(a, line, &why) < 0) {
            log_err("auth.password_file %s:%u: %s", path, lineno, why);
            OPENSSL_cleanse(text, len);
            free(text);
            smtpd_auth_free(a);
            return NULL;
        }
    }
    OPENSSL_cleanse(text, len);
    free(text);
    log_info("auth.password_file %s: %zu users", path, a->nusers);
    return a;
}


/* smtpd_auth_hash_of - the hash user's password is checked against.  An
 * unknown user still costs one hash of the same method and cost, the
 * first user's (never a match: *found is 0), so that timing does not tell
 * who exists; a fixed "$6$" dummy would be far cheaper than yescrypt. */
static const char *
smtpd_auth_hash_of(const struct smtpd_auth *a, const char *user, int *found)
{
    static const char dummy[] =
        "$6$mtadmtadmtadmtad$0000000000000000000000000000000000000000000"
        "000000000000000000000000000000000000000000";
    size_t i;

    *found = 0;
    for (i = 0; i < a->nusers; i++)
        if (strcmp(a->users[i].name, user) == 0) {
            *found = 1;
            return a->users[i].hash;
        }
    return a->nusers > 0 ? a->users[0].hash : dummy;
}


/* --- failure limit ---------------------------------------------------- */

static uint32_t
smtpd_auth_now_s(const struct smtpd *d)
{
    return (uint32_t)(ev_now(d->loop) / 1000);
}


static unsigned
smtpd_auth_failures(const struct smtpd *d, const struct smtpd_auth_ctx *c)
{
    return status_auth_count(d->shared, c->group, smtpd_auth_now_s(d),
        SMTPD_AUTH_WINDOW_S);
}


/* smtpd_auth_delay - how long the reply to the n-th failure (n >= 1) is
 * held: failure_delay doubled n - 1 times, at most failure_delay_max. */
uint64_t
smtpd_auth_delay(const struct config *cfg, unsigned n)
{
    uint64_t ms = cfg->auth_failure_delay_ms;

    while (n-- > 1 && ms < cfg->auth_failure_delay_max_ms)
        ms *= 2;
    return ms < cfg->auth_failure_delay_max_ms ? ms
                                               : cfg->auth_failure_delay_max_ms;
}


/* smtpd_auth_reply - the answer to a failed check: 535, or 421 at the
 * limit. */
static int
smtpd_auth_reply(const struct smtpd *d, int rc, char *reply, size_t rsz)
{
    if (rc == SMTPD_AUTH_CLOSE)
        snprintf(reply, rsz, "421 4.7.0 %s Error: too many failed "
            "authentications", d->cfg->hostname);
    else
        snprintf(reply, rsz, "535 5.7.8 Error: authentication failed");
    return rc;
}


/* --- base64 ----------------------------------------------------------- */

static int
smtpd_b64val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}


/* smtpd_b64dec - strict RFC 4648 base64 into out; length or -1. */
static long
smtpd_b64dec(struct str in, unsigned char *out, size_t outsz)
{
    size_t   i, o = 0;
    unsigned acc = 0;
    int      bits = 0, pad = 0, v;

    if (in.n % 4 != 0)
        return -1;
    for (i = 0; i < in.n; i++) {
        if (in.p[i] == '=') {
            if (i + 2 < in.n || ++pad > 2)
                return -1;
            continue;
        }
        if (pad > 0 || (v = smtpd_b64val((unsigned char)in.p[i])) < 0)
            return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= outsz)
                return -1;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    return (long)o;
}


/* --- the exchange ----------------------------------------------------- */

int
smtpd_auth_offered(const struct smtpd *d, const struct smtpd_auth_ctx *c)
{
    if (d->auth == NULL && d->dovecot == NULL)
        return 0;
    return c->tls || (c->loopback && d->cfg->auth_allow_plaintext_loopback);
}


const char *
smtpd_auth_ehlo(const struct smtpd *d, const struct smtpd_auth_ctx *c)
{
    if (c->sa != NULL && c->sa->user != NULL)
        return "";
    if (!smtpd_auth_offered(d, c))
        return "";
    return d->dovecot != NULL ? smtpd_dc_ehlo(d->dovecot)
                              : "250-AUTH PLAIN LOGIN\r\n";
}


const char *
smtpd_auth_user(const struct smtpd_sauth *sa)
{
    return sa != NULL ? sa->user : NULL;
}


int
smtpd_auth_waiting(const struct smtpd_sauth *sa)
{
    return sa != NULL && sa->step != SA_NONE;
}


struct smtpd_sauth *
smtpd_auth_trusted(const char *name)
{
    struct smtpd_sauth *sa = xcalloc(1, sizeof(*sa));

    sa->user = xstrdup(name);
    sa->trusted = 1;
    sa->mech = "internal";
    return sa;
}


void
smtpd_auth_sess_free(struct smtpd_sauth *sa)
{
    if (sa == NULL)
        return;
    free(sa->user);
    free(sa);
}


/* smtpd_auth_try - user and password are known: count the check and
 * hand it to a hashing thread; smtpd_auth_done() takes the answer. */
static int
smtpd_auth_try(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, const char *user, const char *pass,
    char *reply, size_t rsz)
{
    const char *hash;
    unsigned    n;
    int         id, found;

    sa->step = SA_NONE;
    /* counted here, not only checked at the AUTH command: exchanges opened
     * before the limit was reached, or running at once on other
     * connections, would each still get their guess checked */
    n = status_auth_take(d->shared, c->group, smtpd_auth_now_s(d),
        SMTPD_AUTH_WINDOW_S, (unsigned)d->cfg->auth_max_failures);
    if (n == 0)
        return smtpd_auth_reply(d, SMTPD_AUTH_CLOSE, reply, rsz);
    hash = smtpd_auth_hash_of(d->auth, user, &found);
    id = d->hash != NULL ? smtpd_hash_submit(d->hash, pass, hash, c->owner)
                         : -1;
    if (id < 0) {                   /* every job slot busy */
        status_auth_give(d->shared, c->group, smtpd_auth_now_s(d),
            SMTPD_AUTH_WINDOW_S);
        snprintf(reply, rsz, "454 4.7.0 Temporary authentication failure");
        return SMTPD_AUTH_FAIL;
    }
    if (user != sa->tried)
        util_strlcpy(sa->tried, user, sizeof(sa->tried));
    sa->busy = 1;
    sa->job = id;
    sa->found = found;
    sa->n = n;
    return SMTPD_AUTH_WAIT;
}


int
smtpd_auth_done(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, int match, char *reply, size_t rsz)
{
    const char *user = sa->tried;
    unsigned    n = sa->n;
    int         rc;

    sa->busy = 0;
    if (match && sa->found) {
        status_auth_give(d->shared, c->group, smtpd_auth_now_s(d),
            SMTPD_AUTH_WINDOW_S);
        sa->user = xstrdup(user);
        log_ev(LOGL_INFO, "auth", LOG_KVS(SMTPD_AUTH_CLIENT(c),
            LKV_S("user", user), LKV_S("method", sa->mech)),
            "auth: [%s]:%u authenticated as %s (%s); session=%s", c->ip,
            (unsigned)c->port, user, sa->mech, c->sid);
        snprintf(reply, rsz, "235 2.7.0 Authentication successful");
        return SMTPD_AUTH_OK;
    }
    rc = n >= (unsigned)d->cfg->auth_max_failures ? SMTPD_AUTH_CLOSE
                                                 : SMTPD_AUTH_FAIL;
    sa->hold_ms = smtpd_auth_delay(d->cfg, n);
    log_ev(LOGL_WARN, "auth_failed", LOG_KVS(SMTPD_AUTH_CLIENT(c),
        LKV_S("user", user), LKV_S("method", sa->mech),
        LKV_I("failures", n), LKV_I("delay_ms", sa->hold_ms)),
        "auth: [%s]:%u failed for user %s (%s), failure %u of %d, "
        "answered in %llu ms; session=%s", c->ip, (unsigned)c->port, user,
        sa->mech, n, d->cfg->auth_max_failures,
        (unsigned long long)sa->hold_ms, c->sid);
    if (sa->hold_ms > 0) {
        sa->held = rc;
        return SMTPD_AUTH_HOLD;
    }
    return smtpd_auth_reply(d, rc, reply, rsz);
}


void
smtpd_auth_cancel(struct smtpd *d, struct smtpd_sauth *sa)
{
    if (sa == NULL)
        return;
    if (sa->dcid > 0)
        smtpd_dc_cancel(d->dovecot, sa->dcid);  /* the count stays */
    sa->dcid = 0;
    if (!sa->busy)
        return;
    smtpd_hash_cancel(d->hash, sa->job);    /* the count stays */
    sa->busy = 0;
}


uint64_t
smtpd_auth_hold_ms(const struct smtpd_sauth *sa)
{
    return sa != NULL && sa->held != 0 ? sa->hold_ms : 0;
}


int
smtpd_auth_release(const struct smtpd *d, struct smtpd_sauth *sa,
    char *reply, size_t rsz)
{
    int rc = sa->held;

    sa->held = 0;
    sa->hold_ms = 0;
    return smtpd_auth_reply(d, rc, reply, rsz);
}


/* smtpd_auth_plain - RFC 4616: [authzid] NUL authcid NUL passwd; an
 * authzid other than the authcid is refused (no proxy logins). */
static int
smtpd_auth_plain(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, struct str b64, char *reply, size_t rsz)
{
    unsigned char buf[1024];
    char          user[256], pass[512];
    const unsigned char *u, *p, *end;
    long          n = smtpd_b64dec(b64, buf, sizeof(buf) - 1);
    int           rc;

    sa->step = SA_NONE;
    if (n < 0) {
        snprintf(reply, rsz, "501 5.5.2 Error: invalid base64 data");
        return SMTPD_AUTH_FAIL;
    }
    end = buf + n;
    u = memchr(buf, '\0', (size_t)n);
    p = u != NULL ? memchr(u + 1, '\0', (size_t)(end - u - 1)) : NULL;
    if (u == NULL || p == NULL || p - u - 1 <= 0 ||
        (size_t)(p - u - 1) >= sizeof(user) ||
        (size_t)(end - p - 1) >= sizeof(pass) ||
        memchr(p + 1, '\0', (size_t)(end - p - 1)) != NULL ||
        (u > buf && ((size_t)(u - buf) != (size_t)(p - u - 1) ||
        memcmp(buf, u + 1, (size_t)(u - buf)) != 0))) {
        OPENSSL_cleanse(buf, sizeof(buf));
        snprintf(reply, rsz, "501 5.5.2 Error: malformed PLAIN response");
        return SMTPD_AUTH_FAIL;
    }
    memcpy(user, u + 1, (size_t)(p - u - 1));
    user[p - u - 1] = '\0';
    memcpy(pass, p + 1, (size_t)(end - p - 1));
    pass[end - p - 1] = '\0';
    OPENSSL_cleanse(buf, sizeof(buf));
    rc = smtpd_auth_try(d, c, sa, user, pass, reply, rsz);
    OPENSSL_cleanse(pass, sizeof(pass));
    return rc;
}


/* smtpd_auth_login_field - a LOGIN answer decoded into out (no NUL). */
static int
smtpd_auth_login_field(struct str b64, char *out, size_t outsz)
{
    long n = smtpd_b64dec(b64, (unsigned char *)out, outsz - 1);

    if (n < 0 || memchr(out, '\0', (size_t)n) != NULL)
        return -1;
    out[n] = '\0';
    return 0;
}


/* --- Dovecot (auth.backend: dovecot; session_dovecot.c) ---------------- */

/* smtpd_auth_dc_temp - no verdict (Dovecot down, slow or unsure): the
 * check is given back, and the client may try again later. */
static int
smtpd_auth_dc_temp(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, const char *why, char *reply, size_t rsz)
{
    sa->step = SA_NONE;
    sa->dcid = 0;
    status_auth_give(d->shared, c->group, smtpd_auth_now_s(d),
        SMTPD_AUTH_WINDOW_S);
    log_ev(LOGL_WARN, "auth_failed", LOG_KVS(SMTPD_AUTH_CLIENT(c),
        LKV_S("method", sa->mech), LKV_S("reason", why)),
        "auth: [%s]:%u temporary failure (%s): %s; session=%s", c->ip,
        (unsigned)c->port, sa->mech, why, c->sid);
    snprintf(reply, rsz, "454 4.7.0 Temporary authentication failure");
    return SMTPD_AUTH_FAIL;
}


/* smtpd_auth_dc_start - AUTH mech [initial]: counted as a check (as a
 * password is, before its hash), then handed to Dovecot as it came. */
static int
smtpd_auth_dc_start(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, struct str mech, struct str init, char *reply,
    size_t rsz)
{
    struct smtpd_dc_req     r;
    struct sockaddr_storage ls;
    socklen_t               llen = sizeof(ls);
    char                    lip[INET6_ADDRSTRLEN] = "", resp[1100];
    unsigned                n;

    if (smtpd_dc_mech(d->dovecot, mech, sa->dcmech, sizeof(sa->dcmech)) ==
        NULL) {
        snprintf(reply, rsz, "504 5.5.4 Error: unsupported authentication "
            "mechanism");
        return SMTPD_AUTH_FAIL;
    }
    sa->mech = sa->dcmech;
    if (init.n >= sizeof(resp) || !sasl_is_base64(init.p, init.n)) {
        snprintf(reply, rsz, "501 5.5.2 Error: invalid base64 data");
        return SMTPD_AUTH_FAIL;
    }
    memcpy(resp, init.p, init.n);   /* "=": an empty response (RFC 4954) */
    resp[init.n == 1 && init.p[0] == '=' ? 0 : init.n] = '\0';
    n = status_auth_take(d->shared, c->group, smtpd_auth_now_s(d),
        SMTPD_AUTH_WINDOW_S, (unsigned)d->cfg->auth_max_failures);
    if (n == 0)
        return smtpd_auth_reply(d, SMTPD_AUTH_CLOSE, reply, rsz);
    sa->n = n;
    util_strlcpy(sa->tried, "", sizeof(sa->tried));
    memset(&r, 0, sizeof(r));
    if (getsockname(c->fd, (struct sockaddr *)&ls, &llen) == 0 &&
        util_sockaddr_ip((struct sockaddr *)&ls, lip, sizeof(lip)) != NULL)
        r.lport = ntohs(ls.ss_family == AF_INET6 ?
            ((struct sockaddr_in6 *)&ls)->sin6_port :
            ((struct sockaddr_in *)&ls)->sin_port);
    r.mech = sa->dcmech;
    r.resp = init.n > 0 ? resp : NULL;
    r.lip = lip;
    r.rip = c->ip;
    r.rport = c->port;
    r.sid = c->sid;
    r.secured = c->tls || c->loopback;
    sa->dcid = smtpd_dc_auth(d->dovecot, &r, c->owner);
    OPENSSL_cleanse(resp, sizeof(resp));
    if (sa->dcid < 0)
        return smtpd_auth_dc_temp(d, c, sa, "dovecot is not connected",
            reply, rsz);
    return SMTPD_AUTH_WAIT;
}


/* smtpd_auth_dc_line - the client's answer to a 334 from Dovecot. */
static int
smtpd_auth_dc_line(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, struct str line, char *reply, size_t rsz)
{
    sa->step = SA_NONE;
    if (!sasl_is_base64(line.p, line.n)) {
        smtpd_dc_cancel(d->dovecot, sa->dcid);
        sa->dcid = 0;
        snprintf(reply, rsz, "501 5.5.2 Error: invalid base64 data");
        return SMTPD_AUTH_FAIL;
    }
    if (smtpd_dc_cont(d->dovecot, sa->dcid, line) < 0)
        return smtpd_auth_dc_temp(d, c, sa, "dovecot's request is gone",
            reply, rsz);
    return SMTPD_AUTH_WAIT;
}


int
smtpd_auth_dc_done(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, int kind, const char *text, char *reply,
    size_t rsz)
{
    switch (kind) {
    case SMTPD_DC_CONT:
        sa->step = SA_DOVECOT;
        snprintf(reply, rsz, "334 %s", text);   /* base64 (sasl.h) */
        return SMTPD_AUTH_CONT;
    case SMTPD_DC_TEMP:
        return smtpd_auth_dc_temp(d, c, sa, text, reply, rsz);
    default:
        break;
    }
    sa->dcid = 0;
    sa->found = kind == SMTPD_DC_OK;
    util_strlcpy(sa->tried, text[0] != '\0' ? text : "(unknown)",
        sizeof(sa->tried));
    return smtpd_auth_done(d, c, sa, kind == SMTPD_DC_OK, reply, rsz);
}


int
smtpd_auth_cmd(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth **sap, struct str arg, char *reply, size_t rsz)
{
    struct smtpd_sauth *sa;
    struct str          mech = arg, init = { arg.p + arg.n, 0 };
    const char         *sp = memchr(arg.p, ' ', arg.n);

    if (d->auth == NULL && d->dovecot == NULL) {
        snprintf(reply, rsz, "502 5.5.1 Error: authentication not enabled");
        return SMTPD_AUTH_FAIL;
    }
    if (!smtpd_auth_offered(d, c)) {
        snprintf(reply, rsz, "538 5.7.11 Encryption required for "
            "requested authentication mechanism");
        return SMTPD_AUTH_FAIL;
    }
    if (!c->esmtp) {
        snprintf(reply, rsz, "503 5.5.1 Error: send EHLO first");
        return SMTPD_AUTH_FAIL;
    }
    if (*sap != NULL && (*sap)->user != NULL) {
        snprintf(reply, rsz, "503 5.5.1 Error: already authenticated");
        return SMTPD_AUTH_FAIL;
    }
    if (c->in_txn) {
        snprintf(reply, rsz, "503 5.5.1 Error: MAIL transaction in "
            "progress");
        return SMTPD_AUTH_FAIL;
    }
    if (smtpd_auth_failures(d, c) >=
        (unsigned)d->cfg->auth_max_failures) {
        return smtpd_auth_reply(d, SMTPD_AUTH_CLOSE, reply, rsz);
    }
    if (sp != NULL) {
        mech.n = (size_t)(sp - arg.p);
        init.p = sp + 1;
        init.n = arg.n - mech.n - 1;
    }
    if (*sap == NULL)
        *sap = xcalloc(1, sizeof(**sap));
    sa = *sap;
    if (d->dovecot != NULL)
        return smtpd_auth_dc_start(d, c, sa, mech, init, reply, rsz);
    if (mech.n == 5 && strncasecmp(mech.p, "PLAIN", 5) == 0) {
        sa->mech = "PLAIN";
        if (init.n == 0) {
            sa->step = SA_PLAIN;
            snprintf(reply, rsz, "334 ");
            return SMTPD_AUTH_CONT;
        }
        if (init.n == 1 && init.p[0] == '=')
            init.n = 0;             /* RFC 4954 4: an empty response */
        return smtpd_auth_plain(d, c, sa, init, reply, rsz);
    }
    if (mech.n == 5 && strncasecmp(mech.p, "LOGIN", 5) == 0) {
        sa->mech = "LOGIN";
        if (init.n > 0) {
            if (smtpd_auth_login_field(init, sa->tried,
                sizeof(sa->tried)) < 0) {
                snprintf(reply, rsz, "501 5.5.2 Error: invalid base64 data");
                return SMTPD_AUTH_FAIL;
            }
            sa->step = SA_LOGIN_PASS;
            snprintf(reply, rsz, "334 UGFzc3dvcmQ6");    /* Password: */
            return SMTPD_AUTH_CONT;
        }
        sa->step = SA_LOGIN_USER;
        snprintf(reply, rsz, "334 VXNlcm5hbWU6");        /* Username: */
        return SMTPD_AUTH_CONT;
    }
    snprintf(reply, rsz, "504 5.5.4 Error: unsupported authentication "
        "mechanism");
    return SMTPD_AUTH_FAIL;
}


int
smtpd_auth_line(struct smtpd *d, const struct smtpd_auth_ctx *c,
    struct smtpd_sauth *sa, struct str line, char *reply, size_t rsz)
{
    char pass[512];
    int  rc;

    if (line.n == 1 && line.p[0] == '*') {
        if (sa->step == SA_DOVECOT) {   /* not a guess: given back */
            smtpd_dc_cancel(d->dovecot, sa->dcid);
            sa->dcid = 0;
            status_auth_give(d->shared, c->group, smtpd_auth_now_s(d),
                SMTPD_AUTH_WINDOW_S);
        }
        sa->step = SA_NONE;
        snprintf(reply, rsz, "501 5.0.0 Error: authentication aborted");
        return SMTPD_AUTH_FAIL;
    }
    switch (sa->step) {
    case SA_DOVECOT:
        return smtpd_auth_dc_line(d, c, sa, line, reply, rsz);
    case SA_PLAIN:
        return smtpd_auth_plain(d, c, sa, line, reply, rsz);
    case SA_LOGIN_USER:
        if (smtpd_auth_login_field(line, sa->tried, sizeof(sa->tried)) < 0)
            break;
        sa->step = SA_LOGIN_PASS;
        snprintf(reply, rsz, "334 UGFzc3dvcmQ6");
        return SMTPD_AUTH_CONT;
    case SA_LOGIN_PASS:
        if (smtpd_auth_login_field(line, pass, sizeof(pass)) < 0)
            break;
        rc = smtpd_auth_try(d, c, sa, sa->tried, pass, reply, rsz);
        OPENSSL_cleanse(pass, sizeof(pass));
        return rc;
    default:
        break;
    }
    sa->step = SA_NONE;
    snprintf(reply, rsz, "501 5.5.2 Error: invalid base64 data");
    return SMTPD_AUTH_FAIL;
}


/* smtpd_auth_sender_ok - submission.sender_login_match: the login
 * "user@domain" may send as exactly that address (any case); the login
 * "user" as user@ any domain.  The null sender is allowed (bounces). */
static int
smtpd_auth_sender_ok(const char *login, const char *sender)
{
    const char *at = strrchr(sender, '@');

    if (sender[0] == '\0')
        return 1;
    if (strchr(login, '@') != NULL)
        return strcasecmp(login, sender) == 0;
    return at != NULL && (size_t)(at - sender) == strlen(login) &&
        strncmp(sender, login, strlen(login)) == 0;
}


int
smtpd_auth_mail(const struct smtpd *d, const struct smtpd_auth_ctx *c,
    const char *sender, char *reply, size_t rsz)
{
    const char *user = smtpd_auth_user(c->sa);

    if (c->role == CONFIG_ROLE_SUBMISSION && user == NULL) {
        if (!c->tls && !(c->loopback && d->cfg->auth_allow_plaintext_loopback))
            snprintf(reply, rsz, "530 5.7.0 Must issue a STARTTLS command "
                "first");
        else
            snprintf(reply, rsz, "530 5.7.0 Authentication required");
        return -1;
    }
    if (user != NULL && !c->sa->trusted &&
        d->cfg->submission_sender_login_match &&
        !smtpd_auth_sender_ok(user, sender)) {
        log_ev(LOGL_INFO, "reject", LOG_KVS(SMTPD_AUTH_CLIENT(c),
            LKV_S("reason", "sender_login_mismatch"), LKV_S("user", user),
            LKV_S("from", sender)),
            "reject: MAIL from [%s]:%u: 553 5.7.1 <%s>: Sender address "
            "not owned by user %s; session=%s", c->ip, (unsigned)c->port,
            sender, user, c->sid);
        snprintf(reply, rsz, "553 5.7.1 <%s>: Sender address not owned by "
            "user %s", sender, user);
        return -1;
    }
    return 0;
}
