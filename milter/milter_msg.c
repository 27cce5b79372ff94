/*
 * milter_msg.c - the message phase: DATA, each header field, end of
 * headers, the body in chunks, end of message, for one milter after the
 * other, read from the spooled file; and the edits milters ask for at
 * the end of the message.
 *
 * FORMAT    As Postfix sends them: a header's value without the one space
 *           after the colon (unless the milter asked for SMFIP_HDR_LEADSPC),
 *           its folded lines joined by "\n"; the body as stored (CRLF).
 * FLOW      Commands a milter does not answer (SMFIP_NR_*) are queued only
 *           while less than MM_OUT_HIGH waits to be written; the rest
 *           follows as the socket takes it.
 * LIMITS    An edit a milter did not negotiate is ignored (logged); more
 *           than MM_EDITS_MAX edits, header edits of more than
 *           MM_EDIT_BYTES, or a replacement body larger (as stored, CRLF)
 *           than the message may be (limits.max_message_size), is a
 *           protocol error.
 * ROLLBACK  A milter's edits count from its final CONTINUE or ACCEPT on:
 *           one that fails before (dies, times out, breaks the protocol)
 *           leaves none of them, so its default action "accept" commits
 *           the message as the milters before it left it, never half a
 *           replaced body (a quarantine it asked for holds: the safe
 *           side).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/ev.h"
#include "common/log.h"
#include "common/util.h"
#include "milter/milter.h"
#include "milter/milter_int.h"

#define MM_OUT_HIGH   (256 * 1024)
#define MM_HDR_MAX    (1024 * 1024)     /* a header section read whole */
#define MM_EDITS_MAX  4096
#define MM_BODY_MAX   ((size_t)128 * 1024 * 1024)  /* under buf's cap */
#define MM_EDIT_BYTES (1024 * 1024)     /* header edits of one milter */


static void mm_fields_free(struct milter_chain *c);


void
mc_msg_free(struct milter_chain *c)
{
    mm_fields_free(c);
    buf_free(&c->mac_data);
    buf_free(&c->mac_eom);
    milter_edits_free(&c->edits);
    buf_free(&c->nbody);
    c->nbody_set = 0;
    c->fd = -1;
}


/* mm_mark - the current milter starts with no edits of its own. */
static void
mm_mark(struct milter_chain *c)
{
    c->edits_mark = c->edits.n;
    c->nbody.off = c->nbody.len = 0;
    c->nbody_set = c->nbody_cr = 0;
    c->nbody_size = 0;
    c->edit_bytes = 0;
}


void
mc_msg_drop(struct milter_chain *c)
{
    while (c->edits.n > c->edits_mark) {
        struct milter_edit *x = &c->edits.v[--c->edits.n];

        free(x->name);
        free(x->value);
    }
    buf_free(&c->nbody);
    mm_mark(c);
}


/* mm_keep - the current milter's final word: its body replaces the
 * message's (earlier milters' bodies included). */
static void
mm_keep(struct milter_chain *c)
{
    struct buf t;

    if (c->nbody_set) {
        t = c->edits.body;
        c->edits.body = c->nbody;
        c->nbody = t;
        c->edits.body_set = 1;
    }
    mm_mark(c);
}


/* mm_field - one header field f[0..n) (CRLF lines) into the list. */
static void
mm_field(struct milter_chain *c, const char *f, size_t n)
{
    const char *colon = memchr(f, ':', n), *p, *end = f + n;
    size_t      nlen, i;
    struct buf  v;

    if (colon == NULL || colon == f)
        return;                     /* not a field: not sent */
    nlen = (size_t)(colon - f);
    while (nlen > 0 && (f[nlen - 1] == ' ' || f[nlen - 1] == '\t'))
        nlen--;
    for (i = 0; i < nlen; i++)
        if ((unsigned char)f[i] <= ' ' || (unsigned char)f[i] > '~')
            return;
    buf_init(&v);
    for (p = colon + 1; p < end; p++) {
        if (*p == '\r' && p + 1 < end && p[1] == '\n')
            continue;
        if (*p == '\n' && p + 1 == end)
            break;
        buf_append(&v, p, 1);
    }
    buf_append(&v, "", 1);
    c->hname = xrealloc(c->hname, (c->nh + 1) * sizeof(*c->hname));
    c->hvalue = xrealloc(c->hvalue, (c->nh + 1) * sizeof(*c->hvalue));
    c->hname[c->nh] = xstrndup(f, nlen);
    c->hvalue[c->nh] = xstrdup(v.data);
    c->nh++;
    buf_free(&v);
}


