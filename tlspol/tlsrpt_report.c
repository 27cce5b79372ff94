/*
 * tlsrpt_report.c - the TLS-RPT report: the rua= of _smtp._tls TXT, the
 * JSON of RFC 8460 section 4, gzip, and the mail of section 5.3.
 *
 * PURPOSE   Turn one policy domain's day of counters into the message a
 *           receiving domain's report tools expect.
 * CONTRACT  Pure (buffers in, buffers out; zlib for gzip).  Text from the
 *           network (policy strings, MX names) is JSON-escaped; invalid
 *           UTF-8 becomes U+FFFD.  Header fields carry only names checked
 *           to be LDH domains and addresses checked by tls_rpt_rua_parse().
 *           https: reporting URIs are left out (counted, not used).
 * FAILURE   tls_rpt_rua_parse() says why a record is unusable; the gzip
 *           steps fail only when zlib does.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/util.h"
#include "tlspol/tlspol_int.h"

/* ---- rua= ------------------------------------------------------------- */

static int
tlsrpt_hex(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}


/* tlsrpt_addr_ok - an address we put in To: and RCPT TO: printable
 * ASCII, one '@', a non-empty local part without specials, and an LDH
 * domain with a dot. */
static int
tlsrpt_addr_ok(const char *a)
{
    const char *at = strchr(a, '@');
    size_t      n = strlen(a);

    if (at == NULL || at == a || strchr(at + 1, '@') != NULL || n > 254 ||
        at[1] == '\0' || strchr(at + 1, '.') == NULL)
        return 0;
    for (const char *p = a; p < at; p++)
        if (*p <= 0x20 || *p >= 0x7f || strchr("<>()[]\\,;:\"", *p) != NULL)
            return 0;
    for (const char *p = at + 1; *p != '\0'; p++)
        if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.')
            return 0;
    return at[1] != '.' && a[n - 1] != '.' && strstr(at, "..") == NULL;
}


/* tlsrpt_mailto - "mailto:" URI s[0..n) into out: percent-decoded,
 * without "?" headers.  0 or -1. */
static int
tlsrpt_mailto(const char *s, size_t n, char *out, size_t outsz)
{
    size_t k = 0;

    for (size_t i = 7; i < n && s[i] != '?'; i++) {
        int c = (unsigned char)s[i], hi, lo;

        if (c == '%') {
            if (i + 2 >= n || (hi = tlsrpt_hex(s[i + 1])) < 0 ||
                (lo = tlsrpt_hex(s[i + 2])) < 0)
                return -1;
            c = hi << 4 | lo;
            i += 2;
        }
        if (k + 1 >= outsz)
            return -1;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    return tlsrpt_addr_ok(out) ? 0 : -1;
}


static const char *
tlsrpt_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}


/* tlsrpt_rua_uris - the comma-separated URIs of a rua= value. */
static int
tlsrpt_rua_uris(const char *v, const char *end, char rua[][256], size_t *n,
    size_t *nhttps, char *err, size_t errsz)
{
    const char *p = v, *q, *e;

    while (p < end) {
        if ((p = tlsrpt_skip_ws(p, end)) >= end)
            break;
        q = memchr(p, ',', (size_t)(end - p));
        if (q == NULL)
            q = end;
        e = q;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if ((size_t)(e - p) > 7 && strncasecmp(p, "mailto:", 7) == 0) {
            if (*n < TLS_RPT_RUA_MAX &&
                tlsrpt_mailto(p, (size_t)(e - p), rua[*n], 256) == 0)
                (*n)++;
        } else if ((size_t)(e - p) > 8 && strncasecmp(p, "https://", 8) == 0) {
            (*nhttps)++;
        } else if (e > p) {
            snprintf(err, errsz, "rua: unknown URI scheme");
            return -1;
        }
        p = q + (q < end);
    }
    return 0;
}


