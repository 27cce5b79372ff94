/*
 * sasl.c - Dovecot auth-client protocol lines (see sasl.h).
 *
 * FORMAT    A line is "NAME TAB field TAB field ..." and ends in LF (cut off
 *           by the caller).  Fields are tab-escaped: \001 then '0' NUL, '1'
 *           \001, 't' TAB, 'r' CR, 'n' or 'l' LF, anything else itself.
 *           Optional fields are "name" or "name=value"; unknown ones are
 *           ignored, as the protocol asks.
 * TRUST     The server is trusted to authenticate, not to be well-formed: a
 *           line may be cut, too long, or hold any byte.  A NUL (raw, or
 *           escaped) makes the line SASL_BAD, so that no string is silently
 *           cut short; so does an id of 0 or over 2^32-1 and a CONT whose
 *           data is not base64 (it would go to the SMTP client as is).
 */
#include <stdlib.h>
#include <string.h>

#include "sasl/sasl.h"

#define SASL_FIELDS_MAX 64          /* fields of one line we look at */

struct sasl_split {
    char    *f[SASL_FIELDS_MAX];
    unsigned n;
};


/* sasl_split - p[0..n) into unescaped, NUL-terminated fields in scratch;
 * -1 on a NUL or when scratch is short.  Fields past SASL_FIELDS_MAX are
 * dropped (they are optional ones; the required come first). */
static int
sasl_split(const char *p, size_t n, char *scratch, size_t sz,
    struct sasl_split *sp)
{
    size_t i, o = 0;

    if (sz < n + 1)
        return -1;
    sp->n = 0;
    sp->f[sp->n++] = scratch;
    for (i = 0; i < n; i++) {
        char c = p[i];

        if (c == '\0')
            return -1;
        if (c == '\t') {
            scratch[o++] = '\0';
            if (sp->n == SASL_FIELDS_MAX)
                return 0;
            sp->f[sp->n++] = scratch + o;
            continue;
        }
        if (c == '\001' && i + 1 < n) {
            switch (p[++i]) {
            case '0':
                return -1;
            case '1': c = '\001'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'n': case 'l': c = '\n'; break;
            default: c = p[i]; break;
            }
            if (c == '\0')
                return -1;
        }
        scratch[o++] = c;
    }
    scratch[o] = '\0';
    return 0;
}


/* sasl_uint - a decimal 0..max without sign or spaces; -1 if not. */
static long long
sasl_uint(const char *s, unsigned long long max)
{
    unsigned long long v = 0;

    if (*s == '\0' || strlen(s) > 10)
        return -1;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (unsigned)(*s - '0');
    }
    return v > max ? -1 : (long long)v;
}


static int
sasl_id(const char *s, uint32_t *id)
{
    long long v = sasl_uint(s, 0xffffffffULL);

    if (v <= 0)
        return -1;
    *id = (uint32_t)v;
    return 0;
}


int
sasl_is_base64(const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        char c = s[i];

        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
            (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '='))
            return 0;
    }
    return 1;
}


/* sasl_mech - MECH name [flags...] */
static enum sasl_kind
sasl_mech(const struct sasl_split *sp, struct sasl_line *out)
{
    static const struct { const char *name; unsigned flag; } flags[] = {
        { "plaintext", SASL_MECH_PLAINTEXT }, { "private", SASL_MECH_PRIVATE },
        { "anonymous", SASL_MECH_ANONYMOUS },
        { "dictionary", SASL_MECH_DICTIONARY }, { "active", SASL_MECH_ACTIVE },
        { "forward-secrecy", SASL_MECH_FWD_SECRECY },
        { "mutual-auth", SASL_MECH_MUTUAL },
    };
    const char *m;
    size_t      i, k;
    unsigned    a;

    if (sp->n < 2)
        return SASL_BAD;
    m = sp->f[1];
    if ((k = strlen(m)) == 0 || k > SASL_MECH_MAX)
        return SASL_BAD;
    for (i = 0; i < k; i++) {
        char c = m[i];

        if (c >= 'a' && c <= 'z')
            c = (char)(c - 'a' + 'A');
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_'))
            return SASL_BAD;
        out->mech[i] = c;
    }
    out->mech[k] = '\0';
    for (a = 2; a < sp->n; a++)
        for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
            if (strcmp(sp->f[a], flags[i].name) == 0)
                out->mech_flags |= flags[i].flag;
    return SASL_MECH;
}


