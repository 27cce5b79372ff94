/*
 * test_dkim.c - the DKIM signer: relaxed body and header canonicalisation
 * (tables, RFC 6376 3.4.5's example, every split position, byte by byte),
 * the relaxed empty-body hash, bh= against an independent SHA-256 of the
 * expected canonical body, the streaming signer giving the same
 * (deterministic Ed25519) signature for every split of the message, the
 * announced length, From: domain choice (exact, parent, ambiguous), h=
 * with over-signing, the header-size limit, key checks and key generation.
 * Signatures themselves are verified by dkimpy in the integration tests.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "dkim/dkim.h"

/* --- helpers --------------------------------------------------------------- */

struct out {
    char   *p;
    size_t  n, cap;
};

static void
out_put(void *arg, const char *p, size_t n)
{
    struct out *o = arg;

    cr_assert_gt(n, 0, "out() with an empty piece");
    if (o->n + n + 1 > o->cap) {
        o->cap = (o->n + n + 1) * 2;
        o->p = realloc(o->p, o->cap);
        cr_assert_not_null(o->p);
    }
    memcpy(o->p + o->n, p, n);
    o->n += n;
    o->p[o->n] = '\0';
}

/* Canonicalise in[0..n) split at the given positions (sorted, <= n). */
static struct out
body_canon(const char *in, size_t n, const size_t *cuts, size_t ncuts)
{
    struct dkim_body b;
    struct out       o = { NULL, 0, 0 };
    size_t           i, at = 0;

    dkim_body_init(&b, out_put, &o);
    for (i = 0; i < ncuts; i++) {
        dkim_body_feed(&b, in + at, cuts[i] - at);
        at = cuts[i];
    }
    dkim_body_feed(&b, in + at, n - at);
    dkim_body_end(&b);
    return o;
}

static void
expect_bytes(const struct out *o, const char *want, size_t wn,
    const char *name, const char *how)
{
    cr_assert_eq(o->n, wn, "%s (%s): got %zu bytes '%.*s', want %zu '%s'",
        name, how, o->n, (int)o->n, o->p ? o->p : "", wn, want);
    cr_assert(wn == 0 || memcmp(o->p, want, wn) == 0,
        "%s (%s): got '%.*s', want '%s'", name, how, (int)o->n, o->p, want);
}

static char tmpdir[] = "/tmp/test_dkim.XXXXXX";
/* Whether mkdtemp() ran: its random suffix may itself end in 'X'. */
static int  tmpdir_made;

/* A fresh key file of the algorithm; its path in a static buffer. */
static const char *
key_file(const char *name, int alg, int bits)
{
    static char path[256];
    EVP_PKEY   *pk;
    FILE       *f;

    if (!tmpdir_made) {
        cr_assert_not_null(mkdtemp(tmpdir));
        tmpdir_made = 1;
    }
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    pk = alg == DKIM_RSA_SHA256 ?
        EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)bits) :
        EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
    cr_assert_not_null(pk);
    cr_assert_not_null(f = fopen(path, "w"));
    cr_assert_eq(PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
    EVP_PKEY_free(pk);
    return path;
}

/* Each test is a process of its own: remove its key files at the end. */
static void
cleanup(void)
{
    struct dirent *e;
    char           path[512];
    DIR           *d;

    if (!tmpdir_made || (d = opendir(tmpdir)) == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(tmpdir);
}

TestSuite(dkim_sign, .fini = cleanup);
TestSuite(dkim_keys, .fini = cleanup);

static struct dkim_keys *
keys_with(const char *const *domains, size_t n, int alg)
{
    struct dkim_keys *ks = dkim_keys_new();
    char              err[512], name[64];
    size_t            i;

    cr_assert_not_null(ks);
    for (i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "k%zu.pem", i);
        cr_assert_eq(dkim_keys_add(ks, domains[i], "s1",
            key_file(name, alg, 2048), alg, err, sizeof(err)), DKIM_OK,
            "%s", err);
    }
    return ks;
}

