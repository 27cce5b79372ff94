/*
 * cluster_view.c - the report of `mtactl cluster status` (text and JSON),
 * written by the agent into its page under the sequence counter, and the
 * page itself (cluster.h).
 *
 * CONTRACT  Node ids come from Redis (other nodes wrote them): escaped
 *           (util_escape) before they go anywhere; site and source names
 *           are this node's own.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "common/buf.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "cluster/cluster_int.h"

struct cluster_page *
cluster_page_create(void)
{
    void *p = mmap(NULL, sizeof(struct cluster_page), PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

int
cluster_page_report(const struct cluster_page *p, int json, char *out,
    size_t outsz)
{
    uint32_t s0, s1;
    int      tries;

    for (tries = 0; tries < 1000; tries++) {
        s0 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
        if (s0 & 1) {
            sched_yield();
            continue;
        }
        util_strlcpy(out, json ? p->json : p->text, outsz);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        s1 = __atomic_load_n(&p->seq, __ATOMIC_RELAXED);
        if (s0 == s1)
            return 0;
    }
    return -1;
}

static void
cl_jstr(struct buf *t, const char *s)
{
    char esc[UTIL_ESC_ROOM(CLUSTER_ID_MAX * 2)];

    util_escape(esc, sizeof(esc), s, strnlen(s, CLUSTER_ID_MAX * 2), 0,
        NULL);
    buf_append(t, "\"", 1);
    for (s = esc; *s; s++) {
        if (*s == '"' || *s == '\\')
            buf_append(t, "\\", 1);
        buf_append(t, s, 1);
    }
    buf_append(t, "\"", 1);
}

static const char *
cl_role_name(uint32_t r)
{
    return r == CLUSTER_ROLE_MASTER ? "master" :
        r == CLUSTER_ROLE_REPLICA ? "replica" : "none";
}

/* cl_quotas - the rows with usage here or elsewhere (at most CL_SHOWN) */
static void
cl_quotas(struct cl_agent *g, struct buf *t, int json)
{
    size_t i, n = 0;

    for (i = 0; i < STATUS_QUOTA_SLOTS && n < CL_SHOWN; i++) {
        const struct status_quota_row *q = &g->st->quota[i];
        uint64_t tag = __atomic_load_n(&q->tag, __ATOMIC_ACQUIRE);
        int64_t  m, b, om, ob;
        char     key[STATUS_QUOTA_KEY_MAX + 1];

        if (tag == 0 || tag == STATUS_QUOTA_FREEING ||
            __atomic_load_n(&q->ready, __ATOMIC_ACQUIRE) != tag)
            continue;
        status_quota_local(g->st, (int)i, &m, &b);
        om = __atomic_load_n(&q->msgs[STATUS_QUOTA_FLEET], __ATOMIC_RELAXED);
        ob = __atomic_load_n(&q->bytes[STATUS_QUOTA_FLEET],
            __ATOMIC_RELAXED);
        if (m == 0 && om == 0)
            continue;
        memcpy(key, q->key, q->klen);
        key[q->klen] = '\0';
        if (json) {
            buf_printf(t, "%s{\"kind\":\"%s\",\"key\":", n ? "," : "",
                status_quota_kind_name(q->kind));
            cl_jstr(t, key);
            buf_printf(t, ",\"here\":{\"messages\":%" PRId64 ",\"bytes\":%"
                PRId64 "},\"others\":{\"messages\":%" PRId64 ",\"bytes\":%"
                PRId64 "}}", m, b, om, ob);
        } else {
            char esc[UTIL_ESC_ROOM(STATUS_QUOTA_KEY_MAX)];

            util_escape(esc, sizeof(esc), key, q->klen, 0, NULL);
            buf_printf(t, "  %s %s: here %" PRId64 " messages %" PRId64
                " bytes, others %" PRId64 " messages %" PRId64 " bytes\n",
                status_quota_kind_name(q->kind), esc, m, b, om, ob);
        }
        n++;
    }
}

