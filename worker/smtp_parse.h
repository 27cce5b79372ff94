/*
 * smtp_parse.h - pure parsers for SMTP command lines (RFC 5321, 1870, 3461,
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
 */
#ifndef MTAD_SMTP_PARSE_H
#define MTAD_SMTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define SMTP_ADDR_MAX     321
#define SMTP_ENVID_MAX    101
#define SMTP_ORCPT_MAX    501
#define SMTP_LINE_MAX     2048      /* longest command line accepted */

enum smtp_verb {
    SMTP_UNKNOWN = 0, SMTP_EHLO, SMTP_HELO, SMTP_MAIL, SMTP_RCPT, SMTP_DATA,
    SMTP_BDAT, SMTP_RSET, SMTP_NOOP, SMTP_QUIT, SMTP_VRFY, SMTP_HELP,
    SMTP_STARTTLS
};

struct smtp_mail {
    char        addr[SMTP_ADDR_MAX];    /* "" for <> */
    uint64_t    size;                   /* SIZE=, 0 if absent */
    int         body;                   /* enum spool_body */
    int         smtputf8;
    int         ret;                    /* enum spool_ret */
    char        envid[SMTP_ENVID_MAX];  /* decoded; "" if absent */
};

struct smtp_rcpt {
    char        addr[SMTP_ADDR_MAX];
    unsigned    notify;                 /* SPOOL_NOTIFY_* bits, 0 absent */
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

/* xtext (RFC 3461): decode into out (terminated); -1 on bad encoding. */
int     smtp_xtext_decode(const char *p, size_t n, char *out, size_t outsz);

#endif /* MTAD_SMTP_PARSE_H */
