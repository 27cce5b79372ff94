/*
 * sandbox.c - seccomp filters (libseccomp) and Landlock rules; see
 * sandbox.h and docs/SECURITY.md.
 *
 * The lists below are the whole policy: a worker, the log process and the
 * master each get one table.  The workers' and logd's are allow-lists
 * (anything else kills the process); the master's is a deny-list of calls
 * it never makes and an attacker would want (it forks, reloads
 * configurations from any path and runs as root, so an allow-list would
 * hold nearly everything).  Children inherit the master's filter and add
 * their own on top.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/landlock.h>
#include <sys/ioctl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <seccomp.h>

#include "common/util.h"
#include "common/sandbox.h"

/* ---- seccomp ------------------------------------------------------------ */

/* A worker: one epoll loop with inbound SMTP, outbound SMTP (soon DNS over
 * UDP and TLS), the spool and Maildir deliveries. */
static const int sandbox_worker_calls[] = {
    /* the loop and its sockets */
    SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(epoll_ctl),
    SCMP_SYS(poll), SCMP_SYS(ppoll),
    SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
    SCMP_SYS(close), SCMP_SYS(accept4), SCMP_SYS(accept),
    SCMP_SYS(recvfrom), SCMP_SYS(sendto), SCMP_SYS(recvmsg),
    SCMP_SYS(sendmsg), SCMP_SYS(sendmmsg), SCMP_SYS(recvmmsg),
    SCMP_SYS(shutdown), SCMP_SYS(getsockname), SCMP_SYS(getpeername),
    SCMP_SYS(sendfile),             /* spooled body -> next hop */
    /* outbound: next hops, DNS (UDP), TLS options; the MTA-STS fetch
     * (libcurl, tlspol/sts.c) needs nothing more: its multi handle and
     * wake-up socketpair are made before the filter, its resolver never
     * runs (CURLOPT_RESOLVE), CURLOPT_NOSIGNAL keeps it off sigaction
     * but for SIGPIPE in its connection cache (sandbox_allow_sigpipe_action) */
    SCMP_SYS(connect), SCMP_SYS(getsockopt), SCMP_SYS(setsockopt),
    /* egress sources: the local address before connect (no listen, so a
     * bound socket can only go out; Landlock allows port 0 only) */
    SCMP_SYS(bind),
    /* socket: only AF_INET and AF_INET6 (sandbox_allow_sockets) */
    /* spool and Maildir files (Landlock limits where) */
    SCMP_SYS(openat), SCMP_SYS(open), SCMP_SYS(fstat), SCMP_SYS(newfstatat),
    SCMP_SYS(stat), SCMP_SYS(lstat), SCMP_SYS(statx), SCMP_SYS(fstatfs),
    SCMP_SYS(lseek), SCMP_SYS(pread64), SCMP_SYS(pwrite64),
    SCMP_SYS(pwritev), SCMP_SYS(getdents64), SCMP_SYS(rename),
    SCMP_SYS(renameat), SCMP_SYS(renameat2), SCMP_SYS(unlink),
    SCMP_SYS(unlinkat),
    SCMP_SYS(mkdir), SCMP_SYS(mkdirat), SCMP_SYS(link), SCMP_SYS(linkat),
    SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(syncfs), SCMP_SYS(flock),
    SCMP_SYS(fchmod), SCMP_SYS(fchmodat), SCMP_SYS(ftruncate), SCMP_SYS(fcntl), SCMP_SYS(dup),
    SCMP_SYS(utimensat),            /* the schedule in the queue file's
                                     * mtime (spool_sched_peek) */
    SCMP_SYS(dup3), SCMP_SYS(fadvise64),
    /* memory */
    SCMP_SYS(brk), SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap),
    SCMP_SYS(mprotect), SCMP_SYS(madvise),
    /* time, randomness (OpenSSL, queue ids), identity */
    SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday), SCMP_SYS(time),
    SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(getrandom),
    SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(getuid), SCMP_SYS(geteuid),
    SCMP_SYS(getgid), SCMP_SYS(getegid), SCMP_SYS(uname), SCMP_SYS(sysinfo),
    /* leaving, signals, threads of libraries */
    SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(rt_sigreturn),
    SCMP_SYS(rt_sigprocmask), SCMP_SYS(restart_syscall), SCMP_SYS(futex),
    SCMP_SYS(sched_yield),
};

