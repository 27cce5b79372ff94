/*
 * tlsrpt.c - TLS-RPT counters: the policy table, the process's recording
 * table, and the wire form of policies (see tlspol.h).
 *
 * PURPOSE   Count TLS outcomes per policy where they happen (a worker)
 *           and carry the counts to the master, which keeps the day.
 * CONTRACT  A table is a fixed array of hash buckets (FNV-1a over day,
 *           type, domain and policy strings) with chained policies, at
 *           most TLS_RPT_MAX_POLICIES.  tls_rpt_record() does one hash, one
 *           chain walk and a few adds; it allocates only for a policy not
 *           seen since the last export.
 * FAILURE   None on the recording side (full tables count a drop);
 *           tls_rpt_tab_merge() rejects bad input whole.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/buf.h"
#include "common/util.h"
#include "tlspol/tlspol_int.h"

#define TLSRPT_BUCKETS 1024u

struct tls_rpt_tab {
    struct tlsrpt_pol *bucket[TLSRPT_BUCKETS];
    size_t             n;
    size_t             bytes;       /* held by its policies (the cap) */
    uint64_t           dropped;     /* sessions not kept in detail */
};

static const char *const tlsrpt_type_names[] = {
    "sts", "tlsa", "no-policy-found"
};

const char *
tls_rpt_type_name(enum tls_rpt_type t)
{
    return (unsigned)t <= TLS_RPT_NOPOLICY ? tlsrpt_type_names[t] : "?";
}


static int
tlsrpt_type_parse(const char *s, enum tls_rpt_type *out)
{
    for (unsigned i = 0; i <= TLS_RPT_NOPOLICY; i++)
        if (strcmp(s, tlsrpt_type_names[i]) == 0) {
            *out = (enum tls_rpt_type)i;
            return 0;
        }
    return -1;
}


uint32_t
tls_rpt_day(uint64_t unix_s)
{
    return (uint32_t)(unix_s / 86400u);
}


void
tls_rpt_day_str(uint32_t day, char *out, size_t outsz)
{
    time_t    t = (time_t)day * 86400;
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, outsz, "%Y-%m-%d", &tm);
}

/* ---- the table -------------------------------------------------------- */

static uint64_t
tlsrpt_fnv(uint64_t h, const void *p, size_t n, int fold)
{
    const unsigned char *s = p;

    for (size_t i = 0; i < n; i++) {
        h ^= fold ? (unsigned char)tolower(s[i]) : s[i];
        h *= 1099511628211ull;
    }
    return h;
}


static const char *
tlsrpt_nz(const char *s)
{
    return s != NULL ? s : "";
}


/* tlsrpt_key - hash of what makes a policy: day, type, domain (case-folded,
 * without a final dot), and the policy strings as they will be kept. */
static uint64_t
tlsrpt_key(uint32_t day, const struct tls_rpt_event *ev, size_t dlen)
{
    uint64_t h = 14695981039346656037ull;
    size_t   ns = ev->nstrings < TLS_RPT_MAX_STRINGS ? ev->nstrings :
                  TLS_RPT_MAX_STRINGS;

    h = tlsrpt_fnv(h, &day, sizeof(day), 0);
    h = tlsrpt_fnv(h, &ev->type, sizeof(ev->type), 0);
    h = tlsrpt_fnv(h, ev->domain, dlen, 1);
    for (size_t i = 0; i < ns; i++) {
        const char *s = tlsrpt_nz(ev->strings[i]);
        size_t      l = strnlen(s, TLS_RPT_MAX_STRING - 1);

        h = tlsrpt_fnv(h, "\n", 1, 0);
        h = tlsrpt_fnv(h, s, l, 0);
    }
    return h;
}


static size_t
tlsrpt_domain_len(const char *d)
{
    size_t n = strnlen(d, TLS_RPT_DOMAIN_MAX - 1);

    while (n > 0 && d[n - 1] == '.')
        n--;
    return n;
}


