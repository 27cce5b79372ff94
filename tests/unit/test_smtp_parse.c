/*
 * test_smtp_parse.c - table-driven tests of the SMTP command parsers:
 * every verb, every MAIL/RCPT parameter, every error reply, the address
 * forms (quoted local parts, IPv4/IPv6 literals, UTF-8 with and without
 * SMTPUTF8, null sender, source routes, length limits) and BDAT/EHLO.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "smtp/smtp.h"

static struct str
S(const char *s)
{
    struct str r = { s, strlen(s) };
    return r;
}

/* --- verbs ------------------------------------------------------------ */

static const struct {
    const char     *line;
    enum smtp_verb  verb;
    const char     *arg;        /* expected argument */
} verb_cases[] = {
    { "EHLO example.com", SMTP_EHLO, "example.com" },
    { "ehlo example.com", SMTP_EHLO, "example.com" },
    { "HeLo x", SMTP_HELO, "x" },
    { "MAIL FROM:<a@b>", SMTP_MAIL, "FROM:<a@b>" },
    { "mail from:<a@b>", SMTP_MAIL, "from:<a@b>" },
    { "RCPT TO:<a@b>", SMTP_RCPT, "TO:<a@b>" },
    { "DATA", SMTP_DATA, "" },
    { "data", SMTP_DATA, "" },
    { "DATA ", SMTP_DATA, "" },
    { "BDAT 10 LAST", SMTP_BDAT, "10 LAST" },
    { "RSET", SMTP_RSET, "" },
    { "NOOP", SMTP_NOOP, "" },
    { "noop hello there", SMTP_NOOP, "hello there" },
    { "QUIT", SMTP_QUIT, "" },
    { "VRFY postmaster", SMTP_VRFY, "postmaster" },
    { "HELP", SMTP_HELP, "" },
    { "help mail", SMTP_HELP, "mail" },
    { "STARTTLS", SMTP_STARTTLS, "" },
    { "StartTls", SMTP_STARTTLS, "" },
    { "AUTH PLAIN AGFsaWNlAHB3", SMTP_AUTH, "PLAIN AGFsaWNlAHB3" },
    { "auth login", SMTP_AUTH, "login" },
    { "AUTHX", SMTP_UNKNOWN, "" },
    { "MAIL  FROM:<a@b>", SMTP_MAIL, " FROM:<a@b>" },  /* rest after one */
    { "DATAX", SMTP_UNKNOWN, "" },
    { "MAILFROM:<a@b>", SMTP_UNKNOWN, "" },
    { "STARTTLSX", SMTP_UNKNOWN, "" },
    { "START", SMTP_UNKNOWN, "" },
    { "", SMTP_UNKNOWN, "" },
    { "EXPN root", SMTP_UNKNOWN, "" },
    { "TURN", SMTP_UNKNOWN, "" },
    { " DATA", SMTP_UNKNOWN, "" },
    { "DATA\t", SMTP_UNKNOWN, "" },
    { "QUI", SMTP_UNKNOWN, "" },
};

Test(smtp_parse, verbs)
{
    size_t i;
    struct str arg;

    for (i = 0; i < sizeof(verb_cases) / sizeof(verb_cases[0]); i++) {
        enum smtp_verb v = smtp_parse_verb(S(verb_cases[i].line), &arg);
        cr_expect_eq(v, verb_cases[i].verb, "verb of \"%s\": %d",
            verb_cases[i].line, v);
        cr_expect(arg.n == strlen(verb_cases[i].arg) &&
            memcmp(arg.p, verb_cases[i].arg, arg.n) == 0,
            "arg of \"%s\": \"%.*s\"", verb_cases[i].line, (int)arg.n, arg.p);
    }
}

Test(smtp_parse, verb_no_nul_needed)
{
    /* The line is a view into a buffer: bytes after n must not matter. */
    char buf[] = "DATAXYZ";
    struct str line = { buf, 4 }, arg;

    cr_expect_eq(smtp_parse_verb(line, &arg), SMTP_DATA);
    cr_expect_eq(arg.n, 0);
}

/* --- MAIL ------------------------------------------------------------- */

struct mail_case {
    const char *arg;
    const char *addr;           /* NULL: must fail */
    const char *reply;          /* expected reply on failure (full) */
    uint64_t    size;
    int         body, utf8, ret;
    const char *envid;
};

