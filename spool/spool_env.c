/*
 * spool_env.c - the spool's text formats: the envelope at the head of every
 * queue file, the delivery state in state/<id>, and queue id syntax.
 *
 * CONTRACT  Pure functions over byte arrays (no fds), so the formats are
 *           tested without a file system.  Every line is a key followed by
 *           a fixed number of fields, each after exactly one SP.  Free-form
 *           values are xtext (RFC 3461: bytes outside 0x21-0x7e, '+' and
 *           '=' become "+XX"), so no byte of an address, HELO or reply can
 *           start a line or a field; a lone "+" (never valid xtext) stands
 *           for NULL.  Layout:
 *             MTAD-SPOOL 1
 *             size <20 digits>            body bytes after "end\n"
 *             id <16 hex>
 *             arrival <ms>
 *             sender <xtext>              empty for <>
 *             body 7BIT|8BITMIME|BINARYMIME
 *             smtputf8 0|1
 *             ret NONE|FULL|HDRS
 *             envid <xtext|+>
 *             client <ip xtext|+> <port>
 *             helo <xtext|+>
 *             rcpts <n>
 *             rcpt <notify bits> <addr xtext> <orcpt xtext|+>   (n times)
 *             tlsreq REQUIRETLS|NO        optional, see below
 *             auth <xtext>                optional: the AUTH login that
 *                                         sent it (queue quotas per user)
 *             end
 *           then the body.  state/<id> (written whole, renamed into place):
 *             MTAD-STATE 1                or 2, 3, 4, 5, see below
 *             id <16 hex>
 *             next_retry <ms>
 *             attempts <n>
 *             held 0|1
 *             rcpts <n>                   must equal the envelope's
 *             rcpt PENDING|SENT|BOUNCED|NOTIFIED|DELAYED <relay xtext|+>
 *                  <reply xtext|+> [<tls xtext|+>]   (tls: version 3-5)
 *                  [<class xtext|+>]                 (class: version 5)
 *             end
 *           tlsreq (RFC 8689) is written only when set: REQUIRETLS for
 *           MAIL ... REQUIRETLS, NO for a "TLS-Required: No" field in the
 *           content (smtpd adds that line while the message streams in,
 *           spool_mark_tls_optional()).  A file without it (every file
 *           before it existed) reads as neither, and a file of a message
 *           without either is still read by a reader that predates it.
 *           NOTIFIED is BOUNCED with its DSN already queued (rcpt->notified);
 *           it exists only in version 2, which is written only when some
 *           recipient is NOTIFIED, so an older reader still reads every
 *           other state file, and a version-1 file never holds NOTIFIED.
 *           Version 3 (a superset of 2) gives every rcpt line a fourth
 *           field, the TLS of the last attempt; it is written only when a
 *           recipient has one (an SMTP attempt was made).
 *           Version 4 (a superset of 3) adds DELAYED, PENDING with its
 *           NOTIFY=DELAY warning queued (rcpt->delay_warned); it is
 *           written only when some recipient is DELAYED, so every other
 *           file stays readable by a reader of versions 1-3.
 *           Version 5 (a superset of 4) gives every rcpt line a fifth
 *           field, the bounce class of the last attempt when it failed
 *           (bclass/bclass.h: "rate_limited"); it is written only when a
 *           recipient has one, so a file without stays readable by a
 *           reader of versions 1-4, and every older file reads as having
 *           no class.
 * FAILURE   Parsers are strict: an unknown, repeated or missing key, a bad
 *           number, a non-canonical xtext or a missing line end gives
 *           SPOOL_EFORMAT.  Allocation never fails (xmalloc).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

#define SPOOL_MAX_FIELDS  5
#define SPOOL_MIN_RCPT_LINE (sizeof("rcpt 0  +\n") - 1)

/* Output cursor for the two-pass renderers: p NULL only counts. */
struct spool_out {
    char   *p;
    size_t  n;
};

struct spool_field {
    const char *p;
    size_t      n;
};

static const char *const spool_body_names[] = { "7BIT", "8BITMIME",
    "BINARYMIME" };
static const char *const spool_ret_names[] = { "NONE", "FULL", "HDRS" };
static const char *const spool_status_names[] = { "PENDING", "SENT",
    "BOUNCED", "NOTIFIED", "DELAYED" };
