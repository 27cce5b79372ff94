/*
 * test_requiretls.c - RFC 8689 on the text and spool layers: the MAIL
 * parameter REQUIRETLS (no value, once), the EHLO keyword in a peer's
 * capabilities, "TLS-Required: No" noted by the hop counter's single pass
 * over the header section (every split of the content gives the same
 * answer), and the envelope's optional "tlsreq" line: round trip, old
 * files without it, bad values, and the line added while a message is
 * being written (spool_mark_tls_optional), before and after DKIM's room.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "common/util.h"
#include "smtp/smtp.h"
#include "spool/spool.h"
#include "tests/unit/t_fs.h"

/* ---- the MAIL parameter ---- */

static int
t_mail(const char *arg, struct smtp_mail *m, const char **reply)
{
    struct str s = { arg, strlen(arg) };

    *reply = NULL;
    return smtp_parse_mail(s, m, reply);
}

Test(requiretls_mail, parameter_sets_the_flag_in_any_case)
{
    struct smtp_mail m;
    const char      *reply;

    cr_assert_eq(t_mail("FROM:<a@b.example> REQUIRETLS", &m, &reply), 0,
        "%s", reply);
    cr_assert_eq(m.requiretls, 1);
    cr_assert_str_eq(m.addr, "a@b.example");
    cr_assert_eq(t_mail("FROM:<a@b.example> SIZE=10 requiretls "
        "BODY=8BITMIME", &m, &reply), 0, "%s", reply);
    cr_assert_eq(m.requiretls, 1);
    cr_assert_eq(m.size, 10);
    cr_assert_eq(m.body, SMTP_BODY_8BITMIME);
    cr_assert_eq(t_mail("FROM:<> RequireTLS", &m, &reply), 0, "%s", reply);
    cr_assert_eq(m.requiretls, 1);
    cr_assert_str_eq(m.addr, "");
}

Test(requiretls_mail, absent_means_off)
{
    struct smtp_mail m;
    const char      *reply;

    cr_assert_eq(t_mail("FROM:<a@b.example> SMTPUTF8", &m, &reply), 0);
    cr_assert_eq(m.requiretls, 0);
}

Test(requiretls_mail, a_value_is_refused)
{
    struct smtp_mail m;
    const char      *reply;

    cr_assert_eq(t_mail("FROM:<a@b.example> REQUIRETLS=YES", &m, &reply),
        -1);
    cr_assert_str_eq(reply, "501 5.5.4 Bad REQUIRETLS parameter syntax");
    cr_assert_eq(t_mail("FROM:<a@b.example> REQUIRETLS=", &m, &reply), -1);
    cr_assert_str_eq(reply, "501 5.5.4 Bad REQUIRETLS parameter syntax");
}

Test(requiretls_mail, twice_is_refused)
{
    struct smtp_mail m;
    const char      *reply;

    cr_assert_eq(t_mail("FROM:<a@b.example> REQUIRETLS REQUIRETLS", &m,
        &reply), -1);
    cr_assert_not_null(reply);
    cr_assert_eq(strncmp(reply, "501 ", 4), 0, "%s", reply);
}

Test(requiretls_mail, a_longer_name_is_another_option)
{
    struct smtp_mail m;
    const char      *reply;

    cr_assert_eq(t_mail("FROM:<a@b.example> REQUIRETLSX", &m, &reply), -1);
    cr_assert_str_eq(reply, "555 5.5.4 Unsupported option: REQUIRETLSX");
}

/* ---- the peer's EHLO keyword ---- */

Test(requiretls_caps, keyword_is_a_capability)
{
    static const char with[] = "250-mx.example\r\n250-PIPELINING\r\n"
        "250-REQUIRETLS\r\n250 SIZE 100\r\n";
    static const char without[] = "250-mx.example\r\n250-REQUIRETLSX\r\n"
        "250 REQUIRE\r\n";
    static const char first[] = "250-REQUIRETLS\r\n250 8BITMIME\r\n";
    struct smtp_ehlo e;

    cr_assert(smtp_ehlo_caps(with, sizeof(with) - 1, &e) &
        SMTP_CAP_REQUIRETLS);
    cr_assert_eq(e.size, 100);
    cr_assert_not(smtp_ehlo_caps(without, sizeof(without) - 1, &e) &
        SMTP_CAP_REQUIRETLS);
    /* line 1 is the peer's name, never a keyword */
    cr_assert_not(smtp_ehlo_caps(first, sizeof(first) - 1, &e) &
        SMTP_CAP_REQUIRETLS);
}

