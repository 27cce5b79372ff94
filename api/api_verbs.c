/*
 * api_verbs.c - the HTTP routes of the queue, routes, TLS policy and
 * shaping verbs: each request becomes one mtactl command line that the
 * master runs (api_run.c, master/api_run.c), and mtactl's output becomes
 * the answer.
 *
 * PURPOSE   mtactl stays the one implementation of every verb (its spool
 *           locks, its checks, its kicks of the workers); this file only
 *           says which command line a request means and what the answer
 *           is.  Reads pass mtactl's --json output through, checked to be
 *           one JSON document (api_json_parse); changes answer a small
 *           object built here and write one admin record each (success
 *           or failure: api_admin_log()).
 * INPUT     Every path parameter, query value and body member is checked
 *           here before it becomes an argument (queue ids, route keys,
 *           levels, durations, states, counts), so a bad request is a 400
 *           naming what is wrong; the master checks the command line once
 *           more against its own table (master/api_argv.c).
 * STATUS    mtactl's exit: 0 ok; 2 usage (400); 1 failed: 404 when it says
 *           the thing does not exist ("no such message", "not found",
 *           "no entry", "no TLS policy for", "no such key"), 502 when
 *           it could not reach mtad, else 409 (queue changes: e.g. still
 *           being delivered) or 422 (a table change mtactl refused: a bad
 *           route).  Not run: 503 (busy, master
 *           gone, no runner; Retry-After), 504 (timed out), 400
 *           (refused).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/util.h"
#include "api/api_int.h"
#include "api/api_json.h"
#include "api/api_verbs.h"

#define VERB_LIMIT_DEFAULT "100"
#define VERB_LIMIT_MAX     1000
#define VERB_ARGS          24

/* What the answer is made of. */
enum verb_kind {
    VK_JSON,            /* mtactl's JSON, as it is */
    VK_JSON_FOUND,      /* the same, 404 when mtactl exits 1 with JSON */
    VK_CHANGE,          /* a change of one named thing */
    VK_BULK,            /* a change by filter: ids and count */
    VK_IMPORT,          /* route import: the count */
};

struct verb_ctx {
    struct api             *a;
    struct api_client      *c;
    enum verb_kind          kind;
    int                     queue;      /* a queue verb: 409, not 422 */
    char                    action[32];
    char                    what[300];  /* the object: id, key, site */
    char                    args[600];  /* for the admin record, escaped */
    char                    token[96];
    struct sockaddr_storage client;
    int                     has_client;
    char                    extra[300]; /* JSON members of the answer */
};


/* ---- checks ----------------------------------------------------------- */

static int
verb_chars(const char *s, size_t lo, size_t hi, const char *set)
{
    size_t n = s != NULL ? strlen(s) : 0;

    return n >= lo && n <= hi && (set == NULL || strspn(s, set) == n);
}

#define ID_CHARS  "0123456789ABCDEFabcdefGHIJKLMNOPQRSTUVWXYZ" \
                  "ghijklmnopqrstuvwxyz"
#define DUR_CHARS "0123456789smhdw"

static int
verb_id_ok(const char *s)
{
    return verb_chars(s, 1, 32, ID_CHARS);
}

/* A route key, domain or site: printable, no blank, not an option. */
static int
verb_key_ok(const char *s, size_t max)
{
    if (!verb_chars(s, 1, max, NULL) || s[0] == '-')
        return 0;
    for (; *s; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s >= 0x7f)
            return 0;
    return 1;
}

static int
verb_text_ok(const char *s)
{
    if (!verb_chars(s, 1, 255, NULL) || s[0] == '-')
        return 0;
    for (; *s; s++)
        if ((unsigned char)*s < ' ' || (unsigned char)*s == 0x7f)
            return 0;
    return 1;
}

static int
verb_dur_ok(const char *s)
{
    return verb_chars(s, 1, 16, DUR_CHARS) && s[0] >= '0' && s[0] <= '9';
}

static int
verb_state_ok(const char *s)
{
    return s != NULL && (strcmp(s, "queued") == 0 ||
        strcmp(s, "active") == 0 || strcmp(s, "deferred") == 0 ||
        strcmp(s, "held") == 0);
}


/* ---- answers ---------------------------------------------------------- */

/* verb_err_text - mtactl's stderr made a message: "mtactl: " cut, lines
 * joined, at most outsz. */
