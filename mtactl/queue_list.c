/*
 * queue_list.c - mtactl queue: the listing (text or JSON), its summary
 * and the pending recipients per destination domain (--by-domain; with
 * --summary only the counts: by state, then by domain and age, like
 * Postfix's qshape).  The
 * listing streams: each message is printed as its file is read and then
 * freed, so a million queued messages need no more memory than ten.
 */
#include <ctype.h>
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
#include "mtactl/queue_int.h"

/* ---- per-domain tally ------------------------------------------------- */

/* The age buckets of --summary, as Postfix's qshape: a message counts
 * in the first bucket whose limit (minutes) its age is under; the last
 * bucket holds the rest ("1280+"). */
static const unsigned queue_age_limits[] = {
    5, 10, 20, 40, 80, 160, 320, 640, 1280
};
#define QUEUE_AGE_BUCKETS (ARRAY_LEN(queue_age_limits) + 1)

/* One destination domain: pending recipients, messages with at least one
 * there, and those messages by state and by age (--summary). */
struct queue_domain {
    char   *domain;
    size_t  rcpts;                  /* pending recipients */
    size_t  msgs;                   /* messages with at least one */
    size_t  st[QS_NSTATES];         /* ... by state */
    size_t  age[QUEUE_AGE_BUCKETS]; /* ... by age */
};

/* The tally: entries in arrival order, found through an open-addressing
 * index on the lower-cased name, so a million messages to thousands of
 * domains cost one hash probe per recipient (the linear search it
 * replaces made that quadratic). */
struct queue_tally {
    struct queue_domain *d;
    size_t               nd, capd;
    size_t              *idx;       /* entry + 1; 0 = free */
    size_t               capidx;    /* a power of two */
};

static int
queue_domain_cmp(const void *a, const void *b)
{
    const struct queue_domain *x = a, *y = b;

    if (x->rcpts != y->rcpts)
        return x->rcpts < y->rcpts ? 1 : -1;
    return strcmp(x->domain, y->domain);
}


/* --summary orders by messages (qshape's T), then as --by-domain. */
static int
queue_domain_cmp_msgs(const void *a, const void *b)
{
    const struct queue_domain *x = a, *y = b;

    if (x->msgs != y->msgs)
        return x->msgs < y->msgs ? 1 : -1;
    return queue_domain_cmp(a, b);
}


/* queue_age_bucket - the --summary bucket of a message ms old. */
static size_t
queue_age_bucket(uint64_t ms)
{
    uint64_t min = ms / 60000;
    size_t   i;

    for (i = 0; i < ARRAY_LEN(queue_age_limits); i++)
        if (min < queue_age_limits[i])
            break;
    return i;
}


static const char *
queue_domain_of(const char *addr)
{
    const char *at = strrchr(addr, '@');

    return at ? at + 1 : "(local)";
}


static size_t
queue_domain_hash(const char *s)
{
    uint64_t h = 14695981039346656037ULL;       /* FNV-1a, any case */

    for (; *s; s++)
        h = (h ^ (unsigned char)tolower((unsigned char)*s)) *
            1099511628211ULL;
    return (size_t)h;
}


static void
queue_tally_grow(struct queue_tally *t)
{
    size_t i, j, cap = t->capidx ? t->capidx * 2 : 256;

    free(t->idx);
    t->idx = xcalloc(cap, sizeof(*t->idx));
    t->capidx = cap;
    for (i = 0; i < t->nd; i++) {
        j = queue_domain_hash(t->d[i].domain) & (cap - 1);
        while (t->idx[j] != 0)
            j = (j + 1) & (cap - 1);
        t->idx[j] = i + 1;
    }
}


/* queue_tally_get - the entry for dom, made when new. */
static struct queue_domain *
queue_tally_get(struct queue_tally *t, const char *dom)
{
    size_t j;

    if (2 * (t->nd + 1) > t->capidx)
        queue_tally_grow(t);
    j = queue_domain_hash(dom) & (t->capidx - 1);
    while (t->idx[j] != 0) {
        if (strcasecmp(t->d[t->idx[j] - 1].domain, dom) == 0)
            return &t->d[t->idx[j] - 1];
        j = (j + 1) & (t->capidx - 1);
    }
    if (t->nd == t->capd) {
        t->capd = t->capd ? t->capd * 2 : 64;
        t->d = xrealloc(t->d, t->capd * sizeof(*t->d));
    }
    memset(&t->d[t->nd], 0, sizeof(t->d[t->nd]));
    t->d[t->nd].domain = xstrdup(dom);
    t->idx[j] = ++t->nd;
    return &t->d[t->nd - 1];
}


/* queue_tally_add - one message's pending recipients, per domain; the
 * message counts once per domain (at its first pending recipient there). */