/* Sign msg[0..n) fed in pieces ending at cuts[], preparing as the session
 * does (as soon as the header section is complete, else at the end).
 * Returns the block (malloc'd, NUL-ended) or NULL with *rc. */
static char *
sign_split(const struct dkim_keys *ks, const char *msg, size_t n,
    const size_t *cuts, size_t ncuts, int *rc)
{
    struct dkim_sign *c = dkim_sign_begin(ks, 1700000000);
    size_t            i, at = 0, len = 0;
    int               prepared = 0;
    char             *out;

    cr_assert_not_null(c);
    *rc = DKIM_OK;
    for (i = 0; i <= ncuts; i++) {
        size_t to = i < ncuts ? cuts[i] : n;

        dkim_sign_feed(c, msg + at, to - at);
        at = to;
        if (!prepared && dkim_sign_header_done(c)) {
            prepared = 1;
            if ((*rc = dkim_sign_prepare(c, &len)) != DKIM_OK)
                break;
        }
    }
    if (!prepared && *rc == DKIM_OK)
        *rc = dkim_sign_prepare(c, &len);
    if (*rc != DKIM_OK) {
        dkim_sign_free(c);
        return NULL;
    }
    out = calloc(1, len + 1);
    cr_assert_not_null(out);
    *rc = dkim_sign_end(c, out, len);
    cr_assert_eq(*rc, DKIM_OK, "end: %s", dkim_strerror(*rc));
    cr_assert_eq(strlen(out), len, "wrote fewer bytes than announced");
    dkim_sign_free(c);
    return out;
}

static char *
sign_whole(const struct dkim_keys *ks, const char *msg, int *rc)
{
    return sign_split(ks, msg, strlen(msg), NULL, 0, rc);
}