static const struct mail_case mail_cases[] = {
    { "FROM:<a@example.com>", "a@example.com", NULL, 0, 0, 0, 0, "" },
    { "from:<a@example.com>", "a@example.com", NULL, 0, 0, 0, 0, "" },
    { "From: <a@example.com>", "a@example.com", NULL, 0, 0, 0, 0, "" },
    { "FROM:<>", "", NULL, 0, 0, 0, 0, "" },
    { "FROM:<> SIZE=100", "", NULL, 100, 0, 0, 0, "" },
    { "FROM:<A.B+c@Ex-ample.COM>", "A.B+c@Ex-ample.COM", NULL, 0, 0, 0, 0, "" },
    { "FROM:<a@b> SIZE=12345", "a@b", NULL, 12345, 0, 0, 0, "" },
    { "FROM:<a@b> size=0", "a@b", NULL, 0, 0, 0, 0, "" },
    { "FROM:<a@b> SIZE=18446744073709551615", "a@b", NULL,
        UINT64_MAX, 0, 0, 0, "" },
    { "FROM:<a@b> BODY=7BIT", "a@b", NULL, 0, SMTP_BODY_7BIT, 0, 0, "" },
    { "FROM:<a@b> BODY=8bitmime", "a@b", NULL, 0, SMTP_BODY_8BITMIME, 0, 0,
        "" },
    { "FROM:<a@b> BODY=BINARYMIME", "a@b", NULL, 0, SMTP_BODY_BINARYMIME,
        0, 0, "" },
    { "FROM:<a@b> SMTPUTF8", "a@b", NULL, 0, 0, 1, 0, "" },
    { "FROM:<a@b> smtputf8", "a@b", NULL, 0, 0, 1, 0, "" },
    { "FROM:<a@b> RET=FULL", "a@b", NULL, 0, 0, 0, SMTP_RET_FULL, "" },
    { "FROM:<a@b> ret=hdrs", "a@b", NULL, 0, 0, 0, SMTP_RET_HDRS, "" },
    { "FROM:<a@b> ENVID=QQ314159", "a@b", NULL, 0, 0, 0, 0, "QQ314159" },
    { "FROM:<a@b> ENVID=a+2Bb+3Dc", "a@b", NULL, 0, 0, 0, 0, "a+b=c" },
    /* RFC 4954 5: accepted, not kept */
    { "FROM:<a@b> AUTH=<>", "a@b", NULL, 0, 0, 0, 0, "" },
    { "FROM:<a@b> AUTH=alice+40example.org", "a@b", NULL, 0, 0, 0, 0, "" },
    { "FROM:<a@b> SIZE=1 BODY=8BITMIME SMTPUTF8 RET=HDRS ENVID=x",
        "a@b", NULL, 1, SMTP_BODY_8BITMIME, 1, SMTP_RET_HDRS, "x" },
    { "FROM:<a@b>  SIZE=1   BODY=7BIT  ", "a@b", NULL, 1, 0, 0, 0, "" },
    { "FROM:<a@b> ", "a@b", NULL, 0, 0, 0, 0, "" },
    /* UTF-8 sender with SMTPUTF8 given on the same MAIL */
    { "FROM:<j\xc3\xb6rg@m\xc3\xbcnchen.de> SMTPUTF8",
        "j\xc3\xb6rg@m\xc3\xbcnchen.de", NULL, 0, 0, 1, 0, "" },
    { "FROM:<\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe5\xb9\xbf"
        "\xe5\x91\x8a> SMTPUTF8",
        "\xe7\x94\xa8\xe6\x88\xb7@\xe4\xbe\x8b\xe5\xad\x90.\xe5\xb9\xbf"
        "\xe5\x91\x8a", NULL, 0, 0, 1, 0, "" },
    /* source route dropped */
    { "FROM:<@relay.example,@r2.example:a@b>", "a@b", NULL, 0, 0, 0, 0, "" },
    { "FROM:<\"a b\"@example.com>", "\"a b\"@example.com", NULL,
        0, 0, 0, 0, "" },
    { "FROM:<a@[192.0.2.1]>", "a@[192.0.2.1]", NULL, 0, 0, 0, 0, "" },

    /* errors */
    { "", NULL, "501 5.5.4 Syntax: MAIL FROM:<address>", 0, 0, 0, 0, NULL },
    { "TO:<a@b>", NULL, "501 5.5.4 Syntax: MAIL FROM:<address>",
        0, 0, 0, 0, NULL },
    { "FROM", NULL, "501 5.5.4 Syntax: MAIL FROM:<address>", 0, 0, 0, 0,
        NULL },
    { "FROM:", NULL, "501 5.1.7 Bad sender address syntax", 0, 0, 0, 0,
        NULL },
    { "FROM:a@b", NULL, "501 5.1.7 Bad sender address syntax",
        0, 0, 0, 0, NULL },
    { "FROM:  <a@b>", NULL, "501 5.1.7 Bad sender address syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b", NULL, "501 5.1.7 Bad sender address syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b>x", NULL, "501 5.1.7 Bad sender address syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE=", NULL, "501 5.5.4 Bad message size syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE", NULL, "501 5.5.4 Bad message size syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE=12a", NULL, "501 5.5.4 Bad message size syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE=-1", NULL, "501 5.5.4 Bad message size syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE=18446744073709551616", NULL,
        "501 5.5.4 Bad message size syntax", 0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE=99999999999999999999999", NULL,
        "501 5.5.4 Bad message size syntax", 0, 0, 0, 0, NULL },
    { "FROM:<a@b> BODY=9BIT", NULL, "501 5.5.4 Bad BODY keyword value",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> BODY", NULL, "501 5.5.4 Bad BODY keyword value",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> SMTPUTF8=yes", NULL,
        "501 5.5.4 Bad SMTPUTF8 parameter syntax", 0, 0, 0, 0, NULL },
    { "FROM:<a@b> RET=ALL", NULL, "501 5.5.4 Bad RET parameter syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> RET", NULL, "501 5.5.4 Bad RET parameter syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> ENVID=", NULL, "501 5.5.4 Bad ENVID parameter syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> ENVID=a+2", NULL, "501 5.5.4 Bad ENVID parameter syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> ENVID=a+0D", NULL, "501 5.5.4 Bad ENVID parameter syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> ENVID=\xc3\xa9", NULL,
        "501 5.5.4 Bad ENVID parameter syntax", 0, 0, 0, 0, NULL },
    /* decoded, still printable US-ASCII only (RFC 3461 4.4): a C1 CSI
     * (U+009B) or any 8-bit byte would reach DSNs and terminals */
    { "FROM:<a@b> ENVID=+C2+9B31m", NULL,
        "501 5.5.4 Bad ENVID parameter syntax", 0, 0, 0, 0, NULL },
    { "FROM:<a@b> SMTPUTF8 ENVID=+C3+A9", NULL,
        "501 5.5.4 Bad ENVID parameter syntax", 0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE=1 SIZE=2", NULL, "501 5.5.4 Duplicate parameter",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> BODY=7BIT body=8BITMIME", NULL,
        "501 5.5.4 Duplicate parameter", 0, 0, 0, 0, NULL },
    { "FROM:<a@b> SMTPUTF8 SMTPUTF8", NULL, "501 5.5.4 Duplicate parameter",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> RET=FULL RET=FULL", NULL, "501 5.5.4 Duplicate parameter",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> ENVID=1 ENVID=2", NULL, "501 5.5.4 Duplicate parameter",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> FOO=bar", NULL, "555 5.5.4 Unsupported option: FOO",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> AUTH=", NULL, "501 5.5.4 Bad AUTH parameter syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> AUTH=a+ZZb", NULL, "501 5.5.4 Bad AUTH parameter syntax",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> AUTH=<> AUTH=<>", NULL, "501 5.5.4 Duplicate parameter",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> NOTIFY=NEVER", NULL,
        "555 5.5.4 Unsupported option: NOTIFY", 0, 0, 0, 0, NULL },
    { "FROM:<a@b> =x", NULL, "501 5.5.4 Syntax error in parameters",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> SIZE=1=2", NULL, "501 5.5.4 Syntax error in parameters",
        0, 0, 0, 0, NULL },
    { "FROM:<a@b> S!ZE=1", NULL, "501 5.5.4 Syntax error in parameters",
        0, 0, 0, 0, NULL },
    /* UTF-8 sender without SMTPUTF8 */
    { "FROM:<j\xc3\xb6rg@example.com>", NULL,
        "553 5.6.7 Non-ASCII sender address requires SMTPUTF8",
        0, 0, 0, 0, NULL },
    { "FROM:<a@m\xc3\xbcnchen.de> SIZE=10", NULL,
        "553 5.6.7 Non-ASCII sender address requires SMTPUTF8",
        0, 0, 0, 0, NULL },
    /* malformed UTF-8 fails even with SMTPUTF8 */
    { "FROM:<j\xc3@example.com> SMTPUTF8", NULL,
        "501 5.1.7 Bad sender address syntax: invalid UTF-8",
        0, 0, 0, 0, NULL },
    { "FROM:<postmaster>", NULL, "501 5.1.7 Bad sender address syntax",
        0, 0, 0, 0, NULL },
};

