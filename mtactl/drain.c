/*
 * drain.c - "mtactl drain [--timeout D]": stop accepting, deliver what is
 * queued, then stop mtad (master/drain.c does the work).
 *
 * CONTRACT  Sends "drain" (with the timeout in ms) and waits until the
 *           master has gone (its control socket stops answering), polling
 *           every 200 ms, for at most the timeout plus
 *           server.shutdown_timeout plus a minute, or a day without
 *           --timeout.  Then it counts <spool>/queue: exit 0 when empty,
 *           1 when messages are left (they are delivered at the next
 *           start), 1 when mtad refused or did not go in time.
 * FAILURE   Messages to stderr as "mtactl: drain: <why>".
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/safefs.h"
#include "common/ctl.h"
#include "common/util.h"
#include "config/config.h"
#include "mtactl/mtactl.h"

#define DRAIN_POLL_US        (200 * 1000)
#define DRAIN_DEFAULT_WAIT   (24ull * 3600 * 1000)
#define DRAIN_MARGIN_MS      60000

static long
drain_queued(const struct config *cfg)
{
    if (cfg == NULL)
        return -1;
    /* the workers' directory: a link planted there is not followed */
    return safefs_count_entries(cfg->spool_dir, "queue");
}


/* drain_gone - the master no longer answers on its socket. */
static int
drain_gone(const char *sock)
{
    char *reply = NULL;
    int   rc;

    if (access(sock, F_OK) < 0)
        return 1;
    rc = ctl_request(sock, "status", 2000, &reply);
    free(reply);
    return rc == CTL_ESYS && (errno == ENOENT || errno == ECONNREFUSED);
}


int
mtactl_drain(int argc, char **argv, const char *sock, const struct config *cfg)
{
    uint64_t timeout_ms = 0, wait_ms, deadline;
    char     req[64], *reply = NULL;
    long     left;
    int      rc;

    if (argc == 3 && strcmp(argv[1], "--timeout") == 0) {
        if (util_parse_duration(argv[2], &timeout_ms) != 0 ||
            timeout_ms == 0) {
            fprintf(stderr, "mtactl: drain: --timeout: expected a duration "
                "like 10m, got '%.40s'\n", argv[2]);
            return MTACTL_USAGE;
        }
    } else if (argc != 1) {
        fprintf(stderr, "usage: mtactl drain [--timeout DURATION]\n");
        return MTACTL_USAGE;
    }
    snprintf(req, sizeof(req), timeout_ms ? "drain %llu" : "drain",
        (unsigned long long)timeout_ms);
    rc = ctl_request(sock, req, 30000, &reply);
    if (rc != CTL_OK) {
        if (rc == CTL_ESYS)
            fprintf(stderr, "mtactl: drain: cannot connect to %s: %s\n",
                sock, strerror(errno));
        else
            fprintf(stderr, "mtactl: drain: %s", reply != NULL ?
                reply : "no reply\n");
        free(reply);
        return MTACTL_FAIL;
    }
    fputs(ctl_reply_body(reply), stdout);
    fflush(stdout);
    free(reply);
    wait_ms = timeout_ms ? timeout_ms + DRAIN_MARGIN_MS +
        (cfg != NULL ? cfg->shutdown_timeout_ms : 0) : DRAIN_DEFAULT_WAIT;
    deadline = util_now_ms() + wait_ms;
    while (!drain_gone(sock)) {
        if (util_now_ms() >= deadline) {
            fprintf(stderr, "mtactl: drain: mtad still running after %llus\n",
                (unsigned long long)(wait_ms / 1000));
            return MTACTL_FAIL;
        }
        usleep(DRAIN_POLL_US);
    }
    left = drain_queued(cfg);
    if (left == 0) {
        printf("drained: mtad stopped, queue empty\n");
        return MTACTL_OK;
    }
    if (left < 0)
        printf("mtad stopped; the queue could not be counted\n");
    else
        printf("mtad stopped with %ld message%s still queued (delivered at "
            "the next start)\n", left, left == 1 ? "" : "s");
    return MTACTL_FAIL;
}
