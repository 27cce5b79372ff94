/*
 * buf.h - byte buffers with a read cursor, and a per-process pool of large
 * read buffers so that idle sessions hold none.
 *
 * CONTRACT  data[off..len) is valid data; data[len..cap) is free space.
 *           Fields are read-only outside buf.c except through buf_produce()
 *           and buf_consume().  A view returned by buf_getline() is valid
 *           until the next call that changes the buffer.
 * FAILURE   Allocation never fails (xmalloc); buf_reserve() returns -1 only
 *           when the request passes the buffer's hard cap.
 */
#ifndef MTAD_BUF_H
#define MTAD_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct str {
    const char *p;
    size_t      n;
};

struct buf {
    char   *data;
    size_t  off;                    /* read cursor */
    size_t  len;                    /* end of valid data */
    size_t  cap;
};

#define BUF_POOL_SIZE  (128 * 1024) /* one pooled read buffer */

static inline size_t buf_avail(const struct buf *b) { return b->len - b->off; }
static inline char  *buf_head(const struct buf *b) { return b->data + b->off; }
static inline char  *buf_tail(const struct buf *b) { return b->data + b->len; }
static inline size_t buf_room(const struct buf *b) { return b->cap - b->len; }

void    buf_init(struct buf *b);                 /* empty, no memory */
void    buf_free(struct buf *b);                 /* frees data; NULL-safe */
int     buf_reserve(struct buf *b, size_t n);    /* room for n more bytes */
void    buf_produce(struct buf *b, size_t n);    /* n bytes were written at tail */
void    buf_consume(struct buf *b, size_t n);    /* n bytes were read at head */
void    buf_compact(struct buf *b);              /* move data to offset 0 */
void    buf_append(struct buf *b, const void *p, size_t n);
void    buf_printf(struct buf *b, const char *fmt, ...)
            __attribute__((format(printf, 2, 3)));
void    buf_vprintf(struct buf *b, const char *fmt, va_list ap)
            __attribute__((format(printf, 2, 0)));
/* Next CRLF- or LF-terminated line without its terminator; -2 if none yet.
 * *bare_lf is set to 1 when the line ended in LF without CR. */
int     buf_getline(struct buf *b, struct str *line, int *bare_lf);

/* Pool: buf_pool_take() gives b a BUF_POOL_SIZE block if it has none;
 * buf_pool_give() returns an empty buffer's block to the pool.  Pool keeps
 * at most a few spare blocks; the rest are freed. */
void    buf_pool_take(struct buf *b);
void    buf_pool_give(struct buf *b);

#endif /* MTAD_BUF_H */
