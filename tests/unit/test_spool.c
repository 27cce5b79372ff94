/*
 * test_spool.c - unit tests for spool/: queue ids, the envelope and state
 * formats (hostile values, truncation, garbling), the writer (chunked
 * writes, commit, abort, batch), start-up purge, flock ownership, the
 * recycling of delivered files (on /dev/shm) and the ENOSPC mapping (on a
 * tiny tmpfs when root may mount one).
 *
 * Every test works in its own mkdtemp() directory and removes it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>

#include <criterion/criterion.h>

#include "common/util.h"
#include "spool/spool.h"
#include "spool/spool_int.h"       /* the spares: white box */
#include "tests/unit/t_fs.h"

/* ---- helpers ------------------------------------------------------------ */

#define T_PATH(buf, ...) cr_assert_lt((size_t)snprintf((buf), sizeof(buf), \
    __VA_ARGS__), sizeof(buf), "path too long")

/* Temp dirs of the running test: removed by t_rm_rf(), or by the suites'
 * .fini when an assertion ended the test early. */
static char *t_dirs[4];


static char *
t_mkdtemp_in(const char *base)
{
    char   tmpl[4096];
    size_t i;

    T_PATH(tmpl, "%s/mtad-spool-test-XXXXXX", base);
    cr_assert_not_null(mkdtemp(tmpl), "mkdtemp: %s", strerror(errno));
    for (i = 0; i < ARRAY_LEN(t_dirs) && t_dirs[i] != NULL; i++)
        ;
    cr_assert_lt(i, ARRAY_LEN(t_dirs));
    t_dirs[i] = xstrdup(tmpl);
    return t_dirs[i];
}


static char *
t_mkdtemp(void)
{
    return t_mkdtemp_in("/tmp");
}


static void
t_rm_rf(char *dir)
{
    size_t i;

    umount2(dir, MNT_DETACH);           /* only the ENOSPC test mounts */
    t_rm_tree(dir);
    for (i = 0; i < ARRAY_LEN(t_dirs); i++)
        if (t_dirs[i] == dir)
            t_dirs[i] = NULL;
    free(dir);
}


static void
t_cleanup(void)
{
    size_t i;

    for (i = 0; i < ARRAY_LEN(t_dirs); i++)
        if (t_dirs[i] != NULL)
            t_rm_rf(t_dirs[i]);
}

TestSuite(spool_id, .fini = t_cleanup);
TestSuite(spool_env, .fini = t_cleanup);
TestSuite(spool_write, .fini = t_cleanup);
TestSuite(spool_prepare, .fini = t_cleanup);
TestSuite(spool_state, .fini = t_cleanup);
TestSuite(spool_reader, .fini = t_cleanup);
TestSuite(spool_pool, .fini = t_cleanup);
TestSuite(spool_tmp, .fini = t_cleanup);


static struct spool *
t_spool(const char *dir, int fsync, unsigned shard)
{
    struct spool *sp;
    int           rc;

    rc = spool_prepare(dir, (uid_t)-1, (gid_t)-1);
    cr_assert_eq(rc, SPOOL_OK, "prepare: %s", spool_errstr(NULL));
    rc = spool_open(&sp, dir, fsync, shard);
    cr_assert_eq(rc, SPOOL_OK, "open: %s", spool_errstr(NULL));
    return sp;
}


/* t_count - entries in dir/sub, . and .. excluded. */
static size_t
t_count(const char *dir, const char *sub)
{
    char           path[4096];
    DIR           *d;
    struct dirent *de;
    size_t         n = 0;

    T_PATH(path, "%s/%s", dir, sub);
    d = opendir(path);
    cr_assert_not_null(d, "opendir %s", path);
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}


static void
t_touch(const char *dir, const char *sub, const char *name, const char *text)
{
    char path[4096];
    FILE *f;

    T_PATH(path, "%s/%s/%s", dir, sub, name);
    f = fopen(path, "w");
    cr_assert_not_null(f, "fopen %s", path);
    fputs(text, f);
    fclose(f);
}


static int
t_exists(const char *dir, const char *sub, const char *name)
{
    char        path[4096];
    struct stat st;

    T_PATH(path, "%s/%s/%s", dir, sub, name);
    return stat(path, &st) == 0;
}


/* A plain envelope whose strings belong to the test (not freed). */
static struct spool_rcpt t_rcpts[3] = {
    { .addr = "a@example.org", .notify = 0 },
    { .addr = "b@example.net", .orcpt = "rfc822;b@example.net",
      .notify = SMTP_NOTIFY_SUCCESS | SMTP_NOTIFY_FAILURE },
    { .addr = "c@[127.0.0.1]", .notify = SMTP_NOTIFY_NEVER },
};

static void
t_env(struct spool_env *e)
{
    memset(e, 0, sizeof(*e));
    e->sender = "sender@example.com";
    e->body = SMTP_BODY_8BITMIME;
    e->ret = SMTP_RET_HDRS;
    e->envid = "env-1";
    e->client_ip = "127.0.0.1";
    e->client_port = 40000;
    e->helo = "client.example";
    e->rcpt = t_rcpts;
    e->nrcpt = 3;
}


static int
t_streq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}


static void
t_env_eq(const struct spool_env *got, const struct spool_env *want)
{
    size_t i;

    cr_assert_str_eq(got->id, want->id);
    cr_assert_eq(got->arrival_ms, want->arrival_ms);
    cr_assert(t_streq(got->sender, want->sender), "sender got %s want %s",
        got->sender, want->sender);
    cr_assert_eq(got->body, want->body);
    cr_assert_eq(got->smtputf8, want->smtputf8);
    cr_assert_eq(got->ret, want->ret);
    cr_assert(t_streq(got->envid, want->envid));
    cr_assert(t_streq(got->client_ip, want->client_ip));
    cr_assert_eq(got->client_port, want->client_port);
    cr_assert(t_streq(got->helo, want->helo), "helo got %s want %s",
        got->helo, want->helo);
    cr_assert_eq(got->nrcpt, want->nrcpt);
    for (i = 0; i < want->nrcpt; i++) {
        cr_assert(t_streq(got->rcpt[i].addr, want->rcpt[i].addr),
            "rcpt %zu got %s want %s", i, got->rcpt[i].addr,
            want->rcpt[i].addr);
        cr_assert(t_streq(got->rcpt[i].orcpt, want->rcpt[i].orcpt));
        cr_assert_eq(got->rcpt[i].notify, want->rcpt[i].notify);
    }
}


/* t_commit - a committed message with body; returns its id in id. */
static void
t_commit(struct spool *sp, const char *body, size_t n, char *id)
{
    struct spool_env  e;
    struct spool_msg *m;

    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_write(m, body, n), SPOOL_OK);
    cr_assert_eq(spool_finish(m), SPOOL_OK);
    memcpy(id, spool_msg_id(m), SPOOL_ID_SIZE);
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
}


static char *
t_body(int fd, off_t off, uint64_t n)
{
    char   *b = xmalloc(n + 1);
    ssize_t r;
    size_t  got = 0;

    while (got < n && (r = pread(fd, b + got, n - got, off + (off_t)got)) > 0)
        got += (size_t)r;
    cr_assert_eq(got, n);
    b[n] = '\0';
    return b;
}


/* ---- ids ---------------------------------------------------------------- */

Test(spool_id, hundred_thousand_ids_are_valid_increasing_and_timed)
{
    char         *dir = t_mkdtemp();
    struct spool *sp = t_spool(dir, 0, 0x2a);
    char          prev[SPOOL_ID_SIZE] = "", id[SPOOL_ID_SIZE];
    uint64_t      t0 = util_wall_ms(), t1, ms;
    int           i;

    for (i = 0; i < 100000; i++) {
        spool_new_id(sp, id);
        cr_assert(spool_id_valid(id), "invalid id %s", id);
        cr_assert_gt(strcmp(id, prev), 0, "id %s after %s", id, prev);
        cr_assert_eq(spool_id_shard(id), 0x2a);
        memcpy(prev, id, sizeof(id));
        if (i == 0)
            cr_assert_geq(spool_id_ms(id), t0);
    }
    t1 = util_wall_ms();
    /* Borrowing from the next milliseconds is allowed only when more than
     * 4096 ids were made in one millisecond. */
    ms = spool_id_ms(prev);
    cr_assert_leq(ms, t1 + 100000 / 4096 + 1, "ms %llu t1 %llu",
        (unsigned long long)ms, (unsigned long long)t1);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_id, shards_keep_ids_apart)
{
    char         *dir = t_mkdtemp();
    struct spool *a = t_spool(dir, 0, 1), *b = t_spool(dir, 0, 2), *c;
    char          ia[SPOOL_ID_SIZE], ib[SPOOL_ID_SIZE];

    spool_new_id(a, ia);
    spool_new_id(b, ib);
    cr_assert_str_neq(ia, ib);
    cr_assert_eq(spool_id_shard(ia), 1);
    cr_assert_eq(spool_id_shard(ib), 2);
    cr_assert_eq(spool_open(&c, dir, 0, 256), SPOOL_ESYS);
    cr_assert_null(c);
    spool_close(a);
    spool_close(b);
    t_rm_rf(dir);
}


Test(spool_id, valid_form_only)
{
    static const struct { const char *id; int want; } cases[] = {
        { "0123456789ABCDEF", 1 }, { "FFFFFFFFFFFFFFFF", 1 },
        { "0123456789abcdef", 0 }, { "0123456789ABCDE", 0 },
        { "0123456789ABCDEF0", 0 }, { "0123456789ABCDEG", 0 },
        { "../queue/0123456", 0 }, { "0123456789ABCDE/", 0 },
        { "", 0 }, { " 123456789ABCDEF", 0 },
    };
    size_t i;

    for (i = 0; i < ARRAY_LEN(cases); i++)
        cr_assert_eq(spool_id_valid(cases[i].id), cases[i].want,
            "id \"%s\": got %d want %d", cases[i].id,
            spool_id_valid(cases[i].id), cases[i].want);
    cr_assert_eq(spool_id_valid(NULL), 0);
}


/* ---- envelope format ------------------------------------------------------ */

