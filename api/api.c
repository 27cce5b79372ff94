/*
 * api.c - the API process: its loop, the master's channel, the listener
 * and each client's bytes (TLS, request head and body, the answer,
 * keep-alive, the timeouts).
 *
 * PURPOSE   Forked by the master (master/api_child.c) with the listener
 *           it bound and a channel (role CHAN_API); api_init() runs while
 *           still privileged (the tokens file and TLS key may be root's),
 *           api_main() after the privilege drop and the sandbox.
 *           Slow clients: api.header_timeout for a request head from its
 *           first byte (408), api.body_timeout while a body (or our
 *           answer) makes no progress, api.idle_timeout between requests.
 *           At most api.max_clients connections; one more is answered
 *           503 and closed.
 * CONTRACT  The loop never blocks; every socket is non-blocking.  A stop
 *           (CHAN_STOP, or the channel's end) closes the listener, lets
 *           requests in progress finish within API_STOP_MS and exits 0.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "api/api.h"
#include "api/api_core.h"
#include "api/api_json.h"
#include "api/api_submit.h"
#include "api/api_verbs.h"
#include "common/chan.h"
#include "common/log.h"
#include "common/net.h"
#include "common/util.h"
#include "config/config.h"

#define API_STOP_MS     10000u
#define API_READ_CHUNK  16384u
#define API_LINGER_MS   2000u
#define API_LINGER_MAX  ((size_t)4 * 1024 * 1024)

static void api_client_io(struct ev_loop *loop, int fd, unsigned ev,
    void *arg);
static void api_client_input(struct api_client *c);
static void api_client_reset(struct api_client *c);

struct ev_loop *
api_loop(struct api *a)
{
    return a->loop;
}

const struct config *
api_config(struct api *a)
{
    return a->cfg;
}

int
api_chan_fd(struct api *a)
{
    return a->chan;
}

/* ---- clients ---------------------------------------------------------- */

void
api_client_ref(struct api_client *c)
{
    c->refs++;
}

void
api_client_unref(struct api_client *c)
{
    if (--c->refs > 0)
        return;
    buf_free(&c->in);
    buf_free(&c->out);
    free(c);
}

int
api_client_alive(const struct api_client *c)
{
    return !c->dead;
}

static void
api_want(struct api_client *c, unsigned ev)
{
    if (c->watched == ev)
        return;
    c->watched = ev;
    (void)ev_watch(c->a->loop, c->conn.fd, ev, api_client_io, c);
}

static void api_maybe_exit(struct api *a);

void
api_client_close(struct api_client *c)
{
    struct api *a = c->a;

    if (c->dead)
        return;
    c->dead = 1;
    ev_timer_stop(a->loop, &c->timer);
    ev_timer_stop(a->loop, &c->wait);
    c->status_id = 0;
    ev_unwatch(a->loop, c->conn.fd);
    net_close(&c->conn);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        a->clients = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    a->nclients--;
    api_client_unref(c);
    api_maybe_exit(a);
}

static void
api_client_timeout(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct api_client *c = arg;

    (void)loop;
    (void)t;
    if (c->state == API_C_HEAD && buf_avail(&c->in) > 0 && c->head_timer) {
        /* a head begun and not finished in time: say so, then close */
        api_client_reset(c);
        log_info("%s: request head not complete within %llums",
            c->peer_str, (unsigned long long)c->a->cfg->api_header_timeout_ms);
        c->keep_alive = 0;
        api_reply_error(c, 408, "request head not complete in time");
        return;
    }
    if (c->state == API_C_BODY)
        log_info("%s: request body stalled for %llums", c->peer_str,
            (unsigned long long)c->a->cfg->api_body_timeout_ms);
    api_client_close(c);
}

static void
api_timer(struct api_client *c, uint64_t ms)
{
    ev_timer_start(c->a->loop, &c->timer, ms);
}

/* The answer is out and the connection ends: with request bytes unread
 * (a refused body on its way), close() would send a reset that can
 * destroy the answer in the client's buffer before it reads it; so shut
 * our side, read and drop what comes for a while, then close.  TLS
 * connections close at once (with close_notify). */
