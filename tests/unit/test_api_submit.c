/*
 * test_api_submit.c - the API's SMTP client to the injection socket
 * (api/api_submit.c) against a scripted server thread on a unix socket:
 * the PROXY header and the pipelined envelope on the wire, the content
 * dot-stuffed with lone LFs made CRLF, the pool's reuse, all or nothing
 * (a refused RCPT closes inside DATA, or RSET when DATA is refused), a
 * connection lost after the dot is a failure, and an idle connection the
 * server dropped is retried once on a fresh one.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <criterion/criterion.h>

#include "api/api_submit.h"
#include "common/ev.h"

enum { M_OK, M_RCPT2_REFUSED, M_ALL_REFUSED, M_DROP_AFTER_DOT,
       M_DROP_SECOND_MAIL };

struct srv {
    int         lfd;
    int         mode;
    char        path[108];
    pthread_t   th;
    int         conns;              /* connections accepted */
    char        wire[8192];         /* what the first message looked like */
    size_t      nwire;
    int         closed_in_data;     /* the client hung up inside DATA */
    int         rsets;
};

static int
srv_line(int fd, char *buf, size_t sz)
{
    size_t n = 0;
    char   c;

    while (n + 1 < sz) {
        if (read(fd, &c, 1) != 1)
            return -1;
        buf[n++] = c;
        if (c == '\n')
            break;
    }
    buf[n] = '\0';
    return (int)n;
}

static void
srv_say(int fd, const char *s)
{
    cr_assert(write(fd, s, strlen(s)) == (ssize_t)strlen(s));
}

static void
srv_record(struct srv *s, const char *p, size_t n)
{
    if (s->nwire + n < sizeof(s->wire)) {
        memcpy(s->wire + s->nwire, p, n);
        s->nwire += n;
    }
}

/* srv_session - one connection; returns when the client leaves. */
static void
srv_session(struct srv *s, int fd, int conn)
{
    char line[1024];
    int  rcpts = 0, mails = 0, n;

    if (srv_line(fd, line, sizeof(line)) < 0)
        return;
    srv_record(s, line, strlen(line));          /* the PROXY line */
    srv_say(fd, "220 fake ESMTP\r\n");
    if (srv_line(fd, line, sizeof(line)) < 0)
        return;
    srv_say(fd, "250-fake\r\n250-PIPELINING\r\n250 DSN\r\n");
    while ((n = srv_line(fd, line, sizeof(line))) > 0) {
        if (conn == 1 && s->nwire < sizeof(s->wire) / 2)
            srv_record(s, line, (size_t)n);
        if (strncmp(line, "MAIL", 4) == 0) {
            rcpts = 0;
            if (++mails == 2 && s->mode == M_DROP_SECOND_MAIL && conn == 1)
                return;             /* as if it had timed the session out */
            srv_say(fd, "250 2.1.0 Ok\r\n");
        } else if (strncmp(line, "RCPT", 4) == 0) {
            rcpts++;
            if (s->mode == M_ALL_REFUSED ||
                (s->mode == M_RCPT2_REFUSED && rcpts == 2))
                srv_say(fd, "550 5.1.1 no such user\r\n");
            else
                srv_say(fd, "250 2.1.5 Ok\r\n");
        } else if (strncmp(line, "DATA", 4) == 0) {
            if (s->mode == M_ALL_REFUSED) {
                srv_say(fd, "554 5.5.1 no valid recipients\r\n");
                continue;
            }
            srv_say(fd, "354 go\r\n");
            for (;;) {
                if ((n = srv_line(fd, line, sizeof(line))) <= 0) {
                    s->closed_in_data = 1;
                    return;
                }
                if (conn == 1)
                    srv_record(s, line, (size_t)n);
                if (strcmp(line, ".\r\n") == 0)
                    break;
            }
            if (s->mode == M_DROP_AFTER_DOT)
                return;
            srv_say(fd, "250 2.0.0 Ok: queued as 1A2B3C4D5E6F7081\r\n");
        } else if (strncmp(line, "RSET", 4) == 0) {
            s->rsets++;
            srv_say(fd, "250 2.0.0 Ok\r\n");
        } else if (strncmp(line, "QUIT", 4) == 0) {
            srv_say(fd, "221 bye\r\n");
            return;
        }
    }
}

