/*
 * api_run.c - the master has mtactl run for the API process
 * (CHAN_API_RUN), through a runner forked before its own seccomp filter.
 *
 * WHY       The API process runs as server.user in its own sandbox; the
 *           verbs change the spool, the routes db and the master's tables,
 *           as root does with mtactl.  So it asks the master, which has
 *           mtactl, the operator's own program, run with a command line the
 *           master checks against a table of shapes (api_argv.c): every
 *           verb keeps one implementation, its locks, checks and audit
 *           records, and the API process gains no privilege but "run one
 *           of these command lines".
 * RUNNER    The master's seccomp filter denies execve (common/sandbox.c:
 *           the master never execs; shellcode in it cannot start a shell).
 *           So at start, before that filter, when api.listen is set, the
 *           master forks one runner ("mtad: runner", root, no filter)
 *           that holds nothing but its socket to the master and does one
 *           thing: fork and exec the mtactl found next to mtad
 *           (/proc/self/exe's directory) as "mtactl -c CONFIG WORDS...",
 *           for command lines the master already checked.  Its child gets
 *           default signals and an empty mask, stdin a memfd holding the
 *           request's stdin bytes (or /dev/null), stdout and stderr two
 *           pipes, every other fd closed, and a fixed environment (PATH,
 *           LC_ALL=C).  The runner passes the pipes' read
 *           ends and the pid to the master, which passes the ends on to
 *           the API process (two CHAN_API_PIPE, SCM_RIGHTS) and never reads
 *           them; the runner reaps mtactl and reports its exit.  A runner
 *           that dies is not replaced (the master's filter is on by then):
 *           the verbs answer "not run" until mtad restarts; an API enabled
 *           by a reload only gets its verbs after a restart too.
 * ANSWER    CHAN_API_EXIT after both CHAN_API_PIPE (the channel is
 *           ordered): mtactl's exit code, 128 + N for signal N; or at once
 *           CHAN_API_NOT_RUN with why (a refused command line, too many
 *           runs, no runner, fork failed).
 * LIMITS    MASTER_API_RUNS at once; each gets MASTER_API_RUN_MS, then the
 *           runner SIGKILLs it (its exit is then 128 + 9).  The API process
 *           gone (or restarted on another channel) loses its runs' answers;
 *           the runs finish (a change under way is completed, not cut).
 * ACTOR     The master keeps each run's pid and actor (what the API
 *           process says: "api:TOKEN-NAME from=ADDR"); an admin record of
 *           a control request from that pid names it (audit.c), so
 *           mtactl's own records of an API change say who asked, and the
 *           actor cannot be claimed by any other client: it comes from the
 *           kernel's SO_PEERCRED pid, not from what mtactl sends.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "common/chan.h"
#include "common/log.h"
#include "common/util.h"
#include "config/config.h"
#include "master/api_argv.h"
#include "master/master_int.h"

/* runner -> master: a run started (the two read ends come with it),
 * ended, or could not start */
enum { RM_STARTED = 1, RM_EXIT, RM_NOT_RUN };
struct api_rmsg {
    uint32_t id;
    int32_t  kind;
    int32_t  value;                 /* STARTED: pid; EXIT: status */
};

struct api_runner {
    int      used;
    pid_t    pid;                   /* mtactl's, once started */
    uint32_t id;
    int      chan;                  /* the API channel it answers on */
    uint64_t deadline;
    int      killed;
    char     actor[CHAN_API_ACTOR_MAX];
};

struct master_api_runs {
    char             mtactl[PATH_MAX];  /* "": not found at start */
    char             config[PATH_MAX];
    pid_t            runner;            /* 0: none */
    int              fd;                /* the master's end, -1: none */
    int              watched;
    struct api_runner r[MASTER_API_RUNS];
};


/* ---- the wire between the master and the runner ------------------------ */

