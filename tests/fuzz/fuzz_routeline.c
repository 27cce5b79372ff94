/*
 * fuzz_routeline.c - libFuzzer target over one line of a routes file
 * (router/route.c, route_line_parse()): what mtactl route import reads
 * from a file an operator may have been handed, "KEY ROUTE".
 *
 * Input: the line as getline() gives it (any bytes, NUL included; a NUL
 * is put after it, in a buffer of exactly that size).
 *
 * Checks: 1, 0 or -1; -1 with a non-empty one-line reason without any
 * control byte (it goes to the terminal), and always for a NUL inside the
 * line; 0 only for a blank or "#" line; on 1 the key and the route point
 * into the line, are copies of bytes of it, pass route_key_check() and
 * route_parse() on their own, have no blank inside the key or around the
 * route, and the line export prints for them ("KEY ROUTE") and the same
 * with a tab read back as the same key and route.
 * Build and run: make fuzz (see tests/fuzz/run.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_why(const char *why, size_t whysz)
{
    size_t n = strnlen(why, whysz), i;

    if (n == 0 || n >= whysz)
        abort();
    for (i = 0; i < n; i++)
        if ((unsigned char)why[i] < 0x20 || why[i] == 0x7f)
            abort();
}


/* ref_blank - the line up to its first CR or LF is blanks, or blanks
 * and then '#'. */
static int
ref_blank(const uint8_t *p, size_t n)
{
    size_t i = 0;

    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    return i == n || p[i] == '\r' || p[i] == '\n' || p[i] == '#';
}


/* fuzz_again - "key<sep>value" parses back to key and value. */
static void
fuzz_again(const char *key, const char *value, char sep)
{
    char  *line, *k, *v, why[512];
    size_t n = strlen(key) + strlen(value) + 2;

    if ((line = malloc(n + 1)) == NULL)
        abort();
    snprintf(line, n + 1, "%s%c%s\n", key, sep, value);
    if (route_line_parse(line, n, &k, &v, why, sizeof(why)) != 1 ||
        strcmp(k, key) != 0 || strcmp(v, value) != 0)
        abort();
    free(line);
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct route rt;
    char        *line, *key = NULL, *value = NULL, why[512];
    size_t       kn, vn;
    int          rc;

    if ((line = malloc(size + 1)) == NULL)
        abort();
    memcpy(line, data, size);
    line[size] = '\0';
    why[0] = '\0';
    rc = route_line_parse(line, size, &key, &value, why, sizeof(why));
    if (rc != -1 && rc != 0 && rc != 1)
        abort();
    if (memchr(data, '\0', size) != NULL && rc != -1)
        abort();
    if (rc == -1)
        fuzz_why(why, sizeof(why));
    if (rc == 0 && !ref_blank(data, size))
        abort();
    if (rc == 1) {
        kn = strlen(key);
        vn = strlen(value);
        if (key < line || key + kn > line + size || value < line ||
            value + vn > line + size ||
            memcmp(key, data + (key - line), kn) != 0 ||
            memcmp(value, data + (value - line), vn) != 0)
            abort();
        if (route_key_check(key, why, sizeof(why)) != 0 ||
            route_parse(value, &rt, why, sizeof(why)) != 0 ||
            strpbrk(key, " \t") != NULL || vn == 0 ||
            value[0] == ' ' || value[0] == '\t' || value[vn - 1] == ' ' ||
            value[vn - 1] == '\t')
            abort();
        fuzz_again(key, value, ' ');
        fuzz_again(key, value, '\t');
    }
    free(line);
    return 0;
}
