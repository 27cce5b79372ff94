/*
 * status_health.c - next-hop health on the shared status page (see
 * status.h): the outbound hops that did not answer, node-wide.
 *
 * PURPOSE   A hop (address and port) whose connect timed out or was
 *           refused, or that never greeted, is marked down by the worker
 *           that saw it; every worker then skips it without waiting out
 *           its timeout, until its down time ends and one probe (one
 *           connection in the whole node) says whether it answers again.
 * CONTRACT  One row per hop in hoptab, found by open addressing from a
 *           hash of address and port over HOP_PROBE rows.  The row's word
 *           is the entry: a 24-bit key << 40 | flags << 32 | 32 bits of
 *           time in seconds (until_s: the end of the down time, or of the
 *           probe's claim while HOP_PROBING is set); the flags' low seven
 *           bits count the failures of the episode (1..127): a failure
 *           while the hop is down and not probed (a connection begun
 *           before the mark) does not count, so the down time grows per
 *           failed probe, not per connection.  A word is
 *           changed only by compare-and-swap; the address, port and since
 *           of a row are stored by whoever claimed it, after its swap: a
 *           row counts for a hop only when they match (a key collision
 *           never marks another hop down; a row whose address is not yet
 *           written is skipped, at worst a second row for the hop is
 *           made, and status_hop_up() clears them all).  A row is free
 *           when its word is 0 or forget_s has passed since until_s.
 *           err is display text only: two writers at once may mix their
 *           (escaped, printable) texts; a reader terminates its copy.
 * FAILURE   A probe window of live rows records nothing more: that hop
 *           stays up (it is tried, as with health off).
 */
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/status.h"
#include "common/util.h"

#define HOP_KEY(w)     ((uint32_t)((w) >> 40))
#define HOP_FLAGS(w)   ((unsigned)(((w) >> 32) & 0xffu))
#define HOP_FAILS(w)   (HOP_FLAGS(w) & 0x7fu)
#define HOP_UNTIL(w)   ((uint32_t)(w))
#define HOP_PROBING    0x80u
#define HOP_WORD(k, f, t) ((uint64_t)(k) << 40 | (uint64_t)(f) << 32 | \
                           (uint64_t)(uint32_t)(t))
#define HOP_PROBE      8

struct hop_id {
    uint64_t hash;
    uint32_t key;
    uint64_t a[2];
    uint32_t port;
};

