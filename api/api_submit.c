/*
 * api_submit.c - the API process's SMTP client to the workers' injection
 * socket: a pool of connections, one message at a time on each, with the
 * envelope pipelined (RFC 2920).
 *
 * PURPOSE   A message is two round trips on a warm connection: MAIL, every
 *           RCPT and DATA in one write (the worker always offers
 *           PIPELINING), then the content and the final dot after the 354.
 *           Not BDAT, which would make it one: a BDAT after a refused RCPT
 *           still commits the message to the other recipients, and the
 *           API's promise is all or nothing.
 *           The connection opens with "PROXY TCP4|TCP6 client ... \r\n"
 *           and EHLO in one write: the injection listener has no greeting
 *           screen, and the worker reads the header before the session.
 *           Connections are pooled per client address: the PROXY header
 *           is per connection, so one opened for a client serves only
 *           that client's messages (its port is that of the first HTTP
 *           connection that needed it).
 * CONTRACT  See api_submit.h.  A job is on exactly one connection from
 *           api_submit_send() until done() (the connection is made or
 *           taken at once, so nothing waits in a queue: the HTTP server's
 *           max_clients bounds how many are in flight).
 * FAILURE   Socket errors end the connection and fail its job (retried
 *           once when the connection was idle before it, see
 *           sc_retryable).  Never logs the message's content.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/util.h"
#include "smtp/smtp.h"
#include "api/api_submit.h"

#define SC_IN_MAX   (64 * 1024)     /* a reply longer than this is broken */
#define SC_KEY_MAX  INET6_ADDRSTRLEN
#define SC_STUFF_CHUNK (64 * 1024)

enum sc_state {
    SC_GREET = 0,       /* PROXY + EHLO written: 220 then 250 due */
    SC_IDLE,            /* in the pool */
    SC_ENVELOPE,        /* MAIL, RCPTs, DATA written: their replies due */
    SC_CONTENT,         /* content and dot written: the 250 due */
    SC_RSET,            /* RSET after a refusal: its 250 due */
    SC_DEAD
};

struct sjob {
    struct api_submit     *p;
    api_submit_done_fn    *done;
    void                  *arg;
    char                   key[SC_KEY_MAX];
    char                   proxy[160];      /* the PROXY v1 line */
    struct buf             env;             /* MAIL .. DATA, CRLFs */
    struct buf             body;            /* stuffed content + dot */
    size_t                 nrcpt;
    int                    retried;
    struct api_submit_result r;
};

struct sconn {
    struct api_submit     *p;
    struct sconn          *prev, *next;     /* p->all */
    struct sconn          *iprev, *inext;   /* p->idle, newest first */
    int                    fd;
    int                    state;
    int                    watched;         /* EV_* given to the loop */
    char                   key[SC_KEY_MAX];
    struct buf             in, out;
    const char            *wbody;           /* job body being written */
    size_t                 wleft;
    struct ev_timer        timer;
    unsigned               caps;
    struct smtp_ehlo       ehlo;
    unsigned               ntxn;            /* messages begun on it */
    int                    greeted;         /* the 220 came */
    int                    used;            /* a job ran on it before */
    size_t                 nrep;            /* replies of this envelope */
    struct sjob           *job;
};

struct api_submit {
    struct ev_loop        *loop;
    struct sockaddr_un     sun;
    struct sconn          *all;
    struct sconn          *idle;
    size_t                 nopen, nidle;
    int                    closing;         /* api_submit_free: no retry */
    struct sconn          *dead;            /* closed, freed later */
    struct ev_timer        later;           /* done() calls, frees */
    struct sjob          **due;
    size_t                 ndue, capdue;
};

static void sc_on_io(struct ev_loop *loop, int fd, unsigned events,
            void *arg);
static void sc_kill(struct sconn *c, const char *why);
static int  sc_start(struct api_submit *p, struct sjob *j);


/* --- jobs ------------------------------------------------------------- */