static void
api_client_linger(struct api_client *c)
{
    if (c->conn.ssl != NULL || shutdown(c->conn.fd, SHUT_WR) < 0) {
        api_client_close(c);
        return;
    }
    c->state = API_C_LINGER;
    c->drained = 0;
    buf_consume(&c->in, buf_avail(&c->in));
    buf_compact(&c->in);
    api_want(c, EV_READ);
    api_timer(c, API_LINGER_MS);
}

static void
api_client_drain(struct api_client *c)
{
    char    junk[16384];
    ssize_t r;

    for (int i = 0; i < 16; i++) {
        r = read(c->conn.fd, junk, sizeof(junk));
        if (r > 0) {
            if ((c->drained += (size_t)r) > API_LINGER_MAX)
                break;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        break;
    }
    api_client_close(c);            /* EOF, error, or enough */
}

/* Writes what c->out holds; when done, the next request or the close. */
static void
api_client_flush(struct api_client *c)
{
    while (buf_avail(&c->out) > 0) {
        ssize_t w = net_write(&c->conn, buf_head(&c->out),
                        buf_avail(&c->out));

        if (w == MTA_AGAIN) {
            api_want(c, c->conn.want == NET_WANT_READ ? EV_READ : EV_WRITE);
            return;
        }
        if (w < 0) {
            api_client_close(c);
            return;
        }
        buf_consume(&c->out, (size_t)w);
        api_timer(c, c->a->cfg->api_body_timeout_ms);
    }
    buf_compact(&c->out);
    if (!c->keep_alive || c->a->stopping) {
        api_client_linger(c);
        return;
    }
    c->nreq++;
    /* the request's bytes are done with; a pipelined one may follow */
    buf_consume(&c->in, c->head.head_len + (size_t)c->head.content_length);
    buf_compact(&c->in);
    c->state = API_C_HEAD;
    c->head_timer = 0;
    api_client_reset(c);
    api_want(c, EV_READ);
    api_timer(c, c->a->cfg->api_idle_timeout_ms);
    if (buf_avail(&c->in) > 0)
        api_client_input(c);
}

void
api_client_send(struct api_client *c)
{
    if (c->dead)
        return;
    c->state = API_C_WRITE;
    api_timer(c, c->a->cfg->api_body_timeout_ms);
    if (c->in_handler) {
        c->send_pending = 1;        /* api_route_request() sends it */
        return;
    }
    api_client_ref(c);              /* the flush may close it */
    api_client_flush(c);
    api_client_unref(c);
}

/* A head parsed: check what can be checked before the body comes. */
static void
api_client_head(struct api_client *c)
{
    struct api_http_head *h = &c->head;

    c->keep_alive = h->keep_alive;
    if (h->has_length && h->content_length > 0) {
        c->state = API_C_BODY;
        api_timer(c, c->a->cfg->api_body_timeout_ms);
        return;
    }
    c->state = API_C_HANDLER;
}

/* A new request begins: nothing of the last one (its token above all)
 * may carry over to it. */
static void
api_client_reset(struct api_client *c)
{
    memset(&c->req, 0, sizeof(c->req));
    c->nparams = 0;
    c->path[0] = '\0';
    c->answered = 0;
}

/* The bytes in c->in: a head, a body, or not enough yet. */
static void
api_client_input(struct api_client *c)
{
    const char *why;
    int         rc;

    if (c->state == API_C_HEAD) {
        if (!c->head_timer && buf_avail(&c->in) > 0) {
            c->head_timer = 1;
            api_timer(c, c->a->cfg->api_header_timeout_ms);
        }
        /* the size is checked after the token: 401 comes first */
        rc = api_http_parse(buf_head(&c->in), buf_avail(&c->in), UINT64_MAX,
            &c->head, &why);
        if (rc == -2)
            return;
        api_client_reset(c);
        if (rc != 0) {
            c->keep_alive = 0;
            c->state = API_C_HANDLER;
            api_reply_error(c, rc, "%s", why);
            return;
        }
        api_client_head(c);
        /* auth before the body: a refused client sends no megabytes */
        if (c->state == API_C_BODY && api_precheck(c->a, c) != 0)
            return;
        if (c->head.content_length > c->a->cfg->api_max_body) {
            c->keep_alive = 0;
            c->state = API_C_HANDLER;
            api_reply_error(c, 413, "body larger than %llu bytes",
                (unsigned long long)c->a->cfg->api_max_body);
            return;
        }
        if (c->state == API_C_BODY && c->head.expect_continue &&
            buf_avail(&c->in) == c->head.head_len) {
            static const char go[] = "HTTP/1.1 100 Continue\r\n\r\n";

            /* best effort: a client that gets nothing sends anyway */
            (void)net_write(&c->conn, go, sizeof(go) - 1);
        }
    }
    if (c->state == API_C_BODY) {
        if (buf_avail(&c->in) < c->head.head_len + c->head.content_length)
            return;
        c->state = API_C_HANDLER;
    }
    if (c->state == API_C_HANDLER) {
        ev_timer_stop(c->a->loop, &c->timer);
        api_want(c, 0);
        api_route_request(c->a, c);
    }
}

static void
api_client_read(struct api_client *c)
{
    int rounds = 0;

    while (!c->dead && (c->state == API_C_HEAD || c->state == API_C_BODY) &&
        rounds++ < 64) {
        size_t  want = API_READ_CHUNK;
        ssize_t r;

        if (c->state == API_C_BODY) {
            size_t need = c->head.head_len + (size_t)c->head.content_length -
                          buf_avail(&c->in);

            if (need > want)
                want = need < 1024 * 1024 ? need : 1024 * 1024;
        }
        if (buf_reserve(&c->in, want) < 0) {
            api_client_close(c);
            return;
        }
        r = net_read(&c->conn, buf_tail(&c->in), buf_room(&c->in));
        if (r == MTA_AGAIN) {
            api_want(c, c->conn.want == NET_WANT_WRITE ? EV_WRITE : EV_READ);
            return;
        }
        if (r <= 0) {
            api_client_close(c);        /* EOF or error */
            return;
        }
        buf_produce(&c->in, (size_t)r);
        if (c->state == API_C_BODY)
            api_timer(c, c->a->cfg->api_body_timeout_ms);
        api_client_input(c);
    }
}

static void
api_client_handshake(struct api_client *c)
{
    char err[256];
    int  rc = net_tls_handshake(&c->conn, err, sizeof(err));

    if (rc == MTA_AGAIN) {
        api_want(c, c->conn.want == NET_WANT_WRITE ? EV_WRITE : EV_READ);
        return;
    }
    if (rc < 0) {
        log_info("%s: TLS handshake failed: %s", c->peer_str, err);
        api_client_close(c);
        return;
    }
    c->state = API_C_HEAD;
    api_want(c, EV_READ);
    api_timer(c, c->a->cfg->api_idle_timeout_ms);
    api_client_read(c);
}

static void
api_client_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct api_client *c = arg;

    (void)loop;
    (void)fd;
    api_client_ref(c);
    if ((ev & EV_ERROR) && c->state != API_C_WRITE &&
        c->state != API_C_HEAD && c->state != API_C_BODY) {
        api_client_close(c);            /* gone while a handler works */
    } else if (c->state == API_C_TLS) {
        api_client_handshake(c);
    } else if (c->state == API_C_WRITE) {
        api_client_flush(c);
    } else if (c->state == API_C_LINGER) {
        api_client_drain(c);
    } else if (c->state == API_C_HEAD || c->state == API_C_BODY) {
        api_client_read(c);
    }
    api_client_unref(c);
}