/* ---- TLS-Required: No in the hop counter's pass ---- */

/* The answer for msg fed whole, and checked equal for every split into
 * two spans and for one byte at a time; *hops gets the Received: count. */
static int
t_tls_no(const char *msg, unsigned *hops)
{
    struct smtp_hops h;
    size_t           n = strlen(msg), i;
    int              want;

    smtp_hops_init(&h);
    smtp_hops_feed(&h, msg, n);
    want = smtp_hops_tls_no(&h);
    if (hops != NULL)
        *hops = h.hops;
    for (i = 0; i <= n; i++) {
        smtp_hops_init(&h);
        smtp_hops_feed(&h, msg, i);
        smtp_hops_feed(&h, msg + i, n - i);
        cr_assert_eq(smtp_hops_tls_no(&h), want, "split at %zu", i);
    }
    smtp_hops_init(&h);
    for (i = 0; i < n; i++)
        smtp_hops_feed(&h, msg + i, 1);
    cr_assert_eq(smtp_hops_tls_no(&h), want, "byte at a time");
    return want;
}

Test(requiretls_header, no_is_noted)
{
    unsigned hops;

    cr_assert_eq(t_tls_no("Received: from a\r\nTLS-Required: No\r\n"
        "Received: from b\r\n\r\nbody\r\n", &hops), 1);
    cr_assert_eq(hops, 2);              /* the hop count is unchanged */
    cr_assert_eq(t_tls_no("tls-required:no\r\n\r\n", NULL), 1);
    cr_assert_eq(t_tls_no("Subject: x\r\nTLS-REQUIRED: \t NO \t\r\n"
        "\r\n", NULL), 1);
    cr_assert_eq(t_tls_no("TLS-Required: No\n\nbare LF\n", NULL), 1);
}

Test(requiretls_header, folded_value_is_one_field)
{
    cr_assert_eq(t_tls_no("TLS-Required:\r\n No\r\nSubject: x\r\n\r\n",
        NULL), 1);
    /* a continuation that adds a word makes it another value */
    cr_assert_eq(t_tls_no("TLS-Required: No\r\n thanks\r\n\r\n", NULL), 0);
    /* a continuation of white space only changes nothing */
    cr_assert_eq(t_tls_no("TLS-Required: No\r\n \r\nX: y\r\n\r\n", NULL),
        1);
}

Test(requiretls_header, other_values_and_names_do_not_count)
{
    cr_assert_eq(t_tls_no("TLS-Required: Yes\r\n\r\n", NULL), 0);
    cr_assert_eq(t_tls_no("TLS-Required: Nope\r\n\r\n", NULL), 0);
    cr_assert_eq(t_tls_no("TLS-Required: N o\r\n\r\n", NULL), 0);
    cr_assert_eq(t_tls_no("TLS-Required:\r\n\r\n", NULL), 0);
    cr_assert_eq(t_tls_no("X-TLS-Required: No\r\n\r\n", NULL), 0);
    cr_assert_eq(t_tls_no("TLS-Required : No\r\n\r\n", NULL), 0);
    cr_assert_eq(t_tls_no("Subject: x\r\n TLS-Required: No\r\n\r\n", NULL),
        0);
    cr_assert_eq(t_tls_no("TLS-Require: No\r\n\r\n", NULL), 0);
}

Test(requiretls_header, the_body_is_not_looked_at)
{
    cr_assert_eq(t_tls_no("Subject: x\r\n\r\nTLS-Required: No\r\n", NULL),
        0);
    cr_assert_eq(t_tls_no("\r\nTLS-Required: No\r\n", NULL), 0);
}

Test(requiretls_header, last_line_of_a_headers_only_message)
{
    /* the content always ends with CRLF: the field is complete */
    cr_assert_eq(t_tls_no("Subject: x\r\nTLS-Required: No\r\n", NULL), 1);
    /* no line end yet: not a complete field */
    cr_assert_eq(t_tls_no("Subject: x\r\nTLS-Required: No", NULL), 0);
}

/* ---- the envelope line ---- */

static struct spool_rcpt t_rcpt = { .addr = "r@example.net" };

static void
t_env(struct spool_env *e)
{
    memset(e, 0, sizeof(*e));
    e->sender = "s@example.com";
    e->client_ip = "127.0.0.1";
    e->client_port = 25;
    e->rcpt = &t_rcpt;
    e->nrcpt = 1;
    util_strlcpy(e->id, "0123456789ABCDEF", sizeof(e->id));
}

