/*
 * events_int.h - shared by the events/ files (the writer and record, the reader,
 * the targets) and the unit test.  Nothing outside events/ includes this.
 */
#ifndef MTAD_EVENTS_INT_H
#define MTAD_EVENTS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/ev.h"

#define EVENTS_FIELD_MAX  1024          /* bytes of one string field */
#define EVENTS_SEG_MAX    (16u << 20)   /* a segment is closed past this */
#define EVENTS_OUT_MAX    (4u << 20)    /* unwritten records kept at most */
#define EVENTS_TICK_MS    200           /* the reader looks this often */
#define EVENTS_LOCK_MS    1000          /* others try for the reader lock */
#define EVENTS_BACKOFF_MIN_MS 1000
#define EVENTS_BACKOFF_MAX_MS 60000
#define EVENTS_BATCH_BYTES (1u << 20)   /* bytes of one offer at most */
#define EVENTS_SEGS_MAX   4096          /* segments the reader follows */
#define EVENTS_DIR        "events"      /* under the spool directory */

struct status_page;
struct status_worker;
struct config;

/* One segment the reader follows: sent up to off of size bytes. */
struct events_seg {
    char     name[64];
    uint64_t off, size;
    int      fd;                        /* read fd, -1 until opened */
    uint64_t plan;                      /* offset after the batch in flight */
};

struct events_target;

struct events {
    struct ev_loop       *loop;
    const struct config  *cfg;
    struct status_page   *sp;
    struct status_worker *st;
    unsigned              types;
    char                **headers;      /* events.headers, split */
    size_t                nheaders;
    char                  node[256];    /* server.hostname */
    int                   dfd;          /* <spool>/events */
    /* writer */
    struct buf            out;
    int                   wfd;          /* open segment, -1 none */
    char                  wname[64];
    uint64_t              wsize;
    unsigned              wseq;
    int                   wfailing;     /* write failed: logged once */
    struct ev_timer       flush_timer;
    /* reader (events_read.c) */
    int                   lockfd;       /* reader.lock held, or -1 */
    struct ev_timer       tick;
    struct events_seg    *segs;
    size_t                nsegs;
    int                   inflight;     /* a batch is with the target */
    size_t                inflight_n;   /* records in it */
    uint64_t              backoff_ms;   /* 0: not failing */
    uint64_t              retry_at;     /* monotonic ms */
    uint64_t              scanned_at;   /* last ev_scan, monotonic ms */
    int                   dropping;     /* drop_oldest episode logged */
    int                   full_logged;  /* backpressure episode logged */
    struct buf            batch;
    struct events_target *target;
};

/* events.c: the record; now_ms wall clock. */
struct events_rec;
void    events_format(struct events *e, struct buf *b,
            const struct events_rec *r, uint64_t now_ms);

/* events_read.c: start the reader's timer; the done callback of the
 * targets: ok 1 when the target acknowledged every record of the batch. */
void    events_read_start(struct events *e);
void    events_read_stop(struct events *e);
void    events_offered(struct events *e, int ok, const char *why);

/* The target of a node: events_http.c or events_redis.c.  offer: send
 * the batch (b: JSON lines, n records); later exactly one
 * events_offered().  0, or -1 (why set, nothing pending). */
struct events_target_ops {
    int   (*offer)(struct events_target *t, const char *b, size_t len,
              size_t n, char *why, size_t whysz);
    void  (*free)(struct events_target *t);
};
struct events_target {
    const struct events_target_ops *ops;
    struct events *e;
};
struct events_target *events_http_new(struct events *e, char *why,
            size_t whysz);
struct events_target *events_redis_new(struct events *e, char *why,
            size_t whysz);

#endif /* MTAD_EVENTS_INT_H */
