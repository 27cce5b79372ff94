/*
 * test_spool_wire.c - unit tests for the listing records of spool_wire.c:
 * what a worker streams to mtactl, which may run as root and
 * must not trust it.  A record survives the round trip field by field;
 * every truncation, a string without its NUL, a count larger than the
 * bytes behind it, a bad id or state, and trailing bytes are refused.
 * The index file a worker saves at a clean stop (spool_index.c) comes back
 * whole, once, and only with its magic.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "common/buf.h"
#include "spool/spool.h"

static struct spool_rcpt t_rc[3];

/* t_env - a message with three recipients in every status. */
static void
t_env(struct spool_env *e)
{
    memset(e, 0, sizeof(*e));
    memset(t_rc, 0, sizeof(t_rc));
    memcpy(e->id, "1A2B3C4D5E6F7A8B", SPOOL_ID_SIZE);
    e->sender = (char *)"alice@example.org";
    e->arrival_ms = 1700000000123ULL;
    e->next_retry_ms = 1700000360000ULL;
    e->body_size = 4242;
    e->attempts = 3;
    e->held = 1;
    e->rcpt = t_rc;
    e->nrcpt = 3;
    t_rc[0].addr = (char *)"x@far.example";
    t_rc[0].last_reply = (char *)"451 4.7.1 try later\x1b[2J";
    t_rc[0].relay = (char *)"mx.far.example[192.0.2.1]:25";
    t_rc[0].tls = (char *)"tls=none";
    t_rc[0].cls = (char *)"rate_limited";
    t_rc[1].addr = (char *)"y@far.example";
    t_rc[1].status = SPOOL_RCPT_SENT;
    t_rc[2].addr = (char *)"local";
    t_rc[2].status = SPOOL_RCPT_BOUNCED;
    t_rc[2].last_reply = (char *)"550 no";
}


/* t_record - e as a whole record, without its u32 length. */
static void
t_record(const struct spool_env *e, unsigned state, struct buf *rec)
{
    struct buf body;

    buf_init(&body);
    buf_init(rec);
    spool_wire_body(&body, e);
    spool_wire_head(rec, e->id, state, buf_avail(&body));
    buf_append(rec, buf_head(&body), buf_avail(&body));
    buf_free(&body);
    cr_assert_eq((unsigned char)rec->data[0] |
        (unsigned char)rec->data[1] << 8, (int)buf_avail(rec) - 4);
    buf_consume(rec, 4);
}


static int
t_decode(const char *p, size_t n)
{
    struct spool_env   e;
    struct spool_rcpt *r = NULL;
    size_t             cap = 0;
    unsigned           st;
    char              *copy = malloc(n ? n : 1);    /* exact: ASan */
    int                rc;

    memcpy(copy, p, n);
    rc = spool_wire_decode(copy, n, &e, &st, &r, &cap);
    free(r);
    free(copy);
    return rc;
}


Test(spool_wire, round_trip)
{
    struct spool_env   e, d;
    struct spool_rcpt *r = NULL;
    struct buf         rec;
    size_t             cap = 0;
    unsigned           st = 9;

    t_env(&e);
    t_record(&e, 2, &rec);
    cr_assert_eq(spool_wire_decode(buf_head(&rec), buf_avail(&rec), &d, &st,
        &r, &cap), SPOOL_OK);
    cr_assert_eq(st, 2);
    cr_assert_str_eq(d.id, e.id);
    cr_assert_str_eq(d.sender, e.sender);
    cr_assert_eq(d.arrival_ms, e.arrival_ms);
    cr_assert_eq(d.next_retry_ms, e.next_retry_ms);
    cr_assert_eq(d.body_size, e.body_size);
    cr_assert_eq(d.attempts, 3);
    cr_assert_eq(d.held, 1);
    cr_assert_eq(d.nrcpt, 3);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_str_eq(d.rcpt[i].addr, e.rcpt[i].addr);
        cr_assert_eq(d.rcpt[i].status, e.rcpt[i].status);
    }
    cr_assert_str_eq(d.rcpt[0].last_reply, t_rc[0].last_reply);
    cr_assert_str_eq(d.rcpt[0].relay, t_rc[0].relay);
    cr_assert_str_eq(d.rcpt[0].tls, t_rc[0].tls);
    cr_assert_str_eq(d.rcpt[0].cls, "rate_limited");
    cr_assert_null(d.rcpt[1].cls);
    cr_assert_null(d.rcpt[1].last_reply);
    cr_assert_null(d.rcpt[1].relay);
    cr_assert_null(d.rcpt[2].tls);
    free(r);
    buf_free(&rec);
}


Test(spool_wire, no_recipients_and_null_sender)
{
    struct spool_env e;
    struct buf       rec;

    t_env(&e);
    e.nrcpt = 0;
    e.sender = (char *)"";
    t_record(&e, 0, &rec);
    cr_assert_eq(t_decode(buf_head(&rec), buf_avail(&rec)), SPOOL_OK);
    buf_free(&rec);
}


Test(spool_wire, every_truncation_and_extra_byte_refused)
{
    struct spool_env e;
    struct buf       rec;
    size_t           n;
    char            *more;

    t_env(&e);
    t_record(&e, 1, &rec);
    n = buf_avail(&rec);
    for (size_t k = 0; k < n; k++)
        cr_assert_eq(t_decode(buf_head(&rec), k), SPOOL_EFORMAT, "len %zu", k);
    more = malloc(n + 1);
    memcpy(more, buf_head(&rec), n);
    more[n] = 'x';
    cr_assert_eq(t_decode(more, n + 1), SPOOL_EFORMAT);
    free(more);
    buf_free(&rec);
}


