/*
 * test_logfmt.c - common/logfmt.c and log.format: json in common/log.c:
 * JSON string escaping (quotes, control bytes, UTF-8 kept, bytes that are
 * not UTF-8 as \u00XX), the record layout, cutting a long record while it
 * stays one valid line, logfmt_dsn, and log_event() in both formats (one
 * datagram per record; text records unchanged by the fields).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "common/log.h"
#include "common/logfmt.h"

static const struct {
    const char *name, *in, *want;
} esc_cases[] = {
    { "plain", "hello", "hello" },
    { "quote and backslash", "a\"b\\c", "a\\\"b\\\\c" },
    { "newline, cr, tab", "a\nb\rc\td", "a\\nb\\rc\\td" },
    { "control bytes", "\x01\x1f\x7f", "\\u0001\\u001f\\u007f" },
    { "utf-8 kept", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\xa7",
      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\xa7" },
    { "lone high bytes", "\xff\xfe", "\\u00ff\\u00fe" },
    { "cut sequence", "a\xc3", "a\\u00c3" },
    { "overlong", "\xc0\xaf", "\\u00c0\\u00af" },
    { "surrogate", "\xed\xa0\x80", "\\u00ed\\u00a0\\u0080" },
    { "beyond U+10FFFF", "\xf4\x90\x80\x80", "\\u00f4\\u0090\\u0080\\u0080" },
    { "C1 controls", "a\xc2\x9b" "31m\xc2\x80\xc2\x9f\xc2\xa0",
      "a\\u009b31m\\u0080\\u009f\xc2\xa0" },
};

Test(logfmt, json_str_escapes_table)
{
    char out[256];

    for (size_t i = 0; i < sizeof(esc_cases) / sizeof(esc_cases[0]); i++) {
        logfmt_json_str(out, sizeof(out), esc_cases[i].in,
            strlen(esc_cases[i].in));
        cr_expect_str_eq(out, esc_cases[i].want, "%s: got %s, want %s",
            esc_cases[i].name, out, esc_cases[i].want);
    }
}

Test(logfmt, json_str_never_cuts_an_escape)
{
    char out[8];
    size_t n = logfmt_json_str(out, sizeof(out), "ab\x01", 3);

    /* "ab" fits, "\u0001" (6 bytes) does not: stop before it */
    cr_assert_eq(n, 2);
    cr_assert_str_eq(out, "ab");
}

Test(logfmt, record_layout_and_field_order)
{
    char rec[1024];
    size_t n;

    n = logfmt_json(rec, sizeof(rec), "2026-12-01T10:00:00.000Z", LOGL_INFO,
        "worker 1", "42", "delivery", LOG_KVS(LKV_S("queue_id", "ABC"),
        LKV_S("to", "a@b"), LKV_S("absent", NULL), LKV_I("size", 12),
        LKV_D("delay", 0.25)), "text \"x\"", 8);
    cr_assert_str_eq(rec, "{\"ts\":\"2026-12-01T10:00:00.000Z\",\"level\":"
        "\"info\",\"proc\":\"worker 1\",\"pid\":42,\"event\":\"delivery\","
        "\"queue_id\":\"ABC\",\"to\":\"a@b\",\"size\":12,\"delay\":0.250,"
        "\"msg\":\"text \\\"x\\\"\"}\n");
    cr_assert_eq(n, strlen(rec));
}

Test(logfmt, long_record_is_cut_in_msg_and_stays_one_line)
{
    char rec[300], msg[2000], field[3000];
    size_t n;

    memset(msg, '"', sizeof(msg));           /* every byte escapes to 2 */
    memset(field, 'f', sizeof(field) - 1);
    field[sizeof(field) - 1] = '\0';
    n = logfmt_json(rec, sizeof(rec), "T", LOGL_ERR, "master", "1", "log",
        LOG_KVS(LKV_S("reply", field)), msg, sizeof(msg));
    cr_assert(n < sizeof(rec));
    cr_assert_eq(rec[n - 1], '\n');
    cr_assert_eq(rec[n - 2], '}');
    cr_assert_eq(strchr(rec, '\n'), rec + n - 1);
}

