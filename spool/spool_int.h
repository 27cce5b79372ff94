/*
 * spool_int.h - declarations shared by spool.c, spool_dir.c and
 * spool_write.c (files) and spool_env.c (the pure text formats).  Nothing
 * outside spool/ includes this.
 *
 * CONTRACT  The envelope always starts with SPOOL_MAGIC followed by the
 *           "size" line, so the body length sits at the fixed offset
 *           SPOOL_SIZE_OFF as SPOOL_SIZE_WIDTH decimal digits; the writer
 *           pwrite()s it there once the body is complete.
 */
#ifndef MTAD_SPOOL_INT_H
#define MTAD_SPOOL_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "spool/spool.h"

#define SPOOL_MAGIC        "MTAD-SPOOL 1\n"
#define SPOOL_STATE_MAGIC  "MTAD-STATE 1\n"
/* Version 2 adds the recipient status NOTIFIED; it is written only when a
 * recipient has it, so files a version-1 reader can read stay version 1. */
#define SPOOL_STATE_MAGIC2 "MTAD-STATE 2\n"
/* Version 3 adds a fourth field to every rcpt line, the TLS of the last
 * attempt (spool_rcpt.tls); written only when a recipient has one. */
#define SPOOL_STATE_MAGIC3 "MTAD-STATE 3\n"
/* Version 4 (a superset of 3) adds the recipient status DELAYED, PENDING
 * with its delay warning queued (spool_rcpt.delay_warned); written only
 * when a recipient has it. */
#define SPOOL_STATE_MAGIC4 "MTAD-STATE 4\n"
/* Version 5 (a superset of 4) adds a fifth field to every rcpt line, the
 * bounce class of the last failed attempt (spool_rcpt.cls); written only
 * when a recipient has one. */
#define SPOOL_STATE_MAGIC5 "MTAD-STATE 5\n"
/* The optional envelope lines of RFC 8689 (spool_env.c), the last before
 * "end\n". */
#define SPOOL_TLSREQ_REQUIRETLS "tlsreq REQUIRETLS\n"
#define SPOOL_TLSREQ_NO         "tlsreq NO\n"
#define SPOOL_ENV_END           "end\n"
#define SPOOL_SIZE_OFF     (sizeof(SPOOL_MAGIC) - 1 + sizeof("size ") - 1)
#define SPOOL_SIZE_WIDTH   20

/* Render the envelope (env->body_size as the size field) into dst, which
 * must hold the returned length; dst NULL only measures. */
size_t  spool_env_render(const struct spool_env *env, char *dst);

/* Render the delivery state of env; same dst convention.  Statuses outside
 * enum spool_rcpt_status, and notified on a recipient that is not BOUNCED,
 * must be refused by the caller beforehand. */
size_t  spool_state_render(const struct spool_env *env, char *dst);

/* Parse a whole state file into env's delivery fields (strict: the id and
 * the recipient count must match env).  SPOOL_OK or SPOOL_EFORMAT; on
 * failure env may hold part of the state and is only fit for freeing. */
int     spool_state_parse(const char *p, size_t n, struct spool_env *env);

/* Fill dst[SPOOL_SIZE_WIDTH] with v as zero-padded decimal digits. */
void    spool_size_digits(char *dst, uint64_t v);

/* ---- the files (spool.c, spool_dir.c, spool_write.c) ---- */

#define SPOOL_WBUF        (256 * 1024)
/* Free write buffers a spool keeps (spool.c's CONTRACT): with 100
 * sessions a worker, one spare had most messages malloc 256 KiB from the
 * top of the heap and free it back, and glibc moved the break to and fro
 * (0.19 brk per message at 200 sessions with strace attached, 0.05 with
 * the spares; bench/RESULTS.md, round 8).  spool_pool_trim() frees all
 * but one after a tick without a new message. */
#define SPOOL_WBUF_SPARES 32
/* spool_finish() leaves a kept message's body in memory for its first
 * delivery up to this size (spool.h, spool_keep): the pread() it saves
 * costs more than the copy below it, and a worker's attempts in flight
 * (at most 2,048) then hold at most 32 MiB of such copies. */
#define SPOOL_KEEP_COPY   (16 * 1024)
#define SPOOL_READ_CHUNK  (64 * 1024)
/* The recycling of delivered files (spool_pool.c, spool.h:
 * spool_remove_fd): per worker at most this many files, of this many
 * bytes in all, none bigger than SPOOL_POOL_FILE, none kept unused for
 * longer than SPOOL_POOL_IDLE_MS (a delivered message's bytes stay in
 * its file, 0600 in tmp/, until overwritten or unlinked). */
#define SPOOL_POOL_MAX     128     /* 32 overflowed in bursts at 200
                                     * sessions (RESULTS, round 8) */
#define SPOOL_POOL_BYTES   (UINT64_C(32) << 20)
#define SPOOL_POOL_FILE    (UINT64_C(4) << 20)
#define SPOOL_POOL_IDLE_MS 2000
/* a pooled file's name in tmp/: "." and the id of the message it carried,
 * apart from the files being received (tmp/<id>) */
