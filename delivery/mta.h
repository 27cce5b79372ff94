/*
 * mta.h - the outbound SMTP client inside a worker's event loop: one
 * state machine per connection toward a next hop, connection reuse per
 * destination.  Internal to delivery/ (delivery.h is the module's
 * contract); the protocol text it speaks comes from smtp/.
 *
 * CONTRACT  deliver.c hands mta_submit() one transaction: a message (its
 *           envelope and the open queue file), a subset of its recipients
 *           that share one SMTP route, and a completion callback.  The relay
 *           fills one struct mta_result per recipient and calls done()
 *           exactly once, from the loop (never from inside mta_submit()).
 *           A "destination" is the key in txn->dest (the route text, or
 *           "mx:<domain>" for an mx route): transactions to the same
 *           destination share its concurrency cap.  The addresses to try
 *           come resolved in txn->hops (resolve.c; the relay never resolves
 *           a name); without hops, only the address literals of the route
 *           are used.  An idle connection is reused by any destination
 *           that has its address and port among its hops and the same
 *           TLS requirement there (tls_req_same()): domains that share MX
 *           hosts share their connections, never across TLS policies.
 *           TLS: STARTTLS as each hop's tls says (tlspol.h); the
 *           destination is (txn->dest, txn->tls.level); every result
 *           carries the TLS outcome of its connection (res[].tls).
 *           The txn, env and fd belong to the caller and must stay valid
 *           until done() ran.
 * FAILURE   Never fails to the caller: every problem becomes a deferred or
 *           bounced result with a reason in SMTP form ("451 4.4.1 ...").
 */
#ifndef MTAD_MTA_H
#define MTAD_MTA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "tlspol/tlspol.h"
#include "router/route.h"
#include "shape/shape.h"
#include "smtp/smtp.h"

struct ev_loop;
struct spool_env;


/* A recipient's verdict.  Never 0: a verdict is no return code, and a
 * deferral must not read as MTA_OK (common/util.h). */
enum mta_status { MTA_DEFER = 1, MTA_SENT, MTA_BOUNCE };

/* "host[ip]:port" with its NUL: a 255-byte name, an IPv6 address, a port. */
#define MTA_RELAY_MAX 320

struct mta_result {
    enum mta_status status;
    char    reply[SMTP_REPLY_MAX]; /* peer's reply or our reason */
    char    relay[MTA_RELAY_MAX];   /* "host[ip]:port", or "none" */
    struct tls_outcome tls;         /* of the connection the verdict came
                                       from (used 0: plaintext or none) */
    int     peer_dsn;               /* that connection's EHLO had DSN, so
                                       NOTIFY and ORCPT went with RCPT and
                                       the next hop reports a success */
    char    source[ROUTE_POOL_MAX + 1]; /* egress source of that
                                       connection, or "" (none opened) */
};

/* One address to try, from DNS or a literal route host. */
struct mta_hop {
    char        name[256];          /* MX or route host, for relay=... */
    unsigned    port;
    struct sockaddr_storage ss;     /* address and port */
    socklen_t   len;
    struct tls_req tls;             /* what a connection to it must meet
                                       (tlspol.h; set by resolve.c) */
};

struct mta_txn;
typedef void mta_done_fn(struct mta_txn *t);

