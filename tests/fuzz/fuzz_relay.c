/*
 * fuzz_relay.c - libFuzzer target over what a next hop sends the relay
 * client (smtp/reply.c): SMTP replies, EHLO capabilities and the
 * enhanced status code taken from a reply.
 *
 * Checks: smtp_reply_parse() returns -1, 0 or 1; on 1 the reply length is
 * within the input and the limit, the code is 100..999 and the text is
 * terminated and holds no control byte (a hostile reply must not
 * reach a log, a DSN or a terminal raw); the same input split in two gives
 * the same answer once whole (parsing is stateless: a prefix never claims
 * a complete reply the whole input does not have); smtp_enhanced() gives
 * "c.s.d" or the default; smtp_ehlo_caps() only known bits, and LIMITS
 * values only with the LIMITS keyword.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "smtp/smtp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_text_clean(const char *t, size_t cap)
{
    size_t n = strnlen(t, cap), i;

    if (n >= cap)
        abort();
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)t[i];

        if (c < 0x20 || c == 0x7f ||
            (c == 0xc2 && i + 1 < n && (unsigned char)t[i + 1] < 0xa0))
            abort();
    }
}


static void
fuzz_enhanced(const char *reply)
{
    char out[16];
    const char *e = smtp_enhanced(reply, "4.0.0", out, sizeof(out));
    size_t      i, dots = 0;

    if (e != out || strnlen(out, sizeof(out)) >= sizeof(out))
        abort();
    if (out[0] != '2' && out[0] != '4' && out[0] != '5')
        abort();
    for (i = 1; out[i] != '\0'; i++) {
        if (out[i] == '.')
            dots++;
        else if (out[i] < '0' || out[i] > '9')
            abort();
    }
    if (dots != 2)
        abort();
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct smtp_reply r, r2;
    char              *p = malloc(size ? size : 1);
    struct smtp_ehlo   e;
    unsigned           caps;
    size_t             max = 64 + (size ? data[0] : 0) * 16;
    int                rc, rc2;

    if (p == NULL)
        abort();
    memcpy(p, data, size);
    rc = smtp_reply_parse(p, size, max, &r);
    if (rc < -1 || rc > 1)
        abort();
    if (rc == 1) {
        if (r.len == 0 || r.len > size || r.len > max || r.code < 100 ||
            r.code > 999)
            abort();
        fuzz_text_clean(r.text, sizeof(r.text));
        fuzz_enhanced(r.text);
        /* the reply alone parses to the same */
        rc2 = smtp_reply_parse(p, r.len, max, &r2);
        if (rc2 != 1 || r2.len != r.len || r2.code != r.code ||
            strcmp(r2.text, r.text) != 0)
            abort();
    }
    /* any prefix: never a complete reply longer than itself */
    if (size > 1) {
        rc2 = smtp_reply_parse(p, size / 2, max, &r2);
        if (rc2 == 1 && (r2.len > size / 2 || rc != 1 || r2.len != r.len))
            abort();
    }
    caps = smtp_ehlo_caps(p, size, &e);
    if (caps & ~(SMTP_CAP_PIPELINING | SMTP_CAP_SIZE | SMTP_CAP_8BITMIME |
        SMTP_CAP_SMTPUTF8 | SMTP_CAP_CHUNKING | SMTP_CAP_DSN |
        SMTP_CAP_BINARYMIME | SMTP_CAP_STARTTLS | SMTP_CAP_REQUIRETLS |
        SMTP_CAP_LIMITS))
        abort();                    /* only the capabilities it knows */
    /* limits come only with the keyword */
    if (!(caps & SMTP_CAP_LIMITS) &&
        (e.rcptmax != 0 || e.mailmax != 0 || e.rcptdomainmax != 0))
        abort();
    free(p);
    return 0;
}
