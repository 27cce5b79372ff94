/*
 * test_tls_policy.c - the pure decisions of outbound TLS (tls_policy.c):
 * level names, what each level demands after EHLO and after the
 * handshake, the connection-reuse rule, the deferral text and the log
 * fields.
 */
#include <criterion/criterion.h>

#include <string.h>

#include "tlspol/tlspol.h"

static struct tls_req
req(enum tls_level l, const char *name)
{
    struct tls_req r;

    memset(&r, 0, sizeof(r));
    r.level = l;
    strcpy(r.verify_name, name);
    strcpy(r.policy_domain, "example.org");
    return r;
}

/* any non-NULL pointer stands for "usable TLSA records" here */
static const struct dns_rrset *const some_tlsa =
    (const struct dns_rrset *)&some_tlsa;

Test(tls_policy, level_names_round_trip)
{
    static const char *const words[] = { "none", "may", "encrypt", "verify",
        "dane", "dane-only" };
    enum tls_level l;
    int            i;

    for (i = 0; i < 6; i++) {
        cr_assert_eq(tls_level_parse(words[i], &l), 0, "%s", words[i]);
        cr_assert_eq((int)l, i);
        cr_assert_str_eq(tls_level_name(l), words[i]);
    }
    cr_assert_eq(tls_level_parse("MAY", &l), -1);
    cr_assert_eq(tls_level_parse("dane_only", &l), -1);
    cr_assert_eq(tls_level_parse("", &l), -1);
    cr_assert_eq(tls_level_parse(NULL, &l), -1);
    cr_assert_str_eq(tls_auth_name(TLS_AUTH_NONE), "none");
    cr_assert_str_eq(tls_auth_name(TLS_AUTH_CA), "ca");
    cr_assert_str_eq(tls_auth_name(TLS_AUTH_DANE), "dane");
    cr_assert_str_eq(tls_auth_name(TLS_AUTH_STS), "sts");
}

Test(tls_policy, after_ehlo_each_level)
{
    struct tls_req r;

    r = req(TLS_NONE, "mx");
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_GO_PLAIN);
    r = req(TLS_MAY, "mx");
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_GO_STARTTLS);
    cr_assert_eq(tls_decide_ehlo(&r, 0, 0), TLS_GO_PLAIN);
    cr_assert_eq(tls_decide_ehlo(&r, 1, 1), TLS_GO_PLAIN); /* the retry */
    r = req(TLS_ENCRYPT, "mx");
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_GO_STARTTLS);
    cr_assert_eq(tls_decide_ehlo(&r, 0, 0), TLS_DEFER);
    r = req(TLS_VERIFY, "mx");
    cr_assert_eq(tls_decide_ehlo(&r, 0, 0), TLS_DEFER);
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_GO_STARTTLS);
    /* dane without TLSA is may; with TLSA it is mandatory */
    r = req(TLS_DANE, "mx");
    cr_assert_eq(tls_decide_ehlo(&r, 0, 0), TLS_GO_PLAIN);
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_GO_STARTTLS);
    r.tlsa = some_tlsa;
    cr_assert_eq(tls_decide_ehlo(&r, 0, 0), TLS_DEFER);
    /* dane-only without TLSA: nothing will do */
    r = req(TLS_DANE_ONLY, "mx");
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_DEFER);
    r.tlsa = some_tlsa;
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_GO_STARTTLS);
    /* MTA-STS enforce makes even none/may mandatory */
    r = req(TLS_MAY, "mx");
    r.sts_enforce = 1;
    cr_assert_eq(tls_decide_ehlo(&r, 0, 0), TLS_DEFER);
    cr_assert_eq(tls_decide_ehlo(&r, 1, 0), TLS_GO_STARTTLS);
}

