/*
 * api_json.c - strict JSON parser (recursive descent into an arena) and
 * the JSON writer.  See api_json.h for the contract.
 */
#include "api/api_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/logfmt.h"
#include "common/util.h"

struct api_json {
    unsigned char     type;
    unsigned char     isint;
    size_t            n;            /* string bytes, or members/elements */
    double            num;
    int64_t           i;
    char             *s;            /* string value */
    const char       *key;          /* member's key (inside an object) */
    size_t            keylen;
    struct api_json  *next;         /* build list while parsing */
    struct api_json **kids;         /* document order */
    struct api_json **sorted;       /* objects: by key, for api_json_get */
};

/* The arena: values, strings and member arrays of one document. */
struct jchunk {
    struct jchunk *next;
    size_t         used, cap;
    /* data follows, 16-byte aligned */
    _Alignas(16) unsigned char data[];
};

struct jdoc {
    struct jchunk  *chunks;
    struct api_json root;           /* must be the value handed out */
};

struct jp {
    const char     *s;
    size_t          n, pos;
    struct jdoc    *doc;
    size_t          nodes;
    char           *err;
    size_t          errsz;
    const char     *why;            /* static message of the first error */
};

#define JCHUNK_MIN  (16 * 1024)

static void *
jalloc(struct jdoc *d, size_t n)
{
    struct jchunk *c = d->chunks;
    size_t         need = (n + 15) & ~(size_t)15;
    void          *p;

    if (c == NULL || c->cap - c->used < need) {
        size_t cap = need > JCHUNK_MIN ? need : JCHUNK_MIN;

        c = xmalloc(sizeof(*c) + cap);
        c->cap = cap;
        c->used = 0;
        c->next = d->chunks;
        d->chunks = c;
    }
    p = c->data + c->used;
    c->used += need;
    return p;
}

static int
jfail(struct jp *p, const char *why)
{
    if (p->why == NULL)
        p->why = why;
    return -1;
}

static void
jskip_ws(struct jp *p)
{
    while (p->pos < p->n) {
        char c = p->s[p->pos];

        if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
            break;
        p->pos++;
    }
}

static struct api_json *
jnode(struct jp *p, int type)
{
    struct api_json *v;

    if (++p->nodes > API_JSON_MAX_NODES) {
        jfail(p, "too many values");
        return NULL;
    }
    v = jalloc(p->doc, sizeof(*v));
    memset(v, 0, sizeof(*v));
    v->type = (unsigned char)type;
    return v;
}

/* Length of the valid UTF-8 sequence at u (2..4 bytes), 0 if invalid:
 * no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t
jutf8_len(const unsigned char *u, size_t n)
{
    size_t k, j;
    unsigned cp;

    if (u[0] >= 0xc2 && u[0] <= 0xdf)
        k = 2, cp = u[0] & 0x1f;
    else if (u[0] >= 0xe0 && u[0] <= 0xef)
        k = 3, cp = u[0] & 0x0f;
    else if (u[0] >= 0xf0 && u[0] <= 0xf4)
        k = 4, cp = u[0] & 0x07;
    else
        return 0;
    if (n < k)
        return 0;
    for (j = 1; j < k; j++) {
        if ((u[j] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (u[j] & 0x3f);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

static int
jhex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    int      i;

    for (i = 0; i < 4; i++) {
        char c = s[i];

        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t
jput_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One \uXXXX escape (a surrogate pair as one) at s[pos] == 'u'. */
static int
jescape_u(struct jp *p, char *o, size_t *ol)
{
    unsigned cp, lo;

    if (p->n - p->pos < 5 || jhex4(p->s + p->pos + 1, &cp) < 0)
        return jfail(p, "bad \\u escape");
    p->pos += 5;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return jfail(p, "lone low surrogate");
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (p->n - p->pos < 6 || p->s[p->pos] != '\\' ||
            p->s[p->pos + 1] != 'u' || jhex4(p->s + p->pos + 2, &lo) < 0 ||
            lo < 0xdc00 || lo > 0xdfff)
            return jfail(p, "lone high surrogate");
        p->pos += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    *ol += jput_utf8(o + *ol, cp);
    return 0;
}