Test(spool_env, round_trip_with_hostile_values)
{
    struct spool_env   e, *got;
    struct spool_rcpt *r = xcalloc(1000, sizeof(*r));
    char             **addrs = xcalloc(1000, sizeof(*addrs));
    char              *out;
    size_t             len, used, i, lines = 0, rcptlines = 0;

    t_env(&e);
    memcpy(e.id, "0123456789ABCDEF", SPOOL_ID_SIZE);
    e.arrival_ms = 1234567890123ULL;
    e.sender = "a b\r\n+=x\xc3\xa9@d\x01\x7f\xff";
    e.helo = "evil\nrcpt 0 x@y +\nend\n";
    e.envid = "+=";
    e.client_ip = "::1";
    e.client_port = 65535;
    e.smtputf8 = 1;
    e.body = SMTP_BODY_BINARYMIME;
    e.ret = SMTP_RET_FULL;
    e.body_size = 18446744073709551615ULL;
    for (i = 0; i < 1000; i++) {
        addrs[i] = xmalloc(64);
        snprintf(addrs[i], 64, "\"u %zu\\\n+\"@d\xe2\x82\xac.example", i);
        r[i].addr = addrs[i];
        r[i].orcpt = i % 3 == 0 ? NULL : i % 3 == 1 ? "" : "rfc822;x+y=z@ex";
        r[i].notify = (unsigned)(i % 16);
    }
    e.rcpt = r;
    e.nrcpt = 1000;
    spool_env_format(&e, &out, &len);
    cr_assert_eq(strlen(out), len);
    /* No value can add a line: count lines and rcpt lines. */
    for (i = 0; i < len; i++)
        if (out[i] == '\n') {
            lines++;
            if (i + 6 < len && memcmp(out + i + 1, "rcpt ", 5) == 0)
                rcptlines++;
        }
    cr_assert_eq(lines, 13 + 1000, "lines %zu", lines);
    cr_assert_eq(rcptlines, 1000);
    cr_assert_eq(spool_env_parse(out, len, &got, &used), SPOOL_OK);
    cr_assert_eq(used, len);
    t_env_eq(got, &e);
    cr_assert_eq(got->body_size, e.body_size);
    spool_env_free(got);

    /* Empty sender and NULL optional fields survive too. */
    e.sender = "";
    e.envid = NULL;
    e.helo = NULL;
    e.client_ip = NULL;
    e.body_size = 0;
    free(out);
    spool_env_format(&e, &out, &len);
    cr_assert_eq(spool_env_parse(out, len, &got, &used), SPOOL_OK);
    t_env_eq(got, &e);
    cr_assert_null(got->auth_user, "no auth line, no user");
    spool_env_free(got);
    free(out);

    /* The AUTH login (queue quotas per user): an optional line, xtext. */
    e.auth_user = "al ice+x";
    spool_env_format(&e, &out, &len);
    cr_assert_not_null(strstr(out, "\nauth al+20ice+2Bx\nend\n"), "%s", out);
    cr_assert_eq(spool_env_parse(out, len, &got, &used), SPOOL_OK);
    cr_assert_str_eq(got->auth_user, "al ice+x");
    spool_env_free(got);
    e.auth_user = NULL;
    free(out);
    for (i = 0; i < 1000; i++)
        free(addrs[i]);
    free(addrs);
    free(r);
}


Test(spool_env, parse_stops_at_end_line_and_reports_consumed)
{
    struct spool_env e, *got;
    char            *out, *withbody;
    size_t           len, used;

    t_env(&e);
    memcpy(e.id, "00000000001FF001", SPOOL_ID_SIZE);
    e.body_size = 5;
    spool_env_format(&e, &out, &len);
    withbody = xmalloc(len + 6);
    memcpy(withbody, out, len);
    memcpy(withbody + len, "end\nx", 5);   /* body may look like anything */
    cr_assert_eq(spool_env_parse(withbody, len + 5, &got, &used), SPOOL_OK);
    cr_assert_eq(used, len);
    cr_assert_eq(got->body_size, 5);
    spool_env_free(got);
    free(withbody);
    free(out);
}


/* t_mutate - out with the first "from" replaced by "to"; must occur. */
static char *
t_mutate(const char *src, const char *from, const char *to, size_t *len)
{
    const char *at = strstr(src, from);
    char       *dst;
    size_t      pre;

    cr_assert_not_null(at, "\"%s\" not in envelope", from);
    pre = (size_t)(at - src);
    *len = strlen(src) - strlen(from) + strlen(to);
    dst = xmalloc(*len + 1);
    memcpy(dst, src, pre);
    strcpy(dst + pre, to);
    strcat(dst, at + strlen(from));
    return dst;
}


Test(spool_env, parse_rejects_truncated_and_garbled)
{
    static const struct { const char *name, *from, *to; } cases[] = {
        { "magic", "MTAD-SPOOL 1", "MTAD-SPOOL 2" },
        { "unknown key", "\nhelo ", "\nhelo2 " },
        { "missing key", "helo client.example\n", "" },
        { "repeated key", "helo client.example\n",
          "helo client.example\nhelo x\n" },
        { "size not first", "size 00000000000000000000\nid 0123456789ABCDEF\n",
          "id 0123456789ABCDEF\nsize 00000000000000000000\n" },
        { "short size", "size 00000000000000000000", "size 0000000000000000000" },
        { "size letters", "size 00000000000000000000", "size 0000000000000000000x" },
        { "bad id", "id 0123456789ABCDEF", "id 0123456789abcdef" },
        { "arrival letters", "arrival 0", "arrival 0x" },
        { "arrival overflow", "arrival 0", "arrival 99999999999999999999" },
        { "arrival empty", "arrival 0", "arrival " },
        { "port range", "127.0.0.1 40000", "127.0.0.1 65536" },
        { "port missing", "127.0.0.1 40000", "127.0.0.1" },
        { "extra field", "helo client.example", "helo client.example x" },
        { "double space", "helo client.example", "helo  client.example" },
        { "body word", "body 8BITMIME", "body 8bitmime" },
        { "ret word", "ret HDRS", "ret HEADERS" },
        { "smtputf8 2", "smtputf8 0", "smtputf8 2" },
        { "smtputf8 00", "smtputf8 0", "smtputf8 00" },
        { "notify bits", "rcpt 6 ", "rcpt 16 " },
        { "xtext cut", "sender sender@example.com", "sender a+4" },
        { "xtext lower", "sender sender@example.com", "sender a+0a" },
        { "xtext canonical", "sender sender@example.com", "sender +41" },
        { "xtext NUL", "sender sender@example.com", "sender a+00b" },
        { "raw =", "sender sender@example.com", "sender a=b" },
        { "null sender +", "sender sender@example.com", "sender +" },
        { "null addr +", "rcpt 0 a@example.org +", "rcpt 0 + +" },
        { "CRLF", "helo client.example\n", "helo client.example\r\n" },
        { "too few rcpts", "rcpts 3", "rcpts 4" },
        { "too many rcpts", "rcpts 3", "rcpts 2" },
        { "rcpts overflow", "rcpts 3", "rcpts 99999999999999999999" },
        { "rcpt before rcpts", "rcpts 3\nrcpt 0 a@example.org +\n",
          "rcpt 0 a@example.org +\nrcpts 3\n" },
        { "end with field", "\nend\n", "\nend x\n" },
        { "empty line", "\nend\n", "\n\nend\n" },
    };
    struct spool_env e, *got;
    char            *out, *bad;
    size_t           len, blen, i;

    t_env(&e);
    memcpy(e.id, "0123456789ABCDEF", SPOOL_ID_SIZE);
    spool_env_format(&e, &out, &len);
    cr_assert_eq(spool_env_parse(out, len, &got, NULL), SPOOL_OK);
    spool_env_free(got);
    for (i = 0; i < ARRAY_LEN(cases); i++) {
        bad = t_mutate(out, cases[i].from, cases[i].to, &blen);
        got = (struct spool_env *)1;
        cr_assert_eq(spool_env_parse(bad, blen, &got, NULL), SPOOL_EFORMAT,
            "case \"%s\" was accepted", cases[i].name);
        cr_assert_null(got);
        free(bad);
    }
    /* Every proper prefix is incomplete. */
    for (i = 0; i < len; i++)
        cr_assert_eq(spool_env_parse(out, i, &got, NULL), SPOOL_EFORMAT,
            "prefix of %zu bytes accepted", i);
    free(out);
}


/* ---- writer ----------------------------------------------------------------- */