#define SPOOL_STATUS_NOTIFIED 3         /* word index: BOUNCED + notified */
#define SPOOL_STATUS_DELAYED  4         /* PENDING + delay_warned */


/* spool_put - append n bytes (or count them). */
static void
spool_put(struct spool_out *o, const char *s, size_t n)
{
    if (o->p != NULL)
        memcpy(o->p + o->n, s, n);
    o->n += n;
}


static void
spool_puts(struct spool_out *o, const char *s)
{
    spool_put(o, s, strlen(s));
}


static void
spool_put_u64(struct spool_out *o, uint64_t v)
{
    char    tmp[24];
    size_t  i = sizeof(tmp);

    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    spool_put(o, tmp + i, sizeof(tmp) - i);
}


/* spool_put_xtext - " " then the value as xtext, or " +" for NULL. */
static void
spool_put_xtext(struct spool_out *o, const char *s)
{
    char    stack[1024], *enc = stack;
    size_t  need;

    spool_put(o, " ", 1);
    if (s == NULL) {
        spool_put(o, "+", 1);
        return;
    }
    need = smtp_xtext_len(s) + 1;
    if (need > sizeof(stack))
        enc = xmalloc(need);
    (void)smtp_xtext_encode(s, enc, need);
    spool_put(o, enc, need - 1);
    if (enc != stack)
        free(enc);
}


void
spool_size_digits(char *dst, uint64_t v)
{
    int i;

    for (i = SPOOL_SIZE_WIDTH - 1; i >= 0; i--) {
        dst[i] = (char)('0' + v % 10);
        v /= 10;
    }
}


size_t
spool_env_render(const struct spool_env *env, char *dst)
{
    struct spool_out o = { dst, 0 };
    char             digits[SPOOL_SIZE_WIDTH];
    size_t           i;
    unsigned         body = (unsigned)env->body, ret = (unsigned)env->ret;

    spool_size_digits(digits, env->body_size);
    spool_puts(&o, SPOOL_MAGIC "size ");
    spool_put(&o, digits, sizeof(digits));
    spool_puts(&o, "\nid ");
    spool_put(&o, env->id, strnlen(env->id, SPOOL_ID_LEN));
    spool_puts(&o, "\narrival ");
    spool_put_u64(&o, env->arrival_ms);
    spool_puts(&o, "\nsender");
    spool_put_xtext(&o, env->sender != NULL ? env->sender : "");
    spool_puts(&o, "\nbody ");
    spool_puts(&o, spool_body_names[body < 3 ? body : 0]);
    spool_puts(&o, env->smtputf8 ? "\nsmtputf8 1\nret " : "\nsmtputf8 0\nret ");
    spool_puts(&o, spool_ret_names[ret < 3 ? ret : 0]);
    spool_puts(&o, "\nenvid");
    spool_put_xtext(&o, env->envid);
    spool_puts(&o, "\nclient");
    spool_put_xtext(&o, env->client_ip);
    spool_puts(&o, " ");
    spool_put_u64(&o, env->client_port);
    spool_puts(&o, "\nhelo");
    spool_put_xtext(&o, env->helo);
    spool_puts(&o, "\nrcpts ");
    spool_put_u64(&o, env->nrcpt);
    spool_puts(&o, "\n");
    for (i = 0; i < env->nrcpt; i++) {
        spool_puts(&o, "rcpt ");
        spool_put_u64(&o, env->rcpt[i].notify);
        spool_put_xtext(&o, env->rcpt[i].addr != NULL ?
            env->rcpt[i].addr : "");
        spool_put_xtext(&o, env->rcpt[i].orcpt);
        spool_puts(&o, "\n");
    }
    if (env->requiretls)
        spool_puts(&o, SPOOL_TLSREQ_REQUIRETLS);
    else if (env->tls_optional)
        spool_puts(&o, SPOOL_TLSREQ_NO);
    if (env->auth_user != NULL && env->auth_user[0] != '\0') {
        spool_puts(&o, "auth");
        spool_put_xtext(&o, env->auth_user);
        spool_puts(&o, "\n");
    }
    spool_puts(&o, "end\n");
    return o.n;
}


void
spool_env_format(const struct spool_env *env, char **out, size_t *len)
{
    size_t n = spool_env_render(env, NULL);

    *out = xmalloc(n + 1);
    spool_env_render(env, *out);
    (*out)[n] = '\0';                   /* handy for tests and printing */
    *len = n;
}


