/*
 * logfmt.c - JSON lines for log.format: json.
 *
 * PURPOSE   Turn one record (time, level, process, fields, text) into one
 *           line of JSON; see logfmt.h for the contract.
 * CONTRACT  Pure: no I/O, no allocation, so the unit test drives it with
 *           any bytes, and a worker pays only the formatting.
 * FAILURE   None; output is cut (at a character boundary, inside msg)
 *           rather than overflow.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "common/logfmt.h"

const char *
logfmt_level_name(int level)
{
    static const char *const names[] = {
        "err", "warn", "notice", "info", "debug"
    };

    return level >= 0 && level <= LOGL_DEBUG ? names[level] : "info";
}

/* logfmt_utf8_len - length of the valid UTF-8 sequence at p (1..4), or 0
 * when p[0..n) does not start with one (overlong, surrogate, cut). */
static size_t
logfmt_utf8_len(const unsigned char *p, size_t n)
{
    size_t len, i;
    unsigned cp;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        len = 2;
        cp = p[0] & 0x1fu;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        len = 3;
        cp = p[0] & 0x0fu;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        len = 4;
        cp = p[0] & 0x07u;
    } else
        return 0;
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

/* logfmt_c1 - p[0..n) starts with a C1 control in UTF-8 (U+0080..U+009F). */
static int
logfmt_c1(const unsigned char *p, size_t n)
{
    return n >= 2 && p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
}

/* Bytes copied as they are: printable ASCII but the quote and backslash
 * (a table: this loop is most of a JSON record's cost). */
static const unsigned char logfmt_plain[256] = {
    [0x20 ... 0x21] = 1, [0x23 ... 0x5b] = 1, [0x5d ... 0x7e] = 1  /* not " \\ */
};

size_t
logfmt_json_str(char *out, size_t cap, const char *src, size_t n)
{
    const unsigned char *p = (const unsigned char *)src;
    size_t               o = 0, i = 0, k;
    char                 esc[8];
    const char          *e;

    if (cap == 0)
        return 0;
    while (i < n) {
        /* the common case: a run of printable ASCII, copied at once */
        for (k = i; k < n && logfmt_plain[p[k]]; k++)
            ;
        if (k > i) {
            if (o + (k - i) >= cap)
                k = i + (cap - 1 - o);
            memcpy(out + o, p + i, k - i);
            o += k - i;
            i = k;
            if (o + 1 >= cap)
                break;
            continue;
        }
        e = NULL;
        k = 1;
        switch (p[i]) {
        case '"':  e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        default:
            if (p[i] < 0x20 || p[i] == 0x7f) {
                snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
                e = esc;
            } else if (logfmt_c1(p + i, n - i)) {
                /* U+0080..U+009F: a terminal may take U+009B for CSI,
                 * as util_escape() knows for text records */
                snprintf(esc, sizeof(esc), "\\u%04x", p[i + 1]);
                e = esc;
                k = 2;
            } else if (p[i] >= 0x80 && (k = logfmt_utf8_len(p + i,
                n - i)) == 0) {
                snprintf(esc, sizeof(esc), "\\u%04x", p[i]);  /* Latin-1 */
                e = esc;
                k = 1;
            }
            break;
        }
        if (e != NULL) {
            size_t el = strlen(e);

            if (o + el >= cap)
                break;
            memcpy(out + o, e, el);
            o += el;
        } else {
            if (o + k >= cap)
                break;
            memcpy(out + o, p + i, k);
            o += k;
        }
        i += k;
    }
    out[o] = '\0';
    return o;
}

struct logfmt_out {
    char  *p;
    size_t len, cap;        /* cap keeps room for the closing "}\n" */
};

static void
logfmt_rawn(struct logfmt_out *o, const char *s, size_t n)
{
    if (o->len + n >= o->cap)
        n = o->cap - o->len - 1;
    memcpy(o->p + o->len, s, n);
    o->len += n;
    o->p[o->len] = '\0';
}

#define logfmt_lit(o, lit)  logfmt_rawn((o), (lit), sizeof(lit) - 1)
#define logfmt_raw(o, s)    logfmt_rawn((o), (s), strlen(s))

/* logfmt_str - one quoted string field, at most LOGFMT_FIELD_MAX bytes
 * of output, so that one long field cannot push the rest out. */
#define LOGFMT_FIELD_MAX 512
#define LOGFMT_MSG_RESERVE 16     /* ,"msg":"" and the end stay possible */
static void
logfmt_str(struct logfmt_out *o, const char *s, size_t n)
{
    size_t room;

    logfmt_lit(o, "\"");
    if (o->cap - o->len > 2) {
        room = o->cap - o->len - 1;
        room = room > LOGFMT_MSG_RESERVE ? room - LOGFMT_MSG_RESERVE : 1;
        if (room > LOGFMT_FIELD_MAX)
            room = LOGFMT_FIELD_MAX;
        o->len += logfmt_json_str(o->p + o->len, room, s, n);
    }
    logfmt_lit(o, "\"");
}