Test(spool_write, twenty_megabytes_in_odd_chunks_arrive_exactly)
{
    static const size_t chunks[] = { 1, 7, 4093, 262143, 262144, 262145,
        1000003, 3, 524288 };
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 0, 3);
    const size_t      total = 20 * 1024 * 1024;
    char             *body = xmalloc(total), *back, id[SPOOL_ID_SIZE];
    struct spool_env  e, *got;
    struct spool_msg *m;
    size_t            off = 0, k = 0, c;
    uint32_t          x = 12345;
    off_t             boff;
    struct stat       st;
    int               fd;

    for (off = 0; off < total; off++) {
        x = x * 1103515245u + 12345u;
        body[off] = (char)(x >> 16);
    }
    t_env(&e);
    e.arrival_ms = 1700000000000ULL;
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_str_eq(e.id, spool_msg_id(m));
    cr_assert_eq(t_count(dir, "tmp"), 1);
    for (off = 0; off < total; off += c, k++) {
        c = chunks[k % ARRAY_LEN(chunks)];
        if (c > total - off)
            c = total - off;
        cr_assert_eq(spool_write(m, body + off, c), SPOOL_OK);
    }
    cr_assert_eq(spool_msg_size(m), total);
    cr_assert_eq(spool_finish(m), SPOOL_OK);
    memcpy(id, spool_msg_id(m), sizeof(id));
    cr_assert_eq(t_count(dir, "queue"), 0, "visible before commit");
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert(t_exists(dir, "queue", id));

    cr_assert_eq(spool_msg_open(sp, id, 0, &got, &fd, &boff), SPOOL_OK,
        "%s", spool_errstr(sp));
    t_env_eq(got, &e);
    cr_assert_eq(got->body_size, total);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    cr_assert_eq((uint64_t)st.st_size, (uint64_t)boff + total);
    back = t_body(fd, boff, total);
    cr_assert(memcmp(back, body, total) == 0, "body differs");
    free(back);
    close(fd);
    spool_env_free(got);
    free(body);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_write, envelope_over_the_write_buffer_is_written_whole)
{
    char              *dir = t_mkdtemp();
    struct spool      *sp = t_spool(dir, 0, 0);
    struct spool_rcpt *r = xcalloc(1000, sizeof(*r));
    struct spool_env   e, *got;
    char               id[SPOOL_ID_SIZE], *back;
    size_t             i;
    off_t              boff;
    int                fd;

    t_env(&e);
    for (i = 0; i < 1000; i++) {        /* ~400 bytes each, 400 KB in all */
        r[i].addr = xmalloc(400);
        memset(r[i].addr, 'a' + (int)(i % 26), 390);
        snprintf(r[i].addr + 390, 10, "@%zu", i);
    }
    e.rcpt = r;
    e.nrcpt = 1000;
    {
        struct spool_msg *m;

        cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
        cr_assert_eq(spool_write(m, "hello\r\n", 7), SPOOL_OK);
        memcpy(id, spool_msg_id(m), sizeof(id));
        cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    }
    cr_assert_eq(spool_msg_open(sp, id, 1, &got, &fd, &boff), SPOOL_OK,
        "%s", spool_errstr(sp));
    t_env_eq(got, &e);
    cr_assert_gt(boff, 256 * 1024);
    back = t_body(fd, boff, got->body_size);
    cr_assert_str_eq(back, "hello\r\n");
    free(back);
    close(fd);
    spool_env_free(got);
    for (i = 0; i < 1000; i++)
        free(r[i].addr);
    free(r);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_write, abort_leaves_nothing)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env  e;
    struct spool_msg *m;
    char              big[300000];

    memset(big, 'x', sizeof(big));
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, big, sizeof(big)), SPOOL_OK);
    spool_abort(m);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, big, 10), SPOOL_OK);
    cr_assert_eq(spool_finish(m), SPOOL_OK);
    spool_abort(m);
    spool_abort(NULL);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert_eq(t_count(dir, "queue"), 0);
    cr_assert_eq(t_count(dir, "state"), 0);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_write, fsync_commit_and_write_after_finish)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env  e;
    struct spool_msg *m;
    char              id[SPOOL_ID_SIZE];

    t_commit(sp, "body\r\n", 6, id);
    cr_assert(t_exists(dir, "queue", id));
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_finish(m), SPOOL_OK);
    cr_assert_eq(spool_write(m, "x", 1), SPOOL_ESYS);
    cr_assert_eq(errno, EINVAL);
    spool_abort(m);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_write, batch_commit_of_a_hundred)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 1, 7);
    struct spool_msg *ms[100];
    struct spool_env  e, *got;
    char              ids[100][SPOOL_ID_SIZE], (*list)[SPOOL_ID_SIZE];
    char              body[64], *back;
    int               rcs[100], fd;
    size_t            i, n;
    off_t             boff;

    t_env(&e);
    for (i = 0; i < 100; i++) {
        cr_assert_eq(spool_create(sp, &e, &ms[i]), SPOOL_OK);
        snprintf(body, sizeof(body), "message %zu\r\n", i);
        cr_assert_eq(spool_write(ms[i], body, strlen(body)), SPOOL_OK);
        cr_assert_eq(spool_finish(ms[i]), SPOOL_OK);
        memcpy(ids[i], spool_msg_id(ms[i]), SPOOL_ID_SIZE);
        rcs[i] = 99;
    }
    cr_assert_eq(spool_commit_batch(sp, ms, 100, rcs), SPOOL_OK, "%s",
        spool_errstr(sp));
    for (i = 0; i < 100; i++) {
        cr_assert_eq(rcs[i], SPOOL_OK);
        cr_assert_null(ms[i]);
    }
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert_eq(spool_list(sp, &list, &n), SPOOL_OK);
    cr_assert_eq(n, 100);
    for (i = 0; i < 100; i++) {
        cr_assert_str_eq(list[i], ids[i], "list is sorted by creation");
        cr_assert_eq(spool_msg_open(sp, ids[i], 0, &got, &fd, &boff),
            SPOOL_OK);
        snprintf(body, sizeof(body), "message %zu\r\n", i);
        back = t_body(fd, boff, got->body_size);
        cr_assert_str_eq(back, body);
        free(back);
        close(fd);
        spool_env_free(got);
    }
    free(list);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_write, batch_commit_never_replaces_a_queue_file)
{
    char             *dir = t_mkdtemp(), path[4096], text[64];
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_msg *ms[3];
    struct spool_env  e;
    char              ids[3][SPOOL_ID_SIZE];
    int               rcs[3], i;
    FILE             *f;

    t_env(&e);
    for (i = 0; i < 3; i++) {
        cr_assert_eq(spool_create(sp, &e, &ms[i]), SPOOL_OK);
        cr_assert_eq(spool_write(ms[i], "b\r\n", 3), SPOOL_OK);
        memcpy(ids[i], spool_msg_id(ms[i]), SPOOL_ID_SIZE);
    }
    /* Someone else committed the middle id meanwhile. */
    t_touch(dir, "queue", ids[1], "theirs");
    cr_assert_eq(spool_commit_batch(sp, ms, 3, rcs), SPOOL_ESYS);
    cr_assert_eq(rcs[0], SPOOL_OK);
    cr_assert_eq(rcs[1], SPOOL_ESYS);
    cr_assert_eq(rcs[2], SPOOL_OK);
    cr_assert_null(ms[0]);
    cr_assert_not_null(ms[1]);
    cr_assert_null(ms[2]);
    cr_assert_not_null(strstr(spool_errstr(sp), "rename tmp/"), "%s",
        spool_errstr(sp));
    T_PATH(path, "%s/queue/%s", dir, ids[1]);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(text, sizeof(text), f));
    fclose(f);
    cr_assert_str_eq(text, "theirs");
    spool_abort(ms[1]);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert_eq(t_count(dir, "queue"), 3);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_write, create_skips_an_id_already_queued)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env  e;
    struct spool_msg *m;
    char              probe[SPOOL_ID_SIZE], next[SPOOL_ID_SIZE];
    int               i;

    /* The next id is (ms, counter + 1) for whatever millisecond create
     * runs in: occupy that counter for the next 300 ms, so create must
     * skip an id that is already queued. */
    spool_new_id(sp, probe);
    for (i = 0; i <= 300; i++) {
        unsigned ctr = ((unsigned)strtoul(probe + 13, NULL, 16) + 1) & 0xfff;

        snprintf(next, sizeof(next), "%011llX00%03X",
            (unsigned long long)(spool_id_ms(probe) + (uint64_t)i), ctr);
        cr_assert(spool_id_valid(next));
        t_touch(dir, "queue", next, "occupied");
    }
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    {
        char path[4096];
        struct stat st;

        T_PATH(path, "%s/queue/%s", dir, spool_msg_id(m));
        cr_assert_neq(stat(path, &st), 0, "id %s reused", spool_msg_id(m));
    }
    cr_assert_eq(spool_commit(m), SPOOL_OK);
    spool_close(sp);
    t_rm_rf(dir);
}


/* ---- writer numbers: two generations of one shard ---------- */

/* t_id_seq - an id without its writer number: milliseconds, shard and the
 * 5-bit counter, as one number (what would collide without the writer). */
static uint64_t
t_id_seq(const char *id)
{
    char     low[4];
    unsigned v;

    memcpy(low, id + 13, 3);
    low[3] = '\0';
    v = (unsigned)strtoul(low, NULL, 16);
    return (spool_id_ms(id) << 8 | spool_id_shard(id)) << 5 | (v & 0x1f);
}


static unsigned
t_id_writer(const char *id)
{
    return (unsigned)strtoul(id + 13, NULL, 16) >> 5;
}


Test(spool_id, writer_number_rides_in_the_last_digits)
{
    char         *dir = t_mkdtemp();
    struct spool *sp = t_spool(dir, 0, 0x2a);
    char          prev[SPOOL_ID_SIZE] = "", id[SPOOL_ID_SIZE];
    int           i;

    spool_set_writer(sp, 77);
    for (i = 0; i < 5000; i++) {
        spool_new_id(sp, id);
        cr_assert(spool_id_valid(id), "invalid id %s", id);
        cr_assert_gt(strcmp(id, prev), 0, "id %s after %s", id, prev);
        cr_assert_eq(spool_id_shard(id), 0x2a);
        cr_assert_eq(t_id_writer(id), 77, "id %s", id);
        memcpy(prev, id, sizeof(id));
    }
    spool_close(sp);
    t_rm_rf(dir);
}


/*
 * An old and a new generation of shard 3 at once (a reload): two spools
 * with different writer numbers create and commit in turn, neither
 * looking into queue/ first.  The old one skips an id now and then, so
 * the distance between the two counters sweeps through every value and
 * both make the same (ms, counter) pairs (the test checks they did).
 * Every commit must succeed: only the writer number keeps the ids apart.
 */
Test(spool_id, two_generations_of_a_shard_never_share_an_id)
{
    enum { N = 1500 };
    char         *dir = t_mkdtemp();
    struct spool *old = t_spool(dir, 0, 3), *cur = t_spool(dir, 0, 3);
    static char   ids[2][N][SPOOL_ID_SIZE];
    size_t        i, j, same = 0;

    spool_set_writer(old, 5);
    spool_set_writer(cur, 6);
    for (i = 0; i < N; i++) {
        char skip[SPOOL_ID_SIZE];

        if (i % 3 == 0)
            spool_new_id(old, skip);
        t_commit(old, "a\r\n", 3, ids[0][i]);
        t_commit(cur, "b\r\n", 3, ids[1][i]);
        cr_assert_eq(t_id_writer(ids[0][i]), 5);
        cr_assert_eq(t_id_writer(ids[1][i]), 6);
        cr_assert_str_neq(ids[0][i], ids[1][i]);
    }
    cr_assert_eq(t_count(dir, "queue"), 2 * N);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    /* Both ran ahead of the clock through the same (ms, counter) pairs:
     * without the writer number these ids would have been equal. */
    for (i = 0, j = 0; i < N && j < N; ) {
        uint64_t a = t_id_seq(ids[0][i]), b = t_id_seq(ids[1][j]);

        if (a == b) {
            same++;
            i++;
            j++;
        } else if (a < b) {
            i++;
        } else {
            j++;
        }
    }
    cr_assert_gt(same, 0, "the two writers never met: the test proved "
        "nothing");
    spool_close(old);
    spool_close(cur);
    t_rm_rf(dir);
}


/* With a writer number create does not look into queue/; the commit's
 * rename still never replaces a queue file that holds the id. */
