/*
 * test_status.c - common/status.c: daemon-wide admission counts in the
 * shared page: the per-address limit summed over worker slots, the total
 * from the slots' session counts, v4-mapped addresses, and a dead worker's
 * slot cleared so it leaves no phantom sessions; the AUTH failure and
 * limits.ban tables.
 */
#include <arpa/inet.h>
#include <string.h>
#include <stdio.h>

#include <criterion/criterion.h>

#include "common/status.h"

static struct sockaddr_storage
addr(const char *ip)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
    }
    return ss;
}

#define SA(ss) ((const struct sockaddr *)&(ss))

/* What a worker does around a session: count it in its slot. */
static int
admit(struct status_page *sp, unsigned slot, struct sockaddr_storage *ss,
    uint32_t max_total, uint32_t max_ip)
{
    int rc = status_conn_acquire(sp, slot, SA(*ss), max_total, max_ip);

    if (rc == 0)
        STATUS_ADD(sp->w[slot].conns_cur, 1);
    return rc;
}

static void
leave(struct status_page *sp, unsigned slot, struct sockaddr_storage *ss)
{
    status_conn_release(sp, slot, SA(*ss));
    STATUS_SUB(sp->w[slot].conns_cur, 1);
}

Test(status, per_ip_limit_is_exact_and_released)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("192.0.2.7"), b = addr("192.0.2.8");
    int                      i;

    for (i = 0; i < 3; i++)
        cr_assert_eq(admit(sp, 0, &a, 100, 3), 0);
    cr_assert_eq(admit(sp, 0, &a, 100, 3), STATUS_EPERIP);
    cr_assert_eq(admit(sp, 0, &b, 100, 3), 0, "other address");
    cr_assert_eq(status_conn_count(sp, SA(a)), 3);
    cr_assert_eq(status_conns_all(sp), 4, "a refused one is not counted");
    leave(sp, 0, &a);
    cr_assert_eq(admit(sp, 0, &a, 100, 3), 0);
    for (i = 0; i < 3; i++)
        leave(sp, 0, &a);
    leave(sp, 0, &b);
    cr_assert_eq(status_conn_count(sp, SA(a)), 0);
    cr_assert_eq(status_conns_all(sp), 0);
}

Test(status, limits_hold_across_worker_slots)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("2001:db8::1"), b = addr("10.0.0.1");

    cr_assert_eq(admit(sp, 0, &a, 100, 3), 0);
    cr_assert_eq(admit(sp, 1, &a, 100, 3), 0);
    cr_assert_eq(admit(sp, 5, &a, 100, 3), 0);
    cr_assert_eq(admit(sp, 1, &a, 100, 3), STATUS_EPERIP,
        "three sessions in three workers reach the limit");
    cr_assert_eq(status_conn_count(sp, SA(a)), 3);
    cr_assert_eq(admit(sp, 2, &b, 4, 10), 0);
    cr_assert_eq(admit(sp, 3, &b, 4, 10), STATUS_EFULL, "total is 4");
    cr_assert_eq(status_conns_all(sp), 4);
}

Test(status, a_cleared_slot_leaves_no_phantom_sessions)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("198.51.100.9");
    int                      i;

    for (i = 0; i < 5; i++)
        cr_assert_eq(admit(sp, 7, &a, 100, 5), 0);
    cr_assert_eq(admit(sp, 8, &a, 100, 5), STATUS_EPERIP);
    /* the worker in slot 7 is killed: the master clears its slot */
    memset(&sp->w[7], 0, sizeof(sp->w[7]));
    status_slot_clear(sp, 7);
    cr_assert_eq(status_conn_count(sp, SA(a)), 0);
    cr_assert_eq(status_conns_all(sp), 0);
    cr_assert_eq(admit(sp, 8, &a, 100, 5), 0);
}