static const char *
verb_err_text(const char *err, size_t n, char *out, size_t outsz)
{
    size_t o = 0;

    while (n > 0 && o + 1 < outsz) {
        if (n >= 8 && memcmp(err, "mtactl: ", 8) == 0) {
            err += 8;
            n -= 8;
            continue;
        }
        if (*err == '\n') {
            if (n > 1 && o > 0 && o + 2 < outsz) {
                out[o++] = ';';
                out[o++] = ' ';
            }
        } else
            out[o++] = *err;
        err++;
        n--;
    }
    out[o] = '\0';
    return o > 0 ? out : "failed";
}


/* verb_admin - the admin record of a change. */
static void
verb_admin(struct verb_ctx *x, const char *result)
{
    struct api_req r;

    if (x->kind == VK_JSON || x->kind == VK_JSON_FOUND)
        return;
    memset(&r, 0, sizeof(r));
    r.token_name = x->token;
    r.client = x->has_client ? &x->client : NULL;
    api_admin_log(x->a, x->c, &r, "action=%s args=%s result=%s", x->action,
        x->args, result);
}


/* verb_json_out - mtactl's JSON output answered as it is, once it parses
 * (an mtactl bug never becomes half a document). */
static void
verb_json_out(struct verb_ctx *x, int status, const char *out, size_t n)
{
    struct api_json *j;
    char             err[128];

    if ((j = api_json_parse(out, n, err, sizeof(err))) == NULL) {
        api_reply_error(x->c, 502, "mtactl's output is not JSON: %s", err);
        return;
    }
    api_json_free(j);
    api_reply(x->c, status, out, n);
}


/* verb_lines - the ids of "ID: what" lines of out, and the count of the
 * "-- VERB: N messages" line, as JSON members. */
static void
verb_bulk_out(struct verb_ctx *x, const char *out, const char *err,
    size_t err_n)
{
    struct buf    b;
    struct api_jw w;
    const char   *p = out, *count;
    char          msg[1024];
    unsigned long n = 0;

    buf_init(&b);
    api_jw_init(&w, &b);
    api_jw_obj(&w);
    api_jw_kstr(&w, "action", x->action);
    api_jw_key(&w, "ids");
    api_jw_arr(&w);
    while (*p != '\0') {
        size_t len = strcspn(p, "\n"), id = strcspn(p, ":");

        if (id < len && id > 0 && id <= 32 && strspn(p, ID_CHARS) == id)
            api_jw_strn(&w, p, id);
        p += len + (p[len] == '\n');
    }
    api_jw_arr_end(&w);
    if ((count = strstr(out, "-- ")) != NULL &&
        (count = strchr(count, ':')) != NULL)
        n = strtoul(count + 1, NULL, 10);
    api_jw_kint(&w, "count", (int64_t)n);
    if (err_n > 0)
        api_jw_kstr(&w, "errors", verb_err_text(err, err_n, msg,
            sizeof(msg)));
    api_jw_obj_end(&w);
    api_reply(x->c, 200, buf_head(&b), buf_avail(&b));
    buf_free(&b);
}


/* verb_change_out - {"action", <extra members>, "result": stdout}. */
static void
verb_change_out(struct verb_ctx *x, const char *out, size_t n)
{
    struct buf    b;
    struct api_jw w;

    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' '))
        n--;
    buf_init(&b);
    api_jw_init(&w, &b);
    api_jw_obj(&w);
    api_jw_kstr(&w, "action", x->action);
    if (x->extra[0] != '\0')
        api_jw_raw(&w, x->extra, strlen(x->extra));
    if (x->kind == VK_IMPORT) {
        const char *num = strstr(out, "imported ");

        api_jw_kint(&w, "imported", num != NULL ?
            (int64_t)strtoul(num + 9, NULL, 10) : 0);
    }
    api_jw_key(&w, "result");
    api_jw_strn(&w, out, n);
    api_jw_obj_end(&w);
    api_reply(x->c, 200, buf_head(&b), buf_avail(&b));
    buf_free(&b);
}


