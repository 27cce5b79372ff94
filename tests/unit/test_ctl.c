/*
 * test_ctl.c - common/ctl.c, the control-protocol client: the request line
 * as sent, "ok" / "error:" / garbage replies, the body split, a missing
 * socket (ENOENT) and a server that never answers (timeout).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "common/util.h"
#include "common/ctl.h"

static char sockpath[108];

/* Forks a one-shot server: reads one line, checks it, answers reply (or
 * nothing, holding the connection, when reply is NULL). */
static pid_t
serve_once(const char *expect, const char *reply)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    int                lfd, c;
    pid_t              pid;

    snprintf(sockpath, sizeof(sockpath), "/tmp/mtad-test-ctl-%d.sock",
        (int)getpid());
    unlink(sockpath);
    memcpy(sun.sun_path, sockpath, strlen(sockpath) + 1);
    lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert_geq(lfd, 0);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
    cr_assert_eq(listen(lfd, 1), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char   line[256];
        size_t n = 0;
        ssize_t r;

        alarm(10);
        c = accept(lfd, NULL, NULL);
        while (n < sizeof(line) - 1 &&
            (r = read(c, line + n, sizeof(line) - 1 - n)) > 0) {
            n += (size_t)r;
            if (memchr(line, '\n', n) != NULL)
                break;
        }
        line[n] = '\0';
        if (strcmp(line, expect) != 0)
            _exit(3);
        if (reply == NULL) {
            pause();
            _exit(0);
        }
        (void)!write(c, reply, strlen(reply));
        _exit(0);
    }
    close(lfd);
    return pid;
}

static int
reap(pid_t pid)
{
    int st = 0;

    waitpid(pid, &st, 0);
    unlink(sockpath);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(ctl, ok_reply_and_body)
{
    pid_t pid = serve_once("status\n", "ok\npid: 1\nworkers: 2\n");
    char *reply = NULL;

    cr_assert_eq(ctl_request(sockpath, "status", 5000, &reply), CTL_OK);
    cr_assert_str_eq(reply, "ok\npid: 1\nworkers: 2\n");
    cr_assert_str_eq(ctl_reply_body(reply), "pid: 1\nworkers: 2\n");
    free(reply);
    cr_assert_eq(reap(pid), 0, "the server saw a different request line");
}

Test(ctl, error_reply)
{
    pid_t pid = serve_once("reload\n", "error: rejected\nrelay.yaml:1:1: x\n");
    char *reply = NULL;

    cr_assert_eq(ctl_request(sockpath, "reload", 5000, &reply), CTL_EREFUSED);
    cr_assert_str_eq(ctl_reply_body(reply), "relay.yaml:1:1: x\n");
    free(reply);
    cr_assert_eq(reap(pid), 0);
}

Test(ctl, garbage_reply)
{
    pid_t pid = serve_once("stop\n", "HTTP/1.0 200\n");
    char *reply = NULL;

    cr_assert_eq(ctl_request(sockpath, "stop", 5000, &reply), CTL_EPROTO);
    free(reply);
    cr_assert_eq(reap(pid), 0);
}

Test(ctl, missing_socket)
{
    char *reply = (char *)"x";

    cr_assert_eq(ctl_request("/nonexistent/mtad.sock", "status", 1000,
        &reply), CTL_ESYS);
    cr_assert_eq(errno, ENOENT);
    cr_assert_null(reply);
}

Test(ctl, silent_server_times_out)
{
    pid_t pid = serve_once("status\n", NULL);
    char *reply = NULL;

    cr_assert_eq(ctl_request(sockpath, "status", 200, &reply), CTL_ESYS);
    cr_assert_eq(errno, ETIMEDOUT);
    kill(pid, SIGTERM);
    reap(pid);
}
