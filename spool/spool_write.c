/*
 * spool_write.c - the message writer: a buffered tmp/<id> file, the
 * reserved header room, then commit (rename to queue/) or abort.  See the
 * CONTRACT in spool.c (the spare write buffers).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>

#include "common/safefs.h"
#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

#define SPOOL_ROOM_MS     10            /* spool_room() looks again after */
#define SPOOL_DIRECT_MIN  (32 * 1024)   /* spool_write_direct() from here */

/* ---- writer ----------------------------------------------------------- */

/* spool_room - would n more bytes of new mail leave the reserve free?
 * SPOOL_OK, or SPOOL_ENOSPC with the last error saying why.  An
 * fstatvfs() at most every SPOOL_ROOM_MS while far from the reserve: a
 * check leaves a budget of an eighth of the room above it (other workers
 * write too) to spend without looking again. */
static int
spool_room(struct spool *sp, uint64_t n)
{
    struct statvfs vs;
    uint64_t       avail, keep, now;

    if (sp->reserve == 0)
        return SPOOL_OK;
    now = util_now_ms();
    if (n <= sp->room_budget && now < sp->room_until_ms) {
        sp->room_budget -= n;
        return SPOOL_OK;
    }
    sp->room_budget = 0;
    if (fstatvfs(sp->tmpfd, &vs) != 0)
        return SPOOL_OK;            /* unknown: the write itself decides */
    avail = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    /* at most a quarter of the file system: a small spool stays usable */
    keep = (uint64_t)vs.f_blocks * (uint64_t)vs.f_frsize / 4;
    if (keep > sp->reserve)
        keep = sp->reserve;
    if (avail >= n && avail - n >= keep) {
        sp->room_budget = (avail - n - keep) / 8;
        sp->room_until_ms = now + SPOOL_ROOM_MS;
        return SPOOL_OK;
    }
    if (sp->npool > 0) {                /* delivered files come first */
        spool_pool_drain(sp);
        return spool_room(sp, n);
    }
    snprintf(sp->err, sizeof(sp->err), "spool %s: %llu bytes free, %llu "
        "kept for delivery state and bounces (spool.reserve)", sp->dir,
        (unsigned long long)avail, (unsigned long long)keep);
    errno = ENOSPC;
    return SPOOL_ENOSPC;
}


void
spool_set_reserve(struct spool *sp, uint64_t bytes)
{
    sp->reserve = bytes;
}


/* spool_write_all - write n bytes to m's tmp file at m->written (a
 * reused file's descriptor is not at 0), retrying short writes; new mail
 * first checks it leaves the reserve (spool_room). */
static int
spool_write_all(struct spool_msg *m, const char *p, size_t n)
{
    ssize_t w;

    if (!m->use_reserve && spool_room(m->sp, n) != SPOOL_OK)
        return m->err = SPOOL_ENOSPC;
    while (n > 0) {
        if ((w = pwrite(m->fd, p, n, (off_t)m->written)) == -1) {
            if (errno == EINTR)
                continue;
            return m->err = spool_fail(m->sp, "write tmp/%s", m->tmpid);
        }
        p += w;
        n -= (size_t)w;
        m->written += (uint64_t)w;
    }
    return SPOOL_OK;
}


/* spool_write_direct - what wb holds, then n bytes from p, in one
 * pwritev(): no copy through the buffer.  Only once the buffer has been
 * written out before (m->written > 0): the envelope and the start of the
 * body, which spool_mark_tls_optional() and spool_head_reserve() change in
 * place, are on disk by then, and everything that looks there already
 * goes by m->written (a 1 MiB message copied 1 MiB for
 * nothing). */
