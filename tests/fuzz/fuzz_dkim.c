/*
 * fuzz_dkim.c - libFuzzer target over the DKIM streaming canonicaliser and
 * signer.  `make fuzz` builds and runs it with every other target.
 *
 * Input: byte 0 and 1 choose two split points, the rest is the message.
 * Checks: the relaxed body canonicaliser gives the same bytes whole, split
 * at the chosen points, and byte by byte, and agrees with a naive
 * whole-buffer reference of RFC 6376 3.4.4 (with this signer's line-end
 * rule: LF ends a line, a CR just before it belongs to the line end, any
 * other CR is content); the header canonicaliser agrees with a naive
 * reference of 3.4.2 on every line of the input taken as a field; the
 * signer (an Ed25519 key for example.org, deterministic) writes exactly
 * the announced length and the same block for the whole message and for
 * the split one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "dkim/dkim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct out {
    unsigned char *p;
    size_t         n, cap;
};

static void
out_put(void *arg, const char *p, size_t n)
{
    struct out *o = arg;

    if (n == 0)
        abort();                    /* never an empty piece */
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2 + 64;
        if ((o->p = realloc(o->p, o->cap)) == NULL)
            abort();
    }
    memcpy(o->p + o->n, p, n);
    o->n += n;
}

static void
canon_split(const uint8_t *in, size_t n, size_t a, size_t b, int bytewise,
    struct out *o)
{
    struct dkim_body body;
    size_t           i;

    dkim_body_init(&body, out_put, o);
    if (bytewise) {
        for (i = 0; i < n; i++)
            dkim_body_feed(&body, (const char *)in + i, 1);
    } else {
        dkim_body_feed(&body, (const char *)in, a);
        dkim_body_feed(&body, (const char *)in + a, b - a);
        dkim_body_feed(&body, (const char *)in + b, n - b);
    }
    dkim_body_end(&body);
}

static int
is_wsp(unsigned char c)
{
    return c == ' ' || c == '\t';
}

/* ref_line - one line without its end: whitespace runs to one space, none
 * at the end; appended to o. */
static void
ref_line(const uint8_t *p, size_t n, struct out *o)
{
    size_t i = 0, j;

    while (n > 0 && is_wsp(p[n - 1]))
        n--;
    while (i < n) {
        if (is_wsp(p[i])) {
            for (j = i; j < n && is_wsp(p[j]); j++)
                ;
            out_put(o, " ", 1);
            i = j;
        } else {
            out_put(o, (const char *)p + i, 1);
            i++;
        }
    }
}

/* ref_body - the whole body at once: lines, canonical each, trailing empty
 * lines dropped, CRLF after every line kept. */
static void
ref_body(const uint8_t *in, size_t n, struct out *o)
{
    struct out lines = { NULL, 0, 0 };
    size_t    *ends = malloc((n + 2) * sizeof(size_t));
    size_t     nl = 0, start = 0, i, len, keep;

    if (ends == NULL)
        abort();
    for (i = 0; i <= n; i++) {
        if (i < n && in[i] != '\n')
            continue;
        if (i == n && start == n && n > 0 && in[n - 1] == '\n')
            break;                      /* no line after the last LF */
        len = i - start;
        if (i < n && len > 0 && in[i - 1] == '\r')
            len--;                      /* the CR of CRLF */
        ref_line(in + start, len, &lines);
        ends[nl++] = lines.n;
        start = i + 1;
    }
    /* keep lines up to the last non-empty one */
    keep = 0;
    for (i = 0; i < nl; i++)
        if (ends[i] > (i ? ends[i - 1] : 0))
            keep = i + 1;
    for (i = 0; i < keep; i++) {
        size_t s = i ? ends[i - 1] : 0;

        if (ends[i] > s)
            out_put(o, (const char *)lines.p + s, ends[i] - s);
        out_put(o, "\r\n", 2);
    }
    free(lines.p);
    free(ends);
}

/* ref_header - RFC 6376 3.4.2 the long way; -1 when there is no colon. */
static long
ref_header(const uint8_t *p, size_t n, struct out *o)
{
    const uint8_t *colon = memchr(p, ':', n);
    struct out     v = { NULL, 0, 0 };
    size_t         i, nlen, s, e;

    if (colon == NULL)
        return -1;
    nlen = (size_t)(colon - p);
    while (nlen > 0 && is_wsp(p[nlen - 1]))
        nlen--;
    for (i = 0; i < nlen; i++) {
        char c = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);

        out_put(o, &c, 1);
    }
    out_put(o, ":", 1);
    /* unfold: drop LF, CR before LF, a CR at the very end */
    for (i = (size_t)(colon - p) + 1; i < n; i++) {
        if (p[i] == '\n' || (p[i] == '\r' && (i + 1 == n || p[i + 1] == '\n')))
            continue;
        out_put(&v, (const char *)p + i, 1);
    }
    s = 0;
    e = v.n;
    while (s < e && is_wsp(v.p[s]))
        s++;
    while (e > s && is_wsp(v.p[e - 1]))
        e--;
    if (e > s)
        ref_line(v.p + s, e - s, o);
    free(v.p);
    return (long)o->n;
}