Test(smtp_parse, mail_table)
{
    size_t i;

    for (i = 0; i < sizeof(mail_cases) / sizeof(mail_cases[0]); i++) {
        const struct mail_case *c = &mail_cases[i];
        struct smtp_mail m;
        const char *reply = NULL;
        int rc = smtp_parse_mail(S(c->arg), &m, &reply);

        if (c->addr == NULL) {
            cr_expect_eq(rc, -1, "MAIL %s: should fail", c->arg);
            cr_expect(reply != NULL && strcmp(reply, c->reply) == 0,
                "MAIL %s: reply \"%s\" want \"%s\"", c->arg,
                reply ? reply : "(null)", c->reply);
            continue;
        }
        cr_expect_eq(rc, 0, "MAIL %s: failed: %s", c->arg,
            reply ? reply : "");
        if (rc != 0)
            continue;
        cr_expect_str_eq(m.addr, c->addr, "MAIL %s", c->arg);
        cr_expect_eq(m.size, c->size, "MAIL %s size", c->arg);
        cr_expect_eq(m.body, c->body, "MAIL %s body", c->arg);
        cr_expect_eq(m.smtputf8, c->utf8, "MAIL %s smtputf8", c->arg);
        cr_expect_eq(m.ret, c->ret, "MAIL %s ret", c->arg);
        cr_expect_str_eq(m.envid, c->envid, "MAIL %s envid", c->arg);
    }
}

Test(smtp_parse, mail_envid_length)
{
    char line[400];
    struct smtp_mail m;
    const char *reply;

    /* 100 decoded octets fit; 101 do not (RFC 3461: 100 characters). */
    snprintf(line, sizeof(line), "FROM:<a@b> ENVID=%0100d", 0);
    cr_expect_eq(smtp_parse_mail(S(line), &m, &reply), 0);
    cr_expect_eq(strlen(m.envid), 100);
    snprintf(line, sizeof(line), "FROM:<a@b> ENVID=%0101d", 0);
    cr_expect_eq(smtp_parse_mail(S(line), &m, &reply), -1);
    cr_expect_str_eq(reply, "501 5.5.4 Bad ENVID parameter syntax");
    /* 100 decoded from 300 encoded bytes */
    strcpy(line, "FROM:<a@b> ENVID=");
    for (int i = 0; i < 100; i++)
        strcat(line, "+2B");
    cr_expect_eq(smtp_parse_mail(S(line), &m, &reply), 0);
    cr_expect_eq(strlen(m.envid), 100);
    cr_expect_eq(m.envid[99], '+');
}

Test(smtp_parse, mail_unsupported_long_name)
{
    char line[300];
    struct smtp_mail m;
    const char *reply;

    memset(line, 0, sizeof(line));
    strcpy(line, "FROM:<a@b> ");
    memset(line + strlen(line), 'Q', 200);
    cr_expect_eq(smtp_parse_mail(S(line), &m, &reply), -1);
    cr_expect(strncmp(reply, "555 5.5.4 Unsupported option: QQQQ", 34) == 0,
        "%s", reply);
    cr_expect_leq(strlen(reply), 30 + 64, "reply bounded: %zu",
        strlen(reply));
}

