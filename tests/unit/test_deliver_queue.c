/*
 * test_deliver_queue.c - the schedule against a real spool and router in
 * a temp dir: recovery takes only this worker's shard and skips held
 * messages, deliveries on "discard"/"maildir" routes remove the message,
 * a "defer:" route keeps it with the attempt counted and the next retry
 * saved, a null-sender "reject:" leaves no bounce behind, a bounce goes
 * out while another recipient is still deferred (and only once), and
 * "kick *" picks up messages queued behind the schedule's back.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "router/router.h"
#include "spool/spool.h"
#include "delivery/delivery.h"

static char             dir[64];
static struct spool    *sp0, *sp1;
static struct router   *rt;
static struct config    cfg;
static uint64_t         retry[] = { 3600000 };

static void
setup(void)
{
    char path[128];

    log_open("test", -1, LOGL_ERR);
    strcpy(dir, "/tmp/test_deliverXXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/spool", dir);
    cr_assert_eq(spool_prepare(path, (uid_t)-1, (gid_t)-1), SPOOL_OK);
    cr_assert_eq(spool_open(&sp0, path, 0, 0), SPOOL_OK);
    cr_assert_eq(spool_open(&sp1, path, 0, 1), SPOOL_OK);
    snprintf(path, sizeof(path), "%s/routes.mdb", dir);
    cr_assert_eq(router_open(&rt, path, "discard", 1), ROUTER_OK, "%s",
        rt ? router_errstr(rt) : "");
    snprintf(path, sizeof(path), "maildir:%s/md", dir);
    cr_assert_eq(router_put(rt, "md.test", path), ROUTER_OK);
    cr_assert_eq(router_put(rt, "later.test", "defer:451 4.3.2 not now"),
        ROUTER_OK);
    cr_assert_eq(router_put(rt, "no.test", "reject:550 5.7.1 go away"),
        ROUTER_OK);
    memset(&cfg, 0, sizeof(cfg));
    cfg.hostname = "mx.test";
    cfg.retry_ms = retry;
    cfg.nretry = 1;
    cfg.max_queue_time_ms = 5ULL * 86400 * 1000;
    cfg.connections_per_destination = 2;
    cfg.connect_timeout_ms = 1000;
}

static void
teardown(void)
{
    char cmd[128];

    router_close(rt);
    spool_close(sp0);
    spool_close(sp1);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void)!system(cmd);
}

/* queue one message from sender to rcpt through sp; returns its id */
static void
put(struct spool *sp, const char *sender, const char *rcpt, char *id)
{
    struct spool_env  env;
    struct spool_rcpt rc;
    struct spool_msg *m = NULL;
    const char        body[] = "Subject: x\r\n\r\nhello\r\n";

    memset(&env, 0, sizeof(env));
    memset(&rc, 0, sizeof(rc));
    env.sender = (char *)sender;
    env.client_ip = "127.0.0.1";
    rc.addr = (char *)rcpt;
    env.rcpt = &rc;
    env.nrcpt = 1;
    cr_assert_eq(spool_create(sp, &env, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, body, sizeof(body) - 1), SPOOL_OK);
    cr_assert_eq(spool_finish(m), SPOOL_OK);
    strcpy(id, spool_msg_id(m));
    cr_assert_eq(spool_commit(m), SPOOL_OK);
}

static int
queued(const char *id)
{
    struct spool_env *env = NULL;
    int               rc = spool_msg_open(sp0, id, 0, &env, NULL, NULL);

    spool_env_free(env);
    return rc == SPOOL_OK;
}

static void
tick(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    int *left = arg;

    if (--*left <= 0)
        ev_stop(loop);
    else
        ev_timer_start(loop, t, 10);
}

/* run the loop for about ms milliseconds */
static void
spin(struct ev_loop *loop, int ms)
{
    struct ev_timer t;
    int             left = ms / 10;

    ev_timer_init(&t, tick, &left);
    ev_timer_start(loop, &t, 10);
    ev_run(loop);
    ev_timer_stop(loop, &t);
}

TestSuite(deliver_queue, .init = setup, .fini = teardown, .timeout = 30);

