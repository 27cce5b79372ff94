/*
 * test_ev.c - the event loop: fd readiness on socketpairs, unwatch and
 * re-watch, stale events dropped in the same batch, timers in deadline
 * order (including stop and re-arm in the middle of the heap), hooks in
 * registration order before each sleep, ev_stop.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "common/ev.h"


static void
mkpair(int sv[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
}


struct rd {
    int      calls;
    unsigned last;
    char     got[64];
    size_t   n;
};


static void
on_read(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct rd *r = arg;
    ssize_t    n;

    r->calls++;
    r->last = events;
    n = read(fd, r->got + r->n, sizeof(r->got) - 1 - r->n);
    if (n > 0)
        r->n += (size_t)n;
    ev_stop(loop);
}


Test(ev, read_event_is_delivered)
{
    struct ev_loop *loop = ev_new();
    struct rd       r;
    int             sv[2];

    memset(&r, 0, sizeof(r));
    mkpair(sv);
    cr_assert_eq(ev_watch(loop, sv[0], EV_READ, on_read, &r), 0);
    cr_assert_eq(write(sv[1], "ping", 4), 4);
    cr_assert_eq(ev_run(loop), 0);
    cr_assert_eq(r.calls, 1);
    cr_assert(r.last & EV_READ);
    cr_assert_eq(r.n, 4);
    cr_assert(memcmp(r.got, "ping", 4) == 0);
    close(sv[0]);
    close(sv[1]);
    ev_free(loop);
}


static void
on_write(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    int *calls = arg;

    (void)fd;
    cr_assert(events & EV_WRITE);
    (*calls)++;
    ev_stop(loop);
}


Test(ev, write_event_and_watch_change)
{
    struct ev_loop *loop = ev_new();
    int             sv[2], calls = 0;
    struct rd       r;

    memset(&r, 0, sizeof(r));
    mkpair(sv);
    cr_assert_eq(ev_watch(loop, sv[0], EV_WRITE, on_write, &calls), 0);
    ev_run(loop);
    cr_assert_eq(calls, 1);
    /* Switch the same fd to reading: no write events any more. */
    cr_assert_eq(ev_watch(loop, sv[0], EV_READ, on_read, &r), 0);
    cr_assert_eq(write(sv[1], "x", 1), 1);
    ev_run(loop);
    cr_assert_eq(calls, 1);
    cr_assert_eq(r.calls, 1);
    close(sv[0]);
    close(sv[1]);
    ev_free(loop);
}


/* Two readable fds in one batch: whichever runs first unwatches and closes
 * the other; the other's fetched event must not be delivered. */
struct pairkill {
    struct ev_loop *loop;
    int             fds[2];
    int             calls[2];
};


static void
on_kill_other(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct pairkill *pk = arg;
    int              me = fd == pk->fds[0] ? 0 : 1;
    int              other = pk->fds[1 - me];

    (void)events;
    pk->calls[me]++;
    ev_unwatch(loop, other);
    ev_unwatch(loop, fd);
    ev_stop(loop);
}


static void
on_timeout_stop(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)t;
    (void)arg;
    ev_stop(loop);
}


Test(ev, unwatched_fd_events_are_dropped_in_the_batch)
{
    struct ev_loop *loop = ev_new();
    struct pairkill pk;
    int             a[2], b[2];

    memset(&pk, 0, sizeof(pk));
    mkpair(a);
    mkpair(b);
    pk.fds[0] = a[0];
    pk.fds[1] = b[0];
    cr_assert_eq(ev_watch(loop, a[0], EV_READ, on_kill_other, &pk), 0);
    cr_assert_eq(ev_watch(loop, b[0], EV_READ, on_kill_other, &pk), 0);
    cr_assert_eq(write(a[1], "1", 1), 1);
    cr_assert_eq(write(b[1], "2", 1), 1);
    ev_run(loop);
    cr_assert_eq(pk.calls[0] + pk.calls[1], 1,
        "stale event delivered: %d + %d", pk.calls[0], pk.calls[1]);
    close(a[0]); close(a[1]); close(b[0]); close(b[1]);
    ev_free(loop);
}


