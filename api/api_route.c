/*
 * api_route.c - from a complete request to its handler: the bearer token,
 * the routing table, the role; the answers (JSON bodies, JSON errors);
 * the admin record; GET /v1/status.
 *
 * PURPOSE   Order of the checks: the token first (401 for any path, so
 *           an unauthenticated client learns nothing of the routes), then
 *           the route (404, or 405 with Allow), then the role (403).
 *           Every 401 and 403 is logged once (info) with the client's
 *           address; the token itself never is.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api_core.h"
#include "api/api_json.h"
#include "common/chan.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"

#define API_STATUS_TIMEOUT_MS 5000u

struct api_client *
api_req_client(const struct api_req *r)
{
    return (struct api_client *)(void *)((char *)(uintptr_t)r -
        offsetof(struct api_client, req));
}

/* ---- answers ---------------------------------------------------------- */

void
api_reply_hdrs(struct api_client *c, int status, const char *hdrs,
    const char *json, size_t len)
{
    struct buf *o = &c->out;

    if (c->dead || c->answered)
        return;
    c->answered = 1;
    buf_printf(o, "HTTP/1.1 %d %s\r\n", status, api_http_reason(status));
    if (status == 401)
        buf_printf(o, "WWW-Authenticate: Bearer realm=\"mtad\"\r\n");
    if (hdrs != NULL)
        buf_printf(o, "%s", hdrs);
    if (!c->keep_alive || c->a->stopping)
        buf_printf(o, "Connection: close\r\n");
    else if (c->head.minor == 0)
        buf_printf(o, "Connection: keep-alive\r\n");
    buf_printf(o, "Cache-Control: no-store\r\n");
    if (status == 204) {
        buf_printf(o, "\r\n");
    } else {
        /* a newline after the JSON: friendlier on a terminal (curl) */
        buf_printf(o, "Content-Type: application/json\r\n"
            "Content-Length: %zu\r\n\r\n", len + 1);
        buf_append(o, json, len);
        buf_append(o, "\n", 1);
    }
    log_debug("%s %s %s -> %d", c->peer_str, c->head.method_name,
        c->path[0] ? c->path : "-", status);
    api_client_send(c);
}

void
api_reply(struct api_client *c, int status, const char *json, size_t len)
{
    api_reply_hdrs(c, status, NULL, json, len);
}

static void
api_verror(struct api_client *c, int status, const char *hdrs,
    const char *extra, const char *fmt, va_list ap)
{
    char          msg[1024];
    struct buf    b;
    struct api_jw w;

    if (c->dead || c->answered)
        return;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    buf_init(&b);
    api_jw_init(&w, &b);
    api_jw_obj(&w);
    api_jw_key(&w, "error");
    api_jw_obj(&w);
    api_jw_kint(&w, "status", status);
    api_jw_kstr(&w, "message", msg);
    api_jw_obj_end(&w);
    api_jw_obj_end(&w);
    if (extra != NULL && extra[0] != '\0' && buf_avail(&b) >= 2) {
        /* members after "message": reopen the inner object */
        b.len -= 2;
        buf_printf(&b, ",%s}}", extra);
    }
    api_reply_hdrs(c, status, hdrs, buf_head(&b), buf_avail(&b));
    buf_free(&b);
}

void
api_reply_error(struct api_client *c, int status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    api_verror(c, status, NULL, NULL, fmt, ap);
    va_end(ap);
}

void
api_reply_error_extra(struct api_client *c, int status, const char *hdrs,
    const char *extra, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    api_verror(c, status, hdrs, extra, fmt, ap);
    va_end(ap);
}

/* ---- admin record ----------------------------------------------------- */

