/*
 * queue.c - mtactl's queue commands: queue, show, delete, hold, release,
 * flush, bounce.
 *
 * PURPOSE   Inspect the spool and steer single messages, safely while mtad
 *           runs, and also while it does not (everything here works on the
 *           spool files; the daemon is only told to look again).
 * CONTRACT  Reading (queue, show) never takes a message away from a worker:
 *           it opens queue/<id> without the delivery lock and tells
 *           "active" messages apart by the flocks listed in /proc/locks
 *           (only when that cannot be read, by a LOCK_SH|LOCK_NB probe
 *           dropped at once).
 *           Changing (delete, hold, release, flush, bounce) takes the same
 *           flock(LOCK_EX) the delivering worker holds for a whole attempt,
 *           waiting up to QUEUE_LOCK_WAIT_MS for an attempt in progress to
 *           end, so a change always falls between two attempts: a message
 *           that the attempt finished is gone (the command says "no such
 *           message"), one it deferred gets the change.  A lock won on a
 *           file already unlinked by its last holder counts as gone too.
 *           flush alone does not wait: a message being tried is left to
 *           that attempt.
 *           After the change the lock is released and release, flush and
 *           bounce ask the master to "kick" the ids, so the owning worker
 *           acts at once; when mtad is not running the change stands and
 *           is acted on when it starts (deliver_recover()).  bounce only
 *           marks the pending recipients BOUNCED: the worker's next attempt
 *           finds none pending, sends the DSN and removes the message.
 *           When run as root on a spool owned by another user (mtad drops
 *           to it), changes are made with that user's effective ids, so the
 *           state files stay readable by the workers.
 * FAILURE   Messages to stderr as "mtactl: <cmd>: <id>: <why>"; exit codes
 *           0 (every id done), 1 (some failed: unknown or malformed id,
 *           spool error), 2 (usage).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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

#define QUEUE_LOCK_WAIT_MS  60000       /* longer than a slow DATA reply */
#define QUEUE_LOCK_POLL_US  20000
#define QUEUE_KICK_MS       5000
#define QUEUE_BOUNCE_TEXT   "5.0.0 returned to sender by the administrator"
#define QUEUE_COPY_CHUNK    (128 * 1024)
#define QUEUE_SHOWN_RCPTS   3           /* recipients on a queue line */
#define QUEUE_HISTORY_SCAN  ((off_t)64 << 20)   /* log bytes read by show */
#define QUEUE_HISTORY_MAX   200         /* log lines shown by show */

enum queue_state { QS_QUEUED, QS_ACTIVE, QS_DEFERRED, QS_HELD, QS_NSTATES };

static const char *const queue_state_names[] = {
    "queued", "active", "deferred", "held"
};

static const char *const queue_rcpt_status_names[] = {
    "pending", "sent", "bounced"
};

struct queue_filter {
    const char *from;               /* substring of the sender */
    const char *to;                 /* substring of any recipient */
    int         state;              /* enum queue_state, -1 any */
    uint64_t    older_ms;           /* 0 any */
};

struct queue_opts {
    struct queue_filter f;
    int         json, by_domain, all, body, raw;
    char      **ops;                /* the operands, in order */
    int         nops;
};

struct queue_item {
    struct spool_env *env;
    enum queue_state  state;
};

/* A file, for the /proc/locks snapshot. */
struct queue_fileid {
    dev_t dev;
    ino_t ino;
};

struct queue_locks {
    struct queue_fileid *v;         /* sorted */
    size_t               n;
    int                  ok;        /* read: v is the whole truth */
};

/* The effective ids mtactl had before queue_become_owner(). */
struct queue_creds {
    int   dropped;
    uid_t uid;
    gid_t gid;
};


/* ---- the spool and its owner ------------------------------------------ */

/* queue_open_spool - the spool named by the config. */
static struct spool *
queue_open_spool(const struct config *cfg, const char *cmd)
{
    struct spool *sp = NULL;
    int           e;

    if (spool_open(&sp, cfg->spool_dir, cfg->spool_fsync, 0) != SPOOL_OK) {
        e = errno;
        fprintf(stderr, "mtactl: %s: spool %s: %s%s\n", cmd, cfg->spool_dir,
            spool_errstr(sp), e == EACCES ? " (run as root or as the user "
            "mtad runs as)" : e == ENOENT ? " (has mtad ever started with "
            "this config?)" : "");
        spool_close(sp);
        return NULL;
    }
    return sp;
}


/*
 * queue_become_owner - as root, act with the effective ids of the spool's
 * owner: a state file written by root with mode 0600 would lock the
 * unprivileged workers out of their own message.
 */
static int
queue_become_owner(const struct config *cfg, struct queue_creds *c)
{
    struct stat st;

    c->dropped = 0;
    c->uid = geteuid();
    c->gid = getegid();
    if (c->uid != 0 || stat(cfg->spool_dir, &st) == -1 || st.st_uid == 0)
        return 0;
    if (setegid(st.st_gid) == -1 || seteuid(st.st_uid) == -1) {
        fprintf(stderr, "mtactl: cannot act as the spool's owner (uid %lu): "
            "%s\n", (unsigned long)st.st_uid, strerror(errno));
        (void)setegid(c->gid);
        return -1;
    }
    c->dropped = 1;
    return 0;
}


static void
queue_become_self(struct queue_creds *c)
{
    if (!c->dropped)
        return;
    /* uid first: only root may set the group back */
    if (seteuid(c->uid) == -1 || setegid(c->gid) == -1) {
        fprintf(stderr, "mtactl: cannot restore the effective ids: %s\n",
            strerror(errno));
        exit(MTACTL_FAIL);              /* fatal: would run with wrong ids */
    }
    c->dropped = 0;
}


