/*
 * test_chan.c - the typed master<->child channel (common/chan.h): every
 * command round-trips on a SOCK_SEQPACKET pair, descriptors travel only
 * where the table says, the decoder refuses what the table forbids (table
 * of packets), and chan_serve() takes at most its budget per call, so a
 * flooding peer leaves the rest of the loop turn to the other fds.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "common/chan.h"
#include "common/ev.h"

static char buf[CHAN_MSG_MAX + 1];

static void
mkpair(int sv[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv),
        0);
}


static int
fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}


Test(chan, every_command_round_trips_to_its_receiver)
{
    static const struct {
        enum chan_cmd  cmd;
        enum chan_role to;
        const char    *payload;
        size_t         n;
        int            fd;
    } cases[] = {
        { CHAN_STOP, CHAN_WORKER, "", 0, 0 },
        { CHAN_STOP, CHAN_LOGD, "", 0, 0 },
        { CHAN_PING, CHAN_WORKER, "", 0, 0 },
        { CHAN_PING, CHAN_LOGD, "", 0, 0 },
        { CHAN_PONG, CHAN_MASTER, "", 0, 0 },
        { CHAN_READY, CHAN_MASTER, "", 0, 0 },
        { CHAN_DRAIN, CHAN_WORKER, "", 0, 0 },
        { CHAN_KICK, CHAN_WORKER, "", 0, 0 },
        { CHAN_KICK, CHAN_WORKER, "1700000000.3.17", 15, 0 },
        { CHAN_QSTREAM, CHAN_WORKER, "", 0, 1 },
        { CHAN_TLSRPT_ADD, CHAN_MASTER, "P 1 sts a.example 1 0\n", 22, 0 },
        { CHAN_TLSRPT_SEND, CHAN_WORKER, "0 86399\n", 8, 0 },
        { CHAN_SANDBOX_TEST, CHAN_WORKER, "", 0, 0 },
        { CHAN_ROUTES, CHAN_WORKER, "", 0, 0 },
        { CHAN_LOG_REOPEN, CHAN_LOGD, "", 0, 1 },
        { CHAN_LOG_INTERVAL, CHAN_LOGD, "\x0a\0\0\0\0\0\0\0", 8, 0 },
    };
    struct chan_msg m;
    const char     *why = NULL;
    int             sv[2], pass[2];

    mkpair(sv);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pass[0] = pass[1] = -1;
        if (cases[i].fd)
            cr_assert_eq(pipe(pass), 0);
        cr_assert_eq(chan_send(sv[0], cases[i].cmd, cases[i].payload,
            cases[i].n, pass[0]), 0, "send %s", chan_name(cases[i].cmd));
        cr_assert_eq(chan_recv(sv[1], cases[i].to, buf, sizeof(buf), &m,
            &why), CHAN_OK, "recv %s: %s", chan_name(cases[i].cmd),
            why ? why : "");
        cr_assert_eq(m.cmd, cases[i].cmd);
        cr_assert_eq(m.len, cases[i].n);
        cr_assert_eq(memcmp(m.data, cases[i].payload, m.len), 0);
        cr_assert_eq(m.data[m.len], '\0', "payload NUL-terminated");
        if (cases[i].fd) {
            cr_assert_geq(m.fd, 0, "%s carries its descriptor",
                chan_name(cases[i].cmd));
            cr_assert_eq(write(pass[1], "x", 1), 1);
            cr_assert_eq(read(m.fd, buf, 1), 1, "the same pipe");
            close(m.fd);
            close(pass[0]);
            close(pass[1]);
        } else {
            cr_assert_eq(m.fd, -1);
        }
    }
    close(sv[0]);
    close(sv[1]);
}


Test(chan, sender_refuses_what_the_table_forbids)
{
    char big[CHAN_PAYLOAD_MAX + 1];
    int  sv[2];

    mkpair(sv);
    memset(big, 'a', sizeof(big));
    cr_assert_eq(chan_send(sv[0], CHAN_QSTREAM, NULL, 0, -1), -1);
    cr_assert_eq(errno, EINVAL, "qstream without its descriptor");
    cr_assert_eq(chan_send(sv[0], CHAN_STOP, NULL, 0, 0), -1);
    cr_assert_eq(errno, EINVAL, "a descriptor with stop");
    cr_assert_eq(chan_send(sv[0], CHAN_STOP, "x", 1, -1), -1);
    cr_assert_eq(chan_send(sv[0], CHAN_TLSRPT_ADD, NULL, 0, -1), -1);
    cr_assert_eq(chan_send(sv[0], CHAN_TLSRPT_ADD, big, sizeof(big), -1),
        -1);
    cr_assert_eq(chan_send(sv[0], CHAN_LOG_INTERVAL, "1234", 4, -1), -1);
    cr_assert_eq(chan_send(sv[0], CHAN_NCMD, NULL, 0, -1), -1);
    cr_assert_eq(chan_send(sv[0], CHAN_NONE, NULL, 0, -1), -1);
    cr_assert_eq(recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT), -1,
        "nothing was sent");
    close(sv[0]);
    close(sv[1]);
}


/* a packet with header (type, len) and n payload bytes */
static size_t
pkt(char *out, uint32_t type, uint32_t len, size_t n)
{
    struct chan_hdr h = { type, len };

    memcpy(out, &h, sizeof(h));
    memset(out + sizeof(h), 'x', n);
    return sizeof(h) + n;
}