Test(deliver_queue, recover_takes_own_shard_skips_held)
{
    char              mine[SPOOL_ID_SIZE], other[SPOOL_ID_SIZE],
                      held[SPOOL_ID_SIZE];
    struct spool_env *env = NULL;
    int               fd = -1;
    off_t             off;
    struct ev_loop   *loop = ev_new();
    struct deliver   *d;

    put(sp0, "a@x.test", "b@y.test", mine);
    put(sp1, "a@x.test", "b@y.test", other);
    put(sp0, "a@x.test", "b@y.test", held);
    cr_assert_eq(deliver_shard_of(mine, 2), 0);
    cr_assert_eq(deliver_shard_of(other, 2), 1);
    cr_assert_eq(spool_msg_open(sp0, held, 1, &env, &fd, &off), SPOOL_OK);
    env->held = 1;
    cr_assert_eq(spool_state_save(sp0, env), SPOOL_OK);
    close(fd);
    spool_env_free(env);

    d = deliver_new(loop, &cfg, sp0, rt, NULL, 0, 2);
    cr_assert_eq(deliver_recover(d), 0);
    spin(loop, 300);
    cr_assert_not(queued(mine), "own message delivered (discard)");
    cr_assert(queued(other), "other shard's message untouched");
    cr_assert(queued(held), "held message untouched");
    cr_assert_eq(deliver_drain(d), 0);
    deliver_free(d);
    ev_free(loop);
}

Test(deliver_queue, maildir_and_defer_routes)
{
    char              a[SPOOL_ID_SIZE], b[SPOOL_ID_SIZE], path[128];
    struct spool_env *env = NULL;
    struct ev_loop   *loop = ev_new();
    struct deliver   *d = deliver_new(loop, &cfg, sp0, rt, NULL, 0, 1);
    uint64_t          before = util_wall_ms();
    FILE             *p;
    char              line[256] = "";

    put(sp0, "a@x.test", "u@md.test", a);
    put(sp0, "a@x.test", "u@later.test", b);
    deliver_submit(d, a);
    deliver_submit(d, b);
    spin(loop, 300);
    cr_assert_not(queued(a));
    snprintf(path, sizeof(path), "cat %s/md/new/*", dir);
    p = popen(path, "r");
    cr_assert_not_null(fgets(line, sizeof(line), p));
    pclose(p);
    cr_assert_str_eq(line, "Return-Path: <a@x.test>\n");
    /* deferred: still queued, one attempt, next retry an hour away */
    cr_assert_eq(spool_msg_open(sp0, b, 0, &env, NULL, NULL), SPOOL_OK);
    cr_assert_eq(env->attempts, 1);
    cr_assert_eq(env->rcpt[0].status, SPOOL_RCPT_PENDING);
    cr_assert_str_eq(env->rcpt[0].last_reply, "451 4.3.2 not now");
    cr_assert(env->next_retry_ms >= before + 3600000);
    spool_env_free(env);
    deliver_free(d);
    ev_free(loop);
}

Test(deliver_queue, null_sender_reject_leaves_nothing)
{
    char            a[SPOOL_ID_SIZE];
    char          (*ids)[SPOOL_ID_SIZE] = NULL;
    size_t          n = 0;
    struct ev_loop *loop = ev_new();
    struct deliver *d = deliver_new(loop, &cfg, sp0, rt, NULL, 0, 1);

    put(sp0, "", "u@no.test", a);
    deliver_submit(d, a);
    spin(loop, 300);
    cr_assert_eq(spool_list(sp0, &ids, &n), SPOOL_OK);
    cr_assert_eq(n, 0, "no message and no bounce left");
    free(ids);
    deliver_free(d);
    ev_free(loop);
}

