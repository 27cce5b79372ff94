/*
 * test_dsn.c - the DSN text (RFC 3464): structure, per-recipient fields,
 * NOTIFY selection, RET=FULL versus headers only.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "spool/spool.h"
#include "delivery/dsn.h"

static const char MSG[] = "Received: from x\r\nSubject: hello\r\n"
    "From: a@example.org\r\n\r\nbody line 1\r\nsecret body\r\n";

static struct spool_rcpt rcpts[3];
static struct spool_env  env;

static void
setup(void)
{
    memset(&env, 0, sizeof(env));
    memset(rcpts, 0, sizeof(rcpts));
    strcpy(env.id, "0123456789A01ABC");
    env.arrival_ms = 1796016000000ULL;     /* 2026-11-30 */
    env.sender = "a@example.org";
    env.rcpt = rcpts;
    env.nrcpt = 3;
    rcpts[0].addr = "bad@example.net";
    rcpts[0].status = SPOOL_RCPT_BOUNCED;
    rcpts[0].last_reply = "550 5.1.1 <bad@example.net>: no such user";
    rcpts[0].relay = "mx.example.net[127.0.0.1]:2525";
    rcpts[0].orcpt = "rfc822;Bad@Example.NET";
    rcpts[1].addr = "good@example.net";
    rcpts[1].status = SPOOL_RCPT_SENT;
    rcpts[1].last_reply = "250 2.0.0 Ok";
    rcpts[1].relay = "mx.example.net[127.0.0.1]:2525";
    rcpts[2].addr = "quiet@example.net";
    rcpts[2].status = SPOOL_RCPT_BOUNCED;
    rcpts[2].notify = SMTP_NOTIFY_NEVER;
    rcpts[2].last_reply = "550 5.7.1 denied";
}

static char *
build_kind(int full, enum dsn_kind kind, uint64_t until)
{
    struct dsn_info in;
    struct buf      out;
    char           *s;

    memset(&in, 0, sizeof(in));
    in.env = &env;
    in.hostname = "mx.test.example";
    in.now_ms = 1796016060000ULL;
    in.orig = MSG;
    in.orig_len = full ? strlen(MSG) : dsn_headers_len(MSG, strlen(MSG));
    in.full = full;
    in.kind = kind;
    in.retry_until_ms = until;
    buf_init(&out);
    dsn_build(&in, &out);
    s = strndup(buf_head(&out), buf_avail(&out));
    buf_free(&out);
    return s;
}

static char *
build(int full)
{
    return build_kind(full, DSN_FAILURE, 0);
}

TestSuite(dsn, .init = setup);

Test(dsn, wanted_follows_notify)
{
    struct spool_rcpt r;

    memset(&r, 0, sizeof(r));
    r.status = SPOOL_RCPT_BOUNCED;
    cr_assert(dsn_wanted(&r));
    r.notify = SMTP_NOTIFY_FAILURE | SMTP_NOTIFY_DELAY;
    cr_assert(dsn_wanted(&r));
    r.notify = SMTP_NOTIFY_SUCCESS;
    cr_assert_not(dsn_wanted(&r));
    r.notify = SMTP_NOTIFY_NEVER;
    cr_assert_not(dsn_wanted(&r));
    r.notify = 0;
    r.notified = 1;                     /* an earlier DSN reported it */
    cr_assert_not(dsn_wanted(&r));
    r.notified = 0;
    r.status = SPOOL_RCPT_SENT;
    cr_assert_not(dsn_wanted(&r));
    r.status = SPOOL_RCPT_PENDING;
    cr_assert_not(dsn_wanted(&r));
    cr_assert_eq(dsn_count(&env), 1);
}

Test(dsn, headers_len)
{
    cr_assert_eq(dsn_headers_len(MSG, strlen(MSG)),
        (size_t)(strstr(MSG, "\r\n\r\n") - MSG) + 2);
    cr_assert_eq(dsn_headers_len("A: b\nC: d\n\nbody", 16), 10);
    cr_assert_eq(dsn_headers_len("A: b\r\nno end", 13), 13);
    cr_assert_eq(dsn_headers_len("\r\nbody", 6), 0);
}

