/*
 * dsn.c - the text of a DSN (RFC 3464, RFC 3461 NOTIFY/RET/ORCPT): a
 * failure, a success (delivered, relayed) or a delay warning.
 *
 * PURPOSE   Tell a sender which recipients failed and why, in the form
 *           mail clients and bounce processors parse: multipart/report;
 *           report-type=delivery-status, a human-readable part, the
 *           machine-readable message/delivery-status part, then the
 *           original message or its headers (RET=).
 * CONTRACT  Pure (buffer in, buffer out); see dsn.h.  Status comes from the
 *           recipient's last reply ("550 5.1.1 ..." -> 5.1.1; a basic code
 *           only -> 5.0.0); Diagnostic-Code is "smtp; <reply>" for a peer
 *           reply and "X-mtad; <reason>" for a reason of ours (a success
 *           tells no reason of ours: it would name a local mailbox).
 *           A success or delay status of the wrong class (no 2.x.x or
 *           4.x.x in the reply) becomes its default (2.0.0, 4.0.0); a
 *           failure keeps any (4.4.7 for an expiry).
 * FAILURE   None: buffers grow with xmalloc.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/util.h"
#include "spool/spool.h"
#include "delivery/dsn.h"
#include "delivery/mta.h"

int
dsn_wanted_kind(const struct spool_rcpt *rc, enum dsn_kind kind)
{
    if (rc->notify & SMTP_NOTIFY_NEVER)
        return 0;
    switch (kind) {
    case DSN_SUCCESS:
        return rc->status == SPOOL_RCPT_SENT &&
            rc->success != SPOOL_SUCCESS_NONE &&
            (rc->notify & SMTP_NOTIFY_SUCCESS) != 0;
    case DSN_DELAY:
        return rc->status == SPOOL_RCPT_PENDING && rc->delay_due &&
            !rc->delay_warned && (rc->notify & SMTP_NOTIFY_DELAY) != 0;
    default:
        if (rc->status != SPOOL_RCPT_BOUNCED || rc->notified)
            return 0;
        return rc->notify == 0 || (rc->notify & SMTP_NOTIFY_FAILURE) != 0;
    }
}


int
dsn_wanted(const struct spool_rcpt *rc)
{
    return dsn_wanted_kind(rc, DSN_FAILURE);
}


size_t
dsn_count_kind(const struct spool_env *env, enum dsn_kind kind)
{
    size_t i, n = 0;

    for (i = 0; i < env->nrcpt; i++)
        if (dsn_wanted_kind(&env->rcpt[i], kind))
            n++;
    return n;
}


size_t
dsn_count(const struct spool_env *env)
{
    return dsn_count_kind(env, DSN_FAILURE);
}


size_t
dsn_headers_len(const char *p, size_t n)
{
    size_t i = 0;

    /* an empty line: a line end followed by CRLF or LF */
    if (n >= 2 && p[0] == '\r' && p[1] == '\n')
        return 0;
    if (n >= 1 && p[0] == '\n')
        return 0;
    while (i < n) {
        const char *nl = memchr(p + i, '\n', n - i);

        if (nl == NULL)
            break;
        i = (size_t)(nl - p) + 1;
        if (i < n && p[i] == '\n')
            return i;
        if (i + 1 < n && p[i] == '\r' && p[i + 1] == '\n')
            return i;
    }
    return n;
}