/* The value of tag t ("bh", "h", ...) with folding whitespace removed. */
static char *
tag_value(const char *sig, const char *t)
{
    char        pat[16], *v, *o;
    const char *p = sig, *e;

    snprintf(pat, sizeof(pat), "%s=", t);
    for (;;) {
        p = strstr(p, pat);
        cr_assert_not_null(p, "no %s= in %s", t, sig);
        if (p[-1] == ' ' || p[-1] == '\t' || p[-1] == ';')
            break;
        p++;
    }
    p += strlen(pat);
    e = strchr(p, ';');
    if (e == NULL)
        e = p + strlen(p);
    v = o = calloc(1, (size_t)(e - p) + 1);
    for (; p < e; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
            *o++ = *p;
    return v;
}

/* --- body canonicalisation ----------------------------------------------- */

static const struct {
    const char *name, *in, *want;
} body_cases[] = {
    { "empty", "", "" },
    { "one empty line", "\r\n", "" },
    { "only empty lines", "\r\n\r\n\r\n", "" },
    { "only whitespace lines", "  \r\n\t\r\n \t \r\n", "" },
    { "no final CRLF", "abc", "abc\r\n" },
    { "one line", "abc\r\n", "abc\r\n" },
    { "trailing empty lines", "abc\r\n\r\n\r\n", "abc\r\n" },
    { "inner whitespace runs", "a  b\t\tc \t d\r\n", "a b c d\r\n" },
    { "trailing whitespace", "abc \t \r\n", "abc\r\n" },
    { "leading whitespace kept as one", "  \tlead\r\n", " lead\r\n" },
    { "whitespace-only inner line", "a\r\n   \r\nb\r\n", "a\r\n\r\nb\r\n" },
    { "inner empty lines kept", "a\r\n\r\n\r\nb\r\n", "a\r\n\r\n\r\nb\r\n" },
    { "RFC 6376 3.4.5", " C \r\nD \t E\r\n\r\n\r\n", " C\r\nD E\r\n" },
    { "bare LF is a line end", "a\nb  \n\n", "a\r\nb\r\n" },
    { "bare CR is content", "a\rb\r\n", "a\rb\r\n" },
    { "space before bare CR", "a \rb \r\n", "a \rb\r\n" },
    { "CR CR LF", "a\r\r\n", "a\r\r\n" },
    { "ends in a bare CR", "x\r", "x\r\r\n" },
    { "8-bit bytes", "\xff\xfe \xa0\x80\r\n", "\xff\xfe \xa0\x80\r\n" },
    { "dot lines", ".\r\n..\r\n", ".\r\n..\r\n" },
};

Test(dkim_body, relaxed_table_whole_split_and_bytewise)
{
    size_t i, k, n, cuts[4096];
    struct out o;

    for (i = 0; i < sizeof(body_cases) / sizeof(body_cases[0]); i++) {
        const char *in = body_cases[i].in, *want = body_cases[i].want;

        n = strlen(in);
        o = body_canon(in, n, NULL, 0);
        expect_bytes(&o, want, strlen(want), body_cases[i].name, "whole");
        free(o.p);
        for (k = 0; k <= n; k++) {          /* every split position */
            cuts[0] = k;
            o = body_canon(in, n, cuts, 1);
            expect_bytes(&o, want, strlen(want), body_cases[i].name,
                "split");
            free(o.p);
        }
        for (k = 0; k < n; k++)             /* byte by byte */
            cuts[k] = k;
        o = body_canon(in, n, cuts, n);
        expect_bytes(&o, want, strlen(want), body_cases[i].name, "bytes");
        free(o.p);
    }
}

Test(dkim_body, many_empty_lines_before_content_all_come_out)
{
    size_t     n = 100000, i;
    char      *in = malloc(2 * n + 4);
    struct out o;

    cr_assert_not_null(in);
    for (i = 0; i < n; i++)
        memcpy(in + 2 * i, "\r\n", 2);
    memcpy(in + 2 * n, "x\r\n", 3);
    o = body_canon(in, 2 * n + 3, NULL, 0);
    cr_assert_eq(o.n, 2 * n + 3);
    cr_assert(memcmp(o.p, in, o.n) == 0);
    free(o.p);
    free(in);
}

/* --- header canonicalisation --------------------------------------------- */

static const struct {
    const char *in, *want;
} hdr_cases[] = {
    { "SubJect: AbC\r\n", "subject:AbC\r\n" },
    { "A: X\r\n", "a:X\r\n" },                      /* RFC 6376 3.4.5 */
    { "B : Y\t\r\n\tZ  \r\n", "b:Y Z\r\n" },
    { "From:\r\n  x@y\r\n", "from:x@y\r\n" },
    { "Subject:    \r\n", "subject:\r\n" },
    { "Subject:re:  a:b\r\n", "subject:re: a:b\r\n" },
    { "X: a\n b\n", "x:a b\r\n" },                  /* bare LF folds */
    { "X:\xc3\xa4  \xff\r\n", "x:\xc3\xa4 \xff\r\n" },
};

Test(dkim_header, relaxed_table)
{
    char   out[256];
    size_t i, n;

    for (i = 0; i < sizeof(hdr_cases) / sizeof(hdr_cases[0]); i++) {
        n = dkim_header_relaxed(hdr_cases[i].in, strlen(hdr_cases[i].in), 1,
            out);
        cr_assert_eq(n, strlen(hdr_cases[i].want), "'%s': got '%.*s'",
            hdr_cases[i].in, (int)n, out);
        cr_assert(memcmp(out, hdr_cases[i].want, n) == 0, "'%s': got '%.*s'",
            hdr_cases[i].in, (int)n, out);
    }
    cr_assert_eq(dkim_header_relaxed("no colon here\r\n", 15, 1, out), 0);
    n = dkim_header_relaxed("A: b\r\n", 6, 0, out);
    cr_assert_eq(n, 3);
    cr_assert(memcmp(out, "a:b", 3) == 0);
}

/* --- the signer ------------------------------------------------------------ */

static const char *const example[] = { "example.org" };

static const char msg1[] =
    "From: Alice <alice@example.org>\r\n"
    "To: Bob <bob@dest.test>,\r\n"
    "\tCarol <carol@dest.test>\r\n"
    "Subject: folded\r\n"
    "   subject  line\r\n"
    "X-Other: not signed\r\n"
    "\r\n"
    "Body  line \r\n"
    "\r\n"
    "second\tline\r\n"
    "\r\n\r\n";

Test(dkim_sign, every_split_gives_the_same_signature)
{
    struct dkim_keys *ks = keys_with(example, 1, DKIM_ED25519_SHA256);
    size_t            n = strlen(msg1), i, j, cuts[sizeof(msg1)];
    char             *whole, *s;
    int               rc;

    whole = sign_whole(ks, msg1, &rc);
    cr_assert_not_null(whole, "%s", dkim_strerror(rc));
    cr_assert(strncmp(whole, "DKIM-Signature: v=1; a=ed25519-sha256; "
        "c=relaxed/relaxed; d=example.org; s=s1;", 74) == 0, "%s", whole);
    cr_assert_not_null(strstr(whole, "t=1700000000;"));
    for (i = 0; i <= n; i++) {
        cuts[0] = i;
        s = sign_split(ks, msg1, n, cuts, 1, &rc);
        cr_assert_str_eq(s, whole, "split at %zu differs", i);
        free(s);
        for (j = i; j <= n; j += 7) {       /* and three pieces */
            cuts[1] = j;
            s = sign_split(ks, msg1, n, cuts, 2, &rc);
            cr_assert_str_eq(s, whole, "split at %zu,%zu differs", i, j);
            free(s);
        }
    }
    for (i = 0; i < n; i++)
        cuts[i] = i;
    s = sign_split(ks, msg1, n, cuts, n, &rc);
    cr_assert_str_eq(s, whole, "byte by byte differs");
    free(s);
    free(whole);
    dkim_keys_free(ks);
}

Test(dkim_sign, body_hash_is_sha256_of_the_canonical_body)
{
    static const char *const bodies[][2] = {
        { "", "" },                          /* relaxed empty body */
        { "\r\n\r\n", "" },
        { "Body  line \r\n\r\nsecond\tline\r\n\r\n\r\n",
          "Body line\r\n\r\nsecond line\r\n" },
    };
    struct dkim_keys *ks = keys_with(example, 1, DKIM_ED25519_SHA256);
    unsigned char     md[32];
    char              msg[512], want[64], *s, *bh;
    unsigned int      mdlen;
    size_t            i;
    int               rc;

    for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
        snprintf(msg, sizeof(msg), "From: a@example.org\r\n\r\n%s",
            bodies[i][0]);
        s = sign_whole(ks, msg, &rc);
        cr_assert_not_null(s);
        cr_assert_eq(EVP_Digest(bodies[i][1], strlen(bodies[i][1]), md,
            &mdlen, EVP_sha256(), NULL), 1);
        EVP_EncodeBlock((unsigned char *)want, md, 32);
        bh = tag_value(s, "bh");
        cr_assert_str_eq(bh, want, "body %zu", i);
        if (i == 0)
            cr_assert_str_eq(bh,
                "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=");
        free(bh);
        free(s);
    }
    dkim_keys_free(ks);
}