Test(tls_policy, after_the_handshake)
{
    struct tls_outcome ok, bad;
    struct tls_req     r;

    memset(&ok, 0, sizeof(ok));
    ok.used = 1;
    bad = ok;
    strcpy(bad.failure, TLS_FAIL_HOST_MISMATCH);
    r = req(TLS_MAY, "mx");
    cr_assert_eq(tls_decide_handshake(&r, 0, &ok), TLS_RETRY_PLAIN);
    cr_assert_eq(tls_decide_handshake(&r, 1, &ok), TLS_GO_ON);
    r = req(TLS_ENCRYPT, "mx");
    cr_assert_eq(tls_decide_handshake(&r, 0, &ok), TLS_DEFER);
    cr_assert_eq(tls_decide_handshake(&r, 1, &ok), TLS_GO_ON);
    r = req(TLS_VERIFY, "mx");
    cr_assert_eq(tls_decide_handshake(&r, 1, &ok), TLS_GO_ON);
    cr_assert_eq(tls_decide_handshake(&r, 1, &bad), TLS_DEFER);
    cr_assert_eq(tls_decide_handshake(&r, 0, &ok), TLS_DEFER);
    r = req(TLS_DANE, "mx");
    cr_assert_eq(tls_decide_handshake(&r, 0, &ok), TLS_RETRY_PLAIN);
    r.tlsa = some_tlsa;
    cr_assert_eq(tls_decide_handshake(&r, 0, &ok), TLS_DEFER);
    cr_assert_eq(tls_decide_handshake(&r, 1, &bad), TLS_DEFER);
    cr_assert(tls_req_authenticated(&r));
    r = req(TLS_ENCRYPT, "mx");
    cr_assert(tls_req_mandatory(&r) && !tls_req_authenticated(&r));
}

Test(tls_policy, reuse_needs_the_same_requirement)
{
    struct tls_req a = req(TLS_VERIFY, "MX.example.org"),
                   b = req(TLS_VERIFY, "mx.example.org");

    cr_assert(tls_req_same(&a, &b));        /* names: any case */
    b.level = TLS_MAY;
    cr_assert_not(tls_req_same(&a, &b));
    b = a;
    strcpy(b.verify_name, "mx2.example.org");
    cr_assert_not(tls_req_same(&a, &b));
    b = a;
    b.sts_enforce = 1;
    cr_assert_not(tls_req_same(&a, &b));
    b = a;
    b.tlsa = some_tlsa;
    cr_assert_not(tls_req_same(&a, &b));
    /* the policy domain is not part of it: domains share MX hosts */
    b = a;
    strcpy(b.policy_domain, "other.example");
    cr_assert(tls_req_same(&a, &b));
}

Test(tls_policy, log_fields)
{
    struct tls_outcome o;
    char               buf[200];

    memset(&o, 0, sizeof(o));
    tls_outcome_format(&o, buf, sizeof(buf));
    cr_assert_str_eq(buf, "tls=none");
    strcpy(o.failure, TLS_FAIL_STARTTLS);
    tls_outcome_format(&o, buf, sizeof(buf));
    cr_assert_str_eq(buf, "tls=none tls_failure=starttls-not-supported");
    o.used = 1;
    o.failure[0] = '\0';
    strcpy(o.version, "TLSv1.3");
    strcpy(o.cipher, "TLS_AES_256_GCM_SHA384");
    o.auth = TLS_AUTH_DANE;
    cr_assert_eq(tls_outcome_format(&o, buf, sizeof(buf)), strlen(buf));
    cr_assert_str_eq(buf, "tls=TLSv1.3 cipher=TLS_AES_256_GCM_SHA384 "
        "verify=dane");
    /* truncated, still terminated */
    cr_assert_eq(tls_outcome_format(&o, buf, 8), 7);
    cr_assert_str_eq(buf, "tls=TLS");
}

Test(tls_policy, deferral_reasons)
{
    struct tls_req r = req(TLS_ENCRYPT, "mx");
    char           buf[512];

    tls_defer_reason(&r, "mx[192.0.2.1]:25", TLS_FAIL_STARTTLS, buf,
        sizeof(buf));
    cr_assert_str_eq(buf, "451 4.7.4 TLS is required (tls encrypt) for host "
        "mx[192.0.2.1]:25, but STARTTLS was not offered");
    r = req(TLS_VERIFY, "mx");
    tls_defer_reason(&r, "mx[192.0.2.1]:25", "the certificate did not "
        "verify: x", buf, sizeof(buf));
    cr_assert_str_eq(buf, "451 4.7.5 verified TLS is required (tls verify) "
        "for host mx[192.0.2.1]:25, but the certificate did not verify: x");
    r = req(TLS_DANE_ONLY, "mx");
    tls_defer_reason(&r, "h", "no usable TLSA record was found", buf,
        sizeof(buf));
    cr_assert(strncmp(buf, "451 4.7.5 DANE-verified TLS is required", 39)
        == 0, "%s", buf);
}
