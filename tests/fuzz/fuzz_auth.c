/*
 * fuzz_auth.c - libFuzzer target over SMTP AUTH (smtpd/session_auth.c):
 * the AUTH command line, the base64 decoder, the SASL PLAIN message
 * ([authzid] NUL authcid NUL passwd), the LOGIN exchange, the failure
 * count and submission.sender_login_match on MAIL FROM.  Everything a
 * client sends before it is authenticated.
 *
 * Input: byte 0 is the session (bit 0 TLS, 1 loopback, 2 EHLO given,
 * 3 in a transaction, 4 submission role, 5 sender_login_match, 6 AUTH
 * without TLS on loopback, 7 JSON log records); byte 1 picks
 * auth.failure_delay (0 or 1 s: the held reply) and auth.max_failures
 * (1..4); the rest is client lines (LF-ended, a CR before it dropped, as
 * buf_getline() gives them).  While smtpd_auth_waiting() a line goes to
 * smtpd_auth_line(); else "AUTH ..." to smtpd_auth_cmd() and "MAIL ..."
 * through smtp_parse_mail() to smtpd_auth_mail() (as smtp_parse_verb()
 * splits them); other lines are skipped.
 *
 * The password file (written once to /tmp) holds "fuzz" and
 * "u@example.org".  crypt_rn() is replaced here by a stub (a real hash
 * costs milliseconds per try): it matches when the password is "secret",
 * and remembers whether it did, so the target can check that AUTH never
 * succeeds without it.  Checks run on the real hashing pool
 * (session_hash.c): a WAIT answer is waited for on its eventfd and its
 * result handed to smtpd_auth_done(), as the worker's loop does.  The
 * failure count lives in a status page (as the node's), cleared for each
 * input, so runs are independent.
 *
 * Checks: return codes are the six documented ones; every reply is
 * "ddd text" without a control byte, 235 exactly on OK, 334 on CONT, 421
 * on CLOSE, 4xx/5xx on FAIL; HOLD comes only with a delay and its
 * release gives FAIL or CLOSE; an authenticated user is one of the file's
 * and came from a stub match; every log record is one line without a
 * control byte.  The password file is loaded afresh for each input (the
 * failure table is per worker), so runs are independent.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <crypt.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/status.h"
#include "config/config.h"
#include "smtp/smtp.h"
#include "smtpd/smtpd_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char           fuzz_path[64];
static int            fuzz_log[2] = { -1, -1 };
static struct ev_loop *fuzz_loop;
static int            fuzz_matched;     /* the stub saw "secret" (this line) */
static struct smtpd_hash  *fuzz_hash;
static struct status_page *fuzz_page;

/* crypt_rn - the stub: the setting itself (a match) for "secret", else a
 * failure token, as crypt(3) gives for a wrong setting.  It runs on a
 * hashing thread while the target waits for it on the eventfd. */
char *
crypt_rn(const char *phrase, const char *setting, void *data, int size)
{
    struct crypt_data *cd = data;

    if (size < (int)sizeof(*cd))
        return NULL;
    if (strcmp(phrase, "secret") == 0) {
        fuzz_matched = 1;
        snprintf(cd->output, sizeof(cd->output), "%s", setting);
    } else {
        snprintf(cd->output, sizeof(cd->output), "*0");
    }
    return cd->output;
}


static void
fuzz_cleanup(void)
{
    if (fuzz_path[0] != '\0')
        unlink(fuzz_path);
}


static void
fuzz_init(void)
{
    static const char users[] = "# fuzz\nfuzz:$5$fuzz\r\n\n"
        "u@example.org:$6$x$y\n";
    FILE *fp;
    int   fd;

    snprintf(fuzz_path, sizeof(fuzz_path), "/tmp/fuzz-auth-XXXXXX");
    if ((fd = mkstemp(fuzz_path)) < 0 || (fp = fdopen(fd, "w")) == NULL ||
        fwrite(users, 1, sizeof(users) - 1, fp) != sizeof(users) - 1 ||
        fclose(fp) != 0)
        abort();
    atexit(fuzz_cleanup);
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fuzz_log) < 0 ||
        (fuzz_loop = ev_new()) == NULL)
        abort();
    log_open("fuzz", fuzz_log[0], LOGL_DEBUG);
    if ((fuzz_hash = smtpd_hash_new()) == NULL ||
        (fuzz_page = status_create()) == NULL)
        abort();
}


