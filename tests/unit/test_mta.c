/*
 * test_mta.c - the outbound client state machine (delivery/mta.c) on a
 * real event loop against a scripted SMTP server thread on loopback:
 * pipelined MAIL/RCPT/DATA, per-recipient results, the dot-stuffed body,
 * HELO fallback, fail-over past a refused port, and connection reuse.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "router/route.h"
#include "spool/spool.h"
#include "delivery/mta.h"

/* ---- a small scripted server ---- */

struct fake {
    int         lfd;
    unsigned    port;
    int         pipelining, ehlo_ok, conns_to_serve;
    const char *reject;             /* RCPT answered 550 */
    char        log[8192];          /* commands received, '|' separated */
    char        body[8192];         /* raw DATA bytes up to the dot */
    size_t      nbody;
    int         conns;
    int         chunking;           /* offers CHUNKING; BDAT bytes in big */
    char       *big;
    size_t      nbig;
    pthread_t   th;
};

static int
fake_line(int fd, char *buf, size_t sz)
{
    size_t n = 0;

    while (n + 1 < sz) {
        char    ch;
        ssize_t r = read(fd, &ch, 1);

        if (r <= 0)
            return -1;
        buf[n++] = ch;
        if (ch == '\n')
            break;
    }
    buf[n] = '\0';
    return (int)n;
}

static void
fake_say(int fd, const char *s)
{
    (void)!write(fd, s, strlen(s));
}

/* fake_bdat - a BDAT chunk's n bytes, appended to f->big. */
static int
fake_bdat(struct fake *f, int fd, size_t n)
{
    f->big = realloc(f->big, f->nbig + n + 1);
    if (f->big == NULL)
        return -1;
    while (n > 0) {
        ssize_t r = read(fd, f->big + f->nbig, n);

        if (r <= 0)
            return -1;
        f->nbig += (size_t)r;
        n -= (size_t)r;
    }
    return 0;
}

static void *
fake_run(void *arg)
{
    struct fake *f = arg;
    char         line[1024];
    int          k;

    for (k = 0; k < f->conns_to_serve; k++) {
        int fd = accept(f->lfd, NULL, NULL);

        if (fd < 0)
            return NULL;
        f->conns++;
        fake_say(fd, "220 fake ESMTP\r\n");
        while (fake_line(fd, line, sizeof(line)) > 0) {
            strncat(f->log, line, sizeof(f->log) - strlen(f->log) - 2);
            f->log[strlen(f->log) - 2] = '|';   /* CRLF -> "|" */
            f->log[strlen(f->log) - 1] = '\0';
            if (strncmp(line, "EHLO", 4) == 0) {
                if (!f->ehlo_ok)
                    fake_say(fd, "502 5.5.2 no\r\n");
                else if (f->chunking)
                    fake_say(fd, "250-fake\r\n250-PIPELINING\r\n"
                        "250-CHUNKING\r\n250 DSN\r\n");
                else if (f->pipelining)
                    fake_say(fd, "250-fake\r\n250-PIPELINING\r\n250 DSN\r\n");
                else
                    fake_say(fd, "250 fake\r\n");
            } else if (strncmp(line, "HELO", 4) == 0 ||
                strncmp(line, "MAIL", 4) == 0 ||
                strncmp(line, "RSET", 4) == 0) {
                fake_say(fd, "250 2.0.0 ok\r\n");
            } else if (strncmp(line, "RCPT", 4) == 0) {
                if (f->reject && strstr(line, f->reject))
                    fake_say(fd, "550 5.1.1 no such user\r\n");
                else
                    fake_say(fd, "250 2.1.5 ok\r\n");
            } else if (strncmp(line, "BDAT ", 5) == 0) {
                if (fake_bdat(f, fd, strtoull(line + 5, NULL, 10)) < 0)
                    break;
                fake_say(fd, strstr(line, "LAST") ?
                    "250 2.0.0 queued as B1\r\n" : "250 2.0.0 chunk\r\n");
            } else if (strncmp(line, "DATA", 4) == 0) {
                fake_say(fd, "354 go\r\n");
                f->nbody = 0;
                while (fake_line(fd, line, sizeof(line)) > 0 &&
                    strcmp(line, ".\r\n") != 0) {
                    memcpy(f->body + f->nbody, line, strlen(line));
                    f->nbody += strlen(line);
                }
                fake_say(fd, "250 2.0.0 queued as F1\r\n");
            } else if (strncmp(line, "QUIT", 4) == 0) {
                fake_say(fd, "221 bye\r\n");
                break;
            } else {
                fake_say(fd, "500 what\r\n");
            }
        }
        close(fd);
    }
    return NULL;
}

