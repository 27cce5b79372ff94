/*
 * cluster_int.h - the agent's state, shared by the parts of cluster/
 * (cluster_agent.c: the loop and fallback; cluster_redis.c: the
 * connection, Sentinel, scripts and the pipeline; cluster_shape.c: the
 * shaping pairs; cluster_tables.c: bans, AUTH failures, quotas;
 * cluster_view.c: the report).  Private to cluster/.
 */
#ifndef MTAD_CLUSTER_INT_H
#define MTAD_CLUSTER_INT_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cluster/cluster.h"
#include "shape/shape.h"

/* the Lua scripts, loaded on every connect (cluster_redis.c) */
enum { CL_S_HELLO = 0, CL_S_LEASE, CL_S_RESERVE, CL_S_SET, CL_NSCRIPTS };

/* what a pipelined command's reply is for */
enum cl_what { CL_W_IGNORE = 0, CL_W_HELLO, CL_W_LEASE, CL_W_BUCKET,
               CL_W_BACKOFF, CL_W_BANS, CL_W_AUTH, CL_W_QLEASE,
               CL_W_QINDEX };

struct cl_pend {
    enum cl_what what;
    int          e;                 /* shaping entry, quota row */
    int          kind;              /* token kind; quota kind */
    int32_t      n;                 /* tokens asked; a lease's hold */
    char        *key;               /* quota key (owned) */
};

#define CL_MAX_NODES 64
#define CL_SHOWN     16             /* bans, AUTH keys in the report */
#define CL_ARGS      96
#define CL_ARGBUF    16384

struct cl_node { char id[CLUSTER_ID_MAX]; uint64_t age_ms; };

/* what the agent remembers of each shaping pair between cycles */
struct cl_pair {
    uint64_t used[2];               /* tokens spent at the last cycle */
    uint32_t want[2], conn_want;    /* demand counters then */
    uint64_t demand_ms;             /* the last refusal for a grant */
    uint64_t active_ms;             /* the last sign of use */
    uint64_t sent;                  /* its counter then */
    uint32_t seen_want[3];
    uint32_t others;                /* other nodes' connections */
    uint32_t fleet_grant;           /* as Redis granted it */
    uint64_t bo_since;              /* the local episode published */
    char     bo_seen[96];           /* the fleet episode applied */
};

struct cl_agent {
    const struct config *cfg;
    uint64_t             jitter;    /* xorshift state: the horizon's spread */
    struct status_page  *st;
    struct shape_table  *shape;
    struct cluster_page *page;
    const char          *pass;
    char                 node[CLUSTER_ID_MAX];
    const char          *prefix;
    uint64_t             sync_ms;
    /* the connection */
    redisContext        *rc;
    char                 addr[160];
    char                 sha[CL_NSCRIPTS][41];
    char                 why[256];
    /* the cycle's pipeline */
    struct cl_pend      *pend;
    size_t               npend, cappend;
    const char          *argv[CL_ARGS];
    size_t               argl[CL_ARGS];
    int                  argc;
    char                 argbuf[CL_ARGBUF];
    size_t               arglen;
    /* the fleet as last seen */
    uint32_t             nodes;     /* live, at least 1 */
    struct cl_node       node_list[CL_MAX_NODES];
    size_t               nnode_list;
    uint64_t             redis_now_ms;
    struct cl_pair       pair[SHAPE_SLOTS];
    struct shape_view   *views;     /* SHAPE_SLOTS */
    size_t               nviews;
    size_t               fleet_bans, fleet_auth, fleet_quotas;
    /* the first of them, for the report */
    struct { char addr[48]; uint64_t left_ms; } ban_list[CL_SHOWN];
    size_t               nban_list;
    uint32_t             unban_tail;
    struct { uint32_t key; long long count; } auth_list[CL_SHOWN];
    size_t               nauth_list;
    /* fallback */
    int                  fallback;
    uint64_t             fb_since_ms, retry_at_ms, retry_ms, last_cycle_ms;
};

/* cluster_redis.c */
int     cl_connect(struct cl_agent *g);         /* -1: g->why */
void    cl_disconnect(struct cl_agent *g);
void    cl_args(struct cl_agent *g);            /* start a command */
void    cl_arg(struct cl_agent *g, const char *fmt, ...)
            __attribute__((format(printf, 2, 3)));
void    cl_argb(struct cl_agent *g, const char *s, size_t n);
/* the command built, with its reply's purpose */
void    cl_send(struct cl_agent *g, const struct cl_pend *p);
/* EVALSHA of script s with nkeys keys: call before the keys and args */
void    cl_eval(struct cl_agent *g, int s, int nkeys);
/* write the pipeline, read every reply into fn: 0, or -1 (g->why) */
typedef void cl_reply_fn(struct cl_agent *g, const struct cl_pend *p,
            const redisReply *r);
int     cl_flush(struct cl_agent *g, cl_reply_fn *fn);

/* cluster_shape.c */
void    cl_shape_queue(struct cl_agent *g);
void    cl_shape_reply(struct cl_agent *g, const struct cl_pend *p,
            const redisReply *r);
void    cl_shape_fallback(struct cl_agent *g, uint64_t dt_ms);
void    cl_shape_rejoin(struct cl_agent *g);

/* cluster_tables.c */
void    cl_tables_queue(struct cl_agent *g);
void    cl_tables_reply(struct cl_agent *g, const struct cl_pend *p,
            const redisReply *r);
void    cl_tables_fallback(struct cl_agent *g);

/* cluster_view.c */
void    cl_view_publish(struct cl_agent *g);

#endif /* MTAD_CLUSTER_INT_H */