Test(dsn, structure_and_fields)
{
    char *s = build(0);
    char *boundary, *p, *q;
    char  b[200];

    cr_assert(strstr(s, "Content-Type: multipart/report; "
        "report-type=delivery-status;") != NULL, "%s", s);
    boundary = strstr(s, "boundary=\"");
    cr_assert_not_null(boundary);
    boundary += strlen("boundary=\"");
    q = strchr(boundary, '"');
    snprintf(b, sizeof(b), "--%.*s", (int)(q - boundary), boundary);
    /* three parts, then the closing delimiter */
    p = s;
    {
        int n = 0;

        while ((p = strstr(p, b)) != NULL) {
            n++;
            p += strlen(b);
        }
        cr_assert_eq(n, 4, "delimiters: %d", n);
    }
    strcat(b, "--\r\n");
    cr_assert(strstr(s, b) != NULL);
    cr_assert(strstr(s, "To: <a@example.org>\r\n") != NULL);
    cr_assert(strstr(s, "Auto-Submitted: auto-replied\r\n") != NULL);
    cr_assert(strstr(s, "Content-Type: message/delivery-status\r\n") != NULL);
    cr_assert(strstr(s, "Reporting-MTA: dns; mx.test.example\r\n") != NULL);
    cr_assert(strstr(s, "Arrival-Date: ") != NULL);
    cr_assert(strstr(s, "Final-Recipient: rfc822; bad@example.net\r\n"
        "Original-Recipient: rfc822;Bad@Example.NET\r\n"
        "Action: failed\r\nStatus: 5.1.1\r\n"
        "Remote-MTA: dns; mx.example.net\r\n"
        "Diagnostic-Code: smtp; 550 5.1.1 <bad@example.net>: no such user\r\n")
        != NULL, "%s", s);
    /* the sent one and the NOTIFY=NEVER one are not reported */
    cr_assert_null(strstr(s, "good@example.net"));
    cr_assert_null(strstr(s, "quiet@example.net"));
    /* every line ends in CRLF */
    for (p = s; (p = strchr(p, '\n')) != NULL; p++)
        cr_assert(p > s && p[-1] == '\r', "bare LF at %ld", (long)(p - s));
    free(s);
}

Test(dsn, headers_only_by_default)
{
    char *s = build(0);

    cr_assert(strstr(s, "Content-Type: text/rfc822-headers\r\n") != NULL);
    cr_assert(strstr(s, "Subject: hello\r\n") != NULL);
    cr_assert_null(strstr(s, "secret body"));
    cr_assert_null(strstr(s, "message/rfc822"));
    free(s);
}

Test(dsn, ret_full_has_the_whole_message)
{
    char *s = build(1);

    cr_assert(strstr(s, "Content-Type: message/rfc822\r\n") != NULL);
    cr_assert(strstr(s, MSG) != NULL);
    free(s);
}

Test(dsn, reason_of_ours_and_expiry)
{
    char *s;

    rcpts[0].last_reply = "4.4.7 message expired after 432000 seconds";
    rcpts[0].relay = "none";
    rcpts[0].orcpt = NULL;
    s = build(0);
    cr_assert(strstr(s, "Status: 4.4.7\r\n") != NULL, "%s", s);
    cr_assert(strstr(s, "Diagnostic-Code: X-mtad; 4.4.7 message expired")
        != NULL);
    cr_assert_null(strstr(s, "Remote-MTA"));
    cr_assert_null(strstr(s, "Original-Recipient"));
    free(s);
}

Test(dsn, basic_code_only_gives_class_status)
{
    char *s;

    rcpts[0].last_reply = "554 rejected";
    s = build(0);
    cr_assert(strstr(s, "Status: 5.0.0\r\n") != NULL);
    free(s);
}

/* fuzz_dsn found it: the spool keeps any byte of a value, so a damaged
 * or edited envelope could put CR LF in an address, ORCPT, ENVID or
 * relay; the DSN escapes them like the reply, never a header of its own. */
