/*
 * test_smtp_data.c - the DATA byte machine: end-of-data detection, dot-
 * unstuffing at every buffer split position, one byte at a time and in
 * random chunks (fixed seed), every SMTP smuggling variant, bare CR/LF
 * flags, *used after the end, emit() errors, a 1 MB dotted message, and a
 * comparison with a naive byte-by-byte reference model.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "smtp/smtp.h"

/* Output collector: emit() appends here. */
struct sink {
    char   *p;
    size_t  n, cap;
    size_t  calls;
    int     fail_at;            /* >0: return -7 on that call number */
};

static int
sink_emit(void *arg, const char *p, size_t n)
{
    struct sink *s = arg;

    s->calls++;
    if (s->fail_at > 0 && (size_t)s->fail_at == s->calls)
        return -7;
    cr_assert_gt(n, 0, "emit with an empty span");
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2;
        s->p = realloc(s->p, s->cap);
        cr_assert_not_null(s->p);
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
    return 0;
}

/* Result of feeding one input in some chunking. */
struct run {
    struct sink out;
    int         rc;             /* last feed result */
    size_t      end;            /* input offset after the end (rc == 1) */
    int         bad;
    uint64_t    size;
};

static void
run_free(struct run *r)
{
    free(r->out.p);
}

/*
 * Feed in[0..n) in chunks whose sizes come from next_chunk(); stop at the
 * end of data.  Chunks are copied to a fresh heap block each so that spans
 * pointing into an old chunk would be caught by ASan (and never reused).
 */
static struct run
feed_chunks(const char *in, size_t n, size_t (*next_chunk)(void *, size_t),
    void *ctx, int accept_bare)
{
    struct smtp_data d;
    struct run r;
    size_t off = 0, used, len;

    memset(&r, 0, sizeof(r));
    smtp_data_init(&d, accept_bare);
    r.rc = 0;
    while (off < n) {
        len = next_chunk(ctx, n - off);
        if (len > n - off)
            len = n - off;
        char *chunk = malloc(len ? len : 1);
        cr_assert_not_null(chunk);
        memcpy(chunk, in + off, len);
        r.rc = smtp_data_feed(&d, chunk, len, &used, sink_emit, &r.out);
        free(chunk);
        cr_assert_geq(r.rc, 0);
        cr_assert_leq(used, len);
        if (r.rc == 1) {
            r.end = off + used;
            break;
        }
        cr_assert_eq(used, len, "rc 0 must consume everything");
        off += len;
    }
    r.bad = d.bad_newline;
    r.size = d.size;
    cr_assert_eq(r.size, r.out.n, "size counts emitted bytes");
    return r;
}

static size_t
chunk_whole(void *ctx, size_t left)
{
    (void)ctx;
    return left;
}

static size_t
chunk_one(void *ctx, size_t left)
{
    (void)ctx;
    (void)left;
    return 1;
}

/* Split once at *k: first chunk k bytes, then the rest. */
static size_t
chunk_split(void *ctx, size_t left)
{
    size_t *k = ctx, r;

    if (*k == SIZE_MAX)
        return left;
    r = *k;
    *k = SIZE_MAX;
    return r;
}

/* Deterministic xorshift for random chunk sizes. */
static uint64_t
rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

struct rchunk {
    uint64_t seed;
    size_t   max;
};

static size_t
chunk_random(void *ctx, size_t left)
{
    struct rchunk *c = ctx;

    (void)left;
    return (size_t)(rnd(&c->seed) % c->max) + 1;
}

static void
expect_same(const struct run *a, const struct run *b, const char *what)
{
    cr_expect_eq(a->rc, b->rc, "%s: rc %d vs %d", what, a->rc, b->rc);
    cr_expect_eq(a->end, b->end, "%s: end %zu vs %zu", what, a->end, b->end);
    cr_expect_eq(a->bad, b->bad, "%s: bad %d vs %d", what, a->bad, b->bad);
    cr_expect(a->out.n == b->out.n &&
        (a->out.n == 0 || memcmp(a->out.p, b->out.p, a->out.n) == 0),
        "%s: output differs (%zu vs %zu bytes)", what, a->out.n, b->out.n);
}

/*
 * Feed in every way (whole, every split k, one byte, random chunks) and
 * check each against the whole-buffer result, which must itself equal
 * want/want_rc/want_end/want_bad.
 */