/* spool_rcpt_delayed - written as DELAYED: a warned recipient that is
 * final needs no mark (it will never be warned again anyway). */
static int
spool_rcpt_delayed(const struct spool_rcpt *rc)
{
    return rc->delay_warned && rc->status == SPOOL_RCPT_PENDING;
}


size_t
spool_state_render(const struct spool_env *env, char *dst)
{
    struct spool_out o = { dst, 0 };
    size_t           i;
    int              v2 = 0, v3 = 0, v4 = 0, v5 = 0;

    for (i = 0; i < env->nrcpt; i++) {
        v2 |= env->rcpt[i].notified != 0;
        v3 |= env->rcpt[i].tls != NULL;
        v4 |= spool_rcpt_delayed(&env->rcpt[i]);
        v5 |= env->rcpt[i].cls != NULL;
    }
    v3 |= v4 | v5;
    spool_puts(&o, v5 ? SPOOL_STATE_MAGIC5 "id " : v4 ?
        SPOOL_STATE_MAGIC4 "id " : v3 ?
        SPOOL_STATE_MAGIC3 "id " : v2 ?
        SPOOL_STATE_MAGIC2 "id " : SPOOL_STATE_MAGIC "id ");
    spool_put(&o, env->id, strnlen(env->id, SPOOL_ID_LEN));
    spool_puts(&o, "\nnext_retry ");
    spool_put_u64(&o, env->next_retry_ms);
    spool_puts(&o, "\nattempts ");
    spool_put_u64(&o, env->attempts);
    spool_puts(&o, env->held ? "\nheld 1\nrcpts " : "\nheld 0\nrcpts ");
    spool_put_u64(&o, env->nrcpt);
    spool_puts(&o, "\n");
    for (i = 0; i < env->nrcpt; i++) {
        spool_puts(&o, "rcpt ");
        spool_puts(&o, spool_status_names[env->rcpt[i].notified ?
            SPOOL_STATUS_NOTIFIED : spool_rcpt_delayed(&env->rcpt[i]) ?
            SPOOL_STATUS_DELAYED : env->rcpt[i].status]);
        spool_put_xtext(&o, env->rcpt[i].relay);
        spool_put_xtext(&o, env->rcpt[i].last_reply);
        if (v3)
            spool_put_xtext(&o, env->rcpt[i].tls);
        if (v5)
            spool_put_xtext(&o, env->rcpt[i].cls);
        spool_puts(&o, "\n");
    }
    spool_puts(&o, "end\n");
    return o.n;
}


int
spool_id_valid(const char *id)
{
    int i;

    if (id == NULL)
        return 0;
    for (i = 0; i < SPOOL_ID_LEN; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'A' && id[i] <= 'F')))
            return 0;
    return id[SPOOL_ID_LEN] == '\0';
}


/* ---- parsing ---------------------------------------------------------- */

/* spool_line - split the next LF-terminated line at *pos into a key and up
 * to SPOOL_MAX_FIELDS fields; returns the field count, or -1 when there is
 * no complete line or it has too many fields or an empty key. */
static int
spool_line(const char *p, size_t n, size_t *pos, struct spool_field *key,
    struct spool_field *f)
{
    const char *s = p + *pos, *end, *sp;
    int         nf = 0;

    end = memchr(s, '\n', n - *pos);
    if (end == NULL)
        return -1;
    *pos = (size_t)(end - p) + 1;
    sp = memchr(s, ' ', (size_t)(end - s));
    key->p = s;
    key->n = (size_t)((sp != NULL ? sp : end) - s);
    if (key->n == 0)
        return -1;
    while (sp != NULL) {
        const char *b = sp + 1;

        if (nf == SPOOL_MAX_FIELDS)
            return -1;
        sp = memchr(b, ' ', (size_t)(end - b));
        f[nf].p = b;
        f[nf].n = (size_t)((sp != NULL ? sp : end) - b);
        nf++;
    }
    return nf;
}


static int
spool_is(const struct spool_field *f, const char *s)
{
    return f->n == strlen(s) && memcmp(f->p, s, f->n) == 0;
}