Test(spool_wire, bad_fields_refused)
{
    struct spool_env e;
    struct buf       rec;
    char            *p;
    size_t           n, sender_len_at = 16 + 1 + 1 + 4 + 8 + 8 + 8;
    size_t           nrcpt_at;

    t_env(&e);
    t_record(&e, 3, &rec);
    n = buf_avail(&rec);
    p = malloc(n);
    nrcpt_at = sender_len_at + 4 + strlen(e.sender) + 1;

    memcpy(p, buf_head(&rec), n);
    p[0] = 'G';                                 /* not an id */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    p[16] = 4;                                  /* no such state */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    p[17] = 2;                                  /* held is 0 or 1 */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    p[nrcpt_at - 1] = 'x';                      /* sender without its NUL */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    p[sender_len_at + 3] = 0x7f;                /* sender longer than all */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    memset(p + nrcpt_at, 0xff, 4);              /* 4 billion recipients */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    p[nrcpt_at] = 2;                            /* fewer than there are */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    p[nrcpt_at + 4] = 3;                        /* no such rcpt status */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    memset(p + nrcpt_at + 5, 0, 4);             /* an address is required */
    cr_assert_eq(t_decode(p, n), SPOOL_EFORMAT);

    memcpy(p, buf_head(&rec), n);
    cr_assert_eq(t_decode(p, n), SPOOL_OK);     /* the copy itself is fine */
    free(p);
    buf_free(&rec);
}


/* ---- the saved index (spool_index.c) ------------------------------------ */

struct t_chunks {
    int n;
};


static int
t_next(void *arg, const void **p, size_t *n)
{
    struct t_chunks *c = arg;
    static const char *const parts[] = { "first ", "second" };

    if (c->n == 2)
        return 0;
    *p = parts[c->n];
    *n = strlen(parts[c->n]);
    c->n++;
    return 1;
}


Test(spool_index, saved_taken_once_and_checked)
{
    char            tmpl[] = "/tmp/mtad-index-test-XXXXXX", path[512];
    char           *dir = mkdtemp(tmpl), *data = NULL;
    struct spool   *sp = NULL;
    struct t_chunks c = { 0 };
    size_t          len = 0;
    FILE           *f;

    cr_assert_not_null(dir);
    cr_assert_eq(spool_prepare(dir, (uid_t)-1, (gid_t)-1), SPOOL_OK);
    cr_assert_eq(spool_open(&sp, dir, 0, 3), SPOOL_OK);
    cr_assert_eq(spool_index_take(sp, 3, &data, &len), SPOOL_ENOENT);
    cr_assert_eq(spool_index_save(sp, 3, t_next, &c), SPOOL_OK);
    snprintf(path, sizeof(path), "%s/state/index-03", dir);
    cr_assert_eq(access(path, F_OK), 0);
    cr_assert_eq(spool_index_take(sp, 3, &data, &len), SPOOL_OK);
    cr_assert_eq(len, strlen(SPOOL_INDEX_MAGIC "first second"));
    cr_assert_eq(memcmp(data, SPOOL_INDEX_MAGIC "first second", len), 0);
    free(data);
    cr_assert_neq(access(path, F_OK), 0, "taken: removed");
    cr_assert_eq(spool_index_take(sp, 3, &data, &len), SPOOL_ENOENT);

    /* anything else at that name: refused, and removed all the same */
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("not an index\n", f);
    fclose(f);
    cr_assert_eq(spool_index_take(sp, 3, &data, &len), SPOOL_EFORMAT);
    cr_assert_null(data);
    cr_assert_neq(access(path, F_OK), 0);
    /* a shard from `from` up: pruned; one below it stays */
    c.n = 0;
    cr_assert_eq(spool_index_save(sp, 3, t_next, &c), SPOOL_OK);
    c.n = 0;
    cr_assert_eq(spool_index_save(sp, 0xff, t_next, &c), SPOOL_OK);
    cr_assert_eq(spool_index_prune(sp, 4), 1);
    cr_assert_eq(access(path, F_OK), 0);
    cr_assert_eq(spool_index_prune(sp, 3), 1);
    cr_assert_neq(access(path, F_OK), 0);
    cr_assert_eq(spool_index_prune(sp, 0), 0);
    /* the master's start leaves a saved index alone (not a dot-name) */
    c.n = 0;
    cr_assert_eq(spool_index_save(sp, 3, t_next, &c), SPOOL_OK);
    spool_close(sp);
    cr_assert_eq(spool_prepare_tree(dir, (uid_t)-1, (gid_t)-1), SPOOL_OK);
    cr_assert_eq(access(path, F_OK), 0);
    cr_assert_eq(unlink(path), 0);
    for (int i = 0; i < 4; i++) {
        static const char *const sub[] = { "tmp", "queue", "state",
            "events" };

        snprintf(path, sizeof(path), "%s/%s", dir, sub[i]);
        cr_assert_eq(rmdir(path), 0, "%s", path);
    }
    cr_assert_eq(rmdir(dir), 0);
}