/* verb_failed - mtactl exited 1 or 2 (or did not run): the error. */
static void
verb_failed(struct verb_ctx *x, int status, const char *err, size_t n)
{
    char msg[1024];
    int  code;

    verb_err_text(err, n, msg, sizeof(msg));
    if (status == API_RUN_NOT_RUN)
        code = strncmp(msg, "busy", 4) == 0 ||
            strstr(msg, "master is gone") != NULL ||
            strstr(msg, "runner") != NULL ? 503 :
            strstr(msg, "did not finish") != NULL ? 504 : 400;
    else if (status == API_RUN_TOO_BIG)
        code = 502;
    else if (status == 2)
        code = 400;
    else if (status != 1)
        code = 500;
    else if (strstr(msg, "no such message") != NULL ||
        strstr(msg, "not found") != NULL || strstr(msg, "no entry") != NULL ||
        strstr(msg, "no TLS policy for") != NULL ||
        strstr(msg, "no such key") != NULL)
        code = 404;
    else if (strstr(msg, "cannot connect") != NULL ||
        strstr(msg, "is mtad running") != NULL)
        code = 502;
    else
        code = x->queue ? 409 : 422;
    if (status == API_RUN_TOO_BIG)
        snprintf(msg, sizeof(msg), "the answer is larger than %zu bytes",
            API_RUN_OUT_MAX);
    else if (status >= 128)
        snprintf(msg, sizeof(msg), "mtactl ended by signal %d", status - 128);
    if (code == 503)
        api_reply_error_extra(x->c, code, "Retry-After: 1\r\n", NULL, "%s",
            msg);
    else
        api_reply_error(x->c, code, "%s", msg);
}


static void
verb_done(void *arg, int status, const char *out, size_t out_n,
    const char *err, size_t err_n)
{
    struct verb_ctx *x = arg;
    char             result[32];

    snprintf(result, sizeof(result), status == 0 ? "ok" : "failed:%d",
        status);
    if (api_client_alive(x->c))
        verb_admin(x, result);
    else
        verb_admin(x, status == 0 ? "ok-client-gone" : result);
    if (status == 0 && (x->kind == VK_JSON || x->kind == VK_JSON_FOUND))
        verb_json_out(x, 200, out, out_n);
    else if (status == 1 && x->kind == VK_JSON_FOUND && out_n > 0 &&
        out[0] == '{')
        verb_json_out(x, 404, out, out_n);  /* {"route":null...}: none */
    else if (status == 0 && x->kind == VK_BULK)
        verb_bulk_out(x, out, err, err_n);
    else if (status == 0)
        verb_change_out(x, out, out_n);
    else
        verb_failed(x, status, err, err_n);
    api_client_unref(x->c);
    free(x);
}


/* ---- running ---------------------------------------------------------- */

static struct verb_ctx *
verb_ctx_new(struct api *a, struct api_client *c, const struct api_req *r,
    enum verb_kind kind, const char *action)
{
    struct verb_ctx *x = xcalloc(1, sizeof(*x));

    x->a = a;
    x->c = c;
    x->kind = kind;
    util_strlcpy(x->action, action, sizeof(x->action));
    util_strlcpy(x->token, r->token_name != NULL ? r->token_name : "?",
        sizeof(x->token));
    if (r->client != NULL) {
        x->client = *r->client;
        x->has_client = 1;
    }
    return x;
}


/* verb_actor - "api:NAME from=ADDR" in printable ASCII. */
static void
verb_actor(const struct verb_ctx *x, char *out, size_t outsz)
{
    char addr[80] = "?";

    if (x->has_client)
        util_sockaddr_str((const struct sockaddr *)&x->client, addr,
            sizeof(addr));
    snprintf(out, outsz, "api:%.60s from=%s", x->token, addr);
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < ' ' || (unsigned char)*p >= 0x7f)
            *p = '?';
}


/* verb_go - run argv (NULL-terminated) for x; answers on failure. */
static void
verb_go(struct verb_ctx *x, char **argv, const void *in, size_t n)
{
    char actor[CHAN_API_ACTOR_MAX];
    char tmp[256];
    size_t o = 0;

    for (size_t i = 0; argv[i] != NULL && o + 8 < sizeof(x->args); i++) {
        api_admin_arg(argv[i], strlen(argv[i]), tmp, sizeof(tmp));
        o += (size_t)snprintf(x->args + o, sizeof(x->args) - o, "%s%s",
            i ? "," : "", tmp);
    }
    verb_actor(x, actor, sizeof(actor));
    api_client_ref(x->c);
    if (api_run_as(x->a, actor, argv, in, n, verb_done, x) == 0)
        return;
    verb_admin(x, "not-run");
    if (errno == EMSGSIZE)
        api_reply_error(x->c, 413, "the request is too large for one "
            "command");
    else
        api_reply_error_extra(x->c, 503, "Retry-After: 1\r\n", NULL,
            "%s", errno == EBUSY ? "busy: too many commands running" :
            "the master cannot take the command now");
    api_client_unref(x->c);
    free(x);
}