/* spool_num - strict unsigned decimal, at most max. */
static int
spool_num(const struct spool_field *f, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t   i;

    if (f->n == 0 || f->n > 20)
        return -1;
    for (i = 0; i < f->n; i++) {
        unsigned d = (unsigned)(unsigned char)f->p[i] - '0';

        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}


static int
spool_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}


/* spool_xtext - decode a field into a new string; "+" alone gives NULL when
 * nullable.  Only the canonical encoding spool_put_xtext() writes is
 * accepted, and never a NUL byte. */
static int
spool_xtext(const struct spool_field *f, int nullable, char **out)
{
    char   *s, *d;
    size_t  i;

    *out = NULL;
    if (f->n == 1 && f->p[0] == '+')
        return nullable ? 0 : -1;
    s = d = xmalloc(f->n + 1);
    for (i = 0; i < f->n; i++) {
        unsigned char c = (unsigned char)f->p[i];
        int           hi, lo;

        if (c != '+') {
            if (smtp_xtext_needs(c))
                goto fail;
            *d++ = (char)c;
            continue;
        }
        if (f->n - i < 3 || (hi = spool_hexval(f->p[i + 1])) < 0 ||
            (lo = spool_hexval(f->p[i + 2])) < 0)
            goto fail;
        c = (unsigned char)(hi << 4 | lo);
        if (c == 0 || !smtp_xtext_needs(c))
            goto fail;
        *d++ = (char)c;
        i += 2;
    }
    *d = '\0';
    *out = s;
    return 0;
fail:
    free(s);
    return -1;
}


/* spool_word - index of f in names[0..n), or -1. */
static int
spool_word(const struct spool_field *f, const char *const *names, int n)
{
    int i;

    for (i = 0; i < n; i++)
        if (spool_is(f, names[i]))
            return i;
    return -1;
}


enum spool_key {
    K_ID, K_ARRIVAL, K_SENDER, K_BODY, K_SMTPUTF8, K_RET, K_ENVID, K_CLIENT,
    K_HELO, K_RCPTS, K_RCPT, K_TLSREQ, K_AUTH, K_END, K_NKEYS
};

static const struct spool_keydef {
    const char *name;
    int         nfields;
} spool_keys[K_NKEYS] = {
    [K_ID] = { "id", 1 }, [K_ARRIVAL] = { "arrival", 1 },
    [K_SENDER] = { "sender", 1 }, [K_BODY] = { "body", 1 },
    [K_SMTPUTF8] = { "smtputf8", 1 }, [K_RET] = { "ret", 1 },
    [K_ENVID] = { "envid", 1 }, [K_CLIENT] = { "client", 2 },
    [K_HELO] = { "helo", 1 }, [K_RCPTS] = { "rcpts", 1 },
    [K_RCPT] = { "rcpt", 3 }, [K_TLSREQ] = { "tlsreq", 1 },
    [K_AUTH] = { "auth", 1 },
    [K_END] = { "end", 0 },
};


