/*
 * smtp.h - the RFC 5321/3030/3461 text layer shared by the inbound server
 * (smtpd/), the outbound client (delivery/) and mtactl.  No I/O, no
 * allocation, no logging: every function works on caller bytes, so the
 * unit tests and fuzzers feed them whole, split and hostile inputs.
 *
 * PARTS     command parsers (parse.c), the DATA byte machine (data.c),
 *           reply and EHLO-capability parsing, enhanced codes and one-pass
 *           dot-stuffing (reply.c), xtext (xtext.c), the mail-loop hop
 *           counter (hops.c).
 *
 * --- command parsers (parse.c) ---
 * Pure parsers for SMTP command lines (RFC 5321, 1870, 3461,
 * 6152, 3030, 6531).  No I/O, no allocation; tested byte by byte.
 *
 * CONTRACT  Input is one command line without its CRLF.  Outputs are
 *           copied into the caller's fixed-size structs (addresses are at
 *           most SMTP_ADDR_MAX-1 bytes: 64 local + @ + 255 domain).
 * FAILURE   Parsers return 0, or -1 and set *reply to a static, complete
 *           SMTP reply without CRLF, e.g. "501 5.1.7 Bad sender address
 *           syntax" or "555 5.5.4 Unsupported option: FOO".  That 555
 *           reply (it names the option) is in a static buffer valid until
 *           the next smtp_parse_* call; all others are string constants.
 *           smtp_parse_path() words its replies for MAIL (5.1.7) when
 *           allow_null is set and for RCPT (5.1.3) otherwise; a non-ASCII
 *           address without SMTPUTF8 gets "553 5.6.7 ...".
 *
 * --- the DATA byte machine (data.c) ---
 * * The DATA byte machine: finds CRLF.CRLF, removes dot-stuffing
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
 *
 * --- replies, capabilities, stuffing (reply.c) ---
 * See the comments at each declaration below.
 */
#ifndef MTAD_SMTP_H
#define MTAD_SMTP_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define SMTP_ADDR_MAX     321
#define SMTP_ENVID_MAX    101
#define SMTP_ORCPT_MAX    501
#define SMTP_LINE_MAX     2048      /* longest command line accepted */

/* ESMTP values the envelope keeps (RFC 6152, 3030, 3461). */
enum smtp_body { SMTP_BODY_7BIT = 0, SMTP_BODY_8BITMIME, SMTP_BODY_BINARYMIME };
enum smtp_ret  { SMTP_RET_NONE = 0, SMTP_RET_FULL, SMTP_RET_HDRS };
#define SMTP_NOTIFY_NEVER    0x1u       /* NOTIFY= bits */
#define SMTP_NOTIFY_SUCCESS  0x2u
#define SMTP_NOTIFY_FAILURE  0x4u
#define SMTP_NOTIFY_DELAY    0x8u

enum smtp_verb {
    SMTP_UNKNOWN = 0, SMTP_EHLO, SMTP_HELO, SMTP_MAIL, SMTP_RCPT, SMTP_DATA,
    SMTP_BDAT, SMTP_RSET, SMTP_NOOP, SMTP_QUIT, SMTP_VRFY, SMTP_HELP,
    SMTP_STARTTLS, SMTP_AUTH
};

struct smtp_mail {
    char        addr[SMTP_ADDR_MAX];    /* "" for <> */
    uint64_t    size;                   /* SIZE=, 0 if absent */
    int         body;                   /* enum smtp_body */
    int         smtputf8;
    int         ret;                    /* enum smtp_ret */
    char        envid[SMTP_ENVID_MAX];  /* decoded; "" if absent */
    int         requiretls;             /* REQUIRETLS (RFC 8689 2): no
                                           value; the caller checks TLS */
};

struct smtp_rcpt {
    char        addr[SMTP_ADDR_MAX];
    unsigned    notify;                 /* SMTP_NOTIFY_* bits, 0 absent */
    char        orcpt[SMTP_ORCPT_MAX];  /* "rfc822;addr" decoded; "" absent */
};

/* Verb is matched case-insensitively; *arg is the rest after one space. */
enum smtp_verb smtp_parse_verb(struct str line, struct str *arg);

/* "FROM:<a@b> SIZE=10 BODY=8BITMIME".  utf8_ok: SMTPUTF8 extension on. */
int     smtp_parse_mail(struct str arg, struct smtp_mail *out,
            const char **reply);
/* "TO:<a@b> NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;a@b".  Empty path and
 * <postmaster> handling as RFC 5321. */
int     smtp_parse_rcpt(struct str arg, int smtputf8, struct smtp_rcpt *out,
            const char **reply);
/* "1234" or "1234 LAST". */
int     smtp_parse_bdat(struct str arg, uint64_t *size, int *last,
            const char **reply);
/* The EHLO/HELO argument: a domain or an address literal. */
int     smtp_parse_helo(struct str arg, const char **reply);

/* A path "<local@domain>" (with optional source route, which is dropped).
 * allow_null: "<>" is valid (MAIL).  utf8: non-ASCII allowed (SMTPUTF8).
 * On success copies "local@domain" (or "") into out; *end is set just past
 * the closing '>'. */
int     smtp_parse_path(const char *p, size_t n, int allow_null, int utf8,
            char *out, size_t outsz, size_t *end, const char **reply);

/* ---- xtext (RFC 3461, xtext.c) ---- */

/* Decode p[0..n) into out (terminated); -1 on bad encoding, on a control
 * byte, or when out is too small. */
int     smtp_xtext_decode(const char *p, size_t n, char *out, size_t outsz);
/* Whether byte c must be written as "+XX": '+', '=' and bytes outside
 * 0x21..0x7e. */
