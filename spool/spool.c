/*
 * spool.c - the spool's files: errors, queue ids, the reader, delivery
 * state, removal, listing.  spool_dir.c sets the tree up and opens it;
 * spool_write.c is the message writer (tmp/ -> queue/ by rename).
 *
 * CONTRACT  See spool.h.  All paths are resolved against directory fds
 *           opened once by spool_open() (openat/renameat), so the hot path
 *           never builds or walks a path.  A message takes a 256 KiB
 *           write buffer at spool_create() and gives it back at
 *           spool_finish(); the spool keeps up to SPOOL_WBUF_SPARES of
 *           them free for the next messages, and spool_pool_trim() frees
 *           all but one once a call finds no message begun since the
 *           one before, so an idle worker holds one buffer.  The commit rename refuses to
 *           replace an existing queue file (RENAME_NOREPLACE, or a link()
 *           where the file system lacks it).
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

#include "common/safefs.h"
#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

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
int __attribute__((format(printf, 2, 3)))
spool_fail(struct spool *sp, const char *fmt, ...)
{
    va_list ap;
    int     e = errno, rc;

    va_start(ap, fmt);
    rc = spool_verr(sp->err, sizeof(sp->err), e, fmt, ap);
    va_end(ap);
    return rc;
}


int __attribute__((format(printf, 1, 2)))
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


/* spool_safefail - a safefs error text as the last global error. */
int
spool_safefail(const char *err)
{
    int e = errno;

    snprintf(spool_global_err, sizeof(spool_global_err), "%s", err);
    errno = e;
    return e == ENOSPC || e == EDQUOT ? SPOOL_ENOSPC : SPOOL_ESYS;
}


/* ---- queue ids -------------------------------------------------------- */

/* spool_ctr_bits - bits of the running counter: all 12 of the last three
 * digits, or what the writer number (spool_set_writer) leaves of them. */
static unsigned
spool_ctr_bits(const struct spool *sp)
{
    return sp->writer >= 0 ? SPOOL_CTR_BITS - SPOOL_WRITER_BITS :
        SPOOL_CTR_BITS;
}


/* spool_seed - the counter's start: now, and a random count so that a
 * process started in the same millisecond as its predecessor does not
 * begin where that one began. */
void
spool_id_seed(struct spool *sp)
{
    unsigned bits = spool_ctr_bits(sp);
    uint16_t r;

    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = (uint16_t)(getpid() ^ util_wall_ms());
    sp->last = (util_wall_ms() & SPOOL_MS_MASK) << bits |
        (r & ((1u << bits) - 1));
}


void
spool_set_writer(struct spool *sp, unsigned writer)
{
    sp->writer = (int)(writer & (SPOOL_WRITERS - 1));
    spool_id_seed(sp);
}


