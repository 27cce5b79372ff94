/*
 * status.h - the shared status page: one anonymous MAP_SHARED mapping made
 * by the master before the first fork.
 *
 * CONTRACT  Each worker slot has one writer (the worker in it); counters are
 *           updated with relaxed atomics (STATUS_ADD).  The master writes
 *           load_x100 and throttle every few seconds; workers only read them.
 *           Nobody on a hot path calls getloadavg() or reads /proc.
 */
#ifndef MTAD_STATUS_H
#define MTAD_STATUS_H

#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>

#define STATUS_MAX_WORKERS 128
#define STATUS_IP_SLOTS    16384    /* per worker slot, power of two; 128 KiB,
                                       touched lazily */
#define STATUS_AUTH_SLOTS  8192     /* AUTH failure table, power of two */
#define STATUS_BAN_SLOTS   8192     /* auto-ban table, power of two */
#define STATUS_BCLASS_SITES  256   /* failed attempts by class x site:
                                       rows (the last one is "other") */
#define STATUS_BCLASS_NCLASS 16    /* columns, at least bclass.h's classes */
#define STATUS_BCLASS_SITE_LEN 64  /* a site name, NUL included */
#define STATUS_HOP_SLOTS   1024     /* next-hop health, power of two */
#define STATUS_HOP_ERR     112      /* bytes of a hop's last error */

/* A row of the next-hop health table (status_health.c): word is the
 * entry (0: free), the rest belongs to whoever claimed the word. */
struct status_hop_row {
    uint64_t word;                  /* key << 40 | flags << 32 | until_s */
    uint64_t addr[2];               /* the address, IPv4 as v4-mapped */
    uint32_t port;
    uint32_t since_s;               /* first failure of this episode */
    char     err[STATUS_HOP_ERR];   /* last error, escaped, terminated */
};

/* Operations counters of one worker (metrics, master/metrics.c).  Same
 * rule: one writer, relaxed atomics; the master sums the slots. */
enum status_reject {
    STATUS_REJ_RELAY_DENIED = 0,    /* 554 5.7.1 relay access denied */
    STATUS_REJ_ROUTE_REJECT,        /* a reject: route, at RCPT */
    STATUS_REJ_ROUTE_DEFER,         /* a defer: route, at RCPT */
    STATUS_REJ_TOO_LARGE,           /* 552 5.3.4 */
    STATUS_REJ_BARE_NEWLINE,        /* 550 5.5.2 */
    STATUS_REJ_LOOP,                /* 554 5.4.6 too many hops */
    STATUS_REJ_TOO_MANY_RCPTS,      /* 452 4.5.3 */
    STATUS_REJ_TOO_MANY_ERRORS,     /* 421 after limits.max_errors */
    STATUS_REJ_CONN_LIMIT,          /* 421 limits.max_connections */
    STATUS_REJ_CONN_LIMIT_IP,       /* 421 limits.max_connections_per_ip */
    STATUS_REJ_OVERLOAD,            /* 421 limits.load.refuse */
    STATUS_REJ_PREGREET,            /* 554 5.5.1 talked before the 220 */
    STATUS_REJ_DNSBL,               /* 554 5.7.1 screen.dnsbl score */
    STATUS_REJ_BANNED,              /* 421 at connect: limits.ban */
    STATUS_REJ_MILTER,              /* a milter's reject or tempfail */
    STATUS_REJ_MAX
};
enum { STATUS_GREY_DEFERRED = 0, STATUS_GREY_PASSED, STATUS_GREY_ALLOWED };
/* Delivery latency (arrival -> delivered, per recipient) histogram: upper
 * bounds in milliseconds; the last bucket is +Inf. */
#define STATUS_LAT_BOUNDS_MS { 10, 50, 100, 250, 500, 1000, 2500, 5000, \
    10000, 30000, 60000, 300000, 900000, 3600000, 14400000, 86400000 }
#define STATUS_LAT_NB      17       /* bounds + the +Inf bucket */

