/*
 * test_sts.c - the MTA-STS text parsers (sts/): the `_mta-sts` TXT record
 * (RFC 8461 3.1), the policy file (3.2) and MX patterns (4.1), with the
 * RFC's own examples and hostile input.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sts/sts.h"

static int
txt(const char *s, char *id)
{
    char why[256];

    return sts_txt_parse(s, strlen(s), id, why, sizeof(why));
}


Test(sts_txt, rfc_example_and_variants)
{
    char id[STS_ID_MAX];

    cr_assert_eq(txt("v=STSv1; id=20160831085700Z;", id), 0);
    cr_assert_str_eq(id, "20160831085700Z");
    cr_assert_eq(txt("v=STSv1;id=abc", id), 0);
    cr_assert_str_eq(id, "abc");
    cr_assert_eq(txt("v=STSv1 ;  id=X1 ; ext=va:lue", id), 0);
    cr_assert_str_eq(id, "X1");
    /* the first id counts */
    cr_assert_eq(txt("v=STSv1; id=first; id=second", id), 0);
    cr_assert_str_eq(id, "first");
    /* 32 characters is the longest id */
    cr_assert_eq(txt("v=STSv1; id=0123456789abcdef0123456789ABCDEF", id), 0);
    cr_assert_eq(strlen(id), 32);
}


Test(sts_txt, other_records_are_not_sts)
{
    char id[STS_ID_MAX];

    cr_assert_eq(txt("v=spf1 -all", id), STS_ENOTSTS);
    cr_assert_eq(txt("", id), STS_ENOTSTS);
    cr_assert_eq(txt("v=STSv10; id=1", id), STS_ENOTSTS);
    cr_assert_eq(txt("v=stsv1; id=1", id), STS_ENOTSTS);
    cr_assert_eq(txt(" v=STSv1; id=1", id), STS_ENOTSTS);
}


Test(sts_txt, malformed_sts_records)
{
    char id[STS_ID_MAX], why[256];

    cr_assert_eq(txt("v=STSv1", id), STS_EINVAL);           /* no id */
    cr_assert_eq(txt("v=STSv1;", id), STS_EINVAL);
    cr_assert_eq(txt("v=STSv1; id=", id), STS_EINVAL);
    cr_assert_eq(txt("v=STSv1; id=a-b", id), STS_EINVAL);
    cr_assert_eq(txt("v=STSv1; id=0123456789abcdef0123456789ABCDEFx", id),
        STS_EINVAL);
    cr_assert_eq(txt("v=STSv1 id=1", id), STS_EINVAL);
    cr_assert_eq(txt("v=STSv1; id=1; =x", id), STS_EINVAL);
    cr_assert_eq(txt("v=STSv1; id=1; novalue", id), STS_EINVAL);
    /* a NUL and a control byte in the reason come out escaped */
    cr_assert_eq(sts_txt_parse("v=STSv1; id=\0\x1b", 15, id, why,
        sizeof(why)), STS_EINVAL);
    cr_assert_null(strchr(why, '\x1b'));
    cr_assert_not_null(strstr(why, "\\x00"), "%s", why);
}


static int
pol(const char *s, struct sts_policy *p)
{
    char why[256];

    return sts_policy_parse(s, strlen(s), p, why, sizeof(why));
}


Test(sts_policy, rfc_example)
{
    struct sts_policy p;

    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: mail.example.com\n"
        "mx: *.example.net\nmx: backupmx.example.com\nmax_age: 604800\n",
        &p), 0);
    cr_assert_eq(p.mode, STS_MODE_ENFORCE);
    cr_assert_eq(p.max_age, 604800);
    cr_assert_eq(p.nmx, 3);
    cr_assert_str_eq(p.mx[0], "mail.example.com");
    cr_assert_str_eq(p.mx[1], "*.example.net");
    cr_assert_str_eq(sts_mode_name(p.mode), "enforce");
}


Test(sts_policy, crlf_order_case_spaces_extensions)
{
    struct sts_policy p;

    cr_assert_eq(pol("mx: MX1.Example.ORG.\r\nmax_age:86400 \r\n"
        "x-ext: anything goes\r\nmode:   testing\r\nversion: STSv1\r\n\r\n",
        &p), 0);
    cr_assert_eq(p.mode, STS_MODE_TESTING);
    cr_assert_eq(p.max_age, 86400);
    cr_assert_eq(p.nmx, 1);
    cr_assert_str_eq(p.mx[0], "mx1.example.org");
    /* no final newline; mode none needs no mx */
    cr_assert_eq(pol("version: STSv1\nmode: none\nmax_age: 0", &p), 0);
    cr_assert_eq(p.mode, STS_MODE_NONE);
    cr_assert_eq(p.nmx, 0);
    /* the first of a repeated field wins */
    cr_assert_eq(pol("version: STSv1\nmode: testing\nmode: enforce\n"
        "mx: a.b\nmax_age: 5\nmax_age: 9\n", &p), 0);
    cr_assert_eq(p.mode, STS_MODE_TESTING);
    cr_assert_eq(p.max_age, 5);
}


