/*
 * milter.h - a Sendmail milter client (protocol version 6, as Postfix
 * speaks it): one connection per SMTP session per milter, on the worker's
 * event loop, and the pure codec of the wire format.
 *
 * CONTRACT  A chain (milter_chain_new) holds the session's milters in the
 *           order configured and connects to each at once (inet:host:port;
 *           unix:/path where the process may).  Each stage call (connect,
 *           helo, mail, rcpt, data, message) asks the milters in order, each
 *           only for what it negotiated (SMFIC_OPTNEG: steps it skips, the
 *           replies it does not send), and returns MILTER_DONE with the
 *           verdict in milter_chain_result(), or MILTER_PENDING: the chain
 *           then calls done(arg) exactly once from the loop, later, and
 *           the verdict is in milter_chain_result() then.  One stage at a
 *           time.  Nothing blocks: the message is read from its spool file
 *           with pread() (a regular file) as the milters take it.
 *           The first milter that rejects, tempfails or discards decides;
 *           one that accepts is skipped for the rest of the message (or of
 *           the session, at connect).  At the end of the message the
 *           edits of every milter (milter_chain_edits) are in the order
 *           sent; each milter is sent the message with the header and
 *           body edits of those before it (as Postfix's cleanup does).
 *           milter_chain_abort() ends a transaction (SMFIC_ABORT);
 *           milter_chain_free() says SMFIC_QUIT and closes (a stage in
 *           progress is dropped: done is not called).
 * FAILURE   A milter that cannot be reached, dies, times out (connect,
 *           command, eom timeouts) or breaks the protocol is logged once
 *           and disabled for the session; from then on its default action
 *           holds for every stage from MAIL on: tempfail (451 4.7.1) or
 *           accept (as if it were not there: the edits it had sent for
 *           the message are dropped).  SMFIR_PROGRESS extends a wait
 *           to twice its timeout at most.  Replies a milter writes
 *           (SMFIR_REPLYCODE) are checked (a 4xx or 5xx code, else the
 *           plain reject or tempfail) and escaped before they can reach a
 *           client or a log.
 * CODEC     milter_frame/milter_reply_parse never read past n, never
 *           allocate on a bad packet, and accept any byte sequence.
 */
#ifndef MTAD_MILTER_H
#define MTAD_MILTER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/buf.h"

struct ev_loop;

/* --- wire format (libmilter's mfdef.h) -------------------------------- */
#define MILTER_VERSION        6
#define MILTER_CHUNK_MAX      65535     /* a body chunk */
#define MILTER_PKT_MAX        (1024 * 1024)  /* a packet we take */

#define SMFIC_ABORT    'A'
#define SMFIC_BODY     'B'
#define SMFIC_CONNECT  'C'
#define SMFIC_MACRO    'D'
#define SMFIC_BODYEOB  'E'
#define SMFIC_HELO     'H'
#define SMFIC_HEADER   'L'
#define SMFIC_MAIL     'M'
#define SMFIC_EOH      'N'
#define SMFIC_OPTNEG   'O'
#define SMFIC_QUIT     'Q'
#define SMFIC_RCPT     'R'
#define SMFIC_DATA     'T'

#define SMFIR_ADDRCPT     '+'
#define SMFIR_DELRCPT     '-'
#define SMFIR_ADDRCPT_PAR '2'
#define SMFIR_SHUTDOWN    '4'
#define SMFIR_ACCEPT      'a'
#define SMFIR_REPLBODY    'b'
#define SMFIR_CONTINUE    'c'
#define SMFIR_DISCARD     'd'
#define SMFIR_CHGFROM     'e'
#define SMFIR_CONN_FAIL   'f'
#define SMFIR_ADDHEADER   'h'
#define SMFIR_INSHEADER   'i'
#define SMFIR_SETSYMLIST  'l'
#define SMFIR_CHGHEADER   'm'
#define SMFIR_PROGRESS    'p'
#define SMFIR_QUARANTINE  'q'
#define SMFIR_REJECT      'r'
#define SMFIR_SKIP        's'
#define SMFIR_TEMPFAIL    't'
#define SMFIR_REPLYCODE   'y'
#define SMFIR_OPTNEG      'O'