/* The log process: records in, batches out to an fd it was given. */
static const int sandbox_logd_calls[] = {
    SCMP_SYS(epoll_create1), SCMP_SYS(epoll_ctl), SCMP_SYS(epoll_wait),
    SCMP_SYS(epoll_pwait), SCMP_SYS(read), SCMP_SYS(write),
    SCMP_SYS(writev), SCMP_SYS(recvfrom), SCMP_SYS(recvmsg),
    SCMP_SYS(recvmmsg), SCMP_SYS(sendto), SCMP_SYS(close), SCMP_SYS(fstat),
    SCMP_SYS(sendmsg),              /* its channel's "pong" (common/chan.c) */
    SCMP_SYS(newfstatat), SCMP_SYS(openat), SCMP_SYS(lseek),
    SCMP_SYS(fcntl), SCMP_SYS(fsync), SCMP_SYS(fdatasync),
    SCMP_SYS(signalfd4), SCMP_SYS(brk), SCMP_SYS(mmap), SCMP_SYS(munmap),
    SCMP_SYS(mremap), SCMP_SYS(mprotect), SCMP_SYS(madvise),
    SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday), SCMP_SYS(time),
    SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(getpid),
    SCMP_SYS(gettid), SCMP_SYS(exit), SCMP_SYS(exit_group),
    SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask),
    SCMP_SYS(restart_syscall), SCMP_SYS(futex), SCMP_SYS(sched_yield),
};

/* What the sanitizers' runtime calls on its own (ASan builds only). */
static const int sandbox_asan_calls[] = {
    SCMP_SYS(sigaltstack), SCMP_SYS(rt_sigaction), SCMP_SYS(prctl),
    SCMP_SYS(readlink), SCMP_SYS(readlinkat), SCMP_SYS(getrlimit),
    SCMP_SYS(prlimit64), SCMP_SYS(sched_getaffinity), SCMP_SYS(getppid),
    SCMP_SYS(pipe2), SCMP_SYS(wait4), SCMP_SYS(clone), SCMP_SYS(kill),
};

/* Never made by the master (nor, through inheritance, by any child). */
static const int sandbox_master_denied[] = {
    SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(ptrace),
    SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev),
    SCMP_SYS(kexec_load), SCMP_SYS(kexec_file_load), SCMP_SYS(init_module),
    SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(mount),
    SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(swapon),
    SCMP_SYS(swapoff), SCMP_SYS(reboot), SCMP_SYS(bpf),
    SCMP_SYS(perf_event_open), SCMP_SYS(userfaultfd),
    SCMP_SYS(open_by_handle_at), SCMP_SYS(name_to_handle_at), SCMP_SYS(iopl),
    SCMP_SYS(ioperm), SCMP_SYS(acct), SCMP_SYS(settimeofday),
    SCMP_SYS(clock_settime), SCMP_SYS(clock_adjtime), SCMP_SYS(adjtimex),
    SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
    SCMP_SYS(unshare), SCMP_SYS(setns), SCMP_SYS(fanotify_init),
    SCMP_SYS(quotactl), SCMP_SYS(syslog), SCMP_SYS(vhangup),
    SCMP_SYS(sethostname), SCMP_SYS(setdomainname), SCMP_SYS(kcmp),
    SCMP_SYS(io_uring_setup), SCMP_SYS(io_uring_enter),
    SCMP_SYS(io_uring_register), SCMP_SYS(personality),
};

#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANDBOX_ASAN 1
#endif
#endif

static int
sandbox_allow(scmp_filter_ctx ctx, const int *calls, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (calls[i] >= 0 &&
            seccomp_rule_add(ctx, SCMP_ACT_ALLOW, calls[i], 0) < 0)
            return -1;
    return 0;
}

/* ioctl only to ask how much is readable or to set non-blocking mode
 * (glibc's resolver, libraries): no terminal, device or socket tricks. */
static int
sandbox_allow_ioctl(scmp_filter_ctx ctx)
{
    /* written out: SCMP_A1() leaves datum_b to the compiler, which
     * clang's -Wmissing-field-initializers (the fuzz build) refuses */
    struct scmp_arg_cmp fionread = { .arg = 1, .op = SCMP_CMP_EQ,
        .datum_a = FIONREAD, .datum_b = 0 };
    struct scmp_arg_cmp fionbio = { .arg = 1, .op = SCMP_CMP_EQ,
        .datum_a = FIONBIO, .datum_b = 0 };

    if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
        fionread) < 0)
        return -1;
    return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
        fionbio);
}

