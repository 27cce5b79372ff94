/*
 * tls_probe.c - the live part of mtactl tls check: one SMTP connection to
 * one MX host, STARTTLS, the handshake set up as the delivery sets it up
 * (tls_client_ctx, tls_client_prepare) and judged as it judges it
 * (tls_client_verdict), then QUIT.  Blocking, with the delivery's connect
 * timeout on every read and write, and PROBE_STEPS of it for the whole
 * dialogue before the handshake: a server sending a byte now and then
 * (or an endless "250-" reply) must not hold an operator's tool.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "common/util.h"
#include "config/config.h"
#include "delivery/mta.h"
#include "tlspol/tlspol.h"
#include "mtactl/queue_int.h"
#include "mtactl/tls_check_int.h"

#define PROBE_LINE_MAX  1024
#define PROBE_TIMEOUT_MAX_MS 30000
#define PROBE_STEPS     4           /* greeting, EHLO, STARTTLS, QUIT */

struct probe {
    int   fd;
    char  last[PROBE_LINE_MAX];     /* the reply's last line */
    int   starttls;                 /* offered in the EHLO reply */
    uint64_t deadline;              /* util_now_ms() of the dialogue's end */
};


static void
probe_say(const char *what, const char *text)
{
    printf("  %-10s ", what);
    queue_put_text(text);
    putchar('\n');
}


/* probe_line - one line of the server's, read a byte at a time: nothing
 * past it may be taken from the socket (the TLS handshake follows). */
