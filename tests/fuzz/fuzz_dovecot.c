/*
 * fuzz_dovecot.c - libFuzzer target over the Dovecot auth client
 * (smtpd/session_dovecot.c): what a broken or hostile auth server can send
 * while eight sessions start, continue and cancel exchanges on the one
 * connection, with the connection lost and given again in between.
 *
 * The server end is a socketpair: smtpd_dc_new() asks for a connection
 * (the worker's CHAN_AUTH_CONNECT) and the target hands it one end with
 * smtpd_dc_socket(); the input is a program of ops, one byte each (op %
 * 8), with arguments from the bytes after it:
 *   0 k      session k (of 8) starts an AUTH PLAIN, if it has none
 *   1 k n    session k answers a CONT with n base64 bytes
 *   2 k      session k cancels (as a session that closes)
 *   3 n ...  the server sends the next n bytes
 *   4        one turn of the loop (timers of 0 ms included)
 *   5        the server hangs up
 *   6        a new connection, when the client asked for one
 *   7 n ...  the server sends "OK|CONT|FAIL <a live id>" + the next n bytes
 * Checks: an answer comes only to a session that waits for one, once;
 * never after its cancel, never to a session whose request is gone; a
 * CONT's text is base64 only; an OK's user name is 1..255 bytes without
 * space or control character; the kinds are the four documented.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/ev.h"
#include "common/log.h"
#include "config/config.h"
#include "sasl/sasl.h"
#include "smtpd/smtpd_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SESS 8

enum { FS_IDLE = 0, FS_WAIT, FS_CLIENT };

struct fuzz_sess {
    int  state;
    long id;
};

static struct fuzz_sess fuzz_s[FUZZ_SESS];
static struct ev_loop  *fuzz_loop;
static int              fuzz_log[2] = { -1, -1 };
static int              fuzz_peer = -1;     /* the server's end */
static int              fuzz_asked;
static struct smtpd_dc *fuzz_dc;


static void
fuzz_answer(void *owner, int kind, const char *text)
{
    struct fuzz_sess *s = owner;
    size_t            i, n = strlen(text);

    if (s < fuzz_s || s >= fuzz_s + FUZZ_SESS || s->state != FS_WAIT)
        abort();                    /* not waiting: cancelled or answered */
    switch (kind) {
    case SMTPD_DC_CONT:
        if (!sasl_is_base64(text, n))
            abort();
        s->state = FS_CLIENT;
        return;
    case SMTPD_DC_OK:
        if (n == 0 || n > 255)
            abort();
        for (i = 0; i < n; i++)
            if ((unsigned char)text[i] <= ' ' || text[i] == 0x7f)
                abort();
        break;
    case SMTPD_DC_FAIL:
    case SMTPD_DC_TEMP:
        break;
    default:
        abort();
    }
    s->state = FS_IDLE;
    s->id = 0;
}


static int
fuzz_ask(void *arg)
{
    (void)arg;
    fuzz_asked = 1;
    return 0;
}


static void
fuzz_stop(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    ev_stop(loop);
}


static void
fuzz_turn(void)
{
    struct ev_timer t;
    char            junk[4096];

    ev_timer_init(&t, fuzz_stop, NULL);
    ev_timer_start(fuzz_loop, &t, 0);
    (void)ev_run(fuzz_loop);
    ev_timer_stop(fuzz_loop, &t);
    while (fuzz_peer >= 0 && recv(fuzz_peer, junk, sizeof(junk),
        MSG_DONTWAIT) > 0)
        ;                           /* what the client sent */
    while (recv(fuzz_log[1], junk, sizeof(junk), MSG_DONTWAIT) > 0)
        ;
}


static void
fuzz_connect(void)
{
    int sv[2];

    if (!fuzz_asked)
        return;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
        sv) < 0)
        abort();
    fuzz_asked = 0;
    if (fuzz_peer >= 0)
        close(fuzz_peer);
    fuzz_peer = sv[1];
    smtpd_dc_socket(fuzz_dc, sv[0], NULL);
}


