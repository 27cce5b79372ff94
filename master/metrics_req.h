/*
 * metrics_req.h - the request parser of the metrics listener (metrics.c):
 *                 pure (no I/O, no master state), apart from metrics.c so
 *                 that tests/fuzz/fuzz_metrics.c can drive it.  Only
 *                 master/ and the tests include it.
 *
 * CONTRACT  metrics_req_parse() looks at the bytes a client sent so far
 *           (req, len; NUL bytes allowed) and answers 0 while the request
 *           is incomplete, else the HTTP status of the answer: 200 (GET
 *           or HEAD of /metrics or /metrics?...), 400 (a request line
 *           without a path, or with a control byte), 404 (another path),
 *           405 (another method), 431 (len reached max without the end
 *           of the header section).  The header section ends at the
 *           first empty line (CRLF CRLF or LF LF); only the request line
 *           (up to its first LF) is read, so bytes after it never change
 *           the answer, and neither does how they were split into reads.
 *           *head is 1 for HEAD (no body in the answer), else 0.
 */
#ifndef MTAD_MASTER_METRICS_REQ_H
#define MTAD_MASTER_METRICS_REQ_H

#include <stddef.h>

int     metrics_req_parse(const char *req, size_t len, size_t max, int *head);

#endif /* MTAD_MASTER_METRICS_REQ_H */
