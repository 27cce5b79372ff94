/*
 * fuzz_dsn.c - libFuzzer target over what delivery makes of a message's
 * bytes and its spooled envelope (delivery/dsn.c, delivery/maildir.c):
 * the failure DSN built from an envelope and state file read back from
 * the spool, the header section of the original message that RET=HDRS
 * returns, and the CRLF -> LF conversion of a Maildir delivery.
 *
 * Input: byte 0 holds the flags (bit 0: the whole original, else its
 * headers; the rest: a split point); then an envelope file
 * (spool_env_parse(), as fuzz_env's seeds), right after it a state file
 * up to and including its first "end\n" line (spool_state_parse(); a
 * refused one is left out), and the rest is the original message.  Every recipient is then taken as
 * bounced and not yet reported (its notify bits kept), so the DSN
 * carries the addresses, ORCPT, ENVID, relay and last reply the files
 * gave.
 *
 * Checks: dsn_build() is dsn_build_head() + the original + the tail; the
 * part dsn_build_head() writes (fields and text made from the envelope)
 * is CRLF lines without any other control byte except the TAB of the one
 * folded field, and as many lines as the same DSN made with harmless
 * values (each string "x"), so nothing in a spool file or a peer's reply
 * can start a header or a MIME part of its own; dsn_headers_len() agrees
 * with a naive reference; maildir_unix_lines() gives the same bytes
 * whole and split, and the same as a reference (CRLF -> LF, any other CR
 * kept).  Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "delivery/dsn.h"
#include "delivery/maildir.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ref_headers_len - the header section, the long way: up to and
 * including the line end before the first empty line, else all. */
static size_t
ref_headers_len(const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        int bol = i == 0 || p[i - 1] == '\n';

        if (bol && (p[i] == '\n' || (p[i] == '\r' && i + 1 < n &&
            p[i + 1] == '\n')))
            return i;
    }
    return n;
}


static void
fuzz_maildir(const char *p, size_t n, size_t cut)
{
    char  *whole = malloc(n + 2), *split = malloc(n + 2), *ref = malloc(n + 1);
    size_t a, b, r = 0, i;
    int    cr = 0;

    if (whole == NULL || split == NULL || ref == NULL)
        abort();
    a = maildir_unix_lines(p, n, &cr, whole);
    if (cr)
        whole[a++] = '\r';              /* as maildir_copy() ends */
    cr = 0;
    b = maildir_unix_lines(p, cut, &cr, split);
    b += maildir_unix_lines(p + cut, n - cut, &cr, split + b);
    if (cr)
        split[b++] = '\r';
    for (i = 0; i < n; i++)
        if (!(p[i] == '\r' && i + 1 < n && p[i + 1] == '\n'))
            ref[r++] = p[i];
    if (a != r || b != r || memcmp(whole, ref, r) != 0 ||
        memcmp(split, ref, r) != 0)
        abort();
    free(whole);
    free(split);
    free(ref);
}


/* The envelope's part of the DSN: CRLF lines, no other control byte but
 * the TAB that folds Content-Type. */
static void
fuzz_head_clean(const char *p, size_t n)
{
    size_t i;

    if (n < 4 || memcmp(p + n - 4, "\r\n\r\n", 4) != 0)
        abort();
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];

        if (c == '\r' && i + 1 < n && p[i + 1] == '\n')
            i++;
        else if (c == '\t' && i > 0 && p[i - 1] == '\n')
            continue;
        else if (c < 0x20 || c == 0x7f)
            abort();
    }
}


static size_t
fuzz_lines(const char *p, size_t n)
{
    size_t i, k = 0;

    for (i = 0; i < n; i++)
        k += p[i] == '\n';
    return k;
}


/* fuzz_shape_str - a value without line ends that has the same effect on
 * the DSN's layout: NULL and "" stay, anything else becomes "x". */
static char *
fuzz_shape_str(const char *s)
{
    return s == NULL ? NULL : (char *)(s[0] == '\0' ? "" : "x");
}


/* fuzz_shape - e with every string replaced by one of the same layout:
 * a relay keeps whether dsn.c finds a "host[" in it. */