static void
logfmt_key(struct logfmt_out *o, const char *key)
{
    logfmt_lit(o, ",\"");
    logfmt_raw(o, key);
    logfmt_lit(o, "\":");
}

/* logfmt_u64 - decimal digits of v into buf (>= 21 bytes), NUL-ended;
 * snprintf() costs more than the rest of a field. */
static char *
logfmt_u64(char *buf, size_t bufsz, unsigned long long v)
{
    char *p = buf + bufsz - 1;

    *p = '\0';
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return p;
}

/* logfmt_num - an integer, or a number with 3 decimals, into buf. */
static const char *
logfmt_num(char *buf, size_t bufsz, const struct log_kv *kv)
{
    unsigned long long u;
    char              *p;
    int                neg;

    if (kv->type == LOG_KV_INT) {
        neg = kv->i < 0;
        u = neg ? 0ULL - (unsigned long long)kv->i : (unsigned long long)kv->i;
        p = logfmt_u64(buf, bufsz, u);
    } else {
        double d = kv->d;

        if (!(d == d) || d > 9e15 || d < -9e15)
            return "0";                 /* NaN or absurd: not JSON otherwise */
        neg = d < 0;
        u = (unsigned long long)((neg ? -d : d) * 1000.0 + 0.5);
        p = logfmt_u64(buf, bufsz, u / 1000);
        /* append ".ddd": move the integer part left to make room */
        {
            size_t len = strlen(p);
            char  *q = buf + 1;

            memmove(q, p, len);
            q[len] = '.';
            q[len + 1] = (char)('0' + u / 100 % 10);
            q[len + 2] = (char)('0' + u / 10 % 10);
            q[len + 3] = (char)('0' + u % 10);
            q[len + 4] = '\0';
            p = q;
        }
    }
    if (neg)
        *--p = '-';
    return p;
}

size_t
logfmt_json(char *out, size_t cap, const char *ts, int level,
    const char *proc, const char *pid, const char *event,
    const struct log_kv *kv, size_t nkv, const char *msg, size_t msglen)
{
    struct logfmt_out o = { out, 0, cap > 3 ? cap - 2 : 1 };
    char              num[48];
    size_t            i;

    out[0] = '\0';
    logfmt_lit(&o, "{\"ts\":\"");
    logfmt_raw(&o, ts);
    logfmt_lit(&o, "\",\"level\":\"");
    logfmt_raw(&o, logfmt_level_name(level));
    logfmt_lit(&o, "\",\"proc\":");
    logfmt_str(&o, proc, strlen(proc));
    logfmt_lit(&o, ",\"pid\":");
    logfmt_raw(&o, pid);
    logfmt_lit(&o, ",\"event\":");
    logfmt_str(&o, event, strlen(event));
    for (i = 0; i < nkv; i++) {
        if (kv[i].type == LOG_KV_STR && kv[i].s == NULL)
            continue;
        /* a field that cannot fit whole (key, quotes, a number) is left
         * out rather than cut, so the line stays valid JSON */
        if (o.cap - o.len < strlen(kv[i].key) + 48 + LOGFMT_MSG_RESERVE)
            break;
        logfmt_key(&o, kv[i].key);
        if (kv[i].type == LOG_KV_STR) {
            logfmt_str(&o, kv[i].s, strlen(kv[i].s));
        } else {
            logfmt_raw(&o, logfmt_num(num, sizeof(num), &kv[i]));
        }
    }
    logfmt_lit(&o, ",\"msg\":");
    /* the text last: when the record is too long, it is what gets cut */
    if (o.cap - o.len > 3) {
        size_t room = o.cap - o.len - 1;    /* for the closing quote */

        logfmt_lit(&o, "\"");
        o.len += logfmt_json_str(o.p + o.len, room - 1, msg, msglen);
        logfmt_lit(&o, "\"");
    }
    /* cap - 2 was reserved for these two bytes */
    out[o.len++] = '}';
    out[o.len++] = '\n';
    out[o.len] = '\0';
    return o.len;
}

const char *
logfmt_dsn(const char *reply, char *out, size_t outsz)
{
    const char *p = reply;
    size_t      n;

    out[0] = '\0';
    if (reply == NULL)
        return out;
    /* "250 2.0.0 text" or "2.0.0 text" */
    if (isdigit((unsigned char)p[0]) && isdigit((unsigned char)p[1]) &&
        isdigit((unsigned char)p[2]) && (p[3] == ' ' || p[3] == '-'))
        p += 4;
    if ((p[0] < '2' || p[0] > '5') || p[1] != '.')
        return out;
    n = 2;
    while (isdigit((unsigned char)p[n]) && n < 5)
        n++;
    if (p[n] != '.' || n == 2)
        return out;
    n++;
    {
        size_t s = n;

        while (isdigit((unsigned char)p[n]) && n - s < 3)
            n++;
        if (n == s || (p[n] != ' ' && p[n] != '\0'))
            return out;
    }
    if (n < outsz) {
        memcpy(out, p, n);
        out[n] = '\0';
    }
    return out;
}


