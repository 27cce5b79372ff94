/*
 * test_spool_sync.c - the group commit in steps (spool_commit_rename,
 * spool_sync_start/reap on the helper thread, spool_commit_settle): what
 * is renamed before a sync is committed by it; a failed sync takes the
 * messages back out of queue/; one sync at a time; the thread is joined
 * at spool_close() even while a sync runs.
 */
#include <errno.h>
#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "common/util.h"
#include "spool/spool.h"
#include "tests/unit/t_fs.h"

static char t_dir[] = "/tmp/mtad-spool-sync-XXXXXX";
static int  t_made;


static void
t_cleanup(void)
{
    if (t_made)
        t_rm_tree(t_dir);
    t_made = 0;
}

TestSuite(spool_sync, .fini = t_cleanup);


static struct spool *
t_spool(int fsync)
{
    struct spool *sp;

    cr_assert_not_null(mkdtemp(t_dir), "mkdtemp: %s", strerror(errno));
    t_made = 1;
    cr_assert_eq(spool_prepare(t_dir, (uid_t)-1, (gid_t)-1), SPOOL_OK,
        "prepare: %s", spool_errstr(NULL));
    cr_assert_eq(spool_open(&sp, t_dir, fsync, 3), SPOOL_OK, "open: %s",
        spool_errstr(NULL));
    return sp;
}


static size_t
t_count(const char *sub)
{
    char           path[512];
    DIR           *d;
    struct dirent *de;
    size_t         n = 0;

    snprintf(path, sizeof(path), "%s/%s", t_dir, sub);
    cr_assert_not_null(d = opendir(path), "opendir %s", path);
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}


static struct spool_rcpt t_rcpt = { .addr = "a@example.org" };

static void
t_msgs(struct spool *sp, struct spool_msg **ms, size_t n)
{
    struct spool_env e;
    char             body[64];

    memset(&e, 0, sizeof(e));
    e.sender = "s@example.com";
    e.client_ip = "127.0.0.1";
    e.helo = "client.example";
    e.rcpt = &t_rcpt;
    e.nrcpt = 1;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(spool_create(sp, &e, &ms[i]), SPOOL_OK);
        snprintf(body, sizeof(body), "message %zu\r\n", i);
        cr_assert_eq(spool_write(ms[i], body, strlen(body)), SPOOL_OK);
    }
}


