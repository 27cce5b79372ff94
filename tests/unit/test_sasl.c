/*
 * test_sasl.c - Dovecot's auth-client lines (sasl/sasl.c): a real
 * Dovecot 2.3 handshake and answers, the MECH flags, tab-unescaping,
 * malformed lines (a bad id, non-base64 CONT data, a NUL, a short
 * scratch), unknown lines ignored, and sasl_escape().
 */
#include <string.h>

#include <criterion/criterion.h>

#include "sasl/sasl.h"

static enum sasl_kind
parse(const char *line, struct sasl_line *l, char *scratch, size_t sz)
{
    return sasl_parse(line, strlen(line), scratch, sz, l);
}

Test(sasl, handshake)
{
    struct sasl_line l;
    char             s[256];

    cr_assert_eq(parse("VERSION\t1\t2", &l, s, sizeof(s)), SASL_VERSION);
    cr_assert_eq(l.major, 1);
    cr_assert_eq(l.minor, 2);
    cr_assert_eq(parse("MECH\tPLAIN\tplaintext", &l, s, sizeof(s)), SASL_MECH);
    cr_assert_str_eq(l.mech, "PLAIN");
    cr_assert_eq(l.mech_flags, SASL_MECH_PLAINTEXT);
    cr_assert_eq(parse("MECH\tscram-sha-1\tmutual-auth\tdictionary", &l, s,
        sizeof(s)), SASL_MECH);
    cr_assert_str_eq(l.mech, "SCRAM-SHA-1");
    cr_assert_eq(l.mech_flags, SASL_MECH_MUTUAL | SASL_MECH_DICTIONARY);
    cr_assert_eq(parse("MECH\tBAD MECH", &l, s, sizeof(s)), SASL_BAD);
    cr_assert_eq(parse("MECH\tTHISNAMEISFARTOOLONGFORSASL", &l, s,
        sizeof(s)), SASL_BAD);
    cr_assert_eq(parse("SPID\t25698", &l, s, sizeof(s)), SASL_SPID);
    cr_assert_eq(parse("COOKIE\t097c", &l, s, sizeof(s)), SASL_COOKIE);
    cr_assert_eq(parse("DONE", &l, s, sizeof(s)), SASL_DONE);
    cr_assert_eq(parse("NOTIFY\tx", &l, s, sizeof(s)), SASL_UNKNOWN);
    cr_assert_eq(parse("VERSION\tone\t2", &l, s, sizeof(s)), SASL_BAD);
}

Test(sasl, answers)
{
    struct sasl_line l;
    char             s[256];

    cr_assert_eq(parse("OK\t1\tuser=alice", &l, s, sizeof(s)), SASL_OK);
    cr_assert_eq(l.id, 1);
    cr_assert_str_eq(l.user, "alice");
    cr_assert_eq(parse("CONT\t3\tVXNlcm5hbWU6", &l, s, sizeof(s)), SASL_CONT);
    cr_assert_eq(l.id, 3);
    cr_assert_str_eq(l.data, "VXNlcm5hbWU6");
    cr_assert_eq(parse("CONT\t3", &l, s, sizeof(s)), SASL_CONT);
    cr_assert_str_eq(l.data, "");
    cr_assert_eq(parse("CONT\t3\t334 x\r\n", &l, s, sizeof(s)), SASL_BAD);
    cr_assert_eq(parse("FAIL\t4\tuser=a\001tb\ttemp\treason=Try\001nlater", &l,
        s, sizeof(s)), SASL_FAIL);
    cr_assert_str_eq(l.user, "a\tb");
    cr_assert_str_eq(l.reason, "Try\nlater");
    cr_assert_eq(l.fail_flags, SASL_FAIL_TEMP);
    cr_assert_eq(parse("FAIL\t5\tcode=temp_fail", &l, s, sizeof(s)),
        SASL_FAIL);
    cr_assert_eq(l.fail_flags, SASL_FAIL_TEMP);
    cr_assert_null(l.user);
    cr_assert_eq(parse("OK\t0\tuser=x", &l, s, sizeof(s)), SASL_BAD);
    cr_assert_eq(parse("OK\t4294967296\tuser=x", &l, s, sizeof(s)), SASL_BAD);
    cr_assert_eq(parse("OK\t-1", &l, s, sizeof(s)), SASL_BAD);
    cr_assert_eq(parse("OK\t1\tuser=a\0010b", &l, s, sizeof(s)), SASL_BAD);
    cr_assert_eq(sasl_parse("OK\t1\0x", 6, s, sizeof(s), &l), SASL_BAD);
    cr_assert_eq(parse("OK\t1\tuser=alice", &l, s, 15), SASL_BAD);
}

Test(sasl, escape)
{
    char out[32], back[32];
    struct sasl_line l;

    cr_assert_eq(sasl_escape("a\tb\nc\001", 6, out, sizeof(out)), 9);
    cr_assert_eq(memcmp(out, "a\001tb\001nc\0011", 10), 0);
    cr_assert_eq(sasl_escape("abc", 3, out, 3), -1);
    cr_assert_eq(sasl_parse("X\ta\001tb\001nc\0011", 11, back, sizeof(back),
        &l), SASL_UNKNOWN);
    cr_assert_str_eq(back + 2, "a\tb\nc\001");
    sasl_printable("a\x1b[31mb\x80", out, sizeof(out));
    cr_assert_str_eq(out, "a?[31mb?");
    cr_assert(sasl_is_base64("AZaz09+/=", 9));
    cr_assert(!sasl_is_base64("a b", 3));
}