/* spool_env_field - apply one parsed envelope line; -1 on any error. */
static int
spool_env_field(struct spool_env *e, enum spool_key k,
    const struct spool_field *f, size_t rest, size_t *cap)
{
    uint64_t v;
    int      w;

    switch (k) {
    case K_ID:
        if (f[0].n != SPOOL_ID_LEN)
            return -1;
        memcpy(e->id, f[0].p, SPOOL_ID_LEN);
        e->id[SPOOL_ID_LEN] = '\0';
        return spool_id_valid(e->id) ? 0 : -1;
    case K_ARRIVAL:
        return spool_num(&f[0], UINT64_MAX, &e->arrival_ms);
    case K_SENDER:
        return spool_xtext(&f[0], 0, &e->sender);
    case K_BODY:
        if ((w = spool_word(&f[0], spool_body_names, 3)) < 0)
            return -1;
        e->body = (enum smtp_body)w;
        return 0;
    case K_SMTPUTF8:
        if (spool_num(&f[0], 1, &v) < 0 || f[0].n != 1)
            return -1;
        e->smtputf8 = (int)v;
        return 0;
    case K_RET:
        if ((w = spool_word(&f[0], spool_ret_names, 3)) < 0)
            return -1;
        e->ret = (enum smtp_ret)w;
        return 0;
    case K_ENVID:
        return spool_xtext(&f[0], 1, &e->envid);
    case K_CLIENT:
        if (spool_num(&f[1], 65535, &v) < 0)
            return -1;
        e->client_port = (unsigned)v;
        return spool_xtext(&f[0], 1, &e->client_ip);
    case K_HELO:
        return spool_xtext(&f[0], 1, &e->helo);
    case K_RCPTS:
        /* Bounded by what the rest of the input can hold, so a garbled
         * count cannot make us allocate a huge array. */
        if (spool_num(&f[0], rest / SPOOL_MIN_RCPT_LINE, &v) < 0)
            return -1;
        *cap = (size_t)v;
        e->rcpt = xcalloc(*cap ? *cap : 1, sizeof(*e->rcpt));
        return 0;
    case K_RCPT: {
        struct spool_rcpt *r;

        if (e->rcpt == NULL || e->nrcpt == *cap ||
            spool_num(&f[0], 0xf, &v) < 0)
            return -1;
        r = &e->rcpt[e->nrcpt++];
        r->notify = (unsigned)v;
        if (spool_xtext(&f[1], 0, &r->addr) < 0)
            return -1;
        return spool_xtext(&f[2], 1, &r->orcpt);
    }
    case K_AUTH:
        return spool_xtext(&f[0], 0, &e->auth_user);
    case K_TLSREQ:
        if (spool_is(&f[0], "REQUIRETLS"))
            e->requiretls = 1;
        else if (spool_is(&f[0], "NO"))
            e->tls_optional = 1;
        else
            return -1;
        return 0;
    default:
        return -1;
    }
}


int
spool_env_parse(const char *p, size_t n, struct spool_env **envp,
    size_t *consumed)
{
    struct spool_env   *e;
    struct spool_field  key, f[SPOOL_MAX_FIELDS];
    size_t              pos = sizeof(SPOOL_MAGIC) - 1, cap = 0;
    unsigned            seen = 0;
    uint64_t            size;
    int                 nf, k;

    *envp = NULL;
    if (n < pos || memcmp(p, SPOOL_MAGIC, pos) != 0)
        return SPOOL_EFORMAT;
    e = xcalloc(1, sizeof(*e));
    /* The size line comes first, at a fixed offset, fixed width. */
    nf = spool_line(p, n, &pos, &key, f);
    if (nf != 1 || !spool_is(&key, "size") || f[0].n != SPOOL_SIZE_WIDTH ||
        spool_num(&f[0], UINT64_MAX, &size) < 0)
        goto fail;
    e->body_size = size;
    for (;;) {
        if ((nf = spool_line(p, n, &pos, &key, f)) < 0)
            goto fail;
        for (k = 0; k < K_NKEYS; k++)
            if (spool_is(&key, spool_keys[k].name))
                break;
        if (k == K_NKEYS || nf != spool_keys[k].nfields)
            goto fail;
        if (k == K_END)
            break;
        if (k != K_RCPT && (seen & (1u << k)))
            goto fail;                  /* repeated key */
        seen |= 1u << k;
        if (spool_env_field(e, (enum spool_key)k, f, n - pos, &cap) < 0)
            goto fail;
    }
    if ((seen | (1u << K_RCPT) | (1u << K_TLSREQ) | (1u << K_AUTH) |
        (1u << K_END)) !=
        (1u << K_NKEYS) - 1 ||
        e->nrcpt != cap)
        goto fail;
    *envp = e;
    if (consumed != NULL)
        *consumed = pos;
    return SPOOL_OK;
fail:
    spool_env_free(e);
    return SPOOL_EFORMAT;
}