Test(status, v4_mapped_counts_as_the_v4_address)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  v4 = addr("127.0.0.2"), m = addr("::ffff:127.0.0.2");

    cr_assert_eq(admit(sp, 0, &v4, 100, 2), 0);
    cr_assert_eq(admit(sp, 1, &m, 100, 2), 0);
    cr_assert_eq(admit(sp, 0, &m, 100, 2), STATUS_EPERIP);
    cr_assert_eq(status_conn_count(sp, SA(v4)), 2);
}

Test(status, many_addresses_in_one_slot_count_separately)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  ss;
    char                     ip[32];
    int                      i;

    for (i = 0; i < 5000; i++) {
        snprintf(ip, sizeof(ip), "10.%d.%d.1", i / 250, i % 250);
        ss = addr(ip);
        cr_assert_eq(admit(sp, 0, &ss, 100000, 1), 0, "%s", ip);
        cr_assert_eq(admit(sp, 0, &ss, 100000, 1), STATUS_EPERIP, "%s", ip);
    }
    for (i = 0; i < 5000; i++) {
        snprintf(ip, sizeof(ip), "10.%d.%d.1", i / 250, i % 250);
        ss = addr(ip);
        cr_assert_eq(status_conn_count(sp, SA(ss)), 1, "%s", ip);
        leave(sp, 0, &ss);
    }
    cr_assert_eq(status_conns_all(sp), 0);
}


/* IPv6 clients count per limits.ipv6_prefix network,
 * so the addresses of one /64 share one per-address limit. */
Test(status, ipv6_clients_grouped_by_prefix)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("2001:db8:1:2::1"),
                             b = addr("2001:db8:1:2:ffff:1:2:3"),
                             c = addr("2001:db8:1:3::1"),
                             v4 = addr("192.0.2.7"), ga, gb, gc, a128, g, h;
    char                     txt[INET6_ADDRSTRLEN];

    status_addr_group(SA(a), 64, &ga);
    status_addr_group(SA(b), 64, &gb);
    status_addr_group(SA(c), 64, &gc);
    status_addr_group(SA(a), 128, &a128);
    /* /64: a and b are one client, across worker slots; c is another */
    cr_assert_eq(admit(sp, 0, &ga, 100, 1), 0);
    cr_assert_eq(admit(sp, 1, &gb, 100, 1), STATUS_EPERIP);
    cr_assert_eq(admit(sp, 1, &gc, 100, 1), 0);
    leave(sp, 0, &ga);
    cr_assert_eq(admit(sp, 1, &gb, 100, 1), 0);
    /* /128: every address on its own */
    cr_assert_eq(admit(sp, 0, &a128, 100, 1), 0);
    /* odd prefixes clear exactly the host bits; IPv4 is left alone */
    status_addr_group(SA(b), 36, &g);
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&g)->sin6_addr, txt,
        sizeof(txt));
    cr_assert_str_eq(txt, "2001:db8::");
    status_addr_group(SA(b), 21, &g);
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&g)->sin6_addr, txt,
        sizeof(txt));
    cr_assert_str_eq(txt, "2001:800::");
    status_addr_group(SA(v4), 64, &h);
    cr_assert_eq(h.ss_family, AF_INET);
    cr_assert(memcmp(&((struct sockaddr_in *)&h)->sin_addr,
        &((struct sockaddr_in *)&v4)->sin_addr, 4) == 0);
}


/* --- AUTH failures, daemon-wide ----------------------------------------- */

#define WIN 600u

Test(status, auth_take_stops_at_max_and_give_undoes_one)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("192.0.2.1"), b = addr("192.0.2.2");
    unsigned                 i;

    for (i = 1; i <= 3; i++)
        cr_assert_eq(status_auth_take(sp, SA(a), 1000, WIN, 3), i);
    cr_assert_eq(status_auth_take(sp, SA(a), 1000, WIN, 3), 0,
        "the fourth check of three is refused");
    cr_assert_eq(status_auth_count(sp, SA(a), 1000, WIN), 3);
    cr_assert_eq(status_auth_count(sp, SA(b), 1000, WIN), 0,
        "another address has its own count");
    status_auth_give(sp, SA(a), 1001, WIN);     /* a check that matched */
    cr_assert_eq(status_auth_count(sp, SA(a), 1001, WIN), 2);
    cr_assert_eq(status_auth_take(sp, SA(a), 1002, WIN, 3), 3);
}