Test(dsn, values_from_the_spool_add_no_line)
{
    char  *s, *p;
    size_t lines = 0;

    env.sender = "a@example.org\r\nBcc: victim@example.org";
    env.envid = "id\r\nX-Injected: 1";
    rcpts[0].addr = "bad@example.net\r\n\r\n--boundary";
    rcpts[0].orcpt = "rfc822;x\r\nX-Injected: 2";
    rcpts[0].relay = "mx\r\nX-Injected: 3[127.0.0.1]:25";
    s = build(0);
    cr_assert_null(strstr(s, "\nBcc:"), "%s", s);
    cr_assert_null(strstr(s, "\nX-Injected"), "%s", s);
    cr_assert_null(strstr(s, "\n--boundary"), "%s", s);
    cr_assert(strstr(s, "To: <a@example.org\\x0d\\x0aBcc: "
        "victim@example.org>\r\n") != NULL, "%s", s);
    cr_assert(strstr(s, "Original-Envelope-Id: id\\x0d\\x0aX-Injected: 1"
        "\r\n") != NULL, "%s", s);
    cr_assert(strstr(s, "Remote-MTA: dns; mx\\x0d\\x0aX-Injected: 3\r\n")
        != NULL, "%s", s);
    for (p = s; *p != '\0'; p++)
        lines += *p == '\n';
    free(s);
    /* the same count as with the plain values of setup() */
    setup();
    env.envid = "id";
    s = build(0);
    for (p = s; *p != '\0'; p++)
        lines -= *p == '\n';
    cr_assert_eq(lines, 0);
    free(s);
}

Test(dsn, date_format)
{
    char d[48];

    cr_assert_str_eq(dsn_date(0, d, sizeof(d)),
        "Thu, 01 Jan 1970 00:00:00 +0000");
    cr_assert_str_eq(dsn_date(1796016061000ULL, d, sizeof(d)),
        "Mon, 30 Nov 2026 05:21:01 +0000");
}


/* Reply text from a state file written before replies
 * were escaped, or by hand, still leaves no control byte in the DSN. */
Test(dsn, reply_control_bytes_are_escaped)
{
    char  *s;
    size_t i;

    rcpts[0].last_reply = "550 5.1.1 \x1b[2Jgone\rX\xc2\x9b" "1m";
    s = build(0);
    for (i = 0; s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '\r' && s[i + 1] == '\n')
            continue;
        cr_assert(c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f),
            "byte %zu: %02x in:\n%s", i, c, s);
        cr_assert(!(c == 0xc2 && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f), "C1 at %zu", i);
    }
    cr_assert(strstr(s, "Diagnostic-Code: smtp; 550 5.1.1 \\x1b[2Jgone"
        "\\x0dX\\xc2\\x9b1m\r\n") != NULL, "%s", s);
    free(s);
}


Test(dsn, wanted_kinds_follow_notify)
{
    struct spool_rcpt r;

    memset(&r, 0, sizeof(r));
    r.status = SPOOL_RCPT_SENT;
    r.success = SPOOL_SUCCESS_DELIVERED;
    cr_assert_not(dsn_wanted_kind(&r, DSN_SUCCESS), "no NOTIFY: failure only");
    r.notify = SMTP_NOTIFY_SUCCESS;
    cr_assert(dsn_wanted_kind(&r, DSN_SUCCESS));
    cr_assert_not(dsn_wanted_kind(&r, DSN_FAILURE));
    r.success = SPOOL_SUCCESS_NONE;     /* passed on to the next hop */
    cr_assert_not(dsn_wanted_kind(&r, DSN_SUCCESS));

    memset(&r, 0, sizeof(r));
    r.status = SPOOL_RCPT_PENDING;
    r.delay_due = 1;
    cr_assert_not(dsn_wanted_kind(&r, DSN_DELAY), "no NOTIFY: failure only");
    r.notify = SMTP_NOTIFY_DELAY | SMTP_NOTIFY_FAILURE;
    cr_assert(dsn_wanted_kind(&r, DSN_DELAY));
    r.delay_warned = 1;
    cr_assert_not(dsn_wanted_kind(&r, DSN_DELAY), "never twice");
    r.delay_warned = 0;
    r.delay_due = 0;
    cr_assert_not(dsn_wanted_kind(&r, DSN_DELAY), "not yet due");
}


