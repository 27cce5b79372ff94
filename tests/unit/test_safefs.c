/*
 * test_safefs.c - common/safefs: what the master (root) refuses to follow
 * or adopt.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "common/safefs.h"

static char dir[64];
static char err[512];

static void
setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/mtad-test-safefs-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void
teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    (void)!system(cmd);
}

TestSuite(safefs, .init = setup, .fini = teardown);

static int
opendir_fd(void)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    cr_assert_geq(fd, 0);
    return fd;
}

Test(safefs, open_file_refuses_a_symlink_and_leaves_the_target)
{
    char target[128], link[128];
    int  dfd = opendir_fd(), fd;
    struct stat st;

    snprintf(target, sizeof(target), "%s/target", dir);
    snprintf(link, sizeof(link), "%s/pid", dir);
    fd = open(target, O_WRONLY | O_CREAT, 0600);
    cr_assert_eq(write(fd, "keep", 4), 4);
    close(fd);
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_eq(safefs_open_file(dfd, "pid", O_WRONLY | O_CREAT, 0644, link,
        err, sizeof(err)), -1);
    cr_assert_eq(errno, ELOOP);
    cr_assert(strstr(err, "is a symbolic link") != NULL, "%s", err);
    cr_assert_eq(stat(target, &st), 0);
    cr_assert_eq(st.st_size, 4);
    close(dfd);
}

Test(safefs, open_file_refuses_a_hard_link)
{
    char a[128], b[128];
    int  dfd = opendir_fd(), fd;

    snprintf(a, sizeof(a), "%s/a", dir);
    snprintf(b, sizeof(b), "%s/b", dir);
    fd = open(a, O_WRONLY | O_CREAT, 0600);
    close(fd);
    cr_assert_eq(link(a, b), 0);
    cr_assert_eq(safefs_open_file(dfd, "b", O_RDWR, 0, b, err, sizeof(err)),
        -1);
    cr_assert(strstr(err, "hard links") != NULL, "%s", err);
    close(dfd);
}

Test(safefs, open_file_creates_and_accepts_a_plain_file)
{
    int dfd = opendir_fd(), fd;

    fd = safefs_open_file(dfd, "new", O_RDWR | O_CREAT, 0640, "new", err,
        sizeof(err));
    cr_assert_geq(fd, 0, "%s", err);
    cr_assert_eq(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
    close(dfd);
}

Test(safefs, mkdir_open_refuses_a_symlinked_directory)
{
    char link[128];
    int  dfd = opendir_fd(), created;

    snprintf(link, sizeof(link), "%s/tmp", dir);
    cr_assert_eq(symlink("/", link), 0);
    cr_assert_eq(safefs_mkdir_open(dfd, "tmp", 0700, link, &created, err,
        sizeof(err)), -1);
    cr_assert(strstr(err, "is a symbolic link") != NULL, "%s", err);
    close(dfd);
}

Test(safefs, check_owner_refuses_open_modes)
{
    int dfd = opendir_fd();

    cr_assert_eq(fchmod(dfd, 0700), 0);
    cr_assert_eq(safefs_check_owner(dfd, (uid_t)-1, 0077, dir, err,
        sizeof(err)), 0, "%s", err);
    cr_assert_eq(fchmod(dfd, 0777), 0);
    cr_assert_eq(safefs_check_owner(dfd, (uid_t)-1, 0077, dir, err,
        sizeof(err)), -1);
    cr_assert(strstr(err, "mode 0777") != NULL, "%s", err);
    close(dfd);
}

Test(safefs, dir_trusted_needs_sticky_for_world_write)
{
    int dfd = opendir_fd();

    cr_assert_eq(fchmod(dfd, 0755), 0);
    cr_assert_eq(safefs_dir_trusted(dfd, dir, err, sizeof(err)), 0);
    cr_assert_eq(fchmod(dfd, 0777), 0);
    cr_assert_eq(safefs_dir_trusted(dfd, dir, err, sizeof(err)), -1);
    cr_assert(strstr(err, "writable by anyone") != NULL, "%s", err);
    cr_assert_eq(fchmod(dfd, 01777), 0);
    cr_assert_eq(safefs_dir_trusted(dfd, dir, err, sizeof(err)), 0);
    close(dfd);
}

Test(safefs, open_parent_names_the_last_component)
{
    const char *name;
    int         fd = safefs_open_parent("/etc/passwd", &name, err,
                        sizeof(err));

    cr_assert_geq(fd, 0);
    cr_assert_str_eq(name, "passwd");
    close(fd);
    cr_assert_eq(safefs_open_parent("/etc/", &name, err, sizeof(err)), -1);
}

Test(safefs, count_entries_skips_dot_names_and_refuses_a_symlink)
{
    char sub[128], f[160], link[128];
    int  i, fd;

    snprintf(sub, sizeof(sub), "%s/queue", dir);
    cr_assert_eq(mkdir(sub, 0700), 0);
    for (i = 0; i < 3; i++) {
        snprintf(f, sizeof(f), "%s/%c", sub, 'a' + i);
        fd = open(f, O_WRONLY | O_CREAT, 0600);
        cr_assert_geq(fd, 0);
        close(fd);
    }
    snprintf(f, sizeof(f), "%s/.hidden", sub);
    fd = open(f, O_WRONLY | O_CREAT, 0600);
    close(fd);
    cr_assert_eq(safefs_count_entries(dir, "queue"), 3);
    cr_assert_eq(safefs_count_entries(dir, "missing"), -1);
    cr_assert_eq(errno, ENOENT);
    /* a link where the directory was: not followed to what it names */
    snprintf(link, sizeof(link), "%s/linked", dir);
    cr_assert_eq(symlink(sub, link), 0);
    cr_assert_eq(safefs_count_entries(dir, "linked"), -1);
    /* O_DIRECTORY | O_NOFOLLOW on a link: Linux says ENOTDIR */
    cr_assert(errno == ENOTDIR || errno == ELOOP, "errno %d", errno);
}

