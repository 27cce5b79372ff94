/*
 * log.c - format log records and hand each one to the log process.
 *
 * PURPOSE   "2026-11-30T05:17:31.123Z mtad[1234]: worker 3: <text>\n", one
 *           datagram per record, sent with MSG_DONTWAIT on the socketpair
 *           given to log_open().  The log process batches the writes.
 * CONTRACT  The formatted date of the current second is cached; only the
 *           millisecond digits are redone per record.  Newlines inside the
 *           text become spaces so one record is always one line.  Errors
 *           and warnings carry an "error: " / "warning: " tag.
 *           With log_set_batching(1) (the workers) records are staged and
 *           handed over by log_flush() as ONE datagram holding them all,
 *           each a whole line (LOG_PACK_MAX bytes at most, what the log
 *           process reads at once): one syscall and one socket buffer per
 *           flush instead of one per record, on both sides (the worker
 *           decides when: worker.c LOGGING; log_staged() tells it how
 *           many wait).  The stage is flushed early when full, and at
 *           exit.
 * FAILURE   Never blocks, never fails: a record the socket cannot take now
 *           is counted (log_dropped(), and the counter registered with
 *           log_set_dropped_counter(), e.g. the worker's status slot).
 *           With no fd (-1) records go to stderr synchronously.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/util.h"
#include "common/log.h"
#include "common/logfmt.h"

int log_level = LOGL_INFO;

static int       log_format = LOG_FORMAT_TEXT;

static int       log_sock = -1;
static char      log_ident[64] = "mtad";
static char      log_pidstr[16] = "0";
static uint64_t  log_ndropped;
static uint64_t *log_dropped_mirror;
static time_t    log_cached_sec = (time_t)-1;
static char      log_cached_date[32];   /* "2026-11-30T05:17:31" */

#define LOG_STAGE_MAX    64              /* records per datagram */

static int           log_batching;
static char          log_stage[LOG_PACK_MAX];
static size_t        log_stage_len;
static size_t        log_stage_n;

void
log_open(const char *ident, int fd, int level)
{
    log_stage_n = 0;
    log_stage_len = 0;
    log_batching = 0;
    log_sock = fd;
    log_level = level;
    log_ndropped = 0;
    log_dropped_mirror = NULL;
    snprintf(log_pidstr, sizeof(log_pidstr), "%d", (int)getpid());
    log_set_ident(ident);
}

static void
log_count_drop(void)
{
    log_ndropped++;
    if (log_dropped_mirror != NULL)
        __atomic_fetch_add(log_dropped_mirror, 1, __ATOMIC_RELAXED);
}


/* log_flush - hand every staged record over in one datagram.  Each
 * record one datagram (sendmmsg) cost the workers a tenth of their CPU at
 * full speed, the socket buffer and wake-up of every record included
 * (perf); the log process writes the lines as they come. */
