/*
 * cluster.h - one fleet, one set of limits: the node's sync agent shares
 * the shaping limits (connections, rates, back-off), the auto-bans, the
 * AUTH failure counts and the queue quotas of every node through Redis
 * (relay.yaml cluster:, docs/SCALING.md).  Uses common, config, shape and
 * hiredis; the master makes the page and forks the agent
 * (master/cluster.c), mtactl shows the page's report.
 *
 * CONTRACT  The agent is one process per node (cluster_agent_main()),
 *           forked by the master after the shared tables exist; it
 *           inherits them (status page, shaping table) and this page.
 *           Workers never talk to Redis: they read and spend the grants
 *           the agent writes into their tables (shape.h "the fleet",
 *           status.h's fleet column and fleet counts), so the delivery
 *           path has no round trip at all.  Every sync_interval the agent
 *           sends one pipeline (every command of the cycle, Lua scripts
 *           by EVALSHA) and reads the replies: one round trip a cycle.
 *           The page has one writer, the agent; the report text is
 *           published under a sequence counter (odd while written), the
 *           counters with relaxed atomics.
 * FAILURE   Redis unreachable (connect, timeout, error reply of the
 *           pipeline): fallback, each limit divided by the live node
 *           count last known (at least 1), one log line per episode;
 *           the agent reconnects with back-off (sync_interval doubling to
 *           5 s) and rejoins by itself.  A dead agent: the master restarts
 *           it; meanwhile the grants stay as they were (workers go on).
 */
#ifndef MTAD_CLUSTER_H
#define MTAD_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#define CLUSTER_TEXT_MAX  49152     /* the report, text and JSON each */
#define CLUSTER_ID_MAX    64
#define CLUSTER_PASS_MAX  1024
#define CLUSTER_UNBANS    16        /* unbans between two cycles */
#define CLUSTER_UNBAN_MS  60000     /* a lifted ban stays lifted so long */

/* Redis role of the server the agent talks to */
enum cluster_role { CLUSTER_ROLE_NONE = 0, CLUSTER_ROLE_MASTER,
                    CLUSTER_ROLE_REPLICA };

struct cluster_page {
    int32_t  pid;                   /* the agent's */
    uint32_t connected;             /* 1 while the last cycle answered */
    uint32_t fallback;              /* 1 during a fallback episode */
    uint32_t role;                  /* enum cluster_role */
    uint32_t nodes_live;            /* live node count last known */
    uint32_t pad;
    uint64_t heartbeat_ms;          /* wall: the agent's last loop turn */
    uint64_t round_trips;           /* pipelines answered */
    uint64_t commands;              /* commands in them */
    uint64_t errors;                /* failed cycles and error replies */
    uint64_t fallback_episodes;
    uint64_t latency_us;            /* the last round trip */
    uint64_t tokens_taken;          /* delivery tokens from Redis */
    uint64_t syncs;                 /* cycles, answered or not */
    /* mtactl ban del, for every node: a ring the master writes (head),
     * the agent reads (the entries past its own tail) */
    uint32_t unban_head;
    char     unban[CLUSTER_UNBANS][48];
    uint32_t seq;                   /* the report: odd while written */
    char     text[CLUSTER_TEXT_MAX];
    char     json[CLUSTER_TEXT_MAX];
};

/* MAP_SHARED, zeroed; NULL with errno. */
struct cluster_page *cluster_page_create(void);
/* A consistent copy of the report (json or text) into out (a terminated
 * string); 0, or -1 when the agent is writing it for too long. */
int     cluster_page_report(const struct cluster_page *p, int json,
            char *out, size_t outsz);

struct config;
struct status_page;
struct shape_table;
struct cluster_args {
    const struct config *cfg;
    struct status_page  *status;
    struct shape_table  *shape;
    struct cluster_page *page;
    const char          *password;  /* read by the master, or NULL */
};
/* Read cfg's password file (root, at start): 0, -1 with why (group or
 * world readable, unreadable, empty). */
int     cluster_read_password(const char *path, char *out, size_t outsz,
            char *why, size_t whysz);
/* The agent: never returns (exits 0 on SIGTERM). */
void    cluster_agent_main(const struct cluster_args *a)
            __attribute__((noreturn));

/* ---- pure parts (unit-tested) ---- */

/* A limit's share for one node of n (n 0 counts as 1): limit / n, at
 * least 1; 0 (no limit) stays 0. */
uint32_t cluster_share(uint32_t limit, uint32_t nodes);
/* Key names: prefix + kind + ":" + site + "|" + source (+ ":" + suffix
 * when not NULL) into out; the length, or -1 when it does not fit. */
int     cluster_key(char *out, size_t outsz, const char *prefix,
            const char *kind, const char *site, const char *source,
            const char *suffix);
/* A lease's expiry: the agent's lease lives for three sync intervals
 * and at least a second, so two lost cycles do not drop it. */
uint64_t cluster_lease_ms(uint64_t sync_ms);
/* Is a lease value "n:expiry_ms" (or "n:b:expiry_ms") live at now?
 * its n into *n. */
int     cluster_lease_live(const char *v, uint64_t now_ms, uint64_t *n);
/* The stock of tokens a node asks for per cycle: two sync intervals of
 * the most restrictive rate (n per per_ms) over nodes (1 while Redis
 * answers: the fleet's horizon shares it; the live nodes in fallback),
 * at least 1, at most cap (0: none). */
uint32_t cluster_stock(uint32_t n, uint64_t per_ms, uint64_t sync_ms,
            uint32_t nodes, uint32_t cap);
#endif /* MTAD_CLUSTER_H */