/* verb_argv - a builder of a NULL-terminated argv. */
struct verb_argv {
    char *v[VERB_ARGS + 1];
    int   n;
};

static void
verb_push(struct verb_argv *av, const char *s)
{
    if (av->n < VERB_ARGS)
        av->v[av->n++] = (char *)(uintptr_t)s;
    av->v[av->n] = NULL;
}


/* verb_filters - from, to, state, older_than (query or JSON values,
 * through get) as mtactl's options; 0, or -1 after a 400. */
static int
verb_filter(struct api_client *c, struct verb_argv *av, const char *name,
    const char *v)
{
    static const struct { const char *name, *opt; } map[] = {
        { "from", "--from" }, { "to", "--to" }, { "state", "--state" },
        { "older_than", "--older-than" },
    };

    for (size_t i = 0; i < ARRAY_LEN(map); i++) {
        if (strcmp(name, map[i].name) != 0)
            continue;
        if (v == NULL)
            return 0;
        if ((i == 2 && !verb_state_ok(v)) || (i == 3 && !verb_dur_ok(v)) ||
            (i < 2 && !verb_text_ok(v))) {
            api_reply_error(c, 400, "%s: %s", name, i == 2 ? "expected "
                "queued, active, deferred or held" : i == 3 ? "expected a "
                "duration like 30m or 2d" : "expected 1 to 255 printable "
                "characters, not starting with '-'");
            return -1;
        }
        verb_push(av, map[i].opt);
        verb_push(av, v);
        return 0;
    }
    api_reply_error(c, 400, "filter: unknown member '%.40s' (from, to, "
        "state, older_than)", name);
    return -1;
}



/* ---- the queue -------------------------------------------------------- */

/* GET /v1/queue?from=&to=&state=&older_than=&limit=&after= */
static void
verb_queue_list(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    static const char *const filters[] = { "from", "to", "state",
                                           "older_than" };
    char             val[4][256], lim[16], after[40];
    struct verb_argv av = { .n = 0 };
    const char      *v;

    (void)arg;
    verb_push(&av, "queue");
    verb_push(&av, "--json");
    for (size_t i = 0; i < ARRAY_LEN(filters); i++)
        if (verb_filter(c, &av, filters[i], api_query_get(r, filters[i],
            val[i], sizeof(val[i]))) < 0)
            return;
    v = api_query_get(r, "limit", lim, sizeof(lim));
    if (v == NULL)
        v = VERB_LIMIT_DEFAULT;
    if (!verb_chars(v, 1, 4, "0123456789") || atoi(v) < 1 ||
        atoi(v) > VERB_LIMIT_MAX) {
        api_reply_error(c, 400, "limit: expected 1 to %d", VERB_LIMIT_MAX);
        return;
    }
    verb_push(&av, "--limit");
    verb_push(&av, v);
    if ((v = api_query_get(r, "after", after, sizeof(after))) != NULL) {
        if (!verb_id_ok(v)) {
            api_reply_error(c, 400, "after: expected a queue id");
            return;
        }
        verb_push(&av, "--after");
        verb_push(&av, v);
    }
    verb_go(verb_ctx_new(a, c, r, VK_JSON, "queue"), av.v, NULL, 0);
}


/* GET /v1/queue/{id} */
static void
verb_queue_show(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    const char *id = api_path_param(r, "id");
    char       *argv[] = { "show", NULL, "--json", NULL };

    (void)arg;
    if (!verb_id_ok(id)) {
        api_reply_error(c, 400, "not a queue id");
        return;
    }
    argv[1] = (char *)(uintptr_t)id;
    verb_go(verb_ctx_new(a, c, r, VK_JSON, "show"), argv, NULL, 0);
}


/* POST /v1/queue/{id}/{hold,release,flush,bounce}, DELETE /v1/queue/{id}:
 * arg is mtactl's verb. */
