/*
 * test_tlsrpt.c - TLS-RPT (RFC 8460): recording, the wire form between
 * worker and master, the master's table, rua= parsing, the JSON, gzip and
 * the report mail.
 */
#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/buf.h"
#include "tlspol/tlspol.h"

#define DAY 20423u                      /* 2025-12-01 */

static const char *const sts_pol[] = {
    "version: STSv1", "mode: enforce", "mx: mx1.example.org",
    "mx: *.example.org", "max_age: 86400"
};

static struct tls_rpt_event
ev_of(const char *domain, enum tls_rpt_type type, const char *result)
{
    struct tls_rpt_event ev;

    memset(&ev, 0, sizeof(ev));
    ev.domain = domain;
    ev.type = type;
    ev.result = result;
    ev.mx = "mx1.example.org";
    ev.ip = "192.0.2.1";
    if (type == TLS_RPT_STS) {
        ev.strings = sts_pol;
        ev.nstrings = 5;
    }
    return ev;
}

/* collect every exported message into one master table */
static int
into_tab(const char *msg, size_t n, void *arg)
{
    char err[128];

    cr_assert(n > 2 && memcmp(msg, "P ", 2) == 0);
    cr_assert_eq(tls_rpt_tab_merge(arg, msg, n, err, sizeof(err)),
        0, "merge: %s", err);
    return 0;
}

static char *
text_of(const struct tls_rpt_tab *t, const char *domain)
{
    struct buf b;

    buf_init(&b);
    tls_rpt_tab_text(t, domain, &b);
    buf_append(&b, "", 1);
    return b.data;
}

static void
reset(void)
{
    tls_rpt_reset();
    tls_rpt_enable(1);
}

TestSuite(tlsrpt, .init = reset);

Test(tlsrpt, nothing_is_recorded_while_disabled)
{
    struct tls_rpt_event ev = ev_of("example.org", TLS_RPT_NOPOLICY, NULL);
    struct tls_rpt_tab  *m = tls_rpt_tab_new();

    tls_rpt_enable(0);
    tls_rpt_record_day(&ev, DAY);
    cr_assert_eq(tls_rpt_export(into_tab, m), 0);
    cr_assert_eq(tls_rpt_tab_count(m), 0);
    tls_rpt_tab_free(m);
}

Test(tlsrpt, outcomes_are_counted_per_policy_and_reach_the_master)
{
    struct tls_rpt_event ok = ev_of("Example.ORG.", TLS_RPT_STS, NULL);
    struct tls_rpt_event bad = ev_of("example.org", TLS_RPT_STS,
        "certificate-expired");
    struct tls_rpt_event other = ev_of("example.net", TLS_RPT_NOPOLICY,
        "starttls-not-supported");
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    char               *s;

    for (int i = 0; i < 5; i++)
        tls_rpt_record_day(&ok, DAY);
    tls_rpt_record_day(&bad, DAY);
    tls_rpt_record_day(&bad, DAY);
    tls_rpt_record_day(&other, DAY);
    cr_assert_eq(tls_rpt_export(into_tab, m), 2);
    cr_assert_eq(tls_rpt_export(into_tab, m), 0, "exported twice");
    cr_assert_eq(tls_rpt_tab_count(m), 2);
    s = text_of(m, "example.org");
    cr_assert_str_eq(s,
        "domain example.org day=2025-12-01 type=sts success=5 failure=2\n"
        "  policy-string: version: STSv1\n"
        "  policy-string: mode: enforce\n"
        "  policy-string: mx: mx1.example.org\n"
        "  policy-string: mx: *.example.org\n"
        "  policy-string: max_age: 86400\n"
        "  failure result=certificate-expired mx=mx1.example.org "
        "ip=192.0.2.1 count=2\n");
    free(s);
    /* a second worker's counts add up */
    tls_rpt_record_day(&ok, DAY);
    tls_rpt_record_day(&other, DAY);
    cr_assert_eq(tls_rpt_export(into_tab, m), 2);
    s = text_of(m, "example.net");
    cr_assert_str_eq(s,
        "domain example.net day=2025-12-01 type=no-policy-found success=0 "
        "failure=2\n"
        "  failure result=starttls-not-supported mx=mx1.example.org "
        "ip=192.0.2.1 count=2\n");
    free(s);
    s = text_of(m, "example.org");
    cr_assert(strstr(s, "success=6 failure=2\n") != NULL, "%s", s);
    free(s);
    tls_rpt_tab_free(m);
}

