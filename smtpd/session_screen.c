/*
 * session_screen.c - the screen before the greeting, as Postfix's
 * postscreen does it: a pause (the listener's pregreet), optionally after
 * a "220-" first line, during which a client that talks is refused
 * (554 5.5.1: an SMTP client waits for its turn, a spam bot often does
 * not), and the DNS lists of screen.dnsbl asked in parallel for the
 * client's address and scored by their weights (a score at the threshold
 * refuses with 554 5.7.1, naming the list).
 *
 * CONTRACT  A screened session is in SS_SCREEN from the accept until its
 *           220 (or its refusal); it holds its struct sess_screen and
 *           uses its own timer for the later of the pause and the lists'
 *           answers (bounded by screen.timeout): no thread, no sleep, no
 *           TLS and no spool until it passes.  Clients in
 *           relay.allow_networks are not screened.  A list that does not
 *           answer in time scores 0 (its lookup is cancelled).
 * FAILURE   One log record per refusal, with the session id; lookups that
 *           cannot start (no resolver) score 0 like a silent list.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "config/config.h"
#include "delivery/delivery.h"
#include "dns/dns.h"
#include "smtpd/smtpd_int.h"

/* One list's lookup. */
struct sess_screen_q {
    struct sess_screen *sc;
    struct dns_req     *req;        /* NULL: answered, cancelled, unsent */
};

struct sess_screen {
    struct sess        *s;
    uint64_t            greet_at;   /* ev_now() the pause ends */
    uint64_t            dns_until;  /* the lists' deadline */
    int                 score;
    unsigned            pending;    /* lookups in flight */
    uint32_t            listed;     /* bit i: screen.dnsbl[i] matched */
    size_t              nq;
    struct sess_screen_q q[];       /* one per screen.dnsbl entry */
};


/* sess_greet - queue the greeting: the 220 line, or its "220-" first
 * line before a pause (a client must wait for the last line). */
void
sess_greet(struct sess *s, int first_of_two)
{
    sess_out_take(s);
    buf_printf(&s->out, "220%c%s ESMTP mtad\r\n", first_of_two ? '-' : ' ',
        s->d->cfg->hostname);
    sess_pending_add(s);
}


/* sess_screen_cancel - the lookups still out are dropped (score 0). */
static void
sess_screen_cancel(struct sess_screen *sc)
{
    size_t i;

    for (i = 0; i < sc->nq; i++)
        if (sc->q[i].req != NULL) {
            dns_cancel(sc->q[i].req);
            sc->q[i].req = NULL;
        }
    sc->pending = 0;
}


void
sess_screen_free(struct sess *s)
{
    if (s->screen == NULL)
        return;
    sess_screen_cancel(s->screen);
    free(s->screen);
    s->screen = NULL;
}


/* sess_screen_zones - the names of the lists that matched, ", "-joined;
 * *top: the listing one of the largest weight (the reply names it). */
static void
sess_screen_zones(const struct sess_screen *sc, char *out, size_t outsz,
    const char **top)
{
    const struct config *cfg = sc->s->d->cfg;
    size_t               i, o = 0;
    int                  best = 0, n;

    out[0] = '\0';
    *top = NULL;
    for (i = 0; i < sc->nq; i++) {
        const struct config_dnsbl *z = &cfg->screen_dnsbl[i];

        if (!(sc->listed & (1u << i)))
            continue;
        if (z->weight > best) {
            best = z->weight;
            *top = z->zone;
        }
        n = snprintf(out + o, outsz - o, "%s%s", o ? ", " : "", z->zone);
        if (n < 0 || (size_t)n >= outsz - o)
            break;
        o += (size_t)n;
    }
}


/* sess_screen_decide - the pause is over and the lists answered (or
 * their time ran out): refuse, or greet and read commands. */
static void
sess_screen_decide(struct sess *s)
{
    struct sess_screen *sc = s->screen;
    const struct config *cfg = s->d->cfg;
    char                zones[512], text[600];
    const char         *top;
    int                 score = sc->score;

    sess_screen_zones(sc, zones, sizeof(zones), &top);
    sess_screen_free(s);
    if (score < 0)
        s->flags |= SF_DNSWL;       /* greylist.dnswl_exempt */
    if (top != NULL && score >= cfg->screen_threshold) {
        SESS_REJECT(s, STATUS_REJ_DNSBL);
        log_ev(LOGL_INFO, "reject", LOG_KVS(SESS_CLIENT(s),
            LKV_S("reason", "dnsbl"), LKV_S("dsn", "5.7.1"),
            LKV_S("zones", zones), LKV_I("score", score)),
            "dnsbl: [%s]:%u score %d (threshold %d) zones=%s; session=%s",
            s->ip, (unsigned)s->port, score, cfg->screen_threshold, zones,
            s->sid);
        snprintf(text, sizeof(text), "554 5.7.1 Service unavailable; "
            "client [%s] blocked using %s", s->ip, top);
        sess_close_after(s, text);
        ev_timer_start(s->d->loop, &s->timer, 5000);
        return;
    }
    if (zones[0] != '\0')
        SESS_LOG_INFO(s, "dnsbl: [%s]:%u score %d (threshold %d) zones=%s, "
            "passed; session=%s", s->ip, (unsigned)s->port, score,
            cfg->screen_threshold, zones, s->sid);
    sess_greet(s, 0);
    sess_enter(s, SS_CMD);
    if (s->d->stopping)
        sess_stop_check(s);
}


