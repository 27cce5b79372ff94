/*
 * audit.c - tell the running mtad what mtactl changed, for its log.
 *
 * PURPOSE   Queue and route changes are made by mtactl itself (under the
 *           spool's flock, or in an LMDB write transaction), not by the
 *           master; so that they still appear in mtad's log, mtactl sends
 *           "audit <action> <args>" to the control socket afterwards.  The
 *           master logs it as an "admin" record with the uid it reads
 *           from the socket (SO_PEERCRED), not one mtactl claims.
 * CONTRACT  mtactl_audit_init() once with the loaded config; mtactl_audit()
 *           only records the line: mtactl_audit_flush() sends them after
 *           the command, when mtactl has its own effective uid back (queue
 *           commands run as the spool's owner, and SO_PEERCRED reports
 *           the uid of the moment of connect()).  One request per line,
 *           at most MTACTL_AUDIT_MAX, then one "and N more" summary; best
 *           effort: 2 s at most each, silent when mtad is not running
 *           (there is no log to write to then).
 * FAILURE   Never fails the command: the change is already made.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ctl.h"
#include "common/util.h"
#include "config/config.h"
#include "mtactl/mtactl.h"

#define MTACTL_AUDIT_TIMEOUT_MS 2000
#define MTACTL_AUDIT_MAX        50

static const char *mtactl_audit_sock;
static char      **mtactl_audit_lines;
static size_t      mtactl_audit_n, mtactl_audit_more;
static char        mtactl_audit_last[64];  /* action word of the summary */

void
mtactl_audit_init(const struct config *cfg)
{
    mtactl_audit_sock = cfg != NULL ? cfg->control_socket : NULL;
}

void
mtactl_audit(const char *fmt, ...)
{
    char    req[CTL_REQUEST_MAX - 2];
    va_list ap;
    int     n;

    if (mtactl_audit_sock == NULL)
        return;
    n = snprintf(req, sizeof(req), "audit ");
    va_start(ap, fmt);
    (void)vsnprintf(req + n, sizeof(req) - (size_t)n, fmt, ap);
    va_end(ap);
    for (char *p = req; *p != '\0'; p++)     /* one request line */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    if (mtactl_audit_n == MTACTL_AUDIT_MAX) {
        mtactl_audit_more++;
        snprintf(mtactl_audit_last, sizeof(mtactl_audit_last), "%.*s",
            (int)strcspn(req + 6, " "), req + 6);
        return;
    }
    mtactl_audit_lines = xrealloc(mtactl_audit_lines,
        (mtactl_audit_n + 1) * sizeof(char *));
    mtactl_audit_lines[mtactl_audit_n++] = xstrdup(req);
}

void
mtactl_audit_flush(void)
{
    char  req[128];
    char *reply;

    for (size_t i = 0; i < mtactl_audit_n; i++) {
        reply = NULL;
        (void)ctl_request(mtactl_audit_sock, mtactl_audit_lines[i],
            MTACTL_AUDIT_TIMEOUT_MS, &reply);
        free(reply);
        free(mtactl_audit_lines[i]);
    }
    if (mtactl_audit_more > 0) {
        snprintf(req, sizeof(req), "audit %s and %zu more messages",
            mtactl_audit_last, mtactl_audit_more);
        reply = NULL;
        (void)ctl_request(mtactl_audit_sock, req, MTACTL_AUDIT_TIMEOUT_MS,
            &reply);
        free(reply);
    }
    free(mtactl_audit_lines);
    mtactl_audit_lines = NULL;
    mtactl_audit_n = mtactl_audit_more = 0;
}
