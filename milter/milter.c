/*
 * milter.c - the milter client of one SMTP session: a connection per
 * milter on the worker's loop, the stages asked of each in turn, and the
 * replies that decide them.  The message phase is milter_msg.c.
 *
 * STATES    A connection is CONNECTING (connect() in progress), NEG
 *           (SMFIC_OPTNEG sent), READY, or DEAD (failed: its default
 *           action holds).  A stage waits for a milter still connecting:
 *           the connect timeout bounds it.  At most one command of ours
 *           waits for a reply per connection (the protocol has no
 *           pipelining), with the command or eom timeout armed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "milter/milter.h"
#include "milter/milter_int.h"

static const char mc_tempfail[] = "451 4.7.1 Service unavailable - try "
    "again later";


void
mc_dead(struct mconn *m, const char *why)
{
    struct milter_chain *c = m->c;

    if (m->st == MC_DEAD)
        return;
    log_warn("milter %s (%s): %s; default action %s; session=%s",
        m->sp->name, m->sp->socket, why,
        m->sp->default_accept ? "accept" : "tempfail", c->sid);
    if (m->fd >= 0) {
        ev_forget(c->loop, m->fd);
        close(m->fd);
    }
    m->fd = -1;
    m->st = MC_DEAD;
    if (c->stage == MS_MSG && c->cur < c->n && &c->m[c->cur] == m)
        mc_msg_drop(c);             /* what it began to edit, undone */
    m->waiting = 0;
    ev_timer_stop(c->loop, &m->timer);
    buf_free(&m->out);
    buf_free(&m->in);
}


/* mc_watch - read always, write while bytes wait. */
static void
mc_watch(struct mconn *m)
{
    unsigned want = EV_READ | (buf_avail(&m->out) > 0 ? EV_WRITE : 0);

    if (m->fd < 0 || (m->st == MC_CONNECTING))
        return;
    if (want != m->watched &&
        ev_watch(m->c->loop, m->fd, want, mc_on_io, m) == 0)
        m->watched = want;
}


