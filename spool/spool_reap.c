/*
 * spool_reap.c - the last close() of removed queue files, off the loop.
 * See the CONTRACT in spool.h (spool_reap_init, spool_close_removed).
 *
 * Why: on a disk file system the last close() of an unlinked file frees
 * its blocks in the caller: ext4 truncates it there, and with the
 * "discard" mount option (common on virtual machines) it also waits for a
 * discard request to the device, blocking: every delivered message
 * stalled its worker's loop for it (perf's sched_switch stacks of the
 * durable row showed one blk_issue_discard wait per message).  Here a helper thread makes those
 * closes: the loop writes the descriptor's number into a pipe and goes
 * on.  The file is no longer in queue/, so nobody can open it by name;
 * that its lock is held a little longer changes nothing for anyone.
 *
 * On tmpfs that close costs about a microsecond, less than the pipe: no
 * thread there.  Where the thread cannot be made, or SPOOL_REAP_MAX files
 * wait for it, the close is made inline, as before.  The pipe is made at init, before the
 * sandbox (pipe2 is not among a worker's calls); the thread at the first
 * close, inside it, so it inherits the seccomp filter and Landlock domain
 * and makes only read() and close().
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

#define SPOOL_REAP_BATCH 64             /* descriptors per read() */
/* Descriptors handed over and not closed yet, at most: past it the loop
 * closes inline again.  A device slower than the message rate would
 * otherwise pile open files up to the descriptor limit (and then refuse
 * connections) instead of slowing the loop down as before. */
#define SPOOL_REAP_MAX   256

struct spool_reaper {
    pthread_t   tid;
    int         started;                /* the thread runs */
    int         failed;                 /* it could not be made: inline */
    int         rfd, wfd;               /* pipe: the thread reads rfd */
    unsigned    inflight;               /* atomic: handed over, open */
};


static void *
spool_reap_main(void *arg)
{
    struct spool_reaper *r = arg;
    int                  fds[SPOOL_REAP_BATCH];
    ssize_t              n;
    size_t               i;

    for (;;) {
        n = read(r->rfd, fds, sizeof(fds));
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0)
            break;                      /* EOF: spool_reap_free() */
        /* a pipe write of 4 bytes is atomic: n is a whole count */
        for (i = 0; i < (size_t)n / sizeof(int); i++)
            close(fds[i]);
        __atomic_sub_fetch(&r->inflight, (unsigned)(n / sizeof(int)),
            __ATOMIC_RELAXED);
    }
    return NULL;
}


int
spool_reap_init(struct spool *sp)
{
    struct spool_reaper *r;
    int                  p[2];

    if (sp->reaper != NULL || sp->in_ram)
        return SPOOL_OK;
    if (pipe2(p, O_CLOEXEC) == -1)
        return spool_fail(sp, "pipe");
    /* the loop never waits on a full pipe: it closes inline then */
    if (fcntl(p[1], F_SETFL, O_NONBLOCK) == -1) {
        int rc = spool_fail(sp, "fcntl pipe");

        close(p[0]);
        close(p[1]);
        return rc;
    }
    r = xcalloc(1, sizeof(*r));
    r->rfd = p[0];
    r->wfd = p[1];
    sp->reaper = r;
    return SPOOL_OK;
}


/* spool_reap_thread - 0, or -1 and the caller closes inline. */
static int
spool_reap_thread(struct spool_reaper *r)
{
    if (spool_thread_start(&r->tid, spool_reap_main, r) != 0) {
        r->failed = 1;
        return -1;
    }
    r->started = 1;
    return 0;
}


void
spool_close_removed(struct spool *sp, int fd)
{
    struct spool_reaper *r = sp->reaper;

    if (fd < 0)
        return;
    if (r == NULL || r->failed ||
        __atomic_load_n(&r->inflight, __ATOMIC_RELAXED) >= SPOOL_REAP_MAX ||
        (!r->started && spool_reap_thread(r) != 0)) {
        close(fd);                      /* tmpfs, no thread, too many */
        return;
    }
    __atomic_add_fetch(&r->inflight, 1, __ATOMIC_RELAXED);
    if (write(r->wfd, &fd, sizeof(fd)) != (ssize_t)sizeof(fd)) {
        __atomic_sub_fetch(&r->inflight, 1, __ATOMIC_RELAXED);
        close(fd);                      /* the pipe is full */
    }
}


void
spool_reap_free(struct spool *sp)
{
    struct spool_reaper *r = sp->reaper;

    if (r == NULL)
        return;
    close(r->wfd);                      /* the thread drains, reads EOF */
    if (r->started)
        pthread_join(r->tid, NULL);
    close(r->rfd);
    free(r);
    sp->reaper = NULL;
}
