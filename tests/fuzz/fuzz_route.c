/*
 * fuzz_route.c - libFuzzer target over route values and route keys
 * (router/route.c): what relay.yaml, mtactl route and the route database
 * hand to the router and to the delivery code.
 *
 * Checks: route_parse() and route_key_check() return 0 or -1, with a
 * non-empty one-line reason on -1; a parsed route has a known kind, 1..8
 * hosts with ports 1..65535 for smtp:, terminated strings, a 4xx code for
 * defer: and a 5xx code for reject:, a non-empty maildir path, a pool
 * name only on smtp: and mx and then a valid one; normalising a valid key keeps it
 * valid.  Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "router/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_why(int rc, const char *why, size_t whysz)
{
    if (rc == 0)
        return;
    if (rc != -1 || why[0] == '\0' || strnlen(why, whysz) >= whysz ||
        strchr(why, '\n') != NULL)
        abort();
}


static void
fuzz_value(const char *v)
{
    struct route r;
    char         why[256];
    size_t       i;
    int          rc;

    why[0] = '\0';
    rc = route_parse(v, &r, why, sizeof(why));
    fuzz_why(rc, why, sizeof(why));
    if (rc != 0)
        return;
    switch (r.kind) {
    case ROUTE_SMTP:
        if (r.nhosts < 1 || r.nhosts > ROUTE_MAX_HOSTS)
            abort();
        for (i = 0; i < r.nhosts; i++)
            if (r.hosts[i].port < 1 || r.hosts[i].port > 65535 ||
                r.hosts[i].name[0] == '\0' ||
                strnlen(r.hosts[i].name, sizeof(r.hosts[i].name)) >=
                sizeof(r.hosts[i].name))
                abort();
        break;
    case ROUTE_MAILDIR:
        /* relative paths are accepted (tests/unit/test_router.c) */
        if (r.path[0] == '\0' || strnlen(r.path, sizeof(r.path)) >=
            sizeof(r.path))
            abort();
        break;
    case ROUTE_DISCARD:
    case ROUTE_MX:
        break;
    case ROUTE_REJECT:
    case ROUTE_DEFER:
        if (r.code / 100 != (r.kind == ROUTE_REJECT ? 5 : 4) ||
            strnlen(r.text, sizeof(r.text)) >= sizeof(r.text))
            abort();
        break;
    default:
        abort();
    }
    /* " pool=NAME" only on smtp: and mx, and then a valid name */
    if (r.pool[0] != '\0' && ((r.kind != ROUTE_SMTP && r.kind != ROUTE_MX) ||
        !route_pool_name_ok(r.pool)))
        abort();
}


static void
fuzz_key(char *k)
{
    char why[256];
    int  rc;

    why[0] = '\0';
    rc = route_key_check(k, why, sizeof(why));
    fuzz_why(rc, why, sizeof(why));
    if (rc == 0) {
        route_key_normalize(k);
        if (route_key_check(k, why, sizeof(why)) != 0)
            abort();
    }
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);         /* exact size + NUL */

    if (s == NULL)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    fuzz_value(s);
    fuzz_key(s);
    free(s);
    return 0;
}
