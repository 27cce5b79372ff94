/*
 * metrics.c - Prometheus metrics over HTTP, served by the master.
 *
 * PURPOSE   With metrics.listen set (off by default) the master listens
 *           there and answers "GET /metrics" with the text exposition
 *           format (version 0.0.4), built from the shared status page at
 *           scrape time: workers pay nothing per message beyond the
 *           relaxed counter adds they already make (and one histogram
 *           bucket per delivered recipient).
 * CONTRACT  HTTP/1.0 and 1.1, one request per connection (Connection:
 *           close).  GET or HEAD of /metrics: 200; another path: 404;
 *           another method: 405; a bad request line: 400 (the parser:
 *           metrics_req.c, fuzzed by tests/fuzz/fuzz_metrics.c).  At
 *           most METRICS_MAX_CLIENTS at once, metrics.max_connections_per_ip
 *           of them from one address (an IPv6 client per
 *           limits.ipv6_prefix), only from metrics.allow_networks (others
 *           are closed at accept, unread); when all are taken, a newcomer
 *           from an address with fewer takes the slot of the oldest
 *           unanswered client of the address with the most; a client has
 *           metrics.header_timeout to send its whole request (a
 *           trickler holds no slot longer), then METRICS_TIMEOUT_MS for
 *           the answer.
 *           Everything is non-blocking on the master's loop (common/ev).
 *           Counters of workers that exited are kept (master->retired),
 *           so every _total only grows while the master lives.
 *           The queue size is a readdir() of spool/queue, at most once a
 *           second whatever the scrape rate.
 * FAILURE   A client that misbehaves is closed; a bind failure is
 *           reported by metrics_apply().
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "bclass/bclass.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/safefs.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "shape/shape.h"
#include "master/master_int.h"
#include "master/metrics_req.h"
#include "master/ops.h"

#define METRICS_MAX_CLIENTS 16
#define METRICS_TIMEOUT_MS  5000
#define METRICS_REQ_MAX     8192
#define METRICS_QUEUE_CACHE_MS 1000

struct metrics_client {
    int      fd;
    uint64_t deadline;              /* of the request, then of the answer */
    struct sockaddr_storage peer;   /* status_addr_group()'s, for the limit */
    size_t   len;
    char     req[METRICS_REQ_MAX];
    char    *out;
    size_t   outlen, outoff;
};

/* The endpoint's state, owned by the master (m->metrics). */
struct metrics {
    int                   fd;           /* the listener, -1: none */
    char                 *spec;         /* metrics.listen it is bound to */
    struct metrics_client clients[METRICS_MAX_CLIENTS];
    long                  qsize;        /* queue/ entries, cached; -1 */
    uint64_t              qsize_ms;
};

static ev_io_fn metrics_accept_event, metrics_client_io;

static const char *const metrics_reject_names[STATUS_REJ_MAX] = {
    "relay_denied", "route_reject", "route_defer", "too_large",
    "bare_newline", "mail_loop", "too_many_recipients", "too_many_errors",
    "connection_limit", "connection_limit_per_ip", "overload",
    "pregreet", "dnsbl", "banned", "milter"
};

static struct metrics *
metrics_of(struct master *m)
{
    struct metrics *mt = m->metrics;

    if (mt == NULL) {
        mt = m->metrics = xcalloc(1, sizeof(*mt));
        mt->fd = -1;
        mt->qsize = -1;
        for (size_t i = 0; i < METRICS_MAX_CLIENTS; i++)
            mt->clients[i].fd = -1;
    }
    return mt;
}

static void
metrics_close_listener(struct master *m)
{
    struct metrics *mt = metrics_of(m);

    if (mt->fd < 0)
        return;
    master_unwatch(m, mt->fd);
    child_unregister_master_fd(m, mt->fd);
    close(mt->fd);
    mt->fd = -1;
    free(mt->spec);
    mt->spec = NULL;
}

/* metrics_is_loopback - 1 when sa is 127.0.0.0/8 or ::1 (a wildcard
 * address is not: it listens on every interface). */
static int
metrics_is_loopback(const struct sockaddr *sa)
{
    const struct sockaddr_in  *s4 = (const struct sockaddr_in *)sa;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

    if (sa->sa_family == AF_INET)
        return ntohl(s4->sin_addr.s_addr) >> 24 == 127;
    return sa->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
}


