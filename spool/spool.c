/*
 * spool.c - the spool's files: tree set-up, queue ids, the message writer
 * (tmp/ -> queue/ by rename), the reader, delivery state, removal, listing.
 *
 * CONTRACT  See spool.h.  All paths are resolved against directory fds
 *           opened once by spool_open() (openat/renameat), so the hot path
 *           never builds or walks a path.  The writer keeps at most one
 *           spare 256 KiB buffer per spool: a message takes it at
 *           spool_create() and gives it back at spool_finish(), so an idle
 *           worker holds one buffer at most.  The commit rename refuses to
 *           replace an existing queue file (RENAME_NOREPLACE where the file
 *           system supports it).
 * FAILURE   Never logs.  System errors come back as SPOOL_ESYS (errno kept)
 *           or SPOOL_ENOSPC (ENOSPC, EDQUOT) with the failing call and the
 *           path relative to the spool in spool_errstr().  A failed writer
 *           call (commit included) leaves the message for spool_abort().
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

#include "common/safefs.h"
#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

#define SPOOL_WBUF        (256 * 1024)
#define SPOOL_READ_CHUNK  (64 * 1024)
#define SPOOL_HDR_MAX     (64 * 1024 * 1024)  /* envelope or state file */
#define SPOOL_ID_TRIES    64
#define SPOOL_CTR_BITS    12
#define SPOOL_MS_MASK     ((UINT64_C(1) << 44) - 1)   /* 11 hex digits */
#define SPOOL_HAS_STATE   S_IXUSR       /* on queue/<id>: a state was saved */
#define SPOOL_ROOM_MS     10            /* spool_room() looks again after */

struct spool {
    char       *dir;
    int         tmpfd, queuefd, statefd;
    int         fsync;
    unsigned    shard;
    uint64_t    last;               /* last id's ms << 12 | counter */
    char       *spare;              /* one free write buffer, or NULL */
    uint64_t    reserve;            /* bytes new mail leaves free */
    uint64_t    room_budget;        /* bytes new mail may write unchecked */
    uint64_t    room_until_ms;      /* ... until then (monotonic) */
    char        err[512];
};

struct spool_msg {
    struct spool *sp;
    int         fd;                 /* tmp/<id>, -1 once closed */
    int         finished;
    int         err;                /* sticky: a failed write poisons m */
    int         use_reserve;        /* may eat into sp->reserve (bounces) */
    char        id[SPOOL_ID_SIZE];
    char       *wb;                 /* write buffer, NULL after finish */
    size_t      wlen;
    uint64_t    written;            /* bytes handed to write() so far */
    uint64_t    body;               /* body bytes accepted */
    uint64_t    body_off;           /* where the body starts in the file */
    uint64_t    head_off;           /* spool_head_reserve()'s room */
    size_t      head_len;           /* its size, 0 = none */
    int         head_filled;
};

/* Errors of spool_prepare() and spool_open(), which have no spool. */
static char spool_global_err[512];


/* spool_verr - record "<what>: <strerror>" in buf; returns the rc for e. */
static int
spool_verr(char *buf, size_t sz, int e, const char *fmt, va_list ap)
{
    size_t n;

    vsnprintf(buf, sz, fmt, ap);
    n = strlen(buf);
    snprintf(buf + n, sz - n, ": %s", strerror(e));
    errno = e;
    return e == ENOSPC || e == EDQUOT ? SPOOL_ENOSPC : SPOOL_ESYS;
}


/* spool_fail - the current errno as this spool's last error. */
static int __attribute__((format(printf, 2, 3)))
spool_fail(struct spool *sp, const char *fmt, ...)
{
    va_list ap;
    int     e = errno, rc;

    va_start(ap, fmt);
    rc = spool_verr(sp->err, sizeof(sp->err), e, fmt, ap);
    va_end(ap);
    return rc;
}