struct status_ops {
    uint64_t rejects[STATUS_REJ_MAX];
    uint64_t tls_ok, tls_failed;    /* STARTTLS handshakes */
    uint64_t grey[3];               /* greylist verdicts at RCPT, by
                                       STATUS_GREY_* */
    uint64_t lat_bucket[STATUS_LAT_NB];  /* not cumulative */
    uint64_t lat_sum_ms;
    uint64_t lat_count;
    /* gauges, rewritten by the worker once a second */
    uint64_t q_active;              /* attempts open */
    uint64_t q_due;                 /* scheduled, due now (waiting for a
                                       slot, or held by limits.load) */
    uint64_t q_deferred;            /* scheduled for a later retry */
    uint64_t q_bytes;               /* body bytes of its shard's queue */
    uint64_t q_held;                /* held by mtactl */
    uint64_t q_oldest_ms;           /* arrival of its oldest; 0: none */
    uint64_t pong;                  /* watchdog: last ping answered */
    /* delivery events (events/): counters of this worker */
    uint64_t ev_emitted;            /* records written to its segments */
    uint64_t ev_sent;               /* acknowledged by the target (reader) */
    uint64_t ev_failed;             /* batches the target refused/missed */
    uint64_t ev_dropped;            /* skipped: backlog full, drop_oldest */
};

/* Count one delivery latency (ms) into w's histogram. */
struct status_worker;
void    status_latency_add(struct status_ops *o, uint64_t ms);
/* t += w for every counter of ops (not the gauges). */
void    status_ops_add(struct status_ops *t, const struct status_ops *w);

struct status_worker {
    int32_t  pid;                   /* 0 = free slot */
    uint32_t generation;
    uint64_t started_ms;            /* wall clock */
    uint64_t conns_cur;
    uint64_t conns_total;
    uint64_t msgs_in;               /* accepted (250 after the dot) */
    uint64_t msgs_out;              /* recipients delivered */
    uint64_t msgs_deferred;
    uint64_t msgs_bounced;
    uint64_t bytes_in;
    uint64_t errors;
    uint64_t log_dropped;
    uint64_t proxy_refused;         /* peers not in a listener's proxy_from */
    uint64_t proxy_bad;             /* bad, short or slow PROXY headers */
    struct status_ops ops;
};

/* One row of the failed attempts by class x site (status_bclass.c):
 * state 0 free, 1 being named, 2 named (site fixed for good). */
struct status_bclass_row {
    uint32_t state;
    char     site[STATUS_BCLASS_SITE_LEN];
    uint64_t n[STATUS_BCLASS_NCLASS];
};
/* Queue quotas (quotas section): messages and body bytes in the queue
 * per sender domain, recipient domain, AUTH user and client network, one
 * row per key for the node (status_quota.c).  Each row has one column per
 * worker slot, written by the worker in it alone (the counts of the
 * messages its queue index holds); the sum over the columns is the
 * node's usage.  lim_*: mtactl quota set's override of the key, stored
 * as limit + 1 (0: none; a limit 0 means no limit). */
enum status_qkind { STATUS_QK_SENDER = 0, STATUS_QK_RCPT, STATUS_QK_USER,
    STATUS_QK_NET, STATUS_QK_MAX };
#define STATUS_QUOTA_SLOTS   2048       /* rows, power of two */
#define STATUS_QUOTA_KEY_MAX 255
struct status_quota_row {
    uint64_t tag;                   /* hash of kind and key | 1; 0 free;
                                       STATUS_QUOTA_FREEING: being freed */
    uint64_t ready;                 /* == tag once key and limits are set */
    uint64_t lim_msgs, lim_bytes;   /* override + 1; 0: the kind's */
    uint32_t over;                  /* an episode is on (logged once) */
    uint32_t kind;
    uint32_t claimed_s;             /* CLOCK_MONOTONIC s of the claim */
    uint32_t klen;
    char     key[STATUS_QUOTA_KEY_MAX + 1];
    /* one column per worker slot, and the last (STATUS_QUOTA_FLEET) the
     * other nodes' usage as the cluster agent last read it */
    int64_t  msgs[STATUS_MAX_WORKERS + 1];
    int64_t  bytes[STATUS_MAX_WORKERS + 1];
};
#define STATUS_QUOTA_FLEET STATUS_MAX_WORKERS
#define STATUS_QUOTA_FREEING 2u

