/*
 * status.h - the shared status page: one anonymous MAP_SHARED mapping made
 * by the master before the first fork.
 *
 * CONTRACT  Each worker slot has one writer (the worker in it); counters are
 *           updated with relaxed atomics (STATUS_ADD).  The master writes
 *           load_x100 and throttle every few seconds; workers only read them.
 *           Nobody on a hot path calls getloadavg() or reads /proc.
 */
#ifndef MTAD_STATUS_H
#define MTAD_STATUS_H

#include <stdint.h>
#include <sys/types.h>

#define STATUS_MAX_WORKERS 128
#define STATUS_IP_SLOTS    16384    /* per worker slot, power of two; 128 KiB,
                                       touched lazily */

struct status_worker {
    int32_t  pid;                   /* 0 = free slot */
    uint32_t generation;
    uint64_t started_ms;            /* wall clock */
    uint64_t conns_cur;
    uint64_t conns_total;
    uint64_t msgs_in;               /* accepted (250 after the dot) */
    uint64_t msgs_out;              /* recipients delivered */
    uint64_t msgs_deferred;
    uint64_t msgs_bounced;
    uint64_t bytes_in;
    uint64_t errors;
    uint64_t log_dropped;
    uint64_t proxy_refused;         /* peers not in a listener's proxy_from */
    uint64_t proxy_bad;             /* bad, short or slow PROXY headers */
};

struct status_page {
    uint64_t master_started_ms;
    uint32_t generation;
    uint32_t load_x100;             /* 1-minute load average * 100 */
    uint32_t throttle;              /* 1 = workers stop accepting */
    uint32_t nworkers;
    struct status_worker w[STATUS_MAX_WORKERS];
    /* Admission: sessions per client address, one table per worker slot
     * (its only writer), each word a 48-bit hash of the address << 16 | a
     * count; see status.c.  Cleared with the slot when its worker dies. */
    uint64_t iptab[STATUS_MAX_WORKERS][STATUS_IP_SLOTS];
};

#define STATUS_ADD(field, n) __atomic_fetch_add(&(field), (n), __ATOMIC_RELAXED)
#define STATUS_SUB(field, n) __atomic_fetch_sub(&(field), (n), __ATOMIC_RELAXED)

struct status_page *status_create(void);     /* fatal on failure */

/* Admission, daemon-wide: the sum over every worker slot (of every
 * generation).  status_conn_acquire() counts one more inbound session from
 * sa in slot's table unless that passes max_total or max_per_ip: 0 ok,
 * STATUS_EFULL, STATUS_EPERIP (nothing counted then).  Each slot has one
 * writer, so no lock; two workers admitting the same address at the same
 * instant may pass max_per_ip by at most the number of workers less one.
 * Every 0 return is paired with one status_conn_release() in the same slot,
 * or the slot is cleared with status_slot_clear() when its worker is gone
 * (so a killed worker leaves no phantom sessions behind). */
#define STATUS_EFULL   (-1)
#define STATUS_EPERIP  (-2)
struct sockaddr;
struct sockaddr_storage;
/* status_addr_group - the address sa is counted as: an IPv6 address (not
 * v4-mapped) with the bits past v6_prefix cleared, so that one client's
 * /64 (limits.ipv6_prefix) is one client; anything else as is.  Copies into
 * *out and returns it, as a struct sockaddr. */
const struct sockaddr *status_addr_group(const struct sockaddr *sa,
            unsigned v6_prefix, struct sockaddr_storage *out);
int     status_conn_acquire(struct status_page *sp, unsigned slot,
            const struct sockaddr *sa, uint32_t max_total,
            uint32_t max_per_ip);
void    status_conn_release(struct status_page *sp, unsigned slot,
            const struct sockaddr *sa);
uint32_t status_conn_count(const struct status_page *sp,
            const struct sockaddr *sa);
uint64_t status_conns_all(const struct status_page *sp);
void    status_slot_clear(struct status_page *sp, unsigned slot);

#endif /* MTAD_STATUS_H */