/* A callback that unwatches the other fd and re-watches it at once (the
 * fd number reused for a new connection): the event fetched before is
 * stale.  The re-watched fd is still readable (level-triggered), so it
 * fires again in a later turn; a before-sleep hook numbers the turns so
 * the test can tell the two apart. */
struct rewatch {
    int fds[2];
    int calls;
    int turn;
    int call_turn[4];
};


static void
on_rewatch_other(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct rewatch *rw = arg;
    int             other = fd == rw->fds[0] ? rw->fds[1] : rw->fds[0];
    char            c;

    (void)events;
    (void)!read(fd, &c, 1);
    if (rw->calls < 4)
        rw->call_turn[rw->calls] = rw->turn;
    if (++rw->calls == 1) {
        ev_unwatch(loop, other);
        cr_assert_eq(ev_watch(loop, other, EV_READ, on_rewatch_other, rw), 0);
        ev_unwatch(loop, fd);
    }
}


static void
hook_count_turns(struct ev_loop *loop, void *arg)
{
    struct rewatch *rw = arg;

    if (++rw->turn > 3)
        ev_stop(loop);
}


Test(ev, rewatched_fd_gets_no_stale_event)
{
    struct ev_loop *loop = ev_new();
    struct rewatch  rw;
    struct ev_timer t;
    int             a[2], b[2];

    memset(&rw, 0, sizeof(rw));
    mkpair(a);
    mkpair(b);
    rw.fds[0] = a[0];
    rw.fds[1] = b[0];
    cr_assert_eq(ev_watch(loop, a[0], EV_READ, on_rewatch_other, &rw), 0);
    cr_assert_eq(ev_watch(loop, b[0], EV_READ, on_rewatch_other, &rw), 0);
    cr_assert_eq(write(a[1], "1", 1), 1);
    cr_assert_eq(write(b[1], "2", 1), 1);
    ev_before_sleep(loop, hook_count_turns, &rw);
    ev_timer_init(&t, on_timeout_stop, NULL);
    ev_timer_start(loop, &t, 2000);
    ev_run(loop);
    cr_assert_eq(rw.calls, 2, "calls %d", rw.calls);
    cr_assert_neq(rw.call_turn[0], rw.call_turn[1],
        "the stale event was delivered in the same batch");
    close(a[0]); close(a[1]); close(b[0]); close(b[1]);
    ev_free(loop);
}


struct order {
    int seq[16];
    int n;
};

struct tdata {
    struct order   *o;
    int             id;
    struct ev_timer t;
};


static void
on_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct tdata *d = arg;

    (void)t;
    d->o->seq[d->o->n++] = d->id;
    if (d->id == 99)
        ev_stop(loop);
}


Test(ev, timers_fire_in_deadline_order)
{
    struct ev_loop *loop = ev_new();
    struct order    o;
    struct tdata    d[6];
    static const int after[6] = { 40, 10, 30, 20, 50, 60 };
    int             i;

    memset(&o, 0, sizeof(o));
    for (i = 0; i < 6; i++) {
        d[i].o = &o;
        d[i].id = i == 5 ? 99 : i;
        ev_timer_init(&d[i].t, on_timer, &d[i]);
        ev_timer_start(loop, &d[i].t, (uint64_t)after[i]);
        cr_assert(ev_timer_active(&d[i].t));
    }
    ev_timer_stop(loop, &d[2].t);           /* from the middle */
    cr_assert(!ev_timer_active(&d[2].t));
    ev_timer_start(loop, &d[0].t, 5);       /* re-arm earlier */
    ev_timer_start(loop, &d[1].t, 45);      /* re-arm later */
    ev_run(loop);
    cr_assert_eq(o.n, 5);
    cr_assert_eq(o.seq[0], 0);
    cr_assert_eq(o.seq[1], 3);
    cr_assert_eq(o.seq[2], 1);
    cr_assert_eq(o.seq[3], 4);
    cr_assert_eq(o.seq[4], 99);
    for (i = 0; i < 6; i++)
        cr_assert(!ev_timer_active(&d[i].t));
    ev_free(loop);
}


