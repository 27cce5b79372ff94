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

#include "common/ev.h"
#include "common/status.h"

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
};

/* Children: fork a worker or the log process into the slot.  Return the
 * pid or -1 (errno) in the master; never return in the child. */
pid_t   child_spawn_worker(struct slot *s, struct generation *g,
            struct status_page *st, int log_send_fd);
pid_t   child_spawn_logd(struct slot *s, const struct privs *p,
            int log_recv_fd, int log_file_fd, uint64_t flush_ms,
            int sandbox);
/* Every fd only the master needs (listeners included: a child keeps only
 * its own generation's); closed in each child unless it keeps it. */
void    child_register_master_fd(int fd);
void    child_unregister_master_fd(int fd);
void    child_set_master_pid(pid_t pid);
/* The TLS session-ticket keys (common/tlskey.h) every worker gets. */
struct tlskey_ring;
void    child_set_tickets(struct tlskey_ring *r);

/* Privileges. */
int     privs_resolve(const struct config *cfg, struct privs *p,
            char *err, size_t errsz);
void    privs_free(struct privs *p);
void    privs_drop(const struct privs *p);        /* fatal on failure */

/* Listeners: acquire one fd per cfg->listen entry, sharing the fd of an
 * address that is already bound.  On failure nothing is held. */
int     listen_acquire(const struct config *cfg, int **fds,
            char *err, size_t errsz);
void    listen_release(int *fds, size_t n);

/* The log process. */
void    logd_main(int recv_fd, int chan_fd, int file_fd, uint64_t flush_ms)
            __attribute__((noreturn));
int     logd_open_file(const char *path, char *err, size_t errsz);
int     logd_send_fd(int chan, const char *cmd, int fd);

/* systemd notification (no-op without NOTIFY_SOCKET). */
void    notify_init(void);
void    notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Control socket server. */
int     ctl_listen(const char *path, const struct privs *p,
            char *err, size_t errsz);
struct master;
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

struct master {
    const char        *config_path;
    struct generation *cur;
    struct generation *next;        /* a reload in progress */
    uint64_t           reload_deadline;
    int                reload_again;   /* another request came meanwhile */
    struct slot        slots[MASTER_MAX_SLOTS];
    struct slot        logd;
    struct status_page *status;
    struct tlskey_ring *tickets;    /* kept across generations */
    struct ev_loop    *loop;           /* common/ev, as the workers */
    struct ev_timer    tick;           /* MASTER_TICK_MS: master_tick() */
    struct ev_timer    deadline;       /* the next slot or reload deadline */
    int                sigfd, ctlfd;
    int                log_send, log_recv, log_file;
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
    struct ctl_client  clients[MASTER_MAX_CLIENTS];
    /* counters of workers that are gone, so totals only grow */
    struct status_worker retired;
    uint64_t           dropped_reported;
    /* per-second samples of total msgs in/out */
    uint64_t           ring_in[MASTER_RATE_RING], ring_out[MASTER_RATE_RING];
    uint64_t           ring_ms[MASTER_RATE_RING];
    unsigned           ring_head, ring_n;
};

/* master.c services used by ctl.c */
void    master_request_reload(struct master *m);
void    master_request_stop(struct master *m);
int     master_kick(struct master *m, const char *arg);
/* qstream.c: answer "queue-stream" on control connection cfd (closed). */
void    master_qstream(struct master *m, int cfd);
void    master_send(struct slot *s, const char *cmd);

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
struct generation *master_gen_prepare(struct config *cfg, int *exit_code,
            char *err, size_t errsz);
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
