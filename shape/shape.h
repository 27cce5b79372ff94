/*
 * shape.h - traffic shaping: sites, per (site x source) limits, the
 * node-wide shared counters and automatic back-off.  Uses common only;
 * delivery asks it before a connection and before each message
 * (delivery/mta_shape.c), the master makes the shared table before the
 * first fork and shows it (mtactl shaping, /metrics).
 *
 * CONTRACT  Rules (struct shape_rules) come from relay.yaml's shaping:
 *           section and its optional rules_file, loaded whole by
 *           shape_rules_load(): they never change after the load (a reload
 *           loads new ones; a bad file keeps the old).  NULL rules mean
 *           shaping is off: callers then ask nothing at all.
 *           A site is named from the MX host set of a destination
 *           (shape_site()): the most specific matching site block gives
 *           its name and limits, else the lowest-preference MX host's
 *           parent domain (or the domain, for literal routes) names it.
 *           Limits are per (site, source name) and hold node-wide: the
 *           shared table (shape_table_create(), MAP_SHARED, inherited by
 *           every worker) counts connections with a compare-and-swap
 *           against the limit, keeps each worker slot's share of them (the
 *           master clears a dead worker's share, shape_slot_clear()), and
 *           the GCRA theoretical arrival time of every rate, also with a
 *           CAS: two workers never double a limit.  Back-off state
 *           (suspend, slow with its ramp) lives in the same entry; a
 *           change of it takes the entry's small lock (rare: a reply that
 *           matched a back-off rule, a tick, mtactl).
 *           Times: rates run on CLOCK_MONOTONIC microseconds (the same in
 *           every process), back-off on wall-clock milliseconds (shown).
 * FAILURE   Loading returns -1 with "file:line:col: message".  A full
 *           table (SHAPE_SLOTS entries) leaves new pairs unshaped
 *           (shape_entry() -1): mail goes on, the caller logs once.
 *           Nothing here logs: the caller logs the events it is handed.
 */
#ifndef MTAD_SHAPE_H
#define MTAD_SHAPE_H

#include <stddef.h>
#include <stdint.h>

#define SHAPE_NAME_MAX    64        /* a site or source name, with its NUL */
#define SHAPE_REPLY_MAX   200       /* the triggering reply, escaped */
#define SHAPE_SLOTS       1024      /* (site, source) pairs per node */
#define SHAPE_MAX_WORKERS 128       /* = STATUS_MAX_WORKERS */

/* One rate: n per per_ms (n 0: none). */
struct shape_rate {
    uint32_t n;
    uint64_t per_ms;
};

/* The rates a pair has: deliveries per second, minute, hour, and new
 * connections per interval. */
enum { SHAPE_R_SEC = 0, SHAPE_R_MIN, SHAPE_R_HOUR, SHAPE_R_CONN,
       SHAPE_NRATES };

/* Limits in force for one (site, source); 0 is "no limit". */
struct shape_limits {
    uint32_t connections;           /* open at once, node-wide */
    uint32_t messages_per_connection;
    uint32_t recipients_per_message; /* per transaction */
    uint32_t burst;                 /* deliveries beyond the rate at once */
    struct shape_rate rate[SHAPE_NRATES];
};

/* ---- rules ---- */

struct shape_rules;
/* The shaping: section of the relay.yaml at config_path and its
 * rules_file.  0 with *out NULL when there is no shaping: section; 0
 * with *out set; -1 with err "file:line:col: ...". */
int     shape_rules_load(const char *config_path, struct shape_rules **out,
            char *err, size_t errsz);
/* The same from text (tests); name is used in messages. */
int     shape_rules_parse(const char *name, const char *text, size_t len,
            struct shape_rules **out, char *err, size_t errsz);
void    shape_rules_free(struct shape_rules *r);
/* Where the rules came from ("relay.yaml, shaping.yaml"), for logs. */
const char *shape_rules_origin(const struct shape_rules *r);

/*
 * shape_site - the site of a destination: domain (the recipients'
 * domain, or NULL) and its next hops' host names mx[0..nmx) in
 * preference order.  Writes the name into site[SHAPE_NAME_MAX] and
 * returns the matching site block (-1: none, the defaults apply).
 */
int     shape_site(const struct shape_rules *r, const char *domain,
            const char *const *mx, size_t nmx, char *site);
/* The limits of block (-1: defaults) for source. */
void    shape_limits_of(const struct shape_rules *r, int block,
            const char *source, struct shape_limits *out);
/* Is block a named site of the rules that lists domain?  For mtactl
 * suspend DOMAIN: the site name, or NULL. */
const char *shape_site_of_domain(const struct shape_rules *r,
            const char *domain);
/* A glob with * and ? on host names (case-insensitive). */
int     shape_glob(const char *pat, const char *s);

/* ---- back-off ---- */