/* Many timers in random order: they must come out sorted by deadline. */
struct many {
    uint64_t        due[300];
    int             fired[300];
    struct ev_timer t[300];
    int             n;
    uint64_t        last;
    int             bad;
};


static void
on_many(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct many *m = arg;
    int          i = (int)(t - m->t);

    if (m->due[i] < m->last)
        m->bad++;
    m->last = m->due[i];
    m->fired[i]++;
    if (++m->n == 300)
        ev_stop(loop);
}


Test(ev, heap_orders_many_timers)
{
    struct ev_loop *loop = ev_new();
    struct many    *m = calloc(1, sizeof(*m));
    int             i;

    srand(7);
    for (i = 0; i < 300; i++) {
        m->due[i] = (uint64_t)(rand() % 60);
        ev_timer_init(&m->t[i], on_many, m);
        ev_timer_start(loop, &m->t[i], m->due[i]);
    }
    ev_run(loop);
    cr_assert_eq(m->n, 300);
    cr_assert_eq(m->bad, 0, "%d timers out of order", m->bad);
    for (i = 0; i < 300; i++)
        cr_assert_eq(m->fired[i], 1);
    free(m);
    ev_free(loop);
}


struct hooks {
    int seq[8];
    int n;
    int turns;
};

static void
hook_a(struct ev_loop *loop, void *arg)
{
    struct hooks *h = arg;

    (void)loop;
    if (h->n < 8)
        h->seq[h->n++] = 1;
}

static void
hook_b(struct ev_loop *loop, void *arg)
{
    struct hooks *h = arg;

    if (h->n < 8)
        h->seq[h->n++] = 2;
    if (++h->turns == 2)
        ev_stop(loop);
}

static void
on_nothing(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    (void)loop;
    (void)t;
    (void)arg;
}


Test(ev, hooks_run_in_order_before_each_sleep)
{
    struct ev_loop *loop = ev_new();
    struct hooks    h;
    struct ev_timer t;

    memset(&h, 0, sizeof(h));
    ev_before_sleep(loop, hook_a, &h);
    ev_before_sleep(loop, hook_b, &h);
    ev_timer_init(&t, on_nothing, NULL);
    ev_timer_start(loop, &t, 1);
    ev_run(loop);
    cr_assert_eq(h.n, 4);
    cr_assert_eq(h.seq[0], 1);
    cr_assert_eq(h.seq[1], 2);
    cr_assert_eq(h.seq[2], 1);
    cr_assert_eq(h.seq[3], 2);
    ev_free(loop);
}


Test(ev, now_is_monotonic_and_advances)
{
    struct ev_loop *loop = ev_new();
    struct ev_timer t;
    uint64_t        before = ev_now(loop);

    ev_timer_init(&t, on_timeout_stop, NULL);
    ev_timer_start(loop, &t, 30);
    ev_run(loop);
    cr_assert_geq(ev_now(loop), before + 30);
    ev_free(loop);
}


Test(ev, high_fd_numbers_grow_the_table)
{
    struct ev_loop *loop = ev_new();
    struct rd       r;
    int             sv[2], hi;

    memset(&r, 0, sizeof(r));
    mkpair(sv);
    hi = dup2(sv[0], 900);
    cr_assert_eq(hi, 900);
    cr_assert_eq(ev_watch(loop, hi, EV_READ, on_read, &r), 0);
    cr_assert_eq(write(sv[1], "z", 1), 1);
    ev_run(loop);
    cr_assert_eq(r.calls, 1);
    ev_unwatch(loop, hi);
    ev_unwatch(loop, hi);           /* twice is harmless */
    close(hi);
    close(sv[0]);
    close(sv[1]);
    ev_free(loop);
}


