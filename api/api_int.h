/*
 * api_int.h - what the API process's own files share (api.c, api_http.c,
 * api_route.c, api_tokens.c, and the handlers of api_verbs.c and
 * api_submit.c).  Nothing outside api/ includes it.
 *
 * CONTRACT  One struct api per process.  A handler gets the request as a
 *           struct api_req whose pointers are valid until it answers (or,
 *           for an async handler, while it holds a reference on the
 *           client: api_client_ref()).  It answers exactly once, at once
 *           or later, with api_reply() or api_reply_error(); both are
 *           no-ops on a client that is gone (closed meanwhile), and a
 *           second answer to one request is ignored.  The request's
 *           pointers die with the answer: copy what is needed later.
 *           Routing: api_route_add() patterns are literal segments and
 *           "{name}" segments matching one non-empty segment; the first
 *           route whose pattern matches the path and method wins.  A path
 *           matched by some route but not for the method is 405 with an
 *           Allow header; no match is 404.  The role a route needs is
 *           checked before the handler runs (403); API_ROLE_READ is
 *           granted by API_ROLE_OPERATE too.
 * FAILURE   Handlers never crash on input: every body and query is
 *           client-controlled.  A handler that cannot do its work answers
 *           an error status (api_reply_error()).
 */
#ifndef MTAD_API_INT_H
#define MTAD_API_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/net.h"

struct config;
struct api_json;

enum api_method { API_GET = 1, API_POST, API_PUT, API_DELETE };

#define API_ROLE_READ     0x1u
#define API_ROLE_OPERATE  0x2u
#define API_ROLE_INJECT   0x4u

/* A request as the handlers see it. */
struct api_req {
    int          method;          /* API_GET, API_POST, API_PUT, API_DELETE */
    const char  *path;            /* decoded, no query */
    const char  *query;           /* raw query string or "" */
    const unsigned char *body; size_t body_len;
    const char  *content_type;    /* "" when none */
    const char  *token_name;      /* authenticated token's name */
    unsigned     roles;           /* API_ROLE_READ|API_ROLE_OPERATE|API_ROLE_INJECT */
    const struct sockaddr_storage *client;
};

struct api;
struct api_client;

typedef void api_handler_fn(struct api *a, struct api_client *c,
                            const struct api_req *r, void *arg);

/* Answers: json[0..len) is the body (Content-Type application/json);
 * status 204 sends no body.  api_reply_error(): {"error":{"status":N,
 * "message":"..."}} with the message formatted (escaped by the writer). */
void    api_reply(struct api_client *c, int status, const char *json,
            size_t len);
void    api_reply_error(struct api_client *c, int status, const char *fmt,
            ...) __attribute__((format(printf, 3, 4)));
/* The same with headers added (each "Name: value\r\n", e.g. Retry-After),
 * for handlers that need them; hdrs may be NULL. */
void    api_reply_hdrs(struct api_client *c, int status, const char *hdrs,
            const char *json, size_t len);
/* An error body with more members: extra is JSON object members written
 * after "message" (e.g. "\"smtp\":{...}"), already valid JSON; NULL none. */
void    api_reply_error_extra(struct api_client *c, int status,
            const char *hdrs, const char *extra, const char *fmt, ...)
            __attribute__((format(printf, 5, 6)));

/* References for async handlers: the client struct (not its socket) lives
 * until the last unref; api_client_alive() says whether the peer is still
 * there to answer. */
void    api_client_ref(struct api_client *c);
void    api_client_unref(struct api_client *c);
int     api_client_alive(const struct api_client *c);

/* Routing table. */
int     api_route_add(struct api *a, int method, const char *pattern,
            unsigned role, api_handler_fn *fn, void *arg);
/* The value of "{name}" in the matched pattern (decoded), or NULL. */
const char *api_path_param(const struct api_req *r, const char *name);
/* The value of query parameter name, %-decoded into buf (NUL-terminated),
 * or NULL when absent, too long for buf, or holding a NUL byte. */
const char *api_query_get(const struct api_req *r, const char *name,
            char *buf, size_t bufsz);