static void
check_all_splits(const char *in, size_t n, const char *want, size_t want_n,
    int want_rc, size_t want_end, int want_bad)
{
    struct run whole, r;
    size_t k, kk, i;
    char what[64];

    whole = feed_chunks(in, n, chunk_whole, NULL, 0);
    cr_expect_eq(whole.rc, want_rc, "rc %d want %d", whole.rc, want_rc);
    if (want_rc == 1)
        cr_expect_eq(whole.end, want_end, "end %zu want %zu", whole.end,
            want_end);
    cr_expect_eq(whole.bad, want_bad, "bad %d want %d", whole.bad, want_bad);
    cr_expect(whole.out.n == want_n &&
        (want_n == 0 || memcmp(whole.out.p, want, want_n) == 0),
        "output: got %zu bytes \"%.*s\", want %zu", whole.out.n,
        (int)(whole.out.n < 200 ? whole.out.n : 200), whole.out.p, want_n);
    for (k = 0; k <= n; k++) {
        kk = k;
        r = feed_chunks(in, n, chunk_split, &kk, 0);
        snprintf(what, sizeof(what), "split at %zu", k);
        expect_same(&whole, &r, what);
        run_free(&r);
    }
    r = feed_chunks(in, n, chunk_one, NULL, 0);
    expect_same(&whole, &r, "one byte at a time");
    run_free(&r);
    for (i = 0; i < 20; i++) {
        struct rchunk rc = { 0x9e3779b97f4a7c15ULL + i, 1 + i % 7 };
        r = feed_chunks(in, n, chunk_random, &rc, 0);
        snprintf(what, sizeof(what), "random chunks seed %zu", i);
        expect_same(&whole, &r, what);
        run_free(&r);
    }
    /* accept_bare changes nothing in the scanner's output. */
    r = feed_chunks(in, n, chunk_whole, NULL, 1);
    expect_same(&whole, &r, "accept_bare");
    run_free(&r);
    run_free(&whole);
}

#define CHECK(in, want, rc, end, bad) \
    check_all_splits(in, sizeof(in) - 1, want, sizeof(want) - 1, rc, end, bad)

Test(smtp_data, simple)
{
    CHECK("Hello\r\n.\r\n", "Hello\r\n", 1, 10, 0);
    CHECK("Subject: x\r\n\r\nbody\r\n.\r\n", "Subject: x\r\n\r\nbody\r\n",
        1, 23, 0);
    CHECK("\r\n.\r\n", "\r\n", 1, 5, 0);
}

Test(smtp_data, empty_message_at_start)
{
    CHECK(".\r\n", "", 1, 3, 0);
    CHECK(".\r\nMAIL FROM:<a@b>\r\n", "", 1, 3, 0);
}

Test(smtp_data, dot_unstuffing)
{
    CHECK("..\r\n.\r\n", ".\r\n", 1, 7, 0);
    CHECK("..a\r\n.b\r\n..\r\n...\r\nx.y\r\n .z\r\n.\r\n",
        ".a\r\nb\r\n.\r\n..\r\nx.y\r\n .z\r\n", 1, 31, 0);
    CHECK("a\r\n..\r\n..\r\n.\r\n", "a\r\n.\r\n.\r\n", 1, 14, 0);
    CHECK("....\r\n.\r\n", "...\r\n", 1, 9, 0);
    /* a lone dot line at the start of the content needs stuffing too */
    CHECK("..\r\n", ".\r\n", 0, 0, 0);
}

Test(smtp_data, incomplete_input_holds_back)
{
    /* No end yet: everything but the held "." / ".\r" is emitted. */
    CHECK("abc\r\n.", "abc\r\n", 0, 0, 0);
    CHECK("abc\r\n.\r", "abc\r\n", 0, 0, 0);
    CHECK("abc\r", "abc\r", 0, 0, 0);
    CHECK("abc\r\n", "abc\r\n", 0, 0, 0);
    CHECK(".", "", 0, 0, 0);
    CHECK("", "", 0, 0, 0);
}

/* --- smuggling: none of these may end the data ------------------------ */

Test(smtp_data, smuggle_lf_dot_lf)
{
    CHECK("a\n.\nMAIL FROM:<x@y>\r\n.\r\n",
        "a\n.\nMAIL FROM:<x@y>\r\n", 1, 24, 1);
    CHECK("a\r\n\n.\nb\r\n.\r\n", "a\r\n\n.\nb\r\n", 1, 12, 1);
}