static void
sjob_free(struct sjob *j)
{
    buf_free(&j->env);
    buf_free(&j->body);
    free(j);
}


static void
sub_on_later(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct api_submit *p = arg;
    size_t             i, n = p->ndue;
    struct sjob      **due = p->due;
    struct sconn      *c;

    (void)loop;
    (void)t;
    p->due = NULL;
    p->ndue = p->capdue = 0;
    for (i = 0; i < n; i++) {
        due[i]->done(due[i]->arg, &due[i]->r);
        sjob_free(due[i]);
    }
    free(due);
    while ((c = p->dead) != NULL) {
        p->dead = c->next;
        free(c);
    }
}


/* sjob_finish - report r later from the loop: done() may free things
 * (the HTTP client) that the caller on the stack still uses. */
static void
sjob_finish(struct sjob *j)
{
    struct api_submit *p = j->p;

    if (p->ndue == p->capdue) {
        p->capdue = p->capdue ? p->capdue * 2 : 8;
        p->due = xrealloc(p->due, p->capdue * sizeof(*p->due));
    }
    p->due[p->ndue++] = j;
    if (!ev_timer_active(&p->later))
        ev_timer_start(p->loop, &p->later, 0);
}


static void
sjob_fail(struct sjob *j, const char *why)
{
    j->r.status = API_SUBMIT_FAILED;
    j->r.why = why;
    sjob_finish(j);
}


static void
sjob_refused(struct sjob *j, int stage, size_t rcpt,
    const struct smtp_reply *rep)
{
    j->r.status = API_SUBMIT_REFUSED;
    j->r.stage = stage;
    j->r.rcpt = rcpt;
    j->r.reply = *rep;
    (void)smtp_enhanced(rep->text, rep->code >= 500 ? "5.0.0" : "4.0.0",
        j->r.enhanced, sizeof(j->r.enhanced));
}


/* --- connections ------------------------------------------------------ */

static void
sc_watch(struct sconn *c, unsigned ev)
{
    if ((unsigned)c->watched == ev)
        return;
    if (ev_watch(c->p->loop, c->fd, ev, sc_on_io, c) == 0)
        c->watched = (int)ev;
}


static void
sc_idle_del(struct sconn *c)
{
    struct api_submit *p = c->p;

    if (c->state != SC_IDLE)
        return;
    if (c->iprev != NULL)
        c->iprev->inext = c->inext;
    else
        p->idle = c->inext;
    if (c->inext != NULL)
        c->inext->iprev = c->iprev;
    c->iprev = c->inext = NULL;
    p->nidle--;
}


/* sc_close - the fd and the lists; the struct is freed on the loop's next
 * turn (sub_on_later): callers up the stack still look at c->state. */
static void
sc_close(struct sconn *c)
{
    struct api_submit *p = c->p;

    sc_idle_del(c);
    ev_timer_stop(p->loop, &c->timer);
    ev_unwatch(p->loop, c->fd);
    close(c->fd);
    c->fd = -1;
    c->state = SC_DEAD;
    buf_free(&c->in);
    buf_free(&c->out);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        p->all = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    p->nopen--;
    c->next = p->dead;
    p->dead = c;
    if (!ev_timer_active(&p->later))
        ev_timer_start(p->loop, &p->later, 0);
}


/* sc_retryable - a reused connection that fails before the first reply
 * of its new message: the worker had closed it (idle timeout, restart,
 * max_transactions) while it sat in the pool.  Nothing of the message was
 * accepted, so it goes again on a fresh connection, once. */
static int
sc_retryable(const struct sconn *c)
{
    return c->job != NULL && c->used && !c->job->retried &&
        c->state == SC_ENVELOPE && c->nrep == 0;
}


/* sc_kill - end the connection; its job (if any) fails with why, or is
 * retried (sc_retryable). */