/* A string at s[pos] == '"'; its decoded bytes go to the arena (never
 * longer than the raw text: every escape is at least as long as what it
 * stands for). */
static int
jstring(struct jp *p, char **out, size_t *outlen)
{
    size_t start = ++p->pos, end = start, ol = 0;
    char  *o;

    while (end < p->n && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n)
        return jfail(p, "unterminated string");
    o = jalloc(p->doc, end - start + 1);
    while (p->pos < end) {
        unsigned char c = (unsigned char)p->s[p->pos];
        size_t        k;

        if (c < 0x20)
            return jfail(p, "control byte in string");
        if (c >= 0x80) {
            if ((k = jutf8_len((const unsigned char *)p->s + p->pos,
                     end - p->pos)) == 0)
                return jfail(p, "invalid UTF-8 in string");
            memcpy(o + ol, p->s + p->pos, k);
            ol += k;
            p->pos += k;
            continue;
        }
        if (c != '\\') {
            o[ol++] = (char)c;
            p->pos++;
            continue;
        }
        p->pos++;
        switch (p->s[p->pos]) {
        case '"':  o[ol++] = '"';  break;
        case '\\': o[ol++] = '\\'; break;
        case '/':  o[ol++] = '/';  break;
        case 'b':  o[ol++] = '\b'; break;
        case 'f':  o[ol++] = '\f'; break;
        case 'n':  o[ol++] = '\n'; break;
        case 'r':  o[ol++] = '\r'; break;
        case 't':  o[ol++] = '\t'; break;
        case 'u':
            if (jescape_u(p, o, &ol) < 0)
                return -1;
            continue;
        default:
            return jfail(p, "bad escape");
        }
        p->pos++;
    }
    o[ol] = '\0';
    p->pos = end + 1;
    *out = o;
    *outlen = ol;
    return 0;
}

static size_t
jdigits(struct jp *p)
{
    size_t k = 0;

    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++, k++;
    return k;
}

