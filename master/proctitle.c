/*
 * proctitle.c - process titles, so ps and tests can tell the roles apart.
 *
 * PURPOSE   comm (PR_SET_NAME: "mtad: worker", "mtad: logd",
 *           "mtad: master") and the command line shown by ps, rewritten in
 *           the memory of main()'s argv ("mtad: worker 2 (generation 1)").
 * CONTRACT  proctitle_init() is called by main() first; the argv strings
 *           are copied so nothing reads the overwritten area afterwards.
 * FAILURE   Cosmetic: failures are ignored.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>

#include "common/util.h"
#include "master/master.h"

static char  *proctitle_area;
static size_t proctitle_size;

void
proctitle_init(int argc, char **argv)
{
    char *end;
    int   i;

    if (argc <= 0 || argv[0] == NULL)
        return;
    end = argv[0] + strlen(argv[0]);
    for (i = 1; i < argc; i++) {
        if (argv[i] != end + 1)
            break;                  /* only the contiguous part */
        end = argv[i] + strlen(argv[i]);
    }
    proctitle_area = argv[0];
    proctitle_size = (size_t)(end - argv[0]) + 1;
    for (i = 0; i < argc; i++)
        argv[i] = xstrdup(argv[i]);
}

void
proctitle_set(const char *comm, const char *fmt, ...)
{
    va_list ap;

    (void)prctl(PR_SET_NAME, comm, 0, 0, 0);
    if (proctitle_area == NULL || proctitle_size < 2)
        return;
    memset(proctitle_area, 0, proctitle_size);
    va_start(ap, fmt);
    vsnprintf(proctitle_area, proctitle_size - 1, fmt, ap);
    va_end(ap);
}
