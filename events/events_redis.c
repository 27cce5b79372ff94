/*
 * events_redis.c - the Redis Streams target: each record is one
 * "XADD <stream> MAXLEN ~ <maxlen> * event <json>", a batch pipelined on
 * one connection with hiredis's async API on the worker's loop; the batch
 * is acknowledged when every XADD answered with an id.
 *
 * SANDBOX   The address is an IP literal (config checks it), so connecting
 *           needs no resolver; the password file is read in
 *           events_redis_new(), before the sandbox.
 * FAILURE   An error reply, a lost connection or no answer within
 *           events.http.timeout... (the redis timeout: 10 s) fails the batch;
 *           the next offer connects again.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "events/events.h"
#include "events/events_int.h"

#define EVR_TIMEOUT_MS 10000
#define EVR_PASS_MAX   1024

struct evr {
    struct events_target base;
    redisAsyncContext  *ac;
    unsigned            mask;       /* EV_* watched on ac's fd */
    int                 fd;
    int                 connected;
    char                host[64];
    int                 port;
    char                pass[EVR_PASS_MAX];
    size_t              pending;    /* replies of the batch still due */
    int                 failed;     /* one of them was an error */
    int                 inflight;
    char                why[256];
    struct ev_timer     timeout;
};


/* ---- hiredis on the loop ---- */

static void
evr_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct evr *r = arg;

    (void)loop;
    (void)fd;
    if (r->ac != NULL && (ev & (EV_READ | EV_ERROR)))
        redisAsyncHandleRead(r->ac);
    if (r->ac != NULL && (ev & EV_WRITE))
        redisAsyncHandleWrite(r->ac);
}


static void
evr_watch(struct evr *r, unsigned mask)
{
    r->mask = mask;
    if (mask == 0)
        ev_unwatch(r->base.e->loop, r->fd);
    else
        (void)ev_watch(r->base.e->loop, r->fd, mask, evr_io, r);
}


static void evr_add_read(void *p) { struct evr *r = p; evr_watch(r, r->mask | EV_READ); }
static void evr_del_read(void *p) { struct evr *r = p; evr_watch(r, r->mask & ~EV_READ); }
static void evr_add_write(void *p) { struct evr *r = p; evr_watch(r, r->mask | EV_WRITE); }
static void evr_del_write(void *p) { struct evr *r = p; evr_watch(r, r->mask & ~EV_WRITE); }
static void evr_cleanup(void *p) { struct evr *r = p; evr_watch(r, 0); }


/* evr_end - the batch in flight is over, one way or the other. */
static void
evr_end(struct evr *r, int ok, const char *why)
{
    if (!r->inflight)
        return;
    r->inflight = 0;
    r->pending = 0;
    ev_timer_stop(r->base.e->loop, &r->timeout);
    events_offered(r->base.e, ok, why);
}


static void
evr_connected(const redisAsyncContext *ac, int status)
{
    struct evr *r = ac->data;

    if (status != REDIS_OK) {
        snprintf(r->why, sizeof(r->why), "redis %s:%d: %s", r->host,
            r->port, ac->errstr);
        r->ac = NULL;               /* hiredis frees it */
        r->connected = 0;
        evr_end(r, 0, r->why);
        return;
    }
    r->connected = 1;
}


static void
evr_disconnected(const redisAsyncContext *ac, int status)
{
    struct evr *r = ac->data;

    (void)status;
    snprintf(r->why, sizeof(r->why), "redis %s:%d: connection lost%s%s",
        r->host, r->port, ac->errstr[0] ? ": " : "", ac->errstr);
    r->ac = NULL;
    r->connected = 0;
    evr_end(r, 0, r->why);
}


static void
evr_timeout(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct evr *r = arg;

    (void)loop;
    (void)t;
    if (r->ac != NULL)
        redisAsyncDisconnect(r->ac);    /* evr_disconnected ends it */
    evr_end(r, 0, "redis: no answer in time");
}


static void
evr_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    struct evr *r = ac->data;
    redisReply *rp = reply;

    (void)priv;
    if (!r->inflight)
        return;
    if (rp == NULL || rp->type == REDIS_REPLY_ERROR) {
        if (!r->failed) {
            char esc[UTIL_ESC_ROOM(200)];
            const char *m = rp != NULL && rp->str ? rp->str : "no reply";

            util_escape(esc, sizeof(esc), m, strnlen(m, 200), 0, NULL);
            snprintf(r->why, sizeof(r->why), "redis: %.240s", esc);
        }
        r->failed = 1;
    }
    if (r->pending > 0 && --r->pending == 0)
        evr_end(r, !r->failed, r->why);
}


