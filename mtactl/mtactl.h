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

#include <stddef.h>

struct config;

#define MTACTL_OK     0
#define MTACTL_FAIL   1
#define MTACTL_USAGE  2

int     mtactl_route(int argc, char **argv, const struct config *cfg);  /* route.c */
int     mtactl_queue(int argc, char **argv, const struct config *cfg);  /* queue.c */
int     mtactl_drain(int argc, char **argv, const char *sock,
            const struct config *cfg);                             /* drain.c */
void    mtactl_route_help(void);
struct dns_options;
/* route.c: dns.* of relay.yaml as dns.h options, as delivery reads them */
void    mtactl_route_dns_options(const struct config *cfg,
            struct dns_options *o);
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
/* queue_format.c: s as a JSON string on stdout, escaped (null for NULL);
 * every --json output writes its strings through it */
void    queue_json_str(const char *s);
int     mtactl_dkim(int argc, char **argv);                             /* dkim.c */
void    mtactl_dkim_help(void);
int     mtactl_user(int argc, char **argv, const struct config *cfg,
            const char *cfg_err);                               /* user.c */
void    mtactl_user_help(void);
int     mtactl_pool(int argc, char **argv, const struct config *cfg);   /* pool.c */
void    mtactl_pool_help(void);
int     mtactl_tls(int argc, char **argv, const struct config *cfg);    /* tls.c */
void    mtactl_tls_help(void);
int     mtactl_tls_check(int argc, char **argv,
            const struct config *cfg);                      /* tls_check.c */
int     mtactl_trace(int argc, char **argv, const struct config *cfg); /* trace.c */
void    mtactl_trace_help(void);
/* trace.c: the file holding mtad's log records (0), else -1 and where
 * says where they are (log.file "-": the journal, a terminal...). */
int     mtactl_log_source(const struct config *cfg, const char *id,
            char *path, size_t pathsz, char *where, size_t wheresz);

#endif /* MTAD_MTACTL_H */