int
tls_rpt_rua_parse(const char *const *txt, size_t ntxt, char rua[][256],
    size_t *n, size_t *nhttps, char *err, size_t errsz)
{
    const char *rec = NULL, *p, *end, *f, *fe, *eq;
    size_t      nrec = 0;
    int         have_rua = 0;

    *n = *nhttps = 0;
    /* RFC 8460 3: records that do not begin with "v=TLSRPTv1" are
     * discarded; any other count than one means no TLSRPT */
    for (size_t i = 0; i < ntxt; i++)
        if (strncmp(txt[i], "v=TLSRPTv1", 10) == 0 &&
            (txt[i][10] == ';' || txt[i][10] == ' ' || txt[i][10] == '\t' ||
            txt[i][10] == '\0')) {
            rec = txt[i];
            nrec++;
        }
    if (nrec != 1) {
        snprintf(err, errsz, nrec == 0 ? "no v=TLSRPTv1 record" :
            "%zu v=TLSRPTv1 records", nrec);
        return -1;
    }
    end = rec + strlen(rec);
    p = strchr(rec, ';');
    while (p != NULL && p < end) {
        f = tlsrpt_skip_ws(p + 1, end);
        fe = memchr(f, ';', (size_t)(end - f));
        p = fe;
        if (fe == NULL)
            fe = end;
        eq = memchr(f, '=', (size_t)(fe - f));
        if (eq == NULL)
            continue;                   /* empty field (a final ';') */
        if (eq - f == 3 && strncmp(f, "rua", 3) == 0) {
            if (have_rua) {
                snprintf(err, errsz, "rua given twice");
                return -1;
            }
            have_rua = 1;
            if (tlsrpt_rua_uris(eq + 1, fe, rua, n, nhttps, err, errsz) < 0)
                return -1;
        }
        /* other fields are extensions: ignored (RFC 8460 3) */
    }
    if (!have_rua) {
        snprintf(err, errsz, "no rua= field");
        return -1;
    }
    if (*n == 0) {
        snprintf(err, errsz, *nhttps > 0 ? "only https: reporting URIs "
            "(not supported)" : "no usable mailto: address");
        return -1;
    }
    return 0;
}

/* ---- JSON -------------------------------------------------------------- */

/* tlsrpt_utf8_len - length of the valid UTF-8 sequence at s (n bytes
 * left), or 0 when it is not one. */
static size_t
tlsrpt_utf8_len(const unsigned char *s, size_t n)
{
    size_t   len;
    uint32_t c;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, c = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, c = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, c = s[0] & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    if ((len == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) ||
        (len == 4 && (c < 0x10000 || c > 0x10ffff)))
        return 0;
    return len;
}


static void
tlsrpt_jstr(struct buf *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t               n = strlen(s), l;

    buf_append(out, "\"", 1);
    while (n > 0) {
        if (*p == '"' || *p == '\\') {
            char e[2] = { '\\', (char)*p };

            buf_append(out, e, 2);
            l = 1;
        } else if (*p < 0x20 || *p == 0x7f) {
            buf_printf(out, "\\u%04x", *p);
            l = 1;
        } else if ((l = tlsrpt_utf8_len(p, n)) == 0) {
            buf_append(out, "\\ufffd", 6);
            l = 1;
        } else {
            buf_append(out, p, l);
        }
        p += l;
        n -= l;
    }
    buf_append(out, "\"", 1);
}


static void
tlsrpt_rfc3339(uint64_t s, char *out, size_t outsz)
{
    time_t    t = (time_t)s;
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, outsz, "%Y-%m-%dT%H:%M:%SZ", &tm);
}


