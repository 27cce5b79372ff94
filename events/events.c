/*
 * events.c - delivery events: records, the writer (this process's segment
 * files) and the set-up; the reader that offers them is events_read.c,
 * the targets events_http.c and events_redis.c.
 *
 * RECORD    One JSON object per line (docs/EVENTS.md): {"v":1,"type":...,
 *           "time":"2026-12-04T18:00:00.123Z","unix_ms":...,"queue_id":...}
 *           with the fields the event has; every string escaped as JSON
 *           (logfmt_json_str()), so a CR, LF or quote from the network
 *           never breaks a line.
 * WRITER    Records gather in e->out; events_flush() appends them with one
 *           write() to the process's open segment (O_APPEND, flock
 *           LOCK_SH held while it is open); past EVENTS_SEG_MAX bytes the
 *           segment is closed (the lock with it) and a new one opened.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/logfmt.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "events/events.h"
#include "events/events_int.h"

int
events_type_parse(const char *name)
{
    for (int i = 0; i < CONFIG_EVENT_NTYPES; i++)
        if (strcmp(name, config_event_types[i]) == 0)
            return i;
    return -1;
}


const char *
events_type_name(enum events_type t)
{
    return (unsigned)t < CONFIG_EVENT_NTYPES ? config_event_types[t] : "?";
}


int
events_wants(const struct events *e, enum events_type t)
{
    return e != NULL && (e->types & (1u << t)) != 0;
}


int
events_want_headers(const struct events *e)
{
    return e != NULL && e->nheaders > 0;
}


int
events_full(const struct events *e)
{
    return e != NULL && e->sp != NULL &&
        __atomic_load_n(&e->sp->events.full, __ATOMIC_RELAXED) != 0;
}


/* ---- the record ---- */

/* ev_jstr - "v" escaped as JSON, at most EVENTS_FIELD_MAX bytes of it. */
static void
ev_jstr(struct buf *b, const char *v)
{
    size_t n = strlen(v), room;

    if (n > EVENTS_FIELD_MAX)
        n = EVENTS_FIELD_MAX;
    room = n * 6 + 1;               /* \u00XX per byte at worst */
    buf_append(b, "\"", 1);
    (void)buf_reserve(b, room);
    buf_produce(b, logfmt_json_str(buf_tail(b), room, v, n));
    buf_append(b, "\"", 1);
}


/* ev_field - "key":"v", after a comma unless first; nothing for a NULL
 * v.  Returns 1 when it wrote. */
static int
ev_field(struct buf *b, const char *key, const char *v, int first)
{
    if (v == NULL)
        return 0;
    if (!first)
        buf_append(b, ",", 1);
    ev_jstr(b, key);
    buf_append(b, ":", 1);
    ev_jstr(b, v);
    return 1;
}


static void
ev_str(struct buf *b, const char *key, const char *v)
{
    (void)ev_field(b, key, v, 0);
}


/* ev_reply - "reply":{"code":250,"enhanced":"2.0.0","text":"Ok"}. */
static void
ev_reply(struct buf *b, const char *reply)
{
    char dsn[16];
    const char *text = reply;
    int  code = 0;

    if (reply == NULL)
        return;
    if (reply[0] >= '2' && reply[0] <= '5' && reply[1] >= '0' &&
        reply[1] <= '9' && reply[2] >= '0' && reply[2] <= '9') {
        code = (reply[0] - '0') * 100 + (reply[1] - '0') * 10 +
            (reply[2] - '0');
        text = reply + 3;
        text += strspn(text, " -");
    }
    (void)logfmt_dsn(reply, dsn, sizeof(dsn));
    if (dsn[0] != '\0' && strncmp(text, dsn, strlen(dsn)) == 0) {
        text += strlen(dsn);
        text += strspn(text, " ");
    }
    /* mtad's own reasons (a refused connect) have no code: text only */
    buf_append(b, ",\"reply\":{", 10);
    if (code != 0) {
        buf_printf(b, "\"code\":%d", code);
        ev_str(b, "enhanced", dsn[0] ? dsn : NULL);
    }
    (void)ev_field(b, "text", text, code == 0);
    buf_append(b, "}", 1);
}