/* --- RCPT ------------------------------------------------------------- */

struct rcpt_case {
    const char *arg;
    int         utf8;
    const char *addr;           /* NULL: must fail */
    const char *reply;
    unsigned    notify;
    const char *orcpt;
};

static const struct rcpt_case rcpt_cases[] = {
    { "TO:<b@example.org>", 0, "b@example.org", NULL, 0, "" },
    { "to:<b@example.org>", 0, "b@example.org", NULL, 0, "" },
    { "To: <b@example.org>", 0, "b@example.org", NULL, 0, "" },
    { "TO:<postmaster>", 0, "postmaster", NULL, 0, "" },
    { "TO:<PostMaster>", 0, "PostMaster", NULL, 0, "" },
    { "TO:<postmaster@example.org>", 0, "postmaster@example.org", NULL,
        0, "" },
    { "TO:<@hop1,@hop2:c@d>", 0, "c@d", NULL, 0, "" },
    { "TO:<@[10.0.0.1]:c@d>", 0, "c@d", NULL, 0, "" },
    { "TO:<b@c> NOTIFY=NEVER", 0, "b@c", NULL, SMTP_NOTIFY_NEVER, "" },
    { "TO:<b@c> NOTIFY=SUCCESS", 0, "b@c", NULL, SMTP_NOTIFY_SUCCESS, "" },
    { "TO:<b@c> notify=success,failure", 0, "b@c", NULL,
        SMTP_NOTIFY_SUCCESS | SMTP_NOTIFY_FAILURE, "" },
    { "TO:<b@c> NOTIFY=DELAY,FAILURE,SUCCESS", 0, "b@c", NULL,
        SMTP_NOTIFY_SUCCESS | SMTP_NOTIFY_FAILURE | SMTP_NOTIFY_DELAY,
        "" },
    { "TO:<b@c> ORCPT=rfc822;b@c", 0, "b@c", NULL, 0, "rfc822;b@c" },
    { "TO:<b@c> ORCPT=rfc822;x+2By@c", 0, "b@c", NULL, 0, "rfc822;x+y@c" },
    { "TO:<b@c> NOTIFY=FAILURE ORCPT=RFC822;B@C", 0, "b@c", NULL,
        SMTP_NOTIFY_FAILURE, "RFC822;B@C" },
    { "TO:<\xc3\xbc@b\xc3\xbc.de>", 1, "\xc3\xbc@b\xc3\xbc.de", NULL, 0, "" },

    { "", 0, NULL, "501 5.5.4 Syntax: RCPT TO:<address>", 0, NULL },
    { "FROM:<a@b>", 0, NULL, "501 5.5.4 Syntax: RCPT TO:<address>", 0, NULL },
    { "TO:<>", 0, NULL, "501 5.1.3 Bad recipient address syntax: empty "
        "address", 0, NULL },
    { "TO:b@c", 0, NULL, "501 5.1.3 Bad recipient address syntax", 0, NULL },
    { "TO:<b>", 0, NULL, "501 5.1.3 Bad recipient address syntax", 0, NULL },
    { "TO:<postmaster@>", 0, NULL, "501 5.1.3 Bad recipient address syntax",
        0, NULL },
    { "TO:<@hop:postmaster>", 0, NULL,
        "501 5.1.3 Bad recipient address syntax", 0, NULL },
    { "TO:<b@c>d", 0, NULL, "501 5.1.3 Bad recipient address syntax",
        0, NULL },
    { "TO:<b@c> NOTIFY=NEVER,SUCCESS", 0, NULL,
        "501 5.5.4 Bad NOTIFY parameter syntax", 0, NULL },
    { "TO:<b@c> NOTIFY=DELAY,NEVER", 0, NULL,
        "501 5.5.4 Bad NOTIFY parameter syntax", 0, NULL },
    { "TO:<b@c> NOTIFY=", 0, NULL, "501 5.5.4 Bad NOTIFY parameter syntax",
        0, NULL },
    { "TO:<b@c> NOTIFY", 0, NULL, "501 5.5.4 Bad NOTIFY parameter syntax",
        0, NULL },
    { "TO:<b@c> NOTIFY=SUCCESS,", 0, NULL,
        "501 5.5.4 Bad NOTIFY parameter syntax", 0, NULL },
    { "TO:<b@c> NOTIFY=SOMETIMES", 0, NULL,
        "501 5.5.4 Bad NOTIFY parameter syntax", 0, NULL },
    { "TO:<b@c> ORCPT=b@c", 0, NULL, "501 5.5.4 Bad ORCPT parameter syntax",
        0, NULL },
    { "TO:<b@c> ORCPT=;b@c", 0, NULL, "501 5.5.4 Bad ORCPT parameter syntax",
        0, NULL },
    { "TO:<b@c> ORCPT=rfc822;", 0, NULL,
        "501 5.5.4 Bad ORCPT parameter syntax", 0, NULL },
    { "TO:<b@c> ORCPT=rfc822;a+ZZ", 0, NULL,
        "501 5.5.4 Bad ORCPT parameter syntax", 0, NULL },
    /* xtext decodes to US-ASCII only (RFC 3461 4.2; RFC 6533 writes
     * non-ASCII as \x{...}, never as +XX) */
    { "TO:<b@c> ORCPT=rfc822;+C2+9B@c", 0, NULL,
        "501 5.5.4 Bad ORCPT parameter syntax", 0, NULL },
    { "TO:<b@c> ORCPT=rfc822;+C3+A9@c", 1, NULL,
        "501 5.5.4 Bad ORCPT parameter syntax", 0, NULL },
    { "TO:<b@c> ORCPT=rfc(822;a", 0, NULL,
        "501 5.5.4 Bad ORCPT parameter syntax", 0, NULL },
    { "TO:<b@c> NOTIFY=NEVER NOTIFY=NEVER", 0, NULL,
        "501 5.5.4 Duplicate parameter", 0, NULL },
    { "TO:<b@c> ORCPT=rfc822;a ORCPT=rfc822;a", 0, NULL,
        "501 5.5.4 Duplicate parameter", 0, NULL },
    { "TO:<b@c> SIZE=10", 0, NULL, "555 5.5.4 Unsupported option: SIZE",
        0, NULL },
    { "TO:<b@c> X-FOO", 0, NULL, "555 5.5.4 Unsupported option: X-FOO",
        0, NULL },
    { "TO:<\xc3\xbc@example.de>", 0, NULL,
        "553 5.6.7 Non-ASCII recipient address requires SMTPUTF8", 0, NULL },
    { "TO:<b@b\xc3\xbc.de>", 0, NULL,
        "553 5.6.7 Non-ASCII recipient address requires SMTPUTF8", 0, NULL },
    { "TO:<\"\xc3\xbc\"@example.de>", 0, NULL,
        "553 5.6.7 Non-ASCII recipient address requires SMTPUTF8", 0, NULL },
    { "TO:<b@b\xed\xa0\x80.de>", 1, NULL,
        "501 5.1.3 Bad recipient address syntax: invalid UTF-8", 0, NULL },
    { "TO:<b@[1.2.3]>", 0, NULL,
        "501 5.1.3 Bad recipient address syntax: bad address literal",
        0, NULL },
};