Test(dkim_sign, headers_only_message_is_signed_like_an_empty_body)
{
    struct dkim_keys *ks = keys_with(example, 1, DKIM_ED25519_SHA256);
    char             *a, *b;
    int               rc;

    a = sign_whole(ks, "From: a@example.org\r\nSubject: x\r\n", &rc);
    b = sign_whole(ks, "From: a@example.org\r\nSubject: x\r\n\r\n", &rc);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
    dkim_keys_free(ks);
}

Test(dkim_sign, h_lists_present_fields_and_oversigns_from)
{
    struct dkim_keys *ks = keys_with(example, 1, DKIM_ED25519_SHA256);
    char             *s, *h;
    int               rc;

    s = sign_whole(ks, "Subject: s\r\nTo: a@x\r\nfrom: a@example.org\r\n"
        "TO: b@x\r\nX-Mailer: m\r\nReceived: r\r\n\r\nb\r\n", &rc);
    cr_assert_not_null(s);
    h = tag_value(s, "h");
    cr_assert_str_eq(h, "from:from:subject:to:to");
    free(h);
    free(s);
    dkim_keys_free(ks);
}

Test(dkim_sign, rsa_block_has_the_announced_length_and_folds)
{
    struct dkim_keys *ks = keys_with(example, 1, DKIM_RSA_SHA256);
    char             *s, *line, *save, *b;
    int               rc;

    s = sign_whole(ks, msg1, &rc);
    cr_assert_not_null(s, "%s", dkim_strerror(rc));
    b = tag_value(s, "b");
    cr_assert_eq(strlen(b), 344, "2048-bit signature in base64: %s", b);
    free(b);
    cr_assert_null(strstr(s, " l="));
    cr_assert_null(strstr(s, ";l="));
    for (line = strtok_r(s, "\n", &save); line != NULL;
        line = strtok_r(NULL, "\n", &save))
        cr_assert_leq(strlen(line), 79, "line too long: %s", line);
    free(s);
    dkim_keys_free(ks);
}

