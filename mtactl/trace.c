/*
 * trace.c - mtactl trace ID: every log record of one message, from every
 * process (the worker that received it, the one that delivered it, the
 * master), also after the message has left the queue.
 *
 * CONTRACT  The records are read from log.file, text or JSON lines
 *           (log.format), and before it from its rotated predecessor
 *           FILE.1 when there is one (logrotate's delaycompress keeps it
 *           plain).  A record belongs to the message when it names the id
 *           (a whole word: "ID: to=<...>", "queue_id":"ID", "bounce of
 *           ID").  The inbound session ties in the rest: the records of
 *           the message that carry a session id (session=S in text,
 *           "session":"S" in JSON) pull in every record with that session
 *           id, the connect line included.  Two passes, so memory stays
 *           flat whatever the size of the log.
 *           When log.file is "-" the records are on mtad's standard
 *           error: mtactl_log_source() finds out where that leads (the
 *           running master's fd 2) and says so.
 *           Every line is escaped for the terminal (util_escape): the
 *           records hold what clients and servers sent.
 * FAILURE   Exit 1 with "mtactl: trace: ..." when the log cannot be read
 *           or has no record of the id; 2 on usage.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "mtactl/mtactl.h"
#include "mtactl/queue_int.h"

#define TRACE_SESSIONS_MAX  16          /* sessions one message can name */
#define TRACE_SESSION_LEN   64

struct trace {
    char     id[SPOOL_ID_SIZE];
    char     sessions[TRACE_SESSIONS_MAX][TRACE_SESSION_LEN];
    size_t   nsessions;
    size_t   printed;
};

void
mtactl_trace_help(void)
{
    printf(
"usage: mtactl trace ID\n"
"  Every log record of one message, in order, from every process: its\n"
"  arrival, each delivery attempt and its result, hold, DSN, removal;\n"
"  also after it left the queue.  With the inbound session id on the\n"
"  records (session=), the session's records too (connect, HELO, TLS).\n"
"  Read from log.file (text or JSON lines) and FILE.1 before it; when\n"
"  log.file is \"-\", says where mtad's standard error goes instead.\n");
}


static int
trace_idchar(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') ||
        (c >= 'a' && c <= 'z');
}


/* trace_names_id - line [p, p+n) holds id as a whole word. */
static int
trace_names_id(const char *p, size_t n, const char *id)
{
    size_t      idn = strlen(id);
    const char *q = p, *e = p + n;

    while ((q = memmem(q, (size_t)(e - q), id, idn)) != NULL) {
        if ((q == p || !trace_idchar((unsigned char)q[-1])) &&
            (q + idn == e || !trace_idchar((unsigned char)q[idn])))
            return 1;
        q++;
    }
    return 0;
}


/* trace_sidchar - a character of a session id. */
static int
trace_sidchar(int c)
{
    return trace_idchar(c) || c == '-' || c == '.';
}


/* trace_session_of - the session id a record carries into out; 0 when it
 * has none.  A JSON record: its "session" key (a quote inside a value is
 * escaped, so the key cannot be forged).  A text record: the last
 * "session=S" with S ending the line or followed by a blank or , ; :
 * as mtad writes it after what the peer sent (a sender
 * <session=X@dom>, a HELO, a server's "(250 ok session=X)"): an earlier
 * one, or one inside such text, would tie in another session. */
static int
trace_session_of(const char *p, size_t n, char out[TRACE_SESSION_LEN])
{
    const char *e = p + n, *q = p, *v, *found = NULL;
    const char *key = n > 0 && p[0] == '{' ? "\"session\":\"" : "session=";
    size_t      kn = strlen(key), len;

    while ((q = memmem(q, (size_t)(e - q), key, kn)) != NULL) {
        v = q + kn;
        for (len = 0; v + len < e && len < TRACE_SESSION_LEN - 1 &&
            trace_sidchar((unsigned char)v[len]); len++)
            ;
        if (p[0] == '{') {
            found = len > 0 && v + len < e && v[len] == '"' ? v : NULL;
            break;
        }
        if (q > p && trace_idchar((unsigned char)q[-1])) {
            q++;                    /* "xsession=": another key */
            continue;
        }
        found = len > 0 && (v + len == e || (v[len] != '\0' &&
            strchr(" ,;:", v[len]) != NULL)) ? v : NULL;
        q++;
    }
    if (found == NULL)
        return 0;
    for (len = 0; found + len < e && len < TRACE_SESSION_LEN - 1 &&
        trace_sidchar((unsigned char)found[len]); len++)
        ;
    memcpy(out, found, len);
    out[len] = '\0';
    return 1;
}


static int
trace_known_session(const struct trace *t, const char *s)
{
    for (size_t i = 0; i < t->nsessions; i++)
        if (strcmp(t->sessions[i], s) == 0)
            return 1;
    return 0;
}


/* trace_pass - one read of f: collect (the sessions of the id's records)
 * or print (the id's records and those of its sessions). */