/* fuzz_wait - the answer of a check that went to the hashing pool: what
 * the worker's loop does when the eventfd is readable. */
static int
fuzz_wait(struct smtpd *d, struct smtpd_auth_ctx *c, struct smtpd_sauth *sa,
    char *reply, size_t rsz)
{
    struct pollfd pfd = { smtpd_hash_fd(fuzz_hash), POLLIN, 0 };
    void         *owner = NULL;
    int           match = 0, got;

    for (;;) {
        if (poll(&pfd, 1, 10000) != 1)
            abort();                    /* a check that never ends */
        if ((got = smtpd_hash_reap(fuzz_hash, &owner, &match)) > 0)
            break;
    }
    if (owner != c->owner)
        abort();
    return smtpd_auth_done(d, c, sa, match, reply, rsz);
}


/* Every record the code under test logged: one line, no control byte. */
static void
fuzz_drain_log(void)
{
    char    rec[LOG_RECORD_MAX + 16];
    ssize_t n, i;

    while ((n = recv(fuzz_log[1], rec, sizeof(rec), MSG_DONTWAIT)) > 0) {
        if (n > LOG_RECORD_MAX || rec[n - 1] != '\n')
            abort();
        for (i = 0; i < n - 1; i++)
            if ((unsigned char)rec[i] < 0x20 || rec[i] == 0x7f)
                abort();
    }
    if (n < 0 && errno != EAGAIN)
        abort();
}


static void
fuzz_reply(int rc, const char *r, size_t rsz)
{
    size_t n = strnlen(r, rsz), i;

    if (n >= rsz || n < 4 || r[0] < '2' || r[0] > '5' || r[1] < '0' ||
        r[1] > '9' || r[2] < '0' || r[2] > '9' || r[3] != ' ')
        abort();
    for (i = 0; i < n; i++)
        if ((unsigned char)r[i] < 0x20 || r[i] == 0x7f)
            abort();
    if ((rc == SMTPD_AUTH_OK) != (strncmp(r, "235 ", 4) == 0) ||
        (rc == SMTPD_AUTH_CONT) != (strncmp(r, "334 ", 4) == 0) ||
        (rc == SMTPD_AUTH_CLOSE) != (strncmp(r, "421 ", 4) == 0) ||
        (rc == SMTPD_AUTH_FAIL && r[0] != '4' && r[0] != '5'))
        abort();
}


/* One answer of smtpd_auth_cmd/line: a held one is released at once.
 * 1 on CLOSE (421: the session ends). */
static int
fuzz_answer(struct smtpd *d, struct smtpd_sauth *sa, int rc, char *reply,
    size_t rsz)
{
    const char *user;

    if (rc == SMTPD_AUTH_WAIT)
        abort();                        /* fuzz_line waits for it first */
    if (rc == SMTPD_AUTH_HOLD) {
        if (d->cfg->auth_failure_delay_ms == 0 ||
            smtpd_auth_hold_ms(sa) == 0)
            abort();
        reply[0] = '\0';
        rc = smtpd_auth_release(d, sa, reply, rsz);
        if (rc != SMTPD_AUTH_FAIL && rc != SMTPD_AUTH_CLOSE)
            abort();
    } else if (rc != SMTPD_AUTH_OK && rc != SMTPD_AUTH_CONT &&
        rc != SMTPD_AUTH_FAIL && rc != SMTPD_AUTH_CLOSE) {
        abort();
    }
    fuzz_reply(rc, reply, rsz);
    user = smtpd_auth_user(sa);
    if (rc == SMTPD_AUTH_OK && (user == NULL || !fuzz_matched ||
        (strcmp(user, "fuzz") != 0 && strcmp(user, "u@example.org") != 0)))
        abort();
    if (user != NULL && smtpd_auth_waiting(sa))
        abort();                        /* authenticated, yet mid-exchange */
    return rc == SMTPD_AUTH_CLOSE;
}


