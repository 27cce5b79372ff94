/*
 * safefs.c - see safefs.h.  Used by the master (root) for the spool, the
 * routes db, the pid file and the control socket.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/util.h"
#include "common/safefs.h"

static int
safefs_fail(char *err, size_t errsz, int e, const char *fmt, const char *a,
    const char *b)
{
    snprintf(err, errsz, fmt, a, b);
    errno = e;
    return -1;
}

int
safefs_open_parent(const char *path, const char **name, char *err,
    size_t errsz)
{
    char        dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t      n;
    int         fd;

    if (slash == NULL) {
        *name = path;
        util_strlcpy(dir, ".", sizeof(dir));
    } else {
        n = (size_t)(slash - path);
        if (n == 0)
            n = 1;                  /* "/name": the root directory */
        if (n >= sizeof(dir))
            return safefs_fail(err, errsz, ENAMETOOLONG, "%s: %s", path,
                "path too long");
        memcpy(dir, path, n);
        dir[n] = '\0';
        *name = slash + 1;
    }
    if (**name == '\0' || strcmp(*name, ".") == 0 || strcmp(*name, "..") == 0)
        return safefs_fail(err, errsz, EINVAL, "%s: %s", path,
            "must name a file, not a directory");
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return safefs_fail(err, errsz, errno, "%s: %s", dir, strerror(errno));
    return fd;
}

/* safefs_dir_why - 0 when only root, euid, uid or (group) gid can add,
 * remove or rename entries of the directory st describes; else why. */
static int
safefs_dir_why(const struct stat *st, uid_t uid, gid_t gid, char *why,
    size_t whysz)
{
    if (st->st_uid != 0 && st->st_uid != geteuid() && st->st_uid != uid)
        snprintf(why, whysz, "directory owned by uid %u, not by root "
            "or uid %u", (unsigned)st->st_uid, (unsigned)uid);
    else if ((st->st_mode & S_IWGRP) && st->st_gid != 0 && st->st_gid != gid)
        snprintf(why, whysz, "directory writable by group %u "
            "(mode %04o)", (unsigned)st->st_gid,
            (unsigned)st->st_mode & 07777);
    else if ((st->st_mode & S_IWOTH) && !(st->st_mode & S_ISVTX))
        snprintf(why, whysz, "directory writable by anyone "
            "(mode %04o)", (unsigned)st->st_mode & 07777);
    else
        return 0;
    return -1;
}

int
safefs_dir_trusted(int dfd, const char *shown, char *err, size_t errsz)
{
    struct stat st;
    char        why[96];

    if (fstat(dfd, &st) < 0)
        return safefs_fail(err, errsz, errno, "%s: %s", shown,
            strerror(errno));
    if (safefs_dir_why(&st, geteuid(), 0, why, sizeof(why)) == 0)
        return 0;
    return safefs_fail(err, errsz, EPERM, "%s: %s", shown, why);
}

/* safefs_step - from the trusted directory dfd, open its entry name (a
 * directory, never through a link) with O_PATH.  path and at (the end of
 * name in path) only name things in err. */
