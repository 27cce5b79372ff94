/*
 * cluster.c - the master's side of the fleet (cluster/cluster.h): the
 * sync agent's page, its start, restart and watchdog, `mtactl cluster
 * status`, and the mtad_cluster_* metrics.
 *
 * PURPOSE   With a cluster: section the master reads the password file
 *           (as root, before any fork), makes the agent's page, turns the
 *           shaping table's fleet mode on before the first worker forks,
 *           and forks the agent.  The agent has no channel: it publishes
 *           its state in the page and stops on SIGTERM; the master kills
 *           one whose heartbeat is older than CLUSTER_WD_MS and restarts
 *           an agent that exited (after CLUSTER_BACKOFF_MIN, doubling while
 *           it keeps dying young).  A reload that changes the cluster
 *           section restarts the agent with it (the password file read
 *           again), one that adds it starts it, one that removes it stops
 *           it and turns the fleet mode off.
 * FAILURE   No agent running: the grants stay as the last one left them;
 *           the workers go on within them.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "cluster/cluster.h"
#include "config/config.h"
#include "shape/shape.h"
#include "master/master.h"
#include "master/master_int.h"
#include "master/ops.h"

#define CLUSTER_WD_MIN_MS   10000   /* a heartbeat older: killed */
#define CLUSTER_QUICK_MS    10000   /* died younger: back-off doubles */
#define CLUSTER_BACKOFF_MIN 500
#define CLUSTER_BACKOFF_MAX 30000

struct master_cluster {
    struct cluster_page *page;
    struct cluster_args  args;
    char                 pass[CLUSTER_PASS_MAX];
    pid_t                pid;
    uint64_t             started_ms, restart_at, backoff_ms, wd_ms;
    uint64_t             stop_ms;
    int                  off;           /* removed by a reload */
    unsigned             restarts;
};

static void
mcl_spawn(struct master *m)
{
    struct master_cluster *c = m->cluster;
    pid_t                  pid;

    c->args.cfg = m->cur->cfg;      /* the serving generation's */
    pid = child_spawn_cluster(m, &c->args);
    if (pid < 0) {
        log_err("cluster: cannot start the sync agent: %s", strerror(errno));
        c->restart_at = util_now_ms() + CLUSTER_BACKOFF_MAX;
        return;
    }
    c->pid = pid;
    c->started_ms = util_now_ms();
    c->restart_at = 0;
    /* a fresh agent has till its first heartbeat: one watchdog period */
    __atomic_store_n(&c->page->heartbeat_ms, util_wall_ms(),
        __ATOMIC_RELAXED);
}

int
master_cluster_start(struct master *m, char *err, size_t errsz)
{
    const struct config   *cfg = m->cur->cfg;
    struct master_cluster *c;

    if (cfg->cluster_redis == NULL && cfg->cluster_sentinel == NULL)
        return 0;
    if (m->shape_tab == NULL) {
        snprintf(err, errsz, "cluster: no shared shaping table");
        return -1;
    }
    c = xcalloc(1, sizeof(*c));
    if (cfg->cluster_password_file != NULL &&
        cluster_read_password(cfg->cluster_password_file, c->pass,
        sizeof(c->pass), err, errsz) < 0) {
        free(c);
        return -1;
    }
    if ((c->page = cluster_page_create()) == NULL) {
        snprintf(err, errsz, "cluster: page: %s", strerror(errno));
        free(c);
        return -1;
    }
    c->args.status = m->status;
    c->args.shape = m->shape_tab;
    c->args.page = c->page;
    c->args.password = c->pass[0] ? c->pass : NULL;
    c->wd_ms = cfg->cluster_timeout_ms * 4 > CLUSTER_WD_MIN_MS ?
        cfg->cluster_timeout_ms * 4 : CLUSTER_WD_MIN_MS;
    /* before the first worker: a new pair waits for its first grant */
    shape_fleet_on(m->shape_tab, (uint32_t)(cfg->cluster_sync_ms * 1000));
    m->cluster = c;
    return 0;
}

void
master_cluster_spawn(struct master *m)
{
    if (m->cluster != NULL && m->cluster->pid == 0)
        mcl_spawn(m);
}

static int
mcl_streq(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL &&
        strcmp(a, b) == 0);
}

/* mcl_same - the cluster sections of a and b are alike */
static int
mcl_same(const struct config *a, const struct config *b)
{
    return mcl_streq(a->cluster_redis, b->cluster_redis) &&
        mcl_streq(a->cluster_sentinel, b->cluster_sentinel) &&
        mcl_streq(a->cluster_sentinel_master, b->cluster_sentinel_master) &&
        mcl_streq(a->cluster_user, b->cluster_user) &&
        mcl_streq(a->cluster_password_file, b->cluster_password_file) &&
        mcl_streq(a->cluster_key_prefix, b->cluster_key_prefix) &&
        mcl_streq(a->cluster_node_id, b->cluster_node_id) &&
        mcl_streq(a->hostname, b->hostname) &&
        a->cluster_timeout_ms == b->cluster_timeout_ms &&
        a->cluster_sync_ms == b->cluster_sync_ms;
}

