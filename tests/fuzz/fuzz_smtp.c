/*
 * fuzz_smtp.c - libFuzzer target over the SMTP command parsers and the DATA
 * byte machine.  Built and run by `make fuzz` (tests/fuzz/run.sh), with
 * the seeds in tests/fuzz/corpus/smtp/.
 *
 * Checks: every parser returns 0 or -1, and on -1 a reply of the form
 * "ddd d.d.d text"; parsed addresses fit their buffers; the DATA machine
 * gives the same output, end position and bare-newline flag whether fed
 * whole, byte by byte or split at an input-chosen point, and agrees with a
 * naive reference model of RFC 5321 end-of-data and dot-unstuffing; the
 * header scan (hop count, TLS-Required: No) is the same for every split.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "smtp/smtp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_check_reply(int rc, const char *reply)
{
    if (rc == 0)
        return;
    if (rc != -1 || reply == NULL || strlen(reply) < 10 ||
        reply[0] < '4' || reply[0] > '5' || reply[3] != ' ' ||
        reply[4] != reply[0] || reply[5] != '.')
        abort();
}

static void
fuzz_parsers(const char *p, size_t n)
{
    struct str       line = { p, n }, arg;
    struct smtp_mail m;
    struct smtp_rcpt r;
    const char      *reply;
    char             out[SMTP_ADDR_MAX], x[64];
    uint64_t         sz;
    size_t           end;
    int              last, rc, a, u;

    (void)smtp_parse_verb(line, &arg);
    if (arg.p < p || arg.p + arg.n > p + n)
        abort();
    reply = NULL;
    rc = smtp_parse_mail(line, &m, &reply);
    fuzz_check_reply(rc, reply);
    if (rc == 0 && (strlen(m.addr) >= SMTP_ADDR_MAX ||
        strlen(m.envid) >= SMTP_ENVID_MAX))
        abort();
    for (u = 0; u < 2; u++) {
        reply = NULL;
        rc = smtp_parse_rcpt(line, u, &r, &reply);
        fuzz_check_reply(rc, reply);
        if (rc == 0 && (r.addr[0] == '\0' || strlen(r.orcpt) >=
            SMTP_ORCPT_MAX))
            abort();
        for (a = 0; a < 2; a++) {
            reply = NULL;
            rc = smtp_parse_path(p, n, a, u, out, sizeof(out), &end, &reply);
            fuzz_check_reply(rc, reply);
            if (rc == 0 && (end > n || p[end - 1] != '>' ||
                strlen(out) >= sizeof(out)))
                abort();
            if (rc == 0 && !u)
                for (size_t i = 0; out[i] != '\0'; i++)
                    if ((unsigned char)out[i] >= 0x80)
                        abort();
        }
    }
    reply = NULL;
    rc = smtp_parse_bdat(line, &sz, &last, &reply);
    fuzz_check_reply(rc, reply);
    reply = NULL;
    fuzz_check_reply(smtp_parse_helo(line, &reply), reply);
    if (smtp_xtext_decode(p, n, x, sizeof(x)) == 0 && strlen(x) >= sizeof(x))
        abort();
}

struct fuzz_out {
    char   *p;
    size_t  n, cap;
};

static int
fuzz_emit(void *arg, const char *p, size_t n)
{
    struct fuzz_out *o = arg;

    if (n == 0 || o->n + n > o->cap)
        abort();                        /* output never exceeds input */
    memcpy(o->p + o->n, p, n);
    o->n += n;
    return 0;
}

struct fuzz_res {
    int     rc, bad;
    size_t  end;
};

/* Feed in pieces of at most step bytes (first piece `first` bytes). */
static struct fuzz_res
fuzz_feed(const char *in, size_t n, size_t first, size_t step,
    struct fuzz_out *o)
{
    struct smtp_data d;
    struct fuzz_res  res = { 0, 0, 0 };
    size_t           off = 0, len, used;

    smtp_data_init(&d, 0);
    for (int k = 0; off < n; k++) {
        /* The first piece may be empty: a legal call that must be a no-op. */
        len = k == 0 ? first : step;
        if (len > n - off)
            len = n - off;
        res.rc = smtp_data_feed(&d, in + off, len, &used, fuzz_emit, o);
        if (res.rc == 1) {
            res.end = off + used;
            break;
        }
        if (res.rc != 0 || used != len)
            abort();
        off += len;
    }
    if (d.size != o->n)
        abort();
    res.bad = d.bad_newline;
    return res;
}

