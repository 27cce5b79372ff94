/*
 * ev.c - the event loop: level-triggered epoll, a binary min-heap of
 * timers, before-sleep hooks.
 *
 * PURPOSE   One loop per process (a worker's sessions and deliveries, the
 *           master's channels).  A turn is: run the before-sleep hooks in
 *           registration order, epoll_wait until the earliest timer, then
 *           dispatch the fd events, then the timers that are due.
 * CONTRACT  See ev.h.  The fd table is indexed by fd and grown on demand.
 *           Each entry has a generation counter that is bumped by
 *           ev_unwatch(); the epoll data carries (fd, generation), so an
 *           event already fetched for an fd that a callback unwatched (and
 *           perhaps closed and reused) in the same batch is dropped.
 *           Timers are embedded by their owners; timer->slot is the heap
 *           index + 1 (0 = not armed), so stop and re-arm are O(log n).
 *           A timer armed by a timer callback with a zero delay runs in
 *           the next turn, never in the same expiry pass.
 * FAILURE   ev_watch() returns -1 with errno from epoll_ctl; ev_run()
 *           returns -1 when epoll_wait fails for a reason other than EINTR.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/epoll.h>

#include "common/util.h"
#include "common/ev.h"

#define EV_BATCH  256               /* events fetched per epoll_wait */

struct ev_fd {
    ev_io_fn   *fn;
    void       *arg;
    unsigned    mask;               /* EV_READ|EV_WRITE; 0 = not watched */
    int         added;              /* in the epoll set */
    uint32_t    gen;
};

struct ev_hook {
    ev_hook_fn *fn;
    void       *arg;
};

struct ev_loop {
    int              epfd;
    int              stop;
    uint64_t         now;
    uint64_t         turn;          /* epoll_wait() returns so far */
    struct ev_fd    *fds;
    size_t           nfds;
    struct ev_timer **heap;
    size_t           nheap, heapcap;
    struct ev_hook  *hooks;
    size_t           nhooks;
    struct epoll_event events[EV_BATCH];
};


static uint64_t
ev_clock(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}


struct ev_loop *
ev_new(void)
{
    struct ev_loop *loop = xcalloc(1, sizeof(*loop));

    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0) {
        free(loop);
        return NULL;
    }
    loop->now = ev_clock();
    return loop;
}


void
ev_free(struct ev_loop *loop)
{
    if (loop == NULL)
        return;
    close(loop->epfd);
    free(loop->fds);
    free(loop->heap);
    free(loop->hooks);
    free(loop);
}


uint64_t
ev_now(const struct ev_loop *loop)
{
    return loop->now;
}


uint64_t
ev_turn(const struct ev_loop *loop)
{
    return loop->turn;
}


int
ev_fd(const struct ev_loop *loop)
{
    return loop->epfd;
}


void
ev_stop(struct ev_loop *loop)
{
    loop->stop = 1;
}


/* ev_fd_slot - the table entry for fd, growing the table when needed. */
static struct ev_fd *
ev_fd_slot(struct ev_loop *loop, int fd)
{
    size_t n;

    if ((size_t)fd >= loop->nfds) {
        n = loop->nfds ? loop->nfds : 64;
        while (n <= (size_t)fd)
            n *= 2;
        loop->fds = xrealloc(loop->fds, n * sizeof(*loop->fds));
        memset(loop->fds + loop->nfds, 0,
            (n - loop->nfds) * sizeof(*loop->fds));
        loop->nfds = n;
    }
    return &loop->fds[fd];
}