Test(tlsrpt, other_strings_type_or_day_is_another_policy)
{
    struct tls_rpt_event a = ev_of("example.org", TLS_RPT_STS, NULL);
    struct tls_rpt_event b = a;
    struct tls_rpt_event c = ev_of("example.org", TLS_RPT_TLSA, NULL);
    struct tls_rpt_tab  *m = tls_rpt_tab_new();

    b.nstrings = 4;
    tls_rpt_record_day(&a, DAY);
    tls_rpt_record_day(&b, DAY);
    tls_rpt_record_day(&c, DAY);
    tls_rpt_record_day(&a, DAY + 1);
    cr_assert_eq(tls_rpt_export(into_tab, m), 4);
    cr_assert_eq(tls_rpt_tab_count(m), 4);
    tls_rpt_tab_free(m);
}

static int refuse_after;

static int
emit_some(const char *msg, size_t n, void *arg)
{
    if (refuse_after-- <= 0)
        return -1;
    return into_tab(msg, n, arg);
}

Test(tlsrpt, a_refused_export_keeps_the_counts_for_the_next_one)
{
    struct tls_rpt_event a = ev_of("a.example", TLS_RPT_NOPOLICY, NULL);
    struct tls_rpt_event b = ev_of("b.example", TLS_RPT_NOPOLICY, NULL);
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    char               *s;

    tls_rpt_record_day(&a, DAY);
    tls_rpt_record_day(&b, DAY);
    refuse_after = 1;
    cr_assert_eq(tls_rpt_export(emit_some, m), 1);
    tls_rpt_record_day(&b, DAY);
    refuse_after = 10;
    cr_assert_eq(tls_rpt_export(emit_some, m), 1);
    s = text_of(m, NULL);
    cr_assert_str_eq(s,
        "domain a.example day=2025-12-01 type=no-policy-found success=1 "
        "failure=0\n"
        "domain b.example day=2025-12-01 type=no-policy-found success=2 "
        "failure=0\n");
    free(s);
    tls_rpt_tab_free(m);
}

Test(tlsrpt, details_beyond_the_limit_count_in_the_summary_only)
{
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    char                ip[32], *s;

    for (int i = 0; i < TLS_RPT_MAX_DETAILS + 3; i++) {
        struct tls_rpt_event ev = ev_of("example.org", TLS_RPT_NOPOLICY,
            "validation-failure");

        snprintf(ip, sizeof(ip), "192.0.2.%d", i);
        ev.ip = ip;
        tls_rpt_tab_add(m, DAY, &ev, 1);
    }
    cr_assert_eq(tls_rpt_tab_dropped(m), 3);
    s = text_of(m, NULL);
    cr_assert(strstr(s, "failure=35\n") != NULL, "%s", s);
    free(s);
    tls_rpt_tab_free(m);
}

/* A worker is not trusted: whatever it sends, the master's table holds
 * at most TLS_RPT_TAB_BYTES; the rest is counted as dropped. */
Test(tlsrpt, a_table_names_its_one_domain_or_says_there_is_none)
{
    struct tls_rpt_event a = ev_of("example.org", TLS_RPT_STS, NULL);
    struct tls_rpt_event b = ev_of("example.org", TLS_RPT_NOPOLICY, "x");
    struct tls_rpt_event c = ev_of("example.net", TLS_RPT_NOPOLICY, NULL);
    struct tls_rpt_tab  *t = tls_rpt_tab_new();
    char                 dom[TLS_RPT_DOMAIN_MAX];

    cr_assert_eq(tls_rpt_tab_domain(t, dom, sizeof(dom)), -1);  /* empty */
    tls_rpt_tab_add(t, DAY, &a, 1);
    tls_rpt_tab_add(t, DAY + 1, &b, 2);
    cr_assert_eq(tls_rpt_tab_domain(t, dom, sizeof(dom)), 0);
    cr_assert_str_eq(dom, "example.org");
    tls_rpt_tab_add(t, DAY, &c, 1);
    cr_assert_eq(tls_rpt_tab_domain(t, dom, sizeof(dom)), -1);
    tls_rpt_tab_free(t);
}