static void *
srv_main(void *arg)
{
    struct srv *s = arg;
    int         fd;

    while ((fd = accept(s->lfd, NULL, NULL)) >= 0) {
        s->conns++;
        srv_session(s, fd, s->conns);
        close(fd);
    }
    return NULL;
}

static void
srv_start(struct srv *s, int mode)
{
    struct sockaddr_un sun;

    memset(s, 0, sizeof(*s));
    s->mode = mode;
    snprintf(s->path, sizeof(s->path), "/tmp/test_api_submit.%d.sock",
        (int)getpid());
    unlink(s->path);
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, s->path);
    s->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(s->lfd >= 0);
    cr_assert(bind(s->lfd, (struct sockaddr *)&sun, sizeof(sun)) == 0);
    cr_assert(listen(s->lfd, 8) == 0);
    cr_assert(pthread_create(&s->th, NULL, srv_main, s) == 0);
}

static void
srv_stop(struct srv *s)
{
    shutdown(s->lfd, SHUT_RDWR);
    close(s->lfd);
    unlink(s->path);
}

/* --- the client side ---------------------------------------------------- */

struct run {
    struct ev_loop          *loop;
    int                      left;
    struct api_submit_result r[4];
    int                      n;
};

static void
on_done(void *arg, const struct api_submit_result *r)
{
    struct run *x = arg;

    x->r[x->n++] = *r;
    if (--x->left == 0)
        ev_stop(x->loop);
}

static struct sockaddr_storage client;

static const struct api_submit_rcpt rcpts[2] = {
    { "b@y.test", API_NOTIFY_SUCCESS | API_NOTIFY_DELAY, "rfc822;b@y.test" },
    { "c@y.test", 0, NULL },
};

static void
send_one(struct api_submit *p, struct run *x, const char *body)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)&client;
    struct api_submit_msg m = { "a@x.test", rcpts, 2, "HDRS", "e 1",
        (const unsigned char *)body, strlen(body), &client };
    const char *why;

    s4->sin_family = AF_INET;
    s4->sin_port = htons(4242);
    inet_pton(AF_INET, "192.0.2.5", &s4->sin_addr);
    x->left++;
    cr_assert(api_submit_send(p, &m, on_done, x, &why) == 0);
}

static void
on_spin(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    ev_stop(loop);
}

/* spin - run the loop for ms (answers that come after a done()). */
static void
spin(struct ev_loop *loop, uint64_t ms)
{
    struct ev_timer t;

    ev_timer_init(&t, on_spin, NULL);
    ev_timer_start(loop, &t, ms);
    cr_assert(ev_run(loop) >= 0);
    ev_timer_stop(loop, &t);
}

static void
run_until_done(struct run *x)
{
    cr_assert(ev_run(x->loop) >= 0);
}

Test(api_submit, wire_format_and_reuse)
{
    struct srv         s;
    struct run         x = { 0 };
    struct api_submit *p;
    size_t             open, idle;

    srv_start(&s, M_OK);
    x.loop = ev_new();
    p = api_submit_new(x.loop, s.path);
    send_one(p, &x, "Subject: t\n\n.dot\r\n..two\nend");
    run_until_done(&x);
    cr_assert_eq(x.r[0].status, API_SUBMIT_OK);
    cr_assert_str_eq(x.r[0].queue_id, "1A2B3C4D5E6F7081");
    s.wire[s.nwire] = '\0';
    cr_assert_str_eq(s.wire,
        "PROXY TCP4 192.0.2.5 127.0.0.1 4242 0\r\n"
        "MAIL FROM:<a@x.test> SIZE=32 RET=HDRS ENVID=e+201\r\n"
        "RCPT TO:<b@y.test> NOTIFY=SUCCESS,DELAY ORCPT=rfc822;b@y.test\r\n"
        "RCPT TO:<c@y.test>\r\n"
        "DATA\r\n"
        "Subject: t\r\n\r\n..dot\r\n...two\r\nend\r\n.\r\n");
    api_submit_counts(p, &open, &idle);
    cr_assert_eq(open, 1);
    cr_assert_eq(idle, 1);
    send_one(p, &x, "Subject: 2\r\n\r\nx\r\n");
    run_until_done(&x);
    cr_assert_eq(x.r[1].status, API_SUBMIT_OK);
    cr_assert_eq(s.conns, 1, "the idle connection was reused");
    api_submit_free(p);
    ev_free(x.loop);
    srv_stop(&s);
}