Test(smtp_data, smuggle_lf_dot_crlf)
{
    CHECK("a\n.\r\nMAIL FROM:<x@y>\r\n.\r\n",
        "a\n.\r\nMAIL FROM:<x@y>\r\n", 1, 25, 1);
    CHECK("a\r\n\n.\r\nb\r\n.\r\n", "a\r\n\n.\r\nb\r\n", 1, 13, 1);
    CHECK("\n.\r\nb\r\n.\r\n", "\n.\r\nb\r\n", 1, 10, 1);
}

Test(smtp_data, smuggle_cr_dot_crlf)
{
    CHECK("a\r.\r\nMAIL FROM:<x@y>\r\n.\r\n",
        "a\r.\r\nMAIL FROM:<x@y>\r\n", 1, 25, 1);
    CHECK("\r.\r\nb\r\n.\r\n", "\r.\r\nb\r\n", 1, 10, 1);
}

Test(smtp_data, smuggle_crlf_dot_cr)
{
    /* The dot is a line-leading dot (removed); the CR is content. */
    CHECK("a\r\n.\rMAIL FROM:<x@y>\r\n.\r\n",
        "a\r\n\rMAIL FROM:<x@y>\r\n", 1, 25, 1);
    CHECK("a\r\n.\r\rb\r\n.\r\n", "a\r\n\r\rb\r\n", 1, 12, 1);
    CHECK("a\r\n.\r.\r\n.\r\n", "a\r\n\r.\r\n", 1, 11, 1);
    CHECK(".\rx\r\n.\r\n", "\rx\r\n", 1, 8, 1);
}

Test(smtp_data, smuggle_crlf_dot_lf)
{
    CHECK("a\r\n.\nMAIL FROM:<x@y>\r\n.\r\n",
        "a\r\n\nMAIL FROM:<x@y>\r\n", 1, 25, 1);
    CHECK(".\nb\r\n.\r\n", "\nb\r\n", 1, 8, 1);
}

Test(smtp_data, smuggle_never_ends_without_crlf_dot_crlf)
{
    /* Each variant alone, with no real end after it: still waiting. */
    static const char *v[] = {
        "a\n.\n", "a\n.\r\n", "a\r.\r\n", "a\r\n.\r", "a\r\n.\n",
        "a\n.\nb", "a\n.\r\nb", "a\r.\r\nb", "a\r\n.\rb", "a\r\n.\nb",
        "\n.\n", "\n.\r\n", "\r.\r\n", ".\n", ".\rb", "\r\n.\r\r\n",
    };
    size_t i;

    for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        struct run r = feed_chunks(v[i], strlen(v[i]), chunk_whole, NULL, 1);
        cr_expect_eq(r.rc, 0, "variant %zu must not end the data", i);
        /* ".\r" at the very end is still undecided: no flag yet. */
        cr_expect_eq(r.bad, v[i][strlen(v[i]) - 1] != '\r',
            "variant %zu bare-newline flag", i);
        run_free(&r);
        r = feed_chunks(v[i], strlen(v[i]), chunk_one, NULL, 1);
        cr_expect_eq(r.rc, 0, "variant %zu (bytewise) must not end", i);
        run_free(&r);
    }
}

/* --- bare newline flags ----------------------------------------------- */

Test(smtp_data, bare_newlines)
{
    CHECK("a\r\nb\r\n.\r\n", "a\r\nb\r\n", 1, 9, 0);
    CHECK("a\nb\r\n.\r\n", "a\nb\r\n", 1, 8, 1);
    CHECK("a\rb\r\n.\r\n", "a\rb\r\n", 1, 8, 1);
    CHECK("a\r\r\n.\r\n", "a\r\r\n", 1, 7, 1);
    CHECK("\na\r\n.\r\n", "\na\r\n", 1, 7, 1);
    CHECK("ab\r", "ab\r", 0, 0, 0);         /* undecided yet */
    CHECK("ab\rc", "ab\rc", 0, 0, 1);
    CHECK("a\r\n\r\n.\r\n", "a\r\n\r\n", 1, 8, 0);
    CHECK("\r\n\r\n\r\n.\r\n", "\r\n\r\n\r\n", 1, 9, 0);
}

/* --- end position and what follows ------------------------------------ */

