/*
 * test_mta_sts.c - the decisions of delivery/sts.c that need no network:
 * which TXT record counts (RFC 8461 3.1), when the cached policy is used,
 * refetched or dropped (3.3, 5.1), and the Content-Type check.  The fetch
 * itself runs against a real HTTPS server in
 * tests/integration/test_mta_sts.py.
 */
#include <string.h>

#include <criterion/criterion.h>

#include "delivery/sts.h"

static enum stsd_txt
pick(const char *a, const char *b, char *id)
{
    const char *t[2] = { a, b };
    size_t      l[2] = { strlen(a), b ? strlen(b) : 0 };
    char        why[256];

    return stsd_txt_pick(t, l, b ? 2 : 1, id, why, sizeof(why));
}


Test(mta_sts, txt_pick_exactly_one_sts_record)
{
    char id[STS_ID_MAX];

    cr_assert_eq(pick("v=STSv1; id=abc", NULL, id), STSD_TXT_ID);
    cr_assert_str_eq(id, "abc");
    /* other records are discarded */
    cr_assert_eq(pick("v=spf1 -all", "v=STSv1; id=x2", id), STSD_TXT_ID);
    cr_assert_str_eq(id, "x2");
    /* two STS records, or one invalid: no policy */
    cr_assert_eq(pick("v=STSv1; id=a", "v=STSv1; id=b", id), STSD_TXT_NONE);
    cr_assert_eq(pick("v=STSv1; id=a", "v=STSv1; nope", id), STSD_TXT_NONE);
    cr_assert_eq(pick("v=STSv1; id=", NULL, id), STSD_TXT_NONE);
    cr_assert_eq(pick("v=spf1 -all", NULL, id), STSD_TXT_NONE);
}


Test(mta_sts, decide)
{
    /* nothing cached: a record means fetch, none means no policy */
    cr_assert_eq(stsd_decide(0, "", 0, 100, STSD_TXT_ID, "a"), STSD_FETCH);
    cr_assert_eq(stsd_decide(0, "", 0, 100, STSD_TXT_NONE, ""),
        STSD_NO_POLICY);
    cr_assert_eq(stsd_decide(0, "", 0, 100, STSD_TXT_TEMPFAIL, ""),
        STSD_NO_POLICY);
    /* cached and fresh: same id -> cached; new id -> refetch */
    cr_assert_eq(stsd_decide(1, "a", 1000, 100, STSD_TXT_ID, "a"),
        STSD_USE_CACHED);
    cr_assert_eq(stsd_decide(1, "a", 1000, 100, STSD_TXT_ID, "b"),
        STSD_FETCH);
    /* the TXT record gone or failing: the unexpired policy still holds */
    cr_assert_eq(stsd_decide(1, "a", 1000, 100, STSD_TXT_NONE, ""),
        STSD_USE_CACHED);
    cr_assert_eq(stsd_decide(1, "a", 1000, 100, STSD_TXT_TEMPFAIL, ""),
        STSD_USE_CACHED);
    /* expired: refetch with a record, nothing without */
    cr_assert_eq(stsd_decide(1, "a", 1000, 1000, STSD_TXT_ID, "a"),
        STSD_FETCH);
    cr_assert_eq(stsd_decide(1, "a", 1000, 1000, STSD_TXT_NONE, ""),
        STSD_NO_POLICY);
}


Test(mta_sts, content_type)
{
    cr_assert(stsd_content_type_ok("text/plain"));
    cr_assert(stsd_content_type_ok("Text/Plain; charset=utf-8"));
    cr_assert(stsd_content_type_ok("text/plain;charset=us-ascii"));
    cr_assert(!stsd_content_type_ok("text/plainx"));
    cr_assert(!stsd_content_type_ok("text/html"));
    cr_assert(!stsd_content_type_ok(""));
    cr_assert(!stsd_content_type_ok(NULL));
}