/* tlsrpt_same - whether p is the policy of (day, ev). */
static int
tlsrpt_same(const struct tlsrpt_pol *p, uint32_t day,
    const struct tls_rpt_event *ev, size_t dlen)
{
    size_t ns = ev->nstrings < TLS_RPT_MAX_STRINGS ? ev->nstrings :
                TLS_RPT_MAX_STRINGS;

    if (p->day != day || p->type != ev->type || p->nstrings != ns ||
        strlen(p->domain) != dlen ||
        strncasecmp(p->domain, ev->domain, dlen) != 0)
        return 0;
    for (size_t i = 0; i < ns; i++) {
        const char *s = tlsrpt_nz(ev->strings[i]);
        size_t      l = strnlen(s, TLS_RPT_MAX_STRING - 1);

        if (strlen(p->strings[i]) != l || memcmp(p->strings[i], s, l) != 0)
            return 0;
    }
    return 1;
}


static struct tlsrpt_pol *
tlsrpt_pol_new(uint32_t day, const struct tls_rpt_event *ev, size_t dlen,
    uint64_t h)
{
    struct tlsrpt_pol *p = xcalloc(1, sizeof(*p));

    p->day = day;
    p->type = ev->type;
    p->hash = h;
    for (size_t i = 0; i < dlen; i++)
        p->domain[i] = (char)tolower((unsigned char)ev->domain[i]);
    p->nstrings = ev->nstrings < TLS_RPT_MAX_STRINGS ? ev->nstrings :
                  TLS_RPT_MAX_STRINGS;
    if (p->nstrings > 0)
        p->strings = xcalloc(p->nstrings, sizeof(char *));
    p->bytes = sizeof(*p) + p->nstrings * sizeof(char *);
    for (size_t i = 0; i < p->nstrings; i++) {
        p->strings[i] = xstrndup(tlsrpt_nz(ev->strings[i]),
            TLS_RPT_MAX_STRING - 1);
        p->bytes += strlen(p->strings[i]) + 1;
    }
    return p;
}


static void
tlsrpt_pol_free(struct tlsrpt_pol *p)
{
    for (size_t i = 0; i < p->nstrings; i++)
        free(p->strings[i]);
    free(p->strings);
    free(p->det);
    free(p);
}


struct tls_rpt_tab *
tls_rpt_tab_new(void)
{
    return xcalloc(1, sizeof(struct tls_rpt_tab));
}


static void
tlsrpt_tab_clear(struct tls_rpt_tab *t)
{
    for (size_t b = 0; b < TLSRPT_BUCKETS; b++) {
        struct tlsrpt_pol *p = t->bucket[b], *nx;

        for (; p != NULL; p = nx) {
            nx = p->next;
            tlsrpt_pol_free(p);
        }
        t->bucket[b] = NULL;
    }
    t->n = 0;
    t->bytes = 0;
}


void
tls_rpt_tab_free(struct tls_rpt_tab *t)
{
    if (t == NULL)
        return;
    tlsrpt_tab_clear(t);
    free(t);
}


size_t
tls_rpt_tab_count(const struct tls_rpt_tab *t)
{
    return t->n;
}


size_t
tls_rpt_tab_bytes(const struct tls_rpt_tab *t)
{
    return t->bytes;
}


uint64_t
tls_rpt_tab_dropped(const struct tls_rpt_tab *t)
{
    return t->dropped;
}


/* tlsrpt_detail - count n failures of p under (result, mx, ip, reason). */
static void
tlsrpt_detail(struct tls_rpt_tab *t, struct tlsrpt_pol *p,
    const struct tls_rpt_event *ev, uint64_t n)
{
    const char           *res = ev->result, *mx = tlsrpt_nz(ev->mx),
                         *ip = tlsrpt_nz(ev->ip), *rs = tlsrpt_nz(ev->reason);
    struct tlsrpt_detail *d;

    for (size_t i = 0; i < p->ndet; i++) {
        d = &p->det[i];
        if (strncmp(d->result, res, sizeof(d->result) - 1) == 0 &&
            strncasecmp(d->mx, mx, sizeof(d->mx) - 1) == 0 &&
            strncmp(d->ip, ip, sizeof(d->ip) - 1) == 0 &&
            strncmp(d->reason, rs, sizeof(d->reason) - 1) == 0) {
            d->n += n;
            return;
        }
    }
    if (p->ndet == TLS_RPT_MAX_DETAILS ||
        t->bytes + sizeof(*d) > TLS_RPT_TAB_BYTES) {
        t->dropped += n;
        return;
    }
    p->det = xrealloc(p->det, (p->ndet + 1) * sizeof(*p->det));
    p->bytes += sizeof(*d);
    t->bytes += sizeof(*d);
    d = &p->det[p->ndet++];
    memset(d, 0, sizeof(*d));
    util_strlcpy(d->result, res, sizeof(d->result));
    util_strlcpy(d->mx, mx, sizeof(d->mx));
    util_strlcpy(d->ip, ip, sizeof(d->ip));
    util_strlcpy(d->reason, rs, sizeof(d->reason));
    d->n = n;
}


