/*
 * test_log.c - common/log.c: the record format, one datagram per record,
 * level filtering, newlines flattened, long records truncated to one line,
 * drops counted (and mirrored) when the socket is full, log_parse_level.
 */
#include <regex.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "common/util.h"
#include "common/log.h"

static int sv[2];

static void
setup(void)
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
    log_open("worker 3", sv[0], LOGL_INFO);
}

static void
teardown(void)
{
    log_open("test", -1, LOGL_INFO);
    close(sv[0]);
    close(sv[1]);
}

static ssize_t
next_record(char *buf, size_t n)
{
    ssize_t r = recv(sv[1], buf, n - 1, MSG_DONTWAIT);

    if (r >= 0)
        buf[r] = '\0';
    return r;
}

TestSuite(log, .init = setup, .fini = teardown);

Test(log, record_format)
{
    char    rec[LOG_RECORD_MAX + 16], want[64];
    regex_t re;

    log_info("connect from %s", "[127.0.0.1]:41234");
    cr_assert_gt(next_record(rec, sizeof(rec)), 0);
    cr_assert_eq(regcomp(&re, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
        "[0-9]{2}\\.[0-9]{3}Z mtad\\[[0-9]+\\]: worker 3: connect from "
        "\\[127\\.0\\.0\\.1\\]:41234\n$", REG_EXTENDED), 0);
    cr_assert_eq(regexec(&re, rec, 0, NULL, 0), 0, "record: %s", rec);
    regfree(&re);
    snprintf(want, sizeof(want), "mtad[%d]: ", (int)getpid());
    cr_assert_not_null(strstr(rec, want));
    cr_assert_eq(next_record(rec, sizeof(rec)), -1, "one datagram only");
}

Test(log, levels_and_tags)
{
    char rec[LOG_RECORD_MAX + 16];

    log_debug("not formatted at info");
    cr_assert_eq(next_record(rec, sizeof(rec)), -1);
    log_err("disk %s", "full");
    cr_assert_gt(next_record(rec, sizeof(rec)), 0);
    cr_assert_not_null(strstr(rec, ": worker 3: error: disk full\n"));
    log_warn("slow");
    cr_assert_gt(next_record(rec, sizeof(rec)), 0);
    cr_assert_not_null(strstr(rec, ": worker 3: warning: slow\n"));
    log_set_ident("master");
    log_notice("ready");
    cr_assert_gt(next_record(rec, sizeof(rec)), 0);
    cr_assert_not_null(strstr(rec, ": master: ready\n"));
}

Test(log, one_line_per_record)
{
    char rec[LOG_RECORD_MAX + 16];
    char big[LOG_RECORD_MAX * 2];
    ssize_t n;

    /* line ends and every other control byte are escaped */
    log_info("a\nb\rc\x1b[2J\xc2\x9b" "1m \xc3\xa9");
    cr_assert_gt(next_record(rec, sizeof(rec)), 0);
    cr_assert_not_null(strstr(rec, ": a\\x0ab\\x0dc\\x1b[2J\\xc2\\x9b1m "
        "\xc3\xa9\n"), "%s", rec);
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    log_info("%s", big);
    n = next_record(rec, sizeof(rec));
    cr_assert_gt(n, LOG_RECORD_MAX - 64, "truncated, not dropped");
    cr_assert_leq(n, LOG_RECORD_MAX);
    cr_assert_eq(rec[n - 1], '\n');
    cr_assert_null(memchr(rec, '\n', (size_t)n - 1));
}

Test(log, full_socket_counts_drops)
{
    uint64_t mirror = 0, sent = 0;
    int      small = 4096;
    char     rec[LOG_RECORD_MAX + 16];
    ssize_t  got = 0;

    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    log_set_dropped_counter(&mirror);
    for (int i = 0; i < 2000; i++, sent++)
        log_info("record %d", i);
    cr_assert_gt(log_dropped(), 0, "a full socket must drop, not block");
    cr_assert_eq(mirror, log_dropped());
    while (next_record(rec, sizeof(rec)) > 0)
        got++;
    cr_assert_eq((uint64_t)got + log_dropped(), sent);
}

Test(log, parse_level)
{
    cr_assert_eq(log_parse_level("err"), LOGL_ERR);
    cr_assert_eq(log_parse_level("warning"), LOGL_WARN);
    cr_assert_eq(log_parse_level("notice"), LOGL_NOTICE);
    cr_assert_eq(log_parse_level("INFO"), LOGL_INFO);
    cr_assert_eq(log_parse_level("debug"), LOGL_DEBUG);
    cr_assert_eq(log_parse_level("verbose"), -1);
    cr_assert_eq(log_parse_level(NULL), -1);
}

/* count_lines - whole lines in s; -1 when s does not end a line. */
static int
count_lines(const char *s)
{
    int n = 0;

    for (; *s != '\0'; s++)
        if (*s == '\n')
            n++;
    return s[-1] == '\n' ? n : -1;
}

Test(log, batching_stages_until_flush_then_one_datagram_of_lines)
{
    char rec[LOG_PACK_MAX + 16];
    const char *a, *b, *c;

    log_set_batching(1);
    log_info("first %d", 1);
    log_info("second %d", 2);
    log_warn("third %d", 3);
    cr_assert_eq(next_record(rec, sizeof(rec)), -1, "nothing before flush");
    log_flush();
    cr_assert_gt(next_record(rec, sizeof(rec)), 0);
    cr_assert_eq(count_lines(rec), 3, "three whole lines in one datagram: %s",
        rec);
    a = strstr(rec, "first 1\n");
    b = strstr(rec, "second 2\n");
    c = strstr(rec, "warning: third 3\n");
    cr_assert(a != NULL && b != NULL && c != NULL && a < b && b < c,
        "in order: %s", rec);
    cr_assert_eq(next_record(rec, sizeof(rec)), -1, "one datagram");
    log_set_batching(0);
}

Test(log, batching_flushes_early_when_the_stage_is_full)
{
    char rec[LOG_PACK_MAX + 16];
    int  n, got = 0, datagrams = 0;

    log_set_batching(1);
    for (n = 0; n < 200; n++)
        log_info("record %d", n);
    while (next_record(rec, sizeof(rec)) > 0) {
        cr_assert_gt(count_lines(rec), 0, "whole lines: %s", rec);
        got += count_lines(rec);
        datagrams++;
    }
    cr_assert_geq(got, 64, "full stages were sent without a flush");
    cr_assert_lt(got, 200, "the last partial stage waits for the flush");
    log_flush();
    while (next_record(rec, sizeof(rec)) > 0) {
        got += count_lines(rec);
        datagrams++;
    }
    cr_assert_eq(got, 200);
    cr_assert_leq(datagrams, 4, "64 records a datagram: %d", datagrams);
    cr_assert_eq(log_dropped(), 0);
    log_set_batching(0);
}

Test(log, batching_never_passes_the_pack_size)
{
    char rec[LOG_PACK_MAX + 16], big[LOG_RECORD_MAX];
    int  n, got = 0;
    ssize_t r;

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    log_set_batching(1);
    for (n = 0; n < 20; n++)
        log_info("%d %s", n, big);  /* each record at LOG_RECORD_MAX */
    log_flush();
    while ((r = next_record(rec, sizeof(rec))) > 0) {
        cr_assert_leq((size_t)r, (size_t)LOG_PACK_MAX);
        got += count_lines(rec);
    }
    cr_assert_eq(got, 20);
    log_set_batching(0);
}
