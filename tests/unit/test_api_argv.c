/*
 * test_api_argv.c - master/api_argv.c, the command lines the API process
 * may have the master run: every shape of the table passes, and what is
 * not a shape is refused (options not named, file names, operands that
 * look like options, control bytes, maildir: routes, stdin where none
 * belongs, a mtactl global option).
 */
#include <string.h>

#include <criterion/criterion.h>

#include "master/api_argv.h"

static int
check(const char *in, const char *line)
{
    char        buf[1024], *argv[64], *save = NULL;
    const char *why = NULL;
    int         n = 0, rc;

    strcpy(buf, line);
    for (char *w = strtok_r(buf, "|", &save); w != NULL;
        w = strtok_r(NULL, "|", &save))
        argv[n++] = w;
    argv[n] = NULL;
    rc = api_argv_check(n, argv, in, in != NULL ? strlen(in) : 0, &why);
    if (rc != 0)
        cr_assert_not_null(why);
    return rc;
}

Test(api_argv, shapes_pass)
{
    static const char *const ok[] = {
        "queue|--json",
        "queue|--json|--limit|100|--after|0123456789ABCDEF",
        "queue|--from|alice@x|--to|b y|--state|held|--older-than|2h|--json",
        "show|0123456789ABCDEF|--json",
        "hold|0123456789ABCDEF", "release|0123456789ABCDEF|1123456789ABCDEF",
        "flush|0123456789abcdef", "bounce|0123456789ABCDEF",
        "delete|0123456789ABCDEF", "hold|--all|--from|spam@",
        "flush|--all", "delete|--all|--state|deferred|--older-than|5d",
        "route|list|--json", "route|get|example.org|--json",
        "route|add|example.org|smtp:[192.0.2.1]:25",
        "route|add|.example.org|reject:550 5.7.1 no such user",
        "route|del|user@example.org",
        "tls|policy|list|--json", "tls|policy|get|example.org|--json",
        "tls|policy|set|example.org|dane-only", "tls|policy|del|example.org",
        "shaping|--json", "suspend|gmail", "suspend|gmail|--source|pool1|--for|30m",
        "resume|gmail|--source|pool1",
    };

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        cr_expect_eq(check(NULL, ok[i]), 0, "refused: %s", ok[i]);
    cr_expect_eq(check("example.org smtp:[192.0.2.1]:25\n# c\n",
        "route|import|-"), 0);
    cr_expect_eq(check("a mx\n", "route|import|--replace|-"), 0);
}

Test(api_argv, others_refused)
{
    static const char *const bad[] = {
        "", "-c|/etc/passwd|queue", "-s|/tmp/x|status", "status", "reload",
        "stop", "drain", "user|add|x", "dkim|keygen|a|b", "trace|X",
        "route|import|/etc/shadow", "route|export", "route|add|x",
        "route|add|x|maildir:/root", "route|add|x|MAILDIR:/root",
        "route|add|-x|mx", "route|add|x|--json", "route|del|x|y",
        "queue|--files", "queue|--json|--json", "queue|--fr|x",
        "queue|--limit|abc", "queue|--limit", "queue|--state|gone",
        "queue|--after|../../etc", "show|../etc/passwd", "show|ID|--raw",
        "hold", "hold|--from|x", "hold|0123456789ABCDEF|--all",
        "hold|-0123456789ABCDEF", "tls|policy|set|x|strong",
        "tls|check|example.org", "tls|report|--send",
        "suspend|gmail|--for|forever", "suspend|--source|x",
        "resume|gmail|--for|1h", "shaping|--json|x", "route|get|a\tb",
        "queue|--from|a\nb", "ban|add|1.2.3.4",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_expect_neq(check(NULL, bad[i]), 0, "passed: %s", bad[i]);
    /* stdin only for route import, and no maildir: route in it */
    cr_expect_neq(check("x", "route|list|--json"), 0);
    cr_expect_neq(check("a mx\nb maildir:/etc\n", "route|import|-"), 0);
    cr_expect_neq(check("a\tMaildir:/etc\n", "route|import|-"), 0);
}