static void
cl_text(struct cl_agent *g, struct buf *t)
{
    const struct cluster_page *p = g->page;
    char   esc[UTIL_ESC_ROOM(CLUSTER_ID_MAX)];
    size_t i;

    buf_printf(t, "node: %s\nredis: %s (%s)%s\n", g->node,
        g->addr[0] ? g->addr : "-", cl_role_name(p->role),
        p->connected ? " connected" : " not connected");
    buf_printf(t, "fallback: %s (episodes %" PRIu64 ")%s%s\n",
        g->fallback ? "yes: each limit divided by the live nodes" : "no",
        p->fallback_episodes, g->fallback && g->why[0] ? "; last error: " :
        "", g->fallback ? g->why : "");
    buf_printf(t, "latency: %" PRIu64 ".%03" PRIu64 " ms, round trips %"
        PRIu64 ", commands %" PRIu64 ", errors %" PRIu64 ", tokens taken %"
        PRIu64 "\n", p->latency_us / 1000, p->latency_us % 1000,
        p->round_trips, p->commands, p->errors, p->tokens_taken);
    buf_printf(t, "nodes: %u live\n", g->nodes);
    for (i = 0; i < g->nnode_list; i++) {
        util_escape(esc, sizeof(esc), g->node_list[i].id,
            strlen(g->node_list[i].id), 0, NULL);
        buf_printf(t, "  %s seen %" PRIu64 ".%01" PRIu64 "s ago%s\n", esc,
            g->node_list[i].age_ms / 1000, g->node_list[i].age_ms % 1000 /
            100, strcmp(g->node_list[i].id, g->node) == 0 ? " (this node)" :
            g->node_list[i].age_ms > cluster_lease_ms(g->sync_ms) ?
            " (gone)" : "");
    }
    buf_printf(t, "shaping:\n");
    for (i = 0; i < g->nviews; i++) {
        const struct shape_view *v = &g->views[i];
        const struct cl_pair    *x = &g->pair[v->e];
        struct shape_fleet       f;

        shape_fleet_get(g->shape, v->e, &f);
        buf_printf(t, "  %s %s: connections here %" PRIu32 " grant %" PRIu32
            " others %" PRIu32 " fleet %" PRIu32 "/%" PRIu32 "; tokens %"
            PRId32 " (deliveries) %" PRId32 " (connects); spent %" PRIu64
            "\n", v->site, v->source, f.conns, f.grant, x->others,
            f.conns + x->others, v->lim.connections, f.tokens[0],
            f.tokens[1], f.used[0]);
    }
    buf_printf(t, "bans: %zu in the fleet\n", g->fleet_bans);
    for (i = 0; i < g->nban_list; i++) {
        util_escape(esc, sizeof(esc), g->ban_list[i].addr,
            strlen(g->ban_list[i].addr), 0, NULL);
        buf_printf(t, "  %s for %" PRIu64 "s more\n", esc,
            g->ban_list[i].left_ms / 1000);
    }
    buf_printf(t, "auth failures: %zu addresses in the fleet\n",
        g->fleet_auth);
    for (i = 0; i < g->nauth_list; i++)
        buf_printf(t, "  address key %07" PRIx32 ": %lld failures\n",
            g->auth_list[i].key, g->auth_list[i].count);
    buf_printf(t, "quotas: %zu keys in use in the fleet\n", g->fleet_quotas);
    cl_quotas(g, t, 0);
}