static struct api_json *
jnumber(struct jp *p)
{
    size_t           start = p->pos;
    int              frac = 0, neg = 0;
    struct api_json *v;
    char             tmp[64], *copy, *endp;

    if (p->s[p->pos] == '-')
        p->pos++, neg = 1;
    if (p->pos < p->n && p->s[p->pos] == '0')
        p->pos++;
    else if (jdigits(p) == 0)
        return jfail(p, "bad number"), NULL;
    if (p->pos < p->n && p->s[p->pos] == '.') {
        p->pos++, frac = 1;
        if (jdigits(p) == 0)
            return jfail(p, "bad number"), NULL;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++, frac = 1;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (jdigits(p) == 0)
            return jfail(p, "bad number"), NULL;
    }
    if (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        return jfail(p, "leading zero"), NULL;
    if ((v = jnode(p, API_JSON_NUM)) == NULL)
        return NULL;
    copy = p->pos - start < sizeof(tmp) ? tmp :
        jalloc(p->doc, p->pos - start + 1);
    memcpy(copy, p->s + start, p->pos - start);
    copy[p->pos - start] = '\0';
    v->num = strtod(copy, &endp);
    if (!isfinite(v->num))
        return jfail(p, "number out of range"), NULL;
    if (!frac) {
        /* exact int64: accumulate negatively so INT64_MIN fits */
        int64_t acc = 0;
        size_t  i = (size_t)neg;
        int     ok = 1;

        for (; copy[i] != '\0'; i++) {
            int d = copy[i] - '0';

            if (acc < (INT64_MIN + d) / 10) {
                ok = 0;
                break;
            }
            acc = acc * 10 - d;
        }
        if (ok && (neg || acc != INT64_MIN)) {
            v->i = neg ? acc : -acc;
            v->isint = 1;
        }
    }
    return v;
}

static int
jkeycmp(const struct api_json *a, const char *k, size_t kl)
{
    size_t m = a->keylen < kl ? a->keylen : kl;
    int    r = memcmp(a->key, k, m);

    if (r != 0)
        return r;
    return a->keylen < kl ? -1 : a->keylen > kl;
}

static int
jsort_cmp(const void *x, const void *y)
{
    const struct api_json *a = *(struct api_json *const *)x;
    const struct api_json *b = *(struct api_json *const *)y;

    return jkeycmp(a, b->key, b->keylen);
}

/* The collected list into kids[] (and sorted[] for an object, refusing a
 * duplicate key). */
static int
jfinish(struct jp *p, struct api_json *v, struct api_json *head)
{
    size_t i = 0;

    if (v->n == 0)
        return 0;
    v->kids = jalloc(p->doc, v->n * sizeof(*v->kids));
    for (; head != NULL; head = head->next)
        v->kids[i++] = head;
    if (v->type != API_JSON_OBJ)
        return 0;
    v->sorted = jalloc(p->doc, v->n * sizeof(*v->sorted));
    memcpy(v->sorted, v->kids, v->n * sizeof(*v->kids));
    qsort(v->sorted, v->n, sizeof(*v->sorted), jsort_cmp);
    for (i = 1; i < v->n; i++)
        if (jsort_cmp(&v->sorted[i - 1], &v->sorted[i]) == 0)
            return jfail(p, "duplicate key");
    return 0;
}

static struct api_json *jvalue(struct jp *p, unsigned depth);

/* array or object at s[pos] == '[' or '{' */
static struct api_json *
jcontainer(struct jp *p, unsigned depth, int obj)
{
    struct api_json *v, *head = NULL, **tail = &head, *kid;
    char             close = obj ? '}' : ']';
    char            *key = NULL;
    size_t           keylen = 0;

    if (depth >= API_JSON_MAX_DEPTH)
        return jfail(p, "nested too deep"), NULL;
    if ((v = jnode(p, obj ? API_JSON_OBJ : API_JSON_ARR)) == NULL)
        return NULL;
    p->pos++;
    jskip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        return v;
    }
    for (;;) {
        if (obj) {
            jskip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != '"')
                return jfail(p, "expected a key"), NULL;
            if (jstring(p, &key, &keylen) < 0)
                return NULL;
            /* keys are looked up as C strings: "a\u0000b" would pass
             * for "a" */
            if (memchr(key, '\0', keylen) != NULL)
                return jfail(p, "NUL in a key"), NULL;
            jskip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':')
                return jfail(p, "expected ':'"), NULL;
            p->pos++;
        }
        if ((kid = jvalue(p, depth + 1)) == NULL)
            return NULL;
        kid->key = key;
        kid->keylen = keylen;
        *tail = kid;
        tail = &kid->next;
        v->n++;
        jskip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->n && p->s[p->pos] == close) {
            p->pos++;
            break;
        }
        return jfail(p, obj ? "expected ',' or '}'" :
                     "expected ',' or ']'"), NULL;
    }
    return jfinish(p, v, head) < 0 ? NULL : v;
}

static struct api_json *
jliteral(struct jp *p, const char *word, int type)
{
    size_t k = strlen(word);

    if (p->n - p->pos < k || memcmp(p->s + p->pos, word, k) != 0)
        return jfail(p, "unexpected character"), NULL;
    p->pos += k;
    return jnode(p, type);
}

static struct api_json *
jvalue(struct jp *p, unsigned depth)
{
    struct api_json *v;

    jskip_ws(p);
    if (p->pos >= p->n)
        return jfail(p, "unexpected end"), NULL;
    switch (p->s[p->pos]) {
    case '{':
        return jcontainer(p, depth, 1);
    case '[':
        return jcontainer(p, depth, 0);
    case '"':
        if ((v = jnode(p, API_JSON_STR)) == NULL ||
            jstring(p, &v->s, &v->n) < 0)
            return NULL;
        return v;
    case 't':
        return jliteral(p, "true", API_JSON_TRUE);
    case 'f':
        return jliteral(p, "false", API_JSON_FALSE);
    case 'n':
        return jliteral(p, "null", API_JSON_NULL);
    default:
        if (p->s[p->pos] == '-' ||
            (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))
            return jnumber(p);
        return jfail(p, "unexpected character"), NULL;
    }
}

