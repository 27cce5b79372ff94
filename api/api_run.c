/*
 * api_run.c - the API process's half of running mtactl (api_verbs.h):
 * the request to the master, the output pipes it passes back, the exit.
 *
 * PURPOSE   One CHAN_API_RUN per run (id, actor, argv, stdin bytes); the
 *           master answers with two CHAN_API_PIPE (the read ends of
 *           mtactl's stdout and stderr) and, when it reaps mtactl, one
 *           CHAN_API_EXIT.  The pipes are read on this loop, non-blocking,
 *           into two buffers; done is called when both reached EOF and
 *           the exit is known (the channel is ordered, and the exit may
 *           come before the pipes are drained: mtactl's output outlives
 *           it in the pipe).
 * STATE     One table per process (the API process has one loop and one
 *           master channel): runs[] below.  A run's id is its slot index
 *           plus a generation count, so a late message for a run that
 *           timed out never reaches the run that took its slot.
 * FAILURE   A message that names no live run is dropped (its descriptor
 *           closed).  A run past API_RUN_TIMEOUT_MS ends NOT_RUN; its
 *           mtactl is the master's to kill (its own deadline).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/chan.h"
#include "common/ev.h"
#include "common/util.h"
#include "api/api_int.h"
#include "api/api_verbs.h"

#define API_RUN_READ 65536

struct api_runslot {
    int              used;
    uint32_t         id;
    struct api      *a;
    int              fd[2];         /* stdout, stderr; -1: none or EOF */
    int              got_pipe[2];
    int              exited;
    int              status;
    int              too_big;
    struct buf       out[2];
    struct ev_timer  timer;
    api_run_done_fn *done;
    void            *arg;
};

static struct api_runslot api_runs[API_RUN_MAX];
static uint32_t           api_run_gen;


static void
api_run_close(struct api_runslot *r, int i)
{
    if (r->fd[i] >= 0) {
        ev_unwatch(api_loop(r->a), r->fd[i]);
        close(r->fd[i]);
        r->fd[i] = -1;
    }
}


/* api_run_finish - done(status) and the slot freed. */
static void
api_run_finish(struct api_runslot *r, int status, const char *why)
{
    api_run_done_fn *done = r->done;
    void            *arg = r->arg;
    struct buf       out = r->out[0], err = r->out[1];

    api_run_close(r, 0);
    api_run_close(r, 1);
    ev_timer_stop(api_loop(r->a), &r->timer);
    r->used = 0;
    if (why != NULL) {
        buf_free(&err);
        buf_init(&err);
        buf_append(&err, why, strlen(why));
    }
    buf_append(&out, "", 1);        /* NUL-terminated for the handler */
    buf_append(&err, "", 1);
    done(arg, status, buf_head(&out), buf_avail(&out) - 1, buf_head(&err),
        buf_avail(&err) - 1);
    buf_free(&out);
    buf_free(&err);
}


static void
api_run_maybe_done(struct api_runslot *r)
{
    if (!r->exited || !r->got_pipe[0] || !r->got_pipe[1] || r->fd[0] >= 0 ||
        r->fd[1] >= 0)
        return;
    api_run_finish(r, r->too_big ? API_RUN_TOO_BIG : r->status, NULL);
}


static void
api_run_timeout(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct api_runslot *r = arg;

    (void)loop; (void)t;
    if (r->used)
        api_run_finish(r, API_RUN_NOT_RUN, "the command did not finish in "
            "time");
}


/* api_run_io - a pipe is readable: take what is there (bounded per
 * turn), EOF closes it. */
static void
api_run_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct api_runslot *r = arg;
    int                 i = r->fd[0] == fd ? 0 : 1;
    size_t              max = i == 0 ? API_RUN_OUT_MAX : API_RUN_ERR_MAX;
    char                tmp[API_RUN_READ];
    ssize_t             n;

    (void)loop; (void)events;
    if (!r->used || r->fd[i] != fd)
        return;
    n = read(fd, tmp, sizeof(tmp));
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        api_run_close(r, i);
        api_run_maybe_done(r);
        return;
    }
    if (buf_avail(&r->out[i]) + (size_t)n > max)
        r->too_big |= i == 0;       /* stderr is only cut; stdout fails */
    else
        buf_append(&r->out[i], tmp, (size_t)n);
}


static struct api_runslot *
api_run_find(uint32_t id)
{
    uint32_t slot = id % API_RUN_MAX;

    if (!api_runs[slot].used || api_runs[slot].id != id)
        return NULL;
    return &api_runs[slot];
}


