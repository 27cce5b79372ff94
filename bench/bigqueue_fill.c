/*
 * bigqueue_fill.c - fill a spool with N deferred messages, straight
 * through the spool API (no SMTP), for the big-queue scenario
 * (bench/bigqueue.py).
 *
 * Usage: bigqueue_fill DIR N SHARDS [DOMAINS]
 *   Prepares DIR (spool_prepare), then commits N messages of 1 KiB, each
 *   to one recipient at one of DOMAINS domains (d<k>.bigqueue.test,
 *   default 1000), spread over shards 0..SHARDS-1 (mtad's workers), each
 *   with a saved state: one attempt made, the next one an hour away, so
 *   that a starting mtad schedules them without trying them.
 *   Prints "filled N in S s".  Exit 1 when a spool call fails.
 * Not a test: it asserts nothing about time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"
#include "spool/spool.h"

#define FILL_BODY 1024


static void __attribute__((noreturn))
fill_die(struct spool *sp, const char *what, int rc)
{
    fprintf(stderr, "bigqueue_fill: %s: rc %d: %s\n", what, rc,
        spool_errstr(sp));
    exit(1);
}


int
main(int argc, char **argv)
{
    struct spool     *sp[256];
    struct spool_rcpt rcpt;
    struct spool_env  env;
    struct spool_msg *m;
    struct timespec   t0, t1;
    char              body[FILL_BODY], addr[64];
    unsigned long     n, i, nshards, ndom;
    unsigned          s;
    uint64_t          now;
    int               rc;

    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: bigqueue_fill DIR N SHARDS [DOMAINS]\n");
        return 2;
    }
    n = strtoul(argv[2], NULL, 10);
    nshards = strtoul(argv[3], NULL, 10);
    ndom = argc > 4 ? strtoul(argv[4], NULL, 10) : 1000;
    if (nshards == 0 || nshards > 256 || ndom == 0) {
        fprintf(stderr, "bigqueue_fill: SHARDS 1..256, DOMAINS > 0\n");
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if ((rc = spool_prepare(argv[1], (uid_t)-1, (gid_t)-1)) != SPOOL_OK)
        fill_die(NULL, "prepare", rc);
    for (s = 0; s < nshards; s++)
        if ((rc = spool_open(&sp[s], argv[1], 0, s)) != SPOOL_OK)
            fill_die(NULL, "open", rc);
    memset(body, 'x', sizeof(body));
    memcpy(body, "Subject: big queue\r\n\r\n", 22);
    memcpy(body + sizeof(body) - 2, "\r\n", 2);
    now = util_wall_ms();
    for (i = 0; i < n; i++) {
        struct spool *p = sp[i % nshards];

        snprintf(addr, sizeof(addr), "user%lu@d%lu.bigqueue.test", i,
            i % ndom);
        memset(&rcpt, 0, sizeof(rcpt));
        rcpt.addr = addr;
        memset(&env, 0, sizeof(env));
        env.sender = "sender@bigqueue.test";
        env.body = SMTP_BODY_7BIT;
        env.client_ip = "127.0.0.1";
        env.client_port = 25;
        env.rcpt = &rcpt;
        env.nrcpt = 1;
        if ((rc = spool_create(p, &env, &m)) != SPOOL_OK)
            fill_die(p, "create", rc);
        if ((rc = spool_write(m, body, sizeof(body))) != SPOOL_OK)
            fill_die(p, "write", rc);
        if ((rc = spool_commit(m)) != SPOOL_OK)
            fill_die(p, "commit", rc);
        /* deferred: tried once, next attempt in an hour */
        env.attempts = 1;
        env.next_retry_ms = now + 3600 * 1000;
        rcpt.last_reply = "451 4.3.0 bigqueue: try again later";
        if ((rc = spool_state_save(p, &env)) != SPOOL_OK)
            fill_die(p, "state", rc);
    }
    for (s = 0; s < nshards; s++)
        spool_close(sp[s]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("filled %lu in %.1f s\n", n, (double)(t1.tv_sec - t0.tv_sec) +
        (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return 0;
}