static void
queue_tally_add(struct queue_tally *t, const struct queue_item *it,
    uint64_t now)
{
    const struct spool_env *env = it->env;
    size_t                  j, m;
    size_t                  b = queue_age_bucket(queue_since(now,
                                env->arrival_ms));

    for (j = 0; j < env->nrcpt; j++) {
        const char          *dom = queue_domain_of(env->rcpt[j].addr);
        struct queue_domain *d;

        if (env->rcpt[j].status != SPOOL_RCPT_PENDING)
            continue;
        d = queue_tally_get(t, dom);
        d->rcpts++;
        for (m = 0; m < j; m++)
            if (env->rcpt[m].status == SPOOL_RCPT_PENDING &&
                strcasecmp(queue_domain_of(env->rcpt[m].addr), dom) == 0)
                break;
        if (m == j) {
            d->msgs++;
            d->st[it->state]++;
            d->age[b]++;
        }
    }
}


/* queue_print_shape - the text of --summary: qshape's table, TOTAL (the
 * sum of the rows) first, then the first top domains (0: all). */
static void
queue_print_shape(const struct queue_tally *t, size_t top)
{
    size_t tot[QUEUE_AGE_BUCKETS] = { 0 }, all = 0, i, k, n;

    for (i = 0; i < t->nd; i++) {
        all += t->d[i].msgs;
        for (k = 0; k < QUEUE_AGE_BUCKETS; k++)
            tot[k] += t->d[i].age[k];
    }
    printf("%-32s %6s", "DOMAIN", "T");
    for (k = 0; k < ARRAY_LEN(queue_age_limits); k++)
        printf(" %5u", queue_age_limits[k]);
    printf(" %5u+\n%-32s %6zu", queue_age_limits[k - 1], "TOTAL", all);
    for (k = 0; k < QUEUE_AGE_BUCKETS; k++)
        printf(" %5zu", tot[k]);
    putchar('\n');
    n = top > 0 && top < t->nd ? top : t->nd;
    for (i = 0; i < n; i++) {
        const struct queue_domain *d = &t->d[i];

        queue_put_text(d->domain);
        printf("%*s %6zu", strlen(d->domain) < 32 ?
            (int)(32 - strlen(d->domain)) : 0, "", d->msgs);
        for (k = 0; k < QUEUE_AGE_BUCKETS; k++)
            printf(" %5zu", d->age[k]);
        putchar('\n');
    }
    if (n < t->nd)
        printf("(%zu more domain%s)\n", t->nd - n, t->nd - n == 1 ? "" :
            "s");
}


static void
queue_print_domains(struct queue_tally *t, int json, int summary,
    size_t top)
{
    size_t i, k, n;

    if (t->nd > 0)
        qsort(t->d, t->nd, sizeof(*t->d), summary ? queue_domain_cmp_msgs :
            queue_domain_cmp);
    if (summary && !json) {
        queue_print_shape(t, top);
        return;
    }
    n = top > 0 && top < t->nd ? top : t->nd;
    if (json && summary) {
        fputs(",\"age_buckets_minutes\":[", stdout);
        for (k = 0; k < ARRAY_LEN(queue_age_limits); k++)
            printf("%s%u", k ? "," : "", queue_age_limits[k]);
        printf("],\"domains\":%zu", t->nd);
    }
    if (json)
        fputs(",\"by_domain\":[", stdout);
    else if (t->nd > 0)
        printf("%-40s %8s %8s\n", "DOMAIN", "MESSAGES", "RCPTS");
    for (i = 0; i < n; i++) {
        const struct queue_domain *d = &t->d[i];

        if (json) {
            printf("%s{\"domain\":", i ? "," : "");
            queue_json_str(d->domain);
            printf(",\"messages\":%zu,\"recipients\":%zu", d->msgs,
                d->rcpts);
            for (k = 0; summary && k < QS_NSTATES; k++)
                printf(",\"%s\":%zu", queue_state_names[k], d->st[k]);
            /* "ages": the messages per bucket of age_buckets_minutes,
             * the last one past its end */
            for (k = 0; summary && k < QUEUE_AGE_BUCKETS; k++)
                printf("%s%zu%s", k ? "," : ",\"ages\":[", d->age[k],
                    k + 1 == QUEUE_AGE_BUCKETS ? "]" : "");
            putchar('}');
        } else {
            queue_put_text(d->domain);
            printf("%*s %8zu %8zu\n", strlen(d->domain) < 40 ?
                (int)(40 - strlen(d->domain)) : 0, "", d->msgs, d->rcpts);
        }
    }
    if (json)
        putchar(']');
}


static void
queue_tally_free(struct queue_tally *t)
{
    for (size_t i = 0; i < t->nd; i++)
        free(t->d[i].domain);
    free(t->d);
    free(t->idx);
}


/* ---- queue ------------------------------------------------------------ */

struct queue_list_run {
    const struct queue_opts *o;
    uint64_t                 now, bytes;
    size_t                   n, counts[QS_NSTATES];
    size_t                   shown;     /* printed (the page) */
    int                      more;      /* a match past the page */
    char                     last[SPOOL_ID_SIZE];   /* last printed */
    struct queue_tally       tally;
};