void
spool_new_id(struct spool *sp, char *id)
{
    static const char hex[] = "0123456789ABCDEF";
    unsigned bits = spool_ctr_bits(sp);
    uint64_t now = util_wall_ms() & SPOOL_MS_MASK, v, low;
    unsigned ctr = (unsigned)(sp->last + 1) & ((1u << bits) - 1);
    int      i;

    /* The counter keeps running across milliseconds; when the clock stands
     * still or steps back, or the counter wraps within one millisecond,
     * the id is simply the last one plus one, so ids never repeat within
     * the process and still sort by arrival. */
    v = now << bits | ctr;
    if (v <= sp->last)
        v = sp->last + 1;
    sp->last = v;
    /* the last three digits: the writer number above the counter */
    low = v & ((UINT64_C(1) << bits) - 1);
    if (sp->writer >= 0)
        low |= (uint64_t)sp->writer << bits;
    v >>= bits;
    for (i = 15; i >= 13; i--, low >>= 4)
        id[i] = hex[low & 0xf];
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
        /* A regular file reads short only at its end: no extra pread()
         * to be told 0 (a state file is replaced by rename, never
         * written in place, so it does not grow under an open fd). */
        if (r < SPOOL_READ_CHUNK)
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
        free(env->rcpt[i].tls);
        free(env->rcpt[i].cls);
        env->rcpt[i].last_reply = NULL;
        env->rcpt[i].relay = NULL;
        env->rcpt[i].tls = NULL;
        env->rcpt[i].cls = NULL;
        env->rcpt[i].status = SPOOL_RCPT_PENDING;
        env->rcpt[i].notified = 0;
        env->rcpt[i].delay_warned = 0;
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

    /* no link followed, no FIFO waited on: mtactl reads this as root in
     * a directory the workers' user owns */
    if ((fd = openat(sp->statefd, env->id, O_RDONLY | O_NOFOLLOW |
        O_NONBLOCK | O_CLOEXEC)) == -1)
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


/* spool_moved - a queue file opened as queue/<id> turned out not to be
 * what its name says: malformed, unless the name has gone to another
 * file (or none) since the open.  Then the file was delivered and moved
 * to tmp/ to carry a new message (spool_remove_fd), and what the reader
 * wanted is gone: SPOOL_ENOENT, as for a removal. */
static int
spool_moved(struct spool *sp, const char *id, const struct stat *opened)
{
    struct stat now;

    if (fstatat(sp->queuefd, id, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        now.st_ino == opened->st_ino && now.st_dev == opened->st_dev)
        return spool_efmt(sp, "queue", id);
    snprintf(sp->err, sizeof(sp->err), "queue/%s: removed", id);
    return SPOOL_ENOENT;
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
    /* as spool_load_state(): mtactl opens this as root */
    if ((fd = openat(sp->queuefd, id, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
        O_CLOEXEC)) == -1)
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
    if (!S_ISREG(st.st_mode)) {
        rc = spool_efmt(sp, "queue", id);
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
        rc = spool_moved(sp, id, &st);
        goto fail;
    }
    /* A short file was cut off; a longer one was not written by us. */
    if ((uint64_t)st.st_size != used + env->body_size) {
        rc = spool_moved(sp, id, &st);
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

static void spool_sched_mark(struct spool *sp, const struct spool_env *env);


/* spool_chmod_id - chmod queue/<id> through a descriptor, never a link:
 * mtactl does this as root with the workers' user's effective ids, and
 * that user can put anything at the name (errno kept for the caller). */
static int
spool_chmod_id(struct spool *sp, const char *id, mode_t mode)
{
    struct stat st;
    int         fd, rc = -1, e;

    fd = openat(sp->queuefd, id, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
        O_CLOEXEC);
    if (fd == -1)
        return -1;
    if (fstat(fd, &st) == 0) {
        if (S_ISREG(st.st_mode))
            rc = fchmod(fd, mode);
        else
            errno = EINVAL;
    }
    e = errno;
    close(fd);
    errno = e;
    return rc;
}

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
    if (spool_chmod_id(sp, env->id, S_IRUSR | S_IWUSR | SPOOL_HAS_STATE) ==
        -1)
        return errno == ENOENT ? (spool_fail(sp, "chmod queue/%s", env->id),
            SPOOL_ENOENT) : spool_fail(sp, "chmod queue/%s", env->id);
    snprintf(tmp, sizeof(tmp), ".%s.tmp", env->id);
    n = spool_state_render(env, NULL);
    b = xmalloc(n);
    spool_state_render(env, b);
    /* a new file, never one (or a link) someone left at the name */
    if (unlinkat(sp->statefd, tmp, 0) == -1 && errno != ENOENT) {
        free(b);
        return spool_fail(sp, "unlink state/%s", tmp);
    }
    fd = openat(sp->statefd, tmp, O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY |
        O_CLOEXEC, 0600);
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
    spool_sched_mark(sp, env);
    return SPOOL_OK;
}


/* spool_sched_mark - after a state is saved: the queue file's mtime
 * becomes env's next retry and its mode says held or not, then
 * SPOOL_SCHED_OK says both are valid (see spool_sched_peek).  The
 * mark-first chmod of spool_state_save() cleared SPOOL_SCHED_OK before
 * the new state appeared, so a crash in between leaves it clear, never
 * stale.  Best effort: when a call fails the bit stays clear and a
 * reader opens the files instead. */
static void
spool_sched_mark(struct spool *sp, const struct spool_env *env)
{
    struct timespec ts[2];
    mode_t          mode = S_IRUSR | S_IWUSR | SPOOL_HAS_STATE |
        SPOOL_SCHED_OK | (env->held ? SPOOL_SCHED_HELD : 0);

    ts[0].tv_sec = 0;
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_sec = (time_t)(env->next_retry_ms / 1000);
    ts[1].tv_nsec = (long)(env->next_retry_ms % 1000) * 1000000L;
    if (utimensat(sp->queuefd, env->id, ts, AT_SYMLINK_NOFOLLOW) == 0)
        (void)spool_chmod_id(sp, env->id, mode);
}


int
spool_sched_peek(struct spool *sp, const char *id, uint64_t *next_retry_ms,
    int *held, int *marked)
{
    struct stat st;

    *next_retry_ms = 0;
    *held = 0;
    if (marked != NULL)
        *marked = 0;
    if (fstatat(sp->queuefd, id, &st, AT_SYMLINK_NOFOLLOW) == -1)
        return errno == ENOENT ? (spool_fail(sp, "stat queue/%s", id),
            SPOOL_ENOENT) : spool_fail(sp, "stat queue/%s", id);
    if (marked != NULL)
        *marked = (st.st_mode & SPOOL_HAS_STATE) != 0;
    if (!(st.st_mode & SPOOL_HAS_STATE))
        return SPOOL_OK;                /* never tried: due now */
    if (!(st.st_mode & SPOOL_SCHED_OK)) {
        snprintf(sp->err, sizeof(sp->err), "queue/%s: no schedule in the "
            "inode", id);
        return SPOOL_EFORMAT;
    }
    *next_retry_ms = (uint64_t)st.st_mtim.tv_sec * 1000 +
        (uint64_t)st.st_mtim.tv_nsec / 1000000;
    *held = (st.st_mode & SPOOL_SCHED_HELD) != 0;
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


/* spool_list_at - the valid ids in directory dirfd (what: its name in
 * errors), sorted. */
static int
spool_list_at(struct spool *sp, int dirfd, const char *what,
    char (**ids)[SPOOL_ID_SIZE], size_t *np)
{
    char          (*v)[SPOOL_ID_SIZE] = NULL;
    size_t         n = 0, cap = 0;
    DIR           *d;
    struct dirent *de;
    int            fd;

    *ids = NULL;
    *np = 0;
    if ((fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY |
        O_CLOEXEC)) == -1)
        return spool_fail(sp, "open %s/", what);
    if ((d = fdopendir(fd)) == NULL) {
        int rc = spool_fail(sp, "opendir %s/", what);

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
        int rc = spool_fail(sp, "readdir %s/", what);

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


int
spool_list(struct spool *sp, char (**ids)[SPOOL_ID_SIZE], size_t *np)
{
    return spool_list_at(sp, sp->queuefd, "queue", ids, np);
}


int
spool_state_list(struct spool *sp, char (**ids)[SPOOL_ID_SIZE], size_t *np)
{
    return spool_list_at(sp, sp->statefd, "state", ids, np);
}


int
spool_state_adopt(struct spool *sp, const char *id)
{
    struct stat st;
    int         fd;

    if (!spool_id_valid(id))
        return SPOOL_EFORMAT;
    /* through an fd opened without following links, like every change */
    if ((fd = openat(sp->queuefd, id, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
        O_CLOEXEC)) == -1)
        return errno == ENOENT ? (spool_fail(sp, "open queue/%s", id),
            SPOOL_ENOENT) : spool_fail(sp, "open queue/%s", id);
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        !(st.st_mode & SPOOL_HAS_STATE) &&
        fchmod(fd, (st.st_mode & 07777) | SPOOL_HAS_STATE) == -1) {
        int rc = spool_fail(sp, "chmod queue/%s", id);

        close(fd);
        return rc;
    }
    close(fd);
    return SPOOL_OK;
}


int
spool_state_orphan(struct spool *sp, const char *id)
{
    struct stat st;

    if (!spool_id_valid(id))
        return SPOOL_EFORMAT;
    if (fstatat(sp->queuefd, id, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return SPOOL_OK;                /* its message is there: kept */
    if (errno != ENOENT)
        return spool_fail(sp, "stat queue/%s", id);
    if (unlinkat(sp->statefd, id, 0) == -1 && errno != ENOENT)
        return spool_fail(sp, "unlink state/%s", id);
    return SPOOL_ENOENT;
}