int
ev_watch(struct ev_loop *loop, int fd, unsigned events, ev_io_fn *fn,
    void *arg)
{
    struct epoll_event ee;
    struct ev_fd      *f;
    int                op;

    if (fd < 0) {
        errno = EBADF;
        return -1;
    }
    f = ev_fd_slot(loop, fd);
    memset(&ee, 0, sizeof(ee));
    ee.events = ((events & EV_READ) ? EPOLLIN : 0) |
        ((events & EV_WRITE) ? EPOLLOUT : 0);
    ee.data.u64 = (uint64_t)(uint32_t)fd | (uint64_t)f->gen << 32;
    op = f->added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    /* EPOLLEXCLUSIVE is only allowed when adding; a shared listener is
     * watched once and unwatched as a whole. */
    if (op == EPOLL_CTL_ADD && (events & EV_EXCLUSIVE))
        ee.events |= EPOLLEXCLUSIVE;
    if (op == EPOLL_CTL_MOD && (f->mask & EV_EXCLUSIVE) &&
        ((f->mask ^ events) & (EV_READ | EV_WRITE)) == 0) {
        f->fn = fn;
        f->arg = arg;
        return 0;                   /* nothing to change in the kernel */
    }
    if (epoll_ctl(loop->epfd, op, fd, &ee) < 0) {
        /* The owner closed the fd without unwatching it (the kernel
         * dropped it from the set) and the number came back: add it.  Or
         * the reverse: still in the set, so modify. */
        if (op == EPOLL_CTL_MOD && errno == ENOENT) {
            f->gen++;
            ee.data.u64 = (uint64_t)(uint32_t)fd | (uint64_t)f->gen << 32;
            if (events & EV_EXCLUSIVE)
                ee.events |= EPOLLEXCLUSIVE;
            op = EPOLL_CTL_ADD;
        } else if (op == EPOLL_CTL_ADD && errno == EEXIST) {
            ee.events &= ~(uint32_t)EPOLLEXCLUSIVE;
            op = EPOLL_CTL_MOD;
        } else {
            return -1;
        }
        if (epoll_ctl(loop->epfd, op, fd, &ee) < 0)
            return -1;
    }
    f->fn = fn;
    f->arg = arg;
    f->mask = events & (EV_READ | EV_WRITE | EV_EXCLUSIVE);
    f->added = 1;
    return 0;
}


/* ev_drop - forget fd; del: also remove it from the epoll set. */
static void
ev_drop(struct ev_loop *loop, int fd, int del)
{
    struct ev_fd *f;

    if (fd < 0 || (size_t)fd >= loop->nfds)
        return;
    f = &loop->fds[fd];
    if (f->added && del)
        (void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    f->fn = NULL;
    f->arg = NULL;
    f->mask = 0;
    f->added = 0;
    f->gen++;                       /* events already fetched are stale */
}


void
ev_unwatch(struct ev_loop *loop, int fd)
{
    ev_drop(loop, fd, 1);
}


void
ev_forget(struct ev_loop *loop, int fd)
{
    ev_drop(loop, fd, 0);
}


/* Timers: a binary min-heap on ->when; t->slot is its index + 1. */

static void
ev_heap_set(struct ev_loop *loop, size_t i, struct ev_timer *t)
{
    loop->heap[i] = t;
    t->slot = i + 1;
}


static void
ev_heap_up(struct ev_loop *loop, size_t i)
{
    struct ev_timer *t = loop->heap[i];
    size_t           p;

    while (i > 0) {
        p = (i - 1) / 2;
        if (loop->heap[p]->when <= t->when)
            break;
        ev_heap_set(loop, i, loop->heap[p]);
        i = p;
    }
    ev_heap_set(loop, i, t);
}


static void
ev_heap_down(struct ev_loop *loop, size_t i)
{
    struct ev_timer *t = loop->heap[i];
    size_t           c, n = loop->nheap;

    for (;;) {
        c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && loop->heap[c + 1]->when < loop->heap[c]->when)
            c++;
        if (t->when <= loop->heap[c]->when)
            break;
        ev_heap_set(loop, i, loop->heap[c]);
        i = c;
    }
    ev_heap_set(loop, i, t);
}


void
ev_timer_init(struct ev_timer *t, ev_timer_fn *fn, void *arg)
{
    t->when = 0;
    t->slot = 0;
    t->fn = fn;
    t->arg = arg;
}


void
ev_timer_stop(struct ev_loop *loop, struct ev_timer *t)
{
    size_t           i;
    struct ev_timer *last;

    if (t->slot == 0)
        return;
    i = t->slot - 1;
    t->slot = 0;
    last = loop->heap[--loop->nheap];
    if (i == loop->nheap)
        return;                     /* it was the last element */
    ev_heap_set(loop, i, last);
    if (i > 0 && loop->heap[(i - 1) / 2]->when > last->when)
        ev_heap_up(loop, i);
    else
        ev_heap_down(loop, i);
}