/*
 * queue_norm_id - copy a user-given id into out in canonical form (upper
 * case: people retype ids from logs).  0 when it cannot be a queue id,
 * which also keeps "../etc" and friends away from the spool paths.
 */
static int
queue_norm_id(const char *in, char out[SPOOL_ID_SIZE])
{
    size_t i;

    if (strlen(in) != SPOOL_ID_LEN)
        return 0;
    for (i = 0; i < SPOOL_ID_LEN; i++)
        out[i] = in[i] >= 'a' && in[i] <= 'f' ? (char)(in[i] - 'a' + 'A') :
            in[i];
    out[SPOOL_ID_LEN] = '\0';
    return spool_id_valid(out);
}


/* ---- loading ---------------------------------------------------------- */

static int
queue_fileid_cmp(const void *a, const void *b)
{
    const struct queue_fileid *x = a, *y = b;

    if (x->dev != y->dev)
        return x->dev < y->dev ? -1 : 1;
    return x->ino < y->ino ? -1 : x->ino > y->ino;
}


/*
 * queue_locks_load - the files that hold a flock right now, from
 * /proc/locks ("1: FLOCK  ADVISORY  WRITE 4242 00:1a:2133387 0 EOF";
 * device numbers in hex, "->" lines are waiters).  Looking there instead
 * of probing with flock() never makes a starting attempt find the lock
 * taken.  When /proc/locks cannot be read, lk->ok stays 0 and
 * queue_state_of() probes instead.
 */
static void
queue_locks_load(struct queue_locks *lk)
{
    FILE              *f;
    char              *line = NULL, kind[16];
    size_t             cap = 0, alloc = 0;
    unsigned long      maj, min;
    unsigned long long ino;

    memset(lk, 0, sizeof(*lk));
    if ((f = fopen("/proc/locks", "re")) == NULL)
        return;
    while (getline(&line, &cap, f) != -1) {
        if (strstr(line, "->") != NULL || sscanf(line,
            "%*d: %15s %*s %*s %*d %lx:%lx:%llu", kind, &maj, &min,
            &ino) != 4 || strcmp(kind, "FLOCK") != 0)
            continue;
        if (lk->n == alloc) {
            alloc = alloc ? alloc * 2 : 64;
            lk->v = xrealloc(lk->v, alloc * sizeof(*lk->v));
        }
        lk->v[lk->n].dev = makedev(maj, min);
        lk->v[lk->n].ino = (ino_t)ino;
        lk->n++;
    }
    free(line);
    lk->ok = !ferror(f);
    fclose(f);
    if (lk->n > 0)
        qsort(lk->v, lk->n, sizeof(*lk->v), queue_fileid_cmp);
}


static void
queue_locks_free(struct queue_locks *lk)
{
    free(lk->v);
    lk->v = NULL;
    lk->n = 0;
}


/* queue_locked - does some process hold a flock on fd's file?  From the
 * /proc/locks snapshot; else a probe, dropped at once (a worker meeting
 * it retries a little later). */
static int
queue_locked(const struct queue_locks *lk, int fd)
{
    struct queue_fileid key;
    struct stat         st;

    if (lk != NULL && lk->ok && fstat(fd, &st) == 0) {
        key.dev = st.st_dev;
        key.ino = st.st_ino;
        return lk->n > 0 && bsearch(&key, lk->v, lk->n, sizeof(*lk->v),
            queue_fileid_cmp) != NULL;
    }
    if (flock(fd, LOCK_SH | LOCK_NB) == -1)
        return errno == EWOULDBLOCK;
    (void)flock(fd, LOCK_UN);
    return 0;
}


/* queue_state_of - what the message is doing. */
static enum queue_state
queue_state_of(const struct spool_env *env, int fd,
    const struct queue_locks *lk)
{
    if (queue_locked(lk, fd))
        return QS_ACTIVE;
    if (env->held)
        return QS_HELD;
    if (env->attempts > 0)
        return QS_DEFERRED;
    return QS_QUEUED;
}


static uint64_t
queue_since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}


static int
queue_match(const struct queue_item *it, const struct queue_filter *f,
    uint64_t now)
{
    const struct spool_env *env = it->env;
    size_t                  i;

    if (f->state >= 0 && (int)it->state != f->state)
        return 0;
    if (f->from != NULL && strcasestr(env->sender, f->from) == NULL)
        return 0;
    if (f->older_ms > 0 && queue_since(now, env->arrival_ms) < f->older_ms)
        return 0;
    if (f->to != NULL) {
        for (i = 0; i < env->nrcpt; i++)
            if (strcasestr(env->rcpt[i].addr, f->to) != NULL)
                break;
        if (i == env->nrcpt)
            return 0;
    }
    return 1;
}


/* queue_load - every message in the queue that passes the filter, sorted
 * by id (that is, by arrival). */
static int
queue_load(struct spool *sp, const struct queue_filter *f,
    struct queue_item **itemsp, size_t *np)
{
    char              (*ids)[SPOOL_ID_SIZE] = NULL;
    struct queue_item *items;
    struct queue_locks lk;
    size_t             nids = 0, i, n = 0;
    uint64_t           now = util_wall_ms();

    if (spool_list(sp, &ids, &nids) != SPOOL_OK)
        return -1;
    queue_locks_load(&lk);
    items = xcalloc(nids + 1, sizeof(*items));
    for (i = 0; i < nids; i++) {
        struct spool_env *env = NULL;
        int               fd = -1;
        off_t             off;
        int               rc;

        /* A message delivered since the listing is simply gone. */
        rc = spool_msg_open(sp, ids[i], 0, &env, &fd, &off);
        if (rc == SPOOL_ENOENT)
            continue;
        if (rc != SPOOL_OK) {
            fprintf(stderr, "mtactl: %s: %s (skipped)\n", ids[i],
                spool_errstr(sp));
            continue;
        }
        items[n].env = env;
        items[n].state = queue_state_of(env, fd, &lk);
        close(fd);
        if (queue_match(&items[n], f, now))
            n++;
        else
            spool_env_free(env);
    }
    free(ids);
    queue_locks_free(&lk);
    *itemsp = items;
    *np = n;
    return 0;
}


