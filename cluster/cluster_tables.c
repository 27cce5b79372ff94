/*
 * cluster_tables.c - the node tables of the status page across the
 * fleet: auto-bans, AUTH failure counts, queue quota usage
 * (cluster_int.h).
 *
 * PURPOSE   Bans: every live local ban goes into the fleet's ban hash
 *           (address -> end, the later end wins); every fleet ban this
 *           node lacks is added to its table for the time it has left, so
 *           the next connection from it is refused here too.
 *           AUTH failures: per 28-bit address key (status.h), this node's
 *           new failures since the last cycle are added to the fleet's
 *           count (which expires as the local window: 10 minutes after
 *           its last count); the difference between the fleet's count and
 *           the local one is added locally, so limits.auth max_failures
 *           holds for the sum.  Quotas: each row's usage on this node goes
 *           into a lease hash per key (node -> "msgs:bytes:expiry"), and
 *           the others' sums into the row's fleet column; keys other nodes
 *           use are listed in an index ZSET so that a node that has not
 *           seen a key yet still counts the others' usage.
 * FALLBACK  No Redis: each node assumes the others use what it uses
 *           (quotas: the fleet column is (nodes - 1) x its own usage;
 *           AUTH: each local failure counts nodes times), which is the
 *           limit divided by the node count.  Bans stay local.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "cluster/cluster_int.h"

#define CL_AUTH_WINDOW_S 600        /* smtpd's SMTPD_AUTH_WINDOW_S */
#define CL_BAN_MAX       1024       /* bans published per cycle */
#define CL_AUTH_MAX      4096
#define CL_PAIRS_PER_CMD 40         /* field/value pairs in one command */
#define CL_AUTH_MEMO     8192       /* power of two */
#define CL_QINDEX_TTL_MS 60000

/* what the last cycle merged per AUTH key */
struct cl_auth_memo { uint32_t key; int32_t merged, at_queue; };
static struct cl_auth_memo cl_memo[CL_AUTH_MEMO];

static struct cl_auth_memo *
cl_memo_of(uint32_t key, int add)
{
    size_t i, h = (key * 2654435761u) & (CL_AUTH_MEMO - 1);

    for (i = 0; i < 64; i++) {
        struct cl_auth_memo *m = &cl_memo[(h + i) & (CL_AUTH_MEMO - 1)];

        if (m->key == key)
            return m;
        if (m->key == 0 && add) {
            memset(m, 0, sizeof(*m));
            m->key = key;
            return m;
        }
    }
    return NULL;
}

static uint32_t
cl_now_s(void)
{
    return (uint32_t)(util_now_ms() / 1000);
}

/* ---- bans ---- */

static void
cl_bans_queue(struct cl_agent *g)
{
    static struct status_ban b[CL_BAN_MAX];
    size_t n = status_ban_list(g->st, cl_now_s(), b, CL_BAN_MAX), i = 0;
    char   key[200], ip[INET6_ADDRSTRLEN];

    char   tomb[200];
    uint32_t head = __atomic_load_n(&g->page->unban_head, __ATOMIC_ACQUIRE);

    snprintf(key, sizeof(key), "%sbans", g->prefix);
    snprintf(tomb, sizeof(tomb), "%sunbans", g->prefix);
    /* lifted here by mtactl: a tombstone every node honours for a while */
    if (head - g->unban_tail > CLUSTER_UNBANS)
        g->unban_tail = head - CLUSTER_UNBANS;
    for (; g->unban_tail != head; g->unban_tail++) {
        cl_eval(g, CL_S_SET, 1);
        cl_arg(g, "%s", tomb);
        cl_arg(g, "ban");
        cl_arg(g, "0");
        cl_arg(g, "%s", g->page->unban[g->unban_tail % CLUSTER_UNBANS]);
        cl_arg(g, "%u", CLUSTER_UNBAN_MS);
        cl_send(g, &(struct cl_pend){ CL_W_IGNORE, 0, 0, 0, NULL });
    }
    do {
        size_t k;

        cl_eval(g, CL_S_SET, 2);
        cl_arg(g, "%s", key);
        cl_arg(g, "%s", tomb);
        cl_arg(g, "ban");
        cl_arg(g, "0");
        for (k = 0; k < CL_PAIRS_PER_CMD && i < n; k++, i++) {
            if (util_sockaddr_ip((struct sockaddr *)&b[i].addr, ip,
                sizeof(ip)) == NULL)
                continue;
            cl_arg(g, "%s", ip);
            cl_arg(g, "%" PRIu64, (uint64_t)b[i].left_s * 1000);
        }
        /* only the last chunk's answer is read: it holds them all */
        cl_send(g, &(struct cl_pend){ i >= n ? CL_W_BANS : CL_W_IGNORE, 0, 0,
            0, NULL });
    } while (i < n);
}

