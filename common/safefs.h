/*
 * safefs.h - file-system steps a privileged process can take without
 * following a link someone else planted: open the directory that holds a
 * path, check that nobody but us (or root) can change its entries, and
 * create or open one entry in it by descriptor.
 *
 * CONTRACT  Paths are resolved once, into a directory fd; every later step
 *           is an *at() call on that fd with O_NOFOLLOW / AT_SYMLINK_NOFOLLOW
 *           on the last component.  Symlinks in the *leading* components
 *           are followed (/var/run -> /run is normal); the directory they
 *           lead to is what safefs_dir_trusted() judges.  Except in
 *           safefs_open_dir_nolinks(), which follows none.
 * FAILURE   -1 with errno kept and a sentence in err naming the path and
 *           what is wrong ("owned by uid 65534", "is a symbolic link").
 *           Nothing is logged.
 */
#ifndef MTAD_SAFEFS_H
#define MTAD_SAFEFS_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Open the directory holding path's last component (O_DIRECTORY).  *name
 * points into path, at that component.  "x" means ".". */
int     safefs_open_parent(const char *path, const char **name,
            char *err, size_t errsz);

/* 0 when only root or this process's euid can add, remove or rename
 * entries of the directory dfd: owned by one of them, group write only for
 * group 0, write for others only with the sticky bit.  shown names it. */
int     safefs_dir_trusted(int dfd, const char *shown, char *err,
            size_t errsz);

/* Open the directory path with O_PATH, one component at a time with
 * O_NOFOLLOW from "/" (or "."): a symbolic link anywhere in it is an
 * error (ELOOP), and so is a directory on the way (or path itself) that
 * safefs_dir_trusted() would refuse with uid and (group) gid trusted
 * besides root (EPERM).  For root making rules from a path that a less
 * trusted user may have a hand in.  Returns the fd. */
int     safefs_open_dir_nolinks(const char *path, uid_t uid, gid_t gid,
            const char *shown, char *err, size_t errsz);

/* mkdirat(dfd, name, mode) when missing, then open it with
 * O_DIRECTORY|O_NOFOLLOW: a symlink or non-directory there is an error.
 * *created says whether this call made it.  Returns the fd. */
int     safefs_mkdir_open(int dfd, const char *name, mode_t mode,
            const char *shown, int *created, char *err, size_t errsz);

/* Check an open directory's owner and mode: owner must be euid, 0 or
 * alt_uid ((uid_t)-1: none), no group/other bits in mask. */
int     safefs_check_owner(int fd, uid_t alt_uid, mode_t forbidden,
            const char *shown, char *err, size_t errsz);

/* Open (creating with mode when missing) the regular file name in dfd with
 * flags | O_NOFOLLOW | O_CLOEXEC, and check it: a regular file, one link,
 * owned by this process's euid, not writable by others.  Returns the fd. */
int     safefs_open_file(int dfd, const char *name, int flags, mode_t mode,
            const char *shown, char *err, size_t errsz);

/* The entries of dir/sub whose names do not start with '.', read through
 * sub opened with O_NOFOLLOW: root counting a directory that another user
 * owns (the spool's queue/) lists nothing a link planted there names.
 * -1 with errno (ENOTDIR for a link) when it cannot be read. */
long    safefs_count_entries(const char *dir, const char *sub);

/* Before root reads a file by path (a key, a certificate, a password
 * file): the directory named in path and, when links lead elsewhere, the
 * directory of the file they reach must be trusted (safefs_dir_trusted),
 * and that file must be a regular file (not a FIFO that would block the
 * reader, not a device).  Links are followed (certbot's live/ holds links
 * into archive/): a link is harmless where only root can change it.
 * A path that does not resolve passes: the reader's own open says why.
 * shown names the setting in the message ("tls.key_file"). */
int     safefs_check_read(const char *path, const char *shown, char *err,
            size_t errsz);

/* Who besides root may read a secret file (a private key, the password
 * file) that st describes: 1 with why ("readable or writable by others
 * (mode 0644; ...)") when others may read or write it, or a group other
 * than 0, gid (the workers') and admin_gid (server.admin_group; gid
 * again when none) may; 0 when nobody else may. */
int     safefs_secret_exposed(const struct stat *st, gid_t gid,
            gid_t admin_gid, char *why, size_t whysz);

/* The same for the file at path (links followed: the file read); 0 when
 * it cannot be stat'ed (its reader says why). */
int     safefs_secret_path_exposed(const char *path, gid_t gid,
            gid_t admin_gid, char *why, size_t whysz);
#endif /* MTAD_SAFEFS_H */