static void
check_headers(const uint8_t *in, size_t n)
{
    const uint8_t *p = in, *end = in + n, *nl;
    char          *buf = malloc(n + 3);
    struct out     r;
    size_t         len, got;
    long           want;

    if (buf == NULL)
        abort();
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        len = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
        memset(&r, 0, sizeof(r));
        want = ref_header(p, len, &r);
        got = dkim_header_relaxed((const char *)p, len, 0, buf);
        if (want < 0 ? got != 0 :
            (got != (size_t)want || memcmp(buf, r.p, got) != 0))
            abort();
        free(r.p);
        p += len;
    }
    free(buf);
}

static struct dkim_keys *keys;

static void
init_keys(void)
{
    char      path[] = "/tmp/fuzz_dkim.XXXXXX", err[256];
    EVP_PKEY *pk = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    FILE     *f;
    int       fd = mkstemp(path);

    if (pk == NULL || fd < 0 || (f = fdopen(fd, "w")) == NULL ||
        PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) != 1)
        abort();
    fclose(f);
    keys = dkim_keys_new();
    if (keys == NULL || dkim_keys_add(keys, "example.org", "s", path,
        DKIM_ED25519_SHA256, err, sizeof(err)) != DKIM_OK)
        abort();
    remove(path);
    EVP_PKEY_free(pk);
}

/* sign - prepare as the session does; the block (malloc'd) or NULL. */
static char *
sign(const uint8_t *in, size_t n, size_t a, size_t b, size_t *len, int *rc)
{
    struct dkim_sign *c = dkim_sign_begin(keys, 1700000000);
    size_t            cut[3] = { a, b, n }, at = 0, i;
    int               prepared = 0;
    char             *out = NULL;

    *rc = DKIM_OK;
    for (i = 0; i < 3; i++) {
        dkim_sign_feed(c, in + at, cut[i] - at);
        at = cut[i];
        if (!prepared && dkim_sign_header_done(c)) {
            prepared = 1;
            *rc = dkim_sign_prepare(c, len);
        }
    }
    if (!prepared)
        *rc = dkim_sign_prepare(c, len);
    if (*rc == DKIM_OK) {
        if ((out = malloc(*len + 1)) == NULL)
            abort();
        memset(out, 0, *len + 1);
        if (dkim_sign_end(c, out, *len) != DKIM_OK || strlen(out) != *len)
            abort();
    } else if (dkim_sign_end(c, (char *)in, 0) == DKIM_OK) {
        abort();
    }
    dkim_sign_free(c);
    return out;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct out w = { NULL, 0, 0 }, s = { NULL, 0, 0 }, bw = { NULL, 0, 0 },
               r = { NULL, 0, 0 };
    size_t     n, a, b, l1 = 0, l2 = 0;
    const uint8_t *in;
    char      *s1, *s2;
    int        rc1, rc2;

    if (size < 2)
        return 0;
    if (keys == NULL)
        init_keys();
    in = data + 2;
    n = size - 2;
    a = n ? data[0] % (n + 1) : 0;
    b = n ? data[1] % (n + 1) : 0;
    if (a > b) {
        size_t t = a;

        a = b;
        b = t;
    }
    canon_split(in, n, n, n, 0, &w);
    canon_split(in, n, a, b, 0, &s);
    canon_split(in, n, 0, 0, 1, &bw);
    ref_body(in, n, &r);
    if (w.n != s.n || w.n != bw.n || w.n != r.n ||
        (w.n && (memcmp(w.p, s.p, w.n) || memcmp(w.p, bw.p, w.n) ||
        memcmp(w.p, r.p, w.n))))
        abort();
    check_headers(in, n);
    s1 = sign(in, n, n, n, &l1, &rc1);
    s2 = sign(in, n, a, b, &l2, &rc2);
    if (rc1 != rc2 || l1 != l2 || (s1 && strcmp(s1, s2) != 0))
        abort();
    free(s1);
    free(s2);
    free(w.p);
    free(s.p);
    free(bw.p);
    free(r.p);
    return 0;
}