/* spool_state_line - apply one state line to env; -1 on any error. */
static int
spool_state_line(struct spool_env *e, const struct spool_field *key,
    const struct spool_field *f, int nf, size_t *nr, unsigned *seen,
    int version)
{
    static const char *const names[] = { "id", "next_retry", "attempts",
        "held", "rcpts", "rcpt" };
    static const int nfields[] = { 1, 1, 1, 1, 1, 3 };
    uint64_t v;
    int      k, st;

    if ((k = spool_word(key, names, 6)) < 0 ||
        nf != nfields[k] + (k == 5 && version >= 3) +
        (k == 5 && version >= 5))
        return -1;
    if (k != 5 && (*seen & (1u << k)))
        return -1;
    *seen |= 1u << k;
    switch (k) {
    case 0:
        return f[0].n == SPOOL_ID_LEN &&
            memcmp(f[0].p, e->id, SPOOL_ID_LEN) == 0 ? 0 : -1;
    case 1:
        return spool_num(&f[0], UINT64_MAX, &e->next_retry_ms);
    case 2:
        if (spool_num(&f[0], UINT32_MAX, &v) < 0)
            return -1;
        e->attempts = (unsigned)v;
        return 0;
    case 3:
        if (f[0].n != 1 || spool_num(&f[0], 1, &v) < 0)
            return -1;
        e->held = (int)v;
        return 0;
    case 4:
        return spool_num(&f[0], SIZE_MAX, &v) == 0 && v == e->nrcpt ? 0 : -1;
    default:
        if (!(*seen & (1u << 4)) || *nr == e->nrcpt ||
            (st = spool_word(&f[0], spool_status_names,
            version >= 4 ? 5 : version >= 2 ? 4 : 3)) < 0)
            return -1;
        e->rcpt[*nr].notified = st == SPOOL_STATUS_NOTIFIED;
        e->rcpt[*nr].delay_warned = st == SPOOL_STATUS_DELAYED;
        e->rcpt[*nr].status = st == SPOOL_STATUS_NOTIFIED ?
            SPOOL_RCPT_BOUNCED : st == SPOOL_STATUS_DELAYED ?
            SPOOL_RCPT_PENDING : st;
        free(e->rcpt[*nr].relay);
        free(e->rcpt[*nr].last_reply);
        free(e->rcpt[*nr].tls);
        free(e->rcpt[*nr].cls);
        e->rcpt[*nr].relay = e->rcpt[*nr].last_reply = NULL;
        e->rcpt[*nr].tls = e->rcpt[*nr].cls = NULL;
        if (spool_xtext(&f[1], 1, &e->rcpt[*nr].relay) < 0 ||
            spool_xtext(&f[2], 1, &e->rcpt[*nr].last_reply) < 0 ||
            (version >= 3 && spool_xtext(&f[3], 1, &e->rcpt[*nr].tls) < 0) ||
            (version >= 5 && spool_xtext(&f[4], 1, &e->rcpt[*nr].cls) < 0))
            return -1;
        (*nr)++;
        return 0;
    }
}


int
spool_state_parse(const char *p, size_t n, struct spool_env *e)
{
    struct spool_field key, f[SPOOL_MAX_FIELDS];
    size_t             pos = sizeof(SPOOL_STATE_MAGIC) - 1, nr = 0;
    unsigned           seen = 0;
    int                nf, version;

    if (n >= pos && memcmp(p, SPOOL_STATE_MAGIC, pos) == 0)
        version = 1;
    else if (n >= pos && memcmp(p, SPOOL_STATE_MAGIC2, pos) == 0)
        version = 2;
    else if (n >= pos && memcmp(p, SPOOL_STATE_MAGIC3, pos) == 0)
        version = 3;
    else if (n >= pos && memcmp(p, SPOOL_STATE_MAGIC4, pos) == 0)
        version = 4;
    else if (n >= pos && memcmp(p, SPOOL_STATE_MAGIC5, pos) == 0)
        version = 5;
    else
        return SPOOL_EFORMAT;
    for (;;) {
        if ((nf = spool_line(p, n, &pos, &key, f)) < 0)
            return SPOOL_EFORMAT;
        if (spool_is(&key, "end") && nf == 0)
            break;
        if (spool_state_line(e, &key, f, nf, &nr, &seen, version) < 0)
            return SPOOL_EFORMAT;
    }
    if (seen != 0x3f || nr != e->nrcpt || pos != n)
        return SPOOL_EFORMAT;
    return SPOOL_OK;
}


void
spool_env_free(struct spool_env *env)
{
    size_t i;

    if (env == NULL)
        return;
    for (i = 0; i < env->nrcpt; i++) {
        free(env->rcpt[i].addr);
        free(env->rcpt[i].orcpt);
        free(env->rcpt[i].last_reply);
        free(env->rcpt[i].relay);
        free(env->rcpt[i].tls);
        free(env->rcpt[i].cls);
    }
    free(env->rcpt);
    free(env->sender);
    free(env->envid);
    free(env->client_ip);
    free(env->helo);
    free(env->auth_user);
    free(env->body_copy);
    free(env);
}
