/*
 * grey.c - the pure part of greylisting: the triplet's key and the
 * decision over its record (grey.h).  grey_db.c keeps the records.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "grey/grey.h"

size_t
grey_net(const struct sockaddr *sa, unsigned v4, unsigned v6, char *out,
    size_t outsz)
{
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
    uint8_t  b[16];
    unsigned bits, i, fam;
    char     ip[INET6_ADDRSTRLEN];

    if (sa->sa_family == AF_INET) {
        memcpy(b, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        fam = AF_INET;
        bits = v4 > 32 ? 32 : v4;
    } else if (sa->sa_family == AF_INET6 &&
        IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
        memcpy(b, s6->sin6_addr.s6_addr + 12, 4);
        fam = AF_INET;
        bits = v4 > 32 ? 32 : v4;
    } else if (sa->sa_family == AF_INET6) {
        memcpy(b, s6->sin6_addr.s6_addr, 16);
        fam = AF_INET6;
        bits = v6 > 128 ? 128 : v6;
    } else {
        return 0;
    }
    for (i = 0; i < (fam == AF_INET ? 32u : 128u); i++)
        if (i >= bits)
            b[i / 8] &= (uint8_t)~(0x80u >> (i % 8));
    if (inet_ntop((int)fam, b, ip, sizeof(ip)) == NULL)
        return 0;
    if (bits == (fam == AF_INET ? 32u : 128u))
        return (size_t)snprintf(out, outsz, "%s", ip);
    return (size_t)snprintf(out, outsz, "%s/%u", ip, bits);
}


/* grey_put - s lower-cased, a byte that is not printable or is a space
 * as '?', into out at *n (bounded by cap). */
static void
grey_put(char *out, size_t *n, size_t cap, const char *s)
{
    unsigned char c;

    for (; *s != '\0' && *n < cap; s++) {
        c = (unsigned char)*s;
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        else if (c <= ' ' || c == 0x7f)
            c = '?';
        out[(*n)++] = (char)c;
    }
}


size_t
grey_key(const struct sockaddr *sa, unsigned v4_prefix, unsigned v6_prefix,
    const char *sender, const char *rcpt, char *out)
{
    char         tmp[4 * GREY_KEY_MAX];
    const size_t cap = sizeof(tmp);
    uint64_t     h = 0xcbf29ce484222325ULL;     /* FNV-1a */
    size_t       n, i;

    n = grey_net(sa, v4_prefix, v6_prefix, tmp, cap);
    if (n == 0 || n >= 64)
        return 0;
    tmp[n++] = ' ';
    grey_put(tmp, &n, cap - 2, sender[0] != '\0' ? sender : "<>");
    tmp[n++] = ' ';
    grey_put(tmp, &n, cap - 1, rcpt);
    if (n <= GREY_KEY_MAX) {
        memcpy(out, tmp, n);
        out[n] = '\0';
        return n;
    }
    for (i = 0; i < n; i++) {
        h ^= (unsigned char)tmp[i];
        h *= 0x100000001b3ULL;
    }
    memcpy(out, tmp, GREY_KEY_MAX - 17);
    snprintf(out + GREY_KEY_MAX - 17, 18, "#%016llx", (unsigned long long)h);
    return GREY_KEY_MAX;
}


int
grey_expired(const struct grey_rec *rec, uint64_t now_ms,
    const struct grey_params *p)
{
    if (rec->pass_ms != 0)
        return now_ms > rec->pass_ms &&
            now_ms - rec->pass_ms > p->pass_lifetime_ms;
    return now_ms > rec->first_ms && now_ms - rec->first_ms > p->expiry_ms;
}


enum grey_verdict
grey_decide(const struct grey_rec *rec, uint64_t now_ms,
    const struct grey_params *p, struct grey_rec *out, int *write)
{
    *write = 0;
    if (rec == NULL || grey_expired(rec, now_ms, p) ||
        rec->first_ms > now_ms + p->delay_ms) {   /* a clock set back far */
        memset(out, 0, sizeof(*out));
        out->first_ms = out->last_ms = now_ms;
        out->deferred = 1;
        *write = 1;
        return GREY_DEFER;
    }
    *out = *rec;
    if (rec->pass_ms != 0) {
        if (now_ms >= rec->pass_ms + GREY_LAZY_MS) {
            out->pass_ms = out->last_ms = now_ms;
            *write = 1;
        }
        return GREY_PASS;
    }
    if (now_ms < rec->first_ms + p->delay_ms)
        return GREY_DEFER;          /* nothing new worth a write */
    out->pass_ms = out->last_ms = now_ms;
    *write = 1;
    return GREY_PASS;
}


int
grey_domain_match(const char *domain, char *const *list, size_t n)
{
    size_t dl = strlen(domain), el, i;

    for (i = 0; i < n; i++) {
        el = strlen(list[i]);
        if (dl == el && strcasecmp(domain, list[i]) == 0)
            return 1;
        if (dl > el && domain[dl - el - 1] == '.' &&
            strcasecmp(domain + dl - el, list[i]) == 0)
            return 1;
    }
    return 0;
}
