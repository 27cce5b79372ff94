/*
 * log.h - log records, sent to the log process (a worker's in batches).
 *
 * CONTRACT  log_msg() formats "<ISO time>Z mtad[<pid>]: <ident>: <text>\n"
 *           and sends it with MSG_DONTWAIT on the fd given to log_open();
 *           when the socket is full the record is dropped and counted
 *           (log_dropped()).  With no fd (-1), records go to stderr
 *           synchronously (start-up, mtactl, tests).  Records above the
 *           level are not formatted at all.
 * FAILURE   Never fails and never blocks.
 */
#ifndef MTAD_LOG_H
#define MTAD_LOG_H

#include <stddef.h>
#include <stdint.h>

enum log_level {
    LOGL_ERR = 0, LOGL_WARN, LOGL_NOTICE, LOGL_INFO, LOGL_DEBUG
};

#define LOG_RECORD_MAX  4096
/* A worker's staged records go to the log process as one datagram of at
 * most this many bytes (whole lines); the log process reads that much. */
#define LOG_PACK_MAX    (16 * 1024)

/* log.format: text (the default) or JSON lines (common/logfmt.h). */
#define LOG_FORMAT_TEXT 0
#define LOG_FORMAT_JSON 1

/* One structured field of a record (log_event()).  Keys are from the
 * documented set (README "Log records"); values are escaped on output. */
enum log_kv_type { LOG_KV_STR, LOG_KV_INT, LOG_KV_NUM };
struct log_kv {
    const char      *key;
    enum log_kv_type type;
    const char      *s;             /* LOG_KV_STR; NULL: field left out */
    long long        i;             /* LOG_KV_INT */
    double           d;             /* LOG_KV_NUM (2 decimals) */
};
#define LKV_S(k, v) ((struct log_kv){ (k), LOG_KV_STR, (v), 0, 0 })
#define LKV_I(k, v) ((struct log_kv){ (k), LOG_KV_INT, NULL, (long long)(v), 0 })
#define LKV_D(k, v) ((struct log_kv){ (k), LOG_KV_NUM, NULL, 0, (double)(v) })
/* LOG_KVS(LKV_S(..), ...) expands to "array, count" for log_event(). */
#define LOG_KVS(...) (const struct log_kv[]){ __VA_ARGS__ }, \
    sizeof((const struct log_kv[]){ __VA_ARGS__ }) / sizeof(struct log_kv)

extern int log_level;

void        log_open(const char *ident, int fd, int level); /* ident: "worker 3" */
void        log_set_ident(const char *ident);
int         log_fd(void);
int         log_parse_level(const char *s);          /* -1 if unknown */
uint64_t    log_dropped(void);
/* Also count drops into *counter (atomically), e.g. the worker's status
 * slot's log_dropped; NULL stops it.  log_open() resets it. */
void        log_set_dropped_counter(uint64_t *counter);
/* Workers: stage records and send them as one datagram (whole lines,
 * LOG_PACK_MAX at most) from log_flush() (the worker calls it from its
 * loop: log_staged() says how many wait); a datagram the socket cannot
 * take drops and counts all its records.
 * Turning it off flushes.  Staged records are flushed at exit too. */
void        log_set_batching(int on);
void        log_flush(void);
size_t      log_staged(void);                        /* records staged now */
void        log_msg(int level, const char *fmt, ...)
                __attribute__((format(printf, 2, 3)));
/* log.format: text records are exactly log_msg()'s; JSON records carry
 * ts, level, proc, pid, event, the fields kv[0..n) and msg (the text).
 * Set in each process (inherited across fork); log_open() keeps it. */
void        log_set_format(int format);
/* A record with an event name and structured fields: in text the fields
 * are not printed (fmt says it all, unchanged), in JSON they are. */
void        log_event(int level, const char *event, const struct log_kv *kv,
                size_t n, const char *fmt, ...)
                __attribute__((format(printf, 5, 6)));

/* The record log_event() would send, in format (LOG_FORMAT_*), written
 * into rec (LOG_RECORD_MAX bytes) instead, whatever the level: for the
 * log process, which writes its own records into its batch.  Its length
 * (ending with its newline, in either format). */
size_t      log_render(int format, char *rec, int level, const char *event,
                const struct log_kv *kv, size_t nkv, const char *fmt, ...)
                __attribute__((format(printf, 7, 8)));

#define log_enabled(l)  ((l) <= log_level)
#define log_err(...)    log_msg(LOGL_ERR, __VA_ARGS__)
#define log_warn(...)   log_msg(LOGL_WARN, __VA_ARGS__)
#define log_notice(...) log_msg(LOGL_NOTICE, __VA_ARGS__)
#define log_info(...)   do { if (log_enabled(LOGL_INFO)) \
                            log_msg(LOGL_INFO, __VA_ARGS__); } while (0)
#define log_debug(...)  do { if (log_enabled(LOGL_DEBUG)) \
                            log_msg(LOGL_DEBUG, __VA_ARGS__); } while (0)
/* log_ev(LOGL_INFO, "delivery", LOG_KVS(...), "fmt", ...): skipped
 * entirely (fields unevaluated) when the level is off. */
#define log_ev(l, ...)  do { if (log_enabled(l)) \
                            log_event((l), __VA_ARGS__); } while (0)

#endif /* MTAD_LOG_H */
