/*
 * queue.c - mtactl's queue commands: queue, show, delete, hold, release,
 * flush, bounce.
 *
 * PURPOSE   Inspect the spool and steer single messages, safely while mtad
 *           runs.
 * CONTRACT  Reading (queue, show) never takes a message away from a worker:
 *           it opens queue/<id> without the delivery lock and only probes
 *           the lock (LOCK_SH|LOCK_NB) to tell "active" messages apart.
 *           Changing (delete, hold, release, flush, bounce) takes the same
 *           flock(LOCK_EX) the delivering worker takes, waiting up to
 *           QUEUE_LOCK_WAIT_MS for an attempt in progress to end, so it
 *           never races a delivery: the change happens between attempts.
 *           release, flush and bounce then ask the master to "kick" the
 *           message so its owning worker acts at once; when mtad is not
 *           running the change still stands and is acted on at start.
 * FAILURE   Messages to stderr as "mtactl: <cmd>: <id>: <why>"; exit codes
 *           0 (every id done), 1 (some failed), 2 (usage).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>

#include "common/ctl.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "mtactl/mtactl.h"

#define QUEUE_LOCK_WAIT_MS  30000
#define QUEUE_BOUNCE_TEXT   "5.0.0 returned to sender by the administrator"

enum queue_state { QS_QUEUED, QS_ACTIVE, QS_DEFERRED, QS_HELD };

static const char *const queue_state_names[] = {
    "queued", "active", "deferred", "held"
};

struct queue_filter {
    const char *from;               /* substring of the sender */
    const char *to;                 /* substring of any recipient */
    int         state;              /* -1 any */
    uint64_t    older_ms;           /* 0 any */
};

struct queue_item {
    struct spool_env *env;
    enum queue_state  state;
};


/* queue_open_spool - the spool named by the config, for reading. */
static struct spool *
queue_open_spool(const struct config *cfg, const char *cmd)
{
    struct spool *sp = NULL;

    if (spool_open(&sp, cfg->spool_dir, 0, 0) != SPOOL_OK) {
        fprintf(stderr, "mtactl: %s: spool %s: %s\n", cmd, cfg->spool_dir,
            spool_errstr(sp));
        spool_close(sp);
        return NULL;
    }
    return sp;
}


