/*
 * api_verbs.h - the API's verbs other than status and injection: the
 * HTTP routes, each mapped to an mtactl command line that the master runs
 * (master/api_run.c), and mtactl's output mapped back to JSON.  Only
 * api/ includes it.
 *
 * CONTRACT  api_verbs_routes() adds the routes (docs/API.md lists them)
 *           to the table; call it once at start.  api_run() sends one
 *           CHAN_API_RUN to the master on api_chan_fd(a) and calls done
 *           exactly once, on the API's loop: with mtactl's exit status
 *           (0..255, 128 + N for signal N) and everything it wrote on
 *           stdout (out) and stderr (err) once both pipes ended and the
 *           master reported the exit; or with API_RUN_NOT_RUN and the
 *           master's reason (or ours) in err: refused command line,
 *           busy, the master gone, API_RUN_TIMEOUT_MS passed.  out and
 *           err are NUL-terminated and valid during done only.  argv is
 *           copied; it is mtactl's words after "mtactl -c CONFIG".
 *           api_run() returns 0 (done follows), or -1 with errno and
 *           done is never called: EBUSY (API_RUN_MAX running), EMSGSIZE
 *           (more than one channel message), EAGAIN (the channel is
 *           full), EPIPE (no master channel).
 *           api_run_chan() takes the master's CHAN_API_PIPE and
 *           CHAN_API_EXIT (the API process's channel handler calls it);
 *           api_run_master_gone() ends every run (NOT_RUN) when the
 *           channel closed.
 * LIMITS    API_RUN_MAX runs at once (past it: NOT_RUN "busy"); out is
 *           cut at API_RUN_OUT_MAX bytes (status API_RUN_TOO_BIG: the
 *           handler answers 502, never half a JSON document); the
 *           payload (argv and stdin) must fit one channel message.
 */
#ifndef MTAD_API_VERBS_H
#define MTAD_API_VERBS_H

#include <stddef.h>

#include "common/chan.h"

struct api;

#define API_RUN_NOT_RUN     (-1)
#define API_RUN_TOO_BIG     (-2)
#define API_RUN_MAX         64
#define API_RUN_OUT_MAX     ((size_t)64 << 20)
#define API_RUN_ERR_MAX     ((size_t)64 << 10)
#define API_RUN_TIMEOUT_MS  150000u     /* > the master's own 120 s */

typedef void api_run_done_fn(void *arg, int status, const char *out,
            size_t out_len, const char *err, size_t err_len);

void    api_verbs_routes(struct api *a);

/* actor: who asked, for the master's admin records ("api:NAME
 * from=ADDR"; printable ASCII); api_run() says "api". */
int     api_run_as(struct api *a, const char *actor, char *const argv[],
            const void *stdin_bytes, size_t n, api_run_done_fn *done,
            void *arg);
int     api_run(struct api *a, char *const argv[], const void *stdin_bytes,
            size_t n, api_run_done_fn *done, void *arg);
void    api_run_chan(struct api *a, const struct chan_msg *m);
void    api_run_master_gone(struct api *a);

#endif /* MTAD_API_VERBS_H */