static void
sc_kill(struct sconn *c, const char *why)
{
    struct sjob *j = c->job;
    int          retry = sc_retryable(c);

    if (c->state == SC_DEAD)
        return;
    if (j != NULL && c->state == SC_CONTENT && c->wleft == 0)
        j->r.stage = API_STAGE_CONTENT;     /* after the dot: unknown */
    c->job = NULL;
    sc_close(c);
    if (j == NULL)
        return;
    if (retry && !c->p->closing) {
        memset(&j->r, 0, sizeof(j->r));
        j->retried = 1;
        if (sc_start(j->p, j) == 0)
            return;
    }
    if (j->r.status == API_SUBMIT_REFUSED)
        sjob_finish(j);             /* the refusal stands */
    else
        sjob_fail(j, why);
}


static int
sc_flush(struct sconn *c)
{
    ssize_t k;

    while (buf_avail(&c->out) > 0) {
        k = send(c->fd, buf_head(&c->out), buf_avail(&c->out), MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EAGAIN || errno == EINTR)
                goto block;
            return -1;
        }
        buf_consume(&c->out, (size_t)k);
    }
    while (c->wleft > 0) {
        k = send(c->fd, c->wbody, c->wleft, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EAGAIN || errno == EINTR)
                goto block;
            return -1;
        }
        c->wbody += k;
        c->wleft -= (size_t)k;
    }
    sc_watch(c, EV_READ);
    return 0;
block:
    sc_watch(c, EV_READ | EV_WRITE);
    return 0;
}


static void
sc_to_idle(struct sconn *c)
{
    struct api_submit *p = c->p;
    struct sconn      *o;
    size_t             same = 0;

    c->job = NULL;
    if (c->ehlo.mailmax > 0 && c->ntxn >= c->ehlo.mailmax) {
        sc_kill(c, NULL);           /* the worker would refuse the next */
        return;
    }
    for (o = p->idle; o != NULL; o = o->inext)
        if (strcmp(o->key, c->key) == 0)
            same++;
    if (same >= API_SUBMIT_IDLE_PER_ADDR || p->nidle >= API_SUBMIT_IDLE_MAX) {
        sc_kill(c, NULL);
        return;
    }
    c->state = SC_IDLE;
    c->inext = p->idle;
    if (p->idle != NULL)
        p->idle->iprev = c;
    p->idle = c;
    p->nidle++;
    ev_timer_start(p->loop, &c->timer, API_SUBMIT_IDLE_MS);
}


/* sc_begin - put the job's envelope on a greeted connection. */
static void
sc_begin(struct sconn *c)
{
    struct sjob *j = c->job;

    c->state = SC_ENVELOPE;
    c->nrep = 0;
    c->ntxn++;
    buf_append(&c->out, buf_head(&j->env), buf_avail(&j->env));
    ev_timer_start(c->p->loop, &c->timer, API_SUBMIT_TIMEOUT_MS);
    if (sc_flush(c) < 0)
        sc_kill(c, "the injection socket failed while sending");
}


/* sc_on_greet - the 220, then the EHLO reply. */
static void
sc_on_greet(struct sconn *c, const struct smtp_reply *rep, const char *raw)
{
    if (!c->greeted) {
        if (rep->code != 220) {
            /* a 421 (too many connections from the client, draining, a
             * ban): the worker's refusal of this client */
            if (c->job != NULL)
                sjob_refused(c->job, API_STAGE_CONNECT, 0, rep);
            sc_kill(c, "the worker refused the connection");
            return;
        }
        c->greeted = 1;
        return;
    }
    if (rep->code != 250) {
        if (c->job != NULL)
            sjob_refused(c->job, API_STAGE_CONNECT, 0, rep);
        sc_kill(c, "the worker refused EHLO");
        return;
    }
    c->caps = smtp_ehlo_caps(raw, rep->len, &c->ehlo);
    if (!(c->caps & SMTP_CAP_PIPELINING)) {
        sc_kill(c, "the worker does not offer PIPELINING");
        return;
    }
    if (c->job != NULL)
        sc_begin(c);
    else
        sc_to_idle(c);
}


