/*
 * bclass.h - bounce classes: the contract of bclass/, the one header other
 * modules include.  Every failed delivery attempt (a 4xx or 5xx reply, a
 * timeout, a refused connection, a TLS or DNS failure) gets one class out
 * of a small fixed set, in the style of the IANA/Postmastery categories,
 * from rules: the operator's file (delivery.bounce_classes) first, then
 * the built-in rules (bclass_builtin.c; shipped as
 * packaging/bounce-classes.conf, which a unit test keeps identical).
 *
 * CONTRACT  Rules file, one rule a line ('#' starts a comment line, blank
 *           lines skipped):
 *             CLASS COND [COND...]
 *           CLASS is a bclass_name(); every COND of a rule must hold:
 *             code=NNN     the basic reply code; an 'x' is any digit
 *                          (5xx, 55x, 421)
 *             enh=C.S.D    the enhanced status code (RFC 3463); a '*'
 *                          is any value of its part (4.7.*, *.1.1)
 *             text="RE"    a POSIX extended regular expression, case
 *                          insensitive, searched in the reply's text:
 *                          what follows its codes ("550 5.1.1 No such
 *                          user" -> "No such user"; the "host X said: "
 *                          before them is not searched), or the whole
 *                          reply when it has no code (mtad's own
 *                          reasons: "connect to X: Connection refused");
 *                          inside the quotes \" is a quote, every other
 *                          backslash goes to the expression as is
 *           Each COND at most once a rule.  The first rule that matches
 *           wins; no match is "other".  The codes of a reply are those at
 *           its start ("550-5.1.1 ..."; "4.4.7 ..." has only an enhanced
 *           code), else the first ones after a ": " (mtad's "host X said:
 *           421 4.7.0 ..."); a reply without a code matches no code= or
 *           enh= condition.  Regular expressions are compiled once, at
 *           load; classifying runs them against the reply text only.
 * LIFETIME  A struct bclass_rules is immutable after bclass_load() and
 *           may be shared (the config holds it; forked workers inherit
 *           it); bclass_free() it when its config goes.
 * FAILURE   bclass_load() returns NULL and writes "FILE:LINE:COL: what"
 *           (the first error only) to err; nothing here logs.  Allocation
 *           never fails (xmalloc).
 * PREFIX    bclass_, BCLASS_.
 */
#ifndef MTAD_BCLASS_H
#define MTAD_BCLASS_H

#include <stddef.h>

enum bclass {
    BCLASS_OTHER = 0,               /* nothing matched (also: no reply) */
    BCLASS_INVALID_RECIPIENT,       /* the mailbox does not exist */
    BCLASS_BAD_DOMAIN,              /* the domain does not exist or takes
                                       no mail (null MX) */
    BCLASS_MAILBOX_FULL,            /* over quota */
    BCLASS_SPAM_BLOCK,              /* the sender's address or IP is
                                       blocked (reputation, DNSBL) */
    BCLASS_POLICY,                  /* refused by a local policy (relay
                                       denied, authentication, DMARC) */
    BCLASS_RATE_LIMITED,            /* too fast, too many connections */
    BCLASS_CONTENT,                 /* the message itself: size, spam or
                                       virus content */
    BCLASS_PROTOCOL,                /* an SMTP conversation error */
    BCLASS_DNS_FAILURE,             /* a lookup failed */
    BCLASS_TLS_FAILURE,             /* TLS could not be set up as needed */
    BCLASS_NO_ANSWER,               /* refused, timed out, lost */
    BCLASS_MAX
};

struct bclass_rules;

/* The class name of cls ("rate_limited"); "other" for anything out of
 * range.  The names are stable: logs, spool state and metrics use them. */
const char *bclass_name(int cls);
/* The class named name (as bclass_name() spells it), or -1. */
int     bclass_lookup(const char *name, size_t len);

/* Load the rules: path's (NULL: none) and then the built-in ones.  NULL on
 * an error, with "FILE:LINE:COL: what" in err (errsz > 0).  The built-in
 * rules always load (a unit test proves it). */
struct bclass_rules *bclass_load(const char *path, char *err, size_t errsz);
/* Parse rules from text (the file's contents; name for messages) without
 * the built-in rules appended: what bclass_load() does per file, for
 * tests and the fuzzer. */
struct bclass_rules *bclass_parse(const char *name, const char *text,
            size_t len, char *err, size_t errsz);
void    bclass_free(struct bclass_rules *rules);
/* The number of rules (the operator's and the built-in ones). */
size_t  bclass_count(const struct bclass_rules *rules);

/* The class of one failed attempt's reply (the full SMTP form "421 4.7.28
 * text", or mtad's own reason).  rules NULL: the built-in rules of a
 * process-wide copy (loaded at the first call; not thread-safe then).
 * reply NULL: BCLASS_OTHER. */
int     bclass_of(const struct bclass_rules *rules, const char *reply);

/* The built-in rules file, NUL-ended (packaging/bounce-classes.conf). */
const char *bclass_builtin_text(void);

#endif /* MTAD_BCLASS_H */