Test(status, auth_failures_are_forgotten_after_the_window)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("192.0.2.1");

    cr_assert_eq(status_auth_take(sp, SA(a), 100, WIN, 5), 1);
    cr_assert_eq(status_auth_take(sp, SA(a), 200, WIN, 5), 2);
    cr_assert_eq(status_auth_count(sp, SA(a), 200 + WIN, WIN), 2,
        "the window runs from the last failure");
    cr_assert_eq(status_auth_count(sp, SA(a), 201 + WIN, WIN), 0);
    cr_assert_eq(status_auth_take(sp, SA(a), 201 + WIN, WIN, 5), 1,
        "a forgotten address starts again");
    /* the 24-bit clock wraps: ages are taken modulo */
    cr_assert_eq(status_auth_take(sp, SA(a), 0xfffff0, WIN, 5), 1);
    cr_assert_eq(status_auth_count(sp, SA(a), 0x10, WIN), 1);
}

Test(status, auth_ipv6_counted_per_prefix)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("2001:db8:1:2::1"),
                             b = addr("2001:db8:1:2:ffff:1:2:3"),
                             c = addr("2001:db8:1:3::1"), ga, gb, gc;

    status_addr_group(SA(a), 64, &ga);
    status_addr_group(SA(b), 64, &gb);
    status_addr_group(SA(c), 64, &gc);
    cr_assert_eq(status_auth_take(sp, SA(ga), 10, WIN, 2), 1);
    cr_assert_eq(status_auth_take(sp, SA(gb), 10, WIN, 2), 2,
        "two addresses of one /64 share the count");
    cr_assert_eq(status_auth_take(sp, SA(ga), 10, WIN, 2), 0);
    cr_assert_eq(status_auth_take(sp, SA(gc), 10, WIN, 2), 1,
        "the next /64 is another client");
}

Test(status, auth_many_addresses_each_keep_their_count)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  ss;
    char                     ip[32];
    unsigned                 i;

    /* more addresses than the table has words: the oldest are reused,
     * the newest keep their counts */
    for (i = 0; i < 3 * STATUS_AUTH_SLOTS; i++) {
        snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16, (i >> 8) & 255,
            i & 255);
        ss = addr(ip);
        cr_assert_eq(status_auth_take(sp, SA(ss), i / 64, WIN, 9), 1, "%s",
            ip);
    }
    ss = addr("10.0.0.1");
    cr_assert_eq(status_auth_take(sp, SA(ss), 3 * STATUS_AUTH_SLOTS / 64,
        WIN, 9), 1, "an old entry was reused or forgotten");
    snprintf(ip, sizeof(ip), "10.%u.%u.%u", (3 * STATUS_AUTH_SLOTS - 1) >> 16,
        ((3 * STATUS_AUTH_SLOTS - 1) >> 8) & 255,
        (3 * STATUS_AUTH_SLOTS - 1) & 255);
    ss = addr(ip);
    cr_assert_eq(status_auth_count(sp, SA(ss), 3 * STATUS_AUTH_SLOTS / 64,
        WIN), 1, "the newest address is counted");
}


/* --- limits.ban --------------------------------------------------------- */

#define BWIN 60u
#define BDUR 30u

Test(status, ban_after_errors_within_the_window)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("192.0.2.7"), b = addr("192.0.2.8");

    cr_assert_eq(status_ban_note(sp, SA(a), 100, BWIN, 3, BDUR), 0);
    cr_assert_eq(status_ban_note(sp, SA(a), 101, BWIN, 3, BDUR), 0);
    cr_assert_eq(status_ban_check(sp, SA(a), 101), 0, "2 of 3: not yet");
    cr_assert_eq(status_ban_note(sp, SA(a), 102, BWIN, 3, BDUR), 1,
        "the third error makes the ban");
    cr_assert_eq(status_ban_check(sp, SA(a), 102), 1);
    cr_assert_eq(status_ban_check(sp, SA(b), 102), 0, "another address");
    cr_assert_eq(status_ban_live(sp, 102), 1);
    cr_assert_eq(status_ban_check(sp, SA(a), 102 + BDUR - 1), 1);
    cr_assert_eq(status_ban_check(sp, SA(a), 102 + BDUR), 0, "it ended");
    cr_assert_eq(status_ban_live(sp, 102 + BDUR), 0);
}