/* sc_on_envelope - one reply of MAIL, RCPT..., DATA. */
static void
sc_on_envelope(struct sconn *c, const struct smtp_reply *rep)
{
    struct sjob *j = c->job;
    size_t       i = c->nrep++;
    int          ok = rep->code >= 200 && rep->code < 300;

    if (rep->code == 421) {         /* and the worker closes */
        if (j->r.status != API_SUBMIT_REFUSED)
            sjob_refused(j, i == 0 ? API_STAGE_MAIL : i <= j->nrcpt ?
                API_STAGE_RCPT : API_STAGE_DATA, i > 0 ? i - 1 : 0, rep);
        if (i == 0)
            c->nrep = 0;            /* retried if it sat idle: sc_kill */
        sc_kill(c, NULL);
        return;
    }
    if (i < 1 + j->nrcpt) {
        if (!ok && j->r.status != API_SUBMIT_REFUSED)
            sjob_refused(j, i == 0 ? API_STAGE_MAIL : API_STAGE_RCPT,
                i > 0 ? i - 1 : 0, rep);
        return;
    }
    /* the DATA reply */
    if (rep->code == 354 && j->r.status == API_SUBMIT_REFUSED) {
        /* some recipient was taken: no RSET inside DATA, and a final dot
         * would commit the message to them; closing before it discards
         * it (the worker commits only at the dot) */
        sc_kill(c, NULL);
        return;
    }
    if (rep->code == 354) {
        c->state = SC_CONTENT;
        c->wbody = buf_head(&j->body);
        c->wleft = buf_avail(&j->body);
        ev_timer_start(c->p->loop, &c->timer, API_SUBMIT_TIMEOUT_MS);
        if (sc_flush(c) < 0)
            sc_kill(c, "the injection socket failed while sending");
        return;
    }
    if (j->r.status != API_SUBMIT_REFUSED)
        sjob_refused(j, API_STAGE_DATA, 0, rep);
    sjob_finish(j);
    c->job = NULL;
    c->state = SC_RSET;
    buf_append(&c->out, "RSET\r\n", 6);
    if (sc_flush(c) < 0)
        sc_kill(c, NULL);
}


/* sc_queue_id - "250 2.0.0 Ok: queued as ID" -> ID. */
static void
sc_queue_id(const char *text, char *out, size_t outsz)
{
    const char *q = strstr(text, "queued as ");
    size_t      n = 0;

    out[0] = '\0';
    if (q == NULL)
        return;
    q += strlen("queued as ");
    while (q[n] != '\0' && q[n] != ' ' && n + 1 < outsz &&
        ((q[n] >= '0' && q[n] <= '9') || (q[n] >= 'A' && q[n] <= 'Z') ||
        (q[n] >= 'a' && q[n] <= 'z')))
        n++;
    memcpy(out, q, n);
    out[n] = '\0';
}


static void
sc_on_reply(struct sconn *c, const struct smtp_reply *rep, const char *raw)
{
    struct sjob *j = c->job;

    switch (c->state) {
    case SC_GREET:
        sc_on_greet(c, rep, raw);
        return;
    case SC_ENVELOPE:
        sc_on_envelope(c, rep);
        return;
    case SC_CONTENT:
        c->job = NULL;
        if (rep->code >= 200 && rep->code < 300) {
            j->r.status = API_SUBMIT_OK;
            sc_queue_id(rep->text, j->r.queue_id, sizeof(j->r.queue_id));
        } else {
            sjob_refused(j, API_STAGE_CONTENT, 0, rep);
        }
        sjob_finish(j);
        if (rep->code == 421)
            sc_kill(c, NULL);
        else
            sc_to_idle(c);
        return;
    case SC_RSET:
        if (rep->code == 250)
            sc_to_idle(c);
        else
            sc_kill(c, NULL);
        return;
    default:                        /* SC_IDLE: a 421 (its timeout, stop) */
        sc_kill(c, NULL);
        return;
    }
}