Test(spool_write, writer_commit_never_replaces_a_queue_file)
{
    char             *dir = t_mkdtemp(), path[4096], text[64];
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env  e;
    struct spool_msg *m;
    FILE             *f;

    spool_set_writer(sp, 9);
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_write(m, "b\r\n", 3), SPOOL_OK);
    /* a dead process of the same writer number left this id queued */
    t_touch(dir, "queue", spool_msg_id(m), "theirs");
    cr_assert_eq(spool_commit(m), SPOOL_ESYS);
    cr_assert_not_null(strstr(spool_errstr(sp), "rename tmp/"), "%s",
        spool_errstr(sp));
    T_PATH(path, "%s/queue/%s", dir, spool_msg_id(m));
    f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(text, sizeof(text), f));
    fclose(f);
    cr_assert_str_eq(text, "theirs");
    spool_abort(m);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert_eq(t_count(dir, "queue"), 1);
    spool_close(sp);
    t_rm_rf(dir);
}


/* The schedule in the inode: what deliver_load() reads with one
 * fstatat() instead of opening the queue and state files. */
Test(spool_state, schedule_is_peeked_from_the_queue_file)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], path[512];
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env *env;
    uint64_t          when = 1;
    int               held = 1, marked = 1;

    t_commit(sp, "hi", 2, id);
    snprintf(path, sizeof(path), "%s/queue/%s", dir, id);
    /* never tried: due now, not held */
    cr_assert_eq(spool_sched_peek(sp, id, &when, &held, &marked), SPOOL_OK);
    cr_assert_eq(when, 0);
    cr_assert_eq(held, 0);
    cr_assert_eq(marked, 0);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, NULL, NULL), SPOOL_OK);
    env->attempts = 2;
    env->next_retry_ms = 1790000000123ULL;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_sched_peek(sp, id, &when, &held, &marked), SPOOL_OK);
    cr_assert_eq(marked, 1);
    cr_assert_eq(when, 1790000000123ULL, "got %llu", (unsigned long long)when);
    cr_assert_eq(held, 0);
    env->held = 1;
    env->next_retry_ms = 0;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_sched_peek(sp, id, &when, &held, NULL), SPOOL_OK);
    cr_assert_eq(when, 0);
    cr_assert_eq(held, 1);
    /* a state saved before the schedule was kept there (or a save cut
     * short): not guessed, the caller reads the files */
    cr_assert_eq(chmod(path, 0700), 0);
    cr_assert_eq(spool_sched_peek(sp, id, &when, &held, NULL), SPOOL_EFORMAT);
    env->has_state = 1;
    cr_assert_eq(spool_remove_env(sp, env), SPOOL_OK);
    cr_assert_eq(spool_sched_peek(sp, id, &when, &held, NULL), SPOOL_ENOENT);
    spool_env_free(env);
    spool_close(sp);
    t_rm_rf(dir);
}


/* ---- hand-off (spool_keep) ----------------------------------------------- */

/* The kept fd after a commit: open, holding the flock (another open file
 * cannot take it, so mtactl and other workers see the message as owned),
 * the same file as queue/<id>, the body where body_off says; the env
 * parsed back equals what spool_msg_open() reads. */
static void
t_keep_commit(int fsync, int batch)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, fsync, 0);
    struct spool_env  e, *kept = NULL, *got = NULL;
    struct spool_msg *m;
    const char        body[] = "Subject: kept\r\n\r\nhello\r\n";
    char              id[SPOOL_ID_SIZE], path[4096], back[64];
    struct stat       a, b;
    off_t             koff = 0, off = 0;
    int               kfd = -1, fd2, rc;

    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    rc = spool_keep(m, &kept, &kfd, &koff);
    if (rc == SPOOL_EFORMAT && !fsync) {
        /* a file system where close() may report errors: refused, and
         * the message goes the usual way */
        cr_assert_null(kept);
        spool_abort(m);
        spool_close(sp);
        t_rm_rf(dir);
        return;
    }
    cr_assert_eq(rc, SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_not_null(kept);
    cr_assert_eq(spool_keep(m, &got, &fd2, &off), SPOOL_EFORMAT, "twice");
    cr_assert_null(got);
    cr_assert_eq(spool_write(m, body, sizeof(body) - 1), SPOOL_OK);
    kept->body_size = spool_msg_size(m);
    memcpy(id, spool_msg_id(m), SPOOL_ID_SIZE);
    if (batch) {
        int rcs[1];

        cr_assert_eq(spool_commit_batch(sp, &m, 1, rcs), SPOOL_OK);
        cr_assert_eq(rcs[0], SPOOL_OK);
        cr_assert_null(m);
    } else {
        cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    }
    /* the fd is still open, and it is queue/<id> */
    cr_assert_eq(fstat(kfd, &a), 0, "kept fd closed: %s", strerror(errno));
    T_PATH(path, "%s/queue/%s", dir, id);
    cr_assert_eq(stat(path, &b), 0);
    cr_assert(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    /* locked: a second open file cannot take the lock */
    fd2 = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd2, 0);
    cr_assert_eq(flock(fd2, LOCK_EX | LOCK_NB), -1, "lock not held");
    cr_assert_eq(errno, EWOULDBLOCK);
    close(fd2);
    cr_assert_eq(spool_msg_open(sp, id, 1, &got, NULL, NULL), SPOOL_ELOCKED);
    /* the body, read through the kept fd (delivery sends from it) */
    cr_assert_eq(pread(kfd, back, sizeof(body) - 1, koff),
        (ssize_t)sizeof(body) - 1);
    cr_assert(memcmp(back, body, sizeof(body) - 1) == 0);
    /* and the same bytes in memory: the whole message went in one write */
    cr_assert_not_null(kept->body_copy);
    cr_assert(memcmp(kept->body_copy, body, sizeof(body) - 1) == 0);
    /* the env is what a reader of the file gets */
    cr_assert_eq(spool_msg_open(sp, id, 0, &got, NULL, &off), SPOOL_OK,
        "%s", spool_errstr(sp));
    cr_assert_eq(off, koff);
    cr_assert_eq(got->body_size, kept->body_size);
    cr_assert_eq(kept->has_state, 0);
    e.arrival_ms = got->arrival_ms;
    t_env_eq(kept, got);
    spool_env_free(got);
    /* the owner finishes: remove, close; then the lock is free */
    cr_assert_eq(spool_remove_env(sp, kept), SPOOL_OK);
    close(kfd);
    spool_env_free(kept);
    cr_assert_eq(t_count(dir, "queue"), 0);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_keep, commit_hands_over_the_locked_fd)
{
    t_keep_commit(0, 0);
}


Test(spool_keep, commit_hands_over_the_locked_fd_fsync)
{
    t_keep_commit(1, 0);
}


Test(spool_keep, batch_commit_hands_over_the_locked_fd)
{
    t_keep_commit(1, 1);
}


/* The body stays in memory only up to 16 KiB (SPOOL_KEEP_COPY): one
 * byte more, and delivery reads the file. */
Test(spool_keep, body_copy_only_when_small)
{
    static char       body[16 * 1024 + 1];
    size_t            sizes[] = { 16 * 1024, 16 * 1024 + 1 };
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 1, 0);
    size_t            i;

    memset(body, 'b', sizeof(body));
    for (i = 0; i < ARRAY_LEN(sizes); i++) {
        struct spool_env  e, *kept = NULL;
        struct spool_msg *m;
        off_t             koff;
        int               kfd = -1;

        t_env(&e);
        cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s",
            spool_errstr(sp));
        cr_assert_eq(spool_keep(m, &kept, &kfd, &koff), SPOOL_OK, "%s",
            spool_errstr(sp));
        cr_assert_eq(spool_write(m, body, sizes[i]), SPOOL_OK);
        cr_assert_eq(spool_finish(m), SPOOL_OK, "%s", spool_errstr(sp));
        cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
        if (i == 0) {
            cr_assert_not_null(kept->body_copy, "%zu bytes", sizes[i]);
            cr_assert(memcmp(kept->body_copy, body, sizes[i]) == 0);
        } else {
            cr_assert_null(kept->body_copy, "%zu bytes", sizes[i]);
        }
        cr_assert_eq(spool_remove_env(sp, kept), SPOOL_OK);
        close(kfd);
        spool_env_free(kept);
    }
    spool_close(sp);
    t_rm_rf(dir);
}


/* Not committed: spool_abort() closes the kept fd (the caller must not),
 * removes the tmp file, and the env stays the caller's to free. */
Test(spool_keep, abort_closes_the_fd)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env  e, *kept = NULL;
    struct spool_msg *m;
    struct stat       st;
    off_t             koff;
    int               kfd = -1;

    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_keep(m, &kept, &kfd, &koff), SPOOL_OK, "%s",
        spool_errstr(sp));
    cr_assert_eq(spool_write(m, "x\r\n", 3), SPOOL_OK);
    spool_abort(m);
    cr_assert_eq(fstat(kfd, &st), -1, "fd %d left open", kfd);
    cr_assert_eq(errno, EBADF);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert_eq(t_count(dir, "queue"), 0);
    spool_env_free(kept);
    spool_close(sp);
    t_rm_rf(dir);
}


/* After a body write the envelope may have left the buffer: refused. */
Test(spool_keep, refused_after_a_write)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env  e, *kept = NULL;
    struct spool_msg *m;
    static char       big[300 * 1024];
    off_t             koff;
    int               kfd = -1;

    memset(big, 'a', sizeof(big));
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_write(m, big, sizeof(big)), SPOOL_OK);
    cr_assert_eq(spool_keep(m, &kept, &kfd, &koff), SPOOL_EFORMAT);
    cr_assert_null(kept);
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(t_count(dir, "queue"), 1);
    spool_close(sp);
    t_rm_rf(dir);
}


/* ---- start-up ------------------------------------------------------------- */

Test(spool_prepare, purges_tmp_and_orphan_state)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], path[4096];
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env *env;
    struct stat       st;
    int               fd;

    t_commit(sp, "x", 1, id);
    cr_assert_eq(spool_msg_open(sp, id, 1, &env, &fd, NULL), SPOOL_OK);
    env->attempts = 1;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK);
    close(fd);
    spool_env_free(env);
    t_touch(dir, "tmp", "0123456789ABCDEF", "never acknowledged");
    t_touch(dir, "tmp", "junk", "x");
    t_touch(dir, "state", "00000000000AA000", "orphan");
    t_touch(dir, "state", ".00000000000AA001.tmp", "half written");
    spool_close(sp);

    cr_assert_eq(spool_prepare(dir, (uid_t)-1, (gid_t)-1), SPOOL_OK);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert_eq(t_count(dir, "queue"), 1);
    cr_assert_eq(t_count(dir, "state"), 1);
    cr_assert(t_exists(dir, "state", id));
    T_PATH(path, "%s/queue", dir);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0700);
    t_rm_rf(dir);
}


