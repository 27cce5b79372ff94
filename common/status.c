/*
 * status.c - the shared status page.
 *
 * PURPOSE   One anonymous MAP_SHARED mapping made by the master before the
 *           first fork, so every worker sees the same counters.
 * CONTRACT  status_create() returns a zeroed page; it is never unmapped
 *           (it lives as long as the process tree).
 *           Admission counts live here too, so max_connections and
 *           max_connections_per_ip hold for the daemon as a whole however
 *           the kernel spreads connections over the workers.  The total is
 *           the sum of the slots' conns_cur; per address, each worker slot
 *           has a table it alone writes (open addressing over 64-bit words:
 *           a 48-bit hash of the address << 16 | a count; a word with count
 *           0 is free), and a check sums that address over every slot.
 * FAILURE   Fatal: without the page the master cannot supervise anything.
 *           A full probe window (more distinct live addresses than the
 *           table holds near that hash) admits without a per-IP count.
 */
#include <string.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "common/util.h"
#include "common/status.h"

struct status_page *
status_create(void)
{
    void *p;

    p = mmap(NULL, sizeof(struct status_page), PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fatal("mmap status page");  /* fatal */
    return p;                       /* anonymous mappings are zero-filled */
}



#define STATUS_PROBE    64
#define STATUS_CNT_MASK 0xffffULL

/* status_addr_hash - 48-bit FNV-1a of the address bytes (v4-mapped v6 is
 * folded to v4, so one client counts once on either socket); never 0. */
uint64_t
status_addr_hash(const struct sockaddr *sa)
{
    static const uint8_t v4mapped[12] = { 0,0,0,0,0,0,0,0,0,0,0xff,0xff };
    const uint8_t *p;
    size_t         n, i;
    uint64_t       h = 14695981039346656037ULL;

    if (sa->sa_family == AF_INET) {
        p = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
        n = 4;
    } else if (sa->sa_family == AF_INET6) {
        p = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        n = 16;
        if (memcmp(p, v4mapped, 12) == 0) {
            p += 12;
            n = 4;
        }
    } else
        return 0;
    for (i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    h &= 0xffffffffffffULL;
    return h ? h : 1;
}

const struct sockaddr *
status_addr_group(const struct sockaddr *sa, unsigned v6_prefix,
    struct sockaddr_storage *out)
{
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
    uint8_t             *b;
    unsigned             i;

    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET) {
        memcpy(out, sa, sizeof(struct sockaddr_in));
    } else if (sa->sa_family == AF_INET6) {
        memcpy(out, sa, sizeof(struct sockaddr_in6));
        b = s6->sin6_addr.s6_addr;
        if (!IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && v6_prefix < 128) {
            if (v6_prefix % 8 != 0)
                b[v6_prefix / 8] &= (uint8_t)(0xff00u >> (v6_prefix % 8));
            for (i = (v6_prefix + 7) / 8; i < 16; i++)
                b[i] = 0;
        }
        s6->sin6_port = 0;
        s6->sin6_flowinfo = 0;
        s6->sin6_scope_id = 0;
    } else {
        out->ss_family = sa->sa_family;
    }
    return (const struct sockaddr *)out;
}


#define STATUS_WORD(sp, slot, key, i) \
    (&(sp)->iptab[(slot)][((size_t)(key) + (i)) & (STATUS_IP_SLOTS - 1)])

/* status_key_count - sessions of key across every slot. */
static uint32_t
status_key_count(const struct status_page *sp, uint64_t key)
{
    uint32_t n = 0;
    unsigned s;
    size_t   i;
    uint64_t w;

    for (s = 0; s < STATUS_MAX_WORKERS; s++) {
        if (__atomic_load_n(&sp->w[s].pid, __ATOMIC_RELAXED) == 0 &&
            __atomic_load_n(&sp->w[s].conns_cur, __ATOMIC_RELAXED) == 0)
            continue;                       /* empty slot: nothing counted */
        for (i = 0; i < STATUS_PROBE; i++) {
            w = __atomic_load_n(STATUS_WORD(sp, s, key, i), __ATOMIC_RELAXED);
            if (w == 0)
                break;                      /* never used: end of the run */
            if ((w >> 16) == key)
                n += (uint32_t)(w & STATUS_CNT_MASK);
        }
    }
    return n;
}

uint64_t
status_conns_all(const struct status_page *sp)
{
    uint64_t n = 0;

    for (unsigned s = 0; s < STATUS_MAX_WORKERS; s++)
        n += __atomic_load_n(&sp->w[s].conns_cur, __ATOMIC_RELAXED);
    return n;
}

int
status_conn_acquire(struct status_page *sp, unsigned slot,
    const struct sockaddr *sa, uint32_t max_total, uint32_t max_per_ip)
{
    uint64_t  key = status_addr_hash(sa), w, *word, *free_word = NULL;
    size_t    i;

    if (slot >= STATUS_MAX_WORKERS)
        return 0;
    if (status_conns_all(sp) >= max_total)
        return STATUS_EFULL;
    if (key == 0)
        return 0;
    if (status_key_count(sp, key) >= max_per_ip)
        return STATUS_EPERIP;
    for (i = 0; i < STATUS_PROBE; i++) {
        word = STATUS_WORD(sp, slot, key, i);
        w = *word;                          /* we are its only writer */
        if ((w >> 16) == key && (w & STATUS_CNT_MASK) < STATUS_CNT_MASK) {
            __atomic_store_n(word, w + 1, __ATOMIC_RELAXED);
            return 0;
        }
        if ((w & STATUS_CNT_MASK) == 0 && free_word == NULL)
            free_word = word;
        if (w == 0)
            break;
    }
    if (free_word != NULL)
        __atomic_store_n(free_word, key << 16 | 1, __ATOMIC_RELAXED);
    return 0;                               /* a full window: not counted */
}

void
status_conn_release(struct status_page *sp, unsigned slot,
    const struct sockaddr *sa)
{
    uint64_t key = status_addr_hash(sa), w, *word;
    size_t   i;

    if (key == 0 || slot >= STATUS_MAX_WORKERS)
        return;
    for (i = 0; i < STATUS_PROBE; i++) {
        word = STATUS_WORD(sp, slot, key, i);
        w = *word;
        if (w == 0)
            return;
        if ((w >> 16) == key && (w & STATUS_CNT_MASK) > 0) {
            __atomic_store_n(word, w - 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

uint32_t
status_conn_count(const struct status_page *sp, const struct sockaddr *sa)
{
    uint64_t key = status_addr_hash(sa);

    return key ? status_key_count(sp, key) : 0;
}

void
status_slot_clear(struct status_page *sp, unsigned slot)
{
    if (slot < STATUS_MAX_WORKERS)
        memset(sp->iptab[slot], 0, sizeof(sp->iptab[slot]));
    status_quota_clear_slot(sp, slot);  /* its queue counts, too */
}


/* --- AUTH failures ------------------------------------------------------
 *
 * One word per address: a 28-bit key (from the address hash) << 36 | a
 * 12-bit count << 24 | the 24-bit time of the last count in seconds (mod
 * 2^24, about 194 days).  Count 0, or a time older than the window, is a
 * free word.  Writers race only through compare-and-swap on one word; a
 * lost race rescans.  Two workers inserting the same new address at once
 * may make two words for it: every count sums all its words. */
#define SA_KEY(w)    ((w) >> 36)
#define SA_CNT(w)    (((w) >> 24) & 0xfffULL)
#define SA_TIME(w)   ((uint32_t)((w) & 0xffffffULL))
#define SA_WORD(k, c, t) ((uint64_t)(k) << 36 | (uint64_t)(c) << 24 | \
                          ((t) & 0xffffffULL))
#define SA_PROBE     16

struct status_auth_scan {
    uint64_t *live, live_w;         /* the first live word of the key */
    uint64_t *reuse, reuse_w;       /* the first free word, else the oldest */
    int       reuse_live;           /* reuse is the oldest live word */
    unsigned  total;                /* the key's count over its words */
};

static uint32_t
status_auth_age(uint64_t w, uint32_t now_s)
{
    return (now_s - SA_TIME(w)) & 0xffffffU;
}

/* status_auth_scan - the key's words in its probe window, one pass. */
static void
status_auth_scan(struct status_page *sp, uint64_t key, uint32_t now_s,
    uint32_t window_s, struct status_auth_scan *r)
{
    uint64_t *word, w;
    unsigned  i;
    int       live;

    memset(r, 0, sizeof(*r));
    for (i = 0; i < SA_PROBE; i++) {
        word = &sp->authtab[(key + i) & (STATUS_AUTH_SLOTS - 1)];
        w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        live = SA_CNT(w) > 0 && status_auth_age(w, now_s) <= window_s;
        if (live && SA_KEY(w) == key) {
            r->total += (unsigned)SA_CNT(w);
            if (r->live == NULL) {
                r->live = word;
                r->live_w = w;
            }
        } else if (!live) {
            if (r->reuse == NULL || r->reuse_live) {
                r->reuse = word;    /* the first free word */
                r->reuse_w = w;
                r->reuse_live = 0;
            }
        } else if (r->reuse == NULL || (r->reuse_live &&
            status_auth_age(w, now_s) > status_auth_age(r->reuse_w, now_s))) {
            r->reuse = word;        /* none free yet: the oldest */
            r->reuse_w = w;
            r->reuse_live = 1;
        }
    }
}

/* status_auth_key - 28 bits of the address hash, never 0. */
static uint64_t
status_auth_key(const struct sockaddr *sa)
{
    uint64_t k = status_addr_hash(sa);

    k = (k ^ (k >> 28)) & 0xfffffffULL;
    return k ? k : 1;
}

unsigned
status_auth_count(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s, uint32_t window_s)
{
    struct status_auth_scan r;

    if (status_addr_hash(sa) == 0)
        return 0;
    status_auth_scan(sp, status_auth_key(sa), now_s, window_s, &r);
    return r.total;
}

unsigned
status_auth_take(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s, uint32_t window_s, unsigned max)
{
    struct status_auth_scan r;
    uint64_t key, cnt, *word, old;

    if (status_addr_hash(sa) == 0)
        return 1;                   /* not an IP address: not counted */
    key = status_auth_key(sa);
    for (;;) {                      /* a failed CAS: another one succeeded */
        status_auth_scan(sp, key, now_s, window_s, &r);
        if (r.total >= max)
            return 0;
        if (r.live != NULL) {
            word = r.live;
            old = r.live_w;
            cnt = SA_CNT(old) < STATUS_AUTH_CNT_MAX ? SA_CNT(old) + 1
                                                    : SA_CNT(old);
        } else {
            word = r.reuse;         /* never NULL: SA_PROBE > 0 words */
            old = r.reuse_w;
            cnt = 1;
        }
        if (__atomic_compare_exchange_n(word, &old, SA_WORD(key, cnt, now_s),
            0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return r.total + 1;
    }
}

size_t
status_auth_list(struct status_page *sp, uint32_t now_s, uint32_t window_s,
    struct status_auth_key *out, size_t max)
{
    size_t   i, n = 0;
    uint64_t w;

    for (i = 0; i < STATUS_AUTH_SLOTS && n < max; i++) {
        w = __atomic_load_n(&sp->authtab[i], __ATOMIC_ACQUIRE);
        if (SA_CNT(w) == 0 || status_auth_age(w, now_s) > window_s)
            continue;
        out[n].key = (uint32_t)SA_KEY(w);
        out[n++].count = (unsigned)SA_CNT(w);
    }
    return n;
}

void
status_auth_add_key(struct status_page *sp, uint32_t key32, uint32_t now_s,
    uint32_t window_s, int n)
{
    struct status_auth_scan r;
    uint64_t key = key32 & 0xfffffffULL, *word, old;
    int64_t  cnt;

    if (key == 0 || n == 0)
        return;
    for (;;) {
        status_auth_scan(sp, key, now_s, window_s, &r);
        if (r.live != NULL) {
            word = r.live;
            old = r.live_w;
            cnt = (int64_t)SA_CNT(old) + n;
        } else if (n > 0) {
            word = r.reuse;
            old = r.reuse_w;
            cnt = n;
        } else
            return;
        cnt = cnt < 0 ? 0 : cnt > STATUS_AUTH_CNT_MAX ? STATUS_AUTH_CNT_MAX :
            cnt;
        if (__atomic_compare_exchange_n(word, &old,
            SA_WORD(key, (uint64_t)cnt, now_s), 0, __ATOMIC_ACQ_REL,
            __ATOMIC_ACQUIRE))
            return;
    }
}

void
status_auth_give(struct status_page *sp, const struct sockaddr *sa,
    uint32_t now_s, uint32_t window_s)
{
    struct status_auth_scan r;
    uint64_t key, old;

    if (status_addr_hash(sa) == 0)
        return;
    key = status_auth_key(sa);
    for (;;) {
        status_auth_scan(sp, key, now_s, window_s, &r);
        if (r.live == NULL)
            return;
        old = r.live_w;
        if (__atomic_compare_exchange_n(r.live, &old,
            SA_WORD(key, SA_CNT(old) - 1, SA_TIME(old)), 0, __ATOMIC_ACQ_REL,
            __ATOMIC_ACQUIRE))
            return;
    }
}
