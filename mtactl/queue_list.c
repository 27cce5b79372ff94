/*
 * queue_list.c - mtactl queue: the listing (text or JSON), its summary
 * and the pending recipients per destination domain (--by-domain).
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
#include "mtactl/queue_int.h"

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


/* ---- queue ------------------------------------------------------------ */

/* mtactl queue [filters] [--by-domain] [--json] */
int
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