/* queue_list_one - one message: printed at once (unless --summary) and
 * counted. */
static void
queue_list_one(const struct queue_item *it, void *arg)
{
    struct queue_list_run *r = arg;
    int                    page;

    /* the ids come in order (by id, both sources): a page is the first
     * --limit ids after --after */
    page = (r->o->after[0] == '\0' ||
        strcmp(it->env->id, r->o->after) > 0) &&
        (r->o->limit == 0 || r->shown < r->o->limit);
    if (!page && r->o->limit > 0 && r->shown == r->o->limit)
        r->more = 1;
    if (!r->o->summary && page) {
        util_strlcpy(r->last, it->env->id, sizeof(r->last));
        if (r->o->json) {
            fputs(r->shown ? "," : "{\"messages\":[", stdout);
            queue_print_json_item(it, r->now);
        } else {
            if (r->shown == 0)
                printf("%-16s %9s %-20s %6s %-8s %s\n", "ID", "SIZE",
                    "ARRIVED", "AGE", "STATE", "SENDER -> RECIPIENTS");
            queue_print_line(it, r->now);
        }
        r->shown++;
    }
    r->n++;
    r->bytes += it->env->body_size;
    r->counts[it->state]++;
    if (r->o->by_domain)
        queue_tally_add(&r->tally, it, r->now);
}


/* mtactl queue [filters] [--by-domain] [--summary] [--json] */
int
queue_cmd_list(int argc, char **argv, const struct config *cfg)
{
    struct queue_opts     o;
    struct queue_list_run r;
    struct spool         *sp;
    int                   rc;

    if (queue_parse_opts(argc, argv, "ftsodjSFDnAL", &o) < 0 || o.nops > 0) {
        if (o.nops > 0)
            fprintf(stderr, "mtactl: queue: unexpected '%s' (to see one "
                "message: mtactl show ID)\n", o.ops[0]);
        free(o.ops);
        return MTACTL_USAGE;
    }
    free(o.ops);
    memset(&r, 0, sizeof(r));
    r.o = &o;
    r.now = util_wall_ms();
    if (queue_dirs_plain(cfg, "queue") < 0) {
        queue_tally_free(&r.tally);
        return MTACTL_FAIL;
    }
    /* mtad running: its workers' index (queue_daemon.c); else the files */
    rc = o.source == QUEUE_SRC_FILES ? 1 :
        queue_scan_daemon(cfg, &o.f, queue_list_one, &r);
    if (rc < 0) {
        queue_tally_free(&r.tally);
        return MTACTL_FAIL;
    }
    if (rc > 0 && o.source == QUEUE_SRC_DAEMON) {
        fprintf(stderr, "mtactl: queue: --daemon: mtad did not answer (not "
            "running, or a reload or worker restart under way)\n");
        return MTACTL_FAIL;
    }
    if (rc > 0) {
        if ((sp = queue_open_spool(cfg, "queue")) == NULL)
            return MTACTL_FAIL;
        r.now = util_wall_ms();
        rc = queue_scan(sp, &o.f, queue_list_one, &r);
        if (rc != 0) {
            fprintf(stderr, "mtactl: queue: %s\n", spool_errstr(sp));
            spool_close(sp);
            queue_tally_free(&r.tally);
            return MTACTL_FAIL;
        }
        spool_close(sp);
    }
    if (o.json) {
        /* the same object as before streaming: messages, then summary */
        fputs(o.summary ? "{" : r.shown ? "]," : "{\"messages\":[],",
            stdout);
        if (!o.summary && (o.limit > 0 || o.after[0] != '\0')) {
            fputs("\"next\":", stdout);
            queue_json_str(r.more ? r.last : NULL);
            putchar(',');
        }
        fputs("\"summary\":{", stdout);
        printf("\"messages\":%zu,\"bytes\":%lu,\"queued\":%zu,"
            "\"active\":%zu,\"deferred\":%zu,\"held\":%zu}", r.n,
            (unsigned long)r.bytes, r.counts[QS_QUEUED], r.counts[QS_ACTIVE],
            r.counts[QS_DEFERRED], r.counts[QS_HELD]);
    } else {
        printf("-- %zu message%s, %lu bytes: %zu queued, %zu active, "
            "%zu deferred, %zu held\n", r.n, r.n == 1 ? "" : "s",
            (unsigned long)r.bytes, r.counts[QS_QUEUED], r.counts[QS_ACTIVE],
            r.counts[QS_DEFERRED], r.counts[QS_HELD]);
        if (r.more)
            printf("-- %zu shown; the next page: --after %s\n", r.shown,
                r.last);
    }
    if (o.by_domain)
        queue_print_domains(&r.tally, o.json, o.summary, o.top);
    if (o.json)
        fputs("}\n", stdout);
    queue_tally_free(&r.tally);
    return MTACTL_OK;
}
