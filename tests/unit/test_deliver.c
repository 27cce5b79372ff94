/*
 * test_deliver.c - the schedule's arithmetic (retry steps, the last step
 * repeating, expiry clamp), the shard of a queue id, and maildir's CRLF
 * conversion at every chunk split.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/delivery.h"
#include "delivery/delivery_int.h"
#include "delivery/maildir.h"

static const uint64_t steps[] = { 60000, 300000, 900000, 3600000, 14400000 };

Test(deliver_retry, steps_then_last_repeats)
{
    cr_assert_eq(deliver_retry_delay(steps, 5, 0), 60000);
    cr_assert_eq(deliver_retry_delay(steps, 5, 1), 60000);
    cr_assert_eq(deliver_retry_delay(steps, 5, 2), 300000);
    cr_assert_eq(deliver_retry_delay(steps, 5, 5), 14400000);
    cr_assert_eq(deliver_retry_delay(steps, 5, 6), 14400000);
    cr_assert_eq(deliver_retry_delay(steps, 5, 1000), 14400000);
    cr_assert_eq(deliver_retry_delay(steps, 1, 3), 60000);
    cr_assert_eq(deliver_retry_delay(NULL, 0, 3), 60000);
}

Test(deliver_retry, next_is_now_plus_step)
{
    uint64_t now = 1000000000, arrival = now - 5000;

    cr_assert_eq(deliver_next_retry(steps, 5, 1, now, arrival, 432000000),
        now + 60000);
    cr_assert_eq(deliver_next_retry(steps, 5, 3, now, arrival, 432000000),
        now + 900000);
}

Test(deliver_retry, clamped_to_expiry_not_before_now)
{
    uint64_t arrival = 1000000000, mqt = 3600000;
    uint64_t now = arrival + mqt - 1000;

    /* a 4h step would overshoot: the last try is at expiry */
    cr_assert_eq(deliver_next_retry(steps, 5, 5, now, arrival, mqt),
        arrival + mqt);
    /* already past expiry: now */
    now = arrival + mqt + 5;
    cr_assert_eq(deliver_next_retry(steps, 5, 5, now, arrival, mqt), now);
    /* no max_queue_time: never clamped */
    cr_assert_eq(deliver_next_retry(steps, 5, 5, now, arrival, 0),
        now + 14400000);
}

Test(deliver_shard, digits_11_and_12)
{
    /* 11 digits of time, 2 of shard, 3 of counter */
    cr_assert_eq(deliver_shard_of("0123456789A00FFF", 4), 0);
    cr_assert_eq(deliver_shard_of("0123456789A01FFF", 4), 1);
    cr_assert_eq(deliver_shard_of("0123456789A03000", 4), 3);
    cr_assert_eq(deliver_shard_of("0123456789A05000", 4), 1);
    cr_assert_eq(deliver_shard_of("0123456789A0A000", 16), 10);
    cr_assert_eq(deliver_shard_of("0123456789A1F000", 64), 31);
    cr_assert_eq(deliver_shard_of("0123456789AFF000", 256), 255);
    cr_assert_eq(deliver_shard_of("0123456789A07000", 1), 0);
    cr_assert_eq(deliver_shard_of("0123456789A07000", 0), 0);
    /* the time and counter digits do not matter */
    cr_assert_eq(deliver_shard_of("FFFFFFFFFFF02ABC", 3), 2);
    cr_assert_eq(deliver_shard_of("0000000000002000", 3), 2);
    /* not an id (17 digits, lower case): shard 0 takes it */
    cr_assert_eq(deliver_shard_of("00000000000020000", 3), 0);
    cr_assert_eq(deliver_shard_of("0123456789a02fff", 3), 0);
}

static void
check_unix(const char *in, const char *want)
{
    size_t n = strlen(in), wn = strlen(want), cut;
    char   out[256];

    for (cut = 0; cut <= n; cut++) {
        int    cr = 0;
        size_t o = maildir_unix_lines(in, cut, &cr, out);

        o += maildir_unix_lines(in + cut, n - cut, &cr, out + o);
        if (cr)
            out[o++] = '\r';
        cr_assert_eq(o, wn, "cut %zu: %zu bytes", cut, o);
        cr_assert(memcmp(out, want, wn) == 0, "cut %zu: '%.*s'", cut,
            (int)o, out);
    }
}

Test(maildir, crlf_to_lf_at_every_split)
{
    check_unix("a\r\nb\r\n", "a\nb\n");
    check_unix("a\rb\r\n\r\n", "a\rb\n\n");
    check_unix("x\r", "x\r");
    check_unix("\r\r\n", "\r\n");
    check_unix("", "");
}

/* Queue quotas: the key a value counts under. */
#include "common/status.h"
#include "config/config.h"

Test(deliver_quota, keys_by_kind)
{
    struct config cfg;
    char          k[STATUS_QUOTA_KEY_MAX + 1];

    memset(&cfg, 0, sizeof(cfg));
    cfg.quota_ipv4_prefix = 24;
    cfg.quota_ipv6_prefix = 64;
    cr_assert_eq(deliver_quota_key(&cfg, STATUS_QK_RCPT, "U@Mail.Example.ORG",
        k), 16);
    cr_assert_str_eq(k, "mail.example.org");
    cr_assert_eq(deliver_quota_key(&cfg, STATUS_QK_SENDER, "", k), 0,
        "the null sender has no domain");
    cr_assert_eq(deliver_quota_key(&cfg, STATUS_QK_RCPT, "postmaster", k), 0);
    cr_assert_gt(deliver_quota_key(&cfg, STATUS_QK_USER, "Alice", k), 0);
    cr_assert_str_eq(k, "Alice", "a login keeps its case");
    cr_assert_gt(deliver_quota_key(&cfg, STATUS_QK_NET, "192.0.2.77", k), 0);
    cr_assert_str_eq(k, "192.0.2.0/24");
    cr_assert_gt(deliver_quota_key(&cfg, STATUS_QK_NET, "2001:db8:1:2:3::9",
        k), 0);
    cr_assert_str_eq(k, "2001:db8:1:2::/64");
    deliver_quota_key(&cfg, STATUS_QK_NET, "::ffff:192.0.2.9", k);
    cr_assert_str_eq(k, "192.0.2.0/24", "v4-mapped as IPv4");
    cfg.quota_ipv4_prefix = 32;
    deliver_quota_key(&cfg, STATUS_QK_NET, "192.0.2.77", k);
    cr_assert_str_eq(k, "192.0.2.77/32");
    cr_assert_eq(deliver_quota_key(&cfg, STATUS_QK_NET, "nonsense", k), 0);
    cr_assert_eq(deliver_quota_key(&cfg, STATUS_QK_USER, NULL, k), 0);
}