static void
queue_items_free(struct queue_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        spool_env_free(items[i].env);
    free(items);
}


/* ---- formatting ------------------------------------------------------- */

/* queue_age - "45s", "12m", "3h5m", "2d4h". */
static const char *
queue_age(uint64_t ms, char *buf, size_t sz)
{
    uint64_t s = ms / 1000;

    if (s < 60)
        snprintf(buf, sz, "%lus", (unsigned long)s);
    else if (s < 3600)
        snprintf(buf, sz, "%lum", (unsigned long)(s / 60));
    else if (s < 86400)
        snprintf(buf, sz, "%luh%lum", (unsigned long)(s / 3600),
            (unsigned long)(s % 3600 / 60));
    else
        snprintf(buf, sz, "%lud%luh", (unsigned long)(s / 86400),
            (unsigned long)(s % 86400 / 3600));
    return buf;
}


static const char *
queue_time(uint64_t ms, char *buf, size_t sz)
{
    time_t    t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, sz, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}


/* queue_put_esc - n bytes for a terminal, escaped by util_escape() (with
 * flags): a remote server's reply or a client's header cannot move the
 * cursor, retitle the window or fake lines. */
static void
queue_put_esc(const char *p, size_t n, unsigned flags)
{
    char   out[UTIL_ESC_ROOM(1024)];
    size_t used, len, step;

    while (n > 0) {
        step = n < 1024 ? n : 1024;
        len = util_escape(out, sizeof(out), p, step, flags, &used);
        fwrite(out, 1, len, stdout);
        p += used;
        n -= used;
    }
}


static void
queue_put_text(const char *s)
{
    queue_put_esc(s, strlen(s), 0);
}


/* queue_utf8_len - length of the valid UTF-8 sequence at p, 0 if none. */
static size_t
queue_utf8_len(const unsigned char *p)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t        n, i;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        lo = p[0] == 0xe0 ? 0xa0 : 0x80;
        hi = p[0] == 0xed ? 0x9f : 0xbf;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        lo = p[0] == 0xf0 ? 0x90 : 0x80;
        hi = p[0] == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}


/* queue_json_str - s as a JSON string literal (null for NULL); bytes that
 * are not UTF-8 become U+FFFD so the output always parses. */
static void
queue_json_str(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t               n;

    if (s == NULL) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    while (*p) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p++);
            continue;
        }
        if (*p < 0x20 || *p == 0x7f) {
            printf("\\u%04x", *p++);
            continue;
        }
        if ((n = queue_utf8_len(p)) == 0) {
            fputs("\\ufffd", stdout);
            p++;
            continue;
        }
        fwrite(p, 1, n, stdout);
        p += n;
    }
    putchar('"');
}


/* queue_last_error - the last reply of the first unfinished recipient. */
static const char *
queue_last_error(const struct spool_env *env)
{
    for (size_t i = 0; i < env->nrcpt; i++)
        if (env->rcpt[i].status != SPOOL_RCPT_SENT &&
            env->rcpt[i].last_reply != NULL)
            return env->rcpt[i].last_reply;
    return NULL;
}


static size_t
queue_pending(const struct spool_env *env)
{
    size_t n = 0;

    for (size_t i = 0; i < env->nrcpt; i++)
        if (env->rcpt[i].status == SPOOL_RCPT_PENDING)
            n++;
    return n;
}


static int
queue_rcpt_status(const struct spool_rcpt *r)
{
    return r->status >= SPOOL_RCPT_PENDING && r->status <= SPOOL_RCPT_BOUNCED ?
        r->status : SPOOL_RCPT_PENDING;
}


/* queue_print_detail - the second line of a message that has a history:
 * what happens next, the attempts so far and the last error. */
static void
queue_print_detail(const struct queue_item *it, uint64_t now)
{
    const struct spool_env *env = it->env;
    const char             *err = queue_last_error(env);
    char                    next[32];

    if (env->attempts == 0 && err == NULL && it->state != QS_HELD)
        return;
    printf("%17s", "");
    if (it->state == QS_HELD)
        fputs("on hold", stdout);
    else if (it->state == QS_ACTIVE)
        fputs("being delivered", stdout);
    else if (env->next_retry_ms > now)
        printf("next retry in %s", queue_age(env->next_retry_ms - now, next,
            sizeof(next)));
    else
        fputs("next retry now", stdout);
    printf(", %u attempt%s", env->attempts, env->attempts == 1 ? "" : "s");
    if (err != NULL) {
        fputs("; last error: ", stdout);
        queue_put_text(err);
    }
    putchar('\n');
}


/* queue_print_line - one message: id, size, arrival, age, state, sender
 * and the first pending recipients; then the detail line. */
static void
queue_print_line(const struct queue_item *it, uint64_t now)
{
    const struct spool_env *env = it->env;
    char                    at[32], age[32];
    size_t                  i, shown = 0, pending = queue_pending(env);

    printf("%s %9lu %s %6s %-8s <", env->id, (unsigned long)env->body_size,
        queue_time(env->arrival_ms, at, sizeof(at)),
        queue_age(queue_since(now, env->arrival_ms), age, sizeof(age)),
        queue_state_names[it->state]);
    queue_put_text(env->sender);
    fputs("> ->", stdout);
    for (i = 0; i < env->nrcpt && shown < QUEUE_SHOWN_RCPTS; i++) {
        if (env->rcpt[i].status != SPOOL_RCPT_PENDING)
            continue;
        fputs(shown ? ", <" : " <", stdout);
        queue_put_text(env->rcpt[i].addr);
        putchar('>');
        shown++;
    }
    if (pending > shown)
        printf(" (+%zu more)", pending - shown);
    if (pending == 0)
        fputs(" (no pending recipients)", stdout);
    putchar('\n');
    queue_print_detail(it, now);
}


