/*
 * queue_list.c - mtactl queue: the listing (text or JSON), its summary
 * and the pending recipients per destination domain (--by-domain; with
 * --summary only the counts, by state and by domain, like qshape).  The
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

/* One destination domain: pending recipients, messages with at least one
 * there, and those messages by state (--summary). */
struct queue_domain {
    char   *domain;
    size_t  rcpts;                  /* pending recipients */
    size_t  msgs;                   /* messages with at least one */
    size_t  st[QS_NSTATES];         /* ... by state */
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
queue_tally_add(struct queue_tally *t, const struct queue_item *it)
{
    const struct spool_env *env = it->env;
    size_t                  j, m;

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
        }
    }
}


static void
queue_print_domains(struct queue_tally *t, int json, int states)
{
    size_t i, k;

    if (t->nd > 0)
        qsort(t->d, t->nd, sizeof(*t->d), queue_domain_cmp);
    if (json)
        fputs(",\"by_domain\":[", stdout);
    else if (t->nd > 0 && states)
        printf("%-40s %8s %8s %8s %8s %8s %8s\n", "DOMAIN", "MESSAGES",
            "RCPTS", "QUEUED", "ACTIVE", "DEFERRED", "HELD");
    else if (t->nd > 0)
        printf("%-40s %8s %8s\n", "DOMAIN", "MESSAGES", "RCPTS");
    for (i = 0; i < t->nd; i++) {
        const struct queue_domain *d = &t->d[i];

        if (json) {
            printf("%s{\"domain\":", i ? "," : "");
            queue_json_str(d->domain);
            printf(",\"messages\":%zu,\"recipients\":%zu", d->msgs,
                d->rcpts);
            for (k = 0; states && k < QS_NSTATES; k++)
                printf(",\"%s\":%zu", queue_state_names[k], d->st[k]);
            putchar('}');
        } else {
            queue_put_text(d->domain);
            printf("%*s %8zu %8zu", strlen(d->domain) < 40 ?
                (int)(40 - strlen(d->domain)) : 0, "", d->msgs, d->rcpts);
            for (k = 0; states && k < QS_NSTATES; k++)
                printf(" %8zu", d->st[k]);
            putchar('\n');
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
    struct queue_tally       tally;
};


/* queue_list_one - one message: printed at once (unless --summary) and
 * counted. */
static void
queue_list_one(const struct queue_item *it, void *arg)
{
    struct queue_list_run *r = arg;

    if (!r->o->summary) {
        if (r->o->json) {
            fputs(r->n ? "," : "{\"messages\":[", stdout);
            queue_print_json_item(it, r->now);
        } else {
            if (r->n == 0)
                printf("%-16s %9s %-20s %6s %-8s %s\n", "ID", "SIZE",
                    "ARRIVED", "AGE", "STATE", "SENDER -> RECIPIENTS");
            queue_print_line(it, r->now);
        }
    }
    r->n++;
    r->bytes += it->env->body_size;
    r->counts[it->state]++;
    if (r->o->by_domain)
        queue_tally_add(&r->tally, it);
}


/* mtactl queue [filters] [--by-domain] [--summary] [--json] */
int
queue_cmd_list(int argc, char **argv, const struct config *cfg)
{
    struct queue_opts     o;
    struct queue_list_run r;
    struct spool         *sp;
    int                   rc;

    if (queue_parse_opts(argc, argv, "ftsodjSFD", &o) < 0 || o.nops > 0) {
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
        fputs(o.summary ? "{\"summary\":{" : r.n ? "],\"summary\":{" :
            "{\"messages\":[],\"summary\":{", stdout);
        printf("\"messages\":%zu,\"bytes\":%lu,\"queued\":%zu,"
            "\"active\":%zu,\"deferred\":%zu,\"held\":%zu}", r.n,
            (unsigned long)r.bytes, r.counts[QS_QUEUED], r.counts[QS_ACTIVE],
            r.counts[QS_DEFERRED], r.counts[QS_HELD]);
    } else {
        printf("-- %zu message%s, %lu bytes: %zu queued, %zu active, "
            "%zu deferred, %zu held\n", r.n, r.n == 1 ? "" : "s",
            (unsigned long)r.bytes, r.counts[QS_QUEUED], r.counts[QS_ACTIVE],
            r.counts[QS_DEFERRED], r.counts[QS_HELD]);
    }
    if (o.by_domain)
        queue_print_domains(&r.tally, o.json, o.summary);
    if (o.json)
        fputs("}\n", stdout);
    queue_tally_free(&r.tally);
    return MTACTL_OK;
}