static int __attribute__((format(printf, 1, 2)))
spool_gfail(const char *fmt, ...)
{
    va_list ap;
    int     e = errno, rc;

    va_start(ap, fmt);
    rc = spool_verr(spool_global_err, sizeof(spool_global_err), e, fmt, ap);
    va_end(ap);
    return rc;
}


/* spool_efmt - a format error (no errno) as the last error. */
static int
spool_efmt(struct spool *sp, const char *what, const char *id)
{
    snprintf(sp->err, sizeof(sp->err), "%s %s: malformed", what, id);
    return SPOOL_EFORMAT;
}


const char *
spool_errstr(const struct spool *sp)
{
    return sp != NULL ? sp->err : spool_global_err;
}


const char *
spool_dir(const struct spool *sp)
{
    return sp->dir;
}


/* ---- set-up ----------------------------------------------------------- */

/* spool_safefail - a safefs error text as the last global error. */
static int
spool_safefail(const char *err)
{
    int e = errno;

    snprintf(spool_global_err, sizeof(spool_global_err), "%s", err);
    errno = e;
    return e == ENOSPC || e == EDQUOT ? SPOOL_ENOSPC : SPOOL_ESYS;
}


/*
 * spool_mkdirat - create (EEXIST fine) and open dfd/name without following
 * a link, refuse it unless it is root's, ours or uid's and closed to group
 * and others, then fchown it to uid/gid (-1: unchanged).  Everything is
 * done on descriptors: the spool is writable by the workers' user, and
 * root must not act by path in it.  Returns the fd or -1.
 */
static int
spool_mkdirat(int dfd, const char *name, const char *shown, uid_t uid,
    gid_t gid)
{
    char err[512];
    int  fd, created;

    fd = safefs_mkdir_open(dfd, name, 0700, shown, &created, err,
        sizeof(err));
    if (fd < 0) {
        spool_safefail(err);
        return -1;
    }
    if (safefs_check_owner(fd, uid, 0077, shown, err, sizeof(err)) < 0) {
        spool_safefail(err);
        close(fd);
        return -1;
    }
    if ((uid != (uid_t)-1 || gid != (gid_t)-1) && fchown(fd, uid, gid) < 0) {
        spool_gfail("chown %s", shown);
        close(fd);
        return -1;
    }
    return fd;
}


/* spool_mkparents - create missing parents of dir (0755, root-owned as
 * the caller is), like mkdir -p; the spool directory itself is 0700. */
static int
spool_mkparents(const char *dir)
{
    char   path[PATH_MAX];
    size_t i;

    if (util_strlcpy(path, dir, sizeof(path)) >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return spool_gfail("spool %s", dir);
    }
    for (i = 1; path[i] != '\0'; i++) {
        if (path[i] != '/')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0755) == -1 && errno != EEXIST)
            return spool_gfail("mkdir %s", path);
        path[i] = '/';
    }
    return SPOOL_OK;
}


/* spool_purge - remove the entries of directory fd (named sub in dir in
 * errors) for which keep() is false.  unlinkat() never follows a link. */
static int
spool_purge(const char *dir, const char *sub, int fd,
    int (*keep)(int queuefd, const char *name), int queuefd)
{
    DIR           *d;
    struct dirent *de;
    int            rc = SPOOL_OK;

    if ((fd = dup(fd)) == -1 || (d = fdopendir(fd)) == NULL) {
        rc = spool_gfail("opendir %s/%s", dir, sub);
        if (fd != -1)
            close(fd);
        return rc;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (keep != NULL && keep(queuefd, de->d_name))
            continue;
        if (unlinkat(fd, de->d_name, 0) == -1 && errno != ENOENT &&
            (errno != EISDIR ||
            unlinkat(fd, de->d_name, AT_REMOVEDIR) == -1)) {
            rc = spool_gfail("unlink %s/%s/%s", dir, sub, de->d_name);
            break;
        }
    }
    if (de == NULL && errno != 0)
        rc = spool_gfail("readdir %s/%s", dir, sub);
    closedir(d);
    return rc;
}