#define SMFIF_ADDHDRS     0x01u
#define SMFIF_CHGBODY     0x02u
#define SMFIF_ADDRCPT     0x04u
#define SMFIF_DELRCPT     0x08u
#define SMFIF_CHGHDRS     0x10u
#define SMFIF_QUARANTINE  0x20u
#define SMFIF_CHGFROM     0x40u
#define SMFIF_ADDRCPT_PAR 0x80u
#define SMFIF_SETSYMLIST  0x100u
#define MILTER_ACTIONS    0x1ffu        /* every action we carry out */

#define SMFIP_NOCONNECT   0x01u
#define SMFIP_NOHELO      0x02u
#define SMFIP_NOMAIL      0x04u
#define SMFIP_NORCPT      0x08u
#define SMFIP_NOBODY      0x10u
#define SMFIP_NOHDRS      0x20u
#define SMFIP_NOEOH       0x40u
#define SMFIP_NR_HDR      0x80u
#define SMFIP_NOUNKNOWN   0x100u
#define SMFIP_NODATA      0x200u
#define SMFIP_SKIP        0x400u
#define SMFIP_RCPT_REJ    0x800u
#define SMFIP_NR_CONN     0x1000u
#define SMFIP_NR_HELO     0x2000u
#define SMFIP_NR_MAIL     0x4000u
#define SMFIP_NR_RCPT     0x8000u
#define SMFIP_NR_DATA     0x10000u
#define SMFIP_NR_UNKN     0x20000u
#define SMFIP_NR_EOH      0x40000u
#define SMFIP_NR_BODY     0x80000u
#define SMFIP_HDR_LEADSPC 0x100000u
/* what we offer: every step may be skipped or left unanswered, SKIP and
 * the leading space; not RCPT_REJ (rejected recipients are not sent) */
#define MILTER_PROTO      0x1ff7ffu

/* One packet of a milter's: its command byte and data (into the input). */
struct milter_pkt {
    char            cmd;
    const uint8_t  *data;
    size_t          len;
};

/* milter_frame - the first whole packet of p[0..n): 1 with *pkt and *used
 * (bytes of the frame), 0 when more bytes are needed, -1 when the length
 * is 0 or over MILTER_PKT_MAX (the stream is broken). */
int     milter_frame(const uint8_t *p, size_t n, struct milter_pkt *pkt,
            size_t *used);

/* A reply, parsed.  Strings point into the packet (NUL-ended there). */
struct milter_reply {
    char            cmd;            /* SMFIR_* */
    uint32_t        index;          /* CHGHEADER, INSHEADER */
    const char     *s1, *s2;        /* name/value, address/args, text */
    const uint8_t  *data;           /* REPLBODY */
    size_t          len;
    uint32_t        ver, actions, proto;    /* OPTNEG */
};
/* milter_reply_parse - 0, or -1 when pkt is not a well-formed reply (an
 * unknown command, a string without its NUL, a short number). */
int     milter_reply_parse(const struct milter_pkt *pkt,
            struct milter_reply *r);

/* milter_reply_text - a REPLYCODE's text made a safe SMTP reply in out:
 * "ddd d.d.d text" with a code of class want ('4' or '5', 0: either)
 * kept, controls escaped, continuation lines ("550-...\r\n550 ...")
 * joined into one; 0, or -1 (out untouched) when it is no such reply. */
int     milter_reply_text(const char *in, char want, char *out,
            size_t outsz);

/* Building commands: one packet appended to b.  Strings include their
 * NUL on the wire. */
void    milter_put(struct buf *b, char cmd, const void *data, size_t len);
void    milter_put_optneg(struct buf *b, uint32_t actions, uint32_t proto);
struct milter_macro {
    const char     *name;           /* "j", "{client_addr}" */
    const char     *value;          /* NULL: not sent */
};
void    milter_put_macros(struct buf *b, char cmd,
            const struct milter_macro *m, size_t n);
/* strings: n NUL-ended strings in one packet (HELO, MAIL, RCPT, HEADER) */
void    milter_put_strs(struct buf *b, char cmd, const char *const *s,
            size_t n);
