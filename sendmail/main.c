/*
 * mtad-sendmail - the sendmail(8) command line for programs and cron:
 * reads a message on stdin and submits it by SMTP to the local mtad.
 *
 * USAGE     mtad-sendmail [-t] [-i] [-oi] [-f SENDER] [-F NAME] [-C FILE]
 *                         [-S HOST:PORT] [--] [RECIPIENT...]
 *           -t   recipients also from To:, Cc: and Bcc: (Bcc: removed)
 *           -i, -oi  a line with a single "." does not end the message
 *           -f   envelope sender (default: login name @ server.hostname)
 *           -F   full name for the From: header added when there is none
 *           -C   relay.yaml (default /etc/mtad/relay.yaml)
 *           -S   mtad's address (default: the first server.listen entry on
 *                a loopback address without role: submission or implicit
 *                TLS); without -C the configuration is then not read
 *           Other -o options and -B/-b/-O/-N/-R/-V/-X are accepted and
 *           ignored, as Postfix's sendmail does for compatibility.
 * CONTRACT  Exit 0 once mtad answered "250 queued".  EX_TEMPFAIL (75) when
 *           mtad cannot be reached or answers 4xx: the caller keeps the
 *           message and retries (cron mails the output).  EX_NOUSER (67)
 *           when a recipient is refused, EX_UNAVAILABLE (69) on other 5xx,
 *           EX_USAGE (64), EX_CONFIG (78), EX_DATAERR (65) for a message
 *           over limits.max_message_size or, with -t, an address in its
 *           header that could not be sent as it is (scan.h).  Every
 *           error is one line on stderr; the server's text is escaped.
 *           Relaying to other domains needs the loopback address in
 *           relay.allow_networks (the default includes 127.0.0.0/8).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sysexits.h>
#include <unistd.h>

#include "common/util.h"
#include "config/config.h"
#include "sendmail/scan.h"

#define SM_DEFAULT_CONFIG  "/etc/mtad/relay.yaml"
#define SM_TIMEOUT_S       300      /* per reply, like RFC 5321 4.5.3.2 */

struct sm {
    int     fd;
    FILE   *in;                     /* the socket, buffered */
    char    reply[4096];            /* last reply, lines joined */
    struct sm_rcpts rcpt;
};

static void
sm_usage(void)
{
    fprintf(stderr, "usage: mtad-sendmail [-t] [-i] [-oi] [-f SENDER] "
        "[-F NAME] [-C FILE] [-S HOST:PORT] [--] [RECIPIENT...]\n");
}


static int
sm_has_header(const char *msg, size_t len, const char *name)
{
    size_t i = 0, n = strlen(name);

    while (i < len && msg[i] != '\n' && msg[i] != '\r') {
        if (len - i > n && strncasecmp(msg + i, name, n) == 0)
            return 1;
        while (i < len && msg[i] != '\n')
            i++;
        i++;
    }
    return 0;
}


/* sm_reply - read one reply; its code, or -1 (the connection broke). */
static int
sm_reply(struct sm *s)
{
    char   line[1024], esc[UTIL_ESC_ROOM(1024)];
    size_t off = 0;

    s->reply[0] = '\0';
    for (;;) {
        if (fgets(line, sizeof(line), s->in) == NULL)
            return -1;
        line[strcspn(line, "\r\n")] = '\0';
        util_escape(esc, sizeof(esc), line, strlen(line), 0, NULL);
        if (off < sizeof(s->reply) - 1)
            off += (size_t)snprintf(s->reply + off, sizeof(s->reply) - off,
                "%s%s", off ? " / " : "", esc);
        if (off >= sizeof(s->reply))
            off = sizeof(s->reply) - 1;
        if (strlen(line) < 4 || line[3] != '-')
            break;
    }
    if (strlen(s->reply) < 3 || s->reply[0] < '2' || s->reply[0] > '5')
        return -1;
    return atoi(s->reply);
}


