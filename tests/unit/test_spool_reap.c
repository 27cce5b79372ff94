/*
 * test_spool_reap.c - removed queue files closed off the loop
 * (spool_reap_init, spool_close_removed, spool_reap_free): every
 * descriptor handed over is closed by spool_close() at the latest, many
 * at once included (more than one read of the thread's pipe); on tmpfs
 * the close is made at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "spool/spool.h"
#include "tests/unit/t_fs.h"

static char t_dir[64];
static int  t_made;


static void
t_cleanup(void)
{
    if (t_made)
        t_rm_tree(t_dir);
    t_made = 0;
}

TestSuite(spool_reap, .fini = t_cleanup);


/* t_spool - a spool in a new directory under base, reaper ready. */
static struct spool *
t_spool(const char *base)
{
    struct spool *sp;

    snprintf(t_dir, sizeof(t_dir), "%s/mtad-spool-reap-XXXXXX", base);
    cr_assert_not_null(mkdtemp(t_dir), "mkdtemp: %s", strerror(errno));
    t_made = 1;
    cr_assert_eq(spool_prepare(t_dir, (uid_t)-1, (gid_t)-1), SPOOL_OK,
        "prepare: %s", spool_errstr(NULL));
    cr_assert_eq(spool_open(&sp, t_dir, 0, 1), SPOOL_OK, "open: %s",
        spool_errstr(NULL));
    cr_assert_eq(spool_reap_init(sp), SPOOL_OK, "reap init: %s",
        spool_errstr(sp));
    return sp;
}


/* t_removed - an open file of the spool's queue/, already unlinked. */
static int
t_removed(int i)
{
    char path[128];
    int  fd;

    snprintf(path, sizeof(path), "%s/queue/f%d", t_dir, i);
    fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, "x", 1), 1);
    cr_assert_eq(unlink(path), 0);
    return fd;
}


static int
t_is_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}


Test(spool_reap, every_fd_is_closed_by_spool_close)
{
    struct spool *sp = t_spool("/var/tmp");
    enum { N = 300 };                   /* > one read() of 64 */
    int           fds[N];
    size_t        i;

    for (i = 0; i < N; i++) {
        fds[i] = t_removed((int)i);
        spool_close_removed(sp, fds[i]);
    }
    spool_close_removed(sp, -1);        /* ignored */
    spool_close(sp);                    /* joins the thread */
    for (i = 0; i < N; i++)
        cr_expect(!t_is_open(fds[i]), "fd %d still open", fds[i]);
}


Test(spool_reap, on_tmpfs_the_close_is_immediate)
{
    struct spool *sp = t_spool("/dev/shm");
    int           fd = t_removed(0);

    spool_close_removed(sp, fd);
    cr_expect(!t_is_open(fd), "on tmpfs the fd is closed at once");
    spool_close(sp);
}


Test(spool_reap, without_init_the_close_is_immediate)
{
    struct spool *sp;
    int           fd;

    snprintf(t_dir, sizeof(t_dir), "/var/tmp/mtad-spool-reap-XXXXXX");
    cr_assert_not_null(mkdtemp(t_dir));
    t_made = 1;
    cr_assert_eq(spool_prepare(t_dir, (uid_t)-1, (gid_t)-1), SPOOL_OK);
    cr_assert_eq(spool_open(&sp, t_dir, 0, 1), SPOOL_OK);
    fd = t_removed(0);
    spool_close_removed(sp, fd);
    cr_expect(!t_is_open(fd), "no reaper: closed at once");
    spool_close(sp);
}