static int
spool_write_direct(struct spool_msg *m, const char *p, size_t n)
{
    struct iovec iov[2], *v = iov;
    int          cnt = 0;
    ssize_t      w;

    if (!m->use_reserve && spool_room(m->sp, m->wlen + n) != SPOOL_OK)
        return m->err = SPOOL_ENOSPC;
    if (m->wlen > 0)
        iov[cnt++] = (struct iovec){ m->wb, m->wlen };
    iov[cnt++] = (struct iovec){ (void *)p, n };
    m->wlen = 0;
    while (cnt > 0) {
        if ((w = pwritev(m->fd, v, cnt, (off_t)m->written)) == -1) {
            if (errno == EINTR)
                continue;
            return m->err = spool_fail(m->sp, "write tmp/%s", m->tmpid);
        }
        m->written += (uint64_t)w;
        while (cnt > 0 && (size_t)w >= v->iov_len) {
            w -= (ssize_t)v->iov_len;
            v++;
            cnt--;
        }
        if (cnt > 0) {
            v->iov_base = (char *)v->iov_base + w;
            v->iov_len -= (size_t)w;
        }
    }
    return SPOOL_OK;
}


static int
spool_flush(struct spool_msg *m)
{
    int rc;

    if (m->wlen == 0)
        return SPOOL_OK;
    rc = spool_write_all(m, m->wb, m->wlen);
    m->wlen = 0;
    return rc;
}


/* spool_buf_give - return a write buffer: kept while there is room for
 * it among the spares, else freed. */
static void
spool_buf_give(struct spool *sp, char *wb)
{
    if (wb == NULL)
        return;
    if (sp->nspare < SPOOL_WBUF_SPARES)
        sp->spare[sp->nspare++] = wb;
    else
        free(wb);
}


/* spool_buf_take - a write buffer: the last spare given back (its pages
 * the warmest), or a new one. */
static char *
spool_buf_take(struct spool *sp)
{
    sp->wb_takes++;
    return sp->nspare > 0 ? sp->spare[--sp->nspare] : xmalloc(SPOOL_WBUF);
}


/* spool_tmp_open - a fresh id and its tmp file, tmp/<tmpid>: a pooled
 * one under its name ".<old id>" (*reused its length), or tmp/<id> made new
 * (*reused 0); skips ids whose tmp file
 * exists (O_EXCL) or, without a writer number, that are already in queue/
 * (checked after the tmp file exists, so a concurrent writer of the same
 * id has renamed already or fails its own O_EXCL).  With a writer number
 * no other live process makes this id (spool.h): the check would cost a
 * system call per message for a case the commit's rename refuses anyway. */