Test(smtp_parse, rcpt_table)
{
    size_t i;

    for (i = 0; i < sizeof(rcpt_cases) / sizeof(rcpt_cases[0]); i++) {
        const struct rcpt_case *c = &rcpt_cases[i];
        struct smtp_rcpt r;
        const char *reply = NULL;
        int rc = smtp_parse_rcpt(S(c->arg), c->utf8, &r, &reply);

        if (c->addr == NULL) {
            cr_expect_eq(rc, -1, "RCPT %s: should fail", c->arg);
            cr_expect(reply != NULL && strcmp(reply, c->reply) == 0,
                "RCPT %s: reply \"%s\" want \"%s\"", c->arg,
                reply ? reply : "(null)", c->reply);
            continue;
        }
        cr_expect_eq(rc, 0, "RCPT %s: failed: %s", c->arg,
            reply ? reply : "");
        if (rc != 0)
            continue;
        cr_expect_str_eq(r.addr, c->addr, "RCPT %s", c->arg);
        cr_expect_eq(r.notify, c->notify, "RCPT %s notify", c->arg);
        cr_expect_str_eq(r.orcpt, c->orcpt, "RCPT %s orcpt", c->arg);
    }
}

/* --- paths ------------------------------------------------------------ */

struct path_case {
    const char *in;
    int         allow_null, utf8;
    const char *out;            /* NULL: must fail */
    size_t      end;            /* expected *end on success */
};

