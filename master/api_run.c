/*
 * api_run.c - the master runs mtactl for the API process (CHAN_API_RUN).
 *
 * WHY       The API process runs as server.user in its own sandbox; the
 *           verbs change the spool, the routes db and the master's tables,
 *           as root does with mtactl.  So it asks the master, which runs
 *           mtactl, the operator's own program, with a command line the
 *           master checks against a table of shapes (api_argv.c): every
 *           verb keeps one implementation, its locks, checks and audit
 *           records, and the API process gains no privilege but "run one
 *           of these command lines".
 * RUN       fork, then in the child: default signals and an empty mask,
 *           stdin a memfd holding the request's stdin bytes (or
 *           /dev/null), stdout and stderr two pipes, every other fd
 *           closed (close_range), and execve of the mtactl found next to
 *           mtad at start (/proc/self/exe's directory) as "mtactl -c
 *           CONFIG WORDS...", with a fixed environment (PATH, LC_ALL=C,
 *           MTACTL_ACTOR).  The read ends go to the API process at once
 *           (two CHAN_API_PIPE, SCM_RIGHTS): the master never reads the
 *           output, so a big queue listing costs it nothing; the API reads
 *           the pipes on its own loop.
 * ANSWER    CHAN_API_EXIT when the master reaps the child (after both
 *           CHAN_API_PIPE on the ordered channel): mtactl's exit code, 128
 *           + N for signal N; or at once CHAN_API_NOT_RUN with why (a
 *           refused command line, too many runs, fork failed).
 * LIMITS    MASTER_API_RUNS at once; each gets MASTER_API_RUN_MS, then
 *           SIGKILL (its exit is then 128 + 9).  The API process gone (or
 *           restarted on another channel) loses its runs' answers; the
 *           runs finish (a change under way is completed, not cut).
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "common/chan.h"
#include "common/log.h"
#include "common/util.h"
#include "master/api_argv.h"
#include "master/master_int.h"

struct api_runner {
    pid_t    pid;                   /* 0: free */
    uint32_t id;
    int      chan;                  /* the API channel it answers on */
    uint64_t deadline;
    int      killed;
    char     actor[CHAN_API_ACTOR_MAX];
};

struct master_api_runs {
    char             mtactl[PATH_MAX];  /* "": not found at start */
    char             config[PATH_MAX];
    struct api_runner r[MASTER_API_RUNS];
};