#define SPOOL_POOL_NAME_SIZE (SPOOL_ID_SIZE + 1)
#define SPOOL_HDR_MAX     (64 * 1024 * 1024)  /* envelope or state file */
#define SPOOL_ID_TRIES    64
#define SPOOL_CTR_BITS    12
#define SPOOL_WRITER_BITS 7             /* spool_set_writer(): of the 12 */
#define SPOOL_WRITERS     (1u << SPOOL_WRITER_BITS)
#define SPOOL_MS_MASK     ((UINT64_C(1) << 44) - 1)   /* 11 hex digits */
#define SPOOL_HAS_STATE   S_IXUSR       /* on queue/<id>: a state was saved */
#define SPOOL_SCHED_OK    S_IXGRP       /* ... and its mtime is the next
                                         * retry (spool_sched_peek) */
#define SPOOL_SCHED_HELD  S_IXOTH       /* ... and it is on hold */

/* a delivered message's file, moved to tmp/<id> under its own id, still
 * open read-write and locked: the next message is written over it */
struct spool_pooled {
    int         fd;
    char        name[SPOOL_POOL_NAME_SIZE];     /* in tmp/: ".<id>" */
    uint64_t    size;               /* its length now */
    uint64_t    at_ms;              /* pooled then (monotonic) */
};

struct spool {
    char       *dir;
    int         tmpfd, queuefd, statefd;
    int         fsync;
    unsigned    shard;
    uint64_t    last;               /* last id's ms << bits | counter */
    int         writer;             /* spool_set_writer(), or -1 */
    char       *spare[SPOOL_WBUF_SPARES];   /* free write buffers */
    size_t      nspare;
    uint64_t    wb_takes;           /* write buffers taken, ever */
    uint64_t    wb_takes_seen;      /* ... at the last spool_pool_trim */
    uint64_t    reserve;            /* bytes new mail leaves free */
    uint64_t    room_budget;        /* bytes new mail may write unchecked */
    uint64_t    room_until_ms;      /* ... until then (monotonic) */
    int         close_quiet;        /* close() never reports a delayed
                                     * write error here (spool_keep) */
    struct spool_syncer *syncer;    /* spool_sync.c, or NULL */
    struct spool_reaper *reaper;    /* spool_reap.c, or NULL */
    int         in_ram;             /* on tmpfs or ramfs (spool_open) */
    struct spool_pooled pool[SPOOL_POOL_MAX];   /* oldest first */
    size_t      npool;
    char        err[512];
};

struct spool_msg {
    struct spool *sp;
    int         fd;                 /* tmp/<id>, -1 once closed */
    int         finished;
    int         err;                /* sticky: a failed write poisons m */
    int         use_reserve;        /* may eat into sp->reserve (bounces) */
    char        id[SPOOL_ID_SIZE];
    char        tmpid[SPOOL_POOL_NAME_SIZE];    /* its name in tmp/: id,
                                         * or a reused file's ".<old id>" */
    char       *wb;                 /* write buffer, NULL after finish */
    size_t      wlen;
    uint64_t    written;            /* bytes written so far: the offset
                                     * of the next pwrite() */
    uint64_t    reused;             /* a pooled file's length before (it
                                     * holds the lock already); 0: new */
    uint64_t    body;               /* body bytes accepted */
    uint64_t    body_off;           /* where the body starts in the file */
    uint64_t    head_off;           /* spool_head_reserve()'s room */
    size_t      head_len;           /* its size, 0 = none */
    int         head_filled;
    int         requiretls;         /* the envelope says tlsreq REQUIRETLS */
    int         tls_optional;       /* spool_mark_tls_optional() added its
                                       line */
    int         keep;               /* spool_keep(): a commit keeps fd */
    struct spool_env **kenvp;       /* spool_keep()'s caller's envelope and */
    off_t      *kbody;              /* body offset, which a later mark moves */
};

/* spool_pool.c: the newest pooled file (the pool is not empty), taken
 * out: its fd, with name[SPOOL_POOL_NAME_SIZE] its name in tmp/ and *size its
 * length. */
int     spool_pool_take(struct spool *sp, char *name, uint64_t *size);
/* every pooled file unlinked and closed (spool_room, spool_close) */
void    spool_pool_drain(struct spool *sp);

/* spool.c: record an error in sp->err (spool_fail) or in the global
 * error of the calls that have no spool (spool_gfail, spool_safefail);
 * each returns the SPOOL_E* code for errno. */
int     spool_fail(struct spool *sp, const char *fmt, ...)
            __attribute__((format(printf, 2, 3)));
int     spool_gfail(const char *fmt, ...)
            __attribute__((format(printf, 1, 2)));
int     spool_safefail(const char *err);
/* The id counter's start (spool_open, spool_set_writer): now, plus a
 * random count. */
void    spool_id_seed(struct spool *sp);

#endif /* MTAD_SPOOL_INT_H */