Test(deliver_queue, reject_route_bounces_to_the_sender)
{
    char              a[SPOOL_ID_SIZE];
    char            (*ids)[SPOOL_ID_SIZE] = NULL;
    size_t            n = 0;
    struct spool_env *env = NULL;
    struct ev_loop   *loop = ev_new();
    struct deliver   *d = deliver_new(loop, &cfg, sp0, rt, NULL, 0, 1);

    /* the bounce goes to a@later.test, which defers: it stays queued */
    put(sp0, "a@later.test", "u@no.test", a);
    deliver_submit(d, a);
    spin(loop, 300);
    cr_assert(!queued(a));
    cr_assert_eq(spool_list(sp0, &ids, &n), SPOOL_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(spool_msg_open(sp0, ids[0], 0, &env, NULL, NULL), SPOOL_OK);
    cr_assert_str_eq(env->sender, "");
    cr_assert_str_eq(env->rcpt[0].addr, "a@later.test");
    spool_env_free(env);
    free(ids);
    deliver_free(d);
    ev_free(loop);
}

Test(deliver_queue, kick_all_picks_up_what_came_after_recovery)
{
    char            a[SPOOL_ID_SIZE];
    struct ev_loop *loop = ev_new();
    struct deliver *d = deliver_new(loop, &cfg, sp0, rt, NULL, 0, 1);
    int             i;

    cr_assert_eq(deliver_recover(d), 0);
    /* queued behind our back, as a draining old generation would */
    put(sp0, "a@x.test", "b@y.test", a);
    spin(loop, 1300);
    cr_assert(queued(a), "nothing scans the spool by itself");
    deliver_kick(d, "*");               /* the master's hand-over */
    for (i = 0; i < 50 && queued(a); i++)
        spin(loop, 100);
    cr_assert_not(queued(a), "the kick scheduled and delivered it");
    deliver_free(d);
    ev_free(loop);
}


/* put2 - one message to two recipients */
static void
put2(struct spool *sp, const char *sender, const char *r1, const char *r2,
    char *id)
{
    struct spool_env  env;
    struct spool_rcpt rc[2];
    struct spool_msg *m = NULL;
    const char        body[] = "Subject: two\r\n\r\nhello\r\n";

    memset(&env, 0, sizeof(env));
    memset(rc, 0, sizeof(rc));
    env.sender = (char *)sender;
    env.client_ip = "127.0.0.1";
    rc[0].addr = (char *)r1;
    rc[1].addr = (char *)r2;
    env.rcpt = rc;
    env.nrcpt = 2;
    cr_assert_eq(spool_create(sp, &env, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, body, sizeof(body) - 1), SPOOL_OK);
    cr_assert_eq(spool_finish(m), SPOOL_OK);
    strcpy(id, spool_msg_id(m));
    cr_assert_eq(spool_commit(m), SPOOL_OK);
}


/* md_count - messages delivered into the test maildir */
static int
md_count(void)
{
    char  cmd[160], line[32] = "";
    FILE *f;

    snprintf(cmd, sizeof(cmd), "ls %s/md/new 2>/dev/null | wc -l", dir);
    f = popen(cmd, "r");
    cr_assert_not_null(f);
    (void)!fgets(line, sizeof(line), f);
    pclose(f);
    return atoi(line);
}


Test(deliver_queue, bounce_goes_out_while_others_are_deferred_and_once)
{
    char              a[SPOOL_ID_SIZE];
    struct spool_env *env = NULL;
    struct ev_loop   *loop = ev_new();
    struct deliver   *d = deliver_new(loop, &cfg, sp0, rt, NULL, 0, 1);
    int               i;

    /* the bounce goes to s@md.test: a maildir we can count */
    put2(sp0, "s@md.test", "u@no.test", "v@later.test", a);
    deliver_submit(d, a);
    for (i = 0; i < 50 && md_count() < 1; i++)
        spin(loop, 100);
    cr_assert_eq(md_count(), 1, "the DSN for the 550 one arrived at once");
    cr_assert(queued(a), "the deferred recipient keeps the message");
    cr_assert_eq(spool_msg_open(sp0, a, 0, &env, NULL, NULL), SPOOL_OK);
    cr_assert_eq(env->rcpt[0].status, SPOOL_RCPT_BOUNCED);
    cr_assert_eq(env->rcpt[0].notified, 1, "marked as reported");
    cr_assert_eq(env->rcpt[1].status, SPOOL_RCPT_PENDING);
    cr_assert_eq(env->attempts, 1);
    spool_env_free(env);

    deliver_kick(d, a);                 /* a second attempt: still 4xx */
    spin(loop, 500);
    cr_assert(queued(a));
    cr_assert_eq(spool_msg_open(sp0, a, 0, &env, NULL, NULL), SPOOL_OK);
    cr_assert_eq(env->attempts, 2, "the second attempt ran");
    spool_env_free(env);
    cr_assert_eq(md_count(), 1, "no second DSN for the same recipient");
    deliver_free(d);
    ev_free(loop);
}
