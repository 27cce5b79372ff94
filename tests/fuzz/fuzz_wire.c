/*
 * fuzz_wire.c - libFuzzer target over the listing records a worker
 * streams to mtactl (spool/spool_wire.c).  mtactl may run as
 * root; the worker that wrote the bytes runs sandboxed as the mtad user
 * and may be compromised, so the decoder must refuse anything malformed
 * (SPOOL_EFORMAT), never read past the record.
 *
 * Checks: a record that decodes encodes back to the same bytes (the
 * format has one spelling per message), every string it hands out ends
 * inside the input.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "spool/spool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_inside(const char *s, const char *p, size_t n)
{
    if (s != NULL && (s < p || s + strlen(s) >= p + n))
        abort();
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct spool_env   e;
    struct spool_rcpt *r = NULL;
    size_t             cap = 0;
    unsigned           st;
    char              *p = malloc(size ? size : 1);   /* exact: ASan */
    struct buf         body, rec;

    if (p == NULL)
        abort();
    memcpy(p, data, size);
    if (spool_wire_decode(p, size, &e, &st, &r, &cap) == SPOOL_OK) {
        fuzz_inside(e.sender, p, size);
        for (size_t i = 0; i < e.nrcpt; i++) {
            fuzz_inside(e.rcpt[i].addr, p, size);
            fuzz_inside(e.rcpt[i].relay, p, size);
            fuzz_inside(e.rcpt[i].tls, p, size);
            fuzz_inside(e.rcpt[i].last_reply, p, size);
        }
        buf_init(&body);
        buf_init(&rec);
        spool_wire_body(&body, &e);
        spool_wire_head(&rec, e.id, st, buf_avail(&body));
        buf_append(&rec, buf_head(&body), buf_avail(&body));
        /* an embedded NUL shortens a string: then the bytes differ */
        if (buf_avail(&rec) == size + 4 &&
            memcmp(buf_head(&rec) + 4, p, size) != 0)
            abort();
        buf_free(&body);
        buf_free(&rec);
    }
    free(r);
    free(p);
    return 0;
}
