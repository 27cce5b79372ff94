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
};

#define STATUS_ADD(field, n) __atomic_fetch_add(&(field), (n), __ATOMIC_RELAXED)
#define STATUS_SUB(field, n) __atomic_fetch_sub(&(field), (n), __ATOMIC_RELAXED)

struct status_page *status_create(void);     /* fatal on failure */

#endif /* MTAD_STATUS_H */
