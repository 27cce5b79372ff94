/*
 * fuzz_sasl.c - libFuzzer target over the lines Dovecot's auth service
 * sends (sasl/sasl.c), which smtpd/session_dovecot.c parses for every
 * worker's connection.  `make fuzz` builds and runs it (seeds in
 * tests/fuzz/corpus/sasl/).
 *
 * The input is split at LF into lines, each parsed into a scratch buffer
 * of exactly n + 1 bytes (ASan catches a byte past it).  Checks: the kind
 * is one of the documented ones; a MECH name is 1..SASL_MECH_MAX bytes of
 * [A-Z0-9_-]; OK, CONT and FAIL carry an id > 0; a CONT's data is base64
 * characters only; every string points inside the scratch and is
 * NUL-terminated there; a too-small scratch is SASL_BAD, never a write
 * past it.  sasl_escape() of each line, parsed back as a one-field line,
 * gives the bytes back (escape and unescape agree), and
 * sasl_printable() leaves nothing outside printable ASCII.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sasl/sasl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_in(const char *s, const char *scratch, size_t sz)
{
    if (s == NULL)
        return;
    if (s < scratch || s >= scratch + sz || memchr(s, '\0',
        (size_t)(scratch + sz - s)) == NULL)
        abort();
}


static void
fuzz_line(const char *p, size_t n)
{
    struct sasl_line l;
    char            *scratch = malloc(n + 1), *esc, *back, pr[64];
    enum sasl_kind   k;
    size_t           i;
    long             en;

    if (scratch == NULL)
        return;
    k = sasl_parse(p, n, scratch, n + 1, &l);
    if (k < SASL_BAD || k > SASL_FAIL || k != l.kind)
        abort();
    if (k == SASL_MECH) {
        size_t m = strlen(l.mech);

        if (m == 0 || m > SASL_MECH_MAX)
            abort();
        for (i = 0; i < m; i++)
            if (!((l.mech[i] >= 'A' && l.mech[i] <= 'Z') ||
                (l.mech[i] >= '0' && l.mech[i] <= '9') || l.mech[i] == '-' ||
                l.mech[i] == '_'))
                abort();
    }
    if ((k == SASL_OK || k == SASL_CONT || k == SASL_FAIL) && l.id == 0)
        abort();
    if (k == SASL_CONT && (l.data == NULL ||
        !sasl_is_base64(l.data, strlen(l.data))))
        abort();
    if (k == SASL_OK || k == SASL_FAIL) {
        fuzz_in(l.user, scratch, n + 1);
        fuzz_in(l.reason, scratch, n + 1);
        sasl_printable(l.user != NULL ? l.user : "", pr, sizeof(pr));
        for (i = 0; pr[i] != '\0'; i++)
            if (pr[i] < ' ' || pr[i] > '~')
                abort();
    }
    if (n > 0 && sasl_parse(p, n, scratch, n, &l) != SASL_BAD)
        abort();                    /* a scratch one byte short */
    free(scratch);
    /* escape, then parse "X<TAB>escaped" back: the first field is the line */
    esc = malloc(2 * n + 3);
    if (esc == NULL)
        return;
    esc[0] = 'X';
    esc[1] = '\t';
    en = sasl_escape(p, n, esc + 2, 2 * n + 1);
    if (en < 0)
        abort();
    back = en + 2 <= SASL_LINE_MAX ? malloc((size_t)en + 3) : NULL;
    if (back != NULL && sasl_parse(esc, (size_t)en + 2, back,
        (size_t)en + 3, &l) == SASL_UNKNOWN) {
        if (memchr(p, '\0', n) != NULL)
            abort();                /* a NUL must not parse */
        if (strlen(back + 2) != n || memcmp(back + 2, p, n) != 0)
            abort();
    } else if (back != NULL && memchr(p, '\0', n) == NULL) {
        abort();                    /* no NUL: must come back */
    }
    free(back);
    free(esc);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *nl;

    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        fuzz_line(p, (size_t)((nl != NULL ? nl : end) - p));
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    return 0;
}
