/*
 * api_submit_http.c - POST /v1/messages: a message and its envelope in
 * JSON, given to a worker over the injection socket (api_submit.c), and
 * answered 201 with the queue id only after the worker's 250.
 *
 * PURPOSE   The body (docs/API.md):
 *             {"from": "a@x", "to": ["b@y", {"address": "c@z",
 *              "notify": ["FAILURE"], "orcpt": "rfc822;c@z"}],
 *              "message": "<RFC 5322 text>" | "message_base64": "...",
 *              "notify": [...], "ret": "FULL"|"HDRS", "envid": "..."}
 *           A member not named here is a 400 (a typo must not be
 *           silently ignored); "pool" is a 422: the spool has no field
 *           for a per-message egress pool (routes choose it).
 *           The worker's answer maps to the HTTP status: 250 -> 201;
 *           refused with 4xx -> 429 (4.7.x: connection and rate limits,
 *           bans; quotas) or 503 (anything else temporary), both with
 *           Retry-After; 4.5.3 (too many recipients, too much envelope)
 *           and 5xx -> 422, 552 / 5.3.4 (size) -> 413, each error with the
 *           worker's reply ("smtp") and the refused "recipient"; no
 *           answer -> 503.  One admin record per request.
 * CONTRACT  The handler copies what the submission needs before it
 *           returns (api_submit_send() copies the envelope and the
 *           content), holds a reference on the HTTP client until done()
 *           and answers exactly once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/util.h"
#include "api/api_int.h"
#include "api/api_json.h"
#include "api/api_submit.h"

#define SUBH_MAX_RCPT    10000      /* the worker's max_recipients decides
                                       below this; this bounds memory */
#define SUBH_ENVID_MAX   100        /* RFC 3461 4.4 */
#define SUBH_RETRY_BUSY  "Retry-After: 5\r\n"
#define SUBH_RETRY_LIMIT "Retry-After: 30\r\n"

static struct api_submit *subh_pool;

struct subh_ctx {
    struct api        *a;
    struct api_client *c;
    struct api_req     req;         /* its pointers live while c is held */
    char               tname[80];   /* req.token_name points here */
    char               rcpt[512];   /* the refused one, if any */
    char             **addrs;       /* every recipient, for "recipient" */
    size_t             naddrs;
    size_t             body_len;
};


/* --- the request ------------------------------------------------------ */

/* subh_string - a member that must be a string without NUL bytes: its
 * value, or NULL (*bad set when present but not such a string). */
static const char *
subh_string(const struct api_json *v, int *bad)
{
    const char *s;
    size_t      n;

    if (v == NULL)
        return NULL;
    s = api_json_str(v, &n);
    if (s == NULL || strlen(s) != n) {
        *bad = 1;
        return NULL;
    }
    return s;
}


/* subh_notify - ["SUCCESS","FAILURE","DELAY"] (any of them) or
 * ["NEVER"]; 0 and *mask, or -1. */
static int
subh_notify(const struct api_json *v, unsigned *mask)
{
    size_t i, n = api_json_len(v);

    if (api_json_type(v) != API_JSON_ARR || n == 0)
        return -1;
    *mask = 0;
    for (i = 0; i < n; i++) {
        const char *s = api_json_str(api_json_at(v, i), NULL);

        if (s == NULL)
            return -1;
        if (strcasecmp(s, "NEVER") == 0)
            *mask |= API_NOTIFY_NEVER;
        else if (strcasecmp(s, "SUCCESS") == 0)
            *mask |= API_NOTIFY_SUCCESS;
        else if (strcasecmp(s, "FAILURE") == 0)
            *mask |= API_NOTIFY_FAILURE;
        else if (strcasecmp(s, "DELAY") == 0)
            *mask |= API_NOTIFY_DELAY;
        else
            return -1;
    }
    return (*mask & API_NOTIFY_NEVER) && *mask != API_NOTIFY_NEVER ? -1 : 0;
}


/* subh_b64 - standard base64 (RFC 4648 4), line breaks allowed, padding
 * optional; the bytes into out (room for n * 3 / 4 + 3).  Length or -1. */