/* mc_flush - write what waits; -1 when m died. */
int
mc_flush(struct mconn *m)
{
    ssize_t n;

    while (buf_avail(&m->out) > 0) {
        n = send(m->fd, buf_head(&m->out), buf_avail(&m->out),
            MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (n <= 0) {
            mc_dead(m, n < 0 ? strerror(errno) : "write failed");
            return -1;
        }
        buf_consume(&m->out, (size_t)n);
    }
    if (buf_avail(&m->out) == 0)
        m->out.off = m->out.len = 0;
    mc_watch(m);
    return 0;
}


/* mc_expect - a reply is awaited now, within ms; SMFIR_PROGRESS may
 * extend the wait to MC_PROGRESS_MAX times that, no further (a milter
 * that only says "still working" would hold the session past its own
 * timeouts, which defer to the milters'). */
#define MC_PROGRESS_MAX 2

void
mc_expect(struct mconn *m, char cmd, uint64_t ms)
{
    m->waiting = 1;
    m->expect = cmd;
    m->deadline = ev_now(m->c->loop) + MC_PROGRESS_MAX * ms;
    ev_timer_start(m->c->loop, &m->timer, ms);
}


/* mc_progress - SMFIR_PROGRESS: the timeout starts again, within the
 * deadline. */
static void
mc_progress(struct mconn *m)
{
    uint64_t ms = m->expect == SMFIC_BODYEOB ? m->sp->eom_ms :
        m->sp->command_ms, now = ev_now(m->c->loop);

    if (now >= m->deadline)
        return;                     /* the timer runs out as it is */
    if (ms > m->deadline - now)
        ms = m->deadline - now;
    ev_timer_start(m->c->loop, &m->timer, ms);
}


/* mc_finish - the stage's verdict is known: owed done() is called. */
void
mc_finish(struct milter_chain *c)
{
    c->stage = MS_NONE;
    if (c->pending) {
        c->pending = 0;
        /* never from inside our own I/O handler: the owner may free the
         * chain, or start the next stage, from done() */
        ev_timer_start(c->loop, &c->done_timer, 0);
    }
}


static void
mc_on_done(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct milter_chain *c = arg;

    (void)loop;
    (void)t;
    c->done(c->arg);
}


/* mc_verdict - a milter decided act with reply text (NULL: the usual). */
void
mc_verdict(struct milter_chain *c, struct mconn *m, enum milter_act act,
    const char *text)
{
    const char *dflt = act == MILTER_REJECT ? "550 5.7.1 Command rejected" :
        act == MILTER_SHUTDOWN ? "421 4.7.0 Server closing connection" :
        mc_tempfail;

    c->res.act = act;
    util_strlcpy(c->res.reply, text != NULL ? text : dflt,
        sizeof(c->res.reply));
    util_strlcpy(c->res.who, m->sp->name, sizeof(c->res.who));
    mc_finish(c);
}


/* mc_replycode - SMFIR_REPLYCODE: a 4xx tempfails, a 5xx rejects, 421
 * closes; anything else is a plain tempfail (logged). */
static void
mc_replycode(struct milter_chain *c, struct mconn *m, const char *text)
{
    char out[sizeof(c->res.reply)];

    if (milter_reply_text(text, 0, out, sizeof(out)) != 0) {
        char esc[200];

        util_escape(esc, sizeof(esc), text, strlen(text), 0, NULL);
        log_warn("milter %s: bad reply code \"%s\": tempfail; session=%s",
            m->sp->name, esc, c->sid);
        mc_verdict(c, m, MILTER_TEMPFAIL, NULL);
        return;
    }
    mc_verdict(c, m, strncmp(out, "421", 3) == 0 ? MILTER_SHUTDOWN :
        out[0] == '4' ? MILTER_TEMPFAIL : MILTER_REJECT, out);
}


/* mc_common - the replies every stage takes; 1 when handled (the stage
 * went on or ended), 0 when not one of them. */
int
mc_common(struct milter_chain *c, struct mconn *m,
    const struct milter_reply *r)
{
    switch (r->cmd) {
    case SMFIR_CONTINUE:
        c->cur++;
        mc_step(c);
        return 1;
    case SMFIR_ACCEPT:
        if (c->stage == MS_CONNECT || c->stage == MS_HELO)
            m->conn_accepted = 1;
        else
            m->msg_accepted = 1;
        c->cur++;
        mc_step(c);
        return 1;
    case SMFIR_REJECT:
        mc_verdict(c, m, MILTER_REJECT, NULL);
        return 1;
    case SMFIR_TEMPFAIL:
        mc_verdict(c, m, MILTER_TEMPFAIL, NULL);
        return 1;
    case SMFIR_REPLYCODE:
        mc_replycode(c, m, r->s1);
        return 1;
    case SMFIR_SHUTDOWN:
    case SMFIR_CONN_FAIL:
        mc_verdict(c, m, MILTER_SHUTDOWN, NULL);
        return 1;
    case SMFIR_DISCARD:
        if (c->stage == MS_CONNECT || c->stage == MS_HELO) {
            c->cur++;               /* no message to drop yet */
            mc_step(c);
        } else {
            mc_verdict(c, m, MILTER_DISCARD, NULL);
        }
        return 1;
    default:
        return 0;
    }
}


/* mc_optneg - the milter's answer to our SMFIC_OPTNEG. */
static void
mc_optneg(struct mconn *m, const struct milter_reply *r)
{
    char why[128];

    if (r->cmd != SMFIR_OPTNEG || r->ver < 2) {
        snprintf(why, sizeof(why), "bad option negotiation (reply '%c', "
            "version %u)", r->cmd >= 32 && r->cmd < 127 ? r->cmd : '?',
            (unsigned)r->ver);
        mc_dead(m, why);
        return;
    }
    m->actions = r->actions & MILTER_ACTIONS;
    m->proto = (r->proto & MILTER_PROTO) | m->sp->proto_off;
    m->st = MC_READY;
    m->waiting = 0;
    ev_timer_stop(m->c->loop, &m->timer);
}


/* mc_packet - one packet from m; -1 when m died or c's stage ended in a
 * way that leaves m's further input to the next call. */
static void
mc_packet(struct mconn *m, const struct milter_pkt *pkt)
{
    struct milter_chain *c = m->c;
    struct milter_reply  r;
    char                 why[64];

    if (milter_reply_parse(pkt, &r) != 0 || !m->waiting) {
        snprintf(why, sizeof(why), "protocol error (%s reply '%c')",
            m->waiting ? "bad" : "unexpected",
            pkt->cmd >= 32 && pkt->cmd < 127 ? pkt->cmd : '?');
        mc_dead(m, why);
        mc_step(c);
        return;
    }
    if (r.cmd == SMFIR_PROGRESS) {
        mc_progress(m);
        return;
    }
    if (m->st == MC_NEG) {
        mc_optneg(m, &r);
        mc_step(c);
        return;
    }
    if (c->stage == MS_MSG) {
        mc_msg_reply(m, &r);
        return;
    }
    if (r.cmd == SMFIR_SKIP)
        r.cmd = SMFIR_CONTINUE;
    m->waiting = 0;
    ev_timer_stop(c->loop, &m->timer);
    if (!mc_common(c, m, &r)) {
        snprintf(why, sizeof(why), "protocol error (reply '%c' out of "
            "place)", r.cmd >= 32 && r.cmd < 127 ? r.cmd : '?');
        mc_dead(m, why);
        mc_step(c);
    }
}


/* mc_read - what the milter sent, packet by packet. */
static void
mc_read(struct mconn *m)
{
    struct milter_pkt pkt;
    size_t            used;
    ssize_t           n;
    int               rc;

    if (buf_room(&m->in) < 4096 && buf_reserve(&m->in, 65536) < 0) {
        mc_dead(m, "input overflow");
        mc_step(m->c);
        return;
    }
    n = recv(m->fd, buf_tail(&m->in), buf_room(&m->in), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        mc_dead(m, n == 0 ? "connection closed by the milter" :
            strerror(errno));
        mc_step(m->c);
        return;
    }
    buf_produce(&m->in, (size_t)n);
    while (m->st != MC_DEAD && (rc = milter_frame((const uint8_t *)
        buf_head(&m->in), buf_avail(&m->in), &pkt, &used)) != 0) {
        if (rc < 0) {
            mc_dead(m, "protocol error (bad packet length)");
            mc_step(m->c);
            return;
        }
        buf_consume(&m->in, used);
        mc_packet(m, &pkt);
    }
    if (m->st != MC_DEAD)
        buf_compact(&m->in);
}


/* mc_connected - connect() finished: negotiate. */
static void
mc_connected(struct mconn *m)
{
    int       err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(m->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err != 0) {
        char why[160];

        snprintf(why, sizeof(why), "connect: %s", strerror(err));
        mc_dead(m, why);
        mc_step(m->c);
        return;
    }
    m->st = MC_NEG;
    milter_put_optneg(&m->out, MILTER_ACTIONS, MILTER_PROTO);
    mc_expect(m, SMFIC_OPTNEG, m->sp->connect_ms);
    m->watched = 0;
    (void)mc_flush(m);
}


void
mc_on_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct mconn *m = arg;

    (void)loop;
    (void)fd;
    if (m->st == MC_CONNECTING) {
        mc_connected(m);
        return;
    }
    if ((events & EV_WRITE) && buf_avail(&m->out) > 0) {
        if (mc_flush(m) < 0) {
            mc_step(m->c);
            return;
        }
        if (m->c->stage == MS_MSG && m->c->cur < m->c->n &&
            &m->c->m[m->c->cur] == m && !m->waiting)
            mc_msg_pump(m);         /* room again for the body */
    }
    if (m->st != MC_DEAD && (events & (EV_READ | EV_ERROR)))
        mc_read(m);
}