const char *
dsn_date(uint64_t ms, char *out, size_t outsz)
{
    time_t    t = (time_t)(ms / 1000);
    struct tm tm;
    static const char *const wd[] = {
        "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
    static const char *const mo[] = {
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep",
        "Oct", "Nov", "Dec" };

    gmtime_r(&t, &tm);
    /* by hand: strftime's names follow the locale */
    snprintf(out, outsz, "%s, %02d %s %04d %02d:%02d:%02d +0000",
        wd[tm.tm_wday], tm.tm_mday, mo[tm.tm_mon], tm.tm_year + 1900,
        tm.tm_hour, tm.tm_min, tm.tm_sec);
    return out;
}


/* dsn_remote - "host" of a "host[ip]:port" relay, or NULL for none. */
static int
dsn_remote(const char *relay, char *out, size_t outsz)
{
    const char *b;
    size_t      n;

    if (relay == NULL || (b = strchr(relay, '[')) == NULL)
        return 0;
    n = (size_t)(b - relay);
    if (n == 0 || n >= outsz)
        return 0;
    memcpy(out, relay, n);
    out[n] = '\0';
    return 1;
}


/* dsn_why - the recipient's last reply, escaped: the relay escapes a
 * peer's reply before it is stored, but a state file is text on disk and
 * the DSN goes to a human. */
#define DSN_WHY_MAX  2048

static void
dsn_why(const struct spool_rcpt *rc, char *out, size_t outsz)
{
    const char *r = rc->last_reply ? rc->last_reply : "delivery failed";

    (void)util_escape(out, outsz, r, strlen(r), 0, NULL);
}


/* dsn_esc - a value from the envelope or state file (an address, ORCPT,
 * ENVID, relay), escaped like the reply: the SMTP parsers let no control
 * byte into one, but the spool keeps any byte a file holds, and a CR LF
 * in a value would add a header or a MIME part of its own to a message
 * that goes to a human.  A value past DSN_VAL_MAX (none that
 * mtad writes) is cut.  Returns out. */
#define DSN_VAL_MAX  UTIL_ESC_ROOM(SMTP_ORCPT_MAX)

static const char *
dsn_esc(const char *s, char *out, size_t outsz)
{
    (void)util_escape(out, outsz, s, strlen(s), 0, NULL);
    return out;
}


/* dsn_peer_reply - did the text come from a peer ("ddd ...")? */
static int
dsn_peer_reply(const char *r)
{
    return r[0] >= '2' && r[0] <= '5' && r[1] >= '0' && r[1] <= '9' &&
        r[2] >= '0' && r[2] <= '9' && (r[3] == ' ' || r[3] == '\0' ||
        r[3] == '-');
}


/* dsn_intro - the first paragraphs of the human part, by kind. */
static void
dsn_intro(const struct dsn_info *in, struct buf *out)
{
    char date[48];

    buf_printf(out, "This is the mail system at host %s.\r\n\r\n",
        in->hostname);
    switch (in->kind) {
    case DSN_SUCCESS:
        buf_printf(out,
            "Your message was successfully delivered to the destination(s)\r\n"
            "listed below. If the message was delivered to a mailbox you\r\n"
            "will receive no further notifications. Otherwise you may still\r\n"
            "receive notifications of mail delivery errors from other\r\n"
            "systems.\r\n");
        break;
    case DSN_DELAY:
        buf_printf(out,
            "This is a warning only: you do not need to send your message\r\n"
            "again. It could not be delivered yet to the recipient(s)\r\n"
            "listed below, and delivery is still being tried");
        if (in->retry_until_ms != 0)
            buf_printf(out, " until\r\n%s", dsn_date(in->retry_until_ms,
                date, sizeof(date)));
        buf_printf(out, ".\r\n");
        break;
    default:
        buf_printf(out,
            "I'm sorry to have to inform you that your message could not\r\n"
            "be delivered to one or more recipients. It's attached below.\r\n");
        break;
    }
    buf_printf(out,
        "\r\n"
        "For further assistance, please send mail to postmaster.\r\n"
        "\r\n"
        "                   The mail system\r\n"
        "\r\n");
}


/* dsn_human - the first part: what happened, in words. */
static void
dsn_human(const struct dsn_info *in, struct buf *out)
{
    const struct spool_env *env = in->env;
    size_t                  i;

    dsn_intro(in, out);
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *rc = &env->rcpt[i];
        char                     why[DSN_WHY_MAX], host[300];
        char                     addr[DSN_VAL_MAX], relay[DSN_VAL_MAX];

        if (!dsn_wanted_kind(rc, in->kind))
            continue;
        dsn_why(rc, why, sizeof(why));
        dsn_esc(rc->addr, addr, sizeof(addr));
        if (in->kind == DSN_SUCCESS && rc->success == SPOOL_SUCCESS_DELIVERED)
            buf_printf(out, "<%s>: delivered to the mailbox\r\n\r\n", addr);
        else if (in->kind == DSN_SUCCESS && dsn_remote(rc->relay, host,
            sizeof(host)))
            buf_printf(out, "<%s>: relayed to host %s, which does not send "
                "delivery notifications; it said: %s\r\n\r\n", addr,
                dsn_esc(rc->relay, relay, sizeof(relay)), why);
        else if (in->kind == DSN_SUCCESS)
            buf_printf(out, "<%s>: relayed\r\n\r\n", addr);
        else if (dsn_peer_reply(why) &&
            dsn_remote(rc->relay, host, sizeof(host)))
            buf_printf(out, "<%s>: host %s said: %s\r\n\r\n", addr,
                dsn_esc(rc->relay, relay, sizeof(relay)), why);
        else
            buf_printf(out, "<%s>: %s\r\n\r\n", addr, why);
    }
}