/* tlsrpt_json_policy - one element of "policies". */
static void
tlsrpt_json_policy(const struct tlsrpt_pol *p, struct buf *out)
{
    int first = 1;

    buf_printf(out, "{\"policy\":{\"policy-type\":\"%s\",\"policy-string\":[",
        tls_rpt_type_name(p->type));
    for (size_t i = 0; i < p->nstrings; i++) {
        if (i > 0)
            buf_append(out, ",", 1);
        tlsrpt_jstr(out, p->strings[i]);
    }
    buf_printf(out, "],\"policy-domain\":");
    tlsrpt_jstr(out, p->domain);
    if (p->type == TLS_RPT_STS) {
        /* RFC 8460 4.4: mx-host, the "mx" patterns of the STS policy */
        buf_printf(out, ",\"mx-host\":[");
        for (size_t i = 0; i < p->nstrings; i++) {
            const char *s = p->strings[i];

            if (strncmp(s, "mx:", 3) != 0)
                continue;
            s += 3;
            while (*s == ' ' || *s == '\t')
                s++;
            if (!first)
                buf_append(out, ",", 1);
            tlsrpt_jstr(out, s);
            first = 0;
        }
        buf_printf(out, "]");
    }
    buf_printf(out, "},\"summary\":{\"total-successful-session-count\":%"
        PRIu64 ",\"total-failure-session-count\":%" PRIu64 "}", p->ok,
        p->fail);
    if (p->ndet > 0) {
        buf_printf(out, ",\"failure-details\":[");
        for (size_t i = 0; i < p->ndet; i++) {
            const struct tlsrpt_detail *d = &p->det[i];

            buf_printf(out, "%s{\"result-type\":", i > 0 ? "," : "");
            tlsrpt_jstr(out, d->result);
            if (d->ip[0] != '\0') {
                buf_printf(out, ",\"receiving-ip\":");
                tlsrpt_jstr(out, d->ip);
            }
            if (d->mx[0] != '\0') {
                buf_printf(out, ",\"receiving-mx-hostname\":");
                tlsrpt_jstr(out, d->mx);
            }
            buf_printf(out, ",\"failed-session-count\":%" PRIu64, d->n);
            if (d->reason[0] != '\0') {
                buf_printf(out, ",\"failure-reason-code\":");
                tlsrpt_jstr(out, d->reason);
            }
            buf_printf(out, "}");
        }
        buf_printf(out, "]");
    }
    buf_printf(out, "}");
}


int
tls_rpt_tab_domain(const struct tls_rpt_tab *t, char *out, size_t outsz)
{
    size_t              k, i;
    struct tlsrpt_pol **v = tlsrpt_tab_sorted(t, &k);
    int                 rc = k > 0 ? 0 : -1;

    for (i = 1; i < k; i++)
        if (strcmp(v[i]->domain, v[0]->domain) != 0)
            rc = -1;
    if (rc == 0)
        util_strlcpy(out, v[0]->domain, outsz);
    free(v);
    return rc;
}


void
tls_rpt_json(const struct tls_rpt_tab *t, const struct tls_rpt_info *in,
    struct buf *out)
{
    char                s[32], e[32];
    size_t              n, k = 0;
    struct tlsrpt_pol **v = tlsrpt_tab_sorted(t, &n);

    tlsrpt_rfc3339(in->start_s, s, sizeof(s));
    tlsrpt_rfc3339(in->end_s, e, sizeof(e));
    buf_printf(out, "{\"organization-name\":");
    tlsrpt_jstr(out, in->organization);
    buf_printf(out, ",\"date-range\":{\"start-datetime\":\"%s\","
        "\"end-datetime\":\"%s\"},\"contact-info\":", s, e);
    tlsrpt_jstr(out, in->contact);
    buf_printf(out, ",\"report-id\":");
    tlsrpt_jstr(out, in->report_id);
    buf_printf(out, ",\"policies\":[");
    for (size_t i = 0; i < n; i++) {
        if (strcasecmp(v[i]->domain, in->domain) != 0)
            continue;
        if (k++ > 0)
            buf_append(out, ",", 1);
        tlsrpt_json_policy(v[i], out);
    }
    buf_printf(out, "]}\n");
    free(v);
}

/* ---- gzip, base64, the mail ------------------------------------------ */