struct mta_txn {
    /* set by the caller */
    const struct spool_env *env;
    int         fd;                 /* queue file (locked by the caller) */
    off_t       body_off;
    const char *dest;               /* route text: the destination key */
    const struct route *route;      /* parsed, ROUTE_SMTP or ROUTE_MX */
    const struct mta_hop *hops;     /* addresses in the order to try */
    size_t      nhops;
    size_t     *rcpt;               /* indexes into env->rcpt */
    size_t      nrcpt;
    struct mta_result *res;       /* nrcpt entries, filled by mta.c */
    /* TLS policy of the txn: level and policy_domain (deliver.c); the
     * hops carry it per host (resolve.c adds verify_name, DANE, STS) */
    struct tls_req tls;
    int         pool;               /* egress pool: mta_egress_pool(); 0
                                       (the default pool) when unset */
    mta_done_fn *done;
    void       *arg;
    int         cut;                /* set by mta_abort(): res[] unused */
    /* set by the client: traffic shaping held t back (mta_shape.c): its
     * recipients were not tried, res[] unused; the site may go from
     * not_before_ms (wall) on.  shape_e: its shaping entry (-1 none) */
    int         held;
    uint64_t    not_before_ms;
    int         shape_e, shape_block;
    int         shape_paid;         /* its event taken from the rates */
    int         shape_se;           /* the entry of the source that carried
                                       it (its counters and back-off); -1:
                                       none.  shape_e stays the site's wait
                                       list (the first source's entry), so
                                       a delivery from any source releases
                                       the next held message */
    char        site[SHAPE_NAME_MAX];
    /* private to the client (mta*.c) */
    struct mta_txn *next;
    int         accepted;           /* RCPTs the peer accepted */
    int         restarts;           /* fresh connections after a stale one */
    /* the recipients the transaction in progress carries: rcpt[first ..
     * first + count).  A peer's LIMITS (RFC 9422) can split t over
     * several transactions; mta_idle() moves first on */
    size_t      first;
    size_t      count;
    struct tls_outcome tls_out;     /* copied into res[] by mta_set() */
    int         peer_dsn;           /* the same: the next hop offers DSN */
    const char *src_name;           /* the same: the source's name */
};

struct mta;
struct config;
struct config_mta_timeouts;

/* conns_per_dest: this worker's cap of connections per destination. */
struct mta *mta_new(struct ev_loop *loop, const char *helo_name,
            uint64_t connect_timeout_ms, unsigned conns_per_dest);
/* delivery.timeouts (copied); mta_new() starts from RFC 5321's. */
void    mta_set_timeouts(struct mta *r,
            const struct config_mta_timeouts *t);
/* The client TLS context for STARTTLS (tls_client_ctx(); NULL: never
 * STARTTLS, a mandatory level defers).  The relay owns it from here. */
struct ssl_ctx_st;
void    mta_set_tls(struct mta *r, struct ssl_ctx_st *ctx);
/* Called once per TLS attempt on a connection, from the loop: after a
 * handshake (o->used, o->failure set when the policy check failed), or
 * when a required STARTTLS was missing or the handshake failed (o->used
 * 0, o->failure set).  Plaintext by policy (none, may without STARTTLS)
 * is not reported.  For TLS-RPT (RFC 8460: one result per policy domain
 * and MX host); host is "name[ip]:port".  NULL: off. */
typedef void mta_tls_report_fn(void *arg, const struct tls_req *req,
            const char *host, const struct tls_outcome *o);
void    mta_set_tls_report(struct mta *r, mta_tls_report_fn *fn, void *arg);
/* The egress sources and pools of cfg (copied; config_egress.c).
 * Without an egress section, and until this is called: one implicit
 * source "default" (binds nothing, says the relay's helo name) in one
 * pool "default".  Before the first mta_submit(). */
void    mta_set_egress(struct mta *r, const struct config *cfg);
/* The index of pool name for mta_txn.pool (NULL or "": the default
 * pool), or -1 when there is no such pool. */
int     mta_egress_pool(const struct mta *r, const char *name);
const char *mta_egress_pool_name(const struct mta *r, int pool);
/* The name of source src ("default": the implicit one; "?" when out of
 * range).  Valid while r lives. */
const char *mta_source_name(const struct mta *r, int src);
/* Next-hop health (mta_health.c): the node's table on the status page
 * (status.h), down_ms (delivery.host_down_for; 0: off) growing to max_ms
 * (delivery.host_down_max).  NULL sp: off. */
struct status_page;
void    mta_set_health(struct mta *r, struct status_page *sp,
            uint64_t down_ms, uint64_t max_ms);
