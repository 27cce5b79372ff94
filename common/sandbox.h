/*
 * sandbox.h - what a process may still do once it runs: a seccomp filter
 * (libseccomp) per role and, for the workers, Landlock rules on the file
 * system.  docs/SECURITY.md says why
 * each call and path is there.
 *
 * CONTRACT  Call after the privilege drop (PR_SET_NO_NEW_PRIVS is set by
 *           privs_drop or here).  sandbox_landlock() first, then
 *           sandbox_seccomp() (Landlock's own calls are not in the worker's
 *           list).  A call outside the role's list kills the whole process
 *           (SECCOMP_RET_KILL_PROCESS); the master logs the SIGSYS.
 * FAILURE   -1 with a sentence in err: the caller exits (a child that
 *           cannot be sandboxed does not serve).  sandbox_landlock()
 *           returns 1 and says why in err when the kernel lacks Landlock
 *           (ABI < 2): the caller logs it and goes on without.
 */
#ifndef MTAD_SANDBOX_H
#define MTAD_SANDBOX_H

#include <stddef.h>

/* SANDBOX_API: the HTTP API process (api/): the worker's calls, and unix
 * stream sockets too (its SMTP client to the workers' inject.sock). */
enum sandbox_role { SANDBOX_MASTER, SANDBOX_WORKER, SANDBOX_LOGD,
                    SANDBOX_API };

/* The file system a worker keeps: rw beneath each of rw[] and of the
 * directories open at rwfd[] (O_PATH: opened by the caller without
 * following links), read-only (files) ro[].  Paths that do not exist are
 * skipped; the caller keeps and closes its fds.  bind_port0: binding a
 * local address for an outgoing connection (port 0) stays allowed. */
struct sandbox_fs {
    const char **rw;
    size_t       nrw;
    const char **ro;
    size_t       nro;
    const int   *rwfd;
    size_t       nrwfd;
    int          bind_port0;    /* TCP bind(2) with port 0 allowed (egress
                                   sources; Landlock ABI >= 4), no other */
};

int     sandbox_landlock(const struct sandbox_fs *fs, char *err,
            size_t errsz);
int     sandbox_seccomp(enum sandbox_role role, char *err, size_t errsz);
/* The kernel's Landlock ABI version, or 0 without Landlock. */
int     sandbox_landlock_abi(void);
/* For the test of the filter: a call no role allows (personality(2),
 * query only).  Under the filter the process dies with SIGSYS. */
void    sandbox_selftest(void);

#endif /* MTAD_SANDBOX_H */
