/*
 * sasl.h - the lines of Dovecot's auth-client protocol (version 1.x, as
 * Dovecot 2.3 speaks it on its auth-client socket or an auth
 * inet_listener), without any I/O: what the server sends is parsed here,
 * what the client sends is built here.  smtpd/session_dovecot.c runs the
 * connection.
 *
 * CONTRACT  sasl_parse() takes one server line without its LF (the bytes
 *           as read: any byte may be there) and fills a struct sasl_line
 *           whose strings point into the caller's scratch buffer (valid
 *           until the scratch is reused).  It never reads past n, never
 *           writes past the scratch, and leaves every string
 *           NUL-terminated and unescaped (Dovecot's \001 tab-escaping).  A
 *           line it does not know is SASL_UNKNOWN (the protocol says to
 *           ignore it); a known line with a missing or malformed
 *           required field is SASL_BAD.
 *           Guarantees for callers: a MECH name is 1..SASL_MECH_MAX bytes of
 *           [A-Z0-9_-] (RFC 4422 3.1), upper-cased; a CONT's data is
 *           base64 characters only (it is sent on to an SMTP client as
 *           "334 <data>"); ids are 1..2^32-1.  OK's user and FAIL's user and
 *           reason are untrusted text: a caller escapes them where they
 *           leave (sasl_printable() makes a reply-safe copy).
 *           sasl_escape() tab-escapes a value for a client line.
 * FAILURE   No allocation, no logging.
 */
#ifndef MTAD_SASL_H
#define MTAD_SASL_H

#include <stddef.h>
#include <stdint.h>

#define SASL_MECH_MAX   20          /* RFC 4422 3.1 */
#define SASL_LINE_MAX   16384       /* Dovecot's AUTH_CLIENT_MAX_LINE_LENGTH */

enum sasl_kind {
    SASL_BAD = -1,
    SASL_UNKNOWN = 0,
    SASL_VERSION,                   /* major, minor */
    SASL_MECH,                      /* mech, mech_flags */
    SASL_SPID,
    SASL_CUID,
    SASL_COOKIE,
    SASL_DONE,
    SASL_OK,                        /* id, user (may be NULL) */
    SASL_CONT,                      /* id, data ("" allowed) */
    SASL_FAIL                       /* id, user, reason, temp, ... */
};

/* MECH flags Dovecot sends (the ones a client acts on). */
#define SASL_MECH_PLAINTEXT  0x1u   /* the password travels in clear */
#define SASL_MECH_PRIVATE    0x2u   /* not to be advertised */
#define SASL_MECH_ANONYMOUS  0x4u
#define SASL_MECH_DICTIONARY 0x8u
#define SASL_MECH_ACTIVE     0x10u
#define SASL_MECH_FWD_SECRECY 0x20u
#define SASL_MECH_MUTUAL     0x40u

/* FAIL flags. */
#define SASL_FAIL_TEMP       0x1u   /* "temp" or code=temp_fail */
#define SASL_FAIL_AUTHZ      0x2u   /* code=authz_fail */
#define SASL_FAIL_DISABLED   0x4u   /* code=user_disabled */
#define SASL_FAIL_EXPIRED    0x8u   /* code=pass_expired */

struct sasl_line {
    enum sasl_kind kind;
    unsigned    major, minor;       /* VERSION */
    char        mech[SASL_MECH_MAX + 1];
    unsigned    mech_flags;         /* SASL_MECH_* */
    uint32_t    id;                 /* OK, CONT, FAIL */
    const char *user;               /* OK, FAIL: user=, or NULL */
    const char *reason;             /* FAIL: reason=, or NULL */
    const char *data;               /* CONT: base64, or "" */
    unsigned    fail_flags;         /* SASL_FAIL_* */
    int         resp;               /* OK: a resp= (final server data) came */
};

/* One server line p[0..n) (no LF).  scratch: at least n + 1 bytes. */
enum sasl_kind sasl_parse(const char *p, size_t n, char *scratch,
            size_t scratchsz, struct sasl_line *out);

/* Tab-escapes in[0..n) into out (NUL-terminated): the length written, or
 * -1 when out is too small. */
long    sasl_escape(const char *in, size_t n, char *out, size_t outsz);

/* s's printable ASCII copy into out (others become '?'), cut at outsz - 1. */
void    sasl_printable(const char *s, char *out, size_t outsz);

/* 1 when s[0..n) is base64 characters only (A-Z a-z 0-9 + / =). */
int     sasl_is_base64(const char *s, size_t n);

#endif /* MTAD_SASL_H */