static void
queue_print_json_item(const struct queue_item *it, uint64_t now)
{
    const struct spool_env *env = it->env;
    char                    at[32];
    size_t                  i;

    printf("{\"id\":\"%s\",\"size\":%lu,\"arrival\":\"%s\",\"arrival_ms\":%lu,"
        "\"age_s\":%lu,\"state\":\"%s\",\"held\":%s,\"sender\":", env->id,
        (unsigned long)env->body_size, queue_time(env->arrival_ms, at,
        sizeof(at)), (unsigned long)env->arrival_ms,
        (unsigned long)(queue_since(now, env->arrival_ms) / 1000),
        queue_state_names[it->state], env->held ? "true" : "false");
    queue_json_str(env->sender);
    printf(",\"attempts\":%u,\"next_retry_ms\":%lu,\"recipients\":[",
        env->attempts, (unsigned long)env->next_retry_ms);
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *r = &env->rcpt[i];

        printf("%s{\"address\":", i ? "," : "");
        queue_json_str(r->addr);
        printf(",\"status\":\"%s\",\"relay\":",
            queue_rcpt_status_names[queue_rcpt_status(r)]);
        queue_json_str(r->relay);
        fputs(",\"last_reply\":", stdout);
        queue_json_str(r->last_reply);
        putchar('}');
    }
    fputs("],\"last_error\":", stdout);
    queue_json_str(queue_last_error(env));
    putchar('}');
}


/* ---- per-domain tally ------------------------------------------------- */

struct queue_domain {
    char   *domain;
    size_t  rcpts;                  /* pending recipients */
    size_t  msgs;                   /* messages with at least one */
};

static int
queue_domain_cmp(const void *a, const void *b)
{
    const struct queue_domain *x = a, *y = b;

    if (x->rcpts != y->rcpts)
        return x->rcpts < y->rcpts ? 1 : -1;
    return strcmp(x->domain, y->domain);
}


static const char *
queue_domain_of(const char *addr)
{
    const char *at = strrchr(addr, '@');

    return at ? at + 1 : "(local)";
}


/* queue_by_domain - pending recipients and messages per destination
 * domain, most recipients first. */
static struct queue_domain *
queue_by_domain(const struct queue_item *items, size_t n, size_t *ndp)
{
    struct queue_domain *d = NULL;
    size_t               nd = 0, i, j, k, m;

    for (i = 0; i < n; i++) {
        const struct spool_env *env = items[i].env;

        for (j = 0; j < env->nrcpt; j++) {
            const char *dom = queue_domain_of(env->rcpt[j].addr);

            if (env->rcpt[j].status != SPOOL_RCPT_PENDING)
                continue;
            for (k = 0; k < nd; k++)
                if (strcasecmp(d[k].domain, dom) == 0)
                    break;
            if (k == nd) {
                d = xrealloc(d, (nd + 1) * sizeof(*d));
                d[nd].domain = xstrdup(dom);
                d[nd].rcpts = d[nd].msgs = 0;
                nd++;
            }
            d[k].rcpts++;
            /* the message counts once per domain: only at its first
             * pending recipient there */
            for (m = 0; m < j; m++)
                if (env->rcpt[m].status == SPOOL_RCPT_PENDING &&
                    strcasecmp(queue_domain_of(env->rcpt[m].addr), dom) == 0)
                    break;
            if (m == j)
                d[k].msgs++;
        }
    }
    if (nd > 0)
        qsort(d, nd, sizeof(*d), queue_domain_cmp);
    *ndp = nd;
    return d;
}


static void
queue_print_domains(const struct queue_item *items, size_t n, int json)
{
    struct queue_domain *d;
    size_t               nd, i;

    d = queue_by_domain(items, n, &nd);
    if (json)
        fputs(",\"by_domain\":[", stdout);
    else if (nd > 0)
        printf("%-40s %8s %8s\n", "DOMAIN", "MESSAGES", "RCPTS");
    for (i = 0; i < nd; i++) {
        if (json) {
            printf("%s{\"domain\":", i ? "," : "");
            queue_json_str(d[i].domain);
            printf(",\"messages\":%zu,\"recipients\":%zu}", d[i].msgs,
                d[i].rcpts);
        } else {
            queue_put_text(d[i].domain);
            printf("%*s %8zu %8zu\n", strlen(d[i].domain) < 40 ?
                (int)(40 - strlen(d[i].domain)) : 0, "", d[i].msgs,
                d[i].rcpts);
        }
        free(d[i].domain);
    }
    if (json)
        putchar(']');
    free(d);
}


/* ---- options ---------------------------------------------------------- */

static int
queue_parse_state(const char *s)
{
    for (size_t i = 0; i < ARRAY_LEN(queue_state_names); i++)
        if (strcmp(s, queue_state_names[i]) == 0)
            return (int)i;
    return -1;
}


/*
 * queue_parse_opts - the options of every queue command; allowed is the
 * set of option letters this command takes ("ftsodjabr").  Operands may
 * stand anywhere ("show --body ID"); they are collected, in order, into
 * o->ops.  Returns 0, or -1 after a usage message.
 */