/* api_send_fds - one packet with up to two descriptors. */
static int
api_send_fds(int fd, const void *p, size_t n, const int *fds, int nfds)
{
    union {
        struct cmsghdr h;
        char           b[CMSG_SPACE(2 * sizeof(int))];
    }               cm;
    struct iovec    iov = { (void *)(uintptr_t)p, n };
    struct msghdr   mh;
    struct cmsghdr *c;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (nfds > 0) {
        memset(&cm, 0, sizeof(cm));
        mh.msg_control = cm.b;
        mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}


/* api_recv_fds - one packet; its descriptors (at most two, the rest
 * closed) in fds[], -1 where none.  The length, 0 at EOF, -1 (errno). */
static ssize_t
api_recv_fds(int fd, void *p, size_t n, int fds[2], int flags)
{
    union {
        struct cmsghdr h;
        char           b[CMSG_SPACE(4 * sizeof(int))];
    }               cm;
    struct iovec    iov = { p, n };
    struct msghdr   mh;
    struct cmsghdr *c;
    ssize_t         got;
    int             k = 0, f;

    fds[0] = fds[1] = -1;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cm.b;
    mh.msg_controllen = sizeof(cm.b);
    if ((got = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | flags)) < 0)
        return -1;
    for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            i++) {
            memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (k < 2)
                fds[k++] = f;
            else
                close(f);
        }
    }
    return got;
}


/* The payload of CHAN_API_RUN, taken apart; pointers into the message. */
struct api_req_run {
    struct chan_api_run head;
    const char         *actor;
    char               *argv[CHAN_API_ARGC_MAX + 1];
    const char         *in;
};


/* api_run_parse - 0, or -1 with why: the head, the actor, argc strings
 * each ending in NUL, then exactly stdin_len bytes. */
static int
api_run_parse(const char *data, size_t len, struct api_req_run *q,
    const char **why)
{
    const char *p = data, *end = data + len, *z;

    if (len < sizeof(q->head)) {
        *why = "bad run header";
        return -1;
    }
    memcpy(&q->head, p, sizeof(q->head));
    p += sizeof(q->head);
    if (q->head.argc < 1 || q->head.argc > CHAN_API_ARGC_MAX ||
        q->head.stdin_len > (size_t)(end - p)) {
        *why = "bad run header";
        return -1;
    }
    end -= q->head.stdin_len;
    q->in = end;
    for (uint32_t i = 0; i <= q->head.argc; i++) {
        if (p >= end || (z = memchr(p, '\0', (size_t)(end - p))) == NULL) {
            *why = "the arguments are cut short";
            return -1;
        }
        if (i == 0)
            q->actor = p;
        else
            q->argv[i - 1] = (char *)(uintptr_t)p;
        p = z + 1;
    }
    q->argv[q->head.argc] = NULL;
    if (p != end) {
        *why = "bytes between the arguments and the input";
        return -1;
    }
    if (strlen(q->actor) >= CHAN_API_ACTOR_MAX ||
        strspn(q->actor, " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNO"
        "PQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~") !=
        strlen(q->actor)) {
        *why = "the actor is not printable ASCII";
        return -1;
    }
    return 0;
}


/* ---- the runner (its own process) -------------------------------------- */

