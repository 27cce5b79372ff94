/*
 * spool.h - the message spool: one directory tree, usually on tmpfs.
 *
 *   <dir>/tmp/<id>      being received; only the accepting worker touches it
 *   <dir>/tmp/.<id>     delivered, kept by its worker to carry a new message
 *                       (tmpfs without fsync: spool_remove_fd below)
 *   <dir>/queue/<id>    committed message: envelope + body, never rewritten
 *   <dir>/state/<id>    delivery state (per-recipient results, next retry,
 *                       held flag), replaced atomically (write + rename)
 *
 * Queue ids are 16 upper-case hex digits: 11 of wall-clock milliseconds,
 * 2 of the accepting worker's shard index, 3 of a per-process counter
 * (random start).  They sort by arrival and are unique across workers and
 * restarts without a shared counter.  A worker gives its spool a writer
 * number no other live process writing to the spool holds (the master's
 * slot index; spool_set_writer): its top 7 bits of the last three digits,
 * so two processes of one shard running at once (an old and a new
 * generation during a reload) never make the same id, and spool_create()
 * asks the file system nothing about it.  Without a writer number
 * spool_create() skips an id already in queue/ (one fstatat).  Either way
 * the commit's rename never replaces a queue file: an id that a dead
 * process of the same writer number made and that is still queued (its
 * clock ran ahead, or the wall clock stepped back) fails that message's
 * commit (the client gets a 4xx and sends it again); nothing is replaced.
 *
 * CONTRACT  Writer: spool_create() opens tmp/<id> (O_EXCL) and writes the
 *           envelope; spool_write() appends body bytes through a 256 KiB
 *           write buffer (a write() only when it fills); spool_finish()
 *           flushes and records the body length; spool_commit() fsyncs when
 *           configured and renames tmp/<id> to queue/<id>: THE COMMIT POINT.
 *           Only after spool_commit() returned SPOOL_OK may 250 be sent.
 *           spool_commit_batch() does the same for many messages with one
 *           syncfs() (group commit).
 *           Ownership after commit: whoever holds flock(LOCK_EX) on the
 *           queue file owns the message (delivery, mtactl delete/hold/...);
 *           the lock dies with the process, so a killed worker's messages
 *           are free again.
 *           Reader: spool_msg_open() parses the envelope and state into a
 *           struct spool_env and gives the body's fd and offset.
 * FAILURE   Never logs.  SPOOL_OK (0) or a negative SPOOL_E*; on SPOOL_ESYS
 *           errno is kept and spool_errstr() names the failing call and path
 *           (a string owned by the spool, valid until its next call).
 *           A failed writer call leaves the tmp file for spool_abort().
 */
#ifndef MTAD_SPOOL_H
#define MTAD_SPOOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "smtp/smtp.h"

#define SPOOL_ID_LEN  16
#define SPOOL_ID_SIZE (SPOOL_ID_LEN + 1)

enum spool_rc {
    SPOOL_OK = 0, SPOOL_ESYS = -1, SPOOL_ENOSPC = -3, SPOOL_EFORMAT = -4,
    SPOOL_ELOCKED = -5, SPOOL_ENOENT = -6,
    SPOOL_ELATE = -7                /* spool_head_reserve(): too late */
};

enum spool_rcpt_status {
    SPOOL_RCPT_PENDING = 0, SPOOL_RCPT_SENT, SPOOL_RCPT_BOUNCED
};

/* RFC 3461 5.2: what a recipient that asked for NOTIFY=SUCCESS is told on
 * SENT: "delivered" (delivered here), "relayed" (to a next hop that does
 * not offer DSN), nothing (the next hop got NOTIFY and reports itself). */
enum spool_success {
    SPOOL_SUCCESS_NONE = 0, SPOOL_SUCCESS_DELIVERED, SPOOL_SUCCESS_RELAYED
};