const char *
api_admin_arg(const char *s, size_t n, char *out, size_t outsz)
{
    static const char hex[] = "0123456789abcdef";
    size_t            o = 0;

    if (outsz == 0)
        return out;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (ch > 0x20 && ch < 0x7f && ch != '\\') {
            if (o + 1 >= outsz)
                break;
            out[o++] = (char)ch;
        } else {
            if (o + 4 >= outsz)
                break;
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
    return out;
}

void
api_admin_log(struct api *a, struct api_client *c, const struct api_req *r,
    const char *fmt, ...)
{
    char    what[1024], who[96], ip[64];
    va_list ap;

    (void)a;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(who, sizeof(who), "api:%s", r->token_name);
    util_sockaddr_ip((const struct sockaddr *)&c->peer, ip, sizeof(ip));
    /* the same "admin" record as mtactl's (master/audit.c), with who
     * and the client's address instead of a uid */
    log_event(LOGL_NOTICE, "admin", LOG_KVS(LKV_S("who", who),
        LKV_S("via", "api"), LKV_S("client", ip), LKV_S("args", what)),
        "admin %s from=%s %s", who, ip, what);
}

/* ---- query and path --------------------------------------------------- */

const char *
api_path_param(const struct api_req *r, const char *name)
{
    const struct api_client *c = api_req_client(r);
    size_t                   n = strlen(name);

    for (size_t i = 0; i < c->nparams; i++)
        if (c->pname_len[i] == n && memcmp(c->pname[i], name, n) == 0)
            return c->pval[i];
    return NULL;
}

const char *
api_query_get(const struct api_req *r, const char *name, char *buf,
    size_t bufsz)
{
    const char *q = r->query;
    size_t      n = strlen(name);

    while (*q != '\0') {
        size_t      len = strcspn(q, "&");
        const char *eq = memchr(q, '=', len);
        size_t      kl = eq ? (size_t)(eq - q) : len;
        char        key[128];

        if (api_http_unescape(q, kl, key, sizeof(key), 1) == 0 &&
            strlen(key) == n && memcmp(key, name, n) == 0) {
            if (eq == NULL) {
                if (bufsz == 0)
                    return NULL;
                buf[0] = '\0';
                return buf;
            }
            if (api_http_unescape(eq + 1, len - kl - 1, buf, bufsz, 1) < 0)
                return NULL;
            return buf;
        }
        q += len + (q[len] == '&');
    }
    return NULL;
}

struct api_json *
api_req_json(struct api_client *c, const struct api_req *r)
{
    struct api_json *v;
    char             err[128];
    size_t           tl = strcspn(r->content_type, "; \t");

    if (!(tl == 16 && strncasecmp(r->content_type, "application/json",
        16) == 0)) {
        api_reply_error(c, 415, "expected Content-Type: application/json");
        return NULL;
    }
    v = api_json_parse((const char *)r->body, r->body_len, err, sizeof(err));
    if (v == NULL)
        api_reply_error(c, 400, "malformed JSON: %s", err);
    return v;
}

/* ---- routing ---------------------------------------------------------- */

int
api_route_add(struct api *a, int method, const char *pattern, unsigned role,
    api_handler_fn *fn, void *arg)
{
    struct api_route *rt;

    if (a->nroutes >= API_MAX_ROUTES || pattern[0] != '/')
        return -1;
    rt = &a->routes[a->nroutes++];
    rt->method = method;
    rt->pattern = xstrdup(pattern);
    rt->role = role;
    rt->fn = fn;
    rt->arg = arg;
    return 0;
}

/* Whether path (raw, %-encoded) matches pattern; params into c. */
static int
api_match(struct api_client *c, const char *pattern, const char *path)
{
    const char *p = pattern, *s = path;
    char       *store = c->pseg;
    size_t      room = sizeof(c->pseg);

    c->nparams = 0;
    while (*p == '/' && *s == '/') {
        size_t pl, sl;

        p++, s++;
        pl = strcspn(p, "/");
        sl = strcspn(s, "/");
        if (p[0] == '{' && pl >= 2 && p[pl - 1] == '}') {
            if (sl == 0 || c->nparams >= API_MAX_PARAMS ||
                api_http_unescape(s, sl, store, room, 0) < 0)
                return 0;
            c->pname[c->nparams] = p + 1;
            c->pname_len[c->nparams] = pl - 2;
            c->pval[c->nparams++] = store;
            room -= strlen(store) + 1;
            store += strlen(store) + 1;
        } else if (pl != sl || memcmp(p, s, pl) != 0) {
            return 0;
        }
        p += pl;
        s += sl;
    }
    return *p == '\0' && *s == '\0';
}

static const char *
api_method_name(int m)
{
    switch (m) {
    case API_GET:    return "GET";
    case API_POST:   return "POST";
    case API_PUT:    return "PUT";
    case API_DELETE: return "DELETE";
    default:         return "?";
    }
}

/* Refusals are logged, but a client hammering with bad tokens must not
 * fill the log: at most API_REFUSED_PER_S lines a second, then one line
 * with the count of those left out. */
#define API_REFUSED_PER_S 20u

static int
api_refusal_loggable(struct api *a)
{
    uint64_t sec = ev_now(a->loop) / 1000;

    if (sec != a->refused_sec) {
        if (a->refused_skipped > 0)
            log_info("%u more refused requests not logged (at most %u "
                "a second)", a->refused_skipped, API_REFUSED_PER_S);
        a->refused_sec = sec;
        a->refused_n = 0;
        a->refused_skipped = 0;
    }
    if (a->refused_n++ < API_REFUSED_PER_S)
        return 1;
    a->refused_skipped++;
    return 0;
}

/* The token of the head; 0, or -1 after answering 401. */
int
api_precheck(struct api *a, struct api_client *c)
{
    const char *v = c->head.auth, *name;
    unsigned    roles;
    size_t      n;

    if (c->req.token_name != NULL)
        return 0;                       /* done for this request */
    if (strncasecmp(v, "Bearer ", 7) != 0) {
        if (api_refusal_loggable(a))
            log_info("%s: 401 (no bearer token)", c->peer_str);
        c->keep_alive = 0;
        c->state = API_C_HANDLER;
        api_reply_error(c, 401, "missing bearer token");
        return -1;
    }
    v += 7;
    v += strspn(v, " ");
    n = strlen(v);
    if (api_tokens_check(a->tokens, v, n, &name, &roles) < 0) {
        if (api_refusal_loggable(a))
            log_info("%s: 401 (unknown token)", c->peer_str);
        c->keep_alive = 0;
        c->state = API_C_HANDLER;
        api_reply_error(c, 401, "invalid token");
        return -1;
    }
    c->req.token_name = name;
    c->req.roles = roles;
    return 0;
}

/* api_route_call - the handler; what it answered goes out after it
 * returned (a handler may log from r after its api_reply()). */
static void
api_route_call(struct api *a, struct api_client *c, struct api_route *rt)
{
    c->in_handler = 1;
    rt->fn(a, c, &c->req, rt->arg);
    c->in_handler = 0;
    if (c->send_pending) {
        c->send_pending = 0;
        api_client_send(c);
    }
}

void
api_route_request(struct api *a, struct api_client *c)
{
    struct api_req *r = &c->req;
    const char     *target = c->head.target, *q;
    char            allow[64] = "";
    size_t          pl;

    if (c->answered)
        return;                         /* answered at the head (401) */
    if (api_precheck(a, c) < 0)
        return;
    q = strchr(target, '?');
    pl = q != NULL ? (size_t)(q - target) : strlen(target);
    r->method = c->head.method;
    r->query = q != NULL ? q + 1 : "";
    r->body = (const unsigned char *)buf_head(&c->in) + c->head.head_len;
    r->body_len = (size_t)c->head.content_length;
    r->content_type = c->head.content_type;
    r->client = &c->peer;
    r->path = c->path;
    if (api_http_unescape(target, pl, c->path, sizeof(c->path), 0) < 0) {
        api_reply_error(c, 400, "bad %%-escape in the path");
        return;
    }
    {
        char raw[API_MAX_TARGET + 1];

        memcpy(raw, target, pl);
        raw[pl] = '\0';
        for (size_t i = 0; i < a->nroutes; i++) {
            struct api_route *rt = &a->routes[i];

            if (!api_match(c, rt->pattern, raw))
                continue;
            if (rt->method != r->method) {
                if (strstr(allow, api_method_name(rt->method)) == NULL)
                    snprintf(allow + strlen(allow), sizeof(allow) -
                        strlen(allow), "%s%s", allow[0] ? ", " : "",
                        api_method_name(rt->method));
                continue;
            }
            if ((rt->role & r->roles) != rt->role) {
                if (api_refusal_loggable(a))
                    log_info("%s: 403 %s %s for token %s", c->peer_str,
                    api_method_name(r->method), c->path, r->token_name);
                api_reply_error(c, 403, "token %s lacks the role this "
                    "needs", r->token_name);
                return;
            }
            api_route_call(a, c, rt);
            return;
        }
    }
    if (allow[0] != '\0') {
        char hdr[96];

        snprintf(hdr, sizeof(hdr), "Allow: %s\r\n", allow);
        api_reply_error_extra(c, 405, hdr, NULL, "method %s not allowed "
            "here", c->head.method_name);
        return;
    }
    api_reply_error(c, 404, "no such resource");
}

/* ---- /v1/status ------------------------------------------------------- */

static void
api_status_timeout(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct api_client *c = arg;

    (void)loop;
    (void)t;
    c->status_id = 0;
    api_reply_error(c, 504, "the master did not answer");
}

static void
api_get_status(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    uint64_t id = ++a->status_seq;

    (void)r;
    (void)arg;
    if (chan_send(a->chan, CHAN_API_STATUS, &id, sizeof(id), -1) < 0) {
        api_reply_error(c, 503, "the master's channel is busy");
        return;
    }
    c->status_id = id;
    ev_timer_init(&c->wait, api_status_timeout, c);
    ev_timer_start(a->loop, &c->wait, API_STATUS_TIMEOUT_MS);
}

void
api_status_reply(struct api *a, const char *json, size_t n, uint64_t id)
{
    struct api_client *c;

    for (c = a->clients; c != NULL; c = c->next) {
        if (c->status_id != id || id == 0)
            continue;
        c->status_id = 0;
        ev_timer_stop(a->loop, &c->wait);
        if (n >= 3 && memcmp(json, "ok\n", 3) == 0)
            json += 3, n -= 3;
        while (n > 0 && (json[n - 1] == '\n' || json[n - 1] == ' '))
            n--;
        api_reply(c, 200, json, n);
        return;
    }
}

/* ---- the test route (MTAD_API_TEST=1 only) ---------------------------- */

/* Writes v again with the writer: what the parser understood. */
static void
api_echo_value(struct api_jw *w, const struct api_json *v)
{
    size_t  n;
    int64_t i;

    switch (api_json_type(v)) {
    case API_JSON_OBJ:
        api_jw_obj(w);
        for (size_t k = 0; k < api_json_len(v); k++) {
            api_jw_key(w, api_json_key(v, k));
            api_echo_value(w, api_json_at(v, k));
        }
        api_jw_obj_end(w);
        break;
    case API_JSON_ARR:
        api_jw_arr(w);
        for (size_t k = 0; k < api_json_len(v); k++)
            api_echo_value(w, api_json_at(v, k));
        api_jw_arr_end(w);
        break;
    case API_JSON_STR: {
        const char *s = api_json_str(v, &n);

        api_jw_strn(w, s, n);
        break;
    }
    case API_JSON_NUM:
        if (api_json_int(v, &i) == 0)
            api_jw_int(w, i);
        else
            api_jw_num(w, api_json_num(v));
        break;
    case API_JSON_TRUE:
    case API_JSON_FALSE:
        api_jw_bool(w, api_json_bool(v));
        break;
    default:
        api_jw_null(w);
        break;
    }
}

/* POST /v1/test/echo: the body parsed and written again, and one admin
 * record ("action=test-echo args=<the \"note\" member> result=ok"), so
 * the tests reach the parser, the writer and the admin log without the
 * verbs.  Never registered unless MTAD_API_TEST=1 was in the master's
 * environment at its start. */
static void
api_post_echo(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    struct api_json *v = api_req_json(c, r);
    struct buf       b;
    struct api_jw    w;
    char             note[256];
    const char      *s;
    size_t           n;

    (void)arg;
    if (v == NULL)
        return;
    s = api_json_str(api_json_get(v, "note"), &n);
    api_admin_log(a, c, r, "action=test-echo args=%s result=ok",
        s != NULL ? api_admin_arg(s, n, note, sizeof(note)) : "-");
    buf_init(&b);
    api_jw_init(&w, &b);
    api_echo_value(&w, v);
    api_reply(c, 200, buf_head(&b), buf_avail(&b));
    buf_free(&b);
    api_json_free(v);
}

void
api_routes_core(struct api *a)
{
    const char *t = getenv("MTAD_API_TEST");

    (void)api_route_add(a, API_GET, "/v1/status", API_ROLE_READ,
        api_get_status, NULL);
    if (t != NULL && strcmp(t, "1") == 0)
        (void)api_route_add(a, API_POST, "/v1/test/echo", API_ROLE_OPERATE,
            api_post_echo, NULL);
}