/* dsn_action - the Action field's value (RFC 3464 2.3.3). */
static const char *
dsn_action(enum dsn_kind kind, const struct spool_rcpt *rc)
{
    if (kind == DSN_SUCCESS)
        return rc->success == SPOOL_SUCCESS_DELIVERED ? "delivered" :
            "relayed";
    return kind == DSN_DELAY ? "delayed" : "failed";
}


/* dsn_status_code - the Status field: the reply's enhanced code when it
 * has the kind's class, else the kind's default. */
static const char *
dsn_status_code(enum dsn_kind kind, const char *why, char *st, size_t stsz)
{
    const char *dflt = kind == DSN_SUCCESS ? "2.0.0" :
        kind == DSN_DELAY ? "4.0.0" : "5.0.0";

    smtp_enhanced(why, dflt, st, stsz);
    if (kind != DSN_FAILURE && st[0] != dflt[0])
        util_strlcpy(st, dflt, stsz);
    return st;
}


/* dsn_status - the message/delivery-status part's fields. */
static void
dsn_status(const struct dsn_info *in, struct buf *out)
{
    const struct spool_env *env = in->env;
    char                    date[48], val[DSN_VAL_MAX];
    size_t                  i;

    buf_printf(out, "Reporting-MTA: dns; %s\r\n", in->hostname);
    buf_printf(out, "X-Mtad-Queue-ID: %s\r\n", env->id);
    if (env->envid != NULL && env->envid[0] != '\0')
        buf_printf(out, "Original-Envelope-Id: %s\r\n",
            dsn_esc(env->envid, val, sizeof(val)));
    if (env->sender[0] != '\0')
        buf_printf(out, "X-Mtad-Sender: rfc822; %s\r\n",
            dsn_esc(env->sender, val, sizeof(val)));
    buf_printf(out, "Arrival-Date: %s\r\n",
        dsn_date(env->arrival_ms, date, sizeof(date)));
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *rc = &env->rcpt[i];
        char                     why[DSN_WHY_MAX], st[16], host[300];

        if (!dsn_wanted_kind(rc, in->kind))
            continue;
        dsn_why(rc, why, sizeof(why));
        buf_append(out, "\r\n", 2);
        buf_printf(out, "Final-Recipient: rfc822; %s\r\n",
            dsn_esc(rc->addr, val, sizeof(val)));
        if (rc->orcpt != NULL && rc->orcpt[0] != '\0')
            buf_printf(out, "Original-Recipient: %s\r\n",
                dsn_esc(rc->orcpt, val, sizeof(val)));
        buf_printf(out, "Action: %s\r\n", dsn_action(in->kind, rc));
        buf_printf(out, "Status: %s\r\n", dsn_status_code(in->kind, why,
            st, sizeof(st)));
        if (dsn_remote(rc->relay, host, sizeof(host)))
            buf_printf(out, "Remote-MTA: dns; %s\r\n",
                dsn_esc(host, val, sizeof(val)));
        if (dsn_peer_reply(why) || in->kind != DSN_SUCCESS)
            buf_printf(out, "Diagnostic-Code: %s; %s\r\n",
                dsn_peer_reply(why) ? "smtp" : "X-mtad", why);
        if (in->kind == DSN_DELAY && in->retry_until_ms != 0)
            buf_printf(out, "Will-Retry-Until: %s\r\n",
                dsn_date(in->retry_until_ms, date, sizeof(date)));
    }
}