/* The master's start (spool_prepare_tree) leaves state/ to the workers
 * but for half-written leftovers; a worker then removes the orphans and
 * marks old states one id at a time (no serial pass over a
 * million state files before the workers start). */
Test(spool_prepare, tree_leaves_states_to_the_workers)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], path[4096];
    char            (*ids)[SPOOL_ID_SIZE] = NULL;
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env *env;
    size_t            n = 0;
    uint64_t          when;
    int               fd, held, marked;

    t_commit(sp, "x", 1, id);
    cr_assert_eq(spool_msg_open(sp, id, 1, &env, &fd, NULL), SPOOL_OK);
    env->attempts = 2;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK);
    close(fd);
    spool_env_free(env);
    t_touch(dir, "tmp", "0123456789ABCDEF", "never acknowledged");
    t_touch(dir, "state", "00000000000AA000", "orphan");
    t_touch(dir, "state", ".00000000000AA001.tmp", "half written");
    spool_close(sp);

    cr_assert_eq(spool_prepare_tree(dir, (uid_t)-1, (gid_t)-1), SPOOL_OK);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    cr_assert_eq(t_count(dir, "state"), 2, "the orphan stays, for now");
    cr_assert(t_exists(dir, "state", "00000000000AA000"));

    cr_assert_eq(spool_open(&sp, dir, 0, 0), SPOOL_OK);     /* no prepare */
    cr_assert_eq(spool_state_list(sp, &ids, &n), SPOOL_OK);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(ids[0], "00000000000AA000");       /* sorted */
    cr_assert_str_eq(ids[1], id);
    free(ids);
    cr_assert_eq(spool_state_orphan(sp, id), SPOOL_OK, "its message is there");
    cr_assert_eq(spool_state_orphan(sp, "00000000000AA000"), SPOOL_ENOENT);
    cr_assert_eq(t_count(dir, "state"), 1);
    cr_assert(t_exists(dir, "state", id));

    /* a state from before the mark: adopted, then read */
    T_PATH(path, "%s/queue/%s", dir, id);
    cr_assert_eq(chmod(path, 0600), 0);
    cr_assert_eq(spool_sched_peek(sp, id, &when, &held, &marked), SPOOL_OK);
    cr_assert_eq(marked, 0);
    cr_assert_eq(spool_state_adopt(sp, id), SPOOL_OK);
    cr_assert_eq(spool_sched_peek(sp, id, &when, &held, &marked),
        SPOOL_EFORMAT, "marked, no schedule in the inode: read the files");
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, NULL, NULL), SPOOL_OK);
    cr_assert_eq(env->attempts, 2);
    spool_env_free(env);
    cr_assert_eq(spool_state_adopt(sp, "00000000000AA000"), SPOOL_ENOENT);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_prepare, creates_missing_parents)
{
    char *dir = t_mkdtemp(), path[4096];

    T_PATH(path, "%s/a/b/spool", dir);
    cr_assert_eq(spool_prepare(path, getuid(), getgid()), SPOOL_OK, "%s",
        spool_errstr(NULL));
    cr_assert(t_exists(path, "tmp", "."));
    cr_assert(t_exists(path, "state", "."));
    t_touch(dir, "a", "file", "x");
    T_PATH(path, "%s/a/file", dir);
    cr_assert_eq(spool_prepare(path, (uid_t)-1, (gid_t)-1), SPOOL_ESYS);
    cr_assert_not_null(strstr(spool_errstr(NULL), "a/file"), "%s",
        spool_errstr(NULL));
    t_rm_rf(dir);
}


/* ---- reader, state, removal ----------------------------------------------- */

Test(spool_state, save_and_load_round_trip)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE];
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env *env, *again;
    int               fd;
    off_t             boff;

    t_commit(sp, "hi", 2, id);
    cr_assert_eq(spool_msg_open(sp, id, 1, &env, &fd, &boff), SPOOL_OK);
    cr_assert_eq(env->rcpt[0].status, SPOOL_RCPT_PENDING);
    cr_assert_null(env->rcpt[0].relay);
    cr_assert_eq(env->attempts, 0);
    cr_assert_eq(env->held, 0);
    cr_assert_eq(env->next_retry_ms, 0);
    env->next_retry_ms = 1800000000000ULL;
    env->attempts = 7;
    env->held = 1;
    env->rcpt[0].status = SPOOL_RCPT_SENT;
    env->rcpt[0].relay = xstrdup("mx.example[127.0.0.1]:25");
    env->rcpt[0].last_reply = xstrdup("250 2.0.0 Ok: queued as X");
    env->rcpt[1].status = SPOOL_RCPT_BOUNCED;
    env->rcpt[1].last_reply = xstrdup("550 5.1.1 no\r\nrcpt 0 + +\nend\n+=");
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(t_count(dir, "state"), 1, "no temporary file left");
    close(fd);

    cr_assert_eq(spool_msg_open(sp, id, 1, &again, &fd, NULL), SPOOL_OK,
        "%s", spool_errstr(sp));
    cr_assert_eq(again->next_retry_ms, 1800000000000ULL);
    cr_assert_eq(again->attempts, 7);
    cr_assert_eq(again->held, 1);
    cr_assert_eq(again->rcpt[0].status, SPOOL_RCPT_SENT);
    cr_assert_str_eq(again->rcpt[0].relay, "mx.example[127.0.0.1]:25");
    cr_assert_str_eq(again->rcpt[0].last_reply, "250 2.0.0 Ok: queued as X");
    cr_assert_eq(again->rcpt[1].status, SPOOL_RCPT_BOUNCED);
    cr_assert_null(again->rcpt[1].relay);
    cr_assert_str_eq(again->rcpt[1].last_reply, env->rcpt[1].last_reply);
    cr_assert_eq(again->rcpt[2].status, SPOOL_RCPT_PENDING);
    cr_assert_null(again->rcpt[2].last_reply);
    close(fd);
    spool_env_free(again);

    env->rcpt[2].status = 9;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_EFORMAT);
    env->rcpt[2].status = SPOOL_RCPT_PENDING;
    env->rcpt[2].notified = 1;          /* only a bounced one is notified */
    cr_assert_eq(spool_state_save(sp, env), SPOOL_EFORMAT);
    env->rcpt[2].notified = 0;
    spool_env_free(env);

    /* A damaged state file counts as none: every recipient pending again,
     * so the message is delivered rather than stuck for ever. */
    t_touch(dir, "state", id, "MTAD-STATE 1\nid x\nend\n");
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, &fd, NULL), SPOOL_OK);
    cr_assert_eq(env->state_damaged, 1);
    cr_assert_eq(env->held, 0);
    cr_assert_eq(env->attempts, 0);
    for (size_t k = 0; k < env->nrcpt; k++) {
        cr_assert_eq(env->rcpt[k].status, SPOOL_RCPT_PENDING);
        cr_assert_null(env->rcpt[k].last_reply);
    }
    close(fd);
    spool_env_free(env);
    env = NULL;

    cr_assert_eq(spool_remove(sp, id), SPOOL_OK);
    cr_assert_eq(t_count(dir, "queue"), 0);
    cr_assert_eq(t_count(dir, "state"), 0);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, &fd, NULL), SPOOL_ENOENT);
    cr_assert_eq(spool_remove(sp, id), SPOOL_ENOENT);
    cr_assert_eq(spool_remove(sp, "../state/x"), SPOOL_EFORMAT);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_reader, rejects_cut_or_foreign_files)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], path[4096];
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env *env;
    int               fd;

    t_commit(sp, "0123456789", 10, id);
    T_PATH(path, "%s/queue/%s", dir, id);
    cr_assert_eq(truncate(path, 100), 0);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, &fd, NULL), SPOOL_EFORMAT);
    t_commit(sp, "0123456789", 10, id);
    T_PATH(path, "%s/queue/%s", dir, id);
    fd = open(path, O_WRONLY | O_APPEND);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "x", 1), 1);
    close(fd);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, &fd, NULL), SPOOL_EFORMAT);
    /* A file whose envelope names another id. */
    t_commit(sp, "0123456789", 10, id);
    t_touch(dir, "queue", "0000000000000000", "MTAD-SPOOL 1\n");
    {
        char src[4096];

        T_PATH(src, "%s/queue/%s", dir, id);
        T_PATH(path, "%s/queue/0000000000000000", dir);
        cr_assert_eq(rename(src, path), 0);
    }
    cr_assert_eq(spool_msg_open(sp, "0000000000000000", 0, &env, &fd, NULL),
        SPOOL_EFORMAT);
    cr_assert_eq(spool_msg_open(sp, "../tmp/0000000000", 0, &env, &fd, NULL),
        SPOOL_EFORMAT);
    cr_assert_null(env);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_reader, list_is_sorted_and_ignores_strangers)
{
    char          *dir = t_mkdtemp(), ids[5][SPOOL_ID_SIZE];
    struct spool  *sp = t_spool(dir, 0, 0);
    char         (*list)[SPOOL_ID_SIZE];
    size_t         n, i;

    cr_assert_eq(spool_list(sp, &list, &n), SPOOL_OK);
    cr_assert_eq(n, 0);
    free(list);
    for (i = 0; i < 5; i++)
        t_commit(sp, "x", 1, ids[i]);
    t_touch(dir, "queue", "README", "x");
    t_touch(dir, "queue", "0123456789abcdef", "x");
    cr_assert_eq(spool_list(sp, &list, &n), SPOOL_OK);
    cr_assert_eq(n, 5);
    for (i = 0; i < 5; i++)
        cr_assert_str_eq(list[i], ids[i]);
    free(list);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_reader, lock_excludes_other_processes_until_closed)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE];
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env *env;
    int               fd, status, round;
    pid_t             pid;

    t_commit(sp, "x", 1, id);
    cr_assert_eq(spool_msg_open(sp, id, 1, &env, &fd, NULL), SPOOL_OK);
    for (round = 0; round < 2; round++) {
        if (round == 1) {
            close(fd);                  /* the parent lets go */
            spool_env_free(env);
        }
        pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            struct spool     *sp2;
            struct spool_env *e2;
            int               fd2, rc, want = round == 0 ? SPOOL_ELOCKED :
                SPOOL_OK;

            if (spool_open(&sp2, dir, 0, 1) != SPOOL_OK)
                _exit(3);
            rc = spool_msg_open(sp2, id, 1, &e2, &fd2, NULL);
            if (rc != want)
                _exit(1);
            /* Reading without the lock is always possible. */
            if (spool_msg_open(sp2, id, 0, &e2, &fd2, NULL) != SPOOL_OK)
                _exit(2);
            _exit(0);
        }
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "round %d: child status %d", round, status);
    }
    spool_close(sp);
    t_rm_rf(dir);
}


