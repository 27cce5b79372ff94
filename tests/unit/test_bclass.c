/*
 * test_bclass.c - bclass/: real-world replies (Gmail, Outlook, Yahoo,
 * Postfix-style receivers) and mtad's own failure reasons -> their class
 * with the built-in rules; the rules file's errors with line:col; an
 * operator's rule before the built-in ones; the shipped file is the
 * built-in text.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "bclass/bclass.h"

static const struct {
    const char *reply, *want;
} cases[] = {
    /* Gmail */
    { "550-5.1.1 The email account that you tried to reach does not exist. "
      "Please try 550-5.1.1 double-checking the recipient's email address "
      "for typos or 550 5.1.1 unnecessary spaces. https://support.google."
      "com/mail/?p=NoSuchUser a1si", "invalid_recipient" },
    { "452-4.2.2 The recipient's inbox is out of storage space. Please "
      "direct the 452-4.2.2 recipient to 452 4.2.2 https://support.google."
      "com/mail/?p=OverQuotaTemp", "mailbox_full" },
    { "421-4.7.28 [192.0.2.1      15] Our system has detected an unusual "
      "rate of 421-4.7.28 unsolicited mail originating from your IP "
      "address. To protect our 421 4.7.28 users from spam, mail sent from "
      "your IP address has been temporarily rate limited.", "rate_limited" },
    { "550-5.7.1 [192.0.2.1] Our system has detected that this message is "
      "550-5.7.1 likely unsolicited mail. To reduce the amount of spam "
      "550 5.7.1 sent to Gmail, this message has been blocked.", "content" },
    { "550-5.7.1 [192.0.2.1] The IP you're using to send mail is not "
      "authorized 550-5.7.1 to send email directly to our servers. Please "
      "use the SMTP 550 5.7.1 relay at your service provider instead.",
      "policy" },
    { "550-5.7.26 This mail has been blocked because the sender is "
      "unauthenticated. 550 5.7.26 Gmail requires all senders to "
      "authenticate with either SPF or DKIM.", "policy" },
    { "450-4.2.1 The user you are trying to contact is receiving mail too "
      "quickly. 450 4.2.1 Please resend your message at a later time.",
      "rate_limited" },
    /* Gmail's 4.7.0 "try again later" is about the sender (PTR, auth) */
    { "421-4.7.0 [192.0.2.1] Try again later, closing connection. (EHLO)",
      "policy" },
    { "550-5.2.1 The email account that you tried to reach is disabled.",
      "invalid_recipient" },
    /* Outlook.com / Microsoft 365 */
    { "550 5.7.1 Unfortunately, messages from [192.0.2.1] weren't sent. "
      "Please contact your Internet service provider since part of their "
      "network is on our block list (S3150). You can also refer your "
      "provider to http://mail.live.com/mail/troubleshooting.aspx#errors.",
      "spam_block" },
    { "451 4.7.500 Server busy. Please try again later from [192.0.2.1]. "
      "(S77714) [DM6NAM12FT058.eop-nam12.prod.protection.outlook.com]",
      "rate_limited" },
    { "451 4.7.650 The mail server [192.0.2.1] has been temporarily rate "
      "limited due to IP reputation.", "rate_limited" },
    { "550 5.4.1 Recipient address rejected: Access denied. "
      "AS(201806281) [BN8NAM11FT066.eop-nam11.prod.protection.outlook.com]",
      "invalid_recipient" },
    { "550 5.5.0 Requested action not taken: mailbox unavailable",
      "invalid_recipient" },
    /* Yahoo / AOL */
    { "421 4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due "
      "to unexpected volume or user complaints - 4.16.55.1; see "
      "https://postmaster.yahooinc.com/error-codes", "rate_limited" },
    { "553 5.7.2 [TSS09] All messages from 192.0.2.1 will be permanently "
      "deferred; Retrying will NOT succeed. See https://postmaster."
      "yahooinc.com/error-codes", "spam_block" },
    { "554 5.7.9 Message not accepted for policy reasons.  See https://"
      "postmaster.yahooinc.com/error-codes", "policy" },
    { "552 1 Requested mail action aborted, mailbox not found",
      "invalid_recipient" },
    /* the rest of the world */
    { "554 5.7.1 Service unavailable; Client host [192.0.2.1] blocked using "
      "zen.spamhaus.org; https://www.spamhaus.org/query/ip/192.0.2.1",
      "spam_block" },
    { "554 5.7.1 <a@example.org>: Relay access denied", "policy" },
    { "552 5.3.4 Message size exceeds fixed limit", "content" },
    { "554 5.3.4 Message too big for system", "content" },
    { "554 5.7.1 Message rejected: virus found (Eicar-Test-Signature)",
      "content" },
    { "501 5.5.4 Invalid arguments", "protocol" },
    { "500 5.5.1 Command unrecognized", "protocol" },
    { "503 5.5.1 Error: need MAIL command", "protocol" },
    { "550 5.1.1 <nobody@example.org>: Recipient address rejected: User "
      "unknown in virtual mailbox table", "invalid_recipient" },
    { "550 No such user here", "invalid_recipient" },
    { "452 4.5.3 Too many recipients", "rate_limited" },
    { "421 4.7.0 Too many concurrent SMTP connections from this IP",
      "rate_limited" },
    { "451 4.7.1 Greylisting in action, please come back later",
      "policy" },
    { "421 mx.example.org Service not available, closing transmission "
      "channel", "rate_limited" },
    { "451 4.3.0 Temporary server error", "other" },
    /* tests/integration/shapesim.py's scripted replies (modelled on the
     * providers') */
    { "550 5.7.1 [127.0.0.2] Our system has detected that this message is "
      "likely unsolicited mail; the IP you are using has a poor "
      "reputation.", "spam_block" },
    { "554 5.7.1 Message rejected due to local policy.", "policy" },
    { "550 5.1.2 The recipient's domain does not accept mail here.",
      "bad_domain" },
    { "554 5.6.0 Message content rejected.", "content" },
    { "451 4.3.0 Temporary local problem, try again later.", "other" },
    { "421 4.3.2 The maximum number of concurrent server connections has "
      "exceeded a limit, closing transmission channel", "rate_limited" },
    { "421 4.7.0 too many messages in this connection", "rate_limited" },
    { "421 4.7.0 too many new connections from your IP, slow down",
      "rate_limited" },
    /* mtad's own reasons (delivery/, tlspol/) */
    { "connect to mx.example.org[192.0.2.1]:25: Connection refused",
      "no_answer" },
    { "connect to mx.example.org[192.0.2.1]:25: Connection timed out",
      "no_answer" },
    { "conversation with mx.example.org[192.0.2.1]:25 timed out while "
      "receiving the initial server greeting", "no_answer" },
    { "conversation with mx.example.org[192.0.2.1]:25 timed out while in "
      "the TLS handshake", "tls_failure" },
    { "lost connection with mx.example.org[192.0.2.1]:25 while sending "
      "MAIL/RCPT/DATA", "no_answer" },
    { "451 4.4.3 Host or domain name lookup failed: example.org: timeout",
      "dns_failure" },
    { "451 4.4.3 no address for mx.example.org", "dns_failure" },
    { "451 4.4.3 no MX host of example.org preferred over this server has "
      "an address", "dns_failure" },
    { "no address for the route", "dns_failure" },
    { "550 5.1.10 Domain example.org does not accept mail (null MX)",
      "bad_domain" },
    { "550 5.1.2 Host or domain name not found: example.invalid: NXDOMAIN",
      "bad_domain" },
    { "550 5.4.4 Host or domain name not found: relay.invalid: NXDOMAIN",
      "bad_domain" },
    { "451 4.7.5 TLS is required, but STARTTLS was refused (454 4.7.0 TLS "
      "not available)", "tls_failure" },
    { "TLS handshake with mx.example.org[192.0.2.1]:25 failed: "
      "error:0A000086:SSL routines::certificate verify failed",
      "tls_failure" },
    { "451 4.7.4 TLS is required (tls encrypt) for host mx.example.org"
      "[192.0.2.1]:25, but STARTTLS was not offered", "tls_failure" },
    { "451 4.7.5 TLS policy dane-only: no usable TLSA records",
      "tls_failure" },
    { "550 5.7.10 REQUIRETLS: no authenticated TLS to mx.example.org",
      "tls_failure" },
    { "host mx.example.org[192.0.2.1]:25 said: 421 4.7.0 Too many "
      "connections, slow down (in reply to MAIL FROM command)",
      "rate_limited" },
    { "host spam-filter.example.org[192.0.2.1]:25 said: 550 5.1.1 no "
      "mailbox here (in reply to RCPT TO command)", "invalid_recipient" },
    { "host mx.example.org[192.0.2.1]:25 refused to talk to me: 554 5.7.1 "
      "Your IP is listed at bl.example", "spam_block" },
    { "protocol error: host mx.example.org[192.0.2.1]:25 sent a reply to "
      "no command", "protocol" },
    { "malformed reply from mx.example.org[192.0.2.1]:25 while sending "
      "EHLO", "protocol" },
    { "550 5.4.6 mail for example.org loops back to myself", "other" },
    { "4.4.7 message expired after 432000 seconds in the queue; last "
      "error: 452 4.2.2 over quota", "other" },
    { "553 5.6.7 SMTPUTF8 is required, but was not offered by host x",
      "content" },
    { "", "other" },
    { "hello", "other" },
};

