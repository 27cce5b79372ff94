/*
 * test_smtp_hops.c - the mail-loop hop counter: Received: fields counted
 * only at line starts and only in the header section, case-insensitively,
 * the same count for every split of the content (two spans at each
 * position, and one byte at a time), the end of headers by CRLF or bare LF.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "smtp/smtp.h"

static unsigned
count_whole(const char *msg)
{
    struct smtp_hops h;

    smtp_hops_init(&h);
    smtp_hops_feed(&h, msg, strlen(msg));
    return h.hops;
}

/* The count for msg fed as two spans split at every position, and one
 * byte at a time; each must equal the whole-span count. */
static unsigned
count_split_all(const char *msg)
{
    size_t           n = strlen(msg), i;
    unsigned         want = count_whole(msg);
    struct smtp_hops h;

    for (i = 0; i <= n; i++) {
        smtp_hops_init(&h);
        smtp_hops_feed(&h, msg, i);
        smtp_hops_feed(&h, msg + i, n - i);
        cr_assert_eq(h.hops, want, "split at %zu: %u, whole: %u", i, h.hops,
            want);
    }
    smtp_hops_init(&h);
    for (i = 0; i < n; i++)
        smtp_hops_feed(&h, msg + i, 1);
    cr_assert_eq(h.hops, want, "byte at a time: %u, whole: %u", h.hops,
        want);
    return want;
}

Test(smtp_hops, counts_received_fields)
{
    const char *m =
        "Received: from a\r\n"
        "\tby b\r\n"
        "Subject: x\r\n"
        "Received: from c\r\n"
        "\r\n"
        "body\r\n";

    cr_assert_eq(count_split_all(m), 2);
}

Test(smtp_hops, name_is_case_insensitive)
{
    cr_assert_eq(count_split_all("RECEIVED: a\r\nreceived: b\r\n"
        "ReCeIvEd: c\r\n\r\n"), 3);
}

Test(smtp_hops, only_at_line_start)
{
    /* not a field name: inside a line, folded, or a longer name */
    cr_assert_eq(count_split_all("Subject: Received: x\r\n"
        " Received: folded\r\n"
        "X-Received: y\r\n"
        "Received-SPF: pass\r\n"
        "Received : spaced\r\n\r\n"), 0);
}

Test(smtp_hops, body_not_counted)
{
    struct smtp_hops h;
    const char      *m = "Received: a\r\n\r\nReceived: in body\r\n";

    cr_assert_eq(count_split_all(m), 1);
    smtp_hops_init(&h);
    cr_assert_eq(smtp_hops_done(&h), 0);
    smtp_hops_feed(&h, m, strlen(m));
    cr_assert_eq(smtp_hops_done(&h), 1);
    smtp_hops_feed(&h, "Received: more\r\n", 16);
    cr_assert_eq(h.hops, 1);
}

Test(smtp_hops, bare_lf_lines_and_end)
{
    cr_assert_eq(count_split_all("Received: a\nReceived: b\n\n"
        "Received: body\n"), 2);
}

Test(smtp_hops, lone_cr_does_not_end_headers)
{
    /* "\r" then not "\n" at a line start: still in the header section */
    cr_assert_eq(count_split_all("Received: a\r\n\rX\r\nReceived: b\r\n"
        "\r\nReceived: body\r\n"), 2);
}

Test(smtp_hops, empty_message_and_no_headers)
{
    cr_assert_eq(count_split_all(""), 0);
    cr_assert_eq(count_split_all("\r\nReceived: body\r\n"), 0);
}

Test(smtp_hops, many_hops)
{
    char   buf[60 * 32 + 8];
    size_t off = 0;
    int    i;

    for (i = 0; i < 60; i++)
        off += (size_t)snprintf(buf + off, sizeof(buf) - off,
            "Received: from hop%d\r\n", i);
    snprintf(buf + off, sizeof(buf) - off, "\r\n");
    cr_assert_eq(count_split_all(buf), 60);
}