struct status_page {
    uint64_t master_started_ms;
    uint32_t generation;
    uint32_t load_x100;             /* 1-minute load average * 100 */
    uint32_t throttle;              /* STATUS_THROTTLE_* bits, set by the
                                       master's load policy (load.c) */
    uint32_t nworkers;
    struct status_worker w[STATUS_MAX_WORKERS];
    /* Admission: sessions per client address, one table per worker slot
     * (its only writer), each word a 48-bit hash of the address << 16 | a
     * count; see status.c.  Cleared with the slot when its worker dies. */
    uint64_t iptab[STATUS_MAX_WORKERS][STATUS_IP_SLOTS];
    /* AUTH checks per client address, one table for every worker (of
     * every generation), written with compare-and-swap; see status.c. */
    uint64_t authtab[STATUS_AUTH_SLOTS];
    /* limits.ban: errors, then bans, per client address, the same way
     * (compare-and-swap, one table for every worker); banaddr[i] is the
     * address of bantab[i], written by whoever claimed the word
     * (status_ban.c). */
    uint64_t bantab[STATUS_BAN_SLOTS];
    uint64_t banaddr[STATUS_BAN_SLOTS][2];
    /* Failed delivery attempts by bounce class x site, one table for
     * every worker: a row is claimed by compare-and-swap the first time
     * a site is counted and keeps its name; when all are taken, sites
     * count in the last row, "other" (status_bclass.c). */
    struct status_bclass_row bclass[STATUS_BCLASS_SITES];
    /* Next-hop health: the outbound hops (address and port) that did not
     * answer, written by every worker with compare-and-swap, read by the
     * master for mtactl hosts and /metrics (status_health.c). */
    struct status_hop_row hoptab[STATUS_HOP_SLOTS];
    /* quotas: the rows, and per kind mtactl quota set's override of the
     * configured limits (+ 1, 0: none); rejections counted */
    uint64_t quota_def_msgs[STATUS_QK_MAX], quota_def_bytes[STATUS_QK_MAX];
    uint64_t quota_rejects[STATUS_QK_MAX];
    struct status_quota_row quota[STATUS_QUOTA_SLOTS];
    /* delivery events: written by the process reading the events files
     * (events/events.h), read by every worker and the metrics */
    struct status_events {
        uint64_t backlog_bytes;     /* unsent bytes on the spool */
        uint64_t oldest_ms;         /* wall clock of the oldest unsent */
        uint32_t full;              /* backpressure: 452 at DATA */
        int32_t  reader_pid;
    } events;
};


#define STATUS_THROTTLE_REFUSE 1u  /* 421 to new connections */
#define STATUS_THROTTLE_HOLD   2u  /* start no delivery attempt */

#define STATUS_ADD(field, n) __atomic_fetch_add(&(field), (n), __ATOMIC_RELAXED)
#define STATUS_SUB(field, n) __atomic_fetch_sub(&(field), (n), __ATOMIC_RELAXED)

struct status_page *status_create(void);     /* fatal on failure */

/* Admission, daemon-wide: the sum over every worker slot (of every
 * generation).  status_conn_acquire() counts one more inbound session from
 * sa in slot's table unless that passes max_total or max_per_ip: 0 ok,
 * STATUS_EFULL, STATUS_EPERIP (nothing counted then).  Each slot has one
 * writer, so no lock; two workers admitting the same address at the same
 * instant may pass max_per_ip by at most the number of workers less one.
 * Every 0 return is paired with one status_conn_release() in the same slot,
 * or the slot is cleared with status_slot_clear() when its worker is gone
 * (so a killed worker leaves no phantom sessions behind). */
#define STATUS_EFULL   (-1)
#define STATUS_EPERIP  (-2)
struct sockaddr;
struct sockaddr_storage;
/* status_addr_group - the address sa is counted as: an IPv6 address (not
 * v4-mapped) with the bits past v6_prefix cleared, so that one client's
 * /64 (limits.ipv6_prefix) is one client; anything else as is.  Copies into
 * *out and returns it, as a struct sockaddr. */
const struct sockaddr *status_addr_group(const struct sockaddr *sa,
            unsigned v6_prefix, struct sockaddr_storage *out);
int     status_conn_acquire(struct status_page *sp, unsigned slot,
            const struct sockaddr *sa, uint32_t max_total,
            uint32_t max_per_ip);
void    status_conn_release(struct status_page *sp, unsigned slot,
            const struct sockaddr *sa);
uint32_t status_conn_count(const struct status_page *sp,
            const struct sockaddr *sa);
uint64_t status_conns_all(const struct status_page *sp);
void    status_slot_clear(struct status_page *sp, unsigned slot);

/* AUTH failures per client address (sa grouped by status_addr_group()),
 * daemon-wide: every worker counts into one table, so max_failures holds
 * for the node however connections spread over the workers.  An entry is
 * forgotten window_s seconds after its last count (now_s: CLOCK_MONOTONIC
 * seconds, the same clock in every process), so nothing a killed worker
 * counted stays for ever.  status_auth_count(): the live count.
 * status_auth_take(): count one check unless max are counted already; the
 * new count (1..max), or 0 when at max (nothing counted).
 * status_auth_give(): undo one take (the check succeeded).  Lock-free (a
 * compare-and-swap per change); a full probe window reuses its oldest
 * entry; counts above STATUS_AUTH_CNT_MAX stay there. */
