/*
 * milter_edit.c - the header edits of milters applied to a header
 * section, pure (no I/O): add, insert, change and delete, as Postfix's
 * cleanup does them for milter8.
 *
 * RULES     Header names are matched without regard to case; CHGHEADER's
 *           index counts the fields of that name from 1 (0 is taken as 1,
 *           as Sendmail does) and an empty value deletes the field; a
 *           change of a field that is not there adds it at the end.
 *           INSHEADER's index is a position among all fields (0: first);
 *           past the end it appends.  Values keep their folding: the
 *           milter's "\n" (or "\r\n") becomes CRLF, and a continuation
 *           line that does not start with white space gets a tab, so no
 *           value can start a field of its own.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/buf.h"
#include "common/util.h"
#include "milter/milter.h"

struct mhdr {
    const char *p;                  /* the field, CRLF lines */
    size_t      n;
    char       *own;                /* p when made here */
    size_t      nlen;               /* its name's length */
};

struct mhdrs {
    struct mhdr *v;
    size_t       n, cap;
};


static void
mh_insert(struct mhdrs *h, size_t at, const char *p, size_t n, char *own,
    size_t nlen)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 32;
        h->v = xrealloc(h->v, h->cap * sizeof(*h->v));
    }
    if (at > h->n)
        at = h->n;
    memmove(&h->v[at + 1], &h->v[at], (h->n - at) * sizeof(*h->v));
    h->v[at] = (struct mhdr){ p, n, own, nlen };
    h->n++;
}


/* mh_split - the fields of hdr[0..n): a line that starts with white space
 * continues the field before it. */
static void
mh_split(struct mhdrs *h, const char *hdr, size_t n)
{
    size_t i = 0, start, nlen;
    const char *lf, *colon;

    while (i < n) {
        start = i;
        do {
            lf = memchr(hdr + i, '\n', n - i);
            i = lf != NULL ? (size_t)(lf - hdr) + 1 : n;
        } while (i < n && (hdr[i] == ' ' || hdr[i] == '\t'));
        colon = memchr(hdr + start, ':', i - start);
        nlen = colon != NULL ? (size_t)(colon - (hdr + start)) : 0;
        mh_insert(h, h->n, hdr + start, i - start, NULL, nlen);
    }
}


/* mh_blank - b's line from at holds white space only. */
static int
mh_blank(const struct buf *b, size_t at)
{
    for (; at < b->len; at++)
        if (b->data[at] != ' ' && b->data[at] != '\t')
            return 0;
    return 1;
}


/* mh_make - "name:value\r\n" with the value's lines as RULES says; a
 * continuation line of white space only is left out (parsers that trim
 * lines take it for the blank line that ends the header section: what
 * follows would be body, or a header of the milter's own). */
static char *
mh_make(const char *name, const char *value, size_t *len)
{
    struct buf  b;
    const char *v;
    char       *out;
    size_t      line = 0;           /* where the current line starts */

    buf_init(&b);
    buf_append(&b, name, strlen(name));
    buf_append(&b, ":", 1);
    for (v = value; *v != '\0'; v++) {
        if (*v == '\r')
            continue;
        if (*v == '\n') {
            if (line > 0 && mh_blank(&b, line)) {
                b.len = line;       /* the empty line goes */
                continue;
            }
            buf_append(&b, "\r\n", 2);
            line = b.len;
            if (v[1] != ' ' && v[1] != '\t' && v[1] != '\0' &&
                v[1] != '\r' && v[1] != '\n')
                buf_append(&b, "\t", 1);
            continue;
        }
        if (line > 0 && b.len == line && *v != ' ' && *v != '\t')
            buf_append(&b, "\t", 1);   /* after a dropped line */
        buf_append(&b, v, 1);
    }
    if (line > 0 && mh_blank(&b, line))
        b.len = line;               /* a trailing empty line too */
    if (b.len < 2 || memcmp(b.data + b.len - 2, "\r\n", 2) != 0)
        buf_append(&b, "\r\n", 2);
    *len = b.len;
    out = xmalloc(b.len + 1);
    memcpy(out, b.data, b.len);
    out[b.len] = '\0';
    buf_free(&b);
    return out;
}


static int
mh_is(const struct mhdr *f, const char *name)
{
    size_t n = strlen(name);

    return f->nlen == n && strncasecmp(f->p, name, n) == 0;
}


static void
mh_change(struct mhdrs *h, const struct milter_edit *e)
{
    uint32_t want = e->index == 0 ? 1 : e->index, seen = 0;
    size_t   i, len;
    char    *own;

    for (i = 0; i < h->n; i++)
        if (mh_is(&h->v[i], e->name) && ++seen == want)
            break;
    if (i == h->n) {
        if (e->value[0] == '\0')
            return;                 /* nothing to delete */
        own = mh_make(e->name, e->value, &len);
        mh_insert(h, h->n, own, len, own, strlen(e->name));
        return;
    }
    free(h->v[i].own);
    if (e->value[0] == '\0') {
        memmove(&h->v[i], &h->v[i + 1], (h->n - i - 1) * sizeof(*h->v));
        h->n--;
        return;
    }
    own = mh_make(e->name, e->value, &len);
    h->v[i] = (struct mhdr){ own, len, own, strlen(e->name) };
}


void
milter_edit_headers(const char *hdr, size_t n, const struct milter_edits *e,
    struct buf *out)
{
    struct mhdrs h = { NULL, 0, 0 };
    size_t       i, len;
    char        *own;

    mh_split(&h, hdr, n);
    for (i = 0; i < e->n; i++) {
        const struct milter_edit *x = &e->v[i];

        switch (x->kind) {
        case MILTER_ADDHDR:
        case MILTER_INSHDR:
            own = mh_make(x->name, x->value, &len);
            mh_insert(&h, x->kind == MILTER_ADDHDR ? h.n : x->index, own,
                len, own, strlen(x->name));
            break;
        case MILTER_CHGHDR:
            mh_change(&h, x);
            break;
        default:
            break;                  /* envelope edits: not here */
        }
    }
    for (i = 0; i < h.n; i++) {
        buf_append(out, h.v[i].p, h.v[i].n);
        free(h.v[i].own);
    }
    free(h.v);
}


void
milter_edits_free(struct milter_edits *e)
{
    size_t i;

    for (i = 0; i < e->n; i++) {
        free(e->v[i].name);
        free(e->v[i].value);
    }
    free(e->v);
    buf_free(&e->body);
    memset(e, 0, sizeof(*e));
}
