/*
 * test_sandbox_threads.c - the worker's seccomp filter, its threads and
 * its sockets: the group commit's helper thread (spool/spool_sync.c) is
 * made inside the filter, so a thread must start and end under it, while
 * a new process (fork: clone without CLONE_THREAD) stays forbidden; new
 * sockets are IPv4 and IPv6 only.  Each test runs in
 * its own process (Criterion), which the filter then holds.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <criterion/criterion.h>

#include "common/sandbox.h"

static void *
t_thread(void *arg)
{
    return arg;
}


static void
t_filter(void)
{
    char err[256];

    cr_assert_eq(sandbox_seccomp(SANDBOX_WORKER, err, sizeof(err)), 0,
        "%s", err);
}


Test(sandbox_threads, a_thread_starts_and_ends_under_the_worker_filter)
{
    pthread_t t;
    void     *back = NULL;
    int       mark = 7;

    t_filter();
    cr_assert_eq(pthread_create(&t, NULL, t_thread, &mark), 0);
    cr_assert_eq(pthread_join(t, &back), 0);
    cr_assert_eq(back, &mark);
}


#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1                        /* its runtime may clone: allowed */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif

#ifndef T_ASAN
Test(sandbox_threads, a_new_process_is_killed, .signal = SIGSYS)
{
    t_filter();
    if (fork() == 0)                    /* clone(SIGCHLD): not a thread */
        _exit(0);
    cr_assert_fail("fork() returned under the worker filter");
}
#endif


Test(sandbox_threads, clone3_answers_enosys)
{
    long rc;

    t_filter();
    /* ENOSYS, not a kill: glibc then falls back to clone(), whose flags
     * the filter can check (clone3 passes them in memory) */
    errno = 0;
    rc = syscall(SYS_clone3, NULL, 0);
    cr_assert_eq(rc, -1);
    cr_assert_eq(errno, ENOSYS, "errno %d", errno);
}


/* Sockets: a worker makes TCP and UDP sockets over IPv4 and IPv6 after
 * its start, never a unix one (it could reach any socket on the host). */
Test(sandbox_threads, only_inet_sockets_can_be_made)
{
    int fd;

    t_filter();
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "AF_INET: %s", strerror(errno));
    close(fd);
    fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    cr_assert(fd >= 0 || errno == EAFNOSUPPORT, "AF_INET6: %s",
        strerror(errno));
    if (fd >= 0)
        close(fd);
    errno = 0;
    cr_assert_eq(socket(AF_UNIX, SOCK_STREAM, 0), -1);
    cr_assert_eq(errno, EACCES, "AF_UNIX stream: errno %d", errno);
    errno = 0;
    cr_assert_eq(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), -1);
    cr_assert_eq(errno, EACCES, "AF_UNIX datagram: errno %d", errno);
    errno = 0;
    cr_assert_eq(socket(AF_NETLINK, SOCK_RAW, 0), -1);
    cr_assert_eq(errno, EACCES, "AF_NETLINK: errno %d", errno);
}


#ifndef T_ASAN
Test(sandbox_threads, a_packet_socket_is_killed, .signal = SIGSYS)
{
    t_filter();
    (void)socket(AF_PACKET, SOCK_RAW, 0);
    cr_assert_fail("socket(AF_PACKET) returned under the worker filter");
}
#endif