#define STATUS_AUTH_CNT_MAX 4095u
unsigned status_auth_count(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s, uint32_t window_s);
unsigned status_auth_take(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s, uint32_t window_s, unsigned max);
void    status_auth_give(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s, uint32_t window_s);
/* The fleet (cluster/): the live words of the table as (28-bit key,
 * count), at most max (a key may come twice: sum them); and n (may be
 * negative) added to key's count as a count at now_s would be (claiming a
 * word when it has none, never below 0). */
struct status_auth_key { uint32_t key; unsigned count; };
size_t  status_auth_list(struct status_page *sp, uint32_t now_s,
            uint32_t window_s, struct status_auth_key *out, size_t max);
void    status_auth_add_key(struct status_page *sp, uint32_t key,
            uint32_t now_s, uint32_t window_s, int n);

/* status_addr_hash - a 48-bit hash of sa's address (v4-mapped folded to
 * IPv4), never 0; 0 for anything but IPv4 and IPv6. */
uint64_t status_addr_hash(const struct sockaddr *sa);

/* Auto-ban (limits.ban), daemon-wide, per client address (sa grouped by
 * status_addr_group()); now_s is CLOCK_MONOTONIC seconds as for AUTH.
 * status_ban_note(): count one error; at errors within window_s of each
 * other (counted over every worker) the address is banned for duration_s
 * (at most STATUS_BAN_MAX_S); 1 when this count made the ban, else 0.
 * status_ban_check(): 1 while sa is banned (a few loads: nothing when
 * limits.ban is off, as the caller does not ask then).
 * status_ban_add(): ban sa for duration_s from now (replacing a ban or a
 * count); 0, or -1 when its probe window holds only live bans.
 * status_ban_del(): lift sa's ban and forget its count; how many words
 * were cleared (0: none was there).
 * status_ban_list(): the live bans, at most max, each as an address (as
 * grouped, IPv4 or IPv6) and the seconds left; their number.
 * status_ban_live(): the number of live bans (the metrics gauge).
 * Lock-free as the AUTH table; a ban is verified against the whole
 * address, so a hash collision never bans another client. */
#define STATUS_BAN_MAX_S (1u << 23)         /* about 97 days */
struct status_ban {
    struct sockaddr_storage addr;
    uint32_t                left_s;
};
int     status_ban_note(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s, uint32_t window_s, unsigned errors,
            uint32_t duration_s);
int     status_ban_check(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s);
int     status_ban_add(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s, uint32_t duration_s);
int     status_ban_del(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s);
size_t  status_ban_list(struct status_page *sp, uint32_t now_s,
            struct status_ban *out, size_t max);
size_t  status_ban_live(struct status_page *sp, uint32_t now_s);

/* Failed delivery attempts by class x site (/metrics): count one attempt
 * of class cls (< STATUS_BCLASS_NCLASS) for site (cut to
 * STATUS_BCLASS_SITE_LEN - 1 bytes, lower-cased, bytes outside
 * [a-z0-9.-_] as '_', so the name is a safe label value).  Lock-free: a
 * probe over the named rows, a compare-and-swap to name a free one, a
 * relaxed add; the row count bounds the label cardinality.
 * status_bclass_site(): row i's site name ("other" for the last row), or
 * NULL while it is not named. */
void    status_bclass_add(struct status_page *sp, const char *site,
            unsigned cls);
const char *status_bclass_site(const struct status_page *sp, size_t i);
/* Next-hop health (delivery.host_down_for), node-wide, per address and
 * port (sa with its port; IPv4 and v4-mapped are one).  now_s is
 * CLOCK_MONOTONIC seconds as above.  A hop that did not answer is down
 * until its time ends; then the first to ask gets STATUS_HOP_PROBE (it
 * claimed the one probe, for probe_s seconds) and the others go on
 * getting STATUS_HOP_DOWN until the probe ends with status_hop_up() (the
 * row is gone) or status_hop_down() (down again, for longer).  A probe
 * that never reports (its worker died) is claimed again after probe_s.
 * An entry is forgotten (the hop is up) forget_s after its down time
 * ended without anyone asking; so entries expire by themselves (forget_s
 * is the max_s of status_hop_down(): delivery.host_down_max).
 * status_hop_check(): STATUS_HOP_UP (no entry: connect), _DOWN (skip),
 * _PROBE (connect; this caller is the probe); with _DOWN, err (errsz
 * bytes, may be NULL) gets the hop's last error, for the reason of the
 * mail that skips it.
 * status_hop_down(): one more failure: down for down_s << (failures - 1),
 * at most max_s (and STATUS_HOP_MAX_S); err (escaped by the caller) is
 * kept as the last error.  Returns the failures of the episode (1: it
 * has just gone down), 0 when no row could be had (a probe window of
 * live entries: nothing recorded, the hop stays up).
 * status_hop_up(): the hop answered; 1 when it was down (an entry went).
 * status_hop_list(): the entries not forgotten, at most max; their
 * number.  status_hop_count(): that number (the metrics gauge).
 * Lock-free like the ban table; an entry is verified against the whole
 * address and port, so a key collision never marks another hop down. */