void    mta_free(struct mta *r);            /* closes every connection */
void    mta_submit(struct mta *r, struct mta_txn *t);
/* An address literal (IPv4, or IPv6 without brackets) as a hop; 0, or -1
 * when name is not one.  No DNS. */
int     mta_hop_literal(const char *name, unsigned port, struct mta_hop *out);
/* The stop deadline: done() for transactions already finished; then
 * every other one is cut (its connection closed, nothing sent on) and
 * handed back at once through done() with cut set and its results
 * meaningless, except one whose final dot is out: it may still read its
 * reply for dot_grace_ms (then it times out like any stall).  No new
 * transaction starts afterwards. */
void    mta_abort(struct mta *r, uint64_t dot_grace_ms);
/* Close idle connections now and keep none idle from here on. */
void    mta_drain(struct mta *r);
/* Connections open (busy or idle), for tests and drain. */
size_t  mta_nconns(const struct mta *r);
/* Traffic shaping (mta_shape.c, shape.h): rules (NULL: off, nothing is
 * asked), the node-wide table and this worker's slot in it.  Before the
 * first mta_submit(). */
void    mta_set_shaping(struct mta *r, const struct shape_rules *rules,
            struct shape_table *tab, unsigned slot);
/* The site of t (shape.h): the one shaping gave it, else the canonical
 * name from its hops; into buf[SHAPE_NAME_MAX]. */
const char *mta_site_name(const struct mta *r, const struct mta_txn *t,
            char *buf);
/* A transaction is back (before its results are used): back-off rules
 * on its failure, bounce-action replies made bounces, a back-off reply
 * makes t held (not a retry).  cls: the bounce class, NULL unknown. */
void    mta_shape_done(struct mta *r, struct mta_txn *t, const char *cls);
/* Called when mta_shape_done() began (or made stricter) a back-off
 * episode: the pair, "suspend" or "slow", its end (wall ms; a slow-down:
 * the end of its ramp) and the reply that began it.  NULL: off. */
typedef void mta_shape_report_fn(void *arg, const char *site,
            const char *source, const char *mode, uint64_t until_ms,
            const char *reply);
void    mta_set_shape_report(struct mta *r, mta_shape_report_fn *fn,
            void *arg);


/* ---- private to the client: mta.c, mta_session.c, mta_txn.c,
 * mta_body.c, mta_tls.c ---- */

#include "common/buf.h"
#include "common/ev.h"
#include "common/net.h"
#include "config/config.h"

/*
 * Per-phase timeouts: delivery.timeouts in relay.yaml (struct
 * config_mta_timeouts, set with mta_set_timeouts()); the defaults are RFC
 * 5321 4.5.3.2's minimums.  A stalled greeting or EHLO moves on to the
 * next host (mta_lost); a stall later defers the open recipients.
 */
#define MTA_IDLE_MS      (10 * 1000)       /* reuse window */
#define MTA_CHUNK        (128 * 1024)      /* body read size */
#define MTA_MAX_ADDRS    16
#define MTA_REPLY_LIMIT  (64 * 1024)       /* longest reply we accept */
#define MTA_WRITE_TURNS  8                 /* body refills per callback */
/* A plaintext BDAT body goes out of memory: pread() into the connection's
 * out buffer, then one send() of up to MTA_BLOCK bytes: one copy costs
 * less CPU than sendfile()'s splicing of pages into the socket, and big
 * blocks less than 128 KiB reads (bench/RESULTS.md).  A body bigger than
 * MTA_BLOCK_SMALL takes a pooled MTA_BLOCK block while it is sent; at most
 * MTA_BLOCKS are out at once per worker, beyond that sendfile() goes on
 * without memory. */
#define MTA_BLOCK        (1024 * 1024)
#define MTA_BLOCK_SMALL  (64 * 1024)
#define MTA_BLOCKS       32
#define MTA_BLOCK_SPARE  8                 /* kept for the next body */
/* With PIPELINING and CHUNKING a body up to this size goes behind the
 * RCPTs (BDAT n LAST) without waiting for their replies: one round trip
 * a message.  A bigger one waits, so a refused transaction does not cost
 * its whole transfer. */