/* New sockets: TCP and UDP over IPv4 and IPv6 only (next hops, DNS, the
 * MTA-STS fetch).  Every unix socket a worker uses (the channel, the log
 * socket, a queue listing's stream, Dovecot's auth socket: the master
 * connects it, master/auth_connect.c) is made before the filter or passed
 * in; a new one could connect to any world-writable socket on the host,
 * which Landlock does not cover.  AF_UNIX and AF_NETLINK, which a library
 * may probe (nscd, interface lists), fail with EACCES; any other family
 * kills the process as every call outside the table does. */
static int
sandbox_allow_sockets(scmp_filter_ctx ctx)
{
    static const int ok[] = { AF_INET, AF_INET6 };
    static const int refused[] = { AF_UNIX, AF_NETLINK };
    struct scmp_arg_cmp c = { .arg = 0, .op = SCMP_CMP_EQ, .datum_b = 0 };

    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        c.datum_a = (scmp_datum_t)ok[i];
        if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, c) < 0)
            return -1;
    }
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        c.datum_a = (scmp_datum_t)refused[i];
        if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
            c) < 0)
            return -1;
    }
    return 0;
}

/* The API process: TCP over IPv4/IPv6 (its listener is passed in, but a
 * library may probe), and unix stream sockets: its SMTP client connects
 * to the workers' inject.sock (a socket of the workers' user in a
 * directory only root can change). */
static int
sandbox_allow_api_sockets(scmp_filter_ctx ctx)
{
    static const int ok[] = { AF_INET, AF_INET6, AF_UNIX };
    struct scmp_arg_cmp c = { .arg = 0, .op = SCMP_CMP_EQ, .datum_b = 0 };

    for (size_t i = 0; i < ARRAY_LEN(ok); i++) {
        c.datum_a = (scmp_datum_t)ok[i];
        if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1, c) < 0)
            return -1;
    }
    c.datum_a = AF_NETLINK;
    return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
        c);
}

/* abort() (assert, OpenSSL's fatal paths) signals its own thread: allowed
 * for this process only, so SIGABRT still gives a core and a log line. */
static int
sandbox_allow_self_signal(scmp_filter_ctx ctx)
{
    struct scmp_arg_cmp me = { .arg = 0, .op = SCMP_CMP_EQ,
        .datum_a = (scmp_datum_t)getpid(), .datum_b = 0 };

    return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1, me);
}

/* libcurl's connection cache (the MTA-STS fetch, tlspol/sts.c) sets
 * SIGPIPE to SIG_IGN and back around closing its connections, whatever
 * CURLOPT_NOSIGNAL says, e.g. in curl_multi_cleanup() at the worker's exit.
 * SIGPIPE is ignored in workers anyway (every send is MSG_NOSIGNAL): that
 * one signal's action may change, no other. */
static int
sandbox_allow_sigpipe_action(scmp_filter_ctx ctx)
{
    struct scmp_arg_cmp pipe = { .arg = 0, .op = SCMP_CMP_EQ,
        .datum_a = SIGPIPE, .datum_b = 0 };

    return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(rt_sigaction), 1,
        pipe);
}

/* A worker's one helper thread (spool/spool_sync.c: the group commit's
 * syncfs off the loop), made inside the sandbox: clone() only for a thread
 * (CLONE_THREAD; a new process stays forbidden), clone3() answers ENOSYS
 * so that glibc falls back to clone(), whose flags can be checked; and
 * what a starting thread registers (robust futex list, rseq). */
static int
sandbox_allow_threads(scmp_filter_ctx ctx)
{
    struct scmp_arg_cmp thread = { .arg = 0, .op = SCMP_CMP_MASKED_EQ,
        .datum_a = CLONE_THREAD, .datum_b = CLONE_THREAD };
    /* glibc's first pthread_create() installs its SIGSETXID handler
     * (__SIGRTMIN + 1, kept from applications: SIGRTMIN is above it) */
    struct scmp_arg_cmp setxid = { .arg = 0, .op = SCMP_CMP_EQ,
        .datum_a = 33, .datum_b = 0 };

#ifndef SANDBOX_ASAN                /* there clone is allowed as a whole */
    if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
        thread) < 0)
        return -1;
#else
    (void)thread;
#endif
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3),
        0) < 0 ||
        seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(set_robust_list),
        0) < 0 ||
        seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(rseq), 0) < 0 ||
        seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(rt_sigaction), 1,
        setxid) < 0)
        return -1;
    return 0;
}

