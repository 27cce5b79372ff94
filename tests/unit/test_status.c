/*
 * test_status.c - common/status.c: daemon-wide admission counters in the
 * shared page: the total and per-address limits, v4-mapped addresses, and
 * exactness when several processes count at once.
 */
#include <arpa/inet.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "common/status.h"

static struct sockaddr_storage
addr(const char *ip)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        cr_assert_eq(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        cr_assert_eq(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
    }
    return ss;
}

#define SA(ss) ((const struct sockaddr *)&(ss))

Test(status, per_ip_limit_is_exact_and_released)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("192.0.2.7"), b = addr("192.0.2.8");
    int                      i;

    for (i = 0; i < 3; i++)
        cr_assert_eq(status_conn_acquire(sp, SA(a), 100, 3), 0);
    cr_assert_eq(status_conn_acquire(sp, SA(a), 100, 3), STATUS_EPERIP);
    cr_assert_eq(status_conn_acquire(sp, SA(b), 100, 3), 0, "other address");
    cr_assert_eq(status_conn_count(sp, SA(a)), 3);
    cr_assert_eq(sp->conns_all, 4, "a refused one is not counted");
    status_conn_release(sp, SA(a));
    cr_assert_eq(status_conn_acquire(sp, SA(a), 100, 3), 0);
    for (i = 0; i < 3; i++)
        status_conn_release(sp, SA(a));
    status_conn_release(sp, SA(b));
    cr_assert_eq(status_conn_count(sp, SA(a)), 0);
    cr_assert_eq(sp->conns_all, 0);
}

Test(status, total_limit_counts_every_address)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("10.0.0.1"), b = addr("2001:db8::1");

    cr_assert_eq(status_conn_acquire(sp, SA(a), 2, 10), 0);
    cr_assert_eq(status_conn_acquire(sp, SA(b), 2, 10), 0);
    cr_assert_eq(status_conn_acquire(sp, SA(b), 2, 10), STATUS_EFULL);
    cr_assert_eq(sp->conns_all, 2);
    cr_assert_eq(status_conn_count(sp, SA(b)), 1, "refused: not counted");
}

Test(status, v4_mapped_counts_as_the_v4_address)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  v4 = addr("127.0.0.2"), m = addr("::ffff:127.0.0.2");

    cr_assert_eq(status_conn_acquire(sp, SA(v4), 100, 2), 0);
    cr_assert_eq(status_conn_acquire(sp, SA(m), 100, 2), 0);
    cr_assert_eq(status_conn_acquire(sp, SA(m), 100, 2), STATUS_EPERIP);
    cr_assert_eq(status_conn_count(sp, SA(v4)), 2);
}

/* Four processes race for the same address's 50 places, 40 tries each:
 * exactly 50 get one.  Then they release and cycle many times: all zero. */
Test(status, concurrent_processes_never_pass_the_limit)
{
    struct status_page      *sp = status_create();
    struct sockaddr_storage  a = addr("198.51.100.9");
    uint64_t                *won = (uint64_t *)&sp->w[0].msgs_in;
    int                      i, st;

    for (i = 0; i < 4; i++) {
        if (fork() == 0) {
            int k, mine = 0;

            for (k = 0; k < 40; k++)
                if (status_conn_acquire(sp, SA(a), 1000, 50) == 0)
                    mine++;
            __atomic_fetch_add(won, (uint64_t)mine, __ATOMIC_RELAXED);
            for (k = 0; k < 20000; k++) {
                if (status_conn_acquire(sp, SA(a), 1000, 1000) == 0)
                    status_conn_release(sp, SA(a));
            }
            _exit(0);
        }
    }
    for (i = 0; i < 4; i++) {
        cr_assert_neq(wait(&st), -1);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    cr_assert_eq(*won, 50, "got %lu", (unsigned long)*won);
    cr_assert_eq(status_conn_count(sp, SA(a)), 50);
    cr_assert_eq(sp->conns_all, 50);
}