static const struct {
    const char *from;           /* header section */
    int         rc;
    const char *domain;
} from_cases[] = {
    { "From: a@example.org\r\n", DKIM_OK, "example.org" },
    { "From: \"x@evil.test\" <a@example.org>\r\n", DKIM_OK, "example.org" },
    { "From: x@evil.test <a@example.org>\r\n", DKIM_OK, "example.org" },
    { "From: (c@evil.test) a@Example.ORG.\r\n", DKIM_OK, "example.org" },
    { "From: A\r\n <a@Sub.example.org>, B <b@sub.EXAMPLE.org>\r\n", DKIM_OK,
      "example.org" },
    { "From: a@exact.example.org\r\n", DKIM_OK, "exact.example.org" },
    { "From: a@x.exact.example.org\r\n", DKIM_OK, "exact.example.org" },
    { "From: a@example.org, b@other.test\r\n", DKIM_ENOFROM, "" },
    { "From: undisclosed-recipients:;\r\n", DKIM_ENOFROM, "" },
    { "From: a@[192.0.2.1]\r\n", DKIM_ENOFROM, "" },
    { "Subject: no from\r\n", DKIM_ENOFROM, "" },
    { "From: a@example.org\r\nFrom: b@example.org\r\n", DKIM_ENOFROM, "" },
    { "From: a@other.test\r\n", DKIM_ENOKEY, "" },
    { "From: a@example.org.evil.test\r\n", DKIM_ENOKEY, "" },
    { "From: a@org\r\n", DKIM_ENOKEY, "" },
    { "From: <a@example.org\x01.evil.test>\r\n", DKIM_ENOFROM, "" },
};


/* A NUL in the From: domain is refused, not a cut: d=example.org for
 * "example.org<NUL>.evil.test" would sign what the From: does not say. */
Test(dkim_sign, from_domain_with_nul_is_none)
{
    static const char *const doms[] = { "example.org" };
    static const char msg[] = "From: <a@example.org\0.evil.test>\r\n\r\n"
        "body\r\n";
    struct dkim_keys *ks = keys_with(doms, 1, DKIM_ED25519_SHA256);
    struct dkim_sign *c = dkim_sign_begin(ks, 1);
    size_t            len;

    dkim_sign_feed(c, msg, sizeof(msg) - 1);
    cr_assert(dkim_sign_header_done(c));
    cr_assert_eq(dkim_sign_prepare(c, &len), DKIM_ENOFROM);
    cr_assert_str_eq(dkim_sign_domain(c), "");
    dkim_sign_free(c);
    dkim_keys_free(ks);
}

