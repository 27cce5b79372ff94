/*
 * hops.c - the mail-loop hop counter (see smtp.h, "mail-loop guard").
 *
 * PURPOSE   Count "Received:" at line starts in the header section of a
 *           message's content, fed in spans of any size.  State carries
 *           across spans, so every split of the content gives the same
 *           count; the empty line ends the header section and from then on
 *           a span costs one compare, so the body is never scanned.
 * FAILURE   None: any bytes are valid input.
 */
#include <string.h>

#include "smtp/smtp.h"

enum { SMTP_HOPS_LINE = 0, SMTP_HOPS_MATCH, SMTP_HOPS_MID, SMTP_HOPS_CR,
       SMTP_HOPS_BODY };


void
smtp_hops_init(struct smtp_hops *h)
{
    memset(h, 0, sizeof(*h));
}


int
smtp_hops_done(const struct smtp_hops *h)
{
    return h->state == SMTP_HOPS_BODY;
}


void
smtp_hops_feed(struct smtp_hops *h, const char *p, size_t n)
{
    static const char pat[] = "received:";
    const char       *end = p + n, *nl;

    while (p < end && h->state != SMTP_HOPS_BODY) {
        switch (h->state) {
        case SMTP_HOPS_LINE:
            if (*p == '\r') {
                h->state = SMTP_HOPS_CR;
                p++;
                break;
            }
            if (*p == '\n') {
                h->state = SMTP_HOPS_BODY;
                break;
            }
            h->match = 0;
            h->state = SMTP_HOPS_MATCH;
            break;
        case SMTP_HOPS_MATCH:
            if ((*p | 0x20) != pat[h->match]) {
                h->state = SMTP_HOPS_MID;
                break;
            }
            p++;
            if (++h->match == sizeof(pat) - 1) {
                h->hops++;
                h->state = SMTP_HOPS_MID;
            }
            break;
        case SMTP_HOPS_CR:
            h->state = *p == '\n' ? SMTP_HOPS_BODY : SMTP_HOPS_MID;
            break;
        case SMTP_HOPS_MID:
            if ((nl = memchr(p, '\n', (size_t)(end - p))) == NULL)
                return;
            p = nl + 1;
            h->state = SMTP_HOPS_LINE;
            break;
        }
    }
}