/* ev_next_hop - "next_hop":{"host":...,"address":...,"port":25} from
 * "host[ip]:port" (the relay string of the log lines). */
static void
ev_next_hop(struct buf *b, const char *relay)
{
    const char *lb, *rb;
    char        host[256], addr[64];
    unsigned    port = 0;

    if (relay == NULL || strcmp(relay, "none") == 0 ||
        (lb = strchr(relay, '[')) == NULL ||
        (rb = strchr(lb, ']')) == NULL || (size_t)(lb - relay) >=
        sizeof(host) || (size_t)(rb - lb - 1) >= sizeof(addr))
        return;
    memcpy(host, relay, (size_t)(lb - relay));
    host[lb - relay] = '\0';
    memcpy(addr, lb + 1, (size_t)(rb - lb - 1));
    addr[rb - lb - 1] = '\0';
    if (rb[1] == ':')
        port = (unsigned)strtoul(rb + 2, NULL, 10);
    buf_append(b, ",\"next_hop\":{", 13);
    (void)ev_field(b, "host", host, 1);
    ev_str(b, "address", addr);
    buf_printf(b, ",\"port\":%u}", port);
}


/* ev_headers - "headers":{"X-Msg-Id":"..."} for the named fields found in
 * the header section (first occurrence, unfolded, trimmed). */
static void
ev_headers(struct events *e, struct buf *b, const char *h, size_t n)
{
    int any = 0;

    for (size_t k = 0; k < e->nheaders; k++) {
        char        val[EVENTS_FIELD_MAX + 1];
        size_t      vl = 0;
        const char *name = e->headers[k];
        size_t      nl = strlen(name);

        for (size_t i = 0; i < n; ) {
            const char *line = h + i, *end = memchr(line, '\n', n - i);
            size_t      ll = end ? (size_t)(end - line) + 1 : n - i;

            i += ll;
            if (ll > nl && line[nl] == ':' &&
                strncasecmp(line, name, nl) == 0) {
                const char *v = line + nl + 1;
                size_t      left = ll - nl - 1;

                /* the value, with its continuation lines joined */
                for (;;) {
                    for (size_t j = 0; j < left && vl < EVENTS_FIELD_MAX;
                        j++)
                        if (v[j] != '\r' && v[j] != '\n')
                            val[vl++] = v[j] == '\t' ? ' ' : v[j];
                    if (i >= n || (h[i] != ' ' && h[i] != '\t'))
                        break;
                    v = h + i;
                    end = memchr(v, '\n', n - i);
                    left = end ? (size_t)(end - v) + 1 : n - i;
                    i += left;
                }
                break;
            }
        }
        if (vl == 0)
            continue;
        val[vl] = '\0';
        while (vl > 0 && val[vl - 1] == ' ')
            val[--vl] = '\0';
        if (!any)
            buf_append(b, ",\"headers\":{", 12);
        any |= ev_field(b, name, val + strspn(val, " "), !any);
    }
    if (any)
        buf_append(b, "}", 1);
}