/* queue_state_of - what the message is doing, probing the delivery lock. */
static enum queue_state
queue_state_of(const struct spool_env *env, int fd)
{
    if (flock(fd, LOCK_SH | LOCK_NB) == -1 && errno == EWOULDBLOCK)
        return QS_ACTIVE;
    if (env->held)
        return QS_HELD;
    if (env->attempts > 0)
        return QS_DEFERRED;
    return QS_QUEUED;
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
    if (f->older_ms > 0 && now - env->arrival_ms < f->older_ms)
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


/* queue_load - every message in the queue that passes the filter. */
static int
queue_load(struct spool *sp, const struct queue_filter *f,
    struct queue_item **itemsp, size_t *np)
{
    char              (*ids)[SPOOL_ID_SIZE] = NULL;
    struct queue_item *items;
    size_t             nids = 0, i, n = 0;
    uint64_t           now = util_wall_ms();

    if (spool_list(sp, &ids, &nids) != SPOOL_OK)
        return -1;
    items = xcalloc(nids + 1, sizeof(*items));
    for (i = 0; i < nids; i++) {
        struct spool_env *env = NULL;
        int               fd = -1;
        off_t             off;

        /* A message delivered since the listing is simply gone. */
        if (spool_msg_open(sp, ids[i], 0, &env, &fd, &off) != SPOOL_OK)
            continue;
        items[n].env = env;
        items[n].state = queue_state_of(env, fd);
        close(fd);
        if (queue_match(&items[n], f, now))
            n++;
        else
            spool_env_free(env);
    }
    free(ids);
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


/* queue_last_error - the last reply of the first recipient that has one. */
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


/* queue_print_line - one message: the summary line and, when deferred,
 * the retry and last-error line. */
static void
queue_print_line(const struct queue_item *it, uint64_t now)
{
    const struct spool_env *env = it->env;
    const char             *err = queue_last_error(env);
    char                    at[32], age[32], next[32];
    size_t                  i, shown = 0;

    printf("%s %9lu %s %6s %-8s <%s> ->", env->id,
        (unsigned long)env->body_size, queue_time(env->arrival_ms, at,
        sizeof(at)), queue_age(now - env->arrival_ms, age, sizeof(age)),
        queue_state_names[it->state], env->sender);
    for (i = 0; i < env->nrcpt && shown < 3; i++) {
        if (env->rcpt[i].status != SPOOL_RCPT_PENDING)
            continue;
        printf("%s<%s>", shown ? ", " : " ", env->rcpt[i].addr);
        shown++;
    }
    if (queue_pending(env) > shown)
        printf(" (+%zu more)", queue_pending(env) - shown);
    putchar('\n');
    if (it->state == QS_DEFERRED || err != NULL) {
        if (env->next_retry_ms > now)
            queue_age(env->next_retry_ms - now, next, sizeof(next));
        else
            snprintf(next, sizeof(next), "now");
        printf("%16s next retry %s%s%s, %u attempt%s\n", "",
            env->next_retry_ms > now ? "in " : "", next,
            err ? "; last: " : "", env->attempts,
            env->attempts == 1 ? "" : "s");
        if (err != NULL)
            printf("%16s last: %s\n", "", err);
    }
}


/* queue_json_str - a JSON string literal of s. */
static void
queue_json_str(const char *s)
{
    const unsigned char *p = (const unsigned char *)(s ? s : "");

    if (s == NULL) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}


static const char *const queue_rcpt_status_names[] = {
    "pending", "sent", "bounced"
};

static void
queue_print_json_item(const struct queue_item *it)
{
    const struct spool_env *env = it->env;
    size_t                  i;

    printf("{\"id\":\"%s\",\"size\":%lu,\"arrival_ms\":%lu,\"state\":\"%s\","
        "\"sender\":", env->id, (unsigned long)env->body_size,
        (unsigned long)env->arrival_ms, queue_state_names[it->state]);
    queue_json_str(env->sender);
    printf(",\"attempts\":%u,\"next_retry_ms\":%lu,\"recipients\":[",
        env->attempts, (unsigned long)env->next_retry_ms);
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *r = &env->rcpt[i];
        int st = r->status >= 0 && r->status <= SPOOL_RCPT_BOUNCED ?
            r->status : 0;

        printf("%s{\"address\":", i ? "," : "");
        queue_json_str(r->addr);
        printf(",\"status\":\"%s\",\"relay\":", queue_rcpt_status_names[st]);
        queue_json_str(r->relay);
        fputs(",\"last_reply\":", stdout);
        queue_json_str(r->last_reply);
        putchar('}');
    }
    fputs("],\"last_error\":", stdout);
    queue_json_str(queue_last_error(env));
    putchar('}');
}


/* queue_domain_count - tally of pending recipients per domain. */
struct queue_domain {
    char   *domain;
    size_t  rcpts;
    size_t  msgs;
};

static int
queue_domain_cmp(const void *a, const void *b)
{
    const struct queue_domain *x = a, *y = b;

    if (x->rcpts != y->rcpts)
        return x->rcpts < y->rcpts ? 1 : -1;
    return strcmp(x->domain, y->domain);
}

static struct queue_domain *
queue_by_domain(const struct queue_item *items, size_t n, size_t *ndp)
{
    struct queue_domain *d = NULL;
    size_t               nd = 0, i, j, k;

    for (i = 0; i < n; i++) {
        const struct spool_env *env = items[i].env;

        for (j = 0; j < env->nrcpt; j++) {
            const char *at = strrchr(env->rcpt[j].addr, '@');
            const char *dom = at ? at + 1 : "(local)";

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
            /* count the message once per domain */
            for (size_t m = 0; m < j; m++) {
                const char *a2 = strrchr(env->rcpt[m].addr, '@');
                if (env->rcpt[m].status == SPOOL_RCPT_PENDING &&
                    strcasecmp(a2 ? a2 + 1 : "(local)", dom) == 0)
                    goto seen;
            }
            d[k].msgs++;
        seen:
            ;
        }
    }
    qsort(d, nd, sizeof(*d), queue_domain_cmp);
    *ndp = nd;
    return d;
}


static int
queue_parse_state(const char *s)
{
    for (size_t i = 0; i < ARRAY_LEN(queue_state_names); i++)
        if (strcmp(s, queue_state_names[i]) == 0)
            return (int)i;
    return -1;
}


/* queue_parse_filters - the options every listing/bulk command takes.
 * Returns the index of the first operand, or -1 after a usage message. */
static int
queue_parse_filters(int argc, char **argv, struct queue_filter *f,
    int *json, int *by_domain, int *all, int *body)
{
    static const struct option opts[] = {
        { "from", required_argument, NULL, 'f' },
        { "to", required_argument, NULL, 't' },
        { "state", required_argument, NULL, 's' },
        { "older-than", required_argument, NULL, 'o' },
        { "json", no_argument, NULL, 'j' },
        { "by-domain", no_argument, NULL, 'd' },
        { "all", no_argument, NULL, 'a' },
        { "body", no_argument, NULL, 'b' },
        { NULL, 0, NULL, 0 }
    };
    int ch;

    memset(f, 0, sizeof(*f));
    f->state = -1;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (ch) {
        case 'f': f->from = optarg; break;
        case 't': f->to = optarg; break;
        case 'j': if (json) { *json = 1; break; } goto bad;
        case 'd': if (by_domain) { *by_domain = 1; break; } goto bad;
        case 'a': if (all) { *all = 1; break; } goto bad;
        case 'b': if (body) { *body = 1; break; } goto bad;
        case 's':
            if ((f->state = queue_parse_state(optarg)) < 0) {
                fprintf(stderr, "mtactl: %s: --state: expected queued, "
                    "active, deferred or held, got '%s'\n", argv[0], optarg);
                return -1;
            }
            break;
        case 'o':
            if (util_parse_duration(optarg, &f->older_ms) != 0) {
                fprintf(stderr, "mtactl: %s: --older-than: expected a "
                    "duration like 30m, got '%s'\n", argv[0], optarg);
                return -1;
            }
            break;
        default:
        bad:
            fprintf(stderr, "mtactl: %s: unknown option '%s' (mtactl help "
                "queue)\n", argv[0], argv[optind - 1]);
            return -1;
        }
    }
    return optind;
}