/* Format e, parse it back; returns the parsed env (free it). */
static struct spool_env *
t_round(const struct spool_env *e, char **text)
{
    struct spool_env *got;
    size_t            len, used;

    spool_env_format(e, text, &len);
    cr_assert_eq(spool_env_parse(*text, len, &got, &used), SPOOL_OK, "%s",
        *text);
    cr_assert_eq(used, len);
    return got;
}

Test(requiretls_env, round_trip)
{
    struct spool_env  e, *got;
    char             *text;

    t_env(&e);
    got = t_round(&e, &text);
    cr_assert_null(strstr(text, "tlsreq"), "a message without either "
        "stays readable by older readers: %s", text);
    cr_assert_eq(got->requiretls, 0);
    cr_assert_eq(got->tls_optional, 0);
    free(text);
    spool_env_free(got);

    e.requiretls = 1;
    got = t_round(&e, &text);
    cr_assert_not_null(strstr(text, "\ntlsreq REQUIRETLS\nend\n"), "%s",
        text);
    cr_assert_eq(got->requiretls, 1);
    cr_assert_eq(got->tls_optional, 0);
    free(text);
    spool_env_free(got);

    e.tls_optional = 1;                 /* both: REQUIRETLS wins */
    got = t_round(&e, &text);
    cr_assert_eq(got->requiretls, 1);
    cr_assert_eq(got->tls_optional, 0);
    free(text);
    spool_env_free(got);

    e.requiretls = 0;
    got = t_round(&e, &text);
    cr_assert_not_null(strstr(text, "\ntlsreq NO\nend\n"), "%s", text);
    cr_assert_eq(got->requiretls, 0);
    cr_assert_eq(got->tls_optional, 1);
    free(text);
    spool_env_free(got);
}

/* Replace the first "from" in text by "to" (same buffer, text malloc'd). */
static char *
t_edit(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    size_t      n = strlen(text) - strlen(from) + strlen(to);
    char       *out = xmalloc(n + 1);
    size_t      k;

    cr_assert_not_null(at, "%s not in %s", from, text);
    k = (size_t)(at - text);
    memcpy(out, text, k);
    strcpy(out + k, to);
    strcat(out, at + strlen(from));
    return out;
}

Test(requiretls_env, bad_or_repeated_line_is_a_format_error)
{
    struct spool_env  e, *got;
    char             *text, *bad;
    size_t            len;
    static const char *const bads[] = { "tlsreq YES\nend\n",
        "tlsreq requiretls\nend\n", "tlsreq \nend\n",
        "tlsreq NO\ntlsreq NO\nend\n", "tlsreq NO REQUIRETLS\nend\n" };
    size_t            i;

    t_env(&e);
    spool_env_format(&e, &text, &len);
    for (i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        bad = t_edit(text, "end\n", bads[i]);
        cr_assert_eq(spool_env_parse(bad, strlen(bad), &got, NULL),
            SPOOL_EFORMAT, "%s", bads[i]);
        cr_assert_null(got);
        free(bad);
    }
    free(text);
}

/* ---- the line added while writing ---- */

static char t_dir[] = "/tmp/mtad-reqtls-test-XXXXXX";
static int  t_made;                 /* mkdtemp() made t_dir */


/* t_cleanup - remove the test's spool.  Whether there is one is a flag:
 * mkdtemp()'s random suffix may hold an 'X' itself, so a look for the
 * template's X's skipped about one directory in ten. */
static void
t_cleanup(void)
{
    if (t_made)
        t_rm_tree(t_dir);
}

static struct spool *
t_spool(void)
{
    struct spool *sp;

    cr_assert_not_null(mkdtemp(t_dir), "mkdtemp: %s", strerror(errno));
    t_made = 1;
    cr_assert_eq(spool_prepare(t_dir, (uid_t)-1, (gid_t)-1), SPOOL_OK, "%s",
        spool_errstr(NULL));
    cr_assert_eq(spool_open(&sp, t_dir, 0, 0), SPOOL_OK, "%s",
        spool_errstr(NULL));
    return sp;
}