static long
subh_b64(const char *s, size_t n, unsigned char *out)
{
    unsigned acc = 0, bits = 0;
    size_t   i, o = 0, pad = 0;

    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        unsigned      v;

        if (ch == '\r' || ch == '\n' || ch == ' ' || ch == '\t')
            continue;
        if (ch == '=') {
            pad++;
            continue;
        }
        if (pad > 0)
            return -1;              /* data after padding */
        if (ch >= 'A' && ch <= 'Z')
            v = ch - 'A';
        else if (ch >= 'a' && ch <= 'z')
            v = ch - 'a' + 26;
        else if (ch >= '0' && ch <= '9')
            v = ch - '0' + 52;
        else if (ch == '+')
            v = 62;
        else if (ch == '/')
            v = 63;
        else
            return -1;
        acc = (acc << 6) | v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (pad > 2 || bits >= 6)
        return -1;
    return (long)o;
}


/* subh_orcpt - "type;address" as given, or "rfc822;" + a bare address;
 * into buf. */
static const char *
subh_orcpt(const char *v, char *buf, size_t bufsz)
{
    if (strchr(v, ';') != NULL)
        util_strlcpy(buf, v, bufsz);
    else
        snprintf(buf, bufsz, "rfc822;%s", v);
    return buf;
}


struct subh_parsed {
    struct api_submit_msg   m;
    struct api_submit_rcpt *rcpt;
    char                  (*orcpt)[600];
    unsigned char          *decoded;      /* message_base64's bytes */
    char                    ret[8];
};


static void
subh_parsed_free(struct subh_parsed *p)
{
    free(p->rcpt);
    free(p->orcpt);
    free(p->decoded);
}


/* subh_rcpts - "to": addresses or {address, notify, orcpt}. */
static const char *
subh_rcpts(struct subh_parsed *p, const struct api_json *to, unsigned notify)
{
    size_t i, n = api_json_len(to);
    int    bad = 0;

    if (api_json_type(to) != API_JSON_ARR || n == 0)
        return "\"to\": expected a non-empty array";
    if (n > SUBH_MAX_RCPT)
        return "\"to\": too many recipients";
    p->rcpt = xcalloc(n, sizeof(*p->rcpt));
    p->orcpt = xcalloc(n, sizeof(*p->orcpt));
    for (i = 0; i < n; i++) {
        const struct api_json *e = api_json_at(to, i);
        struct api_submit_rcpt *r = &p->rcpt[i];

        r->notify = notify;
        if (api_json_type(e) == API_JSON_STR) {
            r->addr = subh_string(e, &bad);
        } else if (api_json_type(e) == API_JSON_OBJ) {
            const struct api_json *nv = api_json_get(e, "notify");
            const char            *o;
            size_t                 k;

            for (k = 0; k < api_json_len(e); k++) {
                const char *key = api_json_key(e, k);

                if (strcmp(key, "address") != 0 && strcmp(key, "notify") != 0
                    && strcmp(key, "orcpt") != 0)
                    return "\"to\": a recipient has an unknown member";
            }
            r->addr = subh_string(api_json_get(e, "address"), &bad);
            if (nv != NULL && subh_notify(nv, &r->notify) < 0)
                return "\"to\": bad \"notify\" (SUCCESS, FAILURE, DELAY, "
                    "or NEVER alone)";
            o = subh_string(api_json_get(e, "orcpt"), &bad);
            if (o != NULL)
                r->orcpt = subh_orcpt(o, p->orcpt[i], sizeof(p->orcpt[i]));
        } else {
            return "\"to\": each recipient is a string or an object";
        }
        if (bad || r->addr == NULL || r->addr[0] == '\0')
            return "\"to\": a recipient without an address";
    }
    p->m.rcpt = p->rcpt;
    p->m.nrcpt = n;
    return NULL;
}


static int
subh_known(const char *key)
{
    static const char *const keys[] = { "from", "to", "message",
        "message_base64", "notify", "ret", "envid", "pool" };
    size_t i;

    for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(key, keys[i]) == 0)
            return 1;
    return 0;
}


/* subh_parse - the body into p; NULL, or the 400's message. *status: a
 * status other than 400 for that message (422 for "pool"). */