/* tlsrpt_find - the policy of (day, ev), made when missing (NULL when the
 * table is full or the event has no domain). */
static struct tlsrpt_pol *
tlsrpt_find(struct tls_rpt_tab *t, uint32_t day, const struct tls_rpt_event *ev)
{
    struct tlsrpt_pol *p;
    size_t             dlen;
    uint64_t           h;

    if (ev->domain == NULL || (dlen = tlsrpt_domain_len(ev->domain)) == 0)
        return NULL;
    h = tlsrpt_key(day, ev, dlen);
    for (p = t->bucket[h % TLSRPT_BUCKETS]; p != NULL; p = p->next)
        if (p->hash == h && tlsrpt_same(p, day, ev, dlen))
            return p;
    if (t->n >= TLS_RPT_MAX_POLICIES || t->bytes >= TLS_RPT_TAB_BYTES)
        return NULL;
    p = tlsrpt_pol_new(day, ev, dlen, h);
    t->bytes += p->bytes;
    p->next = t->bucket[h % TLSRPT_BUCKETS];
    t->bucket[h % TLSRPT_BUCKETS] = p;
    t->n++;
    return p;
}


void
tls_rpt_tab_add(struct tls_rpt_tab *t, uint32_t day,
    const struct tls_rpt_event *ev, uint64_t n)
{
    struct tlsrpt_pol *p = tlsrpt_find(t, day, ev);

    if (p == NULL) {
        t->dropped += n;
        return;
    }
    if (ev->result == NULL || ev->result[0] == '\0') {
        p->ok += n;
        return;
    }
    p->fail += n;
    tlsrpt_detail(t, p, ev, n);
}

/* ---- the process's table --------------------------------------------- */

static struct tls_rpt_tab *tlsrpt_proc;
static int                tlsrpt_on;

void
tls_rpt_enable(int on)
{
    tlsrpt_on = on;
}


int
tls_rpt_enabled(void)
{
    return tlsrpt_on;
}


void
tls_rpt_record_day(const struct tls_rpt_event *ev, uint32_t day)
{
    if (!tlsrpt_on)
        return;
    if (tlsrpt_proc == NULL)
        tlsrpt_proc = tls_rpt_tab_new();
    tls_rpt_tab_add(tlsrpt_proc, day, ev, 1);
}


void
tls_rpt_record(const struct tls_rpt_event *ev)
{
    tls_rpt_record_day(ev, tls_rpt_day(util_wall_ms() / 1000));
}


void
tls_rpt_reset(void)
{
    tls_rpt_tab_free(tlsrpt_proc);
    tlsrpt_proc = NULL;
}

/* ---- wire form -------------------------------------------------------- */

/* tlsrpt_put - one field, %XX-escaped, "-" when empty. */
static void
tlsrpt_put(struct buf *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s;

    if (*p == '\0') {
        buf_append(out, "-", 1);
        return;
    }
    if (strcmp(s, "-") == 0) {
        buf_append(out, "%2D", 3);
        return;
    }
    for (; *p != '\0'; p++) {
        if (*p <= 0x20 || *p >= 0x7f || *p == '%') {
            char e[3] = { '%', hex[*p >> 4], hex[*p & 15] };

            buf_append(out, e, 3);
        } else {
            buf_append(out, p, 1);
        }
    }
}