enum shape_act { SHAPE_ACT_NONE = 0, SHAPE_ACT_SUSPEND, SHAPE_ACT_SLOW,
                 SHAPE_ACT_BOUNCE };
/* failure kinds of a reply made by mtad itself */
enum shape_kind { SHAPE_K_REPLY = 0, SHAPE_K_CONNECT, SHAPE_K_TLS,
                  SHAPE_K_DNS, SHAPE_K_TIMEOUT };

struct shape_action {
    enum shape_act act;
    int      rule;                  /* index in its list, for the log */
    uint64_t for_ms;                /* suspend: the time; slow: at factor */
    uint32_t factor;                /* slow: per mille of the rate */
    uint32_t steps;                 /* slow: ramp steps back to 1000 */
    uint64_t step_ms;               /* each step's time */
    struct shape_rate base;         /* slow on a site without a rate */
};

/* The action of the first back-off rule of block (then the global ones,
 * then the built-in defaults when the rules list none) that matches the
 * reply ("421 4.7.28 text"), kind and class (NULL: unknown).  act NONE
 * when none matches. */
void    shape_backoff_match(const struct shape_rules *r, int block,
            const char *reply, enum shape_kind kind, const char *cls,
            struct shape_action *out);
/* The kind of one of mtad's own reasons ("connect to ...", "451 4.4.2
 * ... timed out", TLS, DNS), SHAPE_K_REPLY for a next hop's reply. */
enum shape_kind shape_kind_of(const char *reply);
const char *shape_kind_name(enum shape_kind k);
const char *shape_act_name(enum shape_act a);

/*
 * The slow ramp, pure: an episode that began at since_ms with a =
 * (factor, for_ms, steps, step_ms).  At now: the factor in force (per
 * mille) and the step (0: still at factor, 1..steps: ramping, steps + 1:
 * over, factor 1000).
 */
uint32_t shape_ramp(const struct shape_action *a, uint64_t since_ms,
            uint64_t now_ms, uint32_t *step);

/*
 * GCRA, pure: one event against a rate of interval_us per event with a
 * tolerance of burst events.  *tat is the theoretical arrival time; 0
 * and *tat moved on when the event may go at now_us, else -1 with
 * *not_before_us the first time it may (tat untouched).
 */
int     shape_gcra(uint64_t *tat, uint64_t now_us, uint64_t interval_us,
            uint32_t burst, uint64_t *not_before_us);
/* A rate's interval between events at factor per mille (0 none). */
uint64_t shape_interval_us(const struct shape_rate *r, uint32_t factor);

/* ---- the shared table ---- */

struct shape_table;
struct shape_table *shape_table_create(void);  /* NULL: errno */

enum shape_mode { SHAPE_M_NONE = 0, SHAPE_M_SUSPEND, SHAPE_M_SLOW };

/* What the view shows of one pair (shape_table_list()). */
struct shape_view {
    int      e;                         /* the entry */
    char     site[SHAPE_NAME_MAX], source[SHAPE_NAME_MAX];
    char     domain[SHAPE_NAME_MAX];    /* the last domain seen there */
    struct shape_limits lim;            /* as the workers last set them */
    uint32_t conns;
    enum shape_mode mode;
    int      manual;
    uint32_t factor, step, steps;       /* slow */
    uint64_t since_ms, until_ms;        /* wall: episode start, suspend
                                           end or the ramp's end */
    char     reply[SHAPE_REPLY_MAX];    /* escaped */
    uint64_t sent, held, backoffs;      /* counters */
};

/* The pair's entry, claimed when new; -1 when the table is full. */
int     shape_entry(struct shape_table *t, const char *site,
            const char *source);
/* The same, without claiming: -1 when absent. */
int     shape_entry_find(struct shape_table *t, const char *site,
            const char *source);
/* Publish the limits in force and the domain last seen (for the view). */
void    shape_entry_set(struct shape_table *t, int e,
            const struct shape_limits *lim, const char *domain);

/* One more connection from worker slot ws unless max (0: none) are open
 * node-wide: 0, or -1.  Every 0 is paired with one shape_conn_give() by
 * the same slot, or the slot's share is cleared by shape_slot_clear(). */
int     shape_conn_take(struct shape_table *t, int e, unsigned ws,
            uint32_t max);
void    shape_conn_give(struct shape_table *t, int e, unsigned ws);
uint32_t shape_conns(struct shape_table *t, int e);
void    shape_slot_clear(struct shape_table *t, unsigned ws);

/*
 * shape_may - may the pair go now?  For a message (kind SHAPE_R_SEC:
 * the three delivery rates) or a new connection (SHAPE_R_CONN), under
 * lim and the back-off in force; take: consume (the event happens).
 * 0, or -1 with *not_before_us (monotonic) when it may not (suspended:
 * the end of the suspension).
 */