Test(bclass, real_world_replies)
{
    char                 err[256];
    struct bclass_rules *r = bclass_load(NULL, err, sizeof(err));
    size_t               i;

    cr_assert_not_null(r, "built-in rules: %s", err);
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *got = bclass_name(bclass_of(r, cases[i].reply));

        cr_expect_str_eq(got, cases[i].want, "%s\n  -> %s, want %s",
            cases[i].reply, got, cases[i].want);
    }
    cr_expect_eq(bclass_of(r, NULL), BCLASS_OTHER);
    /* NULL rules: the process-wide built-in copy, the same answers */
    cr_expect_eq(bclass_of(NULL, cases[0].reply), bclass_of(r,
        cases[0].reply));
    bclass_free(r);
}

Test(bclass, names_round_trip)
{
    int i;

    for (i = 0; i < BCLASS_MAX; i++)
        cr_expect_eq(bclass_lookup(bclass_name(i), strlen(bclass_name(i))),
            i);
    cr_expect_str_eq(bclass_name(-1), "other");
    cr_expect_str_eq(bclass_name(BCLASS_MAX), "other");
    cr_expect_eq(bclass_lookup("rate", 4), -1);
}

static const struct {
    const char *text, *want;
} bad[] = {
    { "bogus code=5xx\n", "f:1:1: unknown class bogus" },
    { "# c\n\npolicy\n", "f:3:1: a rule needs at least one condition" },
    { "policy code=5x\n", "f:1:8: code=: expected" },
    { "policy code=621\n", "f:1:8: code=: expected" },
    { "policy  enh=5.1\n", "f:1:9: enh=: expected" },
    { "policy enh=3.1.1\n", "f:1:8: enh=: expected" },
    { "policy enh=5.1.1x\n", "f:1:8: enh=: expected" },
    { "policy code=5xx code=4xx\n", "f:1:17: code= given twice" },
    { "other code=5xx\npolicy text=\"a(\"\n",
      "f:2:8: text=: bad regular expression" },
    { "policy text=\"abc\n", "f:1:8: text=: no closing double quote" },
    { "policy text=abc\n", "f:1:8: text=: expected a regular expression" },
    { "policy text=\"\"\n", "f:1:8: text=: empty regular expression" },
    { "policy text=\"a\"code=5xx\n", "f:1:16: expected a space" },
    { "policy foo=1\n", "f:1:8: expected code=, enh= or text=" },
    { "policy text=\"a++++\"\n", "f:1:8: text=: not accepted: a quantifier" },
    { "policy text=\"*a\"\n", "f:1:8: text=: not accepted: a quantifier" },
    { "policy text=\"(a)\\1\"\n", "f:1:8: text=: not accepted: a back-ref" },
    { "policy text=\"a{101}\"\n", "f:1:8: text=: not accepted: a repeat" },
    { "policy text=\"((a{20}){20}){20}\"\n",
      "f:1:8: text=: not accepted: repeats nested" },
    { "policy code=5xx\r\n  spam_block   sender=x\n",
      "f:2:16: expected code=, enh= or text=" },
};