#define STATUS_HOP_UP      0
#define STATUS_HOP_DOWN    1
#define STATUS_HOP_PROBE   2
#define STATUS_HOP_MAX_S   (1u << 22)       /* about 48 days */
struct status_hop {
    struct sockaddr_storage addr;   /* with the port */
    int32_t                 left_s; /* until the down time ends; <= 0:
                                       a probe is due or running */
    int                     probing;
    unsigned                failures;
    uint32_t                down_s; /* since the first failure */
    char                    err[STATUS_HOP_ERR];
};
int     status_hop_check(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s, uint32_t probe_s, uint32_t forget_s,
            char *err, size_t errsz);   /* _DOWN: its last error */
unsigned status_hop_down(struct status_page *sp, const struct sockaddr *sa,
            uint32_t now_s, uint32_t down_s, uint32_t max_s,
            const char *err);   /* forgotten max_s after (forget_s) */
int     status_hop_up(struct status_page *sp, const struct sockaddr *sa);
size_t  status_hop_list(struct status_page *sp, uint32_t now_s,
            uint32_t forget_s, struct status_hop *out, size_t max);
size_t  status_hop_count(struct status_page *sp, uint32_t now_s,
            uint32_t forget_s);
/* Queue quotas (status_quota.c), lock-free as the ban table.
 * status_quota_row(): the row of (kind, key) (key lower-cased by the
 * caller, at most STATUS_QUOTA_KEY_MAX bytes), claimed when missing and
 * claim is set: its index, or -1 (none; the table full near its hash).
 * status_quota_add(): add to slot's column of row i (the caller holds
 * counts in it, or has just claimed it).  status_quota_sum(): the usage
 * of (kind, key) over every column of every row of it (two workers that
 * claim a key at once make two rows); the first row in *row (-1 none).
 * status_quota_clear_slot(): zero slot's column everywhere (its worker is
 * gone, or recounts).  status_quota_reclaim(): free the rows with no
 * count and no override claimed more than min_age_s ago; their number.
 * status_quota_kind_name(): "sender_domain", "recipient_domain", "user",
 * "network"; status_quota_kind(): the reverse, -1 unknown. */
struct status_quota_use {
    int64_t  msgs, bytes;
    uint64_t lim_msgs, lim_bytes;   /* the row's override + 1, 0 none */
};
int     status_quota_row(struct status_page *sp, unsigned kind,
            const char *key, size_t klen, int claim, uint32_t now_s);
void    status_quota_add(struct status_page *sp, int row, unsigned slot,
            int64_t msgs, int64_t bytes);
void    status_quota_sum(struct status_page *sp, unsigned kind,
            const char *key, size_t klen, struct status_quota_use *u,
            int *row);
/* status_quota_take(): the row of (kind, key), claimed when missing,
 * with msgs and bytes added to slot's column, which then holds it (no
 * reclaim frees it while a column is not 0): its index, or -1 (full). */
int     status_quota_take(struct status_page *sp, unsigned kind,
            const char *key, size_t klen, unsigned slot, int64_t msgs,
            int64_t bytes, uint32_t now_s);
void    status_quota_clear_slot(struct status_page *sp, unsigned slot);
/* The fleet (cluster/): the node's own usage of row i (the worker
 * columns); and the other nodes' usage written into the fleet column. */
void    status_quota_local(struct status_page *sp, int row, int64_t *msgs,
            int64_t *bytes);
void    status_quota_set_fleet(struct status_page *sp, int row, int64_t msgs,
            int64_t bytes);
size_t  status_quota_reclaim(struct status_page *sp, uint32_t now_s,
            uint32_t min_age_s);
const char *status_quota_kind_name(unsigned kind);
int     status_quota_kind(const char *name);

#endif /* MTAD_STATUS_H */