int     smtp_xtext_needs(unsigned char c);
/* Encode the string s into out (terminated).  Returns the encoded length,
 * or -1 (out[0] = '\0') when it does not fit in outsz. */
int     smtp_xtext_encode(const char *s, char *out, size_t outsz);
/* Bytes the encoding of s takes, without the terminator. */
size_t  smtp_xtext_len(const char *s);

/* ---- the DATA byte machine ---- */

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

/* ---- replies, capabilities, stuffing ---- */


#define SMTP_REPLY_MAX   512       /* flattened reply text kept per result */

/* One complete SMTP reply, possibly multi-line ("250-a" ... "250 z"). */
struct smtp_reply {
    int     code;                   /* 100..599 */
    size_t  len;                    /* bytes of the raw reply, with CRLFs */
    char    text[SMTP_REPLY_MAX];  /* "250 2.0.0 Ok" lines joined by ' ',
                                       escaped by util_escape() */
};

/* Parse the first complete reply in p[0..n).  Returns 1 (complete; r
 * filled; r->len bytes used), 0 (need more bytes) or -1 (malformed: a line
 * without a 3-digit code, a code that changes between lines, or more than
 * max bytes without an end).  Lines end in CRLF or a bare LF. */
int     smtp_reply_parse(const char *p, size_t n, size_t max,
            struct smtp_reply *r);

#define SMTP_CAP_PIPELINING  0x01u
#define SMTP_CAP_SIZE        0x02u
#define SMTP_CAP_8BITMIME    0x04u
#define SMTP_CAP_SMTPUTF8    0x08u
#define SMTP_CAP_CHUNKING    0x10u
#define SMTP_CAP_DSN         0x20u
#define SMTP_CAP_BINARYMIME  0x40u
#define SMTP_CAP_STARTTLS    0x80u
#define SMTP_CAP_REQUIRETLS  0x100u     /* RFC 8689 */
#define SMTP_CAP_LIMITS      0x200u     /* RFC 9422 */

/* The arguments of an EHLO reply's keywords; 0 is "none or unlimited". */
struct smtp_ehlo {
    uint64_t size;                  /* SIZE */
    uint32_t rcptmax;               /* LIMITS RCPTMAX: RCPTs per transaction */
    uint32_t mailmax;               /* LIMITS MAILMAX: transactions per
                                       session */
    uint32_t rcptdomainmax;         /* LIMITS RCPTDOMAINMAX: recipient
                                       domains per transaction */
};

/* Capabilities from a raw 250 EHLO reply (every line after the first),
 * and the arguments in *e.  A LIMITS value that is not a decimal integer
 * (or is 0) counts as absent; one too big for 32 bits as UINT32_MAX;
 * unknown limit names are ignored (RFC 9422 3). */
unsigned smtp_ehlo_caps(const char *p, size_t n, struct smtp_ehlo *e);

/* The enhanced status code of a reply: "550 5.1.1 x" or "5.1.1 x" ->
 * "5.1.1"; "550 x" -> "5.0.0" (from the basic code); no code at all ->
 * dflt.  Returns out (outsz >= 16). */
const char *smtp_enhanced(const char *reply, const char *dflt, char *out,
            size_t outsz);

/* Dot-stuffing in one pass (RFC 5321 4.5.2): a '.' at the start of a line
 * (after CRLF, a bare LF, a bare CR, or at the very start) is doubled, so no
 * parser, strict or LF-lenient, finds an end of data inside the body.
 * State carries across calls, so any split of the body gives the same
 * output.  out must have room for SMTP_STUFF_ROOM(n) bytes (worst case
 * ".\n" repeated: 3 bytes out per 2 in); returns the bytes written. */
struct smtp_stuff {
    int     state;                  /* private */
};
#define SMTP_STUFF_ROOM(n)  ((n) + (n) / 2 + 2)
void    smtp_stuff_init(struct smtp_stuff *s);
size_t  smtp_stuff(struct smtp_stuff *s, const char *in, size_t n,
            char *out);
/* The end of data: "\r\n.\r\n" when the body did not end in CRLF, else
 * ".\r\n".  out has room for 5 bytes; returns the bytes written. */
size_t  smtp_stuff_end(struct smtp_stuff *s, char *out);

/* ---- mail-loop guard ---- */

/* The hop counter: "Received:" header fields (name matched without regard
 * to case, at the start of a line) in the header section of a message's
 * content, fed in spans as they arrive (unstuffed DATA or BDAT bytes).  The
 * first empty line (CRLF or bare LF) ends the header section; what follows
 * is not looked at.  Zeroed memory is a fresh counter. */
struct smtp_hops {
    unsigned hops;                  /* Received: fields counted so far */
    int      state;                 /* private */
    unsigned match;                 /* private: bytes of the name matched */
    /* The same pass notes "TLS-Required: No" (RFC 8689 3): the value is
     * "No" (any case) between folding white space; any other value, or
     * a field cut off at the end of the input, does not count. */
    int      tls_no;                /* private: a complete "No" field seen */
    int      pat;                   /* private: which name is matched */
    unsigned vlen;                  /* private: value bytes kept */
    int      vbad;                  /* private: the value is not "No" */
    char     val[2];                /* private: the value's first bytes */
};
void    smtp_hops_init(struct smtp_hops *h);
void    smtp_hops_feed(struct smtp_hops *h, const char *p, size_t n);
/* 1 once the header section has ended (feeding more costs nothing). */
int     smtp_hops_done(const struct smtp_hops *h);
/* 1 when the header section fed so far held a "TLS-Required: No" field
 * (ended by its line end, and not continued by a folded line with more
 * text: that is known only once the next line starts, or the section
 * ends; a message whose last header line has no line end never counts). */
int     smtp_hops_tls_no(const struct smtp_hops *h);

#endif /* MTAD_SMTP_H */