Test(chan, decoder_refuses_bad_packets)
{
    static const struct {
        const char    *name;
        uint32_t       type, len;
        size_t         n;
        int            fd;
        enum chan_role me;
    } bad[] = {
        { "unknown type", 99, 0, 0, 0, CHAN_WORKER },
        { "type none", CHAN_NONE, 0, 0, 0, CHAN_WORKER },
        { "length beyond the packet", CHAN_KICK, 10, 5, 0, CHAN_WORKER },
        { "length short of the packet", CHAN_KICK, 5, 10, 0, CHAN_WORKER },
        { "payload on stop", CHAN_STOP, 1, 1, 0, CHAN_WORKER },
        { "kick id too long", CHAN_KICK, 256, 256, 0, CHAN_WORKER },
        { "worker sends stop to the master", CHAN_STOP, 0, 0, 0,
          CHAN_MASTER },
        { "worker sends tlsrpt-send to the master", CHAN_TLSRPT_SEND, 3, 3,
          0, CHAN_MASTER },
        { "master gets ready as a worker", CHAN_READY, 0, 0, 0,
          CHAN_WORKER },
        { "logd gets kick", CHAN_KICK, 0, 0, 0, CHAN_LOGD },
        { "empty tlsrpt-add", CHAN_TLSRPT_ADD, 0, 0, 0, CHAN_MASTER },
        { "a descriptor with tlsrpt-add", CHAN_TLSRPT_ADD, 2, 2, 1,
          CHAN_MASTER },
        { "qstream without one", CHAN_QSTREAM, 0, 0, 0, CHAN_WORKER },
        { "interval of 4 bytes", CHAN_LOG_INTERVAL, 4, 4, 0, CHAN_LOGD },
    };
    char            p[512];
    struct chan_msg m;
    const char     *why;
    size_t          n;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = pkt(p, bad[i].type, bad[i].len, bad[i].n);
        why = NULL;
        cr_expect_eq(chan_decode(p, n, bad[i].fd, bad[i].me, &m, &why),
            CHAN_EBAD, "%s: accepted", bad[i].name);
        cr_expect(why != NULL && why[0] != '\0', "%s: no reason",
            bad[i].name);
    }
    why = NULL;
    cr_assert_eq(chan_decode(p, 7, 0, CHAN_WORKER, &m, &why), CHAN_EBAD,
        "shorter than the header");
}


Test(chan, a_descriptor_where_none_belongs_is_closed)
{
    struct chan_msg m;
    struct chan_hdr h = { CHAN_PING, 0 };
    union {
        struct cmsghdr c;
        char           b[CMSG_SPACE(sizeof(int))];
    }               cm;
    struct iovec    iov = { &h, sizeof(h) };
    struct msghdr   mh = { .msg_iov = &iov, .msg_iovlen = 1,
                           .msg_control = cm.b,
                           .msg_controllen = sizeof(cm.b) };
    const char     *why = NULL;
    int             sv[2], pp[2], before;

    mkpair(sv);
    cr_assert_eq(pipe(pp), 0);
    memset(&cm, 0, sizeof(cm));
    CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
    CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
    CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &pp[0], sizeof(int));
    cr_assert_eq(sendmsg(sv[0], &mh, 0), (ssize_t)sizeof(h));
    /* the received copy takes the lowest free number: find it after */
    before = dup(0);
    close(before);
    cr_assert_eq(chan_recv(sv[1], CHAN_WORKER, buf, sizeof(buf), &m, &why),
        CHAN_EBAD);
    cr_assert(!fd_open(before), "the passed copy was closed");
    cr_assert_eq(chan_recv(sv[1], CHAN_WORKER, buf, sizeof(buf), &m, &why),
        CHAN_AGAIN);
    close(sv[0]);
    cr_assert_eq(chan_recv(sv[1], CHAN_WORKER, buf, sizeof(buf), &m, &why),
        CHAN_EOF);
    close(sv[1]);
    close(pp[0]);
    close(pp[1]);
}

/* ---- dispatch and the per-call budget --------------------------------- */

struct tally {
    unsigned adds, pongs, bad;
};


static void
on_add(const struct chan_msg *m, void *arg)
{
    (void)m;
    ((struct tally *)arg)->adds++;
}


