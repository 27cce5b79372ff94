/*
 * test_reqtls.c - the REQUIRETLS decisions at delivery (tlspol/reqtls.c,
 * RFC 8689 4.2): each level raised to one that authenticates the server,
 * the MX-security rule of 4.2.1 step 2, TLS-Required: No dropping only the
 * recipient domain's policies, the session check with its 5.7.10 and
 * 5.7.30 reasons (and the bounce's exemption from the keyword), and the
 * MAIL parameter.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "smtp/smtp.h"
#include "spool/spool.h"
#include "tlspol/tlspol.h"

/* Any non-NULL rrset pointer: reqtls only looks at whether there is one. */
static const char t_fake_rrset;
#define T_TLSA ((const struct dns_rrset *)(const void *)&t_fake_rrset)

static struct tls_req
t_req(enum tls_level level, int sts, int tlsa)
{
    struct tls_req r;

    memset(&r, 0, sizeof(r));
    r.level = level;
    r.sts_enforce = sts;
    r.tlsa = tlsa ? T_TLSA : NULL;
    strcpy(r.verify_name, "mx.example.net");
    return r;
}

Test(reqtls, mode_from_the_envelope)
{
    struct spool_env e;

    memset(&e, 0, sizeof(e));
    cr_assert_eq(tls_reqtls_mode(&e), TLS_REQTLS_NONE);
    e.tls_optional = 1;
    cr_assert_eq(tls_reqtls_mode(&e), TLS_REQTLS_OPTIONAL);
    e.requiretls = 1;
    cr_assert_eq(tls_reqtls_mode(&e), TLS_REQTLS_REQUIRE);
}

Test(reqtls, raise_makes_every_level_authenticate)
{
    static const struct {
        enum tls_level in;
        int            sts, tlsa;
        enum tls_level out;
    } cases[] = {
        { TLS_NONE, 0, 0, TLS_VERIFY },
        { TLS_MAY, 0, 0, TLS_VERIFY },
        { TLS_ENCRYPT, 0, 0, TLS_VERIFY },
        { TLS_VERIFY, 0, 0, TLS_VERIFY },
        { TLS_DANE, 0, 0, TLS_VERIFY },     /* dane without records */
        { TLS_DANE, 0, 1, TLS_DANE_ONLY },  /* the records must match */
        { TLS_MAY, 0, 1, TLS_DANE_ONLY },
        { TLS_DANE_ONLY, 0, 0, TLS_DANE_ONLY },
        { TLS_DANE_ONLY, 0, 1, TLS_DANE_ONLY },
        { TLS_MAY, 1, 0, TLS_MAY },         /* sts_enforce: CA-verified */
        { TLS_NONE, 1, 0, TLS_NONE },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tls_req r = t_req(cases[i].in, cases[i].sts, cases[i].tlsa);

        tls_reqtls_raise(&r);
        cr_assert_eq(r.level, cases[i].out, "case %zu: level %d", i,
            (int)r.level);
        cr_assert_eq(r.sts_enforce, cases[i].sts, "case %zu", i);
        cr_assert_eq(r.tlsa != NULL, cases[i].tlsa, "case %zu", i);
        /* whatever it became authenticates, and a second raise is a no-op */
        {
            struct tls_req again = r;

            tls_reqtls_raise(&again);
            cr_assert_eq(again.level, r.level, "case %zu", i);
        }
    }
}

Test(reqtls, insecure_mx_without_sts_is_refused)
{
    struct tls_req r = t_req(TLS_MAY, 0, 0);
    char           why[256];

    cr_assert_eq(tls_reqtls_hop(&r, 1, 0, "mx.example.net", why, sizeof(why)),
        -1);
    cr_assert_eq(strncmp(why, "550 5.7.10 ", 11), 0, "%s", why);
    cr_assert_not_null(strstr(why, "mx.example.net"), "%s", why);
    cr_assert_eq(r.level, TLS_MAY, "a refused hop is left alone");
}

Test(reqtls, secure_mx_sts_or_no_mx_is_accepted_and_raised)
{
    struct tls_req r = t_req(TLS_MAY, 0, 0);
    char           why[256] = "";

    cr_assert_eq(tls_reqtls_hop(&r, 1, 1, "mx", why, sizeof(why)), 0);
    cr_assert_eq(r.level, TLS_VERIFY);
    r = t_req(TLS_MAY, 1, 0);
    cr_assert_eq(tls_reqtls_hop(&r, 1, 0, "mx", why, sizeof(why)), 0);
    cr_assert_eq(r.sts_enforce, 1);
    r = t_req(TLS_NONE, 0, 0);          /* smtp:[host]: no MX lookup */
    cr_assert_eq(tls_reqtls_hop(&r, 0, 0, "relay", why, sizeof(why)), 0);
    cr_assert_eq(r.level, TLS_VERIFY);
    cr_assert_str_eq(why, "");
}

