/*
 * logfmt.h - JSON lines for log.format: json (the formatting only; log.c
 *            sends the records).
 *
 * CONTRACT  logfmt_json() writes one JSON object and a newline into out:
 *           {"ts":..,"level":..,"proc":..,"pid":..,"event":..,<fields>,
 *           "msg":..}.  Field order and names are stable (README, "Log
 *           records").  Every string is escaped: quote, backslash and
 *           control bytes as \uXXXX / \n..., bytes that are not valid
 *           UTF-8 as \u00XX (the byte read as Latin-1), so the line is
 *           always valid JSON in valid UTF-8 whatever a client sent.
 *           A record that does not fit is cut in its msg (still valid);
 *           a string field is cut at 512 bytes of output, and fields that
 *           no longer fit at all are left out.
 *           logfmt_dsn() finds the enhanced status code ("4.4.1") at the
 *           start of an SMTP reply text.  logfmt_worker_line() tells the
 *           log process whether a line is one a worker may have written.
 * FAILURE   Never fails; returns the length written (< cap).
 */
#ifndef MTAD_LOGFMT_H
#define MTAD_LOGFMT_H

#include <stddef.h>

#include "common/log.h"

size_t  logfmt_json(char *out, size_t cap, const char *ts, int level,
            const char *proc, const char *pid, const char *event,
            const struct log_kv *kv, size_t nkv, const char *msg,
            size_t msglen);
/* Escapes p[0..n) as a JSON string body (no quotes) into out; returns the
 * bytes written, never more than cap - 1 and never a cut escape. */
size_t  logfmt_json_str(char *out, size_t cap, const char *p, size_t n);
/* "250 2.0.0 Ok" -> "2.0.0"; "" when there is none.  out >= 16 bytes. */
const char *logfmt_dsn(const char *reply, char *out, size_t outsz);
const char *logfmt_level_name(int level);
/* 1 when line[0..n) (without its newline) is a record of the worker with
 * pid: "<ts> mtad[<pid>]: worker <N>: ..." (text) or {"ts":"..",
 * "level":"..","proc":"worker <N>","pid":<pid>,"event":... (JSON, with
 * "cluster" for "worker <N>": the cluster sync agent's; with
 * no second "proc" or "pid" key), and no control byte (a record is
 * escaped where it is made); else 0.  What log.c makes passes. */
int     logfmt_worker_line(const char *line, size_t n, long pid);

#endif /* MTAD_LOGFMT_H */