static int
sm_cmd(struct sm *s, const char *fmt, const char *arg)
{
    char buf[2048];
    int  n = snprintf(buf, sizeof(buf), fmt, arg);

    if (n < 0 || (size_t)n >= sizeof(buf) ||
        util_write_all(s->fd, buf, (size_t)n) != 0)
        return -1;
    return sm_reply(s);
}


/* sm_fail - exit code for reply code rc after cmd. */
static int
sm_fail(struct sm *s, const char *what, int rc)
{
    if (rc < 0) {
        fprintf(stderr, "mtad-sendmail: connection to mtad lost during "
            "%s\n", what);
        return EX_TEMPFAIL;
    }
    fprintf(stderr, "mtad-sendmail: %s refused: %s\n", what, s->reply);
    if (rc >= 400 && rc < 500)
        return EX_TEMPFAIL;
    return strcmp(what, "RCPT") == 0 ? EX_NOUSER : EX_UNAVAILABLE;
}


/* sm_clean - no control characters (NULL is clean). */
static int
sm_clean(const char *v)
{
    for (; v != NULL && *v != '\0'; v++)
        if ((unsigned char)*v < ' ' || *v == 0x7f)
            return 0;
    return 1;
}


/* sm_sender - -f as MAIL FROM takes it: "" or "<>" is the null sender,
 * "<a@b>" loses its brackets; else it must pass sm_rcpt_ok.  NULL when
 * it does not. */
static const char *
sm_sender(const char *f, char *out, size_t outsz)
{
    size_t n = strlen(f);

    if (n >= 2 && f[0] == '<' && f[n - 1] == '>') {
        f++;
        n -= 2;
    }
    if (n >= outsz)
        return NULL;
    memcpy(out, f, n);
    out[n] = '\0';
    return n == 0 || sm_rcpt_ok(out) ? out : NULL;
}


/* sm_pick - the listener to use. */
static const struct config_listen *
sm_pick(const struct config *cfg)
{
    size_t i;

    for (i = 0; i < cfg->nlisten; i++) {
        const struct config_listen *l = &cfg->listen[i];
        const struct sockaddr *sa = (const struct sockaddr *)&l->addr;
        int loop = 0;

        if (sa->sa_family == AF_INET)
            loop = (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr)
                >> 24) == 127;
        else if (sa->sa_family == AF_INET6)
            loop = IN6_IS_ADDR_LOOPBACK(
                &((const struct sockaddr_in6 *)sa)->sin6_addr);
        if (loop && l->role == CONFIG_ROLE_MX && !l->tls_implicit &&
            l->proxy == 0)
            return l;
    }
    return NULL;
}


/* sm_read_msg - stdin, LF or CRLF lines; without -i a "." line ends it. */
static char *
sm_read_msg(int dot_ends, size_t max, size_t *len, int *too_big)
{
    char   *buf = NULL, *line = NULL;
    size_t  cap = 0, n = 0, lcap = 0;
    ssize_t got;

    *too_big = 0;
    while ((got = getline(&line, &lcap, stdin)) > 0) {
        size_t l = (size_t)got;

        /* by length: a "." line followed by a NUL is not the end */
        if (dot_ends && line[0] == '.' && (l == 1 ||
            (l == 2 && line[1] == '\n') ||
            (l == 3 && line[1] == '\r' && line[2] == '\n')))
            break;
        if (n + l + 2 > max) {
            *too_big = 1;
            break;
        }
        if (n + l + 2 > cap) {
            cap = (n + l + 2) * 2;
            buf = xrealloc(buf, cap);
        }
        memcpy(buf + n, line, l);
        n += l;
    }
    free(line);
    if (buf == NULL)
        buf = xmalloc(1);
    *len = n;
    return buf;
}


/* sm_send_data - the message with CRLF line ends and dot-stuffing. */
static int
sm_send_data(struct sm *s, const char *msg, size_t len)
{
    char  *out = xmalloc(2 * len + 8);
    size_t i, o = 0;
    int    bol = 1, rc;

    for (i = 0; i < len; i++) {
        if (bol && msg[i] == '.')
            out[o++] = '.';
        bol = 0;
        if (msg[i] == '\n') {
            if (i == 0 || msg[i - 1] != '\r')
                out[o++] = '\r';
            bol = 1;
        }
        out[o++] = msg[i];
    }
    if (o > 0 && !bol) {
        out[o++] = '\r';
        out[o++] = '\n';
    }
    memcpy(out + o, ".\r\n", 3);
    o += 3;
    rc = util_write_all(s->fd, out, o);
    free(out);
    return rc;
}


