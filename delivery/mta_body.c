/*
 * mta_body.c - the message content of an outbound transaction, from the
 * queue file (or the copy spool_keep() left in memory) to the socket:
 * dot-stuffed in one pass for DATA, as it is for BDAT (read into the out
 * buffer, a pooled MTA_BLOCK for a big body, or sendfile() when every
 * block is out), a bounded number of chunks per loop callback.  The
 * conversation around it is mta_session.c; the types are in mta.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/sendfile.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/ev.h"
#include "smtp/smtp.h"
#include "spool/spool.h"
#include "delivery/mta.h"

/* mta_body_start - 354 received (DATA) or RCPTs accepted (BDAT). */
void
mta_body_start(struct mta_conn *c)
{
    c->tx.body_left = c->txn->env->body_size;
    c->tx.body_pos = c->txn->body_off;
    smtp_stuff_init(&c->stuff);
    if (c->tx.bdat) {
        mta_cmd(c, "BDAT %llu LAST", (unsigned long long)c->tx.body_left);
        c->expect--;                        /* counted when the body ends */
    }
    mta_enter(c, C_BODY);
}


/* mta_body_pread - up to want body bytes at c->tx.body_pos into p: from the
 * copy spool_keep() left in memory (a small message on its first
 * attempt: no system call), else from the queue file. */
static ssize_t
mta_body_pread(struct mta_conn *c, void *p, size_t want)
{
    const struct mta_txn *t = c->txn;
    uint64_t              at = (uint64_t)(c->tx.body_pos - t->body_off);

    if (t->env->body_copy != NULL && at <= t->env->body_size) {
        if (want > t->env->body_size - at)
            want = (size_t)(t->env->body_size - at);
        memcpy(p, t->env->body_copy + at, want);
        return (ssize_t)want;
    }
    return pread(t->fd, p, want, c->tx.body_pos);
}


/* mta_body_read - the next chunk of the body from the queue file into the
 * shared chunk buffer: its length, or -1 with lasterr set. */
static ssize_t
mta_body_read(struct mta_conn *c)
{
    size_t  want = c->tx.body_left > MTA_CHUNK ? MTA_CHUNK :
        (size_t)c->tx.body_left;
    ssize_t n = mta_body_pread(c, c->r->chunk, want);

    if (n <= 0) {
        snprintf(c->lasterr, sizeof(c->lasterr),
            "cannot read the queue file: %s",
            n < 0 ? strerror(errno) : "truncated");
        return -1;
    }
    c->tx.body_pos += n;
    c->tx.body_left -= (uint64_t)n;
    return n;
}


/* mta_body_in_memory - a plaintext BDAT body goes from the queue file
 * into the out buffer and leaves with send() (see MTA_BLOCK): a small
 * one in the buffer as it grows, a big one in a pooled block.  0 when
 * every block is out: then sendfile() sends it without memory. */
static int
mta_body_in_memory(struct mta_conn *c)
{
    if (c->out_block ||
        buf_avail(&c->out) + c->tx.body_left <= MTA_BLOCK_SMALL)
        return 1;
    return mta_block_take(c);
}


/* mta_body_fill - the next body bytes from the queue file behind what
 * the out buffer holds, as many as fit (a small body: all of it).
 * 0, or -1 with lasterr set. */
static int
mta_body_fill(struct mta_conn *c)
{
    size_t  want;
    ssize_t n;

    buf_compact(&c->out);
    if (!c->out_block)
        (void)buf_reserve(&c->out, (size_t)c->tx.body_left);
    want = buf_room(&c->out);
    if (want > c->tx.body_left)
        want = (size_t)c->tx.body_left;
    n = mta_body_pread(c, buf_tail(&c->out), want);
    if (n <= 0) {
        snprintf(c->lasterr, sizeof(c->lasterr),
            "cannot read the queue file: %s",
            n < 0 ? strerror(errno) : "truncated");
        return -1;
    }
    buf_produce(&c->out, (size_t)n);
    c->tx.body_pos += n;
    c->tx.body_left -= (uint64_t)n;
    return 0;
}


#define MTA_TOP_UP 4096         /* less than this waits for the next chunk */

/* mta_top_up - a BDAT line (or the tail of a write the socket refused) is
 * not sent alone while body bytes that go through the out buffer remain:
 * the next chunk joins it, so that the line and the chunk go out in one
 * send() (over TLS one record) instead of a segment and a wake-up of the
 * peer each.  Bytes appended behind a refused write keep it the same
 * write (net.h). */
static int
mta_top_up(struct mta_conn *c)
{
    return c->tx.bdat && c->tx.body_left > 0 &&
        buf_avail(&c->out) < MTA_TOP_UP &&
        (c->net.ssl != NULL || mta_body_in_memory(c));
}


