/*
 * api_http.c - the HTTP/1.1 request head: a pure parser (no I/O, no
 * allocation) of the request line and the header fields the API uses,
 * and the percent-decoding of paths and queries.
 *
 * PURPOSE   Strict where being lenient invites request smuggling or
 *           ambiguity (RFC 9112): CRLF line ends only, no obs-fold, no
 *           whitespace before a field's colon, one Content-Length (or
 *           repeated with one value), Transfer-Encoding refused (411 when
 *           it is chunked: send a length; 501 otherwise) and never
 *           together with Content-Length (400), Host required in 1.1.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/api_int.h"

static const struct {
    int         status;
    const char *reason;
} api_reasons[] = {
    { 100, "Continue" }, { 200, "OK" }, { 201, "Created" },
    { 202, "Accepted" }, { 204, "No Content" }, { 400, "Bad Request" },
    { 401, "Unauthorized" }, { 403, "Forbidden" }, { 404, "Not Found" },
    { 405, "Method Not Allowed" }, { 408, "Request Timeout" },
    { 409, "Conflict" }, { 411, "Length Required" },
    { 413, "Content Too Large" }, { 414, "URI Too Long" },
    { 415, "Unsupported Media Type" }, { 422, "Unprocessable Content" },
    { 429, "Too Many Requests" }, { 431, "Request Header Fields Too Large" },
    { 500, "Internal Server Error" }, { 501, "Not Implemented" },
    { 502, "Bad Gateway" }, { 503, "Service Unavailable" },
    { 504, "Gateway Timeout" }, { 505, "HTTP Version Not Supported" },
};

const char *
api_http_reason(int status)
{
    for (size_t i = 0; i < sizeof(api_reasons) / sizeof(api_reasons[0]); i++)
        if (api_reasons[i].status == status)
            return api_reasons[i].reason;
    return status < 500 ? "Error" : "Server Error";
}

/* RFC 9110 tchar */
static int
api_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

static int
api_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int
api_http_unescape(const char *s, size_t n, char *out, size_t outsz, int plus)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        int c = (unsigned char)s[i];

        if (c == '%') {
            int hi, lo;

            if (i + 2 >= n)
                return -1;
            hi = api_hexval(s[i + 1]);
            lo = api_hexval(s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c == 0 || o + 1 >= outsz)
            return -1;
        out[o++] = (char)c;
    }
    if (outsz == 0)
        return -1;
    out[o] = '\0';
    return 0;
}

static const char *
api_memmem(const char *p, size_t n, const char *needle, size_t k)
{
    return memmem(p, n, needle, k);
}

/* the method token -> API_*, 0 for one we do not serve */
static int
api_method_of(const char *m, size_t n)
{
    static const struct { const char *name; int m; } ms[] = {
        { "GET", API_GET }, { "POST", API_POST }, { "PUT", API_PUT },
        { "DELETE", API_DELETE },
    };

    for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++)
        if (strlen(ms[i].name) == n && memcmp(ms[i].name, m, n) == 0)
            return ms[i].m;
    return 0;
}

/* "close, keep-alive" tokens */
static void
api_connection(struct api_http_head *h, const char *v, size_t n, int *close,
    int *keep)
{
    size_t i = 0;

    (void)h;
    while (i < n) {
        size_t s, e;

        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        s = i;
        while (i < n && v[i] != ',')
            i++;
        e = i;
        while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - s == 5 && strncasecmp(v + s, "close", 5) == 0)
            *close = 1;
        else if (e - s == 10 && strncasecmp(v + s, "keep-alive", 10) == 0)
            *keep = 1;
    }
}

static int
api_request_line(const char *p, size_t n, struct api_http_head *h,
    const char **why)
{
    const char *sp1, *sp2;
    size_t      tlen;

    sp1 = memchr(p, ' ', n);
    if (sp1 == NULL || sp1 == p || (size_t)(sp1 - p) >= sizeof(h->method_name))
        return *why = "bad request line", 400;
    for (const char *q = p; q < sp1; q++)
        if (!api_tchar((unsigned char)*q))
            return *why = "bad method", 400;
    memcpy(h->method_name, p, (size_t)(sp1 - p));
    h->method_name[sp1 - p] = '\0';
    h->method = api_method_of(p, (size_t)(sp1 - p));
    sp2 = memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - p));
    if (sp2 == NULL)
        return *why = "bad request line", 400;
    tlen = (size_t)(sp2 - sp1 - 1);
    if (tlen > API_MAX_TARGET)
        return *why = "request target too long", 414;
    if (tlen == 0 || sp1[1] != '/')
        return *why = "request target must be a path", 400;
    for (size_t i = 0; i < tlen; i++) {
        unsigned char c = (unsigned char)sp1[1 + i];

        if (c <= 0x20 || c >= 0x7f)
            return *why = "bad byte in request target", 400;
    }
    memcpy(h->target, sp1 + 1, tlen);
    h->target[tlen] = '\0';
    if ((size_t)(p + n - sp2 - 1) != 8 || memcmp(sp2 + 1, "HTTP/", 5) != 0)
        return *why = "bad HTTP version", 400;
    if (sp2[6] != '1' || sp2[7] != '.' || sp2[8] < '0' || sp2[8] > '9') {
        if (sp2[6] >= '0' && sp2[6] <= '9' && sp2[7] == '.' &&
            sp2[8] >= '0' && sp2[8] <= '9')
            return *why = "HTTP version not supported", 505;
        return *why = "bad HTTP version", 400;
    }
    h->minor = sp2[8] - '0';
    return 0;
}

