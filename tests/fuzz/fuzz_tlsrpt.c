/*
 * fuzz_tlsrpt.c - libFuzzer target over the TLS-RPT parsers of untrusted
 * input (tlspol/tlsrpt.c, tlsrpt_report.c): the wire form a worker
 * sends the master, and the _smtp._tls TXT records.  `make fuzz` builds
 * and runs it; seeds in tests/fuzz/corpus/tlsrpt/.
 *
 * The first byte picks the parser.  Wire: merge into a table; on success
 * the table's dump must merge again into a second table whose dump is the
 * same bytes (the format round-trips), and the listing and the JSON of
 * every domain must be built without a crash; merged for two days only
 * (skipping the others), it must succeed too and hold no other day.  TXT: the input split at
 * NUL bytes into records; on success 1..TLSRPT_RUA_MAX addresses, each
 * printable ASCII with one '@'; on failure a non-empty reason.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "tlspol/tlspol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
static void fuzz_window(const char *p, size_t n);

static void
fuzz_wire(const char *p, size_t n)
{
    struct tls_rpt_tab *a = tls_rpt_tab_new(), *b = tls_rpt_tab_new();
    struct tls_rpt_info in;
    struct buf         d1, d2, t;
    char               err[256];

    buf_init(&d1);
    buf_init(&d2);
    buf_init(&t);
    if (tls_rpt_tab_merge(a, p, n, err, sizeof(err)) < 0) {
        if (err[0] == '\0' || tls_rpt_tab_count(a) != 0)
            abort();
        goto out;
    }
    fuzz_window(p, n);
    tls_rpt_tab_dump(a, &d1);
    buf_append(&d1, "", 1);             /* never an empty (NULL) buffer */
    if (tls_rpt_tab_merge(b, d1.data, d1.len - 1, err, sizeof(err)) < 0)
        abort();                        /* our own dump must parse */
    tls_rpt_tab_dump(b, &d2);
    buf_append(&d2, "", 1);
    if (d1.len != d2.len || memcmp(d1.data, d2.data, d1.len) != 0)
        abort();
    tls_rpt_tab_text(a, NULL, &t);
    memset(&in, 0, sizeof(in));
    in.organization = in.contact = in.submitter = in.report_id = "x";
    in.domain = "example.org";
    tls_rpt_json(a, &in, &t);
out:
    buf_free(&d1);
    buf_free(&d2);
    buf_free(&t);
    tls_rpt_tab_free(a);
    tls_rpt_tab_free(b);
}

static int
take_any(uint32_t day, const char *domain, const char *blocks, size_t n,
    void *arg)
{
    (void)day; (void)domain; (void)blocks; (void)n; (void)arg;
    return 0;
}


/* fuzz_window - text merged fine as a whole: for days lo..hi it merges
 * too, and nothing outside lo..hi is kept. */
static void
fuzz_window(const char *p, size_t n)
{
    struct tls_rpt_tab *c = tls_rpt_tab_new();
    const uint32_t     lo = 20000, hi = 20001;
    size_t             skipped;
    char               err[256];

    if (tls_rpt_tab_merge_days(c, p, n, lo, hi, &skipped, err,
        sizeof(err)) < 0)
        abort();
    if (tls_rpt_tab_take(c, lo - 1, take_any, NULL) != 0)
        abort();                        /* a day before lo was kept */
    (void)tls_rpt_tab_take(c, hi, take_any, NULL);
    if (tls_rpt_tab_count(c) != 0)
        abort();                        /* a day after hi was kept */
    tls_rpt_tab_free(c);
}


static void
fuzz_txt(const char *p, size_t n)
{
    char       *copy = malloc(n + 1), rua[TLS_RPT_RUA_MAX][256], err[256];
    const char *txt[8];
    size_t      ntxt = 0, nrua, nh, i = 0;

    memcpy(copy, p, n);
    copy[n] = '\0';
    while (i <= n && ntxt < 8) {
        txt[ntxt++] = copy + i;
        i += strlen(copy + i) + 1;
    }
    err[0] = '\0';
    if (tls_rpt_rua_parse(txt, ntxt, rua, &nrua, &nh, err, sizeof(err)) == 0) {
        if (nrua == 0 || nrua > TLS_RPT_RUA_MAX)
            abort();
        for (size_t k = 0; k < nrua; k++) {
            const char *at = strchr(rua[k], '@');

            if (at == NULL || strchr(at + 1, '@') != NULL)
                abort();
            for (const char *c = rua[k]; *c; c++)
                if (*c <= 0x20 || *c >= 0x7f)
                    abort();
        }
    } else if (err[0] == '\0') {
        abort();
    }
    free(copy);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        fuzz_txt((const char *)data + 1, size - 1);
    else
        fuzz_wire((const char *)data + 1, size - 1);
    return 0;
}