static const struct path_case path_cases[] = {
    { "<a@b>", 0, 0, "a@b", 5 },
    { "<a@b> SIZE=1", 0, 0, "a@b", 5 },
    { "<>", 1, 0, "", 2 },
    { "<> x", 1, 0, "", 2 },
    { "<>", 0, 0, NULL, 0 },
    { "<first.last@sub.example.com>", 0, 0, "first.last@sub.example.com", 28 },
    { "<!#$%&'*+-/=?^_`{|}~@x.y>", 0, 0, "!#$%&'*+-/=?^_`{|}~@x.y", 25 },
    { "<a@x-y.z>", 0, 0, "a@x-y.z", 9 },
    { "<a@123.example>", 0, 0, "a@123.example", 15 },
    { "<a@localhost>", 0, 0, "a@localhost", 13 },
    /* quoted local parts: kept as written */
    { "<\"a b\"@c>", 0, 0, "\"a b\"@c", 9 },
    { "<\"a\\\"b\"@c>", 0, 0, "\"a\\\"b\"@c", 10 },
    { "<\"a\\\\b\"@c>", 0, 0, "\"a\\\\b\"@c", 10 },
    { "<\"a@b>c\"@d>", 0, 0, "\"a@b>c\"@d", 11 },
    { "<\"\"@c>", 0, 0, "\"\"@c", 6 },
    { "<\"a\tb\"@c>", 0, 0, NULL, 0 },
    { "<\"a\"b@c>", 0, 0, NULL, 0 },
    { "<\"ab@c>", 0, 0, NULL, 0 },
    { "<\"a\\", 0, 0, NULL, 0 },
    /* IP literals */
    { "<a@[127.0.0.1]>", 0, 0, "a@[127.0.0.1]", 15 },
    { "<a@[IPv6:::1]>", 0, 0, "a@[IPv6:::1]", 14 },
    { "<a@[ipv6:2001:db8::1]>", 0, 0, "a@[ipv6:2001:db8::1]", 22 },
    { "<a@[IPv6:::ffff:1.2.3.4]>", 0, 0, "a@[IPv6:::ffff:1.2.3.4]", 25 },
    { "<a@[256.0.0.1]>", 0, 0, NULL, 0 },
    { "<a@[1.2.3]>", 0, 0, NULL, 0 },
    { "<a@[::1]>", 0, 0, NULL, 0 },
    { "<a@[IPv6:1.2.3.4]>", 0, 0, NULL, 0 },
    { "<a@[IPv6:gggg::1]>", 0, 0, NULL, 0 },
    { "<a@[]>", 0, 0, NULL, 0 },
    { "<a@[1.2.3.4>", 0, 0, NULL, 0 },
    { "<a@[x-tag:abc]>", 0, 0, NULL, 0 },
    /* source routes */
    { "<@x:a@b>", 0, 0, "a@b", 8 },
    { "<@x.y,@z:a@b>", 0, 0, "a@b", 13 },
    { "<@x,a@b>", 0, 0, NULL, 0 },
    { "<@:a@b>", 0, 0, NULL, 0 },
    { "<@x,:a@b>", 0, 0, NULL, 0 },
    { "<@x:>", 0, 0, NULL, 0 },
    /* bad dot-strings and domains */
    { "<.a@b>", 0, 0, NULL, 0 },
    { "<a.@b>", 0, 0, NULL, 0 },
    { "<a..b@c>", 0, 0, NULL, 0 },
    { "<@b>", 0, 0, NULL, 0 },
    { "<a@>", 0, 0, NULL, 0 },
    { "<a@.b>", 0, 0, NULL, 0 },
    { "<a@b.>", 0, 0, NULL, 0 },
    { "<a@b..c>", 0, 0, NULL, 0 },
    { "<a@-b.c>", 0, 0, NULL, 0 },
    { "<a@b-.c>", 0, 0, NULL, 0 },
    { "<a@b_c.d>", 0, 0, NULL, 0 },
    { "<a b@c>", 0, 0, NULL, 0 },
    { "<a@b c>", 0, 0, NULL, 0 },
    { "<a@b@c>", 0, 0, NULL, 0 },
    { "<a(b)@c>", 0, 0, NULL, 0 },
    { "a@b", 0, 0, NULL, 0 },
    { "<a@b", 0, 0, NULL, 0 },
    { "<", 0, 0, NULL, 0 },
    { "", 0, 0, NULL, 0 },
    { "<a@b\x01>", 0, 0, NULL, 0 },
    /* UTF-8 */
    { "<\xc3\xa9@\xc3\xa9.fr>", 0, 1, "\xc3\xa9@\xc3\xa9.fr", 10 },
    { "<\xc3\xa9@x.fr>", 0, 0, NULL, 0 },
    { "<x@\xc3\xa9.fr>", 0, 0, NULL, 0 },
    { "<\xc0\xaf@x>", 0, 1, NULL, 0 },       /* overlong */
    { "<\xff@x>", 0, 1, NULL, 0 },
    { "<\xe2\x82@x>", 0, 1, NULL, 0 },       /* truncated */
    { "<\xf4\x90\x80\x80@x>", 0, 1, NULL, 0 }, /* > U+10FFFF */
    { "<\xf0\x9f\x98\x80@x>", 0, 1, "\xf0\x9f\x98\x80@x", 8 },
};

Test(smtp_parse, path_table)
{
    size_t i;

    for (i = 0; i < sizeof(path_cases) / sizeof(path_cases[0]); i++) {
        const struct path_case *c = &path_cases[i];
        char out[SMTP_ADDR_MAX];
        const char *reply = NULL;
        size_t end = 0;
        int rc = smtp_parse_path(c->in, strlen(c->in), c->allow_null,
            c->utf8, out, sizeof(out), &end, &reply);

        if (c->out == NULL) {
            cr_expect_eq(rc, -1, "path %s: should fail", c->in);
            cr_expect(reply != NULL && (strncmp(reply, "501 5.1.", 8) == 0 ||
                strncmp(reply, "553 5.6.7", 9) == 0),
                "path %s: reply %s", c->in, reply ? reply : "(null)");
            continue;
        }
        cr_expect_eq(rc, 0, "path %s: %s", c->in, reply ? reply : "");
        if (rc != 0)
            continue;
        cr_expect_str_eq(out, c->out, "path %s", c->in);
        cr_expect_eq(end, c->end, "path %s end %zu", c->in, end);
    }
}

Test(smtp_parse, path_reply_wording)
{
    char out[SMTP_ADDR_MAX];
    const char *reply;
    size_t end;

    cr_expect_eq(smtp_parse_path("<a@>", 4, 1, 0, out, sizeof(out), &end,
        &reply), -1);
    cr_expect_str_eq(reply, "501 5.1.7 Bad sender address syntax");
    cr_expect_eq(smtp_parse_path("<a@>", 4, 0, 0, out, sizeof(out), &end,
        &reply), -1);
    cr_expect_str_eq(reply, "501 5.1.3 Bad recipient address syntax");
    cr_expect_eq(smtp_parse_path("<\xc3\xa9@x>", 7, 0, 0, out, sizeof(out),
        &end, &reply), -1);
    cr_expect_str_eq(reply,
        "553 5.6.7 Non-ASCII recipient address requires SMTPUTF8");
    /* the output buffer size is honoured */
    cr_expect_eq(smtp_parse_path("<abc@def>", 9, 0, 0, out, 7, &end,
        &reply), -1);
    cr_expect_str_eq(reply,
        "501 5.1.3 Bad recipient address syntax: address too long");
    cr_expect_eq(smtp_parse_path("<abc@def>", 9, 0, 0, out, 8, &end,
        &reply), 0);
    cr_expect_str_eq(out, "abc@def");
}