/* api_run_stdin - a descriptor reading in[0..n) from its start. */
static int
api_run_stdin(const char *in, size_t n)
{
    int fd;

    if (n == 0)
        return open("/dev/null", O_RDONLY | O_CLOEXEC);
    if ((fd = memfd_create("mtad-api-stdin", MFD_CLOEXEC)) < 0)
        return -1;
    if (util_write_all(fd, in, n) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}


/* api_run_exec - in mtactl's child: never returns. */
static void __attribute__((noreturn))
api_run_exec(struct master_api_runs *a, const struct api_req_run *q,
    int in, int out, int err)
{
    struct sigaction sa;
    sigset_t         none;
    char            *args[CHAN_API_ARGC_MAX + 4];
    char            *env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                               "LC_ALL=C", NULL };
    int              sig;
    size_t           i;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    for (sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            (void)sigaction(sig, &sa, NULL);
    sigemptyset(&none);
    (void)sigprocmask(SIG_SETMASK, &none, NULL);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
        _exit(127);
    (void)close_range(3, ~0U, 0);
    args[0] = "mtactl";
    args[1] = "-c";
    args[2] = a->config;
    for (i = 0; q->argv[i] != NULL; i++)
        args[3 + i] = q->argv[i];
    args[3 + i] = NULL;
    execve(a->mtactl, args, env);
    dprintf(2, "mtactl: cannot run %s: %s\n", a->mtactl, strerror(errno));
    _exit(127);
}


static void
api_runner_say(int fd, uint32_t id, int kind, int value, const char *why,
    const int *fds, int nfds)
{
    char            buf[sizeof(struct api_rmsg) + 256];
    struct api_rmsg m = { id, kind, value };
    size_t          n = why != NULL ? strlen(why) : 0;

    if (n > 255)
        n = 255;
    memcpy(buf, &m, sizeof(m));
    if (n > 0)
        memcpy(buf + sizeof(m), why, n);
    (void)api_send_fds(fd, buf, sizeof(m) + n, fds, nfds);
}


/* api_runner_start - fork and exec one run; its pid or -1. */
static pid_t
api_runner_start(struct master_api_runs *a, int fd,
    const struct api_req_run *q)
{
    int         in, out[2] = { -1, -1 }, err[2] = { -1, -1 }, ends[2];
    pid_t       pid = -1;
    const char *why = "cannot make the run's descriptors";

    if ((in = api_run_stdin(q->in, q->head.stdin_len)) >= 0 &&
        pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0) {
        why = "fork failed";
        if ((pid = fork()) == 0)
            api_run_exec(a, q, in, out[1], err[1]);
    }
    if (in >= 0)
        close(in);
    if (out[1] >= 0)
        close(out[1]);
    if (err[1] >= 0)
        close(err[1]);
    ends[0] = out[0];
    ends[1] = err[0];
    if (pid > 0)
        api_runner_say(fd, q->head.id, RM_STARTED, (int)pid, NULL, ends, 2);
    else
        api_runner_say(fd, q->head.id, RM_NOT_RUN, 0, why, NULL, 0);
    if (out[0] >= 0)
        close(out[0]);
    if (err[0] >= 0)
        close(err[0]);
    return pid;
}


/* api_runner_main - the runner's loop: requests from the master, the
 * exits of its children; ends when the master's end closes. */
static void __attribute__((noreturn))
api_runner_main(struct master_api_runs *a, int fd)
{
    static char        buf[CHAN_MSG_MAX + 1];
    pid_t              pid[MASTER_API_RUNS] = { 0 };
    uint32_t           ids[MASTER_API_RUNS] = { 0 };
    struct pollfd      pf[2];
    struct api_req_run q;
    sigset_t           set;
    const char        *why;
    int                sfd, fds[2], st;
    ssize_t            n;
    pid_t              p;

    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    (void)sigprocmask(SIG_SETMASK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    if ((sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
        _exit(1);
    pf[0] = (struct pollfd){ fd, POLLIN, 0 };
    pf[1] = (struct pollfd){ sfd, POLLIN, 0 };
    for (;;) {
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            _exit(1);
        if (pf[1].revents) {
            struct signalfd_siginfo si;

            while (read(sfd, &si, sizeof(si)) == sizeof(si))
                ;
            while ((p = waitpid(-1, &st, WNOHANG)) > 0)
                for (size_t i = 0; i < MASTER_API_RUNS; i++)
                    if (pid[i] == p) {
                        api_runner_say(fd, ids[i], RM_EXIT,
                            WIFEXITED(st) ? WEXITSTATUS(st) :
                            WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 255,
                            NULL, NULL, 0);
                        pid[i] = 0;
                    }
        }
        if (!pf[0].revents)
            continue;
        n = api_recv_fds(fd, buf, sizeof(buf) - 1, fds, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            _exit(0);               /* the master is gone */
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
        memcpy(&q.head, buf, (size_t)n < sizeof(q.head) ? (size_t)n :
            sizeof(q.head));
        if ((size_t)n == sizeof(q.head) && q.head.argc == 0) {
            for (size_t i = 0; i < MASTER_API_RUNS; i++)     /* a kill */
                if (pid[i] > 0 && ids[i] == q.head.id)
                    (void)kill(pid[i], SIGKILL);
            continue;
        }
        if (api_run_parse(buf, (size_t)n, &q, &why) != 0) {
            api_runner_say(fd, q.head.id, RM_NOT_RUN, 0, why, NULL, 0);
            continue;
        }
        for (size_t i = 0; i <= MASTER_API_RUNS; i++) {
            if (i == MASTER_API_RUNS)   /* the master counts them too */
                api_runner_say(fd, q.head.id, RM_NOT_RUN, 0, "busy: too "
                    "many commands running", NULL, 0);
            else if (pid[i] == 0) {
                if ((p = api_runner_start(a, fd, &q)) > 0) {
                    pid[i] = p;
                    ids[i] = q.head.id;
                }
                break;
            }
        }
    }
}


void
master_api_init(struct master *m, const struct config *cfg)
{
    struct master_api_runs *a;
    char                    exe[PATH_MAX], *slash;
    ssize_t                 n;
    int                     sv[2];
    pid_t                   pid;

    if (m->api_runs == NULL) {
        m->api_runs = xcalloc(1, sizeof(*m->api_runs));
        m->api_runs->fd = -1;
    }
    a = m->api_runs;
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0 && (exe[n] = '\0', (slash = strrchr(exe, '/')) != NULL) &&
        (size_t)(slash - exe) + sizeof("/mtactl") <= sizeof(a->mtactl)) {
        memcpy(a->mtactl, exe, (size_t)(slash - exe));
        memcpy(a->mtactl + (slash - exe), "/mtactl", sizeof("/mtactl"));
    }
    if (realpath(m->config_path, a->config) == NULL)
        util_strlcpy(a->config, m->config_path, sizeof(a->config));
    if (cfg->api_listen == NULL || a->runner > 0)
        return;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        log_warn("api: no runner for the verbs: socketpair: %s",
            strerror(errno));
        return;
    }
    if ((pid = fork()) < 0) {
        log_warn("api: no runner for the verbs: fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return;
    }
    if (pid == 0) {
        /* nothing of the master's but this socket and stdio */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != m->pid)
            _exit(1);
        if (dup2(sv[1], 3) < 0)
            _exit(1);
        (void)close_range(4, ~0U, 0);
        proctitle_set(&m->title, "mtad: runner",
            "mtad: runner: mtactl for the API");
        api_runner_main(a, 3);
    }
    close(sv[1]);
    a->fd = sv[0];
    a->runner = pid;
    child_register_master_fd(m, a->fd);
}


/* ---- the master's side -------------------------------------------------- */

/* api_run_answer - CHAN_API_EXIT for run id; why only for NOT_RUN. */
static void
api_run_answer(int chan, uint32_t id, int32_t status, const char *why)
{
    char                 buf[sizeof(struct chan_api_exit) + 255];
    struct chan_api_exit x = { id, status };
    size_t               n = why != NULL ? strlen(why) : 0;

    if (chan < 0)
        return;
    if (n > 255)
        n = 255;
    memcpy(buf, &x, sizeof(x));
    if (n > 0)
        memcpy(buf + sizeof(x), why, n);
    if (chan_send(chan, CHAN_API_EXIT, buf, sizeof(x) + n, -1) < 0)
        log_warn("api: cannot answer run %u: %s", (unsigned)id,
            strerror(errno));
}


static struct api_runner *
api_run_find(struct master_api_runs *a, uint32_t id)
{
    for (size_t i = 0; i < MASTER_API_RUNS; i++)
        if (a->r[i].used && a->r[i].id == id)
            return &a->r[i];
    return NULL;
}


/* api_run_kill - ask the runner to SIGKILL run r. */
static void
api_run_kill(struct master_api_runs *a, struct api_runner *r)
{
    struct chan_api_run k = { r->id, 0, 0 };

    r->killed = 1;
    if (a->fd >= 0)
        (void)send(a->fd, &k, sizeof(k), MSG_DONTWAIT | MSG_NOSIGNAL);
}


/* api_run_pipes - pass the read ends to the API; 0, or -1. */
static int
api_run_pipes(int chan, uint32_t id, const int fds[2])
{
    struct chan_api_pipe p = { id, CHAN_API_STDOUT };

    if (chan < 0 || fds[0] < 0 || fds[1] < 0 ||
        chan_send(chan, CHAN_API_PIPE, &p, sizeof(p), fds[0]) < 0)
        return -1;
    p.which = CHAN_API_STDERR;
    return chan_send(chan, CHAN_API_PIPE, &p, sizeof(p), fds[1]);
}


/* master_api_runner_io - what the runner says. */
static void
master_api_runner_io(struct ev_loop *loop, int fd, unsigned events,
    void *arg)
{
    struct master          *m = arg;
    struct master_api_runs *a = m->api_runs;
    char                    buf[sizeof(struct api_rmsg) + 256];
    struct api_rmsg         msg;
    struct api_runner      *r;
    ssize_t                 n;
    int                     fds[2];

    (void)loop; (void)events;
    for (int k = 0; k < 32; k++) {
        n = api_recv_fds(fd, buf, sizeof(buf) - 1, fds, MSG_DONTWAIT);
        if (n < (ssize_t)sizeof(msg)) {
            if (fds[0] >= 0)
                close(fds[0]);
            if (fds[1] >= 0)
                close(fds[1]);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                master_unwatch(m, fd);
                a->watched = 0;
            }
            return;
        }
        memcpy(&msg, buf, sizeof(msg));
        buf[n] = '\0';
        if ((r = api_run_find(a, msg.id)) == NULL)
            ;
        else if (msg.kind == RM_STARTED) {
            r->pid = (pid_t)msg.value;
            if (api_run_pipes(r->chan, r->id, fds) < 0) {
                log_warn("api: cannot pass run %u's output: %s; killed",
                    (unsigned)r->id, strerror(errno));
                api_run_kill(a, r);
            }
        } else {
            api_run_answer(r->chan, r->id, msg.kind == RM_EXIT ? msg.value :
                CHAN_API_NOT_RUN, msg.kind == RM_EXIT ? NULL :
                buf + sizeof(msg));
            memset(r, 0, sizeof(*r));
        }
        if (fds[0] >= 0)
            close(fds[0]);
        if (fds[1] >= 0)
            close(fds[1]);
    }
}


/* api_run_words - argv joined by spaces, escaped, for the log. */
static void
api_run_words(char *const argv[], char *buf, size_t sz)
{
    char   raw[1024];
    size_t n = 0;

    raw[0] = '\0';
    for (size_t i = 0; argv[i] != NULL && n + 1 < sizeof(raw); i++)
        n += (size_t)snprintf(raw + n, sizeof(raw) - n, "%s%s", i ? " " : "",
            argv[i]);
    if (n >= sizeof(raw))
        n = sizeof(raw) - 1;
    (void)util_escape(buf, sz, raw, n, 0, NULL);
}


/* api_run_refuse - NOT_RUN with why, unless the run can start. */
static const char *
api_run_refuse(struct master *m, const struct api_req_run *q)
{
    struct master_api_runs *a = m->api_runs;
    const char             *why;

    if (api_argv_check((int)q->head.argc, q->argv, q->in, q->head.stdin_len,
        &why) != 0)
        return why;
    if (a == NULL || a->runner <= 0 || a->fd < 0)
        return "no runner: the verbs need api.listen set when mtad starts "
            "(restart mtad)";
    if (a->mtactl[0] == '\0')
        return "mtactl was not found next to mtad";
    if (api_run_find(a, q->head.id) != NULL)
        return "a run with this id is under way";
    for (size_t i = 0; i < MASTER_API_RUNS; i++)
        if (!a->r[i].used)
            return NULL;
    return "busy: too many commands running";
}


void
master_api_run(struct master *m, int chan, const struct chan_msg *msg)
{
    struct master_api_runs *a = m->api_runs;
    struct api_req_run      q;
    struct api_runner      *r = NULL;
    const char             *why;
    char                    words[1200];

    memset(&q, 0, sizeof(q));
    if (api_run_parse(msg->data, msg->len, &q, &why) != 0) {
        log_warn("api: run request dropped: %s", why);
        api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN, why);
        return;
    }
    api_run_words(q.argv, words, sizeof(words));
    if ((why = api_run_refuse(m, &q)) != NULL) {
        log_notice("api: not running mtactl %s for %s: %s", words, q.actor,
            why);
        api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN, why);
        return;
    }
    if (!a->watched) {
        master_watch(m, a->fd, EV_READ, master_api_runner_io);
        a->watched = 1;
    }
    if (send(a->fd, msg->data, msg->len, MSG_DONTWAIT | MSG_NOSIGNAL) !=
        (ssize_t)msg->len) {
        log_warn("api: the runner does not take mtactl %s: %s", words,
            strerror(errno));
        api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN, "the runner is "
            "busy");
        return;
    }
    for (size_t i = 0; i < MASTER_API_RUNS && r == NULL; i++)
        if (!a->r[i].used)
            r = &a->r[i];
    if (r == NULL)                  /* api_run_refuse() found one */
        return;
    memset(r, 0, sizeof(*r));
    r->used = 1;
    r->id = q.head.id;
    r->chan = chan;
    r->deadline = util_now_ms() + MASTER_API_RUN_MS;
    util_strlcpy(r->actor, q.actor, sizeof(r->actor));
    log_info("api: mtactl %s for %s", words, q.actor);
}