static int
queue_parse_opts(int argc, char **argv, const char *allowed,
    struct queue_opts *o)
{
    static const struct option opts[] = {
        { "from", required_argument, NULL, 'f' },
        { "to", required_argument, NULL, 't' },
        { "state", required_argument, NULL, 's' },
        { "older-than", required_argument, NULL, 'o' },
        { "by-domain", no_argument, NULL, 'd' },
        { "json", no_argument, NULL, 'j' },
        { "all", no_argument, NULL, 'a' },
        { "body", no_argument, NULL, 'b' },
        { "raw", no_argument, NULL, 'r' },
        { NULL, 0, NULL, 0 }
    };
    int ch;

    memset(o, 0, sizeof(*o));
    o->f.state = -1;
    o->ops = xcalloc((size_t)argc + 1, sizeof(*o->ops));
    optind = 0;                         /* full reset: a fresh argv */
    opterr = 0;
    /* "-": operands come back in order as option 1, nothing is permuted */
    while ((ch = getopt_long(argc, argv, "-", opts, NULL)) != -1) {
        if (ch == 1) {
            o->ops[o->nops++] = optarg;
            continue;
        }
        if (ch == '?' || strchr(allowed, ch) == NULL) {
            fprintf(stderr, "mtactl: %s: unknown option or missing value: "
                "'%s' (mtactl help %s)\n", argv[0], argv[optind - 1],
                argv[0]);
            return -1;
        }
        switch (ch) {
        case 'f': o->f.from = optarg; break;
        case 't': o->f.to = optarg; break;
        case 'd': o->by_domain = 1; break;
        case 'j': o->json = 1; break;
        case 'a': o->all = 1; break;
        case 'b': o->body = 1; break;
        case 'r': o->raw = 1; break;
        case 's':
            if ((o->f.state = queue_parse_state(optarg)) < 0) {
                fprintf(stderr, "mtactl: %s: --state: expected queued, "
                    "active, deferred or held, got '%s'\n", argv[0], optarg);
                return -1;
            }
            break;
        case 'o':
            if (util_parse_duration(optarg, &o->f.older_ms) != 0 ||
                o->f.older_ms == 0) {
                fprintf(stderr, "mtactl: %s: --older-than: expected a "
                    "duration like 30m or 2d, got '%s'\n", argv[0], optarg);
                return -1;
            }
            break;
        }
    }
    return 0;
}


static int
queue_filtered(const struct queue_filter *f)
{
    return f->from != NULL || f->to != NULL || f->state >= 0 ||
        f->older_ms > 0;
}


/* ---- queue ------------------------------------------------------------ */

/* mtactl queue [filters] [--by-domain] [--json] */
static int
queue_cmd_list(int argc, char **argv, const struct config *cfg)
{
    struct queue_opts  o;
    struct queue_item *items;
    struct spool      *sp;
    size_t             n, i, counts[QS_NSTATES] = { 0 };
    uint64_t           bytes = 0, now = util_wall_ms();

    if (queue_parse_opts(argc, argv, "ftsodj", &o) < 0 || o.nops > 0) {
        if (o.nops > 0)
            fprintf(stderr, "mtactl: queue: unexpected '%s' (to see one "
                "message: mtactl show ID)\n", o.ops[0]);
        free(o.ops);
        return MTACTL_USAGE;
    }
    free(o.ops);
    if ((sp = queue_open_spool(cfg, "queue")) == NULL)
        return MTACTL_FAIL;
    if (queue_load(sp, &o.f, &items, &n) != 0) {
        fprintf(stderr, "mtactl: queue: %s\n", spool_errstr(sp));
        spool_close(sp);
        return MTACTL_FAIL;
    }
    spool_close(sp);
    for (i = 0; i < n; i++) {
        bytes += items[i].env->body_size;
        counts[items[i].state]++;
    }
    if (o.json) {
        fputs("{\"messages\":[", stdout);
        for (i = 0; i < n; i++) {
            if (i)
                putchar(',');
            queue_print_json_item(&items[i], now);
        }
        printf("],\"summary\":{\"messages\":%zu,\"bytes\":%lu,\"queued\":%zu,"
            "\"active\":%zu,\"deferred\":%zu,\"held\":%zu}", n,
            (unsigned long)bytes, counts[QS_QUEUED], counts[QS_ACTIVE],
            counts[QS_DEFERRED], counts[QS_HELD]);
    } else {
        if (n > 0)
            printf("%-16s %9s %-20s %6s %-8s %s\n", "ID", "SIZE", "ARRIVED",
                "AGE", "STATE", "SENDER -> RECIPIENTS");
        for (i = 0; i < n; i++)
            queue_print_line(&items[i], now);
        printf("-- %zu message%s, %lu bytes: %zu queued, %zu active, "
            "%zu deferred, %zu held\n", n, n == 1 ? "" : "s",
            (unsigned long)bytes, counts[QS_QUEUED], counts[QS_ACTIVE],
            counts[QS_DEFERRED], counts[QS_HELD]);
    }
    if (o.by_domain)
        queue_print_domains(items, n, o.json);
    if (o.json)
        fputs("}\n", stdout);
    queue_items_free(items, n);
    return MTACTL_OK;
}


/* ---- show ------------------------------------------------------------- */

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
    printf(">\nclient:      [%s]:%u helo=", env->client_ip ? env->client_ip :
        "", env->client_port);
    queue_put_text(env->helo ? env->helo : "-");
    printf("\nbody:        %s%s\nret:         %s\nenvid:       ",
        env->body == SMTP_BODY_BINARYMIME ? "BINARYMIME" :
        env->body == SMTP_BODY_8BITMIME ? "8BITMIME" : "7BIT",
        env->smtputf8 ? " SMTPUTF8" : "",
        env->ret == SMTP_RET_FULL ? "FULL" : env->ret == SMTP_RET_HDRS ?
        "HDRS" : "-");
    queue_put_text(env->envid ? env->envid : "-");
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
        putchar('\n');
        if (r->last_reply != NULL) {
            fputs("  last reply: ", stdout);
            queue_put_text(r->last_reply);
            putchar('\n');
        }
    }
}