struct spool_rcpt {
    char       *addr;               /* "user@domain", no angle brackets */
    char       *orcpt;              /* ORCPT= as given (xtext decoded), or NULL */
    unsigned    notify;             /* SMTP_NOTIFY_*; 0: not given (FAILURE) */
    /* delivery state (from state/<id>; PENDING and NULL when none) */
    int         status;             /* enum spool_rcpt_status */
    int         notified;           /* BOUNCED and its DSN queued (or none
                                     * due): never reported twice */
    char       *last_reply;         /* peer's last reply or our reason */
    char       *relay;              /* "host[ip]:port" of the last attempt */
    char       *tls;                /* its TLS, as logged: "tls=TLSv1.3
                                       cipher=... verify=ca" or "tls=none";
                                       NULL: not an SMTP attempt */
    char       *cls;                /* bounce class of the last attempt
                                       when it failed (bclass_name():
                                       "rate_limited"); NULL: none */
    int         delay_warned;       /* PENDING and its NOTIFY=DELAY
                                       warning queued: never a second */
    /* in memory only, for this attempt's DSNs (dl_notify()) */
    int         delay_due;          /* a delay warning is due now */
    int         success;            /* enum spool_success: SENT now, and
                                       which success DSN it owes */
};

struct spool_env {
    char        id[SPOOL_ID_SIZE];
    uint64_t    arrival_ms;         /* wall clock */
    char       *sender;             /* "" for the null sender <> */
    enum smtp_body body;
    int         smtputf8;
    enum smtp_ret ret;
    char       *envid;              /* ENVID= (xtext decoded) or NULL */
    char       *client_ip;          /* "127.0.0.1" */
    unsigned    client_port;
    char       *helo;               /* as the client said it, or NULL */
    char       *auth_user;          /* the AUTH login that sent it; NULL:
                                       none (the "auth" line, optional) */
    /* RFC 8689: MAIL ... REQUIRETLS was given (deliver only over verified
     * TLS to hops that advertise REQUIRETLS), or else the content has a
     * "TLS-Required: No" field (recipient-domain TLS policy failures do
     * not stop delivery).  Never both: REQUIRETLS wins (RFC 8689 3). */
    int         requiretls;
    int         tls_optional;
    struct spool_rcpt *rcpt;
    size_t      nrcpt;
    uint64_t    body_size;          /* bytes after the envelope */
    /* spool_keep() only: the body in memory (body_size bytes), or NULL;
     * what the file holds from the body offset on */
    char       *body_copy;
    /* delivery state */
    uint64_t    next_retry_ms;      /* wall clock; 0 = now */
    unsigned    attempts;
    int         held;
    int         has_state;          /* state/<id> may exist (see below) */
    int         state_damaged;      /* state/<id> was unreadable and is
                                       ignored: every recipient pending */
    /* writer only, not stored: this message may use the space kept by
     * spool_set_reserve() (bounces of accepted mail); new mail may not */
    int         use_reserve;
    /* spool_keep() only, not stored: the fd handed out with it is the
     * writer's own (read-write, this spool's), and file_size is the
     * file's length, set at the commit (spool_remove_fd) */
    int         kept;
    uint64_t    file_size;
};

struct spool;
struct spool_msg;                   /* a message being written */

/* Create the tree (tmp, queue, state) with owner uid/gid (-1: unchanged)
 * and remove everything left in tmp/ (never acknowledged) and every
 * state/ file whose queue/ file is gone.  Master only, before workers. */
int     spool_prepare(const char *dir, uid_t uid, gid_t gid);
/* The same without the pass over state/ (one fstatat() per state file,
 * serial, before any worker starts: seconds for a million deferred
 * messages): the master's start; each worker does that pass for its own
 * shard while it recovers (spool_state_adopt/orphan). */
int     spool_prepare_tree(const char *dir, uid_t uid, gid_t gid);
/* 0 when pfd, the directory holding spool dir, lets no one but root (or
 * our euid) add, remove or rename its entries, sticky or not: the spool
 * directory is the workers' user's, who could otherwise swap it for a
 * link under root.  Else -1 with why in err.  spool_prepare*() check it
 * when they give the tree to another uid, mtactl when root acts on a
 * spool that is not root's. */
int     spool_parent_trusted(int pfd, const char *dir, char *err,
            size_t errsz);

int     spool_open(struct spool **sp, const char *dir, int fsync,
            unsigned shard);                             /* shard 0..255 */
