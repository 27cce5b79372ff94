/*
 * status.c - the shared status page.
 *
 * PURPOSE   One anonymous MAP_SHARED mapping made by the master before the
 *           first fork, so every worker sees the same counters.
 * CONTRACT  status_create() returns a zeroed page; it is never unmapped
 *           (it lives as long as the process tree).
 * FAILURE   Fatal: without the page the master cannot supervise anything.
 */
#include <sys/mman.h>

#include "common/util.h"
#include "common/status.h"

struct status_page *
status_create(void)
{
    void *p;

    p = mmap(NULL, sizeof(struct status_page), PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        fatal("mmap status page");  /* fatal */
    return p;                       /* anonymous mappings are zero-filled */
}
