/*
 * master_int.h - declarations shared by the master's own files (master.c,
 * start.c, supervise.c, reload.c,
 * child.c, listen.c, logd.c, ctl.c, notify.c).  Nothing outside master/
 * includes it.
 */
#ifndef MTAD_MASTER_INT_H
#define MTAD_MASTER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/chan.h"
#include "common/ev.h"
#include "common/status.h"
#include "master/master.h"

struct config;

#define MASTER_MAX_SLOTS      STATUS_MAX_WORKERS
#define MASTER_TICK_MS        1000u     /* counters ring, deadlines */
#define MASTER_LOAD_EVERY     2u        /* ticks between getloadavg() */
#define MASTER_RATE_WINDOW    60u       /* seconds of the msgs/s average */
#define MASTER_READY_TIMEOUT  10000u    /* new generation: wait for "ready" */
#define MASTER_BACKOFF_MIN    100u
#define MASTER_BACKOFF_MAX    10000u
#define MASTER_QUICK_EXIT_MS  1000u     /* died sooner: crash loop suspect */
#define LOGD_STOP_TIMEOUT     3000u
#define MASTER_PING_MS        5000u     /* a stopping worker past its deadline
                                           must answer "ping" within this */
#define MASTER_CHAN_BATCH     32u       /* messages per child per wakeup */

/* The user the children run as; drop is 0 when the master is not root.
 * admin_gid: server.admin_group, whose members may use the control socket
 * besides root (has_admin 0: root only). */
struct privs {
    int     drop;
    uid_t   uid;
    gid_t   gid;
    gid_t  *groups;
    int     ngroups;
    int     has_admin;
    gid_t   admin_gid;
};

/* A listening socket, shared by the generations that listen there. */
struct listener {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char     *spec;
    int       fd;
    unsigned  refs;
};

/* One configuration and what was made from it. */
struct generation {
    unsigned       id;
    struct config *cfg;
    struct privs   privs;
    int           *lfds;            /* parallel to cfg->listen */
    size_t         nlisten;
    int            notified;        /* READY=1 sent for it */
    struct shape_rules *shape;      /* shaping rules, NULL: off (shape.h) */
};

enum slot_role  { ROLE_NONE = 0, ROLE_WORKER, ROLE_LOGD };
enum slot_state { SLOT_FREE = 0, SLOT_RUNNING, SLOT_STOPPING, SLOT_BACKOFF };

/* One supervised child. */
struct slot {
    enum slot_role  role;
    enum slot_state state;
    pid_t           pid;
    unsigned        shard;
    unsigned        generation;
    unsigned        sidx;           /* status page index (workers) */
    int             chan;           /* master's end, -1 when closed */
    int             ready;
    uint64_t        started_ms;     /* monotonic */
    uint64_t        restart_at;     /* SLOT_BACKOFF: when to fork again */
    uint64_t        backoff_ms;     /* last back-off, doubles on quick exits */
    uint64_t        stop_deadline;  /* SLOT_STOPPING: "ping" then, and
                                       SIGKILL if no "pong" comes */
    int             pinged;         /* "ping" sent, "pong" due */
    unsigned        quick_exits;
    uint64_t        chan_bad;       /* messages refused on its channel */
};

struct master;

/* Children: fork a worker (of generation g) or the log process into the
 * slot.  Return the pid or -1 (errno) in the master; never return in the
 * child.  A worker gets m->status, m->log_send and m->tickets. */
pid_t   child_spawn_worker(struct master *m, struct slot *s,
            struct generation *g);
pid_t   child_spawn_logd(struct master *m, struct slot *s);
struct cluster_args;
pid_t   child_spawn_cluster(struct master *m, const struct cluster_args *a);
/* Every fd only the master needs (listeners included: a child keeps only
 * its own generation's); closed in each child unless it keeps it. */
#define MASTER_MAX_FDS (MASTER_MAX_SLOTS * 2 + 64)
struct master_fds {
    int    fd[MASTER_MAX_FDS];
    size_t n;
};
void    child_register_master_fd(struct master *m, int fd);
void    child_unregister_master_fd(struct master *m, int fd);

/* Privileges. */
int     privs_resolve(const struct config *cfg, struct privs *p,
            char *err, size_t errsz);
void    privs_free(struct privs *p);
void    privs_drop(const struct privs *p);        /* fatal on failure */

