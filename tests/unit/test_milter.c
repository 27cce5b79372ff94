/*
 * test_milter.c - the milter wire codec and header editor (milter/
 * milter_codec.c, milter_edit.c): framing by every prefix, each reply's
 * fields, malformed replies refused, REPLYCODE texts made safe SMTP
 * replies, commands as libmilter reads them, and the header edits
 * (add, insert, change, delete, by name and index, folding kept safe).
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "common/buf.h"
#include "common/util.h"
#include "milter/milter.h"

/* pkt - one packet cmd + data[0..n) into b (b->data: its bytes). */
static void
pkt(struct buf *b, char cmd, const void *data, size_t n)
{
    milter_put(b, cmd, data, n);
}


Test(milter, frame_by_every_prefix)
{
    struct buf        b;
    struct milter_pkt p;
    size_t            used, k;

    buf_init(&b);
    pkt(&b, 'y', "550 5.7.1 no\0", 13);
    for (k = 0; k < b.len; k++)
        cr_assert_eq(milter_frame((uint8_t *)b.data, k, &p, &used), 0);
    cr_assert_eq(milter_frame((uint8_t *)b.data, b.len, &p, &used), 1);
    cr_assert_eq(used, b.len);
    cr_assert_eq(p.cmd, 'y');
    cr_assert_eq(p.len, 13);
    buf_free(&b);
    cr_assert_eq(milter_frame((const uint8_t *)"\0\0\0\0x", 5, &p, &used),
        -1);
    cr_assert_eq(milter_frame((const uint8_t *)"\x7f\0\0\0x", 5, &p, &used),
        -1);
}


static int
parse(const char *raw, size_t n, struct milter_reply *r)
{
    struct milter_pkt p = { raw[0], (const uint8_t *)raw + 1, n - 1 };

    return milter_reply_parse(&p, r);
}


Test(milter, replies)
{
    struct milter_reply r;

    cr_assert_eq(parse("m\0\0\0\2Subject\0new\0", 18, &r), 0);
    cr_assert_eq(r.index, 2);
    cr_assert_str_eq(r.s1, "Subject");
    cr_assert_str_eq(r.s2, "new");
    cr_assert_eq(parse("hX-A\0v\0", 7, &r), 0);
    cr_assert_str_eq(r.s2, "v");
    cr_assert_eq(parse("e<a@b>\0", 7, &r), 0);
    cr_assert_null(r.s2);
    cr_assert_eq(parse("O\0\0\0\6\0\0\1\xff\0\0\0\1", 13, &r), 0);
    cr_assert_eq(r.ver, 6);
    cr_assert_eq(r.actions, 0x1ff);
    cr_assert_eq(r.proto, 1);
    /* malformed: a string without its NUL, a short index, unknown */
    cr_assert_eq(parse("hX-A\0v", 6, &r), -1);
    cr_assert_eq(parse("m\0\0", 3, &r), -1);
    cr_assert_eq(parse("y550 no", 7, &r), -1);
    cr_assert_eq(parse("Z", 1, &r), -1);
    cr_assert_eq(parse("O\0\0\0\6", 5, &r), -1);
}


Test(milter, reply_text)
{
    char out[128];

    cr_assert_eq(milter_reply_text("550 5.7.1 no", 0, out, sizeof(out)), 0);
    cr_assert_str_eq(out, "550 5.7.1 no");
    cr_assert_eq(milter_reply_text("451-4.7.1 a\r\n451 4.7.1 b", '4', out,
        sizeof(out)), 0);
    cr_assert_str_eq(out, "451 4.7.1 a b");
    cr_assert_eq(milter_reply_text("550 bad\x1b[0m", 0, out, sizeof(out)),
        0);
    cr_assert_str_eq(out, "550 bad\\x1b[0m");
    cr_assert_eq(milter_reply_text("250 ok", 0, out, sizeof(out)), -1);
    cr_assert_eq(milter_reply_text("55", 0, out, sizeof(out)), -1);
    cr_assert_eq(milter_reply_text("550 x", '4', out, sizeof(out)), -1);
}