void
api_run_chan(struct api *a, const struct chan_msg *m)
{
    struct chan_api_pipe  p;
    struct chan_api_exit  x;
    struct api_runslot   *r;
    int                   i;
    char                  why[256];

    if (m->cmd == CHAN_API_PIPE) {
        memcpy(&p, m->data, sizeof(p));
        i = p.which == CHAN_API_STDOUT ? 0 : p.which == CHAN_API_STDERR ? 1 :
            -1;
        if ((r = api_run_find(p.id)) == NULL || i < 0 || r->got_pipe[i]) {
            close(m->fd);
            return;
        }
        r->got_pipe[i] = 1;
        r->fd[i] = m->fd;
        (void)fcntl(m->fd, F_SETFL, O_NONBLOCK);
        (void)fcntl(m->fd, F_SETFD, FD_CLOEXEC);
        if (ev_watch(api_loop(a), m->fd, EV_READ, api_run_io, r) < 0) {
            api_run_finish(r, API_RUN_NOT_RUN, "cannot watch the output");
            return;
        }
        return;
    }
    if (m->cmd != CHAN_API_EXIT)
        return;
    memcpy(&x, m->data, sizeof(x));
    if ((r = api_run_find(x.id)) == NULL)
        return;
    if (x.status == CHAN_API_NOT_RUN) {
        size_t n = m->len - sizeof(x) < sizeof(why) - 1 ?
                   m->len - sizeof(x) : sizeof(why) - 1;

        memcpy(why, m->data + sizeof(x), n);
        why[n] = '\0';
        api_run_finish(r, API_RUN_NOT_RUN, n > 0 ? why : "not run");
        return;
    }
    r->exited = 1;
    r->status = x.status;
    api_run_maybe_done(r);
}


void
api_run_master_gone(struct api *a)
{
    (void)a;
    for (size_t i = 0; i < API_RUN_MAX; i++)
        if (api_runs[i].used)
            api_run_finish(&api_runs[i], API_RUN_NOT_RUN, "the master is "
                "gone");
}


/* api_run_payload - the CHAN_API_RUN payload into b; -1 when too big. */
static int
api_run_payload(struct buf *b, uint32_t id, const char *actor,
    char *const argv[], const void *in, size_t n)
{
    struct chan_api_run h = { id, 0, (uint32_t)n };
    size_t              len = sizeof(h) + strlen(actor) + 1 + n;

    for (h.argc = 0; argv[h.argc] != NULL; h.argc++)
        len += strlen(argv[h.argc]) + 1;
    if (h.argc == 0 || h.argc > CHAN_API_ARGC_MAX ||
        len > CHAN_PAYLOAD_MAX || strlen(actor) >= CHAN_API_ACTOR_MAX)
        return -1;
    buf_append(b, &h, sizeof(h));
    buf_append(b, actor, strlen(actor) + 1);
    for (uint32_t i = 0; i < h.argc; i++)
        buf_append(b, argv[i], strlen(argv[i]) + 1);
    if (n > 0)
        buf_append(b, in, n);
    return 0;
}


int
api_run_as(struct api *a, const char *actor, char *const argv[],
    const void *stdin_bytes, size_t n, api_run_done_fn *done, void *arg)
{
    struct api_runslot *r = NULL;
    struct buf          b;
    uint32_t            id;
    size_t              i;
    int                 chan = api_chan_fd(a);

    if (chan < 0) {
        errno = EPIPE;
        return -1;
    }
    for (i = 0; i < API_RUN_MAX; i++)
        if (!api_runs[i].used) {
            r = &api_runs[i];
            break;
        }
    if (r == NULL) {
        errno = EBUSY;
        return -1;
    }
    /* an id names its slot (id % API_RUN_MAX) and this use of it */
    id = (uint32_t)i + API_RUN_MAX * (++api_run_gen % (UINT32_MAX /
        API_RUN_MAX));
    buf_init(&b);
    if (api_run_payload(&b, id, actor, argv, stdin_bytes, n) < 0) {
        buf_free(&b);
        errno = EMSGSIZE;
        return -1;
    }
    if (chan_send(chan, CHAN_API_RUN, buf_head(&b), buf_avail(&b), -1) < 0) {
        int e = errno;

        buf_free(&b);
        errno = e == EAGAIN || e == EWOULDBLOCK ? EAGAIN : EPIPE;
        return -1;
    }
    buf_free(&b);
    memset(r, 0, sizeof(*r));
    r->used = 1;
    r->id = id;
    r->a = a;
    r->fd[0] = r->fd[1] = -1;
    buf_init(&r->out[0]);
    buf_init(&r->out[1]);
    r->done = done;
    r->arg = arg;
    ev_timer_init(&r->timer, api_run_timeout, r);
    ev_timer_start(api_loop(a), &r->timer, API_RUN_TIMEOUT_MS);
    return 0;
}


int
api_run(struct api *a, char *const argv[], const void *stdin_bytes,
    size_t n, api_run_done_fn *done, void *arg)
{
    return api_run_as(a, "api", argv, stdin_bytes, n, done, arg);
}
