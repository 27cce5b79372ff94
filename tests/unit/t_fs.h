/*
 * t_fs.h - a unit test's scratch directory removed with everything in it.
 *
 * CONTRACT  t_rm_tree(dir) removes dir and what it holds, depth first,
 *           never following a symbolic link; best effort (a test's
 *           clean-up).  Header only: each test binary links one module.
 */
#ifndef T_FS_H
#define T_FS_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

static int
t_fs_rm_one(const char *path, const struct stat *st, int flag,
    struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(path);
}

static inline void
t_rm_tree(const char *dir)
{
    (void)nftw(dir, t_fs_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