Test(ev, closed_without_unwatch_then_reused_fd_can_be_watched)
{
    struct ev_loop *loop = ev_new();
    struct rd       r;
    int             a[2], b[2], fd;

    memset(&r, 0, sizeof(r));
    mkpair(a);
    fd = a[0];
    cr_assert_eq(ev_watch(loop, fd, EV_READ, on_read, &r), 0);
    close(a[0]);                    /* the kernel drops it from the set */
    mkpair(b);
    if (b[0] != fd) {
        cr_assert_eq(dup2(b[0], fd), fd);
        close(b[0]);
        b[0] = fd;
    }
    cr_assert_eq(ev_watch(loop, fd, EV_READ, on_read, &r), 0);
    cr_assert_eq(write(b[1], "q", 1), 1);
    ev_run(loop);
    cr_assert_eq(r.calls, 1);
    close(a[1]);
    close(b[0]);
    close(b[1]);
    ev_free(loop);
}


/* ev_forget() + close(): the kernel leaves the set by itself; a fetched
 * event for the fd is stale (as after ev_unwatch), and the number, reused,
 * is added again (not modified: ev_forget said it is gone). */
static void
on_forget_other(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct pairkill *pk = arg;
    int              me = fd == pk->fds[0] ? 0 : 1;
    int              other = pk->fds[1 - me];

    (void)events;
    pk->calls[me]++;
    ev_forget(loop, other);
    close(other);
    ev_forget(loop, fd);
    close(fd);
    ev_stop(loop);
}


Test(ev, forgotten_and_closed_fd_gets_no_event_and_is_reusable)
{
    struct ev_loop *loop = ev_new();
    struct pairkill pk;
    struct rd       r;
    int             a[2], b[2], c[2];

    memset(&pk, 0, sizeof(pk));
    memset(&r, 0, sizeof(r));
    mkpair(a);
    mkpair(b);
    pk.fds[0] = a[0];
    pk.fds[1] = b[0];
    cr_assert_eq(ev_watch(loop, a[0], EV_READ, on_forget_other, &pk), 0);
    cr_assert_eq(ev_watch(loop, b[0], EV_READ, on_forget_other, &pk), 0);
    cr_assert_eq(write(a[1], "1", 1), 1);
    cr_assert_eq(write(b[1], "2", 1), 1);
    ev_run(loop);
    cr_assert_eq(pk.calls[0] + pk.calls[1], 1,
        "stale event delivered: %d + %d", pk.calls[0], pk.calls[1]);
    /* the number comes back for a new socket: watched from scratch */
    mkpair(c);
    if (c[0] != a[0]) {
        cr_assert_eq(dup2(c[0], a[0]), a[0]);
        close(c[0]);
        c[0] = a[0];
    }
    cr_assert_eq(ev_watch(loop, c[0], EV_READ, on_read, &r), 0);
    cr_assert_eq(write(c[1], "q", 1), 1);
    ev_run(loop);
    cr_assert_eq(r.calls, 1);
    close(a[1]); close(b[1]); close(c[0]); close(c[1]);
    ev_free(loop);
}


Test(ev, hangup_reports_error_with_read)
{
    struct ev_loop *loop = ev_new();
    struct rd       r;
    int             sv[2];

    memset(&r, 0, sizeof(r));
    mkpair(sv);
    cr_assert_eq(ev_watch(loop, sv[0], EV_READ, on_read, &r), 0);
    close(sv[1]);
    ev_run(loop);
    cr_assert_eq(r.calls, 1);
    cr_assert(r.last & (EV_READ | EV_ERROR));
    close(sv[0]);
    ev_free(loop);
}
