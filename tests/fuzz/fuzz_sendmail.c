/*
 * fuzz_sendmail.c - libFuzzer target over mtad-sendmail's -t header scan
 * (sendmail/scan.c): the message a local user pipes into mtad-sendmail,
 * read for the recipients of its To:, Cc: and Bcc: fields, Bcc: removed.
 *
 * Input: byte 0 bit 0 says -t (collect recipients); the rest is the
 * message as sm_read_msg() holds it (not NUL-terminated; copied to a
 * buffer of its exact size, so ASan sees a read past it).
 *
 * Checks: every address is 1..SM_ADDR_MAX bytes without CR, LF, any
 * other control byte, blank, '<' or '>' (nothing that would change the
 * "RCPT TO:<%s>" command), no longer than the message; without -t none
 * is collected and none refused; the bytes after the header section (the
 * body: from the first line that is no header field) are kept as they
 * were; the new length is at most the old; the result is the same with
 * and without -t; and scanning the result again changes nothing (no Bcc: field is left, none is made by the removal).
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sendmail/scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ref_field - the line at p[i..n) starts with a field name and its colon
 * (printable characters but ':', then blanks). */
static int
ref_field(const char *p, size_t i, size_t n)
{
    size_t s = i;

    while (i < n && p[i] > ' ' && p[i] < 0x7f && p[i] != ':')
        i++;
    if (i == s)
        return 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    return i < n && p[i] == ':';
}


/* ref_body - where the body starts: at the first line that is neither a
 * field nor (after the first line) a folded one -- the empty line among
 * them -- else n. */
static size_t
ref_body(const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (i > 0 && p[i - 1] != '\n')
            continue;
        if ((p[i] == ' ' || p[i] == '\t') && i > 0)
            continue;
        if (!ref_field(p, i, n))
            return i;
    }
    return n;
}


static void
fuzz_addr(const char *a, size_t msglen)
{
    size_t n = strlen(a), i;

    if (n == 0 || n > SM_ADDR_MAX || n > msglen)
        abort();
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)a[i];

        if (c == '\r' || c == '\n' || c < 0x20 || c == 0x7f || c == ' ' ||
            c == '<' || c == '>')
            abort();
    }
}


static char *
fuzz_copy(const uint8_t *p, size_t n)
{
    char *c = malloc(n ? n : 1);

    if (c == NULL)
        abort();
    memcpy(c, p, n);
    return c;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sm_rcpts r = { NULL, 0 }, none = { NULL, 0 };
    char           *msg, *other;
    size_t          n, len, olen, again, body, i;
    int             want, bad;

    if (size < 1)
        return 0;
    want = data[0] & 1;
    n = size - 1;
    msg = fuzz_copy(data + 1, n);
    other = fuzz_copy(data + 1, n);
    body = ref_body(msg, n);
    len = n;
    bad = sm_scan_headers(&r, msg, &len, want);
    if (bad < 0 || len > n || (!want && (bad != 0 || r.n != 0)))
        abort();
    for (i = 0; i < r.n; i++)
        fuzz_addr(r.v[i], n);
    /* the body is kept */
    if (len < n - body || memcmp(msg + len - (n - body), data + 1 + body,
        n - body) != 0)
        abort();
    /* Bcc: is removed whether or not the recipients are collected */
    olen = n;
    (void)sm_scan_headers(&none, other, &olen, !want);
    if (olen != len || memcmp(other, msg, len) != 0)
        abort();
    sm_rcpt_free(&none);
    /* nothing left to remove */
    again = len;
    (void)sm_scan_headers(&none, other, &again, 0);
    if (again != len || memcmp(other, msg, len) != 0 || none.n != 0)
        abort();
    sm_rcpt_free(&r);
    free(msg);
    free(other);
    return 0;
}
