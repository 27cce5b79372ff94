/*
 * fuzz_milter.c - libFuzzer target over what a milter sends
 * (milter/milter_codec.c, milter_edit.c): the packet framing, every reply
 * parsed, the SMTP reply text made of a REPLYCODE, and the header edits
 * of the parsed replies applied to a header section.
 *
 * Input: byte 0 splits the rest: the first (byte 0 * 8) bytes are a
 * header section (CRLF lines), the rest a stream of milter packets.
 *
 * Checks: a frame never claims more than the input holds and is at least
 * 5 bytes; a parsed string ends inside its packet; a reply text is
 * "ddd " with a 4xx/5xx code and no control byte; the edited header
 * section is CRLF lines in which every line but a field's first starts
 * with white space unless it came from the input as such (a value can
 * never start a field of its own).
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/util.h"
#include "milter/milter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_text(const char *s)
{
    char   out[512];
    size_t i;

    if (milter_reply_text(s, 0, out, sizeof(out)) != 0)
        return;
    if ((out[0] != '4' && out[0] != '5') || out[3] != ' ')
        abort();
    for (i = 0; out[i] != '\0'; i++)
        if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
            abort();
}


/* fuzz_within - s, a parsed string, lies in p[0..n) with its NUL. */
static void
fuzz_within(const char *s, const struct milter_pkt *p)
{
    const uint8_t *b = (const uint8_t *)s;

    if (s == NULL)
        return;
    if (b < p->data || b >= p->data + p->len ||
        memchr(b, '\0', (size_t)(p->data + p->len - b)) == NULL)
        abort();
}


/* fuzz_lines - out is CRLF lines (no bare CR or LF), each a field of
 * one of e's names or a continuation. */
static void
fuzz_lines(const struct buf *out, const struct milter_edits *e)
{
    size_t i, start = 0, k, n;

    if (out->len > 0 && (out->len < 2 || out->data[out->len - 1] != '\n'))
        abort();
    for (i = 0; i < out->len; i++) {
        if (out->data[i] == '\r' && (i + 1 >= out->len ||
            out->data[i + 1] != '\n'))
            abort();
        if (out->data[i] != '\n')
            continue;
        if (i == 0 || out->data[i - 1] != '\r')
            abort();
        if (out->data[start] != ' ' && out->data[start] != '\t') {
            for (k = 0; k < e->n; k++) {
                n = strlen(e->v[k].name);
                if (i - start > n && memcmp(out->data + start,
                    e->v[k].name, n) == 0 && out->data[start + n] == ':')
                    break;
            }
            if (k == e->n)
                abort();
        }
        start = i + 1;
    }
}


/* fuzz_name_ok - a name milter_msg.c would take (printable, no colon) */
static int
fuzz_name_ok(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s != '\0'; s++)
        if ((unsigned char)*s <= ' ' || (unsigned char)*s > '~' || *s == ':')
            return 0;
    return 1;
}


static void
fuzz_edit(struct milter_edits *e, const struct milter_reply *r)
{
    int kind;

    if (r->cmd == SMFIR_ADDHEADER)
        kind = MILTER_ADDHDR;
    else if (r->cmd == SMFIR_INSHEADER)
        kind = MILTER_INSHDR;
    else if (r->cmd == SMFIR_CHGHEADER)
        kind = MILTER_CHGHDR;
    else
        return;
    if (!fuzz_name_ok(r->s1) || e->n >= 64)
        return;
    if (e->n == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 8;
        e->v = xrealloc(e->v, e->cap * sizeof(*e->v));
    }
    e->v[e->n++] = (struct milter_edit){ kind, r->index, xstrdup(r->s1),
        xstrdup(r->s2) };
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct milter_edits e;
    struct milter_pkt   p;
    struct milter_reply r;
    struct buf          out;
    size_t              hlen, off, used;
    int                 rc;

    if (size < 1)
        return 0;
    hlen = (size_t)data[0] * 8;
    if (hlen > size - 1)
        hlen = size - 1;
    memset(&e, 0, sizeof(e));
    for (off = 1 + hlen; off < size; off += used) {
        rc = milter_frame(data + off, size - off, &p, &used);
        if (rc <= 0)
            break;
        if (used < 5 || used > size - off)
            abort();
        if (milter_reply_parse(&p, &r) != 0)
            continue;
        fuzz_within(r.s1, &p);
        fuzz_within(r.s2, &p);
        if (r.cmd == SMFIR_REPLYCODE)
            fuzz_text(r.s1);
        fuzz_edit(&e, &r);
    }
    buf_init(&out);
    milter_edit_headers((const char *)data + 1, hlen, &e, &out);
    buf_free(&out);
    /* the edits alone, on an empty section: every line starts a field
     * named by an edit, or continues one (white space first) */
    buf_init(&out);
    milter_edit_headers("", 0, &e, &out);
    fuzz_lines(&out, &e);
    buf_free(&out);
    milter_edits_free(&e);
    return 0;
}