static int
cl_parse_ip(const char *s, struct sockaddr_storage *ss)
{
    struct sockaddr_in  *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof(*ss));
    if (inet_pton(AF_INET, s, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, s, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        return 0;
    }
    return -1;
}

static void
cl_bans_reply(struct cl_agent *g, const redisReply *r)
{
    struct sockaddr_storage ss;
    uint32_t                now = cl_now_s();
    size_t                  i;

    if (r->type != REDIS_REPLY_ARRAY)
        return;
    g->fleet_bans = 0;
    g->nban_list = 0;
    for (i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *a = r->element[i], *left = r->element[i + 1];
        long long         ms = left->type == REDIS_REPLY_INTEGER ?
            left->integer : 0;

        if (ms > 0)
            g->fleet_bans++;
        if (a->type == REDIS_REPLY_STRING && ms > 0 &&
            g->nban_list < CL_SHOWN) {
            util_strlcpy(g->ban_list[g->nban_list].addr, a->str,
                sizeof(g->ban_list[0].addr));
            g->ban_list[g->nban_list++].left_ms = ms > 0 ? (uint64_t)ms : 0;
        }

        if (a->type != REDIS_REPLY_STRING || cl_parse_ip(a->str, &ss) < 0)
            continue;
        if (ms < 0) {               /* lifted on some node: here too */
            (void)status_ban_del(g->st, (struct sockaddr *)&ss, now);
            continue;
        }
        if (ms == 0)
            continue;
        if (!status_ban_check(g->st, (struct sockaddr *)&ss, now))
            (void)status_ban_add(g->st, (struct sockaddr *)&ss, now,
                (uint32_t)((ms + 999) / 1000));
    }
}

/* ---- AUTH failures ---- */

static int
cl_key_cmp(const void *a, const void *b)
{
    uint32_t x = ((const struct status_auth_key *)a)->key;
    uint32_t y = ((const struct status_auth_key *)b)->key;

    return x < y ? -1 : x > y;
}

/* cl_auth_local - the live keys with their counts summed, sorted */
static size_t
cl_auth_local(struct cl_agent *g, struct status_auth_key *k)
{
    size_t n = status_auth_list(g->st, cl_now_s(), CL_AUTH_WINDOW_S, k,
        CL_AUTH_MAX), i, o = 0;

    qsort(k, n, sizeof(*k), cl_key_cmp);
    for (i = 0; i < n; i++) {
        if (o > 0 && k[o - 1].key == k[i].key)
            k[o - 1].count += k[i].count;
        else
            k[o++] = k[i];
    }
    return o;
}

