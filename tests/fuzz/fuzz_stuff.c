/*
 * fuzz_stuff.c - libFuzzer target over the bytes that cross mtad between
 * two SMTP sessions: the BDAT content check, the outbound dot-stuffing
 * (smtp/reply.c) read back by the DATA byte machine
 * (smtp/data.c), and util_escape() (common/util.c).
 *
 * Checks:
 *  - whatever bytes are stored, smtp_stuff() + smtp_stuff_end() give a
 *    stream in which a strict receiver (smtp_data_feed) finds the end of
 *    data exactly at the end and gets the stored bytes back (plus CRLF
 *    when they did not end in one), and in which a lenient receiver (a
 *    bare CR or bare LF also ends a line) finds no "." line before the
 *    final one; the same for every split of the input;
 *  - smtp_data_bare(), fed in two pieces, agrees with a byte-by-byte model;
 *  - util_escape() output has no control byte, escaping is idempotent,
 *    and a buffer of UTIL_ESC_ROOM(n) never truncates.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "smtp/smtp.h"
#include "smtp/smtp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fuzz_out {
    char   *p;
    size_t  n, cap;
};

static int
fuzz_emit(void *arg, const char *p, size_t n)
{
    struct fuzz_out *o = arg;

    if (o->n + n > o->cap)
        abort();
    memcpy(o->p + o->n, p, n);
    o->n += n;
    return 0;
}


static int
fuzz_nl(char c)
{
    return c == '\r' || c == '\n';
}


static void
fuzz_stuffing(const char *in, size_t n, size_t cut)
{
    struct smtp_stuff st;
    struct smtp_data   d;
    struct fuzz_out    o;
    char              *s = malloc(SMTP_STUFF_ROOM(n) + 5);
    char              *exp = malloc(2 * n + 2);
    size_t             len = 0, used = 0, i, want;
    int                crlf_end;

    if (s == NULL || exp == NULL)
        abort();
    smtp_stuff_init(&st);
    len += smtp_stuff(&st, in, cut, s);
    len += smtp_stuff(&st, in + cut, n - cut, s + len);
    if (len > SMTP_STUFF_ROOM(n))
        abort();
    len += smtp_stuff_end(&st, s + len);
    /* the strict receiver */
    o.cap = len;
    o.n = 0;
    o.p = malloc(len);
    if (o.p == NULL)
        abort();
    smtp_data_init(&d, 1);
    if (smtp_data_feed(&d, s, len, &used, fuzz_emit, &o) != 1 || used != len)
        abort();
    /* What it must get: the stored bytes, except that a dot after a bare
     * CR or bare LF stays doubled (the strict receiver sees no line start
     * there; the price of safety for non-conforming content), and a CRLF
     * when the content did not end with one. */
    crlf_end = n == 0 || (n >= 2 && in[n - 2] == '\r' && in[n - 1] == '\n');
    want = 0;
    for (i = 0; i < n; i++) {
        if (in[i] == '.' && i > 0 && (in[i - 1] == '\r' ||
            (in[i - 1] == '\n' && (i < 2 || in[i - 2] != '\r'))))
            exp[want++] = '.';
        exp[want++] = in[i];
    }
    if (!crlf_end) {
        exp[want++] = '\r';
        exp[want++] = '\n';
    }
    if (o.n != want || memcmp(o.p, exp, want) != 0)
        abort();
    /* the lenient receiver: a "." alone between any two line ends */
    for (i = 0; i + 3 < len; i++)
        if (s[i] == '.' && (i == 0 || fuzz_nl(s[i - 1])) &&
            fuzz_nl(s[i + 1]))
            abort();
    free(o.p);
    free(exp);
    free(s);
}


/* The model: a CR not followed by LF, or an LF not preceded by CR. */
static int
fuzz_bare_ref(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\r' && (i + 1 == n || p[i + 1] != '\n'))
            return 1;
        if (p[i] == '\n' && (i == 0 || p[i - 1] != '\r'))
            return 1;
    }
    return 0;
}


static void
fuzz_bare(const char *p, size_t n, size_t cut)
{
    int cr = 0, bare;

    bare = smtp_data_bare(&cr, p, cut);
    if (!bare)
        bare = smtp_data_bare(&cr, p + cut, n - cut) || cr;
    if (bare != fuzz_bare_ref(p, n))
        abort();
}


static void
fuzz_escape(const char *p, size_t n)
{
    size_t room = UTIL_ESC_ROOM(n), len, len2, used, i;
    char  *a = malloc(room), *b = malloc(room);

    if (a == NULL || b == NULL)
        abort();
    len = util_escape(a, room, p, n, 0, &used);
    if (used != n || len >= room || strlen(a) != len)
        abort();
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)a[i];

        if (c < 0x20 || c == 0x7f ||
            (c == 0xc2 && (unsigned char)a[i + 1] < 0xa0))
            abort();
    }
    len2 = util_escape(b, room, a, len, 0, &used);
    if (len2 != len || used != len || memcmp(a, b, len) != 0)
        abort();
    /* a small buffer: a prefix of the full escape, cut at a whole unit */
    len2 = util_escape(b, 7, p, n, UTIL_ESC_LINES, &used);
    if (len2 >= 7 || used > n)
        abort();
    free(a);
    free(b);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char  *p;
    size_t cut;

    if (size == 0)
        return 0;
    cut = data[0] % size;               /* a split point from the input */
    p = malloc(size);
    if (p == NULL)
        abort();
    memcpy(p, data, size);
    fuzz_stuffing(p, size, cut);
    fuzz_bare(p, size, cut);
    fuzz_escape(p, size);
    free(p);
    return 0;
}
