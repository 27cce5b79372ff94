/*
 * queue_int.h - declarations shared by the files of mtactl's queue
 * commands (queue.c, queue_format.c, queue_list.c, queue_show.c,
 * queue_change.c).  Nothing outside mtactl/ includes this.
 */
#ifndef MTAD_MTACTL_QUEUE_INT_H
#define MTAD_MTACTL_QUEUE_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "spool/spool.h"

#define QUEUE_LOCK_WAIT_MS  60000       /* longer than a slow DATA reply */
#define QUEUE_LOCK_POLL_US  20000
#define QUEUE_KICK_MS       5000
#define QUEUE_BOUNCE_TEXT   "5.0.0 returned to sender by the administrator"
#define QUEUE_COPY_CHUNK    (128 * 1024)
#define QUEUE_SHOWN_RCPTS   3           /* recipients on a queue line */
#define QUEUE_HISTORY_SCAN  ((off_t)64 << 20)   /* log bytes read by show */
#define QUEUE_HISTORY_MAX   200         /* log lines shown by show */

enum queue_state { QS_QUEUED, QS_ACTIVE, QS_DEFERRED, QS_HELD, QS_NSTATES };
enum { QUEUE_SRC_ANY, QUEUE_SRC_FILES, QUEUE_SRC_DAEMON };
enum queue_op { QO_DELETE, QO_HOLD, QO_RELEASE, QO_FLUSH, QO_BOUNCE };

struct queue_filter {
    const char *from;               /* substring of the sender */
    const char *to;                 /* substring of any recipient */
    int         state;              /* enum queue_state, -1 any */
    uint64_t    older_ms;           /* 0 any */
};

struct queue_opts {
    struct queue_filter f;
    int         json, by_domain, all, body, raw, summary;
    size_t      top;                /* --top N: domains shown, 0 all */
    /* paging (queue): --after ID lists only the ids after it, --limit N
     * at most N of them (0 all); the summary still counts every match */
    char        after[SPOOL_ID_SIZE];   /* "" none */
    size_t      limit;
    int         source;             /* QUEUE_SRC_*: --files, --daemon */
    char      **ops;                /* the operands, in order */
    int         nops;
};

struct queue_item {
    struct spool_env *env;
    enum queue_state  state;
};

/* A file, for the /proc/locks snapshot. */
struct queue_fileid {
    dev_t dev;
    ino_t ino;
};

struct queue_locks {
    struct queue_fileid *v;         /* sorted */
    size_t               n;
    int                  ok;        /* read: v is the whole truth */
};

/* The effective ids mtactl had before queue_become_owner(). */
struct queue_creds {
    int    dropped;
    uid_t  uid;
    gid_t  gid;
    gid_t *groups;              /* root's supplementary groups, restored */
    int    ngroups;
};

extern const char *const queue_state_names[QS_NSTATES];
extern const char *const queue_rcpt_status_names[SPOOL_RCPT_BOUNCED + 1];

/* queue.c */
struct spool *queue_open_spool(const struct config *cfg, const char *cmd);
/* 0 when the spool's tmp/, queue/ and state/ are directories (or missing);
 * -1 after a message naming the one that is a link or a file (the workers'
 * user owns the spool: a listing through it would show another tree). */
int queue_dirs_plain(const struct config *cfg, const char *cmd);
int queue_become_owner(const struct config *cfg, struct queue_creds *c);
void queue_become_self(struct queue_creds *c);
int queue_norm_id(const char *in, char out[SPOOL_ID_SIZE]);
void queue_locks_load(struct queue_locks *lk);
void queue_locks_free(struct queue_locks *lk);
enum queue_state queue_state_of(const struct spool_env *env, int fd,
    const struct queue_locks *lk);
uint64_t queue_since(uint64_t now, uint64_t then);
int queue_load(struct spool *sp, const struct queue_filter *f,
    struct queue_item **itemsp, size_t *np);
void queue_items_free(struct queue_item *items, size_t n);
/* queue_scan - queue_load() without keeping anything: fn sees each
 * message that passes the filter, in id order, and the env is freed when
 * fn returns.  Memory stays flat with a million messages, and the first
 * line is out before the last file is read. */
int queue_scan(struct spool *sp, const struct queue_filter *f,
    void (*fn)(const struct queue_item *it, void *arg), void *arg);
int queue_match(const struct queue_item *it, const struct queue_filter *f,
    uint64_t now);
int queue_parse_opts(int argc, char **argv, const char *allowed,
    struct queue_opts *o);
int queue_filtered(const struct queue_filter *f);

/* queue_format.c */
const char *queue_age(uint64_t ms, char *buf, size_t sz);
const char *queue_time(uint64_t ms, char *buf, size_t sz);
void queue_put_esc(const char *p, size_t n, unsigned flags);
void queue_put_text(const char *s);
void queue_json_str(const char *s);
void queue_json_mem(const char *s, size_t len);
int queue_rcpt_status(const struct spool_rcpt *r);
void queue_print_line(const struct queue_item *it, uint64_t now);
void queue_print_json_item(const struct queue_item *it, uint64_t now);
void queue_json_item_open(const struct queue_item *it, uint64_t now,
    int detail);

/* queue_daemon.c: queue_scan() from the running workers' index; 1 when
 * mtad cannot answer (nothing printed: read the files), -1 failed after
 * output began (said why), 0 done. */
int queue_scan_daemon(const struct config *cfg, const struct queue_filter *f,
    void (*fn)(const struct queue_item *it, void *arg), void *arg);

/* queue_list.c */
int queue_cmd_list(int argc, char **argv, const struct config *cfg);

/* queue_show.c */
int queue_cmd_show(int argc, char **argv, const struct config *cfg);

/* queue_change.c */
int queue_cmd_change(int argc, char **argv, const struct config *cfg,
    enum queue_op op);

#endif