Test(tlsrpt, the_table_holds_a_bounded_number_of_bytes)
{
    static char         big[TLS_RPT_MAX_STRING];
    const char         *strs[TLS_RPT_MAX_STRINGS];
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    char                dom[64];
    size_t              per = TLS_RPT_MAX_STRINGS * TLS_RPT_MAX_STRING;
    int                 i, tries = (int)(TLS_RPT_TAB_BYTES / per) + 100;

    memset(big, 'a', sizeof(big) - 1);
    for (i = 0; i < TLS_RPT_MAX_STRINGS; i++)
        strs[i] = big;
    for (i = 0; i < tries; i++) {
        struct tls_rpt_event ev = ev_of(dom, TLS_RPT_STS, NULL);

        snprintf(dom, sizeof(dom), "d%d.example.org", i);
        ev.strings = strs;
        ev.nstrings = TLS_RPT_MAX_STRINGS;
        tls_rpt_tab_add(m, DAY, &ev, 1);
    }
    cr_assert_lt(tls_rpt_tab_count(m), (size_t)tries);
    cr_assert_leq(tls_rpt_tab_count(m) * per, TLS_RPT_TAB_BYTES + per);
    cr_assert_eq(tls_rpt_tab_dropped(m), (uint64_t)tries -
        tls_rpt_tab_count(m));
    tls_rpt_tab_free(m);
}

Test(tlsrpt, network_text_is_escaped_on_the_wire_and_in_the_listing)
{
    static const char *const odd[] = { "mx: a b%c\x1b[31m", "-" };
    struct tls_rpt_event ev = ev_of("example.org", TLS_RPT_STS, "tlsa-invalid");
    struct tls_rpt_tab  *m = tls_rpt_tab_new(), *m2 = tls_rpt_tab_new();
    struct buf          b;
    char               *s, err[128];

    ev.strings = odd;
    ev.nstrings = 2;
    ev.mx = "";
    tls_rpt_tab_add(m, DAY, &ev, 3);
    buf_init(&b);
    tls_rpt_tab_dump(m, &b);
    buf_append(&b, "", 1);
    cr_assert_str_eq(b.data,
        "P 20423 sts example.org 0 3\n"
        "s mx:%20a%20b%25c%1B[31m\n"
        "s %2D\n"
        "d tlsa-invalid - 192.0.2.1 3 -\n");
    cr_assert_eq(tls_rpt_tab_merge(m2, b.data, b.len - 1, err, sizeof(err)),
        0, "%s", err);
    s = text_of(m2, NULL);
    cr_assert_str_eq(s,
        "domain example.org day=2025-12-01 type=sts success=0 failure=3\n"
        "  policy-string: mx: a b%c\\x1b[31m\n"
        "  policy-string: -\n"
        "  failure result=tlsa-invalid mx=- ip=192.0.2.1 count=3\n");
    free(s);
    buf_free(&b);
    tls_rpt_tab_free(m);
    tls_rpt_tab_free(m2);
}

Test(tlsrpt, bad_wire_input_is_rejected_whole)
{
    static const char *const bad[] = {
        "P 1 sts a.example 1 0",                        /* no line end */
        "s x\n",                                        /* before a P */
        "P 1 bogus a.example 1 0\n",
        "P 1 sts - 1 0\n",                              /* no domain */
        "P x sts a.example 1 0\n",
        "P 1 sts a.example 1\n",
        "P 1 sts a.example 1 0 extra\n",
        "P 1 sts a.exa%00mple 1 0\n",                   /* NUL */
        "P 1 sts a.exa%4mple 1 0\n",
        "P 1 sts a.example 1 1\nd - mx 1.2.3.4 1 -\n",  /* no result */
        "P 1 sts a.example 1 1\nd r mx 1.2.3.4 2 -\n",  /* 2 > 1 failure */
        "P 1 sts a.example 1 0\nx y\n",
        "P 1 sts a.example 1 0\nP 1 sts b.example 99999999999999999999 0\n",
        "P 1 sts a.exa\tmple 1 0\n",
    };
    char err[128];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct tls_rpt_tab *m = tls_rpt_tab_new();

        err[0] = '\0';
        cr_assert_eq(tls_rpt_tab_merge(m, bad[i], strlen(bad[i]), err,
            sizeof(err)), -1, "accepted: %s", bad[i]);
        cr_assert(err[0] != '\0');
        cr_assert_eq(tls_rpt_tab_count(m), 0, "merged part of: %s", bad[i]);
        tls_rpt_tab_free(m);
    }
}