static void
cl_json(struct cl_agent *g, struct buf *t)
{
    const struct cluster_page *p = g->page;
    size_t i;

    buf_printf(t, "{\"node\":");
    cl_jstr(t, g->node);
    buf_printf(t, ",\"redis\":{\"address\":");
    cl_jstr(t, g->addr);
    buf_printf(t, ",\"role\":\"%s\",\"connected\":%s,\"latency_ms\":%" PRIu64
        ".%03" PRIu64 ",\"round_trips\":%" PRIu64 ",\"commands\":%" PRIu64
        ",\"errors\":%" PRIu64 ",\"tokens_taken\":%" PRIu64 "},",
        cl_role_name(p->role), p->connected ? "true" : "false",
        p->latency_us / 1000, p->latency_us % 1000, p->round_trips,
        p->commands, p->errors, p->tokens_taken);
    buf_printf(t, "\"fallback\":{\"active\":%s,\"episodes\":%" PRIu64 "},",
        g->fallback ? "true" : "false", p->fallback_episodes);
    buf_printf(t, "\"nodes_live\":%u,\"nodes\":[", g->nodes);
    for (i = 0; i < g->nnode_list; i++) {
        buf_printf(t, "%s{\"id\":", i ? "," : "");
        cl_jstr(t, g->node_list[i].id);
        buf_printf(t, ",\"age_ms\":%" PRIu64 ",\"self\":%s,\"live\":%s}",
            g->node_list[i].age_ms, strcmp(g->node_list[i].id, g->node) ==
            0 ? "true" : "false", g->node_list[i].age_ms <=
            cluster_lease_ms(g->sync_ms) ? "true" : "false");
    }
    buf_printf(t, "],\"shaping\":[");
    for (i = 0; i < g->nviews; i++) {
        const struct shape_view *v = &g->views[i];
        const struct cl_pair    *x = &g->pair[v->e];
        struct shape_fleet       f;

        shape_fleet_get(g->shape, v->e, &f);
        buf_printf(t, "%s{\"site\":", i ? "," : "");
        cl_jstr(t, v->site);
        buf_printf(t, ",\"source\":");
        cl_jstr(t, v->source);
        buf_printf(t, ",\"connections\":{\"here\":%" PRIu32 ",\"grant\":%"
            PRIu32 ",\"others\":%" PRIu32 ",\"fleet\":%" PRIu32 ",\"limit\":%"
            PRIu32 "},\"tokens\":{\"deliveries\":%" PRId32 ",\"connects\":%"
            PRId32 "},\"spent\":%" PRIu64 ",\"mode\":\"%s\"}", f.conns,
            f.grant, x->others, f.conns + x->others, v->lim.connections,
            f.tokens[0], f.tokens[1], f.used[0], v->mode == SHAPE_M_SUSPEND ?
            "suspended" : v->mode == SHAPE_M_SLOW ? "slow" : "normal");
    }
    buf_printf(t, "],\"bans\":%zu,\"ban_list\":[", g->fleet_bans);
    for (i = 0; i < g->nban_list; i++) {
        buf_printf(t, "%s{\"address\":", i ? "," : "");
        cl_jstr(t, g->ban_list[i].addr);
        buf_printf(t, ",\"left_s\":%" PRIu64 "}",
            g->ban_list[i].left_ms / 1000);
    }
    buf_printf(t, "],\"auth_failure_addresses\":%zu,\"auth_failures\":[",
        g->fleet_auth);
    for (i = 0; i < g->nauth_list; i++)
        buf_printf(t, "%s{\"key\":\"%07" PRIx32 "\",\"count\":%lld}",
            i ? "," : "", g->auth_list[i].key, g->auth_list[i].count);
    buf_printf(t, "],\"quota_keys\":%zu,\"quotas\":[", g->fleet_quotas);
    cl_quotas(g, t, 1);
    buf_printf(t, "]}\n");
}

void
cl_view_publish(struct cl_agent *g)
{
    struct buf t, j;

    buf_init(&t);
    buf_init(&j);
    cl_text(g, &t);
    cl_json(g, &j);
    buf_append(&t, "", 1);
    buf_append(&j, "", 1);
    __atomic_add_fetch(&g->page->seq, 1, __ATOMIC_ACQ_REL);    /* odd */
    util_strlcpy(g->page->text, t.data, sizeof(g->page->text));
    util_strlcpy(g->page->json, j.data, sizeof(g->page->json));
    __atomic_add_fetch(&g->page->seq, 1, __ATOMIC_RELEASE);    /* even */
    buf_free(&t);
    buf_free(&j);
}