void
master_cluster_reloaded(struct master *m, const struct config *old)
{
    const struct config   *cfg = m->cur->cfg;
    struct master_cluster *c = m->cluster;
    int                    on = cfg->cluster_redis != NULL ||
        cfg->cluster_sentinel != NULL;
    char                   err[512];

    if (c == NULL || c->off) {
        if (!on)
            return;
        if (c != NULL) {                /* on again: a fresh start */
            shape_fleet_on(m->shape_tab, (uint32_t)(cfg->cluster_sync_ms *
                1000));
            c->off = 0;
            c->restart_at = 1;
        } else if (master_cluster_start(m, err, sizeof(err)) < 0)
            log_err("reload: %s; no cluster", err);
        else
            master_cluster_spawn(m);
        log_notice("reload: cluster on");
        return;
    }
    if (!on) {
        c->off = 1;
        shape_fleet_off(m->shape_tab);
        if (c->pid > 0)
            (void)kill(c->pid, SIGTERM);
        log_notice("reload: cluster off: the node's own limits alone");
        return;
    }
    if (mcl_same(old, cfg))
        return;
    if (cfg->cluster_password_file != NULL &&
        cluster_read_password(cfg->cluster_password_file, c->pass,
        sizeof(c->pass), err, sizeof(err)) < 0) {
        log_err("reload: %s; the cluster agent keeps the old settings", err);
        return;
    }
    if (cfg->cluster_password_file == NULL)
        c->pass[0] = '\0';
    c->args.password = c->pass[0] ? c->pass : NULL;
    c->wd_ms = cfg->cluster_timeout_ms * 4 > CLUSTER_WD_MIN_MS ?
        cfg->cluster_timeout_ms * 4 : CLUSTER_WD_MIN_MS;
    c->backoff_ms = 0;
    log_notice("reload: cluster section changed: restarting the sync agent");
    if (c->pid > 0)
        (void)kill(c->pid, SIGTERM);    /* reaped: restarted with it */
}

int
master_cluster_reaped(struct master *m, pid_t pid, int st)
{
    struct master_cluster *c = m->cluster;
    uint64_t               now = util_now_ms();

    if (c == NULL || pid != c->pid)
        return 0;
    c->pid = 0;
    if (m->stopping || c->off)
        return 1;
    if (now - c->started_ms < CLUSTER_QUICK_MS)
        c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 :
            CLUSTER_BACKOFF_MIN;
    else
        c->backoff_ms = CLUSTER_BACKOFF_MIN;
    if (c->backoff_ms > CLUSTER_BACKOFF_MAX)
        c->backoff_ms = CLUSTER_BACKOFF_MAX;
    c->restart_at = now + c->backoff_ms;
    c->restarts++;
    log_warn("cluster: the sync agent (pid %d) %s %s; restarting in %"
        PRIu64 " ms", (int)pid, WIFSIGNALED(st) ? "was killed by signal" :
        "exited with", WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) :
        (WEXITSTATUS(st) == 0 ? "0" : "an error"), c->backoff_ms);
    return 1;
}

void
master_cluster_tick(struct master *m, uint64_t now)
{
    struct master_cluster *c = m->cluster;
    uint64_t               hb, wall = util_wall_ms();

    if (c == NULL || m->stopping || c->off)
        return;
    if (c->pid == 0 && c->restart_at != 0 && now >= c->restart_at) {
        mcl_spawn(m);
        return;
    }
    hb = __atomic_load_n(&c->page->heartbeat_ms, __ATOMIC_RELAXED);
    if (c->pid > 0 && wall > hb && wall - hb > c->wd_ms) {
        log_err("cluster: the sync agent (pid %d) gave no sign of life for "
            "%" PRIu64 " ms; killing it", (int)c->pid, wall - hb);
        (void)kill(c->pid, SIGKILL);
        __atomic_store_n(&c->page->heartbeat_ms, wall, __ATOMIC_RELAXED);
    }
}

int
master_cluster_stop(struct master *m)
{
    struct master_cluster *c = m->cluster;

    uint64_t               now = util_now_ms();

    if (c == NULL || c->pid <= 0)
        return 1;
    if (c->stop_ms == 0)
        c->stop_ms = now;
    /* it answers SIGTERM within a Redis timeout; past that it is hung */
    (void)kill(c->pid, now - c->stop_ms > c->wd_ms ? SIGKILL : SIGTERM);
    return 0;
}