static int
spool_tmp_open(struct spool *sp, char *id, char *tmpid,
    uint64_t *reused)
{
    struct stat st;
    int         fd, tries;

    *reused = 0;
    if (sp->npool > 0) {                /* spool_pool.c */
        fd = spool_pool_take(sp, tmpid, reused);
        spool_new_id(sp, id);           /* unique: sp->writer >= 0 */
        return fd;
    }
    for (tries = 0; tries < SPOOL_ID_TRIES; tries++) {
        spool_new_id(sp, id);
        /* read-write: spool_keep() hands this fd to delivery, which
         * sends the body from it */
        fd = openat(sp->tmpfd, id, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC,
            0600);
        if (fd == -1) {
            if (errno == EEXIST)
                continue;
            return spool_fail(sp, "open tmp/%s", id);
        }
        memcpy(tmpid, id, SPOOL_ID_SIZE);
        if (sp->writer >= 0)
            return fd;
        if (fstatat(sp->queuefd, id, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            close(fd);
            unlinkat(sp->tmpfd, id, 0);
            continue;
        }
        if (errno != ENOENT) {
            int rc = spool_fail(sp, "stat queue/%s", id);

            close(fd);
            unlinkat(sp->tmpfd, id, 0);
            return rc;
        }
        return fd;
    }
    errno = EEXIST;
    return spool_fail(sp, "open tmp/%s", id);
}


int
spool_create(struct spool *sp, struct spool_env *env, struct spool_msg **mp)
{
    struct spool_msg *m;
    struct spool_env  e;
    size_t            len;
    uint64_t          reused;
    char              tmpid[SPOOL_POOL_NAME_SIZE] = "", *big;
    int               fd, rc;

    *mp = NULL;
    if (!env->use_reserve && (rc = spool_room(sp, 0)) != SPOOL_OK)
        return rc;
    if ((fd = spool_tmp_open(sp, env->id, tmpid, &reused)) < 0)
        return fd;
    if (env->arrival_ms == 0)
        env->arrival_ms = util_wall_ms();
    m = xcalloc(1, sizeof(*m));
    m->sp = sp;
    m->fd = fd;
    m->reused = reused;
    memcpy(m->tmpid, tmpid, SPOOL_POOL_NAME_SIZE);
    m->use_reserve = env->use_reserve;
    m->requiretls = env->requiretls != 0;
    m->tls_optional = !m->requiretls && env->tls_optional;
    memcpy(m->id, env->id, SPOOL_ID_SIZE);
    m->wb = spool_buf_take(sp);
    e = *env;
    e.body_size = 0;                    /* spool_finish() writes the size */
    len = spool_env_render(&e, NULL);
    m->body_off = len;
    if (len <= SPOOL_WBUF) {
        spool_env_render(&e, m->wb);
        m->wlen = len;
    } else {                            /* thousands of recipients */
        big = xmalloc(len);
        spool_env_render(&e, big);
        rc = spool_write_all(m, big, len);
        free(big);
        if (rc != SPOOL_OK) {
            *mp = m;                    /* for spool_abort() */
            return rc;
        }
    }
    *mp = m;
    return SPOOL_OK;
}


int
spool_keep(struct spool_msg *m, struct spool_env **envp, int *fdp,
    off_t *body_off)
{
    struct spool_env *env = NULL;
    size_t            used;

    *envp = NULL;
    if (m->err != SPOOL_OK || m->finished || m->keep || m->written != 0 ||
        m->wlen < m->body_off || (!m->sp->close_quiet && !m->sp->fsync))
        return SPOOL_EFORMAT;
    if (spool_env_parse(m->wb, (size_t)m->body_off, &env, &used) !=
        SPOOL_OK || used != m->body_off) {
        spool_env_free(env);
        snprintf(m->sp->err, sizeof(m->sp->err), "tmp/%s: the envelope "
            "does not parse back", m->tmpid);
        return SPOOL_EFORMAT;
    }
    /* Nobody else can have tmp/<id> open: this never waits or fails but
     * for a system error.  A reused file holds the lock already. */
    if (!m->reused && flock(m->fd, LOCK_EX | LOCK_NB) == -1) {
        spool_env_free(env);
        return spool_fail(m->sp, "flock tmp/%s", m->tmpid);
    }
    env->has_state = 0;
    env->kept = 1;
    m->keep = 1;
    m->kenvp = envp;
    m->kbody = body_off;
    *envp = env;
    *fdp = m->fd;
    *body_off = (off_t)m->body_off;
    return SPOOL_OK;
}


const char *
spool_msg_id(const struct spool_msg *m)
{
    return m->id;
}


uint64_t
spool_msg_size(const struct spool_msg *m)
{
    return m->body;
}


int
spool_write(struct spool_msg *m, const void *p, size_t n)
{
    const char *s = p;
    size_t      c;
    int         rc;

    if (m->err != SPOOL_OK)
        return m->err;
    if (m->finished) {
        errno = EINVAL;
        return spool_fail(m->sp, "write tmp/%s", m->tmpid);
    }
    m->body += n;
    if (m->written > 0 && n >= SPOOL_DIRECT_MIN)
        return spool_write_direct(m, s, n);
    while (n > 0) {
        if (m->wlen == 0 && n >= SPOOL_WBUF)    /* no point copying */
            return spool_write_all(m, s, n);
        c = SPOOL_WBUF - m->wlen < n ? SPOOL_WBUF - m->wlen : n;
        memcpy(m->wb + m->wlen, s, c);
        m->wlen += c;
        s += c;
        n -= c;
        if (m->wlen == SPOOL_WBUF && (rc = spool_flush(m)) != SPOOL_OK)
            return rc;
    }
    return SPOOL_OK;
}


/* spool_gap - write n placeholder bytes straight to the file. */
static int
spool_gap(struct spool_msg *m, size_t n)
{
    char   sp[512];
    size_t c;
    int    rc;

    memset(sp, ' ', sizeof(sp));
    for (; n > 0; n -= c) {
        c = n < sizeof(sp) ? n : sizeof(sp);
        if ((rc = spool_write_all(m, sp, c)) != SPOOL_OK)
            return rc;
    }
    return SPOOL_OK;
}


int
spool_head_reserve(struct spool_msg *m, size_t n)
{
    size_t ip;
    int    rc;

    if (m->err != SPOOL_OK)
        return m->err;
    if (m->finished || m->head_len > 0 || n == 0) {
        errno = EINVAL;
        return spool_fail(m->sp, "reserve tmp/%s", m->tmpid);
    }
    if (m->written > m->body_off)
        return SPOOL_ELATE;             /* the body's start is on disk */
    ip = (size_t)(m->body_off - m->written);    /* its place in wb */
    if (m->wlen + n > SPOOL_WBUF && ip > 0) {   /* the envelope goes first */
        if ((rc = spool_write_all(m, m->wb, ip)) != SPOOL_OK)
            return rc;
        memmove(m->wb, m->wb + ip, m->wlen - ip);
        m->wlen -= ip;
        ip = 0;
    }
    if (m->wlen + n <= SPOOL_WBUF) {
        memmove(m->wb + ip + n, m->wb + ip, m->wlen - ip);
        memset(m->wb + ip, ' ', n);
        m->wlen += n;
    } else if ((rc = spool_gap(m, n)) != SPOOL_OK) {
        return rc;                      /* wb starts at the body: room first */
    }
    m->head_off = m->body_off;
    m->head_len = n;
    m->body += n;
    return SPOOL_OK;
}


int
spool_mark_tls_optional(struct spool_msg *m)
{
    static const char line[] = SPOOL_TLSREQ_NO;
    const size_t n = sizeof(line) - 1, endlen = sizeof(SPOOL_ENV_END) - 1;
    size_t       ip;

    if (m->err != SPOOL_OK)
        return m->err;
    if (m->finished) {
        errno = EINVAL;
        return spool_fail(m->sp, "mark tmp/%s", m->tmpid);
    }
    if (m->requiretls || m->tls_optional)
        return SPOOL_OK;                /* REQUIRETLS wins (RFC 8689 3) */
    /* the line goes in front of the envelope's "end\n", which must still
     * be in wb with room to spare; a header section of 256 KiB is not
     * worth a second copy of the buffer */
    if (m->written + endlen > m->body_off || m->wlen + n > SPOOL_WBUF)
        return SPOOL_ELATE;
    ip = (size_t)(m->body_off - endlen - m->written);
    memmove(m->wb + ip + n, m->wb + ip, m->wlen - ip);
    memcpy(m->wb + ip, line, n);
    m->wlen += n;
    m->body_off += n;
    if (m->head_len > 0)
        m->head_off += n;               /* DKIM's room moved with the body */
    m->tls_optional = 1;
    if (m->keep && *m->kenvp != NULL) { /* the envelope handed out too */
        (*m->kenvp)->tls_optional = 1;
        *m->kbody = (off_t)m->body_off;
    }
    return SPOOL_OK;
}


int
spool_head_fill(struct spool_msg *m, const void *p, size_t n)
{
    ssize_t w;

    if (m->err != SPOOL_OK)
        return m->err;
    if (m->finished || m->head_len != n || m->head_filled) {
        errno = EINVAL;
        return spool_fail(m->sp, "fill tmp/%s", m->tmpid);
    }
    if (m->head_off >= m->written) {    /* still in the write buffer */
        memcpy(m->wb + (m->head_off - m->written), p, n);
    } else {
        do
            w = pwrite(m->fd, p, n, (off_t)m->head_off);
        while (w == -1 && errno == EINTR);
        if (w != (ssize_t)n) {
            if (w >= 0)
                errno = EIO;
            return m->err = spool_fail(m->sp, "pwrite tmp/%s", m->tmpid);
        }
    }
    m->head_filled = 1;
    return SPOOL_OK;
}


/* spool_keep_copy - a kept message written whole from the buffer: its
 * body, if small, for the reader in memory (spool.h, spool_keep). */
static void
spool_keep_copy(struct spool_msg *m)
{
    struct spool_env *env = m->keep ? *m->kenvp : NULL;
    size_t            n = m->wlen - (size_t)m->body_off;

    if (env == NULL || env->body_copy != NULL || m->wlen < m->body_off ||
        n != m->body || n > SPOOL_KEEP_COPY)
        return;
    env->body_copy = xmalloc(n + 1);    /* never 0 bytes */
    memcpy(env->body_copy, m->wb + m->body_off, n);
}


int
spool_finish(struct spool_msg *m)
{
    char    digits[SPOOL_SIZE_WIDTH];
    ssize_t w;
    int     rc;

    if (m->err != SPOOL_OK)
        return m->err;
    if (m->finished)
        return SPOOL_OK;
    if (m->head_len > 0 && !m->head_filled) {   /* never a placeholder */
        errno = EINVAL;
        return m->err = spool_fail(m->sp, "finish tmp/%s: header room "
            "not filled", m->tmpid);
    }
    spool_size_digits(digits, m->body);
    /* A message that never left the buffer gets its size patched in
     * memory: one write() for the whole file, no pwrite(). */
    if (m->written == 0) {
        memcpy(m->wb + SPOOL_SIZE_OFF, digits, sizeof(digits));
        spool_keep_copy(m);             /* before the flush empties wb */
        if ((rc = spool_flush(m)) != SPOOL_OK)
            return rc;
        goto done;
    }
    if ((rc = spool_flush(m)) != SPOOL_OK)
        return rc;
    do
        w = pwrite(m->fd, digits, sizeof(digits), (off_t)SPOOL_SIZE_OFF);
    while (w == -1 && errno == EINTR);
    if (w != (ssize_t)sizeof(digits)) {
        if (w >= 0)
            errno = EIO;
        return m->err = spool_fail(m->sp, "pwrite tmp/%s", m->tmpid);
    }
done:
    /* a reused file longer than this message loses the old tail */
    if (m->reused > m->written &&
        ftruncate(m->fd, (off_t)m->written) == -1)
        return m->err = spool_fail(m->sp, "truncate tmp/%s", m->tmpid);
    if (m->keep && *m->kenvp != NULL)
        (*m->kenvp)->file_size = m->written;
    spool_buf_give(m->sp, m->wb);
    m->wb = NULL;
    m->finished = 1;
    return SPOOL_OK;
}


static void
spool_msg_free(struct spool_msg *m)
{
    if (m->fd >= 0)
        close(m->fd);
    spool_buf_give(m->sp, m->wb);
    free(m);
}


/* spool_close_tmp - close the tmp fd before the rename: a delayed write
 * error (NFS, quota) must surface before the commit point. */
static int
spool_close_tmp(struct spool_msg *m)
{
    int fd = m->fd;

    m->fd = -1;
    if (close(fd) == -1 && errno != EINTR)
        return spool_fail(m->sp, "close tmp/%s", m->tmpid);
    return SPOOL_OK;
}


/* spool_rename - tmp/<tmpid> -> queue/<id>, never replacing a queue
 * file. */
static int
spool_rename(struct spool_msg *m)
{
    struct spool *sp = m->sp;

    if (renameat2(sp->tmpfd, m->tmpid, sp->queuefd, m->id,
        RENAME_NOREPLACE) == 0)
        return SPOOL_OK;
    /* No RENAME_NOREPLACE on this file system: a link fails on an
     * existing name just the same (and the tmp name goes after it). */
    if (errno == EINVAL &&
        linkat(sp->tmpfd, m->tmpid, sp->queuefd, m->id, 0) == 0) {
        (void)unlinkat(sp->tmpfd, m->tmpid, 0);
        return SPOOL_OK;
    }
    return spool_fail(sp, "rename tmp/%s queue/%s", m->tmpid, m->id);
}


int
spool_commit(struct spool_msg *m)
{
    struct spool *sp = m->sp;
    int           rc;

    if ((rc = spool_finish(m)) != SPOOL_OK)
        return rc;
    if (sp->fsync && fsync(m->fd) == -1)
        return spool_fail(sp, "fsync tmp/%s", m->tmpid);
    /* a kept fd stays open: spool_keep() allowed it only where close()
     * reports nothing that fsync() or the file system left to it */
    if ((!m->keep && (rc = spool_close_tmp(m)) != SPOOL_OK) ||
        (rc = spool_rename(m)) != SPOOL_OK)
        return rc;
    if (sp->fsync && fsync(sp->queuefd) == -1) {
        /* Not durable: take it back, the client will get a 4xx. */
        rc = spool_fail(sp, "fsync queue/");
        unlinkat(sp->queuefd, m->id, 0);
        return rc;
    }
    if (m->keep)
        m->fd = -1;                     /* the caller's now (spool_keep) */
    spool_msg_free(m);
    return SPOOL_OK;
}


int
spool_commit_rename(struct spool *sp, struct spool_msg **ms, size_t n,
    int *rcs)
{
    size_t i;
    int    rc = SPOOL_OK;

    (void)sp;
    for (i = 0; i < n; i++)
        rcs[i] = spool_finish(ms[i]);
    for (i = 0; i < n; i++) {
        if (rcs[i] == SPOOL_OK && !ms[i]->keep)
            rcs[i] = spool_close_tmp(ms[i]);
        if (rcs[i] == SPOOL_OK)
            rcs[i] = spool_rename(ms[i]);
        if (rcs[i] != SPOOL_OK && rc == SPOOL_OK)
            rc = rcs[i];
    }
    return rc;
}


int
spool_commit_settle(struct spool *sp, struct spool_msg **ms, size_t n,
    int *rcs, int sync_rc)
{
    size_t i;
    int    rc = SPOOL_OK;

    for (i = 0; i < n; i++) {
        if (rcs[i] == SPOOL_OK && sync_rc != SPOOL_OK) {
            /* Not durable: take it back, the client will get a 4xx. */
            unlinkat(sp->queuefd, ms[i]->id, 0);
            rcs[i] = sync_rc;
        }
        if (rcs[i] == SPOOL_OK) {
            if (ms[i]->keep)
                ms[i]->fd = -1;         /* the caller's now (spool_keep) */
            spool_msg_free(ms[i]);
            ms[i] = NULL;
        } else if (rc == SPOOL_OK) {
            rc = rcs[i];
        }
    }
    return rc;
}


int
spool_commit_batch(struct spool *sp, struct spool_msg **ms, size_t n,
    int *rcs)
{
    size_t i, renamed = 0;
    int    sync_rc = SPOOL_OK;

    (void)spool_commit_rename(sp, ms, n, rcs);
    for (i = 0; i < n; i++)
        if (rcs[i] == SPOOL_OK)
            renamed++;
    /*
     * One syncfs() after the renames makes the bodies and the renames
     * durable together: one journal commit per batch instead of two (a
     * sync of the data, then one of queue/).  Nothing is acknowledged
     * before it returns.  A crash before that may leave a queue file whose
     * data did not reach the disk; the reader refuses it (its recorded size
     * does not match), and its client, which got no 250, sends it again.
     */
    if (sp->fsync && renamed > 0 && syncfs(sp->queuefd) == -1)
        sync_rc = spool_fail(sp, "syncfs %s", sp->dir);
    return spool_commit_settle(sp, ms, n, rcs, sync_rc);
}


void
spool_abort(struct spool_msg *m)
{
    if (m == NULL)
        return;
    if (m->fd >= 0) {
        close(m->fd);
        m->fd = -1;
    }
    unlinkat(m->sp->tmpfd, m->tmpid, 0);    /* gone already after a rename */
    spool_msg_free(m);
}


int
spool_msg_fd(const struct spool_msg *m, off_t *body_off)
{
    *body_off = (off_t)m->body_off;
    return m->finished ? m->fd : -1;
}
