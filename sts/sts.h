/*
 * sts.h - MTA-STS (RFC 8461) text: the `_mta-sts` TXT record, the policy
 * file served at https://mta-sts.<domain>/.well-known/mta-sts.txt, and the
 * MX pattern match.  Pure: no I/O, no allocation, no logging; the fetch,
 * cache and enforcement live in tlspol/sts.c.
 *
 * CONTRACT  Every function takes any byte string (the input comes from
 *           DNS and HTTPS, i.e. from the network) and either fills its
 *           output or returns a negative STS_E* code with a one-line
 *           reason in why (escaped: printable ASCII only).
 *           sts_txt_parse(): one TXT record (character-strings joined).
 *             STS_ENOTSTS when it does not start with "v=STSv1" (RFC 8461
 *             3.1: such records are discarded, not errors); STS_EINVAL
 *             when it does but is malformed (no id, a bad field).
 *           sts_policy_parse(): the policy body (RFC 8461 3.2): lines
 *             ended by LF or CRLF, "key: value", fields in any order,
 *             unknown keys ignored, the first of a repeated key wins except
 *             mx which adds.  version must be STSv1, mode one of enforce,
 *             testing, none; max_age 1-10 digits, clamped to
 *             STS_MAX_AGE_MAX; at least one mx unless mode is none.
 *             The first STS_MX_MAX mx patterns are kept; later ones are
 *             checked (a malformed one is an error) and only counted in
 *             mx_ignored, so a long policy restricts more, never less.
 *           sts_mx_match(): RFC 8461 4.1: a pattern is a host name or
 *             "*." and a name, whose "*" stands for exactly one leftmost
 *             label; compared without case and without a final dot.
 */
#ifndef MTAD_STS_H
#define MTAD_STS_H

#include <stddef.h>
#include <stdint.h>

#define STS_EINVAL   (-1)           /* malformed */
#define STS_ENOTSTS  (-2)           /* TXT record that is not v=STSv1 */

#define STS_ID_MAX      33          /* 1*32(ALPHA / DIGIT) and NUL */
#define STS_MAX_AGE_MAX 31557600u   /* RFC 8461 3.2: one year */
#define STS_POLICY_MAX  (64 * 1024) /* RFC 8461 3.3: senders may cap */
#define STS_MX_MAX      64          /* mx patterns kept per policy */
#define STS_NAME_MAX    256         /* a pattern or host name, with NUL */

enum sts_mode { STS_MODE_NONE = 0, STS_MODE_TESTING, STS_MODE_ENFORCE };

struct sts_policy {
    enum sts_mode mode;
    uint32_t      max_age;          /* seconds, <= STS_MAX_AGE_MAX */
    size_t        nmx;
    size_t        mx_ignored;       /* patterns past STS_MX_MAX, dropped */
    char          mx[STS_MX_MAX][STS_NAME_MAX]; /* lower case, no final dot */
};

/* The id of a `_mta-sts` TXT record (txt: joined, len bytes, may hold
 * NULs).  id: STS_ID_MAX bytes. */
int         sts_txt_parse(const char *txt, size_t len, char *id,
                char *why, size_t whysz);
/* A policy body of len bytes (not NUL-terminated; NULs are errors). */
int         sts_policy_parse(const char *text, size_t len,
                struct sts_policy *p, char *why, size_t whysz);
/* 1 when host matches pattern (RFC 8461 4.1), else 0. */
int         sts_pattern_match(const char *pattern, const char *host);
/* 1 when host matches one of p's mx patterns. */
int         sts_mx_match(const struct sts_policy *p, const char *host);
const char *sts_mode_name(enum sts_mode m);  /* "enforce", ... */

#endif /* MTAD_STS_H */
