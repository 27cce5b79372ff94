/*
 * dkim.c - mtactl dkim keygen DOMAIN SELECTOR [--algorithm A] [--bits N]
 *          [--out FILE]
 *
 * PURPOSE   Make a DKIM signing key for relay.yaml's dkim.sign and print
 *           the DNS TXT record that publishes its public half, in zone-file
 *           syntax (the value split into 255-byte strings, RFC 1035).
 * CONTRACT  The private key (PEM, PKCS#8) goes to FILE, default
 *           DOMAIN.SELECTOR.pem in the current directory, created with
 *           mode 0600 and O_EXCL | O_NOFOLLOW: an existing file (or a
 *           symlink planted there) is never replaced or followed.  stdout:
 *           one comment line naming the file, then the record.  Needs no
 *           configuration and no running mtad.
 * FAILURE   Exit 1 with "mtactl: dkim keygen: ..." on stderr (the file is
 *           removed if writing it failed); 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dkim/dkim.h"
#include "mtactl/mtactl.h"

#define DKIM_TXT_CHUNK  255             /* one DNS character-string */

void
mtactl_dkim_help(void)
{
    printf(
        "mtactl dkim keygen DOMAIN SELECTOR [--algorithm rsa-sha256|"
        "ed25519-sha256]\n"
        "                   [--bits 2048] [--out FILE]\n"
        "  Make a signing key for dkim.sign in relay.yaml: the private key\n"
        "  goes to FILE (default DOMAIN.SELECTOR.pem, mode 0600, never\n"
        "  replacing a file); the DNS TXT record to publish at\n"
        "  SELECTOR._domainkey.DOMAIN is printed.  RSA keys have 1024 to\n"
        "  8192 bits (default 2048); ed25519-sha256 (RFC 8463) is best\n"
        "  published beside an RSA key, as not every verifier knows it.\n");
}


/* mtactl_dkim_name - letters, digits, '-', '_', '.'; no leading dot. */
static int
mtactl_dkim_name(const char *s, size_t max)
{
    size_t i;

    if (s[0] == '\0' || s[0] == '.' || s[0] == '-' || strlen(s) > max)
        return 0;
    for (i = 0; s[i] != '\0'; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
            (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '.' ||
            s[i] == '_'))
            return 0;
    return 1;
}


/* mtactl_dkim_write - the key into a new file, 0600; -1 with errno. */
static int
mtactl_dkim_write(const char *path, const char *pem)
{
    size_t  n = strlen(pem), off = 0;
    ssize_t w;
    int     fd, e;

    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
        0600);
    if (fd < 0)
        return -1;
    while (off < n) {
        w = write(fd, pem + off, n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            goto fail;
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    return 0;
fail:
    e = errno;
    if (fd >= 0)
        close(fd);
    unlink(path);
    errno = e;
    return -1;
}


static int
mtactl_dkim_keygen(int argc, char **argv)
{
    const char *domain, *selector, *out = NULL, *algname = "rsa-sha256";
    char        path[4096], err[512], *pem, *txt, *end;
    size_t      i, n;
    long        bits = 2048;
    int         alg, nbits_given = 0;

    if (argc < 3) {
        fprintf(stderr, "mtactl: dkim keygen: DOMAIN and SELECTOR needed "
            "(mtactl help dkim)\n");
        return MTACTL_USAGE;
    }
    domain = argv[1];
    selector = argv[2];
    for (i = 3; i < (size_t)argc; i++) {
        if (i + 1 >= (size_t)argc) {
            fprintf(stderr, "mtactl: dkim keygen: %s needs a value\n",
                argv[i]);
            return MTACTL_USAGE;
        }
        if (strcmp(argv[i], "--algorithm") == 0) {
            algname = argv[++i];
        } else if (strcmp(argv[i], "--bits") == 0) {
            errno = 0;
            bits = strtol(argv[++i], &end, 10);
            if (errno != 0 || *end != '\0' || end == argv[i]) {
                fprintf(stderr, "mtactl: dkim keygen: --bits: not a "
                    "number: '%s'\n", argv[i]);
                return MTACTL_USAGE;
            }
            nbits_given = 1;
        } else if (strcmp(argv[i], "--out") == 0) {
            out = argv[++i];
        } else {
            fprintf(stderr, "mtactl: dkim keygen: unknown option '%s'\n",
                argv[i]);
            return MTACTL_USAGE;
        }
    }
    if (!mtactl_dkim_name(domain, 253) || strchr(domain, '.') == NULL) {
        fprintf(stderr, "mtactl: dkim keygen: bad domain '%s'\n", domain);
        return MTACTL_USAGE;
    }
    if (!mtactl_dkim_name(selector, 63)) {
        fprintf(stderr, "mtactl: dkim keygen: bad selector '%s' (letters, "
            "digits, '-', '_', '.')\n", selector);
        return MTACTL_USAGE;
    }
    if ((alg = dkim_alg_parse(algname)) < 0) {
        fprintf(stderr, "mtactl: dkim keygen: --algorithm: rsa-sha256 or "
            "ed25519-sha256, not '%s'\n", algname);
        return MTACTL_USAGE;
    }
    if (alg == DKIM_ED25519_SHA256 && nbits_given) {
        fprintf(stderr, "mtactl: dkim keygen: --bits is for RSA keys\n");
        return MTACTL_USAGE;
    }
    if (alg == DKIM_RSA_SHA256 && (bits < 1024 || bits > 8192)) {
        fprintf(stderr, "mtactl: dkim keygen: --bits: 1024 to 8192\n");
        return MTACTL_USAGE;
    }
    if (out == NULL) {
        snprintf(path, sizeof(path), "%s.%s.pem", domain, selector);
        out = path;
    }
    if (dkim_keygen(alg, (int)bits, &pem, &txt, err, sizeof(err)) != 0) {
        fprintf(stderr, "mtactl: dkim keygen: %s\n", err);
        return MTACTL_FAIL;
    }
    if (mtactl_dkim_write(out, pem) != 0) {
        fprintf(stderr, "mtactl: dkim keygen: %s: %s\n", out,
            errno == EEXIST ? "exists (not replaced)" : strerror(errno));
        free(pem);
        free(txt);
        return MTACTL_FAIL;
    }
    if (alg == DKIM_RSA_SHA256)
        printf("; private key (%s, %ld bits) written to %s\n", algname,
            bits, out);
    else
        printf("; private key (%s) written to %s\n", algname, out);
    printf("%s._domainkey.%s. IN TXT (", selector, domain);
    for (n = strlen(txt), i = 0; i < n; i += DKIM_TXT_CHUNK)
        printf(" \"%.*s\"", (int)(n - i < DKIM_TXT_CHUNK ? n - i :
            DKIM_TXT_CHUNK), txt + i);
    printf(" )\n");
    free(pem);
    free(txt);
    return fflush(stdout) == 0 ? MTACTL_OK : MTACTL_FAIL;
}


int
mtactl_dkim(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "keygen") == 0)
        return mtactl_dkim_keygen(argc - 1, argv + 1);
    fprintf(stderr, "mtactl: dkim: expected 'keygen' (mtactl help dkim)\n");
    return MTACTL_USAGE;
}