static void
mc_on_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct mconn *m = arg;

    (void)loop;
    (void)t;
    mc_dead(m, m->st == MC_CONNECTING ? "connect timed out" :
        m->st == MC_NEG ? "option negotiation timed out" :
        m->expect == SMFIC_BODYEOB ? "end-of-message timed out" :
        "command timed out");
    mc_step(m->c);
}


/* mc_open - start the connection (non-blocking). */
static void
mc_open(struct mconn *m)
{
    struct sockaddr_storage ss;
    struct sockaddr_un     *un = (struct sockaddr_un *)&ss;
    socklen_t               len;
    const char             *s = m->sp->socket;
    char                    why[200];

    memset(&ss, 0, sizeof(ss));
    if (strncmp(s, "unix:", 5) == 0 && strlen(s + 5) < sizeof(un->sun_path)) {
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, s + 5);
        len = sizeof(*un);
    } else if (strncmp(s, "inet:", 5) != 0 ||
        util_parse_hostport(s + 5, &ss, &len) != 0) {
        mc_dead(m, "bad socket address");
        return;
    }
    m->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
        0);
    if (m->fd < 0) {
        snprintf(why, sizeof(why), "socket: %s", strerror(errno));
        mc_dead(m, why);
        return;
    }
    if (connect(m->fd, (struct sockaddr *)&ss, len) < 0 &&
        errno != EINPROGRESS) {
        snprintf(why, sizeof(why), "connect: %s", strerror(errno));
        mc_dead(m, why);
        return;
    }
    m->st = MC_CONNECTING;
    ev_timer_start(m->c->loop, &m->timer, m->sp->connect_ms);
    if (ev_watch(m->c->loop, m->fd, EV_WRITE, mc_on_io, m) != 0) {
        mc_dead(m, "epoll_ctl failed");
        return;
    }
    m->watched = EV_WRITE;
}