Test(milter, commands)
{
    struct buf  b;
    const char *s[2] = { "<a@b>", "SIZE=10" };

    buf_init(&b);
    milter_put_strs(&b, SMFIC_MAIL, s, 2);
    cr_assert_eq(b.len, 4 + 1 + 6 + 8);
    cr_assert_eq(memcmp(b.data, "\0\0\0\x0f" "M<a@b>\0SIZE=10\0", b.len), 0);
    b.len = 0;
    milter_put_connect(&b, "host", 4, 25, "1.2.3.4");
    cr_assert_eq(memcmp(b.data + 4, "Chost\0" "4\0\x19" "1.2.3.4\0", 17),
        0);
    b.len = 0;
    {
        struct milter_macro m[2] = { { "j", "mx" }, { "{i}", NULL } };

        milter_put_macros(&b, SMFIC_EOH, m, 2);
        cr_assert_eq(memcmp(b.data, "\0\0\0\x07" "DNj\0mx\0", 11), 0);
    }
    buf_free(&b);
}


static void
edit(struct milter_edits *e, int kind, uint32_t index, const char *name,
    const char *value)
{
    e->v = xrealloc(e->v, (e->n + 1) * sizeof(*e->v));
    e->v[e->n++] = (struct milter_edit){ kind, index, xstrdup(name),
        xstrdup(value) };
}


Test(milter, header_edits)
{
    static const char in[] = "Received: x\r\n\ty\r\nSubject: a\r\n"
        "X-A: 1\r\nx-a: 2\r\n";
    struct milter_edits e;
    struct buf          out;

    memset(&e, 0, sizeof(e));
    edit(&e, MILTER_ADDHDR, 0, "X-End", " z");
    edit(&e, MILTER_INSHDR, 0, "X-Top", " t");
    edit(&e, MILTER_CHGHDR, 2, "X-A", "");          /* the second, any case */
    edit(&e, MILTER_CHGHDR, 1, "Subject", " b\nfolded");
    edit(&e, MILTER_CHGHDR, 1, "X-None", "");       /* nothing to delete */
    edit(&e, MILTER_CHGHDR, 3, "X-A", " new");      /* none: added */
    edit(&e, MILTER_INSHDR, 99, "X-Far", " f");     /* past the end */
    buf_init(&out);
    milter_edit_headers(in, strlen(in), &e, &out);
    buf_append(&out, "", 1);
    cr_assert_str_eq(out.data, "X-Top: t\r\nReceived: x\r\n\ty\r\n"
        "Subject: b\r\n\tfolded\r\nX-A: 1\r\nX-End: z\r\nX-A: new\r\n"
        "X-Far: f\r\n");
    buf_free(&out);
    milter_edits_free(&e);
}


Test(milter, header_edit_without_blank_lines)
{
    /* a value whose lines are empty or white space only: no line of the
     * header section may be (a trimming parser ends the section there) */
    static const char *const v[] = {
        " a\n\nBcc: x@evil", " a\n \t\r\n\tb", " a\n\n", " a\r\n \r\n",
        " \n\n\nX-Evil: 1\n\n"
    };
    static const char *const want[] = {
        "X: a\r\n\tBcc: x@evil\r\n", "X: a\r\n\tb\r\n", "X: a\r\n",
        "X: a\r\n", "X: \r\n\tX-Evil: 1\r\n"
    };
    size_t i;

    for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        struct milter_edits e;
        struct buf          out;

        memset(&e, 0, sizeof(e));
        edit(&e, MILTER_ADDHDR, 0, "X", v[i]);
        buf_init(&out);
        milter_edit_headers("", 0, &e, &out);
        buf_append(&out, "", 1);
        cr_assert_str_eq(out.data, want[i], "value %zu", i);
        buf_free(&out);
        milter_edits_free(&e);
    }
}
