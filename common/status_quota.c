/*
 * status_quota.c - queue quotas' usage on the shared status page (see
 * status.h): one row per (kind, key) for the node.
 *
 * PURPOSE   Every worker counts the messages its queue index holds into
 *           its own column of the rows of their keys (delivery/quota.c);
 *           smtpd sums a key's columns at RCPT and DATA; the master lists
 *           and edits the rows (mtactl quota) and frees the idle ones.
 * CONTRACT  Open addressing over STATUS_QUOTA_SLOTS rows, probing
 *           QUOTA_PROBE rows from the key's hash.  A row is claimed by a
 *           compare-and-swap of its tag (0 -> hash | 1), then its key and
 *           limits are written and ready set to the tag: readers take a
 *           row only when tag == ready == the hash and the key matches,
 *           so a hash collision never mixes two keys.  Columns are written
 *           with relaxed atomic adds by their one writer; a row is freed
 *           (reclaim) only when every column is 0, it has no override and
 *           was claimed more than a few seconds ago: its tag goes to
 *           STATUS_QUOTA_FREEING first, the columns are checked again,
 *           then 0 (a writer holding counts in a row keeps it non-zero).
 * FAILURE   A full probe window: the key is not counted (the caller
 *           fails open: no quota for it).
 */
#include <string.h>

#include "common/status.h"

#define QUOTA_PROBE 32

static const char *const quota_kind_names[STATUS_QK_MAX] = {
    "sender_domain", "recipient_domain", "user", "network"
};

const char *
status_quota_kind_name(unsigned kind)
{
    return kind < STATUS_QK_MAX ? quota_kind_names[kind] : "?";
}


int
status_quota_kind(const char *name)
{
    int i;

    for (i = 0; i < STATUS_QK_MAX; i++)
        if (strcmp(name, quota_kind_names[i]) == 0)
            return i;
    return -1;
}


/* quota_hash - FNV-1a of kind and key, with bit 0 set (never 0 nor
 * STATUS_QUOTA_FREEING's value). */
static uint64_t
quota_hash(unsigned kind, const char *key, size_t klen)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ kind;
    size_t   i;

    for (i = 0; i < klen; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ULL;
    }
    h |= 1;
    return h == 1 ? 3 : h;
}


static int
quota_is(const struct status_quota_row *r, uint64_t h, unsigned kind,
    const char *key, size_t klen)
{
    return __atomic_load_n(&r->tag, __ATOMIC_ACQUIRE) == h &&
        __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE) == h &&
        r->kind == kind && r->klen == klen && memcmp(r->key, key, klen) == 0;
}