struct milter_chain *
milter_chain_new(struct ev_loop *loop, const struct milter_spec *specs,
    size_t n, const char *sid, milter_done_fn *done, void *arg)
{
    struct milter_chain *c = xcalloc(1, sizeof(*c));
    size_t               i;

    c->loop = loop;
    c->n = n;
    c->m = xcalloc(n ? n : 1, sizeof(*c->m));
    c->done = done;
    c->arg = arg;
    c->fd = -1;
    ev_timer_init(&c->done_timer, mc_on_done, c);
    util_strlcpy(c->sid, sid, sizeof(c->sid));
    for (i = 0; i < n; i++) {
        struct mconn *m = &c->m[i];

        m->c = c;
        m->sp = &specs[i];
        m->fd = -1;
        buf_init(&m->out);
        buf_init(&m->in);
        ev_timer_init(&m->timer, mc_on_timer, m);
        mc_open(m);
    }
    return c;
}


void
milter_chain_free(struct milter_chain *c)
{
    size_t i;

    if (c == NULL)
        return;
    for (i = 0; i < c->n; i++) {
        struct mconn *m = &c->m[i];

        if (m->fd >= 0) {
            if (m->st == MC_READY && !m->waiting) {
                m->out.off = m->out.len = 0;    /* anything unsent goes */
                milter_put(&m->out, SMFIC_QUIT, NULL, 0);
                (void)send(m->fd, m->out.data, m->out.len,
                    MSG_NOSIGNAL | MSG_DONTWAIT);
            }
            ev_forget(c->loop, m->fd);
            close(m->fd);
        }
        ev_timer_stop(c->loop, &m->timer);
        buf_free(&m->out);
        buf_free(&m->in);
    }
    ev_timer_stop(c->loop, &c->done_timer);
    mc_msg_free(c);
    buf_free(&c->cmd);
    free(c->m);
    free(c);
}


const struct milter_result *
milter_chain_result(const struct milter_chain *c)
{
    return &c->res;
}


/* mc_skips - m is not asked at this stage: it accepted, or said it does
 * not want the step (SMFIP_NO*). */
static int
mc_skips(const struct milter_chain *c, const struct mconn *m)
{
    static const uint32_t no[] = {
        [MS_CONNECT] = SMFIP_NOCONNECT, [MS_HELO] = SMFIP_NOHELO,
        [MS_MAIL] = SMFIP_NOMAIL, [MS_RCPT] = SMFIP_NORCPT,
        [MS_DATA] = SMFIP_NODATA, [MS_MSG] = 0
    };

    if (m->conn_accepted)
        return 1;
    if (m->msg_accepted && c->stage >= MS_RCPT)
        return 1;
    return (m->proto & no[c->stage]) != 0;
}


/* mc_noreply - m sends no reply to this stage's command (SMFIP_NR_*). */
static int
mc_noreply(const struct milter_chain *c, const struct mconn *m)
{
    static const uint32_t nr[] = {
        [MS_CONNECT] = SMFIP_NR_CONN, [MS_HELO] = SMFIP_NR_HELO,
        [MS_MAIL] = SMFIP_NR_MAIL, [MS_RCPT] = SMFIP_NR_RCPT,
        [MS_DATA] = SMFIP_NR_DATA, [MS_MSG] = 0
    };

    return (m->proto & nr[c->stage]) != 0;
}


/* mc_step - ask the milters from c->cur on; ends the stage when they
 * all answered, or one decided.  A dead milter's default action. */