static void
sc_read(struct sconn *c)
{
    struct smtp_reply rep;
    const char       *raw;
    ssize_t           k;
    int               rc;

    if (buf_reserve(&c->in, 4096) < 0) {
        sc_kill(c, "a reply too long from the worker");
        return;
    }
    k = recv(c->fd, buf_tail(&c->in), buf_room(&c->in), 0);
    if (k == 0) {
        sc_kill(c, "the worker closed the connection");
        return;
    }
    if (k < 0) {
        if (errno != EAGAIN && errno != EINTR)
            sc_kill(c, "the injection socket failed while reading");
        return;
    }
    buf_produce(&c->in, (size_t)k);
    /* every complete reply; sc_kill() leaves c allocated (SC_DEAD) until
     * the loop's next turn, so the test below stays valid */
    while (c->state != SC_DEAD) {
        rc = smtp_reply_parse(buf_head(&c->in), buf_avail(&c->in), SC_IN_MAX,
            &rep);
        if (rc < 0) {
            sc_kill(c, "a malformed reply from the worker");
            return;
        }
        if (rc == 0)
            return;
        /* the raw lines stay in place: consuming moves no byte, and
         * nothing is read into c->in before the next recv */
        raw = buf_head(&c->in);
        buf_consume(&c->in, rep.len);
        sc_on_reply(c, &rep, raw);
    }
}


static void
sc_on_io(struct ev_loop *loop, int fd, unsigned events, void *arg)
{
    struct sconn *c = arg;

    (void)loop;
    (void)fd;
    if ((events & EV_WRITE) && sc_flush(c) < 0) {
        sc_kill(c, "the injection socket failed while sending");
        return;
    }
    if (events & (EV_READ | EV_ERROR))
        sc_read(c);
}


static void
sc_on_timer(struct ev_loop *loop, struct ev_timer *t, void *arg)
{
    struct sconn *c = arg;

    (void)loop;
    (void)t;
    if (c->state == SC_IDLE) {
        (void)send(c->fd, "QUIT\r\n", 6, MSG_NOSIGNAL | MSG_DONTWAIT);
        sc_kill(c, NULL);
        return;
    }
    sc_kill(c, "no answer from the worker in time");
}


/* --- starting a message ----------------------------------------------- */

/* sc_open - a new connection for j: connect, PROXY header and EHLO in
 * one write.  A unix socket connects at once or not at all (EAGAIN: the
 * workers' backlog is full). */
static struct sconn *
sc_open(struct api_submit *p, struct sjob *j)
{
    struct sconn *c;
    int           fd;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    if (connect(fd, (struct sockaddr *)&p->sun, sizeof(p->sun)) < 0) {
        close(fd);
        return NULL;
    }
    c = xcalloc(1, sizeof(*c));
    c->p = p;
    c->fd = fd;
    c->state = SC_GREET;
    util_strlcpy(c->key, j->key, sizeof(c->key));
    buf_init(&c->in);
    buf_init(&c->out);
    ev_timer_init(&c->timer, sc_on_timer, c);
    c->next = p->all;
    if (p->all != NULL)
        p->all->prev = c;
    p->all = c;
    p->nopen++;
    buf_printf(&c->out, "%sEHLO api.internal\r\n", j->proxy);
    ev_timer_start(p->loop, &c->timer, API_SUBMIT_TIMEOUT_MS);
    return c;
}


static int
sc_start(struct api_submit *p, struct sjob *j)
{
    struct sconn *c;

    for (c = p->idle; c != NULL; c = c->inext)
        if (strcmp(c->key, j->key) == 0)
            break;
    if (c != NULL && !j->retried) {
        sc_idle_del(c);
        c->used = 1;
        c->job = j;
        sc_begin(c);
        return 0;
    }
    c = sc_open(p, j);
    if (c == NULL)
        return -1;
    c->job = j;
    if (sc_flush(c) < 0) {
        c->job = NULL;
        sc_kill(c, NULL);
        return -1;
    }
    return 0;
}


/* --- the message in SMTP ---------------------------------------------- */

