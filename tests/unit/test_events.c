/*
 * test_events.c - the delivery events' records (events/events.c): every
 * field escaped so hostile text from the network never breaks a line,
 * replies split into code, enhanced code and text, next hops parsed,
 * correlation headers unfolded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "common/buf.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "events/events.h"
#include "events/events_int.h"

static struct events ev;

static const char *
fmt(const struct events_rec *r)
{
    static struct buf b;

    buf_free(&b);
    buf_init(&b);
    events_format(&ev, &b, r, 1796407200120ULL);
    buf_append(&b, "", 1);
    return b.data;
}


static void
setup(void)
{
    static char *hdrs[] = { "X-Msg-Ref", "X-Campaign" };

    memset(&ev, 0, sizeof(ev));
    ev.types = EVENTS_ALL_TYPES;
    util_strlcpy(ev.node, "mx.test", sizeof(ev.node));
    ev.headers = hdrs;
    ev.nheaders = 2;
}

TestSuite(events, .init = setup);


Test(events, one_line_with_every_string_escaped)
{
    struct events_rec r = { .type = EVENTS_BOUNCE, .queue_id = "Q1",
        .sender = "a\"b@x", .recipient = "c@y\r\n{\"type\":\"fake\"}",
        .reply = "550 5.1.1 no\x01such \"user\"\r\nX", .attempt = 2 };
    const char *s = fmt(&r);

    cr_assert_eq(strchr(s, '\n'), s + strlen(s) - 1, "%s", s);
    cr_assert(strstr(s, "\"sender\":\"a\\\"b@x\"") != NULL, "%s", s);
    cr_assert(strstr(s, "\"recipient\":\"c@y\\r\\n{\\\"type\\\":"
        "\\\"fake\\\"}\"") != NULL, "%s", s);
    cr_assert(strstr(s, "\"reply\":{\"code\":550,\"enhanced\":\"5.1.1\","
        "\"text\":\"no\\u0001such \\\"user\\\"\\r\\nX\"}") != NULL, "%s", s);
    cr_assert(strstr(s, "\"type\":\"bounce\"") != NULL);
    cr_assert(strstr(s, "\"time\":\"2026-12-04T18:00:00.120Z\","
        "\"unix_ms\":1796407200120") != NULL, "%s", s);
    cr_assert(strstr(s, "\"attempt\":2") != NULL);
}


Test(events, own_reasons_have_text_only)
{
    struct events_rec r = { .type = EVENTS_DEFERRAL, .queue_id = "Q",
        .reply = "connect to h[192.0.2.1]:25: Connection refused" };

    cr_assert(strstr(fmt(&r), "\"reply\":{\"text\":\"connect to "
        "h[192.0.2.1]:25: Connection refused\"}") != NULL, "%s", fmt(&r));
}


Test(events, next_hop_from_the_relay_string)
{
    struct events_rec r = { .type = EVENTS_DELIVERY, .queue_id = "Q",
        .relay = "mx1.example.com[2001:db8::1]:2525" };
    struct events_rec none = { .type = EVENTS_DELIVERY, .queue_id = "Q",
        .relay = "none" };

    cr_assert(strstr(fmt(&r), "\"next_hop\":{\"host\":\"mx1.example.com\","
        "\"address\":\"2001:db8::1\",\"port\":2525}") != NULL, "%s",
        fmt(&r));
    cr_assert_null(strstr(fmt(&none), "next_hop"));
}


Test(events, correlation_headers_unfolded_first_occurrence)
{
    static const char h[] = "Received: from x\r\n"
        "x-msg-ref: order-42\r\n\t(part \"two\")\r\n"
        "X-Msg-Ref: second\r\nSubject: s\r\n\r\n";
    struct events_rec r = { .type = EVENTS_RECEPTION, .queue_id = "Q",
        .hdr = h, .hdrlen = sizeof(h) - 1 };

    cr_assert(strstr(fmt(&r), "\"headers\":{\"X-Msg-Ref\":\"order-42 "
        "(part \\\"two\\\")\"}") != NULL, "%s", fmt(&r));
}


Test(events, recipients_of_a_reception)
{
    struct spool_rcpt rc[2];
    struct events_rec r = { .type = EVENTS_RECEPTION, .queue_id = "Q",
        .rcpt = rc, .nrcpt = 2, .client_ip = "192.0.2.7",
        .client_port = 4242 };

    memset(rc, 0, sizeof(rc));
    rc[0].addr = "a@x";
    rc[1].addr = "b\"@y";
    cr_assert(strstr(fmt(&r), "\"recipients\":[\"a@x\",\"b\\\"@y\"]") !=
        NULL, "%s", fmt(&r));
    cr_assert(strstr(fmt(&r), "\"client_address\":\"192.0.2.7\","
        "\"client_port\":4242") != NULL);
}


Test(events, long_fields_are_cut)
{
    char big[5000];
    struct events_rec r = { .type = EVENTS_DELIVERY, .queue_id = "Q",
        .reply = big };

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_assert_lt(strlen(fmt(&r)), EVENTS_FIELD_MAX + 300);
}


Test(events, type_names)
{
    cr_assert_eq(events_type_parse("dsn"), EVENTS_DSN);
    cr_assert_eq(events_type_parse("weather"), -1);
    cr_assert_str_eq(events_type_name(EVENTS_RESUMPTION), "resumption");
}


Test(events, shape_episode_lines_round_trip_and_bad_ones_refused)
{
    char   line[512];
    size_t n = events_shape_encode(line, sizeof(line), EVENTS_SUSPENSION,
        "google", "out-2", "suspend", 1796407200120ULL,
        "suspended with mtactl");
    static const char *bad[] = {
        "suspension\tgoogle\tout-2\tsuspend\t1\n",      /* 5 fields */
        "pause\tgoogle\tout-2\tsuspend\t1\tx",          /* type */
        "suspension\tgo\"ogle\tout-2\tsuspend\t1\tx",   /* site chars */
        "suspension\tgoogle\t\tsuspend\t1\tx",          /* empty source */
        "suspension\tgoogle\tout-2\tstop\t1\tx",        /* mode */
        "suspension\tgoogle\tout-2\tsuspend\t1x\tx",    /* until */
        "suspension\tgoogle\tout-2\tsuspend\t1\tx\001y", /* control */
    };

    cr_assert_str_eq(line, "suspension\tgoogle\tout-2\tsuspend\t"
        "1796407200120\tsuspended with mtactl");
    cr_assert_eq(n, strlen(line));
    ev.types = 0;                   /* parsed, not emitted (no loop here) */
    cr_assert_eq(events_shape_take(&ev, line, n), 0);
    n = events_shape_encode(line, sizeof(line), EVENTS_RESUMPTION,
        "google", "*", NULL, 0, NULL);
    cr_assert_str_eq(line, "resumption\tgoogle\t*\t-\t0\t");
    cr_assert_eq(events_shape_take(&ev, line, n), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(events_shape_take(&ev, bad[i], strlen(bad[i])), -1,
            "%s", bad[i]);
    cr_assert_eq(events_shape_encode(line, 8, EVENTS_SUSPENSION, "google",
        "s", "slow", 1, "x"), 0);
}


Test(events, a_suspension_names_its_mode_and_end)
{
    struct events_rec r = { .type = EVENTS_SUSPENSION, .site = "google",
        .source = "default", .mode = "slow", .until_ms = 1796407260000ULL,
        .reply = "421 4.7.28 rate limited" };

    cr_assert(strstr(fmt(&r), "\"type\":\"suspension\"") != NULL);
    cr_assert(strstr(fmt(&r), "\"site\":\"google\",\"source\":\"default\""
        ",\"mode\":\"slow\",\"until_ms\":1796407260000}") != NULL, "%s",
        fmt(&r));
}