int
tls_rpt_gzip(const void *p, size_t n, struct buf *out)
{
    z_stream z;
    int      rc;

    memset(&z, 0, sizeof(z));
    /* 15 + 16: a gzip wrapper (RFC 1952), not zlib's */
    if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
        Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    do {
        buf_reserve(out, 16384);
        z.next_out = (Bytef *)buf_tail(out);
        z.avail_out = (uInt)buf_room(out);
        rc = deflate(&z, Z_FINISH);
        buf_produce(out, buf_room(out) - z.avail_out);
    } while (rc == Z_OK || rc == Z_BUF_ERROR);
    deflateEnd(&z);
    return rc == Z_STREAM_END ? 0 : -1;
}


static void
tlsrpt_base64(const unsigned char *p, size_t n, struct buf *out)
{
    unsigned char line[80];

    /* 57 bytes -> one 76-character line (RFC 2045 6.8) */
    for (size_t i = 0; i < n; i += 57) {
        int k = EVP_EncodeBlock(line, p + i, (int)(n - i < 57 ? n - i : 57));

        buf_append(out, line, (size_t)k);
        buf_append(out, "\r\n", 2);
    }
}


static void
tlsrpt_date(uint64_t ms, char *out, size_t outsz)
{
    time_t    t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, outsz, "%a, %d %b %Y %H:%M:%S +0000", &tm);
}


int
tls_rpt_mail(const struct tls_rpt_tab *t, const struct tls_rpt_info *in,
    struct buf *out)
{
    struct buf json, gz;
    char       date[64], bnd[64];
    int        rc;

    buf_init(&json);
    buf_init(&gz);
    tls_rpt_json(t, in, &json);
    rc = tls_rpt_gzip(buf_head(&json), buf_avail(&json), &gz);
    if (rc < 0)
        goto done;
    tlsrpt_date(in->now_ms, date, sizeof(date));
    snprintf(bnd, sizeof(bnd), "=_tlsrpt_%" PRIx64 "_%" PRIx64, in->now_ms,
        in->start_s);
    buf_printf(out, "From: %s\r\nDate: %s\r\nTo: ", in->sender, date);
    for (size_t i = 0; i < in->nrua; i++)
        buf_printf(out, "%s%s", i > 0 ? ",\r\n " : "", in->rua[i]);
    buf_printf(out, "\r\nSubject: Report Domain: %s\r\n Submitter: %s\r\n"
        " Report-ID: <%s>\r\n", in->domain, in->submitter, in->report_id);
    buf_printf(out, "TLS-Report-Domain: %s\r\nTLS-Report-Submitter: %s\r\n",
        in->domain, in->submitter);
    /* RFC 8460 5.3: reports go out despite TLS failures; RFC 8689 4.1
     * says so to every MTA on the way (and to ours) */
    buf_printf(out, "TLS-Required: No\r\n");
    buf_printf(out, "Message-ID: <%s>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: multipart/report; report-type=\"tlsrpt\";\r\n"
        " boundary=\"%s\"\r\n\r\n", in->report_id, bnd);
    buf_printf(out, "This is a multipart message in MIME format.\r\n\r\n"
        "--%s\r\nContent-Type: text/plain; charset=\"us-ascii\"\r\n"
        "Content-Transfer-Encoding: 7bit\r\n\r\n"
        "This is an aggregate TLS report from %s for %s.\r\n\r\n",
        bnd, in->submitter, in->domain);
    buf_printf(out, "--%s\r\nContent-Type: application/tlsrpt+gzip\r\n"
        "Content-Transfer-Encoding: base64\r\n"
        "Content-Disposition: attachment;\r\n"
        " filename=\"%s!%s!%" PRIu64 "!%" PRIu64 ".json.gz\"\r\n\r\n",
        bnd, in->submitter, in->domain, in->start_s, in->end_s);
    tlsrpt_base64((const unsigned char *)buf_head(&gz), buf_avail(&gz), out);
    buf_printf(out, "\r\n--%s--\r\n", bnd);
done:
    buf_free(&json);
    buf_free(&gz);
    return rc;
}