/* t_sync - start a sync and wait (bounded) for its eventfd. */
static int
t_sync(struct spool *sp)
{
    struct pollfd p = { .fd = spool_sync_fd(sp), .events = POLLIN };
    int           rc;

    cr_assert_eq(spool_sync_start(sp), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert(spool_sync_busy(sp));
    cr_assert_eq(poll(&p, 1, 30000), 1, "the sync never finished");
    rc = spool_sync_reap(sp);
    cr_assert_neq(rc, MTA_AGAIN, "readable, yet not done");
    cr_assert(!spool_sync_busy(sp));
    return rc;
}


Test(spool_sync, renamed_messages_are_committed_by_the_next_sync)
{
    struct spool     *sp = t_spool(1);
    struct spool_msg *ms[5];
    struct spool_env *got;
    char              ids[5][SPOOL_ID_SIZE];
    int               rcs[5], fd;
    off_t             boff;

    cr_assert_eq(spool_sync_fd(sp), -1, "no eventfd before init");
    cr_assert_eq(spool_sync_init(sp), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_geq(spool_sync_fd(sp), 0);
    t_msgs(sp, ms, 5);
    for (int i = 0; i < 5; i++)
        memcpy(ids[i], spool_msg_id(ms[i]), SPOOL_ID_SIZE);
    cr_assert_eq(spool_commit_rename(sp, ms, 5, rcs), SPOOL_OK, "%s",
        spool_errstr(sp));
    cr_assert_eq(t_count("queue"), 5, "renamed before the sync");
    cr_assert_eq(t_count("tmp"), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_not_null(ms[i], "not committed before the settle");
    cr_assert_eq(t_sync(sp), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_commit_settle(sp, ms, 5, rcs, SPOOL_OK), SPOOL_OK);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(rcs[i], SPOOL_OK);
        cr_assert_null(ms[i]);
        cr_assert_eq(spool_msg_open(sp, ids[i], 0, &got, &fd, &boff),
            SPOOL_OK, "%s", spool_errstr(sp));
        cr_assert_eq(got->body_size, strlen("message 0\r\n"));
        close(fd);
        spool_env_free(got);
    }
    /* the thread serves the next sync as well */
    t_msgs(sp, ms, 2);
    cr_assert_eq(spool_commit_rename(sp, ms, 2, rcs), SPOOL_OK);
    cr_assert_eq(t_sync(sp), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_commit_settle(sp, ms, 2, rcs, SPOOL_OK), SPOOL_OK);
    cr_assert_eq(t_count("queue"), 7);
    spool_close(sp);
}


Test(spool_sync, a_failed_sync_takes_the_messages_back)
{
    struct spool     *sp = t_spool(1);
    struct spool_msg *ms[3];
    int               rcs[3];

    t_msgs(sp, ms, 3);
    cr_assert_eq(spool_commit_rename(sp, ms, 3, rcs), SPOOL_OK);
    cr_assert_eq(t_count("queue"), 3);
    cr_assert_eq(spool_commit_settle(sp, ms, 3, rcs, SPOOL_ESYS),
        SPOOL_ESYS);
    cr_assert_eq(t_count("queue"), 0, "not durable: no queue file stays");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(rcs[i], SPOOL_ESYS);
        cr_assert_not_null(ms[i], "left for spool_abort");
        spool_abort(ms[i]);
    }
    cr_assert_eq(t_count("tmp"), 0);
    spool_close(sp);
}


Test(spool_sync, a_rename_failure_is_reported_per_message)
{
    struct spool     *sp = t_spool(1);
    struct spool_msg *ms[2];
    char              path[512];
    int               rcs[2];
    FILE             *f;

    t_msgs(sp, ms, 2);
    snprintf(path, sizeof(path), "%s/queue/%s", t_dir, spool_msg_id(ms[1]));
    cr_assert_not_null(f = fopen(path, "w"));
    fclose(f);                          /* someone else's queue file */
    cr_assert_eq(spool_commit_rename(sp, ms, 2, rcs), SPOOL_ESYS);
    cr_assert_eq(rcs[0], SPOOL_OK);
    cr_assert_eq(rcs[1], SPOOL_ESYS);
    cr_assert_eq(spool_commit_settle(sp, ms, 2, rcs, SPOOL_OK), SPOOL_ESYS);
    cr_assert_null(ms[0]);
    cr_assert_not_null(ms[1]);
    spool_abort(ms[1]);
    cr_assert_eq(t_count("queue"), 2, "the other file is left alone");
    spool_close(sp);
}


Test(spool_sync, one_sync_at_a_time_and_close_joins_a_running_one)
{
    struct spool *sp = t_spool(1);

    cr_assert_eq(spool_sync_start(sp), SPOOL_ESYS, "no init: refused");
    cr_assert_eq(spool_sync_init(sp), SPOOL_OK);
    cr_assert_eq(spool_sync_reap(sp), SPOOL_OK, "nothing runs: nothing to do");
    cr_assert_eq(spool_sync_start(sp), SPOOL_OK);
    cr_assert_eq(spool_sync_start(sp), SPOOL_ESYS);
    cr_assert_eq(errno, EBUSY);
    spool_sync_wait(sp);
    cr_assert_eq(spool_sync_reap(sp), SPOOL_OK, "%s", spool_errstr(sp));
    cr_assert_eq(spool_sync_start(sp), SPOOL_OK);
    spool_close(sp);                    /* joins the thread mid-sync */
}


/* Large spans after the first 256 KiB go to the file without the write
 * buffer (spool_write_direct): the file must hold every byte in order,
 * whatever the mix of small and large spans, and the DKIM room reserved
 * early is still filled in place. */
Test(spool_sync, large_spans_past_the_first_buffer_keep_their_order)
{
    struct spool     *sp = t_spool(0);
    struct spool_msg *m;
    struct spool_env  e, *got;
    char              id[SPOOL_ID_SIZE], *want, *back;
    size_t            total = 3 * 1024 * 1024 + 12345, off = 0, n, k = 0;
    int               rcs[1], fd;
    off_t             boff;

    memset(&e, 0, sizeof(e));
    e.sender = "s@example.com";
    e.client_ip = "127.0.0.1";
    e.helo = "client.example";
    e.rcpt = &t_rcpt;
    e.nrcpt = 1;
    want = xmalloc(total + 16);
    memcpy(want, "ROOM", 4);            /* the head room's filling */
    for (size_t i = 4; i < total + 4; i++)
        want[i] = (char)('a' + (i * 7 + i / 4096) % 26);
    cr_assert_eq(spool_create(sp, &e, &m), SPOOL_OK);
    memcpy(id, spool_msg_id(m), SPOOL_ID_SIZE);
    cr_assert_eq(spool_head_reserve(m, 4), SPOOL_OK);
    while (off < total) {
        /* spans of 100 B, 40 KiB, 200 KiB, 300 KiB, 1 KiB, ... */
        static const size_t sizes[] = { 100, 40 * 1024, 200 * 1024,
            300 * 1024, 1024, 33 * 1024 };
        n = sizes[k++ % ARRAY_LEN(sizes)];
        if (n > total - off)
            n = total - off;
        cr_assert_eq(spool_write(m, want + 4 + off, n), SPOOL_OK, "%s",
            spool_errstr(sp));
        off += n;
    }
    cr_assert_eq(spool_head_fill(m, "ROOM", 4), SPOOL_OK, "%s",
        spool_errstr(sp));
    cr_assert_eq(spool_commit_batch(sp, &m, 1, rcs), SPOOL_OK, "%s",
        spool_errstr(sp));
    cr_assert_eq(spool_msg_open(sp, id, 0, &got, &fd, &boff), SPOOL_OK,
        "%s", spool_errstr(sp));
    cr_assert_eq(got->body_size, total + 4);
    back = xmalloc(total + 4);
    cr_assert_eq(pread(fd, back, total + 4, boff), (ssize_t)(total + 4));
    cr_assert(memcmp(back, want, total + 4) == 0, "body differs");
    free(back);
    free(want);
    close(fd);
    spool_env_free(got);
    spool_close(sp);
}
