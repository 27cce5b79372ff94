/*
 * ctl_req.c - the control socket's request line (see ctl_req.h).  The
 * requests are those of common/ctl.h; what each does is control.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spool/spool.h"
#include "master/ctl_req.h"

static void
ctl_req_bad(struct ctl_req *r, const char *text)
{
    r->kind = CTL_REQ_BAD;
    snprintf(r->error, sizeof(r->error), "error: %s\n", text);
}


/* ctl_req_drain - "" or " <ms>" after "drain". */
static void
ctl_req_drain(struct ctl_req *r, const char *arg)
{
    char *end;

    r->kind = CTL_REQ_DRAIN;
    if (*arg == '\0')
        return;
    if (*arg != ' ') {
        ctl_req_bad(r, "unknown request");
        return;
    }
    if (arg[1] < '0' || arg[1] > '9') {
        ctl_req_bad(r, "drain: expected a timeout in ms");
        return;
    }
    errno = 0;
    r->drain_ms = strtoull(arg + 1, &end, 10);
    /* no sign, no blank, and no wrap of now + ms into the past */
    if (*end != '\0' || errno == ERANGE || r->drain_ms > CTL_REQ_DRAIN_MAX_MS)
        ctl_req_bad(r, "drain: expected a timeout in ms");
}


static void
ctl_req_unknown(struct ctl_req *r, const char *line)
{
    char   esc[UTIL_ESC_ROOM(CTL_REQ_QUOTE_MAX)];
    size_t n = strlen(line);

    util_escape(esc, sizeof(esc), line, n < CTL_REQ_QUOTE_MAX ? n :
        CTL_REQ_QUOTE_MAX, 0, NULL);
    r->kind = CTL_REQ_BAD;
    snprintf(r->error, sizeof(r->error), "error: unknown request '%s'\n",
        esc);
}


void
ctl_req_parse(char *line, int sandbox_test, struct ctl_req *r)
{
    static const struct {
        const char       *word;
        enum ctl_req_kind kind;
    } exact[] = {
        { "status json", CTL_REQ_STATUS_JSON }, { "status", CTL_REQ_STATUS },
        { "reload", CTL_REQ_RELOAD }, { "stop", CTL_REQ_STOP },
        { "check", CTL_REQ_CHECK }, { "queue-stream", CTL_REQ_QUEUE_STREAM },
        { "routes", CTL_REQ_ROUTES }, { "hosts", CTL_REQ_HOSTS },
    };
    size_t i;

    memset(r, 0, sizeof(*r));
    line[strcspn(line, "\r\n")] = '\0';
    for (i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (strcmp(line, exact[i].word) == 0) {
            r->kind = exact[i].kind;
            return;
        }
    if (strncmp(line, "audit ", 6) == 0) {
        r->kind = CTL_REQ_AUDIT;
    } else if (strncmp(line, "drain", 5) == 0) {
        ctl_req_drain(r, line + 5);
    } else if (strncmp(line, "ban ", 4) == 0) {
        r->kind = CTL_REQ_BAN;
        r->arg = line + 4;
    } else if (strncmp(line, "shaping ", 8) == 0) {
        r->kind = CTL_REQ_SHAPING;
        r->arg = line + 8;
    } else if (strncmp(line, "cluster ", 8) == 0) {
        r->kind = CTL_REQ_CLUSTER;
        r->arg = line + 8;
    } else if (strncmp(line, "quota ", 6) == 0) {
        r->kind = CTL_REQ_QUOTA;
        r->arg = line + 6;
    } else if (strncmp(line, "greylist ", 9) == 0) {
        r->kind = CTL_REQ_GREYLIST;
        r->arg = line + 9;
    } else if (strncmp(line, "tls ", 4) == 0) {
        r->kind = CTL_REQ_TLS;
        r->arg = line + 4;
    } else if (strncmp(line, "kick ", 5) == 0 ||
        strncmp(line, "index ", 6) == 0) {
        /* "index": the same, sent by mtactl after a queue change it has
         * reported already ("audit"), so not recorded again */
        r->kind = CTL_REQ_KICK;
        r->arg = line + (line[0] == 'k' ? 5 : 6);
        if (strcmp(r->arg, "*") != 0 && !spool_id_valid(r->arg))
            ctl_req_bad(r, line[0] == 'k' ? "kick: expected a queue id or *"
                : "index: expected a queue id or *");
    } else if (strcmp(line, "sandbox-test") == 0 && sandbox_test) {
        r->kind = CTL_REQ_SANDBOX_TEST;
    } else {
        ctl_req_unknown(r, line);
    }
}