#define MTA_PIPE_BODY_MAX (256 * 1024)

/* The phases of a connection.  Only mta_enter() (mta_session.c) sets
 * one: it arms the phase's timer from its row of mta_states[] (limit,
 * name, the reply handler) and traces the move at debug level. */
enum mta_state {
    C_CONNECT = 0, C_GREETING, C_EHLO, C_HELO, C_RSET, C_TXN, C_BODY,
    C_DOT, C_IDLE, C_QUIT, C_STARTTLS, C_TLS,
    C_NSTATES
};

/* How TLS goes on the current host (tlspol.h decides; this remembers). */
enum mta_tls_fallback {
    MTA_TLS_POLICY = 0,         /* as the host's tls_req says */
    MTA_TLS_RETRY_PLAIN,        /* the handshake failed under may: the
                                   next connect is this host again, in
                                   plaintext (Postfix) */
    MTA_TLS_PLAIN               /* this is that retry: no STARTTLS */
};

/* What the transaction in progress on a connection has sent and heard;
 * mta_begin() starts it afresh. */
struct mta_progress {
    size_t   nreply;            /* replies received in this txn */
    size_t   nsent;             /* commands of the txn sent */
    uint64_t body_left;         /* body bytes not yet handed to the socket */
    off_t    body_pos;          /* where they start in the queue file */
    unsigned pipelining : 1;    /* the peer offers PIPELINING */
    unsigned bdat : 1;          /* and CHUNKING: BDAT, not DATA */
    unsigned mail_failed : 1;   /* MAIL refused: every recipient final */
    unsigned empty_data : 1;    /* 354 with no recipient accepted: "." */
    unsigned rset_pending : 1;  /* RSET pipelined ahead of MAIL */
    unsigned piped : 1;         /* BDAT LAST sent behind the RCPTs: their
                                   replies come in C_BODY/C_DOT */
};

/* per-recipient progress within a transaction; R_LATER: deferred with
 * "452 too many recipients", to go in the txn's next transaction when
 * this one delivered to others (mta_idle) */
enum { R_PENDING = 0, R_ACCEPTED, R_FINAL, R_LATER };

struct mta_dest;

struct mta_conn {
    struct mta      *r;
    struct mta_dest *dest;
    struct mta_conn *next;        /* dest->conns */
    int                src;         /* egress source (mta_egress.c): its
                                       address bound, its EHLO name */
    int                fd;          /* == net.fd */
    struct net_conn    net;         /* the transport: plain, or TLS */
    unsigned           watched;     /* EV_* mask given to the loop */
    enum mta_state     state;       /* written by mta_enter() only */
    unsigned           reused : 1;  /* has carried a transaction before */
    unsigned           perm : 1;    /* last host failure was permanent
                                       (5xx greeting, REQUIRETLS) */
    unsigned           out_block : 1; /* out.data is a pooled MTA_BLOCK */
    unsigned           probe : 1;   /* this connection is the probe of a
                                       hop marked down (mta_health.c) */
    unsigned           greeted : 1; /* the current hop sent a greeting:
                                       it answers, whatever follows */
    unsigned           drained : 1; /* the read whose replies are being
                                       handled left the socket empty
                                       (plaintext): see mta_stray() */
    int                shape_e;     /* the shaping entry whose connection
                                       slot c holds, -1 none */
    uint64_t           shape_nb_us; /* its source's rate is spent until
                                       then (monotonic): not taken from
                                       the idle ones before (0: none) */
    struct ev_timer    timer;
    struct buf         in, out;
    struct mta_hop     addr[MTA_MAX_ADDRS];
    size_t             naddr, cur;
    char               name[MTA_RELAY_MAX]; /* "host[ip]:port" */
    char               lasterr[SMTP_REPLY_MAX];
    unsigned           caps;
    struct smtp_ehlo   peer;        /* SIZE, LIMITS (RFC 9422) */
    uint32_t           ntxn;        /* transactions begun here (MAILMAX) */
    /* outbound TLS on this connection (tlspol.h; mta_tls.c) */
    struct tls_req     tls;         /* what the current host must meet */
    struct tls_outcome tlso;        /* what it gave */
    enum mta_tls_fallback tls_fallback;
    char               tls_key[MTA_RELAY_MAX + ROUTE_TEXT_MAX + 16];
                                    /* session cache key (tls_cache.c) */
    /* the transaction in progress */
    struct mta_txn  *txn;
    unsigned char     *rst;         /* R_* per recipient */
    size_t             rst_cap;
    size_t             expect;      /* commands sent, replies due */
    struct mta_progress tx;
    struct smtp_stuff stuff;
};