static void
verb_queue_change(struct api *a, struct api_client *c,
    const struct api_req *r, void *arg)
{
    const char      *id = api_path_param(r, "id");
    char            *argv[] = { arg, NULL, NULL };
    struct verb_ctx *x;

    if (!verb_id_ok(id)) {
        api_reply_error(c, 400, "not a queue id");
        return;
    }
    argv[1] = (char *)(uintptr_t)id;
    x = verb_ctx_new(a, c, r, VK_CHANGE, arg);
    x->queue = 1;
    snprintf(x->extra, sizeof(x->extra), "\"id\":\"%s\"", id);
    verb_go(x, argv, NULL, 0);
}


/* POST /v1/queue/actions {"action": "hold", "filter": {...}}: the
 * by-filter form (mtactl VERB --all [filters]); "filter" must be given,
 * {} meaning every message. */
static void
verb_queue_actions(struct api *a, struct api_client *c,
    const struct api_req *r, void *arg)
{
    static const char *const actions[] = { "hold", "release", "flush",
                                           "bounce", "delete" };
    struct api_json       *j;
    const struct api_json *f;
    struct verb_argv       av = { .n = 0 };
    struct verb_ctx       *x;
    const char            *act = NULL, *s;
    size_t                 i, len;

    (void)arg;
    if ((j = api_req_json(c, r)) == NULL)
        return;
    for (i = 0; i < api_json_len(j); i++) {
        const char *k = api_json_key(j, i);

        if (k != NULL && strcmp(k, "action") != 0 && strcmp(k, "filter") != 0)
            break;
    }
    s = api_json_str(api_json_get(j, "action"), &len);
    for (size_t k = 0; s != NULL && k < ARRAY_LEN(actions); k++)
        if (strcmp(s, actions[k]) == 0)
            act = actions[k];
    f = api_json_get(j, "filter");
    if (api_json_type(j) != API_JSON_OBJ || i < api_json_len(j) ||
        act == NULL || api_json_type(f) != API_JSON_OBJ) {
        api_reply_error(c, 400, "expected {\"action\": hold|release|flush|"
            "bounce|delete, \"filter\": {from, to, state, older_than}} "
            "({} : every message)");
        api_json_free(j);
        return;
    }
    verb_push(&av, act);
    verb_push(&av, "--all");
    for (i = 0; i < api_json_len(f); i++) {
        const char *v = api_json_str(api_json_at(f, i), &len);

        if (v == NULL || len != strlen(v)) {
            api_reply_error(c, 400, "filter: %.40s: expected a string",
                api_json_key(f, i));
            api_json_free(j);
            return;
        }
        if (verb_filter(c, &av, api_json_key(f, i), v) < 0) {
            api_json_free(j);
            return;
        }
    }
    x = verb_ctx_new(a, c, r, VK_BULK, act);
    x->queue = 1;
    verb_go(x, av.v, NULL, 0);      /* copied into the message: j may go */
    api_json_free(j);
}


/* ---- routes and TLS policy -------------------------------------------- */

/* GET /v1/routes, GET /v1/tls/policy, GET /v1/shaping: arg is the
 * command line, words split by blanks */
static void
verb_list(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    char              line[64], *save = NULL;
    struct verb_argv  av = { .n = 0 };

    util_strlcpy(line, arg, sizeof(line));
    for (char *w = strtok_r(line, " ", &save); w != NULL;
        w = strtok_r(NULL, " ", &save))
        verb_push(&av, w);
    verb_go(verb_ctx_new(a, c, r, VK_JSON, av.v[0]), av.v, NULL, 0);
}


/* GET /v1/routes/{key} (the lookup: what mail to KEY gets, and the key
 * that matched), GET /v1/tls/policy/{domain} (its own entry) */
static void
verb_get(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    int         tls = arg != NULL;
    const char *key = api_path_param(r, tls ? "domain" : "key");
    char       *rv[] = { "route", "get", NULL, "--json", NULL };
    char       *tv[] = { "tls", "policy", "get", NULL, "--json", NULL };

    if (!verb_key_ok(key, 255)) {
        api_reply_error(c, 400, "%s: expected 1 to 255 printable "
            "characters, no blank, not starting with '-'", tls ? "domain" :
            "key");
        return;
    }
    rv[2] = tv[3] = (char *)(uintptr_t)key;
    verb_go(verb_ctx_new(a, c, r, VK_JSON_FOUND, tls ? "tls_policy_get" :
        "route_get"), tls ? tv : rv, NULL, 0);
}


/* PUT /v1/routes/{key} {"route": "smtp:[192.0.2.1]:25"}, PUT
 * /v1/tls/policy/{domain} {"level": "verify"} */