static void
jdoc_free(struct jdoc *d)
{
    struct jchunk *c, *next;

    for (c = d->chunks; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    free(d);
}

static void
jerror(struct jp *p)
{
    size_t line = 1, col = 1, i;

    for (i = 0; i < p->pos && i < p->n; i++) {
        if (p->s[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    if (p->err != NULL && p->errsz > 0)
        snprintf(p->err, p->errsz, "line %zu col %zu: %s", line, col,
            p->why != NULL ? p->why : "invalid JSON");
}

struct api_json *
api_json_parse(const char *s, size_t n, char *err, size_t errsz)
{
    struct jp        p = { .s = s, .n = n, .err = err, .errsz = errsz };
    struct api_json *v;

    if (err != NULL && errsz > 0)
        err[0] = '\0';
    if (n > API_JSON_MAX_TEXT) {
        if (err != NULL && errsz > 0)
            snprintf(err, errsz, "JSON text too long");
        return NULL;
    }
    p.doc = xcalloc(1, sizeof(*p.doc));
    v = jvalue(&p, 0);
    if (v != NULL) {
        jskip_ws(&p);
        if (p.pos < p.n) {
            jfail(&p, "bytes after the value");
            v = NULL;
        }
    }
    if (v == NULL) {
        jerror(&p);
        jdoc_free(p.doc);
        return NULL;
    }
    /* the root lives in the document header, so free finds the arena */
    p.doc->root = *v;
    return &p.doc->root;
}

void
api_json_free(struct api_json *root)
{
    if (root != NULL)
        jdoc_free((struct jdoc *)((char *)root -
                  offsetof(struct jdoc, root)));
}

int
api_json_type(const struct api_json *v)
{
    return v == NULL ? API_JSON_NONE : v->type;
}

const struct api_json *
api_json_get(const struct api_json *obj, const char *key)
{
    size_t lo = 0, hi, kl;

    if (obj == NULL || obj->type != API_JSON_OBJ || key == NULL)
        return NULL;
    kl = strlen(key);
    hi = obj->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int    r = jkeycmp(obj->sorted[mid], key, kl);

        if (r == 0)
            return obj->sorted[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *
api_json_str(const struct api_json *v, size_t *len)
{
    if (v == NULL || v->type != API_JSON_STR) {
        if (len != NULL)
            *len = 0;
        return NULL;
    }
    if (len != NULL)
        *len = v->n;
    return v->s;
}

double
api_json_num(const struct api_json *v)
{
    return v != NULL && v->type == API_JSON_NUM ? v->num : 0;
}

int
api_json_int(const struct api_json *v, int64_t *out)
{
    if (v == NULL || v->type != API_JSON_NUM || !v->isint)
        return -1;
    *out = v->i;
    return 0;
}

int
api_json_bool(const struct api_json *v)
{
    if (v == NULL)
        return -1;
    return v->type == API_JSON_TRUE ? 1 : v->type == API_JSON_FALSE ? 0 : -1;
}

size_t
api_json_len(const struct api_json *v)
{
    if (v == NULL || (v->type != API_JSON_ARR && v->type != API_JSON_OBJ))
        return 0;
    return v->n;
}

const struct api_json *
api_json_at(const struct api_json *v, size_t i)
{
    return i < api_json_len(v) ? v->kids[i] : NULL;
}

const char *
api_json_key(const struct api_json *obj, size_t i)
{
    if (obj == NULL || obj->type != API_JSON_OBJ || i >= obj->n)
        return NULL;
    return obj->kids[i]->key;
}

/* ---- writer ---- */

void
api_jw_init(struct api_jw *w, struct buf *b)
{
    memset(w, 0, sizeof(*w));
    w->b = b;
}

/* the comma (or none) before a value or key at the current level */
static int
jw_sep(struct api_jw *w)
{
    uint64_t bit;

    if (w->bad)
        return -1;
    if (w->after_key) {
        w->after_key = 0;
        return 0;
    }
    bit = (uint64_t)1 << w->depth;
    if (w->depth > 0 && (w->more & bit))
        buf_append(w->b, ",", 1);
    w->more |= bit;
    return 0;
}

static void
jw_open(struct api_jw *w, char c)
{
    if (jw_sep(w) < 0)
        return;
    if (w->depth >= API_JSON_MAX_DEPTH) {
        w->bad = 1;
        return;
    }
    buf_append(w->b, &c, 1);
    w->depth++;
    w->more &= ~((uint64_t)1 << w->depth);
}

static void
jw_close(struct api_jw *w, char c)
{
    if (w->bad)
        return;
    if (w->depth == 0) {
        w->bad = 1;
        return;
    }
    w->depth--;
    w->after_key = 0;
    buf_append(w->b, &c, 1);
}

void api_jw_obj(struct api_jw *w)     { jw_open(w, '{'); }
void api_jw_obj_end(struct api_jw *w) { jw_close(w, '}'); }
void api_jw_arr(struct api_jw *w)     { jw_open(w, '['); }
void api_jw_arr_end(struct api_jw *w) { jw_close(w, ']'); }

static void
jw_quoted(struct api_jw *w, const char *s, size_t n)
{
    size_t room = n * 6 + 1;        /* \u00XX per byte at worst */

    buf_append(w->b, "\"", 1);
    if (buf_reserve(w->b, room) < 0) {
        w->bad = 1;
        return;
    }
    buf_produce(w->b, logfmt_json_str(buf_tail(w->b), room, s, n));
    buf_append(w->b, "\"", 1);
}

void
api_jw_key(struct api_jw *w, const char *key)
{
    if (jw_sep(w) < 0)
        return;
    jw_quoted(w, key, strlen(key));
    buf_append(w->b, ":", 1);
    w->after_key = 1;
}

void
api_jw_strn(struct api_jw *w, const char *s, size_t n)
{
    if (jw_sep(w) < 0)
        return;
    jw_quoted(w, s, n);
}

void
api_jw_str(struct api_jw *w, const char *s)
{
    if (s == NULL)
        api_jw_null(w);
    else
        api_jw_strn(w, s, strlen(s));
}

void
api_jw_int(struct api_jw *w, int64_t v)
{
    if (jw_sep(w) == 0)
        buf_printf(w->b, "%lld", (long long)v);
}

void
api_jw_uint(struct api_jw *w, uint64_t v)
{
    if (jw_sep(w) == 0)
        buf_printf(w->b, "%llu", (unsigned long long)v);
}

void
api_jw_num(struct api_jw *w, double v)
{
    if (!isfinite(v)) {
        api_jw_null(w);
        return;
    }
    if (jw_sep(w) == 0)
        buf_printf(w->b, "%.17g", v);
}

void
api_jw_bool(struct api_jw *w, int v)
{
    if (jw_sep(w) == 0)
        buf_append(w->b, v ? "true" : "false", v ? 4 : 5);
}

void
api_jw_null(struct api_jw *w)
{
    if (jw_sep(w) == 0)
        buf_append(w->b, "null", 4);
}

void
api_jw_raw(struct api_jw *w, const char *json, size_t n)
{
    if (jw_sep(w) == 0)
        buf_append(w->b, json, n);
}

void
api_jw_kstr(struct api_jw *w, const char *key, const char *s)
{
    api_jw_key(w, key);
    api_jw_str(w, s);
}

void
api_jw_kint(struct api_jw *w, const char *key, int64_t v)
{
    api_jw_key(w, key);
    api_jw_int(w, v);
}

void
api_jw_kbool(struct api_jw *w, const char *key, int v)
{
    api_jw_key(w, key);
    api_jw_bool(w, v);
}