/* queue_history_line - print line [p, e) when it is about id. */
static int
queue_history_line(const char *p, const char *e, const char *needle)
{
    size_t n = strlen(needle);

    for (const char *q = p; q + n <= e; q++) {
        q = memchr(q, needle[0], (size_t)(e - q));
        if (q == NULL || q + n > e)
            return 0;
        if (memcmp(q, needle, n) == 0) {
            fputs("  ", stdout);
            queue_put_esc(p, (size_t)(e - p), 0);
            putchar('\n');
            return 1;
        }
    }
    return 0;
}


/*
 * queue_show_history - the log lines about id: arrival, every attempt's
 * result per recipient, hold, DSN, removal.  Only when log.file is a file
 * (not "-": then journald has them); reads at most the last
 * QUEUE_HISTORY_SCAN bytes in QUEUE_COPY_CHUNK reads, and prints at most
 * QUEUE_HISTORY_MAX lines.
 */
static void
queue_show_history(const struct config *cfg, const char *id)
{
    static char buf[QUEUE_COPY_CHUNK];
    char        needle[SPOOL_ID_SIZE + 2];
    struct stat st;
    off_t       off;
    size_t      have = 0, shown = 0;
    ssize_t     got;
    int         fd;

    if (strcmp(cfg->log_file, "-") == 0) {
        printf("history:     in the system log (log.file is \"-\"): "
            "journalctl -u mtad -g %s\n", id);
        return;
    }
    if ((fd = open(cfg->log_file, O_RDONLY | O_CLOEXEC)) == -1 ||
        fstat(fd, &st) == -1) {
        printf("history:     %s: %s\n", cfg->log_file, strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    snprintf(needle, sizeof(needle), "%s:", id);
    printf("history:     (%s)\n", cfg->log_file);
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
                shown += (size_t)queue_history_line(p, nl, needle);
            p = nl + 1;
        }
        have = (size_t)(end - p);
        if (have == sizeof(buf))
            have = 0;                   /* a line longer than buf: drop */
        memmove(buf, p, have);
    }
    close(fd);
    if (shown == QUEUE_HISTORY_MAX)
        printf("  (only the first %d lines)\n", QUEUE_HISTORY_MAX);
}


/* mtactl show ID [--body | --raw] */
static int
queue_cmd_show(int argc, char **argv, const struct config *cfg)
{
    struct queue_opts  o;
    struct spool_env  *env = NULL;
    struct spool      *sp;
    char               id[SPOOL_ID_SIZE];
    int                fd = -1, rc;
    off_t              off;

    if (queue_parse_opts(argc, argv, "br", &o) < 0) {
        free(o.ops);
        return MTACTL_USAGE;
    }
    if (o.nops != 1 || (o.body && o.raw)) {
        fprintf(stderr, "usage: mtactl show ID [--body | --raw]\n");
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
    if (!o.raw) {
        struct queue_locks lk;

        queue_locks_load(&lk);
        queue_show_envelope(env, queue_state_of(env, fd, &lk),
            util_wall_ms());
        queue_locks_free(&lk);
        queue_show_history(cfg, id);
        putchar('\n');
    }
    fflush(stdout);
    /* the message is immutable once queued: reading it unlocked is safe
     * even while a worker delivers it */
    rc = queue_copy_body(fd, off, env->body_size, !o.body && !o.raw, o.raw);
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


/* ---- changes ---------------------------------------------------------- */

enum queue_op { QO_DELETE, QO_HOLD, QO_RELEASE, QO_FLUSH, QO_BOUNCE };

/*
 * queue_lock - open id with the delivery lock, waiting out an attempt in
 * progress for up to wait_ms.  SPOOL_OK, SPOOL_ENOENT (also when the lock
 * was won on a file its last holder had unlinked: delivered meanwhile),
 * SPOOL_ELOCKED (still busy after the wait) or another SPOOL_E*.
 */
static int
queue_lock(struct spool *sp, const char *cmd, const char *id,
    uint64_t wait_ms, struct spool_env **envp, int *fd)
{
    uint64_t    deadline = util_now_ms() + wait_ms;
    struct stat st;
    off_t       off;
    int         rc, told = 0;

    for (;;) {
        rc = spool_msg_open(sp, id, 1, envp, fd, &off);
        if (rc != SPOOL_ELOCKED || util_now_ms() >= deadline)
            break;
        if (!told) {
            fprintf(stderr, "mtactl: %s: %s: being delivered; waiting for "
                "the attempt to end\n", cmd, id);
            told = 1;
        }
        usleep(QUEUE_LOCK_POLL_US);
    }
    if (rc != SPOOL_OK)
        return rc;
    if (fstat(*fd, &st) == 0 && st.st_nlink == 0) {
        close(*fd);
        *fd = -1;
        spool_env_free(*envp);
        *envp = NULL;
        return SPOOL_ENOENT;
    }
    return SPOOL_OK;
}


/* queue_bounce_all - mark every pending recipient as failed, keeping the
 * last error in the reason the DSN shows. */
static void
queue_bounce_all(struct spool_env *env)
{
    char   why[2048];
    size_t i;

    for (i = 0; i < env->nrcpt; i++) {
        struct spool_rcpt *r = &env->rcpt[i];

        if (r->status != SPOOL_RCPT_PENDING)
            continue;
        if (r->last_reply != NULL)
            snprintf(why, sizeof(why), "%s; last error: %s",
                QUEUE_BOUNCE_TEXT, r->last_reply);
        else
            snprintf(why, sizeof(why), "%s", QUEUE_BOUNCE_TEXT);
        free(r->last_reply);
        r->last_reply = xstrdup(why);
        r->status = SPOOL_RCPT_BOUNCED;
    }
}


/* queue_apply - one operation on one locked message; *what is set to the
 * words that say what was done, *kick when the daemon should act now. */
static int
queue_apply(struct spool *sp, enum queue_op op, struct spool_env *env,
    const char **what, int *kick)
{
    *kick = op == QO_RELEASE || op == QO_BOUNCE ||
        (op == QO_FLUSH && !env->held);
    switch (op) {
    case QO_DELETE:
        *what = "deleted";
        return spool_remove(sp, env->id);
    case QO_HOLD:
        *what = env->held ? "already on hold" : "on hold";
        if (env->held)
            return SPOOL_OK;
        env->held = 1;
        break;
    case QO_RELEASE:
        *what = env->held ? "released; delivery now" :
            "was not on hold; delivery now";
        env->held = 0;
        env->next_retry_ms = 0;
        break;
    case QO_FLUSH:
        *what = env->held ? "on hold: not delivered until released" :
            "delivery now";
        env->next_retry_ms = 0;
        break;
    case QO_BOUNCE:
        *what = env->sender[0] == '\0' ? "bounced; null sender: removed "
            "without a DSN" : "returned to sender (DSN sent, then removed)";
        queue_bounce_all(env);
        env->held = 0;
        env->next_retry_ms = 0;
        break;
    }
    return spool_state_save(sp, env);
}


/* queue_one - lock id, change it, unlock; id gets the canonical id.
 * 1 done and the daemon should act now, 0 done, -1 failed (said why). */
static int
queue_one(struct spool *sp, enum queue_op op, const char *cmd,
    const char *arg, char id[SPOOL_ID_SIZE])
{
    struct spool_env *env = NULL;
    const char       *what = "";
    int               fd = -1, rc, kick = 0;

    if (!queue_norm_id(arg, id)) {
        fprintf(stderr, "mtactl: %s: '%s' is not a queue id (16 hex "
            "digits)\n", cmd, arg);
        return -1;
    }
    /* flush need not wait: the message is being tried right now */
    rc = queue_lock(sp, cmd, id, op == QO_FLUSH ? 0 : QUEUE_LOCK_WAIT_MS,
        &env, &fd);
    if (rc == SPOOL_ELOCKED && op == QO_FLUSH) {
        printf("%s: being delivered right now\n", id);
        return 0;
    }
    if (rc == SPOOL_ENOENT) {
        fprintf(stderr, "mtactl: %s: %s: no such message in the queue\n",
            cmd, id);
        return -1;
    }
    if (rc == SPOOL_ELOCKED) {
        fprintf(stderr, "mtactl: %s: %s: still being delivered after %ds; "
            "nothing changed, try again\n", cmd, id,
            QUEUE_LOCK_WAIT_MS / 1000);
        return -1;
    }
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: %s: %s: %s\n", cmd, id, spool_errstr(sp));
        return -1;
    }
    rc = queue_apply(sp, op, env, &what, &kick);
    close(fd);                              /* releases the lock */
    spool_env_free(env);
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: %s: %s: %s\n", cmd, id, spool_errstr(sp));
        return -1;
    }
    printf("%s: %s\n", id, what);
    mtactl_audit("%s %s (%s)", cmd, id, what);
    return kick;
}