/* ---- ENOSPC ------------------------------------------------------------------ */

/* t_tiny_tmpfs - a new directory with a tmpfs of these options mounted
 * on it, in a private mount namespace: the mount dies with this test
 * process.  Skips the test where root or namespaces are missing. */
static char *
t_tiny_tmpfs(const char *opts)
{
    char *dir;

    if (geteuid() != 0)
        cr_skip_test("needs root to mount a tmpfs");
    if (unshare(CLONE_NEWNS) == -1 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == -1)
        cr_skip_test("no mount namespace: %s", strerror(errno));
    dir = t_mkdtemp();
    if (mount("tmpfs", dir, "tmpfs", 0, opts) == -1) {
        t_rm_rf(dir);
        cr_skip_test("mount tmpfs: %s", strerror(errno));
    }
    return dir;
}


Test(spool_write, enospc_on_a_full_tmpfs_maps_and_recovers)
{
    char             *dir, want[64], big[1 << 16];
    struct spool     *sp;
    struct spool_env  e;
    struct spool_msg *m;
    int               rc = SPOOL_OK, i;

    dir = t_tiny_tmpfs("size=64k,mode=0700");
    sp = t_spool(dir, 0, 0);
    memset(big, 'y', sizeof(big));
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    for (i = 0; i < 64 && rc == SPOOL_OK; i++)
        rc = spool_write(m, big, sizeof(big));
    if (rc == SPOOL_OK)
        rc = spool_finish(m);
    cr_assert_eq(rc, SPOOL_ENOSPC, "rc %d: %s", rc, spool_errstr(sp));
    cr_assert_eq(errno, ENOSPC);
    snprintf(want, sizeof(want), "write tmp/%s: ", spool_msg_id(m));
    cr_assert_not_null(strstr(spool_errstr(sp), want), "%s",
        spool_errstr(sp));
    cr_assert_not_null(strstr(spool_errstr(sp), strerror(ENOSPC)));
    /* The failure sticks: the message cannot be finished or committed. */
    cr_assert_eq(spool_finish(m), SPOOL_ENOSPC);
    cr_assert_eq(spool_commit(m), SPOOL_ENOSPC);
    spool_abort(m);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    /* Space is back: the next message goes through. */
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, big, 1024), SPOOL_OK);
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(t_count(dir, "queue"), 1);
    spool_close(sp);
    t_rm_rf(dir);
}


/* t_read - a file of the spool into a malloc'd string. */
static char *
t_read(const char *d, const char *sub, const char *name)
{
    char  path[512], *b = calloc(1, 65536);
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s/%s", d, sub, name);
    cr_assert_not_null(f = fopen(path, "r"), "%s", path);
    (void)!fread(b, 1, 65535, f);
    fclose(f);
    return b;
}


Test(spool_state, notified_needs_version_2_and_only_then)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], *b, *v1;
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env *env, *again;

    t_commit(sp, "hi", 2, id);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, NULL, NULL), SPOOL_OK);
    env->rcpt[0].status = SPOOL_RCPT_BOUNCED;
    env->rcpt[0].last_reply = xstrdup("550 5.1.1 no");
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 1\n", 13) == 0, "none notified: v1");
    free(b);

    env->rcpt[0].notified = 1;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 2\n", 13) == 0, "%s", b);
    cr_assert_not_null(strstr(b, "\nrcpt NOTIFIED "), "%s", b);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->rcpt[0].status, SPOOL_RCPT_BOUNCED);
    cr_assert_eq(again->rcpt[0].notified, 1);
    cr_assert_eq(again->rcpt[1].notified, 0);
    cr_assert_str_eq(again->rcpt[0].last_reply, "550 5.1.1 no");
    spool_env_free(again);

    /* NOTIFIED under the version-1 magic is damage, not data: the state
     * is ignored (state_damaged), never half-read */
    v1 = strdup(b);
    memcpy(v1, "MTAD-STATE 1", 12);
    t_touch(dir, "state", id, v1);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->state_damaged, 1);
    cr_assert_eq(again->rcpt[0].status, SPOOL_RCPT_PENDING);
    cr_assert_eq(again->rcpt[0].notified, 0);
    spool_env_free(again);
    /* and an unknown version likewise */
    memcpy(v1, "MTAD-STATE 9", 12);
    t_touch(dir, "state", id, v1);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->state_damaged, 1);
    spool_env_free(again);
    free(v1);
    free(b);
    spool_env_free(env);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_state, tls_needs_version_3_and_round_trips)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], *b;
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env *env, *again;

    t_commit(sp, "hi", 2, id);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, NULL, NULL), SPOOL_OK);
    env->rcpt[0].status = SPOOL_RCPT_PENDING;
    env->rcpt[0].last_reply = xstrdup("451 4.7.5 no");
    env->rcpt[0].tls = xstrdup("tls=TLSv1.3 cipher=TLS_AES_128_GCM_SHA256 "
        "verify=none tls_failure=certificate-host-mismatch");
    env->rcpt[1].notified = 1;
    env->rcpt[1].status = SPOOL_RCPT_BOUNCED;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 3\n", 13) == 0, "%s", b);
    cr_assert_not_null(strstr(b, " tls+3DTLSv1.3+20cipher+3D"), "%s", b);
    /* version 3 holds NOTIFIED too; a recipient without TLS gets "+" */
    cr_assert_not_null(strstr(b, "\nrcpt NOTIFIED + + +\n"), "%s", b);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->state_damaged, 0);
    cr_assert_str_eq(again->rcpt[0].tls, env->rcpt[0].tls);
    cr_assert_null(again->rcpt[1].tls);
    cr_assert_eq(again->rcpt[1].notified, 1);
    spool_env_free(again);
    free(b);
    spool_env_free(env);
    spool_close(sp);
    t_rm_rf(dir);
}

Test(spool_state, delayed_needs_version_4_and_only_then)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], *b, *v3;
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env *env, *again;

    t_commit(sp, "hi", 2, id);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, NULL, NULL), SPOOL_OK);
    env->rcpt[0].last_reply = xstrdup("451 4.3.0 later");
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 1\n", 13) == 0, "none warned: v1");
    free(b);

    env->rcpt[0].delay_warned = 1;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 4\n", 13) == 0, "%s", b);
    /* a superset of 3: every rcpt line has the TLS field */
    cr_assert_not_null(strstr(b, "\nrcpt DELAYED + 451+204.3.0+20later +\n"),
        "%s", b);
    cr_assert_not_null(strstr(b, "\nrcpt PENDING + + +\n"), "%s", b);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->state_damaged, 0);
    cr_assert_eq(again->rcpt[0].status, SPOOL_RCPT_PENDING);
    cr_assert_eq(again->rcpt[0].delay_warned, 1);
    cr_assert_eq(again->rcpt[1].delay_warned, 0);
    spool_env_free(again);

    /* DELAYED under the version-3 magic is damage, not data */
    v3 = strdup(b);
    memcpy(v3, "MTAD-STATE 3", 12);
    t_touch(dir, "state", id, v3);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->state_damaged, 1);
    cr_assert_eq(again->rcpt[0].delay_warned, 0);
    spool_env_free(again);
    free(v3);
    free(b);

    /* once final, the mark is not written: the file is for older readers */
    env->rcpt[0].status = SPOOL_RCPT_SENT;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 1\n", 13) == 0, "%s", b);
    free(b);
    spool_env_free(env);
    spool_close(sp);
    t_rm_rf(dir);
}

Test(spool_state, bounce_class_needs_version_5_and_older_ones_read)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], *b;
    struct spool     *sp = t_spool(dir, 1, 0);
    struct spool_env *env, *again;

    t_commit(sp, "hi", 2, id);
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, NULL, NULL), SPOOL_OK);
    env->rcpt[0].last_reply = xstrdup("421 4.7.28 slow down");
    env->rcpt[0].cls = xstrdup("rate_limited");
    env->rcpt[1].delay_warned = 1;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 5\n", 13) == 0, "%s", b);
    /* a superset of 4: the TLS field, then the class; DELAYED still read */
    cr_assert_not_null(strstr(b, "\nrcpt PENDING + 421+204.7.28+20slow+20down"
        " + rate_limited\n"), "%s", b);
    cr_assert_not_null(strstr(b, "\nrcpt DELAYED + + + +\n"), "%s", b);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->state_damaged, 0);
    cr_assert_str_eq(again->rcpt[0].cls, "rate_limited");
    cr_assert_null(again->rcpt[1].cls);
    cr_assert_eq(again->rcpt[1].delay_warned, 1);
    spool_env_free(again);
    free(b);

    /* without a class the file is version 4 (an older mtad reads it), and
     * a version-4 file reads without one */
    free(env->rcpt[0].cls);
    env->rcpt[0].cls = NULL;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    b = t_read(dir, "state", id);
    cr_assert(strncmp(b, "MTAD-STATE 4\n", 13) == 0, "no class: v4, %s", b);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->state_damaged, 0);
    cr_assert_null(again->rcpt[0].cls);
    cr_assert_str_eq(again->rcpt[0].last_reply, "421 4.7.28 slow down");
    spool_env_free(again);
    free(b);
    spool_env_free(env);
    spool_close(sp);
    t_rm_rf(dir);
}