static void
trace_pass(struct trace *t, FILE *f, int print)
{
    char   *line = NULL, sess[TRACE_SESSION_LEN];
    size_t  cap = 0;
    ssize_t n;

    rewind(f);
    while ((n = getline(&line, &cap, f)) > 0) {
        size_t len = (size_t)n;
        int    has_sess, mine;

        if (line[len - 1] == '\n')
            len--;
        mine = trace_names_id(line, len, t->id);
        has_sess = trace_session_of(line, len, sess);
        if (!print) {
            if (mine && has_sess && t->nsessions < TRACE_SESSIONS_MAX &&
                !trace_known_session(t, sess))
                util_strlcpy(t->sessions[t->nsessions++], sess,
                    TRACE_SESSION_LEN);
            continue;
        }
        if (mine || (has_sess && trace_known_session(t, sess))) {
            queue_put_esc(line, len, 0);
            putchar('\n');
            t->printed++;
        }
    }
    free(line);
}


/*
 * mtactl_log_source - where mtad's log records are: 0 with the file to
 * read in path (log.file); else -1 with a sentence in where that tells
 * the operator where to look.  With log.file "-" the master's standard
 * error decides: a socket is systemd's journal, a terminal is `mtad -f`
 * (make run), a regular file can be read (0).
 */
int
mtactl_log_source(const struct config *cfg, const char *id, char *path,
    size_t pathsz, char *where, size_t wheresz)
{
    char  fd2[64], target[PATH_MAX];
    FILE *pf;
    long  pid = 0;
    ssize_t n = -1;

    if (strcmp(cfg->log_file, "-") != 0) {
        util_strlcpy(path, cfg->log_file, pathsz);
        return 0;
    }
    if ((pf = fopen(cfg->pid_file, "r")) != NULL) {
        if (fscanf(pf, "%ld", &pid) != 1)
            pid = 0;
        fclose(pf);
    }
    if (pid > 0) {
        snprintf(fd2, sizeof(fd2), "/proc/%ld/fd/2", pid);
        n = readlink(fd2, target, sizeof(target) - 1);
    }
    if (n > 0) {
        target[n] = '\0';
        if (strncmp(target, "socket:", 7) == 0) {
            snprintf(where, wheresz, "log.file is \"-\" and mtad's standard "
                "error is a socket (systemd's journal): journalctl -u mtad "
                "-g %s", id);
            return -1;
        }
        if (strncmp(target, "/dev/pts/", 9) == 0 ||
            strncmp(target, "/dev/tty", 8) == 0) {
            snprintf(where, wheresz, "log.file is \"-\": the records went "
                "to the terminal mtad runs on (%s, mtad -f as under make "
                "run) and were not kept; set log.file to a path to keep "
                "them", target);
            return -1;
        }
        if (target[0] == '/' && strstr(target, " (deleted)") == NULL) {
            struct stat st;

            if (stat(target, &st) == 0 && S_ISREG(st.st_mode)) {
                util_strlcpy(path, target, pathsz);
                return 0;
            }
        }
        snprintf(where, wheresz, "log.file is \"-\": the records went to "
            "mtad's standard error (%s)", target);
        return -1;
    }
    snprintf(where, wheresz, "log.file is \"-\": the records went to mtad's "
        "standard error: under systemd the journal (journalctl -u mtad -g "
        "%s), under mtad -f (make run) its terminal (mtad not running, or "
        "its pid file %s not readable to tell which)", id, cfg->pid_file);
    return -1;
}


int
mtactl_trace(int argc, char **argv, const struct config *cfg)
{
    struct trace t;
    char         path[PATH_MAX], old[PATH_MAX + 3], where[PATH_MAX + 300];
    FILE        *f[2] = { NULL, NULL };
    size_t       i;

    if (argc != 2) {
        fprintf(stderr, "usage: mtactl trace ID\n");
        return MTACTL_USAGE;
    }
    memset(&t, 0, sizeof(t));
    if (!queue_norm_id(argv[1], t.id)) {
        fprintf(stderr, "mtactl: trace: '%s' is not a queue id (16 hex "
            "digits)\n", argv[1]);
        return MTACTL_FAIL;
    }
    if (mtactl_log_source(cfg, t.id, path, sizeof(path), where,
        sizeof(where)) != 0) {
        fprintf(stderr, "mtactl: trace: %s\n", where);
        return MTACTL_FAIL;
    }
    snprintf(old, sizeof(old), "%s.1", path);
    f[0] = fopen(old, "re");            /* absent: nothing rotated yet */
    if ((f[1] = fopen(path, "re")) == NULL) {
        fprintf(stderr, "mtactl: trace: %s: %s\n", path, strerror(errno));
        if (f[0] != NULL)
            fclose(f[0]);
        return MTACTL_FAIL;
    }
    for (i = 0; i < 2; i++)
        if (f[i] != NULL)
            trace_pass(&t, f[i], 0);
    for (i = 0; i < 2; i++)
        if (f[i] != NULL) {
            trace_pass(&t, f[i], 1);
            fclose(f[i]);
        }
    if (t.printed == 0) {
        fprintf(stderr, "mtactl: trace: %s: no log record in %s%s\n", t.id,
            path, access(old, F_OK) == 0 ? " or its .1" : "");
        return MTACTL_FAIL;
    }
    return MTACTL_OK;
}
