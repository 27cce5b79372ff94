/*
 * status.c - the shared status page.
 *
 * PURPOSE   One anonymous MAP_SHARED mapping made by the master before the
 *           first fork, so every worker sees the same counters.
 * CONTRACT  status_create() returns a zeroed page; it is never unmapped
 *           (it lives as long as the process tree).
 *           Admission counters live here too, so max_connections and
 *           max_connections_per_ip hold for the daemon as a whole however
 *           the kernel spreads connections over the workers.  The per-IP
 *           table is open addressing over 64-bit words, each a 48-bit hash
 *           of the address and a 16-bit count, changed only by CAS: a word
 *           whose count is 0 is free for any address, so claiming a slot and
 *           counting in it is one atomic step and no lock is needed.
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

/* status_ip_key - 48-bit FNV-1a of the address bytes (v4-mapped v6 is
 * folded to v4, so one client counts once on either socket); never 0. */
static uint64_t
status_ip_key(const struct sockaddr *sa)
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

static int
status_ip_acquire(struct status_page *sp, uint64_t key, uint32_t max)
{
    size_t   base = (size_t)key & (STATUS_IP_SLOTS - 1), i;
    uint64_t w, want;

again:
    /* Our own slot first: a live one anywhere in the window. */
    for (i = 0; i < STATUS_PROBE; i++) {
        uint64_t *slot = &sp->iptab[(base + i) & (STATUS_IP_SLOTS - 1)];

        w = __atomic_load_n(slot, __ATOMIC_RELAXED);
        if ((w >> 16) != key || (w & STATUS_CNT_MASK) == 0)
            continue;
        if ((w & STATUS_CNT_MASK) >= max || (w & STATUS_CNT_MASK) == 0xffff)
            return STATUS_EPERIP;
        if (__atomic_compare_exchange_n(slot, &w, w + 1, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return 0;
        goto again;                         /* raced: look again */
    }
    /* None live: claim the first free word (count 0). */
    for (i = 0; i < STATUS_PROBE; i++) {
        uint64_t *slot = &sp->iptab[(base + i) & (STATUS_IP_SLOTS - 1)];

        w = __atomic_load_n(slot, __ATOMIC_RELAXED);
        if ((w & STATUS_CNT_MASK) != 0)
            continue;
        if (max == 0)
            return STATUS_EPERIP;
        want = key << 16 | 1;
        if (__atomic_compare_exchange_n(slot, &w, want, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return 0;
        goto again;
    }
    return 1;                               /* window full: not counted */
}

int
status_conn_acquire(struct status_page *sp, const struct sockaddr *sa,
    uint32_t max_total, uint32_t max_per_ip)
{
    uint64_t key = status_ip_key(sa);
    int      rc;

    if (__atomic_add_fetch(&sp->conns_all, 1, __ATOMIC_ACQ_REL) > max_total) {
        __atomic_sub_fetch(&sp->conns_all, 1, __ATOMIC_ACQ_REL);
        return STATUS_EFULL;
    }
    if (key == 0)
        return 0;
    if ((rc = status_ip_acquire(sp, key, max_per_ip)) < 0) {
        __atomic_sub_fetch(&sp->conns_all, 1, __ATOMIC_ACQ_REL);
        return rc;
    }
    return 0;
}

void
status_conn_release(struct status_page *sp, const struct sockaddr *sa)
{
    uint64_t key = status_ip_key(sa), w;
    size_t   base, i;

    __atomic_sub_fetch(&sp->conns_all, 1, __ATOMIC_ACQ_REL);
    if (key == 0)
        return;
    base = (size_t)key & (STATUS_IP_SLOTS - 1);
again:
    for (i = 0; i < STATUS_PROBE; i++) {
        uint64_t *slot = &sp->iptab[(base + i) & (STATUS_IP_SLOTS - 1)];

        w = __atomic_load_n(slot, __ATOMIC_RELAXED);
        if ((w >> 16) != key || (w & STATUS_CNT_MASK) == 0)
            continue;
        if (!__atomic_compare_exchange_n(slot, &w, w - 1, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            goto again;
        return;
    }
    /* Not found: it was admitted with a full window and never counted. */
}

uint32_t
status_conn_count(const struct status_page *sp, const struct sockaddr *sa)
{
    uint64_t key = status_ip_key(sa), w;
    size_t   base = (size_t)key & (STATUS_IP_SLOTS - 1), i;
    uint32_t n = 0;

    for (i = 0; key != 0 && i < STATUS_PROBE; i++) {
        w = __atomic_load_n(&sp->iptab[(base + i) & (STATUS_IP_SLOTS - 1)],
            __ATOMIC_RELAXED);
        if ((w >> 16) == key)
            n += (uint32_t)(w & STATUS_CNT_MASK);
    }
    return n;
}
