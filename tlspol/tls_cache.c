/*
 * tls_cache.c - the outbound TLS session cache of one worker:
 * the last SSL_SESSION per "destination|host[ip]:port|level", so the
 * next connection to the same host resumes instead of doing a full
 * handshake.
 *
 * CONTRACT  See tlspol.h.  At most max entries; a put into a full
 *           cache replaces the least recently used one; an entry older
 *           than ttl_s, or whose session OpenSSL says cannot be resumed,
 *           is dropped when looked up.  The level is part of the key: a
 *           session made under may (nothing verified) is never offered
 *           for a verify connection, whose check a resumption would skip.
 * COST      A linear scan: a lookup happens once per new TLS connection,
 *           next to a handshake that costs far more.
 */
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "common/util.h"
#include "tlspol/tlspol.h"

#define TLS_CACHE_KEY_MAX 768

struct tls_cache_ent {
    char                 key[TLS_CACHE_KEY_MAX];
    SSL_SESSION         *sess;
    unsigned long long   made_ms, used_ms;
};

struct tls_cache {
    struct tls_cache_ent *ent;
    size_t                n, max;
    unsigned long long    ttl_ms;
};


struct tls_cache *
tls_cache_new(size_t max, unsigned ttl_s)
{
    struct tls_cache *c = xcalloc(1, sizeof(*c));

    c->max = max ? max : 1000;
    c->ttl_ms = (unsigned long long)(ttl_s ? ttl_s : 3600) * 1000;
    c->ent = xcalloc(c->max, sizeof(*c->ent));
    return c;
}


void
tls_cache_free(struct tls_cache *c)
{
    size_t i;

    if (c == NULL)
        return;
    for (i = 0; i < c->n; i++)
        SSL_SESSION_free(c->ent[i].sess);
    free(c->ent);
    free(c);
}


static struct tls_cache_ent *
tls_cache_find(struct tls_cache *c, const char *key)
{
    size_t i;

    for (i = 0; i < c->n; i++)
        if (strcmp(c->ent[i].key, key) == 0)
            return &c->ent[i];
    return NULL;
}


/* tls_cache_drop - remove e (the last entry moves into its place). */
static void
tls_cache_drop(struct tls_cache *c, struct tls_cache_ent *e)
{
    SSL_SESSION_free(e->sess);
    *e = c->ent[--c->n];
}


struct ssl_session_st *
tls_cache_get(struct tls_cache *c, const char *key, unsigned long long now_ms)
{
    struct tls_cache_ent *e = tls_cache_find(c, key);

    if (e == NULL)
        return NULL;
    if (now_ms - e->made_ms >= c->ttl_ms ||
        SSL_SESSION_is_resumable(e->sess) != 1) {
        tls_cache_drop(c, e);
        return NULL;
    }
    e->used_ms = now_ms;
    SSL_SESSION_up_ref(e->sess);
    return e->sess;
}


void
tls_cache_put(struct tls_cache *c, const char *key, struct ssl_session_st *s,
    unsigned long long now_ms)
{
    struct tls_cache_ent *e = tls_cache_find(c, key);
    size_t                i;

    if (strlen(key) >= TLS_CACHE_KEY_MAX)
        return;                     /* cannot be: names are bounded */
    if (e != NULL) {
        SSL_SESSION_free(e->sess);
    } else if (c->n < c->max) {
        e = &c->ent[c->n++];
    } else {
        e = &c->ent[0];             /* full: the least recently used */
        for (i = 1; i < c->n; i++)
            if (c->ent[i].used_ms < e->used_ms)
                e = &c->ent[i];
        SSL_SESSION_free(e->sess);
    }
    util_strlcpy(e->key, key, sizeof(e->key));
    SSL_SESSION_up_ref(s);
    e->sess = s;
    e->made_ms = e->used_ms = now_ms;
}


void
tls_cache_del(struct tls_cache *c, const char *key)
{
    struct tls_cache_ent *e = tls_cache_find(c, key);

    if (e != NULL)
        tls_cache_drop(c, e);
}


size_t
tls_cache_count(const struct tls_cache *c)
{
    return c->n;
}