Test(logfmt, one_field_is_capped_so_msg_still_fits)
{
    static char rec[16384], field[5000];
    const char *msg;

    memset(field, 'f', sizeof(field) - 1);
    logfmt_json(rec, sizeof(rec), "T", LOGL_INFO, "w", "1", "e",
        LOG_KVS(LKV_S("reply", field), LKV_S("to", "x@y")), "the end", 7);
    cr_assert_not_null(strstr(rec, "\"to\":\"x@y\""));
    msg = strstr(rec, "\"msg\":\"the end\"}\n");
    cr_assert_not_null(msg);
}

static const struct {
    const char *in, *want;
} dsn_cases[] = {
    { "250 2.0.0 Ok: queued", "2.0.0" },
    { "451 4.3.0 try later", "4.3.0" },
    { "550-5.1.1 no such user", "5.1.1" },
    { "5.7.1 relay denied", "5.7.1" },
    { "550 no enhanced code", "" },
    { "connect to x: Connection refused", "" },
    { "250 2.0.00000 too long", "" },
    { "", "" },
};

Test(logfmt, dsn_from_replies_table)
{
    char out[16];

    for (size_t i = 0; i < sizeof(dsn_cases) / sizeof(dsn_cases[0]); i++)
        cr_expect_str_eq(logfmt_dsn(dsn_cases[i].in, out, sizeof(out)),
            dsn_cases[i].want, "got '%s' for '%s', want '%s'", out,
            dsn_cases[i].in, dsn_cases[i].want);
    cr_assert_str_eq(logfmt_dsn(NULL, out, sizeof(out)), "");
}

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
    log_set_format(LOG_FORMAT_TEXT);
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

Test(logfmt, json_records_one_datagram_each, .init = setup,
    .fini = teardown)
{
    char buf[8192];

    log_set_format(LOG_FORMAT_JSON);
    log_event(LOGL_INFO, "received", LOG_KVS(LKV_S("queue_id", "Q1")),
        "Q1: from=<%s>", "a@b");
    log_warn("plain %d", 7);
    log_event(LOGL_DEBUG, "hidden", NULL, 0, "not at info");
    cr_assert_gt(next_record(buf, sizeof(buf)), 0);
    cr_assert(strstr(buf, ",\"level\":\"info\",\"proc\":\"worker 3\",\"pid\":")
        != NULL, "%s", buf);
    cr_assert(strstr(buf, "\"event\":\"received\",\"queue_id\":\"Q1\","
        "\"msg\":\"Q1: from=<a@b>\"}\n") != NULL, "%s", buf);
    cr_assert_gt(next_record(buf, sizeof(buf)), 0);
    cr_assert(strstr(buf, "\"level\":\"warn\"") != NULL, "%s", buf);
    cr_assert(strstr(buf, "\"event\":\"log\",\"msg\":\"plain 7\"}\n") != NULL,
        "%s", buf);
    cr_assert_lt(next_record(buf, sizeof(buf)), 0, "debug was sent: %s", buf);
}

Test(logfmt, text_records_ignore_the_fields, .init = setup,
    .fini = teardown)
{
    char a[4096], b[4096];

    log_event(LOGL_INFO, "received", LOG_KVS(LKV_S("queue_id", "Q1")),
        "Q1: from=<%s>", "a@b");
    log_info("Q1: from=<%s>", "a@b");
    cr_assert_gt(next_record(a, sizeof(a)), 0);
    cr_assert_gt(next_record(b, sizeof(b)), 0);
    /* same text after the timestamp (24 bytes) */
    cr_assert_str_eq(a + 24, b + 24);
    cr_assert(strstr(a, " mtad[") && strstr(a, "]: worker 3: Q1: from=<a@b>\n"),
        "%s", a);
}

/* quotes_balanced - every string opened is closed (escapes skipped). */
static int
quotes_balanced(const char *p)
{
    int in = 0;

    for (; *p != '\0'; p++) {
        if (in && *p == '\\' && p[1] != '\0')
            p++;
        else if (*p == '"')
            in = !in;
    }
    return !in;
}