/* Listeners: acquire one fd per cfg->listen entry, sharing the fd of an
 * address that is already bound (m->listeners).  On failure nothing is
 * held. */
#define LISTEN_MAX 64
int     listen_acquire(struct master *m, const struct config *cfg, int **fds,
            char *err, size_t errsz);
void    listen_release(struct master *m, int *fds, size_t n);

/* The log process: records from the workers' recv_fd and the master's
 * own_fd; master: the pid whose records it writes unchecked. */
void    logd_main(int recv_fd, int own_fd, int chan_fd, int file_fd,
            uint64_t flush_ms, pid_t master) __attribute__((noreturn));
int     logd_open_file(const char *path, char *err, size_t errsz);

/* systemd notification (no-op without NOTIFY_SOCKET). */
struct master_notify {
    struct sockaddr_un addr;
    socklen_t          len;
    int                fd;          /* -1: none */
};
void    notify_init(struct master *m);
void    notify_send(struct master *m, const char *fmt, ...)
            __attribute__((format(printf, 2, 3)));

/* The systemd watchdog (watchdog.c; see ops.h). */
struct master_watchdog {
    uint64_t ms;                        /* 0: off */
    uint64_t answer[MASTER_MAX_SLOTS];  /* last pong (monotonic) */
    pid_t    pid[MASTER_MAX_SLOTS];
    uint64_t logd_answer;
    pid_t    logd_pid;
    int      failing;
    char     status[256];               /* the last STATUS= sent */
};

/* Control socket server. */
int     ctl_listen(const char *path, const struct privs *p,
            char *err, size_t errsz);
ev_io_fn ctl_accept_event;                /* the control socket */
void    ctl_reply_fd(int fd, const char *text);      /* writes, closes */
void    ctl_expire(struct master *m, uint64_t now);
void    ctl_status_report(struct master *m, char **out);

/* Master state, for master.c and ctl.c. */
struct ctl_client {
    int      fd;
    uint64_t deadline;
    size_t   len;
    char     req[1024];
    int      waiting_reload;        /* reply when the reload completes */
    int      refused;               /* peer failed the credential check */
    char     who[96];               /* its credentials, for the log */
};

#define MASTER_MAX_CLIENTS 16
#define MASTER_RATE_RING   (MASTER_RATE_WINDOW + 1)

/* The master's whole state: one per process, made by master_run(); no
 * master/ file keeps state of its own. */
struct metrics;
struct tlsagg;
struct master_cluster;
struct master {
    const char        *config_path;
    struct proctitle   title;           /* main()'s argv area (proctitle.c) */
    pid_t              pid;             /* the master's, for the children */
    struct generation *cur;
    struct generation *next;        /* a reload in progress */
    uint64_t           reload_deadline;
    int                reload_again;   /* another request came meanwhile */
    struct slot        slots[MASTER_MAX_SLOTS];
    struct slot        logd;
    struct status_page *status;
    struct tlskey_ring *tickets;    /* kept across generations */
    struct shape_table *shape_tab;  /* shaping counters, the same */
    struct ev_loop    *loop;           /* common/ev, as the workers */
    struct ev_timer    tick;           /* MASTER_TICK_MS: master_tick() */
    struct ev_timer    deadline;       /* the next slot or reload deadline */
    int                sigfd, ctlfd;
    int                log_send, log_recv, log_file;
    /* the master's own records (and its forks'): a socketpair no worker
     * holds, so no worker filling log_send's queue makes them drop */
    int                log_own_send, log_own_recv;
    char              *log_path;
    char              *ctl_path;
    char              *pid_path;
    int                stopping;
    int                sandbox_test;    /* MTAD_SANDBOX_TEST=1 at start */
    uint64_t           stop_deadline;
    int                draining;        /* drain.c */
    uint64_t           drain_deadline;  /* 0 = none */
    uint64_t           started_ms;
    unsigned           ticks;
    uint64_t           grey_prune_ms;   /* the next greylist prune */
    struct ctl_client  clients[MASTER_MAX_CLIENTS];
    /* counters of workers that are gone, so totals only grow */
    struct status_worker retired;
    uint64_t           dropped_reported;
    /* per-second samples of total msgs in/out */
    uint64_t           ring_in[MASTER_RATE_RING], ring_out[MASTER_RATE_RING];
    uint64_t           ring_ms[MASTER_RATE_RING];
    unsigned           ring_head, ring_n;
    struct tlsagg     *tlsagg;          /* TLS-RPT day table (tlsrpt_agg.c) */
    struct metrics    *metrics;         /* the /metrics endpoint (metrics.c) */
    struct master_fds  master_fds;      /* child.c */
    struct listener    listeners[LISTEN_MAX];   /* listen.c */
    unsigned           gen_seq;         /* generation ids (reload.c) */
    char             **spool_done;      /* spool trees prepared (reload.c) */
    size_t             nspool_done;
    int                load_failing;    /* load.c: the file was unreadable */
    struct master_notify   notify;      /* notify.c */
    struct master_watchdog wd;          /* watchdog.c */
    struct master_cluster *cluster;     /* cluster.c: the sync agent */
};

