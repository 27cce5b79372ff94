/*
 * ctl_req.h - the control socket's request line (control.c): which
 *             request it is and its argument, and the error answer to a
 *             bad one.  Pure (no I/O, no master state), apart from
 *             control.c so that tests/fuzz/fuzz_control.c can drive it.
 *             Only master/ and the tests include it.
 *
 * CONTRACT  ctl_req_parse() cuts line at its first CR or LF (in place)
 *           and fills r: the kind, r->arg for CTL_REQ_TLS (after "tls ")
 *           CTL_REQ_BAN (after "ban "), CTL_REQ_GREYLIST (after
 *           "greylist "), CTL_REQ_QUOTA (after "quota "), CTL_REQ_KICK ("kick " or "index ": a queue id,
 *           spool_id_valid(), or "*"),
 *           r->drain_ms for CTL_REQ_DRAIN ("drain" or "drain <ms>":
 *           digits only, at most CTL_REQ_DRAIN_MAX_MS; 0 when none
 *           given).  CTL_REQ_BAD comes with r->error, the whole answer:
 *           one "error: ..." line ending in LF, and a byte of the request
 *           quoted in it is escaped (util_escape): no control byte
 *           reaches mtactl's terminal.  "sandbox-test" is a request
 *           only with sandbox_test set.
 */
#ifndef MTAD_MASTER_CTL_REQ_H
#define MTAD_MASTER_CTL_REQ_H

#include <stdint.h>

#include "common/ctl.h"
#include "common/util.h"

enum ctl_req_kind {
    CTL_REQ_BAD = 0,
    CTL_REQ_STATUS,
    CTL_REQ_STATUS_JSON,
    CTL_REQ_AUDIT,                  /* "audit ...": audit_request() logs it */
    CTL_REQ_RELOAD,
    CTL_REQ_STOP,
    CTL_REQ_CHECK,
    CTL_REQ_DRAIN,
    CTL_REQ_TLS,
    CTL_REQ_KICK,
    CTL_REQ_QUEUE_STREAM,
    CTL_REQ_ROUTES,                 /* mtactl changed the routes table */
    CTL_REQ_BAN,                    /* "ban ...": ban.c checks the rest */
    CTL_REQ_HOSTS,                  /* "hosts": hosts.c */
    CTL_REQ_SHAPING,                /* "shaping ...": shaping.c's */
    CTL_REQ_GREYLIST,               /* "greylist ...": greylist.c checks */
    CTL_REQ_QUOTA,                  /* "quota ...": quota.c checks */
    CTL_REQ_CLUSTER,                /* "cluster status|json": cluster.c */
    CTL_REQ_SANDBOX_TEST
};

#define CTL_REQ_QUOTE_MAX 64        /* request bytes quoted in an error */
#define CTL_REQ_DRAIN_MAX_MS (UINT64_MAX / 2)   /* now + ms never wraps */

struct ctl_req {
    enum ctl_req_kind kind;
    const char       *arg;
    uint64_t          drain_ms;
    char              error[UTIL_ESC_ROOM(CTL_REQ_QUOTE_MAX) + 64];
};

void    ctl_req_parse(char *line, int sandbox_test, struct ctl_req *r);

#endif /* MTAD_MASTER_CTL_REQ_H */
