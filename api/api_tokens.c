/*
 * api_tokens.c - the API's bearer tokens: api.tokens_file, one token per
 * line as "NAME ROLE[,ROLE...] SHA256HEX", the hash of the token (so the
 * file holds no secret that works as a token).
 *
 * PURPOSE   Load with file:line:col errors (for mtad -t and the start);
 *           check a presented token against every entry in constant time
 *           (the hash is compared with CRYPTO_memcmp and no entry is
 *           skipped, so the time says nothing about which entry nearly
 *           matched).
 * CONTRACT  The file: a regular file (not a link), not group- or
 *           world-writable; '#' starts a comment line; names are
 *           [A-Za-z0-9._-], at most 64, unique; roles read, operate,
 *           inject (operate implies read); the hash is 64 hex digits,
 *           optionally written "sha256:HEX".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "api/api_int.h"
#include "common/util.h"

#define API_TOKENS_MAX      1024
#define API_TOKENS_FILE_MAX (1024 * 1024)

struct api_token {
    char          name[65];
    unsigned      roles;
    unsigned char hash[32];
};

struct api_tokens {
    struct api_token *t;
    size_t            n;
};

int
api_roles_parse(const char *s, size_t n, unsigned *out)
{
    size_t   i = 0;
    unsigned m = 0;

    while (i < n) {
        size_t k = i;

        while (k < n && s[k] != ',')
            k++;
        if (k - i == 4 && memcmp(s + i, "read", 4) == 0)
            m |= API_ROLE_READ;
        else if (k - i == 7 && memcmp(s + i, "operate", 7) == 0)
            m |= API_ROLE_OPERATE | API_ROLE_READ;
        else if (k - i == 6 && memcmp(s + i, "inject", 6) == 0)
            m |= API_ROLE_INJECT;
        else
            return -1;
        i = k + 1;
        if (k + 1 == n)
            return -1;              /* a trailing comma */
    }
    if (m == 0)
        return -1;
    *out = m;
    return 0;
}

static int
api_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* one line (no newline) into t; NULL or why, *col the column */
static const char *
api_token_line(const char *l, size_t n, struct api_token *t, size_t *col)
{
    size_t f[3][2], nf = 0, i = 0;
    const char *h;
    size_t hl;

    while (i < n && nf < 4) {
        while (i < n && (l[i] == ' ' || l[i] == '\t'))
            i++;
        if (i >= n)
            break;
        if (nf == 3) {
            *col = i + 1;
            return "unexpected text after the hash";
        }
        f[nf][0] = i;
        while (i < n && l[i] != ' ' && l[i] != '\t')
            i++;
        f[nf][1] = i - f[nf][0];
        nf++;
    }
    if (nf < 3) {
        *col = n + 1;
        return "expected NAME ROLES SHA256HEX";
    }
    *col = f[0][0] + 1;
    if (f[0][1] > 64)
        return "token name longer than 64";
    for (i = 0; i < f[0][1]; i++) {
        char c = l[f[0][0] + i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return "token name: only letters, digits, '.', '_', '-'";
    }
    memcpy(t->name, l + f[0][0], f[0][1]);
    t->name[f[0][1]] = '\0';
    *col = f[1][0] + 1;
    if (api_roles_parse(l + f[1][0], f[1][1], &t->roles) < 0)
        return "roles: a comma-separated list of read, operate, inject";
    *col = f[2][0] + 1;
    h = l + f[2][0];
    hl = f[2][1];
    if (hl > 7 && memcmp(h, "sha256:", 7) == 0)
        h += 7, hl -= 7;
    if (hl != 64)
        return "expected the token's SHA-256 as 64 hex digits";
    for (i = 0; i < 32; i++) {
        int hi = api_hex(h[2 * i]), lo = api_hex(h[2 * i + 1]);

        if (hi < 0 || lo < 0)
            return "expected the token's SHA-256 as 64 hex digits";
        t->hash[i] = (unsigned char)(hi * 16 + lo);
    }
    return NULL;
}

static char *
api_tokens_read(const char *path, size_t *len, char *err, size_t errsz)
{
    struct stat st;
    char       *data;
    ssize_t     r;
    size_t      got = 0;
    int         fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
                         O_NONBLOCK);

    if (fd < 0) {
        snprintf(err, errsz, "%s: api.tokens_file: %s", path,
            strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errsz, "%s: api.tokens_file: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errsz, "%s: api.tokens_file: must not be group- or "
            "world-writable (mode %03o)", path, (unsigned)(st.st_mode & 0777));
        close(fd);
        return NULL;
    }
    if (st.st_size > API_TOKENS_FILE_MAX) {
        snprintf(err, errsz, "%s: api.tokens_file: larger than 1 MiB", path);
        close(fd);
        return NULL;
    }
    data = xmalloc((size_t)st.st_size + 1);
    while (got < (size_t)st.st_size &&
        (r = read(fd, data + got, (size_t)st.st_size - got)) > 0)
        got += (size_t)r;
    close(fd);
    data[got] = '\0';
    *len = got;
    return data;
}

struct api_tokens *
api_tokens_load(const char *path, char *err, size_t errsz)
{
    struct api_tokens *ts;
    char              *data;
    size_t             len, off = 0, lineno = 0;

    if ((data = api_tokens_read(path, &len, err, errsz)) == NULL)
        return NULL;
    ts = xcalloc(1, sizeof(*ts));
    while (off < len) {
        const char      *l = data + off, *nl = memchr(l, '\n', len - off);
        size_t           n = nl ? (size_t)(nl - l) : len - off, col = 1, k;
        const char      *why;
        struct api_token t;

        off += n + (nl != NULL);
        lineno++;
        if (n > 0 && l[n - 1] == '\r')
            n--;
        k = strspn(l, " \t");
        if (k >= n || l[k] == '#')
            continue;
        memset(&t, 0, sizeof(t));
        if ((why = api_token_line(l, n, &t, &col)) == NULL) {
            for (size_t i = 0; i < ts->n; i++)
                if (strcmp(ts->t[i].name, t.name) == 0)
                    why = "duplicate token name", col = k + 1;
        }
        if (why == NULL && ts->n >= API_TOKENS_MAX)
            why = "more than 1024 tokens";
        if (why != NULL) {
            snprintf(err, errsz, "%s:%zu:%zu: %s", path, lineno, col, why);
            free(data);
            api_tokens_free(ts);
            return NULL;
        }
        ts->t = xrealloc(ts->t, (ts->n + 1) * sizeof(*ts->t));
        ts->t[ts->n++] = t;
    }
    OPENSSL_cleanse(data, len);
    free(data);
    return ts;
}

void
api_tokens_free(struct api_tokens *t)
{
    if (t == NULL)
        return;
    free(t->t);
    free(t);
}

size_t
api_tokens_count(const struct api_tokens *t)
{
    return t != NULL ? t->n : 0;
}

int
api_tokens_check(const struct api_tokens *t, const char *token, size_t n,
    const char **name, unsigned *roles)
{
    unsigned char h[32];
    unsigned int  hl = 0;
    int           found = -1;

    if (t == NULL || n == 0 ||
        EVP_Digest(token, n, h, &hl, EVP_sha256(), NULL) != 1 || hl != 32)
        return -1;
    for (size_t i = 0; i < t->n; i++) {
        /* no early exit: every entry costs the same */
        int eq = CRYPTO_memcmp(h, t->t[i].hash, 32) == 0;

        if (eq && found < 0)
            found = (int)i;
    }
    if (found < 0)
        return -1;
    *name = t->t[found].name;
    *roles = t->t[found].roles;
    return 0;
}