int
sandbox_seccomp(enum sandbox_role role, char *err, size_t errsz)
{
    scmp_filter_ctx ctx;
    int             rc = -1;

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        snprintf(err, errsz, "prctl(PR_SET_NO_NEW_PRIVS): %s",
            strerror(errno));
        return -1;
    }
    ctx = seccomp_init(role == SANDBOX_MASTER ? SCMP_ACT_ALLOW :
        SCMP_ACT_KILL_PROCESS);
    if (ctx == NULL) {
        snprintf(err, errsz, "seccomp_init failed");
        return -1;
    }
    switch (role) {
    case SANDBOX_MASTER:
        for (size_t i = 0; i < ARRAY_LEN(sandbox_master_denied); i++)
            if (sandbox_master_denied[i] >= 0 &&
                seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS,
                sandbox_master_denied[i], 0) < 0)
                goto out;
        break;
    case SANDBOX_WORKER:
        if (sandbox_allow(ctx, sandbox_worker_calls,
            ARRAY_LEN(sandbox_worker_calls)) < 0 ||
            sandbox_allow_self_signal(ctx) < 0 ||
            sandbox_allow_ioctl(ctx) < 0 ||
            sandbox_allow_sockets(ctx) < 0 ||
            sandbox_allow_threads(ctx) < 0 ||
            sandbox_allow_sigpipe_action(ctx) < 0)
            goto out;
        break;
    case SANDBOX_API:
        if (sandbox_allow(ctx, sandbox_worker_calls,
            ARRAY_LEN(sandbox_worker_calls)) < 0 ||
            sandbox_allow_self_signal(ctx) < 0 ||
            sandbox_allow_ioctl(ctx) < 0 ||
            sandbox_allow_api_sockets(ctx) < 0 ||
            sandbox_allow_sigpipe_action(ctx) < 0)
            goto out;
        break;
    case SANDBOX_LOGD:
        if (sandbox_allow(ctx, sandbox_logd_calls,
            ARRAY_LEN(sandbox_logd_calls)) < 0 ||
            sandbox_allow_self_signal(ctx) < 0)
            goto out;
        break;
    }
#ifdef SANDBOX_ASAN
    if (role != SANDBOX_MASTER &&
        sandbox_allow(ctx, sandbox_asan_calls,
        ARRAY_LEN(sandbox_asan_calls)) < 0)
        goto out;
#else
    (void)sandbox_asan_calls;
#endif
    if ((rc = seccomp_load(ctx)) < 0) {
        snprintf(err, errsz, "seccomp_load: %s", strerror(-rc));
        rc = -1;
        goto done;
    }
    rc = 0;
    goto done;
out:
    snprintf(err, errsz, "seccomp_rule_add failed");
    rc = -1;
done:
    seccomp_release(ctx);
    return rc;
}

void
sandbox_selftest(void)
{
    (void)syscall(SYS_personality, 0xffffffffUL);   /* query: no change */
}

/* ---- Landlock ----------------------------------------------------------- */

/* The kernel's structure; the libc headers may predate its later fields
 * (handled_access_net: ABI 4, scoped: ABI 6). */
struct sandbox_ll_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

#define SANDBOX_LL_TRUNCATE     (1ULL << 14)    /* ABI 3 */
#define SANDBOX_LL_IOCTL_DEV    (1ULL << 15)    /* ABI 5 */
#define SANDBOX_LL_NET_BIND_TCP (1ULL << 0)     /* ABI 4 */
#define SANDBOX_LL_SCOPE_UNIX   (1ULL << 0)     /* ABI 6 */
#define SANDBOX_LL_SCOPE_SIGNAL (1ULL << 1)     /* ABI 6 */
#define SANDBOX_LL_RULE_NET_PORT 2               /* ABI 4 */

/* struct landlock_net_port_attr (ABI 4; newer than Debian 12's headers) */
struct sandbox_ll_port {
    uint64_t allowed_access;
    uint64_t port;
} __attribute__((packed));

int
sandbox_landlock_abi(void)
{
    long v = syscall(__NR_landlock_create_ruleset, NULL, 0,
        LANDLOCK_CREATE_RULESET_VERSION);

    return v < 0 ? 0 : (int)v;
}

