/*
 * fuzz_control.c - libFuzzer target over the control socket's request
 * line (master/ctl_req.c): what an mtactl client (root or
 * server.admin_group) sends, answered by the master.
 *
 * Input: byte 0 bit 0 is the master's sandbox_test; the rest is the
 * request as control.c holds it (at most CTL_REQUEST_MAX - 1 bytes, cut
 * at a NUL as its buffer is a string), in a buffer of exactly that size.
 *
 * Checks: the kind is a known one and the same as a reference table of
 * strcmp()s gives; the line is cut at its first CR or LF; a bad request
 * has an error answer "error: ..." of one LF-ended line without any other
 * control byte (a quoted request is escaped), bounded by its buffer; a
 * kick's (and index's) argument is "*" or a valid queue id; a tls
 * argument (and a ban's, after "ban ") is the rest of the line; a drain
 * timeout is the decimal number written (digits only) and never over
 * CTL_REQ_DRAIN_MAX_MS; sandbox-test only when the
 * master allows it.  Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "master/ctl_req.h"
#include "spool/spool.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_error(const char *e, size_t esz)
{
    size_t n = strnlen(e, esz), i;

    if (n >= esz || n < 9 || strncmp(e, "error: ", 7) != 0 ||
        e[n - 1] != '\n')
        abort();
    for (i = 0; i + 1 < n; i++)
        if ((unsigned char)e[i] < 0x20 || e[i] == 0x7f)
            abort();
}


/* ref_kind - the kind, the long way (bad arguments aside). */
static enum ctl_req_kind
ref_kind(const char *l, int sandbox)
{
    if (!strcmp(l, "status json")) return CTL_REQ_STATUS_JSON;
    if (!strcmp(l, "status")) return CTL_REQ_STATUS;
    if (!strcmp(l, "reload")) return CTL_REQ_RELOAD;
    if (!strcmp(l, "stop")) return CTL_REQ_STOP;
    if (!strcmp(l, "check")) return CTL_REQ_CHECK;
    if (!strcmp(l, "queue-stream")) return CTL_REQ_QUEUE_STREAM;
    if (!strcmp(l, "routes")) return CTL_REQ_ROUTES;
    if (!strcmp(l, "hosts")) return CTL_REQ_HOSTS;
    if (!strncmp(l, "audit ", 6)) return CTL_REQ_AUDIT;
    if (!strcmp(l, "drain") || !strncmp(l, "drain ", 6)) return CTL_REQ_DRAIN;
    if (!strncmp(l, "tls ", 4)) return CTL_REQ_TLS;
    if (!strncmp(l, "ban ", 4)) return CTL_REQ_BAN;
    if (!strncmp(l, "quota ", 6)) return CTL_REQ_QUOTA;
    if (!strncmp(l, "greylist ", 9)) return CTL_REQ_GREYLIST;
    if (!strncmp(l, "shaping ", 8)) return CTL_REQ_SHAPING;
    if (!strncmp(l, "cluster ", 8)) return CTL_REQ_CLUSTER;
    if (!strncmp(l, "kick ", 5) || !strncmp(l, "index ", 6)) return CTL_REQ_KICK;
    if (!strcmp(l, "sandbox-test") && sandbox) return CTL_REQ_SANDBOX_TEST;
    return CTL_REQ_BAD;
}


/* ref_ms - the digits after "drain ": 1 with the value when they are all
 * there is and it fits CTL_REQ_DRAIN_MAX_MS. */
static int
ref_ms(const char *s, uint64_t *ms)
{
    *ms = 0;
    if (*s == '\0')
        return 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9' ||
            *ms > (CTL_REQ_DRAIN_MAX_MS - (uint64_t)(*s - '0')) / 10)
            return 0;
        *ms = *ms * 10 + (uint64_t)(*s - '0');
    }
    return 1;
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ctl_req    r;
    enum ctl_req_kind want;
    char             *line, *ref;
    size_t            n;
    uint64_t          ms;
    int               sandbox;
    size_t            kick_at;

    if (size < 1)
        return 0;
    sandbox = data[0] & 1;
    n = strnlen((const char *)data + 1, size - 1);
    if (n > CTL_REQUEST_MAX - 1)
        n = CTL_REQUEST_MAX - 1;
    line = malloc(n + 1);
    ref = malloc(n + 1);
    if (line == NULL || ref == NULL)
        abort();
    memcpy(line, data + 1, n);
    line[n] = '\0';
    memcpy(ref, line, n + 1);
    ref[strcspn(ref, "\r\n")] = '\0';
    ctl_req_parse(line, sandbox, &r);
    if (strcmp(line, ref) != 0)
        abort();                        /* cut at the first CR or LF */
    want = ref_kind(ref, sandbox);
    kick_at = ref[0] == 'k' ? 5 : 6;    /* "kick " or "index " */
    if (r.kind != want && !(r.kind == CTL_REQ_BAD &&
        (want == CTL_REQ_KICK || want == CTL_REQ_DRAIN)))
        abort();
    switch (r.kind) {
    case CTL_REQ_BAD:
        fuzz_error(r.error, sizeof(r.error));
        if (want == CTL_REQ_DRAIN && ref_ms(ref + 6, &ms))
            abort();                    /* a fine timeout refused */
        if (want == CTL_REQ_KICK && (strcmp(ref + kick_at, "*") == 0 ||
            spool_id_valid(ref + kick_at)))
            abort();
        break;
    case CTL_REQ_KICK:
        if (r.arg != line + kick_at || (strcmp(r.arg, "*") != 0 &&
            !spool_id_valid(r.arg)))
            abort();
        break;
    case CTL_REQ_TLS:
    case CTL_REQ_BAN:                   /* master/ban.c checks the rest */
        if (r.arg != line + 4)
            abort();
        break;
    case CTL_REQ_QUOTA:                 /* master/quota.c checks the rest */
        if (r.arg != line + 6)
            abort();
        break;
    case CTL_REQ_GREYLIST:              /* master/greylist.c checks it */
        if (r.arg != line + 9)
            abort();
        break;
    case CTL_REQ_SHAPING:               /* master/shaping.c checks it */
    case CTL_REQ_CLUSTER:               /* master/cluster.c checks it */
        if (r.arg != line + 8)
            abort();
        break;
    case CTL_REQ_DRAIN:
        if (ref[5] == '\0' ? r.drain_ms != 0 :
            !ref_ms(ref + 6, &ms) || ms != r.drain_ms)
            abort();
        break;
    default:
        break;
    }
    free(line);
    free(ref);
    return 0;
}