void
log_flush(void)
{
    ssize_t r;
    int     saved = errno;

    if (log_stage_n == 0)
        return;
    while ((r = send(log_sock, log_stage, log_stage_len,
        MSG_DONTWAIT | MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    if (r < 0)
        while (log_stage_n-- > 0)
            log_count_drop();
    log_stage_n = 0;
    log_stage_len = 0;
    errno = saved;
}

size_t
log_staged(void)
{
    return log_stage_n;
}

static void
log_flush_at_exit(void)
{
    log_flush();
}

void
log_set_batching(int on)
{
    static int registered;

    if (!on)
        log_flush();
    else if (!registered) {
        atexit(log_flush_at_exit);
        registered = 1;
    }
    log_batching = on;
}

/* log_stage_add - stage one formatted record (flushing first if full). */
static void
log_stage_add(const char *rec, size_t n)
{
    int nl = n == 0 || rec[n - 1] != '\n';   /* each record a whole line */

    if (log_stage_n == LOG_STAGE_MAX || log_stage_len + n + nl > LOG_PACK_MAX)
        log_flush();
    memcpy(log_stage + log_stage_len, rec, n);
    log_stage_len += n;
    if (nl)
        log_stage[log_stage_len++] = '\n';
    log_stage_n++;
}

void
log_set_ident(const char *ident)
{
    util_strlcpy(log_ident, ident != NULL ? ident : "mtad", sizeof(log_ident));
}

void
log_set_dropped_counter(uint64_t *counter)
{
    log_dropped_mirror = counter;
}

int
log_fd(void)
{
    return log_sock;
}

uint64_t
log_dropped(void)
{
    return log_ndropped;
}

int
log_parse_level(const char *s)
{
    static const struct { const char *name; int level; } names[] = {
        { "err", LOGL_ERR }, { "error", LOGL_ERR }, { "warn", LOGL_WARN },
        { "warning", LOGL_WARN }, { "notice", LOGL_NOTICE },
        { "info", LOGL_INFO }, { "debug", LOGL_DEBUG },
    };
    size_t i;

    if (s == NULL)
        return -1;
    for (i = 0; i < ARRAY_LEN(names); i++)
        if (strcasecmp(s, names[i].name) == 0)
            return names[i].level;
    return -1;
}

/* Writes "YYYY-MM-DDTHH:MM:SS.mmmZ" into out (at least 25 bytes). */
static size_t
log_timestamp(char *out)
{
    struct timespec ts;
    struct tm       tm;
    unsigned        ms;

    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != log_cached_sec) {
        gmtime_r(&ts.tv_sec, &tm);
        strftime(log_cached_date, sizeof(log_cached_date),
            "%Y-%m-%dT%H:%M:%S", &tm);
        log_cached_sec = ts.tv_sec;
    }
    ms = (unsigned)(ts.tv_nsec / 1000000);
    memcpy(out, log_cached_date, 19);
    out[19] = '.';
    out[20] = (char)('0' + ms / 100);
    out[21] = (char)('0' + ms / 10 % 10);
    out[22] = (char)('0' + ms % 10);
    out[23] = 'Z';
    return 24;
}

void
log_set_format(int format)
{
    log_format = format;
}


static size_t log_vtext(char *rec, int level, const char *fmt, va_list ap);

/* log_send - hand one formatted record over (or write it, without fd). */
static void
log_send(const char *rec, size_t n)
{
    if (log_sock < 0) {
        (void)util_write_all(STDERR_FILENO, rec, n);
    } else if (log_batching) {
        log_stage_add(rec, n);
    } else if (send(log_sock, rec, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        log_count_drop();
    }
}


/* log_vjson - the record as one JSON line (log.format: json) into rec
 * (LOG_RECORD_MAX); its length. */
static size_t
log_vjson(char *rec, int level, const char *event, const struct log_kv *kv,
    size_t nkv, const char *fmt, va_list ap)
{
    /* LOG_RECORD_MAX like a text record: the log process reads each
     * datagram into room for one record of that size (logd.c) */
    char    msg[LOG_RECORD_MAX], ts[32];
    int     r;
    size_t  n;

    r = vsnprintf(msg, sizeof(msg), fmt, ap);
    n = r < 0 ? 0 : (size_t)r < sizeof(msg) ? (size_t)r : sizeof(msg) - 1;
    ts[log_timestamp(ts)] = '\0';
    return logfmt_json(rec, LOG_RECORD_MAX, ts, level, log_ident, log_pidstr,
        event, kv, nkv, msg, n);
}


/* log_vrender - one record in format into rec (LOG_RECORD_MAX). */
static size_t
log_vrender(int format, char *rec, int level, const char *event,
    const struct log_kv *kv, size_t nkv, const char *fmt, va_list ap)
{
    if (format == LOG_FORMAT_JSON)
        return log_vjson(rec, level, event, kv, nkv, fmt, ap);
    return log_vtext(rec, level, fmt, ap);
}


size_t
log_render(int format, char *rec, int level, const char *event,
    const struct log_kv *kv, size_t nkv, const char *fmt, ...)
{
    va_list ap;
    size_t  n;
    int     saved = errno;

    va_start(ap, fmt);
    n = log_vrender(format, rec, level, event, kv, nkv, fmt, ap);
    va_end(ap);
    errno = saved;
    return n;
}


void
log_event(int level, const char *event, const struct log_kv *kv, size_t n,
    const char *fmt, ...)
{
    char    rec[LOG_RECORD_MAX];
    va_list ap;
    int     saved = errno;

    if (level > log_level)
        return;
    va_start(ap, fmt);
    log_send(rec, log_vrender(log_format, rec, level, event, kv, n, fmt, ap));
    va_end(ap);
    errno = saved;
}


void
log_msg(int level, const char *fmt, ...)
{
    char    rec[LOG_RECORD_MAX];
    va_list ap;
    int     saved = errno;

    if (level > log_level)
        return;
    va_start(ap, fmt);
    log_send(rec, log_vrender(log_format, rec, level, "log", NULL, 0, fmt,
        ap));
    va_end(ap);
    errno = saved;
}


/* log_vtext - "<time> mtad[pid]: <proc>: <text>" (log.format: text) into
 * rec (LOG_RECORD_MAX); its length. */
static size_t
log_vtext(char *rec, int level, const char *fmt, va_list ap)
{
    char    raw[LOG_RECORD_MAX];
    size_t  n;
    int     r, saved = errno;

    n = log_timestamp(rec);
    r = snprintf(rec + n, LOG_RECORD_MAX - n, " mtad[%s]: %s: %s", log_pidstr,
        log_ident, level == LOGL_ERR ? "error: " :
        level == LOGL_WARN ? "warning: " : "");
    n += (size_t)r < LOG_RECORD_MAX - n ? (size_t)r : LOG_RECORD_MAX - n - 1;
    errno = saved;                  /* so %m still means the caller's errno */
    r = vsnprintf(raw, sizeof(raw), fmt, ap);
    /* One record, one line, and no control byte from the network (an
     * address, a HELO name, a next hop's reply) reaches the file or an
     * operator's terminal: everything is escaped here, once. */
    if (r > 0)
        n += util_escape(rec + n, LOG_RECORD_MAX - n - 1, raw,
            (size_t)r < sizeof(raw) ? (size_t)r : sizeof(raw) - 1, 0, NULL);
    rec[n++] = '\n';
    return n;
}
