/*
 * mtactl.h - the pieces of mtactl, one file per command family.
 *
 * CONTRACT  Each mtactl_<family>() gets the arguments after the family
 *           word (argv[0] is the family word itself) and the loaded config
 *           (NULL when it could not be loaded and the command does not need
 *           it).  Returns the process exit code: 0 ok, 1 failed, 2 usage.
 *           Errors go to stderr as "mtactl: <what>: <why>".
 */
#ifndef MTAD_MTACTL_H
#define MTAD_MTACTL_H

struct config;

#define MTACTL_OK     0
#define MTACTL_FAIL   1
#define MTACTL_USAGE  2

int     mtactl_route(int argc, char **argv, const struct config *cfg);  /* route.c */
int     mtactl_queue(int argc, char **argv, const struct config *cfg);  /* queue.c */
int     mtactl_drain(int argc, char **argv, const char *sock,
            const struct config *cfg);                             /* drain.c */
void    mtactl_route_help(void);
/* route.c: a deadline (SIGALRM, exit 1 with a message) on this command's
 * work on the routes db; then, after a change, the running mtad publishes
 * the table to its workers (MTACTL_OK also when mtad is not running). */
void    mtactl_routes_deadline(void);
int     mtactl_routes_publish(const struct config *cfg, const char *what);
/* audit.c: report a change to the running mtad's log (best effort). */
void    mtactl_audit_init(const struct config *cfg);
void    mtactl_audit(const char *fmt, ...)
            __attribute__((format(printf, 1, 2)));
void    mtactl_audit_flush(void);       /* after the command */
void    mtactl_queue_help(void);
int     mtactl_dkim(int argc, char **argv);                             /* dkim.c */
void    mtactl_dkim_help(void);
int     mtactl_user(int argc, char **argv, const struct config *cfg,
            const char *cfg_err);                               /* user.c */
void    mtactl_user_help(void);
int     mtactl_tls(int argc, char **argv, const struct config *cfg);    /* tls.c */
void    mtactl_tls_help(void);

#endif /* MTAD_MTACTL_H */