static void
verb_put(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    int              tls = arg != NULL;
    const char      *key = api_path_param(r, tls ? "domain" : "key");
    const char      *member = tls ? "level" : "route", *v;
    char            *rv[] = { "route", "add", NULL, NULL, NULL };
    char            *tv[] = { "tls", "policy", "set", NULL, NULL, NULL };
    struct api_json *j;
    struct verb_ctx *x;
    size_t           len;

    if (!verb_key_ok(key, 255)) {
        api_reply_error(c, 400, "%s: expected 1 to 255 printable "
            "characters, no blank, not starting with '-'", tls ? "domain" :
            "key");
        return;
    }
    if ((j = api_req_json(c, r)) == NULL)
        return;
    v = api_json_str(api_json_get(j, member), &len);
    if (api_json_len(j) != 1 || v == NULL || len != strlen(v) ||
        !verb_text_ok(v) || v[0] == '-' || len > 1024 ||
        (!tls && strncasecmp(v, "maildir:", 8) == 0)) {
        api_reply_error(c, 400, "expected {\"%s\": \"...\"} (printable, not "
            "starting with '-'%s)", member, tls ? "" : "; no maildir: "
            "routes over the API");
        api_json_free(j);
        return;
    }
    x = verb_ctx_new(a, c, r, VK_CHANGE, tls ? "tls_policy_set" :
        "route_add");
    /* the answer's members, escaped by the writer */
    {
        struct buf    b;
        struct api_jw w;

        buf_init(&b);
        api_jw_init(&w, &b);
        api_jw_obj(&w);
        api_jw_kstr(&w, tls ? "domain" : "key", key);
        api_jw_kstr(&w, member, v);
        api_jw_obj_end(&w);
        if (buf_avail(&b) - 2 < sizeof(x->extra)) {
            memcpy(x->extra, buf_head(&b) + 1, buf_avail(&b) - 2);
            x->extra[buf_avail(&b) - 2] = '\0';
        }
        buf_free(&b);
    }
    rv[2] = tv[3] = (char *)(uintptr_t)key;
    rv[3] = tv[4] = (char *)(uintptr_t)v;
    verb_go(x, tls ? tv : rv, NULL, 0);
    api_json_free(j);
}


/* DELETE /v1/routes/{key}, DELETE /v1/tls/policy/{domain} */
static void
verb_del(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    int              tls = arg != NULL;
    const char      *key = api_path_param(r, tls ? "domain" : "key");
    char            *rv[] = { "route", "del", NULL, NULL };
    char            *tv[] = { "tls", "policy", "del", NULL, NULL };
    struct verb_ctx *x;

    if (!verb_key_ok(key, 255)) {
        api_reply_error(c, 400, "%s: expected 1 to 255 printable "
            "characters, no blank, not starting with '-'", tls ? "domain" :
            "key");
        return;
    }
    x = verb_ctx_new(a, c, r, VK_CHANGE, tls ? "tls_policy_del" :
        "route_del");
    snprintf(x->extra, sizeof(x->extra), "\"%s\":\"%s\"", tls ? "domain" :
        "key", key);            /* verb_key_ok: no '"' or '\\' trouble */
    if (strpbrk(key, "\"\\") != NULL)
        x->extra[0] = '\0';
    rv[2] = tv[3] = (char *)(uintptr_t)key;
    verb_go(x, tls ? tv : rv, NULL, 0);
}


/* POST /v1/routes/import[?replace=true]: the body is "KEY ROUTE" lines,
 * as mtactl route import reads them (from its stdin). */
static void
verb_import(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    char             rep[8];
    const char      *v = api_query_get(r, "replace", rep, sizeof(rep));
    int              replace = v != NULL && (strcmp(v, "true") == 0 ||
                         strcmp(v, "1") == 0);
    char            *argv[] = { "route", "import", "-", NULL, NULL };
    struct verb_ctx *x;

    (void)arg;
    if (v != NULL && !replace && strcmp(v, "false") != 0 &&
        strcmp(v, "0") != 0) {
        api_reply_error(c, 400, "replace: expected true or false");
        return;
    }
    if (r->body_len == 0 || memchr(r->body, '\0', r->body_len) != NULL) {
        api_reply_error(c, 400, "expected \"KEY ROUTE\" lines as the body "
            "(text/plain)");
        return;
    }
    if (replace) {
        argv[2] = "--replace";
        argv[3] = "-";
    }
    x = verb_ctx_new(a, c, r, VK_IMPORT, "route_import");
    snprintf(x->extra, sizeof(x->extra), "\"replace\":%s",
        replace ? "true" : "false");
    verb_go(x, argv, r->body, r->body_len);
}


