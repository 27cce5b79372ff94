/*
 * scan_bench.c - throughput of the DATA scanner (smtp_data_feed).
 *
 * Builds a 100 MB in-memory message of 80-byte lines (78 text bytes plus
 * CRLF; every 10th line dot-stuffed) and feeds it in 128 KiB reads, the
 * worker's read size, to an emit() that only counts bytes.  Prints MB/s
 * (MB = 10^6 bytes of input) for the best of a few runs.  Not a test: it
 * asserts nothing about time, it only checks the output length.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "smtp/smtp.h"

#define SCAN_BENCH_SIZE   (100u * 1000 * 1000)
#define SCAN_BENCH_READ   (128u * 1024)
#define SCAN_BENCH_RUNS   5

static int
scan_bench_count(void *arg, const char *p, size_t n)
{
    uint64_t *sum = arg;

    (void)p;
    *sum += n;
    return 0;
}

static double
scan_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Fills buf with lines; returns the length including the final ".\r\n"
 * and sets *content to the expected unstuffed size. */
static size_t
scan_bench_fill(char *buf, size_t cap, uint64_t *content)
{
    size_t   n = 0, line = 0;
    uint64_t c = 0;

    while (n + 80 + 3 <= cap) {
        memset(buf + n, 'a' + (int)(line % 26), 78);
        if (line % 10 == 0) {
            buf[n] = '.';               /* stuffed: ".." becomes "." */
            buf[n + 1] = '.';
            c--;
        }
        buf[n + 78] = '\r';
        buf[n + 79] = '\n';
        n += 80;
        c += 80;
        line++;
    }
    memcpy(buf + n, ".\r\n", 3);
    *content = c;
    return n + 3;
}

int
main(void)
{
    struct smtp_data d;
    char    *buf;
    size_t   n, off, len, used;
    uint64_t want, sum;
    double   t0, dt, best = 0;
    int      run, rc = 0;

    buf = malloc(SCAN_BENCH_SIZE);
    if (buf == NULL) {
        perror("malloc");
        return 1;
    }
    n = scan_bench_fill(buf, SCAN_BENCH_SIZE, &want);
    for (run = 0; run < SCAN_BENCH_RUNS; run++) {
        smtp_data_init(&d, 0);
        sum = 0;
        t0 = scan_bench_now();
        for (off = 0; off < n; off += len) {
            len = n - off < SCAN_BENCH_READ ? n - off : SCAN_BENCH_READ;
            rc = smtp_data_feed(&d, buf + off, len, &used, scan_bench_count,
                &sum);
            if (rc != 0)
                break;
        }
        dt = scan_bench_now() - t0;
        if (rc != 1 || sum != want || d.bad_newline) {
            fprintf(stderr, "scan_bench: wrong result rc=%d sum=%llu "
                "want=%llu\n", rc, (unsigned long long)sum,
                (unsigned long long)want);
            free(buf);
            return 1;
        }
        if (best == 0 || dt < best)
            best = dt;
    }
    printf("scan_bench: %zu bytes, 80-byte lines, %u-byte reads: "
        "%.0f MB/s (best of %d)\n", n, SCAN_BENCH_READ,
        (double)n / best / 1e6, SCAN_BENCH_RUNS);
    free(buf);
    return 0;
}