/* fuzz_line - one client line; 1 when the session would be closed. */
static int
fuzz_line(struct smtpd *d, struct smtpd_auth_ctx *c, struct smtpd_sauth **sap,
    const char *p, size_t n)
{
    struct str       line = { p, n }, arg;
    struct smtp_mail m;
    const char      *why;
    char             reply[SMTP_ADDR_MAX + 300];
    int              rc;

    reply[0] = '\0';
    fuzz_matched = 0;
    c->sa = *sap;
    if (smtpd_auth_waiting(*sap)) {
        rc = smtpd_auth_line(d, c, *sap, line, reply, sizeof(reply));
        if (rc == SMTPD_AUTH_WAIT)
            rc = fuzz_wait(d, c, *sap, reply, sizeof(reply));
        return fuzz_answer(d, *sap, rc, reply, sizeof(reply));
    }
    switch (smtp_parse_verb(line, &arg)) {
    case SMTP_AUTH:
        rc = smtpd_auth_cmd(d, c, sap, arg, reply, sizeof(reply));
        if (rc == SMTPD_AUTH_WAIT)
            rc = fuzz_wait(d, c, *sap, reply, sizeof(reply));
        return fuzz_answer(d, *sap, rc, reply, sizeof(reply));
    case SMTP_MAIL:
        why = NULL;
        if (smtp_parse_mail(arg, &m, &why) == 0 &&
            smtpd_auth_mail(d, c, m.addr, reply, sizeof(reply)) < 0)
            fuzz_reply(SMTPD_AUTH_FAIL, reply, sizeof(reply));
        break;
    default:
        break;
    }
    return 0;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct config cfg;
    struct smtpd         d;
    struct smtpd_auth_ctx c;
    struct smtpd_sauth  *sa = NULL;
    struct sockaddr_in   peer;
    const char          *p, *end, *nl;
    char                *copy;
    size_t               n;

    if (size < 2)
        return 0;
    if (fuzz_loop == NULL)
        fuzz_init();
    cfg.hostname = (char *)"mx.example";
    cfg.submission_sender_login_match = (data[0] & 0x20) != 0;
    cfg.auth_allow_plaintext_loopback = (data[0] & 0x40) != 0;
    cfg.auth_failure_delay_ms = (data[1] & 1) ? 1000 : 0;
    cfg.auth_failure_delay_max_ms = 8000;
    cfg.auth_max_failures = 1 + (data[1] >> 1) % 4;
    log_set_format(data[0] & 0x80 ? LOG_FORMAT_JSON : LOG_FORMAT_TEXT);
    memset(&d, 0, sizeof(d));
    d.loop = fuzz_loop;
    d.cfg = &cfg;
    d.hash = fuzz_hash;
    d.shared = fuzz_page;
    memset(fuzz_page->authtab, 0, sizeof(fuzz_page->authtab));
    if ((d.auth = smtpd_auth_load(fuzz_path, 0, 0)) == NULL)
        abort();
    memset(&c, 0, sizeof(c));
    c.ip = "192.0.2.1";
    c.port = 2525;
    c.sid = "0123456789ab";
    memset(&peer, 0, sizeof(peer));
    peer.sin_family = AF_INET;
    peer.sin_addr.s_addr = htonl(0xc0000201);      /* 192.0.2.1 */
    c.group = (const struct sockaddr *)&peer;
    c.owner = &c;
    c.tls = data[0] & 1;
    c.loopback = (data[0] >> 1) & 1;
    c.esmtp = (data[0] >> 2) & 1;
    c.in_txn = (data[0] >> 3) & 1;
    c.role = data[0] & 0x10 ? CONFIG_ROLE_SUBMISSION : CONFIG_ROLE_MX;
    /* an exact copy: ASan sees a read past the input */
    copy = malloc(size - 2 ? size - 2 : 1);
    if (copy == NULL)
        abort();
    memcpy(copy, data + 2, size - 2);
    for (p = copy, end = copy + size - 2; p < end; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            break;                      /* a line without its end waits */
        n = (size_t)(nl - p);
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n > SMTP_LINE_MAX)
            n = SMTP_LINE_MAX;
        if (fuzz_line(&d, &c, &sa, p, n))
            break;
    }
    free(copy);
    smtpd_auth_sess_free(sa);
    smtpd_auth_free(d.auth);
    fuzz_drain_log();
    return 0;
}
