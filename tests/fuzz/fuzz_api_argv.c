/*
 * fuzz_api_argv.c - libFuzzer target over the master's allow-list of the
 * mtactl command lines the API process may have run (master/api_argv.c):
 * the API process is less trusted than the master, which runs them as
 * root.
 *
 * Input: the arguments separated by LF (at most 63), then optionally a
 * NUL byte and the stdin bytes.
 *
 * Checks, for every command line that passes: its first word is one of
 * the verbs of the table; no argument holds a control byte or is "-c"
 * or "-s"; no route added is a maildir: path; route import reads "-" (stdin), no
 * file; stdin bytes came only with "route import"; no
 * imported line holds a maildir: route.  Build and run: make fuzz.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "master/api_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const verbs[] = { "queue", "show", "hold", "release",
    "flush", "bounce", "delete", "route", "tls", "shaping", "suspend",
    "resume", NULL };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char       *buf, *argv[64], *in = NULL, *p;
    const char *why = NULL;
    size_t      in_len = 0, i;
    int         argc = 0, known = 0;

    if (size > 65536)
        return 0;
    buf = malloc(size + 1);
    memcpy(buf, data, size);
    buf[size] = '\0';
    if ((p = memchr(buf, '\0', size)) != NULL) {
        in = p + 1;
        in_len = size - (size_t)(in - buf);
    }
    for (p = buf; argc < 63; ) {
        argv[argc++] = p;
        if ((p = strchr(p, '\n')) == NULL)
            break;
        *p++ = '\0';
    }
    argv[argc] = NULL;
    if (api_argv_check(argc, argv, in, in_len, &why) != 0) {
        if (why == NULL)
            abort();
        free(buf);
        return 0;
    }
    for (i = 0; verbs[i] != NULL; i++)
        known |= strcmp(argv[0], verbs[i]) == 0;
    if (!known)
        abort();
    for (int a = 0; a < argc; a++) {
        for (p = argv[a]; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                abort();
        if (strcmp(argv[a], "-c") == 0 || strcmp(argv[a], "-s") == 0)
            abort();
    }
    /* a route (route add KEY ROUTE) is never a maildir: path */
    if (argc == 4 && strcmp(argv[0], "route") == 0 &&
        strncasecmp(argv[3], "maildir:", 8) == 0)
        abort();
    /* the one command that reads a file reads stdin */
    if (argc >= 2 && strcmp(argv[0], "route") == 0 &&
        strcmp(argv[1], "import") == 0 && strcmp(argv[argc - 1], "-") != 0)
        abort();
    if (in_len > 0 && (argc < 3 || strcmp(argv[0], "route") != 0 ||
        strcmp(argv[1], "import") != 0))
        abort();
    for (p = in; in_len > 0 && p != NULL && p < in + in_len; ) {
        char  *nl = memchr(p, '\n', (size_t)(in + in_len - p));
        size_t n = nl != NULL ? (size_t)(nl - p) : (size_t)(in + in_len - p);
        char   line[4096];

        if (n >= sizeof(line))
            n = sizeof(line) - 1;
        memcpy(line, p, n);
        line[n] = '\0';
        for (char *q = line; (q = strcasestr(q, "maildir:")) != NULL; q++)
            if (q > line && (q[-1] == ' ' || q[-1] == '\t')) {
                /* the route (after the key) may not be one; a key may
                 * hold the word, a comment too */
                char *k = line + strspn(line, " \t");

                k += strcspn(k, " \t");
                k += strspn(k, " \t");
                if (k == q)
                    abort();
            }
        p = nl != NULL ? nl + 1 : NULL;
    }
    free(buf);
    return 0;
}
