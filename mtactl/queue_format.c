/*
 * queue_format.c - how the queue commands print: ages and times, text
 * escaped for the terminal or as JSON strings, and one message as a queue
 * line, a detail block or a JSON object.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "common/ctl.h"
#include "common/util.h"
#include "config/config.h"
#include "spool/spool.h"
#include "mtactl/mtactl.h"
#include "mtactl/queue_int.h"

/* ---- formatting ------------------------------------------------------- */

/* queue_age - "45s", "12m", "3h5m", "2d4h". */
const char *
queue_age(uint64_t ms, char *buf, size_t sz)
{
    uint64_t s = ms / 1000;

    if (s < 60)
        snprintf(buf, sz, "%lus", (unsigned long)s);
    else if (s < 3600)
        snprintf(buf, sz, "%lum", (unsigned long)(s / 60));
    else if (s < 86400)
        snprintf(buf, sz, "%luh%lum", (unsigned long)(s / 3600),
            (unsigned long)(s % 3600 / 60));
    else
        snprintf(buf, sz, "%lud%luh", (unsigned long)(s / 86400),
            (unsigned long)(s % 86400 / 3600));
    return buf;
}


const char *
queue_time(uint64_t ms, char *buf, size_t sz)
{
    time_t    t = (time_t)(ms / 1000);
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, sz, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}


/* queue_put_esc - n bytes for a terminal, escaped by util_escape() (with
 * flags): a remote server's reply or a client's header cannot move the
 * cursor, retitle the window or fake lines. */
void
queue_put_esc(const char *p, size_t n, unsigned flags)
{
    char   out[UTIL_ESC_ROOM(1024)];
    size_t used, len, step;

    while (n > 0) {
        step = n < 1024 ? n : 1024;
        len = util_escape(out, sizeof(out), p, step, flags, &used);
        fwrite(out, 1, len, stdout);
        p += used;
        n -= used;
    }
}


void
queue_put_text(const char *s)
{
    queue_put_esc(s, strlen(s), 0);
}


/* queue_utf8_len - length of the valid UTF-8 sequence at p (at most n_max
 * bytes: a buffer need not end with a NUL), 0 if none. */
static size_t
queue_utf8_len(const unsigned char *p, size_t n_max)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t        n, i;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        lo = p[0] == 0xe0 ? 0xa0 : 0x80;
        hi = p[0] == 0xed ? 0x9f : 0xbf;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        lo = p[0] == 0xf0 ? 0x90 : 0x80;
        hi = p[0] == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (n > n_max || p[1] < lo || p[1] > hi)
        return 0;
    for (i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}


/* queue_json_mem - n bytes as a JSON string literal; bytes that are not
 * UTF-8 become U+FFFD so the output always parses. */
void
queue_json_mem(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s, *e = p + len;
    size_t               n;

    putchar('"');
    while (p < e) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p++);
            continue;
        }
        if (*p < 0x20 || *p == 0x7f) {
            printf("\\u%04x", *p++);
            continue;
        }
        /* a sequence cut by the end is not UTF-8 either */
        if ((n = queue_utf8_len(p, (size_t)(e - p))) == 0) {
            fputs("\\ufffd", stdout);
            p++;
            continue;
        }
        fwrite(p, 1, n, stdout);
        p += n;
    }
    putchar('"');
}


/* queue_json_tls - ,"tls":... and, when the state names one, ,"source":
 * from a recipient's stored "tls=... source=NAME" (attempt.c). */
static void
queue_json_tls(const char *tls)
{
    const char *src = tls != NULL ? strstr(tls, " source=") : NULL;
    char        buf[512];

    if (tls != NULL && strncmp(tls, "tls=", 4) == 0)
        tls += 4;
    if (src != NULL && (size_t)(src - tls) < sizeof(buf)) {
        memcpy(buf, tls, (size_t)(src - tls));
        buf[src - tls] = '\0';
        fputs(",\"tls\":", stdout);
        queue_json_str(buf);
        fputs(",\"source\":", stdout);
        queue_json_str(src + 8);
        return;
    }
    fputs(",\"tls\":", stdout);
    queue_json_str(tls);
}


/* queue_json_str - s as a JSON string literal (null for NULL). */
void
queue_json_str(const char *s)
{
    if (s == NULL)
        fputs("null", stdout);
    else
        queue_json_mem(s, strlen(s));
}


/* queue_last_error - the last reply of the first unfinished recipient. */
static const char *
queue_last_error(const struct spool_env *env)
{
    for (size_t i = 0; i < env->nrcpt; i++)
        if (env->rcpt[i].status != SPOOL_RCPT_SENT &&
            env->rcpt[i].last_reply != NULL)
            return env->rcpt[i].last_reply;
    return NULL;
}


static size_t
queue_pending(const struct spool_env *env)
{
    size_t n = 0;

    for (size_t i = 0; i < env->nrcpt; i++)
        if (env->rcpt[i].status == SPOOL_RCPT_PENDING)
            n++;
    return n;
}


int
queue_rcpt_status(const struct spool_rcpt *r)
{
    return r->status >= SPOOL_RCPT_PENDING && r->status <= SPOOL_RCPT_BOUNCED ?
        r->status : SPOOL_RCPT_PENDING;
}


/* queue_print_detail - the second line of a message that has a history:
 * what happens next, the attempts so far and the last error. */