void
tlsrpt_pol_wire(const struct tlsrpt_pol *p, struct buf *out)
{
    buf_printf(out, "P %" PRIu32 " %s ", p->day, tls_rpt_type_name(p->type));
    tlsrpt_put(out, p->domain);
    buf_printf(out, " %" PRIu64 " %" PRIu64 "\n", p->ok, p->fail);
    for (size_t i = 0; i < p->nstrings; i++) {
        buf_append(out, "s ", 2);
        tlsrpt_put(out, p->strings[i]);
        buf_append(out, "\n", 1);
    }
    for (size_t i = 0; i < p->ndet; i++) {
        const struct tlsrpt_detail *d = &p->det[i];

        buf_append(out, "d ", 2);
        tlsrpt_put(out, d->result);
        buf_append(out, " ", 1);
        tlsrpt_put(out, d->mx);
        buf_append(out, " ", 1);
        tlsrpt_put(out, d->ip);
        buf_printf(out, " %" PRIu64 " ", d->n);
        tlsrpt_put(out, d->reason);
        buf_append(out, "\n", 1);
    }
}


static int
tlsrpt_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}


/* tlsrpt_field - decode the next space-separated field of *sp into out
 * (outsz); -1 when missing, too long, or badly escaped. */
static int
tlsrpt_field(const char **sp, const char *end, char *out, size_t outsz)
{
    const char *s = *sp;
    size_t      n = 0;

    if (s >= end || *s == ' ')
        return -1;
    if (*s == '-' && (s + 1 == end || s[1] == ' ')) {
        out[0] = '\0';
        s++;
    } else {
        while (s < end && *s != ' ') {
            int c = (unsigned char)*s, hi, lo;

            if (c <= 0x20 || c >= 0x7f)
                return -1;
            if (c == '%') {
                if (end - s < 3 || (hi = tlsrpt_hexval(s[1])) < 0 ||
                    (lo = tlsrpt_hexval(s[2])) < 0 || (hi == 0 && lo == 0))
                    return -1;
                c = hi << 4 | lo;
                s += 2;
            }
            if (n + 1 >= outsz)
                return -1;
            out[n++] = (char)c;
            s++;
        }
        out[n] = '\0';
    }
    if (s < end)
        s++;                            /* the space */
    *sp = s;
    return 0;
}


static int
tlsrpt_u64(const char **sp, const char *end, uint64_t *v, uint64_t max)
{
    char  f[24], *e;

    if (tlsrpt_field(sp, end, f, sizeof(f)) < 0 ||
        !isdigit((unsigned char)f[0]))
        return -1;
    *v = strtoull(f, &e, 10);
    return *e == '\0' && *v <= max ? 0 : -1;
}


/* The days a merge takes (tls_rpt_tab_merge_days). */
struct tlsrpt_win {
    uint32_t lo, hi;
    size_t  *skipped;               /* NULL: another day is an error */
};

/* A policy block being read (tlsrpt_read_line), before it is added. */
struct tlsrpt_rd {
    int                 have;           /* a P line was read */
    int                 out;            /* its day is outside the window */
    uint32_t            day;
    struct tls_rpt_event ev;
    char                domain[TLS_RPT_DOMAIN_MAX];
    char               *str[TLS_RPT_MAX_STRINGS];
    uint64_t            ok, fail, dsum;
    size_t              ndet;
    struct {
        char     result[64], mx[256], ip[64], reason[128];
        uint64_t n;
    } det[TLS_RPT_MAX_DETAILS];
};


static void
tlsrpt_rd_free(struct tlsrpt_rd *r)
{
    for (size_t i = 0; i < r->ev.nstrings; i++)
        free(r->str[i]);
    memset(r, 0, sizeof(*r));
}


#define TLSRPT_COUNT_MAX ((uint64_t)1 << 48)

