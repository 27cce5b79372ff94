/*
 * status_ban.c - limits.ban on the shared status page (see status.h).
 *
 * PURPOSE   Errors per client address, counted by every worker of the
 *           node into one table, and the bans they lead to (or that
 *           mtactl ban add makes, through the master), read at connect.
 * CONTRACT  One word per entry: a 20-bit key (from the address hash) << 44
 *           | a 12-bit count << 32 | 32 bits of time in seconds.  A count
 *           of BAN_MARK is a ban and its time the second it ends; any
 *           other count is an error count and its time that of the last
 *           error, live for window_s.  Count 0, an ended ban or a count
 *           past its window is a free word.  banaddr[i] holds the whole
 *           address of word i (IPv6 bytes, IPv4 as v4-mapped), stored by
 *           the writer that claimed the word, after its compare-and-swap:
 *           an entry counts for an address only when both match, so a key
 *           collision never bans another client (and a word whose address
 *           is not written yet is skipped by the others, which may then
 *           make a second word for the address: every count sums them).
 * FAILURE   A probe window holding only live bans counts nothing more.
 */
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/status.h"

#define BAN_KEY(w)   ((w) >> 44)
#define BAN_CNT(w)   ((unsigned)(((w) >> 32) & 0xfffULL))
#define BAN_TIME(w)  ((uint32_t)(w))
#define BAN_WORD(k, c, t) ((uint64_t)(k) << 44 | (uint64_t)(c) << 32 | \
                           (uint64_t)(uint32_t)(t))
#define BAN_MARK     0xfffu
#define BAN_PROBE    16

struct ban_id {
    uint64_t hash, key;
    uint64_t a[2];                  /* the address, as banaddr holds it */
};

struct ban_scan {
    int       banned;               /* a live ban of this address */
    unsigned  total;                /* its error count over its words */
    uint64_t *live, live_w;         /* its first counting word */
    uint64_t *reuse, reuse_w;       /* a free word, else the oldest count */
    int       reuse_live;
};