/* dsn_boundary - the MIME boundary: the same for head and tail. */
static void
dsn_boundary(const struct dsn_info *in, char *out, size_t outsz)
{
    snprintf(out, outsz, "%s.%llu/%s", in->env->id,
        (unsigned long long)(in->now_ms / 1000), in->hostname);
}


static const char *
dsn_cte(const struct spool_env *env)
{
    return (env->body != SMTP_BODY_7BIT || env->smtputf8) ? "8bit" : "7bit";
}


void
dsn_build_head(const struct dsn_info *in, struct buf *out)
{
    const struct spool_env *env = in->env;
    char                    date[48], boundary[160], to[DSN_VAL_MAX];
    const char             *cte = dsn_cte(env);
    const char             *what = in->kind == DSN_SUCCESS ?
        "Delivered Message" : in->kind == DSN_DELAY ? "Delayed Message" :
        "Undelivered Message";

    dsn_boundary(in, boundary, sizeof(boundary));
    buf_printf(out, "From: MAILER-DAEMON@%s (Mail Delivery System)\r\n",
        in->hostname);
    buf_printf(out, "To: <%s>\r\n", dsn_esc(env->sender, to, sizeof(to)));
    buf_printf(out, "Subject: %s\r\n", in->kind == DSN_SUCCESS ?
        "Successful Mail Delivery Report" : in->kind == DSN_DELAY ?
        "Delayed Mail (still being retried)" :
        "Undelivered Mail Returned to Sender");
    buf_printf(out, "Date: %s\r\n", dsn_date(in->now_ms, date,
        sizeof(date)));
    buf_printf(out, "Message-ID: <%s.%llu.dsn@%s>\r\n", env->id,
        (unsigned long long)in->now_ms, in->hostname);
    buf_printf(out, "Auto-Submitted: auto-replied\r\n");
    buf_printf(out, "MIME-Version: 1.0\r\n");
    buf_printf(out, "Content-Type: multipart/report; "
        "report-type=delivery-status;\r\n\tboundary=\"%s\"\r\n", boundary);
    buf_printf(out, "Content-Transfer-Encoding: %s\r\n", cte);
    buf_printf(out, "\r\nThis is a MIME-encapsulated message.\r\n\r\n");

    buf_printf(out, "--%s\r\n", boundary);
    buf_printf(out, "Content-Description: Notification\r\n"
        "Content-Type: text/plain; charset=%s\r\n\r\n",
        env->smtputf8 ? "utf-8" : "us-ascii");
    dsn_human(in, out);

    buf_printf(out, "--%s\r\n", boundary);
    buf_printf(out, "Content-Description: Delivery report\r\n"
        "Content-Type: message/delivery-status\r\n\r\n");
    dsn_status(in, out);
    buf_append(out, "\r\n", 2);

    buf_printf(out, "--%s\r\n", boundary);
    if (in->full)
        buf_printf(out, "Content-Description: %s\r\n"
            "Content-Type: message/rfc822\r\n"
            "Content-Transfer-Encoding: %s\r\n\r\n", what, cte);
    else
        buf_printf(out, "Content-Description: %s "
            "Headers\r\nContent-Type: text/rfc822-headers\r\n"
            "Content-Transfer-Encoding: %s\r\n\r\n", what, cte);
}


void
dsn_build_tail(const struct dsn_info *in, int ended_nl, struct buf *out)
{
    char boundary[160];

    dsn_boundary(in, boundary, sizeof(boundary));
    if (!ended_nl)
        buf_append(out, "\r\n", 2);
    buf_printf(out, "\r\n--%s--\r\n", boundary);
}


void
dsn_build(const struct dsn_info *in, struct buf *out)
{
    dsn_build_head(in, out);
    buf_append(out, in->orig, in->orig_len);
    dsn_build_tail(in, in->orig_len == 0 ||
        in->orig[in->orig_len - 1] == '\n', out);
}