/* A worker's message names its day; only today and yesterday are taken,
 * else a far day would sit in the master's table (and state file) for
 * ever.  The whole message goes when one policy is out. */
Test(tlsrpt, a_merge_for_some_days_refuses_the_others_whole)
{
    static const char *const out[] = {
        "P 20422 sts a.example 1 0\n",                  /* the day before */
        "P 20425 sts a.example 1 0\n",                  /* a future day */
        "P 4294967295 sts a.example 1 0\n",
        "P 20424 sts a.example 1 0\nP 20426 sts b.example 1 0\n",
    };
    struct tls_rpt_tab *m = tls_rpt_tab_new();
    const char        *ok = "P 20423 sts a.example 1 0\n"
                            "P 20424 sts b.example 2 0\n";
    char               err[160];

    for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++) {
        err[0] = '\0';
        cr_assert_eq(tls_rpt_tab_merge_days(m, out[i], strlen(out[i]),
            DAY, DAY + 1, NULL, err, sizeof(err)), -1, "took: %s", out[i]);
        cr_assert(strstr(err, "day") != NULL, "%s", err);
        cr_assert_eq(tls_rpt_tab_count(m), 0, "merged part of: %s", out[i]);
    }
    cr_assert_eq(tls_rpt_tab_merge_days(m, ok, strlen(ok), DAY, DAY + 1, NULL,
        err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(tls_rpt_tab_count(m), 2);
    tls_rpt_tab_free(m);
}


/* The state file read back: policies of other days are left out (and
 * counted), the rest is kept. */
Test(tlsrpt, a_merge_for_some_days_can_skip_the_others)
{
    const char        *file = "P 20000 sts old.example 5 0\n"
                              "P 20423 sts a.example 1 1\n"
                              "d certificate-expired mx 192.0.2.1 1 -\n"
                              "P 30000 sts future.example 7 0\n"
                              "s junk\n";
    struct tls_rpt_tab *m = tls_rpt_tab_new();
    size_t             skipped = 99;
    char               err[160], *s;

    cr_assert_eq(tls_rpt_tab_merge_days(m, file, strlen(file), DAY - 1, DAY,
        &skipped, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(skipped, 2);
    cr_assert_eq(tls_rpt_tab_count(m), 1);
    s = text_of(m, NULL);
    cr_assert(strstr(s, "domain a.example day=2025-12-01") != NULL, "%s", s);
    cr_assert(strstr(s, "old.example") == NULL && strstr(s, "future") == NULL);
    free(s);
    /* still strict about the syntax of what it skips */
    cr_assert_eq(tls_rpt_tab_merge_days(m, "P 1 sts x 1\n", 12, DAY - 1, DAY,
        &skipped, err, sizeof(err)), -1);
    tls_rpt_tab_free(m);
}

static int
take_collect(uint32_t day, const char *domain, const char *blocks, size_t n,
    void *arg)
{
    struct buf *b = arg;

    buf_printf(b, "%u %s %zu|", day, domain, n);
    (void)blocks;
    return 0;
}

Test(tlsrpt, take_hands_over_each_day_and_domain_up_to_max_day)
{
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    struct tls_rpt_event a = ev_of("a.example", TLS_RPT_NOPOLICY, NULL);
    struct tls_rpt_event a2 = ev_of("a.example", TLS_RPT_STS, NULL);
    struct tls_rpt_event b = ev_of("b.example", TLS_RPT_NOPOLICY, NULL);
    struct buf          got;

    tls_rpt_tab_add(m, DAY, &a, 1);
    tls_rpt_tab_add(m, DAY, &a2, 1);
    tls_rpt_tab_add(m, DAY, &b, 1);
    tls_rpt_tab_add(m, DAY + 1, &b, 1);
    buf_init(&got);
    cr_assert_eq(tls_rpt_tab_take(m, DAY, take_collect, &got), 2);
    buf_append(&got, "", 1);
    cr_assert(strncmp(got.data, "20423 a.example ", 16) == 0, "%s", got.data);
    cr_assert(strstr(got.data, "|20423 b.example ") != NULL, "%s", got.data);
    cr_assert_eq(tls_rpt_tab_count(m), 1);
    buf_free(&got);
    tls_rpt_tab_free(m);
}

/* ---- rua ---- */

Test(tlsrpt, rua_parse)
{
    static const struct {
        const char *txt[3];
        int         rc;
        size_t      n, nhttps;
        const char *first;
    } cases[] = {
        { { "v=TLSRPTv1; rua=mailto:tls@example.org" }, 0, 1, 0,
          "tls@example.org" },
        { { "v=TLSRPTv1;rua=mailto:a%40b@example.org?subject=x,"
            "https://r.example.org/x , mailto:c@example.net;" }, 0, 1, 1,
          "c@example.net" },                  /* a@b@... is no address */
        { { "v=spf1 -all", "v=TLSRPTv1; rua=mailto:t@example.org" }, 0, 1, 0,
          "t@example.org" },
        { { "v=TLSRPTv1; rua=https://r.example.org/" }, -1, 0, 1, NULL },
        { { "v=TLSRPTv1; rua=mailto:a@x.example", "v=TLSRPTv1; "
            "rua=mailto:b@x.example" }, -1, 0, 0, NULL },
        { { "v=TLSRPTv1; ruf=mailto:a@x.example" }, -1, 0, 0, NULL },
        { { "v=TLSRPTv2; rua=mailto:a@x.example" }, -1, 0, 0, NULL },
        { { "v=TLSRPTv1; rua=ftp://x.example/" }, -1, 0, 0, NULL },
        { { "v=TLSRPTv1; rua=mailto:<a@x.example>" }, -1, 0, 0, NULL },
        { { "v=TLSRPTv1; rua=mailto:a@x.example%0d%0aBcc:c@d.example" },
          -1, 0, 0, NULL },
        { { "v=TLSRPTv1; ext=1; rua=mailto:a@x.example; x=y" }, 0, 1, 0,
          "a@x.example" },
    };
    char   rua[TLS_RPT_RUA_MAX][256], err[128];
    size_t n, nh;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t nt = 0;
        int    rc;

        while (nt < 3 && cases[i].txt[nt] != NULL)
            nt++;
        rc = tls_rpt_rua_parse(cases[i].txt, nt, rua, &n, &nh, err,
            sizeof(err));
        cr_assert_eq(rc, cases[i].rc, "case %zu: got %d (%s), want %d", i,
            rc, err, cases[i].rc);
        cr_assert_eq(nh, cases[i].nhttps, "case %zu: https %zu", i, nh);
        if (rc == 0) {
            cr_assert_eq(n, cases[i].n, "case %zu: got %zu", i, n);
            cr_assert_str_eq(rua[0], cases[i].first, "case %zu", i);
        }
    }
}

/* ---- JSON, gzip, mail ---- */

static struct tls_rpt_info
info_of(const char *const *rua, size_t nrua)
{
    struct tls_rpt_info in;

    memset(&in, 0, sizeof(in));
    in.organization = "Example \"Org\"";
    in.contact = "postmaster@sender.example";
    in.submitter = "mx.sender.example";
    in.sender = "tlsrpt@sender.example";
    in.domain = "example.org";
    in.start_s = (uint64_t)DAY * 86400;
    in.end_s = (uint64_t)DAY * 86400 + 86399;
    in.now_ms = ((uint64_t)DAY * 86400 + 86400) * 1000;
    in.report_id = "2025-12-01.example.org.1@mx.sender.example";
    in.rua = rua;
    in.nrua = nrua;
    return in;
}

static struct tls_rpt_tab *
sample_tab(void)
{
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    struct tls_rpt_event ok = ev_of("example.org", TLS_RPT_STS, NULL);
    struct tls_rpt_event bad = ev_of("example.org", TLS_RPT_STS,
        "certificate-host-mismatch");
    struct tls_rpt_event other = ev_of("example.net", TLS_RPT_NOPOLICY, NULL);

    bad.reason = "X509_V_ERR_HOSTNAME_MISMATCH";
    tls_rpt_tab_add(m, DAY, &ok, 7);
    tls_rpt_tab_add(m, DAY, &bad, 2);
    tls_rpt_tab_add(m, DAY, &other, 1);
    return m;
}

static const char WANT_JSON[] =
    "{\"organization-name\":\"Example \\\"Org\\\"\","
    "\"date-range\":{\"start-datetime\":\"2025-12-01T00:00:00Z\","
    "\"end-datetime\":\"2025-12-01T23:59:59Z\"},"
    "\"contact-info\":\"postmaster@sender.example\","
    "\"report-id\":\"2025-12-01.example.org.1@mx.sender.example\","
    "\"policies\":[{\"policy\":{\"policy-type\":\"sts\","
    "\"policy-string\":[\"version: STSv1\",\"mode: enforce\","
    "\"mx: mx1.example.org\",\"mx: *.example.org\",\"max_age: 86400\"],"
    "\"policy-domain\":\"example.org\","
    "\"mx-host\":[\"mx1.example.org\",\"*.example.org\"]},"
    "\"summary\":{\"total-successful-session-count\":7,"
    "\"total-failure-session-count\":2},"
    "\"failure-details\":[{\"result-type\":\"certificate-host-mismatch\","
    "\"receiving-ip\":\"192.0.2.1\","
    "\"receiving-mx-hostname\":\"mx1.example.org\","
    "\"failed-session-count\":2,"
    "\"failure-reason-code\":\"X509_V_ERR_HOSTNAME_MISMATCH\"}]}]}\n";

Test(tlsrpt, json_of_one_domain)
{
    struct tls_rpt_tab *m = sample_tab();
    struct tls_rpt_info in = info_of(NULL, 0);
    struct buf         b;

    buf_init(&b);
    tls_rpt_json(m, &in, &b);
    buf_append(&b, "", 1);
    cr_assert_str_eq(b.data, WANT_JSON);
    buf_free(&b);
    tls_rpt_tab_free(m);
}

Test(tlsrpt, json_escapes_controls_and_invalid_utf8)
{
    static const char *const s[] = { "a\"\\\x01\xc3\xa9\xff" };
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    struct tls_rpt_event ev = ev_of("example.org", TLS_RPT_TLSA, NULL);
    struct tls_rpt_info  in = info_of(NULL, 0);
    struct buf          b;

    ev.strings = s;
    ev.nstrings = 1;
    tls_rpt_tab_add(m, DAY, &ev, 1);
    buf_init(&b);
    tls_rpt_json(m, &in, &b);
    buf_append(&b, "", 1);
    cr_assert(strstr(b.data, "\"policy-string\":[\"a\\\"\\\\\\u0001\xc3\xa9"
        "\\ufffd\"]") != NULL, "%s", b.data);
    buf_free(&b);
    tls_rpt_tab_free(m);
}

static size_t
gunzip(const unsigned char *p, size_t n, char *out, size_t outsz)
{
    z_stream z;

    memset(&z, 0, sizeof(z));
    cr_assert_eq(inflateInit2(&z, 15 + 16), Z_OK);
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)outsz;
    cr_assert_eq(inflate(&z, Z_FINISH), Z_STREAM_END);
    inflateEnd(&z);
    return outsz - z.avail_out;
}

Test(tlsrpt, gzip_round_trips)
{
    static char big[200000], back[200001];
    struct buf  b;

    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)("abcdefgh"[i % 8] + (i % 977 == 0));
    buf_init(&b);
    cr_assert_eq(tls_rpt_gzip(big, sizeof(big), &b), 0);
    cr_assert((unsigned char)b.data[0] == 0x1f &&
        (unsigned char)b.data[1] == 0x8b, "not a gzip header");
    cr_assert_eq(gunzip((unsigned char *)buf_head(&b), buf_avail(&b), back,
        sizeof(back)), sizeof(big));
    cr_assert(memcmp(big, back, sizeof(big)) == 0);
    buf_free(&b);
}