void
ev_timer_start(struct ev_loop *loop, struct ev_timer *t, uint64_t after_ms)
{
    uint64_t when = loop->now + after_ms;

    if (t->slot != 0) {
        /* Re-arm in place: the common case (a session's idle timer pushed
         * forward on every read) only sifts down. */
        uint64_t old = t->when;

        t->when = when;
        if (when >= old)
            ev_heap_down(loop, t->slot - 1);
        else
            ev_heap_up(loop, t->slot - 1);
        return;
    }
    if (loop->nheap == loop->heapcap) {
        loop->heapcap = loop->heapcap ? loop->heapcap * 2 : 64;
        loop->heap = xrealloc(loop->heap,
            loop->heapcap * sizeof(*loop->heap));
    }
    t->when = when;
    loop->heap[loop->nheap++] = t;
    ev_heap_up(loop, loop->nheap - 1);
}


int
ev_before_sleep(struct ev_loop *loop, ev_hook_fn *fn, void *arg)
{
    loop->hooks = xrealloc(loop->hooks,
        (loop->nhooks + 1) * sizeof(*loop->hooks));
    loop->hooks[loop->nhooks].fn = fn;
    loop->hooks[loop->nhooks].arg = arg;
    loop->nhooks++;
    return 0;
}


/* ev_timeout - milliseconds epoll_wait may sleep: until the first timer. */
static int
ev_timeout(struct ev_loop *loop)
{
    uint64_t now, when;

    if (loop->stop)
        return 0;
    if (loop->nheap == 0)
        return -1;
    now = ev_clock();
    when = loop->heap[0]->when;
    if (when <= now)
        return 0;
    return when - now > 86400000u ? 86400000 : (int)(when - now);
}


/* ev_run_timers - call every timer due now.  Bounded by the count at entry
 * so that a callback re-arming with a zero delay cannot loop forever. */
static void
ev_run_timers(struct ev_loop *loop)
{
    size_t           budget = loop->nheap;
    struct ev_timer *t;

    while (budget-- > 0 && loop->nheap > 0 && !loop->stop) {
        t = loop->heap[0];
        if (t->when > loop->now)
            break;
        ev_timer_stop(loop, t);
        t->fn(loop, t, t->arg);
    }
}


/* ev_dispatch - call the handlers of n fetched events; stale ones (fd
 * unwatched, or unwatched and watched again, since the fetch) are dropped. */
static void
ev_dispatch(struct ev_loop *loop, int n)
{
    struct ev_fd *f;
    uint32_t      e;
    unsigned      ev;
    int           i, fd;

    for (i = 0; i < n && !loop->stop; i++) {
        fd = (int)(uint32_t)loop->events[i].data.u64;
        if ((size_t)fd >= loop->nfds)
            continue;
        f = &loop->fds[fd];
        if (f->fn == NULL || f->gen != (uint32_t)(loop->events[i].data.u64 >> 32))
            continue;
        e = loop->events[i].events;
        ev = 0;
        if (e & EPOLLIN)
            ev |= EV_READ;
        if (e & EPOLLOUT)
            ev |= EV_WRITE;
        if (e & (EPOLLERR | EPOLLHUP))
            ev |= EV_ERROR;
        ev &= f->mask | EV_ERROR;
        if (ev == 0)
            continue;               /* mask changed within the batch */
        f->fn(loop, fd, ev, f->arg);
    }
}


int
ev_run(struct ev_loop *loop)
{
    size_t i;
    int    n;

    loop->stop = 0;
    while (!loop->stop) {
        for (i = 0; i < loop->nhooks && !loop->stop; i++)
            loop->hooks[i].fn(loop, loop->hooks[i].arg);
        if (loop->stop)
            break;
        n = epoll_wait(loop->epfd, loop->events, EV_BATCH, ev_timeout(loop));
        loop->now = ev_clock();
        loop->turn++;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        ev_dispatch(loop, n);
        ev_run_timers(loop);
    }
    return 0;
}