void
mc_step(struct milter_chain *c)
{
    struct mconn *m;

    while (c->stage != MS_NONE && c->cur < c->n) {
        m = &c->m[c->cur];
        if (m->waiting)
            return;                 /* its reply comes */
        if (m->st == MC_CONNECTING || m->st == MC_NEG)
            return;                 /* its negotiation ends first */
        if (m->st == MC_DEAD) {
            if (!m->sp->default_accept && c->stage >= MS_MAIL) {
                mc_verdict(c, m, MILTER_TEMPFAIL, NULL);
                return;
            }
            c->cur++;
            continue;
        }
        if (c->stage == MS_MSG) {
            if (m->msg_accepted || m->conn_accepted) {
                c->cur++;
                continue;
            }
            mc_msg_start(m);
            return;
        }
        if (mc_skips(c, m)) {
            c->cur++;
            continue;
        }
        if (c->stage >= MS_MAIL)
            m->in_msg = 1;
        if (c->stage == MS_DATA)
            m->data_sent = 1;       /* not again before the headers */
        buf_append(&m->out, c->cmd.data, c->cmd.len);
        if (!mc_noreply(c, m))
            mc_expect(m, c->cmdc, m->sp->command_ms);
        if (mc_flush(m) < 0)
            continue;               /* dead now: its default, above */
        if (m->waiting)
            return;
        c->cur++;
    }
    if (c->stage != MS_NONE) {
        c->res.act = MILTER_CONTINUE;
        c->res.reply[0] = c->res.who[0] = '\0';
        mc_finish(c);
    }
}


/* mc_stage - run a stage whose command (macros first) is in c->cmd. */
int
mc_stage(struct milter_chain *c, int stage, char cmdc)
{
    c->stage = stage;
    c->cmdc = cmdc;
    c->cur = 0;
    c->pending = 0;
    memset(&c->res, 0, sizeof(c->res));
    mc_step(c);
    if (c->stage == MS_NONE)
        return MILTER_DONE;
    c->pending = 1;
    return MILTER_PENDING;
}


int
milter_connect(struct milter_chain *c, const struct milter_macro *mm,
    size_t nm, const char *host, int family, unsigned port,
    const char *addr)
{
    c->cmd.off = c->cmd.len = 0;
    milter_put_macros(&c->cmd, SMFIC_CONNECT, mm, nm);
    milter_put_connect(&c->cmd, host != NULL ? host : "unknown",
        family == AF_INET6 ? 6 : family == AF_INET ? 4 : 0, port, addr);
    return mc_stage(c, MS_CONNECT, SMFIC_CONNECT);
}


int
milter_helo(struct milter_chain *c, const struct milter_macro *mm,
    size_t nm, const char *helo)
{
    c->cmd.off = c->cmd.len = 0;
    milter_put_macros(&c->cmd, SMFIC_HELO, mm, nm);
    milter_put_strs(&c->cmd, SMFIC_HELO, &helo, 1);
    return mc_stage(c, MS_HELO, SMFIC_HELO);
}


int
milter_mail(struct milter_chain *c, const struct milter_macro *mm,
    size_t nm, const char *const *args, size_t nargs)
{
    c->cmd.off = c->cmd.len = 0;
    milter_put_macros(&c->cmd, SMFIC_MAIL, mm, nm);
    milter_put_strs(&c->cmd, SMFIC_MAIL, args, nargs);
    return mc_stage(c, MS_MAIL, SMFIC_MAIL);
}


int
milter_rcpt(struct milter_chain *c, const struct milter_macro *mm,
    size_t nm, const char *const *args, size_t nargs)
{
    c->cmd.off = c->cmd.len = 0;
    milter_put_macros(&c->cmd, SMFIC_RCPT, mm, nm);
    milter_put_strs(&c->cmd, SMFIC_RCPT, args, nargs);
    return mc_stage(c, MS_RCPT, SMFIC_RCPT);
}


int
milter_data(struct milter_chain *c, const struct milter_macro *mm,
    size_t nm)
{
    c->cmd.off = c->cmd.len = 0;
    milter_put_macros(&c->cmd, SMFIC_DATA, mm, nm);
    milter_put(&c->cmd, SMFIC_DATA, NULL, 0);
    return mc_stage(c, MS_DATA, SMFIC_DATA);
}


void
milter_chain_abort(struct milter_chain *c)
{
    size_t i;

    for (i = 0; i < c->n; i++) {
        struct mconn *m = &c->m[i];

        if (m->st == MC_READY && m->waiting)
            mc_dead(m, "dropped in the middle of a command");
        if (m->st == MC_READY && m->in_msg) {
            milter_put(&m->out, SMFIC_ABORT, NULL, 0);
            (void)mc_flush(m);
        }
        m->in_msg = 0;
        m->data_sent = 0;
        m->msg_accepted = 0;
    }
    c->stage = MS_NONE;
    c->pending = 0;
    ev_timer_stop(c->loop, &c->done_timer);
    mc_msg_free(c);
}