/* one field line name: value (no CRLF); 0 or a status */
static int
api_field(const char *p, size_t n, uint64_t max_body, struct api_http_head *h,
    int *close, int *keep, int *host, const char **why)
{
    const char *colon = memchr(p, ':', n), *v, *e;
    size_t      nl, vl;

    if (colon == NULL || colon == p)
        return *why = "bad header field", 400;
    nl = (size_t)(colon - p);
    for (size_t i = 0; i < nl; i++)
        if (!api_tchar((unsigned char)p[i]))
            return *why = "bad header field name", 400;
    v = colon + 1;
    e = p + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    vl = (size_t)(e - v);
    for (size_t i = 0; i < vl; i++) {
        unsigned char c = (unsigned char)v[i];

        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return *why = "control byte in header field", 400;
    }
#define IS(name) (nl == sizeof(name) - 1 && strncasecmp(p, name, nl) == 0)
    if (IS("Content-Length")) {
        uint64_t len = 0;

        if (vl == 0)
            return *why = "bad Content-Length", 400;
        for (size_t i = 0; i < vl; i++) {
            if (v[i] < '0' || v[i] > '9')
                return *why = "bad Content-Length", 400;
            if (len > (UINT64_MAX - 9) / 10)
                return *why = "body too large", 413;
            len = len * 10 + (uint64_t)(v[i] - '0');
        }
        if (h->has_length && h->content_length != len)
            return *why = "conflicting Content-Length", 400;
        h->has_length = 1;
        h->content_length = len;
        if (len > max_body)
            return *why = "body too large", 413;
    } else if (IS("Transfer-Encoding")) {
        if (vl >= 7 && strncasecmp(e - 7, "chunked", 7) == 0)
            h->chunked = 1;
        else
            h->chunked = 2;
    } else if (IS("Connection")) {
        api_connection(h, v, vl, close, keep);
    } else if (IS("Host")) {
        if ((*host)++ > 0)
            return *why = "more than one Host", 400;
    } else if (IS("Authorization")) {
        if (vl >= sizeof(h->auth))
            return *why = "Authorization too long", 431;
        if (h->auth[0] != '\0')
            return *why = "more than one Authorization", 400;
        memcpy(h->auth, v, vl);
        h->auth[vl] = '\0';
    } else if (IS("Content-Type")) {
        if (vl >= sizeof(h->content_type))
            vl = sizeof(h->content_type) - 1;
        memcpy(h->content_type, v, vl);
        h->content_type[vl] = '\0';
    } else if (IS("Expect")) {
        if (vl == 12 && strncasecmp(v, "100-continue", 12) == 0)
            h->expect_continue = 1;
    }
#undef IS
    return 0;
}

int
api_http_parse(const char *p, size_t n, uint64_t max_body,
    struct api_http_head *h, const char **why)
{
    const char *end, *line, *eol;
    size_t      skip = 0, limit = n < API_MAX_HEAD ? n : API_MAX_HEAD;
    int         close = 0, keep = 0, host = 0, rc, nfields = 0;

    memset(h, 0, sizeof(*h));
    *why = "";
    /* empty lines before a request line are ignored (RFC 9112 2.2): a
     * client may send a CRLF after a body */
    while (skip + 1 < limit && p[skip] == '\r' && p[skip + 1] == '\n')
        skip += 2;
    if (skip < limit && p[skip] == '\n')
        return *why = "bare LF", 400;
    line = p + skip;
    eol = api_memmem(line, limit - skip, "\r\n", 2);
    if (eol == NULL) {
        if (memchr(line, '\n', limit - skip) != NULL)
            return *why = "bare LF", 400;
        if (limit - skip > API_MAX_TARGET + 32)
            return *why = "request line too long", 414;
        if (n >= API_MAX_HEAD)
            return *why = "request head too large", 431;
        return -2;
    }
    end = api_memmem(line, limit - skip, "\r\n\r\n", 4);
    if (end == NULL) {
        if (n >= API_MAX_HEAD)
            return *why = "request head too large", 431;
        /* a bare LF anywhere is an error now, not after 16 KiB */
        for (const char *q = line; q < p + limit; q++)
            if (*q == '\n' && (q == line || q[-1] != '\r'))
                return *why = "bare LF", 400;
        return -2;
    }
    if ((rc = api_request_line(line, (size_t)(eol - line), h, why)) != 0)
        return rc;
    for (line = eol + 2; line < end + 2; line = eol + 2) {
        eol = api_memmem(line, (size_t)(end + 2 - line), "\r\n", 2);
        if (eol == NULL)
            break;
        if (memchr(line, '\n', (size_t)(eol - line)) != NULL ||
            memchr(line, '\r', (size_t)(eol - line)) != NULL)
            return *why = "bare CR or LF", 400;
        if (line[0] == ' ' || line[0] == '\t')
            return *why = "obsolete line folding", 400;
        if (++nfields > API_MAX_HEADERS)
            return *why = "too many header fields", 431;
        if ((rc = api_field(line, (size_t)(eol - line), max_body, h, &close,
            &keep, &host, why)) != 0)
            return rc;
    }
    h->head_len = (size_t)(end + 4 - p);
    if (h->chunked && h->has_length)
        return *why = "Transfer-Encoding with Content-Length", 400;
    if (h->chunked == 1)
        return *why = "chunked bodies are not accepted: send Content-Length",
            411;
    if (h->chunked)
        return *why = "transfer coding unsupported (send Content-Length)", 501;
    if (h->minor >= 1 && host == 0)
        return *why = "no Host header", 400;
    if (h->method == 0)
        return *why = "method unsupported", 501;
    h->keep_alive = h->minor >= 1 ? !close : keep && !close;
    return 0;
}