/* mtactl queue [filters] [--by-domain] [--json] */
static int
queue_cmd_list(int argc, char **argv, const struct config *cfg)
{
    struct queue_filter  f;
    struct queue_item   *items;
    struct spool        *sp;
    size_t               n, i, bytes = 0, counts[4] = { 0 };
    int                  json = 0, by_domain = 0, first;
    uint64_t             now = util_wall_ms();

    first = queue_parse_filters(argc, argv, &f, &json, &by_domain, NULL,
        NULL);
    if (first < 0 || first != argc) {
        if (first >= 0)
            fprintf(stderr, "mtactl: queue: unexpected '%s'\n", argv[first]);
        return MTACTL_USAGE;
    }
    if ((sp = queue_open_spool(cfg, "queue")) == NULL)
        return MTACTL_FAIL;
    if (queue_load(sp, &f, &items, &n) != 0) {
        fprintf(stderr, "mtactl: queue: %s\n", spool_errstr(sp));
        spool_close(sp);
        return MTACTL_FAIL;
    }
    for (i = 0; i < n; i++) {
        bytes += items[i].env->body_size;
        counts[items[i].state]++;
    }
    if (json) {
        fputs("{\"messages\":[", stdout);
        for (i = 0; i < n; i++) {
            if (i)
                putchar(',');
            queue_print_json_item(&items[i]);
        }
        printf("],\"summary\":{\"messages\":%zu,\"bytes\":%zu,\"queued\":%zu,"
            "\"active\":%zu,\"deferred\":%zu,\"held\":%zu}", n, bytes,
            counts[QS_QUEUED], counts[QS_ACTIVE], counts[QS_DEFERRED],
            counts[QS_HELD]);
    } else {
        if (n > 0)
            printf("%-16s %9s %-20s %6s %-8s %s\n", "ID", "SIZE", "ARRIVED",
                "AGE", "STATE", "SENDER -> RECIPIENTS");
        for (i = 0; i < n; i++)
            queue_print_line(&items[i], now);
        printf("-- %zu message%s, %zu bytes: %zu queued, %zu active, "
            "%zu deferred, %zu held\n", n, n == 1 ? "" : "s", bytes,
            counts[QS_QUEUED], counts[QS_ACTIVE], counts[QS_DEFERRED],
            counts[QS_HELD]);
    }
    if (by_domain) {
        struct queue_domain *d;
        size_t               nd;

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
            } else
                printf("%-40s %8zu %8zu\n", d[i].domain, d[i].msgs,
                    d[i].rcpts);
            free(d[i].domain);
        }
        if (json)
            putchar(']');
        free(d);
    }
    if (json)
        fputs("}\n", stdout);
    queue_items_free(items, n);
    spool_close(sp);
    return MTACTL_OK;
}


