/*
 * fuzz_stsd.c - libFuzzer target over the MTA-STS decisions delivery
 * takes on what DNS and HTTPS hand it (tlspol/sts_policy.c): which of
 * a domain's `_mta-sts` TXT records counts (tls_sts_txt_pick), whether the
 * policy response's Content-Type is text/plain (tls_sts_content_type_ok),
 * and which MX hosts a policy leaves (resolve_sts_hops).  fuzz_sts covers the
 * record and policy grammars (sts/sts.c) underneath.
 *
 * Input: byte 0 holds flags (bits 0-6: which hops have a TLSA set, DANE
 * winning over MTA-STS; bit 7: a NUL is a separator, else LF); the rest
 * is split into pieces: the Content-Type value, the policy file
 * (sts_policy_parse), then pieces that are both TXT records and MX host
 * names.
 *
 * Checks: the Content-Type answer is a naive reference's; the TXT choice
 * gives an id exactly when one record is MTA-STS and it parses (RFC 8461
 * 3.1), with a printable reason otherwise; resolve_sts_hops() keeps the hops in
 * order, all of them for testing and none-mode policies, and for enforce
 * only those that match the policy or have TLSA, marks each kept hop as
 * the mode says, and fails with "451 4.7.5" exactly when it keeps none.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "delivery/mta.h"
#include "delivery/resolve.h"
#include "tlspol/tlspol.h"
#include "sts/sts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_PIECES 16

static int
ref_content_type(const char *ct)
{
    static const char tp[] = "text/plain";
    size_t            i;

    for (i = 0; i < sizeof(tp) - 1; i++) {
        char c = ct[i] >= 'A' && ct[i] <= 'Z' ? (char)(ct[i] + 32) : ct[i];

        if (c != tp[i])
            return 0;
    }
    return ct[i] == '\0' || ct[i] == ';' || ct[i] == ' ' || ct[i] == '\t';
}


static void
fuzz_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            abort();
}


static void
fuzz_pick(char *const *piece, const size_t *len, size_t n)
{
    char   id[STS_ID_MAX], one[STS_ID_MAX], why[256] = "", w[256];
    size_t i, sts = 0, valid = 0;
    int    rc;

    for (i = 0; i < n; i++) {
        rc = sts_txt_parse(piece[i], len[i], one, w, sizeof(w));
        sts += rc != STS_ENOTSTS;
        valid += rc == 0;
    }
    rc = tls_sts_txt_pick((const char *const *)piece, len, n, id, why,
        sizeof(why));
    if (rc != TLS_STS_TXT_ID && rc != TLS_STS_TXT_NONE)
        abort();
    if ((rc == TLS_STS_TXT_ID) != (sts == 1 && valid == 1))
        abort();
    if (rc == TLS_STS_TXT_ID && (id[0] == '\0' || strnlen(id, STS_ID_MAX) >=
        STS_ID_MAX))
        abort();
    if (rc == TLS_STS_TXT_NONE && why[0] == '\0')
        abort();
    fuzz_printable(why);
}


static void
fuzz_hops(const struct sts_policy *p, char *const *piece, size_t n,
    unsigned tlsa_bits)
{
    static struct mta_hop hop[FUZZ_PIECES], orig[FUZZ_PIECES];
    static const char     dummy[1];
    char                  reply[512] = "";
    size_t                i, k = 0, kept;
    int                   rc;

    memset(hop, 0, sizeof(hop));
    for (i = 0; i < n; i++) {
        size_t l = strnlen(piece[i], sizeof(hop[i].name) - 1);

        memcpy(hop[i].name, piece[i], l);
        hop[i].port = (unsigned)i;      /* identifies the hop */
        if (tlsa_bits & (1u << (i % 7)))
            hop[i].tls.tlsa = (const struct dns_rrset *)(const void *)dummy;
    }
    memcpy(orig, hop, sizeof(hop));
    kept = n;
    rc = resolve_sts_hops(p, "example.org", hop, &kept, reply, sizeof(reply));
    if (rc != 0 && rc != -1)
        abort();
    if (p->mode == STS_MODE_NONE) {
        if (rc != 0 || kept != n || memcmp(hop, orig, sizeof(hop)) != 0)
            abort();
        return;
    }
    if ((rc == -1) != (kept == 0) || kept > n ||
        (rc == -1 && strncmp(reply, "451 4.7.5 ", 10) != 0))
        abort();
    for (i = 0; i < n; i++) {
        int ok = orig[i].tls.tlsa != NULL || sts_mx_match(p, orig[i].name);

        if (p->mode == STS_MODE_ENFORCE && !ok)
            continue;                   /* must be dropped */
        if (k >= kept || hop[k].port != orig[i].port)
            abort();                    /* kept, in order */
        if (orig[i].tls.tlsa == NULL &&
            (hop[k].tls.sts_enforce != (p->mode == STS_MODE_ENFORCE) ||
            hop[k].tls.sts_testing != (p->mode == STS_MODE_TESTING)))
            abort();
        k++;
    }
    if (k != kept)
        abort();
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sts_policy pol;
    char   *copy, *piece[FUZZ_PIECES + 2], why[256];
    size_t  len[FUZZ_PIECES + 2], n = 0, i = 0, start = 0;
    char    sep;

    if (size < 1)
        return 0;
    log_level = -1;                     /* resolve_sts_hops() logs misses */
    sep = data[0] & 0x80 ? '\0' : '\n';
    copy = malloc(size);
    if (copy == NULL)
        abort();
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = '\0';
    /* pieces, each NUL-terminated in place (the separator's byte) */
    for (i = 0; i <= size - 1 && n < FUZZ_PIECES + 2; i++) {
        if (i == size - 1 || copy[i] == sep) {
            piece[n] = copy + start;
            len[n] = i - start;
            copy[i] = '\0';
            n++;
            start = i + 1;
        }
    }
    if (tls_sts_content_type_ok(piece[0]) != ref_content_type(piece[0]))
        abort();
    if (n > 2)
        fuzz_pick(piece + 2, len + 2, n - 2);
    if (n > 1 && sts_policy_parse(piece[1], len[1], &pol, why,
        sizeof(why)) == 0)
        fuzz_hops(&pol, piece + 2, n - 2, data[0] & 0x7f);
    free(copy);
    return 0;
}