Test(dkim_sign, from_domain_exact_parent_or_none)
{
    static const char *const doms[] = { "example.org", "exact.example.org" };
    struct dkim_keys *ks = keys_with(doms, 2, DKIM_ED25519_SHA256);
    struct dkim_sign *c;
    size_t            i, len;
    char              msg[512];
    int               rc;

    for (i = 0; i < sizeof(from_cases) / sizeof(from_cases[0]); i++) {
        snprintf(msg, sizeof(msg), "%s\r\nbody\r\n", from_cases[i].from);
        c = dkim_sign_begin(ks, 1);
        dkim_sign_feed(c, msg, strlen(msg));
        cr_assert(dkim_sign_header_done(c));
        rc = dkim_sign_prepare(c, &len);
        cr_assert_eq(rc, from_cases[i].rc, "'%s': got %s", from_cases[i].from,
            dkim_strerror(rc));
        cr_assert_str_eq(dkim_sign_domain(c), from_cases[i].domain, "'%s'",
            from_cases[i].from);
        cr_assert_eq(dkim_sign_end(c, msg, sizeof(msg)) == DKIM_OK,
            rc == DKIM_OK);
        dkim_sign_free(c);
    }
    dkim_keys_free(ks);
}

Test(dkim_sign, header_section_over_the_limit_is_not_signed)
{
    struct dkim_keys *ks = keys_with(example, 1, DKIM_ED25519_SHA256);
    struct dkim_sign *c = dkim_sign_begin(ks, 1);
    char              line[128];
    size_t            len, total = 0;

    dkim_sign_feed(c, "From: a@example.org\r\n", 21);
    memset(line, 'x', sizeof(line));
    memcpy(line, "X-F: ", 5);
    memcpy(line + sizeof(line) - 2, "\r\n", 2);
    while (total <= DKIM_HEADER_MAX) {
        dkim_sign_feed(c, line, sizeof(line));
        total += sizeof(line);
    }
    dkim_sign_feed(c, "\r\nbody\r\n", 8);
    cr_assert_eq(dkim_sign_prepare(c, &len), DKIM_EHEADER);
    cr_assert_eq(dkim_sign_end(c, line, sizeof(line)), DKIM_EHEADER);
    dkim_sign_free(c);
    dkim_keys_free(ks);
}

Test(dkim_sign, out_of_order_calls_are_refused)
{
    struct dkim_keys *ks = keys_with(example, 1, DKIM_ED25519_SHA256);
    struct dkim_sign *c = dkim_sign_begin(ks, 1);
    char              buf[16];
    size_t            len;

    cr_assert_eq(dkim_sign_end(c, buf, sizeof(buf)), DKIM_ESTATE);
    dkim_sign_feed(c, "From: a@example.org\r\n\r\n", 23);
    cr_assert_eq(dkim_sign_prepare(c, &len), DKIM_OK);
    cr_assert_eq(dkim_sign_prepare(c, &len), DKIM_ESTATE);
    cr_assert_eq(dkim_sign_end(c, buf, sizeof(buf)), DKIM_ESTATE,
        "a buffer smaller than announced");
    dkim_sign_free(c);
    cr_assert_null(dkim_sign_begin(NULL, 1));
    dkim_keys_free(ks);
}

/* --- keys ------------------------------------------------------------------ */

