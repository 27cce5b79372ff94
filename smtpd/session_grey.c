/*
 * session_grey.c - greylisting at RCPT (greylist section; grey/grey.h).
 *
 * PURPOSE   Unauthenticated mail on a role mx listener is answered
 *           "450 4.7.1 Greylisted, try again later" at each RCPT whose
 *           triplet (client network, sender, recipient) was first seen
 *           less than greylist.delay ago; a real MTA retries and passes,
 *           and the triplet then passes at once for
 *           greylist.pass_lifetime after its last passing message.
 *           At RCPT (as Postfix's policy servers): before DATA, so no
 *           body is read and nothing reaches the spool.
 * CONTRACT  Exempt, counted as "allowlisted": relay.allow_networks and
 *           authenticated sessions (SF_RELAY), greylist.allow_networks,
 *           a sender or recipient domain in its allow list, and with
 *           greylist.dnswl_exempt a client that screen.dnsbl scored below
 *           0.  Submission listeners and those with greylist: false are
 *           not greylisted at all (SF_GREY unset: not counted).  The 450
 *           is flow control: not a limits.max_errors error, not a
 *           limits.ban count.
 * FAILURE   The file cannot be read or written: the recipient passes
 *           (greylisting fails open), one warning per episode.
 */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"
#include "common/util.h"
#include "config/config.h"
#include "grey/grey.h"
#include "smtpd/smtpd.h"
#include "smtpd/smtpd_int.h"

/* sess_grey_domain - the domain of addr (after its last '@'), "" none. */
static const char *
sess_grey_domain(const char *addr)
{
    const char *at = strrchr(addr, '@');

    return at != NULL ? at + 1 : "";
}


/* sess_grey_exempt - s's transaction for addr is not greylisted. */
static int
sess_grey_exempt(const struct sess *s, const char *addr)
{
    const struct config *cfg = s->d->cfg;
    size_t               i;

    if (s->flags & SF_RELAY)
        return 1;
    if ((s->flags & SF_DNSWL) && cfg->grey_dnswl_exempt)
        return 1;
    for (i = 0; i < cfg->ngrey_allow_networks; i++)
        if (util_cidr_match(&cfg->grey_allow_networks[i], &s->peer.sa))
            return 1;
    if (grey_domain_match(sess_grey_domain(s->txn->env.sender),
        cfg->grey_allow_senders.v, cfg->grey_allow_senders.n))
        return 1;
    return grey_domain_match(sess_grey_domain(addr), cfg->grey_allow_rcpts.v,
        cfg->grey_allow_rcpts.n);
}


int
sess_grey_rcpt(struct sess *s, const char *addr)
{
    static int           failing;   /* a warning per episode */
    const struct config *cfg = s->d->cfg;
    struct grey_params   p;
    enum grey_verdict    v;
    char                 key[GREY_KEY_MAX + 1];
    size_t               klen;

    if (!(s->flags & SF_GREY))
        return 0;
    if (sess_grey_exempt(s, addr)) {
        STATUS_ADD(s->d->st->ops.grey[STATUS_GREY_ALLOWED], 1);
        return 0;
    }
    klen = grey_key(&s->peer.sa, (unsigned)cfg->grey_ipv4_prefix,
        (unsigned)cfg->grey_ipv6_prefix, s->txn->env.sender, addr, key);
    if (klen == 0)
        return 0;                   /* not IP (no such client here) */
    p.delay_ms = cfg->grey_delay_ms;
    p.expiry_ms = cfg->grey_expiry_ms;
    p.pass_lifetime_ms = cfg->grey_pass_lifetime_ms;
    if (grey_check(s->d->grey, key, klen, util_wall_ms(), &p, &v) < 0) {
        if (!failing)
            log_warn("greylist: %s; recipients pass until it works again",
                grey_errstr(s->d->grey));
        failing = 1;
        return 0;
    }
    if (failing)
        log_notice("greylist: the state file works again");
    failing = 0;
    if (v == GREY_PASS) {
        STATUS_ADD(s->d->st->ops.grey[STATUS_GREY_PASSED], 1);
        return 0;
    }
    STATUS_ADD(s->d->st->ops.grey[STATUS_GREY_DEFERRED], 1);
    log_ev(LOGL_INFO, "greylist", LOG_KVS(SESS_CLIENT(s),
        LKV_S("from", s->txn->env.sender), LKV_S("to", addr)),
        "greylist: RCPT from [%s]:%u deferred: 450 4.7.1; from=<%s> "
        "to=<%s> session=%s", s->ip, (unsigned)s->port, s->txn->env.sender,
        addr, s->sid);
    sess_reply_flow(s, "450 4.7.1 Greylisted, try again later");
    return -1;
}


void
smtpd_set_grey(struct smtpd *d, struct grey *g)
{
    d->grey = g;
}
