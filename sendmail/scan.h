/*
 * scan.h - mtad-sendmail's reading of the message a local user gives it:
 *          the -t header scan and the recipient list.  Pure (no I/O),
 *          apart from main.c so that tests/fuzz/fuzz_sendmail.c can drive
 *          it.  Only sendmail/ and the tests include it.
 *
 * CONTRACT  sm_scan_headers() reads the header section of msg (up to the
 *           first empty line, LF or CRLF lines, folded lines joined) and,
 *           with want_rcpt, adds the addresses of every To:, Cc: and Bcc:
 *           field to r; it always removes the Bcc: fields (with their
 *           folded lines) in place, leaves every other byte as it was and
 *           returns through *len the new length.  An address is the part
 *           in <> when there is one, else the words outside quotes and
 *           comments; every address added passes sm_rcpt_ok(): never a
 *           CR, LF or other control byte, blank, '<' or '>' (which would
 *           add to the RCPT command), and at most SM_ADDR_MAX bytes.
 *           Returns the number of addresses refused by that rule (none
 *           of them added; the caller refuses the message).
 *           r's strings are malloc'd and owned by r.
 *           The header section ends at the first empty line, or at the
 *           first line that is neither a field ("name:", RFC 5322 2.2)
 *           nor the folded rest of one: sm_header_end() says where (a
 *           message piped in without headers has none), and the scan
 *           reads no further.
 */
#ifndef MTAD_SENDMAIL_SCAN_H
#define MTAD_SENDMAIL_SCAN_H

#include <stddef.h>

#define SM_ADDR_MAX 1000            /* "RCPT TO:<%s>\r\n" fits sm_cmd's 2048 */

struct sm_rcpts {
    char  **v;
    size_t  n;
};

/* sm_rcpt_ok - 1 when a is an address we put into RCPT TO:<a>. */
int     sm_rcpt_ok(const char *a);
/* sm_rcpt_add - add a[0..n) without its leading and trailing blanks (an
 * empty one is skipped). */
void    sm_rcpt_add(struct sm_rcpts *r, const char *a, size_t n);
void    sm_rcpt_free(struct sm_rcpts *r);
/* sm_header_end - the offset where msg's header section ends: the start
 * of its empty line, of the first line that is no header field, or len. */
size_t  sm_header_end(const char *msg, size_t len);
int     sm_scan_headers(struct sm_rcpts *r, char *msg, size_t *len,
            int want_rcpt);

#endif /* MTAD_SENDMAIL_SCAN_H */