Test(bclass, file_errors_name_line_and_column)
{
    char   err[256];
    size_t i;

    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct bclass_rules *r = bclass_parse("f", bad[i].text,
            strlen(bad[i].text), err, sizeof(err));

        cr_expect_null(r, "%s: accepted", bad[i].text);
        bclass_free(r);
        cr_expect(strncmp(err, bad[i].want, strlen(bad[i].want)) == 0,
            "%s: got \"%s\", want \"%s...\"", bad[i].text, err, bad[i].want);
    }
}

Test(bclass, good_file_syntax)
{
    static const char ok[] =
        "# comment\n"
        "   \n"
        "policy code=5xx enh=5.7.* text=\"a \\\"quoted\\\" word\"  # tail\n"
        "rate_limited\tenh=*.*.*\n"
        "content text=\"(ab){2,3}c{1,}|[]a[:digit:]]+x|^(a|b)*$\"\n"
        "spam_block text=\"[0-9]+\\.[0-9]+\"";   /* no final newline */
    char                 err[256];
    struct bclass_rules *r = bclass_parse("f", ok, strlen(ok), err,
        sizeof(err));

    cr_assert_not_null(r, "%s", err);
    cr_expect_eq(bclass_count(r), 4);
    cr_expect_eq(bclass_of(r, "ababc"), BCLASS_CONTENT);
    cr_expect_eq(bclass_of(r, "550 5.7.1 a \"quoted\" word"), BCLASS_POLICY);
    cr_expect_eq(bclass_of(r, "550 5.7.1 a quoted word"),
        BCLASS_RATE_LIMITED);       /* the next rule: any enhanced code */
    cr_expect_eq(bclass_of(r, "451 4.1.1 x"), BCLASS_RATE_LIMITED);
    cr_expect_eq(bclass_of(r, "version 1.2"), BCLASS_SPAM_BLOCK);
    /* enh= needs an enhanced code, code= a basic code */
    cr_expect_eq(bclass_of(r, "550 a \"quoted\" word"), BCLASS_OTHER);
    bclass_free(r);
}

