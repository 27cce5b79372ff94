/*
 * test_tls_cache.c - the outbound session cache (tls_cache.c): per-key
 * replacement, the size bound (least recently used out), expiry, and
 * reference counting (the cache's references are its own).
 */
#include <criterion/criterion.h>

#include <openssl/ssl.h>

#include "tlspol/tlspol.h"

/* A session OpenSSL calls resumable: a protocol version and an id. */
static SSL_SESSION *
sess(unsigned char id)
{
    SSL_SESSION  *s = SSL_SESSION_new();
    unsigned char sid[8] = { id };

    cr_assert_not_null(s);
    cr_assert_eq(SSL_SESSION_set_protocol_version(s, TLS1_2_VERSION), 1);
    cr_assert_eq(SSL_SESSION_set1_id(s, sid, sizeof(sid)), 1);
    cr_assert_eq(SSL_SESSION_is_resumable(s), 1);
    return s;
}

static unsigned char
id_of(SSL_SESSION *s)
{
    unsigned int         len;
    const unsigned char *p = SSL_SESSION_get_id(s, &len);

    return len > 0 ? p[0] : 0;
}

Test(tls_cache, get_put_replace_del)
{
    struct tls_cache *c = tls_cache_new(4, 60);
    SSL_SESSION      *a = sess(1), *b = sess(2), *got;

    cr_assert_null(tls_cache_get(c, "d|h|may|0", 0));
    tls_cache_put(c, "d|h|may|0", a, 0);
    SSL_SESSION_free(a);                /* the cache holds its own */
    got = tls_cache_get(c, "d|h|may|0", 10);
    cr_assert_not_null(got);
    cr_assert_eq(id_of(got), 1);
    SSL_SESSION_free(got);
    cr_assert_null(tls_cache_get(c, "d|h|verify|0", 10));
    tls_cache_put(c, "d|h|may|0", b, 20);
    SSL_SESSION_free(b);
    cr_assert_eq(tls_cache_count(c), 1);
    got = tls_cache_get(c, "d|h|may|0", 30);
    cr_assert_eq(id_of(got), 2);
    SSL_SESSION_free(got);
    tls_cache_del(c, "d|h|may|0");
    cr_assert_null(tls_cache_get(c, "d|h|may|0", 40));
    cr_assert_eq(tls_cache_count(c), 0);
    tls_cache_free(c);
}

Test(tls_cache, bounded_least_recently_used_goes)
{
    struct tls_cache *c = tls_cache_new(2, 60);
    SSL_SESSION      *s[3] = { sess(1), sess(2), sess(3) }, *got;
    int               i;

    tls_cache_put(c, "k1", s[0], 0);
    tls_cache_put(c, "k2", s[1], 1);
    got = tls_cache_get(c, "k1", 2);    /* k1 used: k2 is the oldest */
    SSL_SESSION_free(got);
    tls_cache_put(c, "k3", s[2], 3);
    cr_assert_eq(tls_cache_count(c), 2);
    cr_assert_null(tls_cache_get(c, "k2", 4));
    got = tls_cache_get(c, "k1", 4);
    cr_assert_not_null(got);
    SSL_SESSION_free(got);
    got = tls_cache_get(c, "k3", 4);
    cr_assert_not_null(got);
    SSL_SESSION_free(got);
    for (i = 0; i < 3; i++)
        SSL_SESSION_free(s[i]);
    tls_cache_free(c);
}

Test(tls_cache, entries_expire)
{
    struct tls_cache *c = tls_cache_new(8, 2);     /* 2 s */
    SSL_SESSION      *a = sess(1), *got;

    tls_cache_put(c, "k", a, 1000);
    got = tls_cache_get(c, "k", 2999);
    cr_assert_not_null(got);
    SSL_SESSION_free(got);
    cr_assert_null(tls_cache_get(c, "k", 3000));
    cr_assert_eq(tls_cache_count(c), 0);
    SSL_SESSION_free(a);
    tls_cache_free(c);
}

Test(tls_cache, unresumable_sessions_are_dropped)
{
    struct tls_cache *c = tls_cache_new(8, 60);
    SSL_SESSION      *a = SSL_SESSION_new();    /* no id, no ticket */

    tls_cache_put(c, "k", a, 0);
    cr_assert_null(tls_cache_get(c, "k", 1));
    cr_assert_eq(tls_cache_count(c), 0);
    SSL_SESSION_free(a);
    tls_cache_free(c);
}