static int
probe_line(struct probe *p, char *buf, size_t sz)
{
    size_t  n = 0;
    char    c;
    ssize_t got;

    for (;;) {
        if (util_now_ms() >= p->deadline) {
            util_strlcpy(p->last, "timed out", sizeof(p->last));
            return -1;
        }
        got = read(p->fd, &c, 1);
        if (got == -1 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        if (c == '\n')
            break;
        if (c != '\r' && n + 1 < sz)
            buf[n++] = c;
    }
    buf[n] = '\0';
    return 0;
}


/* probe_reply - a whole (multi-line) reply; its code, or -1. */
static int
probe_reply(struct probe *p)
{
    char line[PROBE_LINE_MAX];

    for (;;) {
        if (probe_line(p, line, sizeof(line)) != 0)
            return -1;
        if (strlen(line) < 3)
            return -1;
        if (strncasecmp(line + 3 + (line[3] != '\0'), "STARTTLS", 8) == 0)
            p->starttls = 1;
        if (line[3] != '-') {
            util_strlcpy(p->last, line, sizeof(p->last));
            return atoi(line);
        }
    }
}


static int
probe_send(struct probe *p, const char *cmd)
{
    size_t n = strlen(cmd);

    return write(p->fd, cmd, n) == (ssize_t)n ? 0 : -1;
}


/* probe_cert - the peer certificate's subject and DNS names. */
static void
probe_cert(SSL *ssl)
{
    X509                  *c = SSL_get0_peer_certificate(ssl);
    GENERAL_NAMES         *san;
    char                   buf[512];
    int                    i;

    if (c == NULL) {
        probe_say("cert:", "none");
        return;
    }
    X509_NAME_oneline(X509_get_subject_name(c), buf, sizeof(buf));
    probe_say("subject:", buf);
    X509_NAME_oneline(X509_get_issuer_name(c), buf, sizeof(buf));
    probe_say("issuer:", buf);
    san = X509_get_ext_d2i(c, NID_subject_alt_name, NULL, NULL);
    for (i = 0; san != NULL && i < sk_GENERAL_NAME_num(san); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(san, i);

        if (g->type != GEN_DNS)
            continue;
        snprintf(buf, sizeof(buf), "DNS:%.*s",
            ASN1_STRING_length(g->d.dNSName) > 400 ? 400 :
            ASN1_STRING_length(g->d.dNSName),
            (const char *)ASN1_STRING_get0_data(g->d.dNSName));
        probe_say("name:", buf);
    }
    GENERAL_NAMES_free(san);
}


/* probe_tls - the handshake on p->fd for hp->tls; 0 passes. */
static int
probe_tls(struct probe *p, const struct config *cfg,
    const struct mta_hop *hp)
{
    struct tls_client_opts o;
    struct tls_outcome     out;
    SSL_CTX               *ctx;
    SSL                   *ssl;
    char                   err[512], line[600];
    int                    rc = -1;

    memset(&o, 0, sizeof(o));
    o.ca_file = cfg->tls_ca_file;
    if ((ctx = tls_client_ctx(&o, err, sizeof(err))) == NULL) {
        probe_say("tls:", err);
        return -1;
    }
    memset(&out, 0, sizeof(out));
    if ((ssl = SSL_new(ctx)) == NULL || SSL_set_fd(ssl, p->fd) != 1 ||
        tls_client_prepare(ssl, &hp->tls, err, sizeof(err)) != 0) {
        probe_say("tls:", ssl == NULL ? "SSL_new failed" : err);
        goto done;
    }
    ERR_clear_error();
    if (SSL_connect(ssl) != 1) {
        ERR_error_string_n(ERR_peek_last_error(), err, sizeof(err));
        snprintf(line, sizeof(line), "handshake failed: %s", err);
        probe_say("tls:", line);
        goto done;
    }
    rc = tls_client_verdict(ssl, &hp->tls, &out);
    (void)tls_outcome_format(&out, line, sizeof(line));
    probe_say("tls:", line);
    probe_cert(ssl);
    if (rc != 0) {
        tls_client_why(ssl, err, sizeof(err));
        snprintf(line, sizeof(line), "fails %s: %s", tls_level_name(
            hp->tls.level), err);
        probe_say("verdict:", line);
    } else
        probe_say("verdict:", "passes");
    (void)SSL_write(ssl, "QUIT\r\n", 6);
    (void)SSL_shutdown(ssl);
done:
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    return rc;
}


int
tc_probe(const struct config *cfg, const struct mta_hop *hp, int would_try)
{
    struct probe   p;
    struct timeval tv;
    uint64_t       ms = cfg->connect_timeout_ms;
    char           cmd[300];
    int            rc = -1, required = would_try &&
                       tls_req_mandatory(&hp->tls);

    memset(&p, 0, sizeof(p));
    if (ms == 0 || ms > PROBE_TIMEOUT_MAX_MS)
        ms = PROBE_TIMEOUT_MAX_MS;
    p.deadline = util_now_ms() + PROBE_STEPS * ms;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(ms % 1000 * 1000);
    p.fd = socket(hp->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (p.fd < 0 || setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
        sizeof(tv)) != 0 || setsockopt(p.fd, SOL_SOCKET, SO_SNDTIMEO, &tv,
        sizeof(tv)) != 0 ||
        connect(p.fd, (const struct sockaddr *)&hp->ss, hp->len) != 0) {
        probe_say("probe:", strerror(errno));
        goto out;
    }
    if (probe_reply(&p) != 220) {
        probe_say("probe:", p.last[0] ? p.last : "no 220 greeting");
        goto out;
    }
    probe_say("banner:", p.last);
    snprintf(cmd, sizeof(cmd), "EHLO %s\r\n", cfg->hostname);
    if (probe_send(&p, cmd) != 0 || probe_reply(&p) != 250) {
        probe_say("probe:", p.last[0] ? p.last : "EHLO failed");
        goto out;
    }
    if (!p.starttls) {
        probe_say("starttls:", required ? "not offered: mtad defers" :
            "not offered: mtad sends in plaintext");
        rc = required ? -1 : 0;
        (void)probe_send(&p, "QUIT\r\n");
        goto out;
    }
    if (probe_send(&p, "STARTTLS\r\n") != 0 || probe_reply(&p) != 220) {
        probe_say("starttls:", p.last[0] ? p.last : "no reply");
        rc = required ? -1 : 0;
        goto out;
    }
    rc = probe_tls(&p, cfg, hp);
    if (hp->tls.level == TLS_NONE && would_try)
        probe_say("note:", "level none: mtad itself does not use STARTTLS "
            "here");
    if (rc != 0 && !required)
        rc = 0;                 /* may: mtad would retry in plaintext */
out:
    if (p.fd >= 0)
        close(p.fd);
    return rc;
}