static const char *
subh_parse(const struct api_json *root, struct subh_parsed *p, int *status)
{
    const struct api_json *v;
    const char            *s, *why;
    unsigned               notify = 0;
    size_t                 i, n;
    long                   k;
    int                    bad = 0;

    *status = 400;
    if (api_json_type(root) != API_JSON_OBJ)
        return "expected a JSON object";
    for (i = 0; i < api_json_len(root); i++)
        if (!subh_known(api_json_key(root, i)))
            return "unknown member (expected from, to, message or "
                "message_base64, notify, ret, envid)";
    if (api_json_get(root, "pool") != NULL) {
        *status = 422;
        return "\"pool\": not supported: the spool keeps no egress pool per "
            "message (a route's pool applies)";
    }
    p->m.from = subh_string(api_json_get(root, "from"), &bad);
    if (bad || p->m.from == NULL)
        return "\"from\": expected a string (\"\" for the null sender)";
    v = api_json_get(root, "notify");
    if (v != NULL && subh_notify(v, &notify) < 0)
        return "\"notify\": expected SUCCESS, FAILURE, DELAY, or NEVER alone";
    if ((why = subh_rcpts(p, api_json_get(root, "to"), notify)) != NULL)
        return why;
    s = subh_string(api_json_get(root, "ret"), &bad);
    if (bad || (s != NULL && strcasecmp(s, "FULL") != 0 &&
        strcasecmp(s, "HDRS") != 0))
        return "\"ret\": expected FULL or HDRS";
    if (s != NULL) {
        util_strlcpy(p->ret, strcasecmp(s, "FULL") == 0 ? "FULL" : "HDRS",
            sizeof(p->ret));
        p->m.ret = p->ret;
    }
    p->m.envid = subh_string(api_json_get(root, "envid"), &bad);
    if (bad || (p->m.envid != NULL && (p->m.envid[0] == '\0' ||
        strlen(p->m.envid) > SUBH_ENVID_MAX)))
        return "\"envid\": expected a string of 1 to 100 characters";
    v = api_json_get(root, "message");
    if (v != NULL && api_json_get(root, "message_base64") != NULL)
        return "give \"message\" or \"message_base64\", not both";
    if (v != NULL) {
        s = api_json_str(v, &n);
        if (s == NULL)
            return "\"message\": expected a string";
        p->m.body = (const unsigned char *)s;
        p->m.body_len = n;
        return NULL;
    }
    s = api_json_str(api_json_get(root, "message_base64"), &n);
    if (s == NULL)
        return "\"message\" or \"message_base64\" is required";
    p->decoded = xmalloc(n / 4 * 3 + 4);
    k = subh_b64(s, n, p->decoded);
    if (k < 0)
        return "\"message_base64\": not base64";
    p->m.body = p->decoded;
    p->m.body_len = (size_t)k;
    return NULL;
}


/* --- the answer ------------------------------------------------------- */

static void
subh_ctx_free(struct subh_ctx *x)
{
    size_t i;

    for (i = 0; i < x->naddrs; i++)
        free(x->addrs[i]);
    free(x->addrs);
    free(x);
}


/* subh_status - the HTTP status of a refusal, and its Retry-After. */
static int
subh_status(const struct api_submit_result *r, const char **hdrs)
{
    int code = r->reply.code;

    *hdrs = NULL;
    if (code >= 400 && code < 500) {
        if (strcmp(r->enhanced, "4.5.3") == 0)
            return 422;             /* split the message: no retry helps */
        if (strncmp(r->enhanced, "4.7.", 4) == 0 ||
            strstr(r->reply.text, "Quota exceeded") != NULL) {
            *hdrs = SUBH_RETRY_LIMIT;
            return 429;
        }
        *hdrs = SUBH_RETRY_BUSY;
        return 503;
    }
    if (code == 552 || strcmp(r->enhanced, "5.3.4") == 0)
        return 413;
    return 422;
}


static const char *const subh_stage[] = { "connect", "MAIL", "RCPT", "DATA",
    "end of data" };


static void
subh_refused(struct subh_ctx *x, const struct api_submit_result *r)
{
    struct buf    b;
    struct api_jw w;
    const char   *hdrs;
    int           status = subh_status(r, &hdrs);
    const char   *rcpt = NULL;

    if (r->stage == API_STAGE_RCPT && r->rcpt < x->naddrs)
        rcpt = x->addrs[r->rcpt];
    buf_init(&b);
    api_jw_init(&w, &b);
    api_jw_obj(&w);
    api_jw_key(&w, "smtp");
    api_jw_obj(&w);
    api_jw_kint(&w, "code", r->reply.code);
    api_jw_kstr(&w, "enhanced", r->enhanced);
    api_jw_kstr(&w, "text", r->reply.text);
    api_jw_obj_end(&w);
    if (rcpt != NULL)
        api_jw_kstr(&w, "recipient", rcpt);
    api_jw_obj_end(&w);
    buf_append(&b, "", 1);
    /* the members without the braces of the object they were written in */
    b.data[b.len - 2] = '\0';
    api_admin_log(x->a, x->c, &x->req, "action=inject args=nrcpt=%zu,"
        "size=%zu result=%d smtp=%d", x->naddrs, x->body_len, status,
        r->reply.code);
    api_reply_error_extra(x->c, status, hdrs, buf_head(&b) + 1,
        "the worker refused the message at %s%s%s", subh_stage[r->stage],
        rcpt != NULL ? " for a recipient" : "",
        r->stage == API_STAGE_CONTENT ? " (after the content)" : "");
    buf_free(&b);
}


