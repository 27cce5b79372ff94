/*
 * tlskey.c - the shared TLS session-ticket keys (see tlskey.h).
 *
 * LAYOUT    Two slots: the current key and the previous one.  A rotation
 *           writes the new key over the previous slot (whose key has
 *           then been out of use for encryption for a whole period) and
 *           flips cur.  So a ticket made just before a rotation is
 *           accepted for one more period, one made just after for two.
 * LOCKING   One writer (the master), readers in every worker, in the
 *           middle of handshakes: a sequence lock.  The writer makes seq
 *           odd, writes, makes it even; a reader retries while seq was odd
 *           or changed under it.  Key bytes are copied with relaxed atomic
 *           64-bit loads and stores, so the race the lock detects is never
 *           undefined behaviour.  A rotation happens twice a day, so a
 *           reader practically never retries.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "common/tlskey.h"

#define TLSKEY_WORDS  ((sizeof(struct tlskey) + 7) / 8)

struct tlskey_slot {
    uint64_t w[TLSKEY_WORDS];
};

struct tlskey_ring {
    uint32_t           seq;         /* odd while the writer is at work */
    uint32_t           cur;         /* 0 or 1 */
    uint64_t           period_ms;
    uint64_t           made_ms;     /* when the current key was made */
    uint64_t           made;        /* keys made so far */
    struct tlskey_slot slot[2];
};

_Static_assert(sizeof(struct tlskey) % 8 == 0, "tlskey: whole words");


/* tlskey_store - one key into a slot, word by word (writer only). */
static void
tlskey_store(struct tlskey_slot *s, const struct tlskey *k)
{
    uint64_t w[TLSKEY_WORDS];
    size_t   i;

    memcpy(w, k, sizeof(*k));
    for (i = 0; i < TLSKEY_WORDS; i++)
        __atomic_store_n(&s->w[i], w[i], __ATOMIC_RELAXED);
    OPENSSL_cleanse(w, sizeof(w));
}


static void
tlskey_load(const struct tlskey_slot *s, struct tlskey *k)
{
    uint64_t w[TLSKEY_WORDS];
    size_t   i;

    for (i = 0; i < TLSKEY_WORDS; i++)
        w[i] = __atomic_load_n(&s->w[i], __ATOMIC_RELAXED);
    memcpy(k, w, sizeof(*k));
    OPENSSL_cleanse(w, sizeof(w));
}


/* tlskey_make - fresh random bytes for every part of a key. */
static int
tlskey_make(struct tlskey *k)
{
    if (RAND_bytes((unsigned char *)k, (int)sizeof(*k)) != 1)
        return -1;
    return 0;
}


/* tlskey_publish - the writer's half of the sequence lock: put k in the
 * slot that is not current and make it current. */
static void
tlskey_publish(struct tlskey_ring *r, const struct tlskey *k, uint64_t now_ms)
{
    uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);
    uint32_t next = r->cur ^ 1u;

    __atomic_store_n(&r->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    tlskey_store(&r->slot[next], k);
    __atomic_store_n(&r->cur, next, __ATOMIC_RELAXED);
    __atomic_store_n(&r->made_ms, now_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&r->made, r->made + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&r->seq, seq + 2, __ATOMIC_RELEASE);
}


struct tlskey_ring *
tlskey_create(uint64_t period_ms, uint64_t now_ms)
{
    struct tlskey_ring *r;
    struct tlskey       k;
    void               *p;
    int                 fd;

    /* A named memfd rather than an anonymous mapping: the page shows up
     * as /memfd:mtad-tlskeys in /proc/PID/maps, apart from the status
     * page.  The fd is not needed once mapped. */
    if ((fd = memfd_create("mtad-tlskeys", MFD_CLOEXEC)) < 0)
        return NULL;
    if (ftruncate(fd, (off_t)sizeof(*r)) < 0) {
        close(fd);
        return NULL;
    }
    p = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    r = p;                          /* zero-filled */
    r->period_ms = period_ms > 0 ? period_ms : TLSKEY_PERIOD_MS;
    if (tlskey_make(&k) < 0) {
        munmap(p, sizeof(*r));
        errno = EIO;
        return NULL;
    }
    /* Slot 1 stays all zero and unnamed until the first rotation: a
     * ticket whose name is 16 zero bytes is refused (see tlskey_find). */
    r->cur = 1;
    tlskey_publish(r, &k, now_ms);
    OPENSSL_cleanse(&k, sizeof(k));
    return r;
}


int
tlskey_rotate(struct tlskey_ring *r, uint64_t now_ms)
{
    struct tlskey k;

    if (now_ms - r->made_ms < r->period_ms)
        return 0;
    if (tlskey_make(&k) < 0)
        return -1;
    tlskey_publish(r, &k, now_ms);
    OPENSSL_cleanse(&k, sizeof(k));
    return 1;
}


void
tlskey_readonly(struct tlskey_ring *r)
{
    /* The page is exactly one mapping of sizeof(*r) bytes from mmap. */
    (void)mprotect(r, sizeof(*r), PROT_READ);
}


void
tlskey_forget(struct tlskey_ring *r)
{
    (void)munmap(r, sizeof(*r));
}


/* tlskey_read - the reader's half: slot cur (which 0) or the other
 * (which 1), consistent with one seq value. */
static void
tlskey_read(const struct tlskey_ring *r, unsigned which, struct tlskey *out)
{
    uint32_t s1, s2, cur;

    for (;;) {
        s1 = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1u)
            continue;
        cur = __atomic_load_n(&r->cur, __ATOMIC_RELAXED);
        tlskey_load(&r->slot[(cur ^ which) & 1u], out);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        s2 = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);
        if (s1 == s2)
            return;
    }
}


void
tlskey_current(const struct tlskey_ring *r, struct tlskey *out)
{
    tlskey_read(r, 0, out);
}


int
tlskey_find(const struct tlskey_ring *r,
    const unsigned char name[TLSKEY_NAME_LEN], struct tlskey *out)
{
    static const unsigned char unnamed[TLSKEY_NAME_LEN];
    unsigned                   which;

    if (CRYPTO_memcmp(name, unnamed, TLSKEY_NAME_LEN) == 0)
        return -1;                  /* the empty slot before a rotation */
    for (which = 0; which < 2; which++) {
        tlskey_read(r, which, out);
        if (CRYPTO_memcmp(out->name, name, TLSKEY_NAME_LEN) == 0)
            return (int)which;
    }
    tlskey_wipe(out);
    return -1;
}


uint64_t
tlskey_period_ms(const struct tlskey_ring *r)
{
    return r->period_ms;
}


uint64_t
tlskey_made(const struct tlskey_ring *r)
{
    return __atomic_load_n(&r->made, __ATOMIC_RELAXED);
}


void
tlskey_wipe(struct tlskey *k)
{
    OPENSSL_cleanse(k, sizeof(*k));
}