/* queue_copy_body - the message body to stdout. */
static int
queue_copy_body(int fd, off_t off, uint64_t size, int headers_only)
{
    char     buf[65536];
    uint64_t left = size;
    int      line_start = 1;

    while (left > 0) {
        size_t  want = left < sizeof(buf) ? (size_t)left : sizeof(buf);
        ssize_t got = pread(fd, buf, want, off);

        if (got <= 0)
            return -1;
        if (headers_only) {
            for (ssize_t i = 0; i < got; i++) {
                if (line_start && (buf[i] == '\r' || buf[i] == '\n')) {
                    fwrite(buf, 1, (size_t)i, stdout);
                    return 0;
                }
                line_start = buf[i] == '\n';
            }
        }
        fwrite(buf, 1, (size_t)got, stdout);
        off += got;
        left -= (uint64_t)got;
    }
    return 0;
}


/* mtactl show ID [--body] */
static int
queue_cmd_show(int argc, char **argv, const struct config *cfg)
{
    struct queue_filter  f;
    struct spool_env    *env = NULL;
    struct spool        *sp;
    const char          *id;
    char                 at[32], next[32];
    int                  body = 0, first, fd = -1, rc;
    off_t                off;
    size_t               i;
    uint64_t             now = util_wall_ms();

    first = queue_parse_filters(argc, argv, &f, NULL, NULL, NULL, &body);
    if (first < 0 || argc - first != 1) {
        if (first >= 0)
            fprintf(stderr, "usage: mtactl show ID [--body]\n");
        return MTACTL_USAGE;
    }
    id = argv[first];
    if (!spool_id_valid(id)) {
        fprintf(stderr, "mtactl: show: '%s' is not a queue id\n", id);
        return MTACTL_FAIL;
    }
    if ((sp = queue_open_spool(cfg, "show")) == NULL)
        return MTACTL_FAIL;
    rc = spool_msg_open(sp, id, 0, &env, &fd, &off);
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: show: %s: %s\n", id, rc == SPOOL_ENOENT ?
            "no such message in the queue" : spool_errstr(sp));
        spool_close(sp);
        return MTACTL_FAIL;
    }
    printf("id: %s\nstate: %s\narrival: %s\nsize: %lu\nsender: <%s>\n",
        env->id, queue_state_names[queue_state_of(env, fd)],
        queue_time(env->arrival_ms, at, sizeof(at)),
        (unsigned long)env->body_size, env->sender);
    printf("client: [%s]:%u helo=%s\nbody: %s%s\nret: %s\nenvid: %s\n",
        env->client_ip ? env->client_ip : "", env->client_port,
        env->helo ? env->helo : "-",
        env->body == SPOOL_BODY_BINARYMIME ? "BINARYMIME" :
        env->body == SPOOL_BODY_8BITMIME ? "8BITMIME" : "7BIT",
        env->smtputf8 ? " SMTPUTF8" : "",
        env->ret == SPOOL_RET_FULL ? "FULL" : env->ret == SPOOL_RET_HDRS ?
        "HDRS" : "-", env->envid ? env->envid : "-");
    if (env->next_retry_ms > now)
        queue_age(env->next_retry_ms - now, next, sizeof(next));
    else
        snprintf(next, sizeof(next), "now");
    printf("attempts: %u\nnext retry: %s\nheld: %s\n", env->attempts, next,
        env->held ? "yes" : "no");
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *r = &env->rcpt[i];
        int st = r->status >= 0 && r->status <= SPOOL_RCPT_BOUNCED ?
            r->status : 0;

        printf("recipient: <%s> %s%s%s%s%s\n", r->addr,
            queue_rcpt_status_names[st], r->relay ? " relay=" : "",
            r->relay ? r->relay : "", r->last_reply ? " (" : "",
            r->last_reply ? r->last_reply : "");
        if (r->last_reply)
            fputs(")\n" + 1, stdout);   /* keeps the line whole */
        if (r->last_reply)
            printf("\n");
    }
    printf("\n");
    fflush(stdout);
    rc = queue_copy_body(fd, off, env->body_size, !body);
    fflush(stdout);
    close(fd);
    spool_env_free(env);
    spool_close(sp);
    if (rc != 0) {
        fprintf(stderr, "mtactl: show: %s: read failed\n", id);
        return MTACTL_FAIL;
    }
    return MTACTL_OK;
}


