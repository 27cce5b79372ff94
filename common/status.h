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
#define STATUS_IP_SLOTS    65536    /* power of two; 512 KiB, touched lazily */

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
};

struct status_page {
    uint64_t master_started_ms;
    uint32_t generation;
    uint32_t load_x100;             /* 1-minute load average * 100 */
    uint32_t throttle;              /* 1 = workers stop accepting */
    uint32_t nworkers;
    struct status_worker w[STATUS_MAX_WORKERS];
    /* Admission, shared by every worker of every generation: */
    uint64_t conns_all;             /* current inbound sessions */
    uint64_t iptab[STATUS_IP_SLOTS];/* per client address: 48-bit key hash
                                       << 16 | count; see status.c */
};

#define STATUS_ADD(field, n) __atomic_fetch_add(&(field), (n), __ATOMIC_RELAXED)
#define STATUS_SUB(field, n) __atomic_fetch_sub(&(field), (n), __ATOMIC_RELAXED)

struct status_page *status_create(void);     /* fatal on failure */

/* Admission: count one more inbound session from sa, unless that passes
 * max_total (daemon-wide) or max_per_ip.  0 ok, STATUS_EFULL,
 * STATUS_EPERIP (nothing counted then).  Lock-free (CAS on shared words),
 * exact up to 48-bit hash collisions of addresses.  Every 0 return must be
 * paired with one status_conn_release() for the same address. */
#define STATUS_EFULL   (-1)
#define STATUS_EPERIP  (-2)
struct sockaddr;
int     status_conn_acquire(struct status_page *sp, const struct sockaddr *sa,
            uint32_t max_total, uint32_t max_per_ip);
void    status_conn_release(struct status_page *sp, const struct sockaddr *sa);
/* Current sessions from sa's address, daemon-wide (for tests and status). */
uint32_t status_conn_count(const struct status_page *sp,
            const struct sockaddr *sa);

#endif /* MTAD_STATUS_H */