static int
tlsrpt_read_line(struct tlsrpt_rd *r, const struct tlsrpt_win *w,
    const char *s, const char *end, char *err, size_t errsz)
{
    const char *line = s;
    char        f[TLS_RPT_MAX_STRING], shown[UTIL_ESC_ROOM(60)];
    uint64_t    v;

    if (end - s < 2 || s[1] != ' ')
        goto bad;
    if (s[0] == 'P') {
        if (r->have)
            goto bad;
        s += 2;
        if (tlsrpt_u64(&s, end, &v, UINT32_MAX) < 0)
            goto bad;
        r->day = (uint32_t)v;
        if (tlsrpt_field(&s, end, f, sizeof(f)) < 0 ||
            tlsrpt_type_parse(f, &r->ev.type) < 0 ||
            tlsrpt_field(&s, end, r->domain, sizeof(r->domain)) < 0 ||
            r->domain[0] == '\0' ||
            tlsrpt_u64(&s, end, &r->ok, TLSRPT_COUNT_MAX) < 0 ||
            tlsrpt_u64(&s, end, &r->fail, TLSRPT_COUNT_MAX) < 0 || s != end)
            goto bad;
        /* a day far off would stay in the master's table (and its state
         * file) for ever: it is never reported */
        if (r->day < w->lo || r->day > w->hi) {
            if (w->skipped == NULL) {
                snprintf(err, errsz, "TLS-RPT record of day %" PRIu32
                    " (accepted: %" PRIu32 "..%" PRIu32 ")", r->day, w->lo,
                    w->hi);
                return -1;
            }
            r->out = 1;
        }
        r->have = 1;
        return 0;
    }
    if (!r->have)
        goto bad;
    if (s[0] == 's') {
        s += 2;
        if (r->ndet > 0 || r->ev.nstrings == TLS_RPT_MAX_STRINGS ||
            tlsrpt_field(&s, end, f, sizeof(f)) < 0 || s != end)
            goto bad;
        r->str[r->ev.nstrings++] = xstrdup(f);
        return 0;
    }
    if (s[0] == 'd' && r->ndet < TLS_RPT_MAX_DETAILS) {
        s += 2;
        if (tlsrpt_field(&s, end, r->det[r->ndet].result,
            sizeof(r->det[0].result)) < 0 || r->det[r->ndet].result[0] == 0 ||
            tlsrpt_field(&s, end, r->det[r->ndet].mx,
            sizeof(r->det[0].mx)) < 0 ||
            tlsrpt_field(&s, end, r->det[r->ndet].ip,
            sizeof(r->det[0].ip)) < 0 ||
            tlsrpt_u64(&s, end, &r->det[r->ndet].n, TLSRPT_COUNT_MAX) < 0 ||
            tlsrpt_field(&s, end, r->det[r->ndet].reason,
            sizeof(r->det[0].reason)) < 0 || s != end)
            goto bad;
        r->dsum += r->det[r->ndet].n;
        r->ndet++;
        return 0;
    }
bad:
    /* the line is not terminated, and it comes from a worker: escaped */
    util_escape(shown, sizeof(shown), line, (size_t)(end - line) < 60 ?
        (size_t)(end - line) : 60, 0, NULL);
    snprintf(err, errsz, "bad TLS-RPT record line '%s'", shown);
    return -1;
}


/* tlsrpt_rd_apply - add the policy read to t: successes, then failures
 * with their details; failures without a detail (dropped where they were
 * counted) go to the summary only. */
static void
tlsrpt_rd_apply(struct tls_rpt_tab *t, struct tlsrpt_rd *r)
{
    struct tlsrpt_pol *p;

    r->ev.domain = r->domain;
    r->ev.strings = (const char *const *)r->str;
    r->ev.result = NULL;
    if ((p = tlsrpt_find(t, r->day, &r->ev)) == NULL) {
        t->dropped += r->ok + r->fail;
        return;
    }
    p->ok += r->ok;
    p->fail += r->fail;
    for (size_t i = 0; i < r->ndet; i++) {
        r->ev.result = r->det[i].result;
        r->ev.mx = r->det[i].mx;
        r->ev.ip = r->det[i].ip;
        r->ev.reason = r->det[i].reason;
        tlsrpt_detail(t, p, &r->ev, r->det[i].n);
    }
}


/* tlsrpt_parse - read the blocks of text[0..n); each complete policy is
 * added to t (t NULL: only check).  0 or -1 with err. */