/* queue_lock - open id with the delivery lock, waiting out an attempt in
 * progress.  SPOOL_OK, SPOOL_ENOENT, SPOOL_ELOCKED (still busy) or other. */
static int
queue_lock(struct spool *sp, const char *id, struct spool_env **envp,
    int *fd)
{
    uint64_t deadline = util_now_ms() + QUEUE_LOCK_WAIT_MS;
    off_t    off;
    int      rc;

    for (;;) {
        rc = spool_msg_open(sp, id, 1, envp, fd, &off);
        if (rc != SPOOL_ELOCKED || util_now_ms() >= deadline)
            return rc;
        usleep(20 * 1000);
    }
}


/* queue_kick - ask the running daemon to act on id now; quiet when mtad
 * is not running (the change is picked up at start). */
static void
queue_kick(const struct config *cfg, const char *id)
{
    char  req[64];
    char *reply = NULL;

    snprintf(req, sizeof(req), "kick %s", id);
    (void)ctl_request(cfg->control_socket, req, 5000, &reply);
    free(reply);
}


enum queue_op { QO_DELETE, QO_HOLD, QO_RELEASE, QO_FLUSH, QO_BOUNCE };

static const char *const queue_op_done[] = {
    "deleted", "held", "released", "scheduled for delivery now",
    "returned to sender"
};

/* queue_apply - one operation on one locked message. */
static int
queue_apply(struct spool *sp, enum queue_op op, struct spool_env *env)
{
    size_t i;

    switch (op) {
    case QO_DELETE:
        return spool_remove(sp, env->id);
    case QO_HOLD:
        env->held = 1;
        break;
    case QO_RELEASE:
        env->held = 0;
        env->next_retry_ms = 0;
        break;
    case QO_FLUSH:
        env->next_retry_ms = 0;
        break;
    case QO_BOUNCE:
        for (i = 0; i < env->nrcpt; i++) {
            if (env->rcpt[i].status != SPOOL_RCPT_PENDING)
                continue;
            env->rcpt[i].status = SPOOL_RCPT_BOUNCED;
            free(env->rcpt[i].last_reply);
            env->rcpt[i].last_reply = xstrdup(QUEUE_BOUNCE_TEXT);
        }
        env->held = 0;
        env->next_retry_ms = 0;
        break;
    }
    return spool_state_save(sp, env);
}