static void
cl_auth_queue(struct cl_agent *g)
{
    static struct status_auth_key k[CL_AUTH_MAX];
    size_t n = cl_auth_local(g, k), i = 0, j;
    char   key[200];

    for (j = 0; j < CL_AUTH_MEMO; j++)
        cl_memo[j].at_queue = 0;
    snprintf(key, sizeof(key), "%sauth", g->prefix);
    do {
        size_t c = 0;

        cl_eval(g, CL_S_SET, 1);
        cl_arg(g, "%s", key);
        cl_arg(g, "count");
        cl_arg(g, "%u", CL_AUTH_WINDOW_S * 1000u);
        for (; c < CL_PAIRS_PER_CMD && i < n; i++) {
            struct cl_auth_memo *m = cl_memo_of(k[i].key, 1);
            int32_t              d;

            if (m == NULL)
                continue;
            d = (int32_t)k[i].count - m->merged;
            m->at_queue = (int32_t)k[i].count;
            if (d == 0)
                continue;
            cl_arg(g, "%07" PRIx32, k[i].key);
            cl_arg(g, "%" PRId32, d);
            c++;
        }
        cl_send(g, &(struct cl_pend){ i >= n ? CL_W_AUTH : CL_W_IGNORE, 0, 0,
            0, NULL });
    } while (i < n);
}

static void
cl_auth_reply(struct cl_agent *g, const redisReply *r)
{
    uint32_t now = cl_now_s();
    size_t   i;

    if (r->type != REDIS_REPLY_ARRAY)
        return;
    g->fleet_auth = r->elements / 2;
    g->nauth_list = 0;
    for (i = 0; i + 1 < r->elements; i += 2) {
        const redisReply    *f = r->element[i], *c = r->element[i + 1];
        struct cl_auth_memo *m;
        uint32_t             key;
        long long            fleet;

        if (f->type != REDIS_REPLY_STRING || c->type != REDIS_REPLY_INTEGER)
            continue;
        key = (uint32_t)strtoul(f->str, NULL, 16);
        fleet = c->integer;
        if (g->nauth_list < CL_SHOWN) {
            g->auth_list[g->nauth_list].key = key;
            g->auth_list[g->nauth_list++].count = fleet;
        }
        if (key == 0 || (m = cl_memo_of(key, 1)) == NULL)
            continue;
        /* others' failures since: what the fleet has beyond ours */
        if (fleet != m->at_queue)
            status_auth_add_key(g->st, key, now, CL_AUTH_WINDOW_S,
                (int)(fleet - m->at_queue));
        m->merged = (int32_t)fleet;
    }
}

/* ---- quotas ---- */

static void
cl_quota_key(struct cl_agent *g, const struct status_quota_row *q, char *out,
    size_t outsz)
{
    snprintf(out, outsz, "%squota:%u:%.*s", g->prefix, q->kind,
        (int)q->klen, q->key);
}

static void
cl_quotas_queue(struct cl_agent *g)
{
    uint64_t now = util_wall_ms();
    char     key[400], idx[200];
    size_t   i;

    snprintf(idx, sizeof(idx), "%squotas", g->prefix);
    for (i = 0; i < STATUS_QUOTA_SLOTS; i++) {
        const struct status_quota_row *q = &g->st->quota[i];
        uint64_t tag = __atomic_load_n(&q->tag, __ATOMIC_ACQUIRE);
        int64_t  m, b;

        if (tag == 0 || tag == STATUS_QUOTA_FREEING ||
            __atomic_load_n(&q->ready, __ATOMIC_ACQUIRE) != tag)
            continue;
        status_quota_local(g->st, (int)i, &m, &b);
        cl_quota_key(g, q, key, sizeof(key));
        cl_eval(g, CL_S_LEASE, 1);
        cl_arg(g, "%s", key);
        cl_arg(g, "%s", g->node);
        cl_arg(g, "%" PRId64, m > 0 ? m : 0);
        cl_arg(g, "%" PRId64, m > 0 ? m : 0);
        cl_arg(g, "%" PRId64, b > 0 ? b : 0);
        cl_arg(g, "0");
        cl_arg(g, "%" PRIu64, cluster_lease_ms(g->sync_ms));
        cl_send(g, &(struct cl_pend){ CL_W_QLEASE, (int)i, 0, 0, NULL });
        if (m > 0) {
            cl_args(g);
            cl_arg(g, "ZADD");
            cl_arg(g, "%s", idx);
            cl_arg(g, "%" PRIu64, now);
            cl_arg(g, "%u:%.*s", q->kind, (int)q->klen, q->key);
            cl_send(g, &(struct cl_pend){ CL_W_IGNORE, 0, 0, 0, NULL });
        }
    }
    cl_args(g);
    cl_arg(g, "ZREMRANGEBYSCORE");
    cl_arg(g, "%s", idx);
    cl_arg(g, "-inf");
    cl_arg(g, "%" PRIu64, now > CL_QINDEX_TTL_MS ? now - CL_QINDEX_TTL_MS :
        0);
    cl_send(g, &(struct cl_pend){ CL_W_IGNORE, 0, 0, 0, NULL });
    cl_args(g);
    cl_arg(g, "ZRANGE");
    cl_arg(g, "%s", idx);
    cl_arg(g, "0");
    cl_arg(g, "-1");
    cl_send(g, &(struct cl_pend){ CL_W_QINDEX, 0, 0, 0, NULL });
}