Test(reqtls, optional_drops_only_the_domains_policies)
{
    struct tls_req r = t_req(TLS_DANE, 1, 1);

    tls_reqtls_optional(&r);
    cr_assert_eq(r.level, TLS_MAY);
    cr_assert_null(r.tlsa);
    cr_assert_eq(r.sts_enforce, 0);
    r = t_req(TLS_VERIFY, 1, 0);        /* the operator's verify stays */
    tls_reqtls_optional(&r);
    cr_assert_eq(r.level, TLS_VERIFY);
    cr_assert_eq(r.sts_enforce, 0);
    r = t_req(TLS_ENCRYPT, 0, 0);
    tls_reqtls_optional(&r);
    cr_assert_eq(r.level, TLS_ENCRYPT);
    r = t_req(TLS_DANE_ONLY, 0, 1);
    tls_reqtls_optional(&r);
    cr_assert_eq(r.level, TLS_DANE_ONLY);
    r = t_req(TLS_MAY, 0, 0);
    tls_reqtls_optional(&r);
    cr_assert_eq(r.level, TLS_MAY);
}

Test(reqtls, session_needs_authenticated_tls_and_the_keyword)
{
    struct tls_outcome o;
    char               why[256];
    const char        *host = "mx.example.net[192.0.2.1]:25";

    memset(&o, 0, sizeof(o));
    cr_assert_eq(tls_reqtls_session(&o, SMTP_CAP_REQUIRETLS, 0, host, why,
        sizeof(why)), -1);
    cr_assert_eq(strncmp(why, "550 5.7.10 ", 11), 0, "%s", why);
    cr_assert_not_null(strstr(why, host));
    o.used = 1;
    o.auth = TLS_AUTH_NONE;
    cr_assert_eq(tls_reqtls_session(&o, SMTP_CAP_REQUIRETLS, 1, host, why,
        sizeof(why)), -1);
    cr_assert_eq(strncmp(why, "550 5.7.10 ", 11), 0, "%s", why);
    o.auth = TLS_AUTH_CA;
    cr_assert_eq(tls_reqtls_session(&o, SMTP_CAP_PIPELINING, 0, host, why,
        sizeof(why)), -1);
    cr_assert_eq(strncmp(why, "550 5.7.30 REQUIRETLS support required",
        38), 0, "%s", why);
    cr_assert_eq(tls_reqtls_session(&o, SMTP_CAP_REQUIRETLS, 0, host, why,
        sizeof(why)), 0);
    o.auth = TLS_AUTH_DANE;
    cr_assert_eq(tls_reqtls_session(&o, SMTP_CAP_REQUIRETLS, 0, host, why,
        sizeof(why)), 0);
    o.auth = TLS_AUTH_STS;
    cr_assert_eq(tls_reqtls_session(&o, SMTP_CAP_REQUIRETLS, 0, host, why,
        sizeof(why)), 0);
    /* a bounce (null reverse path) goes without the keyword, RFC 8689 5 */
    cr_assert_eq(tls_reqtls_session(&o, 0, 1, host, why, sizeof(why)), 0);
}

Test(reqtls, tls_failure_reason_is_5_7_10_without_the_old_code)
{
    char why[256];

    tls_reqtls_tls_failed("h[1.2.3.4]:25", "451 4.7.5 TLS is required, but "
        "the certificate of h did not verify", why, sizeof(why));
    cr_assert_str_eq(why, "550 5.7.10 REQUIRETLS: no authenticated TLS "
        "session with h[1.2.3.4]:25: TLS is required, but the certificate "
        "of h did not verify");
    tls_reqtls_tls_failed("h", "STARTTLS not offered", why, sizeof(why));
    cr_assert_str_eq(why, "550 5.7.10 REQUIRETLS: no authenticated TLS "
        "session with h: STARTTLS not offered");
    tls_reqtls_tls_failed("h", "4.7.4 2 x", why, sizeof(why));
    cr_assert_str_eq(why, "550 5.7.10 REQUIRETLS: no authenticated TLS "
        "session with h: 2 x");
}

Test(reqtls, mail_parameter_only_with_flag_and_keyword)
{
    struct spool_env e;

    memset(&e, 0, sizeof(e));
    cr_assert_str_eq(tls_reqtls_mail_param(&e, SMTP_CAP_REQUIRETLS), "");
    e.requiretls = 1;
    cr_assert_str_eq(tls_reqtls_mail_param(&e, SMTP_CAP_REQUIRETLS),
        " REQUIRETLS");
    cr_assert_str_eq(tls_reqtls_mail_param(&e, SMTP_CAP_PIPELINING), "");
}
