/*
 * hops.c - the mail-loop hop counter (see smtp.h, "mail-loop guard").
 *
 * PURPOSE   Count "Received:" at line starts in the header section of a
 *           message's content, fed in spans of any size.  State carries
 *           across spans, so every split of the content gives the same
 *           count; the empty line ends the header section and from then on
 *           a span costs one compare, so the body is never scanned.
 *           The same pass notes a "TLS-Required: No" field (RFC 8689 3),
 *           so smtpd looks at each header byte once for both.
 * FAILURE   None: any bytes are valid input.
 */
#include <string.h>

#include "smtp/smtp.h"

enum { SMTP_HOPS_LINE = 0, SMTP_HOPS_MATCH, SMTP_HOPS_MID, SMTP_HOPS_CR,
       SMTP_HOPS_BODY, SMTP_HOPS_VALUE, SMTP_HOPS_VNL };

/* The field names looked for at line starts, lower case with the colon;
 * their first letters differ, so one byte picks the candidate. */
static const char *const smtp_hops_pat[2] = { "received:", "tls-required:" };
#define SMTP_HOPS_RECEIVED 0
#define SMTP_HOPS_TLSREQ   1


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


/* smtp_hops_value_no - the TLS-Required value kept so far is "No". */
static int
smtp_hops_value_no(const struct smtp_hops *h)
{
    return !h->vbad && h->vlen == 2 && (h->val[0] | 0x20) == 'n' &&
        (h->val[1] | 0x20) == 'o';
}


int
smtp_hops_tls_no(const struct smtp_hops *h)
{
    /* VNL: the field's line ended and nothing followed yet; at the end of
     * the content that is a complete field */
    return h->tls_no || (h->state == SMTP_HOPS_VNL && smtp_hops_value_no(h));
}


/* smtp_hops_value - one byte of a TLS-Required value: the first token is
 * kept (2 bytes at most), white space ends it, anything after is bad. */
static void
smtp_hops_value(struct smtp_hops *h, char c)
{
    if (c == ' ' || c == '\t' || c == '\r') {
        h->match = h->vlen > 0;         /* the token has ended */
        return;
    }
    if (h->match || h->vlen == sizeof(h->val))
        h->vbad = 1;
    else
        h->val[h->vlen++] = c;
}


void
smtp_hops_feed(struct smtp_hops *h, const char *p, size_t n)
{
    const char *end = p + n, *nl, *pat;

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
            h->pat = (*p | 0x20) == 't' ? SMTP_HOPS_TLSREQ :
                SMTP_HOPS_RECEIVED;
            h->state = SMTP_HOPS_MATCH;
            break;
        case SMTP_HOPS_MATCH:
            pat = smtp_hops_pat[h->pat];
            if ((*p | 0x20) != pat[h->match]) {
                h->state = SMTP_HOPS_MID;
                break;
            }
            p++;
            if (pat[++h->match] != '\0')
                break;
            if (h->pat == SMTP_HOPS_RECEIVED) {
                h->hops++;
                h->state = SMTP_HOPS_MID;
            } else {
                h->vlen = 0;
                h->vbad = 0;
                h->match = 0;
                h->state = SMTP_HOPS_VALUE;
            }
            break;
        case SMTP_HOPS_VALUE:
            if (*p == '\n')
                h->state = SMTP_HOPS_VNL;
            else
                smtp_hops_value(h, *p);
            p++;
            break;
        case SMTP_HOPS_VNL:             /* folded (RFC 5322 2.2.3)? */
            if (*p == ' ' || *p == '\t') {
                h->state = SMTP_HOPS_VALUE;
                break;
            }
            if (smtp_hops_value_no(h))
                h->tls_no = 1;
            h->state = SMTP_HOPS_LINE;  /* this byte starts a line */
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
