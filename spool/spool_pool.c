/*
 * spool_pool.c - delivered files kept to carry the next messages.  See
 * the CONTRACT in spool.h (spool_remove_fd, spool_pool_trim).
 *
 * Why: writing a big message into a new tmpfs file allocates and charges
 * its pages, and its unlink frees them again; written over an old file of
 * that size, neither happens (bench/relay_floor measures both; the
 * figures are in bench/RESULTS.md).  A small message saves three
 * system calls: the open, the flock, the unlink and the close give way to
 * one rename (queue/<id> -> tmp/.<id>: the dot sets it apart from the files
 * being received); the next message is written under that name and
 * renamed to queue/<its id> at its commit as usual.
 *
 * Safety:
 *   - only in memory (tmpfs, ramfs) and without spool.fsync: a crash of
 *     the machine takes the whole spool with it, so no old name can come
 *     back holding new bytes, as it could from a journal on disk;
 *   - only a file this worker wrote and delivered from its own descriptor
 *     (spool_keep), read-write and locked all along: the lock stays with
 *     the file in the pool and through its next message, so no other
 *     process's flock() ever wins it in between, and a reader that opened
 *     the old name just before the move finds another id in the envelope
 *     (spool_msg_open refuses it);
 *   - never a file with a state (its mode and times carry the schedule);
 *   - its length is cut to the new message's at the commit (spool_finish);
 *   - bounded in files, bytes and time (SPOOL_POOL_*), and drained when
 *     the spool runs short of room (spool_room).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"


/* spool_pool_drop - unlink and close one pooled file. */
static void
spool_pool_drop(struct spool *sp, const struct spool_pooled *e)
{
    (void)unlinkat(sp->tmpfd, e->name, 0);
    close(e->fd);
}


/* spool_pool_expire - unlink the files unused since before now minus
 * SPOOL_POOL_IDLE_MS (the oldest are first). */
static void
spool_pool_expire(struct spool *sp, uint64_t now)
{
    size_t n = 0;

    while (n < sp->npool && now - sp->pool[n].at_ms >= SPOOL_POOL_IDLE_MS)
        spool_pool_drop(sp, &sp->pool[n++]);
    if (n > 0) {
        sp->npool -= n;
        memmove(sp->pool, sp->pool + n, sp->npool * sizeof(sp->pool[0]));
    }
}


/* spool_pool_put - move the delivered queue/<id> to tmp/.<id> and keep
 * fd: 0, or -1 (nothing done) when it may not or cannot be pooled. */
static int
spool_pool_put(struct spool *sp, const struct spool_env *env, int fd)
{
    struct spool_pooled *e;
    uint64_t             bytes = env->file_size, now;
    size_t               i;

    if (!sp->in_ram || sp->fsync || sp->writer < 0 || !env->kept ||
        env->has_state || env->file_size == 0 ||
        env->file_size > SPOOL_POOL_FILE || fd < 0 ||
        !spool_id_valid(env->id))
        return -1;
    now = util_now_ms();
    spool_pool_expire(sp, now);
    for (i = 0; i < sp->npool; i++)
        bytes += sp->pool[i].size;
    if (sp->npool == SPOOL_POOL_MAX || bytes > SPOOL_POOL_BYTES)
        return -1;
    e = &sp->pool[sp->npool];
    e->name[0] = '.';
    memcpy(e->name + 1, env->id, SPOOL_ID_SIZE);
    if (renameat2(sp->queuefd, env->id, sp->tmpfd, e->name,
        RENAME_NOREPLACE) != 0)
        return -1;              /* the usual unlink says what is wrong */
    sp->npool++;
    e->fd = fd;
    e->size = env->file_size;
    e->at_ms = now;
    return 0;
}


int
spool_remove_fd(struct spool *sp, const struct spool_env *env, int fd)
{
    int rc;

    if (spool_pool_put(sp, env, fd) == 0)
        return SPOOL_OK;
    if ((rc = spool_remove_env(sp, env)) != SPOOL_OK)
        return rc;
    spool_close_removed(sp, fd);
    return SPOOL_OK;
}


int
spool_pool_take(struct spool *sp, char *name, uint64_t *size)
{
    struct spool_pooled *e = &sp->pool[--sp->npool];  /* warm pages */

    memcpy(name, e->name, SPOOL_POOL_NAME_SIZE);
    *size = e->size;
    return e->fd;
}


void
spool_pool_trim(struct spool *sp)
{
    if (sp == NULL)
        return;
    if (sp->npool > 0)
        spool_pool_expire(sp, util_now_ms());
    /* no message began since the last call: keep one write buffer */
    if (sp->wb_takes == sp->wb_takes_seen)
        while (sp->nspare > 1)
            free(sp->spare[--sp->nspare]);
    sp->wb_takes_seen = sp->wb_takes;
}


void
spool_pool_drain(struct spool *sp)
{
    while (sp->npool > 0)
        spool_pool_drop(sp, &sp->pool[--sp->npool]);
}