/*
 * mta_body_write - move body bytes toward the socket.  DATA: pread a
 * 128 KiB chunk, stuff it into the out buffer, send; BDAT: pread behind
 * the command line into the out buffer (a pooled block for a big body)
 * and send both at once, or, when no block is free, send the line and
 * sendfile() straight from the queue file.  Stops at
 * EAGAIN or after MTA_WRITE_TURNS chunks so one big message does not
 * hold the loop.  Writability is watched only when it has to wait: a
 * body that goes out in one call costs no epoll_ctl() on and off.
 */
int
mta_body_write(struct mta_conn *c)
{
    int turns;

    for (turns = 0; turns < MTA_WRITE_TURNS; turns++) {
        if (buf_avail(&c->out) > 0 && !mta_top_up(c)) {
            if (mta_send_more(c, c->tx.bdat && c->tx.body_left > 0) < 0)
                return -1;
            if (buf_avail(&c->out) > 0) {   /* EAGAIN */
                (void)mta_watch(c, EV_READ | EV_WRITE);
                return 0;
            }
        }
        if (c->tx.body_left == 0) {
            if (!c->tx.bdat) {
                char end[5];
                size_t n = smtp_stuff_end(&c->stuff, end);

                buf_append(&c->out, end, n);
            }
            c->expect++;
            mta_enter(c, C_DOT);
            return mta_flush(c);
        }
        if (c->tx.bdat && c->net.ssl != NULL) {
            /* TLS: the bytes go through OpenSSL, not sendfile() */
            ssize_t n = mta_body_read(c);

            if (n < 0)
                return -1;
            buf_compact(&c->out);
            buf_append(&c->out, c->r->chunk, (size_t)n);
        } else if (c->tx.bdat && mta_body_in_memory(c)) {
            if (mta_body_fill(c) < 0)
                return -1;
        } else if (c->tx.bdat) {
            ssize_t w = sendfile(c->fd, c->txn->fd, &c->tx.body_pos,
                c->tx.body_left > MTA_CHUNK * 4 ? MTA_CHUNK * 4 :
                c->tx.body_left);

            if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                (void)mta_watch(c, EV_READ | EV_WRITE);
                return 0;
            }
            if (w <= 0) {
                snprintf(c->lasterr, sizeof(c->lasterr),
                    "lost connection with %s while sending message "
                    "content: %s", c->name,
                    w < 0 ? strerror(errno) : "queue file truncated");
                return -1;
            }
            c->tx.body_left -= (uint64_t)w;
        } else {
            ssize_t n = mta_body_read(c);

            if (n < 0)
                return -1;
            buf_compact(&c->out);
            (void)buf_reserve(&c->out, SMTP_STUFF_ROOM((size_t)n) + 5);
            buf_produce(&c->out, smtp_stuff(&c->stuff, c->r->chunk,
                (size_t)n, buf_tail(&c->out)));
            if (c->tx.body_left == 0) {
                /* the end of data rides in the same write as the last
                 * chunk: a separate small segment would wait for the
                 * peer's delayed ACK */
                buf_produce(&c->out, smtp_stuff_end(&c->stuff,
                    buf_tail(&c->out)));
                c->expect++;
                mta_enter(c, C_DOT);
                return mta_flush(c);
            }
        }
        mta_arm(c, c->r->t.data_xfer_ms);
    }
    /* turns used up with body left: go on when the socket takes more */
    if (mta_send_more(c, 0) < 0)
        return -1;
    (void)mta_watch(c, EV_READ | EV_WRITE);
    return 0;
}


int
mta_block_take(struct mta_conn *c)
{
    struct mta *r = c->r;
    size_t      n = buf_avail(&c->out);
    char       *b;

    if (c->out_block)
        return 1;
    if (r->nblocks >= MTA_BLOCKS || n > MTA_BLOCK / 2)
        return 0;
    b = r->nblock_spare > 0 ? r->block_spare[--r->nblock_spare]
                            : xmalloc(MTA_BLOCK);
    if (n > 0)                      /* an empty buffer may have no data */
        memcpy(b, buf_head(&c->out), n);
    buf_free(&c->out);
    c->out.data = b;
    c->out.off = 0;
    c->out.len = n;
    c->out.cap = MTA_BLOCK;
    c->out_block = 1;
    r->nblocks++;
    return 1;
}


void
mta_block_give(struct mta_conn *c)
{
    struct mta *r = c->r;

    if (!c->out_block)
        return;
    /* a block that buf_reserve() grew is freed, not pooled */
    if (c->out.cap == MTA_BLOCK && r->nblock_spare < MTA_BLOCK_SPARE)
        r->block_spare[r->nblock_spare++] = c->out.data;
    else
        free(c->out.data);
    buf_init(&c->out);
    c->out_block = 0;
    r->nblocks--;
}