static void
on_pong(const struct chan_msg *m, void *arg)
{
    (void)m;
    ((struct tally *)arg)->pongs++;
}


static void
on_bad(const char *why, void *arg)
{
    (void)why;
    ((struct tally *)arg)->bad++;
}


static const struct chan_side master_side = {
    CHAN_MASTER,
    { [CHAN_TLSRPT_ADD] = on_add, [CHAN_PONG] = on_pong },
    on_bad
};


Test(chan, serve_dispatches_by_type_and_counts_the_bad)
{
    struct tally t = { 0, 0, 0 };
    struct chan_hdr h = { CHAN_STOP, 0 };   /* a worker may not send it */
    int          sv[2];

    mkpair(sv);
    cr_assert_eq(chan_send(sv[0], CHAN_PONG, NULL, 0, -1), 0);
    cr_assert_eq(chan_send(sv[0], CHAN_TLSRPT_ADD, "P\n", 2, -1), 0);
    cr_assert_eq(send(sv[0], &h, sizeof(h), 0), (ssize_t)sizeof(h));
    /* READY is the master's, but this side has no handler for it */
    cr_assert_eq(chan_send(sv[0], CHAN_READY, NULL, 0, -1), 0);
    cr_assert_eq(chan_serve(sv[1], &master_side, 100, buf, sizeof(buf), &t),
        4);
    cr_assert_eq(t.pongs, 1);
    cr_assert_eq(t.adds, 1);
    cr_assert_eq(t.bad, 2);
    close(sv[0]);
    cr_assert_eq(chan_serve(sv[1], &master_side, 100, buf, sizeof(buf), &t),
        CHAN_EOF);
    close(sv[1]);
}


Test(chan, serve_takes_at_most_its_budget_per_call)
{
    struct tally t = { 0, 0, 0 };
    unsigned     sent = 0;
    int          sv[2];

    mkpair(sv);
    while (chan_send(sv[0], CHAN_TLSRPT_ADD, "P 1 sts a 1 0\n", 14, -1) == 0)
        sent++;                     /* until the socket is full */
    cr_assert_gt(sent, 64);
    cr_assert_eq(chan_serve(sv[1], &master_side, 16, buf, sizeof(buf), &t),
        16);
    cr_assert_eq(t.adds, 16, "one call, one budget");
    while (chan_serve(sv[1], &master_side, 16, buf, sizeof(buf), &t) == 16)
        ;
    cr_assert_eq(t.adds, sent, "the rest comes on later calls");
    close(sv[0]);
    close(sv[1]);
}

/* A flood on one channel and a request on another fd, both ready in the
 * same epoll_wait: the request is answered after at most one budget of
 * the flood, while the rest still waits (level-triggered: it comes back
 * on later turns). */
struct flood {
    int          chan, other;
    unsigned     turns_chan, adds_before_other;
    struct tally t;
};


static void
flood_chan_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct flood *f = arg;

    (void)loop; (void)events;
    f->turns_chan++;
    if (chan_serve(fd, &master_side, 32, buf, sizeof(buf), &f->t) < 32)
        ev_stop(loop);              /* emptied */
}


static void
flood_other_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct flood *f = arg;
    char          c;

    (void)loop; (void)events;
    cr_assert_eq(read(fd, &c, 1), 1);
    f->adds_before_other = f->t.adds;
    ev_unwatch(loop, fd);
}


Test(chan, a_flooded_channel_does_not_starve_another_fd)
{
    struct ev_loop *loop = ev_new();
    struct flood    f;
    unsigned        sent = 0;
    int             sv[2], pp[2];

    memset(&f, 0, sizeof(f));
    mkpair(sv);
    cr_assert_eq(pipe(pp), 0);
    while (chan_send(sv[0], CHAN_TLSRPT_ADD, "P 1 sts a 1 0\n", 14, -1) == 0)
        sent++;
    cr_assert_gt(sent, 256, "the flood is many budgets deep");
    cr_assert_eq(write(pp[1], "r", 1), 1);
    f.adds_before_other = ~0u;
    cr_assert_not_null(loop);
    /* the channel first, so it is the first served in each turn */
    cr_assert_eq(ev_watch(loop, sv[1], EV_READ, flood_chan_io, &f), 0);
    cr_assert_eq(ev_watch(loop, pp[0], EV_READ, flood_other_io, &f), 0);
    cr_assert_eq(ev_run(loop), 0);
    /* an unbounded read (until EAGAIN) would have taken all first */
    cr_assert_leq(f.adds_before_other, 32,
        "the other fd waited for %u messages", f.adds_before_other);
    cr_assert_eq(f.t.adds, sent, "and the whole flood was taken");
    cr_assert_gt(f.turns_chan, sent / 32);
    ev_free(loop);
    close(sv[0]);
    close(sv[1]);
    close(pp[0]);
    close(pp[1]);
}