static void
queue_print_detail(const struct queue_item *it, uint64_t now)
{
    const struct spool_env *env = it->env;
    const char             *err = queue_last_error(env);
    char                    next[32];

    if (env->attempts == 0 && err == NULL && it->state != QS_HELD)
        return;
    printf("%17s", "");
    if (it->state == QS_HELD)
        fputs("on hold", stdout);
    else if (it->state == QS_ACTIVE)
        fputs("being delivered", stdout);
    else if (env->next_retry_ms > now)
        printf("next retry in %s", queue_age(env->next_retry_ms - now, next,
            sizeof(next)));
    else
        fputs("next retry now", stdout);
    printf(", %u attempt%s", env->attempts, env->attempts == 1 ? "" : "s");
    if (err != NULL) {
        fputs("; last error: ", stdout);
        queue_put_text(err);
    }
    putchar('\n');
}


/* queue_print_line - one message: id, size, arrival, age, state, sender
 * and the first pending recipients; then the detail line. */
void
queue_print_line(const struct queue_item *it, uint64_t now)
{
    const struct spool_env *env = it->env;
    char                    at[32], age[32];
    size_t                  i, shown = 0, pending = queue_pending(env);

    printf("%s %9lu %s %6s %-8s <", env->id, (unsigned long)env->body_size,
        queue_time(env->arrival_ms, at, sizeof(at)),
        queue_age(queue_since(now, env->arrival_ms), age, sizeof(age)),
        queue_state_names[it->state]);
    queue_put_text(env->sender);
    fputs("> ->", stdout);
    for (i = 0; i < env->nrcpt && shown < QUEUE_SHOWN_RCPTS; i++) {
        if (env->rcpt[i].status != SPOOL_RCPT_PENDING)
            continue;
        fputs(shown ? ", <" : " <", stdout);
        queue_put_text(env->rcpt[i].addr);
        putchar('>');
        shown++;
    }
    if (pending > shown)
        printf(" (+%zu more)", pending - shown);
    if (pending == 0)
        fputs(" (no pending recipients)", stdout);
    putchar('\n');
    queue_print_detail(it, now);
}


/* queue_json_notify - NOTIFY= as a list of words ([] when not given:
 * the default, FAILURE). */
static void
queue_json_notify(unsigned notify)
{
    static const struct { unsigned bit; const char *name; } words[] = {
        { SMTP_NOTIFY_NEVER, "NEVER" }, { SMTP_NOTIFY_SUCCESS, "SUCCESS" },
        { SMTP_NOTIFY_FAILURE, "FAILURE" }, { SMTP_NOTIFY_DELAY, "DELAY" }
    };
    int first = 1;

    fputs(",\"notify\":[", stdout);
    for (size_t i = 0; i < ARRAY_LEN(words); i++)
        if (notify & words[i].bit) {
            printf("%s\"%s\"", first ? "" : ",", words[i].name);
            first = 0;
        }
    putchar(']');
}


/* queue_json_item_open - one message as a JSON object, left open for
 * more keys; detail adds what mtactl show prints (client, body, ret,
 * envid, RFC 8689, per recipient notify and orcpt). */
void
queue_json_item_open(const struct queue_item *it, uint64_t now, int detail)
{
    const struct spool_env *env = it->env;
    char                    at[32];
    size_t                  i;

    printf("{\"id\":\"%s\",\"size\":%lu,\"arrival\":\"%s\",\"arrival_ms\":%lu,"
        "\"age_s\":%lu,\"state\":\"%s\",\"held\":%s,\"sender\":", env->id,
        (unsigned long)env->body_size, queue_time(env->arrival_ms, at,
        sizeof(at)), (unsigned long)env->arrival_ms,
        (unsigned long)(queue_since(now, env->arrival_ms) / 1000),
        queue_state_names[it->state], env->held ? "true" : "false");
    queue_json_str(env->sender);
    printf(",\"attempts\":%u,\"next_retry_ms\":%lu,\"recipients\":[",
        env->attempts, (unsigned long)env->next_retry_ms);
    for (i = 0; i < env->nrcpt; i++) {
        const struct spool_rcpt *r = &env->rcpt[i];

        printf("%s{\"address\":", i ? "," : "");
        queue_json_str(r->addr);
        printf(",\"status\":\"%s\",\"relay\":",
            queue_rcpt_status_names[queue_rcpt_status(r)]);
        queue_json_str(r->relay);
        /* the outcome without the log's key: "TLSv1.3 cipher=... verify=ca",
         * "none"; the egress source stored after it (" source=NAME") is a
         * key of its own */
        queue_json_tls(r->tls);
        fputs(",\"last_reply\":", stdout);
        queue_json_str(r->last_reply);
        if (detail) {
            queue_json_notify(r->notify);
            fputs(",\"orcpt\":", stdout);
            queue_json_str(r->orcpt);
        }
        putchar('}');
    }
    fputs("],\"last_error\":", stdout);
    queue_json_str(queue_last_error(env));
    if (!detail)
        return;
    fputs(",\"client\":{\"ip\":", stdout);
    queue_json_str(env->client_ip);
    printf(",\"port\":%u,\"helo\":", env->client_port);
    queue_json_str(env->helo);
    printf("},\"body\":\"%s\",\"smtputf8\":%s,\"ret\":%s,\"envid\":",
        env->body == SMTP_BODY_BINARYMIME ? "BINARYMIME" :
        env->body == SMTP_BODY_8BITMIME ? "8BITMIME" : "7BIT",
        env->smtputf8 ? "true" : "false", env->ret == SMTP_RET_FULL ?
        "\"FULL\"" : env->ret == SMTP_RET_HDRS ? "\"HDRS\"" : "null");
    queue_json_str(env->envid);
    printf(",\"requiretls\":%s,\"tls_optional\":%s",
        env->requiretls ? "true" : "false",
        env->tls_optional ? "true" : "false");
}


void
queue_print_json_item(const struct queue_item *it, uint64_t now)
{
    queue_json_item_open(it, now, 0);
    putchar('}');
}