/* spool_state_keep - a state file stays only while its queue file exists;
 * unknown names (not ours) are left alone, tmp leftovers go. */
static int
spool_state_keep(int queuefd, const char *name)
{
    struct stat st;
    int         fd;

    if (!spool_id_valid(name))
        return name[0] != '.';
    if (fstatat(queuefd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;
    /* a state written before queue files carried the mark: mark it now,
     * or the reader would not look for it (best effort: a failure here
     * shows up as a failing save or read later, never as a lost state
     * when the chmod works, and it does for the spool's owner or root).
     * Through an fd opened without following links: root must not chmod
     * by path in a directory the workers can write. */
    if (S_ISREG(st.st_mode) && !(st.st_mode & SPOOL_HAS_STATE) &&
        (fd = openat(queuefd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
        O_CLOEXEC)) >= 0) {
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            (void)fchmod(fd, (st.st_mode & 07777) | SPOOL_HAS_STATE);
        close(fd);
    }
    return 1;
}


int
spool_prepare(const char *dir, uid_t uid, gid_t gid)
{
    static const char *const subs[] = { "tmp", "queue", "state" };
    char        err[512], shown[PATH_MAX + 16];
    const char *name;
    int         fds[3] = { -1, -1, -1 };
    int         pfd, rootfd, rc = SPOOL_OK;
    size_t      i;

    if ((rc = spool_mkparents(dir)) != SPOOL_OK)
        return rc;
    if ((pfd = safefs_open_parent(dir, &name, err, sizeof(err))) < 0)
        return spool_safefail(err);
    rootfd = spool_mkdirat(pfd, name, dir, uid, gid);
    close(pfd);
    if (rootfd < 0)
        return SPOOL_ESYS;
    for (i = 0; i < ARRAY_LEN(subs); i++) {
        snprintf(shown, sizeof(shown), "%s/%s", dir, subs[i]);
        if ((fds[i] = spool_mkdirat(rootfd, subs[i], shown, uid, gid)) < 0) {
            rc = SPOOL_ESYS;
            goto out;
        }
    }
    /* Nothing in tmp/ was ever acknowledged; a state file without its
     * queue file belongs to a message whose removal was interrupted. */
    if ((rc = spool_purge(dir, "tmp", fds[0], NULL, -1)) == SPOOL_OK)
        rc = spool_purge(dir, "state", fds[2], spool_state_keep, fds[1]);
out:
    for (i = 0; i < ARRAY_LEN(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    close(rootfd);
    return rc;
}


int
spool_open(struct spool **spp, const char *dir, int fsync, unsigned shard)
{
    struct spool *sp;
    int           rootfd;
    uint16_t      r;

    *spp = NULL;
    if (shard > 0xff) {
        errno = EINVAL;
        return spool_gfail("spool shard %u", shard);
    }
    if ((rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
        return spool_gfail("open %s", dir);
    sp = xcalloc(1, sizeof(*sp));
    sp->tmpfd = openat(rootfd, "tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    sp->queuefd = openat(rootfd, "queue", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    sp->statefd = openat(rootfd, "state", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (sp->tmpfd == -1 || sp->queuefd == -1 || sp->statefd == -1) {
        int rc = spool_gfail("open %s/{tmp,queue,state}", dir);

        close(rootfd);
        spool_close(sp);
        return rc;
    }
    close(rootfd);
    sp->dir = xstrdup(dir);
    sp->fsync = fsync != 0;
    sp->shard = shard;
    /* The counter starts at a random value so that a worker respawned in
     * the same millisecond as its predecessor does not reuse its ids. */
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = (uint16_t)(getpid() ^ util_wall_ms());
    sp->last = (util_wall_ms() & SPOOL_MS_MASK) << SPOOL_CTR_BITS |
        (r & ((1u << SPOOL_CTR_BITS) - 1));
    *spp = sp;
    return SPOOL_OK;
}


void
spool_close(struct spool *sp)
{
    if (sp == NULL)
        return;
    if (sp->tmpfd >= 0)
        close(sp->tmpfd);
    if (sp->queuefd >= 0)
        close(sp->queuefd);
    if (sp->statefd >= 0)
        close(sp->statefd);
    free(sp->spare);
    free(sp->dir);
    free(sp);
}


/* ---- queue ids -------------------------------------------------------- */

void
spool_new_id(struct spool *sp, char *id)
{
    static const char hex[] = "0123456789ABCDEF";
    uint64_t now = util_wall_ms() & SPOOL_MS_MASK, v;
    unsigned ctr = (unsigned)(sp->last + 1) & ((1u << SPOOL_CTR_BITS) - 1);
    int      i;

    /* The counter keeps running across milliseconds; when the clock stands
     * still or steps back, or the counter wraps within one millisecond,
     * the id is simply the last one plus one, so ids never repeat within
     * the process and still sort by arrival. */
    v = now << SPOOL_CTR_BITS | ctr;
    if (v <= sp->last)
        v = sp->last + 1;
    sp->last = v;
    for (i = 15; i >= 13; i--, v >>= 4)
        id[i] = hex[v & 0xf];
    id[11] = hex[(sp->shard >> 4) & 0xf];
    id[12] = hex[sp->shard & 0xf];
    for (i = 10; i >= 0; i--, v >>= 4)
        id[i] = hex[v & 0xf];
    id[SPOOL_ID_LEN] = '\0';
}


static uint64_t
spool_hexnum(const char *p, int n)
{
    uint64_t v = 0;
    int      i;

    for (i = 0; i < n; i++)
        v = v << 4 | (uint64_t)(p[i] <= '9' ? p[i] - '0' : p[i] - 'A' + 10);
    return v;
}


uint64_t
spool_id_ms(const char *id)
{
    return spool_hexnum(id, 11);
}


unsigned
spool_id_shard(const char *id)
{
    return (unsigned)spool_hexnum(id + 11, 2);
}


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


/* spool_write_all - write n bytes to m's tmp file, retrying short writes;
 * new mail first checks it leaves the reserve (spool_room). */
static int
spool_write_all(struct spool_msg *m, const char *p, size_t n)
{
    ssize_t w;

    if (!m->use_reserve && spool_room(m->sp, n) != SPOOL_OK)
        return m->err = SPOOL_ENOSPC;
    while (n > 0) {
        if ((w = write(m->fd, p, n)) == -1) {
            if (errno == EINTR)
                continue;
            return m->err = spool_fail(m->sp, "write tmp/%s", m->id);
        }
        p += w;
        n -= (size_t)w;
        m->written += (uint64_t)w;
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


/* spool_buf_give - return a write buffer: keep one spare, free the rest. */
static void
spool_buf_give(struct spool *sp, char *wb)
{
    if (wb == NULL)
        return;
    if (sp->spare == NULL)
        sp->spare = wb;
    else
        free(wb);
}


/* spool_tmp_open - a fresh id and its tmp file; skips ids whose tmp file
 * exists (O_EXCL) or that are already in queue/ (checked after the tmp
 * file exists, so a concurrent writer of the same id has renamed already
 * or fails its own O_EXCL). */
static int
spool_tmp_open(struct spool *sp, char *id)
{
    struct stat st;
    int         fd, tries;

    for (tries = 0; tries < SPOOL_ID_TRIES; tries++) {
        spool_new_id(sp, id);
        fd = openat(sp->tmpfd, id, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC,
            0600);
        if (fd == -1) {
            if (errno == EEXIST)
                continue;
            return spool_fail(sp, "open tmp/%s", id);
        }
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
    char             *big;
    int               fd, rc;

    *mp = NULL;
    if (!env->use_reserve && (rc = spool_room(sp, 0)) != SPOOL_OK)
        return rc;
    if ((fd = spool_tmp_open(sp, env->id)) < 0)
        return fd;
    if (env->arrival_ms == 0)
        env->arrival_ms = util_wall_ms();
    m = xcalloc(1, sizeof(*m));
    m->sp = sp;
    m->fd = fd;
    m->use_reserve = env->use_reserve;
    memcpy(m->id, env->id, SPOOL_ID_SIZE);
    m->wb = sp->spare != NULL ? sp->spare : xmalloc(SPOOL_WBUF);
    sp->spare = NULL;
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
        return spool_fail(m->sp, "write tmp/%s", m->id);
    }
    m->body += n;
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
        return spool_fail(m->sp, "reserve tmp/%s", m->id);
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
spool_head_fill(struct spool_msg *m, const void *p, size_t n)
{
    ssize_t w;

    if (m->err != SPOOL_OK)
        return m->err;
    if (m->finished || m->head_len != n || m->head_filled) {
        errno = EINVAL;
        return spool_fail(m->sp, "fill tmp/%s", m->id);
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
            return m->err = spool_fail(m->sp, "pwrite tmp/%s", m->id);
        }
    }
    m->head_filled = 1;
    return SPOOL_OK;
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
            "not filled", m->id);
    }
    spool_size_digits(digits, m->body);
    /* A message that never left the buffer gets its size patched in
     * memory: one write() for the whole file, no pwrite(). */
    if (m->written == 0) {
        memcpy(m->wb + SPOOL_SIZE_OFF, digits, sizeof(digits));
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
        return m->err = spool_fail(m->sp, "pwrite tmp/%s", m->id);
    }
done:
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
        return spool_fail(m->sp, "close tmp/%s", m->id);
    return SPOOL_OK;
}


/* spool_rename - tmp/<id> -> queue/<id>, never replacing a queue file. */
static int
spool_rename(struct spool_msg *m)
{
    struct spool *sp = m->sp;

    if (renameat2(sp->tmpfd, m->id, sp->queuefd, m->id,
        RENAME_NOREPLACE) == 0)
        return SPOOL_OK;
    if (errno == EINVAL &&              /* no RENAME_NOREPLACE here */
        renameat(sp->tmpfd, m->id, sp->queuefd, m->id) == 0)
        return SPOOL_OK;
    return spool_fail(sp, "rename tmp/%s queue/%s", m->id, m->id);
}


int
spool_commit(struct spool_msg *m)
{
    struct spool *sp = m->sp;
    int           rc;

    if ((rc = spool_finish(m)) != SPOOL_OK)
        return rc;
    if (sp->fsync && fsync(m->fd) == -1)
        return spool_fail(sp, "fsync tmp/%s", m->id);
    if ((rc = spool_close_tmp(m)) != SPOOL_OK ||
        (rc = spool_rename(m)) != SPOOL_OK)
        return rc;
    if (sp->fsync && fsync(sp->queuefd) == -1) {
        /* Not durable: take it back, the client will get a 4xx. */
        rc = spool_fail(sp, "fsync queue/");
        unlinkat(sp->queuefd, m->id, 0);
        return rc;
    }
    spool_msg_free(m);
    return SPOOL_OK;
}


int
spool_commit_batch(struct spool *sp, struct spool_msg **ms, size_t n,
    int *rcs)
{
    size_t i, renamed = 0;
    int    rc = SPOOL_OK, e;

    for (i = 0; i < n; i++)
        rcs[i] = spool_finish(ms[i]);
    for (i = 0; i < n; i++) {
        if (rcs[i] != SPOOL_OK)
            continue;
        if ((rcs[i] = spool_close_tmp(ms[i])) == SPOOL_OK &&
            (rcs[i] = spool_rename(ms[i])) == SPOOL_OK)
            renamed++;
    }
    /*
     * One syncfs() after the renames makes the bodies and the renames
     * durable together: one journal commit per batch instead of two (a
     * sync of the data, then one of queue/).  Nothing is acknowledged
     * before it returns.  A crash before that may leave a queue file whose
     * data did not reach the disk; the reader refuses it (its recorded size
     * does not match), and its client, which got no 250, sends it again.
     */
    if (sp->fsync && renamed > 0 && syncfs(sp->queuefd) == -1) {
        e = spool_fail(sp, "syncfs %s", sp->dir);
        for (i = 0; i < n; i++) {
            if (rcs[i] != SPOOL_OK)
                continue;
            unlinkat(sp->queuefd, ms[i]->id, 0);
            rcs[i] = e;
        }
    }
    for (i = 0; i < n; i++) {
        if (rcs[i] == SPOOL_OK) {
            spool_msg_free(ms[i]);
            ms[i] = NULL;
        } else if (rc == SPOOL_OK) {
            rc = rcs[i];
        }
    }
    return rc;
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
    unlinkat(m->sp->tmpfd, m->id, 0);   /* gone already after a rename */
    spool_msg_free(m);
}


/* ---- reader ----------------------------------------------------------- */

/* spool_read_head - read fd from offset 0 until stop() finds its end mark
 * or EOF; returns a malloc'd buffer with *len bytes (NUL-terminated). */
static int
spool_read_head(struct spool *sp, int fd, const char *what, const char *id,
    int whole, char **out, size_t *len)
{
    char   *b = NULL;
    size_t  n = 0, cap = 0;
    ssize_t r;

    for (;;) {
        if (cap - n < SPOOL_READ_CHUNK + 1) {
            cap = cap ? cap * 2 : SPOOL_READ_CHUNK * 2;
            b = xrealloc(b, cap);
        }
        r = pread(fd, b + n, SPOOL_READ_CHUNK, (off_t)n);
        if (r == -1 && errno == EINTR)
            continue;
        if (r == -1) {
            free(b);
            return spool_fail(sp, "read %s/%s", what, id);
        }
        /* An envelope ends at its "end" line: no field holds '\n' or ' ',
         * so the first "\nend\n" is it.  Look only at what is new. */
        if (!whole && memmem(b + (n > 4 ? n - 4 : 0), (size_t)r + (n > 4 ?
            4 : n), "\nend\n", 5) != NULL) {
            n += (size_t)r;
            break;
        }
        n += (size_t)r;
        if (r == 0)
            break;
        if (n > SPOOL_HDR_MAX) {
            free(b);
            return spool_efmt(sp, what, id);
        }
    }
    b[n] = '\0';
    *out = b;
    *len = n;
    return SPOOL_OK;
}


/*
 * spool_state_forget - a damaged state file counts as none: every
 * recipient is pending again.  The message is then delivered (a duplicate
 * for those already done is possible) instead of being stuck for ever;
 * env->state_damaged lets the caller say so, and the next save replaces
 * the file.
 */
static void
spool_state_forget(struct spool_env *env)
{
    size_t i;

    for (i = 0; i < env->nrcpt; i++) {
        free(env->rcpt[i].last_reply);
        free(env->rcpt[i].relay);
        env->rcpt[i].last_reply = NULL;
        env->rcpt[i].relay = NULL;
        env->rcpt[i].status = SPOOL_RCPT_PENDING;
        env->rcpt[i].notified = 0;
    }
    env->next_retry_ms = 0;
    env->attempts = 0;
    env->held = 0;
    env->state_damaged = 1;
}


/* spool_load_state - state/<id> into env if it exists. */
static int
spool_load_state(struct spool *sp, struct spool_env *env)
{
    char   *b;
    size_t  n;
    int     fd, rc;

    if ((fd = openat(sp->statefd, env->id, O_RDONLY | O_CLOEXEC)) == -1)
        return errno == ENOENT ? SPOOL_OK :
            spool_fail(sp, "open state/%s", env->id);
    rc = spool_read_head(sp, fd, "state", env->id, 1, &b, &n);
    close(fd);
    if (rc != SPOOL_OK)
        return rc;
    if (spool_state_parse(b, n, env) != SPOOL_OK)
        spool_state_forget(env);
    free(b);
    return rc;
}


int
spool_msg_open(struct spool *sp, const char *id, int lock,
    struct spool_env **envp, int *fdp, off_t *body_off)
{
    struct spool_env *env = NULL;
    struct stat       st;
    char             *b = NULL;
    size_t            n, used;
    int               fd, rc;

    *envp = NULL;
    if (fdp != NULL)
        *fdp = -1;
    if (!spool_id_valid(id)) {
        snprintf(sp->err, sizeof(sp->err), "bad queue id");
        return SPOOL_EFORMAT;
    }
    if ((fd = openat(sp->queuefd, id, O_RDONLY | O_CLOEXEC)) == -1)
        return errno == ENOENT ? (spool_fail(sp, "open queue/%s", id),
            SPOOL_ENOENT) : spool_fail(sp, "open queue/%s", id);
    if (lock && flock(fd, LOCK_EX | LOCK_NB) == -1) {
        rc = errno == EWOULDBLOCK ? (spool_fail(sp, "flock queue/%s", id),
            SPOOL_ELOCKED) : spool_fail(sp, "flock queue/%s", id);
        goto fail;
    }
    if (fstat(fd, &st) == -1) {
        rc = spool_fail(sp, "stat queue/%s", id);
        goto fail;
    }
    /* Locked, but removed by the previous lock holder (mtactl delete, a
     * finished delivery) between our open and our flock: it is gone. */
    if (st.st_nlink == 0) {
        snprintf(sp->err, sizeof(sp->err), "queue/%s: removed", id);
        rc = SPOOL_ENOENT;
        goto fail;
    }
    if ((rc = spool_read_head(sp, fd, "queue", id, 0, &b, &n)) != SPOOL_OK)
        goto fail;
    if (spool_env_parse(b, n, &env, &used) != SPOOL_OK ||
        strcmp(env->id, id) != 0) {
        rc = spool_efmt(sp, "queue", id);
        goto fail;
    }
    /* A short file was cut off; a longer one was not written by us. */
    if ((uint64_t)st.st_size != used + env->body_size) {
        rc = spool_efmt(sp, "queue", id);
        goto fail;
    }
    /* only a marked file can have a state (spool_state_save()): no open()
     * of a missing state file for a message that never had one */
    env->has_state = (st.st_mode & SPOOL_HAS_STATE) != 0;
    if (env->has_state && (rc = spool_load_state(sp, env)) != SPOOL_OK)
        goto fail;
    free(b);
    *envp = env;
    if (body_off != NULL)
        *body_off = (off_t)used;
    if (fdp != NULL)
        *fdp = fd;
    else
        close(fd);
    return SPOOL_OK;
fail:
    free(b);
    spool_env_free(env);
    close(fd);
    return rc;
}


/* ---- state, removal, listing ------------------------------------------ */

int
spool_state_save(struct spool *sp, const struct spool_env *env)
{
    char    tmp[SPOOL_ID_SIZE + 8], *b;
    size_t  i, n;
    ssize_t w = 0;
    size_t  off = 0;
    int     fd, rc = SPOOL_OK;

    if (!spool_id_valid(env->id))
        return spool_efmt(sp, "state", "(bad id)");
    for (i = 0; i < env->nrcpt; i++)
        if (env->rcpt[i].status < SPOOL_RCPT_PENDING ||
            env->rcpt[i].status > SPOOL_RCPT_BOUNCED ||
            (env->rcpt[i].notified &&
            env->rcpt[i].status != SPOOL_RCPT_BOUNCED))
            return spool_efmt(sp, "state", env->id);
    /* the mark first: a reader that sees no mark finds no state either */
    if (fchmodat(sp->queuefd, env->id, S_IRUSR | S_IWUSR | SPOOL_HAS_STATE,
        0) == -1)
        return errno == ENOENT ? (spool_fail(sp, "chmod queue/%s", env->id),
            SPOOL_ENOENT) : spool_fail(sp, "chmod queue/%s", env->id);
    snprintf(tmp, sizeof(tmp), ".%s.tmp", env->id);
    n = spool_state_render(env, NULL);
    b = xmalloc(n);
    spool_state_render(env, b);
    fd = openat(sp->statefd, tmp, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC,
        0600);
    if (fd == -1) {
        free(b);
        return spool_fail(sp, "open state/%s", tmp);
    }
    while (off < n && ((w = write(fd, b + off, n - off)) > 0 ||
        (w == -1 && errno == EINTR)))
        off += w > 0 ? (size_t)w : 0;
    free(b);
    if (off < n)
        rc = spool_fail(sp, "write state/%s", tmp);
    else if (sp->fsync && fsync(fd) == -1)
        rc = spool_fail(sp, "fsync state/%s", tmp);
    if (close(fd) == -1 && rc == SPOOL_OK && errno != EINTR)
        rc = spool_fail(sp, "close state/%s", tmp);
    if (rc == SPOOL_OK && renameat(sp->statefd, tmp, sp->statefd,
        env->id) == -1)
        rc = spool_fail(sp, "rename state/%s state/%s", tmp, env->id);
    if (rc != SPOOL_OK) {
        unlinkat(sp->statefd, tmp, 0);
        return rc;
    }
    if (sp->fsync && fsync(sp->statefd) == -1)
        return spool_fail(sp, "fsync state/");
    return SPOOL_OK;
}


/* spool_unlink - queue file first, then the state file when it may
 * exist: a state file left behind by a crash in between is removed by the
 * next spool_prepare(). */
static int
spool_unlink(struct spool *sp, const char *id, int has_state)
{
    int rc = SPOOL_OK;

    if (!spool_id_valid(id)) {
        snprintf(sp->err, sizeof(sp->err), "bad queue id");
        return SPOOL_EFORMAT;
    }
    if (unlinkat(sp->queuefd, id, 0) == -1)
        rc = errno == ENOENT ? (spool_fail(sp, "unlink queue/%s", id),
            SPOOL_ENOENT) : spool_fail(sp, "unlink queue/%s", id);
    if (has_state && rc != SPOOL_ESYS && unlinkat(sp->statefd, id, 0) == -1 &&
        errno != ENOENT)
        rc = spool_fail(sp, "unlink state/%s", id);
    return rc;
}


int
spool_remove(struct spool *sp, const char *id)
{
    return spool_unlink(sp, id, 1);
}


int
spool_remove_env(struct spool *sp, const struct spool_env *env)
{
    return spool_unlink(sp, env->id, env->has_state);
}


static int
spool_idcmp(const void *a, const void *b)
{
    return memcmp(a, b, SPOOL_ID_LEN);
}


int
spool_list(struct spool *sp, char (**ids)[SPOOL_ID_SIZE], size_t *np)
{
    char          (*v)[SPOOL_ID_SIZE] = NULL;
    size_t         n = 0, cap = 0;
    DIR           *d;
    struct dirent *de;
    int            fd;

    *ids = NULL;
    *np = 0;
    if ((fd = openat(sp->queuefd, ".", O_RDONLY | O_DIRECTORY |
        O_CLOEXEC)) == -1)
        return spool_fail(sp, "open queue/");
    if ((d = fdopendir(fd)) == NULL) {
        int rc = spool_fail(sp, "opendir queue/");

        close(fd);
        return rc;
    }
    while ((errno = 0, de = readdir(d)) != NULL) {
        if (!spool_id_valid(de->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            v = xrealloc(v, cap * sizeof(*v));
        }
        memcpy(v[n++], de->d_name, SPOOL_ID_SIZE);
    }
    if (errno != 0) {
        int rc = spool_fail(sp, "readdir queue/");

        closedir(d);
        free(v);
        return rc;
    }
    closedir(d);
    if (n > 0)
        qsort(v, n, sizeof(*v), spool_idcmp);
    *ids = v;
    *np = n;
    return SPOOL_OK;
}
