/*
 * fuzz_env.c - libFuzzer target over the spool's text formats
 * (spool/spool_env.c): the envelope at the head of a queue file and the
 * delivery state file.  Both are read back from disk, where a damaged or
 * hand-edited file must be refused (SPOOL_EFORMAT), never crash a worker.
 *
 * Checks: an envelope that parses renders back to an envelope that parses
 * to the same rendering (a fixed point), consumed never passes the input;
 * a state file that parses for a fixed three-recipient envelope renders
 * back to one that parses to the same rendering.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spool/spool.h"
#include "spool/spool_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *
fuzz_copy(const uint8_t *p, size_t n)
{
    char *c = malloc(n ? n : 1);        /* exact size: ASan sees overreads */

    if (c == NULL)
        abort();
    memcpy(c, p, n);
    return c;
}


static void
fuzz_envelope(const char *p, size_t n)
{
    struct spool_env *e = NULL, *e2 = NULL;
    char             *out, *out2;
    size_t            used = 0, len, len2;

    if (spool_env_parse(p, n, &e, &used) != SPOOL_OK) {
        if (e != NULL)
            abort();                    /* nothing handed out on failure */
        return;
    }
    if (used > n)
        abort();
    spool_env_format(e, &out, &len);
    if (spool_env_parse(out, len, &e2, &used) != SPOOL_OK || used != len)
        abort();
    spool_env_format(e2, &out2, &len2);
    if (len2 != len || memcmp(out, out2, len) != 0)
        abort();
    free(out);
    free(out2);
    spool_env_free(e);
    spool_env_free(e2);
}


/* A fixed envelope the state file is checked against. */
static void
fuzz_base(struct spool_env *e, struct spool_rcpt *r)
{
    memset(e, 0, sizeof(*e));
    memset(r, 0, 3 * sizeof(*r));
    memcpy(e->id, "1A2B3C4D5E6F7A8B", SPOOL_ID_SIZE);
    e->sender = (char *)"a@b.example";
    e->rcpt = r;
    e->nrcpt = 3;
    r[0].addr = (char *)"x@y.example";
    r[1].addr = (char *)"z@y.example";
    r[2].addr = (char *)"w@y.example";
}


static void
fuzz_state_free(struct spool_env *e)
{
    for (size_t i = 0; i < e->nrcpt; i++) {
        free(e->rcpt[i].last_reply);
        free(e->rcpt[i].relay);
        free(e->rcpt[i].tls);
        free(e->rcpt[i].cls);
        e->rcpt[i].last_reply = e->rcpt[i].relay = e->rcpt[i].tls = NULL;
        e->rcpt[i].cls = NULL;
    }
}


static void
fuzz_state(const char *p, size_t n)
{
    struct spool_env  e, e2;
    struct spool_rcpt r[3], r2[3];
    char             *out, *out2;
    size_t            len, len2;

    fuzz_base(&e, r);
    if (spool_state_parse(p, n, &e) != SPOOL_OK) {
        fuzz_state_free(&e);
        return;
    }
    len = spool_state_render(&e, NULL);
    out = malloc(len);
    if (out == NULL || spool_state_render(&e, out) != len)
        abort();
    fuzz_base(&e2, r2);
    if (spool_state_parse(out, len, &e2) != SPOOL_OK)
        abort();
    len2 = spool_state_render(&e2, NULL);
    out2 = malloc(len2);
    if (out2 == NULL || len2 != len || spool_state_render(&e2, out2) != len ||
        memcmp(out, out2, len) != 0)
        abort();
    free(out);
    free(out2);
    fuzz_state_free(&e);
    fuzz_state_free(&e2);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *p;

    if (size < 1)
        return 0;
    /* First byte: which format; the rest is the file. */
    p = fuzz_copy(data + 1, size - 1);
    if (data[0] & 1)
        fuzz_state(p, size - 1);
    else
        fuzz_envelope(p, size - 1);
    free(p);
    return 0;
}