/* queue_kick - ask the running daemon to act on id ("*": every message)
 * now.  1 sent, 0 mtad is not running (the change is picked up at start),
 * -1 another failure (said why). */
static int
queue_kick(const struct config *cfg, const char *cmd, const char *id)
{
    char        req[64];
    char       *reply = NULL;
    const char *why;
    int         rc, e;

    snprintf(req, sizeof(req), "kick %s", id);
    rc = ctl_request(cfg->control_socket, req, QUEUE_KICK_MS, &reply);
    e = errno;
    if (rc == CTL_OK || (rc == CTL_ESYS && (e == ENOENT ||
        e == ECONNREFUSED))) {
        free(reply);
        return rc == CTL_OK;
    }
    /* the change is in the spool all the same: say what did not happen */
    why = rc == CTL_ESYS ? strerror(e) : reply != NULL ? reply : "no reply";
    fprintf(stderr, "mtactl: %s: changed, but could not tell mtad (%s): "
        "%.*s%s\n", cmd, cfg->control_socket, (int)strcspn(why, "\n"), why,
        (rc == CTL_ESYS && e == EACCES) || (why != NULL &&
        strstr(why, "permission denied") != NULL) ? " (run as root or as a "
        "member of server.admin_group)" : "");
    free(reply);
    return -1;
}


/* queue_kick_all - the kicks after the changes; one "kick *" when every
 * message was flushed. */
static int
queue_kick_all(const struct config *cfg, const char *cmd,
    char (*ids)[SPOOL_ID_SIZE], size_t n, int everything)
{
    size_t i;
    int    rc = 1;

    if (n == 0)
        return 0;
    if (everything)
        rc = queue_kick(cfg, cmd, "*");
    else
        for (i = 0; i < n && rc == 1; i++)
            rc = queue_kick(cfg, cmd, ids[i]);
    if (rc == 0)
        printf("-- mtad is not running: the change%s take%s effect when it "
            "starts\n", n == 1 ? "" : "s", n == 1 ? "s" : "");
    return rc < 0 ? -1 : 0;
}


/* queue_select - the ids the command acts on: the operands, or the
 * messages that pass the filter.  NULL after an error message. */
