/*
 * spool_sync.c - the group commit without stopping the loop (spool.fsync):
 * one syncfs() of the spool's file system runs on a helper thread while
 * the worker's loop goes on reading, parsing and writing other sessions.
 * See the CONTRACT in spool.h (spool_commit_rename .. spool_sync_reap).
 *
 * Why a thread: syncfs() blocks for a journal commit and a disk cache
 * flush (milliseconds).  Done inline, every client round trip (banner,
 * EHLO, MAIL, DATA, QUIT) that falls into a sync waited for it, and a sync
 * covered only the few messages that ended in one loop turn.  Here the
 * loop keeps serving them, and the next sync covers every message renamed
 * while the previous one ran.
 *
 * The thread is made on the first sync, after the worker's sandbox is on:
 * it inherits the seccomp filter and the Landlock domain, and runs only
 * read() (its request eventfd), syncfs() and write() (the done eventfd).  Where it
 * cannot be made, the sync runs inline and the eventfd is signalled all
 * the same: one path for the caller.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

/* The loop and the thread share no lock: a request is a write to reqfd
 * (the thread blocks reading it), the answer a write to donefd (the loop
 * watches it); err is written by the thread before its donefd write and
 * read by the loop after reading donefd (release/acquire). */
struct spool_syncer {
    pthread_t       tid;
    int             started;        /* the thread runs */
    int             fd;             /* a directory on the file system */
    int             reqfd;          /* eventfd, blocking: sync (or quit) */
    int             donefd;         /* eventfd, non-blocking: done */
    int             busy;           /* asked and not yet reaped */
    int             quit;           /* atomic: the thread ends */
    int             err;            /* atomic: errno of syncfs(), 0 = OK */
};


static void
spool_sync_post(int fd)
{
    uint64_t one = 1;

    /* an eventfd write fails only on counter overflow: never here */
    while (write(fd, &one, sizeof(one)) == -1 && errno == EINTR)
        ;
}


static void *
spool_sync_main(void *arg)
{
    struct spool_syncer *y = arg;
    uint64_t             n;
    ssize_t              r;

    for (;;) {
        r = read(y->reqfd, &n, sizeof(n));
        if (r == -1 && errno == EINTR)
            continue;
        if (r != (ssize_t)sizeof(n) ||
            __atomic_load_n(&y->quit, __ATOMIC_ACQUIRE))
            break;
        __atomic_store_n(&y->err, syncfs(y->fd) == 0 ? 0 : errno,
            __ATOMIC_RELEASE);
        spool_sync_post(y->donefd);
    }
    return NULL;
}


int
spool_sync_init(struct spool *sp)
{
    struct spool_syncer *y;

    if (sp->syncer != NULL)
        return SPOOL_OK;
    y = xcalloc(1, sizeof(*y));
    y->fd = sp->queuefd;
    y->reqfd = eventfd(0, EFD_CLOEXEC);
    y->donefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (y->reqfd == -1 || y->donefd == -1) {
        int rc = spool_fail(sp, "eventfd");

        if (y->reqfd >= 0)
            close(y->reqfd);
        if (y->donefd >= 0)
            close(y->donefd);
        free(y);
        return rc;
    }
    sp->syncer = y;
    return SPOOL_OK;
}


int
spool_sync_fd(const struct spool *sp)
{
    return sp->syncer != NULL ? sp->syncer->donefd : -1;
}


int
spool_thread_start(pthread_t *tid, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    int      rc;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(tid, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == 0 ? 0 : -1;
}


/* spool_sync_thread - 0, or -1 and the caller syncs inline. */
static int
spool_sync_thread(struct spool_syncer *y)
{
    if (spool_thread_start(&y->tid, spool_sync_main, y) != 0)
        return -1;
    y->started = 1;
    return 0;
}


int
spool_sync_start(struct spool *sp)
{
    struct spool_syncer *y = sp->syncer;

    if (y == NULL) {
        errno = EINVAL;
        return spool_fail(sp, "sync: spool_sync_init not called");
    }
    if (y->busy) {
        errno = EBUSY;
        return spool_fail(sp, "sync: one is running");
    }
    y->busy = 1;
    if (!y->started && spool_sync_thread(y) != 0) {
        __atomic_store_n(&y->err, syncfs(y->fd) == 0 ? 0 : errno,
            __ATOMIC_RELEASE);      /* inline */
        spool_sync_post(y->donefd);
        return SPOOL_OK;
    }
    spool_sync_post(y->reqfd);
    return SPOOL_OK;
}


int
spool_sync_reap(struct spool *sp)
{
    struct spool_syncer *y = sp->syncer;
    uint64_t             n;
    ssize_t              r;
    int                  err;

    if (y == NULL || !y->busy)
        return SPOOL_OK;
    while ((r = read(y->donefd, &n, sizeof(n))) == -1 && errno == EINTR)
        ;
    if (r != (ssize_t)sizeof(n))
        return MTA_AGAIN;
    y->busy = 0;
    if ((err = __atomic_load_n(&y->err, __ATOMIC_ACQUIRE)) != 0) {
        errno = err;
        return spool_fail(sp, "syncfs %s", sp->dir);
    }
    return SPOOL_OK;
}


int
spool_sync_busy(const struct spool *sp)
{
    return sp->syncer != NULL && sp->syncer->busy;
}


void
spool_sync_wait(struct spool *sp)
{
    struct spool_syncer *y = sp->syncer;
    struct pollfd        p;

    if (y == NULL || !y->busy)
        return;
    p.fd = y->donefd;
    p.events = POLLIN;
    while (poll(&p, 1, -1) == -1 && errno == EINTR)
        ;
}


void
spool_sync_free(struct spool *sp)
{
    struct spool_syncer *y = sp->syncer;

    if (y == NULL)
        return;
    if (y->started) {
        __atomic_store_n(&y->quit, 1, __ATOMIC_RELEASE);
        spool_sync_post(y->reqfd);
        pthread_join(y->tid, NULL);
    }
    close(y->reqfd);
    close(y->donefd);
    free(y);
    sp->syncer = NULL;
}
