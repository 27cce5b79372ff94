/*
 * maildir.c - "maildir:/path" routes: local delivery into a Maildir
 * (https://cr.yp.to/proto/maildir.html).
 *
 * PURPOSE   Small sites, the embedded default config and the tests: mail
 *           lands as files a user can read, without another MTA.
 * CONTRACT  See maildir.h.  tmp/<unique>, write, fsync (spool.fsync), then
 *           rename into new/.  Unique names are <sec>.M<usec>P<pid>Q<n>.
 *           <host> as qmail and Dovecot write them.  Blocking file I/O on
 *           the loop is bounded: one message, big chunks, local disk.
 * FAILURE   Returns -1 with a reason; the caller defers the recipient and
 *           logs.  The tmp file is unlinked on every failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "common/util.h"
#include "delivery/maildir.h"

#define MAILDIR_CHUNK (128 * 1024)

static unsigned maildir_seq;

/* maildir_mkdirs - mkdir -p path, then its tmp, new and cur. */
static int
maildir_mkdirs(const char *path, char *why, size_t whysz)
{
    char        p[4096];
    size_t      i, n = strlen(path);
    const char *sub[] = { "tmp", "new", "cur" };

    if (n == 0 || n >= sizeof(p) - 8) {
        snprintf(why, whysz, "bad maildir path '%s'", path);
        return -1;
    }
    memcpy(p, path, n + 1);
    for (i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        p[i] = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            snprintf(why, whysz, "create maildir %s: %s", p, strerror(errno));
            return -1;
        }
        p[i] = (i == n) ? '\0' : '/';
    }
    for (i = 0; i < 3; i++) {
        snprintf(p, sizeof(p), "%s/%s", path, sub[i]);
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            snprintf(why, whysz, "create maildir %s: %s", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}


size_t
maildir_unix_lines(const char *in, size_t n, int *cr, char *out)
{
    size_t i = 0, o = 0;

    if (n == 0)
        return 0;
    if (*cr) {
        if (in[0] != '\n')
            out[o++] = '\r';                /* a lone CR stays */
        *cr = 0;
    }
    while (i < n) {
        const char *c = memchr(in + i, '\r', n - i);
        size_t      span = c ? (size_t)(c - (in + i)) : n - i;

        memcpy(out + o, in + i, span);
        o += span;
        i += span;
        if (c == NULL)
            break;
        if (i + 1 == n) {                   /* decide with the next chunk */
            *cr = 1;
            i++;
        } else if (in[i + 1] == '\n') {
            i++;                            /* drop the CR of CRLF */
        } else {
            out[o++] = '\r';
            i++;
        }
    }
    return o;
}


/* maildir_write_all - write n bytes or fail with a reason. */
static int
maildir_write_all(int fd, const char *p, size_t n, const char *file,
    char *why, size_t whysz)
{
    if (util_write_all(fd, p, n) < 0) {
        snprintf(why, whysz, "write %s: %s", file, strerror(errno));
        return -1;
    }
    return 0;
}


/* maildir_copy - the header lines, then the body as LF lines. */
static int
maildir_copy(int out, const char *file, const char *sender, const char *rcpt,
    int fd, off_t off, uint64_t left, char *why, size_t whysz)
{
    char   *in = NULL, *conv = NULL;
    int     cr = 0, rc = -1;
    char    head[1400];
    int     hn;

    hn = snprintf(head, sizeof(head), "Return-Path: <%s>\nDelivered-To: %s\n",
        sender, rcpt);
    if (hn < 0 || (size_t)hn >= sizeof(head)) {
        snprintf(why, whysz, "address too long");
        return -1;
    }
    if (maildir_write_all(out, head, (size_t)hn, file, why, whysz) < 0)
        return -1;
    in = xmalloc(MAILDIR_CHUNK);
    conv = xmalloc(MAILDIR_CHUNK + 1);
    while (left > 0) {
        size_t  want = left > MAILDIR_CHUNK ? MAILDIR_CHUNK : (size_t)left;
        ssize_t n = pread(fd, in, want, off);
        size_t  o;

        if (n <= 0) {
            snprintf(why, whysz, "read queue file: %s",
                n < 0 ? strerror(errno) : "truncated");
            goto fail;
        }
        off += n;
        left -= (uint64_t)n;
        o = maildir_unix_lines(in, (size_t)n, &cr, conv);
        if (maildir_write_all(out, conv, o, file, why, whysz) < 0)
            goto fail;
    }
    if (cr && maildir_write_all(out, "\r", 1, file, why, whysz) < 0)
        goto fail;
    rc = 0;
fail:
    free(in);
    free(conv);
    return rc;
}


int
maildir_deliver(const char *path, const char *sender, const char *rcpt,
    int fd, off_t body_off, uint64_t body_size, int do_fsync,
    const char *hostname, char *why, size_t whysz)
{
    char            host[256], name[512], tmp[4600], dst[4600];
    struct timespec ts;
    size_t          i;
    int             out;

    if (maildir_mkdirs(path, why, whysz) < 0)
        return -1;
    /* '/' and ':' cannot appear in the host part of a maildir name */
    util_strlcpy(host, hostname, sizeof(host));
    for (i = 0; host[i]; i++)
        if (host[i] == '/' || host[i] == ':')
            host[i] = '_';
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof(name), "%lld.M%06ldP%dQ%u.%s", (long long)ts.tv_sec,
        ts.tv_nsec / 1000, (int)getpid(), ++maildir_seq, host);
    snprintf(tmp, sizeof(tmp), "%s/tmp/%s", path, name);
    snprintf(dst, sizeof(dst), "%s/new/%s", path, name);
    out = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (out < 0) {
        snprintf(why, whysz, "create maildir file %s: %s", tmp,
            strerror(errno));
        return -1;
    }
    if (maildir_copy(out, tmp, sender, rcpt, fd, body_off, body_size, why,
        whysz) < 0)
        goto fail;
    if (do_fsync && fsync(out) < 0) {
        snprintf(why, whysz, "fsync %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (close(out) < 0) {
        out = -1;
        snprintf(why, whysz, "close %s: %s", tmp, strerror(errno));
        goto fail;
    }
    out = -1;
    if (rename(tmp, dst) < 0) {
        snprintf(why, whysz, "rename %s to %s: %s", tmp, dst,
            strerror(errno));
        goto fail;
    }
    return 0;
fail:
    if (out >= 0)
        close(out);
    unlink(tmp);
    return -1;
}
