/*
 * spool_dir.c - the spool tree: spool_prepare() creates and checks it
 * (as root, by descriptors only), spool_open() opens its directories once,
 * spool_close().  See the CONTRACT in spool.c.
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
#include <sys/vfs.h>

#include "common/safefs.h"
#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

/* ---- set-up ----------------------------------------------------------- */

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
 * errors) for which keep(ctx, name) is false, counting them in *n when n
 * is not NULL.  unlinkat() never follows a link. */
static int
spool_purge(const char *dir, const char *sub, int fd,
    int (*keep)(int ctx, const char *name), int ctx, int *n)
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
        if (keep != NULL && keep(ctx, de->d_name))
            continue;
        if (unlinkat(fd, de->d_name, 0) == -1 && errno != ENOENT &&
            (errno != EISDIR ||
            unlinkat(fd, de->d_name, AT_REMOVEDIR) == -1)) {
            rc = spool_gfail("unlink %s/%s/%s", dir, sub, de->d_name);
            break;
        }
        if (n != NULL)
            (*n)++;
    }
    if (de == NULL && errno != 0)
        rc = spool_gfail("readdir %s/%s", dir, sub);
    closedir(d);
    return rc;
}


/* spool_state_keep_named - spool_prepare_tree(): only the leftovers of an
 * interrupted state save (".<id>.tmp") go; no stat() per file. */
