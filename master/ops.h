/*
 * ops.h - the master's operations modules: load policy (load.c), the
 *         Prometheus endpoint (metrics.c), the systemd watchdog and STATUS=
 *         (watchdog.c), admin records (audit.c), `mtactl status --json`
 *         (status_json.c).  Only master/ includes it.
 *
 * CONTRACT  All run in the master's loop, off the message path: they read
 *           the shared status page the workers write (common/status.h) and
 *           the master's own state.  None blocks: the metrics clients are
 *           non-blocking sockets in the master's epoll set.
 * FAILURE   Logged; the master keeps serving.  metrics_apply() reports a
 *           bind failure to its caller (start-up fails on it; a reload
 *           keeps the old listener).
 */
#ifndef MTAD_MASTER_OPS_H
#define MTAD_MASTER_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct master;
struct config;

/* load.c: sample limits.load.file (the 1-minute load), store it in the
 * status page and set status->throttle from limits.load.queue_only and
 * limits.load.refuse; each change of state is logged ("load" record). */
void    load_sample(struct master *m);

/* metrics.c: bind, move or close the listener for cfg->metrics_listen;
 * 0 ok, -1 (err set).  It watches its fds on the master's loop itself. */
int     metrics_apply(struct master *m, const struct config *cfg,
            char *err, size_t errsz);
void    metrics_expire(struct master *m, uint64_t now);
/* The exposition text (malloc'd); also what the tests parse. */
char   *metrics_render(struct master *m);
/* Files in <spool_dir>/queue, counted at most once a second; -1 (errno)
 * when the directory cannot be read. */
long    metrics_queue_size(struct master *m, const char *spool_dir);

/* watchdog.c: WATCHDOG_USEC/WATCHDOG_PID from systemd (read once, before
 * notify_init()); watchdog_tick() once a second: pings every worker and
 * the log process, sends WATCHDOG=1 only while each of them answered
 * within WatchdogSec, and keeps STATUS= current. */
void    watchdog_init(struct master *m);
void    watchdog_tick(struct master *m, uint64_t now);
void    watchdog_pong(struct master *m, unsigned sidx);
void    watchdog_logd_pong(struct master *m);

/* audit.c: the uid (and pid) of a control client, from SO_PEERCRED;
 * -1 when unknown. */
int     audit_peer(int fd, uid_t *uid, pid_t *pid);
/* Log one admin action ("admin" record: uid, pid, action, args). */
void    audit_log(uid_t uid, pid_t pid, const char *via, const char *action,
            const char *args);
/* A control request line: logged as an admin action unless read-only. */
void    audit_request(int fd, const char *line);

/* tlsrpt_agg.c: TLS-RPT day totals (tlspol/tlspol.h), in the struct
 * tlsagg the master owns (m->tlsagg, made at first use).  load at start,
 * add a worker's CHAN_TLSRPT_ADD payload, tick
 * once a second (saves, the daily reports), save at stop; ctl answers
 * "tls report [DOMAIN]" and "tls report-send" (arg after "tls "). */
void    tlsagg_load(struct master *m);
void    tlsagg_add(struct master *m, unsigned shard, const char *msg,
            size_t n);
void    tlsagg_tick(struct master *m, uint64_t now_ms);
void    tlsagg_save(struct master *m);
/* master_reap(): 1 when pid was the child saving the table (taken). */
int     tlsagg_reaped(struct master *m, pid_t pid, int status);
void    tlsagg_ctl(struct master *m, const char *arg, char **out);

/* cluster.c: the sync agent (cluster/cluster.h) the master forks when
 * relay.yaml has cluster:.  start before the first fork (reads the
 * password, turns the shaping table's fleet mode on), spawn once the
 * log socket is there; reaped: 1 when pid was the agent
 * (restarted with back-off); tick once a second (restart, the heartbeat
 * watchdog); stop at shutdown (1 when it is gone); ctl answers "cluster
 * status|json"; metrics appends mtad_cluster_*. */
struct buf;
int     master_cluster_start(struct master *m, char *err, size_t errsz);
void    master_cluster_spawn(struct master *m);     /* after logd */
int     master_cluster_reaped(struct master *m, pid_t pid, int status);
void    master_cluster_tick(struct master *m, uint64_t now_ms);
/* mtactl ban del: lift sa's ban on every node (1: a cluster is on). */
struct sockaddr;
int     master_cluster_unban(struct master *m, const struct sockaddr *sa);
/* After a reload (m->cur the new generation): a changed cluster section
 * restarts the agent with it, a new one starts it, a removed one stops
 * it and the fleet mode. */
struct config;
void    master_cluster_reloaded(struct master *m, const struct config *old);
int     master_cluster_stop(struct master *m);
void    master_cluster_ctl(struct master *m, const char *arg, char **out);
void    master_cluster_metrics(struct master *m, struct buf *t);

/* ban.c: "ban list|add ADDR [SECONDS]|del ADDR" (arg after "ban "):
 * the reply, "ok\n..." or "error: ...\n" (the caller frees it). */
void    ctl_ban(struct master *m, const char *arg, char **out);

/* hosts.c: "hosts": the next hops marked down (delivery.host_down_for),
 * one line each, "ok\n..." (the caller frees it); hosts_forget_s: when
 * the workers forget an entry, for the listing and the metrics gauge. */
void    ctl_hosts(struct master *m, char **out);
uint32_t hosts_forget_s(const struct config *cfg);
/* shaping.c: "shaping list|json|suspend NAME SOURCE|- SECONDS|resume NAME
 * SOURCE|-" (arg after "shaping "): the reply (the caller frees it); the
 * tick logs the back-off steps and ends; metrics: the /metrics lines. */
struct buf;
void    ctl_shaping(struct master *m, const char *arg, char **out);
void    master_shaping_tick(struct master *m, uint64_t now);
void    master_shaping_metrics(struct master *m, struct buf *b);
/* greylist.c: "greylist list [PREFIX]|del NET [SENDER [RCPT]]|flush"
 * (arg after "greylist "): the reply, "ok\n..." or "error: ...\n" (the
 * caller frees it).  tick: the expired triplets pruned every
 * GREYLIST_PRUNE_MS.  Both open greylist.mdb for the call only: the
 * master forks workers, and an LMDB environment must not cross a fork. */
#define GREYLIST_PRUNE_MS (10 * 60 * 1000)
void    ctl_greylist(struct master *m, const char *arg, char **out);
void    greylist_tick(struct master *m, uint64_t now_ms);

/* quota.c: "quota list|set KIND KEY|* [messages=N] [bytes=S]|del KIND
 * KEY|*" (arg after "quota "): the reply (the caller frees it).  tick:
 * idle rows freed every 30 ticks. */
void    ctl_quota(struct master *m, const char *arg, char **out);
void    quota_tick(struct master *m, uint64_t now_ms);

/* status_json.c: the "status json" reply ("ok\n" + one JSON object). */
void    status_json_report(struct master *m, char **out);

#endif /* MTAD_MASTER_OPS_H */