/* write text to a temporary file; its path (static) */
static const char *
tmpfile_with(const char *text)
{
    static char path[64];
    FILE       *fp;
    int         fd;

    strcpy(path, "/tmp/test_bclass.XXXXXX");
    fd = mkstemp(path);
    cr_assert(fd >= 0);
    fp = fdopen(fd, "w");
    fputs(text, fp);
    fclose(fp);
    return path;
}

Test(bclass, operator_file_first_then_builtin)
{
    const char          *path = tmpfile_with(
        "# ours: a provider's 550 5.7.1 \"blocked\" means its own policy\n"
        "policy code=550 enh=5.7.1 text=\"blocked by example\"\n");
    char                 err[512];
    struct bclass_rules *r = bclass_load(path, err, sizeof(err));
    struct bclass_rules *b = bclass_load(NULL, err, sizeof(err));

    cr_assert_not_null(r, "%s", err);
    cr_assert_not_null(b);
    cr_expect_eq(bclass_count(r), bclass_count(b) + 1);
    cr_expect_eq(bclass_of(r, "550 5.7.1 blocked by example"),
        BCLASS_POLICY);
    cr_expect_eq(bclass_of(b, "550 5.7.1 blocked by example"),
        BCLASS_SPAM_BLOCK);
    cr_expect_eq(bclass_of(r, "550 5.1.1 no such user"),
        BCLASS_INVALID_RECIPIENT);
    bclass_free(r);
    bclass_free(b);
    unlink(path);

    path = tmpfile_with("policy code=550\nmailbox_full enh=4.2.\n");
    r = bclass_load(path, err, sizeof(err));
    cr_expect_null(r);
    cr_expect(strstr(err, ":2:14: enh=") != NULL, "%s", err);
    cr_expect(strncmp(err, path, strlen(path)) == 0, "%s", err);
    unlink(path);
    r = bclass_load("/nonexistent/bounce-classes.conf", err, sizeof(err));
    cr_expect_null(r);
    cr_expect(strstr(err, "/nonexistent/bounce-classes.conf: cannot read:")
        != NULL, "%s", err);
}

Test(bclass, shipped_file_is_the_builtin_text)
{
    FILE  *fp = fopen("packaging/bounce-classes.conf", "rb");
    char  *buf = malloc(1 << 20);
    size_t n;

    cr_assert_not_null(fp, "run from the top of the tree");
    n = fread(buf, 1, (1 << 20) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    cr_expect_str_eq(bclass_builtin_text(), buf, "packaging/bounce-classes."
        "conf changed: run sh mk/bclass_builtin.sh");
    free(buf);
}