Test(tlsrpt, mail_is_a_tlsrpt_multipart_report_with_the_json_gz)
{
    static const char *const rua[] = { "tls@example.org", "x@example.net" };
    struct tls_rpt_tab *m = sample_tab();
    struct tls_rpt_info in = info_of(rua, 2);
    struct buf         b;
    char              *s, *att, *end, b64[8192], json[8192];
    unsigned char      gz[8192];
    size_t             k = 0;
    int                n;

    buf_init(&b);
    cr_assert_eq(tls_rpt_mail(m, &in, &b), 0);
    buf_append(&b, "", 1);
    s = b.data;
    cr_assert(strncmp(s, "From: tlsrpt@sender.example\r\n", 29) == 0, "%s", s);
    cr_assert(strstr(s, "\r\nTo: tls@example.org,\r\n x@example.net\r\n"));
    cr_assert(strstr(s, "\r\nSubject: Report Domain: example.org\r\n"
        " Submitter: mx.sender.example\r\n Report-ID: "
        "<2025-12-01.example.org.1@mx.sender.example>\r\n"));
    cr_assert(strstr(s, "\r\nTLS-Report-Domain: example.org\r\n"));
    cr_assert(strstr(s, "\r\nTLS-Report-Submitter: mx.sender.example\r\n"));
    cr_assert(strstr(s, "\r\nTLS-Required: No\r\n"));
    cr_assert(strstr(s, "\r\nDate: Tue, 02 Dec 2025 00:00:00 +0000\r\n"));
    cr_assert(strstr(s, "\r\nContent-Type: multipart/report; "
        "report-type=\"tlsrpt\";\r\n boundary=\""));
    cr_assert(strstr(s, "filename=\"mx.sender.example!example.org!"
        "1764547200!1764633599.json.gz\"\r\n\r\n"));
    cr_assert(strstr(s, "\r\nContent-Type: application/tlsrpt+gzip\r\n"
        "Content-Transfer-Encoding: base64\r\n"));
    for (char *p = strchr(s, '\n'); p != NULL; p = strchr(p + 1, '\n'))
        cr_assert(p > s && p[-1] == '\r', "a bare LF at %zu", (size_t)(p - s));
    att = strstr(s, ".json.gz\"\r\n\r\n") + 13;
    end = strstr(att, "\r\n\r\n--");
    cr_assert_not_null(end);
    for (char *p = att; p < end; p++)
        if (*p != '\r' && *p != '\n')
            b64[k++] = *p;
    b64[k] = '\0';
    n = EVP_DecodeBlock(gz, (unsigned char *)b64, (int)k);
    cr_assert(n > 0);
    while (k > 0 && b64[k - 1] == '=') {     /* padding decodes as zeros */
        k--;
        n--;
    }
    k = gunzip(gz, (size_t)n, json, sizeof(json) - 1);
    json[k] = '\0';
    cr_assert_str_eq(json, WANT_JSON);
    cr_assert(strstr(s, "\r\n--") != NULL);
    buf_free(&b);
    tls_rpt_tab_free(m);
}