static void
fake_start(struct fake *f)
{
    struct sockaddr_in sa;
    socklen_t          len = sizeof(sa);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(f->lfd >= 0);
    cr_assert(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    cr_assert(listen(f->lfd, 8) == 0);
    getsockname(f->lfd, (struct sockaddr *)&sa, &len);
    f->port = ntohs(sa.sin_port);
    cr_assert(pthread_create(&f->th, NULL, fake_run, f) == 0);
}

static unsigned
refused_port(void)
{
    struct sockaddr_in sa;
    socklen_t          len = sizeof(sa);
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    getsockname(fd, (struct sockaddr *)&sa, &len);
    close(fd);                      /* bound, never listening: refused */
    return ntohs(sa.sin_port);
}

/* silent_listener - a loopback port whose kernel accepts connections
 * that nobody ever talks on (a stalled next hop); *port set. */
static int
silent_listener(unsigned *port)
{
    struct sockaddr_in sa;
    socklen_t          len = sizeof(sa);
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    cr_assert(listen(fd, 8) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

/* ---- the client side ---- */

static const char BODY[] = "Subject: t\r\n\r\n.leading dot\r\nmid\r\n.\r\nend";

static int ndone;

static void
done(struct mta_txn *t)
{
    (void)t;
    ndone++;
}

static void
stop_when(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    int want = *(int *)arg;

    if (ndone >= want)
        ev_stop(loop);
    else
        ev_timer_start(loop, t, 5);
}

struct client {
    struct spool_env    env;
    struct spool_rcpt   rc[3];
    size_t              idx[3];
    struct mta_result res[3];
    struct mta_txn    t;
    struct route        route;
    char                text[256];
    int                 fd;
};

static void
client_init(struct client *c, const char *route_text, size_t nrcpt)
{
    char   path[] = "/tmp/test_relay_bodyXXXXXX";
    char   why[200];
    size_t i;
    static const char *addrs[] = { "a@x.test", "bad@x.test", "c@x.test" };

    memset(c, 0, sizeof(*c));
    c->fd = mkstemp(path);
    cr_assert(c->fd >= 0);
    unlink(path);
    cr_assert(write(c->fd, "HDR", 3) == 3);       /* "envelope" */
    cr_assert(write(c->fd, BODY, strlen(BODY)) == (ssize_t)strlen(BODY));
    strcpy(c->env.id, "0123456789A00ABC");
    c->env.sender = "s@y.test";
    c->env.body_size = strlen(BODY);
    c->env.rcpt = c->rc;
    c->env.nrcpt = nrcpt;
    for (i = 0; i < nrcpt; i++) {
        c->rc[i].addr = (char *)addrs[i];
        c->idx[i] = i;
    }
    snprintf(c->text, sizeof(c->text), "%s", route_text);
    cr_assert(route_parse(c->text, &c->route, why, sizeof(why)) == 0, "%s",
        why);
    c->t.env = &c->env;
    c->t.fd = c->fd;
    c->t.body_off = 3;
    c->t.dest = c->text;
    c->t.route = &c->route;
    c->t.rcpt = c->idx;
    c->t.nrcpt = nrcpt;
    c->t.res = c->res;
    c->t.done = done;
}

static void
run(struct ev_loop *loop, int want)
{
    struct ev_timer tm;

    ev_timer_init(&tm, stop_when, &want);
    ev_timer_start(loop, &tm, 5);
    cr_assert(ev_run(loop) == 0);
    ev_timer_stop(loop, &tm);
}

static void
quiet(void)
{
    log_open("test", -1, LOGL_ERR);
    ndone = 0;
}

TestSuite(mta_client, .init = quiet, .timeout = 20);

Test(mta_client, pipelined_transaction_results_and_body)
{
    struct fake     f = { .pipelining = 1, .ehlo_ok = 1, .conns_to_serve = 1,
                          .reject = "bad@" };
    struct ev_loop *loop = ev_new();
    struct mta   *r = mta_new(loop, "me.test", 2000, 2);
    struct client   c;
    char            route[64];

    fake_start(&f);
    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u", f.port);
    client_init(&c, route, 3);
    mta_submit(r, &c.t);
    cr_assert_eq(ndone, 0, "done() must not run inside mta_submit()");
    run(loop, 1);
    cr_assert_eq(c.res[0].status, MTA_SENT);
    cr_assert_str_eq(c.res[0].reply, "250 2.0.0 queued as F1");
    cr_assert_eq(c.res[1].status, MTA_BOUNCE);
    cr_assert_str_eq(c.res[1].reply, "550 5.1.1 no such user");
    cr_assert_eq(c.res[2].status, MTA_SENT);
    cr_assert(strstr(c.res[0].relay, "127.0.0.1[127.0.0.1]:") != NULL);
    cr_assert(strstr(f.log, "EHLO me.test|MAIL FROM:<s@y.test>|"
        "RCPT TO:<a@x.test>|RCPT TO:<bad@x.test>|RCPT TO:<c@x.test>|DATA|")
        != NULL, "%s", f.log);
    /* stuffed on the wire, CRLF added before the dot */
    cr_assert_eq(f.nbody, strlen("Subject: t\r\n\r\n..leading dot\r\nmid\r\n"
        "..\r\nend\r\n"));
    cr_assert(memcmp(f.body, "Subject: t\r\n\r\n..leading dot\r\nmid\r\n"
        "..\r\nend\r\n", f.nbody) == 0);
    cr_assert_eq(mta_nconns(r), 1, "kept idle for reuse");
    mta_drain(r);
    cr_assert_eq(mta_nconns(r), 0);
    pthread_join(f.th, NULL);
    cr_assert(strstr(f.log, "QUIT|") != NULL);
    mta_free(r);
    ev_free(loop);
    close(c.fd);
    close(f.lfd);
}

Test(mta_client, helo_fallback_failover_and_reuse)
{
    struct fake     f = { .pipelining = 0, .ehlo_ok = 0, .conns_to_serve = 1 };
    struct ev_loop *loop = ev_new();
    struct mta   *r = mta_new(loop, "me.test", 2000, 1);
    struct client   c1, c2;
    char            route[128];

    fake_start(&f);
    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u,smtp:[127.0.0.1]:%u",
        refused_port(), f.port);
    client_init(&c1, route, 1);
    client_init(&c2, route, 1);
    mta_submit(r, &c1.t);
    mta_submit(r, &c2.t);             /* waits: cap is 1 connection */
    run(loop, 2);
    cr_assert_eq(c1.res[0].status, MTA_SENT, "%s", c1.res[0].reply);
    cr_assert_eq(c2.res[0].status, MTA_SENT, "%s", c2.res[0].reply);
    cr_assert_eq(f.conns, 1);
    cr_assert(strstr(f.log, "EHLO me.test|HELO me.test|MAIL") != NULL, "%s",
        f.log);
    /* not pipelining: the second transaction starts with its own RSET */
    cr_assert(strstr(f.log, "DATA|RSET|MAIL FROM:<s@y.test>|RCPT TO:<a@x.test>"
        "|DATA|") != NULL, "%s", f.log);
    mta_free(r);
    pthread_join(f.th, NULL);
    ev_free(loop);
    close(c1.fd);
    close(c2.fd);
    close(f.lfd);
}

Test(mta_client, every_host_refused_defers_with_the_reason)
{
    struct ev_loop *loop = ev_new();
    struct mta   *r = mta_new(loop, "me.test", 2000, 1);
    struct client   c;
    char            route[64];

    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u", refused_port());
    client_init(&c, route, 2);
    mta_submit(r, &c.t);
    run(loop, 1);
    cr_assert_eq(c.res[0].status, MTA_DEFER);
    cr_assert_eq(c.res[1].status, MTA_DEFER);
    cr_assert(strstr(c.res[0].reply, "Connection refused") != NULL, "%s",
        c.res[0].reply);
    cr_assert_eq(mta_nconns(r), 0);
    mta_free(r);
    ev_free(loop);
    close(c.fd);
}

Test(mta_client, another_destination_reuses_an_idle_connection_to_its_host)
{
    struct fake     f = { .pipelining = 1, .ehlo_ok = 1, .conns_to_serve = 1 };
    struct ev_loop *loop = ev_new();
    struct mta   *r = mta_new(loop, "me.test", 2000, 1);
    struct client   c1, c2;
    struct mta_hop  hop;
    char            route[64];

    fake_start(&f);
    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u", f.port);
    cr_assert(mta_hop_literal("127.0.0.1", f.port, &hop) == 0);
    util_strlcpy(hop.name, "mx.shared.test", sizeof(hop.name));
    client_init(&c1, route, 1);
    client_init(&c2, route, 1);
    /* two recipient domains whose MX is the same host */
    c1.t.dest = "mx:a.test";
    c2.t.dest = "mx:b.test";
    c1.t.hops = c2.t.hops = &hop;
    c1.t.nhops = c2.t.nhops = 1;
    mta_submit(r, &c1.t);
    run(loop, 1);
    cr_assert_eq(c1.res[0].status, MTA_SENT, "%s", c1.res[0].reply);
    cr_assert(strstr(c1.res[0].relay, "mx.shared.test[127.0.0.1]:") != NULL,
        "%s", c1.res[0].relay);
    mta_submit(r, &c2.t);
    run(loop, 2);
    cr_assert_eq(c2.res[0].status, MTA_SENT, "%s", c2.res[0].reply);
    cr_assert_eq(f.conns, 1, "one connection for both domains");
    cr_assert(strstr(f.log, "DATA|RSET|MAIL FROM:<s@y.test>") != NULL, "%s",
        f.log);
    cr_assert_eq(mta_nconns(r), 1);
    mta_drain(r);
    pthread_join(f.th, NULL);
    mta_free(r);
    ev_free(loop);
    close(c1.fd);
    close(c2.fd);
    close(f.lfd);
}


/* delivery.timeouts.greeting: a next hop that never greets is left for
 * the route's next host once the limit passes. */
Test(mta_client, greeting_timeout_moves_to_next_host)
{
    struct fake     f = { .pipelining = 1, .ehlo_ok = 1, .conns_to_serve = 1 };
    struct ev_loop *loop = ev_new();
    struct mta   *r = mta_new(loop, "me.test", 2000, 1);
    struct config_mta_timeouts tmo = {
        .greeting_ms = 200, .helo_ms = 5000, .mail_ms = 5000,
        .rcpt_ms = 5000, .data_ms = 5000, .data_xfer_ms = 5000,
        .data_done_ms = 5000, .quit_ms = 5000 };
    struct client   c;
    char            route[128];
    unsigned        silent;
    int             sfd = silent_listener(&silent);

    mta_set_timeouts(r, &tmo);
    fake_start(&f);
    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u,smtp:[127.0.0.1]:%u",
        silent, f.port);
    client_init(&c, route, 1);
    mta_submit(r, &c.t);
    run(loop, 1);
    cr_assert_eq(c.res[0].status, MTA_SENT, "%s", c.res[0].reply);
    mta_drain(r);
    pthread_join(f.th, NULL);
    mta_free(r);
    ev_free(loop);
    close(c.fd);
    close(f.lfd);
    close(sfd);
}

static void
stop_now(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    ev_stop(loop);
}

/* mta_abort(): a transaction waiting on a silent next hop, and one
 * queued behind it, are cut: the connection is closed and each is handed
 * back at once, once, marked cut. */
Test(mta_client, abort_cuts_and_hands_back)
{
    struct ev_loop *loop = ev_new();
    struct mta   *r = mta_new(loop, "me.test", 2000, 1);
    struct client   c1, c2;
    struct ev_timer tm;
    char            route[64];
    unsigned        silent;
    int             sfd = silent_listener(&silent);

    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u", silent);
    client_init(&c1, route, 1);
    client_init(&c2, route, 1);
    mta_submit(r, &c1.t);
    mta_submit(r, &c2.t);               /* waits behind the cap of 1 */
    ev_timer_init(&tm, stop_now, NULL);
    ev_timer_start(loop, &tm, 100);
    cr_assert(ev_run(loop) == 0);
    cr_assert_eq(mta_nconns(r), 1);
    cr_assert_eq(ndone, 0);
    mta_abort(r, 1000);
    cr_assert_eq(mta_nconns(r), 0);
    cr_assert_eq(ndone, 2, "both handed back by mta_abort()");
    cr_assert_eq(c1.t.cut, 1);
    cr_assert_eq(c2.t.cut, 1);
    ev_timer_start(loop, &tm, 100);
    cr_assert(ev_run(loop) == 0);
    cr_assert_eq(ndone, 2, "done() once each");
    mta_free(r);
    ev_free(loop);
    close(c1.fd);
    close(c2.fd);
    close(sfd);
}

/* ---- BDAT bodies: out of memory (MTA_BLOCK), or sendfile() ---- */

/* big_body - size bytes of lines, some of them starting with a dot (BDAT
 * sends them as they are), written behind a 3-byte "envelope" of c's
 * queue file. */
static char *
big_body(struct client *c, size_t size)
{
    char  *b = malloc(size);
    size_t i;

    cr_assert(b != NULL);
    for (i = 0; i < size; i++)
        b[i] = (char)('a' + (i * 7 + i / 977) % 26);
    for (i = 0; i + 80 < size; i += 80) {
        b[i] = (i / 80) % 5 == 0 ? '.' : b[i];
        b[i + 78] = '\r';
        b[i + 79] = '\n';
    }
    cr_assert(ftruncate(c->fd, 3) == 0);
    cr_assert(pwrite(c->fd, b, size, 3) == (ssize_t)size);
    c->env.body_size = size;
    return b;
}

/* client_end - close the relay (its connection with it), wait for the
 * fake server, free what a BDAT or in-memory test allocated. */
static void
client_end(struct mta *r, struct ev_loop *loop, struct client *c,
    struct fake *f)
{
    mta_free(r);
    pthread_join(f->th, NULL);
    ev_free(loop);
    free(c->env.body_copy);
    free(f->big);
    close(c->fd);
    close(f->lfd);
}

/* in_memory: the body as spool_keep() leaves it (env->body_copy), the
 * queue file cut off behind its "envelope": a read of the file would
 * find nothing, so the body can only come from memory. */
static void
bdat_deliver(size_t size, int blocks_all_out, unsigned want_spare,
    int in_memory)
{
    struct fake     f = { .pipelining = 1, .ehlo_ok = 1, .conns_to_serve = 1,
                          .chunking = 1 };
    struct ev_loop *loop = ev_new();
    struct mta     *r = mta_new(loop, "me.test", 2000, 1);
    struct client   c;
    char            route[64];
    char           *body;

    fake_start(&f);
    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u", f.port);
    client_init(&c, route, 1);
    body = big_body(&c, size);
    if (in_memory) {
        c.env.body_copy = malloc(size);
        cr_assert(c.env.body_copy != NULL);
        memcpy(c.env.body_copy, body, size);
        cr_assert(ftruncate(c.fd, 3) == 0);
    }
    if (blocks_all_out)
        r->nblocks = MTA_BLOCKS;    /* every block held elsewhere */
    mta_submit(r, &c.t);
    run(loop, 1);
    cr_assert_eq(c.res[0].status, MTA_SENT, "%s", c.res[0].reply);
    cr_assert_str_eq(c.res[0].reply, "250 2.0.0 queued as B1");
    cr_assert_eq(f.nbig, size, "%zu bytes arrived of %zu", f.nbig, size);
    cr_assert(memcmp(f.big, body, size) == 0, "the body arrived changed");
    cr_assert_eq(r->nblocks, blocks_all_out ? MTA_BLOCKS : 0u,
        "a block still held after the body went");
    cr_assert_eq(r->nblock_spare, want_spare);
    r->nblocks = 0;
    client_end(r, loop, &c, &f);
    free(body);
}

Test(mta_client, bdat_small_body_goes_from_the_out_buffer)
{
    bdat_deliver(5000, 0, 0, 0);    /* no block taken for it */
}

Test(mta_client, bdat_big_body_goes_in_blocks_and_gives_them_back)
{
    bdat_deliver(2 * MTA_BLOCK + 12345, 0, 1, 0);
}

Test(mta_client, bdat_big_body_with_every_block_out_goes_by_sendfile)
{
    bdat_deliver(2 * MTA_BLOCK + 12345, 1, 0, 0);
}

/* A body spool_keep() left in memory goes from there, not the file. */
Test(mta_client, bdat_body_in_memory_goes_without_the_file)
{
    bdat_deliver(5000, 0, 0, 1);
}

Test(mta_client, data_body_in_memory_goes_stuffed_without_the_file)
{
    struct fake     f = { .pipelining = 1, .ehlo_ok = 1, .conns_to_serve = 1 };
    struct ev_loop *loop = ev_new();
    struct mta     *r = mta_new(loop, "me.test", 2000, 1);
    struct client   c;
    char            route[64];
    const char      want[] = "Subject: t\r\n\r\n..leading dot\r\nmid\r\n"
        "..\r\nend\r\n";

    fake_start(&f);
    snprintf(route, sizeof(route), "smtp:[127.0.0.1]:%u", f.port);
    client_init(&c, route, 1);
    c.env.body_copy = strdup(BODY);
    cr_assert(c.env.body_copy != NULL);
    cr_assert(ftruncate(c.fd, 3) == 0);     /* nothing to read there */
    mta_submit(r, &c.t);
    run(loop, 1);
    cr_assert_eq(c.res[0].status, MTA_SENT, "%s", c.res[0].reply);
    cr_assert_eq(f.nbody, sizeof(want) - 1, "%zu bytes", f.nbody);
    cr_assert(memcmp(f.body, want, f.nbody) == 0, "the body arrived changed");
    client_end(r, loop, &c, &f);
}