/* Commit m, open it again: its env and its body (both to free). */
static struct spool_env *
t_reopen(struct spool *sp, struct spool_msg *m, char **body)
{
    struct spool_env *got;
    char              id[SPOOL_ID_SIZE];
    off_t             boff;
    ssize_t           r;
    int               fd;

    cr_assert_eq(spool_finish(m), SPOOL_OK, "%s", spool_errstr(sp));
    memcpy(id, spool_msg_id(m), sizeof(id));
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_msg_open(sp, id, 0, &got, &fd, &boff), SPOOL_OK,
        "%s", spool_errstr(sp));
    *body = xcalloc(1, got->body_size + 1);
    r = pread(fd, *body, got->body_size, boff);
    cr_assert_eq(r, (ssize_t)got->body_size);
    close(fd);
    return got;
}

TestSuite(requiretls_spool, .fini = t_cleanup);

Test(requiretls_spool, mark_while_writing_then_dkim_room)
{
    static const char head[] = "Subject: x\r\nTLS-Required: No\r\n\r\n";
    static const char body[] = "hello\r\n";
    struct spool     *sp = t_spool();
    struct spool_env  e, *got;
    struct spool_msg *m;
    char             *back;

    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, head, sizeof(head) - 1), SPOOL_OK);
    cr_assert_eq(spool_mark_tls_optional(m), SPOOL_OK);
    cr_assert_eq(spool_mark_tls_optional(m), SPOOL_OK);  /* once only */
    cr_assert_eq(spool_head_reserve(m, 6), SPOOL_OK);
    cr_assert_eq(spool_write(m, body, sizeof(body) - 1), SPOOL_OK);
    cr_assert_eq(spool_head_fill(m, "D: 1\r\n", 6), SPOOL_OK);
    got = t_reopen(sp, m, &back);
    cr_assert_eq(got->tls_optional, 1);
    cr_assert_eq(got->requiretls, 0);
    cr_assert_str_eq(back, "D: 1\r\nSubject: x\r\nTLS-Required: No\r\n\r\n"
        "hello\r\n");
    free(back);
    spool_env_free(got);
    spool_close(sp);
}

Test(requiretls_spool, mark_after_dkim_room_moves_the_room_too)
{
    static const char head[] = "TLS-Required: no\r\n\r\n";
    struct spool     *sp = t_spool();
    struct spool_env  e, *got;
    struct spool_msg *m;
    char             *back;

    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_head_reserve(m, 8), SPOOL_OK);
    cr_assert_eq(spool_write(m, head, sizeof(head) - 1), SPOOL_OK);
    cr_assert_eq(spool_mark_tls_optional(m), SPOOL_OK);
    cr_assert_eq(spool_write(m, "b\r\n", 3), SPOOL_OK);
    cr_assert_eq(spool_head_fill(m, "Sig: 1\r\n", 8), SPOOL_OK);
    got = t_reopen(sp, m, &back);
    cr_assert_eq(got->tls_optional, 1);
    cr_assert_str_eq(back, "Sig: 1\r\nTLS-Required: no\r\n\r\nb\r\n");
    free(back);
    spool_env_free(got);
    spool_close(sp);
}

Test(requiretls_spool, mark_on_a_requiretls_message_changes_nothing)
{
    struct spool     *sp = t_spool();
    struct spool_env  e, *got;
    struct spool_msg *m;
    char             *back;

    t_env(&e);
    e.requiretls = 1;
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, "X: y\r\n\r\nb\r\n", 11), SPOOL_OK);
    cr_assert_eq(spool_mark_tls_optional(m), SPOOL_OK);
    got = t_reopen(sp, m, &back);
    cr_assert_eq(got->requiretls, 1);
    cr_assert_eq(got->tls_optional, 0);
    cr_assert_str_eq(back, "X: y\r\n\r\nb\r\n");
    free(back);
    spool_env_free(got);
    spool_close(sp);
}

Test(requiretls_spool, mark_after_the_envelope_left_the_buffer_is_late)
{
    struct spool     *sp = t_spool();
    struct spool_env  e, *got;
    struct spool_msg *m;
    char             *big = xmalloc(300 * 1024), *back;

    memset(big, 'h', 300 * 1024);
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, big, 300 * 1024), SPOOL_OK);
    cr_assert_eq(spool_mark_tls_optional(m), SPOOL_ELATE);
    cr_assert_eq(spool_write(m, "\r\n", 2), SPOOL_OK);  /* m still good */
    got = t_reopen(sp, m, &back);
    cr_assert_eq(got->tls_optional, 0);
    cr_assert_eq(got->body_size, 300 * 1024 + 2);
    cr_assert_eq(memcmp(back, big, 300 * 1024), 0);
    free(back);
    free(big);
    spool_env_free(got);
    spool_close(sp);
}