Test(spool_state, queue_file_mark_says_whether_a_state_exists)
{
    char             *dir = t_mkdtemp(), id[SPOOL_ID_SIZE], path[512];
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env *env, *again;
    struct stat       st;

    t_commit(sp, "hi", 2, id);
    snprintf(path, sizeof(path), "%s/queue/%s", dir, id);
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_mode & S_IXUSR, 0, "a fresh message is unmarked");
    cr_assert_eq(spool_msg_open(sp, id, 0, &env, NULL, NULL), SPOOL_OK);
    cr_assert_eq(env->has_state, 0);

    env->attempts = 3;
    cr_assert_eq(spool_state_save(sp, env), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_neq(st.st_mode & S_IXUSR, 0, "saving a state marks the file");
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->has_state, 1);
    cr_assert_eq(again->attempts, 3);
    spool_env_free(again);

    /* a state from before the mark existed: spool_prepare() marks it */
    cr_assert_eq(chmod(path, 0600), 0);
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->attempts, 0, "unmarked: the state is not read");
    spool_env_free(again);
    cr_assert_eq(spool_prepare(dir, (uid_t)-1, (gid_t)-1), SPOOL_OK, "%s",
        spool_errstr(NULL));
    cr_assert_eq(spool_msg_open(sp, id, 0, &again, NULL, NULL), SPOOL_OK);
    cr_assert_eq(again->attempts, 3, "marked at start, read again");
    spool_env_free(again);

    /* removal through the env skips the state only when it has none */
    env->has_state = 1;
    cr_assert_eq(spool_remove_env(sp, env), SPOOL_OK);
    cr_assert_eq(t_count(dir, "queue"), 0);
    cr_assert_eq(t_count(dir, "state"), 0);
    /* no state for a message that is gone */
    cr_assert_eq(spool_state_save(sp, env), SPOOL_ENOENT);
    cr_assert_eq(t_count(dir, "state"), 0);
    spool_env_free(env);
    spool_close(sp);
    t_rm_rf(dir);
}


/* ---- room for a header written at the end (DKIM) ------------------------ */

/* t_head_msg - a message with body bytes written in pre[npre], then n
 * bytes of room reserved, then post[npost], then the room filled with
 * 'H'...; returns the committed body (malloc'd) and its id. */
static char *
t_head_msg(struct spool *sp, size_t npre, size_t n, size_t npost,
    uint64_t *size)
{
    struct spool_env  e, *got;
    struct spool_msg *m;
    char             *pre = xmalloc(npre + 1), *post = xmalloc(npost + 1);
    char             *head = xmalloc(n), id[SPOOL_ID_SIZE], *b;
    off_t             boff;
    int               fd;

    memset(pre, 'p', npre);
    memset(post, 'q', npost);
    memset(head, 'H', n);
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_write(m, pre, npre), SPOOL_OK);
    cr_assert_eq(spool_head_reserve(m, n), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_write(m, post, npost), SPOOL_OK);
    cr_assert_eq(spool_msg_size(m), npre + n + npost);
    cr_assert_eq(spool_head_fill(m, head, n), SPOOL_OK, "%s",
        spool_errstr(sp));
    memcpy(id, spool_msg_id(m), SPOOL_ID_SIZE);
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_msg_open(sp, id, 0, &got, &fd, &boff), SPOOL_OK,
        "%s", spool_errstr(sp));
    *size = got->body_size;
    b = t_body(fd, boff, got->body_size);
    close(fd);
    spool_env_free(got);
    free(pre);
    free(post);
    free(head);
    return b;
}


static void
t_head_check(const char *b, uint64_t size, size_t npre, size_t n,
    size_t npost)
{
    size_t i;

    cr_assert_eq(size, npre + n + npost);
    for (i = 0; i < n; i++)
        cr_assert_eq(b[i], 'H', "room byte %zu", i);
    for (i = 0; i < npre; i++)
        cr_assert_eq(b[n + i], 'p', "pre byte %zu", i);
    for (i = 0; i < npost; i++)
        cr_assert_eq(b[n + npre + i], 'q', "post byte %zu", i);
}


Test(spool_write, head_room_filled_in_the_buffer)
{
    char         *dir = t_mkdtemp();
    struct spool *sp = t_spool(dir, 0, 0);
    uint64_t      size;
    char         *b = t_head_msg(sp, 300, 517, 1000, &size);

    t_head_check(b, size, 300, 517, 1000);
    free(b);
    spool_close(sp);
}


Test(spool_write, head_room_filled_on_disk_after_the_body_left_the_buffer)
{
    char         *dir = t_mkdtemp();
    struct spool *sp = t_spool(dir, 1, 0);
    uint64_t      size;
    char         *b = t_head_msg(sp, 100, 700, 3 * 1024 * 1024 + 17, &size);

    t_head_check(b, size, 100, 700, 3 * 1024 * 1024 + 17);
    free(b);
    spool_close(sp);
}


/* A nearly full buffer: the envelope goes to disk first, and when the
 * body part alone leaves no room the placeholder is written straight to
 * the file in front of it. */
Test(spool_write, head_room_when_the_buffer_is_nearly_full)
{
    static const size_t rooms[] = { 50, 990, 4000, 200000 };
    char         *dir = t_mkdtemp();
    struct spool *sp = t_spool(dir, 0, 0);
    uint64_t      size;
    size_t        i, pre = 256 * 1024 - 1000;
    char         *b;

    for (i = 0; i < ARRAY_LEN(rooms); i++) {
        b = t_head_msg(sp, pre, rooms[i], 5000, &size);
        t_head_check(b, size, pre, rooms[i], 5000);
        free(b);
    }
    spool_close(sp);
}


Test(spool_write, head_room_too_late_and_unfilled)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_env  e;
    struct spool_msg *m;
    char             *big = xcalloc(1, 300 * 1024);

    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, big, 300 * 1024), SPOOL_OK);
    cr_assert_eq(spool_head_reserve(m, 100), SPOOL_ELATE);
    cr_assert_eq(spool_msg_size(m), 300 * 1024, "ELATE changes nothing");
    cr_assert_eq(spool_commit(m), SPOOL_OK, "the message still commits");

    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    cr_assert_eq(spool_write(m, "x\r\n", 3), SPOOL_OK);
    cr_assert_eq(spool_head_reserve(m, 10), SPOOL_OK);
    cr_assert_neq(spool_head_reserve(m, 10), SPOOL_OK, "only once");
    cr_assert_neq(spool_head_fill(m, "short", 5), SPOOL_OK);
    cr_assert_neq(spool_finish(m), SPOOL_OK, "a placeholder never commits");
    spool_abort(m);
    cr_assert_eq(t_count(dir, "queue"), 1);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    free(big);
    spool_close(sp);
}


/* ---- recycling delivered files (spool_remove_fd) ----------------------- */

/* t_shm_spool - a spool on tmpfs (/dev/shm), with a writer number: where
 * delivered files are recycled. */
static struct spool *
t_shm_spool(char **dirp, int fsync)
{
    struct statfs fs;
    struct spool *sp;

    if (statfs("/dev/shm", &fs) != 0 ||
        (unsigned long)fs.f_type != 0x01021994UL)
        cr_skip_test("/dev/shm is not a tmpfs here");
    *dirp = t_mkdtemp_in("/dev/shm");
    sp = t_spool(*dirp, fsync, 0);
    spool_set_writer(sp, 3);
    return sp;
}


/* t_kept - a message with body n bytes of c, kept and committed: its
 * envelope, fd and id.  The body is read back through a reader's open
 * (spool_msg_open checks the file's size against the envelope). */
struct t_kept {
    struct spool_env *env;
    int               fd;
    off_t             off;
    char              id[SPOOL_ID_SIZE];
    ino_t             ino;
};

static struct t_kept
t_kept_msg(struct spool *sp, size_t n, char c)
{
    struct t_kept     k = { .fd = -1 };
    struct spool_env  e;
    struct spool_msg *m;
    struct stat       st;
    char             *body = xmalloc(n), *back;
    struct spool_env *got = NULL;
    off_t             off;
    int               rfd;

    memset(body, c, n);
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_keep(m, &k.env, &k.fd, &k.off), SPOOL_OK, "%s",
        spool_errstr(sp));
    cr_assert_eq(spool_write(m, body, n), SPOOL_OK, "%s", spool_errstr(sp));
    k.env->body_size = spool_msg_size(m);
    memcpy(k.id, spool_msg_id(m), SPOOL_ID_SIZE);
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(fstat(k.fd, &st), 0);
    k.ino = st.st_ino;
    cr_assert_eq(k.env->file_size, (uint64_t)st.st_size);
    cr_assert_eq(spool_msg_open(sp, k.id, 0, &got, &rfd, &off), SPOOL_OK,
        "%s", spool_errstr(sp));
    cr_assert_eq(got->body_size, n);
    back = t_body(rfd, off, n);
    cr_assert(memcmp(back, body, n) == 0, "body of %zu bytes differs", n);
    free(back);
    close(rfd);
    spool_env_free(got);
    free(body);
    return k;
}


static void
t_kept_remove(struct spool *sp, struct t_kept *k)
{
    cr_assert_eq(spool_remove_fd(sp, k->env, k->fd), SPOOL_OK, "%s",
        spool_errstr(sp));
    spool_env_free(k->env);
    k->env = NULL;
    k->fd = -1;
}


/* A delivered file moves to tmp/ and carries the next message, longer or
 * shorter, byte for byte; the lock stays on it all along. */
Test(spool_pool, delivered_file_carries_the_next_messages)
{
    size_t        sizes[] = { 300 * 1024, 100, 1024 * 1024 + 7, 5 };
    char         *dir, path[4096];
    struct spool *sp = t_shm_spool(&dir, 0);
    struct t_kept k;
    ino_t         ino = 0;
    size_t        i;
    int           fd2;

    for (i = 0; i < ARRAY_LEN(sizes); i++) {
        k = t_kept_msg(sp, sizes[i], (char)('a' + i));
        if (i > 0)
            cr_assert_eq(k.ino, ino, "message %zu got a new file", i);
        ino = k.ino;
        t_kept_remove(sp, &k);
        cr_assert_eq(t_count(dir, "queue"), 0);
        cr_assert_eq(t_count(dir, "tmp"), 1, "pooled as .<its id>");
        T_PATH(path, "%s/tmp/.%s", dir, k.id);
        fd2 = open(path, O_RDONLY | O_CLOEXEC);
        cr_assert_geq(fd2, 0, "%s: %s", path, strerror(errno));
        cr_assert_eq(flock(fd2, LOCK_EX | LOCK_NB), -1, "pooled unlocked");
        close(fd2);
    }
    spool_close(sp);
    cr_assert_eq(t_count(dir, "tmp"), 0, "spool_close() unlinks the pool");
    t_rm_rf(dir);
}