static char **
queue_select(struct spool *sp, const struct queue_opts *o, const char *cmd,
    size_t *np)
{
    struct queue_item *items;
    char             **v;
    size_t             n, i;

    if (o->nops > 0) {
        v = xcalloc((size_t)o->nops + 1, sizeof(*v));
        for (i = 0; i < (size_t)o->nops; i++)
            v[i] = xstrdup(o->ops[i]);
        *np = (size_t)o->nops;
        return v;
    }
    if (queue_load(sp, &o->f, &items, &n) != 0) {
        fprintf(stderr, "mtactl: %s: %s\n", cmd, spool_errstr(sp));
        return NULL;
    }
    v = xcalloc(n + 1, sizeof(*v));
    for (i = 0; i < n; i++)
        v[i] = xstrdup(items[i].env->id);
    queue_items_free(items, n);
    *np = n;
    return v;
}


/* mtactl delete|hold|release|flush|bounce ID... | --all [filters] */
static int
queue_cmd_change(int argc, char **argv, const struct config *cfg,
    enum queue_op op)
{
    struct queue_opts   o;
    struct queue_creds  cr;
    struct spool       *sp = NULL;
    char              **sel = NULL, (*kick)[SPOOL_ID_SIZE] = NULL;
    size_t              n = 0, nkick = 0, i;
    int                 rc = MTACTL_FAIL, filtered, everything, r;

    if (queue_parse_opts(argc, argv, "ftsoa", &o) < 0) {
        free(o.ops);
        return MTACTL_USAGE;
    }
    filtered = queue_filtered(&o.f);
    /* flush with nothing named flushes everything, as postqueue -f does */
    if (op == QO_FLUSH && o.nops == 0 && !filtered)
        o.all = 1;
    /* ids, or --all with optional filters: never both, never neither (a
     * filter alone is not enough for a bulk change) */
    if ((o.nops > 0) == (o.all != 0) || (o.nops > 0 && filtered)) {
        fprintf(stderr, "usage: mtactl %s ID... | mtactl %s --all [--from S] "
            "[--to S] [--state S] [--older-than D]\n", argv[0], argv[0]);
        free(o.ops);
        return MTACTL_USAGE;
    }
    everything = op == QO_FLUSH && o.all && !filtered;
    if (queue_become_owner(cfg, &cr) < 0) {
        free(o.ops);
        return MTACTL_FAIL;
    }
    if ((sp = queue_open_spool(cfg, argv[0])) == NULL ||
        (sel = queue_select(sp, &o, argv[0], &n)) == NULL)
        goto fail;
    rc = MTACTL_OK;
    kick = xcalloc(n + 1, sizeof(*kick));
    for (i = 0; i < n; i++) {
        if ((r = queue_one(sp, op, argv[0], sel[i], kick[nkick])) < 0)
            rc = MTACTL_FAIL;
        else if (r > 0)
            nkick++;
    }
    if (o.all)
        printf("-- %s: %zu message%s\n", argv[0], n, n == 1 ? "" : "s");
fail:
    spool_close(sp);
    queue_become_self(&cr);
    /* the kicks go out as ourselves, who may reach the control socket */
    if (kick != NULL && queue_kick_all(cfg, argv[0], kick, nkick,
        everything) != 0)
        rc = MTACTL_FAIL;
    for (i = 0; sel != NULL && i < n; i++)
        free(sel[i]);
    free(sel);
    free(kick);
    free(o.ops);
    return rc;
}


int
mtactl_queue(int argc, char **argv, const struct config *cfg)
{
    static const struct { const char *name; enum queue_op op; } ops[] = {
        { "delete", QO_DELETE }, { "hold", QO_HOLD },
        { "release", QO_RELEASE }, { "flush", QO_FLUSH },
        { "bounce", QO_BOUNCE }
    };

    if (strcmp(argv[0], "queue") == 0)
        return queue_cmd_list(argc, argv, cfg);
    if (strcmp(argv[0], "show") == 0)
        return queue_cmd_show(argc, argv, cfg);
    for (size_t i = 0; i < ARRAY_LEN(ops); i++)
        if (strcmp(argv[0], ops[i].name) == 0)
            return queue_cmd_change(argc, argv, cfg, ops[i].op);
    fprintf(stderr, "mtactl: unknown queue command '%s'\n", argv[0]);
    return MTACTL_USAGE;
}


void
mtactl_queue_help(void)
{
    printf(
"Queue commands (they read the spool directly, so queue and show work while\n"
"mtad is stopped; changes take the same lock as a delivery attempt and so\n"
"happen between attempts, waiting for one in progress to end):\n"
"  queue [--from S] [--to S] [--state queued|active|deferred|held]\n"
"        [--older-than DUR] [--by-domain] [--json]\n"
"                     one line per message: id, size, arrival, age, state,\n"
"                     sender -> pending recipients; then next retry,\n"
"                     attempts and last error; a summary line.  --from/--to\n"
"                     match a substring (any case) of the sender / of any\n"
"                     recipient; --by-domain adds pending recipients per\n"
"                     destination domain; --json one JSON object\n"
"  show ID [--body | --raw]\n"
"                     envelope, each recipient's status, relay and last\n"
"                     reply, the log lines about the message (history),\n"
"                     then the headers; --body the whole message; --raw\n"
"                     only the message, byte for byte\n"
"  delete ID... | --all [filters]    remove from the queue, no DSN\n"
"  hold ID... | --all [filters]      keep, but do not deliver\n"
"  release ID... | --all [filters]   undo hold and deliver now\n"
"  flush [ID... | --all [filters]]   deliver now (nothing named: every\n"
"                                    message); held ones stay held, one\n"
"                                    being delivered is left to it\n"
"  bounce ID... | --all [filters]    give up now: a DSN to the sender for\n"
"                                    the pending recipients, then removed\n"
"  IDs may be given in lower case.  Exit: 0 all done, 1 some id failed\n"
"  (unknown, malformed, spool error), 2 usage.\n");
}