static void
api_refuse_busy(int fd)
{
    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\nContent-Length: 66\r\n"
        "Connection: close\r\nRetry-After: 1\r\n\r\n"
        "{\"error\":{\"status\":503,\"message\":\"too many API connections\"}}\n";

    (void)send(fd, busy, sizeof(busy) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    close(fd);
}

static void
api_accept(struct ev_loop *loop, int lfd, unsigned ev, void *arg)
{
    struct api *a = arg;
    int         n;

    (void)loop;
    (void)ev;
    for (n = 0; n < 64; n++) {
        struct sockaddr_storage ss;
        socklen_t               sl = sizeof(ss);
        struct api_client      *c;
        char                    err[256];
        int                     fd = accept4(lfd, (struct sockaddr *)&ss, &sl,
                                    SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                log_warn("accept: %s", strerror(errno));
            return;
        }
        if (a->nclients >= (unsigned)a->cfg->api_max_clients) {
            api_refuse_busy(fd);
            continue;
        }
        c = xcalloc(1, sizeof(*c));
        c->a = a;
        c->refs = 1;                    /* the list's */
        c->peer = ss;
        util_sockaddr_str((struct sockaddr *)&ss, c->peer_str,
            sizeof(c->peer_str));
        buf_init(&c->in);
        buf_init(&c->out);
        net_init(&c->conn, fd);
        ev_timer_init(&c->timer, api_client_timeout, c);
        ev_timer_init(&c->wait, NULL, c);
        c->next = a->clients;
        if (a->clients != NULL)
            a->clients->prev = c;
        a->clients = c;
        a->nclients++;
        c->started_ms = ev_now(a->loop);
        if (a->tls != NULL) {
            if (net_tls_start(&c->conn, a->tls, err, sizeof(err)) < 0) {
                log_warn("%s: %s", c->peer_str, err);
                api_client_close(c);
                continue;
            }
            c->state = API_C_TLS;
            api_timer(c, a->cfg->api_header_timeout_ms);
            api_want(c, EV_READ);
            continue;
        }
        c->state = API_C_HEAD;
        api_timer(c, a->cfg->api_idle_timeout_ms);
        api_want(c, EV_READ);
    }
}

/* ---- the master's channel -------------------------------------------- */

static void
api_maybe_exit(struct api *a)
{
    if (a->stopping && a->nclients == 0)
        ev_stop(a->loop);
}

static void
api_stop(struct api *a)
{
    struct api_client *c, *next;

    if (a->stopping)
        return;
    a->stopping = 1;
    if (a->lfd >= 0) {
        ev_unwatch(a->loop, a->lfd);
        close(a->lfd);
        a->lfd = -1;
    }
    for (c = a->clients; c != NULL; c = next) {
        next = c->next;
        c->keep_alive = 0;
        /* idle between requests: nothing to finish.  A connection that
         * has not sent its first request yet may be one the client just
         * opened for a request on its way: it is served (and closed)
         * like the others, within API_STOP_MS. */
        if (c->state == API_C_HEAD && buf_avail(&c->in) == 0 && c->nreq > 0)
            api_client_close(c);
    }
    ev_timer_start(a->loop, &a->stop_timer, API_STOP_MS);
    api_maybe_exit(a);
}

static void
api_stop_expired(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    log_warn("requests still open after %us; exiting", API_STOP_MS / 1000);
    ev_stop(loop);
}

static void
api_on_stop(const struct chan_msg *m, void *arg)
{
    (void)m;
    api_stop(arg);
}

static void
api_on_ping(const struct chan_msg *m, void *arg)
{
    struct api *a = arg;

    (void)m;
    (void)chan_send(a->chan, CHAN_PONG, NULL, 0, -1);
}

static void
api_on_status(const struct chan_msg *m, void *arg)
{
    uint64_t id;

    memcpy(&id, m->data, sizeof(id));
    api_status_reply(arg, m->data + sizeof(id), m->len - sizeof(id), id);
}

/* CHAN_API_PIPE and CHAN_API_EXIT: a run of api_verbs.c (api_run.c) */
static void
api_on_run(const struct chan_msg *m, void *arg)
{
    api_run_chan(arg, m);
}

static void
api_on_bad(const char *why, void *arg)
{
    (void)arg;
    log_warn("bad message from the master: %s", why);
}

/* The handlers of the API's end of the channel.  apiverbs adds its
 * commands (CHAN_API_PIPE, CHAN_API_EXIT) here. */
static const struct chan_side api_side = {
    .me = CHAN_API,
    .on = {
        [CHAN_STOP] = api_on_stop,
        [CHAN_PING] = api_on_ping,
        [CHAN_API_STATUS_REPLY] = api_on_status,
        [CHAN_API_PIPE] = api_on_run,
        [CHAN_API_EXIT] = api_on_run,
    },
    .bad = api_on_bad,
};

static void
api_chan_io(struct ev_loop *loop, int fd, unsigned ev, void *arg)
{
    struct api *a = arg;
    int         rc;

    (void)loop;
    (void)ev;
    rc = chan_serve(fd, &api_side, 32, a->chanbuf, sizeof(a->chanbuf), a);
    if (rc == CHAN_EOF || rc == CHAN_ESYS) {
        /* the master is gone: no one to serve for */
        ev_unwatch(a->loop, fd);
        api_run_master_gone(a);
        api_stop(a);
    }
}

/* ---- start ------------------------------------------------------------ */

static struct ssl_ctx_st *
api_tls_ctx(const struct config *cfg, char *err, size_t errsz)
{
    const char         *certs[1] = { cfg->api_tls_cert_file };
    const char         *keys[1] = { cfg->api_tls_key_file };
    struct net_tls_opts o = { certs, keys, 1, cfg->tls_min_version,
                              cfg->tls_ciphers, NULL };
    struct ssl_ctx_st  *ctx = net_tls_ctx(&o, err, errsz);

    if (ctx != NULL)
        net_tls_ctx_io(ctx);
    return ctx;
}

int
api_check(const struct config *cfg, char *err, size_t errsz)
{
    struct api_tokens *t;
    struct ssl_ctx_st *ctx;

    if (cfg->api_listen == NULL)
        return 0;
    if ((t = api_tokens_load(cfg->api_tokens_file, err, errsz)) == NULL)
        return -1;
    api_tokens_free(t);
    if (cfg->api_tls_cert_file != NULL) {
        char why[512];

        if ((ctx = api_tls_ctx(cfg, why, sizeof(why))) == NULL) {
            snprintf(err, errsz, "api.tls: %s", why);
            return -1;
        }
        net_tls_ctx_free(ctx);
    }
    return 0;
}

/* api_inject_setup - POST /v1/messages and its pool of connections to
 * the workers' injection socket (api/api_submit.h). */
static int
api_inject_setup(struct api *a, char *err, size_t errsz)
{
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];

    if (config_inject_path(a->cfg, path, sizeof(path)) < 0 ||
        api_submit_init(a->loop, path) < 0) {
        snprintf(err, errsz, "the injection socket next to %s: path too "
            "long", a->cfg->control_socket);
        return -1;
    }
    if (api_submit_routes(a) < 0) {
        snprintf(err, errsz, "POST /v1/messages: cannot add the route");
        return -1;
    }
    return 0;
}