static void
subh_done(void *arg, const struct api_submit_result *r)
{
    struct subh_ctx *x = arg;
    struct buf       b;
    struct api_jw    w;

    if (r->status == API_SUBMIT_OK) {
        buf_init(&b);
        api_jw_init(&w, &b);
        api_jw_obj(&w);
        api_jw_kstr(&w, "queue_id", r->queue_id);
        api_jw_obj_end(&w);
        api_admin_log(x->a, x->c, &x->req, "action=inject args=nrcpt=%zu,"
            "size=%zu result=201 queue_id=%s", x->naddrs, x->body_len,
            r->queue_id);
        api_reply(x->c, 201, buf_head(&b), buf_avail(&b));
        buf_free(&b);
    } else if (r->status == API_SUBMIT_REFUSED) {
        subh_refused(x, r);
    } else {
        api_admin_log(x->a, x->c, &x->req, "action=inject args=nrcpt=%zu,"
            "size=%zu result=503", x->naddrs, x->body_len);
        api_reply_error_extra(x->c, 503, SUBH_RETRY_BUSY, NULL, "%s: %s",
            r->stage == API_STAGE_CONTENT ? "the worker's answer to the "
            "message was lost (it may have been accepted)" :
            "the message was not accepted", r->why != NULL ? r->why :
            "no answer from the worker");
    }
    api_client_unref(x->c);
    subh_ctx_free(x);
}


static void
subh_on_messages(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    struct subh_parsed p;
    struct subh_ctx   *x;
    struct api_json   *root;
    struct api_req     rq;
    char               tname[80];
    const char        *why;
    int                status;
    size_t             i;

    (void)arg;
    if (subh_pool == NULL) {
        api_reply_error(c, 503, "injection is not available");
        return;
    }
    /* the record after an answer made elsewhere: the request dies with
     * that answer, so its token's name is kept first */
    rq = *r;
    util_strlcpy(tname, r->token_name != NULL ? r->token_name : "",
        sizeof(tname));
    rq.token_name = tname;
    if ((root = api_req_json(c, r)) == NULL) {
        api_admin_log(a, c, &rq, "action=inject result=bad_request");
        return;                     /* answered (400 or 415) */
    }
    memset(&p, 0, sizeof(p));
    if ((why = subh_parse(root, &p, &status)) != NULL) {
        api_admin_log(a, c, r, "action=inject result=%d", status);
        api_reply_error(c, status, "%s", why);
        goto out;
    }
    p.m.client = r->client;
    x = xcalloc(1, sizeof(*x));
    x->a = a;
    x->c = c;
    x->req = rq;
    memcpy(x->tname, tname, sizeof(x->tname));
    x->req.token_name = x->tname;
    x->body_len = p.m.body_len;
    x->naddrs = p.m.nrcpt;
    x->addrs = xcalloc(p.m.nrcpt, sizeof(*x->addrs));
    for (i = 0; i < p.m.nrcpt; i++)
        x->addrs[i] = xstrdup(p.m.rcpt[i].addr);
    api_client_ref(c);
    if (api_submit_send(subh_pool, &p.m, subh_done, x, &why) < 0) {
        api_admin_log(a, c, r, "action=inject result=400");
        api_reply_error(c, 400, "%s", why);
        api_client_unref(c);
        subh_ctx_free(x);
    }
out:
    subh_parsed_free(&p);
    api_json_free(root);
}


/* --- the process's part ----------------------------------------------- */

int
api_submit_init(struct ev_loop *loop, const char *path)
{
    api_submit_free(subh_pool);
    subh_pool = api_submit_new(loop, path);
    return subh_pool != NULL ? 0 : -1;
}


int
api_submit_routes(struct api *a)
{
    return api_route_add(a, API_POST, "/v1/messages", API_ROLE_INJECT,
        subh_on_messages, NULL);
}


void
api_submit_shutdown(void)
{
    api_submit_free(subh_pool);
    subh_pool = NULL;
}
