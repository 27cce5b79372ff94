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
 *           Without -C and -S, when the default relay.yaml is not
 *           readable to the caller, the master's submission hint
 *           (CONFIG_SUBMIT_PATH) gives the address: no privilege needed.
 *           The message gets a Received: line with the real uid, and
 *           Date:, Message-ID:, From: and the empty line after the
 *           header section when it lacks them; a 452 to RCPT starts a
 *           new transaction for the rest of the recipients.
 *           Other -o options and -B/-b/-O/-N/-R/-V/-X are accepted and
 *           ignored, as Postfix's sendmail does for compatibility.
 * CONTRACT  Exit 0 once mtad answered "250 queued".  EX_TEMPFAIL (75) when
 *           mtad cannot be reached (or neither relay.yaml nor the hint can
 *           be read) or answers 4xx: the caller keeps the
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
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "common/safefs.h"
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


/* sm_has_header - a field called name (with its colon, lower case) in
 * the header section msg[0..hlen). */
static int
sm_has_header(const char *msg, size_t hlen, const char *name)
{
    size_t i = 0, n = strlen(name);

    while (i < hlen) {
        if (hlen - i > n && strncasecmp(msg + i, name, n) == 0)
            return 1;
        while (i < hlen && msg[i] != '\n')
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


/* sm_read_msg - stdin, LF or CRLF lines, leading "From " lines dropped;
 * without -i a "." line ends it. */
static char *
sm_read_msg(int dot_ends, size_t max, size_t *len, int *too_big)
{
    char   *buf = NULL, *line = NULL;
    size_t  cap = 0, n = 0, lcap = 0;
    ssize_t got;

    *too_big = 0;
    while ((got = getline(&line, &lcap, stdin)) > 0) {
        size_t l = (size_t)got;

        /* an mbox "From " line in front goes, as Postfix's sendmail
         * drops it: it is no header field, and would end the header
         * section before the first one */
        if (n == 0 && l >= 5 && memcmp(line, "From ", 5) == 0)
            continue;

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


/* sm_stuff - the DATA bytes of msg: CRLF line ends, dot-stuffing and the
 * final ".", made once for every transaction (*olen: their length). */
static char *
sm_stuff(const char *msg, size_t len, size_t *olen)
{
    char  *out = xmalloc(2 * len + 8);
    size_t i, o = 0;
    int    bol = 1;

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
    *olen = o + 3;
    return out;
}


/* sm_phrase - -F as the display name of From: (RFC 5322 3.2.5): as it is
 * when it is atoms and blanks only, else one quoted string ('"' and '\\'
 * escaped), so that a name such as "Eve <root@x>, Bob" stays a name and
 * adds no address.  out holds 2 * strlen(name) + 3. */
static const char *
sm_phrase(const char *name, char *out)
{
    size_t o = 0;

    if (name[strcspn(name, "()<>[]:;@\\,.\"")] == '\0')
        return name;
    out[o++] = '"';
    for (; *name != '\0'; name++) {
        if (*name == '"' || *name == '\\')
            out[o++] = '\\';
        out[o++] = *name;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}


/* sm_compose - the message as submitted: a Received: line saying which
 * local user ran us (the real uid, from the kernel: the caller cannot
 * choose it, whatever -f says), then Date:, Message-ID: and From: when
 * the header section lacks them (as Postfix's cleanup adds them), then
 * msg, with the empty line that ends the header section put in when msg
 * has none there (a body piped in without headers, or a line that is
 * no header field): without it the body would be read as headers. */
static char *
sm_compose(const char *msg, size_t len, const char *from,
    const char *fullname, const char *hostname, size_t *outlen)
{
    size_t      hend = sm_header_end(msg, len);
    int         blank = hend < len && (msg[hend] == '\n' ||
        (msg[hend] == '\r' && hend + 1 < len && msg[hend + 1] == '\n'));
    const char *fa = from[0] != '\0' ? from : "MAILER-DAEMON";
    const char *at = from[0] != '\0' ? "" : "@";
    const char *ah = from[0] != '\0' ? "" : hostname;
    char        date[64], stamp[32];
    size_t      cap = len + strlen(fa) + 3 * strlen(hostname) +
        (fullname ? 3 * strlen(fullname) : 0) + 512, o = 0;
    char       *out = xmalloc(cap);
    char       *phrase = xmalloc(fullname ? 2 * strlen(fullname) + 3 : 1);
    uint64_t    rnd = 0;
    time_t      now = time(NULL);
    struct tm   tm;

    localtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S %z", &tm);
    strftime(stamp, sizeof(stamp), "%Y%m%d%H%M%S", &tm);
    o += (size_t)snprintf(out + o, cap - o,
        "Received: by %s (mtad-sendmail, from userid %u);\n\t%s\n",
        hostname, (unsigned)getuid(), date);
    if (!sm_has_header(msg, hend, "date:"))
        o += (size_t)snprintf(out + o, cap - o, "Date: %s\n", date);
    if (!sm_has_header(msg, hend, "message-id:")) {
        if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            rnd = (uint64_t)getpid() << 32 ^ (uint64_t)now;
        o += (size_t)snprintf(out + o, cap - o,
            "Message-ID: <%s.%016llx@%s>\n", stamp, (unsigned long long)rnd,
            hostname);
    }
    if (!sm_has_header(msg, hend, "from:")) {
        /* the null sender's From: is MAILER-DAEMON, as Postfix writes it */
        if (fullname != NULL)
            o += (size_t)snprintf(out + o, cap - o, "From: %s <%s%s%s>\n",
                sm_phrase(fullname, phrase), fa, at, ah);
        else
            o += (size_t)snprintf(out + o, cap - o, "From: %s%s%s\n", fa,
                at, ah);
    }
    free(phrase);
    memcpy(out + o, msg, hend);
    o += hend;
    if (hend < len && !blank)
        out[o++] = '\n';
    memcpy(out + o, msg + hend, len - hend);
    *outlen = o + len - hend;
    return out;
}


/* sm_hint_open - CONFIG_SUBMIT_PATH, only when no other user could have
 * put it there: no link on the way, every directory and the file itself
 * root's (or the caller's own), not writable by group or others.  With
 * mtad down, a hint planted by another local user would send the
 * caller's mail (cron's output, as root's too) to a listener of theirs.
 * NULL with errno and err set. */
static FILE *
sm_hint_open(char *err, size_t errsz)
{
    const char *name = strrchr(CONFIG_SUBMIT_PATH, '/') + 1;
    char        dir[sizeof(CONFIG_SUBMIT_PATH)];
    struct stat st;
    FILE       *f;
    int         dfd, fd;

    snprintf(dir, sizeof(dir), "%.*s", (int)(name - CONFIG_SUBMIT_PATH - 1),
        CONFIG_SUBMIT_PATH);
    if ((dfd = safefs_open_dir_nolinks(dir, 0, 0, dir, err, errsz)) < 0)
        return NULL;
    fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    close(dfd);
    if (fd < 0) {
        snprintf(err, errsz, "%s: %s", CONFIG_SUBMIT_PATH, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errsz, "%s: not a plain file", CONFIG_SUBMIT_PATH);
        close(fd);
        errno = EPERM;
        return NULL;
    }
    if (safefs_check_owner(fd, (uid_t)-1, S_IWGRP | S_IWOTH,
        CONFIG_SUBMIT_PATH, err, errsz) < 0 ||
        (f = fdopen(fd, "r")) == NULL) {
        close(fd);
        return NULL;
    }
    return f;
}


/* sm_submit_file - the listener, host name and size limit the master
 * published (CONFIG_SUBMIT_PATH), for a user who may not read relay.yaml.
 * 0, or -1 with errno and err (ENOENT: mtad does not run; EINVAL: no
 * address; EPERM: a hint someone else could have written). */
static int
sm_submit_file(struct sockaddr_storage *ss, socklen_t *sslen, char *host,
    size_t hostsz, size_t *max, char *err, size_t errsz)
{
    char  line[512], v[300];
    FILE *f = sm_hint_open(err, errsz);
    int   have = 0;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long n;

        if (sscanf(line, "listen %299s", v) == 1)
            have = util_parse_hostport(v, ss, sslen) == 0;
        else if (sscanf(line, "hostname %299s", v) == 1 && sm_clean(v))
            util_strlcpy(host, v, hostsz);
        else if (sscanf(line, "max_message_size %llu", &n) == 1)
            *max = (size_t)n;
    }
    fclose(f);
    if (!have) {
        snprintf(err, errsz, "%s: no listen line", CONFIG_SUBMIT_PATH);
        errno = EINVAL;
    }
    return have ? 0 : -1;
}


/* sm_txn - one transaction from recipient *next on: MAIL, RCPT until the
 * list ends or the server says 452 (too many recipients in one
 * transaction, RFC 5321 4.5.3.1.10: the rest go in the next), DATA.
 * 0 with *next moved past those sent, or the exit code. */
static int
sm_txn(struct sm *s, const char *from, const char *data, size_t dlen,
    size_t *next)
{
    size_t i = *next;
    int    rc;

    if ((rc = sm_cmd(s, "MAIL FROM:<%s>\r\n", from)) != 250)
        return sm_fail(s, "MAIL", rc);
    for (; i < s->rcpt.n; i++) {
        rc = sm_cmd(s, "RCPT TO:<%s>\r\n", s->rcpt.v[i]);
        if (rc == 452 && i > *next)
            break;                  /* the first one refused: a real 4xx */
        if (rc != 250 && rc != 251)
            return sm_fail(s, "RCPT", rc);
    }
    if ((rc = sm_cmd(s, "%sDATA\r\n", "")) != 354)
        return sm_fail(s, "DATA", rc);
    if (util_write_all(s->fd, data, dlen) != 0)
        return sm_fail(s, "DATA", -1);
    if ((rc = sm_reply(s)) != 250)
        return sm_fail(s, "message", rc);
    *next = i;
    return 0;
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
    struct config *cfg = NULL;
    const struct config_listen *l;
    struct sockaddr_storage ss;
    socklen_t   sslen = 0;
    struct timeval tv = { SM_TIMEOUT_S, 0 };
    char        err[8192], who[300], sender[1024], *msg, *full, *data;
    size_t      len, flen, dlen, i, next;
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
    if (gethostname(host, sizeof(host) - 1) == 0 && sm_clean(host)) {
        host[sizeof(host) - 1] = '\0';
        hostname = host;
    }
    /* With -S the configuration is not read: a user who may not read
     * relay.yaml (or the key files its check opens) can still send.  So
     * can one who gives nothing, when the default relay.yaml is not
     * readable to them (root:mtad 0640 on an installed system): the
     * master's submission hint says where to go, and nothing here needs
     * a privilege (no setgid): the loopback listener takes the same
     * SMTP from any local user's connection. */
    if (server == NULL && !cfg_given && access(cfgpath, R_OK) != 0) {
        if (sm_submit_file(&ss, &sslen, host, sizeof(host), &max, err,
            sizeof(err)) != 0) {
            fprintf(stderr, "mtad-sendmail: cannot read %s, nor use %s%s; "
                "message not sent\n", cfgpath, err, errno == ENOENT ?
                " (is mtad running?)" : "");
            return EX_TEMPFAIL;
        }
        hostname = host;
    } else if (server == NULL || cfg_given) {
        if ((cfg = config_load(cfgpath, err, sizeof(err))) == NULL) {
            fprintf(stderr, "mtad-sendmail: %s: %s\n", cfgpath, err);
            return EX_CONFIG;
        }
        hostname = cfg->hostname;
        max = cfg->max_message_size;
    }
    if (server != NULL) {
        if (util_parse_hostport(server, &ss, &sslen) != 0) {
            fprintf(stderr, "mtad-sendmail: -S %s: expected host:port\n",
                server);
            return EX_USAGE;
        }
    } else if (cfg != NULL) {
        if ((l = config_submit_listen(cfg)) == NULL) {
            fprintf(stderr, "mtad-sendmail: %s: no server.listen entry on "
                "a loopback address with role mx (give -S HOST:PORT)\n",
                cfgpath);
            return EX_CONFIG;
        }
        ss = l->addr;
        sslen = l->addrlen;
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
    full = sm_compose(msg, len, from, fullname, hostname, &flen);
    data = sm_stuff(full, flen, &dlen);
    free(full);
    free(msg);
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
    for (next = 0; next < s.rcpt.n;)
        if ((rc = sm_txn(&s, from, data, dlen, &next)) != 0) {
            if (next > 0)
                fprintf(stderr, "mtad-sendmail: queued for the first %zu "
                    "of %zu recipients only\n", next, s.rcpt.n);
            return rc;
        }
    (void)sm_cmd(&s, "%sQUIT\r\n", "");
    free(data);
    config_free(cfg);
    return 0;
}