/* sub_addr_ok - a path SMTP can carry: printable, no '<', '>', space. */
static int
sub_addr_ok(const char *a, int *utf8)
{
    const unsigned char *u = (const unsigned char *)a;

    for (; *u != '\0'; u++) {
        if (*u < 0x21 || *u == 0x7f || *u == '<' || *u == '>')
            return 0;
        if (*u >= 0x80)
            *utf8 = 1;
    }
    return (size_t)(u - (const unsigned char *)a) < 512;
}


static void
sub_notify(struct buf *b, unsigned n)
{
    const char *sep = " NOTIFY=";

    if (n & API_NOTIFY_NEVER) {
        buf_printf(b, "%sNEVER", sep);
        return;
    }
    if (n & API_NOTIFY_SUCCESS) {
        buf_printf(b, "%sSUCCESS", sep);
        sep = ",";
    }
    if (n & API_NOTIFY_FAILURE) {
        buf_printf(b, "%sFAILURE", sep);
        sep = ",";
    }
    if (n & API_NOTIFY_DELAY)
        buf_printf(b, "%sDELAY", sep);
}


/* sub_xtext - " KEY=" and v as xtext (RFC 3461 4); -1 when too long. */
static int
sub_xtext(struct buf *b, const char *key, const char *v)
{
    char x[1024];

    if (smtp_xtext_encode(v, x, sizeof(x)) < 0)
        return -1;
    buf_printf(b, " %s=%s", key, x);
    return 0;
}


/* sub_envelope - MAIL, the RCPTs and DATA, one pipelined group. */
static int
sub_envelope(struct sjob *j, const struct api_submit_msg *m, int eight,
    size_t size, const char **why)
{
    struct buf *b = &j->env;
    int         utf8 = 0;
    size_t      i;

    if (!sub_addr_ok(m->from, &utf8)) {
        *why = "\"from\": not an address SMTP can carry";
        return -1;
    }
    for (i = 0; i < m->nrcpt; i++)
        if (m->rcpt[i].addr[0] == '\0' ||
            !sub_addr_ok(m->rcpt[i].addr, &utf8)) {
            *why = "\"to\": not an address SMTP can carry";
            return -1;
        }
    buf_printf(b, "MAIL FROM:<%s> SIZE=%zu%s%s", m->from, size,
        eight ? " BODY=8BITMIME" : "", utf8 ? " SMTPUTF8" : "");
    if (m->ret != NULL)
        buf_printf(b, " RET=%s", m->ret);
    if (m->envid != NULL && sub_xtext(b, "ENVID", m->envid) < 0) {
        *why = "\"envid\": too long";
        return -1;
    }
    buf_append(b, "\r\n", 2);
    for (i = 0; i < m->nrcpt; i++) {
        buf_printf(b, "RCPT TO:<%s>", m->rcpt[i].addr);
        sub_notify(b, m->rcpt[i].notify);
        if (m->rcpt[i].orcpt != NULL &&
            sub_xtext(b, "ORCPT", m->rcpt[i].orcpt) < 0) {
            *why = "\"orcpt\": too long";
            return -1;
        }
        buf_append(b, "\r\n", 2);
    }
    buf_append(b, "DATA\r\n", 6);
    return 0;
}


/* sub_stuff - the content for DATA in one pass: a '.' starting a line is
 * doubled (RFC 5321 4.5.2), a lone LF becomes CRLF (a JSON text written
 * with "\n" is what a client means), a lone CR stays (the worker's
 * limits.bare_newline judges it, as for any client), and the end mark.
 * Returns whether a byte is 8-bit (BODY=8BITMIME); *dots: the dots it
 * added. */