static void
fuzz_shape(const struct spool_env *e, struct spool_env *s,
    struct spool_rcpt *r)
{
    size_t i;

    *s = *e;
    s->sender = fuzz_shape_str(e->sender);
    s->envid = fuzz_shape_str(e->envid);
    s->rcpt = r;
    for (i = 0; i < e->nrcpt; i++) {
        const char *rl = e->rcpt[i].relay, *b;

        r[i] = e->rcpt[i];
        r[i].addr = fuzz_shape_str(e->rcpt[i].addr);
        r[i].orcpt = fuzz_shape_str(e->rcpt[i].orcpt);
        r[i].last_reply = fuzz_shape_str(e->rcpt[i].last_reply);
        r[i].tls = NULL;
        b = rl != NULL ? strchr(rl, '[') : NULL;
        r[i].relay = rl == NULL ? NULL : b != NULL && b > rl && b - rl < 300 ?
            (char *)"h[x]" : (char *)"x";
    }
}


static void
fuzz_dsn(struct spool_env *e, const char *orig, size_t olen, int full)
{
    struct dsn_info    in;
    struct spool_env   shape;
    struct spool_rcpt *shape_r;
    struct buf         one, two, ref;
    size_t             head;
    int             ended;

    memset(&in, 0, sizeof(in));
    in.env = e;
    in.hostname = "mx.example";
    in.now_ms = 1796016000000ULL;
    in.orig = orig;
    in.orig_len = olen;
    in.full = full;
    buf_init(&one);
    buf_init(&two);
    dsn_build(&in, &one);
    dsn_build_head(&in, &two);
    head = two.len;
    buf_append(&two, orig, olen);
    ended = olen == 0 || orig[olen - 1] == '\n';
    dsn_build_tail(&in, ended, &two);
    if (one.len != two.len || memcmp(one.data, two.data, one.len) != 0)
        abort();
    fuzz_head_clean(two.data, head);
    /* no value adds a line: the same count as with harmless values */
    shape_r = malloc((e->nrcpt ? e->nrcpt : 1) * sizeof(*shape_r));
    if (shape_r == NULL)
        abort();
    fuzz_shape(e, &shape, shape_r);
    in.env = &shape;
    buf_init(&ref);
    dsn_build_head(&in, &ref);
    if (fuzz_lines(two.data, head) != fuzz_lines(ref.data, ref.len))
        abort();
    buf_free(&ref);
    free(shape_r);
    if (dsn_count(e) > e->nrcpt)
        abort();
    buf_free(&one);
    buf_free(&two);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct spool_env *e = NULL;
    const char       *end;
    char             *p;
    size_t            n, used = 0, cut, slen;

    if (size < 1)
        return 0;
    n = size - 1;
    p = malloc(n ? n : 1);              /* exact size: ASan sees overreads */
    if (p == NULL)
        abort();
    memcpy(p, data + 1, n);
    cut = (size_t)(data[0] >> 1) % (n + 1);
    if (ref_headers_len(p, n) != dsn_headers_len(p, n))
        abort();
    fuzz_maildir(p, n, cut);
    if (spool_env_parse(p, n, &e, &used) == SPOOL_OK) {
        /* the state file: up to its first "end" line */
        end = memmem(p + used, n - used, "end\n", 4);
        slen = end != NULL ? (size_t)(end - (p + used)) + 4 : 0;
        if (slen > 0 && spool_state_parse(p + used, slen, e) != SPOOL_OK) {
            /* a refused state leaves e only fit for freeing: the
             * envelope alone then (as spool.c marks state_damaged) */
            spool_env_free(e);
            e = NULL;
            if (spool_env_parse(p, n, &e, &used) != SPOOL_OK)
                abort();
        }
        for (size_t i = 0; i < e->nrcpt; i++) {
            e->rcpt[i].status = SPOOL_RCPT_BOUNCED;
            e->rcpt[i].notified = 0;
        }
        fuzz_dsn(e, p + used + slen, n - used - slen, data[0] & 1);
        spool_env_free(e);
    }
    free(p);
    return 0;
}
