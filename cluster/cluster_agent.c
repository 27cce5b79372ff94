/*
 * cluster_agent.c - the node's sync agent (cluster.h): its loop, the node
 * registry, the fallback episodes, the password file.
 *
 * PURPOSE   Each sync_interval: one pipeline (HELLO, every shaping pair,
 *           bans, AUTH failures, quotas), one round trip, the replies
 *           written into the node's tables.  A failed cycle starts a
 *           fallback episode (logged once): every limit becomes this
 *           node's share, limit / the live node count last known, the
 *           agent spacing the node's rate tokens itself; it tries Redis
 *           again after sync_interval, doubling to 5 s, and ends the
 *           episode (logged) at the first cycle answered.
 * LIVENESS  The agent writes page->heartbeat_ms every turn of its loop;
 *           the master kills an agent whose heartbeat is older than the
 *           watchdog's limit and starts another.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "cluster/cluster_int.h"

#define CL_RETRY_MAX_MS 5000
#define CL_VIEW_MS      250         /* the report is rewritten so often */

static volatile sig_atomic_t cl_stop;

static void
cl_on_term(int sig)
{
    (void)sig;
    cl_stop = 1;
}

int
cluster_read_password(const char *path, char *out, size_t outsz, char *why,
    size_t whysz)
{
    struct stat st;
    ssize_t     n;
    int         fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, whysz, "cluster.password_file %s: %s", path,
            strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) != 0) {
        snprintf(why, whysz, "cluster.password_file %s: %s", path,
            !S_ISREG(st.st_mode) ? "not a regular file" :
            "readable by its group or others: chmod 600 it");
        close(fd);
        return -1;
    }
    n = read(fd, out, outsz - 1);
    close(fd);
    if (n <= 0) {
        snprintf(why, whysz, "cluster.password_file %s: %s", path,
            n < 0 ? strerror(errno) : "empty");
        return -1;
    }
    out[n] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    if (out[0] == '\0') {
        snprintf(why, whysz, "cluster.password_file %s: empty", path);
        return -1;
    }
    return 0;
}

/* cl_hello_reply - {now, id, age, ...}: the nodes and the live count */
static void
cl_hello_reply(struct cl_agent *g, const redisReply *r)
{
    size_t   i;
    uint32_t live = 0;

    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
        return;
    g->redis_now_ms = (uint64_t)r->element[0]->integer;
    g->nnode_list = 0;
    for (i = 1; i + 1 < r->elements && g->nnode_list < CL_MAX_NODES;
        i += 2) {
        struct cl_node *n = &g->node_list[g->nnode_list];

        if (r->element[i]->type != REDIS_REPLY_STRING)
            continue;
        util_strlcpy(n->id, r->element[i]->str, sizeof(n->id));
        n->age_ms = r->element[i + 1]->type == REDIS_REPLY_INTEGER &&
            r->element[i + 1]->integer > 0 ?
            (uint64_t)r->element[i + 1]->integer : 0;
        if (n->age_ms <= cluster_lease_ms(g->sync_ms))
            live++;
        g->nnode_list++;
    }
    g->nodes = live > 0 ? live : 1;
    __atomic_store_n(&g->page->nodes_live, g->nodes, __ATOMIC_RELAXED);
}

static void
cl_reply(struct cl_agent *g, const struct cl_pend *p, const redisReply *r)
{
    switch (p->what) {
    case CL_W_HELLO:
        cl_hello_reply(g, r);
        break;
    case CL_W_LEASE:
    case CL_W_BUCKET:
    case CL_W_BACKOFF:
        cl_shape_reply(g, p, r);
        break;
    case CL_W_BANS:
    case CL_W_AUTH:
    case CL_W_QLEASE:
    case CL_W_QINDEX:
        cl_tables_reply(g, p, r);
        break;
    default:
        break;
    }
}

/* cl_cycle - one pipeline: 0, or -1 (g->why) */
static int
cl_cycle(struct cl_agent *g)
{
    struct timespec a, b;
    char            key[200];

    snprintf(key, sizeof(key), "%snodes", g->prefix);
    cl_eval(g, CL_S_HELLO, 1);
    cl_arg(g, "%s", key);
    cl_arg(g, "%s", g->node);
    cl_send(g, &(struct cl_pend){ CL_W_HELLO, 0, 0, 0, NULL });
    cl_shape_queue(g);
    cl_tables_queue(g);
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (cl_flush(g, cl_reply) < 0)
        return -1;
    clock_gettime(CLOCK_MONOTONIC, &b);
    __atomic_store_n(&g->page->latency_us, (uint64_t)((b.tv_sec - a.tv_sec) *
        1000000 + (b.tv_nsec - a.tv_nsec) / 1000), __ATOMIC_RELAXED);
    return 0;
}