/* mm_split - the fields of h[0..n) into the list. */
static void
mm_split(struct milter_chain *c, const char *h, size_t n)
{
    size_t i, start;

    for (i = 0; i < n;) {
        start = i;
        do {
            const char *lf = memchr(h + i, '\n', n - i);

            i = lf != NULL ? (size_t)(lf - h) + 1 : n;
        } while (i < n && (h[i] == ' ' || h[i] == '\t'));
        mm_field(c, h + start, i - start);
    }
}


/* mm_fields_free - the header list emptied. */
static void
mm_fields_free(struct milter_chain *c)
{
    size_t i;

    for (i = 0; i < c->nh; i++) {
        free(c->hname[i]);
        free(c->hvalue[i]);
    }
    free(c->hname);
    free(c->hvalue);
    c->hname = c->hvalue = NULL;
    c->nh = 0;
}


/* mm_carry - a milter said its last word: its header edits are applied
 * to the list the next milters are sent (as Postfix's cleanup does, each
 * milter sees the message as those before it left it; a replaced body
 * is sent from memory, mm_body). */
static void
mm_carry(struct milter_chain *c)
{
    struct milter_edits one;
    struct buf          in, out;
    size_t              i;
    const char         *v;

    for (i = c->edits_mark; i < c->edits.n; i++)
        if (c->edits.v[i].kind <= MILTER_CHGHDR)
            break;
    if (i == c->edits.n || c->cur + 1 >= c->n)
        return;                     /* no header edit, or no one to see it */
    buf_init(&in);
    for (i = 0; i < c->nh; i++) {
        buf_append(&in, c->hname[i], strlen(c->hname[i]));
        buf_append(&in, ":", 1);
        for (v = c->hvalue[i]; *v != '\0'; v++)
            buf_append(&in, *v == '\n' ? "\r\n" : v, *v == '\n' ? 2 : 1);
        buf_append(&in, "\r\n", 2);
    }
    memset(&one, 0, sizeof(one));
    one.v = c->edits.v + c->edits_mark;
    one.n = c->edits.n - c->edits_mark;
    buf_init(&out);
    milter_edit_headers(in.data != NULL ? in.data : "", in.len, &one, &out);
    mm_fields_free(c);
    if (out.len > 0)
        mm_split(c, out.data, out.len);
    buf_free(&in);
    buf_free(&out);
}


/* mm_headers - read the header section at off and split it; the body
 * starts after its blank line (none: everything is header). */
static int
mm_headers(struct milter_chain *c, int fd, off_t off, uint64_t len)
{
    size_t  cap = len < MM_HDR_MAX ? (size_t)len : MM_HDR_MAX, got = 0;
    size_t  hend;
    char   *h = xmalloc(cap + 1), *blank;
    ssize_t r;

    while (got < cap) {
        r = pread(fd, h + got, cap - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(h);
            return -1;
        }
        got += (size_t)r;
    }
    h[got] = '\0';
    blank = got >= 2 && h[0] == '\r' && h[1] == '\n' ? h :
        memmem(h, got, "\r\n\r\n", 4);
    if (blank == h) {
        hend = 0;
        c->body_off = 2;
    } else if (blank != NULL) {
        hend = (size_t)(blank - h) + 2;
        c->body_off = hend + 2;
    } else {
        hend = got;
        c->body_off = got;
    }
    mm_split(c, h, hend);
    free(h);
    c->body_len = len - c->body_off;
    c->body_off += (uint64_t)off;
    return 0;
}