int
status_quota_row(struct status_page *sp, unsigned kind, const char *key,
    size_t klen, int claim, uint32_t now_s)
{
    struct status_quota_row *r;
    uint64_t                 h, zero;
    unsigned                 i, idx;

    if (klen == 0 || klen > STATUS_QUOTA_KEY_MAX || kind >= STATUS_QK_MAX)
        return -1;
    h = quota_hash(kind, key, klen);
    for (i = 0; i < QUOTA_PROBE; i++) {
        idx = (unsigned)((h + i) & (STATUS_QUOTA_SLOTS - 1));
        if (quota_is(&sp->quota[idx], h, kind, key, klen))
            return (int)idx;
    }
    if (!claim)
        return -1;
    for (i = 0; i < QUOTA_PROBE; i++) {
        idx = (unsigned)((h + i) & (STATUS_QUOTA_SLOTS - 1));
        r = &sp->quota[idx];
        zero = 0;
        if (!__atomic_compare_exchange_n(&r->tag, &zero, h, 0,
            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            continue;
        r->kind = kind;
        r->klen = (uint32_t)klen;
        memcpy(r->key, key, klen);
        r->key[klen] = '\0';
        r->lim_msgs = r->lim_bytes = 0;
        r->over = 0;
        r->claimed_s = now_s;
        __atomic_store_n(&r->ready, h, __ATOMIC_RELEASE);
        return (int)idx;
    }
    return -1;
}


void
status_quota_add(struct status_page *sp, int row, unsigned slot,
    int64_t msgs, int64_t bytes)
{
    struct status_quota_row *r;

    if (row < 0 || row >= STATUS_QUOTA_SLOTS || slot > STATUS_QUOTA_FLEET)
        return;
    r = &sp->quota[row];
    __atomic_fetch_add(&r->msgs[slot], msgs, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&r->bytes[slot], bytes, __ATOMIC_SEQ_CST);
}


/* quota_row_sum - the columns of row r. */
static void
quota_row_sum(const struct status_quota_row *r, int64_t *msgs,
    int64_t *bytes)
{
    unsigned s;

    *msgs = *bytes = 0;
    for (s = 0; s <= STATUS_QUOTA_FLEET; s++) {
        *msgs += __atomic_load_n(&r->msgs[s], __ATOMIC_SEQ_CST);
        *bytes += __atomic_load_n(&r->bytes[s], __ATOMIC_SEQ_CST);
    }
}


void
status_quota_sum(struct status_page *sp, unsigned kind, const char *key,
    size_t klen, struct status_quota_use *u, int *row)
{
    const struct status_quota_row *r;
    uint64_t                       h;
    int64_t                        m, b;
    unsigned                       i, idx;

    memset(u, 0, sizeof(*u));
    *row = -1;
    if (klen == 0 || klen > STATUS_QUOTA_KEY_MAX || kind >= STATUS_QK_MAX)
        return;
    h = quota_hash(kind, key, klen);
    for (i = 0; i < QUOTA_PROBE; i++) {
        idx = (unsigned)((h + i) & (STATUS_QUOTA_SLOTS - 1));
        r = &sp->quota[idx];
        if (!quota_is(r, h, kind, key, klen))
            continue;
        quota_row_sum(r, &m, &b);
        u->msgs += m;
        u->bytes += b;
        if (*row < 0) {
            *row = (int)idx;
            u->lim_msgs = __atomic_load_n(&r->lim_msgs, __ATOMIC_RELAXED);
            u->lim_bytes = __atomic_load_n(&r->lim_bytes, __ATOMIC_RELAXED);
        }
    }
}


void
status_quota_clear_slot(struct status_page *sp, unsigned slot)
{
    size_t i;

    if (slot > STATUS_QUOTA_FLEET)
        return;
    for (i = 0; i < STATUS_QUOTA_SLOTS; i++) {
        if (__atomic_load_n(&sp->quota[i].tag, __ATOMIC_RELAXED) == 0)
            continue;
        __atomic_store_n(&sp->quota[i].msgs[slot], 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&sp->quota[i].bytes[slot], 0, __ATOMIC_SEQ_CST);
    }
}


void
status_quota_local(struct status_page *sp, int row, int64_t *msgs,
    int64_t *bytes)
{
    const struct status_quota_row *r = &sp->quota[row];
    unsigned                       s;

    *msgs = *bytes = 0;
    for (s = 0; s < STATUS_MAX_WORKERS; s++) {
        *msgs += __atomic_load_n(&r->msgs[s], __ATOMIC_SEQ_CST);
        *bytes += __atomic_load_n(&r->bytes[s], __ATOMIC_SEQ_CST);
    }
}


void
status_quota_set_fleet(struct status_page *sp, int row, int64_t msgs,
    int64_t bytes)
{
    struct status_quota_row *r = &sp->quota[row];

    __atomic_store_n(&r->msgs[STATUS_QUOTA_FLEET], msgs, __ATOMIC_SEQ_CST);
    __atomic_store_n(&r->bytes[STATUS_QUOTA_FLEET], bytes, __ATOMIC_SEQ_CST);
}


size_t
status_quota_reclaim(struct status_page *sp, uint32_t now_s,
    uint32_t min_age_s)
{
    struct status_quota_row *r;
    uint64_t                 tag;
    int64_t                  m, b;
    size_t                   i, n = 0;

    for (i = 0; i < STATUS_QUOTA_SLOTS; i++) {
        r = &sp->quota[i];
        tag = __atomic_load_n(&r->tag, __ATOMIC_ACQUIRE);
        if (tag == 0 || tag == STATUS_QUOTA_FREEING ||
            __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE) != tag ||
            r->lim_msgs != 0 || r->lim_bytes != 0 ||
            now_s - r->claimed_s < min_age_s)
            continue;
        quota_row_sum(r, &m, &b);
        if (m != 0 || b != 0)
            continue;
        if (!__atomic_compare_exchange_n(&r->tag, &tag,
            (uint64_t)STATUS_QUOTA_FREEING, 0, __ATOMIC_SEQ_CST,
            __ATOMIC_SEQ_CST))
            continue;
        quota_row_sum(r, &m, &b);
        if (m != 0 || b != 0) {     /* counted in meanwhile: keep it */
            __atomic_store_n(&r->tag, tag, __ATOMIC_SEQ_CST);
            continue;
        }
        __atomic_store_n(&r->ready, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&r->tag, 0, __ATOMIC_SEQ_CST);
        n++;
    }
    return n;
}


int
status_quota_take(struct status_page *sp, unsigned kind, const char *key,
    size_t klen, unsigned slot, int64_t msgs, int64_t bytes, uint32_t now_s)
{
    uint64_t h = quota_hash(kind, key, klen);
    int      row, tries;

    for (tries = 0; tries < 4; tries++) {
        if ((row = status_quota_row(sp, kind, key, klen, 1, now_s)) < 0)
            return -1;
        status_quota_add(sp, row, slot, msgs, bytes);
        if (quota_is(&sp->quota[row], h, kind, key, klen))
            return row;             /* held from here on: not freed */
        status_quota_add(sp, row, slot, -msgs, -bytes);  /* freed under us */
    }
    return -1;
}
