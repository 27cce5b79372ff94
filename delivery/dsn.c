/*
 * dsn.c - the text of a failure DSN (RFC 3464, RFC 3461 NOTIFY/RET/ORCPT).
 *
 * PURPOSE   Tell a sender which recipients failed and why, in the form
 *           mail clients and bounce processors parse: multipart/report;
 *           report-type=delivery-status, a human-readable part, the
 *           machine-readable message/delivery-status part, then the
 *           original message or its headers (RET=).
 * CONTRACT  Pure (buffer in, buffer out); see dsn.h.  Status comes from the
 *           recipient's last reply ("550 5.1.1 ..." -> 5.1.1; a basic code
 *           only -> 5.0.0); Diagnostic-Code is "smtp; <reply>" for a peer
 *           reply and "X-mtad; <reason>" for a reason of ours.
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
dsn_wanted(const struct spool_rcpt *rc)
{
    if (rc->status != SPOOL_RCPT_BOUNCED || rc->notified)
        return 0;
    if (rc->notify & SMTP_NOTIFY_NEVER)
        return 0;
    return rc->notify == 0 || (rc->notify & SMTP_NOTIFY_FAILURE) != 0;
}


size_t
dsn_count(const struct spool_env *env)
{
    size_t i, n = 0;

    for (i = 0; i < env->nrcpt; i++)
        if (dsn_wanted(&env->rcpt[i]))
            n++;
    return n;
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


/* dsn_human - the first part: what happened, in words. */
static void
dsn_human(const struct dsn_info *in, struct buf *out)
{
    const struct spool_env *env = in->env;
    size_t                  i;

    buf_printf(out,
        "This is the mail system at host %s.\r\n"
        "\r\n"
        "I'm sorry to have to inform you that your message could not\r\n"
        "be delivered to one or more recipients. It's attached below.\r\n"
        "\r\n"
        "For further assistance, please send mail to postmaster.\r\n"
        "\r\n"
        "                   The mail system\r\n"
        "\r\n", in->hostname);
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *rc = &env->rcpt[i];
        char                     why[DSN_WHY_MAX], host[300];
        char                     addr[DSN_VAL_MAX], relay[DSN_VAL_MAX];

        if (!dsn_wanted(rc))
            continue;
        dsn_why(rc, why, sizeof(why));
        dsn_esc(rc->addr, addr, sizeof(addr));
        if (dsn_peer_reply(why) && dsn_remote(rc->relay, host, sizeof(host)))
            buf_printf(out, "<%s>: host %s said: %s\r\n\r\n", addr,
                dsn_esc(rc->relay, relay, sizeof(relay)), why);
        else
            buf_printf(out, "<%s>: %s\r\n\r\n", addr, why);
    }
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

        if (!dsn_wanted(rc))
            continue;
        dsn_why(rc, why, sizeof(why));
        buf_append(out, "\r\n", 2);
        buf_printf(out, "Final-Recipient: rfc822; %s\r\n",
            dsn_esc(rc->addr, val, sizeof(val)));
        if (rc->orcpt != NULL && rc->orcpt[0] != '\0')
            buf_printf(out, "Original-Recipient: %s\r\n",
                dsn_esc(rc->orcpt, val, sizeof(val)));
        buf_printf(out, "Action: failed\r\n");
        buf_printf(out, "Status: %s\r\n", smtp_enhanced(why, "5.0.0", st,
            sizeof(st)));
        if (dsn_remote(rc->relay, host, sizeof(host)))
            buf_printf(out, "Remote-MTA: dns; %s\r\n",
                dsn_esc(host, val, sizeof(val)));
        buf_printf(out, "Diagnostic-Code: %s; %s\r\n",
            dsn_peer_reply(why) ? "smtp" : "X-mtad", why);
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

    dsn_boundary(in, boundary, sizeof(boundary));
    buf_printf(out, "From: MAILER-DAEMON@%s (Mail Delivery System)\r\n",
        in->hostname);
    buf_printf(out, "To: <%s>\r\n", dsn_esc(env->sender, to, sizeof(to)));
    buf_printf(out, "Subject: Undelivered Mail Returned to Sender\r\n");
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
        buf_printf(out, "Content-Description: Undelivered Message\r\n"
            "Content-Type: message/rfc822\r\n"
            "Content-Transfer-Encoding: %s\r\n\r\n", cte);
    else
        buf_printf(out, "Content-Description: Undelivered Message "
            "Headers\r\nContent-Type: text/rfc822-headers\r\n"
            "Content-Transfer-Encoding: %s\r\n\r\n", cte);
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