int
milter_message(struct milter_chain *c, const struct milter_macro *mm,
    size_t nm, int fd, off_t off, uint64_t len, uint64_t max)
{
    mc_msg_free(c);
    c->body_max = max > 0 && max < MM_BODY_MAX ? max : MM_BODY_MAX;
    if (mm_headers(c, fd, off, len) != 0) {
        memset(&c->res, 0, sizeof(c->res));
        c->res.act = MILTER_TEMPFAIL;
        util_strlcpy(c->res.reply, "451 4.3.0 Error: reading the message "
            "for the content filters failed", sizeof(c->res.reply));
        return MILTER_DONE;
    }
    c->fd = fd;
    milter_put_macros(&c->mac_data, SMFIC_DATA, mm, nm);
    milter_put_macros(&c->mac_eom, SMFIC_BODYEOB, mm, nm);
    return mc_stage(c, MS_MSG, SMFIC_BODYEOB);
}


struct milter_edits *
milter_chain_edits(struct milter_chain *c)
{
    return &c->edits;
}


void
mc_msg_start(struct mconn *m)
{
    m->mstep = MM_DATA;
    m->hidx = 0;
    m->bpos = 0;
    m->in_msg = 1;
    mm_mark(m->c);
    mc_msg_pump(m);
}


/* mm_send - queue a command; 1 when its reply is awaited now. */
static int
mm_send(struct mconn *m, uint32_t noreply)
{
    if (m->proto & noreply)
        return 0;
    mc_expect(m, m->c->cmdc, m->sp->command_ms);
    return 1;
}


/* mm_blen - the body's length as the current milter is to see it. */
static uint64_t
mm_blen(const struct milter_chain *c)
{
    return c->edits.body_set ? buf_avail(&c->edits.body) : c->body_len;
}


/* mm_body - the next chunk of the body; -1 when the read failed. */
static int
mm_body(struct mconn *m)
{
    struct milter_chain *c = m->c;
    char                 chunk[MILTER_CHUNK_MAX];
    uint64_t             left = mm_blen(c) - m->bpos;
    size_t               want = left < sizeof(chunk) ? (size_t)left :
                             sizeof(chunk);
    ssize_t              r;

    if (c->edits.body_set) {        /* an earlier milter's body */
        milter_put(&m->out, SMFIC_BODY, buf_head(&c->edits.body) + m->bpos,
            want);
        m->bpos += want;
        return 0;
    }
    do
        r = pread(c->fd, chunk, want, (off_t)(c->body_off + m->bpos));
    while (r < 0 && errno == EINTR);
    if (r <= 0)
        return -1;
    milter_put(&m->out, SMFIC_BODY, chunk, (size_t)r);
    m->bpos += (uint64_t)r;
    return 0;
}


/* mm_next - queue the next command of m's message; 1 when a reply is
 * now awaited (or m is done), 0 to go on, -1 on a read failure. */
static int
mm_next(struct mconn *m)
{
    struct milter_chain *c = m->c;
    const char          *hv[2];

    switch (m->mstep) {
    case MM_DATA:
        m->mstep = MM_HDR;
        if ((m->proto & SMFIP_NODATA) || m->data_sent)
            return 0;               /* sent at the DATA command already */
        buf_append(&m->out, c->mac_data.data, c->mac_data.len);
        milter_put(&m->out, SMFIC_DATA, NULL, 0);
        c->cmdc = SMFIC_DATA;
        return mm_send(m, SMFIP_NR_DATA);
    case MM_HDR:
        if ((m->proto & SMFIP_NOHDRS) || m->hidx >= c->nh) {
            m->mstep = MM_EOH;
            return 0;
        }
        hv[0] = c->hname[m->hidx];
        hv[1] = c->hvalue[m->hidx];
        if (!(m->proto & SMFIP_HDR_LEADSPC) && hv[1][0] == ' ')
            hv[1]++;
        m->hidx++;
        milter_put_strs(&m->out, SMFIC_HEADER, hv, 2);
        c->cmdc = SMFIC_HEADER;
        return mm_send(m, SMFIP_NR_HDR);
    case MM_EOH:
        m->mstep = MM_BODY;
        if (m->proto & SMFIP_NOEOH)
            return 0;
        milter_put(&m->out, SMFIC_EOH, NULL, 0);
        c->cmdc = SMFIC_EOH;
        return mm_send(m, SMFIP_NR_EOH);
    case MM_BODY:
        if ((m->proto & SMFIP_NOBODY) || m->bpos >= mm_blen(c)) {
            m->mstep = MM_EOM;
            return 0;
        }
        if (mm_body(m) != 0)
            return -1;
        c->cmdc = SMFIC_BODY;
        return mm_send(m, SMFIP_NR_BODY);
    case MM_EOM:
        m->mstep = MM_DONE;
        buf_append(&m->out, c->mac_eom.data, c->mac_eom.len);
        milter_put(&m->out, SMFIC_BODYEOB, NULL, 0);
        c->cmdc = SMFIC_BODYEOB;
        mc_expect(m, SMFIC_BODYEOB, m->sp->eom_ms);
        return 1;
    default:
        return 1;
    }
}