static int
tlsrpt_parse(struct tls_rpt_tab *t, const char *text, size_t n,
    const struct tlsrpt_win *w, char *err, size_t errsz)
{
    struct tlsrpt_rd *r = xcalloc(1, sizeof(*r));
    const char       *s = text, *end = text + n, *nl;
    int               rc = 0;

    for (;;) {
        nl = s < end ? memchr(s, '\n', (size_t)(end - s)) : NULL;
        if (s < end && nl == NULL) {
            snprintf(err, errsz, "TLS-RPT record without a line end");
            rc = -1;
            break;
        }
        if (r->have && (s == end || s[0] == 'P')) {
            if (r->dsum > r->fail) {
                snprintf(err, errsz, "TLS-RPT details exceed the failures");
                rc = -1;
                break;
            }
            if (t != NULL && r->out)
                (*w->skipped)++;
            else if (t != NULL)
                tlsrpt_rd_apply(t, r);
            tlsrpt_rd_free(r);
        }
        if (s == end)
            break;
        if ((rc = tlsrpt_read_line(r, w, s, nl, err, errsz)) < 0)
            break;
        s = nl + 1;
    }
    tlsrpt_rd_free(r);
    free(r);
    return rc;
}


int
tls_rpt_tab_merge_days(struct tls_rpt_tab *t, const char *text, size_t n,
    uint32_t lo, uint32_t hi, size_t *skipped, char *err, size_t errsz)
{
    struct tlsrpt_win w = { lo, hi, skipped };

    /* check it all first: a bad line merges nothing */
    if (tlsrpt_parse(NULL, text, n, &w, err, errsz) < 0)
        return -1;
    if (skipped != NULL)
        *skipped = 0;
    return tlsrpt_parse(t, text, n, &w, err, errsz);
}


int
tls_rpt_tab_merge(struct tls_rpt_tab *t, const char *text, size_t n,
    char *err, size_t errsz)
{
    return tls_rpt_tab_merge_days(t, text, n, 0, UINT32_MAX, NULL, err,
        errsz);
}

/* ---- listing, dumping, taking ---------------------------------------- */

static int
tlsrpt_pol_cmp(const void *a, const void *b)
{
    const struct tlsrpt_pol *p = *(const struct tlsrpt_pol *const *)a;
    const struct tlsrpt_pol *q = *(const struct tlsrpt_pol *const *)b;
    int                      c;

    if (p->day != q->day)
        return p->day < q->day ? -1 : 1;
    if ((c = strcmp(p->domain, q->domain)) != 0)
        return c;
    if (p->type != q->type)
        return p->type < q->type ? -1 : 1;
    return p->hash < q->hash ? -1 : p->hash > q->hash;
}


struct tlsrpt_pol **
tlsrpt_tab_sorted(const struct tls_rpt_tab *t, size_t *n)
{
    struct tlsrpt_pol **v = xcalloc(t->n + 1, sizeof(*v));
    size_t              k = 0;

    for (size_t b = 0; b < TLSRPT_BUCKETS; b++)
        for (struct tlsrpt_pol *p = t->bucket[b]; p != NULL; p = p->next)
            v[k++] = p;
    qsort(v, k, sizeof(*v), tlsrpt_pol_cmp);
    *n = k;
    return v;
}


void
tls_rpt_tab_dump(const struct tls_rpt_tab *t, struct buf *out)
{
    size_t              n;
    struct tlsrpt_pol **v = tlsrpt_tab_sorted(t, &n);

    for (size_t i = 0; i < n; i++)
        tlsrpt_pol_wire(v[i], out);
    free(v);
}


static void
tlsrpt_esc(struct buf *out, const char *s)
{
    char e[UTIL_ESC_ROOM(TLS_RPT_MAX_STRING)];

    util_escape(e, sizeof(e), s, strlen(s), 0, NULL);
    buf_printf(out, "%s", e);
}


void
tls_rpt_tab_text(const struct tls_rpt_tab *t, const char *domain,
    struct buf *out)
{
    size_t              n;
    struct tlsrpt_pol **v = tlsrpt_tab_sorted(t, &n);
    char                day[16];