void    spool_close(struct spool *sp);                   /* NULL ok */
/* writer: 0..127, held by no other live process writing to this spool
 * (the worker's master slot).  Ids then carry it (see above) and
 * spool_create() does not look into queue/; their counter has 5 bits, 32
 * ids a millisecond before an id borrows the next millisecond. */
void    spool_set_writer(struct spool *sp, unsigned writer);
/* After spool_set_writer() and before the first spool_create(): unlink
 * what a dead process of the same writer number left in tmp/, files half
 * received (tmp/<id>) and delivered files it kept (tmp/.<id>), ids whose
 * writer digits are this spool's.  A worker killed by a signal leaves
 * them; its slot, and so its writer number, is held by no live process
 * until its replacement takes it, so nothing of a live process matches.
 * The count unlinked, or a negative SPOOL_E* (errstr says why; some may
 * have gone).  Without a writer number: 0, nothing done. */
int     spool_tmp_sweep(struct spool *sp);
/* spool.reserve: spool_create() and the writes of a message without
 * env->use_reserve fail SPOOL_ENOSPC (errstr says so) once they would
 * leave less than bytes free, so delivery state and bounces of messages
 * already accepted still fit (state writes never check it); at most a
 * quarter of the file system's size is kept.  0: off. */
void    spool_set_reserve(struct spool *sp, uint64_t bytes);
/* spool_errstr(NULL): the last spool_prepare()/spool_open() failure. */
const char *spool_errstr(const struct spool *sp);
const char *spool_dir(const struct spool *sp);

/* Writer.  env->id is ignored and filled in; env->body_size is computed
 * (spool_msg_size()); arrival_ms 0 becomes now.  The envelope is copied at
 * once: env's strings may be freed after spool_create() returns.  On
 * failure *mp is NULL or a message to spool_abort() (NULL is fine there). */
int     spool_create(struct spool *sp, struct spool_env *env,
            struct spool_msg **mp);
const char *spool_msg_id(const struct spool_msg *m);
int     spool_write(struct spool_msg *m, const void *p, size_t n);
uint64_t spool_msg_size(const struct spool_msg *m);      /* body bytes so far */
int     spool_finish(struct spool_msg *m);               /* flush + length */
/* A header block known only at the end of the body (the DKIM signature):
 * spool_head_reserve() makes room for exactly n bytes in front of
 * everything spool_write() gave so far (the body's first bytes), without
 * reading anything back: the start of the body must still be in the write
 * buffer (it is, unless more than 256 KiB were written), else SPOOL_ELATE
 * and nothing changes.  spool_head_fill() writes the n bytes there (a copy
 * while in the buffer, else one pwrite()).  Once per message; a message
 * with room reserved and not filled is refused by spool_finish(), so a
 * placeholder is never committed. */
int     spool_head_reserve(struct spool_msg *m, size_t n);
int     spool_head_fill(struct spool_msg *m, const void *p, size_t n);
/* "TLS-Required: No" found in the content being written: adds the
 * envelope's "tlsreq NO" line (see spool_env.c) to m.  Call it before
 * spool_head_reserve(); the envelope's end must still be in the write
 * buffer (256 KiB), else SPOOL_ELATE and nothing changes.  A message
 * created with requiretls set keeps it (SPOOL_OK, nothing added). */
int     spool_mark_tls_optional(struct spool_msg *m);
/* After spool_finish(): m's file, open (still m's: never close it), and
 * where its body starts, to read the message back (the milters); -1
 * when the file is closed. */
int     spool_msg_fd(const struct spool_msg *m, off_t *body_off);
/* spool_commit() frees m only on SPOOL_OK; on failure m stays valid and
 * the caller must spool_abort() it (nothing is left in queue/). */
int     spool_commit(struct spool_msg *m);               /* fsync?, rename; frees m */
/* Batch: rcs[i] per message; committed ones are freed and ms[i] set to
 * NULL, failed ones stay for spool_abort().  Returns SPOOL_OK or the first
 * failure.  spool_finish() is called for any message not yet finished. */
int     spool_commit_batch(struct spool *sp, struct spool_msg **ms, size_t n,
            int *rcs);                                   /* one syncfs */