Test(status, ban_errors_older_than_the_window_are_forgotten)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("192.0.2.9");

    cr_assert_eq(status_ban_note(sp, SA(a), 100, BWIN, 3, BDUR), 0);
    cr_assert_eq(status_ban_note(sp, SA(a), 150, BWIN, 3, BDUR), 0);
    /* the count's window runs from its last error */
    cr_assert_eq(status_ban_note(sp, SA(a), 150 + BWIN + 1, BWIN, 3, BDUR),
        0, "the old errors were forgotten");
    cr_assert_eq(status_ban_check(sp, SA(a), 150 + BWIN + 1), 0);
    cr_assert_eq(status_ban_note(sp, SA(a), 150 + BWIN + 2, BWIN, 3, BDUR),
        0);
    cr_assert_eq(status_ban_note(sp, SA(a), 150 + BWIN + 3, BWIN, 3, BDUR),
        1);
}

Test(status, ban_ipv6_by_prefix_and_v4_mapped)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("2001:db8:5:6::1"),
                             b = addr("2001:db8:5:6:aaaa::2"),
                             c = addr("2001:db8:5:7::1"),
                             v4 = addr("198.51.100.3"),
                             m4 = addr("::ffff:198.51.100.3"), ga, gb, gc;

    status_addr_group(SA(a), 64, &ga);
    status_addr_group(SA(b), 64, &gb);
    status_addr_group(SA(c), 64, &gc);
    cr_assert_eq(status_ban_note(sp, SA(ga), 10, BWIN, 2, BDUR), 0);
    cr_assert_eq(status_ban_note(sp, SA(gb), 10, BWIN, 2, BDUR), 1,
        "one /64 is one client");
    cr_assert_eq(status_ban_check(sp, SA(ga), 10), 1);
    cr_assert_eq(status_ban_check(sp, SA(gc), 10), 0, "the next /64");
    cr_assert_eq(status_ban_add(sp, SA(v4), 10, BDUR), 0);
    cr_assert_eq(status_ban_check(sp, SA(m4), 10), 1,
        "v4-mapped on a dual-stack socket is the same client");
}

Test(status, ban_add_list_del)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("203.0.113.5"), g,
                             b = addr("2001:db8:9:9::"), c = addr("10.1.1.1");
    struct status_ban        list[4];
    char                     ip[64];

    status_addr_group(SA(b), 64, &g);
    cr_assert_eq(status_ban_note(sp, SA(c), 5, BWIN, 9, BDUR), 0);
    cr_assert_eq(status_ban_add(sp, SA(a), 5, 100), 0);
    cr_assert_eq(status_ban_add(sp, SA(g), 5, 200), 0);
    cr_assert_eq(status_ban_add(sp, SA(a), 6, 100), 0, "a renewal");
    cr_assert_eq(status_ban_list(sp, 10, list, 4), 2,
        "two bans, not the count of 10.1.1.1, not the renewal twice");
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(inet_ntop(list[i].addr.ss_family, list[i].addr.ss_family
            == AF_INET ? (void *)&((struct sockaddr_in *)&list[i].addr)->
            sin_addr : (void *)&((struct sockaddr_in6 *)&list[i].addr)->
            sin6_addr, ip, sizeof(ip)) != NULL, 1);
        if (list[i].addr.ss_family == AF_INET) {
            cr_assert_str_eq(ip, "203.0.113.5");
            cr_assert_eq(list[i].left_s, 96);
        } else {
            cr_assert_str_eq(ip, "2001:db8:9:9::");
            cr_assert_eq(list[i].left_s, 195);
        }
    }
    cr_assert_eq(status_ban_del(sp, SA(a), 10), 1);
    cr_assert_eq(status_ban_check(sp, SA(a), 10), 0);
    cr_assert_eq(status_ban_del(sp, SA(a), 10), 0, "nothing left to lift");
    cr_assert_eq(status_ban_check(sp, SA(g), 10), 1);
    cr_assert_eq(status_ban_live(sp, 10), 1);
}