Test(smtp_data, used_stops_after_final_crlf)
{
    static const char in[] = "a\r\n..b\r\n.\r\nQUIT\r\n";
    struct smtp_data d;
    struct sink s = { 0 };
    size_t used = 99;
    int rc;

    CHECK("a\r\n..b\r\n.\r\nQUIT\r\n", "a\r\n.b\r\n", 1, 11, 0);
    smtp_data_init(&d, 0);
    rc = smtp_data_feed(&d, in, sizeof(in) - 1, &used, sink_emit, &s);
    cr_expect_eq(rc, 1);
    cr_expect_eq(used, 11);
    cr_expect_str_eq(in + used, "QUIT\r\n");
    /* Once done, further input is not consumed. */
    rc = smtp_data_feed(&d, "x", 1, &used, sink_emit, &s);
    cr_expect_eq(rc, 1);
    cr_expect_eq(used, 0);
    cr_expect_eq(s.n, 7);
    free(s.p);
}

Test(smtp_data, second_dot_line_after_end_untouched)
{
    /* Pipelined junk after the end stays for the command parser. */
    CHECK("x\r\n.\r\n.\r\n", "x\r\n", 1, 6, 0);
    CHECK(".\r\n.\r\n", "", 1, 3, 0);
}

Test(smtp_data, emit_error_stops)
{
    static const char in[] = "a\r\n.b\r\n.\r\n";
    struct smtp_data d;
    struct sink s = { 0 };
    size_t used;
    int rc;

    smtp_data_init(&d, 0);
    s.fail_at = 1;
    rc = smtp_data_feed(&d, in, sizeof(in) - 1, &used, sink_emit, &s);
    cr_expect_eq(rc, -7);
    cr_expect_eq(s.n, 0);
    free(s.p);
}

Test(smtp_data, static_cr_across_buffers)
{
    /* ".\r" ends one buffer, "x" starts the next: the CR comes from
     * static storage. */
    struct smtp_data d;
    struct sink s = { 0 };
    size_t used;

    smtp_data_init(&d, 0);
    cr_expect_eq(smtp_data_feed(&d, "a\r\n.\r", 5, &used, sink_emit, &s), 0);
    cr_expect_eq(s.n, 3);
    cr_expect_eq(smtp_data_feed(&d, "x\r\n.\r\n", 6, &used, sink_emit, &s), 1);
    cr_expect_eq(used, 6);
    cr_expect_eq(s.n, 7);
    cr_expect(memcmp(s.p, "a\r\n\rx\r\n", 7) == 0);
    cr_expect_eq(d.bad_newline, 1);
    free(s.p);
}

Test(smtp_data, large_spans)
{
    /* A clean message in one buffer is emitted in very few spans. */
    static const char in[] = "line one\r\nline two\r\nline three\r\n.\r\n";
    struct smtp_data d;
    struct sink s = { 0 };
    size_t used;

    smtp_data_init(&d, 0);
    cr_expect_eq(smtp_data_feed(&d, in, sizeof(in) - 1, &used, sink_emit,
        &s), 1);
    cr_expect_eq(s.calls, 1, "one span, got %zu", s.calls);
    free(s.p);
}

/* --- naive reference model, compared on random inputs ----------------- */

static int
ref_scan(const char *in, size_t n, char *out, size_t *outn, size_t *end,
    int *bad)
{
    size_t i = 0, o = 0, j, lim;
    int rc = 0;

    *end = 0;
    while (i < n) {
        int bol = i == 0 || (i >= 2 && in[i - 2] == '\r' && in[i - 1] == '\n');
        if (bol && in[i] == '.') {
            if (i + 2 < n && in[i + 1] == '\r' && in[i + 2] == '\n') {
                *end = i + 3;
                rc = 1;
                break;
            }
            if (i + 1 >= n || (in[i + 1] == '\r' && i + 2 >= n))
                break;              /* held back, undecided */
            i++;                    /* drop the leading dot */
            continue;
        }
        out[o++] = in[i++];
    }
    *outn = o;
    lim = rc ? *end : n;
    *bad = 0;
    for (j = 0; j < lim; j++) {
        if (in[j] == '\r' && j + 1 < lim && in[j + 1] != '\n')
            *bad = 1;
        if (in[j] == '\n' && (j == 0 || in[j - 1] != '\r'))
            *bad = 1;
    }
    return rc;
}