void
mc_msg_pump(struct mconn *m)
{
    int rc = 0;

    for (;;) {
        while (!m->waiting && m->mstep != MM_DONE &&
            buf_avail(&m->out) < MM_OUT_HIGH && (rc = mm_next(m)) == 0)
            ;
        if (rc < 0) {
            mc_dead(m, "reading the spooled message failed");
            mc_step(m->c);
            return;
        }
        if (mc_flush(m) < 0) {
            mc_step(m->c);
            return;
        }
        /* more to queue once the socket took it: EV_WRITE resumes a
         * full buffer, an emptied one goes on here */
        if (m->waiting || m->mstep == MM_DONE ||
            buf_avail(&m->out) >= MM_OUT_HIGH)
            return;
    }
}


/* mm_name_ok - a header name a milter gave: printable, no colon. */
static int
mm_name_ok(const char *s)
{
    if (*s == '\0' || strlen(s) > 200)
        return 0;
    for (; *s != '\0'; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s > '~' || *s == ':')
            return 0;
    return 1;
}


static void
mm_edit_add(struct milter_chain *c, int kind, uint32_t index,
    const char *name, const char *value)
{
    struct milter_edits *e = &c->edits;

    if (e->n == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 8;
        e->v = xrealloc(e->v, e->cap * sizeof(*e->v));
    }
    e->v[e->n++] = (struct milter_edit){ kind, index, xstrdup(name),
        value != NULL ? xstrdup(value) : NULL };
}


/* mm_hdr_value - the stored value: a space after the colon unless the
 * milter gives its own (SMFIP_HDR_LEADSPC), as Postfix does. */
static int
mm_header_edit(struct mconn *m, const struct milter_reply *r, int kind)
{
    char  *v;
    size_t cost = strlen(r->s1) + strlen(r->s2) + 4;

    if (m->c->edit_bytes + cost > MM_EDIT_BYTES)
        return -1;                  /* memory, and a header section
                                     * rewritten whole, are bounded */
    m->c->edit_bytes += cost;
    if (!mm_name_ok(r->s1)) {
        log_warn("milter %s: bad header name in an edit: ignored; "
            "session=%s", m->sp->name, m->c->sid);
        return 0;
    }
    if (kind == MILTER_CHGHDR && r->s2[0] == '\0') {
        mm_edit_add(m->c, kind, r->index, r->s1, "");
        return 0;
    }
    v = xmalloc(strlen(r->s2) + 2);
    sprintf(v, "%s%s", (m->proto & SMFIP_HDR_LEADSPC) ? "" : " ", r->s2);
    mm_edit_add(m->c, kind, r->index, r->s1, v);
    free(v);
    return 0;
}


/* mm_body_add - a REPLBODY chunk; -1 when the body would be larger, as
 * stored (session_milter.c makes bare LFs CRLF), than the limit. */
static int
mm_body_add(struct milter_chain *c, const uint8_t *p, size_t n)
{
    uint64_t size = c->nbody_size + n;
    size_t   i;

    for (i = 0; i < n; i++)
        if (p[i] == '\n' && !(i > 0 ? p[i - 1] == '\r' : c->nbody_cr))
            size++;
    if (size > c->body_max)
        return -1;
    if (n > 0)
        c->nbody_cr = p[n - 1] == '\r';
    c->nbody_size = size;
    buf_append(&c->nbody, p, n);
    c->nbody_set = 1;
    return 0;
}


/* mm_edit - a modification request at the end of the message: 0 taken
 * (or ignored), -1 a protocol error. */
