/*
 * tlsrpt.h - SMTP TLS Reporting (RFC 8460): TLS outcomes counted per
 * policy, the counters' wire form between workers and master, and the
 * daily report (JSON, gzip, the mail that carries it).
 *
 * The second contract header of delivery/ (after delivery.h): the
 * worker and the master include it.
 *
 * CONTRACT  Recording: the TLS code of a worker calls tlsrpt_record() once
 *           per connection attempt's outcome (success, or the failure
 *           result type of RFC 8460 4.3).  It adds to the process's one
 *           table (a hash of policies; counters, no formatting, no
 *           allocation once the policy is known) for the current UTC day.
 *           Nothing is recorded until tlsrpt_enable(1).
 *           Aggregation: the worker's tick calls tlsrpt_export(), which
 *           hands each policy's counts to emit() as one policy block
 *           (a CHAN_TLSRPT_ADD payload, common/chan.h) and forgets the counts
 *           emit() took; the master merges them into its day table
 *           (tlsrpt_tab_merge()), shows it (tlsrpt_tab_text()), keeps it
 *           in a file (tlsrpt_tab_dump()/merge) and, once a day, hands
 *           each (day, domain) to a worker (tlsrpt_tab_take()), which
 *           looks up _smtp._tls.<domain> and queues the report
 *           (tlsrpt_send()).
 *           A policy is (day, domain, type, policy strings); each has
 *           success and failure counts and up to TLSRPT_MAX_DETAILS
 *           failure details (result type, MX host, IP, reason code).
 *           Beyond the limits below, sessions are still counted in the
 *           summary and the overflow is counted (tlsrpt_tab_dropped()).
 * WIRE      A policy block, every field %XX-escaped (bytes <= 0x20, >=
 *           0x7f and '%'), "-" for an empty field:
 *             P <day> <sts|tlsa|no-policy-found> <domain> <ok> <fail>
 *             s <policy string>                    (0..16 lines)
 *             d <result> <mx> <ip> <count> <reason> (0..32 lines)
 *           day = UTC days since 1970-01-01.  Parsing is strict: a worker
 *           is less trusted than the master.
 * FAILURE   Nothing here logs.  Parsers return -1 with a sentence in err.
 */
#ifndef MTAD_TLSRPT_H
#define MTAD_TLSRPT_H

#include <stddef.h>
#include <stdint.h>

enum tlsrpt_type {
    TLSRPT_STS = 0,             /* "sts": an MTA-STS policy applied */
    TLSRPT_TLSA,                /* "tlsa": DANE TLSA records applied */
    TLSRPT_NOPOLICY             /* "no-policy-found" */
};

#define TLSRPT_MAX_STRINGS   16         /* policy strings kept per policy */
#define TLSRPT_MAX_STRING    1024       /* bytes of one policy string */
#define TLSRPT_MAX_DETAILS   32         /* failure details per policy */
#define TLSRPT_MAX_POLICIES  8192       /* policies per table */
/* Bytes a table may hold in all (policies, strings, details): the master
 * merges what workers send, and a worker is not trusted to keep it small. */
#define TLSRPT_TAB_BYTES     ((size_t)16 << 20)
#define TLSRPT_WIRE_MAX      60000      /* bytes of one channel message */
#define TLSRPT_DOMAIN_MAX    256

/* One outcome.  Strings are copied when kept; NULL is "". */
struct tlsrpt_event {
    const char         *domain;     /* the policy domain (recipient's) */
    enum tlsrpt_type    type;
    const char *const  *strings;    /* RFC 8460 4.3 policy-string: STS
                                       policy lines, or TLSA records in
                                       presentation form ("3 1 1 ab..") */
    size_t              nstrings;
    const char         *result;     /* NULL or "": success; else a result
                                       type ("certificate-expired" ...) */
    const char         *mx;         /* receiving-mx-hostname */
    const char         *ip;         /* receiving-ip */
    const char         *reason;     /* failure-reason-code (optional) */
};

const char *tlsrpt_type_name(enum tlsrpt_type t);

/* ---- recording (the worker's hot path) ---- */

void    tlsrpt_enable(int on);          /* tlsrpt.enabled */
int     tlsrpt_enabled(void);
/* Count one session's outcome on the current UTC day. */
void    tlsrpt_record(const struct tlsrpt_event *ev);
/* The same for a given day (tests; the clock is read once per call in
 * tlsrpt_record()). */
void    tlsrpt_record_day(const struct tlsrpt_event *ev, uint32_t day);
/* Hand every policy with counts to emit (msg, n: its block); a policy emit() took (returned 0) is removed,
 * the others kept for the next call.  Stops at the first refusal.
 * Returns the number emitted. */
typedef int tlsrpt_emit_fn(const char *msg, size_t n, void *arg);
size_t  tlsrpt_export(tlsrpt_emit_fn *emit, void *arg);
/* Forget everything recorded (tests). */
void    tlsrpt_reset(void);