/* sandbox_ll_add_fd - a rule for what fd is open at; shown names it. */
static int
sandbox_ll_add_fd(int rfd, int fd, uint64_t access, int dir_only,
    const char *shown, char *err, size_t errsz)
{
    struct landlock_path_beneath_attr pb;
    struct stat st;

    if (fstat(fd, &st) < 0 || (dir_only && !S_ISDIR(st.st_mode)))
        return 0;
    if (!S_ISDIR(st.st_mode))       /* file rules take file rights only */
        access &= LANDLOCK_ACCESS_FS_READ_FILE |
            LANDLOCK_ACCESS_FS_WRITE_FILE | SANDBOX_LL_TRUNCATE;
    memset(&pb, 0, sizeof(pb));
    pb.allowed_access = access;
    pb.parent_fd = fd;
    if (syscall(__NR_landlock_add_rule, rfd, LANDLOCK_RULE_PATH_BENEATH,
        &pb, 0) < 0) {
        snprintf(err, errsz, "landlock_add_rule %s: %s", shown,
            strerror(errno));
        return -1;
    }
    return 0;
}

static int
sandbox_ll_add(int rfd, const char *path, uint64_t access, int dir_only,
    char *err, size_t errsz)
{
    int fd, rc;

    fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0)
        return 0;                   /* not there: nothing to allow */
    rc = sandbox_ll_add_fd(rfd, fd, access, dir_only, path, err, errsz);
    close(fd);
    return rc;
}

int
sandbox_landlock(const struct sandbox_fs *fs, char *err, size_t errsz)
{
    struct sandbox_ll_attr attr;
    uint64_t fs_all, rw, ro;
    size_t   attrsz = sizeof(uint64_t);
    int      abi = sandbox_landlock_abi(), rfd;

    /* ABI 1 denies every rename across directories (tmp/ -> queue/). */
    if (abi < 2) {
        snprintf(err, errsz, "Landlock %s; file system not restricted",
            abi == 0 ? "not available in this kernel" :
            "ABI 1 cannot allow the spool's renames");
        return 1;
    }
    fs_all = (LANDLOCK_ACCESS_FS_REFER << 1) - 1;
    if (abi >= 3)
        fs_all |= SANDBOX_LL_TRUNCATE;
    if (abi >= 5)
        fs_all |= SANDBOX_LL_IOCTL_DEV;
    memset(&attr, 0, sizeof(attr));
    attr.handled_access_fs = fs_all;
    if (abi >= 4) {                 /* no rule: no TCP bind at all */
        attr.handled_access_net = SANDBOX_LL_NET_BIND_TCP;
        attrsz = 2 * sizeof(uint64_t);
    }
    if (abi >= 6) {                 /* no signals or abstract sockets out */
        attr.scoped = SANDBOX_LL_SCOPE_UNIX | SANDBOX_LL_SCOPE_SIGNAL;
        attrsz = sizeof(attr);
    }
    rfd = (int)syscall(__NR_landlock_create_ruleset, &attr, attrsz, 0);
    if (rfd < 0) {
        snprintf(err, errsz, "landlock_create_ruleset: %s", strerror(errno));
        return -1;
    }
    ro = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR;
    rw = ro | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
        LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |
        LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_REFER |
        (abi >= 3 ? SANDBOX_LL_TRUNCATE : 0);
    for (size_t i = 0; fs != NULL && i < fs->nrw; i++)
        if (sandbox_ll_add(rfd, fs->rw[i], rw, 1, err, errsz) < 0)
            goto fail;
    for (size_t i = 0; fs != NULL && i < fs->nrwfd; i++)
        if (sandbox_ll_add_fd(rfd, fs->rwfd[i], rw, 1, "(a maildir)", err,
            errsz) < 0)
            goto fail;
    for (size_t i = 0; fs != NULL && i < fs->nro; i++)
        if (sandbox_ll_add(rfd, fs->ro[i], ro, 0, err, errsz) < 0)
            goto fail;
    if (abi >= 4 && fs != NULL && fs->bind_port0) {
        /* egress sources bind their address with port 0: the kernel
         * picks the port at connect(); no other port may be bound */
        struct sandbox_ll_port np = { SANDBOX_LL_NET_BIND_TCP, 0 };

        if (syscall(__NR_landlock_add_rule, rfd, SANDBOX_LL_RULE_NET_PORT,
            &np, 0) < 0) {
            snprintf(err, errsz, "landlock_add_rule bind port 0: %s",
                strerror(errno));
            goto fail;
        }
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        syscall(__NR_landlock_restrict_self, rfd, 0) < 0) {
        snprintf(err, errsz, "landlock_restrict_self: %s", strerror(errno));
        goto fail;
    }
    close(rfd);
    return 0;
fail:
    close(rfd);
    return -1;
}
