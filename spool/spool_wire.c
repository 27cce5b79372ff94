/*
 * spool_wire.c - one queued message as a listing record: what
 * `mtactl queue` prints of it, in a length-prefixed binary form that a
 * worker keeps in memory for each message it owns and streams to mtactl.
 *
 * PURPOSE   Summary and listing of a million queued messages without
 *           reading a million files: the worker that owns a message keeps
 *           its record (built here from the envelope it has in memory
 *           anyway) and mtactl decodes it back into a struct spool_env, so
 *           the listing, its filters and the tallies are the same code for
 *           both sources (workers, or the files when mtad is stopped).
 * CONTRACT  See "Listing records" in spool.h for the layout.  The decoder
 *           trusts nothing: every length is checked against the record,
 *           every string must end in its NUL, counts are bounded by the
 *           bytes left; strings point into the caller's buffer (no copy).
 * FAILURE   spool_wire_decode() returns SPOOL_EFORMAT for any record that
 *           is not exactly one well-formed message; nothing is allocated
 *           but the caller's recipient array (grown with xrealloc).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/util.h"
#include "spool/spool.h"

static void
wire_u8(struct buf *b, unsigned v)
{
    unsigned char c = (unsigned char)v;

    buf_append(b, &c, 1);
}


static void
wire_u32(struct buf *b, uint32_t v)
{
    unsigned char c[4];

    for (int i = 0; i < 4; i++)
        c[i] = (unsigned char)(v >> (8 * i));
    buf_append(b, c, 4);
}


static void
wire_u64(struct buf *b, uint64_t v)
{
    unsigned char c[8];

    for (int i = 0; i < 8; i++)
        c[i] = (unsigned char)(v >> (8 * i));
    buf_append(b, c, 8);
}


/* wire_str - NULL as length 0, else the bytes and their NUL. */
static void
wire_str(struct buf *b, const char *s)
{
    size_t n = s != NULL ? strlen(s) + 1 : 0;

    if (n > SPOOL_WIRE_STR_MAX)
        n = 0;                          /* cannot happen: envelope limits */
    wire_u32(b, (uint32_t)n);
    if (n > 0)
        buf_append(b, s, n);
}


void
spool_wire_body(struct buf *b, const struct spool_env *env)
{
    size_t i;

    wire_u8(b, env->held ? 1 : 0);
    wire_u32(b, env->attempts);
    wire_u64(b, env->arrival_ms);
    wire_u64(b, env->next_retry_ms);
    wire_u64(b, env->body_size);
    wire_str(b, env->sender);
    wire_u32(b, (uint32_t)env->nrcpt);
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *r = &env->rcpt[i];

        wire_u8(b, r->status >= SPOOL_RCPT_PENDING &&
            r->status <= SPOOL_RCPT_BOUNCED ? (unsigned)r->status : 0);
        wire_str(b, r->addr);
        wire_str(b, r->relay);
        wire_str(b, r->tls);
        wire_str(b, r->last_reply);
        wire_str(b, r->cls);
    }
}


void
spool_wire_head(struct buf *b, const char *id, unsigned state,
    size_t body_len)
{
    wire_u32(b, (uint32_t)(SPOOL_ID_LEN + 1 + body_len));
    buf_append(b, id, SPOOL_ID_LEN);
    wire_u8(b, state);
}


/* ---- decoding ---------------------------------------------------------- */

struct wire_rd {
    const unsigned char *p;
    size_t               left;
    int                  bad;
};


static uint64_t
rd_uint(struct wire_rd *r, size_t n)
{
    uint64_t v = 0;

    if (r->bad || r->left < n) {
        r->bad = 1;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    r->left -= n;
    return v;
}


/* rd_str - a string in place: NULL for length 0; bad unless it ends in
 * its NUL within the record. */
static char *
rd_str(struct wire_rd *r)
{
    size_t n = (size_t)rd_uint(r, 4);
    char  *s;

    if (r->bad || n == 0)
        return NULL;
    if (n > r->left || n > SPOOL_WIRE_STR_MAX || r->p[n - 1] != '\0') {
        r->bad = 1;
        return NULL;
    }
    s = (char *)(uintptr_t)r->p;
    r->p += n;
    r->left -= n;
    return s;
}


int
spool_wire_decode(const char *p, size_t n, struct spool_env *env,
    unsigned *state, struct spool_rcpt **rcpts, size_t *caprcpt)
{
    struct wire_rd r = { (const unsigned char *)p, n, 0 };
    size_t         nrcpt, i;

    memset(env, 0, sizeof(*env));
    if (n < SPOOL_ID_LEN + 1)
        return SPOOL_EFORMAT;
    memcpy(env->id, p, SPOOL_ID_LEN);
    env->id[SPOOL_ID_LEN] = '\0';
    if (!spool_id_valid(env->id))
        return SPOOL_EFORMAT;
    r.p += SPOOL_ID_LEN;
    r.left -= SPOOL_ID_LEN;
    *state = (unsigned)rd_uint(&r, 1);
    env->held = (int)rd_uint(&r, 1);
    env->attempts = (unsigned)rd_uint(&r, 4);
    env->arrival_ms = rd_uint(&r, 8);
    env->next_retry_ms = rd_uint(&r, 8);
    env->body_size = rd_uint(&r, 8);
    env->sender = rd_str(&r);
    nrcpt = (size_t)rd_uint(&r, 4);
    /* a recipient takes at least 21 bytes: bounds the array by the data */
    if (r.bad || *state > 3 || env->held > 1 || env->sender == NULL ||
        nrcpt > r.left / 21)
        return SPOOL_EFORMAT;
    if (nrcpt > *caprcpt) {
        *rcpts = xrealloc(*rcpts, nrcpt * sizeof(**rcpts));
        *caprcpt = nrcpt;
    }
    for (i = 0; i < nrcpt; i++) {
        struct spool_rcpt *rc = &(*rcpts)[i];

        memset(rc, 0, sizeof(*rc));
        rc->status = (int)rd_uint(&r, 1);
        rc->addr = rd_str(&r);
        rc->relay = rd_str(&r);
        rc->tls = rd_str(&r);
        rc->last_reply = rd_str(&r);
        rc->cls = rd_str(&r);
        if (r.bad || rc->addr == NULL || rc->status > SPOOL_RCPT_BOUNCED)
            return SPOOL_EFORMAT;
    }
    if (r.left != 0)
        return SPOOL_EFORMAT;
    env->rcpt = nrcpt > 0 ? *rcpts : NULL;
    env->nrcpt = nrcpt;
    return SPOOL_OK;
}