/* The admin record of a change (success or failure):
 *   admin api:NAME from=ADDR action=... args=... result=...
 * fmt makes "action=... args=... result=..." (values escaped by the
 * caller through api_admin_arg() when they are client bytes). */
void    api_admin_log(struct api *a, struct api_client *c,
            const struct api_req *r, const char *fmt, ...)
            __attribute__((format(printf, 4, 5)));
/* Client bytes s[0..n) made safe for an admin record: printable ASCII
 * but backslash and space as themselves, everything else \xHH; cut at
 * outsz.  Returns out. */
const char *api_admin_arg(const char *s, size_t n, char *out, size_t outsz);

/* Parses the request's body as JSON; NULL after answering 400 (or 415
 * when the content type is not application/json).  Free with
 * api_json_free(). */
struct api_json *api_req_json(struct api_client *c, const struct api_req *r);

/* What the process's parts read from it. */
struct ev_loop      *api_loop(struct api *a);
const struct config *api_config(struct api *a);
/* The master's channel (chan role CHAN_API), for the verbs' commands. */
int                  api_chan_fd(struct api *a);

/* ---- inside the core (api.c, api_http.c, api_route.c, api_tokens.c) ---- */

#define API_MAX_ROUTES      128
#define API_MAX_PARAMS      4
#define API_MAX_HEAD        (16 * 1024)   /* request line + headers: 431 */
#define API_MAX_TARGET      4096          /* request target: 414 */
#define API_MAX_HEADERS     64            /* header lines: 431 */

struct api_route {
    int             method;
    char           *pattern;
    unsigned        role;
    api_handler_fn *fn;
    void           *arg;
};

/* The parsed head of one request (api_http.c: pure, fuzzed). */
struct api_http_head {
    int         method;             /* API_*, 0: not one we know */
    char        method_name[16];
    char        target[API_MAX_TARGET + 1];
    int         minor;              /* HTTP/1.minor */
    uint64_t    content_length;
    int         has_length;
    int         chunked;            /* Transfer-Encoding present */
    int         keep_alive;         /* after Connection and version */
    int         expect_continue;
    char        auth[512];          /* Authorization value, or "" */
    char        content_type[128];
    size_t      head_len;           /* bytes of the head, CRLFCRLF incl. */
};

/* api_http_parse: the head at p[0..n).  0 and *h filled: a complete
 * head; -2: not complete yet (and n < API_MAX_HEAD); or an HTTP status
 * (400, 411, 413, 414, 431, 501, 505) to answer before closing, with a
 * static reason in *why.  max_body: a Content-Length above it is 413. */
int     api_http_parse(const char *p, size_t n, uint64_t max_body,
            struct api_http_head *h, const char **why);
/* Percent-decodes s[0..n) into out (outsz incl. NUL); -1 on a bad escape,
 * a NUL byte, or no room. plus: '+' is a space (query strings). */
int     api_http_unescape(const char *s, size_t n, char *out, size_t outsz,
            int plus);
const char *api_http_reason(int status);

/* api_tokens.c */
struct api_tokens;
/* Loads path (NAME ROLES SHA256HEX lines); NULL with "file:line:col: why"
 * in err.  The file must be a regular file, not group/world-writable. */
struct api_tokens *api_tokens_load(const char *path, char *err,
            size_t errsz);
void    api_tokens_free(struct api_tokens *t);
size_t  api_tokens_count(const struct api_tokens *t);
/* The entry whose hash is SHA-256(token): its name and roles; every entry
 * compared in constant time.  -1 when none. */
int     api_tokens_check(const struct api_tokens *t, const char *token,
            size_t n, const char **name, unsigned *roles);
/* "read,operate" -> mask; -1 on an unknown name. */
int     api_roles_parse(const char *s, size_t n, unsigned *out);

/* api_route.c: dispatch of a complete request (called by api.c) */
void    api_dispatch(struct api *a, struct api_client *c,
            struct api_req *r);
void    api_routes_core(struct api *a);     /* /v1/status and friends */
void    api_status_reply(struct api *a, const char *json, size_t n,
            uint64_t id);                    /* the master's answer */

#endif /* MTAD_API_INT_H */