Test(dkim_keys, load_checks_type_size_and_file)
{
    char err[512];

    cr_assert_eq(dkim_key_check(key_file("ed.pem", DKIM_ED25519_SHA256, 0),
        DKIM_RSA_SHA256, err, sizeof(err)), DKIM_EKEY);
    cr_assert_not_null(strstr(err, "is not an RSA key"), "%s", err);
    cr_assert_eq(dkim_key_check(key_file("rsa.pem", DKIM_RSA_SHA256, 1024),
        DKIM_ED25519_SHA256, err, sizeof(err)), DKIM_EKEY);
    cr_assert_not_null(strstr(err, "is not an Ed25519 key"), "%s", err);
    cr_assert_eq(dkim_key_check(key_file("small.pem", DKIM_RSA_SHA256, 512),
        DKIM_RSA_SHA256, err, sizeof(err)), DKIM_EKEY);
    cr_assert_not_null(strstr(err, "512-bit RSA key"), "%s", err);
    cr_assert_eq(dkim_key_check("/nonexistent/k.pem", DKIM_RSA_SHA256, err,
        sizeof(err)), DKIM_EKEY);
    cr_assert_not_null(strstr(err, "cannot read"), "%s", err);
    cr_assert_eq(dkim_key_check("/dev/null", DKIM_RSA_SHA256, err,
        sizeof(err)), DKIM_EKEY);
    cr_assert_not_null(strstr(err, "no usable PEM private key"), "%s", err);
    cr_assert_eq(dkim_key_check(key_file("ok.pem", DKIM_ED25519_SHA256, 0),
        DKIM_ED25519_SHA256, err, sizeof(err)), DKIM_OK);
}

Test(dkim_keys, find_exact_then_nearest_parent)
{
    static const char *const doms[] = { "example.org", "a.example.org" };
    struct dkim_keys *ks = keys_with(doms, 2, DKIM_ED25519_SHA256);

    cr_assert_str_eq(dkim_keys_find(ks, "EXAMPLE.org", 11), "example.org");
    cr_assert_str_eq(dkim_keys_find(ks, "b.a.example.org", 15),
        "a.example.org");
    cr_assert_str_eq(dkim_keys_find(ks, "b.example.org", 13), "example.org");
    cr_assert_null(dkim_keys_find(ks, "xexample.org", 12));
    cr_assert_null(dkim_keys_find(ks, "org", 3));
    cr_assert_eq(dkim_keys_count(ks), 2);
    dkim_keys_free(ks);
}

Test(dkim_keys, keygen_pem_loads_back_and_record_has_the_public_key)
{
    struct dkim_keys *ks = dkim_keys_new();
    char              err[512], path[300], *pem, *txt;
    FILE             *f;

    cr_assert_eq(dkim_keygen(DKIM_ED25519_SHA256, 0, &pem, &txt, err,
        sizeof(err)), DKIM_OK, "%s", err);
    cr_assert_eq(strncmp(txt, "v=DKIM1; k=ed25519; p=", 22), 0, "%s", txt);
    cr_assert_eq(strlen(txt), 22 + 44, "%s", txt);  /* 32 bytes, base64 */
    cr_assert_not_null(strstr(pem, "BEGIN PRIVATE KEY"));
    key_file("dummy.pem", DKIM_ED25519_SHA256, 0);  /* makes tmpdir */
    snprintf(path, sizeof(path), "%s/gen.pem", tmpdir);
    cr_assert_not_null(f = fopen(path, "w"));
    fputs(pem, f);
    fclose(f);
    cr_assert_eq(dkim_keys_add(ks, "Example.ORG.", "s", path,
        DKIM_ED25519_SHA256, err, sizeof(err)), DKIM_OK, "%s", err);
    cr_assert_str_eq(dkim_keys_find(ks, "example.org", 11), "example.org");
    free(pem);
    free(txt);
    cr_assert_eq(dkim_keygen(DKIM_RSA_SHA256, 512, &pem, &txt, err,
        sizeof(err)), DKIM_EKEY);
    cr_assert_eq(dkim_keygen(DKIM_RSA_SHA256, 1024, &pem, &txt, err,
        sizeof(err)), DKIM_OK, "%s", err);
    cr_assert_eq(strncmp(txt, "v=DKIM1; k=rsa; p=MIGfMA0G", 26), 0, "%s",
        txt);
    free(pem);
    free(txt);
    dkim_keys_free(ks);
}