/* ban_id - sa's hash, key and address bytes; -1 when not IP. */
static int
ban_id(const struct sockaddr *sa, struct ban_id *id)
{
    uint8_t b[16] = { 0,0,0,0,0,0,0,0,0,0,0xff,0xff };

    if ((id->hash = status_addr_hash(sa)) == 0)
        return -1;
    if (sa->sa_family == AF_INET)
        memcpy(b + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    else
        memcpy(b, ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr, 16);
    memcpy(id->a, b, 16);
    id->key = (id->hash >> 28) & 0xfffffULL;
    if (id->key == 0)
        id->key = 1;
    return 0;
}

static uint64_t *
ban_word(struct status_page *sp, const struct ban_id *id, unsigned i)
{
    return &sp->bantab[(id->hash + i) & (STATUS_BAN_SLOTS - 1)];
}

static int
ban_addr_is(struct status_page *sp, const uint64_t *word,
    const struct ban_id *id)
{
    const uint64_t *a = sp->banaddr[word - sp->bantab];

    return __atomic_load_n(&a[0], __ATOMIC_ACQUIRE) == id->a[0] &&
        __atomic_load_n(&a[1], __ATOMIC_ACQUIRE) == id->a[1];
}

static void
ban_addr_set(struct status_page *sp, uint64_t *word, const struct ban_id *id)
{
    uint64_t *a = sp->banaddr[word - sp->bantab];

    __atomic_store_n(&a[0], id->a[0], __ATOMIC_RELEASE);
    __atomic_store_n(&a[1], id->a[1], __ATOMIC_RELEASE);
}

/* ban_live_ban - w is a ban that has not ended; ban_age - seconds since a
 * count's last error. */
static int
ban_live_ban(uint64_t w, uint32_t now_s)
{
    return BAN_CNT(w) == BAN_MARK && (int32_t)(BAN_TIME(w) - now_s) > 0;
}

static uint32_t
ban_age(uint64_t w, uint32_t now_s)
{
    return now_s - BAN_TIME(w);
}

/* ban_scan - the address's words in its probe window, one pass. */
static void
ban_scan(struct status_page *sp, const struct ban_id *id, uint32_t now_s,
    uint32_t window_s, struct ban_scan *r)
{
    uint64_t *word, w;
    unsigned  i, c;
    int       counting, mine;

    memset(r, 0, sizeof(*r));
    for (i = 0; i < BAN_PROBE; i++) {
        word = ban_word(sp, id, i);
        w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        c = BAN_CNT(w);
        counting = c > 0 && c != BAN_MARK && ban_age(w, now_s) <= window_s;
        mine = BAN_KEY(w) == id->key && (counting || ban_live_ban(w, now_s))
            && ban_addr_is(sp, word, id);
        if (mine && c == BAN_MARK) {
            r->banned = 1;
        } else if (mine) {
            r->total += c;
            if (r->live == NULL) {
                r->live = word;
                r->live_w = w;
            }
        } else if (!counting && !ban_live_ban(w, now_s)) {
            if (r->reuse == NULL || r->reuse_live) {
                r->reuse = word;
                r->reuse_w = w;
                r->reuse_live = 0;
            }
        } else if (counting && (r->reuse == NULL || (r->reuse_live &&
            ban_age(w, now_s) > ban_age(r->reuse_w, now_s)))) {
            r->reuse = word;        /* none free yet: the oldest count */
            r->reuse_w = w;
            r->reuse_live = 1;
        }
    }
}

int
status_ban_note(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s, uint32_t window_s, unsigned errors, uint32_t duration_s)
{
    struct ban_scan r;
    struct ban_id   id;
    uint64_t       *word, old, neu;
    unsigned        n;

    if (errors == 0 || ban_id(sa, &id) < 0)
        return 0;
    if (duration_s > STATUS_BAN_MAX_S)
        duration_s = STATUS_BAN_MAX_S;
    for (;;) {                      /* a failed CAS: another one succeeded */
        ban_scan(sp, &id, now_s, window_s, &r);
        if (r.banned)
            return 0;
        n = r.total + 1;
        word = r.live != NULL ? r.live : r.reuse;
        if (word == NULL)
            return 0;               /* only live bans here */
        old = r.live != NULL ? r.live_w : r.reuse_w;
        if (n >= errors)
            neu = BAN_WORD(id.key, BAN_MARK, now_s + duration_s);
        else
            neu = BAN_WORD(id.key, r.live != NULL ? BAN_CNT(old) + 1 : 1,
                now_s);
        if (BAN_CNT(neu) >= BAN_MARK && n < errors)
            neu = old;              /* a count that cannot grow stays */
        if (__atomic_compare_exchange_n(word, &old, neu, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            if (r.live == NULL)
                ban_addr_set(sp, word, &id);
            return n >= errors;
        }
    }
}

int
status_ban_check(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s)
{
    struct ban_id id;
    uint64_t     *word, w;
    unsigned      i;

    if (ban_id(sa, &id) < 0)
        return 0;
    for (i = 0; i < BAN_PROBE; i++) {
        word = ban_word(sp, &id, i);
        w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (BAN_KEY(w) == id.key && ban_live_ban(w, now_s) &&
            ban_addr_is(sp, word, &id))
            return 1;
    }
    return 0;
}

int
status_ban_add(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s, uint32_t duration_s)
{
    struct ban_scan r;
    struct ban_id   id;
    uint64_t       *word, old;

    if (ban_id(sa, &id) < 0)
        return -1;
    if (duration_s > STATUS_BAN_MAX_S)
        duration_s = STATUS_BAN_MAX_S;
    if (duration_s == 0)
        duration_s = 1;
    /* a ban or a count of the address first: one word for it */
    (void)status_ban_del(sp, sa, now_s);
    for (;;) {
        ban_scan(sp, &id, now_s, 0, &r);    /* any count may be reused */
        if ((word = r.reuse) == NULL)
            return -1;
        old = r.reuse_w;
        if (__atomic_compare_exchange_n(word, &old, BAN_WORD(id.key,
            BAN_MARK, now_s + duration_s), 0, __ATOMIC_ACQ_REL,
            __ATOMIC_ACQUIRE)) {
            ban_addr_set(sp, word, &id);    /* holds from here on */
            return 0;
        }
    }
}

int
status_ban_del(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s)
{
    struct ban_id id;
    uint64_t     *word, w;
    unsigned      i;
    int           n = 0;

    if (ban_id(sa, &id) < 0)
        return 0;
    for (i = 0; i < BAN_PROBE; i++) {
        word = ban_word(sp, &id, i);
        w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        if (w == 0 || BAN_KEY(w) != id.key || !ban_addr_is(sp, word, &id))
            continue;
        if (__atomic_compare_exchange_n(word, &w, 0, 0, __ATOMIC_ACQ_REL,
            __ATOMIC_ACQUIRE) && ban_live_ban(w, now_s))
            n++;
    }
    return n;
}

size_t
status_ban_list(struct status_page *sp, uint32_t now_s,
    struct status_ban *out, size_t max)
{
    struct sockaddr_in6 *s6;
    struct sockaddr_in  *s4;
    uint64_t             w, a[2];
    uint8_t              b[16];
    size_t               i, n = 0;

    for (i = 0; i < STATUS_BAN_SLOTS && n < max; i++) {
        w = __atomic_load_n(&sp->bantab[i], __ATOMIC_ACQUIRE);
        if (!ban_live_ban(w, now_s))
            continue;
        a[0] = __atomic_load_n(&sp->banaddr[i][0], __ATOMIC_ACQUIRE);
        a[1] = __atomic_load_n(&sp->banaddr[i][1], __ATOMIC_ACQUIRE);
        memcpy(b, a, 16);
        memset(&out[n], 0, sizeof(out[n]));
        if (IN6_IS_ADDR_V4MAPPED((const struct in6_addr *)b)) {
            s4 = (struct sockaddr_in *)&out[n].addr;
            s4->sin_family = AF_INET;
            memcpy(&s4->sin_addr, b + 12, 4);
        } else {
            s6 = (struct sockaddr_in6 *)&out[n].addr;
            s6->sin6_family = AF_INET6;
            memcpy(s6->sin6_addr.s6_addr, b, 16);
        }
        out[n++].left_s = BAN_TIME(w) - now_s;
    }
    return n;
}

size_t
status_ban_live(struct status_page *sp, uint32_t now_s)
{
    size_t i, n = 0;

    for (i = 0; i < STATUS_BAN_SLOTS; i++)
        n += ban_live_ban(__atomic_load_n(&sp->bantab[i], __ATOMIC_RELAXED),
            now_s);
    return n;
}