Test(safefs, check_read_wants_a_regular_file_in_a_trusted_dir)
{
    char f[160], fifo[160], open_dir[160], link[160], target[200];
    int  fd;

    snprintf(f, sizeof(f), "%s/key.pem", dir);
    fd = open(f, O_WRONLY | O_CREAT, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(safefs_check_read(f, "tls.key_file", err, sizeof(err)), 0, "%s", err);
    /* missing: passes, the reader's own open names the error */
    snprintf(f, sizeof(f), "%s/missing.pem", dir);
    cr_assert_eq(safefs_check_read(f, "tls.key_file", err, sizeof(err)), 0);
    /* a FIFO would block root's reader */
    snprintf(fifo, sizeof(fifo), "%s/fifo.pem", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_assert_eq(safefs_check_read(fifo, "tls.key_file", err, sizeof(err)), -1);
    cr_assert(strstr(err, "tls.key_file") && strstr(err, "not a regular file"), "%s", err);
    /* a link from a trusted directory into one anyone can change */
    snprintf(open_dir, sizeof(open_dir), "%s/open", dir);
    cr_assert_eq(mkdir(open_dir, 0777), 0);
    cr_assert_eq(chmod(open_dir, 0777), 0);
    snprintf(target, sizeof(target), "%s/key.pem", open_dir);
    fd = open(target, O_WRONLY | O_CREAT, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
    snprintf(link, sizeof(link), "%s/link.pem", dir);
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_eq(safefs_check_read(link, "tls.key_file", err, sizeof(err)), -1);
    cr_assert(strstr(err, "writable by anyone"), "%s", err);
    cr_assert_eq(safefs_check_read(target, "tls.key_file", err, sizeof(err)), -1);
}

Test(safefs, open_dir_nolinks_refuses_a_link_anywhere_and_open_dirs)
{
    char path[256], link[128], sub[128];
    int  fd;

    snprintf(sub, sizeof(sub), "%s/real", dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    snprintf(path, sizeof(path), "%s//real/", dir);
    fd = safefs_open_dir_nolinks(path, (uid_t)-1, (gid_t)-1, "route", err,
        sizeof(err));
    cr_assert_geq(fd, 0, "%s", err);
    close(fd);
    snprintf(link, sizeof(link), "%s/link", dir);
    cr_assert_eq(symlink("real", link), 0);
    snprintf(path, sizeof(path), "%s/link/x", dir);
    cr_assert_eq(safefs_open_dir_nolinks(path, (uid_t)-1, (gid_t)-1, "route",
        err, sizeof(err)), -1);
    cr_assert_eq(errno, ELOOP);
    cr_assert(strstr(err, "link' is a symbolic link") != NULL, "%s", err);
    cr_assert_eq(safefs_open_dir_nolinks(link, (uid_t)-1, (gid_t)-1, "route",
        err, sizeof(err)), -1);
    cr_assert_eq(errno, ELOOP);
    snprintf(path, sizeof(path), "%s/missing", dir);
    cr_assert_eq(safefs_open_dir_nolinks(path, (uid_t)-1, (gid_t)-1, "route",
        err, sizeof(err)), -1);
    cr_assert_eq(errno, ENOENT);
    /* a directory anyone may change, on the way or at the end */
    cr_assert_eq(chmod(dir, 0777), 0);
    cr_assert_eq(safefs_open_dir_nolinks(sub, (uid_t)-1, (gid_t)-1, "route",
        err, sizeof(err)), -1);
    cr_assert_eq(errno, EPERM);
    cr_assert(strstr(err, "writable by anyone") != NULL, "%s", err);
    cr_assert_eq(chmod(dir, 0755), 0);
    cr_assert_eq(chmod(sub, 0777), 0);
    cr_assert_eq(safefs_open_dir_nolinks(sub, (uid_t)-1, (gid_t)-1, "route",
        err, sizeof(err)), -1);
    cr_assert_eq(errno, EPERM);
}

Test(safefs, secret_exposed_to_others_or_a_foreign_group)
{
    struct stat st;

    memset(&st, 0, sizeof(st));
    st.st_mode = S_IFREG | 0600;
    st.st_gid = 50;
    cr_assert_eq(safefs_secret_exposed(&st, 100, 100, err, sizeof(err)), 0);
    st.st_mode = S_IFREG | 0644;
    cr_assert_eq(safefs_secret_exposed(&st, 100, 100, err, sizeof(err)), 1);
    cr_assert(strstr(err, "by others (mode 0644") != NULL, "%s", err);
    st.st_mode = S_IFREG | 0640;
    cr_assert_eq(safefs_secret_exposed(&st, 100, 100, err, sizeof(err)), 1);
    cr_assert(strstr(err, "by group 50 (mode 0640") != NULL, "%s", err);
    cr_assert_eq(safefs_secret_exposed(&st, 50, 100, err, sizeof(err)), 0);
    cr_assert_eq(safefs_secret_exposed(&st, 100, 50, err, sizeof(err)), 0);
    st.st_gid = 0;
    cr_assert_eq(safefs_secret_exposed(&st, 100, 100, err, sizeof(err)), 0);
}