int
master_api_reaped(struct master *m, pid_t pid, int status)
{
    struct master_api_runs *a = m->api_runs;

    if (a == NULL || pid <= 0 || pid != a->runner)
        return 0;
    log_err("api: the runner (pid %d) ended (status %d); the API's verbs "
        "are not run until mtad restarts", (int)pid, status);
    a->runner = 0;
    if (a->fd >= 0) {
        if (a->watched)
            master_unwatch(m, a->fd);
        child_unregister_master_fd(m, a->fd);
        close(a->fd);
        a->fd = -1;
        a->watched = 0;
    }
    for (size_t i = 0; i < MASTER_API_RUNS; i++)
        if (a->r[i].used) {
            api_run_answer(a->r[i].chan, a->r[i].id, CHAN_API_NOT_RUN,
                "the runner is gone");
            memset(&a->r[i], 0, sizeof(a->r[i]));
        }
    return 1;
}


void
master_api_tick(struct master *m, uint64_t now)
{
    struct master_api_runs *a = m->api_runs;

    for (size_t i = 0; a != NULL && i < MASTER_API_RUNS; i++) {
        struct api_runner *r = &a->r[i];

        if (r->used && !r->killed && now >= r->deadline) {
            log_warn("api: mtactl pid %d for %s ran past %u s; killed",
                (int)r->pid, r->actor, MASTER_API_RUN_MS / 1000);
            api_run_kill(a, r);
        }
    }
}


void
master_api_gone(struct master *m, int chan)
{
    struct master_api_runs *a = m->api_runs;

    for (size_t i = 0; a != NULL && i < MASTER_API_RUNS; i++)
        if (a->r[i].used && a->r[i].chan == chan)
            a->r[i].chan = -1;
}


const char *
master_api_actor(struct master *m, pid_t pid)
{
    struct master_api_runs *a = m->api_runs;

    for (size_t i = 0; a != NULL && pid > 0 && i < MASTER_API_RUNS; i++)
        if (a->r[i].used && a->r[i].pid == pid)
            return a->r[i].actor;
    return NULL;
}
