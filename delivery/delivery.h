/*
 * delivery.h - outbound delivery inside a worker's event loop: the retry
 * schedule, the SMTP client toward next hops, maildir delivery, bounces.
 *
 * CONTRACT  The worker that accepted a message delivers it at once from the
 *           same loop (deliver_submit()); deferred messages wait in an
 *           in-memory schedule (a heap keyed by next retry).  At start,
 *           deliver_recover() rebuilds the schedule from the spool for the
 *           messages of this worker's shard; nothing scans the spool on a
 *           timer.  Before an attempt the worker takes flock on queue/<id>;
 *           if another process holds it (mtactl, an old-generation worker)
 *           the attempt is retried a little later.  A message leaves the
 *           spool only when every recipient has a final result.
 * FAILURE   Logs each attempt, Postfix-style:
 *           "<id>: to=<a@b>, relay=host[ip]:port, delay=0.12,
 *            status=sent (250 2.0.0 Ok)".
 */
#ifndef MTAD_DELIVER_H
#define MTAD_DELIVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ev_loop;
struct config;
struct spool;
struct router;
struct status_worker;
struct deliver;
struct spool_env;

struct deliver *deliver_new(struct ev_loop *loop, const struct config *cfg,
            struct spool *sp, struct router *r, struct status_worker *st,
            unsigned shard, unsigned nshards);
void    deliver_free(struct deliver *d);                 /* NULL ok */
int     deliver_recover(struct deliver *d);              /* at start */
void    deliver_submit(struct deliver *d, const char *id); /* just queued */
/* The same for a message committed with spool_keep(): env (its body_size
 * set) and fd (open, flock'ed, the body at body_off) become delivery's;
 * the attempt starts now from them, without reopening queue/<id>.  When
 * no attempt may start now (the active limit, a hold, a drain) they are
 * released and the id is scheduled like deliver_submit(). */
void    deliver_submit_kept(struct deliver *d, struct spool_env *env, int fd,
            off_t body_off);
void    deliver_kick(struct deliver *d, const char *id);  /* NULL/"*": all */
/* `mtactl queue` through the worker (qindex.c): stream this worker's
 * listing records (spool.h) to fd, one end of a socketpair the master
 * handed over; fd is the stream's now.  0, or -1 (fd closed). */
int     deliver_qstream(struct deliver *d, int fd);
/* At a clean stop: the index as state/index-<shard>, for the next start
 * (qindex.c; a failure is logged, the next start reads the files). */
void    deliver_save_index(struct deliver *d);
/* Graceful stop: start nothing new; returns deliveries still in flight
 * (after deliver_giveback(): states still unsaved, retried each second). */
size_t  deliver_drain(struct deliver *d);
/* The status page's throttle word: while STATUS_THROTTLE_HOLD is set no
 * attempt starts (limits.load.queue_only).  NULL: never held. */
void    deliver_set_throttle(struct deliver *d, const uint32_t *throttle);
/* The shared status page, where failed attempts are counted by bounce
 * class x site (common/status.h).  NULL (the default): not counted. */
struct status_page;
void    deliver_set_page(struct deliver *d, struct status_page *page);
/* The status page's next-hop health table (delivery.host_down_for,
 * delivery/mta_health.c): node-wide, so a hop one worker found dead is
 * skipped by all.  NULL: this worker's own (a test without a master). */
struct status_page;
void    deliver_set_health(struct deliver *d, struct status_page *sp);
/* Traffic shaping (shape.h): the rules (NULL: off), the node-wide table
 * the master made, this worker's slot in it.  Before the first submit;
 * the rules must outlive d. */
struct shape_rules;
struct shape_table;
void    deliver_set_shaping(struct deliver *d, const struct shape_rules *rules,
            struct shape_table *tab, unsigned slot);
/* Queue quotas (quota.c).  set_quota: count this worker's messages in
 * column slot of sp's quota rows (zeroed now).  quota_key: the key of
 * value v for kind (enum status_qkind: an address's domain lower-cased,
 * a user as is, an IP address's quotas.ipv4_prefix / ipv6_prefix
 * network) into out (STATUS_QUOTA_KEY_MAX + 1 bytes); its length, 0 when
 * v has none (the null sender).  quota_limit: the limit in force (a
 * row's override + 1, else the kind's, else the configuration's; 0 none).
 * quota_end: log the end of row's episode when it is under again. */
struct status_page;
void    deliver_set_quota(struct deliver *d, struct status_page *sp,
            unsigned slot);
size_t  deliver_quota_key(const struct config *cfg, unsigned kind,
            const char *v, char *out);
uint64_t deliver_quota_limit(const struct config *cfg,
            struct status_page *sp, unsigned kind, uint64_t row_lim1,
            int bytes);
void    deliver_quota_end(const struct config *cfg, struct status_page *sp,
            int row);
/* Gauges for the status page: attempts open, scheduled entries due now,
 * scheduled for later.  O(scheduled): called once a second, not per
 * message. */
void    deliver_gauges(const struct deliver *d, uint64_t *active,
            uint64_t *due, uint64_t *deferred);
/* Gauges of the queue index (qindex.c), kept as it changes, so O(1):
 * body bytes of the messages (those whose record is read: all, once a
 * start's warm-up is done), messages held by mtactl, arrival (ms, wall
 * clock) of the oldest message of any state; 0 when none. */
void    deliver_index_gauges(struct deliver *d, uint64_t *bytes,
            uint64_t *held, uint64_t *oldest_ms);
/* Once a second, before deliver_gauges: take the messages that mtactl
 * deleted or held since the last call out of the schedule. */
void    deliver_tidy(struct deliver *d);
/* The stop deadline: close every outbound session at once without
 * marking its recipients (results already in are saved), release every
 * message, start nothing more: the next generation delivers them. */
void    deliver_giveback(struct deliver *d);
/* A "<start_s> <end_s>\n" + blocks message from the master (CHAN_TLSRPT_SEND)
 * (tlsrpt_send.c): look up _smtp._tls.<domain> TXT, and queue the TLS-RPT
 * report to its rua= mailto: addresses from tlsrpt.sender.  Logs the
 * outcome. */
void    deliver_tlsrpt_send(struct deliver *d, const char *msg, size_t n);
/* The process's resolver (its cache shared by every lookup), for the
 * DNS lists smtpd asks before a greeting; NULL when it did not start. */
struct dns;
struct dns *deliver_dns(struct deliver *d);
/* Delivery events (events/events.h): results, expiries and DSNs are
 * emitted to e and flushed before each state save.  NULL: off. */
struct events;
void    deliver_set_events(struct deliver *d, struct events *e);
/* Shard of a queue id under nshards workers. */
unsigned deliver_shard_of(const char *id, unsigned nshards);

#endif /* MTAD_DELIVER_H */