/* master.c services used by ctl.c */
void    master_request_reload(struct master *m);
void    master_request_stop(struct master *m);
int     master_kick(struct master *m, const char *arg);
/* qstream.c: answer "queue-stream" on control connection cfd (closed). */
void    master_qstream(struct master *m, int cfd);
/* A command without payload to a child (common/chan.h); a worker whose
 * channel does not take it gets SIGTERM instead. */
void    master_send(struct slot *s, enum chan_cmd cmd);

/* drain.c */
int     master_request_drain(struct master *m, uint64_t timeout_ms,
            char *err, size_t errsz);
void    master_drain_tick(struct master *m, uint64_t now);
long    master_drain_queued(const char *spool_dir);
pid_t   master_sandbox_test(struct master *m);
void    master_totals(struct master *m, struct status_worker *t);
void    master_rates(struct master *m, double *in_ps, double *out_ps);
/* Watches fd on the master's loop; fn gets the struct master as its arg. */
void    master_watch(struct master *m, int fd, unsigned events,
            ev_io_fn *fn);
void    master_unwatch(struct master *m, int fd);

/* Between master.c (loop, channels, signals), start.c (start-up),
 * supervise.c (children) and reload.c (generations, hand-over). */
#define MASTER_ERR_MAX  8192        /* a config error text, all lines */

/* master.c */
void    master_close_chan(struct master *m, struct slot *s);
void    master_log_lines(int level, const char *prefix, const char *text);
ev_io_fn master_chan_io;                  /* a worker's channel */
ev_io_fn master_logd_io;                  /* the log process's channel */

/* start.c */
int     master_start(struct master *m, struct config *cfg, int foreground);
void    master_mkparent(const char *path);
/* master_publish_submit - write (or remove) the submission hint of cfg
 * (config.h) next to its control socket; logs when it cannot. */
struct config;
void    master_publish_submit(const struct config *cfg);
void    master_cleanup(struct master *m);

/* supervise.c */
unsigned master_free_slots(const struct master *m);
void    master_slot_free(struct slot *s);
void    master_spawn_logd(struct master *m);
int     master_start_generation(struct master *m, struct generation *g);
void    master_stop_worker(struct slot *s, uint64_t timeout_ms);
void    master_reap(struct master *m);
void    master_deadlines(struct master *m, uint64_t now);
int     master_shutdown_step(struct master *m);   /* 1: all gone */

/* reload.c */
struct generation *master_gen_by_id(struct master *m, unsigned id);
/* CHAN_AUTH_CONNECT from the worker in slot s (index idx): connect its
 * generation's auth.dovecot_socket and pass it back (auth_connect.c). */
void    master_auth_connect(struct master *m, struct slot *s, unsigned idx);
struct generation *master_gen_prepare(struct master *m, struct config *cfg,
            int *exit_code, char *err, size_t errsz);
unsigned master_gen_nready(struct master *m, const struct generation *g);
void    master_handover(struct master *m, unsigned gen);
void    master_check_ready(struct master *m);
void    master_reopen_log(struct master *m, const char *newpath);
void    master_finish_reload(struct master *m, int timed_out);
void    master_abort_reload(struct master *m);
/* "routes" (mtactl changed the table): publish a new snapshot and tell
 * the workers.  -1 (err says why) or how many could not be told. */
int     master_routes_changed(struct master *m, char *err, size_t errsz);

#endif /* MTAD_MASTER_INT_H */