struct mta_dest {
    struct mta_dest *next;
    char               key[ROUTE_TEXT_MAX];
    int                tls_level;   /* part of the key: a destination is
                                       (route, TLS level, egress pool) */
    int                pool;        /* its sources: an idle connection
                                       from outside it never carries a
                                       txn of this destination */
    struct route       route;
    size_t             nconns;
    struct mta_conn *conns;
    struct mta_txn  *wait_head, *wait_tail;
    int                running;     /* inside mta_dest_run() */
    /* traffic shaping (mta_shape.c): entry -1 unshaped, -2 not yet set */
    int                shape_e, shape_block;
    struct shape_limits shape_lim;
    char               site[SHAPE_NAME_MAX];
    uint64_t           gate_us;     /* no message before (monotonic) */
    int                conn_token;  /* a connection slot taken for the
                                       next connect or adoption */
    int                token_src;   /* ... from this egress source */
    /* per egress source (index: r->src[]): its entry for (site, source)
     * and its limits, made at the first use (mta_shape_src()); shape_e
     * and shape_lim are those of the pool's first source */
    int               *src_e;       /* -1: not made yet */
    struct shape_limits *src_lim;
    size_t             nsrc;
    char               shape_dom[256]; /* the domain seen, for the view */
    struct ev_timer    shape_timer; /* mta_dest_run() at the gate */
    uint64_t           shape_at_us; /* when shape_timer fires (0: idle) */
    struct mta        *owner;       /* for the timer */
};

struct mta {
    struct ev_loop    *loop;
    char              *helo;
    uint64_t           connect_timeout_ms;
    struct config_mta_timeouts t;   /* per-phase limits */
    uint64_t           idle_ms;     /* MTA_IDLE_MS: the reuse window */
    unsigned           cap;
    int                draining;
    int                freeing;
    struct mta_dest *dests;
    size_t             nconns;
    char              *chunk;       /* MTA_CHUNK read buffer, shared */
    char              *block_spare[MTA_BLOCK_SPARE];
    unsigned           nblock_spare;
    unsigned           nblocks;     /* blocks held by connections */
    struct mta_txn  *posted;      /* finished, done() not yet called */
    struct ssl_ctx_st *tls_ctx;     /* client context, or NULL */
    struct tls_cache  *tls_cache;   /* sessions per destination and host */
    struct status_page *health;     /* next-hop health table, or NULL */
    uint32_t           down_s, down_max_s, probe_s;
    mta_tls_report_fn *tls_report;  /* or NULL */
    void              *tls_report_arg;
    struct ev_timer    post_timer;
    const struct shape_rules *shape; /* NULL: shaping off */
    struct shape_table *shape_tab;
    mta_shape_report_fn *shape_report;  /* or NULL */
    void              *shape_report_arg;
    unsigned           shape_ws;    /* our worker slot in it */
    /* egress sources and pools (mta_egress.c) */
    struct mta_src    *src;
    size_t             nsrc;
    struct mta_pool   *pools;
    size_t             npools;
    uint64_t           recheck_ms;  /* a source that could not bind */
    struct ev_timer    recheck_timer;
};

/* ---- egress: mta_egress.c ---- */