static int
queue_one(const struct config *cfg, struct spool *sp, enum queue_op op,
    const char *cmd, const char *id)
{
    struct spool_env *env = NULL;
    int               fd = -1, rc;

    if (!spool_id_valid(id)) {
        fprintf(stderr, "mtactl: %s: '%s' is not a queue id\n", cmd, id);
        return -1;
    }
    rc = queue_lock(sp, id, &env, &fd);
    if (rc == SPOOL_ENOENT) {
        fprintf(stderr, "mtactl: %s: %s: no such message in the queue\n",
            cmd, id);
        return -1;
    }
    if (rc == SPOOL_ELOCKED) {
        fprintf(stderr, "mtactl: %s: %s: still being delivered after %ds; "
            "try again\n", cmd, id, QUEUE_LOCK_WAIT_MS / 1000);
        return -1;
    }
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: %s: %s: %s\n", cmd, id, spool_errstr(sp));
        return -1;
    }
    rc = queue_apply(sp, op, env);
    close(fd);                              /* releases the lock */
    spool_env_free(env);
    if (rc != SPOOL_OK) {
        fprintf(stderr, "mtactl: %s: %s: %s\n", cmd, id, spool_errstr(sp));
        return -1;
    }
    if (op == QO_RELEASE || op == QO_FLUSH || op == QO_BOUNCE)
        queue_kick(cfg, id);
    printf("%s: %s\n", id, queue_op_done[op]);
    return 0;
}


/* mtactl delete|hold|release|flush|bounce ID... | --all [filters] */
static int
queue_cmd_change(int argc, char **argv, const struct config *cfg,
    enum queue_op op)
{
    struct queue_filter  f;
    struct queue_item   *items = NULL;
    struct spool        *sp;
    size_t               n = 0, i;
    int                  all = 0, first, failed = 0, filtered;

    first = queue_parse_filters(argc, argv, &f, NULL, NULL, &all, NULL);
    if (first < 0)
        return MTACTL_USAGE;
    filtered = f.from || f.to || f.state >= 0 || f.older_ms;
    /* flush with no ids flushes everything, as postqueue -f does */
    if (op == QO_FLUSH && first == argc && !filtered)
        all = 1;
    if ((all || filtered) == (first < argc)) {
        fprintf(stderr, "usage: mtactl %s ID... | --all [--from S] [--to S] "
            "[--state S] [--older-than D]\n", argv[0]);
        return MTACTL_USAGE;
    }
    if ((sp = queue_open_spool(cfg, argv[0])) == NULL)
        return MTACTL_FAIL;
    if (first < argc) {
        for (i = (size_t)first; i < (size_t)argc; i++)
            failed |= queue_one(cfg, sp, op, argv[0], argv[i]) != 0;
    } else {
        if (queue_load(sp, &f, &items, &n) != 0) {
            fprintf(stderr, "mtactl: %s: %s\n", argv[0], spool_errstr(sp));
            spool_close(sp);
            return MTACTL_FAIL;
        }
        for (i = 0; i < n; i++)
            failed |= queue_one(cfg, sp, op, argv[0], items[i].env->id) != 0;
        printf("-- %s: %zu message%s\n", argv[0], n, n == 1 ? "" : "s");
        queue_items_free(items, n);
    }
    spool_close(sp);
    return failed ? MTACTL_FAIL : MTACTL_OK;
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
"Queue commands (safe while mtad runs: changes take the same lock as a\n"
"delivery, so they happen between attempts):\n"
"  queue [--from S] [--to S] [--state queued|active|deferred|held]\n"
"        [--older-than DUR] [--by-domain] [--json]\n"
"                     one line per message: id, size, arrival, age, state,\n"
"                     sender -> pending recipients; retry time and last\n"
"                     error for deferred ones; a summary line\n"
"  show ID [--body]   envelope, per-recipient history, headers (or all)\n"
"  delete ID... | --all [filters]    remove from the queue, no bounce\n"
"  hold ID... | --all [filters]      keep, but do not deliver\n"
"  release ID... | --all [filters]   undo hold and deliver now\n"
"  flush [ID...] [filters]           deliver now (no ids: every message)\n"
"  bounce ID... | --all [filters]    return to sender now (a DSN)\n");
}