/* The same in steps, for a loop that must not block on the sync (the
 * group commit of spool.fsync):
 *   spool_commit_rename(): finish, close (unless kept) and rename each
 *     message into queue/; rcs[i] per message, returns the first failure.
 *     A renamed message is NOT committed yet: no 250 for it.
 *   spool_sync_init() once (before the sandbox: it makes an eventfd), then
 *   spool_sync_start(): one syncfs() of the spool's file system on a helper
 *     thread (made at the first call; inline where it cannot be); one at a
 *     time (spool_sync_busy()).  Only messages renamed before the start are
 *     covered by it.
 *   spool_sync_fd() turns readable when it is done; spool_sync_reap() then
 *     returns its result (MTA_AGAIN while it runs) and ends it.
 *   spool_commit_settle(): with that result: on SPOOL_OK each renamed
 *     message is committed, freed and ms[i] set to NULL (250 may go out);
 *     otherwise its queue file is removed again and rcs[i] set to the
 *     error (spool_abort() it).  Returns the first failure.
 *   spool_sync_wait() blocks until a running sync is done (the worker's
 *     exit); spool_close() joins the thread. */
int     spool_commit_rename(struct spool *sp, struct spool_msg **ms, size_t n,
            int *rcs);
int     spool_commit_settle(struct spool *sp, struct spool_msg **ms, size_t n,
            int *rcs, int sync_rc);
int     spool_sync_init(struct spool *sp);
int     spool_sync_start(struct spool *sp);
int     spool_sync_fd(const struct spool *sp);              /* -1: no init */
int     spool_sync_reap(struct spool *sp);
int     spool_sync_busy(const struct spool *sp);
void    spool_sync_wait(struct spool *sp);
void    spool_sync_free(struct spool *sp);                  /* spool_close */

/* The last close of a removed queue file, off the loop (spool_reap.c):
 * on a disk file system that close frees the file's blocks in
 * the caller (ext4 with "discard": a wait for the device).
 *   spool_reap_init() once, before the sandbox (it makes a pipe): on
 *     tmpfs or ramfs it does nothing, and every close stays inline.
 *   spool_close_removed(): fd, open on a file no longer in queue/ (after
 *     spool_remove*), is the callee's: a helper thread (made at the first
 *     call) closes it soon, its lock with it; inline where there is no
 *     thread or 256 wait for it already.  Never blocks on the pipe.
 *   spool_reap_free(): the thread closes what it was given and ends
 *     (spool_close calls it). */
int     spool_reap_init(struct spool *sp);
void    spool_close_removed(struct spool *sp, int fd);
void    spool_reap_free(struct spool *sp);
void    spool_abort(struct spool_msg *m);                /* unlink, free; NULL ok */

/* Hand-off to the reader: the worker that accepts a message
 * delivers it from the file it wrote, not by reopening, relocking and
 * re-reading it (spool_msg_open(): open, flock, fstat, pread, close).
 * spool_keep(), right after spool_create() and before any spool_write():
 * takes flock(LOCK_EX) on tmp/<id> now (a lock belongs to the open file,
 * so it travels with the rename: the message is owned from the moment it
 * appears in queue/), and gives *envp, the envelope just rendered parsed
 * back as spool_msg_open() would read it (body_size still 0: the caller
 * sets it from spool_msg_size() at the commit; no state, has_state 0),
 * with *body_off.  *envp is the caller's from then on (spool_env_free);
 * *envp and *body_off must stay where they are until the commit: a later
 * spool_mark_tls_optional() changes the envelope, and updates both.
 * The fd stays m's: a commit that returns SPOOL_OK for m (spool_commit,
 * or rcs[i] of spool_commit_batch) leaves it open and locked and the
 * caller then owns *fd (to close); any other end (a failed commit,
 * spool_abort) closes it as before, and the caller must not touch it.
 * spool_finish() also sets (*envp)->body_copy when the whole message
 * went to the file in its one write and the body is at most 16 KiB: the
 * reader sends it from memory, without a pread().
 * SPOOL_EFORMAT when not possible here (the envelope no longer in the
 * write buffer, or a file system whose close() may report a delayed write
 * error, NFS-like, without spool.fsync: there the commit must close
 * before the rename); the message is unchanged and the caller goes the
 * usual way. */