static int
sub_stuff(struct buf *b, const unsigned char *in, size_t n, size_t *dots)
{
    size_t i, k, end;
    int    bol = 1, cr = 0, eight = 0;
    char  *o;

    for (k = 0; k < n; k = end) {
        end = n - k > SC_STUFF_CHUNK ? k + SC_STUFF_CHUNK : n;
        if (buf_reserve(b, 2 * (end - k)) < 0)
            fatalx("api_submit: a message over the buffer cap");
        o = buf_tail(b);
        for (i = k; i < end; i++) {
            unsigned char ch = in[i];

            if (bol && ch == '.') {
                *o++ = '.';
                (*dots)++;
            }
            if (ch == '\n' && !cr)
                *o++ = '\r';
            *o++ = (char)ch;
            eight |= ch >= 0x80;
            bol = ch == '\n' || ch == '\r';
            cr = ch == '\r';
        }
        buf_produce(b, (size_t)(o - buf_tail(b)));
    }
    if (n > 0 && !(in[n - 1] == '\n'))
        buf_append(b, "\r\n", 2);
    buf_append(b, ".\r\n", 3);
    return eight;
}


/* sub_proxy - the PROXY v1 line for the client; key: its address. */
static void
sub_proxy(struct sjob *j, const struct sockaddr_storage *ss)
{
    char        ip[INET6_ADDRSTRLEN];
    unsigned    port = 0;
    int         v6 = 0;
    const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

    util_strlcpy(ip, "127.0.0.1", sizeof(ip));
    if (ss != NULL && ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        port = ntohs(s4->sin_port);
    } else if (ss != NULL && ss->ss_family == AF_INET6 &&
        IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
        inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], ip, sizeof(ip));
        port = ntohs(s6->sin6_port);
    } else if (ss != NULL && ss->ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        port = ntohs(s6->sin6_port);
        v6 = 1;
    }
    util_strlcpy(j->key, ip, sizeof(j->key));
    snprintf(j->proxy, sizeof(j->proxy), "PROXY TCP%c %s %s %u 0\r\n",
        v6 ? '6' : '4', ip, v6 ? "::1" : "127.0.0.1", port);
}


int
api_submit_send(struct api_submit *p, const struct api_submit_msg *m,
    api_submit_done_fn *done, void *arg, const char **why)
{
    struct sjob *j;
    size_t       dots = 0;
    int          eight;

    if (m->nrcpt == 0) {
        *why = "no recipient";
        return -1;
    }
    j = xcalloc(1, sizeof(*j));
    j->p = p;
    j->done = done;
    j->arg = arg;
    j->nrcpt = m->nrcpt;
    buf_init(&j->env);
    buf_init(&j->body);
    eight = sub_stuff(&j->body, m->body, m->body_len, &dots);
    /* SIZE=: the content as the worker counts it (unstuffed, CRLFs) */
    if (sub_envelope(j, m, eight, buf_avail(&j->body) - 3 - dots, why) < 0) {
        sjob_free(j);
        return -1;
    }
    sub_proxy(j, m->client);
    if (sc_start(p, j) < 0)
        sjob_fail(j, "no worker takes injected mail (the injection socket "
            "refused the connection)");
    return 0;
}


/* --- the pool --------------------------------------------------------- */

struct api_submit *
api_submit_new(struct ev_loop *loop, const char *path)
{
    struct api_submit *p;

    if (strlen(path) >= sizeof(p->sun.sun_path))
        return NULL;
    p = xcalloc(1, sizeof(*p));
    p->loop = loop;
    p->sun.sun_family = AF_UNIX;
    memcpy(p->sun.sun_path, path, strlen(path) + 1);
    ev_timer_init(&p->later, sub_on_later, p);
    return p;
}


void
api_submit_counts(const struct api_submit *p, size_t *open, size_t *idle)
{
    *open = p != NULL ? p->nopen : 0;
    *idle = p != NULL ? p->nidle : 0;
}


void
api_submit_free(struct api_submit *p)
{
    if (p == NULL)
        return;
    p->closing = 1;
    while (p->all != NULL)
        sc_kill(p->all, "the API process is stopping");
    ev_timer_stop(p->loop, &p->later);
    sub_on_later(p->loop, &p->later, p);
    free(p);
}
