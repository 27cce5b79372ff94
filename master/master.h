/*
 * master.h - the master process: what main() needs.
 *
 * CONTRACT  master_run() loads the config, binds the listeners, creates the
 *           status page, the spool tree and the routes db, starts the log
 *           process and the workers, then supervises them until SIGTERM,
 *           SIGINT or "mtactl stop".  It returns the process exit code
 *           (sysexits values for start-up failures) or exits in the
 *           children it forks.
 * FAILURE   Start-up errors are printed on stderr as "mtad: <what>: <why>".
 */
#ifndef MTAD_MASTER_H
#define MTAD_MASTER_H

#include <stddef.h>

/* Where main()'s argv strings lie, to be overwritten by process titles. */
struct proctitle {
    char   *area;
    size_t  size;
};

struct master_opts {
    const char      *config_path;
    int              foreground;    /* -f: no fork/setsid */
    struct proctitle title;         /* from proctitle_init() */
};

int     master_run(const struct master_opts *o);

/* master_check - what the start would refuse in cfg, checked without
 * creating anything (master/check.c); "mtad -t" and the start both call
 * it.  EX_OK, or the start's sysexits code with the reason in err. */
struct config;
int     master_check(const struct config *cfg, char *err, size_t errsz);

/* Process titles ("mtad: worker 2 (generation 1)"), seen by ps; comm (the
 * first 15 bytes of name) is what tests and pgrep see.  proctitle_init()
 * must get main()'s argv before anything else reads it. */
void    proctitle_init(struct proctitle *t, int argc, char **argv);
void    proctitle_set(const struct proctitle *t, const char *comm,
            const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif /* MTAD_MASTER_H */
