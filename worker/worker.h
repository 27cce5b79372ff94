/*
 * worker.h - a worker process: one epoll loop holding many inbound SMTP
 * sessions and the outbound deliveries of the messages it owns.
 *
 * CONTRACT  The master forks, then in the child: resets signals, calls
 *           log_open(), worker_init() (still privileged: opens LMDB, the
 *           spool, the loop), drops privileges, then worker_run(), and
 *           exits with its return value.  A worker never execs.
 *
 * CHANNEL   chan_fd is the worker's end of its channel with the master
 *           (common/chan.h: the commands, their payloads, who sends
 *           which).  The worker takes CHAN_STOP, CHAN_PING, CHAN_DRAIN,
 *           CHAN_KICK, CHAN_QSTREAM, CHAN_TLSRPT_SEND and
 *           CHAN_SANDBOX_TEST (one handler each, worker.c's table) and
 *           sends CHAN_READY once its loop runs, CHAN_PONG, and
 *           CHAN_TLSRPT_ADD each tick.  EOF on the channel (master gone)
 *           ends the worker at once.
 *
 * OWNERSHIP Queue shard: ids carry the accepting worker's shard index; a
 *           worker owns the queued messages whose shard % nshards is its own
 *           (see spool.h for ids; delivery/delivery.h for the schedule).
 */
#ifndef MTAD_WORKER_H
#define MTAD_WORKER_H

#include <stddef.h>
#include <sys/types.h>

struct config;
struct status_page;
struct tlskey_ring;
struct shape_rules;
struct shape_table;

struct worker_args {
    const struct config *cfg;
    unsigned            shard;      /* 0 .. nshards-1, stable across respawn */
    unsigned            nshards;    /* cfg->workers */
    unsigned            slot;       /* index in status->w[] */
    unsigned            generation;
    int                 chan_fd;
    const int          *listen_fds;
    size_t              nlisten;
    struct status_page *status;
    /* TLS session-ticket keys shared by every worker (made by the master
     * before the first fork); NULL: each TLS context makes its own. */
    struct tlskey_ring *tickets;
    /* traffic shaping: the generation's rules (NULL: off) and the node's
     * table, both made by the master before the fork (shape.h) */
    const struct shape_rules *shape_rules;
    struct shape_table *shape_tab;
    gid_t               gid;        /* the workers' group (after the drop) */
    gid_t               admin_gid;  /* server.admin_group, else gid */
};

struct worker;

struct worker *worker_init(const struct worker_args *a); /* NULL: logged */
int         worker_run(struct worker *w);                /* exit status */
/* The worker's routing table, for the sandbox's list of Maildirs. */
struct router *worker_router(struct worker *w);

#endif /* MTAD_WORKER_H */