    for (size_t i = 0; i < n; i++) {
        const struct tlsrpt_pol *p = v[i];

        if (domain != NULL && strcasecmp(domain, p->domain) != 0)
            continue;
        tls_rpt_day_str(p->day, day, sizeof(day));
        buf_printf(out, "domain ");
        tlsrpt_esc(out, p->domain);
        buf_printf(out, " day=%s type=%s success=%" PRIu64 " failure=%"
            PRIu64 "\n", day, tls_rpt_type_name(p->type), p->ok, p->fail);
        for (size_t k = 0; k < p->nstrings; k++) {
            buf_printf(out, "  policy-string: ");
            tlsrpt_esc(out, p->strings[k]);
            buf_printf(out, "\n");
        }
        for (size_t k = 0; k < p->ndet; k++) {
            const struct tlsrpt_detail *d = &p->det[k];

            buf_printf(out, "  failure result=");
            tlsrpt_esc(out, d->result);
            buf_printf(out, " mx=");
            tlsrpt_esc(out, d->mx[0] ? d->mx : "-");
            buf_printf(out, " ip=");
            tlsrpt_esc(out, d->ip[0] ? d->ip : "-");
            buf_printf(out, " count=%" PRIu64, d->n);
            if (d->reason[0] != '\0') {
                buf_printf(out, " reason=");
                tlsrpt_esc(out, d->reason);
            }
            buf_printf(out, "\n");
        }
    }
    free(v);
}


static void
tlsrpt_unlink(struct tls_rpt_tab *t, struct tlsrpt_pol *p)
{
    struct tlsrpt_pol **pp = &t->bucket[p->hash % TLSRPT_BUCKETS];

    while (*pp != p)
        pp = &(*pp)->next;
    *pp = p->next;
    t->n--;
    t->bytes -= p->bytes;
    tlsrpt_pol_free(p);
}


size_t
tls_rpt_tab_take(struct tls_rpt_tab *t, uint32_t max_day,
    tls_rpt_group_fn *emit, void *arg)
{
    size_t              n, i = 0, j, groups = 0;
    struct tlsrpt_pol **v = tlsrpt_tab_sorted(t, &n);
    struct buf          b;

    buf_init(&b);
    while (i < n) {
        /* [i, j): one (day, domain) */
        for (j = i + 1; j < n && v[j]->day == v[i]->day &&
            strcmp(v[j]->domain, v[i]->domain) == 0; j++)
            ;
        if (v[i]->day <= max_day) {
            b.off = b.len = 0;
            for (size_t k = i; k < j; k++)
                tlsrpt_pol_wire(v[k], &b);
            if (emit(v[i]->day, v[i]->domain, buf_head(&b), buf_avail(&b),
                arg) == 0) {
                groups++;
                for (size_t k = i; k < j; k++)
                    tlsrpt_unlink(t, v[k]);
            }
        }
        i = j;
    }
    buf_free(&b);
    free(v);
    return groups;
}


size_t
tls_rpt_export(tls_rpt_emit_fn *emit, void *arg)
{
    size_t              n, done = 0;
    struct tlsrpt_pol **v;
    struct buf          b;

    if (tlsrpt_proc == NULL || tlsrpt_proc->n == 0)
        return 0;
    v = tlsrpt_tab_sorted(tlsrpt_proc, &n);
    buf_init(&b);
    for (size_t i = 0; i < n; i++) {
        b.off = b.len = 0;
        tlsrpt_pol_wire(v[i], &b);
        if (buf_avail(&b) > TLS_RPT_WIRE_MAX) {
            /* too many long strings: the counts go without them */
            tlsrpt_proc->dropped += v[i]->fail;
            for (size_t k = 0; k < v[i]->nstrings; k++)
                free(v[i]->strings[k]);
            v[i]->nstrings = 0;
            v[i]->ndet = 0;
            b.off = b.len = 0;
            tlsrpt_pol_wire(v[i], &b);
        }
        if (emit(buf_head(&b), buf_avail(&b), arg) != 0)
            break;
        tlsrpt_unlink(tlsrpt_proc, v[i]);
        done++;
    }
    buf_free(&b);
    free(v);
    return done;
}