static void
make_path(char *buf, size_t local, size_t labels, size_t lablen)
{
    size_t i, j;
    char *p = buf;

    *p++ = '<';
    for (i = 0; i < local; i++)
        *p++ = 'l';
    *p++ = '@';
    for (i = 0; i < labels; i++) {
        if (i > 0)
            *p++ = '.';
        for (j = 0; j < lablen; j++)
            *p++ = 'd';
    }
    *p++ = '>';
    *p = '\0';
}

Test(smtp_parse, path_length_limits)
{
    char in[1200], out[SMTP_ADDR_MAX];
    const char *reply = NULL;
    size_t end;

    /* local part: 64 ok, 65 too long */
    make_path(in, 64, 1, 5);
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), 0);
    make_path(in, 65, 1, 5);
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), -1);
    cr_expect_str_eq(reply,
        "501 5.1.3 Bad recipient address syntax: local part too long");
    /* label: 63 ok, 64 bad */
    make_path(in, 1, 2, 63);
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), 0);
    make_path(in, 1, 2, 64);
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), -1);
    /* domain: 4 * 63 + 3 = 255 ok; 256 too long */
    make_path(in, 64, 4, 63);
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), 0, "%s", reply);
    cr_expect_eq(strlen(out), SMTP_ADDR_MAX - 1);
    make_path(in, 1, 64, 3);            /* 64 * 4 - 1 = 255 */
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), 0);
    make_path(in, 1, 128, 1);           /* 128 * 2 - 1 = 255 */
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), 0);
    make_path(in, 1, 65, 3);            /* 259 */
    cr_expect_eq(smtp_parse_path(in, strlen(in), 0, 0, out, sizeof(out),
        &end, &reply), -1);
    cr_expect_str_eq(reply,
        "501 5.1.3 Bad recipient address syntax: domain too long");
    make_path(in, 1, 500, 1);
    cr_expect_eq(smtp_parse_path(in, strlen(in), 1, 0, out, sizeof(out),
        &end, &reply), -1);
    cr_expect_str_eq(reply,
        "501 5.1.7 Bad sender address syntax: domain too long");
}

Test(smtp_parse, path_no_overread)
{
    /* n shorter than the string: the '>' beyond n must not be seen. */
    char out[SMTP_ADDR_MAX];
    const char *reply;
    size_t end;

    cr_expect_eq(smtp_parse_path("<a@b>", 4, 0, 0, out, sizeof(out), &end,
        &reply), -1);
    cr_expect_eq(smtp_parse_path("<\"a\">@b>", 3, 0, 0, out, sizeof(out),
        &end, &reply), -1);
    cr_expect_eq(smtp_parse_path("<a@[1.2.3.4]>", 12, 0, 0, out, sizeof(out),
        &end, &reply), -1);
}

/* --- xtext ------------------------------------------------------------ */

Test(smtp_parse, xtext)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        { "abc", "abc" }, { "", "" }, { "+2B", "+" }, { "+3D", "=" },
        { "a+20b", "a b" }, { "+7E+21", "~!" }, { "+C3+A9", "\xc3\xa9" },
        { "+2b", NULL }, { "+2", NULL }, { "+", NULL }, { "+G0", NULL },
        { "a=b", NULL }, { "a b", NULL }, { "+00", NULL }, { "+0A", NULL },
        { "+7F", NULL }, { "\x7f", NULL }, { "\xc3\xa9", NULL },
    };
    char out[16];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = smtp_xtext_decode(cases[i].in, strlen(cases[i].in), out,
            sizeof(out));
        if (cases[i].out == NULL) {
            cr_expect_eq(rc, -1, "xtext %s should fail", cases[i].in);
        } else {
            cr_expect_eq(rc, 0, "xtext %s", cases[i].in);
            if (rc == 0)
                cr_expect_str_eq(out, cases[i].out);
        }
    }
    /* output size: 3 bytes + NUL needs 4 */
    cr_expect_eq(smtp_xtext_decode("abc", 3, out, 4), 0);
    cr_expect_eq(smtp_xtext_decode("abcd", 4, out, 4), -1);
    cr_expect_eq(smtp_xtext_decode("", 0, out, 0), -1);
}

/* --- BDAT ------------------------------------------------------------- */

Test(smtp_parse, bdat)
{
    static const struct {
        const char *in;
        int         ok;
        uint64_t    size;
        int         last;
    } cases[] = {
        { "0", 1, 0, 0 }, { "1234", 1, 1234, 0 }, { "1234 LAST", 1, 1234, 1 },
        { "5 last", 1, 5, 1 }, { "5 LaSt", 1, 5, 1 }, { "5  LAST ", 1, 5, 1 },
        { "5 ", 1, 5, 0 }, { "0 LAST", 1, 0, 1 },
        { "18446744073709551615", 1, UINT64_MAX, 0 },
        { "", 0, 0, 0 }, { "LAST", 0, 0, 0 }, { " 5", 0, 0, 0 },
        { "-5", 0, 0, 0 }, { "+5", 0, 0, 0 }, { "5x", 0, 0, 0 },
        { "5 LASTX", 0, 0, 0 }, { "5 LAST x", 0, 0, 0 }, { "5 FIRST", 0, 0, 0 },
        { "0x10", 0, 0, 0 }, { "18446744073709551616", 0, 0, 0 },
        { "5\tLAST", 0, 0, 0 },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t size = 77;
        int last = 77, rc;
        const char *reply = NULL;

        rc = smtp_parse_bdat(S(cases[i].in), &size, &last, &reply);
        if (!cases[i].ok) {
            cr_expect_eq(rc, -1, "BDAT %s should fail", cases[i].in);
            cr_expect(reply != NULL && strncmp(reply, "501 5.5.4 ", 10) == 0,
                "BDAT %s: %s", cases[i].in, reply ? reply : "(null)");
            continue;
        }
        cr_expect_eq(rc, 0, "BDAT %s: %s", cases[i].in, reply ? reply : "");
        cr_expect_eq(size, cases[i].size, "BDAT %s", cases[i].in);
        cr_expect_eq(last, cases[i].last, "BDAT %s", cases[i].in);
    }
}

