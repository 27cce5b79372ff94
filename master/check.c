/*
 * check.c - what the start refuses, checked before it creates anything:
 *           by the start itself and by "mtad -t", with the same code, so
 *           that -t cannot say "ok" for a configuration the start then
 *           refuses.
 *
 * CONTRACT  master_check() creates, binds and changes nothing.  It checks
 *           server.user, server.group and server.admin_group (as the
 *           start resolves them), the spool directory (its parent only
 *           root may change when the workers' user owns the spool; the
 *           spool and its subdirectories, when they exist, directories of
 *           that user with no group or other bits), and the directories
 *           and files of routes.db, server.pid_file, server.control_socket
 *           and log.file (a directory only root or we can change, an
 *           existing file a plain file of ours with one link), and the
 *           shaping rules (shaping: and its rules_file, shape.h).  A parent
 *           the start makes when missing is not required to exist.  The
 *           start's own steps check again, on the descriptors they use.
 *           Listen addresses are not bound: a running mtad holds them.
 * FAILURE   Returns EX_OK, or the sysexits code the start would exit with
 *           (EX_NOUSER, EX_UNAVAILABLE for the control socket,
 *           EX_CANTCREAT, EX_CONFIG for the shaping rules) and the reason
 *           in err.  Never logs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>
#include <sys/stat.h>

#include "api/api.h"
#include "common/safefs.h"
#include "common/util.h"
#include "config/config.h"
#include "shape/shape.h"
#include "spool/spool.h"
#include "master/master.h"
#include "master/master_int.h"

/* check_parent_missing - the directory holding path does not exist. */
static int
check_parent_missing(const char *path)
{
    char        dir[PATH_MAX];
    const char *slash = strrchr(path, '/');

    if (slash == NULL)
        return 0;
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    return dir[0] != '\0' && access(dir, F_OK) != 0 && errno == ENOENT;
}


/*
 * check_runfile - key's path: its directory one only root or we can
 * change, and what is there, when anything is: for a file one that
 * safefs_open_file() takes (opened without O_CREAT, and O_NONBLOCK: a
 * FIFO planted there must not hang the check), for the control socket
 * (sock) a socket, as ctl_listen() requires.  made: the start creates a
 * missing parent.
 */
static int
check_runfile(const char *path, const char *key, int made, int sock,
    char *err, size_t errsz)
{
    char        what[MASTER_ERR_MAX / 2];
    const char *name;
    struct stat st;
    int         dfd, fd = -1, rc = -1;

    if (made && check_parent_missing(path))
        return 0;
    if ((dfd = safefs_open_parent(path, &name, what, sizeof(what))) < 0 ||
        safefs_dir_trusted(dfd, path, what, sizeof(what)) < 0)
        goto out;
    if (sock) {
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            !S_ISSOCK(st.st_mode))
            snprintf(what, sizeof(what), "%s exists and is not a socket; "
                "left alone", path);
        else
            rc = 0;
    } else if ((fd = safefs_open_file(dfd, name, O_RDONLY | O_NONBLOCK, 0,
        path, what, sizeof(what))) >= 0 || errno == ENOENT)
        rc = 0;
out:
    if (rc < 0)
        snprintf(err, errsz, "%s: %s", key, what);
    if (fd >= 0)
        close(fd);
    if (dfd >= 0)
        close(dfd);
    return rc;
}


/* check_spool - spool.dir as spool_prepare_tree() will find it. */
static int
check_spool(const char *dir, const struct privs *p, char *err, size_t errsz)
{
    static const char *const subs[] = { "", "/tmp", "/queue", "/state" };
    char        what[MASTER_ERR_MAX / 2], shown[PATH_MAX + 16];
    char        rel[PATH_MAX + 16];
    const char *name;
    uid_t       uid = p->drop ? p->uid : (uid_t)-1;
    int         pfd, fd;
    size_t      i;

    if (check_parent_missing(dir))
        return 0;                   /* made by the start, root's 0755 */
    if ((pfd = safefs_open_parent(dir, &name, what, sizeof(what))) < 0 ||
        (uid != (uid_t)-1 && uid != geteuid() &&
        spool_parent_trusted(pfd, dir, what, sizeof(what)) != 0)) {
        snprintf(err, errsz, "spool.dir: %s", what);
        if (pfd >= 0)
            close(pfd);
        return -1;
    }
    for (i = 0; i < ARRAY_LEN(subs); i++) {
        struct stat st;
        int         made;

        snprintf(rel, sizeof(rel), "%s%s", name, subs[i]);
        snprintf(shown, sizeof(shown), "%s%s", dir, subs[i]);
        if (fstatat(pfd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0 &&
            errno == ENOENT)
            continue;               /* made by the start */
        /* what is there: safefs_mkdir_open() judges it as the start's
         * does (it makes nothing for a name that exists) */
        fd = safefs_mkdir_open(pfd, rel, 0700, shown, &made, what,
            sizeof(what));
        if (fd < 0 || safefs_check_owner(fd, uid, 0077, shown, what,
            sizeof(what)) < 0) {
            snprintf(err, errsz, "spool.dir: %s", what);
            if (fd >= 0)
                close(fd);
            close(pfd);
            return -1;
        }
        close(fd);
    }
    close(pfd);
    return 0;
}


int
master_check(const struct config *cfg, char *err, size_t errsz)
{
    struct privs p;
    char         lock[PATH_MAX + 8];
    int          code;

    /* in the order of the start's steps, with their exit codes */
    if (privs_resolve(cfg, &p, err, errsz) < 0) {
        privs_free(&p);
        return EX_NOUSER;
    }
    snprintf(lock, sizeof(lock), "%s-lock", cfg->routes_db);
    code = EX_CANTCREAT;
    if (check_spool(cfg->spool_dir, &p, err, errsz) < 0 ||
        check_runfile(cfg->routes_db, "routes.db", 1, 0, err, errsz) < 0 ||
        check_runfile(lock, "routes.db", 1, 0, err, errsz) < 0)
        goto out;
    code = EX_UNAVAILABLE;
    if (check_runfile(cfg->control_socket, "server.control_socket", 1, 1,
        err, errsz) < 0)
        goto out;
    code = EX_CANTCREAT;
    if (check_runfile(cfg->pid_file, "server.pid_file", 1, 0, err,
        errsz) < 0 || (strcmp(cfg->log_file, "-") != 0 &&
        check_runfile(cfg->log_file, "log.file", 0, 0, err, errsz) < 0))
        goto out;
    /* shaping: and its rules_file (shape.h), as the start loads them */
    code = EX_CONFIG;
    {
        struct shape_rules *rules = NULL;

        if (shape_rules_load(cfg->path, &rules, err, errsz) < 0)
            goto out;
        shape_rules_free(rules);
    }
    /* api: the tokens file and the TLS files, as the API process loads
     * them */
    if (api_check(cfg, err, errsz) < 0)
        goto out;
    code = EX_OK;
out:
    privs_free(&p);
    return code;
}
