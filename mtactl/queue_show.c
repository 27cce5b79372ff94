/*
 * queue_show.c - mtactl show ID: the envelope, each recipient, the log
 * lines about the message, then its headers or body.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "common/ctl.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "mtactl/mtactl.h"
#include "mtactl/queue_int.h"

/* ---- show ------------------------------------------------------------- */

#define QUEUE_SHOW_HEADER_MAX  (1024 * 1024)  /* bytes of header shown */

/* queue_copy_body - size bytes of fd from off to stdout; headers_only
 * stops before the empty line that ends the header.  Unless raw, the text
 * is escaped for the terminal (line ends and tabs kept), a chunk ending at
 * its last LF so that no character is split. */
static int
queue_copy_body(int fd, off_t off, uint64_t size, int headers_only, int raw)
{
    static char buf[QUEUE_COPY_CHUNK];
    uint64_t    left = size;
    int         line_start = 1;
    ssize_t     got, i;

    while (left > 0) {
        size_t want = left < sizeof(buf) ? (size_t)left : sizeof(buf);

        got = pread(fd, buf, want, off);
        if (got == -1 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        if (headers_only) {
            for (i = 0; i < got; i++) {
                if (line_start && (buf[i] == '\r' || buf[i] == '\n')) {
                    queue_put_esc(buf, (size_t)i, UTIL_ESC_LINES);
                    return 0;
                }
                line_start = buf[i] == '\n';
            }
        }
        if (raw) {
            fwrite(buf, 1, (size_t)got, stdout);
        } else {
            const char *lf = memrchr(buf, '\n', (size_t)got);

            if (lf != NULL && (uint64_t)got < left)
                got = lf - buf + 1;     /* the rest starts the next read */
            queue_put_esc(buf, (size_t)got, UTIL_ESC_LINES);
        }
        off += got;
        left -= (uint64_t)got;
    }
    return 0;
}


static const char *
queue_notify_text(unsigned notify, char *buf, size_t sz)
{
    if (notify == 0)
        return "default";
    if (notify & SMTP_NOTIFY_NEVER)
        return "NEVER";
    snprintf(buf, sz, "%s%s%s%s%s",
        notify & SMTP_NOTIFY_SUCCESS ? "SUCCESS" : "",
        (notify & SMTP_NOTIFY_SUCCESS) && (notify & ~SMTP_NOTIFY_SUCCESS &
        (SMTP_NOTIFY_FAILURE | SMTP_NOTIFY_DELAY)) ? "," : "",
        notify & SMTP_NOTIFY_FAILURE ? "FAILURE" : "",
        (notify & SMTP_NOTIFY_FAILURE) && (notify & SMTP_NOTIFY_DELAY) ?
        "," : "", notify & SMTP_NOTIFY_DELAY ? "DELAY" : "");
    return buf;
}


/* queue_show_envelope - the "key: value" block of mtactl show. */
static void
queue_show_envelope(const struct spool_env *env, enum queue_state state,
    uint64_t now)
{
    char   at[32], age[32], next[32], nb[40];
    size_t i;

    printf("id:          %s\nstate:       %s\n", env->id,
        queue_state_names[state]);
    printf("arrival:     %s (%s ago)\nsize:        %lu bytes\nsender:      <",
        queue_time(env->arrival_ms, at, sizeof(at)),
        queue_age(queue_since(now, env->arrival_ms), age, sizeof(age)),
        (unsigned long)env->body_size);
    queue_put_text(env->sender);
    /* the spool file is the workers' to write: every field is escaped */
    printf(">\nclient:      [");
    queue_put_text(env->client_ip ? env->client_ip : "");
    printf("]:%u helo=", env->client_port);
    queue_put_text(env->helo ? env->helo : "-");
    printf("\nbody:        %s%s\nret:         %s\nenvid:       ",
        env->body == SMTP_BODY_BINARYMIME ? "BINARYMIME" :
        env->body == SMTP_BODY_8BITMIME ? "8BITMIME" : "7BIT",
        env->smtputf8 ? " SMTPUTF8" : "",
        env->ret == SMTP_RET_FULL ? "FULL" : env->ret == SMTP_RET_HDRS ?
        "HDRS" : "-");
    queue_put_text(env->envid ? env->envid : "-");
    /* RFC 8689: the MAIL parameter, or the header field's opt-out */
    if (env->requiretls || env->tls_optional)
        printf("\ntls:         %s", env->requiretls ? "REQUIRETLS" :
            "TLS-Required: No");
    if (env->next_retry_ms > now)
        snprintf(next, sizeof(next), "in %s", queue_age(env->next_retry_ms -
            now, age, sizeof(age)));
    else
        snprintf(next, sizeof(next), "now");
    printf("\nattempts:    %u\nnext retry:  %s\nheld:        %s\n",
        env->attempts, env->held ? "(on hold)" : next,
        env->held ? "yes" : "no");
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *r = &env->rcpt[i];

        fputs("recipient:   <", stdout);
        queue_put_text(r->addr);
        printf("> %s notify=%s", queue_rcpt_status_names[
            queue_rcpt_status(r)], queue_notify_text(r->notify, nb,
            sizeof(nb)));
        if (r->orcpt != NULL) {
            fputs(" orcpt=", stdout);
            queue_put_text(r->orcpt);
        }
        if (r->relay != NULL) {
            fputs(" relay=", stdout);
            queue_put_text(r->relay);
        }
        if (r->tls != NULL) {
            putchar(' ');
            queue_put_text(r->tls);     /* "tls=... cipher=... verify=..." */
        }
        if (r->cls != NULL) {           /* of the last failed attempt */
            fputs(" class=", stdout);
            queue_put_text(r->cls);
        }
        putchar('\n');
        if (r->last_reply != NULL) {
            fputs("  last reply: ", stdout);
            queue_put_text(r->last_reply);
            putchar('\n');
        }
    }
}


