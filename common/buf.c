/*
 * buf.c - byte buffers with a read cursor, and the per-process pool of
 * BUF_POOL_SIZE read buffers.
 *
 * PURPOSE   Sessions read straight into buf_tail() and parse views out of
 *           the buffer (buf_getline() returns a view, never a copy).  Idle
 *           sessions hold no buffer: they take a pooled block when data
 *           arrives and give it back when nothing is left to parse.
 * CONTRACT  See buf.h.  buf_reserve() compacts before it grows, and grows
 *           geometrically up to BUF_HARD_CAP.  The pool is process-wide
 *           (one event loop per process, no threads) and keeps at most
 *           BUF_POOL_SPARE blocks; the rest go back to malloc.
 * FAILURE   Allocation aborts on OOM (xmalloc); buf_reserve() returns -1
 *           only past the hard cap.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "common/buf.h"

#define BUF_HARD_CAP    (256u * 1024 * 1024)    /* no buffer grows past this */
#define BUF_MIN_CAP     256
#define BUF_POOL_SPARE  64                      /* spare pooled blocks kept */

static char   *buf_spare[BUF_POOL_SPARE];
static size_t  buf_nspare;


void
buf_init(struct buf *b)
{
    b->data = NULL;
    b->off = b->len = b->cap = 0;
}


void
buf_free(struct buf *b)
{
    if (b == NULL)
        return;
    free(b->data);
    buf_init(b);
}


/* buf_compact - move the unread bytes to offset 0 (one memmove). */
void
buf_compact(struct buf *b)
{
    size_t n = b->len - b->off;

    if (b->off == 0)
        return;
    if (n > 0)
        memmove(b->data, b->data + b->off, n);
    b->off = 0;
    b->len = n;
}


int
buf_reserve(struct buf *b, size_t n)
{
    size_t need, ncap;

    if (b->cap - b->len >= n)
        return 0;
    need = b->len - b->off;
    if (n > BUF_HARD_CAP || need > BUF_HARD_CAP - n)
        return -1;
    need += n;
    /* Compacting is cheaper than growing when the consumed head is what
     * stands in the way. */
    if (b->off > 0 && b->cap >= need) {
        buf_compact(b);
        return 0;
    }
    ncap = b->cap < BUF_MIN_CAP ? BUF_MIN_CAP : b->cap;
    while (ncap < need)
        ncap = ncap > BUF_HARD_CAP / 2 ? BUF_HARD_CAP : ncap * 2;
    buf_compact(b);
    b->data = xrealloc(b->data, ncap);
    b->cap = ncap;
    return 0;
}


void
buf_produce(struct buf *b, size_t n)
{
    b->len += n <= b->cap - b->len ? n : b->cap - b->len;
}


void
buf_consume(struct buf *b, size_t n)
{
    b->off += n <= b->len - b->off ? n : b->len - b->off;
    if (b->off == b->len)
        b->off = b->len = 0;        /* empty: restart at the front, free */
}


void
buf_append(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (buf_reserve(b, n) < 0)
        fatalx("buf_append: %zu bytes over the buffer cap", n);   /* fatal */
    memcpy(b->data + b->len, p, n);
    b->len += n;
}


void
buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list again;
    int     n;

    if (buf_reserve(b, 128) < 0)
        fatalx("buf_printf: buffer cap reached");                 /* fatal */
    va_copy(again, ap);
    n = vsnprintf(buf_tail(b), buf_room(b), fmt, ap);
    if (n >= 0 && (size_t)n >= buf_room(b)) {
        if (buf_reserve(b, (size_t)n + 1) < 0)
            fatalx("buf_printf: buffer cap reached");             /* fatal */
        n = vsnprintf(buf_tail(b), buf_room(b), fmt, again);
    }
    va_end(again);
    if (n >= 0)
        b->len += (size_t)n;
}


void
buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}


int
buf_getline(struct buf *b, struct str *line, int *bare_lf)
{
    char   *head = buf_head(b);
    char   *lf;
    size_t  n;

    if (b->len == b->off)
        return MTA_AGAIN;
    lf = memchr(head, '\n', b->len - b->off);
    if (lf == NULL)
        return MTA_AGAIN;
    n = (size_t)(lf - head);
    *bare_lf = !(n > 0 && head[n - 1] == '\r');
    line->p = head;
    line->n = *bare_lf ? n : n - 1;
    /* Advance the cursor without resetting it, so the view stays valid
     * until the caller changes the buffer again. */
    b->off += n + 1;
    return 0;
}


void
buf_pool_take(struct buf *b)
{
    if (b->data != NULL)
        return;
    b->data = buf_nspare > 0 ? buf_spare[--buf_nspare]
                             : xmalloc(BUF_POOL_SIZE);
    b->cap = BUF_POOL_SIZE;
    b->off = b->len = 0;
}


void
buf_pool_give(struct buf *b)
{
    if (b->data == NULL || b->len != b->off)
        return;                     /* holds data: keep it */
    if (b->cap == BUF_POOL_SIZE && buf_nspare < BUF_POOL_SPARE)
        buf_spare[buf_nspare++] = b->data;
    else
        free(b->data);
    buf_init(b);
}