Test(api_submit, refused_rcpt_closes_inside_data)
{
    struct srv         s;
    struct run         x = { 0 };
    struct api_submit *p;

    srv_start(&s, M_RCPT2_REFUSED);
    x.loop = ev_new();
    p = api_submit_new(x.loop, s.path);
    send_one(p, &x, "Subject: t\r\n\r\nx\r\n");
    run_until_done(&x);
    cr_assert_eq(x.r[0].status, API_SUBMIT_REFUSED);
    cr_assert_eq(x.r[0].stage, API_STAGE_RCPT);
    cr_assert_eq(x.r[0].rcpt, 1);
    cr_assert_eq(x.r[0].reply.code, 550);
    cr_assert_str_eq(x.r[0].enhanced, "5.1.1");
    api_submit_free(p);
    ev_free(x.loop);
    srv_stop(&s);
    pthread_join(s.th, NULL);
    cr_assert(s.closed_in_data, "no final dot after a refused RCPT");
}

Test(api_submit, refused_data_is_rset_and_the_connection_kept)
{
    struct srv         s;
    struct run         x = { 0 };
    struct api_submit *p;
    size_t             open, idle;

    srv_start(&s, M_ALL_REFUSED);
    x.loop = ev_new();
    p = api_submit_new(x.loop, s.path);
    send_one(p, &x, "Subject: t\r\n\r\nx\r\n");
    run_until_done(&x);
    cr_assert_eq(x.r[0].status, API_SUBMIT_REFUSED);
    cr_assert_eq(x.r[0].stage, API_STAGE_RCPT);
    cr_assert_eq(x.r[0].rcpt, 0);
    /* the RSET's answer puts it back in the pool */
    for (int i = 0; i < 200; i++) {
        api_submit_counts(p, &open, &idle);
        if (idle == 1)
            break;
        spin(x.loop, 10);
    }
    cr_assert_eq(idle, 1);
    cr_assert_geq(s.rsets, 1);
    api_submit_free(p);
    ev_free(x.loop);
    srv_stop(&s);
}

Test(api_submit, lost_after_the_dot_is_a_failure)
{
    struct srv         s;
    struct run         x = { 0 };
    struct api_submit *p;

    srv_start(&s, M_DROP_AFTER_DOT);
    x.loop = ev_new();
    p = api_submit_new(x.loop, s.path);
    send_one(p, &x, "Subject: t\r\n\r\nx\r\n");
    run_until_done(&x);
    cr_assert_eq(x.r[0].status, API_SUBMIT_FAILED);
    cr_assert_eq(x.r[0].stage, API_STAGE_CONTENT);
    cr_assert_eq(s.conns, 1, "not retried: it may have been accepted");
    api_submit_free(p);
    ev_free(x.loop);
    srv_stop(&s);
}

Test(api_submit, dropped_idle_connection_is_retried_once)
{
    struct srv         s;
    struct run         x = { 0 };
    struct api_submit *p;

    srv_start(&s, M_DROP_SECOND_MAIL);
    x.loop = ev_new();
    p = api_submit_new(x.loop, s.path);
    send_one(p, &x, "Subject: 1\r\n\r\nx\r\n");
    run_until_done(&x);
    cr_assert_eq(x.r[0].status, API_SUBMIT_OK);
    send_one(p, &x, "Subject: 2\r\n\r\nx\r\n");
    run_until_done(&x);
    cr_assert_eq(x.r[1].status, API_SUBMIT_OK);
    cr_assert_eq(s.conns, 2);
    api_submit_free(p);
    ev_free(x.loop);
    srv_stop(&s);
}

Test(api_submit, no_server_is_a_failure_and_bad_addresses_refused)
{
    struct run         x = { 0 };
    struct api_submit *p;
    struct api_submit_rcpt bad = { "b@y.test>", 0, NULL };
    struct api_submit_msg m = { "a@x.test", &bad, 1, NULL, NULL,
        (const unsigned char *)"x", 1, NULL };
    const char *why = NULL;

    x.loop = ev_new();
    p = api_submit_new(x.loop, "/nonexistent/inject.sock");
    cr_assert_eq(api_submit_send(p, &m, on_done, &x, &why), -1);
    cr_assert_not_null(why);
    send_one(p, &x, "x");
    run_until_done(&x);
    cr_assert_eq(x.r[0].status, API_SUBMIT_FAILED);
    api_submit_free(p);
    ev_free(x.loop);
}