static void
ev_time(struct buf *b, uint64_t ms)
{
    struct tm tm;
    time_t    t = (time_t)(ms / 1000);
    char      ts[40];

    gmtime_r(&t, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    buf_printf(b, ",\"time\":\"%s.%03uZ\",\"unix_ms\":%" PRIu64, ts,
        (unsigned)(ms % 1000), ms);
}


void
events_format(struct events *e, struct buf *b, const struct events_rec *r,
    uint64_t now_ms)
{
    buf_printf(b, "{\"v\":%d", EVENTS_SCHEMA_VERSION);
    ev_str(b, "type", events_type_name(r->type));
    ev_time(b, now_ms);
    ev_str(b, "node", e->node);
    ev_str(b, "queue_id", r->queue_id);
    ev_str(b, "sender", r->sender);
    ev_str(b, "recipient", r->recipient);
    if (r->rcpt != NULL) {
        buf_append(b, ",\"recipients\":[", 15);
        for (size_t i = 0; i < r->nrcpt; i++) {
            if (i > 0)
                buf_append(b, ",", 1);
            ev_jstr(b, r->rcpt[i].addr ? r->rcpt[i].addr : "");
        }
        buf_append(b, "]", 1);
    }
    if (r->size > 0)
        buf_printf(b, ",\"size\":%" PRIu64, r->size);
    if (r->attempt > 0)
        buf_printf(b, ",\"attempt\":%u", r->attempt);
    ev_next_hop(b, r->relay);
    ev_reply(b, r->reply);
    if (r->tls_version != NULL && r->tls_version[0] != '\0') {
        buf_append(b, ",\"tls\":{", 8);
        (void)ev_field(b, "version", r->tls_version, 1);
        ev_str(b, "cipher", r->tls_cipher);
        ev_str(b, "verify", r->tls_verify);
        buf_append(b, "}", 1);
    }
    ev_str(b, "class", r->cls);
    ev_str(b, "site", r->site);
    ev_str(b, "source", r->source);
    if (r->client_ip != NULL) {
        ev_str(b, "client_address", r->client_ip);
        buf_printf(b, ",\"client_port\":%u", r->client_port);
    }
    ev_str(b, "helo", r->helo);
    ev_str(b, "auth_user", r->auth_user);
    ev_str(b, "dsn_queue_id", r->dsn_id);
    ev_str(b, "dsn_kind", r->dsn_kind);
    ev_str(b, "mode", r->mode);
    if (r->until_ms > 0)
        buf_printf(b, ",\"until_ms\":%" PRIu64, r->until_ms);
    if (r->hdr != NULL && e->nheaders > 0)
        ev_headers(e, b, r->hdr, r->hdrlen);
    buf_append(b, "}\n", 2);
}


/* ---- the writer ---- */

/* ev_seg_open - this process's next segment, locked shared.  0 or -1. */
static int
ev_seg_open(struct events *e)
{
    snprintf(e->wname, sizeof(e->wname), "%013" PRIx64 "-%08x-%04x.ev",
        util_wall_ms(), (unsigned)getpid(), e->wseq++ & 0xffff);
    e->wfd = openat(e->dfd, e->wname, O_WRONLY | O_CREAT | O_EXCL |
        O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (e->wfd < 0)
        return -1;
    if (flock(e->wfd, LOCK_SH) != 0) {
        close(e->wfd);
        e->wfd = -1;
        return -1;
    }
    e->wsize = 0;
    return 0;
}


static void
ev_write_failed(struct events *e, const char *what)
{
    if (!e->wfailing)
        log_err("events: %s %s/%s: %s; records kept in memory (at most "
            "4 MiB) and written again", what, EVENTS_DIR, e->wname,
            strerror(errno));
    e->wfailing = 1;
    if (buf_avail(&e->out) > EVENTS_OUT_MAX) {
        /* drop whole oldest lines to come back under the cap */
        const char *h = buf_head(&e->out);
        size_t      cut = buf_avail(&e->out) - EVENTS_OUT_MAX, k = 0, n = 0;
        const char *nl;

        while (k < cut && (nl = memchr(h + k, '\n', buf_avail(&e->out) -
            k)) != NULL) {
            k = (size_t)(nl - h) + 1;
            n++;
        }
        buf_consume(&e->out, k);
        if (e->st != NULL)
            STATUS_ADD(e->st->ops.ev_dropped, n);
    }
}


void
events_flush(struct events *e)
{
    ssize_t n;

    if (e == NULL || buf_avail(&e->out) == 0)
        return;
    if (e->wfd < 0 && ev_seg_open(e) < 0) {
        ev_write_failed(e, "cannot open");
        return;
    }
    n = write(e->wfd, buf_head(&e->out), buf_avail(&e->out));
    if (n < 0 || (size_t)n != buf_avail(&e->out)) {
        /* a short write leaves a cut line: this segment ends here (the
         * reader skips a last line without its newline) */
        if (n > 0)
            (void)ftruncate(e->wfd, (off_t)e->wsize);
        ev_write_failed(e, "cannot write");
        close(e->wfd);
        e->wfd = -1;
        return;
    }
    if (e->wfailing)
        log_notice("events: writing to %s/%s again", EVENTS_DIR, e->wname);
    e->wfailing = 0;
    e->wsize += (uint64_t)n;
    buf_consume(&e->out, (size_t)n);
    buf_compact(&e->out);
    if (e->wsize >= EVENTS_SEG_MAX) {
        close(e->wfd);              /* the lock goes with it: complete */
        e->wfd = -1;
    }
}


static void
ev_flush_fire(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    events_flush(arg);
}


void
events_emit(struct events *e, const struct events_rec *r)
{
    if (!events_wants(e, r->type))
        return;
    events_format(e, &e->out, r, util_wall_ms());
    if (e->st != NULL)
        STATUS_ADD(e->st->ops.ev_emitted, 1);
    /* the caller flushes before what makes the event final; the rest
     * goes at the next loop turn */
    if (!ev_timer_active(&e->flush_timer))
        ev_timer_start(e->loop, &e->flush_timer, 0);
}


void
events_emit_shape(struct events *e, enum events_type t, const char *site,
    const char *source, const char *mode, uint64_t until_ms,
    const char *reason)
{
    struct events_rec r = { .type = t, .site = site, .source = source,
        .mode = mode, .until_ms = until_ms, .reply = reason };

    events_emit(e, &r);
}


/* ---- set-up ---- */

static void
ev_split_headers(struct events *e, const char *list)
{
    const char *s = list;
    size_t      len;

    e->headers = xcalloc(CONFIG_EVENT_HEADERS, sizeof(char *));
    while (*s != '\0' && e->nheaders < CONFIG_EVENT_HEADERS) {
        s += strspn(s, " \t,");
        if ((len = strcspn(s, " \t,")) == 0)
            break;
        e->headers[e->nheaders++] = xstrndup(s, len);
        s += len;
    }
}


struct events *
events_new(struct ev_loop *loop, const struct config *cfg,
    struct status_page *sp, struct status_worker *st, char *why,
    size_t whysz)
{
    struct events *e;
    char           path[4096];

    why[0] = '\0';
    if (cfg->events_http_url == NULL && cfg->events_redis_address == NULL)
        return NULL;
    e = xcalloc(1, sizeof(*e));
    e->loop = loop;
    e->cfg = cfg;
    e->sp = sp;
    e->st = st;
    e->types = cfg->events_types;
    e->wfd = e->lockfd = -1;
    util_strlcpy(e->node, cfg->hostname ? cfg->hostname : "", sizeof(e->node));
    if (cfg->events_headers != NULL)
        ev_split_headers(e, cfg->events_headers);
    buf_init(&e->out);
    buf_init(&e->batch);
    ev_timer_init(&e->flush_timer, ev_flush_fire, e);
    snprintf(path, sizeof(path), "%s/%s", cfg->spool_dir, EVENTS_DIR);
    e->dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (e->dfd < 0) {
        snprintf(why, whysz, "events: %s: %s", path, strerror(errno));
        events_free(e);
        return NULL;
    }
    e->target = cfg->events_http_url != NULL ? events_http_new(e, why, whysz)
        : events_redis_new(e, why, whysz);
    if (e->target == NULL) {
        events_free(e);
        return NULL;
    }
    events_read_start(e);
    return e;
}


void
events_free(struct events *e)
{
    if (e == NULL)
        return;
    events_flush(e);
    ev_timer_stop(e->loop, &e->flush_timer);
    events_read_stop(e);
    if (e->target != NULL)
        e->target->ops->free(e->target);
    if (e->wfd >= 0)
        close(e->wfd);
    if (e->dfd >= 0)
        close(e->dfd);
    for (size_t i = 0; i < e->nheaders; i++)
        free(e->headers[i]);
    free(e->headers);
    buf_free(&e->out);
    buf_free(&e->batch);
    free(e);
}