Test(logfmt, many_long_fields_leave_out_what_does_not_fit)
{
    char rec[LOG_RECORD_MAX], f[3000];
    size_t n;

    memset(f, '\x01', sizeof(f) - 1);       /* escapes to 6 bytes each */
    f[sizeof(f) - 1] = '\0';
    n = logfmt_json(rec, sizeof(rec), "T", LOGL_INFO, "w", "1", "e",
        LOG_KVS(LKV_S("a", f), LKV_S("b", f), LKV_S("c", f), LKV_S("d", f),
        LKV_S("e", f), LKV_S("f", f), LKV_S("g", f), LKV_S("h", f),
        LKV_I("last", 7)), f, strlen(f));
    cr_assert(n < sizeof(rec));
    cr_assert_eq(strchr(rec, '\n'), rec + n - 1);
    cr_assert_eq(rec[n - 2], '}');
    cr_assert(quotes_balanced(rec), "%s", rec);
    cr_assert_not_null(strstr(rec, ",\"msg\":\""));
    cr_assert_not_null(strstr(rec, "\"a\":\"\\u0001"));
}

Test(logfmt, numbers_without_printf)
{
    char rec[512];

    logfmt_json(rec, sizeof(rec), "T", LOGL_INFO, "w", "1", "e",
        LOG_KVS(LKV_I("a", 0), LKV_I("b", -42), LKV_I("c", 9007199254740993LL),
        LKV_D("d", 0.0), LKV_D("e", 12345.6789), LKV_D("f", -1.25),
        LKV_D("g", 0.0004)), "", 0);
    cr_assert(strstr(rec, "\"a\":0,\"b\":-42,\"c\":9007199254740993,"
        "\"d\":0.000,\"e\":12345.679,\"f\":-1.250,\"g\":0.000,") != NULL,
        "%s", rec);
}


/* What the log process writes from a sender that is not the master: a
 * record of a worker with the sender's own pid, in either format. */
