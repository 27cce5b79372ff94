/*
 * status_bclass.c - failed delivery attempts by bounce class x site, on
 * the shared status page (status.h): what /metrics shows as
 * mtad_delivery_attempts_total{class,site}.
 *
 * A row is free (0), being named (1) or named (2).  A worker that counts
 * a site looks for its row from the site's hash on; a free row it finds
 * first is claimed with a compare-and-swap 0 -> 1, named, and published
 * with a release store of 2.  A row seen in state 1 is waited for a few
 * turns (its writer is between two stores) and then passed over, so a
 * worker killed in between costs one row, never a hang.  Named rows never
 * change name, so counting is a relaxed add.  When every row is named the
 * site counts in the last row, "other".
 */
#include <sched.h>
#include <string.h>

#include "common/status.h"

#define BCLASS_ROWS      (STATUS_BCLASS_SITES - 1)   /* named ones */
#define BCLASS_SPIN      64

/* bclass_site_norm - site as its row names it: lower case, [a-z0-9.-_],
 * at most STATUS_BCLASS_SITE_LEN - 1 bytes; "unknown" when empty. */
static void
bclass_site_norm(const char *site, char *out)
{
    size_t i;

    for (i = 0; site != NULL && site[i] != '\0' &&
        i < STATUS_BCLASS_SITE_LEN - 1; i++) {
        char c = site[i];

        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
            c == '-' || c == '_'))
            c = '_';
        out[i] = c;
    }
    out[i] = '\0';
    if (i == 0)
        memcpy(out, "unknown", sizeof("unknown"));
}


static uint32_t
bclass_hash(const char *s)
{
    uint32_t h = 2166136261u;

    while (*s != '\0')
        h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}


/* bclass_row - the row of name: found, or claimed; NULL when all are
 * named (or being named) for other sites. */
static struct status_bclass_row *
bclass_row(struct status_page *sp, const char *name)
{
    uint32_t h = bclass_hash(name);
    size_t   k;

    for (k = 0; k < BCLASS_ROWS; k++) {
        struct status_bclass_row *r = &sp->bclass[(h + k) % BCLASS_ROWS];
        uint32_t                  st = __atomic_load_n(&r->state,
                                      __ATOMIC_ACQUIRE);
        int                       spin;

        if (st == 0) {
            uint32_t want = 0;

            if (__atomic_compare_exchange_n(&r->state, &want, 1, 0,
                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                memcpy(r->site, name, strlen(name) + 1);
                __atomic_store_n(&r->state, 2, __ATOMIC_RELEASE);
                return r;
            }
            st = want;
        }
        for (spin = 0; st == 1 && spin < BCLASS_SPIN; spin++) {
            sched_yield();
            st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
        }
        if (st == 2 && strcmp(r->site, name) == 0)
            return r;
    }
    return NULL;
}


void
status_bclass_add(struct status_page *sp, const char *site, unsigned cls)
{
    struct status_bclass_row *r;
    char                      name[STATUS_BCLASS_SITE_LEN];

    if (sp == NULL || cls >= STATUS_BCLASS_NCLASS)
        return;
    bclass_site_norm(site, name);
    if ((r = bclass_row(sp, name)) == NULL)
        r = &sp->bclass[STATUS_BCLASS_SITES - 1];
    STATUS_ADD(r->n[cls], 1);
}


const char *
status_bclass_site(const struct status_page *sp, size_t i)
{
    if (i == STATUS_BCLASS_SITES - 1)
        return "other";
    if (i >= STATUS_BCLASS_SITES ||
        __atomic_load_n(&sp->bclass[i].state, __ATOMIC_ACQUIRE) != 2)
        return NULL;
    return sp->bclass[i].site;
}
