/*
 * ev.h - the event loop: level-triggered epoll, timers in a min-heap,
 * before-sleep hooks.  One loop per process.
 *
 * CONTRACT  Callbacks run on the loop's thread.  A callback may unwatch or
 *           close any fd, including one whose event is pending in the same
 *           batch: the loop drops events for fds unwatched during the batch.
 *           struct ev_timer is embedded by its owner; fields are private.
 *           ev_now() is cached once per turn (monotonic ms).
 * FAILURE   ev_watch returns 0 or -1 (errno from epoll_ctl).
 */
#ifndef MTAD_EV_H
#define MTAD_EV_H

#include <stddef.h>
#include <stdint.h>

#define EV_READ   0x1u
#define EV_WRITE  0x2u
#define EV_ERROR  0x4u              /* passed to callbacks: EPOLLERR/HUP */
#define EV_EXCLUSIVE 0x8u           /* EPOLLEXCLUSIVE, for shared listeners */

struct ev_loop;
struct ev_timer;

typedef void ev_io_fn(struct ev_loop *loop, int fd, unsigned events,
            void *arg);
typedef void ev_timer_fn(struct ev_loop *loop, struct ev_timer *t, void *arg);
typedef void ev_hook_fn(struct ev_loop *loop, void *arg);

struct ev_timer {
    uint64_t     when;              /* private */
    size_t       slot;              /* private: heap index + 1, 0 = idle */
    ev_timer_fn *fn;
    void        *arg;
};

struct ev_loop *ev_new(void);
void        ev_free(struct ev_loop *loop);
int         ev_watch(struct ev_loop *loop, int fd, unsigned events,
                ev_io_fn *fn, void *arg);          /* add or change */
void        ev_unwatch(struct ev_loop *loop, int fd);
/* ev_unwatch() for an fd the caller closes right after, before the loop
 * waits again, and that no other process or descriptor shares (no fork,
 * no dup): close() itself takes it out of the epoll set, so the
 * EPOLL_CTL_DEL system call is saved (one per session). */
void        ev_forget(struct ev_loop *loop, int fd);
void        ev_timer_init(struct ev_timer *t, ev_timer_fn *fn, void *arg);
void        ev_timer_start(struct ev_loop *loop, struct ev_timer *t,
                uint64_t after_ms);                /* (re)arm */
void        ev_timer_stop(struct ev_loop *loop, struct ev_timer *t);
static inline int ev_timer_active(const struct ev_timer *t) { return t->slot != 0; }
int         ev_before_sleep(struct ev_loop *loop, ev_hook_fn *fn, void *arg);
uint64_t    ev_now(const struct ev_loop *loop);
/* The loop's turn: a count of its waits so far.  A callback called in
 * turn n + 1 after one in turn n saw its fd stay ready across one wait. */
uint64_t    ev_turn(const struct ev_loop *loop);
int         ev_fd(const struct ev_loop *loop);     /* the epoll fd: for a
                                                      parent that forks, to
                                                      close it in children */
int         ev_run(struct ev_loop *loop);          /* until ev_stop() */
void        ev_stop(struct ev_loop *loop);

#endif /* MTAD_EV_H */