/* ---- tables (the process table above is one; the master has its own) */

struct tlsrpt_tab;
struct buf;

struct tlsrpt_tab *tlsrpt_tab_new(void);
void    tlsrpt_tab_free(struct tlsrpt_tab *t);          /* NULL ok */
void    tlsrpt_tab_add(struct tlsrpt_tab *t, uint32_t day,
            const struct tlsrpt_event *ev, uint64_t n);
size_t  tlsrpt_tab_count(const struct tlsrpt_tab *t);   /* policies */
size_t  tlsrpt_tab_bytes(const struct tlsrpt_tab *t);   /* what they hold */
uint64_t tlsrpt_tab_dropped(const struct tlsrpt_tab *t);
/* Merge the policy blocks of text[0..n) (wire form).  0, or -1 with err
 * (nothing merged then). */
int     tlsrpt_tab_merge(struct tlsrpt_tab *t, const char *text, size_t n,
            char *err, size_t errsz);
/* The same, for the days lo..hi only.  skipped NULL: a policy of another
 * day fails the whole text (a worker's message); else such policies are
 * left out and counted in *skipped (the state file read back). */
int     tlsrpt_tab_merge_days(struct tlsrpt_tab *t, const char *text,
            size_t n, uint32_t lo, uint32_t hi, size_t *skipped,
            char *err, size_t errsz);
/* Every policy as blocks (the state file), ordered. */
void    tlsrpt_tab_dump(const struct tlsrpt_tab *t, struct buf *out);
/* For mtactl tls report: "domain D day=YYYY-MM-DD type=sts success=N
 * failure=N" per policy (domain NULL: all), with its policy strings and
 * failure details indented under it; network text escaped. */
void    tlsrpt_tab_text(const struct tlsrpt_tab *t, const char *domain,
            struct buf *out);
/* Take out every (day, domain) whose day <= max_day: for each, emit()
 * gets the blocks of that domain's policies (one wire body); the group
 * is removed when emit() returns 0.  Returns the groups emitted. */
typedef int tlsrpt_group_fn(uint32_t day, const char *domain,
            const char *blocks, size_t n, void *arg);
size_t  tlsrpt_tab_take(struct tlsrpt_tab *t, uint32_t max_day,
            tlsrpt_group_fn *emit, void *arg);
/* Days: UTC day number of a wall-clock second, and "YYYY-MM-DD". */
uint32_t tlsrpt_day(uint64_t unix_s);
void    tlsrpt_day_str(uint32_t day, char *out, size_t outsz);

/* ---- the report (tlsrpt_report.c) ---- */

#define TLSRPT_RUA_MAX 8

/* _smtp._tls TXT records (RFC 8460 3): exactly one starting with
 * "v=TLSRPTv1"; its rua= mailto: addresses (percent-decoded, without
 * "?..."), https: URIs counted in *nhttps and left out.  0 with *n >= 0,
 * or -1 with err: no record, several, no rua, no usable address. */
int     tlsrpt_rua_parse(const char *const *txt, size_t ntxt,
            char rua[][256], size_t *n, size_t *nhttps,
            char *err, size_t errsz);

struct tlsrpt_info {
    const char *organization;   /* organization-name */
    const char *contact;        /* contact-info */
    const char *submitter;      /* TLS-Report-Submitter: our host name */
    const char *sender;         /* From: */
    const char *domain;         /* the policy domain reported on */
    uint64_t    start_s, end_s; /* date-range */
    uint64_t    now_ms;         /* Date: */
    const char *report_id;      /* report-id, Message-ID's left part */
    const char *const *rua;     /* To: */
    size_t      nrua;
};

/* The RFC 8460 4 JSON of the policies of t whose domain is in->domain. */
void    tlsrpt_json(const struct tlsrpt_tab *t, const struct tlsrpt_info *in,
            struct buf *out);
/* gzip (RFC 1952) of p[0..n) appended to out.  0 or -1 (zlib failed). */
int     tlsrpt_gzip(const void *p, size_t n, struct buf *out);
/* The whole mail (RFC 8460 5.3): headers, multipart/report;
 * report-type="tlsrpt", a text part, and the .json.gz as
 * application/tlsrpt+gzip in base64; "TLS-Required: No" (RFC 8689), as
 * reports must go out despite TLS failures.  0 or -1 (zlib failed). */
int     tlsrpt_mail(const struct tlsrpt_tab *t, const struct tlsrpt_info *in,
            struct buf *out);

/* ---- sending (tlsrpt_send.c, in a worker) ---- */

struct deliver;
/* A "<start_s> <end_s>\n" + blocks message from the master:
 * look up _smtp._tls.<domain> TXT, and queue the report to its rua=
 * mailto: addresses from tlsrpt.sender.  Logs the outcome. */
void    tlsrpt_send(struct deliver *d, const char *msg, size_t n);

#endif /* MTAD_TLSRPT_H */