int
main(int argc, char **argv)
{
    const char *cfgpath = SM_DEFAULT_CONFIG, *server = NULL;
    const char *from = NULL, *fullname = NULL, *hostname = "localhost";
    char        host[256];
    size_t      max = 50 * 1024 * 1024;     /* limits.max_message_size */
    int         cfg_given = 0;
    int         opt_t = 0, dot_ends = 1, too_big, rc, ch;
    struct config *cfg;
    const struct config_listen *l;
    struct sockaddr_storage ss;
    socklen_t   sslen;
    struct timeval tv = { SM_TIMEOUT_S, 0 };
    char        err[8192], who[300], sender[1024], *msg, *hdr;
    size_t      len, i;
    struct sm   s;

    memset(&s, 0, sizeof(s));
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("mtad-sendmail %s\n", MTAD_VERSION);
        return 0;
    }
    while ((ch = getopt(argc, argv, "tif:F:C:S:o:B:b:O:N:R:V:X:")) != -1) {
        switch (ch) {
        case 't': opt_t = 1; break;
        case 'i': dot_ends = 0; break;
        case 'o': if (strcmp(optarg, "i") == 0) dot_ends = 0; break;
        case 'f': from = optarg; break;
        case 'F': fullname = optarg; break;
        case 'C': cfgpath = optarg; cfg_given = 1; break;
        case 'S': server = optarg; break;
        case 'B': case 'b': case 'O': case 'N': case 'R': case 'V': case 'X':
            break;
        default:
            sm_usage();
            return EX_USAGE;
        }
    }
    for (i = (size_t)optind; i < (size_t)argc; i++)
        sm_rcpt_add(&s.rcpt, argv[i], strlen(argv[i]));
    if (!sm_clean(from) || !sm_clean(fullname)) {
        fprintf(stderr, "mtad-sendmail: -f or -F with a control character\n");
        return EX_USAGE;
    }
    if (from != NULL && (from = sm_sender(from, sender, sizeof(sender))) ==
        NULL) {
        /* it goes into MAIL FROM:<...>: a blank or a '>' would add
         * parameters of the caller's choosing (SMTPUTF8, RET, ENVID) */
        fprintf(stderr, "mtad-sendmail: -f: bad sender address\n");
        return EX_USAGE;
    }
    for (i = 0; i < s.rcpt.n; i++)
        if (!sm_rcpt_ok(s.rcpt.v[i])) {
            fprintf(stderr, "mtad-sendmail: bad recipient address\n");
            return EX_USAGE;
        }
    /* With -S the configuration is not read: a user who may not read
     * relay.yaml (or the key files its check opens) can still send. */
    cfg = server == NULL || cfg_given ?
        config_load(cfgpath, err, sizeof(err)) : NULL;
    if (cfg == NULL && (server == NULL || cfg_given)) {
        fprintf(stderr, "mtad-sendmail: %s: %s\n", cfgpath, err);
        return EX_CONFIG;
    }
    if (cfg != NULL) {
        hostname = cfg->hostname;
        max = cfg->max_message_size;
    } else if (gethostname(host, sizeof(host) - 1) == 0) {
        host[sizeof(host) - 1] = '\0';
        hostname = host;
    }
    if (server != NULL) {
        if (util_parse_hostport(server, &ss, &sslen) != 0) {
            fprintf(stderr, "mtad-sendmail: -S %s: expected host:port\n",
                server);
            return EX_USAGE;
        }
    } else if ((l = sm_pick(cfg)) != NULL) {
        ss = l->addr;
        sslen = l->addrlen;
    } else {
        fprintf(stderr, "mtad-sendmail: %s: no server.listen entry on a "
            "loopback address with role mx (give -S HOST:PORT)\n", cfgpath);
        return EX_CONFIG;
    }
    if (from == NULL) {
        struct passwd *pw = getpwuid(getuid());

        snprintf(sender, sizeof(sender), "%s@%s", pw ? pw->pw_name : "nobody",
            hostname);
        from = sender;
    }
    msg = sm_read_msg(dot_ends, max, &len, &too_big);
    if (too_big) {
        fprintf(stderr, "mtad-sendmail: message over limits."
            "max_message_size (%llu bytes)\n",
            (unsigned long long)max);
        return EX_DATAERR;
    }
    if (sm_scan_headers(&s.rcpt, msg, &len, opt_t) > 0) {
        fprintf(stderr, "mtad-sendmail: -t: an address in To:, Cc: or Bcc: "
            "with a blank, a control character, '<' or '>', or over %d "
            "bytes; message not sent\n", SM_ADDR_MAX);
        return EX_DATAERR;
    }
    if (s.rcpt.n == 0) {
        fprintf(stderr, "mtad-sendmail: no recipients (give them as "
            "arguments, or -t)\n");
        return EX_USAGE;
    }
    util_sockaddr_str((struct sockaddr *)&ss, who, sizeof(who));
    s.fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s.fd < 0 || setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
        sizeof(tv)) != 0 || setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv,
        sizeof(tv)) != 0 || connect(s.fd, (struct sockaddr *)&ss, sslen) != 0) {
        fprintf(stderr, "mtad-sendmail: cannot connect to mtad at %s: %s "
            "(is mtad running?); message not sent\n", who, strerror(errno));
        return EX_TEMPFAIL;
    }
    s.in = fdopen(dup(s.fd), "r");
    if (s.in == NULL) {
        fprintf(stderr, "mtad-sendmail: %s\n", strerror(errno));
        return EX_OSERR;
    }
    if ((rc = sm_reply(&s)) != 220)
        return sm_fail(&s, "connection", rc);
    if ((rc = sm_cmd(&s, "EHLO %s\r\n", "localhost")) != 250)
        return sm_fail(&s, "EHLO", rc);
    if ((rc = sm_cmd(&s, "MAIL FROM:<%s>\r\n", from)) != 250)
        return sm_fail(&s, "MAIL", rc);
    for (i = 0; i < s.rcpt.n; i++)
        if ((rc = sm_cmd(&s, "RCPT TO:<%s>\r\n", s.rcpt.v[i])) != 250 &&
            rc != 251)
            return sm_fail(&s, "RCPT", rc);
    if ((rc = sm_cmd(&s, "%sDATA\r\n", "")) != 354)
        return sm_fail(&s, "DATA", rc);
    if (!sm_has_header(msg, len, "from:")) {
        /* like sendmail: a From: for a message that has none (the null
         * sender's is MAILER-DAEMON, as Postfix's cleanup writes it) */
        const char *fa = from[0] != '\0' ? from : "MAILER-DAEMON";
        size_t hn = strlen(fa) + strlen(hostname) +
            (fullname ? strlen(fullname) : 0) + 24;

        hdr = xmalloc(hn);
        if (fullname != NULL)
            snprintf(hdr, hn, "From: %s <%s%s%s>\r\n", fullname, fa,
                from[0] ? "" : "@", from[0] ? "" : hostname);
        else
            snprintf(hdr, hn, "From: %s%s%s\r\n", fa,
                from[0] ? "" : "@", from[0] ? "" : hostname);
        if (util_write_all(s.fd, hdr, strlen(hdr)) != 0) {
            free(hdr);
            return sm_fail(&s, "DATA", -1);
        }
        free(hdr);
    }
    if (sm_send_data(&s, msg, len) != 0)
        return sm_fail(&s, "DATA", -1);
    if ((rc = sm_reply(&s)) != 250)
        return sm_fail(&s, "message", rc);
    (void)sm_cmd(&s, "%sQUIT\r\n", "");
    free(msg);
    config_free(cfg);
    return 0;
}