/* sasl_args - the optional fields of OK and FAIL. */
static void
sasl_args(const struct sasl_split *sp, unsigned from, struct sasl_line *out)
{
    unsigned a;

    for (a = from; a < sp->n; a++) {
        const char *f = sp->f[a];

        if (strncmp(f, "user=", 5) == 0)
            out->user = f + 5;
        else if (strncmp(f, "reason=", 7) == 0)
            out->reason = f + 7;
        else if (strncmp(f, "resp=", 5) == 0)
            out->resp = 1;
        else if (strcmp(f, "temp") == 0 ||
            strcmp(f, "code=temp_fail") == 0)
            out->fail_flags |= SASL_FAIL_TEMP;
        else if (strcmp(f, "authz") == 0 ||
            strcmp(f, "code=authz_fail") == 0)
            out->fail_flags |= SASL_FAIL_AUTHZ;
        else if (strcmp(f, "code=user_disabled") == 0 ||
            strcmp(f, "user_disabled") == 0)
            out->fail_flags |= SASL_FAIL_DISABLED;
        else if (strcmp(f, "code=pass_expired") == 0 ||
            strcmp(f, "pass_expired") == 0)
            out->fail_flags |= SASL_FAIL_EXPIRED;
    }
}


enum sasl_kind
sasl_parse(const char *p, size_t n, char *scratch, size_t scratchsz,
    struct sasl_line *out)
{
    struct sasl_split sp;
    const char       *cmd;
    long long         v;

    memset(out, 0, sizeof(*out));
    out->kind = SASL_BAD;
    if (n > SASL_LINE_MAX || sasl_split(p, n, scratch, scratchsz, &sp) < 0)
        return SASL_BAD;
    cmd = sp.f[0];
    if (strcmp(cmd, "VERSION") == 0) {
        if (sp.n < 3 || (v = sasl_uint(sp.f[1], 1000000)) < 0)
            return SASL_BAD;
        out->major = (unsigned)v;
        if ((v = sasl_uint(sp.f[2], 1000000)) < 0)
            return SASL_BAD;
        out->minor = (unsigned)v;
        out->kind = SASL_VERSION;
    } else if (strcmp(cmd, "MECH") == 0) {
        out->kind = sasl_mech(&sp, out);
    } else if (strcmp(cmd, "SPID") == 0) {
        out->kind = SASL_SPID;
    } else if (strcmp(cmd, "CUID") == 0) {
        out->kind = SASL_CUID;
    } else if (strcmp(cmd, "COOKIE") == 0) {
        out->kind = SASL_COOKIE;
    } else if (strcmp(cmd, "DONE") == 0) {
        out->kind = SASL_DONE;
    } else if (strcmp(cmd, "OK") == 0 || strcmp(cmd, "FAIL") == 0) {
        if (sp.n < 2 || sasl_id(sp.f[1], &out->id) < 0)
            return SASL_BAD;
        sasl_args(&sp, 2, out);
        out->kind = cmd[0] == 'O' ? SASL_OK : SASL_FAIL;
    } else if (strcmp(cmd, "CONT") == 0) {
        if (sp.n < 2 || sasl_id(sp.f[1], &out->id) < 0)
            return SASL_BAD;
        out->data = sp.n > 2 ? sp.f[2] : "";
        if (!sasl_is_base64(out->data, strlen(out->data)))
            return SASL_BAD;
        out->kind = SASL_CONT;
    } else {
        out->kind = SASL_UNKNOWN;
    }
    return out->kind;
}


long
sasl_escape(const char *in, size_t n, char *out, size_t outsz)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        char c = in[i], e = 0;

        switch (c) {
        case '\0': e = '0'; break;
        case '\001': e = '1'; break;
        case '\t': e = 't'; break;
        case '\r': e = 'r'; break;
        case '\n': e = 'n'; break;
        default: break;
        }
        if (o + (e ? 2 : 1) >= outsz)
            return -1;
        if (e) {
            out[o++] = '\001';
            out[o++] = e;
        } else {
            out[o++] = c;
        }
    }
    if (o >= outsz)
        return -1;
    out[o] = '\0';
    return (long)o;
}


void
sasl_printable(const char *s, char *out, size_t outsz)
{
    size_t o = 0;

    if (outsz == 0)
        return;
    for (; *s != '\0' && o + 1 < outsz; s++)
        out[o++] = (*s >= ' ' && *s < 0x7f) ? *s : '?';
    out[o] = '\0';
}