/* sess_screen_step - decide when both the pause and the lists are done,
 * else wait for the earlier of what is left. */
static void
sess_screen_step(struct sess *s)
{
    struct sess_screen *sc = s->screen;
    uint64_t            now = ev_now(s->d->loop), until;

    if (sc->pending > 0 && now >= sc->dns_until)
        sess_screen_cancel(sc);     /* the silent lists score 0 */
    if (now >= sc->greet_at && sc->pending == 0) {
        sess_screen_decide(s);
        return;
    }
    until = sc->greet_at;
    if (sc->pending > 0 && (now >= until || sc->dns_until < until))
        until = sc->dns_until;
    ev_timer_start(s->d->loop, &s->timer, until - now);
}


static void
sess_screen_answer(struct dns_rrset *set, void *arg)
{
    struct sess_screen_q      *q = arg;
    struct sess_screen        *sc = q->sc;
    size_t                     i = (size_t)(q - sc->q);
    const struct config_dnsbl *z = &sc->s->d->cfg->screen_dnsbl[i];

    q->req = NULL;
    sc->pending--;
    if (dns_rbl_listed(set, z->filter)) {
        sc->score += z->weight;
        sc->listed |= 1u << i;
    }
    dns_rrset_free(set);
    if (sc->pending == 0 && sc->s->state == SS_SCREEN)
        sess_screen_step(sc->s);
}


int
sess_screen_begin(struct sess *s, const struct config_listen *l)
{
    const struct config *cfg = s->d->cfg;
    struct sess_screen  *sc;
    struct dns          *dns = NULL;
    char                 name[DNS_NAME_MAX];
    size_t               i, nz = 0;
    uint64_t             now = ev_now(s->d->loop);

    /* relay.allow_networks are ours (postscreen's permit_mynetworks):
     * mtad-sendmail and the local programs among them */
    if (l == NULL || l->role != CONFIG_ROLE_MX || l->tls_implicit ||
        (s->flags & SF_RELAY))
        return 0;
    if (!l->no_dnsbl && cfg->nscreen_dnsbl > 0 &&
        s->peer.sa.sa_family != AF_UNSPEC &&
        (dns = deliver_dns(s->d->deliver)) != NULL)
        nz = cfg->nscreen_dnsbl;
    if (l->pregreet_ms == 0 && nz == 0)
        return 0;
    sc = xcalloc(1, sizeof(*sc) + nz * sizeof(sc->q[0]));
    sc->s = s;
    sc->nq = nz;
    sc->greet_at = now + l->pregreet_ms;
    sc->dns_until = now + cfg->screen_timeout_ms;
    s->screen = sc;
    for (i = 0; i < nz; i++) {
        sc->q[i].sc = sc;
        if (dns_rbl_name(&s->peer.sa, cfg->screen_dnsbl[i].zone, name,
            sizeof(name)) == 0 && dns_query(dns, name, DNS_T_A,
            sess_screen_answer, &sc->q[i], &sc->q[i].req) == 0)
            sc->pending++;
        else
            sc->q[i].req = NULL;
    }
    sess_enter(s, SS_SCREEN);
    if (l->pregreet_multiline)
        sess_greet(s, 1);
    sess_screen_step(s);
    return 1;
}


/* sess_screen_io - input (or a hangup) before the 220: a client that
 * talks before its turn is refused and closed. */
void
sess_screen_io(struct sess *s, unsigned events)
{
    char    b[512];
    ssize_t n;

    (void)events;
    n = net_read(&s->tp, b, sizeof(b));
    if (n == MTA_AGAIN)
        return;
    if (n <= 0) {
        sess_free(s, n == 0 ? "hangup before the greeting" : strerror(errno));
        return;
    }
    sess_screen_free(s);
    STATUS_ADD(s->d->st->bytes_in, (uint64_t)n);
    SESS_REJECT(s, STATUS_REJ_PREGREET);
    log_ev(LOGL_INFO, "reject", LOG_KVS(SESS_CLIENT(s),
        LKV_S("reason", "pregreet"), LKV_S("dsn", "5.5.1")),
        "pregreet: [%s]:%u sent %zd bytes before its turn (%llu ms after "
        "the connect); session=%s", s->ip, (unsigned)s->port, n,
        (unsigned long long)(ev_now(s->d->loop) - s->active_ms), s->sid);
    sess_close_after(s, "554 5.5.1 Protocol error");
    ev_timer_start(s->d->loop, &s->timer, 5000);
}


/* sess_screen_timer - the pause ended or the lists' time ran out. */
void
sess_screen_timer(struct sess *s)
{
    sess_screen_step(s);
}