int
master_cluster_unban(struct master *m, const struct sockaddr *sa)
{
    struct master_cluster *c = m->cluster;
    struct cluster_page   *p;
    uint32_t               h;

    if (c == NULL || c->off)
        return 0;
    p = c->page;
    h = __atomic_load_n(&p->unban_head, __ATOMIC_RELAXED);
    if (util_sockaddr_ip(sa, p->unban[h % CLUSTER_UNBANS],
        sizeof(p->unban[0])) == NULL)
        return 0;
    __atomic_store_n(&p->unban_head, h + 1, __ATOMIC_RELEASE);
    return 1;
}

void
master_cluster_ctl(struct master *m, const char *arg, char **out)
{
    struct master_cluster *c = m->cluster;
    int                    json = strcmp(arg, "json") == 0;
    struct buf             t;
    char                  *rep;

    if (strcmp(arg, "status") != 0 && !json) {
        *out = xstrdup("error: usage: cluster status|json\n");
        return;
    }
    if (c == NULL || c->off) {
        *out = xstrdup(json ? "ok\n{\"enabled\":false}\n" :
            "ok\ncluster: off (no cluster: section in relay.yaml)\n");
        return;
    }
    rep = xcalloc(1, CLUSTER_TEXT_MAX);
    if (cluster_page_report(c->page, json, rep, CLUSTER_TEXT_MAX) < 0 ||
        rep[0] == '\0')
        util_strlcpy(rep, json ? "{\"enabled\":true,\"agent\":\"starting\"}\n"
            : "cluster: the sync agent has not reported yet\n",
            CLUSTER_TEXT_MAX);
    buf_init(&t);
    if (json) {
        /* the agent's object, with the master's view of the agent */
        size_t n = strlen(rep);

        while (n > 0 && (rep[n - 1] == '\n' || rep[n - 1] == '}'))
            rep[--n] = '\0';
        buf_printf(&t, "ok\n%s,\"enabled\":true,\"agent\":{\"pid\":%d,"
            "\"restarts\":%u}}\n", rep, (int)c->pid, c->restarts);
    } else
        buf_printf(&t, "ok\nagent: pid %d, restarts %u\n%s", (int)c->pid,
            c->restarts, rep);
    buf_append(&t, "", 1);
    free(rep);
    *out = t.data;
}

void
master_cluster_metrics(struct master *m, struct buf *t)
{
    struct master_cluster *c = m->cluster;
    struct cluster_page   *p;

    if (c == NULL || c->off)
        return;
    p = c->page;
    buf_printf(t, "# HELP mtad_cluster_connected 1 while the sync agent's "
        "last cycle was answered by Redis.\n# TYPE mtad_cluster_connected "
        "gauge\nmtad_cluster_connected %u\n",
        __atomic_load_n(&p->connected, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_fallback 1 during a fallback episode "
        "(Redis unreachable: each limit divided by the live nodes).\n"
        "# TYPE mtad_cluster_fallback gauge\nmtad_cluster_fallback %u\n",
        __atomic_load_n(&p->fallback, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_fallback_episodes_total Fallback "
        "episodes since the start.\n# TYPE mtad_cluster_fallback_episodes_"
        "total counter\nmtad_cluster_fallback_episodes_total %" PRIu64 "\n",
        __atomic_load_n(&p->fallback_episodes, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_nodes Live nodes last seen in "
        "Redis (this one included).\n# TYPE mtad_cluster_nodes gauge\n"
        "mtad_cluster_nodes %u\n",
        __atomic_load_n(&p->nodes_live, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_round_trips_total Pipelines Redis "
        "answered (one per sync cycle).\n# TYPE mtad_cluster_round_trips_"
        "total counter\nmtad_cluster_round_trips_total %" PRIu64 "\n",
        __atomic_load_n(&p->round_trips, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_commands_total Redis commands in "
        "those pipelines.\n# TYPE mtad_cluster_commands_total counter\n"
        "mtad_cluster_commands_total %" PRIu64 "\n",
        __atomic_load_n(&p->commands, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_errors_total Failed cycles and "
        "error replies.\n# TYPE mtad_cluster_errors_total counter\n"
        "mtad_cluster_errors_total %" PRIu64 "\n",
        __atomic_load_n(&p->errors, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_tokens_total Delivery tokens this "
        "node took from the fleet's buckets.\n# TYPE mtad_cluster_tokens_"
        "total counter\nmtad_cluster_tokens_total %" PRIu64 "\n",
        __atomic_load_n(&p->tokens_taken, __ATOMIC_RELAXED));
    buf_printf(t, "# HELP mtad_cluster_latency_seconds The last round "
        "trip to Redis.\n# TYPE mtad_cluster_latency_seconds gauge\n"
        "mtad_cluster_latency_seconds %.6f\n",
        (double)__atomic_load_n(&p->latency_us, __ATOMIC_RELAXED) / 1e6);
}