struct api *
api_init(const struct api_args *args, char *err, size_t errsz)
{
    struct api *a = xcalloc(1, sizeof(*a));

    a->cfg = args->cfg;
    a->lfd = args->listen_fd;
    a->chan = args->chan_fd;
    if ((a->tokens = api_tokens_load(a->cfg->api_tokens_file, err,
        errsz)) == NULL)
        goto fail;
    if (a->cfg->api_tls_cert_file != NULL) {
        char why[512];

        if ((a->tls = api_tls_ctx(a->cfg, why, sizeof(why))) == NULL) {
            snprintf(err, errsz, "api.tls: %s", why);
            goto fail;
        }
    }
    if ((a->loop = ev_new()) == NULL) {
        snprintf(err, errsz, "event loop: %s", strerror(errno));
        goto fail;
    }
    ev_timer_init(&a->stop_timer, api_stop_expired, a);
    api_routes_core(a);
    api_verbs_routes(a);
    if (api_inject_setup(a, err, errsz) < 0)
        goto fail;
    return a;
fail:
    api_tokens_free(a->tokens);
    net_tls_ctx_free(a->tls);
    free(a);
    return NULL;
}

int
api_main(struct api *a)
{
    if (ev_watch(a->loop, a->chan, EV_READ, api_chan_io, a) < 0 ||
        ev_watch(a->loop, a->lfd, EV_READ, api_accept, a) < 0) {
        log_err("watch: %s", strerror(errno));
        return 1;
    }
    log_info("serving %s%s with %zu tokens", a->cfg->api_listen,
        a->tls != NULL ? " (TLS)" : "", api_tokens_count(a->tokens));
    ev_run(a->loop);
    while (a->clients != NULL)
        api_client_close(a->clients);
    api_submit_shutdown();
    log_flush();
    return 0;
}