static const struct {
    const char *name, *line;
    int         want;
} worker_line_cases[] = {
    { "text, own pid", "2026-01-01T00:00:00.000Z mtad[42]: worker 3: "
      "connect from [127.0.0.1]:1", 1 },
    { "text, another pid", "2026-01-01T00:00:00.000Z mtad[43]: worker 3: "
      "x", 0 },
    { "text, a pid that starts like it", "2026-01-01T00:00:00.000Z "
      "mtad[421]: worker 3: x", 0 },
    { "text, as the master", "2026-01-01T00:00:00.000Z mtad[42]: master: "
      "admin: uid=0 pid=1 via=mtactl: stop", 0 },
    { "text, as logd", "2026-01-01T00:00:00.000Z mtad[42]: logd: x", 0 },
    { "text, no time stamp", "mtad[42]: worker 3: x", 0 },
    { "text, a control byte", "2026-01-01T00:00:00.000Z mtad[42]: worker "
      "3: x\r2026-01-01T00:00:00.000Z mtad[1]: master: admin: y", 0 },
    { "text, worker without a number", "2026-01-01T00:00:00.000Z "
      "mtad[42]: worker x: y", 0 },
    { "json, own pid", "{\"ts\":\"2026-01-01T00:00:00.000Z\",\"level\":"
      "\"info\",\"proc\":\"worker 3\",\"pid\":42,\"event\":\"log\","
      "\"msg\":\"x\"}", 1 },
    { "json, a quoted key in a value", "{\"ts\":\"T\",\"level\":\"info\","
      "\"proc\":\"worker 3\",\"pid\":42,\"event\":\"log\",\"msg\":"
      "\"a \\\"proc\\\":\\\"master\\\"\"}", 1 },
    { "json, as the master", "{\"ts\":\"T\",\"level\":\"notice\",\"proc\":"
      "\"master\",\"pid\":42,\"event\":\"admin\",\"msg\":\"x\"}", 0 },
    { "json, another pid", "{\"ts\":\"T\",\"level\":\"info\",\"proc\":"
      "\"worker 3\",\"pid\":1,\"event\":\"log\",\"msg\":\"x\"}", 0 },
    { "json, a second proc key", "{\"ts\":\"T\",\"level\":\"info\",\"proc\":"
      "\"worker 3\",\"pid\":42,\"event\":\"admin\",\"proc\":\"master\"}", 0 },
    { "json, a second pid key", "{\"ts\":\"T\",\"level\":\"info\",\"proc\":"
      "\"worker 3\",\"pid\":42,\"event\":\"admin\",\"pid\":1}", 0 },
    { "json, a key spelled with an escape", "{\"ts\":\"T\",\"level\":"
      "\"info\",\"proc\":\"worker 3\",\"pid\":42,\"event\":\"admin\","
      "\"pro\\u0063\":\"master\",\"msg\":\"x\"}", 0 },
    { "json, an escaped key in the time stamp's place", "{\"ts\":\"T\","
      "\"pro\\u0063\":\"master\",\"level\":\"info\",\"proc\":"
      "\"worker 3\",\"pid\":42,\"event\":\"log\",\"msg\":\"x\"}", 0 },
    { "json, a second record after the first", "{\"ts\":\"T\",\"level\":"
      "\"info\",\"proc\":\"worker 3\",\"pid\":42,\"event\":\"log\"}"
      "{\"ts\":\"T\",\"level\":\"notice\",\"pro\\u0063\":\"master\"}",
      0 },
    { "json, an object as a value", "{\"ts\":\"T\",\"level\":\"info\","
      "\"proc\":\"worker 3\",\"pid\":42,\"event\":\"log\",\"x\":"
      "{\"proc\":\"master\"}}", 0 },
    { "json, a second event key", "{\"ts\":\"T\",\"level\":\"info\","
      "\"proc\":\"worker 3\",\"pid\":42,\"event\":\"log\",\"event\":"
      "\"admin\"}", 0 },
    { "json, fields and escapes", "{\"ts\":\"T\",\"level\":\"info\","
      "\"proc\":\"worker 3\",\"pid\":42,\"event\":\"log\",\"to\":"
      "\"a\\\"b\\u0001\",\"delay\":-1.250,\"msg\":\"x\"}", 1 },
    { "json, cut", "{\"ts\":\"T\",\"level\":\"info\",\"proc\":"
      "\"worker 3\",\"pid\":42,\"event\":\"log\",\"msg\":\"x", 0 },
    { "text, a C1 control (CSI)", "2026-01-01T00:00:00.000Z mtad[42]: "
      "worker 3: x\xc2\x9b" "2J", 0 },
    { "text, a byte that is not UTF-8", "2026-01-01T00:00:00.000Z mtad[42]: "
      "worker 3: x\x9b" "2J", 0 },
    { "text, UTF-8", "2026-01-01T00:00:00.000Z mtad[42]: worker 3: caf"
      "\xc3\xa9 \xc2\xa0", 1 },
    { "json, a C1 control", "{\"ts\":\"T\",\"level\":\"info\",\"proc\":"
      "\"worker 3\",\"pid\":42,\"event\":\"log\",\"msg\":\"\xc2\x9b\"}",
      0 },
    { "empty", "", 0 },
};

Test(logfmt, worker_line_is_a_record_of_that_worker_table)
{
    for (size_t i = 0; i < sizeof(worker_line_cases) /
        sizeof(worker_line_cases[0]); i++) {
        const char *l = worker_line_cases[i].line;

        cr_expect_eq(logfmt_worker_line(l, strlen(l), 42),
            worker_line_cases[i].want, "%s: got %d, want %d",
            worker_line_cases[i].name, !worker_line_cases[i].want,
            worker_line_cases[i].want);
    }
}

/* Whatever log.c makes for a worker passes, in both formats. */
Test(logfmt, records_log_c_makes_pass_as_the_workers)
{
    char rec[LOG_RECORD_MAX];
    size_t n;

    log_open("worker 7", -1, LOGL_INFO);
    for (int f = LOG_FORMAT_TEXT; f <= LOG_FORMAT_JSON; f++) {
        n = log_render(f, rec, LOGL_WARN, "delivery", LOG_KVS(LKV_S("to",
            "a\"proc\":\"master\"@b"), LKV_I("uid", 0)), "a \"quoted\" %s\n"
            "next line", "text\x01");
        cr_assert(n > 0 && rec[n - 1] == '\n');
        cr_expect(logfmt_worker_line(rec, n - 1, (long)getpid()), "%.*s",
            (int)n, rec);
        cr_expect(!logfmt_worker_line(rec, n - 1, (long)getpid() + 1));
    }
}