/* ---- the TLS client's outcome (tlsrpt_outcome.c) ---- */

#include "dns/dns.h"
#include "tlspol/tlspol_int.h"

Test(tlsrpt, outcome_names_the_policy_and_its_tlsa_strings)
{
    unsigned char       rd[3 + 4] = { 3, 1, 1, 0xde, 0xad, 0xbe, 0xef };
    struct dns_rr       rr = { DNS_T_TLSA, 300, sizeof(rd), rd };
    struct dns_rrset    set;
    struct tls_req      r;
    struct tls_rpt_tab  *m = tls_rpt_tab_new();
    char               *s;

    memset(&set, 0, sizeof(set));
    set.n = 1;
    set.rr = &rr;
    memset(&r, 0, sizeof(r));
    r.level = TLS_DANE;
    strcpy(r.policy_domain, "Example.ORG");
    strcpy(r.verify_name, "mx.example.org");
    r.tlsa = &set;
    tls_rpt_outcome(&r, NULL, "192.0.2.7", "ignored on success");
    tls_rpt_outcome(&r, TLS_FAIL_TLSA_INVALID, "192.0.2.7", "no match");
    r.tlsa = NULL;
    tls_rpt_outcome(&r, "", "192.0.2.7", NULL);
    r.sts_enforce = 1;
    tls_rpt_outcome(&r, TLS_FAIL_HOST_MISMATCH, "192.0.2.8", NULL);
    r.policy_domain[0] = '\0';          /* no domain: not counted */
    tls_rpt_outcome(&r, NULL, "192.0.2.7", NULL);
    cr_assert_eq(tls_rpt_export(into_tab, m), 3);
    s = text_of(m, NULL);
    cr_assert(strstr(s, "type=tlsa success=1 failure=1\n"
        "  policy-string: 3 1 1 deadbeef\n"
        "  failure result=tlsa-invalid mx=mx.example.org ip=192.0.2.7 "
        "count=1 reason=no match\n") != NULL, "%s", s);
    cr_assert(strstr(s, "type=no-policy-found success=1 failure=0\n") != NULL,
        "%s", s);
    cr_assert(strstr(s, "type=sts success=0 failure=1\n  failure "
        "result=certificate-host-mismatch mx=mx.example.org ip=192.0.2.8 "
        "count=1\n") != NULL, "%s", s);
    free(s);
    tls_rpt_tab_free(m);
}