/* The model: byte by byte, straight from RFC 5321 4.1.1.4 and 4.5.2. */
static struct fuzz_res
fuzz_ref(const char *in, size_t n, struct fuzz_out *o)
{
    struct fuzz_res res = { 0, 0, 0 };
    size_t          i = 0, j, lim;

    while (i < n) {
        int bol = i == 0 || (i >= 2 && in[i - 2] == '\r' && in[i - 1] == '\n');
        if (bol && in[i] == '.') {
            if (i + 2 < n && in[i + 1] == '\r' && in[i + 2] == '\n') {
                res.rc = 1;
                res.end = i + 3;
                break;
            }
            if (i + 1 >= n || (in[i + 1] == '\r' && i + 2 >= n))
                break;
            i++;
            continue;
        }
        o->p[o->n++] = in[i++];
    }
    lim = res.rc ? res.end : n;
    for (j = 0; j < lim; j++) {
        if (in[j] == '\r' && j + 1 < lim && in[j + 1] != '\n')
            res.bad = 1;
        if (in[j] == '\n' && (j == 0 || in[j - 1] != '\r'))
            res.bad = 1;
    }
    return res;
}

static int
fuzz_same(const struct fuzz_res *a, const struct fuzz_out *oa,
    const struct fuzz_res *b, const struct fuzz_out *ob)
{
    return a->rc == b->rc && a->end == b->end && a->bad == b->bad &&
        oa->n == ob->n && memcmp(oa->p, ob->p, oa->n) == 0;
}

static void
fuzz_data(const char *in, size_t n, size_t split)
{
    struct fuzz_out o[4];
    struct fuzz_res r[4];
    int             i;

    for (i = 0; i < 4; i++) {
        o[i].p = malloc(n + 1);
        o[i].n = 0;
        o[i].cap = n;
        if (o[i].p == NULL)
            abort();
    }
    r[0] = fuzz_feed(in, n, n, n, &o[0]);
    r[1] = fuzz_feed(in, n, 1, 1, &o[1]);
    r[2] = fuzz_feed(in, n, split, n, &o[2]);
    r[3] = fuzz_ref(in, n, &o[3]);
    for (i = 1; i < 4; i++)
        if (!fuzz_same(&r[0], &o[0], &r[i], &o[i]))
            abort();
    for (i = 0; i < 4; i++)
        free(o[i].p);
}

/* The header scan (Received: count, TLS-Required: No) gives the same
 * answers fed whole, byte by byte, or split at cut. */
static void
fuzz_hops(const char *p, size_t n, size_t cut)
{
    struct smtp_hops whole, split, bytes;
    size_t           i;

    smtp_hops_init(&whole);
    smtp_hops_feed(&whole, p, n);
    smtp_hops_init(&split);
    smtp_hops_feed(&split, p, cut);
    smtp_hops_feed(&split, p + cut, n - cut);
    smtp_hops_init(&bytes);
    for (i = 0; i < n; i++)
        smtp_hops_feed(&bytes, p + i, 1);
    if (split.hops != whole.hops || bytes.hops != whole.hops ||
        smtp_hops_tls_no(&split) != smtp_hops_tls_no(&whole) ||
        smtp_hops_tls_no(&bytes) != smtp_hops_tls_no(&whole) ||
        smtp_hops_done(&split) != smtp_hops_done(&whole) ||
        smtp_hops_done(&bytes) != smtp_hops_done(&whole))
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    const char *nl;
    char       *line, *all;
    size_t      n;

    if (size == 0)
        return 0;
    /* The first line is a command line; the whole input is DATA. */
    nl = memchr(p, '\n', size);
    n = nl != NULL ? (size_t)(nl - p) : size;
    if (n > SMTP_LINE_MAX)
        n = SMTP_LINE_MAX;
    /* Exact-size copies so that ASan sees any read past the end. */
    line = malloc(n ? n : 1);
    all = malloc(size);
    if (line == NULL || all == NULL)
        abort();
    memcpy(line, p, n);
    memcpy(all, p, size);
    fuzz_parsers(line, n);
    fuzz_data(all, size, data[0] % (size + 1));
    fuzz_hops(all, size, data[0] % (size + 1));
    free(line);
    free(all);
    return 0;
}