/* A local address mail leaves from, with its EHLO name. */
struct mta_src {
    char               name[ROUTE_POOL_MAX + 1];
    char              *ehlo;        /* NULL: the relay's helo name */
    struct sockaddr_storage ss;     /* port 0 */
    socklen_t          len;         /* 0: bind nothing (implicit source) */
    int                down;        /* could not bind (address gone): out
                                       of every pool until a recheck
                                       binds it again */
};
struct mta_member {
    int                src;
    int                weight;
    int64_t            credit;      /* weighted share owed minus taken, in
                                       weight units (mta_egress_take) */
    int                held;        /* the last pick's allow() refused it:
                                       out of the split until one allows */
};
struct mta_pool {
    char               name[ROUTE_POOL_MAX + 1];
    struct mta_member *m;
    size_t             nm;
};
/* allow: may d open a connection from src now (shape's per site x
 * source check); 0 no, and *not_before when it may (0: unknown). */
typedef int mta_src_allow_fn(void *arg, struct mta_dest *d, int src,
            uint64_t *not_before);
/* The source for a new connection of d: the usable one of d's pool that
 * allow (NULL: any) accepts and that is owed the most messages of its
 * weight (smooth weighted round robin, counted per message taken); -1
 * when none, *not_before the earliest an allow() refusal named (0 when
 * no source of the pool is usable at all: every one is down). */
int     mta_egress_pick(struct mta *r, struct mta_dest *d,
            mta_src_allow_fn *allow, void *arg, uint64_t *not_before);
/* c takes t: count it for c's source in t's pool (the round robin's
 * state), and name the source in t's results. */
void    mta_egress_take(struct mta_conn *c, struct mta_txn *t);
/* 0 when c's source has taken more than its share of its pool's
 * messages by MTA_EGRESS_SLACK and another usable source that allow
 * (NULL: any) accepts is owed some:
 * c should not take the next message (it closes; the next connection
 * comes from the one owed most).  Else 1. */
#define MTA_EGRESS_SLACK 8
int     mta_egress_fair(const struct mta_conn *c, mta_src_allow_fn *allow,
            void *arg);
/* 1 when c's source is a usable member of d's pool (mta_adopt). */
int     mta_egress_fits(const struct mta_conn *c, const struct mta_dest *d);
/* 1 when src is one of pool's sources (mta_conn_fits). */
int     mta_egress_member(const struct mta *r, int pool, int src);
/* Bind c's new socket fd to c's source before connect() to hop a.  0;
 * 1 when the source turned out gone (EADDRNOTAVAIL: taken out, logged
 * once) and c moved to another source of its pool: connect to a again;
 * -1 with c->lasterr set: skip a (family mismatch, bind error, no usable
 * source left). */
int     mta_egress_bind(struct mta_conn *c, int fd, const struct mta_hop *a);
/* For shaping (mta_shape.c): the number of sources (the index range of
 * r->src), the first source of d's pool, and its usable sources (not
 * gone) into out (at most max; their number). */
size_t  mta_egress_nsrc(const struct mta *r);
int     mta_egress_first(const struct mta *r, const struct mta_dest *d);
size_t  mta_egress_sources(const struct mta *r, const struct mta_dest *d,
            int *out, size_t max);
/* The EHLO name c says. */
const char *mta_egress_helo(const struct mta_conn *c);
/* d's pool has no usable source: defer every waiting txn of d. */
void    mta_egress_none(struct mta *r, struct mta_dest *d);
void    mta_egress_free(struct mta *r);
/* mta.c: the body blocks (MTA_BLOCK).  mta_block_take() moves c's
 * buffered bytes into a block and returns 1, or 0 when all are out;
 * mta_block_give() hands it back and leaves out empty and small. */
int     mta_block_take(struct mta_conn *c);
void    mta_block_give(struct mta_conn *c);
/* mta.c: completion, destinations, connections, fail-over. */
/* Run d's queue (after a source came back, or c declined a txn). */
void    mta_dest_kick(struct mta *r, struct mta_dest *d);
void    mta_post(struct mta *r, struct mta_txn *t);
void    mta_set(struct mta_txn *t, size_t i, enum mta_status status,
            const char *reply, const char *relay);
