/*
 * metrics_req.c - the metrics listener's HTTP request line (see
 * metrics_req.h).  HTTP/1.0 and 1.1 request lines, "METHOD PATH VERSION",
 * blanks (SP or HTAB) between; the version and the header fields are not
 * looked at (one request per connection, the answer is always the same).
 */
#include <string.h>

#include "master/metrics_req.h"

/* metrics_req_end - 1 when req holds the empty line ending the headers. */
static int
metrics_req_end(const char *req, size_t len)
{
    return memmem(req, len, "\r\n\r\n", 4) != NULL ||
        memmem(req, len, "\n\n", 2) != NULL;
}


/* metrics_req_token - the next blank-separated word of [p, end): its
 * start in *tok, its length returned (0 at the end of the line). */
static size_t
metrics_req_token(const char **p, const char *end, const char **tok)
{
    const char *s = *p;

    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    *tok = s;
    while (s < end && *s != ' ' && *s != '\t')
        s++;
    *p = s;
    return (size_t)(s - *tok);
}


static int
metrics_req_is(const char *tok, size_t n, const char *word)
{
    return n == strlen(word) && memcmp(tok, word, n) == 0;
}


int
metrics_req_parse(const char *req, size_t len, size_t max, int *head)
{
    const char *end, *p = req, *method, *path;
    size_t      mn, pn, i;

    *head = 0;
    if (!metrics_req_end(req, len))
        return len >= max ? 431 : 0;
    end = memchr(req, '\n', len);   /* there is one: the end was found */
    if (end > req && end[-1] == '\r')
        end--;
    for (i = 0; i < (size_t)(end - req); i++)
        if ((unsigned char)req[i] < 0x20 && req[i] != '\t')
            return 400;             /* NUL, a bare CR, ... */
    mn = metrics_req_token(&p, end, &method);
    pn = metrics_req_token(&p, end, &path);
    if (mn == 0 || pn == 0)
        return 400;
    *head = metrics_req_is(method, mn, "HEAD");
    if (!*head && !metrics_req_is(method, mn, "GET"))
        return 405;
    if (metrics_req_is(path, pn, "/metrics") ||
        (pn >= 9 && memcmp(path, "/metrics?", 9) == 0))
        return 200;
    return 404;
}