Test(sts_policy, max_age_is_clamped_to_a_year)
{
    struct sts_policy p;

    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a.b\n"
        "max_age: 9999999999\n", &p), 0);
    cr_assert_eq(p.max_age, STS_MAX_AGE_MAX);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a.b\n"
        "max_age: 31557600\n", &p), 0);
    cr_assert_eq(p.max_age, 31557600);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a.b\n"
        "max_age: 12345678901\n", &p), STS_EINVAL);      /* 11 digits */
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a.b\n"
        "max_age: -1\n", &p), STS_EINVAL);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a.b\n"
        "max_age: \n", &p), STS_EINVAL);
}


Test(sts_policy, invalid_policies)
{
    struct sts_policy p;
    char              big[STS_POLICY_MAX + 2];

    cr_assert_eq(pol("version: STSv2\nmode: enforce\nmx: a.b\nmax_age: 1\n",
        &p), STS_EINVAL);
    cr_assert_eq(pol("mode: enforce\nmx: a.b\nmax_age: 1\n", &p),
        STS_EINVAL);
    cr_assert_eq(pol("version: STSv1\nmx: a.b\nmax_age: 1\n", &p),
        STS_EINVAL);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a.b\n", &p),
        STS_EINVAL);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmax_age: 1\n", &p),
        STS_EINVAL);                                      /* no mx */
    cr_assert_eq(pol("version: STSv1\nmode: Enforce\nmx: a.b\nmax_age: 1\n",
        &p), STS_EINVAL);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a..b\nmax_age: 1\n",
        &p), STS_EINVAL);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: a.*.b\n"
        "max_age: 1\n", &p), STS_EINVAL);
    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: -a.b\nmax_age: 1\n",
        &p), STS_EINVAL);
    cr_assert_eq(pol("<html>\n<body>Not found</body>\n", &p), STS_EINVAL);
    cr_assert_eq(sts_policy_parse("version: STSv1\0", 15, &p, NULL, 0),
        STS_EINVAL);
    memset(big, '\n', sizeof(big));
    cr_assert_eq(sts_policy_parse(big, sizeof(big), &p, NULL, 0),
        STS_EINVAL);
}


Test(sts_policy, too_many_mx_patterns)
{
    struct sts_policy p;
    char              buf[8192];
    size_t            o = 0;
    int               i;

    o += (size_t)snprintf(buf + o, sizeof(buf) - o,
        "version: STSv1\nmode: enforce\nmax_age: 60\n");
    for (i = 0; i < STS_MX_MAX; i++)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "mx: m%d.x.org\n", i);
    cr_assert_eq(sts_policy_parse(buf, o, &p, NULL, 0), 0);
    cr_assert_eq(p.nmx, STS_MX_MAX);
    cr_assert_eq(p.mx_ignored, 0);
    /* more: the first 64 apply, the rest are counted, not kept */
    o += (size_t)snprintf(buf + o, sizeof(buf) - o, "mx: one.more.org\n"
        "mx: *.two.more.org\n");
    cr_assert_eq(sts_policy_parse(buf, o, &p, NULL, 0), 0);
    cr_assert_eq(p.nmx, STS_MX_MAX);
    cr_assert_eq(p.mx_ignored, 2);
    cr_assert_eq(p.mode, STS_MODE_ENFORCE);
    cr_assert_eq(sts_mx_match(&p, "m0.x.org"), 1);
    cr_assert_eq(sts_mx_match(&p, "m63.x.org"), 1);
    cr_assert_eq(sts_mx_match(&p, "one.more.org"), 0);
    /* a malformed pattern past the first 64 still makes it invalid */
    o += (size_t)snprintf(buf + o, sizeof(buf) - o, "mx: bad..org\n");
    cr_assert_eq(sts_policy_parse(buf, o, &p, NULL, 0), STS_EINVAL);
}


Test(sts_mx, patterns)
{
    cr_assert_eq(sts_pattern_match("mail.example.com", "mail.example.com"), 1);
    cr_assert_eq(sts_pattern_match("mail.example.com", "MAIL.Example.com."), 1);
    cr_assert_eq(sts_pattern_match("mail.example.com", "mail2.example.com"), 0);
    cr_assert_eq(sts_pattern_match("mail.example.com", "example.com"), 0);
    /* "*" is exactly one leftmost label (RFC 8461 4.1) */
    cr_assert_eq(sts_pattern_match("*.example.net", "mx1.example.net"), 1);
    cr_assert_eq(sts_pattern_match("*.example.net", "MX1.EXAMPLE.NET."), 1);
    cr_assert_eq(sts_pattern_match("*.example.net", "example.net"), 0);
    cr_assert_eq(sts_pattern_match("*.example.net", "a.b.example.net"), 0);
    cr_assert_eq(sts_pattern_match("*.example.net", "mx1.example.net.evil"),
        0);
    cr_assert_eq(sts_pattern_match("*.example.net", "mx1xexample.net"), 0);
    cr_assert_eq(sts_pattern_match("*.example.net", ".example.net"), 0);
    cr_assert_eq(sts_pattern_match("*.example.net", ""), 0);
}


Test(sts_mx, policy_match)
{
    struct sts_policy p;

    cr_assert_eq(pol("version: STSv1\nmode: enforce\nmx: mail.example.com\n"
        "mx: *.example.net\nmax_age: 60\n", &p), 0);
    cr_assert_eq(sts_mx_match(&p, "mail.example.com"), 1);
    cr_assert_eq(sts_mx_match(&p, "x.example.net"), 1);
    cr_assert_eq(sts_mx_match(&p, "mx.attacker.org"), 0);
}