/* cl_fail - a cycle or a connect failed: the episode starts (once) */
static void
cl_fail(struct cl_agent *g, uint64_t now)
{
    cl_disconnect(g);
    __atomic_store_n(&g->page->connected, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g->page->errors, 1, __ATOMIC_RELAXED);
    g->retry_ms = g->retry_ms == 0 ? g->sync_ms : g->retry_ms * 2;
    if (g->retry_ms > CL_RETRY_MAX_MS)
        g->retry_ms = CL_RETRY_MAX_MS;
    g->retry_at_ms = now + g->retry_ms;
    if (g->fallback)
        return;
    g->fallback = 1;
    g->fb_since_ms = now;
    __atomic_store_n(&g->page->fallback, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g->page->fallback_episodes, 1, __ATOMIC_RELAXED);
    log_warn("cluster: redis unreachable (%s); fallback: every shared limit "
        "is this node's share, the limit / %u node%s, until it answers",
        g->why, g->nodes, g->nodes == 1 ? "" : "s");
}

/* cl_rejoin - a cycle answered: the episode (if any) ends */
static void
cl_rejoin(struct cl_agent *g, uint64_t now)
{
    g->retry_ms = 0;
    __atomic_store_n(&g->page->connected, 1, __ATOMIC_RELAXED);
    if (!g->fallback)
        return;
    g->fallback = 0;
    __atomic_store_n(&g->page->fallback, 0, __ATOMIC_RELAXED);
    cl_shape_rejoin(g);
    log_notice("cluster: redis %s answers again after %llu ms of fallback; "
        "the fleet's limits hold again", g->addr,
        (unsigned long long)(now - g->fb_since_ms));
}

static void
cl_sleep_until(uint64_t at_ms)
{
    uint64_t        now = util_now_ms();
    struct timespec ts;

    if (at_ms <= now)
        return;
    ts.tv_sec = (time_t)((at_ms - now) / 1000);
    ts.tv_nsec = (long)((at_ms - now) % 1000 * 1000000);
    (void)nanosleep(&ts, NULL);
}

static void
cl_init(struct cl_agent *g, const struct cluster_args *a)
{
    struct sigaction sa;

    memset(g, 0, sizeof(*g));
    g->cfg = a->cfg;
    g->st = a->status;
    g->shape = a->shape;
    g->page = a->page;
    g->pass = a->password;
    util_strlcpy(g->node, a->cfg->cluster_node_id != NULL ?
        a->cfg->cluster_node_id : a->cfg->hostname, sizeof(g->node));
    g->prefix = a->cfg->cluster_key_prefix;
    g->sync_ms = a->cfg->cluster_sync_ms;
    g->views = xcalloc(SHAPE_SLOTS, sizeof(*g->views));
    g->nodes = a->page->nodes_live > 0 ? a->page->nodes_live : 1;
    g->fallback = (int)a->page->fallback;   /* a restarted agent's */
    g->fb_since_ms = util_now_ms();
    a->page->pid = (int32_t)getpid();
    a->page->connected = 0;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = cl_on_term;
    (void)sigaction(SIGTERM, &sa, NULL);
    (void)sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    (void)sigaction(SIGPIPE, &sa, NULL);
}

void
cluster_agent_main(const struct cluster_args *a)
{
    static struct cl_agent g;
    uint64_t               next, now, last = util_now_ms(), view_at = 0;

    cl_init(&g, a);
    log_info("cluster: node %s, redis %s, sync every %llu ms", g.node,
        a->cfg->cluster_sentinel != NULL ? "through sentinel" :
        a->cfg->cluster_redis, (unsigned long long)g.sync_ms);
    while (!cl_stop) {
        now = util_now_ms();
        next = now + g.sync_ms;
        __atomic_store_n(&g.page->heartbeat_ms, util_wall_ms(),
            __ATOMIC_RELAXED);
        __atomic_add_fetch(&g.page->syncs, 1, __ATOMIC_RELAXED);
        if (g.rc == NULL && now >= g.retry_at_ms && cl_connect(&g) < 0)
            cl_fail(&g, now);
        if (g.rc != NULL) {
            if (cl_cycle(&g) == 0)
                cl_rejoin(&g, util_now_ms());
            else
                cl_fail(&g, util_now_ms());
        }
        if (g.fallback) {
            cl_shape_fallback(&g, now - last);
            cl_tables_fallback(&g);
        }
        last = now;
        if (util_now_ms() >= view_at) {
            cl_view_publish(&g);
            view_at = util_now_ms() + CL_VIEW_MS;
        }
        cl_sleep_until(next);
    }
    cl_disconnect(&g);
    log_info("cluster: agent stops");
    log_flush();
    exit(0);
}