/* ---- who wrote a line (the log process) ---------------------------------- */

/* logfmt_lit - skip lit at *p (1), or leave *p (0). */
static int
logfmt_lit_at(const char **p, const char *end, const char *lit)
{
    size_t n = strlen(lit);

    if ((size_t)(end - *p) < n || memcmp(*p, lit, n) != 0)
        return 0;
    *p += n;
    return 1;
}


/* logfmt_num_at - a run of 1 to 9 digits at *p into *v (1), else 0. */
static int
logfmt_num_at(const char **p, const char *end, long *v)
{
    const char *s = *p;

    *v = 0;
    while (s < end && s - *p < 9 && *s >= '0' && *s <= '9')
        *v = *v * 10 + (*s++ - '0');
    if (s == *p)
        return 0;
    *p = s;
    return 1;
}


/* logfmt_jstr_at - a JSON string at *p, its escapes well formed (1). */
static int
logfmt_jstr_at(const char **p, const char *end)
{
    const char *s = *p;

    if (s >= end || *s++ != '"')
        return 0;
    while (s < end && *s != '"') {
        if (*s++ != '\\')
            continue;
        if (s >= end)
            return 0;
        if (*s++ == 'u') {
            for (int k = 0; k < 4; k++, s++)
                if (s >= end || !isxdigit((unsigned char)*s))
                    return 0;
        }
    }
    if (s >= end)
        return 0;
    *p = s + 1;
    return 1;
}


/* logfmt_fields_at - the rest of a record after "event": its value, then
 * only ,"key":value pairs and the closing brace at the very end.  A key
 * is plain (no escape: "pro\u0063" is "proc" to a JSON reader) and none
 * of the keys the line starts with comes again, as the last of two equal
 * keys is the one most readers keep; a value is a string or a number, so
 * no object hides a second record. */
static int
logfmt_fields_at(const char *p, const char *end)
{
    static const char *const fixed[] = { "ts", "level", "proc", "pid",
        "event" };
    const char *k;
    size_t      kn;

    if (!logfmt_jstr_at(&p, end))
        return 0;
    while (p < end && *p == ',') {
        k = ++p;
        if (p >= end || *p++ != '"')
            return 0;
        while (p < end && (islower((unsigned char)*p) ||
            isdigit((unsigned char)*p) || *p == '_'))
            p++;
        kn = (size_t)(p - k - 1);
        if (kn == 0 || !logfmt_lit_at(&p, end, "\":"))
            return 0;
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
            if (strlen(fixed[i]) == kn && memcmp(k + 1, fixed[i], kn) == 0)
                return 0;
        if (p < end && *p == '"') {
            if (!logfmt_jstr_at(&p, end))
                return 0;
        } else {
            const char *v = p;

            while (p < end && (isdigit((unsigned char)*p) || *p == '-' ||
                *p == '.'))
                p++;
            if (p == v)
                return 0;
        }
    }
    return end - p == 1 && *p == '}';
}


int
logfmt_worker_line(const char *line, size_t n, long pid)
{
    const char *p = line, *end = line + n, *sp;
    long        v, shard;

    /* what log.c makes holds no control character and only UTF-8: a
     * line with one is no worker's (and could drive a terminal) */
    for (size_t i = 0, k; i < n; i += k) {
        const unsigned char *u = (const unsigned char *)line + i;

        if (u[0] < 0x20 || u[0] == 0x7f || logfmt_c1(u, n - i) ||
            (k = logfmt_utf8_len(u, n - i)) == 0)
            return 0;
    }
    if (logfmt_lit_at(&p, end, "{\"ts\":")) {
        /* walked key by key (not searched for): a string may hold any
         * text, and only the structure says what is a key */
        return logfmt_jstr_at(&p, end) &&
            logfmt_lit_at(&p, end, ",\"level\":") &&
            logfmt_jstr_at(&p, end) &&
            (logfmt_lit_at(&p, end, ",\"proc\":\"cluster\",\"pid\":") ||
            (logfmt_lit_at(&p, end, ",\"proc\":\"worker ") &&
            logfmt_num_at(&p, end, &shard) &&
            logfmt_lit_at(&p, end, "\",\"pid\":"))) &&
            logfmt_num_at(&p, end, &v) && v == pid &&
            logfmt_lit_at(&p, end, ",\"event\":") &&
            logfmt_fields_at(p, end);
    }
    if ((sp = memchr(p, ' ', n < 40 ? n : 40)) == NULL)
        return 0;                   /* the time stamp, then one blank */
    p = sp;
    /* the cluster sync agent (an unprivileged child too) as "cluster" */
    return logfmt_lit_at(&p, end, " mtad[") && logfmt_num_at(&p, end, &v) &&
        v == pid && (logfmt_lit_at(&p, end, "]: cluster: ") ||
        (logfmt_lit_at(&p, end, "]: worker ") &&
        logfmt_num_at(&p, end, &shard) && logfmt_lit_at(&p, end, ": ")));
}