/* Unlinked as before: with fsync, after a state was saved, when the fd
 * is a reader's, and when the file is over SPOOL_POOL_FILE (4 MiB). */
Test(spool_pool, unlinked_where_it_may_not_be_reused)
{
    char             *dir, *dir2;
    struct spool     *sp = t_shm_spool(&dir, 0), *dsp;
    struct spool_env *got;
    struct t_kept     k;
    struct stat       st;
    off_t             off;
    int               fd;

    k = t_kept_msg(sp, 4 * 1024 * 1024, 'x');
    t_kept_remove(sp, &k);
    cr_assert_eq(t_count(dir, "tmp") + t_count(dir, "queue"), 0, "big");

    k = t_kept_msg(sp, 10, 'y');
    k.env->has_state = 1;
    fd = k.fd;
    t_kept_remove(sp, &k);
    cr_assert_eq(t_count(dir, "tmp") + t_count(dir, "queue"), 0, "state");
    cr_assert_eq(fstat(fd, &st), -1, "fd left open");

    k = t_kept_msg(sp, 10, 'z');
    close(k.fd);
    spool_env_free(k.env);
    cr_assert_eq(spool_msg_open(sp, k.id, 1, &got, &fd, &off), SPOOL_OK);
    cr_assert_eq(spool_remove_fd(sp, got, fd), SPOOL_OK);
    spool_env_free(got);
    cr_assert_eq(t_count(dir, "tmp") + t_count(dir, "queue"), 0, "reader");
    spool_close(sp);

    dsp = t_shm_spool(&dir2, 1);
    k = t_kept_msg(dsp, 10, 'f');
    t_kept_remove(dsp, &k);
    cr_assert_eq(t_count(dir2, "tmp") + t_count(dir2, "queue"), 0, "fsync");
    spool_close(dsp);
    t_rm_rf(dir2);
    t_rm_rf(dir);
}


/* t_pool_fill - n messages of size bytes, all kept (so none reuses
 * another's file), then all delivered: what the pool keeps of them. */
static void
t_pool_fill(struct spool *sp, size_t n, size_t size)
{
    struct t_kept *k = xcalloc(n, sizeof(*k));
    size_t         i;

    for (i = 0; i < n; i++)
        k[i] = t_kept_msg(sp, size, 'p');
    for (i = 0; i < n; i++)
        t_kept_remove(sp, &k[i]);
    free(k);
}


/* At most SPOOL_POOL_MAX (128) files; past SPOOL_POOL_IDLE_MS (2 s)
 * unused, spool_pool_trim() unlinks them. */
Test(spool_pool, bounded_in_files_and_time)
{
    char         *dir;
    struct spool *sp = t_shm_spool(&dir, 0);

    t_pool_fill(sp, 129, 100);
    cr_assert_eq(t_count(dir, "queue"), 0);
    cr_assert_eq(t_count(dir, "tmp"), 128);
    spool_pool_trim(sp);
    cr_assert_eq(t_count(dir, "tmp"), 128, "trimmed while fresh");
    usleep(2100 * 1000);
    spool_pool_trim(sp);
    cr_assert_eq(t_count(dir, "tmp"), 0, "not trimmed after 2 s");
    spool_close(sp);
    t_rm_rf(dir);
}


/* At most SPOOL_POOL_BYTES (32 MiB) in all: eight files of 3.9 MiB fit,
 * the ninth is unlinked. */
Test(spool_pool, bounded_in_bytes)
{
    char         *dir;
    struct spool *sp = t_shm_spool(&dir, 0);

    t_pool_fill(sp, 9, 3900 * 1024);
    cr_assert_eq(t_count(dir, "queue"), 0);
    cr_assert_eq(t_count(dir, "tmp"), 8);
    spool_close(sp);
    cr_assert_eq(t_count(dir, "tmp"), 0);
    t_rm_rf(dir);
}


/* Short of room, the pool goes first: on a 256 KiB tmpfs a pooled file of
 * 200 KiB leaves less than the reserve (a quarter of it) free, and the
 * next message is taken all the same, in a new file. */
Test(spool_pool, drained_when_room_runs_short)
{
    char             *dir, path[4096];
    struct spool     *sp;
    struct spool_env  e;
    struct spool_msg *m;
    struct t_kept     k;

    dir = t_tiny_tmpfs("size=256k,mode=0700");
    sp = t_spool(dir, 0, 0);
    spool_set_writer(sp, 3);
    k = t_kept_msg(sp, 200 * 1024, 'r');
    t_kept_remove(sp, &k);
    spool_set_reserve(sp, UINT64_MAX / 2);  /* a quarter: 64 KiB */
    T_PATH(path, "%s/tmp/.%s", dir, k.id);
    cr_assert(access(path, F_OK) == 0, "not pooled");
    t_env(&e);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert(access(path, F_OK) == -1, "the pool was kept");
    cr_assert_eq(spool_write(m, "x\r\n", 3), SPOOL_OK);
    cr_assert_eq(spool_commit(m), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(t_count(dir, "queue"), 1);
    spool_close(sp);
    t_rm_rf(dir);
}


/* A worker killed by a signal leaves what it was receiving in tmp/<id>
 * and the files it kept in tmp/.<id>; its replacement, with the same
 * writer number, sweeps exactly those: never another writer's id, nor a
 * name that is no id. */
Test(spool_tmp, sweep_takes_only_this_writers_leftovers)
{
    char             *dir = t_mkdtemp();
    struct spool     *dead = t_spool(dir, 0, 0), *next, *plain;
    struct spool_env  e;
    struct spool_msg *m;
    char              id[SPOOL_ID_SIZE];

    spool_set_writer(dead, 3);
    t_env(&e);
    cr_assert_eq(spool_create(dead, &e, &m), SPOOL_OK, "%s",
        spool_errstr(dead));
    memcpy(id, spool_msg_id(m), SPOOL_ID_SIZE);
    /* writer 3 is 0x06x/0x07x in the last three digits, 4 is 0x08x */
    t_touch(dir, "tmp", "0000000000000061", "half received");
    t_touch(dir, "tmp", ".000000000000007F", "kept");
    t_touch(dir, "tmp", "0000000000000081", "writer 4's");
    t_touch(dir, "tmp", ".0000000000000090", "writer 4's, kept");
    t_touch(dir, "tmp", "notanid", "not ours");
    t_touch(dir, "tmp", ".0000000000000061.x", "not ours");
    cr_assert_eq(t_count(dir, "tmp"), 7);

    /* spool_open only: a worker's spool, where spool_prepare (the
     * master's start) would purge all of tmp/ */
    cr_assert_eq(spool_open(&plain, dir, 0, 0), SPOOL_OK);
    /* no writer number: hands off */
    cr_assert_eq(spool_tmp_sweep(plain), 0);
    cr_assert_eq(t_count(dir, "tmp"), 7);
    spool_close(plain);

    cr_assert_eq(spool_open(&next, dir, 0, 0), SPOOL_OK);
    spool_set_writer(next, 3);
    cr_assert_eq(spool_tmp_sweep(next), 3, "%s", spool_errstr(next));
    cr_assert_eq(t_count(dir, "tmp"), 4);
    cr_assert(!t_exists(dir, "tmp", id),
        "the message being received by the dead writer stayed");
    cr_assert(t_exists(dir, "tmp", "0000000000000081"));
    cr_assert(t_exists(dir, "tmp", ".0000000000000090"));
    spool_close(next);
    spool_abort(m);                     /* its file is gone already */
    spool_close(dead);
    t_rm_rf(dir);
}


/* A worker opens the spool's directories while still root, in a directory
 * the workers' user owns: a link put in place of one is refused. */
Test(spool_tmp, open_refuses_a_link_for_a_subdirectory)
{
    char         *dir = t_mkdtemp(), from[4096], to[4096];
    struct spool *sp = t_spool(dir, 0, 0);

    spool_close(sp);
    T_PATH(from, "%s/tmp", dir);
    T_PATH(to, "%s/elsewhere", dir);
    cr_assert_eq(rename(from, to), 0);
    cr_assert_eq(symlink("elsewhere", from), 0);
    cr_assert_neq(spool_open(&sp, dir, 0, 0), SPOOL_OK);
    cr_assert_not_null(strstr(spool_errstr(NULL), "{tmp,queue,state}"),
        "%s", spool_errstr(NULL));
    cr_assert_eq(unlink(from), 0);
    cr_assert_eq(rename(to, from), 0);
    cr_assert_eq(spool_open(&sp, dir, 0, 0), SPOOL_OK);
    spool_close(sp);
    t_rm_rf(dir);
}


Test(spool_pool, spare_write_buffers_kept_then_freed_when_idle)
{
    char             *dir = t_mkdtemp();
    struct spool     *sp = t_spool(dir, 0, 0);
    struct spool_msg *m[SPOOL_WBUF_SPARES + 2];
    struct spool_env  e;
    char             *first;
    size_t            i;

    spool_set_writer(sp, 3);
    for (i = 0; i < ARRAY_LEN(m); i++) {
        t_env(&e);
        cr_assert_eq(spool_create(sp, &e, &m[i]), SPOOL_OK);
    }
    cr_assert_eq(sp->nspare, 0);
    for (i = 0; i < ARRAY_LEN(m); i++) {
        cr_assert_eq(spool_write(m[i], "x\r\n", 3), SPOOL_OK);
        cr_assert_eq(spool_commit(m[i]), SPOOL_OK, "%s", spool_errstr(sp));
    }
    cr_assert_eq(sp->nspare, SPOOL_WBUF_SPARES, "kept %zu", sp->nspare);
    first = sp->spare[sp->nspare - 1];
    t_env(&e);                          /* the last one given back */
    cr_assert_eq(spool_create(sp, &e, &m[0]), SPOOL_OK);
    cr_assert_eq(sp->nspare, SPOOL_WBUF_SPARES - 1);
    spool_abort(m[0]);
    cr_assert_eq(sp->spare[sp->nspare - 1], first, "not taken from the top");
    spool_pool_trim(sp);                /* a message began since the last */
    cr_assert_eq(sp->nspare, SPOOL_WBUF_SPARES, "freed while busy");
    spool_pool_trim(sp);                /* none since: one is kept */
    cr_assert_eq(sp->nspare, 1, "spares not freed when idle: %zu",
        sp->nspare);
    spool_close(sp);
    t_rm_rf(dir);
}
