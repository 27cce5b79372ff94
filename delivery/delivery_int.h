/*
 * deliver_int.h - the pure arithmetic of the delivery schedule, shared by
 * deliver.c and its unit test.  Nothing else includes this.
 *
 * CONTRACT  Times are wall-clock milliseconds.  retry_ms[0..nretry) is
 *           delivery.retry; after attempt n (1-based) the wait is
 *           retry_ms[min(n, nretry) - 1]: the last step repeats.
 */
#ifndef MTAD_DELIVER_INT_H
#define MTAD_DELIVER_INT_H

#include <stddef.h>
#include <stdint.h>

/* The wait after `attempts` failed attempts (0 is treated as 1). */
uint64_t deliver_retry_delay(const uint64_t *retry_ms, size_t nretry,
            unsigned attempts);
/* When to try next: now + the wait, but never later than the expiry
 * (arrival + max_queue; max_queue 0 = none) so that the last attempt
 * happens at expiry; and never before now. */
uint64_t deliver_next_retry(const uint64_t *retry_ms, size_t nretry,
            unsigned attempts, uint64_t now, uint64_t arrival,
            uint64_t max_queue);

#endif /* MTAD_DELIVER_INT_H */