static int
safefs_step(int dfd, const char *name, uid_t uid, gid_t gid,
    const char *path, size_t at, const char *shown, char *err, size_t errsz)
{
    struct stat st;
    char        why[96];
    int         fd, e;
    int         known = fstat(dfd, &st) == 0;

    if (!known)
        util_strlcpy(why, strerror(errno), sizeof(why));
    if (!known || safefs_dir_why(&st, uid, gid, why, sizeof(why)) != 0) {
        snprintf(err, errsz, "%s: the directory holding '%.*s': %s; "
            "refusing it", shown, (int)at, path, why);
        errno = EPERM;
        return -1;
    }
    fd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    e = errno;
    if ((e == ENOTDIR || e == ELOOP) && fstatat(dfd, name, &st,
        AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        snprintf(err, errsz, "%s: '%.*s' is a symbolic link; refusing to "
            "follow it", shown, (int)at, path);
        e = ELOOP;
    } else {
        snprintf(err, errsz, "%s: '%.*s': %s", shown, (int)at, path,
            strerror(e));
    }
    errno = e;
    return -1;
}

int
safefs_open_dir_nolinks(const char *path, uid_t uid, gid_t gid,
    const char *shown, char *err, size_t errsz)
{
    char        name[NAME_MAX + 1];
    const char *p = path, *end;
    struct stat st;
    char        why[96];
    int         dfd, fd;

    dfd = open(*path == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return safefs_fail(err, errsz, errno, "%s: %s", shown,
            strerror(errno));
    for (;;) {
        while (*p == '/')
            p++;
        if (*p == '\0')
            break;
        end = strchrnul(p, '/');
        if ((size_t)(end - p) > NAME_MAX) {
            close(dfd);
            return safefs_fail(err, errsz, ENAMETOOLONG, "%s: %s", shown,
                "path too long");
        }
        memcpy(name, p, (size_t)(end - p));
        name[end - p] = '\0';
        fd = safefs_step(dfd, name, uid, gid, path, (size_t)(end - path),
            shown, err, errsz);
        close(dfd);
        if (fd < 0)
            return -1;
        dfd = fd;
        p = end;
    }
    if (fstat(dfd, &st) < 0)
        util_strlcpy(why, strerror(errno), sizeof(why));
    else if (safefs_dir_why(&st, uid, gid, why, sizeof(why)) == 0)
        return dfd;
    close(dfd);
    return safefs_fail(err, errsz, EPERM, "%s: %s", shown, why);
}

int
safefs_check_owner(int fd, uid_t alt_uid, mode_t forbidden, const char *shown,
    char *err, size_t errsz)
{
    struct stat st;
    char        why[96];

    if (fstat(fd, &st) < 0)
        return safefs_fail(err, errsz, errno, "%s: %s", shown,
            strerror(errno));
    if (st.st_uid != 0 && st.st_uid != geteuid() &&
        (alt_uid == (uid_t)-1 || st.st_uid != alt_uid))
        snprintf(why, sizeof(why), "owned by uid %u (expected %u or %u); "
            "refusing to adopt it", (unsigned)st.st_uid, (unsigned)geteuid(),
            (unsigned)(alt_uid == (uid_t)-1 ? 0 : alt_uid));
    else if (st.st_mode & forbidden)
        snprintf(why, sizeof(why), "mode %04o gives access to group or "
            "others; refusing it", (unsigned)st.st_mode & 07777);
    else
        return 0;
    return safefs_fail(err, errsz, EPERM, "%s: %s", shown, why);
}

int
safefs_mkdir_open(int dfd, const char *name, mode_t mode, const char *shown,
    int *created, char *err, size_t errsz)
{
    int fd;

    *created = 0;
    if (mkdirat(dfd, name, mode) == 0)
        *created = 1;
    else if (errno != EEXIST)
        return safefs_fail(err, errsz, errno, "mkdir %s: %s", shown,
            strerror(errno));
    fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        struct stat st;
        int         e = errno;

        if (e == ENOTDIR && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0
            && S_ISLNK(st.st_mode))
            e = ELOOP;              /* O_DIRECTORY said ENOTDIR first */
        return safefs_fail(err, errsz, e, "%s: %s", shown,
            e == ELOOP ? "is a symbolic link; refusing to follow it" :
            e == ENOTDIR ? "exists and is not a directory" : strerror(e));
    }
    return fd;
}

int
safefs_open_file(int dfd, const char *name, int flags, mode_t mode,
    const char *shown, char *err, size_t errsz)
{
    struct stat st;
    char        why[96];
    int         fd, e;

    fd = openat(dfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0)
        return safefs_fail(err, errsz, errno, "%s: %s", shown,
            errno == ELOOP ? "is a symbolic link; refusing to follow it" :
            strerror(errno));
    if (fstat(fd, &st) < 0) {
        e = errno;
        close(fd);
        return safefs_fail(err, errsz, e, "%s: %s", shown, strerror(e));
    }
    if (!S_ISREG(st.st_mode))
        snprintf(why, sizeof(why), "not a regular file");
    else if (st.st_nlink != 1)
        snprintf(why, sizeof(why), "has %lu hard links (expected 1)",
            (unsigned long)st.st_nlink);
    else if (st.st_uid != geteuid())
        snprintf(why, sizeof(why), "owned by uid %u, not by uid %u",
            (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & S_IWOTH)
        snprintf(why, sizeof(why), "writable by anyone (mode %04o)",
            (unsigned)st.st_mode & 07777);
    else {
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        return fd;
    }
    close(fd);
    return safefs_fail(err, errsz, EPERM, "%s: %s", shown, why);
}


long
safefs_count_entries(const char *dir, const char *sub)
{
    struct dirent *e;
    DIR           *d;
    long           n = 0;
    int            dfd, fd, saved;

    if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -1;
    fd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    saved = errno;
    close(dfd);
    if (fd < 0 || (d = fdopendir(fd)) == NULL) {
        if (fd >= 0) {
            saved = errno;
            close(fd);
        }
        errno = saved;
        return -1;
    }
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}


/* safefs_trusted_parent - path's directory passes safefs_dir_trusted. */
static int
safefs_trusted_parent(const char *path, const char *shown, char *err,
    size_t errsz)
{
    const char *name;
    char        what[PATH_MAX + 64];
    int         dfd = safefs_open_parent(path, &name, err, errsz), rc;

    if (dfd < 0)
        return -1;
    snprintf(what, sizeof(what), "%s '%s'", shown, path);
    rc = safefs_dir_trusted(dfd, what, err, errsz);
    close(dfd);
    return rc;
}

int
safefs_check_read(const char *path, const char *shown, char *err,
    size_t errsz)
{
    char        real[PATH_MAX], what[PATH_MAX + 64];
    struct stat st;

    if (realpath(path, real) == NULL)
        return 0;                   /* the reader's own open says why */
    if (safefs_trusted_parent(path, shown, err, errsz) != 0 ||
        (strcmp(real, path) != 0 &&
         safefs_trusted_parent(real, shown, err, errsz) != 0))
        return -1;
    snprintf(what, sizeof(what), "%s '%s'", shown, path);
    if (stat(real, &st) != 0)
        return safefs_fail(err, errsz, errno, "%s: %s", what, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return safefs_fail(err, errsz, EINVAL, "%s: %s", what,
            "not a regular file");
    return 0;
}

int
safefs_secret_exposed(const struct stat *st, gid_t gid, gid_t admin_gid,
    char *why, size_t whysz)
{
    unsigned mode = (unsigned)st->st_mode & 07777;

    if (st->st_mode & (S_IROTH | S_IWOTH))
        snprintf(why, whysz, "readable or writable by others (mode %04o; "
            "chmod 0600 or 0640)", mode);
    else if ((st->st_mode & (S_IRGRP | S_IWGRP)) && st->st_gid != 0 &&
        st->st_gid != gid && st->st_gid != admin_gid)
        snprintf(why, whysz, "readable or writable by group %u (mode %04o; "
            "chmod 0600, or give it group root, the workers' or "
            "server.admin_group)", (unsigned)st->st_gid, mode);
    else
        return 0;
    return 1;
}

int
safefs_secret_path_exposed(const char *path, gid_t gid, gid_t admin_gid,
    char *why, size_t whysz)
{
    struct stat st;

    if (stat(path, &st) != 0)
        return 0;
    return safefs_secret_exposed(&st, gid, admin_gid, why, whysz);
}