Test(dsn, success_delivered_and_relayed)
{
    char *s;

    rcpts[0].notify = 0;                /* the bounce is not in this one */
    rcpts[1].notify = SMTP_NOTIFY_SUCCESS | SMTP_NOTIFY_FAILURE;
    rcpts[1].success = SPOOL_SUCCESS_RELAYED;
    rcpts[1].last_reply = "250 2.0.0 Ok \x1b[31mqueued\r\nX-Evil: 1";
    rcpts[2].notify = SMTP_NOTIFY_SUCCESS;
    rcpts[2].status = SPOOL_RCPT_SENT;
    rcpts[2].success = SPOOL_SUCCESS_DELIVERED;
    rcpts[2].relay = "local";
    rcpts[2].last_reply = "delivered to maildir /var/mail/secret";
    s = build_kind(0, DSN_SUCCESS, 0);
    cr_assert(strstr(s, "Subject: Successful Mail Delivery Report\r\n"), "%s", s);
    cr_assert(strstr(s, "successfully delivered"), "%s", s);
    cr_assert_null(strstr(s, "bad@example.net"), "%s", s);
    cr_assert(strstr(s, "Final-Recipient: rfc822; good@example.net\r\n"
        "Action: relayed\r\nStatus: 2.0.0\r\n"
        "Remote-MTA: dns; mx.example.net\r\n"
        "Diagnostic-Code: smtp; 250 2.0.0 Ok \\x1b[31mqueued\\x0d\\x0a"
        "X-Evil: 1\r\n"), "%s", s);
    cr_assert_null(strstr(s, "\r\nX-Evil"), "%s", s);
    cr_assert(strstr(s, "<good@example.net>: relayed to host "
        "mx.example.net[127.0.0.1]:2525, which does not send"), "%s", s);
    cr_assert(strstr(s, "Final-Recipient: rfc822; quiet@example.net\r\n"
        "Action: delivered\r\nStatus: 2.0.0\r\n\r\n"), "%s", s);
    cr_assert(strstr(s, "<quiet@example.net>: delivered to the mailbox"),
        "%s", s);
    cr_assert_null(strstr(s, "/var/mail/secret"), "no local path: %s", s);
    cr_assert(strstr(s, "Content-Description: Delivered Message Headers"),
        "%s", s);
    free(s);
}


Test(dsn, delay_warning)
{
    char *s;

    rcpts[0].notify = SMTP_NOTIFY_DELAY;
    rcpts[0].status = SPOOL_RCPT_PENDING;
    rcpts[0].delay_due = 1;
    rcpts[0].last_reply = "451 4.3.0 try later";
    rcpts[1].notify = SMTP_NOTIFY_DELAY;
    rcpts[1].status = SPOOL_RCPT_PENDING;
    rcpts[1].delay_due = 1;
    rcpts[1].last_reply = "connect to mx.example.net: Connection refused";
    s = build_kind(0, DSN_DELAY, 1796448000000ULL);
    cr_assert(strstr(s, "Subject: Delayed Mail (still being retried)\r\n"),
        "%s", s);
    cr_assert(strstr(s, "This is a warning only"), "%s", s);
    cr_assert(strstr(s, "Action: delayed\r\nStatus: 4.3.0\r\n"), "%s", s);
    /* no enhanced code: the class's default, never a 5 */
    cr_assert(strstr(s, "Final-Recipient: rfc822; good@example.net\r\n"
        "Action: delayed\r\nStatus: 4.0.0\r\n"), "%s", s);
    cr_assert(strstr(s, "Will-Retry-Until: Sat, 05 Dec 2026 05:20:00 +0000"
        "\r\n"), "%s", s);
    cr_assert(strstr(s, "until\r\nSat, 05 Dec 2026"), "%s", s);
    cr_assert_null(strstr(s, "quiet@"), "%s", s);
    free(s);
}