Test(status, ban_refuses_only_the_banned_address)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  ss, banned = addr("10.200.0.1");
    char                     ip[32];
    unsigned                 i, hits = 0;

    cr_assert_eq(status_ban_add(sp, SA(banned), 1, 100), 0);
    /* many addresses share the banned one's probe window */
    for (i = 0; i < 200000; i++) {
        snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16, (i >> 8) & 255,
            i & 255);
        ss = addr(ip);
        hits += (unsigned)status_ban_check(sp, SA(ss), 2);
    }
    cr_assert_eq(hits, 0);
    cr_assert_eq(status_ban_check(sp, SA(banned), 2), 1);
}

/* ---- failed attempts by class x site (status_bclass.c) ---- */

static uint64_t
t_bclass_count(const struct status_page *sp, const char *site, unsigned cls)
{
    uint64_t v = 0;
    size_t   i;

    for (i = 0; i < STATUS_BCLASS_SITES; i++)
        if (status_bclass_site(sp, i) != NULL &&
            strcmp(status_bclass_site(sp, i), site) == 0)
            v += sp->bclass[i].n[cls];
    return v;
}

Test(status, bclass_rows_named_once_counted_and_bounded)
{
    struct status_page *sp = status_create();
    char                site[64];
    size_t              i, named = 0;

    status_bclass_add(sp, "Gmail.COM", 6);
    status_bclass_add(sp, "gmail.com", 6);
    status_bclass_add(sp, "gmail.com", 1);
    cr_expect_eq(t_bclass_count(sp, "gmail.com", 6), 2);
    cr_expect_eq(t_bclass_count(sp, "gmail.com", 1), 1);
    /* a label value is safe: no quote, backslash or newline survives */
    status_bclass_add(sp, "a\"b\\c\nd", 2);
    cr_expect_eq(t_bclass_count(sp, "a_b_c_d", 2), 1);
    status_bclass_add(sp, "", 2);
    cr_expect_eq(t_bclass_count(sp, "unknown", 2), 1);
    status_bclass_add(sp, "x.org", STATUS_BCLASS_NCLASS);   /* ignored */
    /* more sites than rows: the rest count as "other", nothing is lost */
    for (i = 0; i < 2 * STATUS_BCLASS_SITES; i++) {
        snprintf(site, sizeof(site), "d%zu.example", i);
        status_bclass_add(sp, site, 3);
    }
    for (i = 0; i < STATUS_BCLASS_SITES; i++)
        named += status_bclass_site(sp, i) != NULL;
    cr_expect_eq(named, STATUS_BCLASS_SITES);
    cr_expect_eq(t_bclass_count(sp, "other", 3) + (STATUS_BCLASS_SITES - 1 - 3),
        2 * STATUS_BCLASS_SITES, "other holds the overflow");
    cr_expect_eq(t_bclass_count(sp, "gmail.com", 6), 2, "named rows stay");
}

/* ---- next-hop health (status_health.c) ---- */

static struct sockaddr_storage
hop(const char *ip, unsigned port)
{
    struct sockaddr_storage ss = addr(ip);

    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    return ss;
}

/* Down for down_s, then one probe (the others still skip), a failed
 * probe doubles the time up to the cap, a good one clears the row. */