Test(smtp_data, random_vs_reference)
{
    static const char alpha[] = "\r\n.a";
    uint64_t seed = 0x1234567890abcdefULL;
    char in[48], want[48];
    size_t iter, n, i, wantn, end;
    int rc, bad;

    for (iter = 0; iter < 20000; iter++) {
        n = rnd(&seed) % sizeof(in);
        for (i = 0; i < n; i++)
            in[i] = alpha[rnd(&seed) % 4];
        rc = ref_scan(in, n, want, &wantn, &end, &bad);
        struct run whole = feed_chunks(in, n, chunk_whole, NULL, 0);
        struct rchunk c = { seed | 1, 5 };
        struct run rr = feed_chunks(in, n, chunk_random, &c, 0);
        struct run one = feed_chunks(in, n, chunk_one, NULL, 0);

        cr_assert_eq(whole.rc, rc, "iter %zu rc", iter);
        if (rc == 1)
            cr_assert_eq(whole.end, end, "iter %zu end", iter);
        cr_assert_eq(whole.bad, bad, "iter %zu bad", iter);
        cr_assert(whole.out.n == wantn &&
            (wantn == 0 || memcmp(whole.out.p, want, wantn) == 0),
            "iter %zu output", iter);
        expect_same(&whole, &rr, "random chunks");
        expect_same(&whole, &one, "one byte");
        run_free(&whole);
        run_free(&rr);
        run_free(&one);
    }
}

/* --- a 1 MB message with many dotted lines ---------------------------- */

Test(smtp_data, one_megabyte_dotted)
{
    size_t cap = (1u << 20) + 4096, n = 0, wn = 0, len, i;
    char *in = malloc(cap), *want = malloc(cap);
    uint64_t seed = 42;
    unsigned line = 0;

    cr_assert(in != NULL && want != NULL);
    while (n < (1u << 20)) {
        /* Every third line starts with one or more dots (stuffed). */
        size_t dots = line % 3 == 0 ? 1 + rnd(&seed) % 3 : 0;
        len = rnd(&seed) % 100;
        in[n++] = dots ? '.' : 'x';         /* stuffing dot or text */
        if (!dots)
            want[wn++] = 'x';
        for (i = 0; i < dots; i++) {
            in[n++] = '.';
            want[wn++] = '.';
        }
        for (i = 0; i < len; i++) {
            char c = (char)('a' + rnd(&seed) % 26);
            if (i % 17 == 5)
                c = '.';
            in[n++] = c;
            want[wn++] = c;
        }
        memcpy(in + n, "\r\n", 2);
        memcpy(want + wn, "\r\n", 2);
        n += 2;
        wn += 2;
        line++;
    }
    memcpy(in + n, ".\r\nNOOP\r\n", 9);
    n += 9;

    struct run whole = feed_chunks(in, n, chunk_whole, NULL, 0);
    cr_expect_eq(whole.rc, 1);
    cr_expect_eq(whole.end, n - 6);
    cr_expect_eq(whole.bad, 0);
    cr_expect(whole.out.n == wn && memcmp(whole.out.p, want, wn) == 0,
        "1 MB output differs (%zu vs %zu)", whole.out.n, wn);
    for (i = 0; i < 4; i++) {
        struct rchunk c = { 1000 + i, i == 0 ? 7 : 65536 };
        struct run r = feed_chunks(in, n, chunk_random, &c, 0);
        expect_same(&whole, &r, "1 MB random chunks");
        run_free(&r);
    }
    /* Every split position among the dotted lines of the first lines. */
    for (i = 0; i < 600; i++) {
        size_t k = i;
        struct run r = feed_chunks(in, n, chunk_split, &k, 0);
        expect_same(&whole, &r, "1 MB split");
        run_free(&r);
    }
    run_free(&whole);
    free(in);
    free(want);
}


/* bare_split - smtp_data_bare over in, cut at `cut`; 1 = bare found. */
static int
bare_split(const char *in, size_t n, size_t cut)
{
    int cr = 0;

    if (smtp_data_bare(&cr, in, cut) || smtp_data_bare(&cr, in + cut, n - cut))
        return 1;
    return cr;                          /* a CR pending at the end is bare */
}


/* The BDAT path's bare-newline check, at every split. */
Test(smtp_data, bare_check_for_bdat)
{
    static const struct { const char *in; int bare; } cases[] = {
        { "", 0 }, { "a\r\nb\r\n", 0 }, { "\r\n\r\n.\r\n", 0 },
        { "line1\r.\r\nMAIL FROM:<a@b>\r\n", 1 }, { "a\nb\r\n", 1 },
        { "a\r\nb\r", 1 }, { "\n", 1 }, { "\r", 1 }, { "a\r\r\n", 1 },
        { "x\r\n\n", 1 },
    };
    size_t i, cut, n;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        n = strlen(cases[i].in);
        for (cut = 0; cut <= n; cut++)
            cr_assert_eq(bare_split(cases[i].in, n, cut), cases[i].bare,
                "case %zu cut %zu", i, cut);
    }
}
