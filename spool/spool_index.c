/*
 * spool_index.c - a worker's queue index saved at a clean stop
 * (state/index-<shard>), so that the next start has its listing records
 * without reading a million files (delivery/qindex.c).
 *
 * PURPOSE   spool_index_save() writes the records (spool.h "Listing
 *           records") after a magic line, through a temporary name and a
 *           rename, so a reader sees a whole file or none;
 *           spool_index_take() reads it whole and removes it (a snapshot
 *           is used once: after that the worker's memory is the truth).
 * CONTRACT  Only the worker of that shard reads and writes it, with its
 *           own ids (root never opens it: the master's start purges only
 *           state/'s dot-names, where an interrupted save is left).  The
 *           content is a cache, checked record by record by its reader
 *           against the queue file's inode (next retry, held) and parsed
 *           with spool_wire_decode(): a stale, cut or garbled file costs
 *           file reads, never a wrong record.
 * FAILURE   SPOOL_ESYS / SPOOL_ENOENT with the reason in spool_errstr().
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

#define SPOOL_INDEX_MAX  ((size_t)4 << 30)   /* refuse a larger file */

static void
spool_index_names(unsigned shard, char *name, char *tmp, size_t sz)
{
    snprintf(name, sz, "index-%02x", shard & 0xffu);
    snprintf(tmp, sz, ".index-%02x.tmp", shard & 0xffu);
}


int
spool_index_save(struct spool *sp, unsigned shard,
    int (*next)(void *arg, const void **p, size_t *n), void *arg)
{
    char        name[32], tmp[32];
    const void *p;
    size_t      n;
    int         fd, rc = SPOOL_OK;

    spool_index_names(shard, name, tmp, sizeof(name));
    fd = openat(sp->statefd, tmp, O_CREAT | O_TRUNC | O_WRONLY | O_NOFOLLOW |
        O_CLOEXEC, 0600);
    if (fd == -1)
        return spool_fail(sp, "create state/%s", tmp);
    if (util_write_all(fd, SPOOL_INDEX_MAGIC, strlen(SPOOL_INDEX_MAGIC)) < 0)
        rc = spool_fail(sp, "write state/%s", tmp);
    while (rc == SPOOL_OK && next(arg, &p, &n) > 0)
        if (util_write_all(fd, p, n) < 0)
            rc = spool_fail(sp, "write state/%s", tmp);
    if (close(fd) == -1 && rc == SPOOL_OK)
        rc = spool_fail(sp, "close state/%s", tmp);
    if (rc == SPOOL_OK && renameat(sp->statefd, tmp, sp->statefd, name) == -1)
        rc = spool_fail(sp, "rename state/%s", tmp);
    if (rc != SPOOL_OK)
        (void)unlinkat(sp->statefd, tmp, 0);
    return rc;
}


unsigned
spool_index_prune(struct spool *sp, unsigned from)
{
    char     name[32], tmp[32];
    unsigned shard, n = 0;

    for (shard = from; shard <= 0xffu; shard++) {
        spool_index_names(shard, name, tmp, sizeof(name));
        n += unlinkat(sp->statefd, name, 0) == 0;
    }
    return n;
}


int
spool_index_take(struct spool *sp, unsigned shard, char **data, size_t *len)
{
    char        name[32], tmp[32], *b = NULL;
    struct stat st;
    size_t      off = 0;
    ssize_t     r;
    int         fd;

    *data = NULL;
    *len = 0;
    spool_index_names(shard, name, tmp, sizeof(name));
    fd = openat(sp->statefd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
        O_CLOEXEC);
    if (fd == -1)
        return errno == ENOENT ? (spool_fail(sp, "open state/%s", name),
            SPOOL_ENOENT) : spool_fail(sp, "open state/%s", name);
    /* used once, whatever comes of it */
    (void)unlinkat(sp->statefd, name, 0);
    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size > SPOOL_INDEX_MAX) {
        close(fd);
        errno = EINVAL;
        return spool_fail(sp, "state/%s: not a regular file of a sane size",
            name);
    }
    b = xmalloc((size_t)st.st_size + 1);
    while (off < (size_t)st.st_size &&
        ((r = pread(fd, b + off, (size_t)st.st_size - off, (off_t)off)) > 0 ||
        (r < 0 && errno == EINTR)))
        if (r > 0)
            off += (size_t)r;
    close(fd);
    if (off < strlen(SPOOL_INDEX_MAGIC) ||
        memcmp(b, SPOOL_INDEX_MAGIC, strlen(SPOOL_INDEX_MAGIC)) != 0) {
        free(b);
        snprintf(sp->err, sizeof(sp->err), "state/%s: not an index", name);
        return SPOOL_EFORMAT;
    }
    *data = b;
    *len = off;
    return SPOOL_OK;
}