/* queue_history_line - print line [p, e) when it is about id: for the
 * terminal, or as the next string of a JSON array (json: lines so far
 * + 1). */
static int
queue_history_line(const char *p, const char *e, const char *needle,
    size_t json)
{
    size_t n = strlen(needle);

    for (const char *q = p; q + n <= e; q++) {
        q = memchr(q, needle[0], (size_t)(e - q));
        if (q == NULL || q + n > e)
            return 0;
        if (memcmp(q, needle, n) != 0)
            continue;
        if (json) {
            fputs(json > 1 ? "," : "", stdout);
            queue_json_mem(p, (size_t)(e - p));
        } else {
            fputs("  ", stdout);
            queue_put_esc(p, (size_t)(e - p), 0);
            putchar('\n');
        }
        return 1;
    }
    return 0;
}


/*
 * queue_show_history - the log lines about id: arrival, every attempt's
 * result per recipient, hold, DSN, removal, as text or as the JSON keys
 * history_file and history (or history null and history_note).  Only
 * when log.file is a file (or "-" leads to one: mtactl_log_source() says
 * where else); reads at most the last QUEUE_HISTORY_SCAN bytes in
 * QUEUE_COPY_CHUNK reads, and prints at most QUEUE_HISTORY_MAX lines.
 */
static void
queue_show_history(const struct config *cfg, const char *id, int json)
{
    static char buf[QUEUE_COPY_CHUNK];
    char        needle[SPOOL_ID_SIZE + 2], path[PATH_MAX];
    char        where[PATH_MAX + 300];
    struct stat st;
    off_t       off;
    size_t      have = 0, shown = 0;
    ssize_t     got;
    int         fd = -1;

    where[0] = '\0';
    if (mtactl_log_source(cfg, id, path, sizeof(path), where,
        sizeof(where)) != 0 ||
        (fd = open(path, O_RDONLY | O_CLOEXEC)) == -1 ||
        fstat(fd, &st) == -1) {
        if (where[0] == '\0')
            snprintf(where, sizeof(where), "%s: %s", path, strerror(errno));
        if (json) {
            fputs(",\"history\":null,\"history_note\":", stdout);
            queue_json_str(where);
        } else {
            printf("history:     ");
            queue_put_text(where);
            putchar('\n');
        }
        if (fd >= 0)
            close(fd);
        return;
    }
    snprintf(needle, sizeof(needle), "%s:", id);
    if (json) {
        fputs(",\"history_file\":", stdout);
        queue_json_str(path);
        fputs(",\"history\":[", stdout);
    } else
        printf("history:     (%s)\n", path);
    off = st.st_size > QUEUE_HISTORY_SCAN ? st.st_size - QUEUE_HISTORY_SCAN :
        0;
    for (;;) {
        char *p, *nl, *end;

        got = pread(fd, buf + have, sizeof(buf) - have, off);
        if (got == -1 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        off += got;
        end = buf + have + got;
        p = buf;
        while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            if (shown < QUEUE_HISTORY_MAX)
                shown += (size_t)queue_history_line(p, nl, needle,
                    json ? shown + 1 : 0);
            p = nl + 1;
        }
        have = (size_t)(end - p);
        if (have == sizeof(buf))
            have = 0;                   /* a line longer than buf: drop */
        memmove(buf, p, have);
    }
    close(fd);
    if (json)
        putchar(']');
    else if (shown == QUEUE_HISTORY_MAX)
        printf("  (only the first %d lines)\n", QUEUE_HISTORY_MAX);
}