Test(smtp_parse, bdat_replies)
{
    uint64_t size;
    int last;
    const char *reply;

    cr_expect_eq(smtp_parse_bdat(S("x"), &size, &last, &reply), -1);
    cr_expect_str_eq(reply, "501 5.5.4 Syntax: BDAT count [LAST]");
    cr_expect_eq(smtp_parse_bdat(S("99999999999999999999"), &size, &last,
        &reply), -1);
    cr_expect_str_eq(reply, "501 5.5.4 Bad BDAT chunk size");
}

/* --- EHLO/HELO -------------------------------------------------------- */

Test(smtp_parse, helo)
{
    static const struct {
        const char *in;
        const char *reply;       /* NULL: accepted */
    } cases[] = {
        { "example.com", NULL }, { "localhost", NULL }, { "EXAMPLE.COM", NULL },
        { "mail-1.example.com", NULL }, { "example.com.", NULL },
        { "win_pc", NULL }, { "[127.0.0.1]", NULL }, { "[IPv6:::1]", NULL },
        { "example.com ", NULL }, { "b\xc3\xbc.de", NULL },
        { "", "501 5.5.4 Syntax: EHLO hostname" },
        { "   ", "501 5.5.4 Syntax: EHLO hostname" },
        { "a b", "501 5.5.2 Invalid EHLO hostname" },
        { "[1.2.3]", "501 5.5.2 Invalid EHLO hostname" },
        { "[127.0.0.1", "501 5.5.2 Invalid EHLO hostname" },
        { "[127.0.0.1]x", "501 5.5.2 Invalid EHLO hostname" },
        { "-x.com", "501 5.5.2 Invalid EHLO hostname" },
        { "x..com", "501 5.5.2 Invalid EHLO hostname" },
        { ".", "501 5.5.2 Invalid EHLO hostname" },
        { "a@b", "501 5.5.2 Invalid EHLO hostname" },
        { "<x>", "501 5.5.2 Invalid EHLO hostname" },
        { "b\xc3.de", "501 5.5.2 Invalid EHLO hostname" },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *reply = NULL;
        int rc = smtp_parse_helo(S(cases[i].in), &reply);

        if (cases[i].reply == NULL) {
            cr_expect_eq(rc, 0, "EHLO %s: %s", cases[i].in,
                reply ? reply : "");
        } else {
            cr_expect_eq(rc, -1, "EHLO %s should fail", cases[i].in);
            cr_expect(reply != NULL && strcmp(reply, cases[i].reply) == 0,
                "EHLO %s: %s", cases[i].in, reply ? reply : "(null)");
        }
    }
}

/* --- end to end: verb then arguments ---------------------------------- */

Test(smtp_parse, pipeline_lines)
{
    struct str arg;
    struct smtp_mail m;
    struct smtp_rcpt r;
    const char *reply;

    cr_assert_eq(smtp_parse_verb(S("mail FROM:<> BODY=8BITMIME"), &arg),
        SMTP_MAIL);
    cr_assert_eq(smtp_parse_mail(arg, &m, &reply), 0);
    cr_expect_str_eq(m.addr, "");
    cr_expect_eq(m.body, SMTP_BODY_8BITMIME);
    cr_assert_eq(smtp_parse_verb(S("RCPT TO:<x@y> NOTIFY=NEVER"), &arg),
        SMTP_RCPT);
    cr_assert_eq(smtp_parse_rcpt(arg, 0, &r, &reply), 0);
    cr_expect_eq(r.notify, SMTP_NOTIFY_NEVER);
}

/* C1 controls (U+0080..U+009F, "\xc2\x80".."\xc2\x9f";
 * U+009B is the 8-bit CSI of a terminal) are never part of a name, in
 * HELO or in an address, with or without SMTPUTF8. */
Test(smtp_parse, c1_controls_are_refused)
{
    const char *reply = NULL;
    struct smtp_mail m;
    struct smtp_rcpt r;

    cr_expect_eq(smtp_parse_helo(S("a\xc2\x9b" "1;31m.test"), &reply), -1);
    cr_expect_eq(smtp_parse_helo(S("\xc2\x80x.test"), &reply), -1);
    cr_expect_eq(smtp_parse_helo(S("x\xc2\x9f.test"), &reply), -1);
    cr_expect_eq(smtp_parse_helo(S("x\xc2\xa0.test"), &reply), 0);
    cr_expect_eq(smtp_parse_mail(S("FROM:<a\xc2\x9b@b.test> SMTPUTF8"), &m,
        &reply), -1);
    cr_expect_eq(smtp_parse_rcpt(S("TO:<a@b\xc2\x85.test>"), 1, &r, &reply),
        -1);
    cr_expect_eq(smtp_parse_rcpt(S("TO:<\"q\xc2\x9b\"@b.test>"), 1, &r,
        &reply), -1);
    cr_expect_eq(smtp_parse_rcpt(S("TO:<j\xc3\xb6rg@b.test>"), 1, &r, &reply),
        0);
}
