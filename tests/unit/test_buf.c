/*
 * test_buf.c - struct buf: reserve/produce/consume/compact, append and
 * printf growth, getline views (CRLF, bare LF, partial lines, empty lines)
 * and the pool (blocks reused, full buffers not taken back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "common/util.h"
#include "common/buf.h"


Test(buf, init_holds_no_memory)
{
    struct buf b;

    buf_init(&b);
    cr_assert_null(b.data);
    cr_assert_eq(buf_avail(&b), 0);
    cr_assert_eq(buf_room(&b), 0);
    buf_free(&b);
    buf_free(NULL);
}


Test(buf, append_grows_and_keeps_bytes)
{
    struct buf b;
    char       chunk[1000];
    size_t     i;

    buf_init(&b);
    for (i = 0; i < sizeof(chunk); i++)
        chunk[i] = (char)(i * 7);
    for (i = 0; i < 100; i++)
        buf_append(&b, chunk, sizeof(chunk));
    cr_assert_eq(buf_avail(&b), 100 * sizeof(chunk));
    for (i = 0; i < 100; i++)
        cr_assert(memcmp(b.data + i * sizeof(chunk), chunk,
            sizeof(chunk)) == 0, "chunk %zu differs", i);
    buf_free(&b);
}


Test(buf, reserve_compacts_before_growing)
{
    struct buf b;
    char      *before;
    size_t     cap;

    buf_init(&b);
    cr_assert_eq(buf_reserve(&b, 1000), 0);
    cap = b.cap;
    memset(buf_tail(&b), 'x', cap);
    buf_produce(&b, cap);
    buf_consume(&b, cap - 10);
    before = b.data;
    cr_assert_eq(buf_reserve(&b, cap - 10), 0);
    cr_assert_eq(b.cap, cap, "grew instead of compacting");
    cr_assert_eq(b.data, before);
    cr_assert_eq(b.off, 0);
    cr_assert_eq(buf_avail(&b), 10);
    cr_assert_geq(buf_room(&b), cap - 10);
    buf_free(&b);
}


Test(buf, reserve_past_hard_cap_fails)
{
    struct buf b;

    buf_init(&b);
    cr_assert_eq(buf_reserve(&b, (size_t)1 << 40), -1);
    cr_assert_eq(buf_reserve(&b, SIZE_MAX), -1);
    cr_assert_null(b.data);
}


Test(buf, consume_to_empty_rewinds)
{
    struct buf b;

    buf_init(&b);
    buf_append(&b, "hello", 5);
    buf_consume(&b, 3);
    cr_assert_eq(b.off, 3);
    cr_assert_eq(buf_avail(&b), 2);
    buf_consume(&b, 99);            /* clamped */
    cr_assert_eq(b.off, 0);
    cr_assert_eq(b.len, 0);
    buf_free(&b);
}


Test(buf, printf_formats_long_output)
{
    struct buf b;
    char       big[5000];

    buf_init(&b);
    buf_printf(&b, "%d-%s", 42, "x");
    cr_assert_eq(buf_avail(&b), 4);
    cr_assert(memcmp(buf_head(&b), "42-x", 4) == 0);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    buf_printf(&b, "[%s]", big);
    cr_assert_eq(buf_avail(&b), 4 + 2 + sizeof(big) - 1);
    cr_assert_eq(buf_head(&b)[4], '[');
    cr_assert_eq(buf_head(&b)[buf_avail(&b) - 1], ']');
    buf_free(&b);
}


Test(buf, getline_crlf_lf_and_partial)
{
    struct buf b;
    struct str l;
    int        bare;
    const char in[] = "EHLO a\r\nNOOP\n\r\nQUI";

    buf_init(&b);
    buf_append(&b, in, sizeof(in) - 1);
    cr_assert_eq(buf_getline(&b, &l, &bare), 0);
    cr_assert_eq(l.n, 6);
    cr_assert(memcmp(l.p, "EHLO a", 6) == 0);
    cr_assert_eq(bare, 0);
    cr_assert_eq(buf_getline(&b, &l, &bare), 0);
    cr_assert_eq(l.n, 4);
    cr_assert(memcmp(l.p, "NOOP", 4) == 0);
    cr_assert_eq(bare, 1);
    cr_assert_eq(buf_getline(&b, &l, &bare), 0);
    cr_assert_eq(l.n, 0, "empty CRLF line");
    cr_assert_eq(bare, 0);
    cr_assert_eq(buf_getline(&b, &l, &bare), MTA_AGAIN);
    cr_assert_eq(buf_avail(&b), 3);
    buf_append(&b, "T\r\n", 3);
    cr_assert_eq(buf_getline(&b, &l, &bare), 0);
    cr_assert_eq(l.n, 4);
    cr_assert(memcmp(l.p, "QUIT", 4) == 0);
    cr_assert_eq(buf_getline(&b, &l, &bare), MTA_AGAIN);
    buf_free(&b);
}


Test(buf, getline_lone_lf_is_bare_empty_line)
{
    struct buf b;
    struct str l;
    int        bare = 0;

    buf_init(&b);
    buf_append(&b, "\n", 1);
    cr_assert_eq(buf_getline(&b, &l, &bare), 0);
    cr_assert_eq(l.n, 0);
    cr_assert_eq(bare, 1);
    buf_free(&b);
}


Test(buf, getline_keeps_inner_cr)
{
    struct buf b;
    struct str l;
    int        bare;

    buf_init(&b);
    buf_append(&b, "A\rB\r\n", 5);
    cr_assert_eq(buf_getline(&b, &l, &bare), 0);
    cr_assert_eq(l.n, 3);
    cr_assert(memcmp(l.p, "A\rB", 3) == 0);
    cr_assert_eq(bare, 0);
    buf_free(&b);
}


Test(buf, pool_reuses_blocks)
{
    struct buf a, b;
    char      *first;

    buf_init(&a);
    buf_init(&b);
    buf_pool_take(&a);
    cr_assert_not_null(a.data);
    cr_assert_eq(a.cap, BUF_POOL_SIZE);
    first = a.data;
    buf_pool_take(&a);              /* already has one: unchanged */
    cr_assert_eq(a.data, first);
    buf_pool_give(&a);
    cr_assert_null(a.data);
    buf_pool_take(&b);
    cr_assert_eq(b.data, first, "spare block was not reused");
    buf_pool_give(&b);
}


Test(buf, pool_give_keeps_unread_data)
{
    struct buf a;

    buf_init(&a);
    buf_pool_take(&a);
    memcpy(buf_tail(&a), "abc", 3);
    buf_produce(&a, 3);
    buf_pool_give(&a);
    cr_assert_not_null(a.data, "a buffer with data was taken away");
    cr_assert_eq(buf_avail(&a), 3);
    buf_consume(&a, 3);
    buf_pool_give(&a);
    cr_assert_null(a.data);
}


Test(buf, pool_many_blocks_round_trip)
{
    struct buf bs[200];
    size_t     i;

    for (i = 0; i < 200; i++) {
        buf_init(&bs[i]);
        buf_pool_take(&bs[i]);
        memset(bs[i].data, (int)i, BUF_POOL_SIZE);
    }
    for (i = 0; i < 200; i++) {
        cr_assert_eq((unsigned char)bs[i].data[BUF_POOL_SIZE - 1],
            (unsigned char)i);
        buf_pool_give(&bs[i]);
        cr_assert_null(bs[i].data);
    }
}