/* queue_json_headers - the header part (up to QUEUE_SHOW_HEADER_MAX
 * bytes, without the empty line) as the JSON key "headers". */
static int
queue_json_headers(int fd, off_t off, uint64_t size)
{
    size_t  want = size < QUEUE_SHOW_HEADER_MAX ? (size_t)size :
                QUEUE_SHOW_HEADER_MAX, have = 0, i;
    char   *buf = xmalloc(want + 1);
    ssize_t got;

    while (have < want) {
        got = pread(fd, buf + have, want - have, off + (off_t)have);
        if (got == -1 && errno == EINTR)
            continue;
        if (got <= 0) {
            free(buf);
            return -1;
        }
        have += (size_t)got;
    }
    for (i = 0; i < have; i++)
        if ((i == 0 || buf[i - 1] == '\n') && (buf[i] == '\r' ||
            buf[i] == '\n'))
            break;
    fputs(",\"headers\":", stdout);
    queue_json_mem(buf, i);
    printf(",\"headers_cut\":%s", i == have && have < size ? "true" :
        "false");
    free(buf);
    return 0;
}


/* show --json: one object, the queue --json keys and more (CONTRACT in
 * mtactl(8)). */
static int
queue_show_json(const struct config *cfg, const struct spool_env *env,
    int fd, off_t off)
{
    struct queue_locks lk;
    struct queue_item  it;
    int                rc;

    queue_locks_load(&lk);
    it.env = (struct spool_env *)env;
    it.state = queue_state_of(env, fd, &lk);
    queue_locks_free(&lk);
    queue_json_item_open(&it, util_wall_ms(), 1);
    queue_show_history(cfg, env->id, 1);
    rc = queue_json_headers(fd, off, env->body_size);
    fputs("}\n", stdout);
    return rc;
}


/* show [--body | --raw]: the envelope and history (unless raw), then the
 * headers (or all of the message). */
static int
queue_show_text(const struct config *cfg, const struct spool_env *env,
    int fd, off_t off, const struct queue_opts *o)
{
    if (!o->raw) {
        struct queue_locks lk;

        queue_locks_load(&lk);
        queue_show_envelope(env, queue_state_of(env, fd, &lk),
            util_wall_ms());
        queue_locks_free(&lk);
        queue_show_history(cfg, env->id, 0);
        putchar('\n');
    }
    fflush(stdout);
    /* the message is immutable once queued: reading it unlocked is safe
     * even while a worker delivers it */
    /* the header part is cut at QUEUE_SHOW_HEADER_MAX: a file the workers'
     * user wrote without an empty line would otherwise run whole */
    return queue_copy_body(fd, off, !o->body && !o->raw &&
        env->body_size > QUEUE_SHOW_HEADER_MAX ? QUEUE_SHOW_HEADER_MAX :
        env->body_size, !o->body && !o->raw, o->raw);
}


/* mtactl show ID [--body | --raw | --json] */
int
queue_cmd_show(int argc, char **argv, const struct config *cfg)
{
    struct queue_opts  o;
    struct spool_env  *env = NULL;
    struct spool      *sp;
    char               id[SPOOL_ID_SIZE];
    int                fd = -1, rc;
    off_t              off;

    if (queue_parse_opts(argc, argv, "brj", &o) < 0) {
        free(o.ops);
        return MTACTL_USAGE;
    }
    if (o.nops != 1 || o.body + o.raw + o.json > 1) {
        fprintf(stderr, "usage: mtactl show ID [--body | --raw | --json]\n");
        free(o.ops);
        return MTACTL_USAGE;
    }
    rc = queue_norm_id(o.ops[0], id);
    if (!rc)
        fprintf(stderr, "mtactl: show: '%s' is not a queue id (16 hex "
            "digits)\n", o.ops[0]);
    free(o.ops);
    if (!rc)
        return MTACTL_FAIL;
    if ((sp = queue_open_spool(cfg, "show")) == NULL)
        return MTACTL_FAIL;
    rc = spool_msg_open(sp, id, 0, &env, &fd, &off);
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: show: %s: %s\n", id, rc == SPOOL_ENOENT ?
            "no such message in the queue" : spool_errstr(sp));
        spool_close(sp);
        return MTACTL_FAIL;
    }
    if (o.json)
        rc = queue_show_json(cfg, env, fd, off);
    else
        rc = queue_show_text(cfg, env, fd, off, &o);
    if (fflush(stdout) != 0)
        rc = -1;
    close(fd);
    spool_env_free(env);
    spool_close(sp);
    if (rc != 0) {
        fprintf(stderr, "mtactl: show: %s: cannot copy the message: %s\n",
            id, strerror(errno));
        return MTACTL_FAIL;
    }
    return MTACTL_OK;
}