void
master_api_init(struct master *m)
{
    struct master_api_runs *a;
    char                    exe[PATH_MAX], *slash;
    ssize_t                 n;

    if (m->api_runs == NULL)
        m->api_runs = xcalloc(1, sizeof(*m->api_runs));
    a = m->api_runs;
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0 && (exe[n] = '\0', (slash = strrchr(exe, '/')) != NULL) &&
        (size_t)(slash - exe) + sizeof("/mtactl") <= sizeof(a->mtactl)) {
        memcpy(a->mtactl, exe, (size_t)(slash - exe));
        memcpy(a->mtactl + (slash - exe), "/mtactl", sizeof("/mtactl"));
    }
    if (realpath(m->config_path, a->config) == NULL)
        util_strlcpy(a->config, m->config_path, sizeof(a->config));
}


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
api_run_parse(const struct chan_msg *msg, struct api_req_run *q,
    const char **why)
{
    const char *p = msg->data, *end = msg->data + msg->len, *z;

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


/* api_run_exec - in the child: never returns. */
static void __attribute__((noreturn))
api_run_exec(struct master_api_runs *a, const struct api_req_run *q,
    int in, int out, int err)
{
    struct sigaction sa;
    sigset_t         none;
    char            *args[CHAN_API_ARGC_MAX + 4], actor[CHAN_API_ACTOR_MAX +
                     sizeof("MTACTL_ACTOR=")];
    char            *env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                               "LC_ALL=C", actor, NULL };
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
    snprintf(actor, sizeof(actor), "MTACTL_ACTOR=%s", q->actor);
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


/* api_run_pipes - pass the read ends to the API; 0, or -1. */
static int
api_run_pipes(int chan, uint32_t id, int out, int err)
{
    struct chan_api_pipe p = { id, CHAN_API_STDOUT };

    if (chan_send(chan, CHAN_API_PIPE, &p, sizeof(p), out) < 0)
        return -1;
    p.which = CHAN_API_STDERR;
    return chan_send(chan, CHAN_API_PIPE, &p, sizeof(p), err);
}


static struct api_runner *
api_run_free_slot(struct master_api_runs *a)
{
    for (size_t i = 0; i < MASTER_API_RUNS; i++)
        if (a->r[i].pid == 0)
            return &a->r[i];
    return NULL;
}


/* api_run_start - fork and exec; the pid, or -1 with why. */
static pid_t
api_run_start(struct master *m, const struct api_req_run *q, int chan,
    const char **why)
{
    int   in, out[2] = { -1, -1 }, err[2] = { -1, -1 };
    pid_t pid = -1;

    *why = "cannot make the run's descriptors";
    if ((in = api_run_stdin(q->in, q->head.stdin_len)) < 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0) {
        *why = "fork failed";
        if ((pid = fork()) == 0)
            api_run_exec(m->api_runs, q, in, out[1], err[1]);
    }
    close(in);
    if (out[1] >= 0)
        close(out[1]);
    if (err[1] >= 0)
        close(err[1]);
    if (pid > 0 && api_run_pipes(chan, q->head.id, out[0], err[0]) < 0) {
        /* the API cannot read it: no use running it */
        log_warn("api: cannot pass run %u's output: %s; killed",
            (unsigned)q->head.id, strerror(errno));
        (void)kill(pid, SIGKILL);
    }
    if (out[0] >= 0)
        close(out[0]);
    if (err[0] >= 0)
        close(err[0]);
    return pid;
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


void
master_api_run(struct master *m, int chan, const struct chan_msg *msg)
{
    struct master_api_runs *a = m->api_runs;
    struct api_req_run      q;
    struct api_runner      *r;
    const char             *why;
    char                    words[1200];
    pid_t                   pid;

    if (a == NULL) {
        master_api_init(m);
        a = m->api_runs;
    }
    if (api_run_parse(msg, &q, &why) != 0) {
        log_warn("api: run request dropped: %s", why);
        if (msg->len >= sizeof(q.head))
            api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN, why);
        return;
    }
    api_run_words(q.argv, words, sizeof(words));
    if (api_argv_check((int)q.head.argc, q.argv, q.in, q.head.stdin_len,
        &why) != 0) {
        log_notice("api: refused to run mtactl %s for %s: %s", words,
            q.actor, why);
        api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN, why);
        return;
    }
    if (a->mtactl[0] == '\0') {
        api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN,
            "mtactl was not found next to mtad");
        return;
    }
    if ((r = api_run_free_slot(a)) == NULL) {
        api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN,
            "busy: too many commands running");
        return;
    }
    if ((pid = api_run_start(m, &q, chan, &why)) < 0) {
        log_warn("api: cannot run mtactl %s: %s: %s", words, why,
            strerror(errno));
        api_run_answer(chan, q.head.id, CHAN_API_NOT_RUN, why);
        return;
    }
    r->pid = pid;
    r->id = q.head.id;
    r->chan = chan;
    r->killed = 0;
    r->deadline = util_now_ms() + MASTER_API_RUN_MS;
    util_strlcpy(r->actor, q.actor, sizeof(r->actor));
    log_info("api: mtactl %s for %s: pid %d", words, q.actor, (int)pid);
}


int
master_api_reaped(struct master *m, pid_t pid, int status)
{
    struct master_api_runs *a = m->api_runs;
    int32_t                 code;

    if (a == NULL || pid <= 0)
        return 0;
    for (size_t i = 0; i < MASTER_API_RUNS; i++) {
        struct api_runner *r = &a->r[i];

        if (r->pid != pid)
            continue;
        code = WIFEXITED(status) ? WEXITSTATUS(status) :
            WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
        api_run_answer(r->chan, r->id, code, NULL);
        memset(r, 0, sizeof(*r));
        return 1;
    }
    return 0;
}


void
master_api_tick(struct master *m, uint64_t now)
{
    struct master_api_runs *a = m->api_runs;

    for (size_t i = 0; a != NULL && i < MASTER_API_RUNS; i++) {
        struct api_runner *r = &a->r[i];

        if (r->pid > 0 && !r->killed && now >= r->deadline) {
            log_warn("api: mtactl pid %d for %s ran past %u s; killed",
                (int)r->pid, r->actor, MASTER_API_RUN_MS / 1000);
            (void)kill(r->pid, SIGKILL);
            r->killed = 1;
        }
    }
}


void
master_api_gone(struct master *m, int chan)
{
    struct master_api_runs *a = m->api_runs;

    for (size_t i = 0; a != NULL && i < MASTER_API_RUNS; i++)
        if (a->r[i].pid > 0 && a->r[i].chan == chan)
            a->r[i].chan = -1;
}


const char *
master_api_actor(struct master *m, pid_t pid)
{
    struct master_api_runs *a = m->api_runs;

    for (size_t i = 0; a != NULL && pid > 0 && i < MASTER_API_RUNS; i++)
        if (a->r[i].pid == pid)
            return a->r[i].actor;
    return NULL;
}