static int
evr_connect(struct evr *r, char *why, size_t whysz)
{
    redisAsyncContext *ac = redisAsyncConnect(r->host, r->port);

    if (ac == NULL || ac->err) {
        snprintf(why, whysz, "redis %s:%d: %s", r->host, r->port,
            ac ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        return -1;
    }
    r->ac = ac;
    r->fd = ac->c.fd;
    r->mask = 0;
    ac->data = r;
    ac->ev.data = r;
    ac->ev.addRead = evr_add_read;
    ac->ev.delRead = evr_del_read;
    ac->ev.addWrite = evr_add_write;
    ac->ev.delWrite = evr_del_write;
    ac->ev.cleanup = evr_cleanup;
    (void)redisAsyncSetConnectCallback(ac, evr_connected);
    (void)redisAsyncSetDisconnectCallback(ac, evr_disconnected);
    if (r->pass[0] != '\0')
        (void)redisAsyncCommand(ac, NULL, NULL, "AUTH %s", r->pass);
    return 0;
}


/* ---- the target ---- */

static int
evr_offer(struct events_target *t, const char *b, size_t len, size_t n,
    char *why, size_t whysz)
{
    struct evr          *r = (struct evr *)t;
    const struct config *cfg = r->base.e->cfg;
    const char          *p = b, *end = b + len;
    char                 maxlen[24];

    if (r->ac == NULL && evr_connect(r, why, whysz) != 0)
        return -1;
    snprintf(maxlen, sizeof(maxlen), "%d", cfg->events_redis_maxlen);
    r->inflight = 1;
    r->failed = 0;
    r->pending = n;
    r->why[0] = '\0';
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t      ll = nl ? (size_t)(nl - p) : (size_t)(end - p);

        if (cfg->events_redis_maxlen > 0)
            (void)redisAsyncCommand(r->ac, evr_reply, NULL,
                "XADD %s MAXLEN ~ %s * event %b", cfg->events_redis_stream,
                maxlen, p, ll);
        else
            (void)redisAsyncCommand(r->ac, evr_reply, NULL,
                "XADD %s * event %b", cfg->events_redis_stream, p, ll);
        p += ll + 1;
    }
    ev_timer_start(r->base.e->loop, &r->timeout, EVR_TIMEOUT_MS);
    return 0;
}


static void
evr_free(struct events_target *t)
{
    struct evr *r = (struct evr *)t;

    ev_timer_stop(r->base.e->loop, &r->timeout);
    r->inflight = 0;
    if (r->ac != NULL) {
        redisAsyncFree(r->ac);
        r->ac = NULL;
    }
    memset(r->pass, 0, sizeof(r->pass));
    free(r);
}


static const struct events_target_ops evr_ops = { evr_offer, evr_free };


struct events_target *
events_redis_new(struct events *e, char *why, size_t whysz)
{
    const struct config    *cfg = e->cfg;
    struct evr             *r = xcalloc(1, sizeof(*r));
    struct sockaddr_storage ss;
    socklen_t               len;

    r->base.ops = &evr_ops;
    r->base.e = e;
    r->fd = -1;
    ev_timer_init(&r->timeout, evr_timeout, r);
    if (util_parse_hostport(cfg->events_redis_address, &ss, &len) != 0) {
        snprintf(why, whysz, "events.redis.address: not an address");
        free(r);
        return NULL;
    }
    (void)util_sockaddr_ip((struct sockaddr *)&ss, r->host, sizeof(r->host));
    r->port = ntohs(ss.ss_family == AF_INET6 ?
        ((struct sockaddr_in6 *)&ss)->sin6_port :
        ((struct sockaddr_in *)&ss)->sin_port);
    if (cfg->events_redis_password_file != NULL) {
        int     fd = open(cfg->events_redis_password_file,
            O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, r->pass, sizeof(r->pass) - 1) : -1;

        if (fd >= 0)
            close(fd);
        if (n <= 0) {
            snprintf(why, whysz, "events.redis.password_file %s: %s",
                cfg->events_redis_password_file, n < 0 ? strerror(errno) :
                "empty");
            free(r);
            return NULL;
        }
        r->pass[strcspn(r->pass, "\r\n")] = '\0';
    }
    return &r->base;
}