/* ---- shaping ---------------------------------------------------------- */

/* POST /v1/shaping/{site}/suspend?source=&for=, .../resume?source= */
static void
verb_suspend(struct api *a, struct api_client *c, const struct api_req *r,
    void *arg)
{
    const char      *site = api_path_param(r, "site"), *src, *dur;
    char             sbuf[80], dbuf[24];
    struct verb_argv av = { .n = 0 };
    struct verb_ctx *x;
    int              resume = strcmp(arg, "resume") == 0;

    src = api_query_get(r, "source", sbuf, sizeof(sbuf));
    dur = resume ? NULL : api_query_get(r, "for", dbuf, sizeof(dbuf));
    if (!verb_key_ok(site, 63) || (src != NULL && !verb_key_ok(src, 63)) ||
        (dur != NULL && !verb_dur_ok(dur)) ||
        (resume && api_query_get(r, "for", dbuf, sizeof(dbuf)) != NULL)) {
        api_reply_error(c, 400, "expected a site or domain (1 to 63 "
            "printable characters), ?source=NAME%s", resume ? "" :
            ", ?for=DURATION (30m, 2h)");
        return;
    }
    verb_push(&av, arg);
    verb_push(&av, site);
    if (src != NULL) {
        verb_push(&av, "--source");
        verb_push(&av, src);
    }
    if (dur != NULL) {
        verb_push(&av, "--for");
        verb_push(&av, dur);
    }
    x = verb_ctx_new(a, c, r, VK_CHANGE, arg);
    if (strpbrk(site, "\"\\") == NULL)
        snprintf(x->extra, sizeof(x->extra), "\"site\":\"%s\"", site);
    verb_go(x, av.v, NULL, 0);
}


void
api_verbs_routes(struct api *a)
{
    static const char *const change[] = { "hold", "release", "flush",
                                          "bounce" };
    static const char *const paths[] = { "/v1/queue/{id}/hold",
        "/v1/queue/{id}/release", "/v1/queue/{id}/flush",
        "/v1/queue/{id}/bounce" };
    static char    tls[] = "tls";   /* arg of the TLS policy routes */
    const unsigned R = API_ROLE_READ, O = API_ROLE_OPERATE;

    /* literal paths before the {id} ones that would match them */
    api_route_add(a, API_POST, "/v1/queue/actions", O, verb_queue_actions,
        NULL);
    api_route_add(a, API_GET, "/v1/queue", R, verb_queue_list, NULL);
    api_route_add(a, API_GET, "/v1/queue/{id}", R, verb_queue_show, NULL);
    api_route_add(a, API_DELETE, "/v1/queue/{id}", O, verb_queue_change,
        "delete");
    for (size_t i = 0; i < ARRAY_LEN(change); i++)
        api_route_add(a, API_POST, paths[i], O, verb_queue_change,
            (void *)(uintptr_t)change[i]);
    api_route_add(a, API_POST, "/v1/routes/import", O, verb_import, NULL);
    api_route_add(a, API_GET, "/v1/routes", R, verb_list, "route list --json");
    api_route_add(a, API_GET, "/v1/routes/{key}", R, verb_get, NULL);
    api_route_add(a, API_PUT, "/v1/routes/{key}", O, verb_put, NULL);
    api_route_add(a, API_DELETE, "/v1/routes/{key}", O, verb_del, NULL);
    api_route_add(a, API_GET, "/v1/tls/policy", R, verb_list,
        "tls policy list --json");
    api_route_add(a, API_GET, "/v1/tls/policy/{domain}", R, verb_get, tls);
    api_route_add(a, API_PUT, "/v1/tls/policy/{domain}", O, verb_put, tls);
    api_route_add(a, API_DELETE, "/v1/tls/policy/{domain}", O, verb_del,
        tls);
    api_route_add(a, API_GET, "/v1/shaping", R, verb_list, "shaping --json");
    api_route_add(a, API_POST, "/v1/shaping/{site}/suspend", O, verb_suspend,
        "suspend");
    api_route_add(a, API_POST, "/v1/shaping/{site}/resume", O, verb_suspend,
        "resume");
}
