/*
 * spool_bench.c - commit throughput of the spool writer.
 *
 * Commits 1 KiB messages (three recipients, a realistic envelope) through
 * spool_create/write/finish/commit and prints messages per second for:
 *   tmpfs (/dev/shm), fsync off, one by one and in batches of 32;
 *   disk (/var/tmp), fsync on, batches of 1 and 32 (group commit: one
 *   syncfs() per batch).
 * Each line also gives the CPU time (user + system) per message, which
 * stays meaningful when other work shares the machine.
 * Usage: spool_bench [N_tmpfs [N_disk]]   (defaults 100000 and 2000).
 * Every run works in its own mkdtemp() directory, removed afterwards (not
 * timed).  Not a test: it asserts nothing about time; it exits 1 if any
 * spool call fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>

#include "common/util.h"
#include "spool/spool.h"

#define SPOOL_BENCH_BODY   1024
#define SPOOL_BENCH_BATCH  32

static struct spool_rcpt spool_bench_rcpts[3] = {
    { .addr = "alice@example.org", .notify = 0 },
    { .addr = "bob@example.net", .notify = SMTP_NOTIFY_FAILURE },
    { .addr = "carol@example.com", .orcpt = "rfc822;carol@example.com" },
};


static double
spool_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


/* spool_bench_cpu - user + system CPU seconds of this process. */
static double
spool_bench_cpu(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
        (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}


static void __attribute__((noreturn))
spool_bench_die(struct spool *sp, const char *what, int rc)
{
    fprintf(stderr, "spool_bench: %s: rc %d: %s\n", what, rc,
        spool_errstr(sp));
    exit(1);
}


/* spool_bench_clean - remove the queue and the tree (not timed). */
static void
spool_bench_clean(struct spool *sp, const char *dir)
{
    char   (*ids)[SPOOL_ID_SIZE], path[4200];
    size_t   n, i;
    static const char *const subs[] = { "tmp", "queue", "state" };

    if (spool_list(sp, &ids, &n) == SPOOL_OK) {
        for (i = 0; i < n; i++)
            spool_remove(sp, ids[i]);
        free(ids);
    }
    for (i = 0; i < ARRAY_LEN(subs); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, subs[i]);
        rmdir(path);
    }
    rmdir(dir);
}


/* spool_bench_run - commit n messages in batches of batch; prints one
 * line with msgs/s and CPU microseconds per message. */
static void
spool_bench_run(const char *base, int fsync, size_t n, size_t batch)
{
    struct spool     *sp;
    struct spool_msg *ms[SPOOL_BENCH_BATCH];
    struct spool_env  e;
    int               rcs[SPOOL_BENCH_BATCH], rc;
    char              dir[4096], body[SPOOL_BENCH_BODY];
    size_t            done = 0, k, i;
    double            t0, t1, c0, c1;

    snprintf(dir, sizeof(dir), "%s/mtad-spool-bench-XXXXXX", base);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "spool_bench: mkdtemp %s: %s\n", dir,
            strerror(errno));
        exit(1);
    }
    if ((rc = spool_prepare(dir, (uid_t)-1, (gid_t)-1)) != SPOOL_OK)
        spool_bench_die(NULL, "prepare", rc);
    if ((rc = spool_open(&sp, dir, fsync, 0)) != SPOOL_OK)
        spool_bench_die(NULL, "open", rc);
    for (i = 0; i < sizeof(body); i++)
        body[i] = i % 78 == 77 ? '\n' : (char)('a' + i % 26);
    memset(&e, 0, sizeof(e));
    e.sender = "sender@example.com";
    e.client_ip = "127.0.0.1";
    e.client_port = 40000;
    e.helo = "client.example";
    e.rcpt = spool_bench_rcpts;
    e.nrcpt = ARRAY_LEN(spool_bench_rcpts);

    t0 = spool_bench_now();
    c0 = spool_bench_cpu();
    while (done < n) {
        k = n - done < batch ? n - done : batch;
        for (i = 0; i < k; i++) {
            e.arrival_ms = 0;
            if ((rc = spool_create(sp, &e, &ms[i])) != SPOOL_OK ||
                (rc = spool_write(ms[i], body, sizeof(body))) != SPOOL_OK ||
                (rc = spool_finish(ms[i])) != SPOOL_OK)
                spool_bench_die(sp, "write", rc);
        }
        if (k == 1)
            rc = spool_commit(ms[0]);
        else
            rc = spool_commit_batch(sp, ms, k, rcs);
        if (rc != SPOOL_OK)
            spool_bench_die(sp, "commit", rc);
        done += k;
    }
    t1 = spool_bench_now();
    c1 = spool_bench_cpu();
    spool_bench_clean(sp, dir);
    spool_close(sp);
    printf("  %-9s fsync=%-3s batch=%-3zu %7zu msgs %9.0f msgs/s "
        "%7.1f us cpu/msg\n", base, fsync ? "on" : "off", batch, n,
        (double)n / (t1 - t0), (c1 - c0) * 1e6 / (double)n);
    fflush(stdout);
}


int
main(int argc, char **argv)
{
    size_t n_mem = 100000, n_disk = 2000;

    if (argc > 1)
        n_mem = strtoul(argv[1], NULL, 10);
    if (argc > 2)
        n_disk = strtoul(argv[2], NULL, 10);
    if (n_mem == 0 || n_disk == 0) {
        fprintf(stderr, "usage: spool_bench [N_tmpfs [N_disk]]\n");
        return 2;
    }
    printf("spool commit, %d-byte bodies, 3 recipients\n", SPOOL_BENCH_BODY);
    spool_bench_run("/dev/shm", 0, n_mem, 1);
    spool_bench_run("/dev/shm", 0, n_mem, SPOOL_BENCH_BATCH);
    spool_bench_run("/var/tmp", 1, n_disk, 1);
    spool_bench_run("/var/tmp", 1, n_disk, SPOOL_BENCH_BATCH);
    return 0;
}
