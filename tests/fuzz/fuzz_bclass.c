/*
 * fuzz_bclass.c - libFuzzer target over a bounce classes rules file
 * (bclass/bclass.c, bclass_parse()): delivery.bounce_classes names an
 * operator's file, which may have been written by hand or handed over.
 *
 * Input: the file's bytes (any, NUL included; not NUL-ended: the parser
 * must stay inside len).
 *
 * Checks: NULL with a non-empty one-line message "NAME:LINE:COL: ..."
 * without a control byte (it goes to the terminal of mtad -t), always for
 * a NUL byte; otherwise the rules classify a few replies (and the input
 * itself, cut at its first NUL, as a reply) to a class in range whose
 * name reads back as it, and the same input parses again to as many
 * rules.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bclass/bclass.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_err(const char *err, size_t errsz)
{
    size_t n = strnlen(err, errsz), i;

    if (n == 0 || n >= errsz || strncmp(err, "f:", 2) != 0)
        abort();
    for (i = 0; i < n; i++)
        if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f)
            abort();
}


static void
fuzz_class(const struct bclass_rules *r, const char *reply)
{
    int         c = bclass_of(r, reply);
    const char *name = bclass_name(c);

    if (c < 0 || c >= BCLASS_MAX || bclass_lookup(name, strlen(name)) != c)
        abort();
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const replies[] = {
        "550 5.1.1 no such user", "421-4.7.28 slow 421 4.7.28 down",
        "connect to mx[192.0.2.1]:25: Connection refused", "4.4.7 x",
        "host h said: 452 4.2.2 full", "", "550", "2.0.0",
    };
    char                *copy = malloc(size ? size : 1), err[512], *s;
    struct bclass_rules *r, *again;
    size_t               i;

    memcpy(copy, data, size);
    r = bclass_parse("f", copy, size, err, sizeof(err));
    if (r == NULL) {
        fuzz_err(err, sizeof(err));
        free(copy);
        return 0;
    }
    if (memchr(copy, '\0', size) != NULL)
        abort();                    /* a NUL is refused */
    for (i = 0; i < sizeof(replies) / sizeof(replies[0]); i++)
        fuzz_class(r, replies[i]);
    s = malloc(size + 1);
    memcpy(s, copy, size);
    s[size] = '\0';
    fuzz_class(r, s);
    again = bclass_parse("f", copy, size, err, sizeof(err));
    if (again == NULL || bclass_count(again) != bclass_count(r))
        abort();
    bclass_free(again);
    bclass_free(r);
    free(s);
    free(copy);
    return 0;
}