/* A reply code as a result: 2xx sent, 5xx bounced, else deferred. */
enum mta_status mta_status_of(int code);
struct mta_txn *mta_dest_pop(struct mta_dest *d);
void    mta_dest_push_front(struct mta_dest *d, struct mta_txn *t);
void    mta_dest_run(struct mta *r, struct mta_dest *d);
void    mta_conn_close(struct mta_conn *c);
void    mta_lost(struct mta_conn *c, const char *why);
void    mta_connected(struct mta_conn *c);
/* 1 when idle c may carry t: its source is one of t's egress pool, its
 * host is one of t's hops and the TLS requirement it was set up under is
 * the same (tls_req_same()). */
int     mta_conn_fits(const struct mta_conn *c, const struct mta_txn *t);
/* c cannot carry t (mta_conn_fits): t back to the head of the queue, c
 * closed with a QUIT.  Returns 1 (c is gone). */
int     mta_conn_unfit(struct mta_conn *c, struct mta_txn *t);
/* QUIT written as far as the socket takes it (no reply awaited), then
 * mta_conn_close(). */
void    mta_conn_quit(struct mta_conn *c);

/* mta_health.c: next-hop health (status.h, node-wide).  skip: before a
 * connect to hop a, 1 when it is marked down (c->lasterr says so; the
 * caller moves on), else 0 (c->probe set when this is its probe);
 * failed: c's hop did not answer (connect refused or timed out, no
 * greeting): mark it down; answered: c's hop greeted (any reply): mark
 * it up.  Each logs once per episode, never per message. */
int     mta_health_skip(struct mta_conn *c, const struct mta_hop *a);
void    mta_health_failed(struct mta_conn *c, const char *why);
void    mta_health_answered(struct mta_conn *c);
/* mta_shape.c: shaping at the seams (see mta_may_connect() in mta.c and
 * mta_conn_next()).  dest_init: d's site, limits and entry, from its
 * first txn; gate: may the head message of d start now (0: its event is
 * taken, t->shape_paid), else the queue is trimmed (the rest held) and
 * d's timer armed (1); may_connect: one more
 * connection (a slot taken into d->conn_token); take: c uses the token
 * (a new or adopted connection); give: c closes; next: the top of
 * mta_conn_next() (0 go on, 1 c closed, 2 c parked idle); idle_ms: the
 * reuse window of c; allow: the egress pick's callback (SHAPING.md). */
void    mta_shape_dest_init(struct mta *r, struct mta_dest *d,
            const struct mta_txn *t);
int     mta_shape_gate(struct mta *r, struct mta_dest *d);
int     mta_shape_may_connect(struct mta *r, struct mta_dest *d);
void    mta_shape_take(struct mta_conn *c);
void    mta_shape_give(struct mta_conn *c);
int     mta_shape_next(struct mta_conn *c, struct mta_txn *t);
uint64_t mta_shape_idle_ms(const struct mta_conn *c);
void    mta_shape_dest_free(struct mta *r, struct mta_dest *d);
int     mta_shape_allow(void *arg, struct mta_dest *d, int src,
            uint64_t *not_before);
/* The source the slot taken by mta_shape_may_connect() is for (the next
 * connection binds it), or -1 when no slot is held (unshaped). */
int     mta_shape_token_src(const struct mta_dest *d);
/* 1 when idle c may take d's next message now (its source's rate is not
 * spent: see shape_nb_us). */
int     mta_shape_ready(const struct mta_conn *c);
/* The limits of c's source toward its site (recipients per message). */
const struct shape_limits *mta_shape_lim(const struct mta_conn *c);

/* mta_session.c: the SMTP conversation on one connection. */
/* The only way c->state changes: s, its timer armed with the phase's
 * limit (mta_states[]), the move traced at debug level. */