static void
fuzz_send(const char *p, size_t n)
{
    if (fuzz_peer >= 0 && n > 0)
        (void)send(fuzz_peer, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}


static void
fuzz_reset(const struct config *cfg)
{
    static const char hello[] = "VERSION\t1\t2\nMECH\tPLAIN\tplaintext\n"
        "MECH\tLOGIN\tplaintext\nSPID\t1\nCUID\t1\nCOOKIE\t00\nDONE\n";
    unsigned i;

    smtpd_dc_free(fuzz_dc);
    if (fuzz_peer >= 0)
        close(fuzz_peer);
    fuzz_peer = -1;
    fuzz_asked = 0;
    for (i = 0; i < FUZZ_SESS; i++)
        fuzz_s[i] = (struct fuzz_sess){ FS_IDLE, 0 };
    fuzz_dc = smtpd_dc_new(fuzz_loop, cfg, fuzz_answer, fuzz_ask, NULL);
    if (fuzz_dc == NULL)
        abort();
    fuzz_turn();                    /* its first try: it asks */
    fuzz_connect();
    /* the usual handshake first: most inputs then test the requests */
    fuzz_send(hello, strlen(hello));
    fuzz_turn();
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct config cfg;
    const struct smtpd_dc_req req = { "PLAIN", "AGZ1enoAc2VjcmV0",
        "127.0.0.1", "127.0.0.2", "0123456789abcdef", 25, 4321, 1 };
    static const char *const verbs[] = { "OK", "CONT", "FAIL" };
    size_t i = 0, n;
    char   line[600];
    int    k, len;

    if (fuzz_loop == NULL) {
        if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, fuzz_log) < 0 ||
            (fuzz_loop = ev_new()) == NULL)
            abort();
        log_open("fuzz", fuzz_log[0], LOGL_DEBUG);
        cfg.auth_dovecot_socket = (char *)"/run/fuzz/auth-client";
        cfg.auth_dovecot_timeout_ms = 1;    /* timeouts happen too */
    }
    fuzz_reset(&cfg);
    while (i < size) {
        uint8_t op = data[i++] % 8;
        uint8_t a = i < size ? data[i] : 0;

        switch (op) {
        case 0:
            k = a % FUZZ_SESS;
            i++;
            if (fuzz_s[k].state != FS_IDLE)
                break;
            fuzz_s[k].id = smtpd_dc_auth(fuzz_dc, &req, &fuzz_s[k]);
            if (fuzz_s[k].id > 0)
                fuzz_s[k].state = FS_WAIT;
            else if (fuzz_s[k].id != -1)
                abort();
            break;
        case 1:
            k = a % FUZZ_SESS;
            i++;
            n = i < size ? data[i++] % 64 : 0;
            if (fuzz_s[k].state != FS_CLIENT)
                break;
            memset(line, 'Q', n);
            fuzz_s[k].state = FS_WAIT;      /* before: an answer may come */
            if (smtpd_dc_cont(fuzz_dc, fuzz_s[k].id,
                (struct str){ line, n }) < 0) {
                fuzz_s[k].state = FS_IDLE;  /* gone: the session says 454 */
                fuzz_s[k].id = 0;
            }
            break;
        case 2:
            k = a % FUZZ_SESS;
            i++;
            smtpd_dc_cancel(fuzz_dc, fuzz_s[k].id);
            fuzz_s[k] = (struct fuzz_sess){ FS_IDLE, 0 };
            break;
        case 3:
            n = a;
            i++;
            n = n < size - i ? n : size - i;
            fuzz_send((const char *)data + i, n);
            i += n;
            break;
        case 4:
            fuzz_turn();
            break;
        case 5:
            if (fuzz_peer >= 0)
                close(fuzz_peer);
            fuzz_peer = -1;
            fuzz_turn();
            break;
        case 6:
            fuzz_connect();
            fuzz_turn();
            break;
        default:
            k = a % FUZZ_SESS;
            i++;
            n = i < size ? data[i++] % 128 : 0;
            n = n < size - i ? n : size - i;
            len = snprintf(line, sizeof(line), "%s\t%ld", verbs[a % 3],
                fuzz_s[k].id > 0 ? fuzz_s[k].id : 1);
            memcpy(line + len, data + i, n);
            line[len + n] = '\n';
            fuzz_send(line, (size_t)len + n + 1);
            i += n;
            break;
        }
    }
    fuzz_turn();
    return 0;
}