Test(status, hop_down_probe_backoff_and_up)
{
    struct status_page     *sp = status_create();
    struct sockaddr_storage a = hop("192.0.2.1", 25), b = hop("192.0.2.1", 26);
    const uint32_t          t0 = 1000, F = 3600;

    cr_expect_eq(status_hop_check(sp, SA(a), t0, 5, F, NULL, 0), STATUS_HOP_UP);
    cr_expect_eq(status_hop_down(sp, SA(a), t0, 10, 35, "connect refused"), 1);
    /* a connection begun before the mark fails too: no growth */
    cr_expect_eq(status_hop_down(sp, SA(a), t0 + 1, 10, 35, "again"), 1);
    {
        char e[STATUS_HOP_ERR];

        cr_expect_eq(status_hop_check(sp, SA(a), t0 + 9, 5, F, e, sizeof(e)),
            STATUS_HOP_DOWN);
        cr_expect_str_eq(e, "again", "the last error: %s", e);
    }
    cr_expect_eq(status_hop_check(sp, SA(b), t0 + 9, 5, F, NULL, 0), STATUS_HOP_UP,
        "another port of the same address is another hop");
    cr_expect_eq(status_hop_count(sp, t0 + 9, F), 1);
    /* the time is over: one probe, the others skip while it runs */
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 10, 5, F, NULL, 0), STATUS_HOP_PROBE);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 10, 5, F, NULL, 0), STATUS_HOP_DOWN);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 14, 5, F, NULL, 0), STATUS_HOP_DOWN);
    /* the probe fails: 20 s, then 35 (the cap, not 40) */
    cr_expect_eq(status_hop_down(sp, SA(a), t0 + 14, 10, 35, "timeout"), 2);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 33, 5, F, NULL, 0), STATUS_HOP_DOWN);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 34, 5, F, NULL, 0), STATUS_HOP_PROBE);
    cr_expect_eq(status_hop_down(sp, SA(a), t0 + 34, 10, 35, "timeout"), 3);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 68, 5, F, NULL, 0), STATUS_HOP_DOWN);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 69, 5, F, NULL, 0), STATUS_HOP_PROBE);
    /* a probe that never reports is claimed again after probe_s */
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 73, 5, F, NULL, 0), STATUS_HOP_DOWN);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 74, 5, F, NULL, 0), STATUS_HOP_PROBE);
    {
        struct status_hop l[4];
        char              ip[64];

        cr_assert_eq(status_hop_list(sp, t0 + 74, F, l, 4), 1);
        cr_expect_eq(l[0].failures, 3);
        cr_expect(l[0].probing);
        cr_expect_eq(l[0].down_s, 74);
        cr_expect_str_eq(l[0].err, "timeout");
        cr_expect_eq(ntohs(((struct sockaddr_in *)&l[0].addr)->sin_port), 25);
        inet_ntop(AF_INET, &((struct sockaddr_in *)&l[0].addr)->sin_addr, ip,
            sizeof(ip));
        cr_expect_str_eq(ip, "192.0.2.1");
    }
    cr_expect_eq(status_hop_up(sp, SA(a)), 1);
    cr_expect_eq(status_hop_up(sp, SA(a)), 0);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 75, 5, F, NULL, 0), STATUS_HOP_UP);
    cr_expect_eq(status_hop_count(sp, t0 + 75, F), 0);
    /* a new episode starts from down_s again */
    cr_expect_eq(status_hop_down(sp, SA(a), t0 + 80, 10, 35, "x"), 1);
    cr_expect_eq(status_hop_check(sp, SA(a), t0 + 90, 5, F, NULL, 0), STATUS_HOP_PROBE);
}

/* Entries expire by themselves: forget_s after the down time nobody
 * asked, the hop is up and its row free; v4-mapped is the same hop. */