int     shape_may(struct shape_table *t, int e, const struct shape_limits *lim,
            int kind, int take, uint64_t now_us, uint64_t now_wall_ms,
            uint64_t *not_before_us);
/* Is the pair suspended at now (wall)?  (A load or two.) */
int     shape_suspended(struct shape_table *t, int e, uint64_t now_wall_ms);

/* Start an episode of a (suspend or slow) for the pair, unless one at
 * least as strict is in force; reply is the trigger (escaped here).
 * 1 when this call started or changed it (log it), else 0. */
int     shape_backoff(struct shape_table *t, int e,
            const struct shape_action *a, const char *reply,
            uint64_t now_wall_ms, int manual);
/* End the pair's episode now; 1 when there was one. */
int     shape_resume(struct shape_table *t, int e);

/* Counters for the view and metrics; shape_sent(): entry e's (0 for a
 * free one). */
void    shape_count(struct shape_table *t, int e, uint64_t sent,
            uint64_t held);
uint64_t shape_sent(struct shape_table *t, int e);

/* The master's tick: the ramp steps and episode ends due at now, handed
 * to ev (the caller logs each: e, what, factor).  what: "step", "end". */
typedef void shape_event_fn(void *arg, const struct shape_view *v,
            const char *what);
void    shape_tick(struct shape_table *t, uint64_t now_wall_ms,
            shape_event_fn *ev, void *arg);

/* The live pairs (claimed entries), at most max; their number. */
size_t  shape_table_list(struct shape_table *t, uint64_t now_wall_ms,
            struct shape_view *out, size_t max);
/* The site of a live entry whose last domain seen is domain, into
 * site[SHAPE_NAME_MAX]; NULL when none. */
const char *shape_site_seen(struct shape_table *t, const char *domain,
            char *site);
/* Every live entry e with site (and source, when not NULL): fn(e). */
size_t  shape_table_each(struct shape_table *t, const char *site,
            const char *source, void (*fn)(struct shape_table *, int, void *),
            void *arg);

/* ---- the fleet (cluster/, docs/SCALING.md) ---- */

/*
 * Cluster mode: the limits of each pair hold for the fleet of nodes, and
 * a node may hold only the connections and send only the messages its
 * sync agent was granted (the agent writes the grants, the workers only
 * read and spend them).  Set by the master before the first fork.  In
 * it, for a pair with a connection limit, shape_conn_take() also stops
 * at the grant; for a pair with a delivery (or new-connection) rate,
 * shape_may() also spends a token of the pair's stock (kind 0:
 * deliveries, 1: new connections) no sooner than the token's reserved
 * time ("not before" it), and says "not before now + wait_us" when the
 * stock is empty.  Each refusal for want of a grant or a token
 * is counted (the agent's demand signal).  A new pair starts with no
 * grant and no token: it waits for the agent's next sync.
 */
#define SHAPE_FLEET_MSG  0
#define SHAPE_FLEET_CONN 1
void    shape_fleet_on(struct shape_table *t, uint32_t wait_us);
int     shape_fleet_is(const struct shape_table *t);
/* Cluster mode off (the section was removed): the local limits alone. */
void    shape_fleet_off(struct shape_table *t);
/* conns >= max, or (cluster mode, max > 0) >= the grant: the local look
 * of shape_conn_take() (counts a refusal for want of a grant). */
int     shape_conn_full(struct shape_table *t, int e, uint32_t max);

struct shape_fleet {
    uint32_t conns;                 /* open here */
    uint32_t grant;                 /* connections granted here */
    uint32_t conn_want;             /* refusals for want of a grant */
    int32_t  tokens[2];             /* the stock, per kind */
    uint64_t used[2];               /* tokens spent (counter) */
    uint32_t want[2];               /* refusals for want of a token */
    uint64_t next_us[2];            /* the next token's time */
};
void    shape_fleet_get(struct shape_table *t, int e, struct shape_fleet *f);
void    shape_fleet_grant(struct shape_table *t, int e, uint32_t grant);
/* Add n tokens of kind to the stock, reserved for first_us (monotonic;
 * may be past: a burst) and every iv_us after it: the tokens left are
 * spent first, ending no later than first_us; a token is spent no sooner
 * than its time (a worker is told "not before" it). */
void    shape_fleet_add(struct shape_table *t, int e, int kind, int32_t n,
            uint64_t first_us, uint64_t iv_us);
/* Take the whole stock of kind back: how many there were. */
int32_t shape_fleet_drain(struct shape_table *t, int e, int kind);
/* The pair's back-off episode in force at now (0: none): its action
 * (for_ms as it was started), start (wall ms) and the escaped reply. */
int     shape_backoff_get(struct shape_table *t, int e, uint64_t now_wall_ms,
            struct shape_action *a, uint64_t *since_ms,
            char reply[SHAPE_REPLY_MAX]);

#endif /* MTAD_SHAPE_H */