int     spool_keep(struct spool_msg *m, struct spool_env **envp, int *fd,
            off_t *body_off);

/* Reader.  Opens queue/<id>, optionally takes flock(LOCK_EX|LOCK_NB)
 * (SPOOL_ELOCKED if another process holds it), parses envelope + state.
 * *fd stays open (holding the lock) until spool_env_free's caller closes
 * it; *body_off is where the body starts in that file.  SPOOL_ENOENT when
 * the message is gone (also when the previous lock holder removed it
 * between our open and our flock, or moved it to tmp/ and wrote another
 * message over it: a file that no longer holds its name); SPOOL_EFORMAT
 * for a bad id, a damaged envelope or state, or a file whose size
 * disagrees with its envelope.
 * fd and body_off may be NULL (then the file is closed, lock and all). */
int     spool_msg_open(struct spool *sp, const char *id, int lock,
            struct spool_env **envp, int *fd, off_t *body_off);
/* Frees an env made by spool_msg_open()/spool_env_parse() (every string
 * malloc'd); not for an env the caller built itself. */
void    spool_env_free(struct spool_env *env);           /* NULL ok */
/* Rewrite state/<id> from env's delivery fields (atomic).  First it marks
 * the queue file (owner-execute bit, S_IXUSR) as having a state file:
 * spool_msg_open() reads state/<id> only for a marked file (its fstat()
 * shows the bit), so a message that never had a state costs no open() of
 * a missing file.  The mark is set before the state file appears and never
 * cleared; spool_prepare() marks the queue files of state files written
 * before the mark existed.  SPOOL_ENOENT when queue/<id> is gone. */
int     spool_state_save(struct spool *sp, const struct spool_env *env);
/* What a schedule needs without opening anything (start-up recovery of a
 * big queue): one fstatat() of queue/<id>.  spool_state_save()
 * also records the next retry as the queue file's mtime and the held flag
 * in its mode (group and other execute bits; the spool is 0700), with a
 * bit saying they are valid, cleared while a state is being replaced.
 * SPOOL_OK: *next_retry_ms and *held are the saved state's (0 and 0 for
 * a message never tried); SPOOL_ENOENT: gone; SPOOL_EFORMAT: not
 * recorded there (a state written before this existed, or an interrupted
 * save): read the state with spool_msg_open(). */
int     spool_sched_peek(struct spool *sp, const char *id,
            uint64_t *next_retry_ms, int *held, int *marked);
                        /* *marked (may be NULL): the file has the mark */
/* The orphan purge and the old-state marking of spool_prepare(), one id
 * at a time, for a worker's start-up recovery (spool_prepare_tree() leaves
 * them out of the master's serial start):
 * spool_state_list() - every id in state/, sorted;
 * spool_state_adopt() - mark queue/<id> as having a state (a state saved
 *   before the mark existed), through an fd opened without following
 *   links; SPOOL_ENOENT when gone;
 * spool_state_orphan() - remove state/<id> when queue/<id> is gone:
 *   SPOOL_ENOENT removed, SPOOL_OK kept (its message is there). */
int     spool_state_list(struct spool *sp, char (**ids)[SPOOL_ID_SIZE],
            size_t *n);
int     spool_state_adopt(struct spool *sp, const char *id);
int     spool_state_orphan(struct spool *sp, const char *id);
/* Remove a delivered/bounced/deleted message: queue file, then state. */
int     spool_remove(struct spool *sp, const char *id);
/* The same for a message opened with spool_msg_open() and locked since:
 * state/<id> is unlinked only when env->has_state says one may exist
 * (set it after a spool_state_save() of the same env). */
int     spool_remove_env(struct spool *sp, const struct spool_env *env);
/* The same for a message whose attempt holds fd (its lock): on SPOOL_OK
 * fd is the spool's, else still the caller's.  A file handed out by
 * spool_keep() (env->kept) on a spool in memory (tmpfs or ramfs) without
 * fsync, never given a state, moves to tmp/ instead of being unlinked,
 * fd and lock kept: the next spool_create() writes over it (a
 * 1 MiB write into pages tmpfs already has costs a third of one into new
 * pages, and a small message saves the open, the flock, the unlink and
 * the close).  Otherwise spool_remove_env(), then spool_close_removed().
 * The pool's bounds are in spool_int.h (SPOOL_POOL_*).
 * spool_pool_trim() unlinks what has lain unused too long, and frees the
 * spare write buffers but one after a call without a new message (spool.c):
 * call it every second or so.  spool_close() unlinks the rest. */