Test(status, hop_expires_and_v4_mapped_is_one)
{
    struct status_page     *sp = status_create();
    struct sockaddr_storage a = hop("198.51.100.7", 2525);
    struct sockaddr_storage m = hop("::ffff:198.51.100.7", 2525);

    cr_expect_eq(status_hop_down(sp, SA(a), 50, 10, 100, "refused"), 1);
    cr_expect_eq(status_hop_check(sp, SA(m), 55, 5, 100, NULL, 0), STATUS_HOP_DOWN);
    cr_expect_eq(status_hop_count(sp, 159, 100), 1);
    cr_expect_eq(status_hop_count(sp, 160, 100), 0);
    cr_expect_eq(status_hop_check(sp, SA(a), 160, 5, 100, NULL, 0), STATUS_HOP_UP);
    /* the old episode is forgotten: failures start at 1 */
    cr_expect_eq(status_hop_down(sp, SA(m), 160, 10, 100, "refused"), 1);
}

/* Many hops in one probe window: each keeps its own row; a full window
 * records nothing more (the hop stays up) rather than evicting a live
 * one (which would bring a dead hop back unprobed). */
Test(status, hop_rows_are_per_hop_and_never_evict_live_ones)
{
    struct status_page     *sp = status_create();
    struct sockaddr_storage h;
    unsigned                i, n = 0, recorded = 0;
    char                    ip[32];

    for (i = 0; i < 2 * STATUS_HOP_SLOTS; i++) {
        snprintf(ip, sizeof(ip), "10.%u.%u.1", i / 250, i % 250);
        h = hop(ip, 25);
        if (status_hop_down(sp, SA(h), 10, 60, 600, "t") == 1)
            recorded++;
    }
    cr_expect_leq(recorded, STATUS_HOP_SLOTS);
    cr_expect_geq(recorded, STATUS_HOP_SLOTS / 2);
    for (i = 0; i < 2 * STATUS_HOP_SLOTS; i++) {
        snprintf(ip, sizeof(ip), "10.%u.%u.1", i / 250, i % 250);
        h = hop(ip, 25);
        n += status_hop_check(sp, SA(h), 20, 5, 600, NULL, 0) ==
            STATUS_HOP_DOWN;
    }
    cr_expect_eq(n, recorded, "%u down, %u recorded", n, recorded);
    cr_expect_eq(status_hop_count(sp, 20, 600), recorded);
}

/* Queue quotas: rows per (kind, key), a column per slot, summed; a slot
 * cleared; idle rows reclaimed, held ones kept. */
Test(status, quota_rows_columns_and_reclaim)
{
    struct status_page     *sp = status_create();
    struct status_quota_use u;
    int                     r1, r2, first;

    r1 = status_quota_take(sp, STATUS_QK_RCPT, "example.org", 11, 0, 1, 100,
        1000);
    cr_assert_geq(r1, 0);
    r2 = status_quota_take(sp, STATUS_QK_RCPT, "example.org", 11, 3, 2, 50,
        1000);
    cr_assert_eq(r2, r1, "the same key, the same row");
    cr_assert_neq(status_quota_take(sp, STATUS_QK_SENDER, "example.org", 11,
        0, 1, 1, 1000), r1, "another kind, another row");
    status_quota_sum(sp, STATUS_QK_RCPT, "example.org", 11, &u, &first);
    cr_assert_eq(u.msgs, 3);
    cr_assert_eq(u.bytes, 150);
    cr_assert_eq(first, r1);
    status_quota_clear_slot(sp, 3);
    status_quota_sum(sp, STATUS_QK_RCPT, "example.org", 11, &u, &first);
    cr_assert_eq(u.msgs, 1, "slot 3's counts went with it");
    cr_assert_eq(status_quota_reclaim(sp, 2000, 60), 0, "counts held");
    status_quota_add(sp, r1, 0, -1, -100);
    cr_assert_eq(status_quota_reclaim(sp, 1030, 60), 0, "too young");
    cr_assert_eq(status_quota_reclaim(sp, 2000, 60), 1);
    status_quota_sum(sp, STATUS_QK_RCPT, "example.org", 11, &u, &first);
    cr_assert_eq(first, -1);
    cr_assert_eq(status_quota_kind("network"), STATUS_QK_NET);
    cr_assert_str_eq(status_quota_kind_name(STATUS_QK_USER), "user");
    cr_assert_eq(status_quota_row(sp, STATUS_QK_USER, "", 0, 1, 0), -1);
}