static int
mm_edit(struct mconn *m, const struct milter_reply *r)
{
    struct milter_chain *c = m->c;
    struct milter_edits *e = &c->edits;
    static const struct { char cmd; uint32_t need; } act[] = {
        { SMFIR_ADDHEADER, SMFIF_ADDHDRS }, { SMFIR_INSHEADER, SMFIF_ADDHDRS },
        { SMFIR_CHGHEADER, SMFIF_CHGHDRS }, { SMFIR_CHGFROM, SMFIF_CHGFROM },
        { SMFIR_ADDRCPT, SMFIF_ADDRCPT }, { SMFIR_ADDRCPT_PAR,
        SMFIF_ADDRCPT_PAR }, { SMFIR_DELRCPT, SMFIF_DELRCPT },
        { SMFIR_REPLBODY, SMFIF_CHGBODY }, { SMFIR_QUARANTINE,
        SMFIF_QUARANTINE }
    };
    size_t i;

    for (i = 0; i < sizeof(act) / sizeof(act[0]); i++)
        if (act[i].cmd == r->cmd)
            break;
    if (i == sizeof(act) / sizeof(act[0]))
        return -1;
    if (!(m->actions & act[i].need)) {
        log_warn("milter %s: edit '%c' not negotiated: ignored; "
            "session=%s", m->sp->name, r->cmd, c->sid);
        return 0;
    }
    if (e->n >= MM_EDITS_MAX)
        return -1;
    switch (r->cmd) {
    case SMFIR_ADDHEADER:
        return mm_header_edit(m, r, MILTER_ADDHDR);
    case SMFIR_INSHEADER:
        return mm_header_edit(m, r, MILTER_INSHDR);
    case SMFIR_CHGHEADER:
        return mm_header_edit(m, r, MILTER_CHGHDR);
    case SMFIR_CHGFROM:
        mm_edit_add(c, MILTER_CHGFROM, 0, r->s1, r->s2);
        break;
    case SMFIR_ADDRCPT:
    case SMFIR_ADDRCPT_PAR:
        mm_edit_add(c, MILTER_ADDRCPT, 0, r->s1, r->s2);
        break;
    case SMFIR_DELRCPT:
        mm_edit_add(c, MILTER_DELRCPT, 0, r->s1, NULL);
        break;
    case SMFIR_REPLBODY:
        return mm_body_add(c, r->data, r->len);
    case SMFIR_QUARANTINE:
        e->quarantine = 1;
        util_escape(e->quarantine_why, sizeof(e->quarantine_why), r->s1,
            strlen(r->s1), 0, NULL);
        break;
    }
    return 0;
}


/* mc_final - a reply that ends a milter's say on the message. */
static int
mc_final(char cmd)
{
    return cmd != '\0' && strchr("rtdy4f", cmd) != NULL;
}


void
mc_msg_reply(struct mconn *m, const struct milter_reply *r)
{
    struct milter_chain *c = m->c;
    char                 why[64];

    if (m->expect == SMFIC_BODYEOB && r->cmd != SMFIR_CONTINUE &&
        r->cmd != SMFIR_ACCEPT && !mc_final(r->cmd)) {
        if (mm_edit(m, r) == 0)
            return;                 /* the final reply comes later */
    } else {
        m->waiting = 0;
        ev_timer_stop(c->loop, &m->timer);
        if (m->expect == SMFIC_BODYEOB &&
            (r->cmd == SMFIR_CONTINUE || r->cmd == SMFIR_ACCEPT)) {
            mm_carry(c);
            mm_keep(c);
            c->cur++;
            mc_step(c);
            return;
        }
        if (r->cmd == SMFIR_CONTINUE ||
            (r->cmd == SMFIR_SKIP && m->mstep == MM_BODY)) {
            if (r->cmd == SMFIR_SKIP)
                m->mstep = MM_EOM;
            mc_msg_pump(m);
            return;
        }
        if (r->cmd == SMFIR_ACCEPT) {
            m->msg_accepted = 1;
            c->cur++;
            mc_step(c);
            return;
        }
        if (mc_common(c, m, r))
            return;
    }
    snprintf(why, sizeof(why), "protocol error (reply '%c' out of place)",
        r->cmd >= 32 && r->cmd < 127 ? r->cmd : '?');
    mc_dead(m, why);
    mc_step(c);
}