int
metrics_apply(struct master *m, const struct config *cfg, char *err,
    size_t errsz)
{
    struct metrics *mt = metrics_of(m);
    int             fd, on = 1;

    if (cfg->metrics_listen == NULL) {
        metrics_close_listener(m);
        return 0;
    }
    if (mt->spec != NULL && strcmp(mt->spec, cfg->metrics_listen) == 0)
        return 0;                   /* unchanged across a reload */
    fd = socket(cfg->metrics_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
        SOCK_CLOEXEC, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on,
        sizeof(on)) < 0 || bind(fd, (const struct sockaddr *)
        &cfg->metrics_addr, cfg->metrics_addrlen) < 0 || listen(fd, 16) < 0) {
        snprintf(err, errsz, "metrics.listen: %s: %s", cfg->metrics_listen,
            strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    metrics_close_listener(m);
    mt->fd = fd;
    mt->spec = xstrdup(cfg->metrics_listen);
    child_register_master_fd(m, fd);
    master_watch(m, fd, EV_READ, metrics_accept_event);
    log_notice("metrics on http://%s/metrics", cfg->metrics_listen);
    if (!metrics_is_loopback((const struct sockaddr *)&cfg->metrics_addr))
        log_warn("metrics.listen %s is reachable beyond loopback: the "
            "queue and traffic figures are served to every client in "
            "metrics.allow_networks", cfg->metrics_listen);
    return 0;
}

/* ---- the exposition ---------------------------------------------------- */

static void
mt_head(struct buf *t, const char *name, const char *type,
    const char *help)
{
    buf_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
mt_one(struct buf *t, const char *name, const char *type,
    const char *help, uint64_t v)
{
    mt_head(t, name, type, help);
    buf_printf(t, "%s %" PRIu64 "\n", name, v);
}


/* metrics_label - v as a Prometheus label value: \\, " and newline
 * escaped, other control bytes as '?' (keys are client text). */
static void
metrics_label(struct buf *t, const char *v)
{
    for (; *v != '\0'; v++) {
        unsigned char c = (unsigned char)*v;

        if (c == '\\' || c == '"')
            buf_printf(t, "\\%c", c);
        else if (c == '\n')
            buf_printf(t, "\\n");
        else
            buf_printf(t, "%c", c < ' ' || c == 0x7f ? '?' : c);
    }
}


/* metrics_quota - the queue quotas: each counted key's usage (messages
 * and body bytes in the queue, node-wide) and the 452s by kind. */
static void
metrics_quota(struct buf *t, struct status_page *st)
{
    struct status_quota_use u;
    size_t                  i;
    unsigned                k;
    int                     first;

    mt_head(t, "mtad_quota_usage", "gauge", "Queue quotas: what a key has "
        "in the queue now (unit messages or bytes), by kind "
        "(sender_domain, recipient_domain, user, network).");
    for (i = 0; i < STATUS_QUOTA_SLOTS; i++) {
        const struct status_quota_row *r = &st->quota[i];
        uint64_t tag = __atomic_load_n(&r->tag, __ATOMIC_ACQUIRE);

        if (tag == 0 || tag == STATUS_QUOTA_FREEING ||
            __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE) != tag)
            continue;
        status_quota_sum(st, r->kind, r->key, r->klen, &u, &first);
        if (first != (int)i || (u.msgs == 0 && u.bytes == 0))
            continue;
        for (k = 0; k < 2; k++) {
            buf_printf(t, "mtad_quota_usage{kind=\"%s\",key=\"",
                status_quota_kind_name(r->kind));
            metrics_label(t, r->key);
            buf_printf(t, "\",unit=\"%s\"} %" PRId64 "\n",
                k ? "bytes" : "messages", k ? u.bytes : u.msgs);
        }
    }
    mt_head(t, "mtad_quota_rejections_total", "counter", "Queue quotas: "
        "452 4.3.1 replies, by the kind of the quota that was full.");
    for (k = 0; k < STATUS_QK_MAX; k++)
        buf_printf(t, "mtad_quota_rejections_total{kind=\"%s\"} %" PRIu64
            "\n", status_quota_kind_name(k),
            __atomic_load_n(&st->quota_rejects[k], __ATOMIC_RELAXED));
}


/* metrics_events - the delivery events (events/events.h): counters summed
 * over the workers, the backlog as the reading worker published it. */
static void
metrics_events(struct buf *t, const struct status_worker *tot,
    const struct status_page *sp)
{
    uint64_t oldest = __atomic_load_n(&sp->events.oldest_ms,
        __ATOMIC_RELAXED), now = util_wall_ms();
    uint64_t age = oldest > 0 && now > oldest ? now - oldest : 0;

    mt_one(t, "mtad_events_queued_total", "counter", "Delivery events "
        "written to the spool's events files.", tot->ops.ev_emitted);
    mt_one(t, "mtad_events_sent_total", "counter", "Delivery events the "
        "target acknowledged.", tot->ops.ev_sent);
    mt_one(t, "mtad_events_failed_total", "counter", "Batches of events the "
        "target did not acknowledge (retried).", tot->ops.ev_failed);
    mt_one(t, "mtad_events_dropped_total", "counter", "Delivery events "
        "dropped: backlog full under events.when_full: drop_oldest.",
        tot->ops.ev_dropped);
    mt_one(t, "mtad_events_backlog_bytes", "gauge", "Bytes of events not "
        "yet acknowledged by the target.", __atomic_load_n(
        &sp->events.backlog_bytes, __ATOMIC_RELAXED));
    mt_head(t, "mtad_events_oldest_unsent_age_seconds", "gauge",
        "Age of the oldest event not yet acknowledged; 0 when none.");
    buf_printf(t, "mtad_events_oldest_unsent_age_seconds %" PRIu64 ".%03"
        PRIu64 "\n", age / 1000, age % 1000);
}

long
metrics_queue_size(struct master *m, const char *spool_dir)
{
    struct metrics *mt = metrics_of(m);
    long            n;
    uint64_t        now = util_now_ms();

    if (mt->qsize >= 0 && now - mt->qsize_ms < METRICS_QUEUE_CACHE_MS)
        return mt->qsize;
    /* the workers' directory: a link planted there is not followed */
    if ((n = safefs_count_entries(spool_dir, "queue")) < 0)
        return -1;
    mt->qsize = n;
    mt->qsize_ms = now;
    return n;
}

static void
metrics_histogram(struct buf *t, const struct status_ops *o)
{
    static const uint64_t bounds[] = STATUS_LAT_BOUNDS_MS;
    const char *name = "mtad_delivery_latency_seconds";
    uint64_t    cum = 0;
    size_t      i;

    mt_head(t, name, "histogram", "Time from arrival (the 250 after DATA) "
        "to delivery, per delivered recipient.");
    for (i = 0; i < STATUS_LAT_NB - 1; i++) {
        cum += o->lat_bucket[i];
        buf_printf(t, "%s_bucket{le=\"%" PRIu64 ".%03" PRIu64 "\"} %" PRIu64
            "\n", name, bounds[i] / 1000, bounds[i] % 1000, cum);
    }
    cum += o->lat_bucket[i];
    buf_printf(t, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", name, cum);
    buf_printf(t, "%s_sum %" PRIu64 ".%03" PRIu64 "\n", name,
        o->lat_sum_ms / 1000, o->lat_sum_ms % 1000);
    buf_printf(t, "%s_count %" PRIu64 "\n", name, cum);
}

/* metrics_bclass - failed attempts by class x site (the status page's
 * table; a site named by two rows, after a worker died naming one, is
 * summed into one series). */
static void
metrics_bclass(struct buf *t, const struct status_page *st)
{
    const char *name = "mtad_delivery_attempts_total";
    size_t      i, j;
    int         c;

    mt_head(t, name, "counter", "Failed delivery attempts (per recipient "
        "result: deferred or bounced) by bounce class and site (the "
        "destination domain); sites past the table's rows count as "
        "site=\"other\".");
    for (i = 0; i < STATUS_BCLASS_SITES; i++) {
        const char *site = status_bclass_site(st, i);

        if (site == NULL)
            continue;
        for (j = 0; j < i; j++)
            if (status_bclass_site(st, j) != NULL &&
                strcmp(status_bclass_site(st, j), site) == 0)
                break;
        if (j < i)
            continue;               /* summed with row j */
        for (c = 0; c < BCLASS_MAX && c < STATUS_BCLASS_NCLASS; c++) {
            uint64_t v = 0;

            for (j = i; j < STATUS_BCLASS_SITES; j++)
                if (j == i || (status_bclass_site(st, j) != NULL &&
                    strcmp(status_bclass_site(st, j), site) == 0))
                    v += __atomic_load_n(&st->bclass[j].n[c],
                        __ATOMIC_RELAXED);
            if (v > 0)
                buf_printf(t, "%s{class=\"%s\",site=\"%s\"} %" PRIu64
                    "\n", name, bclass_name(c), site, v);
        }
    }
}

char *
metrics_render(struct master *m)
{
    struct buf           t;
    struct status_worker tot;
    struct status_ops    g;
    struct status_page  *st = m->status;
    uint64_t             up = 0, ready = 0, q_act, q_due, q_def;
    uint64_t             oldest = 0, now = util_wall_ms(), age;
    uint32_t             load = __atomic_load_n(&st->load_x100,
                             __ATOMIC_RELAXED);
    uint32_t             thr = __atomic_load_n(&st->throttle,
                             __ATOMIC_RELAXED);
    long                 qn;
    size_t               i;

    buf_init(&t);
    master_totals(m, &tot);
    memset(&g, 0, sizeof(g));
    for (i = 0; i < MASTER_MAX_SLOTS; i++) {
        const struct slot *s = &m->slots[i];

        if (s->role != ROLE_WORKER || s->pid <= 0)
            continue;
        up++;
        ready += s->state == SLOT_RUNNING && s->ready;
#define LD(f) __atomic_load_n(&st->w[i].ops.f, __ATOMIC_RELAXED)
        g.q_active += LD(q_active);
        g.q_due += LD(q_due);
        g.q_deferred += LD(q_deferred);
        g.q_bytes += LD(q_bytes);
        g.q_held += LD(q_held);
        if (LD(q_oldest_ms) != 0 && (oldest == 0 || LD(q_oldest_ms) < oldest))
            oldest = LD(q_oldest_ms);
#undef LD
    }
    age = oldest != 0 && now > oldest ? now - oldest : 0;
    q_act = g.q_active;
    q_due = g.q_due;
    q_def = g.q_deferred;

    mt_one(&t, "mtad_connections_total", "counter",
        "Inbound SMTP connections accepted into a session.",
        tot.conns_total);
    mt_one(&t, "mtad_messages_received_total", "counter",
        "Messages accepted (250 after the data, committed to the spool).",
        tot.msgs_in);
    mt_one(&t, "mtad_received_bytes_total", "counter",
        "Bytes read from SMTP clients.", tot.bytes_in);
    mt_head(&t, "mtad_recipient_deliveries_total", "counter",
        "Delivery results per recipient: sent (includes maildir and "
        "discard), deferred (a retry follows), bounced.");
    buf_printf(&t, "mtad_recipient_deliveries_total{status=\"sent\"} %" PRIu64
        "\n", tot.msgs_out);
    buf_printf(&t, "mtad_recipient_deliveries_total{status=\"deferred\"} %"
        PRIu64 "\n", tot.msgs_deferred);
    buf_printf(&t, "mtad_recipient_deliveries_total{status=\"bounced\"} %"
        PRIu64 "\n", tot.msgs_bounced);
    mt_head(&t, "mtad_rejections_total", "counter",
        "SMTP rejections by reason.");
    for (i = 0; i < STATUS_REJ_MAX; i++)
        buf_printf(&t, "mtad_rejections_total{reason=\"%s\"} %" PRIu64 "\n",
            metrics_reject_names[i], tot.ops.rejects[i]);
    mt_head(&t, "mtad_tls_handshakes_total", "counter",
        "Inbound STARTTLS handshakes by result.");
    buf_printf(&t, "mtad_tls_handshakes_total{result=\"ok\"} %" PRIu64 "\n",
        tot.ops.tls_ok);
    buf_printf(&t, "mtad_tls_handshakes_total{result=\"failed\"} %" PRIu64
        "\n", tot.ops.tls_failed);
    mt_head(&t, "mtad_greylist_total", "counter",
        "Greylist verdicts at RCPT: deferred (450), passed, allowlisted "
        "(exempt: relay networks, AUTH, the greylist allow lists, DNSWL).");
    buf_printf(&t, "mtad_greylist_total{result=\"deferred\"} %" PRIu64 "\n",
        tot.ops.grey[STATUS_GREY_DEFERRED]);
    buf_printf(&t, "mtad_greylist_total{result=\"passed\"} %" PRIu64 "\n",
        tot.ops.grey[STATUS_GREY_PASSED]);
    buf_printf(&t, "mtad_greylist_total{result=\"allowlisted\"} %" PRIu64
        "\n", tot.ops.grey[STATUS_GREY_ALLOWED]);
    metrics_quota(&t, st);
    mt_one(&t, "mtad_smtp_errors_total", "counter",
        "SMTP command errors and failed handshakes counted against "
        "limits.max_errors.", tot.errors);
    mt_one(&t, "mtad_log_records_dropped_total", "counter",
        "Log records dropped because the log process could not keep up.",
        tot.log_dropped + log_dropped());
    metrics_histogram(&t, &tot.ops);
    metrics_bclass(&t, st);

    mt_one(&t, "mtad_sessions", "gauge", "Inbound SMTP sessions open now.",
        tot.conns_cur);
    mt_one(&t, "mtad_banned_addresses", "gauge", "Client addresses banned "
        "now (limits.ban, mtactl ban).", (uint64_t)status_ban_live(st,
        (uint32_t)(util_now_ms() / 1000)));
    mt_one(&t, "mtad_next_hop_down", "gauge", "Next hops (address and "
        "port) marked down because they did not answer "
        "(delivery.host_down_for, mtactl hosts).",
        (uint64_t)status_hop_count(st, (uint32_t)(util_now_ms() / 1000),
        hosts_forget_s(m->cur->cfg)));
    mt_head(&t, "mtad_queue_messages", "gauge",
        "Messages in the queue by state: active (an attempt is open), "
        "queued (due, waiting for a slot or held by limits.load), deferred "
        "(waiting for a retry), other (the rest of spool/queue: held by "
        "mtactl, or not yet scheduled).");
    qn = metrics_queue_size(m, m->cur->cfg->spool_dir);
    buf_printf(&t, "mtad_queue_messages{state=\"active\"} %" PRIu64 "\n",
        q_act);
    buf_printf(&t, "mtad_queue_messages{state=\"queued\"} %" PRIu64 "\n",
        q_due);
    buf_printf(&t, "mtad_queue_messages{state=\"deferred\"} %" PRIu64 "\n",
        q_def);
    buf_printf(&t, "mtad_queue_messages{state=\"other\"} %" PRIu64 "\n",
        qn >= 0 && (uint64_t)qn > q_act + q_due + q_def ?
        (uint64_t)qn - q_act - q_due - q_def : 0);
    mt_one(&t, "mtad_queue_files", "gauge",
        "Files in spool/queue (every queued message, any state).",
        qn >= 0 ? (uint64_t)qn : 0);
    mt_one(&t, "mtad_queue_bytes", "gauge",
        "Body bytes of the queued messages (as the workers' queue index "
        "knows them: every message once a start has read the spool).",
        g.q_bytes);
    mt_one(&t, "mtad_queue_held_messages", "gauge",
        "Queued messages held by mtactl hold.", g.q_held);
    mt_head(&t, "mtad_queue_oldest_age_seconds", "gauge",
        "Age of the oldest queued message (any state, held included); "
        "0 when the queue is empty.");
    buf_printf(&t, "mtad_queue_oldest_age_seconds %" PRIu64 ".%03" PRIu64
        "\n", age / 1000, age % 1000);
    master_shaping_metrics(m, &t);
    master_cluster_metrics(m, &t);
    metrics_events(&t, &tot, st);
    mt_head(&t, "mtad_build_info", "gauge",
        "Always 1; the label says which mtad this is.");
    buf_printf(&t, "mtad_build_info{version=\"%s\"} 1\n", MTAD_VERSION);
    mt_one(&t, "mtad_workers_running", "gauge",
        "Worker processes alive (every generation).", up);
    mt_one(&t, "mtad_workers_ready", "gauge",
        "Worker processes that said ready and serve.", ready);
    mt_one(&t, "mtad_workers_configured", "gauge",
        "server.workers of the serving generation.",
        (uint64_t)m->cur->cfg->workers);
    mt_one(&t, "mtad_log_process_up", "gauge",
        "1 while the log process runs.",
        m->logd.state == SLOT_RUNNING && m->logd.pid > 0);
    mt_head(&t, "mtad_load1", "gauge",
        "1-minute load average, as the master last sampled it.");
    buf_printf(&t, "mtad_load1 %u.%02u\n", load / 100, load % 100);
    mt_head(&t, "mtad_throttle", "gauge",
        "Load policy in force (1) or not (0): queue_only holds "
        "deliveries, refuse answers 421 to new connections.");
    buf_printf(&t, "mtad_throttle{mode=\"queue_only\"} %d\n",
        (thr & STATUS_THROTTLE_HOLD) != 0);
    buf_printf(&t, "mtad_throttle{mode=\"refuse\"} %d\n",
        (thr & STATUS_THROTTLE_REFUSE) != 0);
    mt_one(&t, "mtad_generation", "gauge",
        "Configuration generation serving (1 at start, +1 per reload).",
        m->cur->id);
    mt_head(&t, "mtad_start_time_seconds", "gauge",
        "Start time of the master, seconds since the epoch.");
    buf_printf(&t, "mtad_start_time_seconds %" PRIu64 ".%03" PRIu64 "\n",
        st->master_started_ms / 1000, st->master_started_ms % 1000);
    return t.data;
}

/* ---- HTTP ---------------------------------------------------------------- */

static void
metrics_client_close(struct master *m, struct metrics_client *c)
{
    if (c->fd < 0)
        return;
    master_unwatch(m, c->fd);
    child_unregister_master_fd(m, c->fd);
    close(c->fd);
    c->fd = -1;
    free(c->out);
    c->out = NULL;
}

/* metrics_same_peer - a and b (both from status_addr_group()) are the
 * same client address. */
static int
metrics_same_peer(const struct sockaddr_storage *a,
    const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
            ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
            &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
    return 1;
}


/* metrics_peer_count - clients of mt from peer. */
static int
metrics_peer_count(const struct metrics *mt,
    const struct sockaddr_storage *peer)
{
    int n = 0;

    for (size_t i = 0; i < METRICS_MAX_CLIENTS; i++)
        if (mt->clients[i].fd >= 0)
            n += metrics_same_peer(&mt->clients[i].peer, peer);
    return n;
}


/* metrics_evict - when every slot is taken and the newcomer's address
 * (same slots already) holds at least two fewer than the address holding
 * the most, that address's oldest client still sending its request is
 * closed; its slot, or NULL.  Without it, clients from a few addresses
 * (127.0.0.0/8 gives a local user millions), reconnecting as each
 * header_timeout ends, kept every slot and the scraper out. */
static struct metrics_client *
metrics_evict(struct master *m, struct metrics *mt, int same)
{
    struct metrics_client *victim = NULL;
    int                    most = 0, n;

    for (size_t i = 0; i < METRICS_MAX_CLIENTS; i++) {
        struct metrics_client *c = &mt->clients[i];

        if (c->fd < 0 || c->out != NULL)
            continue;               /* answered: it leaves soon anyway */
        n = metrics_peer_count(mt, &c->peer);
        if (n > most || (n == most && victim != NULL &&
            c->deadline < victim->deadline)) {
            most = n;
            victim = c;
        }
    }
    if (victim == NULL || same + 2 > most)
        return NULL;
    metrics_client_close(m, victim);
    return victim;
}


/* metrics_admit - the free slot for a client from sa, or NULL when it is
 * not in metrics.allow_networks, has its address's share of the slots,
 * or none is free nor can be made free (metrics_evict).  A limit per
 * address keeps one slow host (or a slowloris) from taking every slot
 * from the scraper. */
static struct metrics_client *
metrics_admit(struct master *m, struct metrics *mt, const struct config *cfg,
    const struct sockaddr *sa, struct sockaddr_storage *peer)
{
    struct metrics_client *free_c = NULL;
    size_t                 i;
    int                    same, ok = 0;

    for (i = 0; i < cfg->nmetrics_allow && !ok; i++)
        ok = util_cidr_match(&cfg->metrics_allow[i], sa);
    if (!ok)
        return NULL;
    (void)status_addr_group(sa, (unsigned)cfg->ipv6_prefix, peer);
    same = metrics_peer_count(mt, peer);
    if (same >= cfg->metrics_max_per_ip)
        return NULL;
    for (i = 0; i < METRICS_MAX_CLIENTS && free_c == NULL; i++)
        if (mt->clients[i].fd < 0)
            free_c = &mt->clients[i];
    return free_c != NULL ? free_c : metrics_evict(m, mt, same);
}


static void
metrics_accept(struct master *m)
{
    const struct config    *cfg = m->cur->cfg;
    struct metrics         *mt = metrics_of(m);
    struct metrics_client  *c;
    struct sockaddr_storage ss, peer;
    socklen_t               sslen = sizeof(ss);
    int                     fd;

    while ((fd = accept4(mt->fd, (struct sockaddr *)&ss, &sslen,
        SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        c = metrics_admit(m, mt, cfg, (const struct sockaddr *)&ss, &peer);
        sslen = sizeof(ss);
        if (c == NULL) {
            close(fd);              /* refused, or busy: a scraper retries */
            continue;
        }
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->peer = peer;
        c->deadline = util_now_ms() + cfg->metrics_header_timeout_ms;
        child_register_master_fd(m, fd);
        master_watch(m, fd, EV_READ, metrics_client_io);
    }
}

/* metrics_respond - queue the whole answer and switch to writing. */
static void
metrics_respond(struct master *m, struct metrics_client *c, int code,
    const char *reason, const char *ctype, const char *body, int head_only,
    const char *extra)
{
    size_t             blen = strlen(body), cap = blen + 512;
    int                n;

    c->out = xmalloc(cap);
    n = snprintf(c->out, cap, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
        "Content-Length: %zu\r\n%sConnection: close\r\n\r\n", code, reason,
        ctype, blen, extra);
    c->outlen = (size_t)n;
    if (!head_only) {
        memcpy(c->out + c->outlen, body, blen);
        c->outlen += blen;
    }
    c->outoff = 0;
    c->deadline = util_now_ms() + METRICS_TIMEOUT_MS;
    if (ev_watch(m->loop, c->fd, EV_WRITE, metrics_client_io, m) < 0)
        metrics_client_close(m, c);
}

/* metrics_handle - answer a request metrics_req_parse() decided. */
static void
metrics_handle(struct master *m, struct metrics_client *c, int code,
    int head)
{
    char *body;

    switch (code) {
    case 200:
        body = metrics_render(m);
        metrics_respond(m, c, 200, "OK", "text/plain; version=0.0.4; "
            "charset=utf-8", body, head, "");
        free(body);
        break;
    case 404:
        metrics_respond(m, c, 404, "Not Found", "text/plain",
            "mtad serves /metrics only\n", head, "");
        break;
    case 405:
        metrics_respond(m, c, 405, "Method Not Allowed", "text/plain",
            "only GET\n", 0, "Allow: GET, HEAD\r\n");
        break;
    case 431:
        metrics_respond(m, c, 431, "Request Header Fields Too Large",
            "text/plain", "request too large\n", 0, "");
        break;
    default:
        metrics_respond(m, c, 400, "Bad Request", "text/plain", "bad "
            "request\n", 0, "");
        break;
    }
}


static void
metrics_client_event(struct master *m, struct metrics_client *c)
{
    ssize_t r;
    int     code, head;

    if (c->out != NULL) {
        while (c->outoff < c->outlen) {
            r = send(c->fd, c->out + c->outoff, c->outlen - c->outoff,
                MSG_DONTWAIT | MSG_NOSIGNAL);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                return;
            if (r <= 0)
                break;
            c->outoff += (size_t)r;
        }
        metrics_client_close(m, c);
        return;
    }
    r = recv(c->fd, c->req + c->len, sizeof(c->req) - 1 - c->len,
        MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        metrics_client_close(m, c);
        return;
    }
    c->len += (size_t)r;
    code = metrics_req_parse(c->req, c->len, sizeof(c->req) - 1, &head);
    if (code != 0)
        metrics_handle(m, c, code, head);
}

/* The listener is readable. */
static void
metrics_accept_event(struct ev_loop *loop, int fd, unsigned events,
    void *arg)
{
    (void)loop; (void)fd; (void)events;
    if (metrics_of(arg)->fd >= 0)
        metrics_accept(arg);
}

/* A client's fd is ready (read, or write once its answer is queued). */
static void
metrics_client_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct metrics *mt = metrics_of(arg);

    (void)loop; (void)events;
    for (size_t i = 0; i < METRICS_MAX_CLIENTS; i++)
        if (mt->clients[i].fd == fd) {
            metrics_client_event(arg, &mt->clients[i]);
            return;
        }
}

void
metrics_expire(struct master *m, uint64_t now)
{
    struct metrics *mt = m->metrics;

    if (mt == NULL)
        return;
    for (size_t i = 0; i < METRICS_MAX_CLIENTS; i++)
        if (mt->clients[i].fd >= 0 && now >= mt->clients[i].deadline)
            metrics_client_close(m, &mt->clients[i]);
}