void    mta_enter(struct mta_conn *c, enum mta_state s);
/* The same under another limit than the phase's: only a transaction
 * whose pipelined RSET answers first, under the RSET's (helo) limit. */
void    mta_enter_for(struct mta_conn *c, enum mta_state s, uint64_t ms);
/* "sending EHLO" ...: c's phase in words, for a reason. */
const char *mta_phase(const struct mta_conn *c);
int     mta_watch(struct mta_conn *c, unsigned mask);
/* Write what is buffered as far as the socket takes it; more: body bytes
 * follow at once (MSG_MORE, plaintext).  0, or -1 with lasterr set. */
int     mta_send_more(struct mta_conn *c, int more);
/* The same, then watch for writability while some is left. */
int     mta_flush(struct mta_conn *c);
/* mta_flush(), and a failed socket loses c (mta_lost).  1 then, else 0. */
int     mta_push(struct mta_conn *c);
void    mta_cmd(struct mta_conn *c, const char *fmt, ...)
            __attribute__((format(printf, 2, 3)));
/* Push the current phase's timer on (a reply or a chunk came). */
void    mta_arm(struct mta_conn *c, uint64_t ms);
void    mta_begin(struct mta_conn *c, struct mta_txn *t, int rset);
int     mta_conn_next(struct mta_conn *c);
void    mta_io(struct ev_loop *loop, int fd, unsigned ev, void *arg);
void    mta_timeout(struct ev_loop *loop, struct ev_timer *tm, void *arg);

/* mta_txn.c: the transaction.  precheck: may t go to this peer at all
 * (0, or -1: t was bounced without a command, c stays usable); idle: the
 * transaction is over, hand it back and take the next (1: c closed);
 * final: a final reply for every accepted recipient; txn_reply: a reply
 * in C_TXN; piped_reply: one to RSET/MAIL/RCPT while a pipelined BDAT
 * is out (C_BODY, C_DOT).  The replies return 1 when c was closed. */
int     mta_precheck(struct mta_conn *c, struct mta_txn *t);
int     mta_idle(struct mta_conn *c);
void    mta_final(struct mta_conn *c, const struct smtp_reply *rp);
int     mta_txn_reply(struct mta_conn *c, const struct smtp_reply *rp);
int     mta_piped_reply(struct mta_conn *c, const struct smtp_reply *rp);

/* mta_body.c: the content.  start: enter C_BODY (354 to DATA, or BDAT
 * with the RCPTs accepted or pipelined); write: move body bytes toward
 * the socket, then the end of data (C_DOT).  0, or -1 with lasterr. */
void    mta_body_start(struct mta_conn *c);
int     mta_body_write(struct mta_conn *c);

/* mta_tls.c: STARTTLS under c->tls.  Each returns 1 when c was closed
 * or moved on, else 0.  ehlo: after a 2xx EHLO in plaintext, STARTTLS or
 * not; refused: STARTTLS got no 220 (why: the reply); failed: the
 * handshake failed (err); begin: 220 to STARTTLS, start the handshake;
 * step: drive it (from mta_io). */
int     mta_tls_ehlo(struct mta_conn *c);
int     mta_tls_refused(struct mta_conn *c, const char *why);
int     mta_tls_failed(struct mta_conn *c, const char *err);
int     mta_tls_begin(struct mta_conn *c);
int     mta_tls_step(struct mta_conn *c);
/* Report c's TLS attempt (c->tls, c->tlso) to the observer. */
void    mta_tls_report(struct mta_conn *c);
/* The attempt's outcome for TLS-RPT: failure "" for success, else an
 * RFC 8460 result type; reason optional. */
void    mta_tlsrpt(struct mta_conn *c, const char *failure,
            const char *reason);
/* OpenSSL's new-session callback of the client context: the session
 * into r->tls_cache under the connection's key. */
struct ssl_session_st;
int     mta_tls_new_session(struct ssl_st *ssl, struct ssl_session_st *s);

#endif /* MTAD_MTA_H */