/* hop_id - sa's hash, key, address bytes and port; -1 when not IP. */
static int
hop_id(const struct sockaddr *sa, struct hop_id *id)
{
    uint8_t b[16] = { 0,0,0,0,0,0,0,0,0,0,0xff,0xff };
    uint16_t port;

    if ((id->hash = status_addr_hash(sa)) == 0)
        return -1;
    if (sa->sa_family == AF_INET) {
        memcpy(b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        port = ((const struct sockaddr_in *)sa)->sin_port;
    } else {
        memcpy(b, ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr, 16);
        port = ((const struct sockaddr_in6 *)sa)->sin6_port;
    }
    memcpy(id->a, b, 16);
    id->port = port;
    id->hash = (id->hash ^ ((uint64_t)port * 0x9e3779b97f4a7c15ULL)) &
        0xffffffffffffULL;
    id->key = (uint32_t)(id->hash >> 24) & 0xffffffu;
    if (id->key == 0)
        id->key = 1;
    return 0;
}

static struct status_hop_row *
hop_row(struct status_page *sp, const struct hop_id *id, unsigned i)
{
    return &sp->hoptab[(id->hash + i) & (STATUS_HOP_SLOTS - 1)];
}

/* hop_forgotten - w is free: 0, or forget_s past its time. */
static int
hop_forgotten(uint64_t w, uint32_t now_s, uint32_t forget_s)
{
    return w == 0 || (int32_t)(now_s - HOP_UNTIL(w)) >= (int32_t)forget_s;
}

static int
hop_is(const struct status_hop_row *r, const struct hop_id *id)
{
    return __atomic_load_n(&r->addr[0], __ATOMIC_ACQUIRE) == id->a[0] &&
        __atomic_load_n(&r->addr[1], __ATOMIC_ACQUIRE) == id->a[1] &&
        __atomic_load_n(&r->port, __ATOMIC_ACQUIRE) == id->port;
}

/* hop_find - id's live row and its word in *w; NULL when none. */
static struct status_hop_row *
hop_find(struct status_page *sp, const struct hop_id *id, uint32_t now_s,
    uint32_t forget_s, uint64_t *w)
{
    struct status_hop_row *r;
    unsigned               i;

    for (i = 0; i < HOP_PROBE; i++) {
        r = hop_row(sp, id, i);
        *w = __atomic_load_n(&r->word, __ATOMIC_ACQUIRE);
        if (HOP_KEY(*w) == id->key && !hop_forgotten(*w, now_s, forget_s)
            && hop_is(r, id))
            return r;
    }
    return NULL;
}

/* hop_err_set - the last error into r (display only, see CONTRACT). */
static void
hop_err_set(struct status_hop_row *r, const char *err)
{
    char tmp[STATUS_HOP_ERR];

    util_strlcpy(tmp, err != NULL ? err : "", sizeof(tmp));
    memcpy(r->err, tmp, sizeof(tmp));
}

int
status_hop_check(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s, uint32_t probe_s, uint32_t forget_s, char *err,
    size_t errsz)
{
    struct status_hop_row *r;
    struct hop_id          id;
    uint64_t               w;

    if (hop_id(sa, &id) < 0)
        return STATUS_HOP_UP;
    for (;;) {
        if ((r = hop_find(sp, &id, now_s, forget_s, &w)) == NULL)
            return STATUS_HOP_UP;
        if ((int32_t)(HOP_UNTIL(w) - now_s) > 0) {
            if (err != NULL && errsz > 0) {
                char tmp[STATUS_HOP_ERR];

                memcpy(tmp, r->err, sizeof(tmp));
                tmp[sizeof(tmp) - 1] = '\0';
                util_strlcpy(err, tmp, errsz);
            }
            return STATUS_HOP_DOWN;     /* down, or a probe is out */
        }
        /* the down time (or a silent probe's claim) is over: this caller
         * is the one probe */
        if (__atomic_compare_exchange_n(&r->word, &w, HOP_WORD(id.key,
            HOP_FAILS(w) | HOP_PROBING, now_s + (probe_s ? probe_s : 1)),
            0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return STATUS_HOP_PROBE;
    }
}

/* hop_down_for - the down time after the n-th failure: down_s doubled
 * per failure after the first, at most max_s. */
static uint32_t
hop_down_for(uint32_t down_s, uint32_t max_s, unsigned n)
{
    uint64_t d = down_s;

    if (max_s > STATUS_HOP_MAX_S)
        max_s = STATUS_HOP_MAX_S;
    while (n-- > 1 && d < max_s)
        d *= 2;
    if (d > max_s)
        d = max_s;
    return d ? (uint32_t)d : 1;
}

unsigned
status_hop_down(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s, uint32_t down_s, uint32_t max_s, const char *err)
{
    struct status_hop_row *r, *reuse;
    struct hop_id          id;
    uint64_t               w, rw, neu;
    unsigned               i, n;

    if (hop_id(sa, &id) < 0)
        return 0;
    for (;;) {
        if ((r = hop_find(sp, &id, now_s, max_s, &w)) != NULL) {
            /* down already, not probed: a connection begun before the
             * mark; the episode does not grow per connection */
            if (!(HOP_FLAGS(w) & HOP_PROBING) &&
                (int32_t)(HOP_UNTIL(w) - now_s) > 0) {
                hop_err_set(r, err);
                return HOP_FAILS(w);
            }
            n = HOP_FAILS(w) < 0x7fu ? HOP_FAILS(w) + 1 : 0x7fu;
            neu = HOP_WORD(id.key, n, now_s + hop_down_for(down_s, max_s,
                n));
            if (!__atomic_compare_exchange_n(&r->word, &w, neu, 0,
                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                continue;
            hop_err_set(r, err);
            return n;
        }
        /* a new episode: a free row, else the one whose time ended first
         * (never a live one: that hop would come back up unprobed) */
        reuse = NULL;
        rw = 0;
        for (i = 0; i < HOP_PROBE; i++) {
            r = hop_row(sp, &id, i);
            w = __atomic_load_n(&r->word, __ATOMIC_ACQUIRE);
            if (hop_forgotten(w, now_s, max_s)) {
                reuse = r;
                rw = w;
                break;
            }
        }
        if (reuse == NULL)
            return 0;
        neu = HOP_WORD(id.key, 1, now_s + hop_down_for(down_s, max_s, 1));
        if (!__atomic_compare_exchange_n(&reuse->word, &rw, neu, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        __atomic_store_n(&reuse->addr[0], id.a[0], __ATOMIC_RELEASE);
        __atomic_store_n(&reuse->addr[1], id.a[1], __ATOMIC_RELEASE);
        __atomic_store_n(&reuse->port, id.port, __ATOMIC_RELEASE);
        __atomic_store_n(&reuse->since_s, now_s, __ATOMIC_RELEASE);
        hop_err_set(reuse, err);
        return 1;
    }
}

int
status_hop_up(struct status_page *sp, const struct sockaddr *sa)
{
    struct status_hop_row *r;
    struct hop_id          id;
    uint64_t               w;
    unsigned               i;
    int                    n = 0;

    if (hop_id(sa, &id) < 0)
        return 0;
    for (i = 0; i < HOP_PROBE; i++) {
        r = hop_row(sp, &id, i);
        w = __atomic_load_n(&r->word, __ATOMIC_ACQUIRE);
        if (w == 0 || HOP_KEY(w) != id.key || !hop_is(r, &id))
            continue;
        if (__atomic_compare_exchange_n(&r->word, &w, 0, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            n = 1;
    }
    return n;
}

size_t
status_hop_list(struct status_page *sp, uint32_t now_s, uint32_t forget_s,
    struct status_hop *out, size_t max)
{
    struct status_hop_row *r;
    struct status_hop     *h;
    uint64_t               w, a[2];
    uint8_t                b[16];
    uint16_t               port;
    size_t                 i, n = 0;

    for (i = 0; i < STATUS_HOP_SLOTS && n < max; i++) {
        r = &sp->hoptab[i];
        w = __atomic_load_n(&r->word, __ATOMIC_ACQUIRE);
        if (hop_forgotten(w, now_s, forget_s))
            continue;
        h = &out[n++];
        memset(h, 0, sizeof(*h));
        a[0] = __atomic_load_n(&r->addr[0], __ATOMIC_ACQUIRE);
        a[1] = __atomic_load_n(&r->addr[1], __ATOMIC_ACQUIRE);
        port = (uint16_t)__atomic_load_n(&r->port, __ATOMIC_ACQUIRE);
        memcpy(b, a, 16);
        if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)b)) {
            struct sockaddr_in *s4 = (struct sockaddr_in *)&h->addr;

            s4->sin_family = AF_INET;
            memcpy(&s4->sin_addr, b + 12, 4);
            s4->sin_port = port;
        } else {
            struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&h->addr;

            s6->sin6_family = AF_INET6;
            memcpy(s6->sin6_addr.s6_addr, b, 16);
            s6->sin6_port = port;
        }
        h->left_s = (int32_t)(HOP_UNTIL(w) - now_s);
        h->probing = (HOP_FLAGS(w) & HOP_PROBING) != 0;
        h->failures = HOP_FAILS(w);
        h->down_s = now_s - __atomic_load_n(&r->since_s, __ATOMIC_ACQUIRE);
        memcpy(h->err, r->err, sizeof(h->err));
        h->err[sizeof(h->err) - 1] = '\0';
    }
    return n;
}

size_t
status_hop_count(struct status_page *sp, uint32_t now_s, uint32_t forget_s)
{
    size_t i, n = 0;

    for (i = 0; i < STATUS_HOP_SLOTS; i++)
        n += !hop_forgotten(__atomic_load_n(&sp->hoptab[i].word,
            __ATOMIC_RELAXED), now_s, forget_s);
    return n;
}