static int
spool_state_keep_named(int queuefd, const char *name)
{
    (void)queuefd;
    return name[0] != '.';
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


static int spool_prepare_any(const char *dir, uid_t uid, gid_t gid,
            int states);

int
spool_prepare(const char *dir, uid_t uid, gid_t gid)
{
    return spool_prepare_any(dir, uid, gid, 1);
}


int
spool_prepare_tree(const char *dir, uid_t uid, gid_t gid)
{
    return spool_prepare_any(dir, uid, gid, 0);
}


int
spool_parent_trusted(int pfd, const char *dir, char *err, size_t errsz)
{
    struct stat st;

    if (safefs_dir_trusted(pfd, dir, err, errsz) != 0)
        return -1;
    /* sticky is not enough here: the spool directory is the workers'
     * user's, and in a sticky directory an owner may rename its own */
    if (fstat(pfd, &st) == 0 && (st.st_mode & S_IWOTH)) {
        snprintf(err, errsz, "%s: the directory holding it is writable by "
            "anyone (mode %04o); give the spool a directory of its own "
            "that only root may change, e.g. /dev/shm/mtad/spool", dir,
            (unsigned)st.st_mode & 07777);
        return -1;
    }
    return 0;
}


static int
spool_prepare_any(const char *dir, uid_t uid, gid_t gid, int states)
{
    /* events/: the delivery events' segments (events/events.h) */
    static const char *const subs[] = { "tmp", "queue", "state", "events" };
    char        err[512], shown[PATH_MAX + 16];
    const char *name;
    int         fds[4] = { -1, -1, -1, -1 };
    int         pfd, rootfd, rc = SPOOL_OK;
    size_t      i;

    if ((rc = spool_mkparents(dir)) != SPOOL_OK)
        return rc;
    if ((pfd = safefs_open_parent(dir, &name, err, sizeof(err))) < 0)
        return spool_safefail(err);
    /* the tree goes to another (less trusted) user: it must not be able
     * to swap the spool directory for a link under root */
    if (uid != (uid_t)-1 && uid != geteuid() &&
        spool_parent_trusted(pfd, dir, err, sizeof(err)) != 0) {
        close(pfd);
        return spool_safefail(err);
    }
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
    if ((rc = spool_purge(dir, "tmp", fds[0], NULL, -1, NULL)) == SPOOL_OK)
        rc = spool_purge(dir, "state", fds[2], states ? spool_state_keep :
            spool_state_keep_named, fds[1], NULL);
out:
    for (i = 0; i < ARRAY_LEN(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    close(rootfd);
    return rc;
}


/* spool_fs_is_ram - tmpfs or ramfs: pages in memory, nothing a crash of
 * the machine would not take anyway (spool_pool.c), and freeing a file's
 * pages costs less than handing it to another thread (spool_reap.c). */
static int
spool_fs_is_ram(int fd)
{
    struct statfs fs;

    if (fstatfs(fd, &fs) != 0)
        return 0;
    return (unsigned long)fs.f_type == 0x01021994UL ||   /* tmpfs */
        (unsigned long)fs.f_type == 0x858458F6UL;        /* ramfs */
}


/* spool_close_is_quiet - is fd's file system one whose close() writes
 * nothing back, so that it cannot report a delayed write error?  Local
 * file systems write back from the page cache later, whatever close()
 * does; network ones (NFS, CIFS, FUSE) may flush and fail at close(),
 * which is why the writer closes before the commit rename there.  Only
 * the known local ones count: anything else is treated as network. */
static int
spool_close_is_quiet(int fd)
{
    struct statfs fs;

    if (fstatfs(fd, &fs) != 0)
        return 0;
    switch ((unsigned long)fs.f_type) {
    case 0x01021994UL:              /* tmpfs */
    case 0x0000EF53UL:              /* ext2/3/4 */
    case 0x58465342UL:              /* xfs */
    case 0x9123683EUL:              /* btrfs */
        return 1;
    default:
        return 0;
    }
}


#define SPOOL_SUBDIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

int
spool_open(struct spool **spp, const char *dir, int fsync, unsigned shard)
{
    struct spool *sp;
    int           rootfd;

    *spp = NULL;
    if (shard > 0xff) {
        errno = EINVAL;
        return spool_gfail("spool shard %u", shard);
    }
    if ((rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
        O_CLOEXEC)) == -1)
        return spool_gfail("open %s", dir);
    sp = xcalloc(1, sizeof(*sp));
    /* never through a link: a worker opens these while still root, and
     * the workers' user owns the directory they are in */
    sp->tmpfd = openat(rootfd, "tmp", SPOOL_SUBDIR_FLAGS);
    sp->queuefd = openat(rootfd, "queue", SPOOL_SUBDIR_FLAGS);
    sp->statefd = openat(rootfd, "state", SPOOL_SUBDIR_FLAGS);
    if (sp->tmpfd == -1 || sp->queuefd == -1 || sp->statefd == -1) {
        int rc = spool_gfail("open %s/{tmp,queue,state}", dir);

        close(rootfd);
        spool_close(sp);
        return rc;
    }
    close(rootfd);
    sp->close_quiet = spool_close_is_quiet(sp->tmpfd);
    sp->dir = xstrdup(dir);
    sp->fsync = fsync != 0;
    sp->in_ram = spool_fs_is_ram(sp->tmpfd);
    sp->shard = shard;
    sp->writer = -1;
    spool_id_seed(sp);
    *spp = sp;
    return SPOOL_OK;
}


/* spool_id_writer - the writer number an id carries in the top bits of
 * its last three digits (spool_new_id), or -1 for what is no id. */
static int
spool_id_writer(const char *name)
{
    unsigned low = 0;
    int      i;

    if (!spool_id_valid(name))
        return -1;
    for (i = SPOOL_ID_LEN - 3; i < SPOOL_ID_LEN; i++)
        low = low << 4 | (unsigned)(name[i] <= '9' ? name[i] - '0' :
            name[i] - 'A' + 10);
    return (int)(low >> (SPOOL_CTR_BITS - SPOOL_WRITER_BITS));
}


/* spool_tmp_keep - spool_tmp_sweep(): all but tmp/<id> and tmp/.<id>
 * whose id carries this writer number. */
static int
spool_tmp_keep(int writer, const char *name)
{
    return spool_id_writer(name + (name[0] == '.')) != writer;
}


int
spool_tmp_sweep(struct spool *sp)
{
    int n = 0, rc;

    if (sp->writer < 0)
        return 0;
    rc = spool_purge(sp->dir, "tmp", sp->tmpfd, spool_tmp_keep, sp->writer,
        &n);
    if (rc != SPOOL_OK) {
        snprintf(sp->err, sizeof(sp->err), "%s", spool_errstr(NULL));
        return rc;
    }
    return n;
}


void
spool_close(struct spool *sp)
{
    if (sp == NULL)
        return;
    spool_sync_free(sp);            /* joins its thread first */
    spool_reap_free(sp);            /* ... and this one */
    if (sp->tmpfd >= 0) {
        spool_pool_drain(sp);       /* unlinks in tmp/ */
        close(sp->tmpfd);
    }
    if (sp->queuefd >= 0)
        close(sp->queuefd);
    if (sp->statefd >= 0)
        close(sp->statefd);
    while (sp->nspare > 0)
        free(sp->spare[--sp->nspare]);
    free(sp->dir);
    free(sp);
}