static void
cl_quotas_reply(struct cl_agent *g, const struct cl_pend *p,
    const redisReply *r)
{
    size_t i;

    if (p->what == CL_W_QLEASE) {
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 3)
            status_quota_set_fleet(g->st, p->e, r->element[1]->integer,
                r->element[2]->integer);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY)
        return;
    g->fleet_quotas = r->elements;
    /* keys the others use: a row here, read from the next cycle on */
    for (i = 0; i < r->elements; i++) {
        const redisReply *x = r->element[i];
        char             *colon;
        int               kind;

        if (x->type != REDIS_REPLY_STRING ||
            (colon = strchr(x->str, ':')) == NULL)
            continue;
        kind = atoi(x->str);
        if (kind < 0 || kind >= STATUS_QK_MAX || strlen(colon + 1) == 0 ||
            strlen(colon + 1) > STATUS_QUOTA_KEY_MAX)
            continue;
        (void)status_quota_row(g->st, (unsigned)kind, colon + 1,
            strlen(colon + 1), 1, cl_now_s());
    }
}

/* ---- the cycle ---- */

void
cl_tables_queue(struct cl_agent *g)
{
    cl_bans_queue(g);
    cl_auth_queue(g);
    cl_quotas_queue(g);
}

void
cl_tables_reply(struct cl_agent *g, const struct cl_pend *p,
    const redisReply *r)
{
    switch (p->what) {
    case CL_W_BANS:
        cl_bans_reply(g, r);
        break;
    case CL_W_AUTH:
        cl_auth_reply(g, r);
        break;
    case CL_W_QLEASE:
    case CL_W_QINDEX:
        cl_quotas_reply(g, p, r);
        break;
    default:
        break;
    }
}

void
cl_tables_fallback(struct cl_agent *g)
{
    static struct status_auth_key k[CL_AUTH_MAX];
    uint32_t now = cl_now_s(), extra = g->nodes > 1 ? g->nodes - 1 : 0;
    size_t   n = cl_auth_local(g, k), i;

    for (i = 0; i < n; i++) {
        struct cl_auth_memo *m = cl_memo_of(k[i].key, 1);
        int32_t              d;

        if (m == NULL)
            continue;
        d = (int32_t)k[i].count - m->merged;
        if (d > 0 && extra > 0)
            status_auth_add_key(g->st, k[i].key, now, CL_AUTH_WINDOW_S,
                (int)(d * (int32_t)extra));
        m->merged = (int32_t)k[i].count + (d > 0 ? d * (int32_t)extra : 0);
    }
    for (i = 0; i < STATUS_QUOTA_SLOTS; i++) {
        const struct status_quota_row *q = &g->st->quota[i];
        uint64_t tag = __atomic_load_n(&q->tag, __ATOMIC_ACQUIRE);
        int64_t  m, b;

        if (tag == 0 || tag == STATUS_QUOTA_FREEING ||
            __atomic_load_n(&q->ready, __ATOMIC_ACQUIRE) != tag)
            continue;
        status_quota_local(g->st, (int)i, &m, &b);
        status_quota_set_fleet(g->st, (int)i, m * extra, b * extra);
    }
}
