/*
 * smtp_data.h - the DATA byte machine: finds CRLF.CRLF, removes dot-stuffing
 * and applies the bare-newline policy in one pass, with no allocation and no
 * per-line callback (qmail's blast(), in spirit).
 *
 * CONTRACT  smtp_data_feed() consumes bytes of the DATA phase and calls
 *           emit() with spans of message content; spans point into the
 *           caller's input or into static storage and are valid only during
 *           the call.  The concatenation of all spans is the message with
 *           dot-stuffing removed, ending with the CRLF before ".".  State
 *           carries across calls, so any split of the input gives the same
 *           output.  End of data is CRLF "." CRLF and nothing else (also
 *           "." CRLF at the very start).  "\n.\n", "\n.\r\n", "\r.\r\n",
 *           "\r\n.\r", "\r\n.\n" never end it (SMTP smuggling).
 *           A bare LF or bare CR sets bad_newline (the message must then be
 *           refused with 550 5.5.2 unless accept_bare is set); scanning goes
 *           on to the real end so the session stays in sync.
 * FAILURE   Returns 1 when the end was found (*used = bytes consumed
 *           including the final CRLF), 0 when all n bytes were consumed and
 *           more are needed, or the negative value emit() returned (stops).
 */
#ifndef MTAD_SMTP_DATA_H
#define MTAD_SMTP_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef int smtp_data_emit_fn(void *arg, const char *p, size_t n);

struct smtp_data {
    int         state;              /* private */
    int         accept_bare;        /* limits.bare_newline: accept */
    int         bad_newline;        /* out: a bare CR or LF was seen */
    uint64_t    size;               /* out: content bytes emitted */
};

void    smtp_data_init(struct smtp_data *d, int accept_bare);
int     smtp_data_feed(struct smtp_data *d, const char *in, size_t n,
            size_t *used, smtp_data_emit_fn *emit, void *arg);

/* smtp_data_bare - the bare-newline check alone, for BDAT content (no dot
 * handling, no end mark).  *cr carries "the last byte was a CR" across
 * calls (start with 0); a CR still pending when the message ends is bare
 * too.  Returns 1 when p[0..n) holds a bare CR or bare LF, else 0. */
int     smtp_data_bare(int *cr, const char *p, size_t n);

#endif /* MTAD_SMTP_DATA_H */
