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

void
proctitle_init(struct proctitle *t, int argc, char **argv)
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
    t->area = argv[0];
    t->size = (size_t)(end - argv[0]) + 1;
    for (i = 0; i < argc; i++)
        argv[i] = xstrdup(argv[i]);
}

void
proctitle_set(const struct proctitle *t, const char *comm, const char *fmt,
    ...)
{
    va_list ap;

    (void)prctl(PR_SET_NAME, comm, 0, 0, 0);
    if (t->area == NULL || t->size < 2)
        return;
    memset(t->area, 0, t->size);
    va_start(ap, fmt);
    vsnprintf(t->area, t->size - 1, fmt, ap);
    va_end(ap);
}