int     spool_remove_fd(struct spool *sp, const struct spool_env *env,
            int fd);
void    spool_pool_trim(struct spool *sp);
/* Every id in queue/, sorted.  *ids is one malloc'd array of ids. */
int     spool_list(struct spool *sp, char (**ids)[SPOOL_ID_SIZE], size_t *n);

/* Pure envelope format, for tests and the reader: text lines, values
 * xtext-encoded so no byte of an address can break the format. */
void    spool_env_format(const struct spool_env *env, char **out, size_t *len);
                                                /* *out malloc'd, NUL-ended */
int     spool_env_parse(const char *p, size_t n, struct spool_env **envp,
            size_t *consumed);
int     spool_id_valid(const char *id);                  /* 1 valid, 0 not */

/* Ids without a file (spool_create() uses this): strictly increasing within
 * the process, even when the clock stands still or steps back. */
void    spool_new_id(struct spool *sp, char *id);        /* id[SPOOL_ID_SIZE] */
/* Fields of a valid id: arrival milliseconds and accepting shard. */
uint64_t spool_id_ms(const char *id);
unsigned spool_id_shard(const char *id);

/* Listing records (spool_wire.c): one message as `mtactl queue`
 * shows it, for a worker to keep and stream.  All integers little-endian:
 *   u32 len (of what follows; 0 ends a stream), id[16], u8 state (0
 *   queued, 1 active, 2 deferred, 3 held) -- the head -- then the body:
 *   u8 held, u32 attempts, u64 arrival_ms, u64 next_retry_ms,
 *   u64 body_size, str sender, u32 nrcpt, nrcpt x (u8 status, str addr,
 *   str relay, str tls, str last_reply, str cls);
 *   str = u32 n, then n bytes ending in NUL (n = 0: NULL).
 * spool_wire_body() appends env's body to b, spool_wire_head() a head for
 * a body of body_len bytes.  spool_wire_decode() takes one record without
 * its len (p, n: id .. end) and fills env (strings point into p, env->rcpt
 * into *rcpts, grown to *caprcpt as needed; free only *rcpts) and *state:
 * SPOOL_OK, or SPOOL_EFORMAT for anything but exactly one record. */
#define SPOOL_WIRE_STR_MAX  (1u << 20)
struct buf;
void    spool_wire_body(struct buf *b, const struct spool_env *env);
void    spool_wire_head(struct buf *b, const char *id, unsigned state,
            size_t body_len);
int     spool_wire_decode(const char *p, size_t n, struct spool_env *env,
            unsigned *state, struct spool_rcpt **rcpts, size_t *caprcpt);

/* A worker's index saved at a clean stop (spool_index.c): state/index-NN,
 * SPOOL_INDEX_MAGIC then listing records and an empty one.  save: the
 * bytes next() hands out (1 more, 0 done) after the magic, via a temporary
 * file and a rename.  take: the whole file (magic included) in *data
 * (malloc'd), then the file is removed; SPOOL_ENOENT when there is none,
 * SPOOL_EFORMAT when it does not start with the magic. */
#define SPOOL_INDEX_MAGIC "mtad-qindex 2\n"
int     spool_index_save(struct spool *sp, unsigned shard,
            int (*next)(void *arg, const void **p, size_t *n), void *arg);
int     spool_index_take(struct spool *sp, unsigned shard, char **data,
            size_t *len);
/* Remove the saved indexes of shards from and up (shards a smaller worker
 * count no longer has: a later growth must not take an old one).  The
 * number removed. */
unsigned spool_index_prune(struct spool *sp, unsigned from);

/* Start a helper thread (the group commit's, the reaper's; smtpd's
 * password hashing) with every signal blocked, for they are the loop's:
 * 0 or -1. */
int     spool_thread_start(pthread_t *tid, void *(*fn)(void *), void *arg);

#endif /* MTAD_SPOOL_H */