/* family: 4 or 6 (anything else: unknown, no port or address sent) */
void    milter_put_connect(struct buf *b, const char *host, int family,
            unsigned port, const char *addr);

/* --- the client ------------------------------------------------------- */

struct milter_spec {
    const char     *name;
    const char     *socket;         /* inet:host:port | unix:/path */
    uint64_t        connect_ms, command_ms, eom_ms;
    int             default_accept; /* 1: accept, 0: tempfail */
    uint32_t        proto_off;      /* SMFIP_NO* steps never sent */
};

enum milter_act {
    MILTER_CONTINUE = 0,            /* go on (accept: this milter is done) */
    MILTER_REJECT,                  /* reply: a 5xx */
    MILTER_TEMPFAIL,                /* reply: a 4xx */
    MILTER_DISCARD,                 /* accept and drop the message */
    MILTER_SHUTDOWN                 /* 421: close the session */
};
struct milter_result {
    enum milter_act act;
    char            reply[512];     /* the SMTP reply (REJECT, TEMPFAIL,
                                       SHUTDOWN), safe to send */
    char            who[64];        /* the milter that decided */
};

/* Edits from the end of the message, in the order given. */
enum milter_edit_kind {
    MILTER_ADDHDR, MILTER_INSHDR, MILTER_CHGHDR, MILTER_CHGFROM,
    MILTER_ADDRCPT, MILTER_DELRCPT
};
struct milter_edit {
    int             kind;
    uint32_t        index;          /* INSHDR: position; CHGHDR: n-th */
    char           *name;           /* header name; address */
    char           *value;          /* header value (CHGHDR "": delete);
                                       ESMTP args or NULL */
};
struct milter_edits {
    struct milter_edit *v;
    size_t          n, cap;
    struct buf      body;           /* REPLBODY chunks */
    int             body_set;       /* the body is replaced */
    int             quarantine;
    char            quarantine_why[256];
};

enum { MILTER_DONE = 0, MILTER_PENDING = 1 };

struct milter_chain;
typedef void milter_done_fn(void *arg);

struct milter_chain *milter_chain_new(struct ev_loop *loop,
            const struct milter_spec *specs, size_t n, const char *sid,
            milter_done_fn *done, void *arg);
void    milter_chain_free(struct milter_chain *c);       /* NULL ok */
const struct milter_result *milter_chain_result(const struct milter_chain *c);
/* The client: its name (NULL: unknown), family (AF_INET, AF_INET6),
 * port, address; macros for the stage in m[0..nm). */
int     milter_connect(struct milter_chain *c, const struct milter_macro *m,
            size_t nm, const char *host, int family, unsigned port,
            const char *addr);
int     milter_helo(struct milter_chain *c, const struct milter_macro *m,
            size_t nm, const char *helo);
/* args: the command's address ("<a@b>") then its ESMTP parameters */
int     milter_mail(struct milter_chain *c, const struct milter_macro *m,
            size_t nm, const char *const *args, size_t nargs);
int     milter_rcpt(struct milter_chain *c, const struct milter_macro *m,
            size_t nm, const char *const *args, size_t nargs);
/* The DATA command (before its 354, as Postfix sends it; macros: i). */
int     milter_data(struct milter_chain *c, const struct milter_macro *m,
            size_t nm);
/* The message: len bytes at off in fd (header section, blank line,
 * body; CRLF lines), sent as headers, EOH, body, end of message (and
 * DATA first to a milter that was not sent it at the command: BDAT).
 * max: the largest body a milter may replace it with (0: no limit but
 * the module's own). */
int     milter_message(struct milter_chain *c, const struct milter_macro *m,
            size_t nm, int fd, off_t off, uint64_t len, uint64_t max);
struct milter_edits *milter_chain_edits(struct milter_chain *c);
void    milter_chain_abort(struct milter_chain *c);

/* Edits applied (milter_edit.c, pure): the header section hdr[0..n)
 * (CRLF lines, without the blank line) made what the edits say into out. */
void    milter_edit_headers(const char *hdr, size_t n,
            const struct milter_edits *e, struct buf *out);
void    milter_edits_free(struct milter_edits *e);       /* contents */

#endif /* MTAD_MILTER_H */
